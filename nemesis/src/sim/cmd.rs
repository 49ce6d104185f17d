//! `locksmith sim`'s work (its arguments: `commands/sim.rs`): seeds, each in a child
//! process of its own, on every core; progress; a failing seed's store and shrunk rerun.
//! New seeds stop at the first failure unless `keep_going`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::shrink::shrink;
use super::{CaseResult, SimCase, run_case};
use crate::store::{RunDir, SeedReport};

/// The longest a seed's child may run, wall seconds (a task that spins without letting the
/// simulated clock move would hang it); a child killed at the bound makes its seed unknown.
pub const SEED_WALL_TIMEOUT_S: u64 = 600;

/// One `locksmith sim` command.
#[derive(Clone, Debug)]
pub struct SimRun {
    /// The seeds, in order (after `--shard`).
    pub seeds: Vec<u64>,
    /// Seeds run at once.
    pub jobs: usize,
    /// Everything of a case but its seed.
    pub template: SimCase,
    /// Where a failing seed's store goes (`STORE/sim/<time>-seed<S>/`).
    pub store: PathBuf,
    /// Run every seed even after one failed.
    pub keep_going: bool,
    /// Shrink the first failing seed.
    pub shrink: bool,
    /// A JUnit report: one testcase per seed that did not pass, and a summary.
    pub junit: Option<PathBuf>,
    /// `Some(quiet)`: this process is a child running its one seed (quiet: a shrinking
    /// candidate, no node logs and no store).
    pub child: Option<bool>,
    /// Exit 1 when a required coverage probe was reached by no seed (`--require-probes`).
    pub require_probes: bool,
}

/// One process per seed: a seed replays exactly only as its process's first simulation
/// (README "Deterministic simulation"). The child runs the seed once, with the nodes' logs
/// unless quiet, and writes the store of a seed that did not pass unless quiet.
fn run_child(run: &SimRun, quiet: bool) -> Result<i32, String> {
    let [seed] = run.seeds[..] else {
        return Err("--child takes exactly one seed".to_owned());
    };
    let mut case = run.template.with_seed(seed);
    case.logs = !quiet;
    case.exits_after = true;
    // Traces on by default: into a folder of this child's, gone when it ends (the store of
    // a failing seed keeps a copy).
    let traces = tempfile::tempdir().map_err(|e| format!("a folder for traces: {e}"))?;
    if !case.no_trace && case.trace_root.is_none() {
        case.trace_root = Some(traces.path().to_path_buf());
    }
    // A node's panic is part of the verdict (node health) and its message is in the store;
    // one line here, not a backtrace per panic, unless LOCKSMITH_SIM_BACKTRACE is set.
    if std::env::var_os("LOCKSMITH_SIM_BACKTRACE").is_none() {
        crate::capture::one_line_panics(format!("locksmith sim: seed {seed}"));
    }
    let result = run_case(&case);
    if std::env::var_os("LOCKSMITH_SIM_DIGESTS").is_some() {
        let (ops, digest) = (result.ops.len(), history::csv::digest(&result.ops));
        let shape = case.options.shape();
        eprintln!("seed {seed}: {shape}: {ops} ops, history digest {digest:016x}");
    }
    // The first line is the seed's results.json, which the parent reads as the struct.
    let json = serde_json::to_string(&result.results).map_err(|e| e.to_string())?;
    println!("{json}");
    println!("{}{}", SeedReport::PROBES, result.probes.join(","));
    if !result.verdict().is_valid() && !quiet {
        let dir = write_store(&run.store, &result).map_err(|e| e.to_string())?;
        println!("store: {}", dir.path().display());
        println!("timeline: {}", dir.file(RunDir::TIMELINE).display());
        let messages = dir.file(RunDir::MESSAGES);
        if messages.is_file() {
            println!("messages: {}", messages.display());
        }
    }
    Ok(result.verdict().exit_code())
}

/// Runs `case` in a child process (`locksmith sim --child ...`).
fn spawn_child(case: &SimCase, store: &Path, quiet: bool) -> Result<SeedReport, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let rerun = case.rerun_command();
    let mut command = std::process::Command::new(exe);
    command.args(rerun.split_whitespace().skip(1));
    command.arg("--child").arg("--store").arg(store);
    if quiet {
        command.arg("--child-quiet");
    }
    let bound = Duration::from_secs(SEED_WALL_TIMEOUT_S);
    let output = match crate::subprocess::run_bounded(&mut command, bound, "a seed's child") {
        Ok(output) => output,
        // A child that hung or could not start: this seed is unknown, never valid.
        Err(e) => return Ok(SeedReport::unknown(case.seed(), format!("the child: {e}"))),
    };
    // What the child said on stderr (panics, digests) goes on to ours.
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    Ok(SeedReport::of_child(case.seed(), &stdout, &output.status))
}

/// Runs the command; the exit code (0 every seed valid, 1 a seed failed, 2 could not run or
/// a seed was unknown).
pub fn run(run: &SimRun) -> i32 {
    let outcome = match run.child {
        Some(quiet) => run_child(run, quiet),
        None => run_parent(run),
    };
    outcome.unwrap_or_else(|message| {
        eprintln!("locksmith sim: {message}");
        2
    })
}

fn run_parent(run: &SimRun) -> Result<i32, String> {
    let options = &run.template.options;
    let first = run.seeds.first().copied().unwrap_or(0);
    let bug = (options.bug.as_ref())
        .map(|b| format!(", bug {b}"))
        .unwrap_or_default();
    let (seeds, jobs, time_s) = (run.seeds.len(), run.jobs, options.time_s);
    let shape = match run.template.draw.swarm {
        true => "swarm: each seed draws its nodes, clients, keys and faults".to_owned(),
        false => options.shape(),
    };
    eprintln!(
        "locksmith sim: {seeds} seeds ({first}..), {time_s} simulated s each, {shape}, {jobs} jobs{bug}"
    );
    let started = Instant::now();
    let reports = run_seeds(run)?;
    let elapsed = started.elapsed().as_secs_f64().max(1e-9);
    let done = reports.len();
    let sim_ms: u64 = reports.iter().map(|r| r.sim_ms).sum();
    let coverage = crate::store::Coverage::of(&reports);
    let (failed, unknown): (Vec<SeedReport>, Vec<SeedReport>) = (reports.into_iter())
        .filter(|r| !r.verdict.is_valid())
        .partition(|r| r.verdict.is_invalid());
    eprintln!(
        "locksmith sim: {done} seeds in {elapsed:.1} s ({:.1} seeds/s, {:.0} simulated s per wall s), {} failed, {} unknown",
        done as f64 / elapsed,
        sim_ms as f64 / 1000.0 / elapsed,
        failed.len(),
        unknown.len(),
    );
    if let Some(path) = &run.junit {
        use checker::report::junit::{self, SeedOutcome};
        let bad: Vec<SeedOutcome> = (failed.iter().chain(&unknown))
            .map(|r| SeedOutcome {
                seed: r.seed,
                verdict: r.verdict.as_str().to_owned(),
                explanation: r.text.clone(),
                rerun: format!("rerun: {}", run.template.with_seed(r.seed).rerun_command()),
            })
            .collect();
        let suite = junit::sim_suite("locksmith sim", done as u64, &bad, elapsed);
        junit::write(path, &[suite]).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    for result in &unknown {
        println!("seed {}: unknown: {}", result.seed, result.text);
    }
    print!("{}", coverage.table());
    let missed = run.require_probes && !coverage.unreached_required().is_empty();
    let Some(first) = failed.first() else {
        if !unknown.is_empty() {
            return Ok(2);
        }
        println!("valid: {done} seeds");
        return Ok(if missed { 1 } else { 0 });
    };
    for result in &failed {
        println!("seed {}: invalid", result.seed);
    }
    report_failure(first, run);
    Ok(1)
}

/// Prints the failing seed's explanation and store (its child wrote it, with the nodes'
/// logs), shrinks it (each candidate in a child of its own), and prints the rerun commands:
/// the seed's, the shrunk case's, and `locksmith test` with the same plan.
fn report_failure(report: &SeedReport, run: &SimRun) {
    let case = run.template.with_seed(report.seed);
    let text = crate::store::abridged(&report.text);
    println!("\nseed {} failed:\n{text}", case.seed());
    println!("rerun: {}", case.rerun_command());
    let test = case.options.test_command();
    println!("rerun on real processes (same options and fault plan): {test}");
    if !run.shrink {
        return;
    }
    eprintln!("locksmith sim: shrinking seed {} ...", case.seed());
    // Candidates write their traces apart (`DIR/shrink/seed-S`), so that the failing seed's
    // own traces stay in `DIR/seed-S` for `locksmith model replay`.
    let mut shrunk = shrink(&case, |candidate| {
        let mut candidate = candidate.clone();
        candidate.trace_root = case.trace_root.as_ref().map(|root| root.join("shrink"));
        spawn_child(&candidate, &run.store, true).is_ok_and(|r| r.verdict.is_invalid())
    });
    shrunk.case.trace_root = case.trace_root.clone();
    println!(
        "smallest failing case found ({} reruns): {} simulated s, {} clients, {} planned faults",
        shrunk.runs,
        shrunk.case.options.time_s,
        shrunk.case.options.concurrency,
        shrunk.faults_left
    );
    println!("rerun (shrunk): {}", shrunk.case.rerun_command());
}

/// Runs a seed quietly; one that did not pass runs again with logs and traces for its store
/// (messages.svg). It is the same run: a verdict that turns valid is nondeterminism, unknown.
fn run_seed(run: &SimRun, seed: u64) -> Result<SeedReport, String> {
    let case = run.template.with_seed(seed);
    let first = spawn_child(&case, &run.store, true)?;
    if first.verdict.is_valid() {
        return Ok(first);
    }
    let again = SimCase {
        no_trace: false, // its store gets messages.svg from the traces
        ..case.clone()
    };
    let again = spawn_child(&again, &run.store, false)?;
    if again.verdict.is_valid() {
        let why = format!("seed {seed} did not replay: {}, then valid", first.verdict);
        return Ok(SeedReport::unknown(seed, format!("{why}\n{}", first.text)));
    }
    Ok(again)
}

fn run_seeds(run: &SimRun) -> Result<Vec<SeedReport>, String> {
    let total = run.seeds.len();
    let progress = crate::progress::Progress::new("sim", Some(total as u64));
    let (done, failed) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let reports = crate::subprocess::run_parallel(
        &run.seeds,
        run.jobs,
        |&seed| run_seed(run, seed),
        |report| report.verdict.is_invalid() && !run.keep_going,
        |report| {
            let done = done.fetch_add(1, Ordering::Relaxed) + 1;
            let bad = usize::from(report.verdict.is_invalid());
            let failed = failed.fetch_add(bad, Ordering::Relaxed) + bad;
            progress.set(
                done as u64,
                &format!("{done}/{total} seeds, {failed} failed"),
            );
        },
    );
    progress.finish("done");
    reports
}

/// Writes the store of a seed, `STORE/sim/<time>-seed<S>/`, with the files of a chaos run's
/// ([`RunDir::write_recorded`]).
fn write_store(store: &Path, result: &CaseResult) -> Result<RunDir, crate::Error> {
    let (case, logs) = (&result.case, result.logs.as_deref().unwrap_or_default());
    let node_log = |node| {
        let lines = super::world::node_lines(logs, node);
        lines.map(|line| format!("{line}\n")).collect()
    };
    let traces = case.trace_dir();
    let draws = super::WorldDraws::of(&case.options).describe(&case.options);
    let recorded = (&case.options, &result.ops[..], &result.results);
    RunDir::write_seed(store, recorded, traces.as_deref(), &draws, node_log)
}
