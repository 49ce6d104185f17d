//! Lease safety: no two holders of one key whose leases overlap in real time, beyond the
//! declared clock-drift bound ρ (DESIGN "The checks"; research/design.md §4, "How to state
//! and check the guarantees").
//!
//! # The rule
//!
//! For `ok` grants g1 < g2 (by token) on one key, unless a release of token(g1) was
//! invoked before g2 completed, require
//!
//! ```text
//! g2.complete >= g1.invoke + lease1 · (1 − 2ρ)
//! ```
//!
//! Otherwise g2 was certainly granted while g1's lease was still safe: two holders at
//! once. Lease windows are measured from the acquire's **invoke** (the earliest instant
//! the lease can have started), and the 2ρ allows for the drift of both the leader's clock
//! and the holder's. The rule is sound: a history of any lock service whose clocks stay
//! within ρ never violates it, so there are no false positives. A release counts when it
//! ended `ok` or unknown (`info`, never completed): either may have freed the key.
//!
//! # The scan
//!
//! Per key, grants sorted by token; each grant g1 protects the key until `min(safe end,
//! first release invoke + 1 ns)`. A prefix maximum of that protection over the smaller
//! tokens finds, for each g2, the earlier grant that protects the longest: O(n log n).

use std::collections::HashMap;

use history::{OpName, Operation};

use crate::linear::bitset::FastBuildHasher;
use crate::linear::lock_model::lease_floor_ns;
use crate::report::{fmt_ns, rows_of};
use crate::view::OpView;

/// The earliest invoke of a release of each token (of one key) that may have taken effect.
type Released = HashMap<u64, u64, FastBuildHasher>;

/// Two holders of one key at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseViolation {
    /// The key.
    pub key: String,
    /// What happened, naming both holders, their tokens and lease times.
    pub message: String,
    /// The history rows involved (both grants).
    pub rows: Vec<u64>,
}

/// Checks lease safety with drift bound `drift` (a fraction in `[0, 1)`); returns the
/// first violation per key, keys in order.
pub fn check(history: &[Operation], drift: f64) -> Vec<LeaseViolation> {
    crate::per_key::by_key(history)
        .iter()
        .filter_map(|(key, ops)| check_key(key, ops, drift))
        .collect()
}

/// The first violation on one key: `ops` are the key's operations, in history order.
pub(crate) fn check_key(key: &str, ops: &[&Operation], drift: f64) -> Option<LeaseViolation> {
    let (released, overlap) = first_overlap(ops.iter().copied(), drift);
    overlap.map(|(g1, g2)| violation(key, drift, g1, g2, &released))
}

/// Whether one key's operations (any [`OpView`], in history order) have no two holders
/// at once: the decision of [`check_key`], without the report.
pub(crate) fn key_is_safe<'o, O: OpView + 'o>(
    ops: impl IntoIterator<Item = &'o O>,
    drift: f64,
) -> bool {
    first_overlap(ops, drift).1.is_none()
}

/// Two grants of one key held at once: `(token, grant)` of the earlier and the later.
type Overlap<'o, O> = ((u64, &'o O), (u64, &'o O));

/// The releases of one key's operations that may have taken effect, and the first two
/// grants held at once, if any.
fn first_overlap<'o, O: OpView + 'o>(
    ops: impl IntoIterator<Item = &'o O>,
    drift: f64,
) -> (Released, Option<Overlap<'o, O>>) {
    // One pass over the key's ops: releases that may have taken effect (the earliest
    // invoke per token), and ok grants.
    let mut released = Released::default();
    let mut by_token: Vec<(u64, &O)> = Vec::new();
    for op in ops {
        if op.f_is(OpName::Release) && (op.is_ok() || op.is_indeterminate()) {
            let Some(token) = op.invoke_token() else {
                continue;
            };
            let slot = released.entry(token).or_insert(u64::MAX);
            *slot = (*slot).min(op.call_ns());
        } else if op.f_is(OpName::Acquire)
            && op.is_ok()
            && let Some(token) = op.completion_token()
        {
            by_token.push((token, op));
        }
    }
    by_token.sort_unstable_by_key(|(token, _)| *token);
    // (protected until, token, grant) of the earlier grant protecting the longest.
    let mut best: Option<(u64, u64, &O)> = None;
    for &(token, g2) in &by_token {
        if let Some((until, t1, g1)) = best {
            let complete = g2.return_ns().unwrap_or(u64::MAX);
            if complete < until && t1 < token {
                return (released, Some(((t1, g1), (token, g2))));
            }
        }
        let until = protected_until(token, g2, drift, &released);
        if best.is_none_or(|(b, _, _)| until > b) {
            best = Some((until, token, g2));
        }
    }
    (released, None)
}

/// The lease of an acquire: `None` without one (or with a value that is no lease).
fn lease_ms(op: &impl OpView) -> Option<u64> {
    op.lease_ms().ok().flatten()
}

/// The instant until which a grant certainly holds the key: its safe lease end, or just
/// past the invoke of the first release of its token, whichever is earlier. A grant with
/// no lease holds until released.
fn protected_until(token: u64, grant: &impl OpView, drift: f64, released: &Released) -> u64 {
    let safe_end = safe_end(grant, drift);
    let release = released
        .get(&token)
        .map_or(u64::MAX, |r| r.saturating_add(1));
    safe_end.min(release)
}

fn safe_end(grant: &impl OpView, drift: f64) -> u64 {
    lease_ms(grant).map_or(u64::MAX, |ms| {
        grant
            .call_ns()
            .saturating_add(lease_floor_ns(ms, (2.0 * drift).min(1.0)))
    })
}

fn violation(
    key: &str,
    drift: f64,
    (t1, g1): (u64, &Operation),
    (t2, g2): (u64, &Operation),
    released: &Released,
) -> LeaseViolation {
    let lease = lease_ms(g1).map_or("no lease".to_string(), |ms| format!("lease {ms} ms"));
    let release = match released.get(&t1) {
        Some(&r) => format!(
            "the first release of token {t1} that may have taken effect was invoked only at {}",
            fmt_ns(r)
        ),
        None => format!(
            "no release of token {t1} that may have taken effect (ok or info) was ever invoked"
        ),
    };
    let message = format!(
        "key {key}: process {p1} acquired token {t1} ({r1}), invoked at {i1} with {lease}, so its lease is safe until {safe} (lease·(1−2·{drift})); process {p2} acquired token {t2} ({r2}), completed at {c2}, while process {p1} still held it: {release}",
        p1 = g1.process,
        r1 = rows_of(g1),
        i1 = fmt_ns(g1.call_ns()),
        safe = fmt_ns(safe_end(g1, drift)),
        p2 = g2.process,
        r2 = rows_of(g2),
        c2 = fmt_ns(g2.return_ns().unwrap_or(u64::MAX)),
    );
    LeaseViolation {
        key: key.to_string(),
        message,
        rows: [crate::fencing::row_pair(g1), crate::fencing::row_pair(g2)].concat(),
    }
}
