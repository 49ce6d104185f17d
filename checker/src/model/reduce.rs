//! State-space reductions that still run the real code: symmetry of servers, relative time,
//! canonical order. What each one saves is measured in `checker/src/model/README.md`.
//!
//! # Symmetry (servers)
//!
//! The servers run the same code with the same configuration but their id (every server has
//! the same RNG seed in the model), so two states that differ only in which server is which
//! behave alike. [`LockdModel`] wraps stateright's `ActorModel` and maps every next state to a
//! representative of its class: the servers sorted by a key of what they hold (role, term,
//! log, lock table, timers, storage; nothing that names a server), the ids renamed with the
//! core's [`lockd::raft::Renaming`] ([`Node::rewrite_ids`](lockd::raft::Node::rewrite_ids))
//! everywhere they appear: the nodes, their storage, client targets, leader hints in answers,
//! and the network's envelopes. Ties keep the original order, which is sound (any permutation
//! is) and only reduces less.
//!
//! Why not stateright's own `symmetry()`: its breadth-first checker ignores it (0.31 applies it
//! only in DFS and simulation), its representative sorts servers and clients in one list by
//! the whole actor state (which needs `Ord` on the real `Node`), and its timer rewrite is the
//! identity. Mapping `next_state` to the representative works with every checker, the
//! Explorer included, and stateright's `Rewrite`/`RewritePlan` do the reindexing.
//!
//! Clients are not permuted: their ids key stateright's `LinearizabilityTester`, whose fields
//! are private, so a renamed history cannot be built. With two clients this gives away at
//! most a factor of two.
//!
//! A path found in the reduced space jumps between permutations; [`LockdModel::real_path`]
//! replays it in the unreduced model (at each step, the action whose next state has the same
//! representative), so counterexamples read as one consistent run.
//!
//! # Relative time
//!
//! After every step a server's clock is rebased to [`lockd::raft::REBASED_NOW_MS`]
//! ([`Node::rebase_clock`](lockd::raft::Node::rebase_clock)): deadlines stay relative to now,
//! so states that differ only in absolute milliseconds count once (done in the actor, see
//! `actor.rs`).
//!
//! # Canonical order
//!
//! The clients' grants are kept as a sorted set, not in the order the answers arrived (what
//! reads them asks only whether two clients were granted one key); see `history.rs`. The core
//! keeps its own sets and maps ordered (`BTreeMap`), and stateright's network and timers hash
//! independently of order, so nothing else needs it.

use std::cmp::Reverse;
use std::hash::{BuildHasher, Hash, Hasher};

use lockd::raft::{
    Index, NodeId, Renaming, RequestId, Response, Term, rewrite_request, rewrite_response,
};
use stateright::actor::{ActorModelState, Id};
use stateright::{Model, Path, Property, Rewrite, RewritePlan};

use super::actor::{ClientState, ModelMsg, ModelState, ServerState, ServerStorage};
use super::explain::LockdAction;
use super::{ActorLockdModel, LockdState, ModelConfig};

/// The renaming of a stateright rewrite plan, for the core: node `id` is actor `id - 1`;
/// clients are not permuted.
struct PlanRenaming<'a, S>(&'a RewritePlan<Id, S>);

impl<S> Renaming for PlanRenaming<'_, S> {
    fn node(&self, id: NodeId) -> NodeId {
        let actor = Id::from((id - 1) as usize);
        usize::from(self.0.rewrite(&actor)) as NodeId + 1
    }
    fn client(&self, client: u64) -> u64 {
        client
    }
    fn request(&self, id: RequestId) -> RequestId {
        id
    }
}

impl Rewrite<Id> for ModelMsg {
    fn rewrite<S>(&self, plan: &RewritePlan<Id, S>) -> Self {
        let r = PlanRenaming(plan);
        match self {
            // Raft messages name no node: the sender comes from the envelope.
            ModelMsg::Raft(m) => ModelMsg::Raft(m.clone()),
            ModelMsg::Request { id, request } => ModelMsg::Request {
                id: *id,
                request: rewrite_request(&r, request),
            },
            ModelMsg::Cancel { id } => ModelMsg::Cancel { id: *id },
            ModelMsg::Response { id, response } => ModelMsg::Response {
                id: *id,
                response: rewrite_response(&r, response),
            },
        }
    }
}

impl Rewrite<Id> for ServerStorage {
    fn rewrite<S>(&self, plan: &RewritePlan<Id, S>) -> Self {
        let r = PlanRenaming(plan);
        ServerStorage {
            durable: self.durable.rewrite_ids(&r),
            ledger: self.ledger.rewrite_ids(&r),
        }
    }
}

impl Rewrite<Id> for ModelState {
    fn rewrite<S>(&self, plan: &RewritePlan<Id, S>) -> Self {
        match self {
            ModelState::Server(server) => {
                let r = PlanRenaming(plan);
                // Field by field: `..(**server).clone()` would clone the node, its storage
                // and its ledger only to drop them.
                ModelState::Server(Box::new(ServerState {
                    node: server.node.rewrite_ids(&r),
                    durable: server.durable.rewrite_ids(&r),
                    armed: server.armed.clone(),
                    ledger: server.ledger.rewrite_ids(&r),
                    ledger_conflict: server.ledger_conflict.clone(),
                    ghost: server.ghost.clone(),
                }))
            }
            ModelState::Client(client) => ModelState::Client(ClientState {
                target: usize::from(plan.rewrite(&Id::from(client.target))),
                ..client.clone()
            }),
        }
    }
}

/// A hasher with fixed keys, so that a run's representatives are the same every time. aHash,
/// not std's SipHash: the keys and fingerprints here hash every server's log and table on
/// every generated state, and need no protection from hostile input.
fn hasher() -> ahash::AHasher {
    ahash::RandomState::with_seeds(
        0x243F_6A88_85A3_08D3,
        0x1319_8A2E_0370_7344,
        0xA409_3822_299F_31D0,
        0x082E_FA98_EC4E_6C89,
    )
    .build_hasher()
}

/// The sort key of actor `i`: servers first, by what they hold; then clients in their order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SymmetryKey {
    Server(Reverse<(Term, Index, Index)>, u64),
    Client(usize),
}

/// The first part of a server's sort key: its progress (term, log, commit), most first. Any
/// key that names no server is sound; this one keeps the order of a state's servers more
/// often after a step (a step changes one server's hash at random, its progress rarely
/// enough to pass another's), and an already sorted state needs no renaming: on the default
/// search, 52% of next states instead of 31% with the hash alone, which saves a third of
/// the renaming (a deep copy of every server).
fn progress(server: &ServerState) -> Reverse<(Term, Index, Index)> {
    let status = server.node.status();
    Reverse((status.term, status.last_log_index, status.commit_index))
}

/// A hash of everything a server holds that names no server (see the module doc).
fn local_key(server: &ServerState, crashed: bool, storage: Option<&ServerStorage>) -> u64 {
    let mut h = hasher();
    let status = server.node.status();
    (crashed, status.role, status.term, status.commit_index).hash(&mut h);
    (status.last_log_index, status.leader == Some(status.id)).hash(&mut h);
    let durable = &server.durable.hard_state;
    (
        durable.voted_for == Some(status.id),
        durable.voted_for.is_some(),
    )
        .hash(&mut h);
    server.node.log().hash(&mut h);
    server.node.snapshot().hash(&mut h);
    server.node.table().hash(&mut h);
    for (timer, at) in server.node.timers() {
        (timer, at.wrapping_sub(server.node.now_ms())).hash(&mut h);
    }
    if let Some(storage) = storage {
        (&storage.durable.entries, &storage.durable.snapshot).hash(&mut h);
        (
            storage.durable.hard_state.term,
            storage.durable.hard_state.commit,
        )
            .hash(&mut h);
        storage.ledger.len().hash(&mut h);
    }
    server.ledger.len().hash(&mut h);
    h.finish()
}

/// A message in flight as a server sees it: sent or received, the actor at the other end
/// (a server by its local key, a client by its id), the message's hash.
type MessageKey = (bool, (u64, usize), u64);

/// The keys of every server: its own state (`local_key`), refined once by the keys of the
/// servers it names (vote, leader) and of the actors at the other end of its messages in
/// flight, so that servers alike on their own but placed differently rarely tie.
fn server_keys(state: &LockdState) -> Vec<Option<u64>> {
    let local: Vec<Option<u64>> = state
        .actor_states
        .iter()
        .enumerate()
        .map(|(i, s)| match &**s {
            ModelState::Server(server) => Some(local_key(
                server,
                state.crashed[i],
                state.actor_storages[i].as_ref(),
            )),
            ModelState::Client(_) => None,
        })
        .collect();
    // An actor as seen from a server: a server by its local key, a client by its id.
    let other = |id: Id| -> (u64, usize) {
        match local.get(usize::from(id)).copied().flatten() {
            Some(key) => (key, usize::MAX),
            None => (0, usize::from(id)),
        }
    };
    let node_key = |node: Option<NodeId>| node.map(|n| other(Id::from((n - 1) as usize)));
    let mut messages: Vec<Vec<MessageKey>> = vec![Vec::new(); local.len()];
    for envelope in state.network.iter_all() {
        let mut h = hasher();
        match envelope.msg {
            // A leader hint names a server: hash what that server holds instead.
            ModelMsg::Response {
                id,
                response: Response::NotLeader { leader },
            } => (id, node_key(*leader)).hash(&mut h),
            msg => msg.hash(&mut h),
        }
        let msg = h.finish();
        messages[usize::from(envelope.src)].push((true, other(envelope.dst), msg));
        messages[usize::from(envelope.dst)].push((false, other(envelope.src), msg));
    }
    let mut targets: Vec<Vec<usize>> = vec![Vec::new(); local.len()];
    for (i, s) in state.actor_states.iter().enumerate() {
        if let ModelState::Client(client) = &**s {
            targets[client.target].push(i);
        }
    }
    (0..local.len())
        .map(|i| {
            let key = local[i]?;
            let ModelState::Server(server) = &*state.actor_states[i] else {
                return None;
            };
            let mut h = hasher();
            key.hash(&mut h);
            let status = server.node.status();
            node_key(status.leader).hash(&mut h);
            node_key(server.durable.hard_state.voted_for).hash(&mut h);
            messages[i].sort_unstable();
            messages[i].hash(&mut h);
            targets[i].hash(&mut h);
            Some(h.finish())
        })
        .collect()
}

/// The representative of `state`'s symmetry class (servers permuted; see the module doc).
pub fn representative(state: LockdState) -> LockdState {
    let keys: Vec<SymmetryKey> = server_keys(&state)
        .into_iter()
        .enumerate()
        .map(|(i, key)| match (key, &*state.actor_states[i]) {
            (Some(key), ModelState::Server(server)) => SymmetryKey::Server(progress(server), key),
            _ => SymmetryKey::Client(i),
        })
        .collect();
    let tied = keys.windows(2).any(|w| w[0] == w[1]);
    if !tied {
        if keys.windows(2).all(|w| w[0] <= w[1]) {
            return state; // Already sorted: the identity permutation.
        }
        return permuted(state, &keys);
    }
    // Servers that tie on their keys may still differ in how others see them (a leader's
    // progress per follower): try every order of the tied ones, keep the least fingerprint.
    let mut best: Option<(u64, LockdState)> = None;
    for order in tie_orders(&keys) {
        let candidate = permuted(state.clone(), &order);
        let f = fingerprint(&candidate);
        if best.as_ref().is_none_or(|(b, _)| f < *b) {
            best = Some((f, candidate));
        }
    }
    best.map_or(state, |(_, s)| s)
}

/// A hash of the whole state (stateright's own fingerprint function is private).
fn fingerprint(state: &LockdState) -> u64 {
    let mut h = hasher();
    state.hash(&mut h);
    h.finish()
}

/// Every total order of the actors that sorts `keys` and breaks ties in all possible ways:
/// each order as one rank per actor.
fn tie_orders(keys: &[SymmetryKey]) -> Vec<Vec<usize>> {
    let mut by_key: Vec<usize> = (0..keys.len()).collect();
    by_key.sort_by_key(|i| keys[*i]);
    // Groups of equal keys, in sorted order; each group's members may take its ranks in any
    // order.
    let mut orders: Vec<Vec<usize>> = vec![vec![0; keys.len()]];
    let mut start = 0;
    while start < by_key.len() {
        let mut end = start + 1;
        while end < by_key.len() && keys[by_key[end]] == keys[by_key[start]] {
            end += 1;
        }
        let group = &by_key[start..end];
        let mut next = Vec::new();
        for order in &orders {
            for perm in permutations(group) {
                let mut o = order.clone();
                for (offset, actor) in perm.iter().enumerate() {
                    o[*actor] = start + offset;
                }
                next.push(o);
            }
        }
        orders = next;
        start = end;
    }
    orders
}

/// Every permutation of `items` (at most a handful: the servers of one tie).
fn permutations(items: &[usize]) -> Vec<Vec<usize>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut all = Vec::new();
    for (i, first) in items.iter().enumerate() {
        let rest: Vec<usize> = items
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, x)| *x)
            .collect();
        for mut tail in permutations(&rest) {
            tail.insert(0, *first);
            all.push(tail);
        }
    }
    all
}

/// `state` with its actors moved so that `keys` (one per actor) end up sorted, and every id
/// renamed to match.
pub fn permuted<K: Ord>(state: LockdState, keys: &[K]) -> LockdState {
    let plan = RewritePlan::<Id, _>::from_values_to_sort(keys);
    ActorModelState {
        actor_states: plan.reindex(&state.actor_states),
        network: state.network.rewrite(&plan),
        timers_set: plan.reindex(&state.timers_set),
        random_choices: plan.reindex(&state.random_choices),
        crashed: plan.reindex(&state.crashed),
        actor_storages: plan.reindex(&state.actor_storages),
        history: state.history,
    }
}

/// The model: stateright's actor model of lockd, with its next states mapped to symmetry
/// representatives when [`ModelConfig::symmetry`] is on.
#[derive(Clone)]
pub struct LockdModel {
    /// The actor model (servers, clients, network, history).
    pub actors: ActorLockdModel,
    /// What is modelled.
    pub cfg: ModelConfig,
    properties: Vec<Property<LockdModel>>,
}

impl LockdModel {
    /// Wraps `actors` with the properties of `cfg`.
    pub fn new(actors: ActorLockdModel, cfg: ModelConfig) -> Self {
        let properties = super::properties::all(&cfg);
        LockdModel {
            actors,
            cfg,
            properties,
        }
    }

    fn reduce(&self, state: LockdState) -> LockdState {
        if self.cfg.symmetry {
            representative(state)
        } else {
            state
        }
    }

    /// `path` (found in the reduced space) as one run of the unreduced model: the same
    /// states up to the renaming of servers, with each action as it happens in that run.
    /// Returns the path unchanged when symmetry is off, or if a step cannot be matched
    /// (which would be a bug in the reduction; the reduced path is still a valid path of
    /// the reduced model).
    pub fn real_path(
        &self,
        path: &Path<LockdState, LockdAction>,
    ) -> Vec<(LockdState, Option<LockdAction>)> {
        let steps = path.clone().into_vec();
        if !self.cfg.symmetry || steps.is_empty() {
            return steps;
        }
        let mut real: Vec<(LockdState, Option<LockdAction>)> = Vec::new();
        let mut current = steps[0].0.clone();
        for window in steps.windows(2) {
            let target = &window[1].0;
            let mut actions = Vec::new();
            self.actors.actions(&current, &mut actions);
            let found = actions.into_iter().find_map(|a| {
                let next = self.actors.next_state(&current, a.clone())?;
                (self.reduce(next.clone()) == *target).then_some((a, next))
            });
            let Some((action, next)) = found else {
                return steps;
            };
            real.push((current, Some(action)));
            current = next;
        }
        real.push((current, None));
        real
    }
}

impl Model for LockdModel {
    type State = LockdState;
    type Action = LockdAction;

    fn init_states(&self) -> Vec<LockdState> {
        self.actors
            .init_states()
            .into_iter()
            .map(|s| self.reduce(s))
            .collect()
    }

    fn actions(&self, state: &LockdState, actions: &mut Vec<LockdAction>) {
        self.actors.actions(state, actions);
    }

    fn next_state(&self, last_state: &LockdState, action: LockdAction) -> Option<LockdState> {
        self.actors
            .next_state(last_state, action)
            .map(|s| self.reduce(s))
    }

    fn format_action(&self, action: &LockdAction) -> String {
        self.actors.format_action(action)
    }

    fn format_step(&self, last_state: &LockdState, action: LockdAction) -> Option<String> {
        self.actors.format_step(last_state, action)
    }

    fn as_svg(&self, path: Path<LockdState, LockdAction>) -> Option<String> {
        self.actors.as_svg(path)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        self.properties.clone()
    }

    fn within_boundary(&self, state: &LockdState) -> bool {
        Model::within_boundary(&self.actors, state)
    }
}
