//! The errors of this crate: [`CheckError`].

use thiserror::Error;

/// Why a check could not run (as opposed to a verdict: a check that ran says `Valid`,
/// `Invalid` or `Unknown`).
#[derive(Debug, Error)]
pub enum CheckError {
    /// The history file could not be parsed: `FILE:line:column: reason`.
    #[error("{path}:{source}")]
    Parse {
        /// The file.
        path: String,
        /// Where and why.
        source: history::error::ParseError,
    },
    /// The in-memory history breaks a rule of schema v1.
    #[error(transparent)]
    Pair(#[from] history::error::PairError),
    /// An operation the model cannot read: a missing token, a value that is not a number.
    #[error("row {row}: {reason}")]
    BadOperation {
        /// The `index` of the offending row.
        row: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The system's reason.
        source: std::io::Error,
    },
    /// A foreign history could not be converted.
    #[error("{0}")]
    Convert(String),
    /// A bad argument (an unknown model name, a drift outside `[0, 1)`).
    #[error("{0}")]
    Usage(String),
}

impl CheckError {
    pub(crate) fn bad(row: u64, reason: impl Into<String>) -> CheckError {
        CheckError::BadOperation {
            row,
            reason: reason.into(),
        }
    }
}
