//! [`EtcdLockClient`]: DESIGN's acquire/release on etcd, through the JSON gateway.
//!
//! # The recipe
//!
//! A lock `key` is the prefix `<namespace>/<key>#`; a client that wants it writes an owner
//! key `<prefix><lease-id-hex>` attached to a fresh lease, and the owner is the key under the
//! prefix with the lowest create revision (etcd's `concurrency.Mutex` and `v3lock` recipe).
//! `#` cannot occur in a lock key (`lockd::lock::validate_key`), so no lock's prefix is a
//! prefix of another's.
//!
//! - **Fencing token** = the owner key's `create_revision`. The key is never modified, and
//!   etcd's one revision counter makes tokens unique across keys and strictly increasing in
//!   the real-time order of grants (DESIGN's token rule).
//! - **Try-acquire** is one Txn after the lease grant: if every key under the prefix has
//!   create revision 0 (none exists), put the owner key; the Txn's revision is the token.
//!   Otherwise `Busy`, and the lease is revoked.
//! - **Acquire with a wait** puts the owner key unconditionally and reads the first key by
//!   create revision in the same Txn. If it is not the owner it watches its predecessor (the
//!   newest older key) for deletion, with a watch that starts at the current revision (one
//!   from an older revision is served by etcd's 100 ms unsynced loop: research/etcd-peer.md
//!   §3), re-reads the predecessor after the watch is created, and keeps its own lease alive
//!   meanwhile. At the deadline one Txn decides atomically: if every key under the prefix is
//!   at least as new as ours we are the owner (`Granted`), otherwise our key is deleted
//!   (`Busy`).
//! - **Lease**: `lease_ms` rounded up to whole seconds (etcd raises it to its minimum, 2 s
//!   with default timing; the granted TTL is returned). After a wait the lease is renewed
//!   once on grant, so it runs at least `lease_ms` from an instant inside the op.
//! - **Release** revokes the grant's lease, which deletes the owner key. The lease carries
//!   only that key and goes away only with it (our revoke or its expiry), so "revoked" means
//!   the key was held under that token until now (`Released`), and "lease not found" means it
//!   was not (`NotHolder`).
//!
//! # Outcomes
//!
//! Every call has a deadline ([`ClientOptions::call_timeout`]). A lease grant that fails
//! leaves the lock untouched, so the acquire fails definitely. A Txn or revoke without a
//! clear answer is [`EtcdError::Timeout`] or [`EtcdError::Indeterminate`]: the harness
//! records `info`. After such an acquire the client revokes the lease in the background, so
//! an owner key that did get written does not block the lock until its TTL runs out.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::error::EtcdError;
use super::http::{Connection, HttpError, MessageStream};
use super::wire::{self, LeaseResponse, RangeResponse, Streamed, TxnResponse, WatchResponse};

/// How many wait rounds (predecessor read + watch) one acquire may take; reaching it is
/// reported as [`EtcdError::Indeterminate`].
pub const WAIT_ROUNDS_MAX: u32 = 1000;
/// How many messages one predecessor watch reads before it re-checks.
const WATCH_MESSAGES_MAX: u32 = 10_000;

/// How a client talks to its node.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The deadline of every single call (lease grant, Txn, revoke, watch set-up).
    pub call_timeout: Duration,
    /// The etcd key prefix under which lock keys live.
    pub namespace: String,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_millis(1000),
            namespace: "locksmith".into(),
        }
    }
}

/// How long an acquire may wait for a held key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Try once: `Busy` at once when the key is held.
    No,
    /// Queue for the key (FIFO by create revision) for at most this long.
    For(Duration),
}

/// A granted lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The fencing token: the owner key's create revision.
    pub token: u64,
    /// The lease TTL etcd granted, in seconds (at least `lease_ms`, rounded up).
    pub ttl_s: i64,
    /// The node that answered.
    pub node: u64,
}

/// The answer to an acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The key is now held under the grant's token.
    Granted(Grant),
    /// The key was held by another owner at some instant inside the op (DESIGN `busy`).
    Busy,
}

/// The answer to a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The key was held under that token and is now free.
    Released,
    /// The key was not held under that token (DESIGN `not-holder`), e.g. its lease expired.
    NotHolder,
}

/// What the client remembers of a lock it holds.
#[derive(Clone, Debug)]
struct Held {
    key: String,
    lease: i64,
}

/// A lock client bound to one etcd node (see the module docs).
pub struct EtcdLockClient {
    node: u64,
    endpoint: SocketAddr,
    options: ClientOptions,
    connection: Option<Connection>,
    held: HashMap<u64, Held>,
    /// The deadline of the op in progress (`acquire_until`, `release_until`): no call of
    /// the op may run past it.
    op_deadline: Option<Instant>,
}

impl EtcdLockClient {
    /// A client of the node `node` at `endpoint`; it connects on its first call.
    pub fn new(node: u64, endpoint: SocketAddr, options: ClientOptions) -> Self {
        Self {
            node,
            endpoint,
            options,
            connection: None,
            held: HashMap::new(),
            op_deadline: None,
        }
    }

    /// The node this client is bound to.
    pub fn node(&self) -> u64 {
        self.node
    }

    /// How many locks this client holds, as far as it knows.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    /// Acquires `key` for `lease_ms`, trying once or waiting (see the module docs); each
    /// call has the client's call timeout, and the op has no overall deadline but the wait.
    pub async fn acquire(
        &mut self,
        key: &str,
        lease_ms: u64,
        wait: Wait,
    ) -> Result<Acquired, EtcdError> {
        self.op_deadline = None;
        self.acquire_op(key, lease_ms, wait).await
    }

    /// [`acquire`](Self::acquire) that ends by `deadline`: every call is cut to the time
    /// left, and a wait ends one call timeout before it, leaving time for the deciding Txn.
    /// An acquire cut by the deadline is [`EtcdError::Timeout`] (or definite, when only the
    /// lease grant ran), and its lease is revoked in the background.
    pub async fn acquire_until(
        &mut self,
        key: &str,
        lease_ms: u64,
        wait: Wait,
        deadline: Instant,
    ) -> Result<Acquired, EtcdError> {
        self.op_deadline = Some(deadline);
        let outcome = self.acquire_op(key, lease_ms, wait).await;
        self.op_deadline = None;
        outcome
    }

    /// [`release`](Self::release) whose calls end by `deadline`.
    pub async fn release_until(
        &mut self,
        key: &str,
        token: u64,
        deadline: Instant,
    ) -> Result<Released, EtcdError> {
        self.op_deadline = Some(deadline);
        let outcome = self.release_op(key, token).await;
        self.op_deadline = None;
        outcome
    }

    /// Releases the lock on `key` held under `token` by revoking its lease.
    pub async fn release(&mut self, key: &str, token: u64) -> Result<Released, EtcdError> {
        self.op_deadline = None;
        self.release_op(key, token).await
    }

    async fn acquire_op(
        &mut self,
        key: &str,
        lease_ms: u64,
        wait: Wait,
    ) -> Result<Acquired, EtcdError> {
        lockd::lock::validate_key(key)?;
        let started = Instant::now();
        // A failed grant leaves the lock untouched: definite whatever the reason.
        let lease = self
            .grant_lease(lease_ttl_s(lease_ms))
            .await
            .map_err(|error| self.definite(error))?;
        let prefix = format!("{}/{key}#", self.options.namespace).into_bytes();
        let mut owner = prefix.clone();
        owner.extend_from_slice(format!("{:016x}", lease.id).as_bytes());
        let outcome = match wait {
            Wait::No => self.try_put(&prefix, &owner, lease.id).await,
            Wait::For(wait) => {
                let mut wait_until = started + wait;
                if let Some(deadline) = self.op_deadline {
                    let decide_by = deadline
                        .checked_sub(self.options.call_timeout)
                        .unwrap_or(started);
                    wait_until = wait_until.min(decide_by.max(started));
                }
                self.queue_and_wait(&prefix, &owner, &lease, wait_until)
                    .await
            }
        };
        match outcome {
            Ok(Some(token)) => {
                let key = key.to_string();
                self.held.insert(
                    token,
                    Held {
                        key,
                        lease: lease.id,
                    },
                );
                Ok(Acquired::Granted(Grant {
                    token,
                    ttl_s: lease.ttl,
                    node: self.node,
                }))
            }
            Ok(None) => {
                // Nothing holds our key (try: never written; wait: deleted by the deciding
                // Txn), so the revoke only tidies up and its failure changes nothing.
                let _ = self.revoke(lease.id).await;
                Ok(Acquired::Busy)
            }
            Err(error) => {
                self.revoke_in_background(lease.id);
                Err(error)
            }
        }
    }

    async fn release_op(&mut self, key: &str, token: u64) -> Result<Released, EtcdError> {
        lockd::lock::validate_key(key)?;
        let lease = match self.held.get(&token) {
            Some(held) if held.key == key => held.lease,
            _ => match self.find_lease(key, token).await? {
                Some(lease) => lease,
                None => return Ok(Released::NotHolder),
            },
        };
        match self.revoke(lease).await {
            Ok(()) => {
                self.held.remove(&token);
                Ok(Released::Released)
            }
            Err(error) if error.is_lease_not_found() => {
                self.held.remove(&token);
                Ok(Released::NotHolder)
            }
            Err(error) => Err(error),
        }
    }

    /// The lease of the owner key of `key` whose create revision is `token`, for a release of
    /// a token this client did not grant (another process's, or one from an unknown acquire).
    async fn find_lease(&mut self, key: &str, token: u64) -> Result<Option<i64>, EtcdError> {
        let prefix = format!("{}/{key}#", self.options.namespace).into_bytes();
        let request = json!({
            "key": wire::encode(&prefix),
            "range_end": wire::encode(&wire::prefix_end(&prefix)),
            "keys_only": true,
            "min_create_revision": token.to_string(),
            "max_create_revision": token.to_string(),
        });
        let range: RangeResponse = self.call("/v3/kv/range", &request).await?;
        Ok(range.kvs.first().map(|kv| kv.lease))
    }

    /// The try-acquire Txn: put the owner key only if no key exists under the prefix.
    async fn try_put(
        &mut self,
        prefix: &[u8],
        owner: &[u8],
        lease: i64,
    ) -> Result<Option<u64>, EtcdError> {
        let end = wire::prefix_end(prefix);
        let txn = json!({
            "compare": [wire::compare_create(prefix, Some(&end), "EQUAL", 0)],
            "success": [wire::put_with_lease(owner, lease)],
        });
        let response: TxnResponse = self.call("/v3/kv/txn", &txn).await?;
        if !response.succeeded {
            return Ok(None);
        }
        // The Txn wrote one key, so its revision is that key's create revision.
        self.token(response.header.revision).map(Some)
    }

    /// Queues the owner key and waits for it to become the oldest under the prefix.
    async fn queue_and_wait(
        &mut self,
        prefix: &[u8],
        owner: &[u8],
        lease: &LeaseResponse,
        deadline: Instant,
    ) -> Result<Option<u64>, EtcdError> {
        let txn = json!({
            "success": [
                wire::put_with_lease(owner, lease.id),
                { "request_range": wire::range_first_by_create(prefix, true, None) },
            ],
        });
        let response: TxnResponse = self.call("/v3/kv/txn", &txn).await?;
        let mine = response.header.revision;
        // From here on our key is queued: it may become the owner at any moment, so no later
        // failure can be called definite.
        self.wait_in_queue(prefix, owner, lease, deadline, mine, &response)
            .await
            .map_err(|error| self.unknown(error))
    }

    async fn wait_in_queue(
        &mut self,
        prefix: &[u8],
        owner: &[u8],
        lease: &LeaseResponse,
        deadline: Instant,
        mine: i64,
        response: &TxnResponse,
    ) -> Result<Option<u64>, EtcdError> {
        let first = response
            .responses
            .get(1)
            .and_then(|op| op.response_range.as_ref())
            .and_then(|range| range.kvs.first())
            .map(|kv| kv.create_revision);
        if first == Some(mine) {
            return self.token(mine).map(Some);
        }
        for _ in 0..WAIT_ROUNDS_MAX {
            if Instant::now() >= deadline {
                return self.decide_at_deadline(prefix, owner, mine, lease).await;
            }
            let request = wire::range_first_by_create(prefix, false, Some(mine - 1));
            let older: RangeResponse = self.call("/v3/kv/range", &request).await?;
            let Some(predecessor) = older.kvs.first() else {
                return self.granted_after_wait(mine, lease).await;
            };
            let key = wire::decode(&predecessor.key).ok_or_else(|| self.bad_answer("key"))?;
            self.wait_deleted(&key, predecessor.create_revision, lease, deadline)
                .await?;
        }
        Err(EtcdError::Indeterminate {
            node: self.node,
            reason: format!("acquire took more than {WAIT_ROUNDS_MAX} wait rounds"),
        })
    }

    /// At the wait deadline: owner if every key under the prefix is at least as new as ours,
    /// otherwise delete ours, in one Txn so that the answer cannot be overtaken.
    async fn decide_at_deadline(
        &mut self,
        prefix: &[u8],
        owner: &[u8],
        mine: i64,
        lease: &LeaseResponse,
    ) -> Result<Option<u64>, EtcdError> {
        let end = wire::prefix_end(prefix);
        let txn = json!({
            "compare": [wire::compare_create(prefix, Some(&end), "GREATER", mine - 1)],
            "failure": [{ "request_delete_range": { "key": wire::encode(owner) } }],
        });
        let response: TxnResponse = self.call("/v3/kv/txn", &txn).await?;
        if response.succeeded {
            self.granted_after_wait(mine, lease).await
        } else {
            Ok(None)
        }
    }

    /// Renews the lease once, so that it runs from now, and returns the token. A lease that
    /// is gone means our key expired while we waited: whether we ever owned it is unknown.
    async fn granted_after_wait(
        &mut self,
        mine: i64,
        lease: &LeaseResponse,
    ) -> Result<Option<u64>, EtcdError> {
        if self.keep_alive(lease.id).await? <= 0 {
            return Err(EtcdError::Indeterminate {
                node: self.node,
                reason: "the lease expired while waiting".into(),
            });
        }
        self.token(mine).map(Some)
    }

    /// Waits until the key `predecessor` (created at `revision`) is deleted or changed, or
    /// the deadline passes, keeping our lease alive meanwhile.
    async fn wait_deleted(
        &mut self,
        predecessor: &[u8],
        revision: i64,
        lease: &LeaseResponse,
        deadline: Instant,
    ) -> Result<(), EtcdError> {
        let request = json!({ "create_request": { "key": wire::encode(predecessor) } });
        let mut stream = self.open_stream("/v3/watch", &request).await?;
        // The first message confirms the watch; events after it are from "now" on.
        let created: WatchResponse = self.next_streamed(&mut stream).await?;
        if !created.created || created.canceled {
            return Ok(());
        }
        // It may have gone between our range and the watch's start: look again.
        let check: RangeResponse = self
            .call("/v3/kv/range", &wire::range_key(predecessor))
            .await?;
        if check.kvs.first().map(|kv| kv.create_revision) != Some(revision) {
            return Ok(());
        }
        let renew_every = Duration::from_millis((lease.ttl.max(1) as u64) * 1000 / 3);
        let mut renew_at = Instant::now() + renew_every;
        for _ in 0..WATCH_MESSAGES_MAX {
            let now = Instant::now();
            if now >= deadline {
                return Ok(());
            }
            if now >= renew_at {
                if self.keep_alive(lease.id).await? <= 0 {
                    return Err(EtcdError::Indeterminate {
                        node: self.node,
                        reason: "the lease expired while waiting".into(),
                    });
                }
                renew_at = Instant::now() + renew_every;
                continue;
            }
            let until = deadline.min(renew_at) - now;
            let Ok(message) = tokio::time::timeout(until, stream.next_message()).await else {
                continue;
            };
            // A broken watch is not an answer: the caller's next round reads again.
            let Ok(message) = message else {
                return Ok(());
            };
            let watch: Streamed<WatchResponse> = serde_json::from_slice(&message)
                .map_err(|error| self.bad_answer(&format!("watch message: {error}")))?;
            let Some(watch) = watch.result else {
                return Ok(());
            };
            if watch.canceled
                || watch
                    .events
                    .iter()
                    .any(|event| event.event_type == "DELETE")
            {
                return Ok(());
            }
        }
        Ok(())
    }

    async fn grant_lease(&mut self, ttl_s: i64) -> Result<LeaseResponse, EtcdError> {
        let lease: LeaseResponse = self
            .call("/v3/lease/grant", &json!({ "TTL": ttl_s.to_string() }))
            .await?;
        if lease.id == 0 || lease.ttl <= 0 {
            return Err(self.bad_answer("lease grant without ID or TTL"));
        }
        Ok(lease)
    }

    async fn revoke(&mut self, lease: i64) -> Result<(), EtcdError> {
        let _: Value = self
            .call("/v3/lease/revoke", &json!({ "ID": lease.to_string() }))
            .await?;
        Ok(())
    }

    /// Revokes a lease on its own connection without waiting (after an unknown acquire).
    fn revoke_in_background(&self, lease: i64) {
        let endpoint = self.endpoint;
        let timeout = self.options.call_timeout;
        let body = json!({ "ID": lease.to_string() }).to_string();
        tokio::spawn(async move {
            super::http::post_once(endpoint, "/v3/lease/revoke", body.as_bytes(), timeout).await
        });
    }

    /// One keep-alive of `lease`; returns its TTL, 0 when the lease no longer exists.
    async fn keep_alive(&mut self, lease: i64) -> Result<i64, EtcdError> {
        let request = json!({ "ID": lease.to_string() });
        let mut stream = self.open_stream("/v3/lease/keepalive", &request).await?;
        let answer: LeaseResponse = self.next_streamed(&mut stream).await?;
        Ok(answer.ttl)
    }

    /// One unary call with the call deadline; the 200 body parsed, or the classified error.
    async fn call<T: DeserializeOwned>(
        &mut self,
        path: &str,
        request: &Value,
    ) -> Result<T, EtcdError> {
        let body = request.to_string();
        let timeout = self.call_timeout();
        let mut connection = match self.connection.take() {
            Some(connection) if connection.is_reusable() => connection,
            _ => self.connect().await?,
        };
        let response =
            match tokio::time::timeout(timeout, connection.post(path, body.as_bytes())).await {
                Err(_) => return Err(self.timeout(timeout)),
                Ok(Err(error)) => return Err(self.indeterminate(&error)),
                Ok(Ok(response)) => response,
            };
        self.connection = Some(connection);
        self.parse(response.status, &response.body)
    }

    /// Opens a streaming call on its own connection and sends its one request.
    async fn open_stream(
        &mut self,
        path: &str,
        request: &Value,
    ) -> Result<MessageStream, EtcdError> {
        let body = request.to_string();
        let connection = self.connect().await?;
        let timeout = self.call_timeout();
        match tokio::time::timeout(timeout, connection.post_stream(path, body.as_bytes())).await {
            Err(_) => Err(self.timeout(timeout)),
            Ok(Err(error)) => Err(self.indeterminate(&error)),
            Ok(Ok(stream)) => Ok(stream),
        }
    }

    /// The next message of a stream, within the call deadline, unwrapped from `result`.
    async fn next_streamed<T: DeserializeOwned + Default>(
        &self,
        stream: &mut MessageStream,
    ) -> Result<T, EtcdError> {
        let timeout = self.call_timeout();
        let message = match tokio::time::timeout(timeout, stream.next_message()).await {
            Err(_) => return Err(self.timeout(timeout)),
            Ok(Err(error)) => return Err(self.indeterminate(&error)),
            Ok(Ok(message)) => message,
        };
        let streamed: Streamed<T> = serde_json::from_slice(&message)
            .map_err(|error| self.bad_answer(&format!("stream message: {error}")))?;
        match (streamed.result, streamed.error) {
            (_, Some(error)) => Err(EtcdError::from_server(
                self.node,
                200,
                error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("stream error")
                    .to_string(),
            )),
            (Some(result), None) => Ok(result),
            (None, None) => Err(self.bad_answer("stream message without result")),
        }
    }

    async fn connect(&self) -> Result<Connection, EtcdError> {
        let timeout = self.call_timeout();
        match tokio::time::timeout(timeout, Connection::connect(self.endpoint)).await {
            Ok(Ok(connection)) => Ok(connection),
            // Nothing was sent on a connection that never opened.
            Ok(Err(error)) => Err(EtcdError::Refused {
                node: self.node,
                reason: error.to_string(),
            }),
            Err(_) => Err(EtcdError::Refused {
                node: self.node,
                reason: format!(
                    "connect to {} took more than {} ms",
                    self.endpoint,
                    timeout.as_millis()
                ),
            }),
        }
    }

    fn parse<T: DeserializeOwned>(&self, status: u16, body: &[u8]) -> Result<T, EtcdError> {
        if status == 200 {
            return serde_json::from_slice(body)
                .map_err(|error| self.bad_answer(&format!("body: {error}")));
        }
        let error: wire::ErrorBody = serde_json::from_slice(body).unwrap_or_default();
        let message = if error.error.is_empty() {
            error.message
        } else {
            error.error
        };
        let message = if message.is_empty() {
            String::from_utf8_lossy(body).into_owned()
        } else {
            message
        };
        Err(EtcdError::from_server(self.node, status, message))
    }

    fn token(&self, revision: i64) -> Result<u64, EtcdError> {
        u64::try_from(revision)
            .ok()
            .filter(|&token| token > 0)
            .ok_or_else(|| self.bad_answer(&format!("revision {revision}")))
    }

    /// Turns an error of a call whose failure cannot have touched the lock into a definite one.
    fn definite(&self, error: EtcdError) -> EtcdError {
        if error.is_definite() {
            error
        } else {
            EtcdError::Refused {
                node: self.node,
                reason: format!("lease grant failed, lock untouched: {error}"),
            }
        }
    }

    /// Turns a definite error into an unknown one, for calls made while our key is queued.
    fn unknown(&self, error: EtcdError) -> EtcdError {
        if error.is_definite() {
            EtcdError::Indeterminate {
                node: self.node,
                reason: format!("while queued for the key: {error}"),
            }
        } else {
            error
        }
    }

    /// The timeout of the next call: the client's call timeout, cut to the op's deadline.
    fn call_timeout(&self) -> Duration {
        match self.op_deadline {
            Some(deadline) => self
                .options
                .call_timeout
                .min(deadline.saturating_duration_since(Instant::now())),
            None => self.options.call_timeout,
        }
    }

    fn timeout(&self, after: Duration) -> EtcdError {
        EtcdError::Timeout {
            node: self.node,
            after_ms: after.as_millis() as u64,
        }
    }

    fn indeterminate(&self, error: &HttpError) -> EtcdError {
        EtcdError::Indeterminate {
            node: self.node,
            reason: error.to_string(),
        }
    }

    fn bad_answer(&self, what: &str) -> EtcdError {
        EtcdError::Indeterminate {
            node: self.node,
            reason: format!("unexpected answer: {what}"),
        }
    }
}

/// `lease_ms` as a lease TTL in whole seconds, rounded up, at least 1.
pub fn lease_ttl_s(lease_ms: u64) -> i64 {
    i64::try_from(lease_ms.div_ceil(1000).max(1)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ttl_rounds_up_so_no_lease_is_shorter_than_asked() {
        // DESIGN: a held key may expire on its own, but not before lease_ms has passed.
        assert_eq!(lease_ttl_s(0), 1);
        assert_eq!(lease_ttl_s(1), 1);
        assert_eq!(lease_ttl_s(1000), 1);
        assert_eq!(lease_ttl_s(1001), 2);
        assert_eq!(lease_ttl_s(5000), 5);
    }
}
