//! Cluster control: real node processes on loopback, each in its own process group, with
//! SIGKILL, SIGSTOP/SIGCONT and restart from the same data dir (nix signals).
//!
//! Rules (jepsen.md "Robust nemesis"; HELPERS machine rules):
//! - every child runs in its own process group and is signalled by its pid's group, never by
//!   name;
//! - a paused node gets SIGCONT before SIGKILL, and every node gets SIGCONT at teardown, so
//!   nothing stays stopped;
//! - no process outlives the run: [`Cluster`] kills its children on drop (also while
//!   unwinding a panic), and every live pid is in a process-wide registry that the Ctrl-C
//!   handler empties with [`kill_registered`];
//! - each node's stdout and stderr go to `node-logs/n<id>.log` (appended across restarts).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::harness::Nodes;
use crate::harness::world::NodeLedger;
use crate::subprocess::wait_bounded;
use crate::{Error, NodeId};

/// How long to wait for a SIGKILLed child to be reaped before reporting it.
pub const REAP_TIMEOUT_MS: u64 = 5_000;

/// Process groups of every child started by any cluster in this process.
static REGISTRY: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn registry() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// SIGCONT then SIGKILL every registered process group (the Ctrl-C path), and remove what
/// libfaketime kept for the group's leader, which the Ctrl-C path has no launcher to ask
/// about ([`Launcher::stopped`]). Returns how many.
pub fn kill_registered() -> usize {
    let pids: Vec<i32> = registry().iter().copied().collect();
    for pid in &pids {
        let _ = killpg(Pid::from_raw(*pid), Signal::SIGCONT);
        let _ = killpg(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    // A process SIGKILLed inside a system call finishes that call first: one still starting
    // could create libfaketime's files after a removal made at once. So remove them only
    // once the process is dead (gone or a zombie), waiting at most a second for each.
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    for pid in &pids {
        while !is_dead(*pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        crate::systems::faketime::remove_shared_memory(*pid as u32);
    }
    registry().clear();
    pids.len()
}

/// Whether process `pid` runs no more: gone, or a zombie waiting to be reaped.
fn is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis: `pid (comm) S ...`.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

/// Registers the process group `pgid` of a child started elsewhere (an exec client adapter),
/// so that the Ctrl-C path ([`kill_registered`]) ends it too.
pub fn register_group(pgid: i32) {
    if pgid > 0 {
        registry().insert(pgid);
    }
}

/// Forgets a process group registered with [`register_group`] once it was killed.
pub fn forget_group(pgid: i32) {
    registry().remove(&pgid);
}

/// Options that change how a node is started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchOptions {
    /// The node's lease-clock rate, per mille (`None`: normal).
    pub clock_rate_permille: Option<u32>,
}

/// Builds the command line that starts one node (the system under test decides it).
pub trait Launcher: Send + Sync {
    /// The command for node `id`; the cluster sets its process group and output files.
    fn command(&self, id: NodeId, options: &LaunchOptions) -> Command;

    /// For a node that runs elsewhere (a remote host: [`crate::hosts::remote`]), whose local
    /// child is only the `ssh` session that lives as long as the node: sends `signal` to the
    /// real node (SIGKILL: SIGCONT first, and waits until it is gone). `None`: the node is
    /// the local child, which the cluster signals itself.
    fn remote_signal(&self, _id: NodeId, _signal: Signal) -> Option<Result<(), Error>> {
        None
    }

    /// Called right after the command of node `id` was spawned: returns once the node really
    /// runs (a remote node: its pid is known on its host), so that a signal that follows
    /// reaches it. Local nodes run at once.
    fn started(&self, _id: NodeId) -> Result<(), Error> {
        Ok(())
    }

    /// Called once node `id`'s local process `pid` is gone (killed and reaped, or exited):
    /// the launcher removes what the process could not (libfaketime's shared memory of a
    /// SIGKILLed process: [`crate::systems::faketime::remove_shared_memory`]).
    fn stopped(&self, _id: NodeId, _pid: u32) {}
}

/// The addresses and directories of a cluster on loopback.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// Node ids, 1..=n.
    pub nodes: Vec<NodeId>,
    /// Where each node listens for peers.
    pub peer: BTreeMap<NodeId, SocketAddr>,
    /// Where each node listens for clients.
    pub client: BTreeMap<NodeId, SocketAddr>,
    /// Where each node serves the harness's controls (its admin endpoint, lockd's
    /// `--admin-addr`); a node without an entry has none.
    pub admin: BTreeMap<NodeId, SocketAddr>,
    /// Each node's data dir (kept across restarts).
    pub data_dir: BTreeMap<NodeId, PathBuf>,
    /// Where node logs go.
    pub log_dir: PathBuf,
    /// The user each node runs as, when the net needs one per node ([`crate::net::owner`]);
    /// empty: nodes run as this process.
    pub users: BTreeMap<NodeId, crate::net::owner::NodeUser>,
}

impl Layout {
    /// Picks free loopback ports for `n` nodes and creates their data dirs under `dir`.
    pub fn new(n: u64, dir: &Path) -> Result<Layout, Error> {
        let nodes: Vec<NodeId> = (1..=n).collect();
        let ports = free_ports(3 * n as usize)?;
        let log_dir = dir.join("node-logs");
        std::fs::create_dir_all(&log_dir)
            .map_err(|e| Error::Io(format!("{}: {e}", log_dir.display())))?;
        let mut layout = Layout {
            nodes: nodes.clone(),
            peer: BTreeMap::new(),
            client: BTreeMap::new(),
            admin: BTreeMap::new(),
            data_dir: BTreeMap::new(),
            log_dir,
            users: BTreeMap::new(),
        };
        for (i, id) in nodes.iter().enumerate() {
            layout.peer.insert(*id, ports[2 * i]);
            layout.client.insert(*id, ports[2 * i + 1]);
            layout.admin.insert(*id, ports[2 * n as usize + i]);
            let data = dir.join("data").join(format!("n{id}"));
            std::fs::create_dir_all(&data)
                .map_err(|e| Error::Io(format!("{}: {e}", data.display())))?;
            layout.data_dir.insert(*id, data);
        }
        Ok(layout)
    }

    /// As [`Layout::new`], but the ports stay bound until the reservation is released, so
    /// that listeners bound meanwhile on port 0 (the fault proxy's) cannot take them. Release
    /// it right before the nodes start.
    pub fn reserve(n: u64, dir: &Path) -> Result<(Layout, PortReservation), Error> {
        let listeners: Vec<TcpListener> = (0..3 * n)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<_, _>>()
            .map_err(|e| Error::Io(format!("free port: {e}")))?;
        let ports: Vec<SocketAddr> = listeners
            .iter()
            .map(|l| l.local_addr().map_err(|e| Error::Io(e.to_string())))
            .collect::<Result<_, _>>()?;
        let mut layout = Layout::new(n, dir)?;
        for (i, id) in layout.nodes.clone().iter().enumerate() {
            layout.peer.insert(*id, ports[2 * i]);
            layout.client.insert(*id, ports[2 * i + 1]);
            layout.admin.insert(*id, ports[2 * n as usize + i]);
        }
        Ok((layout, PortReservation { listeners }))
    }

    /// The client addresses in node order (node i+1 is the i-th).
    pub fn client_addrs(&self) -> Vec<SocketAddr> {
        self.client.values().copied().collect()
    }
}

/// Ports held for a [`Layout`] until the nodes start (see [`Layout::reserve`]).
#[derive(Debug)]
pub struct PortReservation {
    listeners: Vec<TcpListener>,
}

impl PortReservation {
    /// Frees the ports for the nodes.
    pub fn release(self) {
        drop(self.listeners);
    }
}

/// `n` distinct free loopback ports: all are bound at once (so they differ), then released.
pub fn free_ports(n: usize) -> Result<Vec<SocketAddr>, Error> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .map_err(|e| Error::Io(format!("free port: {e}")))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map_err(|e| Error::Io(e.to_string())))
        .collect()
}

struct NodeProcess {
    child: Option<Child>,
    ledger: NodeLedger,
    options: LaunchOptions,
}

/// What happened to one node during a run (results.json `nodes`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeStats {
    /// The node.
    pub node: NodeId,
    /// Times started (1 + restarts).
    pub starts: u32,
    /// SIGKILLs by the nemesis.
    pub kills: u32,
    /// SIGSTOPs by the nemesis.
    pub pauses: u32,
    /// Exits the nemesis did not cause.
    pub exits: u32,
    /// Time its process existed (paused time included), ms.
    pub uptime_ms: u64,
}

/// Node processes and their state.
pub struct Cluster {
    nodes: Vec<NodeId>,
    procs: Mutex<BTreeMap<NodeId, NodeProcess>>,
    launcher: Box<dyn Launcher>,
    log_dir: PathBuf,
}

impl Cluster {
    /// Starts every node of `nodes`.
    pub fn start(
        launcher: Box<dyn Launcher>,
        nodes: &[NodeId],
        log_dir: &Path,
    ) -> Result<Cluster, Error> {
        let procs = NodeLedger::of(nodes)
            .into_iter()
            .map(|(id, ledger)| {
                let options = LaunchOptions::default();
                let child = None;
                (
                    id,
                    NodeProcess {
                        child,
                        ledger,
                        options,
                    },
                )
            })
            .collect();
        let cluster = Cluster {
            nodes: nodes.to_vec(),
            procs: Mutex::new(procs),
            launcher,
            log_dir: log_dir.to_path_buf(),
        };
        for id in nodes {
            cluster.spawn(*id)?;
        }
        Ok(cluster)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, NodeProcess>> {
        self.procs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The node ids.
    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    fn log_file(&self, id: NodeId) -> Result<File, Error> {
        let path = self.log_dir.join(format!("n{id}.log"));
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::Io(format!("{}: {e}", path.display())))
    }

    fn spawn(&self, id: NodeId) -> Result<(), Error> {
        let mut procs = self.lock();
        let node = procs
            .get_mut(&id)
            .ok_or_else(|| Error::Cluster(format!("no node {id}")))?;
        if node.child.is_some() {
            return Err(Error::Cluster(format!("node {id} is already running")));
        }
        let log = self.log_file(id)?;
        let err = log.try_clone().map_err(|e| Error::Io(e.to_string()))?;
        let mut command = self.launcher.command(id, &node.options);
        command
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err));
        command.process_group(0);
        let child = command.spawn().map_err(|e| {
            Error::Cluster(format!(
                "start node {id} ({:?}): {e}",
                command.get_program()
            ))
        })?;
        registry().insert(child.id() as i32);
        node.child = Some(child);
        node.ledger.started();
        self.launcher.started(id)
    }

    /// The pid of a running (or paused) node.
    pub fn pid(&self, id: NodeId) -> Option<u32> {
        self.lock()
            .get(&id)
            .and_then(|n| n.child.as_ref().map(Child::id))
    }

    /// How many times a node was started.
    pub fn starts(&self, id: NodeId) -> u32 {
        self.lock().get(&id).map_or(0, |n| n.ledger.stats().starts)
    }

    /// Per node: starts, kills, pauses, exits and uptime so far.
    pub fn stats(&self) -> Vec<NodeStats> {
        self.lock().values().map(|n| n.ledger.stats()).collect()
    }

    /// The last `lines` lines of node `id`'s log (for an error message).
    pub fn log_tail(&self, id: NodeId, lines: usize) -> String {
        let path = self.log_dir.join(format!("n{id}.log"));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Nodes not running (killed, or exited on their own).
    pub fn down(&self) -> BTreeSet<NodeId> {
        let procs = self.lock();
        procs
            .iter()
            .filter(|(_, n)| n.child.is_none())
            .map(|(id, _)| *id)
            .collect()
    }

    /// Nodes stopped with SIGSTOP.
    pub fn paused(&self) -> BTreeSet<NodeId> {
        let procs = self.lock();
        procs
            .iter()
            .filter(|(_, n)| n.ledger.paused())
            .map(|(id, _)| *id)
            .collect()
    }

    /// SIGCONT then SIGKILL a node and reap it. Killing a node that is down is a no-op.
    pub fn kill(&self, id: NodeId) -> Result<(), Error> {
        let mut procs = self.lock();
        let node = procs
            .get_mut(&id)
            .ok_or_else(|| Error::Cluster(format!("no node {id}")))?;
        let Some(mut child) = node.child.take() else {
            return Ok(());
        };
        node.ledger.killed();
        drop(procs);
        let remote = self.launcher.remote_signal(id, Signal::SIGKILL);
        let pgid = Pid::from_raw(child.id() as i32);
        let _ = killpg(pgid, Signal::SIGCONT);
        let _ = killpg(pgid, Signal::SIGKILL);
        let reaped = wait_bounded(
            &mut child,
            Duration::from_millis(REAP_TIMEOUT_MS),
            "the SIGKILLed node",
        );
        registry().remove(&(child.id() as i32));
        self.launcher.stopped(id, child.id());
        remote.unwrap_or(Ok(()))?;
        reaped
            .map(|_| ())
            .map_err(|e| Error::Cluster(format!("node {id}: {e}")))
    }

    /// SIGSTOP a running node.
    pub fn pause(&self, id: NodeId) -> Result<(), Error> {
        self.signal(id, Signal::SIGSTOP, true)
    }

    /// SIGCONT a node (harmless when it is not paused).
    pub fn resume(&self, id: NodeId) -> Result<(), Error> {
        self.signal(id, Signal::SIGCONT, false)
    }

    fn signal(&self, id: NodeId, signal: Signal, paused: bool) -> Result<(), Error> {
        let mut procs = self.lock();
        let node = procs
            .get_mut(&id)
            .ok_or_else(|| Error::Cluster(format!("no node {id}")))?;
        let Some(child) = node.child.as_ref() else {
            return Err(Error::Cluster(format!(
                "node {id} is down; cannot {signal}"
            )));
        };
        match self.launcher.remote_signal(id, signal) {
            Some(result) => result?,
            None => killpg(Pid::from_raw(child.id() as i32), signal)
                .map_err(|e| Error::Cluster(format!("node {id}: {signal}: {e}")))?,
        }
        node.ledger.set_paused(paused);
        Ok(())
    }

    /// Starts a down node again from its data dir (with its current launch options).
    pub fn restart(&self, id: NodeId) -> Result<(), Error> {
        self.spawn(id)
    }

    /// Sets the options the node is started with next time (e.g. a clock rate).
    pub fn set_launch_options(&self, id: NodeId, options: LaunchOptions) {
        if let Some(n) = self.lock().get_mut(&id) {
            n.options = options;
        }
    }

    /// Nodes that exited on their own since the last call, with their status (a crash the
    /// nemesis did not cause; the run reports it).
    pub fn reap_exited(&self) -> Vec<(NodeId, ExitStatus)> {
        let mut out = Vec::new();
        let mut procs = self.lock();
        for (id, node) in procs.iter_mut() {
            let exited = match node.child.as_mut().map(Child::try_wait) {
                Some(Ok(Some(status))) => Some(status),
                _ => None,
            };
            if let Some(status) = exited
                && let Some(child) = node.child.take()
            {
                registry().remove(&(child.id() as i32));
                self.launcher.stopped(*id, child.id());
                node.ledger.exited();
                out.push((*id, status));
            }
        }
        out
    }

    /// SIGCONT and SIGKILL every node and reap them. Idempotent; runs on drop too.
    pub fn teardown(&self) -> Result<(), Error> {
        let mut first = Ok(());
        for id in self.nodes.clone() {
            if let Err(e) = self.kill(id)
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }
}

/// Real processes as the harness's [`Nodes`] seam (local, or on SSH hosts through a remote
/// launcher).
impl Nodes for Cluster {
    fn kill(&self, id: NodeId) -> Result<(), Error> {
        Cluster::kill(self, id)
    }

    fn restart(&self, id: NodeId) -> Result<(), Error> {
        Cluster::restart(self, id)
    }

    fn pause(&self, id: NodeId) -> Result<(), Error> {
        Cluster::pause(self, id)
    }

    fn resume(&self, id: NodeId) -> Result<(), Error> {
        Cluster::resume(self, id)
    }

    fn is_alive(&self, id: NodeId) -> bool {
        self.nodes.contains(&id) && !Cluster::down(self).contains(&id)
    }

    fn down(&self) -> BTreeSet<NodeId> {
        Cluster::down(self)
    }

    fn paused(&self) -> BTreeSet<NodeId> {
        Cluster::paused(self)
    }

    fn reap_exited(&self) -> Vec<(NodeId, String)> {
        Cluster::reap_exited(self)
            .into_iter()
            .map(|(id, status)| (id, status.to_string()))
            .collect()
    }

    fn log_tail(&self, id: NodeId, lines: usize) -> String {
        Cluster::log_tail(self, id, lines)
    }

    fn stats(&self) -> Vec<NodeStats> {
        Cluster::stats(self)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starts `sleep 30` as a stand-in node.
    struct Sleeper;

    impl Launcher for Sleeper {
        fn command(&self, _id: NodeId, _options: &LaunchOptions) -> Command {
            let mut c = Command::new("sleep");
            c.arg("30");
            c
        }
    }

    fn state(pid: u32) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state is the field after the parenthesised command name.
        stat.rsplit(')')
            .next()
            .and_then(|s| s.trim().chars().next())
            .unwrap_or('?')
    }

    #[test]
    fn kill_pause_resume_restart_and_teardown_control_real_processes() {
        // Issue 5: SIGKILL, SIGSTOP/SIGCONT, restart; no process outlives the cluster.
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster = Cluster::start(Box::new(Sleeper), &[1, 2], dir.path()).expect("start");
        let pid1 = cluster.pid(1).expect("node 1 runs");
        let pid2 = cluster.pid(2).expect("node 2 runs");

        cluster.pause(1).expect("pause");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(state(pid1), 'T', "SIGSTOP leaves the process stopped");
        assert_eq!(cluster.paused(), BTreeSet::from([1]));
        cluster.resume(1).expect("resume");
        std::thread::sleep(Duration::from_millis(50));
        assert_ne!(state(pid1), 'T', "SIGCONT resumes it");

        cluster.pause(1).expect("pause again");
        cluster.kill(1).expect("kill a paused node");
        assert_eq!(cluster.down(), BTreeSet::from([1]));
        assert!(
            !Path::new(&format!("/proc/{pid1}")).exists(),
            "killed and reaped"
        );

        cluster.restart(1).expect("restart");
        assert_eq!(cluster.starts(1), 2);
        let new_pid = cluster.pid(1).expect("restarted");
        assert_ne!(new_pid, pid1);
        assert!(dir.path().join("n1.log").exists(), "log file per node");

        drop(cluster);
        assert!(
            !Path::new(&format!("/proc/{new_pid}")).exists(),
            "drop kills node 1"
        );
        assert!(
            !Path::new(&format!("/proc/{pid2}")).exists(),
            "drop kills node 2"
        );
    }
}
