//! Fault points in the code (issue 24; FoundationDB's `BUGGIFY`, madsim's `buggify`):
//! `buggify!("name")` is a place where timing decides correctness, and under the simulator
//! it sometimes takes the rare path there: an answer that arrives late, a deadline that
//! passes early, a connection cut while a request is in flight, a message that comes again
//! seconds later.
//!
//! Outside a simulation a point is `false` at once ([`crate::sys::simulated`], which a build
//! without the `sim` feature compiles to `false`), so production never takes a rare path.
//! Inside one, a seed is either without fault points or with them ([`configure`]): each
//! point is then enabled on that seed with chance 1/[`ENABLE_ONE_IN`], decided when the seed
//! starts, and an enabled point fires with its own small chance each time it is reached.
//! Every choice comes from the seed's generator, in the order the single-threaded
//! simulation reaches the points, so a seed replays exactly.
//!
//! The state is per thread: the simulator runs each seed, every host of it, on one thread
//! of its own. Points live in the shell only (server, client, peer links, snapshot writer):
//! the sans-IO core stays a pure function of its inputs, so a trace still replays it.
//!
//! Every name is declared once in [`POINTS`]; a unit test reads the sources and checks that
//! every `buggify!` name is declared and every declared one used.

use std::cell::RefCell;

/// One fault point: its name, its chance to fire when enabled, and what taking it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// The name `buggify!` takes.
    pub name: &'static str,
    /// An enabled point fires once in this many times it is reached, on average.
    pub fire_one_in: u64,
    /// What firing does.
    pub what: &'static str,
    /// A fault, ended by the final heal ([`quiesce`]); otherwise an interleaving that
    /// production has at any time (lockd's two worker threads), which stays on to the end
    /// of the run, the phantom-lock probe included.
    pub fault: bool,
}

const fn point(name: &'static str, fire_one_in: u64, what: &'static str) -> Point {
    Point {
        name,
        fire_one_in,
        what,
        fault: true,
    }
}

/// A point that is not a fault ([`Point::fault`]).
const fn interleaving(name: &'static str, fire_one_in: u64, what: &'static str) -> Point {
    Point {
        fault: false,
        ..point(name, fire_one_in, what)
    }
}

/// The first this many points draw whether a seed enables them from one stream, whose state
/// then goes on as the stream every firing and delay draws from. Each later point draws its
/// enable from a stream of its own (the seed and its name), so that adding one leaves every
/// seed on which it is off running exactly as before: pinned seeds keep what they test.
const SHARED_ENABLE_POINTS: usize = 14;

/// One point in this many is enabled on a seed with fault points.
pub const ENABLE_ONE_IN: u64 = 2;

/// Every fault point.
pub const POINTS: &[Point] = &[
    point(
        "server-wait-late",
        10,
        "a request handler comes back to its request late (between a grant's commit and its \
         delivery), so that the answer and the end of its connection can be ready at once",
    ),
    point(
        "server-short-deadline",
        20,
        "the node gives up on a request long before the caller's timeout (an `Unknown` answer \
         while the request's entry may still commit)",
    ),
    point(
        "client-cut-connection",
        8,
        "the client closes its connection while a request is in flight and retries elsewhere",
    ),
    point(
        "client-drop-answer",
        20,
        "an answer reaches the client library, which loses it with its connection and retries",
    ),
    point(
        "client-delay",
        10,
        "the client library waits before an attempt",
    ),
    point(
        "peer-stale-copy",
        50,
        "a Raft message is delivered again, 0.2-3 s later (a long-delayed duplicate)",
    ),
    point(
        "snapshot-write-slow",
        3,
        "a snapshot written off the core's thread takes up to a second",
    ),
    point(
        "crash-before-vote-persist",
        2,
        "the node crashes after sending what needs nothing durable and before the persist of \
         a vote; the simulator restarts it",
    ),
    point(
        "crash-inside-write",
        100,
        "the node crashes between a log record's write and its fdatasync, so the simulated \
         disk keeps any of the record's sectors; the simulator restarts it",
    ),
    point(
        "crash-inside-rewrite",
        20,
        "the node crashes after writing a compacted segment and before removing the old one; \
         the simulator restarts it",
    ),
    point(
        "crash-after-snapshot-file",
        2,
        "the node crashes after writing an installed snapshot's file and before the segment \
         of the same persist; the simulator restarts it",
    ),
    point(
        "crash-before-persist",
        5_000,
        "the node crashes after sending what needs nothing durable and before its persist (a \
         crash between a send and the save of the same turn); the simulator restarts it",
    ),
    // Last but one, so that every earlier point keeps the seeds that enable it.
    point(
        "orphan-release-stall",
        1,
        "a leader stalls, for one to three election timeouts, after proposing the Release of \
         an orphaned grant and before sending it, so that another leader may replace the \
         entry and the stalled node may lead again while the lock is held",
    ),
    // Last, for the same reason (added with the review of leases and hand-over).
    point(
        "crash-after-clean-exit",
        4_000,
        "a leader exits cleanly at the end of a turn, as on SIGTERM: it hands leadership over \
         (TimeoutNow, the most up-to-date follower campaigning at once), answers its pending \
         requests, and is gone; the simulator restarts it",
    ),
    // From here on, each point draws its enable from a stream of its own.
    interleaving(
        "serve-boundary-yield",
        2,
        "between a client handler's answer and the connection's record of it, the other \
         worker thread runs for 1-20 ms: a `Cancel` or the end of the connection read \
         meanwhile, as on lockd's two workers (a review defect of 2026-12-06 lived there)",
    ),
    interleaving(
        "serve-write-yield",
        2,
        "between the connection's record of a handler's grant and tarpc's write of its \
         answer, the other worker thread runs for 1-20 ms: the end of the connection read \
         meanwhile, so that the answer is written after it or never (the connection's \
         account of its grants, 2026-12-07)",
    ),
];

struct State {
    rng: u64,
    enabled: Vec<bool>,
    fired: Vec<u64>,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
    static CRASHES: RefCell<Vec<(u64, &'static str)>> = const { RefCell::new(Vec::new()) };
    static ANNOUNCED: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
    static STALLS: RefCell<Vec<Stall>> = const { RefCell::new(Vec::new()) };
}

/// A node whose core a fault point stalls: no input is carried out meanwhile, so to its
/// peers and clients the node is paused. The simulator records it in the history as the
/// nemesis's pause and resume of that node ([`take_stalls`]): the liveness rules excuse what
/// a fault held up, and a stall they did not see once made a clean seed invalid (seed 7416).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// The stalled node.
    pub node: u64,
    /// The fault point.
    pub point: &'static str,
    /// How long, in ms, from the moment it is announced.
    pub ms: u64,
}

/// Announces that node `node` stalls for `ms` from now at the fault point `point` (called as
/// the stall begins).
pub fn announce_stall(point: &'static str, node: u64, ms: u64) {
    if crate::sys::simulated() {
        crate::probe!("core-stalled");
        STALLS.with(|s| s.borrow_mut().push(Stall { node, point, ms }));
    }
}

/// The stalls announced since the last call.
pub fn take_stalls() -> Vec<Stall> {
    STALLS.with(|s| std::mem::take(&mut *s.borrow_mut()))
}

/// The client-side points whose firing the simulator records in the history (the fault
/// verb `client-fault`): each loses a client's answer or cuts its connection, so the op in
/// flight may take longer than the service needed, or leave a grant its client never read
/// and never cancelled, which the liveness rules would otherwise blame on the service.
pub const ANNOUNCED_POINTS: [&str; 2] = ["client-cut-connection", "client-drop-answer"];

/// The announced points ([`ANNOUNCED_POINTS`]) that fired since the last call.
pub fn take_announced() -> Vec<&'static str> {
    ANNOUNCED.with(|a| std::mem::take(&mut *a.borrow_mut()))
}

/// A crash point: whether node `node` crashes here now. When it fires, the node must stop
/// doing anything at once (the core freezes), and the simulator, which takes the request
/// with [`take_crashes`], crashes its host (unsynced writes lost) and restarts it later.
pub fn crash_point(name: &'static str, node: u64) -> bool {
    // Literal names only through `buggify!`; this one is checked by the declared list.
    let fires = fire(name);
    if fires {
        crate::probe!("crash-point-crashed");
        CRASHES.with(|c| c.borrow_mut().push((node, name)));
    }
    fires
}

/// The crashes requested since the last call: (node, point).
pub fn take_crashes() -> Vec<(u64, &'static str)> {
    CRASHES.with(|c| std::mem::take(&mut *c.borrow_mut()))
}

/// The names of the points that [`configure`] enables for `seed`, without configuring.
pub fn enabled_points(seed: u64) -> Vec<&'static str> {
    let (enabled, _) = enables(seed);
    (POINTS.iter().zip(enabled))
        .filter(|(_, on)| *on)
        .map(|(p, _)| p.name)
        .collect()
}

/// Which points `seed` enables, and the stream its firings then draw from (see
/// [`SHARED_ENABLE_POINTS`]).
fn enables(seed: u64) -> (Vec<bool>, u64) {
    let mut rng = crate::rng::mix(seed ^ 0xB0_6617);
    let mut enabled: Vec<bool> = (POINTS[..SHARED_ENABLE_POINTS].iter())
        .map(|_| crate::rng::splitmix64(&mut rng) % ENABLE_ONE_IN == 0)
        .collect();
    enabled.extend(POINTS[SHARED_ENABLE_POINTS..].iter().map(|p| {
        let name = (p.name.bytes()).fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let mut own = crate::rng::mix(seed ^ 0xB0_6617 ^ name);
        crate::rng::splitmix64(&mut own) % ENABLE_ONE_IN == 0
    }));
    (enabled, rng)
}

/// Turns fault points on for this thread's simulation with `seed` (`Some`), or off (`None`).
/// Returns the names of the points the seed enabled.
pub fn configure(seed: Option<u64>) -> Vec<&'static str> {
    let state = seed.map(|seed| {
        let (enabled, rng) = enables(seed);
        State {
            rng,
            enabled,
            fired: vec![0; POINTS.len()],
        }
    });
    let names = state.as_ref().map_or_else(Vec::new, |s| {
        (POINTS.iter().zip(&s.enabled))
            .filter(|(_, on)| **on)
            .map(|(p, _)| p.name)
            .collect()
    });
    STATE.with(|cell| *cell.borrow_mut() = state);
    CRASHES.with(|c| c.borrow_mut().clear());
    ANNOUNCED.with(|a| a.borrow_mut().clear());
    STALLS.with(|s| s.borrow_mut().clear());
    names
}

/// Disables every fault point until the next [`configure`] (the final heal of a run: the
/// recovery phase judges a cluster without faults); interleavings stay as they are
/// ([`Point::fault`]). Counts so far are kept for [`take`].
pub fn quiesce() {
    STATE.with(|cell| {
        if let Some(state) = cell.borrow_mut().as_mut() {
            (state.enabled.iter_mut().zip(POINTS))
                .filter(|(_, p)| p.fault)
                .for_each(|(on, _)| *on = false);
        }
    });
}

/// How often each point fired since [`configure`] (points that never fired left out), and
/// forgets the configuration.
pub fn take() -> Vec<(&'static str, u64)> {
    STATE.with(|cell| {
        let state = cell.borrow_mut().take();
        state.map_or_else(Vec::new, |s| {
            (POINTS.iter().zip(s.fired))
                .filter(|(_, n)| *n > 0)
                .map(|(p, n)| (p.name, n))
                .collect()
        })
    })
}

/// Whether the point `name` fires now (what `buggify!` calls).
pub fn fire(name: &str) -> bool {
    if !crate::sys::simulated() {
        return false;
    }
    let Some(i) = POINTS.iter().position(|p| p.name == name) else {
        debug_assert!(false, "buggify {name:?} is not declared in POINTS");
        return false;
    };
    let fired = STATE.with(|cell| {
        let mut cell = cell.borrow_mut();
        let Some(state) = cell.as_mut() else {
            return false;
        };
        if !state.enabled[i] {
            return false;
        }
        let fires = crate::rng::splitmix64(&mut state.rng) % POINTS[i].fire_one_in.max(1) == 0;
        if fires {
            state.fired[i] += 1;
        }
        fires
    });
    if fired {
        crate::probe!("fault-point-fired");
        if ANNOUNCED_POINTS.contains(&POINTS[i].name) {
            ANNOUNCED.with(|a| a.borrow_mut().push(POINTS[i].name));
        }
    }
    fired
}

/// A number in `low..=high` from the seed's generator (a fired point's delay), `low` when
/// fault points are off.
pub fn between(low: u64, high: u64) -> u64 {
    STATE.with(|cell| match cell.borrow_mut().as_mut() {
        Some(state) if high > low => {
            low + crate::rng::splitmix64(&mut state.rng) % (high - low + 1)
        }
        _ => low,
    })
}

/// Whether the fault point `name` fires now; always `false` outside a simulation (see the
/// module doc).
#[macro_export]
macro_rules! buggify {
    ($name:literal) => {
        $crate::buggify::fire($name)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_added_after_the_shared_ones_leaves_their_draws_as_they_were() {
        // The points before `SHARED_ENABLE_POINTS` draw their enables, and then every firing,
        // from one stream; a later point must not take a draw from it, or every seed (pinned
        // ones included) would fire differently from then on.
        for seed in 1..300 {
            let mut shared = crate::rng::mix(seed ^ 0xB0_6617);
            let first: Vec<bool> = (0..SHARED_ENABLE_POINTS)
                .map(|_| crate::rng::splitmix64(&mut shared) % ENABLE_ONE_IN == 0)
                .collect();
            let (enabled, firing) = enables(seed);
            assert_eq!(enabled.len(), POINTS.len());
            assert_eq!(enabled[..SHARED_ENABLE_POINTS], first[..], "seed {seed}");
            assert_eq!(firing, shared, "seed {seed}: the firing stream moved");
        }
        let later = SHARED_ENABLE_POINTS..POINTS.len();
        assert!(!later.is_empty(), "the test has a later point to judge");
        for point in later {
            let on = (1..300).filter(|&seed| enables(seed).0[point]).count();
            assert!(
                (100..200).contains(&on),
                "{} on for about half the seeds: {on}",
                POINTS[point].name
            );
        }
    }

    #[test]
    fn the_final_heal_ends_faults_and_keeps_interleavings() {
        let seed = (1..)
            .find(|&s| enabled_points(s).contains(&"serve-boundary-yield"))
            .expect("some seed enables it");
        let before = configure(Some(seed));
        quiesce();
        let after = STATE.with(|cell| {
            let cell = cell.borrow();
            let state = cell.as_ref().expect("configured");
            (POINTS.iter().zip(&state.enabled))
                .filter(|(_, on)| **on)
                .map(|(p, _)| p.name)
                .collect::<Vec<_>>()
        });
        configure(None);
        assert!(before.len() > 1, "seed {seed}: {before:?}");
        let interleavings: Vec<_> = (POINTS.iter())
            .filter(|p| !p.fault && before.contains(&p.name))
            .map(|p| p.name)
            .collect();
        assert!(interleavings.contains(&"serve-boundary-yield"));
        assert_eq!(after, interleavings, "seed {seed}");
    }

    #[test]
    fn enabled_points_names_what_configure_enables() {
        // plan.txt lists a seed's fault points from `enabled_points`, without configuring.
        for seed in [1, 2, 13, 99] {
            let listed = enabled_points(seed);
            assert_eq!(configure(Some(seed)), listed, "seed {seed}");
        }
        configure(None);
        assert_ne!(
            enabled_points(1),
            enabled_points(2),
            "seeds draw differently"
        );
    }

    #[test]
    fn outside_a_simulation_no_point_fires() {
        configure(Some(1));
        for _ in 0..1_000 {
            assert!(!fire("client-delay"));
        }
        configure(None);
    }

    #[test]
    fn a_seed_enables_some_points_and_replays_its_choice() {
        let first = configure(Some(7));
        assert_eq!(configure(Some(7)), first, "seed 7 enables the same points");
        let seeds: Vec<Vec<&str>> = (1..40).map(|s| configure(Some(s))).collect();
        configure(None);
        assert!(seeds.iter().any(|s| s.len() < POINTS.len()), "{seeds:?}");
        assert!(seeds.iter().any(|s| !s.is_empty()), "{seeds:?}");
        assert!(configure(None).is_empty());
    }

    #[test]
    fn every_point_in_the_sources_is_declared_and_every_declared_one_used() {
        let mut used = crate::probe::tests::names_in_sources("buggify!(\"", "buggify.rs");
        // Crash points are named in the code that picks one (`server::core`, `storage`).
        for prefix in ["crash-before", "crash-inside", "crash-after"] {
            let crash = crate::probe::tests::names_in_sources(&format!("\"{prefix}"), "buggify.rs");
            used.extend(crash.into_iter().map(|rest| format!("{prefix}{rest}")));
        }
        for name in &used {
            assert!(
                POINTS.iter().any(|p| p.name == name),
                "buggify!({name:?}) is not declared"
            );
        }
        for p in POINTS {
            assert!(used.iter().any(|u| u == p.name), "{} is never used", p.name);
        }
    }
}
