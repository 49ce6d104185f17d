//! `locksmith client`: one operation against a running lockd cluster.
//!
//! ```text
//! locksmith client --cluster 127.0.0.1:7201,127.0.0.1:7202,127.0.0.1:7203 acquire KEY --lease-ms 5000 [--wait-ms 0]
//! locksmith client --cluster ... release KEY --token T
//! locksmith client --cluster ... status
//! ```
//!
//! The i-th address of `--cluster` is node i+1 (the rule of `lockd::client`). Exit status:
//! 0 done; 1 a definite refusal (busy, not-holder); 2 an error, an unknown outcome, or no
//! node reachable.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use lockd::client::{Client, ClientError};
use lockd::rpc::NodeStatus;

/// The arguments of `locksmith client`.
#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The nodes' client addresses, in node-id order: the i-th is node i+1.
    #[arg(long, value_delimiter = ',', required = true)]
    cluster: Vec<SocketAddr>,
    /// Give up after this long; an op still unanswered then is reported unknown (exit 2).
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// The client id in the request's origin (default: derived from the pid and the time).
    #[arg(long)]
    client_id: Option<u64>,
    #[command(subcommand)]
    op: ClientOp,
}

#[derive(Debug, Subcommand)]
enum ClientOp {
    /// Acquire KEY; prints the fencing token. Exit 1 if busy.
    Acquire {
        /// The lock key.
        key: String,
        /// The lease in milliseconds.
        #[arg(long)]
        lease_ms: u64,
        /// Wait up to this long for a held key (0 = fail at once when held).
        #[arg(long, default_value_t = 0)]
        wait_ms: u64,
    },
    /// Release KEY held under TOKEN. Exit 1 if it is not held under that token.
    Release {
        /// The lock key.
        key: String,
        /// The fencing token the lock is held under.
        #[arg(long)]
        token: u64,
    },
    /// Print each node's role, term and commit index.
    Status,
    /// Serve the exec client protocol (nemesis/PROTOCOL.md): one JSON request a line on
    /// stdin, its answer on stdout, through the harness's own lockd client. What an exec
    /// adapter for lockd (examples/lockd_client.py) talks to.
    Lines,
}

/// Runs `locksmith client`.
pub fn run(args: ClientArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("locksmith client: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(run_op(args))
}

/// A client id unlikely to collide with another invocation's: the pid in the high half,
/// the sub-second clock in the low half.
fn default_client_id() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (u64::from(std::process::id()) << 32) | u64::from(nanos)
}

async fn run_op(args: ClientArgs) -> ExitCode {
    let client = Client::new(
        args.cluster.clone(),
        args.client_id.unwrap_or_else(default_client_id),
    );
    let deadline = Instant::now() + Duration::from_millis(args.timeout_ms);
    match args.op {
        ClientOp::Acquire {
            key,
            lease_ms,
            wait_ms,
        } => match client.acquire(&key, lease_ms, wait_ms, deadline).await {
            Ok(token) => {
                println!("{token}");
                ExitCode::SUCCESS
            }
            Err(e) => refusal(&e),
        },
        ClientOp::Release { key, token } => match client.release(&key, token, deadline).await {
            Ok(()) => {
                println!("released");
                ExitCode::SUCCESS
            }
            Err(e) => refusal(&e),
        },
        ClientOp::Lines => {
            let code =
                nemesis::systems::exec::lines::serve(args.cluster.clone(), client.client_id())
                    .await;
            ExitCode::from(code)
        }
        ClientOp::Status => {
            let statuses = client.status_all().await;
            print!("{}", status_table(&args.cluster, &statuses));
            if statuses.iter().any(Result::is_ok) {
                ExitCode::SUCCESS
            } else {
                eprintln!("locksmith client: no node answered");
                ExitCode::from(2)
            }
        }
    }
}

fn refusal(error: &ClientError) -> ExitCode {
    eprintln!("locksmith client: {error}");
    match error {
        ClientError::Busy | ClientError::NotHolder => ExitCode::from(1),
        _ => ExitCode::from(2),
    }
}

/// The status table: one row per node, in node order; a node that did not answer is shown
/// as unreachable.
fn status_table(cluster: &[SocketAddr], statuses: &[Result<NodeStatus, ClientError>]) -> String {
    let mut out = format!(
        "{:<5} {:<22} {:<13} {:>6} {:>7} {:>8} {:>8}\n",
        "node", "address", "role", "term", "leader", "commit", "applied"
    );
    for (index, (addr, status)) in cluster.iter().zip(statuses).enumerate() {
        let row = match status {
            Ok(status) => {
                let raft = &status.raft;
                let leader = raft
                    .leader
                    .map_or_else(|| "-".to_owned(), |l| l.to_string());
                format!(
                    "{:<13} {:>6} {:>7} {:>8} {:>8}",
                    format!("{:?}", raft.role),
                    raft.term,
                    leader,
                    raft.commit_index,
                    raft.last_applied
                )
            }
            Err(e) => format!("unreachable ({e})"),
        };
        out.push_str(&format!(
            "{:<5} {:<22} {row}\n",
            index + 1,
            addr.to_string()
        ));
    }
    out
}
