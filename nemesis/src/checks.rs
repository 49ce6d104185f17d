//! Runs every check on a recorded history and writes the reports (`timeline.html`, and
//! the plots `latency.svg`, `latency-quantiles.svg`, `rate.svg`: see checker::report::plot).
//!
//! The history is read back from `history.csv`, so the checks see exactly the file a user
//! would give `locksmith check`. The verdict stays a typed [`Verdict`] until it is printed.

use std::path::Path;

use checker::{Check, CheckResult, Options, Verdict};

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

/// The history could not be read: unknown, with the run's other checks still merged in (an
/// invalid trace replay stays invalid), and their explanation after the reason.
fn unknown_with(reason: String, extra: Vec<CheckResult>) -> CheckOutput {
    let mut out = unknown(reason);
    if !extra.is_empty() {
        let others = checker::compose(extra);
        let text = others.explanation();
        if !text.is_empty() {
            out.explanation.push('\n');
            out.explanation.push_str(&text);
        }
        out.verdict = out.verdict.merge(others.verdict);
    }
    out
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
    check_history_with(dir, options, Vec::new())
}

/// [`check_history`], with the results of the run's other checks (`trace replay`) merged in
/// before the reports are written, so that the timeline shows them too.
pub fn check_history_with(dir: &Path, options: &Options, extra: Vec<CheckResult>) -> CheckOutput {
    let path = dir.join("history.csv");
    let ops = match history::csv::read_path(&path) {
        Ok(ops) => ops,
        Err(e) => return unknown_with(format!("{}: {e}", path.display()), extra),
    };
    let paired = match history::pair::pair_with_faults(&ops) {
        Ok(p) => p,
        Err(e) => return unknown_with(format!("{}: {e}", path.display()), extra),
    };
    let mut check = checker::check_paired(&paired, options);
    if !extra.is_empty() {
        let model = check.model;
        let mut results = std::mem::take(&mut check.results);
        results.extend(extra);
        check = checker::compose(results);
        check.model = model;
    }
    let title = dir.display().to_string();
    let mut report_errors = Vec::new();
    let timeline = checker::report::timeline::render(&title, &paired, &check);
    if let Err(e) = write_file(&dir.join("timeline.html"), &timeline) {
        report_errors.push(e.to_string());
    }
    let plot_title = checker::report::plot::PlotTitle {
        test: dir_test_name(dir),
        seed: std::fs::read_to_string(dir.join("seed.txt"))
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        verdict: check.verdict.as_str().to_owned(),
    };
    let (operations, faults) = (&paired.operations, &paired.faults);
    if let Err(e) = checker::report::plot::write_all(dir, &plot_title, operations, faults) {
        report_errors.push(format!("{}: {e}", dir.display()));
    }
    CheckOutput {
        verdict: check.verdict.clone(),
        explanation: check.explanation(),
        check: Some(check),
        report_errors,
    }
}

/// The test's name of `store/<test>/<timestamp>/`.
fn dir_test_name(dir: &Path) -> String {
    dir.parent().and_then(|p| p.file_name()).map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
