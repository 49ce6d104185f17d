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

/// A fault span in words, for the plots and the timeline: the starting row, and its ending
/// row or `open` when the fault was never undone.
pub(crate) fn fault_span_text(
    faults: &[history::Op],
    span: &history::FaultSpan,
    open: &str,
) -> String {
    let start = &faults[span.start];
    match span.end {
        Some(at) if at == span.start => {
            format!("{} {} (row {})", start.f, start.value, start.index)
        }
        Some(at) => {
            let stop = &faults[at];
            format!(
                "{} {} (row {}) .. {} {} (row {})",
                start.f, start.value, start.index, stop.f, stop.value, stop.index
            )
        }
        None => format!("{} {} (row {}), {open}", start.f, start.value, start.index),
    }
}
