//! Jepsen `history.edn`: `{:type :invoke, :f :acquire, :process 0, :time 123, :value ...}`.
//!
//! Field mapping (other keys, such as `:index` and `:exception`, are ignored):
//!
//! | EDN | column |
//! |---|---|
//! | `:type` (keyword) | `type`; a `:nemesis` op always becomes `info` (Jepsen records both halves of a fault as `:info`) |
//! | `:process` (int or `:nemesis`) | `process` |
//! | `:f` (keyword, symbol or string) | `f` |
//! | `:time` (int, ns) | `time_ns` when every op has one and they strictly increase in file order; otherwise every op's `time_ns` is its position in the file, and an acquire with a lease is an error (its lease cannot be judged without real times) |
//! | `:key` | `key`; empty when absent |
//! | `:value` | `value`: `nil` is empty, `[1 2]` is `1 2`; an `acquire` with a nil value takes `:lease-ms` when present; a `:txn` value `[[:read :x nil] [:write :y 2]]` is `read x; write y 2` (a nil read value is left out) |
//! | `:token` (int) | `token` |
//! | `:node` | `node` |
//! | `:error` | `error` (`:timeout` is `timeout`) |
//!
//! Ops are renumbered 0, 1, 2, ... in file order.
//!
//! # `jepsen.independent` tuples
//!
//! Jepsen checks many keys at once by wrapping each value in a tuple, `[key value]`,
//! which `history.edn` prints as a two-element vector: `:write [1 5]`, `:read [1 nil]`,
//! `:cas [1 [5 7]]`. A file where some client op of `read`, `write`, `cas`, `acquire` or
//! `release` has such a tuple as its value (and no `:key`) is read as independent: every
//! such op must have one (a completion may also carry `nil`, and keeps its invoke's key),
//! and it becomes the row `key` = the tuple's key, `value` = its value. Read as one
//! register, the keys' values would mix, and a read of key 1 after a write to key 2 would
//! be a false alarm. A file that mixes tuples and plain values is rejected, naming the first
//! op that does not fit: no reading of its keys is safe. A cas is a tuple only when its
//! value is `[key [old new]]`, since a plain cas is `[old new]`.
//!
//! # Jepsen's meaning is kept
//!
//! - **File order is real-time order.** knossos ignores `:time` (it may be absent, and in
//!   real histories it is not always monotonic, since it comes from several clocks). When the
//!   times are not strictly increasing in file order, they are replaced by the ops' positions,
//!   so that the order the checker sees is exactly the file's.
//! - `:fail` means the op did not happen; `:info` means its outcome is unknown. Both are kept
//!   as such: the register model leaves out a failed cas (it only reads a failed cas as an
//!   observation when its error is `mismatch`, which Jepsen never writes), and the mutex
//!   models leave out every failed op.
//! - An `:ok` read of `nil` is a read whose value is unknown when the register has an
//!   initial value (`locksmith check --init 0`, knossos's `(cas-register 0)`).
//! - Errors name the line the op itself starts on, also inside one big vector of ops.

use super::edn::{self, Value};
use super::{ConvertError, ConvertErrorKind, finish};
use crate::op::{Op, OpType, Process};
use crate::vocab::{AcquireValue, OpName};

/// Converts a Jepsen `history.edn` text: maps one after another, or one vector of maps.
pub fn convert(text: &str) -> Result<Vec<Op>, ConvertError> {
    let items = edn::parse_items(text)?;
    let mut tuples = Tuples::of(&items);
    let mut rows = Vec::new();
    let mut times_increase = true;
    for (line, value) in items {
        let position = rows.len() as u64;
        let mut op = op_from_map(line, &value, position)?;
        tuples.unwrap(line, &value, &mut op)?;
        let has_time = matches!(value.get("time"), Some(Value::Int(_)));
        let previous = rows.last().map(|(_, op): &(u64, Op)| op.time_ns);
        times_increase &= has_time && previous.is_none_or(|p| p < op.time_ns);
        rows.push((line, op));
    }
    if !times_increase {
        // Positions keep the file's order but no duration: a lease measured against them
        // never runs out, and a regrant after it did would read as two holders.
        if let Some((line, _)) = rows.iter().find(|(_, op)| {
            op.op_type == OpType::Invoke
                && op.f == OpName::Acquire
                && AcquireValue::parse(&op.value).is_some()
        }) {
            let reason = "an acquire with a lease needs real times: every op needs its \
                          :time (ns), strictly increasing in file order; without them the \
                          ops are timed by their position in the file and the lease cannot \
                          be judged"
                .to_owned();
            return Err(ConvertError {
                line: *line,
                kind: ConvertErrorKind::Syntax(reason),
            });
        }
        for (position, (_, op)) in (0u64..).zip(rows.iter_mut()) {
            op.time_ns = position;
        }
    }
    finish(rows)
}

/// The ops whose `:value` may be a `jepsen.independent` tuple `[key value]`.
const TUPLE_OPS: [OpName; 5] = [
    OpName::Read,
    OpName::Write,
    OpName::Cas,
    OpName::Acquire,
    OpName::Release,
];

/// Whether a file's values are `jepsen.independent` tuples, and the keys of the ops open.
struct Tuples {
    /// The line of the first op with a tuple value; `None` when the file has none.
    first_line: Option<u64>,
    /// Each client process's open invoke's key.
    open_keys: std::collections::HashMap<u64, String>,
}

impl Tuples {
    fn of(items: &[(u64, Value)]) -> Tuples {
        let first_line = items
            .iter()
            .find(|(_, map)| Self::applies(map) && Self::tuple(map).is_some())
            .map(|(line, _)| *line);
        Tuples {
            first_line,
            open_keys: std::collections::HashMap::new(),
        }
    }

    /// Whether a map is a client op that may carry a tuple: one of [`TUPLE_OPS`], no
    /// `:key`, not the nemesis.
    fn applies(map: &Value) -> bool {
        let Some(f) = Self::f(map) else {
            return false;
        };
        TUPLE_OPS.iter().any(|name| name == f)
            && map.get("key").is_none()
            && !matches!(map.get("process"), Some(Value::Keyword(_)))
    }

    /// The `:f` of an op map, as text.
    fn f(map: &Value) -> Option<&str> {
        match map.get("f") {
            Some(Value::Keyword(f) | Value::Symbol(f) | Value::Str(f)) => Some(f),
            _ => None,
        }
    }

    /// The key and value of a tuple `[key value]` (`[key [old new]]` for a cas).
    fn tuple(map: &Value) -> Option<(&Value, &Value)> {
        let Some(Value::Vector(parts)) = map.get("value") else {
            return None;
        };
        let [key, value] = parts.as_slice() else {
            return None;
        };
        let scalar_key = matches!(
            key,
            Value::Int(_) | Value::Str(_) | Value::Keyword(_) | Value::Symbol(_)
        ) && !key.to_cell().is_empty();
        let is_cas = Self::f(map) == Some(OpName::Cas.as_str());
        let cas_shape = !is_cas || matches!(value, Value::Vector(pair) if pair.len() == 2);
        (scalar_key && cas_shape).then_some((key, value))
    }

    /// In an independent file, moves the tuple's key into `op.key` and its value into
    /// `op.value`; rejects an op of [`TUPLE_OPS`] without a tuple.
    fn unwrap(&mut self, line: u64, map: &Value, op: &mut Op) -> Result<(), ConvertError> {
        let Some(first_line) = self.first_line else {
            return Ok(());
        };
        let Process::Client(process) = op.process else {
            return Ok(());
        };
        if !Self::applies(map) {
            return Ok(());
        }
        let raw = map.get("value").unwrap_or(&Value::Nil);
        match (Self::tuple(map), raw) {
            (Some((key, value)), _) => {
                op.key = key.to_cell();
                op.value = value.to_cell();
            }
            // A completion that dropped the tuple keeps its invoke's key.
            (None, Value::Nil) if op.op_type != OpType::Invoke => {
                op.key = self.open_keys.get(&process).cloned().unwrap_or_default();
                op.value = String::new();
            }
            (None, raw) => {
                let found = match raw {
                    Value::Nil => "nil".to_owned(),
                    raw => raw.to_cell(),
                };
                let reason = format!(
                    ":value is `{found}`, expected a [key value] tuple of jepsen.independent, \
                     as on line {first_line} (a file that mixes tuples and plain values has \
                     no safe reading of its keys)"
                );
                return Err(ConvertError {
                    line,
                    kind: ConvertErrorKind::Syntax(reason),
                });
            }
        }
        if op.op_type == OpType::Invoke {
            self.open_keys.insert(process, op.key.clone());
        } else {
            self.open_keys.remove(&process);
        }
        Ok(())
    }
}

/// A Jepsen `:txn` value, `[[:read :x nil] [:write :y 2]]`, as one cell: `read x; write y
/// 2`. `None` when it is not a vector of `[f k v]` triples.
fn txn_cell(value: &Value) -> Option<String> {
    let Value::Vector(micro_ops) = value else {
        return None;
    };
    let mut cells = Vec::with_capacity(micro_ops.len());
    for micro_op in micro_ops {
        let Value::Vector(parts) = micro_op else {
            return None;
        };
        let [f, k, v] = parts.as_slice() else {
            return None;
        };
        let f = match f {
            Value::Keyword(f) | Value::Symbol(f) | Value::Str(f) => f,
            _ => return None,
        };
        let key = k.to_cell();
        if key.is_empty() || key.contains([' ', ';']) || v.to_cell().contains([' ', ';']) {
            return None;
        }
        cells.push(match v {
            Value::Nil => format!("{f} {key}"),
            v => format!("{f} {key} {}", v.to_cell()),
        });
    }
    Some(cells.join("; "))
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
    if f == OpName::Txn {
        let raw = map.get("value").unwrap_or(&Value::Nil);
        value = match raw {
            Value::Nil => String::new(),
            raw => txn_cell(raw).ok_or_else(|| bad(":value", raw, "a txn: [[:read :x 1] ...]"))?,
        };
    }
    if value.is_empty() && f == OpName::Acquire {
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
    fn file_order_is_real_time_order_when_times_go_backwards() {
        // Rule: knossos ignores :time; the history's order is the real-time order. Op 2
        // starts after op 1 returned in the file, although its :time is earlier.
        let text = "\
{:type :invoke, :f :write, :process 0, :time 50, :value 1}
{:type :ok, :f :write, :process 0, :time 60, :value 1}
{:type :invoke, :f :read, :process 1, :time 10}
{:type :ok, :f :read, :process 1, :time 20, :value 1}
";
        let ops = convert(text).unwrap();
        assert_eq!(
            ops.iter().map(|op| op.time_ns).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        // Missing times count the same way.
        let ops = convert(
            "{:type :invoke, :f :read, :process 0}\n{:type :ok, :f :read, :process 0, :time 9}",
        )
        .unwrap();
        assert_eq!((ops[0].time_ns, ops[1].time_ns), (0, 1));
    }

    #[test]
    fn txn_values_become_micro_op_lists() {
        // Rule: histories/README.md "multi-register": `read x; write y 2`, nil reads bare.
        let text = "{:type :invoke, :f :txn, :process 0, :value [[:read :x nil] [:write :y 2]]}\n\
                    {:type :ok, :f :txn, :process 0, :value [[:read :x 0] [:write :y 2]]}";
        let ops = convert(text).unwrap();
        assert_eq!(ops[0].value, "read x; write y 2");
        assert_eq!(ops[1].value, "read x 0; write y 2");
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
                "[{:type :invoke, :f :read, :process 0}\n {:type :ok, :f :read, :process 0}\n {:type :ok, :f :read, :process 0}]",
                3,
                "with no open invoke",
            ),
            (
                "{:type :invoke, :f :txn, :process 0, :value [[:read :x nil 3]]}",
                1,
                ":value is",
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
