//! `locksmith check` and `locksmith convert`, minus the argument parsing (which lives in
//! `nemesis/src/cmd_check.rs`). Each returns DESIGN's exit code: 0 valid, 1 invalid, 2
//! unknown or could not run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use history::Op;
use serde::Serialize;

use crate::report::{junit, plot, timeline};
use crate::{Check, CheckError, ModelKind, Options, Verdict};

/// The exit code of a run that could not happen (bad file, bad argument).
pub const EXIT_COULD_NOT_RUN: i32 = 2;

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
    /// (see [`crate::Options::phantom_release`]).
    pub no_phantom_release: bool,
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
        }
    }

    fn options(&self) -> Options {
        Options::for_model(self.model)
            .with_drift(self.drift)
            .with_phantom_release(!self.no_phantom_release)
            .with_init(self.init.clone())
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

/// Reads a CSV history straight into paired operations (the history is never held twice);
/// a bad file gives `FILE:line:column: reason`.
pub fn read_paired(path: &Path) -> Result<history::pair::Paired, CheckError> {
    history::csv::read_paired_path(path).map_err(|source| CheckError::Parse {
        path: path.display().to_string(),
        source,
    })
}

/// Reads and checks a CSV history as `locksmith check` does: lock histories the compact
/// store can decide on its own ([`crate::compact`]) never build their paired operations;
/// every other history is read into them and checked by [`crate::check_paired`]. Returns
/// the check and the history's client operations.
pub fn check_path(path: &Path, options: &Options) -> Result<(Check, usize), CheckError> {
    if let Some(fast) = crate::compact::check_file(path, options) {
        return Ok((fast.check, fast.operations));
    }
    let paired = read_paired(path)?;
    Ok((
        crate::check_paired(&paired, options),
        paired.operations.len(),
    ))
}

/// The files `paths` name: each file as given, each folder's `*.csv` files (recursively,
/// sorted by path).
pub fn expand_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CheckError> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found = Vec::new();
            collect_csv(path, &mut found)?;
            found.sort();
            out.extend(found);
        } else {
            out.push(path.clone());
        }
    }
    Ok(out)
}

fn collect_csv(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), CheckError> {
    let io = |source| CheckError::Io {
        path: dir.display().to_string(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_dir() {
            collect_csv(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "csv") {
            out.push(path);
        }
    }
    Ok(())
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
    let started = Instant::now();
    let title = path.display().to_string();
    let run = || check_path(path, options);
    match crate::verdict::guard(&title, run) {
        Ok(Ok((check, ops))) => {
            let seconds = started.elapsed().as_secs_f64();
            let json = args
                .json
                .then(|| json_report(args, &title, ops, seconds, &check));
            BatchLine {
                line: format!(
                    "{title}: {} ({}, {ops} ops, {seconds:.3} s)",
                    check.verdict,
                    model_name(&check, args.model)
                ),
                verdict: check.verdict,
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
    let started = Instant::now();
    let options = args.options();
    // The timeline and the plot draw the paired operations: only then are they needed.
    let fast = (args.timeline.is_none() && args.plot.is_none())
        .then(|| crate::compact::check_file(path, &options))
        .flatten();
    let (check, operations, paired) = match fast {
        Some(fast) => (fast.check, fast.operations, None),
        None => {
            let paired = read_paired(path)?;
            let _ = writeln!(
                err,
                "checking {} operations of {} with the {} model ...",
                paired.operations.len(),
                path.display(),
                args.model
            );
            let check = crate::check_paired(&paired, &options);
            (check, paired.operations.len(), Some(paired))
        }
    };
    let elapsed = started.elapsed();
    let io = |path: &Path, source| CheckError::Io {
        path: path.display().to_string(),
        source,
    };
    let title = path.display().to_string();
    if let (Some(path), Some(paired)) = (&args.timeline, &paired) {
        std::fs::write(path, timeline::render(&title, paired, &check)).map_err(|e| io(path, e))?;
    }
    if let (Some(path), Some(paired)) = (&args.plot, &paired) {
        let svg = plot::latency_svg(&title, &paired.operations, &paired.faults);
        std::fs::write(path, svg).map_err(|e| io(path, e))?;
    }
    let seconds = elapsed.as_secs_f64();
    if let Some(path) = &args.junit {
        let name = format!("locksmith check {title}");
        let suite = junit::Suite::from_check(&name, &title, &check, elapsed.as_secs_f64());
        junit::write(path, &[suite]).map_err(|e| io(path, e))?;
    }
    let printed = if args.json {
        let json = json_report(args, &title, operations, seconds, &check);
        writeln!(out, "{json}")
    } else {
        write_text(out, &title, &check, args.model, seconds)
    };
    printed.map_err(|e| io(Path::new("<stdout>"), e))?;
    Ok(check.verdict.exit_code())
}

fn write_text(
    out: &mut dyn Write,
    title: &str,
    check: &Check,
    asked: ModelKind,
    seconds: f64,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{title}: {} ({}, {seconds:.3} s)",
        check.verdict,
        model_name(check, asked)
    )?;
    for result in &check.results {
        writeln!(out, "  {}: {}", result.name, result.status())?;
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
