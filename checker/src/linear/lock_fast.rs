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

use super::lock_model::{LockInput, LockModel, LockOutput, partition_by_key};
use super::{Budget, Counterexample, LinearReport, Model, Operation};
use crate::verdict::Verdict;

/// Checks a lock history (built by [`super::lock_model::lock_operations`]) key by key.
pub fn check(history: &[Operation<LockModel>], budget: Budget) -> LinearReport {
    let deadline = budget.deadline();
    let mut report = LinearReport {
        verdict: Verdict::Valid,
        counterexample: None,
        states_explored: 0,
    };
    for part in partition_by_key(history) {
        let mut sweep = Sweep::new(history, &part, budget.search_budget_states_max);
        match sweep.run(deadline) {
            Ok(()) => {}
            Err(Stop::Exhausted(reason)) => {
                report.verdict = report.verdict.merge(Verdict::unknown(reason));
            }
            Err(Stop::Stuck(counterexample)) => {
                report.states_explored += sweep.explored;
                report.verdict = Verdict::Invalid;
                report.counterexample = Some(counterexample);
                return report;
            }
        }
        report.states_explored += sweep.explored;
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
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Config {
    holder: Holder,
    last_token: Option<u64>,
    /// Pending (not yet returned) non-optional ops that have taken effect, sorted.
    linearized: Vec<u32>,
    /// The young `info` acquires (earliest end still ahead) used as hidden grants, sorted.
    used_young: Vec<u32>,
}

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
    releases: HashMap<u64, Vec<u32>>,
    /// Pending observations.
    observations: Vec<u32>,
    /// Tokens whose epoch may end by an available expiry or `info` release.
    endable: HashSet<u64>,
    /// The earliest end of each op's hidden grant (for `info` acquires; `u64::MAX` when it
    /// never ends).
    earliest_end: Vec<u64>,
    /// `info` acquires invoked so far, as positions.
    hidden_invoked: Vec<u32>,
    /// Live configurations, each with the fewest old hidden grants it used.
    configs: HashMap<Config, u32>,
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
            releases: HashMap::new(),
            observations: Vec::new(),
            endable: HashSet::new(),
            earliest_end,
            hidden_invoked: Vec::new(),
            configs: HashMap::from([(start, 0)]),
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
        let closed = self.closure(now)?;
        let mut survivors: HashMap<Config, u32> = HashMap::new();
        for (mut config, used) in closed {
            if let Ok(at) = config.linearized.binary_search(&p) {
                config.linearized.remove(at);
                keep_fewest(&mut survivors, config, used);
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
    fn closure(&mut self, now: u64) -> Result<HashMap<Config, u32>, Stop> {
        let mut seen: HashMap<Config, u32> = HashMap::new();
        let mut work: Vec<(Config, u32)> = Vec::new();
        let old_invoked = self
            .hidden_invoked
            .iter()
            .filter(|&&i| self.earliest_end[i as usize] <= now)
            .count() as u32;
        for (config, &used) in &self.configs {
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
            if seen.get(&config).is_some_and(|&u| u <= used) {
                continue;
            }
            seen.insert(config.clone(), used);
            self.explored += 1;
            if seen.len() > self.states_max {
                return Err(Stop::Exhausted(format!(
                    "lock check reached search_budget_states_max = {} live configurations",
                    self.states_max
                )));
            }
            for (mut next, next_used) in self.successors(&config, used, now, old_invoked) {
                self.absorb(&mut next);
                work.push((next, next_used));
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
    ) -> Vec<(Config, u32)> {
        let mut out = Vec::new();
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
        out
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
        let mut holders: Vec<Holder> = self.configs.keys().map(|c| c.holder).collect();
        holders.sort_by_key(|h| format!("{h:?}"));
        holders.dedup();
        let states: Vec<String> = holders
            .iter()
            .map(|h| match h {
                Holder::Free => "free".to_string(),
                Holder::Token(t) => format!("held under token {t}"),
                Holder::Hidden { .. } => "held by an unseen grant of an info acquire".to_string(),
            })
            .collect();
        Counterexample {
            part: self.part.to_vec(),
            linearized: Vec::new(),
            state: states.join(" or "),
            stuck: Some(self.part[p as usize]),
        }
    }
}

fn keep_fewest(configs: &mut HashMap<Config, u32>, config: Config, used: u32) {
    let slot = configs.entry(config).or_insert(used);
    *slot = (*slot).min(used);
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
