//! `locksmith check`, `locksmith convert` and `locksmith gen`: argument parsing only; the
//! work is in `nemesis::check` (through the one pipeline, `nemesis::store::pipeline`),
//! `checker::cli` (convert) and `checker::generate`.

use std::path::PathBuf;

use clap::Args;

/// `locksmith check HISTORY.csv|FOLDER... [--model auto|lock|mutex|...] [--init V]
/// [--drift 0.01] [--json] [--timeline OUT.html]`
#[derive(Debug, Args)]
pub struct CheckCommand {
    /// CSV histories (schema v1), and folders searched for *.csv; several give one verdict
    /// line each and the worst exit code.
    #[arg(required = true, num_args = 1..)]
    pub histories: Vec<PathBuf>,
    /// The model: auto (inferred from the ops), lock (acquire/release/write; also fencing
    /// and lease safety), mutex (Jepsen's, no tokens), owner-mutex (a release must come
    /// from the holder), register (read/write/cas per key), kv (get/put/append per key),
    /// multi-register (txn).
    #[arg(long, default_value = "auto", value_parser = checker::MODEL_NAMES)]
    pub model: String,
    /// The registers' initial value (register, multi-register): knossos checks Jepsen
    /// histories with 0. With it, an ok read of nil means the value read is unknown.
    #[arg(long, value_name = "V")]
    pub init: Option<String>,
    /// The declared clock-drift bound, a fraction in [0, 0.5).
    #[arg(long, default_value_t = 0.01, value_parser = drift_bound)]
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
    /// The service's session timeout, ms (lockd: 600000): liveness rule S then judges every
    /// `session-expired` op against it. Without it those ops are counted not evaluable.
    #[arg(long, value_name = "MS")]
    pub session_timeout_ms: Option<u64>,
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
    let mut args = nemesis::check::CheckArgs::batch(command.histories);
    args.model = model;
    args.init = command.init;
    args.drift = command.drift;
    args.json = command.json;
    args.timeline = command.timeline;
    args.plot = command.plot;
    args.no_phantom_release = command.no_phantom_release;
    args.session_timeout_ms = command.session_timeout_ms;
    args.junit = command.junit;
    // A big history takes a while: show that it is being worked on.
    let big = args
        .paths
        .iter()
        .any(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > BIG_HISTORY_BYTES));
    let _ticker = big.then(|| nemesis::progress::Ticker::start("check", "checking a big history"));
    nemesis::check::run_check(&args, &mut std::io::stdout(), &mut std::io::stderr())
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

/// `locksmith gen lock --ops N --keys K --clients C --crash-rate P --seed S
/// [--inject double-grant|stale-write] [--out FILE.csv]`
#[derive(Debug, Args)]
pub struct GenCommand {
    /// What to generate: `lock` (the only kind so far).
    #[arg(value_parser = ["lock"])]
    pub kind: String,
    /// Client operations (each an invoke and, mostly, a completion row).
    #[arg(long, default_value_t = 1_000_000)]
    pub ops: usize,
    /// Lock keys.
    #[arg(long, default_value_t = 100)]
    pub keys: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 20)]
    pub clients: u64,
    /// The fraction of acquires that crash (complete `info`), in [0, 1].
    #[arg(long, default_value_t = 0.005)]
    pub crash_rate: f64,
    /// The seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Make the history invalid: double-grant or stale-write.
    #[arg(long, value_parser = ["double-grant", "stale-write", "none"], default_value = "none")]
    pub inject: String,
    /// Where to write the CSV history (default: standard output).
    #[arg(long, value_name = "FILE.csv")]
    pub out: Option<PathBuf>,
}

/// Runs `gen`; returns 0 when written, 2 otherwise.
pub fn generate(command: GenCommand) -> i32 {
    if !(0.0..=1.0).contains(&command.crash_rate) {
        eprintln!(
            "--crash-rate {} is not a fraction in [0, 1]",
            command.crash_rate
        );
        return checker::cli::EXIT_COULD_NOT_RUN;
    }
    let inject = match command.inject.parse() {
        Ok(inject) => inject,
        Err(error) => {
            eprintln!("{error}");
            return checker::cli::EXIT_COULD_NOT_RUN;
        }
    };
    let mut options = checker::generate::GenOptions::new(command.ops, command.seed);
    options.keys = command.keys;
    options.clients = command.clients;
    options.crash_rate = command.crash_rate;
    options.inject = inject;
    let ops = checker::generate::lock_history(&options);
    let written = match &command.out {
        Some(path) => std::fs::File::create(path)
            .and_then(|file| checker::generate::write_csv(&ops, std::io::BufWriter::new(file))),
        None => checker::generate::write_csv(&ops, std::io::stdout().lock()),
    };
    match written {
        Ok(rows) => {
            eprintln!(
                "wrote {rows} rows ({} ops, {} keys, {} clients, crash rate {}, seed {}, inject {inject})",
                command.ops, command.keys, command.clients, command.crash_rate, command.seed
            );
            0
        }
        Err(error) => {
            eprintln!(
                "{}: {error}",
                command
                    .out
                    .as_ref()
                    .map_or("<stdout>".into(), |p| p.display().to_string())
            );
            checker::cli::EXIT_COULD_NOT_RUN
        }
    }
}

/// `--drift`: a fraction in [0, 0.5) (`checker::drift_in_bounds`).
fn drift_bound(text: &str) -> Result<f64, String> {
    let drift: f64 = text
        .parse()
        .map_err(|e| format!("{text:?} is no number: {e}"))?;
    checker::drift_in_bounds(drift).map(|()| drift)
}
