//! etcd as a second system under test: a loopback cluster of real `etcd` processes and a
//! lock client with DESIGN's acquire/release semantics and fencing tokens.
//!
//! - [`EtcdCluster`] starts 3 or 5 `etcd` 3.4 nodes (Debian's `etcd-server`) on free
//!   loopback ports with temporary data dirs, and applies process faults by pid:
//!   [`kill`](EtcdCluster::kill), [`pause`](EtcdCluster::pause),
//!   [`resume`](EtcdCluster::resume), [`restart`](EtcdCluster::restart); it finds the
//!   [`leader`](EtcdCluster::leader) and waits until the nodes
//!   [serve](EtcdCluster::wait_serving). Dropping it kills every node.
//! - [`EtcdLockClient`] is bound to one node and offers
//!   [`acquire`](EtcdLockClient::acquire)`(key, lease_ms, wait) -> token` and
//!   [`release`](EtcdLockClient::release)`(key, token)`; the token is the owner key's
//!   `create_revision`. Its module docs give the recipe and the outcome rules.
//!
//! The client speaks etcd's JSON gateway (`POST /v3/kv/txn`, `/v3/lease/grant`, ...) over
//! plain HTTP/1.1 on loopback with a small built-in HTTP client, instead of the gRPC
//! `etcd-client` crate: that crate needs `protoc` at build time and some 90 more crates
//! (tonic, prost, hyper, tower); this needs only tokio, serde_json and base64.
//!
//! ```no_run
//! # async fn demo() -> Result<(), nemesis::systems::etcd::EtcdError> {
//! use std::time::Duration;
//! use nemesis::systems::etcd::{Acquired, ClientOptions, EtcdCluster, EtcdClusterConfig, Wait};
//!
//! let mut cluster = EtcdCluster::start(EtcdClusterConfig::default())?;
//! cluster.wait_serving(Duration::from_secs(20)).await?;
//! let mut client = cluster.client(1, ClientOptions::default())?;
//! if let Acquired::Granted(grant) = client.acquire("a", 5000, Wait::No).await? {
//!     client.release("a", grant.token).await?;
//! }
//! let leader = cluster.leader().await.expect("a leader");
//! cluster.kill(leader)?;
//! cluster.restart(leader)?;
//! # Ok(()) }
//! ```

mod client;
mod cluster;
mod error;
mod http;
mod system;
mod wire;

pub use client::{
    Acquired, ClientOptions, EtcdLockClient, Grant, Released, WAIT_ROUNDS_MAX, Wait, lease_ttl_s,
};
pub use cluster::{EtcdCluster, EtcdClusterConfig, NodeState, etcd_binary};
pub use error::EtcdError;
pub use system::{Etcd, find_etcd};
