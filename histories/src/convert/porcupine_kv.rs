//! Porcupine's key-value logs: `{:process 0, :type :invoke, :f :append, :key "0", :value "x 0 0 y"}`.
//!
//! One EDN map per line, with `:process`, `:type`, `:f` (`:get`, `:put`, `:append`), `:key`
//! and `:value` (`nil` for a get's invoke). The files have no times: `time_ns` is the op's
//! position in the file (0, 1, 2, ...), which keeps the real-time order of the lines.
//! Values map as in the kv model of `histories/README.md`: the invoke's value is the
//! argument, a get's ok value is the value read.

use super::edn;
use super::{ConvertError, ConvertErrorKind, finish};
use crate::op::Op;
use crate::vocab::OpName;

/// Converts the text of a Porcupine `kv/cNN-*.txt` file.
pub fn convert(text: &str) -> Result<Vec<Op>, ConvertError> {
    let mut rows = Vec::new();
    for (line, value) in edn::parse_all(text)? {
        if value.get("time").is_some() {
            let kind = ConvertErrorKind::Syntax("unexpected :time in a Porcupine kv log".into());
            return Err(ConvertError { line, kind });
        }
        let position = rows.len() as u64;
        let op = super::jepsen_edn::op_from_map(line, &value, position)?;
        if !matches!(
            OpName::parse(&op.f),
            Some(OpName::Get | OpName::Put | OpName::Append)
        ) {
            let kind = ConvertErrorKind::BadField {
                field: ":f",
                found: op.f,
                expected: ":get, :put or :append",
            };
            return Err(ConvertError { line, kind });
        }
        if value.get("key").is_none() {
            let kind = ConvertErrorKind::MissingField { field: ":key" };
            return Err(ConvertError { line, kind });
        }
        rows.push((line, op));
    }
    finish(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{OpType, Process};

    #[test]
    fn converts_porcupine_kv_lines() {
        // Rule: histories/README.md "kv": invoke value = the argument; get ok value = read.
        let text = "\
{:process 0, :type :invoke, :f :append, :key \"0\", :value \"x 0 0 y\"}
{:process 1, :type :invoke, :f :get, :key \"0\", :value nil}
{:process 0, :type :ok, :f :append, :key \"0\", :value \"x 0 0 y\"}
{:process 1, :type :ok, :f :get, :key \"0\", :value \"x 0 0 y\"}
";
        let ops = convert(text).unwrap();
        assert_eq!(ops.len(), 4);
        assert_eq!(
            ops.iter().map(|op| op.time_ns).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(
            (
                ops[0].f.as_str(),
                ops[0].key.as_str(),
                ops[0].value.as_str()
            ),
            ("append", "0", "x 0 0 y")
        );
        assert_eq!(
            (ops[1].process, ops[1].value.as_str()),
            (Process::Client(1), "")
        );
        assert_eq!(
            (ops[3].op_type, ops[3].value.as_str()),
            (OpType::Ok, "x 0 0 y")
        );
    }

    #[test]
    fn rejects_other_functions_and_missing_keys() {
        // Rule: histories/README.md "kv": f is get, put or append, per key.
        let error =
            convert("{:process 0, :type :invoke, :f :cas, :key \"0\", :value nil}").unwrap_err();
        assert!(error.to_string().contains(":f is `cas`"), "{error}");
        let error = convert("\n{:process 0, :type :invoke, :f :get, :value nil}").unwrap_err();
        assert_eq!(error.to_string(), "line 2: missing :key");
    }
}
