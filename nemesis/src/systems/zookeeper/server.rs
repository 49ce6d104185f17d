//! One ZooKeeper server of a run: where the package's jars are, the `zoo.cfg` and `myid` of
//! each server, the command that starts it in the foreground, and its `srvr` status.
//!
//! Each server gets a loopback client port (the run's [`Layout`]: `client[id]`) and two
//! peer ports, quorum and election ([`PeerPorts`]). A server's `zoo.cfg` names its own real
//! ports and, for every peer, the ports it dials for that peer ([`Ensemble`]). Behind a
//! per-link net (the proxy or `--net kernel`), both go through the net's per-link address
//! `dial[(id, peer)]`: the quorum port directly, the election port through an election
//! relay of that link ([`super::links`]), so a partition cuts both. Without one (`locksmith
//! bench`), the quorum port is the layout's peer port and the election port one of its own.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::links::PeerLinks;
use crate::cluster::Layout;
use crate::{Error, NodeId};

/// ZooKeeper's tick, ms: the unit of its session timeouts (2 to 20 ticks) and of the
/// followers' sync limits.
pub const TICK_MS: u64 = 200;
/// The shortest session timeout the servers grant, ms (ZooKeeper's default, 2 ticks).
pub const MIN_SESSION_MS: u64 = 2 * TICK_MS;
/// The longest session timeout the servers grant, ms (ZooKeeper's default, 20 ticks).
pub const MAX_SESSION_MS: u64 = 20 * TICK_MS;
/// The JVM's heap: 3 or 5 JVMs share a 2-core machine with the harness.
const HEAP: &str = "-Xmx256m";

/// Where the server's classes come from, and the JVM that runs them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkInstall {
    /// The `java` binary.
    pub java: PathBuf,
    /// The class path: Debian's `zookeeper.jar` (its manifest names its dependencies) and
    /// slf4j's simple binding, so the server logs to stderr (the node log).
    pub classpath: String,
}

/// Finds Debian's `zookeeper` package (`/usr/share/java/zookeeper.jar`, or
/// `$LOCKSMITH_ZOOKEEPER_JAR`) and `java` (`$LOCKSMITH_JAVA`, else on `PATH`), or says how
/// to install them.
pub fn find_zookeeper() -> Result<ZkInstall, Error> {
    let jar = std::env::var_os("LOCKSMITH_ZOOKEEPER_JAR").map_or_else(
        || PathBuf::from("/usr/share/java/zookeeper.jar"),
        PathBuf::from,
    );
    if !jar.is_file() {
        return Err(Error::Cluster(format!(
            "no ZooKeeper at {} (Debian's zookeeper package); run ci/install.sh",
            jar.display()
        )));
    }
    let java = match std::env::var_os("LOCKSMITH_JAVA") {
        Some(java) => Some(PathBuf::from(java)),
        None => std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("java"))
                .find(|candidate| candidate.is_file())
        }),
    };
    let java = java.ok_or_else(|| {
        Error::Cluster(
            "no java on PATH (the zookeeper package brings one); run ci/install.sh".into(),
        )
    })?;
    let mut classpath = jar.display().to_string();
    let binding = jar.with_file_name("slf4j-simple.jar");
    if binding.is_file() {
        classpath.push(':');
        classpath.push_str(&binding.display().to_string());
    }
    Ok(ZkInstall { java, classpath })
}

/// A server's two peer ports: where it binds them, or where a peer dials them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerPorts {
    /// The quorum port: a learner's connection to its leader.
    pub quorum: SocketAddr,
    /// The election port: votes.
    pub election: SocketAddr,
}

/// The ports and files of the servers of one run.
#[derive(Clone, Debug)]
pub struct Ensemble {
    /// Each server's own ports, which it binds.
    pub own: BTreeMap<NodeId, PeerPorts>,
    /// `dial[(source, target)]`: the ports `source`'s config names for `target`.
    pub dial: BTreeMap<(NodeId, NodeId), PeerPorts>,
}

impl Ensemble {
    /// Servers that dial each other directly (no per-link net: `locksmith bench`, or nets
    /// that cut real addresses): the quorum port is the layout's peer port, `dial` names
    /// it, and an election port is picked per server.
    pub fn direct(
        layout: &Layout,
        dial: &BTreeMap<(NodeId, NodeId), SocketAddr>,
    ) -> Result<Ensemble, Error> {
        let ports = crate::cluster::free_ports(layout.nodes.len())?;
        let own: BTreeMap<NodeId, PeerPorts> = layout
            .nodes
            .iter()
            .zip(ports)
            .map(|(id, election)| {
                let quorum = layout.peer[id];
                (*id, PeerPorts { quorum, election })
            })
            .collect();
        let dial = dial
            .iter()
            .map(|(&(source, target), quorum)| {
                let election = own[&target].election;
                let quorum = *quorum;
                ((source, target), PeerPorts { quorum, election })
            })
            .collect();
        Ok(Ensemble { own, dial })
    }

    /// Servers behind a per-link net ([`super::links`]): each binds fresh quorum and
    /// election ports behind the front on its layout peer port, and dials each peer's
    /// quorum port at the net's per-link address `dial[(source, target)]` and its election
    /// port at the election relay of that link.
    pub fn through_links(
        layout: &Layout,
        dial: &BTreeMap<(NodeId, NodeId), SocketAddr>,
    ) -> Result<(Ensemble, PeerLinks), Error> {
        let ports = crate::cluster::free_ports(2 * layout.nodes.len())?;
        let own: BTreeMap<NodeId, PeerPorts> = layout
            .nodes
            .iter()
            .zip(ports.chunks(2))
            .map(|(id, pair)| {
                let (quorum, election) = (pair[0], pair[1]);
                (*id, PeerPorts { quorum, election })
            })
            .collect();
        let fronts = layout
            .nodes
            .iter()
            .map(|id| (layout.peer[id], own[id]))
            .collect();
        let links = PeerLinks::start(dial, fronts)?;
        let mut peers = BTreeMap::new();
        for (&(source, target), quorum) in dial {
            let election = links.relay(source, target).ok_or_else(|| {
                Error::Cluster(format!("no election relay for {source}->{target}"))
            })?;
            let quorum = *quorum;
            peers.insert((source, target), PeerPorts { quorum, election });
        }
        Ok((Ensemble { own, dial: peers }, links))
    }

    /// Writes every server's `myid` and `zoo.cfg` into its data dir.
    pub fn write(&self, layout: &Layout) -> Result<(), Error> {
        for id in &layout.nodes {
            let dir = &layout.data_dir[id];
            let write = |name: &str, text: String| {
                let path = dir.join(name);
                std::fs::write(&path, text)
                    .map_err(|e| Error::Io(format!("{}: {e}", path.display())))
            };
            write("myid", format!("{id}\n"))?;
            write("zoo.cfg", self.config(layout, *id))?;
        }
        Ok(())
    }

    /// Server `id`'s `zoo.cfg`. Its own line names its real ports (it binds them); every
    /// other server's line names the ports `id` dials for it.
    pub fn config(&self, layout: &Layout, id: NodeId) -> String {
        let mut text = format!(
            "# written by locksmith for server {id}\n\
             tickTime={TICK_MS}\n\
             initLimit=10\n\
             syncLimit=5\n\
             minSessionTimeout={MIN_SESSION_MS}\n\
             maxSessionTimeout={MAX_SESSION_MS}\n\
             dataDir={}\n\
             clientPort={}\n\
             clientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=srvr\n\
             autopurge.purgeInterval=0\n",
            layout.data_dir[&id].display(),
            layout.client[&id].port(),
        );
        for peer in &layout.nodes {
            let ports = if *peer == id {
                self.own[peer]
            } else {
                self.dial[&(id, *peer)]
            };
            // One host for both ports: ZooKeeper's `host:quorum:election`. Every address
            // here is on 127.0.0.1.
            text.push_str(&format!(
                "server.{peer}={}:{}:{}\n",
                ports.quorum.ip(),
                ports.quorum.port(),
                ports.election.port()
            ));
        }
        text
    }
}

/// The command that starts server `id` in the foreground from its data dir's `zoo.cfg`.
///
/// This is the one place a server's process is built; the launcher adds libfaketime's
/// `LD_PRELOAD` and `FAKETIME_*` variables to it for clock faults (see [`super`]).
pub fn server_command(install: &ZkInstall, data_dir: &Path) -> Command {
    let mut command = Command::new(&install.java);
    command.args([
        HEAP,
        // Short-lived small JVMs on 2 cores: one GC thread, the C1 compiler only.
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Dzookeeper.jmx.log4j.disable=true",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        "-cp",
        &install.classpath,
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
    ]);
    command.arg(data_dir.join("zoo.cfg"));
    command
}

/// One server's answer to `srvr`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Srvr {
    /// `leader`, `follower`, or `looking` when it does not serve (no quorum).
    pub mode: String,
    /// Its last zxid: epoch in the high 32 bits, counter in the low.
    pub zxid: u64,
}

/// Parses a `srvr` answer. A server without a quorum answers "not currently serving".
pub fn parse_srvr(text: &str) -> Option<Srvr> {
    if text.contains("not currently serving") {
        return Some(Srvr {
            mode: "looking".into(),
            zxid: 0,
        });
    }
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    let mode = field("Mode:")?;
    let zxid = field("Zxid:")
        .and_then(|z| u64::from_str_radix(z.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    Some(Srvr { mode, zxid })
}

/// Asks `addr` (a client port) `srvr`, within `timeout`. Blocking: call it from a blocking
/// task.
pub fn srvr(addr: SocketAddr, timeout: Duration) -> Option<Srvr> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    stream.write_all(b"srvr").ok()?;
    let mut text = String::new();
    stream.take(64 * 1024).read_to_string(&mut text).ok()?;
    parse_srvr(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srvr_answers_give_mode_and_zxid() {
        // NodeView: the role and epoch come from `srvr`; a server without quorum still answers.
        let leader = "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nZxid: 0x300000002\nMode: leader\nNode count: 5\n";
        assert_eq!(
            parse_srvr(leader),
            Some(Srvr {
                mode: "leader".into(),
                zxid: 0x3_0000_0002
            })
        );
        let looking = "This ZooKeeper instance is not currently serving requests\n";
        assert_eq!(parse_srvr(looking).map(|s| s.mode), Some("looking".into()));
        assert_eq!(parse_srvr("garbage"), None);
    }

    fn via(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn per_link_dial() -> BTreeMap<(NodeId, NodeId), SocketAddr> {
        BTreeMap::from([
            ((1, 2), via(40012)),
            ((1, 3), via(40013)),
            ((2, 1), via(40021)),
            ((2, 3), via(40023)),
            ((3, 1), via(40031)),
            ((3, 2), via(40032)),
        ])
    }

    #[tokio::test]
    async fn each_server_dials_both_peer_ports_of_a_peer_through_its_link() {
        // Partitions (issue 25 item 2): a server's own line keeps its real ports; for a
        // peer it names the net's per-link address as the quorum port and the election
        // relay of the same link as the election port.
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(3, dir.path()).unwrap();
        let (ensemble, links) = Ensemble::through_links(&layout, &per_link_dial()).unwrap();
        ensemble.write(&layout).unwrap();
        let cfg = std::fs::read_to_string(layout.data_dir[&1].join("zoo.cfg")).unwrap();
        let own = ensemble.own[&1];
        assert_ne!(
            own.quorum, layout.peer[&1],
            "the front holds the layout's peer port"
        );
        assert!(
            cfg.contains(&format!(
                "server.1=127.0.0.1:{}:{}",
                own.quorum.port(),
                own.election.port()
            )),
            "{cfg}"
        );
        let relay = links.relay(1, 2).expect("a relay for 1->2");
        assert!(
            cfg.contains(&format!("server.2=127.0.0.1:40012:{}\n", relay.port())),
            "{cfg}"
        );
        assert_ne!(
            links.relay(2, 1),
            Some(relay),
            "one relay per directed link"
        );
        assert!(cfg.contains(&format!("clientPort={}", layout.client[&1].port())));
        let myid = std::fs::read_to_string(layout.data_dir[&3].join("myid")).unwrap();
        assert_eq!(myid.trim(), "3");
    }

    #[test]
    fn without_a_per_link_net_servers_dial_peers_directly() {
        // locksmith bench: no net, no relays; the quorum port is the layout's peer port.
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(3, dir.path()).unwrap();
        let mut dial = BTreeMap::new();
        for (s, t) in per_link_dial().into_keys() {
            dial.insert((s, t), layout.peer[&t]);
        }
        let ensemble = Ensemble::direct(&layout, &dial).unwrap();
        let cfg = ensemble.config(&layout, 1);
        assert!(cfg.contains(&format!(
            "server.2=127.0.0.1:{}:{}\n",
            layout.peer[&2].port(),
            ensemble.own[&2].election.port()
        )));
    }
}
