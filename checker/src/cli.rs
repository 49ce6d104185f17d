//! What `locksmith check` and `locksmith convert` need of the checker: reading a CSV
//! history for checking (the compact store's one pass, or the paired operations), the files
//! a path names, the foreign formats, and `convert`'s work. The rest of `check` is not here:
//! the one pipeline from a history to a typed report is `nemesis::store::pipeline`, and the
//! command around it (batches, text and JSON output, exit codes) is `nemesis::check`.

use std::io::Write;
use std::path::{Path, PathBuf};

use history::Op;
use history::pair::Paired;

use crate::compact::FastCheck;
use crate::{Check, CheckError, Options};

/// The exit code of a run that could not happen (bad file, bad argument).
pub const EXIT_COULD_NOT_RUN: i32 = 2;

/// Reads a CSV history; a bad file gives `FILE:line:column: reason`.
pub fn read_history(path: &Path) -> Result<Vec<Op>, CheckError> {
    history::csv::read_path(path).map_err(|source| CheckError::Parse {
        path: path.display().to_string(),
        source,
    })
}

/// Reads a CSV history straight into paired operations (the history is never held twice);
/// a bad file gives `FILE:line:column: reason`.
pub fn read_paired(path: &Path) -> Result<Paired, CheckError> {
    history::csv::read_paired_path(path).map_err(|source| CheckError::Parse {
        path: path.display().to_string(),
        source,
    })
}

/// A CSV history read for checking by [`read_for_check`].
pub enum ReadForCheck {
    /// A lock history the compact store decided in its one pass ([`crate::compact`]): its
    /// paired operations were never built.
    Decided(FastCheck),
    /// Any other history: its paired operations, not yet checked.
    Paired(Paired),
}

/// Reads a CSV history as `locksmith check` does: a lock history the compact store can
/// decide on its own ([`crate::compact`]) is checked on the way and never builds its paired
/// operations, unless `keep_paired` (a report draws them); every other history is read into
/// its paired operations, for [`crate::check_paired`].
pub fn read_for_check(
    path: &Path,
    options: &Options,
    keep_paired: bool,
) -> Result<ReadForCheck, CheckError> {
    let fast = if keep_paired {
        None
    } else {
        crate::compact::check_file(path, options)
    };
    match fast {
        Some(fast) => Ok(ReadForCheck::Decided(fast)),
        None => read_paired(path).map(ReadForCheck::Paired),
    }
}

/// Reads and checks a CSV history ([`read_for_check`], then [`crate::check_paired`]).
/// Returns the check and the history's client operations.
pub fn check_path(path: &Path, options: &Options) -> Result<(Check, usize), CheckError> {
    Ok(match read_for_check(path, options, false)? {
        ReadForCheck::Decided(fast) => (fast.check, fast.operations),
        ReadForCheck::Paired(paired) => (
            crate::check_paired(&paired, options),
            paired.operations.len(),
        ),
    })
}

/// The files `paths` name: each file as given, each folder's `*.csv` files (recursively,
/// sorted by path).
pub fn expand_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CheckError> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found = Vec::new();
            collect_csv(path, &mut found)?;
            found.sort();
            out.extend(found);
        } else {
            out.push(path.clone());
        }
    }
    Ok(out)
}

fn collect_csv(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), CheckError> {
    let io = |source| CheckError::Io {
        path: dir.display().to_string(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_dir() {
            collect_csv(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "csv") {
            out.push(path);
        }
    }
    Ok(())
}

/// The foreign formats `locksmith convert --from` knows.
pub const CONVERT_FORMATS: [&str; 3] = ["jepsen-edn", "porcupine-etcd", "porcupine-kv"];

/// Converts a foreign history's text into ops of schema v1.
pub fn convert_text(from: &str, text: &str) -> Result<Vec<Op>, CheckError> {
    let converted = match from {
        "jepsen-edn" => history::convert::jepsen_edn::convert(text),
        "porcupine-etcd" => history::convert::porcupine_etcd::convert(text),
        "porcupine-kv" => history::convert::porcupine_kv::convert(text),
        other => {
            return Err(CheckError::Usage(format!(
                "unknown format `{other}` (expected {})",
                CONVERT_FORMATS.join(", ")
            )));
        }
    };
    converted.map_err(|e| CheckError::Convert(e.to_string()))
}

/// Runs `locksmith convert`: 0 when written, 2 otherwise (the error goes to `err`).
pub fn run_convert(from: &str, input: &Path, output: &Path, err: &mut dyn Write) -> i32 {
    let run = || -> Result<usize, CheckError> {
        let io = |path: &Path, source| CheckError::Io {
            path: path.display().to_string(),
            source,
        };
        let text = std::fs::read_to_string(input).map_err(|e| io(input, e))?;
        let ops = convert_text(from, &text).map_err(|e| match e {
            CheckError::Convert(message) => {
                CheckError::Convert(format!("{}: {message}", input.display()))
            }
            other => other,
        })?;
        let options = history::csv::WriterOptions::default();
        let mut writer =
            history::csv::Writer::create(output, options).map_err(|e| io(output, e))?;
        for op in &ops {
            writer.write(op).map_err(|e| io(output, e))?;
        }
        writer.flush().map_err(|e| io(output, e))?;
        Ok(ops.len())
    };
    match run() {
        Ok(n) => {
            let _ = writeln!(err, "wrote {n} rows to {}", output.display());
            0
        }
        Err(error) => {
            let _ = writeln!(err, "{error}");
            EXIT_COULD_NOT_RUN
        }
    }
}
