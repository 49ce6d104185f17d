//! Random walks and swarm search: depth where breadth-first search cannot go.
//!
//! A walk starts at the initial state and takes up to its depth bound of random steps of the
//! unreduced actor model (so that its path is a real run), checking every property after
//! every step. It ends early when no action is enabled. With swarm search (on by default;
//! Groce et al., "Swarm Testing", ISSTA 2012) every walk draws its own bounds and its own
//! choice order: a depth between half the bound and the bound, and a weight per kind of action
//! (deliveries of Raft messages, of requests, of answers; each kind of timer; crashes,
//! restarts, drops), where the weights of optional kinds may be zero. One walk then
//! concentrates on elections, another on leases or crashes, which reaches deep corners that
//! uniform choices reach rarely.
//!
//! Every walk's choices come from a seed derived from the run's seed and the walk's number,
//! so a run is reproducible from its seed (with one thread; with more, which walk finds a
//! violation first may vary, and the violation found is printed with its walk number).
//!
//! A violation found by a walk is shortened before it is reported ([`shorten`]): chunks of
//! steps are removed while the shorter run, replayed leniently (a step no longer enabled is
//! skipped), still violates the same property.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockd::raft::Timer;
use lockd::rng::splitmix64;
use stateright::actor::ActorModelAction;
use stateright::{Expectation, Model};

use super::actor::{ModelMsg, ModelTimer};
use super::explain::LockdAction;
use super::{LockdModel, LockdState};

/// What to run.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WalkOptions {
    /// Walks to run, at most.
    pub walks_max: u64,
    /// The depth bound of a walk (steps).
    pub depth_max: usize,
    /// Threads walking in parallel.
    pub threads: usize,
    /// The run's seed.
    pub seed: u64,
    /// Random bounds and weights per walk (swarm); uniform choices otherwise.
    pub swarm: bool,
    /// Stop starting walks after this long.
    pub time_limit: Duration,
    /// Time allowed to shorten a counterexample.
    pub shorten_limit: Duration,
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions {
            walks_max: 1_000_000,
            depth_max: 60,
            threads: 2,
            seed: 1,
            swarm: true,
            time_limit: Duration::from_secs(40),
            shorten_limit: Duration::from_secs(10),
        }
    }
}

/// A run of actions from the initial state, with the states it passes.
pub type Run = Vec<(LockdState, Option<LockdAction>)>;

/// A property's first discovery by a walk.
#[derive(Clone, Debug)]
pub struct Found {
    /// The walk that found it.
    pub walk: u64,
    /// The run, shortened for a violation.
    pub run: Run,
    /// Steps of the run before shortening.
    pub steps_before_shortening: usize,
}

/// What the walks found.
#[derive(Debug, Default)]
pub struct WalkReport {
    /// Walks run.
    pub walks: u64,
    /// Steps taken (states generated) over all walks.
    pub steps: u64,
    /// How long the walks took.
    pub elapsed: Duration,
    /// Whether the time limit stopped the walks before `walks_max`.
    pub timed_out: bool,
    /// The first discovery of each property (an example for `sometimes`, a counterexample for
    /// `always`), by name.
    pub found: BTreeMap<&'static str, Found>,
}

impl WalkReport {
    /// The name of a violated `always` property, if any.
    pub fn violation(&self, model: &LockdModel) -> Option<&'static str> {
        model
            .properties()
            .into_iter()
            .find(|p| p.expectation == Expectation::Always && self.found.contains_key(p.name))
            .map(|p| p.name)
    }
}

/// The kinds of actions a swarm walk weighs.
const KINDS: usize = 12;

fn kind(action: &LockdAction) -> usize {
    match action {
        ActorModelAction::Deliver { msg, .. } => match msg {
            ModelMsg::Raft(_) => 0,
            ModelMsg::Request { .. } | ModelMsg::Cancel { .. } => 1,
            ModelMsg::Response { .. } => 2,
        },
        ActorModelAction::Timeout(_, timer) => match timer {
            ModelTimer::Core(Timer::Election) => 3,
            ModelTimer::Core(Timer::Heartbeat) => 4,
            ModelTimer::Core(Timer::CheckQuorum) => 5,
            ModelTimer::Core(Timer::Lease { .. } | Timer::Wait { .. }) => 6,
            ModelTimer::ClientRelease => 7,
            ModelTimer::ClientRetry | ModelTimer::ClientGiveUp => 8,
            // A save completes as often as a Raft message arrives (an fsync takes about a
            // network hop), never with weight zero: a server that never saves takes no input.
            // Sharing a kind also leaves the walks without split steps drawing as before.
            ModelTimer::Save => 0,
        },
        ActorModelAction::Crash(_) => 9,
        ActorModelAction::Recover(_) => 10,
        ActorModelAction::Drop(_) | ActorModelAction::SelectRandom { .. } => 11,
    }
}

/// The actor an action happens at (the receiver of a delivery).
fn actor(action: &LockdAction) -> usize {
    match action {
        ActorModelAction::Deliver { dst, .. } => usize::from(*dst),
        ActorModelAction::Timeout(id, _)
        | ActorModelAction::Crash(id)
        | ActorModelAction::Recover(id) => usize::from(*id),
        ActorModelAction::Drop(envelope) => usize::from(envelope.dst),
        ActorModelAction::SelectRandom { actor, .. } => usize::from(*actor),
    }
}

/// Actors a walk weighs separately (more are weighed alike).
const ACTORS: usize = 8;

/// One walk's bounds and weights: per kind of action and per actor, so that one walk keeps a
/// client slow (a late release, a late acquire) and another a server.
struct Swarm {
    depth: usize,
    weights: [u64; KINDS],
    actor_weights: [u64; ACTORS],
}

impl Swarm {
    fn draw(options: &WalkOptions, rng: &mut u64) -> Swarm {
        if !options.swarm {
            return Swarm {
                depth: options.depth_max,
                weights: [1; KINDS],
                actor_weights: [1; ACTORS],
            };
        }
        let half = options.depth_max / 2;
        let depth = half + (splitmix64(rng) as usize) % (options.depth_max - half + 1);
        let mut weights = [0; KINDS];
        for (k, w) in weights.iter_mut().enumerate() {
            // Deliveries and elections drive every run; the other kinds may be left out.
            let floor = u64::from(k <= 3);
            *w = [0, 1, 2, 4, 8][(splitmix64(rng) % 5) as usize].max(floor);
        }
        let mut actor_weights = [1; ACTORS];
        for w in actor_weights.iter_mut() {
            *w = [1, 1, 4, 16][(splitmix64(rng) % 4) as usize];
        }
        Swarm {
            depth,
            weights,
            actor_weights,
        }
    }

    fn weight(&self, action: &LockdAction) -> u64 {
        self.weights[kind(action)] * self.actor_weights[actor(action).min(ACTORS - 1)]
    }

    /// Picks an action by weight (uniformly among the enabled ones when all weigh zero).
    fn choose(&self, actions: &[LockdAction], rng: &mut u64) -> usize {
        let total: u64 = actions.iter().map(|a| self.weight(a)).sum();
        if total == 0 {
            return (splitmix64(rng) % actions.len() as u64) as usize;
        }
        let mut pick = splitmix64(rng) % total;
        for (i, a) in actions.iter().enumerate() {
            let w = self.weight(a);
            if pick < w {
                return i;
            }
            pick -= w;
        }
        actions.len() - 1
    }
}

/// A model's first discoveries: property name to (walk, actions of that walk so far).
type FirstFound = BTreeMap<&'static str, (u64, Vec<LockdAction>)>;

/// Shared between the walking threads.
struct Shared {
    next_walk: AtomicU64,
    stop: AtomicBool,
    /// Per model: steps taken, walks run, first discoveries.
    steps: Vec<AtomicU64>,
    walks: Vec<AtomicU64>,
    found: Vec<Mutex<FirstFound>>,
}

/// Runs the walks; stops at the first violation of an `always` property, which is shortened.
pub fn walk(model: &LockdModel, options: &WalkOptions) -> WalkReport {
    walk_models(std::slice::from_ref(model), options)
        .pop()
        .unwrap_or_default()
}

/// Runs the walks over several models (configurations) of the same actors: walk `n` runs on
/// `models[n % models.len()]`, so each model gets its share of the time whatever the time
/// limit. A configuration that reaches some states faster (two servers without pre-vote and
/// check-quorum elect in two steps) then complements another (three servers, a crash). Stops
/// every model's walks at the first violation of an `always` property in any; returns one
/// report per model (walk numbers are global).
pub fn walk_models(models: &[LockdModel], options: &WalkOptions) -> Vec<WalkReport> {
    let start = Instant::now();
    let per_model = |_| AtomicU64::new(0);
    let shared = Shared {
        next_walk: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        steps: (0..models.len()).map(per_model).collect(),
        walks: (0..models.len()).map(per_model).collect(),
        found: (0..models.len())
            .map(|_| Mutex::new(BTreeMap::new()))
            .collect(),
    };
    let properties: Vec<_> = models.iter().map(|m| m.properties()).collect();
    if !models.is_empty() {
        std::thread::scope(|scope| {
            for _ in 0..options.threads.max(1) {
                scope.spawn(|| walk_thread(models, &properties, options, &shared, start));
            }
        });
    }
    let walks = shared
        .next_walk
        .load(Ordering::Relaxed)
        .min(options.walks_max);
    let stopped_by_violation = shared.stop.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    let mut reports = Vec::new();
    for (i, (model, found)) in models.iter().zip(shared.found).enumerate() {
        let found = found.into_inner().unwrap_or_else(|e| e.into_inner());
        reports.push(WalkReport {
            walks: shared.walks[i].load(Ordering::Relaxed),
            steps: shared.steps[i].load(Ordering::Relaxed),
            elapsed,
            timed_out: walks < options.walks_max && !stopped_by_violation,
            found: shorten_found(model, &properties[i], found, options.shorten_limit),
        });
    }
    reports
}

/// The first discoveries as runs; each violation shortened.
fn shorten_found(
    model: &LockdModel,
    properties: &[stateright::Property<LockdModel>],
    found: FirstFound,
    limit: Duration,
) -> BTreeMap<&'static str, Found> {
    let mut shortened = BTreeMap::new();
    for (name, (walk, actions)) in found {
        let always = properties
            .iter()
            .any(|p| p.name == name && p.expectation == Expectation::Always);
        let before = actions.len();
        let actions = if always {
            shorten(model, name, actions, limit)
        } else {
            actions
        };
        let run = replay(model, &actions, None).0;
        shortened.insert(
            name,
            Found {
                walk,
                run,
                steps_before_shortening: before,
            },
        );
    }
    shortened
}

fn walk_thread(
    models: &[LockdModel],
    properties: &[Vec<stateright::Property<LockdModel>>],
    options: &WalkOptions,
    shared: &Shared,
    start: Instant,
) {
    let inits: Vec<LockdState> = models.iter().map(|m| m.init_states().remove(0)).collect();
    let mut actions = Vec::new();
    loop {
        if shared.stop.load(Ordering::Relaxed) || start.elapsed() >= options.time_limit {
            return;
        }
        let walk = shared.next_walk.fetch_add(1, Ordering::Relaxed);
        if walk >= options.walks_max {
            return;
        }
        let m = (walk % models.len() as u64) as usize;
        let model = &models[m];
        let mut rng = options.seed ^ walk.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let swarm = Swarm::draw(options, &mut rng);
        let mut state = inits[m].clone();
        let mut taken: Vec<LockdAction> = Vec::new();
        let mut steps = 0;
        while taken.len() < swarm.depth {
            actions.clear();
            model.actors.actions(&state, &mut actions);
            let Some(next) = step(model, &state, &mut actions, &swarm, &mut rng, &mut taken) else {
                break;
            };
            state = next;
            steps += 1;
            if check(
                &properties[m],
                model,
                &state,
                walk,
                &taken,
                &shared.found[m],
            ) {
                shared.stop.store(true, Ordering::Relaxed);
                break;
            }
        }
        shared.steps[m].fetch_add(steps, Ordering::Relaxed);
        shared.walks[m].fetch_add(1, Ordering::Relaxed);
    }
}

/// Takes one random enabled step that changes the state and stays within the boundary.
fn step(
    model: &LockdModel,
    state: &LockdState,
    actions: &mut Vec<LockdAction>,
    swarm: &Swarm,
    rng: &mut u64,
    taken: &mut Vec<LockdAction>,
) -> Option<LockdState> {
    while !actions.is_empty() {
        let i = swarm.choose(actions, rng);
        let action = actions.swap_remove(i);
        if let Some(next) = model.next_state(state, action.clone())
            && model.within_boundary(&next)
        {
            taken.push(action);
            return Some(next);
        }
    }
    None
}

/// Checks every property in `state`; records first discoveries. Returns whether an `always`
/// property is violated.
fn check(
    properties: &[stateright::Property<LockdModel>],
    model: &LockdModel,
    state: &LockdState,
    walk: u64,
    taken: &[LockdAction],
    found: &Mutex<FirstFound>,
) -> bool {
    let mut violated = false;
    for p in properties {
        let holds = (p.condition)(model, state);
        let discovered = match p.expectation {
            Expectation::Always => !holds,
            Expectation::Sometimes => holds,
            Expectation::Eventually => false,
        };
        if !discovered {
            continue;
        }
        violated |= p.expectation == Expectation::Always;
        let mut found = found.lock().unwrap_or_else(|e| e.into_inner());
        found
            .entry(p.name)
            .or_insert_with(|| (walk, taken.to_vec()));
    }
    violated
}

/// Replays `actions` from the initial state, skipping those not enabled (or that change
/// nothing, or leave the boundary). With `until`, stops at the first state that violates
/// that property, and says whether one did.
pub fn replay(model: &LockdModel, actions: &[LockdAction], until: Option<&str>) -> (Run, bool) {
    let property = until.and_then(|name| model.properties().into_iter().find(|p| p.name == name));
    let mut state = model.init_states().remove(0);
    let mut run: Run = Vec::new();
    let mut enabled = Vec::new();
    for action in actions {
        enabled.clear();
        model.actors.actions(&state, &mut enabled);
        if !enabled.contains(action) {
            continue;
        }
        let Some(next) = model.next_state(&state, action.clone()) else {
            continue;
        };
        if !model.within_boundary(&next) {
            continue;
        }
        run.push((state, Some(action.clone())));
        state = next;
        if let Some(p) = &property
            && !(p.condition)(model, &state)
        {
            run.push((state, None));
            return (run, true);
        }
    }
    run.push((state, None));
    (run, false)
}

/// Shortens a run that violates `property`: removes chunks of steps (halves, quarters, ...
/// single steps) while the lenient replay still violates it, until nothing more can go or
/// `limit` has passed.
pub fn shorten(
    model: &LockdModel,
    property: &str,
    mut actions: Vec<LockdAction>,
    limit: Duration,
) -> Vec<LockdAction> {
    let start = Instant::now();
    let taken =
        |run: &Run| -> Vec<LockdAction> { run.iter().filter_map(|(_, a)| a.clone()).collect() };
    let (run, violated) = replay(model, &actions, Some(property));
    if !violated {
        return actions; // Cannot happen for a walk's own run; kept unshortened if it does.
    }
    actions = taken(&run);
    let mut chunk = (actions.len() / 2).max(1);
    loop {
        let mut removed_any = false;
        let mut at = 0;
        while at < actions.len() {
            if start.elapsed() >= limit {
                return actions;
            }
            let end = (at + chunk).min(actions.len());
            let candidate: Vec<LockdAction> = actions[..at]
                .iter()
                .chain(&actions[end..])
                .cloned()
                .collect();
            let (run, violated) = replay(model, &candidate, Some(property));
            if violated {
                actions = taken(&run);
                removed_any = true;
            } else {
                at += chunk;
            }
        }
        if chunk == 1 && !removed_any {
            return actions;
        }
        if !removed_any {
            chunk = (chunk / 2).max(1);
        }
    }
}
