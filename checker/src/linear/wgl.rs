//! The generic linearizability search: Wing & Gong's, with Lowe's memoisation, as in
//! Porcupine's `checker.go`.
//!
//! # Shape
//!
//! The part's operations become call and return entries, sorted by time (calls before
//! returns at equal times: intervals are closed) and kept in a doubly linked list. The
//! search walks the list from its head:
//!
//! - at a call entry it tries to linearize that operation now: if the model accepts the
//!   step and the configuration `(linearized set, state)` is new, the operation is *lifted*
//!   out of the list (its call and return entries both), the old state goes on the stack,
//!   and the walk restarts at the head;
//! - at a return entry it has reached an operation that should already have taken effect
//!   but has not: it pops the last lifted operation, puts it back, and tries the entry after
//!   that operation's call.
//!
//! # Invariants
//!
//! - Every entry between the head and the cursor is a call entry: the cursor only moves
//!   forward over calls, and a restart goes back to the head.
//! - `linearized` is exactly the set of operations on the stack; `state` is the model's
//!   state after them, in stack order.
//! - An operation can be lifted only when no return entry precedes its call entry in the
//!   list, that is, when no unlinearized operation returned before it was called: that is
//!   real-time order.
//! - Optional operations (no return) have only a call entry, so nothing ever forces them;
//!   the search succeeds when no return entry is left.
//! - Each `(linearized, state)` pair is explored once (the memo); its size is bounded by
//!   the states budget.

use std::collections::HashSet;
use std::time::Instant;

use super::bitset::{Bitset, FastBuildHasher};
use super::{Counterexample, Model, Operation};

/// How a search of one part ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SearchResult {
    /// A legal order exists.
    Linearizable,
    /// No legal order exists.
    NotLinearizable(Counterexample),
    /// The budget ran out before the search could decide; the reason names the bound.
    Exhausted(String),
}

/// A search's result and its cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchOutcome {
    /// How it ended.
    pub result: SearchResult,
    /// The configurations stored in the memo.
    pub states: usize,
}

/// No entry: the end of the list (and the head sentinel's `prev`).
const NIL: usize = usize::MAX;
/// The head sentinel is entry 0; real entries are 1..
const HEAD: usize = 0;
/// How many steps between two looks at the clock.
const DEADLINE_CHECK_STEPS: u64 = 4096;

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The operation's position in the part.
    op: usize,
    /// For a call entry: its return entry, if the operation returned.
    matching_return: Option<usize>,
    is_call: bool,
}

/// The doubly linked list of entries, with O(1) lift and unlift (dancing links).
struct Entries {
    entries: Vec<Entry>,
    next: Vec<usize>,
    prev: Vec<usize>,
}

impl Entries {
    fn build<M: Model>(history: &[Operation<M>], part: &[usize]) -> Entries {
        // (time, 0 for a call / 1 for a return, position in part): calls first on ties.
        let mut keyed: Vec<(u64, u8, usize)> = Vec::with_capacity(part.len() * 2);
        for (position, &op) in part.iter().enumerate() {
            keyed.push((history[op].call_ns, 0, position));
            if let Some(r) = history[op].return_ns {
                keyed.push((r, 1, position));
            }
        }
        keyed.sort_unstable();
        let mut entries = vec![Entry {
            op: NIL,
            matching_return: None,
            is_call: false,
        }];
        let mut call_entry = vec![NIL; part.len()];
        for &(_, kind, position) in &keyed {
            let index = entries.len();
            if kind == 0 {
                call_entry[position] = index;
            } else {
                entries[call_entry[position]].matching_return = Some(index);
            }
            entries.push(Entry {
                op: position,
                matching_return: None,
                is_call: kind == 0,
            });
        }
        let len = entries.len();
        let next = (0..len)
            .map(|i| if i + 1 < len { i + 1 } else { NIL })
            .collect();
        let prev = (0..len).map(|i| if i == 0 { NIL } else { i - 1 }).collect();
        Entries {
            entries,
            next,
            prev,
        }
    }

    fn unlink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = n;
        if n != NIL {
            self.prev[n] = p;
        }
    }

    fn relink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = e;
        if n != NIL {
            self.prev[n] = e;
        }
    }

    /// Removes a call entry and its return entry.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        if let Some(r) = self.entries[call].matching_return {
            self.unlink(r);
        }
    }

    /// Undoes [`Entries::lift`] (in the reverse order, as dancing links require).
    fn unlift(&mut self, call: usize) {
        if let Some(r) = self.entries[call].matching_return {
            self.relink(r);
        }
        self.relink(call);
    }
}

/// Searches one part (`part` holds indexes into `history`) for a legal order.
///
/// `states_max` bounds the memo; `deadline` the wall clock. Either bound ends the search
/// with [`SearchResult::Exhausted`].
pub fn search<M: Model>(
    model: &M,
    history: &[Operation<M>],
    part: &[usize],
    states_max: usize,
    deadline: Option<Instant>,
) -> SearchOutcome {
    let mut search = Search::new(model, history, part);
    loop {
        if let Some(outcome) = search.advance(DEADLINE_CHECK_STEPS, states_max) {
            return outcome;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return search.out_of_time();
        }
    }
}

/// A search that can be advanced a bounded number of steps at a time, so that the parts
/// of a partition can take turns and the first part found not linearizable ends the
/// check (as Porcupine's parallel partitions do, but deterministically).
pub struct Search<'a, M: Model> {
    model: &'a M,
    history: &'a [Operation<M>],
    part: &'a [usize],
    list: Entries,
    returns_left: usize,
    state: M::State,
    linearized: Bitset,
    memo: HashSet<(Bitset, M::State), FastBuildHasher>,
    stack: Vec<(usize, M::State)>,
    deepest: (Vec<usize>, M::State),
    cursor: usize,
}

impl<'a, M: Model> Search<'a, M> {
    /// A search of one part, not started.
    pub fn new(model: &'a M, history: &'a [Operation<M>], part: &'a [usize]) -> Self {
        let list = Entries::build(history, part);
        let returns_left = part
            .iter()
            .filter(|&&op| !history[op].is_optional())
            .count();
        let state = model.init();
        let cursor = list.next[HEAD];
        Search {
            model,
            history,
            part,
            list,
            returns_left,
            state: state.clone(),
            linearized: Bitset::new(part.len()),
            memo: HashSet::default(),
            stack: Vec::new(),
            deepest: (Vec::new(), state),
            cursor,
        }
    }

    /// The configurations in the memo so far.
    pub fn states(&self) -> usize {
        self.memo.len()
    }

    /// The outcome of a search stopped by the clock.
    pub fn out_of_time(&self) -> SearchOutcome {
        let reason = format!(
            "linearizability search reached its time limit after {} configurations",
            self.memo.len()
        );
        exhausted(reason, self.memo.len())
    }

    /// Runs at most `steps` steps; `Some` when the search has ended, `None` when it needs
    /// more. `states_max` bounds this search's memo.
    pub fn advance(&mut self, steps: u64, states_max: usize) -> Option<SearchOutcome> {
        for _ in 0..steps {
            if self.returns_left == 0 {
                return Some(SearchOutcome {
                    result: SearchResult::Linearizable,
                    states: self.memo.len(),
                });
            }
            let at_call = self.cursor != NIL && self.list.entries[self.cursor].is_call;
            if at_call {
                if let Some(outcome) = self.try_lift(states_max) {
                    return Some(outcome);
                }
                continue;
            }
            // A return entry (or the end): the operation returning here cannot be placed
            // after what is on the stack. Backtrack.
            let Some((call, previous)) = self.stack.pop() else {
                let counterexample =
                    counterexample(self.model, self.history, self.part, &self.deepest);
                return Some(SearchOutcome {
                    result: SearchResult::NotLinearizable(counterexample),
                    states: self.memo.len(),
                });
            };
            self.state = previous;
            self.linearized.remove(self.list.entries[call].op);
            self.list.unlift(call);
            if self.list.entries[call].matching_return.is_some() {
                self.returns_left += 1;
            }
            self.cursor = self.list.next[call];
        }
        None
    }

    /// At a call entry: linearizes its operation if the step is legal and the
    /// configuration is new, else moves the cursor on. `Some` when the memo outgrew
    /// `states_max`.
    fn try_lift(&mut self, states_max: usize) -> Option<SearchOutcome> {
        let entry = self.list.entries[self.cursor];
        let op = &self.history[self.part[entry.op]];
        if let Some(after) = self.model.step(&self.state, &op.input, &op.output) {
            self.linearized.insert(entry.op);
            // Look the configuration up before cloning anything: most are already known.
            let key = (std::mem::take(&mut self.linearized), after);
            let known = self.memo.contains(&key);
            let (linearized, after) = key;
            self.linearized = linearized;
            if !known {
                self.memo.insert((self.linearized.clone(), after.clone()));
                if self.memo.len() > states_max {
                    let reason = format!(
                        "linearizability search reached search_budget_states_max = {states_max}"
                    );
                    return Some(exhausted(reason, self.memo.len()));
                }
                self.stack
                    .push((self.cursor, std::mem::replace(&mut self.state, after)));
                self.list.lift(self.cursor);
                if entry.matching_return.is_some() {
                    self.returns_left -= 1;
                }
                if self.stack.len() > self.deepest.0.len() {
                    let prefix = self.stack.iter().map(|(e, _)| self.list.entries[*e].op);
                    self.deepest = (prefix.collect(), self.state.clone());
                }
                self.cursor = self.list.next[HEAD];
                return None;
            }
            self.linearized.remove(entry.op);
        }
        self.cursor = self.list.next[self.cursor];
        None
    }
}

fn exhausted(reason: String, states: usize) -> SearchOutcome {
    SearchOutcome {
        result: SearchResult::Exhausted(reason),
        states,
    }
}

/// The counterexample of a failed search: the deepest legal prefix found, and the
/// operation that returned earliest among those it left out (the one that could not be
/// placed next).
fn counterexample<M: Model>(
    model: &M,
    history: &[Operation<M>],
    part: &[usize],
    deepest: &(Vec<usize>, M::State),
) -> Counterexample {
    let (prefix, state) = deepest;
    let mut in_prefix = vec![false; part.len()];
    for &position in prefix {
        in_prefix[position] = true;
    }
    let stuck = (0..part.len())
        .filter(|&p| !in_prefix[p])
        .filter_map(|p| history[part[p]].return_ns.map(|r| (r, p)))
        .min()
        .map(|(_, p)| part[p]);
    Counterexample {
        part: part.to_vec(),
        linearized: prefix.iter().map(|&p| part[p]).collect(),
        state: model.describe_state(state),
        stuck,
    }
}
