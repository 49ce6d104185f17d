//! lockd: a Raft-replicated lock service with fencing tokens and leases.
//!
//! - [`lock`]: the lock table of the seed design, a pure state machine.
//! - [`raft`]: the sans-IO Raft core that replicates it.
//! - [`bugs`]: the injected bugs of `lockd --bug NAME`.
//! - [`storage`]: the data dir: term, vote, log and snapshot, checksummed and fsync'd.
//! - [`server`]: the tokio driver of a node (the `lockd` binary), over the [`rpc`] services.
//! - [`client`]: the client library: leader discovery, redirects, deadlines, bounded retries.
#![deny(missing_docs)]

pub mod bugs;
pub mod client;
pub mod lock;
pub mod raft;
pub mod rpc;
pub mod server;
pub mod storage;
