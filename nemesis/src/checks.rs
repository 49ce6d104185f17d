//! Runs every check on a recorded history through the checker's one entry point
//! (`checker::check_paired`, as `locksmith check` does) and writes the reports
//! (`timeline.html`, and `latency.svg`: latency over time with nemesis periods shaded).
//!
//! The history is read back from `history.csv`, so the checks see exactly the file a user
//! would give `locksmith check`. The verdict stays a typed [`Verdict`] until it is printed.

use std::path::Path;

use checker::{Check, Options, Verdict};

use crate::recorder::write_file;

/// The checks' result, ready for results.json and the exit code.
#[derive(Clone, Debug)]
pub struct CheckOutput {
    /// The merged verdict of every check (unknown when the history could not be read).
    pub verdict: Verdict,
    /// The explanation in words (empty when valid).
    pub explanation: String,
    /// Per-check results; `None` when the history could not be read.
    pub check: Option<Check>,
    /// Reports that could not be written.
    pub report_errors: Vec<String>,
}

fn unknown(reason: String) -> CheckOutput {
    CheckOutput {
        verdict: Verdict::unknown(reason.clone()),
        explanation: reason,
        check: None,
        report_errors: Vec::new(),
    }
}

/// Checks `dir/history.csv` (lock model, default drift, default liveness bounds) and
/// writes `timeline.html` and `latency.svg` into `dir`.
pub fn check_history(dir: &Path, options: &Options) -> CheckOutput {
    let path = dir.join("history.csv");
    let ops = match history::csv::read_path(&path) {
        Ok(ops) => ops,
        Err(e) => return unknown(format!("{}: {e}", path.display())),
    };
    let paired = match history::pair::pair_with_faults(&ops) {
        Ok(p) => p,
        Err(e) => return unknown(format!("{}: {e}", path.display())),
    };
    let check = checker::check_paired(&paired, options);
    let title = dir.display().to_string();
    let mut report_errors = Vec::new();
    let timeline = checker::report::timeline::render(&title, &paired, &check);
    if let Err(e) = write_file(&dir.join("timeline.html"), &timeline) {
        report_errors.push(e.to_string());
    }
    let plot = checker::report::plot::latency_svg(&title, &paired.operations, &paired.faults);
    if let Err(e) = write_file(&dir.join("latency.svg"), &plot) {
        report_errors.push(e.to_string());
    }
    CheckOutput {
        verdict: check.verdict.clone(),
        explanation: check.explanation(),
        check: Some(check),
        report_errors,
    }
}
