//! `locksmith`: the harness's command line. One plain subcommand enum; each variant's
//! arguments and work live in a module of `commands/`, and this file only parses and dispatches.
//! Exit codes (DESIGN.md): 0 valid / passed, 1 invalid (an anomaly found), 2 unknown or
//! could not run.

mod commands;

use commands::{bench, check, client, hosts, model, node, serve, sim, test};

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
    Client(client::ClientArgs),
    /// Run a complete chaos test: cluster, clients, nemesis, heal, recovery, checks.
    Test(test::TestArgs),
    /// Check a CSV history: exit 0 valid, 1 invalid, 2 unknown or could not run.
    Check(check::CheckCommand),
    /// Convert a Jepsen or Porcupine history into CSV schema v1.
    Convert(check::ConvertCommand),
    /// Generate a synthetic history: `gen lock --ops N --seed S [--inject double-grant]`.
    Gen(check::GenCommand),
    /// Cycles per second, p50/p99 latency and leader failover, side by side; `--soak`: the
    /// cluster soak of lockd (a million sessions, held keys, memory, catch-up).
    Bench(bench::BenchArgs),
    /// Model-check the real Raft core and lock table with stateright.
    Model(model::ModelArgs),
    /// Deterministic simulation of the real lockd: many seeded runs, checked.
    Sim(sim::SimArgs),
    /// Run one lockd node in this process (the same flags as the `lockd` binary).
    Node(node::NodeArgs),
    /// Browse the store's runs in a web browser (loopback by default).
    Serve(serve::ServeArgs),
    /// Namespace hosts with sshd on this machine for `test --hosts` (root): up N, down.
    Hosts(hosts::HostsArgs),
}

fn main() -> ExitCode {
    // clap exits with code 2 on bad arguments: DESIGN's "could not run".
    let cli = Cli::parse();
    match cli.command {
        Command::Client(args) => client::run(args),
        Command::Test(args) => test::run(args),
        Command::Check(command) => exit_code(check::check(command)),
        Command::Convert(command) => exit_code(check::convert(command)),
        Command::Gen(command) => exit_code(check::generate(command)),
        Command::Bench(args) => bench::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Node(args) => node::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Hosts(args) => hosts::run(args),
        Command::Model(args) => match model::run(args) {
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
