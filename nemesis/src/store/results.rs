//! results.json: everything a run produced, written from [`Results`] and read back as it by
//! every reader (the summary, JUnit, `locksmith serve`, the simulator's parent). A
//! simulated seed and a chaos run write the same schema; what one world does not have is
//! `null` (a chaos run's `simulated_ms`, a simulated run's `teardown_error`).

use std::collections::BTreeMap;

use checker::Verdict;
use serde::{Deserialize, Serialize};

use crate::cluster::NodeStats;
use crate::harness::{Execution, TestOptions};

/// results.json.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    /// The seed.
    pub seed: u64,
    /// `lockd`, `etcd`.
    pub system: String,
    /// The test's name.
    pub test: String,
    /// `processes` (a chaos run) or `simulation` (a simulated seed).
    pub world: String,
    /// The options.
    pub options: TestOptions,
    /// The merged verdict (`"verdict": "valid"`, and `"reason"` when unknown).
    #[serde(flatten)]
    pub verdict: Verdict,
    /// 0, 1 or 2.
    pub exit_code: i32,
    /// Every check's result; `null` when the history could not be read.
    pub checks: Option<checker::Check>,
    /// The checks' explanation in words (empty when valid).
    pub explanation: String,
    /// Reports (timeline, plot) that could not be written.
    pub report_errors: Vec<String>,
    /// Op counts.
    pub ops: OpCounts,
    /// Fault counts and notes.
    pub faults: FaultSummary,
    /// The recovery phase.
    pub recovery: RecoverySummary,
    /// Per node: starts, kills, pauses, exits, uptime.
    pub nodes: Vec<NodeStats>,
    /// Nodes that stopped without a kill, with how and the tail of their log.
    pub nodes_exited_on_their_own: Vec<String>,
    /// What went wrong tearing down, if anything.
    pub teardown_error: Option<String>,
    /// Wall time of the run, ms.
    pub duration_ms: u64,
    /// Simulated time of the run, ms (a simulated seed only).
    pub simulated_ms: Option<u64>,
    /// The commands that run this case again: `locksmith sim ...` for a simulated seed, and
    /// `locksmith test ...`, which tries the same options and fault plan on real processes.
    pub rerun: Vec<String>,
}

/// Op counts of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OpCounts {
    /// History rows.
    pub rows: u64,
    /// Completed client ops.
    pub completed: u64,
    /// ok completions.
    pub ok: u64,
    /// fail completions.
    pub fail: u64,
    /// info completions.
    pub info: u64,
}

/// Fault counts of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultSummary {
    /// Faults that acted, by kind.
    pub by_kind: BTreeMap<String, u64>,
    /// Faults that acted, by verb and target spec or shape.
    pub by_detail: BTreeMap<String, u64>,
    /// Fault ops performed (starts and ends).
    pub ops: u64,
    /// Fault ops that failed.
    pub failed: u64,
    /// Faults that failed or did nothing, and nodes never acted on, in words.
    pub notes: Vec<String>,
}

/// The recovery phase of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RecoverySummary {
    /// Every slot succeeded again.
    pub recovered: bool,
    /// The slots that did.
    pub slots_recovered: Vec<u64>,
    /// All slots.
    pub slots: u64,
    /// How long the phase took, ms.
    pub duration_ms: u64,
    /// Keys the phantom-lock probe ran on (0 when the system has no phantom release).
    pub phantom_probe_keys: u64,
}

impl Results {
    /// The results of an executed run, before its checks: the checks' fields are empty and
    /// the verdict valid until [`Results::judge`] sets them.
    pub fn of(
        options: &TestOptions,
        system: &str,
        world: &str,
        execution: &Execution,
        rows: u64,
    ) -> Results {
        use std::sync::atomic::Ordering::Relaxed;
        let counts = &execution.counts;
        let phase = &execution.phase;
        let mut notes: Vec<String> = counts
            .failures
            .iter()
            .chain(counts.no_targets.iter())
            .cloned()
            .collect();
        if !options.nemesis.is_empty() {
            let untouched: Vec<String> = (1..=options.nodes)
                .filter(|n| !counts.touched.contains(n))
                .map(|n| format!("n{n}"))
                .collect();
            if !untouched.is_empty() {
                notes.push(format!(
                    "the nemesis never acted on {}",
                    untouched.join(", ")
                ));
            }
        }
        Results {
            seed: options.seed,
            system: system.to_owned(),
            test: options.test_name(system),
            world: world.to_owned(),
            options: options.clone(),
            verdict: Verdict::Valid,
            exit_code: 0,
            checks: None,
            explanation: String::new(),
            report_errors: Vec::new(),
            ops: OpCounts {
                rows,
                completed: phase.counters.ops.load(Relaxed),
                ok: phase.counters.ok.load(Relaxed),
                fail: phase.counters.fail.load(Relaxed),
                info: phase.counters.info.load(Relaxed),
            },
            faults: FaultSummary {
                by_kind: counts.by_kind.clone(),
                by_detail: counts.by_detail.clone(),
                ops: counts.total,
                failed: counts.failed,
                notes,
            },
            recovery: RecoverySummary {
                recovered: phase.recovered_slots.len() as u64 == options.concurrency,
                slots_recovered: phase.recovered_slots.clone(),
                slots: options.concurrency,
                duration_ms: phase.recovery_ms,
                phantom_probe_keys: phase.probe_keys,
            },
            nodes: execution.node_stats.clone(),
            nodes_exited_on_their_own: execution.exited.clone(),
            teardown_error: None,
            duration_ms: 0,
            simulated_ms: None,
            rerun: vec![options.test_command()],
        }
    }

    /// Sets the checks' outcome, and merges the run's own verdict: a run whose clients did
    /// not all succeed again after the heal is not a pass (Invalid > Unknown > Valid).
    pub fn judge(&mut self, output: crate::store::pipeline::CheckOutput) {
        let mut verdict = output.verdict;
        if !self.recovery.recovered {
            verdict = verdict.merge(Verdict::unknown(format!(
                "only {} of {} client slots recovered within {} s after the heal",
                self.recovery.slots_recovered.len(),
                self.recovery.slots,
                self.options.recovery_s
            )));
        }
        self.exit_code = verdict.exit_code();
        self.verdict = verdict;
        self.checks = output.check;
        self.explanation = output.explanation;
        self.report_errors = output.report_errors;
    }
}
