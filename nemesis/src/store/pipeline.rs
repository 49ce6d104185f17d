//! The one pipeline from a history to a typed report, used by `test`, `sim` and `check`:
//! pair the ops, run every check (`checker::check_paired`), merge in the run's own checks
//! (node health, trace replay), and write the reports: into the run dir
//! ([`RunDir::write_reports`]), or into the files `locksmith check` names ([`ReportFiles`]).
//!
//! The entry points: [`check_ops`] (ops in memory: `sim`), [`check_history_with`] (a run
//! dir's `history.csv`: `test`) and [`check_path`] (any CSV history: `check`). All three
//! check through [`check_paired_with`].
//!
//! A chaos run's history is read back from `history.csv`, so the checks see exactly the
//! file a user would give `locksmith check`; a simulated seed's comes from memory and is
//! written to `history.csv` only when its store is. The verdict stays a typed [`Verdict`]
//! until it is printed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use checker::cli::ReadForCheck;
use checker::report::{junit, plot, timeline};
use checker::{Check, CheckError, CheckResult, Options, Verdict};
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
    check_paired_with(paired, options, extra)
}

/// Checks a paired history with `options` and merges the run's own results (`extra`) into
/// the verdict: the one check every entry point ends in.
///
/// A history with nothing to check stays at most `unknown` whatever the run's own results
/// say: healthy nodes and a replay the model allows do not make a run whose history judged
/// nothing valid (found by the review of the checker's judgements, 2026-12-07).
pub fn check_paired_with(paired: Paired, options: &Options, extra: Vec<CheckResult>) -> Checked {
    let mut check = checker::check_paired(&paired, options);
    if !extra.is_empty() {
        let model = check.model;
        let history_verdict = check.verdict.clone();
        let history_checked = check.results.iter().any(|r| r.checked);
        let mut results = std::mem::take(&mut check.results);
        results.extend(extra);
        check = checker::compose(results);
        check.model = model;
        if !history_checked && check.verdict.is_valid() {
            check.verdict = history_verdict;
        }
    }
    Checked {
        output: CheckOutput::of(check),
        paired: Some(paired),
    }
}

impl CheckOutput {
    /// The outcome of a check that ran.
    fn of(check: Check) -> CheckOutput {
        CheckOutput {
            verdict: check.verdict.clone(),
            explanation: check.explanation(),
            check: Some(check),
            report_errors: Vec::new(),
        }
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

/// The report files `locksmith check` writes (`--timeline`, `--plot`, `--junit`); none by
/// default.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ReportFiles {
    /// The HTML timeline, the failing ops marked.
    pub timeline: Option<PathBuf>,
    /// The SVG plot of latency over time, nemesis periods shaded.
    pub plot: Option<PathBuf>,
    /// The JUnit XML report: one testcase per check.
    pub junit: Option<PathBuf>,
}

impl ReportFiles {
    /// Whether a report draws the history's operations (so they must be kept).
    fn draw_operations(&self) -> bool {
        self.timeline.is_some() || self.plot.is_some()
    }
}

/// A CSV history checked by [`check_path`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CheckedFile {
    /// The outcome (`check` is always there: a history that does not read is an `Err`).
    pub output: CheckOutput,
    /// The history's client operations.
    pub operations: usize,
    /// How long reading and checking took (the reports not included).
    pub elapsed: Duration,
}

impl CheckedFile {
    /// The per-check results.
    ///
    /// # Panics
    ///
    /// Never for a `CheckedFile` of [`check_path`], which always has them.
    pub fn check(&self) -> &Check {
        self.output
            .check
            .as_ref()
            .expect("check_path returns Err for a history it could not check")
    }
}

/// Checks the CSV history at `path` (`locksmith check`) and writes the report `files`.
///
/// A lock history the compact store decides on its own is checked in one pass and never
/// paired (unless a report draws its operations); any other history is paired, handed to
/// `on_paired` (to say that a long check starts) and checked by [`check_paired_with`].
/// A history that does not read (`FILE:line:column: reason`) or a report that cannot be
/// written is an `Err`: the command could not do what it was asked.
pub fn check_path(
    path: &Path,
    options: &Options,
    files: &ReportFiles,
    on_paired: &mut dyn FnMut(&Paired),
) -> Result<CheckedFile, CheckError> {
    let started = Instant::now();
    let (checked, operations) =
        match checker::cli::read_for_check(path, options, files.draw_operations())? {
            ReadForCheck::Decided(fast) => {
                let output = CheckOutput::of(fast.check);
                let checked = Checked {
                    output,
                    paired: None,
                };
                (checked, fast.operations)
            }
            ReadForCheck::Paired(paired) => {
                on_paired(&paired);
                let operations = paired.operations.len();
                (check_paired_with(paired, options, Vec::new()), operations)
            }
        };
    let elapsed = started.elapsed();
    write_report_files(files, &path.display().to_string(), &checked, elapsed)?;
    Ok(CheckedFile {
        output: checked.output,
        operations,
        elapsed,
    })
}

/// Writes the report `files` of a checked history titled `title`, in order (timeline, plot,
/// JUnit); the first that cannot be written is the error.
pub fn write_report_files(
    files: &ReportFiles,
    title: &str,
    checked: &Checked,
    elapsed: Duration,
) -> Result<(), CheckError> {
    let Some(check) = &checked.output.check else {
        return Ok(());
    };
    let io = |path: &Path, source| CheckError::Io {
        path: path.display().to_string(),
        source,
    };
    if let (Some(path), Some(paired)) = (&files.timeline, &checked.paired) {
        std::fs::write(path, timeline::render(title, paired, check)).map_err(|e| io(path, e))?;
    }
    if let (Some(path), Some(paired)) = (&files.plot, &checked.paired) {
        let svg = plot::latency_svg(title, &paired.operations, &paired.faults);
        std::fs::write(path, svg).map_err(|e| io(path, e))?;
    }
    if let Some(path) = &files.junit {
        let name = format!("locksmith check {title}");
        let suite = junit::Suite::from_check(&name, title, check, elapsed.as_secs_f64());
        junit::write(path, &[suite]).map_err(|e| io(path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(csv: &str) -> Vec<Op> {
        let rows = history::csv::Reader::new(csv.as_bytes());
        rows.collect::<Result<_, _>>()
            .expect("a well-formed history")
    }

    const HEADER: &str = "index,time_ns,process,type,f,key,value,token,node,error\n";

    #[test]
    fn a_history_with_nothing_to_check_is_not_made_valid_by_healthy_nodes() {
        // One acquire that never returned: no lock op constrains the lock.
        let pending = ops(&format!("{HEADER}0,1000000,0,invoke,acquire,a,5000,,,\n"));
        let healthy = || CheckResult::new(history::CheckName::NodeHealth, Verdict::Valid);
        let checked = check_ops(&pending, &Options::default(), vec![healthy()]);
        assert!(
            matches!(&checked.output.verdict, Verdict::Unknown { reason }
                if reason.contains("nothing was checked")),
            "{:?}",
            checked.output.verdict
        );
        // An invalid result of the run still makes it invalid.
        let stopped = CheckResult::invalid(
            history::CheckName::NodeHealth,
            "n1 exited".into(),
            Vec::new(),
        );
        let checked = check_ops(&pending, &Options::default(), vec![stopped]);
        assert!(
            matches!(checked.output.verdict, Verdict::Invalid),
            "{:?}",
            checked.output.verdict
        );
        // A history that judged something keeps the merged verdict.
        let granted = ops(&format!(
            "{HEADER}0,1000000,0,invoke,acquire,a,5000,,,\n1,2000000,0,ok,acquire,a,,1,n1,\n"
        ));
        let checked = check_ops(&granted, &Options::default(), vec![healthy()]);
        assert!(
            checked.output.verdict.is_valid(),
            "{:?}",
            checked.output.verdict
        );
    }
}
