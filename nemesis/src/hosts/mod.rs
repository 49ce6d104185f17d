//! Nodes on other machines, reached over SSH, as Jepsen's control node reaches its DB nodes:
//! no agent on the hosts, only sshd, a shell, `iptables` and `tc`.
//!
//! - [`ssh`]: one multiplexed OpenSSH connection per host, commands with deadlines.
//! - [`remote`]: a test run's nodes on the hosts (`locksmith test --hosts ...`): the binary
//!   uploaded and its checksum verified, each node started in a per-test directory, signals
//!   by pid, partitions as iptables rules on the nodes, latency and loss with `tc netem`,
//!   the node logs brought back into the store, everything removed at the end.
//! - [`ns`]: `locksmith hosts up N` / `down`, hosts made of network namespaces on this
//!   machine (root only), to test all of the above without other machines.
//!
//! The clients run on the control machine (this process), as Jepsen's do, so the history's
//! clock is this machine's.

pub mod ns;
pub mod remote;
pub mod ssh;

use std::path::{Path, PathBuf};

use crate::Error;

/// `--hosts` and `--ssh-key`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HostsOptions {
    /// `user@host` per node, node 1 first.
    pub targets: Vec<String>,
    /// The private key; `None`: the key `locksmith hosts up` wrote ([`default_key`]) when it
    /// exists, else the user's own keys and agent.
    pub ssh_key: Option<PathBuf>,
}

impl HostsOptions {
    /// Parses `--hosts root@A,root@B,...` (a target without `user@` logs in as root).
    pub fn parse(hosts: &str, ssh_key: Option<PathBuf>) -> Result<HostsOptions, Error> {
        let targets: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| {
                if t.contains('@') {
                    t.to_owned()
                } else {
                    format!("root@{t}")
                }
            })
            .collect();
        if targets.is_empty() {
            return Err(Error::BadArgument(format!(
                "--hosts {hosts:?}: expected USER@HOST,USER@HOST,..."
            )));
        }
        for t in &targets {
            let host = t.rsplit('@').next().unwrap_or("");
            if host.is_empty() || host.starts_with('-') || host.contains(char::is_whitespace) {
                return Err(Error::BadArgument(format!("--hosts: bad host {t:?}")));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(twice) = targets.iter().find(|t| !seen.insert(t.as_str())) {
            return Err(Error::BadArgument(format!(
                "--hosts: {twice} is given twice (one node per host)"
            )));
        }
        Ok(HostsOptions { targets, ssh_key })
    }

    /// The key to log in with: the given one, else [`default_key`] when it exists and its
    /// known_hosts lists every host (namespace hosts of `locksmith hosts up`; for other
    /// machines the user's own keys and agent are used).
    pub fn key(&self) -> Option<PathBuf> {
        if let Some(key) = &self.ssh_key {
            return Some(key.clone());
        }
        let key = default_key();
        let known =
            std::fs::read_to_string(format!("{}.known_hosts", key.display())).unwrap_or_default();
        let listed = |target: &String| {
            let host = target.rsplit('@').next().unwrap_or(target);
            known
                .lines()
                .any(|l| l.split_whitespace().next() == Some(host))
        };
        (key.is_file() && self.targets.iter().all(listed)).then_some(key)
    }
}

/// Where `locksmith hosts up` keeps its state and keys: `$LOCKSMITH_HOSTS_DIR`, else
/// `locksmith-hosts` in the temporary directory.
pub fn default_dir() -> PathBuf {
    std::env::var_os("LOCKSMITH_HOSTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("locksmith-hosts"))
}

/// The login key in a hosts directory.
pub fn key_in(dir: &Path) -> PathBuf {
    dir.join("id_ed25519")
}

/// The key `--ssh-key` defaults to: the one `locksmith hosts up` wrote.
pub fn default_key() -> PathBuf {
    key_in(&default_dir())
}

/// Kills the nodes and removes the rules, qdiscs and directories of every remote run of this
/// process (the Ctrl-C and panic paths). Idempotent.
pub fn teardown_registered() {
    remote::teardown_registered();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_parse_with_default_user_and_reject_bad_lists() {
        // Issue 15: `--hosts root@HOST1,root@HOST2,...`; bad input is a clear error.
        let h = HostsOptions::parse("root@10.0.0.1, admin@b,c", None).expect("parses");
        assert_eq!(h.targets, ["root@10.0.0.1", "admin@b", "root@c"]);
        assert!(HostsOptions::parse(" , ", None).is_err());
        assert!(HostsOptions::parse("root@a,root@a", None).is_err());
        assert!(HostsOptions::parse("root@-oProxyCommand=x", None).is_err());
        assert!(HostsOptions::parse("root@", None).is_err());
    }
}
