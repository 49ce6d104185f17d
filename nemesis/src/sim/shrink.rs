//! Shrinking a failing case: a shorter run first (its fault plan is then shorter too), then
//! fewer clients, then each remaining planned fault dropped one at a time, keeping every
//! change after which the case still fails (`invalid`). Bounded by [`SHRINK_RUNS_MAX`].

use super::{SimCase, run_case};

/// At most this many reruns while shrinking.
pub const SHRINK_RUNS_MAX: usize = 60;
/// The shortest fault phase tried, simulated seconds.
const TIME_S_MIN: u64 = 5;

/// What shrinking found.
#[derive(Debug)]
pub struct Shrunk {
    /// The smallest failing case found.
    pub case: SimCase,
    /// How many reruns it took.
    pub runs: usize,
    /// The planned faults left (of the smallest case's plan).
    pub faults_left: usize,
}

/// Shrinks `failing` (which must fail); `fails` decides a candidate.
pub fn shrink(failing: &SimCase) -> Shrunk {
    shrink_with(failing, |case| run_case(case).verdict().is_invalid())
}

/// [`shrink`] with the failure test given (for tests).
pub fn shrink_with(failing: &SimCase, mut fails: impl FnMut(&SimCase) -> bool) -> Shrunk {
    let mut best = failing.clone();
    let mut runs = 0;
    let mut attempt = |candidate: SimCase, best: &mut SimCase, runs: &mut usize| -> bool {
        if *runs >= SHRINK_RUNS_MAX {
            return false;
        }
        *runs += 1;
        if fails(&candidate) {
            *best = candidate;
            true
        } else {
            false
        }
    };
    // A shorter run: halve while it still fails.
    while best.time_s / 2 >= TIME_S_MIN {
        let candidate = SimCase {
            time_s: best.time_s / 2,
            drop_faults: Default::default(),
            ..best.clone()
        };
        if !attempt(candidate, &mut best, &mut runs) {
            break;
        }
    }
    // Fewer clients.
    while best.clients > 1 {
        let candidate = SimCase {
            clients: best.clients / 2,
            ..best.clone()
        };
        if !attempt(candidate, &mut best, &mut runs) {
            break;
        }
    }
    // Each planned fault, dropped one at a time.
    let plan_len =
        crate::harness::schedule::fault_plan(&crate::harness::schedule::FaultPlanConfig {
            seed: best.seed,
            kinds: best.nemesis.clone(),
            duration_ms: best.time_s * 1000,
        })
        .len();
    for index in 0..plan_len {
        if best.drop_faults.contains(&index) {
            continue;
        }
        let mut candidate = best.clone();
        candidate.drop_faults.insert(index);
        attempt(candidate, &mut best, &mut runs);
    }
    let faults_left = plan_len - best.drop_faults.len();
    Shrunk {
        case: best,
        runs,
        faults_left,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_changes_after_which_the_case_still_fails() {
        // A made-up failure that needs at least 10 simulated seconds and 3 clients, and
        // planned fault 0: the shrinker must stop there and drop every other fault.
        let failing = SimCase::new(7);
        let shrunk = shrink_with(&failing, |case| {
            case.time_s >= 10 && case.clients >= 3 && !case.drop_faults.contains(&0)
        });
        assert_eq!(shrunk.case.time_s, 15, "30 -> 15 fails, 7 does not");
        assert_eq!(shrunk.case.clients, 5, "10 -> 5 fails, 2 does not");
        assert!(!shrunk.case.drop_faults.contains(&0));
        assert_eq!(
            shrunk.faults_left, 1,
            "every fault but the needed one is dropped"
        );
        assert!(shrunk.runs <= SHRINK_RUNS_MAX);
    }
}
