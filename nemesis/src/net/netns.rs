//! The netns backend (`--net netns`, root only): every node of a local run in a network
//! namespace of its own, on a bridge, with a real interface and a real address
//! ([`crate::hosts::ns`] makes them, without sshd, for this run only). Nodes start through
//! `ip netns exec NS` (which execs, so the node keeps the pid the cluster signals); clients
//! and the harness stay in the root namespace and reach the nodes through the bridge.
//!
//! Partitions are iptables rules inside the receiving node's namespace, in the INPUT chain:
//! a cut link `(i, j)` drops TCP from `i`'s address to `j`'s peer port, the connection `i`
//! opened to `j` (as [`super::proxy`] cuts it). `slow` and `flaky` ([`crate::netem`]) shape
//! the node's `eth0`. [`Netns::teardown`] (also on drop, Ctrl-C and panic through
//! [`teardown_registered`]) kills nothing (the cluster owns the nodes) but removes the
//! namespaces, veths and bridge, and with them every rule and qdisc.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use super::{Grudge, Net};
use crate::cluster::{LaunchOptions, Launcher, Layout};
use crate::hosts::ns;
use crate::netem::NetemSpec;
use crate::{Error, NodeId};

/// The hosts directories of this process's netns nets, for the Ctrl-C and panic paths.
static DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes the namespaces of every netns net of this process. Idempotent.
pub fn teardown_registered() {
    let dirs: Vec<PathBuf> = std::mem::take(&mut *DIRS.lock().unwrap_or_else(|p| p.into_inner()));
    for dir in dirs {
        let _ = ns::down(&dir);
    }
}

/// The iptables commands that make exactly `grudge`'s cuts into node `target` in `chain`:
/// flush, then drop TCP from each cut source's address to `port` (the target's peer port).
pub fn grudge_script(
    chain: &str,
    grudge: &Grudge,
    target: NodeId,
    addrs: &BTreeMap<NodeId, IpAddr>,
    port: u16,
) -> String {
    let mut script = format!("iptables -w -F {chain}");
    for (source, to) in grudge.links() {
        if to == target
            && let Some(ip) = addrs.get(&source)
        {
            script.push_str(&format!(
                " && iptables -w -A {chain} -p tcp -s {ip} --dport {port} -j DROP"
            ));
        }
    }
    script
}

/// Namespaced nodes on a bridge.
pub struct Netns {
    dir: tempfile::TempDir,
    state: ns::State,
    /// Node id to namespace.
    namespaces: BTreeMap<NodeId, String>,
    addrs: BTreeMap<NodeId, IpAddr>,
    peer: BTreeMap<NodeId, SocketAddr>,
    torn_down: Mutex<bool>,
}

/// The run's chain in each namespace (a namespace has its own tables, so one name serves).
const CHAIN: &str = "LSM-NETNS";

impl Netns {
    /// Makes one namespace per node of `layout` and moves the layout's addresses into them
    /// (same ports, the namespaces' addresses).
    pub fn start(layout: &mut Layout) -> Result<Netns, Error> {
        let dir = tempfile::Builder::new()
            .prefix("lsm-netns-")
            .tempdir()
            .map_err(|e| Error::Io(format!("netns dir: {e}")))?;
        let hosts = dir.path().join("hosts");
        DIRS.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(hosts.clone());
        let state = ns::up_with(layout.nodes.len(), &hosts, false)?;
        let mut net = Netns {
            dir,
            namespaces: layout
                .nodes
                .iter()
                .copied()
                .zip(state.namespaces.clone())
                .collect(),
            addrs: layout
                .nodes
                .iter()
                .copied()
                .zip(state.addresses.iter().map(|a| IpAddr::V4(*a)))
                .collect(),
            state,
            peer: BTreeMap::new(),
            torn_down: Mutex::new(false),
        };
        for id in layout.nodes.clone() {
            let ip = net.addrs[&id];
            let peer = SocketAddr::new(ip, layout.peer[&id].port());
            layout.peer.insert(id, peer);
            net.peer.insert(id, peer);
            let client = SocketAddr::new(ip, layout.client[&id].port());
            layout.client.insert(id, client);
            net.run(
                id,
                &format!("iptables -w -N {CHAIN} && iptables -w -I INPUT -j {CHAIN}"),
            )?;
        }
        Ok(net)
    }

    /// Runs `script` inside node `id`'s namespace.
    fn run(&self, id: NodeId, script: &str) -> Result<String, Error> {
        let ns = self
            .namespaces
            .get(&id)
            .ok_or_else(|| Error::Cluster(format!("no namespace for node {id}")))?;
        ns::cmd("ip", &["netns", "exec", ns, "sh", "-c", script])
    }

    /// Wraps the system's launcher so that each node starts inside its namespace.
    pub fn launcher(&self, inner: Box<dyn Launcher>) -> Box<dyn Launcher> {
        Box::new(NetnsLauncher {
            inner,
            namespaces: self.namespaces.clone(),
        })
    }

    /// The hosts' state (names, addresses), for tests.
    pub fn state(&self) -> &ns::State {
        &self.state
    }
}

impl Net for Netns {
    fn dial_addr(&self, _source: NodeId, target: NodeId) -> SocketAddr {
        self.peer
            .get(&target)
            .copied()
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    fn apply(&self, grudge: &Grudge) -> Result<(), Error> {
        for (id, peer) in &self.peer {
            self.run(
                *id,
                &grudge_script(CHAIN, grudge, *id, &self.addrs, peer.port()),
            )?;
        }
        Ok(())
    }

    fn wrap_launcher(&self, launcher: Box<dyn Launcher>) -> Box<dyn Launcher> {
        self.launcher(launcher)
    }

    fn netem(&self, node: NodeId, spec: Option<&NetemSpec>) -> Result<String, Error> {
        let Some(spec) = spec else {
            self.run(node, "tc qdisc del dev eth0 root 2>/dev/null; iptables -w -F LSM-NETNS-O 2>/dev/null; true")?;
            return Ok("normal".into());
        };
        let args = spec.args().join(" ");
        match self.run(
            node,
            &format!("tc qdisc replace dev eth0 root netem {args}"),
        ) {
            Ok(_) => Ok(format!("netem {args}")),
            Err(e) if e.to_string().contains("qdisc kind is unknown") => {
                let out = "LSM-NETNS-O";
                self.run(
                    node,
                    &format!(
                        "iptables -w -N {out} 2>/dev/null && iptables -w -I OUTPUT -j {out}; {}",
                        crate::netem::fallback_script(spec, "eth0", out)
                    ),
                )?;
                Ok(format!("no sch_netem here; instead {}", spec.fallback()))
            }
            Err(e) => Err(e),
        }
    }

    fn teardown(&self) -> Result<(), Error> {
        let mut torn_down = self.torn_down.lock().unwrap_or_else(|p| p.into_inner());
        if *torn_down {
            return Ok(());
        }
        *torn_down = true;
        let hosts = self.dir.path().join("hosts");
        DIRS.lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|d| *d != hosts);
        // The namespaces take their rules and qdiscs with them.
        let result = ns::down(&hosts).map(|_| ());
        // The temporary directory too, now: the last holder of this net may be a thread
        // that outlives the run.
        let _ = std::fs::remove_dir_all(self.dir.path());
        result
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// Starts each node with `ip netns exec NS`.
struct NetnsLauncher {
    inner: Box<dyn Launcher>,
    namespaces: BTreeMap<NodeId, String>,
}

impl Launcher for NetnsLauncher {
    fn command(&self, id: NodeId, options: &LaunchOptions) -> Command {
        let inner = self.inner.command(id, options);
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec"])
            .arg(self.namespaces.get(&id).map_or("none", String::as_str))
            .arg(inner.get_program())
            .args(inner.get_args());
        for (key, value) in inner.get_envs() {
            match value {
                Some(v) => command.env(key, v),
                None => command.env_remove(key),
            };
        }
        if let Some(dir) = inner.get_current_dir() {
            command.current_dir(dir);
        }
        command
    }

    fn stopped(&self, id: NodeId, pid: u32) {
        // `ip netns exec` execs the node's command, which keeps the pid.
        self.inner.stopped(id, pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grudge_becomes_drops_of_the_sources_into_the_targets_peer_port() {
        // Issue 15 / net/mod.rs: link (i, j) cut means i's connection to j is dropped at j.
        let addrs: BTreeMap<NodeId, IpAddr> = (1..=3)
            .map(|i| (i, IpAddr::from([10, 213, 1, 10 + i as u8])))
            .collect();
        let grudge = crate::net::grudge::one(&[1, 2, 3], 3);
        assert_eq!(
            grudge_script("C", &grudge, 3, &addrs, 7101),
            "iptables -w -F C && iptables -w -A C -p tcp -s 10.213.1.11 --dport 7101 -j DROP \
             && iptables -w -A C -p tcp -s 10.213.1.12 --dport 7101 -j DROP"
        );
        assert_eq!(
            grudge_script("C", &grudge, 1, &addrs, 7101),
            "iptables -w -F C && iptables -w -A C -p tcp -s 10.213.1.13 --dport 7101 -j DROP"
        );
        assert_eq!(
            grudge_script("C", &Grudge::none(), 1, &addrs, 7101),
            "iptables -w -F C"
        );
    }
}
