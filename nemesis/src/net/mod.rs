//! Partitions: a [`Net`] applies a [`Grudge`] (a set of cut directed links) to the links
//! between the nodes of a cluster, and heals it.
//!
//! Every node dials every other node through an address the net chooses
//! ([`Net::dial_addr`]): `lockd --dial 2=ADDR,...`. Two backends:
//!
//! - [`proxy::Proxy`] (the default, no root needed): one tokio TCP forwarder per ordered pair
//!   `(i, j)`, the address `i` dials for `j`. It can drop (close and refuse), delay and hold
//!   the bytes `i` sends to `j`. Since the connection on link `(i, j)` is the one `i` opened
//!   to `j`, cutting it stops `i`'s messages to `j` and leaves `j -> i` (its own link) alone.
//! - [`kernel::Kernel`] (root only): the same per-link ports as plain forwarders, with the
//!   cuts made by iptables `DROP` rules on those loopback ports in a chain of its own, so the
//!   kernel silently drops packets as a real partition does (connections stall, not close).
//!
//! - [`owner::Owner`] (root only) for systems that cannot dial per link (etcd): every node
//!   runs as its own user, and nftables drops packets by the sending uid (`--net kernel`
//!   with `--system etcd`).
//!
//! - [`netns::Netns`] (`--net netns`, root only): every node in a network namespace of its
//!   own on a bridge, real addresses; iptables partitions and the `slow`/`flaky` faults inside
//!   the namespaces.
//!
//! The first two are checked by one test body (`nemesis/tests/net_conformance.rs`).

pub mod grudge;
pub mod kernel;
pub mod netns;
pub mod owner;
pub mod proxy;

use std::net::SocketAddr;

pub use grudge::Grudge;

use crate::{Error, NodeId};

/// Which backend makes the partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum NetKind {
    /// The userspace fault proxy (default).
    Proxy,
    /// iptables rules on the per-link loopback ports (root only).
    Kernel,
    /// Every node in a network namespace of its own on a bridge (root only): real
    /// interfaces and addresses, iptables partitions, slow and flaky ([`netns`]).
    Netns,
}

impl std::str::FromStr for NetKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "proxy" => Ok(NetKind::Proxy),
            "kernel" => Ok(NetKind::Kernel),
            "netns" => Ok(NetKind::Netns),
            other => Err(Error::BadArgument(format!(
                "--net {other:?}: expected proxy, kernel or netns"
            ))),
        }
    }
}

/// A network between nodes that can be partitioned.
pub trait Net: Send + Sync {
    /// The address node `source` dials to reach node `target`.
    fn dial_addr(&self, source: NodeId, target: NodeId) -> SocketAddr;

    /// Makes exactly the links of `grudge` cut (replacing any earlier grudge).
    fn apply(&self, grudge: &Grudge) -> Result<(), Error>;

    /// Cuts nothing any more. Idempotent.
    fn heal(&self) -> Result<(), Error> {
        self.apply(&Grudge::none())
    }

    /// Removes everything the net installed (rules, listeners). Idempotent.
    fn teardown(&self) -> Result<(), Error>;

    /// The launcher that starts nodes where this net needs them (netns: inside their
    /// namespaces); most nets take the system's as it is.
    fn wrap_launcher(
        &self,
        launcher: Box<dyn crate::cluster::Launcher>,
    ) -> Box<dyn crate::cluster::Launcher> {
        launcher
    }

    /// Shapes what node `node` sends with `tc netem` (`None`: back to normal), and says how
    /// (netem, or a stand-in on a kernel without it). Only nets whose nodes have interfaces
    /// of their own can (remote and namespace hosts).
    fn netem(&self, node: NodeId, spec: Option<&crate::netem::NetemSpec>) -> Result<String, Error> {
        let _ = (node, spec);
        Err(Error::Unsupported(
            "slow and flaky need hosts with interfaces of their own (--hosts or --net netns)"
                .into(),
        ))
    }
}
