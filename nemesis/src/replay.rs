//! Trace validation of a recorded run (issue 14): read the nodes' traces (`lockd::trace`) of
//! a run directory and replay them through fresh real cores under the model's checks
//! (`checker::model::replay`). Used by `locksmith model replay RUN_DIR`, and by
//! `locksmith test --trace` and `locksmith sim --trace DIR`, whose verdicts include the
//! replay as the check `trace replay`.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use checker::model::replay::{Departure, ReplayReport, replay};
use checker::{CheckResult, Verdict};
use history::CheckName;
use lockd::trace::read_trace;

/// The trace files of a run: `RUN_DIR/trace.jsonl` (one file, as the model records), else
/// the nodes' own files in `RUN_DIR/node-logs/` in node order, else RUN_DIR itself as a file.
pub fn trace_files(run_dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !run_dir.is_dir() {
        return Ok(vec![run_dir.to_path_buf()]);
    }
    let single = run_dir.join("trace.jsonl");
    if single.exists() {
        return Ok(vec![single]);
    }
    let logs = run_dir.join("node-logs");
    let mut nodes: Vec<(u64, PathBuf)> = std::fs::read_dir(&logs)
        .with_context(|| format!("{}: no trace.jsonl and no node-logs/", run_dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?;
            let id = name.strip_prefix('n')?.strip_suffix(".trace.jsonl")?;
            Some((id.parse().ok()?, path))
        })
        .collect();
    if nodes.is_empty() {
        bail!(
            "{}: no trace (run `locksmith test --trace` to record one)",
            logs.display()
        );
    }
    nodes.sort();
    Ok(nodes.into_iter().map(|(_, path)| path).collect())
}

/// A replayed run.
#[derive(Debug)]
pub struct RunReplay {
    /// The files replayed, in order.
    pub files: Vec<PathBuf>,
    /// Where each file's records start among all records.
    starts: Vec<usize>,
    /// What the replay found.
    pub report: ReplayReport,
}

/// Reads `run_dir`'s traces and replays them. Per-node files are replayed one after the
/// other. Each node's own lines keep their order; the checks across nodes (Election Safety,
/// Log Matching, Leader Completeness, State Machine Safety) hold of every pair of states a
/// correct run ever passes through, not only of simultaneous ones, so they apply to any such
/// interleaving. A core that panics is the departure; the panic hook still runs.
pub fn replay_run(run_dir: &Path) -> anyhow::Result<RunReplay> {
    let files = trace_files(run_dir)?;
    let mut lines = Vec::new();
    let mut starts = Vec::new();
    for path in &files {
        let file = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
        starts.push(lines.len());
        lines.extend(read_trace(BufReader::new(file)).with_context(|| path.display().to_string())?);
    }
    let report = replay(&lines);
    Ok(RunReplay {
        files,
        starts,
        report,
    })
}

impl RunReplay {
    /// Where a departure is: its file, the record's number within it, the node and step.
    pub fn place(&self, d: &Departure) -> String {
        let at = self.starts.iter().rposition(|s| *s < d.record).unwrap_or(0);
        format!(
            "record {} of {} (node {}, step {})",
            d.record - self.starts.get(at).copied().unwrap_or(0),
            self.files
                .get(at)
                .map_or(String::new(), |f| f.display().to_string()),
            d.node,
            d.seq,
        )
    }

    /// The replay as one check of a run: valid when the model allows the recorded run,
    /// invalid at the first departing step, unknown when the trace is malformed, holds no
    /// step or lacks a member's records.
    pub fn check_result(&self) -> CheckResult {
        if let Some(why) = self.report.unknown() {
            return CheckResult::new(CheckName::TraceReplay, Verdict::unknown(why));
        }
        match &self.report.departure {
            None => {
                let mut valid = CheckResult::new(CheckName::TraceReplay, Verdict::Valid);
                valid.explanation = Some(format!(
                    "{} steps of {} node(s) replayed, every one allowed by the model",
                    self.report.steps, self.report.nodes
                ));
                valid
            }
            Some(d) if d.malformed => CheckResult::new(
                CheckName::TraceReplay,
                Verdict::unknown(format!(
                    "the trace is malformed at {}: {}",
                    self.place(d),
                    d.reason
                )),
            ),
            Some(d) => CheckResult::invalid(
                CheckName::TraceReplay,
                format!(
                    "the recorded run is not one the model allows: {} departs ({} steps \
                     replayed): {}",
                    self.place(d),
                    self.report.steps,
                    d.reason
                ),
                Vec::new(),
            ),
        }
    }
}

/// The `trace replay` check of a run recorded with traces on: the replay's result, or
/// unknown when the traces cannot be read (a run that was asked to trace and left no trace
/// proves nothing about it).
pub fn check_run(run_dir: &Path) -> CheckResult {
    match replay_run(run_dir) {
        Ok(run) => run.check_result(),
        Err(e) => CheckResult::new(
            CheckName::TraceReplay,
            Verdict::unknown(format!("the traces cannot be replayed: {e:#}")),
        ),
    }
}
