//! One test run: set up the cluster and its net, run the workload and the nemesis for the
//! run's time, heal (every package's final schedule), a recovery phase in which every client
//! must succeed again, tear down, write `store/<test>/<timestamp>/`, and check the history.
//!
//! Every step is bounded: the cluster must show a leader within [`START_TIMEOUT_MS`], each
//! fault op within [`NEMESIS_STEP_TIMEOUT_MS`] (a stuck one is recorded and the run goes
//! on), clients stop starting ops at the end of the fault phase and finish theirs within
//! their deadlines, recovery ends after `recovery_s`. Teardown runs on every path: the
//! cluster, the net and the nemesis are guards that undo themselves on drop.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use checker::Verdict;

use crate::checks;
use crate::cluster::{Cluster, Layout};
use crate::faults::{
    self, FaultKind, FaultOp, FaultOutcome, FaultValue, Nemesis, ResolveContext, Verb, VerbExt,
};
use crate::nemeses::{self, Targets};
use crate::net::kernel::Kernel;
use crate::net::owner::{self, Owner};
use crate::net::proxy::Proxy;
use crate::net::{Net, NetKind};
use crate::recorder::{Recorder, write_file};
use crate::rng::Rng;
use crate::schedule::{self, ClientGen, FaultPlanConfig, Planned, WorkloadConfig};
use crate::system::{System, leader_of};
use crate::workload::{
    ClientFactory, ClientPauses, Counters, FencedStore, Shared, Worker, WorkloadKind,
};
use crate::{Error, NodeId};

/// How long the cluster has to show a leader before the run gives up (exit 2).
pub const START_TIMEOUT_MS: u64 = 20_000;
/// The longest one fault op may take before it is recorded as timed out.
pub const NEMESIS_STEP_TIMEOUT_MS: u64 = 10_000;
/// How long a status query for the leader may take.
pub const STATUS_TIMEOUT_MS: u64 = 1_500;
/// How long clients have to finish their last op after the fault phase.
pub const DRAIN_TIMEOUT_MS: u64 = 8_000;

/// Everything `locksmith test` takes.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TestOptions {
    /// Number of nodes.
    pub nodes: u64,
    /// Length of the fault phase, seconds.
    pub time_s: u64,
    /// Enabled fault kinds.
    pub nemesis: Vec<FaultKind>,
    /// Client slots.
    pub concurrency: u64,
    /// Lock keys.
    pub keys: u32,
    /// The seed.
    pub seed: u64,
    /// `lockd --bug NAME`.
    pub bug: Option<String>,
    /// Partition backend.
    pub net: NetKind,
    /// Store directory.
    pub store: PathBuf,
    /// Fenced or the unfenced control.
    pub workload: WorkloadKind,
    /// Length of the recovery phase's bound, seconds.
    pub recovery_s: u64,
    /// Shortest and longest pause between two ops of one client, ms (the request rate).
    pub think_ms: (u64, u64),
    /// Percent of grants held past their lease (see `WorkloadConfig::overhold_percent`).
    pub overhold_percent: u64,
    /// Print a progress line.
    pub progress: bool,
    /// Nodes on remote hosts over SSH, one per host (`--hosts`); `None`: local processes.
    pub hosts: Option<crate::hosts::HostsOptions>,
}

impl Default for TestOptions {
    fn default() -> Self {
        TestOptions {
            nodes: 5,
            time_s: 60,
            nemesis: FaultKind::ALL.to_vec(),
            concurrency: 10,
            keys: 4,
            seed: 0,
            bug: None,
            net: NetKind::Proxy,
            store: PathBuf::from("store"),
            workload: WorkloadKind::Fenced,
            recovery_s: 20,
            think_ms: (10, 100),
            overhold_percent: 0,
            progress: true,
            hosts: None,
        }
    }
}

impl TestOptions {
    /// The test's name: `<system>-<faults>[-<workload>][-bug-<name>]`.
    pub fn test_name(&self, system: &str) -> String {
        let faults: Vec<&str> = self.nemesis.iter().map(|k| k.name()).collect();
        let mut name = format!(
            "{system}-{}",
            if faults.is_empty() {
                "none".to_owned()
            } else {
                faults.join("+")
            }
        );
        if self.workload == WorkloadKind::Unfenced {
            name.push_str("-unfenced");
        }
        if let Some(bug) = &self.bug {
            name.push_str(&format!("-bug-{bug}"));
        }
        name
    }
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    /// `store/<test>/<timestamp>/`.
    pub dir: PathBuf,
    /// 0 valid, 1 invalid, 2 unknown.
    pub exit_code: i32,
    /// The merged verdict: the checks' and the run's own (node health, recovery).
    pub verdict: Verdict,
    /// The results, as written to results.json (from [`Results`]).
    pub results: serde_json::Value,
    /// Faults that failed or did nothing, and nodes the nemesis never acted on, in words.
    pub fault_notes: Vec<String>,
    /// The checks' explanation in words.
    pub explanation: String,
}

/// Counts of faults that happened, by kind and by verb/spec.
#[derive(Debug, Default)]
struct FaultCounts {
    by_kind: BTreeMap<String, u64>,
    by_detail: BTreeMap<String, u64>,
    failed: u64,
    total: AtomicU64,
    /// Fault ops that failed, with why.
    failures: Vec<String>,
    /// Fault ops that had no target.
    no_targets: Vec<String>,
    /// Nodes some fault targeted.
    touched: BTreeSet<NodeId>,
}

/// Messages to the nemesis thread.
enum NemesisMsg {
    Invoke(FaultOp, tokio::sync::oneshot::Sender<FaultOutcome>),
    Teardown(tokio::sync::oneshot::Sender<Result<(), Error>>),
}

/// The nemesis runs on its own thread (its ops block); the runner talks to it with timeouts.
struct NemesisThread {
    tx: std::sync::mpsc::Sender<NemesisMsg>,
}

impl NemesisThread {
    fn spawn(mut nemesis: Box<dyn Nemesis>) -> Result<NemesisThread, Error> {
        nemesis.setup()?;
        let (tx, rx) = std::sync::mpsc::channel::<NemesisMsg>();
        std::thread::Builder::new()
            .name("nemesis".into())
            .spawn(move || {
                while let Ok(msg) = rx.recv() {
                    match msg {
                        NemesisMsg::Invoke(op, reply) => {
                            let _ = reply.send(nemesis.invoke(&op));
                        }
                        NemesisMsg::Teardown(reply) => {
                            let _ = reply.send(nemesis.teardown());
                        }
                    }
                }
                let _ = nemesis.teardown();
            })
            .map_err(|e| Error::Io(format!("nemesis thread: {e}")))?;
        Ok(NemesisThread { tx })
    }

    async fn invoke(&self, op: FaultOp) -> FaultOutcome {
        let (reply, rx) = tokio::sync::oneshot::channel();
        if self.tx.send(NemesisMsg::Invoke(op, reply)).is_err() {
            return FaultOutcome::failed("the nemesis thread is gone");
        }
        match tokio::time::timeout(Duration::from_millis(NEMESIS_STEP_TIMEOUT_MS), rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => FaultOutcome::failed("the nemesis thread dropped the op"),
            Err(_) => FaultOutcome::failed(format!("timeout after {NEMESIS_STEP_TIMEOUT_MS} ms")),
        }
    }

    async fn teardown(&self) -> Result<(), Error> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        if self.tx.send(NemesisMsg::Teardown(reply)).is_err() {
            return Err(Error::Nemesis("the nemesis thread is gone".into()));
        }
        match tokio::time::timeout(Duration::from_millis(NEMESIS_STEP_TIMEOUT_MS), rx).await {
            Ok(Ok(result)) => result,
            _ => Err(Error::Timeout("nemesis teardown".into())),
        }
    }
}

/// Resolves, records and performs fault ops, one at a time.
struct FaultDriver {
    seed: u64,
    step: AtomicU64,
    nodes: Vec<NodeId>,
    cluster: Arc<Cluster>,
    system: Arc<dyn System>,
    layout: Layout,
    recorder: Arc<Recorder>,
    nemesis: NemesisThread,
    skewed: Mutex<BTreeSet<NodeId>>,
    counts: Mutex<FaultCounts>,
    /// Nodes that exited without the nemesis killing them (crashes), with their status.
    exited: Mutex<Vec<String>>,
    /// Client slots the pause nemesis may stall.
    clients: Arc<ClientPauses>,
    /// The number of client slots.
    client_slots: u64,
}

const RESOLVE_STREAM: u64 = 3 << 32;

impl FaultDriver {
    async fn leader(&self) -> Option<NodeId> {
        let status = tokio::time::timeout(
            Duration::from_millis(STATUS_TIMEOUT_MS),
            self.system.status(&self.layout),
        );
        status.await.ok().and_then(|views| leader_of(&views))
    }

    /// Notes nodes that exited on their own since the last look (a crash is reported in
    /// results.json; the final schedule restarts them like killed nodes).
    fn reap_crashed(&self) {
        let crashed = self.cluster.reap_exited();
        if !crashed.is_empty() {
            let mut exited = self.exited.lock().unwrap_or_else(|p| p.into_inner());
            for (id, status) in crashed {
                eprintln!(
                    "locksmith test: node n{id} exited on its own: {status} (see node-logs/n{id}.log)"
                );
                exited.push(format!(
                    "n{id}: {status} at {} ms",
                    self.recorder.now_ns() / 1_000_000
                ));
            }
        }
    }

    /// Resolves `planned`, records it (before acting), performs it, records the outcome.
    async fn perform(&self, planned: &FaultOp) {
        self.reap_crashed();
        let step = self.step.fetch_add(1, Ordering::Relaxed);
        let mut context = ResolveContext {
            nodes: self.nodes.clone(),
            leader: None,
            killed: self.cluster.down(),
            paused: self.cluster.paused(),
            skewed: self
                .skewed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            client_slots: self.client_slots,
            paused_clients: self.clients.paused(),
        };
        if planned.needs_leader() {
            context.leader = self.leader().await;
        }
        let op = faults::resolve(
            planned,
            &context,
            &mut Rng::derive(self.seed, RESOLVE_STREAM, step),
        );
        let mut value = op.describe(&self.nodes);
        if planned.needs_leader() {
            // The leader the op was aimed at, so the run replays from its seed and a reader
            // sees whether the fault hit the leader.
            let leader = context
                .leader
                .map_or("none".to_owned(), |l| format!("n{l}"));
            value.push_str(&format!(" leader={leader}"));
        }
        let verb = op.f;
        self.recorder.nemesis(verb, &value, "");
        let outcome = if op.acts_on_nothing() {
            FaultOutcome::done("no targets")
        } else {
            self.nemesis.invoke(op.clone()).await
        };
        let error = if outcome.ok {
            String::new()
        } else {
            outcome.detail.clone()
        };
        self.recorder.nemesis(verb, &value, &error);
        self.note(planned, &op, &outcome, &value);
    }

    fn note(&self, planned: &FaultOp, op: &FaultOp, outcome: &FaultOutcome, value: &str) {
        {
            let mut skewed = self.skewed.lock().unwrap_or_else(|p| p.into_inner());
            match op.f {
                Verb::Skew | Verb::Strobe => skewed.extend(op.targets()),
                Verb::ResetClock => skewed.clear(),
                _ => {}
            }
        }
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.total.fetch_add(1, Ordering::Relaxed);
        let at_s = self.recorder.now_ns() as f64 / 1e9;
        if !outcome.ok {
            counts.failed += 1;
            counts.failures.push(format!(
                "{} {} at {at_s:.1} s failed: {}",
                op.f, value, outcome.detail
            ));
            return;
        }
        let acted = !op.acts_on_nothing();
        if op.f.starts_fault() && !acted {
            counts
                .no_targets
                .push(format!("{} at {at_s:.1} s did nothing (no target)", op.f));
        }
        if acted {
            counts.touched.extend(op.targets().iter().copied());
            if let FaultValue::Grudge(_, g) = &op.value {
                counts
                    .touched
                    .extend(g.links().flat_map(|(source, target)| [source, target]));
            }
        }
        if let Some(kind) = op.f.kind().filter(|_| op.f.starts_fault() && acted) {
            *counts.by_kind.entry(kind.name().to_owned()).or_default() += 1;
            let detail = match &op.value {
                FaultValue::Grudge(shape, _) => format!("partition:{}", shape.name()),
                FaultValue::Clients(c) => format!("pause-clients:{}", c.len()),
                FaultValue::Clock { spec, .. } | FaultValue::Strobe { spec, .. } => {
                    format!("{}:{}", op.f.name(), spec.name())
                }
                _ => format!("{}:{}", op.f.name(), planned_spec(planned, op)),
            };
            *counts.by_detail.entry(detail).or_default() += 1;
        }
    }
}

/// The planned node spec (`one`, `minority`, `leader`, ...) of a node-targeted fault.
fn planned_spec(planned: &FaultOp, op: &FaultOp) -> String {
    match &planned.value {
        FaultValue::Nodes(spec) => spec.name().to_owned(),
        _ => format!("{}-nodes", op.targets().len()),
    }
}

/// A UTC timestamp `YYYYMMDDTHHMMSS.mmmZ` (civil-from-days; no time zone database needed).
pub fn timestamp(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days_from_civil inverse.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}.{:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        since.subsec_millis()
    )
}

fn run_dir(options: &TestOptions, system: &str) -> Result<PathBuf, Error> {
    let dir = options
        .store
        .join(options.test_name(system))
        .join(timestamp(SystemTime::now()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?;
    Ok(dir)
}

/// Starts the net of `kind`. For a system that cannot dial per link, `kernel` is the owner
/// net: it creates one user per node, gives each data dir to its user and records the users
/// in `layout.users` for the launcher.
async fn start_net(
    kind: NetKind,
    system: &dyn System,
    layout: &mut Layout,
) -> Result<Arc<dyn Net>, Error> {
    if kind == NetKind::Kernel && !system.per_link_dial() {
        Owner::available().map_err(Error::Unsupported)?;
        let users = owner::ensure_users(&layout.nodes)?;
        for (id, user) in &users {
            owner::give_dir(&layout.data_dir[id], *user)?;
        }
        layout.users = users.clone();
        return Ok(Arc::new(Owner::start(&layout.peer, &users)?));
    }
    Ok(match kind {
        NetKind::Proxy => Arc::new(Proxy::start(&layout.peer).await?),
        NetKind::Kernel => Arc::new(Kernel::start(&layout.peer).await?),
        NetKind::Netns => Arc::new(crate::net::netns::Netns::start(layout)?),
    })
}

/// A short id for a remote run's directory and iptables chain, unique enough across the
/// runs of one host: the seed, this process and the clock.
fn remote_run_id(seed: u64) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!(
        "{:08x}",
        (seed as u32) ^ std::process::id().rotate_left(16) ^ nanos
    )
}

/// Waits until some node says it leads, or gives up.
async fn wait_for_leader(system: &dyn System, layout: &Layout) -> Result<NodeId, Error> {
    let deadline = Instant::now() + Duration::from_millis(START_TIMEOUT_MS);
    while Instant::now() < deadline {
        let views = tokio::time::timeout(
            Duration::from_millis(STATUS_TIMEOUT_MS),
            system.status(layout),
        )
        .await
        .unwrap_or_default();
        if let Some(leader) = leader_of(&views) {
            return Ok(leader);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(Error::Cluster(format!(
        "no leader within {START_TIMEOUT_MS} ms (see node-logs/)"
    )))
}

/// Every node must answer a status call before the workload starts; a node that does not
/// (it exited, or never bound its ports) makes the run fail with the tail of its log.
async fn all_nodes_answer(
    system: &dyn System,
    layout: &Layout,
    cluster: &Cluster,
) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_millis(START_TIMEOUT_MS);
    loop {
        let views = tokio::time::timeout(
            Duration::from_millis(STATUS_TIMEOUT_MS),
            system.status(layout),
        )
        .await
        .unwrap_or_default();
        let silent: Vec<NodeId> = layout
            .nodes
            .iter()
            .copied()
            .filter(|n| !views.iter().any(|v| v.node == *n))
            .collect();
        let Some(first) = silent.first() else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            let crashed = cluster.reap_exited();
            return Err(Error::Cluster(format!(
                "node(s) {} answered no status call within {START_TIMEOUT_MS} ms{}; the tail of \
                 node-logs/n{first}.log:\n{}",
                silent
                    .iter()
                    .map(|n| format!("n{n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if crashed.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (exited: {})",
                        crashed
                            .iter()
                            .map(|(n, status)| format!("n{n} {status}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
                cluster.log_tail(*first, 8)
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs one complete test (see the module docs). `Err` means the run could not be done
/// (exit 2); an anomaly is `Ok` with exit code 1.
pub async fn run(options: &TestOptions, system: Arc<dyn System>) -> Result<RunOutcome, Error> {
    let started = Instant::now();
    let dir = run_dir(options, system.name())?;
    eprintln!("locksmith test: seed {} -> {}", options.seed, dir.display());
    let duration_ms = options.time_s * 1000;
    let plan = schedule::fault_plan(&FaultPlanConfig {
        seed: options.seed,
        kinds: options.nemesis.clone(),
        duration_ms,
    });
    write_file(&dir.join("seed.txt"), &format!("{}\n", options.seed))?;
    let options_json = serde_json::to_string_pretty(options).unwrap_or_default();
    write_file(
        &dir.join("plan.txt"),
        &format!(
            "# options\n{options_json}\n# fault plan: at_ms verb value\n{}",
            schedule::describe_plan(&plan)
        ),
    )?;

    // The data dirs are temporary directories inside the run's directory.
    let data = tempfile::Builder::new()
        .prefix("data-")
        .tempdir_in(&dir)
        .map_err(|e| Error::Io(format!("data dir: {e}")))?;
    let (mut layout, reservation) = Layout::reserve(options.nodes, data.path())?;
    layout.log_dir = dir.join("node-logs");
    std::fs::create_dir_all(&layout.log_dir).map_err(|e| Error::Io(e.to_string()))?;
    // With --hosts, the nodes, their net and their launcher are the remote hosts'.
    let remote = match &options.hosts {
        Some(hosts) => Some(crate::hosts::remote::RemoteRun::connect(
            hosts,
            &remote_run_id(options.seed),
            &layout.log_dir,
        )?),
        None => None,
    };
    let net = match &remote {
        Some(remote) => {
            layout = remote.layout();
            remote.net()?
        }
        None => start_net(options.net, system.as_ref(), &mut layout).await?,
    };
    let mut dial = BTreeMap::new();
    for s in &layout.nodes {
        for t in &layout.nodes {
            if s != t {
                dial.insert((*s, *t), net.dial_addr(*s, *t));
            }
        }
    }
    let mut launcher = net.wrap_launcher(system.launcher(&layout, dial)?);
    if let Some(remote) = &remote {
        launcher = remote.launcher(launcher)?;
    }
    // The net's listeners are bound: the nodes' ports can be let go now.
    reservation.release();
    let cluster = Arc::new(Cluster::start(launcher, &layout.nodes, &layout.log_dir)?);
    let first_leader = wait_for_leader(system.as_ref(), &layout).await?;
    all_nodes_answer(system.as_ref(), &layout, &cluster).await?;
    eprintln!(
        "locksmith test: {} nodes up (each answered a status call), leader n{first_leader} after {:?}",
        options.nodes,
        started.elapsed()
    );

    let recorder = Arc::new(Recorder::create(&dir.join("history.csv"))?);
    let clients = Arc::new(ClientPauses::default());
    let targets = Targets {
        cluster: cluster.clone(),
        net: net.clone(),
        system: system.clone(),
        layout: layout.clone(),
        runtime: tokio::runtime::Handle::current(),
        clients: clients.clone(),
    };
    // Every family's nemesis is built, so the final schedule can undo anything.
    let extra = options
        .nemesis
        .iter()
        .filter(|k| !FaultKind::ALL.contains(k));
    let packages: Vec<_> = FaultKind::ALL
        .iter()
        .chain(extra)
        .map(|k| nemeses::package(*k, &targets))
        .collect();
    let final_schedule: Vec<FaultOp> = packages
        .iter()
        .flat_map(|p| p.plan.final_schedule.clone())
        .collect();
    let nemesis = faults::compose(packages.into_iter().map(|p| p.nemesis).collect())?;
    let driver = Arc::new(FaultDriver {
        seed: options.seed,
        step: AtomicU64::new(0),
        nodes: layout.nodes.clone(),
        cluster: cluster.clone(),
        system: system.clone(),
        layout: layout.clone(),
        recorder: recorder.clone(),
        nemesis: NemesisThread::spawn(Box::new(nemesis))?,
        skewed: Mutex::new(BTreeSet::new()),
        counts: Mutex::new(FaultCounts::default()),
        exited: Mutex::new(Vec::new()),
        clients: clients.clone(),
        client_slots: options.concurrency,
    });

    let phase = run_phases(
        options,
        system.clone(),
        &layout,
        recorder.clone(),
        driver.clone(),
        plan,
        final_schedule,
    )
    .await;
    driver.reap_crashed();
    let node_stats = cluster.stats();
    let mut teardown_error = teardown(&driver, &cluster, net.as_ref()).await;
    if let Some(Err(e)) = remote.as_ref().map(|r| r.finish()) {
        teardown_error = Some(format!(
            "{}{e}",
            teardown_error.map(|t| t + "; ").unwrap_or_default()
        ));
    }
    recorder.finish()?;
    let exited = driver
        .exited
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    drop(data);

    let ticker = options
        .progress
        .then(|| crate::progress::Ticker::start("test", "checking the history"));
    // With traces, the nodes' traces through the model: catches what no client saw (a
    // restart that lost acknowledged writes, a grant without the log behind it).
    let extra = if system.traces() {
        vec![crate::replay::check_run(&dir)]
    } else {
        Vec::new()
    };
    let check = checks::check_history_with(&dir, &checker::Options::default(), extra);
    drop(ticker);
    let counts = driver.counts.lock().unwrap_or_else(|p| p.into_inner());
    let recovered = phase.recovered_slots.len() as u64 == options.concurrency;
    // The run's own verdicts merge with the checks' (Invalid > Unknown > Valid): a run
    // whose cluster was not whole, or never served every client again, is not a pass.
    let mut verdict = check.verdict.clone();
    if !recovered {
        verdict = verdict.merge(Verdict::unknown(format!(
            "only {} of {} client slots recovered within {} s after the heal",
            phase.recovered_slots.len(),
            options.concurrency,
            options.recovery_s
        )));
    }
    if !exited.is_empty() {
        verdict = verdict.merge(Verdict::unknown(format!(
            "node(s) exited without a nemesis kill: {}",
            exited.join("; ")
        )));
    }
    let mut fault_notes: Vec<String> = counts
        .failures
        .iter()
        .chain(counts.no_targets.iter())
        .cloned()
        .collect();
    if !options.nemesis.is_empty() {
        let untouched: Vec<String> = layout
            .nodes
            .iter()
            .filter(|n| !counts.touched.contains(n))
            .map(|n| format!("n{n}"))
            .collect();
        if !untouched.is_empty() {
            fault_notes.push(format!(
                "the nemesis never acted on {}",
                untouched.join(", ")
            ));
        }
    }
    let results = Results {
        seed: options.seed,
        system: system.name().to_owned(),
        test: options.test_name(system.name()),
        options: options.clone(),
        verdict: verdict.clone(),
        exit_code: verdict.exit_code(),
        checks: check.check.clone(),
        report_errors: check.report_errors.clone(),
        ops: OpCounts {
            rows: recorder.len() as u64,
            completed: phase.counters.ops.load(Ordering::Relaxed),
            ok: phase.counters.ok.load(Ordering::Relaxed),
            fail: phase.counters.fail.load(Ordering::Relaxed),
            info: phase.counters.info.load(Ordering::Relaxed),
        },
        faults: FaultSummary {
            by_kind: counts.by_kind.clone(),
            by_detail: counts.by_detail.clone(),
            ops: counts.total.load(Ordering::Relaxed),
            failed: counts.failed,
            notes: fault_notes.clone(),
        },
        recovery: RecoverySummary {
            recovered,
            slots_recovered: phase.recovered_slots.clone(),
            slots: options.concurrency,
            duration_ms: phase.recovery_ms,
            phantom_probe_keys: phase.probe_keys,
        },
        nodes: node_stats,
        nodes_exited_on_their_own: exited,
        teardown_error,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    let json = serde_json::to_value(&results).unwrap_or_default();
    write_file(
        &dir.join("results.json"),
        &serde_json::to_string_pretty(&json).unwrap_or_default(),
    )?;
    Ok(RunOutcome {
        dir,
        exit_code: verdict.exit_code(),
        verdict,
        results: json,
        explanation: check.explanation,
        fault_notes,
    })
}

/// results.json: everything a run produced, written from this struct.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Results {
    /// The seed.
    pub seed: u64,
    /// `lockd`, `etcd`.
    pub system: String,
    /// The test's name.
    pub test: String,
    /// The options.
    pub options: TestOptions,
    /// The merged verdict (`"verdict": "valid"`, and `"reason"` when unknown).
    #[serde(flatten)]
    pub verdict: Verdict,
    /// 0, 1 or 2.
    pub exit_code: i32,
    /// Every check's result; `null` when the history could not be read.
    pub checks: Option<checker::Check>,
    /// Reports (timeline, plot) that could not be written.
    pub report_errors: Vec<String>,
    /// Op counts.
    pub ops: OpCounts,
    /// Fault counts and notes.
    pub faults: FaultSummary,
    /// The recovery phase.
    pub recovery: RecoverySummary,
    /// Per node: starts, kills, pauses, exits, uptime.
    pub nodes: Vec<crate::cluster::NodeStats>,
    /// Nodes that exited without a nemesis kill, with their status.
    pub nodes_exited_on_their_own: Vec<String>,
    /// What went wrong tearing down, if anything.
    pub teardown_error: Option<String>,
    /// Wall time of the run, ms.
    pub duration_ms: u64,
}

/// Op counts of a run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct OpCounts {
    /// History rows.
    pub rows: u64,
    /// Completed client ops.
    pub completed: u64,
    /// ok completions.
    pub ok: u64,
    /// fail completions.
    pub fail: u64,
    /// info completions.
    pub info: u64,
}

/// Fault counts of a run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FaultSummary {
    /// Faults that acted, by kind.
    pub by_kind: BTreeMap<String, u64>,
    /// Faults that acted, by verb and target spec or shape.
    pub by_detail: BTreeMap<String, u64>,
    /// Fault ops performed (starts and ends).
    pub ops: u64,
    /// Fault ops that failed.
    pub failed: u64,
    /// Faults that failed or did nothing, and nodes never acted on, in words.
    pub notes: Vec<String>,
}

/// The recovery phase of a run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RecoverySummary {
    /// Every slot succeeded again.
    pub recovered: bool,
    /// The slots that did.
    pub slots_recovered: Vec<u64>,
    /// All slots.
    pub slots: u64,
    /// How long the phase took, ms.
    pub duration_ms: u64,
    /// Keys the phantom-lock probe ran on (0 when the system has no phantom release).
    pub phantom_probe_keys: u64,
}

struct PhaseOutcome {
    counters: Arc<Counters>,
    recovered_slots: Vec<u64>,
    recovery_ms: u64,
    probe_keys: u64,
}

async fn run_phases(
    options: &TestOptions,
    system: Arc<dyn System>,
    layout: &Layout,
    recorder: Arc<Recorder>,
    driver: Arc<FaultDriver>,
    plan: Vec<Planned>,
    final_schedule: Vec<FaultOp>,
) -> PhaseOutcome {
    let start = Instant::now();
    let stop = start + Duration::from_secs(options.time_s);
    let counters = Arc::new(Counters::default());
    let store = Arc::new(FencedStore::new(options.workload));
    let factory: ClientFactory = {
        let system = system.clone();
        let layout = layout.clone();
        Arc::new(move |id| system.client(&layout, id))
    };
    let mut config = WorkloadConfig::new(options.seed, options.keys);
    config.think_ms = options.think_ms;
    config.overhold_percent = options.overhold_percent;
    if !system.releases_phantom_locks() {
        config.leaver_percent = 0;
    }
    let shared = Shared {
        factory,
        recorder: recorder.clone(),
        store,
        counters: counters.clone(),
        pauses: driver.clients.clone(),
    };
    let mut workers = Vec::new();
    for slot in 0..options.concurrency {
        let generator = ClientGen::new(&config, slot);
        let mut worker = Worker::new(slot, options.concurrency, generator, shared.clone());
        workers.push(tokio::spawn(async move {
            worker.run_until(stop).await;
            worker
        }));
    }
    let nemesis_task = {
        let driver = driver.clone();
        tokio::spawn(async move {
            for planned in plan {
                tokio::time::sleep_until((start + Duration::from_millis(planned.at_ms)).into())
                    .await;
                driver.perform(&planned.op).await;
            }
        })
    };
    let progress = options.progress.then(|| {
        let counters = counters.clone();
        let driver = driver.clone();
        tokio::spawn(progress_loop(counters, driver, start, stop))
    });

    // The fault phase ends at `stop`; clients finish their last op within their deadlines.
    let mut drained = Vec::new();
    let drain_deadline = stop + Duration::from_millis(DRAIN_TIMEOUT_MS);
    for w in workers {
        let left = drain_deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, w).await {
            Ok(Ok(worker)) => drained.push(worker),
            Ok(Err(e)) => eprintln!("locksmith test: a client task failed: {e}"),
            Err(_) => eprintln!("locksmith test: a client did not finish its last op in time"),
        }
    }
    // Faults planned past the end are not started; wait for the one in flight, bounded.
    let _ =
        tokio::time::timeout(Duration::from_millis(NEMESIS_STEP_TIMEOUT_MS), nemesis_task).await;
    if let Some(p) = progress {
        p.abort();
    }
    eprintln!("locksmith test: healing (final schedule)");
    for op in &final_schedule {
        driver.perform(op).await;
    }
    // The liveness check's marker: every fault is undone, the recovery phase starts.
    recorder.nemesis(Verb::Recover, "", "");

    eprintln!(
        "locksmith test: recovery: every client must succeed again (at most {} s)",
        options.recovery_s
    );
    let recovery_start = Instant::now();
    let recovery_deadline = recovery_start + Duration::from_secs(options.recovery_s);
    let tasks: Vec<_> = drained
        .into_iter()
        .enumerate()
        .map(|(i, mut w)| {
            tokio::spawn(async move { (i as u64, w.recover(recovery_deadline).await) })
        })
        .collect();
    let mut recovered_slots = Vec::new();
    for t in tasks {
        if let Ok(Ok((slot, true))) =
            tokio::time::timeout(Duration::from_secs(options.recovery_s + 5), t).await
        {
            recovered_slots.push(slot);
        }
    }
    recovered_slots.sort_unstable();
    let recovery_ms = recovery_start.elapsed().as_millis() as u64;
    let probe_keys = if system.releases_phantom_locks() {
        eprintln!("locksmith test: phantom-lock probe (clients that leave mid-acquire)");
        let keys: Vec<String> = (0..options.keys.min(4)).map(|k| format!("k{k}")).collect();
        crate::workload::phantom_probe(&shared, &keys).await
    } else {
        0
    };
    PhaseOutcome {
        counters,
        recovered_slots,
        recovery_ms,
        probe_keys,
    }
}

async fn teardown(driver: &FaultDriver, cluster: &Cluster, net: &dyn Net) -> Option<String> {
    let mut errors = Vec::new();
    if let Err(e) = driver.nemesis.teardown().await {
        errors.push(format!("nemesis: {e}"));
    }
    if let Err(e) = cluster.teardown() {
        errors.push(format!("cluster: {e}"));
    }
    if let Err(e) = net.teardown() {
        errors.push(format!("net: {e}"));
    }
    (!errors.is_empty()).then(|| errors.join("; "))
}

async fn progress_loop(
    counters: Arc<Counters>,
    driver: Arc<FaultDriver>,
    start: Instant,
    stop: Instant,
) {
    let bar = crate::progress::Progress::with_mode(
        "test",
        Some(stop.saturating_duration_since(start).as_secs()),
        match crate::progress::Mode::for_stderr() {
            // One line a second, as before this module.
            crate::progress::Mode::Lines(_) => crate::progress::Mode::Lines(Duration::ZERO),
            bar => bar,
        },
    );
    let mut last_ops = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tick.tick().await;
        let ops = counters.ops.load(Ordering::Relaxed);
        let faults = driver
            .counts
            .lock()
            .map(|c| c.total.load(Ordering::Relaxed))
            .unwrap_or(0);
        let line = format!(
            "| ops {ops} ({}/s) ok {} fail {} info {} | fault ops {faults} | {}s left",
            ops - last_ops,
            counters.ok.load(Ordering::Relaxed),
            counters.fail.load(Ordering::Relaxed),
            counters.info.load(Ordering::Relaxed),
            stop.saturating_duration_since(Instant::now()).as_secs()
        );
        last_ops = ops;
        bar.set(start.elapsed().as_secs(), &line);
        if Instant::now() >= stop {
            bar.finish("| the fault phase is over");
            return;
        }
    }
}

/// The directory of the newest run of a test under `store` (for tools and tests).
pub fn latest_run(store: &Path, test: &str) -> Option<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(store.join(test))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    runs.sort();
    runs.pop()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_civil_dates() {
        // Jepsen store layout: store/<test>/<timestamp>/; the timestamp sorts by time.
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(timestamp(t), "20231114T221320.123Z");
        assert_eq!(timestamp(UNIX_EPOCH), "19700101T000000.000Z");
    }

    #[test]
    fn test_names_say_system_faults_workload_and_bug() {
        // DESIGN "The harness": store/<test>/...
        let mut o = TestOptions::default();
        assert_eq!(o.test_name("lockd"), "lockd-kill+pause+partition+clock");
        o.workload = WorkloadKind::Unfenced;
        o.nemesis = vec![FaultKind::Pause];
        o.bug = Some("no-fsync".into());
        assert_eq!(o.test_name("lockd"), "lockd-pause-unfenced-bug-no-fsync");
    }
}
