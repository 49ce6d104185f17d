//! The node's armed timers, indexed twice: by timer (arm, re-arm, cancel, look up) and by
//! deadline (the next deadline, the timers due), so that a step costs O(log n) in the number
//! of timers, not O(n).
//!
//! Every held lock has a lease timer on every node. With the timers in one map by timer,
//! the driver's `next_deadline` (every turn of the core loop) took the minimum over all of
//! them, and every tick filtered all of them for the due ones: with 100,000 held keys,
//! `locksmith bench --soak` profiled 40 % of a node's core thread in those two scans, while
//! it registered sessions at about 1,500 a second (2026-12-05).
//!
//! Equality and hashing read the map by timer alone: the deadline index is a function of it
//! (the model hashes nodes as states, and two nodes with the same timers are the same).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use super::Timer;

/// Armed timers and their deadlines on the local clock.
#[derive(Clone, Debug, Default)]
pub(crate) struct Timers {
    by_timer: BTreeMap<Timer, u64>,
    /// The same timers ordered by (deadline, timer).
    by_deadline: BTreeSet<(u64, Timer)>,
}

impl PartialEq for Timers {
    fn eq(&self, other: &Self) -> bool {
        self.by_timer == other.by_timer
    }
}

impl Eq for Timers {}

impl Hash for Timers {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.by_timer.hash(state);
    }
}

impl FromIterator<(Timer, u64)> for Timers {
    fn from_iter<I: IntoIterator<Item = (Timer, u64)>>(iter: I) -> Self {
        let mut timers = Timers::default();
        for (timer, at_ms) in iter {
            timers.insert(timer, at_ms);
        }
        timers
    }
}

impl Timers {
    /// Arms `timer` at `at_ms`, replacing its earlier deadline if it was armed.
    pub(crate) fn insert(&mut self, timer: Timer, at_ms: u64) {
        if let Some(old) = self.by_timer.insert(timer.clone(), at_ms) {
            self.by_deadline.remove(&(old, timer.clone()));
        }
        self.by_deadline.insert((at_ms, timer));
    }

    /// Disarms `timer`; returns its deadline if it was armed.
    /// Whether the deadline index holds exactly one entry per timer (a stale deadline left
    /// behind by a re-armed timer would fire it again and grow the index for good).
    pub(crate) fn index_agrees(&self) -> bool {
        self.by_timer.len() == self.by_deadline.len()
    }

    pub(crate) fn remove(&mut self, timer: &Timer) -> Option<u64> {
        let at_ms = self.by_timer.remove(timer)?;
        self.by_deadline.remove(&(at_ms, timer.clone()));
        Some(at_ms)
    }

    /// The deadline of `timer`, if armed.
    pub(crate) fn get(&self, timer: &Timer) -> Option<u64> {
        self.by_timer.get(timer).copied()
    }

    /// Whether `timer` is armed.
    pub(crate) fn contains_key(&self, timer: &Timer) -> bool {
        self.by_timer.contains_key(timer)
    }

    /// The armed timers, in timer order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &Timer> {
        self.by_timer.keys()
    }

    /// The armed timers with their deadlines, in timer order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Timer, u64)> {
        self.by_timer.iter().map(|(timer, at_ms)| (timer, *at_ms))
    }

    /// The earliest deadline.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.by_deadline.first().map(|(at_ms, _)| *at_ms)
    }

    /// The timers due at `now_ms` (deadline at or before it), earliest first, ties in timer
    /// order; a copy, so that firing one may arm or cancel others.
    pub(crate) fn due(&self, now_ms: u64) -> Vec<(u64, Timer)> {
        self.by_deadline
            .iter()
            .take_while(|(at_ms, _)| *at_ms <= now_ms)
            .cloned()
            .collect()
    }

    /// Moves every deadline by `shift` (a rebased clock).
    pub(crate) fn shift_all(&mut self, shift: impl Fn(u64) -> u64) {
        let by_timer = std::mem::take(&mut self.by_timer);
        *self = by_timer
            .into_iter()
            .map(|(timer, at_ms)| (timer, shift(at_ms)))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(n: u64) -> Timer {
        Timer::Lease {
            key: format!("k{n}"),
            token: n,
        }
    }

    /// The dumb oracle: the deadline of every armed timer in one map, scanned whole.
    fn oracle_due(map: &BTreeMap<Timer, u64>, now_ms: u64) -> Vec<(u64, Timer)> {
        let mut due: Vec<(u64, Timer)> = map
            .iter()
            .filter(|(_, at)| **at <= now_ms)
            .map(|(t, at)| (*at, t.clone()))
            .collect();
        due.sort();
        due
    }

    #[test]
    fn the_deadline_index_agrees_with_a_scan_of_every_timer() {
        // STYLE 9: a fast path agrees with a dumb oracle, on seeded random arm, re-arm,
        // cancel and shift sequences (the seed is printed on failure).
        for seed in 0..20u64 {
            let mut rng = seed;
            let mut next = |bound: u64| crate::rng::splitmix64(&mut rng) % bound;
            let mut timers = Timers::default();
            let mut oracle = BTreeMap::new();
            for _ in 0..500 {
                let timer = match next(5) {
                    0 => Timer::Election,
                    1 => Timer::Heartbeat,
                    _ => lease(next(40)),
                };
                match next(4) {
                    0 => assert_eq!(timers.remove(&timer), oracle.remove(&timer), "seed {seed}"),
                    3 => {
                        let by = next(50);
                        timers.shift_all(|at| at + by);
                        oracle.values_mut().for_each(|at| *at += by);
                    }
                    _ => {
                        let at = next(1000);
                        timers.insert(timer.clone(), at);
                        oracle.insert(timer.clone(), at);
                    }
                }
                assert_eq!(
                    timers.get(&timer),
                    oracle.get(&timer).copied(),
                    "seed {seed}"
                );
                assert_eq!(
                    timers.contains_key(&timer),
                    oracle.contains_key(&timer),
                    "seed {seed}"
                );
                let now = next(1000);
                assert_eq!(timers.due(now), oracle_due(&oracle, now), "seed {seed}");
                assert_eq!(
                    timers.next_deadline(),
                    oracle.values().min().copied(),
                    "seed {seed}"
                );
                assert_eq!(timers.by_deadline.len(), oracle.len(), "seed {seed}");
                let from_map: Timers = oracle.iter().map(|(t, at)| (t.clone(), *at)).collect();
                assert_eq!(timers, from_map, "seed {seed}");
            }
        }
    }

    fn hash_of(timers: &Timers) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        timers.hash(&mut hasher);
        hasher.finish()
    }

    #[test]
    fn timers_that_differ_in_one_deadline_are_different_states() {
        // The module doc: the model hashes nodes as states, so equality and hashing must read
        // every armed timer and its deadline; two nodes whose only difference is when a lease
        // runs out are two states, and a check that merged them would explore one only.
        let armed: Timers = [(Timer::Election, 300), (lease(1), 700)]
            .into_iter()
            .collect();
        let same: Timers = [(lease(1), 700), (Timer::Election, 300)]
            .into_iter()
            .collect();
        let later: Timers = [(Timer::Election, 300), (lease(1), 701)]
            .into_iter()
            .collect();

        assert_eq!(armed, same);
        assert_eq!(hash_of(&armed), hash_of(&same));
        assert_ne!(armed, later);
        assert_ne!(hash_of(&armed), hash_of(&later));
    }

    #[test]
    fn the_index_check_sees_a_deadline_left_behind() {
        // The third campaign's mistake in `insert` (a re-armed timer's old deadline left in
        // the index) is caught by the core's invariant check through `index_agrees` alone.
        let mut timers = Timers::default();
        timers.insert(Timer::Election, 300);
        timers.insert(Timer::Election, 450);
        assert!(timers.index_agrees());

        timers.by_deadline.insert((300, Timer::Election));

        assert!(!timers.index_agrees());
    }
}
