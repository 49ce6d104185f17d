//! `locksmith client` against a 3-node lockd cluster run in this test process (the servers
//! are `lockd::server::run` on loopback, the command is the built `locksmith` binary).

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::time::{Duration, Instant};

use lockd::raft::{Config, Role};
use lockd::server::ServerConfig;

fn free_addrs(count: usize) -> Vec<SocketAddr> {
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners.iter().map(|l| l.local_addr().unwrap()).collect()
}

/// Starts three nodes on `runtime`; returns their client addresses and the data dirs' root.
fn start_cluster(runtime: &tokio::runtime::Runtime) -> (Vec<SocketAddr>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let addrs = free_addrs(6);
    let peers: BTreeMap<u64, SocketAddr> = (1..=3).map(|id| (id, addrs[id as usize - 1])).collect();
    let clients = addrs[3..].to_vec();
    for id in 1..=3u64 {
        let config = ServerConfig::new(
            Config::new(id, vec![1, 2, 3]),
            peers.clone(),
            clients[id as usize - 1],
            dir.path().join(format!("n{id}")),
        );
        runtime.spawn(async move {
            if let Err(e) = lockd::server::run(config).await {
                panic!("node {id}: {e}");
            }
        });
    }
    (clients, dir)
}

fn wait_for_leader(runtime: &tokio::runtime::Runtime, clients: &[SocketAddr]) {
    let client = lockd::client::Client::new(clients.to_vec(), 99);
    let deadline = Instant::now() + Duration::from_secs(5);
    runtime.block_on(async {
        while Instant::now() < deadline {
            let statuses = client.status_all().await;
            let leaders = statuses
                .iter()
                .flatten()
                .filter(|s| s.raft.role == Role::Leader && s.raft.last_applied >= 1)
                .count();
            if leaders == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no leader within 5 s");
    });
}

fn locksmith(cluster: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_locksmith"))
        .args(["client", "--cluster", cluster])
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn client_acquire_release_and_status_table() {
    // Issue 4 / DESIGN.md "The command line": acquire prints the token and exits 1 if busy;
    // release; status prints each node's role, term and commit index, a down node shown as
    // unreachable.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (clients, _dir) = start_cluster(&runtime);
    wait_for_leader(&runtime, &clients);
    let cluster = clients
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(",");

    let (code, stdout, stderr) = locksmith(&cluster, &["acquire", "cli", "--lease-ms", "60000"]);
    assert_eq!(code, Some(0), "{stderr}");
    let token: u64 = stdout.trim().parse().expect("acquire prints the token");
    let (code, _, stderr) = locksmith(&cluster, &["acquire", "cli", "--lease-ms", "60000"]);
    assert_eq!(code, Some(1), "busy exits 1: {stderr}");
    assert!(stderr.contains("busy"), "{stderr}");
    let (code, _, stderr) = locksmith(&cluster, &["release", "cli", "--token", &token.to_string()]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, _, stderr) = locksmith(&cluster, &["acquire", "bad key", "--lease-ms", "1"]);
    assert_eq!(code, Some(2), "an invalid request exits 2: {stderr}");

    // A fourth address nobody listens on stands for a down node.
    let down = free_addrs(1)[0];
    let (code, stdout, stderr) = locksmith(&format!("{cluster},{down}"), &["status"]);
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "a header and four rows:\n{stdout}");
    assert!(lines[0].contains("role") && lines[0].contains("term") && lines[0].contains("commit"));
    let rows: Vec<Vec<&str>> = lines[1..4]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let roles: Vec<&str> = rows.iter().map(|r| r[2]).collect();
    assert_eq!(
        roles.iter().filter(|r| **r == "Leader").count(),
        1,
        "{stdout}"
    );
    assert_eq!(
        roles.iter().filter(|r| **r == "Follower").count(),
        2,
        "{stdout}"
    );
    let term = rows[0][3];
    for row in &rows {
        assert_eq!(row[3], term, "one term everywhere:\n{stdout}");
        let commit: u64 = row[5].parse().expect("commit index column");
        assert!(commit >= 3, "noop, grant and release committed:\n{stdout}");
    }
    assert!(
        lines[4].starts_with("4 ") && lines[4].contains("unreachable"),
        "{stdout}"
    );
    runtime.shutdown_timeout(Duration::from_secs(1));
}
