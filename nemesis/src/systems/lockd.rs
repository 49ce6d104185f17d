//! lockd as the system under test: `lockd` processes started with the run's layout (peers
//! dialed through the net's per-link addresses), `lockd::client::Client` as the lock client,
//! its status and `set_clock` calls for the leader-aware and clock nemeses.
//!
//! The `lockd` binary is found through `LOCKD_BIN`, else next to the running executable
//! (`target/<profile>/lockd` beside `locksmith`, or one directory up from a test binary in
//! `target/<profile>/deps/`). `cargo build` builds both binaries.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use tokio::time::Instant;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use history::ErrorWord;
use lockd::client::{Client, ClientError};
use lockd::raft::Role;

use crate::cluster::{LaunchOptions, Launcher, Layout};
use crate::systems::{LockClient, NodeView, Outcome, System};
use crate::{Error, NodeId};

/// The client id of the harness's own control client (status, clock); never a process id.
pub const CONTROL_CLIENT_ID: u64 = u64::MAX / 2;

/// Where each node serves its admin endpoint in the simulation.
pub const SIM_ADMIN_PORT: u16 = 7200;

/// The admin secret of the simulated nodes of a run with `seed` (the simulated disk is not
/// the harness's to read; a real node's secret is read from its data dir).
fn sim_admin_secret(seed: u64) -> String {
    format!("sim-{seed:016x}")
}

/// How long the harness waits for an admin call, ms.
const ADMIN_TIMEOUT_MS: u64 = 500;

/// Finds the `lockd` binary.
pub fn find_lockd() -> Result<PathBuf, Error> {
    if let Some(path) = std::env::var_os("LOCKD_BIN") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Error::Cluster(format!(
                "LOCKD_BIN={} is not a file",
                path.display()
            )))
        };
    }
    let exe = std::env::current_exe().map_err(|e| Error::Io(format!("current exe: {e}")))?;
    // First `locksmith node`: lockd from this very binary (cmd_node.rs), built from the same
    // sources as the harness that talks to it. A `lockd` binary beside it may be older:
    // `cargo run -p nemesis` rebuilds only `locksmith`, and a stale lockd ran other code, or
    // spoke another wire format (after the switch to bincode, `locksmith bench` found no
    // leader in 30 s: its status calls went unread).
    if runs_lockd_as_subcommand(&exe) {
        return Ok(exe);
    }
    let mut candidates = Vec::new();
    if let Some(dir) = exe.parent() {
        candidates.push(dir.join("lockd"));
        if let Some(up) = dir.parent() {
            candidates.push(up.join("lockd"));
        }
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        Error::Cluster(format!(
            "no lockd binary next to {}; run `cargo build` (it builds lockd and locksmith) or set LOCKD_BIN",
            exe.display()
        ))
    })
}

/// Whether `binary` is `locksmith` itself, which runs a node as `locksmith node ARGS`.
fn runs_lockd_as_subcommand(binary: &std::path::Path) -> bool {
    binary.file_stem().is_some_and(|stem| stem == "locksmith")
}

/// lockd.
pub struct Lockd {
    binary: PathBuf,
    bug: Option<String>,
    seed: u64,
    trace: bool,
    control: std::sync::Mutex<Option<(Vec<SocketAddr>, Arc<Client>)>>,
}

impl Lockd {
    /// lockd from `binary`, with an optional `--bug`, node RNG seeds derived from `seed`.
    pub fn new(binary: PathBuf, bug: Option<String>, seed: u64) -> Self {
        Lockd {
            binary,
            bug,
            seed,
            trace: false,
            control: std::sync::Mutex::new(None),
        }
    }

    /// lockd in the simulator (`locksmith sim`): its nodes are turmoil hosts that the
    /// simulation starts, so there is no binary to launch; clients, status and the clock
    /// control are the same as on real processes.
    pub fn simulated(bug: Option<String>, seed: u64) -> Self {
        Lockd::new(PathBuf::from("(simulated: no binary)"), bug, seed)
    }

    /// With `trace`, every node appends a trace of its core's inputs (`lockd --trace`) to
    /// `n<ID>.trace.jsonl` in the log dir, for `locksmith model replay RUN_DIR`.
    pub fn with_trace(mut self, trace: bool) -> Self {
        self.trace = trace;
        self
    }

    fn control(&self, layout: &Layout) -> Arc<Client> {
        let addrs = layout.client_addrs();
        let mut control = self.control.lock().unwrap_or_else(|p| p.into_inner());
        match control.as_ref() {
            Some((a, c)) if *a == addrs => c.clone(),
            _ => {
                let c = Arc::new(Client::new(addrs.clone(), CONTROL_CLIENT_ID));
                *control = Some((addrs, c.clone()));
                c
            }
        }
    }
}

/// Where node `id` writes its trace under `locksmith test --trace`: in the run's node-log
/// directory, where `locksmith model replay RUN_DIR` looks for it.
pub fn trace_path(log_dir: &std::path::Path, id: NodeId) -> PathBuf {
    log_dir.join(format!("n{id}.trace.jsonl"))
}

struct LockdLauncher {
    binary: PathBuf,
    bug: Option<String>,
    seed: u64,
    trace: bool,
    layout: Layout,
    dial: BTreeMap<(NodeId, NodeId), SocketAddr>,
}

fn node_map(entries: impl Iterator<Item = (NodeId, SocketAddr)>) -> String {
    entries
        .map(|(id, a)| format!("{id}={a}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl Launcher for LockdLauncher {
    fn command(&self, id: NodeId, options: &LaunchOptions) -> Command {
        let mut c = Command::new(&self.binary);
        if runs_lockd_as_subcommand(&self.binary) {
            c.arg("node");
        }
        c.arg("--id").arg(id.to_string());
        c.arg("--peers")
            .arg(node_map(self.layout.peer.iter().map(|(k, v)| (*k, *v))));
        c.arg("--client-listen")
            .arg(self.layout.client[&id].to_string());
        c.arg("--data-dir").arg(&self.layout.data_dir[&id]);
        if let Some(admin) = self.layout.admin.get(&id) {
            c.arg("--admin-addr").arg(admin.to_string());
        }
        let dial = node_map(
            self.dial
                .iter()
                .filter(|((s, _), _)| *s == id)
                .map(|((_, t), a)| (*t, *a)),
        );
        if !dial.is_empty() {
            c.arg("--dial").arg(dial);
        }
        if let Some(bug) = &self.bug {
            c.arg("--bug").arg(bug);
        }
        if let Some(rate) = options.clock_rate_permille {
            c.arg("--clock-rate")
                .arg(format!("{}", f64::from(rate) / 1000.0));
        }
        c.arg("--seed")
            .arg(self.seed.wrapping_mul(1000).wrapping_add(id).to_string());
        if self.trace {
            c.arg("--trace").arg(trace_path(&self.layout.log_dir, id));
        }
        c
    }
}

struct LockdClient {
    client: Client,
}

/// The harness's lockd client of `cluster` (the i-th address is node i+1) under
/// `client_id`: the same client and outcome mapping for the native workload and for
/// `locksmith client ... lines`, the Rust side of the exec protocol.
pub fn lock_client(cluster: Vec<SocketAddr>, client_id: u64) -> Box<dyn LockClient> {
    lock_client_with(cluster, client_id, lockd::client::ClientOptions::default())
}

/// [`lock_client`] with explicit client options (a client-side mutant of `lockd --bug`).
fn lock_client_with(
    cluster: Vec<SocketAddr>,
    client_id: u64,
    options: lockd::client::ClientOptions,
) -> Box<dyn LockClient> {
    Box::new(LockdClient {
        client: Client::with_options(cluster, client_id, options),
    })
}

/// Maps a client result to the history's outcome; `node` is the node whose answer decided
/// it (lockd's `*_traced` calls), recorded for ok and definite failures.
fn outcome<T>(
    result: Result<T, ClientError>,
    token: impl FnOnce(T) -> Option<u64>,
    node: Option<NodeId>,
) -> Outcome {
    match result {
        Ok(v) => Outcome::Ok {
            token: token(v),
            node,
        },
        Err(ClientError::Unavailable(_)) => Outcome::Fail {
            error: ErrorWord::Unavailable,
            node: None,
        },
        Err(e) if e.is_definite() => Outcome::Fail {
            error: error_word(&e),
            node,
        },
        Err(e) => Outcome::Info(error_word(&e)),
    }
}

/// The history's word for a lockd client error. lockd's client knows nothing of the
/// history (DESIGN: lockd knows nothing of the harness), so the mapping lives here.
pub fn error_word(error: &ClientError) -> ErrorWord {
    match error {
        ClientError::Busy => ErrorWord::Busy,
        ClientError::NotHolder => ErrorWord::NotHolder,
        ClientError::Invalid(_) => ErrorWord::Invalid,
        ClientError::Unavailable(_) => ErrorWord::Unavailable,
        ClientError::Unknown(_) => ErrorWord::Timeout,
        ClientError::SessionExpired(_) => ErrorWord::SessionExpired,
    }
}

impl LockClient for LockdClient {
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        lease_ms: u64,
        wait_ms: u64,
        deadline: Instant,
    ) -> BoxFuture<'a, Outcome> {
        async move {
            let answered = self
                .client
                .acquire_traced(key, lease_ms, wait_ms, deadline)
                .await;
            outcome(answered.result, Some, answered.node)
        }
        .boxed()
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        token: u64,
        deadline: Instant,
    ) -> BoxFuture<'a, Outcome> {
        async move {
            let answered = self.client.release_traced(key, token, deadline).await;
            outcome(answered.result, |()| None, answered.node)
        }
        .boxed()
    }

    fn departure(&self) -> Option<BoxFuture<'static, bool>> {
        Some(self.client.departure(DEPARTURE_SETTLES_WITHIN).boxed())
    }

    fn crash(&self) {
        self.client.crash();
    }
}

/// How long a departing client's connections get to write the cancellations of the call it
/// dropped ([`lockd::client::Client::departure`]): a dispatch task does so on its next poll.
const DEPARTURE_SETTLES_WITHIN: std::time::Duration = std::time::Duration::from_millis(100);

fn role_name(role: Role) -> String {
    match role {
        Role::Leader => "leader",
        Role::Follower => "follower",
        Role::Candidate => "candidate",
        Role::PreCandidate => "pre-candidate",
    }
    .to_owned()
}

impl System for Lockd {
    fn catches_up_after_heal(&self) -> bool {
        true
    }

    fn session_timeout_ms(&self) -> Option<u64> {
        // The binary has no flag for it: every node runs the default.
        Some(lockd::lock::SessionLimits::DEFAULT.timeout_ms)
    }

    fn releases_cancelled_grants(&self) -> bool {
        // A call's cancellation (tarpc's `Cancel`) after its grant was answered makes the
        // node release it as an orphan (`server::clients::CancelWatch`), and a connection
        // that ends first withdraws the request or orphans its grant. The harness's leavers
        // drop their call (its cancellation goes out before the connection closes).
        true
    }

    fn releases_phantom_locks(&self) -> bool {
        true
    }

    fn traces(&self) -> bool {
        self.trace
    }

    fn name(&self) -> &'static str {
        "lockd"
    }

    fn launcher(
        &self,
        layout: &Layout,
        dial: BTreeMap<(NodeId, NodeId), SocketAddr>,
    ) -> Result<Box<dyn Launcher>, Error> {
        Ok(Box::new(LockdLauncher {
            binary: self.binary.clone(),
            bug: self.bug.clone(),
            seed: self.seed,
            trace: self.trace,
            layout: layout.clone(),
            dial,
        }))
    }

    fn client(&self, layout: &Layout, client_id: u64) -> Box<dyn LockClient> {
        // The client library's own mutant rides on `--bug` too (the nodes ignore it).
        let trust_retry_after_unknown =
            self.bug.as_deref() == Some(lockd::bugs::Bug::TrustRetryAfterUnknown.name());
        let mut options = lockd::client::ClientOptions::default();
        options.trust_retry_after_unknown = trust_retry_after_unknown;
        options.invalid_after_sent =
            self.bug.as_deref() == Some(lockd::bugs::Bug::InvalidAfterSent.name());
        lock_client_with(layout.client_addrs(), client_id, options)
    }

    fn status<'a>(&'a self, layout: &'a Layout) -> BoxFuture<'a, Vec<NodeView>> {
        let control = self.control(layout);
        async move {
            let answers = control.status_all().await;
            answers
                .into_iter()
                .flatten()
                .map(|s| NodeView {
                    node: s.raft.id,
                    role: role_name(s.raft.role),
                    term: s.raft.term,
                    leader: s.raft.leader,
                    commit_index: s.raft.commit_index,
                })
                .collect()
        }
        .boxed()
    }

    fn set_clock<'a>(
        &'a self,
        layout: &'a Layout,
        id: NodeId,
        rate_permille: u32,
        jump_ms: i64,
    ) -> BoxFuture<'a, Result<(), Error>> {
        async move {
            let admin = (layout.admin.get(&id))
                .ok_or_else(|| Error::Nemesis(format!("n{id} has no admin endpoint")))?;
            let secret = if lockd::sys::simulated() {
                sim_admin_secret(self.seed)
            } else {
                let path = layout.data_dir[&id].join(lockd::rpc::ADMIN_SECRET_FILE);
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| Error::Nemesis(format!("n{id}: {}: {e}", path.display())))?;
                text.trim().to_owned()
            };
            let rate = f64::from(rate_permille) / 1000.0;
            lockd::client::admin_set_clock(*admin, &secret, rate, jump_ms, ADMIN_TIMEOUT_MS)
                .await
                .map(|_| ())
                .map_err(|e| Error::Nemesis(format!("n{id}: set_clock: {e}")))
        }
        .boxed()
    }
}

/// A node's harness switches in the simulator: its pause gate and its peer links' faults.
pub type SimSwitches = (lockd::server::PauseSwitch, lockd::server::LinkFaultsSwitch);

impl Lockd {
    /// lockd's nodes in the turmoil world (`locksmith sim`): adds each member as the host
    /// `n<ID>` running the real server, what the real-process world says with a [`Launcher`]
    /// command line said with a server config. A node that stops on its own (an error, or a
    /// panic with its message, at what simulated time) is told to `stopped`; a crash is the
    /// host's future being dropped, not an end. Returns each node's switches.
    pub fn add_sim_hosts(
        &self,
        sim: &mut turmoil::Sim<'_>,
        members: &[NodeId],
        snapshot_threshold: u64,
        bounds: SimBounds,
        traces: Option<&BTreeMap<NodeId, lockd::trace::MemoryTrace>>,
        stopped: impl Fn(NodeId, String) + Clone + 'static,
    ) -> Result<BTreeMap<NodeId, SimSwitches>, String> {
        let bugs = match self.bug.as_deref().map(str::parse::<lockd::bugs::Bug>) {
            Some(Ok(bug)) => lockd::bugs::BugSet::of(&[bug]),
            Some(Err(e)) => return Err(format!("--bug: {e}")),
            None => lockd::bugs::BugSet::NONE,
        };
        let mut switches = BTreeMap::new();
        for &id in members {
            let (pause, pause_gate) = lockd::server::PauseSwitch::new();
            let (links, link_faults) = lockd::server::LinkFaultsSwitch::new();
            switches.insert(id, (pause, links));
            let members = members.to_vec();
            let seed = (self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_add(id);
            let trace = traces.and_then(|t| t.get(&id).cloned());
            let stopped = stopped.clone();
            let secret = sim_admin_secret(self.seed);
            sim.host(crate::sim::world::node_name(id), move || {
                let mut raft = lockd::raft::Config::new(id, members.clone());
                raft.seed = seed;
                raft.bugs = bugs;
                raft.snapshot_threshold_entries = snapshot_threshold;
                // A window shorter than the threshold, so that a follower behind by more
                // still needs InstallSnapshot (in chunks small enough to take several).
                raft.snapshot_trailing_entries = snapshot_threshold / 4;
                raft.snapshot_chunk_bytes = 4096;
                if let Some(max) = bounds.keys_per_session_max {
                    raft.keys_per_session_max = max;
                }
                if let Some(max) = bounds.uncommitted_entries_max {
                    raft.uncommitted_entries_max = max;
                }
                if let Some(ms) = bounds.session_timeout_ms {
                    raft.session_limits.timeout_ms = ms;
                }
                if let Some(max) = bounds.append_entries_max {
                    raft.append_entries_max = max;
                }
                let (members, pause_gate) = (members.clone(), pause_gate.clone());
                let (link_faults, trace) = (link_faults.clone(), trace.clone());
                let (stopped, secret) = (stopped.clone(), secret.clone());
                async move {
                    let at = |id, port| {
                        SocketAddr::new(turmoil::lookup(crate::sim::world::node_name(id)), port)
                    };
                    let peers = (members.iter())
                        .map(|&m| (m, at(m, crate::sim::world::PEER_PORT)))
                        .collect();
                    let listen = at(id, crate::sim::world::CLIENT_PORT);
                    let mut config =
                        lockd::server::ServerConfig::new(raft, peers, listen, "/data".into());
                    config.pause_gate = Some(pause_gate);
                    config.link_faults = Some(link_faults);
                    config.trace_memory = trace;
                    let admin = at(id, SIM_ADMIN_PORT);
                    config.admin = Some(lockd::server::AdminConfig::new(admin, secret.clone()));
                    if let Some(max) = bounds.peer_connections_max {
                        config.peer_connections_max = max;
                    }
                    if let Some(ms) = bounds.peer_reply_wait_ms {
                        config.peer_reply_wait_ms = ms;
                    }
                    let ms = || turmoil::sim_elapsed().unwrap_or_default().as_millis();
                    let run = std::panic::AssertUnwindSafe(lockd::server::run(config));
                    match run.catch_unwind().await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => stopped(id, format!("exited at {} ms: {e}", ms())),
                        Err(panic) => {
                            let message = crate::capture::panic_message(&*panic);
                            stopped(id, format!("panicked at {} ms: {message}", ms()));
                        }
                    }
                    Ok(())
                }
            });
        }
        Ok(switches)
    }
}

/// Request bounds a simulated seed draws smaller than the server's defaults (`None`: the
/// default), so that clients reach them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimBounds {
    /// `raft::Config::keys_per_session_max`.
    pub keys_per_session_max: Option<u64>,
    /// `raft::Config::uncommitted_entries_max`.
    pub uncommitted_entries_max: Option<usize>,
    /// `raft::Config::session_limits.timeout_ms`, the same on every node.
    pub session_timeout_ms: Option<u64>,
    /// `raft::Config::append_entries_max`: a few entries per AppendEntries, so that a
    /// lagging follower catches up in many rounds and its match index stops on entries of
    /// older terms (where the commit rules matter: `raft::invariants::commit_rules`).
    pub append_entries_max: Option<usize>,
    /// `server::ServerConfig::peer_connections_max`: a few more than the peers, so that
    /// peer connections whose end never arrived (a partition that lost the close) reach it.
    pub peer_connections_max: Option<usize>,
    /// `server::ServerConfig::peer_reply_wait_ms`: 0 on half the seeds, where every answer
    /// of a node goes out on its own link (a call per answer) instead of on the reply of
    /// the call that brought what it answers.
    pub peer_reply_wait_ms: Option<u64>,
}
