//! The cluster soak of issue 27 (`locksmith bench --soak`, lockd only): a million distinct
//! client sessions and 100,000 held keys against a cluster of real `lockd` processes, with
//! every node's memory watched and a follower that must catch up at the end.
//!
//! # The run
//!
//! 1. Start the nodes ([`BenchCluster`], fsync on) and find the leader; SIGKILL one
//!    follower (by its own process group, as [`crate::cluster::Cluster::kill`] does). The
//!    other two keep a majority.
//! 2. Run the load ([`load`]): `workers` tasks take and hold the keys, spread over holder
//!    sessions, then register sessions until the target, touching the holders so that the
//!    session table's cap never evicts them. Every [`SAMPLE_INTERVAL`], read each running
//!    node's `VmRSS` and `VmHWM` ([`watch`]) and show progress. The load stops at the
//!    targets, at `time_limit`, or when a node exits on its own. lockd renews no lease, so
//!    the time limit must end before the held keys' lease runs out ([`SoakConfig::validate`]).
//! 3. Read the leader's count of held locks, then restart the killed follower and poll the
//!    nodes' status until its last applied index reaches the leader's commit index, within
//!    `catch_up_bound`. No load runs meanwhile: the figure is the time to install the
//!    leader's snapshot and the entries after it.
//! 4. Read every node's `VmHWM` once more, the sizes of its snapshot and log segments, and
//!    scan its log for the lines that say a frame or record limit was hit ([`watch`]).
//!
//! [`SoakReport::failures`] lists every bound that did not hold; the command exits 0 only
//! when it is empty. Every loop here is bounded in time, and the workers' calls in count.

pub mod load;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use lockd::client::Client;
use lockd::rpc::NodeStatus;
use tokio::time::Instant;

use super::BenchCluster;
use crate::progress::Progress;
use crate::systems::lockd::CONTROL_CLIENT_ID;
use crate::{Error, NodeId};
use load::{LoadConfig, LoadFigures, Shared};
use watch::{DiskSizes, LimitHits, RssTracker};

/// How often the nodes' memory is read and progress shown during the load.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(500);
/// How often the nodes' status is polled during the catch-up.
const CATCH_UP_POLL: Duration = Duration::from_millis(100);
/// How long the workers get to finish their current call after a stop.
const STOP_GRACE: Duration = Duration::from_secs(30);
/// How long the cluster may take to have a leader (at the start, and before the restart).
const LEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// The most workers: each holds one client connection, and a node serves at most
/// `lockd::server::CLIENT_CONNECTIONS_MAX`.
pub const WORKERS_MAX: usize = 512;

/// What a soak runs, and the bounds it must hold.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// Distinct sessions to register, the holders' included.
    pub sessions: u64,
    /// Distinct keys to take and hold.
    pub keys: u64,
    /// Keys per holder session.
    pub keys_per_session: u64,
    /// The lease of every held key, ms.
    pub hold_lease_ms: u64,
    /// Concurrent workers, one connection each.
    pub workers: usize,
    /// The load must reach its targets within this long (it stops there).
    pub time_limit: Duration,
    /// Every node's peak RSS must stay at or below this, MiB.
    pub rss_bound_mib: u64,
    /// The restarted follower must catch up within this long.
    pub catch_up_bound: Duration,
}

impl SoakConfig {
    /// What the workers run (the touch interval from the nodes' session cap).
    pub fn load(&self) -> LoadConfig {
        let holders = self.keys.div_ceil(self.keys_per_session.max(1));
        let sessions_max = lockd::lock::SessionLimits::DEFAULT.sessions_max as u64;
        LoadConfig {
            sessions: self.sessions,
            keys: self.keys,
            keys_per_session: self.keys_per_session,
            hold_lease_ms: self.hold_lease_ms,
            workers: self.workers,
            touch_every: LoadConfig::touch_every_for(sessions_max, holders),
        }
    }

    /// Checks the targets against the bounds a lockd node runs with (its defaults: the
    /// soak starts nodes without overrides), so that no request is refused by design.
    pub fn validate(&self, nodes: u64) -> Result<(), Error> {
        let limits = lockd::raft::Config::new(1, vec![1]);
        let sessions_max = limits.session_limits.sessions_max as u64;
        let holders = self.load().holders();
        let bad = |reason: String| Err(Error::BadArgument(reason));
        if nodes < 3 {
            return bad(format!(
                "--nodes {nodes}: the soak kills a follower, so it needs at least 3"
            ));
        }
        if !(1..=limits.keys_per_session_max).contains(&self.keys_per_session) {
            return bad(format!(
                "--keys-per-session {}: lockd allows 1 to {} (keys_per_session_max)",
                self.keys_per_session, limits.keys_per_session_max
            ));
        }
        if self.keys > limits.locks_max {
            return bad(format!(
                "--keys {}: lockd holds at most {} locks (locks_max)",
                self.keys, limits.locks_max
            ));
        }
        if holders > sessions_max / 2 || holders > self.sessions {
            return bad(format!(
                "{holders} holder sessions (--keys / --keys-per-session) must be at most \
                 --sessions ({}) and half of lockd's sessions_max ({sessions_max})",
                self.sessions
            ));
        }
        if !(1..=limits.lease_ms_max).contains(&self.hold_lease_ms) {
            return bad(format!(
                "--hold-lease-ms {}: lockd allows 1 to {} (lease_ms_max)",
                self.hold_lease_ms, limits.lease_ms_max
            ));
        }
        let load_ms_max = (self.time_limit + STOP_GRACE).as_millis() as u64;
        if load_ms_max >= self.hold_lease_ms {
            return bad(format!(
                "--time-limit-s {} (plus {} s to stop) must end before the held keys' lease \
                 of {} ms runs out: lockd renews no lease, so a key taken at the start is held \
                 only that long",
                self.time_limit.as_secs(),
                STOP_GRACE.as_secs(),
                self.hold_lease_ms
            ));
        }
        if !(1..=WORKERS_MAX).contains(&self.workers) {
            return bad(format!("--workers {}: 1 to {WORKERS_MAX}", self.workers));
        }
        Ok(())
    }
}

/// One node's figures at the end of a soak.
#[derive(Clone, Debug)]
pub struct NodeFigures {
    /// The node.
    pub node: NodeId,
    /// What it was: "leader", "follower", or "killed, restarted" (at the start and the end).
    pub part: String,
    /// Its peak RSS over all its processes, KiB (`None`: never read).
    pub peak_rss_kib: Option<u64>,
    /// Its status at the end (`None`: no answer).
    pub status: Option<NodeStatus>,
    /// Its snapshot and log segment sizes.
    pub disk: DiskSizes,
    /// The limit lines of its log (`Err`: the log could not be read, and why).
    pub log: Result<LimitHits, String>,
}

/// How the restarted follower caught up.
#[derive(Clone, Debug)]
pub struct CatchUp {
    /// The follower.
    pub node: NodeId,
    /// The leader's commit index when the follower was restarted.
    pub leader_commit_at_restart: u64,
    /// Time from the restart until the follower's last applied index reached the leader's
    /// commit index, or why it did not within the bound.
    pub result: Result<Duration, String>,
}

/// Everything a soak measured.
#[derive(Clone, Debug)]
pub struct SoakReport {
    /// The counters of the load.
    pub load: LoadFigures,
    /// Distinct session ids among the answers (each is a log index).
    pub sessions_distinct: u64,
    /// Wall time of the load, s.
    pub load_s: f64,
    /// Wall time until every holder had its keys, s (`None`: never).
    pub hold_s: Option<f64>,
    /// The load was stopped by the time limit before its targets.
    pub time_limit_reached: bool,
    /// Locks held in the leader's table at the end of the load (`None`: no answer).
    pub leader_locks_held: Option<usize>,
    /// Nodes that exited on their own, one line each.
    pub exits: Vec<String>,
    /// The killed follower's catch-up (`None`: it never got that far).
    pub catch_up: Option<CatchUp>,
    /// Per node, in id order.
    pub nodes: Vec<NodeFigures>,
}

impl SoakReport {
    /// Registered sessions per second over the whole load (the hold phase included).
    pub fn sessions_per_s(&self) -> f64 {
        if self.load_s > 0.0 {
            self.load.registered as f64 / self.load_s
        } else {
            0.0
        }
    }

    /// Every bound that did not hold, one line each; empty when the soak passed.
    pub fn failures(&self, config: &SoakConfig) -> Vec<String> {
        let mut failures = Vec::new();
        if self.sessions_distinct < config.sessions {
            failures.push(format!(
                "{} distinct sessions registered, fewer than {}",
                self.sessions_distinct, config.sessions
            ));
        }
        match self.leader_locks_held {
            Some(held) if held as u64 >= config.keys => {}
            Some(held) => failures.push(format!(
                "the leader's table holds {held} locks, fewer than {}",
                config.keys
            )),
            None => failures.push("the leader did not say how many locks it holds".into()),
        }
        if self.load.holders_expired > 0 {
            failures.push(format!(
                "{} holder sessions expired or were evicted",
                self.load.holders_expired
            ));
        }
        if self.time_limit_reached {
            failures.push(format!(
                "the time limit ({} s) was reached before the targets",
                config.time_limit.as_secs()
            ));
        }
        failures.extend(self.exits.iter().map(|e| format!("a node exited: {e}")));
        match &self.catch_up {
            Some(CatchUp {
                result: Ok(took), ..
            }) if *took <= config.catch_up_bound => {}
            Some(CatchUp { node, result, .. }) => failures.push(format!(
                "n{node} did not catch up within {} s: {}",
                config.catch_up_bound.as_secs(),
                match result {
                    Ok(took) => format!("it took {:.1} s", took.as_secs_f64()),
                    Err(why) => why.clone(),
                }
            )),
            None => failures.push("the killed follower was never restarted".into()),
        }
        failures.extend(self.node_failures(config));
        failures
    }

    fn node_failures(&self, config: &SoakConfig) -> Vec<String> {
        let mut failures = Vec::new();
        let patterns = watch::limit_patterns();
        let record_max = lockd::storage::RECORD_BYTES_MAX as u64;
        for node in &self.nodes {
            let id = node.node;
            match node.peak_rss_kib {
                Some(kib) if kib <= config.rss_bound_mib * 1024 => {}
                Some(kib) => failures.push(format!(
                    "n{id}'s peak RSS {} MiB is over the bound {} MiB",
                    kib / 1024,
                    config.rss_bound_mib
                )),
                None => failures.push(format!("n{id}'s RSS was never read")),
            }
            match &node.log {
                Ok(hits) if !hits.fails(&patterns) => {}
                Ok(hits) => {
                    for (index, (count, first)) in &hits.hits {
                        if patterns[*index].fails {
                            let what = patterns[*index].what;
                            failures.push(format!("n{id}'s log: {what} x{count}: {first}"));
                        }
                    }
                }
                Err(why) => failures.push(format!("n{id}'s log: {why}")),
            }
            if node.disk.snapshot_bytes > record_max || node.disk.segment_bytes_max > record_max {
                failures.push(format!(
                    "n{id}: a file past the record limit: {:?}",
                    node.disk
                ));
            }
        }
        // State machine safety as the status shows it: nodes that applied the same prefix
        // hold the same number of locks.
        let statuses: Vec<(NodeId, &NodeStatus)> = (self.nodes.iter())
            .filter_map(|n| Some((n.node, n.status.as_ref()?)))
            .collect();
        for (a, first) in &statuses {
            for (b, second) in statuses.iter().filter(|(b, _)| b > a) {
                let same_prefix = first.raft.last_applied == second.raft.last_applied;
                if same_prefix && first.raft.locks_held != second.raft.locks_held {
                    failures.push(format!(
                        "n{a} and n{b} applied up to {} and hold {} and {} locks",
                        first.raft.last_applied, first.raft.locks_held, second.raft.locks_held
                    ));
                }
            }
        }
        failures
    }
}

/// Runs the soak on `bench` (a lockd cluster that has a leader).
pub async fn soak(bench: &BenchCluster, config: &SoakConfig) -> Result<SoakReport, Error> {
    config.validate(bench.layout.nodes.len() as u64)?;
    let control = Client::new(bench.layout.client_addrs(), CONTROL_CLIENT_ID);
    let leader = bench.wait_for_leader(LEADER_TIMEOUT).await?;
    let Some(&follower) = bench.layout.nodes.iter().find(|n| **n != leader) else {
        return Err(Error::Cluster("no follower to kill".into()));
    };
    let mut rss = RssTracker::default();
    sample_all(bench, &mut rss);
    bench.cluster.kill(follower)?;
    eprintln!("soak: n{leader} leads; n{follower} killed (SIGKILL), to be restarted at the end");
    let mut driven = drive(bench, config, leader, &mut rss).await;
    let leader_locks_held = match bench.wait_for_leader(LEADER_TIMEOUT).await {
        Ok(now) => status(&control, now).await.map(|s| s.raft.locks_held),
        Err(_) => None,
    };
    let catch_up = if driven.exits.is_empty() {
        Some(catch_up(bench, &control, follower, config.catch_up_bound, &mut rss).await?)
    } else {
        None
    };
    sample_all(bench, &mut rss);
    let exited = bench.exited();
    driven
        .exits
        .extend(exited.iter().map(|(n, s)| format!("n{n} ({s})")));
    let final_leader = bench.leader().await;
    let mut nodes = Vec::new();
    for &node in &bench.layout.nodes {
        let part = if node == follower {
            "killed, restarted"
        } else if Some(node) == final_leader {
            "leader"
        } else {
            "follower"
        };
        nodes.push(node_figures(bench, &control, node, part, &rss).await);
    }
    Ok(SoakReport {
        load: driven.figures,
        sessions_distinct: driven.sessions_distinct,
        load_s: driven.load_s,
        hold_s: driven.hold_s,
        time_limit_reached: driven.time_limit_reached,
        leader_locks_held,
        exits: driven.exits,
        catch_up,
        nodes,
    })
}

/// What the load phase left.
struct Driven {
    figures: LoadFigures,
    sessions_distinct: u64,
    load_s: f64,
    hold_s: Option<f64>,
    time_limit_reached: bool,
    exits: Vec<String>,
}

/// Runs the workers to their targets, the time limit or a node's exit, sampling memory and
/// showing progress.
async fn drive(
    bench: &BenchCluster,
    config: &SoakConfig,
    leader: NodeId,
    rss: &mut RssTracker,
) -> Driven {
    let load = config.load();
    let holders = load.holders();
    let shared = Shared::new(load);
    let workers = spawn_workers(bench, config.workers, leader, &shared);
    let progress = Progress::new("soak", Some(config.sessions));
    let started = Instant::now();
    let deadline = started + config.time_limit;
    let (mut hold_s, mut time_limit_reached, mut exits) = (None, false, Vec::new());
    let mut last = (started, 0u64);
    while !workers.iter().all(|w| w.is_finished()) {
        tokio::time::sleep(SAMPLE_INTERVAL).await;
        sample_all(bench, rss);
        let figures = shared.figures();
        if hold_s.is_none() && figures.holders_done >= holders {
            hold_s = Some(started.elapsed().as_secs_f64());
        }
        let rate = (figures.registered - last.1) as f64 / last.0.elapsed().as_secs_f64();
        last = (Instant::now(), figures.registered);
        progress.set(
            figures.registered,
            &progress_message(&figures, config, rate, bench, rss),
        );
        exits.extend(bench.exited().iter().map(|(n, s)| format!("n{n} ({s})")));
        if !exits.is_empty() || (Instant::now() >= deadline && !time_limit_reached) {
            time_limit_reached |= exits.is_empty();
            shared.stop();
        }
        if Instant::now() >= deadline + STOP_GRACE {
            break;
        }
    }
    let load_s = started.elapsed().as_secs_f64();
    let sessions_distinct = distinct_sessions(workers).await;
    let figures = shared.figures();
    progress.finish(&format!(
        "{} sessions, {} keys held, {:.1} s",
        figures.registered, figures.keys_held, load_s
    ));
    Driven {
        figures,
        sessions_distinct,
        load_s,
        hold_s,
        time_limit_reached,
        exits,
    }
}

/// Starts `count` workers, each first connected to `leader`.
fn spawn_workers(
    bench: &BenchCluster,
    count: usize,
    leader: NodeId,
    shared: &Arc<Shared>,
) -> Vec<tokio::task::JoinHandle<Vec<lockd::lock::SessionId>>> {
    let addrs = bench.layout.client_addrs();
    let leader_index = bench.layout.nodes.iter().position(|n| *n == leader);
    (0..count)
        .map(|index| {
            let (shared, addrs) = (Arc::clone(shared), addrs.clone());
            let first = leader_index.unwrap_or(0);
            tokio::spawn(load::worker(shared, addrs, first, index as u64))
        })
        .collect()
}

/// Ends the workers (a worker still running after the grace is aborted, and its sessions
/// are not counted) and counts the distinct session ids they were answered.
async fn distinct_sessions(
    workers: Vec<tokio::task::JoinHandle<Vec<lockd::lock::SessionId>>>,
) -> u64 {
    let mut sessions = Vec::new();
    for worker in workers {
        worker.abort_handle().abort();
        if let Ok(ids) = worker.await {
            sessions.extend(ids);
        }
    }
    sessions.sort_unstable();
    sessions.dedup();
    sessions.len() as u64
}

fn progress_message(
    figures: &LoadFigures,
    config: &SoakConfig,
    rate: f64,
    bench: &BenchCluster,
    rss: &RssTracker,
) -> String {
    let memory: Vec<String> = bench
        .layout
        .nodes
        .iter()
        .map(|n| match (bench.cluster.pid(*n), rss.node(*n)) {
            (Some(_), Some(node)) => format!("n{n} {}", node.last_kib / 1024),
            _ => format!("n{n} -"),
        })
        .collect();
    format!(
        "sessions, {rate:.0}/s; keys held {}/{}; RSS MiB {}; errors {}",
        figures.keys_held,
        config.keys,
        memory.join(" "),
        figures.errors
    )
}

/// Reads the memory of every running node.
fn sample_all(bench: &BenchCluster, rss: &mut RssTracker) {
    for &node in &bench.layout.nodes {
        if let Some(pid) = bench.cluster.pid(node) {
            rss.sample(node, pid);
        }
    }
}

/// Node `node`'s status (`None` when it does not answer).
async fn status(control: &Client, node: NodeId) -> Option<NodeStatus> {
    control.status(node.checked_sub(1)? as usize).await.ok()
}

/// Restarts `follower` and polls until its last applied index reaches the leader's commit
/// index, at most `bound`.
async fn catch_up(
    bench: &BenchCluster,
    control: &Client,
    follower: NodeId,
    bound: Duration,
    rss: &mut RssTracker,
) -> Result<CatchUp, Error> {
    let leader = bench.wait_for_leader(LEADER_TIMEOUT).await?;
    let leader_commit_at_restart = status(control, leader)
        .await
        .map_or(0, |s| s.raft.commit_index);
    bench.restart(follower)?;
    let restarted = Instant::now();
    eprintln!(
        "soak: n{follower} restarted; the leader n{leader} has committed {leader_commit_at_restart}"
    );
    let mut last = String::from("no status yet");
    while restarted.elapsed() <= bound {
        sample_all(bench, rss);
        let leader = bench.leader().await;
        let commit = match leader {
            Some(leader) => status(control, leader).await.map(|s| s.raft.commit_index),
            None => None,
        };
        let applied = status(control, follower).await.map(|s| s.raft.last_applied);
        if let (Some(commit), Some(applied)) = (commit, applied)
            && applied >= commit
            && commit >= leader_commit_at_restart
        {
            return Ok(CatchUp {
                node: follower,
                leader_commit_at_restart,
                result: Ok(restarted.elapsed()),
            });
        }
        last = format!("last seen: applied {applied:?}, the leader's commit index {commit:?}");
        tokio::time::sleep(CATCH_UP_POLL).await;
    }
    Ok(CatchUp {
        node: follower,
        leader_commit_at_restart,
        result: Err(format!("not within {} s ({last})", bound.as_secs())),
    })
}

async fn node_figures(
    bench: &BenchCluster,
    control: &Client,
    node: NodeId,
    part: &str,
    rss: &RssTracker,
) -> NodeFigures {
    let log_path = bench.layout.log_dir.join(format!("n{node}.log"));
    let log = watch::scan_log(&log_path, &watch::limit_patterns())
        .map_err(|e| format!("{}: {e}", log_path.display()));
    NodeFigures {
        node,
        part: part.to_owned(),
        peak_rss_kib: rss.node(node).map(|n| n.peak_kib),
        status: status(control, node).await,
        disk: watch::disk_sizes(&bench.layout.data_dir[&node]),
        log,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SoakConfig {
        SoakConfig {
            sessions: 1_000_000,
            keys: 100_000,
            keys_per_session: 100,
            hold_lease_ms: 600_000,
            workers: 64,
            time_limit: Duration::from_secs(540),
            rss_bound_mib: 1024,
            catch_up_bound: Duration::from_secs(60),
        }
    }

    #[test]
    fn the_issue_targets_fit_lockd_bounds() {
        // Issue 27's soak: 1,000,000 sessions and 100,000 held keys, within lockd's
        // locks_max, keys_per_session_max, lease_ms_max and half its sessions_max.
        assert!(config().validate(3).is_ok());
        assert_eq!(config().load().holders(), 1_000);
        assert_eq!(config().load().touch_every, 12);
    }

    #[test]
    fn targets_past_lockd_bounds_are_refused_before_a_node_starts() {
        // STYLE 13: a bound that the nodes would refuse is said up front, not met mid-run.
        let refused = |c: SoakConfig, nodes| c.validate(nodes).is_err();
        assert!(
            refused(config(), 2),
            "a killed follower of 2 leaves no majority"
        );
        let mut c = config();
        c.keys = 300_000;
        assert!(refused(c, 3), "past locks_max");
        let mut c = config();
        c.keys_per_session = 1;
        assert!(refused(c, 3), "100,000 holders: past half of sessions_max");
        let mut c = config();
        c.hold_lease_ms = 600_001;
        assert!(refused(c, 3), "past lease_ms_max");
        let mut c = config();
        c.sessions = 10;
        assert!(refused(c, 3), "fewer sessions than holders");
        let mut c = config();
        c.time_limit = Duration::from_secs(600);
        assert!(
            refused(c, 3),
            "the first keys' leases would run out before the load ends"
        );
    }
}
