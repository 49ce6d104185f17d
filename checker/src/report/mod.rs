//! Reports: explanations in words ([`explain`]), a self-contained HTML timeline
//! ([`timeline`]), SVG plots ([`plot`]), the message-flow diagram of the nodes' traces
//! ([`messages`]) and JUnit XML ([`junit`]).

pub mod explain;
pub mod junit;
pub mod messages;
pub mod plot;
pub mod timeline;

use history::Operation;

/// An instant of the history's clock as a person reads it: seconds since the run's start,
/// to the millisecond (`14.627 s`), as Jepsen's and Maelstrom's reports give them. Every
/// explanation, the timeline and the summary print instants through this one function; the
/// raw `time_ns` stays in history.csv and results.json (issue 28: "between 14626625438 ns
/// and 15091172706 ns" was the text a new user met). Rows, not times, are what a reader
/// follows to the exact figures, so a sub-millisecond difference shows in the row numbers
/// and in words ("while process 12 still held it"), not in the digits.
pub fn fmt_ns(ns: u64) -> String {
    if ns == u64::MAX {
        return "never".to_string();
    }
    let ms = ns.saturating_add(500_000) / 1_000_000;
    format!("{}.{:03} s", ms / 1000, ms % 1000)
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

/// A fault span in words, for the plots and the timeline: the starting row and its time,
/// and its ending row or `open` when the fault was never undone (`kill n2 (row 4, 1.250 s)
/// .. restart n2 (row 9, 3.000 s)`).
pub(crate) fn fault_span_text(
    faults: &[history::Op],
    span: &history::FaultSpan,
    open: &str,
) -> String {
    let start = &faults[span.start];
    let at = |op: &history::Op| format!("row {}, {}", op.index, fmt_ns(op.time_ns));
    match span.end {
        Some(end) if end == span.start => format!("{} {} ({})", start.f, start.value, at(start)),
        Some(end) => {
            let stop = &faults[end];
            format!(
                "{} {} ({}) .. {} {} ({})",
                start.f,
                start.value,
                at(start),
                stop.f,
                stop.value,
                at(stop)
            )
        }
        None => format!("{} {} ({}), {open}", start.f, start.value, at(start)),
    }
}

#[cfg(test)]
mod tests {
    use super::fmt_ns;

    #[test]
    fn instants_read_as_seconds_to_the_millisecond() {
        // Issue 28 item 2: seconds since the start, to the ms, rounded; never raw ns.
        assert_eq!(fmt_ns(0), "0.000 s");
        assert_eq!(fmt_ns(14_626_625_438), "14.627 s");
        assert_eq!(fmt_ns(1_000_000), "0.001 s");
        assert_eq!(fmt_ns(999_999_999), "1.000 s");
        // The largest instants saturate instead of overflowing.
        assert_eq!(fmt_ns(u64::MAX - 1), "18446744073.709 s");
        assert_eq!(fmt_ns(u64::MAX), "never");
    }
}
