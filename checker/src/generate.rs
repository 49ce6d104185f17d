//! Synthetic lock histories from a seed: `locksmith gen lock`, and the benchmark's input.
//!
//! A simulated *correct* lock service: each client's op takes effect at one point inside
//! its interval; the points are applied in time order to a true lock table; tokens come
//! from one counter (with gaps). Clients try to acquire a random key, write to the fenced
//! resource with their token while holding, and release. A crashed acquire (probability
//! [`GenOptions::crash_rate`]) completes `info`: its grant may or may not have happened,
//! the service releases it later (lockd's phantom-lock release), and the client continues
//! under a new process id (Jepsen's rule). Ops still open at the end have no completion.
//!
//! [`Inject`] breaks the service once, near the middle of the history, so that the result
//! is invalid in a known way: `double-grant` grants a held key to a second client,
//! `stale-write` has a holder's write accepted with the key's previous token after a write
//! with its own.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::str::FromStr;

use history::{ErrorWord, Op, OpName, OpType, Process};

use crate::error::CheckError;

/// The anomaly a generated history carries, if any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Inject {
    /// None: the history is valid.
    #[default]
    Nothing,
    /// A held key is granted to a second client (linearizability and lease safety fail).
    DoubleGrant,
    /// A write with the key's previous token is accepted after one with a newer token
    /// (fencing fails).
    StaleWrite,
}

impl FromStr for Inject {
    type Err = CheckError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "double-grant" => Ok(Inject::DoubleGrant),
            "stale-write" => Ok(Inject::StaleWrite),
            "none" => Ok(Inject::Nothing),
            other => Err(CheckError::Usage(format!(
                "unknown anomaly `{other}` (expected double-grant, stale-write or none)"
            ))),
        }
    }
}

impl fmt::Display for Inject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Inject::Nothing => "none",
            Inject::DoubleGrant => "double-grant",
            Inject::StaleWrite => "stale-write",
        })
    }
}

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct GenOptions {
    /// Client operations (each an invoke and, mostly, a completion row).
    pub ops: usize,
    /// Lock keys, `k0`, `k1`, ...
    pub keys: usize,
    /// Concurrent clients.
    pub clients: u64,
    /// The fraction of acquires that crash (complete `info`), in `[0, 1]`.
    pub crash_rate: f64,
    /// The seed of every random choice.
    pub seed: u64,
    /// The anomaly to inject.
    pub inject: Inject,
    /// The lease of every acquire.
    pub lease_ms: u64,
}

impl GenOptions {
    /// `ops` operations over 100 keys, 20 clients, 0.5 % crashed acquires, valid.
    pub fn new(ops: usize, seed: u64) -> GenOptions {
        GenOptions {
            ops,
            keys: 100,
            clients: 20,
            crash_rate: 0.005,
            seed,
            inject: Inject::Nothing,
            lease_ms: 10_000,
        }
    }
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        lockd::rng::splitmix64(&mut self.0)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, p: f64) -> bool {
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        unit < p
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Held {
    Free,
    Token(u64),
    Phantom,
}

/// The simulation's state.
struct Sim {
    rng: Rng,
    options: GenOptions,
    table: Vec<Held>,
    /// The last token granted per key (for `stale-write`).
    last_token: Vec<u64>,
    /// The token granted before the last one, per key.
    previous_token: Vec<u64>,
    next_token: u64,
    process: Vec<u64>,
    holding: Vec<Option<(usize, u64)>>,
    invoke_at: Vec<u64>,
    /// (effect time, 0 = a client's op / 1 = phantom release, client or key).
    heap: BinaryHeap<Reverse<(u64, u64, u64)>>,
    /// (time, sequence, row).
    rows: Vec<(u64, u64, Op)>,
    injected: bool,
}

/// Generates a lock history (rows numbered and sorted by time). Panics never; a
/// `clients` or `keys` of 0 is taken as 1.
pub fn lock_history(options: &GenOptions) -> Vec<Op> {
    let clients = options.clients.max(1);
    let keys = options.keys.max(1);
    let mut sim = Sim {
        rng: Rng(options.seed),
        options: *options,
        table: vec![Held::Free; keys],
        last_token: vec![0; keys],
        previous_token: vec![0; keys],
        next_token: 1,
        process: (0..clients).collect(),
        holding: vec![None; clients as usize],
        invoke_at: vec![0; clients as usize],
        heap: BinaryHeap::new(),
        rows: Vec::with_capacity(options.ops * 2),
        injected: options.inject == Inject::Nothing,
    };
    for c in 0..clients {
        sim.invoke_at[c as usize] = sim.rng.below(1_000_000);
        let point = sim.invoke_at[c as usize] + sim.rng.below(2_000_000);
        sim.heap.push(Reverse((point, 0, c)));
    }
    let mut done = 0usize;
    while done < options.ops {
        let Reverse((point, kind, who)) = sim.heap.pop().expect("clients always have a next op");
        if kind == 1 {
            sim.table[who as usize] = Held::Free;
            continue;
        }
        let c = who as usize;
        let complete = point + sim.rng.below(2_000_000);
        sim.client_op(c, point, complete, done);
        done += 1;
        // Think, then the next op: its effect point is inside its own interval.
        let next_invoke = complete + sim.rng.below(3_000_000);
        sim.invoke_at[c] = next_invoke;
        let next_point = next_invoke + sim.rng.below(2_000_000);
        sim.heap.push(Reverse((next_point, 0, who)));
    }
    let mut rows = sim.rows;
    rows.sort_by_key(|(time, seq, _)| (*time, *seq));
    rows.into_iter()
        .enumerate()
        .map(|(i, (_, _, mut op))| {
            op.index = i as u64;
            op
        })
        .collect()
}

impl Sim {
    fn push(&mut self, c: usize, time: u64, op_type: OpType, f: OpName, key: usize, cells: Cells) {
        let seq = self.rows.len() as u64;
        let op = Op {
            index: 0,
            time_ns: time,
            process: Process::Client(self.process[c]),
            op_type,
            f: f.to_string(),
            key: format!("k{key}"),
            value: cells.value,
            token: cells.token,
            node: String::new(),
            error: cells
                .error
                .map(|w| w.as_str().to_owned())
                .unwrap_or_default(),
        };
        self.rows.push((time, seq, op));
    }

    fn client_op(&mut self, c: usize, point: u64, complete: u64, done: usize) {
        let invoke = self.invoke_at[c];
        let inject_now = !self.injected && done >= self.options.ops / 2;
        if let Some((key, token)) = self.holding[c].filter(|_| self.rng.below(2) == 0) {
            // A fenced write with the held token: accepted, since tokens of a key only grow.
            self.push(
                c,
                invoke,
                OpType::Invoke,
                OpName::Write,
                key,
                Cells::new(done.to_string(), Some(token), None),
            );
            self.push(c, complete, OpType::Ok, OpName::Write, key, Cells::none());
            let previous = self.last_token_before(key, token);
            if inject_now && self.options.inject == Inject::StaleWrite && previous.is_some() {
                self.injected = true;
                let (at, end) = (complete + 1, complete + 2);
                self.push(
                    c,
                    at,
                    OpType::Invoke,
                    OpName::Write,
                    key,
                    Cells::new("stale".into(), previous, None),
                );
                self.push(c, end, OpType::Ok, OpName::Write, key, Cells::none());
            }
        } else if let Some((key, token)) = self.holding[c] {
            if self.table[key] == Held::Token(token) {
                self.table[key] = Held::Free;
            }
            self.holding[c] = None;
            self.push(
                c,
                invoke,
                OpType::Invoke,
                OpName::Release,
                key,
                Cells::new(String::new(), Some(token), None),
            );
            self.push(c, complete, OpType::Ok, OpName::Release, key, Cells::none());
        } else {
            self.acquire(c, point, complete, inject_now);
        }
    }

    /// The token of `key` granted before `token`, if any.
    fn last_token_before(&self, key: usize, token: u64) -> Option<u64> {
        let previous = self.previous_token[key];
        (previous != 0 && previous < token).then_some(previous)
    }

    fn acquire(&mut self, c: usize, point: u64, complete: u64, inject_now: bool) {
        let key = self.rng.below(self.options.keys.max(1) as u64) as usize;
        let invoke = self.invoke_at[c];
        let lease = self.options.lease_ms.to_string();
        self.push(
            c,
            invoke,
            OpType::Invoke,
            OpName::Acquire,
            key,
            Cells::new(lease, None, None),
        );
        let crashed = self.rng.chance(self.options.crash_rate);
        let double = inject_now
            && self.options.inject == Inject::DoubleGrant
            && matches!(self.table[key], Held::Token(_));
        if self.table[key] == Held::Free || double {
            if double {
                // The first holder never learns: it keeps its grant and never releases it,
                // so the two grants overlap whatever order a checker tries.
                self.injected = true;
                for holding in &mut self.holding {
                    if holding.is_some_and(|(k, _)| k == key) {
                        *holding = None;
                    }
                }
            }
            let token = self.next_token;
            self.next_token += 1 + self.rng.below(3);
            if crashed {
                // The answer is lost; the service releases the phantom grant later.
                self.table[key] = Held::Phantom;
                let at = point + self.rng.below(50_000_000);
                self.heap.push(Reverse((at, 1, key as u64)));
            } else {
                self.previous_token[key] = self.last_token[key];
                self.last_token[key] = token;
                self.table[key] = Held::Token(token);
                self.holding[c] = Some((key, token));
                self.push(
                    c,
                    complete,
                    OpType::Ok,
                    OpName::Acquire,
                    key,
                    Cells::new(String::new(), Some(token), None),
                );
            }
        } else if !crashed {
            self.push(
                c,
                complete,
                OpType::Fail,
                OpName::Acquire,
                key,
                Cells::new(String::new(), None, Some(ErrorWord::Busy)),
            );
        }
        if crashed {
            self.push(
                c,
                complete,
                OpType::Info,
                OpName::Acquire,
                key,
                Cells::new(String::new(), None, Some(ErrorWord::Timeout)),
            );
            self.process[c] += self.options.clients.max(1);
        }
    }
}

/// The value, token and error cells of a generated row.
struct Cells {
    value: String,
    token: Option<u64>,
    error: Option<ErrorWord>,
}

impl Cells {
    fn new(value: String, token: Option<u64>, error: Option<ErrorWord>) -> Cells {
        Cells {
            value,
            token,
            error,
        }
    }

    fn none() -> Cells {
        Cells::new(String::new(), None, None)
    }
}

/// Writes a generated history as CSV schema v1 to `sink`; returns the rows written.
pub fn write_csv<W: std::io::Write>(ops: &[Op], sink: W) -> std::io::Result<usize> {
    let mut writer = history::csv::Writer::new(sink)?;
    for op in ops {
        writer.write(op)?;
    }
    writer.flush()?;
    Ok(ops.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Options, Verdict};

    fn verdict(inject: Inject, crash_rate: f64) -> crate::Check {
        let mut options = GenOptions::new(4_000, 7);
        options.inject = inject;
        options.crash_rate = crash_rate;
        options.keys = 5;
        let ops = lock_history(&options);
        crate::check(&ops, &Options::default()).unwrap()
    }

    #[test]
    fn generated_histories_have_the_verdict_asked_for() {
        // Issue 12 "gen lock": valid, or invalid by the injected anomaly.
        for crash_rate in [0.0, 0.005, 0.5] {
            let check = verdict(Inject::Nothing, crash_rate);
            assert_eq!(
                check.verdict,
                Verdict::Valid,
                "{crash_rate}: {}",
                check.explanation()
            );
        }
        let check = verdict(Inject::DoubleGrant, 0.005);
        assert_eq!(
            check
                .result(history::CheckName::Linearizability)
                .unwrap()
                .verdict,
            Verdict::Invalid
        );
        let check = verdict(Inject::StaleWrite, 0.005);
        assert_eq!(
            check.result(history::CheckName::Fencing).unwrap().verdict,
            Verdict::Invalid,
            "{}",
            check.explanation()
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_history() {
        let options = GenOptions::new(500, 42);
        assert_eq!(lock_history(&options), lock_history(&options));
        assert_ne!(
            lock_history(&options),
            lock_history(&GenOptions::new(500, 43))
        );
    }
}
