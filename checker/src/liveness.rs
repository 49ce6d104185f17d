//! Liveness of lock histories from chaos and simulation runs: after the final heal every
//! client gets going again, a key whose client left is grantable again well before its
//! lease ends, and waiters are answered (DESIGN "The checks", **Liveness**).
//!
//! Safety checks can never catch a lock service that keeps a key held too long: a lease
//! running out is a legal end of a grant nobody saw. These rules read the history's
//! encoding (schema v1, `histories/README.md` "Liveness"):
//!
//! - **R (recovery).** A nemesis row `recover` marks the final heal at time `R`. Every client
//!   process whose first invoke after `R` comes before `R + recovery_bound_ms` must complete
//!   some op `ok` by `R + recovery_bound_ms`, unless all its ops after `R` are abandoned
//!   acquires (it chose to leave).
//! - **P (phantom release).** An acquire that ends `info` with error `gave-up` or
//!   `disconnected` was abandoned by its client at `L` (that row's time). An acquire of the
//!   same key by another process invoked at `t >= L + phantom_release_bound_ms`, before the
//!   abandoned acquire's lease could have run out, that fails `busy` while no other grant of
//!   the key can be live is a violation.
//! - **W (waiters).** An acquire whose value is `LEASE_MS WAIT_MS` must complete (`ok` or
//!   `fail`) by `invoke + WAIT_MS + waiter_slack_ms`; and a waiter that fails `busy` although
//!   the key was certainly free for longer than `waiter_grant_bound_ms` inside its wait is a
//!   violation.
//!
//! P and W are judged only where no fault is active (fault spans from the vocabulary's
//! pairs, [`history::fault_spans`]); each rule counts what it evaluated and what it could
//! not. "Possibly live" is conservative: a grant that ended `ok` is live from its invoke until
//! an `ok` release of its token, or until `settle(return) + lease·(1+drift)`; one that ended
//! `info` (other than an abandon) likewise from its `info` row; one never completed forever.
//! `settle(x)` is the end of the faults active at `x` (or `x`): a grant made under a fault
//! (a slow clock, a deposed leader) may outlive its lease until the fault ends. An
//! abandoned grant whose client left at least `phantom_release_bound_ms` ago is not live:
//! it should have been released, and a busy it causes is what rule P reports.

use std::collections::{BTreeMap, HashMap};

use history::pair::Paired;
use history::{AcquireValue, ErrorWord, FaultVerb, OpName, OpType, Operation};

use crate::linear::bitset::FastBuildHasher;
use crate::{CheckResult, Verdict};

/// The bounds of the liveness rules, all in ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LivenessOptions {
    /// Rule R: how long after the `recover` marker every active client must succeed.
    pub recovery_bound_ms: u64,
    /// Rule P: how soon after its client left an abandoned acquire's key must be grantable.
    pub phantom_release_bound_ms: u64,
    /// Rule W: how long after its wait a waiting acquire may take to be answered.
    pub waiter_slack_ms: u64,
    /// Rule W: the longest a key may stay free while a waiter waits for it.
    pub waiter_grant_bound_ms: u64,
}

impl Default for LivenessOptions {
    fn default() -> Self {
        LivenessOptions {
            recovery_bound_ms: 10_000,
            phantom_release_bound_ms: 3_000,
            waiter_slack_ms: 2_000,
            waiter_grant_bound_ms: 1_000,
        }
    }
}

impl LivenessOptions {
    /// With another recovery bound (rule R).
    pub fn with_recovery_bound_ms(self, recovery_bound_ms: u64) -> Self {
        LivenessOptions {
            recovery_bound_ms,
            ..self
        }
    }

    /// With another phantom-release bound (rule P).
    pub fn with_phantom_release_bound_ms(self, phantom_release_bound_ms: u64) -> Self {
        LivenessOptions {
            phantom_release_bound_ms,
            ..self
        }
    }

    /// With another waiter slack (rule W).
    pub fn with_waiter_slack_ms(self, waiter_slack_ms: u64) -> Self {
        LivenessOptions {
            waiter_slack_ms,
            ..self
        }
    }

    /// With another waiter grant bound (rule W).
    pub fn with_waiter_grant_bound_ms(self, waiter_grant_bound_ms: u64) -> Self {
        LivenessOptions {
            waiter_grant_bound_ms,
            ..self
        }
    }
}

/// What one rule judged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleCount {
    /// Events the rule could judge.
    pub evaluated: u64,
    /// Events it could not (a fault active, another grant possibly live, ...).
    pub not_evaluable: u64,
}

/// One liveness violation, in words, with the rows it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LivenessViolation {
    /// `R`, `P` or `W`.
    pub rule: char,
    /// What happened.
    pub message: String,
    /// The history rows involved.
    pub rows: Vec<u64>,
}

/// The outcome of the liveness rules on one history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LivenessReport {
    /// Rule R's counts.
    pub recovery: RuleCount,
    /// Rule P's counts.
    pub phantom: RuleCount,
    /// Rule W's counts.
    pub waiters: RuleCount,
    /// Every violation, in the order found.
    pub violations: Vec<LivenessViolation>,
}

impl LivenessReport {
    /// Events judged by any rule.
    pub fn evaluated(&self) -> u64 {
        self.recovery.evaluated + self.phantom.evaluated + self.waiters.evaluated
    }

    /// One line of counts per rule.
    pub fn summary(&self) -> String {
        let line = |name: &str, c: &RuleCount| {
            format!(
                "{name}: {} evaluated, {} not evaluable",
                c.evaluated, c.not_evaluable
            )
        };
        format!(
            "{}; {}; {}",
            line("recovery after the final heal", &self.recovery),
            line("phantom-lock release", &self.phantom),
            line("waiters answered", &self.waiters)
        )
    }
}

/// The check's name in a [`crate::Check`].
pub const NAME: &str = "liveness";

/// Runs the liveness rules and makes the `liveness` result: `invalid` with every violation
/// in words, `valid` with the counts, or "not checked" when no rule had anything to judge.
pub fn check_result(paired: &Paired, options: &LivenessOptions, drift: f64) -> CheckResult {
    let report = check(paired, options, drift);
    if !report.violations.is_empty() {
        let text = report
            .violations
            .iter()
            .map(|v| v.message.clone())
            .chain(std::iter::once(format!("({})", report.summary())))
            .collect::<Vec<_>>()
            .join("\n");
        let rows = report
            .violations
            .iter()
            .flat_map(|v| v.rows.clone())
            .collect();
        return CheckResult::invalid(NAME, text, rows);
    }
    if report.evaluated() == 0 {
        return CheckResult::not_checked(
            NAME,
            &format!(
                "nothing to judge: no recover marker, abandoned acquire or waiter in a fault-free window ({})",
                report.summary()
            ),
        );
    }
    let mut result = CheckResult::new(NAME, Verdict::Valid);
    result.explanation = Some(report.summary());
    result
}

/// Runs the three rules.
pub fn check(paired: &Paired, options: &LivenessOptions, drift: f64) -> LivenessReport {
    let context = Context::new(paired, options, drift);
    let mut report = LivenessReport::default();
    context.recovery(&mut report);
    context.phantom(&mut report);
    context.waiters(&mut report);
    report
}

const MS: u64 = 1_000_000;

fn ms(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

/// What the rules share: the operations by key, the fault intervals, the bounds.
struct Context<'a> {
    operations: &'a [Operation],
    /// Merged fault intervals `[start, end]` (end `u64::MAX` when never ended), sorted.
    faults: Vec<(u64, u64)>,
    /// The `recover` marker: time and row.
    recover: Option<(u64, u64)>,
    /// The history's last time.
    end_ns: u64,
    options: LivenessOptions,
    drift: f64,
    acquires_by_key: BTreeMap<&'a str, Vec<&'a Operation>>,
    releases_by_key: BTreeMap<&'a str, Vec<&'a Operation>>,
}

impl<'a> Context<'a> {
    fn new(paired: &'a Paired, options: &LivenessOptions, drift: f64) -> Self {
        let spans = history::fault_spans(&paired.faults);
        let mut intervals: Vec<(u64, u64)> = spans
            .iter()
            .filter(|s| s.verb != Some(FaultVerb::Recover))
            .map(|s| (s.start_ns, s.end_ns.unwrap_or(u64::MAX)))
            .collect();
        intervals.sort_unstable();
        let mut faults: Vec<(u64, u64)> = Vec::new();
        for (start, end) in intervals {
            match faults.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => faults.push((start, end)),
            }
        }
        let recover = paired
            .faults
            .iter()
            .rev()
            .find(|f| f.f == FaultVerb::Recover)
            .map(|f| (f.time_ns, f.index));
        let end_ns = paired
            .operations
            .iter()
            .map(|o| o.completion.as_ref().map_or(o.call_ns(), |c| c.time_ns))
            .chain(paired.faults.iter().map(|f| f.time_ns))
            .max()
            .unwrap_or(0);
        // Grouped in hash maps (one hash per op, where a BTreeMap costs a string
        // comparison per level), then ordered by key once.
        type ByKey<'a> = HashMap<&'a str, Vec<&'a Operation>, FastBuildHasher>;
        let (mut acquires, mut releases) = (ByKey::default(), ByKey::default());
        for op in &paired.operations {
            if op.f == OpName::Acquire {
                acquires.entry(&op.key).or_default().push(op);
            } else if op.f == OpName::Release {
                releases.entry(&op.key).or_default().push(op);
            }
        }
        let acquires_by_key: BTreeMap<&str, Vec<&Operation>> = acquires.into_iter().collect();
        let releases_by_key: BTreeMap<&str, Vec<&Operation>> = releases.into_iter().collect();
        Context {
            operations: &paired.operations,
            faults,
            recover,
            end_ns,
            options: *options,
            drift,
            acquires_by_key,
            releases_by_key,
        }
    }

    fn fault_free(&self, from_ns: u64, to_ns: u64) -> bool {
        !self
            .faults
            .iter()
            .any(|(s, e)| *s <= to_ns && *e >= from_ns)
    }

    /// The end of the faults active at `at_ns`, or `at_ns`.
    fn settle(&self, at_ns: u64) -> u64 {
        self.faults
            .iter()
            .find(|(s, e)| *s <= at_ns && at_ns <= *e)
            .map_or(at_ns, |(_, e)| *e)
    }

    fn lease_ns(&self, op: &Operation, factor: f64) -> u64 {
        let lease = AcquireValue::parse(op.invoke.value.trim()).map_or(0, |v| v.lease_ms);
        (lease as f64 * MS as f64 * factor) as u64
    }

    /// When the client of an abandoned acquire left (its `info` row), if it did.
    fn left_at(op: &Operation) -> Option<u64> {
        let c = op.completion.as_ref()?;
        (c.op_type == OpType::Info && ErrorWord::parse(&c.error).is_some_and(ErrorWord::is_abandon))
            .then_some(c.time_ns)
    }

    /// The interval in which `grant` may hold its key, or `None` when it never did or can
    /// no longer (see the module docs).
    fn live_interval(&self, grant: &Operation) -> Option<(u64, u64)> {
        let c = grant.completion.as_ref();
        let lease = self.lease_ns(grant, 1.0 + self.drift);
        match c.map(|c| c.op_type) {
            Some(OpType::Fail) => None,
            Some(OpType::Ok) => {
                let token = c.and_then(|c| c.token);
                let released = self
                    .releases_by_key
                    .get(grant.key.as_str())
                    .into_iter()
                    .flatten()
                    .filter(|r| r.invoke.token.is_some() && r.invoke.token == token)
                    .filter(|r| {
                        r.completion
                            .as_ref()
                            .is_some_and(|c| c.op_type == OpType::Ok)
                    })
                    .filter_map(|r| r.return_ns())
                    .min();
                let expiry = self.settle(grant.return_ns()?).saturating_add(lease);
                Some((grant.call_ns(), released.map_or(expiry, |r| r.min(expiry))))
            }
            Some(_) => {
                let at = c.map_or(u64::MAX, |c| c.time_ns);
                Some((grant.call_ns(), self.settle(at).saturating_add(lease)))
            }
            None => Some((grant.call_ns(), u64::MAX)),
        }
    }

    /// Other grants of `key` (not `except`) that may hold it at some instant of
    /// `[from, to]`, apart from abandoned ones whose client left by `from - phantom bound`.
    fn possibly_live(&self, key: &str, except: &[u64], from: u64, to: u64) -> Vec<&Operation> {
        let departed_by = from.saturating_sub(self.options.phantom_release_bound_ms * MS);
        self.acquires_by_key
            .get(key)
            .into_iter()
            .flatten()
            .copied()
            .filter(|g| !except.contains(&g.invoke.index))
            .filter(|g| Self::left_at(g).is_none_or(|l| l > departed_by))
            .filter(|g| {
                self.live_interval(g)
                    .is_some_and(|(s, e)| s <= to && e >= from)
            })
            .collect()
    }
}

fn describe(op: &Operation) -> String {
    let outcome = match &op.completion {
        None => "never completed".to_owned(),
        Some(c) if c.error.is_empty() => format!("{} at {}", c.op_type, ms(c.time_ns)),
        Some(c) => format!("{} {} at {}", c.op_type, c.error, ms(c.time_ns)),
    };
    format!(
        "{} {} by process {} (row {}, invoked at {}, {outcome})",
        op.f,
        op.key,
        op.process,
        op.invoke.index,
        ms(op.call_ns())
    )
}

fn rows_of(op: &Operation) -> Vec<u64> {
    std::iter::once(op.invoke.index)
        .chain(op.completion.as_ref().map(|c| c.index))
        .collect()
}

impl Context<'_> {
    /// Rule R.
    fn recovery(&self, report: &mut LivenessReport) {
        let Some((recover_ns, recover_row)) = self.recover else {
            return;
        };
        let deadline = recover_ns.saturating_add(self.options.recovery_bound_ms * MS);
        let mut by_process: BTreeMap<u64, Vec<&Operation>> = BTreeMap::new();
        for op in self.operations.iter().filter(|o| o.call_ns() >= recover_ns) {
            by_process.entry(op.process).or_default().push(op);
        }
        for (process, ops) in by_process {
            if ops[0].call_ns() > deadline || ops.iter().all(|o| Self::left_at(o).is_some()) {
                continue;
            }
            let succeeded = ops.iter().any(|o| {
                o.completion
                    .as_ref()
                    .is_some_and(|c| c.op_type == OpType::Ok && c.time_ns <= deadline)
            });
            let still_open = ops.last().is_some_and(|o| o.completion.is_none());
            if !succeeded && still_open && self.end_ns < deadline {
                report.recovery.not_evaluable += 1;
                continue;
            }
            report.recovery.evaluated += 1;
            if succeeded {
                continue;
            }
            let listed: Vec<String> = ops.iter().take(4).map(|o| describe(o)).collect();
            report.violations.push(LivenessViolation {
                rule: 'R',
                message: format!(
                    "every client recovers after the final heal: violated: process {process} \
                     invoked after the recover marker (row {recover_row}, at {}) and completed \
                     no op ok by {} (recovery_bound_ms {}); its ops: {}{}",
                    ms(recover_ns),
                    ms(deadline),
                    self.options.recovery_bound_ms,
                    listed.join("; "),
                    if ops.len() > 4 { "; ..." } else { "" }
                ),
                rows: std::iter::once(recover_row)
                    .chain(ops.iter().flat_map(|o| rows_of(o)))
                    .collect(),
            });
        }
    }
}

impl Context<'_> {
    /// Rule P: busy acquires after an abandoned acquire's bound, with no other live grant.
    fn phantom(&self, report: &mut LivenessReport) {
        let bound = self.options.phantom_release_bound_ms * MS;
        for (key, acquires) in &self.acquires_by_key {
            for abandoned in acquires.iter().copied() {
                let Some(left) = Self::left_at(abandoned) else {
                    continue;
                };
                let lease_end = abandoned
                    .call_ns()
                    .saturating_add(self.lease_ns(abandoned, 1.0 - self.drift));
                for later in acquires.iter().copied().filter(|b| {
                    b.process != abandoned.process
                        && b.call_ns() >= left.saturating_add(bound)
                        && b.call_ns() < lease_end
                }) {
                    let Some(c) = later.completion.as_ref() else {
                        continue;
                    };
                    let busy = c.op_type == OpType::Fail && c.error == ErrorWord::Busy;
                    if !(busy || c.op_type == OpType::Ok) {
                        continue;
                    }
                    let except = [abandoned.invoke.index, later.invoke.index];
                    if !self.fault_free(abandoned.call_ns(), c.time_ns)
                        || (busy
                            && !self
                                .possibly_live(key, &except, later.call_ns(), c.time_ns)
                                .is_empty())
                    {
                        report.phantom.not_evaluable += 1;
                        continue;
                    }
                    report.phantom.evaluated += 1;
                    if !busy {
                        continue;
                    }
                    report.violations.push(LivenessViolation {
                        rule: 'P',
                        message: format!(
                            "a key whose client left is grantable again: violated: the client of \
                             {} left at {}; {}, more than phantom_release_bound_ms {} later, \
                             before that acquire's lease ({} ms) could have run out, while no \
                             other grant of {key} could be live and no fault was active",
                            describe(abandoned),
                            ms(left),
                            describe(later),
                            self.options.phantom_release_bound_ms,
                            self.lease_ns(abandoned, 1.0) / MS,
                        ),
                        rows: rows_of(abandoned)
                            .into_iter()
                            .chain(rows_of(later))
                            .collect(),
                    });
                }
            }
        }
    }

    /// Rule W: waiters answered by their deadline; no busy while the key sat free.
    fn waiters(&self, report: &mut LivenessReport) {
        for (key, acquires) in &self.acquires_by_key {
            for waiter in acquires.iter().copied() {
                let Some(wait_ms) =
                    AcquireValue::parse(waiter.invoke.value.trim()).and_then(|v| v.wait_ms)
                else {
                    continue;
                };
                if Self::left_at(waiter).is_some() {
                    continue;
                }
                let wait_end = waiter.call_ns().saturating_add(wait_ms * MS);
                let deadline = wait_end.saturating_add(self.options.waiter_slack_ms * MS);
                if !self.fault_free(waiter.call_ns(), deadline) {
                    report.waiters.not_evaluable += 1;
                    continue;
                }
                let answered = waiter
                    .completion
                    .as_ref()
                    .filter(|c| c.op_type != OpType::Info);
                match answered {
                    None if waiter.completion.is_none() && self.end_ns < deadline => {
                        report.waiters.not_evaluable += 1;
                        continue;
                    }
                    Some(c) if c.time_ns <= deadline => {}
                    None if waiter
                        .completion
                        .as_ref()
                        .is_some_and(|c| c.time_ns <= deadline) =>
                    {
                        // An info before the deadline: the client gave up early.
                        report.waiters.not_evaluable += 1;
                        continue;
                    }
                    _ => {
                        report.waiters.evaluated += 1;
                        report.violations.push(LivenessViolation {
                            rule: 'W',
                            message: format!(
                                "every waiter is answered by its deadline: violated: {} waited \
                                 up to {wait_ms} ms and was not answered ok or fail by {} \
                                 (waiter_slack_ms {})",
                                describe(waiter),
                                ms(deadline),
                                self.options.waiter_slack_ms
                            ),
                            rows: rows_of(waiter),
                        });
                        continue;
                    }
                }
                report.waiters.evaluated += 1;
                if let Some(message) = self.free_while_waiting(key, waiter, wait_end) {
                    report.violations.push(LivenessViolation {
                        rule: 'W',
                        message: message.0,
                        rows: rows_of(waiter).into_iter().chain(message.1).collect(),
                    });
                }
            }
        }
    }

    /// For a waiter that failed busy: a release ok of its key inside its wait after which
    /// no grant could hold the key for longer than the grant bound.
    fn free_while_waiting(
        &self,
        key: &str,
        waiter: &Operation,
        wait_end: u64,
    ) -> Option<(String, Vec<u64>)> {
        let c = waiter.completion.as_ref()?;
        if !(c.op_type == OpType::Fail && c.error == ErrorWord::Busy) {
            return None;
        }
        let bound = self.options.waiter_grant_bound_ms * MS;
        let end = wait_end.min(c.time_ns);
        for release in self.releases_by_key.get(key).into_iter().flatten() {
            let Some(freed) = release
                .completion
                .as_ref()
                .filter(|r| r.op_type == OpType::Ok)
                .map(|r| r.time_ns)
            else {
                continue;
            };
            let from = freed.max(waiter.call_ns());
            if from.saturating_add(bound) >= end {
                continue;
            }
            // The released grant itself ends at `freed`; any other grant that may hold the
            // key in [from, from + bound] explains the busy.
            let released_token = release.invoke.token;
            let others: Vec<&Operation> = self
                .possibly_live(key, &[waiter.invoke.index], from, from + bound)
                .into_iter()
                .filter(|g| {
                    !(g.completion
                        .as_ref()
                        .is_some_and(|c| c.op_type == OpType::Ok)
                        && g.completion.as_ref().and_then(|c| c.token) == released_token
                        && g.return_ns().is_some_and(|r| r <= freed))
                })
                .collect();
            if others.is_empty() {
                return Some((
                    format!(
                        "a free key with waiters is granted: violated: {} released {key} at {}, \
                         and no other grant of {key} could be live for the next \
                         waiter_grant_bound_ms {}, yet {} failed busy",
                        describe(release),
                        ms(freed),
                        self.options.waiter_grant_bound_ms,
                        describe(waiter)
                    ),
                    rows_of(release),
                ));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "index,time_ns,process,type,f,key,value,token,node,error\n";

    fn run(rows: &str, options: LivenessOptions) -> (LivenessReport, CheckResult) {
        let ops = history::csv::read_str(&format!("{HEADER}{rows}")).unwrap();
        let paired = history::pair::pair_with_faults(&ops).unwrap();
        (
            check(&paired, &options, 0.01),
            check_result(&paired, &options, 0.01),
        )
    }

    const GAVE_UP: &str = "0,100000000,0,invoke,acquire,a,60000,,,\n\
                           1,110000000,0,ok,acquire,a,,1,n1,\n\
                           2,200000000,1,invoke,acquire,a,20000 10000,,,\n\
                           3,500000000,1,info,acquire,a,,,,gave-up\n\
                           4,600000000,0,invoke,release,a,,1,,\n\
                           5,610000000,0,ok,release,a,,,n1,\n";

    #[test]
    fn a_busy_after_the_phantom_bound_fails_and_a_longer_bound_passes() {
        // Rule P on the same history: busy 3.5 s after the client left is a violation with
        // the default 3 s bound, and not judged (too early) with a 5 s bound.
        let rows = format!(
            "{GAVE_UP}6,4000000000,2,invoke,acquire,a,1000,,,\n\
             7,4010000000,2,fail,acquire,a,,,n1,busy\n"
        );
        let (report, result) = run(&rows, LivenessOptions::default());
        assert_eq!(report.phantom.evaluated, 1);
        assert_eq!(result.verdict, Verdict::Invalid);
        assert_eq!(result.rows, vec![2, 3, 6, 7]);
        let relaxed = LivenessOptions::default().with_phantom_release_bound_ms(5_000);
        let (report, result) = run(&rows, relaxed);
        assert_eq!(report.phantom, RuleCount::default());
        assert!(!result.checked, "nothing judged: not checked, never valid");
        assert!(matches!(result.verdict, Verdict::Unknown { .. }));
    }

    #[test]
    fn a_fault_in_the_window_makes_the_busy_not_evaluable() {
        // Only fault-free windows are judged: a partition healed after the busy.
        let rows = format!(
            "{GAVE_UP}6,700000000,nemesis,info,partition,,n1 | n2 n3,,,\n\
             7,4000000000,2,invoke,acquire,a,1000,,,\n\
             8,4010000000,2,fail,acquire,a,,,n1,busy\n\
             9,4500000000,nemesis,info,heal,,,,,\n"
        );
        let (report, result) = run(&rows, LivenessOptions::default());
        assert_eq!(report.phantom.not_evaluable, 1);
        assert_eq!(report.phantom.evaluated, 0);
        assert!(!result.checked);
    }

    #[test]
    fn a_grant_made_under_a_fault_may_outlive_its_lease_until_the_fault_ends() {
        // settle(): a grant returned during a clock skew is possibly live until the skew's
        // reset plus its lease, so a busy in that time is not blamed on the phantom.
        let rows = "0,100000000,1,invoke,acquire,a,20000,,,\n\
                    1,101000000,1,info,acquire,a,,,,disconnected\n\
                    2,150000000,nemesis,info,skew,,n1,,,\n\
                    3,160000000,3,invoke,acquire,a,500,,,\n\
                    4,170000000,3,ok,acquire,a,,4,n1,\n\
                    5,3000000000,nemesis,info,reset-clock,,n1,,,\n\
                    6,3200000000,2,invoke,acquire,a,500,,,\n\
                    7,3210000000,2,fail,acquire,a,,,n1,busy\n";
        let ops = history::csv::read_str(&format!("{HEADER}{rows}")).unwrap();
        let paired = history::pair::pair_with_faults(&ops).unwrap();
        let context = Context::new(&paired, &LivenessOptions::default(), 0.01);
        assert_eq!(context.settle(170_000_000), 3_000_000_000);
        let grant = &paired.operations[1];
        let (_, until) = context.live_interval(grant).unwrap();
        assert_eq!(until, 3_000_000_000 + 505_000_000);
        assert_eq!(
            context
                .possibly_live("a", &[0, 6], 3_200_000_000, 3_210_000_000)
                .len(),
            1
        );
    }

    #[test]
    fn the_options_builder_sets_each_bound() {
        let o = LivenessOptions::default()
            .with_recovery_bound_ms(1)
            .with_phantom_release_bound_ms(2)
            .with_waiter_slack_ms(3)
            .with_waiter_grant_bound_ms(4);
        assert_eq!(
            (
                o.recovery_bound_ms,
                o.phantom_release_bound_ms,
                o.waiter_slack_ms,
                o.waiter_grant_bound_ms
            ),
            (1, 2, 3, 4)
        );
        assert_eq!(LivenessOptions::default().recovery_bound_ms, 10_000);
    }
}
