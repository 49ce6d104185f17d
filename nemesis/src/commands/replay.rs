//! `locksmith model replay RUN_DIR`: trace validation. Reads `RUN_DIR/trace.jsonl`, or else
//! every node's `RUN_DIR/node-logs/n<ID>.trace.jsonl` (what `locksmith test --trace` writes),
//! or the file itself when RUN_DIR is a file (format in `lockd::trace`), feeds each node's recorded
//! inputs through a fresh real core built with the recorded configuration, and checks the
//! model's properties after every step (`checker::model::replay`). Exit 0 when the run is one
//! the model allows, 1 naming the first step that departs, 2 (unknown) when the trace cannot
//! be read, is malformed, holds no step, or lacks a member's records.

use std::path::PathBuf;
use std::process::ExitCode;

use nemesis::replay::replay_run;

/// `locksmith model replay ...`
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The run directory holding trace.jsonl (or a trace file).
    run_dir: PathBuf,
}

/// Runs the replay (`nemesis::replay`) and prints its report.
pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    // The replay catches a panicking core and reports it as the departure; the default hook
    // would also print it with a backtrace in the middle of the report.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let run = replay_run(&args.run_dir);
    std::panic::set_hook(hook);
    let run = run?;
    let report = &run.report;
    let names: Vec<String> = run.files.iter().map(|p| p.display().to_string()).collect();
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
    match &report.departure {
        None => {
            println!("result: the recorded run is one the model allows");
            Ok(ExitCode::SUCCESS)
        }
        Some(d) => {
            let place = run.place(d);
            if d.malformed {
                println!("MALFORMED at {place}: {}", d.reason);
                println!("result: unknown: the trace is not a run that can be replayed");
                return Ok(ExitCode::from(2));
            }
            println!("DEPARTS at {place}: {}", d.reason);
            if args.run_dir.is_dir() {
                let title = args.run_dir.display().to_string();
                let anchor = nemesis::replay::departure_anchor(d);
                match nemesis::replay::write_messages(&args.run_dir, &title, &anchor) {
                    Ok(path) => println!("messages: {}", path.display()),
                    Err(e) => println!("messages: not drawn: {e:#}"),
                }
            }
            println!("result: the recorded run is not one the model allows");
            Ok(ExitCode::from(1))
        }
    }
}
