//! `locksmith check`'s behaviour (its arguments are parsed in the binary's
//! `commands/check.rs`): the files named, each through the one pipeline
//! ([`pipeline::check_path`]), printed as text or JSON, and DESIGN's exit code: 0 valid, 1
//! invalid, 2 unknown or could not run.
//!
//! One history prints its verdict, one line per check and the explanation, and writes the
//! reports asked for. Several (files, or folders searched for `*.csv`) print one verdict
//! line each, checked on every core, and a summary line; the exit code is the worst.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use checker::cli::{EXIT_COULD_NOT_RUN, expand_paths};
use checker::{Check, CheckError, ModelKind, Options, Verdict};
use serde::Serialize;

use crate::store::pipeline::{self, CheckedFile, ReportFiles};

/// What `locksmith check` was asked.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CheckArgs {
    /// The CSV histories, and folders searched (recursively) for `*.csv` files.
    pub paths: Vec<PathBuf>,
    /// `--model`; `Auto` infers it from each history's ops.
    pub model: ModelKind,
    /// `--init`: the registers' initial value (register, multi-register).
    pub init: Option<String>,
    /// `--drift`.
    pub drift: f64,
    /// `--json`: print the results as one JSON object (one per history).
    pub json: bool,
    /// `--timeline OUT.html` (one history only).
    pub timeline: Option<PathBuf>,
    /// `--plot OUT.svg`: the latency plot (one history only).
    pub plot: Option<PathBuf>,
    /// `--junit OUT.xml`: a JUnit report, one testcase per check.
    pub junit: Option<PathBuf>,
    /// `--no-phantom-release`: unseen grants of `info` acquires end only by their lease
    /// (see [`checker::Options::phantom_release`]).
    pub no_phantom_release: bool,
    /// `--session-timeout-ms`: the service's session timeout, for liveness rule S.
    pub session_timeout_ms: Option<u64>,
}

impl CheckArgs {
    /// Defaults for everything but the history.
    pub fn new(history: PathBuf) -> CheckArgs {
        CheckArgs::batch(vec![history])
    }

    /// Defaults for everything but the histories (files or folders).
    pub fn batch(paths: Vec<PathBuf>) -> CheckArgs {
        CheckArgs {
            paths,
            model: ModelKind::Auto,
            init: None,
            drift: 0.01,
            json: false,
            timeline: None,
            plot: None,
            junit: None,
            no_phantom_release: false,
            session_timeout_ms: None,
        }
    }

    fn options(&self) -> Options {
        Options::for_model(self.model)
            .with_drift(self.drift)
            .with_phantom_release(!self.no_phantom_release)
            .with_init(self.init.clone())
            .with_liveness(
                checker::liveness::LivenessOptions::default()
                    .with_session_timeout_ms(self.session_timeout_ms),
            )
    }

    fn report_files(&self) -> ReportFiles {
        ReportFiles {
            timeline: self.timeline.clone(),
            plot: self.plot.clone(),
            junit: self.junit.clone(),
        }
    }
}

#[derive(Serialize)]
struct JsonReport<'a> {
    history: String,
    model: ModelKind,
    drift: f64,
    ops: usize,
    elapsed_ms: f64,
    #[serde(flatten)]
    check: &'a Check,
}

/// Runs `locksmith check`: prints the verdict and explanations to `out` (progress and
/// errors to `err`) and returns the exit code. Several histories give one verdict line
/// each and the worst exit code (by the verdict merge: invalid 1, then unknown or could
/// not run 2, then valid 0).
pub fn run_check(args: &CheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match try_run_check(args, out, err) {
        Ok(code) => code,
        Err(error) => {
            let _ = writeln!(err, "{error}");
            EXIT_COULD_NOT_RUN
        }
    }
}

fn try_run_check(
    args: &CheckArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<i32, CheckError> {
    if !(0.0..1.0).contains(&args.drift) {
        return Err(CheckError::Usage(format!(
            "--drift {} is not a fraction in [0, 1)",
            args.drift
        )));
    }
    let files = expand_paths(&args.paths)?;
    match files.as_slice() {
        [] => Err(CheckError::Usage(
            "no history given (no file, or no *.csv in the folders)".into(),
        )),
        [one] if args.paths.len() == 1 && !args.paths[0].is_dir() => check_one(args, one, out, err),
        _ => {
            if args.timeline.is_some() || args.plot.is_some() {
                return Err(CheckError::Usage(
                    "--timeline and --plot take one history, not several".into(),
                ));
            }
            check_batch(args, &files, out)
        }
    }
}

/// One history's outcome in a batch.
struct BatchLine {
    verdict: Verdict,
    line: String,
    json: Option<String>,
}

fn check_batch(
    args: &CheckArgs,
    files: &[PathBuf],
    out: &mut dyn Write,
) -> Result<i32, CheckError> {
    let started = Instant::now();
    let options = args.options();
    // The files are independent: check them on every core, print in the given order.
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut lines: Vec<Option<BatchLine>> = (0..files.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(path) = files.get(i) else { break };
                        done.push((i, batch_line(args, &options, path)));
                    }
                    done
                })
            })
            .collect();
        for handle in handles {
            for (i, line) in handle.join().expect("batch_line catches its failures") {
                lines[i] = Some(line);
            }
        }
    });
    let mut verdict = Verdict::Valid;
    let io = |e| CheckError::Io {
        path: "<stdout>".into(),
        source: e,
    };
    let mut counts = [0usize; 3];
    for line in lines.into_iter().flatten() {
        counts[line.verdict.exit_code() as usize] += 1;
        match &line.json {
            Some(json) => writeln!(out, "{json}").map_err(io)?,
            None => writeln!(out, "{}", line.line).map_err(io)?,
        }
        verdict = verdict.merge(line.verdict);
    }
    if !args.json {
        writeln!(
            out,
            "{} histories: {} valid, {} invalid, {} unknown or could not run ({:.3} s)",
            files.len(),
            counts[0],
            counts[1],
            counts[2],
            started.elapsed().as_secs_f64()
        )
        .map_err(io)?;
    }
    Ok(verdict.exit_code())
}

fn batch_line(args: &CheckArgs, options: &Options, path: &Path) -> BatchLine {
    let title = path.display().to_string();
    let run = || pipeline::check_path(path, options, &ReportFiles::default(), &mut |_| {});
    match checker::verdict::guard(&title, run) {
        Ok(Ok(file)) => {
            let check = file.check();
            let seconds = file.elapsed.as_secs_f64();
            let ops = file.operations;
            let json = args
                .json
                .then(|| json_report(args, &title, ops, seconds, check));
            BatchLine {
                line: format!(
                    "{title}: {} ({}, {ops} ops, {seconds:.3} s)",
                    check.verdict,
                    model_name(check, args.model)
                ),
                verdict: file.output.verdict,
                json,
            }
        }
        Ok(Err(error)) => BatchLine {
            verdict: Verdict::unknown(error.to_string()),
            line: format!("{title}: could not run ({error})"),
            json: None,
        },
        Err(verdict) => BatchLine {
            line: format!("{title}: {verdict}"),
            verdict,
            json: None,
        },
    }
}

/// `register (inferred)` or `register`.
fn model_name(check: &Check, asked: ModelKind) -> String {
    match (check.model, asked) {
        (Some(model), ModelKind::Auto) => format!("{model} model, inferred"),
        (Some(model), _) => format!("{model} model"),
        (None, _) => "no model".to_string(),
    }
}

fn json_report(args: &CheckArgs, title: &str, ops: usize, seconds: f64, check: &Check) -> String {
    let report = JsonReport {
        history: title.to_string(),
        model: check.model.unwrap_or(args.model),
        drift: args.drift,
        ops,
        elapsed_ms: seconds * 1e3,
        check,
    };
    serde_json::to_string_pretty(&report).expect("the report is plain data")
}

fn check_one(
    args: &CheckArgs,
    path: &Path,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<i32, CheckError> {
    // A history the compact store cannot decide is paired and then searched: say so, since
    // that can take a while.
    let mut announce = |paired: &history::pair::Paired| {
        let _ = writeln!(
            err,
            "checking {} operations of {} with the {} model ...",
            paired.operations.len(),
            path.display(),
            args.model
        );
    };
    let file = pipeline::check_path(path, &args.options(), &args.report_files(), &mut announce)?;
    let title = path.display().to_string();
    let seconds = file.elapsed.as_secs_f64();
    let printed = if args.json {
        let json = json_report(args, &title, file.operations, seconds, file.check());
        writeln!(out, "{json}")
    } else {
        write_text(out, &title, &file, args.model, seconds)
    };
    printed.map_err(|e| CheckError::Io {
        path: "<stdout>".into(),
        source: e,
    })?;
    Ok(file.output.verdict.exit_code())
}

fn write_text(
    out: &mut dyn Write,
    title: &str,
    file: &CheckedFile,
    asked: ModelKind,
    seconds: f64,
) -> std::io::Result<()> {
    let check = file.check();
    writeln!(
        out,
        "{title}: {} ({}, {seconds:.3} s)",
        check.verdict,
        model_name(check, asked)
    )?;
    for result in &check.results {
        writeln!(
            out,
            "  {}: {} -- evaluates: {}",
            result.name,
            result.status(),
            result.name.evaluates()
        )?;
    }
    let explanation = &file.output.explanation;
    if !explanation.is_empty() {
        writeln!(out)?;
        write!(out, "{explanation}")?;
    }
    Ok(())
}
