//! What goes into the core and what comes out: [`Input`], [`Output`], and the IO contract.

use serde::{Deserialize, Serialize};

use super::message::{Entry, Envelope, HardState, Index, Message, NodeId, Snapshot, Term};
use crate::lock::{Key, Origin, Outcome, Proposal, Token};

/// A request id chosen by the driver, unique among the requests one node has open.
/// The async server allocates a counter; the model encodes (client actor, sequence).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestId(pub u64);

/// A client's request to the lock service.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ClientRequest {
    /// Acquire `key` for `lease_ms`. With `wait_ms == 0` it is a try-acquire (busy at once
    /// when held); otherwise the request waits in the leader's FIFO queue for the key up to
    /// `wait_ms`.
    Acquire {
        /// The key.
        key: Key,
        /// The lease, in milliseconds (1 to `Config::lease_ms_max`).
        lease_ms: u64,
        /// How long to wait for a held key, in milliseconds (0 = try once).
        wait_ms: u64,
        /// Who asks, for deduplication of retries.
        origin: Option<Origin>,
    },
    /// Release `key`, held under `token`.
    Release {
        /// The key.
        key: Key,
        /// The token the client holds.
        token: Token,
        /// Who asks, for deduplication of retries.
        origin: Option<Origin>,
    },
    /// Give back `key` if a grant of this session's earlier request `request` holds it: the
    /// client stopped waiting for that acquire ([`crate::lock::Command::Abandon`]).
    Abandon {
        /// The key the abandoned acquire asked for.
        key: Key,
        /// The abandoned request's number.
        request: u64,
        /// Who asks: the session and a request number above `request`.
        origin: Option<Origin>,
    },
    /// Register a client session (the answer is [`Response::Registered`]).
    RegisterSession {
        /// The client's label (`--client-id`): not replicated and never trusted, it only
        /// names the session in logs and reports.
        label: u64,
    },
}

/// The core's answer to a [`ClientRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Response {
    /// The key is held under `token` (committed and applied).
    Granted {
        /// The fencing token.
        token: Token,
    },
    /// The key was held (committed state) at some instant during the request; nothing was
    /// granted.
    Busy,
    /// The release was committed and freed the key.
    Released,
    /// The release was committed, and the key was not held under that token.
    NotHolder,
    /// This node is not the leader and did not propose anything; `leader` is its best guess.
    NotLeader {
        /// The leader this node last heard from, if any.
        leader: Option<NodeId>,
    },
    /// The request may or may not take effect (for example, the leader stepped down while it
    /// was in the log). Clients record such an op as `info`.
    Unknown {
        /// Why the outcome is unknown.
        reason: String,
    },
    /// The request is malformed or a bound was reached; nothing was proposed.
    Invalid {
        /// Why, in words.
        reason: String,
    },
    /// The session is registered (committed) under id `session`.
    Registered {
        /// The session id to put in every request's origin.
        session: crate::lock::SessionId,
    },
    /// The request's session is expired, evicted or unknown; this request changed nothing.
    /// The client registers again (an earlier attempt of the op may have taken effect).
    SessionExpired,
}

impl Response {
    /// The answer to a client whose request applied with `outcome`.
    pub fn of_outcome(outcome: &Outcome) -> Response {
        match outcome {
            Outcome::Granted { token } => Response::Granted { token: *token },
            Outcome::GrantRejected => Response::Busy,
            Outcome::Released => Response::Released,
            Outcome::NotFound => Response::NotHolder,
            Outcome::SessionRegistered { session } => Response::Registered { session: *session },
            Outcome::SessionExpired => Response::SessionExpired,
            other => Response::Unknown {
                reason: format!("unexpected outcome {other:?} for a client request"),
            },
        }
    }
}

/// An input to [`super::Node::step`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Input {
    /// The node's local clock reads `now_ms` (monotonic, never decreasing). Fires every timer
    /// whose deadline has passed.
    Tick {
        /// Milliseconds on this node's local monotonic clock.
        now_ms: u64,
    },
    /// A message from another node.
    Message {
        /// The sender.
        from: NodeId,
        /// The message.
        msg: Message,
    },
    /// A client request arrived at this node.
    Request {
        /// The driver's id for it; the answer comes back in [`Output::respond`].
        id: RequestId,
        /// The request.
        request: ClientRequest,
    },
    /// The client of request `id` is gone (connection closed, request cancelled) before it got
    /// its answer. The leader releases a lock granted to it (phantom-lock release).
    ClientGone {
        /// The request whose client left.
        id: RequestId,
    },
    /// A raw proposal, with no client waiting (interaction scripts, tests). Dropped by a
    /// non-leader.
    Propose(Proposal),
    /// Start an election now, as if the election timer fired (interaction scripts, tests).
    Campaign,
    /// The node is about to stop cleanly. A leader hands over: it sends
    /// [`super::Message::TimeoutNow`] to its followers (the one with the longest matching log
    /// campaigns at once) and steps down, answering its pending requests as unknown.
    Exit,
    /// The driver finished the `persist` of an earlier output: everything up to log index
    /// `index` of term `term`, and the hard state, is durable. The leader counts its own log
    /// toward a commit quorum only up to what was reported here.
    Persisted {
        /// The term of the last durable entry.
        term: Term,
        /// The index of the last durable entry.
        index: Index,
    },
}

/// What must be written to stable storage, in this order: the snapshot (and the log up to it
/// discarded), then the log truncated from `truncate_from`, then `entries` appended, then the
/// hard state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Persist {
    /// A snapshot to install; log entries up to its `last_index` may be discarded.
    pub snapshot: Option<Snapshot>,
    /// Drop every log entry with index >= this one (a conflicting suffix).
    pub truncate_from: Option<Index>,
    /// Entries to append, contiguous, following the log after the truncation.
    pub entries: Vec<Entry>,
    /// The new hard state.
    pub hard_state: Option<HardState>,
}

impl Persist {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.snapshot.is_none()
            && self.truncate_from.is_none()
            && self.entries.is_empty()
            && self.hard_state.is_none()
    }
}

/// Everything a node keeps on stable storage: what `crate::storage` (feature `server`) loads
/// at start and what the model keeps as an actor's durable storage.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Durable {
    /// Term, vote and known commit index.
    pub hard_state: HardState,
    /// The latest snapshot, if any.
    pub snapshot: Option<Snapshot>,
    /// The log entries after the snapshot, contiguous.
    pub entries: Vec<Entry>,
}

impl Durable {
    /// Applies `persist` in its documented order. This is the reference semantics that
    /// `storage.rs` implements on disk.
    pub fn apply(&mut self, persist: &Persist) {
        if let Some(snapshot) = &persist.snapshot {
            self.entries.retain(|e| e.index > snapshot.last_index);
            // A log that does not continue the snapshot is replaced by it (Raft paper §7).
            if self
                .entries
                .first()
                .is_some_and(|e| e.index != snapshot.last_index + 1)
            {
                self.entries.clear();
            }
            self.snapshot = Some(snapshot.clone());
        }
        if let Some(from) = persist.truncate_from {
            self.entries.retain(|e| e.index < from);
        }
        self.entries.extend(persist.entries.iter().cloned());
        if let Some(hard_state) = &persist.hard_state {
            self.hard_state = hard_state.clone();
        }
    }

    /// The index of the last entry (or of the snapshot when the log is empty).
    pub fn last_index(&self) -> Index {
        self.entries
            .last()
            .map(|e| e.index)
            .or(self.snapshot.as_ref().map(|s| s.last_index))
            .unwrap_or(0)
    }

    /// The term of the last entry (or of the snapshot when the log is empty): with
    /// [`Durable::last_index`], the last durable (term, index) that a driver feeds back as
    /// [`Input::Persisted`] after a persist.
    pub fn last_term(&self) -> Term {
        self.entries
            .last()
            .map(|e| e.term)
            .or(self.snapshot.as_ref().map(|s| s.last_term))
            .unwrap_or(0)
    }
}

/// A committed entry the node applied in this step, with its outcome.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Committed {
    /// The entry's index.
    pub index: Index,
    /// The entry's term.
    pub term: Term,
    /// The applied proposal.
    pub proposal: Proposal,
    /// What the lock table said.
    pub outcome: Outcome,
}

/// A named timer of the core. Every armed timer has a deadline on the node's local clock.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Timer {
    /// Follower/candidate election timeout (randomized from the node's seeded RNG).
    Election,
    /// Leader heartbeat interval.
    Heartbeat,
    /// Leader check-quorum window: step down if a majority was not heard from.
    CheckQuorum,
    /// The lease of `key` under `token` runs out on this node's clock.
    Lease {
        /// The key.
        key: Key,
        /// The grant's token.
        token: Token,
    },
    /// The wait deadline of a queued acquire.
    Wait {
        /// The waiting request.
        id: RequestId,
    },
}

/// A change to the node's timers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TimerCmd {
    /// Arm (or re-arm) `timer` to fire at `at_ms` on the node's local clock.
    Set {
        /// The timer.
        timer: Timer,
        /// Its deadline.
        at_ms: u64,
    },
    /// Disarm `timer`.
    Cancel(Timer),
}

/// The result of one [`super::Node::step`].
///
/// # The IO contract
///
/// The driver carries an output out in this order, and the order is the contract:
///
/// 1. `send_now` may go out at once, even before `persist` is durable (the leader's own
///    AppendEntries to followers, Raft thesis §10.2.1), and so may the `respond` answers to
///    clients: an answer never depends on this output's `persist` (see below).
/// 2. `persist` is written and fsync'd. Only then:
/// 3. `send_after_persist` is sent (vote grants, AppendEntries acknowledgements: answers
///    that promise something about this node's durable state);
/// 4. `apply` is reported (logs, the harness);
/// 5. the driver feeds [`Input::Persisted`] back with the last durable entry, so the leader
///    can count its own log toward the commit quorum;
/// 6. `timers` are applied to the driver's timer set; it feeds [`Input::Tick`] when the
///    earliest deadline passes.
///
/// Why an answer may precede the persist: every answer that promises something (`Granted`,
/// `Released`, `NotHolder`, `Busy`, `Registered`, a retry answered from the dedupe table)
/// reads the applied table, and an entry is applied only once committed, that is durable on a
/// majority: on the followers that acknowledged it (step 3) and on the leader only up to what
/// [`Input::Persisted`] reported (step 5). This output's `persist` holds entries not yet
/// committed, a snapshot of what was already applied, or a commit index already known, so no
/// answer in it rests on it. The other answers (`NotLeader`, `Unknown`, `Invalid`,
/// `SessionExpired`) promise nothing. Under load this takes an fsync off the answer's path:
/// the acknowledgement that commits one batch arrives in the turn that appends the next.
///
/// The stateright model keeps the same order: with split steps (`save_later`), `send_now`
/// and the answers go out in the step, and `send_after_persist` waits for the step that
/// saves; unsplit, `persist` becomes one `save` and every send and answer happens after it.
/// A driver that skips step 2 is the `no-fsync` mutant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Output {
    /// What to make durable before `send_after_persist`, `apply` and `respond`.
    pub persist: Option<Persist>,
    /// Messages that may be sent before `persist` is durable.
    pub send_now: Vec<Envelope>,
    /// Messages that may be sent only after `persist` is durable.
    pub send_after_persist: Vec<Envelope>,
    /// Entries applied to the lock table in this step, in log order.
    pub apply: Vec<Committed>,
    /// Answers to client requests; they need not wait for `persist` (see the IO contract).
    pub respond: Vec<(RequestId, Response)>,
    /// Timer changes, in order.
    pub timers: Vec<TimerCmd>,
}

impl Output {
    /// Whether the output asks for nothing at all.
    pub fn is_empty(&self) -> bool {
        self.persist.is_none()
            && self.send_now.is_empty()
            && self.send_after_persist.is_empty()
            && self.apply.is_empty()
            && self.respond.is_empty()
            && self.timers.is_empty()
    }

    /// Appends `other` after `self`, keeping the contract: persists are merged in order.
    pub fn extend(&mut self, other: Output) {
        match (&mut self.persist, other.persist) {
            (_, None) => {}
            (None, Some(p)) => self.persist = Some(p),
            (Some(mine), Some(p)) => merge_persist(mine, p),
        }
        self.send_now.extend(other.send_now);
        self.send_after_persist.extend(other.send_after_persist);
        self.apply.extend(other.apply);
        self.respond.extend(other.respond);
        self.timers.extend(other.timers);
    }
}

/// Merges `later` into `earlier` so that applying the result equals applying both in order.
fn merge_persist(earlier: &mut Persist, later: Persist) {
    if let Some(snapshot) = later.snapshot {
        // `earlier.entries` continue the log already on disk, so the ones past the snapshot
        // stay: entries between the snapshot and them are on disk and survive the snapshot
        // too. (Clearing them when they do not start right after the snapshot, as
        // `Durable::apply` does for a whole log, lost the entries a follower appended in
        // the step before its snapshot.) A snapshot that replaces a conflicting log comes
        // with its own `truncate_from`, handled below.
        earlier.entries.retain(|e| e.index > snapshot.last_index);
        earlier.snapshot = Some(snapshot);
    }
    if let Some(from) = later.truncate_from {
        let first_new = earlier.entries.first().map(|e| e.index);
        earlier.entries.retain(|e| e.index < from);
        if first_new.is_none_or(|first| from < first) {
            earlier.truncate_from = Some(earlier.truncate_from.map_or(from, |t| t.min(from)));
        }
    }
    earlier.entries.extend(later.entries);
    if later.hard_state.is_some() {
        earlier.hard_state = later.hard_state;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::Command;

    fn entry(term: Term, index: Index) -> Entry {
        Entry {
            term,
            index,
            proposal: Proposal::system(Command::Noop),
        }
    }

    fn persist(truncate_from: Option<Index>, entries: Vec<Entry>) -> Persist {
        Persist {
            truncate_from,
            entries,
            ..Persist::default()
        }
    }

    fn snapshot_at(last_index: Index, last_term: Term, truncate_from: Option<Index>) -> Persist {
        Persist {
            snapshot: Some(Snapshot {
                last_index,
                last_term,
                ..Snapshot::default()
            }),
            truncate_from,
            ..Persist::default()
        }
    }

    #[test]
    fn merged_persists_equal_persists_applied_in_order() {
        // io.rs, Output contract: `extend` keeps the order of persists.
        let base: Vec<Entry> = (1..=5).map(|i| entry(1, i)).collect();
        let cases = [
            (
                persist(None, vec![entry(2, 6)]),
                persist(Some(6), vec![entry(3, 6)]),
            ),
            (
                persist(Some(4), vec![entry(2, 4)]),
                persist(Some(3), vec![entry(3, 3)]),
            ),
            (
                persist(Some(4), vec![entry(2, 4), entry(2, 5)]),
                persist(Some(5), vec![]),
            ),
            // A follower appends, then snapshots below its new entries in the next step.
            (persist(None, vec![entry(1, 6)]), snapshot_at(3, 1, None)),
            (
                persist(None, vec![entry(1, 6), entry(1, 7)]),
                snapshot_at(6, 1, None),
            ),
            // An installed snapshot that discards a conflicting log.
            (persist(None, vec![entry(1, 6)]), snapshot_at(4, 1, Some(5))),
            (persist(None, vec![entry(1, 6)]), snapshot_at(8, 2, Some(9))),
        ];
        for (a, b) in cases {
            let mut sequential = Durable {
                entries: base.clone(),
                ..Durable::default()
            };
            sequential.apply(&a);
            sequential.apply(&b);
            let mut merged = a.clone();
            merge_persist(&mut merged, b.clone());
            let mut at_once = Durable {
                entries: base.clone(),
                ..Durable::default()
            };
            at_once.apply(&merged);
            assert_eq!(sequential, at_once, "a={a:?} b={b:?}");
        }
    }

    #[test]
    fn last_term_and_index_come_from_the_log_else_the_snapshot() {
        // io.rs, Output contract step 5: `Persisted` carries the last durable entry, which
        // is the snapshot's last entry when the log after it is empty (Raft paper §7).
        let empty = Durable::default();
        let mut snapshotted = Durable::default();
        snapshotted.apply(&snapshot_at(4, 2, None));
        let mut appended = snapshotted.clone();
        appended.apply(&persist(None, vec![entry(3, 5), entry(3, 6)]));

        let got = [&empty, &snapshotted, &appended].map(|d| (d.last_term(), d.last_index()));

        assert_eq!(got, [(0, 0), (2, 4), (3, 6)]);
    }
}
