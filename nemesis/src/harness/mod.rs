//! The harness, one program in two worlds: the workload ([`crate::harness::workload`], following
//! [`crate::harness::schedule`]), the recorder, the fault families ([`crate::faults`]) and their
//! [`driver`], the final heal, the recovery phase and the phantom-lock probe
//! ([`phases`]). It reaches the world only through the seams of [`World`] ([`world`]):
//! the nodes, the net, the system's clients and clock control, and tokio's clock.
//!
//! `locksmith test` ([`crate::run`]) gives it real processes on loopback (or SSH hosts);
//! `locksmith sim` ([`crate::sim`]) gives it turmoil hosts on a simulated network, clock and
//! disk. Both then check the history through the one pipeline ([`crate::store::pipeline`]) and
//! write the same store ([`crate::store`]).

pub mod driver;
pub mod phases;
pub mod recorder;
pub mod schedule;
pub mod swarm;
pub mod workload;
pub mod world;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use checker::{CheckResult, Verdict};

use std::time::Duration;

use tokio::time::Instant;

use crate::cluster::{Layout, NodeStats};
use crate::faults::FaultKind;
use crate::harness::driver::STATUS_TIMEOUT_MS;
use crate::harness::recorder::Recorder;
use crate::harness::schedule::{FaultPlanConfig, Planned};
use crate::harness::workload::WorkloadKind;
use crate::net::NetKind;
use crate::systems::{System, leader_of};
use crate::{Error, NodeId};

pub use driver::{FaultCounts, FaultDriver};
pub use phases::{PhaseOutcome, run_phases};
pub use world::{Nodes, World};

/// Everything a run takes, in either world (`locksmith test`'s options; a simulated seed's
/// options are the same data, see `sim::SimCase::options`).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TestOptions {
    /// Number of nodes.
    pub nodes: u64,
    /// Length of the fault phase, seconds.
    pub time_s: u64,
    /// Enabled fault kinds.
    pub nemesis: Vec<FaultKind>,
    /// Client slots.
    pub concurrency: u64,
    /// Lock keys.
    pub keys: u32,
    /// The seed.
    pub seed: u64,
    /// `lockd --bug NAME`.
    pub bug: Option<String>,
    /// Partition backend (real processes only).
    pub net: NetKind,
    /// Store directory.
    pub store: PathBuf,
    /// Fenced or the unfenced control.
    pub workload: WorkloadKind,
    /// Length of the recovery phase's bound, seconds.
    pub recovery_s: u64,
    /// Shortest and longest pause between two ops of one client, ms (the request rate).
    pub think_ms: (u64, u64),
    /// Percent of grants held past their lease (see `WorkloadConfig::overhold_percent`).
    pub overhold_percent: u64,
    /// Shortest and longest lease a client asks for, ms.
    pub lease_ms: (u64, u64),
    /// The fault plan's mean time between episodes, ms; 0: a twelfth of the fault phase,
    /// within 1-5 s.
    pub fault_interval_ms: u64,
    /// Print a progress line.
    pub progress: bool,
    /// Nodes on remote hosts over SSH, one per host (`--hosts`); `None`: local processes.
    #[serde(skip)]
    pub hosts: Option<crate::hosts::HostsOptions>,
    /// Planned fault ops (indexes into the plan) left out (the simulator's shrinker).
    #[serde(default)]
    pub drop_faults: BTreeSet<usize>,
    /// What the fault plan aims at beyond its draw ([`schedule::Focus`]): set by the system
    /// (redis: Redlock's failures), not a flag of its own.
    #[serde(default)]
    pub focus: schedule::Focus,
    /// The simulator's fault points in lockd's code (`lockd::buggify!`): on for this seed or
    /// not. Real processes never take them (`locksmith test` ignores it).
    #[serde(default)]
    pub buggify: bool,
}

/// The default percent of grants held past their lease: the holder writes after its lease
/// ran out, which the fenced resource must refuse once a newer token was accepted.
pub const OVERHOLD_PERCENT_DEFAULT: u64 = 12;

impl Default for TestOptions {
    fn default() -> Self {
        TestOptions {
            nodes: 5,
            time_s: 60,
            nemesis: FaultKind::ALL.to_vec(),
            concurrency: 10,
            keys: 4,
            seed: 0,
            bug: None,
            net: NetKind::Proxy,
            store: PathBuf::from("store"),
            workload: WorkloadKind::Fenced,
            recovery_s: 20,
            think_ms: (10, 100),
            overhold_percent: OVERHOLD_PERCENT_DEFAULT,
            lease_ms: schedule::LEASE_MS_DEFAULT,
            fault_interval_ms: 0,
            progress: true,
            hosts: None,
            drop_faults: BTreeSet::new(),
            focus: schedule::Focus::Draw,
            buggify: false,
        }
    }
}

impl TestOptions {
    /// The test's name: `<system>-<faults>[-<workload>][-bug-<name>]`.
    pub fn test_name(&self, system: &str) -> String {
        let faults: Vec<&str> = self.nemesis.iter().map(|k| k.name()).collect();
        let mut name = format!(
            "{system}-{}",
            if faults.is_empty() {
                "none".to_owned()
            } else {
                faults.join("+")
            }
        );
        if self.workload == WorkloadKind::Unfenced {
            name.push_str("-unfenced");
        }
        if let Some(bug) = &self.bug {
            name.push_str(&format!("-bug-{bug}"));
        }
        name
    }

    /// The run's shape in words: `N nodes, C clients, K keys`.
    pub fn shape(&self) -> String {
        let (nodes, clients, keys) = (self.nodes, self.concurrency, self.keys);
        format!("{nodes} nodes, {clients} clients, {keys} keys")
    }

    /// The fault plan of these options, whole (plan.txt shows it so).
    pub fn plan(&self) -> Vec<Planned> {
        schedule::fault_plan(&FaultPlanConfig {
            seed: self.seed,
            kinds: self.nemesis.clone(),
            duration_ms: self.time_s * 1000,
            interval_ms: self.fault_interval_ms,
            focus: self.focus,
        })
    }

    /// The plan the run performs: [`TestOptions::plan`] without `drop_faults`.
    pub fn active_plan(&self) -> Vec<Planned> {
        self.plan()
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !self.drop_faults.contains(i))
            .map(|(_, p)| p)
            .collect()
    }

    /// The command that tries these options on real processes.
    pub fn test_command(&self) -> String {
        let mut line = format!(
            "locksmith test --seed {}{}",
            self.seed,
            self.differing_flags(&TestOptions::default(), "concurrency")
        );
        if self.nemesis.contains(&FaultKind::Netem) {
            // netem shapes interfaces of their own: namespace hosts on one machine.
            line.push_str(" --net netns");
        }
        if self.buggify {
            line.push_str(" (without the simulator's fault points, which only it has)");
        }
        line
    }

    /// The command-line flags of the options that differ from `defaults` (the client count
    /// under the flag `concurrency_flag`), each with a leading space.
    pub fn differing_flags(&self, defaults: &TestOptions, concurrency_flag: &str) -> String {
        let kinds = |k: &[FaultKind]| {
            let names: Vec<&str> = k.iter().map(|k| k.name()).collect();
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(",")
            }
        };
        let dropped = |d: &BTreeSet<usize>| {
            let list: Vec<String> = d.iter().map(|i| i.to_string()).collect();
            list.join(",")
        };
        let range = |(low, high): (u64, u64)| format!("{low}-{high}");
        let flags = [
            ("nodes", self.nodes.to_string(), defaults.nodes.to_string()),
            (
                "time-s",
                self.time_s.to_string(),
                defaults.time_s.to_string(),
            ),
            (
                concurrency_flag,
                self.concurrency.to_string(),
                defaults.concurrency.to_string(),
            ),
            ("keys", self.keys.to_string(), defaults.keys.to_string()),
            ("nemesis", kinds(&self.nemesis), kinds(&defaults.nemesis)),
            (
                "bug",
                self.bug.clone().unwrap_or_default(),
                defaults.bug.clone().unwrap_or_default(),
            ),
            (
                "drop-faults",
                dropped(&self.drop_faults),
                dropped(&defaults.drop_faults),
            ),
            ("think-ms", range(self.think_ms), range(defaults.think_ms)),
            ("lease-ms", range(self.lease_ms), range(defaults.lease_ms)),
            (
                "overhold-percent",
                self.overhold_percent.to_string(),
                defaults.overhold_percent.to_string(),
            ),
            (
                "fault-interval-ms",
                self.fault_interval_ms.to_string(),
                defaults.fault_interval_ms.to_string(),
            ),
        ];
        flags
            .into_iter()
            .filter(|(_, value, default)| value != default)
            .map(|(name, value, _)| format!(" --{name} {value}"))
            .collect()
    }
}

/// What the harness did in one run, in either world: the phases, the faults and the nodes.
pub struct Execution {
    /// The workload's and the recovery's outcome.
    pub phase: PhaseOutcome,
    /// What the faults did.
    pub counts: FaultCounts,
    /// Nodes that stopped on their own, each with the tail of its log.
    pub exited: Vec<String>,
    /// Per node: starts, kills, pauses, exits, uptime.
    pub node_stats: Vec<NodeStats>,
}

impl Execution {
    /// The execution of a run that never got to its phases (the cluster did not come up, or
    /// the world stopped): nothing counted.
    pub fn unfinished(options: &TestOptions) -> Execution {
        Execution {
            phase: PhaseOutcome {
                counters: Default::default(),
                recovered_slots: Vec::new(),
                recovery_ms: 0,
                probe_keys: 0,
                lagging: Vec::new(),
            },
            counts: FaultCounts::default(),
            exited: Vec::new(),
            node_stats: (1..=options.nodes)
                .map(|node| NodeStats {
                    node,
                    ..NodeStats::default()
                })
                .collect(),
        }
    }
}

/// Runs the workload and the faults of `options` on `world` to the end of the phantom probe,
/// recording into `recorder` (the history's clock starts with it).
pub async fn execute(options: &TestOptions, world: World, recorder: Arc<Recorder>) -> Execution {
    let driver = Arc::new(FaultDriver::new(
        options.seed,
        world.clone(),
        recorder.clone(),
        options.concurrency,
    ));
    let phase = run_phases(options, &world, recorder, driver.clone()).await;
    driver.reap_exited();
    Execution {
        phase,
        counts: driver.counts(),
        exited: driver.exited(),
        node_stats: world.nodes.stats(),
    }
}

/// How long the cluster has to show a leader, and every node to answer, before the run
/// gives up (exit 2).
pub const START_TIMEOUT_MS: u64 = 20_000;

/// Waits until some node says it leads and every node answers a status call; the leader.
/// For a system that elects no leader it knows of (`exec`), only the answers are waited for,
/// and the leader is `None`.
///
/// When it gives up, the error names every node that stopped on its own meanwhile, with how
/// (its exit or panic): a node that failed at start wrote nothing else anywhere.
pub async fn await_cluster(world: &World) -> Result<Option<NodeId>, Error> {
    let waited = async {
        let leader = if world.system.elects_leader() {
            Some(wait_for_leader(world.system.as_ref(), &world.layout).await?)
        } else {
            None
        };
        all_nodes_answer(world.system.as_ref(), &world.layout, world.nodes.as_ref()).await?;
        Ok(leader)
    };
    waited
        .await
        .map_err(|e| naming_exits(e, world.nodes.reap_exited()))
}

/// `error`, with the nodes that stopped on their own (`exits`) named after it.
fn naming_exits(error: Error, exits: Vec<(NodeId, String)>) -> Error {
    if exits.is_empty() {
        return error;
    }
    let exits: Vec<String> = (exits.iter())
        .map(|(id, how)| format!("n{id} {how}"))
        .collect();
    let error = match error {
        Error::Cluster(reason) => reason,
        other => other.to_string(),
    };
    Error::Cluster(format!(
        "{error}; meanwhile {} node(s) stopped on their own: {}",
        exits.len(),
        exits.join("; ")
    ))
}

/// Waits until some node says it leads, or gives up.
async fn wait_for_leader(system: &dyn System, layout: &Layout) -> Result<NodeId, Error> {
    let deadline = Instant::now() + Duration::from_millis(START_TIMEOUT_MS);
    while Instant::now() < deadline {
        let views = tokio::time::timeout(
            Duration::from_millis(STATUS_TIMEOUT_MS),
            system.status(layout),
        )
        .await
        .unwrap_or_default();
        if let Some(leader) = leader_of(&views) {
            return Ok(leader);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(Error::Cluster(format!(
        "no leader within {START_TIMEOUT_MS} ms (see node-logs/)"
    )))
}

/// Every node must answer a status call before the workload starts; a node that does not
/// (it exited, or never bound its ports) makes the run fail with the tail of its log.
async fn all_nodes_answer(
    system: &dyn System,
    layout: &Layout,
    nodes: &dyn Nodes,
) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_millis(START_TIMEOUT_MS);
    loop {
        let views = tokio::time::timeout(
            Duration::from_millis(STATUS_TIMEOUT_MS),
            system.status(layout),
        )
        .await
        .unwrap_or_default();
        let silent: Vec<NodeId> = layout
            .nodes
            .iter()
            .copied()
            .filter(|n| !views.iter().any(|v| v.node == *n))
            .collect();
        let Some(first) = silent.first() else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            let crashed = nodes.reap_exited();
            return Err(Error::Cluster(format!(
                "node(s) {} answered no status call within {START_TIMEOUT_MS} ms{}; the tail of \
                 node-logs/n{first}.log:\n{}",
                silent
                    .iter()
                    .map(|n| format!("n{n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if crashed.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (exited: {})",
                        crashed
                            .iter()
                            .map(|(n, status)| format!("n{n} {status}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
                nodes.log_tail(*first, 8)
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The run's own checks beside the history's, in every world: node health, and with
/// `traces` (a run dir whose nodes wrote traces) the trace replay through the model.
pub fn run_checks(
    execution: &Execution,
    world_error: Option<&str>,
    traces: Option<&std::path::Path>,
) -> Vec<CheckResult> {
    let mut checks = vec![node_health(
        &execution.exited,
        &execution.phase.lagging,
        world_error,
    )];
    checks.extend(traces.map(crate::replay::check_run));
    checks
}

/// Node health, an ordinary check in every world: a node that stopped on its own (it
/// exited, or panicked) makes the run invalid, with the tail of its log, and so does a node
/// that did not catch up with the cluster once every fault was undone
/// (`phases::caught_up`); a world that could not finish the run makes it unknown.
pub fn node_health(
    exited: &[String],
    lagging: &[String],
    world_error: Option<&str>,
) -> CheckResult {
    let name = history::CheckName::NodeHealth;
    if !exited.is_empty() {
        return CheckResult::invalid(
            name,
            format!(
                "a node stopped on its own (no fault killed it): {}",
                exited.join("; ")
            ),
            Vec::new(),
        );
    }
    if !lagging.is_empty() && world_error.is_none() {
        return CheckResult::invalid(
            name,
            format!(
                "a node did not catch up with the cluster after the heal: {}",
                lagging.join("; ")
            ),
            Vec::new(),
        );
    }
    match world_error {
        Some(error) => CheckResult::new(
            name,
            Verdict::unknown(format!("the run could not finish: {error}")),
        ),
        None => CheckResult::new(name, Verdict::Valid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_that_did_not_catch_up_makes_node_health_invalid() {
        let lagging = vec!["n3 stayed at commit index 40 (role follower, term 5)".to_owned()];
        let health = node_health(&[], &lagging, None);
        assert_eq!(health.verdict, Verdict::Invalid, "{health:?}");
        let text = health.explanation.unwrap_or_default();
        assert!(
            text.contains("did not catch up") && text.contains("n3 stayed"),
            "{text}"
        );
        assert_eq!(node_health(&[], &[], None).verdict, Verdict::Valid);
        // A world that could not finish the run leaves nodes behind for its own reason.
        let cut = node_health(&[], &lagging, Some("the world stopped"));
        assert!(matches!(cut.verdict, Verdict::Unknown { .. }), "{cut:?}");
    }

    #[test]
    fn a_cluster_that_never_came_up_names_the_nodes_that_stopped_meanwhile() {
        // A node that fails at its start writes nothing else anywhere (a `locksmith sim`
        // seed with a storage mistake said only "no leader within 20000 ms (see node-logs/)",
        // with every node log empty).
        let waited = Error::Cluster("no leader within 20000 ms (see node-logs/)".into());
        let exits = vec![
            (
                1,
                "exited at 0 ms: storage: /data/meta at byte 0: a short file header".into(),
            ),
            (3, "panicked at 5 ms: boom".into()),
        ];
        let named = naming_exits(waited, exits).to_string();
        for part in [
            "no leader within 20000 ms",
            "2 node(s) stopped on their own",
            "n1 exited at 0 ms: storage: /data/meta",
            "n3 panicked at 5 ms: boom",
        ] {
            assert!(named.contains(part), "{part:?} in {named:?}");
        }
        assert_eq!(named.matches("cluster: ").count(), 1, "{named}");
        let alone = naming_exits(Error::Cluster("no leader".into()), Vec::new());
        assert_eq!(
            alone.to_string(),
            "cluster: no leader",
            "nothing added without exits"
        );
    }
}
