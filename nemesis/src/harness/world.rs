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

use std::collections::BTreeSet;
use std::sync::Arc;

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
