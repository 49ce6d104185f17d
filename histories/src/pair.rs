//! Pairing invokes with their completions: [`Operation`], [`pair`].
//!
//! A history is a list of events; a checker wants operations, each an interval of time
//! with an input and (maybe) an output. [`pair`] turns one into the other, checking the
//! process discipline of schema v1 on the way (the same rules the CSV reader enforces):
//!
//! - indices are 0, 1, 2, ... with no gaps, and `time_ns` never decreases;
//! - a client process has at most one open invoke; an `ok`/`fail`/`info` row completes it
//!   and repeats its `f` and `key`;
//! - a process whose op ended `info` never invokes again;
//! - nemesis rows have type `info`. They are faults, not operations: [`pair_with_faults`]
//!   hands them back apart, [`pair`] leaves them out.

use std::collections::HashMap;

use crate::error::{PairError, Violation};
use crate::hash::FastBuildHasher;
use crate::op::{Op, OpType, Process};
use crate::text::{Interner, Text};

/// The invoke half of an [`Operation`]: when it started and what it carried.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Invocation {
    /// The invoke row's index.
    pub index: u64,
    /// The invoke row's time: the operation's call time.
    pub time_ns: u64,
    /// The invoke's value (acquire: lease_ms; write: the value; cas: `OLD NEW`; ...).
    pub value: Text,
    /// The invoke's token (release: the token released; write: the token carried).
    pub token: Option<u64>,
    /// The invoke's node cell.
    pub node: Text,
    /// The invoke's error cell (normally empty).
    pub error: Text,
}

/// The completion half of an [`Operation`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Completion {
    /// `Ok`, `Fail` or `Info` (never `Invoke`).
    pub op_type: OpType,
    /// The completion row's index.
    pub index: u64,
    /// The completion row's time.
    pub time_ns: u64,
    /// The completion's value (read ok: the value read; ...).
    pub value: Text,
    /// The completion's token (acquire ok: the token granted).
    pub token: Option<u64>,
    /// The node that answered, when known.
    pub node: Text,
    /// On fail or info: why.
    pub error: Text,
}

/// One client operation: an invoke and its completion, if any.
///
/// # The interval
///
/// An operation occupies the **closed** interval `[call_ns, return_ns]` of the history's
/// clock: it may take effect at any instant `t` with `call_ns <= t <= return_ns`. Two
/// operations are ordered in real time (A before B) only when `A.return_ns < B.call_ns`;
/// equal times are concurrent. Closed intervals are the cautious choice with a clock of
/// finite resolution: two events recorded at the same nanosecond may have happened in
/// either order.
///
/// # `info` and ops that never completed
///
/// An op whose completion is `info`, or that has no completion at all (the history ended
/// while it was open), is *indeterminate*: [`Operation::return_ns`] is `None`, meaning
/// `+infinity`. It may have taken effect at any instant after its call, or never. A checker
/// must allow both; the usual encoding (Porcupine's) is to let the search linearize it at any
/// point after the call, or last, which amounts to never. Its completion's value and token
/// carry no information about an effect.
///
/// # `fail`
///
/// A `fail` op certainly did not take effect. Its interval is still `[call, return]`: for
/// some models a failure is an observation made inside it (`acquire` `fail busy`: the key
/// was held at some instant of the interval; `cas` fail: the register did not hold `OLD`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Operation {
    /// The client process id.
    pub process: u64,
    /// The function (`acquire`, `release`, `write`, `read`, `cas`, `get`, `put`, `append`).
    pub f: Text,
    /// The key (the register name for the register model).
    pub key: Text,
    /// The invoke row.
    pub invoke: Invocation,
    /// The completion row; `None` when the history ended while the op was open.
    pub completion: Option<Completion>,
}

impl Operation {
    /// The call time: the invoke's `time_ns`.
    pub fn call_ns(&self) -> u64 {
        self.invoke.time_ns
    }

    /// The return time; `None` means `+infinity` (an `info` or never-completed op).
    pub fn return_ns(&self) -> Option<u64> {
        match &self.completion {
            Some(c) if c.op_type != OpType::Info => Some(c.time_ns),
            _ => None,
        }
    }

    /// The completion's type, `None` when there is no completion.
    pub fn op_type(&self) -> Option<OpType> {
        self.completion.as_ref().map(|c| c.op_type)
    }

    /// The op certainly took effect (`ok`).
    pub fn is_ok(&self) -> bool {
        self.op_type() == Some(OpType::Ok)
    }

    /// The op certainly did not take effect (`fail`).
    pub fn is_fail(&self) -> bool {
        self.op_type() == Some(OpType::Fail)
    }

    /// The outcome is unknown: `info`, or no completion at all.
    pub fn is_indeterminate(&self) -> bool {
        self.return_ns().is_none()
    }
}

/// A history split into client operations and nemesis faults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Paired {
    /// One per client invoke, in invoke order.
    pub operations: Vec<Operation>,
    /// The nemesis rows, in history order.
    pub faults: Vec<Op>,
}

/// Pairs every client invoke with its completion; nemesis rows are left out.
///
/// Returns one [`Operation`] per client invoke, in the order of the invokes. Fails on the
/// first op that breaks a rule of schema v1 (see the module doc).
pub fn pair(ops: &[Op]) -> Result<Vec<Operation>, PairError> {
    pair_with_faults(ops).map(|paired| paired.operations)
}

/// Like [`pair`], and also returns the nemesis rows.
pub fn pair_with_faults(ops: &[Op]) -> Result<Paired, PairError> {
    let mut validator = Validator::default();
    let mut pairing = Pairing::default();
    for (position, op) in ops.iter().enumerate() {
        validator
            .check(&Row::of(op))
            .map_err(|(violation, _)| PairError {
                position,
                index: op.index,
                violation,
            })?;
        let Process::Client(_) = op.process else {
            pairing.push_fault(op.clone());
            continue;
        };
        let cells = pairing.intern(op);
        pairing.push(Row::of(op), cells);
    }
    Ok(pairing.finish())
}

/// The cells of one client row other than its numbers, as [`Pairing::push`] stores them:
/// `f`, `key`, `value`, `node`, `error` (interned).
#[derive(Clone, Debug, Default)]
pub(crate) struct Cells {
    pub(crate) f: Text,
    pub(crate) key: Text,
    pub(crate) value: Text,
    pub(crate) node: Text,
    pub(crate) error: Text,
}

/// Pairs rows that were already validated (by the CSV reader or [`pair_with_faults`]),
/// one at a time: the history is never held twice, and each distinct cell is stored once
/// ([`Interner`]).
#[derive(Debug, Default)]
pub(crate) struct Pairing {
    paired: Paired,
    /// Client process -> position of its open operation.
    open: ProcessTable<usize>,
    interner: Interner,
}

impl Pairing {
    /// The shared text equal to `text`.
    pub(crate) fn intern_str(&mut self, text: &str) -> Text {
        self.interner.intern(text)
    }

    /// The interned cells of `op`.
    fn intern(&mut self, op: &Op) -> Cells {
        Cells {
            f: self.interner.intern(&op.f),
            key: self.interner.intern(&op.key),
            value: self.interner.intern(&op.value),
            node: self.interner.intern(&op.node),
            error: self.interner.intern(&op.error),
        }
    }

    /// Adds one validated op, of any process.
    pub(crate) fn push_op(&mut self, op: Op) {
        match op.process {
            Process::Nemesis => self.push_fault(op),
            Process::Client(_) => {
                let cells = self.intern(&op);
                self.push(Row::of(&op), cells);
            }
        }
    }

    /// Adds one validated nemesis row.
    pub(crate) fn push_fault(&mut self, op: Op) {
        self.paired.faults.push(op);
    }

    /// Adds one validated client row.
    ///
    /// # Panics
    ///
    /// On a nemesis row, or a completion with no open invoke: the validator rejects those
    /// first.
    pub(crate) fn push(&mut self, row: Row<'_>, cells: Cells) {
        let Process::Client(process) = row.process else {
            panic!("Pairing::push got nemesis row {}", row.index);
        };
        if row.op_type == OpType::Invoke {
            self.open.insert(process, self.paired.operations.len());
            self.paired.operations.push(Operation {
                process,
                f: cells.f,
                key: cells.key,
                invoke: Invocation {
                    index: row.index,
                    time_ns: row.time_ns,
                    value: cells.value,
                    token: row.token,
                    node: cells.node,
                    error: cells.error,
                },
                completion: None,
            });
            return;
        }
        let slot = self
            .open
            .remove(process)
            .expect("the validator accepted a completion without an open invoke");
        self.paired.operations[slot].completion = Some(Completion {
            op_type: row.op_type,
            index: row.index,
            time_ns: row.time_ns,
            value: cells.value,
            token: row.token,
            node: cells.node,
            error: cells.error,
        });
    }

    /// The paired history.
    pub(crate) fn finish(mut self) -> Paired {
        self.paired.operations.shrink_to_fit();
        self.paired
    }
}

/// A table keyed by client process id: indexed by the id for the small ids histories use
/// (a hash lookup per row was a tenth of reading a long history), a hash map for ids
/// from [`ProcessTable::DENSE_MAX`] on.
#[derive(Clone, Debug)]
pub struct ProcessTable<V> {
    dense: Vec<Option<V>>,
    sparse: HashMap<u64, V, FastBuildHasher>,
}

impl<V> Default for ProcessTable<V> {
    fn default() -> Self {
        ProcessTable {
            dense: Vec::new(),
            sparse: HashMap::default(),
        }
    }
}

impl<V> ProcessTable<V> {
    /// The ids kept in the indexed part (a slot each, up to the largest id seen: at most
    /// a few MB, whatever the history).
    pub const DENSE_MAX: u64 = 1 << 16;

    /// The value of `process`.
    pub fn get(&self, process: u64) -> Option<&V> {
        if process >= Self::DENSE_MAX {
            return self.sparse.get(&process);
        }
        self.dense.get(process as usize)?.as_ref()
    }

    /// Sets the value of `process`.
    pub fn insert(&mut self, process: u64, value: V) {
        if process >= Self::DENSE_MAX {
            self.sparse.insert(process, value);
            return;
        }
        let slot = process as usize;
        if slot >= self.dense.len() {
            self.dense
                .resize_with((slot + 1).next_power_of_two(), || None);
        }
        self.dense[slot] = Some(value);
    }

    /// Removes the value of `process` and returns it.
    pub fn remove(&mut self, process: u64) -> Option<V> {
        if process >= Self::DENSE_MAX {
            return self.sparse.remove(&process);
        }
        self.dense.get_mut(process as usize)?.take()
    }
}

/// What the [`Validator`] and [`Pairing::push`] read of a row: everything but the
/// free-text cells.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Row<'a> {
    pub(crate) index: u64,
    pub(crate) time_ns: u64,
    pub(crate) process: Process,
    pub(crate) op_type: OpType,
    pub(crate) f: &'a str,
    pub(crate) key: &'a str,
    pub(crate) token: Option<u64>,
}

impl<'a> Row<'a> {
    /// The row of an op.
    pub(crate) fn of(op: &'a Op) -> Row<'a> {
        Row {
            index: op.index,
            time_ns: op.time_ns,
            process: op.process,
            op_type: op.op_type,
            f: &op.f,
            key: &op.key,
            token: op.token,
        }
    }
}

/// The column a [`Violation`] is blamed on, so that the CSV reader can point at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blame {
    Index,
    Time,
    Type,
    F,
    Key,
}

#[derive(Clone, Debug)]
struct OpenInvoke {
    index: u64,
    f: Text,
    key: Text,
}

/// Checks ops one at a time against the rules of schema v1. Shared by the CSV reader and
/// [`pair`], so both reject exactly the same histories.
#[derive(Debug, Default)]
pub(crate) struct Validator {
    next_index: u64,
    last_time_ns: u64,
    /// Client process -> its open invoke.
    open: ProcessTable<OpenInvoke>,
    /// Client process -> the index of the `info` that retired it.
    retired: ProcessTable<u64>,
    /// The `f` and `key` of open invokes, stored once each.
    names: Interner,
}

impl Validator {
    /// Checks `row` and, when it is accepted, records it. A rejected row leaves `self`
    /// unchanged (the interned names aside, which are not part of its verdicts).
    pub(crate) fn check(&mut self, row: &Row<'_>) -> Result<(), (Violation, Blame)> {
        if row.index != self.next_index {
            let violation = Violation::IndexGap {
                expected: self.next_index,
                found: row.index,
            };
            return Err((violation, Blame::Index));
        }
        if row.time_ns < self.last_time_ns {
            let violation = Violation::TimeBackwards {
                previous_ns: self.last_time_ns,
                time_ns: row.time_ns,
            };
            return Err((violation, Blame::Time));
        }
        match row.process {
            Process::Nemesis => Self::check_nemesis(row)?,
            Process::Client(process) => self.check_client(process, row)?,
        }
        self.next_index += 1;
        self.last_time_ns = row.time_ns;
        Ok(())
    }

    fn check_nemesis(row: &Row<'_>) -> Result<(), (Violation, Blame)> {
        if row.op_type != OpType::Info {
            let violation = Violation::NemesisNotInfo {
                op_type: row.op_type,
            };
            return Err((violation, Blame::Type));
        }
        if row.f.is_empty() {
            return Err((Violation::EmptyFunction, Blame::F));
        }
        Ok(())
    }

    /// Checks a client row and records its effect on the open and retired tables.
    fn check_client(&mut self, process: u64, row: &Row<'_>) -> Result<(), (Violation, Blame)> {
        if row.op_type == OpType::Invoke {
            if let Some(&info_index) = self.retired.get(process) {
                let violation = Violation::InvokeAfterInfo {
                    process: row.process,
                    info_index,
                };
                return Err((violation, Blame::Type));
            }
            if let Some(invoke) = self.open.get(process) {
                let violation = Violation::InvokeWhileOpen {
                    process: row.process,
                    invoke_index: invoke.index,
                };
                return Err((violation, Blame::Type));
            }
            if row.f.is_empty() {
                return Err((Violation::EmptyFunction, Blame::F));
            }
            let invoke = OpenInvoke {
                index: row.index,
                f: self.names.intern(row.f),
                key: self.names.intern(row.key),
            };
            self.open.insert(process, invoke);
            return Ok(());
        }
        let Some(invoke) = self.open.get(process) else {
            let violation = Violation::CompletionWithoutInvoke {
                process: row.process,
                op_type: row.op_type,
            };
            return Err((violation, Blame::Type));
        };
        if row.f != invoke.f.as_str() {
            let violation = Violation::FunctionMismatch {
                invoke_index: invoke.index,
                invoke_f: invoke.f.to_string(),
                f: row.f.to_owned(),
            };
            return Err((violation, Blame::F));
        }
        if row.key != invoke.key.as_str() {
            let violation = Violation::KeyMismatch {
                invoke_index: invoke.index,
                invoke_key: invoke.key.to_string(),
                key: row.key.to_owned(),
            };
            return Err((violation, Blame::Key));
        }
        self.open.remove(process);
        if row.op_type == OpType::Info {
            self.retired.insert(process, row.index);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_table_keeps_small_and_large_ids_apart() {
        // Ids below DENSE_MAX live in the indexed part, the rest in the map: each is got
        // and removed where it was put, and a removed id is gone.
        let mut table: ProcessTable<u64> = ProcessTable::default();
        let max = ProcessTable::<u64>::DENSE_MAX;
        let ids = [0, 5, max - 1, max, max + 1, u64::MAX];
        for &id in &ids {
            assert_eq!(table.get(id), None);
            table.insert(id, id ^ 1);
        }
        for &id in &ids {
            assert_eq!(table.get(id), Some(&(id ^ 1)));
        }
        assert_eq!(table.remove(max - 1), Some((max - 1) ^ 1));
        assert_eq!(table.remove(max), Some(max ^ 1));
        assert_eq!(table.get(max - 1), None);
        assert_eq!(table.get(max), None);
        assert_eq!(table.remove(max), None);
        assert_eq!(table.get(5), Some(&4));
    }

    fn op(index: u64, time_ns: u64, process: Process, op_type: OpType, f: &str) -> Op {
        Op {
            index,
            time_ns,
            process,
            op_type,
            f: f.to_owned(),
            key: "a".to_owned(),
            value: String::new(),
            token: None,
            node: String::new(),
            error: String::new(),
        }
    }

    fn client(id: u64) -> Process {
        Process::Client(id)
    }

    #[test]
    fn each_invoke_becomes_one_operation_with_its_completion() {
        // Rule: DESIGN.md "Histories (CSV)": an ok/fail/info row completes the latest open
        // invoke of its process.
        let mut granted = op(2, 30, client(0), OpType::Ok, "acquire");
        granted.token = Some(7);
        let ops = vec![
            op(0, 10, client(0), OpType::Invoke, "acquire"),
            op(1, 20, client(1), OpType::Invoke, "acquire"),
            granted,
            op(3, 40, client(1), OpType::Fail, "acquire"),
        ];
        let operations = pair(&ops).unwrap();
        assert_eq!(operations.len(), 2);
        assert_eq!(operations[0].process, 0);
        assert_eq!(
            (operations[0].call_ns(), operations[0].return_ns()),
            (10, Some(30))
        );
        assert_eq!(operations[0].completion.as_ref().unwrap().token, Some(7));
        assert!(operations[0].is_ok());
        assert_eq!(
            (operations[1].call_ns(), operations[1].return_ns()),
            (20, Some(40))
        );
        assert!(operations[1].is_fail());
    }

    #[test]
    fn info_and_open_operations_return_at_infinity() {
        // Rule: DESIGN.md "Histories (CSV)": `info` may take effect at any time after its
        // invoke, or never; Operation's doc: return_ns None = +infinity.
        let ops = vec![
            op(0, 10, client(0), OpType::Invoke, "acquire"),
            op(1, 20, client(1), OpType::Invoke, "release"),
            op(2, 30, client(0), OpType::Info, "acquire"),
        ];
        let operations = pair(&ops).unwrap();
        assert_eq!(operations[0].return_ns(), None);
        assert_eq!(operations[0].op_type(), Some(OpType::Info));
        assert!(operations[0].is_indeterminate());
        assert_eq!(operations[1].return_ns(), None);
        assert!(operations[1].completion.is_none());
        assert!(operations[1].is_indeterminate());
    }

    #[test]
    fn nemesis_rows_are_kept_apart_as_faults() {
        // Rule: STYLE.md 10: a fault is recorded with process `nemesis`; checkers of client
        // ops ignore it.
        let ops = vec![
            op(0, 10, client(0), OpType::Invoke, "acquire"),
            op(1, 15, Process::Nemesis, OpType::Info, "kill"),
            op(2, 30, client(0), OpType::Ok, "acquire"),
        ];
        let paired = pair_with_faults(&ops).unwrap();
        assert_eq!(paired.operations.len(), 1);
        assert_eq!(paired.faults, vec![ops[1].clone()]);
        assert_eq!(pair(&ops).unwrap(), paired.operations);
    }

    #[test]
    fn completion_without_invoke_is_rejected_at_its_position() {
        // Rule: DESIGN.md "Histories (CSV)": a completion without an invoke is rejected.
        let ops = vec![
            op(0, 10, client(0), OpType::Invoke, "acquire"),
            op(1, 20, client(1), OpType::Ok, "acquire"),
        ];
        let error = pair(&ops).unwrap_err();
        assert_eq!(error.position, 1);
        assert_eq!(
            error.violation,
            Violation::CompletionWithoutInvoke {
                process: client(1),
                op_type: OpType::Ok
            }
        );
    }

    #[test]
    fn every_discipline_rule_is_enforced() {
        // Rule: histories/README.md "Process discipline" and DESIGN.md "Histories (CSV)".
        let invoke = |i, t, p| op(i, t, client(p), OpType::Invoke, "acquire");
        let cases: Vec<(Vec<Op>, Violation)> = vec![
            (
                vec![invoke(1, 0, 0)],
                Violation::IndexGap {
                    expected: 0,
                    found: 1,
                },
            ),
            (
                vec![invoke(0, 5, 0), invoke(1, 4, 1)],
                Violation::TimeBackwards {
                    previous_ns: 5,
                    time_ns: 4,
                },
            ),
            (
                vec![invoke(0, 0, 0), invoke(1, 1, 0)],
                Violation::InvokeWhileOpen {
                    process: client(0),
                    invoke_index: 0,
                },
            ),
            (
                vec![
                    invoke(0, 0, 0),
                    op(1, 1, client(0), OpType::Info, "acquire"),
                    invoke(2, 2, 0),
                ],
                Violation::InvokeAfterInfo {
                    process: client(0),
                    info_index: 1,
                },
            ),
            (
                vec![invoke(0, 0, 0), op(1, 1, client(0), OpType::Ok, "release")],
                Violation::FunctionMismatch {
                    invoke_index: 0,
                    invoke_f: "acquire".into(),
                    f: "release".into(),
                },
            ),
            (
                vec![op(0, 0, Process::Nemesis, OpType::Invoke, "kill")],
                Violation::NemesisNotInfo {
                    op_type: OpType::Invoke,
                },
            ),
            (
                vec![op(0, 0, client(0), OpType::Invoke, "")],
                Violation::EmptyFunction,
            ),
        ];
        for (ops, expected) in cases {
            let error = pair(&ops).unwrap_err();
            assert_eq!(error.violation, expected, "{ops:?}");
            assert_eq!(error.position, ops.len() - 1, "{ops:?}");
        }
    }

    #[test]
    fn key_mismatch_is_rejected() {
        // Rule: DESIGN.md "Histories (CSV)": a completion repeats its invoke's f and key.
        let mut completion = op(1, 1, client(0), OpType::Ok, "acquire");
        completion.key = "b".into();
        let ops = vec![op(0, 0, client(0), OpType::Invoke, "acquire"), completion];
        let error = pair(&ops).unwrap_err();
        assert_eq!(
            error.violation,
            Violation::KeyMismatch {
                invoke_index: 0,
                invoke_key: "a".into(),
                key: "b".into()
            }
        );
    }

    #[test]
    fn a_rejected_op_leaves_the_validator_unchanged() {
        // Rule: STYLE.md 12: a function that returns Err leaves self unchanged.
        let mut validator = Validator::default();
        let mut check = |op: Op| validator.check(&Row::of(&op));
        check(op(0, 10, client(0), OpType::Invoke, "acquire")).unwrap();
        let bad = op(1, 5, client(1), OpType::Invoke, "acquire");
        assert!(check(bad).is_err());
        // The same index and an in-order time are still accepted afterwards.
        check(op(1, 10, client(1), OpType::Invoke, "acquire")).unwrap();
        check(op(2, 11, client(0), OpType::Ok, "acquire")).unwrap();
    }
}
