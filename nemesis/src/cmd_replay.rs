//! `locksmith model replay RUN_DIR`.
use std::path::PathBuf;
use std::process::ExitCode;

/// `locksmith model replay ...`
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The run directory holding trace.jsonl.
    run_dir: PathBuf,
}

/// Runs the replay.
pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("{}: replay is not written yet", args.run_dir.display())
}
