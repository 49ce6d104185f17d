//! The tarpc services of a lockd node: [`Peer`] (Raft messages between nodes) and
//! [`LockService`] (the client API, plus the harness's clock control).
//!
//! Both use the JSON codec over TCP (length-delimited frames, at most [`FRAME_LEN_MAX`]
//! bytes): it is debuggable, and foreign harnesses can speak it. Each directed peer link is
//! its own TCP connection (the sender's `Peer` client to the receiver's `Peer` server), so a
//! fault proxy placed on one link cuts exactly one direction.

use serde::{Deserialize, Serialize};

use crate::lock::{Key, Origin, Token};
use crate::raft::{Message, NodeId, Response, Status};

/// The longest frame either service accepts, in bytes (tarpc's length-delimited codec).
pub const FRAME_LEN_MAX: usize = 16 << 20;

/// The Raft transport: one-way messages (a response is its own message, sent back on the
/// receiver's own link), batched per call.
#[tarpc::service]
pub trait Peer {
    /// Delivers `msgs`, in order, from node `from`. The unit reply only tells the sender that
    /// the receiver queued them; it promises nothing else.
    async fn deliver(from: NodeId, msgs: Vec<Message>);
}

/// The client API of a node.
#[tarpc::service]
pub trait LockService {
    /// Acquires `key` for `lease_ms`, waiting up to `wait_ms` when it is held (0 = try once).
    /// `origin` (client id, request sequence) makes a retry return the same token.
    /// `timeout_ms`: how long the caller waits for the answer, from when the node receives
    /// the request, on the node's own clock; then the node treats the caller as gone (a grant
    /// made later is released as a phantom lock). tarpc's own deadline is measured on
    /// `std::time::Instant`, which a simulation does not drive, so it is only a backstop.
    async fn acquire(
        key: Key,
        lease_ms: u64,
        wait_ms: u64,
        origin: Option<Origin>,
        timeout_ms: u64,
    ) -> Response;
    /// Releases `key` held under `token` (`timeout_ms` as for `acquire`).
    async fn release(key: Key, token: Token, origin: Option<Origin>, timeout_ms: u64) -> Response;
    /// Registers a client session (`Response::Registered { session }` once committed;
    /// `timeout_ms` as for `acquire`).
    async fn register_session(timeout_ms: u64) -> Response;
    /// This node's view of the cluster.
    async fn status() -> NodeStatus;
    /// The harness's clock nemesis: from now on this node's clock runs at `rate` times real
    /// time, after jumping by `jump_ms` (negative jumps are clamped so that the clock the
    /// core sees never goes backwards). Refused unless `rate` is finite and within
    /// [`CLOCK_RATE_MIN`, `CLOCK_RATE_MAX`].
    async fn set_clock(rate: f64, jump_ms: i64) -> Result<ClockReading, String>;
}

/// The slowest clock rate `set_clock` and `--clock-rate` accept.
pub const CLOCK_RATE_MIN: f64 = 0.01;

/// The fastest clock rate `set_clock` and `--clock-rate` accept.
pub const CLOCK_RATE_MAX: f64 = 100.0;

/// A node's local clock as the core sees it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClockReading {
    /// Milliseconds on the node's clock (what `Input::Tick` carries).
    pub now_ms: u64,
    /// Its current rate relative to real time.
    pub rate: f64,
}

/// What [`LockService::status`] answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NodeStatus {
    /// The core's status: id, role, term, leader, commit index, last applied.
    pub raft: Status,
    /// The node's clock.
    pub clock: ClockReading,
    /// Client requests waiting for an answer at this node.
    pub pending_requests: usize,
}
