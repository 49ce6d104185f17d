//! Renaming ids and rebasing the clock: what the stateright model needs to reduce its state
//! space without reaching into the node's private fields.
//!
//! - [`Node::rewrite_ids`] renames node ids (votes, leader, per-follower progress, the
//!   configuration) and client ids (entry origins, the dedupe table, lock holders, pending
//!   requests, waiters and their timers) through a [`Renaming`]. Applied with a permutation of
//!   ids, the result behaves exactly as the original with the ids permuted: the model uses it
//!   for symmetry reduction (two states that differ only in which server or client is which
//!   count once). Message bodies carry no ids (the sender comes from the transport), so only
//!   the node's own state, its storage and the answers to clients need renaming.
//! - [`Node::rebase_clock`] shifts every absolute reading of the local clock (the clock itself,
//!   timer deadlines, waiter deadlines, the last contact with the leader) so that the clock
//!   reads a given value. Nothing in the core depends on absolute time, only on differences,
//!   so the rebased node behaves the same: two states whose clocks differ by a constant count
//!   once. A leader contact older than the election timeout is clamped to exactly that age: it
//!   no longer keeps the node in its leader lease, and it never will again.
//!
//! Both are pure functions of the node's state; neither is used by the server.

use super::invariants::Ledger;
use super::io::{ClientRequest, Durable, RequestId, Response, Timer};
use super::message::{Entry, HardState, NodeId, Snapshot};
use super::{Node, Pending, PendingKind, Waiter};
use crate::lock::{Origin, Proposal};

/// A renaming of node ids and client ids (a permutation, for the model's symmetry).
pub trait Renaming {
    /// The new id of node `id`.
    fn node(&self, id: NodeId) -> NodeId;
    /// The new id of client `client` (the `client` of an [`Origin`]).
    fn client(&self, client: u64) -> u64;
    /// The new id of request `id` (request ids are the driver's; it knows what they encode).
    fn request(&self, id: RequestId) -> RequestId;
}

fn origin(r: &impl Renaming, o: &Option<Origin>) -> Option<Origin> {
    o.map(|o| Origin {
        client: r.client(o.client),
        request: o.request,
    })
}

/// `proposal` with its origin renamed.
pub fn rewrite_proposal(r: &impl Renaming, proposal: &Proposal) -> Proposal {
    Proposal {
        origin: origin(r, &proposal.origin),
        command: proposal.command.clone(),
    }
}

/// `entry` with its origin renamed.
pub fn rewrite_entry(r: &impl Renaming, entry: &Entry) -> Entry {
    Entry {
        term: entry.term,
        index: entry.index,
        proposal: rewrite_proposal(r, &entry.proposal),
    }
}

fn rewrite_snapshot(r: &impl Renaming, snapshot: &Snapshot) -> Snapshot {
    Snapshot {
        last_index: snapshot.last_index,
        last_term: snapshot.last_term,
        table: snapshot.table.rewrite_clients(|c| r.client(c)),
    }
}

fn rewrite_hard_state(r: &impl Renaming, hard_state: &HardState) -> HardState {
    HardState {
        term: hard_state.term,
        voted_for: hard_state.voted_for.map(|v| r.node(v)),
        commit: hard_state.commit,
    }
}

/// `timer` with its request id renamed (only `Wait` timers name one).
pub fn rewrite_timer(r: &impl Renaming, timer: &Timer) -> Timer {
    match timer {
        Timer::Wait { id } => Timer::Wait { id: r.request(*id) },
        other => other.clone(),
    }
}

/// `request` with its origin renamed.
pub fn rewrite_request(r: &impl Renaming, request: &ClientRequest) -> ClientRequest {
    match request {
        ClientRequest::Acquire {
            key,
            lease_ms,
            wait_ms,
            origin: o,
        } => ClientRequest::Acquire {
            key: key.clone(),
            lease_ms: *lease_ms,
            wait_ms: *wait_ms,
            origin: origin(r, o),
        },
        ClientRequest::Release {
            key,
            token,
            origin: o,
        } => ClientRequest::Release {
            key: key.clone(),
            token: *token,
            origin: origin(r, o),
        },
    }
}

/// `response` with its leader hint renamed.
pub fn rewrite_response(r: &impl Renaming, response: &Response) -> Response {
    match response {
        Response::NotLeader { leader } => Response::NotLeader {
            leader: leader.map(|l| r.node(l)),
        },
        other => other.clone(),
    }
}

fn rewrite_waiter(r: &impl Renaming, w: &Waiter) -> Waiter {
    Waiter {
        id: r.request(w.id),
        key: w.key.clone(),
        lease_ms: w.lease_ms,
        origin: origin(r, &w.origin),
        deadline_ms: w.deadline_ms,
    }
}

fn rewrite_pending(r: &impl Renaming, p: &Pending) -> Pending {
    let kind = match &p.kind {
        PendingKind::Grant { waiter } => PendingKind::Grant {
            waiter: waiter.as_ref().map(|w| rewrite_waiter(r, w)),
        },
        PendingKind::Release => PendingKind::Release,
    };
    Pending {
        id: r.request(p.id),
        term: p.term,
        kind,
        gone: p.gone,
    }
}

impl Durable {
    /// This storage with node and client ids renamed (see the module doc).
    pub fn rewrite_ids(&self, r: &impl Renaming) -> Durable {
        Durable {
            hard_state: rewrite_hard_state(r, &self.hard_state),
            snapshot: self.snapshot.as_ref().map(|s| rewrite_snapshot(r, s)),
            entries: self.entries.iter().map(|e| rewrite_entry(r, e)).collect(),
        }
    }
}

impl Ledger {
    /// This ledger with node and client ids renamed (see the module doc).
    pub fn rewrite_ids(&self, r: &impl Renaming) -> Ledger {
        self.map_entries(|e| {
            e.node = r.node(e.node);
            e.proposal = rewrite_proposal(r, &e.proposal);
        })
    }
}

impl Node {
    /// This node with node and client ids renamed (see the module doc). Called between
    /// steps, when the node holds no output.
    ///
    /// # Panics
    ///
    /// Panics if the node holds output of an unfinished step (a bug in the caller).
    pub fn rewrite_ids(&self, r: &impl Renaming) -> Node {
        assert!(
            self.out.is_empty() && self.append_due.is_empty(),
            "rewrite_ids in the middle of a step"
        );
        let mut config = self.config.clone();
        config.id = r.node(config.id);
        config.members = config.members.iter().map(|m| r.node(*m)).collect();
        config.members.sort_unstable();
        // Built from the renamed parts (not cloned, then overwritten: the model renames a
        // node on most of its steps).
        let log = super::log::RaftLog {
            snapshot: self.log.snapshot.as_ref().map(|s| rewrite_snapshot(r, s)),
            entries: self
                .log
                .entries
                .iter()
                .map(|e| rewrite_entry(r, e))
                .collect(),
        };
        Node {
            config,
            rng: self.rng,
            now_ms: self.now_ms,
            term: self.term,
            voted_for: self.voted_for.map(|v| r.node(v)),
            role: self.role,
            leader: self.leader.map(|l| r.node(l)),
            leader_contact_ms: self.leader_contact_ms,
            log,
            commit_index: self.commit_index,
            persisted_index: self.persisted_index,
            table: self.table.rewrite_clients(|c| r.client(c)),
            votes: self.votes.iter().map(|(k, v)| (r.node(*k), *v)).collect(),
            progress: self
                .progress
                .iter()
                .map(|(k, v)| (r.node(*k), v.clone()))
                .collect(),
            noop_index: self.noop_index,
            timers: self
                .timers
                .iter()
                .map(|(t, at)| (rewrite_timer(r, t), *at))
                .collect(),
            hard_state: rewrite_hard_state(r, &self.hard_state),
            pending: self
                .pending
                .iter()
                .map(|(i, p)| (*i, rewrite_pending(r, p)))
                .collect(),
            waiters: self
                .waiters
                .iter()
                .map(|(k, q)| (k.clone(), q.iter().map(|w| rewrite_waiter(r, w)).collect()))
                .collect(),
            expired: self.expired.clone(),
            append_due: Default::default(),
            out: Default::default(),
        }
    }

    /// Shifts every absolute clock reading so that the clock reads `now_ms` (see the module
    /// doc). Called between steps.
    ///
    /// # Panics
    ///
    /// Panics if `now_ms` is smaller than the election timeout or a deadline would fall below
    /// zero (choose a large `now_ms`, such as [`REBASED_NOW_MS`]).
    pub fn rebase_clock(&mut self, now_ms: u64) {
        let window = self.config.election_timeout_min_ms;
        assert!(
            now_ms >= window,
            "rebase_clock({now_ms}) below the election timeout {window}"
        );
        let old = self.now_ms;
        let shift = |at: u64| -> u64 {
            let shifted = i128::from(at) - i128::from(old) + i128::from(now_ms);
            u64::try_from(shifted).expect("rebase_clock: a deadline fell below zero")
        };
        // A contact older than the window keeps nobody in a lease, now or later (the clock
        // only moves forward): its exact age no longer matters.
        self.leader_contact_ms = self
            .leader_contact_ms
            .map(|at| shift(at.max(old.saturating_sub(window))));
        for at in self.timers.values_mut() {
            *at = shift(*at);
        }
        for queue in self.waiters.values_mut() {
            for w in queue.iter_mut() {
                w.deadline_ms = shift(w.deadline_ms);
            }
        }
        for p in self.pending.values_mut() {
            if let PendingKind::Grant { waiter: Some(w) } = &mut p.kind {
                w.deadline_ms = shift(w.deadline_ms);
            }
        }
        self.now_ms = now_ms;
    }
}

/// A clock reading far enough from zero that [`Node::rebase_clock`] can shift every past
/// reading the node keeps below it.
pub const REBASED_NOW_MS: u64 = 1 << 40;

#[cfg(test)]
mod tests {
    use super::super::test_support::{ack, leader};
    use super::super::{ClientRequest, Input, RequestId};
    use super::*;

    /// Swaps nodes 1 and 2, and clients 7 and 8 (request ids: client in the high half).
    struct Swap;

    impl Renaming for Swap {
        fn node(&self, id: NodeId) -> NodeId {
            match id {
                1 => 2,
                2 => 1,
                other => other,
            }
        }
        fn client(&self, client: u64) -> u64 {
            match client {
                7 => 8,
                8 => 7,
                other => other,
            }
        }
        fn request(&self, id: RequestId) -> RequestId {
            RequestId((self.client(id.0 >> 32) << 32) | (id.0 & 0xFFFF_FFFF))
        }
    }

    fn acquire(client: u64) -> Input {
        Input::Request {
            id: RequestId((client << 32) | 1),
            request: ClientRequest::Acquire {
                key: "a".into(),
                lease_ms: 100,
                wait_ms: 0,
                origin: Some(Origin { client, request: 1 }),
            },
        }
    }

    #[test]
    fn a_renamed_node_steps_like_the_original_renamed() {
        // Model symmetry (issue 14): rewrite_ids commutes with step for a permutation.
        let mut a = leader();
        a.step(Input::Persisted { term: 1, index: 1 });
        let mut b = a.rewrite_ids(&Swap);
        assert_eq!(b.status().id, 2);
        let out_a = a.step(acquire(7));
        let out_b = b.step(acquire(8));
        assert_eq!(out_a.send_now.len(), out_b.send_now.len());
        a.step(Input::Persisted { term: 1, index: 2 });
        b.step(Input::Persisted { term: 1, index: 2 });
        let out_a = a.step(ack(2, 1, 2));
        let out_b = b.step(ack(1, 1, 2));
        assert_eq!(out_a.respond.len(), 1);
        assert_eq!(out_b.respond[0].0, Swap.request(out_a.respond[0].0));
        assert_eq!(a.rewrite_ids(&Swap), b);
        assert_eq!(b.rewrite_ids(&Swap), a, "a swap is its own inverse");
    }

    #[test]
    fn a_rebased_node_steps_like_the_original() {
        // Model relative time (issue 14): only clock differences matter to the core.
        let mut a = leader();
        let mut b = a.clone();
        b.rebase_clock(REBASED_NOW_MS);
        let later_a = a.next_deadline().expect("a leader has timers");
        let later_b = b.next_deadline().expect("a leader has timers");
        assert_eq!(later_a - a.now_ms(), later_b - b.now_ms());
        let out_a = a.step(Input::Tick { now_ms: later_a });
        let out_b = b.step(Input::Tick { now_ms: later_b });
        assert_eq!(out_a.send_now, out_b.send_now);
        a.rebase_clock(REBASED_NOW_MS);
        b.rebase_clock(REBASED_NOW_MS);
        assert_eq!(a, b);
    }
}
