//! lockd: a Raft-replicated lock service with fencing tokens and leases.
//!
//! - [`lock`]: the lock table of the seed design, a pure state machine.
//! - [`raft`]: the sans-IO Raft core that replicates it.
//! - [`bugs`]: the injected bugs of `lockd --bug NAME`.
#![deny(missing_docs)]

pub mod bugs;
pub mod lock;
pub mod raft;
#[cfg(feature = "testkit")]
pub mod testkit;
