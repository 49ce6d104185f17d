//! `locksmith sim`: the harness ([`crate::harness`]) in the turmoil world.
//!
//! One seed is one run of the real lockd (the server's event loop, the client library, the
//! storage code, the Raft core and the lock table, each node a turmoil host on a simulated
//! network, clock and disk) driven by the harness's own workload, fault families, fault
//! driver, final heal, recovery and phantom probe, all on one thread. Nothing of lockd or
//! of the harness is re-implemented here: lockd's sockets and files go through `lockd::sys`,
//! and the harness reaches the simulation only through the seams that [`world`] implements.
//! The same seed gives the same run, byte for byte (`tests/sim.rs` checks the history).
//!
//! What is the simulator's own: the turmoil world ([`world`]: seeded message latency and
//! host order, a snapshot threshold per seed, a disk that tears unsynced writes on half the
//! seeds), the seeds and their child processes, sharding and the store of a failing seed
//! (`cmd.rs`), and shrinking (`shrink.rs`). A seed's options are a chaos run's
//! ([`SimCase::options`]), so a failing seed prints both its `locksmith sim` rerun line and
//! the `locksmith test` command that tries the same plan on real processes.

pub mod cmd;
pub mod shrink;
pub mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use checker::Verdict;
use history::{Op, Process};
use lockd::bugs::{Bug, BugSet};
use lockd::raft::{Config, NodeId};
use lockd::server::{LinkFaultsSwitch, PauseSwitch, ServerConfig};

use crate::faults::FaultKind;
use crate::harness::recorder::Recorder;
use crate::harness::schedule::Planned;
use crate::harness::workload::ClientPauses;
use crate::harness::{self, Execution, TestOptions, World};
use crate::net::Grudge;
use crate::rng::Rng;
use crate::store::Results;
use world::{CLIENT_PORT, Control, HARNESS_HOST, PEER_PORT, SimNet, SimNodes, node_name};

/// The simulator's step, ms: hosts run in lockstep, and messages move once per step.
pub const TICK_MS: u64 = 4;
/// Simulated time allowed beyond the fault phase, the drain, the recovery bound and the
/// probe before the run is declared stuck, ms.
const OVERRUN_MS: u64 = 40_000;
/// Each seed's snapshot threshold (entries applied between snapshots) is drawn from here.
const SNAPSHOT_THRESHOLD_MIN: u64 = 30;
const SNAPSHOT_THRESHOLD_MAX: u64 = 400;
/// The torn-write disk: writes survive a crash only in whole blocks of this size ...
const TORN_BLOCK_BYTES: u64 = 512;
/// ... and an unsynced write reaches the disk anyway with this probability.
const TORN_SYNC_PROBABILITY: f64 = 0.05;
const NET_STREAM: u64 = 0x5157_0e70;

/// One simulated run: everything that decides it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimCase {
    /// The seed: the whole run follows from it and the fields below.
    pub seed: u64,
    /// Cluster size.
    pub nodes: u64,
    /// Client slots.
    pub clients: u64,
    /// Keys.
    pub keys: u64,
    /// Length of the fault phase, simulated seconds.
    pub time_s: u64,
    /// An injected bug of lockd.
    pub bug: Option<Bug>,
    /// The fault kinds in the plan.
    pub nemesis: Vec<FaultKind>,
    /// Planned fault ops (indexes into the plan) left out, for shrinking.
    pub drop_faults: BTreeSet<usize>,
    /// Keep the nodes' logs (a rerun of a failing seed; slower).
    pub logs: bool,
    /// Where the nodes' traces go (`locksmith sim --trace DIR`): this seed's nodes write
    /// `DIR/seed-S/node-logs/nI.trace.jsonl` (`lockd::trace`, on the real disk), which
    /// `locksmith model replay DIR/seed-S` feeds through the model. Writing them changes
    /// nothing in the simulated run.
    pub trace_root: Option<std::path::PathBuf>,
}

impl SimCase {
    /// The default case for `seed`: 5 nodes, 10 clients, 4 keys, 30 simulated seconds, every
    /// fault kind, netem's included (`slow` and `flaky`, which `locksmith test` uses only with
    /// hosts of their own).
    pub fn new(seed: u64) -> Self {
        SimCase {
            seed,
            nodes: 5,
            clients: 10,
            keys: 4,
            time_s: 30,
            bug: None,
            nemesis: crate::netem::default_kinds_with_hosts(),
            drop_faults: BTreeSet::new(),
            logs: false,
            trace_root: None,
        }
    }

    /// This seed's trace folder, when traces are on.
    pub fn trace_dir(&self) -> Option<std::path::PathBuf> {
        self.trace_root
            .as_ref()
            .map(|root| root.join(format!("seed-{}", self.seed)))
    }

    /// The harness's options for this case: the same data as a chaos run's plan.txt.
    pub fn options(&self) -> TestOptions {
        TestOptions {
            nodes: self.nodes,
            time_s: self.time_s,
            nemesis: self.nemesis.clone(),
            concurrency: self.clients,
            keys: u32::try_from(self.keys).unwrap_or(u32::MAX),
            seed: self.seed,
            bug: self.bug.map(|b| b.name().to_owned()),
            progress: false,
            drop_faults: self.drop_faults.clone(),
            ..TestOptions::default()
        }
    }

    /// The command that reruns exactly this case.
    pub fn rerun_command(&self) -> String {
        let mut line = format!("locksmith sim --seeds {}", self.seed);
        let default = SimCase::new(self.seed);
        if self.nodes != default.nodes {
            let _ = write!(line, " --nodes {}", self.nodes);
        }
        if self.clients != default.clients {
            let _ = write!(line, " --clients {}", self.clients);
        }
        if self.keys != default.keys {
            let _ = write!(line, " --keys {}", self.keys);
        }
        if self.time_s != default.time_s {
            let _ = write!(line, " --time-s {}", self.time_s);
        }
        if self.nemesis != default.nemesis {
            let kinds: Vec<&str> = self.nemesis.iter().map(|k| k.name()).collect();
            let kinds = if kinds.is_empty() {
                "none".to_owned()
            } else {
                kinds.join(",")
            };
            let _ = write!(line, " --nemesis {kinds}");
        }
        if let Some(bug) = self.bug {
            let _ = write!(line, " --bug {}", bug.name());
        }
        if !self.drop_faults.is_empty() {
            let dropped: Vec<String> = self.drop_faults.iter().map(|i| i.to_string()).collect();
            let _ = write!(line, " --drop-faults {}", dropped.join(","));
        }
        if let Some(root) = &self.trace_root {
            let _ = write!(line, " --trace {}", root.display());
        }
        line
    }
}

/// What one simulated run gave.
#[derive(Debug)]
pub struct CaseResult {
    /// The case.
    pub case: SimCase,
    /// The recorded history.
    pub ops: Vec<Op>,
    /// results.json, checks and node health included (the schema of a chaos run's).
    pub results: Results,
    /// The fault plan (before `drop_faults`), for `plan.txt` and shrinking.
    pub plan: Vec<Planned>,
    /// What each fault op did, in order (`at_ms verb value: outcome`, from the history's
    /// nemesis rows).
    pub faults: Vec<String>,
    /// The nodes' log, when `case.logs` was set (one line per event, node and simulated
    /// time first).
    pub logs: Option<String>,
    /// Simulated milliseconds the run took.
    pub sim_ms: u64,
}

impl CaseResult {
    /// The merged verdict.
    pub fn verdict(&self) -> &Verdict {
        &self.results.verdict
    }

    /// The explanation in words.
    pub fn explanation(&self) -> &str {
        &self.results.explanation
    }
}

/// The history as CSV schema v1 bytes (what `history.csv` holds).
pub fn history_csv(ops: &[Op]) -> Vec<u8> {
    let mut writer = match history::csv::Writer::new(Vec::new()) {
        Ok(writer) => writer,
        Err(_) => return Vec::new(),
    };
    for op in ops {
        if writer.write(op).is_err() {
            break;
        }
    }
    writer.into_inner().unwrap_or_default()
}

/// A digest of the history's bytes (`LOCKSMITH_SIM_DIGESTS=1 locksmith sim` prints it per
/// seed, to compare two runs of the same seeds).
pub fn history_digest(ops: &[Op]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    history_csv(ops).hash(&mut hasher);
    hasher.finish()
}

/// Runs one case to its verdict. Never panics on a lockd failure: a node that stops is part
/// of the verdict (node health), and a run the simulator could not finish is `unknown`.
///
/// Each case runs on a thread of its own: something in the stack keeps per-thread state
/// from one simulation to the next on the same thread (two seeds run one after the other on
/// one thread gave another history than each alone), and a fresh thread replays exactly.
pub fn run_case(case: &SimCase) -> CaseResult {
    let started = std::time::Instant::now();
    let simulated = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name(format!("sim-seed-{}", case.seed))
            .spawn_scoped(scope, || simulate_logged(case))
            .ok()
            .and_then(|h| h.join().ok())
    });
    let simulated = simulated.unwrap_or_else(|| Simulated {
        ops: Vec::new(),
        execution: None,
        error: Some("the simulation thread panicked (see stderr)".to_owned()),
        logs: None,
        sim_ms: 0,
    });
    judge(case, simulated, started.elapsed())
}

/// What a simulation left.
struct Simulated {
    ops: Vec<Op>,
    execution: Option<Execution>,
    error: Option<String>,
    logs: Option<String>,
    sim_ms: u64,
}

/// Checks a simulated run through the one pipeline, node health and traces included.
fn judge(case: &SimCase, simulated: Simulated, wall: Duration) -> CaseResult {
    let options = case.options();
    let execution = simulated
        .execution
        .unwrap_or_else(|| Execution::unfinished(&options));
    let error = simulated.error.or_else(|| {
        (execution
            .phase
            .counters
            .ops
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0
            && simulated.ops.is_empty())
        .then(|| "the harness recorded nothing".to_owned())
    });
    let mut extra = vec![harness::node_health(&execution.exited, error.as_deref())];
    if let Some(dir) = case.trace_dir() {
        // `--trace`: the nodes' traces through the model (`crate::replay`), written to the
        // real disk by the run that just ended.
        extra.push(crate::replay::check_run(&dir));
    }
    let checked =
        crate::store::pipeline::check_ops(&simulated.ops, &checker::Options::default(), extra);
    let mut results = Results::of(
        &options,
        "lockd",
        "simulation",
        &execution,
        simulated.ops.len() as u64,
    );
    results.duration_ms = wall.as_millis() as u64;
    results.simulated_ms = Some(simulated.sim_ms);
    results.rerun = vec![case.rerun_command(), options.test_command()];
    results.judge(checked.output);
    CaseResult {
        case: case.clone(),
        faults: fault_lines(&simulated.ops),
        ops: simulated.ops,
        results,
        plan: options.plan(),
        logs: simulated.logs,
        sim_ms: simulated.sim_ms,
    }
}

/// The nemesis rows' completions as `at_ms verb value: outcome` lines.
fn fault_lines(ops: &[Op]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    ops.iter()
        .filter(|op| op.process == Process::Nemesis)
        .filter(|op| !seen.insert((op.f.clone(), op.value.clone())) || op.f == "recover")
        .map(|op| {
            let outcome = if op.error.is_empty() { "ok" } else { &op.error };
            format!(
                "{:>6} {} {}: {outcome}",
                op.time_ns / 1_000_000,
                op.f,
                op.value
            )
        })
        .collect()
}

fn simulate_logged(case: &SimCase) -> Simulated {
    let logs = case.logs.then(|| Arc::new(Mutex::new(Vec::new())));
    let mut simulated = match &logs {
        Some(buffer) => {
            let subscriber = log_subscriber(buffer.clone());
            tracing::subscriber::with_default(subscriber, || simulate(case, logs.clone()))
        }
        None => simulate(case, None),
    };
    simulated.logs = logs.map(|buffer| {
        let bytes = buffer.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    });
    simulated
}

/// Builds the simulation of `case`, runs it to the end, and returns what it recorded.
fn simulate(case: &SimCase, logs: Option<Arc<Mutex<Vec<u8>>>>) -> Simulated {
    let options = case.options();
    let nodes: Vec<NodeId> = (1..=case.nodes).collect();
    // Traces go to the real disk, fresh for each run (the core appends across restarts).
    let trace_dir = case.trace_dir().map(|dir| dir.join("node-logs"));
    if let Some(dir) = &trace_dir {
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::create_dir_all(dir);
    }
    let mut net_rng = Rng::derive(case.seed, NET_STREAM, 0);
    let max_latency_ms = net_rng.range(2, 25);
    // Snapshots, compaction and InstallSnapshot come into play within a run only with a
    // threshold far below the server's default of 1000 entries.
    let snapshot_threshold = net_rng.range(SNAPSHOT_THRESHOLD_MIN, SNAPSHOT_THRESHOLD_MAX);
    // Half the seeds crash on a disk that tears unsynced writes at 512-byte blocks and lets
    // a few unsynced writes through (storage must take a torn last record as never
    // written); the other half lose every unsynced write whole.
    let torn_writes = net_rng.chance(1, 2);
    let run_ms = (options.time_s + options.recovery_s) * 1000
        + crate::harness::phases::DRAIN_TIMEOUT_MS
        + OVERRUN_MS;
    let mut builder = turmoil::Builder::new();
    builder
        .rng_seed(case.seed)
        .tick_duration(Duration::from_millis(TICK_MS))
        .simulation_duration(Duration::from_millis(run_ms))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(max_latency_ms))
        .enable_random_order();
    if torn_writes {
        builder
            .fs()
            .block_size(TORN_BLOCK_BYTES)
            .sync_probability(TORN_SYNC_PROBABILITY);
    }
    let mut sim = builder.build();

    let bugs = case.bug.map(|b| BugSet::of(&[b])).unwrap_or(BugSet::NONE);
    let mut switches = BTreeMap::new();
    let mut gates = BTreeMap::new();
    for &id in &nodes {
        let (pause, pause_gate) = PauseSwitch::new();
        let (links, links_gate) = LinkFaultsSwitch::new();
        switches.insert(id, (pause, links));
        gates.insert(id, (pause_gate, links_gate));
    }
    let control = Control::new(nodes.clone(), switches, logs);
    for &id in &nodes {
        let (pause_gate, links_gate) = gates.remove(&id).unwrap_or_else(|| unreachable!());
        let members = nodes.clone();
        let control = control.clone();
        let seed = case.seed;
        let trace = trace_dir
            .as_ref()
            .map(|dir| dir.join(format!("n{id}.trace.jsonl")));
        sim.host(node_name(id), move || {
            let members = members.clone();
            let pause_gate = pause_gate.clone();
            let links_gate = links_gate.clone();
            let control = control.clone();
            let trace = trace.clone();
            async move {
                let peers: BTreeMap<NodeId, std::net::SocketAddr> = members
                    .iter()
                    .map(|&m| {
                        let ip = turmoil::lookup(node_name(m));
                        (m, std::net::SocketAddr::new(ip, PEER_PORT))
                    })
                    .collect();
                let mut raft = Config::new(id, members.clone());
                raft.seed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(id);
                raft.bugs = bugs;
                raft.snapshot_threshold_entries = snapshot_threshold;
                let ip = turmoil::lookup(node_name(id));
                let listen = std::net::SocketAddr::new(ip, CLIENT_PORT);
                let mut config = ServerConfig::new(raft, peers, listen, "/data".into());
                config.pause_gate = Some(pause_gate);
                config.link_faults = Some(links_gate);
                config.trace = trace;
                let at = || turmoil::sim_elapsed().unwrap_or_default().as_millis();
                let run = std::panic::AssertUnwindSafe(lockd::server::run(config));
                match futures::FutureExt::catch_unwind(run).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => control.node_stopped(id, format!("exited at {} ms: {e}", at())),
                    Err(panic) => control.node_stopped(
                        id,
                        format!("panicked at {} ms: {}", at(), panic_message(&panic)),
                    ),
                }
                Ok(())
            }
        });
    }

    // The recorder is made inside the simulation, so its clock is the simulated one; the
    // slot keeps it for the history of a run that did not finish.
    let recorded: Arc<Mutex<Option<Arc<Recorder>>>> = Arc::new(Mutex::new(None));
    let finished: Arc<Mutex<Option<Result<Execution, String>>>> = Arc::new(Mutex::new(None));
    {
        let recorded = recorded.clone();
        let finished = finished.clone();
        let control = control.clone();
        let nodes = nodes.clone();
        let bug = options.bug.clone();
        sim.client(HARNESS_HOST, async move {
            control.start_clocks();
            let system = Arc::new(crate::systems::lockd::Lockd::simulated(bug, options.seed));
            let world = World {
                system,
                layout: world::layout(&nodes),
                nodes: Arc::new(SimNodes(control.clone())),
                net: Arc::new(SimNet(control.clone())),
                clients: Arc::new(ClientPauses::default()),
                blocking_pool: false,
            };
            let outcome = match harness::await_cluster(&world).await {
                Ok(_) => {
                    let recorder = Arc::new(Recorder::in_memory());
                    *recorded.lock().unwrap_or_else(|p| p.into_inner()) = Some(recorder.clone());
                    Ok(harness::execute(&options, world, recorder).await)
                }
                Err(e) => Err(e.to_string()),
            };
            *finished.lock().unwrap_or_else(|p| p.into_inner()) = Some(outcome);
            Ok(())
        });
    }

    let mut cut = Grudge::none();
    let mut error = None;
    loop {
        let step = sim.step();
        control.apply(&mut sim, &mut cut, max_latency_ms);
        match step {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    let sim_ms = sim.elapsed().as_millis() as u64;
    drop(sim);
    let execution = match finished.lock().unwrap_or_else(|p| p.into_inner()).take() {
        Some(Ok(execution)) => Some(execution),
        Some(Err(e)) => {
            error = error.or(Some(format!("the cluster never came up: {e}")));
            None
        }
        None => None,
    };
    let recorder = recorded.lock().unwrap_or_else(|p| p.into_inner()).take();
    Simulated {
        ops: recorder.map(|r| r.ops()).unwrap_or_default(),
        execution,
        error,
        logs: None,
        sim_ms,
    }
}

/// The text of a panic's payload.
fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// The nodes' log filter unless `LOCKSMITH_SIM_LOG` says otherwise. `turmoil::sim` stays at
/// info: its `node` span names the host of every line, which the store splits by node.
const SIM_LOG_DEFAULT: &str = "info,tarpc=warn,turmoil=warn,turmoil::sim=info";

/// A subscriber that writes the nodes' log into `buffer`, each line starting with the
/// simulated time (the host's name is in the `node` span turmoil opens). `LOCKSMITH_SIM_LOG`
/// sets the filter.
fn log_subscriber(buffer: Arc<Mutex<Vec<u8>>>) -> impl tracing::Subscriber + Send + Sync {
    use tracing_subscriber::fmt::format::Writer;
    use tracing_subscriber::fmt::time::FormatTime;

    struct SimTime;
    impl FormatTime for SimTime {
        fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
            let t = turmoil::sim_elapsed().unwrap_or_default();
            write!(w, "{:>10.3}s", t.as_secs_f64())
        }
    }
    let writer = move || BufferWriter(buffer.clone());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            std::env::var("LOCKSMITH_SIM_LOG").unwrap_or_else(|_| SIM_LOG_DEFAULT.to_owned()),
        ))
        .with_timer(SimTime)
        .with_ansi(false)
        .with_target(false)
        .with_writer(writer)
        .finish()
}

struct BufferWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for BufferWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut buffer) = self.0.lock() {
            buffer.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
