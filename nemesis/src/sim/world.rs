//! The turmoil world: the harness's seams answered by a simulation. The harness runs in the
//! host `clients` and reaches the node hosts through [`SimNodes`] and [`SimNet`]. A seam
//! call changes what it can at once (a node's pause and link switches) and queues what only
//! the simulation can do (crash, bounce, hold, cut, latency), which the step loop applies
//! right after the step of the call: a fault takes effect at the instant it was recorded.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use lockd::server::LinkFaults;

use crate::cluster::{Layout, NodeStats};
use crate::faults::netem::NetemSpec;
use crate::harness::Nodes;
use crate::harness::world::NodeLedger;
use crate::net::{Grudge, Net};
use crate::systems::lockd::{SIM_ADMIN_PORT, SimSwitches};
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
        admin: nodes
            .iter()
            .map(|&id| (id, at(id, SIM_ADMIN_PORT)))
            .collect(),
        data_dir: nodes.iter().map(|&id| (id, "/data".into())).collect(),
        ..Layout::default()
    }
}

/// What only the step loop can do to the simulation.
#[derive(Debug)]
enum Command {
    Crash(NodeId),
    Bounce(NodeId),
    Hold(NodeId),
    Release(NodeId),
    Cut(Grudge),
    Latency(NodeId, u64),
}

struct State {
    queue: VecDeque<Command>,
    /// Nodes a crash point crashed, with when the simulator restarts them.
    crashed: Vec<(Duration, NodeId)>,
    /// Crashes and restarts by crash points, for the history: (verb, node, point).
    crash_notes: Vec<(crate::faults::Verb, NodeId, &'static str)>,
    /// Node exits not yet reaped.
    exits: Vec<(NodeId, String)>,
    /// Every node exit of the run, reaped or not ([`Control::every_exit`]).
    every_exit: Vec<String>,
    nodes: BTreeMap<NodeId, NodeLedger>,
}

/// The simulated world's shared state: the seams write it, the step loop and the node
/// hosts read and write it (one thread: the lock is never contended).
#[derive(Clone)]
pub struct Control {
    state: Arc<Mutex<State>>,
    switches: Arc<OnceLock<BTreeMap<NodeId, SimSwitches>>>,
    logs: Option<Arc<Mutex<Vec<u8>>>>,
    nodes: Vec<NodeId>,
}

impl Control {
    /// The control of `nodes`, with the log buffer.
    pub fn new(nodes: Vec<NodeId>, logs: Option<Arc<Mutex<Vec<u8>>>>) -> Control {
        let state = State {
            queue: VecDeque::new(),
            crashed: Vec::new(),
            crash_notes: Vec::new(),
            exits: Vec::new(),
            every_exit: Vec::new(),
            nodes: NodeLedger::of(&nodes),
        };
        Control {
            state: Arc::new(Mutex::new(state)),
            switches: Arc::new(OnceLock::new()),
            logs,
            nodes,
        }
    }

    /// The nodes' pause and link switches, once their hosts exist.
    pub fn attach(&self, switches: BTreeMap<NodeId, SimSwitches>) {
        let _ = self.switches.set(switches);
    }

    fn switch(&self, id: NodeId) -> Option<&SimSwitches> {
        self.switches.get().and_then(|s| s.get(&id))
    }

    /// Books the nodes' first start, on the simulation's clock (the harness host starts).
    pub fn start_clocks(&self) {
        self.lock().nodes.values_mut().for_each(NodeLedger::started);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A node host's server returned or panicked on its own.
    pub fn node_stopped(&self, id: NodeId, how: String) {
        let mut state = self.lock();
        // As for a crash: a process that is gone is no longer stopped (see `crash_by_point`).
        self.thaw(&mut state, id);
        state.every_exit.push(format!("n{id}: {how}"));
        state.exits.push((id, how));
        state.nodes.get_mut(&id).map(NodeLedger::exited);
    }

    /// Every node that stopped on its own in this run, with how: what node health names
    /// when the run ended before the harness could reap them (the cluster never came up).
    pub fn every_exit(&self) -> Vec<String> {
        self.lock().every_exit.clone()
    }

    /// The links from `node` to every other host, as host names.
    fn links(&self, node: NodeId) -> impl Iterator<Item = (String, String)> + '_ {
        let others = self
            .nodes
            .iter()
            .filter(move |n| **n != node)
            .map(|n| node_name(*n));
        let others = others.chain([HARNESS_HOST.to_owned()]);
        others.map(move |other| (node_name(node), other))
    }

    /// The crash points that fired in the last step (`lockd::buggify::crash_point`): each
    /// node's host crashes in the next apply (its frozen core persisted nothing more; what
    /// its other tasks sent meanwhile is out), and restarts `RESTART_AFTER_MS` later.
    pub fn crash_points(&self, now: Duration) {
        const RESTART_AFTER_MS: u64 = 300;
        let mut state = self.lock();
        for (id, point) in lockd::buggify::take_crashes() {
            self.crash_by_point(
                &mut state,
                id,
                point,
                now + Duration::from_millis(RESTART_AFTER_MS),
            );
        }
    }

    /// Kills node `id` if it runs, thawed first (a SIGKILL'd process is no longer stopped);
    /// says whether it ran. The nemesis's kill and a crash point's both come here.
    fn kill_running(&self, state: &mut State, id: NodeId) -> bool {
        if !state.nodes.get(&id).is_some_and(NodeLedger::running) {
            return false;
        }
        self.thaw(state, id);
        state.queue.push_back(Command::Crash(id));
        state.nodes.get_mut(&id).map(NodeLedger::killed);
        true
    }

    /// Crashes node `id` for the crash point `point`, to restart at `restart_at`. A node the
    /// nemesis paused meanwhile (its core may be inside the turn that fired the point) is
    /// thawed first, as the nemesis's own kill does: a SIGKILL'd process is no longer
    /// stopped. Without it the restarted node kept the dead one's closed gate and held links,
    /// frozen for the rest of the run, and the ledger, which a start marks unpaused, left it
    /// to no resume (sim seed 172, found by the catch-up rule: the run had been valid).
    fn crash_by_point(
        &self,
        state: &mut State,
        id: NodeId,
        point: &'static str,
        restart_at: Duration,
    ) {
        if !self.kill_running(state, id) {
            return;
        }
        state.crashed.push((restart_at, id));
        state
            .crash_notes
            .push((crate::faults::Verb::Kill, id, point));
    }

    /// The crash points' kills and restarts since the last call, for the history.
    pub fn take_crash_notes(&self) -> Vec<(crate::faults::Verb, NodeId, &'static str)> {
        std::mem::take(&mut self.lock().crash_notes)
    }

    /// Applies the queued commands to the simulation (the step loop, between steps).
    /// `cut` is the grudge in force; `latency_ms` the seed's message latency bound.
    pub fn apply(&self, sim: &mut turmoil::Sim<'_>, cut: &mut Grudge, latency_ms: u64) {
        {
            let now = sim.elapsed();
            let mut state = self.lock();
            let (due, later) = std::mem::take(&mut state.crashed)
                .into_iter()
                .partition(|(at, _)| *at <= now);
            state.crashed = later;
            for (_, id) in due {
                // Unless the nemesis restarted it first.
                if let Some(node) = state.nodes.get_mut(&id).filter(|n| !n.running()) {
                    node.started();
                    state.queue.push_back(Command::Bounce(id));
                    let note = (crate::faults::Verb::Revive, id, "restart");
                    state.crash_notes.push(note);
                }
            }
        }
        let commands: Vec<Command> = self.lock().queue.drain(..).collect();
        for command in commands {
            match command {
                Command::Crash(n) => sim.crash(node_name(n)),
                Command::Bounce(n) => sim.bounce(node_name(n)),
                Command::Hold(n) => self.links(n).for_each(|(a, b)| sim.hold(a, b)),
                Command::Release(n) => self.links(n).for_each(|(a, b)| sim.release(a, b)),
                Command::Cut(grudge) => {
                    for (source, target) in cut.links() {
                        sim.repair_oneway(node_name(source), node_name(target));
                    }
                    for (source, target) in grudge.links() {
                        sim.partition_oneway(node_name(source), node_name(target));
                    }
                    *cut = grudge;
                }
                Command::Latency(n, ms) => {
                    let bound = Duration::from_millis(if ms == 0 { latency_ms } else { ms });
                    (self.links(n))
                        .for_each(|(a, b)| sim.set_link_max_message_latency(a, b, bound));
                }
            }
        }
    }

    fn thaw(&self, state: &mut State, id: NodeId) {
        if let Some(node) = state.nodes.get_mut(&id).filter(|n| n.paused()) {
            node.set_paused(false);
            state.queue.push_back(Command::Release(id));
            if let Some((switch, _)) = self.switch(id) {
                switch.set_paused(false);
            }
        }
    }
}

/// Records the crash points' kills and restarts in the history as the nemesis's (the
/// checks judge a crash point's crash like a planned one), and a fault point's stall of a
/// node's core as its pause and resume (`lockd::buggify::take_stalls`), polling every
/// millisecond.
pub async fn record_crash_points(
    control: Control,
    recorder: Arc<crate::harness::recorder::Recorder>,
) {
    use crate::faults::Verb;
    // Stalls under way: when each ends, the node and the point.
    let mut stalls: Vec<(tokio::time::Instant, NodeId, &'static str)> = Vec::new();
    loop {
        for (verb, id, point) in control.take_crash_notes() {
            recorder.nemesis(verb, &format!("n{id} ({point})"), "");
        }
        let now = tokio::time::Instant::now();
        for stall in lockd::buggify::take_stalls() {
            let what = format!("n{} ({})", stall.node, stall.point);
            recorder.nemesis(Verb::Pause, &what, "");
            stalls.push((
                now + Duration::from_millis(stall.ms),
                stall.node,
                stall.point,
            ));
        }
        // The resume once the stall is over (a stall the nemesis cut short, by a kill,
        // still ends here: a pause longer than it was only excuses more).
        stalls.retain(|&(end, node, point)| {
            let over = end <= now;
            if over {
                recorder.nemesis(Verb::Resume, &format!("n{node} ({point})"), "");
            }
            !over
        });
        // A client's lost answer or cut connection, as a fault of its own instant.
        for point in lockd::buggify::take_announced() {
            let what = format!("clients ({point})");
            recorder.nemesis(Verb::ClientFault, &what, "");
            recorder.nemesis(Verb::ClientFaultEnd, &what, "");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The [`Nodes`] seam on turmoil hosts.
pub struct SimNodes(pub Control);

impl SimNodes {
    fn is_running(&self, state: &State, id: NodeId) -> bool {
        state.nodes.get(&id).is_some_and(NodeLedger::running)
    }
}

impl Nodes for SimNodes {
    fn kill(&self, id: NodeId) -> Result<(), Error> {
        self.0.kill_running(&mut self.0.lock(), id);
        Ok(())
    }

    fn restart(&self, id: NodeId) -> Result<(), Error> {
        let mut state = self.0.lock();
        state.queue.push_back(Command::Bounce(id));
        state.nodes.get_mut(&id).map(NodeLedger::started);
        Ok(())
    }

    fn pause(&self, id: NodeId) -> Result<(), Error> {
        let mut state = self.0.lock();
        let Some(node) = state
            .nodes
            .get_mut(&id)
            .filter(|n| n.running() && !n.paused())
        else {
            return Ok(());
        };
        node.set_paused(true);
        // The core stops and every link of the node holds (nothing in or out), as a
        // SIGSTOP'd process neither reads nor writes.
        if let Some((switch, _)) = self.0.switch(id) {
            switch.set_paused(true);
        }
        state.queue.push_back(Command::Hold(id));
        Ok(())
    }

    fn resume(&self, id: NodeId) -> Result<(), Error> {
        let mut state = self.0.lock();
        self.0.thaw(&mut state, id);
        Ok(())
    }

    fn is_alive(&self, id: NodeId) -> bool {
        self.is_running(&self.0.lock(), id)
    }

    fn down(&self) -> BTreeSet<NodeId> {
        NodeLedger::select(&self.0.lock().nodes, |n| !n.running())
    }

    fn paused(&self) -> BTreeSet<NodeId> {
        NodeLedger::select(&self.0.lock().nodes, NodeLedger::paused)
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
        let mine: Vec<&str> = node_lines(&text, id).collect();
        mine[mine.len().saturating_sub(lines)..].join("\n")
    }

    fn stats(&self) -> Vec<NodeStats> {
        let state = self.0.lock();
        state.nodes.values().map(NodeLedger::stats).collect()
    }
}

/// Node `id`'s lines of the simulation's log (turmoil's `node` span tags each with its host).
pub fn node_lines(logs: &str, id: NodeId) -> impl Iterator<Item = &str> {
    let tag = format!("node{{name=\"n{id}\"}}");
    logs.lines().filter(move |line| line.contains(&tag))
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
        if let (Some(faults), Some((_, links))) = (faults, self.0.switch(node)) {
            links.set(faults);
        }
        Ok("simulated links".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_point_on_a_paused_node_thaws_it_so_its_restart_runs() {
        let control = Control::new(vec![1, 2, 3], None);
        let mut switches = BTreeMap::new();
        let mut gates = Vec::new();
        for id in [1, 2, 3] {
            let (pause, gate) = lockd::server::PauseSwitch::new();
            let (links, link_gate) = lockd::server::LinkFaultsSwitch::new();
            gates.push((gate, link_gate));
            switches.insert(id, (pause, links));
        }
        control.attach(switches);
        control.start_clocks();
        let nodes = SimNodes(control.clone());
        nodes.pause(1).unwrap();
        assert!(control.switch(1).unwrap().0.is_paused());
        assert_eq!(nodes.paused(), BTreeSet::from([1]));
        control.crash_by_point(&mut control.lock(), 1, "crash-inside-write", Duration::ZERO);
        assert!(
            !control.switch(1).unwrap().0.is_paused(),
            "the restarted node must not start with the dead process's closed gate"
        );
        assert!(nodes.paused().is_empty());
        let queued: Vec<String> = (control.lock().queue.iter())
            .map(|c| format!("{c:?}"))
            .collect();
        assert_eq!(
            queued,
            ["Hold(1)", "Release(1)", "Crash(1)"],
            "its links held, then released"
        );
    }
}
