//! One ZooKeeper server of a run: where the package's jars are, the `zoo.cfg` and `myid` of
//! each server, the command that starts it in the foreground, and its `srvr` status.
//!
//! Each server gets three loopback ports: the client port and the quorum port of the run's
//! [`Layout`] (`client[id]`, `peer[id]`), and an election port picked here. A server's
//! `zoo.cfg` lists every peer with the address it dials for that peer's **quorum** port, so
//! the net's per-link address (`dial[(id, peer)]`, a proxy or kernel-cut port) carries the
//! followers' connections to the leader: proposals, commits, pings and session touches. The
//! election ports are dialed directly (see the module docs of [`super`] for what that means
//! for partitions).

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

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

/// The ports and files of the servers of one run.
#[derive(Clone, Debug)]
pub struct Ensemble {
    /// Each server's election port (the quorum and client ports are the layout's).
    pub election: BTreeMap<NodeId, SocketAddr>,
}

impl Ensemble {
    /// Picks an election port per node and writes every server's `myid` and `zoo.cfg` into
    /// its data dir; `dial[(id, peer)]` is the address server `id` dials for `peer`'s quorum
    /// port.
    pub fn write(
        layout: &Layout,
        dial: &BTreeMap<(NodeId, NodeId), SocketAddr>,
    ) -> Result<Ensemble, Error> {
        let ports = crate::cluster::free_ports(layout.nodes.len())?;
        let election: BTreeMap<NodeId, SocketAddr> =
            layout.nodes.iter().copied().zip(ports).collect();
        let ensemble = Ensemble { election };
        for id in &layout.nodes {
            let dir = &layout.data_dir[id];
            let write = |name: &str, text: String| {
                let path = dir.join(name);
                std::fs::write(&path, text)
                    .map_err(|e| Error::Io(format!("{}: {e}", path.display())))
            };
            write("myid", format!("{id}\n"))?;
            write("zoo.cfg", ensemble.config(layout, dial, *id))?;
        }
        Ok(ensemble)
    }

    /// Server `id`'s `zoo.cfg`. Its own line names its real ports (it binds them); every
    /// other server's quorum address is the one `id` dials for it.
    pub fn config(
        &self,
        layout: &Layout,
        dial: &BTreeMap<(NodeId, NodeId), SocketAddr>,
        id: NodeId,
    ) -> String {
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
            let quorum = if *peer == id {
                layout.peer[peer]
            } else {
                dial.get(&(id, *peer)).copied().unwrap_or(layout.peer[peer])
            };
            let election = self.election[peer];
            text.push_str(&format!(
                "server.{peer}={}:{}:{}\n",
                quorum.ip(),
                quorum.port(),
                election.port()
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

    #[test]
    fn each_server_dials_peers_quorum_ports_through_the_net() {
        // Partitions: the quorum links go through the net's per-link addresses, a server's
        // own line keeps its real ports.
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(3, dir.path()).unwrap();
        let via = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let dial = BTreeMap::from([
            ((1, 2), via(40012)),
            ((1, 3), via(40013)),
            ((2, 1), via(40021)),
            ((2, 3), via(40023)),
            ((3, 1), via(40031)),
            ((3, 2), via(40032)),
        ]);
        let ensemble = Ensemble::write(&layout, &dial).unwrap();
        let cfg = std::fs::read_to_string(layout.data_dir[&1].join("zoo.cfg")).unwrap();
        let own = format!(
            "server.1=127.0.0.1:{}:{}",
            layout.peer[&1].port(),
            ensemble.election[&1].port()
        );
        assert!(cfg.contains(&own), "{cfg}");
        assert!(cfg.contains(&format!(
            "server.2=127.0.0.1:40012:{}",
            ensemble.election[&2].port()
        )));
        assert!(cfg.contains(&format!("clientPort={}", layout.client[&1].port())));
        let myid = std::fs::read_to_string(layout.data_dir[&3].join("myid")).unwrap();
        assert_eq!(myid.trim(), "3");
    }
}
