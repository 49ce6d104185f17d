//! `locksmith bench --soak [--sessions 1000000] [--keys 100000] [--time-limit-s 540]
//! [--rss-bound-mib 512] [--catch-up-bound-s 30]`: the cluster soak of issue 27, lockd only
//! (`nemesis::bench::soak` holds the behaviour). Exit 0 when every bound holds, 1 when one
//! does not (the table says which), 2 when the soak could not run.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use nemesis::bench::BenchCluster;
use nemesis::bench::soak::{self, SoakConfig, SoakReport};
use nemesis::systems::lockd::{Lockd, find_lockd};

use super::bench::{BenchArgs, System};

/// How long a fresh cluster may take to elect a leader.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The seed of lockd's node RNGs (election timeouts).
const SOAK_SEED: u64 = 1;

/// The soak's flags (`locksmith bench --soak`); the others need `--soak`.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Run the cluster soak of issue 27 instead of the cycles table: lockd only. 3 nodes
    /// (--nodes), one follower killed at the start and restarted at the end; sessions
    /// registered and keys held; every node's peak RSS, the follower's catch-up and the
    /// snapshot's size checked against their bounds.
    #[arg(
        long,
        conflicts_with_all = ["time_s", "clients", "failover_rounds", "lease_ms", "node_cmd", "client_cmd"]
    )]
    pub soak: bool,
    /// Distinct client sessions to register (the holders' included).
    #[arg(long, requires = "soak", default_value_t = 1_000_000)]
    pub sessions: u64,
    /// Distinct keys to take and hold until the end.
    #[arg(long, requires = "soak", default_value_t = 100_000)]
    pub keys: u64,
    /// Keys per holder session (keys / this = holder sessions, kept alive by touches).
    #[arg(long, requires = "soak", default_value_t = 100)]
    pub keys_per_session: u64,
    /// The lease of every held key, ms (lockd's longest by default).
    #[arg(long, requires = "soak", default_value_t = 600_000)]
    pub hold_lease_ms: u64,
    /// Concurrent client tasks, one connection each.
    #[arg(long, requires = "soak", default_value_t = 64)]
    pub workers: usize,
    /// The load must reach its targets within this many seconds; it stops there. It must
    /// end before the held keys' lease (--hold-lease-ms) runs out: lockd renews no lease.
    #[arg(long, requires = "soak", default_value_t = 540)]
    pub time_limit_s: u64,
    /// Every node's peak RSS (VmHWM) must stay at or below this, MiB. The default is about
    /// 1.7 times the highest peak measured at the defaults (298 MiB, 2026-12-05; README).
    #[arg(long, requires = "soak", default_value_t = 512)]
    pub rss_bound_mib: u64,
    /// The restarted follower must reach the leader's commit index within this many seconds
    /// (measured at the defaults: 0.9 to 1.4 s for an 11.6 MiB snapshot and the entries
    /// after it).
    #[arg(long, requires = "soak", default_value_t = 30)]
    pub catch_up_bound_s: u64,
}

impl SoakArgs {
    fn config(&self) -> SoakConfig {
        SoakConfig {
            sessions: self.sessions,
            keys: self.keys,
            keys_per_session: self.keys_per_session,
            hold_lease_ms: self.hold_lease_ms,
            workers: self.workers,
            time_limit: Duration::from_secs(self.time_limit_s),
            rss_bound_mib: self.rss_bound_mib,
            catch_up_bound: Duration::from_secs(self.catch_up_bound_s),
        }
    }
}

/// `locksmith bench --soak`.
pub fn run(args: &BenchArgs) -> ExitCode {
    if let Some(other) = args.system.iter().find(|s| **s != System::Lockd) {
        eprintln!(
            "locksmith bench --soak: lockd only (the soak speaks lockd's session RPC and reads \
             its status and /proc memory); --system {} is not supported",
            format!("{other:?}").to_lowercase()
        );
        return ExitCode::from(2);
    }
    let config = args.soak.config();
    if let Err(error) = config.validate(args.nodes) {
        eprintln!("locksmith bench --soak: {error}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("locksmith bench --soak: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    let report = runtime.block_on(async {
        let system = Arc::new(Lockd::new(find_lockd()?, None, SOAK_SEED));
        let mut cluster = BenchCluster::start(system, args.nodes, START_TIMEOUT).await?;
        let report = soak::soak(&cluster, &config).await;
        if args.keep_logs {
            eprintln!(
                "soak: cluster directory kept: {}",
                cluster.keep_dir().display()
            );
        }
        report
    });
    let report = match report {
        Ok(report) => report,
        Err(error) => {
            eprintln!("locksmith bench --soak: {error}");
            return ExitCode::from(2);
        }
    };
    print_report(args, &config, &report);
    let failures = report.failures(&config);
    if failures.is_empty() {
        println!("soak: every bound holds");
        ExitCode::SUCCESS
    } else {
        for failure in &failures {
            println!("soak: FAILED: {failure}");
        }
        ExitCode::from(1)
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "ok" } else { "FAILED" }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn print_report(args: &BenchArgs, config: &SoakConfig, report: &SoakReport) {
    let load = config.load();
    println!(
        "locksmith bench --soak: lockd, {} nodes on loopback, fsync on; {} sessions, {} keys \
         held by {} sessions of {} (lease {} ms), {} workers",
        args.nodes,
        config.sessions,
        config.keys,
        load.holders(),
        config.keys_per_session,
        config.hold_lease_ms,
        config.workers
    );
    println!("{:<44} {:>26}  {:<14} verdict", "measure", "value", "bound");
    let row = |measure: &str, value: String, bound: String, ok: Option<bool>| {
        let ok = ok.map_or("", verdict);
        println!("{measure:<44} {value:>26}  {bound:<14} {ok}");
    };
    row(
        "sessions registered (distinct)",
        report.sessions_distinct.to_string(),
        format!(">= {}", config.sessions),
        Some(report.sessions_distinct >= config.sessions),
    );
    row(
        "sessions/s (whole load)",
        format!("{:.0}", report.sessions_per_s()),
        String::new(),
        None,
    );
    row(
        "load time s",
        format!("{:.1}", report.load_s),
        format!("<= {}", config.time_limit.as_secs()),
        Some(!report.time_limit_reached),
    );
    let held = report.leader_locks_held.map_or(0, |h| h as u64);
    row(
        "keys held (the leader's table)",
        report
            .leader_locks_held
            .map_or("no answer".into(), |h| h.to_string()),
        format!(">= {}", config.keys),
        Some(held >= config.keys),
    );
    row(
        "keys held: time to take them s",
        report.hold_s.map_or("never".into(), |s| format!("{s:.1}")),
        String::new(),
        None,
    );
    row(
        "holder sessions expired or evicted",
        report.load.holders_expired.to_string(),
        "0".into(),
        Some(report.load.holders_expired == 0),
    );
    row(
        "holder touches; failed calls",
        format!("{}; {}", report.load.touches, report.load.errors),
        String::new(),
        None,
    );
    print_nodes(config, report);
    print_catch_up(config, report);
    print_sizes(report);
    if let Some(first) = &report.load.first_error {
        println!("first failed call: {first}");
    }
}

fn print_nodes(config: &SoakConfig, report: &SoakReport) {
    for node in &report.nodes {
        let (value, ok) = match node.peak_rss_kib {
            Some(kib) => (
                format!("{:.1} MiB", kib as f64 / 1024.0),
                kib <= config.rss_bound_mib * 1024,
            ),
            None => ("never read".into(), false),
        };
        println!(
            "{:<44} {value:>26}  {:<14} {}",
            format!("peak RSS n{} ({})", node.node, node.part),
            format!("<= {} MiB", config.rss_bound_mib),
            verdict(ok)
        );
    }
}

fn print_catch_up(config: &SoakConfig, report: &SoakReport) {
    let bound = format!("<= {} s", config.catch_up_bound.as_secs());
    match &report.catch_up {
        Some(catch_up) => {
            let (value, ok) = match &catch_up.result {
                Ok(took) => (
                    format!("{:.1} s", took.as_secs_f64()),
                    *took <= config.catch_up_bound,
                ),
                Err(why) => (why.clone(), false),
            };
            println!(
                "{:<44} {value:>26}  {bound:<14} {}",
                format!(
                    "catch-up n{} (to commit index {})",
                    catch_up.node, catch_up.leader_commit_at_restart
                ),
                verdict(ok)
            );
        }
        None => println!("{:<44} {:>26}  {bound:<14} FAILED", "catch-up", "not run"),
    }
}

fn print_sizes(report: &SoakReport) {
    let frame_max = lockd::rpc::FRAME_LEN_MAX as u64;
    let record_max = lockd::storage::RECORD_BYTES_MAX as u64;
    let patterns = soak::watch::limit_patterns();
    for node in &report.nodes {
        println!(
            "{:<44} {:>26}  {:<14} {}",
            format!("snapshot n{} / largest log segment", node.node),
            format!(
                "{:.1} / {:.1} MiB",
                mib(node.disk.snapshot_bytes),
                mib(node.disk.segment_bytes_max)
            ),
            format!("<= {:.0} MiB", mib(record_max)),
            verdict(node.disk.snapshot_bytes.max(node.disk.segment_bytes_max) <= record_max)
        );
        let log = match &node.log {
            Ok(hits) if hits.hits.is_empty() => format!("{} lines, no limit hit", hits.lines),
            Ok(hits) => hits
                .hits
                .iter()
                .map(|(index, (count, _))| format!("{} x{count}", patterns[*index].needle))
                .collect::<Vec<_>>()
                .join(", "),
            Err(why) => why.clone(),
        };
        let ok = node.log.as_ref().is_ok_and(|hits| !hits.fails(&patterns));
        println!(
            "{:<44} {log:>26}  {:<14} {}",
            format!("log n{}: frame/record limits, panics", node.node),
            "none",
            verdict(ok)
        );
    }
    let largest = report
        .nodes
        .iter()
        .max_by_key(|n| n.disk.snapshot_bytes)
        .map_or(0, |n| n.disk.snapshot_bytes);
    println!(
        "largest snapshot {:.1} MiB: {} the record limit ({:.0} MiB); {} the frame limit \
         ({:.0} MiB), which it never meets whole: InstallSnapshot sends it in chunks of at \
         most {:.0} MiB",
        mib(largest),
        if largest <= record_max {
            "under"
        } else {
            "OVER"
        },
        mib(record_max),
        if largest <= frame_max {
            "under"
        } else {
            "over"
        },
        mib(frame_max),
        mib(lockd::raft::Config::new(1, vec![1]).snapshot_chunk_bytes),
    );
}
