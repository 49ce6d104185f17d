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

use checker::Verdict;
use clap::Args;
use serde::Serialize;

use super::shrink::shrink;
use super::{CaseResult, SimCase, run_case};
use crate::faults::FaultKind;

/// `locksmith sim [--seeds 1..1000] [--jobs N] [--shard I/N] [--time-s 30] [--nodes 5]
/// [--bug NAME] [--store DIR]`
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Seeds: `A..B` (B excluded), `A..=B`, `S`, or a comma list.
    #[arg(long, default_value = "1..1000")]
    pub seeds: String,
    /// Worker threads (default 1). Each seed replays exactly when seeds run one at a time;
    /// two simulations running at once in one process were seen to disturb each other
    /// (the digest check, `LOCKSMITH_SIM_DIGESTS=1`), so more than one job is faster but a
    /// failing seed must then be rerun alone. Across machines or processes use `--shard`.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
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
    /// Fault kinds (kill, pause, partition, clock; `none` for no faults).
    #[arg(long, default_value = "kill,pause,partition,clock")]
    pub nemesis: String,
    /// Switch on one known bug of lockd (`lockd --bug`).
    #[arg(long)]
    pub bug: Option<String>,
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
    let seeds = select_shard(parse_seeds(&args.seeds)?, args.shard.as_deref())?;
    let template = template(args)?;
    let jobs = args.jobs.max(1);
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
    let outcome = run_seeds(&seeds, &template, jobs, !args.keep_going);
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
    failed.sort_by_key(|r| r.case.seed);
    let unknown = outcome.unknown.into_inner().unwrap_or_default();
    if let Some(path) = &args.junit {
        write_junit(path, done, &failed, &unknown, elapsed)?;
    }
    for result in &unknown {
        println!(
            "seed {}: unknown: {}",
            result.case.seed,
            unknown_reason(&result.check.verdict)
        );
    }
    let Some(first) = failed.first() else {
        if !unknown.is_empty() {
            return Ok(2);
        }
        println!("valid: {done} seeds");
        return Ok(0);
    };
    for result in &failed {
        println!("seed {}: invalid", result.case.seed);
    }
    report_failure(first, args)?;
    Ok(1)
}

/// `--junit`: one testcase per seed that did not pass, plus a summary.
fn write_junit(
    path: &Path,
    done: usize,
    failed: &[CaseResult],
    unknown: &[CaseResult],
    elapsed: Duration,
) -> Result<(), String> {
    use checker::report::junit::{self, SeedOutcome};
    let bad: Vec<SeedOutcome> = failed
        .iter()
        .chain(unknown)
        .map(|r| SeedOutcome {
            seed: r.case.seed,
            verdict: r.verdict().as_str().to_owned(),
            explanation: r.check.explanation(),
            rerun: format!("rerun: {}", r.case.rerun_command()),
        })
        .collect();
    let suite = junit::sim_suite("locksmith sim", done as u64, &bad, elapsed.as_secs_f64());
    junit::write(path, &[suite]).map_err(|e| format!("{}: {e}", path.display()))
}

fn unknown_reason(verdict: &Verdict) -> String {
    match verdict {
        Verdict::Unknown { reason } => reason.clone(),
        other => other.as_str().to_owned(),
    }
}

/// Prints the failing seed's explanation, writes its store (rerun with the nodes' logs),
/// shrinks it, and prints both rerun commands.
fn report_failure(result: &CaseResult, args: &SimArgs) -> Result<(), String> {
    let case = &result.case;
    println!(
        "\nseed {} failed:\n{}",
        case.seed,
        result.check.explanation()
    );
    let mut with_logs = case.clone();
    with_logs.logs = true;
    let logged = run_case(&with_logs);
    if logged.verdict() != result.verdict() || logged.ops != result.ops {
        println!(
            "warning: the rerun with logs did not replay the run exactly (a leak of \
             nondeterminism); the store holds the rerun"
        );
    }
    let dir = write_store(&args.store, &logged)?;
    println!("store: {}", dir.display());
    println!("timeline: {}", dir.join("timeline.html").display());
    println!("rerun: {}", case.rerun_command());
    if !args.no_shrink {
        eprintln!("locksmith sim: shrinking seed {} ...", case.seed);
        let shrunk = shrink(case);
        println!(
            "smallest failing case found ({} reruns): {} simulated s, {} clients, {} planned faults",
            shrunk.runs, shrunk.case.time_s, shrunk.case.clients, shrunk.faults_left
        );
        println!("rerun (shrunk): {}", shrunk.case.rerun_command());
        let _ = fs::write(
            dir.join("shrunk.txt"),
            format!("{}\n", shrunk.case.rerun_command()),
        );
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
    failed: Mutex<Vec<CaseResult>>,
    unknown: Mutex<Vec<CaseResult>>,
}

fn run_seeds(seeds: &[u64], template: &SimCase, jobs: usize, stop_early: bool) -> Outcome {
    let outcome = Outcome {
        done: AtomicUsize::new(0),
        sim_ms: AtomicU64::new(0),
        failed: Mutex::new(Vec::new()),
        unknown: Mutex::new(Vec::new()),
    };
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
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
                    let result = run_case(&case);
                    if std::env::var_os("LOCKSMITH_SIM_DIGESTS").is_some() {
                        eprintln!(
                            "seed {seed}: {} ops, history digest {:016x}",
                            result.ops.len(),
                            super::history_digest(&result.ops)
                        );
                    }
                    outcome.sim_ms.fetch_add(result.sim_ms, Ordering::Relaxed);
                    outcome.done.fetch_add(1, Ordering::Relaxed);
                    match result.verdict() {
                        Verdict::Valid => {}
                        Verdict::Invalid => {
                            if stop_early {
                                stop.store(true, Ordering::Relaxed);
                            }
                            if let Ok(mut failed) = outcome.failed.lock() {
                                failed.push(result);
                            }
                        }
                        Verdict::Unknown { .. } => {
                            if let Ok(mut unknown) = outcome.unknown.lock() {
                                unknown.push(result);
                            }
                        }
                    }
                }
            });
        }
        progress(&outcome, seeds.len(), started, &next, seeds.len(), &stop);
    });
    outcome
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

#[derive(Serialize)]
struct SimResults<'a> {
    seed: u64,
    verdict: &'a str,
    rerun: String,
    simulated_ms: u64,
    ops: usize,
    faults: &'a [String],
    checks: &'a checker::Check,
}

/// Writes `DIR/sim/<time>-seed<S>/`: history.csv, results.json, timeline.html,
/// latency.svg, plan.txt, faults.txt, node-logs/ (one file per node, and all.log).
fn write_store(store: &Path, result: &CaseResult) -> Result<PathBuf, String> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let dir = store
        .join("sim")
        .join(format!("{stamp}-seed{}", result.case.seed));
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    fs::create_dir_all(dir.join("node-logs")).map_err(io)?;
    fs::write(dir.join("history.csv"), super::history_csv(&result.ops)).map_err(io)?;
    let results = SimResults {
        seed: result.case.seed,
        verdict: result.verdict().as_str(),
        rerun: result.case.rerun_command(),
        simulated_ms: result.sim_ms,
        ops: result.ops.len(),
        faults: &result.faults,
        checks: &result.check,
    };
    let json = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
    fs::write(dir.join("results.json"), json).map_err(io)?;
    fs::write(
        dir.join("plan.txt"),
        crate::schedule::describe_plan(&result.plan),
    )
    .map_err(io)?;
    fs::write(dir.join("faults.txt"), result.faults.join("\n") + "\n").map_err(io)?;
    if let Ok(paired) = history::pair::pair_with_faults(&result.ops) {
        let title = format!("sim seed {}", result.case.seed);
        let html = checker::report::timeline::render(&title, &paired, &result.check);
        fs::write(dir.join("timeline.html"), html).map_err(io)?;
        let svg = checker::report::plot::latency_svg(&title, &paired.operations, &paired.faults);
        fs::write(dir.join("latency.svg"), svg).map_err(io)?;
    }
    if let Some(logs) = &result.logs {
        fs::write(dir.join("node-logs").join("all.log"), logs).map_err(io)?;
        for node in 1..=result.case.nodes {
            let tag = format!("node{{name=\"n{node}\"}}");
            let lines: String = logs
                .lines()
                .filter(|line| line.contains(&tag))
                .map(|line| format!("{line}\n"))
                .collect();
            fs::write(dir.join("node-logs").join(format!("n{node}.log")), lines).map_err(io)?;
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

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
