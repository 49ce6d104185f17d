//! The sequential specification a history is checked against: [`Model`].
//!
//! A model is the object as it would behave with no concurrency at all: a state, and a
//! pure function that says whether one operation, with the output the history recorded,
//! is a legal next step from that state (and what the state becomes). Linearizability asks
//! whether the recorded operations can be put in one order that respects real time (an
//! operation that returned before another was called comes first) and in which every step
//! is legal. The search ([`super::wgl`]) only ever calls these functions, so a new model
//! is all it takes to check a new kind of object.
//!
//! The trait follows Porcupine's `Model` (`model.go`), Knossos' `Model/step` and
//! stateright's `SequentialSpec` (STYLE practice 8).

use std::fmt::Debug;
use std::hash::Hash;

use super::Operation;

/// A sequential specification: initial state, step function, and (optionally) a
/// partition of the history into independent parts and descriptions for reports.
///
/// # Contract
///
/// - `step` is a **pure** function of its arguments: the search calls it many times, in
///   any order, on states it has cloned, and caches the result by `(linearized set,
///   state)`. Any hidden state (a clock, a counter, a random choice) makes the verdict
///   wrong.
/// - `State` equality must mean "behaves the same from here on": the memo treats two equal
///   states as interchangeable. A state that records more than it needs (say, the op that
///   last wrote) is still correct but makes the cache less effective.
/// - `step` returns `None` when the output is impossible in that state (the step is not
///   legal). It must not panic on any input the model's builder produces.
/// - An operation whose outcome is unknown (`info`) reaches `step` with whatever output
///   the builder chose for "unknown"; the model decides what such a step may do. The
///   search never forces such an op to be linearized (see [`Operation`]).
pub trait Model {
    /// The object's state. `Clone` because the search keeps states on its stack; `Eq +
    /// Hash` for the memo.
    type State: Clone + Eq + Hash + Debug;
    /// What an operation asks of the object (its function and arguments).
    type Input: Clone + Debug;
    /// What the object answered, as recorded in the history.
    type Output: Clone + Debug;

    /// The state before any operation.
    fn init(&self) -> Self::State;

    /// Whether `input` answered with `output` is a legal step from `state`: `Some(next
    /// state)` if it is, `None` if it is not.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: &Self::Output,
    ) -> Option<Self::State>;

    /// Splits a history into parts that can be checked on their own (P-compositionality,
    /// Horn & Kroening 2015): the history is linearizable iff every part is. Each part is
    /// a list of indexes into `history`; every index must appear in exactly one part. The
    /// default keeps the whole history as one part. Models of per-key objects partition by
    /// key, which is what makes long histories cheap to check.
    fn partition(&self, history: &[Operation<Self>]) -> Vec<Vec<usize>>
    where
        Self: Sized,
    {
        vec![(0..history.len()).collect()]
    }

    /// A short human description of an operation, for reports (`acquire a -> ok token 7`).
    fn describe_operation(&self, input: &Self::Input, output: &Self::Output) -> String;

    /// A short human description of a state, for reports (`held under token 7`).
    fn describe_state(&self, state: &Self::State) -> String;
}
