//! The schedule: a pure, seeded function of `(seed, logical step, completions so far)` that
//! says what each client does next and when each fault starts and stops (STYLE practice 11).
//!
//! Real time decides only *when* an op runs, never *which* op: a client's next op depends on
//! the seed, its slot, its step counter and the completion of its previous op; the fault plan
//! depends on the seed, the enabled fault kinds, the run length and the node count. So the
//! same seed gives the same schedule of ops and faults, and `tests/schedule.rs` pins golden
//! op lists the way `jepsen.generator.test/perfect` does.

use serde::Serialize;

use crate::faults::{self, FaultKind, FaultOp, VerbExt as _};
use crate::rng::Rng;

/// Stream ids for [`Rng::derive`], so the client and fault streams never share draws.
const CLIENT_STREAM: u64 = 1 << 32;
const FAULT_STREAM: u64 = 2 << 32;
/// The stream of the free-key and leaver draws (kept apart so that adding them left the
/// normal ops' draws unchanged).
const EXTRA_STREAM: u64 = 4 << 32;
/// The stream that picks the leader-targeted partition shape.
const LEADER_STREAM: u64 = 5 << 32;
/// The stream of the release-at-the-lease-end draws (apart, so the other draws stay).
const LATE_STREAM: u64 = 6 << 32;
/// The stream of the clock-ahead draws.
const AHEAD_STREAM: u64 = 7 << 32;
/// A late release is sent this many ms before the lease ends, at most.
const LATE_RELEASE_MARGIN_MS: u64 = 40;

/// The key that clients touch briefly and rarely, so that it is free most of the time: a
/// leader cut off while a key is free at it is what shows a leader that grants from its
/// own uncommitted log (`--bug stale-leader`).
pub const FREE_KEY: &str = "kf";
/// Lease of a free-key grant, ms: long enough that a stale grant at a deposed leader still
/// runs when the new leader grants the key again.
pub const FREE_KEY_LEASE_MS: (u64, u64) = (3_000, 5_000);
/// Shortest and longest lease a client asks for, ms, unless the options say otherwise.
pub const LEASE_MS_DEFAULT: (u64, u64) = (400, 1500);
/// Lease of a leaver's acquire, ms: longer than the phantom-release bound (3 s), shorter
/// than the recovery bound (10 s), so a leaver's lock kept by the lease backstop after a
/// fault (a legal end) cannot hold up recovery.
pub const LEAVER_LEASE_MS: u64 = 6_000;
/// How long a leaver waits for its key (it leaves well before).
pub const LEAVER_WAIT_MS: u64 = 5_000;

/// What the workload asks of its clients.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadConfig {
    /// The run's seed.
    pub seed: u64,
    /// The number of lock keys; client slot `s` works on key `s % keys` (per-key groups).
    pub keys: u32,
    /// Shortest and longest lease asked for, ms.
    pub lease_ms: (u64, u64),
    /// Longest wait of a waiting acquire, ms (half of the acquires try once, wait 0).
    pub wait_ms_max: u64,
    /// Shortest and longest pause between two ops of one client, ms.
    pub think_ms: (u64, u64),
    /// Percent of grants a client holds past its lease (110-160% of it), as a client that
    /// stalls (a GC pause) would: the fenced resource must then reject its late writes.
    pub overhold_percent: u64,
    /// Percent of grants held until just before their lease ends (within
    /// 40 ms) and then released: the release races the leader's Expire of the same token,
    /// and a late Expire must not remove the next holder's lock.
    pub late_release_percent: u64,
    /// Percent of idle steps that try the free key ([`FREE_KEY`]) instead of the slot's key.
    pub free_key_percent: u64,
    /// Percent of idle steps that leave mid-acquire (0 for systems that do not release the
    /// locks of clients that left, which the liveness check would rightly flag).
    pub leaver_percent: u64,
}

impl WorkloadConfig {
    /// Defaults for a seed and key count.
    pub fn new(seed: u64, keys: u32) -> Self {
        WorkloadConfig {
            seed,
            keys: keys.max(1),
            lease_ms: LEASE_MS_DEFAULT,
            wait_ms_max: 1000,
            think_ms: (10, 100),
            overhold_percent: 0,
            late_release_percent: 16,
            free_key_percent: 15,
            leaver_percent: 4,
        }
    }
}

/// One client operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum ClientOp {
    /// Acquire `key` for `lease_ms`, waiting up to `wait_ms` (0: try once).
    Acquire {
        /// The lock key.
        key: String,
        /// The lease asked for.
        lease_ms: u64,
        /// How long to wait for a held key.
        wait_ms: u64,
        /// Leave mid-acquire (a client that gives up or dies), or stay for the answer.
        leave: Option<Leave>,
    },
    /// Write `value` to the fenced resource `key`, carrying `token`.
    Write {
        /// The resource key (the lock's key).
        key: String,
        /// The value written (unique per op).
        value: String,
        /// The fencing token the client holds.
        token: u64,
    },
    /// Release `key` held under `token`.
    Release {
        /// The lock key.
        key: String,
        /// The token released.
        token: u64,
    },
}

impl ClientOp {
    /// A one-line spelling, used by golden tests and logs.
    pub fn describe(&self) -> String {
        match self {
            ClientOp::Acquire {
                key,
                lease_ms,
                wait_ms,
                leave,
            } => {
                let leave = leave.map_or(String::new(), |l| {
                    format!(" leave={}@{}ms", l.how.error_word(), l.after_ms)
                });
                format!("acquire {key} lease={lease_ms} wait={wait_ms}{leave}")
            }
            ClientOp::Write { key, value, token } => format!("write {key} {value} token={token}"),
            ClientOp::Release { key, token } => format!("release {key} token={token}"),
        }
    }
}

/// How a client leaves mid-acquire (recorded as the `info` error `gave-up` or
/// `disconnected`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LeaveHow {
    /// Cancel the request (drop its future): error `gave-up`.
    GiveUp,
    /// Close the connection: error `disconnected`.
    Disconnect,
    /// The client's process dies: its connection ends with no cancellation sent first
    /// (`LockClient::crash`), error `disconnected`. Only where another client holds the key
    /// until well after (the phantom-lock probe's witnessed round): without a witness a node
    /// cannot tell it from a client that read its grant and died.
    Crash,
}

/// A planned departure mid-acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Leave {
    /// How long after the invoke the client leaves, ms.
    pub after_ms: u64,
    /// How.
    pub how: LeaveHow,
}

impl LeaveHow {
    /// The error word of the `info` row.
    pub fn error_word(self) -> history::ErrorWord {
        match self {
            LeaveHow::GiveUp => history::ErrorWord::GaveUp,
            LeaveHow::Disconnect | LeaveHow::Crash => history::ErrorWord::Disconnected,
        }
    }
}

/// What the generator learns from a completion (all it needs to pick the next op).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// An acquire returned ok with this token.
    Acquired(u64),
    /// An acquire failed or ended info: the client does not hold the key.
    NotAcquired,
    /// A write or release completed (any outcome).
    Done,
}

/// One scheduled step: wait `think_ms`, then run `op`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    /// Pause before the op, ms.
    pub think_ms: u64,
    /// The op.
    pub op: ClientOp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    Holding {
        key: String,
        token: u64,
        writes_left: u32,
        gap_ms: u64,
    },
}

/// The generator of one client slot: acquire (try or wait), hold while writing to the fenced
/// resource, release; again. Sometimes it holds past its lease (`overhold_percent`), so
/// the fenced resource must reject its late writes once another client holds the key.
#[derive(Clone, Debug)]
pub struct ClientGen {
    config: WorkloadConfig,
    slot: u64,
    step: u64,
    phase: Phase,
    last_lease_ms: u64,
    last_key: String,
}

impl ClientGen {
    /// The generator of client slot `slot`.
    pub fn new(config: &WorkloadConfig, slot: u64) -> Self {
        ClientGen {
            config: config.clone(),
            slot,
            step: 0,
            phase: Phase::Idle,
            last_lease_ms: 0,
            last_key: String::new(),
        }
    }

    /// The key this slot works on.
    pub fn key(&self) -> String {
        format!("k{}", self.slot % u64::from(self.config.keys))
    }

    /// The next step, given how the previous op completed (`None` for the first).
    pub fn next(&mut self, last: Option<Completion>) -> Step {
        let mut rng = Rng::derive(self.config.seed, CLIENT_STREAM + self.slot, self.step);
        self.step += 1;
        if let (Phase::Idle, Some(Completion::Acquired(token))) = (&self.phase, last) {
            let lease = self.last_lease_ms.max(1);
            // Hold for 20-80% of the lease, or past it (110-160%) for overhold_percent of grants.
            let overhold = rng.chance(self.config.overhold_percent.min(100), 100);
            let percent = if overhold {
                rng.range(110, 160)
            } else {
                rng.range(20, 80)
            };
            let mut late = Rng::derive(self.config.seed, LATE_STREAM + self.slot, self.step);
            let hold_ms =
                if !overhold && late.chance(self.config.late_release_percent.min(100), 100) {
                    lease.saturating_sub(late.range(0, LATE_RELEASE_MARGIN_MS))
                } else {
                    lease * percent / 100
                };
            let writes = rng.range(1, 3) as u32;
            let gap_ms = hold_ms / (u64::from(writes) + 1);
            // The free key is held only for a moment: no writes, released at once.
            let free = self.last_key == FREE_KEY;
            self.phase = Phase::Holding {
                key: self.last_key.clone(),
                token,
                writes_left: if free { 0 } else { writes },
                gap_ms: if free { 0 } else { gap_ms },
            };
        }
        match self.phase.clone() {
            Phase::Idle => self.acquire(&mut rng),
            Phase::Holding {
                key,
                token,
                writes_left,
                gap_ms,
            } if writes_left > 0 => {
                self.phase = Phase::Holding {
                    key: key.clone(),
                    token,
                    writes_left: writes_left - 1,
                    gap_ms,
                };
                let value = format!("{}.{}", self.slot, self.step);
                Step {
                    think_ms: gap_ms,
                    op: ClientOp::Write { key, value, token },
                }
            }
            Phase::Holding {
                key, token, gap_ms, ..
            } => {
                self.phase = Phase::Idle;
                Step {
                    think_ms: gap_ms,
                    op: ClientOp::Release { key, token },
                }
            }
        }
    }

    fn acquire(&mut self, rng: &mut Rng) -> Step {
        let (low, high) = self.config.lease_ms;
        let lease_ms = rng.range(low, high.max(low));
        let wait_ms = if rng.chance(1, 2) {
            0
        } else {
            rng.range(50, self.config.wait_ms_max.max(50))
        };
        let (think_low, think_high) = self.config.think_ms;
        let think_ms = rng.range(think_low, think_high.max(think_low));
        let mut op = ClientOp::Acquire {
            key: self.key(),
            lease_ms,
            wait_ms,
            leave: None,
        };
        // Extra draws from their own stream: a try of the free key, or a leaver.
        let mut extra = Rng::derive(self.config.seed, EXTRA_STREAM + self.slot, self.step);
        let roll = extra.range(0, 99);
        if roll < self.config.free_key_percent {
            let (low, high) = FREE_KEY_LEASE_MS;
            op = ClientOp::Acquire {
                key: FREE_KEY.to_owned(),
                lease_ms: extra.range(low, high),
                wait_ms: 0,
                leave: None,
            };
        } else if roll < self.config.free_key_percent + self.config.leaver_percent {
            let how = if extra.chance(1, 2) {
                LeaveHow::GiveUp
            } else {
                LeaveHow::Disconnect
            };
            op = ClientOp::Acquire {
                key: self.key(),
                lease_ms: LEAVER_LEASE_MS,
                wait_ms: LEAVER_WAIT_MS,
                leave: Some(Leave {
                    after_ms: extra.range(100, 700),
                    how,
                }),
            };
        }
        if let ClientOp::Acquire { key, lease_ms, .. } = &op {
            self.last_lease_ms = *lease_ms;
            self.last_key = key.clone();
        }
        Step { think_ms, op }
    }
}

/// What the fault plan is built from.
#[derive(Clone, Debug, Serialize)]
pub struct FaultPlanConfig {
    /// The run's seed.
    pub seed: u64,
    /// The enabled fault kinds (`--nemesis`).
    pub kinds: Vec<FaultKind>,
    /// The length of the fault phase, ms.
    pub duration_ms: u64,
    /// The mean time between episodes, ms; 0: a twelfth of the fault phase, within 1-5 s.
    pub interval_ms: u64,
    /// Faults aimed at a lock without fencing tokens whose servers' clocks are wall clocks
    /// (Redlock): see [`Focus`].
    pub focus: Focus,
}

/// What the plan aims at beyond its seeded draw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Focus {
    /// The draw as it is.
    #[default]
    Draw,
    /// Redlock's two known failures (Kleppmann 2016), for systems whose clocks the harness
    /// moves through libfaketime and whose grants carry no token: the clock family's skews,
    /// and its first episode whatever it drew, jump a majority's clocks ahead
    /// ([`faults::clock::ahead`]), where lockd's lease clock only ever runs slow; and the
    /// first pause episode stalls clients (a lock holder in a GC pause) rather than nodes.
    WallClockLeases,
}

/// One planned fault op, `at_ms` after the run started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// When, ms since the start of the run.
    pub at_ms: u64,
    /// What.
    pub op: FaultOp,
}

/// The longest fault-free warm-up before the first fault, ms (lets a leader be elected).
pub const WARMUP_MS_MAX: u64 = 2_000;
/// No fault starts closer than this to the end of the fault phase, ms.
pub const TAIL_MS: u64 = 500;

/// The fault plan: episodes of the enabled kinds, each a start op and a stop op with a
/// recovery window after it; the first round runs every kind once in a seeded order, later
/// rounds draw kinds at random, and a quarter of the episodes overlap a second, different
/// kind inside the first (a combination). Sorted by time.
pub fn fault_plan(config: &FaultPlanConfig) -> Vec<Planned> {
    let mut plan = Vec::new();
    let kinds = &config.kinds;
    if kinds.is_empty() {
        return plan;
    }
    let interval = match config.interval_ms {
        0 => (config.duration_ms / 12).clamp(1_000, 5_000),
        ms => ms.max(10),
    };
    let end = config.duration_ms.saturating_sub(TAIL_MS);
    let mut first_round = kinds.clone();
    Rng::derive(config.seed, FAULT_STREAM, u64::MAX).shuffle(&mut first_round);
    let mut t = WARMUP_MS_MAX.min(config.duration_ms / 6);
    for episode_index in 0u64.. {
        let mut rng = Rng::derive(config.seed, FAULT_STREAM, episode_index);
        let kind = match first_round.get(episode_index as usize) {
            Some(k) => *k,
            None => *rng.pick(kinds).unwrap_or(&kinds[0]),
        };
        let active = rng.range(interval * 6 / 10, interval * 14 / 10);
        if t + active > end {
            break;
        }
        let (start, stop) = faults::episode(kind, &mut rng);
        plan.push(Planned {
            at_ms: t,
            op: start,
        });
        plan.push(Planned {
            at_ms: t + active,
            op: stop,
        });
        let others: Vec<FaultKind> = kinds.iter().copied().filter(|k| *k != kind).collect();
        if rng.chance(1, 4) && !others.is_empty() {
            let second = *rng.pick(&others).unwrap_or(&others[0]);
            let (start2, stop2) = faults::episode(second, &mut rng);
            plan.push(Planned {
                at_ms: t + active / 4,
                op: start2,
            });
            plan.push(Planned {
                at_ms: t + active * 3 / 4,
                op: stop2,
            });
        }
        t += active + rng.range(interval * 8 / 10, interval * 12 / 10);
    }
    plan.sort_by_key(|p| p.at_ms);
    target_the_leader(&mut plan, config.seed);
    if config.focus == Focus::WallClockLeases {
        aim_at_wall_clock_leases(&mut plan, config.seed);
    }
    plan
}

/// [`Focus::WallClockLeases`] on a sorted plan: every skew, and the first clock episode, jump
/// a majority's clocks ahead (drawn from a stream of their own, so that the rest of the plan
/// stays as it was); the first node pause and its resume stall and resume clients instead.
fn aim_at_wall_clock_leases(plan: &mut [Planned], seed: u64) {
    let mut first_clock = true;
    for (index, planned) in plan.iter_mut().enumerate() {
        let verb = planned.op.f;
        if verb == faults::Verb::Skew || (first_clock && verb == faults::Verb::Strobe) {
            let mut rng = Rng::derive(seed, AHEAD_STREAM, index as u64);
            planned.op = faults::clock::ahead(&mut rng);
        }
        first_clock &= !matches!(verb, faults::Verb::Skew | faults::Verb::Strobe);
    }
    let Some(first) = plan.iter().position(|p| p.op.f == faults::Verb::Pause) else {
        return;
    };
    // Its resume is the next resume: pauses of nodes never overlap one another (a
    // combination pairs two different kinds).
    let resume = plan[first..]
        .iter()
        .position(|p| p.op.f == faults::Verb::Resume)
        .map(|i| first + i);
    plan[first].op = faults::FaultOp::new(faults::Verb::PauseClients, faults::FaultValue::None);
    if let Some(resume) = resume {
        plan[resume].op =
            faults::FaultOp::new(faults::Verb::ResumeClients, faults::FaultValue::None);
    }
}

/// The first partition of every plan cuts the leader off (`isolate-leader`) or mutes it
/// (`leader-mute`), so every run has a fault that deposes the leader while the free key is
/// free at it; later partitions draw from every shape. Which of the two: seeded.
fn target_the_leader(plan: &mut [Planned], seed: u64) {
    let first = plan.iter_mut().find(|p| {
        p.op.f == faults::Verb::Partition && matches!(p.op.value, faults::FaultValue::Shape(_))
    });
    if let Some(planned) = first {
        let shapes = [faults::Shape::IsolateLeader, faults::Shape::LeaderMute];
        let mut rng = Rng::derive(seed, LEADER_STREAM, 0);
        let shape = *rng.pick(&shapes).unwrap_or(&shapes[0]);
        planned.op.value = faults::FaultValue::Shape(shape);
    }
}

/// The plan as text, one op per line (`at_ms verb value`), for `plan.txt` and golden tests.
pub fn describe_plan(plan: &[Planned]) -> String {
    plan.iter()
        .map(|p| {
            let line = format!("{:>6} {} {}", p.at_ms, p.op.f.name(), p.op.describe(&[]));
            format!("{}\n", line.trim_end())
        })
        .collect()
}
