//! Trace validation: a recorded run (`lockd::trace`) fed through fresh real cores, with the
//! model's checks after every step. A run the model allows passes every check; the first
//! step that does not is named.
//!
//! Checks after each step: the node's own invariants (`Node::check_invariants`), Election
//! Safety and Log Matching over every node, State Machine Safety and fencing tokens over a
//! ledger of every applied entry, Leader Completeness, "every `Granted` answer is backed by an
//! applied Grant with that token at the answering node" (what a client may believe it holds:
//! the model's "at most one holder" rests on it), and, when the trace recorded outputs, that
//! the replayed output is the recorded one.
//!
//! Recording from the model's own runs: [`record`] replays a run of the actor model with a
//! trace writer switched on in the server adapter, so tests can check replay on runs with and
//! without a bug.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;

use lockd::lock::Outcome;
use lockd::raft::invariants::{self, Ledger};
use lockd::raft::{Config, Durable, Input, Node, NodeId, Output, Response};
use lockd::trace::{OutputDigest, TraceLine, TraceWriter};

use super::LockdModel;
use super::simulate::Run;
use stateright::Model;

/// The first step of a trace the model does not allow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Departure {
    /// The node stepped.
    pub node: NodeId,
    /// Its step number.
    pub seq: u64,
    /// The trace line (1-based, counting records).
    pub record: usize,
    /// What went wrong, in words.
    pub reason: String,
}

/// What a replay found.
#[derive(Clone, Debug, Default)]
pub struct ReplayReport {
    /// Steps replayed.
    pub steps: u64,
    /// Nodes seen.
    pub nodes: usize,
    /// The first departure, if any.
    pub departure: Option<Departure>,
}

struct Replayed {
    nodes: BTreeMap<NodeId, Node>,
    configs: BTreeMap<NodeId, Config>,
    ledger: Ledger,
}

/// Replays `lines` (see the module doc).
pub fn replay(lines: &[TraceLine]) -> ReplayReport {
    let mut r = Replayed {
        nodes: BTreeMap::new(),
        configs: BTreeMap::new(),
        ledger: Ledger::new(),
    };
    let mut report = ReplayReport::default();
    for (i, line) in lines.iter().enumerate() {
        let (node, seq, result) = match line {
            TraceLine::Config { node, config } => {
                r.configs.insert(*node, config.clone());
                let started = start(&mut r, *node, Durable::default(), 0);
                (*node, 0, started)
            }
            TraceLine::Restart {
                node,
                restart,
                now_ms,
            } => (*node, 0, start(&mut r, *node, restart.clone(), *now_ms)),
            TraceLine::Step {
                node,
                seq,
                input,
                output,
            } => {
                report.steps += 1;
                (*node, *seq, step(&mut r, *node, input, output.as_ref()))
            }
        };
        if let Err(reason) = result.and_then(|()| check(&r)) {
            report.departure = Some(Departure {
                node,
                seq,
                record: i + 1,
                reason,
            });
            break;
        }
    }
    report.nodes = r.nodes.len();
    report
}

fn start(r: &mut Replayed, id: NodeId, durable: Durable, now_ms: u64) -> Result<(), String> {
    let config = r
        .configs
        .get(&id)
        .cloned()
        .ok_or_else(|| format!("node {id} starts before its configuration line"))?;
    let (node, out) =
        std::panic::catch_unwind(AssertUnwindSafe(|| Node::new(config, durable, now_ms)))
            .map_err(|_| format!("node {id}: Node::new panicked on the recorded storage"))?;
    record_applied(r, &node, &out)?;
    r.nodes.insert(id, node);
    Ok(())
}

fn step(
    r: &mut Replayed,
    id: NodeId,
    input: &Input,
    recorded: Option<&OutputDigest>,
) -> Result<(), String> {
    let node = r
        .nodes
        .get_mut(&id)
        .ok_or_else(|| format!("node {id} steps before its configuration line"))?;
    let out = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let out = node.step(input.clone());
        node.check_invariants();
        out
    }))
    .map_err(|e| {
        let why = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        format!("node {id}: the core panicked on {input:?}: {why}")
    })?;
    if let Some(recorded) = recorded {
        let replayed = OutputDigest::from(&out);
        if replayed != *recorded {
            return Err(format!(
                "node {id}: the recorded output differs from the real core's on {input:?}: \
                 recorded {recorded:?}, replayed {replayed:?}"
            ));
        }
    }
    let node = r.nodes.get(&id).cloned().ok_or("node vanished")?;
    record_applied(r, &node, &out)?;
    granted_is_backed(&node, &out)
}

fn record_applied(r: &mut Replayed, node: &Node, out: &Output) -> Result<(), String> {
    let status = node.status();
    for committed in &out.apply {
        r.ledger.record(status.id, status.term, committed)?;
    }
    Ok(())
}

/// A `Granted{token}` answer needs an applied Grant with that outcome at that token's index.
fn granted_is_backed(node: &Node, out: &Output) -> Result<(), String> {
    for (id, response) in &out.respond {
        let Response::Granted { token } = response else {
            continue;
        };
        // The core answers from the apply of the same step (a retry too: the dedupe table
        // gives the applied entry the first outcome).
        let backed = out
            .apply
            .iter()
            .any(|c| c.outcome == Outcome::Granted { token: *token });
        if !backed {
            return Err(format!(
                "node {} answered request {} Granted token {token} without an applied Grant \
                 of that token",
                node.status().id,
                id.0
            ));
        }
    }
    Ok(())
}

fn check(r: &Replayed) -> Result<(), String> {
    let nodes: Vec<&Node> = r.nodes.values().collect();
    invariants::election_safety(&nodes)?;
    invariants::log_matching(&nodes)?;
    invariants::leader_completeness(&nodes, &r.ledger)?;
    invariants::state_machine_safety(&nodes, &r.ledger)?;
    invariants::tokens_strictly_increase(&r.ledger)
}

thread_local! {
    /// The trace the server adapter writes while [`record`] runs (off otherwise).
    pub(crate) static RECORDING: RefCell<Option<TraceWriter<Vec<u8>>>> = const { RefCell::new(None) };
}

/// Writes `f(writer)` into the recording, when one is on (the server adapter calls it).
pub(crate) fn with_recording(f: impl FnOnce(&mut TraceWriter<Vec<u8>>)) {
    RECORDING.with(|r| {
        if let Some(w) = r.borrow_mut().as_mut() {
            f(w);
        }
    });
}

/// Re-runs `run` (a run of `model.actors`, for example a walk's) with recording on, and
/// returns the trace of every input the servers were stepped with, outputs included.
pub fn record(model: &LockdModel, run: &Run) -> Vec<TraceLine> {
    // Rebased clocks are the model's bookkeeping, not the node's: record absolute time.
    let mut cfg = model.cfg;
    cfg.relative_time = false;
    let model = cfg.into_model();
    let mut writer = TraceWriter::new(Vec::new());
    for i in 0..model.cfg.servers {
        let _ = writer.config(&model.cfg.node_config(i));
    }
    RECORDING.with(|r| *r.borrow_mut() = Some(writer));
    let mut state = model.actors.init_states().remove(0);
    for (_, action) in run {
        let Some(action) = action else { break };
        match model.actors.next_state(&state, action.clone()) {
            Some(next) => state = next,
            None => continue,
        }
    }
    let writer = RECORDING.with(|r| r.borrow_mut().take());
    let bytes = writer.and_then(|w| w.into_inner().ok()).unwrap_or_default();
    lockd::trace::read_trace(bytes.as_slice()).unwrap_or_default()
}
