//! The soak's clients: `workers` tasks that speak lockd's RPC themselves (one connection
//! each to the leader, no [`lockd::client::Client`] per session), first taking and holding
//! the keys, then registering sessions until the target, keeping the holders' sessions alive
//! as they go.
//!
//! # Holders and the session table
//!
//! A held key must belong to a live session, and the table keeps at most
//! `SessionLimits::sessions_max` sessions: a registration at the cap evicts the least
//! recently active one. So the keys are spread over `keys / keys_per_session` holder
//! sessions, registered first, and every [`LoadConfig::touch_every`]-th registration ticket
//! also touches one holder, in turn, with a request that changes nothing (a release of
//! [`TOUCH_KEY`], which no one holds: `NotHolder`). A request marks its session active at
//! the committed clock, so a holder is never the least recently active for long. A touch
//! answered `SessionExpired` means a holder was evicted or expired after all: it is
//! counted, and the soak fails on it.
//!
//! # Retries
//!
//! Each call goes to the node the worker believes leads, follows `NotLeader` hints, and
//! reconnects after a broken connection, at most [`CALL_ATTEMPTS_MAX`] attempts. A retried
//! acquire keeps its origin, so the table's dedupe answers it with its own grant; `Busy` for
//! a holder's own key can only mean an earlier attempt of it was granted (no one else asks
//! for these keys), so it counts as held. The leader's own count of held locks, read at the
//! end, is the figure the soak checks.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockd::lock::{Origin, SessionId};
use lockd::raft::Response;
use lockd::rpc::LockServiceClient;

/// The key every touch releases; no one acquires it.
pub const TOUCH_KEY: &str = "soak-touch";
/// At most this many attempts per call (each a connect or an RPC).
pub const CALL_ATTEMPTS_MAX: u32 = 64;
/// The deadline of one RPC, and the `timeout_ms` the node is given: long, so that a node
/// under load does not give up on a grant and release it as a phantom lock.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The deadline of one connection attempt.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// The pause after an attempt that found no leader or no connection.
const BACKOFF: Duration = Duration::from_millis(20);
/// At most this many tries of one holder's registration or one of its acquires.
const TRIES_MAX: u32 = 5;
/// How many times each holder is touched, at least, within the registrations that would
/// evict it (see the module doc).
pub const TOUCHES_PER_WINDOW: u64 = 4;

/// What the workers run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Sessions to register in all, the holders' included.
    pub sessions: u64,
    /// Keys to take and hold.
    pub keys: u64,
    /// Keys per holder session.
    pub keys_per_session: u64,
    /// The lease of every held key, ms.
    pub hold_lease_ms: u64,
    /// Concurrent workers.
    pub workers: usize,
    /// Every this many registration tickets, one holder is touched.
    pub touch_every: u64,
}

impl LoadConfig {
    /// Holder sessions: `keys / keys_per_session`, rounded up.
    pub fn holders(&self) -> u64 {
        self.keys.div_ceil(self.keys_per_session.max(1))
    }

    /// The touch interval that touches each holder [`TOUCHES_PER_WINDOW`] times within the
    /// `sessions_max - holders` registrations that would evict it.
    pub fn touch_every_for(sessions_max: u64, holders: u64) -> u64 {
        let window = sessions_max.saturating_sub(holders);
        (window / (TOUCHES_PER_WINDOW * holders.max(1))).max(1)
    }

    /// The keys of holder `holder`: `soak-` and an 11-digit number, 16 bytes each (the table
    /// bench's `--key-len`).
    fn keys_of(&self, holder: u64) -> impl Iterator<Item = String> {
        let first = holder * self.keys_per_session;
        let end = (first + self.keys_per_session).min(self.keys);
        (first..end).map(|n| format!("soak-{n:011}"))
    }
}

/// One holder session: its id once registered (0 before) and its next request number.
#[derive(Debug, Default)]
struct Holder {
    session: AtomicU64,
    next_request: AtomicU64,
    /// Its keys are taken: touches may begin.
    ready: AtomicBool,
}

impl Holder {
    fn origin(&self) -> Origin {
        Origin {
            session: self.session.load(Ordering::Relaxed),
            request: self.next_request.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// What the workers share: their counters, the holders, the stop flag.
#[derive(Debug)]
pub struct Shared {
    config: LoadConfig,
    stop: AtomicBool,
    holders: Vec<Holder>,
    next_holder: AtomicU64,
    holders_done: AtomicU64,
    tickets: AtomicU64,
    /// Registrations after the holders', registered or in flight.
    claimed: AtomicU64,
    registered: AtomicU64,
    keys_held: AtomicU64,
    touches: AtomicU64,
    holders_expired: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

/// The workers' counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadFigures {
    /// Sessions registered (answered `Registered`), the holders' included.
    pub registered: u64,
    /// Keys granted to the holders (by the answers).
    pub keys_held: u64,
    /// Holders whose keys are all taken.
    pub holders_done: u64,
    /// Touches answered.
    pub touches: u64,
    /// Holders found expired or evicted.
    pub holders_expired: u64,
    /// Calls that failed (after their retries) or got an answer they should not.
    pub errors: u64,
    /// The first such failure.
    pub first_error: Option<String>,
}

impl Shared {
    /// Counters for `config`, nothing done yet.
    pub fn new(config: LoadConfig) -> Arc<Self> {
        let holders = (0..config.holders()).map(|_| Holder::default()).collect();
        Arc::new(Shared {
            config,
            stop: AtomicBool::new(false),
            holders,
            next_holder: AtomicU64::new(0),
            holders_done: AtomicU64::new(0),
            tickets: AtomicU64::new(0),
            claimed: AtomicU64::new(0),
            registered: AtomicU64::new(0),
            keys_held: AtomicU64::new(0),
            touches: AtomicU64::new(0),
            holders_expired: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            first_error: Mutex::new(None),
        })
    }

    /// Asks every worker to stop after its current call.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Claims one of the `target` registrations after the holders' (registered plus in
    /// flight, so the count ends exact); false when all are claimed.
    fn claim_registration(&self, target: u64) -> bool {
        self.claimed
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |claimed| {
                (claimed < target).then_some(claimed + 1)
            })
            .is_ok()
    }

    /// The counters now.
    pub fn figures(&self) -> LoadFigures {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        LoadFigures {
            registered: load(&self.registered),
            keys_held: load(&self.keys_held),
            holders_done: load(&self.holders_done),
            touches: load(&self.touches),
            holders_expired: load(&self.holders_expired),
            errors: load(&self.errors),
            first_error: self.lock_first_error().clone(),
        }
    }

    fn lock_first_error(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.first_error.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.lock_first_error().get_or_insert(what);
    }
}

/// Runs one worker until its share is done or [`Shared::stop`]; returns the ids of the
/// sessions it registered (the holders' included).
pub async fn worker(
    shared: Arc<Shared>,
    addrs: Vec<SocketAddr>,
    leader_index: usize,
    label: u64,
) -> Vec<SessionId> {
    let mut conn = LeaderConn::new(addrs, leader_index);
    let mut sessions = Vec::new();
    let holders = shared.holders.len() as u64;
    while !shared.stopped() {
        let holder = shared.next_holder.fetch_add(1, Ordering::Relaxed);
        if holder >= holders {
            break;
        }
        if let Some(session) = hold(&shared, &mut conn, holder, label).await {
            sessions.push(session);
        }
    }
    let config = &shared.config;
    let target = config.sessions.saturating_sub(holders);
    while !shared.stopped() && shared.claim_registration(target) {
        let ticket = shared.tickets.fetch_add(1, Ordering::Relaxed);
        if holders > 0 && ticket % config.touch_every == 0 {
            touch(&shared, &mut conn, (ticket / config.touch_every) % holders).await;
        }
        let failed = match conn.call(&Call::Register { label }).await {
            Ok(Response::Registered { session }) => {
                shared.registered.fetch_add(1, Ordering::Relaxed);
                sessions.push(session);
                None
            }
            Ok(other) => Some(format!("register: {other:?}")),
            Err(error) => Some(format!("register: {error}")),
        };
        if let Some(failed) = failed {
            // Give the claim back, so that another registration takes its place.
            shared.claimed.fetch_sub(1, Ordering::Relaxed);
            shared.error(failed);
        }
    }
    sessions
}

/// Registers holder `holder`'s session and takes its keys; returns the session.
async fn hold(
    shared: &Shared,
    conn: &mut LeaderConn,
    holder: u64,
    label: u64,
) -> Option<SessionId> {
    let entry = &shared.holders[holder as usize];
    let session = register_holder(shared, conn, holder, label).await?;
    entry.session.store(session, Ordering::Relaxed);
    entry.next_request.store(1, Ordering::Relaxed);
    for key in shared.config.keys_of(holder) {
        if shared.stopped() {
            return Some(session);
        }
        let call = Call::Acquire {
            key: key.clone(),
            lease_ms: shared.config.hold_lease_ms,
            origin: entry.origin(),
        };
        let mut last = String::new();
        let mut held = false;
        for _ in 0..TRIES_MAX {
            match conn.call(&call).await {
                // Busy: an earlier attempt of this very acquire was granted (module doc).
                Ok(Response::Granted { .. } | Response::Busy) => {
                    held = true;
                    break;
                }
                Ok(Response::SessionExpired) => {
                    shared.holders_expired.fetch_add(1, Ordering::Relaxed);
                    shared.error(format!("holder {holder} (session {session}) expired"));
                    return Some(session);
                }
                Ok(other) => last = format!("{other:?}"),
                Err(error) => last = error,
            }
        }
        if held {
            shared.keys_held.fetch_add(1, Ordering::Relaxed);
        } else {
            shared.error(format!("acquire {key}: {last}"));
        }
    }
    entry.ready.store(true, Ordering::Relaxed);
    shared.holders_done.fetch_add(1, Ordering::Relaxed);
    Some(session)
}

async fn register_holder(
    shared: &Shared,
    conn: &mut LeaderConn,
    holder: u64,
    label: u64,
) -> Option<SessionId> {
    let mut last = String::new();
    for _ in 0..TRIES_MAX {
        match conn.call(&Call::Register { label }).await {
            Ok(Response::Registered { session }) => {
                shared.registered.fetch_add(1, Ordering::Relaxed);
                return Some(session);
            }
            Ok(other) => last = format!("{other:?}"),
            Err(error) => last = error,
        }
    }
    shared.error(format!("register holder {holder}: {last}"));
    None
}

/// Touches holder `holder` (see the module doc), if its keys are taken.
async fn touch(shared: &Shared, conn: &mut LeaderConn, holder: u64) {
    let entry = &shared.holders[holder as usize];
    if !entry.ready.load(Ordering::Relaxed) {
        return;
    }
    let call = Call::Release {
        key: TOUCH_KEY.to_owned(),
        token: 0,
        origin: entry.origin(),
    };
    match conn.call(&call).await {
        Ok(Response::NotHolder) => {
            shared.touches.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Response::SessionExpired) => {
            // Counted once: the holder is not touched again.
            if entry.ready.swap(false, Ordering::Relaxed) {
                shared.holders_expired.fetch_add(1, Ordering::Relaxed);
                let session = entry.session.load(Ordering::Relaxed);
                shared.error(format!("holder {holder} (session {session}) expired"));
            }
        }
        Ok(other) => shared.error(format!("touch holder {holder}: {other:?}")),
        Err(error) => shared.error(format!("touch holder {holder}: {error}")),
    }
}

/// One request of the client API.
#[derive(Clone, Debug)]
enum Call {
    Register {
        label: u64,
    },
    Acquire {
        key: String,
        lease_ms: u64,
        origin: Origin,
    },
    Release {
        key: String,
        token: u64,
        origin: Origin,
    },
}

/// A connection to the node a worker believes leads.
struct LeaderConn {
    addrs: Vec<SocketAddr>,
    target: usize,
    rpc: Option<LockServiceClient>,
}

impl LeaderConn {
    fn new(addrs: Vec<SocketAddr>, target: usize) -> Self {
        LeaderConn {
            addrs,
            target,
            rpc: None,
        }
    }

    async fn connect(&mut self) -> Result<LockServiceClient, String> {
        if let Some(rpc) = &self.rpc {
            return Ok(rpc.clone());
        }
        let addr = self.addrs[self.target];
        let connect = lockd::sys::net::TcpStream::connect(addr);
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(format!("{addr}: connect: {e}")),
            Err(_) => return Err(format!("{addr}: connect timed out")),
        };
        let transport = lockd::server::transport(stream);
        let rpc = LockServiceClient::new(tarpc::client::Config::default(), transport).spawn();
        self.rpc = Some(rpc.clone());
        Ok(rpc)
    }

    /// Sends `call` until an answer that is not `NotLeader`, at most [`CALL_ATTEMPTS_MAX`]
    /// attempts; `Err` says what the last attempt met.
    async fn call(&mut self, call: &Call) -> Result<Response, String> {
        let mut last = String::from("no attempt");
        for _ in 0..CALL_ATTEMPTS_MAX {
            let rpc = match self.connect().await {
                Ok(rpc) => rpc,
                Err(error) => {
                    last = error;
                    self.next_node(None).await;
                    continue;
                }
            };
            match send(&rpc, call).await {
                Ok(Response::NotLeader { leader }) => {
                    last = format!("node {} is not the leader", self.target + 1);
                    self.next_node(leader).await;
                }
                Ok(answer) => return Ok(answer),
                Err(error) => {
                    last = format!("{}: {error}", self.addrs[self.target]);
                    self.next_node(None).await;
                }
            }
        }
        Err(format!("{CALL_ATTEMPTS_MAX} attempts; the last: {last}"))
    }

    /// Moves to node `hint` (1-based) when given, else to the next node after a pause.
    async fn next_node(&mut self, hint: Option<lockd::raft::NodeId>) {
        self.rpc = None;
        let hinted = hint
            .and_then(|id| usize::try_from(id.checked_sub(1)?).ok())
            .filter(|index| *index < self.addrs.len() && *index != self.target);
        match hinted {
            Some(index) => self.target = index,
            None => {
                self.target = (self.target + 1) % self.addrs.len();
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }
}

async fn send(rpc: &LockServiceClient, call: &Call) -> Result<Response, String> {
    let mut ctx = tarpc::context::current();
    ctx.deadline = std::time::Instant::now() + CALL_TIMEOUT;
    let timeout_ms = CALL_TIMEOUT.as_millis() as u64;
    let answer = match call.clone() {
        Call::Register { label } => {
            let call = rpc.register_session(ctx, label, timeout_ms);
            tokio::time::timeout(CALL_TIMEOUT, call).await
        }
        Call::Acquire {
            key,
            lease_ms,
            origin,
        } => {
            let call = rpc.acquire(ctx, key, lease_ms, 0, Some(origin), timeout_ms);
            tokio::time::timeout(CALL_TIMEOUT, call).await
        }
        Call::Release { key, token, origin } => {
            let call = rpc.release(ctx, key, token, Some(origin), timeout_ms);
            tokio::time::timeout(CALL_TIMEOUT, call).await
        }
    };
    match answer {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} ms", CALL_TIMEOUT.as_millis())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(keys: u64, keys_per_session: u64) -> LoadConfig {
        LoadConfig {
            sessions: 10,
            keys,
            keys_per_session,
            hold_lease_ms: 1000,
            workers: 1,
            touch_every: 1,
        }
    }

    #[test]
    fn keys_are_spread_over_holders_without_overlap() {
        // Soak rule: `keys` distinct keys, `keys_per_session` per holder, the last holder
        // taking the rest.
        let config = config(250, 100);
        assert_eq!(config.holders(), 3);
        let all: Vec<String> = (0..3).flat_map(|h| config.keys_of(h)).collect();
        assert_eq!(all.len(), 250);
        assert_eq!(all[0], "soak-00000000000");
        assert_eq!(all[249], "soak-00000000249");
        assert_eq!(config.keys_of(2).count(), 50);
        assert!(all.iter().all(|k| k.len() == 16 && k != TOUCH_KEY));
    }

    #[test]
    fn each_holder_is_touched_several_times_per_eviction_window() {
        // lock.rs: a registration at the cap evicts the least recently active session; a
        // holder must be touched within `sessions_max - holders` registrations.
        let every = LoadConfig::touch_every_for(50_000, 1_000);
        assert_eq!(every, 12);
        let registrations_between_touches = every * 1_000;
        assert!(registrations_between_touches * TOUCHES_PER_WINDOW <= 50_000 - 1_000);
        assert_eq!(LoadConfig::touch_every_for(50_000, 60_000), 1);
        assert_eq!(LoadConfig::touch_every_for(50_000, 0), 12_500);
    }
}
