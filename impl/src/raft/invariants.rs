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

use super::{Committed, Index, Node, NodeId, Role, Term, Timer};
use crate::bugs::Bug;
use crate::lock::{Outcome, Proposal, Token};

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
    for (key, held) in node.table.locks() {
        let timer = Timer::Lease {
            key: key.clone(),
            token: held.token,
        };
        let tracked =
            node.timers.contains_key(&timer) || node.expired.contains(&(key.clone(), held.token));
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

fn log_matching_pair(a: &Node, b: &Node) -> Result<(), String> {
    let last = a.log.last_index().min(b.log.last_index());
    // The highest index where both hold the same term: everything below must agree.
    let Some(top) = (1..=last)
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

/// Leader Completeness: a leader of a term above the term in which an entry was known
/// committed holds that entry (or a snapshot past it).
pub fn leader_completeness(nodes: &[&Node], ledger: &Ledger) -> Result<(), String> {
    for node in nodes.iter().filter(|n| n.role == Role::Leader) {
        for (index, entry) in ledger.iter() {
            if entry.known_in_term >= node.term || index <= node.log.base_index() {
                continue;
            }
            if node.log.term_at(index) != Some(entry.term) {
                return Err(format!(
                    "Leader Completeness: leader {} of term {} has term {:?} at index {index}, committed with term {} (known in term {})",
                    node.config.id,
                    node.term,
                    node.log.term_at(index),
                    entry.term,
                    entry.known_in_term
                ));
            }
        }
    }
    Ok(())
}

/// State Machine Safety: every node's log agrees with the ledger up to its commit index, and
/// nodes that applied the same prefix hold the same table.
pub fn state_machine_safety(nodes: &[&Node], ledger: &Ledger) -> Result<(), String> {
    for node in nodes {
        for entry in &node.log.entries {
            if entry.index > node.commit_index {
                break;
            }
            let Some(recorded) = ledger.get(entry.index) else {
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
            if a.table.last_applied() == b.table.last_applied()
                && a.table.locks() != b.table.locks()
            {
                return Err(format!(
                    "State Machine Safety: nodes {} and {} applied up to {} but hold {:?} and {:?}",
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
        let Outcome::Granted { token } = entry.outcome else {
            continue;
        };
        if !matches!(entry.proposal.command, crate::lock::Command::Grant { .. }) {
            continue;
        }
        if let Some((at, previous)) = last
            && token <= previous
        {
            // A retried Grant answered from the dedupe table repeats its own token.
            if deduped_retry(ledger, entry, token) {
                continue;
            }
            return Err(format!(
                "fencing tokens strictly increase: index {index} granted token {token} after index {at} granted {previous}"
            ));
        }
        last = Some((index, token));
    }
    Ok(())
}

/// Whether `entry` is a retry whose Granted outcome came from the dedupe table: an earlier
/// entry of the same origin granted the same token.
fn deduped_retry(ledger: &Ledger, entry: &LedgerEntry, token: Token) -> bool {
    entry.proposal.origin.is_some()
        && ledger.iter().any(|(_, e)| {
            e.proposal.origin == entry.proposal.origin
                && e.outcome == Outcome::Granted { token }
                && !std::ptr::eq(e, entry)
        })
}

/// Runs every cross-node check.
pub fn check_all(nodes: &[&Node], ledger: &Ledger) -> Result<(), String> {
    election_safety(nodes)?;
    log_matching(nodes)?;
    leader_completeness(nodes, ledger)?;
    state_machine_safety(nodes, ledger)?;
    tokens_strictly_increase(ledger)
}
