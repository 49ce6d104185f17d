//! The workload: client tasks that follow their schedule ([`crate::harness::schedule::ClientGen`]):
//! acquire (try or wait), hold while writing to the fenced resource, release; and the
//! recovery phase in which every client must succeed again.
//!
//! The fenced resource ([`FencedStore`]) lives inside the harness: it accepts a write iff its
//! token is at least the highest it accepted for that key (DESIGN "Histories"). The
//! `unfenced` control workload records the same `write` ops with the token the client holds,
//! but its resource ignores tokens, so a client that writes after its lease ran out is
//! accepted; the checker must then find stale writes (the nemesis has teeth).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::oneshot;
use tokio::time::Instant;

use history::{AcquireValue, ErrorWord, OpName, OpType, Process};

use crate::harness::recorder::{Recorder, Row};
use crate::harness::schedule::{ClientGen, ClientOp, Completion, Leave, LeaveHow};
use crate::systems::{LockClient, Outcome};

/// Client ids of the clients that leavers disconnect start here, above every process id.
const DISCONNECTING_CLIENT_ID_BASE: u64 = 1 << 40;

/// An op's RPC deadline beyond its wait, ms. An answer not back by then is `info`.
pub const OP_TIMEOUT_MS: u64 = 2_000;

/// The token the workload holds for a grant that came without one (an exec adapter whose
/// init line said `"fencing":false`). Real tokens are positive (the client protocol refuses
/// a token 0), so this one is never confused with them; it is never recorded in a history
/// row ([`real_token`]) and never fences a write.
pub const NO_TOKEN: u64 = 0;

/// The token to record or send: `None` for [`NO_TOKEN`].
pub fn real_token(token: u64) -> Option<u64> {
    (token != NO_TOKEN).then_some(token)
}

/// Which resource the clients write to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Writes carry tokens; stale ones are rejected.
    Fenced,
    /// Writes are accepted whatever their token (the control that must fail).
    Unfenced,
}

impl std::str::FromStr for WorkloadKind {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fenced" => Ok(WorkloadKind::Fenced),
            "unfenced" => Ok(WorkloadKind::Unfenced),
            other => Err(crate::Error::BadArgument(format!(
                "--workload {other:?}: expected fenced or unfenced"
            ))),
        }
    }
}

/// The fenced resource: per key, the highest token accepted and the last value.
#[derive(Debug)]
pub struct FencedStore {
    kind: WorkloadKind,
    keys: Mutex<HashMap<String, (u64, String)>>,
}

impl FencedStore {
    /// An empty store.
    pub fn new(kind: WorkloadKind) -> Self {
        FencedStore {
            kind,
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// Writes `value` under `token`: accepted iff `token >=` the highest accepted for `key`
    /// (or always, unfenced). `Err(highest)` when rejected as stale.
    pub fn write(&self, key: &str, value: &str, token: u64) -> Result<(), u64> {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let entry = keys.entry(key.to_owned()).or_insert((0, String::new()));
        if self.kind == WorkloadKind::Fenced && token < entry.0 {
            return Err(entry.0);
        }
        entry.0 = entry.0.max(token);
        entry.1 = value.to_owned();
        Ok(())
    }
}

/// The longest a client stays stalled by `pause-clients` when no resume comes, ms.
pub const CLIENT_PAUSE_MAX_MS: u64 = 15_000;

/// Client slots stalled by the nemesis (`pause-clients`): a stalled client starts no write
/// until it is resumed, as a lock holder in a GC pause would; it then goes on with what it was
/// doing, writing under a token whose lease may have run out meanwhile.
#[derive(Debug, Default)]
pub struct ClientPauses {
    paused: Mutex<std::collections::BTreeSet<u64>>,
}

impl ClientPauses {
    /// Stalls these slots.
    pub fn pause(&self, slots: &[u64]) {
        self.lock().extend(slots.iter().copied());
    }

    /// Resumes these slots.
    pub fn resume(&self, slots: &[u64]) {
        let mut paused = self.lock();
        for s in slots {
            paused.remove(s);
        }
    }

    /// True while `slot` is stalled.
    pub fn is_paused(&self, slot: u64) -> bool {
        self.lock().contains(&slot)
    }

    /// The stalled slots.
    pub fn paused(&self) -> std::collections::BTreeSet<u64> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<u64>> {
        self.paused.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits while `slot` is stalled, at most [`CLIENT_PAUSE_MAX_MS`].
    pub async fn wait(&self, slot: u64) {
        let deadline = Instant::now() + Duration::from_millis(CLIENT_PAUSE_MAX_MS);
        while self.lock().contains(&slot) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Counters the progress line and results read.
#[derive(Debug, Default)]
pub struct Counters {
    /// Completed client ops.
    pub ops: AtomicU64,
    /// ok completions.
    pub ok: AtomicU64,
    /// fail completions.
    pub fail: AtomicU64,
    /// info completions.
    pub info: AtomicU64,
}

impl Counters {
    fn count(&self, t: OpType) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        let c = match t {
            OpType::Ok => &self.ok,
            OpType::Fail => &self.fail,
            _ => &self.info,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Makes a client for a process id.
pub type ClientFactory = Arc<dyn Fn(u64) -> Box<dyn LockClient> + Send + Sync>;

/// What every worker of a run shares.
#[derive(Clone)]
pub struct Shared {
    /// Makes a client for a process id.
    pub factory: ClientFactory,
    /// The history.
    pub recorder: Arc<Recorder>,
    /// The fenced resource.
    pub store: Arc<FencedStore>,
    /// Progress counters.
    pub counters: Arc<Counters>,
    /// Stalls set by the pause nemesis.
    pub pauses: Arc<ClientPauses>,
}

/// One client slot: its generator, its current process and client.
pub struct Worker {
    slot: u64,
    slots: u64,
    process: u64,
    generator: ClientGen,
    client: Box<dyn LockClient>,
    factory: ClientFactory,
    recorder: Arc<Recorder>,
    store: Arc<FencedStore>,
    counters: Arc<Counters>,
    pauses: Arc<ClientPauses>,
}

/// What one op did, for the generator and the recovery phase.
struct Done {
    op_type: OpType,
    completion: Completion,
}

impl Worker {
    /// A worker for `slot` of `slots`.
    pub fn new(slot: u64, slots: u64, generator: ClientGen, shared: Shared) -> Self {
        let client = (shared.factory)(slot);
        Worker {
            slot,
            slots,
            process: slot,
            generator,
            client,
            factory: shared.factory,
            recorder: shared.recorder,
            store: shared.store,
            counters: shared.counters,
            pauses: shared.pauses,
        }
    }

    /// Runs the schedule until `stop` (no op starts after it; one in flight finishes within
    /// its deadline). Returns the number of ops run.
    pub async fn run_until(&mut self, stop: Instant) -> u64 {
        let mut last = None;
        let mut ops = 0;
        loop {
            let step = self.generator.next(last);
            let start = Instant::now() + Duration::from_millis(step.think_ms);
            if start >= stop {
                return ops;
            }
            tokio::time::sleep_until(start).await;
            // A stalled client stops right before its next write: a lock holder in a GC
            // pause between its acquire and its use of the lock, the case fencing exists
            // for. Stalling at any op instead would mostly catch clients that hold nothing.
            if matches!(step.op, ClientOp::Write { .. }) && self.pauses.is_paused(self.slot) {
                self.client.stall(true);
                self.pauses.wait(self.slot).await;
                self.client.stall(false);
            }
            last = Some(self.perform(&step.op).await.completion);
            ops += 1;
        }
    }

    /// The recovery phase: until `deadline`, acquire (waiting), write and release this
    /// slot's key; true once one acquire and its release both came back ok.
    pub async fn recover(&mut self, deadline: Instant) -> bool {
        let key = self.generator.key();
        while Instant::now() < deadline {
            let acquire = ClientOp::Acquire {
                key: key.clone(),
                lease_ms: 2_000,
                wait_ms: 1_000,
                leave: None,
            };
            let Completion::Acquired(token) = self.perform(&acquire).await.completion else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let value = format!("{}.recovery", self.slot);
            self.perform(&ClientOp::Write {
                key: key.clone(),
                value,
                token,
            })
            .await;
            let release = self
                .perform(&ClientOp::Release {
                    key: key.clone(),
                    token,
                })
                .await;
            if release.op_type == OpType::Ok {
                return true;
            }
        }
        false
    }

    fn process(&self) -> Process {
        Process::Client(self.process)
    }

    /// The client slot this worker runs.
    pub fn slot(&self) -> u64 {
        self.slot
    }

    /// An acquire whose client leaves after `leave.after_ms` unless it was answered: it
    /// cancels the request (drops the call: `gave-up`) or closes its connection (the call
    /// runs on a client of its own, dropped with it: `disconnected`). Either way the
    /// outcome is unknown (`info`): the grant may have happened just before.
    ///
    /// With `signal`, the client leaves when it fires instead (the probe's crossing round).
    async fn acquire_then_leave(
        &mut self,
        key: &str,
        lease_ms: u64,
        wait_ms: u64,
        deadline: Instant,
        leave: Leave,
        signal: Option<oneshot::Receiver<()>>,
    ) -> Outcome {
        let after = Duration::from_millis(leave.after_ms);
        let mut leave_now: Pin<Box<dyn Future<Output = ()> + Send>> = match signal {
            Some(signal) => Box::pin(async move {
                let _ = signal.await;
            }),
            None => Box::pin(tokio::time::sleep(after)),
        };
        // Like a timeout: an answer ready when the client leaves is taken.
        let mut timeout = async |call| {
            tokio::select! {
                biased;
                outcome = call => Ok(outcome),
                () = &mut leave_now => Err(()),
            }
        };
        match leave.how {
            LeaveHow::GiveUp => {
                let call = self.client.acquire(key, lease_ms, wait_ms, deadline);
                match timeout(call).await {
                    Ok(outcome) => outcome,
                    Err(()) => {
                        let departure = self.client.departure();
                        left(ErrorWord::GaveUp, departure).await
                    }
                }
            }
            LeaveHow::Disconnect | LeaveHow::Crash => {
                // A client id of its own: two lockd clients with one id number their
                // requests alike, and the lock table's dedupe (client, request) then answers
                // the second client's acquire with the first one's old grant (seen: token
                // 617 granted twice to process 36 in nemesis/tests/hosts.rs, seed 15).
                let own = (self.factory)(DISCONNECTING_CLIENT_ID_BASE + self.process);
                let answered = timeout(own.acquire(key, lease_ms, wait_ms, deadline)).await;
                match answered {
                    Ok(outcome) => {
                        // Answered before it left: the process goes on with the client (and
                        // the session) this op ran under. Liveness rule S reads a process's
                        // last ok op as proof that the session of its next op was alive; its
                        // old client's session, idle meanwhile, could expire legitimately
                        // (a false alarm of rule S on sim seed 519, 2026-12-06).
                        self.client = own;
                        outcome
                    }
                    Err(()) if leave.how == LeaveHow::Crash => {
                        // It dies in the poll in which it drops the call, before its
                        // cancellation can leave; judged only with the witness the probe
                        // keeps (see `LeaveHow::Crash`).
                        own.crash();
                        drop(own);
                        Outcome::Info(ErrorWord::Disconnected)
                    }
                    Err(()) => {
                        let departure = own.departure();
                        drop(own);
                        left(ErrorWord::Disconnected, departure).await
                    }
                }
            }
        }
    }

    /// Records the invoke, runs the op, records its completion; retires the process after
    /// an `info`.
    async fn perform(&mut self, op: &ClientOp) -> Done {
        self.perform_leaving(op, None).await
    }

    /// [`Worker::perform`], where a leaver leaves when `signal` fires.
    async fn perform_leaving(
        &mut self,
        op: &ClientOp,
        signal: Option<oneshot::Receiver<()>>,
    ) -> Done {
        let (f, key, value, token) = match op {
            ClientOp::Acquire {
                key,
                lease_ms,
                wait_ms,
                ..
            } => (
                OpName::Acquire,
                key,
                AcquireValue::new(*lease_ms, *wait_ms).to_string(),
                None,
            ),
            ClientOp::Write { key, value, token } => {
                (OpName::Write, key, value.clone(), real_token(*token))
            }
            ClientOp::Release { key, token } => {
                (OpName::Release, key, String::new(), real_token(*token))
            }
        };
        let invoke = Row {
            f: f.as_str().into(),
            key: key.clone(),
            value,
            token,
            ..Row::default()
        };
        self.recorder.record(self.process(), OpType::Invoke, invoke);
        let outcome = match op {
            ClientOp::Acquire {
                key,
                lease_ms,
                wait_ms,
                leave,
            } => {
                let deadline = Instant::now() + Duration::from_millis(wait_ms + OP_TIMEOUT_MS);
                match leave {
                    None => {
                        self.client
                            .acquire(key, *lease_ms, *wait_ms, deadline)
                            .await
                    }
                    Some(leave) => {
                        self.acquire_then_leave(key, *lease_ms, *wait_ms, deadline, *leave, signal)
                            .await
                    }
                }
            }
            ClientOp::Release { key, token } => {
                let deadline = Instant::now() + Duration::from_millis(OP_TIMEOUT_MS);
                self.client.release(key, *token, deadline).await
            }
            ClientOp::Write { key, value, token } => {
                let deadline = Instant::now() + Duration::from_millis(OP_TIMEOUT_MS);
                match self.client.write(key, value, *token, deadline).await {
                    Some(outcome) => outcome,
                    None => match self.store.write(key, value, *token) {
                        Ok(()) => Outcome::Ok {
                            token: None,
                            node: None,
                        },
                        Err(_) => Outcome::Fail {
                            error: ErrorWord::StaleToken,
                            node: None,
                        },
                    },
                }
            }
        };
        let (op_type, row_token, node, error) = match &outcome {
            Outcome::Ok { token, node } => (
                OpType::Ok,
                *token,
                node.map(|n| format!("n{n}")).unwrap_or_default(),
                String::new(),
            ),
            Outcome::Fail { error, node } => (
                OpType::Fail,
                None,
                node.map(|n| format!("n{n}")).unwrap_or_default(),
                error.as_str().to_owned(),
            ),
            Outcome::Info(e) => (OpType::Info, None, String::new(), e.as_str().to_owned()),
        };
        let complete = Row {
            f: f.as_str().into(),
            key: key.clone(),
            token: row_token,
            node,
            error,
            ..Row::default()
        };
        self.recorder.record(self.process(), op_type, complete);
        self.counters.count(op_type);
        if op_type == OpType::Info {
            self.process += self.slots;
            self.client = (self.factory)(self.process);
        }
        let completion = match (op, &outcome) {
            (ClientOp::Acquire { .. }, Outcome::Ok { token, .. }) => {
                Completion::Acquired(token.unwrap_or(NO_TOKEN))
            }
            (ClientOp::Acquire { .. }, _) => Completion::NotAcquired,
            _ => Completion::Done,
        };
        Done {
            op_type,
            completion,
        }
    }
}

/// The outcome of an acquire whose client left (`how`: `gave-up` or `disconnected`), once
/// `departure` says whether the service surely learns that nobody read its grant. When not
/// (the answer reached the client first, or an attempt was lost with nothing sent after it),
/// the service may keep such a grant until its lease ends, legally, so the op is recorded
/// `indeterminate`: an unknown outcome, not an abandon that liveness rule P holds the
/// service to.
async fn left(how: ErrorWord, departure: Option<BoxFuture<'static, bool>>) -> Outcome {
    let announced = match departure {
        Some(departure) => departure.await,
        None => true,
    };
    if announced {
        Outcome::Info(how)
    } else {
        Outcome::Info(ErrorWord::Indeterminate)
    }
}

/// The phantom-lock probe's lease, ms: far longer than the phantom-release bound, so only a
/// release of the gone client's grant (not its lease) frees the key in time.
pub const PROBE_LEASE_MS: u64 = 20_000;
/// How long the probe waits after the leaver left before it tries the key, ms: the
/// phantom-release bound of the liveness check (3 s) plus a margin.
pub const PROBE_DELAY_MS: u64 = 3_500;
/// How long the probe's holder keeps the key after the waiter left, ms (see
/// `checker::liveness`, rule P's witness).
pub const PROBE_HOLD_AFTER_LEAVE_MS: u64 = 500;
/// First process id of the probe's clients (far above the workers' ids).
pub const PROBE_PROCESS_BASE: u64 = 1_000_000;

/// The phantom-lock probe, after recovery with no fault active: per key, a holder takes the
/// key, a waiter queues for it with a 20 s lease and leaves (gives up on even keys,
/// disconnects on odd ones), the holder releases [`PROBE_HOLD_AFTER_LEAVE_MS`] later, and
/// [`PROBE_DELAY_MS`] after the waiter
/// left a third client tries the key. A lock service that keeps the gone waiter's lock
/// (`--bug skip-phantom-release`) answers it `busy`, which the liveness check's rule P
/// reports. Returns how many keys the probe ran on (a key whose holder got no grant is
/// skipped). Each key then gets the same round again with a leaver that crashes
/// ([`LeaveHow::Crash`]): only the end of its connection tells the node.
///
/// With `crossing` (a service that releases the grant of a cancelled call, even one it had
/// answered: [`crate::systems::System::releases_cancelled_grants`]), each key then gets a
/// second round whose leavers leave while their grant may be on the wire
/// ([`probe_key_crossing`]). Rule P judges those abandons without a witness.
pub async fn phantom_probe(shared: &Shared, keys: &[String], crossing: bool) -> u64 {
    let probes = keys.iter().enumerate().map(|(i, key)| {
        let shared = shared.clone();
        let key = key.clone();
        async move {
            let ran = probe_key(&shared, &key, i as u64, probe_leave_how(i as u64), 0).await;
            // Again with a leaver that crashes: no cancellation, only the connection's end.
            probe_key(&shared, &key, i as u64, LeaveHow::Crash, CRASH_ROUND_OFFSET).await;
            if crossing {
                probe_key_crossing(&shared, &key, i as u64).await;
            }
            ran
        }
    });
    futures::future::join_all(probes)
        .await
        .into_iter()
        .filter(|ran| *ran)
        .count() as u64
}

/// A worker of the probe's own, as process `process`.
fn probe_worker(shared: &Shared, process: u64) -> Worker {
    let mut w = Worker::new(
        0,
        1,
        ClientGen::new(&crate::harness::schedule::WorkloadConfig::new(0, 1), 0),
        shared.clone(),
    );
    w.process = process;
    w.client = (shared.factory)(process);
    w
}

/// An acquire of `key` by the probe.
fn probe_acquire(key: &str, lease_ms: u64, wait_ms: u64, leave: Option<Leave>) -> ClientOp {
    ClientOp::Acquire {
        key: key.to_owned(),
        lease_ms,
        wait_ms,
        leave,
    }
}

/// How the probe's waiter on key number `i` leaves: gives up on even keys, disconnects on
/// odd ones.
fn probe_leave_how(i: u64) -> LeaveHow {
    if i % 2 == 0 {
        LeaveHow::GiveUp
    } else {
        LeaveHow::Disconnect
    }
}

/// [`PROBE_DELAY_MS`] after the waiter left, a third client tries the key, and releases it
/// when granted.
async fn probe_try(prober: &mut Worker, key: &str) {
    let tried = prober.perform(&probe_acquire(key, 1_000, 0, None)).await;
    if let Completion::Acquired(token) = tried.completion {
        let release = ClientOp::Release {
            key: key.to_owned(),
            token,
        };
        prober.perform(&release).await;
    }
}

async fn probe_key(shared: &Shared, key: &str, i: u64, how: LeaveHow, offset: u64) -> bool {
    let base = PROBE_PROCESS_BASE + 10 * i + offset;
    let worker = |process| probe_worker(shared, process);
    let (mut holder, mut leaver, mut prober) = (worker(base), worker(base + 1), worker(base + 2));
    let acquire = |lease_ms, wait_ms, leave| probe_acquire(key, lease_ms, wait_ms, leave);
    let Completion::Acquired(token) = holder
        .perform(&acquire(PROBE_LEASE_MS, 2_000, None))
        .await
        .completion
    else {
        return false;
    };
    let leave = Leave { after_ms: 300, how };
    let left = leaver
        .perform(&acquire(PROBE_LEASE_MS, 10_000, Some(leave)))
        .await;
    // Hold on past the liveness check's witness margin (250 ms): the node then surely heard
    // of the departure before it could grant, and rule P judges this abandon.
    tokio::time::sleep(Duration::from_millis(PROBE_HOLD_AFTER_LEAVE_MS)).await;
    let release = ClientOp::Release {
        key: key.to_owned(),
        token,
    };
    holder.perform(&release).await;
    if let Completion::Acquired(token) = left.completion {
        // The waiter was answered before it could leave: it releases like anyone.
        leaver
            .perform(&ClientOp::Release {
                key: key.to_owned(),
                token,
            })
            .await;
    }
    tokio::time::sleep(Duration::from_millis(PROBE_DELAY_MS)).await;
    probe_try(&mut prober, key).await;
    true
}

/// The probe's crossing round on `key` (see [`phantom_probe`]): a prober times one acquire
/// of the free key (its round trip `R`: the trip to the leader, the commit, the trip back);
/// then a leaver acquires the free key [`CROSSING_LEAVES`] times, each time leaving a
/// different fraction of `R` after its invoke, from before the grant can be made to after
/// it is read, so that on most seeds some leave falls while the grant is on the wire back
/// (the node answered it, the client has not read it). A grant read in time is released.
/// The prober tries the key [`PROBE_DELAY_MS`] after the last leave.
async fn probe_key_crossing(shared: &Shared, key: &str, i: u64) {
    let base = PROBE_PROCESS_BASE + CROSSING_PROCESS_OFFSET + 100 * i;
    let (mut leaver, mut prober) = (probe_worker(shared, base), probe_worker(shared, base + 99));
    let invoked = Instant::now();
    let Completion::Acquired(token) = prober
        .perform(&probe_acquire(key, PROBE_LEASE_MS, 0, None))
        .await
        .completion
    else {
        return;
    };
    let round_trip_ms = invoked.elapsed().as_millis() as u64;
    let release = |token| ClientOp::Release {
        key: key.to_owned(),
        token,
    };
    prober.perform(&release(token)).await;
    for j in 0..CROSSING_LEAVES {
        let leave = Leave {
            after_ms: (round_trip_ms * (4 + j) / 10).max(1),
            how: probe_leave_how(i + j),
        };
        let left = leaver
            .perform(&probe_acquire(key, PROBE_LEASE_MS, 0, Some(leave)))
            .await;
        if let Completion::Acquired(token) = left.completion {
            leaver.perform(&release(token)).await;
        }
        // Room for the release of a grant whose client left before it was made.
        tokio::time::sleep(Duration::from_millis(round_trip_ms + 50)).await;
    }
    tokio::time::sleep(Duration::from_millis(PROBE_DELAY_MS)).await;
    probe_try(&mut prober, key).await;
}

/// The witnessed round with a crashing leaver takes the process ids this far above its
/// key's first round (each round uses three).
const CRASH_ROUND_OFFSET: u64 = 5;

/// How many times the crossing round's leaver leaves (at 0.4, 0.5, ... 1.1 of the round
/// trip).
const CROSSING_LEAVES: u64 = 8;
/// The crossing round's processes start this far above [`PROBE_PROCESS_BASE`] (each leave
/// retires its process, and the next one is the process after it).
const CROSSING_PROCESS_OFFSET: u64 = 500_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_store_rejects_stale_tokens_and_unfenced_does_not() {
        // DESIGN "Histories": write ok iff token >= highest accepted for that key.
        let fenced = FencedStore::new(WorkloadKind::Fenced);
        assert_eq!(fenced.write("a", "x", 5), Ok(()));
        assert_eq!(
            fenced.write("a", "y", 5),
            Ok(()),
            "an equal token is accepted"
        );
        assert_eq!(fenced.write("a", "z", 4), Err(5), "an older token is stale");
        assert_eq!(fenced.write("b", "z", 4), Ok(()), "keys are independent");
        let unfenced = FencedStore::new(WorkloadKind::Unfenced);
        assert_eq!(unfenced.write("a", "x", 5), Ok(()));
        assert_eq!(
            unfenced.write("a", "z", 4),
            Ok(()),
            "the control accepts stale writes"
        );
    }
}
