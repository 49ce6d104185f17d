//! `locksmith sim`: many seeds on every core, progress, the store and a shrunk rerun
//! command for a failing seed.
//!
//! By default the run stops starting new seeds at the first failure (the seeds in flight
//! finish), since one failing seed is what a person needs; `--keep-going` runs them all.

use std::fs;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Args;

use super::shrink::shrink_with;
use super::{CaseResult, SimCase, run_case};
use crate::faults::FaultKind;
use crate::store::RunDir;

/// `locksmith sim [--seeds 1..1000] [--jobs N] [--shard I/N] [--time-s 30] [--nodes 5]
/// [--bug NAME] [--store DIR]`
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Seeds: `A..B` (B excluded), `A..=B`, `S`, or a comma list.
    #[arg(long, default_value = "1..1000")]
    pub seeds: String,
    /// Seeds run at once, each in a child process of its own (default: every core). One
    /// process per seed is what makes a seed replay exactly (README "Deterministic
    /// simulation"). Across machines use `--shard`.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Run only shard I of N (0-based): the seeds whose position in the list is I mod N.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Simulated seconds of the fault phase of each seed.
    #[arg(long, default_value_t = 30)]
    pub time_s: u64,
    /// Nodes.
    #[arg(long, default_value_t = 5)]
    pub nodes: u64,
    /// Client slots.
    #[arg(long, default_value_t = 10)]
    pub clients: u64,
    /// Keys.
    #[arg(long, default_value_t = 4)]
    pub keys: u64,
    /// Fault kinds (kill, pause, partition, clock, netem; `none` for no faults). netem is
    /// `slow` (up to 150 ms per message on a node's links) and `flaky` (a node's peer links
    /// drop, reorder and duplicate messages).
    #[arg(long, default_value = "kill,pause,partition,clock,netem")]
    pub nemesis: String,
    /// Switch on one known bug of lockd (`lockd --bug`).
    #[arg(long)]
    pub bug: Option<String>,
    /// Write every node's trace of the inputs its core stepped (`lockd::trace`) to
    /// `DIR/seed-S/node-logs/nI.trace.jsonl`; each seed's verdict then includes their replay
    /// through the model (the check `trace replay`; `locksmith model replay DIR/seed-S`).
    #[arg(long, value_name = "DIR")]
    pub trace: Option<PathBuf>,
    /// Leave these planned faults out (indexes into the plan; written by the shrinker).
    #[arg(long, value_delimiter = ',')]
    pub drop_faults: Vec<usize>,
    /// Where a failing seed's store goes (`DIR/sim/<time>-seed<S>/`).
    #[arg(long, default_value = "store")]
    pub store: PathBuf,
    /// Run every seed even after one failed.
    #[arg(long)]
    pub keep_going: bool,
    /// Do not shrink a failing seed.
    #[arg(long)]
    pub no_shrink: bool,
    /// Also write a JUnit XML report: one testcase per seed that did not pass, and a summary.
    #[arg(long, value_name = "FILE.xml")]
    pub junit: Option<PathBuf>,
    /// Internal: run the one seed given in this process and report it on stdout (the parent
    /// runs every seed in a child process of its own; see [`run_child`]).
    #[arg(long, hide = true)]
    pub child: bool,
    /// Internal, with `--child`: no node logs and no store (a shrinking candidate).
    #[arg(long, hide = true)]
    pub child_quiet: bool,
}

/// What a child process said about its seed.
#[derive(Clone, Debug)]
struct SeedReport {
    seed: u64,
    verdict: String,
    sim_ms: u64,
    /// The explanation and the store lines (everything the child printed after its status).
    text: String,
}

impl SeedReport {
    fn is_invalid(&self) -> bool {
        self.verdict == "invalid"
    }
}

/// One process per seed: a seed replays exactly only as the first simulation of its process
/// (state of the process, suspected tokio's task ids, changes how a crashed host's tasks are
/// dropped; README "Deterministic simulation"). The child runs the seed once, with the nodes'
/// logs on unless quiet, and writes the store of a seed that did not pass.
fn run_child(args: &SimArgs) -> Result<i32, String> {
    let seeds = parse_seeds(&args.seeds)?;
    let [seed] = seeds[..] else {
        return Err("--child takes exactly one seed".to_owned());
    };
    let mut case = template(args)?;
    case.seed = seed;
    case.logs = !args.child_quiet;
    // A node's panic is part of the verdict (node health) and its message is in the store;
    // one line here, not a backtrace per panic, unless LOCKSMITH_SIM_BACKTRACE is set.
    if std::env::var_os("LOCKSMITH_SIM_BACKTRACE").is_none() {
        std::panic::set_hook(Box::new(move |info| {
            let location = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|m| (*m).to_owned())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            eprintln!("locksmith sim: seed {seed}: panic{location}: {message}");
        }));
    }
    let result = run_case(&case);
    if std::env::var_os("LOCKSMITH_SIM_DIGESTS").is_some() {
        eprintln!(
            "seed {seed}: {} ops, history digest {:016x}",
            result.ops.len(),
            super::history_digest(&result.ops)
        );
    }
    println!(
        "SEED {seed} {} {}",
        result.verdict().as_str(),
        result.sim_ms
    );
    if !result.verdict().is_valid() {
        println!("{}", result.explanation());
        if !args.child_quiet {
            let dir = write_store(&args.store, &result)?;
            println!("store: {}", dir.display());
            println!("timeline: {}", dir.join("timeline.html").display());
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
    let output = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot start a child for seed {}: {e}", case.seed))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut lines = stdout.lines();
    let status = lines.next().unwrap_or_default();
    let words: Vec<&str> = status.split_whitespace().collect();
    match words[..] {
        ["SEED", seed, verdict, sim_ms] => Ok(SeedReport {
            seed: seed.parse().unwrap_or(case.seed),
            verdict: verdict.to_owned(),
            sim_ms: sim_ms.parse().unwrap_or(0),
            text: lines.collect::<Vec<_>>().join("\n"),
        }),
        _ => Ok(SeedReport {
            seed: case.seed,
            verdict: "unknown".to_owned(),
            sim_ms: 0,
            text: format!(
                "the child for seed {} ended without a report ({}): {stdout}",
                case.seed, output.status
            ),
        }),
    }
}

/// Runs the command; the exit code (0 every seed valid, 1 a seed failed, 2 could not run or
/// a seed was unknown).
pub fn run(args: SimArgs) -> i32 {
    match run_inner(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("locksmith sim: {message}");
            2
        }
    }
}

fn run_inner(args: &SimArgs) -> Result<i32, String> {
    if args.child {
        return run_child(args);
    }
    let seeds = select_shard(parse_seeds(&args.seeds)?, args.shard.as_deref())?;
    let template = template(args)?;
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    eprintln!(
        "locksmith sim: {} seeds ({}..), {} simulated s each, {} nodes, {} clients, {} jobs{}",
        seeds.len(),
        seeds.first().copied().unwrap_or(0),
        template.time_s,
        template.nodes,
        template.clients,
        jobs,
        template
            .bug
            .map(|b| format!(", bug {}", b.name()))
            .unwrap_or_default()
    );
    let started = Instant::now();
    let outcome = run_seeds(&seeds, &template, jobs, !args.keep_going, &args.store)?;
    let elapsed = started.elapsed();
    let sim_s = outcome.sim_ms.load(Ordering::Relaxed) as f64 / 1000.0;
    let done = outcome.done.load(Ordering::Relaxed);
    eprintln!(
        "locksmith sim: {done} seeds in {:.1} s ({:.1} seeds/s, {:.0} simulated s per wall s), {} failed, {} unknown",
        elapsed.as_secs_f64(),
        done as f64 / elapsed.as_secs_f64().max(1e-9),
        sim_s / elapsed.as_secs_f64().max(1e-9),
        outcome.failed.lock().map(|f| f.len()).unwrap_or(0),
        outcome.unknown.lock().map(|f| f.len()).unwrap_or(0),
    );
    let mut failed = outcome.failed.into_inner().unwrap_or_default();
    failed.sort_by_key(|r| r.seed);
    let unknown = outcome.unknown.into_inner().unwrap_or_default();
    if let Some(path) = &args.junit {
        write_junit(path, done, &failed, &unknown, elapsed, &template)?;
    }
    for result in &unknown {
        println!("seed {}: unknown: {}", result.seed, result.text);
    }
    let Some(first) = failed.first() else {
        if !unknown.is_empty() {
            return Ok(2);
        }
        println!("valid: {done} seeds");
        return Ok(0);
    };
    for result in &failed {
        println!("seed {}: invalid", result.seed);
    }
    report_failure(first, &template, args)?;
    Ok(1)
}

/// `--junit`: one testcase per seed that did not pass, plus a summary.
fn write_junit(
    path: &Path,
    done: usize,
    failed: &[SeedReport],
    unknown: &[SeedReport],
    elapsed: Duration,
    template: &SimCase,
) -> Result<(), String> {
    use checker::report::junit::{self, SeedOutcome};
    let bad: Vec<SeedOutcome> = failed
        .iter()
        .chain(unknown)
        .map(|r| SeedOutcome {
            seed: r.seed,
            verdict: r.verdict.clone(),
            explanation: r.text.clone(),
            rerun: format!(
                "rerun: {}",
                SimCase {
                    seed: r.seed,
                    ..template.clone()
                }
                .rerun_command()
            ),
        })
        .collect();
    let suite = junit::sim_suite("locksmith sim", done as u64, &bad, elapsed.as_secs_f64());
    junit::write(path, &[suite]).map_err(|e| format!("{}: {e}", path.display()))
}

/// The failure text for the terminal: the first explanation lines and every summary and
/// store line; the store's results.json keeps the whole explanation.
fn abridged(text: &str) -> String {
    const SHOWN: usize = 8;
    let is_summary =
        |l: &str| l.starts_with('(') || l.starts_with("store:") || l.starts_with("timeline:");
    let explanation: Vec<&str> = text.lines().filter(|l| !is_summary(l)).collect();
    let mut out: Vec<String> = explanation
        .iter()
        .take(SHOWN)
        .map(|l| (*l).to_owned())
        .collect();
    if explanation.len() > SHOWN {
        out.push(format!(
            "... and {} more lines (results.json in the store has them all)",
            explanation.len() - SHOWN
        ));
    }
    out.extend(text.lines().filter(|l| is_summary(l)).map(str::to_owned));
    out.join("\n")
}

/// Prints the failing seed's explanation and store (its child wrote it, with the nodes'
/// logs), shrinks it (each candidate in a child of its own), and prints both rerun commands.
fn report_failure(report: &SeedReport, template: &SimCase, args: &SimArgs) -> Result<(), String> {
    let case = SimCase {
        seed: report.seed,
        ..template.clone()
    };
    println!("\nseed {} failed:\n{}", case.seed, abridged(&report.text));
    println!("rerun: {}", case.rerun_command());
    println!(
        "rerun on real processes (same options and fault plan): {}",
        case.options().test_command()
    );
    if !args.no_shrink {
        eprintln!("locksmith sim: shrinking seed {} ...", case.seed);
        // Candidates write their traces apart (`DIR/shrink/seed-S`), so that the failing
        // seed's own traces stay in `DIR/seed-S` for `locksmith model replay`.
        let mut shrunk = shrink_with(&case, |candidate| {
            let mut candidate = candidate.clone();
            candidate.trace_root = case.trace_root.as_ref().map(|root| root.join("shrink"));
            spawn_child(&candidate, &args.store, true).is_ok_and(|r| r.is_invalid())
        });
        shrunk.case.trace_root = case.trace_root.clone();
        println!(
            "smallest failing case found ({} reruns): {} simulated s, {} clients, {} planned faults",
            shrunk.runs, shrunk.case.time_s, shrunk.case.clients, shrunk.faults_left
        );
        println!("rerun (shrunk): {}", shrunk.case.rerun_command());
    }
    Ok(())
}

fn template(args: &SimArgs) -> Result<SimCase, String> {
    let mut case = SimCase::new(0);
    case.time_s = args.time_s.max(1);
    case.nodes = args.nodes;
    case.clients = args.clients.max(1);
    case.keys = args.keys.max(1);
    if !(1..=9).contains(&case.nodes) {
        return Err(format!("--nodes {}: expected 1 to 9", case.nodes));
    }
    case.nemesis = if args.nemesis == "none" {
        Vec::new()
    } else {
        args.nemesis
            .split(',')
            .map(|k| k.trim().parse::<FaultKind>().map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?
    };
    if let Some(bug) = &args.bug {
        case.bug = Some(bug.parse().map_err(|e| format!("--bug: {e}"))?);
    }
    case.drop_faults = args.drop_faults.iter().copied().collect();
    case.trace_root = args.trace.clone();
    Ok(case)
}

/// `A..B`, `A..=B`, `S` or `S,T,U`.
pub fn parse_seeds(text: &str) -> Result<Vec<u64>, String> {
    let bad = || format!("--seeds {text:?}: expected A..B, A..=B, S or a comma list");
    let number = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
    if let Some((a, b)) = text.split_once("..=") {
        let (a, b) = (number(a)?, number(b)?);
        return if a <= b {
            Ok((a..=b).collect())
        } else {
            Err(bad())
        };
    }
    if let Some((a, b)) = text.split_once("..") {
        let (a, b) = (number(a)?, number(b)?);
        return if a < b {
            Ok((a..b).collect())
        } else {
            Err(bad())
        };
    }
    text.split(',').map(number).collect()
}

/// Keeps the seeds of shard `I/N`: those at positions congruent to I mod N.
pub fn select_shard(seeds: Vec<u64>, shard: Option<&str>) -> Result<Vec<u64>, String> {
    let Some(shard) = shard else {
        return Ok(seeds);
    };
    let bad = || format!("--shard {shard:?}: expected I/N with 0 <= I < N");
    let (i, n) = shard.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok(seeds
        .into_iter()
        .enumerate()
        .filter(|(position, _)| position % n == i)
        .map(|(_, seed)| seed)
        .collect())
}

struct Outcome {
    done: AtomicUsize,
    sim_ms: AtomicU64,
    failed: Mutex<Vec<SeedReport>>,
    unknown: Mutex<Vec<SeedReport>>,
}

fn run_seeds(
    seeds: &[u64],
    template: &SimCase,
    jobs: usize,
    stop_early: bool,
    store: &Path,
) -> Result<Outcome, String> {
    let outcome = Outcome {
        done: AtomicUsize::new(0),
        sim_ms: AtomicU64::new(0),
        failed: Mutex::new(Vec::new()),
        unknown: Mutex::new(Vec::new()),
    };
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let error: Mutex<Option<String>> = Mutex::new(None);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(seeds.len().max(1)) {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&seed) = seeds.get(i) else { break };
                    let case = SimCase {
                        seed,
                        ..template.clone()
                    };
                    let report = match spawn_child(&case, store, false) {
                        Ok(report) => report,
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
                            if let Ok(mut error) = error.lock() {
                                *error = Some(e);
                            }
                            break;
                        }
                    };
                    outcome.sim_ms.fetch_add(report.sim_ms, Ordering::Relaxed);
                    outcome.done.fetch_add(1, Ordering::Relaxed);
                    match report.verdict.as_str() {
                        "valid" => {}
                        "invalid" => {
                            if stop_early {
                                stop.store(true, Ordering::Relaxed);
                            }
                            if let Ok(mut failed) = outcome.failed.lock() {
                                failed.push(report);
                            }
                        }
                        _ => {
                            if let Ok(mut unknown) = outcome.unknown.lock() {
                                unknown.push(report);
                            }
                        }
                    }
                }
            });
        }
        progress(&outcome, seeds.len(), started, &next, seeds.len(), &stop);
    });
    if let Some(e) = error.into_inner().ok().flatten() {
        return Err(e);
    }
    Ok(outcome)
}

/// Prints progress every few seconds until every seed is done (or the run stops): a line
/// per interval, rewritten in place on a terminal.
fn progress(
    outcome: &Outcome,
    total: usize,
    started: Instant,
    next: &AtomicUsize,
    seeds: usize,
    stop: &AtomicBool,
) {
    let terminal = std::io::stderr().is_terminal();
    let every = if terminal {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(5)
    };
    let mut last = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let done = outcome.done.load(Ordering::Relaxed);
        let finished = done >= total
            || (stop.load(Ordering::Relaxed) && done >= next.load(Ordering::Relaxed).min(seeds));
        if last.elapsed() >= every || finished {
            last = Instant::now();
            let secs = started.elapsed().as_secs_f64().max(1e-9);
            let failed = outcome.failed.lock().map(|f| f.len()).unwrap_or(0);
            let line = format!(
                "sim: {done}/{total} seeds, {:.1} seeds/s, {failed} failed",
                done as f64 / secs
            );
            if terminal {
                eprint!("\r{line}   ");
            } else {
                eprintln!("{line}");
            }
        }
        if finished {
            if terminal {
                eprintln!();
            }
            return;
        }
    }
}

/// Writes the store of a seed, `DIR/sim/<time>-seed<S>/`, with the files of a chaos run's
/// (`crate::store::RunDir`): history.csv, seed.txt, plan.txt, results.json, the timeline and
/// plots, and node-logs/n<ID>.log (with the nodes' logs on).
fn write_store(store: &Path, result: &CaseResult) -> Result<PathBuf, String> {
    let stamp = crate::run::timestamp(std::time::SystemTime::now());
    let seed = result.case.seed;
    let run = RunDir::create(store.join("sim").join(format!("{stamp}-seed{seed}")))
        .map_err(|e| e.to_string())?;
    let io = |e: crate::Error| e.to_string();
    run.write_plan(&result.case.options(), &result.plan)
        .map_err(io)?;
    run.write_history(&result.ops).map_err(io)?;
    let mut results = result.results.clone();
    if let (Ok(paired), Some(check)) = (
        history::pair::pair_with_faults(&result.ops),
        &result.results.checks,
    ) {
        let title = format!("sim seed {seed}");
        results.report_errors = run.write_reports(&title, Some(seed), &paired, check);
    }
    run.write_results(&results).map_err(io)?;
    if let Some(logs) = &result.logs {
        for node in 1..=result.case.nodes {
            let tag = super::world::node_tag(node);
            let lines: String = logs
                .lines()
                .filter(|line| line.contains(&tag))
                .map(|line| format!("{line}\n"))
                .collect();
            let path = run.node_logs().join(format!("n{node}.log"));
            fs::write(&path, lines).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(run.path().to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_failure_is_abridged_but_keeps_its_summary_and_store() {
        let lines: Vec<String> = (0..20).map(|i| format!("violation {i}")).collect();
        let text = format!(
            "{}\n(recovery: 3 evaluated)\nstore: /s\ntimeline: /s/t.html",
            lines.join("\n")
        );
        let short = abridged(&text);
        assert!(short.contains("violation 7") && !short.contains("violation 8"));
        assert!(short.contains("12 more lines"));
        assert!(short.ends_with("(recovery: 3 evaluated)\nstore: /s\ntimeline: /s/t.html"));
        assert_eq!(abridged("one\nstore: x"), "one\nstore: x");
    }

    #[test]
    fn seeds_parse_in_every_form_and_shards_partition_them() {
        assert_eq!(parse_seeds("1..4").unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_seeds("1..=3").unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_seeds("7").unwrap(), vec![7]);
        assert_eq!(parse_seeds("5,9").unwrap(), vec![5, 9]);
        assert!(parse_seeds("4..1").is_err());
        assert!(parse_seeds("x").is_err());
        let all = parse_seeds("1..11").unwrap();
        let mut union: Vec<u64> = (0..3)
            .flat_map(|i| select_shard(all.clone(), Some(&format!("{i}/3"))).unwrap())
            .collect();
        union.sort_unstable();
        assert_eq!(union, all, "the shards cover every seed exactly once");
        assert!(select_shard(all, Some("3/3")).is_err());
    }
}
