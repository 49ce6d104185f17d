//! A key-value store of strings, each key initially empty: get / put / append, as in
//! Porcupine's key-value histories (MIT 6.824 kvraft).
//!
//! | operation (history) | legal when | then |
//! |---|---|---|
//! | `get` ok value v | the key holds v | unchanged |
//! | `put v` ok, or info | always | holds v (info: optional) |
//! | `append v` ok, or info | always | holds its value followed by v (info: optional) |
//!
//! A `get` that failed or never answered constrains nothing and is left out, as is a
//! failed `put` or `append`. The partition is by key: each key is its own object.

use history::OpName;

use super::lock_model::partition_by_key;
use super::{Model, Operation, Rows};
use crate::error::CheckError;

/// The key-value spec, one key per part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvModel;

/// A key-value operation on its key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KvInput {
    /// `get`.
    Get,
    /// `put v`.
    Put(String),
    /// `append v`.
    Append(String),
}

/// What it answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KvOutput {
    /// `get` ok: the value.
    Value(String),
    /// `put` or `append` ok.
    Ok,
    /// `info` or never completed.
    Unknown,
}

impl Model for KvModel {
    type State = String;
    type Input = KvInput;
    type Output = KvOutput;

    fn init(&self) -> String {
        String::new()
    }

    fn step(&self, state: &String, input: &KvInput, output: &KvOutput) -> Option<String> {
        match (input, output) {
            (KvInput::Get, KvOutput::Value(v)) => (state == v).then(|| state.clone()),
            (KvInput::Put(v), _) => Some(v.clone()),
            (KvInput::Append(v), _) => Some(format!("{state}{v}")),
            _ => None,
        }
    }

    fn partition(&self, history: &[Operation<Self>]) -> Vec<Vec<usize>> {
        partition_by_key(history)
    }

    fn describe_operation(&self, input: &KvInput, output: &KvOutput) -> String {
        let tail = if *output == KvOutput::Unknown {
            " -> unknown (info)"
        } else {
            " -> ok"
        };
        match (input, output) {
            (KvInput::Get, KvOutput::Value(v)) => format!("get -> {v:?}"),
            (KvInput::Get, _) => "get".to_string(),
            (KvInput::Put(v), _) => format!("put {v:?}{tail}"),
            (KvInput::Append(v), _) => format!("append {v:?}{tail}"),
        }
    }

    fn describe_state(&self, state: &String) -> String {
        format!("holds {state:?}")
    }
}

/// Builds the key-value operations from paired history operations. Rows with another `f`
/// are an error.
pub fn kv_operations(
    ops: &[history::pair::Operation],
) -> Result<Vec<Operation<KvModel>>, CheckError> {
    let mut out = Vec::new();
    for op in ops {
        let completion = op.completion.as_ref();
        let unknown = op.is_indeterminate();
        let (input, output) = match OpName::parse(op.f.as_str()) {
            Some(OpName::Get) if op.is_ok() => {
                let value = completion.map_or(String::new(), |c| c.value.to_string());
                (KvInput::Get, KvOutput::Value(value))
            }
            Some(OpName::Get) => continue,
            Some(OpName::Put | OpName::Append) if op.is_fail() => continue,
            Some(name @ (OpName::Put | OpName::Append)) => {
                let value = op.invoke.value.to_string();
                let input = if name == OpName::Put {
                    KvInput::Put(value)
                } else {
                    KvInput::Append(value)
                };
                (
                    input,
                    if unknown {
                        KvOutput::Unknown
                    } else {
                        KvOutput::Ok
                    },
                )
            }
            _ => {
                return Err(CheckError::bad(
                    op.invoke.index,
                    format!("f `{}` is not a kv op (get, put, append)", op.f),
                ));
            }
        };
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
    Ok(out)
}
