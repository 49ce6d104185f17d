//! Registers over several keys, read and written by transactions: knossos's
//! `multi-register`.
//!
//! A history op has `f` = `txn` and a value that lists micro-ops, `read KEY [VALUE]` or
//! `write KEY VALUE`, separated by `;` (`read x 0; write y 2`). As in knossos, the invoke's
//! value is replaced by the `ok` completion's (the completion knows what was read); an
//! `info` or open txn keeps its invoke's value and may take effect at any time, or never; a
//! `fail` txn did not happen and is left out.
//!
//! | micro-op | legal when | then |
//! |---|---|---|
//! | `read k v` | k holds v | unchanged |
//! | `read k` (no value: unknown, Jepsen's nil) | always | unchanged |
//! | `write k v` | always | k holds v |
//!
//! A txn is legal when its micro-ops, applied in order, all are. Every key starts as the
//! initial value (`--init`, knossos's `(multi-register {:x 0 :y 0})`), or nil. Txns span
//! keys, so the history is one part (no partition by key).

use std::collections::HashMap;

use history::OpName;

use super::{Model, Operation, Rows};
use crate::error::CheckError;

/// One micro-op of a txn; keys and values are interned ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MicroOp {
    /// `read k v`; `None`: the value read is unknown.
    Read(u32, Option<u32>),
    /// `write k v`.
    Write(u32, u32),
}

/// The multi-register spec, with the interned key and value names for reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MultiRegisterModel {
    keys: Vec<String>,
    values: Vec<String>,
    init: Option<u32>,
}

/// What a txn answered: ok, or unknown (`info`, never completed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxnOutput {
    /// It took effect.
    Ok,
    /// `info` or never completed.
    Unknown,
}

impl Model for MultiRegisterModel {
    /// One value per interned key.
    type State = Vec<Option<u32>>;
    type Input = Vec<MicroOp>;
    type Output = TxnOutput;

    fn init(&self) -> Vec<Option<u32>> {
        vec![self.init; self.keys.len()]
    }

    fn step(
        &self,
        state: &Vec<Option<u32>>,
        txn: &Vec<MicroOp>,
        _: &TxnOutput,
    ) -> Option<Self::State> {
        let mut next = state.clone();
        for micro_op in txn {
            match *micro_op {
                MicroOp::Read(k, Some(v)) if next[k as usize] != Some(v) => return None,
                MicroOp::Read(..) => {}
                MicroOp::Write(k, v) => next[k as usize] = Some(v),
            }
        }
        Some(next)
    }

    fn describe_operation(&self, txn: &Vec<MicroOp>, output: &TxnOutput) -> String {
        let micro: Vec<String> = txn
            .iter()
            .map(|m| match *m {
                MicroOp::Read(k, v) => format!("r({}) {}", self.keys[k as usize], self.name(v)),
                MicroOp::Write(k, v) => {
                    format!("w({}, {})", self.keys[k as usize], self.values[v as usize])
                }
            })
            .collect();
        let tail = match output {
            TxnOutput::Ok => "ok",
            TxnOutput::Unknown => "unknown",
        };
        format!("txn[{}] -> {tail}", micro.join(" "))
    }

    fn describe_state(&self, state: &Vec<Option<u32>>) -> String {
        let held: Vec<String> = state
            .iter()
            .enumerate()
            .map(|(k, v)| format!("{}={}", self.keys[k], self.name(*v)))
            .collect();
        format!("holds {}", held.join(", "))
    }
}

impl MultiRegisterModel {
    fn name(&self, v: Option<u32>) -> String {
        v.map_or_else(|| "?".to_string(), |v| self.values[v as usize].clone())
    }
}

fn intern(ids: &mut HashMap<String, u32>, names: &mut Vec<String>, name: &str) -> u32 {
    if let Some(&id) = ids.get(name) {
        return id;
    }
    names.push(name.to_string());
    let id = (names.len() - 1) as u32;
    ids.insert(name.to_string(), id);
    id
}

/// Builds the multi-register model and its operations; `init` is every key's initial
/// value. An op other than `txn`, or a value that is not a micro-op list, is an error
/// naming its row.
pub fn multi_register_operations(
    ops: &[history::pair::Operation],
    init: Option<&str>,
) -> Result<(MultiRegisterModel, Vec<Operation<MultiRegisterModel>>), CheckError> {
    let (mut key_ids, mut value_ids) = (HashMap::new(), HashMap::new());
    let mut model = MultiRegisterModel::default();
    model.init = init.map(|v| intern(&mut value_ids, &mut model.values, v.trim()));
    let mut out = Vec::new();
    for op in ops {
        if op.f != OpName::Txn {
            return Err(CheckError::bad(
                op.invoke.index,
                format!("op `{}` is not a multi-register op (txn)", op.f),
            ));
        }
        if op.is_fail() {
            continue;
        }
        let (text, row) = match &op.completion {
            Some(c) if op.is_ok() => (c.value.as_str(), c.index),
            _ => (op.invoke.value.as_str(), op.invoke.index),
        };
        let mut txn = Vec::new();
        for micro in text.split(';').map(str::trim).filter(|m| !m.is_empty()) {
            let words: Vec<&str> = micro.split_whitespace().collect();
            let mut key = |k: &str| intern(&mut key_ids, &mut model.keys, k);
            // A micro-op is named by the register ops' own words.
            let (name, args) = match words.split_first() {
                Some((name, args)) => (OpName::parse(name), args),
                None => (None, &[][..]),
            };
            let micro_op = match (name, args) {
                (Some(OpName::Read), [k]) => MicroOp::Read(key(k), None),
                (Some(OpName::Read), [k, v]) => {
                    let k = key(k);
                    MicroOp::Read(k, Some(intern(&mut value_ids, &mut model.values, v)))
                }
                (Some(OpName::Write), [k, v]) => {
                    let k = key(k);
                    MicroOp::Write(k, intern(&mut value_ids, &mut model.values, v))
                }
                _ => {
                    return Err(CheckError::bad(
                        row,
                        format!(
                            "txn micro-op `{micro}` is not `read KEY [VALUE]` or `write KEY VALUE`"
                        ),
                    ));
                }
            };
            txn.push(micro_op);
        }
        out.push(Operation {
            call_ns: op.call_ns(),
            return_ns: op.return_ns(),
            input: txn,
            output: if op.is_indeterminate() {
                TxnOutput::Unknown
            } else {
                TxnOutput::Ok
            },
            key: history::Text::EMPTY,
            process: Some(op.process),
            rows: Rows {
                invoke: Some(op.invoke.index),
                completion: op.completion.as_ref().map(|c| c.index),
            },
        });
    }
    Ok((model, out))
}
