//! Other tools' histories as users bring them: Jepsen's `history.edn`, Porcupine's logs,
//! and CSV written by hand in schema v1, each with the variants real writers produce.
//!
//! Rule (issue "hardening the checker against foreign histories"): never silently valid
//! (what the checker does not understand is `unknown` or an error naming the line), no
//! false alarm on a correct history, never a panic. Every input here is written for this
//! test; no third-party file is copied.

mod csv;
mod jepsen;
mod porcupine;

use std::path::Path;

use checker::{Check, ModelKind, Options, Verdict};
use history::CheckName;

/// Converts `text` from `from` and checks it as `locksmith check` does (`--model auto`,
/// through a file, so that the compact reader's fast path runs too).
pub fn convert_and_check(from: &str, text: &str) -> Result<Check, String> {
    let ops = checker::cli::convert_text(from, text).map_err(|e| e.to_string())?;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("converted.csv");
    let mut writer =
        history::csv::Writer::create(&path, history::csv::WriterOptions::default()).unwrap();
    for op in &ops {
        writer.write(op).unwrap();
    }
    writer.flush().unwrap();
    check_file(&path)
}

/// Checks CSV text as `locksmith check FILE` does (`--model auto`).
pub fn check_csv(text: impl AsRef<[u8]>) -> Result<Check, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.csv");
    std::fs::write(&path, text).unwrap();
    check_file(&path)
}

fn check_file(path: &Path) -> Result<Check, String> {
    let options = Options::for_model(ModelKind::Auto);
    checker::cli::check_path(path, &options)
        .map(|(check, _)| check)
        .map_err(|e| e.to_string())
}

/// The reason of an unknown verdict; panics on any other verdict.
pub fn unknown_reason(check: &Check) -> &str {
    match &check.verdict {
        Verdict::Unknown { reason } => reason,
        other => panic!("expected unknown, got {other}: {check:?}"),
    }
}

/// The verdict of one named check, if it ran.
pub fn result_of(check: &Check, name: CheckName) -> Option<&Verdict> {
    check.result(name).map(|r| &r.verdict)
}

/// The schema v1 header, then `rows`, one per line.
pub fn csv_text(rows: &[&str]) -> String {
    let mut text = format!("{}\n", history::csv::HEADER);
    for row in rows {
        text.push_str(row);
        text.push('\n');
    }
    text
}
