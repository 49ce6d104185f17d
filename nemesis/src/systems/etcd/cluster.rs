//! [`EtcdCluster`]: a 3- or 5-node etcd cluster on loopback, as child processes.
//!
//! Each node is one `etcd` process in its own process group, with its data dir and log in a
//! temporary directory, its client and peer ports picked free on 127.0.0.1. Faults are
//! signals sent to the node's process group by its pid (never by name): `kill` (SIGKILL),
//! `pause` (SIGSTOP), `resume` (SIGCONT); `restart` runs the same command line again, which
//! etcd accepts because `--initial-cluster-state new` is ignored once the data dir exists.
//! Dropping the cluster SIGKILLs and reaps every node it still runs.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::json;

use super::client::{ClientOptions, EtcdLockClient};
use super::error::EtcdError;
use super::wire;
use crate::net::owner::NodeUser;

/// How long [`EtcdCluster::leader`] waits for each node's status.
pub(crate) const STATUS_TIMEOUT: Duration = Duration::from_millis(500);
/// How often [`EtcdCluster::wait_serving`] polls.
const SERVING_POLL: Duration = Duration::from_millis(50);
/// How much of a node's log an error quotes, in bytes.
const LOG_TAIL_BYTES: u64 = 2000;

/// Where the `etcd` binary is: `$LOCKSMITH_ETCD` when set, else the first `etcd` on `PATH`.
/// `None` when there is none (tests then skip, saying so).
pub fn etcd_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("LOCKSMITH_ETCD") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file())
}

/// How to start a cluster. `Default` is 3 nodes with etcd 3.4's own timing.
#[derive(Clone, Debug)]
pub struct EtcdClusterConfig {
    /// How many nodes: 3 or 5 (any count from 1 works; the harness uses odd sizes).
    pub nodes: usize,
    /// The `etcd` binary.
    pub binary: PathBuf,
    /// `--heartbeat-interval`, in ms (etcd's default 100).
    pub heartbeat_ms: u64,
    /// `--election-timeout`, in ms (etcd's default 1000).
    pub election_ms: u64,
    /// `--pre-vote` (false is etcd 3.4's default and shows disruption after a heal).
    pub pre_vote: bool,
    /// The user each node runs as (node id -> user; root only), for the owner net
    /// ([`crate::net::owner`]); its data dir is given to that user. Empty: as this process.
    pub users: BTreeMap<u64, NodeUser>,
}

impl Default for EtcdClusterConfig {
    fn default() -> Self {
        Self {
            nodes: 3,
            binary: etcd_binary().unwrap_or_else(|| PathBuf::from("etcd")),
            heartbeat_ms: 100,
            election_ms: 1000,
            pre_vote: false,
            users: BTreeMap::new(),
        }
    }
}

/// What a node is doing, as the cluster last made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Running and not stopped.
    Running,
    /// Stopped with SIGSTOP.
    Paused,
    /// Not running (killed, or exited on its own).
    Dead,
}

struct EtcdNode {
    id: u64,
    client_addr: SocketAddr,
    peer_addr: SocketAddr,
    args: Vec<String>,
    log_path: PathBuf,
    child: Option<Child>,
    paused: bool,
    /// Dead because the harness killed it (not because it exited on its own).
    killed: bool,
}

/// A running etcd cluster (see the module docs). Node ids are 1..=n, names `n1`..`nN`.
pub struct EtcdCluster {
    config: EtcdClusterConfig,
    nodes: Vec<EtcdNode>,
    // Dropped after `nodes` are killed (Drop below), so the data dirs go last.
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts every node and returns at once; call [`EtcdCluster::wait_serving`] next.
    pub fn start(config: EtcdClusterConfig) -> Result<Self, EtcdError> {
        assert!(config.nodes >= 1, "a cluster needs at least one node");
        let dir = tempfile::Builder::new()
            .prefix("locksmith-etcd-")
            .tempdir()
            .map_err(|source| setup("create the cluster directory", source))?;
        let ports = free_ports(2 * config.nodes)?;
        let addr = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let peers: Vec<(u64, SocketAddr)> = (0..config.nodes)
            .map(|i| (i as u64 + 1, addr(ports[2 * i + 1])))
            .collect();
        let token = dir
            .path()
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| "locksmith".into());
        let mut nodes = Vec::with_capacity(config.nodes);
        for i in 0..config.nodes {
            let id = i as u64 + 1;
            let client_addr = addr(ports[2 * i]);
            let data_dir = dir.path().join(format!("n{id}.data"));
            if let Some(user) = config.users.get(&id) {
                crate::net::owner::give_dir(&data_dir, *user).map_err(|e| {
                    EtcdError::NotServing {
                        reason: format!("node {id}: {e}"),
                    }
                })?;
            }
            nodes.push(EtcdNode {
                id,
                client_addr,
                peer_addr: peers[i].1,
                args: node_args(&config, id, client_addr, &peers, &data_dir, &token),
                log_path: dir.path().join(format!("n{id}.log")),
                child: None,
                paused: false,
                killed: false,
            });
        }
        let mut cluster = Self { config, nodes, dir };
        for id in cluster.node_ids() {
            cluster.spawn(id)?;
        }
        Ok(cluster)
    }

    /// The node ids, 1..=n.
    pub fn node_ids(&self) -> Vec<u64> {
        self.nodes.iter().map(|node| node.id).collect()
    }

    /// The config the cluster was started with.
    pub fn config(&self) -> &EtcdClusterConfig {
        &self.config
    }

    /// The cluster's temporary directory (data dirs `nI.data`, logs `nI.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The node's client address (its JSON gateway and gRPC port).
    pub fn client_addr(&self, node: u64) -> Result<SocketAddr, EtcdError> {
        Ok(self.node(node)?.client_addr)
    }

    /// The node's peer address (its one peer URL for the whole cluster).
    pub fn peer_addr(&self, node: u64) -> Result<SocketAddr, EtcdError> {
        Ok(self.node(node)?.peer_addr)
    }

    /// The node's process id, while it runs.
    pub fn pid(&self, node: u64) -> Result<Option<u32>, EtcdError> {
        Ok(self.node(node)?.child.as_ref().map(Child::id))
    }

    /// The node's log file (appended to across restarts).
    pub fn log_path(&self, node: u64) -> Result<PathBuf, EtcdError> {
        Ok(self.node(node)?.log_path.clone())
    }

    /// What the node is doing. A node that exited on its own is reaped and reported dead.
    pub fn state(&mut self, node: u64) -> Result<NodeState, EtcdError> {
        let entry = self.node_mut(node)?;
        let exited = match entry.child.as_mut() {
            None => return Ok(NodeState::Dead),
            Some(child) => matches!(child.try_wait(), Ok(Some(_))),
        };
        if exited {
            entry.child = None;
            entry.paused = false;
            return Ok(NodeState::Dead);
        }
        Ok(if entry.paused {
            NodeState::Paused
        } else {
            NodeState::Running
        })
    }

    /// A lock client bound to one node (Jepsen style: no balancing across endpoints).
    pub fn client(&self, node: u64, options: ClientOptions) -> Result<EtcdLockClient, EtcdError> {
        Ok(EtcdLockClient::new(node, self.client_addr(node)?, options))
    }

    /// SIGKILLs the node (paused or not) and reaps it.
    pub fn kill(&mut self, node: u64) -> Result<(), EtcdError> {
        let entry = self.node_mut(node)?;
        let Some(mut child) = entry.child.take() else {
            return Err(node_state(node, "kill", "it is not running"));
        };
        entry.paused = false;
        entry.killed = true;
        signal(node, &child, Signal::SIGKILL)?;
        child
            .wait()
            .map_err(|source| setup(format!("reap node {node}"), source))?;
        Ok(())
    }

    /// SIGSTOPs the node.
    pub fn pause(&mut self, node: u64) -> Result<(), EtcdError> {
        let entry = self.node_mut(node)?;
        match (&entry.child, entry.paused) {
            (None, _) => Err(node_state(node, "pause", "it is not running")),
            (Some(_), true) => Err(node_state(node, "pause", "it is already paused")),
            (Some(child), false) => {
                signal(node, child, Signal::SIGSTOP)?;
                entry.paused = true;
                Ok(())
            }
        }
    }

    /// SIGCONTs a paused node.
    pub fn resume(&mut self, node: u64) -> Result<(), EtcdError> {
        let entry = self.node_mut(node)?;
        match (&entry.child, entry.paused) {
            (Some(child), true) => {
                signal(node, child, Signal::SIGCONT)?;
                entry.paused = false;
                Ok(())
            }
            _ => Err(node_state(node, "resume", "it is not paused")),
        }
    }

    /// Starts a dead node again with the same command line and data dir.
    pub fn restart(&mut self, node: u64) -> Result<(), EtcdError> {
        if self.state(node)? != NodeState::Dead {
            return Err(node_state(node, "restart", "it is still running"));
        }
        self.spawn(node)
    }

    /// The node that is leader, as the running nodes report it: one that names itself leader
    /// in its status, at the highest raft term among such claims. `None` when no node claims.
    pub async fn leader(&mut self) -> Option<u64> {
        let mut best: Option<(u64, u64)> = None;
        for id in self.node_ids() {
            if self.state(id).ok() != Some(NodeState::Running) {
                continue;
            }
            let Ok(addr) = self.client_addr(id) else {
                continue;
            };
            let Ok(status) = status(addr).await else {
                continue;
            };
            let claims = status.leader != 0 && status.leader == status.header.member_id;
            if claims && best.is_none_or(|(_, term)| status.raft_term > term) {
                best = Some((id, status.raft_term));
            }
        }
        best.map(|(id, _)| id)
    }

    /// Waits until every running node answers a linearizable read (so it has a leader and
    /// a quorum), or `timeout` passes. Paused and killed nodes are skipped; a node that
    /// exited on its own fails at once, quoting the end of its log.
    pub async fn wait_serving(&mut self, timeout: Duration) -> Result<(), EtcdError> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut waiting = Vec::new();
            for id in self.node_ids() {
                match self.state(id)? {
                    NodeState::Paused => continue,
                    NodeState::Dead if self.node(id)?.killed => continue,
                    NodeState::Dead => {
                        return Err(EtcdError::NotServing {
                            reason: format!("node {id} exited: {}", self.log_tail(id)),
                        });
                    }
                    NodeState::Running => {}
                }
                if !serves_reads(self.client_addr(id)?).await {
                    waiting.push(id);
                }
            }
            if waiting.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(EtcdError::NotServing {
                    reason: format!(
                        "nodes {waiting:?} did not serve a read within {} ms",
                        timeout.as_millis()
                    ),
                });
            }
            tokio::time::sleep(SERVING_POLL).await;
        }
    }

    /// True when the node answers a linearizable read (a quorum read through the leader)
    /// within its status deadline (500 ms).
    pub async fn serves_read(&self, node: u64) -> Result<bool, EtcdError> {
        Ok(serves_reads(self.client_addr(node)?).await)
    }

    /// The end of the node's log, for error messages.
    pub fn log_tail(&self, node: u64) -> String {
        let Ok(entry) = self.node(node) else {
            return String::new();
        };
        let Ok(mut file) = File::open(&entry.log_path) else {
            return format!("(no log at {})", entry.log_path.display());
        };
        let length = file.metadata().map(|meta| meta.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(length.saturating_sub(LOG_TAIL_BYTES)));
        let mut tail = String::new();
        let _ = file.read_to_string(&mut tail);
        tail
    }

    fn spawn(&mut self, node: u64) -> Result<(), EtcdError> {
        let binary = self.config.binary.clone();
        let user = self.config.users.get(&node).copied();
        let entry = self.node_mut(node)?;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&entry.log_path)
            .map_err(|source| setup(format!("open {}", entry.log_path.display()), source))?;
        let log_err = log
            .try_clone()
            .map_err(|source| setup("clone a log handle", source))?;
        let mut command = Command::new(&binary);
        if let Some(user) = user {
            command.uid(user.uid).gid(user.gid);
        }
        let child = command
            .args(&entry.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            // Its own process group, so that signals reach it (and only it) by its pid.
            .process_group(0)
            .spawn()
            .map_err(|source| EtcdError::Spawn {
                node,
                binary,
                source,
            })?;
        entry.child = Some(child);
        entry.paused = false;
        entry.killed = false;
        Ok(())
    }

    fn node(&self, node: u64) -> Result<&EtcdNode, EtcdError> {
        let nodes = self.nodes.len();
        node.checked_sub(1)
            .and_then(|index| self.nodes.get(index as usize))
            .ok_or(EtcdError::NoSuchNode { node, nodes })
    }

    fn node_mut(&mut self, node: u64) -> Result<&mut EtcdNode, EtcdError> {
        let nodes = self.nodes.len();
        node.checked_sub(1)
            .and_then(|index| self.nodes.get_mut(index as usize))
            .ok_or(EtcdError::NoSuchNode { node, nodes })
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                // SIGKILL ends a stopped process too; errors here can only mean it is gone.
                let _ = killpg(pid_of(&child), Signal::SIGKILL);
                let _ = child.wait();
            }
        }
    }
}

/// The command line of node `id` (named `n<id>`): its client URL, its peer URL from
/// `peers` (every node's peer address, the same list for all), its data dir, the timing of
/// `config`, and `--initial-cluster-state new`, which etcd ignores once the data dir exists,
/// so the same line restarts the node.
pub(crate) fn node_args(
    config: &EtcdClusterConfig,
    id: u64,
    client: SocketAddr,
    peers: &[(u64, SocketAddr)],
    data_dir: &Path,
    cluster_token: &str,
) -> Vec<String> {
    let initial_cluster = peers
        .iter()
        .map(|(peer, addr)| format!("n{peer}=http://{addr}"))
        .collect::<Vec<_>>()
        .join(",");
    let own_peer = peers
        .iter()
        .find(|(peer, _)| *peer == id)
        .map(|(_, addr)| format!("http://{addr}"))
        .unwrap_or_default();
    vec![
        format!("--name=n{id}"),
        format!("--data-dir={}", data_dir.display()),
        format!("--listen-client-urls=http://{client}"),
        format!("--advertise-client-urls=http://{client}"),
        format!("--listen-peer-urls={own_peer}"),
        format!("--initial-advertise-peer-urls={own_peer}"),
        format!("--initial-cluster={initial_cluster}"),
        format!("--initial-cluster-token={cluster_token}"),
        "--initial-cluster-state=new".into(),
        format!("--heartbeat-interval={}", config.heartbeat_ms),
        format!("--election-timeout={}", config.election_ms),
        format!("--pre-vote={}", config.pre_vote),
    ]
}

fn pid_of(child: &Child) -> Pid {
    let pid = i32::try_from(child.id()).expect("a pid fits in i32");
    Pid::from_raw(pid)
}

fn signal(node: u64, child: &Child, signal: Signal) -> Result<(), EtcdError> {
    killpg(pid_of(child), signal).map_err(|source| EtcdError::Signal {
        node,
        signal: signal.as_str(),
        source,
    })
}

fn node_state(node: u64, action: &'static str, reason: &str) -> EtcdError {
    EtcdError::NodeState {
        node,
        action,
        reason: reason.into(),
    }
}

fn setup(what: impl Into<String>, source: std::io::Error) -> EtcdError {
    EtcdError::Setup {
        what: what.into(),
        source,
    }
}

/// Picks `count` distinct free loopback ports by binding port 0 and closing the listeners
/// again. Another process may take one in between; the node then fails to start and
/// [`EtcdCluster::wait_serving`] says so with its log.
fn free_ports(count: usize) -> Result<Vec<u16>, EtcdError> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| setup("pick a free loopback port", source))?;
    listeners
        .iter()
        .map(|listener| listener.local_addr().map(|addr| addr.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| setup("read a listener's port", source))
}

/// One `Maintenance.Status` call with a short deadline, on a fresh connection.
async fn status(addr: SocketAddr) -> Result<wire::StatusResponse, ()> {
    let body = super::http::post_once(addr, "/v3/maintenance/status", b"{}", STATUS_TIMEOUT)
        .await
        .ok_or(())?;
    serde_json::from_slice(&body).map_err(|_| ())
}

/// True when the node answers a linearizable read within the status deadline.
async fn serves_reads(addr: SocketAddr) -> bool {
    let request = wire::range_key(b"locksmith-probe");
    let body = json!(request).to_string();
    super::http::post_once(addr, "/v3/kv/range", body.as_bytes(), STATUS_TIMEOUT)
        .await
        .is_some()
}
