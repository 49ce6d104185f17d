//! Redlock's failure in words: the first key on which lease safety found two holders, the
//! two processes, and a timeline of their ops on that key with the faults in between (a
//! client stall, a clock jump on a majority), as Kleppmann's 2016 article draws it.
//!
//! It reads only the history and the lease-safety result (its rows name the ops of each
//! violation, key by key); it judges nothing, the checker did.

use std::collections::BTreeSet;

use checker::{Check, Verdict};
use history::{CheckName, Op, OpType, Process};

/// The most timeline lines printed (the rest are counted).
const TIMELINE_LINES_MAX: usize = 40;

fn seconds(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

fn who(process: &Process) -> String {
    match process {
        Process::Client(p) => format!("process {p}"),
        Process::Nemesis => "nemesis".to_owned(),
    }
}

/// The invoke row of the op whose completion (or invoke) is `row`.
fn invoke_of(history: &[Op], row: usize) -> Option<&Op> {
    let op = history.get(row)?;
    if op.op_type == OpType::Invoke {
        return Some(op);
    }
    history[..row]
        .iter()
        .rev()
        .find(|o| o.process == op.process && o.op_type == OpType::Invoke)
}

/// The text, when the check's lease safety is invalid (see the module docs).
pub fn two_holders(history: &[Op], check: &Check) -> Option<String> {
    let lease = check.result(CheckName::LeaseSafety)?;
    if lease.verdict != Verdict::Invalid {
        return None;
    }
    let rows = violation_rows(history, &lease.rows)?;
    let key = history[rows[0]].key.clone();
    let mut processes: Vec<Process> = Vec::new();
    for row in &rows {
        let process = history[*row].process;
        if !processes.contains(&process) {
            processes.push(process);
        }
    }
    let start = rows
        .iter()
        .filter_map(|r| invoke_of(history, *r))
        .map(|op| op.time_ns)
        .min()?;
    let end = rows.iter().map(|r| history[*r].time_ns).max()?;
    let mut text = format!(
        "Redlock: two holders of key {key} at once: {} (the lease-safety violation above)\n",
        processes.iter().map(who).collect::<Vec<_>>().join(" and ")
    );
    let (holders, window_start) = holders(history, &key, &processes, start, end);
    text.push_str(&holders);
    text.push_str("timeline (seconds since the start; history rows):\n");
    let window = Window {
        key: &key,
        processes: &processes,
        marked: rows.iter().copied().collect(),
        start: window_start,
        end,
    };
    text.push_str(&timeline(history, &window));
    text.push_str(
        "(<- marks the rows the violation names. Redlock issues no fencing token, so the \
         resource cannot refuse the holder whose lease ended: a client stalled past its \
         validity, or a key expired early on a majority whose clocks jumped ahead, gives two \
         holders.)\n",
    );
    Some(text)
}

/// The rows of the violation to tell: lease safety reports one violation per key, its rows
/// one run per key; the first where two grants overlap (two holders by their acquires
/// alone), else the first.
fn violation_rows(history: &[Op], rows: &[u64]) -> Option<Vec<usize>> {
    let mut segments: Vec<Vec<usize>> = Vec::new();
    for row in rows.iter().map(|r| *r as usize) {
        let key = &history.get(row)?.key;
        match segments.last_mut() {
            Some(segment) if history[segment[0]].key == *key => segment.push(row),
            _ => segments.push(vec![row]),
        }
    }
    let two_grants = |segment: &&Vec<usize>| {
        let grants = segment
            .iter()
            .filter(|r| history[**r].f == "acquire" && history[**r].op_type == OpType::Ok)
            .count();
        grants >= 2 && segment.iter().all(|r| history[*r].f == "acquire")
    };
    segments
        .iter()
        .find(two_grants)
        .or(segments.first())
        .cloned()
}

/// One line per holder: its grant of `key` last before `end`, and until when its lease ran
/// by its own account; and the earliest of those grants' invokes (or `start`).
fn holders(
    history: &[Op],
    key: &str,
    processes: &[Process],
    start: u64,
    end: u64,
) -> (String, u64) {
    let mut text = String::new();
    let mut window_start = start;
    for process in processes {
        let grant = history.iter().rev().find(|op| {
            op.key == key
                && op.f == "acquire"
                && op.op_type == OpType::Ok
                && op.process == *process
                && op.time_ns <= end
        });
        let Some((grant, invoke)) =
            grant.and_then(|g| Some((g, invoke_of(history, g.index as usize)?)))
        else {
            continue;
        };
        window_start = window_start.min(invoke.time_ns);
        // An acquire's value is `lease_ms [wait_ms]`.
        let lease_ms: u64 = invoke
            .value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        text.push_str(&format!(
            "  {}: granted {key} at {} (lease {lease_ms} ms asked for at {}: it held the key by its own account until about {})\n",
            who(process),
            seconds(grant.time_ns),
            seconds(invoke.time_ns),
            seconds(invoke.time_ns + lease_ms * 1_000_000),
        ));
    }
    (text, window_start)
}

/// What the timeline shows: the two holders' ops on one key from `start` to `end`.
struct Window<'a> {
    key: &'a str,
    processes: &'a [Process],
    marked: BTreeSet<usize>,
    start: u64,
    end: u64,
}

/// The timeline's lines: the holders' ops on the key in the window, and every fault in
/// effect at some instant of it, from its start to its end (a client stall that began
/// before the first grant belongs to the story). Past [`TIMELINE_LINES_MAX`], the rows the
/// violation names, the faults and their neighbours stay, and the rest are counted.
fn timeline(history: &[Op], window: &Window<'_>) -> String {
    let nemesis: Vec<Op> = history
        .iter()
        .filter(|op| op.process == Process::Nemesis)
        .cloned()
        .collect();
    let faults: BTreeSet<u64> = history::vocab::fault_spans(&nemesis)
        .iter()
        .filter(|span| span.overlaps(window.start, window.end))
        .flat_map(|span| [Some(span.start), span.end])
        .flatten()
        .map(|at| nemesis[at].index)
        .collect();
    // (line, kept whatever the length)
    let mut lines: Vec<(String, bool)> = Vec::new();
    for op in history.iter() {
        let in_window = op.time_ns >= window.start && op.time_ns <= window.end;
        let line = match op.process {
            Process::Nemesis if faults.contains(&op.index) => {
                format!("nemesis {} {}", op.f, op.value)
            }
            Process::Client(_)
                if in_window && op.key == window.key && window.processes.contains(&op.process) =>
            {
                client_op(op)
            }
            _ => continue,
        };
        let marked = window.marked.contains(&(op.index as usize));
        let mark = if marked { " <-" } else { "" };
        lines.push((
            format!(
                "  {:>9}  row {:>5}  {line}{mark}\n",
                seconds(op.time_ns),
                op.index
            ),
            marked || op.process == Process::Nemesis,
        ));
    }
    if lines.len() > TIMELINE_LINES_MAX {
        let keep: Vec<bool> = (0..lines.len())
            .map(|i| {
                let near = |j: usize| lines.get(j).is_some_and(|(_, k)| *k);
                near(i) || near(i + 1) || (i > 0 && near(i - 1))
            })
            .collect();
        let mut kept = keep.iter();
        lines.retain(|_| *kept.next().unwrap_or(&true));
    }
    let mut text: String = lines.iter().map(|(line, _)| line.as_str()).collect();
    let shown = lines.len();
    let all = history
        .iter()
        .filter(|op| {
            faults.contains(&op.index)
                || (op.time_ns >= window.start
                    && op.time_ns <= window.end
                    && op.key == window.key
                    && window.processes.contains(&op.process))
        })
        .count();
    if shown < all {
        text.push_str(&format!(
            "  ({} more rows of the two processes on {} left out)\n",
            all - shown,
            window.key
        ));
    }
    text
}

/// One client row in words.
fn client_op(op: &Op) -> String {
    let detail = match (op.op_type, op.f.as_str()) {
        (OpType::Invoke, "acquire") => {
            let mut value = op.value.split_whitespace();
            let lease = value.next().unwrap_or("?");
            match value.next() {
                Some(wait) => format!(" lease {lease} ms, waiting up to {wait} ms"),
                None => format!(" lease {lease} ms"),
            }
        }
        (OpType::Ok, "write") => " (accepted)".to_owned(),
        (OpType::Fail | OpType::Info, _) => format!(" ({})", op.error),
        _ => String::new(),
    };
    format!(
        "{} {} {} {}{detail}",
        who(&op.process),
        op.op_type,
        op.f,
        op.key
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Process 0 holds k2 (lease 1000 ms); a majority's clocks jump 2 s ahead, the key
    /// expires there, and process 1 is granted k2 while process 0's lease still runs.
    const CLOCK_JUMP: &str = "index,time_ns,process,type,f,key,value,token,node,error
0,100000000,0,invoke,acquire,k2,1000,,,
1,110000000,0,ok,acquire,k2,,,,
2,150000000,2,invoke,acquire,k1,1000,,,
3,160000000,2,ok,acquire,k1,,,,
4,200000000,nemesis,info,skew,,n1 n3 n5 rate=1000/1000 jump=2000ms,,,
5,200100000,nemesis,info,skew,,n1 n3 n5 rate=1000/1000 jump=2000ms,,,
6,300000000,1,invoke,acquire,k2,1000 500,,,
7,310000000,1,ok,acquire,k2,,,,
8,400000000,nemesis,info,reset-clock,,n1 n3 n5 rate=1000/1000 jump=0ms,,,
9,400100000,nemesis,info,reset-clock,,n1 n3 n5 rate=1000/1000 jump=0ms,,,
10,500000000,0,invoke,release,k2,,,,
11,510000000,0,fail,release,k2,,,,not-holder
";

    #[test]
    fn two_grants_of_one_key_are_told_with_the_clock_jump_between_them() {
        let ops = history::csv::read_str(CLOCK_JUMP).expect("reads");
        let check = checker::check(&ops, &checker::Options::for_model(checker::ModelKind::Lock))
            .expect("pairs");
        assert_eq!(check.verdict, Verdict::Invalid, "{}", check.explanation());
        let text = two_holders(&ops, &check).expect("a story");
        for part in [
            "two holders of key k2 at once: process 0 and process 1",
            "process 0: granted k2 at 0.110 s (lease 1000 ms asked for at 0.100 s",
            "until about 1.100 s",
            "process 1 invoke acquire k2 lease 1000 ms, waiting up to 500 ms <-",
            "nemesis skew n1 n3 n5 rate=1000/1000 jump=2000ms",
            "nemesis reset-clock",
        ] {
            assert!(text.contains(part), "{part:?} in:\n{text}");
        }
        // Another key's ops and the second row of each fault are left out.
        assert!(!text.contains("k1"), "{text}");
        assert_eq!(text.matches("nemesis skew").count(), 1, "{text}");
    }

    #[test]
    fn a_long_timeline_keeps_the_violation_and_the_faults_and_counts_the_rest() {
        // Process 0 writes 60 times between its grant and the clock jump.
        let mut csv: Vec<String> = CLOCK_JUMP.lines().take(3).map(str::to_owned).collect();
        let mut index = 2;
        for i in 0..60u64 {
            let t = 111_000_000 + i * 1_000_000;
            csv.push(format!("{index},{t},0,invoke,write,k2,0.{i},,,"));
            csv.push(format!("{},{},0,ok,write,k2,,,,", index + 1, t + 500_000));
            index += 2;
        }
        for line in CLOCK_JUMP.lines().skip(5) {
            let rest = line.split_once(',').map_or("", |(_, r)| r);
            csv.push(format!("{index},{rest}"));
            index += 1;
        }
        let text = csv.join("\n") + "\n";
        let ops = history::csv::read_str(&text).expect("reads");
        let check = checker::check(&ops, &checker::Options::for_model(checker::ModelKind::Lock))
            .expect("pairs");
        let story = two_holders(&ops, &check).expect("a story");
        let lines = story.lines().filter(|l| l.contains("  row ")).count();
        assert!(lines <= TIMELINE_LINES_MAX, "{lines} lines:\n{story}");
        assert_eq!(story.matches(" <-").count(), 4, "{story}");
        assert!(story.contains("nemesis skew"), "{story}");
        assert!(
            story.contains("more rows of the two processes on k2 left out"),
            "{story}"
        );
    }

    #[test]
    fn a_valid_history_has_no_story() {
        let valid: String = CLOCK_JUMP
            .lines()
            .take(4)
            .map(|l| format!("{l}\n"))
            .collect();
        let ops = history::csv::read_str(&valid).expect("reads");
        let check = checker::check(&ops, &checker::Options::for_model(checker::ModelKind::Lock))
            .expect("pairs");
        assert_eq!(check.verdict, Verdict::Valid, "{}", check.explanation());
        assert!(two_holders(&ops, &check).is_none());
    }
}
