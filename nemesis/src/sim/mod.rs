//! `locksmith sim`: the whole of lockd under deterministic simulation.
//!
//! One seed is one run of the real lockd: the server's event loop, the client library, the
//! storage code, the Raft core and the lock table, each node a turmoil host on a simulated
//! network, clock and disk, all on one thread. Nothing of lockd is re-implemented: its
//! sockets and files go through `lockd::sys`, which turmoil answers inside a simulation.
//! The same seed gives the same run, byte for byte (`tests/sim.rs` checks the history).
//!
//! A run (see [`run_case`]):
//! 1. builds the simulation from the seed: message latency, host order, the disk, and the
//!    fault plan of `locksmith test` (`schedule::fault_plan`, the same `FaultOp`s and
//!    partition shapes as the real harness);
//! 2. runs the clients (`clients.rs`) while the driver (`driver.rs`) applies the plan
//!    between simulator steps: crash (unsynced writes lost) and restart, pause (the node's
//!    core stops and its links hold, so its timers fire late when it resumes), every
//!    partition shape, clock skew and strobe through `set_clock`, client stalls, netem's
//!    `slow` (turmoil link latency) and `flaky` (the node's peer links drop, reorder and
//!    duplicate Raft messages through `lockd::server::LinkFaults`);
//! 3. heals everything at the end of the fault phase, records `recover`, and lets each
//!    client succeed once more;
//! 4. checks the history with `checker::check` (linearizability, fencing, lease safety,
//!    liveness), and makes a node that exited on its own part of the verdict.
//!
//! `shrink.rs` looks for a smaller failing case (fewer faults, a shorter run, fewer
//! clients); `cmd.rs` runs many seeds on every core and writes the store of a failing one.

pub mod clients;
pub mod cmd;
mod driver;
pub mod shrink;

use std::collections::BTreeSet;
use std::fmt::Write as _;

use checker::{Check, Verdict};
use history::Op;
use lockd::bugs::Bug;

use crate::faults::FaultKind;
use crate::schedule::Planned;

pub use driver::run_case;

/// One simulated run: everything that decides it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimCase {
    /// The seed: the whole run follows from it and the fields below.
    pub seed: u64,
    /// Cluster size.
    pub nodes: u64,
    /// Client slots.
    pub clients: u64,
    /// Keys.
    pub keys: u64,
    /// Length of the fault phase, simulated seconds.
    pub time_s: u64,
    /// An injected bug of lockd.
    pub bug: Option<Bug>,
    /// The fault kinds in the plan.
    pub nemesis: Vec<FaultKind>,
    /// Planned fault ops (indexes into the plan) left out, for shrinking.
    pub drop_faults: BTreeSet<usize>,
    /// Keep the nodes' logs (a rerun of a failing seed; slower).
    pub logs: bool,
    /// Where the nodes' traces go (`locksmith sim --trace DIR`): this seed's nodes write
    /// `DIR/seed-S/node-logs/nI.trace.jsonl` (`lockd::trace`, on the real disk), which
    /// `locksmith model replay DIR/seed-S` feeds through the model. Writing them changes
    /// nothing in the simulated run.
    pub trace_root: Option<std::path::PathBuf>,
}

impl SimCase {
    /// The default case for `seed`: 5 nodes, 10 clients, 4 keys, 30 simulated seconds, every
    /// fault kind, netem's included (`slow` and `flaky`, which `locksmith test` uses only with
    /// `--hosts`).
    pub fn new(seed: u64) -> Self {
        SimCase {
            seed,
            nodes: 5,
            clients: 10,
            keys: 4,
            time_s: 30,
            bug: None,
            nemesis: crate::netem::default_kinds_with_hosts(),
            drop_faults: BTreeSet::new(),
            logs: false,
            trace_root: None,
        }
    }

    /// This seed's trace folder, when traces are on.
    pub fn trace_dir(&self) -> Option<std::path::PathBuf> {
        self.trace_root
            .as_ref()
            .map(|root| root.join(format!("seed-{}", self.seed)))
    }

    /// The command that reruns exactly this case.
    pub fn rerun_command(&self) -> String {
        let mut line = format!("locksmith sim --seeds {}", self.seed);
        let default = SimCase::new(self.seed);
        if self.nodes != default.nodes {
            let _ = write!(line, " --nodes {}", self.nodes);
        }
        if self.clients != default.clients {
            let _ = write!(line, " --clients {}", self.clients);
        }
        if self.keys != default.keys {
            let _ = write!(line, " --keys {}", self.keys);
        }
        if self.time_s != default.time_s {
            let _ = write!(line, " --time-s {}", self.time_s);
        }
        if self.nemesis != default.nemesis {
            let kinds: Vec<&str> = self.nemesis.iter().map(|k| k.name()).collect();
            let _ = write!(line, " --nemesis {}", kinds.join(","));
        }
        if let Some(bug) = self.bug {
            let _ = write!(line, " --bug {}", bug.name());
        }
        if !self.drop_faults.is_empty() {
            let dropped: Vec<String> = self.drop_faults.iter().map(|i| i.to_string()).collect();
            let _ = write!(line, " --drop-faults {}", dropped.join(","));
        }
        if let Some(root) = &self.trace_root {
            let _ = write!(line, " --trace {}", root.display());
        }
        line
    }
}

/// What one simulated run gave.
#[derive(Debug)]
pub struct CaseResult {
    /// The case.
    pub case: SimCase,
    /// The recorded history.
    pub ops: Vec<Op>,
    /// The checks, with node health merged in.
    pub check: Check,
    /// The fault plan (before `drop_faults`), for `plan.txt` and shrinking.
    pub plan: Vec<Planned>,
    /// What each applied fault did, in order (`at_ms verb value: outcome`).
    pub faults: Vec<String>,
    /// The nodes' log, when `case.logs` was set (one line per event, node and simulated
    /// time first).
    pub logs: Option<String>,
    /// Simulated milliseconds the run took.
    pub sim_ms: u64,
}

impl CaseResult {
    /// The merged verdict.
    pub fn verdict(&self) -> &Verdict {
        &self.check.verdict
    }
}

/// The history as CSV schema v1 bytes (what `history.csv` holds).
pub fn history_csv(ops: &[Op]) -> Vec<u8> {
    let mut writer = match history::csv::Writer::new(Vec::new()) {
        Ok(writer) => writer,
        Err(_) => return Vec::new(),
    };
    for op in ops {
        if writer.write(op).is_err() {
            break;
        }
    }
    writer.into_inner().unwrap_or_default()
}

/// A digest of the history's bytes (`LOCKSMITH_SIM_DIGESTS=1 locksmith sim` prints it per
/// seed, to compare two runs of the same seeds).
pub fn history_digest(ops: &[Op]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    history_csv(ops).hash(&mut hasher);
    hasher.finish()
}
