//! lockd: a Raft-replicated lock service with fencing tokens and leases.
//!
//! The sans-IO part, always built:
//!
//! - [`lock`]: the lock table of the seed design, a pure state machine.
//! - [`raft`]: the sans-IO Raft core that replicates it.
//! - [`bugs`]: the injected bugs of `lockd --bug NAME`.
//! - [`trace`]: the trace records of the inputs a driver steps in, their writer and reader.
//! - [`rng`]: the seeded generator every random choice draws from.
//! - `testkit` (feature `testkit`, on by default): an in-memory seeded cluster of nodes for
//!   tests here and in other crates.
//!
//! The IO part, behind the feature `server` (on by default; the checker builds without it,
//! so it compiles no tokio, tarpc or clap):
//!
//! - `storage`: the data dir: term, vote, log and snapshot, checksummed and fsync'd.
//! - `server`: the tokio driver of a node (the `lockd` binary), over the `rpc` services.
//! - `bench`: acquire+release cycles per second and latency percentiles.
//! - `client`: the client library: leader discovery, redirects, deadlines, bounded retries.
//! - `sys`: the sockets and files of all of them, real or simulated (feature `sim`).
//!
//! # The main loop
//!
//! A driver owns a [`raft::Node`] and its storage, and carries out each [`raft::Output`] in
//! the order its doc spells out: `send_now`, then `persist` (made durable), then
//! `send_after_persist`, `apply` and `respond`, then `Input::Persisted` back to the node,
//! then the timers. Here three nodes are driven by hand, storage being a [`raft::Durable`]
//! per node and the network a queue:
//!
//! ```
//! use std::collections::VecDeque;
//!
//! use lockd::raft::{ClientRequest, Config, Durable, Envelope, Input, Node, Output, RequestId, Response};
//!
//! let members = vec![1, 2, 3];
//! let mut nodes = Vec::new();
//! let mut disks = vec![Durable::default(); 3];
//! let mut network: VecDeque<Envelope> = VecDeque::new();
//! let mut answers = Vec::new();
//!
//! // Carries out one output of node `id` (index `id - 1`), following the IO contract.
//! fn drive(id: u64, out: Output, node: &mut Node, disk: &mut Durable,
//!          network: &mut VecDeque<Envelope>, answers: &mut Vec<(RequestId, Response)>) {
//!     network.extend(out.send_now);
//!     let Some(persist) = out.persist else {
//!         network.extend(out.send_after_persist);
//!         answers.extend(out.respond);
//!         return;
//!     };
//!     disk.apply(&persist); // a real driver writes and fsyncs here
//!     network.extend(out.send_after_persist);
//!     answers.extend(out.respond);
//!     let (term, index) = (disk.last_term(), disk.last_index());
//!     let again = node.step(Input::Persisted { term, index });
//!     drive(id, again, node, disk, network, answers);
//! }
//!
//! for id in 1..=3u64 {
//!     let (node, _out) = Node::new(Config::new(id, members.clone()), Durable::default(), 0);
//!     nodes.push(node);
//! }
//! // Node 1 campaigns (as if its election timer fired), then messages flow until quiet.
//! let out = nodes[0].step(Input::Campaign);
//! drive(1, out, &mut nodes[0], &mut disks[0], &mut network, &mut answers);
//! let acquire = ClientRequest::Acquire { key: "a".into(), lease_ms: 1000, wait_ms: 0, origin: None };
//! let mut asked = false;
//! for _ in 0..1000 {
//!     let Some(envelope) = network.pop_front() else {
//!         if asked { break; }
//!         // The cluster is quiet and node 1 leads: ask it for a lock.
//!         let out = nodes[0].step(Input::Request { id: RequestId(1), request: acquire.clone() });
//!         drive(1, out, &mut nodes[0], &mut disks[0], &mut network, &mut answers);
//!         asked = true;
//!         continue;
//!     };
//!     let at = (envelope.target - 1) as usize;
//!     let out = nodes[at].step(Input::Message { from: envelope.source, msg: envelope.msg });
//!     drive(envelope.target, out, &mut nodes[at], &mut disks[at], &mut network, &mut answers);
//! }
//! // The token is the log index of the Grant: index 1 is the leader's Noop.
//! assert_eq!(answers, vec![(RequestId(1), Response::Granted { token: 2 })]);
//! assert!(nodes.iter().all(|n| n.table().holder("a").map(|h| h.token) == Some(2)));
//! ```
#![deny(missing_docs)]

pub mod bugs;
pub mod lock;
pub mod probe;
pub mod raft;
pub mod rng;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod trace;

#[cfg(feature = "server")]
pub mod bench;
#[cfg(feature = "server")]
pub mod buggify;
#[cfg(feature = "server")]
pub mod client;
#[cfg(feature = "server")]
pub mod rpc;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod storage;
#[cfg(feature = "server")]
pub mod sys;
