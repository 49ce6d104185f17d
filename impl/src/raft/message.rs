//! The messages Raft nodes send each other, and the log, snapshot and hard-state records.
//!
//! Messages are one-way (as in etcd/raft and raft-rs): a response is its own message, so the
//! same core runs over the RPC layer (`deliver(from, msg)` per directed link) and over stateright's
//! unordered, lossy network. The core tolerates loss, duplication and reordering.

use serde::{Deserialize, Serialize};

use crate::lock::{LockTable, Proposal};

/// A node id, stable for the life of a cluster (static membership).
pub type NodeId = u64;

/// A Raft term.
pub type Term = u64;

/// A log index; the first entry has index 1, and 0 means "none".
pub type Index = u64;

/// One log entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Entry {
    /// The term of the leader that created it.
    pub term: Term,
    /// Its position in the log.
    pub index: Index,
    /// The command and who asked for it.
    pub proposal: Proposal,
}

/// The state that must survive a crash besides the log (Raft paper, Figure 2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HardState {
    /// The latest term this node has seen.
    pub term: Term,
    /// The candidate this node voted for in `term`, if any.
    pub voted_for: Option<NodeId>,
    /// A commit index known to be committed; after a restart the node may re-apply up to it.
    pub commit: Index,
}

/// A snapshot of the lock table at `last_index`, replacing the log up to that index.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Snapshot {
    /// The index of the last entry the snapshot covers.
    pub last_index: Index,
    /// The term of that entry.
    pub last_term: Term,
    /// The lock table after applying every entry up to `last_index`.
    pub table: LockTable,
}

/// A message between two Raft nodes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Message {
    /// Pre-vote (Raft thesis §9.6): would you vote for me in `term`? Changes no receiver state.
    PreVote {
        /// The term the candidate would campaign in (its current term + 1).
        term: Term,
        /// The index of the candidate's last log entry.
        last_log_index: Index,
        /// The term of the candidate's last log entry.
        last_log_term: Term,
    },
    /// The answer to a [`Message::PreVote`].
    PreVoteResponse {
        /// The term of the pre-vote being answered when granted; the responder's own term
        /// when refused.
        term: Term,
        /// Whether the pre-vote was granted.
        granted: bool,
    },
    /// RequestVote (Raft paper §5.2).
    RequestVote {
        /// The candidate's term.
        term: Term,
        /// The index of the candidate's last log entry.
        last_log_index: Index,
        /// The term of the candidate's last log entry.
        last_log_term: Term,
    },
    /// The answer to a [`Message::RequestVote`].
    RequestVoteResponse {
        /// The voter's current term.
        term: Term,
        /// Whether the vote was granted.
        granted: bool,
    },
    /// AppendEntries (Raft paper §5.3); with no entries it is a heartbeat.
    AppendEntries {
        /// The leader's term.
        term: Term,
        /// The index of the entry just before `entries`.
        prev_log_index: Index,
        /// The term of that entry.
        prev_log_term: Term,
        /// The entries to append (at most `Config::append_entries_max`).
        entries: Vec<Entry>,
        /// The leader's commit index.
        leader_commit: Index,
    },
    /// The answer to a [`Message::AppendEntries`].
    AppendEntriesResponse {
        /// The follower's current term.
        term: Term,
        /// Whether the entries matched and were appended.
        success: bool,
        /// On success, the index of the last entry known to match the leader's log.
        match_index: Index,
        /// On failure, a hint for back-off: the highest index that may still match the
        /// leader's log. The follower's last log index when its log is too short, else the
        /// last index before `prev_log_index` whose term is at most `prev_log_term` (etcd's
        /// `RejectHint` with `findConflictByTerm`). The leader retries from the entry after it.
        reject_hint: Index,
    },
    /// InstallSnapshot (Raft paper §7), one chunk of the encoded snapshot: the bytes from
    /// `offset` on. The leader keeps one chunk in flight per follower and sends the next one
    /// when this one is acknowledged, or this one again after `Config::snapshot_retransmit_ms`
    /// without an answer. A snapshot therefore never needs a frame larger than one chunk,
    /// whatever the lock table holds.
    InstallSnapshot {
        /// The leader's term.
        term: Term,
        /// The index of the last entry the snapshot covers.
        last_index: Index,
        /// The term of that entry.
        last_term: Term,
        /// Where `data` starts in the encoded snapshot.
        offset: u64,
        /// At most `Config::snapshot_chunk_bytes` bytes of the encoded snapshot.
        data: Vec<u8>,
        /// Whether `data` ends the encoded snapshot.
        done: bool,
    },
    /// The answer to a [`Message::InstallSnapshot`].
    InstallSnapshotResponse {
        /// The follower's current term.
        term: Term,
        /// The snapshot's last index.
        last_index: Index,
        /// How many bytes of the encoded snapshot the follower holds in order: the leader
        /// sends from there (0 after a gap or a damaged snapshot).
        received: u64,
        /// Whether the snapshot is installed and durable (or the follower's commit index is
        /// already past it): `last_index` is then the follower's match index.
        done: bool,
    },
    /// The leader is stopping cleanly (Raft thesis §3.10, leadership transfer, and etcd's
    /// `MsgTimeoutNow`): the receiver forgets the leader's lease, so that it grants pre-votes
    /// and votes at once, and with `campaign` (the most up-to-date follower) starts an
    /// election now instead of after an election timeout.
    TimeoutNow {
        /// The leader's term.
        term: Term,
        /// Whether the receiver should campaign now.
        campaign: bool,
    },
}

impl Message {
    /// The term the message carries.
    pub fn term(&self) -> Term {
        match self {
            Message::PreVote { term, .. }
            | Message::PreVoteResponse { term, .. }
            | Message::RequestVote { term, .. }
            | Message::RequestVoteResponse { term, .. }
            | Message::AppendEntries { term, .. }
            | Message::AppendEntriesResponse { term, .. }
            | Message::InstallSnapshot { term, .. }
            | Message::InstallSnapshotResponse { term, .. }
            | Message::TimeoutNow { term, .. } => *term,
        }
    }
}

/// A message with its addresses.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Envelope {
    /// The sender.
    pub source: NodeId,
    /// The receiver.
    pub target: NodeId,
    /// The message.
    pub msg: Message,
}
