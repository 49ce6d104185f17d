//! Lease timers, locally expired locks and the leader's waiter queues.
//!
//! # Leases
//!
//! Every node, leader or follower, arms `Timer::Lease{key, token}` at its own `now +
//! lease_ms` when it applies the `Granted{token}` of a Grant. Only a committed `Expire{key,
//! token}` removes a lock; a timer only decides when the leader proposes one.
//!
//! Why this is conservative (DESIGN.md, "Leases": a new leader never expires earlier than the
//! old leader could have):
//!
//! - The client invoked its acquire before the Grant was proposed, and every node applies
//!   the Grant after it was committed, so every node's lease starts after the client's
//!   invoke: the lease a client can count on, from its invoke, ends no later than any node's
//!   timer (clock rates equal, drift aside).
//! - A follower applies an entry only after the leader committed it, that is after the
//!   leader could have applied it, so a follower's timer never runs out before the leader's.
//!   A new leader takes over with its own timers: they end no earlier than the old leader's.
//! - A node that restarts, or installs a snapshot, re-arms every held lock with its full
//!   lease from that moment: later still.
//! - A timer that fires at a follower, or at a leader whose Noop of its term is not yet
//!   committed (it may not know the latest table), marks the lock locally expired. When the
//!   node is leader and its Noop commits, it proposes `Expire` for every locally expired lock
//!   still held. An Expire names its token, so a late or duplicate one removes nothing newer.
//!
//! The `early-expire` mutant arms the leader's timer at half the lease.
//!
//! # Waiters
//!
//! An acquire with `wait_ms > 0` for a taken key (held in the applied table, or a Grant ahead
//! in the log, or waiters ahead) waits in a FIFO queue at the leader, bounded by
//! `waiters_per_key_max`. A retry whose own Grant is the one holding the key (or ahead in
//! the log) is proposed at once instead, to be answered its own token by the dedupe table;
//! a retry whose earlier attempt is still queued takes that attempt's place (the earlier one
//! is answered `Unknown`), so one acquire is never queued twice.
//!
//! A head waiter is proposed only when no Grant of its key is ahead in the log, so its Grant
//! is never refused. Only a retry proposed at once can be (its earlier attempt was a last try
//! that the table refused too): if its deadline is still ahead it then waits, at the tail of
//! the queue, behind every waiter already there. (Until 2026-12-07 it went back to the head,
//! ahead of waiters that came before it: found by the FIFO step rule,
//! `invariants::step_rules`, on seeds 4, 30 and others; `testdata/waiter_retry_keeps_fifo.txt`.)
//!
//! After every applied entry for a key that leaves it free (an applied Release or Expire,
//! but also the last Grant ahead in the log applied without taking the key: a retry answered
//! from the dedupe table), the leader proposes the Grant of the head waiter (`apply_entry`
//! in `replication.rs`). Every key with waiters is taken (checked by `check_invariants`): an
//! apply that leaves a key free always pops the head.
//!
//! At its wait deadline a waiter still queued gets a last try: its Grant is proposed as a
//! try-acquire, and it is answered from the committed outcome (`GrantRejected` -> `Busy`).
//! Answering `Busy` at once from the leader's table would not be linearizable: a leader that
//! was deposed without knowing it yet (check-quorum takes up to two windows) may show a lock
//! that a newer leader already released before the client asked. Through the log, a deposed
//! leader cannot commit, so the waiter gets `Unknown` or `NotLeader` instead.

use super::{Entry, Node, Pending, PendingKind, RequestId, Role, Timer, Waiter};
use crate::bugs::Bug;
use crate::lock::{Command, Key, Proposal, Token};

impl Node {
    /// The lease timer of a lock granted at this node's now.
    fn lease_deadline(&self, lease_ms: u64) -> u64 {
        let lease_ms = if self.role == Role::Leader && self.bug(Bug::EarlyExpire) {
            // Mutant: the leader's timer runs at half the lease.
            lease_ms / 2
        } else {
            lease_ms
        };
        // A committed Grant is applied as the leader wrote it, and the lease bound is checked
        // only where a client asks: an absurd lease from a buggy or foreign leader gives the
        // latest timer rather than an overflow (`hostile_test`, seed 490).
        self.now_ms.saturating_add(lease_ms)
    }

    /// Lease bookkeeping after `entry` was applied; `before` is the key's holder before.
    pub(super) fn after_apply_leases(&mut self, entry: &Entry, before: Option<(Key, Token)>) {
        let Some(key) = entry.proposal.command.key() else {
            return;
        };
        let now_held = self.table.holder(key).map(|h| (h.token, h.lease_ms));
        if before.as_ref().map(|(_, token)| *token) == now_held.map(|(token, _)| token) {
            return; // unchanged (a refused Grant, a retry answered from the dedupe table, ...)
        }
        if let Some((key, token)) = before {
            // The lock was removed: its lease is over everywhere.
            self.cancel_timer(Timer::Lease {
                key: key.clone(),
                token,
            });
            self.expired.remove(&(key.clone(), token));
        }
        if let Some((token, lease_ms)) = now_held {
            let at_ms = self.lease_deadline(lease_ms);
            let key = key.to_owned();
            self.set_timer(Timer::Lease { key, token }, at_ms);
        }
    }

    /// Re-arms a full lease for every held lock and forgets timers and expiries of locks no
    /// longer held (restart, snapshot install).
    pub(super) fn rearm_all_leases(&mut self) {
        let stale: Vec<Timer> = self
            .timers
            .keys()
            .filter(|t| match t {
                Timer::Lease { key, token } => {
                    self.table.holder(key).map(|h| h.token) != Some(*token)
                }
                _ => false,
            })
            .cloned()
            .collect();
        for timer in stale {
            self.cancel_timer(timer);
        }
        let table = &self.table;
        self.expired
            .retain(|(key, token)| table.holder(key).map(|h| h.token) == Some(*token));
        let held: Vec<(Key, Token, u64)> = self
            .table
            .locks()
            .iter()
            .map(|(k, h)| (k.clone(), h.token, h.lease_ms))
            .collect();
        for (key, token, lease_ms) in held {
            let at_ms = self.now_ms.saturating_add(lease_ms);
            self.set_timer(Timer::Lease { key, token }, at_ms);
        }
    }

    /// Whether this node leads and its Noop of the term is committed: only then does it know
    /// every committed entry (Raft paper §8) and may it propose an Expire.
    fn leads_with_committed_noop(&self) -> bool {
        self.role == Role::Leader && self.noop_index > 0 && self.commit_index >= self.noop_index
    }

    pub(super) fn handle_lease_timeout(&mut self, key: Key, token: Token) {
        if self.table.holder(&key).map(|h| h.token) != Some(token) {
            return;
        }
        self.expired.insert((key.clone(), token));
        if self.leads_with_committed_noop() {
            self.append_proposal(Proposal::system(Command::Expire { key, token }));
        }
    }

    /// Proposes an Expire for every locally expired lock still held (a new leader whose Noop
    /// just committed).
    pub(super) fn expire_locally_expired(&mut self) {
        let due: Vec<(Key, Token)> = self
            .expired
            .iter()
            .filter(|(key, token)| self.table.holder(key).map(|h| h.token) == Some(*token))
            .cloned()
            .collect();
        let due = if self.bug(Bug::NewLeaderExpires) {
            // Mutant: every inherited lock, whatever its lease has left on this clock.
            (self.table.locks().iter())
                .map(|(key, held)| (key.clone(), held.token))
                .collect()
        } else {
            due
        };
        for (key, token) in due {
            self.append_proposal(Proposal::system(Command::Expire { key, token }));
        }
    }

    /// Whether a Grant for `key` is in the log but not yet applied.
    pub(super) fn grant_pending_for(&self, key: &str) -> bool {
        let from = self.table.last_applied() + 1;
        if from > self.log.last_index() {
            return false;
        }
        self.log
            .entries_from(from, usize::MAX)
            .iter()
            .any(|e| matches!(&e.proposal.command, Command::Grant { key: k, .. } if k == key))
    }

    /// Whether `key` is held in the applied table or by a Grant ahead in the log.
    pub(super) fn key_taken(&self, key: &str) -> bool {
        self.table.holder(key).is_some() || self.grant_pending_for(key)
    }

    /// Whether `waiter` retries an acquire whose Grant (same origin, same command) holds its
    /// key in the applied table or is ahead in the log.
    pub(super) fn retries_grant_in_log(&self, waiter: &Waiter) -> bool {
        let Some(origin) = waiter.origin else {
            return false;
        };
        let command = Command::Grant {
            key: waiter.key.clone(),
            lease_ms: waiter.lease_ms,
        };
        let held = self
            .table
            .holder(&waiter.key)
            .is_some_and(|h| h.origin == Some(origin) && h.lease_ms == waiter.lease_ms);
        let from = self.table.last_applied() + 1;
        held || (from <= self.log.last_index()
            && self
                .log
                .entries_from(from, usize::MAX)
                .iter()
                .any(|e| e.proposal.origin == Some(origin) && e.proposal.command == command))
    }

    /// Proposes the Grant of the head waiter of `key` when the key is free at the leader.
    pub(super) fn grant_head_waiter(&mut self, key: &str) {
        if self.role != Role::Leader || self.key_taken(key) {
            return;
        }
        let lifo = self.bug(Bug::WaitersServedLifo);
        let Some(waiter) = (self.waiters.get_mut(key))
            .and_then(|q| if lifo { q.pop_back() } else { q.pop_front() })
        else {
            return;
        };
        crate::probe!("waiter-granted");
        if self.waiters.get(key).is_some_and(|q| !q.is_empty()) {
            crate::probe!("waiter-granted-with-others-waiting");
        }
        if self.waiters.get(key).is_some_and(|q| q.is_empty()) {
            self.waiters.remove(key);
        }
        self.propose_grant(
            waiter.id,
            waiter.key.clone(),
            waiter.lease_ms,
            waiter.origin,
            Some(waiter),
        );
    }

    /// Proposes a client's Grant and remembers it as pending.
    pub(super) fn propose_grant(
        &mut self,
        id: RequestId,
        key: Key,
        lease_ms: u64,
        origin: Option<crate::lock::Origin>,
        waiter: Option<Waiter>,
    ) {
        let command = Command::Grant { key, lease_ms };
        let index = self.append_proposal(Proposal::client(origin, command));
        if self.bug(Bug::GrantedBeforeCommit) {
            // Mutant: answered on append, with the token the entry will get if it commits.
            return self.respond(id, super::Response::Granted { token: index });
        }
        let pending = Pending {
            id,
            term: self.term,
            kind: PendingKind::Grant { waiter },
            gone: false,
        };
        self.pending.insert(index, pending);
    }

    /// Queues `waiter` at the tail of its key's FIFO.
    pub(super) fn enqueue_waiter(&mut self, waiter: Waiter) {
        let queue = self.waiters.entry(waiter.key.clone()).or_default();
        queue.push_back(waiter);
    }

    pub(super) fn handle_wait_timeout(&mut self, id: RequestId) {
        let found = self.waiters.iter().find_map(|(key, queue)| {
            queue
                .iter()
                .position(|w| w.id == id)
                .map(|at| (key.clone(), at))
        });
        let Some((key, at)) = found else {
            return; // proposed already: the answer comes with the apply
        };
        let Some(waiter) = self
            .waiters
            .get_mut(&key)
            .and_then(|queue| queue.remove(at))
        else {
            return;
        };
        if self.waiters.get(&key).is_some_and(|q| q.is_empty()) {
            self.waiters.remove(&key);
        }
        // The last try: a try-acquire through the log (see the module doc).
        self.propose_grant(waiter.id, waiter.key, waiter.lease_ms, waiter.origin, None);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{append, entry};
    use super::super::{Config, Durable, HardState, Input, Node, Snapshot, Timer};
    use crate::lock::{Command, LockTable};

    fn held_table() -> LockTable {
        let mut table = LockTable::new();
        table.apply(1, &Command::Noop);
        table.apply(
            2,
            &Command::Grant {
                key: "a".into(),
                lease_ms: 700,
            },
        );
        table
    }

    #[test]
    fn a_restart_rearms_every_lease_in_full() {
        // DESIGN.md "Leases": a new timer never expires earlier than the old one could have.
        let durable = Durable {
            hard_state: HardState {
                term: 1,
                voted_for: None,
                commit: 2,
            },
            snapshot: Some(Snapshot {
                last_index: 2,
                last_term: 1,
                table: held_table(),
            }),
            entries: Vec::new(),
        };
        let (n, _) = Node::new(Config::new(2, vec![1, 2, 3]), durable, 5_000);
        let lease = Timer::Lease {
            key: "a".into(),
            token: 2,
        };
        assert_eq!(n.deadline(&lease), Some(5_700));
    }

    #[test]
    fn a_lease_timer_at_a_follower_only_marks_the_lock_expired() {
        // DESIGN.md "Leases": removal happens only through a committed Expire.
        let mut n = super::super::test_support::node(2);
        let grant = Command::Grant {
            key: "a".into(),
            lease_ms: 700,
        };
        n.step(append(1, 1, (0, 0), vec![entry(1, 1, grant)], 1));
        let lease = Timer::Lease {
            key: "a".into(),
            token: 1,
        };
        assert_eq!(n.deadline(&lease), Some(700));
        let out = n.step(Input::Tick { now_ms: 700 });
        assert!(n.table().holder("a").is_some(), "a follower removed a lock");
        assert!(out.apply.is_empty());
        assert!(n.expired.contains(&("a".to_owned(), 1)));
    }

    #[test]
    fn a_committed_grant_with_an_absurd_lease_arms_the_latest_timer_instead_of_overflowing() {
        // Found by `hostile_test` (seed 490): a leader's entry is applied as it is, and the
        // lease bound (`Config::lease_ms_max`) is checked only where a client asks. A Grant
        // of lease `u64::MAX - 2` from a buggy or foreign leader overflowed `now + lease`
        // (a panic in a debug build, a lease already run out after wrapping in a release
        // one); after a restart the snapshot's lease did the same.
        let mut n = super::super::test_support::node(2);
        n.step(Input::Tick { now_ms: 10 });
        let grant = Command::Grant {
            key: "a".into(),
            lease_ms: u64::MAX - 2,
        };
        n.step(append(1, 1, (0, 0), vec![entry(1, 1, grant)], 1));
        let lease = Timer::Lease {
            key: "a".into(),
            token: 1,
        };
        assert_eq!(n.deadline(&lease), Some(u64::MAX));
        let (restarted, _) = Node::new(
            Config::new(2, vec![1, 2, 3]),
            super::super::test_support::durable_of(&n),
            10,
        );
        assert_eq!(restarted.deadline(&lease), Some(u64::MAX));
    }

    #[test]
    fn an_applied_release_cancels_the_lease_timer() {
        // DESIGN.md "Leases": lease timers of freed locks are cancelled.
        let mut n = super::super::test_support::node(2);
        let grant = Command::Grant {
            key: "a".into(),
            lease_ms: 700,
        };
        let release = Command::Release {
            key: "a".into(),
            token: 1,
        };
        n.step(append(
            1,
            1,
            (0, 0),
            vec![entry(1, 1, grant), entry(1, 2, release)],
            2,
        ));
        assert!(n.timers().all(|(t, _)| !matches!(t, Timer::Lease { .. })));
        assert!(n.table().locks().is_empty());
    }
}
