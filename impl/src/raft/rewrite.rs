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
//! - [`HashParts`] (on [`Node`], [`Durable`] and [`Ledger`]) feeds hashers what
//!   `rewrite_ids` with a renaming of node ids alone would return, without building it, in
//!   two parts: what names no node, and the ids, renamed. The model fingerprints a state as
//!   its symmetry representative this way: it copies nothing (a rename deep-copies the log,
//!   the lock table and the storage), and hashes the first part once for all the renamings
//!   it tries.
//!
//! All are pure functions of the node's state; none is used by the server.

use std::cell::RefCell;
use std::hash::{Hash, Hasher};

use super::invariants::Ledger;
use super::io::{ClientRequest, Durable, Input, Output, RequestId, Response, Timer, TimerCmd};
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
        session: r.client(o.session),
        request: o.request,
    })
}

/// `proposal` with its origin renamed.
pub fn rewrite_proposal(r: &impl Renaming, proposal: &Proposal) -> Proposal {
    Proposal {
        origin: origin(r, &proposal.origin),
        command: proposal.command.clone(),
        time_ms: proposal.time_ms,
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
        ClientRequest::Abandon {
            key,
            request,
            origin: o,
        } => ClientRequest::Abandon {
            key: key.clone(),
            request: *request,
            origin: origin(r, o),
        },
        ClientRequest::RegisterSession { label } => {
            ClientRequest::RegisterSession { label: *label }
        }
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

/// `progress` with the snapshot it is sending re-encoded with its clients renamed.
fn rewrite_progress(r: &impl Renaming, progress: &super::Progress) -> super::Progress {
    let mut progress = progress.clone();
    if let Some(send) = &mut progress.snapshot {
        let renamed = serde_json::from_slice::<Snapshot>(&send.bytes)
            .map(|s| super::snapshot::encode(&rewrite_snapshot(r, &s)));
        if let Ok(bytes) = renamed {
            send.bytes = std::sync::Arc::new(bytes);
        }
    }
    progress
}

fn rewrite_pending(r: &impl Renaming, p: &Pending) -> Pending {
    let kind = match &p.kind {
        PendingKind::Grant { waiter } => PendingKind::Grant {
            waiter: waiter.as_ref().map(|w| rewrite_waiter(r, w)),
        },
        PendingKind::Release => PendingKind::Release,
        PendingKind::Register => PendingKind::Register,
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
            retained: self
                .log
                .retained
                .iter()
                .map(|e| rewrite_entry(r, e))
                .collect(),
            // Bytes of a snapshot half received cannot be decoded to rename the clients they
            // name: dropped, the follower asks for the transfer again (the model's snapshots
            // fit one chunk, so it never holds any between steps).
            receiving: None,
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
                .map(|(k, v)| (r.node(*k), rewrite_progress(r, v)))
                .collect(),
            noop_index: self.noop_index,
            snapshots_refused: self.snapshots_refused,
            clock_base_ms: self.clock_base_ms,
            timers: self
                .timers
                .iter()
                .map(|(t, at)| (rewrite_timer(r, t), at))
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
        self.timers.shift_all(shift);
        // Only a leader reads its base, and only as a difference to now.
        self.clock_base_ms.0 = if self.role == super::Role::Leader {
            shift(self.clock_base_ms.0)
        } else {
            now_ms
        };
        // A chunk sent longer ago than the retransmit interval is due, now and later.
        let retransmit = self.config.snapshot_retransmit_ms;
        for progress in self.progress.values_mut() {
            if let Some(send) = &mut progress.snapshot {
                send.sent_at_ms = shift(send.sent_at_ms.max(old.saturating_sub(retransmit)));
            }
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

/// Feeds `h` the ids of `ids` renamed by `node`, in ascending order of the new ids (as the
/// sorted list or ordered map a rename builds would hold them), each with `value(old id)`.
/// Allocation-free: the lists are a cluster's members, a handful.
fn hash_sorted_renamed<H: Hasher>(
    ids: impl Iterator<Item = NodeId> + Clone,
    node: &impl Fn(NodeId) -> NodeId,
    h: &mut H,
    mut value: impl FnMut(NodeId, &mut H),
) {
    let mut last: Option<NodeId> = None;
    let mut count = 0usize;
    loop {
        // The old id with the least new id above `last`.
        let next = ids
            .clone()
            .filter(|id| last.is_none_or(|l| node(*id) > l))
            .min_by_key(|id| node(*id));
        let Some(old) = next else { break };
        let new = node(old);
        new.hash(h);
        value(old, h);
        last = Some(new);
        count += 1;
    }
    count.hash(h);
}

/// A hasher that several handles feed in turn: [`HashParts::hash_nodes_renamed`] feeds both parts
/// of [`HashParts::hash_parts`] to one hasher.
struct Shared<'a, H>(&'a RefCell<&'a mut H>);

impl<H: Hasher> Hasher for Shared<'_, H> {
    fn finish(&self) -> u64 {
        self.0.borrow().finish()
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.borrow_mut().write(bytes);
    }
}

/// Hashing a value as its `rewrite_ids` with a renaming of node ids alone would return it,
/// without building the renamed value, in two parts: what names no node, and the node ids,
/// renamed. Two values that one such renaming maps onto each other feed the same; two that
/// no renaming relates feed different values.
pub trait HashParts {
    /// Feeds `free` what names no node and `ids` the node ids, renamed by `node`.
    fn hash_parts<F: Hasher, I: Hasher>(
        &self,
        node: &impl Fn(NodeId) -> NodeId,
        free: &mut F,
        ids: &mut I,
    );

    /// Feeds `h` both parts: the value as `rewrite_ids` would return it for the renaming
    /// `node` of node ids alone.
    fn hash_nodes_renamed<H: Hasher>(&self, node: &impl Fn(NodeId) -> NodeId, h: &mut H) {
        let cell = RefCell::new(h);
        self.hash_parts(node, &mut Shared(&cell), &mut Shared(&cell));
    }
}

impl HashParts for Node {
    /// Feeds `free` every field of this node that names no node, and `ids` every field that
    /// names one (its id, the members, vote, leader, votes and progress by node), renamed by
    /// `node`, as [`Node::rewrite_ids`] would return them for a renaming of node ids alone
    /// (clients and requests keep their ids), without building the renamed node. So two
    /// nodes that one such renaming maps onto each other feed the same values, and two nodes
    /// that no renaming relates feed different ones; and a caller that tries several
    /// renamings of one node can hash the `free` part (the log, the lock table, ...) once.
    /// Every field is fed (the destructuring below names them all, so a new field does not
    /// compile until it is fed here).
    ///
    /// # Panics
    ///
    /// Panics if the node holds output of an unfinished step (a bug in the caller).
    fn hash_parts<F: Hasher, I: Hasher>(
        &self,
        node: &impl Fn(NodeId) -> NodeId,
        free: &mut F,
        ids: &mut I,
    ) {
        let Node {
            config,
            rng,
            now_ms,
            term,
            voted_for,
            role,
            leader,
            leader_contact_ms,
            log,
            commit_index,
            persisted_index,
            table,
            votes,
            progress,
            noop_index,
            snapshots_refused,
            clock_base_ms,
            timers,
            hard_state,
            pending,
            waiters,
            expired,
            append_due,
            out,
        } = self;
        assert!(
            out.is_empty() && append_due.is_empty(),
            "hash_parts in the middle of a step"
        );
        let super::Config {
            id,
            members,
            election_timeout_min_ms,
            election_timeout_max_ms,
            heartbeat_ms,
            pre_vote,
            check_quorum,
            snapshot_threshold_entries,
            snapshot_trailing_entries,
            snapshot_chunk_bytes,
            snapshot_retransmit_ms,
            append_entries_max,
            waiters_per_key_max,
            uncommitted_entries_max,
            lease_ms_max,
            wait_ms_max,
            session_limits,
            keys_per_session_max,
            locks_max,
            seed,
            bugs,
        } = config;
        node(*id).hash(ids);
        hash_sorted_renamed(members.iter().copied(), node, ids, |_, _| {});
        (
            election_timeout_min_ms,
            election_timeout_max_ms,
            heartbeat_ms,
            pre_vote,
            check_quorum,
            snapshot_threshold_entries,
        )
            .hash(free);
        (
            snapshot_trailing_entries,
            snapshot_chunk_bytes,
            snapshot_retransmit_ms,
        )
            .hash(free);
        (
            append_entries_max,
            waiters_per_key_max,
            uncommitted_entries_max,
            lease_ms_max,
            wait_ms_max,
            session_limits,
            keys_per_session_max,
            locks_max,
            seed,
            bugs,
        )
            .hash(free);
        (rng, now_ms, term, role).hash(free);
        (voted_for.map(node), leader.map(node)).hash(ids);
        (leader_contact_ms, log, commit_index, persisted_index, table).hash(free);
        hash_sorted_renamed(votes.keys().copied(), node, ids, |old, h| {
            votes[&old].hash(h)
        });
        hash_sorted_renamed(progress.keys().copied(), node, ids, |old, h| {
            progress[&old].hash(h)
        });
        (noop_index, snapshots_refused, clock_base_ms, timers).hash(free);
        hard_state.hash_parts(node, free, ids);
        (pending, waiters, expired).hash(free);
    }
}

impl HashParts for Durable {
    /// Feeds `free` what this storage holds that names no node (the log, the snapshot, term
    /// and commit) and `ids` its vote, renamed (see [`HashParts`] on [`Node`]).
    fn hash_parts<F: Hasher, I: Hasher>(
        &self,
        node: &impl Fn(NodeId) -> NodeId,
        free: &mut F,
        ids: &mut I,
    ) {
        let Durable {
            hard_state,
            snapshot,
            entries,
        } = self;
        hard_state.hash_parts(node, free, ids);
        (snapshot, entries).hash(free);
    }
}

impl HashParts for HardState {
    /// Feeds `free` the term and commit index, and `ids` the vote, renamed.
    fn hash_parts<F: Hasher, I: Hasher>(
        &self,
        node: &impl Fn(NodeId) -> NodeId,
        free: &mut F,
        ids: &mut I,
    ) {
        let HardState {
            term,
            voted_for,
            commit,
        } = self;
        (term, commit).hash(free);
        voted_for.map(node).hash(ids);
    }
}

impl HashParts for Ledger {
    /// Feeds `free` every entry without the node that first applied it, and `ids` those
    /// nodes, renamed (see [`HashParts`] on [`Node`]).
    fn hash_parts<F: Hasher, I: Hasher>(
        &self,
        node: &impl Fn(NodeId) -> NodeId,
        free: &mut F,
        ids: &mut I,
    ) {
        self.len().hash(free);
        for (index, entry) in self.iter() {
            let super::invariants::LedgerEntry {
                term,
                proposal,
                outcome,
                node: applied_by,
                known_in_term,
            } = entry;
            (index, term, proposal, outcome, known_in_term).hash(free);
            node(*applied_by).hash(ids);
        }
    }
}

/// A clock reading far enough from zero that [`Node::rebase_clock`] can shift every past
/// reading the node keeps below it.
pub const REBASED_NOW_MS: u64 = 1 << 40;

/// A renaming of node ids alone (clients and requests keep theirs): the model's symmetry.
struct NodesOnly<F>(F);

impl<F: Fn(NodeId) -> NodeId> Renaming for NodesOnly<F> {
    fn node(&self, id: NodeId) -> NodeId {
        (self.0)(id)
    }
    fn client(&self, client: u64) -> u64 {
        client
    }
    fn request(&self, id: RequestId) -> RequestId {
        id
    }
}

/// Whether [`Node::rewrite_ids`] with the node renaming `rename` (a permutation of the
/// members) commutes with [`Node::step`] from `before` on `input`, which took `before` to
/// `after` with `out`. The model counts states that differ only in which server is which
/// once, so a renamed node must step exactly as the original renamed: the renamed copy of
/// `before` steps the input (its sender renamed); its output must be `out` renamed (sends
/// compared as a set: a node walks its peers in id order, which a renaming reorders), and
/// its state `after` renamed. Node ids only, as the model's symmetry renames: message bodies
/// then carry no id. Not judged while either node holds part of a snapshot: `rewrite_ids`
/// drops those bytes, which may name clients (the model's snapshots fit one chunk); nor on
/// `Input::Exit`, whose hand-over breaks a tie between equally up-to-date followers by the
/// lowest id (no deterministic choice among servers is symmetric; the model never steps
/// `Exit`). The reasons of `Unknown` and `Invalid` answers are prose that may name a node,
/// so only their kinds are compared. Pure; the testkit runs it on every step
/// (`testkit::Cluster::step`).
pub fn rename_commutes(
    rename: impl Fn(NodeId) -> NodeId,
    before: &Node,
    input: &Input,
    out: &Output,
    after: &Node,
) -> Result<(), String> {
    if before.log.receiving.is_some() || after.log.receiving.is_some() || *input == Input::Exit {
        return Ok(());
    }
    // Sends as a set (a node walks its peers in id order, which a renaming reorders), and
    // answers' prose aside.
    let comparable = |out: &mut Output| {
        for sends in [&mut out.send_now, &mut out.send_after_persist] {
            sends.sort_by_key(|e| (e.source, e.target, format!("{:?}", e.msg)));
        }
        for (_, response) in &mut out.respond {
            if let Response::Unknown { reason } | Response::Invalid { reason } = response {
                reason.clear();
            }
        }
    };
    let r = NodesOnly(rename);
    let mut renamed = before.rewrite_ids(&r);
    let renamed_input = match input {
        Input::Message { from, msg } => Input::Message {
            from: r.node(*from),
            msg: msg.clone(),
        },
        other => other.clone(),
    };
    let mut renamed_out = renamed.step(renamed_input);
    let envelopes = |sends: &[super::message::Envelope]| {
        (sends.iter())
            .map(|e| super::message::Envelope {
                source: r.node(e.source),
                target: r.node(e.target),
                msg: e.msg.clone(),
            })
            .collect()
    };
    let mut expected = Output {
        persist: out.persist.as_ref().map(|p| super::io::Persist {
            snapshot: p.snapshot.as_ref().map(|s| rewrite_snapshot(&r, s)),
            truncate_from: p.truncate_from,
            entries: p.entries.iter().map(|e| rewrite_entry(&r, e)).collect(),
            hard_state: p.hard_state.as_ref().map(|h| rewrite_hard_state(&r, h)),
        }),
        send_now: envelopes(&out.send_now),
        send_after_persist: envelopes(&out.send_after_persist),
        apply: out.apply.clone(),
        respond: (out.respond.iter())
            .map(|(id, response)| (r.request(*id), rewrite_response(&r, response)))
            .collect(),
        timers: out.timers.clone(),
    };
    comparable(&mut renamed_out);
    comparable(&mut expected);
    let id = before.config.id;
    let renamed_id = r.node(id);
    if renamed_out != expected {
        return Err(format!(
            "node {id} renamed {renamed_id} stepped {input:?} otherwise than the original \
             renamed: the original's output renamed {expected:?}, the renamed node's \
             {renamed_out:?}"
        ));
    }
    if after.rewrite_ids(&r) != renamed {
        return Err(format!(
            "node {id} renamed {renamed_id} stepped {input:?} into another state than the \
             original's renamed"
        ));
    }
    Ok(())
}

/// Whether [`Node::rebase_clock`] commutes with [`Node::step`] from `before` on `input`,
/// which took `before` to `after` with `out`. The model counts two states whose clocks differ
/// by a constant once, so a rebased node must step exactly as the original with every clock
/// reading shifted: a copy of `before` rebased to [`REBASED_NOW_MS`] steps the input (a
/// tick's reading shifted alike); its output, timer deadlines shifted back, must be `out`,
/// and its state, rebased with `after` to one reading, must be `after`'s. This judges every
/// field a rebase moves (or forgets to move) against the step that reads it, where a unit
/// test judges the fields someone listed. Pure; the testkit runs it on every step of every
/// interaction script and seeded test (`testkit::Cluster::step`).
pub fn rebase_commutes(
    before: &Node,
    input: &Input,
    out: &Output,
    after: &Node,
) -> Result<(), String> {
    let shift = i128::from(REBASED_NOW_MS) - i128::from(before.now_ms);
    let moved = |at: u64, by: i128| u64::try_from(i128::from(at) + by).unwrap_or(u64::MAX);
    let mut rebased = before.clone();
    rebased.rebase_clock(REBASED_NOW_MS);
    let shifted_input = match input {
        Input::Tick { now_ms } => Input::Tick {
            now_ms: moved(*now_ms, shift),
        },
        other => other.clone(),
    };
    let mut rebased_out = rebased.step(shifted_input);
    for cmd in &mut rebased_out.timers {
        if let TimerCmd::Set { at_ms, .. } = cmd {
            *at_ms = moved(*at_ms, -shift);
        }
    }
    let id = before.config.id;
    if rebased_out != *out {
        return Err(format!(
            "node {id} stepped {input:?} otherwise once its clock was rebased from {} to \
             {REBASED_NOW_MS}: the original's output {out:?}, the rebased one's (deadlines \
             shifted back) {rebased_out:?}",
            before.now_ms
        ));
    }
    // Both to one reading past either clock, so that neither shift goes below zero.
    let reading = 2 * REBASED_NOW_MS;
    let mut original = after.clone();
    original.rebase_clock(reading);
    rebased.rebase_clock(reading);
    if original != rebased {
        return Err(format!(
            "node {id} stepped {input:?} into another state once its clock was rebased from \
             {} to {REBASED_NOW_MS} (both rebased to {reading} after the step): the \
             original's {original:?}, the rebased one's {rebased:?}",
            before.now_ms
        ));
    }
    Ok(())
}

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
                origin: Some(Origin {
                    session: client,
                    request: 1,
                }),
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

    #[test]
    fn the_renaming_check_holds_a_step_to_its_renamed_twin() {
        let swap = |id: NodeId| match id {
            1 => 2,
            2 => 1,
            other => other,
        };
        let mut before = leader();
        before.step(Input::Persisted { term: 1, index: 1 });
        let input = ack(2, 1, 1);
        let mut after = before.clone();
        let out = after.step(input.clone());
        assert_eq!(rename_commutes(swap, &before, &input, &out, &after), Ok(()));
        // The same answer from node 3 instead: the renamed twin hears it from node 3 too,
        // where the original renamed heard node 1.
        let from_3 = ack(3, 1, 1);
        let why = rename_commutes(swap, &before, &from_3, &out, &after).expect_err("node 3");
        assert!(
            why.contains("node 1 renamed 2 stepped Message { from: 3"),
            "{why}"
        );
    }

    #[test]
    fn the_commutation_check_holds_a_step_to_its_rebased_twin() {
        let before = leader();
        let at = before.next_deadline().expect("a leader has timers");
        let input = Input::Tick { now_ms: at };
        let mut after = before.clone();
        let out = after.step(input.clone());
        assert!(!out.timers.is_empty(), "the heartbeat re-arms: {out:?}");
        assert_eq!(rebase_commutes(&before, &input, &out, &after), Ok(()));
        // An output whose deadline is off by one, or a state one millisecond apart: neither
        // is the rebased twin's.
        let mut late = out.clone();
        if let Some(TimerCmd::Set { at_ms, .. }) = late.timers.first_mut() {
            *at_ms += 1;
        }
        let why = rebase_commutes(&before, &input, &late, &after).expect_err("a later deadline");
        assert!(why.contains("stepped Tick"), "{why}");
        let mut ahead = after.clone();
        ahead.step(Input::Tick { now_ms: at + 1 });
        let why = rebase_commutes(&before, &input, &out, &ahead).expect_err("another state");
        assert!(why.contains("into another state"), "{why}");
    }

    #[test]
    fn a_rebase_keeps_every_waiters_deadline_relative_to_now() {
        // Model relative time (issue 14): a rebase moves every deadline with the clock, a
        // waiter's too, whether it is queued or its Grant is proposed. (A hand-made mistake
        // of 2026-12-07 left the proposed ones behind and passed every tool: only the model
        // rebases, and no test had a proposed waiter.)
        let request = |id, wait_ms| Input::Request {
            id: RequestId(id),
            request: ClientRequest::Acquire {
                key: "a".into(),
                lease_ms: 60_000,
                wait_ms,
                origin: None,
            },
        };
        let commit = |n: &mut Node| {
            let index = n.status().last_log_index;
            n.step(Input::Persisted { term: 1, index });
            n.step(ack(2, 1, index));
        };
        let mut a = leader();
        a.step(request(1, 0));
        let token = a.status().last_log_index;
        commit(&mut a);
        assert_eq!(a.table().holder("a").map(|h| h.token), Some(token));
        a.step(request(2, 10_000));
        a.step(request(3, 20_000));
        let release = ClientRequest::Release {
            key: "a".into(),
            token,
            origin: None,
        };
        a.step(Input::Request {
            id: RequestId(4),
            request: release,
        });
        commit(&mut a);
        let deadlines = |n: &Node| -> Vec<(RequestId, Option<u64>)> {
            let proposed = n.pending.values().filter_map(|p| match &p.kind {
                PendingKind::Grant { waiter: Some(w) } => Some(w),
                _ => None,
            });
            (proposed.chain(n.waiters.values().flatten()))
                .map(|w| (w.id, w.deadline_ms.checked_sub(n.now_ms())))
                .collect()
        };
        let before = deadlines(&a);
        assert_eq!(
            before.iter().map(|(id, _)| id.0).collect::<Vec<_>>(),
            [2, 3],
            "request 2 proposed, request 3 queued"
        );
        a.rebase_clock(REBASED_NOW_MS);
        assert_eq!(deadlines(&a), before);
    }

    /// Renames node ids by `f` only (clients and requests keep theirs), as the model does.
    struct Nodes<F>(F);

    impl<F: Fn(NodeId) -> NodeId> Renaming for Nodes<F> {
        fn node(&self, id: NodeId) -> NodeId {
            (self.0)(id)
        }
        fn client(&self, client: u64) -> u64 {
            client
        }
        fn request(&self, id: RequestId) -> RequestId {
            id
        }
    }

    fn fed(f: impl FnOnce(&mut std::collections::hash_map::DefaultHasher)) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        f(&mut h);
        h.finish()
    }

    /// A leader of {1, 2, 3} at several points: its Noop durable, an acquire proposed, the
    /// acquire acknowledged by node 2 (so that node 2's progress differs from node 3's) and
    /// applied, then acknowledged by node 3 as well.
    fn leader_run() -> Vec<Node> {
        let mut a = leader();
        let mut run = vec![a.clone()];
        a.step(Input::Persisted { term: 1, index: 1 });
        run.push(a.clone());
        a.step(acquire(7));
        a.step(Input::Persisted { term: 1, index: 2 });
        run.push(a.clone());
        a.step(ack(2, 1, 2));
        run.push(a.clone());
        a.step(ack(3, 1, 2));
        run.push(a.clone());
        run
    }

    #[test]
    fn hashing_renamed_feeds_what_the_renamed_node_feeds() {
        // Issue 14: the model fingerprints a state as its symmetry representative without
        // building it; the fingerprint must be the renamed node's, field for field.
        let swap_2_3 = |id: NodeId| match id {
            2 => 3,
            3 => 2,
            other => other,
        };
        let cycle = |id: NodeId| id % 3 + 1;
        let same = |id: NodeId| id;
        let run = leader_run();
        for (i, a) in run.iter().enumerate() {
            for rename in [&swap_2_3 as &dyn Fn(NodeId) -> NodeId, &cycle] {
                let r = Nodes(rename);
                let renamed = a.rewrite_ids(&r);
                assert_eq!(
                    fed(|h| a.hash_nodes_renamed(&rename, h)),
                    fed(|h| renamed.hash_nodes_renamed(&same, h)),
                    "node {i} of the run"
                );
                // The part that names no node is the same before and after the renaming;
                // the ids part carries the renaming.
                let parts = |n: &Node, f: &dyn Fn(NodeId) -> NodeId| {
                    let mut free = std::collections::hash_map::DefaultHasher::new();
                    let mut ids = std::collections::hash_map::DefaultHasher::new();
                    n.hash_parts(&f, &mut free, &mut ids);
                    (free.finish(), ids.finish())
                };
                assert_eq!(parts(a, rename), parts(&renamed, &same));
                assert_eq!(parts(a, rename).0, parts(a, &same).0);
                // Node 1 itself is renamed by the cycle (not by the swap of 2 and 3, which
                // may leave a leader whose followers are alike unchanged).
                assert_ne!(parts(a, &cycle).1, parts(a, &same).1);
                let durable = Durable {
                    hard_state: HardState {
                        term: 1,
                        voted_for: Some(2),
                        commit: 1,
                    },
                    snapshot: None,
                    entries: a.log().to_vec(),
                };
                assert_eq!(
                    fed(|h| durable.hash_nodes_renamed(&rename, h)),
                    fed(|h| durable.rewrite_ids(&r).hash_nodes_renamed(&same, h)),
                );
            }
            // Nodes that differ feed different values; the renaming changes the node's own id.
            for (j, b) in run.iter().enumerate() {
                let (ha, hb) = (
                    fed(|h| a.hash_nodes_renamed(&same, h)),
                    fed(|h| b.hash_nodes_renamed(&same, h)),
                );
                assert_eq!(i == j, ha == hb, "nodes {i} and {j} of the run");
            }
            assert_ne!(
                fed(|h| a.hash_nodes_renamed(&same, h)),
                fed(|h| a.hash_nodes_renamed(&cycle, h)),
            );
        }
    }

    #[test]
    fn a_follower_renamed_feeds_what_its_twin_feeds() {
        // A leader acknowledged by node 2 and one acknowledged by node 3 are the same state
        // with 2 and 3 swapped, and count once; without the swap they differ.
        let mut by_2 = leader();
        by_2.step(Input::Persisted { term: 1, index: 1 });
        let mut by_3 = by_2.clone();
        by_2.step(ack(2, 1, 1));
        by_3.step(ack(3, 1, 1));
        let swap_2_3 = |id: NodeId| match id {
            2 => 3,
            3 => 2,
            other => other,
        };
        let same = |id: NodeId| id;
        assert_ne!(by_2, by_3);
        assert_ne!(
            fed(|h| by_2.hash_nodes_renamed(&same, h)),
            fed(|h| by_3.hash_nodes_renamed(&same, h))
        );
        assert_eq!(
            fed(|h| by_2.hash_nodes_renamed(&swap_2_3, h)),
            fed(|h| by_3.hash_nodes_renamed(&same, h))
        );
    }

    #[test]
    fn a_ledger_renamed_feeds_what_the_renamed_ledger_feeds() {
        let mut a = leader();
        a.step(Input::Persisted { term: 1, index: 1 });
        a.step(acquire(7));
        a.step(Input::Persisted { term: 1, index: 2 });
        let applied = a.step(ack(2, 1, 2)).apply;
        assert!(!applied.is_empty(), "the acquire commits");
        let (mut by_1, mut by_2) = (Ledger::new(), Ledger::new());
        for c in &applied {
            by_1.record(1, 1, c).expect("first record");
            by_2.record(2, 1, c).expect("first record");
        }
        let swap_1_2 = |id: NodeId| match id {
            1 => 2,
            2 => 1,
            other => other,
        };
        let same = |id: NodeId| id;
        let renamed = by_1.rewrite_ids(&Nodes(swap_1_2));
        assert_eq!(renamed, by_2);
        assert_eq!(
            fed(|h| by_1.hash_nodes_renamed(&swap_1_2, h)),
            fed(|h| by_2.hash_nodes_renamed(&same, h))
        );
        assert_ne!(
            fed(|h| by_1.hash_nodes_renamed(&same, h)),
            fed(|h| by_2.hash_nodes_renamed(&same, h))
        );
    }
}
