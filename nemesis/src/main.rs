//! `locksmith`: the harness's command line. One plain subcommand enum; each variant's
//! arguments and work live in a `cmd_*.rs` module.

mod cmd_check;

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
    /// Check a CSV history: exit 0 valid, 1 invalid, 2 unknown or could not run.
    Check(cmd_check::CheckCommand),
    /// Convert a Jepsen or Porcupine history into CSV schema v1.
    Convert(cmd_check::ConvertCommand),
}

fn main() {
    // clap exits with code 2 on bad arguments: DESIGN's "could not run".
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Check(command) => cmd_check::check(command),
        Command::Convert(command) => cmd_check::convert(command),
    };
    std::process::exit(code);
}
