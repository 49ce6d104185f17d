//! The near-linear linearizability check for lock histories.
//!
//! # Why it can be fast
//!
//! Tokens strictly increase, so on each key the `ok` grants are totally ordered by token:
//! there is nothing to search there (research/linearizability.md §4.1). What is left free
//! is when each epoch ends (a release, an `info` release, an expiry), whether `info`
//! acquires made hidden grants, and where the observations (`busy`, `not-holder`) fall.
//!
//! # The sweep
//!
//! Per key, the check walks the calls and returns in time order (calls first at equal
//! times: intervals are closed) and keeps the set of *configurations* the key can be in:
//! `(holder, last token, pending ops already linearized, hidden grants used)`. This is
//! the just-in-time linearization of Lowe and knossos `linear`, specialised to the lock
//! spec of [`super::lock_model`] so that the set stays tiny:
//!
//! - At a call, the op becomes pending. Optional ops (`info`, internal events) become
//!   available for good.
//! - At the return of op X, the set is closed under every legal step of the pending ops
//!   (grants in token order, releases of the current token, expiries and `info` releases
//!   that have become available, a hidden grant when an unused `info` acquire has been
//!   invoked, the end of a hidden grant), and only the configurations in which X has taken
//!   effect are kept. None left: not linearizable, and X is the op that could not be
//!   placed.
//!
//! Two dominance rules keep the set small, and are the reason it is exact:
//!
//! 1. An observation (`busy`, `not-holder`) changes nothing, so linearizing it as soon as
//!    the state allows it can only help: every continuation without it is also a
//!    continuation with it. Configurations absorb such ops eagerly instead of branching.
//! 2. A hidden grant (of an `info` acquire) may start any time after its acquire's invoke
//!    and end any time after its earliest end (its lease floor, or its invoke when phantom
//!    releases are allowed). Once the sweep has passed an acquire's earliest end, that
//!    acquire is interchangeable with every other such one. So a configuration names the
//!    *young* acquires it used (earliest end still ahead) and only *counts* the old ones,
//!    and of two configurations that differ only in that count the smaller one wins.
//!
//! Expiries and `info` releases of token t need no bookkeeping after use: once epoch t has
//! ended, no later state is held under t (tokens only grow).
//!
//! # Cost
//!
//! Each event touches the live configurations; grants leave no choice, so their number
//! stays small (it grows with the overlapping choices of one key's epoch ends, not with the
//! history). The bound `search_budget_states_max` caps configurations per step; reaching it
//! gives `Unknown`. The generic search ([`super::wgl`]) decides the same question and the
//! two are compared on random histories (`checker/tests/differential.rs`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use super::bitset::FastBuildHasher;
use super::lock_model::{LockInput, LockModel, LockOutput, partition_by_key};
use super::{Budget, Counterexample, LinearReport, Model, Operation};
use crate::verdict::Verdict;

/// Checks a lock history (built by [`super::lock_model::lock_operations`]) key by key.
///
/// Keys are independent, so they are swept on all available cores (each thread takes every
/// n-th key); the results are merged in key order, so the verdict and the counterexample
/// (the first failing key's) do not depend on the scheduling.
pub fn check(history: &[Operation<LockModel>], budget: Budget) -> LinearReport {
    check_until(history, budget, budget.deadline())
}

/// [`check`] with the budget's time limit already turned into a deadline (so that the
/// keys of one history checked one call at a time share one limit).
pub fn check_until(
    history: &[Operation<LockModel>],
    budget: Budget,
    deadline: Option<Instant>,
) -> LinearReport {
    check_parts(history, partition_by_key(history), budget, deadline)
}

/// [`check_until`] on the operations of one key (all of `history`, in order), without
/// partitioning them again.
///
/// # Panics
///
/// When two operations have different keys (a caller's bug: the sweep would mix keys).
pub fn check_one_key(
    history: &[Operation<LockModel>],
    budget: Budget,
    deadline: Option<Instant>,
) -> LinearReport {
    if let Some(first) = history.first() {
        assert!(
            history.iter().all(|op| op.key == first.key),
            "check_one_key got operations of more than one key (the first is {:?})",
            first.key
        );
    }
    let parts = if history.is_empty() {
        Vec::new()
    } else {
        vec![(0..history.len()).collect()]
    };
    check_parts(history, parts, budget, deadline)
}

fn check_parts(
    history: &[Operation<LockModel>],
    parts: Vec<Vec<usize>>,
    budget: Budget,
    deadline: Option<Instant>,
) -> LinearReport {
    let sweep_part = |part: &Vec<usize>| {
        let mut sweep = Sweep::new(history, part, budget.search_budget_states_max);
        let result = sweep.run(deadline);
        (result, sweep.explored)
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(parts.len());
    let mut outcomes: Vec<(usize, PartOutcome)> = if threads <= 1 {
        parts.iter().map(sweep_part).enumerate().collect()
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (parts, sweep_part) = (&parts, &sweep_part);
                    scope.spawn(move || {
                        let mine = parts.iter().enumerate().skip(t).step_by(threads);
                        mine.map(|(i, part)| (i, sweep_part(part)))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("a lock sweep thread panicked"))
                .collect()
        })
    };
    outcomes.sort_by_key(|(i, _)| *i);
    let mut report = LinearReport {
        verdict: Verdict::Valid,
        counterexample: None,
        states_explored: outcomes.iter().map(|(_, (_, n))| n).sum(),
    };
    for (_, (result, _)) in outcomes {
        match result {
            Ok(()) => {}
            Err(Stop::Exhausted(reason)) => {
                report.verdict = report.verdict.merge(Verdict::unknown(reason));
            }
            Err(Stop::Stuck(counterexample)) => {
                report.verdict = Verdict::Invalid;
                report.counterexample = Some(counterexample);
                return report;
            }
        }
    }
    report
}

/// Who holds the key, in a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Holder {
    Free,
    Token(u64),
    /// A hidden grant that may end from this instant on (0 once the sweep has passed it:
    /// rule 2 makes such grants interchangeable).
    Hidden {
        earliest_end: u64,
    },
}

/// One way the key can be, at the current instant of the sweep.
#[derive(Clone, Debug)]
struct Config {
    holder: Holder,
    last_token: Option<u64>,
    /// Pending (not yet returned) non-optional ops that have taken effect, sorted.
    linearized: Vec<u32>,
    /// The young `info` acquires (earliest end still ahead) used as hidden grants, sorted.
    used_young: Vec<u32>,
}

impl PartialEq for Config {
    fn eq(&self, other: &Self) -> bool {
        // The lists hold a few ids: plain loops beat a `memcmp` call.
        let same =
            |a: &[u32], b: &[u32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y);
        self.holder == other.holder
            && self.last_token == other.last_token
            && same(&self.linearized, &other.linearized)
            && same(&self.used_young, &other.used_young)
    }
}

impl Eq for Config {}

/// What each op of the part is, for the sweep.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Grant(u64),
    Busy,
    HiddenGrant,
    Release(u64),
    NotHolder(u64),
    InfoRelease(u64),
    Expire(u64),
    EndHidden,
}

/// How one key's sweep ended, and how many configurations it explored.
type PartOutcome = (Result<(), Stop>, u64);

/// Configurations, each with the fewest old hidden grants it used.
type ConfigSet = Vec<(Config, u32)>;

enum Stop {
    Stuck(Counterexample),
    Exhausted(String),
}

struct Sweep<'a> {
    history: &'a [Operation<LockModel>],
    part: &'a [usize],
    kinds: Vec<Kind>,
    states_max: usize,
    explored: u64,
    /// Pending `ok` grants: token -> op.
    grants: BTreeMap<u64, u32>,
    /// Pending `ok` releases: token -> ops.
    releases: HashMap<u64, Vec<u32>, FastBuildHasher>,
    /// Pending observations.
    observations: Vec<u32>,
    /// Tokens whose epoch may end by an available expiry or `info` release.
    endable: HashSet<u64, FastBuildHasher>,
    /// The earliest end of each op's hidden grant (for `info` acquires; `u64::MAX` when it
    /// never ends).
    earliest_end: Vec<u64>,
    /// `info` acquires invoked so far and still young at the last closure, as positions.
    hidden_invoked: Vec<u32>,
    /// How many `info` acquires invoked so far are *old* (their earliest end passed):
    /// moved out of `hidden_invoked` by [`Sweep::closure`], since rule 2 only counts them.
    hidden_old: u32,
    /// The instant of the last closure: the sweep's clock, which never goes back.
    closure_ns: u64,
    /// Live configurations, each with the fewest old hidden grants it used.
    configs: ConfigSet,
}

impl<'a> Sweep<'a> {
    fn new(history: &'a [Operation<LockModel>], part: &'a [usize], states_max: usize) -> Self {
        let kinds = part.iter().map(|&i| kind(&history[i])).collect();
        let mut end_of_row: HashMap<u64, u64> = HashMap::new();
        for &i in part {
            if let LockInput::EndHidden { row } = history[i].input {
                end_of_row.insert(row, history[i].call_ns);
            }
        }
        let earliest_end = part
            .iter()
            .map(|&i| match history[i].input {
                LockInput::Acquire { row, .. } => end_of_row.get(&row).copied().unwrap_or(u64::MAX),
                _ => u64::MAX,
            })
            .collect();
        let start = Config {
            holder: Holder::Free,
            last_token: None,
            linearized: Vec::new(),
            used_young: Vec::new(),
        };
        Sweep {
            history,
            part,
            kinds,
            states_max,
            explored: 0,
            grants: BTreeMap::new(),
            releases: HashMap::default(),
            observations: Vec::new(),
            endable: HashSet::default(),
            earliest_end,
            hidden_invoked: Vec::new(),
            hidden_old: 0,
            closure_ns: 0,
            configs: vec![(start, 0)],
        }
    }

    fn run(&mut self, deadline: Option<Instant>) -> Result<(), Stop> {
        // (time, 0 call / 1 return, position): calls before returns at equal times.
        let mut events: Vec<(u64, u8, u32)> = Vec::with_capacity(self.part.len() * 2);
        for (position, &op) in self.part.iter().enumerate() {
            events.push((self.history[op].call_ns, 0, position as u32));
            if let Some(r) = self.history[op].return_ns {
                events.push((r, 1, position as u32));
            }
        }
        events.sort_unstable();
        for (n, &(_, kind, position)) in events.iter().enumerate() {
            if n % 4096 == 4095 && deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Stop::Exhausted(
                    "lock check reached its time limit".to_string(),
                ));
            }
            if kind == 0 {
                self.call(position);
            } else {
                self.ret(position)?;
            }
        }
        Ok(())
    }

    fn call(&mut self, p: u32) {
        match self.kinds[p as usize] {
            Kind::Grant(t) => {
                self.grants.insert(t, p);
            }
            Kind::Release(t) => self.releases.entry(t).or_default().push(p),
            Kind::Busy | Kind::NotHolder(_) => self.observations.push(p),
            Kind::InfoRelease(t) | Kind::Expire(t) => {
                self.endable.insert(t);
            }
            Kind::HiddenGrant => self.hidden_invoked.push(p),
            // The end of a hidden grant is read from `earliest_end`.
            Kind::EndHidden => {}
        }
    }

    fn ret(&mut self, p: u32) -> Result<(), Stop> {
        let now = self.history[self.part[p as usize]]
            .return_ns
            .unwrap_or(u64::MAX);
        // When every configuration has already linearized `p`, the closure can wait for
        // the next return: every step available now is still available then (pending sets
        // only grow until a return), and `p` needs nothing more.
        let everywhere = self
            .configs
            .iter()
            .all(|(c, _)| c.linearized.binary_search(&p).is_ok());
        let mut closed = if everywhere {
            std::mem::take(&mut self.configs)
        } else {
            self.closure(now)?
        };
        closed.retain_mut(|(config, _)| match config.linearized.binary_search(&p) {
            Ok(at) => {
                config.linearized.remove(at);
                true
            }
            Err(_) => false,
        });
        // Removing `p` can make two configurations equal: keep the fewer hidden grants.
        let mut survivors: ConfigSet = Vec::with_capacity(closed.len());
        for (config, used) in closed {
            match survivors.iter_mut().find(|(c, _)| *c == config) {
                Some((_, u)) => *u = (*u).min(used),
                None => survivors.push((config, used)),
            }
        }
        if survivors.is_empty() {
            return Err(Stop::Stuck(self.counterexample(p)));
        }
        self.configs = survivors;
        match self.kinds[p as usize] {
            Kind::Grant(t) => {
                self.grants.remove(&t);
            }
            Kind::Release(t) => {
                if let Some(ops) = self.releases.get_mut(&t) {
                    ops.retain(|&o| o != p);
                }
            }
            _ => self.observations.retain(|&o| o != p),
        }
        Ok(())
    }

    /// Every configuration reachable from the live ones by legal steps of pending ops,
    /// each with its observations absorbed (rule 1).
    fn closure(&mut self, now: u64) -> Result<ConfigSet, Stop> {
        let mut seen: ConfigSet = Vec::new();
        let mut work: Vec<(Config, u32)> = Vec::new();
        // Acquires whose earliest end has passed stay old (the sweep's clock only moves
        // on): count them once and drop them from the list, so that the successors of a
        // free key scan only the young ones (with many `info` acquires, rescanning them
        // all was quadratic).
        assert!(
            now >= self.closure_ns,
            "the sweep went back in time: closure at {now} after {}",
            self.closure_ns
        );
        self.closure_ns = now;
        let before = self.hidden_invoked.len();
        let earliest_end = &self.earliest_end;
        self.hidden_invoked
            .retain(|&i| earliest_end[i as usize] > now);
        self.hidden_old += (before - self.hidden_invoked.len()) as u32;
        let old_invoked = self.hidden_old;
        for (config, used) in &self.configs {
            let used = *used;
            let mut config = config.clone();
            let mut used_old = used;
            // Rule 2: acquires whose earliest end has passed are only counted.
            let before = config.used_young.len();
            config
                .used_young
                .retain(|&i| self.earliest_end[i as usize] > now);
            used_old += (before - config.used_young.len()) as u32;
            if let Holder::Hidden { earliest_end } = config.holder {
                if earliest_end <= now {
                    config.holder = Holder::Hidden { earliest_end: 0 };
                }
            }
            self.absorb(&mut config);
            work.push((config, used_old));
        }
        while let Some((config, used)) = work.pop() {
            if !keep_fewest(&mut seen, &config, used) {
                continue;
            }
            self.explored += 1;
            if seen.len() > self.states_max {
                return Err(Stop::Exhausted(format!(
                    "lock check reached search_budget_states_max = {} live configurations",
                    self.states_max
                )));
            }
            let from = work.len();
            self.successors(&config, used, now, old_invoked, &mut work);
            for (next, _) in &mut work[from..] {
                self.absorb(next);
            }
        }
        Ok(seen)
    }

    fn successors(
        &self,
        config: &Config,
        used: u32,
        now: u64,
        old_invoked: u32,
        out: &mut ConfigSet,
    ) {
        let with = |holder: Holder, last_token: Option<u64>, add: Option<u32>| {
            let mut linearized = config.linearized.clone();
            if let Some(op) = add {
                let at = linearized.binary_search(&op).unwrap_or_else(|at| at);
                linearized.insert(at, op);
            }
            Config {
                holder,
                last_token,
                linearized,
                used_young: config.used_young.clone(),
            }
        };
        match config.holder {
            Holder::Free => {
                let newer = config.last_token.map_or(0, |t| t.saturating_add(1));
                for (&t, &op) in self.grants.range(newer..) {
                    if config.linearized.binary_search(&op).is_err() {
                        out.push((with(Holder::Token(t), Some(t), Some(op)), used));
                    }
                }
                if old_invoked > used {
                    let hidden = Holder::Hidden { earliest_end: 0 };
                    out.push((with(hidden, config.last_token, None), used + 1));
                }
                for &i in &self.hidden_invoked {
                    let earliest_end = self.earliest_end[i as usize];
                    if earliest_end > now && config.used_young.binary_search(&i).is_err() {
                        let mut next =
                            with(Holder::Hidden { earliest_end }, config.last_token, None);
                        let at = next.used_young.binary_search(&i).unwrap_or_else(|at| at);
                        next.used_young.insert(at, i);
                        out.push((next, used));
                    }
                }
            }
            Holder::Token(t) => {
                for &op in self.releases.get(&t).into_iter().flatten() {
                    if config.linearized.binary_search(&op).is_err() {
                        out.push((with(Holder::Free, config.last_token, Some(op)), used));
                    }
                }
                if self.endable.contains(&t) {
                    out.push((with(Holder::Free, config.last_token, None), used));
                }
            }
            Holder::Hidden { earliest_end } => {
                if earliest_end <= now {
                    out.push((with(Holder::Free, config.last_token, None), used));
                }
            }
        }
    }

    /// Linearizes every pending observation that the configuration's state satisfies.
    fn absorb(&self, config: &mut Config) {
        for &op in &self.observations {
            let satisfied = match self.kinds[op as usize] {
                Kind::Busy => config.holder != Holder::Free,
                Kind::NotHolder(t) => config.holder != Holder::Token(t),
                _ => false,
            };
            if satisfied {
                if let Err(at) = config.linearized.binary_search(&op) {
                    config.linearized.insert(at, op);
                }
            }
        }
    }

    fn counterexample(&self, p: u32) -> Counterexample {
        let mut states: Vec<String> = self
            .configs
            .iter()
            .map(|(config, _)| self.describe(config))
            .collect();
        states.sort();
        states.dedup();
        Counterexample {
            part: self.part.to_vec(),
            linearized: Vec::new(),
            state: states.join(" or "),
            stuck: Some(self.part[p as usize]),
        }
    }

    /// Who holds the key in a configuration, in words; a young hidden grant is named by
    /// its acquire.
    fn describe(&self, config: &Config) -> String {
        match config.holder {
            Holder::Free => match config.last_token {
                Some(t) => format!("free (last token {t})"),
                None => "free (no token granted yet)".to_string(),
            },
            Holder::Token(t) => format!("held under token {t}"),
            Holder::Hidden { earliest_end } => {
                let acquire = config
                    .used_young
                    .iter()
                    .find(|&&i| self.earliest_end[i as usize] == earliest_end)
                    .map(|&i| &self.history[self.part[i as usize]]);
                match acquire {
                    Some(op) => format!(
                        "held by an unseen grant of process {}'s unanswered acquire ({}), which cannot end before {}",
                        op.process.map_or("?".to_string(), |p| p.to_string()),
                        op.rows,
                        crate::report::fmt_ns(earliest_end)
                    ),
                    None => "held by an unseen grant of an unanswered (info) acquire".to_string(),
                }
            }
        }
    }
}

/// Adds `config` with `used` old hidden grants, or lowers the count of an equal one;
/// returns whether the set changed. The sets are tiny (tokens leave few choices), so a
/// linear scan beats hashing.
fn keep_fewest(configs: &mut ConfigSet, config: &Config, used: u32) -> bool {
    match configs.iter_mut().find(|(c, _)| c == config) {
        Some((_, u)) if *u <= used => false,
        Some((_, u)) => {
            *u = used;
            true
        }
        None => {
            configs.push((config.clone(), used));
            true
        }
    }
}

fn kind(op: &Operation<LockModel>) -> Kind {
    match (&op.input, &op.output) {
        (LockInput::Acquire { .. }, LockOutput::Granted { token }) => Kind::Grant(*token),
        (LockInput::Acquire { .. }, LockOutput::Busy) => Kind::Busy,
        (LockInput::Acquire { .. }, _) => Kind::HiddenGrant,
        (LockInput::Release { token }, LockOutput::Released) => Kind::Release(*token),
        (LockInput::Release { token }, LockOutput::NotHolder) => Kind::NotHolder(*token),
        (LockInput::Release { token }, _) => Kind::InfoRelease(*token),
        (LockInput::Expire { token }, _) => Kind::Expire(*token),
        (LockInput::EndHidden { .. }, _) => Kind::EndHidden,
    }
}

/// Describes a lock operation for reports (the same words as [`LockModel`]'s).
pub fn describe(op: &Operation<LockModel>) -> String {
    LockModel.describe_operation(&op.input, &op.output)
}
