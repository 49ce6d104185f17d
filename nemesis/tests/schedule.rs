//! The schedule is a pure function of (seed, step, completions so far): the same seed gives
//! the same schedule twice, different seeds differ, and golden op lists pin it (STYLE
//! practice 11, jepsen.generator.test/perfect).

use nemesis::faults::{FaultKind, VerbExt as _};
use nemesis::harness::schedule::{
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
            nemesis::harness::schedule::ClientOp::Acquire { .. } => {
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
        interval_ms: 0,
        focus: Default::default(),
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
            interval_ms: 0,
            focus: Default::default(),
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
fn clients_try_the_free_key_and_some_leave_mid_acquire() {
    // Issue 13: the free key (kf) is tried now and then and held only for a moment; a few
    // acquires leave mid-acquire (gave-up or disconnected) with a lease past the phantom
    // bound; a system without phantom release gets no leavers.
    let ops = client_ops(7, 1, 400).join("\n");
    assert!(ops.contains("acquire kf lease="), "{ops}");
    assert!(ops.contains("leave=gave-up@"), "{ops}");
    assert!(ops.contains("leave=disconnected@"), "{ops}");
    assert!(ops.contains("lease=6000 wait=5000 leave="), "{ops}");
    let mut config = WorkloadConfig::new(7, 2);
    config.leaver_percent = 0;
    let mut generator = ClientGen::new(&config, 1);
    for _ in 0..400 {
        let step = generator.next(Some(Completion::NotAcquired));
        assert!(
            !step.op.describe().contains("leave="),
            "{}",
            step.op.describe()
        );
    }
}

#[test]
fn the_first_partition_of_every_plan_targets_the_leader() {
    // Issue 13: every 30 s run has a fault that isolates or mutes the leader.
    for seed in 0..50u64 {
        let text = plan(seed);
        let first = text
            .lines()
            .find(|l| l.contains(" partition "))
            .unwrap_or_else(|| panic!("seed {seed}: no partition in\n{text}"));
        assert!(
            first.ends_with("isolate-leader") || first.ends_with("leader-mute"),
            "seed {seed}: {first}"
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
+80 acquire kf lease=4059 wait=0
+0 release kf token=14
+94 acquire k0 lease=1398 wait=0
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
