//! Jepsen `history.edn`: `{:type :invoke, :f :acquire, :process 0, :time 123, :value ...}`.
//!
//! Field mapping (other keys, such as `:index` and `:exception`, are ignored):
//!
//! | EDN | column |
//! |---|---|
//! | `:type` (keyword) | `type`; a `:nemesis` op always becomes `info` (Jepsen records both halves of a fault as `:info`) |
//! | `:process` (int or `:nemesis`) | `process` |
//! | `:f` (keyword, symbol or string) | `f` |
//! | `:time` (int, ns) | `time_ns`; when absent, the op's position in the file |
//! | `:key` | `key`; empty when absent |
//! | `:value` | `value`: `nil` is empty, `[1 2]` is `1 2`; an `acquire` with a nil value takes `:lease-ms` when present |
//! | `:token` (int) | `token` |
//! | `:node` | `node` |
//! | `:error` | `error` (`:timeout` is `timeout`) |
//!
//! Ops are renumbered 0, 1, 2, ... in file order.

use super::edn::{self, Value};
use super::{ConvertError, ConvertErrorKind, finish};
use crate::op::{Op, OpType, Process};

/// Converts a Jepsen `history.edn` text: maps one after another, or one vector of maps.
pub fn convert(text: &str) -> Result<Vec<Op>, ConvertError> {
    let mut rows = Vec::new();
    for (line, value) in edn::parse_all(text)? {
        match value {
            Value::Vector(items) => {
                for item in items {
                    rows.push((line, op_from_map(line, &item, rows.len() as u64)?));
                }
            }
            map => rows.push((line, op_from_map(line, &map, rows.len() as u64)?)),
        }
    }
    finish(rows)
}

/// Converts one op map; `position` is its ordinal in the file, the time when it has none.
pub(crate) fn op_from_map(line: u64, map: &Value, position: u64) -> Result<Op, ConvertError> {
    let bad = |field: &'static str, found: &Value, expected: &'static str| ConvertError {
        line,
        kind: ConvertErrorKind::BadField {
            field,
            found: found.to_cell(),
            expected,
        },
    };
    if !matches!(map, Value::Map(_)) {
        return Err(bad("op", map, "a map"));
    }
    let required = |field: &'static str| {
        map.get(&field[1..]).ok_or(ConvertError {
            line,
            kind: ConvertErrorKind::MissingField { field },
        })
    };
    let process = match required(":process")? {
        Value::Keyword(k) if k == "nemesis" => Process::Nemesis,
        Value::Int(i) if *i >= 0 => Process::Client(i.unsigned_abs()),
        other => return Err(bad(":process", other, "a non-negative integer or :nemesis")),
    };
    let type_value = required(":type")?;
    let op_type = match type_value {
        Value::Keyword(k) => match k.as_str() {
            "invoke" => OpType::Invoke,
            "ok" => OpType::Ok,
            "fail" => OpType::Fail,
            "info" => OpType::Info,
            _ => return Err(bad(":type", type_value, ":invoke, :ok, :fail or :info")),
        },
        other => return Err(bad(":type", other, ":invoke, :ok, :fail or :info")),
    };
    let op_type = if process == Process::Nemesis {
        OpType::Info
    } else {
        op_type
    };
    let f = match required(":f")? {
        Value::Keyword(s) | Value::Symbol(s) | Value::Str(s) if !s.is_empty() => s.clone(),
        other => return Err(bad(":f", other, "a keyword")),
    };
    let time_ns = match map.get("time") {
        None | Some(Value::Nil) => position,
        Some(Value::Int(t)) if *t >= 0 => t.unsigned_abs(),
        Some(other) => return Err(bad(":time", other, "a non-negative integer")),
    };
    let token = match map.get("token") {
        None | Some(Value::Nil) => None,
        Some(Value::Int(t)) if *t >= 0 => Some(t.unsigned_abs()),
        Some(other) => return Err(bad(":token", other, "a non-negative integer")),
    };
    let cell = |key: &str| map.get(key).map(Value::to_cell).unwrap_or_default();
    let mut value = cell("value");
    if value.is_empty() && f == "acquire" {
        value = cell("lease-ms");
    }
    Ok(Op {
        index: position,
        time_ns,
        process,
        op_type,
        f,
        key: cell("key"),
        value,
        token,
        node: cell("node"),
        error: cell("error"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_a_jepsen_mutex_history() {
        // Rule: DESIGN.md "Histories (CSV)": Jepsen's history.edn converts into schema v1.
        let text = "\
{:type :invoke, :f :acquire, :process 0, :time 100, :value nil, :lease-ms 5000, :index 0}
{:type :ok, :f :acquire, :process 0, :time 250, :token 7, :node \"n1\", :index 1}
{:type :info, :f :kill, :process :nemesis, :time 260, :value [\"n1\" \"n2\"]}
{:type :invoke, :f :release, :process 1, :time 300, :index 2}
{:type :fail, :f :release, :process 1, :time 310, :error :not-held, :index 3}
";
        let ops = convert(text).unwrap();
        assert_eq!(ops.len(), 5);
        assert_eq!(
            ops.iter().map(|op| op.index).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert_eq!(
            (ops[0].f.as_str(), ops[0].value.as_str(), ops[0].time_ns),
            ("acquire", "5000", 100)
        );
        assert_eq!(
            (ops[1].op_type, ops[1].token, ops[1].node.as_str()),
            (OpType::Ok, Some(7), "n1")
        );
        assert_eq!(
            (ops[2].process, ops[2].value.as_str()),
            (Process::Nemesis, "n1 n2")
        );
        assert_eq!(
            (ops[4].op_type, ops[4].error.as_str()),
            (OpType::Fail, "not-held")
        );
    }

    #[test]
    fn a_vector_of_maps_is_accepted() {
        // Rule: jepsen.md §3: knossos reads an EDN vector or a sequence of maps.
        let text = "[{:type :invoke, :f :read, :process 0, :time 1}\n {:type :ok, :f :read, :process 0, :time 2, :value 3}]";
        let ops = convert(text).unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[1].value, "3");
    }

    #[test]
    fn bad_ops_are_rejected_with_their_line() {
        // Rule: convert module doc: each converter returns the line and the reason.
        let cases = [
            ("{:type :invoke, :f :read}", 1, "missing :process"),
            (
                "{:type :begin, :f :read, :process 0}",
                1,
                ":type is `begin`",
            ),
            (
                "{:type :invoke, :f :read, :process -1}",
                1,
                ":process is `-1`",
            ),
            (
                "{:type :invoke, :f :read, :process 0, :time 1.5}",
                1,
                ":time is `1.5`",
            ),
            (
                "{:type :invoke, :f :read, :process 0, :time 5}\n{:type :ok, :f :write, :process 0, :time 6}",
                2,
                "differs from its invoke",
            ),
            (
                "{:type :invoke, :f :read, :process 0, :time 5}\n{:type :invoke, :f :read, :process 1, :time 4}",
                2,
                "before the previous op",
            ),
            ("[1 2]", 1, "op is `1`"),
        ];
        for (text, line, reason) in cases {
            let error = convert(text).unwrap_err();
            assert_eq!(error.line, line, "{text}: {error}");
            assert!(error.to_string().contains(reason), "{text}: {error}");
        }
    }
}
