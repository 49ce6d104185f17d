//! The turmoil world: the harness's seams answered by a simulation. Every lockd node is a
//! turmoil host running the real server; the harness (workload, fault driver, recovery,
//! probe: `crate::harness::execute`) runs in one more host, `clients`, and reaches the
//! nodes through [`SimNodes`] and [`SimNet`].
//!
//! A seam call made inside the `clients` host changes what it can at once (a node's pause
//! switch, its peer links' fault switch) and queues what only the simulation can do (crash,
//! bounce, hold, cut, link latency); the step loop ([`run`]) applies the queue right after
//! the step in which the call was made, so a fault takes effect at the simulated instant it
//! was recorded.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockd::server::{LinkFaults, LinkFaultsSwitch, PauseSwitch};
use tokio::time::Instant;

use crate::cluster::{Layout, NodeStats};
use crate::faults::netem::NetemSpec;
use crate::harness::Nodes;
use crate::net::{Grudge, Net};
use crate::{Error, NodeId};

/// Where each node listens for clients in the simulation.
pub const CLIENT_PORT: u16 = 7100;
/// Where each node listens for peers in the simulation.
pub const PEER_PORT: u16 = 7000;
/// The harness's host.
pub const HARNESS_HOST: &str = "clients";
/// `slow`: the bound of a message's latency on a slowed node's links, ms (netem's 100 ms
/// ± 50 ms).
const SLOW_MAX_LATENCY_MS: u64 = 150;

/// A node's host name.
pub fn node_name(id: NodeId) -> String {
    format!("n{id}")
}

/// The layout of the simulated cluster (inside the simulation: it looks the hosts up).
pub fn layout(nodes: &[NodeId]) -> Layout {
    let at = |id: NodeId, port| SocketAddr::new(turmoil::lookup(node_name(id)), port);
    Layout {
        nodes: nodes.to_vec(),
        peer: nodes.iter().map(|&id| (id, at(id, PEER_PORT))).collect(),
        client: nodes.iter().map(|&id| (id, at(id, CLIENT_PORT))).collect(),
        data_dir: nodes.iter().map(|&id| (id, "/data".into())).collect(),
        log_dir: Default::default(),
        users: BTreeMap::new(),
    }
}

/// What only the step loop can do to the simulation.
#[derive(Clone, Debug)]
enum Command {
    Crash(NodeId),
    Bounce(NodeId),
    Hold(NodeId),
    Release(NodeId),
    Cut(Grudge),
    Latency(NodeId, u64),
}

#[derive(Default)]
struct NodeState {
    stats: NodeStats,
    since: Option<Instant>,
    up: Duration,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Command>,
    killed: BTreeSet<NodeId>,
    paused: BTreeSet<NodeId>,
    exited: BTreeSet<NodeId>,
    /// Node exits not yet reaped.
    exits: Vec<(NodeId, String)>,
    nodes: BTreeMap<NodeId, NodeState>,
}

/// The simulated world's shared state: the seams write it, the step loop and the node
/// hosts read and write it (one thread: the lock is never contended).
#[derive(Clone)]
pub struct Control {
    state: Arc<Mutex<State>>,
    switches: Arc<BTreeMap<NodeId, (PauseSwitch, LinkFaultsSwitch)>>,
    logs: Option<Arc<Mutex<Vec<u8>>>>,
    nodes: Vec<NodeId>,
}

impl Control {
    /// The control of `nodes`, with their pause and link switches and the log buffer.
    pub fn new(
        nodes: Vec<NodeId>,
        switches: BTreeMap<NodeId, (PauseSwitch, LinkFaultsSwitch)>,
        logs: Option<Arc<Mutex<Vec<u8>>>>,
    ) -> Control {
        let state = State {
            nodes: nodes
                .iter()
                .map(|&id| {
                    let mut node = NodeState::default();
                    node.stats.node = id;
                    node.stats.starts = 1;
                    (id, node)
                })
                .collect(),
            ..State::default()
        };
        Control {
            state: Arc::new(Mutex::new(state)),
            switches: Arc::new(switches),
            logs,
            nodes,
        }
    }

    /// Starts the nodes' uptime clocks (the harness host, when it starts: on the
    /// simulation's clock).
    pub fn start_clocks(&self) {
        let now = Instant::now();
        for node in self.lock().nodes.values_mut() {
            node.since = Some(now);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A node host's server returned or panicked on its own.
    pub fn node_stopped(&self, id: NodeId, how: String) {
        let mut state = self.lock();
        state.exited.insert(id);
        state.exits.push((id, how));
        if let Some(node) = state.nodes.get_mut(&id) {
            node.stats.exits += 1;
        }
    }

    fn others(&self, node: NodeId) -> Vec<String> {
        let mut others: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| **n != node)
            .map(|n| node_name(*n))
            .collect();
        others.push(HARNESS_HOST.to_owned());
        others
    }

    /// Applies the queued commands to the simulation (the step loop, between steps).
    /// `cut` is the grudge in force; `latency_ms` the seed's message latency bound.
    pub fn apply(&self, sim: &mut turmoil::Sim<'_>, cut: &mut Grudge, latency_ms: u64) {
        let commands: Vec<Command> = self.lock().queue.drain(..).collect();
        for command in commands {
            match command {
                Command::Crash(n) => sim.crash(node_name(n)),
                Command::Bounce(n) => sim.bounce(node_name(n)),
                Command::Hold(n) => {
                    for other in self.others(n) {
                        sim.hold(node_name(n), other);
                    }
                }
                Command::Release(n) => {
                    for other in self.others(n) {
                        sim.release(node_name(n), other);
                    }
                }
                Command::Cut(grudge) => {
                    for (source, target) in cut.links() {
                        sim.repair_oneway(node_name(source), node_name(target));
                    }
                    for (source, target) in grudge.links() {
                        sim.partition_oneway(node_name(source), node_name(target));
                    }
                    *cut = grudge;
                }
                Command::Latency(n, bound_ms) => {
                    let bound_ms = if bound_ms == 0 { latency_ms } else { bound_ms };
                    for other in self.others(n) {
                        sim.set_link_max_message_latency(
                            node_name(n),
                            other,
                            Duration::from_millis(bound_ms),
                        );
                    }
                }
            }
        }
    }

    fn thaw(&self, state: &mut State, id: NodeId) {
        if state.paused.remove(&id) {
            state.queue.push_back(Command::Release(id));
            if let Some((switch, _)) = self.switches.get(&id) {
                switch.set_paused(false);
            }
        }
    }
}

/// The [`Nodes`] seam on turmoil hosts.
pub struct SimNodes(pub Control);

impl Nodes for SimNodes {
    fn kill(&self, id: NodeId) -> Result<(), Error> {
        let mut state = self.0.lock();
        if state.killed.contains(&id) {
            return Ok(());
        }
        self.0.thaw(&mut state, id);
        state.queue.push_back(Command::Crash(id));
        state.killed.insert(id);
        if let Some(node) = state.nodes.get_mut(&id) {
            node.stats.kills += 1;
            if let Some(since) = node.since.take() {
                node.up += since.elapsed();
            }
        }
        Ok(())
    }

    fn restart(&self, id: NodeId) -> Result<(), Error> {
        let mut state = self.0.lock();
        state.queue.push_back(Command::Bounce(id));
        state.killed.remove(&id);
        state.exited.remove(&id);
        if let Some(node) = state.nodes.get_mut(&id) {
            node.stats.starts += 1;
            node.since = Some(Instant::now());
        }
        Ok(())
    }

    fn pause(&self, id: NodeId) -> Result<(), Error> {
        let mut state = self.0.lock();
        if state.killed.contains(&id) || !state.paused.insert(id) {
            return Ok(());
        }
        // The core stops and every link of the node holds (nothing in or out), as a
        // SIGSTOP'd process neither reads nor writes.
        if let Some((switch, _)) = self.0.switches.get(&id) {
            switch.set_paused(true);
        }
        state.queue.push_back(Command::Hold(id));
        if let Some(node) = state.nodes.get_mut(&id) {
            node.stats.pauses += 1;
        }
        Ok(())
    }

    fn resume(&self, id: NodeId) -> Result<(), Error> {
        let mut state = self.0.lock();
        self.0.thaw(&mut state, id);
        Ok(())
    }

    fn is_alive(&self, id: NodeId) -> bool {
        let state = self.0.lock();
        !state.killed.contains(&id) && !state.exited.contains(&id)
    }

    fn down(&self) -> BTreeSet<NodeId> {
        let state = self.0.lock();
        state.killed.union(&state.exited).copied().collect()
    }

    fn paused(&self) -> BTreeSet<NodeId> {
        self.0.lock().paused.clone()
    }

    fn reap_exited(&self) -> Vec<(NodeId, String)> {
        std::mem::take(&mut self.0.lock().exits)
    }

    fn log_tail(&self, id: NodeId, lines: usize) -> String {
        let Some(logs) = &self.0.logs else {
            return String::new();
        };
        let bytes = logs.lock().map(|b| b.clone()).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let tag = node_tag(id);
        let mine: Vec<&str> = text.lines().filter(|l| l.contains(&tag)).collect();
        mine[mine.len().saturating_sub(lines)..].join("\n")
    }

    fn stats(&self) -> Vec<NodeStats> {
        let state = self.0.lock();
        state
            .nodes
            .values()
            .map(|node| {
                let mut stats = node.stats.clone();
                let running = node.since.map(|s| s.elapsed()).unwrap_or_default();
                stats.uptime_ms = (node.up + running).as_millis() as u64;
                stats
            })
            .collect()
    }
}

/// The tag turmoil's `node` span puts on every log line of node `id`.
pub fn node_tag(id: NodeId) -> String {
    format!("node{{name=\"n{id}\"}}")
}

/// The [`Net`] seam on turmoil links: partitions cut links one way; `slow` bounds a node's
/// message latency at 150 ms and `flaky` has its peer links drop, reorder and duplicate
/// Raft messages ([`LinkFaults`]).
pub struct SimNet(pub Control);

impl Net for SimNet {
    fn dial_addr(&self, _source: NodeId, target: NodeId) -> SocketAddr {
        // The nodes dial each other by host name; the simulation cuts the links itself.
        SocketAddr::new(turmoil::lookup(node_name(target)), PEER_PORT)
    }

    fn apply(&self, grudge: &Grudge) -> Result<(), Error> {
        self.0.lock().queue.push_back(Command::Cut(grudge.clone()));
        Ok(())
    }

    fn teardown(&self) -> Result<(), Error> {
        self.apply(&Grudge::none())
    }

    fn netem(&self, node: NodeId, spec: Option<&NetemSpec>) -> Result<String, Error> {
        // slow and flaky shape a node independently; an undo (`None`) puts back both, as
        // removing the node's qdisc does on a real host.
        let (latency_ms, faults) = match spec {
            Some(spec) if *spec == NetemSpec::SLOW => (Some(SLOW_MAX_LATENCY_MS), None),
            Some(spec) => (
                None,
                Some(LinkFaults {
                    drop_percent: spec.loss_percent,
                    reorder_percent: spec.reorder_percent,
                    duplicate_percent: spec.duplicate_percent,
                }),
            ),
            None => (Some(0), Some(LinkFaults::NONE)),
        };
        if let Some(bound_ms) = latency_ms {
            self.0
                .lock()
                .queue
                .push_back(Command::Latency(node, bound_ms));
        }
        if let (Some(faults), Some((_, links))) = (faults, self.0.switches.get(&node)) {
            links.set(faults);
        }
        Ok("simulated links".to_owned())
    }
}
