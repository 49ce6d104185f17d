//! Throughput and latency of acquire+release cycles: [`bench_cycles`] against a lockd
//! cluster, and [`bench_with`], the same bounded loop around any system's cycle (the etcd
//! comparison of `locksmith bench` plugs its own client in there).
//!
//! Each of `concurrency` workers owns one client and one key (`bench-<worker>`), so the
//! workers never contend: the figure is the service's cycle rate, not the lock's fairness.
//! A cycle is one try-acquire and one release of that key; its latency is measured from
//! the acquire's start to the release's answer.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::client::Client;

/// Each worker keeps at most this many latency samples (later cycles still count).
pub const SAMPLES_PER_WORKER_MAX: usize = 1 << 20;

/// The lease of a benchmark grant: long enough never to expire within a cycle.
const BENCH_LEASE_MS: u64 = 30_000;

/// One operation's deadline within a cycle.
const BENCH_OP_DEADLINE: Duration = Duration::from_secs(5);

/// What a benchmark run measured.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct BenchResult {
    /// Cycles that completed with both operations succeeding.
    pub cycles: u64,
    /// Cycles in which an operation failed (their latency is not sampled).
    pub errors: u64,
    /// The first error seen, if any.
    pub first_error: Option<String>,
    /// How long the run took.
    pub elapsed: Duration,
    /// Successful cycles per second.
    pub cycles_per_s: f64,
    /// Median cycle latency.
    pub p50: Duration,
    /// 99th-percentile cycle latency.
    pub p99: Duration,
    /// Slowest cycle.
    pub max: Duration,
    /// How many workers ran.
    pub concurrency: usize,
}

impl std::fmt::Display for BenchResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cycles in {:.2} s with {} workers: {:.0} cycles/s, p50 {:.2} ms, p99 {:.2} ms, \
             max {:.2} ms, {} errors",
            self.cycles,
            self.elapsed.as_secs_f64(),
            self.concurrency,
            self.cycles_per_s,
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            self.max.as_secs_f64() * 1e3,
            self.errors
        )?;
        if let Some(error) = &self.first_error {
            write!(f, " (first: {error})")?;
        }
        Ok(())
    }
}

/// Runs acquire+release cycles against the lockd cluster whose i-th client address is node
/// i+1, with `concurrency` workers, for `duration`.
pub async fn bench_cycles(
    cluster: Vec<SocketAddr>,
    duration: Duration,
    concurrency: usize,
) -> BenchResult {
    // Client ids far from the harness's small ones, one per worker.
    const CLIENT_ID_BASE: u64 = 0xbe4c_0000_0000;
    let clients: Vec<std::sync::Arc<Client>> = (0..concurrency)
        .map(|worker| {
            std::sync::Arc::new(Client::new(cluster.clone(), CLIENT_ID_BASE + worker as u64))
        })
        .collect();
    bench_with(duration, concurrency, move |worker| {
        let client = clients[worker].clone();
        async move {
            let key = format!("bench-{worker}");
            let token = client
                .acquire(&key, BENCH_LEASE_MS, 0, Instant::now() + BENCH_OP_DEADLINE)
                .await
                .map_err(|e| format!("acquire {key}: {e}"))?;
            client
                .release(&key, token, Instant::now() + BENCH_OP_DEADLINE)
                .await
                .map_err(|e| format!("release {key} {token}: {e}"))
        }
    })
    .await
}

/// Runs `cycle(worker)` in a loop on `concurrency` workers for `duration`; a cycle in flight
/// when time is up finishes and counts.
///
/// # Panics
///
/// If `concurrency` is 0.
pub async fn bench_with<F, Fut>(duration: Duration, concurrency: usize, cycle: F) -> BenchResult
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    assert!(concurrency > 0, "a benchmark needs at least one worker");
    let cycle = std::sync::Arc::new(cycle);
    let start = Instant::now();
    let end = start + duration;
    let workers: Vec<_> = (0..concurrency)
        .map(|worker| {
            let cycle = cycle.clone();
            tokio::spawn(async move {
                let mut samples = Vec::new();
                let (mut cycles, mut errors, mut first_error) = (0u64, 0u64, None);
                while Instant::now() < end {
                    let began = Instant::now();
                    match cycle(worker).await {
                        Ok(()) => {
                            cycles += 1;
                            if samples.len() < SAMPLES_PER_WORKER_MAX {
                                samples.push(began.elapsed());
                            }
                        }
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert(e);
                        }
                    }
                }
                (samples, cycles, errors, first_error)
            })
        })
        .collect();
    let mut samples = Vec::new();
    let (mut cycles, mut errors, mut first_error) = (0, 0, None);
    for worker in workers {
        match worker.await {
            Ok((mine, c, e, first)) => {
                samples.extend(mine);
                cycles += c;
                errors += e;
                if first_error.is_none() {
                    first_error = first;
                }
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(format!("a worker failed: {e}"));
            }
        }
    }
    let elapsed = start.elapsed();
    samples.sort_unstable();
    BenchResult {
        cycles,
        errors,
        first_error,
        elapsed,
        cycles_per_s: cycles as f64 / elapsed.as_secs_f64(),
        p50: percentile(&samples, 50),
        p99: percentile(&samples, 99),
        max: samples.last().copied().unwrap_or_default(),
        concurrency,
    }
}

/// The `p`-th percentile of sorted `samples` (nearest rank); zero when there are none.
fn percentile(samples: &[Duration], p: usize) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    let rank = (samples.len() * p).div_ceil(100).max(1);
    samples[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        // Nearest-rank definition: the smallest sample with at least p% at or below it.
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&samples, 50), Duration::from_millis(50));
        assert_eq!(percentile(&samples, 99), Duration::from_millis(99));
        assert_eq!(percentile(&samples[..1], 99), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }

    #[tokio::test]
    async fn bench_with_counts_cycles_and_errors_of_every_worker() {
        // A benchmark reports what happened, errors included (STYLE.md 13: limits reported).
        let result = bench_with(Duration::from_millis(50), 3, |worker| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            if worker == 2 {
                Err("worker 2 always fails".to_owned())
            } else {
                Ok(())
            }
        })
        .await;
        assert!(result.cycles >= 2, "{result}");
        assert!(result.errors >= 1, "{result}");
        assert_eq!(result.first_error.as_deref(), Some("worker 2 always fails"));
        assert!(result.p50 >= Duration::from_millis(1), "{result}");
        assert!(result.p99 >= result.p50);
    }
}
