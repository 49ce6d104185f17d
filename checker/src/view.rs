//! [`OpView`]: what the lock checks read of one operation.
//!
//! The per-key lock checks (the lock spec's operations for the sweep, lease safety,
//! fencing) are written once, against this trait, and run on two representations: the
//! paired [`history::Operation`] (every report, every history) and the fixed-size record
//! of [`crate::compact`] (the streaming fast path for long lock histories). One body of
//! code decides both, so the fast path cannot drift from the whole-history checks; the
//! explanations of failures are written from [`history::Operation`]s only (the fast path
//! never reports a failure: it falls back).

use history::{ErrorWord, OpName, OpType, Operation};

use crate::linear::lock_model::acquire_lease_ms;

/// What the lock checks read of one client operation (see the module doc). The provided
/// methods derive the interval rules of [`history::Operation`] from the required ones, so
/// both representations read them the same way.
pub trait OpView {
    /// The `f` cell.
    fn f(&self) -> &str;
    /// The client process.
    fn process(&self) -> u64;
    /// The invoke row's index.
    fn invoke_index(&self) -> u64;
    /// The call time: the invoke's `time_ns`.
    fn call_ns(&self) -> u64;
    /// The invoke's token (release: the token released; write: the token carried).
    fn invoke_token(&self) -> Option<u64>;
    /// The lease of an acquire's invoke value ([`acquire_lease_ms`]): `Ok(None)` when
    /// the value is empty, `Err` with the reason when it is not a lease.
    fn lease_ms(&self) -> Result<Option<u64>, String>;
    /// The completion's type, `None` when there is no completion.
    fn op_type(&self) -> Option<OpType>;
    /// The completion row's index.
    fn completion_index(&self) -> Option<u64>;
    /// The completion row's time (of any type, `info` included).
    fn completion_ns(&self) -> Option<u64>;
    /// The completion's token (acquire ok: the token granted).
    fn completion_token(&self) -> Option<u64>;
    /// Whether the completion's error cell is `word`.
    fn error_is(&self, word: ErrorWord) -> bool;

    /// Whether the `f` cell is `name`.
    fn f_is(&self, name: OpName) -> bool {
        self.f() == name
    }

    /// The `f` cell as a word of the vocabulary, `None` when it is none.
    fn op_name(&self) -> Option<OpName> {
        OpName::parse(self.f())
    }

    /// The return time; `None` means `+infinity` (an `info` or never-completed op), as
    /// [`Operation::return_ns`].
    fn return_ns(&self) -> Option<u64> {
        match self.op_type() {
            Some(OpType::Info) | None => None,
            Some(_) => self.completion_ns(),
        }
    }

    /// The op certainly took effect (`ok`).
    fn is_ok(&self) -> bool {
        self.op_type() == Some(OpType::Ok)
    }

    /// The outcome is unknown: `info`, or no completion at all.
    fn is_indeterminate(&self) -> bool {
        self.return_ns().is_none()
    }
}

impl OpView for Operation {
    fn f(&self) -> &str {
        &self.f
    }

    fn process(&self) -> u64 {
        self.process
    }

    fn invoke_index(&self) -> u64 {
        self.invoke.index
    }

    fn call_ns(&self) -> u64 {
        self.invoke.time_ns
    }

    fn invoke_token(&self) -> Option<u64> {
        self.invoke.token
    }

    fn lease_ms(&self) -> Result<Option<u64>, String> {
        acquire_lease_ms(&self.invoke.value)
    }

    fn op_type(&self) -> Option<OpType> {
        self.completion.as_ref().map(|c| c.op_type)
    }

    fn completion_index(&self) -> Option<u64> {
        self.completion.as_ref().map(|c| c.index)
    }

    fn completion_ns(&self) -> Option<u64> {
        self.completion.as_ref().map(|c| c.time_ns)
    }

    fn completion_token(&self) -> Option<u64> {
        self.completion.as_ref().and_then(|c| c.token)
    }

    fn error_is(&self, word: ErrorWord) -> bool {
        self.completion
            .as_ref()
            .is_some_and(|c| c.error == word.as_str())
    }
}
