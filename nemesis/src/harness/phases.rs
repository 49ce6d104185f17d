//! The phases of a run, in either world: the workload and the fault plan until the end of
//! the fault phase, the clients' drain, the final heal (every family's final schedule), the
//! `recover` marker, the recovery phase in which every client must succeed again, and the
//! phantom-lock probe.
//!
//! Every step is bounded: each fault op within `NEMESIS_STEP_TIMEOUT_MS` (a stuck one is
//! recorded and the run goes on), clients stop starting ops at the end of the fault phase
//! and finish theirs within [`DRAIN_TIMEOUT_MS`], recovery ends after `recovery_s`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::driver::{FaultDriver, NEMESIS_STEP_TIMEOUT_MS};
use super::{TestOptions, World};
use crate::faults::{self, FaultKind, FaultOp, Verb};
use crate::harness::recorder::Recorder;
use crate::harness::schedule::{ClientGen, WorkloadConfig};
use crate::harness::workload::{ClientFactory, Counters, FencedStore, Shared, Worker};

/// How long clients have to finish their last op after the fault phase.
pub const DRAIN_TIMEOUT_MS: u64 = 8_000;
/// Keys the phantom-lock probe runs on, at most.
const PROBE_KEYS_MAX: u32 = 4;

/// What the phases produced.
#[derive(Debug)]
pub struct PhaseOutcome {
    /// Op counters.
    pub counters: Arc<Counters>,
    /// The client slots that succeeded again after the heal.
    pub recovered_slots: Vec<u64>,
    /// How long the recovery phase took, ms.
    pub recovery_ms: u64,
    /// Keys the phantom-lock probe ran on.
    pub probe_keys: u64,
    /// Nodes that did not catch up after the heal ([`caught_up`]), each with why.
    pub lagging: Vec<String>,
}

/// How long a status query of the catch-up rule may take.
const CATCH_UP_STATUS_TIMEOUT_MS: u64 = 2_000;

/// The nodes' answers to one status query, bounded (none when it took too long).
async fn status_views(world: &World) -> Vec<crate::systems::NodeView> {
    let timeout = Duration::from_millis(CATCH_UP_STATUS_TIMEOUT_MS);
    (tokio::time::timeout(timeout, world.system.status(&world.layout)).await).unwrap_or_default()
}

/// The cluster's commit index as the nodes that answer tell it: the largest.
async fn cluster_commit(world: &World) -> Option<u64> {
    status_views(world)
        .await
        .iter()
        .map(|v| v.commit_index)
        .max()
}

/// The catch-up rule, in both worlds, for systems that promise it
/// (`System::catches_up_after_heal`): once every fault is undone, every node reaches the
/// commit index the cluster had at the `recover` marker (`target`) within the liveness
/// check's recovery bound (`by`), and answers a status query. A node that stays behind (a
/// snapshot transfer that never resumes, a node frozen for good) is invisible to the
/// history while the others serve every client: its first run found a simulator defect
/// that froze a restarted node for the last 20 s of a valid run (sim seed 172). Polls until
/// every node is there or `by` has passed; returns the nodes that are not, each with why
/// (empty when every node caught up).
pub async fn caught_up(world: &World, target: u64, by: Instant) -> Vec<String> {
    loop {
        let views = status_views(world).await;
        let lagging: Vec<String> = (world.layout.nodes.iter())
            .filter_map(|id| match views.iter().find(|v| v.node == *id) {
                None => Some(format!("n{id} answered no status query")),
                Some(v) if v.commit_index < target => Some(format!(
                    "n{id} stayed at commit index {} (role {}, term {})",
                    v.commit_index, v.role, v.term
                )),
                Some(_) => None,
            })
            .collect();
        if lagging.is_empty() || Instant::now() >= by {
            return lagging;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The final schedule of a run: every family's undo (the enabled ones', and those of the
/// default families, so the heal undoes anything), in [`faults::FAMILIES`] order.
pub fn final_schedule(kinds: &[FaultKind]) -> Vec<FaultOp> {
    faults::FAMILIES
        .iter()
        .filter(|f| FaultKind::ALL.contains(&f.kind()) || kinds.contains(&f.kind()))
        .flat_map(|f| f.final_schedule())
        .collect()
}

/// Runs the phases (see the module docs).
pub async fn run_phases(
    options: &TestOptions,
    world: &World,
    recorder: Arc<Recorder>,
    driver: Arc<FaultDriver>,
) -> PhaseOutcome {
    let start = Instant::now();
    let stop = start + Duration::from_secs(options.time_s);
    let counters = Arc::new(Counters::default());
    let factory: ClientFactory = {
        let system = world.system.clone();
        let layout = world.layout.clone();
        Arc::new(move |id| system.client(&layout, id))
    };
    let mut config = WorkloadConfig::new(options.seed, options.keys);
    config.think_ms = options.think_ms;
    config.lease_ms = options.lease_ms;
    config.overhold_percent = options.overhold_percent;
    if !world.system.releases_phantom_locks() {
        config.leaver_percent = 0;
    }
    let shared = Shared {
        factory,
        recorder: recorder.clone(),
        store: Arc::new(FencedStore::new(options.workload)),
        counters: counters.clone(),
        pauses: world.clients.clone(),
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
        let plan = options.active_plan();
        tokio::spawn(async move {
            for planned in plan {
                tokio::time::sleep_until(start + Duration::from_millis(planned.at_ms)).await;
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
        match tokio::time::timeout_at(drain_deadline, w).await {
            Ok(Ok(worker)) => drained.push(worker),
            Ok(Err(e)) => eprintln!("locksmith: a client task failed: {e}"),
            Err(_) => eprintln!("locksmith: a client did not finish its last op in time"),
        }
    }
    // Faults planned past the end are not started; wait for the one in flight, bounded.
    let _ =
        tokio::time::timeout(Duration::from_millis(NEMESIS_STEP_TIMEOUT_MS), nemesis_task).await;
    if let Some(p) = progress {
        p.abort();
    }
    // Fault points are faults too: the final heal ends them (in the simulator; elsewhere
    // there are none), so that the recovery phase judges a healed cluster.
    lockd::buggify::quiesce();
    say(options, "healing (final schedule)");
    for op in &final_schedule(&options.nemesis) {
        driver.perform(op).await;
    }
    // The liveness check's marker: every fault is undone, the recovery phase starts.
    recorder.nemesis(Verb::Recover, "", "");
    let recovered_at = Instant::now();
    // Systems that promise it are held to the catch-up rule (lockd, etcd; see
    // `System::catches_up_after_heal` for why not the others).
    let catch_up_target = if world.system.catches_up_after_heal() {
        cluster_commit(world).await
    } else {
        None
    };

    say(
        options,
        &format!(
            "recovery: every client must succeed again (at most {} s)",
            options.recovery_s
        ),
    );
    let recovery_start = Instant::now();
    let recovery_deadline = recovery_start + Duration::from_secs(options.recovery_s);
    let tasks: Vec<_> = drained
        .into_iter()
        .map(|mut w| tokio::spawn(async move { (w.slot(), w.recover(recovery_deadline).await) }))
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
    let probe_keys = if world.system.releases_phantom_locks() {
        // The probe's clients start after the liveness check's recovery bound, so that its
        // rule "every client that starts within the bound succeeds within it" judges the
        // recovering clients only (a probe that began 8 ms before the bound was once flagged
        // for completing 24 ms after it: sim seed 138).
        let bound = checker::liveness::LivenessOptions::default().recovery_bound_ms;
        tokio::time::sleep_until(recovered_at + Duration::from_millis(bound + 1)).await;
        say(
            options,
            "phantom-lock probe (clients that leave mid-acquire)",
        );
        let keys: Vec<String> = (0..options.keys.min(PROBE_KEYS_MAX))
            .map(|k| format!("k{k}"))
            .collect();
        let crossing = world.system.releases_cancelled_grants();
        crate::harness::workload::phantom_probe(&shared, &keys, crossing).await
    } else {
        0
    };
    let lagging = match catch_up_target {
        Some(target) => {
            let bound = checker::liveness::LivenessOptions::default().recovery_bound_ms;
            let by = recovered_at + Duration::from_millis(bound);
            let lagging = caught_up(world, target, by).await;
            lagging
                .into_iter()
                .map(|why| {
                    format!(
                        "{why}, {bound} ms after every fault was undone, when the cluster had \
                         committed {target}"
                    )
                })
                .collect()
        }
        // No node answered at the marker: nothing to measure against (a cluster that is
        // down is the recovery check's to judge).
        None => Vec::new(),
    };
    PhaseOutcome {
        counters,
        recovered_slots,
        recovery_ms,
        probe_keys,
        lagging,
    }
}

/// A progress line on stderr, when the run shows progress (the simulator's seeds do not).
fn say(options: &TestOptions, line: &str) {
    if options.progress {
        eprintln!("locksmith test: {line}");
    }
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
        let line = format!(
            "| ops {ops} ({}/s) ok {} fail {} info {} | fault ops {} | {}s left",
            ops - last_ops,
            counters.ok.load(Ordering::Relaxed),
            counters.fail.load(Ordering::Relaxed),
            counters.info.load(Ordering::Relaxed),
            driver.ops(),
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
