//! `locksmith sim`: the harness ([`crate::harness`]) in the turmoil world. One seed is one
//! run of the real lockd (`Lockd::add_sim_hosts`: each node a turmoil host on a simulated
//! network, clock and disk) driven by the harness's own workload, faults, recovery and
//! probe, on one thread; the same seed gives the same run, byte for byte (`tests/sim.rs`).
//! The simulator's own: the turmoil world ([`world`]), seeds, children and sharding
//! (`cmd.rs`), and shrinking (`shrink.rs`). A seed's options are a chaos run's
//! ([`SimCase::options`]), so a failing seed prints its rerun line and the `locksmith test`
//! command of the same plan.

pub mod cmd;
pub mod shrink;
pub mod world;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use checker::Verdict;
use history::Op;
use lockd::raft::NodeId;

use crate::harness::recorder::Recorder;
use crate::harness::swarm::OptionsDraw;
use crate::harness::workload::ClientPauses;
use crate::harness::{self, Execution, TestOptions, World};
use crate::net::Grudge;
use crate::rng::Rng;
use crate::store::Results;
use world::{Control, HARNESS_HOST, SimNet, SimNodes};

/// The simulator's step, ms: hosts run in lockstep, and messages move once per step.
pub const TICK_MS: u64 = 4;
/// The nodes' log filter unless `LOCKSMITH_SIM_LOG` says otherwise. `turmoil::sim` stays at
/// info: its `node` span names the host of every line, which the store splits by node.
const SIM_LOG_DEFAULT: &str = "info,tarpc=warn,turmoil=warn,turmoil::sim=info";
/// Simulated time beyond the fault phase, drain, recovery and probe before a run is stuck, ms.
const OVERRUN_MS: u64 = 40_000;
/// Each seed's snapshot threshold (entries applied between snapshots) is drawn from here.
const SNAPSHOT_THRESHOLD_MIN: u64 = 30;
const SNAPSHOT_THRESHOLD_MAX: u64 = 400;
/// The torn-write disk: writes survive a crash only in whole blocks of this size ...
const TORN_BLOCK_BYTES: u64 = 512;
/// ... and an unsynced write reaches the disk anyway with this probability.
const TORN_SYNC_PROBABILITY: f64 = 0.05;
const NET_STREAM: u64 = 0x5157_0e70;
/// The stream of a seed's request bounds (`SimBounds`).
const BOUNDS_STREAM: u64 = 0xb0_0d5;
const TCP_BACKLOG: usize = 4096;

/// One simulated run: everything that decides it. Its options are the harness's, the same
/// data as a chaos run's plan.txt; only the logs and traces are the simulator's.
#[derive(Clone, Debug)]
pub struct SimCase {
    /// Seed, nodes, clients, keys, fault kinds, bug, dropped faults: they decide the run.
    pub options: TestOptions,
    /// How a seed's options are made (the seed's swarm draw, or the defaults; then pins).
    pub draw: OptionsDraw,
    /// Keep the nodes' logs (a rerun of a failing seed; slower).
    pub logs: bool,
    /// Where the nodes' traces go: `DIR/seed-S/node-logs/nI.trace.jsonl` on the real disk
    /// (for `locksmith model replay DIR/seed-S`), which changes nothing in the run. The nodes
    /// trace into memory, which the replay reads; the files are written after the verdict,
    /// for a seed that did not pass, or for every seed with `trace_files`. Without `--trace
    /// DIR` a child uses a temporary folder of its own, unless `no_trace`.
    pub trace_root: Option<std::path::PathBuf>,
    /// `--trace DIR`: write every seed's trace files, not only a failing seed's.
    pub trace_files: bool,
    /// `--no-trace`: no traces, no trace replay.
    pub no_trace: bool,
    /// The process ends after this case (a seed's child): the judge leaves the replayed
    /// traces to the exit instead of freeing them line by line (2 % of a seed's CPU, perf,
    /// seeds 1..40). Off in a process that runs many cases, such as the tests.
    pub exits_after: bool,
}

impl SimCase {
    /// Seed `seed`'s case under `draw` (its options, no logs, no traces).
    pub fn of(draw: OptionsDraw, seed: u64) -> Self {
        let (options, logs, trace_root) = (draw.options(seed), false, None);
        let no_trace = false;
        SimCase {
            options,
            draw,
            logs,
            trace_root,
            trace_files: false,
            no_trace,
            exits_after: false,
        }
    }

    /// The fixed case of `seed` (`--no-swarm`; [`OptionsDraw::simulated`]).
    pub fn new(seed: u64) -> Self {
        SimCase::of(OptionsDraw::simulated(false), seed)
    }

    /// Seed `seed`'s swarm case, `locksmith sim`'s default ([`OptionsDraw::simulated`]).
    pub fn swarm(seed: u64) -> Self {
        SimCase::of(OptionsDraw::simulated(true), seed)
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.options.seed
    }

    /// This case with another seed.
    pub fn with_seed(&self, seed: u64) -> SimCase {
        let options = self.draw.options(seed);
        SimCase {
            options,
            ..self.clone()
        }
    }

    /// This seed's trace folder, when traces are on.
    pub fn trace_dir(&self) -> Option<std::path::PathBuf> {
        (self.trace_root.as_ref()).map(|root| root.join(format!("seed-{}", self.seed())))
    }

    /// The command that reruns exactly this case.
    pub fn rerun_command(&self) -> String {
        let plain = OptionsDraw::simulated(self.draw.swarm).options(self.seed());
        let flags = self.options.differing_flags(&plain, "clients");
        let mut line = format!("locksmith sim --seeds {}{flags}", self.seed());
        if self.options.buggify != plain.buggify {
            let on = if self.options.buggify { "on" } else { "off" };
            let _ = write!(line, " --buggify {on}");
        }
        if !self.draw.swarm {
            line.push_str(" --no-swarm");
        }
        if let (Some(root), true) = (&self.trace_root, self.trace_files) {
            let _ = write!(line, " --trace {}", root.display());
        } else if self.no_trace {
            line.push_str(" --no-trace");
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
    /// The nodes' log, when `case.logs` was set (one line per event, node and simulated
    /// time first).
    pub logs: Option<String>,
    /// The coverage probes the run reached (`lockd::probe`).
    pub probes: Vec<&'static str>,
}

impl CaseResult {
    /// The merged verdict.
    pub fn verdict(&self) -> &Verdict {
        &self.results.verdict
    }
}

/// Runs one case to its verdict. Never panics on a lockd failure: a node that stops is part
/// of the verdict (node health), and a run the simulator could not finish is `unknown`.
///
/// Each case runs on a thread of its own: something in the stack keeps per-thread state
/// from one simulation to the next on the same thread (two seeds run one after the other on
/// one thread gave another history than each alone), and a fresh thread replays exactly.
pub fn run_case(case: &SimCase) -> CaseResult {
    crate::capture::record_panics();
    let started = std::time::Instant::now();
    let simulated = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name(format!("sim-seed-{}", case.seed()))
            .spawn_scoped(scope, || {
                let clock = || turmoil::sim_elapsed().unwrap_or_default();
                let (env, default) = ("LOCKSMITH_SIM_LOG", SIM_LOG_DEFAULT);
                let run = |logs| simulate(case, logs);
                let _ = crate::capture::take_panics();
                let (simulated, logs) =
                    crate::capture::capturing(case.logs, env, default, clock, run);
                let panics = crate::capture::take_panics();
                Simulated {
                    logs,
                    panics,
                    ..simulated
                }
            })
            .ok()
            .and_then(|h| h.join().ok())
    });
    let simulated = simulated
        .unwrap_or_else(|| Simulated::failed("the simulation thread panicked (see stderr)"));
    // Taken before the trace replay, whose cores would mark probes of their own.
    let probes = lockd::probe::take();
    CaseResult {
        probes,
        ..judge(case, simulated, started.elapsed())
    }
}

/// What a simulation left.
#[derive(Default)]
struct Simulated {
    ops: Vec<Op>,
    execution: Option<Execution>,
    error: Option<String>,
    logs: Option<String>,
    sim_ms: u64,
    /// Each node's trace, when traces are on.
    traces: Option<BTreeMap<NodeId, lockd::trace::MemoryTrace>>,
    /// Panics on the simulation's thread ([`crate::capture::take_panics`]): of a node's
    /// host (also a stop of that node), of a task a node spawned (which ends that task
    /// only, silently), or of the harness. Each is a defect: node health names it.
    panics: Vec<String>,
}

impl Simulated {
    fn failed(error: impl Into<String>) -> Simulated {
        let error = Some(error.into());
        Simulated {
            error,
            ..Simulated::default()
        }
    }
}

/// What a seed draws for its simulated world beyond its [`TestOptions`]: plan.txt lists it
/// (`# simulator draws`), and the same seed draws it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WorldDraws {
    /// The network's longest message latency, ms (the shortest is 1).
    pub max_latency_ms: u64,
    /// The nodes' snapshot threshold, entries.
    pub snapshot_threshold: u64,
    /// Whether a crash tears unsynced writes at 512-byte blocks.
    pub torn_writes: bool,
    /// The request bounds ([`sim_bounds`]).
    pub bounds: crate::systems::lockd::SimBounds,
}

impl WorldDraws {
    pub(crate) fn of(options: &TestOptions) -> WorldDraws {
        let mut net_rng = Rng::derive(options.seed, NET_STREAM, 0);
        let max_latency_ms = net_rng.range(2, 25);
        // Snapshots, compaction and InstallSnapshot come into play within a run only with a
        // threshold far below the server's default of 1000 entries.
        let snapshot_threshold = net_rng.range(SNAPSHOT_THRESHOLD_MIN, SNAPSHOT_THRESHOLD_MAX);
        // Half the seeds crash on a disk that tears unsynced writes at 512-byte blocks and
        // lets a few unsynced writes through (storage must take a torn last record as never
        // written); the other half lose every unsynced write whole.
        let torn_writes = net_rng.chance(1, 2);
        WorldDraws {
            max_latency_ms,
            snapshot_threshold,
            torn_writes,
            bounds: sim_bounds(options),
        }
    }

    /// plan.txt's `# simulator draws` section: one `name value` line each, then the fault
    /// points the seed enabled.
    pub(crate) fn describe(&self, options: &TestOptions) -> String {
        let or_default = |v: Option<u64>| v.map_or_else(|| "default".to_owned(), |v| v.to_string());
        let points = if options.buggify {
            lockd::buggify::enabled_points(options.seed).join(" ")
        } else {
            "none (--buggify off)".to_owned()
        };
        format!(
            "# simulator draws\nmax_latency_ms {}\nsnapshot_threshold {}\ntorn_writes {}\n\
             keys_per_session_max {}\nuncommitted_entries_max {}\nsession_timeout_ms {}\n\
             append_entries_max {}\npeer_reply_wait_ms {}\nfault_points {points}\n",
            self.max_latency_ms,
            self.snapshot_threshold,
            self.torn_writes,
            or_default(self.bounds.keys_per_session_max),
            or_default(self.bounds.uncommitted_entries_max.map(|v| v as u64)),
            or_default(self.bounds.session_timeout_ms),
            or_default(self.bounds.append_entries_max.map(|v| v as u64)),
            or_default(self.bounds.peer_reply_wait_ms),
        )
    }
}

/// The request bounds a seed draws (issue 24: no seed ever reached one), from a stream of
/// their own so that no other draw of a seed moved. One seed in three lets a session hold
/// one key; one in four lets the leader hold only 0-8 uncommitted entries more than there
/// are clients: a retry of a request already in the log is then refused (`Invalid`) by a
/// bound its own first attempt reached, which the client must report unknown, not failed. (A
/// bound below the clients' count sheds load for good: 2-16 entries for 64 clients on one
/// key starved two clients for the 10 s of the liveness check, seed 534.) One in three gives
/// sessions a timeout of 3-12 s instead of 10 minutes, so that sessions expire within the
/// run and liveness rule S judges each expiry against it (a run is shorter than the
/// default).
pub(crate) fn sim_bounds(options: &TestOptions) -> crate::systems::lockd::SimBounds {
    let mut bounds_rng = Rng::derive(options.seed, BOUNDS_STREAM, 0);
    let clients = options.concurrency;
    let keys_per_session_max = bounds_rng.chance(1, 3).then_some(1);
    let uncommitted_entries_max = bounds_rng
        .chance(1, 4)
        .then(|| (clients + bounds_rng.range(0, 8)) as usize);
    let session_timeout_ms = bounds_rng
        .chance(1, 3)
        .then(|| bounds_rng.range(3_000, 12_000));
    // Last on the stream, so that no other draw moved. At least one entry per 8 clients:
    // one entry per AppendEntries under 64 clients left a 7-node cluster unable to catch up
    // within the recovery bound (seed 173), a load no operator would give that setting.
    let append_entries_max = bounds_rng
        .chance(1, 3)
        .then(|| bounds_rng.range(1, 8).max(clients / 8) as usize);
    // Last again. One in three: the peers plus 1-3 spare slots (a review found connections
    // whose close a partition lost filling all 64 slots, after which no peer reached the
    // node; a run is far too short to leak 64).
    let peer_connections_max = bounds_rng
        .chance(1, 3)
        .then(|| (options.nodes.saturating_sub(1) + bounds_rng.range(1, 4)) as usize);
    // Last again. Half the seeds without answers on the peer calls' replies (the world
    // before them, whose deeper pipeline finds some mutants more often); the other half
    // run the default.
    let peer_reply_wait_ms = bounds_rng.chance(1, 2).then_some(0);
    crate::systems::lockd::SimBounds {
        keys_per_session_max,
        uncommitted_entries_max,
        session_timeout_ms,
        append_entries_max,
        peer_connections_max,
        peer_reply_wait_ms,
    }
}

/// Checks a simulated run through the one pipeline, node health and traces included.
fn judge(case: &SimCase, simulated: Simulated, wall: Duration) -> CaseResult {
    let options = &case.options;
    let mut execution = simulated
        .execution
        .unwrap_or_else(|| Execution::unfinished(options));
    // A panicked task of a node that went on running (a peer link that died with the node
    // up, seen before only as clients unserved after the final heal) is named like a node
    // that stopped on its own.
    let panics = simulated.panics.iter();
    (execution.exited).extend(panics.map(|p| format!("a task on the simulation's thread: {p}")));
    let error = (simulated.error)
        .or_else(|| (simulated.ops.is_empty()).then(|| "the harness recorded nothing".into()));
    // The nodes' traces, from memory, through the model.
    let mut extra = harness::run_checks(&execution, error.as_deref(), None);
    let replayed = simulated.traces.map(|traces| {
        let dir = case.trace_dir().unwrap_or_default().join("node-logs");
        let named = traces.into_iter();
        let named =
            named.map(|(id, t)| (crate::systems::lockd::trace_path(&dir, id), t.take_turns()));
        crate::replay::replay_lines(named.collect())
    });
    extra.extend(
        replayed
            .as_ref()
            .map(crate::replay::RunReplay::check_result),
    );
    let session_timeout_ms = (sim_bounds(options).session_timeout_ms)
        .unwrap_or(lockd::lock::SessionLimits::DEFAULT.timeout_ms);
    use checker::liveness::CancelledGrants;
    let liveness = checker::liveness::LivenessOptions::default()
        .with_session_timeout_ms(Some(session_timeout_ms))
        // lockd's `System::releases_cancelled_grants`.
        .with_cancelled_grants(CancelledGrants::Released);
    let check_options = checker::Options::default().with_liveness(liveness);
    let checked = crate::store::pipeline::check_ops(&simulated.ops, &check_options, extra);
    let ops = simulated.ops.len() as u64;
    let mut results = Results::of(options, "lockd", "simulation", &execution, ops);
    results.duration_ms = wall.as_millis() as u64;
    results.simulated_ms = Some(simulated.sim_ms);
    results.rerun = vec![case.rerun_command(), options.test_command()];
    results.judge(checked.output);
    // The trace files: what the store, `locksmith model replay` and the message diagram read.
    if let Some(replayed) = &replayed
        && (case.trace_files || !results.verdict.is_valid())
        && let Err(e) = replayed.write_files()
    {
        eprintln!("locksmith sim: seed {}: the traces: {e}", case.seed());
    }
    if case.exits_after {
        std::mem::forget(replayed);
    }
    CaseResult {
        case: case.clone(),
        ops: simulated.ops,
        results,
        logs: simulated.logs,
        probes: Vec::new(),
    }
}

/// Builds the simulation of `case`, runs it to the end, and returns what it recorded.
fn simulate(case: &SimCase, logs: Option<Arc<Mutex<Vec<u8>>>>) -> Simulated {
    let options = case.options.clone();
    let nodes: Vec<NodeId> = (1..=options.nodes).collect();
    // Traces go to memory, fresh for each run (the core appends across restarts); the
    // files are written after the verdict. Leftovers of an earlier run are removed.
    let traces: Option<BTreeMap<NodeId, lockd::trace::MemoryTrace>> = case.trace_dir().map(|dir| {
        let _ = std::fs::remove_dir_all(dir.join("node-logs"));
        let each = nodes
            .iter()
            .map(|id| (*id, lockd::trace::MemoryTrace::new()));
        each.collect()
    });
    let WorldDraws {
        max_latency_ms,
        snapshot_threshold,
        torn_writes,
        bounds,
    } = WorldDraws::of(&options);
    let run_ms = (options.time_s + options.recovery_s) * 1000
        + crate::harness::phases::DRAIN_TIMEOUT_MS
        + OVERRUN_MS;
    let mut builder = turmoil::Builder::new();
    builder
        .rng_seed(options.seed)
        .tick_duration(Duration::from_millis(TICK_MS))
        .simulation_duration(Duration::from_millis(run_ms))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(max_latency_ms))
        .enable_random_order()
        // A paused node accepts nothing while up to 64 clients reconnect to it: turmoil
        // panics past 64 pending connections, where a kernel queues 4096 (somaxconn).
        .tcp_capacity(TCP_BACKLOG);
    if torn_writes {
        builder
            .fs()
            .block_size(TORN_BLOCK_BYTES)
            .sync_probability(TORN_SYNC_PROBABILITY);
    }
    let mut sim = builder.build();
    lockd::buggify::configure(options.buggify.then_some(options.seed));

    let control = Control::new(nodes.clone(), logs);
    let lockd = crate::systems::lockd::Lockd::simulated(options.bug.clone(), options.seed);
    let stopped = {
        let control = control.clone();
        move |id, how| control.node_stopped(id, how)
    };
    match lockd.add_sim_hosts(
        &mut sim,
        &nodes,
        snapshot_threshold,
        bounds,
        traces.as_ref(),
        stopped,
    ) {
        Ok(switches) => control.attach(switches),
        Err(e) => return Simulated::failed(e),
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
        sim.client(HARNESS_HOST, async move {
            control.start_clocks();
            let world = World {
                system: Arc::new(lockd),
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
                    tokio::spawn(world::record_crash_points(
                        control.clone(),
                        recorder.clone(),
                    ));
                    Ok(harness::execute(&options, world, recorder).await)
                }
                Err(e) => Err(e.to_string()),
            };
            *finished.lock().unwrap_or_else(|p| p.into_inner()) = Some(outcome);
            Ok(())
        });
    }

    let mut cut = Grudge::none();
    let mut error = loop {
        let step = sim.step();
        control.crash_points(sim.elapsed());
        control.apply(&mut sim, &mut cut, max_latency_ms);
        match step {
            Ok(true) => break None,
            Ok(false) => {}
            Err(e) => break Some(e.to_string()),
        }
    };
    let sim_ms = sim.elapsed().as_millis() as u64;
    drop(sim);
    lockd::buggify::take();
    let execution = match finished.lock().unwrap_or_else(|p| p.into_inner()).take() {
        Some(Ok(execution)) => Some(execution),
        Some(Err(e)) => {
            error = error.or(Some(format!("the cluster never came up: {e}")));
            // Nothing in a simulated world stops a node but the node itself (a crash point
            // is the simulator's, and not an exit): one that stopped before the cluster came
            // up is a defect, which node health names, not only a run that could not finish.
            let exited = control.every_exit();
            (!exited.is_empty()).then(|| Execution {
                exited,
                ..Execution::unfinished(&case.options)
            })
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
        traces,
        panics: Vec::new(),
    }
}
