//! [`ZkLockClient`]: DESIGN's acquire/release on ZooKeeper, with the lock recipe of
//! ZooKeeper's documentation (Curator's `InterProcessMutex`, kazoo's `Lock`).
//!
//! # The recipe
//!
//! - **One session per grant**, with the acquire's `lease_ms` as its session timeout: the
//!   session is the lease. The acquire refuses (`fail invalid`, before it creates anything) a
//!   session whose negotiated timeout is shorter than `lease_ms`.
//! - **Acquire**: create the ephemeral sequential node `/locks/KEY/lock-N`, list
//!   `/locks/KEY`; the lowest sequence number holds the lock. Otherwise watch the
//!   predecessor (the next lower node) and list again when it goes, until the wait ends.
//! - **Giving up** (a try-acquire, or a wait that ran out) is one atomic multi: "the
//!   predecessor exists" and "delete my node". Sequence numbers are never reused, so when it
//!   commits the node was never the lowest: nobody could have seen us hold the key, and the
//!   answer is `busy` (the lowest node's owner held it meanwhile). When the predecessor is
//!   gone, the acquire lists again and may find itself the holder after all.
//! - **Fencing token** = the lock node's creation zxid (`czxid`): unique, and increasing in
//!   the order of creation, which is the order of the queue, hence of the grants.
//! - **Release** deletes the node, then closes the session. `NoNode`: the session expired,
//!   ZooKeeper deleted the node with it, the key was not held any more (`not-holder`).
//!   `SessionExpired` is not proof of that: the client library also says it when it could
//!   not reconnect within the session timeout, while the servers (electing a leader, say)
//!   have not expired the session yet, and the node lives on. So that is `info`.
//!
//! A grant the process never releases (the workload stopped holding it) is abandoned when
//! the process asks for the same key again, so it ends as a lease does, with the session.
//!
//! # Outcomes
//!
//! Every call is cut at the op's deadline. Before the lock node is created nothing can have
//! taken effect, so a failure is `fail unavailable`. After it, an unclear answer (lost
//! connection, deadline, expired session) is `info`, and the session is **abandoned**: its
//! relay is cut ([`super::relay::Relay::cut`]) without closing the session, so ZooKeeper
//! deletes the node only when the session expires, at least `lease_ms` after the acquire
//! began, as the lease promises. Closing the session instead would free the key early while
//! the history says the acquire may have taken effect.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use history::ErrorWord;
use tokio::time::Instant;
use zookeeper_client as zk;

use super::relay::Relay;
use crate::NodeId;
use crate::systems::Outcome;

/// The znode under which every lock key lives.
pub const LOCKS: &str = "/locks";
/// The prefix of a lock node's name under `/locks/KEY`.
const NODE_PREFIX: &str = "lock-";
/// Time left before the deadline for the give-up multi of a wait that ran out.
const DECIDE_MARGIN: Duration = Duration::from_millis(500);
/// How many list-and-watch rounds one acquire may take before it gives up (`info`).
const ROUNDS_MAX: u32 = 1000;

/// A session that holds a lock: its client, its relay and its node.
struct Held {
    session: zk::Client,
    relay: Relay,
    path: String,
}

/// A lock client of one client process (see the module docs).
pub struct ZkLockClient {
    /// Every server's client address, in node order.
    servers: Vec<SocketAddr>,
    nodes: Vec<NodeId>,
    /// The index of this client's own node.
    first: usize,
    held: Mutex<HashMap<u64, Held>>,
    /// Keys whose `/locks/KEY` this client saw exist.
    parents: Mutex<HashSet<String>>,
    stalled: AtomicBool,
}

/// What a session's acquire came to, before the outcome is recorded.
enum Acquired {
    Granted { token: u64, path: String },
    Busy,
}

/// An acquire that went wrong: whether its lock node may exist.
enum Trouble {
    /// Nothing was created: `fail` with this word.
    Nothing(ErrorWord),
    /// The node may exist (or may have been granted): `info` with this word, and abandon.
    Unclear(ErrorWord),
}

fn unclear(error: &zk::Error) -> Trouble {
    Trouble::Unclear(match error {
        zk::Error::Timeout => ErrorWord::Timeout,
        zk::Error::ConnectionLoss => ErrorWord::Disconnected,
        _ => ErrorWord::Indeterminate,
    })
}

impl ZkLockClient {
    /// A client whose sessions go first to `nodes[first]`, then to the others in turn.
    pub fn new(nodes: Vec<NodeId>, servers: Vec<SocketAddr>, first: usize) -> Self {
        assert_eq!(nodes.len(), servers.len(), "one client address per node");
        ZkLockClient {
            servers,
            nodes,
            first,
            held: Mutex::new(HashMap::new()),
            parents: Mutex::new(HashSet::new()),
            stalled: AtomicBool::new(false),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stalls or frees every session this client holds a lock with (a process pause).
    pub fn stall(&self, stalled: bool) {
        self.stalled.store(stalled, Ordering::Relaxed);
        for held in self.held().values() {
            held.relay.stall(stalled);
        }
    }

    /// Abandons the sessions of grants of `key` this client never released: a process that
    /// asks for a key it holds has forgotten its grant (the workload stopped between grant
    /// and release at the end of the fault phase). Its node then goes when ZooKeeper expires
    /// the session, as a lease that runs out, instead of blocking the key for as long as
    /// this client lives.
    fn forget(&self, key: &str) {
        let prefix = format!("{LOCKS}/{key}/");
        self.held().retain(|_, held| {
            let keep = !held.path.starts_with(&prefix);
            if !keep {
                held.relay.cut();
            }
            keep
        });
    }

    /// The tokens this client holds.
    pub fn tokens(&self) -> Vec<u64> {
        self.held().keys().copied().collect()
    }

    /// Acquires `key` with a session of `lease_ms`, waiting up to `wait_ms`, giving up at
    /// `deadline`.
    pub async fn acquire(
        &self,
        key: &str,
        lease_ms: u64,
        wait_ms: u64,
        deadline: Instant,
    ) -> Outcome {
        if key.is_empty() || key.contains('/') {
            return Outcome::Fail {
                error: ErrorWord::Invalid,
                node: None,
            };
        }
        self.forget(key);
        let relay = match Relay::start(self.servers.clone(), self.first).await {
            Ok(relay) => relay,
            Err(_) => {
                return Outcome::Fail {
                    error: ErrorWord::Harness,
                    node: None,
                };
            }
        };
        let wait_until = (Instant::now() + Duration::from_millis(wait_ms))
            .min(deadline.checked_sub(DECIDE_MARGIN).unwrap_or(deadline));
        let cluster = relay.addr().to_string();
        let connect = zk::Client::connector()
            .with_session_timeout(Duration::from_millis(lease_ms))
            .with_connection_timeout(Duration::from_millis(lease_ms.min(1_000)))
            .connect(&cluster);
        let session = match tokio::time::timeout_at(deadline, connect).await {
            Ok(Ok(session)) => session,
            // No session, so no node: nothing took effect.
            Ok(Err(_)) | Err(_) => {
                relay.cut();
                return Outcome::Fail {
                    error: ErrorWord::Unavailable,
                    node: None,
                };
            }
        };
        if session.session_timeout() < Duration::from_millis(lease_ms) {
            // A shorter session than the lease would let the key go early; refuse before
            // creating anything (the run's options keep leases within the servers' range).
            return Outcome::Fail {
                error: ErrorWord::Invalid,
                node: None,
            };
        }
        let node = |relay: &Relay| self.nodes.get(relay.server()).copied();
        let attempt = self.lock_in_session(&session, key, wait_until);
        let result = match tokio::time::timeout_at(deadline, attempt).await {
            Ok(result) => result,
            Err(_) => Err(Trouble::Unclear(ErrorWord::Timeout)),
        };
        match result {
            Ok(Acquired::Granted { token, path }) => {
                let answered = node(&relay);
                relay.stall(self.stalled.load(Ordering::Relaxed));
                self.held().insert(
                    token,
                    Held {
                        session,
                        relay,
                        path,
                    },
                );
                Outcome::Ok {
                    token: Some(token),
                    node: answered,
                }
            }
            // Our node is deleted; dropping the session closes it.
            Ok(Acquired::Busy) => Outcome::Fail {
                error: ErrorWord::Busy,
                node: node(&relay),
            },
            Err(Trouble::Nothing(error)) => {
                relay.cut();
                Outcome::Fail { error, node: None }
            }
            Err(Trouble::Unclear(error)) => {
                // Abandon: the session expires a session timeout after its last contact.
                relay.cut();
                Outcome::Info(error)
            }
        }
    }

    /// The recipe within one session (module docs).
    async fn lock_in_session(
        &self,
        session: &zk::Client,
        key: &str,
        wait_until: Instant,
    ) -> Result<Acquired, Trouble> {
        let dir = format!("{LOCKS}/{key}");
        self.ensure_parent(session, key, &dir).await?;
        let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let (stat, sequence) = session
            .create(&format!("{dir}/{NODE_PREFIX}"), b"", &ephemeral)
            .await
            .map_err(|e| match e {
                zk::Error::NoNode => Trouble::Nothing(ErrorWord::Unavailable),
                other => unclear(&other),
            })?;
        let own = format!("{NODE_PREFIX}{sequence}");
        let own_path = format!("{dir}/{own}");
        let token =
            u64::try_from(stat.czxid).map_err(|_| Trouble::Unclear(ErrorWord::Indeterminate))?;
        for _ in 0..ROUNDS_MAX {
            let children = session.list_children(&dir).await.map_err(|e| unclear(&e))?;
            let mut queue: Vec<&String> = children
                .iter()
                .filter(|c| c.starts_with(NODE_PREFIX))
                .collect();
            queue.sort_by_key(|c| sequence_of(c));
            let Some(position) = queue.iter().position(|c| **c == own) else {
                // Our node is gone: the session expired, so we may have held the key.
                return Err(Trouble::Unclear(ErrorWord::Indeterminate));
            };
            if position == 0 {
                return Ok(Acquired::Granted {
                    token,
                    path: own_path,
                });
            }
            let predecessor = format!("{dir}/{}", queue[position - 1]);
            if Instant::now() >= wait_until {
                // Give up atomically: only if the predecessor still exists.
                let mut multi = session.new_multi_writer();
                multi
                    .add_check_version(&predecessor, -1)
                    .and_then(|()| multi.add_delete(&own_path, None))
                    .map_err(|_| Trouble::Unclear(ErrorWord::Harness))?;
                match multi.commit().await {
                    Ok(_) => return Ok(Acquired::Busy),
                    Err(zk::MultiWriteError::OperationFailed {
                        index: 0,
                        source: zk::Error::NoNode,
                    }) => continue,
                    Err(error) => return Err(unclear(&error.into())),
                }
            }
            let (stat, watcher) = session
                .check_and_watch_stat(&predecessor)
                .await
                .map_err(|e| unclear(&e))?;
            if stat.is_none() {
                continue;
            }
            tokio::select! {
                _ = watcher.changed() => {}
                _ = tokio::time::sleep_until(wait_until) => {}
            }
        }
        Err(Trouble::Unclear(ErrorWord::GaveUp))
    }

    /// Creates `/locks` and `/locks/KEY` (persistent) unless this client saw them.
    async fn ensure_parent(
        &self,
        session: &zk::Client,
        key: &str,
        dir: &str,
    ) -> Result<(), Trouble> {
        let known = |parents: &Mutex<HashSet<String>>| {
            parents
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(key)
        };
        if known(&self.parents) {
            return Ok(());
        }
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        for path in [LOCKS, dir] {
            match session.create(path, b"", &persistent).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                // Parents carry no lock: whatever happened, no lock node exists yet.
                Err(_) => return Err(Trouble::Nothing(ErrorWord::Unavailable)),
            }
        }
        self.parents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_owned());
        Ok(())
    }

    /// Releases the lock held under `token` (module docs).
    pub async fn release(&self, token: u64, deadline: Instant) -> Outcome {
        let Some(held) = self.held().remove(&token) else {
            // Not a grant of this client, or released already.
            return Outcome::Fail {
                error: ErrorWord::NotHolder,
                node: None,
            };
        };
        // A release runs once the holder runs again.
        held.relay.stall(false);
        let node = self.nodes.get(held.relay.server()).copied();
        let delete = held.session.delete(&held.path, None);
        match tokio::time::timeout_at(deadline, delete).await {
            Ok(Ok(())) => Outcome::Ok { token: None, node },
            // Only the server's word that the node is gone is definite.
            Ok(Err(zk::Error::NoNode)) => {
                held.relay.cut();
                Outcome::Fail {
                    error: ErrorWord::NotHolder,
                    node,
                }
            }
            Ok(Err(error)) => {
                held.relay.cut();
                Outcome::Info(match error {
                    zk::Error::ConnectionLoss => ErrorWord::Disconnected,
                    _ => ErrorWord::Indeterminate,
                })
            }
            Err(_) => {
                held.relay.cut();
                Outcome::Info(ErrorWord::Timeout)
            }
        }
    }
}

/// The sequence number of a lock node's name (`lock-0000000042` -> 42); unparsable names
/// sort last.
fn sequence_of(name: &str) -> i64 {
    name.strip_prefix(NODE_PREFIX)
        .and_then(|n| n.parse().ok())
        .unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_nodes_sort_by_sequence_number() {
        // Module docs: the lowest sequence number holds the lock.
        let mut names = [
            "lock-0000000010",
            "lock-0000000002",
            "other",
            "lock-0000000009",
        ];
        names.sort_by_key(|n| sequence_of(n));
        assert_eq!(
            names,
            [
                "lock-0000000002",
                "lock-0000000009",
                "lock-0000000010",
                "other"
            ]
        );
    }
}
