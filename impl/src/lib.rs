//! lockd: a Raft-replicated lock service with fencing tokens and leases.
//!
//! - [`lock`]: the lock table of the seed design, a pure state machine.
//! - [`raft`]: the sans-IO Raft core that replicates it.
//! - [`bugs`]: the injected bugs of `lockd --bug NAME`.
//! - [`storage`]: the data dir: term, vote, log and snapshot, checksummed and fsync'd.
#![deny(missing_docs)]

pub mod bugs;
pub mod lock;
pub mod raft;
pub mod storage;
