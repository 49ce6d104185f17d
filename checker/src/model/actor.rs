//! The actors: a server wraps the real [`lockd::raft::Node`] (and through it the real
//! [`lockd::lock::LockTable`]); a client acquires and releases, and may give up mid-acquire.
//!
//! # The server adapter
//!
//! Each stateright event becomes one [`Input`]: a Raft message becomes `Input::Message`, a
//! client request `Input::Request`, a client's cancel `Input::ClientGone`, and a fired timer
//! `Input::Tick` at that timer's deadline on the node's own clock (so the clock only moves
//! forward, and it moves exactly to a deadline). The output is carried out as the IO contract
//! on [`lockd::raft::Output`] says: `persist` is applied to the actor's copy of its
//! [`Durable`], `Input::Persisted` is fed right after in the same step (repeatedly, while the
//! node asks for more to persist), and the whole step ends in one `o.save(durable)` together
//! with every send and answer. stateright applies a step's commands atomically, so "sent
//! before it was durable" cannot happen in the model, except in the `no-fsync` mutant, which
//! skips the save (the saved storage then stays what it was when the actor started).
//!
//! # Split steps ([`ModelConfig::save_later`](super::ModelConfig::save_later))
//!
//! With `save_later` on, a step whose first output has a `persist` is carried out in two
//! actor steps, in the order the real server's core loop keeps (`send_now` and the answers,
//! the fsync, then `send_after_persist`, then `Input::Persisted`):
//!
//! 1. The step itself sends `send_now` and the answers to clients at once (no answer rests on
//!    the step's own persist: the IO contract on `lockd::raft::Output`) and applies the
//!    persist to the actor's [`Durable`] ([`ServerState::durable`]: what will be durable once
//!    the save is done), but saves only the ghost ledger: the saved durable state stays the
//!    one of the last save. `send_after_persist` waits in [`ServerState::unsaved`], and
//!    the stateright timer [`ModelTimer::Save`] is armed.
//! 2. That timer's step saves the durable state and the ledger, sends what waited, and only
//!    then feeds `Input::Persisted`, whose output (commits, applies, answers, more persists)
//!    it carries out atomically, as an unsplit step.
//!
//! While a save is pending the server takes no input: a delivery to it, or a core timer of
//! it, leaves the state borrowed (a timer re-arms itself, since stateright drops a timer step
//! only when it renews the same timer and changes nothing) and stateright drops the
//! transition; the message stays in flight and the timer armed. A stateright crash in between
//! restarts the server from the last save: what `send_now` sent is out, and the state it
//! depended on is lost. That is the window a mutant that sends too early needs
//! (`vote-before-persist`). `Input::Persisted` waits for the save, rather than being fed in
//! the first step, so that the node never commits or applies on the strength of a persist
//! that a crash can still undo (a lone leader would otherwise apply, and record in the
//! ledger, an entry its restart no longer has), and so that a recorded trace
//! ([`super::replay::record`]) never reports durable what the restart does not load.
//! Restarts stay atomic.
//!
//! Timers: each core [`Timer`] is one stateright timer. stateright fires any armed timer at
//! any moment, so every order of timeouts is explored (unbounded clock drift between nodes).
//! After every step the adapter re-synchronises the armed stateright timers with the node's
//! armed timers (a tick fires every due timer, and the core disarms a fired timer without a
//! command).
//!
//! No-op pruning: the node is cloned and stepped; when the node, its storage and the ghost
//! facts are unchanged and there is nothing to send, the `Cow` stays borrowed and stateright
//! drops the transition.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;

use lockd::bugs::{Bug, BugSet};
use lockd::lock::{Command, LockTable, Origin, Outcome, SessionId, Token};
use lockd::raft::invariants::{self, Ledger, StepBefore};
use lockd::raft::{
    ClientRequest, Committed, Config, Durable, Envelope, Index, Input, Message, Node, NodeId,
    Output, REBASED_NOW_MS, RequestId, Response, Role, Snapshot, Term, Timer, TimerCmd,
};
use stateright::actor::{Actor, Id, Out, model_timeout};

use super::MODEL_KEY;

/// A message on the model's network.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ModelMsg {
    /// Between servers (behind an `Arc`: stateright clones the network with every state, and
    /// an AppendEntries carries entries).
    Raft(Arc<Message>),
    /// A client's request to a server.
    Request {
        /// Client actor and sequence number, see [`request_id`].
        id: RequestId,
        /// The request (behind an `Arc`, as the answer: a smaller message makes a smaller
        /// network, which every state holds a copy of).
        request: Arc<ClientRequest>,
    },
    /// A client gave up on request `id` (it becomes `Input::ClientGone`).
    Cancel {
        /// The request given up on.
        id: RequestId,
    },
    /// A server's answer to a client.
    Response {
        /// The request answered.
        id: RequestId,
        /// The answer.
        response: Arc<Response>,
    },
}

/// A stateright timer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ModelTimer {
    /// A timer of the Raft core.
    Core(Timer),
    /// A client retries after `NotLeader` without a leader hint.
    ClientRetry,
    /// A client gives up on its acquire.
    ClientGiveUp,
    /// A client holding a lock is done with it and releases it.
    ClientRelease,
    /// A server's pending save completes (split steps,
    /// [`ModelConfig::save_later`](super::ModelConfig::save_later)): its storage catches up
    /// and it sends what waited for the save.
    Save,
}

/// The request id of a client's request: the client actor in the high half, its sequence
/// number in the low half.
pub fn request_id(client: Id, seq: u64) -> RequestId {
    RequestId(((usize::from(client) as u64) << 32) | seq)
}

/// The inverse of [`request_id`].
pub fn request_id_parts(id: RequestId) -> (Id, u64) {
    (Id::from((id.0 >> 32) as usize), id.0 & 0xFFFF_FFFF)
}

/// The Raft node id of server actor `index` (node ids start at 1).
pub fn node_id(index: usize) -> NodeId {
    index as NodeId + 1
}

/// The actor id of Raft node `id`.
pub fn actor_of(id: NodeId) -> Id {
    Id::from((id - 1) as usize)
}

/// Facts about what a server applied, which the lock table does not keep and the properties
/// need. They are volatile (lost on a crash), which is enough: every property is checked in
/// the state right after the step that set the fact.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghost {
    /// Some applied Expire removed a lock.
    pub expired: bool,
    /// Some applied Release without a client origin (the leader's phantom release) freed a
    /// lock.
    pub phantom_released: bool,
    /// The first applied Expire that removed a lock held under another token.
    pub expire_removed_other: Option<String>,
    /// The first applied Release that removed a lock held under another token.
    pub release_removed_other: Option<String>,
    /// The first lease timer armed for less than its lock's `lease_ms` on the node's clock.
    pub early_lease: Option<String>,
    /// The first Expire this node appended as leader for a lease whose timer had not fired
    /// on its clock (`Node::lease_ran_out`).
    pub undue_expire: Option<String>,
    /// The first step that broke a commit rule (`invariants::commit_rules`: a leader counted
    /// an entry of an older term, or a follower committed past what its leader said and
    /// sent).
    pub broken_commit: Option<String>,
    /// The first step that broke a receiver rule of Raft's Figure 2
    /// (`invariants::step_rules`: a vote or an acknowledgement the rules do not allow, a term
    /// gone back, a vote changed, a leader's log cut).
    pub broken_rule: Option<String>,
    /// Clients that left (`ClientGone`) while this node led `term` and before their lock was
    /// applied here: (term, client origin). Such a lock must get a Release. (The trace replay
    /// forgets a client that comes back with a retry of the same request, which a real
    /// client's live handler shows; a model client that gave up never retries, and a retry
    /// it sent before giving up that arrives after its cancel is a zombie it will not
    /// release.)
    pub gone: BTreeSet<(Term, Origin)>,
}

/// A server actor's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServerState {
    /// The real Raft node with its lock table.
    pub node: Node,
    /// What this server made durable so far (the save of every step). Behind an `Arc`, as
    /// the ledger: most steps change neither, and the saved storage shares them.
    pub durable: Arc<Durable>,
    /// Every entry this node applied, with its outcome (a ghost; see [`ServerStorage`]).
    pub ledger: Arc<Ledger>,
    /// The first disagreement of this node's own applies with its ledger (an entry applied
    /// again after a restart with another outcome).
    pub ledger_conflict: Option<String>,
    /// Facts about what was applied.
    pub ghost: Ghost,
    /// A pending save ([`ModelConfig::save_later`](super::ModelConfig::save_later)): `Some`
    /// from a step whose persist is not saved yet until its [`ModelTimer::Save`] fires, holding
    /// what that step sends only once the save is done (its `send_after_persist` and its
    /// answers to clients, each as destination actor and message, sorted). While
    /// it is `Some` the server takes no input; [`ServerState::durable`] is then ahead of the
    /// saved storage.
    pub unsaved: Option<Arc<Vec<(Id, ModelMsg)>>>,
}

impl ServerState {
    /// This state with `node` and `durable` in place of its own, nothing pending. Field by
    /// field: cloning `self` would clone the node and its storage only to replace them.
    fn moved_to(&self, node: Node, durable: Arc<Durable>) -> ServerState {
        ServerState {
            node,
            durable,
            ledger: self.ledger.clone(),
            ledger_conflict: self.ledger_conflict.clone(),
            ghost: self.ghost.clone(),
            unsaved: None,
        }
    }
}

/// What a server keeps across a crash: its [`Durable`] (what the real node has on disk) and,
/// as a ghost beside it, the [`Ledger`] of what it applied, so that properties can compare
/// what was applied before a crash with what is applied after it. The `no-fsync` mutant
/// saves the ledger but not the durable state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ServerStorage {
    /// The node's durable state.
    pub durable: Arc<Durable>,
    /// The ghost ledger.
    pub ledger: Arc<Ledger>,
}

/// Where a client is in its script.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Waiting for the answer to its acquire.
    Acquiring,
    /// Holds the lock under `token` until its release timer fires.
    Holding {
        /// The fencing token.
        token: Token,
    },
    /// Waiting for the answer to its release of `token`.
    Releasing {
        /// The token being released.
        token: Token,
    },
    /// Finished its rounds.
    Done,
    /// Gave up on an acquire (sent a cancel); stops.
    GaveUp,
    /// Was told `Unknown`; stops (the operation stays in flight).
    Stopped,
}

/// A client actor's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientState {
    /// The sequence number of the request in flight.
    pub seq: u64,
    /// The server the request went to.
    pub target: usize,
    /// Rounds (acquire, then release when granted) finished.
    pub rounds_done: usize,
    /// NotLeader answers so far for the request in flight.
    pub retries: u32,
    /// Where the client is.
    pub phase: Phase,
}

/// An actor's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ModelState {
    /// A server.
    Server(Box<ServerState>),
    /// A client.
    Client(ClientState),
}

/// The definition of one actor.
#[derive(Clone, Debug)]
pub enum LockdActor {
    /// A server running the real core with `config`.
    Server {
        /// The node's configuration.
        config: Box<Config>,
        /// Whether the node's clock is rebased after every step (see `reduce.rs`).
        relative_time: bool,
        /// Whether a step with a persist is split at its save (see the module doc).
        save_later: bool,
        /// The client sessions registered before the model starts: the id of each client
        /// actor. Registration through the log (`RegisterSession`) is checked by the core's
        /// tests and the simulator; the model explores what comes after it.
        sessions: Vec<SessionId>,
    },
    /// A client.
    Client {
        /// How many servers there are (actors `0..servers`).
        servers: usize,
        /// How many acquire(-release) rounds it runs.
        rounds: usize,
        /// Whether it may give up on an acquire (and send a cancel).
        gives_up: bool,
        /// The lease it asks for.
        lease_ms: u64,
        /// How long an acquire waits at the leader (0 = try-acquire).
        wait_ms: u64,
        /// How many `NotLeader` answers it takes before it stops.
        retries_max: u32,
        /// The server it asks first.
        first_target: usize,
    },
}

impl Actor for LockdActor {
    type Msg = ModelMsg;
    type Timer = ModelTimer;
    type State = ModelState;
    type Storage = Arc<ServerStorage>;
    type Random = ();

    fn name(&self) -> String {
        match self {
            LockdActor::Server { config, .. } => format!("n{}", config.id),
            LockdActor::Client { .. } => "client".to_owned(),
        }
    }

    fn on_start(
        &self,
        id: Id,
        storage: &Option<Arc<ServerStorage>>,
        o: &mut Out<Self>,
    ) -> ModelState {
        match self {
            LockdActor::Server {
                config,
                relative_time,
                sessions,
                ..
            } => {
                let ServerStorage { durable, ledger } = storage
                    .as_deref()
                    .cloned()
                    .unwrap_or_else(|| first_storage(config, sessions));
                // A first start from the sessions' snapshot is recorded as a start from it, so
                // that a replay's fresh core starts from the same table.
                if storage.is_some() || !sessions.is_empty() {
                    super::replay::with_recording(|w| {
                        let _ = w.restart(config.id, &durable, 0);
                    });
                }
                // A restarted process has a new monotonic clock; the core re-arms every lease
                // in full from it, which is conservative.
                let (mut node, first) = Node::new((**config).clone(), (*durable).clone(), 0);
                // The "before" of the first step: the restarted node itself, so that what it
                // re-applies from its log is not observed as new (the ledger still compares it
                // with what was applied before the crash).
                let before = node.clone();
                let mut durable = durable;
                let output = drive(&mut node, &mut durable, first);
                let mut server = ServerState {
                    node,
                    durable,
                    ledger,
                    ledger_conflict: None,
                    ghost: Ghost::default(),
                    unsaved: None,
                };
                let changed_ledger = !output.apply.is_empty();
                carry_out(
                    config.bugs,
                    &mut server,
                    &before,
                    Start::Restarted {
                        save: changed_ledger,
                    },
                    output,
                    None,
                    o,
                );
                if *relative_time {
                    server.node.rebase_clock(REBASED_NOW_MS);
                }
                ModelState::Server(Box::new(server))
            }
            LockdActor::Client { first_target, .. } => {
                let client = ClientState {
                    seq: 1,
                    target: *first_target,
                    rounds_done: 0,
                    retries: 0,
                    phase: Phase::Acquiring,
                };
                // Clients never crash: the model's boundary excludes such states (a client
                // that goes away is modelled by giving up, which tells the server).
                self.send_request(id, &client, o);
                ModelState::Client(client)
            }
        }
    }

    fn on_msg(
        &self,
        id: Id,
        state: &mut Cow<ModelState>,
        src: Id,
        msg: ModelMsg,
        o: &mut Out<Self>,
    ) {
        match (self, &**state) {
            (
                LockdActor::Server {
                    config,
                    relative_time,
                    save_later,
                    ..
                },
                ModelState::Server(server),
            ) => {
                if server.unsaved.is_some() {
                    return; // Saving: no input until the save is done (the message waits).
                }
                let driver = Driver {
                    bugs: config.bugs,
                    relative_time: *relative_time,
                    save_later: *save_later,
                };
                let input = match msg {
                    ModelMsg::Raft(msg) => Input::Message {
                        from: node_id(usize::from(src)),
                        msg: Arc::unwrap_or_clone(msg),
                    },
                    ModelMsg::Request { id, request } => Input::Request {
                        id,
                        request: Arc::unwrap_or_clone(request),
                    },
                    ModelMsg::Cancel { id } => Input::ClientGone { id },
                    ModelMsg::Response { .. } => return,
                };
                let gone = match &input {
                    Input::ClientGone { id } => Some(*id),
                    _ => None,
                };
                // A cancel is always consumed, even when the core ignores it, so that the
                // ghost can note that the client left.
                let next = step_server(driver, server, input, None, o)
                    .or_else(|| gone.map(|_| (**server).clone()));
                if let Some(mut next) = next {
                    if let Some(rid) = gone {
                        note_gone(&mut next, rid);
                    }
                    *state.to_mut() = ModelState::Server(Box::new(next));
                }
            }
            (LockdActor::Client { .. }, ModelState::Client(client)) => {
                if let ModelMsg::Response { id: rid, response } = msg
                    && let Some(next) =
                        self.on_response(id, client, rid, Arc::unwrap_or_clone(response), o)
                {
                    *state.to_mut() = ModelState::Client(next);
                }
            }
            _ => unreachable!("actor {id:?} holds the state of another kind"),
        }
    }

    fn on_timeout(
        &self,
        id: Id,
        state: &mut Cow<ModelState>,
        timer: &ModelTimer,
        o: &mut Out<Self>,
    ) {
        match (self, &**state, timer) {
            (
                LockdActor::Server {
                    config,
                    relative_time,
                    save_later,
                    ..
                },
                ModelState::Server(server),
                ModelTimer::Core(t),
            ) => {
                if server.unsaved.is_some() {
                    // Saving: the timer waits. Renewing it and nothing else is the one timer
                    // step stateright drops as a no-op (0.31, `is_no_op_with_timer`); an empty
                    // output would disarm it instead.
                    o.set_timer(timer.clone(), model_timeout());
                    return;
                }
                let Some(deadline) = server.node.deadline(t) else {
                    return; // Disarmed meanwhile; stateright drops the timer.
                };
                let input = Input::Tick {
                    now_ms: deadline.max(server.node.now_ms()),
                };
                let driver = Driver {
                    bugs: config.bugs,
                    relative_time: *relative_time,
                    save_later: *save_later,
                };
                if let Some(next) = step_server(driver, server, input, Some(t), o) {
                    *state.to_mut() = ModelState::Server(Box::new(next));
                }
            }
            (
                LockdActor::Server {
                    config,
                    relative_time,
                    ..
                },
                ModelState::Server(server),
                ModelTimer::Save,
            ) => {
                if let Some(next) = finish_save(config.bugs, *relative_time, server, o) {
                    *state.to_mut() = ModelState::Server(Box::new(next));
                }
            }
            (LockdActor::Client { .. }, ModelState::Client(client), ModelTimer::ClientRetry) => {
                if matches!(client.phase, Phase::Acquiring | Phase::Releasing { .. }) {
                    self.send_request(id, client, o);
                }
            }
            (LockdActor::Client { .. }, ModelState::Client(client), ModelTimer::ClientRelease) => {
                if let Phase::Holding { token } = client.phase {
                    let mut next = client.clone();
                    next.seq += 1;
                    next.phase = Phase::Releasing { token };
                    self.send_request(id, &next, o);
                    *state.to_mut() = ModelState::Client(next);
                }
            }
            (LockdActor::Client { .. }, ModelState::Client(client), ModelTimer::ClientGiveUp)
                if client.phase == Phase::Acquiring =>
            {
                let mut next = client.clone();
                next.phase = Phase::GaveUp;
                o.cancel_timer(ModelTimer::ClientRetry);
                o.send(
                    Id::from(client.target),
                    ModelMsg::Cancel {
                        id: request_id(id, client.seq),
                    },
                );
                *state.to_mut() = ModelState::Client(next);
            }
            _ => {}
        }
    }
}

impl LockdActor {
    /// Sends the request of the client's current phase to its target.
    fn send_request(&self, id: Id, client: &ClientState, o: &mut Out<Self>) {
        let LockdActor::Client {
            lease_ms,
            wait_ms,
            gives_up,
            ..
        } = self
        else {
            return;
        };
        let origin = Some(Origin {
            session: usize::from(id) as u64,
            request: client.seq,
        });
        let request = match client.phase {
            Phase::Acquiring => {
                if *gives_up {
                    o.set_timer(ModelTimer::ClientGiveUp, model_timeout());
                }
                ClientRequest::Acquire {
                    key: MODEL_KEY.to_owned(),
                    lease_ms: *lease_ms,
                    wait_ms: *wait_ms,
                    origin,
                }
            }
            Phase::Releasing { token } => ClientRequest::Release {
                key: MODEL_KEY.to_owned(),
                token,
                origin,
            },
            Phase::Holding { .. } => {
                o.set_timer(ModelTimer::ClientRelease, model_timeout());
                return;
            }
            Phase::Done | Phase::GaveUp | Phase::Stopped => return,
        };
        o.send(
            Id::from(client.target),
            ModelMsg::Request {
                id: request_id(id, client.seq),
                request: Arc::new(request),
            },
        );
    }

    /// A client's reaction to an answer; `None` when the answer is not for its open request.
    fn on_response(
        &self,
        id: Id,
        client: &ClientState,
        rid: RequestId,
        response: Response,
        o: &mut Out<Self>,
    ) -> Option<ClientState> {
        let LockdActor::Client {
            servers,
            rounds,
            retries_max,
            ..
        } = self
        else {
            return None;
        };
        let open = matches!(client.phase, Phase::Acquiring | Phase::Releasing { .. });
        if !open || rid != request_id(id, client.seq) {
            return None;
        }
        let mut next = client.clone();
        match response {
            Response::NotLeader { leader } => {
                next.retries += 1;
                if next.retries > *retries_max {
                    next.phase = Phase::Stopped;
                    o.cancel_timer(ModelTimer::ClientGiveUp);
                    return Some(next);
                }
                match leader {
                    Some(leader) if (leader as usize) <= *servers && leader >= 1 => {
                        next.target = usize::from(actor_of(leader));
                        self.send_request(id, &next, o);
                    }
                    _ => {
                        // Without a hint the client asks the same server again after its
                        // retry timer (by then the server may know a leader). Moving on to
                        // "the next server" would order the servers, and the model's symmetry
                        // reduction needs clients that treat servers alike.
                        o.set_timer(ModelTimer::ClientRetry, model_timeout());
                    }
                }
                return Some(next);
            }
            // The model's sessions never expire (see `first_storage`) and its clients do not
            // register: both end the client as an unknown answer does.
            Response::Unknown { .. }
            | Response::Invalid { .. }
            | Response::SessionExpired
            | Response::Registered { .. } => {
                next.phase = Phase::Stopped;
            }
            Response::Granted { token } if client.phase == Phase::Acquiring => {
                next.retries = 0;
                next.phase = Phase::Holding { token };
            }
            Response::Granted { .. }
            | Response::Busy
            | Response::Released
            | Response::NotHolder => {
                next.rounds_done += 1;
                next.seq += 1;
                next.retries = 0;
                next.phase = if next.rounds_done < *rounds {
                    Phase::Acquiring
                } else {
                    Phase::Done
                };
            }
        }
        o.cancel_timer(ModelTimer::ClientGiveUp);
        o.cancel_timer(ModelTimer::ClientRetry);
        self.send_request(id, &next, o);
        Some(next)
    }
}

/// How a server actor carries out its node's steps (from [`LockdActor::Server`]).
#[derive(Clone, Copy, Debug)]
struct Driver {
    /// Injected bugs (`no-fsync` changes what is saved).
    bugs: BugSet,
    /// Whether the clock is rebased after every step.
    relative_time: bool,
    /// Whether a step with a persist is split at its save (see the module doc).
    save_later: bool,
}

/// Steps a server's node with `input` and carries out the output; `None` when nothing
/// changed (a no-op delivery). `fired` is the stateright timer whose timeout this is. With
/// [`Driver::save_later`], an output with a persist is carried out up to its save
/// ([`start_save`]).
fn step_server(
    driver: Driver,
    server: &ServerState,
    input: Input,
    fired: Option<&Timer>,
    o: &mut Out<LockdActor>,
) -> Option<ServerState> {
    let mut node = server.node.clone();
    let mut durable = server.durable.clone();
    let mut first = node.step(input.clone());
    let id = node.status().id;
    super::replay::with_recording(|w| {
        let _ = w.step(id, &input, Some(&first));
    });
    let rule = invariants::step_rules(&StepBefore::of(&server.node), &node, &input, &first).err();
    let split = driver.save_later && first.persist.is_some();
    let output = if split {
        if let Some(persist) = first.persist.take() {
            Arc::make_mut(&mut durable).apply(&persist);
        }
        first
    } else {
        drive(&mut node, &mut durable, first)
    };
    if output.is_empty() && node == server.node && fired.is_none() && !split {
        return None;
    }
    let broken = invariants::commit_rules(&server.node.status(), &node, &input).err();
    let mut next = server.moved_to(node, durable);
    next.ghost.broken_commit = next.ghost.broken_commit.or(broken);
    next.ghost.broken_rule = next.ghost.broken_rule.take().or(rule);
    if split {
        start_save(driver.bugs, &mut next, server, output, fired, o);
    } else {
        carry_out(
            driver.bugs,
            &mut next,
            &server.node,
            Start::Stepped,
            output,
            fired,
            o,
        );
    }
    if driver.relative_time {
        next.node.rebase_clock(REBASED_NOW_MS);
    }
    Some(next)
}

/// The first half of a split step (see the module doc): `output` is the node's output
/// without its persist, which `next.durable` already holds. Observes and records what was
/// applied, saves the ledger beside the durable state `before` had saved, sends `send_now`
/// and the answers, holds back `send_after_persist` in `next.unsaved`, re-synchronises the
/// core timers and arms [`ModelTimer::Save`].
fn start_save(
    bugs: BugSet,
    next: &mut ServerState,
    before: &ServerState,
    output: Output,
    fired: Option<&Timer>,
    o: &mut Out<LockdActor>,
) {
    observe_step(next, &before.node, &output);
    if !output.apply.is_empty() {
        // The ledger is a ghost of what was applied, not part of the node's disk: it is kept
        // at once, and the durable state stays the one saved before this step (nothing is
        // pending before it: a pending save takes no input).
        save(bugs, &before.durable, &next.ledger, o);
    }
    send_raft(&output.send_now, o);
    // The answers go out at once, as the core sends them (the IO contract: no answer rests on
    // this step's persist); a crash before the save then finds them answered.
    for (target, msg) in output.respond.iter().map(answer) {
        o.send(target, msg);
    }
    let mut held: Vec<(Id, ModelMsg)> = output.send_after_persist.iter().map(raft_send).collect();
    // They go out together into an unordered network, so their order means nothing: sorted,
    // two states that differ only in it are one state.
    held.sort_unstable();
    next.unsaved = Some(Arc::new(held));
    sync_timers(&before.node, &next.node, Start::Stepped, fired, o);
    o.set_timer(ModelTimer::Save, model_timeout());
}

/// The second half of a split step, when [`ModelTimer::Save`] fires: saves the durable state
/// and the ledger, sends what waited, then feeds `Input::Persisted` and carries out its
/// output as an unsplit step. `None` when no save is pending.
fn finish_save(
    bugs: BugSet,
    relative_time: bool,
    server: &ServerState,
    o: &mut Out<LockdActor>,
) -> Option<ServerState> {
    let held = server.unsaved.as_ref()?;
    for (target, msg) in held.iter() {
        o.send(*target, msg.clone());
    }
    let mut node = server.node.clone();
    let mut durable = server.durable.clone();
    let (term, index) = last_durable(&durable);
    let input = Input::Persisted { term, index };
    let first = node.step(input.clone());
    let id = node.status().id;
    super::replay::with_recording(|w| {
        let _ = w.step(id, &input, Some(&first));
    });
    let output = drive(&mut node, &mut durable, first);
    let broken = invariants::commit_rules(&server.node.status(), &node, &input).err();
    let mut next = server.moved_to(node, durable);
    next.ghost.broken_commit = next.ghost.broken_commit.or(broken);
    carry_out(bugs, &mut next, &server.node, Start::Saved, output, None, o);
    if relative_time {
        next.node.rebase_clock(REBASED_NOW_MS);
    }
    Some(next)
}

/// Records that the client of `rid` left while this node leads and has the client's Grant in
/// its log, proposed in this term and not yet applied (so the node has the request pending).
/// A cancel that overtook its request, or came after the answer, is not recorded: the core
/// cannot release what it does not know of (the lease is the backstop there).
fn note_gone(server: &mut ServerState, rid: RequestId) {
    let (client, seq) = request_id_parts(rid);
    let origin = Origin {
        session: usize::from(client) as u64,
        request: seq,
    };
    if let Some(gone) = gone_while_pending(&server.node, origin) {
        server.ghost.gone.insert(gone);
    }
}

/// `(term, origin)` when `node` leads and has the Grant of `origin` in its log, proposed in
/// this term and not yet applied: the client of that Grant left while the leader can still
/// release what it will get (the `PHANTOM_RELEASED` property, [`Ghost::gone`]).
pub(super) fn gone_while_pending(node: &Node, origin: Origin) -> Option<(Term, Origin)> {
    let status = node.status();
    let pending = node.log().iter().any(|e| {
        e.proposal.origin == Some(origin)
            && e.index > status.last_applied
            && e.term == status.term
            && matches!(e.proposal.command, Command::Grant { .. })
    });
    (status.role == Role::Leader && pending).then_some((status.term, origin))
}

/// A server's storage at its first start: a snapshot at index 0 of the table with every
/// client's session registered at committed time 0 (the model's runs are far shorter than
/// the session timeout, so no session expires in the model).
fn first_storage(config: &Config, sessions: &[SessionId]) -> ServerStorage {
    let table = sessions.iter().fold(
        LockTable::with_bugs(config.bugs).with_session_limits(config.session_limits),
        |table, session| table.with_session(*session, 0),
    );
    let durable = Durable {
        snapshot: Some(Snapshot {
            last_index: 0,
            last_term: 0,
            table,
        }),
        ..Durable::default()
    };
    ServerStorage {
        durable: Arc::new(durable),
        ..ServerStorage::default()
    }
}

/// The combined output of one actor step: the node's output with every `persist` applied to
/// `durable` and answered with `Input::Persisted`. `persist` of the result is `Some` (empty)
/// when anything was made durable.
fn drive(node: &mut Node, durable: &mut Arc<Durable>, first: Output) -> Output {
    // Each round's Persisted can only commit and apply what is already in the log, and a
    // commit changes the hard state once more; two rounds settle it. The bound is generous.
    const PERSIST_ROUNDS_MAX: usize = 8;
    let mut all = Output::default();
    let mut saved = false;
    let mut out = first;
    for _ in 0..PERSIST_ROUNDS_MAX {
        let persist = out.persist.take();
        all.extend(out);
        let Some(persist) = persist else {
            if saved {
                all.persist = Some(Default::default());
            }
            return all;
        };
        Arc::make_mut(durable).apply(&persist);
        saved = true;
        let (term, index) = last_durable(durable);
        let input = Input::Persisted { term, index };
        out = node.step(input.clone());
        let id = node.status().id;
        super::replay::with_recording(|w| {
            let _ = w.step(id, &input, Some(&out));
        });
    }
    panic!("the node asked to persist more than {PERSIST_ROUNDS_MAX} times in one step");
}

/// The term and index of the last durable entry.
fn last_durable(durable: &Durable) -> (Term, Index) {
    (durable.last_term(), durable.last_index())
}

/// How the actor came to the state `carry_out` carries out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// It stepped: the stateright timers armed are the core timers of the node before the
    /// step (every step ends with them in sync).
    Stepped,
    /// Its pending save completed ([`finish_save`]): as `Stepped` (the fired
    /// [`ModelTimer::Save`] is disarmed by stateright), and the storage is saved whatever the
    /// output.
    Saved,
    /// It started or restarted: no stateright timer is armed (a crash drops them). `save`:
    /// save the storage even without a persist (the restart re-applied entries).
    Restarted { save: bool },
}

/// Saves, sends, answers and re-synchronises the timers for one step from `before` to
/// `server.node`.
fn carry_out(
    bugs: BugSet,
    server: &mut ServerState,
    before: &Node,
    start: Start,
    output: Output,
    fired: Option<&Timer>,
    o: &mut Out<LockdActor>,
) {
    observe_step(server, before, &output);
    let forced = matches!(start, Start::Restarted { save: true } | Start::Saved);
    if output.persist.is_some() || !output.apply.is_empty() || forced {
        save(bugs, &server.durable, &server.ledger, o);
    }
    send_raft(output.send_now.iter().chain(&output.send_after_persist), o);
    for (target, msg) in output.respond.iter().map(answer) {
        o.send(target, msg);
    }
    sync_timers(before, &server.node, start, fired, o);
}

/// Updates the ghost facts and the ledger from one step's output, from `before` to
/// `server.node`.
fn observe_step(server: &mut ServerState, before: &Node, output: &Output) {
    let node = &server.node;
    observe_applied(&mut server.ghost, before.table(), &output.apply);
    observe_leases(&mut server.ghost, node, &output.timers);
    if server.ghost.undue_expire.is_none() {
        let now = node.now_ms();
        let due_before = |key: &str, token| {
            let lease = Timer::Lease {
                key: key.to_owned(),
                token,
            };
            before.lease_ran_out(key, token) || before.deadline(&lease).is_some_and(|at| at <= now)
        };
        server.ghost.undue_expire = undue_expire(node, before.status().last_log_index, due_before);
    }
    let term = node.status().term;
    for committed in &output.apply {
        if let Err(e) = Arc::make_mut(&mut server.ledger).record(node.status().id, term, committed)
            && server.ledger_conflict.is_none()
        {
            server.ledger_conflict = Some(e);
        }
    }
}

/// Saves `durable` (nothing, for the `no-fsync` mutant) and `ledger`.
fn save(bugs: BugSet, durable: &Arc<Durable>, ledger: &Arc<Ledger>, o: &mut Out<LockdActor>) {
    let durable = if bugs.contains(Bug::NoFsync) {
        Arc::default() // The mutant never makes anything durable.
    } else {
        durable.clone()
    };
    // Behind an `Arc`: stateright clones every actor's storage with every state.
    o.save(Arc::new(ServerStorage {
        durable,
        ledger: ledger.clone(),
    }));
}

/// Sends Raft messages.
fn send_raft<'a>(envelopes: impl IntoIterator<Item = &'a Envelope>, o: &mut Out<LockdActor>) {
    for (target, msg) in envelopes.into_iter().map(raft_send) {
        o.send(target, msg);
    }
}

/// A Raft message as a stateright send: destination actor and message.
fn raft_send(envelope: &Envelope) -> (Id, ModelMsg) {
    (
        actor_of(envelope.target),
        ModelMsg::Raft(Arc::new(envelope.msg.clone())),
    )
}

/// An answer to a client as a stateright send: destination actor and message.
fn answer((id, response): &(RequestId, Response)) -> (Id, ModelMsg) {
    (
        request_id_parts(*id).0,
        ModelMsg::Response {
            id: *id,
            response: Arc::new(response.clone()),
        },
    )
}

/// Re-synchronises the stateright timers with the node's: the ones armed before are the
/// node's `before` the step (none after a start), the ones armed after are `node`'s.
fn sync_timers(
    before: &Node,
    node: &Node,
    start: Start,
    fired: Option<&Timer>,
    o: &mut Out<LockdActor>,
) {
    let was: BTreeSet<&Timer> = match start {
        Start::Stepped | Start::Saved => before.timers().map(|(t, _)| t).collect(),
        Start::Restarted { .. } => BTreeSet::new(),
    };
    let now: BTreeSet<&Timer> = node.timers().map(|(t, _)| t).collect();
    for timer in &now {
        if !was.contains(timer) || fired == Some(*timer) {
            o.set_timer(ModelTimer::Core((*timer).clone()), model_timeout());
        }
    }
    for timer in was.difference(&now) {
        if fired != Some(*timer) {
            o.cancel_timer(ModelTimer::Core((*timer).clone()));
        }
    }
}

/// Flags a lease timer armed for less than its lock's lease on the node's clock (the
/// `early-expire` mutant). Untimed stateright timers fire at any moment, so this is the part
/// of lease safety the model can check: the deadline the core asks for.
/// An Expire `node` appended as leader after index `last_before` for a lease whose timer
/// did not fire on its own clock, described (the model and the trace replay both check it).
/// The lease stays marked run out (`Node::lease_ran_out`) until its Expire, or a Release,
/// applies, which can happen in the step that appended the Expire (a lone server; a Noop and
/// a Release that commit together): `due_before(key, token)` says whether the lease had run
/// out before the step, or its timer was due at the step's time.
pub(super) fn undue_expire(
    node: &Node,
    last_before: u64,
    due_before: impl Fn(&str, Token) -> bool,
) -> Option<String> {
    let status = node.status();
    if status.role != lockd::raft::Role::Leader || status.last_log_index <= last_before {
        return None;
    }
    (node.log().iter().filter(|e| e.index > last_before)).find_map(|entry| {
        let (None, Command::Expire { key, token }) =
            (&entry.proposal.origin, &entry.proposal.command)
        else {
            return None;
        };
        let due = node.lease_ran_out(key, *token) || due_before(key, *token);
        (!due).then(|| {
            format!(
                "leader {} proposed Expire{{{key}, token {token}}} at index {} for a lease \
                 whose timer did not fire on its clock",
                status.id, entry.index
            )
        })
    })
}

pub(super) fn observe_leases(ghost: &mut Ghost, node: &Node, timers: &[TimerCmd]) {
    for cmd in timers {
        let TimerCmd::Set {
            timer: Timer::Lease { key, token },
            at_ms,
        } = cmd
        else {
            continue;
        };
        let Some(held) = node.table().holder(key).filter(|h| h.token == *token) else {
            continue;
        };
        let now_ms = node.now_ms();
        if *at_ms < now_ms + held.lease_ms && ghost.early_lease.is_none() {
            ghost.early_lease = Some(format!(
                "node {} armed the lease of {key:?} token {token} for {} ms at {now_ms} ms, \
                 less than its lease_ms {}",
                node.status().id,
                at_ms.saturating_sub(now_ms),
                held.lease_ms
            ));
        }
    }
}

/// Updates the ghost facts from the entries applied in one step, by replaying them on a copy
/// of the node's table before the step (the real lock code, so the replay is exact). A step
/// that installed a snapshot does not continue the old table; its entries are skipped.
pub(super) fn observe_applied(ghost: &mut Ghost, before: &LockTable, applied: &[Committed]) {
    if applied.is_empty() {
        return;
    }
    observe_applied_in(ghost, &mut before.clone(), applied);
}

/// [`observe_applied`] on a table of the caller's, which it leaves at the last entry it
/// applied (the trace replay keeps one per node instead of a copy per step).
pub(super) fn observe_applied_in(ghost: &mut Ghost, table: &mut LockTable, applied: &[Committed]) {
    for committed in applied {
        if committed.index <= table.last_applied() {
            continue; // Re-applied after a restart: already observed.
        }
        if committed.index != table.last_applied() + 1 && table.last_applied() != 0 {
            return; // A snapshot came in between.
        }
        let key = committed.proposal.command.key().map(str::to_owned);
        let holder_before = key.as_deref().and_then(|k| table.holder(k)).cloned();
        let held_before = holder_before.as_ref().map(|h| h.token);
        let outcome = table.apply_proposal(committed.index, &committed.proposal);
        let held_after = key
            .as_deref()
            .and_then(|k| table.holder(k))
            .map(|h| h.token);
        let removed = held_before.is_some() && held_after.is_none();
        match (&committed.proposal.command, &outcome) {
            (Command::Expire { token, .. }, Outcome::Expired { .. }) if removed => {
                ghost.expired = true;
                if held_before != Some(*token) && ghost.expire_removed_other.is_none() {
                    ghost.expire_removed_other = Some(format!(
                        "Expire{{token {token}}} at index {} removed the lock of token {}",
                        committed.index,
                        held_before.unwrap_or_default()
                    ));
                }
            }
            (Command::Release { token, .. }, Outcome::Released) if removed => {
                if committed.proposal.origin.is_none() {
                    ghost.phantom_released = true;
                }
                if held_before != Some(*token) && ghost.release_removed_other.is_none() {
                    ghost.release_removed_other = Some(format!(
                        "Release{{token {token}}} at index {} removed the lock of token {}",
                        committed.index,
                        held_before.unwrap_or_default()
                    ));
                }
            }
            (Command::Abandon { request, .. }, Outcome::Released) if removed => {
                // Only the abandoned request's own grant (same session, that request).
                let abandoned = committed.proposal.origin.map(|o| Origin {
                    session: o.session,
                    request: *request,
                });
                let holder = holder_before.as_ref().and_then(|h| h.origin);
                if (abandoned.is_none() || holder != abandoned)
                    && ghost.release_removed_other.is_none()
                {
                    ghost.release_removed_other = Some(format!(
                        "Abandon of request {request} by {:?} at index {} removed the lock of \
                         token {} held by {holder:?}",
                        committed.proposal.origin,
                        committed.index,
                        held_before.unwrap_or_default()
                    ));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use lockd::raft::Role;
    use stateright::Model;
    use stateright::actor::ActorModelAction;

    use super::*;
    use crate::model::explain::LockdAction;
    use crate::model::properties::{ELECTION_SAFETY, violations};
    use crate::model::simulate::replay;
    use crate::model::{LockdModel, LockdState, ModelConfig};

    /// Three servers with split steps, no pre-vote (an election is a timeout and the votes),
    /// one crash, and `bugs`.
    fn split_steps(bugs: BugSet) -> LockdModel {
        let cfg = ModelConfig {
            save_later: true,
            pre_vote: false,
            bugs,
            ..ModelConfig::default()
        };
        cfg.into_model()
    }

    fn server(state: &LockdState, actor: usize) -> &ServerState {
        match &*state.actor_states[actor] {
            ModelState::Server(server) => server,
            ModelState::Client(_) => panic!("actor {actor} is a client"),
        }
    }

    fn timeout(actor: usize, timer: ModelTimer) -> LockdAction {
        ActorModelAction::Timeout(Id::from(actor), timer)
    }

    fn deliver(source: usize, target: usize, msg: Message) -> LockdAction {
        ActorModelAction::Deliver {
            src: Id::from(source),
            dst: Id::from(target),
            msg: ModelMsg::Raft(Arc::new(msg)),
        }
    }

    fn request_vote() -> Message {
        Message::RequestVote {
            term: 1,
            last_log_index: 0,
            last_log_term: 0,
        }
    }

    fn vote() -> Message {
        Message::RequestVoteResponse {
            term: 1,
            granted: true,
        }
    }

    /// n3 votes for n1 in term 1 and crashes before the vote is saved; restarted, it votes
    /// for n2 in term 1; both votes arrive.
    fn double_vote() -> Vec<LockdAction> {
        let (n1, n2, n3) = (0, 1, 2);
        vec![
            timeout(n1, ModelTimer::Core(Timer::Election)),
            timeout(n1, ModelTimer::Save),
            deliver(n1, n3, request_vote()),
            ActorModelAction::Crash(Id::from(n3)),
            ActorModelAction::Recover(Id::from(n3)),
            timeout(n2, ModelTimer::Core(Timer::Election)),
            timeout(n2, ModelTimer::Save),
            deliver(n2, n3, request_vote()),
            timeout(n3, ModelTimer::Save),
            deliver(n3, n2, vote()),
            deliver(n3, n1, vote()),
        ]
    }

    #[test]
    fn a_vote_sent_before_its_save_and_lost_in_a_crash_elects_two_leaders_of_one_term() {
        // Raft paper Figure 2 (votedFor on stable storage before responding) and issue 24,
        // item 4: with split steps a crash falls between a step's sends and its save. The
        // `vote-before-persist` mutant's vote goes out before the save, so the crash loses a
        // vote that was sent: Election Safety breaks. The correct core holds its vote back
        // until the save, so the same actions, replayed leniently (a step no longer enabled is
        // skipped), elect one leader.
        let mutant = split_steps(BugSet::of(&[Bug::VoteBeforePersist]));
        let clean = split_steps(BugSet::NONE);

        let (mutant_run, mutant_violated) = replay(&mutant, &double_vote(), Some(ELECTION_SAFETY));
        let (clean_run, clean_violated) = replay(&clean, &double_vote(), Some(ELECTION_SAFETY));

        assert!(mutant_violated, "{} steps replayed", mutant_run.len() - 1);
        assert_eq!(
            mutant_run.len() - 1,
            double_vote().len(),
            "every step taken"
        );
        let (last, _) = mutant_run.last().expect("a run");
        let why = violations(last);
        assert!(
            why.iter()
                .any(|(p, w)| *p == ELECTION_SAFETY && w.contains("both lead term 1")),
            "{why:?}"
        );
        assert!(!clean_violated, "the correct core elected two leaders");
        let (last, _) = clean_run.last().expect("a run");
        let leaders = (0..3)
            .filter(|i| server(last, *i).node.status().role == Role::Leader)
            .count();
        assert_eq!(leaders, 1, "n2 leads term 1, with the vote n3 saved");
        // The crash fell in the window: n3 had voted for n1 and not saved it, and its
        // restart does not know the vote (the correct core never sent it).
        let voted = &clean_run[3].0; // Before the crash.
        assert!(server(voted, 2).unsaved.is_some(), "n3 is saving its vote");
        assert_eq!(server(voted, 2).durable.hard_state.voted_for, Some(1));
        let restarted = &clean_run[5].0; // After the restart.
        assert_eq!(server(restarted, 2).durable.hard_state.voted_for, None);
    }

    #[test]
    fn a_split_run_records_a_trace_the_replay_allows_and_the_mutant_run_departs() {
        // Trace validation (`replay.rs`) of split steps: `Input::Persisted` is recorded at the
        // save, so the correct run, whose crash falls between n3's vote and its save, replays
        // as allowed (the restart loads all that was reported durable); the mutant's run
        // departs where n3's second vote of term 1 arrives.
        let mutant = split_steps(BugSet::of(&[Bug::VoteBeforePersist]));
        let clean = split_steps(BugSet::NONE);
        let (mutant_run, _) = replay(&mutant, &double_vote(), None);
        let (clean_run, _) = replay(&clean, &double_vote(), None);

        let allowed =
            crate::model::replay::replay(&crate::model::replay::record(&clean, &clean_run));
        let departed =
            crate::model::replay::replay(&crate::model::replay::record(&mutant, &mutant_run));

        assert_eq!(allowed.departure, None);
        assert!(allowed.steps > 0);
        let departure = departed.departure.expect("the mutant's run departs");
        assert!(
            departure
                .reason
                .contains("node 3's vote of term 1 reached both"),
            "{departure:?}"
        );
    }

    #[test]
    fn a_server_with_a_pending_save_takes_no_input_until_the_save() {
        // The module doc, "Split steps": while a save is pending, a delivery to the server and
        // its core timers are no-op transitions, which stateright drops (the message stays in
        // flight, the timer armed); the Save step then sends what waited.
        let model = split_steps(BugSet::NONE);
        let init = model.init_states().remove(0);
        let n1 = Id::from(0);
        let saving = model
            .next_state(&init, timeout(0, ModelTimer::Core(Timer::Election)))
            .expect("n1 campaigns");
        let held = server(&saving, 0).unsaved.clone().expect("a pending save");
        assert_eq!(
            held.len(),
            2,
            "the RequestVotes wait for the candidate's vote"
        );
        assert!(saving.timers_set[0].iter().any(|t| *t == ModelTimer::Save));
        let mut actions = Vec::new();
        model.actions(&saving, &mut actions);
        let to_n1 = |a: &&LockdAction| {
            matches!(a, ActorModelAction::Deliver { dst, msg, .. }
                if *dst == n1 && matches!(msg, ModelMsg::Request { .. }))
        };
        let request = (actions.iter().find(to_n1))
            .expect("a client's request to n1 in flight")
            .clone();
        let election = timeout(0, ModelTimer::Core(Timer::Election));
        assert!(actions.contains(&election), "n1's election timer is armed");

        assert!(model.next_state(&saving, request.clone()).is_none());
        assert!(model.next_state(&saving, election).is_none());
        let saved = model
            .next_state(&saving, timeout(0, ModelTimer::Save))
            .expect("the save completes");

        assert!(server(&saved, 0).unsaved.is_none());
        let votes_asked = saved
            .network
            .iter_all()
            .filter(|e| e.src == n1 && matches!(&e.msg, ModelMsg::Raft(m) if **m == request_vote()))
            .count();
        assert_eq!(votes_asked, 2);
        assert!(
            model.next_state(&saved, request).is_some(),
            "the request is taken after the save"
        );
    }
}
