//! `locksmith model replay RUN_DIR`: trace validation. Reads `RUN_DIR/trace.jsonl`, or else
//! every node's `RUN_DIR/node-logs/n<ID>.trace.jsonl` (what `locksmith test --trace` writes),
//! or the file itself when RUN_DIR is a file (format in `lockd::trace`), feeds each node's recorded
//! inputs through a fresh real core built with the recorded configuration, and checks the
//! model's properties after every step (`checker::model::replay`). Exit 0 when the run is one
//! the model allows, 1 naming the first step that departs, 2 (unknown) when the trace cannot
//! be read, is malformed, holds no step, or lacks a member's records.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use checker::model::replay::replay;
use lockd::trace::read_trace;

/// `locksmith model replay ...`
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The run directory holding trace.jsonl (or a trace file).
    run_dir: PathBuf,
}

/// The trace files of a run: `RUN_DIR/trace.jsonl` (one file, as the model records), else
/// the nodes' own files in `RUN_DIR/node-logs/` in node order, else RUN_DIR itself as a file.
fn trace_files(run_dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
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

/// Runs the replay.
///
/// Per-node files are replayed one after the other. Each node's own lines keep their order;
/// the checks across nodes (Election Safety, Log Matching, Leader Completeness, State Machine
/// Safety) hold of every pair of states a correct run ever passes through, not only of
/// simultaneous ones, so they apply to any such interleaving.
pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let files = trace_files(&args.run_dir)?;
    let mut lines = Vec::new();
    // Where each file's records start among all records, to name a departure's file.
    let mut starts = Vec::new();
    for path in &files {
        let file = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
        starts.push(lines.len());
        lines.extend(read_trace(BufReader::new(file)).with_context(|| path.display().to_string())?);
    }
    // The replay catches a panicking core and reports it as the departure; the default hook
    // would also print it with a backtrace in the middle of the report.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let report = replay(&lines);
    std::panic::set_hook(hook);
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    // The nodes' files are replayed one after the other, so a departure stops the count
    // short of the nodes after it.
    let upto = if report.departure.is_some() {
        " up to the departure"
    } else {
        ""
    };
    println!(
        "replayed {} steps of {} node(s){upto} from {}",
        report.steps,
        report.nodes,
        names.join(", ")
    );
    if !report.unmatched_senders.is_empty() {
        println!(
            "note: node(s) {:?} recorded steps without their outputs: the messages received \
             from them were not matched to a send",
            report.unmatched_senders
        );
    }
    if let Some(why) = report.unknown() {
        println!("result: unknown: {why}");
        return Ok(ExitCode::from(2));
    }
    match report.departure {
        None => {
            println!("result: the recorded run is one the model allows");
            Ok(ExitCode::SUCCESS)
        }
        Some(d) => {
            // The file holding the record, and the record's number within it.
            let at = starts.iter().rposition(|s| *s < d.record).unwrap_or(0);
            let place = format!(
                "record {} of {} (node {}, step {})",
                d.record - starts.get(at).copied().unwrap_or(0),
                files[at].display(),
                d.node,
                d.seq,
            );
            if d.malformed {
                println!("MALFORMED at {place}: {}", d.reason);
                println!("result: unknown: the trace is not a run that can be replayed");
                return Ok(ExitCode::from(2));
            }
            println!("DEPARTS at {place}: {}", d.reason);
            println!("result: the recorded run is not one the model allows");
            Ok(ExitCode::from(1))
        }
    }
}
