//! The driver of one simulated run: builds the turmoil simulation, applies the fault plan
//! between simulator steps, heals, and checks the history.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use checker::{CheckResult, Verdict};
use history::{Op, OpType, Process};
use lockd::bugs::BugSet;
use lockd::raft::{Config, NodeId};
use lockd::server::{LinkFaults, LinkFaultsSwitch, PauseSwitch, ServerConfig};

use super::clients::{
    self, CLIENT_PORT, ClockRequest, PEER_PORT, Phase, RECOVERY_MS, Shared, Workload,
};
use super::{CaseResult, SimCase};
use crate::faults::{self, FaultOp, FaultValue, ResolveContext, Verb};
use crate::net::Grudge;
use crate::netem::NetemSpec;
use crate::rng::Rng;
use crate::schedule::{self, FaultPlanConfig, Planned};

/// The simulator's step, ms: hosts run in lockstep, and messages move once per step.
pub const TICK_MS: u64 = 4;
/// One in this many acquires is a leaver (gives up or disconnects mid-acquire).
pub const LEAVER_ONE_IN: u64 = 12;
/// Simulated time allowed beyond the fault phase and the recovery bound before the run is
/// declared stuck, ms.
const OVERRUN_MS: u64 = 20_000;
/// Each seed's snapshot threshold (entries applied between snapshots) is drawn from here.
const SNAPSHOT_THRESHOLD_MIN: u64 = 30;
const SNAPSHOT_THRESHOLD_MAX: u64 = 400;
/// The torn-write disk: writes survive a crash only in whole blocks of this size ...
const TORN_BLOCK_BYTES: u64 = 512;
/// ... and an unsynced write reaches the disk anyway with this probability.
const TORN_SYNC_PROBABILITY: f64 = 0.05;
/// `slow`: the bound of a message's latency on a slowed node's links, ms (netem's 100 ms
/// ± 50 ms).
const SLOW_MAX_LATENCY_MS: u64 = 150;
const NEMESIS_STREAM: u64 = 0x5157_fa17;
const NET_STREAM: u64 = 0x5157_0e70;

fn node_name(id: NodeId) -> String {
    format!("n{id}")
}

/// What the driver knows of the cluster's faults.
#[derive(Default)]
struct FaultState {
    killed: BTreeSet<NodeId>,
    paused: BTreeSet<NodeId>,
    skewed: BTreeSet<NodeId>,
    paused_clients: BTreeSet<u64>,
    /// Nodes whose links are slow (`slow`), and whose peer links are flaky (`flaky`).
    slow: BTreeSet<NodeId>,
    flaky: BTreeSet<NodeId>,
    cut: Grudge,
    /// Strobe changes still to make: (at ms, node, rate, jump).
    strobes: Vec<(u64, NodeId, f64, i64)>,
}

/// Runs one case to its verdict. Never panics on a lockd failure: a node that exits is part
/// of the verdict, and a run the simulator could not finish is `unknown`.
///
/// Each case runs on a thread of its own: something in the stack keeps per-thread state
/// from one simulation to the next on the same thread (two seeds run one after the other on
/// one thread gave another history than each alone), and a fresh thread replays exactly.
pub fn run_case(case: &SimCase) -> CaseResult {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name(format!("sim-seed-{}", case.seed))
            .spawn_scoped(scope, || run_case_on_this_thread(case));
        match handle.map(|h| h.join()) {
            Ok(Ok(result)) => result,
            Ok(Err(_)) | Err(_) => {
                // The simulator itself panicked (lockd's panics are caught per node).
                let check = checker::compose(vec![CheckResult::new(
                    "node health",
                    Verdict::unknown("the simulation thread panicked (see stderr)"),
                )]);
                CaseResult {
                    case: case.clone(),
                    ops: Vec::new(),
                    check,
                    plan: Vec::new(),
                    faults: Vec::new(),
                    logs: None,
                    sim_ms: 0,
                }
            }
        }
    })
}

fn run_case_on_this_thread(case: &SimCase) -> CaseResult {
    let logs = case.logs.then(|| Arc::new(Mutex::new(Vec::new())));
    let run = || run_inner(case);
    let (ops, faults_log, plan, node_exits, sim_error, sim_ms) = match &logs {
        Some(buffer) => {
            let subscriber = log_subscriber(buffer.clone());
            tracing::subscriber::with_default(subscriber, run)
        }
        None => run(),
    };
    let mut check = match checker::check(&ops, &checker::Options::default()) {
        Ok(check) => check,
        Err(e) => checker::compose(vec![CheckResult::new(
            "history",
            Verdict::unknown(format!("the recorded history does not read back: {e}")),
        )]),
    };
    let health = if let Some(error) = sim_error {
        CheckResult::new(
            "node health",
            Verdict::unknown(format!("the simulation could not finish: {error}")),
        )
    } else if node_exits.is_empty() {
        CheckResult::new("node health", Verdict::Valid)
    } else {
        CheckResult::invalid(
            "node health",
            format!(
                "a node stopped on its own (no fault killed it): {}",
                node_exits.join("; ")
            ),
            Vec::new(),
        )
    };
    check.results.push(health);
    if let Some(dir) = case.trace_dir() {
        // `--trace`: the nodes' traces through the model (`crate::replay`), written to the
        // real disk by the run that just ended.
        check.results.push(crate::replay::check_run(&dir));
    }
    check = checker::compose(check.results);
    let logs = logs.map(|buffer| {
        let bytes = buffer.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    });
    CaseResult {
        case: case.clone(),
        ops,
        check,
        plan,
        faults: faults_log,
        logs,
        sim_ms,
    }
}

type Inner = (
    Vec<Op>,
    Vec<String>,
    Vec<Planned>,
    Vec<String>,
    Option<String>,
    u64,
);

fn run_inner(case: &SimCase) -> Inner {
    let plan = schedule::fault_plan(&FaultPlanConfig {
        seed: case.seed,
        kinds: case.nemesis.clone(),
        duration_ms: case.time_s * 1000,
    });
    let nodes: Vec<NodeId> = (1..=case.nodes).collect();
    // Traces go to the real disk, fresh for each run (the core appends across restarts).
    let trace_dir = case.trace_dir().map(|dir| dir.join("node-logs"));
    if let Some(dir) = &trace_dir {
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::create_dir_all(dir);
    }
    let shared = Shared::new();
    let node_exits: Rc<RefCell<Vec<String>>> = Rc::new(RefCell::new(Vec::new()));
    let mut net_rng = Rng::derive(case.seed, NET_STREAM, 0);
    let max_latency_ms = net_rng.range(2, 25);
    // Snapshots, compaction and InstallSnapshot come into play within a run only with a
    // threshold far below the server's default of 1000 entries.
    let snapshot_threshold = net_rng.range(SNAPSHOT_THRESHOLD_MIN, SNAPSHOT_THRESHOLD_MAX);
    // Half the seeds crash on a disk that tears unsynced writes at 512-byte blocks and lets
    // a few unsynced writes through (storage.rs must take a torn last record as never
    // written); the other half lose every unsynced write whole.
    let torn_writes = net_rng.chance(1, 2);
    let mut builder = turmoil::Builder::new();
    builder
        .rng_seed(case.seed)
        .tick_duration(Duration::from_millis(TICK_MS))
        .simulation_duration(Duration::from_millis(
            case.time_s * 1000 + RECOVERY_MS + OVERRUN_MS,
        ))
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
    let mut link_switches = BTreeMap::new();
    for &id in &nodes {
        let (switch, gate) = PauseSwitch::new();
        switches.insert(id, switch);
        let (link_switch, link_gate) = LinkFaultsSwitch::new();
        link_switches.insert(id, link_switch);
        let members = nodes.clone();
        let exits = node_exits.clone();
        let seed = case.seed;
        let trace = trace_dir
            .as_ref()
            .map(|dir| dir.join(format!("n{id}.trace.jsonl")));
        sim.host(node_name(id), move || {
            let members = members.clone();
            let gate = gate.clone();
            let link_gate = link_gate.clone();
            let exits = exits.clone();
            let trace = trace.clone();
            async move {
                let peers: BTreeMap<NodeId, SocketAddr> = members
                    .iter()
                    .map(|&m| (m, SocketAddr::new(turmoil::lookup(node_name(m)), PEER_PORT)))
                    .collect();
                let mut raft = Config::new(id, members.clone());
                raft.seed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(id);
                raft.bugs = bugs;
                raft.snapshot_threshold_entries = snapshot_threshold;
                let listen = SocketAddr::new(turmoil::lookup(node_name(id)), CLIENT_PORT);
                let mut config = ServerConfig::new(raft, peers, listen, "/data".into());
                config.pause_gate = Some(gate);
                config.link_faults = Some(link_gate);
                config.trace = trace;
                let at = || turmoil::sim_elapsed().unwrap_or_default().as_millis();
                let run = std::panic::AssertUnwindSafe(lockd::server::run(config));
                match futures::FutureExt::catch_unwind(run).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => exits
                        .borrow_mut()
                        .push(format!("n{id} at {} ms: {e}", at())),
                    Err(panic) => exits.borrow_mut().push(format!(
                        "n{id} panicked at {} ms: {}",
                        at(),
                        panic_message(&panic)
                    )),
                }
                Ok(())
            }
        });
    }
    let workload = Workload {
        seed: case.seed,
        clients: case.clients,
        keys: case.keys,
        leaver_one_in: LEAVER_ONE_IN,
    };
    let client_shared = shared.clone();
    let client_nodes = nodes.clone();
    sim.client("clients", async move {
        let cluster: Vec<SocketAddr> = client_nodes
            .iter()
            .map(|&n| SocketAddr::new(turmoil::lookup(node_name(n)), CLIENT_PORT))
            .collect();
        clients::run_clients(client_shared, workload, cluster).await
    });

    let mut driver = Driver {
        case,
        nodes,
        shared: shared.clone(),
        state: FaultState::default(),
        switches,
        link_switches,
        max_latency_ms,
        log: Vec::new(),
        resolved: 0,
    };
    let active: Vec<(usize, Planned)> = plan
        .iter()
        .cloned()
        .enumerate()
        .filter(|(i, _)| !case.drop_faults.contains(i))
        .collect();
    let mut next = 0;
    let fault_end_ms = case.time_s * 1000;
    let mut error = None;
    loop {
        let now_ms = sim.elapsed().as_millis() as u64;
        while next < active.len() && active[next].1.at_ms <= now_ms {
            driver.apply(&mut sim, &active[next].1.op, now_ms);
            next += 1;
        }
        driver.strobe(now_ms);
        if shared.phase.get() == Phase::Faults && now_ms >= fault_end_ms {
            driver.heal_all(&mut sim, now_ms);
            driver.record_nemesis(now_ms, Verb::Recover.as_str(), "", "");
            shared.phase.set(Phase::Recovery);
        }
        match sim.step() {
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
    let ops = shared.rows.borrow().clone();
    let exits = node_exits.borrow().clone();
    (ops, driver.log, plan, exits, error, sim_ms)
}

struct Driver<'a> {
    case: &'a SimCase,
    nodes: Vec<NodeId>,
    shared: Rc<Shared>,
    state: FaultState,
    switches: BTreeMap<NodeId, PauseSwitch>,
    link_switches: BTreeMap<NodeId, LinkFaultsSwitch>,
    /// The seed's message latency bound, which `unslow` restores.
    max_latency_ms: u64,
    log: Vec<String>,
    resolved: u64,
}

impl Driver<'_> {
    fn record_nemesis(&self, now_ms: u64, f: &str, value: &str, error: &str) {
        let op = Op {
            index: 0,
            time_ns: 0,
            process: Process::Nemesis,
            op_type: OpType::Info,
            f: f.to_owned(),
            key: String::new(),
            value: value.to_owned(),
            token: None,
            node: String::new(),
            error: error.to_owned(),
        };
        self.shared.push(now_ms * 1_000_000, op);
    }

    /// Resolves `planned` against the cluster's state, records it, then acts.
    fn apply(&mut self, sim: &mut turmoil::Sim<'_>, planned: &FaultOp, now_ms: u64) {
        let ctx = ResolveContext {
            nodes: self.nodes.clone(),
            leader: self.shared.leader.get(),
            killed: self.state.killed.clone(),
            paused: self.state.paused.clone(),
            skewed: self.state.skewed.clone(),
            client_slots: self.case.clients,
            paused_clients: self.state.paused_clients.clone(),
        };
        let mut rng = Rng::derive(self.case.seed, NEMESIS_STREAM, self.resolved);
        self.resolved += 1;
        let op = faults::resolve(planned, &ctx, &mut rng);
        let value = op.describe(&self.nodes);
        let outcome = if op.acts_on_nothing() {
            "nothing to do".to_owned()
        } else {
            String::new()
        };
        self.record_nemesis(now_ms, op.f.as_str(), &value, &outcome);
        self.log
            .push(format!("{now_ms:>6} {} {value} {outcome}", op.f.as_str()));
        if op.acts_on_nothing() {
            return;
        }
        self.act(sim, &op, now_ms);
    }

    fn act(&mut self, sim: &mut turmoil::Sim<'_>, op: &FaultOp, now_ms: u64) {
        let targets = op.targets().to_vec();
        match (op.f, &op.value) {
            (Verb::Kill, _) => {
                for n in targets {
                    self.resume_node(sim, n);
                    sim.crash(node_name(n));
                    self.state.killed.insert(n);
                }
            }
            (Verb::Restart, _) => {
                for n in targets {
                    sim.bounce(node_name(n));
                    self.state.killed.remove(&n);
                }
            }
            (Verb::Pause, _) => {
                for n in targets {
                    self.pause_node(sim, n);
                }
            }
            (Verb::Resume, _) => {
                for n in targets {
                    self.resume_node(sim, n);
                }
            }
            (Verb::Partition, FaultValue::Grudge(_, grudge)) => {
                self.heal_links(sim);
                for (source, target) in grudge.links() {
                    sim.partition_oneway(node_name(source), node_name(target));
                }
                self.state.cut = grudge.clone();
            }
            (Verb::Heal, _) => self.heal_links(sim),
            (
                Verb::Skew,
                FaultValue::Clock {
                    rate_permille,
                    jump_ms,
                    ..
                },
            ) => {
                for n in targets {
                    self.clock(n, f64::from(*rate_permille) / 1000.0, *jump_ms);
                    self.state.skewed.insert(n);
                }
            }
            (
                Verb::Strobe,
                FaultValue::Strobe {
                    delta_ms,
                    period_ms,
                    count,
                    ..
                },
            ) => {
                for n in targets {
                    for i in 0..u64::from(*count) {
                        let (rate, jump) = if i % 2 == 0 {
                            (1.0, -delta_ms)
                        } else {
                            (0.5, 0)
                        };
                        self.state
                            .strobes
                            .push((now_ms + i * period_ms, n, rate, jump));
                    }
                    self.state.skewed.insert(n);
                }
            }
            (Verb::ResetClock, _) => {
                for n in targets {
                    self.state.strobes.retain(|s| s.1 != n);
                    self.clock(n, 1.0, 0);
                    self.state.skewed.remove(&n);
                }
            }
            (Verb::PauseClients, FaultValue::Clients(slots)) => {
                let mut paused = self.shared.paused_clients.borrow_mut();
                for slot in slots {
                    paused.insert(*slot);
                    self.state.paused_clients.insert(*slot);
                }
            }
            (Verb::ResumeClients, _) => {
                self.shared.paused_clients.borrow_mut().clear();
                self.state.paused_clients.clear();
            }
            (Verb::Slow | Verb::Unslow, _) => {
                for n in targets {
                    self.set_slow(sim, n, op.f == Verb::Slow);
                }
            }
            (Verb::Flaky | Verb::Unflaky, _) => {
                for n in targets {
                    self.set_flaky(n, op.f == Verb::Flaky);
                }
            }
            (verb, value) => {
                self.log.push(format!(
                    "{now_ms:>6} {}: not applied in the simulator ({value:?})",
                    verb.as_str()
                ));
            }
        }
    }

    fn clock(&self, node: NodeId, rate: f64, jump_ms: i64) {
        self.shared
            .clock_requests
            .borrow_mut()
            .push_back(ClockRequest {
                node,
                rate,
                jump_ms,
            });
    }

    fn strobe(&mut self, now_ms: u64) {
        let due: Vec<(u64, NodeId, f64, i64)> = self
            .state
            .strobes
            .iter()
            .copied()
            .filter(|s| s.0 <= now_ms)
            .collect();
        self.state.strobes.retain(|s| s.0 > now_ms);
        for (_, node, rate, jump) in due {
            self.clock(node, rate, jump);
        }
    }

    /// Pause: the core stops and every link of the node holds (nothing in or out), as a
    /// SIGSTOP'd process neither reads nor writes.
    fn pause_node(&mut self, sim: &mut turmoil::Sim<'_>, node: NodeId) {
        if let Some(switch) = self.switches.get(&node) {
            switch.set_paused(true);
        }
        for other in self.others(node) {
            sim.hold(node_name(node), other);
        }
        self.state.paused.insert(node);
    }

    fn resume_node(&mut self, sim: &mut turmoil::Sim<'_>, node: NodeId) {
        if !self.state.paused.remove(&node) {
            return;
        }
        for other in self.others(node) {
            sim.release(node_name(node), other);
        }
        if let Some(switch) = self.switches.get(&node) {
            switch.set_paused(false);
        }
    }

    /// `slow` (netem's 100 ms ± 50 ms): every message on the node's links, to and from the
    /// other nodes and the clients, takes up to 150 ms; `unslow` restores the seed's bound.
    fn set_slow(&mut self, sim: &mut turmoil::Sim<'_>, node: NodeId, on: bool) {
        let bound_ms = if on {
            SLOW_MAX_LATENCY_MS
        } else {
            self.max_latency_ms
        };
        for other in self.others(node) {
            sim.set_link_max_message_latency(
                node_name(node),
                other,
                Duration::from_millis(bound_ms),
            );
        }
        if on {
            self.state.slow.insert(node);
        } else {
            self.state.slow.remove(&node);
        }
    }

    /// `flaky` (netem's loss, reordering and duplication): the node's outgoing peer links
    /// drop, reorder and duplicate messages ([`LinkFaults`]); `unflaky` makes them clean.
    fn set_flaky(&mut self, node: NodeId, on: bool) {
        let spec = NetemSpec::FLAKY;
        let faults = if on {
            LinkFaults {
                drop_percent: spec.loss_percent,
                reorder_percent: spec.reorder_percent,
                duplicate_percent: spec.duplicate_percent,
            }
        } else {
            LinkFaults::NONE
        };
        if let Some(switch) = self.link_switches.get(&node) {
            switch.set(faults);
        }
        if on {
            self.state.flaky.insert(node);
        } else {
            self.state.flaky.remove(&node);
        }
    }

    /// Every other host's name: the other nodes and the clients.
    fn others(&self, node: NodeId) -> Vec<String> {
        let mut others: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| **n != node)
            .map(|n| node_name(*n))
            .collect();
        others.push("clients".to_owned());
        others
    }

    fn heal_links(&mut self, sim: &mut turmoil::Sim<'_>) {
        for (source, target) in self.state.cut.links() {
            sim.repair_oneway(node_name(source), node_name(target));
        }
        self.state.cut = Grudge::none();
    }

    /// The final heal: every fault undone, each recorded as its pair verb.
    fn heal_all(&mut self, sim: &mut turmoil::Sim<'_>, now_ms: u64) {
        let list = |nodes: &BTreeSet<NodeId>| {
            nodes
                .iter()
                .map(|n| format!("n{n}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        if !self.state.cut.is_empty() {
            self.record_nemesis(now_ms, Verb::Heal.as_str(), "", "");
            self.heal_links(sim);
        }
        if !self.state.paused.is_empty() {
            self.record_nemesis(now_ms, Verb::Resume.as_str(), &list(&self.state.paused), "");
            for n in self.state.paused.clone() {
                self.resume_node(sim, n);
            }
        }
        if !self.state.killed.is_empty() {
            self.record_nemesis(
                now_ms,
                Verb::Restart.as_str(),
                &list(&self.state.killed),
                "",
            );
            for n in std::mem::take(&mut self.state.killed) {
                sim.bounce(node_name(n));
            }
        }
        if !self.state.skewed.is_empty() {
            self.record_nemesis(
                now_ms,
                Verb::ResetClock.as_str(),
                &list(&self.state.skewed),
                "",
            );
            self.state.strobes.clear();
            for n in std::mem::take(&mut self.state.skewed) {
                self.clock(n, 1.0, 0);
            }
        }
        if !self.state.slow.is_empty() {
            self.record_nemesis(now_ms, Verb::Unslow.as_str(), &list(&self.state.slow), "");
            for n in self.state.slow.clone() {
                self.set_slow(sim, n, false);
            }
        }
        if !self.state.flaky.is_empty() {
            self.record_nemesis(now_ms, Verb::Unflaky.as_str(), &list(&self.state.flaky), "");
            for n in self.state.flaky.clone() {
                self.set_flaky(n, false);
            }
        }
        if !self.state.paused_clients.is_empty() {
            self.record_nemesis(now_ms, Verb::ResumeClients.as_str(), "", "");
            self.shared.paused_clients.borrow_mut().clear();
            self.state.paused_clients.clear();
        }
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

/// A subscriber that writes the nodes' log into `buffer`, each line starting with the
/// simulated time (the host's name is in the `node` span turmoil opens). `LOCKSMITH_SIM_LOG`
/// sets the filter (default `info,tarpc=warn`).
/// The nodes' log filter unless `LOCKSMITH_SIM_LOG` says otherwise. `turmoil::sim` stays at
/// info: its `node` span names the host of every line, which the store splits by node.
const SIM_LOG_DEFAULT: &str = "info,tarpc=warn,turmoil=warn,turmoil::sim=info";

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
