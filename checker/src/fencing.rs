//! Fencing: tokens are unique, strictly increase in real time, and the fenced resource
//! never accepts a stale one (DESIGN "The checks"; research/design.md §4).
//!
//! Four properties, each an O(n log n) scan:
//!
//! 1. **Fencing tokens are unique** across all keys: no two `ok` acquires carry one token.
//! 2. **Fencing tokens strictly increase** in the real-time order of acquires, across all
//!    keys: if acquire A returned `ok` before acquire B was invoked, token(A) < token(B).
//!    Sorted by token, a violation is a grant whose return precedes the invoke of a grant
//!    with a smaller token: a suffix-minimum scan finds it.
//! 3. **Accepted writes are never stale**: per key, the tokens of writes the resource
//!    accepted (`write` ok) do not decrease in acceptance order. Two accepted writes A, B
//!    with A before B in real time need token(A) <= token(B).
//! 4. **Every accepted token was granted** for that key, by an `ok` acquire or by an
//!    `info` acquire (whose token nobody saw), invoked before the write returned (a token
//!    is assigned when its grant applies, inside the acquire); each such `info` acquire
//!    accounts for one token (a greedy matching on the line).
//!
//! The lock machine asserts token monotonicity when it applies a grant; this is the pair
//! of that assertion on the recorded history (STYLE practice 12).

use std::collections::{BTreeMap, HashMap};

use history::{OpName, Operation};

use crate::linear::bitset::FastBuildHasher;
use crate::report::{fmt_ns, rows_of};
use crate::view::OpView;

/// One violated fencing property, described.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencingViolation {
    /// The property, as a sentence.
    pub property: &'static str,
    /// What happened, naming processes, tokens and rows.
    pub message: String,
    /// The history rows involved.
    pub rows: Vec<u64>,
}

/// Runs the four fencing checks; returns every violation found, the smallest slice first
/// within each property.
pub fn check(history: &[Operation]) -> Vec<FencingViolation> {
    let mut out = token_violations(history);
    for (key, ops) in crate::per_key::by_key(history) {
        out.extend(key_violations(key, &ops));
    }
    out
}

/// Properties 1 and 2, which compare grants across keys.
pub(crate) fn token_violations(history: &[Operation]) -> Vec<FencingViolation> {
    let grants: Vec<&Operation> = grants(history.iter()).collect();
    let mut out = Vec::new();
    out.extend(unique_tokens(&grants));
    out.extend(increasing_tokens(&grants));
    out
}

/// The `ok` acquires with a token: what properties 1 and 2 read.
pub(crate) fn grants<'o, O: OpView + 'o>(
    ops: impl Iterator<Item = &'o O>,
) -> impl Iterator<Item = &'o O> {
    ops.filter(|op| op.f_is(OpName::Acquire) && op.is_ok() && op.completion_token().is_some())
}

/// Whether properties 1 and 2 hold on these grants (of [`grants`], in history order):
/// the decision of [`token_violations`], without the report.
pub(crate) fn tokens_hold<O: OpView>(grants: &[&O]) -> bool {
    let by_token = by_token(grants);
    // Sorted by token, two grants of one token are neighbours: no duplicate is exactly
    // `first_duplicate(grants).is_none()`.
    let unique = by_token
        .windows(2)
        .all(|pair| granted_token(pair[0]) != granted_token(pair[1]));
    unique && inversion_in(&by_token).is_none()
}

/// Grants sorted by `(token, invoke index)`. A stable sort: the grants mostly come in
/// runs of increasing tokens (by key, or in history order), which it merges cheaply; the
/// order is the same as an unstable sort's, since no two grants share an invoke index.
fn by_token<'o, O: OpView>(grants: &[&'o O]) -> Vec<&'o O> {
    // The keys next to the grants: comparing them reads no operation.
    let mut keyed: Vec<(Option<u64>, u64, &O)> = grants
        .iter()
        .map(|&op| (granted_token(op), op.invoke_index(), op))
        .collect();
    keyed.sort_by_key(|&(token, index, _)| (token, index));
    keyed.into_iter().map(|(_, _, op)| op).collect()
}

/// Properties 3 and 4 on one key: `ops` are the key's operations, in history order.
pub(crate) fn key_violations(key: &str, ops: &[&Operation]) -> Vec<FencingViolation> {
    let key_ops = KeyOps::of(ops.iter().copied());
    if key_ops.writes.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    out.extend(accepted_writes_fenced(key, &key_ops.writes));
    out.extend(accepted_tokens_granted(
        key,
        &key_ops.writes,
        &key_ops.acquires,
    ));
    out
}

/// Whether properties 3 and 4 hold on one key's operations (any [`OpView`], in history
/// order): the decision of [`key_violations`], without the report.
pub(crate) fn key_holds<'o, O: OpView + 'o>(ops: impl IntoIterator<Item = &'o O>) -> bool {
    let key_ops = KeyOps::of(ops);
    key_ops.writes.is_empty()
        || (first_stale_write(&key_ops.writes).is_none()
            && first_ungranted_write(&key_ops.writes, &key_ops.acquires).is_none())
}

/// The acquires and writes of one key.
struct KeyOps<'a, O> {
    acquires: Vec<&'a O>,
    writes: Vec<&'a O>,
}

impl<'a, O: OpView> KeyOps<'a, O> {
    fn of(ops: impl IntoIterator<Item = &'a O>) -> Self {
        let mut key_ops = KeyOps {
            acquires: Vec::new(),
            writes: Vec::new(),
        };
        for op in ops {
            if op.f_is(OpName::Acquire) {
                key_ops.acquires.push(op);
            } else if op.f_is(OpName::Write) {
                key_ops.writes.push(op);
            }
        }
        key_ops
    }
}

fn granted_token(op: &impl OpView) -> Option<u64> {
    op.completion_token()
}

fn ret(op: &impl OpView) -> u64 {
    op.return_ns().unwrap_or(u64::MAX)
}

fn who(op: &Operation) -> String {
    format!(
        "process {}'s {} of {} ({})",
        op.process,
        op.f,
        op.key,
        rows_of(op)
    )
}

/// The first grant whose token an earlier grant already had: `(token, earlier, grant)`.
fn first_duplicate<'o, O: OpView>(grants: &[&'o O]) -> Option<(u64, &'o O, &'o O)> {
    let mut first: HashMap<u64, &O, FastBuildHasher> = HashMap::default();
    for &op in grants {
        let token = granted_token(op)?;
        if let Some(&earlier) = first.get(&token) {
            return Some((token, earlier, op));
        }
        first.insert(token, op);
    }
    None
}

fn unique_tokens(grants: &[&Operation]) -> Option<FencingViolation> {
    let (token, earlier, op) = first_duplicate(grants)?;
    Some(FencingViolation {
        property: "fencing tokens are unique",
        message: format!(
            "token {token} was granted twice: to {} and to {}",
            who(earlier),
            who(op)
        ),
        rows: [row_pair(earlier), row_pair(op)].concat(),
    })
}

/// A grant that returned before a grant with a smaller token was invoked: `(larger,
/// smaller)`, the smaller the earliest invoked of all such.
fn first_inversion<'o, O: OpView>(grants: &[&'o O]) -> Option<(&'o O, &'o O)> {
    inversion_in(&by_token(grants))
}

/// [`first_inversion`] on grants sorted by [`by_token`].
fn inversion_in<'o, O: OpView>(by_token: &[&'o O]) -> Option<(&'o O, &'o O)> {
    // Walk from the largest token down, keeping the grant with the earliest return among
    // the larger tokens: a smaller-token grant invoked after it is a violation.
    let mut earliest: Option<&O> = None;
    let mut found: Option<(&O, &O)> = None;
    for &op in by_token.iter().rev() {
        if let Some(larger) = earliest {
            let inverted = ret(larger) < op.call_ns() && granted_token(larger) != granted_token(op);
            let better = found.is_none_or(|(_, b)| op.invoke_index() < b.invoke_index());
            if inverted && better {
                found = Some((larger, op));
            }
        }
        if earliest.is_none_or(|e| ret(op) < ret(e)) {
            earliest = Some(op);
        }
    }
    found
}

fn increasing_tokens(grants: &[&Operation]) -> Option<FencingViolation> {
    let (larger, smaller) = first_inversion(grants)?;
    Some(FencingViolation {
        property: "fencing tokens strictly increase",
        message: format!(
            "{} returned token {} at {}, before {} was invoked at {}, which was granted the smaller token {}",
            who(larger),
            granted_token(larger).unwrap_or_default(),
            fmt_ns(ret(larger)),
            who(smaller),
            fmt_ns(smaller.call_ns()),
            granted_token(smaller).unwrap_or_default(),
        ),
        rows: [row_pair(larger), row_pair(smaller)].concat(),
    })
}

/// An accepted write whose token is older than that of an accepted write that returned
/// before it was invoked: `(larger, stale)`.
fn first_stale_write<'o, O: OpView>(writes: &[&'o O]) -> Option<(&'o O, &'o O)> {
    let mut accepted: Vec<&O> = writes
        .iter()
        .copied()
        .filter(|w| w.is_ok() && w.invoke_token().is_some())
        .collect();
    accepted.sort_unstable_by_key(|w| (w.invoke_token(), w.invoke_index()));
    // As for grants, with ties allowed: a write that returned before a write with a
    // smaller token was invoked means the resource accepted a stale token.
    let mut earliest: Option<&O> = None;
    for &w in accepted.iter().rev() {
        if let Some(larger) = earliest {
            if ret(larger) < w.call_ns() && larger.invoke_token() > w.invoke_token() {
                return Some((larger, w));
            }
        }
        if earliest.is_none_or(|e| ret(w) < ret(e)) {
            earliest = Some(w);
        }
    }
    None
}

fn accepted_writes_fenced(key: &str, writes: &[&Operation]) -> Option<FencingViolation> {
    let (larger, w) = first_stale_write(writes)?;
    Some(FencingViolation {
        property: "fenced writes are never accepted with a stale token",
        message: format!(
            "the resource {key} accepted {} with token {} although it had already accepted {} with token {}, which returned at {} before it was invoked at {}",
            who(w),
            w.invoke.token.unwrap_or_default(),
            who(larger),
            larger.invoke.token.unwrap_or_default(),
            fmt_ns(ret(larger)),
            fmt_ns(w.call_ns()),
        ),
        rows: [row_pair(larger), row_pair(w)].concat(),
    })
}

/// An accepted write whose token no grant and no `info` acquire accounts for:
/// `(token, write)`.
fn first_ungranted_write<'o, O: OpView>(
    writes: &[&'o O],
    acquires: &[&'o O],
) -> Option<(u64, &'o O)> {
    let acquires = acquires.iter().copied();
    // The earliest invoke of an `ok` grant of each token.
    let mut granted: HashMap<u64, u64, FastBuildHasher> = HashMap::default();
    for op in acquires.clone().filter(|op| op.is_ok()) {
        if let Some(token) = granted_token(op) {
            let call = granted.entry(token).or_insert(u64::MAX);
            *call = (*call).min(op.call_ns());
        }
    }
    let mut hidden: Vec<u64> = acquires
        .filter(|op| op.is_indeterminate())
        .map(|op| op.call_ns())
        .collect();
    hidden.sort_unstable();
    // Each token needs a grant invoked before the first accepted write carrying it
    // returned: an `ok` grant of it, or else its own `info` acquire. Deadlines in order,
    // each taking any unused acquire invoked before it: greedy is optimal on a line.
    let mut unexplained: BTreeMap<u64, &O> = BTreeMap::new();
    for &w in writes.iter().filter(|w| w.is_ok()) {
        let Some(token) = w.invoke_token() else {
            continue;
        };
        let slot = unexplained.entry(token).or_insert(w);
        if ret(w) < ret(*slot) {
            *slot = w;
        }
    }
    unexplained.retain(|token, w| granted.get(token).is_none_or(|&call| call > ret(*w)));
    let mut by_deadline: Vec<(u64, u64, &O)> = unexplained
        .into_iter()
        .map(|(token, w)| (ret(w), token, w))
        .collect();
    by_deadline.sort_by_key(|(deadline, token, _)| (*deadline, *token));
    let mut available = 0usize;
    let mut next_hidden = hidden.iter().peekable();
    for (deadline, token, w) in by_deadline {
        while next_hidden.next_if(|&&call| call <= deadline).is_some() {
            available += 1;
        }
        if available == 0 {
            return Some((token, w));
        }
        available -= 1;
    }
    None
}

fn accepted_tokens_granted(
    key: &str,
    writes: &[&Operation],
    acquires: &[&Operation],
) -> Option<FencingViolation> {
    let (token, w) = first_ungranted_write(writes, acquires)?;
    Some(FencingViolation {
        property: "every accepted token was granted for its key",
        message: format!(
            "the resource {key} accepted {} with token {token}, but no acquire of {key} invoked before it returned was granted token {token}, and no unanswered (info) acquire of {key} invoked before it returned can account for it",
            who(w)
        ),
        rows: row_pair(w),
    })
}

/// The invoke and completion rows of an op.
pub(crate) fn row_pair(op: &Operation) -> Vec<u64> {
    let mut rows = vec![op.invoke.index];
    rows.extend(op.completion.as_ref().map(|c| c.index));
    rows
}
