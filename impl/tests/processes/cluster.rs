//! A cluster of real `lockd` processes on loopback, for the integration tests and the
//! benchmark. Every process is ended by its own pid when its [`NodeProcess`] drops (SIGKILL,
//! then wait), also when a test fails; a failing test prints the tail of every node's log.

#![allow(dead_code)] // Each user (test binary, bench) uses a different part.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockd::client::Client;
use lockd::raft::{NodeId, Role};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Free loopback ports: bound to port 0 and released at once.
pub fn free_addrs(count: usize) -> Vec<SocketAddr> {
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr"))
        .collect()
}

/// One `lockd` process; SIGKILLed and reaped on drop.
pub struct NodeProcess {
    child: Child,
}

impl NodeProcess {
    /// The process id.
    pub fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("pid fits i32"))
    }

    /// Sends `signal` to this process (by its pid).
    pub fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).expect("kill(pid)");
    }

    /// Whether it exited, and how.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = kill(self.pid(), Signal::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// A node's fixed identity: id, addresses and data dir (kept across restarts).
pub struct NodeSpec {
    /// Its id (1-based).
    pub id: NodeId,
    /// Its peer listen address.
    pub peer_addr: SocketAddr,
    /// Its client listen address.
    pub client_addr: SocketAddr,
    /// Its data dir.
    pub data_dir: PathBuf,
    /// Its stderr, appended to across restarts.
    pub log_path: PathBuf,
}

/// A running cluster; the data dirs live in a temporary directory removed on drop.
pub struct Cluster {
    /// The nodes, in id order.
    pub specs: Vec<NodeSpec>,
    /// The running process of each node, if any.
    pub processes: Vec<Option<NodeProcess>>,
    extra_args: Vec<String>,
    node_args: Vec<Vec<String>>,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts `size` nodes of `lockd` (the binary at `lockd`) with `extra_args` each.
    pub fn start(lockd: &Path, size: usize, extra_args: &[&str]) -> Cluster {
        // One call for all ports, so that none is handed out twice.
        let mut addrs = free_addrs(2 * size);
        let client_addrs = addrs.split_off(size);
        Cluster::launch(lockd, addrs, client_addrs, extra_args, |_| Vec::new())
    }

    /// Like [`Cluster::start`], each node with its admin endpoint on (`--admin-addr`, a
    /// free loopback port); returns the admin addresses in node order.
    pub fn start_with_admin(lockd: &Path, size: usize) -> (Cluster, Vec<SocketAddr>) {
        let mut addrs = free_addrs(3 * size);
        let admin = addrs.split_off(2 * size);
        let client_addrs = addrs.split_off(size);
        let flags = admin.clone();
        let cluster = Cluster::launch(lockd, addrs, client_addrs, &[], move |id| {
            vec![
                "--admin-addr".to_owned(),
                flags[(id - 1) as usize].to_string(),
            ]
        });
        (cluster, admin)
    }

    /// The admin secret node `id` keeps in its data dir (made when it started).
    pub fn admin_secret(&self, id: NodeId) -> String {
        let path = self.specs[(id - 1) as usize]
            .data_dir
            .join(lockd::rpc::ADMIN_SECRET_FILE);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .trim()
            .to_owned()
    }

    /// Like [`Cluster::start`], with the peer and client listen addresses given (one each
    /// per node) and `node_args(id)` added for node `id` alone (e.g. its `--dial`).
    pub fn start_with_addrs(
        lockd: &Path,
        peer_addrs: &[SocketAddr],
        client_addrs: &[SocketAddr],
        node_args: impl Fn(NodeId) -> Vec<String>,
    ) -> Cluster {
        Cluster::launch(
            lockd,
            peer_addrs.to_vec(),
            client_addrs.to_vec(),
            &[],
            node_args,
        )
    }

    fn launch(
        lockd: &Path,
        peer_addrs: Vec<SocketAddr>,
        client_addrs: Vec<SocketAddr>,
        extra_args: &[&str],
        node_args: impl Fn(NodeId) -> Vec<String>,
    ) -> Cluster {
        let size = peer_addrs.len();
        assert_eq!(client_addrs.len(), size, "one client address per node");
        let dir = tempfile::Builder::new()
            .prefix("lockd-processes-")
            .tempdir()
            .expect("tempdir");
        let specs = (0..size)
            .map(|i| NodeSpec {
                id: i as NodeId + 1,
                peer_addr: peer_addrs[i],
                client_addr: client_addrs[i],
                data_dir: dir.path().join(format!("n{}", i + 1)),
                log_path: dir.path().join(format!("n{}.log", i + 1)),
            })
            .collect();
        let mut cluster = Cluster {
            specs,
            processes: (0..size).map(|_| None).collect(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            node_args: (1..=size as NodeId).map(node_args).collect(),
            dir,
        };
        for id in 1..=size as NodeId {
            cluster.start_node(lockd, id);
        }
        cluster
    }

    fn peers_arg(&self) -> String {
        self.specs
            .iter()
            .map(|s| format!("{}={}", s.id, s.peer_addr))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts (or restarts) node `id` from its data dir.
    pub fn start_node(&mut self, lockd: &Path, id: NodeId) {
        let index = (id - 1) as usize;
        assert!(
            self.processes[index].is_none(),
            "node {id} is already running"
        );
        let spec = &self.specs[index];
        let log = File::options()
            .create(true)
            .append(true)
            .open(&spec.log_path)
            .expect("open node log");
        let child = Command::new(lockd)
            .arg("--id")
            .arg(id.to_string())
            .arg("--peers")
            .arg(self.peers_arg())
            .arg("--client-listen")
            .arg(spec.client_addr.to_string())
            .arg("--data-dir")
            .arg(&spec.data_dir)
            .args(&self.extra_args)
            .args(&self.node_args[index])
            .env(
                "RUST_LOG",
                std::env::var("LOCKD_TEST_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn lockd");
        self.processes[index] = Some(NodeProcess { child });
    }

    /// Sends `signal` to node `id`'s process (by pid).
    pub fn signal_node(&self, id: NodeId, signal: Signal) {
        let process = self.processes[(id - 1) as usize].as_ref();
        process.expect("node is running").signal(signal);
    }

    /// SIGKILLs node `id` and reaps it.
    pub fn kill_node(&mut self, id: NodeId) {
        let process = self.processes[(id - 1) as usize].take();
        drop(process.expect("node is running"));
    }

    /// The client addresses in node order (the rule of `lockd::client`).
    pub fn client_addrs(&self) -> Vec<SocketAddr> {
        self.specs.iter().map(|s| s.client_addr).collect()
    }

    /// A client of this cluster with id `client_id`.
    pub fn client(&self, client_id: u64) -> Client {
        Client::new(self.client_addrs(), client_id)
    }

    /// Waits until one running node leads with a majority following it in its term and has
    /// applied its term's first entry; returns its id, or `None` after `timeout`.
    pub async fn wait_for_leader(&self, client: &Client, timeout: Duration) -> Option<NodeId> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let statuses = client.status_all().await;
            let answered: Vec<_> = statuses.iter().flatten().collect();
            for status in &answered {
                let raft = &status.raft;
                let followers = answered
                    .iter()
                    .filter(|s| s.raft.term == raft.term && s.raft.leader == Some(raft.id))
                    .count();
                if raft.role == Role::Leader
                    && followers * 2 > self.specs.len()
                    && raft.last_applied >= 1
                    && raft.commit_index == raft.last_log_index
                {
                    return Some(raft.id);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// The last `lines` lines of each node's log.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for spec in &self.specs {
            let text = std::fs::read_to_string(&spec.log_path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(lines).collect();
            out.push_str(&format!(
                "--- node {} ({})\n",
                spec.id,
                spec.log_path.display()
            ));
            for line in tail.into_iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// The directory holding the data dirs and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // End every process first (by pid), then show the logs of a failed test.
        for process in &mut self.processes {
            drop(process.take());
        }
        if std::thread::panicking() {
            eprintln!("{}", self.log_tails(40));
        }
    }
}
