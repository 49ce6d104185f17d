//! Linearizability: does a history of operations on an object look as if each operation
//! took effect at one instant inside its interval, in an order that a sequential
//! specification (a [`Model`]) accepts?
//!
//! - [`Model`] is the sequential specification (STYLE practice 8).
//! - [`check`] runs the generic search ([`wgl`]: Wing & Gong / Lowe with memoisation of
//!   `(linearized set, state)`, as in Porcupine) on every part of the model's partition.
//! - [`lock_fast`] is the near-linear check for lock histories: tokens fix the order of the
//!   grants on each key, so a sweep over time with a handful of live configurations decides
//!   what the search would. The two must agree (`checker/tests/differential.rs`).
//! - [`brute_force`] tries every order of every subset; it is the oracle the search is
//!   tested against on histories of at most [`BRUTE_FORCE_OPS_MAX`] operations.
//!
//! The models: [`lock_model`] (acquire/release with tokens and leases), [`mutex_model`]
//! (Jepsen's mutex, and an owner-aware one), [`register_model`] (read/write/cas, with
//! Porcupine's or Jepsen's reading), [`multi_register_model`] (knossos's txns) and
//! [`kv_model`] (get/put/append).

pub mod bitset;
pub mod kv_model;
pub mod lock_fast;
pub mod lock_model;
pub mod model;
pub mod multi_register_model;
pub mod mutex_model;
pub mod register_model;
pub mod wgl;

use std::fmt;
use std::time::{Duration, Instant};

pub use model::Model;

use crate::verdict::Verdict;

/// One operation as the search sees it: an interval of time, an input and an output.
///
/// # The interval
///
/// The operation occupies the **closed** interval `[call_ns, return_ns]` and takes effect
/// at one instant inside it. Operation A precedes B in real time only when `A.return_ns <
/// B.call_ns`; operations whose ends touch are concurrent. Closed intervals are the
/// cautious reading of a clock of finite resolution, and the one `history::pair` documents.
///
/// # Optional operations (`info`, and internal events)
///
/// `return_ns == None` means the operation never returned: its outcome is unknown (`info`,
/// or still open when the history ended). It **may** take effect at any instant after
/// `call_ns`, or never: the search never forces it, and a linearization that leaves it out
/// is as good as one that puts it last. The same rule serves internal events that the
/// history does not record but the specification allows, such as a lease expiry that may
/// happen at any time after its earliest instant ([`lock_model`]): they are operations
/// with `process == None`, `call_ns` = the earliest instant, and no return.
pub struct Operation<M: Model> {
    /// When the operation was invoked (or, for an internal event, the earliest instant it
    /// may happen).
    pub call_ns: u64,
    /// When it returned; `None` for an optional operation (see the type's docs).
    pub return_ns: Option<u64>,
    /// What it asked.
    pub input: M::Input,
    /// What it answered.
    pub output: M::Output,
    /// The key (the part of the object) it touched (shared with the history's cells).
    pub key: history::Text,
    /// The client process, `None` for an internal event.
    pub process: Option<u64>,
    /// The history rows it came from: the invoke's and the completion's `index`.
    pub rows: Rows,
}

/// The history rows an [`Operation`] came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Rows {
    /// The invoke row's index, `None` for an internal event.
    pub invoke: Option<u64>,
    /// The completion row's index, `None` when there is none.
    pub completion: Option<u64>,
}

impl fmt::Display for Rows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.invoke, self.completion) {
            (Some(a), Some(b)) => write!(f, "rows {a}-{b}"),
            (Some(a), None) => write!(f, "row {a} (never completed)"),
            (None, Some(b)) => write!(f, "row {b}"),
            (None, None) => f.write_str("no row (internal event)"),
        }
    }
}

impl<M: Model> Operation<M> {
    /// Whether the search may leave this operation out (it never returned).
    pub fn is_optional(&self) -> bool {
        self.return_ns.is_none()
    }

    /// Whether `self` precedes `other` in real time (`self` returned before `other` was
    /// called).
    pub fn precedes(&self, other: &Operation<M>) -> bool {
        self.return_ns.is_some_and(|r| r < other.call_ns)
    }
}

impl<M: Model> Clone for Operation<M> {
    fn clone(&self) -> Self {
        Operation {
            call_ns: self.call_ns,
            return_ns: self.return_ns,
            input: self.input.clone(),
            output: self.output.clone(),
            key: self.key.clone(),
            process: self.process,
            rows: self.rows,
        }
    }
}

impl<M: Model> fmt::Debug for Operation<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Operation")
            .field("call_ns", &self.call_ns)
            .field("return_ns", &self.return_ns)
            .field("input", &self.input)
            .field("output", &self.output)
            .field("key", &self.key)
            .field("process", &self.process)
            .field("rows", &self.rows)
            .finish()
    }
}

/// The limits of one search (STYLE practice 13). Reaching one gives `Unknown` with the
/// bound named, never `Valid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Budget {
    /// The most `(linearized set, state)` configurations the memo may hold, summed over
    /// the parts (for [`lock_fast`]: the most live configurations at one instant).
    pub search_budget_states_max: usize,
    /// The wall-clock limit of the whole check; `None` for none.
    pub time_limit: Option<Duration>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            // A memo entry costs a bitset of the part's ops plus a state: a few hundred
            // bytes for the register, up to kilobytes for long kv strings.
            search_budget_states_max: 5_000_000,
            time_limit: Some(Duration::from_secs(120)),
        }
    }
}

impl Budget {
    /// A budget with these limits.
    pub fn new(search_budget_states_max: usize, time_limit: Option<Duration>) -> Budget {
        Budget {
            search_budget_states_max,
            time_limit,
        }
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.time_limit.map(|limit| Instant::now() + limit)
    }
}

/// Why a history is not linearizable, as far as the search got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counterexample {
    /// The part of the partition that failed: indexes into the history.
    pub part: Vec<usize>,
    /// The longest legal order the search found, as indexes into the history.
    pub linearized: Vec<usize>,
    /// The model's state after `linearized`, described.
    pub state: String,
    /// The operation that had to come next (it returned before the others could be
    /// placed) but is not a legal step: an index into the history.
    pub stuck: Option<usize>,
}

/// The result of a linearizability check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinearReport {
    /// Valid, Invalid, or Unknown with the bound that was reached.
    pub verdict: Verdict,
    /// For `Invalid`: the first failing part.
    pub counterexample: Option<Counterexample>,
    /// Configurations explored, summed over the parts.
    pub states_explored: u64,
}

/// How many steps a part's search runs before the next part takes its turn.
const TURN_STEPS: u64 = 2048;

/// The fewest operations for which the parts are searched on several threads.
const PARALLEL_OPS_MIN: usize = 256;

/// Checks `history` against `model`, part by part, with the generic search: on one thread
/// when there is one part or one core ([`check_in_turns`]), else on every core
/// ([`check_in_parallel`]). Both give the same verdict.
pub fn check<M>(model: &M, history: &[Operation<M>], budget: Budget) -> LinearReport
where
    M: Model + Sync,
    M::Input: Sync,
    M::Output: Sync,
{
    let parts = model.partition(history);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(parts.len());
    // Spawning threads costs tens of microseconds: small histories stay on one.
    if threads <= 1 || history.len() < PARALLEL_OPS_MIN {
        check_in_turns(model, history, &parts, budget)
    } else {
        check_in_parallel(model, history, &parts, budget, threads)
    }
}

/// The parts take turns ([`wgl::Search::advance`]), so a part that is quickly found not
/// linearizable ends the check even when another part would take long to decide (as
/// Porcupine's parallel partitions, but deterministic). A part whose search reaches the
/// budget makes the verdict `Unknown`, unless another part is `Invalid`.
fn check_in_turns<M: Model>(
    model: &M,
    history: &[Operation<M>],
    parts: &[Vec<usize>],
    budget: Budget,
) -> LinearReport {
    let deadline = budget.deadline();
    let mut searches: Vec<wgl::Search<'_, M>> = parts
        .iter()
        .map(|part| wgl::Search::new(model, history, part))
        .collect();
    let mut verdict = Verdict::Valid;
    let mut states_done = 0usize;
    while !searches.is_empty() {
        let states_live: usize = searches.iter().map(|s| s.states()).sum();
        let mut finished = Vec::new();
        for (i, search) in searches.iter_mut().enumerate() {
            let others = states_done + states_live - search.states();
            let states_max = budget.search_budget_states_max.saturating_sub(others);
            let mut outcome = search.advance(TURN_STEPS, states_max);
            if outcome.is_none() && deadline.is_some_and(|d| Instant::now() >= d) {
                outcome = Some(search.out_of_time());
            }
            let Some(outcome) = outcome else { continue };
            finished.push(i);
            states_done += outcome.states;
            match outcome.result {
                wgl::SearchResult::Linearizable => {}
                wgl::SearchResult::Exhausted(reason) => {
                    verdict = verdict.merge(Verdict::unknown(reason));
                }
                wgl::SearchResult::NotLinearizable(counterexample) => {
                    return LinearReport {
                        verdict: Verdict::Invalid,
                        counterexample: Some(counterexample),
                        states_explored: (states_done + states_live) as u64,
                    };
                }
            }
        }
        for i in finished.into_iter().rev() {
            searches.swap_remove(i);
        }
    }
    LinearReport {
        verdict,
        counterexample: None,
        states_explored: states_done as u64,
    }
}

/// The parts on `threads` threads (std::thread::scope: no pool is needed for one fork and
/// join per check). Each thread takes the next part from a shared counter. When a part is
/// found not linearizable, every other search stops at its next turn: one failing part
/// decides the verdict, and a part whose search is slow must not hold it up (Porcupine's
/// kv `c50-bad` has such a part). The verdict is the same on every run; when two parts
/// fail, which of them the counterexample shows may depend on the threads' timing (the
/// lowest one in partition order among those that finished). The states budget is shared:
/// a part may use what the finished parts left, so the memos together hold at most about
/// `threads` times the budget.
fn check_in_parallel<M>(
    model: &M,
    history: &[Operation<M>],
    parts: &[Vec<usize>],
    budget: Budget,
    threads: usize,
) -> LinearReport
where
    M: Model + Sync,
    M::Input: Sync,
    M::Output: Sync,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    let deadline = budget.deadline();
    let next = AtomicUsize::new(0);
    let first_invalid = AtomicUsize::new(usize::MAX);
    let states_done = AtomicUsize::new(0);
    let run_part = |i: usize| -> Option<wgl::SearchOutcome> {
        let mut search = wgl::Search::new(model, history, &parts[i]);
        loop {
            if first_invalid.load(Ordering::Relaxed) != usize::MAX {
                return None;
            }
            let used = states_done.load(Ordering::Relaxed);
            let states_max = budget.search_budget_states_max.saturating_sub(used);
            if let Some(outcome) = search.advance(TURN_STEPS, states_max) {
                states_done.fetch_add(outcome.states, Ordering::Relaxed);
                if matches!(outcome.result, wgl::SearchResult::NotLinearizable(_)) {
                    first_invalid.fetch_min(i, Ordering::Relaxed);
                }
                return Some(outcome);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Some(search.out_of_time());
            }
        }
    };
    let mut outcomes: Vec<Option<wgl::SearchOutcome>> = (0..parts.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= parts.len() {
                            return done;
                        }
                        done.push((i, run_part(i)));
                    }
                })
            })
            .collect();
        for handle in handles {
            // A panic in the model reaches the caller's guard as a panic, as on one thread.
            let done = handle
                .join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e));
            for (i, outcome) in done {
                outcomes[i] = outcome;
            }
        }
    });
    let mut verdict = Verdict::Valid;
    let states_explored = states_done.load(Ordering::Relaxed) as u64;
    for outcome in outcomes.into_iter().flatten() {
        match outcome.result {
            wgl::SearchResult::Linearizable => {}
            wgl::SearchResult::Exhausted(reason) => {
                verdict = verdict.merge(Verdict::unknown(reason))
            }
            wgl::SearchResult::NotLinearizable(counterexample) => {
                return LinearReport {
                    verdict: Verdict::Invalid,
                    counterexample: Some(counterexample),
                    states_explored,
                };
            }
        }
    }
    LinearReport {
        verdict,
        counterexample: None,
        states_explored,
    }
}

/// The most operations [`brute_force`] accepts.
pub const BRUTE_FORCE_OPS_MAX: usize = 8;

/// The dumb oracle: tries every order of every subset of the operations (optional ones may
/// be left out), with no memo, part by part (a model's state is the state of one part).
/// `None` when the history has more than [`BRUTE_FORCE_OPS_MAX`] operations.
pub fn brute_force<M: Model>(model: &M, history: &[Operation<M>]) -> Option<bool> {
    if history.len() > BRUTE_FORCE_OPS_MAX {
        return None;
    }
    let all = model.partition(history).into_iter().all(|part| {
        let ops: Vec<Operation<M>> = part.iter().map(|&i| history[i].clone()).collect();
        let mut used = vec![false; ops.len()];
        brute_force_from(model, &ops, &model.init(), &mut used)
    });
    Some(all)
}

fn brute_force_from<M: Model>(
    model: &M,
    history: &[Operation<M>],
    state: &M::State,
    used: &mut [bool],
) -> bool {
    let done = history
        .iter()
        .zip(used.iter())
        .all(|(op, &u)| u || op.is_optional());
    if done {
        return true;
    }
    for next in 0..history.len() {
        if used[next] {
            continue;
        }
        // `next` may come now only if no unused operation returned before it was called.
        let blocked = (0..history.len())
            .any(|other| other != next && !used[other] && history[other].precedes(&history[next]));
        if blocked {
            continue;
        }
        let op = &history[next];
        if let Some(after) = model.step(state, &op.input, &op.output) {
            used[next] = true;
            let found = brute_force_from(model, history, &after, used);
            used[next] = false;
            if found {
                return true;
            }
        }
    }
    false
}
