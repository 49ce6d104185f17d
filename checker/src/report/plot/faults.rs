//! Fault spans for the plots: each nemesis fault from its starting verb to the verb that
//! undoes it, with its kind, so that every plot shades and labels it the same way.

use history::{FaultVerb, Op};

/// The verb that undoes a fault begun by `verb`; `None` for a verb that starts nothing.
/// From the history's vocabulary ([`history::FaultVerb::ending`]).
pub fn ending_verb(verb: &str) -> Option<&'static str> {
    history::FaultVerb::parse(verb)?
        .ending()
        .map(history::FaultVerb::as_str)
}

/// True for a verb that undoes a fault (restart, resume, heal, ...).
pub fn is_ending_verb(verb: &str) -> bool {
    history::FaultVerb::parse(verb).is_some_and(history::FaultVerb::ends_fault)
}

/// One fault, from its first row to the last row of the verb that undid it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSpan {
    /// Its kind: the starting verb (`kill`, `pause`, `pause-clients`, `partition`, `skew`,
    /// `strobe`), or the verb of a lone row.
    pub kind: String,
    /// When it began (the history's clock, ns).
    pub start_ns: u64,
    /// When it was undone, or the history's end for a fault never undone.
    pub end_ns: u64,
    /// In words, with its rows: `kill n1 (row 2) .. restart n1 (row 9)`.
    pub text: String,
}

/// The spans of `faults` (the nemesis rows, in history order), paired by the history's
/// vocabulary ([`history::fault_spans`]); `end_ns` closes a fault that was never undone.
pub fn fault_spans(faults: &[Op], end_ns: u64) -> Vec<FaultSpan> {
    let mut out: Vec<FaultSpan> = history::fault_spans(faults)
        .into_iter()
        .map(|span| {
            let start = &faults[span.start];
            let text = crate::report::fault_span_text(faults, &span, "never undone");
            FaultSpan {
                kind: start.f.clone(),
                start_ns: span.start_ns,
                end_ns: span.end_ns.unwrap_or(end_ns).max(span.start_ns),
                text,
            }
        })
        .collect();
    out.sort_by_key(|s| s.start_ns);
    out
}

/// The kinds of `spans`, in the order of [`KIND_ORDER`] and then by name.
pub fn kinds(spans: &[FaultSpan]) -> Vec<String> {
    let mut kinds: Vec<String> = spans.iter().map(|s| s.kind.clone()).collect();
    kinds.sort_by_key(|k| {
        let rank = KIND_ORDER
            .iter()
            .position(|o| k == o)
            .unwrap_or(KIND_ORDER.len());
        (rank, k.clone())
    });
    kinds.dedup();
    kinds
}

/// The usual fault kinds, in the order the legend lists them.
pub const KIND_ORDER: [FaultVerb; 6] = [
    FaultVerb::Kill,
    FaultVerb::Pause,
    FaultVerb::PauseClients,
    FaultVerb::Partition,
    FaultVerb::Skew,
    FaultVerb::Strobe,
];

/// The colour of a fault kind; unlike the outcome colours (green, red, grey), so a shaded
/// span never reads as a kind of op.
pub fn kind_colour(kind: &str) -> &'static str {
    match FaultVerb::parse(kind) {
        Some(FaultVerb::Kill) => "#8250df",
        Some(FaultVerb::Pause) => "#bf8700",
        Some(FaultVerb::PauseClients) => "#fb8f44",
        Some(FaultVerb::Partition) => "#0969da",
        Some(FaultVerb::Skew) => "#1b7c83",
        Some(FaultVerb::Strobe) => "#e85aad",
        _ => "#57606a",
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The nemesis rows of a history of these CSV rows (no header); also the clock plot's.
    pub(in crate::report::plot) fn faults(csv_rows: &str) -> Vec<Op> {
        let csv = format!("{}\n{csv_rows}", history::csv::HEADER);
        let ops = history::csv::read_str(&csv).unwrap();
        history::pair::pair_with_faults(&ops).unwrap().faults
    }

    #[test]
    fn every_harness_pair_closes_its_span_and_the_second_row_moves_the_end() {
        let rows = "0,10,nemesis,info,kill,,n1,,,\n\
                    1,12,nemesis,info,kill,,n1,,,\n\
                    2,20,nemesis,info,restart,,n1,,,\n\
                    3,25,nemesis,info,restart,,n1,,,\n\
                    4,30,nemesis,info,skew,,n2 +200ms,,,\n\
                    5,31,nemesis,info,skew,,n2 +200ms,,,\n\
                    6,40,nemesis,info,reset-clock,,n2,,,\n\
                    7,41,nemesis,info,reset-clock,,n2,,,\n\
                    8,50,nemesis,info,pause-clients,,c1,,,\n\
                    9,51,nemesis,info,pause-clients,,c1,,,\n\
                    10,60,nemesis,info,resume-clients,,c1,,,\n\
                    11,61,nemesis,info,resume-clients,,c1,,,\n\
                    12,70,nemesis,info,partition,,n1 | n2 n3,,,\n\
                    13,71,nemesis,info,partition,,n1 | n2 n3,,,\n\
                    14,80,nemesis,info,restart,,,,,\n\
                    15,81,nemesis,info,resume,,,,,\n\
                    16,82,nemesis,info,bump,,n1,,,\n";
        let spans = fault_spans(&faults(rows), 100);
        let got: Vec<(&str, u64, u64)> = spans
            .iter()
            .map(|s| (s.kind.as_str(), s.start_ns, s.end_ns))
            .collect();
        assert_eq!(
            got,
            vec![
                ("kill", 10, 25),
                ("skew", 30, 41),
                ("pause-clients", 50, 61),
                ("partition", 70, 100),
                ("bump", 82, 82),
            ]
        );
        assert!(spans[3].text.ends_with("never undone"));
        assert_eq!(
            kinds(&spans),
            vec!["kill", "pause-clients", "partition", "skew", "bump"],
            "the final schedule's restart and resume undo nothing open: no kind of their own"
        );
    }

    #[test]
    fn a_reset_clock_undoes_every_clock_fault_and_a_second_one_nothing() {
        // The harness's reset-clock resets every node its family skewed or strobed.
        let rows = "0,10,nemesis,info,strobe,,n3 n4 delta=32ms,,,\n\
                    1,20,nemesis,info,skew,,n1 rate=250/1000,,,\n\
                    2,30,nemesis,info,reset-clock,,n1 n3 n4,,,\n\
                    3,31,nemesis,info,reset-clock,,n1 n3 n4,,,\n\
                    4,40,nemesis,info,reset-clock,,,,,\n";
        let spans = fault_spans(&faults(rows), 100);
        let got: Vec<(&str, u64, u64)> = spans
            .iter()
            .map(|s| (s.kind.as_str(), s.start_ns, s.end_ns))
            .collect();
        assert_eq!(got, vec![("strobe", 10, 31), ("skew", 20, 31)]);
    }

    #[test]
    fn skew_is_not_paired_with_unskew() {
        // The old timeline paired skew with `unskew`, a verb the harness never writes.
        assert_eq!(ending_verb("skew"), Some("reset-clock"));
        assert_eq!(ending_verb("strobe"), Some("reset-clock"));
        assert_eq!(ending_verb("restart"), None);
    }
}
