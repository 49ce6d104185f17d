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
//!   Incoming peer connections are served in order. A `deliver` call waits (at most
//!   [`PEER_REPLY_WAIT_MS`]) for the receiving core's turn, and the answers that turn made
//!   for the caller after its persist ride back on the call's reply: an AppendEntries and
//!   its answer cost one call, not two (each call a write and a read on both sides, and
//!   the wake-ups of link and core; under `locksmith bench` the peer calls were about a
//!   third of the nodes' socket writes).
//! - **Client connections.** Each accepted connection is wrapped in [`EofNotify`], which
//!   flips a watch flag when the read half ends. tarpc keeps a handler running when its
//!   client dies abruptly (research/design.md §2.4), so each handler selects on that flag,
//!   and holds a `GoneGuard` whose drop (connection closed, request cancelled, server-side
//!   deadline) feeds `Input::ClientGone`: the core then releases a lock granted to nobody.
//!   When the core had already answered with a grant that never reached the handler's
//!   client (the answer sat in the handler's channel, or the handler was gone when it was
//!   sent), the core no longer knows the request, so the driver proposes the release of
//!   that token itself. A grant that passed the handler is released too when the
//!   connection ends before its answer is written, or its answer is written after that end
//!   (the connection keeps an account of every grant until one of the two happens, checked
//!   when it is gone: `clients::AnsweredGrants`). What remains is the window after the
//!   answer was written to the open connection and before a client that then died read it:
//!   the lease is the backstop there.
//!
//! # Files
//!
//! - `mod.rs`: the configuration, the errors, the core's input events, [`run`].
//! - `core.rs`: the core loop (group commit, the IO contract, phantom releases).
//! - `clock.rs`: the node's clock (rate, jumps, never backwards).
//! - `peers.rs`: the outgoing peer links and the incoming `Peer` service.
//! - `clients.rs`: the `LockService`, the EOF-aware transport and the departure guard.
//!
//! # Under simulation
//!
//! Sockets and files come from [`crate::sys`], so the same code runs on turmoil's simulated
//! network and disk (`locksmith sim`). There the core cannot have an OS thread of its own
//! (a simulated host is one task set on one thread, driven by the simulator), so it runs as
//! a task of the host; and every timer and deadline reads tokio's clock, which the
//! simulator drives, never `std::time::Instant`. A harness-only [`PauseGate`] stops the core
//! as SIGSTOP stops a process: while closed, the core takes no input and no tick, and when
//! it opens, the timers that came due meanwhile fire late.
//!
//! # The clock
//!
//! The core's clock is `offset + elapsed × rate` in milliseconds, from tokio's monotonic
//! clock. `--clock-rate` and the `set_clock` RPC (the harness's skew and strobe nemesis)
//! change `rate` and jump `offset`; a backward jump holds the clock still until real time
//! catches up, since the core requires `Tick` never to go backwards.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use tarpc::serde_transport;
use tarpc::tokio_serde::formats::Bincode;
use tarpc::tokio_util::codec::{Framed, LengthDelimitedCodec};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

use crate::bugs::Bug;
use crate::lock::{Key, Token};
use crate::raft::{ClientRequest, Config, Message, NodeId, RequestId, Response};
use crate::rpc::{CLOCK_RATE_MAX, CLOCK_RATE_MIN, ClockReading, FRAME_LEN_MAX, NodeStatus};
use crate::storage::{DataDir, StorageError, SyncMode};
use crate::sys::net::TcpListener;

mod admin;
mod clients;
mod clock;
mod core;
mod peers;

pub use admin::admin_secret;
pub use clients::EofNotify;

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
/// How long a `deliver` call waits for the receiving core's turn, whose answers to the
/// caller ride on the call's reply; later answers go out on the receiver's own link.
pub const PEER_REPLY_WAIT_MS: u64 = 100;
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
/// At most this many peer connections are served at once; a new one closes the oldest (see
/// `peers::serve_peers`: a connection whose end never arrived is otherwise served for ever).
pub const PEER_CONNECTIONS_MAX: usize = 64;
/// At most this many requests in flight on one client connection.
pub const CLIENT_REQUESTS_PER_CONNECTION_MAX: usize = 256;
/// A request's tarpc deadline is taken at most this far ahead ([`served_transport`]): no
/// handler works on a request longer (the client port's longest is 600 s).
pub const REQUEST_DEADLINE_AHEAD_MAX_MS: u64 = 3_600_000;
/// Peer messages with a term above this are dropped: the core's own bound
/// ([`crate::raft::TERM_MAX`]), checked at the peer port too so that they are logged there.
pub const PEER_TERM_MAX: u64 = crate::raft::TERM_MAX;
/// The largest snapshot chunk: JSON writes a byte as at most 4 characters, so a chunk's
/// frame stays within [`FRAME_LEN_MAX`] with room for the envelope.
pub const SNAPSHOT_CHUNK_BYTES_MAX: u64 = (FRAME_LEN_MAX as u64) / 8;
/// On a clean exit, how long to wait for the core's hand-over and then for the peer links to
/// send it.
pub const EXIT_FLUSH_MS: u64 = 50;
/// The cluster name of a node started without one (`--cluster`), like etcd's
/// `--initial-cluster-token` default: clusters that share a data dir's node and member ids
/// tell each other apart only when each is started with its own name.
pub const CLUSTER_DEFAULT: &str = "lockd";
/// The longest cluster name; its characters are ASCII letters, digits, `.`, `_` and `-`.
pub const CLUSTER_NAME_LEN_MAX: usize = 64;
/// Steps of `Input::Persisted` chained after one output (each may persist again).
const PERSIST_CHAIN_MAX: usize = 8;

/// [`crate::storage::Options::segment_ahead_bytes`] under the simulator.
const SIM_SEGMENT_AHEAD_BYTES: u64 = 2048;

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
    /// The cluster's name, recorded in the data dir on the first start and checked on
    /// every later one ([`CLUSTER_DEFAULT`] unless set).
    pub cluster: String,
    /// The initial rate of this node's clock relative to real time.
    pub clock_rate: f64,
    /// Harness-only: a gate that stops the core while closed (the simulator's pause).
    pub pause_gate: Option<PauseGate>,
    /// Harness-only: faults of the outgoing peer links (the simulator's `flaky`).
    pub link_faults: Option<LinkFaultsGate>,
    /// Where the core appends a trace of every input it steps (`lockd::trace`, for
    /// `locksmith model replay`); `None`: no trace.
    pub trace: Option<PathBuf>,
    /// Harness-only: the core traces into this in-memory trace instead (the simulator's,
    /// whose replay reads it in the same process); wins over `trace`.
    pub trace_memory: Option<crate::trace::MemoryTrace>,
    /// The admin endpoint (the harness's controls); `None`, the default: no endpoint.
    pub admin: Option<AdminConfig>,
    /// The most peer connections served at once ([`PEER_CONNECTIONS_MAX`]); the simulator
    /// draws a few on some seeds, so that connections whose end never arrived reach it.
    pub peer_connections_max: usize,
    /// How long an incoming `deliver` call waits for this node's answers to ride on its
    /// reply ([`PEER_REPLY_WAIT_MS`]); 0: it replies at once with nothing, and every answer
    /// goes out on this node's own link (a call per answer). The simulator draws 0 on half
    /// the seeds: with one call in flight per link and the answers on its reply, a follower
    /// never has a second batch queued while it persists the first, and the world without
    /// replies found some mutants far more often (`invalid-after-sent`: 9 of seeds 1..100
    /// against 1).
    pub peer_reply_wait_ms: u64,
}

/// Where the admin endpoint listens and the secret every call must carry (`rpc.rs`, "Ports
/// by role").
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AdminConfig {
    /// The listen address: loopback (checked by [`ServerConfig::validate`]), or in the
    /// simulator a host's own address.
    pub listen: SocketAddr,
    /// The secret (the `lockd` binary reads it from the data dir with [`admin_secret`]).
    pub secret: String,
}

impl AdminConfig {
    /// An endpoint on `listen` with `secret`.
    pub fn new(listen: SocketAddr, secret: String) -> Self {
        AdminConfig { listen, secret }
    }
}

/// Harness-only control of a node's core, as SIGSTOP and SIGCONT control a process: while
/// the gate is closed the core takes no input and no tick. The simulator holds the
/// [`PauseSwitch`]; a real process is paused by a signal instead.
#[derive(Clone, Debug)]
pub struct PauseGate(watch::Receiver<bool>);

/// The switch of a [`PauseGate`].
#[derive(Debug)]
pub struct PauseSwitch(watch::Sender<bool>);

impl PauseSwitch {
    /// A new switch, open, and its gate.
    pub fn new() -> (PauseSwitch, PauseGate) {
        let (switch, gate) = watch::channel(false);
        (PauseSwitch(switch), PauseGate(gate))
    }

    /// Closes (`true`) or opens (`false`) the gate.
    pub fn set_paused(&self, paused: bool) {
        self.0.send_replace(paused);
    }

    /// Whether the gate is closed.
    pub fn is_paused(&self) -> bool {
        *self.0.borrow()
    }
}

/// Harness-only faults of a node's outgoing peer links, what `tc netem` does to a real
/// interface (the simulator's `flaky`): each batch a link sends is dropped, or has one message
/// held back until after the next batch (reordered and late), or carries again a message
/// already sent (duplicated), each with its percent chance. All zero: a clean link. The
/// choices come from a generator seeded by the node's seed and the peer, so a simulated run
/// replays them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkFaults {
    /// Batches dropped whole, percent.
    pub drop_percent: u32,
    /// Batches with one message held back to after the next batch, percent.
    pub reorder_percent: u32,
    /// Batches that carry a copy of a message sent before, percent.
    pub duplicate_percent: u32,
}

impl LinkFaults {
    /// No fault.
    pub const NONE: LinkFaults = LinkFaults {
        drop_percent: 0,
        reorder_percent: 0,
        duplicate_percent: 0,
    };

    /// Whether any fault is on.
    pub fn any(&self) -> bool {
        *self != LinkFaults::NONE
    }
}

/// What a node's peer links read their [`LinkFaults`] from.
#[derive(Clone, Debug)]
pub struct LinkFaultsGate(watch::Receiver<LinkFaults>);

/// The switch of a [`LinkFaultsGate`], held by the harness.
#[derive(Debug)]
pub struct LinkFaultsSwitch(watch::Sender<LinkFaults>);

impl LinkFaultsSwitch {
    /// A new switch, with clean links, and its gate.
    pub fn new() -> (LinkFaultsSwitch, LinkFaultsGate) {
        let (switch, gate) = watch::channel(LinkFaults::NONE);
        (LinkFaultsSwitch(switch), LinkFaultsGate(gate))
    }

    /// Sets the faults every link of the node applies from its next batch on.
    pub fn set(&self, faults: LinkFaults) {
        self.0.send_replace(faults);
    }
}

impl LinkFaultsGate {
    /// The faults in force now.
    fn current(&self) -> LinkFaults {
        *self.0.borrow()
    }
}

impl PauseGate {
    /// Returns at once when open; otherwise when the gate opens (or its switch is gone).
    async fn pass(&mut self) {
        let _ = self.0.wait_for(|paused| !*paused).await;
    }
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
            cluster: CLUSTER_DEFAULT.to_owned(),
            clock_rate: 1.0,
            pause_gate: None,
            link_faults: None,
            trace: None,
            trace_memory: None,
            admin: None,
            peer_connections_max: PEER_CONNECTIONS_MAX,
            peer_reply_wait_ms: PEER_REPLY_WAIT_MS,
        }
    }

    /// Checks what the core would only assert: the node is a member, every member has an
    /// address, and the clock rate is in range; that an admin endpoint binds loopback
    /// with a secret of 1 to 256 bytes; and that the cluster name is one
    /// ([`CLUSTER_NAME_LEN_MAX`]).
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
        if let Some(admin) = &self.admin
            && !admin.listen.ip().is_loopback()
            && !crate::sys::simulated()
        {
            return invalid(format!(
                "admin address {}: the admin endpoint binds loopback only",
                admin.listen
            ));
        }
        if let Some(admin) = &self.admin
            && !(1..=admin::ADMIN_SECRET_LEN_MAX).contains(&admin.secret.len())
        {
            // An empty secret would admit every caller: `same_secret("", "")` holds.
            return invalid(format!(
                "admin secret of {} bytes: need 1 to {}",
                admin.secret.len(),
                admin::ADMIN_SECRET_LEN_MAX
            ));
        }
        let name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if !(1..=CLUSTER_NAME_LEN_MAX).contains(&self.cluster.len())
            || !self.cluster.chars().all(name_char)
        {
            return invalid(format!(
                "cluster name {:?}: need 1 to {CLUSTER_NAME_LEN_MAX} ASCII letters, digits, \
                 '.', '_' or '-'",
                self.cluster
            ));
        }
        if self.peer_reply_wait_ms >= PEER_RPC_DEADLINE_MS {
            return invalid(format!(
                "peer reply wait {} ms: need less than a peer call's deadline, \
                 {PEER_RPC_DEADLINE_MS} ms",
                self.peer_reply_wait_ms
            ));
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
        if self.raft.snapshot_retransmit_ms == 0 || self.raft.snapshot_retransmit_ms >= min {
            return invalid(format!(
                "snapshot retransmit {} ms: need 0 < retransmit < election timeout low {min}",
                self.raft.snapshot_retransmit_ms
            ));
        }
        if !(1..=SNAPSHOT_CHUNK_BYTES_MAX).contains(&self.raft.snapshot_chunk_bytes) {
            return invalid(format!(
                "snapshot chunk {} bytes: need 1 to {SNAPSHOT_CHUNK_BYTES_MAX} (a chunk travels \
                 as JSON, up to 4 characters a byte, in frames of at most {FRAME_LEN_MAX})",
                self.raft.snapshot_chunk_bytes
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
    /// The trace file could not be opened or written.
    #[error("trace {path}: {source}")]
    Trace {
        /// The trace file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The core thread could not be started or ended abnormally.
    #[error("the core thread: {reason}")]
    Core {
        /// What happened.
        reason: String,
    },
}

/// An input to the core thread.
#[derive(Debug)]
pub(crate) enum Event {
    /// Messages from a peer, in the order they were sent; `reply`, when the peer's
    /// `deliver` call waits for this turn's answers to it (see `peers::PeerLinks`).
    Peer {
        from: NodeId,
        msgs: Vec<Message>,
        reply: Option<oneshot::Sender<Vec<Message>>>,
    },
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
    /// The node stops cleanly (SIGTERM): the core steps `Input::Exit` (a leader hands over
    /// with TimeoutNow), carries out its output, then answers.
    Exit { reply: oneshot::Sender<()> },
    /// A client connection saw the server break its contract with clients (simulation
    /// only, see `clients::Checked`): the core stops with `reason`, so that the simulator's
    /// node health names it.
    ContractBroken { reason: String },
    /// The clock nemesis.
    SetClock {
        rate: f64,
        jump_ms: i64,
        reply: oneshot::Sender<ClockReading>,
    },
}

/// Runs a node until a fatal error: binds both listeners, opens the data dir, starts the
/// peer links and the core (an OS thread of its own; a task when simulated).
pub async fn run(config: ServerConfig) -> Result<(), ServerError> {
    config.validate()?;
    let id = config.raft.id;
    let peer_addr = config.peers[&id];
    let sync = if config.raft.bugs.contains(Bug::NoFsync) {
        SyncMode::UserBuffer
    } else {
        SyncMode::Fsync
    };
    let mut options = crate::storage::Options::new(sync);
    options.defer_commit_hint = true;
    if crate::sys::simulated() {
        // A few sectors: the simulated disk takes writes one sector at a time, and seeds
        // rewrite segments often (small snapshot thresholds). Records still go over the
        // zeros, tear inside them and run past them.
        options.segment_ahead_bytes = SIM_SEGMENT_AHEAD_BYTES;
    }
    let (mut data_dir, durable) = DataDir::open_with(&config.data_dir, options)?;
    data_dir.claim(&config.cluster, id, &config.raft.members)?;
    // The data dir is checked first: a dir of another node or cluster is refused whatever
    // the state of the ports.
    let peer_listener = bind(peer_addr).await?;
    let client_listener = bind(config.client_listen).await?;
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
    let links = peers::start_peer_links(&config, &events_tx);
    tokio::spawn(peers::serve_peers(
        peer_listener,
        peers::PeerServer::new(id, &config, events_tx.clone()),
        config.peer_connections_max.max(1),
    ));
    if let Some(admin) = &config.admin {
        let listener = bind(admin.listen).await?;
        info!(admin_listen = %admin.listen, "admin endpoint on");
        let secret = admin.secret.clone();
        tokio::spawn(admin::serve_admin(listener, secret, events_tx.clone()));
    }
    let exit_events = events_tx.clone();
    let bugs = config.raft.bugs;
    tokio::spawn(clients::serve_clients(client_listener, events_tx, bugs));

    let core = core::Core::new(
        config.raft.clone(),
        durable,
        data_dir,
        links,
        config.clock_rate,
    );
    let core = match (&config.trace_memory, &config.trace) {
        (Some(memory), _) => core.with_memory_trace(memory.clone()),
        (None, Some(path)) => core.with_trace(path)?,
        (None, None) => core,
    };
    let gate = config.pause_gate.clone();
    if crate::sys::simulated() {
        // One thread runs every simulated host: the core is a task of this host.
        return core.run(events_rx, gate).await;
    }
    let (done_tx, done_rx) = oneshot::channel::<Result<(), ServerError>>();
    std::thread::Builder::new()
        .name(format!("lockd-core-{id}"))
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .map_err(|e| ServerError::Core {
                    reason: format!("cannot build its runtime: {e}"),
                })
                .and_then(|runtime| runtime.block_on(core.run(events_rx, gate)));
            let _ = done_tx.send(result);
        })
        .map_err(|e| ServerError::Core {
            reason: format!("cannot spawn: {e}"),
        })?;
    let core_done = async {
        done_rx.await.unwrap_or_else(|_| {
            Err(ServerError::Core {
                reason: "it ended without a result (panicked)".to_owned(),
            })
        })
    };
    tokio::select! {
        result = core_done => result,
        () = hand_over_on_terminate(exit_events) => Ok(()),
    }
}

/// Waits for SIGTERM or SIGINT, then has the core hand leadership over (`Event::Exit`) and
/// gives the peer links [`EXIT_FLUSH_MS`] to send the TimeoutNow messages. Never returns when
/// the signals cannot be watched (the process then stops as before, without a hand-over).
async fn hand_over_on_terminate(events: mpsc::Sender<Event>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return futures::future::pending().await;
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    info!("stopping: handing leadership over");
    let (reply, done) = oneshot::channel();
    if events.send(Event::Exit { reply }).await.is_ok() {
        let _ = tokio::time::timeout(std::time::Duration::from_millis(EXIT_FLUSH_MS), done).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(EXIT_FLUSH_MS)).await;
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { addr, source })
}

/// A tarpc transport over `stream`: bincode in length-delimited frames (Nagle is off on
/// every stream of [`crate::sys::net`]: each message here is small and latency-bound).
/// Bincode, not JSON: JSON's codec was 12 % of a simulated seed's CPU, and a snapshot
/// chunk's bytes went as a JSON array of numbers. A frame's length is bounded
/// (`FRAME_LEN_MAX`), and bincode refuses a malformed or truncated frame with an error.
///
/// The wire format of every service of a node, public so that a caller that speaks the RPC
/// itself (`locksmith bench --soak` registers sessions by the hundred thousand, with no
/// [`crate::client::Client`] each) frames its calls exactly as the node reads them.
pub fn transport<S, Item, SinkItem>(
    stream: S,
) -> serde_transport::Transport<S, Item, SinkItem, Bincode<Item, SinkItem>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite,
    Item: for<'de> serde::Deserialize<'de>,
    SinkItem: serde::Serialize,
{
    serde_transport::new(frames(stream), Bincode::default())
}

/// Length-delimited frames of at most [`FRAME_LEN_MAX`] bytes: what every port reads.
fn frames<S>(stream: S) -> Framed<S, LengthDelimitedCodec>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite,
{
    let codec = LengthDelimitedCodec::builder()
        .max_frame_length(FRAME_LEN_MAX)
        .new_codec();
    Framed::new(stream, codec)
}

/// The transport of a port this node serves: [`transport`]'s frames, except that a request's
/// deadline is read here, not by tarpc. tarpc reads it as `Instant::now() + duration`, with
/// the duration the caller sent, and that addition panics past the last `Instant`: one frame
/// from any caller panicked its connection's task, and `lockd` stops on any panic (a review
/// defect of 2026-12-06). A deadline is taken at most [`REQUEST_DEADLINE_AHEAD_MAX_MS`] ahead.
pub fn served_transport<S, Req, Resp>(
    stream: S,
) -> serde_transport::Transport<
    S,
    tarpc::ClientMessage<Req>,
    tarpc::Response<Resp>,
    Served<Req, Resp>,
>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite,
    Req: for<'de> serde::Deserialize<'de>,
    Resp: serde::Serialize,
{
    serde_transport::new(frames(stream), Served(std::marker::PhantomData))
}

/// The codec of [`served_transport`]: bincode, with requests read through `WireMessage`.
pub struct Served<Req, Resp>(std::marker::PhantomData<fn() -> (Req, Resp)>);

/// `tarpc::ClientMessage` as bincode lays it out (the same fields in the same order), with the
/// deadline as sent: a duration from now (tarpc's `absolute_to_relative_time`).
#[derive(serde::Deserialize)]
enum WireMessage<Req> {
    Request {
        deadline: std::time::Duration,
        trace_context: tarpc::trace::Context,
        id: u64,
        message: Req,
    },
    Cancel {
        trace_context: tarpc::trace::Context,
        request_id: u64,
    },
}

impl<Req> WireMessage<Req> {
    /// The message as tarpc's server takes it, with the deadline bounded.
    fn into_tarpc(self) -> tarpc::ClientMessage<Req> {
        match self {
            WireMessage::Request {
                deadline,
                trace_context,
                id,
                message,
            } => {
                let ahead_max = std::time::Duration::from_millis(REQUEST_DEADLINE_AHEAD_MAX_MS);
                let mut context = tarpc::context::current();
                context.deadline = std::time::Instant::now() + deadline.min(ahead_max);
                context.trace_context = trace_context;
                tarpc::ClientMessage::Request(tarpc::Request {
                    context,
                    id,
                    message,
                })
            }
            WireMessage::Cancel {
                trace_context,
                request_id,
            } => tarpc::ClientMessage::Cancel {
                trace_context,
                request_id,
            },
        }
    }
}

impl<Req, Resp> tarpc::tokio_serde::Deserializer<tarpc::ClientMessage<Req>> for Served<Req, Resp>
where
    Req: for<'de> serde::Deserialize<'de>,
{
    type Error = io::Error;

    fn deserialize(
        self: std::pin::Pin<&mut Self>,
        source: &tarpc::tokio_util::bytes::BytesMut,
    ) -> Result<tarpc::ClientMessage<Req>, io::Error> {
        let bincode = std::pin::pin!(Bincode::<WireMessage<Req>, ()>::default());
        Ok(bincode.deserialize(source)?.into_tarpc())
    }
}

impl<Req, Resp> tarpc::tokio_serde::Serializer<tarpc::Response<Resp>> for Served<Req, Resp>
where
    Resp: serde::Serialize,
{
    type Error = io::Error;

    fn serialize(
        self: std::pin::Pin<&mut Self>,
        item: &tarpc::Response<Resp>,
    ) -> Result<tarpc::tokio_util::bytes::Bytes, io::Error> {
        let bincode = std::pin::pin!(Bincode::<(), tarpc::Response<Resp>>::default());
        bincode.serialize(item)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::net::SocketAddr;

    use super::{AdminConfig, ServerConfig};
    use crate::raft::Config;

    #[tokio::test]
    async fn the_served_transport_reads_what_tarpc_writes_with_the_deadline_kept() {
        // `served_transport` reads tarpc's frames through a copy of their layout: a request
        // and a cancel written by tarpc's own serializer come out whole, and a deadline
        // within the bound is kept (to the millisecond the frame took).
        use futures::{SinkExt, StreamExt};
        use std::time::{Duration, Instant};
        let (client_end, server_end) = tokio::io::duplex(4096);
        let mut client = super::transport::<_, (), tarpc::ClientMessage<u64>>(client_end);
        let mut server = super::served_transport::<_, u64, ()>(server_end);
        let mut context = tarpc::context::current();
        context.deadline = Instant::now() + Duration::from_secs(30);
        context.trace_context.span_id = tarpc::trace::SpanId::from(5);
        let request = tarpc::Request {
            context,
            id: 7,
            message: 42,
        };
        client
            .send(tarpc::ClientMessage::Request(request))
            .await
            .unwrap();
        client
            .send(tarpc::ClientMessage::Cancel {
                trace_context: context.trace_context,
                request_id: 7,
            })
            .await
            .unwrap();
        let Some(Ok(tarpc::ClientMessage::Request(read))) = server.next().await else {
            panic!("expected the request");
        };
        assert_eq!((read.id, read.message), (7, 42));
        assert_eq!(read.context.trace_context, context.trace_context);
        let drift = read.context.deadline.duration_since(context.deadline)
            + context.deadline.duration_since(read.context.deadline);
        assert!(
            drift < Duration::from_secs(1),
            "deadline moved by {drift:?}"
        );
        let Some(Ok(tarpc::ClientMessage::Cancel {
            trace_context,
            request_id,
        })) = server.next().await
        else {
            panic!("expected the cancel");
        };
        assert_eq!((trace_context, request_id), (context.trace_context, 7));
    }

    #[test]
    fn a_cluster_name_outside_its_bounds_is_refused() {
        let addr: SocketAddr = "127.0.0.1:7000".parse().expect("address");
        let mut config = ServerConfig::new(
            Config::new(1, vec![1]),
            BTreeMap::from([(1, addr)]),
            "127.0.0.1:7100".parse().expect("address"),
            "/nonexistent".into(),
        );
        assert!(
            config.validate().is_ok(),
            "the default name: {:?}",
            config.validate()
        );
        for bad in ["", "a b", "a,node 2", "x\ny", &"a".repeat(65)] {
            config.cluster = bad.to_owned();
            assert!(config.validate().is_err(), "cluster name {bad:?} validated");
        }
        config.cluster = "orders-eu.2_b".to_owned();
        assert!(config.validate().is_ok(), "{:?}", config.validate());
    }

    #[test]
    fn an_admin_endpoint_with_an_empty_secret_is_refused() {
        // rpc.rs, "Ports by role": every admin call must carry the node's secret. The
        // `lockd` binary builds its `AdminConfig` with an empty secret and fills it from
        // the data dir afterwards; a driver that skipped that step (or read an empty value)
        // validated, and `same_secret("", "")` then let any local caller set the clock.
        let addr: SocketAddr = "127.0.0.1:7000".parse().expect("address");
        let peers = BTreeMap::from([(1, addr)]);
        let mut config = ServerConfig::new(
            Config::new(1, vec![1]),
            peers,
            "127.0.0.1:7100".parse().expect("address"),
            "/nonexistent".into(),
        );
        config.admin = Some(AdminConfig::new(
            "127.0.0.1:7301".parse().expect("address"),
            String::new(),
        ));

        let result = config.validate();

        assert!(result.is_err(), "an empty admin secret validated");
        config.admin = Some(AdminConfig::new(
            "127.0.0.1:7301".parse().expect("address"),
            "s3cret".to_string(),
        ));
        assert!(config.validate().is_ok(), "{:?}", config.validate());
    }
}
