//! [`EtcdError`]: what can go wrong driving etcd, split by what it means for a history.

use std::path::PathBuf;

use history::ErrorWord;

/// An error of the etcd adapter.
///
/// For a client call, the variant says what the harness may record:
/// [`EtcdError::is_definite`] errors certainly had no effect (`fail`), the others leave the
/// outcome unknown (`info`). [`EtcdError::label`] gives the history's `error` cell.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// The request certainly had no effect: it was never sent (connection refused), or the
    /// server refused it before executing it (`etcdserver: no leader`, `too many requests`,
    /// `requested lease not found`).
    #[error("node {node}: refused: {reason}")]
    Refused {
        /// The node the client is bound to.
        node: u64,
        /// Why.
        reason: String,
    },
    /// No answer within the call deadline: the request may or may not take effect.
    #[error("node {node}: no answer within {after_ms} ms")]
    Timeout {
        /// The node the client is bound to.
        node: u64,
        /// The deadline that passed.
        after_ms: u64,
    },
    /// An answer, or a broken connection, that leaves the outcome unknown (`etcdserver:
    /// request timed out`, a connection closed after the request was sent, a bound reached).
    #[error("node {node}: outcome unknown: {reason}")]
    Indeterminate {
        /// The node the client is bound to.
        node: u64,
        /// Why.
        reason: String,
    },
    /// The lock key is not a valid key (DESIGN: the same rule as lockd's).
    #[error("bad key: {0}")]
    BadKey(#[from] lockd::lock::KeyError),
    /// A node id that the cluster does not have.
    #[error("no node {node} (the cluster has nodes 1..={nodes})")]
    NoSuchNode {
        /// The id asked for.
        node: u64,
        /// How many nodes there are.
        nodes: usize,
    },
    /// A fault that does not fit the node's state (kill a dead node, restart a live one).
    #[error("node {node}: cannot {action}: {reason}")]
    NodeState {
        /// The node.
        node: u64,
        /// The fault verb.
        action: &'static str,
        /// Its state.
        reason: String,
    },
    /// Starting a node process failed.
    #[error("node {node}: start {binary}: {source}")]
    Spawn {
        /// The node.
        node: u64,
        /// The etcd binary.
        binary: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Sending a signal to a node process failed.
    #[error("node {node}: signal {signal}: {source}")]
    Signal {
        /// The node.
        node: u64,
        /// The signal's name.
        signal: &'static str,
        /// The OS error.
        source: nix::Error,
    },
    /// Setting up the cluster's directory, log files or ports failed.
    #[error("cluster setup: {what}: {source}")]
    Setup {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The cluster did not serve within its deadline, or a node exited on its own.
    #[error("cluster not serving: {reason}")]
    NotServing {
        /// Why, with the end of the node's log when one exited.
        reason: String,
    },
}

/// Server error messages that mean the request was refused before it was executed.
///
/// - `no leader`: the `hasleader` interceptor refuses before the handler runs.
/// - `too many requests`: refused before the proposal when the apply backlog is too long.
/// - `requested lease not found`: a lease call (or a put attached to that lease) on a lease
///   that does not exist; nothing is written.
///
/// Anything else (`request timed out`, `leader changed`, `transport is closing`, ...) may
/// have been proposed and is treated as unknown: calling an unknown outcome definite would
/// let the checker accept a wrong history, the other way round only costs search time.
const DEFINITE_SERVER_ERRORS: [&str; 3] = [
    "etcdserver: no leader",
    "etcdserver: too many requests",
    "etcdserver: requested lease not found",
];

impl EtcdError {
    /// True when the failed call certainly had no effect, so the op may be recorded `fail`.
    pub fn is_definite(&self) -> bool {
        !matches!(
            self,
            EtcdError::Timeout { .. } | EtcdError::Indeterminate { .. }
        )
    }

    /// The history's `error` cell for this error (DESIGN: `timeout`, `unavailable`, ...).
    pub fn label(&self) -> ErrorWord {
        match self {
            EtcdError::Refused { reason, .. } if reason.contains("no leader") => {
                ErrorWord::NoLeader
            }
            EtcdError::Refused { .. } => ErrorWord::Unavailable,
            EtcdError::Timeout { .. } => ErrorWord::Timeout,
            EtcdError::Indeterminate { .. } => ErrorWord::Indeterminate,
            EtcdError::BadKey(_) => ErrorWord::Invalid,
            _ => ErrorWord::Harness,
        }
    }

    /// True for the server's "requested lease not found".
    pub(crate) fn is_lease_not_found(&self) -> bool {
        matches!(self, EtcdError::Refused { reason, .. } if reason.contains("lease not found"))
    }

    /// The error of a gateway answer with a non-200 status, classified by its message.
    pub(crate) fn from_server(node: u64, status: u16, message: String) -> Self {
        let reason = format!("HTTP {status}: {message}");
        if DEFINITE_SERVER_ERRORS
            .iter()
            .any(|known| message.contains(known))
        {
            EtcdError::Refused { node, reason }
        } else {
            EtcdError::Indeterminate { node, reason }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_errors_are_definite_only_when_known_to_precede_execution() {
        // DESIGN: an answer that never came, or may have taken effect, is `info`, never guessed.
        let no_leader = EtcdError::from_server(1, 503, "etcdserver: no leader".into());
        assert!(no_leader.is_definite());
        assert_eq!(no_leader.label().as_str(), "no-leader");
        let timed_out = EtcdError::from_server(1, 503, "etcdserver: request timed out".into());
        assert!(!timed_out.is_definite());
        assert_eq!(timed_out.label().as_str(), "indeterminate");
        let lease = EtcdError::from_server(1, 404, "etcdserver: requested lease not found".into());
        assert!(lease.is_lease_not_found());
        assert!(
            !EtcdError::Timeout {
                node: 1,
                after_ms: 5
            }
            .is_definite()
        );
    }
}
