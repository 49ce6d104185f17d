//! A self-contained HTML timeline of a history: one track per process, one bar per
//! operation, nemesis faults shaded, and the operations a failing check names outlined.
//!
//! One file, no network: the page, its CSS and its script are embedded in the binary with
//! `include_str!` (like Porcupine's `go:embed` visualisation), and the history goes in as
//! JSON.

use std::collections::BTreeSet;

use history::{Op, OpName, OpType, pair::Paired};
use serde::Serialize;

use crate::Check;
use crate::report::fmt_ns;

const PAGE: &str = include_str!("assets/timeline.html");
const CSS: &str = include_str!("assets/timeline.css");
const SCRIPT: &str = include_str!("assets/timeline.js");

#[derive(Serialize)]
struct Data {
    title: String,
    verdict: String,
    verdict_class: &'static str,
    explanation: String,
    start_ns: u64,
    end_ns: u64,
    processes: Vec<u64>,
    ops: Vec<OpData>,
    faults: Vec<FaultData>,
}

#[derive(Serialize)]
struct OpData {
    process: u64,
    call_ns: u64,
    return_ns: Option<u64>,
    class: &'static str,
    label: String,
    detail: String,
    marked: bool,
    /// The op's place in the longest legal order the search found (1-based), if in it.
    order: Option<usize>,
}

#[derive(Debug, Serialize)]
pub(crate) struct FaultData {
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub(crate) text: String,
}

/// The most operations a timeline shows (STYLE practice 13): a longer history is cut to
/// a window of this many operations around the first marked row, and the title says so.
pub const TIMELINE_OPS_MAX: usize = 20_000;

/// Renders the timeline of `paired` (from `history::pair::pair_with_faults`) with the
/// rows that `check` marks.
pub fn render(title: &str, paired: &Paired, check: &Check) -> String {
    let marked: BTreeSet<u64> = check.marked_rows().into_iter().collect();
    // The order found, by invoke row.
    let order: std::collections::HashMap<u64, usize> = check
        .results
        .iter()
        .flat_map(|r| r.order.iter())
        .enumerate()
        .map(|(i, &row)| (row, i + 1))
        .collect();
    let all = &paired.operations;
    let window = if all.len() <= TIMELINE_OPS_MAX {
        0..all.len()
    } else {
        let first_marked = marked
            .first()
            .map_or(0, |&row| all.partition_point(|op| op.invoke.index < row));
        let start = first_marked
            .saturating_sub(TIMELINE_OPS_MAX / 2)
            .min(all.len() - TIMELINE_OPS_MAX);
        start..start + TIMELINE_OPS_MAX
    };
    let shown = &all[window.clone()];
    let title = if shown.len() < all.len() {
        format!(
            "{title} (operations {}..{} of {}, around the first marked row)",
            window.start,
            window.end,
            all.len()
        )
    } else {
        title.to_string()
    };
    let faults: Vec<Op> = match (shown.first(), shown.last()) {
        (Some(first), Some(last)) if shown.len() < all.len() => {
            let (from, to) = (first.call_ns(), last.call_ns());
            let inside = |f: &&Op| f.time_ns >= from && f.time_ns <= to;
            paired.faults.iter().filter(inside).cloned().collect()
        }
        _ => paired.faults.clone(),
    };
    let end_ns = shown
        .iter()
        .map(|op| op.completion.as_ref().map_or(op.call_ns(), |c| c.time_ns))
        .chain(faults.iter().map(|f| f.time_ns))
        .max()
        .unwrap_or(0);
    let start_ns = shown
        .iter()
        .map(|op| op.call_ns())
        .chain(faults.iter().map(|f| f.time_ns))
        .min()
        .unwrap_or(0);
    let ops: Vec<OpData> = shown
        .iter()
        .map(|op| {
            let completion = op.completion.as_ref();
            let op_type = completion.map(|c| c.op_type);
            let class = match op_type {
                Some(OpType::Ok) => "ok",
                Some(OpType::Fail) => "fail",
                _ => "info",
            };
            let token = completion
                .and_then(|c| c.token)
                .or(op.invoke.token)
                .map_or(String::new(), |t| format!(" t{t}"));
            let is_marked = marked.contains(&op.invoke.index)
                || completion.is_some_and(|c| marked.contains(&c.index));
            let detail = format!(
                "{f} {key} by process {p}\ninvoke row {i} at {call}, value {value:?}\n{outcome}",
                f = op.f,
                key = op.key,
                p = op.process,
                i = op.invoke.index,
                call = fmt_ns(op.call_ns()),
                value = op.invoke.value,
                outcome = completion.map_or("never completed".to_string(), |c| format!(
                    "{} row {} at {}, value {:?}, token {}, node {:?}, error {:?}",
                    c.op_type,
                    c.index,
                    fmt_ns(c.time_ns),
                    c.value,
                    c.token.map_or("-".to_string(), |t| t.to_string()),
                    c.node,
                    c.error
                )),
            );
            OpData {
                process: op.process,
                call_ns: op.call_ns(),
                return_ns: op.return_ns(),
                class,
                label: label(op, &token),
                detail,
                marked: is_marked,
                order: order.get(&op.invoke.index).copied(),
            }
        })
        .collect();
    let processes: BTreeSet<u64> = ops.iter().map(|o| o.process).collect();
    let verdict_class = match check.verdict {
        crate::Verdict::Valid => "valid",
        crate::Verdict::Invalid => "invalid",
        crate::Verdict::Unknown { .. } => "unknown",
    };
    let data = Data {
        title,
        verdict: check.verdict.to_string(),
        verdict_class,
        explanation: check.explanation(),
        start_ns,
        end_ns,
        processes: processes.into_iter().collect(),
        ops,
        faults: fault_periods(&faults, end_ns),
    };
    // `</` must not appear inside the script element.
    let json = serde_json::to_string(&data)
        .expect("timeline data is plain strings and numbers")
        .replace("</", "<\\/");
    PAGE.replace("/*CSS*/", CSS)
        .replace("/*JS*/", SCRIPT)
        .replace("/*DATA*/", &json)
}

/// An op's label, with its values for registers and kv stores, as Porcupine's
/// visualization draws them: `cas(3, 0) -> fail`, `read() -> 3`, `put("a") -> ok`; lock
/// ops keep `acquire k1 t5`.
fn label(op: &history::Operation, token: &str) -> String {
    let completion = op.completion.as_ref();
    let outcome = match completion.map(|c| c.op_type) {
        Some(OpType::Ok) => "ok",
        Some(OpType::Fail) => "fail",
        _ => "unknown",
    };
    let read_value = || match completion {
        Some(c) if c.op_type == OpType::Ok && c.value.is_empty() => "nil".to_string(),
        Some(c) if c.op_type == OpType::Ok => c.value.to_string(),
        _ => outcome.to_string(),
    };
    // The single register of converted Porcupine etcd histories goes unnamed.
    let key = if op.key.is_empty() || op.key == history::convert::porcupine_etcd::REGISTER_KEY {
        String::new()
    } else {
        format!("{} ", op.key)
    };
    let value = op.invoke.value.trim();
    match OpName::parse(op.f.as_str()) {
        Some(OpName::Read) if op.invoke.token.is_none() => {
            format!("{key}read() -> {}", read_value())
        }
        Some(OpName::Write) if op.invoke.token.is_none() => {
            format!("{key}write({value}) -> {outcome}")
        }
        Some(OpName::Cas) => format!(
            "{key}cas({}) -> {outcome}",
            value.split_whitespace().collect::<Vec<_>>().join(", ")
        ),
        Some(OpName::Get) => format!(
            "{key}get() -> {:?}",
            completion.map_or("", |c| c.value.as_str())
        ),
        Some(OpName::Put | OpName::Append) => format!("{key}{}({value:?}) -> {outcome}", op.f),
        Some(OpName::Txn) => format!(
            "txn[{}] -> {outcome}",
            completion
                .filter(|_| outcome == "ok")
                .map_or(value, |c| c.value.as_str())
        ),
        _ => format!("{} {}{token}", op.f, op.key),
    }
}

/// Fault periods: from a starting verb to its paired ending verb (or the end of the
/// history), paired by the vocabulary ([`history::fault_spans`]); a lone verb is a short mark.
pub(crate) fn fault_periods(faults: &[Op], end_ns: u64) -> Vec<FaultData> {
    history::fault_spans(faults)
        .into_iter()
        .map(|span| {
            let text = super::fault_span_text(faults, &span, "never ended");
            FaultData {
                start_ns: span.start_ns,
                end_ns: span.end_ns.unwrap_or(end_ns),
                text,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use history::csv::HEADER;

    use super::*;

    #[test]
    fn the_timeline_is_one_file_with_the_data_and_the_marks() {
        // DESIGN "The checks": a failing check writes an HTML timeline that marks it.
        let csv = format!(
            "{HEADER}\n\
             0,1000,0,invoke,acquire,a,10000,,,\n\
             1,2000,0,ok,acquire,a,,5,n1,\n\
             2,2500,nemesis,info,partition,,n1 | n2 n3,,,\n\
             3,3000,1,invoke,acquire,a,10000,,,\n\
             4,4000,1,ok,acquire,a,,6,n1,\n\
             5,4500,nemesis,info,heal,,,,,\n"
        );
        let ops = history::csv::read_str(&csv).unwrap();
        let paired = history::pair::pair_with_faults(&ops).unwrap();
        let check = crate::check_operations(&paired.operations, &crate::Options::default());
        let html = render("two holders", &paired, &check);
        assert!(html.contains("<script id=\"data\" type=\"application/json\">{"));
        assert!(
            !html.contains("/*DATA*/") && !html.contains("/*JS*/") && !html.contains("/*CSS*/")
        );
        assert!(html.contains("\"marked\":true"));
        assert!(html.contains("partition n1 | n2 n3 (row 2, 0.000 s) .. heal  (row 5, 0.000 s)"));
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "no network assets"
        );
    }

    #[test]
    fn every_fault_kind_is_drawn_as_a_span_that_ends_at_its_pair() {
        // Issue 13: the timeline and the plot draw every fault's span (skew and strobe end
        // with reset-clock; pause-clients with resume-clients), one case per starting verb.
        for start in history::FaultVerb::ALL.iter().filter(|v| v.starts_fault()) {
            let end = start.ending().unwrap();
            let csv = format!(
                "{HEADER}\n\
                 0,1000,nemesis,info,{start},,n1,,,\n\
                 1,1500,nemesis,info,{start},,n1,,,\n\
                 2,9000,nemesis,info,{end},,n1,,,\n\
                 3,9500,nemesis,info,{end},,n1,,,\n"
            );
            let ops = history::csv::read_str(&csv).unwrap();
            let paired = history::pair::pair_with_faults(&ops).unwrap();
            let periods = fault_periods(&paired.faults, 20_000);
            assert_eq!(periods.len(), 1, "{start}: {periods:?}");
            assert_eq!((periods[0].start_ns, periods[0].end_ns), (1000, 9500));
            assert_eq!(
                periods[0].text,
                format!("{start} n1 (row 0, 0.000 s) .. {end} n1 (row 3, 0.000 s)")
            );
            let svg = crate::report::plot::latency_svg("run", &paired.operations, &paired.faults);
            assert!(svg.contains(&format!(
                "{start} n1 (row 0, 0.000 s) .. {end} n1 (row 3, 0.000 s)"
            )));
        }
    }

    #[test]
    fn a_long_history_is_cut_to_a_bounded_window() {
        // STYLE practice 13: everything has a limit, and reaching it is reported.
        let mut csv = format!("{HEADER}\n");
        let n = TIMELINE_OPS_MAX + 5000;
        for i in 0..n {
            let (a, b) = (2 * i, 2 * i + 1);
            csv.push_str(&format!("{a},{a},0,invoke,acquire,k{i},1000,,,\n"));
            csv.push_str(&format!("{b},{b},0,ok,acquire,k{i},,{},n1,\n", i + 1));
        }
        let ops = history::csv::read_str(&csv).unwrap();
        let paired = history::pair::pair_with_faults(&ops).unwrap();
        let check = crate::compose(vec![crate::CheckResult::invalid(
            history::CheckName::LeaseSafety,
            "marked".into(),
            vec![2 * (n as u64 - 1)],
        )]);
        let html = render("long", &paired, &check);
        let title = format!("operations 5000..{n} of {n}");
        assert!(html.contains(&title), "the title names the window");
        assert_eq!(html.matches("\"process\":0,").count(), TIMELINE_OPS_MAX);
        assert!(html.contains("\"marked\":true"));
    }
}
