//! Lease safety: no two holders of one key whose leases overlap in real time, beyond the
//! declared clock-drift bound ρ (DESIGN "The checks"; research/design.md §4, "How to state
//! and check the guarantees").
//!
//! # The rule
//!
//! For `ok` grants g1 < g2 (by token) on one key, unless a release of token(g1) was
//! invoked no later than g2 completed (equal times are concurrent: the release may have
//! taken effect at that instant, just before the grant), require
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
//! ended `ok` or unknown (`info`, never completed): either may have freed the key. Such a
//! release without a token makes the check unknown, naming its row (`check_lease`): the
//! grant it ended cannot be told.
//!
//! # The scan
//!
//! Per key, grants sorted by token; each grant g1 protects the key until `min(safe end,
//! first release invoke)`: a g2 that completed before that instant overlaps it. A prefix maximum of that protection over the smaller
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

/// Checks lease safety with drift bound `drift` (a fraction in `[0, 0.5)`); returns the
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

/// The instant until which a grant certainly holds the key: its safe lease end, or the
/// invoke of the first release of its token, whichever is earlier (a grant completed at
/// that very instant may follow the release: closed intervals). A grant with no lease
/// holds until released.
fn protected_until(token: u64, grant: &impl OpView, drift: f64, released: &Released) -> u64 {
    let safe_end = safe_end(grant, drift);
    let release = released.get(&token).copied().unwrap_or(u64::MAX);
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

/// Lease safety of a history **without tokens** (an exec adapter whose init line said
/// `"fencing":false`): the grants of one key are ordered only where real time orders them,
/// and a release belongs to its grant by process. Two rules, both sound for any service
/// whose clocks stay within ρ:
///
/// 1. **No overlapping leases**: an ok grant g2 invoked after an ok grant g1 of another
///    process completed, and completed before g1's safe end (its lease·(1−2ρ) from its
///    invoke, or the invoke of the next release of the key, by any process, that may have
///    taken effect): two holders at once.
/// 2. **No stale write**: an ok write by process P invoked after an ok write by process Q
///    completed, where P's grant (its last acquire of the key before the write) completed
///    before Q's grant was invoked. P wrote under a lock that Q had taken over: the tokenless
///    form of fencing's "accepted writes are never stale".
/// 3. **No write from a non-holder**: an ok write by process P, which held a grant of the
///    key before it, that lies wholly inside the time another process certainly held the
///    key (from its grant's completion to its safe end). Without tokens the resource cannot
///    refuse a holder whose lease ran out, so a paused or slow holder's late write lands
///    while the next holder works: mutual exclusion is gone where it matters. (With tokens
///    the fencing check judges writes.) A write by a process with no earlier grant of the
///    key is not judged: a client whose op ended `info` goes on under a new process id,
///    still holding its grant, and nothing in the history ties the two.
pub fn check_without_tokens(history: &[Operation], drift: f64) -> Vec<LeaseViolation> {
    check_without_tokens_with(history, drift, false)
}

/// [`check_without_tokens`], with releases read as owner-aware when `owner_aware`: a release
/// frees only its own process's grant (Redlock deletes a key only when it holds the
/// releasing client's random value), so a release by another process, `ok` or `info`, does
/// not end a holder's hold in rule 1 or 3. Without it, any process's release may have freed
/// the key, which can hide two holders behind an unrelated `info` release.
pub fn check_without_tokens_with(
    history: &[Operation],
    drift: f64,
    owner_aware: bool,
) -> Vec<LeaseViolation> {
    crate::per_key::by_key(history)
        .iter()
        .filter_map(|(key, ops)| tokenless_key(key, ops, drift, owner_aware))
        .collect()
}

/// A grant of one key without a token: the op, and until when it certainly held the key.
struct HeldWithoutToken<'o> {
    grant: &'o Operation,
    held_from: u64,
    held_until: u64,
}

fn tokenless_key(
    key: &str,
    ops: &[&Operation],
    drift: f64,
    owner_aware: bool,
) -> Option<LeaseViolation> {
    let held: Vec<HeldWithoutToken<'_>> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| op.f == OpName::Acquire && op.is_ok())
        .filter_map(|(i, grant)| {
            let held_from = grant.return_ns()?;
            // The next release of the key that may have freed it. Without tokens a release
            // does not say whose lock it frees, so any process's counts (an owner-blind
            // service, Jepsen's mutex, frees the holder's lock on anyone's release), unless
            // the service is owner-aware.
            let release = ops[i + 1..]
                .iter()
                .find(|op| {
                    op.f == OpName::Release
                        && (op.is_ok() || op.is_indeterminate())
                        && (!owner_aware || op.process == grant.process)
                })
                .map_or(u64::MAX, |r| r.call_ns());
            Some(HeldWithoutToken {
                grant,
                held_from,
                held_until: safe_end(*grant, drift).min(release),
            })
        })
        .collect();
    if let Some(stale) = stale_write_without_tokens(key, ops) {
        return Some(stale);
    }
    // Each process's first grant of the key, completed: rule 3 judges only the writes of
    // processes that held one before writing.
    let mut first_held: HashMap<u64, u64, FastBuildHasher> = HashMap::default();
    for h in &held {
        let at = first_held.entry(h.grant.process).or_insert(h.held_from);
        *at = (*at).min(h.held_from);
    }
    let held_before = |op: &Operation| {
        first_held
            .get(&op.process)
            .is_some_and(|&at| at <= op.call_ns())
    };
    for h in &held {
        for op in ops {
            if op.process == h.grant.process || !op.is_ok() || op.call_ns() < h.held_from {
                continue;
            }
            let Some(done) = op.return_ns() else { continue };
            if done >= h.held_until {
                continue;
            }
            if op.f == OpName::Acquire || (op.f == OpName::Write && held_before(op)) {
                return Some(tokenless_violation(key, drift, h, op));
            }
        }
    }
    None
}

/// Rule 2 of [`check_without_tokens`] on one key's ops (history order).
fn stale_write_without_tokens(key: &str, ops: &[&Operation]) -> Option<LeaseViolation> {
    // Each ok write with the grant it was made under: its process's last ok acquire of the
    // key that completed before the write was invoked.
    let mut last_grant: HashMap<u64, &Operation, FastBuildHasher> = HashMap::default();
    let mut writes: Vec<(&Operation, &Operation)> = Vec::new();
    for op in ops {
        if op.f == OpName::Acquire && op.is_ok() {
            last_grant.insert(op.process, op);
        } else if op.f == OpName::Write
            && op.is_ok()
            && let Some(grant) = last_grant.get(&op.process)
            && grant.return_ns().is_some_and(|done| done <= op.call_ns())
        {
            writes.push((op, grant));
        }
    }
    let mut by_completion: Vec<&(&Operation, &Operation)> = writes.iter().collect();
    by_completion.sort_by_key(|(w, _)| w.return_ns().unwrap_or(u64::MAX));
    let mut by_invoke: Vec<&(&Operation, &Operation)> = writes.iter().collect();
    by_invoke.sort_by_key(|(w, _)| w.call_ns());
    // The write completed so far whose grant was invoked latest.
    let mut latest: Option<&(&Operation, &Operation)> = None;
    let mut next = 0;
    for later in by_invoke {
        while next < by_completion.len()
            && by_completion[next].0.return_ns().unwrap_or(u64::MAX) < later.0.call_ns()
        {
            let candidate = by_completion[next];
            if latest.is_none_or(|(_, g)| candidate.1.call_ns() > g.call_ns()) {
                latest = Some(candidate);
            }
            next += 1;
        }
        let (write, grant) = *later;
        if let Some(&(newer_write, newer_grant)) = latest
            && grant
                .return_ns()
                .is_some_and(|done| done < newer_grant.call_ns())
        {
            let message = format!(
                "key {key} (no tokens): process {p} wrote ({wrows}, invoked at {winv}) under its grant ({grows}, completed at {gdone}); but process {q} had acquired the key after that ({qgrows}, invoked at {qginv}) and its write ({qwrows}) was accepted first, completing at {qwdone}: process {p}'s write is stale, and without fencing tokens the resource cannot tell and accepted it",
                p = write.process,
                wrows = rows_of(write),
                winv = fmt_ns(write.call_ns()),
                grows = rows_of(grant),
                gdone = fmt_ns(grant.return_ns().unwrap_or(u64::MAX)),
                q = newer_write.process,
                qgrows = rows_of(newer_grant),
                qginv = fmt_ns(newer_grant.call_ns()),
                qwrows = rows_of(newer_write),
                qwdone = fmt_ns(newer_write.return_ns().unwrap_or(u64::MAX)),
            );
            return Some(LeaseViolation {
                key: key.to_string(),
                message,
                rows: [
                    crate::fencing::row_pair(grant),
                    crate::fencing::row_pair(newer_grant),
                    crate::fencing::row_pair(newer_write),
                    crate::fencing::row_pair(write),
                ]
                .concat(),
            });
        }
    }
    None
}

fn tokenless_violation(
    key: &str,
    drift: f64,
    held: &HeldWithoutToken<'_>,
    other: &Operation,
) -> LeaseViolation {
    let g = held.grant;
    let lease = lease_ms(g).map_or("no lease".to_string(), |ms| format!("lease {ms} ms"));
    let (verb, after) = if other.f == OpName::Acquire {
        ("acquired it too", String::new())
    } else {
        (
            "got a write accepted by the resource",
            ": a holder whose lease had run out; without fencing tokens the resource cannot tell"
                .to_owned(),
        )
    };
    let what = format!(
        "process {} {verb} ({}), invoked at {} and completed at {}{after}",
        other.process,
        rows_of(other),
        fmt_ns(other.call_ns()),
        fmt_ns(other.return_ns().unwrap_or(u64::MAX)),
    );
    let message = format!(
        "key {key} (no tokens): process {p} acquired it ({rows}), invoked at {invoked} with {lease} and granted by {from}, so it certainly held the key until {until} (its lease·(1−2·{drift}), or its next release); meanwhile {what}",
        p = g.process,
        rows = rows_of(g),
        invoked = fmt_ns(g.call_ns()),
        from = fmt_ns(held.held_from),
        until = fmt_ns(held.held_until),
    );
    LeaseViolation {
        key: key.to_string(),
        message,
        rows: [crate::fencing::row_pair(g), crate::fencing::row_pair(other)].concat(),
    }
}

#[cfg(test)]
mod tests {
    use crate::{CheckName, ModelKind, Options, Verdict};

    /// Process 0 holds `a` (lease 1000 ms), stalls past its lease, process 1 takes `a`, and
    /// process 0 then writes: no tokens anywhere.
    const LATE_WRITE: &str = "index,time_ns,process,type,f,key,value,token,node,error
0,1000000,0,invoke,acquire,a,1000,,,
1,2000000,0,ok,acquire,a,,,,
2,1500000000,1,invoke,acquire,a,1000,,,
3,1501000000,1,ok,acquire,a,,,,
4,1600000000,0,invoke,write,a,0.1,,,
5,1601000000,0,ok,write,a,,,,
6,1700000000,1,invoke,release,a,,,,
7,1701000000,1,ok,release,a,,,,
";

    fn check(csv: &str) -> crate::Check {
        let ops = history::csv::read_str(csv).expect("reads");
        crate::check(&ops, &Options::for_model(ModelKind::Lock)).expect("pairs")
    }

    #[test]
    fn an_owner_aware_lock_is_not_freed_by_another_process_s_release() {
        // Process 0 holds `a` (lease 1000 ms); process 2's release of `a` times out (info);
        // process 1 is granted `a` 0.2 s later. Owner-blind, process 2's release may have
        // freed the key; owner-aware (Redlock's compare-and-delete) it could free only
        // process 2's own grant, so processes 0 and 1 held `a` at once.
        let csv = "index,time_ns,process,type,f,key,value,token,node,error
0,1000000,0,invoke,acquire,a,1000,,,
1,2000000,0,ok,acquire,a,,,,
2,100000000,2,invoke,release,a,,,,
3,150000000,2,info,release,a,,,,timeout
4,300000000,1,invoke,acquire,a,1000,,,
5,301000000,1,ok,acquire,a,,,,
";
        assert_eq!(check(csv).verdict, Verdict::Valid, "owner-blind");
        let ops = history::csv::read_str(csv).expect("reads");
        let options = Options::for_model(ModelKind::Lock).with_owner_aware_release(true);
        let aware = crate::check(&ops, &options).expect("pairs");
        assert_eq!(aware.verdict, Verdict::Invalid, "{}", aware.explanation());
        assert!(
            aware.explanation().contains("process 1 acquired it too"),
            "{}",
            aware.explanation()
        );
    }

    #[test]
    fn a_late_write_without_tokens_breaks_lease_safety_and_says_what_was_not_checked() {
        let check = check(LATE_WRITE);
        assert_eq!(check.verdict, Verdict::Invalid, "{}", check.explanation());
        let lease = check
            .result(CheckName::LeaseSafety)
            .expect("lease safety ran");
        let text = lease.explanation.as_deref().unwrap_or("");
        assert!(
            text.contains("process 0 got a write accepted by the resource")
                && text.contains("process 1"),
            "{text}"
        );
        for name in [CheckName::Linearizability, CheckName::Fencing] {
            let result = check.result(name).expect("listed");
            assert!(!result.checked, "{name} cannot apply without tokens");
        }
    }

    #[test]
    fn a_stale_write_without_tokens_is_found_after_the_next_holder_left() {
        // Process 1 took the key after process 0's lease, wrote and released; process 0,
        // stalled, writes afterwards: nobody holds the key then, but the write is stale.
        let csv = "index,time_ns,process,type,f,key,value,token,node,error
0,1000000,0,invoke,acquire,a,1000,,,
1,2000000,0,ok,acquire,a,,,,
2,1500000000,1,invoke,acquire,a,1000,,,
3,1501000000,1,ok,acquire,a,,,,
4,1510000000,1,invoke,write,a,1.1,,,
5,1511000000,1,ok,write,a,,,,
6,1520000000,1,invoke,release,a,,,,
7,1521000000,1,ok,release,a,,,,
8,1600000000,0,invoke,write,a,0.1,,,
9,1601000000,0,ok,write,a,,,,
";
        let check = check(csv);
        assert_eq!(check.verdict, Verdict::Invalid, "{}", check.explanation());
        assert!(
            check
                .explanation()
                .contains("process 0's write is stale, and without fencing tokens"),
            "{}",
            check.explanation()
        );
    }

    #[test]
    fn a_holder_that_goes_on_under_a_new_process_after_an_info_write_is_not_a_non_holder() {
        // histories/README.md: a client whose op ended `info` goes on under a new process
        // id (the harness: process + slots). Process 0 holds `a`, its first write to the
        // service's own resource times out, and the same client writes again and releases
        // as process 10: one holder, one client. Without tokens nothing ties process 10 to
        // process 0's grant, so its write must not be called a non-holder's.
        let csv = "index,time_ns,process,type,f,key,value,token,node,error
0,1000000,0,invoke,acquire,a,10000,,,
1,2000000,0,ok,acquire,a,,,,
2,100000000,0,invoke,write,a,0.1,,,
3,600000000,0,info,write,a,,,,timeout
4,700000000,10,invoke,write,a,0.2,,,
5,701000000,10,ok,write,a,,,,
6,800000000,10,invoke,release,a,,,,
7,801000000,10,ok,release,a,,,,
";
        let check = check(csv);
        assert_eq!(check.verdict, Verdict::Valid, "{}", check.explanation());
    }

    #[test]
    fn a_release_invoked_as_the_next_grant_completed_may_have_freed_the_key_first() {
        // histories/README.md "the interval": closed intervals, equal times are concurrent.
        // On a millisecond clock the holder's release is invoked, takes effect and the next
        // grant returns within one millisecond: the release may have freed the key first.
        let csv = "index,time_ns,process,type,f,key,value,token,node,error
0,1000000,0,invoke,acquire,a,30000,,,
1,2000000,0,ok,acquire,a,,,,
2,4000000,1,invoke,acquire,a,30000,,,
3,5000000,0,invoke,release,a,,,,
4,5000000,1,ok,acquire,a,,,,
5,5000000,0,ok,release,a,,,,
";
        let same_instant = check(csv);
        assert_eq!(
            same_instant.verdict,
            Verdict::Valid,
            "{}",
            same_instant.explanation()
        );
        // The twin: the grant completed 1 ns before any release was invoked.
        let csv = "index,time_ns,process,type,f,key,value,token,node,error
0,1000000,0,invoke,acquire,a,30000,,,
1,2000000,0,ok,acquire,a,,,,
2,4000000,1,invoke,acquire,a,30000,,,
3,4999999,1,ok,acquire,a,,,,
4,5000000,0,invoke,release,a,,,,
5,5000000,0,ok,release,a,,,,
";
        let before = check(csv);
        assert_eq!(before.verdict, Verdict::Invalid, "{}", before.explanation());
        assert!(
            before.explanation().contains("process 1 acquired it too"),
            "{}",
            before.explanation()
        );
    }

    #[test]
    fn the_same_history_with_the_write_inside_the_first_lease_is_valid() {
        // Process 1 acquires only after process 0 released: nothing overlaps.
        let csv = "index,time_ns,process,type,f,key,value,token,node,error
0,1000000,0,invoke,acquire,a,1000,,,
1,2000000,0,ok,acquire,a,,,,
2,100000000,0,invoke,write,a,0.1,,,
3,101000000,0,ok,write,a,,,,
4,200000000,0,invoke,release,a,,,,
5,201000000,0,ok,release,a,,,,
6,300000000,1,invoke,acquire,a,1000,,,
7,301000000,1,ok,acquire,a,,,,
8,400000000,0,invoke,acquire,a,1000,,,
9,401000000,0,fail,acquire,a,,,,busy
";
        let check = check(csv);
        assert_eq!(check.verdict, Verdict::Valid, "{}", check.explanation());
        // A second grant inside the first one's lease, with no release: two holders.
        let overlap = "index,time_ns,process,type,f,key,value,token,node,error
0,1000000,0,invoke,acquire,a,1000,,,
1,2000000,0,ok,acquire,a,,,,
2,300000000,1,invoke,acquire,a,1000,,,
3,301000000,1,ok,acquire,a,,,,
";
        let check = self::check(overlap);
        assert_eq!(check.verdict, Verdict::Invalid, "{}", check.explanation());
        assert!(
            check.explanation().contains("process 1 acquired it too"),
            "{}",
            check.explanation()
        );
    }
}
