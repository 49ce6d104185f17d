//! `locksmith node ARGS`: one lockd node in this process, with exactly the `lockd` binary's
//! flags and behaviour: its source (`impl/src/bin/lockd.rs`) is compiled in here, so there is
//! one implementation. The harness falls back to it when no `lockd` binary stands next to
//! `locksmith`, which is what makes `cargo run --release -p nemesis -- test` work on its own.

use std::ffi::OsString;
use std::process::ExitCode;

// The binary's `main` is unused here; `run_from` is what this subcommand calls.
#[allow(dead_code)]
#[path = "../../../impl/src/bin/lockd.rs"]
mod lockd_bin;

/// The arguments of `locksmith node`: passed through to lockd's own parser.
#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true)]
pub struct NodeArgs {
    /// lockd's flags, e.g. `--id 1 --peers 1=127.0.0.1:7101,... --client-listen ... --data-dir DIR`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// Runs the node until it stops; the exit code is lockd's (2 for bad flags).
pub fn run(args: NodeArgs) -> ExitCode {
    lockd_bin::run_from(std::iter::once(OsString::from("locksmith node")).chain(args.args))
}
