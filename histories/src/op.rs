//! One row of a history: [`Op`], and its parts.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Who performed an op: a client process or the nemesis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Process {
    /// A client process id. A client whose op ended `info` never invokes again under it.
    Client(u64),
    /// The fault injector.
    Nemesis,
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Process::Client(id) => write!(f, "{id}"),
            Process::Nemesis => f.write_str("nemesis"),
        }
    }
}

/// The kind of a row: an invocation or one of the three completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum OpType {
    /// The op started.
    Invoke,
    /// The op certainly took effect.
    Ok,
    /// The op certainly did not take effect.
    Fail,
    /// The outcome is unknown: it may take effect at any time after its invoke, or never.
    Info,
}

impl OpType {
    /// The CSV spelling: `invoke`, `ok`, `fail`, `info`.
    pub fn as_str(self) -> &'static str {
        match self {
            OpType::Invoke => "invoke",
            OpType::Ok => "ok",
            OpType::Fail => "fail",
            OpType::Info => "info",
        }
    }
}

impl fmt::Display for OpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of a history (CSV schema v1, see `histories/README.md`).
///
/// `f` is kept as text: `acquire`, `release`, `write`, `read` for clients (and `cas`, `get`,
/// `put`, `append` for the register and kv models), a fault verb for the nemesis.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Op {
    /// Position in the history, 0, 1, 2, ... with no gaps.
    pub index: u64,
    /// Nanoseconds since the run started, from the harness's one monotonic clock.
    pub time_ns: u64,
    /// Who.
    pub process: Process,
    /// Invoke or a completion.
    pub op_type: OpType,
    /// The function: `acquire`, `release`, `write`, `read`, or a nemesis verb.
    pub f: String,
    /// The lock key (also the fenced resource's key); empty when none.
    pub key: String,
    /// Acquire invoke: lease_ms; write invoke: the value; read ok: the value read; nemesis:
    /// the targets and shape. Empty when none.
    pub value: String,
    /// Acquire ok: the token granted; release invoke: the token released; write invoke: the
    /// token carried. `None` when the cell is empty.
    pub token: Option<u64>,
    /// The node that answered, when known; empty otherwise.
    pub node: String,
    /// On fail or info: why (`busy`, `not-holder`, `stale-token`, `timeout`, ...).
    pub error: String,
}
