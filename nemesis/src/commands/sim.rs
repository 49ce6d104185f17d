//! `locksmith sim`'s arguments: seeds, shards, the case template; the work is
//! `nemesis::sim::cmd`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use nemesis::faults::FaultKind;
use nemesis::harness::swarm::{Pins, parse_range};
use nemesis::sim::SimCase;
use nemesis::sim::cmd::SimRun;

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
    /// Draw nothing from the seed: every seed runs the fixed case (5 nodes, 10 clients,
    /// 4 keys, leases 400-1500 ms, think 10-100 ms, every fault kind). By default each seed
    /// draws its own (swarm seeds: 3/5/7 nodes, 1-64 clients, 1-64 keys, leases, think
    /// times, overholds, fault kinds and rates); plan.txt records the draw. The flags below
    /// pin a knob over either.
    #[arg(long)]
    pub no_swarm: bool,
    /// Nodes (fixed case: 5).
    #[arg(long)]
    pub nodes: Option<u64>,
    /// Client slots (fixed case: 10).
    #[arg(long)]
    pub clients: Option<u64>,
    /// Keys (fixed case: 4).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Each client's pause between two ops, ms, LOW-HIGH (fixed case: 10-100).
    #[arg(long)]
    pub think_ms: Option<String>,
    /// The leases clients ask for, ms, LOW-HIGH (fixed case: 400-1500).
    #[arg(long)]
    pub lease_ms: Option<String>,
    /// Percent of grants held past their lease (fixed case: 12).
    #[arg(long)]
    pub overhold_percent: Option<u64>,
    /// Mean time between fault episodes, ms (fixed case: 0, a twelfth of the fault phase).
    #[arg(long)]
    pub fault_interval_ms: Option<u64>,
    /// Fault kinds (kill, pause, partition, clock, netem; `none` for no faults). netem is
    /// `slow` (up to 150 ms per message on a node's links) and `flaky` (a node's peer links
    /// drop, reorder and duplicate messages).
    /// (Fixed case: every kind; swarm seeds draw from every kind.)
    #[arg(long)]
    pub nemesis: Option<String>,
    /// Switch on one known bug of lockd (`lockd --bug`).
    #[arg(long)]
    pub bug: Option<String>,
    /// lockd's fault points (`lockd::buggify!`: late answers, early deadlines, cut client
    /// connections, long-delayed duplicate messages, ...), `on` or `off`. (Fixed case: off;
    /// swarm seeds draw it, on for one seed in two.)
    #[arg(long, value_parser = ["on", "off"])]
    pub buggify: Option<String>,
    /// Write every node's trace of the inputs its core stepped (`lockd::trace`) to
    /// `DIR/seed-S/node-logs/nI.trace.jsonl`; each seed's verdict then includes their replay
    /// through the model (the check `trace replay`; `locksmith model replay DIR/seed-S`).
    /// Without --trace, each seed's traces stay in memory, replayed there; only a failing
    /// seed's are written (its store keeps them).
    #[arg(long, value_name = "DIR", conflicts_with = "no_trace")]
    pub trace: Option<PathBuf>,
    /// No traces and no trace replay: each verdict rests on the history's checks and node
    /// health alone (faster; issue 24 measured the cost in the README).
    #[arg(long)]
    pub no_trace: bool,
    /// Exit 1 when a coverage probe marked required (`lockd::probe::PROBES`) was reached by
    /// no seed of the run (ci/test.sh); the table is printed either way.
    #[arg(long)]
    pub require_probes: bool,
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
    /// runs every seed in a child process of its own).
    #[arg(long, hide = true)]
    pub child: bool,
    /// Internal, with `--child`: no node logs and no store (a shrinking candidate).
    #[arg(long, hide = true)]
    pub child_quiet: bool,
}

/// Parses and runs `locksmith sim`.
pub fn run(args: SimArgs) -> ExitCode {
    let code = match sim_run(&args) {
        Ok(run) => nemesis::sim::cmd::run(&run),
        Err(message) => {
            eprintln!("locksmith sim: {message}");
            2
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(2))
}

fn sim_run(args: &SimArgs) -> Result<SimRun, String> {
    let seeds = select_shard(parse_seeds(&args.seeds)?, args.shard.as_deref())?;
    Ok(SimRun {
        seeds,
        jobs: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1),
        template: template(args)?,
        store: args.store.clone(),
        keep_going: args.keep_going,
        shrink: !args.no_shrink,
        junit: args.junit.clone(),
        child: args.child.then_some(args.child_quiet),
        require_probes: args.require_probes,
    })
}

fn template(args: &SimArgs) -> Result<SimCase, String> {
    let mut case = if args.no_swarm {
        SimCase::new(0)
    } else {
        SimCase::swarm(0)
    };
    let base = &mut case.draw.base;
    base.time_s = args.time_s.max(1);
    if let Some(bug) = &args.bug {
        bug.parse::<lockd::bugs::Bug>()
            .map_err(|e| format!("--bug: {e}"))?;
        base.bug = Some(bug.clone());
    }
    base.drop_faults = args.drop_faults.iter().copied().collect();
    let keys = args.keys.map(|k| u32::try_from(k.max(1)));
    let pins = Pins {
        nodes: args.nodes,
        concurrency: args.clients.map(|c| c.max(1)),
        keys: keys.transpose().map_err(|e| format!("--keys: {e}"))?,
        nemesis: args.nemesis.as_deref().map(parse_kinds).transpose()?,
        think_ms: (args.think_ms.as_deref().map(|t| parse_range("think-ms", t))).transpose()?,
        lease_ms: (args.lease_ms.as_deref().map(|t| parse_range("lease-ms", t))).transpose()?,
        overhold_percent: args.overhold_percent.map(|p| p.min(100)),
        fault_interval_ms: args.fault_interval_ms,
        buggify: args.buggify.as_deref().map(|b| b == "on"),
    };
    if let Some(nodes) = pins.nodes.filter(|n| !(1..=9).contains(n)) {
        return Err(format!("--nodes {nodes}: expected 1 to 9"));
    }
    case.draw.pins = pins;
    case.trace_root = args.trace.clone();
    case.trace_files = args.trace.is_some();
    case.no_trace = args.no_trace;
    Ok(case.with_seed(0))
}

/// `--nemesis`: a comma list of fault kinds, or `none`.
fn parse_kinds(text: &str) -> Result<Vec<FaultKind>, String> {
    if text == "none" {
        return Ok(Vec::new());
    }
    (text.split(','))
        .map(|k| k.trim().parse::<FaultKind>().map_err(|e| e.to_string()))
        .collect()
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
