//! Traces for trace validation (etcd's idea, STYLE.md practice 3): every [`Input`] a driver
//! steps into a node, one JSON line each, so that `locksmith model replay RUN_DIR` can feed
//! the same inputs through a fresh real core and check the model's properties after every
//! step.
//!
//! # Format (`trace.jsonl`, one object per line)
//!
//! ```text
//! {"node":1,"config":{...Config...}}                        once per node, before its inputs
//! {"node":1,"seq":0,"input":{...Input...}}                  one per Node::step
//! {"node":1,"seq":1,"input":{...},"output":{...}}           the output too, when recorded
//! {"node":1,"restart":{...Durable...},"now_ms":5000}        Node::new after a crash
//! ```
//!
//! `seq` counts the node's steps from 0, and from 0 again after each start of its process
//! (its configuration and restart lines); replay takes a gap or a repeat for a malformed
//! trace. The lines of all nodes
//! may be interleaved in any order that keeps each node's own lines in order (one file
//! written by a simulator, or one per node concatenated). `output` is a digest of the step's
//! [`Output`] ([`OutputDigest`]): what was sent, applied and answered, which replay compares.
//!
//! The writer is plain `std::io::Write`: this module does no IO of its own beyond what its
//! caller hands it, so a simulator can trace into memory.

use std::io::{self, BufRead, Write};

use serde::{Deserialize, Serialize};

use crate::raft::{
    Committed, Config, Durable, Envelope, Input, NodeId, Output, RequestId, Response,
};

/// What a step sent, applied and answered: the parts of an [`Output`] that replay compares.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputDigest {
    /// `send_now` then `send_after_persist`.
    pub sent: Vec<Envelope>,
    /// Entries applied.
    pub applied: Vec<Committed>,
    /// Answers to clients.
    pub respond: Vec<(RequestId, Response)>,
    /// Whether anything was to be persisted.
    pub persisted: bool,
}

impl From<&Output> for OutputDigest {
    fn from(out: &Output) -> Self {
        OutputDigest {
            sent: out
                .send_now
                .iter()
                .chain(&out.send_after_persist)
                .cloned()
                .collect(),
            applied: out.apply.clone(),
            respond: out.respond.clone(),
            persisted: out.persist.is_some(),
        }
    }
}

/// One line of a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TraceLine {
    /// The node's configuration (before its first input).
    Config {
        /// The node.
        node: NodeId,
        /// Its configuration.
        config: Config,
    },
    /// One step.
    Step {
        /// The node.
        node: NodeId,
        /// The node's step number.
        seq: u64,
        /// What was stepped in.
        input: Input,
        /// What came out, when recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<OutputDigest>,
    },
    /// The node restarted (`Node::new`) from `restart` at `now_ms`.
    Restart {
        /// The node.
        node: NodeId,
        /// What storage loaded.
        restart: Durable,
        /// The clock at the restart.
        now_ms: u64,
    },
}

/// A trace that could not be read, with the line it failed at.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Reading failed.
    #[error("line {line}: {source}")]
    Io {
        /// The 1-based line.
        line: usize,
        /// The error.
        source: io::Error,
    },
    /// A line is not a trace record.
    #[error("line {line}: not a trace record: {reason}")]
    Parse {
        /// The 1-based line.
        line: usize,
        /// serde's reason.
        reason: String,
    },
}

/// Where a [`TraceWriter`] puts its lines: any `Write` gets JSON lines (the format above);
/// [`Lines`] keeps them as values.
pub trait TraceOut {
    /// Takes one line.
    fn put(&mut self, line: TraceLine) -> io::Result<()>;
}

impl<W: Write> TraceOut for W {
    fn put(&mut self, line: TraceLine) -> io::Result<()> {
        serde_json::to_writer(&mut *self, &line).map_err(io::Error::other)?;
        self.write_all(b"\n")
    }
}

/// Lines kept as values, not encoded: a simulator's trace, which its replay reads in the
/// same process (no JSON written and parsed back: most of a traced seed's cost).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lines(pub Vec<TraceLine>);

impl TraceOut for Lines {
    fn put(&mut self, line: TraceLine) -> io::Result<()> {
        self.0.push(line);
        Ok(())
    }
}

/// A trace in memory that outlives the node writing it (a simulated node's restarts append
/// to the same one, as a process appends to its file). Clones share the lines. Kept as the
/// turns' own vectors, moved in: one vector grown by doubling copied every line twice on
/// average and took fresh pages at each regrowth (1.6 % of a simulated seed's CPU, perf).
#[derive(Clone, Debug, Default)]
pub struct MemoryTrace {
    turns: std::sync::Arc<std::sync::Mutex<Vec<Vec<TraceLine>>>>,
}

impl MemoryTrace {
    /// An empty trace.
    pub fn new() -> Self {
        MemoryTrace::default()
    }

    /// Appends `lines` (a turn's, in order), leaving `lines` empty with its capacity: the
    /// next turn's lines go into the same buffer, and each turn is kept in one allocation of
    /// its size (taking the buffer made every turn grow a new one line by line, 1.3 % of a
    /// simulated seed's CPU, perf, seeds 1..40).
    pub fn append(&self, lines: &mut Vec<TraceLine>) {
        if !lines.is_empty() {
            let mut turn = Vec::with_capacity(lines.len());
            turn.append(lines);
            self.lock().push(turn);
        }
    }

    /// Every line so far, taken out (the trace is empty after).
    pub fn take(&self) -> Vec<TraceLine> {
        self.take_turns().into_iter().flatten().collect()
    }

    /// Every line so far, taken out in the turns they came in (the trace is empty after).
    pub fn take_turns(&self) -> Vec<Vec<TraceLine>> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<TraceLine>>> {
        self.turns.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Writes trace lines.
pub struct TraceWriter<W: TraceOut> {
    out: W,
    seq: std::collections::BTreeMap<NodeId, u64>,
}

impl<W: TraceOut> TraceWriter<W> {
    /// A writer into `out`.
    pub fn new(out: W) -> Self {
        TraceWriter {
            out,
            seq: Default::default(),
        }
    }

    /// Records node `config.id`'s configuration; call once before its first step.
    pub fn config(&mut self, config: &Config) -> io::Result<()> {
        self.out.put(TraceLine::Config {
            node: config.id,
            config: config.clone(),
        })
    }

    /// Records a restart of `node` from `durable` at `now_ms` (what `Node::new` was given).
    pub fn restart(&mut self, node: NodeId, durable: &Durable, now_ms: u64) -> io::Result<()> {
        self.out.put(TraceLine::Restart {
            node,
            restart: durable.clone(),
            now_ms,
        })
    }

    /// Records one `Node::step` of `node`: the input, and the output when given.
    pub fn step(&mut self, node: NodeId, input: &Input, output: Option<&Output>) -> io::Result<()> {
        self.step_owned(node, input.clone(), output)
    }

    /// As [`step`](Self::step), taking the input (no clone).
    pub fn step_owned(
        &mut self,
        node: NodeId,
        input: Input,
        output: Option<&Output>,
    ) -> io::Result<()> {
        let seq = self.seq.entry(node).or_insert(0);
        let line = TraceLine::Step {
            node,
            seq: *seq,
            input,
            output: output.map(OutputDigest::from),
        };
        *seq += 1;
        self.out.put(line)
    }

    /// The inner writer (a driver that traces into a buffer drains it after each turn).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }
}

impl<W: Write> TraceWriter<W> {
    /// Flushes and returns the inner writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Reads every line of a trace; empty lines are skipped.
pub fn read_trace(input: impl BufRead) -> Result<Vec<TraceLine>, TraceError> {
    let mut lines = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(|source| TraceError::Io {
            line: i + 1,
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let record = parse_line(&line).map_err(|e| TraceError::Parse {
            line: i + 1,
            reason: e.to_string(),
        })?;
        lines.push(record);
    }
    Ok(lines)
}

/// One line, read as the variant its keys name. Not through the untagged [`TraceLine`]:
/// serde buffers an untagged enum's input, and a buffered map key stays a string, so a map
/// keyed by numbers (the lock table's dedupe, keyed by client id, in a snapshot of a
/// `Restart` or of an `InstallSnapshot` input) would not read back.
fn parse_line(line: &str) -> Result<TraceLine, serde_json::Error> {
    use serde::de::IgnoredAny;
    #[derive(Deserialize)]
    struct Peek {
        config: Option<IgnoredAny>,
        restart: Option<IgnoredAny>,
    }
    #[derive(Deserialize)]
    struct ConfigLine {
        node: NodeId,
        config: Config,
    }
    #[derive(Deserialize)]
    struct StepLine {
        node: NodeId,
        seq: u64,
        input: Input,
        #[serde(default)]
        output: Option<OutputDigest>,
    }
    #[derive(Deserialize)]
    struct RestartLine {
        node: NodeId,
        restart: Durable,
        now_ms: u64,
    }
    let peek: Peek = serde_json::from_str(line)?;
    Ok(if peek.config.is_some() {
        let l: ConfigLine = serde_json::from_str(line)?;
        TraceLine::Config {
            node: l.node,
            config: l.config,
        }
    } else if peek.restart.is_some() {
        let l: RestartLine = serde_json::from_str(line)?;
        TraceLine::Restart {
            node: l.node,
            restart: l.restart,
            now_ms: l.now_ms,
        }
    } else {
        let l: StepLine = serde_json::from_str(line)?;
        TraceLine::Step {
            node: l.node,
            seq: l.seq,
            input: l.input,
            output: l.output,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_reads_back_as_written() {
        // Issue 14, trace validation: the writer's lines are what the reader returns.
        let config = Config::new(1, vec![1, 2, 3]);
        let mut w = TraceWriter::new(Vec::new());
        w.config(&config).unwrap();
        w.step(1, &Input::Tick { now_ms: 5 }, Some(&Output::default()))
            .unwrap();
        w.restart(1, &Durable::default(), 7).unwrap();
        w.step(1, &Input::Campaign, None).unwrap();
        let bytes = w.into_inner().unwrap();
        let lines = read_trace(bytes.as_slice()).unwrap();
        assert_eq!(lines.len(), 4);
        assert!(matches!(&lines[0], TraceLine::Config { node: 1, config: c } if *c == config));
        assert!(matches!(
            &lines[3],
            TraceLine::Step {
                seq: 1,
                output: None,
                ..
            }
        ));
    }

    #[test]
    fn a_memory_trace_holds_the_lines_a_file_would() {
        // The simulator's traces stay in memory; a failing seed's are written as files. The
        // two writers make the same lines, and the file reads back as the memory held them.
        let config = Config::new(2, vec![1, 2]);
        let inputs = [Input::Tick { now_ms: 5 }, Input::Campaign];
        let mut to_file = TraceWriter::new(Vec::new());
        let mut to_memory = TraceWriter::new(Lines::default());
        to_file.config(&config).unwrap();
        to_memory.config(&config).unwrap();
        for input in &inputs {
            to_file.step(2, input, Some(&Output::default())).unwrap();
            to_memory.step(2, input, Some(&Output::default())).unwrap();
        }
        let memory = MemoryTrace::new();
        memory.append(&mut to_memory.get_mut().0);
        assert!(
            to_memory.get_mut().0.is_empty(),
            "append drains the turn's lines"
        );
        let from_file = read_trace(to_file.into_inner().unwrap().as_slice()).unwrap();
        assert_eq!(from_file.len(), 3);
        assert_eq!(memory.take(), from_file);
        assert!(memory.take().is_empty(), "taken");
    }

    #[test]
    fn a_restart_from_a_snapshot_with_a_dedupe_table_reads_back() {
        // Found by `locksmith sim --trace` (seed 1, node 1's restart): the dedupe table is a
        // map keyed by client id, which JSON writes as a string key; read through the
        // untagged `TraceLine`, that key could not become a number again ("not a trace
        // record"), so no run whose node restarted from such a snapshot could be replayed.
        use crate::lock::{Command, LockTable, Origin, Proposal};
        let mut table = LockTable::new().with_session(7, 0);
        let grant = Proposal {
            origin: Some(Origin {
                session: 7,
                request: 1,
            }),
            command: Command::Grant {
                key: "k".to_owned(),
                lease_ms: 1000,
            },
            time_ms: 5,
        };
        table.apply_proposal(1, &grant);
        let durable = Durable {
            snapshot: Some(crate::raft::Snapshot {
                last_index: 1,
                last_term: 1,
                table,
            }),
            ..Durable::default()
        };
        let mut w = TraceWriter::new(Vec::new());
        w.restart(1, &durable, 9).unwrap();
        let bytes = w.into_inner().unwrap();
        let lines = read_trace(bytes.as_slice()).unwrap();
        assert!(
            matches!(&lines[..], [TraceLine::Restart { restart, now_ms: 9, .. }] if *restart == durable),
            "{lines:?}"
        );
    }

    #[test]
    fn a_bad_line_is_named() {
        // STYLE.md practice 12: bad input is a typed error with its line, never a panic.
        let err = read_trace("\n{\"node\":1}\n".as_bytes()).unwrap_err();
        assert!(err.to_string().starts_with("line 2:"), "{err}");
    }
}
