//! `locksmith`: the harness's command line. Each subcommand lives in its own `cmd_*.rs`
//! module; `main` only parses and dispatches. Exit codes (DESIGN.md): 0 valid / passed,
//! 1 invalid (an anomaly found), 2 unknown or could not run.

mod cmd_model;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A Jepsen-style harness for lock services.
#[derive(Parser, Debug)]
#[command(name = "locksmith", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Model-check the real Raft core and lock table with stateright.
    Model(cmd_model::ModelArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Model(args) => cmd_model::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("locksmith: {e:#}");
            ExitCode::from(2)
        }
    }
}
