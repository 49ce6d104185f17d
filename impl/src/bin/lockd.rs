//! `lockd`: one node of the lock service, the process the harness starts.
//!
//! ```text
//! lockd --id 1 --peers 1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103 \
//!       --client-listen 127.0.0.1:7201 --data-dir DIR [--bug NAME] \
//!       [--dial 2=127.0.0.1:9012,...] [--clock-rate 1.0] [--seed N] \
//!       [--election-timeout-ms 300-600] [--heartbeat-ms 50] [--trace FILE] \
//!       [--admin-addr 127.0.0.1:7301]
//! ```
//!
//! The client port serves lock commands, sessions and status only. The harness's controls
//! (the clock nemesis) are served on the admin endpoint, which is off unless `--admin-addr`
//! names a loopback address; every admin call must carry the secret that lockd keeps in
//! `DATA_DIR/admin.secret` (made on first use, readable by its owner only).
//!
//! Logs go to stderr (`RUST_LOG` filters them; default `info,tarpc=warn`): one line per role
//! change and error; `RUST_LOG=lockd=debug` adds one per applied entry and per turn. tarpc's
//! info-level span per request (a trace id and an RFC 3339 deadline formatted for each call)
//! is off by default: under `locksmith bench` it was about 4 % of the samples.
//!
//! Exit status: 2 for bad flags (an id not among the peers, one address given to two ids), 1
//! for a fatal error at run time (a data dir another process
//! holds, a listener that cannot bind, a data dir that fails its checks or a failed write),
//! 101 when any thread or task of the node panicked (it stops rather than run on without it).
//!
//! Before it binds any port, lockd takes an exclusive `flock(2)` on `DATA_DIR/lock` and
//! holds it until it exits: two processes writing one Raft log would break every guarantee,
//! and a second lockd started on a data dir in use (with other ports) is refused.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Parser;
use lockd::bugs::{Bug, BugSet};
use lockd::raft::{Config, NodeId};
use lockd::server::{ServerConfig, ServerError};

/// mimalloc instead of glibc's malloc. A node allocates per request, per message and per
/// entry, from several threads; under `locksmith bench` (3 nodes, fsync on, 2 cores) glibc's
/// malloc and free were a tenth of the CPU, and with mimalloc lockd went from 10,547 to 12,775
/// acquire+release cycles/s at 64 clients (p99 10.4 to 9.0 ms), and 6,120 to 6,327 at 16.
/// `locksmith node` compiles this file in (`nemesis/src/commands/node.rs`), so this is the
/// allocator of the whole `locksmith` binary too: of `locksmith sim` as well, whose simulated
/// seeds went from 88 to 98 simulated s per CPU s with it (seeds 1..20, one job).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The log filter when `RUST_LOG` is unset (see the module's doc: tarpc's per-request spans
/// are off).
const LOG_FILTER_DEFAULT: &str = "info,tarpc=warn";

/// One node of lockd, a Raft-replicated lock service with fencing tokens and leases.
#[derive(Debug, Parser)]
#[command(name = "lockd", version)]
struct Args {
    /// This node's id (a key of --peers).
    #[arg(long)]
    id: NodeId,
    /// Every member's peer address, this node's included: ID=ADDR,ID=ADDR,...
    #[arg(long, value_parser = parse_node_map)]
    peers: NodeMap,
    /// Where this node listens for clients.
    #[arg(long)]
    client_listen: SocketAddr,
    /// The data directory (created when missing).
    #[arg(long)]
    data_dir: PathBuf,
    /// The cluster's name (ASCII letters, digits, `.`, `_`, `-`; at most 64), recorded in the
    /// data dir on the first start: a later start under another name is refused, so that a
    /// data dir of one cluster is never started in another whose node ids are the same.
    /// Give each cluster its own, as etcd's `--initial-cluster-token`.
    #[arg(long, default_value = lockd::server::CLUSTER_DEFAULT)]
    cluster: String,
    /// Where this node dials some peers instead of their --peers address (a fault proxy per
    /// directed link): ID=ADDR,...
    #[arg(long, value_parser = parse_node_map)]
    dial: Option<NodeMap>,
    /// Switch on an injected bug (repeatable), e.g. no-fsync.
    #[arg(long = "bug")]
    bugs: Vec<Bug>,
    /// The rate of this node's clock relative to real time (simulated skew).
    #[arg(long, default_value_t = 1.0)]
    clock_rate: f64,
    /// The seed of the node's RNG (election timeouts); defaults to the node id.
    #[arg(long)]
    seed: Option<u64>,
    /// The election timing for the network the cluster runs on: `lan` (loopback and LAN:
    /// election timeout 150-300 ms, heartbeat 30 ms, the Raft paper's §9.3 range) or `wan`
    /// (1000-2000 ms, heartbeat 100 ms). `--election-timeout-ms` and `--heartbeat-ms`
    /// override it.
    #[arg(long, value_enum, default_value_t = Timing::Lan)]
    timing: Timing,
    /// The election timeout range in milliseconds, LOW-HIGH (default from `--timing`).
    #[arg(long, value_parser = parse_range)]
    election_timeout_ms: Option<(u64, u64)>,
    /// The leader's heartbeat interval in milliseconds (default from `--timing`).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// Append a trace of every input the core steps to FILE (`lockd::trace`), for
    /// `locksmith model replay`.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Serve the harness's controls on this loopback address (off by default); calls need
    /// the secret in DATA_DIR/admin.secret.
    #[arg(long, value_name = "ADDR")]
    admin_addr: Option<SocketAddr>,
}

/// Election timing presets (see `--timing`; the safety argument is in the README: timing
/// decides only how soon a failed leader is replaced, never what is committed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Timing {
    /// Loopback and LAN: round trips under a millisecond.
    Lan,
    /// Links with round trips of tens of milliseconds.
    Wan,
}

impl Timing {
    /// (election timeout low, high, heartbeat), in milliseconds.
    fn millis(self) -> (u64, u64, u64) {
        match self {
            Timing::Lan => (150, 300, 30),
            Timing::Wan => (1000, 2000, 100),
        }
    }
}

/// Node id to address, as given on the command line.
#[derive(Clone, Debug)]
struct NodeMap(BTreeMap<NodeId, SocketAddr>);

fn parse_node_map(text: &str) -> Result<NodeMap, String> {
    let mut map = BTreeMap::new();
    for item in text.split(',').filter(|item| !item.is_empty()) {
        let Some((id, addr)) = item.split_once('=') else {
            return Err(format!("{item:?}: expected ID=ADDR"));
        };
        let id: NodeId = id
            .trim()
            .parse()
            .map_err(|e| format!("{item:?}: node id {id:?}: {e}"))?;
        let addr: SocketAddr = addr
            .trim()
            .parse()
            .map_err(|e| format!("{item:?}: address {addr:?}: {e}"))?;
        if let Some((other, _)) = map.iter().find(|(_, a)| **a == addr) {
            return Err(format!(
                "address {addr} is given to node {other} and node {id}"
            ));
        }
        if map.insert(id, addr).is_some() {
            return Err(format!("node {id} is given twice"));
        }
    }
    if map.is_empty() {
        return Err("no ID=ADDR pairs".to_owned());
    }
    Ok(NodeMap(map))
}

fn parse_range(text: &str) -> Result<(u64, u64), String> {
    let (low, high) = text
        .split_once('-')
        .ok_or_else(|| format!("{text:?}: expected LOW-HIGH"))?;
    let low = low.parse().map_err(|e| format!("low {low:?}: {e}"))?;
    let high = high.parse().map_err(|e| format!("high {high:?}: {e}"))?;
    Ok((low, high))
}

fn server_config(args: Args) -> anyhow::Result<ServerConfig> {
    let members: Vec<NodeId> = args.peers.0.keys().copied().collect();
    if !members.contains(&args.id) {
        bail!("--id {} is not among the --peers {:?}", args.id, members);
    }
    let mut raft = Config::new(args.id, members);
    raft.bugs = BugSet::of(&args.bugs);
    if let Some(seed) = args.seed {
        raft.seed = seed;
    }
    let (low, high, heartbeat_ms) = args.timing.millis();
    let (low, high) = args.election_timeout_ms.unwrap_or((low, high));
    raft.election_timeout_min_ms = low;
    raft.election_timeout_max_ms = high;
    raft.heartbeat_ms = args.heartbeat_ms.unwrap_or(heartbeat_ms);
    // A snapshot chunk is resent well within the election timeout, so that a follower that
    // gets only chunks keeps following.
    raft.snapshot_retransmit_ms = (low / 2).max(1);
    let mut config = ServerConfig::new(raft, args.peers.0, args.client_listen, args.data_dir);
    if let Some(dial) = args.dial {
        config.dial.extend(dial.0);
    }
    config.clock_rate = args.clock_rate;
    config.cluster = args.cluster;
    config.trace = args.trace;
    // The secret is read (or made) once the data dir is locked. The flags are checked now,
    // the admin address among them, with a stand-in secret; the server checks the real one
    // when it starts (`ServerConfig::validate` refuses an empty secret).
    let mut flags = config.clone();
    if let Some(listen) = args.admin_addr {
        config.admin = Some(lockd::server::AdminConfig::new(listen, String::new()));
        flags.admin = Some(lockd::server::AdminConfig::new(
            listen,
            "read later".to_owned(),
        ));
    }
    flags.validate().context("invalid flags")?;
    Ok(config)
}

/// The lock file inside a data dir.
const LOCK_FILE: &str = "lock";

/// Takes the exclusive lock of `dir` (created when missing), or says who holds it. The
/// returned guard holds the lock until it is dropped (or the process ends).
fn lock_data_dir(dir: &std::path::Path) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    std::fs::create_dir_all(dir).with_context(|| format!("data dir {}", dir.display()))?;
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("lock file {}", path.display()))?;
    let mut locked =
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(locked) => locked,
            Err((file, nix::errno::Errno::EWOULDBLOCK)) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                drop(file);
                bail!(
                    "data dir {} is in use by another process ({}); one lockd per data dir",
                    dir.display(),
                    holder.trim()
                );
            }
            Err((_, errno)) => bail!("flock {}: {errno}", path.display()),
        };
    // Who holds it, for the next one's error message (best effort).
    use std::io::{Seek as _, Write as _};
    let _ = locked.set_len(0);
    let _ = locked.rewind();
    let _ = write!(locked, "pid {}", std::process::id());
    Ok(locked)
}

fn main() -> ExitCode {
    run_from(std::env::args_os())
}

/// Exit status of a node that stopped because some thread or task panicked.
const EXIT_PANICKED: i32 = 101;

/// A panic anywhere in the node stops the process (fail-stop, exit 101), after the panic's
/// own report. tokio ends a panicked task alone: a peer link or a connection task that
/// panicked left the node up and half deaf, silently (the simulator found one, 2026-12-06,
/// and names every panic of a seed since). A stopped node is what Raft tolerates, what a
/// supervisor restarts, and what the harness's node health reports; the data dir recovers
/// as after a crash.
fn stop_on_any_panic(id: NodeId) {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        tracing::error!(node = id, "a thread or task panicked; stopping the node");
        eprintln!("lockd: node {id}: a thread or task panicked; stopping the node (exit 101)");
        std::process::exit(EXIT_PANICKED);
    }));
}

/// Runs one node with `args` (the first is the program name). `locksmith node ARGS` compiles
/// this file in too and calls this, so the harness can run lockd from its own binary.
pub fn run_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(LOG_FILTER_DEFAULT));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let args = Args::parse_from(args);
    let id = args.id;
    stop_on_any_panic(id);
    let data_dir = args.data_dir.clone();
    let mut config = match server_config(args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("lockd: {e:#}");
            return ExitCode::from(2);
        }
    };
    // Held until this function returns, i.e. while the node runs; taken before any port
    // is bound.
    let _data_dir_lock = match lock_data_dir(&data_dir) {
        Ok(lock) => lock,
        Err(e) => {
            eprintln!("lockd: {e:#}");
            return ExitCode::from(1);
        }
    };
    if let Some(admin) = &mut config.admin {
        match lockd::server::admin_secret(&data_dir) {
            Ok(secret) => admin.secret = secret,
            Err(e) => {
                eprintln!("lockd: the admin secret in {}: {e}", data_dir.display());
                return ExitCode::from(1);
            }
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("lockd: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(lockd::server::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ ServerError::Config { .. }) => {
            tracing::error!(node = id, error = %e, "stopped");
            ExitCode::from(2)
        }
        Err(e) => {
            tracing::error!(node = id, error = %e, "stopped");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_that_panics_stops_the_whole_node_with_101() {
        // Runs the ignored test below in a child process of this test binary: the hook ends
        // the process, which a test cannot do in its own.
        // `lockd::tests::...` here, `locksmith::commands::node::lockd_bin::tests::...` where
        // `locksmith node` compiles this file in: the test's name without the crate.
        let module = module_path!().split_once("::").map_or("", |(_, m)| m);
        let child_test = format!("{module}::child_a_tokio_task_panics");
        let child = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", &child_test, "--ignored", "--nocapture"])
            .env("LOCKD_PANIC_CHILD", "1")
            .output()
            .expect("run the child");

        let stderr = String::from_utf8_lossy(&child.stderr);
        assert_eq!(child.status.code(), Some(EXIT_PANICKED), "{stderr}");
        assert!(
            stderr.contains("a link task panicked"),
            "the panic's own report: {stderr}"
        );
        assert!(
            stderr.contains("lockd: node 1: a thread or task panicked; stopping the node"),
            "the hook stopped it (a failed child test exits 101 too): {stderr}"
        );
    }

    #[test]
    #[ignore = "the child of a_task_that_panics_stops_the_whole_node_with_101"]
    fn child_a_tokio_task_panics() {
        assert!(
            std::env::var_os("LOCKD_PANIC_CHILD").is_some(),
            "run by its parent test"
        );
        stop_on_any_panic(1);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let task = tokio::spawn(async { panic!("a link task panicked") });
            let _ = task.await;
            // Without the hook tokio ends the task alone and the node runs on.
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        });
        unreachable!("the process went on after a task panicked");
    }

    #[test]
    fn the_default_filter_keeps_lockds_lines_and_drops_tarpcs_request_spans() {
        let filter = tracing_subscriber::EnvFilter::new(LOG_FILTER_DEFAULT);
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let rpc = tracing::span!(target: "tarpc::server", tracing::Level::INFO, "RPC");
            assert!(
                rpc.is_disabled(),
                "tarpc's per-request span is on by default"
            );
            let warned = tracing::span!(target: "tarpc::client", tracing::Level::WARN, "w");
            assert!(!warned.is_disabled(), "tarpc's warnings are off by default");
            let ours = tracing::span!(target: "lockd::server::core", tracing::Level::INFO, "x");
            assert!(!ours.is_disabled(), "lockd's info lines are off by default");
        });
    }

    #[test]
    fn node_maps_parse_and_reject_bad_pairs() {
        // Issue 4: bad flags give a clear error (exit 2 through clap).
        let map = parse_node_map("1=127.0.0.1:7101,2=127.0.0.1:7102").unwrap();
        assert_eq!(map.0.len(), 2);
        assert_eq!(map.0[&2], "127.0.0.1:7102".parse().unwrap());
        assert!(
            parse_node_map("1=127.0.0.1:1,1=127.0.0.1:2")
                .unwrap_err()
                .contains("twice")
        );
        assert!(
            parse_node_map("1:127.0.0.1:1")
                .unwrap_err()
                .contains("ID=ADDR")
        );
        assert!(
            parse_node_map("x=127.0.0.1:1")
                .unwrap_err()
                .contains("node id")
        );
        assert!(parse_node_map("").is_err());
        assert_eq!(
            parse_node_map("1=127.0.0.1:1,2=127.0.0.1:1").unwrap_err(),
            "address 127.0.0.1:1 is given to node 1 and node 2"
        );
        assert_eq!(parse_range("300-600"), Ok((300, 600)));
        assert!(parse_range("300").is_err());
    }

    #[test]
    fn a_second_holder_of_the_data_dir_is_refused_until_the_first_lets_go() {
        // Issue 13: one lockd per data dir; the lock is taken before any port is bound.
        let dir = tempfile::tempdir().unwrap();
        let first = lock_data_dir(dir.path()).unwrap();
        let second = lock_data_dir(dir.path()).unwrap_err();
        let text = format!("{second:#}");
        assert!(text.contains("is in use by another process"), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        drop(first);
        lock_data_dir(dir.path()).expect("free again once the first let go");
    }

    #[test]
    fn a_node_outside_the_peers_is_refused() {
        // Issue 4: bad flags -> a clear error.
        let args = Args::parse_from([
            "lockd",
            "--id",
            "4",
            "--peers",
            "1=127.0.0.1:7101",
            "--client-listen",
            "127.0.0.1:7201",
            "--data-dir",
            "/nonexistent",
        ]);
        let err = server_config(args).unwrap_err();
        assert!(format!("{err:#}").contains("not among"), "{err:#}");
    }
}
