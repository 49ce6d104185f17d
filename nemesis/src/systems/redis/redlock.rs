//! Redlock as published (redis.io, "Distributed Locks with Redis"), over N independent
//! Redis instances:
//!
//! 1. The client takes the current time and a random value (20 seeded random bytes, hex).
//! 2. It sends `SET key value NX PX ttl` to every instance, each bounded by a request
//!    timeout much smaller than the TTL ([`RedlockOptions::request_timeout`]), so that an
//!    instance that is down or paused costs little. The page says the client may talk to
//!    the instances at once (multiplexing), which this client does.
//! 3. It holds the lock when a majority (N/2 + 1) answered `OK` and the validity time, the
//!    TTL minus the time the attempt took minus a drift allowance (1% of the TTL plus 2 ms,
//!    the page's numbers), is still positive.
//! 4. Otherwise it releases the key on **every** instance (also those that did not answer
//!    `OK`), waits a random (seeded) back-off and tries again while its wait lasts.
//! 5. Release is the compare-and-delete script on every instance: delete the key only when
//!    it still holds this client's value.
//!
//! Outcomes for the history (DESIGN's rules):
//! - acquire: granted -> ok (no token: Redlock issues none); not granted, and at most a
//!   minority of instances may still hold this client's value (every other one answered
//!   the release, or refused the connection: it is down, and restarts empty) -> fail
//!   `busy`; a majority may still hold it -> info `timeout`.
//! - release: a majority deleted the value -> ok; fewer did, and those that may have
//!   deleted it without saying so (a request sent, no reply) could make a majority -> info
//!   `timeout`; otherwise fail `not-holder`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use super::resp::{Connection, Reply};
use crate::NodeId;
use crate::rng::Rng;

/// The compare-and-delete script of the published release.
pub const UNLOCK_SCRIPT: &str = "if redis.call(\"get\",KEYS[1]) == ARGV[1] then return redis.call(\"del\",KEYS[1]) else return 0 end";
/// The drift allowance's fixed part, ms (the page adds 2 ms "for small TTLs").
pub const DRIFT_FIXED_MS: f64 = 2.0;
/// The drift allowance's part proportional to the TTL (the page's 1%).
pub const DRIFT_FACTOR: f64 = 0.01;
/// The most attempts of one acquire (a bound besides its wait).
pub const ATTEMPTS_MAX: u32 = 50;

/// The client's timing.
#[derive(Clone, Debug)]
pub struct RedlockOptions {
    /// Each instance's request timeout, ms: at least `low`, a tenth of the TTL, at most `high`.
    pub request_timeout_ms: (u64, u64),
    /// The random back-off between two attempts, ms (`low`, `high`).
    pub retry_delay_ms: (u64, u64),
}

impl Default for RedlockOptions {
    fn default() -> Self {
        // 50-150 ms: the page suggests 5-50 ms for a 10 s TTL; the harness's leases are
        // 0.4-1.5 s on a loaded 2-core machine, where 5 ms would time out healthy instances.
        RedlockOptions {
            request_timeout_ms: (50, 150),
            retry_delay_ms: (20, 100),
        }
    }
}

impl RedlockOptions {
    /// The request timeout for a TTL.
    pub fn request_timeout(&self, ttl_ms: u64) -> Duration {
        let (low, high) = self.request_timeout_ms;
        Duration::from_millis((ttl_ms / 10).clamp(low, high.max(low)))
    }
}

/// How an acquire ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Acquired {
    /// A majority holds this client's value, with this much validity left, ms.
    Granted {
        /// The validity time when the attempt ended.
        validity_ms: f64,
        /// How many instances said `OK`.
        locked: usize,
    },
    /// Not granted, and no majority can hold this client's value.
    Busy,
    /// Not granted, but a majority may still hold this client's value (its release did not
    /// reach them).
    Unknown,
}

/// How a release ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// A majority deleted this client's value.
    Released,
    /// Fewer than a majority can have deleted it.
    NotHolder,
    /// Unknown: the instances that did not answer could make a majority.
    Unknown,
}

/// What one instance said to one request.
#[derive(Debug)]
enum Answer {
    Reply(Reply),
    /// The connection was refused (the instance is down): the request certainly did not
    /// take effect.
    Refused,
    /// No reply (reset, timed out, garbled): the request may or may not have taken effect.
    Silent,
}

/// One Redlock client (one per client process): a connection per instance, the values of
/// the locks it holds, and its seeded random stream.
pub struct Redlock {
    instances: Vec<(NodeId, SocketAddr)>,
    connections: Vec<tokio::sync::Mutex<Option<Connection>>>,
    held: Mutex<HashMap<String, String>>,
    rng: Mutex<Rng>,
    options: RedlockOptions,
}

impl Redlock {
    /// A client of `instances`, its random values and back-offs drawn from `rng`.
    pub fn new(instances: Vec<(NodeId, SocketAddr)>, rng: Rng, options: RedlockOptions) -> Self {
        let connections = instances
            .iter()
            .map(|_| tokio::sync::Mutex::new(None))
            .collect();
        Redlock {
            instances,
            connections,
            held: Mutex::new(HashMap::new()),
            rng: Mutex::new(rng),
            options,
        }
    }

    /// N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.instances.len() / 2 + 1
    }

    fn random_value(&self) -> String {
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        (0..20).map(|_| format!("{:02x}", rng.below(256))).collect()
    }

    fn back_off(&self) -> Duration {
        let (low, high) = self.options.retry_delay_ms;
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        Duration::from_millis(rng.range(low, high.max(low)))
    }

    /// One request to instance `index`, within `timeout`. A connection that failed or whose
    /// reply is late is dropped (a late reply would answer the next request).
    async fn call(&self, index: usize, args: &[&[u8]], timeout: Duration) -> Answer {
        let mut slot = self.connections[index].lock().await;
        let addr = self.instances[index].1;
        let attempt = async {
            if slot.is_none() {
                match Connection::connect(addr).await {
                    Ok(connection) => *slot = Some(connection),
                    // Nothing was sent.
                    Err(_) => return Answer::Refused,
                }
            }
            match slot.as_mut().map(|c| c.call(args)) {
                Some(call) => match call.await {
                    Ok(reply) => Answer::Reply(reply),
                    Err(_) => Answer::Silent,
                },
                None => Answer::Refused,
            }
        };
        // A connect that does not finish in time sent nothing either, but a paused instance
        // accepts connections (the kernel does), so a timeout is counted as silent.
        let answer = tokio::time::timeout(timeout, attempt)
            .await
            .unwrap_or(Answer::Silent);
        if !matches!(answer, Answer::Reply(_)) {
            *slot = None;
        }
        answer
    }

    async fn on_all(&self, args: &[&[u8]], timeout: Duration) -> Vec<Answer> {
        join_all((0..self.instances.len()).map(|i| self.call(i, args, timeout))).await
    }

    /// Acquires `key` for `ttl_ms`, trying again until `wait_ms` has passed (0: once) or
    /// `deadline`.
    pub async fn acquire(
        &self,
        key: &str,
        ttl_ms: u64,
        wait_ms: u64,
        deadline: Instant,
    ) -> Acquired {
        let value = self.random_value();
        let give_up = (Instant::now() + Duration::from_millis(wait_ms)).min(deadline);
        let timeout = self.options.request_timeout(ttl_ms);
        let ttl = ttl_ms.to_string();
        for _ in 0..ATTEMPTS_MAX {
            let start = Instant::now();
            let args: [&[u8]; 6] = [
                b"SET",
                key.as_bytes(),
                value.as_bytes(),
                b"NX",
                b"PX",
                ttl.as_bytes(),
            ];
            let answers = self.on_all(&args, timeout).await;
            let locked = answers
                .iter()
                .filter(|a| matches!(a, Answer::Reply(Reply::Simple(s)) if s == "OK"))
                .count();
            let elapsed_ms = start.elapsed().as_secs_f64() * 1000.0;
            let drift_ms = ttl_ms as f64 * DRIFT_FACTOR + DRIFT_FIXED_MS;
            let validity_ms = ttl_ms as f64 - elapsed_ms - drift_ms;
            if locked >= self.quorum() && validity_ms > 0.0 {
                self.held
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.to_owned(), value);
                return Acquired::Granted {
                    validity_ms,
                    locked,
                };
            }
            // Not granted: release everywhere, as the page says, also where SET failed.
            let unlocked = self.unlock_all(key, &value, timeout).await;
            let silent = unlocked
                .iter()
                .filter(|a| matches!(a, Answer::Silent))
                .count();
            if silent >= self.quorum() {
                return Acquired::Unknown;
            }
            let pause = self.back_off();
            if Instant::now() + pause >= give_up {
                return Acquired::Busy;
            }
            tokio::time::sleep(pause).await;
        }
        Acquired::Busy
    }

    async fn unlock_all(&self, key: &str, value: &str, timeout: Duration) -> Vec<Answer> {
        let args: [&[u8]; 5] = [
            b"EVAL",
            UNLOCK_SCRIPT.as_bytes(),
            b"1",
            key.as_bytes(),
            value.as_bytes(),
        ];
        self.on_all(&args, timeout).await
    }

    /// Releases `key` if this client holds it (compare-and-delete on every instance).
    pub async fn release(&self, key: &str, ttl_hint_ms: u64) -> Released {
        let value = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        let Some(value) = value else {
            return Released::NotHolder;
        };
        let answers = self
            .unlock_all(key, &value, self.options.request_timeout(ttl_hint_ms))
            .await;
        let deleted = answers
            .iter()
            .filter(|a| matches!(a, Answer::Reply(Reply::Integer(1))))
            .count();
        let silent = answers
            .iter()
            .filter(|a| matches!(a, Answer::Silent))
            .count();
        release_outcome(deleted, silent, self.quorum())
    }

    /// Every instance answers `PING` with `PONG` within `timeout`: which ones did.
    pub async fn ping(&self, timeout: Duration) -> Vec<NodeId> {
        let answers = self.on_all(&[b"PING"], timeout).await;
        answers
            .iter()
            .zip(&self.instances)
            .filter(|(a, _)| matches!(a, Answer::Reply(Reply::Simple(s)) if s == "PONG"))
            .map(|(_, (id, _))| *id)
            .collect()
    }
}

/// The outcome of a release that deleted the value on `deleted` instances and heard nothing
/// from `silent` ones (see the module docs).
pub fn release_outcome(deleted: usize, silent: usize, quorum: usize) -> Released {
    if deleted >= quorum {
        Released::Released
    } else if deleted + silent >= quorum {
        Released::Unknown
    } else {
        Released::NotHolder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_is_ok_on_a_majority_and_unknown_only_when_the_silent_could_make_one() {
        // 5 instances, quorum 3.
        assert_eq!(release_outcome(3, 0, 3), Released::Released);
        assert_eq!(release_outcome(2, 1, 3), Released::Unknown);
        assert_eq!(release_outcome(2, 0, 3), Released::NotHolder);
        assert_eq!(release_outcome(0, 2, 3), Released::NotHolder);
        assert_eq!(release_outcome(0, 3, 3), Released::Unknown);
        // 1 instance, quorum 1: the single-instance SET NX PX lock.
        assert_eq!(release_outcome(1, 0, 1), Released::Released);
        assert_eq!(release_outcome(0, 1, 1), Released::Unknown);
        assert_eq!(release_outcome(0, 0, 1), Released::NotHolder);
    }

    #[test]
    fn request_timeouts_are_a_tenth_of_the_ttl_within_bounds() {
        let o = RedlockOptions::default();
        assert_eq!(o.request_timeout(400), Duration::from_millis(50));
        assert_eq!(o.request_timeout(1000), Duration::from_millis(100));
        assert_eq!(o.request_timeout(5000), Duration::from_millis(150));
    }
}
