//! The Raft safety properties (Raft paper Figure 3) and the lock service's token rule, as
//! checks that the testkit runs after every step and the stateright model runs as `Always`
//! properties.
//!
//! - Node-local (one node): [`super::Node::check_invariants`], asserted after every step in
//!   debug builds.
//! - Cross-node: [`election_safety`], [`log_matching`], [`leader_completeness`],
//!   [`state_machine_safety`], [`tokens_strictly_increase`], each returning `Err` with the
//!   values that break it. The last three read a [`Ledger`] of every applied entry, which
//!   outlives crashes.

use std::collections::BTreeMap;

use super::{
    Committed, Index, Input, Message, Node, NodeId, Output, PendingKind, RequestId, Role, Status,
    Term, Timer,
};
use crate::bugs::Bug;
use crate::lock::{Key, Outcome, Proposal, Token};

/// Node-local invariants, one assertion each, with the values in the message.
pub(crate) fn check_node(node: &Node) {
    let id = node.config.id;
    let last = node.log.last_index();
    assert!(
        node.commit_index <= last,
        "node {id}: commit_index {} past last log index {last}",
        node.commit_index
    );
    assert_eq!(
        node.table.last_applied(),
        node.commit_index,
        "node {id}: last_applied {} differs from commit_index {} after a step",
        node.table.last_applied(),
        node.commit_index
    );
    assert!(
        node.log.base_index() <= node.commit_index,
        "node {id}: snapshot index {} past commit_index {}",
        node.log.base_index(),
        node.commit_index
    );
    let mut previous = node.log.term_at(node.log.base_index()).unwrap_or(0);
    for entry in &node.log.entries {
        assert!(
            entry.term >= previous,
            "node {id}: log terms decrease at index {}: {} after {previous}",
            entry.index,
            entry.term
        );
        previous = entry.term;
    }
    assert!(
        node.log.last_term() <= node.term,
        "node {id}: last log term {} above current term {}",
        node.log.last_term(),
        node.term
    );
    assert!(
        node.timers.index_agrees(),
        "node {id}: the timers' deadline index disagrees with the timers"
    );
    check_role(node);
    check_leases(node);
    // Token monotonicity: the token of every lock is at most the last token issued, which is
    // at most the last applied index. Skipped under `token-from-local-counter`: that mutant
    // must be caught by the harness and the model, not by an assertion in the core.
    if !node.config.bugs.contains(Bug::TokenFromLocalCounter) {
        assert!(
            node.table.last_token() <= node.table.last_applied(),
            "node {id}: last token {} above last applied {}",
            node.table.last_token(),
            node.table.last_applied()
        );
        for (key, held) in node.table.locks() {
            assert!(
                held.token <= node.table.last_token(),
                "node {id}: lock {key:?} token {} above last token {}",
                held.token,
                node.table.last_token()
            );
        }
    }
}

fn check_role(node: &Node) {
    let id = node.config.id;
    if node.role == Role::Leader {
        assert_eq!(
            node.voted_for,
            Some(id),
            "node {id}: leader of term {} voted for {:?}",
            node.term,
            node.voted_for
        );
        // The Noop may be compacted into a snapshot; then its term is no longer known.
        if node.noop_index > node.log.base_index() {
            assert_eq!(
                node.log.term_at(node.noop_index),
                Some(node.term),
                "node {id}: leader's Noop at {} is not of its term {}",
                node.noop_index,
                node.term
            );
        }
        assert!(
            node.timers.contains_key(&Timer::Heartbeat),
            "node {id}: leader of term {} has no heartbeat timer",
            node.term
        );
        for key in node.waiters.keys() {
            assert!(
                node.key_taken(key),
                "node {id}: waiters queued for {key:?}, which is neither held nor granted in the log"
            );
        }
    } else {
        assert!(
            node.timers.contains_key(&Timer::Election),
            "node {id}: {:?} of term {} has no election timer",
            node.role,
            node.term
        );
        assert!(
            node.pending.is_empty(),
            "node {id}: {:?} keeps {} pending requests",
            node.role,
            node.pending.len()
        );
        assert!(
            node.waiters.is_empty(),
            "node {id}: {:?} keeps waiters for {:?}",
            node.role,
            node.waiters.keys().collect::<Vec<_>>()
        );
    }
}

fn check_leases(node: &Node) {
    let id = node.config.id;
    // The lease timers and the local expiries, each in (key, token) order as the locks are in
    // key order: walked beside the locks, with no key copied to look one up (the copies were
    // a third of this check's CPU in the trace replay).
    let mut timers = (node.timers.keys())
        .filter_map(|t| match t {
            Timer::Lease { key, token } => Some((key.as_str(), *token)),
            _ => None,
        })
        .peekable();
    let mut expired = (node.expired.iter())
        .map(|(k, t)| (k.as_str(), *t))
        .peekable();
    for (key, held) in node.table.locks() {
        let this = (key.as_str(), held.token);
        while timers.next_if(|t| *t < this).is_some() {}
        while expired.next_if(|e| *e < this).is_some() {}
        let tracked = timers.peek() == Some(&this) || expired.peek() == Some(&this);
        assert!(
            tracked,
            "node {id}: lock {key:?} token {} has neither a lease timer nor a local expiry",
            held.token
        );
    }
    for timer in node.timers.keys() {
        if let Timer::Lease { key, token } = timer {
            assert_eq!(
                node.table.holder(key).map(|h| h.token),
                Some(*token),
                "node {id}: lease timer for {key:?} token {token} but the holder differs"
            );
        }
    }
}

/// Election Safety: at most one leader per term among `nodes` (current roles).
pub fn election_safety(nodes: &[&Node]) -> Result<(), String> {
    let mut leaders: BTreeMap<Term, NodeId> = BTreeMap::new();
    for node in nodes.iter().filter(|n| n.role == Role::Leader) {
        if let Some(other) = leaders.insert(node.term, node.config.id) {
            return Err(format!(
                "Election Safety: nodes {other} and {} both lead term {}",
                node.config.id, node.term
            ));
        }
    }
    Ok(())
}

/// Log Matching: if two logs hold an entry with the same index and term, the logs are
/// identical up to that index (compared where both still hold entries).
pub fn log_matching(nodes: &[&Node]) -> Result<(), String> {
    for (i, a) in nodes.iter().enumerate() {
        for b in &nodes[i + 1..] {
            log_matching_pair(a, b)?;
        }
    }
    Ok(())
}

/// [`log_matching`] between `node` and each of `others` only: for a checker that steps one
/// node at a time, the pairs that step can have changed.
pub fn log_matching_of(node: &Node, others: &[&Node]) -> Result<(), String> {
    (others.iter())
        .filter(|other| other.config.id != node.config.id)
        .try_for_each(|other| log_matching_pair(node, other))
}

/// What [`log_fingerprint`] gives: base, last index, its term, commit index, current term.
pub type LogFingerprint = (Index, Index, Option<Term>, Index, Term);

/// What a step that changes `node`'s log or commit index changes: the snapshot's index, the
/// last index and its term, the commit index and the term. Equal before and after a step,
/// the log-wide checks of that node ([`log_matching_of`], [`state_machine_safety`]) have
/// nothing new to see (a rewrite keeps neither the last index and term nor the commit).
pub fn log_fingerprint(node: &Node) -> LogFingerprint {
    let last = node.log.last_index();
    let (base, commit) = (node.log.base_index(), node.commit_index);
    (base, last, node.log.term_at(last), commit, node.term)
}

fn log_matching_pair(a: &Node, b: &Node) -> Result<(), String> {
    let last = a.log.last_index().min(b.log.last_index());
    // Below the lowest index whose term both logs know, no term can match: the search stops
    // there. (Searching down to 1 made a lagging node's every step scan its whole history
    // against a leader that had compacted past it.)
    let known = |n: &Node| n.log.first_index().min(n.log.base_index());
    let lowest = known(a).max(known(b)).max(1);
    // The highest index where both hold the same term: everything below must agree.
    let Some(top) = (lowest..=last)
        .rev()
        .find(|i| a.log.term_at(*i).is_some() && a.log.term_at(*i) == b.log.term_at(*i))
    else {
        return Ok(());
    };
    let from = a.log.base_index().max(b.log.base_index()) + 1;
    for index in from..=top {
        let (ea, eb) = (a.log.entry(index), b.log.entry(index));
        if ea != eb {
            return Err(format!(
                "Log Matching: nodes {} and {} agree on term {:?} at index {top} but differ at {index}: {ea:?} vs {eb:?}",
                a.config.id,
                b.config.id,
                a.log.term_at(top)
            ));
        }
    }
    Ok(())
}

/// One applied entry as first recorded.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LedgerEntry {
    /// The entry's term.
    pub term: Term,
    /// The proposal.
    pub proposal: Proposal,
    /// The outcome the first node to apply it computed.
    pub outcome: Outcome,
    /// The first node that applied it.
    pub node: NodeId,
    /// That node's current term when it applied it: the entry was committed in this term
    /// or earlier.
    pub known_in_term: Term,
}

/// Every entry any node applied, by index; survives crashes (the testkit and the model keep
/// one per run).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ledger {
    entries: BTreeMap<Index, LedgerEntry>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Ledger::default()
    }

    /// Records that `node`, in its term `term`, applied `committed`. Errs (State Machine
    /// Safety) when another node applied a different entry, or computed a different
    /// outcome, at the same index.
    pub fn record(
        &mut self,
        node: NodeId,
        term: Term,
        committed: &Committed,
    ) -> Result<(), String> {
        let Some(first) = self.entries.get(&committed.index) else {
            let entry = LedgerEntry {
                term: committed.term,
                proposal: committed.proposal.clone(),
                outcome: committed.outcome.clone(),
                node,
                known_in_term: term,
            };
            self.entries.insert(committed.index, entry);
            return Ok(());
        };
        if first.term != committed.term || first.proposal != committed.proposal {
            return Err(format!(
                "State Machine Safety: node {node} applied {:?} (term {}) at index {}, node {} applied {:?} (term {})",
                committed.proposal,
                committed.term,
                committed.index,
                first.node,
                first.proposal,
                first.term
            ));
        }
        if first.outcome != committed.outcome {
            return Err(format!(
                "State Machine Safety: at index {} node {node} computed {:?}, node {} computed {:?}",
                committed.index, committed.outcome, first.node, first.outcome
            ));
        }
        Ok(())
    }

    /// A copy with `f` applied to every entry (the model renames ids with it).
    pub fn map_entries(&self, mut f: impl FnMut(&mut LedgerEntry)) -> Ledger {
        let mut entries = self.entries.clone();
        for entry in entries.values_mut() {
            f(entry);
        }
        Ledger { entries }
    }

    /// The recorded entry at `index`.
    pub fn get(&self, index: Index) -> Option<&LedgerEntry> {
        self.entries.get(&index)
    }

    /// The recorded entries in index order.
    pub fn iter(&self) -> impl Iterator<Item = (Index, &LedgerEntry)> {
        self.entries.iter().map(|(i, e)| (*i, e))
    }

    /// How many entries were recorded.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The commit rules of one step of `node`, whose status before the step was `before` and
/// which stepped `input` (the model and the trace replay check every step with it):
///
/// - **a leader commits by counting only an entry of its own term** (Raft §5.4.2, the
///   Figure 8 rule): a node that led the same term before and after the step, and whose
///   commit index moved, moved it to an entry of that term (earlier entries come along);
/// - **a follower commits no further than its leader said and sent**: after an
///   AppendEntries, a commit index that moved is at most the message's `leader_commit` and
///   at most the index of the last entry the message carried (`prev_log_index` plus its
///   entries): beyond that the follower's log may still hold another leader's entries.
///
/// Both are local to one node and one step, so they catch a broken rule every time it is
/// taken, where the cross-node properties see it only when another node's log differs.
pub fn commit_rules(before: &Status, node: &Node, input: &Input) -> Result<(), String> {
    let (id, commit) = (node.config.id, node.commit_index);
    if commit <= before.commit_index {
        return Ok(());
    }
    if before.role == Role::Leader && node.role == Role::Leader && before.term == node.term {
        let term = node.log.term_at(commit);
        if term != Some(node.term) {
            return Err(format!(
                "leader {id} of term {} moved its commit index from {} to {commit}, an entry of term {term:?}: a leader commits by counting only entries of its own term",
                node.term, before.commit_index
            ));
        }
    }
    if let Input::Message {
        msg:
            Message::AppendEntries {
                prev_log_index,
                entries,
                leader_commit,
                ..
            },
        ..
    } = input
    {
        let sent = prev_log_index + entries.len() as u64;
        if commit > (*leader_commit).min(sent) {
            return Err(format!(
                "node {id} moved its commit index from {} to {commit} on an AppendEntries \
                 with leader_commit {leader_commit} that carried entries up to {sent}",
                before.commit_index
            ));
        }
    }
    Ok(())
}

/// What [`step_rules`] needs of a node before its step (a copy of the whole node would cost
/// the trace replay a log per step).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepBefore {
    term: Term,
    voted_for: Option<NodeId>,
    role: Role,
    leader: Option<NodeId>,
    last_log_index: Index,
    last_log_term: Term,
    /// The leader's queue of waiters per key ([`waiting_order`]).
    waiting: BTreeMap<Key, Vec<WaiterName>>,
    /// The leader's snapshot transfers: per follower, the snapshot's last index, the bytes
    /// the follower acknowledged and the snapshot's length.
    transfers: BTreeMap<NodeId, (Index, u64, u64)>,
}

impl StepBefore {
    /// `node` as it stands before a step.
    pub fn of(node: &Node) -> StepBefore {
        StepBefore {
            term: node.term,
            voted_for: node.voted_for,
            role: node.role,
            leader: node.leader,
            last_log_index: node.log.last_index(),
            last_log_term: node.log.last_term(),
            waiting: waiting_order(node),
            transfers: (node.progress.iter())
                .filter_map(|(&peer, p)| {
                    let send = p.snapshot.as_ref()?;
                    Some((peer, (send.last_index, send.acked, send.bytes.len() as u64)))
                })
                .collect(),
        }
    }
}

/// A waiter as the FIFO rule tells waiters apart: by its request's origin (a retry of the
/// same acquire takes its earlier attempt's place, under a new request id), else by the id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WaiterName {
    Origin(crate::lock::Origin),
    Request(RequestId),
}

/// Per key, the leader's queue of waiters from its head.
fn waiting_order(node: &Node) -> BTreeMap<Key, Vec<WaiterName>> {
    (node.waiters.iter())
        .map(|(key, queue)| (key.clone(), queue.iter().map(WaiterName::of).collect()))
        .collect()
}

impl WaiterName {
    fn of(waiter: &super::Waiter) -> WaiterName {
        match waiter.origin {
            Some(origin) => WaiterName::Origin(origin),
            None => WaiterName::Request(waiter.id),
        }
    }
}

/// DESIGN.md "Clients": acquires with a wait deadline are served FIFO at the leader. Over one
/// step, per key: the waiters that stay in the queue keep their order; a waiter that enters
/// it (a new acquire, or a retry whose own Grant was refused) enters at the tail; and a
/// waiter whose Grant the step proposed left from ahead of every waiter that stays. Leaving
/// otherwise (a deadline's last try, a client gone, a step-down) is free. (A waiter is
/// proposed only when no Grant of its key is ahead in the log, so its Grant is never
/// refused and it never comes back.)
fn waiters_in_order(before: &StepBefore, node: &Node) -> Result<(), String> {
    let id = node.config.id;
    let after = waiting_order(node);
    let proposed: Vec<WaiterName> = (node.pending.values())
        .filter_map(|p| match &p.kind {
            PendingKind::Grant { waiter: Some(w) } => Some(WaiterName::of(w)),
            _ => None,
        })
        .collect();
    let empty = Vec::new();
    for (key, earlier) in &before.waiting {
        let now = after.get(key).unwrap_or(&empty);
        let stayed: Vec<WaiterName> = (earlier.iter())
            .filter(|n| now.contains(n))
            .copied()
            .collect();
        let broken = |at: usize, name: &WaiterName, why: &str| {
            Err(format!(
                "node {id} {why} (waiter {name:?} of key {key:?}, place {at}): before the step \
                 the key's queue was {earlier:?}, after it {now:?} (DESIGN.md: waiters are \
                 served FIFO)"
            ))
        };
        for (at, name) in now.iter().enumerate() {
            match stayed.get(at) {
                Some(kept) if kept == name => {}
                Some(_) if stayed.contains(name) => {
                    return broken(at, name, "moved a waiter ahead of one that was ahead of it");
                }
                Some(_) => {
                    return broken(at, name, "queued a waiter ahead of one already waiting");
                }
                None => {}
            }
        }
        let first_kept = stayed
            .first()
            .and_then(|k| earlier.iter().position(|n| n == k));
        for (at, name) in earlier.iter().enumerate() {
            let granted = !now.contains(name) && proposed.contains(name);
            if granted && first_kept.is_some_and(|first| first < at) {
                return broken(
                    at,
                    name,
                    "proposed a Grant for a waiter behind one that still waits",
                );
            }
        }
    }
    Ok(())
}

/// The receiver rules of Raft's Figure 2 (and pre-vote's, thesis §9.6), checked on one step
/// of one node against what it was before, the input and the output, independently of the
/// code that decides them: a node's term never goes back; its vote of a term never changes;
/// a vote or pre-vote is granted only to a candidate that asked in the voter's term (a
/// later one for a pre-vote) with a log at least as up to date as the voter's (§5.4.1); a
/// successful AppendEntries answer acknowledges no more than the message carried, and the
/// log then holds what it acknowledged, its previous entry included; a leader only appends
/// to its log in its term; an acknowledgement of entries or of an installed snapshot goes
/// out after the step's persist; a leader told a follower's count of snapshot bytes that
/// differs from its own sends the chunk that starts there; a tick leaves no deadline due; a
/// TimeoutNow from any node but the node's leader changes nothing;
/// and, DESIGN.md's promise to clients, a leader serves the acquires waiting for a key in
/// the order they came ([`waiters_in_order`]).
/// A node that breaks one of them shows it here at the step, where the cross-node
/// properties see it only if the mistake goes on to break Election Safety, Leader
/// Completeness or State Machine Safety.
pub fn step_rules(
    before: &StepBefore,
    node: &Node,
    input: &Input,
    out: &Output,
) -> Result<(), String> {
    let id = node.config.id;
    if node.term < before.term {
        return Err(format!(
            "node {id}'s term went back from {} to {}",
            before.term, node.term
        ));
    }
    if node.term == before.term && before.voted_for.is_some() && node.voted_for != before.voted_for
    {
        return Err(format!(
            "node {id} changed its vote of term {} from {:?} to {:?}",
            node.term, before.voted_for, node.voted_for
        ));
    }
    if before.role == Role::Leader && node.role == Role::Leader && before.term == node.term {
        let kept = node.log.last_index() >= before.last_log_index
            && (before.last_log_index <= node.log.base_index()
                || node.log.term_at(before.last_log_index) == Some(before.last_log_term));
        if !kept {
            return Err(format!(
                "leader {id} of term {} lost its log's end (index {}, term {}): a leader only appends",
                node.term, before.last_log_index, before.last_log_term
            ));
        }
    }
    // A tick fires every timer due by then, and what firing arms lies ahead (`Node::tick`):
    // a deadline still due after a tick is a timer that never fires, and a driver woken
    // for it at once ticks again and again without its clock moving (a hand-made mistake of
    // 2026-12-07, a re-armed timer's old deadline left in the index, so spun one simulated
    // seed for 650 s of CPU in 12 GB, every history still valid).
    if let Input::Tick { .. } = input
        && let Some(at_ms) = node.next_deadline()
        && at_ms <= node.now_ms
    {
        let due: Vec<&Timer> = (node.timers())
            .filter(|(_, at)| *at <= node.now_ms)
            .map(|(timer, _)| timer)
            .collect();
        return Err(format!(
            "node {id} ticked at {} and still has a deadline due at {at_ms} (timers due: \
             {due:?}): a tick fires every timer due, so its driver would wake for it again at \
             once, for ever",
            node.now_ms
        ));
    }
    let asked = match input {
        Input::Message { from, msg } => Some((*from, msg)),
        _ => None,
    };
    // A TimeoutNow is the hand-over of the node's own leader (`handle_timeout_now`): one of
    // its term from any other node changes nothing. (Obeyed from anyone, any node of the
    // term could push a follower out of its lease and into an election: a mutant of the
    // fourth campaign, 2026-12-07, that only a unit test killed.)
    if let Some((from, Message::TimeoutNow { term, .. })) = asked
        && *term == before.term
        && before.leader != Some(from)
        && (node.role, node.term, node.leader) != (before.role, before.term, before.leader)
    {
        return Err(format!(
            "node {id} obeyed a TimeoutNow of term {term} from node {from}, which is not its \
             leader ({:?}): it went from {:?} to {:?} of term {} with leader {:?}",
            before.leader, before.role, node.role, node.term, node.leader
        ));
    }
    let up_to_date = |last_log_index: Index, last_log_term: Term| {
        (last_log_term, last_log_index) >= (before.last_log_term, before.last_log_index)
    };
    // Figure 2's "reply false if term < currentTerm": a leader of an older term learns the
    // newer one only from such an answer (or much later, from its check-quorum), so an
    // AppendEntries or InstallSnapshot of an older term is answered with the receiver's term.
    // (A hand-made mistake of 2026-12-07 answered only the InstallSnapshot; safety held and
    // every history stayed valid.)
    if let Some((from, msg)) = asked
        && matches!(
            msg,
            Message::AppendEntries { .. } | Message::InstallSnapshot { .. }
        )
        && msg.term() < before.term
    {
        let told = (out.send_now.iter().chain(&out.send_after_persist))
            .any(|e| e.target == from && e.msg.term() == node.term);
        if !told {
            return Err(format!(
                "node {id} in term {} left unanswered a replication message of the older term \
                 {} from node {from}: Raft's receiver answers it with its own term, so that a \
                 stale leader steps down",
                node.term,
                msg.term()
            ));
        }
    }
    // A chunked InstallSnapshot (our protocol, `snapshot.rs`): the follower's answer names
    // the bytes it holds, and the leader sends from there. A count that differs from what the
    // leader last took is acted on at once: the follower restarted (its bytes are in memory
    // only), or an earlier answer arrived late. (A leader that ignored a count below its own
    // stalled the transfer for as long as it led, every answer after a late one ignored in
    // turn: the review of 2026-12-07.)
    if let Some((
        from,
        Message::InstallSnapshotResponse {
            term,
            last_index,
            received,
            done: false,
        },
    )) = asked
        && *term == before.term
        && before.role == Role::Leader
        && node.role == Role::Leader
        && let Some(&(sending, acked, len)) = before.transfers.get(&from)
        && sending == *last_index
        && *received <= len
        && *received != acked
    {
        let resent = (out.send_now.iter().chain(&out.send_after_persist)).any(|e| {
            e.target == from
                && matches!(&e.msg, Message::InstallSnapshot { last_index: l, offset, .. }
                    if l == last_index && offset == received)
        });
        if !resent {
            return Err(format!(
                "leader {id} of term {term} was told by node {from} that it holds {received} \
                 bytes of snapshot {last_index} ({acked} acknowledged before, of {len}) and \
                 sent it no chunk from there"
            ));
        }
    }
    // Figure 2: persistent state is on stable storage before a node answers. An answer that
    // acknowledges entries or an installed snapshot goes out after the step's persist
    // (`send_after_persist`), never before it, whether or not this step persists anything.
    // (A hand-made mistake of 2026-12-07 acknowledged an installed snapshot before its
    // persist: a crash in between left the leader's match index past the follower's log, and
    // the follower stranded until the leader changed. The simulator's crash point there never
    // met that step in 200 seeds.)
    for envelope in &out.send_now {
        let acknowledges = matches!(
            envelope.msg,
            Message::AppendEntriesResponse { success: true, .. }
                | Message::InstallSnapshotResponse { done: true, .. }
        );
        if acknowledges {
            return Err(format!(
                "node {id} sent {:?} to node {} before its step's persist (Figure 2: persistent \
                 state is updated on stable storage before responding)",
                envelope.msg, envelope.target
            ));
        }
    }
    // (Whether a vote waited for its persist is left to the model's split steps and the
    // mutant `vote-before-persist`, whose tests show what the split steps are worth; whether
    // the driver sends after the persist is the server's, shown by `reply-before-persist`.)
    for envelope in out.send_now.iter().chain(&out.send_after_persist) {
        let to = envelope.target;
        match (&envelope.msg, asked) {
            (Message::RequestVoteResponse { granted: false, .. }, _)
            | (Message::PreVoteResponse { granted: false, .. }, _)
            | (Message::AppendEntriesResponse { success: false, .. }, _) => {}
            (
                Message::RequestVoteResponse { term, .. },
                Some((
                    from,
                    Message::RequestVote {
                        term: asked_term,
                        last_log_index,
                        last_log_term,
                    },
                )),
            ) if from == to => {
                let free = before.term < *asked_term || before.voted_for.is_none_or(|v| v == to);
                let why = if term != asked_term || *term != node.term {
                    "not in the term asked"
                } else if !free {
                    "after voting for another in that term"
                } else if !up_to_date(*last_log_index, *last_log_term) {
                    "to a candidate whose log is behind the voter's (§5.4.1)"
                } else if node.voted_for != Some(to) {
                    "without recording the vote"
                } else {
                    continue;
                };
                return Err(format!(
                    "node {id} granted its vote of term {term} to node {to} {why}: it asked with a \
                     log ending at ({last_log_index}, term {last_log_term}), the voter's ended at \
                     ({}, term {}), the voter was in term {} with vote {:?}",
                    before.last_log_index, before.last_log_term, before.term, before.voted_for
                ));
            }
            (
                Message::PreVoteResponse { term, .. },
                Some((
                    from,
                    Message::PreVote {
                        term: asked_term,
                        last_log_index,
                        last_log_term,
                    },
                )),
            ) if from == to => {
                let why = if term != asked_term || *asked_term <= before.term {
                    "not for a later term than its own"
                } else if !up_to_date(*last_log_index, *last_log_term) {
                    "to a candidate whose log is behind the voter's (§5.4.1)"
                } else {
                    continue;
                };
                return Err(format!(
                    "node {id} granted a pre-vote for term {term} to node {to} {why}: it asked with \
                     a log ending at ({last_log_index}, term {last_log_term}), the voter's ended at \
                     ({}, term {}) in term {}",
                    before.last_log_index, before.last_log_term, before.term
                ));
            }
            (
                Message::AppendEntriesResponse { match_index, .. },
                Some((
                    from,
                    Message::AppendEntries {
                        prev_log_index,
                        prev_log_term,
                        entries,
                        ..
                    },
                )),
            ) if from == to => {
                let sent = prev_log_index + entries.len() as u64;
                let base = node.log.base_index();
                let holds = |index: Index, term: Term| {
                    index <= base || node.log.term_at(index) == Some(term)
                };
                let why = if *match_index > sent.max(node.commit_index) {
                    format!("up to {match_index}, past the {sent} it was sent")
                } else if *match_index > node.log.last_index() {
                    format!("up to {match_index}, past its own log's end")
                } else if !holds(*prev_log_index, *prev_log_term) {
                    format!(
                        "without the previous entry ({prev_log_index}, term {prev_log_term}): it \
                         holds term {:?} there",
                        node.log.term_at(*prev_log_index)
                    )
                } else if let Some(e) = entries
                    .iter()
                    .find(|e| e.index <= *match_index && !holds(e.index, e.term))
                {
                    format!(
                        "without entry {} of term {} that it carried: it holds term {:?} there",
                        e.index,
                        e.term,
                        node.log.term_at(e.index)
                    )
                } else {
                    continue;
                };
                return Err(format!(
                    "node {id} acknowledged node {to}'s AppendEntries {why}"
                ));
            }
            (Message::RequestVoteResponse { term, .. }, _) => {
                return Err(format!(
                    "node {id} granted its vote of term {term} to node {to}, which did not ask in this step"
                ));
            }
            (Message::PreVoteResponse { term, .. }, _) => {
                return Err(format!(
                    "node {id} granted a pre-vote for term {term} to node {to}, which did not ask in this step"
                ));
            }
            (Message::AppendEntriesResponse { .. }, _) => {
                return Err(format!(
                    "node {id} acknowledged an AppendEntries node {to} did not send in this step"
                ));
            }
            _ => {}
        }
    }
    waiters_in_order(before, node)
}

/// Leader Completeness: a leader of a term above the term in which an entry was known
/// committed holds that entry (or a snapshot past it).
pub fn leader_completeness(nodes: &[&Node], ledger: &Ledger) -> Result<(), String> {
    for node in nodes.iter().filter(|n| n.role == Role::Leader) {
        // Entries at or below the snapshot's index are not in the log to compare.
        for (&index, entry) in ledger.entries.range(node.log.base_index() + 1..) {
            completes(node, index, entry)?;
        }
    }
    Ok(())
}

/// [`leader_completeness`] of `node` (when it leads) against the ledger's entries at
/// `indexes` only: for a checker that already checked it against the others with the same
/// log.
pub fn leader_completeness_at(
    node: &Node,
    ledger: &Ledger,
    indexes: impl Iterator<Item = Index>,
) -> Result<(), String> {
    if node.role != Role::Leader {
        return Ok(());
    }
    let base = node.log.base_index();
    let entries = indexes.filter(|i| *i > base);
    (entries.filter_map(|i| ledger.entries.get(&i).map(|e| (i, e))))
        .try_for_each(|(index, entry)| completes(node, index, entry))
}

/// Whether leader `node` holds `entry`, committed at `index`, as Leader Completeness asks.
fn completes(node: &Node, index: Index, entry: &LedgerEntry) -> Result<(), String> {
    if entry.known_in_term >= node.term || node.log.term_at(index) == Some(entry.term) {
        return Ok(());
    }
    Err(format!(
        "Leader Completeness: leader {} of term {} has term {:?} at index {index}, committed with term {} (known in term {})",
        node.config.id,
        node.term,
        node.log.term_at(index),
        entry.term,
        entry.known_in_term
    ))
}

/// State Machine Safety: every node's log agrees with the ledger up to its commit index, and
/// nodes that applied the same prefix hold the same table.
pub fn state_machine_safety(nodes: &[&Node], ledger: &Ledger) -> Result<(), String> {
    for node in nodes {
        // The ledger's entries over the log's indexes, walked beside the log: both are in
        // index order (a lookup per entry was most of this check's CPU in the trace replay).
        let first = node.log.entries.first().map_or(Index::MAX, |e| e.index);
        let mut recorded = (ledger.entries.range(first..)).peekable();
        for entry in &node.log.entries {
            if entry.index > node.commit_index {
                break;
            }
            while recorded.next_if(|(i, _)| **i < entry.index).is_some() {}
            let Some((_, recorded)) = recorded.next_if(|(i, _)| **i == entry.index) else {
                continue;
            };
            if recorded.term != entry.term || recorded.proposal != entry.proposal {
                return Err(format!(
                    "State Machine Safety: node {} committed {:?} (term {}) at index {}, ledger has {:?} (term {}) from node {}",
                    node.config.id,
                    entry.proposal,
                    entry.term,
                    entry.index,
                    recorded.proposal,
                    recorded.term,
                    recorded.node
                ));
            }
        }
    }
    for (i, a) in nodes.iter().enumerate() {
        for b in &nodes[i + 1..] {
            // The whole replicated table, dedupe entries included: a snapshot that loses
            // them leaves the locks equal and a retry to be applied twice.
            if a.table.last_applied() == b.table.last_applied()
                && a.table.replicated_digest() != b.table.replicated_digest()
            {
                return Err(format!(
                    "State Machine Safety: nodes {} and {} applied up to {} but hold different tables (locks {:?} and {:?}, or their dedupe entries)",
                    a.config.id,
                    b.config.id,
                    a.table.last_applied(),
                    a.table.locks(),
                    b.table.locks()
                ));
            }
        }
    }
    Ok(())
}

/// Fencing tokens strictly increase: the tokens granted by the ledger's entries, in log
/// order, strictly increase.
pub fn tokens_strictly_increase(ledger: &Ledger) -> Result<(), String> {
    let mut last: Option<(Index, Token)> = None;
    for (index, entry) in ledger.iter() {
        let Some(token) = fresh_grant(ledger, index, entry) else {
            continue;
        };
        if let Some((at, previous)) = last {
            token_pair(at, previous, index, token)?;
        }
        last = Some((index, token));
    }
    Ok(())
}

/// [`tokens_strictly_increase`] around the entry at `index` only: its token against the
/// nearest grants below and above it. A checker that records entries one at a time, in any
/// order, and calls this after each keeps the whole ledger's tokens increasing at the cost of
/// a neighbour lookup (every adjacent pair of grants is compared when the later of the two
/// arrives), where the whole check per step made a trace replay quadratic.
pub fn tokens_increase_at(ledger: &Ledger, index: Index) -> Result<(), String> {
    let Some(token) = ledger
        .get(index)
        .and_then(|e| fresh_grant(ledger, index, e))
    else {
        return Ok(());
    };
    let below = (ledger.entries.range(..index).rev())
        .find_map(|(i, e)| fresh_grant(ledger, *i, e).map(|t| (*i, t)));
    if let Some((at, previous)) = below {
        token_pair(at, previous, index, token)?;
    }
    let above = (ledger.entries.range(index + 1..))
        .find_map(|(i, e)| fresh_grant(ledger, *i, e).map(|t| (*i, t)));
    if let Some((at, next)) = above {
        token_pair(index, token, at, next)?;
    }
    Ok(())
}

fn token_pair(at: Index, previous: Token, index: Index, token: Token) -> Result<(), String> {
    if token > previous {
        return Ok(());
    }
    Err(format!(
        "fencing tokens strictly increase: index {index} granted token {token} after index {at} granted {previous}"
    ))
}

/// The token `entry` issued, if it is a Grant that issued one: `None` for every other entry
/// and for a retry answered from the dedupe table, which repeats its own first token.
fn fresh_grant(ledger: &Ledger, index: Index, entry: &LedgerEntry) -> Option<Token> {
    let Outcome::Granted { token } = entry.outcome else {
        return None;
    };
    let grant = matches!(entry.proposal.command, crate::lock::Command::Grant { .. });
    (grant && !deduped_retry(ledger, index, entry, token)).then_some(token)
}

/// Whether `entry` is a retry whose Granted outcome came from the dedupe table. A token is
/// the index of the Grant that issued it, so the first grant is the entry at index `token`:
/// a retry is a later entry of the same origin whose first grant is that entry, or lies
/// where this ledger saw nothing (a node that took it in a snapshot never applied it one by
/// one; a trace replay meets its first apply only when it reaches the node that did).
fn deduped_retry(ledger: &Ledger, index: Index, entry: &LedgerEntry, token: Token) -> bool {
    if entry.proposal.origin.is_none() || token >= index {
        return false;
    }
    match ledger.get(token) {
        None => true,
        Some(first) => {
            first.proposal.origin == entry.proposal.origin
                && first.outcome == (Outcome::Granted { token })
        }
    }
}

/// Runs every cross-node check.
pub fn check_all(nodes: &[&Node], ledger: &Ledger) -> Result<(), String> {
    election_safety(nodes)?;
    log_matching(nodes)?;
    leader_completeness(nodes, ledger)?;
    state_machine_safety(nodes, ledger)?;
    tokens_strictly_increase(ledger)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Command, Origin};

    mod step_rules {
        use super::super::*;
        use crate::raft::test_support::node;
        use crate::raft::{Config, Durable, Entry, Envelope, HardState};

        /// Entry `index` of `term`, a Noop.
        fn entry(index: Index, term: Term) -> Entry {
            crate::raft::test_support::entry(term, index, crate::lock::Command::Noop)
        }

        /// Node 3 of {1, 2, 3} in term 3, no vote, its log (1, term 1), (2, term 3).
        fn voter(bugs: crate::bugs::BugSet) -> Node {
            let mut config = Config::new(3, vec![1, 2, 3]);
            config.bugs = bugs;
            let durable = Durable {
                hard_state: HardState {
                    term: 3,
                    voted_for: None,
                    commit: 0,
                },
                snapshot: None,
                entries: vec![entry(1, 1), entry(2, 3)],
            };
            Node::new(config, durable, 0).0
        }

        fn ask(from: NodeId, term: Term, last_log_index: Index, last_log_term: Term) -> Input {
            let msg = Message::RequestVote {
                term,
                last_log_index,
                last_log_term,
            };
            Input::Message { from, msg }
        }

        fn step(node: &mut Node, input: &Input) -> (StepBefore, Output) {
            let before = StepBefore::of(node);
            let out = node.step(input.clone());
            (before, out)
        }

        #[test]
        fn an_up_to_date_candidate_gets_the_vote_within_the_rules() {
            let mut node = voter(crate::bugs::BugSet::NONE);
            let input = ask(1, 4, 2, 3);
            let (before, out) = step(&mut node, &input);
            let granted = (out.send_after_persist.iter())
                .any(|e| matches!(e.msg, Message::RequestVoteResponse { granted: true, .. }));
            assert!(granted, "{out:?}");
            assert_eq!(step_rules(&before, &node, &input, &out), Ok(()));
        }

        #[test]
        fn a_vote_for_a_longer_log_of_an_older_term_breaks_the_rules() {
            // What a voter that compares indexes before terms does (an unplanted mutant the
            // simulator found only on seeds 101, 109 and 122 of 200 through this rule, and on
            // 109 alone through Leader Completeness before it).
            let mut node = voter(crate::bugs::BugSet::NONE);
            let input = ask(1, 4, 5, 2);
            let (before, mut out) = step(&mut node, &input);
            assert!(
                !(out.send_after_persist.iter())
                    .any(|e| matches!(e.msg, Message::RequestVoteResponse { granted: true, .. })),
                "the real voter refuses: {out:?}"
            );
            assert_eq!(step_rules(&before, &node, &input, &out), Ok(()));
            // The same step, had it granted the vote.
            out.send_after_persist = vec![Envelope {
                source: 3,
                target: 1,
                msg: Message::RequestVoteResponse {
                    term: 4,
                    granted: true,
                },
            }];
            let why = step_rules(&before, &node, &input, &out).expect_err("a vote against §5.4.1");
            assert!(why.contains("whose log is behind the voter's"), "{why}");
        }

        #[test]
        fn a_second_vote_in_one_term_and_a_term_gone_back_break_the_rules() {
            let mut node = voter(crate::bugs::BugSet::NONE);
            let input = ask(1, 4, 2, 3);
            let (_, out) = step(&mut node, &input);
            let before = StepBefore::of(&node);
            let other = ask(2, 4, 2, 3);
            let mut forged = out.clone();
            forged.send_after_persist[0].target = 2;
            let why = step_rules(&before, &node, &other, &forged).expect_err("a second vote");
            assert!(why.contains("after voting for another"), "{why}");
            let mut back = node.clone();
            back.term = 2;
            let why = step_rules(
                &before,
                &back,
                &Input::Tick { now_ms: 1 },
                &Output::default(),
            )
            .expect_err("a term gone back");
            assert!(why.contains("term went back"), "{why}");
        }

        /// Leader 1's first AppendEntries of term 1, carrying `entries` from index 1.
        fn first_append(entries: Vec<Entry>) -> Input {
            let msg = Message::AppendEntries {
                term: 1,
                prev_log_index: 0,
                prev_log_term: 0,
                entries,
                leader_commit: 0,
            };
            Input::Message { from: 1, msg }
        }

        #[test]
        fn an_acknowledgement_without_the_previous_entry_breaks_the_rules() {
            let mut node = node(2);
            let input = first_append(vec![entry(1, 1), entry(2, 1)]);
            let (before, out) = step(&mut node, &input);
            assert_eq!(step_rules(&before, &node, &input, &out), Ok(()), "{out:?}");
            // A later AppendEntries whose previous entry the node does not hold, acknowledged.
            let msg = Message::AppendEntries {
                term: 1,
                prev_log_index: 2,
                prev_log_term: 7,
                entries: vec![entry(3, 1)],
                leader_commit: 0,
            };
            let input = Input::Message { from: 1, msg };
            let (before, _) = step(&mut node, &input);
            let mut out = Output::default();
            out.send_after_persist.push(Envelope {
                source: 2,
                target: 1,
                msg: Message::AppendEntriesResponse {
                    term: 1,
                    success: true,
                    match_index: 2,
                    reject_hint: 0,
                },
            });
            let why = step_rules(&before, &node, &input, &out).expect_err("a false ack");
            assert!(why.contains("without the previous entry"), "{why}");
            out.send_after_persist[0].msg = Message::AppendEntriesResponse {
                term: 1,
                success: true,
                match_index: 9,
                reject_hint: 0,
            };
            let why =
                step_rules(&before, &node, &input, &out).expect_err("an ack past what was sent");
            assert!(why.contains("past the 3 it was sent"), "{why}");
        }

        #[test]
        fn a_replication_message_of_an_older_term_left_unanswered_breaks_the_rules() {
            // A hand-made mistake of 2026-12-07 (only InstallSnapshot answered): a stale
            // leader learnt the newer term late, from its check-quorum, and every history
            // stayed valid.
            let mut node = voter(crate::bugs::BugSet::NONE);
            let msgs = [
                Message::AppendEntries {
                    term: 2,
                    prev_log_index: 1,
                    prev_log_term: 1,
                    entries: Vec::new(),
                    leader_commit: 0,
                },
                Message::InstallSnapshot {
                    term: 2,
                    last_index: 1,
                    last_term: 1,
                    offset: 0,
                    data: Vec::new(),
                    done: false,
                },
            ];
            for msg in msgs {
                let input = Input::Message { from: 1, msg };
                let (before, out) = step(&mut node, &input);
                let told = (out.send_now.iter().chain(&out.send_after_persist))
                    .any(|e| e.target == 1 && e.msg.term() == 3);
                assert!(told, "the real node answers with its term 3: {out:?}");
                assert_eq!(step_rules(&before, &node, &input, &out), Ok(()));
                let why = step_rules(&before, &node, &input, &Output::default())
                    .expect_err("a stale leader left unanswered");
                assert!(why.contains("left unanswered"), "{why}");
            }
        }

        #[test]
        fn an_acknowledgement_sent_before_its_persist_breaks_the_rules() {
            // Figure 2: persistent state is on stable storage before a node responds.
            let mut node = node(2);
            let input = first_append(vec![entry(1, 1)]);
            let (before, mut out) = step(&mut node, &input);
            assert!(out.persist.is_some() && out.send_now.is_empty(), "{out:?}");
            assert_eq!(step_rules(&before, &node, &input, &out), Ok(()));
            // The same step, had it answered before its persist.
            out.send_now = std::mem::take(&mut out.send_after_persist);
            let why = step_rules(&before, &node, &input, &out).expect_err("an early answer");
            assert!(why.contains("before its step's persist"), "{why}");
        }

        #[test]
        fn a_timeout_now_obeyed_from_a_node_that_is_not_the_leader_breaks_the_rules() {
            let mut node = node(3);
            node.step(crate::raft::test_support::append(1, 1, (0, 0), vec![], 0));
            let timeout_now = |from| Input::Message {
                from,
                msg: Message::TimeoutNow {
                    term: 1,
                    campaign: true,
                },
            };
            // From its leader: obeyed, within the rules; from node 2: ignored.
            let (before, out) = step(&mut node.clone(), &timeout_now(2));
            assert_eq!(step_rules(&before, &node, &timeout_now(2), &out), Ok(()));
            let mut obeying = node.clone();
            let (before, out) = step(&mut obeying, &timeout_now(1));
            assert_eq!(
                obeying.status().role,
                Role::PreCandidate,
                "it campaigns at once"
            );
            assert_eq!(step_rules(&before, &obeying, &timeout_now(1), &out), Ok(()));
            // The same step, had the TimeoutNow come from node 2.
            let why = step_rules(&before, &obeying, &timeout_now(2), &out).expect_err("node 2");
            assert!(why.contains("which is not its leader (Some(1))"), "{why}");
        }

        #[test]
        fn a_deadline_still_due_after_a_tick_breaks_the_rules() {
            let mut node = node(2);
            let input = Input::Tick { now_ms: 10_000 };
            let (before, out) = step(&mut node, &input);
            assert!(node.next_deadline().is_some_and(|at| at > 10_000));
            assert_eq!(step_rules(&before, &node, &input, &out), Ok(()));
            // The same step, had it left a deadline behind (a stale index entry, a timer armed
            // in the past while firing).
            node.timers.insert(Timer::Heartbeat, 9_990);
            let why = step_rules(&before, &node, &input, &out).expect_err("a deadline left due");
            assert!(why.contains("still has a deadline due at 9990"), "{why}");
            // Any other input may leave a deadline due: the next tick fires it.
            let other = Input::Persisted { term: 0, index: 0 };
            assert_eq!(step_rules(&before, &node, &other, &out), Ok(()));
        }

        /// A leader holding "a" for request 1, with acquires 2, 3 and 4 queued behind it in
        /// that order; returns the holder's token.
        fn leader_with_three_waiters(bugs: crate::bugs::BugSet) -> (Node, Token) {
            let mut config = Config::new(1, vec![1, 2, 3]);
            config.bugs = bugs;
            let mut node = crate::raft::test_support::leader_with(config);
            let acquire = |wait_ms| crate::raft::ClientRequest::Acquire {
                key: "a".into(),
                lease_ms: 60_000,
                wait_ms,
                origin: None,
            };
            let request = |id, request| Input::Request {
                id: crate::raft::RequestId(id),
                request,
            };
            node.step(request(1, acquire(0)));
            let token = node.status().last_log_index;
            node.step(Input::Persisted {
                term: 1,
                index: token,
            });
            node.step(crate::raft::test_support::ack(2, 1, token));
            assert_eq!(node.table().holder("a").map(|h| h.token), Some(token));
            for id in 2..=4 {
                let input = request(id, acquire(10_000));
                let (before, out) = step(&mut node, &input);
                assert_eq!(step_rules(&before, &node, &input, &out), Ok(()), "{out:?}");
            }
            (node, token)
        }

        /// The holder's release, committed: the step that hands "a" to a waiter.
        fn release_and_commit(node: &mut Node, token: Token) -> Result<(), String> {
            let release = crate::raft::ClientRequest::Release {
                key: "a".into(),
                token,
                origin: None,
            };
            node.step(Input::Request {
                id: crate::raft::RequestId(5),
                request: release,
            });
            let index = node.status().last_log_index;
            node.step(Input::Persisted { term: 1, index });
            let input = crate::raft::test_support::ack(2, 1, index);
            let (before, out) = step(node, &input);
            assert!(node.table().holder("a").is_none(), "released: {out:?}");
            step_rules(&before, node, &input, &out)
        }

        #[test]
        fn a_freed_key_goes_to_its_first_waiter_within_the_rules() {
            let (mut node, token) = leader_with_three_waiters(crate::bugs::BugSet::NONE);
            assert_eq!(release_and_commit(&mut node, token), Ok(()));
            let left = [3, 4].map(|id| WaiterName::Request(crate::raft::RequestId(id)));
            assert_eq!(waiting_order(&node)["a"], left, "request 2 was proposed");
        }

        #[test]
        fn a_freed_key_given_to_its_last_waiter_breaks_the_rules() {
            // DESIGN.md "Clients": FIFO waiters at the leader. Nothing else sees the order:
            // every answer of the mutant is truthful and every lock safe.
            let bugs = crate::bugs::BugSet::of(&[crate::bugs::Bug::WaitersServedLifo]);
            let (mut node, token) = leader_with_three_waiters(bugs);
            let why = release_and_commit(&mut node, token).expect_err("served last-in first");
            assert!(why.contains("served FIFO"), "{why}");
            assert!(
                why.contains("a waiter behind one that still waits"),
                "{why}"
            );
        }

        #[test]
        fn a_new_waiter_ahead_of_the_queue_breaks_the_rules() {
            let (mut node, _) = leader_with_three_waiters(crate::bugs::BugSet::NONE);
            let before = StepBefore::of(&node);
            let input = Input::Tick { now_ms: 1 };
            let out = node.step(input.clone());
            assert_eq!(step_rules(&before, &node, &input, &out), Ok(()));
            // The same step, had it put a fifth acquire at the head of the queue.
            let queue = node.waiters.get_mut("a").expect("queued");
            let mut newcomer = queue[0].clone();
            newcomer.id = crate::raft::RequestId(6);
            queue.push_front(newcomer);
            let why = step_rules(&before, &node, &input, &out).expect_err("a queue jumper");
            assert!(why.contains("ahead of one already waiting"), "{why}");
            // Or had it swapped the first two waiters.
            let queue = node.waiters.get_mut("a").expect("queued");
            queue.pop_front();
            queue.swap(0, 1);
            let why = step_rules(&before, &node, &input, &out).expect_err("a swap");
            assert!(why.contains("ahead of one that was ahead of it"), "{why}");
        }
    }

    fn committed(index: Index, client: u64, key: &str, token: Token) -> Committed {
        Committed {
            index,
            term: 1,
            proposal: Proposal::client(
                Some(Origin {
                    session: client,
                    request: 1,
                }),
                Command::Grant {
                    key: key.to_owned(),
                    lease_ms: 1_000,
                },
            ),
            outcome: Outcome::Granted { token },
        }
    }

    fn ledger(entries: &[Committed]) -> Ledger {
        let mut ledger = Ledger::new();
        for entry in entries {
            ledger.record(1, 1, entry).expect("distinct indexes");
        }
        ledger
    }

    #[test]
    fn a_retry_answered_from_the_dedupe_table_is_not_a_new_grant() {
        // Found by `locksmith sim --seeds 17 --trace DIR` (swarm, before sessions): node 1
        // took index 594 in a snapshot, so its replay met the retry at 608 (Granted 594) before
        // any node's apply of 594, and called it a token going backwards.
        let retry = committed(608, 18, "kf", 594);
        let unseen_first = ledger(&[committed(605, 7, "a", 605), retry.clone()]);
        assert_eq!(tokens_strictly_increase(&unseen_first), Ok(()));
        assert_eq!(tokens_increase_at(&unseen_first, 608), Ok(()));
        let seen_first = ledger(&[
            committed(594, 18, "kf", 594),
            committed(605, 7, "a", 605),
            retry,
        ]);
        assert_eq!(tokens_strictly_increase(&seen_first), Ok(()));
    }

    #[test]
    fn a_token_below_an_earlier_grant_is_refused_wherever_it_arrives() {
        // Index 594 was granted by another client: 608's token 594 is no retry of it.
        let other_first = [
            committed(594, 3, "kf", 594),
            committed(605, 7, "a", 605),
            committed(608, 18, "kf", 594),
        ];
        let whole = ledger(&other_first);
        assert!(tokens_strictly_increase(&whole).is_err());
        assert!(tokens_increase_at(&whole, 608).is_err());
        // A grant without an origin is never a retry.
        let mut anonymous = committed(608, 18, "kf", 7);
        anonymous.proposal.origin = None;
        let backwards = ledger(&[committed(605, 7, "a", 605), anonymous]);
        assert!(tokens_strictly_increase(&backwards).is_err());
        // Recorded out of order, as a node-by-node replay does: the later arrival at 600
        // sits between 594 and 605 and must fall between their tokens.
        let mut late = ledger(&[committed(594, 3, "x", 594), committed(605, 7, "a", 605)]);
        late.record(2, 1, &committed(600, 9, "y", 700)).unwrap();
        assert!(tokens_increase_at(&late, 600).is_err());
        assert!(tokens_strictly_increase(&late).is_err());
    }

    /// A node of a three-node cluster whose log is `snapshot` (its last index and term) and
    /// then `entries` (term, command), committed up to `commit`.
    fn node_with(
        id: NodeId,
        snapshot: Option<(Index, Term)>,
        entries: &[(Term, Command)],
        commit: Index,
    ) -> Node {
        use super::super::io::Durable;
        use super::super::message::HardState;
        use super::super::{Config, Entry, Snapshot};
        use crate::lock::LockTable;
        let base = snapshot.map_or(0, |(index, _)| index);
        let snapshot = snapshot.map(|(last_index, last_term)| {
            let mut table = LockTable::new();
            for index in 1..=last_index {
                table.apply_proposal(index, &Proposal::system(Command::Noop));
            }
            Snapshot {
                last_index,
                last_term,
                table,
            }
        });
        let entries = (entries.iter().zip(base + 1..))
            .map(|((term, command), index)| Entry {
                term: *term,
                index,
                proposal: Proposal::system(command.clone()),
            })
            .collect();
        let durable = Durable {
            hard_state: HardState {
                term: 4,
                voted_for: None,
                commit,
            },
            snapshot,
            entries,
        };
        Node::new(Config::new(id, vec![1, 2, 3]), durable, 0).0
    }

    #[test]
    fn log_matching_compares_above_both_snapshots_and_stops_searching_where_a_term_is_unknown() {
        // The search for the highest index of equal terms stops at the lowest index whose term
        // both logs know (a speed-up of the trace replay): what lies above must still be seen.
        let noop = Command::Noop;
        let expire = Command::Expire {
            key: "k".to_owned(),
            token: 1,
        };
        let compacted = node_with(1, Some((3, 2)), &[(2, noop.clone()), (3, noop.clone())], 3);
        let whole = |at_4: &Command, term_5| {
            let log = [(1, noop.clone()), (1, noop.clone()), (2, noop.clone())];
            let mut log = log.to_vec();
            log.extend([(2, at_4.clone()), (term_5, noop.clone())]);
            node_with(2, None, &log, 3)
        };
        let (same, other) = (whole(&noop, 3), whole(&expire, 3));
        assert_eq!(log_matching(&[&compacted, &same]), Ok(()));
        let differ = log_matching(&[&compacted, &other]).expect_err("index 4 differs");
        assert!(
            differ.contains("agree on term Some(3) at index 5 but differ at 4"),
            "{differ}"
        );
        // The terms part at index 5: the highest match is found below it.
        let parted = whole(&expire, 4);
        let differ = log_matching(&[&compacted, &parted]).expect_err("index 4 differs");
        assert!(
            differ.contains("agree on term Some(2) at index 4 but differ at 4"),
            "{differ}"
        );
        // A node behind the other's snapshot shares no known term with it: nothing to compare.
        let behind = node_with(3, None, &[(1, noop.clone()), (1, expire.clone())], 0);
        assert_eq!(log_matching(&[&compacted, &behind]), Ok(()));
        // Its snapshot's own term is known: a match there, and entries above it compared.
        let at_base = node_with(
            3,
            None,
            &[(1, noop.clone()), (1, noop.clone()), (2, noop)],
            3,
        );
        assert_eq!(log_matching(&[&compacted, &at_base, &same]), Ok(()));
    }

    #[test]
    fn state_machine_safety_compares_each_committed_entry_with_the_ledger_entry_of_its_index() {
        let noop = Command::Noop;
        let expire = Command::Expire {
            key: "k".to_owned(),
            token: 1,
        };
        let log = [(1, noop.clone()), (1, expire.clone()), (2, noop.clone())];
        let node = node_with(1, None, &log, 2);
        let entry = |index, term, command: &Command| Committed {
            index,
            term,
            proposal: Proposal::system(command.clone()),
            outcome: Outcome::Noop,
        };
        // The ledger holds index 2 only (index 1 was applied through snapshots).
        let mut ledger = Ledger::new();
        ledger.record(2, 1, &entry(2, 1, &expire)).unwrap();
        assert_eq!(state_machine_safety(&[&node], &ledger), Ok(()));
        let mut wrong = Ledger::new();
        wrong.record(2, 1, &entry(1, 1, &noop)).unwrap();
        wrong.record(2, 1, &entry(2, 1, &noop)).unwrap();
        let why = state_machine_safety(&[&node], &wrong).expect_err("index 2 differs");
        assert!(why.contains("at index 2"), "{why}");
        // Index 3 is past the commit index: a ledger entry there is not compared yet.
        let mut ahead = Ledger::new();
        ahead.record(2, 1, &entry(3, 2, &expire)).unwrap();
        assert_eq!(state_machine_safety(&[&node], &ahead), Ok(()));
    }

    #[test]
    fn every_held_lock_has_a_lease_timer_or_a_local_expiry() {
        let grant = |key: &str| Command::Grant {
            key: key.to_owned(),
            lease_ms: 1_000,
        };
        let log = [
            (1, Command::Noop),
            (1, grant("a")),
            (1, grant("b")),
            (1, grant("c")),
        ];
        let node = node_with(1, None, &log, 4);
        let lease = |key: &str, token| Timer::Lease {
            key: key.to_owned(),
            token,
        };
        assert!(
            node.timers.contains_key(&lease("b", 3)),
            "{:?}",
            node.timers
        );
        check_node(&node);
        let mut untracked = node.clone();
        untracked.timers.remove(&lease("b", 3));
        let caught = std::panic::catch_unwind(|| check_node(&untracked));
        assert!(caught.is_err(), "lock b under token 3 has neither");
        untracked.expired.insert(("b".to_owned(), 3));
        check_node(&untracked);
        untracked.expired.clear();
        untracked.expired.insert(("b".to_owned(), 2));
        let caught = std::panic::catch_unwind(|| check_node(&untracked));
        assert!(
            caught.is_err(),
            "an expiry of another token of b does not count"
        );
        untracked.expired.insert(("c".to_owned(), 4));
        let caught = std::panic::catch_unwind(|| check_node(&untracked));
        assert!(caught.is_err(), "nor an expiry of a later key");
    }
}
