//! `locksmith`: the harness's command line. One clap subcommand per `cmd_*.rs` module.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd_bench;

/// locksmith: a Jepsen-style harness for lock services.
#[derive(Debug, Parser)]
#[command(name = "locksmith", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Cycles per second, p50/p99 latency and leader failover, for lockd and etcd.
    Bench(cmd_bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => cmd_bench::run(args),
    }
}
