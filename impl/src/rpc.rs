//! The tarpc services of a lockd node: [`Peer`] (Raft messages between nodes),
//! [`LockService`] (the client API: lock commands, sessions and status, nothing else) and
//! [`Admin`] (the harness's controls, on an endpoint of its own that is off by default).
//!
//! # Ports by role
//!
//! The client port serves clients only. The harness's clock control was once answered there
//! to anyone, with no bound on a forward jump: any client could expire every lease at once
//! or overflow the node's clock (review finding of issue 27). It now lives on the admin
//! endpoint, which a node serves only when started with `--admin-addr` (a loopback address),
//! and every call must carry the secret the node keeps in `admin.secret` in its data dir
//! (the harness reads it there). A call to an admin control on the client port is not part
//! of the client protocol: the node cannot decode it and closes that connection.
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

/// The Raft transport: batches of messages, each call's reply carrying messages back.
#[tarpc::service]
pub trait Peer {
    /// Delivers `msgs`, in order, from node `from`. The reply holds the messages the receiver
    /// made for `from` in the turn that stepped them and that had to wait for that turn's
    /// persist (an AppendEntries' or a vote's answer): the caller takes them as messages
    /// from the receiver, so that an answer needs no call of its own. Empty when there were
    /// none, or when the receiver's turn took longer than `PEER_REPLY_WAIT_MS` (its answers
    /// then go out on its own link). Messages are still one-way: a reply promises nothing.
    async fn deliver(from: NodeId, msgs: Vec<Message>) -> Vec<Message>;
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
    /// Gives back `key` if a grant of the caller's earlier request `request` (same session)
    /// holds it: the caller stopped waiting for that acquire and never read its answer.
    /// `Released` when it freed the key, `NotHolder` when that request holds nothing (never
    /// applied, refused, released, or expired); an acquire of `request` applied later is
    /// refused (`timeout_ms` as for `acquire`).
    async fn abandon(key: Key, request: u64, origin: Option<Origin>, timeout_ms: u64) -> Response;
    /// Registers a client session (`Response::Registered { session }` once committed;
    /// `label` only names it in logs and reports; `timeout_ms` as for `acquire`).
    async fn register_session(label: u64, timeout_ms: u64) -> Response;
    /// This node's view of the cluster.
    async fn status() -> NodeStatus;
}

/// The harness's controls of a node (the admin endpoint, `lockd --admin-addr`).
#[tarpc::service]
pub trait Admin {
    /// The harness's clock nemesis: from now on this node's clock runs at `rate` times real
    /// time, after jumping by `jump_ms` (negative jumps are clamped so that the clock the
    /// core sees never goes backwards). Refused unless `secret` is the node's admin secret,
    /// `rate` is finite and within [`CLOCK_RATE_MIN`, `CLOCK_RATE_MAX`], and `jump_ms` is
    /// within [`CLOCK_JUMP_BACK_MS_MAX`] back and [`CLOCK_JUMP_FORWARD_MS_MAX`] forward.
    async fn set_clock(
        secret: String,
        rate: f64,
        jump_ms: i64,
    ) -> Result<ClockReading, AdminRefusal>;
}

/// Why the admin endpoint refused a call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum AdminRefusal {
    /// The secret is not the node's admin secret.
    #[error("wrong admin secret")]
    WrongSecret,
    /// The clock rate is out of range.
    #[error("clock rate {rate} is not within {CLOCK_RATE_MIN}..={CLOCK_RATE_MAX}")]
    RateOutOfRange {
        /// The rate asked for.
        rate: f64,
    },
    /// The clock jump is out of range.
    #[error(
        "clock jump {jump_ms} ms is not within -{CLOCK_JUMP_BACK_MS_MAX}..={CLOCK_JUMP_FORWARD_MS_MAX} ms"
    )]
    JumpOutOfRange {
        /// The jump asked for.
        jump_ms: i64,
    },
    /// The node is shutting down.
    #[error("the node is shutting down")]
    ShuttingDown,
}

/// The longest forward jump of a node's clock `set_clock` accepts, ms: a minute, far less
/// than the longest lease (`Config::lease_ms_max`), so that one call cannot expire every
/// lease at once, and far from any overflow.
pub const CLOCK_JUMP_FORWARD_MS_MAX: i64 = 60_000;

/// The longest backward jump `set_clock` accepts, ms (the node holds its clock still
/// instead, so a backward jump is safe; the bound keeps the arithmetic far from overflow).
pub const CLOCK_JUMP_BACK_MS_MAX: i64 = 3_600_000;

/// The name of the file in a node's data dir that holds its admin secret.
pub const ADMIN_SECRET_FILE: &str = "admin.secret";

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
