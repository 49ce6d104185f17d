//! `locksmith`: the harness's command line. One plain subcommand enum; each variant's
//! arguments and work live in a `cmd_*.rs` module, and this file only parses and dispatches.
//! Exit codes (DESIGN.md): 0 valid / passed, 1 invalid (an anomaly found), 2 unknown or
//! could not run.

mod cmd_bench;
mod cmd_check;
mod cmd_client;
mod cmd_hosts;
mod cmd_model;
mod cmd_node;
mod cmd_replay;
mod cmd_serve;
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
    /// Check a CSV history: exit 0 valid, 1 invalid, 2 unknown or could not run.
    Check(cmd_check::CheckCommand),
    /// Convert a Jepsen or Porcupine history into CSV schema v1.
    Convert(cmd_check::ConvertCommand),
    /// Generate a synthetic history: `gen lock --ops N --seed S [--inject double-grant]`.
    Gen(cmd_check::GenCommand),
    /// Cycles per second, p50/p99 latency and leader failover, for lockd and etcd.
    Bench(cmd_bench::BenchArgs),
    /// Model-check the real Raft core and lock table with stateright.
    Model(cmd_model::ModelArgs),
    /// Deterministic simulation of the real lockd: many seeded runs, checked.
    Sim(nemesis::sim::cmd::SimArgs),
    /// Run one lockd node in this process (the same flags as the `lockd` binary).
    Node(cmd_node::NodeArgs),
    /// Browse the store's runs in a web browser (loopback by default).
    Serve(cmd_serve::ServeArgs),
    /// Namespace hosts with sshd on this machine for `test --hosts` (root): up N, down.
    Hosts(cmd_hosts::HostsArgs),
}

fn main() -> ExitCode {
    // clap exits with code 2 on bad arguments: DESIGN's "could not run".
    let cli = Cli::parse();
    match cli.command {
        Command::Client(args) => cmd_client::run(args),
        Command::Test(args) => cmd_test::run(args),
        Command::Check(command) => exit_code(cmd_check::check(command)),
        Command::Convert(command) => exit_code(cmd_check::convert(command)),
        Command::Gen(command) => exit_code(cmd_check::generate(command)),
        Command::Bench(args) => cmd_bench::run(args),
        Command::Sim(args) => exit_code(nemesis::sim::cmd::run(args)),
        Command::Node(args) => cmd_node::run(args),
        Command::Serve(args) => cmd_serve::run(args),
        Command::Hosts(args) => cmd_hosts::run(args),
        Command::Model(args) => match cmd_model::run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("locksmith: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(2))
}
