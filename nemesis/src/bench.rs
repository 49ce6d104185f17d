//! Benchmarks of a lock service: acquire+release cycles per second with latency percentiles,
//! and the time from killing the leader until a lock is granted again.
//!
//! [`measure_cycles`] is generic over [`CycleClient`], so lockd's client plugs in beside
//! etcd's; [`etcd_cycles`] and [`etcd_failover`] run them against an [`EtcdCluster`].
//! Every loop here is bounded in time and in count, and reaching a count bound is reported.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::etcd::{Acquired, ClientOptions, EtcdCluster, EtcdError, EtcdLockClient, Wait};

/// The most cycles one client runs in one measurement (a bound, reported when reached).
pub const CYCLES_PER_CLIENT_MAX: u64 = 1_000_000;
/// The most probe attempts one probe client makes in one failover round.
const PROBE_ATTEMPTS_MAX: u64 = 100_000;
/// The pause after a failed cycle or probe, so that a dead node is not hammered.
const FAILURE_BACKOFF: Duration = Duration::from_millis(10);

/// A client that can run one acquire+release cycle.
pub trait CycleClient: Send + 'static {
    /// Try-acquires `key` for `lease_ms`, then releases it; `Err` says why either failed
    /// (a busy key is an error here: every client of a measurement has its own key).
    fn cycle(
        &mut self,
        key: &str,
        lease_ms: u64,
    ) -> impl Future<Output = Result<(), String>> + Send;
}

impl CycleClient for EtcdLockClient {
    async fn cycle(&mut self, key: &str, lease_ms: u64) -> Result<(), String> {
        match self.acquire(key, lease_ms, Wait::No).await {
            Ok(Acquired::Granted(grant)) => match self.release(key, grant.token).await {
                Ok(crate::etcd::Released::Released) => Ok(()),
                Ok(crate::etcd::Released::NotHolder) => Err("release: not holder".into()),
                Err(error) => Err(format!("release: {error}")),
            },
            Ok(Acquired::Busy) => Err("acquire: busy".into()),
            Err(error) => Err(format!("acquire: {error}")),
        }
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
pub async fn measure_cycles<C: CycleClient>(
    clients: Vec<C>,
    config: &CyclesConfig,
) -> CyclesReport {
    let started = Instant::now();
    let deadline = started + config.duration;
    let count = clients.len();
    let mut tasks = Vec::with_capacity(count);
    for (index, mut client) in clients.into_iter().enumerate() {
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
                match client.cycle(&key, lease_ms).await {
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

/// [`measure_cycles`] with `config.clients` etcd clients bound round-robin to the nodes.
pub async fn etcd_cycles(
    cluster: &EtcdCluster,
    config: &CyclesConfig,
) -> Result<CyclesReport, EtcdError> {
    let nodes = cluster.node_ids();
    let clients = (0..config.clients)
        .map(|index| cluster.client(nodes[index % nodes.len()], ClientOptions::default()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(measure_cycles(clients, config).await)
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
/// killed node is restarted after each round, and the cluster must serve before the next.
pub async fn etcd_failover(
    cluster: &mut EtcdCluster,
    config: &FailoverConfig,
) -> Result<FailoverReport, EtcdError> {
    let mut report = FailoverReport::default();
    for round in 0..config.rounds {
        cluster.wait_serving(config.round_timeout).await?;
        let Some(leader) = cluster.leader().await else {
            report
                .failed_rounds
                .push(format!("round {round}: no leader found"));
            continue;
        };
        let outcome = failover_round(cluster, config, round, leader).await;
        cluster.restart(leader)?;
        match outcome? {
            Ok(recovery) => report.recovery_ms.push(recovery.as_secs_f64() * 1000.0),
            Err(reason) => report
                .failed_rounds
                .push(format!("round {round}: {reason}")),
        }
    }
    cluster.wait_serving(config.round_timeout).await?;
    Ok(report)
}

/// One round: probes on the survivors, kill `leader`, wait for a grant invoked after it.
async fn failover_round(
    cluster: &mut EtcdCluster,
    config: &FailoverConfig,
    round: usize,
    leader: u64,
) -> Result<Result<Duration, String>, EtcdError> {
    let stop = Arc::new(AtomicBool::new(false));
    let (grants, mut granted) = tokio::sync::mpsc::unbounded_channel::<(Instant, Instant)>();
    let mut probes = Vec::new();
    for node in cluster
        .node_ids()
        .into_iter()
        .filter(|&node| node != leader)
    {
        let options = ClientOptions {
            call_timeout: config.call_timeout,
            ..ClientOptions::default()
        };
        let mut client = cluster.client(node, options)?;
        let (stop, grants, lease_ms) = (Arc::clone(&stop), grants.clone(), config.lease_ms);
        probes.push(tokio::spawn(async move {
            for attempt in 0..PROBE_ATTEMPTS_MAX {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let key = format!("failover-{round}-{node}-{attempt}");
                let invoked = Instant::now();
                match client.acquire(&key, lease_ms, Wait::No).await {
                    Ok(Acquired::Granted(grant)) => {
                        let _ = grants.send((invoked, Instant::now()));
                        let _ = client.release(&key, grant.token).await;
                    }
                    _ => tokio::time::sleep(FAILURE_BACKOFF).await,
                }
            }
        }));
    }
    tokio::time::sleep(config.settle).await;
    let killed_at = Instant::now();
    let killed = cluster.kill(leader);
    let outcome = match killed {
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
    let deadline = tokio::time::Instant::from_std(killed_at + timeout);
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

    struct CountingClient {
        fail_every: u64,
        calls: u64,
    }

    impl CycleClient for CountingClient {
        async fn cycle(&mut self, _key: &str, _lease_ms: u64) -> Result<(), String> {
            self.calls += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
            if self.calls % self.fail_every == 0 {
                Err(format!("call {}", self.calls))
            } else {
                Ok(())
            }
        }
    }

    #[tokio::test]
    async fn measure_cycles_counts_successes_and_failures_separately() {
        // Bench rule (issue 8): cycles/s counts completed cycles; failures are reported apart.
        let clients = vec![
            CountingClient {
                fail_every: 2,
                calls: 0,
            },
            CountingClient {
                fail_every: 1_000_000,
                calls: 0,
            },
        ];
        let config = CyclesConfig {
            clients: 2,
            duration: Duration::from_millis(200),
            lease_ms: 1000,
        };
        let report = measure_cycles(clients, &config).await;
        assert!(report.cycles > 10, "{report:?}");
        assert!(report.errors > 0, "{report:?}");
        assert_eq!(report.first_error.as_deref(), Some("call 2"));
        assert!(
            report.p50_ms >= 1.0 && report.p50_ms <= report.p99_ms,
            "{report:?}"
        );
        assert!(!report.bound_reached);
    }
}
