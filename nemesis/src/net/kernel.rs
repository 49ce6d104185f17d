//! The kernel backend (root only): the per-link loopback ports of the proxy, run as plain
//! forwarders that never fault, and iptables `DROP` rules on those ports in a chain of this
//! run's own (`LSM<pid>`), jumped to from `OUTPUT`.
//!
//! Every node listens on 127.0.0.1, so a packet's addresses do not tell which node sent it;
//! the per-link port does: node `i` reaches node `j` only through the port of link `(i, j)`.
//! A rule `-p tcp -d 127.0.0.1 --dport P -j DROP` drops every packet `i` sends on that link,
//! established connections included, so the kernel loses the bytes silently and TCP
//! retransmits, as in a real partition (the proxy instead closes connections).
//!
//! [`Kernel::available`] says why the backend cannot run (not root, no iptables); callers
//! skip with that reason.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use super::proxy::Proxy;
use super::{Grudge, Net};
use crate::subprocess::run_bounded;
use crate::{Error, NodeId};

/// How long one iptables command may take before it is reported as hung.
pub const IPTABLES_TIMEOUT_MS: u64 = 5_000;

/// Chains installed by this process, for the Ctrl-C and panic paths.
static CHAINS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Removes every chain this process installed (the Ctrl-C and panic paths). Idempotent.
pub fn teardown_registered() {
    let chains: Vec<String> =
        std::mem::take(&mut *CHAINS.lock().unwrap_or_else(|p| p.into_inner()));
    for chain in chains {
        let _ = iptables(&["-w", "-D", "OUTPUT", "-j", &chain]);
        let _ = iptables(&["-w", "-F", &chain]);
        let _ = iptables(&["-w", "-X", &chain]);
    }
}

/// iptables rules on per-link loopback ports.
pub struct Kernel {
    forwarders: Proxy,
    chain: String,
    installed: Mutex<bool>,
}

impl Kernel {
    /// `Ok(())` when this process can use the kernel backend, or the reason it cannot.
    pub fn available() -> Result<(), String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("the kernel backend needs root (iptables); running as non-root".into());
        }
        match iptables(&["-w", "-L", "OUTPUT", "-n"]) {
            Ok(()) => Ok(()),
            Err(e) => Err(format!("iptables is not usable here: {e}")),
        }
    }

    /// Starts the forwarders and installs this run's (empty) chain.
    pub async fn start(targets: &BTreeMap<NodeId, SocketAddr>) -> Result<Kernel, Error> {
        Kernel::available().map_err(Error::Unsupported)?;
        let forwarders = Proxy::start(targets).await?;
        let chain = format!("LSM{}", std::process::id());
        iptables(&["-w", "-N", &chain])?;
        if let Err(e) = iptables(&["-w", "-I", "OUTPUT", "-j", &chain]) {
            let _ = iptables(&["-w", "-X", &chain]);
            return Err(e);
        }
        Ok(Kernel {
            forwarders,
            chain,
            installed: Mutex::new(true),
        })
    }

    /// The iptables chain of this run.
    pub fn chain(&self) -> &str {
        &self.chain
    }
}

impl Net for Kernel {
    fn dial_addr(&self, source: NodeId, target: NodeId) -> SocketAddr {
        self.forwarders.dial_addr(source, target)
    }

    fn apply(&self, grudge: &Grudge) -> Result<(), Error> {
        iptables(&["-w", "-F", &self.chain])?;
        for (source, target) in grudge.links() {
            let port = self.forwarders.dial_addr(source, target).port().to_string();
            iptables(&[
                "-w",
                "-A",
                &self.chain,
                "-p",
                "tcp",
                "-d",
                "127.0.0.1",
                "--dport",
                &port,
                "-j",
                "DROP",
            ])?;
        }
        Ok(())
    }

    fn teardown(&self) -> Result<(), Error> {
        let mut installed = self.installed.lock().unwrap_or_else(|p| p.into_inner());
        if !*installed {
            return Ok(());
        }
        // Each step runs even if an earlier one failed, so as much as possible is removed.
        let a = iptables(&["-w", "-D", "OUTPUT", "-j", &self.chain]);
        let b = iptables(&["-w", "-F", &self.chain]);
        let c = iptables(&["-w", "-X", &self.chain]);
        *installed = false;
        CHAINS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|c| *c != self.chain);
        self.forwarders.teardown()?;
        a.and(b).and(c)
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// Runs `iptables ARGS` within [`IPTABLES_TIMEOUT_MS`]; the error names the command and
/// its stderr.
fn iptables(args: &[&str]) -> Result<(), Error> {
    let what = format!("iptables {}", args.join(" "));
    let mut command = Command::new("iptables");
    command.args(args);
    let out = run_bounded(
        &mut command,
        Duration::from_millis(IPTABLES_TIMEOUT_MS),
        &what,
    )?;
    crate::subprocess::succeeded(out, &what).map(|_| ())
}
