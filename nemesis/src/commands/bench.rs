//! `locksmith bench [--system lockd|etcd|zookeeper|redis|exec,...] [--time-s 20]`: the performance table of
//! issue 8; with `exec` (`--node-cmd`, `--client-cmd`) the cost of the client protocol of
//! issue 26 (lockd through `examples/lockd_client.py` against the native client).
//!
//! For each system: acquire+release cycles per second and p50/p99 cycle latency at each
//! client count of `--clients` (each client on its own key, clients bound round-robin to the
//! nodes), then the median time from SIGKILL of the leader until a lock is granted again.
//! With both systems, the table shows lockd / etcd ratios. Exit 0 when every asked system
//! ran, 2 when one could not run (not installed, not built, cluster never served).
//!
//! `locksmith bench --soak` runs the cluster soak of issue 27 instead (lockd only; its flags
//! and report are in `commands/soak.rs`).

use std::process::ExitCode;
use std::time::Duration;

use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use nemesis::bench::{
    self, BenchCluster, CyclesConfig, CyclesReport, FailoverConfig, FailoverReport,
};
use nemesis::progress::Ticker;
use nemesis::systems::etcd::{ClientOptions, Etcd, EtcdClusterConfig, find_etcd};
use nemesis::systems::lockd::{Lockd, find_lockd};

/// How long a fresh cluster may take to elect a leader.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The seed of lockd's node RNGs (election timeouts); the bench has no schedule to seed.
const BENCH_SEED: u64 = 1;

/// A system under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum System {
    /// The reference lock service of this workspace.
    Lockd,
    /// etcd 3.4 (Debian's etcd-server), through the lease + Txn lock recipe.
    Etcd,
    /// ZooKeeper 3.8 (Debian's zookeeper), through the ephemeral sequential node recipe; the
    /// lease (a session timeout) is at most 4000 ms.
    Zookeeper,
    /// Any service: `--node-cmd` and `--client-cmd` (nemesis/PROTOCOL.md). No failover
    /// measurement: the harness cannot ask an exec system who leads.
    Exec,
    /// Redlock over `--nodes` independent redis-server instances (Debian's redis-server),
    /// without libfaketime. No failover: see [`REDIS_FAILOVER`].
    Redis,
}

/// What failover means for Redlock, printed in place of a figure.
const REDIS_FAILOVER: &str = "redis failover: n/a: the instances are independent and elect no \
     leader; a lock needs a majority of them, so a SIGKILL of one instance (of 3 or more) \
     leaves the lock available at once, with no failover to measure (the killed instance \
     restarts empty: what it held is lost)";

/// Arguments of `locksmith bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Which systems to measure, comma-separated, side by side (with two, the table shows
    /// first/second ratios); lockd, etcd, zookeeper and redis when absent.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub system: Vec<System>,
    /// --system exec: the command that starts one node (placeholders as for `locksmith test`).
    #[arg(long)]
    node_cmd: Option<String>,
    /// --system exec: the command that starts one client adapter.
    #[arg(long)]
    client_cmd: Option<String>,
    /// Seconds of each cycles measurement (one per client count).
    #[arg(long, default_value_t = 20)]
    time_s: u64,
    /// Client counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    clients: Vec<usize>,
    /// Cluster size.
    #[arg(long, default_value_t = 3)]
    pub nodes: u64,
    /// How many times to kill the leader (0 skips the failover measurement).
    #[arg(long, default_value_t = 3)]
    failover_rounds: usize,
    /// The lease of every acquire, in ms.
    #[arg(long, default_value_t = 5000)]
    lease_ms: u64,
    /// Keep each cluster's directory (data dirs, node-logs/) and print where it is.
    #[arg(long)]
    pub keep_logs: bool,
    /// The cluster soak (`--soak` and its flags).
    #[command(flatten)]
    pub soak: super::soak::SoakArgs,
}

/// The figures of one system, or why it could not run.
struct Figures {
    cycles: Vec<CyclesReport>,
    failover: Option<FailoverReport>,
    /// Nodes that exited on their own (the bench restarted them), one line each.
    crashes: Vec<String>,
}

impl Figures {
    /// Why these figures do not describe a healthy run, if they do not.
    fn trouble(&self) -> Option<String> {
        if !self.crashes.is_empty() {
            return Some(format!(
                "nodes exited on their own: {}",
                self.crashes.join("; ")
            ));
        }
        match &self.failover {
            Some(failover) if failover.recovery_ms.is_empty() => {
                Some("no failover round succeeded".into())
            }
            _ => None,
        }
    }
}

pub fn run(args: BenchArgs) -> ExitCode {
    if args.soak.soak {
        return super::soak::run(&args);
    }
    let systems = if args.system.is_empty() {
        vec![
            System::Lockd,
            System::Etcd,
            System::Zookeeper,
            System::Redis,
        ]
    } else {
        args.system.clone()
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("locksmith bench: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    let mut results = Vec::new();
    let mut all_ran = true;
    for system in systems {
        let figures = runtime.block_on(measure(system, &args));
        match &figures {
            Err(error) => {
                eprintln!("locksmith bench: {system:?}: {error:#}");
                all_ran = false;
            }
            Ok(figures) => {
                if let Some(trouble) = figures.trouble() {
                    eprintln!("locksmith bench: {system:?}: {trouble}");
                    all_ran = false;
                }
            }
        }
        results.push((system, figures.ok()));
    }
    print_table(&args, &results);
    if all_ran {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}

async fn measure(system: System, args: &BenchArgs) -> anyhow::Result<Figures> {
    let system: Arc<dyn nemesis::systems::System> = match system {
        System::Lockd => Arc::new(Lockd::new(find_lockd()?, None, BENCH_SEED)),
        System::Etcd => {
            let config = EtcdClusterConfig {
                binary: find_etcd()?,
                ..EtcdClusterConfig::default()
            };
            Arc::new(Etcd::new(config, ClientOptions::default()))
        }
        System::Zookeeper => Arc::new(nemesis::systems::zookeeper::ZooKeeper::new(
            nemesis::systems::zookeeper::find_zookeeper()?,
        )),
        System::Redis => Arc::new(nemesis::systems::redis::Redis::new(
            nemesis::systems::redis::find_redis_server()?,
            None,
            BENCH_SEED,
        )),
        System::Exec => {
            let (Some(node_cmd), Some(client_cmd)) = (&args.node_cmd, &args.client_cmd) else {
                anyhow::bail!("--system exec needs --node-cmd and --client-cmd");
            };
            // Slots: every measured client id is its own slot.
            Arc::new(nemesis::systems::exec::Exec::new(
                node_cmd,
                client_cmd,
                u64::MAX,
            )?)
        }
    };
    let name = system.name();
    // ZooKeeper's lease is its session timeout, which its servers grant up to 4 s.
    let lease_ms = if name == "zookeeper" {
        let max = nemesis::systems::zookeeper::MAX_SESSION_MS;
        if args.lease_ms > max {
            eprintln!(
                "{name}: lease {max} ms (a session timeout; the servers grant at most {max} ms)"
            );
        }
        args.lease_ms.min(max)
    } else {
        args.lease_ms
    };
    let handle = system.clone();
    let mut cluster = BenchCluster::start(system, args.nodes, START_TIMEOUT)
        .await
        .with_context(|| format!("start {name}"))?;
    let mut cycles = Vec::new();
    let mut crashes = Vec::new();
    for &clients in &args.clients {
        let config = CyclesConfig {
            clients,
            duration: Duration::from_secs(args.time_s),
            lease_ms,
        };
        let ticker = Ticker::timed(
            name,
            &format!("seconds with {clients} clients"),
            args.time_s,
        );
        cycles.push(bench::cycles(&cluster, &config).await);
        drop(ticker);
        crashes.extend(restart_exited(name, &cluster, START_TIMEOUT).await);
    }
    let failover = if args.failover_rounds > 0 && handle.elects_leader() {
        let message = format!("killing the leader {} times", args.failover_rounds);
        let _ticker = Ticker::start(name, &message);
        let config = FailoverConfig {
            rounds: args.failover_rounds,
            ..FailoverConfig::default()
        };
        Some(bench::failover(&cluster, &config).await?)
    } else {
        None
    };
    crashes.extend(restart_exited(name, &cluster, START_TIMEOUT).await);
    if args.keep_logs {
        eprintln!(
            "{name}: cluster directory kept: {}",
            cluster.keep_dir().display()
        );
    }
    // An exec adapter that broke the protocol makes its figures meaningless.
    for check in handle.checks() {
        if let checker::Verdict::Unknown { reason } = &check.verdict {
            anyhow::bail!("{}: {reason}", check.name);
        }
    }
    Ok(Figures {
        cycles,
        failover,
        crashes,
    })
}

/// Restarts the nodes that exited on their own (the bench kills only the leader, and
/// restarts it at once), so that the next measurement starts from a whole cluster; returns
/// one line per such exit.
async fn restart_exited(name: &str, cluster: &BenchCluster, timeout: Duration) -> Vec<String> {
    let mut lines = Vec::new();
    for (node, status) in cluster.exited() {
        let line = format!("n{node} ({status})");
        eprintln!("{name}: node {line} exited on its own; restarting it");
        if let Err(error) = cluster.restart(node) {
            eprintln!("{name}: restart n{node}: {error}");
        }
        lines.push(line);
    }
    if !lines.is_empty()
        && let Err(error) = cluster.wait_for_leader(timeout).await
    {
        eprintln!("{name}: after the restarts: {error}");
    }
    lines
}

fn print_table(args: &BenchArgs, results: &[(System, Option<Figures>)]) {
    println!(
        "locksmith bench: {} nodes on loopback, {} s per measurement, lease {} ms",
        args.nodes, args.time_s, args.lease_ms
    );
    let names: Vec<String> = results
        .iter()
        .map(|(system, _)| format!("{system:?}").to_lowercase())
        .collect();
    let header: Vec<String> = names.iter().map(|name| format!("{name:>14}")).collect();
    let ratio = results.len() == 2;
    println!(
        "{:<32}{}{}",
        "measure",
        header.join(""),
        if ratio {
            format!("  {:>10}", names.join("/"))
        } else {
            String::new()
        }
    );
    for (index, clients) in args.clients.iter().enumerate() {
        let cycle = |figures: &Figures| figures.cycles.get(index).cloned();
        row(
            &format!("cycles/s, {clients} clients"),
            results,
            ratio,
            |f| cycle(f).map(|c| c.cycles_per_s()),
        );
        row(&format!("p50 ms, {clients} clients"), results, ratio, |f| {
            cycle(f).map(|c| c.p50_ms)
        });
        row(&format!("p99 ms, {clients} clients"), results, ratio, |f| {
            cycle(f).map(|c| c.p99_ms)
        });
    }
    if args.failover_rounds > 0 {
        // n/a for exec: the harness cannot ask it who leads.
        row("failover median ms", results, ratio, |f| {
            f.failover.as_ref().and_then(FailoverReport::median_ms)
        });
    }
    for (system, figures) in results {
        let Some(figures) = figures else { continue };
        for report in &figures.cycles {
            if report.errors > 0 || report.bound_reached {
                println!(
                    "{system:?}, {} clients: {} failed cycles (first: {}){}",
                    report.clients,
                    report.errors,
                    report.first_error.as_deref().unwrap_or("-"),
                    if report.bound_reached {
                        "; cycle bound reached"
                    } else {
                        ""
                    }
                );
            }
        }
        if *system == System::Redis && args.failover_rounds > 0 {
            println!("{REDIS_FAILOVER}");
        }
        if let Some(failover) = &figures.failover {
            let samples: Vec<String> = failover
                .recovery_ms
                .iter()
                .map(|ms| format!("{ms:.0}"))
                .collect();
            println!("{system:?} failover rounds (ms): {}", samples.join(" "));
            for failed in &failover.failed_rounds {
                println!("{system:?} failover: {failed}");
            }
        }
    }
}

fn row(
    label: &str,
    results: &[(System, Option<Figures>)],
    ratio: bool,
    value: impl Fn(&Figures) -> Option<f64>,
) {
    let values: Vec<Option<f64>> = results
        .iter()
        .map(|(_, figures)| figures.as_ref().and_then(&value))
        .collect();
    let cells: Vec<String> = values
        .iter()
        .map(|v| match v {
            Some(v) => format!("{v:>14.1}"),
            None => format!("{:>14}", "n/a"),
        })
        .collect();
    let ratio_cell = match (ratio, values.first(), values.get(1)) {
        (true, Some(Some(first)), Some(Some(second))) if *second > 0.0 => {
            format!("  {:>10.2}", first / second)
        }
        (true, _, _) => format!("  {:>10}", "n/a"),
        _ => String::new(),
    };
    println!("{label:<32}{}{ratio_cell}", cells.join(""));
}
