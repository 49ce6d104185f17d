//! Injected bugs (`lockd --bug NAME`): each a small switch that breaks one rule, so that every
//! check of the harness and the model can be shown to catch something real.
//!
//! A correct build runs with an empty [`BugSet`]. Each variant documents the rule it breaks
//! and the check meant to catch it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One injected bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Bug {
    /// `expire-ignores-token`: Expire deletes whatever holds the key, so a late Expire removes
    /// a newer grant. Caught by the model property "a late or duplicate Expire never removes a
    /// newer grant" and by lease safety in a chaos run.
    ExpireIgnoresToken,
    /// `follower-grants`: a follower grants an acquire on its own, without replication.
    /// Caught by "at most one holder of a key" and linearizability.
    FollowerGrants,
    /// `no-fsync`: acknowledges before persisting (the server keeps writes in a user-space
    /// buffer that a SIGKILL loses; the model skips the save). Caught after crashes by State
    /// Machine Safety and token checks.
    NoFsync,
    /// `early-expire`: the leader expires a lease early, as clock drift would. Caught by lease
    /// safety (no overlapping holders beyond the drift bound).
    EarlyExpire,
    /// `release-by-key`: the seed's Release without a token; a stale release frees a newer
    /// holder's lock. Caught by "at most one holder" with fenced writes, and linearizability.
    ReleaseByKey,
    /// `token-from-local-counter`: tokens come from a node-local counter instead of replicated
    /// state. Caught by "fencing tokens strictly increase" after a leader change or restart.
    TokenFromLocalCounter,
    /// `stale-leader`: a deposed leader keeps answering acquires (no check-quorum, grants from
    /// local state). Caught by linearizability and lease safety under partitions.
    StaleLeader,
    /// `skip-phantom-release`: no Release for a client that left mid-acquire; the lock stays
    /// held until its lease runs out. Caught by the phantom-release test and model property.
    SkipPhantomRelease,
    /// `granted-before-commit`: the leader answers `Granted` when it appends the Grant, before
    /// the entry commits (issue 24's blind spot: a `Granted` not backed by an applied Grant).
    /// A leader deposed before the commit leaves a client holding a lock nobody granted.
    /// Caught by the trace replay's "every Granted answer is backed by an applied Grant".
    GrantedBeforeCommit,
    /// `snapshot-loses-state`: a follower installing a snapshot keeps its locks but drops the
    /// dedupe table that travels with them (issue 24's blind spot: nothing compared snapshot
    /// state across nodes). A retry then applies twice. Caught by the trace replay's "nodes at
    /// the same applied index hold the same table, dedupe entries included".
    SnapshotLosesState,
    /// `new-leader-expires`: a new leader, once its Noop commits, proposes an Expire for every
    /// lock it inherited, not only for those whose lease ran out on its own clock (issue 24's
    /// blind spot: an Expire no timer fired for). Caught by lease safety, and by the trace
    /// replay's "an Expire is proposed only for a lease whose timer fired on that node".
    NewLeaderExpires,
    /// `grant-to-closed-connection`: the server hands an answer that became ready together
    /// with the end of its client's connection to that dead connection, so a grant in it is
    /// lost and held until its lease runs out (the fix of last round's read-found server
    /// defect, reverted). Reached by the fault point `server-wait-late` with a client that
    /// cut its connection hard (`client-cut-connection`); caught by the contract check at the
    /// client port's `Serve` boundary (`server::clients::Checked`), which stops the simulated
    /// node so that node health names it.
    GrantToClosedConnection,
    /// `trust-retry-after-unknown`: the client library takes a grant that a retry got back
    /// from the dedupe table after a node answered `Unknown` for the same request (the node
    /// releases that grant as a phantom lock) as its own (the fix of last round's read-found
    /// client defect, reverted). Caught by lease safety and linearizability: the client
    /// writes under a token the cluster has released and granted again.
    TrustRetryAfterUnknown,
    /// `reply-before-persist`: the server sends what must wait for its persist (a vote, an
    /// AppendEntries acknowledgement) before it persists (issue 24's blind spot: no world
    /// crashed between a send and the save of the same turn). Caught in the simulator through
    /// the crash point `crash-before-persist`: a vote or an acknowledgement the restarted node
    /// no longer backs (Election Safety, Log Matching, lost commits in the trace replay).
    ReplyBeforePersist,
    /// `invalid-after-sent`: the client library reports a refusal (`Invalid`) of a retry as
    /// a definite failure, although an earlier attempt of the same request was sent and may
    /// commit (the fix of a review defect of issue 24, reverted: a retry refused by a bound
    /// its own first attempt reached). Reached on seeds that draw small request bounds;
    /// caught by linearizability (a `fail` acquire whose grant holds the key).
    InvalidAfterSent,
    /// `activity-at-registration`: the leader stamps committed time on registrations only,
    /// so a request marks its session active at the last registration's time, and a session
    /// busy long after a registration expires at the next one (the fix of a review defect of
    /// issue 24, reverted). Reached on seeds that draw a short session timeout; caught by
    /// liveness rule S (a session told it expired soon after an ok op under it).
    ActivityAtRegistration,
    /// `committed-time-from-uptime`: the leader stamps its own process clock as committed
    /// time, so a leader change to a node up longer jumps committed time ahead by the
    /// difference of the uptimes and expires every session at once (the fix of a review
    /// defect of issue 24, reverted). Reached on seeds with a short session timeout and a
    /// restarted node; caught by liveness rule S.
    CommittedTimeFromUptime,
    /// `grant-lost-on-gone`: a client's departure in the same batch of events as the
    /// node's grant of its request does not take the grant out of the batch's output, so the
    /// answer finds no request and the grant is never released (the fix of a review defect of
    /// issue 24, reverted). Caught by the core's contract check (`Core::lost_grant`), which
    /// stops the simulated node so that node health names it.
    GrantLostOnGone,
    /// `check-quorum-any-message`: a leader counts any message from a follower, PreVotes and
    /// answers of older terms included, as that follower's activity for check-quorum, so a
    /// leader whose links out are cut keeps leading while the others' PreVotes reach it (the
    /// fix of a review defect of issue 24, reverted). Caught by the trace replay's
    /// check-quorum property (`checker::model::replay`).
    CheckQuorumAnyMessage,
    /// `vote-before-persist`: a node sends its RequestVoteResponse with `send_now`, before
    /// the vote it grants is durable (issue 24, item 4: a message sent before the state it
    /// depends on was saved). A node that crashes before the save comes back without the vote
    /// and may vote again in the same term, for another candidate. Caught by the model's
    /// random walks with split steps (`ModelConfig::save_later`: a crash between a step's
    /// sends and its save) as Election Safety, two leaders of one term; the server mutant
    /// `reply-before-persist` breaks the same rule in the driver instead of the core.
    VoteBeforePersist,
    /// `commit-old-term`: a leader commits the highest index a majority holds whatever its
    /// term (the Raft paper's Figure 8 mistake: §5.4.2 allows counting replicas only for an
    /// entry of the leader's own term). An entry of an older term counted as committed can
    /// still be overwritten by a later leader. Caught by the commit rules
    /// (`raft::invariants::commit_rules`) that the model and the trace replay check at every
    /// step.
    CommitOldTerm,
    /// `follower-commit-past-sent`: a follower takes the leader's commit index up to its own
    /// last log index, not up to the last entry the AppendEntries carried, so it may apply a
    /// stale suffix another leader left in its log. Caught by the commit rules, as above.
    FollowerCommitPastSent,
    /// `cancel-not-orphaned`: the client port sees tarpc's `Cancel` for a call whose grant
    /// its handler had already answered, and does nothing with it (the server half of the
    /// deadline defect's fix, undone: `server::clients::CancelWatch`). A client that stopped
    /// waiting, or dropped the call, and never runs another op leaves the key held, known to
    /// nobody, for the whole lease. Caught by the connection's account of its grants (a grant kept after its `Cancel` was read), and
    /// by liveness rule P, which judges lockd's departures without a witness
    /// (`LivenessOptions::cancelled_grants_released`).
    CancelNotOrphaned,
    /// `snapshot-refused`: a follower's check of a received snapshot is one off
    /// (`last_token < last_index` where `<=` is meant), so it refuses every honest snapshot
    /// whose last entry is a grant and stays behind until the leader compacts again. No
    /// history shows it. Caught by the core's contract check under the simulator
    /// (`Core::snapshot_refused`) and by the trace replay (a refused snapshot departs).
    SnapshotRefused,
    /// `link-panics-on-empty-reply`: a peer link applies its link faults to an empty reply
    /// too, and a duplicate fault then indexes the empty batch: the link task panics, tokio
    /// ends that task alone, and the node stays up without a link to that peer (the defect
    /// the simulator found in the peer replies' first version, 2026-12-06). Only under the
    /// simulator's flaky links. Caught by node health, which names every panic of a seed's
    /// thread (`nemesis::capture::record_panics`); before that check only liveness saw it,
    /// on some seeds.
    LinkPanicsOnEmptyReply,
    /// `cancel-crossing-answer-forgotten`: a client connection forgets a `Cancel` that found
    /// no grant recorded yet (the fix of a review defect of 2026-12-06, undone:
    /// `server::clients::AnsweredGrants`). On lockd's two workers the connection's task can
    /// read the `Cancel` after the handler returned its grant and before the `Serve`
    /// boundary recorded it; tarpc drops the answer unwritten and nobody releases the key for
    /// the whole lease (since 2026-12-07, until the connection ends). Caught, through the
    /// interleaving point `serve-boundary-yield`, by the connection's account of its grants
    /// (`server::clients::AnsweredGrants`: a grant kept after its `Cancel` was read); before
    /// the account, by liveness rule P in the phantom-lock probe's crossing round.
    CancelCrossingAnswerForgotten,
    /// `connection-end-unseen`: a client connection's end is never told to its handlers
    /// (`server::clients::EofNotify` does not flip its flag), so a handler whose client died
    /// with no cancellation keeps waiting, and its grant goes to nobody for the whole lease.
    /// A hand-made mistake (2026-12-06) that every tool missed: a cancellation, or the
    /// client library's retry and abandon, always told the node first. Caught by liveness
    /// rule P in the phantom-lock probe's round whose leaver crashes (`LeaveHow::Crash`).
    ConnectionEndUnseen,
    /// `grant-written-after-end-kept`: a client connection takes every answer tarpc writes
    /// for delivered, also one written after the connection's end (the fix of 2026-12-07,
    /// undone: `server::clients::CancelWatch::writes`). A grant recorded with the connection
    /// open, whose client then died before tarpc wrote the answer, reaches nobody and keeps
    /// its key for the whole lease. Reached through the interleaving point
    /// `serve-write-yield`; caught by the connection's account of its grants
    /// (`server::clients::AnsweredGrants`), which stops the node under the simulator.
    GrantWrittenAfterEndKept,
    /// `waiters-served-lifo`: the leader hands a freed key to the waiter that came last, not
    /// first (DESIGN.md "Clients": FIFO waiters at the leader). Every answer stays truthful
    /// and every lock safe, so no history shows it. Caught by the FIFO step rule
    /// (`raft::invariants::step_rules`), in the trace replay and the model checker.
    WaitersServedLifo,
    /// `refused-retry-to-head`: a retry proposed at once (its earlier attempt's last try was
    /// ahead in the log), refused with it, waits again at the head of the queue, ahead of
    /// waiters that came before it: lockd's own code until 2026-12-07, found by the FIFO step
    /// rule on seeds 4, 30 and others of 1..200. Caught by that rule.
    RefusedRetryToHead,
    /// `late-snapshot-answer-stalls`: the leader takes a follower's count of snapshot bytes
    /// only when it grows or drops to 0, and ignores one below what it took as late (lockd's
    /// code until the review of 2026-12-07). After a follower's restart, one answer from
    /// before it arriving late makes the leader send from past what the follower holds, and
    /// every answer after is ignored: the transfer stalls for as long as the leader leads.
    /// Caught by the step rule on a chunked transfer (`raft::invariants::step_rules`).
    LateSnapshotAnswerStalls,
    /// `snapshot-ack-before-persist`: a follower acknowledges an installed snapshot (`done`)
    /// before the snapshot's persist (a hand-made mistake of 2026-12-07 that every tool
    /// missed: a crash in between leaves the leader's match index past the follower's log,
    /// and the follower stranded until the leader changes). Caught by the step rule that
    /// acknowledgements go after the persist (`raft::invariants::step_rules`).
    SnapshotAckBeforePersist,
    /// `tick-misses-timers-due-now`: a tick fires only the timers due strictly before its
    /// clock reading, not those due at it (an off-by-one of 2026-12-07). The driver, woken
    /// for a deadline that has come, finds it still due after the tick and wakes again at
    /// once: under the simulator the core spins at one instant. Caught by the core's spin
    /// check under the simulator (`server::core::Core::spin_check`) and by the step rule
    /// that a tick leaves no deadline due (`raft::invariants::step_rules`).
    TickMissesTimersDueNow,
}

impl Bug {
    /// Every bug, in declaration order.
    pub const ALL: [Bug; 33] = [
        Bug::ExpireIgnoresToken,
        Bug::FollowerGrants,
        Bug::NoFsync,
        Bug::EarlyExpire,
        Bug::ReleaseByKey,
        Bug::TokenFromLocalCounter,
        Bug::StaleLeader,
        Bug::SkipPhantomRelease,
        Bug::GrantedBeforeCommit,
        Bug::SnapshotLosesState,
        Bug::NewLeaderExpires,
        Bug::GrantToClosedConnection,
        Bug::TrustRetryAfterUnknown,
        Bug::ReplyBeforePersist,
        Bug::InvalidAfterSent,
        Bug::ActivityAtRegistration,
        Bug::CommittedTimeFromUptime,
        Bug::GrantLostOnGone,
        Bug::CheckQuorumAnyMessage,
        Bug::VoteBeforePersist,
        Bug::CommitOldTerm,
        Bug::FollowerCommitPastSent,
        Bug::CancelNotOrphaned,
        Bug::SnapshotRefused,
        Bug::LinkPanicsOnEmptyReply,
        Bug::CancelCrossingAnswerForgotten,
        Bug::ConnectionEndUnseen,
        Bug::GrantWrittenAfterEndKept,
        Bug::WaitersServedLifo,
        Bug::RefusedRetryToHead,
        Bug::LateSnapshotAnswerStalls,
        Bug::SnapshotAckBeforePersist,
        Bug::TickMissesTimersDueNow,
    ];

    /// The command-line name, e.g. `expire-ignores-token`.
    pub fn name(self) -> &'static str {
        match self {
            Bug::ExpireIgnoresToken => "expire-ignores-token",
            Bug::FollowerGrants => "follower-grants",
            Bug::NoFsync => "no-fsync",
            Bug::EarlyExpire => "early-expire",
            Bug::ReleaseByKey => "release-by-key",
            Bug::TokenFromLocalCounter => "token-from-local-counter",
            Bug::StaleLeader => "stale-leader",
            Bug::SkipPhantomRelease => "skip-phantom-release",
            Bug::GrantedBeforeCommit => "granted-before-commit",
            Bug::SnapshotLosesState => "snapshot-loses-state",
            Bug::NewLeaderExpires => "new-leader-expires",
            Bug::GrantToClosedConnection => "grant-to-closed-connection",
            Bug::TrustRetryAfterUnknown => "trust-retry-after-unknown",
            Bug::ReplyBeforePersist => "reply-before-persist",
            Bug::InvalidAfterSent => "invalid-after-sent",
            Bug::ActivityAtRegistration => "activity-at-registration",
            Bug::CommittedTimeFromUptime => "committed-time-from-uptime",
            Bug::GrantLostOnGone => "grant-lost-on-gone",
            Bug::CheckQuorumAnyMessage => "check-quorum-any-message",
            Bug::VoteBeforePersist => "vote-before-persist",
            Bug::CommitOldTerm => "commit-old-term",
            Bug::FollowerCommitPastSent => "follower-commit-past-sent",
            Bug::CancelNotOrphaned => "cancel-not-orphaned",
            Bug::SnapshotRefused => "snapshot-refused",
            Bug::LinkPanicsOnEmptyReply => "link-panics-on-empty-reply",
            Bug::CancelCrossingAnswerForgotten => "cancel-crossing-answer-forgotten",
            Bug::ConnectionEndUnseen => "connection-end-unseen",
            Bug::GrantWrittenAfterEndKept => "grant-written-after-end-kept",
            Bug::WaitersServedLifo => "waiters-served-lifo",
            Bug::RefusedRetryToHead => "refused-retry-to-head",
            Bug::LateSnapshotAnswerStalls => "late-snapshot-answer-stalls",
            Bug::SnapshotAckBeforePersist => "snapshot-ack-before-persist",
            Bug::TickMissesTimersDueNow => "tick-misses-timers-due-now",
        }
    }

    fn bit(self) -> u64 {
        // `BugSet` is a `u64`: one bit per bug (the test `every_bug_has_its_own_bit` checks
        // there is room).
        1 << (self as u32)
    }
}

impl fmt::Display for Bug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown bug name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown bug {name:?}; known: {}", Bug::ALL.map(Bug::name).join(", "))]
pub struct UnknownBug {
    /// The name given.
    pub name: String,
}

impl FromStr for Bug {
    type Err = UnknownBug;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Bug::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| UnknownBug { name: s.to_owned() })
    }
}

/// A set of injected bugs; empty by default.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct BugSet(u64);

impl BugSet {
    /// No bugs.
    pub const NONE: BugSet = BugSet(0);

    /// The set of the given bugs.
    pub fn of(bugs: &[Bug]) -> Self {
        BugSet(bugs.iter().fold(0, |acc, b| acc | b.bit()))
    }

    /// Whether `bug` is injected.
    pub fn contains(self, bug: Bug) -> bool {
        self.0 & bug.bit() != 0
    }

    /// Whether no bug is injected.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The bugs in the set.
    pub fn iter(self) -> impl Iterator<Item = Bug> {
        Bug::ALL.into_iter().filter(move |b| self.contains(*b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bug_name_parses_back() {
        // DESIGN.md, "Mutants": `lockd --bug NAME` names one known bug.
        for bug in Bug::ALL {
            assert_eq!(bug.name().parse::<Bug>(), Ok(bug));
        }
        let err = "nope".parse::<Bug>().unwrap_err();
        assert!(err.to_string().contains("expire-ignores-token"), "{err}");
    }

    #[test]
    fn every_bug_has_its_own_bit() {
        // `BugSet` is a u64 bitset: a 65th bug would overflow the shift.
        assert!(Bug::ALL.len() <= 64, "{} bugs", Bug::ALL.len());
        let all = BugSet::of(&Bug::ALL);
        assert_eq!(all.iter().count(), Bug::ALL.len());
    }

    #[test]
    fn bug_set_holds_exactly_its_members() {
        // DESIGN.md, "Mutants": each switch injects one bug.
        let set = BugSet::of(&[Bug::NoFsync, Bug::StaleLeader]);
        assert!(set.contains(Bug::NoFsync));
        assert!(set.contains(Bug::StaleLeader));
        assert!(!set.contains(Bug::EarlyExpire));
        assert_eq!(set.iter().count(), 2);
        assert!(BugSet::NONE.is_empty());
    }
}
