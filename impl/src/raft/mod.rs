//! A sans-IO Raft core whose state machine is the lock table.
//!
//! [`Node::step`] takes an [`Input`] (a tick of the local clock, a message, a client request,
//! a persistence acknowledgement) and returns an [`Output`] that says what to persist, what
//! to send before and after persisting, what was applied and which clients to answer. Time
//! and randomness come in as inputs (the clock through [`Input::Tick`], the RNG as a seed in
//! [`Config`], a splitmix64 state inside the node), so the same code runs under the async
//! server (`server.rs`) and under stateright (`checker::model`). Nothing here may use the
//! async runtime, the RPC crate, clocks, files or sockets: `ci/test.sh` greps for them.
//!
//! The parts, each with its rules in its module doc:
//!
//! - `election`: randomized election timeouts, pre-vote, votes, check-quorum, the Noop that
//!   opens every term.
//! - `replication`: AppendEntries with back-off on `reject_hint`, commit by a majority of
//!   the current term only (Figure 8), apply in order, snapshots and InstallSnapshot.
//! - `log`: the in-memory log over its snapshot base; `quorum`: majorities; `timers`: the
//!   armed timers, indexed by deadline too (a lease each held lock: a step must not scan
//!   them).
//! - `requests`: client requests, answered only from committed, applied entries (the
//!   linearizability argument is there).
//! - `leases`: lease timers on every node, locally expired locks, waiter queues, phantom
//!   release.
//! - [`invariants`]: the node-local assertions that [`Node::step`] runs after every step in
//!   debug builds, and the cross-node checks the testkit and the model run.
//!
//! The injected bugs of the core ([`crate::bugs::Bug`]): `follower-grants` (requests),
//! `stale-leader` (requests, election: check-quorum off), `early-expire` (leases),
//! `skip-phantom-release` (requests).

mod election;
#[cfg(test)]
mod hostile_test;
#[cfg(all(test, feature = "testkit"))]
mod interaction_test;
pub mod invariants;
mod io;
mod leases;
mod log;
mod message;
mod quorum;
mod replication;
mod requests;
mod rewrite;
mod snapshot;
mod timers;

pub use io::{
    ClientRequest, Committed, Durable, Input, Output, Persist, RequestId, Response, Timer, TimerCmd,
};
pub use message::{Entry, Envelope, HardState, Index, Message, NodeId, Snapshot, Term};
pub use quorum::majority;
pub use replication::{TABLE_ENTRIES_COPIED_PER_ENTRY_MAX, TERM_MAX};
pub use rewrite::{
    HashParts, REBASED_NOW_MS, Renaming, rebase_commutes, rename_commutes, rewrite_entry,
    rewrite_proposal, rewrite_request, rewrite_response, rewrite_timer,
};
pub use snapshot::SNAPSHOT_BYTES_MAX;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::bugs::{Bug, BugSet};
use crate::lock::{Key, LockTable, Origin, SessionLimits, Token};
use log::RaftLog;

/// The configuration of one node. Every field with a unit has it last.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Config {
    /// This node's id.
    pub id: NodeId,
    /// Every member of the cluster, this node included.
    pub members: Vec<NodeId>,
    /// The election timeout is drawn uniformly from `[min, max)` with the node's RNG.
    pub election_timeout_min_ms: u64,
    /// See `election_timeout_min_ms`.
    pub election_timeout_max_ms: u64,
    /// The leader's heartbeat interval.
    pub heartbeat_ms: u64,
    /// Pre-vote (Raft thesis §9.6).
    pub pre_vote: bool,
    /// Check-quorum: a leader that has not heard from a majority within an election timeout
    /// steps down.
    pub check_quorum: bool,
    /// Take a snapshot and compact the log once this many entries were applied since the
    /// last one (more when the table is large: see [`TABLE_ENTRIES_COPIED_PER_ENTRY_MAX`]).
    pub snapshot_threshold_entries: u64,
    /// Compaction keeps up to this many entries at or below the snapshot in memory, so that
    /// a follower a little behind gets entries rather than the whole snapshot.
    pub snapshot_trailing_entries: u64,
    /// At most this many bytes of the encoded snapshot per InstallSnapshot message.
    pub snapshot_chunk_bytes: u64,
    /// A snapshot chunk not acknowledged within this long is sent again (checked on every
    /// heartbeat and proposal; below the election timeout so the follower keeps following).
    pub snapshot_retransmit_ms: u64,
    /// At most this many entries per AppendEntries.
    pub append_entries_max: usize,
    /// At most this many waiters queued per key at the leader.
    pub waiters_per_key_max: usize,
    /// At most this many proposals in the log beyond the commit index.
    pub uncommitted_entries_max: usize,
    /// The longest lease a client may ask for.
    pub lease_ms_max: u64,
    /// The longest wait a client may ask for.
    pub wait_ms_max: u64,
    /// The bounds of the session table (the same on every node of a cluster).
    pub session_limits: SessionLimits,
    /// At most this many locks held by one session: an acquire beyond it is refused
    /// `Invalid` at the leader.
    pub keys_per_session_max: u64,
    /// At most this many locks held in the whole table: an acquire of a free key beyond it
    /// is refused `Invalid` at the leader, so that no client input grows a snapshot past the
    /// storage record limit (issue 27; a held lock is at most about 300 bytes of snapshot
    /// JSON, so 200,000 locks stay under 64 MiB beside the sessions' 20 MiB).
    #[serde(default = "Config::default_locks_max")]
    pub locks_max: u64,
    /// The seed of the node's RNG (election timeouts).
    pub seed: u64,
    /// Injected bugs (`lockd --bug`); empty in a correct build.
    pub bugs: BugSet,
}

impl Config {
    /// The default of [`Config::locks_max`] (also for traces written before it existed).
    pub fn default_locks_max() -> u64 {
        200_000
    }

    /// A configuration with the default timing for node `id` of `members`.
    pub fn new(id: NodeId, members: Vec<NodeId>) -> Self {
        Config {
            id,
            members,
            election_timeout_min_ms: 300,
            election_timeout_max_ms: 600,
            heartbeat_ms: 50,
            pre_vote: true,
            check_quorum: true,
            snapshot_threshold_entries: 1000,
            snapshot_trailing_entries: 500,
            snapshot_chunk_bytes: 1 << 20,
            snapshot_retransmit_ms: 200,
            append_entries_max: 256,
            waiters_per_key_max: 64,
            uncommitted_entries_max: 4096,
            lease_ms_max: 600_000,
            wait_ms_max: 60_000,
            session_limits: SessionLimits::DEFAULT,
            keys_per_session_max: 100_000,
            locks_max: Config::default_locks_max(),
            seed: id,
            bugs: BugSet::NONE,
        }
    }
}

/// A node's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Role {
    /// Follows a leader (or waits for one).
    Follower,
    /// Asks for pre-votes before campaigning.
    PreCandidate,
    /// Campaigns for votes in its term.
    Candidate,
    /// Leads its term.
    Leader,
}

/// What `status` reports about a node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Status {
    /// The node's id.
    pub id: NodeId,
    /// Its role.
    pub role: Role,
    /// Its current term.
    pub term: Term,
    /// The leader it last heard from in this term, if any.
    pub leader: Option<NodeId>,
    /// Its commit index.
    pub commit_index: Index,
    /// The index of the last entry applied to its lock table.
    pub last_applied: Index,
    /// The index of its last log entry.
    pub last_log_index: Index,
    /// How many locks its lock table holds.
    pub locks_held: usize,
}

/// The leader's view of one follower (Raft paper Figure 2, "volatile state on leaders").
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Progress {
    /// The index of the next entry to send.
    next_index: Index,
    /// The highest index known to be replicated on the follower.
    match_index: Index,
    /// Whether the follower answered an AppendEntries or InstallSnapshot of this term in the
    /// current check-quorum window. Other messages do not count: a PreVote or a stale-term
    /// message does not show that the peer follows this leader.
    recent_active: bool,
    /// The snapshot being sent to the follower, when its `next_index` lies in the compacted
    /// prefix.
    snapshot: Option<SnapshotSend>,
}

/// A snapshot on its way to one follower: one chunk in flight at a time (Raft paper §7, the
/// `offset`/`done` fields of InstallSnapshot).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SnapshotSend {
    /// The snapshot's last index and term.
    last_index: Index,
    last_term: Term,
    /// The encoded snapshot (shared by every follower that gets this snapshot). Kept until
    /// the transfer ends, even when the leader compacts again meanwhile, so that a large
    /// snapshot finishes instead of restarting with every compaction.
    bytes: std::sync::Arc<Vec<u8>>,
    /// How many bytes the follower acknowledged; the chunk in flight starts there.
    acked: u64,
    /// When the chunk in flight was sent, on the local clock.
    sent_at_ms: u64,
}

/// An acquire waiting in the leader's FIFO queue for its key, or proposed on its behalf.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Waiter {
    id: RequestId,
    key: Key,
    lease_ms: u64,
    origin: Option<Origin>,
    deadline_ms: u64,
}

/// What a client proposal in the log was for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum PendingKind {
    /// An acquire; `waiter` is set for an acquire with a wait deadline.
    Grant { waiter: Option<Waiter> },
    /// A release.
    Release,
    /// A session registration.
    Register,
}

/// A client proposal in the leader's log, not yet applied.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Pending {
    id: RequestId,
    /// The term the entry was proposed in (the leader's term).
    term: Term,
    kind: PendingKind,
    /// The client left (`Input::ClientGone`): release a grant instead of answering.
    gone: bool,
}

/// One Raft node with the lock table as its state machine. See the module docs.
///
/// Everything is ordered (`BTreeMap`, `Vec`) so that the node is `Hash` and the stateright
/// model can use it as actor state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    config: Config,
    /// The splitmix64 state of the node's RNG, seeded from `Config::seed`.
    rng: u64,
    /// The latest reading of the local clock.
    now_ms: u64,
    term: Term,
    voted_for: Option<NodeId>,
    role: Role,
    leader: Option<NodeId>,
    /// When this node last heard from the leader of its term (for pre-vote and vote leases).
    leader_contact_ms: Option<u64>,
    log: RaftLog,
    commit_index: Index,
    /// The last index the driver reported durable (`Input::Persisted`).
    persisted_index: Index,
    /// The applied lock table.
    table: LockTable,
    /// Votes (or pre-votes) received in the current campaign.
    votes: BTreeMap<NodeId, bool>,
    /// Leader only: per follower.
    progress: BTreeMap<NodeId, Progress>,
    /// Leader only: the index of this term's Noop.
    noop_index: Index,
    /// Snapshots this node received whole and refused to install, because they did not
    /// decode to a table consistent with their last index (`snapshot::decode`). A buggy or
    /// foreign peer sends such a snapshot; an honest leader never does.
    snapshots_refused: u64,
    /// Leader only: (local clock, committed clock of the applied table) when it became
    /// leader. It stamps a registration with the committed clock then plus the time elapsed
    /// on its own clock since (`Proposal::time_ms`): committed time goes on from where the
    /// last leader left it, whatever this node's clock reads (each process's clock starts at
    /// 0), and a rebased clock (the model) stamps the same values.
    clock_base_ms: (u64, u64),
    /// Armed timers and their deadlines on the local clock, indexed by deadline too.
    timers: timers::Timers,
    /// The hard state last handed to the driver to persist.
    hard_state: HardState,
    /// Leader only: client proposals by log index.
    pending: BTreeMap<Index, Pending>,
    /// Leader only: queued acquires per key, FIFO.
    waiters: BTreeMap<Key, VecDeque<Waiter>>,
    /// Locks whose lease timer fired on this node while they were still held.
    expired: BTreeSet<(Key, Token)>,
    /// Leader only: followers to send an AppendEntries at the end of the step (one message
    /// per follower per step however many entries the step appended); empty between steps.
    append_due: BTreeSet<NodeId>,
    /// The output of the step in progress; empty between steps.
    out: Output,
}

impl Node {
    /// Starts (or restarts) a node from what storage loaded.
    ///
    /// Restores the snapshot, re-applies the log up to `durable.hard_state.commit` (reported
    /// in the output's `apply`), and arms the election timer and a full lease for every held
    /// lock (conservative: a restarted node never expires a lease earlier than before).
    ///
    /// # Panics
    ///
    /// Panics if `config.members` does not contain `config.id`, or if the loaded log is not
    /// contiguous after the snapshot.
    pub fn new(config: Config, durable: Durable, now_ms: u64) -> (Node, Output) {
        assert!(
            config.members.contains(&config.id),
            "config: members {:?} do not contain id {}",
            config.members,
            config.id
        );
        let log = RaftLog::new(durable.snapshot.clone(), durable.entries.clone());
        let mut table = match &durable.snapshot {
            Some(s) => {
                crate::probe!("restart-from-snapshot");
                s.table.clone()
            }
            None => LockTable::with_bugs(config.bugs).with_session_limits(config.session_limits),
        };
        table.reset_local();
        let commit_index = durable
            .hard_state
            .commit
            .max(log.base_index())
            .min(log.last_index());
        let mut node = Node {
            rng: config.seed ^ now_ms.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            config,
            now_ms,
            term: durable.hard_state.term,
            voted_for: durable.hard_state.voted_for,
            role: Role::Follower,
            leader: None,
            leader_contact_ms: None,
            persisted_index: log.last_index(),
            log,
            commit_index,
            table,
            votes: BTreeMap::new(),
            progress: BTreeMap::new(),
            noop_index: 0,
            snapshots_refused: 0,
            clock_base_ms: (now_ms, 0),
            timers: timers::Timers::default(),
            hard_state: durable.hard_state,
            pending: BTreeMap::new(),
            waiters: BTreeMap::new(),
            expired: BTreeSet::new(),
            append_due: BTreeSet::new(),
            out: Output::default(),
        };
        node.apply_committed();
        node.rearm_all_leases();
        node.reset_election_timer();
        node.finish_step();
        let out = std::mem::take(&mut node.out);
        #[cfg(debug_assertions)]
        node.check_invariants();
        (node, out)
    }

    /// Feeds one input and returns what the driver must do (see [`Output`] for the order).
    ///
    /// # Panics
    ///
    /// In debug builds, panics when a node-local invariant fails after the step (see
    /// [`Node::check_invariants`]): a bug in the core, never a bad input.
    pub fn step(&mut self, input: Input) -> Output {
        self.maybe_snapshot();
        match input {
            Input::Tick { now_ms } => self.tick(now_ms),
            Input::Message { from, msg } => self.handle_message(from, msg),
            Input::Request { id, request } => self.handle_request(id, request),
            Input::ClientGone { id } => self.handle_client_gone(id),
            Input::Propose(proposal) => {
                if self.role == Role::Leader {
                    self.append_proposal(proposal);
                }
            }
            Input::Campaign => self.campaign(),
            Input::Exit => self.handle_exit(),
            Input::Persisted { term, index } => self.handle_persisted(term, index),
        }
        self.finish_step();
        #[cfg(debug_assertions)]
        self.check_invariants();
        std::mem::take(&mut self.out)
    }

    /// How many whole snapshots this node refused to install (see the field): under the
    /// simulator, where every peer is this code, the driver takes one for a defect.
    pub fn snapshots_refused(&self) -> u64 {
        self.snapshots_refused
    }

    /// What the node reports about itself.
    pub fn status(&self) -> Status {
        Status {
            id: self.config.id,
            role: self.role,
            term: self.term,
            leader: self.leader,
            commit_index: self.commit_index,
            last_applied: self.table.last_applied(),
            last_log_index: self.log.last_index(),
            locks_held: self.table.locks().len(),
        }
    }

    /// The applied lock table.
    pub fn table(&self) -> &LockTable {
        &self.table
    }

    /// The node's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The in-memory log entries after the snapshot.
    pub fn log(&self) -> &[Entry] {
        &self.log.entries
    }

    /// The latest snapshot, if any.
    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.log.snapshot.as_ref()
    }

    /// The deadline of `timer` on the local clock, if it is armed.
    pub fn deadline(&self, timer: &Timer) -> Option<u64> {
        self.timers.get(timer)
    }

    /// The earliest deadline of any armed timer (the driver sleeps until then).
    pub fn next_deadline(&self) -> Option<u64> {
        self.timers.next_deadline()
    }

    /// Every armed timer with its deadline.
    pub fn timers(&self) -> impl Iterator<Item = (&Timer, u64)> {
        self.timers.iter()
    }

    /// Whether the lease of `key` under `token` ran out on this node's clock (its timer
    /// fired while the lock was held): the only locks a leader may propose an Expire for.
    pub fn lease_ran_out(&self, key: &str, token: Token) -> bool {
        self.expired.contains(&(key.to_owned(), token))
    }

    /// Every lease that ran out on this node's clock and whose lock it still holds.
    pub fn leases_ran_out(&self) -> impl Iterator<Item = &(Key, Token)> {
        self.expired.iter()
    }

    /// The index of the last entry the driver reported durable.
    pub fn persisted_index(&self) -> Index {
        self.persisted_index
    }

    /// The term of the entry at `index`, if this node knows it (in the log or the snapshot).
    pub fn term_at(&self, index: Index) -> Option<Term> {
        self.log.term_at(index)
    }

    /// The node's latest reading of its local clock.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Whether bug `bug` is injected.
    fn bug(&self, bug: Bug) -> bool {
        self.config.bugs.contains(bug)
    }

    /// Check-quorum as configured; the `stale-leader` mutant switches it off.
    fn check_quorum_on(&self) -> bool {
        self.config.check_quorum && !self.bug(Bug::StaleLeader)
    }

    /// The other members of the cluster.
    fn peers(&self) -> Vec<NodeId> {
        let id = self.config.id;
        self.config
            .members
            .iter()
            .copied()
            .filter(|m| *m != id)
            .collect()
    }

    /// Whether `votes` granted hold a majority of the members.
    fn has_majority(&self, count: usize) -> bool {
        count >= quorum::majority(self.config.members.len())
    }

    /// The next number of the node's splitmix64 generator.
    fn next_random(&mut self) -> u64 {
        crate::rng::splitmix64(&mut self.rng)
    }

    fn set_timer(&mut self, timer: Timer, at_ms: u64) {
        self.timers.insert(timer.clone(), at_ms);
        self.out.timers.push(TimerCmd::Set { timer, at_ms });
    }

    fn cancel_timer(&mut self, timer: Timer) {
        if self.timers.remove(&timer).is_some() {
            self.out.timers.push(TimerCmd::Cancel(timer));
        }
    }

    fn send_now(&mut self, target: NodeId, msg: Message) {
        let source = self.config.id;
        self.out.send_now.push(Envelope {
            source,
            target,
            msg,
        });
    }

    fn send_after_persist(&mut self, target: NodeId, msg: Message) {
        let source = self.config.id;
        self.out.send_after_persist.push(Envelope {
            source,
            target,
            msg,
        });
    }

    fn respond(&mut self, id: RequestId, response: Response) {
        self.out.respond.push((id, response));
    }

    /// Adds `persist` to the step's output, after what is already there.
    fn persist(&mut self, persist: Persist) {
        self.out.extend(Output {
            persist: Some(persist),
            ..Output::default()
        });
    }

    /// Advances the clock and fires every timer whose deadline has passed, earliest first.
    /// A fired timer is disarmed without a `TimerCmd` (it fired).
    fn tick(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        // Bounded: each timer fires at most once per tick; timers armed while firing lie in
        // the future (every deadline is now + a positive interval) except a lease re-armed
        // with lease_ms 0, which validation forbids.
        // Earliest first (ties in timer order), from the deadline index: the due timers
        // only, not a pass over every lease.
        let due_by = if self.config.bugs.contains(Bug::TickMissesTimersDueNow) {
            // Mutant: only the timers due strictly before now fire.
            self.now_ms.saturating_sub(1)
        } else {
            self.now_ms
        };
        for (at, timer) in self.timers.due(due_by) {
            if self.timers.get(&timer) != Some(at) {
                continue; // cancelled or re-armed by an earlier timer of this tick
            }
            self.timers.remove(&timer);
            self.fire(timer);
        }
    }

    fn fire(&mut self, timer: Timer) {
        match timer {
            Timer::Election => self.handle_election_timeout(),
            Timer::Heartbeat => self.handle_heartbeat_timeout(),
            Timer::CheckQuorum => self.handle_check_quorum_timeout(),
            Timer::Lease { key, token } => self.handle_lease_timeout(key, token),
            Timer::Wait { id } => self.handle_wait_timeout(id),
        }
    }

    /// Sends the AppendEntries due, then hands the hard state to the driver when it changed
    /// in this step.
    fn finish_step(&mut self) {
        for peer in std::mem::take(&mut self.append_due) {
            if self.role == Role::Leader {
                self.send_append(peer);
            }
        }
        let hard_state = HardState {
            term: self.term,
            voted_for: self.voted_for,
            commit: self.commit_index,
        };
        if hard_state != self.hard_state {
            self.hard_state = hard_state.clone();
            self.persist(Persist {
                hard_state: Some(hard_state),
                ..Persist::default()
            });
        }
    }

    /// The driver reports the log durable up to (`term`, `index`).
    fn handle_persisted(&mut self, term: Term, index: Index) {
        // A report for an entry that was since truncated says nothing about the current log.
        if index > self.persisted_index && self.log.term_at(index) == Some(term) {
            self.persisted_index = index.min(self.log.last_index());
        }
        if self.role == Role::Leader {
            self.maybe_commit();
        }
    }

    /// Node-local invariants, one assertion per invariant, naming the values.
    ///
    /// # Panics
    ///
    /// Panics when an invariant does not hold: that is a bug in the core.
    pub fn check_invariants(&self) {
        invariants::check_node(self);
    }
}

/// Helpers for the unit tests of the core's modules: nodes driven by hand.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// What an honest driver holds on disk for `node` once every persist it asked for is
    /// done: its snapshot, its log and its hard state.
    pub(crate) fn durable_of(node: &Node) -> Durable {
        Durable {
            snapshot: node.snapshot().cloned(),
            entries: node.log().to_vec(),
            hard_state: node.hard_state.clone(),
        }
    }

    /// Node `id` of the cluster {1, 2, 3}, started empty at time 0.
    pub(crate) fn node(id: NodeId) -> Node {
        Node::new(Config::new(id, vec![1, 2, 3]), Durable::default(), 0).0
    }

    /// Node 1 made leader of term 1 by hand (pre-vote and vote granted by node 2), its Noop
    /// appended but not yet reported durable.
    pub(crate) fn leader() -> Node {
        leader_with(Config::new(1, vec![1, 2, 3]))
    }

    /// [`leader`] with a configuration of the test's own (node 1 of {1, 2, 3}).
    pub(crate) fn leader_with(config: Config) -> Node {
        let (mut node, _) = Node::new(config, Durable::default(), 0);
        win_election(&mut node, 2, 1);
        node
    }

    /// `node` campaigns and wins `term` with the pre-vote and the vote of `voter` (a
    /// majority of three).
    pub(crate) fn win_election(node: &mut Node, voter: NodeId, term: Term) {
        node.step(Input::Campaign);
        for msg in [
            Message::PreVoteResponse {
                term,
                granted: true,
            },
            Message::RequestVoteResponse {
                term,
                granted: true,
            },
        ] {
            node.step(Input::Message { from: voter, msg });
        }
        assert_eq!(node.status().role, Role::Leader, "{:?}", node.status());
    }

    /// An acknowledgement from `from` of everything up to `match_index`.
    pub(crate) fn ack(from: NodeId, term: Term, match_index: Index) -> Input {
        Input::Message {
            from,
            msg: Message::AppendEntriesResponse {
                term,
                success: true,
                match_index,
                reject_hint: 0,
            },
        }
    }

    /// An AppendEntries from leader `from`.
    pub(crate) fn append(
        from: NodeId,
        term: Term,
        prev: (Term, Index),
        entries: Vec<Entry>,
        leader_commit: Index,
    ) -> Input {
        Input::Message {
            from,
            msg: Message::AppendEntries {
                term,
                prev_log_index: prev.1,
                prev_log_term: prev.0,
                entries,
                leader_commit,
            },
        }
    }

    /// An entry of `term` at `index` with `command`.
    pub(crate) fn entry(term: Term, index: Index, command: crate::lock::Command) -> Entry {
        Entry {
            term,
            index,
            proposal: crate::lock::Proposal::system(command),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::Command;

    #[test]
    fn a_single_node_elects_itself_and_commits_on_its_own_persist() {
        // Raft paper §5.2/§5.3 with one member: the majority is the node itself, counted
        // once its log is durable (io.rs contract).
        let (mut node, _) = Node::new(Config::new(1, vec![1]), Durable::default(), 0);
        node.step(Input::Campaign);
        assert_eq!(node.status().role, Role::Leader);
        assert_eq!(node.status().commit_index, 0, "the Noop is not durable yet");
        node.step(Input::Persisted { term: 1, index: 1 });
        assert_eq!(node.status().commit_index, 1);
        let request = ClientRequest::Release {
            key: "a".into(),
            token: 9,
            origin: None,
        };
        node.step(Input::Request {
            id: RequestId(1),
            request,
        });
        let out = node.step(Input::Persisted { term: 1, index: 2 });
        assert_eq!(out.respond, vec![(RequestId(1), Response::NotHolder)]);
    }

    #[test]
    fn a_restart_reapplies_the_log_up_to_the_durable_commit() {
        // Raft paper §5.3 and io.rs `Durable`: a restarted node re-applies committed entries,
        // and only those.
        let grant = Command::Grant {
            key: "a".into(),
            lease_ms: 100,
        };
        let entries: Vec<Entry> = [Command::Noop, grant.clone(), grant]
            .into_iter()
            .zip(1..)
            .map(|(command, index)| Entry {
                term: 1,
                index,
                proposal: crate::lock::Proposal::system(command),
            })
            .collect();
        let durable = Durable {
            hard_state: HardState {
                term: 1,
                voted_for: Some(1),
                commit: 2,
            },
            snapshot: None,
            entries,
        };
        let (node, out) = Node::new(Config::new(2, vec![1, 2, 3]), durable, 0);
        let applied: Vec<Index> = out.apply.iter().map(|c| c.index).collect();
        assert_eq!(applied, vec![1, 2]);
        assert_eq!(node.status().commit_index, 2);
        assert_eq!(node.status().last_log_index, 3);
        assert_eq!(node.table().holder("a").map(|h| h.token), Some(2));
        assert!(
            out.persist.is_none(),
            "a restart writes nothing: {:?}",
            out.persist
        );
    }
}
