//! `locksmith check` and `locksmith convert`, minus the argument parsing (which lives in
//! `nemesis/src/cmd_check.rs`). Each returns DESIGN's exit code: 0 valid, 1 invalid, 2
//! unknown or could not run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use history::Op;
use serde::Serialize;

use crate::report::{junit, plot, timeline};
use crate::{Check, CheckError, ModelKind, Options};

/// The exit code of a run that could not happen (bad file, bad argument).
pub const EXIT_COULD_NOT_RUN: i32 = 2;

/// What `locksmith check` was asked.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CheckArgs {
    /// The CSV history.
    pub history: PathBuf,
    /// `--model`.
    pub model: ModelKind,
    /// `--drift`.
    pub drift: f64,
    /// `--json`: print the results as one JSON object.
    pub json: bool,
    /// `--timeline OUT.html`.
    pub timeline: Option<PathBuf>,
    /// `--plot OUT.svg`: the latency plot.
    pub plot: Option<PathBuf>,
    /// `--junit OUT.xml`: a JUnit report, one testcase per check.
    pub junit: Option<PathBuf>,
    /// `--no-phantom-release`: unseen grants of `info` acquires end only by their lease
    /// (see [`crate::Options::phantom_release`]).
    pub no_phantom_release: bool,
}

impl CheckArgs {
    /// Defaults for everything but the history.
    pub fn new(history: PathBuf) -> CheckArgs {
        CheckArgs {
            history,
            model: ModelKind::Lock,
            drift: 0.01,
            json: false,
            timeline: None,
            plot: None,
            junit: None,
            no_phantom_release: false,
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

/// Reads a CSV history; a bad file gives `FILE:line:column: reason`.
pub fn read_history(path: &Path) -> Result<Vec<Op>, CheckError> {
    history::csv::read_path(path).map_err(|source| CheckError::Parse {
        path: path.display().to_string(),
        source,
    })
}

/// Runs `locksmith check`: prints the verdict and explanations to `out` (progress and
/// errors to `err`) and returns the exit code.
pub fn run_check(args: &CheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match try_check(args, out, err) {
        Ok(code) => code,
        Err(error) => {
            let _ = writeln!(err, "{error}");
            EXIT_COULD_NOT_RUN
        }
    }
}

fn try_check(
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
    let started = Instant::now();
    let ops = read_history(&args.history)?;
    let paired = history::pair::pair_with_faults(&ops)?;
    let _ = writeln!(
        err,
        "checking {} operations of {} with the {} model ...",
        paired.operations.len(),
        args.history.display(),
        args.model
    );
    let options = Options::for_model(args.model)
        .with_drift(args.drift)
        .with_phantom_release(!args.no_phantom_release);
    let check = crate::check_operations(&paired.operations, &options);
    let elapsed = started.elapsed();
    let io = |path: &Path, source| CheckError::Io {
        path: path.display().to_string(),
        source,
    };
    let title = args.history.display().to_string();
    if let Some(path) = &args.timeline {
        std::fs::write(path, timeline::render(&title, &paired, &check)).map_err(|e| io(path, e))?;
    }
    if let Some(path) = &args.plot {
        let svg = plot::latency_svg(&title, &paired.operations, &paired.faults);
        std::fs::write(path, svg).map_err(|e| io(path, e))?;
    }
    if let Some(path) = &args.junit {
        let name = format!("locksmith check {title}");
        let suite = junit::Suite::from_check(&name, &title, &check, elapsed.as_secs_f64());
        junit::write(path, &[suite]).map_err(|e| io(path, e))?;
    }
    let printed = if args.json {
        let report = JsonReport {
            history: title,
            model: args.model,
            drift: args.drift,
            ops: paired.operations.len(),
            elapsed_ms: elapsed.as_secs_f64() * 1e3,
            check: &check,
        };
        let json = serde_json::to_string_pretty(&report).expect("the report is plain data");
        writeln!(out, "{json}")
    } else {
        write_text(out, &title, &check, elapsed.as_secs_f64())
    };
    printed.map_err(|e| io(Path::new("<stdout>"), e))?;
    Ok(check.verdict.exit_code())
}

fn write_text(
    out: &mut dyn Write,
    title: &str,
    check: &Check,
    seconds: f64,
) -> std::io::Result<()> {
    writeln!(out, "{title}: {} ({seconds:.3} s)", check.verdict)?;
    for result in &check.results {
        writeln!(out, "  {}: {}", result.name, result.verdict)?;
    }
    let explanation = check.explanation();
    if !explanation.is_empty() {
        writeln!(out)?;
        write!(out, "{explanation}")?;
    }
    Ok(())
}

/// The foreign formats `locksmith convert --from` knows.
pub const CONVERT_FORMATS: [&str; 3] = ["jepsen-edn", "porcupine-etcd", "porcupine-kv"];

/// Converts a foreign history's text into ops of schema v1.
pub fn convert_text(from: &str, text: &str) -> Result<Vec<Op>, CheckError> {
    let converted = match from {
        "jepsen-edn" => history::convert::jepsen_edn::convert(text),
        "porcupine-etcd" => history::convert::porcupine_etcd::convert(text),
        "porcupine-kv" => history::convert::porcupine_kv::convert(text),
        other => {
            return Err(CheckError::Usage(format!(
                "unknown format `{other}` (expected {})",
                CONVERT_FORMATS.join(", ")
            )));
        }
    };
    converted.map_err(|e| CheckError::Convert(e.to_string()))
}

/// Runs `locksmith convert`: 0 when written, 2 otherwise (the error goes to `err`).
pub fn run_convert(from: &str, input: &Path, output: &Path, err: &mut dyn Write) -> i32 {
    let run = || -> Result<usize, CheckError> {
        let io = |path: &Path, source| CheckError::Io {
            path: path.display().to_string(),
            source,
        };
        let text = std::fs::read_to_string(input).map_err(|e| io(input, e))?;
        let ops = convert_text(from, &text).map_err(|e| match e {
            CheckError::Convert(message) => {
                CheckError::Convert(format!("{}: {message}", input.display()))
            }
            other => other,
        })?;
        let options = history::csv::WriterOptions::default();
        let mut writer =
            history::csv::Writer::create(output, options).map_err(|e| io(output, e))?;
        for op in &ops {
            writer.write(op).map_err(|e| io(output, e))?;
        }
        writer.flush().map_err(|e| io(output, e))?;
        Ok(ops.len())
    };
    match run() {
        Ok(n) => {
            let _ = writeln!(err, "wrote {n} rows to {}", output.display());
            0
        }
        Err(error) => {
            let _ = writeln!(err, "{error}");
            EXIT_COULD_NOT_RUN
        }
    }
}
