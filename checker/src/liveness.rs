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
//!   some op `ok` by `R + recovery_bound_ms` (a process that crashed, its last op `info`, by
//!   a process that first invoked after the crash), unless all its ops after `R` are abandoned
//!   acquires (it chose to leave) or busy acquires while another grant of the key could be
//!   live (then the process is not evaluable).
//! - **P (phantom release).** An acquire that ends `info` with error `gave-up` or
//!   `disconnected` was abandoned by its client at `L` (that row's time). It is judged only
//!   with a *witness*: another process's grant of the key that held it from before the
//!   abandoned acquire was invoked until `phantom_witness_margin_ms` after `L`, so the node
//!   heard of the departure before it could grant. (Without one, the grant and the departure
//!   may have crossed on the wire, and a node cannot tell that from a client that got its
//!   grant and died, which keeps the lock until its lease ends.) An acquire of the same key
//!   by another process invoked at `t >= L + phantom_release_bound_ms`, before the abandoned
//!   acquire's lease could have run out, that fails `busy` while no other grant of the key
//!   can be live is a violation. A service that promises to release the grant of a call its
//!   client cancelled, or whose connection ended, even when the grant was answered first
//!   (`cancelled_grants`: lockd, whose node turns a cancellation that arrives after
//!   its grant into a release), is judged without a witness: for it the crossing on the wire
//!   is no excuse. Only the harness can say so, for the departures whose cancellation went
//!   out before an answer reached the client (it records the others `indeterminate`: a
//!   grant read off the socket, or a connection cut with nothing sent, is one no node can
//!   tell from a grant its client read).
//! - **W (waiters).** An acquire whose value is `LEASE_MS WAIT_MS` must complete (`ok` or
//!   `fail`) by `invoke + WAIT_MS + waiter_slack_ms`; and a waiter that fails `busy` although
//!   the key was certainly free for longer than `waiter_grant_bound_ms` inside its wait is a
//!   violation.
//!
//! - **S (sessions).** An op that ends `info` with error `session-expired` says the service
//!   forgot its client's session. With the service's session timeout known
//!   (`session_timeout_ms`), the same process's last `ok` acquire or release before it proves
//!   the session was active when that op applied, after its invoke `A`. A session recorded
//!   active at most `session_activity_slack_ms` before its request (lockd stamps activity
//!   with committed time in 1 s steps), on clocks that run at most `1 + drift` fast, cannot
//!   expire before `A + (timeout - slack) / (1 + drift)`: a `session-expired` completion
//!   earlier than that is a violation. Not evaluable without a timeout, without such an
//!   earlier `ok` op of the process, or when a clock fault (`skew`, `strobe`) overlaps the
//!   interval, since a clock jumped ahead expires sessions early by design. (A session
//!   evicted at the service's cap of sessions also answers `session-expired`; the rule
//!   assumes histories with fewer clients than that cap.)
//!
//! P and W are judged only where no fault is active (fault spans from the vocabulary's
//! pairs, [`history::fault_spans`]); each rule counts what it evaluated and what it could
//! not. "Possibly live" is conservative: a grant that ended `ok` is live from its invoke until
//! an `ok` release of its token, or until `return + lease·(1+drift)`; one that ended `info`
//! likewise from its `info` row; one never completed forever. Every fault that begins while
//! a grant may be live pushes that end to the fault's end plus a whole lease: a new leader
//! starts every lease over on its own clock, and a slow clock stretches it. An abandoned
//! grant is not live once its phantom release was owed: its client left at least
//! `phantom_release_bound_ms` ago and no fault was active from its invoke to then. A busy it
//! causes after that is what rule P reports; an abandon under a fault may keep its key until
//! the lease runs out, so it stays possibly live.

use std::collections::{BTreeMap, HashMap};

use history::pair::Paired;
use history::{AcquireValue, CheckName, ErrorWord, FaultVerb, OpName, OpType, Operation};

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
    /// Rule P: how long after the client left the key's witness must still hold it, so that
    /// the node heard of the departure before it could grant (longer than a message's trip).
    pub phantom_witness_margin_ms: u64,
    /// Rule P: whether the service releases a grant whose call its client cancelled (or
    /// whose connection ended) even when it had answered it, with every departure of the
    /// clients sending that cancellation, so that an abandon needs no witness.
    /// [`CancelledGrants::MayBeKept`] for histories of unknown provenance.
    pub cancelled_grants: CancelledGrants,
    /// How long after a fault ends a new leader may take to be elected and apply what it
    /// inherited: a grant's lease starts over then, not at the fault's end (sim seed 8400
    /// of 10,000: a grant committed by the leader elected after a kill of every node held its
    /// key 0.3 s past "fault end plus a lease", and rule P blamed a leaver for the busy).
    pub leader_change_ms: u64,
    /// Rule W: how long after its wait a waiting acquire may take to be answered.
    pub waiter_slack_ms: u64,
    /// Rule W: the longest a key may stay free while a waiter waits for it.
    pub waiter_grant_bound_ms: u64,
    /// Rule S: the service's session timeout, when known (lockd: 10 min unless configured
    /// otherwise); `None`: rule S judges nothing.
    pub session_timeout_ms: Option<u64>,
    /// Rule S: how much older than a client's request its session's recorded activity may be
    /// (lockd's `ACTIVITY_STAMP_MS`).
    pub session_activity_slack_ms: u64,
}

impl Default for LivenessOptions {
    fn default() -> Self {
        LivenessOptions {
            recovery_bound_ms: 10_000,
            phantom_release_bound_ms: 3_000,
            phantom_witness_margin_ms: 250,
            cancelled_grants: CancelledGrants::MayBeKept,
            leader_change_ms: 3_000,
            waiter_slack_ms: 2_000,
            waiter_grant_bound_ms: 1_000,
            session_timeout_ms: None,
            session_activity_slack_ms: 1_000,
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

    /// With another witness margin (rule P).
    pub fn with_phantom_witness_margin_ms(self, phantom_witness_margin_ms: u64) -> Self {
        LivenessOptions {
            phantom_witness_margin_ms,
            ..self
        }
    }

    /// With what the service does with the grants of cancelled calls (rule P; see
    /// [`LivenessOptions::cancelled_grants`]).
    pub fn with_cancelled_grants(self, cancelled_grants: CancelledGrants) -> Self {
        LivenessOptions {
            cancelled_grants,
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

    /// With the service's session timeout (rule S).
    pub fn with_session_timeout_ms(self, session_timeout_ms: Option<u64>) -> Self {
        LivenessOptions {
            session_timeout_ms,
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

/// What a service does with a grant whose client cancelled its call, or closed its
/// connection, before reading it (rule P).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelledGrants {
    /// It may keep it until its lease ends: the node cannot tell it from a grant its client
    /// read and then died with (an abandon is judged only with a witness).
    MayBeKept,
    /// It releases it, and every abandon in the history (`gave-up`, `disconnected`) sent its
    /// cancellation before an answer reached its client (the harness records a departure
    /// that did not as `indeterminate`): every abandon is judged.
    Released,
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
    /// `R`, `P`, `W` or `S`.
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
    /// Rule S's counts.
    pub sessions: RuleCount,
    /// Every violation, in the order found.
    pub violations: Vec<LivenessViolation>,
}

impl LivenessReport {
    /// Events judged by any rule.
    pub fn evaluated(&self) -> u64 {
        self.recovery.evaluated
            + self.phantom.evaluated
            + self.waiters.evaluated
            + self.sessions.evaluated
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
            "{}; {}; {}; {}",
            line("recovery after the final heal", &self.recovery),
            line("phantom-lock release", &self.phantom),
            line("waiters answered", &self.waiters),
            line("sessions kept while active", &self.sessions)
        )
    }
}

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
        return CheckResult::invalid(CheckName::Liveness, text, rows);
    }
    if report.evaluated() == 0 {
        return CheckResult::not_checked(
            CheckName::Liveness,
            &format!(
                "nothing to judge: no recover marker, abandoned acquire or waiter in a fault-free window ({})",
                report.summary()
            ),
        );
    }
    let mut result = CheckResult::new(CheckName::Liveness, Verdict::Valid);
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
    context.sessions(&mut report);
    report
}

const MS: u64 = 1_000_000;

fn ms(ns: u64) -> String {
    crate::report::fmt_ns(ns)
}

/// What the rules share: the operations by key, the fault intervals, the bounds.
struct Context<'a> {
    operations: &'a [Operation],
    /// Merged fault intervals `[start, end]` (end `u64::MAX` when never ended), sorted.
    faults: Vec<(u64, u64)>,
    /// The `recover` marker: time and row.
    recover: Option<(u64, u64)>,
    /// Clock fault spans (`skew`, `strobe`) `[start, end]`, for rule S.
    clock_faults: Vec<(u64, u64)>,
    /// The history's last time.
    end_ns: u64,
    options: LivenessOptions,
    drift: f64,
    acquires_by_key: BTreeMap<&'a str, Vec<&'a Operation>>,
    releases_by_key: BTreeMap<&'a str, Vec<&'a Operation>>,
    /// Each acquire's lease, ms, by invoke row (parsed once: the rules ask for it in their
    /// inner loops).
    leases_ms: HashMap<u64, u64, FastBuildHasher>,
    /// Each abandoned acquire's witness (see [`Context::witness`]), by invoke row, found
    /// once: rule P and every "possibly live" question ask for it, and searching each time
    /// made the check cubic in a key's acquires (29 % of a simulated seed's CPU).
    witnesses: HashMap<u64, Option<&'a Operation>, FastBuildHasher>,
    /// Each acquire's [`Context::live_interval`], by invoke row, found once ("possibly
    /// live" asks for every grant of a key at every busy acquire of it).
    intervals: HashMap<u64, Option<(u64, u64)>, FastBuildHasher>,
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
        let clock_faults = (spans.iter())
            .filter(|s| matches!(s.verb, Some(FaultVerb::Skew | FaultVerb::Strobe)))
            .map(|s| (s.start_ns, s.end_ns.unwrap_or(u64::MAX)))
            .collect();
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
        let leases_ms = (paired.operations.iter())
            .filter(|op| op.f == OpName::Acquire)
            .map(|op| {
                let lease = AcquireValue::parse(op.invoke.value.trim()).map_or(0, |v| v.lease_ms);
                (op.invoke.index, lease)
            })
            .collect();
        let mut context = Context {
            operations: &paired.operations,
            faults,
            recover,
            clock_faults,
            end_ns,
            options: *options,
            drift,
            acquires_by_key,
            releases_by_key,
            leases_ms,
            witnesses: HashMap::default(),
            intervals: HashMap::default(),
        };
        context.witnesses = (paired.operations.iter())
            .filter(|op| op.f == OpName::Acquire && Self::left_at(op).is_some())
            .map(|op| (op.invoke.index, context.find_witness(op)))
            .collect();
        context.intervals = (paired.operations.iter())
            .filter(|op| op.f == OpName::Acquire)
            .map(|op| (op.invoke.index, context.find_live_interval(op)))
            .collect();
        context
    }

    fn fault_free(&self, from_ns: u64, to_ns: u64) -> bool {
        !self
            .faults
            .iter()
            .any(|(s, e)| *s <= to_ns && *e >= from_ns)
    }

    /// `end`, pushed out by every fault that begins before it while a grant of `lease_ns`
    /// that began at `start` may still hold its key: a leader change starts the lease over
    /// on the new leader's clock, and a slow clock stretches it, so such a grant may hold
    /// until the fault ends, a new leader takes over (`leader_change_ms`), and a whole lease
    /// runs (and a later fault in that time pushes again).
    fn extended_by_faults(&self, start: u64, mut end: u64, lease_ns: u64) -> u64 {
        let takeover = self.options.leader_change_ms * MS;
        // Merged and sorted by start, so one pass reaches the fixpoint.
        for &(fault_start, fault_end) in &self.faults {
            if fault_start > end {
                break;
            }
            if fault_end >= start {
                end = end.max(fault_end.saturating_add(takeover).saturating_add(lease_ns));
            }
        }
        end
    }

    /// Whether the abandoned `grant` owed its phantom release by `at`: its client left at
    /// least `phantom_release_bound_ms` before `at`, and no fault was active from its invoke
    /// to the end of that bound. Under a fault the release may be lost or never proposed (a
    /// deposed leader, a held link that hid the departure), and the grant may stay until its
    /// lease runs out.
    fn release_owed_by(&self, grant: &Operation, at: u64) -> bool {
        let bound = self.options.phantom_release_bound_ms * MS;
        Self::left_at(grant).is_some_and(|left| {
            let due = left.saturating_add(bound);
            due <= at && self.fault_free(grant.call_ns(), due) && self.judged(grant)
        })
    }

    /// Whether rule P judges `abandoned`: with a witness, or for a service that releases the
    /// grants of cancelled calls ([`LivenessOptions::cancelled_grants`]).
    fn judged(&self, abandoned: &Operation) -> bool {
        self.options.cancelled_grants == CancelledGrants::Released
            || self.witness(abandoned).is_some()
    }

    /// The grant that proves `abandoned` left before it could have been granted: another
    /// process's `ok` grant of the key, returned before `abandoned` was invoked, that still
    /// held the key `phantom_witness_margin_ms` after the client left (no release of its
    /// token invoked by then, its lease not run out even on a fast clock), with no fault from
    /// its invoke to then. Without one, the node's grant and the client's departure may have
    /// crossed on the wire: the node handed the answer to a connection whose client was
    /// already leaving, and a lock service cannot tell that from a client that took its
    /// grant and then died, which keeps the lock until its lease ends.
    fn witness(&self, abandoned: &Operation) -> Option<&'a Operation> {
        self.witnesses
            .get(&abandoned.invoke.index)
            .copied()
            .flatten()
    }

    /// [`Context::witness`], searched.
    fn find_witness(&self, abandoned: &Operation) -> Option<&'a Operation> {
        let left = Self::left_at(abandoned)?;
        let until = left.saturating_add(self.options.phantom_witness_margin_ms * MS);
        self.acquires_by_key
            .get(abandoned.key.as_str())?
            .iter()
            .copied()
            .find(|g| {
                let Some(c) = g.completion.as_ref() else {
                    return false;
                };
                if g.process == abandoned.process
                    || c.op_type != OpType::Ok
                    || c.time_ns > abandoned.call_ns()
                    || !self.fault_free(g.call_ns(), until)
                    || g.call_ns()
                        .saturating_add(self.lease_ns(g, 1.0 - self.drift))
                        < until
                {
                    return false;
                }
                let released_by = self.releases_of(g, c.token).map(|r| r.call_ns()).min();
                released_by.is_none_or(|r| r >= until)
            })
    }

    /// The releases of `grant`'s key under `token` (none when the grant has no token).
    fn releases_of<'s>(
        &'s self,
        grant: &Operation,
        token: Option<u64>,
    ) -> impl Iterator<Item = &'s Operation> + 's {
        self.releases_by_key
            .get(grant.key.as_str())
            .into_iter()
            .flatten()
            .copied()
            .filter(move |r| token.is_some() && r.invoke.token == token)
    }

    fn lease_ns(&self, op: &Operation, factor: f64) -> u64 {
        let lease = match self.leases_ms.get(&op.invoke.index) {
            Some(&lease) => lease,
            None => AcquireValue::parse(op.invoke.value.trim()).map_or(0, |v| v.lease_ms),
        };
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
        match self.intervals.get(&grant.invoke.index) {
            Some(&interval) => interval,
            None => self.find_live_interval(grant),
        }
    }

    /// [`Context::live_interval`], worked out.
    fn find_live_interval(&self, grant: &Operation) -> Option<(u64, u64)> {
        let c = grant.completion.as_ref();
        let lease = self.lease_ns(grant, 1.0 + self.drift);
        let start = grant.call_ns();
        match c.map(|c| c.op_type) {
            Some(OpType::Fail) => None,
            Some(OpType::Ok) => {
                let token = c.and_then(|c| c.token);
                let released = self
                    .releases_of(grant, token)
                    .filter(|r| {
                        r.completion
                            .as_ref()
                            .is_some_and(|c| c.op_type == OpType::Ok)
                    })
                    .filter_map(|r| r.return_ns())
                    .min();
                let expiry = grant.return_ns()?.saturating_add(lease);
                let expiry = self.extended_by_faults(start, expiry, lease);
                Some((start, released.map_or(expiry, |r| r.min(expiry))))
            }
            Some(_) => {
                let at = c.map_or(u64::MAX, |c| c.time_ns);
                let expiry = self.extended_by_faults(start, at.saturating_add(lease), lease);
                Some((start, expiry))
            }
            None => Some((start, u64::MAX)),
        }
    }

    /// Other grants of `key` (not `except`) that may hold it at some instant of
    /// `[from, to]`, apart from abandoned ones whose phantom release was owed by `from`.
    fn possibly_live(&self, key: &str, except: &[u64], from: u64, to: u64) -> Vec<&Operation> {
        self.acquires_by_key
            .get(key)
            .into_iter()
            .flatten()
            .copied()
            .filter(|g| !except.contains(&g.invoke.index))
            .filter(|g| !self.release_owed_by(g, from))
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
        let ok_by_deadline = |o: &&Operation| {
            o.completion
                .as_ref()
                .is_some_and(|c| c.op_type == OpType::Ok && c.time_ns <= deadline)
        };
        // When each process first invoked after the marker, and whether it succeeded.
        let starts: Vec<(u64, bool)> = (by_process.values())
            .map(|ops| (ops[0].call_ns(), ops.iter().any(ok_by_deadline)))
            .collect();
        for (process, ops) in by_process {
            if ops[0].call_ns() > deadline || ops.iter().all(|o| Self::left_at(o).is_some()) {
                continue;
            }
            // A process whose last op ended `info` crashed and was retired (it invokes no
            // more); its client goes on as a later process, which recovers for it.
            let crashed_at = (ops.last())
                .and_then(|o| o.completion.as_ref())
                .filter(|c| c.op_type == OpType::Info)
                .map(|c| c.time_ns);
            let succeeded = ops.iter().any(ok_by_deadline)
                || crashed_at.is_some_and(|at| starts.iter().any(|(s, ok)| *s >= at && *ok));
            let still_open = ops.last().is_some_and(|o| o.completion.is_none());
            if !succeeded && still_open && self.end_ns < deadline {
                report.recovery.not_evaluable += 1;
                continue;
            }
            if !succeeded
                && ops
                    .iter()
                    .filter(|o| o.call_ns() <= deadline)
                    .all(|o| self.excused_in_recovery(o, deadline))
            {
                // Every op was turned away by a grant that may still legally hold its key.
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
    /// Whether rule R may not blame `op`: the client's own abandon, a write the fenced
    /// resource refused (a stale token from before the heal), a release answered
    /// `not-holder` (its lease had ended), an acquire still waiting at
    /// the bound while another grant may hold its key, or a busy acquire while
    /// another grant of its key could be live (a lease that began before or under a fault
    /// may outlast the recovery bound; a lock service must not end it early).
    fn excused_in_recovery(&self, op: &Operation, deadline: u64) -> bool {
        if Self::left_at(op).is_some() {
            return true;
        }
        let still_open = op.completion.as_ref().is_none_or(|c| c.time_ns > deadline);
        if still_open {
            // Still waiting at the bound (answered later, or never): excused only while
            // another grant of its key could hold it.
            return op.f == OpName::Acquire
                && !self
                    .possibly_live(&op.key, &[op.invoke.index], op.call_ns(), deadline)
                    .is_empty();
        }
        let Some(c) = op.completion.as_ref() else {
            return false;
        };
        if op.f == OpName::Write && c.op_type == OpType::Fail {
            // The fenced resource refused a stale token: it works, the lock service is not
            // judged by it.
            return true;
        }
        if op.f == OpName::Release && c.op_type == OpType::Fail && c.error == ErrorWord::NotHolder {
            // A definite answer: the lease ended before the release (linearizability judges
            // whether that was true); the service answered, it did not stall.
            return true;
        }
        op.f == OpName::Acquire
            && c.op_type == OpType::Fail
            && c.error == ErrorWord::Busy
            && !self
                .possibly_live(&op.key, &[op.invoke.index], op.call_ns(), c.time_ns)
                .is_empty()
    }

    /// Rule P: busy acquires after an abandoned acquire's bound, with no other live grant.
    fn phantom(&self, report: &mut LivenessReport) {
        let bound = self.options.phantom_release_bound_ms * MS;
        for (key, acquires) in &self.acquires_by_key {
            for abandoned in acquires.iter().copied() {
                let Some(left) = Self::left_at(abandoned) else {
                    continue;
                };
                let witness = self.witness(abandoned);
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
                    if !self.judged(abandoned)
                        || !self.fault_free(abandoned.call_ns(), c.time_ns)
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
                             {} left at {}, {}; {}, more than phantom_release_bound_ms {} later, \
                             before that acquire's lease ({} ms) could have run out, while no \
                             other grant of {key} could be live and no fault was active",
                            describe(abandoned),
                            ms(left),
                            witness.map_or_else(
                                || "cancelling its call (a service that releases the grant \
                                    of a cancelled call, even one it had answered)"
                                    .to_owned(),
                                |w| format!(
                                    "while {} still held the key (so the node heard of the \
                                     departure before it could grant)",
                                    describe(w)
                                )
                            ),
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
                let wait_end = waiter.call_ns().saturating_add(wait_ms.saturating_mul(MS));
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

    /// Rule S.
    fn sessions(&self, report: &mut LivenessReport) {
        // Each process's ok acquires and releases, by invoke time (ops are in invoke order).
        let mut last_ok: HashMap<u64, &Operation, FastBuildHasher> = HashMap::default();
        for op in self.operations {
            let expired = op
                .completion
                .as_ref()
                .filter(|c| c.op_type == OpType::Info && c.error == ErrorWord::SessionExpired);
            if let Some(c) = expired {
                self.judge_session(op, c.time_ns, last_ok.get(&op.process).copied(), report);
            }
            if op.is_ok() && (op.f == OpName::Acquire || op.f == OpName::Release) {
                last_ok.insert(op.process, op);
            }
        }
    }

    fn judge_session(
        &self,
        op: &Operation,
        expired_ns: u64,
        active: Option<&Operation>,
        report: &mut LivenessReport,
    ) {
        let (Some(timeout_ms), Some(active)) = (self.options.session_timeout_ms, active) else {
            report.sessions.not_evaluable += 1;
            return;
        };
        let from = active.call_ns();
        if (self.clock_faults.iter()).any(|(s, e)| *s <= expired_ns && *e >= from) {
            report.sessions.not_evaluable += 1;
            return;
        }
        report.sessions.evaluated += 1;
        let idle_ms = timeout_ms.saturating_sub(self.options.session_activity_slack_ms);
        let earliest =
            from.saturating_add((idle_ms as f64 * MS as f64 / (1.0 + self.drift)) as u64);
        if expired_ns < earliest {
            report.violations.push(LivenessViolation {
                rule: 'S',
                message: format!(
                    "a session expires only after it was idle for the timeout: violated: {} \
                     was told its session expired {} after {} was invoked and then answered \
                     ok under it, where a session timeout of {timeout_ms} ms (activity \
                     recorded up to {} ms early, drift {}) allows it no earlier than {}",
                    describe(op),
                    ms(expired_ns - from),
                    describe(active),
                    self.options.session_activity_slack_ms,
                    self.drift,
                    ms(earliest),
                ),
                rows: rows_of(active).into_iter().chain(rows_of(op)).collect(),
            });
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
            // key in [from, from + bound] explains the busy. The released grant is the one
            // of the release's token; without tokens, the releasing process's own grant (a
            // release by anyone else leaves the holder's grant possibly live: cautious).
            let released_token = release.invoke.token;
            let released = |g: &Operation| match released_token {
                Some(token) => g.completion.as_ref().and_then(|c| c.token) == Some(token),
                None => g.process == release.process,
            };
            let others: Vec<&Operation> = self
                .possibly_live(key, &[waiter.invoke.index], from, from + bound)
                .into_iter()
                .filter(|g| {
                    !(g.completion
                        .as_ref()
                        .is_some_and(|c| c.op_type == OpType::Ok)
                        && released(g)
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

    use history::csv::HEADER;

    fn run(rows: &str, options: LivenessOptions) -> (LivenessReport, CheckResult) {
        let ops = history::csv::read_str(&format!("{HEADER}\n{rows}")).unwrap();
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
                           4,800000000,0,invoke,release,a,,1,,\n\
                           5,810000000,0,ok,release,a,,,n1,\n";

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
    fn a_session_expired_sooner_than_its_timeout_after_an_ok_op_is_a_violation() {
        // Rule S: process 0 acquired ok (invoked at 1 s) and was told at 5 s that its session
        // expired. A 10 s timeout cannot have run out (the review's stamp defect expired
        // busy sessions so); a 3 s one can. Without a timeout, or with no earlier ok op, or
        // with a clock fault between, the rule judges nothing.
        let rows = "0,1000000000,0,invoke,acquire,a,1000,,,\n\
                    1,1010000000,0,ok,acquire,a,,3,n1,\n\
                    2,5000000000,0,invoke,release,a,,3,,\n\
                    3,5010000000,0,info,release,a,,,,session-expired\n";
        let timeout = |ms| LivenessOptions::default().with_session_timeout_ms(Some(ms));
        let (report, result) = run(rows, timeout(10_000));
        assert_eq!(report.sessions.evaluated, 1, "{report:?}");
        assert_eq!(result.verdict, Verdict::Invalid, "{result:?}");
        assert_eq!(result.rows, vec![0, 1, 2, 3]);
        let text = result.explanation.clone().unwrap_or_default();
        assert!(text.contains("session timeout of 10000 ms"), "{text}");
        // 4.01 s after the invoke: a 5 s timeout less the 1 s stamp slack allows it.
        let (report, result) = run(rows, timeout(5_000));
        assert_eq!(report.sessions.evaluated, 1);
        assert_eq!(result.verdict, Verdict::Valid, "{result:?}");
        let (report, _) = run(rows, timeout(5_100));
        assert_eq!(
            report.violations.len(),
            1,
            "5.1 s less 1 s is past 4.01 s: {report:?}"
        );
        let (report, result) = run(rows, LivenessOptions::default());
        assert_eq!(report.sessions.not_evaluable, 1);
        assert!(
            !result.checked,
            "nothing judged without a timeout: {result:?}"
        );
        let alone = "0,5000000000,0,invoke,release,a,,3,,\n\
                     1,5010000000,0,info,release,a,,,,session-expired\n";
        let (report, _) = run(alone, timeout(10_000));
        assert_eq!(
            (report.sessions.evaluated, report.sessions.not_evaluable),
            (0, 1)
        );
        let skewed = "0,1000000000,0,invoke,acquire,a,1000,,,\n\
                      1,1010000000,0,ok,acquire,a,,3,n1,\n\
                      2,2000000000,nemesis,info,skew,,n1,,,\n\
                      3,5000000000,0,invoke,release,a,,3,,\n\
                      4,5010000000,0,info,release,a,,,,session-expired\n\
                      5,6000000000,nemesis,info,reset-clock,,n1,,,\n";
        let (report, _) = run(skewed, timeout(10_000));
        assert_eq!(
            (report.sessions.evaluated, report.sessions.not_evaluable),
            (0, 1)
        );
    }

    #[test]
    fn a_process_that_crashed_after_the_heal_is_recovered_by_its_successor() {
        // Swarm seed 763 of 1,000 (2026-12-05): one client; its first acquire after the
        // recover marker timed out (`info`), so its process was retired, and the process
        // that took its place succeeded 160 ms later. Rule R blamed the retired process: a
        // false alarm. A crashed process is judged by its successors; when none of them
        // succeeds either, the violation stands.
        let head = "0,30372000000,nemesis,info,recover,,,,,\n\
                    1,30372000000,1,invoke,acquire,k0,2000 1000,,,\n\
                    2,30688000000,1,info,acquire,k0,,,,timeout\n\
                    3,30788000000,2,invoke,acquire,k0,2000 1000,,,\n";
        let recovered = format!("{head}4,30848000000,2,ok,acquire,k0,,50,n3,\n");
        let (report, result) = run(&recovered, LivenessOptions::default());
        assert_eq!(result.verdict, Verdict::Valid, "{result:?}");
        assert_eq!(report.recovery.evaluated, 2, "{report:?}");
        let not_recovered = format!("{head}4,31788000000,2,info,acquire,k0,,,,timeout\n");
        let (_, result) = run(&not_recovered, LivenessOptions::default());
        assert_eq!(result.verdict, Verdict::Invalid, "{result:?}");
    }

    #[test]
    fn a_fault_in_the_window_makes_the_busy_not_evaluable() {
        // Only fault-free windows are judged: a partition healed after the busy.
        let rows = format!(
            "{GAVE_UP}6,900000000,nemesis,info,partition,,n1 | n2 n3,,,\n\
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
        // A grant whose client left during a clock skew is possibly live until the skew's
        // reset, a leader change allowance and its lease, so a busy in that time is not
        // blamed on the phantom.
        let rows = "0,100000000,1,invoke,acquire,a,20000,,,\n\
                    1,101000000,1,info,acquire,a,,,,disconnected\n\
                    2,150000000,nemesis,info,skew,,n1,,,\n\
                    3,160000000,3,invoke,acquire,a,500,,,\n\
                    4,170000000,3,ok,acquire,a,,4,n1,\n\
                    5,3000000000,nemesis,info,reset-clock,,n1,,,\n\
                    6,3200000000,2,invoke,acquire,a,500,,,\n\
                    7,3210000000,2,fail,acquire,a,,,n1,busy\n";
        let ops = history::csv::read_str(&format!("{HEADER}\n{rows}")).unwrap();
        let paired = history::pair::pair_with_faults(&ops).unwrap();
        let context = Context::new(&paired, &LivenessOptions::default(), 0.01);
        let grant = &paired.operations[1];
        let (_, until) = context.live_interval(grant).unwrap();
        assert_eq!(until, 3_000_000_000 + 3_000_000_000 + 505_000_000);
        assert_eq!(
            context
                .possibly_live("a", &[0, 6], 3_200_000_000, 3_210_000_000)
                .len(),
            1
        );
        let (report, _) = run(rows, LivenessOptions::default());
        assert!(report.violations.is_empty(), "{:?}", report.violations);
    }

    #[test]
    fn every_fault_while_a_grant_may_hold_starts_its_lease_over() {
        // Found by `locksmith sim --seeds 4`: a 20 s grant whose client disconnected under a
        // partition, then two kills of every node (each leader change restarts the lease on
        // the new leader's clock), kept its key busy 40 s after the grant. That is legal,
        // and rule P wrongly blamed the busy on a later leaver's fault-free abandon.
        let first = "0,1000000000,0,invoke,acquire,a,20000,,,\n\
                     1,1010000000,0,info,acquire,a,,,,disconnected\n\
                     2,1020000000,nemesis,info,partition,,n1 | n2 n3,,,\n\
                     3,1500000000,nemesis,info,heal,,,,,\n\
                     4,15000000000,nemesis,info,kill,,n1 n2 n3,,,\n\
                     5,16000000000,nemesis,info,restart,,n1 n2 n3,,,\n";
        // The later leaver waits behind a holder that releases well after it left, so the
        // node heard of its departure before it could grant (rule P's witness).
        let later = |i: u64| {
            format!(
                "{},27000000000,5,invoke,acquire,a,60000,,,\n\
                 {},27010000000,5,ok,acquire,a,,9,n1,\n\
                 {},28000000000,1,invoke,acquire,a,20000 5000,,,\n\
                 {},28001000000,1,info,acquire,a,,,,disconnected\n\
                 {},28500000000,5,invoke,release,a,,9,,\n\
                 {},28510000000,5,ok,release,a,,,n1,\n\
                 {},32000000000,2,invoke,acquire,a,500,,,\n\
                 {},32010000000,2,fail,acquire,a,,,n1,busy\n",
                i,
                i + 1,
                i + 2,
                i + 3,
                i + 4,
                i + 5,
                i + 6,
                i + 7
            )
        };
        let rows = format!("{first}{}", later(6));
        let ops = history::csv::read_str(&format!("{HEADER}\n{rows}")).unwrap();
        let paired = history::pair::pair_with_faults(&ops).unwrap();
        let context = Context::new(&paired, &LivenessOptions::default(), 0.01);
        let (_, until) = context.live_interval(&paired.operations[0]).unwrap();
        assert_eq!(until, 16_000_000_000 + 3_000_000_000 + 20_200_000_000);
        let (report, result) = run(&rows, LivenessOptions::default());
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.phantom.not_evaluable, 1);
        assert!(!result.checked);
        // Without the first leaver the busy has no excuse: a violation.
        let (report, _) = run(&later(0), LivenessOptions::default());
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
    }

    #[test]
    fn an_abandon_without_a_witness_is_not_judged_and_may_keep_its_key() {
        // The node may have handed the grant to the connection just as the client left (the
        // answer and the departure crossed): nothing in the history can rule that out, so the
        // abandon is not judged, and its grant may hold until its lease ends.
        let rows = "0,1000000000,1,invoke,acquire,a,20000,,,\n\
                    1,1010000000,1,info,acquire,a,,,,gave-up\n\
                    2,5000000000,2,invoke,acquire,a,500,,,\n\
                    3,5010000000,2,fail,acquire,a,,,n1,busy\n";
        let (report, result) = run(rows, LivenessOptions::default());
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.phantom.not_evaluable, 1);
        assert!(!result.checked);
        // A witness that released too soon after the client left does not count either.
        let rows = "0,900000000,0,invoke,acquire,a,60000,,,\n\
                    1,910000000,0,ok,acquire,a,,1,n1,\n\
                    2,1000000000,1,invoke,acquire,a,20000 5000,,,\n\
                    3,1010000000,1,info,acquire,a,,,,gave-up\n\
                    4,1020000000,0,invoke,release,a,,1,,\n\
                    5,1030000000,0,ok,release,a,,,n1,\n\
                    6,5000000000,2,invoke,acquire,a,500,,,\n\
                    7,5010000000,2,fail,acquire,a,,,n1,busy\n";
        let (report, _) = run(rows, LivenessOptions::default());
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        let (report, _) = run(
            rows,
            LivenessOptions::default().with_phantom_witness_margin_ms(5),
        );
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
    }

    #[test]
    fn a_service_that_releases_cancelled_grants_is_judged_without_a_witness() {
        // lockd turns a cancellation that arrives after its grant into a release, so the
        // crossing on the wire excuses nothing: the abandon without a witness above is judged.
        let rows = "0,1000000000,1,invoke,acquire,a,20000,,,\n\
                    1,1010000000,1,info,acquire,a,,,,gave-up\n\
                    2,5000000000,2,invoke,acquire,a,500,,,\n\
                    3,5010000000,2,fail,acquire,a,,,n1,busy\n";
        let releases = LivenessOptions::default().with_cancelled_grants(CancelledGrants::Released);
        let (report, result) = run(rows, releases);
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
        assert!(
            report.violations[0].message.contains("cancelling its call"),
            "{}",
            report.violations[0].message
        );
        assert!(result.checked);
        // Inside the release bound, or with a fault since the invoke, it is still excused.
        let soon = rows.replace("5000000000,2,invoke", "3000000000,2,invoke");
        let (report, _) = run(&soon, releases);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        let faulted = "0,1000000000,1,invoke,acquire,a,20000,,,\n\
                       1,1010000000,1,info,acquire,a,,,,gave-up\n\
                       2,1020000000,nemesis,info,kill,,n1,,,\n\
                       3,1500000000,nemesis,info,restart,,n1,,,\n\
                       4,5000000000,2,invoke,acquire,a,500,,,\n\
                       5,5010000000,2,fail,acquire,a,,,n1,busy\n";
        let (report, _) = run(faulted, releases);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        // A grant that may be the leaver's no longer excuses a busy once its release was owed.
        let later_ok = "0,1000000000,1,invoke,acquire,a,20000,,,\n\
                        1,1010000000,1,info,acquire,a,,,,disconnected\n\
                        2,5000000000,2,invoke,acquire,a,500,,,\n\
                        3,5010000000,2,ok,acquire,a,,7,n1,\n\
                        4,5100000000,3,invoke,acquire,a,500,,,\n\
                        5,5110000000,3,fail,acquire,a,,,n1,busy\n";
        let (report, _) = run(later_ok, releases);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.phantom.evaluated, 1);
    }

    #[test]
    fn recovery_does_not_blame_a_busy_while_a_crossed_grant_may_hold() {
        // Found by `locksmith sim --seeds 6`: a 20 s grant that crossed its client's
        // disconnect on the wire kept the key past the recovery bound. Every busy before the
        // bound is excused by it, also when the client gets the key after the bound.
        let leaver = "0,21000000000,1,invoke,acquire,a,20000,,,\n\
                      1,21010000000,1,info,acquire,a,,,,disconnected\n";
        let rest = |i: u64| {
            format!(
                "{},30000000000,nemesis,info,recover,,,,,\n\
                 {},30050000000,0,invoke,release,b,,3,,\n\
                 {},30060000000,0,fail,release,b,,,n1,not-holder\n\
                 {},30100000000,0,invoke,acquire,a,2000 1000,,,\n\
                 {},31100000000,0,fail,acquire,a,,,n1,busy\n\
                 {},39000000000,0,invoke,acquire,a,2000 1000,,,\n\
                 {},40000000000,0,fail,acquire,a,,,n1,busy\n\
                 {},40000000000,0,invoke,acquire,a,2000 1000,,,\n\
                 {},40300000000,0,ok,acquire,a,,9,n1,\n",
                i,
                i + 1,
                i + 2,
                i + 3,
                i + 4,
                i + 5,
                i + 6,
                i + 7,
                i + 8
            )
        };
        let (report, _) = run(&format!("{leaver}{}", rest(2)), LivenessOptions::default());
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.recovery.not_evaluable, 1);
        let (report, _) = run(&rest(0), LivenessOptions::default());
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
        assert_eq!(report.violations[0].rule, 'R');
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
