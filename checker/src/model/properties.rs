//! The model's properties, named as sentences that can appear in a report.
//!
//! `Always` properties are safety properties: a discovery is a counterexample. `Sometimes`
//! properties guard against vacuity: a discovery is an example showing that the interesting
//! states are reached at all. Crashed servers are skipped, except as evidence of what was
//! applied (their ledger, which survives the crash).
//!
//! The Raft properties call the core's own cross-node checks
//! ([`lockd::raft::invariants`]), so the model and the core's tests agree on what they mean.

use std::collections::BTreeSet;

use lockd::lock::{Command, Origin, Outcome, Token};
use lockd::raft::invariants::{self, Ledger};
use lockd::raft::{Node, Role, Term};
use stateright::Property;
use stateright::semantics::ConsistencyTester;

use super::actor::{ModelState, ServerState, node_id};
use super::{LockdModel, LockdState, ModelConfig};

/// At most one leader per term (Raft paper Figure 3).
pub const ELECTION_SAFETY: &str = "Election Safety";
/// Logs that agree on an entry's index and term agree on everything before it.
pub const LOG_MATCHING: &str = "Log Matching";
/// A leader holds every entry committed in an earlier term.
pub const LEADER_COMPLETENESS: &str = "Leader Completeness";
/// No two nodes apply different entries, or compute different outcomes, at one index.
pub const STATE_MACHINE_SAFETY: &str = "State Machine Safety";
/// A leader proposes an Expire only for a lease whose timer fired on its own clock (the model
/// and the trace replay check it at each append: the model's timers fire at any moment, so
/// it cannot tell an early Expire by its time, only by whether the timer fired).
pub const EXPIRE_DUE: &str = "an Expire is proposed only for a lease that ran out on that node";
/// The commit rules of one step (`invariants::commit_rules`; the model and the trace replay
/// check every step).
pub const COMMIT_RULES: &str = "a leader commits by counting only entries of its own term, a follower no further than its leader said and sent";
/// The receiver rules of Raft's Figure 2, the chunked snapshot's resend and the FIFO order
/// of waiters, on one step (`invariants::step_rules`; the model and the trace replay check
/// every step).
pub const STEP_RULES: &str = "a node votes, pre-votes and acknowledges only as Raft's receiver rules allow and acknowledges only after its persist, keeps its term and vote, as leader only appends, sends a snapshot on from what the follower holds and serves its waiters FIFO, fires at each tick every timer due, and hands over only as its leader says";
/// The model's reductions hold: a node steps as its twin with the clock shifted and as its
/// twin with the servers renamed (`lockd::raft::rebase_commutes`, `rename_commutes`).
pub const REDUCTIONS: &str = "a node steps as its twin whose clock is shifted and as its twin whose servers are renamed (the model's reductions)";
/// Tokens strictly increase in log order and in the real-time order of acquires.
pub const TOKENS_INCREASE: &str = "fencing tokens strictly increase";
/// No two clients hold one key, counting only locks no applied entry has removed.
pub const ONE_HOLDER: &str = "at most one holder of a key at any applied state";
/// An Expire names its token, so it removes nothing newer.
pub const EXPIRE_KEEPS_NEWER: &str = "a late or duplicate Expire never removes a newer grant";
/// A Release names its token, so it frees only that lock.
pub const RELEASE_OWN_TOKEN: &str = "a Release frees only the lock of its own token";
/// A lock granted to a client that left is released by the leader.
pub const PHANTOM_RELEASED: &str = "a lock granted to a client that left is released";
/// No node arms a lease timer for less than the lease.
pub const LEASE_NOT_EARLY: &str = "no node expires a lease before lease_ms on its own clock";
/// The client-visible history is linearizable against `LockSpec`.
pub const LINEARIZABLE: &str = "the client-visible history is linearizable";

/// Some client is told `Granted`.
pub const SOMETIMES_GRANTED: &str = "a lock is granted";
/// Some applied Expire removes a lock.
pub const SOMETIMES_EXPIRES: &str = "a lock expires";
/// A second client is told `Granted` on a key another client was granted before.
pub const SOMETIMES_REGRANTED: &str = "a lock is re-granted to another client";
/// A leader of a later term holds a lock granted in an earlier term.
pub const SOMETIMES_LEADER_CHANGES: &str = "the leader changes while a lock is held";
/// The leader's Release for a client that left frees its lock.
pub const SOMETIMES_PHANTOM: &str = "a phantom lock is released";

/// Every property that applies to `cfg` (a `Sometimes` property that `cfg` cannot reach,
/// such as a re-grant with one client, is left out).
pub fn all(cfg: &ModelConfig) -> Vec<Property<LockdModel>> {
    let mut properties = vec![
        // First: every checked state evaluates it (an `always` property is evaluated on every
        // state stateright checks), so it also counts the checked states.
        Property::always(ELECTION_SAFETY, |m: &LockdModel, s| {
            m.note_checked();
            invariants::election_safety(&live_nodes(s)).is_ok()
        }),
        Property::always(LOG_MATCHING, |_, s| {
            invariants::log_matching(&live_nodes(s)).is_ok()
        }),
        Property::always(LEADER_COMPLETENESS, |_, s| leader_completeness(s).is_ok()),
        Property::always(STATE_MACHINE_SAFETY, |_, s| state_machine_safety(s).is_ok()),
        Property::always(TOKENS_INCREASE, |_, s| tokens_increase(s).is_ok()),
        Property::always(ONE_HOLDER, |_, s| one_holder(s).is_ok()),
        Property::always(EXPIRE_KEEPS_NEWER, |_, s| {
            live_servers(s).all(|server| server.ghost.expire_removed_other.is_none())
        }),
        Property::always(RELEASE_OWN_TOKEN, |_, s| {
            live_servers(s).all(|server| server.ghost.release_removed_other.is_none())
        }),
        Property::always(PHANTOM_RELEASED, |_, s| phantom_released(s).is_ok()),
        Property::always(LEASE_NOT_EARLY, |_, s| {
            live_servers(s).all(|server| server.ghost.early_lease.is_none())
        }),
        Property::always(EXPIRE_DUE, |_, s| {
            live_servers(s).all(|server| server.ghost.undue_expire.is_none())
        }),
        Property::always(COMMIT_RULES, |_, s| {
            live_servers(s).all(|server| server.ghost.broken_commit.is_none())
        }),
        Property::always(STEP_RULES, |_, s| {
            live_servers(s).all(|server| server.ghost.broken_rule.is_none())
        }),
        Property::always(LINEARIZABLE, |_, s: &LockdState| {
            s.history.linear.is_consistent()
        }),
        Property::sometimes(SOMETIMES_GRANTED, |_, s: &LockdState| {
            !s.history.grants.is_empty()
        }),
        Property::sometimes(SOMETIMES_EXPIRES, |_, s| {
            live_servers(s).any(|server| server.ghost.expired)
        }),
    ];
    if cfg.clients >= 2 {
        properties.push(Property::sometimes(
            SOMETIMES_REGRANTED,
            |_, s: &LockdState| s.history.regranted_to_another_client(),
        ));
    }
    if cfg.servers >= 2 || cfg.max_crashes >= 1 {
        properties.push(Property::sometimes(SOMETIMES_LEADER_CHANGES, |_, s| {
            leader_changed_while_held(s)
        }));
    }
    if cfg.give_up_clients >= 1 {
        properties.push(Property::sometimes(SOMETIMES_PHANTOM, |_, s| {
            live_servers(s).any(|server| server.ghost.phantom_released)
        }));
    }
    properties
}

/// The servers that are up, with their actor index.
fn live_indexed(state: &LockdState) -> impl Iterator<Item = (usize, &ServerState)> {
    state
        .actor_states
        .iter()
        .enumerate()
        .filter(|(i, _)| !state.crashed[*i])
        .filter_map(|(i, s)| match &**s {
            ModelState::Server(server) => Some((i, &**server)),
            ModelState::Client(_) => None,
        })
}

/// The servers that are up.
fn live_servers(state: &LockdState) -> impl Iterator<Item = &ServerState> {
    live_indexed(state).map(|(_, s)| s)
}

/// The nodes of the servers that are up.
pub fn live_nodes(state: &LockdState) -> Vec<&Node> {
    live_servers(state).map(|s| &s.node).collect()
}

/// Every server's state, crashed ones too (a crashed server's state is the one it had when
/// it crashed: evidence of what it applied).
fn all_servers(state: &LockdState) -> impl Iterator<Item = &ServerState> {
    state.actor_states.iter().filter_map(|s| match &**s {
        ModelState::Server(server) => Some(&**server),
        ModelState::Client(_) => None,
    })
}

/// One ledger of everything any server applied, merged from the servers' ghost ledgers
/// (crashed ones included). A disagreement between two servers is a State Machine Safety
/// violation.
pub fn merged_ledger(state: &LockdState) -> Result<Ledger, String> {
    let mut merged = Ledger::new();
    for server in all_servers(state) {
        if let Some(conflict) = &server.ledger_conflict {
            return Err(conflict.clone());
        }
        for (index, entry) in server.ledger.iter() {
            let committed = lockd::raft::Committed {
                index,
                term: entry.term,
                proposal: entry.proposal.clone(),
                outcome: entry.outcome.clone(),
            };
            merged.record(entry.node, entry.known_in_term, &committed)?;
        }
    }
    Ok(merged)
}

/// Leader Completeness over the servers that are up.
pub fn leader_completeness(state: &LockdState) -> Result<(), String> {
    let ledger = merged_ledger(state).unwrap_or_default();
    invariants::leader_completeness(&live_nodes(state), &ledger)
}

/// State Machine Safety: servers agree on what was applied at each index, before and after
/// crashes.
pub fn state_machine_safety(state: &LockdState) -> Result<(), String> {
    let ledger = merged_ledger(state)?;
    invariants::state_machine_safety(&live_nodes(state), &ledger)
}

/// Fencing tokens strictly increase: in log order (the ledger), and in the real-time order of
/// the acquires the clients saw.
pub fn tokens_increase(state: &LockdState) -> Result<(), String> {
    if let Some(violation) = &state.history.token_order_violation {
        return Err(format!("fencing tokens strictly increase: {violation}"));
    }
    let ledger = merged_ledger(state).unwrap_or_default();
    invariants::tokens_strictly_increase(&ledger)
}

/// At most one holder of a key: of the locks the clients believe they hold (granted, not yet
/// released by them), count those that no applied entry after the grant's index has removed
/// (an applied Release or Expire that freed the key). More than one is a violation.
///
/// This reads the clients' beliefs and the ledger, not the tables, so it also counts grants
/// that were never committed (a follower's or a deposed leader's answer).
pub fn one_holder(state: &LockdState) -> Result<(), String> {
    let ledger = merged_ledger(state).unwrap_or_default();
    let mut holders: Vec<(usize, Token)> = Vec::new();
    for (client, (key, token)) in &state.history.beliefs {
        let removed = ledger.iter().any(|(index, entry)| {
            index > *token
                && entry.proposal.command.key() == Some(key.as_str())
                && matches!(
                    (&entry.proposal.command, &entry.outcome),
                    (Command::Release { .. }, Outcome::Released)
                        | (Command::Expire { .. }, Outcome::Expired { existed: true })
                )
        });
        if !removed {
            holders.push((usize::from(*client), *token));
        }
    }
    if holders.len() > 1 {
        return Err(format!(
            "{ONE_HOLDER}: clients {holders:?} (client, token) all hold the key"
        ));
    }
    Ok(())
}

/// A leader that learned, in its term and before applying the grant, that a client left,
/// holds no lock of that client without a Release for it in its log.
pub fn phantom_released(state: &LockdState) -> Result<(), String> {
    live_servers(state).try_for_each(|server| gone_released(&server.node, &server.ghost.gone))
}

/// [`phantom_released`] of one node, given the clients `gone` while it led (see
/// [`super::actor::Ghost::gone`]); the trace replay checks it too.
pub fn gone_released(node: &Node, gone: &BTreeSet<(Term, Origin)>) -> Result<(), String> {
    let status = node.status();
    if status.role != Role::Leader {
        return Ok(());
    }
    for (key, held) in node.table().locks() {
        let Some(origin) = held.origin else { continue };
        let proposed_here = node.term_at(held.token) == Some(status.term);
        if !proposed_here || !gone.contains(&(status.term, origin)) {
            continue;
        }
        // A retry of the same request still pending that the dedupe table will not answer
        // with this token (a late attempt, refused when it applies) owes nothing here. One
        // that it will answer with this token owes the Release at once, behind its Grant:
        // this used to be excused until the retry applied (a false alarm of the simulator's
        // fault points, a client that cut its connection on a retry of a request already
        // granted, when the Release was proposed only then), and a leader that stepped down
        // or handed over in that window left the key held by nobody for the whole lease,
        // which nothing judged (the review of leases and hand-over, 2026-12-06).
        let retry_pending = node.log().iter().any(|e| {
            e.index > status.last_applied
                && e.proposal.origin == Some(origin)
                && matches!(e.proposal.command, Command::Grant { .. })
                && node.table().replayed_grant(origin, &e.proposal.command) != Some(held.token)
        });
        if retry_pending {
            continue;
        }
        let released = node.log().iter().any(|e| {
            e.index > held.token
                && e.proposal.command
                    == Command::Release {
                        key: key.clone(),
                        token: held.token,
                    }
        });
        if !released {
            return Err(format!(
                "{PHANTOM_RELEASED}: leader {} holds {key:?} token {} for client {} that \
                 left, with no Release in its log",
                status.id, held.token, origin.session
            ));
        }
    }
    Ok(())
}

/// A leader holds a lock whose Grant is of an earlier term than the leader's.
fn leader_changed_while_held(state: &LockdState) -> bool {
    live_servers(state).any(|server| {
        let node = &server.node;
        let status = node.status();
        status.role == Role::Leader
            && node
                .table()
                .locks()
                .values()
                .any(|h| node.term_at(h.token).is_some_and(|t| t < status.term))
    })
}

/// Every `Always` property's violation in `state`, by name, in words (for reports).
pub fn violations(state: &LockdState) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    let nodes = live_nodes(state);
    let mut push = |name: &'static str, r: Result<(), String>| {
        if let Err(e) = r {
            found.push((name, e));
        }
    };
    push(ELECTION_SAFETY, invariants::election_safety(&nodes));
    push(LOG_MATCHING, invariants::log_matching(&nodes));
    push(LEADER_COMPLETENESS, leader_completeness(state));
    push(STATE_MACHINE_SAFETY, state_machine_safety(state));
    push(TOKENS_INCREASE, tokens_increase(state));
    push(ONE_HOLDER, one_holder(state));
    for (i, server) in live_indexed(state) {
        let n = node_id(i);
        let ghost = &server.ghost;
        for (name, v) in [
            (EXPIRE_KEEPS_NEWER, &ghost.expire_removed_other),
            (RELEASE_OWN_TOKEN, &ghost.release_removed_other),
            (LEASE_NOT_EARLY, &ghost.early_lease),
            (EXPIRE_DUE, &ghost.undue_expire),
            (COMMIT_RULES, &ghost.broken_commit),
            (STEP_RULES, &ghost.broken_rule),
        ] {
            if let Some(v) = v {
                push(name, Err(format!("node {n}: {v}")));
            }
        }
    }
    push(PHANTOM_RELEASED, phantom_released(state));
    if !state.history.linear.is_consistent() {
        push(
            LINEARIZABLE,
            Err("no order of the clients' operations fits the lock specification".to_owned()),
        );
    }
    found
}
