//! Faults as data (STYLE practice 10). A [`FaultOp`] `{ f, value }` is what the schedule
//! plans and what the history records (process `nemesis`); a [`Nemesis`] interprets it.
//!
//! A planned op names its targets symbolically ([`NodeSpec`]: one, a minority, a majority,
//! all, the leader; [`Shape`]: halves, bridge, ...). Just before it acts, the runner resolves
//! it ([`resolve`], a pure function of the cluster's state, the leader it asked for, and a
//! seeded RNG) into a concrete op naming nodes or a [`Grudge`], records that concrete op, and
//! only then invokes the nemesis (record before acting: a fault that hangs or crashes the
//! harness is still in the history).
//!
//! Each fault family ships as a [`Package`]: its kind, its episode generator (start and stop
//! ops, used by `schedule.rs`), its final schedule (the ops that undo it, always run before
//! the recovery phase) and its nemesis. [`compose`] joins nemeses and rejects two that claim
//! the same [`FaultKind`]. Verbs come in pairs: kill/restart, pause/resume, partition/heal,
//! skew or strobe/reset-clock.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use serde::Serialize;

use crate::net::Grudge;
use crate::net::grudge;
use crate::rng::Rng;
use crate::{Error, NodeId};

/// A family of faults; one nemesis handles each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL and restart from the same data dir.
    Kill,
    /// SIGSTOP and SIGCONT.
    Pause,
    /// Cut directed links between nodes.
    Partition,
    /// Skew or strobe a node's lease clock.
    Clock,
    /// Latency, loss and reordering with `tc netem` on a host's interface (`--hosts` only;
    /// not in [`FaultKind::ALL`]: see [`crate::netem`]).
    Netem,
}

impl FaultKind {
    /// Every kind, the default `--nemesis` set.
    pub const ALL: [FaultKind; 4] = [
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::Clock,
    ];

    /// The `--nemesis` name.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::Partition => "partition",
            FaultKind::Clock => "clock",
            FaultKind::Netem => "netem",
        }
    }
}

impl FromStr for FaultKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        FaultKind::ALL
            .into_iter()
            .chain([FaultKind::Netem])
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                Error::BadArgument(format!(
                    "--nemesis {s:?}: expected a list of kill, pause, partition, clock, netem"
                ))
            })
    }
}

/// A fault verb: the `f` column of a nemesis row, from the history's one vocabulary.
pub use history::FaultVerb as Verb;

/// What the harness adds to a vocabulary verb: its spelling under the old name, and the
/// family whose nemesis performs it.
pub trait VerbExt {
    /// The history's spelling.
    fn name(self) -> &'static str;
    /// The family the verb belongs to; `None` for the `recover` marker, which no nemesis
    /// performs.
    fn kind(self) -> Option<FaultKind>;
}

impl VerbExt for Verb {
    fn name(self) -> &'static str {
        self.as_str()
    }

    fn kind(self) -> Option<FaultKind> {
        match self {
            Verb::Kill | Verb::Restart => Some(FaultKind::Kill),
            Verb::Pause | Verb::Resume | Verb::PauseClients | Verb::ResumeClients => {
                Some(FaultKind::Pause)
            }
            // hold is the net's, as partitions are; slow and flaky are netem's.
            Verb::Partition | Verb::Heal | Verb::Hold | Verb::Release => Some(FaultKind::Partition),
            Verb::Slow | Verb::Unslow | Verb::Flaky | Verb::Unflaky => Some(FaultKind::Netem),
            Verb::Skew | Verb::Strobe | Verb::ResetClock => Some(FaultKind::Clock),
            Verb::Recover => None,
        }
    }
}

/// Which nodes a fault targets, before resolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeSpec {
    /// One random node.
    One,
    /// A random minority (⌊(n-1)/2⌋ nodes, at least one).
    Minority,
    /// A random majority (⌊n/2⌋+1 nodes).
    Majority,
    /// Every node.
    All,
    /// The current leader (one random node when there is none).
    Leader,
    /// The nodes this family's faults left faulty (the targets of restart/resume/reset).
    Faulty,
}

impl NodeSpec {
    /// The spelling in the plan.
    pub fn name(self) -> &'static str {
        match self {
            NodeSpec::One => "one",
            NodeSpec::Minority => "minority",
            NodeSpec::Majority => "majority",
            NodeSpec::All => "all",
            NodeSpec::Leader => "leader",
            NodeSpec::Faulty => "faulty",
        }
    }
}

/// A partition shape, before resolution (see `net::grudge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// First ⌊n/2⌋ nodes against the rest.
    Halves,
    /// Halves of a seeded shuffle.
    RandomHalves,
    /// One random node alone.
    One,
    /// The leader alone.
    IsolateLeader,
    /// Two sides and a bridge node.
    Bridge,
    /// Every node sees a different majority.
    MajoritiesRing,
    /// The leader's messages to the others are lost; theirs to it arrive.
    LeaderMute,
    /// The others' messages to the leader are lost; its own arrive.
    LeaderDeaf,
}

impl Shape {
    /// Every shape, in the order the schedule draws from.
    pub const ALL: [Shape; 8] = [
        Shape::Halves,
        Shape::RandomHalves,
        Shape::One,
        Shape::IsolateLeader,
        Shape::Bridge,
        Shape::MajoritiesRing,
        Shape::LeaderMute,
        Shape::LeaderDeaf,
    ];

    /// The spelling in the plan and the history.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Halves => "halves",
            Shape::RandomHalves => "random-halves",
            Shape::One => "one",
            Shape::IsolateLeader => "isolate-leader",
            Shape::Bridge => "bridge",
            Shape::MajoritiesRing => "majorities-ring",
            Shape::LeaderMute => "leader-mute",
            Shape::LeaderDeaf => "leader-deaf",
        }
    }

    fn needs_leader(self) -> bool {
        matches!(
            self,
            Shape::IsolateLeader | Shape::LeaderMute | Shape::LeaderDeaf
        )
    }
}

/// What a fault acts on: symbolic (planned) or concrete (resolved).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FaultValue {
    /// Planned node targets.
    Nodes(NodeSpec),
    /// Resolved node targets.
    Targets(Vec<NodeId>),
    /// Planned partition.
    Shape(Shape),
    /// Resolved partition, with the shape it came from.
    Grudge(Shape, Grudge),
    /// Heal, or a planned client pause or resume: no value.
    None,
    /// Resolved client slots (for pause-clients and resume-clients).
    Clients(Vec<u64>),
    /// Planned or resolved clock change: rate in parts per thousand (1000 = normal) and a
    /// one-time jump in ms.
    Clock {
        /// Which nodes (resolved ops carry `targets`).
        spec: NodeSpec,
        /// Resolved targets (empty while planned).
        targets: Vec<NodeId>,
        /// The lease clock's rate, per mille.
        rate_permille: u32,
        /// A one-time jump of the lease clock, ms (may be negative).
        jump_ms: i64,
    },
    /// Planned or resolved strobe: `count` changes, `period_ms` apart, alternating a backward
    /// jump of `delta_ms` (at normal rate) and half speed.
    Strobe {
        /// Which nodes.
        spec: NodeSpec,
        /// Resolved targets (empty while planned).
        targets: Vec<NodeId>,
        /// Jump size, ms.
        delta_ms: i64,
        /// Time between jumps, ms.
        period_ms: u64,
        /// Number of jumps (bounded by `STROBE_JUMPS_MAX`).
        count: u32,
    },
}

/// The most jumps one strobe makes.
pub const STROBE_JUMPS_MAX: u32 = 20;

/// One fault operation: the verb and what it acts on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FaultOp {
    /// The verb.
    pub f: Verb,
    /// The targets.
    pub value: FaultValue,
}

impl FaultOp {
    /// A planned op.
    pub fn new(f: Verb, value: FaultValue) -> Self {
        FaultOp { f, value }
    }

    /// True when resolving it needs the current leader.
    pub fn needs_leader(&self) -> bool {
        match &self.value {
            FaultValue::Nodes(s) => *s == NodeSpec::Leader,
            FaultValue::Clock { spec, .. } | FaultValue::Strobe { spec, .. } => {
                *spec == NodeSpec::Leader
            }
            FaultValue::Shape(s) => s.needs_leader(),
            _ => false,
        }
    }

    /// The nodes a resolved op targets (empty for partitions and heal).
    pub fn targets(&self) -> &[NodeId] {
        match &self.value {
            FaultValue::Targets(t) => t,
            FaultValue::Clock { targets, .. } | FaultValue::Strobe { targets, .. } => targets,
            _ => &[],
        }
    }

    /// True for a resolved op with no targets at all (nothing to do).
    pub fn acts_on_nothing(&self) -> bool {
        match &self.value {
            FaultValue::Targets(t) => t.is_empty(),
            FaultValue::Clients(c) => c.is_empty(),
            FaultValue::Clock { targets, .. } | FaultValue::Strobe { targets, .. } => {
                targets.is_empty()
            }
            _ => false,
        }
    }

    /// The history's `value` cell: targets and shape, e.g. `n1 n2 | n3 n4 n5 (halves)`.
    pub fn describe(&self, nodes: &[NodeId]) -> String {
        let list = |t: &[NodeId]| {
            t.iter()
                .map(|n| format!("n{n}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        match &self.value {
            FaultValue::Nodes(s) => s.name().to_owned(),
            FaultValue::Targets(t) => list(t),
            FaultValue::Shape(s) => s.name().to_owned(),
            FaultValue::Grudge(s, g) => format!("{} ({})", g.describe(nodes), s.name()),
            FaultValue::None => String::new(),
            FaultValue::Clients(c) => c
                .iter()
                .map(|c| format!("c{c}"))
                .collect::<Vec<_>>()
                .join(" "),
            FaultValue::Clock {
                spec,
                targets,
                rate_permille,
                jump_ms,
            } => {
                let who = if targets.is_empty() {
                    spec.name().to_owned()
                } else {
                    list(targets)
                };
                format!("{who} rate={rate_permille}/1000 jump={jump_ms}ms")
            }
            FaultValue::Strobe {
                spec,
                targets,
                delta_ms,
                period_ms,
                count,
            } => {
                let who = if targets.is_empty() {
                    spec.name().to_owned()
                } else {
                    list(targets)
                };
                format!("{who} delta={delta_ms}ms period={period_ms}ms count={count}")
            }
        }
    }
}

/// What the runner knows when it resolves an op.
#[derive(Clone, Debug, Default)]
pub struct ResolveContext {
    /// Every node.
    pub nodes: Vec<NodeId>,
    /// The leader, when the op needs one and one answered.
    pub leader: Option<NodeId>,
    /// Nodes killed and not yet restarted.
    pub killed: BTreeSet<NodeId>,
    /// Nodes paused and not yet resumed.
    pub paused: BTreeSet<NodeId>,
    /// Nodes whose lease clock is skewed.
    pub skewed: BTreeSet<NodeId>,
    /// The number of client slots.
    pub client_slots: u64,
    /// Client slots stalled and not yet resumed.
    pub paused_clients: BTreeSet<u64>,
}

fn pick_nodes(
    spec: NodeSpec,
    from: &[NodeId],
    faulty: &BTreeSet<NodeId>,
    ctx: &ResolveContext,
    rng: &mut Rng,
) -> Vec<NodeId> {
    let n = ctx.nodes.len();
    let mut pool = from.to_vec();
    rng.shuffle(&mut pool);
    let count = match spec {
        NodeSpec::One => 1,
        NodeSpec::Minority => ((n.saturating_sub(1)) / 2).max(1),
        NodeSpec::Majority => n / 2 + 1,
        NodeSpec::All => n,
        NodeSpec::Faulty => return faulty.iter().copied().collect(),
        NodeSpec::Leader => {
            return match ctx.leader.filter(|l| from.contains(l)) {
                Some(l) => vec![l],
                None => pool.into_iter().take(1).collect(),
            };
        }
    };
    let mut out: Vec<NodeId> = pool.into_iter().take(count).collect();
    out.sort_unstable();
    out
}

/// Resolves a planned op into a concrete one (pure: same inputs, same result).
///
/// Kill targets nodes that are up (a paused node counts as up: it is resumed first); pause
/// targets running nodes; restart, resume and reset-clock target what this family left
/// faulty. Leader specs fall back to a random node when no leader answered.
pub fn resolve(op: &FaultOp, ctx: &ResolveContext, rng: &mut Rng) -> FaultOp {
    let up: Vec<NodeId> = ctx
        .nodes
        .iter()
        .copied()
        .filter(|n| !ctx.killed.contains(n))
        .collect();
    let running: Vec<NodeId> = up
        .iter()
        .copied()
        .filter(|n| !ctx.paused.contains(n))
        .collect();
    let value = match (&op.f, &op.value) {
        (Verb::Kill, FaultValue::Nodes(s)) => {
            FaultValue::Targets(pick_nodes(*s, &up, &ctx.killed, ctx, rng))
        }
        (Verb::Restart, FaultValue::Nodes(s)) => FaultValue::Targets(
            pick_nodes(*s, &ctx.nodes, &ctx.killed, ctx, rng)
                .into_iter()
                .filter(|n| ctx.killed.contains(n))
                .collect(),
        ),
        (Verb::Pause, FaultValue::Nodes(s)) => {
            FaultValue::Targets(pick_nodes(*s, &running, &ctx.paused, ctx, rng))
        }
        (Verb::Resume, FaultValue::Nodes(s)) => FaultValue::Targets(
            pick_nodes(*s, &ctx.nodes, &ctx.paused, ctx, rng)
                .into_iter()
                .filter(|n| ctx.paused.contains(n))
                .collect(),
        ),
        // A host's interface is there whether its node runs or not.
        (Verb::Slow | Verb::Flaky | Verb::Unslow | Verb::Unflaky, FaultValue::Nodes(s)) => {
            FaultValue::Targets(pick_nodes(*s, &ctx.nodes, &BTreeSet::new(), ctx, rng))
        }
        (Verb::Partition, FaultValue::Shape(shape)) => {
            FaultValue::Grudge(*shape, shape_grudge(*shape, ctx, rng))
        }
        (
            Verb::Skew | Verb::ResetClock,
            FaultValue::Clock {
                spec,
                rate_permille,
                jump_ms,
                ..
            },
        ) => {
            let targets = pick_nodes(*spec, &up, &ctx.skewed, ctx, rng);
            FaultValue::Clock {
                spec: *spec,
                targets,
                rate_permille: *rate_permille,
                jump_ms: *jump_ms,
            }
        }
        (
            Verb::Strobe,
            FaultValue::Strobe {
                spec,
                delta_ms,
                period_ms,
                count,
                ..
            },
        ) => {
            let targets = pick_nodes(*spec, &up, &ctx.skewed, ctx, rng);
            FaultValue::Strobe {
                spec: *spec,
                targets,
                delta_ms: *delta_ms,
                period_ms: *period_ms,
                count: (*count).min(STROBE_JUMPS_MAX),
            }
        }
        (Verb::PauseClients, FaultValue::None) => {
            let mut slots: Vec<u64> = (0..ctx.client_slots)
                .filter(|c| !ctx.paused_clients.contains(c))
                .collect();
            rng.shuffle(&mut slots);
            slots.truncate(ctx.client_slots.div_ceil(3) as usize);
            slots.sort_unstable();
            FaultValue::Clients(slots)
        }
        (Verb::ResumeClients, FaultValue::None) => {
            FaultValue::Clients(ctx.paused_clients.iter().copied().collect())
        }
        (_, other) => other.clone(),
    };
    FaultOp { f: op.f, value }
}

fn shape_grudge(shape: Shape, ctx: &ResolveContext, rng: &mut Rng) -> Grudge {
    let nodes = &ctx.nodes;
    let leader = ctx.leader.unwrap_or_else(|| *rng.pick(nodes).unwrap_or(&1));
    let others: Vec<NodeId> = nodes.iter().copied().filter(|n| *n != leader).collect();
    match shape {
        Shape::Halves => grudge::halves(nodes),
        Shape::RandomHalves => grudge::random_halves(nodes, rng),
        Shape::One => grudge::one(nodes, *rng.pick(nodes).unwrap_or(&1)),
        Shape::IsolateLeader => grudge::one(nodes, leader),
        Shape::Bridge => {
            let mut shuffled = nodes.clone();
            rng.shuffle(&mut shuffled);
            grudge::bridge(&shuffled)
        }
        Shape::MajoritiesRing => {
            let mut shuffled = nodes.clone();
            rng.shuffle(&mut shuffled);
            grudge::majorities_ring(&shuffled)
        }
        Shape::LeaderMute => grudge::one_way(&[leader], &others),
        Shape::LeaderDeaf => grudge::one_way(&others, &[leader]),
    }
}

/// How a fault went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultOutcome {
    /// True when every step of the fault was done.
    pub ok: bool,
    /// What happened, or what failed (goes to the completion row's `error` cell when not ok).
    pub detail: String,
}

impl FaultOutcome {
    /// Success.
    pub fn done(detail: impl Into<String>) -> Self {
        FaultOutcome {
            ok: true,
            detail: detail.into(),
        }
    }

    /// Failure, with why.
    pub fn failed(detail: impl Into<String>) -> Self {
        FaultOutcome {
            ok: false,
            detail: detail.into(),
        }
    }
}

/// A fault injector for one or more fault kinds (Jepsen's Nemesis protocol).
///
/// `invoke` is synchronous and may block (signals, iptables, a clock RPC through a runtime
/// handle); the runner calls it from a blocking thread with a timeout. Part from STYLE's
/// sketch: `setup` takes no `&Cluster`, because each nemesis is built holding the handles it
/// needs (the cluster, the net, the system's control client).
pub trait Nemesis: Send {
    /// Prepares (e.g. heals any leftover state). Called once before the first fault.
    fn setup(&mut self) -> Result<(), Error>;
    /// Performs one resolved fault op.
    fn invoke(&mut self, op: &FaultOp) -> FaultOutcome;
    /// Undoes everything (idempotent); called at the end and on every error path.
    fn teardown(&mut self) -> Result<(), Error>;
    /// The fault kinds this nemesis handles.
    fn fs(&self) -> &[FaultKind];
}

/// Several nemeses as one: each op goes to the child that claims its verb's kind.
pub struct Composed {
    children: Vec<Box<dyn Nemesis>>,
    route: BTreeMap<FaultKind, usize>,
    kinds: Vec<FaultKind>,
}

/// Joins nemeses; two children claiming the same [`FaultKind`] is an error.
pub fn compose(children: Vec<Box<dyn Nemesis>>) -> Result<Composed, Error> {
    let mut route = BTreeMap::new();
    for (i, child) in children.iter().enumerate() {
        for kind in child.fs() {
            if let Some(j) = route.insert(*kind, i) {
                return Err(Error::Nemesis(format!(
                    "nemeses {j} and {i} both claim fault kind {}",
                    kind.name()
                )));
            }
        }
    }
    let kinds = route.keys().copied().collect();
    Ok(Composed {
        children,
        route,
        kinds,
    })
}

impl Nemesis for Composed {
    fn setup(&mut self) -> Result<(), Error> {
        self.children.iter_mut().try_for_each(|c| c.setup())
    }

    fn invoke(&mut self, op: &FaultOp) -> FaultOutcome {
        match op.f.kind().and_then(|kind| self.route.get(&kind)) {
            Some(i) => self.children[*i].invoke(op),
            None => FaultOutcome::failed(format!("no nemesis handles {}", op.f.name())),
        }
    }

    fn teardown(&mut self) -> Result<(), Error> {
        // Tear every child down even if one fails; report the first failure.
        let mut first = Ok(());
        for child in &mut self.children {
            if let Err(e) = child.teardown()
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    fn fs(&self) -> &[FaultKind] {
        &self.kinds
    }
}

/// A fault family: the ops that start and stop one episode, and the ops that undo it.
#[derive(Clone, Debug)]
pub struct PackagePlan {
    /// The family.
    pub kind: FaultKind,
    /// The final schedule: run in order before the recovery phase, even after errors.
    pub final_schedule: Vec<FaultOp>,
}

/// A fault family with its nemesis (STYLE practice 10: `{ schedule, final_schedule,
/// nemesis }`; the schedule is [`episode`], drawn by `schedule.rs`).
pub struct Package {
    /// Kind and final schedule.
    pub plan: PackagePlan,
    /// The nemesis that performs this family's ops.
    pub nemesis: Box<dyn Nemesis>,
}

/// The final schedule of a family: the ops that undo any fault of it.
pub fn final_schedule(kind: FaultKind) -> Vec<FaultOp> {
    match kind {
        FaultKind::Kill => vec![FaultOp::new(
            Verb::Restart,
            FaultValue::Nodes(NodeSpec::Faulty),
        )],
        FaultKind::Pause => vec![
            FaultOp::new(Verb::Resume, FaultValue::Nodes(NodeSpec::Faulty)),
            FaultOp::new(Verb::ResumeClients, FaultValue::None),
        ],
        FaultKind::Partition => vec![FaultOp::new(Verb::Heal, FaultValue::None)],
        FaultKind::Clock => vec![reset_clock()],
        FaultKind::Netem => crate::netem::heal(),
    }
}

fn reset_clock() -> FaultOp {
    FaultOp::new(
        Verb::ResetClock,
        FaultValue::Clock {
            spec: NodeSpec::Faulty,
            targets: vec![],
            rate_permille: 1000,
            jump_ms: 0,
        },
    )
}

const KILL_SPECS: [NodeSpec; 5] = [
    NodeSpec::One,
    NodeSpec::Minority,
    NodeSpec::Majority,
    NodeSpec::All,
    NodeSpec::Leader,
];
const CLOCK_SPECS: [NodeSpec; 3] = [NodeSpec::One, NodeSpec::Minority, NodeSpec::Leader];
/// Clock rates of skews: all slower than real time. A lease service may assume bounded
/// drift (DESIGN: the checker's `--drift`, default 1%); a clock running fast breaks that
/// assumption for any lease-based lock, so the default clock family does not run clocks fast
/// (see [`episode`]).
const CLOCK_RATES_PERMILLE: [u32; 4] = [250, 500, 750, 900];
/// One-time jumps of skews: backwards only (lockd holds its clock still instead of going
/// back), for the same reason.
const CLOCK_JUMPS_MS: [i64; 4] = [0, -250, -1000, -3000];

/// One episode of a family: the op that starts the fault and the op that ends it, drawn from
/// `rng` (pure). The episode's length is for `schedule.rs` to choose.
///
/// Clock episodes stay inside what a correct lease service may assume: a node's lease
/// clock runs slow or stands still (backward jumps), and a strobe alternates backward jumps
/// and half speed, so the clock is never ahead of real time. A fast clock makes any
/// lease holder's lease end early at that node, which no lease protocol survives (the
/// fencing check still must pass); measured with an earlier plan that ran clocks at 2-4x.
pub fn episode(kind: FaultKind, rng: &mut Rng) -> (FaultOp, FaultOp) {
    match kind {
        FaultKind::Kill => {
            let spec = *rng.pick(&KILL_SPECS).unwrap_or(&NodeSpec::One);
            (
                FaultOp::new(Verb::Kill, FaultValue::Nodes(spec)),
                final_schedule(kind).remove(0),
            )
        }
        FaultKind::Pause if rng.chance(1, 3) => (
            FaultOp::new(Verb::PauseClients, FaultValue::None),
            FaultOp::new(Verb::ResumeClients, FaultValue::None),
        ),
        FaultKind::Pause => {
            let spec = *rng.pick(&KILL_SPECS).unwrap_or(&NodeSpec::One);
            (
                FaultOp::new(Verb::Pause, FaultValue::Nodes(spec)),
                final_schedule(kind).remove(0),
            )
        }
        FaultKind::Partition => {
            let shape = *rng.pick(&Shape::ALL).unwrap_or(&Shape::Halves);
            (
                FaultOp::new(Verb::Partition, FaultValue::Shape(shape)),
                final_schedule(kind).remove(0),
            )
        }
        FaultKind::Clock => {
            let spec = *rng.pick(&CLOCK_SPECS).unwrap_or(&NodeSpec::One);
            let start = if rng.chance(1, 2) {
                let rate = *rng.pick(&CLOCK_RATES_PERMILLE).unwrap_or(&500);
                let jump_ms = *rng.pick(&CLOCK_JUMPS_MS).unwrap_or(&0);
                FaultOp::new(
                    Verb::Skew,
                    FaultValue::Clock {
                        spec,
                        targets: vec![],
                        rate_permille: rate,
                        jump_ms,
                    },
                )
            } else {
                let delta_ms = 1i64 << rng.range(4, 10);
                let period_ms = 1u64 << rng.range(4, 7);
                let count = 2 * rng.range(2, u64::from(STROBE_JUMPS_MAX / 2)) as u32;
                FaultOp::new(
                    Verb::Strobe,
                    FaultValue::Strobe {
                        spec,
                        targets: vec![],
                        delta_ms,
                        period_ms,
                        count,
                    },
                )
            };
            (start, reset_clock())
        }
        FaultKind::Netem => crate::netem::episode(rng),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(Vec<FaultKind>);

    impl Nemesis for Fake {
        fn setup(&mut self) -> Result<(), Error> {
            Ok(())
        }
        fn invoke(&mut self, op: &FaultOp) -> FaultOutcome {
            FaultOutcome::done(op.f.name())
        }
        fn teardown(&mut self) -> Result<(), Error> {
            Ok(())
        }
        fn fs(&self) -> &[FaultKind] {
            &self.0
        }
    }

    fn ctx(n: u64) -> ResolveContext {
        ResolveContext {
            nodes: (1..=n).collect(),
            ..ResolveContext::default()
        }
    }

    #[test]
    fn compose_rejects_two_nemeses_claiming_one_kind() {
        // STYLE practice 10: compose() rejects two children that claim the same FaultKind.
        let dup = compose(vec![
            Box::new(Fake(vec![FaultKind::Kill])),
            Box::new(Fake(vec![FaultKind::Pause, FaultKind::Kill])),
        ]);
        assert!(matches!(dup, Err(Error::Nemesis(m)) if m.contains("kill")));
        let mut ok = compose(vec![
            Box::new(Fake(vec![FaultKind::Kill])),
            Box::new(Fake(vec![FaultKind::Pause])),
        ])
        .expect("distinct kinds compose");
        assert_eq!(ok.fs(), &[FaultKind::Kill, FaultKind::Pause]);
        assert!(ok.invoke(&FaultOp::new(Verb::Resume, FaultValue::None)).ok);
        assert!(!ok.invoke(&FaultOp::new(Verb::Heal, FaultValue::None)).ok);
    }

    #[test]
    fn node_specs_resolve_to_the_right_counts() {
        // Issue 5: one, a minority, a majority, all, or the leader.
        let mut c = ctx(5);
        c.leader = Some(4);
        let mut rng = Rng::new(1);
        let count = |spec, rng: &mut Rng| {
            resolve(&FaultOp::new(Verb::Kill, FaultValue::Nodes(spec)), &c, rng)
                .targets()
                .len()
        };
        assert_eq!(count(NodeSpec::One, &mut rng), 1);
        assert_eq!(count(NodeSpec::Minority, &mut rng), 2);
        assert_eq!(count(NodeSpec::Majority, &mut rng), 3);
        assert_eq!(count(NodeSpec::All, &mut rng), 5);
        let leader = resolve(
            &FaultOp::new(Verb::Pause, FaultValue::Nodes(NodeSpec::Leader)),
            &c,
            &mut rng,
        );
        assert_eq!(leader.targets(), &[4]);
    }

    #[test]
    fn restart_targets_exactly_the_killed_nodes() {
        // Issue 5 / jepsen.md pitfalls: recovery targets are what was faulted, recorded.
        let mut c = ctx(5);
        c.killed = [2, 5].into();
        c.paused = [3].into();
        let mut rng = Rng::new(2);
        let restart = resolve(&final_schedule(FaultKind::Kill)[0], &c, &mut rng);
        assert_eq!(restart.targets(), &[2, 5]);
        let resume = resolve(&final_schedule(FaultKind::Pause)[0], &c, &mut rng);
        assert_eq!(resume.targets(), &[3]);
        // Pause never picks a killed node; kill may pick a paused one.
        let all_pause = resolve(
            &FaultOp::new(Verb::Pause, FaultValue::Nodes(NodeSpec::All)),
            &c,
            &mut rng,
        );
        assert_eq!(all_pause.targets(), &[1, 4]);
    }

    #[test]
    fn leader_shapes_use_the_leader() {
        // Issue 5: isolate the leader; one-way cuts around it.
        let mut c = ctx(5);
        c.leader = Some(3);
        let mut rng = Rng::new(3);
        let iso = resolve(
            &FaultOp::new(Verb::Partition, FaultValue::Shape(Shape::IsolateLeader)),
            &c,
            &mut rng,
        );
        assert_eq!(iso.describe(&c.nodes), "n1 n2 n4 n5 | n3 (isolate-leader)");
        let mute = resolve(
            &FaultOp::new(Verb::Partition, FaultValue::Shape(Shape::LeaderMute)),
            &c,
            &mut rng,
        );
        let FaultValue::Grudge(_, g) = &mute.value else {
            panic!("not a grudge: {mute:?}")
        };
        assert!(g.is_cut(3, 1) && !g.is_cut(1, 3));
    }

    #[test]
    fn client_pauses_stall_a_third_of_the_slots_and_resume_exactly_those() {
        // jepsen.md 2.5: a stalled lock holder (GC pause) is the case fencing exists for.
        let mut c = ctx(3);
        c.client_slots = 10;
        let mut rng = Rng::new(4);
        let pause = resolve(
            &FaultOp::new(Verb::PauseClients, FaultValue::None),
            &c,
            &mut rng,
        );
        let FaultValue::Clients(slots) = &pause.value else {
            panic!("{pause:?}")
        };
        assert_eq!(slots.len(), 4, "ceil(10/3) slots: {slots:?}");
        assert!(slots.iter().all(|s| *s < 10));
        c.paused_clients = slots.iter().copied().collect();
        let resume = resolve(&final_schedule(FaultKind::Pause)[1], &c, &mut rng);
        assert_eq!(resume.value, FaultValue::Clients(slots.clone()));
        assert_eq!(resume.describe(&c.nodes).split(' ').count(), 4);
        assert!(!resume.acts_on_nothing());
        c.paused_clients.clear();
        assert!(resolve(&final_schedule(FaultKind::Pause)[1], &c, &mut rng).acts_on_nothing());
    }
}
