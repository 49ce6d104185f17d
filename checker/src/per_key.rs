//! The lock checks key by key, on every core.
//!
//! Linearizability (the token sweep of [`crate::linear::lock_fast`]), lease safety and
//! fencing's per-key properties are each decided by one key's operations alone (the lock
//! spec is per key: P-compositionality). Fencing's two cross-key properties (unique,
//! increasing tokens) read only the grants. [`clean`] runs the per-key parts over the keys
//! on every core (`std::thread::scope`; each thread takes the next key from a shared
//! counter, so a slow key does not hold up the others) and says, check by check, whether
//! every key passed.
//!
//! A check that passed on every key is `Valid`, as the whole-history check says. A check
//! that did not (a violation, an op it cannot read, its budget reached, a panic) is run
//! again by the caller on the whole history, the way it always was: the report of a
//! failure (verdict, explanation, rows, order) is then exactly the whole-history check's,
//! whichever key failed first on which thread, and the second pass costs time only on
//! histories that do not pass. Nothing is skipped: every operation of every key is read
//! by every check, and a key that cannot be checked makes its check fall back.
//!
//! Each key's lock operations (the sweep's input, with their internal expiry events) are
//! built just before its sweep and dropped after it, so the checks of a long history hold
//! one key's worth of them per thread instead of the whole history's.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use history::Operation;

use crate::linear::bitset::FastBuildHasher;
use crate::linear::lock_model::{LockOptions, lock_operations};
use crate::linear::{Budget, lock_fast};
use crate::{LockSearch, Options, Verdict, fencing, lease};

/// A history's operations grouped by key, keys in order, each key's operations in history
/// order.
pub fn by_key(history: &[Operation]) -> Vec<(&str, Vec<&Operation>)> {
    let mut index: HashMap<&str, usize, FastBuildHasher> = HashMap::default();
    let mut parts: Vec<(&str, Vec<&Operation>)> = Vec::new();
    for op in history {
        let part = *index.entry(op.key.as_str()).or_insert_with(|| {
            parts.push((op.key.as_str(), Vec::new()));
            parts.len() - 1
        });
        parts[part].1.push(op);
    }
    // Keys in order, so that reports do not depend on hashing.
    parts.sort_unstable_by_key(|(key, _)| *key);
    parts
}

/// Which lock checks passed on every key (`true`: the check is `Valid`; `false`: run it
/// on the whole history for its report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Clean {
    /// Every key's sweep ended `Valid`, and some key had a lock op that returned (one the
    /// sweep must place: with none, the whole check says "not checked").
    pub(crate) linearizability: bool,
    /// No fencing property is violated, across keys or on any key.
    pub(crate) fencing: bool,
    /// No key has two holders at once.
    pub(crate) lease: bool,
}

/// What one thread found on the keys it took.
#[derive(Clone, Copy, Debug)]
struct Found {
    clean: Clean,
    /// Some key had an acquire or release that returned (not open, not `info`).
    lock_ops: bool,
}

/// Runs the per-key parts of the three lock checks on every core (see the module doc).
pub(crate) fn clean(history: &[Operation], options: &Options) -> Clean {
    let parts = by_key(history);
    let context = KeyContext {
        lock_options: LockOptions::new(options.drift).with_phantom_release(options.phantom_release),
        budget: options.budget,
        // One time limit for the whole history, as the whole-history sweep has.
        deadline: options.budget.deadline(),
        sweep: options.lock_search == LockSearch::Fast,
        drift: options.drift,
    };
    let next = AtomicUsize::new(0);
    let work = || context.keys(&parts, &next);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(parts.len())
        .max(1);
    let (found, tokens) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads).map(|_| scope.spawn(work)).collect();
        let tokens = std::panic::catch_unwind(AssertUnwindSafe(|| {
            fencing::token_violations(history).is_empty()
        }))
        .unwrap_or(false);
        // A thread that panicked found nothing clean.
        let found: Vec<Option<Found>> = handles.into_iter().map(|h| h.join().ok()).collect();
        (found, tokens)
    });
    let mut clean = Clean {
        linearizability: context.sweep && !history.is_empty(),
        fencing: tokens,
        lease: true,
    };
    let mut lock_ops = false;
    for found in found {
        let Some(found) = found else {
            return Clean::default();
        };
        clean.linearizability &= found.clean.linearizability;
        clean.fencing &= found.clean.fencing;
        clean.lease &= found.clean.lease;
        lock_ops |= found.lock_ops;
    }
    // No acquire or release that returned: the whole check says "not checked".
    clean.linearizability &= lock_ops;
    clean
}

/// What every key's checks share.
struct KeyContext {
    lock_options: LockOptions,
    budget: Budget,
    deadline: Option<Instant>,
    /// Whether linearizability is decided by the sweep (not the generic search).
    sweep: bool,
    drift: f64,
}

impl KeyContext {
    /// Checks keys taken from `next` until none is left. A check that failed on one key
    /// is not run on the keys after it (it will be run on the whole history).
    fn keys(&self, parts: &[(&str, Vec<&Operation>)], next: &AtomicUsize) -> Found {
        let mut found = Found {
            clean: Clean {
                linearizability: self.sweep,
                fencing: true,
                lease: true,
            },
            lock_ops: false,
        };
        while let Some((key, ops)) = parts.get(next.fetch_add(1, Ordering::Relaxed)) {
            if found.clean.linearizability {
                match self.sweep_key(ops) {
                    Some(lock_ops) => found.lock_ops |= lock_ops,
                    None => found.clean.linearizability = false,
                }
            }
            if found.clean.fencing {
                found.clean.fencing = fencing::key_violations(key, ops).is_empty();
            }
            if found.clean.lease {
                found.clean.lease = lease::check_key(key, ops, self.drift).is_none();
            }
        }
        found
    }

    /// Sweeps one key: `Some(whether it had a lock op that returned)` when it is
    /// linearizable, `None` when it is not, an op cannot be read, or the budget ran out.
    fn sweep_key(&self, ops: &[&Operation]) -> Option<bool> {
        let lock_ops = lock_operations(ops.iter().copied(), self.lock_options).ok()?;
        let report = lock_fast::check_one_key(&lock_ops, self.budget, self.deadline);
        (report.verdict == Verdict::Valid).then(|| lock_ops.iter().any(|op| !op.is_optional()))
    }
}

#[cfg(test)]
mod tests {
    use crate::generate::{GenOptions, Inject, lock_history};
    use crate::{Options, check_fencing, check_lease, check_linearizability, compose};

    #[test]
    fn key_by_key_checks_report_what_the_whole_history_checks_report() {
        // STYLE practice 9: a fast path must agree with the dumb oracle. Here the oracle is
        // each lock check run on the whole history, on generated histories that pass and
        // that fail (a double grant, a stale write), with few and many crashed ops.
        for seed in 1..=4u64 {
            for crash_rate in [0.005, 0.5] {
                for inject in [Inject::Nothing, Inject::DoubleGrant, Inject::StaleWrite] {
                    let mut options = GenOptions::new(3000, seed);
                    options.keys = 7;
                    options.crash_rate = crash_rate;
                    options.inject = inject;
                    let ops = lock_history(&options);
                    let history = history::pair(&ops).unwrap();
                    let check_options = Options::default();
                    let whole = compose(vec![
                        check_linearizability(&history, &check_options),
                        check_fencing(&history),
                        check_lease(&history, check_options.drift),
                    ]);
                    let expected = match inject {
                        Inject::Nothing => crate::Verdict::Valid,
                        _ => crate::Verdict::Invalid,
                    };
                    assert_eq!(whole.verdict, expected, "seed {seed}, {inject:?}");
                    let mut fast = crate::check_operations(&history, &check_options);
                    fast.model = None;
                    assert_eq!(
                        fast, whole,
                        "seed {seed}, crash rate {crash_rate}, {inject:?}"
                    );
                }
            }
        }
    }
}
