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

use super::bitset::Bitset;
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
    let mut list = Entries::build(history, part);
    let op_of = |position: usize| &history[part[position]];
    let mut returns_left = part
        .iter()
        .filter(|&&op| !history[op].is_optional())
        .count();
    let mut state = model.init();
    let mut linearized = Bitset::new(part.len());
    let mut memo: HashSet<(Bitset, M::State)> = HashSet::new();
    let mut stack: Vec<(usize, M::State)> = Vec::new();
    let mut deepest: (Vec<usize>, M::State) = (Vec::new(), state.clone());
    let mut cursor = list.next[HEAD];
    let mut steps: u64 = 0;
    loop {
        if returns_left == 0 {
            return SearchOutcome {
                result: SearchResult::Linearizable,
                states: memo.len(),
            };
        }
        steps += 1;
        if steps % DEADLINE_CHECK_STEPS == 0 && deadline.is_some_and(|d| Instant::now() >= d) {
            let reason = format!(
                "linearizability search reached its time limit after {} configurations",
                memo.len()
            );
            return exhausted(reason, memo.len());
        }
        let at_call = cursor != NIL && list.entries[cursor].is_call;
        if at_call {
            let entry = list.entries[cursor];
            let op = op_of(entry.op);
            if let Some(after) = model.step(&state, &op.input, &op.output) {
                linearized.insert(entry.op);
                if memo.insert((linearized.clone(), after.clone())) {
                    if memo.len() > states_max {
                        let reason = format!(
                            "linearizability search reached search_budget_states_max = {states_max}"
                        );
                        return exhausted(reason, memo.len());
                    }
                    stack.push((cursor, std::mem::replace(&mut state, after)));
                    list.lift(cursor);
                    if entry.matching_return.is_some() {
                        returns_left -= 1;
                    }
                    if stack.len() > deepest.0.len() {
                        deepest = (
                            stack.iter().map(|(e, _)| list.entries[*e].op).collect(),
                            state.clone(),
                        );
                    }
                    cursor = list.next[HEAD];
                    continue;
                }
                linearized.remove(entry.op);
            }
            cursor = list.next[cursor];
            continue;
        }
        // A return entry (or the end): the operation returning here cannot be placed
        // after what is on the stack. Backtrack.
        let Some((call, previous)) = stack.pop() else {
            let counterexample = counterexample(model, history, part, &deepest);
            return SearchOutcome {
                result: SearchResult::NotLinearizable(counterexample),
                states: memo.len(),
            };
        };
        state = previous;
        linearized.remove(list.entries[call].op);
        list.unlift(call);
        if list.entries[call].matching_return.is_some() {
            returns_left += 1;
        }
        cursor = list.next[call];
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
