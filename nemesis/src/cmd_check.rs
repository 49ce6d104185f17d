//! `locksmith check` and `locksmith convert`: argument parsing only; the work is in
//! `checker::cli`.

use std::path::PathBuf;

use clap::Args;

/// `locksmith check HISTORY.csv [--model lock|register|kv] [--drift 0.01] [--json]
/// [--timeline OUT.html]`
#[derive(Debug, Args)]
pub struct CheckCommand {
    /// The CSV history (schema v1).
    pub history: PathBuf,
    /// The model: lock (acquire/release/write; also fencing and lease safety), register
    /// (read/write/cas per key) or kv (get/put/append per key).
    #[arg(long, default_value = "lock", value_parser = ["lock", "register", "kv"])]
    pub model: String,
    /// The declared clock-drift bound, a fraction in [0, 1).
    #[arg(long, default_value_t = 0.01)]
    pub drift: f64,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write an HTML timeline of the history, with the failing ops marked.
    #[arg(long, value_name = "OUT.html")]
    pub timeline: Option<PathBuf>,
    /// Write an SVG plot of latency over time, nemesis periods shaded.
    #[arg(long, value_name = "OUT.svg")]
    pub plot: Option<PathBuf>,
    /// Write a JUnit XML report: one testcase per check.
    #[arg(long, value_name = "OUT.xml")]
    pub junit: Option<PathBuf>,
    /// Unseen grants of timed-out acquires end only by their lease (by default they may
    /// also end by a phantom-lock release, which lockd performs).
    #[arg(long)]
    pub no_phantom_release: bool,
}

/// `locksmith convert --from jepsen-edn|porcupine-etcd|porcupine-kv IN OUT.csv`
#[derive(Debug, Args)]
pub struct ConvertCommand {
    /// The format of IN.
    #[arg(long, value_parser = checker::cli::CONVERT_FORMATS)]
    pub from: String,
    /// The foreign history.
    pub input: PathBuf,
    /// The CSV history to write.
    pub output: PathBuf,
}

/// Histories larger than this (about 100 000 rows) get a progress display while checked.
const BIG_HISTORY_BYTES: u64 = 8 << 20;

/// Runs `check`; returns the exit code (0 valid, 1 invalid, 2 unknown or could not run).
pub fn check(command: CheckCommand) -> i32 {
    let model = match command.model.parse() {
        Ok(model) => model,
        Err(error) => {
            eprintln!("{error}");
            return checker::cli::EXIT_COULD_NOT_RUN;
        }
    };
    let mut args = checker::cli::CheckArgs::new(command.history);
    args.model = model;
    args.drift = command.drift;
    args.json = command.json;
    args.timeline = command.timeline;
    args.plot = command.plot;
    args.no_phantom_release = command.no_phantom_release;
    args.junit = command.junit;
    // A big history takes a while: show that it is being worked on.
    let big = std::fs::metadata(&args.history).is_ok_and(|m| m.len() > BIG_HISTORY_BYTES);
    let _ticker = big.then(|| nemesis::progress::Ticker::start("check", "checking a big history"));
    checker::cli::run_check(&args, &mut std::io::stdout(), &mut std::io::stderr())
}

/// Runs `convert`; returns the exit code (0 written, 2 could not run).
pub fn convert(command: ConvertCommand) -> i32 {
    checker::cli::run_convert(
        &command.from,
        &command.input,
        &command.output,
        &mut std::io::stderr(),
    )
}
