//! `locksmith model replay RUN_DIR`: trace validation. Reads `RUN_DIR/trace.jsonl` (or the
//! file itself when RUN_DIR is a file; format in `lockd::trace`), feeds each node's recorded
//! inputs through a fresh real core built with the recorded configuration, and checks the
//! model's properties after every step (`checker::model::replay`). Exit 0 when the run is one
//! the model allows, 1 naming the first step that departs, 2 when the trace cannot be read.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use checker::model::replay::replay;
use lockd::trace::read_trace;

/// `locksmith model replay ...`
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The run directory holding trace.jsonl (or a trace file).
    run_dir: PathBuf,
}

/// Runs the replay.
pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let path = if args.run_dir.is_dir() {
        args.run_dir.join("trace.jsonl")
    } else {
        args.run_dir.clone()
    };
    let file = File::open(&path).with_context(|| format!("{}: cannot open", path.display()))?;
    let lines = read_trace(BufReader::new(file)).with_context(|| path.display().to_string())?;
    let report = replay(&lines);
    println!(
        "replayed {} steps of {} node(s) from {}",
        report.steps,
        report.nodes,
        path.display()
    );
    match report.departure {
        None => {
            println!("result: the recorded run is one the model allows");
            Ok(ExitCode::SUCCESS)
        }
        Some(d) => {
            println!(
                "DEPARTS at record {} (node {}, step {}): {}",
                d.record, d.node, d.seq, d.reason
            );
            println!("result: the recorded run is not one the model allows");
            Ok(ExitCode::from(1))
        }
    }
}
