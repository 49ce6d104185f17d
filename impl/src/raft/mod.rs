//! A sans-IO Raft core whose state machine is the lock table.
//!
//! [`Node::step`] takes an [`Input`] (a tick of the local clock, a message, a client request,
//! a persistence acknowledgement) and returns an [`Output`] that says what to persist, what
//! to send before and after persisting, what was applied and which clients to answer. Time
//! and randomness come in as inputs (the clock through [`Input::Tick`], the RNG as a seed in
//! [`Config`]), so the same code runs under tokio (`server.rs`) and under stateright
//! (`checker::model`). Nothing here may use tokio, tarpc, clocks, files or sockets:
//! `ci/test.sh` greps for them.

mod io;
mod message;

pub use io::{
    ClientRequest, Committed, Durable, Input, Output, Persist, RequestId, Response, Timer, TimerCmd,
};
pub use message::{Entry, Envelope, HardState, Index, Message, NodeId, Snapshot, Term};

use serde::{Deserialize, Serialize};

use crate::bugs::BugSet;

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
    /// last one.
    pub snapshot_threshold_entries: u64,
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
    /// The seed of the node's RNG (election timeouts).
    pub seed: u64,
    /// Injected bugs (`lockd --bug`); empty in a correct build.
    pub bugs: BugSet,
}

impl Config {
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
            append_entries_max: 256,
            waiters_per_key_max: 64,
            uncommitted_entries_max: 4096,
            lease_ms_max: 600_000,
            wait_ms_max: 60_000,
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
