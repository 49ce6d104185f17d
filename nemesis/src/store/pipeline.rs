//! The one pipeline from a history to a typed report, used by `test` and `sim`: pair the
//! ops, run every check (`checker::check_paired`), merge in the run's own checks (node
//! health, trace replay), and write the reports into the run dir ([`RunDir::write_reports`]).
//!
//! A chaos run's history is read back from `history.csv`, so the checks see exactly the
//! file a user would give `locksmith check`; a simulated seed's comes from memory and is
//! written to `history.csv` only when its store is. The verdict stays a typed [`Verdict`]
//! until it is printed.

use std::path::Path;

use checker::{Check, CheckResult, Options, Verdict};
use history::Op;
use history::pair::Paired;

use crate::store::RunDir;

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

/// A history checked, with its paired form for the reports.
pub struct Checked {
    /// The outcome.
    pub output: CheckOutput,
    /// The paired history, when it paired.
    pub paired: Option<Paired>,
}

/// The history could not be read: unknown, with the run's other checks still merged in (an
/// invalid trace replay stays invalid), and their explanation after the reason.
fn unknown_with(reason: String, extra: Vec<CheckResult>) -> CheckOutput {
    let mut out = CheckOutput {
        verdict: Verdict::unknown(reason.clone()),
        explanation: reason,
        check: None,
        report_errors: Vec::new(),
    };
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

/// Checks `ops` with `options` and merges the run's own results (`extra`: node health,
/// trace replay) into the verdict.
pub fn check_ops(ops: &[Op], options: &Options, extra: Vec<CheckResult>) -> Checked {
    let paired = match history::pair::pair_with_faults(ops) {
        Ok(p) => p,
        Err(e) => {
            return Checked {
                output: unknown_with(format!("the history does not pair: {e}"), extra),
                paired: None,
            };
        }
    };
    let mut check = checker::check_paired(&paired, options);
    if !extra.is_empty() {
        let model = check.model;
        let mut results = std::mem::take(&mut check.results);
        results.extend(extra);
        check = checker::compose(results);
        check.model = model;
    }
    Checked {
        output: CheckOutput {
            verdict: check.verdict.clone(),
            explanation: check.explanation(),
            check: Some(check),
            report_errors: Vec::new(),
        },
        paired: Some(paired),
    }
}

/// Checks `dir/history.csv` (lock model, default drift, default liveness bounds), merges
/// `extra`, and writes the reports into `dir`.
pub fn check_history_with(dir: &Path, options: &Options, extra: Vec<CheckResult>) -> CheckOutput {
    let run = RunDir::at(dir);
    let path = run.file(RunDir::HISTORY);
    let ops = match history::csv::read_path(&path) {
        Ok(ops) => ops,
        Err(e) => return unknown_with(format!("{}: {e}", path.display()), extra),
    };
    let checked = check_ops(&ops, options, extra);
    write_reports(&run, &dir.display().to_string(), checked)
}

/// [`check_history_with`] with no extra checks.
pub fn check_history(dir: &Path, options: &Options) -> CheckOutput {
    check_history_with(dir, options, Vec::new())
}

/// Writes the reports of a checked history into `run` and returns the outcome with any
/// report that could not be written.
pub fn write_reports(run: &RunDir, title: &str, checked: Checked) -> CheckOutput {
    let mut output = checked.output;
    if let (Some(paired), Some(check)) = (&checked.paired, &output.check) {
        output.report_errors = run.write_reports(title, run.seed(), paired, check);
    }
    output
}
