//! The fault driver: resolves each planned fault op against the cluster's state, records it
//! (before acting), has its family act on the [`World`], records the outcome, and counts
//! what happened for results.json. One driver for both worlds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use crate::NodeId;
use crate::faults::{self, FaultOp, FaultOutcome, FaultValue, ResolveContext, Verb, VerbExt};
use crate::harness::World;
use crate::harness::recorder::Recorder;
use crate::rng::Rng;
use crate::systems::leader_of;
use std::sync::Arc;

/// The longest one fault op may take before it is recorded as timed out.
pub const NEMESIS_STEP_TIMEOUT_MS: u64 = 10_000;
/// How long a status query for the leader may take.
pub const STATUS_TIMEOUT_MS: u64 = 1_500;
/// How many lines of a node's log an exit on its own quotes.
const EXIT_LOG_LINES: usize = 8;
/// The resolve RNG's stream ([`Rng::derive`]).
const RESOLVE_STREAM: u64 = 3 << 32;

/// Counts of faults that happened, by kind and by verb/spec (results.json `faults`).
#[derive(Debug, Default, Clone)]
pub struct FaultCounts {
    /// Faults that acted, by kind.
    pub by_kind: BTreeMap<String, u64>,
    /// Faults that acted, by verb and target spec or shape.
    pub by_detail: BTreeMap<String, u64>,
    /// Fault ops performed (starts and ends).
    pub total: u64,
    /// Fault ops that failed.
    pub failed: u64,
    /// Fault ops that failed, with why.
    pub failures: Vec<String>,
    /// Fault ops that had no target.
    pub no_targets: Vec<String>,
    /// Nodes some fault targeted.
    pub touched: BTreeSet<NodeId>,
}

/// Resolves, records and performs fault ops, one at a time.
pub struct FaultDriver {
    seed: u64,
    world: World,
    recorder: Arc<Recorder>,
    client_slots: u64,
    state: Mutex<DriverState>,
}

#[derive(Default)]
struct DriverState {
    step: u64,
    skewed: BTreeSet<NodeId>,
    counts: FaultCounts,
    /// Nodes that stopped without a kill, with how and the tail of their log.
    exited: Vec<String>,
}

impl FaultDriver {
    /// A driver for a run of `seed` with `client_slots` clients.
    pub fn new(seed: u64, world: World, recorder: Arc<Recorder>, client_slots: u64) -> Self {
        FaultDriver {
            seed,
            world,
            recorder,
            client_slots,
            state: Mutex::new(DriverState::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DriverState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fault counts so far.
    pub fn counts(&self) -> FaultCounts {
        self.lock().counts.clone()
    }

    /// Fault ops performed so far.
    pub fn ops(&self) -> u64 {
        self.lock().counts.total
    }

    /// The nodes that stopped on their own, each with the tail of its log.
    pub fn exited(&self) -> Vec<String> {
        self.lock().exited.clone()
    }

    async fn leader(&self) -> Option<NodeId> {
        let status = tokio::time::timeout(
            Duration::from_millis(STATUS_TIMEOUT_MS),
            self.world.system.status(&self.world.layout),
        );
        status.await.ok().and_then(|views| leader_of(&views))
    }

    /// Notes nodes that stopped on their own since the last look. Such a node makes the run
    /// invalid (node health); the final schedule restarts it like a killed node.
    pub fn reap_exited(&self) {
        let exited = self.world.nodes.reap_exited();
        if exited.is_empty() {
            return;
        }
        let at_s = self.recorder.now_ns() as f64 / 1e9;
        let mut state = self.lock();
        for (id, how) in exited {
            eprintln!("locksmith: node n{id} stopped on its own: {how} (see node-logs/n{id}.log)");
            let tail = self.world.nodes.log_tail(id, EXIT_LOG_LINES);
            let tail = if tail.trim().is_empty() {
                String::new()
            } else {
                format!("; the tail of its log:\n{tail}")
            };
            state
                .exited
                .push(format!("n{id}: {how} at {at_s:.3} s{tail}"));
        }
    }

    /// Resolves `planned`, records it (before acting), performs it, records the outcome.
    pub async fn perform(&self, planned: &FaultOp) {
        self.reap_exited();
        let (step, skewed) = {
            let mut state = self.lock();
            state.step += 1;
            (state.step - 1, state.skewed.clone())
        };
        let mut context = ResolveContext {
            nodes: self.world.layout.nodes.clone(),
            leader: None,
            killed: self.world.nodes.down(),
            paused: self.world.nodes.paused(),
            skewed,
            client_slots: self.client_slots,
            paused_clients: self.world.clients.paused(),
        };
        if planned.needs_leader() {
            context.leader = self.leader().await;
        }
        let op = faults::resolve(
            planned,
            &context,
            &mut Rng::derive(self.seed, RESOLVE_STREAM, step),
        );
        let mut value = op.describe(&context.nodes);
        if planned.needs_leader() {
            // The leader the op was aimed at, so the run replays from its seed and a reader
            // sees whether the fault hit the leader.
            let leader = context
                .leader
                .map_or("none".to_owned(), |l| format!("n{l}"));
            value.push_str(&format!(" leader={leader}"));
        }
        self.recorder.nemesis(op.f, &value, "");
        let outcome = match op.f.kind() {
            _ if op.acts_on_nothing() => FaultOutcome::done("no targets"),
            None => FaultOutcome::done("a marker"),
            Some(kind) => {
                let act = faults::family(kind).act(&op, &self.world);
                let limit = Duration::from_millis(NEMESIS_STEP_TIMEOUT_MS);
                tokio::time::timeout(limit, act).await.unwrap_or_else(|_| {
                    FaultOutcome::failed(format!("timeout after {NEMESIS_STEP_TIMEOUT_MS} ms"))
                })
            }
        };
        let error = if outcome.ok { "" } else { &outcome.detail };
        self.recorder.nemesis(op.f, &value, error);
        self.note(planned, &op, &outcome, &value);
    }

    fn note(&self, planned: &FaultOp, op: &FaultOp, outcome: &FaultOutcome, value: &str) {
        let at_s = self.recorder.now_ns() as f64 / 1e9;
        let mut state = self.lock();
        match op.f {
            Verb::Skew | Verb::Strobe => state.skewed.extend(op.targets()),
            Verb::ResetClock => state.skewed.clear(),
            _ => {}
        }
        let counts = &mut state.counts;
        counts.total += 1;
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
