//! A compare-and-set register per key, with Porcupine's etcd semantics.
//!
//! | operation (history) | legal when | then |
//! |---|---|---|
//! | `read` ok value v (empty = nil) | the register holds v | unchanged |
//! | `write v` ok, or info | always | holds v (info: optional) |
//! | `cas` value `OLD NEW` ok | holds OLD | holds NEW |
//! | `cas` `OLD NEW` fail | does **not** hold OLD | unchanged: a failed compare is an observation |
//! | `cas` `OLD NEW` info | always (optional) | NEW if it held OLD, else unchanged |
//!
//! A `read` that failed or timed out constrains nothing and is left out, as is a `write`
//! that failed. The register starts as nil. Values are interned to small integers, so a
//! state is one word (research/linearizability.md §4.3).

use std::collections::HashMap;

use super::lock_model::partition_by_key;
use super::{Model, Operation, Rows};
use crate::error::CheckError;

/// The register spec. Holds the interned values, for descriptions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegisterModel {
    values: Vec<String>,
}

/// A register operation; values are interned ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegisterInput {
    /// `read`.
    Read,
    /// `write v`.
    Write(u32),
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
        None
    }

    fn step(
        &self,
        state: &Option<u32>,
        input: &RegisterInput,
        output: &RegisterOutput,
    ) -> Option<Option<u32>> {
        match (input, output) {
            (RegisterInput::Read, RegisterOutput::Read(v)) => (state == v).then_some(*state),
            (RegisterInput::Write(v), _) => Some(Some(*v)),
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

    fn describe_operation(&self, input: &RegisterInput, output: &RegisterOutput) -> String {
        let unknown = *output == RegisterOutput::Unknown;
        let tail = if unknown {
            " -> unknown (info)"
        } else {
            " -> ok"
        };
        match (input, output) {
            (RegisterInput::Read, RegisterOutput::Read(v)) => format!("read -> {}", self.name(*v)),
            (RegisterInput::Read, _) => "read".to_string(),
            (RegisterInput::Write(v), _) => format!("write {}{tail}", self.value(*v)),
            (RegisterInput::Cas(a, b), RegisterOutput::CasFailed) => {
                format!("cas {} -> {} -> fail", self.value(*a), self.value(*b))
            }
            (RegisterInput::Cas(a, b), _) => {
                format!("cas {} -> {}{tail}", self.value(*a), self.value(*b))
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

/// Builds the register model (with its interned values) and its operations from paired
/// history operations. Rows with another `f` are an error.
pub fn register_operations(
    ops: &[history::pair::Operation],
) -> Result<(RegisterModel, Vec<Operation<RegisterModel>>), CheckError> {
    let mut interned: HashMap<String, u32> = HashMap::new();
    let mut model = RegisterModel::default();
    let mut intern = |value: &str| -> u32 {
        *interned.entry(value.to_string()).or_insert_with(|| {
            model.values.push(value.to_string());
            (model.values.len() - 1) as u32
        })
    };
    let mut out = Vec::new();
    for op in ops {
        let return_ns = op.return_ns();
        let completion = op.completion.as_ref();
        let (input, output) = match op.f.as_str() {
            "read" if op.is_ok() => {
                let value = completion.map_or("", |c| c.value.trim());
                let read = (!value.is_empty()).then(|| intern(value));
                (RegisterInput::Read, RegisterOutput::Read(read))
            }
            "read" => continue,
            "write" if op.is_fail() => continue,
            "write" => {
                let input = RegisterInput::Write(intern(op.invoke.value.trim()));
                (input, ok_or_unknown(op))
            }
            "cas" => {
                let mut parts = op.invoke.value.split_whitespace();
                let (Some(old), Some(new), None) = (parts.next(), parts.next(), parts.next())
                else {
                    return Err(CheckError::bad(
                        op.invoke.index,
                        format!("cas value `{}` is not `OLD NEW`", op.invoke.value),
                    ));
                };
                let input = RegisterInput::Cas(intern(old), intern(new));
                let output = if op.is_fail() {
                    RegisterOutput::CasFailed
                } else {
                    ok_or_unknown(op)
                };
                (input, output)
            }
            other => {
                return Err(CheckError::bad(
                    op.invoke.index,
                    format!("f `{other}` is not a register op (read, write, cas)"),
                ));
            }
        };
        out.push(Operation {
            call_ns: op.call_ns(),
            return_ns,
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
    Ok((model, out))
}

fn ok_or_unknown(op: &history::pair::Operation) -> RegisterOutput {
    if op.is_indeterminate() {
        RegisterOutput::Unknown
    } else {
        RegisterOutput::Ok
    }
}
