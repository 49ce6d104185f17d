//! The schedule is a pure function of (seed, step, completions so far): the same seed gives
//! the same schedule twice, different seeds differ, and golden op lists pin it (STYLE
//! practice 11, jepsen.generator.test/perfect).

use nemesis::faults::{FaultKind, VerbExt as _};
use nemesis::schedule::{
    ClientGen, Completion, FaultPlanConfig, WorkloadConfig, describe_plan, fault_plan,
};

/// Drives one client slot with a scripted run of completions: acquires alternate between
/// granted (tokens 10, 11, ...) and busy; writes and releases are done.
fn client_ops(seed: u64, slot: u64, steps: usize) -> Vec<String> {
    let config = WorkloadConfig::new(seed, 2);
    let mut generator = ClientGen::new(&config, slot);
    let mut last = None;
    let mut grants = 0u64;
    let mut out = Vec::new();
    for _ in 0..steps {
        let step = generator.next(last);
        out.push(format!("+{} {}", step.think_ms, step.op.describe()));
        last = Some(match step.op {
            nemesis::schedule::ClientOp::Acquire { .. } => {
                grants += 1;
                if grants % 2 == 1 {
                    Completion::Acquired(9 + grants)
                } else {
                    Completion::NotAcquired
                }
            }
            _ => Completion::Done,
        });
    }
    out
}

fn plan(seed: u64) -> String {
    describe_plan(&fault_plan(&FaultPlanConfig {
        seed,
        kinds: FaultKind::ALL.to_vec(),
        duration_ms: 30_000,
    }))
}

#[test]
fn same_seed_gives_the_same_schedule_twice() {
    // STYLE practice 11: a determinism test produces the same schedule twice from one seed.
    for seed in [0u64, 7, 12345] {
        assert_eq!(
            client_ops(seed, 3, 40),
            client_ops(seed, 3, 40),
            "seed {seed}"
        );
        assert_eq!(plan(seed), plan(seed), "seed {seed}");
    }
}

#[test]
fn different_seeds_give_different_schedules() {
    // STYLE practice 11: the seed matters.
    assert_ne!(client_ops(7, 0, 20), client_ops(8, 0, 20));
    assert_ne!(plan(7), plan(8));
    assert_ne!(
        client_ops(7, 0, 20),
        client_ops(7, 1, 20),
        "slots have their own streams"
    );
}

#[test]
fn every_kind_happens_in_thirty_seconds() {
    // Issue 5: `locksmith test --time-s 30` has every fault kind at least once.
    for seed in 0..50u64 {
        let plan = fault_plan(&FaultPlanConfig {
            seed,
            kinds: FaultKind::ALL.to_vec(),
            duration_ms: 30_000,
        });
        for kind in FaultKind::ALL {
            assert!(
                plan.iter()
                    .any(|p| p.op.f.kind() == Some(kind) && p.op.f.starts_fault()),
                "seed {seed}: no {} in\n{}",
                kind.name(),
                describe_plan(&plan)
            );
        }
        // Every started fault is stopped, and stops come after starts.
        let starts = plan.iter().filter(|p| p.op.f.starts_fault()).count();
        assert_eq!(starts * 2, plan.len(), "seed {seed}");
        assert!(
            plan.windows(2).all(|w| w[0].at_ms <= w[1].at_ms),
            "seed {seed}"
        );
        assert!(
            plan.last().is_some_and(|p| p.at_ms <= 29_500),
            "seed {seed}"
        );
    }
}

#[test]
fn golden_client_ops_for_seed_7() {
    // STYLE practice 11: golden op lists; a change here changes every seed's replay.
    let golden = GOLDEN_CLIENT;
    assert_eq!(client_ops(7, 0, 12).join("\n"), golden.trim());
}

#[test]
fn golden_fault_plan_for_seed_7() {
    // STYLE practice 11: golden fault plan for `locksmith test --time-s 30 --seed 7`.
    assert_eq!(plan(7).trim_matches('\n'), GOLDEN_PLAN.trim_matches('\n'));
}

const GOLDEN_CLIENT: &str = "
+73 acquire k0 lease=943 wait=0
+169 write k0 0.2 token=10
+169 write k0 0.3 token=10
+169 release k0 token=10
+23 acquire k0 lease=1481 wait=374
+12 acquire k0 lease=400 wait=100
+98 write k0 0.7 token=12
+98 release k0 token=12
+88 acquire k0 lease=872 wait=0
+80 acquire k0 lease=1246 wait=793
+290 write k0 0.11 token=14
+290 write k0 0.12 token=14
";

const GOLDEN_PLAN: &str = "
  2000 skew leader rate=750/1000 jump=-250ms
  3741 reset-clock faulty rate=1000/1000 jump=0ms
  6622 partition isolate-leader
  9995 heal
 12190 pause minority
 12742 kill leader
 13846 restart faulty
 14398 resume faulty
 16825 kill minority
 18554 restart faulty
 21427 kill one
 24430 restart faulty
 26647 strobe leader delta=64ms period=16ms count=16
 29330 reset-clock faulty rate=1000/1000 jump=0ms
";
