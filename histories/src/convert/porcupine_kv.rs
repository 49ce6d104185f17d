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
        if !matches!(op.f.as_str(), "get" | "put" | "append") {
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
