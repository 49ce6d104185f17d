//! A compare-and-set register per key.
//!
//! | operation (history) | legal when | then |
//! |---|---|---|
//! | `read` ok value v | the register holds v | unchanged |
//! | `read` ok, empty value | without `init`: the register holds nil; with `init`: always (the value is unknown) | unchanged |
//! | `write v` ok, or info | always | holds v, nil when the value is empty (info: optional) |
//! | `cas` value `OLD NEW` ok | holds OLD | holds NEW |
//! | `cas` `OLD NEW` fail, error `mismatch` | does **not** hold OLD | unchanged: the failed compare is an observation |
//! | `cas` `OLD NEW` fail, any other error | never happened | left out |
//! | `cas` `OLD NEW` info | always (optional) | NEW if it held OLD, else unchanged |
//!
//! # Two readings of one history, chosen by its source
//!
//! Porcupine's etcd logs (converted with `--from porcupine-etcd`) mean by a failed cas that
//! the compare did not match, which tells what the register held; the converter writes the
//! error word `mismatch` on those rows. In Jepsen (`--from jepsen-edn`, knossos's
//! `cas-register`) a `fail` op certainly did not happen and says nothing, so a failed cas
//! without `mismatch` is left out. Jepsen histories start from a known value (knossos
//! checks them against `(cas-register 0)`): with [`RegisterOptions::init`] set, the
//! register never holds nil, and an ok read with an empty value is a read whose value is
//! unknown (knossos: "nil reads are always legal"). Without `init` the register starts as
//! nil and an empty read value means nil (Porcupine's etcd reading).
//!
//! A `read` that failed or timed out constrains nothing and is left out, as is a `write`
//! that failed. Values are interned to small integers, so a state is one word
//! (research/linearizability.md §4.3).

use std::collections::HashMap;

use history::{ErrorWord, OpName};

use super::lock_model::partition_by_key;
use super::{Model, Operation, Rows};
use crate::error::CheckError;

/// How to read a register history (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegisterOptions {
    /// The value every register holds before any operation; `None` for nil. With a value,
    /// an ok read of an empty value is a read whose value is unknown.
    pub init: Option<String>,
}

impl RegisterOptions {
    /// Registers that start holding `init` (`None`: nil).
    pub fn with_init(init: Option<String>) -> RegisterOptions {
        RegisterOptions { init }
    }
}

/// The register spec. Holds the interned values, for descriptions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegisterModel {
    values: Vec<String>,
    init: Option<u32>,
}

/// A register operation; values are interned ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegisterInput {
    /// `read`.
    Read,
    /// `write v`; `None` for an empty value cell, which the CSV reads as nil (as it reads
    /// an empty read value), so that an empty value written reads back empty.
    Write(Option<u32>),
    /// `cas OLD NEW`.
    Cas(u32, u32),
}

/// What it answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegisterOutput {
    /// `read` ok: the value read, `None` for nil.
    Read(Option<u32>),
    /// `write` or `cas` ok.
    Ok,
    /// `cas` fail: the compare did not match.
    CasFailed,
    /// `info` or never completed.
    Unknown,
}

impl Model for RegisterModel {
    type State = Option<u32>;
    type Input = RegisterInput;
    type Output = RegisterOutput;

    fn init(&self) -> Option<u32> {
        self.init
    }

    fn step(
        &self,
        state: &Option<u32>,
        input: &RegisterInput,
        output: &RegisterOutput,
    ) -> Option<Option<u32>> {
        match (input, output) {
            (RegisterInput::Read, RegisterOutput::Read(v)) => (state == v).then_some(*state),
            (RegisterInput::Write(v), _) => Some(*v),
            (RegisterInput::Cas(old, new), RegisterOutput::Ok) => {
                (*state == Some(*old)).then_some(Some(*new))
            }
            (RegisterInput::Cas(old, _), RegisterOutput::CasFailed) => {
                (*state != Some(*old)).then_some(*state)
            }
            (RegisterInput::Cas(old, new), RegisterOutput::Unknown) => {
                Some(if *state == Some(*old) {
                    Some(*new)
                } else {
                    *state
                })
            }
            _ => None,
        }
    }

    fn partition(&self, history: &[Operation<Self>]) -> Vec<Vec<usize>> {
        partition_by_key(history)
    }

    /// Porcupine's visualization labels: `read() -> 3`, `write(3) -> ok`,
    /// `cas(3, 0) -> fail`, `write(3) -> unknown`.
    fn describe_operation(&self, input: &RegisterInput, output: &RegisterOutput) -> String {
        let tail = match output {
            RegisterOutput::Unknown => "unknown",
            RegisterOutput::CasFailed => "fail",
            _ => "ok",
        };
        match (input, output) {
            (RegisterInput::Read, RegisterOutput::Read(v)) => {
                format!("read() -> {}", self.name(*v))
            }
            (RegisterInput::Read, _) => format!("read() -> {tail}"),
            (RegisterInput::Write(v), _) => format!("write({}) -> {tail}", self.name(*v)),
            (RegisterInput::Cas(a, b), _) => {
                format!("cas({}, {}) -> {tail}", self.value(*a), self.value(*b))
            }
        }
    }

    fn describe_state(&self, state: &Option<u32>) -> String {
        format!("holds {}", self.name(*state))
    }
}

impl RegisterModel {
    fn value(&self, id: u32) -> &str {
        &self.values[id as usize]
    }

    fn name(&self, v: Option<u32>) -> String {
        v.map_or_else(|| "nil".to_string(), |id| self.value(id).to_string())
    }
}

/// Interns values for one [`RegisterModel`].
struct Interner {
    ids: HashMap<String, u32>,
    values: Vec<String>,
}

impl Interner {
    fn intern(&mut self, value: &str) -> u32 {
        if let Some(&id) = self.ids.get(value) {
            return id;
        }
        let id = self.values.len() as u32;
        self.values.push(value.to_string());
        self.ids.insert(value.to_string(), id);
        id
    }
}

/// [`register_operations_with`] with registers that start as nil (Porcupine's reading).
pub fn register_operations(
    ops: &[history::pair::Operation],
) -> Result<(RegisterModel, Vec<Operation<RegisterModel>>), CheckError> {
    register_operations_with(ops, &RegisterOptions::default())
}

/// Builds the register model (with its interned values) and its operations from paired
/// history operations. Rows with another `f` are an error naming the row and the op.
pub fn register_operations_with(
    ops: &[history::pair::Operation],
    options: &RegisterOptions,
) -> Result<(RegisterModel, Vec<Operation<RegisterModel>>), CheckError> {
    let mut interner = Interner {
        ids: HashMap::new(),
        values: Vec::new(),
    };
    let init = options.init.as_deref().map(|v| interner.intern(v.trim()));
    let mut out = Vec::new();
    for op in ops {
        let Some((input, output)) = register_step(op, init.is_some(), &mut interner)? else {
            continue;
        };
        let completion = op.completion.as_ref();
        out.push(Operation {
            call_ns: op.call_ns(),
            return_ns: op.return_ns(),
            input,
            output,
            key: op.key.clone(),
            process: Some(op.process),
            rows: Rows {
                invoke: Some(op.invoke.index),
                completion: completion.map(|c| c.index),
            },
        });
    }
    let model = RegisterModel {
        values: interner.values,
        init,
    };
    Ok((model, out))
}

/// One operation's input and output; `None` when it constrains nothing and is left out.
fn register_step(
    op: &history::pair::Operation,
    has_init: bool,
    interner: &mut Interner,
) -> Result<Option<(RegisterInput, RegisterOutput)>, CheckError> {
    let completion = op.completion.as_ref();
    Ok(Some(match OpName::parse(op.f.as_str()) {
        Some(OpName::Read) if op.is_ok() => {
            let value = completion.map_or("", |c| c.value.trim());
            if value.is_empty() && has_init {
                // The register never holds nil: an empty value is a read of unknown value.
                return Ok(None);
            }
            let read = (!value.is_empty()).then(|| interner.intern(value));
            (RegisterInput::Read, RegisterOutput::Read(read))
        }
        Some(OpName::Read) => return Ok(None),
        Some(OpName::Write) if op.is_fail() => return Ok(None),
        Some(OpName::Write) => {
            // An empty cell is nil, as in a read: the CSV cannot tell `""` from nil.
            let value = op.invoke.value.trim();
            let input = RegisterInput::Write((!value.is_empty()).then(|| interner.intern(value)));
            (input, ok_or_unknown(op))
        }
        Some(OpName::Cas) => {
            let mut parts = op.invoke.value.split_whitespace();
            let (Some(old), Some(new), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(CheckError::bad(
                    op.invoke.index,
                    format!("cas value `{}` is not `OLD NEW`", op.invoke.value),
                ));
            };
            let output = match completion {
                Some(c) if op.is_fail() && c.error == ErrorWord::Mismatch => {
                    RegisterOutput::CasFailed
                }
                // Jepsen: a failed op did not happen and tells nothing.
                _ if op.is_fail() => return Ok(None),
                _ => ok_or_unknown(op),
            };
            let input = RegisterInput::Cas(interner.intern(old), interner.intern(new));
            (input, output)
        }
        _ => {
            return Err(CheckError::bad(
                op.invoke.index,
                format!("op `{}` is not a register op (read, write, cas)", op.f),
            ));
        }
    }))
}

fn ok_or_unknown(op: &history::pair::Operation) -> RegisterOutput {
    if op.is_indeterminate() {
        RegisterOutput::Unknown
    } else {
        RegisterOutput::Ok
    }
}
