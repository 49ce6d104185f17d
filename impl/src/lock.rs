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
//! - The table keeps one request per session, the latest. A client runs one request at a
//!   time per session and numbers them upwards, so a request under a lower number is a late
//!   attempt of one the client is done with (still on the wire when it gave up): it gets
//!   [`Outcome::SessionExpired`] and changes nothing (Raft dissertation §6.3 never executes
//!   an older request of a session after a newer one; LogCabin answers it as an expired
//!   session). Applied as new, it replaced the newer request's entry, whose retry then ran
//!   afresh against its own grant: `Busy`, while that grant held its key known to nobody
//!   (a review defect of issue 24).
//!
//! # Client sessions (Raft dissertation §6.3)
//!
//! The `session` of an [`Origin`] is not chosen by the client: a client registers with a
//! committed [`Command::RegisterSession`], and the session id is the log index of that entry,
//! the same on every node. A second process can therefore never share a session (and its
//! dedupe entry) with an earlier one, whatever label it runs under: a restarted job that
//! counted its requests from 1 again under the same `--client-id` was answered a retried
//! request's old grant from the table, an expired token while another client held the key
//! (two holders, one token granted twice; the review finding of issue 27).
//!
//! Sessions expire by *committed* time: the leader stamps every registration with the
//! committed clock it found when elected plus the time elapsed on its own clock since
//! ([`Proposal::time_ms`]; not its clock itself, which starts at 0 in each process and would
//! jump committed time at a leader change), and the table's clock is the largest stamp
//! applied so far, so
//! every node expires the same sessions at the same log position, whatever its own clock
//! reads when it applies. A request marks its session active at the committed clock. At
//! every stamped entry the sessions idle for longer than [`SessionLimits::timeout_ms`] are
//! dropped, oldest first. Registrations always carry time (they make the table grow). A
//! lock request carries it when the leader's committed time has moved
//! [`ACTIVITY_STAMP_MS`] or more past the table's clock: without that, a request marked its
//! session active at the last registration's time, and a session busy 9 minutes after a
//! registration and idle since expired at the next registration 2 minutes after its last
//! request (review defect of issue 24). So a session's activity is at most
//! `ACTIVITY_STAMP_MS` older than its last request, and most lock requests' entries stay
//! free of a clock reading, which would make every interleaving of the model's timers a new
//! state. While no entry is stamped, no session goes (a session idle for an hour stays until
//! the next stamped entry finds it idle).
//! The table holds at most [`SessionLimits::sessions_max`] sessions: a registration at the cap
//! evicts the least recently active one (ties by the smaller id), on every node alike. A
//! request of an expired, evicted or unknown session is applied as
//! [`Outcome::SessionExpired`] and changes nothing: the client registers again and reports
//! that op's outcome as unknown (an earlier attempt of it may have taken effect).

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

/// A command of the replicated log: the seed's, plus Raft's `Noop`, the session registration
/// of the Raft dissertation §6.3, and a client's `Abandon` of an acquire it stopped waiting for.
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
    /// A client registers a session; its id is this entry's log index (dissertation §6.3).
    RegisterSession,
    /// The client gives up its session's earlier request `request`, an acquire of `key`
    /// whose answer it never read (its deadline passed with the request on the wire): frees
    /// `key` if a Grant of that request holds it. Applied under a newer request of the same
    /// session, so a Grant of `request` applied later is refused as a late attempt (the
    /// module doc). Not in the seed: without it a grant made after its caller stopped
    /// waiting held its key, known to nobody, for the whole lease.
    Abandon {
        /// The key the abandoned acquire asked for.
        key: Key,
        /// The abandoned request's number in the same session.
        request: u64,
    },
}

impl Command {
    /// The key this command touches, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            Command::Grant { key, .. }
            | Command::Release { key, .. }
            | Command::Expire { key, .. }
            | Command::Abandon { key, .. } => Some(key),
            Command::Noop | Command::RegisterSession => None,
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
    /// The session `session` was registered (its id is the entry's index).
    SessionRegistered {
        /// The new session's id.
        session: SessionId,
    },
    /// The request's session is expired, evicted or unknown: nothing was applied.
    SessionExpired,
}

/// A client session id: the log index of its [`Command::RegisterSession`] entry.
pub type SessionId = u64;

/// Who proposed an entry: a client session and its request sequence number, for
/// deduplication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Origin {
    /// The session, as the cluster assigned it (see the module doc on sessions).
    pub session: SessionId,
    /// The session's request sequence number; a retry reuses it with the same command, and a
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
    /// The committed time when the leader proposed (session expiry, see the module doc);
    /// 0 on entries the leader does not stamp (Noop, Expire, phantom releases).
    /// Always encoded, 0 too: the peers' wire format (bincode) has no optional fields.
    #[serde(default)]
    pub time_ms: u64,
}

impl Proposal {
    /// A proposal of the system itself (no client origin).
    pub fn system(command: Command) -> Self {
        Proposal {
            origin: None,
            command,
            time_ms: 0,
        }
    }

    /// A client's proposal, unstamped (the leader stamps it when it appends it).
    pub fn client(origin: Option<Origin>, command: Command) -> Self {
        Proposal {
            origin,
            command,
            time_ms: 0,
        }
    }

    /// Whether the leader stamps this proposal with committed time `now_ms`, on a table
    /// whose clock reads `clock_ms`: a registration always, a client's request once
    /// committed time moved [`ACTIVITY_STAMP_MS`] past the clock (see the module doc on
    /// sessions).
    pub fn wants_time(&self, now_ms: u64, clock_ms: u64) -> bool {
        self.command == Command::RegisterSession
            || (self.origin.is_some() && now_ms >= clock_ms.saturating_add(ACTIVITY_STAMP_MS))
    }
}

/// The hasher of [`LockTable::replicated_digest`]: rustc's FxHash step, a word at a time.
/// The trace replay digests a table at every applied index of every node, and SipHash there
/// was 11 % of a simulated seed's CPU; a digest only has to tell tables apart, never to resist
/// chosen input.
#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        self.write_u64(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 56));
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u8(&mut self, byte: u8) {
        self.write_u64(u64::from(byte));
    }

    fn write_u32(&mut self, word: u32) {
        self.write_u64(u64::from(word));
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// How far committed time may move past the table's clock before the leader stamps a
/// client's request with it (see the module doc on sessions): the most a session's recorded
/// activity lags its last request.
pub const ACTIVITY_STAMP_MS: u64 = 1_000;

/// The bounds of the session table; the same on every node of a cluster (they are part of
/// the table, like the injected bugs, and a snapshot carries them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SessionLimits {
    /// A session idle for longer than this, in committed time, expires.
    pub timeout_ms: u64,
    /// At most this many sessions; a registration at the cap evicts the least recently
    /// active one.
    pub sessions_max: usize,
}

impl SessionLimits {
    /// The default: 10 minutes (longer than the longest lease, so that a client holding a
    /// lock keeps its session while it could still release it) and 50,000 sessions. A
    /// session's entry in a snapshot is at most about 400 bytes of JSON (a key of
    /// `KEY_LEN_MAX` bytes in its remembered command), so the sessions alone stay under
    /// 20 MiB of snapshot however many clients register.
    pub const DEFAULT: SessionLimits = SessionLimits {
        timeout_ms: 600_000,
        sessions_max: 50_000,
    };
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits::DEFAULT
    }
}

/// One registered session.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
struct Session {
    /// The committed time of its registration or of its last request.
    active_ms: u64,
    /// Its last applied request, to answer a retry of it.
    answered: Option<Answered>,
    /// How many locks it holds (bounded per session at the leader).
    #[serde(default)]
    held: u64,
}

/// The session table: sessions by id, and the same sessions ordered by last activity (the
/// eviction and expiry order). Serialized as the map alone; the order is rebuilt on load.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Sessions {
    by_id: BTreeMap<SessionId, Session>,
    by_activity: std::collections::BTreeSet<(u64, SessionId)>,
}

impl Serialize for Sessions {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.by_id.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Sessions {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let by_id = BTreeMap::<SessionId, Session>::deserialize(deserializer)?;
        let by_activity = by_id.iter().map(|(id, s)| (s.active_ms, *id)).collect();
        Ok(Sessions { by_id, by_activity })
    }
}

impl Sessions {
    fn insert(&mut self, id: SessionId, session: Session) {
        if let Some(old) = self.by_id.insert(id, session.clone()) {
            self.by_activity.remove(&(old.active_ms, id));
        }
        self.by_activity.insert((session.active_ms, id));
    }

    fn remove(&mut self, id: SessionId) -> Option<Session> {
        let old = self.by_id.remove(&id)?;
        self.by_activity.remove(&(old.active_ms, id));
        Some(old)
    }

    /// Removes and returns the least recently active session (the smaller id on a tie).
    fn pop_oldest(&mut self) -> Option<(u64, SessionId)> {
        let oldest = self.by_activity.pop_first()?;
        self.by_id.remove(&oldest.1);
        Some(oldest)
    }

    fn oldest_active_ms(&self) -> Option<u64> {
        self.by_activity.first().map(|(at, _)| *at)
    }

    fn len(&self) -> usize {
        self.by_id.len()
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
    /// The registered sessions, each with its last request (to answer its retries).
    #[serde(default)]
    sessions: Sessions,
    /// The committed clock: the largest `time_ms` of the entries applied so far.
    #[serde(default)]
    clock_ms: u64,
    /// The bounds of the session table.
    #[serde(default)]
    session_limits: SessionLimits,
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

    /// This table with the session bounds `limits` (every node of a cluster uses the same).
    pub fn with_session_limits(mut self, limits: SessionLimits) -> Self {
        self.session_limits = limits;
        self
    }

    /// This table with session `session` registered at committed time `time_ms`, as a
    /// committed `RegisterSession` would leave it. For the model, whose clients start
    /// registered (registration through the log is tested in the core and the simulator).
    pub fn with_session(mut self, session: SessionId, time_ms: u64) -> Self {
        self.sessions.insert(
            session,
            Session {
                active_ms: time_ms,
                answered: None,
                held: 0,
            },
        );
        self
    }

    /// The committed clock: the largest time stamp applied so far.
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    /// How many sessions are registered.
    pub fn sessions_len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether `session` is registered (not expired, evicted or unknown).
    pub fn has_session(&self, session: SessionId) -> bool {
        self.sessions.by_id.contains_key(&session)
    }

    /// The bounds of the session table.
    pub fn session_limits(&self) -> SessionLimits {
        self.session_limits
    }

    /// How many locks `session` holds (0 for a session that is not registered).
    pub fn held_by(&self, session: SessionId) -> u64 {
        self.sessions.by_id.get(&session).map_or(0, |s| s.held)
    }

    /// The token a Grant `command` of `origin` applied now would be answered with from the
    /// dedupe table (a retry of a request already granted), if any: what the retry's
    /// client gets, although its own entry takes nothing.
    pub fn replayed_grant(&self, origin: Origin, command: &Command) -> Option<Token> {
        let session = self.sessions.by_id.get(&origin.session)?;
        match session.answered.as_ref()?.replay(origin, command)? {
            Outcome::Granted { token } => Some(token),
            _ => None,
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
                    session: rename(o.session),
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
        let mut sessions = Sessions::default();
        // The remembered request, command and outcome name no client: only the id moves.
        for (id, session) in &self.sessions.by_id {
            sessions.insert(rename(*id), session.clone());
        }
        LockTable {
            locks,
            last_applied: self.last_applied,
            last_token: self.last_token,
            sessions,
            clock_ms: self.clock_ms,
            session_limits: self.session_limits,
            bugs: self.bugs,
            local_counter: self.local_counter,
        }
    }

    /// The replicated state, by reference: the locks, the dedupe table, the last applied
    /// index and token, the committed clock, the session bounds and the bugs; not the
    /// node-local counter. Named field by field, so that a new field is a compile error here
    /// until it is sorted into replicated or node-local.
    // The tuple's type is long because it names every field; a struct would only repeat it.
    #[allow(clippy::type_complexity)]
    fn replicated_parts(
        &self,
    ) -> (
        (&BTreeMap<Key, Held>, &u64, &Token, &Sessions, &u64),
        (&SessionLimits, &BugSet),
    ) {
        let LockTable {
            locks,
            last_applied,
            last_token,
            sessions,
            clock_ms,
            session_limits,
            bugs,
            local_counter: _,
        } = self;
        (
            (locks, last_applied, last_token, sessions, clock_ms),
            (session_limits, bugs),
        )
    }

    /// A digest of the [replicated state](Self::replicated_parts). Nodes that applied the
    /// same prefix of the log, one entry at a time or through a snapshot, have the same digest
    /// (the trace replay compares them at every applied index).
    pub fn replicated_digest(&self) -> u64 {
        let mut hasher = DigestHasher::default();
        self.replicated_parts().hash(&mut hasher);
        hasher.finish()
    }

    /// Whether `other` holds the same replicated state as this table: what
    /// [`replicated_digest`](Self::replicated_digest) hashes, compared exactly.
    pub fn same_replicated(&self, other: &LockTable) -> bool {
        self.replicated_parts() == other.replicated_parts()
    }

    /// Forgets every session's remembered request (only the `snapshot-loses-state` mutant
    /// does this).
    pub fn forget_retries(&mut self) {
        for session in self.sessions.by_id.values_mut() {
            session.answered = None;
        }
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
        self.advance_clock(proposal.time_ms);
        if proposal.command == Command::RegisterSession {
            self.advance(index);
            return self.register_session(index);
        }
        let Some(origin) = proposal.origin else {
            let outcome = self.apply(index, &proposal.command);
            if outcome == Outcome::Released && matches!(proposal.command, Command::Release { .. }) {
                crate::probe!("phantom-release-applied");
            }
            return outcome;
        };
        let Some(session) = self.sessions.by_id.get(&origin.session) else {
            self.advance(index);
            return Outcome::SessionExpired;
        };
        if (session.answered.as_ref()).is_some_and(|answered| origin.request < answered.request) {
            // A late attempt of an earlier request (the module doc).
            self.advance(index);
            return Outcome::SessionExpired;
        }
        if let Some(outcome) = session
            .answered
            .as_ref()
            .and_then(|answered| answered.replay(origin, &proposal.command))
        {
            crate::probe!("retry-answered-from-dedupe");
            self.advance(index);
            self.touch(origin.session, None);
            return outcome;
        }
        let outcome = match &proposal.command {
            Command::Abandon { key, request } => {
                self.advance(index);
                self.apply_abandon(origin, key, *request)
            }
            command => self.apply(index, command),
        };
        let answered = Answered {
            request: origin.request,
            command: proposal.command.clone(),
            outcome: outcome.clone(),
        };
        self.touch(origin.session, Some(answered));
        if let Some(held) = self.granted_lock(&outcome, &proposal.command) {
            held.origin = Some(origin);
            if let Some(session) = self.sessions.by_id.get_mut(&origin.session) {
                session.held += 1;
            }
        }
        outcome
    }

    /// Removes the lock of `key`, counting it off its session's holdings.
    fn remove_lock(&mut self, key: &str) {
        let Some(held) = self.locks.remove(key) else {
            return;
        };
        if let Some(origin) = held.origin
            && let Some(session) = self.sessions.by_id.get_mut(&origin.session)
        {
            session.held = session.held.saturating_sub(1);
        }
    }

    /// Moves the committed clock to `time_ms` (never back) and drops the sessions idle for
    /// longer than the timeout, oldest first. Every node does this at the same entry.
    fn advance_clock(&mut self, time_ms: u64) {
        self.clock_ms = self.clock_ms.max(time_ms);
        let timeout_ms = self.session_limits.timeout_ms;
        while let Some(active_ms) = self.sessions.oldest_active_ms() {
            if active_ms.saturating_add(timeout_ms) >= self.clock_ms {
                break;
            }
            crate::probe!("session-expired-by-timeout");
            self.sessions.pop_oldest();
        }
    }

    /// Registers session `index`, evicting the least recently active sessions at the cap.
    fn register_session(&mut self, index: u64) -> Outcome {
        while self.sessions.len() >= self.session_limits.sessions_max.max(1) {
            self.sessions.pop_oldest();
        }
        let session = Session {
            active_ms: self.clock_ms,
            answered: None,
            held: 0,
        };
        self.sessions.insert(index, session);
        Outcome::SessionRegistered { session: index }
    }

    /// Marks `session` active now, remembering `answered` when given.
    fn touch(&mut self, session: SessionId, answered: Option<Answered>) {
        let Some(mut entry) = self.sessions.remove(session) else {
            return;
        };
        entry.active_ms = self.clock_ms;
        if answered.is_some() {
            entry.answered = answered;
        }
        self.sessions.insert(session, entry);
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
            // Only through `apply_proposal`, which assigns the id; a bare apply registers
            // nothing.
            Command::RegisterSession => Outcome::Noop,
            // Names a request of its own session; without an origin it names nobody.
            Command::Abandon { .. } => Outcome::NotFound,
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
            self.remove_lock(key);
            Outcome::Released
        } else {
            Outcome::NotFound
        }
    }

    /// Frees `key` when a Grant of request `request` of `origin`'s session holds it (an
    /// earlier request only: the abandon itself is `origin`).
    fn apply_abandon(&mut self, origin: Origin, key: &str, request: u64) -> Outcome {
        let abandoned = Origin {
            session: origin.session,
            request,
        };
        let holds = (self.locks.get(key)).is_some_and(|held| held.origin == Some(abandoned));
        if holds && request < origin.request {
            crate::probe!("abandoned-grant-released");
            self.remove_lock(key);
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
            self.remove_lock(key);
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
        let mut t = LockTable::new().with_session(9, 0);
        let origin = Some(Origin {
            session: 9,
            request: 1,
        });
        let p = Proposal {
            origin,
            command: grant("x"),
            time_ms: 0,
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
        let mut t = LockTable::new().with_session(9, 0);
        let origin = Some(Origin {
            session: 9,
            request: 1,
        });
        let first = Proposal {
            origin,
            command: grant("x"),
            time_ms: 0,
        };
        let other = Proposal {
            origin,
            command: grant("y"),
            time_ms: 0,
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
        let mut t = LockTable::new().with_session(9, 0);
        let origin = Some(Origin {
            session: 9,
            request: 1,
        });
        let acquire = Proposal {
            origin,
            command: grant("x"),
            time_ms: 0,
        };
        let release = Proposal {
            origin,
            command: Command::Release {
                key: "x".into(),
                token: 1,
            },
            time_ms: 0,
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
        let mut t = LockTable::new().with_session(9, 0);
        let origin = Some(Origin {
            session: 9,
            request: 1,
        });
        let p = Proposal {
            origin,
            command: grant("x"),
            time_ms: 0,
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
        let mut t = LockTable::new().with_session(9, 0);
        let origin = Some(Origin {
            session: 9,
            request: 2,
        });
        let p = Proposal {
            origin,
            command: Command::Release {
                key: "x".into(),
                token: 1,
            },
            time_ms: 0,
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

    fn register(t: &mut LockTable, index: u64, time_ms: u64) -> SessionId {
        let register = Proposal {
            origin: None,
            command: Command::RegisterSession,
            time_ms,
        };
        match t.apply_proposal(index, &register) {
            Outcome::SessionRegistered { session } => session,
            other => panic!("registration at {index} answered {other:?}"),
        }
    }

    fn request(session: SessionId, request: u64, command: Command, time_ms: u64) -> Proposal {
        Proposal {
            origin: Some(Origin { session, request }),
            command,
            time_ms,
        }
    }

    #[test]
    fn a_second_process_under_the_same_client_id_never_gets_an_old_grant() {
        // Review finding of issue 27: request numbers restart at 1 in every process, so a
        // restarted job under the same --client-id sent (client 5, request 1, Grant x) again
        // and was answered the first process's grant from the dedupe table: an expired token
        // while another client held the key (two holders, one token granted twice). Shown
        // failing on the code before sessions, where the origin was (client id, request).
        // With sessions the second process registers and gets a session of its own.
        let mut t = LockTable::new();
        let first = register(&mut t, 1, 10);
        let grant_x = request(first, 1, grant("x"), 10);
        assert_eq!(t.apply_proposal(2, &grant_x), Outcome::Granted { token: 2 });
        t.apply(
            3,
            &Command::Expire {
                key: "x".into(),
                token: 2,
            },
        );
        let other = register(&mut t, 4, 20);
        assert_eq!(
            t.apply_proposal(5, &request(other, 1, grant("x"), 20)),
            Outcome::Granted { token: 5 }
        );
        // The second process under the same label: request numbers from 1 again, the same
        // command, but its own session.
        let second = register(&mut t, 6, 30);
        assert_ne!(
            second, first,
            "the cluster assigns each registration its own id"
        );
        let answer = t.apply_proposal(7, &request(second, 1, grant("x"), 30));
        assert_eq!(answer, Outcome::GrantRejected, "no old token granted again");
        assert_eq!(t.holder("x").map(|h| h.token), Some(5));
    }

    #[test]
    fn same_replicated_compares_what_the_digest_hashes_and_nothing_node_local() {
        // The trace replay compares a node's table with its shadow by `same_replicated` and
        // tables across nodes by `replicated_digest`: the two must agree on what counts.
        // The mutant's table, the only one with node-local state: its counter.
        let mut t = LockTable::with_bugs(BugSet::of(&[Bug::TokenFromLocalCounter]));
        let session = register(&mut t, 1, 10);
        assert_eq!(
            t.apply_proposal(2, &request(session, 1, grant("x"), 10)),
            Outcome::Granted { token: 1 }
        );
        let copy = t.clone();
        assert!(t.same_replicated(&copy));
        // Node-local: a restarted node's counter differs and the tables are still the same.
        let mut restarted = t.clone();
        restarted.reset_local();
        assert_ne!(restarted, t, "the counter is part of the whole table");
        assert!(t.same_replicated(&restarted));
        assert_eq!(t.replicated_digest(), restarted.replicated_digest());
        // A lost dedupe entry (the `snapshot-loses-state` mutant) is a different table.
        let mut lost = t.clone();
        lost.forget_retries();
        assert!(!t.same_replicated(&lost));
        assert_ne!(t.replicated_digest(), lost.replicated_digest());
        // So is a further applied entry.
        let mut further = t.clone();
        further.apply_proposal(3, &request(session, 2, grant("y"), 10));
        assert!(!t.same_replicated(&further));
    }

    #[test]
    fn an_abandon_frees_its_requests_grant_and_fences_a_later_one() {
        // The deadline defect (issue 24 review): a grant made after its client stopped
        // waiting held its key for the whole lease. The client's abandon, its next request,
        // frees the grant whichever of the two the log orders first.
        let abandon = |request| Command::Abandon {
            key: "x".into(),
            request,
        };
        // The grant first: the abandon frees it, counted off the session.
        let mut t = LockTable::new();
        let s = register(&mut t, 1, 0);
        assert_eq!(
            t.apply_proposal(2, &request(s, 1, grant("x"), 0)),
            Outcome::Granted { token: 2 }
        );
        assert_eq!(t.held_by(s), 1);
        assert_eq!(
            t.apply_proposal(3, &request(s, 2, abandon(1), 0)),
            Outcome::Released
        );
        assert!(t.holder("x").is_none());
        assert_eq!(t.held_by(s), 0);
        // Its retry is answered from the table, and a late copy of the grant is refused.
        assert_eq!(
            t.apply_proposal(4, &request(s, 2, abandon(1), 0)),
            Outcome::Released
        );
        assert_eq!(
            t.apply_proposal(5, &request(s, 1, grant("x"), 0)),
            Outcome::SessionExpired
        );
        assert!(t.holder("x").is_none());
        // The abandon first: the grant, still on the wire, is refused when it lands.
        let mut t = LockTable::new();
        let s = register(&mut t, 1, 0);
        assert_eq!(
            t.apply_proposal(2, &request(s, 2, abandon(1), 0)),
            Outcome::NotFound
        );
        assert_eq!(
            t.apply_proposal(3, &request(s, 1, grant("x"), 0)),
            Outcome::SessionExpired
        );
        assert!(t.holder("x").is_none());
    }

    #[test]
    fn an_abandon_frees_nothing_but_its_own_sessions_earlier_request() {
        // Another session's grant, a later request's grant, or a grant already released and
        // taken by someone else stays where it is.
        let mut t = LockTable::new();
        let a = register(&mut t, 1, 0);
        let b = register(&mut t, 2, 0);
        t.apply_proposal(3, &request(a, 1, grant("x"), 0));
        let abandon = |request| Command::Abandon {
            key: "x".into(),
            request,
        };
        assert_eq!(
            t.apply_proposal(4, &request(b, 2, abandon(1), 0)),
            Outcome::NotFound,
            "b's request 1 holds nothing"
        );
        assert_eq!(
            t.apply_proposal(5, &request(a, 2, abandon(2), 0)),
            Outcome::NotFound,
            "only an earlier request is abandoned"
        );
        assert_eq!(
            t.apply(6, &abandon(1)),
            Outcome::NotFound,
            "no session, nobody"
        );
        assert_eq!(t.holder("x").map(|h| h.token), Some(3));
    }

    #[test]
    fn a_request_of_an_unknown_session_is_session_expired_and_changes_nothing() {
        // Dissertation §6.3: a request of a session the table does not know is refused.
        let mut t = LockTable::new();
        let answer = t.apply_proposal(1, &request(42, 1, grant("x"), 5));
        assert_eq!(answer, Outcome::SessionExpired);
        assert!(t.holder("x").is_none());
        assert_eq!(t.last_applied(), 1);
    }

    #[test]
    fn sessions_expire_by_committed_time_not_by_apply_order_alone() {
        // Issue 27 item 1: a session idle for longer than the timeout (in the time the
        // leader stamped on entries) expires; an active one lives on.
        let limits = SessionLimits {
            timeout_ms: 1_000,
            sessions_max: 10,
        };
        let mut t = LockTable::new().with_session_limits(limits);
        let idle = register(&mut t, 1, 0);
        let busy = register(&mut t, 2, 0);
        t.apply_proposal(3, &request(busy, 1, grant("a"), 900));
        // 1,001 ms after the idle session's last activity: it expires at this entry.
        let answer = t.apply_proposal(4, &request(busy, 2, grant("b"), 1_001));
        assert_eq!(answer, Outcome::Granted { token: 4 });
        assert!(!t.has_session(idle), "idle past the timeout");
        assert!(t.has_session(busy), "active 101 ms ago");
        assert_eq!(
            t.apply_proposal(5, &request(idle, 1, grant("c"), 1_001)),
            Outcome::SessionExpired
        );
        // A stamp older than the committed clock does not move it back.
        t.apply_proposal(6, &request(busy, 3, grant("d"), 10));
        assert_eq!(t.clock_ms(), 1_001);
    }

    #[test]
    fn a_retry_answered_from_the_dedupe_table_keeps_its_session_alive() {
        // Dissertation §6.3: a session lives while its client is active, and a retry is
        // activity. (A hand-made mistake of 2026-12-07, the retry's `touch` dropped, passed
        // every tool: no simulated op retries for a whole session timeout.)
        let limits = SessionLimits {
            timeout_ms: 1_000,
            sessions_max: 10,
        };
        let mut t = LockTable::new().with_session_limits(limits);
        let retrying = register(&mut t, 1, 0);
        let granted = t.apply_proposal(2, &request(retrying, 1, grant("a"), 100));
        assert_eq!(granted, Outcome::Granted { token: 2 });
        // The same request again at 900 ms: answered from the table, and activity.
        let retried = t.apply_proposal(3, &request(retrying, 1, grant("a"), 900));
        assert_eq!(retried, granted);
        // 1,500 ms: more than the timeout after the grant, less after the retry.
        register(&mut t, 4, 1_500);
        assert_eq!(t.clock_ms(), 1_500);
        assert!(t.has_session(retrying), "active 600 ms ago, by its retry");
    }

    #[test]
    fn the_session_table_is_bounded_and_evicts_the_oldest_alike_on_every_node() {
        // Review finding of issue 27: the dedupe table kept one entry per client id forever
        // (a snapshot past the frame limit at ~110k ids). Now it holds at most sessions_max,
        // and two nodes applying the same log evict the same sessions.
        let limits = SessionLimits {
            timeout_ms: u64::MAX / 4,
            sessions_max: 100,
        };
        let mut seed = 27_u64;
        let mut log = Vec::new();
        let mut sessions: Vec<SessionId> = Vec::new();
        for index in 1..=5_000_u64 {
            let draw = crate::rng::splitmix64(&mut seed);
            let time_ms = index * 3;
            let proposal = if sessions.is_empty() || draw % 3 == 0 {
                sessions.push(index);
                Proposal {
                    origin: None,
                    command: Command::RegisterSession,
                    time_ms,
                }
            } else {
                let session = sessions[(draw >> 8) as usize % sessions.len()];
                request(session, index, grant(&format!("k{}", draw % 50)), time_ms)
            };
            log.push((index, proposal));
        }
        let mut a = LockTable::new().with_session_limits(limits);
        let mut b = LockTable::new().with_session_limits(limits);
        for (index, proposal) in &log {
            assert_eq!(
                a.apply_proposal(*index, proposal),
                b.apply_proposal(*index, proposal)
            );
            assert!(
                a.sessions_len() <= 100,
                "{} sessions at {index}",
                a.sessions_len()
            );
        }
        assert_eq!(a, b, "seed 27: both nodes hold the same sessions");
        assert_eq!(a.sessions_len(), 100);
        let registered = sessions.len();
        assert!(registered > 1_000, "{registered} registrations");
        // The most recent registration is kept, the first long evicted.
        assert!(a.has_session(*sessions.last().unwrap()));
        assert!(!a.has_session(sessions[0]));
        // The table survives a snapshot's encoding with its eviction order.
        let json = serde_json::to_string(&a).unwrap();
        let mut c: LockTable = serde_json::from_str(&json).unwrap();
        assert_eq!(c, a);
        let next = 5_001;
        register(&mut a, next, next * 3);
        register(&mut c, next, next * 3);
        assert_eq!(c, a, "the decoded table evicts the same session");
    }

    #[test]
    fn a_session_counts_the_locks_it_holds() {
        // Issue 27 item 2: keys held per session are bounded at the leader, from this count.
        let mut t = LockTable::new();
        let s = register(&mut t, 1, 0);
        t.apply_proposal(2, &request(s, 1, grant("a"), 0));
        t.apply_proposal(3, &request(s, 2, grant("b"), 0));
        assert_eq!(t.held_by(s), 2);
        t.apply(
            4,
            &Command::Expire {
                key: "a".into(),
                token: 2,
            },
        );
        t.apply_proposal(
            5,
            &request(
                s,
                3,
                Command::Release {
                    key: "b".into(),
                    token: 3,
                },
                0,
            ),
        );
        assert_eq!(t.held_by(s), 0);
    }
}
