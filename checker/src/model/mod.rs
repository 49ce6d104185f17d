//! A stateright model of lockd that runs the real Raft core and lock table.
//!
//! The servers are [`LockdActor::Server`] actors, each wrapping a real
//! [`lockd::raft::Node`] (never a re-implementation: a bug fixed in the core is fixed here).
//! The clients are [`LockdActor::Client`] actors that acquire the key [`MODEL_KEY`] and
//! release it when granted; the last [`ModelConfig::give_up_clients`] of them may give up on
//! an acquire, which sends a cancel that the server turns into `Input::ClientGone`
//! (phantom-lock release). The network is stateright's unordered network (messages are
//! reordered freely), lossy when [`ModelConfig::lossy`] is on (off by default: a lost message
//! is the same as one delayed past the depth bound, unless a property reads the network, and
//! a drop action per message in flight multiplies the states), and up to
//! [`ModelConfig::max_crashes`] servers may be down at once; a restart is `Node::new` from
//! the saved [`lockd::raft::Durable`]. Every core timer is a stateright timer, so timeouts
//! happen in every order (see [`actor`] for the adapter). A server step is atomic (its sends
//! and its save in one stateright step), unless [`ModelConfig::save_later`] splits a step
//! with a persist at its save, so that a crash can fall between a send and the save it
//! should have waited for; the default walks do so on three servers
//! ([`ModelConfig::walk_configs`]).
//!
//! The properties (module [`properties`]) are named as sentences; the client-visible history
//! is checked with stateright's `LinearizabilityTester` against [`history::LockSpec`].
//!
//! ```
//! use checker::model::ModelConfig;
//! use stateright::{Checker, Model};
//!
//! let mut cfg = ModelConfig::default();
//! cfg.servers = 1;
//! cfg.clients = 1;
//! cfg.depth_max = 6; // every state within 6 steps
//! let checker = cfg.into_model().checker().target_max_depth(cfg.stateright_depth()).spawn_bfs().join();
//! checker.assert_no_discovery(checker::model::properties::LINEARIZABLE);
//! assert!(checker.unique_state_count() > 1);
//! ```
//!
//! # Reductions
//!
//! Symmetry of servers, relative time and canonical order shrink the state space while the
//! real code still runs; see [`reduce`] (and the figures in `checker/src/model/README.md`).
//! Each can be switched off ([`ModelConfig::symmetry`], [`ModelConfig::relative_time`],
//! [`ModelConfig::canonical_order`]) to measure what it saves.

pub mod actor;
pub mod explain;
pub mod history;
pub mod properties;
pub mod reduce;
pub mod replay;
pub mod simulate;

use std::fmt;
use std::sync::Arc;

use lockd::bugs::BugSet;
use lockd::raft::Config;
use stateright::actor::{ActorModel, ActorModelState, LossyNetwork, Network};

pub use actor::{LockdActor, ModelMsg, ModelState, ModelTimer};
pub use history::{History, LockOp, LockRet, LockSpec};
pub use reduce::LockdModel;

/// The RNG seed of every server.
pub const MODEL_SEED: u64 = 1;

/// The key every client acquires.
pub const MODEL_KEY: &str = "a";

/// stateright's actor model of lockd: actors, the configuration, the client-visible
/// history. [`LockdModel`] wraps it with the reductions.
pub type ActorLockdModel = ActorModel<LockdActor, ModelConfig, Arc<History>>;

/// stateright's actor-model state of lockd: servers, clients, network, history.
pub type ActorState = ActorModelState<LockdActor, Arc<History>>;

/// A state of the model: stateright's actor state (which it derefs to), fingerprinted as its
/// class under renaming of the servers when [`ModelConfig::symmetry`] is on (its `Hash`, in
/// [`reduce`]), so that the search keeps one state of each class.
#[derive(Clone, PartialEq, Eq)]
pub struct LockdState {
    state: ActorState,
    symmetric: bool,
}

impl LockdState {
    /// `state`, fingerprinted by class when `symmetric`.
    pub fn new(state: ActorState, symmetric: bool) -> Self {
        LockdState { state, symmetric }
    }

    /// Whether the state is fingerprinted by symmetry class.
    pub fn symmetric(&self) -> bool {
        self.symmetric
    }

    /// The actor state.
    pub fn into_inner(self) -> ActorState {
        self.state
    }
}

impl std::ops::Deref for LockdState {
    type Target = ActorState;
    fn deref(&self) -> &ActorState {
        &self.state
    }
}

impl fmt::Debug for LockdState {
    /// The actor state's (the Explorer shows it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.state.fmt(f)
    }
}

/// What to model, and the bounds of the search. Every bound has its unit last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelConfig {
    /// Raft servers (actors `0..servers`, node ids `1..=servers`).
    pub servers: usize,
    /// Client actors (after the servers).
    pub clients: usize,
    /// Acquire(-release) rounds per client.
    pub rounds_per_client: usize,
    /// How many of the clients (the last ones) may give up on an acquire.
    pub give_up_clients: usize,
    /// The lease each acquire asks for.
    pub lease_ms: u64,
    /// How long an acquire waits at the leader for a held key (0 = try-acquire).
    pub wait_ms: u64,
    /// `NotLeader` answers a client takes for one request before it stops.
    pub client_retries_max: u32,
    /// Servers down at the same time, at most.
    pub max_crashes: usize,
    /// Whether the network may drop messages.
    pub lossy: bool,
    /// States beyond this term are not explored.
    pub term_max: u64,
    /// States with a longer log (last log index) are not explored.
    pub log_max: u64,
    /// States with more messages in flight are not explored.
    pub messages_in_flight_max: usize,
    /// The search depth: every state within this many steps of the initial state is checked
    /// (pass [`ModelConfig::stateright_depth`] to stateright's `target_max_depth`).
    pub depth_max: usize,
    /// The core's snapshot threshold: small, so that InstallSnapshot is explored.
    pub snapshot_threshold_entries: u64,
    /// Whether the core runs pre-vote.
    pub pre_vote: bool,
    /// Whether the core runs check-quorum.
    pub check_quorum: bool,
    /// Injected bugs.
    pub bugs: BugSet,
    /// Symmetry reduction of servers (see [`reduce`]).
    pub symmetry: bool,
    /// Clocks rebased after every step, so that only deadlines relative to now count.
    pub relative_time: bool,
    /// Sets kept in a canonical order (the clients' grants).
    pub canonical_order: bool,
    /// Split steps: a server step whose output has a persist is carried out in two
    /// stateright steps, as the real server's core loop does it: the step sends `send_now` and
    /// the client answers at once and holds the rest back, and a [`ModelTimer::Save`] step later saves the durable
    /// state, sends what was held back and feeds `Input::Persisted` (see [`actor`], "Split
    /// steps"). A crash in between restarts the server from the save before: a message sent
    /// before the state it depends on was durable is then visible (the `vote-before-persist`
    /// mutant). Off: every step is atomic, send and save together. Off by default, and in the
    /// exhaustive search: a Save step per persist costs depth. On in the three-server walk
    /// configuration ([`ModelConfig::walk_configs`]). Restarts stay atomic.
    pub save_later: bool,
    /// The core's `append_entries_max` (`None`: the core's default, far above the model's
    /// logs). One entry per AppendEntries makes a lagging follower's match index stop on each
    /// entry, entries of older terms included, where a leader's commit rule matters (the
    /// `commit-old-term` mutant); on in the three-server walk configuration.
    pub append_entries_max: Option<usize>,
}

impl Default for ModelConfig {
    /// The default of `locksmith model check`: 3 servers, 2 clients, 1 key.
    fn default() -> Self {
        ModelConfig {
            servers: 3,
            clients: 2,
            rounds_per_client: 1,
            give_up_clients: 0,
            lease_ms: 1_000,
            wait_ms: 0,
            client_retries_max: 2,
            max_crashes: 1,
            lossy: false,
            term_max: 2,
            log_max: 6,
            messages_in_flight_max: 8,
            depth_max: 9,
            snapshot_threshold_entries: 2,
            pre_vote: true,
            check_quorum: true,
            bugs: BugSet::NONE,
            symmetry: true,
            relative_time: true,
            canonical_order: true,
            save_later: false,
            append_entries_max: None,
        }
    }
}

impl fmt::Display for ModelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} servers, {} clients ({} may give up), {} round(s) each, key {MODEL_KEY:?}, \
             max {} crashed, {} network; bounds: depth {} (steps), term {}, log {}, {} messages in \
             flight",
            self.servers,
            self.clients,
            self.give_up_clients.min(self.clients),
            self.rounds_per_client,
            self.max_crashes,
            if self.lossy { "lossy" } else { "lossless" },
            self.depth_max,
            self.term_max,
            self.log_max,
            self.messages_in_flight_max,
        )?;
        let reductions: Vec<&str> = [
            (self.symmetry, "symmetry"),
            (self.relative_time, "relative time"),
            (self.canonical_order, "canonical order"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        if !reductions.is_empty() {
            write!(f, "; reductions: {}", reductions.join(", "))?;
        }
        if self.save_later {
            write!(f, "; steps split at their save")?;
        }
        if let Some(max) = self.append_entries_max {
            write!(f, "; {max} entries per AppendEntries")?;
        }
        let bugs: Vec<&str> = self.bugs.iter().map(|b| b.name()).collect();
        if !bugs.is_empty() {
            write!(f, "; bugs: {}", bugs.join(", "))?;
        }
        Ok(())
    }
}

impl ModelConfig {
    /// The `target_max_depth` that makes stateright check every state within
    /// [`ModelConfig::depth_max`] steps: stateright counts the initial state as depth 1, and
    /// checks a state's properties only when it expands it, which it does only below its
    /// target (0.31, `bfs.rs` and `dfs.rs`). So the target is `depth_max + 2`; the states one
    /// step further are generated, and counted in stateright's state counts, but never
    /// checked ([`LockdModel::checked_states`] counts the checked ones). Passing `depth_max`
    /// itself, as this project did before, checked two steps less than it said.
    pub fn stateright_depth(&self) -> usize {
        self.depth_max + 2
    }

    /// The configuration random walks run: the same actors with looser bounds (walks do not
    /// enumerate, so the bounds need not keep the state space small), clients that try
    /// harder (more retries, two rounds), so that walks reach re-grants and leader changes.
    pub fn for_walks(mut self) -> Self {
        self.term_max = self.term_max.max(4);
        self.log_max = self.log_max.max(12);
        self.messages_in_flight_max = self.messages_in_flight_max.max(16);
        self.client_retries_max = self.client_retries_max.max(6);
        self.rounds_per_client = self.rounds_per_client.max(2);
        // Acquires wait at the leader for a held key, so that a freed key goes to a waiter:
        // re-grants (and stale releases and expiries that meet a newer grant) become common.
        self.wait_ms = self.wait_ms.max(self.lease_ms);
        // The last client may give up mid-acquire, so that phantom locks are in reach.
        self.give_up_clients = self.give_up_clients.max(1).min(self.clients);
        self
    }

    /// The configurations walks run by default ([`simulate::walk_models`] shares the walks
    /// among them): this one [`for_walks`](Self::for_walks) with split steps
    /// ([`save_later`](Self::save_later), so that a crash can fall between a send and its
    /// save), and, with two servers or more, a variant with two servers, no pre-vote, no
    /// check-quorum and no crash, where an election takes two deliveries instead of six.
    /// Leader changes between an entry's proposal and its commit are then common enough that
    /// walks reach a late Expire meeting a newer grant (`expire-ignores-token`), which three
    /// servers with pre-vote reach too rarely. The variant keeps its steps as asked: without
    /// a crash, a split step only delays what waited for the save.
    pub fn walk_configs(self) -> Vec<ModelConfig> {
        let mut main = self.for_walks();
        main.save_later = true;
        main.append_entries_max = Some(1);
        let mut fast = self;
        fast.servers = self.servers.min(2);
        fast.pre_vote = false;
        fast.check_quorum = false;
        fast.max_crashes = 0;
        let fast = fast.for_walks();
        if self.servers < 2 || fast == main {
            vec![main]
        } else {
            vec![main, fast]
        }
    }

    /// The core configuration of server `index`.
    pub fn node_config(&self, index: usize) -> Config {
        let members = (0..self.servers).map(actor::node_id).collect();
        let mut config = Config::new(actor::node_id(index), members);
        config.snapshot_threshold_entries = self.snapshot_threshold_entries;
        if let Some(max) = self.append_entries_max {
            config.append_entries_max = max;
        }
        // No trailing window: with logs this short, any window would spare every follower the
        // snapshot, and InstallSnapshot is what the small threshold is there to explore.
        config.snapshot_trailing_entries = 0;
        config.pre_vote = self.pre_vote;
        config.check_quorum = self.check_quorum;
        config.bugs = self.bugs;
        // One seed for every server: servers differ only in their id, so that they are
        // interchangeable (symmetry reduction) and a restart draws the same timeouts.
        config.seed = MODEL_SEED;
        config
    }

    /// Builds the stateright model.
    ///
    /// # Panics
    ///
    /// Panics if there is no server or no client (a programmer error: the CLI checks).
    pub fn into_model(self) -> LockdModel {
        assert!(self.servers >= 1, "the model needs a server");
        assert!(self.clients >= 1, "the model needs a client");
        let servers = (0..self.servers).map(|i| LockdActor::Server {
            config: Box::new(self.node_config(i)),
            relative_time: self.relative_time,
            save_later: self.save_later,
            sessions: (self.servers..self.servers + self.clients)
                .map(|c| c as u64)
                .collect(),
        });
        let first_giving_up = self.clients.saturating_sub(self.give_up_clients);
        let clients = (0..self.clients).map(move |c| LockdActor::Client {
            // With symmetry every client asks server n1 first, so that the other servers
            // start interchangeable; without, clients spread over the servers.
            first_target: if self.symmetry {
                0
            } else {
                (self.servers + c) % self.servers
            },
            servers: self.servers,
            rounds: self.rounds_per_client,
            gives_up: c >= first_giving_up,
            lease_ms: self.lease_ms,
            wait_ms: self.wait_ms,
            retries_max: self.client_retries_max,
        });
        // The history behind an `Arc`: stateright clones every state before each step, and
        // the history changes on few of them.
        let actors = ActorModel::new(self, Arc::new(History::default()))
            .actors(servers)
            .actors(clients)
            .init_network(Network::new_unordered_nonduplicating([]))
            .lossy_network(if self.lossy {
                LossyNetwork::Yes
            } else {
                LossyNetwork::No
            })
            .max_crashes(self.max_crashes)
            .record_msg_out(|cfg, h, e| history::record_invoke(cfg, h, e).map(Arc::new))
            .record_msg_in(|cfg, h, e| history::record_return(cfg, h, e).map(Arc::new))
            .within_boundary(within_boundary);
        LockdModel::new(actors, self)
    }
}

/// The search bounds: term, log length, messages in flight; and no crashed client.
///
/// stateright's `max_crashes` lets any actor crash. A crashed client would only repeat what
/// giving up models already (its operation stays in flight), without telling the server, so
/// states with a crashed client are left out.
fn within_boundary(cfg: &ModelConfig, state: &ActorState) -> bool {
    if state.network.len() > cfg.messages_in_flight_max {
        return false;
    }
    state
        .actor_states
        .iter()
        .zip(&state.crashed)
        .all(|(s, crashed)| match &**s {
            ModelState::Server(server) => {
                let status = server.node.status();
                status.term <= cfg.term_max && status.last_log_index <= cfg.log_max
            }
            ModelState::Client(_) => !crashed,
        })
}
