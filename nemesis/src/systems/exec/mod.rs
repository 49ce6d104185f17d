//! `--system exec`: any lock service, in any language. Its nodes are started from a command
//! template, its clients are adapter processes that speak JSON lines
//! (`nemesis/PROTOCOL.md`).
//!
//! - **Nodes** ([`template`]): `--node-cmd 'my-lockd --id {id} --listen {addr} --peers
//!   {peers} --data {dir}'` runs under `sh -c` in a process group of the cluster's, like
//!   lockd's and etcd's nodes, so kill, pause and restart are the same signals, and the node's stdout and stderr go to `node-logs/n<ID>.log`. `{peer_addrs}`
//!   gives each node the per-link proxy's address for each peer, so partitions cut links as
//!   they do for lockd; a template without it cannot be partitioned on the proxy
//!   ([`Exec::dials_through_harness`]).
//! - **Clients** ([`adapter`]): `--client-cmd 'python3 my_client.py {addr}'` starts one
//!   adapter per client process id; the harness writes requests, reads answers, keeps each
//!   op's deadline, and replaces an adapter after an `info` or an exit.
//! - **What it cannot know**: the nodes' roles (no status call), so the harness waits for
//!   every node to accept a TCP connection on its `{addr}` before the workload starts, and a
//!   leader-targeted fault aims at the node the latest `ok` answer named (its `node`
//!   field), or a random node before any did; and the lease clock, so the clock nemesis
//!   does not apply. An adapter whose init line says `"fencing":false` issues no tokens:
//!   the checks that read tokens (linearizability of the lock model, fencing) say "not
//!   checked" and the summary lists them.
//! - **Never valid by accident**: every protocol error (a malformed line, an answer to an id
//!   never sent, a second answer, an adapter that answered none of its requests) is kept in
//!   [`ExecState`] and makes the check `client protocol` unknown, so the run exits 2.

pub mod adapter;
pub mod lines;
pub mod protocol;
pub mod template;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use checker::{CheckResult, Verdict};
use futures::FutureExt as _;
use futures::future::BoxFuture;
use history::CheckName;

use crate::cluster::{LaunchOptions, Launcher, Layout};
use crate::systems::{LockClient, NodeView, System};
use crate::{Error, NodeId};

pub use template::{CLIENT_PLACEHOLDERS, NODE_PLACEHOLDERS, Template};

/// The most protocol errors kept word for word; the rest are counted.
pub const ERRORS_KEPT_MAX: usize = 20;
/// How long a node has to accept a TCP connection on its client address, per status call.
const CONNECT_TIMEOUT_MS: u64 = 500;

/// What every adapter of a run reports to: protocol errors, and what the init lines said.
#[derive(Debug, Default)]
pub struct ExecState {
    errors: Mutex<Vec<String>>,
    errors_total: AtomicU64,
    lines: AtomicU64,
    adapters_tokenless: AtomicU64,
    adapters_fencing: AtomicU64,
    /// The node named by the latest `ok` answer that named one (0: none yet).
    last_ok_node: AtomicU64,
    /// Adapters whose init line said `"resource":true`.
    adapters_resource: AtomicU64,
}

impl ExecState {
    /// Records a protocol error (in words, quoting the line when there is one).
    pub fn error(&self, text: String) {
        self.errors_total.fetch_add(1, Ordering::SeqCst);
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if errors.len() < ERRORS_KEPT_MAX {
            errors.push(text);
        }
    }

    fn saw_ok_from(&self, node: NodeId) {
        self.last_ok_node.store(node, Ordering::SeqCst);
    }

    /// The node the latest `ok` answer named, the harness's best guess of a leader.
    pub fn last_ok_node(&self) -> Option<NodeId> {
        Some(self.last_ok_node.load(Ordering::SeqCst)).filter(|n| *n != 0)
    }

    fn count_line(&self) {
        self.lines.fetch_add(1, Ordering::Relaxed);
    }

    fn saw_init(&self, init: protocol::Init) {
        let counter = if init.fencing {
            &self.adapters_fencing
        } else {
            &self.adapters_tokenless
        };
        counter.fetch_add(1, Ordering::SeqCst);
        if init.resource {
            self.adapters_resource.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// True once some adapter's init line said `"resource":true`: from then on every write
    /// goes to the adapters (a new adapter's init line may not have been read yet when a
    /// write under a grant of its slot's earlier process comes).
    pub fn resource(&self) -> bool {
        self.adapters_resource.load(Ordering::SeqCst) > 0
    }

    /// The protocol errors kept, and how many there were in all.
    pub fn errors(&self) -> (Vec<String>, u64) {
        let kept = self
            .errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        (kept, self.errors_total.load(Ordering::SeqCst))
    }

    /// The check `client protocol`: unknown with the errors, else valid.
    pub fn check(&self) -> CheckResult {
        let (kept, total) = self.errors();
        let lines = self.lines.load(Ordering::SeqCst);
        if total == 0 {
            let tokenless = self.adapters_tokenless.load(Ordering::SeqCst);
            let mut result = CheckResult::new(CheckName::ClientProtocol, Verdict::Valid);
            result.explanation = Some(format!(
                "{lines} lines from the adapters, no protocol error{}",
                if tokenless > 0 {
                    "; the adapters issue no tokens (init \"fencing\":false)"
                } else {
                    ""
                }
            ));
            return result;
        }
        let more = total.saturating_sub(kept.len() as u64);
        let mut text = format!(
            "the adapters broke the client protocol (nemesis/PROTOCOL.md) {total} time(s); nothing they answered is trusted:\n{}",
            kept.join("\n")
        );
        if more > 0 {
            text.push_str(&format!("\n... and {more} more"));
        }
        CheckResult::new(CheckName::ClientProtocol, Verdict::unknown(text))
    }

    /// True when some adapter's init line said `"fencing":false`.
    pub fn tokenless(&self) -> bool {
        self.adapters_tokenless.load(Ordering::SeqCst) > 0
    }
}

/// Any lock service: nodes from `--node-cmd`, clients from `--client-cmd`.
pub struct Exec {
    node_cmd: Template,
    client_cmd: Template,
    slots: u64,
    state: Arc<ExecState>,
}

impl Exec {
    /// The system of these templates (parsed: an unknown placeholder is an error), for a
    /// workload of `slots` client slots (process `p` runs in slot `p % slots`).
    pub fn new(node_cmd: &str, client_cmd: &str, slots: u64) -> Result<Exec, Error> {
        Ok(Exec {
            node_cmd: Template::parse(node_cmd, &NODE_PLACEHOLDERS, "--node-cmd")?,
            client_cmd: Template::parse(client_cmd, &CLIENT_PLACEHOLDERS, "--client-cmd")?,
            slots: slots.max(1),
            state: Arc::new(ExecState::default()),
        })
    }

    /// True when the nodes dial their peers on `{peer_addrs}`, through the net's per-link
    /// addresses, so that partitions can cut them.
    pub fn dials_through_harness(&self) -> bool {
        self.node_cmd.uses("peer_addrs")
    }

    /// The shared state of the run's adapters.
    pub fn state(&self) -> Arc<ExecState> {
        self.state.clone()
    }
}

fn comma(addrs: impl Iterator<Item = String>) -> String {
    addrs.collect::<Vec<_>>().join(",")
}

fn id_map<'a>(entries: impl Iterator<Item = (&'a NodeId, &'a SocketAddr)>) -> String {
    comma(entries.map(|(id, addr)| format!("{id}={addr}")))
}

struct ExecLauncher {
    template: Template,
    layout: Layout,
    dial: BTreeMap<(NodeId, NodeId), SocketAddr>,
}

impl Launcher for ExecLauncher {
    fn command(&self, id: NodeId, _options: &LaunchOptions) -> std::process::Command {
        let layout = &self.layout;
        let dial: Vec<(&NodeId, &SocketAddr)> = self
            .dial
            .iter()
            .filter(|((source, _), _)| *source == id)
            .map(|((_, target), addr)| (target, addr))
            .collect();
        let values = BTreeMap::from([
            ("id", id.to_string()),
            ("addr", layout.client[&id].to_string()),
            ("peer_addr", layout.peer[&id].to_string()),
            ("peers", id_map(layout.peer.iter())),
            ("peer_addrs", id_map(dial.into_iter())),
            (
                "client_addrs",
                comma(layout.client.values().map(|a| a.to_string())),
            ),
            ("dir", layout.data_dir[&id].display().to_string()),
            ("nodes", layout.nodes.len().to_string()),
        ]);
        let mut command = self.template.command(&values);
        if let Ok(exe) = std::env::current_exe() {
            command.env("LOCKSMITH_BIN", exe);
        }
        command
    }
}

impl System for Exec {
    fn name(&self) -> &'static str {
        "exec"
    }

    fn launcher(
        &self,
        layout: &Layout,
        dial: BTreeMap<(NodeId, NodeId), SocketAddr>,
    ) -> Result<Box<dyn Launcher>, Error> {
        Ok(Box::new(ExecLauncher {
            template: self.node_cmd.clone(),
            layout: layout.clone(),
            dial,
        }))
    }

    fn elects_leader(&self) -> bool {
        false
    }

    fn client(&self, layout: &Layout, client_id: u64) -> Box<dyn LockClient> {
        assert!(!layout.nodes.is_empty(), "a layout without nodes");
        let slot = client_id % self.slots;
        let node = layout.nodes[(slot % layout.nodes.len() as u64) as usize];
        let values = BTreeMap::from([
            ("addr", layout.client[&node].to_string()),
            (
                "client_addrs",
                comma(layout.client.values().map(|a| a.to_string())),
            ),
            ("node", node.to_string()),
            ("process", client_id.to_string()),
            ("slot", slot.to_string()),
        ]);
        let spec = adapter::AdapterSpec {
            values,
            process: client_id,
            slot,
            log: layout.log_dir.join(format!("client{slot}.log")),
        };
        Box::new(adapter::AdapterClient::new(
            spec,
            self.client_cmd.clone(),
            self.state.clone(),
        ))
    }

    /// A node "answers" when it accepts a TCP connection on its client address. Its role is
    /// unknown (`up`), except that the node named by the latest `ok` answer (the `node`
    /// field) counts as the leader, so that leader-targeted faults aim where the grants come
    /// from; before any answer names a node they pick a random one.
    fn status<'a>(&'a self, layout: &'a Layout) -> BoxFuture<'a, Vec<NodeView>> {
        async move {
            let probes = layout.nodes.iter().map(|node| async move {
                let addr = layout.client[node];
                let connect = tokio::net::TcpStream::connect(addr);
                let up = tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), connect)
                    .await
                    .is_ok_and(|c| c.is_ok());
                let role = if self.state.last_ok_node() == Some(*node) {
                    "leader"
                } else {
                    "up"
                };
                up.then(|| NodeView {
                    node: *node,
                    role: role.to_owned(),
                    term: 0,
                    leader: None,
                    commit_index: 0,
                })
            });
            futures::future::join_all(probes)
                .await
                .into_iter()
                .flatten()
                .collect()
        }
        .boxed()
    }

    fn checks(&self) -> Vec<CheckResult> {
        vec![self.state.check()]
    }
}
