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
use checker::report::messages::{self, Anchor};
use checker::{Check, CheckResult, Verdict};
use history::CheckName;
use history::pair::Paired;
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

/// Reads every trace file of `run_dir` ([`trace_files`]) into one list of records.
fn read_traces(files: &[PathBuf]) -> anyhow::Result<(Vec<lockd::trace::TraceLine>, Vec<usize>)> {
    let mut lines = Vec::new();
    let mut starts = Vec::new();
    for path in files {
        let file = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
        starts.push(lines.len());
        lines.extend(read_trace(BufReader::new(file)).with_context(|| path.display().to_string())?);
    }
    Ok((lines, starts))
}

/// The file the message-flow diagram goes to, in a run dir.
pub const MESSAGES_FILE: &str = "messages.svg";

/// Draws the message-flow diagram of `run_dir`'s traces around `anchor`
/// (`checker::report::messages`) into `RUN_DIR/messages.svg`, and returns its path.
pub fn write_messages(run_dir: &Path, title: &str, anchor: &Anchor) -> anyhow::Result<PathBuf> {
    let (lines, _) = read_traces(&trace_files(run_dir)?)?;
    let svg = messages::render(title, &lines, anchor);
    let path = run_dir.join(MESSAGES_FILE);
    std::fs::write(&path, svg).with_context(|| format!("{}: cannot write", path.display()))?;
    Ok(path)
}

/// The diagram's anchor in a failing run: the first op a failing check of the history
/// names, else the step the trace replay refuses (the replay runs again, up to its
/// departure). `None` when neither names one.
pub fn failing_anchor(run_dir: &Path, paired: &Paired, check: &Check) -> Option<Anchor> {
    if let Some(anchor) = messages::anchor_of_check(paired, check) {
        return Some(anchor);
    }
    let replayed = check.result(CheckName::TraceReplay)?;
    if replayed.verdict != Verdict::Invalid {
        return None;
    }
    let departure = replay_run(run_dir).ok()?.report.departure?;
    Some(departure_anchor(&departure))
}

/// The diagram's anchor at a replay's departure.
pub fn departure_anchor(d: &Departure) -> Anchor {
    Anchor::Step {
        node: d.node,
        seq: d.seq,
        reason: d.reason.clone(),
    }
}

/// Whether `run_dir` holds traces of its nodes.
pub fn has_traces(run_dir: &Path) -> bool {
    run_dir.join("trace.jsonl").is_file()
        || std::fs::read_dir(run_dir.join("node-logs")).is_ok_and(|d| {
            d.filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().ends_with(".trace.jsonl"))
        })
}

/// Copies the nodes' trace files of `from` (a folder holding `node-logs/`) into `to`'s
/// `node-logs/`, so that a store holds what its diagram and `locksmith model replay` read.
pub fn copy_traces(from: &Path, to: &Path) -> std::io::Result<()> {
    let Ok(entries) = std::fs::read_dir(from.join("node-logs")) else {
        return Ok(());
    };
    std::fs::create_dir_all(to.join("node-logs"))?;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().ends_with(".trace.jsonl") {
            std::fs::copy(entry.path(), to.join("node-logs").join(&name))?;
        }
    }
    Ok(())
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
    /// The records replayed, every file's in turn, in parts (a file's, or a simulated
    /// node's turns): [`RunReplay::lines`] reads them as one sequence.
    parts: Vec<Vec<lockd::trace::TraceLine>>,
}

/// Reads `run_dir`'s traces and replays them. Per-node files are replayed one after the
/// other. Each node's own lines keep their order; the checks across nodes (Election Safety,
/// Log Matching, Leader Completeness, State Machine Safety) hold of every pair of states a
/// correct run ever passes through, not only of simultaneous ones, so they apply to any such
/// interleaving. A core that panics is the departure; the panic hook still runs.
pub fn replay_run(run_dir: &Path) -> anyhow::Result<RunReplay> {
    let files = trace_files(run_dir)?;
    let (lines, starts) = read_traces(&files)?;
    let report = replay(&lines);
    Ok(RunReplay {
        files,
        starts,
        report,
        parts: vec![lines],
    })
}

/// As [`replay_run`], of traces held in memory (a simulated seed's, `lockd::trace::
/// MemoryTrace`): `traces` are `(file, lines)` in node order, each named by the file it is
/// written to when kept, the lines in the turns they were traced in. A node without lines is
/// left out, as a node without a file is.
pub fn replay_lines(traces: Vec<(PathBuf, Vec<Vec<lockd::trace::TraceLine>>)>) -> RunReplay {
    let (mut files, mut starts, mut parts) = (Vec::new(), Vec::new(), Vec::new());
    // Replayed where they lie, in their turns: gathered into one vector, the copy and its
    // fresh pages were 2-3 % of a simulated seed's CPU (perf, seeds 1..20).
    let mut count = 0;
    for (file, turns) in traces {
        let lines: usize = turns.iter().map(Vec::len).sum();
        if lines == 0 {
            continue;
        }
        files.push(file);
        starts.push(count);
        count += lines;
        parts.extend(turns);
    }
    let report = checker::model::replay::replay_each(parts.iter().flatten());
    RunReplay {
        files,
        starts,
        report,
        parts,
    }
}

/// A trace file as the run's store names it: `node-logs/nI.trace.jsonl` (a simulated seed's
/// traces lie in a temporary folder that is gone when its verdict is printed; the store
/// keeps the copy), else the path as given.
fn shown(file: &Path) -> String {
    let parent = file.parent().and_then(|p| p.file_name());
    match (parent, file.file_name()) {
        (Some(dir), Some(name)) if dir == "node-logs" => {
            format!("node-logs/{}", name.to_string_lossy())
        }
        _ => file.display().to_string(),
    }
}

impl RunReplay {
    /// Every record replayed, every file's in turn.
    pub fn lines(&self) -> impl Iterator<Item = &lockd::trace::TraceLine> + Clone {
        self.parts.iter().flatten()
    }

    /// Writes each file's records to it (JSON lines, `lockd::trace`): the files of traces
    /// that were replayed from memory ([`replay_lines`]).
    pub fn write_files(&self) -> std::io::Result<()> {
        use lockd::trace::TraceOut as _;
        use std::io::Write as _;
        let ends = self
            .starts
            .iter()
            .skip(1)
            .copied()
            .chain([self.lines().count()]);
        for ((file, start), end) in self.files.iter().zip(&self.starts).zip(ends) {
            let context =
                |e: std::io::Error| std::io::Error::other(format!("{}: {e}", file.display()));
            if let Some(dir) = file.parent() {
                std::fs::create_dir_all(dir).map_err(context)?;
            }
            let mut out = std::io::BufWriter::new(File::create(file).map_err(context)?);
            for line in self.lines().skip(*start).take(end - start) {
                out.put(line.clone()).map_err(context)?;
            }
            out.flush().map_err(context)?;
        }
        Ok(())
    }

    /// Where a departure is: its file, the record's number within it, the node and step.
    pub fn place(&self, d: &Departure) -> String {
        let at = self.starts.iter().rposition(|s| *s < d.record).unwrap_or(0);
        format!(
            "record {} of {} (node {}, step {})",
            d.record - self.starts.get(at).copied().unwrap_or(0),
            self.files.get(at).map_or(String::new(), |f| shown(f)),
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
