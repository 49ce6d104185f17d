//! Porcupine's test histories, converted and checked: every verdict must match.
//!
//! Data source: anishathalye/porcupine v1.3.0 (commit 55508eb201b3), folder `test_data/`
//! (MIT, "Copyright (c) Anish Athalye"); the `jepsen/etcd_*.log` files come from
//! ahorn/linearizability-checker (Alex Horn, 2015). The verdicts are Porcupine's own test
//! assertions (`porcupine_test.go`), listed in `verdicts.csv`. The files are read from the
//! shared folder outside the repository (`<repo>/../shared/peer-histories/porcupine`, or
//! `$LOCKSMITH_SHARED/peer-histories/porcupine`) and are never copied into it. When the
//! folder is absent the test says that it skipped.

use std::time::Instant;

use checker::{ModelKind, Options, Verdict};

#[test]
fn every_porcupine_history_gets_porcupines_verdict() {
    // research/linearizability.md §5 goal 1: match every verdict in peer-histories/porcupine.
    let Some(dir) = checker::peer_data::porcupine_dir() else {
        eprintln!(
            "skipped: no peer-histories/porcupine (set LOCKSMITH_SHARED to the shared folder)"
        );
        return;
    };
    let verdicts = std::fs::read_to_string(dir.join("verdicts.csv")).unwrap();
    let mut checked = 0;
    let mut mismatches = Vec::new();
    for line in verdicts.lines().skip(1) {
        let fields: Vec<&str> = line.split(',').collect();
        let (file, model, expected) = (fields[0], fields[1], fields[2]);
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let (from, kind) = match model {
            "cas-register" => ("porcupine-etcd", ModelKind::Register),
            "kv-append" => ("porcupine-kv", ModelKind::Kv),
            other => panic!("{file}: unknown model {other}"),
        };
        let ops = checker::cli::convert_text(from, &text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let started = Instant::now();
        let check = checker::check(&ops, &Options::for_model(kind)).unwrap();
        let elapsed = started.elapsed();
        let want = if expected == "linearizable" {
            Verdict::Valid
        } else {
            Verdict::Invalid
        };
        if check.verdict != want {
            mismatches.push(format!(
                "{file}: {} but Porcupine says {expected}",
                check.verdict
            ));
        }
        checked += 1;
        eprintln!(
            "{file}: {} in {:.3} ms",
            check.verdict,
            elapsed.as_secs_f64() * 1e3
        );
    }
    assert_eq!(checked, 108, "verdicts.csv lists 108 files");
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
