//! [`Etcd`]: etcd as a [`System`] of the harness (`locksmith test --system etcd`, `bench`).
//!
//! - **Launcher**: one `etcd` per node of the run's [`Layout`] (its peer and client ports,
//!   its data dir), the same command line on every restart. etcd takes one peer URL per
//!   member for the whole cluster (a member's id is a hash of it), so it cannot dial each
//!   peer through a per-link address: the `dial` map of the harness's nets is not used
//!   ([`System::per_link_dial`] is false). Partitions need `--net kernel` (root), which for
//!   etcd is [`crate::net::owner`]: each node runs as its own user (`Layout::users`, the
//!   uid set here) and nftables drops packets by the sending uid (research/etcd-peer.md §5 (b)).
//! - **Clients**: an [`EtcdLockClient`] per client process, bound to node
//!   `nodes[client_id % n]` (Jepsen style: no balancing, so a fault on a node is seen by its
//!   own clients). Outcomes map as DESIGN says: `Granted` -> ok with the token, `Busy` ->
//!   fail `busy`, `NotHolder` -> fail `not-holder`, a definite error -> fail, anything else
//!   (and the op's own deadline passing) -> info.
//! - **Status**: `Maintenance.Status` of every node. etcd has no role field: a node that
//!   names itself leader is `leader`, one that knows another leader `follower`, one that
//!   knows none `candidate`. The commit index is the node's raft index.
//! - **Clock**: etcd offers no lease-clock control, so `set_clock` is unsupported.

use super::cluster::STATUS_TIMEOUT;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use futures::future::BoxFuture;
use history::ErrorWord;

use super::client::{Acquired, ClientOptions, EtcdLockClient, Released, Wait};
use super::cluster::{EtcdClusterConfig, etcd_binary, node_args};
use super::error::EtcdError;
use super::{http, wire};
use crate::cluster::{LaunchOptions, Launcher, Layout};
use crate::systems::{LockClient, NodeView, Outcome, System};
use crate::{Error, NodeId};

/// How long past an op's deadline the backstop timeout waits for the client to give up on
/// its own (which it does, call by call, at the deadline).
const DEADLINE_GRACE: Duration = Duration::from_millis(200);

/// Finds the `etcd` binary ([`etcd_binary`]) or says how to install it.
pub fn find_etcd() -> Result<PathBuf, Error> {
    etcd_binary().ok_or_else(|| {
        Error::Cluster("no etcd binary on PATH or in LOCKSMITH_ETCD; run ci/install.sh".into())
    })
}

/// etcd as a system under test (see the module docs).
pub struct Etcd {
    config: EtcdClusterConfig,
    options: ClientOptions,
    /// etcd's member ids (a hash) to node ids, learned from status answers.
    members: Mutex<BTreeMap<u64, NodeId>>,
}

impl Etcd {
    /// etcd from `config.binary` with its timing; `config.nodes` is ignored (the layout
    /// decides). Every client uses `options`.
    pub fn new(config: EtcdClusterConfig, options: ClientOptions) -> Self {
        Self {
            config,
            options,
            members: Mutex::new(BTreeMap::new()),
        }
    }
}

struct EtcdLauncher {
    config: EtcdClusterConfig,
    layout: Layout,
}

impl Launcher for EtcdLauncher {
    fn command(&self, id: NodeId, _options: &LaunchOptions) -> Command {
        // The clock rate cannot be set on etcd; `set_clock` says so to the nemesis.
        let peers: Vec<(NodeId, SocketAddr)> = self
            .layout
            .peer
            .iter()
            .map(|(node, addr)| (*node, *addr))
            .collect();
        let mut command = Command::new(&self.config.binary);
        if let Some(user) = self.layout.users.get(&id) {
            // The owner net tells nodes apart by uid; the run gave the data dir to this user.
            command.uid(user.uid).gid(user.gid);
        }
        command.args(node_args(
            &self.config,
            id,
            self.layout.client[&id],
            &peers,
            &self.layout.data_dir[&id],
            "locksmith",
        ));
        command
    }
}

struct EtcdProcessClient {
    client: tokio::sync::Mutex<EtcdLockClient>,
}

fn failed(error: &EtcdError) -> Outcome {
    if error.is_definite() {
        // No node is named: a refused connection means no node answered.
        Outcome::Fail {
            error: error.label(),
            node: None,
        }
    } else {
        Outcome::Info(error.label())
    }
}

impl LockClient for EtcdProcessClient {
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        lease_ms: u64,
        wait_ms: u64,
        deadline: tokio::time::Instant,
    ) -> BoxFuture<'a, Outcome> {
        let deadline: Instant = deadline.into_std();
        async move {
            let wait = if wait_ms == 0 {
                Wait::No
            } else {
                Wait::For(Duration::from_millis(wait_ms))
            };
            let mut client = self.client.lock().await;
            let node = client.node();
            // The client cuts every call to the deadline and tidies up after itself (revokes
            // the lease of an acquire it could not finish); the outer timeout is only a
            // backstop for the lock wait and the grace below.
            let call = client.acquire_until(key, lease_ms, wait, deadline);
            match tokio::time::timeout_at((deadline + DEADLINE_GRACE).into(), call).await {
                Err(_) => Outcome::Info(ErrorWord::Timeout),
                Ok(Ok(Acquired::Granted(grant))) => Outcome::Ok {
                    token: Some(grant.token),
                    node: Some(grant.node),
                },
                Ok(Ok(Acquired::Busy)) => Outcome::Fail {
                    error: ErrorWord::Busy,
                    node: Some(node),
                },
                Ok(Err(error)) => failed(&error),
            }
        }
        .boxed()
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        token: u64,
        deadline: tokio::time::Instant,
    ) -> BoxFuture<'a, Outcome> {
        let deadline: Instant = deadline.into_std();
        async move {
            let mut client = self.client.lock().await;
            let node = client.node();
            let call = client.release_until(key, token, deadline);
            match tokio::time::timeout_at((deadline + DEADLINE_GRACE).into(), call).await {
                Err(_) => Outcome::Info(ErrorWord::Timeout),
                Ok(Ok(Released::Released)) => Outcome::Ok {
                    token: None,
                    node: Some(node),
                },
                Ok(Ok(Released::NotHolder)) => Outcome::Fail {
                    error: ErrorWord::NotHolder,
                    node: Some(node),
                },
                Ok(Err(error)) => failed(&error),
            }
        }
        .boxed()
    }
}

impl System for Etcd {
    fn catches_up_after_heal(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "etcd"
    }

    fn launcher(
        &self,
        layout: &Layout,
        _dial: BTreeMap<(NodeId, NodeId), SocketAddr>,
    ) -> Result<Box<dyn Launcher>, Error> {
        if !self.config.binary.is_file() {
            return Err(Error::Cluster(format!(
                "etcd binary {} not found; run ci/install.sh",
                self.config.binary.display()
            )));
        }
        Ok(Box::new(EtcdLauncher {
            config: self.config.clone(),
            layout: layout.clone(),
        }))
    }

    fn per_link_dial(&self) -> bool {
        false
    }

    fn client(&self, layout: &Layout, client_id: u64) -> Box<dyn LockClient> {
        assert!(!layout.nodes.is_empty(), "a layout without nodes");
        let node = layout.nodes[(client_id % layout.nodes.len() as u64) as usize];
        let client = EtcdLockClient::new(node, layout.client[&node], self.options.clone());
        Box::new(EtcdProcessClient {
            client: tokio::sync::Mutex::new(client),
        })
    }

    fn status<'a>(&'a self, layout: &'a Layout) -> BoxFuture<'a, Vec<NodeView>> {
        async move {
            let calls = layout.nodes.iter().map(|node| async move {
                let addr = layout.client[node];
                let body =
                    http::post_once(addr, "/v3/maintenance/status", b"{}", STATUS_TIMEOUT).await?;
                let status: wire::StatusResponse = serde_json::from_slice(&body).ok()?;
                Some((*node, status))
            });
            let answers: Vec<_> = futures::future::join_all(calls)
                .await
                .into_iter()
                .flatten()
                .collect();
            let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
            for (node, status) in &answers {
                members.insert(status.header.member_id, *node);
            }
            answers
                .into_iter()
                .map(|(node, status)| node_view(node, &status, &members))
                .collect()
        }
        .boxed()
    }
}

fn node_view(
    node: NodeId,
    status: &wire::StatusResponse,
    members: &BTreeMap<u64, NodeId>,
) -> NodeView {
    let role = if status.leader == 0 {
        "candidate"
    } else if status.leader == status.header.member_id {
        "leader"
    } else {
        "follower"
    };
    NodeView {
        node,
        role: role.to_owned(),
        term: status.raft_term,
        leader: members.get(&status.leader).copied(),
        commit_index: status.raft_index,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_roles_follow_who_a_node_names_as_leader() {
        // system.rs NodeView: `leader_of` trusts nodes whose role is "leader"; etcd's status
        // has no role, so it is derived from the leader id the node reports.
        let members = BTreeMap::from([(11, 1), (22, 2)]);
        let status = |member_id, leader| wire::StatusResponse {
            header: wire::Header {
                member_id,
                ..wire::Header::default()
            },
            leader,
            raft_term: 3,
            raft_index: 9,
        };
        let leader = node_view(1, &status(11, 11), &members);
        assert_eq!((leader.role.as_str(), leader.leader), ("leader", Some(1)));
        let follower = node_view(2, &status(22, 11), &members);
        assert_eq!(
            (follower.role.as_str(), follower.leader),
            ("follower", Some(1))
        );
        assert_eq!(follower.commit_index, 9);
        let lost = node_view(2, &status(22, 0), &members);
        assert_eq!((lost.role.as_str(), lost.leader), ("candidate", None));
    }
}
