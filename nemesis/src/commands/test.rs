//! `locksmith test`: one complete chaos test (DESIGN "The harness"), exit 0 valid, 1 invalid,
//! 2 unknown or could not run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use nemesis::faults::FaultKind;
use nemesis::harness::swarm::parse_range;
use nemesis::harness::workload::WorkloadKind;
use nemesis::net::NetKind;
use nemesis::run::{self, TestOptions};
use nemesis::systems::etcd::{ClientOptions, Etcd, EtcdClusterConfig, find_etcd};
use nemesis::systems::faketime::Libfaketime;
use nemesis::systems::lockd::{Lockd, find_lockd};
use nemesis::systems::redis::{Redis, find_redis_server};

/// Options of `locksmith test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Leave these planned faults out (indexes into the plan, as `plan.txt` lists it; a
    /// shrunk simulated seed prints them).
    #[arg(long, value_delimiter = ',')]
    drop_faults: Vec<usize>,
    /// Number of nodes (default: 5; 3 for --system zookeeper).
    #[arg(long)]
    nodes: Option<u64>,
    /// Length of the fault phase, seconds.
    #[arg(long, default_value_t = 60)]
    time_s: u64,
    /// Fault kinds: kill, pause, partition, clock, netem (comma-separated; `none` for none).
    /// Default: the system's own (lockd: kill,pause,partition,clock, plus netem with --hosts;
    /// etcd: kill,pause, plus partition with --net kernel as root; zookeeper:
    /// kill,pause,partition, clock on request; redis: pause,clock).
    #[arg(long)]
    nemesis: Option<String>,
    /// Client slots.
    #[arg(long, default_value_t = 10)]
    concurrency: u64,
    /// Lock keys.
    #[arg(long, default_value_t = 4)]
    keys: u32,
    /// The seed (default: picked from the clock, and printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Start lockd with this injected bug.
    #[arg(long)]
    bug: Option<String>,
    /// Partition backend: proxy (default) or kernel (root: iptables on per-link ports; for
    /// etcd, one system user per node and nftables rules on the sending uid), or netns
    /// (root: each node in a network namespace on a bridge; allows --nemesis netem).
    #[arg(long, default_value = "proxy")]
    net: String,
    /// The system under test: lockd, etcd (kill, pause; partition with --net kernel as root),
    /// zookeeper (Debian's package; kill, pause, partition, clock through libfaketime), redis (Redlock over independent
    /// redis-server instances: kill, pause, clock through libfaketime), or exec (any service:
    /// --node-cmd and --client-cmd; nemesis/PROTOCOL.md).
    #[arg(long, default_value = "lockd")]
    system: String,
    /// --system redis: the number of independent redis-server instances (default 5, the
    /// Redlock page's example; 1 is the single-instance SET NX PX lock). Sets --nodes.
    #[arg(long)]
    redis_instances: Option<u64>,
    /// --system exec: the command that starts one node, with placeholders {id} {addr}
    /// {peer_addr} {peers} {peer_addrs} {client_addrs} {dir} {nodes} (run by `sh -c`).
    #[arg(long)]
    node_cmd: Option<String>,
    /// --system exec: the command that starts one client adapter, with placeholders {addr}
    /// {client_addrs} {node} {process} {slot}; it speaks JSON lines on stdin and stdout.
    #[arg(long)]
    client_cmd: Option<String>,
    /// fenced (default) or unfenced (the control workload, expected to fail). Redis: unfenced
    /// only (Redlock issues no fencing token).
    #[arg(long)]
    workload: Option<String>,
    /// Each client's pause between two ops, ms, LOW-HIGH (sets the request rate).
    #[arg(long, default_value = "10-100")]
    think_ms: String,
    /// The leases clients ask for, ms, LOW-HIGH.
    #[arg(long, default_value = "400-1500")]
    lease_ms: String,
    /// Mean time between fault episodes, ms (0: a twelfth of the fault phase, within 1-5 s).
    #[arg(long, default_value_t = 0)]
    fault_interval_ms: u64,
    /// Percent of grants a client holds past its lease on its own, 0-100 (besides the stalls
    /// of the pause nemesis's pause-clients). Default 12; 0 for redis, whose resource is
    /// unfenced, so that only the nemesis's stalls hold a lock past its validity.
    #[arg(long)]
    overhold_percent: Option<u64>,
    /// Bound of the recovery phase, seconds.
    #[arg(long, default_value_t = 20)]
    recovery_s: u64,
    /// Where runs are stored.
    #[arg(long, default_value = "store")]
    store: PathBuf,
    /// Also write a JUnit XML report (one testcase per check, liveness, node health).
    #[arg(long, value_name = "FILE.xml")]
    junit: Option<PathBuf>,
    /// Run the nodes on these hosts over SSH, one node per host: USER@HOST,USER@HOST,...
    /// (sets --nodes; `locksmith hosts up N` prints a value for it).
    #[arg(long)]
    hosts: Option<String>,
    /// The SSH private key for --hosts (default: the key `locksmith hosts up` wrote, when
    /// there is one, else your own keys and agent).
    #[arg(long)]
    ssh_key: Option<PathBuf>,
    /// Every lockd node writes a trace of its core's inputs to node-logs/n<ID>.trace.jsonl
    /// in the run dir, and the verdict includes their replay through the model (the check
    /// `trace replay`; `locksmith model replay RUN_DIR` repeats it). Local lockd nodes only.
    /// On by default for local lockd nodes (issue 24); the flag says so explicitly.
    #[arg(long, conflicts_with = "no_trace")]
    trace: bool,
    /// No traces and no trace replay: the verdict rests on the history's checks alone.
    #[arg(long)]
    no_trace: bool,
}

/// Whether the nodes write traces and the verdict replays them: `--trace`, else local lockd
/// nodes unless `--no-trace` (etcd, exec and remote nodes have no lockd core to trace).
fn tracing(args: &TestArgs) -> bool {
    args.trace || (!args.no_trace && args.system == "lockd" && args.hosts.is_none())
}

/// The fault kinds a system applies when `--nemesis` is not given, and what it leaves out
/// (said on stderr).
fn default_nemesis(args: &TestArgs) -> Vec<FaultKind> {
    if args.system == "exec" {
        return exec_default_nemesis(args);
    }
    if args.system == "zookeeper" {
        // Clock faults reach a server's wall clock only, and ZooKeeper times sessions on
        // the monotonic clock (systems::zookeeper's module docs; measured in README): in the
        // default set they would take a quarter of the episodes from the faults that
        // threaten the lease, and put every server under LD_PRELOAD, for a fault that moves
        // no lease.
        eprintln!(
            "locksmith test: --system zookeeper: faults kill,pause,partition; left out: clock \
             (ZooKeeper times sessions on the JVM's monotonic clock, which libfaketime leaves \
             alone: add it with --nemesis clock)"
        );
        return vec![FaultKind::Kill, FaultKind::Pause, FaultKind::Partition];
    }
    if args.system == "redis" {
        eprintln!(
            "locksmith test: --system redis: faults pause,clock (Redlock's two known failures: \
             a pause longer than the validity time, a clock jump on a majority); left out: \
             kill (an instance restarts empty: add it with --nemesis), partition (the \
             instances are independent: no peer link to cut)"
        );
        return vec![FaultKind::Pause, FaultKind::Clock];
    }
    if args.system != "etcd" {
        return FaultKind::ALL.to_vec();
    }
    let mut kinds = vec![FaultKind::Kill, FaultKind::Pause];
    let mut left_out = vec![
        "clock (etcd has no lease-clock control, and as a Go program it reads time through the vDSO, which libfaketime cannot reach)".to_owned(),
    ];
    match (args.net.as_str(), nemesis::net::owner::Owner::available()) {
        ("kernel", Ok(())) => kinds.push(FaultKind::Partition),
        ("kernel", Err(why)) => left_out.push(format!("partition ({why})")),
        _ => left_out.push(
            "partition (etcd has one peer URL per member: it needs --net kernel as root)"
                .to_owned(),
        ),
    }
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    eprintln!(
        "locksmith test: --system etcd: faults {}; left out: {}",
        names.join(","),
        left_out.join("; ")
    );
    kinds
}

/// `--system exec`'s faults when `--nemesis` is not given: kill and pause, and partition
/// when the nodes dial their peers on `{peer_addrs}` (or the net is the kernel's).
fn exec_default_nemesis(args: &TestArgs) -> Vec<FaultKind> {
    let mut kinds = vec![FaultKind::Kill, FaultKind::Pause];
    let mut left_out = vec!["clock (no lease-clock control)".to_owned()];
    if exec_partitions(args) {
        kinds.push(FaultKind::Partition);
    } else {
        left_out
            .push("partition (--node-cmd has no {peer_addrs}, so no link can be cut)".to_owned());
    }
    eprintln!(
        "locksmith test: --system exec: faults {}; left out: {}",
        kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(","),
        left_out.join("; ")
    );
    kinds
}

/// Whether partitions can cut an exec system's links: its nodes dial each peer on the
/// per-link address of `{peer_addrs}` (the proxy's, or the kernel net's port per link), or
/// each node runs in a namespace of its own (`--net netns`, which cuts by address).
fn exec_partitions(args: &TestArgs) -> bool {
    args.net == "netns"
        || args
            .node_cmd
            .as_deref()
            .is_some_and(|c| c.contains("{peer_addrs}"))
}

/// The checks of `--system exec`'s options (see `nemesis::systems::exec`).
fn exec_options(args: &TestArgs, nemesis: &[FaultKind]) -> anyhow::Result<()> {
    if args.node_cmd.is_none() || args.client_cmd.is_none() {
        anyhow::bail!("--system exec needs --node-cmd and --client-cmd (nemesis/PROTOCOL.md)");
    }
    if nemesis.contains(&FaultKind::Clock) {
        anyhow::bail!(
            "--system exec: the clock nemesis does not apply (no lease-clock control); use --nemesis kill,pause,partition"
        );
    }
    if nemesis.contains(&FaultKind::Partition) && !exec_partitions(args) {
        anyhow::bail!(
            "--system exec --nemesis partition: --node-cmd must give the nodes {{peer_addrs}} (the per-link address of each peer, through which partitions cut links)"
        );
    }
    if args.bug.is_some() {
        anyhow::bail!(
            "--system exec: --bug names a lockd mutant; put it in --node-cmd (e.g. `... node --bug stale-leader`)"
        );
    }
    if args.trace {
        anyhow::bail!("--system exec: --trace records lockd's core");
    }
    Ok(())
}

fn options(args: &TestArgs) -> anyhow::Result<TestOptions> {
    let hosts = args
        .hosts
        .as_deref()
        .map(|h| nemesis::hosts::HostsOptions::parse(h, args.ssh_key.clone()))
        .transpose()?;
    if args.trace && hosts.is_some() {
        anyhow::bail!("--trace: local nodes only (a remote node's trace would stay on its host)");
    }
    let nemesis = match args.nemesis.as_deref() {
        None if hosts.is_some() => nemesis::netem::default_kinds_with_hosts(),
        None => default_nemesis(args),
        Some("none") | Some("") => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|s| s.trim().parse::<FaultKind>())
            .collect::<Result<_, _>>()?,
    };
    if hosts.is_none() && args.net != "netns" && nemesis.contains(&FaultKind::Netem) {
        anyhow::bail!(
            "--nemesis netem needs --hosts or --net netns (tc netem on the nodes' own interfaces)"
        );
    }
    if hosts.is_some() && (args.system != "lockd" || args.net != "proxy") {
        anyhow::bail!(
            "--hosts runs lockd, partitioned by iptables on the hosts: drop --system and --net"
        );
    }
    let nodes = hosts
        .as_ref()
        .map_or(args.nodes, |h| Some(h.targets.len() as u64))
        .unwrap_or(if args.system == "zookeeper" { 3 } else { 5 });
    if nodes == 0 || args.concurrency == 0 || args.keys == 0 {
        anyhow::bail!("--nodes, --concurrency and --keys must be at least 1");
    }
    if args.system != "exec" && (args.node_cmd.is_some() || args.client_cmd.is_some()) {
        anyhow::bail!("--node-cmd and --client-cmd go with --system exec");
    }
    if args.redis_instances.is_some() && args.system != "redis" {
        anyhow::bail!("--redis-instances goes with --system redis");
    }
    match args.system.as_str() {
        "lockd" => {}
        "exec" => exec_options(args, &nemesis)?,
        "redis" => redis_options(args, &nemesis)?,
        "etcd" => {
            // nemesis::systems::etcd::Etcd: etcd has no lease-clock control, and cannot dial its peers
            // through per-link addresses, so partitions need the owner net (--net kernel, as
            // root: one user per node, nftables by uid).
            if nemesis.contains(&FaultKind::Clock) {
                anyhow::bail!(
                    "--system etcd: the clock nemesis does not apply to etcd: it has no lease-clock control, and as a Go program it reads time through the vDSO, which libfaketime (the clock faults of --system redis and zookeeper) cannot reach; use --nemesis kill,pause,partition"
                );
            }
            if nemesis.contains(&FaultKind::Partition) {
                if args.net != "kernel" {
                    anyhow::bail!(
                        "--system etcd: partitions need --net kernel (etcd has one peer URL per member, so the per-link proxy cannot cut its links)"
                    );
                }
                if let Err(why) = nemesis::net::owner::Owner::available() {
                    anyhow::bail!("--system etcd --nemesis partition: {why}");
                }
            }
            if args.bug.is_some() {
                anyhow::bail!("--system etcd: --bug names a lockd mutant");
            }
            if args.trace {
                anyhow::bail!("--system etcd: --trace records lockd's core");
            }
        }
        "zookeeper" => zookeeper_options(args)?,
        other => anyhow::bail!("--system {other:?}: lockd, etcd, zookeeper, redis or exec"),
    }
    if let Some(bug) = &args.bug {
        bug.parse::<lockd::bugs::Bug>()?;
    }
    let seed = args.seed.unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (now.as_nanos() as u64 ^ u64::from(std::process::id())) % 1_000_000
    });
    let range = |flag, text: &str| parse_range(flag, text).map_err(|e| anyhow::anyhow!(e));
    let think_ms = range("think-ms", &args.think_ms)?;
    let lease_ms = range("lease-ms", &args.lease_ms)?;
    let redis = args.system == "redis";
    let nodes = match args.redis_instances {
        Some(n) if redis => n,
        _ => nodes,
    };
    if nodes == 0 {
        anyhow::bail!("--redis-instances must be at least 1");
    }
    let workload = match args.workload.as_deref() {
        Some(w) => w.parse::<WorkloadKind>()?,
        None if redis => WorkloadKind::Unfenced,
        None => WorkloadKind::Fenced,
    };
    let overhold_percent = match args.overhold_percent {
        Some(p) => p.min(100),
        None if redis => 0,
        None => nemesis::harness::OVERHOLD_PERCENT_DEFAULT,
    };
    Ok(TestOptions {
        nodes,
        time_s: args.time_s,
        nemesis,
        concurrency: args.concurrency,
        keys: args.keys,
        seed,
        bug: args.bug.clone(),
        net: args.net.parse::<NetKind>()?,
        store: args.store.clone(),
        workload,
        recovery_s: args.recovery_s,
        think_ms,
        overhold_percent,
        lease_ms,
        fault_interval_ms: args.fault_interval_ms,
        progress: true,
        hosts,
        drop_faults: args.drop_faults.iter().copied().collect(),
        focus: if redis {
            nemesis::harness::schedule::Focus::WallClockLeases
        } else {
            nemesis::harness::schedule::Focus::Draw
        },
        // Fault points fire only under the simulator (`lockd::buggify`).
        buggify: false,
    })
}

/// The checks of `--system zookeeper`'s options (see `nemesis::systems::zookeeper`).
fn zookeeper_options(args: &TestArgs) -> anyhow::Result<()> {
    use nemesis::systems::zookeeper::{MAX_SESSION_MS, MIN_SESSION_MS};
    if args.net == "netns" {
        anyhow::bail!(
            "--system zookeeper: --net proxy or kernel (the servers' configs name loopback addresses)"
        );
    }
    if args.bug.is_some() {
        anyhow::bail!("--system zookeeper: --bug names a lockd mutant");
    }
    if args.trace {
        anyhow::bail!("--system zookeeper: --trace records lockd's core");
    }
    // The lease is the session timeout, which the servers grant within these bounds.
    let (low, high) = parse_range("lease-ms", &args.lease_ms).map_err(|e| anyhow::anyhow!(e))?;
    if low < MIN_SESSION_MS || high > MAX_SESSION_MS {
        anyhow::bail!(
            "--system zookeeper --lease-ms {}: a lease is a session timeout, which the servers grant between {MIN_SESSION_MS} and {MAX_SESSION_MS} ms",
            args.lease_ms
        );
    }
    Ok(())
}

/// The checks of `--system redis`'s options (see `nemesis::systems::redis`).
fn redis_options(args: &TestArgs, nemesis: &[FaultKind]) -> anyhow::Result<()> {
    if nemesis.contains(&FaultKind::Partition) {
        anyhow::bail!(
            "--system redis: the instances are independent (no peer links for the per-link proxy to cut), and client-to-instance links are not routed through it; use --nemesis kill,pause,clock"
        );
    }
    if args.net != "proxy" {
        anyhow::bail!(
            "--system redis: --net {} cuts links between nodes, and independent redis instances have none; drop --net",
            args.net
        );
    }
    if args.workload.as_deref() == Some("fenced") {
        anyhow::bail!(
            "--system redis: Redlock issues no fencing token, so the fenced workload cannot apply; the run uses --workload unfenced"
        );
    }
    if args.bug.is_some() {
        anyhow::bail!("--system redis: --bug names a lockd mutant");
    }
    if args.trace {
        anyhow::bail!("--system redis: --trace records lockd's core");
    }
    Ok(())
}

/// The `--system` value of a rerun line: exec's with its two templates.
fn system_flag(args: &TestArgs) -> String {
    let quote = nemesis::systems::exec::template::shell_quote;
    match (&args.node_cmd, &args.client_cmd) {
        (Some(node), Some(client)) if args.system == "exec" => format!(
            "exec --node-cmd {} --client-cmd {}",
            quote(node),
            quote(client)
        ),
        _ => args.system.clone(),
    }
}

/// Runs the test and maps its verdict to the exit code.
pub fn run(args: TestArgs) -> ExitCode {
    match try_run(&args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("locksmith test: could not run: {e:#}");
            if let Some(path) = &args.junit {
                let reason = format!("{e:#}");
                let _ = nemesis::store::junit::write_could_not_run(path, "locksmith test", &reason);
            }
            ExitCode::from(2)
        }
    }
}

fn try_run(args: &TestArgs) -> anyhow::Result<u8> {
    let options = options(args)?;
    eprintln!("locksmith test: seed {}", options.seed);
    let system: Arc<dyn nemesis::systems::System> = if args.system == "exec" {
        Arc::new(nemesis::systems::exec::Exec::new(
            args.node_cmd.as_deref().unwrap_or_default(),
            args.client_cmd.as_deref().unwrap_or_default(),
            options.concurrency,
        )?)
    } else if args.system == "redis" {
        let faketime = if options.nemesis.contains(&FaultKind::Clock) {
            Some(Libfaketime::find()?.with_glibc_malloc()?)
        } else {
            None
        };
        Arc::new(Redis::new(find_redis_server()?, faketime, options.seed))
    } else if args.system == "etcd" {
        let config = EtcdClusterConfig {
            binary: find_etcd()?,
            ..EtcdClusterConfig::default()
        };
        Arc::new(Etcd::new(config, ClientOptions::default()))
    } else if args.system == "zookeeper" {
        let zookeeper = nemesis::systems::zookeeper::ZooKeeper::new(
            nemesis::systems::zookeeper::find_zookeeper()?,
        );
        if options.nemesis.contains(&FaultKind::Clock) {
            Arc::new(zookeeper.with_faketime(Libfaketime::find()?)?)
        } else {
            Arc::new(zookeeper)
        }
    } else {
        let binary = find_lockd()?;
        Arc::new(Lockd::new(binary, options.bug.clone(), options.seed).with_trace(tracing(args)))
    };
    // A panic anywhere kills every node this process started before the message is printed.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        nemesis::cluster::kill_registered();
        nemesis::hosts::teardown_registered();
        nemesis::net::netns::teardown_registered();
        nemesis::net::kernel::teardown_registered();
        nemesis::net::owner::teardown_registered();
        default_hook(info);
    }));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let outcome = runtime.block_on(async {
        tokio::select! {
            r = run::run(&options, system) => r.map_err(anyhow::Error::from),
            _ = tokio::signal::ctrl_c() => {
                let killed = nemesis::cluster::kill_registered();
                nemesis::hosts::teardown_registered();
                nemesis::net::netns::teardown_registered();
                nemesis::net::kernel::teardown_registered();
        nemesis::net::owner::teardown_registered();
                Err(anyhow::anyhow!("interrupted (Ctrl-C); killed {killed} node process(es)"))
            }
        }
    });
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "rerun: locksmith test --seed {}{}",
                options.seed,
                rerun_flags(&options, &system_flag(args), args.no_trace)
            );
            return Err(e);
        }
    };
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    print_summary(&options, &system_flag(args), args.no_trace, &outcome);
    if let Some(path) = &args.junit {
        nemesis::store::junit::write_junit(path, &outcome.dir).map_err(anyhow::Error::msg)?;
    }
    println!(
        "{}",
        nemesis::store::junit::open_hint(&outcome.dir, &args.store)
    );
    let messages = outcome.dir.join(nemesis::store::RunDir::MESSAGES);
    if messages.is_file() {
        println!("messages: {}", messages.display());
    }
    Ok(outcome.exit_code.clamp(0, 2) as u8)
}

fn print_summary(options: &TestOptions, system: &str, no_trace: bool, outcome: &run::RunOutcome) {
    let r = &outcome.results;
    let json = |value: &dyn erased::Json| value.json();
    println!("seed: {}", options.seed);
    println!("store: {}", outcome.dir.display());
    println!("ops: {}", json(&r.ops));
    println!("faults: {}", json(&r.faults.by_kind));
    if outcome.fault_notes.is_empty() {
        println!("fault notes: every fault acted, every node was targeted");
    } else {
        println!("fault notes: {}", outcome.fault_notes.join("; "));
    }
    println!("nodes: {}", json(&r.nodes));
    println!("recovery phase: {}", json(&r.recovery));
    // Every check, in the order of the JUnit report's testcases, valid or not.
    let suite = nemesis::store::junit::test_suite(&outcome.dir, r);
    for line in nemesis::store::junit::summary_lines(&suite, r) {
        println!("{line}");
    }
    if system == "redis" {
        println!("{}", nemesis::systems::redis::SUMMARY_NOTE);
    }
    if system == "zookeeper" && options.nemesis.contains(&FaultKind::Clock) {
        println!("{}", nemesis::systems::zookeeper::CLOCK_NOTE);
    }
    if !outcome.explanation.is_empty() {
        println!("{}", outcome.explanation.trim_end());
    }
    println!("verdict: {}", outcome.verdict);
    if outcome.exit_code != 0 {
        println!(
            "rerun: locksmith test --seed {}{}",
            options.seed,
            rerun_flags(options, system, no_trace)
        );
    }
}

/// One line of JSON for the summary.
mod erased {
    /// A value the summary prints as JSON.
    pub trait Json {
        fn json(&self) -> String;
    }

    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> String {
            serde_json::to_string(self).unwrap_or_default()
        }
    }
}

/// The flags that differ from the defaults, so that the rerun line reproduces the run
/// (`--no-trace` too: without it a lockd run's verdict includes the trace replay).
fn rerun_flags(o: &TestOptions, system: &str, no_trace: bool) -> String {
    let d = TestOptions::default();
    let mut s = String::new();
    if no_trace {
        s.push_str(" --no-trace");
    }
    if system != "lockd" {
        s.push_str(&format!(" --system {system}"));
    }
    s.push_str(&o.differing_flags(&d, "concurrency"));
    if o.workload != d.workload {
        s.push_str(" --workload unfenced");
    }
    if o.recovery_s != d.recovery_s {
        s.push_str(&format!(" --recovery-s {}", o.recovery_s));
    }
    if let Some(h) = &o.hosts {
        s.push_str(&format!(" --hosts {}", h.targets.join(",")));
        if let Some(key) = &h.ssh_key {
            s.push_str(&format!(" --ssh-key {}", key.display()));
        }
    }
    if o.net != d.net {
        s.push_str(match o.net {
            NetKind::Netns => " --net netns",
            _ => " --net kernel",
        });
    }
    s
}
