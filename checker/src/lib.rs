//! Checks of lock-service histories.
#![deny(missing_docs)]

pub mod model;
