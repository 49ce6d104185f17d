//! The Jepsen etcd logs of Porcupine's test data: `INFO  jepsen.util - 0\t:invoke\t:read\tnil`.
//!
//! Each line is `... jepsen.util - PROCESS TYPE F VALUE`, separated by tabs (or, in some
//! files, spaces). One compare-and-set register, named `x`:
//!
//! | log | row |
//! |---|---|
//! | `:invoke :read nil`, `:ok :read 3` (or `nil`) | `read`, ok value `3` (empty = nil) |
//! | `:invoke :write 3`, `:ok :write 3` | `write`, value `3` |
//! | `:invoke :cas [1 2]`, `:ok :cas [1 2]` | `cas`, value `1 2` |
//! | `:fail :cas [1 2]` | `cas` fail, value `1 2`, error `mismatch`: etcd's compare did not match, an observation of the register (see `histories/README.md`, "Failed cas and nil reads") |
//! | `:info :write :timed-out`, `:fail :read :timed-out` | that type, empty value, error `timed-out` (on `:invoke` or `:ok` it is an error: it would read as nil) |
//!
//! The files have no times: `time_ns` is the op's position in the file (0, 1, 2, ...).
//! Blank lines are skipped.

use super::{ConvertError, ConvertErrorKind, finish};
use crate::op::{Op, OpType, Process};
use crate::vocab::{ErrorWord, OpName};

/// The register name of these single-register histories.
pub const REGISTER_KEY: &str = "x";

/// Converts the text of a Porcupine `jepsen/etcd_NNN.log` file.
pub fn convert(text: &str) -> Result<Vec<Op>, ConvertError> {
    let mut rows = Vec::new();
    for (line, text) in (1u64..).zip(text.lines()) {
        if text.trim().is_empty() {
            continue;
        }
        let position = rows.len() as u64;
        rows.push((line, parse_line(line, text, position)?));
    }
    finish(rows)
}

fn parse_line(line: u64, text: &str, position: u64) -> Result<Op, ConvertError> {
    let error = |kind| ConvertError { line, kind };
    let bad = |field: &'static str, found: &str, expected: &'static str| {
        error(ConvertErrorKind::BadField {
            field,
            found: found.to_owned(),
            expected,
        })
    };
    let Some((_, rest)) = text.split_once("jepsen.util - ") else {
        let reason = "expected `INFO  jepsen.util - PROCESS TYPE F VALUE`".to_owned();
        return Err(error(ConvertErrorKind::Syntax(reason)));
    };
    let mut words = rest.split_whitespace();
    let (Some(process), Some(op_type), Some(f)) = (words.next(), words.next(), words.next()) else {
        let reason = "expected PROCESS TYPE F VALUE after `jepsen.util - `".to_owned();
        return Err(error(ConvertErrorKind::Syntax(reason)));
    };
    let value = words.collect::<Vec<_>>().join(" ");
    let process = match process.parse::<u64>() {
        Ok(id) if process.bytes().all(|b| b.is_ascii_digit()) => id,
        _ => return Err(bad("process", process, "a non-negative integer")),
    };
    let op_type = match op_type {
        ":invoke" => OpType::Invoke,
        ":ok" => OpType::Ok,
        ":fail" => OpType::Fail,
        ":info" => OpType::Info,
        other => return Err(bad("type", other, ":invoke, :ok, :fail or :info")),
    };
    let f = match f {
        ":read" | ":write" | ":cas" => f[1..].to_owned(),
        other => return Err(bad("f", other, ":read, :write or :cas")),
    };
    let (value, mut error_cell) = parse_value(&value)
        .ok_or_else(|| bad("value", &value, "nil, an integer, [OLD NEW] or :timed-out"))?;
    if !error_cell.is_empty() && matches!(op_type, OpType::Invoke | OpType::Ok) {
        // `:timed-out` says there is no result: an ok (or invoke) with it would read as a
        // value of nil.
        return Err(bad(
            "value",
            ":timed-out",
            "a value (:timed-out ends only :fail or :info)",
        ));
    }
    if op_type == OpType::Fail && f == OpName::Cas && error_cell.is_empty() {
        // Porcupine's etcd reading of `:fail :cas`: the compare did not match.
        error_cell = ErrorWord::Mismatch.to_string();
    }
    Ok(Op {
        index: position,
        time_ns: position,
        process: Process::Client(process),
        op_type,
        f,
        key: REGISTER_KEY.to_owned(),
        value,
        token: None,
        node: String::new(),
        error: error_cell,
    })
}

/// The value and error cells of a log value; `None` when it is none of the known forms.
fn parse_value(value: &str) -> Option<(String, String)> {
    let is_int = |s: &str| {
        let digits = s.strip_prefix('-').unwrap_or(s);
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    };
    match value {
        "nil" => Some((String::new(), String::new())),
        ":timed-out" => Some((String::new(), "timed-out".to_owned())),
        v if is_int(v) => Some((v.to_owned(), String::new())),
        v => {
            let inner = v.strip_prefix('[')?.strip_suffix(']')?;
            let mut parts = inner.split_whitespace();
            let (Some(old), Some(new), None) = (parts.next(), parts.next(), parts.next()) else {
                return None;
            };
            (is_int(old) && is_int(new)).then(|| (format!("{old} {new}"), String::new()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_porcupine_etcd_lines() {
        // Rule: histories/README.md "register": read ok value = the value read (empty =
        // nil); cas value = `OLD NEW`; timed-out completions carry error `timed-out`.
        let text = "\
INFO  jepsen.util - 0\t:invoke\t:read\tnil
INFO  jepsen.util - 1\t:invoke\t:cas\t[1 2]
INFO  jepsen.util - 0\t:ok\t:read\tnil
INFO  jepsen.util - 1\t:fail\t:cas\t[1 2]
INFO  jepsen.util - 2   :invoke :write  3

INFO  jepsen.util - 2\t:info\t:write\t:timed-out
";
        let ops = convert(text).unwrap();
        assert_eq!(ops.len(), 6);
        assert!(ops.iter().all(|op| op.key == REGISTER_KEY));
        assert_eq!(
            ops.iter().map(|op| op.time_ns).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 5]
        );
        assert_eq!((ops[1].f.as_str(), ops[1].value.as_str()), ("cas", "1 2"));
        assert_eq!((ops[2].op_type, ops[2].value.as_str()), (OpType::Ok, ""));
        assert_eq!(
            (ops[3].op_type, ops[3].error.as_str()),
            (OpType::Fail, ErrorWord::Mismatch.as_str())
        );
        assert_eq!(ops[4].value, "3");
        assert_eq!(
            (ops[5].op_type, ops[5].value.as_str(), ops[5].error.as_str()),
            (OpType::Info, "", "timed-out")
        );
    }

    #[test]
    fn bad_lines_are_rejected_with_their_line() {
        // Rule: convert module doc: each converter returns the line and the reason.
        let cases = [
            ("hello", 1, "expected `INFO  jepsen.util"),
            (
                "INFO  jepsen.util - 0\t:invoke",
                1,
                "expected PROCESS TYPE F VALUE",
            ),
            (
                "INFO  jepsen.util - x\t:invoke\t:read\tnil",
                1,
                "process is `x`",
            ),
            (
                "INFO  jepsen.util - 0\t:invoke\t:incr\t1",
                1,
                "f is `:incr`",
            ),
            (
                "INFO  jepsen.util - 0\t:invoke\t:cas\t[1 2 3]",
                1,
                "value is `[1 2 3]`",
            ),
            (
                "\nINFO  jepsen.util - 0\t:ok\t:read\t1",
                2,
                "with no open invoke",
            ),
        ];
        for (text, line, reason) in cases {
            let error = convert(text).unwrap_err();
            assert_eq!(error.line, line, "{text}: {error}");
            assert!(error.to_string().contains(reason), "{text}: {error}");
        }
    }
}
