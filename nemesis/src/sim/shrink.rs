//! Shrinking a failing case: a shorter run first (its fault plan is then shorter too), then
//! fewer clients, then each remaining planned fault dropped one at a time, keeping every
//! change after which the case still fails (`invalid`). Bounded by [`SHRINK_RUNS_MAX`].

use super::SimCase;

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

/// Shrinks `failing` (which must fail); `fails` decides a candidate (`locksmith sim` runs
/// each in a child process).
pub fn shrink(failing: &SimCase, mut fails: impl FnMut(&SimCase) -> bool) -> Shrunk {
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
    while best.options.time_s / 2 >= TIME_S_MIN {
        let mut candidate = best.clone();
        candidate.options.time_s /= 2;
        candidate.options.drop_faults.clear();
        if !attempt(candidate, &mut best, &mut runs) {
            break;
        }
    }
    // Fewer clients.
    while best.options.concurrency > 1 {
        let mut candidate = best.clone();
        candidate.options.concurrency /= 2;
        if !attempt(candidate, &mut best, &mut runs) {
            break;
        }
    }
    // Each planned fault, dropped one at a time.
    let plan_len = best.options.plan().len();
    for index in 0..plan_len {
        if best.options.drop_faults.contains(&index) {
            continue;
        }
        let mut candidate = best.clone();
        candidate.options.drop_faults.insert(index);
        attempt(candidate, &mut best, &mut runs);
    }
    let faults_left = plan_len - best.options.drop_faults.len();
    Shrunk {
        case: best,
        runs,
        faults_left,
    }
}
