//! `locksmith`: the harness's command line. Each subcommand lives in its own `cmd_*.rs`
//! module; this file only parses and dispatches.

mod cmd_client;
mod cmd_test;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// locksmith: a Jepsen-style harness for lock services.
#[derive(Debug, Parser)]
#[command(name = "locksmith", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Talk to a running lockd cluster: acquire, release, status.
    Client(cmd_client::ClientArgs),
    /// Run a complete chaos test: cluster, clients, nemesis, heal, recovery, checks.
    Test(cmd_test::TestArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Client(args) => cmd_client::run(args),
        Command::Test(args) => cmd_test::run(args),
    }
}
