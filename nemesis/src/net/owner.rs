//! The owner backend (root only), for systems whose nodes cannot dial each peer through a
//! per-link address (etcd: a member has one peer URL for the whole cluster, so the per-link
//! ports of [`super::proxy`] and [`super::kernel`] never see its traffic).
//!
//! Every node runs as its own system user ([`ensure_users`]: `locksmith-n<i>`, created with
//! `useradd --system` when missing; users stay, rules go). On loopback every connection is
//! 127.0.0.1 to 127.0.0.1, so only the sending socket's uid tells which node a packet is
//! from (research/etcd-peer.md §5 (b)). An nftables table of this run's own (`inet
//! lsm<pid>_<n>`, one `output` chain) does two things:
//!
//! - each packet node `i` sends on `lo` ORs `i`'s bit into its connection's conntrack mark,
//!   so the mark of an `i`–`j` connection holds both bits once both have sent, whichever side
//!   opened it (connections opened before a cut included);
//! - a cut directed link `(i, j)` is two rules in the `cuts` chain: drop what `i` sends to
//!   `j`'s peer port (from the first SYN of a connection `i` opens), and drop what `i` sends
//!   on a connection whose mark holds `j`'s bit (connections `j` opened to `i`).
//!
//! Dropping `i`'s packets also drops its ACKs, so `j`'s bytes to `i` on the same connection
//! stall once `j`'s send window is full: a one-way cut is one-way for messages but not for
//! TCP. Complete grudges (both directions) are exact. Clients run as root (uid 0) and are
//! never cut. [`Owner::teardown`] (also on Drop, Ctrl-C and panic through
//! [`teardown_registered`]) deletes the table.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::{Grudge, Net};
use crate::subprocess::{Input, run_bounded_with};
use crate::{Error, NodeId};

/// How long one `nft` or `useradd` command may take before it is reported as hung.
pub const COMMAND_TIMEOUT_MS: u64 = 5_000;
/// The highest node id the conntrack mark has a bit for.
pub const MAX_NODE: NodeId = 24;

/// Tables installed by this process, for the Ctrl-C and panic paths.
static TABLES: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Numbers the tables of one process (tests start several nets in one process).
static NEXT_TABLE: AtomicU32 = AtomicU32::new(0);

/// The system user a node runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeUser {
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
}

/// Deletes every table this process installed (the Ctrl-C and panic paths). Idempotent.
pub fn teardown_registered() {
    let tables: Vec<String> =
        std::mem::take(&mut *TABLES.lock().unwrap_or_else(|p| p.into_inner()));
    for table in tables {
        let _ = nft(&format!("delete table inet {table}\n"));
    }
}

/// The user name of node `id`.
pub fn user_name(id: NodeId) -> String {
    format!("locksmith-n{id}")
}

/// The users of `nodes` (`locksmith-n<i>`), each created with `useradd --system` when
/// missing. Root only.
pub fn ensure_users(nodes: &[NodeId]) -> Result<BTreeMap<NodeId, NodeUser>, Error> {
    let mut users = BTreeMap::new();
    for id in nodes {
        let name = user_name(*id);
        let user = match lookup(&name)? {
            Some(user) => user,
            None => {
                let created = run(
                    Command::new("useradd").args([
                        "--system",
                        "--no-create-home",
                        "--user-group",
                        "--shell",
                        "/usr/sbin/nologin",
                        &name,
                    ]),
                    None,
                );
                // Another run may have created it in between: look again before failing.
                match (lookup(&name)?, created) {
                    (Some(user), _) => user,
                    (None, Err(e)) => return Err(e),
                    (None, Ok(())) => {
                        return Err(Error::Io(format!("useradd {name}: no such user after")));
                    }
                }
            }
        };
        users.insert(*id, user);
    }
    Ok(users)
}

fn lookup(name: &str) -> Result<Option<NodeUser>, Error> {
    let user = nix::unistd::User::from_name(name)
        .map_err(|e| Error::Io(format!("look up user {name}: {e}")))?;
    Ok(user.map(|u| NodeUser {
        uid: u.uid.as_raw(),
        gid: u.gid.as_raw(),
    }))
}

/// Makes `dir` (created if missing) owned by `user` with mode 0700, as etcd wants its data
/// dir, and lets others traverse (not list) its parent so that `user` can reach it.
pub fn give_dir(dir: &Path, user: NodeUser) -> Result<(), Error> {
    let io = |what: &str, e: std::io::Error| Error::Io(format!("{what} {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(|e| io("create", e))?;
    std::os::unix::fs::chown(dir, Some(user.uid), Some(user.gid)).map_err(|e| io("chown", e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| io("chmod", e))?;
    if let Some(parent) = dir.parent() {
        let mode = std::fs::metadata(parent)
            .map_err(|e| io("stat the parent of", e))?
            .permissions()
            .mode();
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(mode | 0o011))
            .map_err(|e| io("chmod the parent of", e))?;
    }
    Ok(())
}

/// nftables rules on the uids of the nodes.
pub struct Owner {
    table: String,
    peer: BTreeMap<NodeId, SocketAddr>,
    users: BTreeMap<NodeId, NodeUser>,
    installed: Mutex<bool>,
}

impl Owner {
    /// `Ok(())` when this process can use the owner backend, or the reason it cannot.
    pub fn available() -> Result<(), String> {
        if !nix::unistd::geteuid().is_root() {
            return Err(
                "partitions of etcd need root (one system user per node and nftables); \
                 running as non-root"
                    .into(),
            );
        }
        match nft("list tables\n") {
            Ok(()) => Ok(()),
            Err(e) => Err(format!("nft is not usable here: {e}")),
        }
    }

    /// Installs this run's table: the marking rules for `users` and an empty `cuts` chain.
    /// `peer` is where each node listens for its peers.
    pub fn start(
        peer: &BTreeMap<NodeId, SocketAddr>,
        users: &BTreeMap<NodeId, NodeUser>,
    ) -> Result<Owner, Error> {
        Owner::available().map_err(Error::Unsupported)?;
        if let Some(id) = users.keys().find(|id| **id == 0 || **id > MAX_NODE) {
            return Err(Error::Unsupported(format!(
                "n{id}: the owner net marks nodes 1..={MAX_NODE}"
            )));
        }
        let table = format!(
            "lsm{}_{}",
            std::process::id(),
            NEXT_TABLE.fetch_add(1, Ordering::Relaxed)
        );
        let mut script = format!("table inet {table} {{\n  chain cuts {{\n  }}\n");
        script.push_str("  chain out {\n    type filter hook output priority 0; policy accept;\n");
        for (id, user) in users {
            script.push_str(&format!(
                "    oifname \"lo\" meta skuid {} ct mark set ct mark or {:#x}\n",
                user.uid,
                bit(*id)
            ));
        }
        script.push_str("    oifname \"lo\" jump cuts\n  }\n}\n");
        nft(&script)?;
        TABLES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(table.clone());
        Ok(Owner {
            table,
            peer: peer.clone(),
            users: users.clone(),
            installed: Mutex::new(true),
        })
    }

    /// The nftables table of this run (family `inet`).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The nft script that makes exactly the links of `grudge` cut (one transaction).
    pub fn script(&self, grudge: &Grudge) -> Result<String, Error> {
        let mut script = format!("flush chain inet {} cuts\n", self.table);
        for (source, target) in grudge.links() {
            let (Some(user), Some(peer)) = (self.users.get(&source), self.peer.get(&target)) else {
                return Err(Error::BadArgument(format!(
                    "cut n{source}->n{target}: not a node of this net"
                )));
            };
            let rule = format!("add rule inet {} cuts meta skuid {}", self.table, user.uid);
            script.push_str(&format!("{rule} tcp dport {} drop\n", peer.port()));
            let b = bit(target);
            script.push_str(&format!("{rule} ct mark and {b:#x} == {b:#x} drop\n"));
        }
        Ok(script)
    }
}

fn bit(id: NodeId) -> u32 {
    assert!((1..=MAX_NODE).contains(&id), "node id {id} out of range");
    1 << (id + 7)
}

impl Net for Owner {
    fn dial_addr(&self, _source: NodeId, target: NodeId) -> SocketAddr {
        self.peer[&target]
    }

    fn apply(&self, grudge: &Grudge) -> Result<(), Error> {
        nft(&self.script(grudge)?)
    }

    fn teardown(&self) -> Result<(), Error> {
        let mut installed = self.installed.lock().unwrap_or_else(|p| p.into_inner());
        if !*installed {
            return Ok(());
        }
        *installed = false;
        TABLES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|t| *t != self.table);
        nft(&format!("delete table inet {}\n", self.table))
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// Runs `nft -f -` on `script` with a timeout; the error quotes the script and nft's stderr.
fn nft(script: &str) -> Result<(), Error> {
    run(Command::new("nft").args(["-f", "-"]), Some(script))
}

/// Runs `command` (stdin `input`) within [`COMMAND_TIMEOUT_MS`]; the error names the
/// command.
fn run(command: &mut Command, input: Option<&str>) -> Result<(), Error> {
    let what = format!("{command:?} {}", input.unwrap_or("").trim());
    let input = input.map_or(Input::Null, |text| Input::Bytes(text.as_bytes()));
    let out = run_bounded_with(
        command,
        input,
        Duration::from_millis(COMMAND_TIMEOUT_MS),
        &what,
    )?;
    crate::subprocess::succeeded(out, &what).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_link_drops_what_the_source_uid_sends_to_the_target() {
        // research/etcd-peer.md §5 (b): a cut i->j drops i's packets to j's peer port and on
        // connections whose conntrack mark holds j's bit (node 2: bit 9); nothing else.
        let owner = Owner {
            table: "lsmtest".into(),
            peer: BTreeMap::from([
                (1, SocketAddr::from(([127, 0, 0, 1], 7001))),
                (2, SocketAddr::from(([127, 0, 0, 1], 7002))),
            ]),
            users: BTreeMap::from([
                (1, NodeUser { uid: 901, gid: 901 }),
                (2, NodeUser { uid: 902, gid: 902 }),
            ]),
            // Not installed: dropping it must not run nft.
            installed: Mutex::new(false),
        };
        let script = owner.script(&Grudge::from_links([(1, 2)])).unwrap();
        assert_eq!(
            script,
            "flush chain inet lsmtest cuts\n\
             add rule inet lsmtest cuts meta skuid 901 tcp dport 7002 drop\n\
             add rule inet lsmtest cuts meta skuid 901 ct mark and 0x200 == 0x200 drop\n"
        );
        assert_eq!(
            owner.script(&Grudge::none()).unwrap(),
            "flush chain inet lsmtest cuts\n"
        );
        assert!(owner.script(&Grudge::from_links([(1, 3)])).is_err());
    }
}
