//! `locksmith serve [--store store] [--addr 127.0.0.1:8080]`: browse the store (see
//! `nemesis::store::serve`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

/// Options of `locksmith serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The store to browse.
    #[arg(long, default_value = "store")]
    store: PathBuf,
    /// Where to listen; loopback by default (the store's logs are not for the network).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
}

/// Serves until interrupted; exit 2 when it cannot start.
pub fn run(args: ServeArgs) -> ExitCode {
    match nemesis::store::serve::run_blocking(args.store, args.addr) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("locksmith serve: {e}");
            ExitCode::from(2)
        }
    }
}
