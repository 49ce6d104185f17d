//! What the soak watches from outside the nodes: each node's resident set size from
//! `/proc/PID/status`, the lines of its log that say a limit was hit, and the sizes of the
//! snapshot and log files in its data dir. Parsing is pure and tested here; reading is a
//! thin layer over it.

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::path::Path;

use crate::NodeId;

/// One KiB-valued field of `/proc/PID/status` (`VmRSS:`, `VmHWM:`), in KiB.
pub fn status_field_kib(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with(field))?;
    let mut words = line[field.len()..].split_whitespace();
    let value = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then_some(value)
}

/// A process's resident set size now and at its peak (Linux's `VmRSS` and `VmHWM`), in KiB;
/// `None` when the process is gone or the fields are missing.
pub fn read_rss(pid: u32) -> Option<Rss> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(Rss {
        now_kib: status_field_kib(&status, "VmRSS:")?,
        peak_kib: status_field_kib(&status, "VmHWM:")?,
    })
}

/// One reading of a process's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rss {
    /// Resident now (`VmRSS`), KiB.
    pub now_kib: u64,
    /// The process's own high-water mark (`VmHWM`), KiB.
    pub peak_kib: u64,
}

/// The memory of each node over the soak, across its processes (a restarted node is a new
/// process with a high-water mark of its own).
#[derive(Clone, Debug, Default)]
pub struct RssTracker {
    nodes: BTreeMap<NodeId, NodeRss>,
}

/// One node's memory over the soak.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeRss {
    /// The highest `VmHWM` (or `VmRSS`) read from any of its processes, KiB.
    pub peak_kib: u64,
    /// The last `VmRSS` read, KiB.
    pub last_kib: u64,
    /// Readings taken.
    pub samples: u64,
    /// The processes read (pids), in the order first seen.
    pub pids: Vec<u32>,
}

impl RssTracker {
    /// Records one reading of node `node`'s process `pid`.
    pub fn record(&mut self, node: NodeId, pid: u32, rss: Rss) {
        let entry = self.nodes.entry(node).or_default();
        entry.peak_kib = entry.peak_kib.max(rss.peak_kib).max(rss.now_kib);
        entry.last_kib = rss.now_kib;
        entry.samples += 1;
        if !entry.pids.contains(&pid) {
            entry.pids.push(pid);
        }
    }

    /// Reads `pid` and records it; false when the process could not be read.
    pub fn sample(&mut self, node: NodeId, pid: u32) -> bool {
        match read_rss(pid) {
            Some(rss) => {
                self.record(node, pid, rss);
                true
            }
            None => false,
        }
    }

    /// Node `node`'s figures, if it was ever read.
    pub fn node(&self, node: NodeId) -> Option<&NodeRss> {
        self.nodes.get(&node)
    }
}

/// What a line of a node's log says was hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitPattern {
    /// The text that identifies it.
    pub needle: &'static str,
    /// What it means, for the report.
    pub what: &'static str,
    /// Whether it fails the soak (a frame or record limit, a panic, a storage failure); the
    /// others (a full peer queue, a connection refused at a bound) are reported as counts.
    pub fails: bool,
}

/// The lines that name a limit, as lockd and tarpc write them. The frame limit
/// (`lockd::rpc::FRAME_LEN_MAX`) is tokio-util's codec error, which tarpc logs at warn on
/// both ends ("Requests stream errored out: ..." at the receiver, "Connection broken: ..."
/// at a sender that refused to encode). The record limit (`lockd::storage::RECORD_BYTES_MAX`)
/// is storage's `InvalidPersist` ("the record is N bytes, more than 268435456") or, on read,
/// its `Corrupt` ("record length N out of range 1..=268435456"), each logged before the
/// node stops.
pub fn limit_patterns() -> Vec<LimitPattern> {
    vec![
        LimitPattern {
            needle: "frame size too big",
            what: "a frame past FRAME_LEN_MAX (16 MiB)",
            fails: true,
        },
        LimitPattern {
            needle: RECORD_ENCODE_NEEDLE,
            what: "a record past RECORD_BYTES_MAX (256 MiB) at write",
            fails: true,
        },
        LimitPattern {
            needle: RECORD_DECODE_NEEDLE,
            what: "a record length out of range at read",
            fails: true,
        },
        LimitPattern {
            needle: "panicked",
            what: "a panic",
            fails: true,
        },
        LimitPattern {
            needle: "storage failed",
            what: "a storage failure",
            fails: true,
        },
        LimitPattern {
            needle: "peer queue full",
            what: "a full peer queue (PEER_QUEUE_LEN; messages dropped, Raft resends)",
            fails: false,
        },
        LimitPattern {
            needle: "too many client connections",
            what: "a client connection closed at CLIENT_CONNECTIONS_MAX",
            fails: false,
        },
        LimitPattern {
            needle: "too many peer connections",
            what: "a peer connection closed at PEER_CONNECTIONS_MAX",
            fails: false,
        },
    ]
}

/// The storage error text of a record past the limit at write (`storage::encoding`).
const RECORD_ENCODE_NEEDLE: &str = "bytes, more than 268435456";
/// The storage error text of a record length past the limit at read (`storage::decoding`).
const RECORD_DECODE_NEEDLE: &str = "out of range 1..=268435456";

/// How often each pattern occurred in one log, with its first line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitHits {
    /// By pattern index into [`limit_patterns`]: count and first line.
    pub hits: BTreeMap<usize, (u64, String)>,
    /// Lines read.
    pub lines: u64,
}

impl LimitHits {
    /// Counts `line` against `patterns`.
    pub fn scan_line(&mut self, patterns: &[LimitPattern], line: &str) {
        self.lines += 1;
        for (index, pattern) in patterns.iter().enumerate() {
            if line.contains(pattern.needle) {
                let entry = self.hits.entry(index).or_insert((0, line.to_owned()));
                entry.0 += 1;
            }
        }
    }

    /// Whether a pattern that fails the soak occurred.
    pub fn fails(&self, patterns: &[LimitPattern]) -> bool {
        self.hits.keys().any(|index| patterns[*index].fails)
    }
}

/// Scans the log at `path` line by line (it may be hundreds of MB: every applied entry is a
/// line at lockd's default level).
pub fn scan_log(path: &Path, patterns: &[LimitPattern]) -> std::io::Result<LimitHits> {
    let file = std::fs::File::open(path)?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut hits = LimitHits::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(hits);
        }
        hits.scan_line(patterns, &String::from_utf8_lossy(&line));
    }
}

/// The sizes of what a node keeps on disk: the snapshot file (one storage record) and the
/// largest log segment (its checkpoint record is at most that).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskSizes {
    /// The `snapshot` file, bytes (0 when there is none).
    pub snapshot_bytes: u64,
    /// The largest `log/*.seg`, bytes.
    pub segment_bytes_max: u64,
}

/// Reads the sizes of `data_dir`'s snapshot and log segments (storage's format v1 layout).
pub fn disk_sizes(data_dir: &Path) -> DiskSizes {
    let size = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len());
    let segment_bytes_max = std::fs::read_dir(data_dir.join("log"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|e| e == "seg"))
        .map(|entry| size(&entry.path()))
        .max()
        .unwrap_or(0);
    DiskSizes {
        snapshot_bytes: size(&data_dir.join("snapshot")),
        segment_bytes_max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tlockd\nVmPeak:\t  900000 kB\nVmHWM:\t  123456 kB\n\
                          VmRSS:\t   65432 kB\nThreads:\t5\n";

    #[test]
    fn status_fields_are_read_in_kib() {
        // proc(5): VmHWM and VmRSS are "kB" (KiB) values; a field without the unit is refused.
        assert_eq!(status_field_kib(STATUS, "VmHWM:"), Some(123_456));
        assert_eq!(status_field_kib(STATUS, "VmRSS:"), Some(65_432));
        assert_eq!(status_field_kib(STATUS, "VmSwap:"), None);
        assert_eq!(status_field_kib(STATUS, "Threads:"), None);
    }

    #[test]
    fn a_node_peak_spans_its_processes() {
        // Soak rule: a restarted node's peak is the highest of every process it ran as.
        let mut tracker = RssTracker::default();
        let reading = |now_kib, peak_kib| Rss { now_kib, peak_kib };
        tracker.record(1, 100, reading(50, 80));
        tracker.record(1, 100, reading(40, 90));
        tracker.record(1, 200, reading(30, 30));
        let node = tracker.node(1).expect("node 1 was read");
        assert_eq!(node.peak_kib, 90);
        assert_eq!(node.last_kib, 30);
        assert_eq!(node.pids, vec![100, 200]);
        assert!(tracker.node(2).is_none());
    }

    #[test]
    fn the_scan_names_frame_and_record_limits_and_counts_the_rest() {
        // Issue 27: "no frame or record limit is hit"; the lines are what tarpc and storage
        // write (the needles match the constants they format).
        assert!(RECORD_ENCODE_NEEDLE.ends_with(&lockd::storage::RECORD_BYTES_MAX.to_string()));
        assert!(RECORD_DECODE_NEEDLE.ends_with(&lockd::storage::RECORD_BYTES_MAX.to_string()));
        let patterns = limit_patterns();
        let mut clean = LimitHits::default();
        clean.scan_line(&patterns, "INFO apply index=5 command=RegisterSession");
        clean.scan_line(&patterns, "WARN peer queue full; messages dropped");
        assert!(!clean.fails(&patterns), "{clean:?}");
        assert_eq!(clean.lines, 2);
        let mut hit = LimitHits::default();
        hit.scan_line(
            &patterns,
            "WARN tarpc::server: Requests stream errored out: frame size too big",
        );
        hit.scan_line(
            &patterns,
            "ERROR storage failed; stopping error=invalid persist: the record is 300000000 \
             bytes, more than 268435456",
        );
        assert!(hit.fails(&patterns));
        let named: Vec<&str> = hit.hits.keys().map(|i| patterns[*i].needle).collect();
        assert_eq!(
            named,
            vec!["frame size too big", RECORD_ENCODE_NEEDLE, "storage failed"]
        );
    }

    #[test]
    fn disk_sizes_read_the_snapshot_and_the_largest_segment() {
        // storage format v1: <dir>/snapshot and <dir>/log/<gen>.seg.
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("log")).expect("log dir");
        std::fs::write(dir.path().join("snapshot"), vec![0u8; 300]).expect("snapshot");
        std::fs::write(dir.path().join("log/1.seg"), vec![0u8; 10]).expect("segment 1");
        std::fs::write(dir.path().join("log/2.seg"), vec![0u8; 20]).expect("segment 2");
        std::fs::write(dir.path().join("log/3.seg.tmp"), vec![0u8; 99]).expect("tmp");
        let sizes = disk_sizes(dir.path());
        assert_eq!(sizes.snapshot_bytes, 300);
        assert_eq!(sizes.segment_bytes_max, 20);
        assert_eq!(disk_sizes(&dir.path().join("none")), DiskSizes::default());
    }
}
