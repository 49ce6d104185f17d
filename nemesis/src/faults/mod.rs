//! Faults as data (STYLE practice 10). A [`FaultOp`] `{ f, value }` is what the schedule
//! plans and what the history records (process `nemesis`); its [`Family`] performs it.
//!
//! A planned op names its targets symbolically ([`NodeSpec`]: one, a minority, a majority,
//! all, the leader; [`Shape`]: halves, bridge, ...). Just before it acts, the fault driver
//! (`harness::driver`) resolves it ([`resolve`], a pure function of the cluster's state, the
//! leader it asked for, and a seeded RNG) into a concrete op naming nodes or a [`Grudge`],
//! records that concrete op, and only then acts (record before acting: a fault that hangs or
//! crashes the harness is still in the history).
//!
//! One file per family, each a [`Family`] value: its verbs, its episode generator (start
//! and stop ops, used by `schedule.rs`), its final schedule (the ops that undo it, always run
//! before the recovery phase), how it chooses targets and how it acts through the seams of
//! the [`World`] — the same code on real processes and in the simulator:
//!
//! | file | kind | verbs |
//! |---|---|---|
//! | `kill.rs` | kill | kill / restart |
//! | `pause.rs` | pause | pause / resume, pause-clients / resume-clients |
//! | `partition.rs` | partition | partition / heal |
//! | `clock.rs` | clock | skew or strobe / reset-clock |
//! | `netem.rs` | netem | slow / unslow, flaky / unflaky |
//!
//! A family's plot colour stays with the history's vocabulary in
//! `checker::report::plot::faults`: the plots draw any tool's history, not only ours.

pub mod clock;
pub mod kill;
pub mod netem;
pub mod partition;
pub mod pause;

use std::collections::BTreeSet;
use std::str::FromStr;

use futures::future::BoxFuture;
use serde::Serialize;

use crate::harness::World;
use crate::net::Grudge;
use crate::rng::Rng;
use crate::{Error, NodeId};

/// A family of faults; one nemesis handles each.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
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
            // The simulator's crash and client fault points, not a nemesis's, and the
            // marker.
            Verb::Crash
            | Verb::Revive
            | Verb::ClientFault
            | Verb::ClientFaultEnd
            | Verb::Recover => None,
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

pub(crate) fn pick_nodes(
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

/// Resolves a planned op into a concrete one (pure: same inputs, same result), by the
/// family its verb belongs to ([`Family::resolve`]). An op of no family (`recover`) stays as
/// it is.
///
/// Kill targets nodes that are up (a paused node counts as up: it is resumed first); pause
/// targets running nodes; restart, resume and reset-clock target what their family left
/// faulty. Leader specs fall back to a random node when no leader answered.
pub fn resolve(op: &FaultOp, ctx: &ResolveContext, rng: &mut Rng) -> FaultOp {
    let value = match op.f.kind() {
        Some(kind) => family(kind).resolve(op, ctx, rng),
        None => op.value.clone(),
    };
    FaultOp { f: op.f, value }
}

impl ResolveContext {
    /// Nodes that are up (not killed; a paused node is up).
    pub fn up(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .copied()
            .filter(|n| !self.killed.contains(n))
            .collect()
    }

    /// Nodes that are up and not paused.
    pub fn running(&self) -> Vec<NodeId> {
        self.up()
            .into_iter()
            .filter(|n| !self.paused.contains(n))
            .collect()
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

/// A fault family as one value (Jepsen's nemesis packages): its verbs, its generator, its
/// final heal, how its targets are chosen, and how it acts. It acts only through the seams of
/// the [`World`] (the nodes, the net, the system's clock control, the client stalls), so
/// one family runs unchanged on real processes (`locksmith test`) and in the simulator
/// (`locksmith sim`). Adding a family is a file in this folder and a line in [`FAMILIES`].
pub trait Family: Send + Sync {
    /// The kind (`--nemesis` name).
    fn kind(&self) -> FaultKind;

    /// Every verb of the family, starts and ends (each verb belongs to exactly one family).
    fn verbs(&self) -> &'static [Verb];

    /// One episode: the op that starts a fault and the op that ends it, drawn from `rng`
    /// (pure). The episode's length is for `schedule.rs` to choose.
    fn episode(&self, rng: &mut Rng) -> (FaultOp, FaultOp);

    /// The ops that undo any fault of the family, run in order before the recovery phase.
    fn final_schedule(&self) -> Vec<FaultOp>;

    /// The concrete value of a planned op of this family (pure: same inputs, same result).
    fn resolve(&self, op: &FaultOp, ctx: &ResolveContext, rng: &mut Rng) -> FaultValue;

    /// Performs a resolved op on `world`.
    fn act<'a>(&'a self, op: &'a FaultOp, world: &'a World) -> BoxFuture<'a, FaultOutcome>;
}

/// Every fault family, in the order their final schedules run.
pub static FAMILIES: [&dyn Family; 5] = [
    &kill::Kill,
    &pause::Pause,
    &partition::Partition,
    &clock::Clock,
    &netem::Netem,
];

/// The family of `kind`.
pub fn family(kind: FaultKind) -> &'static dyn Family {
    FAMILIES
        .iter()
        .copied()
        .find(|f| f.kind() == kind)
        .unwrap_or(&kill::Kill)
}

/// The final schedule of a family: the ops that undo any fault of it.
pub fn final_schedule(kind: FaultKind) -> Vec<FaultOp> {
    family(kind).final_schedule()
}

/// One episode of a family (see [`Family::episode`]).
pub fn episode(kind: FaultKind, rng: &mut Rng) -> (FaultOp, FaultOp) {
    family(kind).episode(rng)
}

/// Runs `act` on each target and says how it went: done, or every target that failed.
pub(crate) async fn each<'a, F, Fut>(targets: &'a [NodeId], mut act: F) -> FaultOutcome
where
    F: FnMut(NodeId) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>> + 'a,
{
    let mut failures = Vec::new();
    for id in targets {
        if let Err(e) = act(*id).await {
            failures.push(format!("n{id}: {e}"));
        }
    }
    if failures.is_empty() {
        FaultOutcome::done(format!("{} node(s)", targets.len()))
    } else {
        FaultOutcome::failed(failures.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(n: u64) -> ResolveContext {
        ResolveContext {
            nodes: (1..=n).collect(),
            ..ResolveContext::default()
        }
    }

    #[test]
    fn every_verb_belongs_to_exactly_one_family_and_each_kind_has_one() {
        // STYLE practice 10 (compose rejects two children claiming one kind), now as data:
        // one family per kind, and a verb's family is the one its kind names.
        for verb in Verb::ALL {
            let owners: Vec<FaultKind> = FAMILIES
                .iter()
                .filter(|f| f.verbs().contains(verb))
                .map(|f| f.kind())
                .collect();
            match verb.kind() {
                Some(kind) => assert_eq!(owners, vec![kind], "{verb}"),
                None => assert!(owners.is_empty(), "{verb} is a marker: {owners:?}"),
            }
        }
        let mut kinds: Vec<FaultKind> = FAMILIES.iter().map(|f| f.kind()).collect();
        kinds.sort();
        kinds.dedup();
        assert_eq!(kinds.len(), FAMILIES.len(), "two families claim one kind");
        for kind in FaultKind::ALL.into_iter().chain([FaultKind::Netem]) {
            assert_eq!(family(kind).kind(), kind);
            // Every family's final schedule undoes with verbs of its own.
            for op in final_schedule(kind) {
                assert_eq!(op.f.kind(), Some(kind), "{op:?}");
                assert!(op.f.ends_fault(), "{op:?}");
            }
        }
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
