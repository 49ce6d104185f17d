//! Converts every file of Porcupine's test data and checks its op counts.
//!
//! Data source: anishathalye/porcupine v1.3.0 (commit 55508eb201b3), folder `test_data/`
//! (MIT, "Copyright (c) Anish Athalye"); the `jepsen/` logs come from
//! ahorn/linearizability-checker. The files are NOT in this repository: the test reads them
//! from `$LOCKSMITH_SHARED/peer-histories/porcupine/`, or `<repo>/../shared/...`, and says
//! that it skipped when neither exists. `verdicts.csv` there has, per file, the counts of
//! invokes (`ops`), of ok / fail / info completions, of timed-out reads, of processes, of
//! keys, and the most ops open at once, counted from the original files.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use history::convert::{porcupine_etcd, porcupine_kv};
use history::{Op, OpType, Process};

fn data_dir() -> Option<PathBuf> {
    let shared = match std::env::var_os("LOCKSMITH_SHARED") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared"),
    };
    let dir = shared.join("peer-histories/porcupine");
    dir.join("verdicts.csv").is_file().then_some(dir)
}

/// The facts verdicts.csv states about one file.
#[derive(Debug, PartialEq, Eq)]
struct Counts {
    ops: usize,
    ok: usize,
    fail: usize,
    info: usize,
    timed_out_reads: usize,
    processes: usize,
    max_open: usize,
    keys: usize,
}

fn count(ops: &[Op]) -> Counts {
    let mut counts = Counts {
        ops: 0,
        ok: 0,
        fail: 0,
        info: 0,
        timed_out_reads: 0,
        processes: 0,
        max_open: 0,
        keys: 0,
    };
    let mut processes = HashSet::new();
    let mut keys = HashSet::new();
    let mut open = 0usize;
    for op in ops {
        let Process::Client(process) = op.process else {
            continue;
        };
        processes.insert(process);
        keys.insert(op.key.clone());
        match op.op_type {
            OpType::Invoke => {
                counts.ops += 1;
                open += 1;
                counts.max_open = counts.max_open.max(open);
            }
            OpType::Ok => counts.ok += 1,
            OpType::Fail if op.f == "read" && op.error == "timed-out" => {
                counts.timed_out_reads += 1
            }
            OpType::Fail => counts.fail += 1,
            OpType::Info => counts.info += 1,
        }
        if op.op_type == OpType::Ok || op.op_type == OpType::Fail {
            open -= 1;
        }
    }
    counts.processes = processes.len();
    counts.keys = keys.len();
    counts
}

#[test]
fn every_porcupine_file_converts_with_the_stated_counts() {
    // Rule: DESIGN.md "Histories (CSV)": histories from other tools convert into schema v1.
    let Some(dir) = data_dir() else {
        println!("skipped: no peer-histories/porcupine (set LOCKSMITH_SHARED)");
        return;
    };
    let verdicts = std::fs::read_to_string(dir.join("verdicts.csv")).unwrap();
    let mut mismatches = BTreeMap::new();
    let mut checked = 0;
    for row in verdicts.lines().skip(1) {
        let cells: Vec<&str> = row.split(',').collect();
        let number = |i: usize| cells[i].parse::<usize>().unwrap();
        let expected = Counts {
            ops: number(3),
            ok: number(4),
            fail: number(5),
            info: number(6),
            timed_out_reads: number(7),
            processes: number(8),
            max_open: number(9),
            keys: number(10),
        };
        let text = std::fs::read_to_string(dir.join(cells[0])).unwrap();
        let ops = match cells[1] {
            "cas-register" => porcupine_etcd::convert(&text),
            "kv-append" => porcupine_kv::convert(&text),
            other => panic!("unknown model {other} in verdicts.csv"),
        }
        .unwrap_or_else(|e| panic!("{}: {e}", cells[0]));
        let found = count(&ops);
        if found != expected {
            mismatches.insert(cells[0].to_owned(), (expected, found));
        }
        checked += 1;
    }
    assert_eq!(checked, 108, "verdicts.csv should list 108 files");
    assert!(mismatches.is_empty(), "{mismatches:#?}");
    let empty =
        porcupine_etcd::convert(&std::fs::read_to_string(dir.join("jepsen/etcd_095.log")).unwrap())
            .unwrap();
    assert!(empty.is_empty());
}
