//! The lock table: the replicated state machine of the seed design document.
//!
//! Every node applies the same committed entries in the same order, so every node computes
//! the same table and the same tokens. [`LockTable::apply`] is pure and deterministic: it
//! reads nothing but its arguments and `self`.
//!
//! Rules, in the seed's words (`shared/seed/README.md`, "Replicated commands"):
//! - `Grant{key, lease_ms}` acquires a free key. The token is not in the command: the state
//!   machine assigns it on apply. Here the token is the log index of the Grant entry, so it
//!   comes from replicated state only and strictly increases across all keys, leaders and
//!   restarts. A Grant for a held key is `GrantRejected` ("defensive: never happens in the
//!   normal flow").
//! - `Release{key, token}` frees the key only when `token` names the current holder; any
//!   other release is `NotFound`. (The seed's Release carries only the key; the token is
//!   DESIGN.md's correction, and the key-only variant is kept as the `release-by-key` mutant.)
//! - `Expire{key, token}` removes the lock only if the token matches, so a late or duplicate
//!   expiry cannot remove a lock that was just granted: `Expired{existed}` says whether it did.
//! - `Noop` is Raft's entry at the start of each term and changes nothing.
//!
//! Retries: an entry may carry an [`Origin`] (client id, request sequence number). The table
//! remembers the last request of each client, with its command and outcome, so a retried
//! Grant that was already applied answers with its own token instead of `GrantRejected`
//! (Raft thesis §6.3). The rules of [`LockTable::apply_proposal`]:
//! - Only a retry is answered from the table: the same client, the same request number *and
//!   the same command*. A different command under a used (client, request) is a new command
//!   (a restarted client counting from 1 again, two clients sharing an id): it is applied,
//!   and replaces the remembered request. Answering it from the table handed one client the
//!   token of another's grant, a token granted twice. Refusing it would need an outcome the
//!   seed does not have, and applying it answers it truthfully from its own log position.
//! - Only an outcome that changed the table is replayed: `Granted` and `Released`. A retry of
//!   a command that changed nothing (`GrantRejected`, `NotFound`) is applied again: that is
//!   harmless, and its log position lies inside the op too, so the fresh answer is as
//!   linearizable as the old one. Replaying a refusal stranded a waiting acquire whose lost
//!   `Busy` it retried: its Grant came back refused from the table, round after round, while
//!   the key was free.
//! - The table keeps one request per client: a retry that arrives after the client's next
//!   request was applied is applied as new. Clients run one request at a time per id.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

use crate::bugs::{Bug, BugSet};

/// A lock key: 1 to [`KEY_LEN_MAX`] bytes of `[A-Za-z0-9_.:/-]`.
pub type Key = String;

/// A fencing token: the log index of the Grant entry that created the lock.
pub type Token = u64;

/// The longest key, in bytes, that [`validate_key`] accepts.
pub const KEY_LEN_MAX: usize = 128;

/// A command of the replicated log, exactly the seed's, plus Raft's `Noop`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Command {
    /// Acquire `key` for `lease_ms`; the token is assigned on apply.
    Grant {
        /// The key to acquire.
        key: Key,
        /// The lease, in milliseconds, measured on each node's local clock from apply.
        lease_ms: u64,
    },
    /// Release `key` if it is held under `token`.
    Release {
        /// The key to release.
        key: Key,
        /// The token the releaser holds.
        token: Token,
    },
    /// Lease expiry proposed by the leader: removes the lock only if `token` matches.
    Expire {
        /// The key whose lease ran out.
        key: Key,
        /// The token whose lease ran out.
        token: Token,
    },
    /// Raft's entry at the start of each term.
    Noop,
}

impl Command {
    /// The key this command touches, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            Command::Grant { key, .. }
            | Command::Release { key, .. }
            | Command::Expire { key, .. } => Some(key),
            Command::Noop => None,
        }
    }
}

/// The result of applying one command, exactly the seed's "apply results".
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Outcome {
    /// The Grant succeeded and issued `token`.
    Granted {
        /// The fencing token issued.
        token: Token,
    },
    /// A Grant for a key that is already held.
    GrantRejected,
    /// The Release freed the key.
    Released,
    /// The Release named a key that is not held under that token.
    NotFound,
    /// The Expire was processed; `existed` says whether the lock was really removed.
    Expired {
        /// Whether a lock with the Expire's token was removed.
        existed: bool,
    },
    /// Nothing happened.
    Noop,
}

/// Who proposed an entry: a client and its request sequence number, for deduplication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Origin {
    /// A client id, unique per client process (chosen by the client library).
    pub client: u64,
    /// The client's request sequence number; a retry reuses it with the same command, and a
    /// new command takes a new number.
    pub request: u64,
}

/// The payload of one log entry: a command and, for client requests, who asked.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Proposal {
    /// The client request this entry serves, if any (`None` for Noop, Expire and the
    /// leader's phantom-lock Release).
    pub origin: Option<Origin>,
    /// The command.
    pub command: Command,
}

impl Proposal {
    /// A proposal of the system itself (no client origin).
    pub fn system(command: Command) -> Self {
        Proposal {
            origin: None,
            command,
        }
    }
}

/// A client's last applied request, its command and the outcome it got (the dedupe table).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
struct Answered {
    /// The request number.
    request: u64,
    /// The command applied under it: a retry repeats it exactly.
    command: Command,
    /// The outcome it got.
    outcome: Outcome,
}

impl Answered {
    /// The stored outcome when `origin` and `command` are a retry of this request whose
    /// first apply changed the table; `None` when the command must be applied (see the
    /// module doc).
    fn replay(&self, origin: Origin, command: &Command) -> Option<Outcome> {
        let retry = self.request == origin.request && self.command == *command;
        let changed = matches!(self.outcome, Outcome::Granted { .. } | Outcome::Released);
        (retry && changed).then(|| self.outcome.clone())
    }
}

/// One held lock.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Held {
    /// The token of the Grant that created it.
    pub token: Token,
    /// The lease the Grant asked for, in milliseconds.
    pub lease_ms: u64,
    /// Who holds it, when known.
    pub origin: Option<Origin>,
}

/// The lock table, identical on every node that applied the same prefix of the log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LockTable {
    /// The held locks by key.
    locks: BTreeMap<Key, Held>,
    /// The index of the last applied entry (0 before any).
    last_applied: u64,
    /// The highest token issued so far (0 before any).
    last_token: Token,
    /// The last request of each client, to answer its retries.
    dedupe: BTreeMap<u64, Answered>,
    /// Injected bugs (`lockd --bug`); empty in a correct build. Part of the state so that a
    /// snapshot carries it, and the same on every node of one cluster.
    bugs: BugSet,
    /// The node-local counter of the `token-from-local-counter` mutant. Not replicated in
    /// spirit: it is reset by [`LockTable::reset_local`] when a node restarts.
    local_counter: u64,
}

impl LockTable {
    /// An empty table.
    pub fn new() -> Self {
        LockTable::default()
    }

    /// An empty table with bugs injected (`lockd --bug NAME`).
    pub fn with_bugs(bugs: BugSet) -> Self {
        LockTable {
            bugs,
            ..LockTable::default()
        }
    }

    /// The held lock of `key`, if any.
    pub fn holder(&self, key: &str) -> Option<&Held> {
        self.locks.get(key)
    }

    /// All held locks, by key.
    pub fn locks(&self) -> &BTreeMap<Key, Held> {
        &self.locks
    }

    /// The index of the last applied entry.
    pub fn last_applied(&self) -> u64 {
        self.last_applied
    }

    /// The highest token issued so far.
    pub fn last_token(&self) -> Token {
        self.last_token
    }

    /// The bugs injected into this table.
    pub fn bugs(&self) -> BugSet {
        self.bugs
    }

    /// This table with every client id renamed by `rename` (holders and the dedupe table),
    /// for the model's symmetry reduction.
    pub fn rewrite_clients(&self, rename: impl Fn(u64) -> u64) -> LockTable {
        let locks = self
            .locks
            .iter()
            .map(|(key, held)| {
                let origin = held.origin.map(|o| Origin {
                    client: rename(o.client),
                    request: o.request,
                });
                (
                    key.clone(),
                    Held {
                        origin,
                        ..held.clone()
                    },
                )
            })
            .collect();
        let dedupe = self
            .dedupe
            .iter()
            // The remembered request, command and outcome name no client: only the key moves.
            .map(|(client, answer)| (rename(*client), answer.clone()))
            .collect();
        LockTable {
            locks,
            last_applied: self.last_applied,
            last_token: self.last_token,
            dedupe,
            bugs: self.bugs,
            local_counter: self.local_counter,
        }
    }

    /// A digest of the replicated state: the locks, the dedupe table, the last applied index
    /// and token, the bugs; not the node-local counter. Nodes that applied the same prefix of
    /// the log, one entry at a time or through a snapshot, have the same digest (the trace
    /// replay compares them at every applied index).
    pub fn replicated_digest(&self) -> u64 {
        // Named field by field, so that a new field is a compile error here until it is
        // sorted into replicated or node-local.
        let LockTable {
            locks,
            last_applied,
            last_token,
            dedupe,
            bugs,
            local_counter: _,
        } = self;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (locks, last_applied, last_token, dedupe, bugs).hash(&mut hasher);
        hasher.finish()
    }

    /// Forgets every remembered request (only the `snapshot-loses-state` mutant does this).
    pub fn forget_retries(&mut self) {
        self.dedupe.clear();
    }

    /// Forgets node-local state after a restart (only the `token-from-local-counter` mutant
    /// has any).
    pub fn reset_local(&mut self) {
        self.local_counter = 0;
    }

    /// Applies one committed entry at log `index`, with deduplication by origin and command
    /// (see the module doc for which retries are answered from the table).
    ///
    /// # Panics
    ///
    /// Panics if `index` is not greater than the last applied index: entries are applied once,
    /// in log order, and anything else is a bug in the caller.
    pub fn apply_proposal(&mut self, index: u64, proposal: &Proposal) -> Outcome {
        if let Some(origin) = proposal.origin
            && let Some(outcome) = self
                .dedupe
                .get(&origin.client)
                .and_then(|answered| answered.replay(origin, &proposal.command))
        {
            crate::probe!("retry-answered-from-dedupe");
            self.advance(index);
            return outcome;
        }
        let outcome = self.apply(index, &proposal.command);
        if proposal.origin.is_none()
            && outcome == Outcome::Released
            && matches!(proposal.command, Command::Release { .. })
        {
            crate::probe!("phantom-release-applied");
        }
        if let Some(origin) = proposal.origin {
            let answered = Answered {
                request: origin.request,
                command: proposal.command.clone(),
                outcome: outcome.clone(),
            };
            self.dedupe.insert(origin.client, answered);
            if let Some(held) = self.granted_lock(&outcome, &proposal.command) {
                held.origin = Some(origin);
            }
        }
        outcome
    }

    /// Applies one committed command at log `index`.
    ///
    /// # Panics
    ///
    /// Panics if `index` is not greater than the last applied index, or if a token would not
    /// strictly increase (the token monotonicity invariant).
    pub fn apply(&mut self, index: u64, command: &Command) -> Outcome {
        self.advance(index);
        match command {
            Command::Grant { key, lease_ms } => self.apply_grant(index, key, *lease_ms),
            Command::Release { key, token } => self.apply_release(key, *token),
            Command::Expire { key, token } => self.apply_expire(key, *token),
            Command::Noop => Outcome::Noop,
        }
    }

    fn advance(&mut self, index: u64) {
        assert!(
            index > self.last_applied,
            "apply out of order: index {index} after last_applied {}",
            self.last_applied
        );
        self.last_applied = index;
    }

    fn apply_grant(&mut self, index: u64, key: &str, lease_ms: u64) -> Outcome {
        if self.locks.contains_key(key) {
            return Outcome::GrantRejected;
        }
        let token = if self.bugs.contains(Bug::TokenFromLocalCounter) {
            // Mutant: a node-local counter that restarts from zero after a crash.
            self.local_counter += 1;
            self.local_counter
        } else {
            assert!(
                index > self.last_token,
                "token monotonicity: token {index} not above last token {}",
                self.last_token
            );
            index
        };
        self.last_token = self.last_token.max(token);
        self.locks.insert(
            key.to_owned(),
            Held {
                token,
                lease_ms,
                origin: None,
            },
        );
        Outcome::Granted { token }
    }

    fn apply_release(&mut self, key: &str, token: Token) -> Outcome {
        let matches = match self.locks.get(key) {
            Some(held) => held.token == token || self.bugs.contains(Bug::ReleaseByKey),
            None => false,
        };
        if matches {
            self.locks.remove(key);
            Outcome::Released
        } else {
            Outcome::NotFound
        }
    }

    fn apply_expire(&mut self, key: &str, token: Token) -> Outcome {
        let matches = match self.locks.get(key) {
            Some(held) => held.token == token || self.bugs.contains(Bug::ExpireIgnoresToken),
            None => false,
        };
        if matches {
            crate::probe!("lease-expired-by-leader");
            self.locks.remove(key);
        }
        Outcome::Expired { existed: matches }
    }

    fn granted_lock(&mut self, outcome: &Outcome, command: &Command) -> Option<&mut Held> {
        match (outcome, command) {
            (Outcome::Granted { .. }, Command::Grant { key, .. }) => self.locks.get_mut(key),
            _ => None,
        }
    }
}

/// Why a key is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The key is empty.
    #[error("the key is empty")]
    Empty,
    /// The key is longer than [`KEY_LEN_MAX`] bytes.
    #[error("the key is {len} bytes long, more than the {KEY_LEN_MAX} allowed")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The key holds a character outside `[A-Za-z0-9_.:/-]`.
    #[error("the key holds {found:?} at byte {at}; keys use only A-Z a-z 0-9 _ . : / -")]
    BadCharacter {
        /// The character.
        found: char,
        /// Its byte offset.
        at: usize,
    },
}

/// Checks that `key` is a valid lock key.
pub fn validate_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > KEY_LEN_MAX {
        return Err(KeyError::TooLong { len: key.len() });
    }
    match key
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || "_.:/-".contains(*c)))
    {
        Some((at, found)) => Err(KeyError::BadCharacter { found, at }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(key: &str) -> Command {
        Command::Grant {
            key: key.into(),
            lease_ms: 100,
        }
    }

    #[test]
    fn grant_assigns_the_entry_index_as_token() {
        // Seed, Grant: "every node's state machine assigns it deterministically".
        let mut a = LockTable::new();
        let mut b = LockTable::new();
        assert_eq!(a.apply(3, &grant("x")), Outcome::Granted { token: 3 });
        assert_eq!(b.apply(3, &grant("x")), Outcome::Granted { token: 3 });
        assert_eq!(a, b);
    }

    #[test]
    fn tokens_strictly_increase_across_keys() {
        // DESIGN.md, "The lock service": tokens strictly increase across all keys.
        let mut t = LockTable::new();
        let Outcome::Granted { token: first } = t.apply(1, &grant("x")) else {
            panic!("first grant refused")
        };
        let Outcome::Granted { token: second } = t.apply(2, &grant("y")) else {
            panic!("second grant refused")
        };
        assert!(first < second, "{first} < {second}");
    }

    #[test]
    fn grant_on_held_key_is_rejected() {
        // Seed, GrantRejected: "a Grant arrived for a key that is already held".
        let mut t = LockTable::new();
        t.apply(1, &grant("x"));
        assert_eq!(t.apply(2, &grant("x")), Outcome::GrantRejected);
        assert_eq!(t.holder("x").map(|h| h.token), Some(1));
    }

    #[test]
    fn release_with_stale_token_is_refused() {
        // DESIGN.md: "a release that does not match the current holder is refused (NotFound)".
        let mut t = LockTable::new();
        t.apply(1, &grant("x"));
        t.apply(
            2,
            &Command::Expire {
                key: "x".into(),
                token: 1,
            },
        );
        t.apply(3, &grant("x"));
        let out = t.apply(
            4,
            &Command::Release {
                key: "x".into(),
                token: 1,
            },
        );
        assert_eq!(out, Outcome::NotFound);
        assert_eq!(t.holder("x").map(|h| h.token), Some(3));
    }

    #[test]
    fn release_with_holder_token_frees_the_key() {
        // Seed, Released: "released successfully".
        let mut t = LockTable::new();
        t.apply(1, &grant("x"));
        assert_eq!(
            t.apply(
                2,
                &Command::Release {
                    key: "x".into(),
                    token: 1
                }
            ),
            Outcome::Released
        );
        assert!(t.holder("x").is_none());
    }

    #[test]
    fn release_of_free_key_is_not_found() {
        // Seed, NotFound: "the key to release does not exist".
        let mut t = LockTable::new();
        assert_eq!(
            t.apply(
                1,
                &Command::Release {
                    key: "x".into(),
                    token: 7
                }
            ),
            Outcome::NotFound
        );
    }

    #[test]
    fn late_expire_keeps_the_new_grant() {
        // Seed, "Flow: replicating Expire": an Expire applied late cannot remove the new lock.
        let mut t = LockTable::new();
        t.apply(1, &grant("x"));
        t.apply(
            2,
            &Command::Release {
                key: "x".into(),
                token: 1,
            },
        );
        t.apply(3, &grant("x"));
        let out = t.apply(
            4,
            &Command::Expire {
                key: "x".into(),
                token: 1,
            },
        );
        assert_eq!(out, Outcome::Expired { existed: false });
        assert_eq!(t.holder("x").map(|h| h.token), Some(3));
    }

    #[test]
    fn duplicate_expire_is_a_noop() {
        // Seed, Expire: "a late or duplicate expiry cannot remove a lock ... (idempotent)".
        let mut t = LockTable::new();
        t.apply(1, &grant("x"));
        assert_eq!(
            t.apply(
                2,
                &Command::Expire {
                    key: "x".into(),
                    token: 1
                }
            ),
            Outcome::Expired { existed: true }
        );
        let before = t.locks().clone();
        assert_eq!(
            t.apply(
                3,
                &Command::Expire {
                    key: "x".into(),
                    token: 1
                }
            ),
            Outcome::Expired { existed: false }
        );
        assert_eq!(t.locks(), &before);
    }

    #[test]
    fn noop_changes_nothing_but_last_applied() {
        // Seed, Noop: "nothing happened".
        let mut t = LockTable::new();
        t.apply(1, &grant("x"));
        let locks = t.locks().clone();
        assert_eq!(t.apply(2, &Command::Noop), Outcome::Noop);
        assert_eq!(t.locks(), &locks);
        assert_eq!(t.last_applied(), 2);
    }

    #[test]
    fn retried_grant_gets_its_own_token_back() {
        // DESIGN.md, "Retries": a retried acquire gets its own token back, not GrantRejected.
        let mut t = LockTable::new();
        let origin = Some(Origin {
            client: 9,
            request: 1,
        });
        let p = Proposal {
            origin,
            command: grant("x"),
        };
        assert_eq!(t.apply_proposal(1, &p), Outcome::Granted { token: 1 });
        assert_eq!(t.apply_proposal(2, &p), Outcome::Granted { token: 1 });
        assert_eq!(t.holder("x").and_then(|h| h.origin), origin);
    }

    #[test]
    fn a_different_grant_under_a_used_request_gets_no_stale_token() {
        // DESIGN.md, "Retries": only a retried acquire gets its own token back. A client that
        // reuses a (client, request) pair for another command (a restarted client counting
        // from 1 again, two clients sharing an id) must not be handed the old grant's token:
        // the same token granted twice in the harness.
        let mut t = LockTable::new();
        let origin = Some(Origin {
            client: 9,
            request: 1,
        });
        let first = Proposal {
            origin,
            command: grant("x"),
        };
        let other = Proposal {
            origin,
            command: grant("y"),
        };
        assert_eq!(t.apply_proposal(1, &first), Outcome::Granted { token: 1 });
        assert_eq!(t.apply_proposal(2, &other), Outcome::Granted { token: 2 });
        assert_eq!(t.holder("y").map(|h| h.token), Some(2));
        assert_eq!(t.holder("x").map(|h| h.token), Some(1));
    }

    #[test]
    fn a_release_under_a_used_request_is_applied_not_answered_granted() {
        // DESIGN.md, "Retries": the dedupe answers a retry of the same command only; a
        // Release reusing an acquire's (client, request) is a new command.
        let mut t = LockTable::new();
        let origin = Some(Origin {
            client: 9,
            request: 1,
        });
        let acquire = Proposal {
            origin,
            command: grant("x"),
        };
        let release = Proposal {
            origin,
            command: Command::Release {
                key: "x".into(),
                token: 1,
            },
        };
        assert_eq!(t.apply_proposal(1, &acquire), Outcome::Granted { token: 1 });
        assert_eq!(t.apply_proposal(2, &release), Outcome::Released);
        assert!(t.holder("x").is_none());
    }

    #[test]
    fn a_retried_grant_that_was_refused_is_applied_again() {
        // DESIGN.md, "Retries" and requests.rs: a refused Grant changed nothing, so its retry
        // is applied afresh and answered from the state at its own log position (a waiter
        // retried after a lost Busy must be able to get the key once it is free).
        let mut t = LockTable::new();
        let origin = Some(Origin {
            client: 9,
            request: 1,
        });
        let p = Proposal {
            origin,
            command: grant("x"),
        };
        t.apply(1, &grant("x"));
        assert_eq!(t.apply_proposal(2, &p), Outcome::GrantRejected);
        t.apply(
            3,
            &Command::Release {
                key: "x".into(),
                token: 1,
            },
        );
        assert_eq!(t.apply_proposal(4, &p), Outcome::Granted { token: 4 });
        assert_eq!(t.holder("x").and_then(|h| h.origin), origin);
    }

    #[test]
    fn a_retried_release_gets_released_again() {
        // DESIGN.md, "Retries": a Release that freed the key answers its retry Released, not
        // NotFound (the key it freed is no longer held under that token).
        let mut t = LockTable::new();
        let origin = Some(Origin {
            client: 9,
            request: 2,
        });
        let p = Proposal {
            origin,
            command: Command::Release {
                key: "x".into(),
                token: 1,
            },
        };
        t.apply(1, &grant("x"));
        assert_eq!(t.apply_proposal(2, &p), Outcome::Released);
        assert_eq!(t.apply_proposal(3, &p), Outcome::Released);
    }

    #[test]
    fn expire_ignores_token_mutant_removes_new_grant() {
        // bugs.rs, `expire-ignores-token`: the mutant breaks the seed's Expire rule.
        let mut t = LockTable::with_bugs(BugSet::of(&[Bug::ExpireIgnoresToken]));
        t.apply(1, &grant("x"));
        t.apply(
            2,
            &Command::Release {
                key: "x".into(),
                token: 1,
            },
        );
        t.apply(3, &grant("x"));
        t.apply(
            4,
            &Command::Expire {
                key: "x".into(),
                token: 1,
            },
        );
        assert!(t.holder("x").is_none());
    }

    #[test]
    #[should_panic(expected = "apply out of order")]
    fn applying_out_of_order_panics() {
        // Raft paper §5.3: entries are applied in log order.
        let mut t = LockTable::new();
        t.apply(2, &Command::Noop);
        t.apply(2, &Command::Noop);
    }

    #[test]
    fn key_validation_names_the_reason() {
        // DESIGN.md / issue "lockd as real processes": bad keys get a clear error.
        assert_eq!(validate_key(""), Err(KeyError::Empty));
        assert!(matches!(
            validate_key(&"a".repeat(200)),
            Err(KeyError::TooLong { len: 200 })
        ));
        assert_eq!(
            validate_key("a b"),
            Err(KeyError::BadCharacter { found: ' ', at: 1 })
        );
        assert_eq!(validate_key("jobs/nightly-1"), Ok(()));
    }
}
