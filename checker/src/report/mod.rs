//! Reports: explanations in words ([`explain`]), a self-contained HTML timeline
//! ([`timeline`]), SVG plots ([`plot`]) and JUnit XML ([`junit`]).

pub mod explain;
pub mod junit;
pub mod plot;
pub mod timeline;

use history::Operation;

/// A time of the history's clock, exact: `1500 ms` when it is a whole number of
/// milliseconds, `1500123 ns` otherwise.
pub fn fmt_ns(ns: u64) -> String {
    if ns == u64::MAX {
        "never".to_string()
    } else if ns % 1_000_000 == 0 {
        format!("{} ms", ns / 1_000_000)
    } else {
        format!("{ns} ns")
    }
}

/// The rows of a paired operation, in words: `rows 3-4`, `rows 3-4, info`, `row 3, never
/// completed`.
pub fn rows_of(op: &Operation) -> String {
    match &op.completion {
        Some(c) if c.op_type == history::OpType::Info => {
            format!("rows {}-{}, info", op.invoke.index, c.index)
        }
        Some(c) => format!("rows {}-{}", op.invoke.index, c.index),
        None => format!("row {}, never completed", op.invoke.index),
    }
}
