//! Benchmarks of a lock service: acquire+release cycles per second with latency percentiles,
//! and the time from killing the leader until a lock is granted again.
//!
//! Everything goes through the harness's [`System`] trait, so lockd, etcd and redis are
//! measured by the same code: [`BenchCluster::start`] starts the system's nodes on loopback (no fault
//! net: peers dial each other directly), [`measure_cycles`] drives concurrent clients on
//! distinct keys, [`failover`] kills the leader while probes loop on acquire.
//! Every loop here is bounded in time and in count, and reaching a count bound is reported.
//!
//! [`soak`] is the cluster soak of issue 27 (`locksmith bench --soak`, lockd only): a
//! million sessions and 100,000 held keys, each node's peak RSS, a killed follower's
//! catch-up, and the frame and record limits.

pub mod soak;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::cluster::{Cluster, Layout};
use crate::systems::{LockClient, Outcome, System, leader_of};
use crate::{Error, NodeId};

/// The most cycles one client runs in one measurement (a bound, reported when reached).
pub const CYCLES_PER_CLIENT_MAX: u64 = 1_000_000;
/// The most probe attempts one probe client makes in one failover round.
const PROBE_ATTEMPTS_MAX: u64 = 100_000;
/// The pause after a failed cycle or probe, so that a dead node is not hammered.
const FAILURE_BACKOFF: Duration = Duration::from_millis(10);
/// The deadline of each acquire or release of a cycle.
const CYCLE_OP_DEADLINE: Duration = Duration::from_secs(5);
/// The client id of the warm-up cycles of a system without a leader to wait for; far above
/// the measured clients' ids.
const WARM_UP_CLIENT_ID: u64 = 1 << 30;
/// How long one status round may take.
const STATUS_DEADLINE: Duration = Duration::from_millis(1500);

/// A system's nodes started for a benchmark, in a temporary directory.
pub struct BenchCluster {
    system: Arc<dyn System>,
    layout: Layout,
    cluster: Cluster,
    // Dropped after `cluster` (fields drop in order), so the nodes die before their dirs go.
    _dir: tempfile::TempDir,
}

impl BenchCluster {
    /// Starts `nodes` nodes of `system` and waits (up to `timeout`) for a leader.
    pub async fn start(
        system: Arc<dyn System>,
        nodes: u64,
        timeout: Duration,
    ) -> Result<Self, Error> {
        let dir = tempfile::Builder::new()
            .prefix("locksmith-bench-")
            .tempdir()
            .map_err(|e| Error::Io(format!("bench dir: {e}")))?;
        let layout = Layout::new(nodes, dir.path())?;
        // No net between the nodes: each dials its peers' own addresses.
        let mut dial = BTreeMap::new();
        for source in &layout.nodes {
            for target in layout.nodes.iter().filter(|t| *t != source) {
                dial.insert((*source, *target), layout.peer[target]);
            }
        }
        let launcher = system.launcher(&layout, dial)?;
        let cluster = Cluster::start(launcher, &layout.nodes, &layout.log_dir)?;
        let bench = Self {
            system,
            layout,
            cluster,
            _dir: dir,
        };
        if bench.system.elects_leader() {
            bench.wait_for_leader(timeout).await?;
        } else {
            bench.wait_for_a_cycle(timeout).await?;
        }
        Ok(bench)
    }

    /// For a system whose leader the harness cannot ask (`exec`): waits until one
    /// acquire+release cycle succeeds, on a client of its own.
    async fn wait_for_a_cycle(&self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        let client = self.client(WARM_UP_CLIENT_ID);
        loop {
            let last = match cycle(client.as_ref(), "warm-up", 1_000).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "{}: no acquire+release cycle succeeded within {} ms (last: {last})",
                    self.name(),
                    timeout.as_millis()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Nodes that exited on their own since the last call, with their exit status (the
    /// bench kills only the leader, and restarts it at once).
    pub fn exited(&self) -> Vec<(NodeId, std::process::ExitStatus)> {
        self.cluster.reap_exited()
    }

    /// Starts a node that is down (killed, or exited on its own) again.
    pub fn restart(&self, node: NodeId) -> Result<(), Error> {
        self.cluster.restart(node)
    }

    /// Keeps the directory (data dirs and `node-logs/`) after the bench ends; returns it.
    pub fn keep_dir(&mut self) -> std::path::PathBuf {
        let path = self._dir.path().to_path_buf();
        let placeholder = tempfile::Builder::new()
            .prefix("locksmith-bench-kept-")
            .tempdir();
        if let Ok(placeholder) = placeholder {
            let kept = std::mem::replace(&mut self._dir, placeholder);
            let _ = kept.keep();
        }
        path
    }

    /// The nodes' addresses and directories (what a system's harness-only controls, such as
    /// `set_clock`, take).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The system's name.
    pub fn name(&self) -> &'static str {
        self.system.name()
    }

    /// The leader, as the nodes' status says (`None` when no node claims it).
    pub async fn leader(&self) -> Option<NodeId> {
        let status = self.system.status(&self.layout);
        let views = tokio::time::timeout(STATUS_DEADLINE, status)
            .await
            .unwrap_or_default();
        leader_of(&views)
    }

    /// Waits until some node says it leads.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<NodeId, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(leader) = self.leader().await {
                return Ok(leader);
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "{}: no leader within {} ms",
                    self.name(),
                    timeout.as_millis()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The client of client process `client_id` (for etcd: bound to node
    /// `nodes[client_id % n]`).
    pub fn client(&self, client_id: u64) -> Box<dyn LockClient> {
        self.system.client(&self.layout, client_id)
    }
}

/// One acquire (try) + release of `key`; `Err` says which failed and how.
async fn cycle(client: &dyn LockClient, key: &str, lease_ms: u64) -> Result<(), String> {
    let acquired = client
        .acquire(key, lease_ms, 0, Instant::now() + CYCLE_OP_DEADLINE)
        .await;
    // A grant without a token (Redlock, a tokenless exec adapter) is released by its key
    // alone, as the workload does.
    let token = match acquired {
        Outcome::Ok { token, .. } => token.unwrap_or(crate::harness::workload::NO_TOKEN),
        other => return Err(format!("acquire: {other:?}")),
    };
    match client
        .release(key, token, Instant::now() + CYCLE_OP_DEADLINE)
        .await
    {
        Outcome::Ok { .. } => Ok(()),
        other => Err(format!("release: {other:?}")),
    }
}

/// What a cycles measurement runs.
#[derive(Clone, Debug)]
pub struct CyclesConfig {
    /// Concurrent clients, each on its own key.
    pub clients: usize,
    /// How long to run.
    pub duration: Duration,
    /// The lease of every acquire.
    pub lease_ms: u64,
}

/// The result of a cycles measurement.
#[derive(Clone, Debug)]
pub struct CyclesReport {
    /// Concurrent clients.
    pub clients: usize,
    /// Wall time of the measurement, in seconds.
    pub elapsed_s: f64,
    /// Completed cycles.
    pub cycles: u64,
    /// Failed cycles.
    pub errors: u64,
    /// The first failure, when any.
    pub first_error: Option<String>,
    /// Cycle latency percentiles, in ms (0 when no cycle completed).
    pub p50_ms: f64,
    /// 99th percentile, in ms.
    pub p99_ms: f64,
    /// Slowest cycle, in ms.
    pub max_ms: f64,
    /// True when some client stopped at [`CYCLES_PER_CLIENT_MAX`] before the time was up.
    pub bound_reached: bool,
}

impl CyclesReport {
    /// Completed cycles per second.
    pub fn cycles_per_s(&self) -> f64 {
        if self.elapsed_s > 0.0 {
            self.cycles as f64 / self.elapsed_s
        } else {
            0.0
        }
    }
}

/// Runs `clients` concurrently, client `i` cycling on key `bench-i`, for the configured time.
pub async fn measure_cycles(
    clients: Vec<Box<dyn LockClient>>,
    config: &CyclesConfig,
) -> CyclesReport {
    let started = Instant::now();
    let deadline = started + config.duration;
    let count = clients.len();
    let mut tasks = Vec::with_capacity(count);
    for (index, client) in clients.into_iter().enumerate() {
        let lease_ms = config.lease_ms;
        tasks.push(tokio::spawn(async move {
            let key = format!("bench-{index}");
            let mut latencies_us = Vec::new();
            let mut errors = 0u64;
            let mut first_error = None;
            let mut attempts = 0u64;
            while Instant::now() < deadline && attempts < CYCLES_PER_CLIENT_MAX {
                attempts += 1;
                let begun = Instant::now();
                match cycle(client.as_ref(), &key, lease_ms).await {
                    Ok(()) => latencies_us.push(begun.elapsed().as_micros() as u64),
                    Err(error) => {
                        errors += 1;
                        first_error.get_or_insert(error);
                        tokio::time::sleep(FAILURE_BACKOFF).await;
                    }
                }
            }
            (
                latencies_us,
                errors,
                first_error,
                attempts >= CYCLES_PER_CLIENT_MAX,
            )
        }));
    }
    let mut latencies_us = Vec::new();
    let mut report = CyclesReport {
        clients: count,
        elapsed_s: 0.0,
        cycles: 0,
        errors: 0,
        first_error: None,
        p50_ms: 0.0,
        p99_ms: 0.0,
        max_ms: 0.0,
        bound_reached: false,
    };
    for task in tasks {
        match task.await {
            Ok((latencies, errors, first_error, bound)) => {
                latencies_us.extend(latencies);
                report.errors += errors;
                if report.first_error.is_none() {
                    report.first_error = first_error;
                }
                report.bound_reached |= bound;
            }
            Err(error) => {
                report.errors += 1;
                report
                    .first_error
                    .get_or_insert(format!("client task: {error}"));
            }
        }
    }
    report.elapsed_s = started.elapsed().as_secs_f64();
    latencies_us.sort_unstable();
    report.cycles = latencies_us.len() as u64;
    let ms = |us: Option<u64>| us.map_or(0.0, |us| us as f64 / 1000.0);
    report.p50_ms = ms(percentile(&latencies_us, 0.50));
    report.p99_ms = ms(percentile(&latencies_us, 0.99));
    report.max_ms = ms(latencies_us.last().copied());
    report
}

/// The nearest-rank percentile `p` (0 < p <= 1) of sorted values; `None` when empty.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    assert!(p > 0.0 && p <= 1.0, "percentile {p} is outside (0, 1]");
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// [`measure_cycles`] with `config.clients` clients of the bench cluster (ids 0, 1, ...).
pub async fn cycles(bench: &BenchCluster, config: &CyclesConfig) -> CyclesReport {
    let clients = (0..config.clients as u64)
        .map(|id| bench.client(id))
        .collect();
    measure_cycles(clients, config).await
}

/// What a failover measurement runs.
#[derive(Clone, Debug)]
pub struct FailoverConfig {
    /// How many times to kill the leader.
    pub rounds: usize,
    /// The lease of every probe acquire.
    pub lease_ms: u64,
    /// The deadline of each probe call (short, so that a probe bound to a dying node
    /// gives up quickly).
    pub call_timeout: Duration,
    /// How long the probes run before the kill.
    pub settle: Duration,
    /// How long a round may wait for a grant after the kill (and for the cluster to serve).
    pub round_timeout: Duration,
}

impl Default for FailoverConfig {
    fn default() -> Self {
        Self {
            rounds: 3,
            lease_ms: 2000,
            call_timeout: Duration::from_millis(500),
            settle: Duration::from_millis(1000),
            round_timeout: Duration::from_secs(20),
        }
    }
}

/// The result of a failover measurement.
#[derive(Clone, Debug, Default)]
pub struct FailoverReport {
    /// Per successful round: ms from the leader's kill to the first grant of an acquire
    /// invoked after the kill.
    pub recovery_ms: Vec<f64>,
    /// Per failed round, why.
    pub failed_rounds: Vec<String>,
}

impl FailoverReport {
    /// The median recovery, in ms (the lower middle for an even count); `None` when no
    /// round succeeded.
    pub fn median_ms(&self) -> Option<f64> {
        let mut sorted = self.recovery_ms.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.get(sorted.len().saturating_sub(1) / 2).copied()
    }
}

/// Kills the leader `config.rounds` times while one probe client per surviving node loops
/// on try-acquire of fresh keys, and measures how long until a lock is granted again. The
/// killed node is restarted after each round, and a leader must be back before the next.
pub async fn failover(
    bench: &BenchCluster,
    config: &FailoverConfig,
) -> Result<FailoverReport, Error> {
    let mut report = FailoverReport::default();
    for round in 0..config.rounds {
        let leader = match bench.wait_for_leader(config.round_timeout).await {
            Ok(leader) => leader,
            Err(error) => {
                report.failed_rounds.push(format!("round {round}: {error}"));
                continue;
            }
        };
        // Let the restarted node of the previous round catch up before it may be killed.
        tokio::time::sleep(config.settle).await;
        let outcome = failover_round(bench, config, round, leader).await;
        bench.cluster.restart(leader)?;
        match outcome? {
            Ok(recovery) => report.recovery_ms.push(recovery.as_secs_f64() * 1000.0),
            Err(reason) => report
                .failed_rounds
                .push(format!("round {round}: {reason}")),
        }
    }
    if let Err(error) = bench.wait_for_leader(config.round_timeout).await {
        report
            .failed_rounds
            .push(format!("after the last round: {error}"));
    }
    Ok(report)
}

/// One round: probes on the survivors, kill `leader`, wait for a grant invoked after it.
async fn failover_round(
    bench: &BenchCluster,
    config: &FailoverConfig,
    round: usize,
    leader: NodeId,
) -> Result<Result<Duration, String>, Error> {
    let stop = Arc::new(AtomicBool::new(false));
    let (grants, mut granted) = tokio::sync::mpsc::unbounded_channel::<(Instant, Instant)>();
    let nodes = &bench.layout.nodes;
    let mut probes = Vec::new();
    for (index, &node) in nodes.iter().enumerate() {
        if node == leader {
            continue;
        }
        // Client ids that map to this node (etcd binds id % n) and are fresh every round.
        let id = (nodes.len() * (1000 + round) + index) as u64;
        let client = bench.client(id);
        let (stop, grants) = (Arc::clone(&stop), grants.clone());
        let (lease_ms, call_timeout) = (config.lease_ms, config.call_timeout);
        probes.push(tokio::spawn(async move {
            for attempt in 0..PROBE_ATTEMPTS_MAX {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let key = format!("failover-{round}-{node}-{attempt}");
                let invoked = Instant::now();
                let outcome = client
                    .acquire(&key, lease_ms, 0, invoked + call_timeout)
                    .await;
                if let Outcome::Ok {
                    token: Some(token), ..
                } = outcome
                {
                    let _ = grants.send((invoked, Instant::now()));
                    let _ = client
                        .release(&key, token, Instant::now() + call_timeout)
                        .await;
                } else {
                    tokio::time::sleep(FAILURE_BACKOFF).await;
                }
            }
        }));
    }
    tokio::time::sleep(config.settle).await;
    let killed_at = Instant::now();
    let outcome = match bench.cluster.kill(leader) {
        Err(error) => Err(error),
        Ok(()) => Ok(first_grant_after(&mut granted, killed_at, config.round_timeout).await),
    };
    stop.store(true, Ordering::Relaxed);
    for probe in probes {
        probe.abort();
    }
    outcome
}

async fn first_grant_after(
    granted: &mut tokio::sync::mpsc::UnboundedReceiver<(Instant, Instant)>,
    killed_at: Instant,
    timeout: Duration,
) -> Result<Duration, String> {
    let deadline = killed_at + timeout;
    loop {
        match tokio::time::timeout_at(deadline, granted.recv()).await {
            Err(_) => {
                return Err(format!(
                    "no grant within {} ms of the kill",
                    timeout.as_millis()
                ));
            }
            Ok(None) => return Err("every probe stopped before a grant".into()),
            Ok(Some((invoked, completed))) if invoked >= killed_at => {
                return Ok(completed - killed_at);
            }
            Ok(Some(_)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        // Nearest-rank definition: the smallest value with at least p of the data at or below.
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.50), Some(50));
        assert_eq!(percentile(&values, 0.99), Some(99));
        assert_eq!(percentile(&values, 1.0), Some(100));
        assert_eq!(percentile(&[7], 0.99), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn failover_median_takes_the_lower_middle() {
        // Bench rule (issue 8): failover is reported as the median of the rounds.
        let report = FailoverReport {
            recovery_ms: vec![2100.0, 1500.0, 1600.0, 900.0],
            failed_rounds: Vec::new(),
        };
        assert_eq!(report.median_ms(), Some(1500.0));
        assert_eq!(FailoverReport::default().median_ms(), None);
    }

    /// A fake system client: every cycle takes about 1 ms; the `fail_every`-th acquire fails.
    struct CountingClient {
        fail_every: u64,
        calls: std::sync::atomic::AtomicU64,
    }

    impl CountingClient {
        fn boxed(fail_every: u64) -> Box<dyn LockClient> {
            Box::new(CountingClient {
                fail_every,
                calls: std::sync::atomic::AtomicU64::new(0),
            })
        }
    }

    impl LockClient for CountingClient {
        fn acquire<'a>(
            &'a self,
            _key: &'a str,
            _lease_ms: u64,
            _wait_ms: u64,
            _deadline: Instant,
        ) -> futures::future::BoxFuture<'a, Outcome> {
            Box::pin(async move {
                let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
                if call % self.fail_every == 0 {
                    Outcome::Info(history::ErrorWord::Timeout)
                } else {
                    Outcome::Ok {
                        token: Some(call),
                        node: None,
                    }
                }
            })
        }

        fn release<'a>(
            &'a self,
            _key: &'a str,
            _token: u64,
            _deadline: Instant,
        ) -> futures::future::BoxFuture<'a, Outcome> {
            Box::pin(async {
                Outcome::Ok {
                    token: None,
                    node: None,
                }
            })
        }
    }

    #[tokio::test]
    async fn measure_cycles_counts_successes_and_failures_separately() {
        // Bench rule (issue 8): cycles/s counts completed cycles; failures are reported apart.
        let clients = vec![CountingClient::boxed(2), CountingClient::boxed(1_000_000)];
        let config = CyclesConfig {
            clients: 2,
            duration: Duration::from_millis(200),
            lease_ms: 1000,
        };
        let report = measure_cycles(clients, &config).await;
        assert!(report.cycles > 10, "{report:?}");
        assert!(report.errors > 0, "{report:?}");
        assert_eq!(
            report.first_error.as_deref(),
            Some("acquire: Info(Timeout)")
        );
        assert!(
            report.p50_ms >= 1.0 && report.p50_ms <= report.p99_ms,
            "{report:?}"
        );
        assert!(!report.bound_reached);
    }
}
