//! ZooKeeper as a system under test (`locksmith test --system zookeeper`, `locksmith bench`):
//! an ensemble of Debian's `zookeeper` 3.8 servers and the lock recipe of its documentation.
//!
//! - **Servers** ([`server`]): each one a JVM running `QuorumPeerMain` in the foreground with
//!   its own `zoo.cfg`, `myid` and data dir in the run's data dir, its client port from
//!   the run's [`Layout`] and its quorum and election ports ([`server::Ensemble`]), all on
//!   127.0.0.1;
//!   never the package's service. Kill, pause and restart are the cluster's signals on the
//!   JVM's process group, as for every system. The command is built in one place,
//!   [`server::server_command`]; the launcher wraps it in libfaketime for clock faults.
//! - **Clock** ([`ZooKeeper::with_faketime`], on with the clock nemesis): every server's JVM
//!   runs under libfaketime as a JVM needs it ([`Libfaketime::for_jvm`]: the multithreaded
//!   build, its monotonic fix off, or the JVM's timer threads spin) with a clock file the
//!   harness rewrites ([`crate::systems::faketime`]), and the clock family moves that server's **wall**
//!   clock (`System.currentTimeMillis`): jumps, rates, strobes. ZooKeeper 3.8 stamps it on
//!   znodes (`ctime`, `mtime`: the leader's wall clock when it prepared the transaction) and
//!   on its log lines, but it times sessions, ticks, sync limits and elections on
//!   `System.nanoTime` (`Time.currentElapsedTime`), the monotonic clock, which libfaketime
//!   leaves alone (`FAKETIME_DONT_FAKE_MONOTONIC`: the JVM hangs otherwise). So a clock fault
//!   moves no lease: `nemesis/tests/zookeeper.rs` shows a lock held through jumps of an hour
//!   on every server, and README's findings measure whole runs. [`CLOCK_NOTE`] says so under
//!   the run's checks.
//! - **Partitions**: every server dials each peer's **quorum** and **election** ports
//!   through the net's per-link address ([`System::per_link_dial`] is true), so the proxy
//!   (default) or the kernel net (`--net kernel`, root) cuts a server off completely, as for
//!   lockd and etcd: no proposals, commits, pings or session touches, and no votes. The net
//!   gives one address per link and ZooKeeper needs two ports, so a front on each server's
//!   layout peer port passes connections on to its real quorum or election port, and an
//!   election relay per link rewrites the election address a server advertises, which
//!   ZooKeeper 3.8 dials back ([`links`] says why and how). A cut-off server stays
//!   `looking`, and its clients' sessions move to a server that serves.
//! - **Clients** ([`client`]): one session per grant, whose timeout is the lease; the token
//!   is the lock node's creation zxid. Each session dials a [`relay`] of its own, which
//!   starts at the client's node (`nodes[client_id % n]`) and fails over to the next. `pause-clients` stalls a holder's relay too ([`LockClient::stall`]): a paused
//!   holder's session stops heartbeating and expires, as a real process pause does.
//! - **Status**: the `srvr` four-letter word: `Mode` gives the role (a server without a
//!   quorum answers "not currently serving": `candidate`), the zxid's high half the epoch
//!   (`term`), its low half the commit index.
//! - **Lease**: the session timeout. Every acquire asks for a session of its own `lease_ms`
//!   (within the servers' 400-4000 ms), so the history's lease is exactly what ZooKeeper
//!   promises: the leader expires a session no earlier than its timeout after it last heard
//!   from it, which is after the acquire's invoke (the session is made inside the op).
//!   The holder may learn of the expiry much later (paused, cut off): the lease check only
//!   relies on the lease from the invoke, and anything the holder does after that is the
//!   fenced resource's to refuse.

pub mod client;
pub mod links;
pub mod relay;
pub mod server;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::BoxFuture;

use crate::cluster::{LaunchOptions, Launcher, Layout};
use crate::systems::faketime::{Libfaketime, NodeClocks};
use crate::systems::{LockClient, NodeView, Outcome, System};
use crate::{Error, NodeId};

pub use client::ZkLockClient;
pub use server::{MAX_SESSION_MS, MIN_SESSION_MS, ZkInstall, find_zookeeper};

/// What `locksmith test --system zookeeper --nemesis clock` says under its checks: what a
/// clock fault reaches (see the module docs).
pub const CLOCK_NOTE: &str = "note: the clock nemesis moved the ZooKeeper servers' wall clocks \
     (libfaketime: znode ctime and mtime, log timestamps); ZooKeeper times sessions on the JVM's \
     monotonic clock (System.nanoTime), which the clock nemesis leaves alone, so its faults \
     reach no session expiry, hence no lease (measured: README, what the harness found in \
     ZooKeeper's locks)";

/// How long one `srvr` status call may take.
const STATUS_TIMEOUT: Duration = Duration::from_millis(800);

/// ZooKeeper as a system under test (see the module docs).
pub struct ZooKeeper {
    install: ZkInstall,
    /// The servers' clocks, when they run under libfaketime.
    clocks: Option<Arc<NodeClocks>>,
}

impl ZooKeeper {
    /// ZooKeeper from `install` ([`find_zookeeper`]), its servers' clocks untouched.
    pub fn new(install: ZkInstall) -> Self {
        ZooKeeper {
            install,
            clocks: None,
        }
    }

    /// The same with every server under libfaketime, so the clock nemesis can move its wall
    /// clock: `library` as a JVM needs it ([`Libfaketime::for_jvm`]). An error when its
    /// multithreaded build is missing.
    pub fn with_faketime(mut self, library: Libfaketime) -> Result<Self, Error> {
        let library = library.for_jvm()?;
        self.clocks = Some(NodeClocks::new(library));
        Ok(self)
    }

    /// The servers' clock files (for tests: they must be gone after a run).
    pub fn clock_files(&self) -> Vec<std::path::PathBuf> {
        self.clocks.as_ref().map_or_else(Vec::new, |c| c.files())
    }

    fn clocks(&self, id: NodeId) -> Result<&NodeClocks, Error> {
        self.clocks.as_deref().ok_or_else(|| {
            Error::Unsupported(format!(
                "n{id}: this ZooKeeper server runs without libfaketime (the clock nemesis was off when it started)"
            ))
        })
    }
}

struct ZkLauncher {
    install: ZkInstall,
    layout: Layout,
    clocks: Option<Arc<NodeClocks>>,
    /// The fronts and election relays behind a per-link net; they live as long as the
    /// cluster that owns this launcher.
    links: Option<links::PeerLinks>,
}

impl Launcher for ZkLauncher {
    fn command(&self, id: NodeId, _options: &LaunchOptions) -> Command {
        let mut command = server::server_command(&self.install, &self.layout.data_dir[&id]);
        if let Some(clocks) = &self.clocks {
            clocks.wrap(id, &mut command);
        }
        command
    }

    fn started(&self, _id: NodeId) -> Result<(), Error> {
        // The fronts bind the layout's peer ports, held reserved until the first start.
        self.links
            .as_ref()
            .map_or(Ok(()), links::PeerLinks::bind_fronts)
    }

    fn stopped(&self, _id: NodeId, pid: u32) {
        if self.clocks.is_some() {
            crate::systems::faketime::remove_shared_memory(pid);
        }
    }
}

struct ZkProcessClient {
    client: ZkLockClient,
    /// One op at a time, as the workload runs them.
    turn: tokio::sync::Mutex<()>,
}

impl LockClient for ZkProcessClient {
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        lease_ms: u64,
        wait_ms: u64,
        deadline: tokio::time::Instant,
    ) -> BoxFuture<'a, Outcome> {
        async move {
            let _turn = self.turn.lock().await;
            self.client.acquire(key, lease_ms, wait_ms, deadline).await
        }
        .boxed()
    }

    fn release<'a>(
        &'a self,
        _key: &'a str,
        token: u64,
        deadline: tokio::time::Instant,
    ) -> BoxFuture<'a, Outcome> {
        async move {
            let _turn = self.turn.lock().await;
            self.client.release(token, deadline).await
        }
        .boxed()
    }

    fn stall(&self, stalled: bool) {
        self.client.stall(stalled);
    }
}

impl System for ZooKeeper {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn launcher(
        &self,
        layout: &Layout,
        dial: BTreeMap<(NodeId, NodeId), SocketAddr>,
    ) -> Result<Box<dyn Launcher>, Error> {
        // A per-link net gives some link an address of its own; without one (bench,
        // nets that cut real addresses) the servers dial each other directly.
        let per_link = dial
            .iter()
            .any(|((_, target), a)| layout.peer.get(target) != Some(a));
        let (ensemble, links) = if per_link {
            let (ensemble, links) = server::Ensemble::through_links(layout, &dial)?;
            (ensemble, Some(links))
        } else {
            (server::Ensemble::direct(layout, &dial)?, None)
        };
        ensemble.write(layout)?;
        if let Some(clocks) = &self.clocks {
            clocks.create(layout)?;
        }
        Ok(Box::new(ZkLauncher {
            install: self.install.clone(),
            layout: layout.clone(),
            clocks: self.clocks.clone(),
            links,
        }))
    }

    fn client(&self, layout: &Layout, client_id: u64) -> Box<dyn LockClient> {
        assert!(!layout.nodes.is_empty(), "a layout without nodes");
        let first = (client_id % layout.nodes.len() as u64) as usize;
        let servers = layout.nodes.iter().map(|n| layout.client[n]).collect();
        Box::new(ZkProcessClient {
            client: ZkLockClient::new(layout.nodes.clone(), servers, first),
            turn: tokio::sync::Mutex::new(()),
        })
    }

    fn status<'a>(&'a self, layout: &'a Layout) -> BoxFuture<'a, Vec<NodeView>> {
        async move {
            let calls = layout.nodes.iter().map(|node| {
                let node = *node;
                let addr = layout.client[&node];
                async move {
                    let answer =
                        tokio::task::spawn_blocking(move || server::srvr(addr, STATUS_TIMEOUT))
                            .await
                            .ok()
                            .flatten();
                    answer.map(|srvr| (node, srvr))
                }
            });
            let answers: Vec<(NodeId, server::Srvr)> = futures::future::join_all(calls)
                .await
                .into_iter()
                .flatten()
                .collect();
            node_views(&answers)
        }
        .boxed()
    }

    fn set_clock<'a>(
        &'a self,
        _layout: &'a Layout,
        id: NodeId,
        rate_permille: u32,
        jump_ms: i64,
    ) -> BoxFuture<'a, Result<(), Error>> {
        async move { self.clocks(id)?.clock(id)?.set(rate_permille, jump_ms) }.boxed()
    }

    fn reset_clock<'a>(
        &'a self,
        _layout: &'a Layout,
        id: NodeId,
    ) -> BoxFuture<'a, Result<(), Error>> {
        async move { self.clocks(id)?.clock(id)?.reset() }.boxed()
    }
}

/// The views of the servers that answered `srvr`: a follower's leader is the one server
/// that says it leads in the newest epoch among the answers.
fn node_views(answers: &[(NodeId, server::Srvr)]) -> Vec<NodeView> {
    let epoch = |zxid: u64| zxid >> 32;
    let leader = answers
        .iter()
        .filter(|(_, s)| s.mode == "leader")
        .max_by_key(|(_, s)| epoch(s.zxid))
        .map(|(n, _)| *n);
    answers
        .iter()
        .map(|(node, srvr)| {
            let role = match srvr.mode.as_str() {
                "leader" => "leader",
                "follower" | "observer" => "follower",
                _ => "candidate",
            };
            NodeView {
                node: *node,
                role: role.to_owned(),
                term: epoch(srvr.zxid),
                leader: (role != "candidate").then_some(leader).flatten(),
                commit_index: srvr.zxid & 0xffff_ffff,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn followers_name_the_leader_of_the_newest_epoch() {
        // System::status: leader_of trusts the leader role; ZooKeeper's followers do not
        // name their leader, so it is the server that leads in the newest epoch.
        let srvr = |mode: &str, zxid| server::Srvr {
            mode: mode.into(),
            zxid,
        };
        let views = node_views(&[
            (1, srvr("leader", 0x1_0000_0005)),
            (2, srvr("leader", 0x2_0000_0003)),
            (3, srvr("looking", 0)),
        ]);
        assert_eq!(crate::systems::leader_of(&views), Some(2));
        assert_eq!(views[0].term, 1);
        assert_eq!(views[1].commit_index, 3);
        assert_eq!(
            (views[2].role.as_str(), views[2].leader),
            ("candidate", None)
        );
    }
}
