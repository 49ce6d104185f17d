//! The tokio driver of a lockd node: it owns a [`Node`], feeds it peer messages, client
//! requests, departures of clients and clock ticks, and carries out every [`Output`] in the
//! order of the IO contract (see [`Output`]).
//!
//! # Shape
//!
//! - **The core thread** owns the `Node` and the data dir. It runs on its own OS thread (a
//!   current-thread runtime), so the fsync of a persist blocks nothing but the core, never
//!   the network tasks. Inputs arrive on one bounded mpsc (`Event`). Each turn it takes
//!   the first ready event (or wakes at the core's `next_deadline`), ticks the clock, drains
//!   up to [`BATCH_EVENTS_MAX`] more ready events, steps each, and then carries out the
//!   merged output once (group commit): `send_now`, one `persist` (write + fsync),
//!   `send_after_persist`, `apply` (logged), `respond`, then `Input::Persisted` with the last
//!   durable entry. A storage error is fatal: the node stops without answering anything that
//!   was not durable.
//! - **Peer links.** One sender task per peer owns a tarpc `Peer` client to that peer's
//!   `--dial` address (a fault proxy in the harness), fed by a bounded queue that drops when
//!   full (a lossy network, which Raft tolerates). It connects lazily, reconnects with
//!   backoff after a broken connection, and gives every call a short deadline, since a
//!   SIGSTOP'd peer keeps its sockets open and would hang a call forever. Calls on one link
//!   go one at a time; what queued meanwhile goes out as the next batch, so the link keeps
//!   TCP order and batches under load. An AppendEntries that a later one in the same output
//!   or batch supersedes is dropped (see `coalesce_appends`): the core resends every
//!   unacknowledged entry in each step, and under load that overlap was the bottleneck.
//!   Incoming peer connections are served in order.
//! - **Client connections.** Each accepted connection is wrapped in [`EofNotify`], which
//!   flips a watch flag when the read half ends. tarpc keeps a handler running when its
//!   client dies abruptly (research/design.md §2.4), so each handler selects on that flag,
//!   and holds a `GoneGuard` whose drop (connection closed, request cancelled, server-side
//!   deadline) feeds `Input::ClientGone`: the core then releases a lock granted to nobody.
//!   When the core had already answered with a grant that never reached the handler's
//!   client (the answer sat in the handler's channel, or the handler was gone when it was
//!   sent), the core no longer knows the request, so the driver proposes the release of
//!   that token itself. What remains is the window after the handler returned and before
//!   the reply reached a client that then died: the lease is the backstop there.
//!
//! # The clock
//!
//! The core's clock is `offset + elapsed × rate` in milliseconds, from tokio's monotonic
//! clock. `--clock-rate` and the `set_clock` RPC (the harness's skew and strobe nemesis)
//! change `rate` and jump `offset`; a backward jump holds the clock still until real time
//! catches up, since the core requires `Tick` never to go backwards.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::prelude::*;
use tarpc::server::{BaseChannel, Channel};
use tarpc::tokio_serde::formats::Json;
use tarpc::tokio_util::codec::{Framed, LengthDelimitedCodec};
use tarpc::{context, serde_transport};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use crate::bugs::Bug;
use crate::lock::{Command, Key, Origin, Proposal, Token};
use crate::raft::{
    ClientRequest, Config, Durable, Envelope, Input, Message, Node, NodeId, Output, RequestId,
    Response, Role, Term,
};
use crate::rpc::{
    CLOCK_RATE_MAX, CLOCK_RATE_MIN, ClockReading, FRAME_LEN_MAX, LockService, NodeStatus, Peer,
    PeerClient,
};
use crate::storage::{DataDir, StorageError, SyncMode};

/// At most this many events are stepped before one group commit.
pub const BATCH_EVENTS_MAX: usize = 512;
/// Capacity of the core's input queue (peer batches, client requests, departures).
pub const EVENT_QUEUE_LEN: usize = 4096;
/// Capacity of each peer link's outgoing queue; a message is dropped when it is full.
pub const PEER_QUEUE_LEN: usize = 1024;
/// At most this many messages per `deliver` call.
pub const PEER_BATCH_MESSAGES_MAX: usize = 256;
/// The deadline of one `deliver` call.
pub const PEER_RPC_DEADLINE_MS: u64 = 500;
/// The deadline of one connection attempt to a peer.
pub const PEER_CONNECT_TIMEOUT_MS: u64 = 300;
/// Reconnect backoff after a failed connection attempt: starts here ...
pub const PEER_BACKOFF_MIN_MS: u64 = 20;
/// ... and doubles up to here.
pub const PEER_BACKOFF_MAX_MS: u64 = 500;
/// A link whose calls missed this many deadlines in a row is reconnected.
pub const PEER_DEADLINE_STRIKES_MAX: u32 = 3;
/// At most this many client connections are served at once; more are closed at accept.
pub const CLIENT_CONNECTIONS_MAX: usize = 1024;
/// At most this many peer connections are served at once.
pub const PEER_CONNECTIONS_MAX: usize = 64;
/// At most this many requests in flight on one client connection.
pub const CLIENT_REQUESTS_PER_CONNECTION_MAX: usize = 256;
/// Peer messages with a term above this are dropped: no cluster gets near it (a term per
/// nanosecond would take 290 years), and the core computes `term + 1`, which must not
/// overflow on a hostile or corrupted message.
pub const PEER_TERM_MAX: u64 = u64::MAX / 2;
/// Steps of `Input::Persisted` chained after one output (each may persist again).
const PERSIST_CHAIN_MAX: usize = 8;

/// Everything one node needs to run.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The core's configuration (id, members, timing, seed, bugs).
    pub raft: Config,
    /// Where each member listens for peers; this node listens on its own entry.
    pub peers: BTreeMap<NodeId, SocketAddr>,
    /// Where this node dials each peer (a fault proxy in the harness); defaults to `peers`.
    pub dial: BTreeMap<NodeId, SocketAddr>,
    /// Where this node listens for clients.
    pub client_listen: SocketAddr,
    /// The data directory (term, vote, log).
    pub data_dir: PathBuf,
    /// The initial rate of this node's clock relative to real time.
    pub clock_rate: f64,
}

impl ServerConfig {
    /// A configuration for `raft.id` of `peers`, dialing the peers directly, clock rate 1.
    pub fn new(
        raft: Config,
        peers: BTreeMap<NodeId, SocketAddr>,
        client_listen: SocketAddr,
        data_dir: PathBuf,
    ) -> Self {
        ServerConfig {
            raft,
            dial: peers.clone(),
            peers,
            client_listen,
            data_dir,
            clock_rate: 1.0,
        }
    }

    /// Checks what the core would only assert: the node is a member, every member has an
    /// address, and the clock rate is in range.
    pub fn validate(&self) -> Result<(), ServerError> {
        let id = self.raft.id;
        let invalid = |reason: String| Err(ServerError::Config { reason });
        if !self.raft.members.contains(&id) {
            return invalid(format!(
                "node {id} is not among the members {:?}",
                self.raft.members
            ));
        }
        for member in &self.raft.members {
            if !self.peers.contains_key(member) {
                return invalid(format!("no peer address for member {member}"));
            }
        }
        if let Some(extra) = self.dial.keys().find(|n| !self.raft.members.contains(n)) {
            return invalid(format!("a dial address for {extra}, which is not a member"));
        }
        if !clock_rate_in_range(self.clock_rate) {
            return invalid(format!(
                "clock rate {} is not within {CLOCK_RATE_MIN}..={CLOCK_RATE_MAX}",
                self.clock_rate
            ));
        }
        let (min, max) = (
            self.raft.election_timeout_min_ms,
            self.raft.election_timeout_max_ms,
        );
        if min == 0 || min >= max {
            return invalid(format!(
                "election timeout {min}-{max} ms: need 0 < low < high"
            ));
        }
        if self.raft.heartbeat_ms == 0 || self.raft.heartbeat_ms >= min {
            return invalid(format!(
                "heartbeat {} ms: need 0 < heartbeat < election timeout low {min}",
                self.raft.heartbeat_ms
            ));
        }
        Ok(())
    }
}

fn clock_rate_in_range(rate: f64) -> bool {
    rate.is_finite() && (CLOCK_RATE_MIN..=CLOCK_RATE_MAX).contains(&rate)
}

/// Why a node could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A flag or configuration value is wrong.
    #[error("bad configuration: {reason}")]
    Config {
        /// What is wrong.
        reason: String,
    },
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// The data dir could not be opened or written: fatal, nothing undurable is acked.
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    /// The core thread could not be started or ended abnormally.
    #[error("the core thread: {reason}")]
    Core {
        /// What happened.
        reason: String,
    },
}

/// An input to the core thread.
#[derive(Debug)]
enum Event {
    /// Messages from a peer, in the order they were sent.
    Peer { from: NodeId, msgs: Vec<Message> },
    /// A client request; the answer goes to `reply`.
    Request {
        id: RequestId,
        request: ClientRequest,
        reply: oneshot::Sender<Response>,
    },
    /// The client of request `id` left before the core answered it.
    Gone { id: RequestId },
    /// The core granted `key` under `token`, but the client left before the grant reached
    /// it (the answer was still in the handler's channel).
    Orphaned { key: Key, token: Token },
    /// A status query.
    Status { reply: oneshot::Sender<NodeStatus> },
    /// The clock nemesis.
    SetClock {
        rate: f64,
        jump_ms: i64,
        reply: oneshot::Sender<ClockReading>,
    },
}

/// Runs a node until a fatal error: binds both listeners, opens the data dir, starts the
/// peer links and the core thread.
pub async fn run(config: ServerConfig) -> Result<(), ServerError> {
    config.validate()?;
    let id = config.raft.id;
    let peer_addr = config.peers[&id];
    let peer_listener = bind(peer_addr).await?;
    let client_listener = bind(config.client_listen).await?;
    let sync = if config.raft.bugs.contains(Bug::NoFsync) {
        SyncMode::UserBuffer
    } else {
        SyncMode::Fsync
    };
    let (data_dir, durable) = DataDir::open(&config.data_dir, sync)?;
    if !data_dir.recovered().is_clean() {
        warn!(recovered = ?data_dir.recovered(), "the data dir was repaired on open");
    }
    info!(
        node = id,
        peer_listen = %peer_addr,
        client_listen = %config.client_listen,
        last_index = durable.last_index(),
        term = durable.hard_state.term,
        "started"
    );

    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE_LEN);
    let links = start_peer_links(&config);
    tokio::spawn(serve_peers(
        peer_listener,
        id,
        config.raft.members.clone(),
        events_tx.clone(),
    ));
    tokio::spawn(serve_clients(client_listener, events_tx));

    let (done_tx, done_rx) = oneshot::channel();
    let core = Core::new(
        config.raft.clone(),
        durable,
        data_dir,
        links,
        config.clock_rate,
    );
    std::thread::Builder::new()
        .name(format!("lockd-core-{id}"))
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .map_err(|e| ServerError::Core {
                    reason: format!("cannot build its runtime: {e}"),
                })
                .and_then(|runtime| runtime.block_on(core.run(events_rx)));
            let _ = done_tx.send(result);
        })
        .map_err(|e| ServerError::Core {
            reason: format!("cannot spawn: {e}"),
        })?;
    done_rx.await.unwrap_or_else(|_| {
        Err(ServerError::Core {
            reason: "it ended without a result (panicked)".to_owned(),
        })
    })
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// A tarpc transport over `stream`: JSON in length-delimited frames, Nagle off (every
/// message here is small and latency-bound).
pub(crate) fn transport<Item, SinkItem>(
    stream: TcpStream,
) -> serde_transport::Transport<TcpStream, Item, SinkItem, Json<Item, SinkItem>>
where
    Item: for<'de> serde::Deserialize<'de>,
    SinkItem: serde::Serialize,
{
    let _ = stream.set_nodelay(true);
    let codec = LengthDelimitedCodec::builder()
        .max_frame_length(FRAME_LEN_MAX)
        .new_codec();
    serde_transport::new(Framed::new(stream, codec), Json::default())
}

// ---------------------------------------------------------------------------------------
// The core thread.

/// This node's clock: `offset_ms + elapsed × rate`, never decreasing as read.
#[derive(Debug)]
struct Clock {
    anchor: Instant,
    anchor_ms: f64,
    rate: f64,
    last_ms: u64,
}

impl Clock {
    fn new(rate: f64) -> Self {
        Clock {
            anchor: Instant::now(),
            anchor_ms: 0.0,
            rate,
            last_ms: 0,
        }
    }

    fn now_ms(&mut self) -> u64 {
        let elapsed_ms = self.anchor.elapsed().as_secs_f64() * 1000.0;
        // Truncation is the point: the core's clock has millisecond resolution.
        let reading = (self.anchor_ms + elapsed_ms * self.rate).max(0.0) as u64;
        self.last_ms = self.last_ms.max(reading);
        self.last_ms
    }

    /// The real instant at which the clock will read `at_ms`.
    fn instant_of(&mut self, at_ms: u64) -> Instant {
        let now_ms = self.now_ms();
        if at_ms <= now_ms {
            return Instant::now();
        }
        let wait_ms = (at_ms as f64 - self.anchor_ms) / self.rate;
        // Sleep one millisecond past the deadline, so that the tick finds it passed.
        self.anchor + Duration::from_secs_f64(wait_ms.max(0.0) / 1000.0) + Duration::from_millis(1)
    }

    fn set(&mut self, rate: f64, jump_ms: i64) -> ClockReading {
        let now_ms = self.now_ms();
        self.anchor = Instant::now();
        self.anchor_ms = now_ms as f64 + jump_ms as f64;
        self.rate = rate;
        ClockReading {
            now_ms: self.now_ms(),
            rate,
        }
    }

    fn reading(&mut self) -> ClockReading {
        ClockReading {
            now_ms: self.now_ms(),
            rate: self.rate,
        }
    }
}

/// A client request the core has not answered yet.
#[derive(Debug)]
struct Pending {
    reply: oneshot::Sender<Response>,
    /// The key of an acquire (for the release of a grant nobody received).
    key: Option<Key>,
}

/// The core thread's state: the node and everything its outputs act on.
struct Core {
    node: Node,
    startup: Output,
    storage: DataDir,
    links: PeerLinks,
    clock: Clock,
    pending: HashMap<RequestId, Pending>,
    /// Grants whose client left before they reached it, to release in the next turn.
    orphans: Vec<(Key, Token)>,
    persisted_unreported: bool,
    seen: (Role, Term, Option<NodeId>),
}

impl Core {
    fn new(
        config: Config,
        durable: Durable,
        storage: DataDir,
        links: PeerLinks,
        rate: f64,
    ) -> Self {
        let mut clock = Clock::new(rate);
        let (node, startup) = Node::new(config, durable, clock.now_ms());
        let status = node.status();
        Core {
            node,
            startup,
            storage,
            links,
            clock,
            pending: HashMap::new(),
            orphans: Vec::new(),
            persisted_unreported: false,
            seen: (status.role, status.term, status.leader),
        }
    }

    async fn run(mut self, mut events: mpsc::Receiver<Event>) -> Result<(), ServerError> {
        let startup = std::mem::take(&mut self.startup);
        self.carry_out(startup)?;
        loop {
            let wake = self
                .node
                .next_deadline()
                .map(|at| self.clock.instant_of(at));
            let first = tokio::select! {
                event = events.recv() => match event {
                    Some(event) => Some(event),
                    None => return Ok(()),
                },
                () = sleep_until_some(wake) => None,
            };
            let mut output = self.node.step(Input::Tick {
                now_ms: self.clock.now_ms(),
            });
            if self.persisted_unreported {
                output.extend(self.persisted());
            }
            for (key, token) in std::mem::take(&mut self.orphans) {
                self.release_orphan(key, token, &mut output);
            }
            let mut batch = usize::from(first.is_some());
            if let Some(event) = first {
                self.handle(event, &mut output);
            }
            while batch < BATCH_EVENTS_MAX {
                match events.try_recv() {
                    Ok(event) => self.handle(event, &mut output),
                    Err(_) => break,
                }
                batch += 1;
            }
            let started = Instant::now();
            self.carry_out(output)?;
            debug!(
                events = batch,
                carry_out_us = started.elapsed().as_micros(),
                "turn"
            );
            self.log_role_change();
        }
    }

    /// Steps the node with `event`'s inputs, merging the outputs into `output`; answers
    /// queries about the driver itself at once.
    fn handle(&mut self, event: Event, output: &mut Output) {
        match event {
            Event::Peer { from, msgs } => {
                for msg in msgs {
                    output.extend(self.node.step(Input::Message { from, msg }));
                }
            }
            Event::Request { id, request, reply } => {
                let key = match &request {
                    ClientRequest::Acquire { key, .. } => Some(key.clone()),
                    ClientRequest::Release { .. } => None,
                };
                self.pending.insert(id, Pending { reply, key });
                output.extend(self.node.step(Input::Request { id, request }));
            }
            Event::Orphaned { key, token } => self.release_orphan(key, token, output),
            Event::Gone { id } => {
                // An answer the core gives later has nobody to go to.
                if self.pending.remove(&id).is_some() {
                    output.extend(self.node.step(Input::ClientGone { id }));
                }
            }
            Event::Status { reply } => {
                let _ = reply.send(NodeStatus {
                    raft: self.node.status(),
                    clock: self.clock.reading(),
                    pending_requests: self.pending.len(),
                });
            }
            Event::SetClock {
                rate,
                jump_ms,
                reply,
            } => {
                let reading = self.clock.set(rate, jump_ms);
                info!(rate, jump_ms, now_ms = reading.now_ms, "clock set");
                let _ = reply.send(reading);
            }
        }
    }

    /// Carries out `output` in the order of the IO contract, then feeds back what became
    /// durable (which may produce more output, carried out the same way, at most
    /// [`PERSIST_CHAIN_MAX`] times; past that, the next turn reports it).
    fn carry_out(&mut self, mut output: Output) -> Result<(), ServerError> {
        for round in 0.. {
            if !self.carry_out_one(output)? {
                return Ok(());
            }
            if round == PERSIST_CHAIN_MAX {
                warn!(
                    bound = PERSIST_CHAIN_MAX,
                    "the core kept persisting after Persisted; reporting it next turn"
                );
                self.persisted_unreported = true;
                return Ok(());
            }
            output = self.persisted();
        }
        unreachable!("the loop returns")
    }

    /// Steps the node with `Input::Persisted` for the last durable entry.
    fn persisted(&mut self) -> Output {
        self.persisted_unreported = false;
        let durable = self.storage.durable();
        let (term, index) = match (durable.entries.last(), &durable.snapshot) {
            (Some(last), _) => (last.term, last.index),
            (None, Some(snapshot)) => (snapshot.last_term, snapshot.last_index),
            (None, None) => (0, 0),
        };
        self.node.step(Input::Persisted { term, index })
    }

    /// Carries out one output in the contract's order; says whether it persisted anything.
    fn carry_out_one(&mut self, output: Output) -> Result<bool, ServerError> {
        for envelope in coalesce_envelopes(output.send_now) {
            self.links.send(envelope);
        }
        let persisted = output.persist.is_some();
        if let Some(persist) = &output.persist {
            debug!(persist = %describe_persist(persist), "persist");
            if let Err(e) = self.storage.persist(persist) {
                error!(
                    error = %e,
                    persist = %describe_persist(persist),
                    durable_last_index = self.storage.durable().last_index(),
                    "storage failed; stopping without acknowledging"
                );
                return Err(e.into());
            }
        }
        for envelope in output.send_after_persist {
            self.links.send(envelope);
        }
        for committed in &output.apply {
            info!(
                index = committed.index,
                term = committed.term,
                command = ?committed.proposal.command,
                origin = ?committed.proposal.origin,
                outcome = ?committed.outcome,
                "apply"
            );
        }
        for (id, response) in output.respond {
            if let Some(pending) = self.pending.remove(&id)
                && let Err(Response::Granted { token }) = pending.reply.send(response)
                && let Some(key) = pending.key
            {
                // The handler is gone: the grant never reached its client.
                self.orphans.push((key, token));
            }
        }
        Ok(persisted)
    }

    /// The phantom-lock release of a grant the core answered but whose client left before
    /// the answer reached it. The core releases grants whose client left while they were
    /// pending (`Input::ClientGone`); this closes the window after its answer, which only
    /// the driver sees. Proposed as a system Release of that token (harmless if the key
    /// moved on: it is then `NotFound`); a follower drops it.
    fn release_orphan(&mut self, key: Key, token: Token, output: &mut Output) {
        if self.node.config().bugs.contains(Bug::SkipPhantomRelease) {
            return;
        }
        info!(key = %key, token, "client gone before its grant reached it; releasing");
        let release = Proposal::system(Command::Release { key, token });
        output.extend(self.node.step(Input::Propose(release)));
    }

    fn log_role_change(&mut self) {
        let status = self.node.status();
        let now = (status.role, status.term, status.leader);
        if now != self.seen {
            info!(
                role = ?status.role,
                term = status.term,
                leader = ?status.leader,
                commit_index = status.commit_index,
                "role"
            );
            self.seen = now;
        }
    }
}

/// A one-line summary of a persist, for the log.
fn describe_persist(persist: &crate::raft::Persist) -> String {
    format!(
        "snapshot={:?} truncate_from={:?} entries={:?} hard_state={:?}",
        persist
            .snapshot
            .as_ref()
            .map(|s| (s.last_index, s.last_term)),
        persist.truncate_from,
        persist
            .entries
            .first()
            .zip(persist.entries.last())
            .map(|(first, last)| (first.index, last.index)),
        persist.hard_state,
    )
}

async fn sleep_until_some(wake: Option<Instant>) {
    match wake {
        Some(at) => tokio::time::sleep_until(at).await,
        None => future::pending().await,
    }
}

// ---------------------------------------------------------------------------------------
// Peer links.

/// The outgoing queues of this node's peer links.
#[derive(Debug)]
struct PeerLinks {
    id: NodeId,
    queues: BTreeMap<NodeId, mpsc::Sender<Message>>,
    dropped: u64,
}

impl PeerLinks {
    /// Queues `envelope` on its link; drops it (a lossy network) when the queue is full.
    fn send(&mut self, envelope: Envelope) {
        debug_assert_eq!(envelope.source, self.id, "the core sends as itself");
        let Some(queue) = self.queues.get(&envelope.target) else {
            warn!(
                target = envelope.target,
                "a message to a node that is not a peer; dropped"
            );
            return;
        };
        if queue.try_send(envelope.msg).is_err() {
            self.dropped += 1;
            if self.dropped.is_power_of_two() {
                warn!(
                    target = envelope.target,
                    dropped = self.dropped,
                    bound = PEER_QUEUE_LEN,
                    "peer queue full; messages dropped"
                );
            }
        }
    }
}

fn start_peer_links(config: &ServerConfig) -> PeerLinks {
    let id = config.raft.id;
    let mut queues = BTreeMap::new();
    for &peer in config.raft.members.iter().filter(|m| **m != id) {
        let addr = config
            .dial
            .get(&peer)
            .copied()
            .unwrap_or(config.peers[&peer]);
        let (tx, rx) = mpsc::channel(PEER_QUEUE_LEN);
        tokio::spawn(peer_link(id, peer, addr, rx));
        queues.insert(peer, tx);
    }
    PeerLinks {
        id,
        queues,
        dropped: 0,
    }
}

/// Sends what `queue` yields to `peer` at `addr`, one `deliver` call at a time.
async fn peer_link(id: NodeId, peer: NodeId, addr: SocketAddr, mut queue: mpsc::Receiver<Message>) {
    let mut client: Option<PeerClient> = None;
    let mut backoff_ms = PEER_BACKOFF_MIN_MS;
    let mut strikes = 0;
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < PEER_BATCH_MESSAGES_MAX {
            match queue.try_recv() {
                Ok(msg) => batch.push(msg),
                Err(_) => break,
            }
        }
        coalesce_appends(&mut batch);
        let link = match &client {
            Some(link) => link.clone(),
            None => match connect_peer(addr).await {
                Ok(link) => {
                    debug!(peer, %addr, "peer link connected");
                    backoff_ms = PEER_BACKOFF_MIN_MS;
                    strikes = 0;
                    client = Some(link.clone());
                    link
                }
                Err(e) => {
                    debug!(peer, %addr, error = %e, backoff_ms, "peer link: connect failed");
                    tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
                    backoff_ms = (backoff_ms * 2).min(PEER_BACKOFF_MAX_MS);
                    // What queued meanwhile is stale; Raft resends what matters.
                    while queue.try_recv().is_ok() {}
                    continue;
                }
            },
        };
        let mut ctx = context::current();
        ctx.deadline = std::time::Instant::now() + Duration::from_millis(PEER_RPC_DEADLINE_MS);
        match link.deliver(ctx, id, batch).await {
            Ok(()) => strikes = 0,
            Err(tarpc::client::RpcError::DeadlineExceeded) => {
                strikes += 1;
                if strikes >= PEER_DEADLINE_STRIKES_MAX {
                    debug!(peer, strikes, "peer link: deadlines missed; reconnecting");
                    client = None;
                }
            }
            Err(e) => {
                debug!(peer, error = %e, "peer link broken; reconnecting");
                client = None;
            }
        }
    }
}

/// Whether `later` makes `earlier` redundant: both AppendEntries of one term from the same
/// previous entry, `later` carrying at least as many entries and as new a commit index. A
/// leader's log only grows within its term, so `later`'s entries extend `earlier`'s, and
/// delivering only `later` is what a lossy network may do anyway.
fn supersedes(later: &Message, earlier: &Message) -> bool {
    match (later, earlier) {
        (
            Message::AppendEntries {
                term: later_term,
                prev_log_index: later_prev,
                entries: later_entries,
                leader_commit: later_commit,
                ..
            },
            Message::AppendEntries {
                term,
                prev_log_index,
                entries,
                leader_commit,
                ..
            },
        ) => {
            later_term == term
                && later_prev == prev_log_index
                && later_entries.len() >= entries.len()
                && later_commit >= leader_commit
        }
        _ => false,
    }
}

/// Drops the AppendEntries of `batch` (messages to one peer, in order) that a later one
/// supersedes. The core resends every unacknowledged entry in each step's AppendEntries, so
/// under load a link's queue holds many overlapping ones; sending only the last saves
/// bytes and the follower's work.
fn coalesce_appends(batch: &mut Vec<Message>) {
    let mut kept: Vec<Message> = Vec::with_capacity(batch.len());
    for msg in batch.drain(..).rev() {
        if kept.iter().any(|later| supersedes(later, &msg)) {
            continue;
        }
        kept.push(msg);
    }
    kept.reverse();
    *batch = kept;
}

/// [`coalesce_appends`] for the envelopes of one output, per target, keeping the order of
/// each target's messages.
fn coalesce_envelopes(envelopes: Vec<Envelope>) -> Vec<Envelope> {
    if envelopes.len() < 2 {
        return envelopes;
    }
    let mut by_target: BTreeMap<NodeId, Vec<Message>> = BTreeMap::new();
    let mut source = None;
    for envelope in envelopes {
        source = Some(envelope.source);
        by_target
            .entry(envelope.target)
            .or_default()
            .push(envelope.msg);
    }
    let source = source.expect("at least two envelopes");
    by_target
        .into_iter()
        .flat_map(|(target, mut msgs)| {
            coalesce_appends(&mut msgs);
            msgs.into_iter().map(move |msg| Envelope {
                source,
                target,
                msg,
            })
        })
        .collect()
}

async fn connect_peer(addr: SocketAddr) -> io::Result<PeerClient> {
    let connect = TcpStream::connect(addr);
    let stream = tokio::time::timeout(Duration::from_millis(PEER_CONNECT_TIMEOUT_MS), connect)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    Ok(PeerClient::new(tarpc::client::Config::default(), transport(stream)).spawn())
}

/// The `Peer` service: queues each batch for the core, in order.
#[derive(Clone)]
struct PeerServer {
    id: NodeId,
    members: Arc<Vec<NodeId>>,
    events: mpsc::Sender<Event>,
}

impl Peer for PeerServer {
    async fn deliver(self, _: context::Context, from: NodeId, msgs: Vec<Message>) {
        if from == self.id || !self.members.contains(&from) {
            warn!(
                from,
                "peer messages from a node that is not a peer; ignored"
            );
            return;
        }
        let before = msgs.len();
        let msgs: Vec<Message> = msgs
            .into_iter()
            .filter(|msg| msg.term() <= PEER_TERM_MAX)
            .collect();
        if msgs.len() < before {
            warn!(
                from,
                dropped = before - msgs.len(),
                bound = PEER_TERM_MAX,
                "peer messages with an absurd term; ignored"
            );
        }
        if !msgs.is_empty() {
            let _ = self.events.send(Event::Peer { from, msgs }).await;
        }
    }
}

async fn serve_peers(
    listener: TcpListener,
    id: NodeId,
    members: Vec<NodeId>,
    events: mpsc::Sender<Event>,
) {
    let server = PeerServer {
        id,
        members: Arc::new(members),
        events,
    };
    let slots = Arc::new(Semaphore::new(PEER_CONNECTIONS_MAX));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                warn!(error = %e, "peer accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            warn!(
                bound = PEER_CONNECTIONS_MAX,
                "too many peer connections; one closed"
            );
            continue;
        };
        let server = server.clone();
        tokio::spawn(async move {
            // In order, one request at a time: keeps each link's TCP order into the core.
            BaseChannel::with_defaults(transport(stream))
                .execute(server.serve())
                .for_each(|request| request)
                .await;
            drop(slot);
        });
    }
}

// ---------------------------------------------------------------------------------------
// Client connections.

/// A transport that flips `closed` when its read half ends (EOF or error): the only signal
/// that a client died while its request is still being handled (research/design.md §2.4).
#[derive(Debug)]
pub struct EofNotify<T> {
    inner: T,
    closed: watch::Sender<bool>,
}

impl<T> EofNotify<T> {
    /// Wraps `inner`; the returned receiver turns `true` when the read half ends.
    pub fn new(inner: T) -> (Self, watch::Receiver<bool>) {
        let (closed, receiver) = watch::channel(false);
        (EofNotify { inner, closed }, receiver)
    }
}

impl<T, I, E> Stream for EofNotify<T>
where
    T: Stream<Item = Result<I, E>> + Unpin,
{
    type Item = T::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T::Item>> {
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.closed.send_replace(true);
        }
        polled
    }
}

impl<T, S> Sink<S> for EofNotify<T>
where
    T: Sink<S> + Unpin,
{
    type Error = T::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: S) -> Result<(), T::Error> {
        Pin::new(&mut self.inner).start_send(item)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

/// Reports a request whose client left before its answer reached it, when dropped while
/// armed (the handler was aborted by a cancel or its deadline, or gave up because the
/// connection closed). It closes the answer channel first, so the answer is either already
/// in it (a grant then becomes [`Event::Orphaned`]) or can no longer be sent (the core
/// thread sees the failed send), and otherwise sends [`Event::Gone`].
struct GoneGuard {
    id: RequestId,
    events: mpsc::Sender<Event>,
    armed: bool,
    answer: oneshot::Receiver<Response>,
    key: Option<Key>,
}

impl GoneGuard {
    /// The event to report on drop, if any.
    fn departure(&mut self) -> Option<Event> {
        if !self.armed {
            return None;
        }
        self.answer.close();
        match self.answer.try_recv() {
            Ok(Response::Granted { token }) => Some(Event::Orphaned {
                key: self.key.take()?,
                token,
            }),
            // Answered but never delivered: nothing was granted, nothing to undo.
            Ok(_) => None,
            Err(_) => Some(Event::Gone { id: self.id }),
        }
    }
}

impl Drop for GoneGuard {
    fn drop(&mut self) {
        let Some(event) = self.departure() else {
            return;
        };
        debug!(request = self.id.0, ?event, "client gone before its answer");
        match self.events.try_send(event) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(event)) => {
                // Never block in drop; the queue is bounded, so the departure waits in a
                // task of its own (there is at most one per open request).
                let events = self.events.clone();
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        let _ = events.send(event).await;
                    });
                }
            }
        }
    }
}

/// The `LockService`: forwards each request to the core and waits for its answer.
#[derive(Clone)]
struct LockServer {
    events: mpsc::Sender<Event>,
    next_id: Arc<AtomicU64>,
    closed: watch::Receiver<bool>,
}

impl LockServer {
    async fn call(self, request: ClientRequest) -> Response {
        let id = RequestId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let (reply, answer) = oneshot::channel();
        let key = match &request {
            ClientRequest::Acquire { key, .. } => Some(key.clone()),
            ClientRequest::Release { .. } => None,
        };
        let mut guard = GoneGuard {
            id,
            events: self.events.clone(),
            armed: false,
            answer,
            key,
        };
        let event = Event::Request { id, request, reply };
        if self.events.send(event).await.is_err() {
            return unknown("the node is shutting down");
        }
        guard.armed = true;
        let mut closed = self.closed;
        let answered = tokio::select! {
            answer = &mut guard.answer => Some(answer),
            _ = closed.wait_for(|closed| *closed) => None,
        };
        match answered {
            Some(answer) => {
                guard.armed = false;
                answer.unwrap_or_else(|_| unknown("the core dropped the request"))
            }
            // The guard reports the departure as this returns.
            None => unknown("the client connection closed"),
        }
    }

    async fn ask<T>(&self, event: impl FnOnce(oneshot::Sender<T>) -> Event) -> Option<T> {
        let (reply, answer) = oneshot::channel();
        self.events.send(event(reply)).await.ok()?;
        answer.await.ok()
    }
}

fn unknown(reason: &str) -> Response {
    Response::Unknown {
        reason: reason.to_owned(),
    }
}

impl LockService for LockServer {
    async fn acquire(
        self,
        _: context::Context,
        key: Key,
        lease_ms: u64,
        wait_ms: u64,
        origin: Option<Origin>,
    ) -> Response {
        self.call(ClientRequest::Acquire {
            key,
            lease_ms,
            wait_ms,
            origin,
        })
        .await
    }

    async fn release(
        self,
        _: context::Context,
        key: Key,
        token: Token,
        origin: Option<Origin>,
    ) -> Response {
        self.call(ClientRequest::Release { key, token, origin })
            .await
    }

    async fn status(self, _: context::Context) -> NodeStatus {
        match self.ask(|reply| Event::Status { reply }).await {
            Some(status) => status,
            // Only when the core thread is gone, and then the process is exiting.
            None => future::pending().await,
        }
    }

    async fn set_clock(
        self,
        _: context::Context,
        rate: f64,
        jump_ms: i64,
    ) -> Result<ClockReading, String> {
        if !clock_rate_in_range(rate) {
            return Err(format!(
                "clock rate {rate} is not within {CLOCK_RATE_MIN}..={CLOCK_RATE_MAX}"
            ));
        }
        self.ask(|reply| Event::SetClock {
            rate,
            jump_ms,
            reply,
        })
        .await
        .ok_or_else(|| "the node is shutting down".to_owned())
    }
}

async fn serve_clients(listener: TcpListener, events: mpsc::Sender<Event>) {
    let next_id = Arc::new(AtomicU64::new(1));
    let slots = Arc::new(Semaphore::new(CLIENT_CONNECTIONS_MAX));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                warn!(error = %e, "client accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            warn!(
                bound = CLIENT_CONNECTIONS_MAX,
                "too many client connections; one closed"
            );
            continue;
        };
        let (transport, closed) = EofNotify::new(transport(stream));
        let server = LockServer {
            events: events.clone(),
            next_id: next_id.clone(),
            closed,
        };
        tokio::spawn(async move {
            BaseChannel::with_defaults(transport)
                .max_concurrent_requests(CLIENT_REQUESTS_PER_CONNECTION_MAX)
                .execute(server.serve())
                .for_each(|request| async move {
                    tokio::spawn(request);
                })
                .await;
            drop(slot);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(term: u64, prev: u64, entries: u64, commit: u64) -> Message {
        use crate::lock::{Command, Proposal};
        Message::AppendEntries {
            term,
            prev_log_index: prev,
            prev_log_term: term,
            entries: (prev + 1..=prev + entries)
                .map(|index| crate::raft::Entry {
                    term,
                    index,
                    proposal: Proposal::system(Command::Noop),
                })
                .collect(),
            leader_commit: commit,
        }
    }

    #[test]
    fn only_appends_that_a_later_one_covers_are_dropped() {
        // Raft paper §5.3: an AppendEntries with the same prev entry and more entries of the
        // same term carries everything the earlier one did; dropping a message is loss.
        let vote = Message::RequestVoteResponse {
            term: 3,
            granted: true,
        };
        let mut batch = vec![
            append(3, 10, 1, 9),
            vote.clone(),
            append(3, 10, 3, 10),
            append(3, 12, 1, 10),
            append(4, 12, 2, 10),
            append(3, 10, 2, 11),
        ];
        coalesce_appends(&mut batch);
        assert_eq!(
            batch,
            vec![
                vote,
                append(3, 10, 3, 10),
                append(3, 12, 1, 10),
                append(4, 12, 2, 10),
                append(3, 10, 2, 11),
            ],
            "the first is covered by the third; the third is not covered by the last (fewer \
             entries), and other prev indexes or terms are kept"
        );
    }

    fn guard(events: &mpsc::Sender<Event>) -> (GoneGuard, oneshot::Sender<Response>) {
        let (reply, answer) = oneshot::channel();
        let guard = GoneGuard {
            id: RequestId(7),
            events: events.clone(),
            armed: true,
            answer,
            key: Some("k".to_owned()),
        };
        (guard, reply)
    }

    #[tokio::test]
    async fn a_dropped_handler_reports_gone_or_its_undelivered_grant() {
        // DESIGN.md "Phantom locks": a client gone before it got its answer must not keep
        // a lock, whether the core had answered yet or not.
        let (events, mut inbox) = mpsc::channel(8);
        let (unanswered, reply) = guard(&events);
        drop(unanswered);
        assert!(matches!(
            inbox.try_recv(),
            Ok(Event::Gone { id: RequestId(7) })
        ));
        assert!(
            reply.send(Response::Granted { token: 3 }).is_err(),
            "a later answer cannot be sent, so the core thread sees it undelivered"
        );

        let (granted, reply) = guard(&events);
        reply.send(Response::Granted { token: 9 }).unwrap();
        drop(granted);
        match inbox.try_recv() {
            Ok(Event::Orphaned { key, token }) => assert_eq!((key.as_str(), token), ("k", 9)),
            other => panic!("expected Orphaned, got {other:?}"),
        }

        let (busy, reply) = guard(&events);
        reply.send(Response::Busy).unwrap();
        drop(busy);
        let (mut delivered, _reply) = guard(&events);
        delivered.armed = false;
        drop(delivered);
        assert!(
            inbox.try_recv().is_err(),
            "nothing to undo for Busy or a delivered answer"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_clock_scales_jumps_and_never_goes_backwards() {
        // research/design.md §3.4 item 6: `--clock-rate r` scales the node's clock; the core
        // requires Tick never to decrease.
        let mut clock = Clock::new(2.0);
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(clock.now_ms(), 200);
        clock.set(1.0, 1000);
        assert_eq!(clock.now_ms(), 1200);
        clock.set(1.0, -500);
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(clock.now_ms(), 1200, "held still after a backward jump");
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(clock.now_ms(), 1300);
        let at = clock.instant_of(1400);
        tokio::time::sleep_until(at).await;
        assert!(
            clock.now_ms() >= 1400,
            "woken before the deadline: {}",
            clock.now_ms()
        );
    }
}
