//! The recorder: one monotonic clock for the whole run, and the history written as CSV schema
//! v1 while the run goes, one flushed row at a time, so a crash keeps everything recorded so
//! far (DESIGN "Histories").
//!
//! Rows get their `index` and `time_ns` under one lock, so the file's order is the order of
//! the clock: `time_ns` never decreases. Every completion repeats its invoke's `f` and `key`.
//!
//! [`ProcessIds`] gives each client slot its process id, and a new one after an `info`
//! completion (the old id plus the number of slots, as in Jepsen), so that no process invokes
//! again after an `info`.

use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::Path;
use std::sync::Mutex;

use history::csv::WriterOptions;
use history::{Op, OpType, Process};
use tokio::time::Instant;

use crate::Error;

/// The fields of one row, without its index and time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Row {
    /// `acquire`, `release`, `write`, or a nemesis verb.
    pub f: String,
    /// The lock key.
    pub key: String,
    /// lease_ms, the value written, or the nemesis targets.
    pub value: String,
    /// The token, when there is one.
    pub token: Option<u64>,
    /// The node that answered.
    pub node: String,
    /// Why a fail or info happened.
    pub error: String,
}

struct Inner {
    /// The CSV file, written as the run goes; `None` records in memory only (a simulated
    /// seed, whose store is written only when it fails).
    writer: Option<history::csv::Writer<BufWriter<File>>>,
    ops: Vec<Op>,
    failed: Option<String>,
}

/// Records ops with one clock into a CSV file (flushed per row) and in memory.
pub struct Recorder {
    start: Instant,
    inner: Mutex<Inner>,
}

impl Recorder {
    /// Creates `path` and writes the header.
    pub fn create(path: &Path) -> Result<Recorder, Error> {
        let writer = history::csv::Writer::create(path, WriterOptions::flush_each_row())
            .map_err(|e| Error::History(format!("{}: create: {e}", path.display())))?;
        Ok(Recorder::with_writer(Some(writer)))
    }

    /// Records in memory only; the clock starts now.
    pub fn in_memory() -> Recorder {
        Recorder::with_writer(None)
    }

    fn with_writer(writer: Option<history::csv::Writer<BufWriter<File>>>) -> Recorder {
        Recorder {
            start: Instant::now(),
            inner: Mutex::new(Inner {
                writer,
                ops: Vec::new(),
                failed: None,
            }),
        }
    }

    /// Nanoseconds since the run started, on the run's one monotonic clock.
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The instant the run's clock started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Records one row now and returns it. A write error is kept and reported by
    /// [`Recorder::finish`]; recording goes on in memory so the run can end cleanly.
    pub fn record(&self, process: Process, op_type: OpType, row: Row) -> Op {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let op = Op {
            index: inner.ops.len() as u64,
            time_ns: self.now_ns(),
            process,
            op_type,
            f: row.f,
            key: row.key,
            value: row.value,
            token: row.token,
            node: row.node,
            error: row.error,
        };
        if inner.failed.is_none()
            && let Some(writer) = inner.writer.as_mut()
            && let Err(e) = write_row(writer, &op)
        {
            inner.failed = Some(format!("row {}: {e}", op.index));
        }
        inner.ops.push(op.clone());
        op
    }

    /// Records a nemesis row. Nemesis rows are always `info` (histories/README.md): one
    /// before the fault acts and one, with the same `f` and `value`, after it.
    pub fn nemesis(&self, f: history::FaultVerb, value: &str, error: &str) -> Op {
        let row = Row {
            f: f.as_str().to_owned(),
            value: value.to_owned(),
            error: error.to_owned(),
            ..Row::default()
        };
        self.record(Process::Nemesis, OpType::Info, row)
    }

    /// A copy of every op recorded so far.
    pub fn ops(&self) -> Vec<Op> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .ops
            .clone()
    }

    /// The number of rows recorded so far.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .ops
            .len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Flushes and reports the first write error, if any.
    pub fn finish(&self) -> Result<(), Error> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = inner.failed.take() {
            return Err(Error::History(e));
        }
        match inner.writer.as_mut() {
            Some(writer) => writer
                .flush()
                .map_err(|e| Error::History(format!("flush: {e}"))),
            None => Ok(()),
        }
    }
}

/// Writes one op as a schema-v1 row; the writer flushes it to the file before returning.
/// This is the one place that writes rows, so the format lives in `history::csv` only.
fn write_row(writer: &mut history::csv::Writer<BufWriter<File>>, op: &Op) -> Result<(), String> {
    writer.write(op).map_err(|e| e.to_string())
}

/// Process ids for client slots: slot `s` starts as process `s`; after an `info` it becomes
/// `s + slots`, then `s + 2*slots`, ... (never reused).
#[derive(Clone, Debug)]
pub struct ProcessIds {
    slots: u64,
    current: Vec<u64>,
}

impl ProcessIds {
    /// Ids for `slots` client slots.
    pub fn new(slots: u64) -> Self {
        ProcessIds {
            slots,
            current: (0..slots).collect(),
        }
    }

    /// The current process id of `slot`.
    pub fn get(&self, slot: usize) -> Process {
        Process::Client(self.current[slot])
    }

    /// Retires `slot`'s process after an `info` and returns its new one.
    pub fn retire(&mut self, slot: usize) -> Process {
        self.current[slot] += self.slots;
        Process::Client(self.current[slot])
    }
}

/// Writes any text file of the run directory (seed, plan, results) in one go.
pub fn write_file(path: &Path, contents: &str) -> Result<(), Error> {
    let mut f =
        File::create(path).map_err(|e| Error::Io(format!("{}: create: {e}", path.display())))?;
    f.write_all(contents.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| Error::Io(format!("{}: write: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_on_disk_before_finish_and_time_never_decreases() {
        // DESIGN "Histories": written while the run goes (flushed per row); one clock.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("history.csv");
        let rec = Recorder::create(&path).expect("create");
        let row = Row {
            f: "acquire".into(),
            key: "k0".into(),
            value: "1000".into(),
            ..Row::default()
        };
        rec.record(Process::Client(0), OpType::Invoke, row.clone());
        rec.record(
            Process::Client(0),
            OpType::Ok,
            Row {
                token: Some(3),
                node: "1".into(),
                ..row
            },
        );
        rec.nemesis(history::FaultVerb::Partition, "n1 n2 | n3 n4 n5", "");
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], history::csv::HEADER);
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[2].ends_with(",ok,acquire,k0,1000,3,1,"),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].contains(",nemesis,info,partition,,n1 n2 | n3 n4 n5,,,"),
            "{}",
            lines[3]
        );
        let ops = rec.ops();
        assert!(ops.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        assert_eq!(
            ops.iter().map(|o| o.index).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        rec.finish().expect("finish");
    }

    #[test]
    fn a_retired_process_gets_a_fresh_id() {
        // DESIGN "Histories": a client whose op ended info never invokes again under that id.
        let mut ids = ProcessIds::new(3);
        assert_eq!(ids.get(1), Process::Client(1));
        assert_eq!(ids.retire(1), Process::Client(4));
        assert_eq!(ids.retire(1), Process::Client(7));
        assert_eq!(ids.get(0), Process::Client(0));
    }
}
