//! `locksmith sim`: the same seed replays byte for byte (each assertion names the seed).

use nemesis::faults::FaultKind;
use nemesis::sim::{SimCase, history_csv, run_case};

/// A short case, so that debug builds stay quick. Kill is left out: with crashes and
/// restarts (turmoil's crash/bounce) the replay is not yet exact (see the README).
fn short(seed: u64, time_s: u64) -> SimCase {
    let mut case = SimCase::new(seed);
    case.time_s = time_s;
    case.nemesis = vec![
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::Clock,
        FaultKind::Netem,
    ];
    case
}

// One test function: simulations running at once in one process can disturb each other
// (see `locksmith sim --jobs`), and cargo runs test functions on parallel threads.
#[test]
fn the_simulator_replays_each_seed_and_tells_seeds_apart() {
    the_same_seed_gives_a_byte_identical_history_with_faults_on();
    different_seeds_give_different_runs();
    slow_and_flaky_links_are_applied_undone_and_survived();
}

fn the_same_seed_gives_a_byte_identical_history_with_faults_on() {
    for seed in [1, 2, 3] {
        let case = short(seed, 8);
        let first = run_case(&case);
        let second = run_case(&case);
        assert!(
            first.faults.len() >= 2,
            "seed {seed}: the plan applied faults: {:?}",
            first.faults
        );
        assert!(first.ops.len() > 50, "seed {seed}: {} ops", first.ops.len());
        assert_eq!(
            history_csv(&first.ops),
            history_csv(&second.ops),
            "seed {seed}: two runs of one seed differ (rerun: {})",
            case.rerun_command()
        );
        assert_eq!(first.faults, second.faults, "seed {seed}");
    }
}

fn different_seeds_give_different_runs() {
    let a = run_case(&short(11, 5));
    let b = run_case(&short(12, 5));
    assert_ne!(history_csv(&a.ops), history_csv(&b.ops));
}

/// netem's faults in the simulator: `flaky` peer links drop, reorder and duplicate Raft
/// messages (lockd::server::LinkFaults), `slow` links take up to 150 ms a message. A clean
/// lockd stays valid under them, and the final heal undoes them.
fn slow_and_flaky_links_are_applied_undone_and_survived() {
    let mut seen = std::collections::BTreeSet::new();
    for seed in 1..=4 {
        let mut case = SimCase::new(seed);
        case.time_s = 10;
        case.nemesis = vec![FaultKind::Netem];
        let result = run_case(&case);
        assert!(
            result.verdict().is_valid(),
            "seed {seed}: {:?} (rerun: {})",
            result.verdict(),
            case.rerun_command()
        );
        for f in ["slow", "flaky", "unslow", "unflaky"] {
            if result.ops.iter().any(|op| op.f == f) {
                seen.insert(f);
            }
        }
        assert!(result.ops.len() > 50, "seed {seed}: {} ops", result.ops.len());
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["flaky", "slow", "unflaky", "unslow"],
        "seeds 1..=4 apply both netem faults and their undos"
    );
}
