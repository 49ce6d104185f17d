//! The seams through which the harness reaches the world, and the [`World`] that bundles
//! them. Every seam has one implementation per world:
//!
//! | seam | real processes (`locksmith test`) | simulator (`locksmith sim`) |
//! |---|---|---|
//! | [`Nodes`]: kill, restart, pause, resume, is-alive | [`crate::cluster::Cluster`] (local processes; SSH hosts through its launcher) | `sim::world::SimNodes` (turmoil hosts) |
//! | [`Net`]: partition, heal, netem | `net::proxy`, `net::kernel`, `net::netns`, `net::owner`, `hosts::remote` | `sim::world::SimNet` (turmoil links) |
//! | clock | tokio's clock (real time) | tokio's clock, which turmoil drives |
//! | disk | the run dir on the real disk | the nodes' data dirs on turmoil's disk; the store on the real disk |
//! | [`System`]: clients, status, clock control | `lockd_system`, `etcd` over loopback | `lockd_system` over turmoil's sockets (`lockd::sys`) |
//!
//! The workload, recorder, fault families, fault driver, final heal, recovery and phantom
//! probe see only these seams, so they are the same code in both worlds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::cluster::{Layout, NodeStats};
use crate::harness::workload::ClientPauses;
use crate::net::Net;
use crate::systems::System;
use crate::{Error, NodeId};

/// The nodes of the system under test: start again, stop, freeze and thaw them, and learn
/// which stopped on their own. Calls may block (a real kill waits for the process to be
/// reaped); the harness makes them through [`World::blocking`].
pub trait Nodes: Send + Sync {
    /// Kills node `id` (a crash: what it did not sync is lost). A paused node is resumed
    /// first, so nothing stays stopped.
    fn kill(&self, id: NodeId) -> Result<(), Error>;
    /// Starts a killed node again from its data dir.
    fn restart(&self, id: NodeId) -> Result<(), Error>;
    /// Freezes node `id`: it neither reads, writes nor runs its timers.
    fn pause(&self, id: NodeId) -> Result<(), Error>;
    /// Thaws a paused node.
    fn resume(&self, id: NodeId) -> Result<(), Error>;
    /// True while node `id` runs (started, not killed, not exited; paused counts as alive).
    fn is_alive(&self, id: NodeId) -> bool;
    /// Nodes killed and not restarted.
    fn down(&self) -> BTreeSet<NodeId>;
    /// Nodes paused and not resumed.
    fn paused(&self) -> BTreeSet<NodeId>;
    /// Nodes that stopped on their own since the last call (no kill), with how.
    fn reap_exited(&self) -> Vec<(NodeId, String)>;
    /// The last `lines` lines of node `id`'s log, for an explanation.
    fn log_tail(&self, id: NodeId, lines: usize) -> String;
    /// Per node: starts, kills, pauses, exits, uptime (results.json `nodes`).
    fn stats(&self) -> Vec<NodeStats>;
}

/// Everything the harness acts on, in one world.
#[derive(Clone)]
pub struct World {
    /// The system under test: its clients, status and clock control.
    pub system: Arc<dyn System>,
    /// The nodes' ids and addresses.
    pub layout: Layout,
    /// The nodes.
    pub nodes: Arc<dyn Nodes>,
    /// The links between the nodes.
    pub net: Arc<dyn Net>,
    /// Client slots the pause family stalls.
    pub clients: Arc<ClientPauses>,
    /// True on real processes: a seam call that may block runs on tokio's blocking pool.
    /// False in the simulator, where every seam call is quick and must run in place, on the
    /// simulation's one thread, to stay deterministic.
    pub blocking_pool: bool,
}

impl World {
    /// Runs a seam call that may block: on the blocking pool in the real world, in place in
    /// the simulated one.
    pub async fn blocking<T, F>(&self, call: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, Error> + Send + 'static,
    {
        if !self.blocking_pool {
            return call();
        }
        tokio::task::spawn_blocking(call)
            .await
            .map_err(|e| Error::Io(format!("a blocking seam call failed: {e}")))?
    }
}

/// What every world's [`Nodes`] keeps of one node: whether it runs and is paused, and the
/// counts and uptime of results.json `nodes`. The world does the deed; the ledger books it.
#[derive(Clone, Debug)]
pub struct NodeLedger {
    stats: NodeStats,
    /// Time running before the current start, and when the current start began.
    up: Duration,
    since: Option<Instant>,
    paused: bool,
}

impl NodeLedger {
    /// The ledgers of `nodes`, none started yet.
    pub fn of(nodes: &[NodeId]) -> BTreeMap<NodeId, NodeLedger> {
        let ledger = |node| NodeLedger {
            stats: NodeStats {
                node,
                ..NodeStats::default()
            },
            up: Duration::ZERO,
            since: None,
            paused: false,
        };
        nodes.iter().map(|&id| (id, ledger(id))).collect()
    }

    /// True from a start to a kill or an exit.
    pub fn running(&self) -> bool {
        self.since.is_some()
    }

    /// True while running and paused.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// The node (re)started.
    pub fn started(&mut self) {
        self.stats.starts += 1;
        self.since = Some(Instant::now());
        self.paused = false;
    }

    /// The nemesis killed the node.
    pub fn killed(&mut self) {
        self.stats.kills += 1;
        self.stopped();
    }

    /// The node exited on its own.
    pub fn exited(&mut self) {
        self.stats.exits += 1;
        self.stopped();
    }

    fn stopped(&mut self) {
        if let Some(since) = self.since.take() {
            self.up += since.elapsed();
        }
        self.paused = false;
    }

    /// The node was paused (`true`) or resumed; a pause counts once until resumed.
    pub fn set_paused(&mut self, paused: bool) {
        if paused && !self.paused {
            self.stats.pauses += 1;
        }
        self.paused = paused;
    }

    /// The node's counts, uptime so far included.
    pub fn stats(&self) -> NodeStats {
        let running = self.since.map(|s| s.elapsed()).unwrap_or_default();
        NodeStats {
            uptime_ms: (self.up + running).as_millis() as u64,
            ..self.stats.clone()
        }
    }

    /// Nodes of `ledgers` for which `which` holds.
    pub fn select(
        ledgers: &BTreeMap<NodeId, NodeLedger>,
        which: impl Fn(&NodeLedger) -> bool,
    ) -> BTreeSet<NodeId> {
        ledgers
            .iter()
            .filter(|(_, l)| which(l))
            .map(|(id, _)| *id)
            .collect()
    }
}
