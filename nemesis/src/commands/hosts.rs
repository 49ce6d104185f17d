//! `locksmith hosts up N` / `locksmith hosts down`: hosts made of network namespaces on this
//! machine, each with its own address and sshd, for `locksmith test --hosts` (root only;
//! see nemesis::hosts::ns).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use nemesis::hosts::{self, ns};

/// `locksmith hosts`.
#[derive(Debug, Args)]
pub struct HostsArgs {
    #[command(subcommand)]
    command: HostsCommand,
    /// Where the state file, the keys and the sshd config go (default: $LOCKSMITH_HOSTS_DIR,
    /// else locksmith-hosts in the temporary directory, where --ssh-key looks by default).
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum HostsCommand {
    /// Make N namespace hosts; the last line printed is the value for `--hosts`.
    Up {
        /// How many hosts.
        n: usize,
    },
    /// Remove everything `up` made (namespaces, veths, bridge, sshd, keys), nothing else.
    Down,
}

/// Runs `locksmith hosts`: exit 0 done, 2 could not.
pub fn run(args: HostsArgs) -> ExitCode {
    let dir = args.dir.unwrap_or_else(hosts::default_dir);
    let result = match args.command {
        HostsCommand::Up { n } => ns::up(n, &dir).map(|state| {
            eprintln!(
                "locksmith hosts: {n} host(s) up in namespaces {} on bridge {} (this machine is {}); key {}",
                state.namespaces.join(" "),
                state.bridge.clone().unwrap_or_default(),
                state.control_address(),
                hosts::key_in(&dir).display()
            );
            eprintln!("locksmith hosts: remove them with `locksmith hosts down`");
            println!("{}", state.hosts_value());
        }),
        HostsCommand::Down => ns::down(&dir).map(|state| match state {
            Some(state) => eprintln!(
                "locksmith hosts: removed {} namespace(s), bridge {}, {} sshd",
                state.namespaces.len(),
                state.bridge.unwrap_or_default(),
                state.sshd.len()
            ),
            None => eprintln!("locksmith hosts: nothing is up in {}", dir.display()),
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("locksmith hosts: {e}");
            ExitCode::from(2)
        }
    }
}
