//! The locksmith harness: runs a lock service as real OS processes, drives concurrent
//! clients, lets a nemesis kill, pause, partition and skew the clocks of its nodes, records
//! every operation to a CSV history as it happens, and checks the history.
//!
//! The main loop of `locksmith test` (see [`run`]):
//!
//! 1. pick a seed and build the plan: a pure, seeded [`schedule`] of client ops and faults;
//! 2. start the cluster ([`cluster`]) behind a partitionable network ([`net`]);
//! 3. run the clients ([`workload`]) and the nemesis ([`faults`]) against it, recording each
//!    op ([`recorder`]) before it acts;
//! 4. heal everything (every fault package's final schedule), then a recovery phase in
//!    which every client must succeed again;
//! 5. write `store/<test>/<timestamp>/` and run every check.
//!
//! `locksmith test`, `sim` and `check` reach their verdicts through one pipeline,
//! [`store::pipeline`]: a history in memory, a run dir or any CSV file, to a typed report.
//! [`check`] is `locksmith check` around it: batches, text and JSON output, exit codes.
//!
//! `cargo build` builds both binaries, `locksmith` and `lockd`; the harness finds `lockd`
//! through `LOCKD_BIN`, or next to its own executable.
//!
//! Beside the harness: [`etcd`], etcd as a second system under test (a cluster of real
//! processes, a lock client, [`etcd::Etcd`] for the [`system::System`] trait), and
//! [`bench`], acquire+release cycles per second, latency percentiles and leader failover;
//! [`hosts`], nodes on other machines over SSH (`--hosts`) and namespace hosts to try it on
//! (`locksmith hosts up N`), with the `slow` and `flaky` faults of [`netem`].
//!
//! Every local command and every reap of a killed child goes through [`subprocess`], which
//! bounds it, kills its process group at the deadline and reports the timeout.
#![deny(missing_docs)]

pub mod bench;
pub mod capture;
pub mod check;
pub mod cluster;
pub mod faults;
pub mod harness;
pub mod hosts;
pub mod net;
pub mod progress;
pub mod replay;
pub mod rng;
pub mod run;
pub mod sim;
pub mod store;
pub mod subprocess;
pub mod systems;

pub use faults::netem;

/// A node's id, 1-based as in `lockd --id`.
pub type NodeId = u64;

/// The harness's one error type.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system or socket error, with what was being done.
    #[error("io: {0}")]
    Io(String),
    /// A step did not finish within its bound.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A feature this machine or process cannot provide (e.g. the kernel net without root).
    #[error("unsupported here: {0}")]
    Unsupported(String),
    /// A bad command-line argument or option value.
    #[error("bad argument: {0}")]
    BadArgument(String),
    /// Two nemeses claim one fault kind, or a fault names something that does not exist.
    #[error("nemesis: {0}")]
    Nemesis(String),
    /// The cluster could not be started or controlled.
    #[error("cluster: {0}")]
    Cluster(String),
    /// Writing the history failed.
    #[error("history: {0}")]
    History(String),
}
