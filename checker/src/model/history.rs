//! The client-visible history: what the client actors asked and what they were told, kept as
//! stateright's auxiliary history variable.
//!
//! Two things live here:
//!
//! - a [`LinearizabilityTester`] over [`LockSpec`], the sequential specification of the lock
//!   service, fed by the model's `record_msg_out` (a client's first send of a request is its
//!   invoke) and `record_msg_in` (the delivery of a definite answer is its return);
//! - ghost facts for the properties that the tester cannot express: the grants the clients
//!   were told about, which client still believes it holds which lock, and whether a grant's
//!   token was ever not above a token returned before the grant was invoked.
//!
//! # Which answers are returns
//!
//! `Granted`, `Busy`, `Released` and `NotHolder` are returns. `NotLeader` is not: nothing was
//! proposed, and the client retries the same request (same sequence number, so the history
//! sees one operation). `Unknown` is not either: the operation may or may not take effect, so
//! it stays in flight forever and the client stops (DESIGN.md: a client whose op ended `info`
//! never invokes again under that id). A client that gives up mid-acquire leaves its acquire
//! in flight the same way. `Invalid` is a return that the specification never accepts: the
//! model's clients send only valid requests, so it can only mean a broken core.

use std::collections::BTreeMap;

use lockd::lock::{Key, Token};
use lockd::raft::{ClientRequest, RequestId, Response};
use stateright::actor::{Envelope, Id};
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};

use super::ModelConfig;
use super::actor::{ModelMsg, request_id_parts};

/// A client operation, as the specification sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockOp {
    /// Acquire `key` (a try-acquire, or one that waits at the leader).
    Acquire {
        /// The key.
        key: Key,
    },
    /// Release `key` held under `token`.
    Release {
        /// The key.
        key: Key,
        /// The token the client holds.
        token: Token,
    },
}

/// A definite answer to a [`LockOp`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockRet {
    /// The key is held under `token`.
    Granted {
        /// The fencing token.
        token: Token,
    },
    /// The key was held.
    Busy,
    /// The release freed the key.
    Released,
    /// The key was not held under that token.
    NotHolder,
    /// The core refused a request the model considers valid (never a valid step).
    Invalid {
        /// The core's reason.
        reason: String,
    },
}

/// The sequential specification of the lock service (research/design.md §1.3).
///
/// Leases run out on untimed stateright timers, so an expiry may happen at any moment: a grant
/// is valid on a held key too (an implicit Expire came first), and a `NotHolder` is valid for
/// the holder's own token (its lease ran out first). What remains checkable: tokens increase
/// in the order of the linearization (and hence in real time), `Released` only for the
/// current holder, and `Busy` only while some lock is held.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LockSpec {
    /// The holder of each key, by token.
    holders: BTreeMap<Key, Token>,
    /// The highest token granted so far, over all keys (tokens are global).
    last_token: Token,
}

impl SequentialSpec for LockSpec {
    type Op = LockOp;
    type Ret = LockRet;

    /// The canonical outcome, which the tester uses for an operation still in flight at the
    /// end of a history (one that may or may not have taken effect).
    fn invoke(&mut self, op: &LockOp) -> LockRet {
        match op {
            LockOp::Acquire { key } => {
                if self.holders.contains_key(key) {
                    LockRet::Busy
                } else {
                    self.last_token += 1;
                    self.holders.insert(key.clone(), self.last_token);
                    LockRet::Granted {
                        token: self.last_token,
                    }
                }
            }
            LockOp::Release { key, token } => {
                if self.holders.get(key) == Some(token) {
                    self.holders.remove(key);
                    LockRet::Released
                } else {
                    LockRet::NotHolder
                }
            }
        }
    }

    fn is_valid_step(&mut self, op: &LockOp, ret: &LockRet) -> bool {
        match (op, ret) {
            // Any token above every earlier one; an implicit expiry may precede it.
            (LockOp::Acquire { key }, LockRet::Granted { token }) if *token > self.last_token => {
                self.last_token = *token;
                self.holders.insert(key.clone(), *token);
                true
            }
            (LockOp::Acquire { key }, LockRet::Busy) => self.holders.contains_key(key),
            (LockOp::Release { key, token }, LockRet::Released)
                if self.holders.get(key) == Some(token) =>
            {
                self.holders.remove(key);
                true
            }
            (LockOp::Release { key, token }, LockRet::NotHolder) => {
                // Either another token holds the key, or the lease of `token` ran out first.
                if self.holders.get(key) == Some(token) {
                    self.holders.remove(key);
                }
                true
            }
            _ => false,
        }
    }
}

/// The client-visible history and the ghost facts the properties read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct History {
    /// Every invoke and definite return, for linearizability.
    pub linear: LinearizabilityTester<Id, LockSpec>,
    /// The sequence number of each client's operation in flight (invoked, no definite answer).
    open: BTreeMap<Id, u64>,
    /// For an acquire in flight: the highest token any client had been told before it was
    /// invoked (DESIGN.md: if A returned before B was invoked, token(A) < token(B)).
    token_floor: BTreeMap<Id, Token>,
    /// The highest token any client has been told so far.
    max_returned_token: Token,
    /// Every grant a client was told about: in the order the answers arrived, or sorted with
    /// [`ModelConfig::canonical_order`].
    pub grants: Vec<(Id, Key, Token)>,
    /// The lock each client believes it holds: granted, and not yet released by it.
    pub beliefs: BTreeMap<Id, (Key, Token)>,
    /// The first client-visible token that was not above one returned before its invoke.
    pub token_order_violation: Option<String>,
}

impl Default for History {
    fn default() -> Self {
        History {
            linear: LinearizabilityTester::new(LockSpec::default()),
            open: BTreeMap::new(),
            token_floor: BTreeMap::new(),
            max_returned_token: 0,
            grants: Vec::new(),
            beliefs: BTreeMap::new(),
            token_order_violation: None,
        }
    }
}

/// The specification's view of a client request (`None` for a session registration, which
/// is no lock operation).
fn lock_op(request: &ClientRequest) -> Option<LockOp> {
    match request {
        ClientRequest::Acquire { key, .. } => Some(LockOp::Acquire { key: key.clone() }),
        ClientRequest::Release { key, token, .. } => Some(LockOp::Release {
            key: key.clone(),
            token: *token,
        }),
        // A client's cleanup of an acquire it reported unknown: the spec's end of a hidden
        // grant, which the lock spec allows at any time (`LockOptions::phantom_release`).
        ClientRequest::Abandon { .. } | ClientRequest::RegisterSession { .. } => None,
    }
}

/// `record_msg_out`: a client's first send of a request is the invoke of its operation.
pub fn record_invoke(
    _cfg: &ModelConfig,
    history: &History,
    envelope: Envelope<&ModelMsg>,
) -> Option<History> {
    let ModelMsg::Request { id, request } = envelope.msg else {
        return None;
    };
    let (_, seq) = request_id_parts(*id);
    if history.open.get(&envelope.src) == Some(&seq) {
        return None; // A retry of the operation in flight (after NotLeader).
    }
    let op = lock_op(request)?;
    let mut next = history.clone();
    // A second invoke while one is open makes the tester's history invalid, which the
    // linearizability property then reports: the client actor never does that.
    let _ = next.linear.on_invoke(envelope.src, op);
    next.open.insert(envelope.src, seq);
    match &**request {
        ClientRequest::Acquire { .. } => {
            next.token_floor
                .insert(envelope.src, next.max_returned_token);
        }
        ClientRequest::Release { .. } => {
            next.beliefs.remove(&envelope.src);
        }
        ClientRequest::Abandon { .. } | ClientRequest::RegisterSession { .. } => {}
    }
    Some(next)
}

/// `record_msg_in`: the delivery of a definite answer to a client is the return of its
/// operation. Only deliveries that the client acted on reach here (stateright records no
/// history for a no-op delivery), and the client acts only on the answer to its open request.
pub fn record_return(
    cfg: &ModelConfig,
    history: &History,
    envelope: Envelope<&ModelMsg>,
) -> Option<History> {
    let ModelMsg::Response { id, response } = envelope.msg else {
        return None;
    };
    let (_, seq) = request_id_parts(*id);
    if history.open.get(&envelope.dst) != Some(&seq) {
        return None;
    }
    let ret = match &**response {
        Response::Granted { token } => LockRet::Granted { token: *token },
        Response::Busy => LockRet::Busy,
        Response::Released => LockRet::Released,
        Response::NotHolder => LockRet::NotHolder,
        Response::Invalid { reason } => LockRet::Invalid {
            reason: reason.clone(),
        },
        Response::NotLeader { .. }
        | Response::Unknown { .. }
        | Response::Registered { .. }
        | Response::SessionExpired => return None,
    };
    let mut next = history.clone();
    let client = envelope.dst;
    next.open.remove(&client);
    if let LockRet::Granted { token } = &ret {
        let key = next.linear_key(client);
        let floor = next.token_floor.remove(&client).unwrap_or(0);
        if *token <= floor && next.token_order_violation.is_none() {
            next.token_order_violation = Some(format!(
                "client {} was granted token {token}, but token {floor} had been returned \
                 before its acquire was invoked",
                usize::from(client)
            ));
        }
        next.max_returned_token = next.max_returned_token.max(*token);
        let grant = (client, key.clone(), *token);
        if cfg.canonical_order {
            // A sorted set: states that differ only in the order answers arrived count once.
            if let Err(at) = next.grants.binary_search(&grant) {
                next.grants.insert(at, grant);
            }
        } else {
            next.grants.push(grant);
        }
        next.beliefs.insert(client, (key, *token));
    }
    let _ = next.linear.on_return(client, ret);
    Some(next)
}

impl History {
    /// The key of `client`'s operation (the model's clients all use the configured key).
    fn linear_key(&self, _client: Id) -> Key {
        super::MODEL_KEY.to_owned()
    }

    /// Whether a client was told `Granted` on a key that another client had been told before.
    pub fn regranted_to_another_client(&self) -> bool {
        self.grants.iter().enumerate().any(|(i, (c1, k1, _))| {
            self.grants[i + 1..]
                .iter()
                .any(|(c2, k2, _)| k1 == k2 && c1 != c2)
        })
    }
}

/// The request id's client actor, for answers the core sends back.
pub fn client_of(id: RequestId) -> Id {
    request_id_parts(id).0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tester() -> LinearizabilityTester<u8, LockSpec> {
        LinearizabilityTester::new(LockSpec::default())
    }

    fn acquire() -> LockOp {
        LockOp::Acquire { key: "a".into() }
    }

    fn release(token: Token) -> LockOp {
        LockOp::Release {
            key: "a".into(),
            token,
        }
    }

    #[test]
    fn a_stale_release_that_frees_a_newer_holder_is_not_linearizable() {
        // DESIGN.md, lock semantics: `release key token -> ok` only when held under that token.
        let mut t = tester();
        t.on_invret(1, acquire(), LockRet::Granted { token: 1 })
            .unwrap();
        t.on_invret(2, acquire(), LockRet::Granted { token: 3 })
            .unwrap();
        t.on_invret(1, release(1), LockRet::Released).unwrap();
        assert!(!t.is_consistent());
    }

    #[test]
    fn tokens_that_go_backwards_in_real_time_are_not_linearizable() {
        // DESIGN.md: if acquire A returned before B was invoked, token(A) < token(B).
        let mut t = tester();
        t.on_invret(1, acquire(), LockRet::Granted { token: 5 })
            .unwrap();
        t.on_invret(2, acquire(), LockRet::Granted { token: 4 })
            .unwrap();
        assert!(!t.is_consistent());
    }

    #[test]
    fn a_grant_after_an_implicit_expiry_is_linearizable() {
        // research/design.md §1.3: in the model a lease may run out at any moment.
        let mut t = tester();
        t.on_invret(1, acquire(), LockRet::Granted { token: 1 })
            .unwrap();
        t.on_invret(2, acquire(), LockRet::Granted { token: 4 })
            .unwrap();
        t.on_invret(1, release(1), LockRet::NotHolder).unwrap();
        assert!(t.is_consistent());
    }

    #[test]
    fn busy_on_a_key_never_granted_is_not_linearizable() {
        // DESIGN.md: `fail busy` means the key was held at some instant inside the op.
        let mut t = tester();
        t.on_invret(1, acquire(), LockRet::Busy).unwrap();
        assert!(!t.is_consistent());
    }

    #[test]
    fn an_acquire_in_flight_may_explain_a_busy() {
        // DESIGN.md: an `info` op may take effect at any time after its invoke, or never.
        let mut t = tester();
        t.on_invoke(1, acquire()).unwrap();
        t.on_invret(2, acquire(), LockRet::Busy).unwrap();
        assert!(t.is_consistent());
    }
}
