//! nemesis: the harness of locksmith, and the `locksmith` command's library.
//!
//! - [`etcd`]: etcd as a second system under test (cluster of real processes, lock client).
//! - [`bench`]: acquire+release cycles per second, latency percentiles, leader failover.
#![deny(missing_docs)]

pub mod bench;
pub mod etcd;
