//! State-space reductions that still run the real code: symmetry of servers, relative time,
//! canonical order. What each one saves is measured in `checker/src/model/README.md`.
//!
//! # Symmetry (servers)
//!
//! The servers run the same code with the same configuration but their id (every server has
//! the same RNG seed in the model), so two states that differ only in which server is which
//! behave alike. A [`LockdState`] is fingerprinted as its class: [`canonical_hash`] sorts the
//! servers by a key of what they hold (role, term, log, lock table, timers, storage, sends
//! held back for a pending save; nothing that names a server) and hashes the state as it
//! would read with the servers in that order and every id renamed to match ([`HashParts`] on
//! the node and the same on the storage and ledger: the nodes, their storage, the sends they
//! hold back, client targets, leader hints in answers, the network's envelopes), without
//! building that state. Servers that tie on their key are tried in every order, and the least
//! hash is the class's. stateright's checkers keep one state per fingerprint, so the search
//! explores one state of each class, and a path it reports is a real run (every state on it
//! is one the unreduced model reaches).
//!
//! An earlier version built the representative (renamed copies of every server, its log and
//! storage) for every next state; hashing it in place instead does the same reduction with
//! no copy (`checker/src/model/README.md` has the figures).
//!
//! Why not stateright's own `symmetry()`: its breadth-first checker ignores it (0.31 applies it
//! only in DFS and simulation), its representative sorts servers and clients in one list by
//! the whole actor state (which needs `Ord` on the real `Node`), and its timer rewrite is the
//! identity. A fingerprint of the class works with every checker, the Explorer included.
//!
//! Clients are not permuted: their ids key stateright's `LinearizabilityTester`, whose fields
//! are private, so a renamed history cannot be built. With two clients this gives away at
//! most a factor of two.
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

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use lockd::raft::{HashParts, NodeId, RequestId, Response};
use stateright::actor::{Envelope, Id, Network};
use stateright::{Model, Path, Property};

use super::actor::{ClientState, ModelMsg, ModelState, ServerState, ServerStorage};
use super::explain::LockdAction;
use super::{ActorLockdModel, ActorState, LockdState, ModelConfig};

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

/// The sort key of actor `i`: servers first, by what they hold ([`Prepared::server_keys`]);
/// then clients in their order. (An earlier version put each server's progress first, so
/// that a step left the servers in order more often and the representative it built needed
/// no renaming; nothing is built any more, and the key already covers the progress.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SymmetryKey {
    Server(u64),
    Client(usize),
}

/// A hasher that drops what it is fed: the part of [`HashParts::hash_parts`] a
/// caller does not need.
struct Skip;

impl Hasher for Skip {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, _: &[u8]) {}
}

/// The identity renaming.
fn same(id: NodeId) -> NodeId {
    id
}

/// What [`canonical_hash`] computes once per state for every order of servers it tries.
struct Prepared<'a> {
    state: &'a ActorState,
    /// Per actor: for a server, the hash of everything it holds that names no server (its
    /// node, storage and ledger without their ids; its timers, crash flag and saved storage),
    /// which no renaming changes; `None` for a client.
    free: Vec<Option<u64>>,
    /// Per envelope of an unordered network: source, destination, how many, the hash of the
    /// message without its leader hint, and the hint of a `NotLeader` answer (the one node id
    /// a message names: Raft messages name none, the sender comes from the envelope;
    /// requests and cancels name clients, which keep their ids).
    envelopes: Vec<PreparedEnvelope>,
}

/// Source, destination, count, message hash without the hint, leader hint (see [`Prepared`]).
type PreparedEnvelope = (Id, Id, usize, u64, Option<Option<NodeId>>);

impl<'a> Prepared<'a> {
    fn new(state: &'a ActorState) -> Self {
        let free = (0..state.actor_states.len())
            .map(|i| {
                let ModelState::Server(server) = &*state.actor_states[i] else {
                    return None;
                };
                let ServerState {
                    node,
                    durable,
                    ledger,
                    ledger_conflict,
                    ghost,
                    unsaved,
                } = &**server;
                let mut h = hasher();
                node.hash_parts(&same, &mut h, &mut Skip);
                durable.hash_parts(&same, &mut h, &mut Skip);
                ledger.hash_parts(&same, &mut h, &mut Skip);
                (ledger_conflict, ghost).hash(&mut h);
                unsaved.as_deref().map(|held| held_free(held)).hash(&mut h);
                let own = (
                    &state.timers_set[i],
                    &state.random_choices[i],
                    state.crashed[i],
                );
                own.hash(&mut h);
                match state.actor_storages[i].as_deref() {
                    None => 0u8.hash(&mut h),
                    Some(ServerStorage { durable, ledger }) => {
                        1u8.hash(&mut h);
                        durable.hash_parts(&same, &mut h, &mut Skip);
                        ledger.hash_parts(&same, &mut h, &mut Skip);
                    }
                }
                Some(h.finish())
            })
            .collect();
        let envelope = |e: &Envelope<ModelMsg>, count: usize| {
            let mut h = hasher();
            let hint = match leader_hint(&e.msg) {
                Some((id, leader)) => {
                    (0u8, id).hash(&mut h);
                    Some(leader)
                }
                None => {
                    (1u8, &e.msg).hash(&mut h);
                    None
                }
            };
            (e.src, e.dst, count, h.finish(), hint)
        };
        let envelopes = match &state.network {
            Network::UnorderedNonDuplicating(multiset) => {
                multiset.iter().map(|(e, n)| envelope(e, *n)).collect()
            }
            Network::UnorderedDuplicating(set, _) => set.iter().map(|e| envelope(e, 1)).collect(),
            Network::Ordered(_) => Vec::new(), // Hashed in place, see `hash_permuted`.
        };
        Prepared {
            state,
            free,
            envelopes,
        }
    }

    /// The keys of every server: what it holds (`free`) and how it relates to itself (leader,
    /// vote), refined once by the keys of the servers it names (vote, leader) and of the
    /// actors at the other end of its messages in flight, so that servers alike on their own
    /// but placed differently rarely tie. No key names a server.
    fn server_keys(&self) -> Vec<Option<u64>> {
        let state = self.state;
        let local: Vec<Option<u64>> = (0..self.free.len())
            .map(|i| {
                let free = self.free[i]?;
                let ModelState::Server(server) = &*state.actor_states[i] else {
                    return None;
                };
                let status = server.node.status();
                let me = Some(status.id);
                let mut h = hasher();
                free.hash(&mut h);
                (status.leader == me).hash(&mut h);
                (server.durable.hard_state.voted_for == me).hash(&mut h);
                let saved_vote = state.actor_storages[i]
                    .as_deref()
                    .map(|s| s.durable.hard_state.voted_for == me);
                saved_vote.hash(&mut h);
                Some(h.finish())
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
        for (src, dst, count, msg, hint) in &self.envelopes {
            // A leader hint names a server: what that server holds stands for it.
            let key = (*count, *msg, hint.map(node_key));
            messages[usize::from(*src)].push((true, other(*dst), key));
            messages[usize::from(*dst)].push((false, other(*src), key));
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

    /// The hash of the state with actor `i` moved to `rank[i]` and every id renamed to
    /// match. Everything the state holds is fed; a field that names an actor is fed renamed.
    fn hash_permuted(&self, rank: &[usize]) -> u64 {
        let mut at = vec![0; rank.len()];
        for (actor, r) in rank.iter().enumerate() {
            at[*r] = actor;
        }
        let actor = |id: Id| Id::from(rank[usize::from(id)]);
        let node = |id: NodeId| rank[(id - 1) as usize] as NodeId + 1;
        let mut h = hasher();
        let ActorState {
            actor_states,
            network,
            timers_set,
            random_choices,
            crashed,
            history,
            actor_storages,
        } = self.state;
        rank.len().hash(&mut h);
        for old in at {
            match &*actor_states[old] {
                ModelState::Server(server) => {
                    (0u8, self.free[old]).hash(&mut h);
                    server.node.hash_parts(&node, &mut Skip, &mut h);
                    server.durable.hash_parts(&node, &mut Skip, &mut h);
                    server.ledger.hash_parts(&node, &mut Skip, &mut h);
                    if let Some(held) = &server.unsaved {
                        held_renamed(held, &actor, &node).hash(&mut h);
                    }
                    if let Some(ServerStorage { durable, ledger }) = actor_storages[old].as_deref()
                    {
                        durable.hash_parts(&node, &mut Skip, &mut h);
                        ledger.hash_parts(&node, &mut Skip, &mut h);
                    }
                }
                ModelState::Client(client) => {
                    let ClientState {
                        seq,
                        target,
                        rounds_done,
                        retries,
                        phase,
                    } = client;
                    let target = rank[*target];
                    (1u8, seq, target, rounds_done, retries, phase).hash(&mut h);
                    (&timers_set[old], &random_choices[old], crashed[old]).hash(&mut h);
                    actor_storages[old].hash(&mut h);
                }
            }
        }
        // The network is a set or multiset: each envelope hashed on its own, renamed, then
        // the sorted hashes.
        let mut hashes: Vec<u64> = match network {
            Network::Ordered(channels) => {
                2u8.hash(&mut h);
                channels
                    .iter()
                    .map(|((src, dst), msgs)| {
                        let mut c = hasher();
                        (actor(*src), actor(*dst), msgs.len()).hash(&mut c);
                        for msg in msgs {
                            hash_msg_renamed(msg, &node, &mut c);
                        }
                        c.finish()
                    })
                    .collect()
            }
            unordered => {
                let kind = u8::from(matches!(unordered, Network::UnorderedDuplicating(..)));
                kind.hash(&mut h);
                if let Network::UnorderedDuplicating(_, Some(Envelope { src, dst, msg })) =
                    unordered
                {
                    let mut c = hasher();
                    (actor(*src), actor(*dst)).hash(&mut c);
                    hash_msg_renamed(msg, &node, &mut c);
                    c.finish().hash(&mut h);
                }
                self.envelopes
                    .iter()
                    .map(|(src, dst, count, msg, hint)| {
                        let mut c = hasher();
                        (actor(*src), actor(*dst), count, msg).hash(&mut c);
                        hint.map(|leader| leader.map(node)).hash(&mut c);
                        c.finish()
                    })
                    .collect()
            }
        };
        hashes.sort_unstable();
        hashes.hash(&mut h);
        history.hash(&mut h);
        h.finish()
    }
}

/// A message in flight as a server sees it: sent or received, the actor at the other end
/// (a server by its local key, a client by its id), and the envelope's count, message hash
/// and leader hint (by the key of the server it names).
type MessageKey = (
    bool,
    (u64, usize),
    (usize, u64, Option<Option<(u64, usize)>>),
);

/// The fingerprint of `state`'s symmetry class (servers permuted; see the module doc): the
/// hash of the state as it reads with the servers sorted by their keys and renamed to match,
/// the least over every order of servers that tie.
pub fn canonical_hash(state: &ActorState) -> u64 {
    let prepared = Prepared::new(state);
    let keys: Vec<SymmetryKey> = prepared
        .server_keys()
        .into_iter()
        .enumerate()
        .map(|(i, key)| match key {
            Some(key) => SymmetryKey::Server(key),
            None => SymmetryKey::Client(i),
        })
        .collect();
    let mut by_key: Vec<usize> = (0..keys.len()).collect();
    by_key.sort_by_key(|i| keys[*i]);
    // Equal keys sit side by side once sorted (not always in actor order: an earlier
    // version looked for ties in actor order and missed some, which only reduced less).
    let tied = by_key.windows(2).any(|w| keys[w[0]] == keys[w[1]]);
    if !tied {
        let mut rank = vec![0; keys.len()];
        for (r, actor) in by_key.into_iter().enumerate() {
            rank[actor] = r;
        }
        return prepared.hash_permuted(&rank);
    }
    // Servers that tie on their keys may still differ in how others see them (a leader's
    // progress per follower): try every order of the tied ones, keep the least hash.
    tie_orders(&keys)
        .iter()
        .map(|rank| prepared.hash_permuted(rank))
        .min()
        .expect("at least one order")
}

/// The hash of `state` with actor `i` moved to `rank[i]` and every id renamed to match.
#[cfg(test)]
fn hash_permuted(state: &ActorState, rank: &[usize]) -> u64 {
    Prepared::new(state).hash_permuted(rank)
}

/// The request and leader hint of a `NotLeader` answer: the one node id a message names.
fn leader_hint(msg: &ModelMsg) -> Option<(RequestId, Option<NodeId>)> {
    match msg {
        ModelMsg::Response { id, response } => match &**response {
            Response::NotLeader { leader } => Some((*id, *leader)),
            _ => None,
        },
        _ => None,
    }
}

/// The part of a server's held-back sends ([`ServerState::unsaved`]) that names no server:
/// per send, the message without its leader hint and, for an answer, the client it goes to
/// (a Raft message goes to a server, which is left out); sorted, since the sends go out
/// together and their order means nothing.
fn held_free(held: &[(Id, ModelMsg)]) -> Vec<u64> {
    let mut hashes: Vec<u64> = held
        .iter()
        .map(|(target, msg)| {
            let mut h = hasher();
            match (msg, leader_hint(msg)) {
                (ModelMsg::Raft(raft), _) => (0u8, raft).hash(&mut h),
                (_, Some((id, _))) => (1u8, target, id).hash(&mut h),
                (_, None) => (2u8, target, msg).hash(&mut h),
            }
            h.finish()
        })
        .collect();
    hashes.sort_unstable();
    hashes
}

/// A server's held-back sends with every actor and node id renamed: per send, the renamed
/// destination and the message with its leader hint renamed; sorted (see [`held_free`]).
fn held_renamed(
    held: &[(Id, ModelMsg)],
    actor: &impl Fn(Id) -> Id,
    node: &impl Fn(NodeId) -> NodeId,
) -> Vec<u64> {
    let mut hashes: Vec<u64> = held
        .iter()
        .map(|(target, msg)| {
            let mut h = hasher();
            actor(*target).hash(&mut h);
            hash_msg_renamed(msg, node, &mut h);
            h.finish()
        })
        .collect();
    hashes.sort_unstable();
    hashes
}

/// Feeds `h` a message with the node ids it names renamed: only a leader hint names one.
fn hash_msg_renamed(msg: &ModelMsg, node: &impl Fn(NodeId) -> NodeId, h: &mut impl Hasher) {
    match leader_hint(msg) {
        Some((id, leader)) => (0u8, id, leader.map(node)).hash(h),
        None => (1u8, msg).hash(h),
    }
}

impl Hash for LockdState {
    /// With symmetry on, the state's class ([`canonical_hash`]); otherwise the state's own
    /// hash. stateright fingerprints states with this.
    fn hash<H: Hasher>(&self, h: &mut H) {
        if self.symmetric() {
            h.write_u64(canonical_hash(self));
        } else {
            (**self).hash(h);
        }
    }
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

/// The model: stateright's actor model of lockd, with its states fingerprinted by symmetry
/// class when [`ModelConfig::symmetry`] is on.
#[derive(Clone)]
pub struct LockdModel {
    /// The actor model (servers, clients, network, history).
    pub actors: ActorLockdModel,
    /// What is modelled.
    pub cfg: ModelConfig,
    properties: Vec<Property<LockdModel>>,
    /// States whose properties were evaluated (shared by the clones a checker makes).
    checked: Arc<AtomicUsize>,
}

impl LockdModel {
    /// Wraps `actors` with the properties of `cfg`.
    pub fn new(actors: ActorLockdModel, cfg: ModelConfig) -> Self {
        let properties = super::properties::all(&cfg);
        LockdModel {
            actors,
            cfg,
            properties,
            checked: Arc::default(),
        }
    }

    /// How many states had their properties checked, by every checker and walk of this model
    /// and its clones: what a search really checked (stateright's own counts include the
    /// states one step past its depth, which it generates and does not check).
    pub fn checked_states(&self) -> usize {
        self.checked.load(Ordering::Relaxed)
    }

    /// Counts one state checked (the first property calls it; see
    /// [`LockdModel::checked_states`]).
    pub(crate) fn note_checked(&self) {
        self.checked.fetch_add(1, Ordering::Relaxed);
    }

    fn wrap(&self, state: ActorState) -> LockdState {
        LockdState::new(state, self.cfg.symmetry)
    }
}

impl Model for LockdModel {
    type State = LockdState;
    type Action = LockdAction;

    fn init_states(&self) -> Vec<LockdState> {
        self.actors
            .init_states()
            .into_iter()
            .map(|s| self.wrap(s))
            .collect()
    }

    fn actions(&self, state: &LockdState, actions: &mut Vec<LockdAction>) {
        self.actors.actions(state, actions);
    }

    fn next_state(&self, last_state: &LockdState, action: LockdAction) -> Option<LockdState> {
        self.actors
            .next_state(last_state, action)
            .map(|s| self.wrap(s))
    }

    fn format_action(&self, action: &LockdAction) -> String {
        self.actors.format_action(action)
    }

    fn format_step(&self, last_state: &LockdState, action: LockdAction) -> Option<String> {
        self.actors.format_step(last_state, action)
    }

    fn as_svg(&self, path: Path<LockdState, LockdAction>) -> Option<String> {
        let steps = path.into_vec();
        let init = steps.first()?.0.clone().into_inner();
        let actions: Vec<LockdAction> = steps.iter().filter_map(|(_, a)| a.clone()).collect();
        self.actors
            .as_svg(Path::from_actions(&self.actors, init, &actions)?)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        self.properties.clone()
    }

    fn within_boundary(&self, state: &LockdState) -> bool {
        Model::within_boundary(&self.actors, state)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet, VecDeque};
    use std::sync::Arc;

    use lockd::raft::{Renaming, rewrite_response};
    use stateright::actor::ActorModelState;

    use super::*;

    /// Node `id` becomes node `rank[id - 1] + 1`; clients keep their ids.
    struct Ranks<'a>(&'a [usize]);

    impl Renaming for Ranks<'_> {
        fn node(&self, id: NodeId) -> NodeId {
            self.0[(id - 1) as usize] as NodeId + 1
        }
        fn client(&self, client: u64) -> u64 {
            client
        }
        fn request(&self, id: RequestId) -> RequestId {
            id
        }
    }

    /// `state` with actor `i` moved to `rank[i]`, built with the core's `rewrite_ids`: an
    /// oracle independent of `hash_permuted`, which never builds the state.
    fn permute(state: &ActorState, rank: &[usize]) -> ActorState {
        let r = Ranks(rank);
        let actor = |id: Id| Id::from(rank[usize::from(id)]);
        let rename = |msg: &ModelMsg| match msg {
            ModelMsg::Response { id, response } => ModelMsg::Response {
                id: *id,
                response: Arc::new(rewrite_response(&r, response)),
            },
            other => other.clone(),
        };
        let actor_states = state
            .actor_states
            .iter()
            .map(|s| {
                Arc::new(match &**s {
                    ModelState::Server(server) => ModelState::Server(Box::new(ServerState {
                        node: server.node.rewrite_ids(&r),
                        durable: Arc::new(server.durable.rewrite_ids(&r)),
                        ledger: Arc::new(server.ledger.rewrite_ids(&r)),
                        ledger_conflict: server.ledger_conflict.clone(),
                        ghost: server.ghost.clone(),
                        unsaved: server.unsaved.as_ref().map(|held| {
                            let mut renamed: Vec<(Id, ModelMsg)> =
                                held.iter().map(|(t, m)| (actor(*t), rename(m))).collect();
                            renamed.sort_unstable(); // As the actor keeps them.
                            Arc::new(renamed)
                        }),
                    })),
                    ModelState::Client(client) => ModelState::Client(ClientState {
                        target: rank[client.target],
                        ..client.clone()
                    }),
                })
            })
            .collect();
        let storages = state
            .actor_storages
            .iter()
            .map(|s| {
                s.as_ref().map(|s| {
                    Arc::new(ServerStorage {
                        durable: Arc::new(s.durable.rewrite_ids(&r)),
                        ledger: Arc::new(s.ledger.rewrite_ids(&r)),
                    })
                })
            })
            .collect();
        // From the multiset itself: stateright 0.31's `iter_all` yields an envelope sent n > 1
        // times n + 1 times.
        let Network::UnorderedNonDuplicating(multiset) = &state.network else {
            panic!("the model's network is unordered and non-duplicating");
        };
        let envelopes = multiset.iter().flat_map(|(e, count)| {
            let e = Envelope {
                src: actor(e.src),
                dst: actor(e.dst),
                msg: rename(&e.msg),
            };
            std::iter::repeat_n(e, *count)
        });
        let network = Network::new_unordered_nonduplicating(envelopes);
        ActorModelState {
            actor_states: moved(actor_states, rank),
            network,
            timers_set: moved(state.timers_set.clone(), rank),
            random_choices: moved(state.random_choices.clone(), rank),
            crashed: moved(state.crashed.clone(), rank),
            history: state.history.clone(),
            actor_storages: moved(storages, rank),
        }
    }

    /// `items` with item `i` moved to `rank[i]`.
    fn moved<T>(items: Vec<T>, rank: &[usize]) -> Vec<T> {
        let mut slots: Vec<Option<T>> = (0..rank.len()).map(|_| None).collect();
        for (i, item) in items.into_iter().enumerate() {
            slots[rank[i]] = Some(item);
        }
        slots
            .into_iter()
            .map(|s| s.expect("a permutation"))
            .collect()
    }

    /// Every state of the default model (3 servers, 2 clients, 1 crash) within `depth`
    /// steps, unreduced.
    fn states(depth: usize) -> Vec<ActorState> {
        states_of(ModelConfig::default(), depth)
    }

    /// Every state of `cfg`'s model within `depth` steps, unreduced.
    fn states_of(cfg: ModelConfig, depth: usize) -> Vec<ActorState> {
        let model = cfg.into_model();
        let actors = &model.actors;
        let mut seen = HashSet::new();
        let mut all = Vec::new();
        let mut queue: VecDeque<(ActorState, usize)> =
            actors.init_states().into_iter().map(|s| (s, 0)).collect();
        while let Some((s, d)) = queue.pop_front() {
            if !seen.insert(fingerprint(&s)) {
                continue;
            }
            if d < depth {
                let mut actions = Vec::new();
                actors.actions(&s, &mut actions);
                for a in actions {
                    if let Some(next) = actors.next_state(&s, a)
                        && Model::within_boundary(actors, &next)
                    {
                        queue.push_back((next, d + 1));
                    }
                }
            }
            all.push(s);
        }
        all
    }

    fn fingerprint(state: &ActorState) -> u64 {
        let mut h = hasher();
        state.hash(&mut h);
        h.finish()
    }

    const SERVER_ORDERS: [[usize; 5]; 6] = [
        [0, 1, 2, 3, 4],
        [0, 2, 1, 3, 4],
        [1, 0, 2, 3, 4],
        [1, 2, 0, 3, 4],
        [2, 0, 1, 3, 4],
        [2, 1, 0, 3, 4],
    ];

    #[test]
    fn a_state_with_its_servers_permuted_is_in_its_class_and_no_other_is() {
        // Issue 14: the class fingerprint is invariant under every renaming of the servers
        // (what the reduction saves), and two states share it only when one renaming maps
        // one onto the other (what makes it sound), over every state within 7 steps.
        let all = states(7);
        assert!(all.len() > 5_000, "{} states", all.len());
        assert_classes_are_renamings(&all);
    }

    #[test]
    fn a_pending_save_is_in_the_class_and_renamed_with_its_server() {
        // Issue 24, item 4: with split steps a server holds sends back (`unsaved`), which
        // name actors and leader hints. The class stays invariant under renaming and sound
        // over every state within 6 steps of the default model with `save_later`, and some
        // of those states have a save pending.
        let cfg = ModelConfig {
            save_later: true,
            ..ModelConfig::default()
        };
        let all = states_of(cfg, 6);
        let pending = all
            .iter()
            .filter(|s| {
                s.actor_states
                    .iter()
                    .any(|a| matches!(&**a, ModelState::Server(server) if server.unsaved.is_some()))
            })
            .count();
        assert!(pending > 100, "{pending} of {} states save", all.len());
        assert_classes_are_renamings(&all);
    }

    /// Every renaming of a state keeps its class; states that share a class are renamings
    /// of each other; and about a third of the states are merged.
    fn assert_classes_are_renamings(all: &[ActorState]) {
        let mut classes: HashMap<u64, Vec<&ActorState>> = HashMap::new();
        for s in all {
            let class = canonical_hash(s);
            for rank in &SERVER_ORDERS {
                let p = permute(s, rank);
                assert_eq!(
                    hash_permuted(s, rank),
                    hash_permuted(&p, &[0, 1, 2, 3, 4]),
                    "hashing in place differs from hashing the permuted state ({rank:?})"
                );
                assert_eq!(canonical_hash(&p), class, "{rank:?} of {s:#?}");
            }
            classes.entry(class).or_default().push(s);
        }
        let mut merged = 0;
        for members in classes.values() {
            let first = members[0];
            for other in &members[1..] {
                let fp = fingerprint(other);
                assert!(
                    SERVER_ORDERS
                        .iter()
                        .any(|rank| fingerprint(&permute(first, rank)) == fp),
                    "merged states that no renaming relates: {first:#?}\n{other:#?}"
                );
                merged += 1;
            }
        }
        // The reduction does something: about half the states are renamings of others.
        assert!(
            merged * 3 > all.len(),
            "{merged} of {} states merged",
            all.len()
        );
    }

    #[test]
    fn every_part_of_a_state_counts_in_its_class() {
        // A part left out of the class fingerprint would merge states that differ in it
        // (unsound). Change one part at a time: the class changes, unless the change made a
        // renaming of the state.
        let all = states(6);
        let mut checked = 0;
        for s in &all {
            let class = canonical_hash(s);
            let mut changed: Vec<(String, ActorState)> = Vec::new();
            for i in 0..s.actor_states.len() {
                let mut m = s.clone();
                m.crashed[i] = !m.crashed[i];
                changed.push((format!("crashed[{i}]"), m));
                let mut m = s.clone();
                m.actor_storages[i] = match &m.actor_storages[i] {
                    Some(_) => None,
                    None => Some(Arc::default()),
                };
                changed.push((format!("storage[{i}]"), m));
                let mut m = s.clone();
                m.timers_set[i] = Default::default();
                changed.push((format!("timers[{i}]"), m));
                if let ModelState::Server(server) = &*s.actor_states[i] {
                    let mut m = s.clone();
                    let unsaved = match &server.unsaved {
                        Some(_) => None,
                        None => Some(Arc::default()),
                    };
                    m.actor_states[i] = Arc::new(ModelState::Server(Box::new(ServerState {
                        unsaved,
                        ..(**server).clone()
                    })));
                    changed.push((format!("unsaved[{i}]"), m));
                }
                if let ModelState::Client(c) = &*s.actor_states[i] {
                    let mut m = s.clone();
                    m.actor_states[i] = Arc::new(ModelState::Client(ClientState {
                        seq: c.seq + 1,
                        ..c.clone()
                    }));
                    changed.push((format!("client[{i}]"), m));
                }
            }
            let mut m = s.clone();
            m.history = Arc::default();
            changed.push(("history".to_owned(), m));
            let mut m = s.clone();
            m.network = Network::new_unordered_nonduplicating([]);
            changed.push(("network".to_owned(), m));
            for (what, m) in changed {
                let fp = fingerprint(&m);
                if fp == fingerprint(s) {
                    continue; // Nothing changed.
                }
                let renaming = SERVER_ORDERS
                    .iter()
                    .any(|rank| fingerprint(&permute(s, rank)) == fp);
                assert!(
                    renaming || canonical_hash(&m) != class,
                    "changing {what} kept the class of {s:#?}"
                );
                checked += 1;
            }
        }
        assert!(checked > 10_000, "{checked} changes checked");
    }
}
