//! Operation histories of lock services: the data model and the CSV format (schema v1).
#![deny(missing_docs)]

pub mod op;

pub use op::{Op, OpType, Process};
