//! The simulated clients: one turmoil host (`clients`) runs every client slot as a task,
//! each with its own lockd [`Client`] (the real client library), plus a control task that
//! asks the nodes who leads and carries out clock faults through the `set_clock` RPC.
//!
//! The workload is the harness's: acquire (try, or wait), hold while writing to the fenced
//! resource, release (or let the lease run out, and sometimes write once more after it did:
//! a stale write the fenced resource must refuse). Some acquires are *leavers* with a long
//! lease: the client gives up mid-acquire (`gave-up`: the request future is dropped, so
//! tarpc cancels it) or drops its connection (`disconnected`: the whole client is dropped),
//! at a random instant while the request may be anywhere between the client and the
//! committed grant. lockd must then free the key well before the lease (the phantom-lock
//! release). The liveness check judges a leave where another grant held the key until after
//! the client left (so the grant cannot have crossed the departure on the wire); after
//! recovery, the phantom-lock probe makes one such leave per key.
//!
//! Rows are recorded with the simulator's clock, in nanoseconds since the run started.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use history::{AcquireValue, ErrorWord, Op, OpName, OpType, Process};
use lockd::client::{Answered, Client, ClientError, ClientOptions};
use lockd::raft::{NodeId, Role};
use tokio::time::Instant;

use crate::rng::Rng;
use crate::workload::{PROBE_DELAY_MS, PROBE_HOLD_AFTER_LEAVE_MS, PROBE_PROCESS_BASE};

/// Where each node listens for clients in the simulation.
pub const CLIENT_PORT: u16 = 7100;
/// Where each node listens for peers in the simulation.
pub const PEER_PORT: u16 = 7000;
/// The lease of a leaver's acquire, ms: far longer than the phantom-release bound, so a key
/// kept by a lost phantom release shows as a liveness failure, not as a lease running out.
pub const LEAVER_LEASE_MS: u64 = 20_000;
/// How long the recovery phase may last, ms, before the clients stop trying.
pub const RECOVERY_MS: u64 = 15_000;
/// How often the control task asks the nodes who leads, ms.
const STATUS_EVERY_MS: u64 = 100;
/// The longest stall of a paused client, in 10 ms steps.
const STALL_STEPS_MAX: u32 = 3_000;
/// An op's deadline beyond its wait, ms (the harness's `OP_TIMEOUT_MS`).
const OP_TIMEOUT_MS: u64 = 2_000;

/// What the clients are doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The workload runs while the nemesis acts.
    Faults,
    /// Everything is healed: each client must succeed once more.
    Recovery,
}

/// A clock change the driver asks the control task to make (it needs an RPC).
#[derive(Clone, Debug)]
pub struct ClockRequest {
    /// The node.
    pub node: NodeId,
    /// The new rate.
    pub rate: f64,
    /// The one-time jump, ms.
    pub jump_ms: i64,
}

/// State shared by the driver and the clients host (one thread: `Rc`).
#[derive(Debug)]
pub struct Shared {
    /// The history.
    pub rows: RefCell<Vec<Op>>,
    /// When the clients host first ran (the history's time zero, on the host's clock).
    start: Cell<Option<Instant>>,
    /// The leader, as the last status round saw it.
    pub leader: Cell<Option<NodeId>>,
    /// Clock changes to make.
    pub clock_requests: RefCell<VecDeque<ClockRequest>>,
    /// What the clients are doing.
    pub phase: Cell<Phase>,
    /// Client slots that finished their recovery (succeeded or gave up).
    pub recovered: Cell<usize>,
    /// Clock requests that failed, with why (reported as fault outcomes).
    pub clock_failures: RefCell<Vec<String>>,
    /// Client slots stalled by `pause-clients` (each stalls right before its next write,
    /// as a lock holder's GC pause would).
    pub paused_clients: RefCell<BTreeSet<u64>>,
    /// The last time recorded, ns (rows never go back in time).
    last_ns: Cell<u64>,
}

impl Shared {
    /// Empty state at the start of a run.
    pub fn new() -> Rc<Shared> {
        Rc::new(Shared {
            rows: RefCell::new(Vec::new()),
            start: Cell::new(None),
            leader: Cell::new(None),
            clock_requests: RefCell::new(VecDeque::new()),
            phase: Cell::new(Phase::Faults),
            recovered: Cell::new(0),
            clock_failures: RefCell::new(Vec::new()),
            paused_clients: RefCell::new(BTreeSet::new()),
            last_ns: Cell::new(0),
        })
    }

    /// Appends a row at `time_ns` (clamped so that time never goes backwards).
    pub fn push(&self, time_ns: u64, mut op: Op) -> Op {
        let time_ns = time_ns.max(self.last_ns.get());
        self.last_ns.set(time_ns);
        let mut rows = self.rows.borrow_mut();
        op.index = rows.len() as u64;
        op.time_ns = time_ns;
        rows.push(op.clone());
        op
    }

    /// The clients host's clock, ns since the run started.
    fn now_ns(&self) -> u64 {
        let start = match self.start.get() {
            Some(start) => start,
            None => {
                let now = Instant::now();
                self.start.set(Some(now));
                now
            }
        };
        start.elapsed().as_nanos() as u64
    }

    /// Records a client row now.
    fn record(&self, process: Process, op_type: OpType, row: Row) -> Op {
        let op = Op {
            index: 0,
            time_ns: 0,
            process,
            op_type,
            f: row.f.to_owned(),
            key: row.key,
            value: row.value,
            token: row.token,
            node: row.node.map(|n| format!("n{n}")).unwrap_or_default(),
            error: row.error.to_owned(),
        };
        self.push(self.now_ns(), op)
    }
}

/// The cells of one row.
#[derive(Clone, Debug, Default)]
struct Row {
    f: &'static str,
    key: String,
    value: String,
    token: Option<u64>,
    node: Option<NodeId>,
    error: &'static str,
}

/// The workload's shape.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The run's seed.
    pub seed: u64,
    /// Client slots.
    pub clients: u64,
    /// Keys `k0`, `k1`, ...
    pub keys: u64,
    /// One leaver among this many acquires (0: none).
    pub leaver_one_in: u64,
}

/// The clients host's future: every slot and the control task, until each slot recovered.
pub async fn run_clients(
    shared: Rc<Shared>,
    workload: Workload,
    cluster: Vec<SocketAddr>,
) -> turmoil::Result {
    shared.now_ns();
    let fenced: Rc<RefCell<BTreeMap<String, u64>>> = Rc::new(RefCell::new(BTreeMap::new()));
    let local = tokio::task::LocalSet::new();
    local.spawn_local(control(shared.clone(), cluster.clone()));
    let mut slots = Vec::new();
    for slot in 0..workload.clients {
        let worker = Worker {
            shared: shared.clone(),
            fenced: fenced.clone(),
            cluster: cluster.clone(),
            workload: workload.clone(),
            slot,
            process: slot,
            client_generation: 0,
            rng: Rng::derive(workload.seed, CLIENT_STREAM, slot),
        };
        slots.push(local.spawn_local(worker.run()));
    }
    local
        .run_until(async move {
            for slot in slots {
                let _ = slot.await;
            }
            probe(shared, fenced, cluster, workload).await;
        })
        .await;
    Ok(())
}

const CLIENT_STREAM: u64 = 0x5157_c11e;

/// The leader round and the clock requests, until recovery ends.
async fn control(shared: Rc<Shared>, cluster: Vec<SocketAddr>) {
    let mut options = ClientOptions::default();
    options.status_timeout_ms = 200;
    let client = Client::with_options(cluster, u64::MAX, options);
    let mut tick = 0u64;
    loop {
        let requests: Vec<ClockRequest> = shared.clock_requests.borrow_mut().drain(..).collect();
        for request in requests {
            let index = (request.node - 1) as usize;
            if let Err(e) = client.set_clock(index, request.rate, request.jump_ms).await {
                shared
                    .clock_failures
                    .borrow_mut()
                    .push(format!("n{}: {e}", request.node));
            }
        }
        if tick % (STATUS_EVERY_MS / 10) == 0 {
            let statuses = client.status_all().await;
            let leader = statuses
                .iter()
                .filter_map(|s| s.as_ref().ok())
                .filter(|s| s.raft.role == Role::Leader)
                .max_by_key(|s| s.raft.term)
                .map(|s| s.raft.id);
            shared.leader.set(leader);
        }
        tick += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One client slot.
struct Worker {
    shared: Rc<Shared>,
    fenced: Rc<RefCell<BTreeMap<String, u64>>>,
    cluster: Vec<SocketAddr>,
    workload: Workload,
    slot: u64,
    process: u64,
    client_generation: u64,
    rng: Rng,
}

impl Worker {
    fn client_id(&self) -> u64 {
        self.slot + 1 + self.client_generation * 1_000
    }

    fn new_client(&self) -> Client {
        Client::with_options(
            self.cluster.clone(),
            self.client_id(),
            ClientOptions::default(),
        )
    }

    fn process(&self) -> Process {
        Process::Client(self.process)
    }

    /// After an `info`, the slot continues under a new process id (Jepsen's convention).
    fn retire(&mut self) {
        self.process += self.workload.clients;
    }

    async fn run(mut self) {
        let mut client = self.new_client();
        while self.shared.phase.get() == Phase::Faults {
            let think = self.rng.range(5, 120);
            tokio::time::sleep(Duration::from_millis(think)).await;
            if self.shared.phase.get() != Phase::Faults {
                break;
            }
            let key = format!("k{}", self.rng.below(self.workload.keys.max(1)));
            let leaver =
                self.workload.leaver_one_in > 0 && self.rng.chance(1, self.workload.leaver_one_in);
            if leaver {
                client = self.leave(client, &key).await;
                continue;
            }
            let wait_ms = if self.rng.chance(1, 3) {
                self.rng.range(200, 1500)
            } else {
                0
            };
            let lease_ms = self.rng.range(800, 2500);
            if let Some(token) = self.acquire(&client, &key, lease_ms, wait_ms).await {
                self.hold(&client, &key, token, lease_ms).await;
            }
        }
        self.recover(client).await;
        self.shared.recovered.set(self.shared.recovered.get() + 1);
    }

    /// Acquire; records it; the token on success.
    async fn acquire(
        &mut self,
        client: &Client,
        key: &str,
        lease_ms: u64,
        wait_ms: u64,
    ) -> Option<u64> {
        self.invoke_acquire(key, lease_ms, wait_ms);
        let deadline = Instant::now() + Duration::from_millis(wait_ms + OP_TIMEOUT_MS);
        let answered = client
            .acquire_traced(key, lease_ms, wait_ms, deadline)
            .await;
        self.complete_acquire(key, answered)
    }

    /// Records an acquire's invoke.
    fn invoke_acquire(&mut self, key: &str, lease_ms: u64, wait_ms: u64) {
        self.shared.record(
            self.process(),
            OpType::Invoke,
            Row {
                f: OpName::Acquire.as_str(),
                key: key.to_owned(),
                value: acquire_value(lease_ms, wait_ms),
                ..Row::default()
            },
        );
    }

    /// Records an acquire's answer; the token on success.
    fn complete_acquire(
        &mut self,
        key: &str,
        answered: Answered<Result<u64, ClientError>>,
    ) -> Option<u64> {
        let mut row = Row {
            f: OpName::Acquire.as_str(),
            key: key.to_owned(),
            node: answered.node,
            ..Row::default()
        };
        match answered.result {
            Ok(token) => {
                row.token = Some(token);
                self.shared.record(self.process(), OpType::Ok, row);
                Some(token)
            }
            Err(error) => {
                self.complete_failed(row, &error);
                None
            }
        }
    }

    /// Records a failed op: `fail` when certain, else `info` and a new process id.
    fn complete_failed(&mut self, mut row: Row, error: &ClientError) {
        row.error = error_word(error);
        if error.is_definite() {
            self.shared.record(self.process(), OpType::Fail, row);
        } else {
            self.shared.record(self.process(), OpType::Info, row);
            self.retire();
        }
    }

    /// Holds `key` under `token`: writes, then releases, or lets the lease run out (and
    /// sometimes writes once more after it did).
    async fn hold(&mut self, client: &Client, key: &str, token: u64, lease_ms: u64) {
        let held_at = Instant::now();
        let writes = self.rng.range(1, 3);
        for _ in 0..writes {
            let pause = self.rng.range(5, (lease_ms / 4).max(6));
            tokio::time::sleep(Duration::from_millis(pause)).await;
            self.stall().await;
            self.write(key, token);
        }
        if self.rng.chance(1, 6) {
            // Use the key until just before the lease ends, then release: the release and
            // the leader's Expire of the same token race (a late Expire must not remove the
            // next holder's lock).
            let until = lease_ms.saturating_sub(self.rng.range(0, 40));
            tokio::time::sleep_until(held_at + Duration::from_millis(until)).await;
            self.release(client, key, token).await;
            return;
        }
        if self.rng.chance(1, 8) {
            // Let the lease run out; a late write must then be refused once a newer token
            // was accepted.
            tokio::time::sleep(Duration::from_millis(lease_ms + self.rng.range(50, 500))).await;
            self.write(key, token);
            return;
        }
        self.release(client, key, token).await;
    }

    /// Waits while this slot is stalled by `pause-clients` (bounded: the plan or the final
    /// heal always resumes it; the bound only keeps a lost resume from hanging the run).
    async fn stall(&self) {
        for _ in 0..STALL_STEPS_MAX {
            if !self.shared.paused_clients.borrow().contains(&self.slot) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn write(&mut self, key: &str, token: u64) {
        let value = format!("{}.{}", self.process, self.rng.below(1_000_000));
        self.shared.record(
            self.process(),
            OpType::Invoke,
            Row {
                f: OpName::Write.as_str(),
                key: key.to_owned(),
                value,
                token: Some(token),
                ..Row::default()
            },
        );
        let accepted = {
            let mut fenced = self.fenced.borrow_mut();
            let highest = fenced.entry(key.to_owned()).or_insert(0);
            if token >= *highest {
                *highest = token;
                true
            } else {
                false
            }
        };
        let row = Row {
            f: OpName::Write.as_str(),
            key: key.to_owned(),
            error: if accepted {
                ""
            } else {
                ErrorWord::StaleToken.as_str()
            },
            ..Row::default()
        };
        let op_type = if accepted { OpType::Ok } else { OpType::Fail };
        self.shared.record(self.process(), op_type, row);
    }

    async fn release(&mut self, client: &Client, key: &str, token: u64) -> bool {
        self.shared.record(
            self.process(),
            OpType::Invoke,
            Row {
                f: OpName::Release.as_str(),
                key: key.to_owned(),
                token: Some(token),
                ..Row::default()
            },
        );
        let deadline = Instant::now() + Duration::from_millis(OP_TIMEOUT_MS);
        let answered = client.release_traced(key, token, deadline).await;
        let row = Row {
            f: OpName::Release.as_str(),
            key: key.to_owned(),
            node: answered.node,
            ..Row::default()
        };
        match answered.result {
            Ok(()) => {
                self.shared.record(self.process(), OpType::Ok, row);
                true
            }
            Err(error) => {
                self.complete_failed(row, &error);
                false
            }
        }
    }

    /// A leaver: acquires with a long lease (trying once, or waiting half the time) and
    /// leaves at a random instant while the request may be in flight. Returns the client to
    /// go on with (a new one after a disconnect).
    async fn leave(&mut self, client: Client, key: &str) -> Client {
        let plan = LeavePlan {
            disconnect: self.rng.chance(1, 2),
            after_ms: self.rng.range(0, 40),
            wait_ms: if self.rng.chance(1, 2) {
                self.rng.range(500, 3_000)
            } else {
                0
            },
        };
        self.leave_as(client, key, plan).await.0
    }

    /// Acquires `key` with the leaver's lease and leaves as `plan` says, unless the answer
    /// comes first (then the grant is written to and released like any other). Returns the
    /// client to go on with and whether the client left.
    async fn leave_as(&mut self, client: Client, key: &str, plan: LeavePlan) -> (Client, bool) {
        let LeavePlan {
            disconnect,
            after_ms,
            wait_ms,
        } = plan;
        self.invoke_acquire(key, LEAVER_LEASE_MS, wait_ms);
        let deadline = Instant::now() + Duration::from_millis(wait_ms + OP_TIMEOUT_MS);
        let outcome = {
            let call = client.acquire_traced(key, LEAVER_LEASE_MS, wait_ms, deadline);
            tokio::pin!(call);
            tokio::select! {
                biased;
                answered = &mut call => Some(answered),
                () = tokio::time::sleep(Duration::from_millis(after_ms)) => None,
            }
        };
        let Some(answered) = outcome else {
            let row = Row {
                f: OpName::Acquire.as_str(),
                key: key.to_owned(),
                error: if disconnect {
                    "disconnected"
                } else {
                    "gave-up"
                },
                ..Row::default()
            };
            let client = if disconnect {
                drop(client);
                self.client_generation += 1;
                self.new_client()
            } else {
                client
            };
            self.shared.record(self.process(), OpType::Info, row);
            self.retire();
            return (client, true);
        };
        // The answer came before the client meant to leave: an ordinary acquire.
        if let Some(token) = self.complete_acquire(key, answered) {
            self.write(key, token);
            self.release(&client, key, token).await;
        }
        (client, false)
    }

    /// The recovery phase: acquire (waiting), write, release, until one cycle succeeds or
    /// the recovery bound passes.
    async fn recover(&mut self, client: Client) {
        let deadline = Instant::now() + Duration::from_millis(RECOVERY_MS);
        let key = format!("k{}", self.slot % self.workload.keys.max(1));
        while Instant::now() < deadline {
            if let Some(token) = self.acquire(&client, &key, 2_000, 1_000).await {
                self.write(&key, token);
                if self.release(&client, &key, token).await {
                    return;
                }
            } else {
                let pause = self.rng.range(20, 200);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
    }
}

/// How a leaver leaves.
#[derive(Clone, Copy, Debug)]
struct LeavePlan {
    /// Drop the whole client (`disconnected`), or only the request (`gave-up`).
    disconnect: bool,
    /// How long after the invoke, ms.
    after_ms: u64,
    /// The acquire's wait, ms (0: try once).
    wait_ms: u64,
}

/// The phantom-lock probe, as `locksmith test` runs it (`nemesis::workload::phantom_probe`):
/// after recovery, with no fault active, per key a holder takes the key, a waiter queues
/// behind it with a 20 s lease and leaves (gives up on even keys, disconnects on odd ones),
/// the holder releases [`PROBE_HOLD_AFTER_LEAVE_MS`] later, and
/// [`PROBE_DELAY_MS`] after the waiter left a third client tries the key.
/// A lock service that keeps the gone waiter's lock answers it `busy`: rule P.
async fn probe(
    shared: Rc<Shared>,
    fenced: Rc<RefCell<BTreeMap<String, u64>>>,
    cluster: Vec<SocketAddr>,
    workload: Workload,
) {
    let probes = (0..workload.keys).map(|i| {
        let worker = |j: u64| Worker {
            shared: shared.clone(),
            fenced: fenced.clone(),
            cluster: cluster.clone(),
            workload: workload.clone(),
            slot: workload.clients + 3 * i + j,
            process: PROBE_PROCESS_BASE + 10 * i + j,
            client_generation: 0,
            rng: Rng::derive(workload.seed, PROBE_STREAM, 3 * i + j),
        };
        let (holder, leaver, prober) = (worker(0), worker(1), worker(2));
        probe_key(format!("k{i}"), i % 2 == 1, holder, leaver, prober)
    });
    futures::future::join_all(probes).await;
}

const PROBE_STREAM: u64 = 0x009e_0be5;

async fn probe_key(
    key: String,
    disconnect: bool,
    mut holder: Worker,
    mut leaver: Worker,
    mut prober: Worker,
) {
    let holding = holder.new_client();
    let Some(token) = holder.acquire(&holding, &key, LEAVER_LEASE_MS, 2_000).await else {
        return;
    };
    let plan = LeavePlan {
        disconnect,
        after_ms: 300,
        wait_ms: 10_000,
    };
    let leaving = leaver.new_client();
    let (leaving, left) = leaver.leave_as(leaving, &key, plan).await;
    drop(leaving);
    if left {
        tokio::time::sleep(Duration::from_millis(PROBE_HOLD_AFTER_LEAVE_MS)).await;
    }
    holder.release(&holding, &key, token).await;
    let after_leave = PROBE_DELAY_MS.saturating_sub(PROBE_HOLD_AFTER_LEAVE_MS);
    tokio::time::sleep(Duration::from_millis(after_leave)).await;
    let probing = prober.new_client();
    if let Some(token) = prober.acquire(&probing, &key, 1_000, 0).await {
        prober.release(&probing, &key, token).await;
    }
}

/// The acquire invoke's value: `LEASE_MS`, or `LEASE_MS WAIT_MS` for one that waits.
fn acquire_value(lease_ms: u64, wait_ms: u64) -> String {
    AcquireValue::new(lease_ms, wait_ms).to_string()
}

/// The history's error word for a client error (the harness's mapping).
fn error_word(error: &ClientError) -> &'static str {
    crate::lockd_system::error_word(error).as_str()
}
