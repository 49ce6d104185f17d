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
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::checks;
use crate::cluster::{Cluster, Layout};
use crate::faults::{
    self, FaultKind, FaultOp, FaultOutcome, FaultValue, Nemesis, ResolveContext, Verb,
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
    /// `valid`, `invalid` or `unknown`.
    pub verdict: String,
    /// The results, as written to results.json.
    pub results: serde_json::Value,
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
        let value = op.describe(&self.nodes);
        let verb = op.f.name();
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
        self.note(planned, &op, &outcome);
    }

    fn note(&self, planned: &FaultOp, op: &FaultOp, outcome: &FaultOutcome) {
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
        if !outcome.ok {
            counts.failed += 1;
            return;
        }
        let acted = !op.acts_on_nothing();
        if op.f.starts_fault() && acted {
            *counts
                .by_kind
                .entry(op.f.kind().name().to_owned())
                .or_default() += 1;
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
    let mut layout = Layout::new(options.nodes, data.path())?;
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
    let cluster = Arc::new(Cluster::start(launcher, &layout.nodes, &layout.log_dir)?);
    let first_leader = wait_for_leader(system.as_ref(), &layout).await?;
    eprintln!(
        "locksmith test: {} nodes up, leader n{first_leader} after {:?}",
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

    let ops = recorder.ops();
    let check = checks::check_history(&dir);
    let counts = driver.counts.lock().unwrap_or_else(|p| p.into_inner());
    let mut verdict = check.verdict.clone();
    let mut exit_code = check.exit_code;
    let recovered = phase.recovered_slots.len() as u64 == options.concurrency;
    if !recovered && exit_code == 0 {
        // A cluster that never served every client again is not a pass (jepsen: unknown).
        verdict = "unknown".into();
        exit_code = 2;
    }
    let results = json!({
        "seed": options.seed,
        "system": system.name(),
        "test": options.test_name(system.name()),
        "options": options,
        "verdict": verdict,
        "exit_code": exit_code,
        "checks": check.json,
        "ops": {
            "rows": ops.len(),
            "completed": phase.counters.ops.load(Ordering::Relaxed),
            "ok": phase.counters.ok.load(Ordering::Relaxed),
            "fail": phase.counters.fail.load(Ordering::Relaxed),
            "info": phase.counters.info.load(Ordering::Relaxed),
        },
        "faults": {
            "by_kind": counts.by_kind,
            "by_detail": counts.by_detail,
            "ops": counts.total.load(Ordering::Relaxed),
            "failed": counts.failed,
        },
        "recovery": {
            "recovered": recovered,
            "slots_recovered": phase.recovered_slots,
            "slots": options.concurrency,
            "duration_ms": phase.recovery_ms,
        },
        "nodes_exited_on_their_own": exited,
        "teardown_error": teardown_error,
        "duration_ms": started.elapsed().as_millis() as u64,
    });
    write_file(
        &dir.join("results.json"),
        &serde_json::to_string_pretty(&results).unwrap_or_default(),
    )?;
    Ok(RunOutcome {
        dir,
        exit_code,
        verdict,
        results,
        explanation: check.explanation,
    })
}

struct PhaseOutcome {
    counters: Arc<Counters>,
    recovered_slots: Vec<u64>,
    recovery_ms: u64,
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
    PhaseOutcome {
        counters,
        recovered_slots,
        recovery_ms: recovery_start.elapsed().as_millis() as u64,
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
    let tty = std::io::stderr().is_terminal();
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
            "[{:>4}s] ops {ops} ({}/s) ok {} fail {} info {} | fault ops {faults} | {}s left",
            start.elapsed().as_secs(),
            ops - last_ops,
            counters.ok.load(Ordering::Relaxed),
            counters.fail.load(Ordering::Relaxed),
            counters.info.load(Ordering::Relaxed),
            stop.saturating_duration_since(Instant::now()).as_secs()
        );
        last_ops = ops;
        if tty {
            eprint!("\r{line}\x1b[K");
        } else {
            eprintln!("{line}");
        }
        if Instant::now() >= stop {
            if tty {
                eprintln!();
            }
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
