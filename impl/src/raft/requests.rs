//! Client requests in the core, so that the stateright model checks them too.
//!
//! # Why the answers are linearizable (DESIGN.md, "Semantics of the lock ops")
//!
//! - Every answer that reports lock state (`Granted`, `Busy`, `Released`, `NotHolder`) comes
//!   from an entry that was committed and then applied at this leader: the outcome is the
//!   state machine's at that log position, and the log position lies between the request's
//!   invoke (the entry was proposed after it arrived) and its answer (sent after apply). The
//!   linearization point is the apply of the entry. A deposed leader cannot commit, so it
//!   cannot answer from a stale table.
//! - A try-acquire is a Grant in the log, even for a held key: `GrantRejected` at apply means
//!   the key was held at that log position, hence `Busy`.
//! - A queued waiter whose deadline passes gets a last try through the log, so its `Busy` is
//!   a committed `GrantRejected` too; see the waiter argument in `leases.rs`.
//! - A request whose entry might still commit after this node lost leadership is answered
//!   `Unknown` (the client records `info`); a request that was never proposed is answered
//!   `NotLeader` or `Invalid`, which promise that nothing happened.
//! - Retries are deduplicated by `LockTable::apply_proposal` through the entry's origin and
//!   command (the rules are in `lock.rs`). A waiting retry is never queued behind its own
//!   grant, nor next to its own earlier attempt (`leases.rs`, "Waiters").
//! - A client that left before its Grant was answered gets its lock released by a
//!   `Release{key, token}` with no origin (phantom-lock release, DESIGN.md).

use super::{
    ClientRequest, Entry, Node, Pending, PendingKind, RequestId, Response, Role, Timer, Waiter,
};
use crate::bugs::Bug;
use crate::lock::{Command, Outcome, Proposal, validate_key};

impl Node {
    /// A client request: validate, then propose through the log at the leader.
    pub(super) fn handle_request(&mut self, id: RequestId, request: ClientRequest) {
        if let Err(reason) = self.validate(&request) {
            return self.respond(id, Response::Invalid { reason });
        }
        if self.role != Role::Leader {
            if self.bug(Bug::FollowerGrants) && self.follower_grants(id, &request) {
                return;
            }
            let leader = self.leader;
            return self.respond(id, Response::NotLeader { leader });
        }
        let uncommitted = self.log.last_index() - self.commit_index;
        if uncommitted as usize >= self.config.uncommitted_entries_max {
            let reason = format!(
                "too many uncommitted entries ({uncommitted}, uncommitted_entries_max {})",
                self.config.uncommitted_entries_max
            );
            return self.respond(id, Response::Invalid { reason });
        }
        match request {
            ClientRequest::Acquire {
                key,
                lease_ms,
                wait_ms,
                origin,
            } => self.handle_acquire(Waiter {
                id,
                key,
                lease_ms,
                origin,
                deadline_ms: self.now_ms + wait_ms,
            }),
            ClientRequest::RegisterSession { .. } => {
                let index = self.append_proposal(Proposal::client(None, Command::RegisterSession));
                let pending = Pending {
                    id,
                    term: self.term,
                    kind: PendingKind::Register,
                    gone: false,
                };
                self.pending.insert(index, pending);
            }
            ClientRequest::Release { .. } | ClientRequest::Abandon { .. } => {
                let (command, origin) = match request {
                    ClientRequest::Release { key, token, origin } => {
                        (Command::Release { key, token }, origin)
                    }
                    ClientRequest::Abandon {
                        key,
                        request,
                        origin,
                    } => (Command::Abandon { key, request }, origin),
                    _ => unreachable!("matched above"),
                };
                let index = self.append_proposal(Proposal::client(origin, command));
                let pending = Pending {
                    id,
                    term: self.term,
                    kind: PendingKind::Release,
                    gone: false,
                };
                self.pending.insert(index, pending);
            }
        }
    }

    /// Checks the request's key and bounds; the reason names the field.
    fn validate(&self, request: &ClientRequest) -> Result<(), String> {
        let key = match request {
            ClientRequest::Acquire {
                key,
                lease_ms,
                wait_ms,
                origin,
            } => {
                if let Some(origin) = origin {
                    let held = self.table.held_by(origin.session);
                    let held_max = self.config.keys_per_session_max;
                    if held >= held_max {
                        return Err(format!(
                            "session {} holds {held} keys, keys_per_session_max {held_max}",
                            origin.session
                        ));
                    }
                }
                let (held, locks_max) = (self.table.locks().len() as u64, self.config.locks_max);
                if held >= locks_max && self.table.holder(key).is_none() {
                    return Err(format!(
                        "the table holds {held} locks, locks_max {locks_max}"
                    ));
                }
                let lease_ms_max = self.config.lease_ms_max;
                if *lease_ms < 1 || *lease_ms > lease_ms_max {
                    return Err(format!("lease_ms {lease_ms} is not in 1..={lease_ms_max}"));
                }
                let wait_ms_max = self.config.wait_ms_max;
                if *wait_ms > wait_ms_max {
                    return Err(format!(
                        "wait_ms {wait_ms} is more than wait_ms_max {wait_ms_max}"
                    ));
                }
                key
            }
            ClientRequest::Release { key, .. } => key,
            ClientRequest::Abandon {
                key,
                request,
                origin,
            } => {
                // Only its own session's earlier request: anything else would apply as a
                // no-op, and a client that sends it has a bug worth naming.
                match origin {
                    Some(origin) if *request < origin.request => key,
                    Some(origin) => {
                        return Err(format!(
                            "abandon of request {request} under request {}: only an \
                             earlier request can be abandoned",
                            origin.request
                        ));
                    }
                    None => return Err("an abandon needs its session (origin)".to_owned()),
                }
            }
            ClientRequest::RegisterSession { .. } => return Ok(()),
        };
        validate_key(key).map_err(|e| format!("key: {e}"))
    }

    /// The `follower-grants` mutant: a follower grants a key its table shows free, with the
    /// next token it guesses, proposing nothing. Returns whether it answered.
    fn follower_grants(&mut self, id: RequestId, request: &ClientRequest) -> bool {
        let ClientRequest::Acquire { key, .. } = request else {
            return false;
        };
        if self.table.holder(key).is_some() {
            return false;
        }
        let token = self.table.last_token() + 1;
        self.respond(id, Response::Granted { token });
        true
    }

    /// An acquire at the leader: try-acquires and acquires of a free key are proposed at
    /// once; acquires of a taken key wait in the key's FIFO.
    fn handle_acquire(&mut self, waiter: Waiter) {
        let waits = waiter.deadline_ms > self.now_ms;
        let taken = self.key_taken(&waiter.key) || self.waiters.contains_key(&waiter.key);
        // A retry whose own Grant already holds the key, or is ahead in the log, is proposed
        // at once: the dedupe table answers it with its own token, where queued it would
        // wait for its own lease to run out or its deadline to pass.
        if waits && taken && !self.retries_grant_in_log(&waiter) {
            if let Some(at) = self.queued_attempt_of(&waiter) {
                return self.supersede_queued_attempt(at, waiter);
            }
            return self.queue_acquire(waiter);
        }
        if self.bug(Bug::StaleLeader) && !taken {
            return self.stale_leader_grant(waiter);
        }
        if waits {
            self.set_timer(Timer::Wait { id: waiter.id }, waiter.deadline_ms);
        }
        let Waiter {
            id,
            key,
            lease_ms,
            origin,
            ..
        } = waiter.clone();
        self.propose_grant(id, key, lease_ms, origin, waits.then_some(waiter));
    }

    /// The queue position of an earlier attempt of the same acquire (same origin and command)
    /// as `waiter`, if one is queued.
    fn queued_attempt_of(&self, waiter: &Waiter) -> Option<usize> {
        waiter.origin?;
        self.waiters.get(&waiter.key)?.iter().position(|w| {
            w.origin == waiter.origin && w.lease_ms == waiter.lease_ms && w.id != waiter.id
        })
    }

    /// A retry takes the place in the queue of its earlier attempt, which the client gave up
    /// on before this node saw it leave: queued twice, the earlier copy would be granted and
    /// answered to nobody, and the retry would wait behind its own lock. The earlier attempt
    /// is answered `Unknown` (its op goes on under the retry).
    fn supersede_queued_attempt(&mut self, at: usize, waiter: Waiter) {
        let Some(slot) = self
            .waiters
            .get_mut(&waiter.key)
            .and_then(|q| q.get_mut(at))
        else {
            return;
        };
        let earlier = std::mem::replace(slot, waiter.clone());
        self.cancel_timer(Timer::Wait { id: earlier.id });
        self.set_timer(Timer::Wait { id: waiter.id }, waiter.deadline_ms);
        let reason = format!(
            "a retry of the same acquire (request {}) took this attempt's place in the queue for key {:?}",
            waiter.id.0, waiter.key
        );
        self.respond(earlier.id, Response::Unknown { reason });
    }

    /// Queues an acquire of a taken key, bounded by `waiters_per_key_max`.
    fn queue_acquire(&mut self, waiter: Waiter) {
        let queued = self.waiters.get(&waiter.key).map_or(0, |q| q.len());
        if queued >= self.config.waiters_per_key_max {
            let reason = format!(
                "too many waiters for key {:?} ({queued}, waiters_per_key_max {})",
                waiter.key, self.config.waiters_per_key_max
            );
            return self.respond(waiter.id, Response::Invalid { reason });
        }
        self.set_timer(Timer::Wait { id: waiter.id }, waiter.deadline_ms);
        self.enqueue_waiter(waiter);
    }

    /// The `stale-leader` mutant: answer `Granted` as soon as the Grant is in the local log,
    /// before it is committed, with the token it would get.
    fn stale_leader_grant(&mut self, waiter: Waiter) {
        let token = self.log.last_index() + 1;
        let command = Command::Grant {
            key: waiter.key,
            lease_ms: waiter.lease_ms,
        };
        self.append_proposal(Proposal::client(waiter.origin, command));
        self.respond(waiter.id, Response::Granted { token });
    }

    /// The client of `id` left: drop its queued acquire, or remember to release the lock its
    /// pending Grant will get (phantom-lock release). Unknown or answered ids: nothing.
    pub(super) fn handle_client_gone(&mut self, id: RequestId) {
        if self.bug(Bug::SkipPhantomRelease) {
            return; // Mutant: the lock stays held until its lease runs out.
        }
        let queued = self.waiters.iter().find_map(|(key, queue)| {
            queue
                .iter()
                .position(|w| w.id == id)
                .map(|at| (key.clone(), at))
        });
        if let Some((key, at)) = queued {
            if let Some(queue) = self.waiters.get_mut(&key) {
                queue.remove(at);
                if queue.is_empty() {
                    self.waiters.remove(&key);
                }
            }
            self.cancel_timer(Timer::Wait { id });
            return;
        }
        let gone = self.pending.iter_mut().find(|(_, p)| p.id == id);
        let Some((&index, pending)) = gone else {
            return;
        };
        pending.gone = true;
        if !matches!(pending.kind, PendingKind::Grant { .. }) || self.role != Role::Leader {
            return;
        }
        // The Release goes into the log right behind its Grant, so that whichever leader
        // commits the Grant commits the Release too: proposed only when the Grant applied,
        // it was lost with a leader deposed before then. The token is the Grant's index; a
        // Grant that is refused holds nothing under it, and the Release finds nothing.
        let Some(entry) = self.log.entry(index) else {
            return;
        };
        let (command, origin) = (entry.proposal.command.clone(), entry.proposal.origin);
        let Command::Grant { key, .. } = &command else {
            return;
        };
        let mut tokens = vec![index];
        // A retry of a request already granted is answered from the dedupe table with its
        // first attempt's token and takes nothing under its own index: that token is what
        // its client gets, so it is released behind the retry too, for the same reason. It
        // was proposed only when the retry applied (`release_phantom`), and lost with a
        // leader that stepped down or handed over first: the key stayed held by nobody for
        // the whole lease (the review of leases and hand-over, 2026-12-06). The first
        // attempt is either applied (the table answers it) or still ahead in the log.
        if let Some(origin) = origin {
            tokens.extend(self.table.replayed_grant(origin, &command));
            let from = self.table.last_applied() + 1;
            let earlier = (from..index).filter(|at| {
                self.log.entry(*at).is_some_and(|e| {
                    e.proposal.origin == Some(origin) && e.proposal.command == command
                })
            });
            tokens.extend(earlier);
        }
        let key = key.clone();
        for token in tokens {
            let key = key.clone();
            self.append_proposal(Proposal::system(Command::Release { key, token }));
        }
    }

    /// Answers the client whose proposal `entry` is, from the applied `outcome`.
    pub(super) fn answer_pending(&mut self, entry: &Entry, outcome: &Outcome) {
        let Some(pending) = self.pending.remove(&entry.index) else {
            return;
        };
        assert_eq!(
            pending.term, entry.term,
            "pending request {:?} at index {} proposed in term {} but applied entry of term {}",
            pending.id, entry.index, pending.term, entry.term
        );
        if let PendingKind::Grant {
            waiter: Some(waiter),
        } = &pending.kind
        {
            if *outcome == Outcome::GrantRejected
                && waiter.deadline_ms > self.now_ms
                && !pending.gone
            {
                // A retry proposed at once, refused with its earlier attempt's last try (a
                // head waiter's Grant is never refused, see `leases.rs` "Waiters"): it waits
                // again, behind every waiter already queued.
                crate::probe!("waiter-lost-race");
                let key = waiter.key.clone();
                if self.bug(Bug::RefusedRetryToHead) {
                    let queue = self.waiters.entry(key.clone()).or_default();
                    queue.push_front(waiter.clone());
                } else {
                    self.enqueue_waiter(waiter.clone());
                }
                return self.grant_head_waiter(&key);
            }
            self.cancel_timer(Timer::Wait { id: pending.id });
        }
        if pending.gone {
            return self.release_phantom(entry, outcome);
        }
        self.respond(pending.id, Response::of_outcome(outcome));
    }

    /// Releases the lock granted to a client that left (no origin: the system's own entry),
    /// unless `handle_client_gone` proposed it already behind the Grant (its own index, or
    /// the token the dedupe table answers a retry with).
    fn release_phantom(&mut self, entry: &Entry, outcome: &Outcome) {
        if let (Outcome::Granted { token }, Command::Grant { key, .. }) =
            (outcome, &entry.proposal.command)
            && *token != entry.index
        {
            let command = Command::Release {
                key: key.clone(),
                token: *token,
            };
            let from = entry.index + 1;
            let proposed = from <= self.log.last_index()
                && (self.log.entries_from(from, usize::MAX).iter())
                    .any(|e| e.proposal.command == command);
            if !proposed {
                self.append_proposal(Proposal::system(command));
            }
        }
    }

    /// After losing leadership: pending proposals may still commit (`Unknown`); queued
    /// waiters were never proposed (`NotLeader`).
    pub(super) fn abandon_requests(&mut self, term: super::Term, leader: Option<super::NodeId>) {
        for (index, pending) in std::mem::take(&mut self.pending) {
            self.cancel_timer(Timer::Wait { id: pending.id });
            if pending.gone {
                continue;
            }
            let reason = format!(
                "node {} stopped leading in term {term} with the request at log index {index} uncommitted; it may still commit",
                self.config.id
            );
            self.respond(pending.id, Response::Unknown { reason });
        }
        for (_, queue) in std::mem::take(&mut self.waiters) {
            for waiter in queue {
                self.cancel_timer(Timer::Wait { id: waiter.id });
                self.respond(waiter.id, Response::NotLeader { leader });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{ack, leader, node};
    use super::super::{ClientRequest, Input, RequestId, Response};

    fn acquire(key: &str, lease_ms: u64, wait_ms: u64) -> ClientRequest {
        ClientRequest::Acquire {
            key: key.into(),
            lease_ms,
            wait_ms,
            origin: None,
        }
    }

    fn request(id: u64, request: ClientRequest) -> Input {
        Input::Request {
            id: RequestId(id),
            request,
        }
    }

    #[test]
    fn invalid_requests_are_answered_and_propose_nothing() {
        // DESIGN.md "Semantics of the lock ops": Invalid means nothing was proposed.
        let mut n = leader();
        let before = n.status().last_log_index;
        for bad in [
            acquire("a b", 10, 0),
            acquire("a", 0, 0),
            acquire("a", 10, 60_001),
        ] {
            let out = n.step(request(1, bad.clone()));
            assert!(out.persist.is_none(), "{bad:?} persisted something");
            assert!(
                matches!(out.respond.as_slice(), [(_, Response::Invalid { .. })]),
                "{bad:?}: {:?}",
                out.respond
            );
        }
        assert_eq!(n.status().last_log_index, before);
    }

    #[test]
    fn an_acquire_of_a_free_key_past_locks_max_is_refused_and_a_held_one_still_answered() {
        // Issue 27: no client input grows a snapshot past the record limit. A cluster of
        // many sessions could hold 50,000 x 100,000 keys before `locks_max`.
        let mut config = super::super::Config::new(1, vec![1, 2, 3]);
        config.locks_max = 2;
        let mut n = super::super::test_support::leader_with(config);
        for (id, key) in [(1, "a"), (2, "b")] {
            let out = n.step(request(id, acquire(key, 10_000, 0)));
            assert!(out.respond.is_empty(), "{key}: proposed, not answered");
            let index = n.status().last_log_index;
            n.step(Input::Persisted { term: 1, index });
            let out = n.step(ack(2, 1, index));
            assert!(
                matches!(out.respond.as_slice(), [(_, Response::Granted { .. })]),
                "{key}: {:?}",
                out.respond
            );
        }
        let before = n.status().last_log_index;
        let out = n.step(request(3, acquire("c", 10_000, 0)));
        match out.respond.as_slice() {
            [(_, Response::Invalid { reason })] => {
                assert!(reason.contains("locks_max 2"), "{reason}")
            }
            other => panic!("a third lock past locks_max 2: {other:?}"),
        }
        assert_eq!(n.status().last_log_index, before, "nothing proposed");
        // A held key is no new lock: its acquire is proposed (and answered Busy on apply).
        let out = n.step(request(4, acquire("a", 10_000, 0)));
        assert!(out.respond.is_empty(), "{:?}", out.respond);
        assert_eq!(n.status().last_log_index, before + 1);
    }

    #[test]
    fn a_client_that_leaves_its_pending_grant_gets_a_release_in_the_log_at_once() {
        // Review defect (issue 24): the leader that saw the client leave released its lock
        // only when the Grant applied. Deposed first (partitioned, exiting, or its Release
        // overwritten), it left the next leader to commit the Grant with nobody to release
        // it: the lock stayed held until its lease ran out. The Release now goes into the
        // log with the Grant, so whichever leader commits one commits the other.
        let mut n = leader();
        n.step(request(1, acquire("a", 60_000, 0)));
        let grant_at = n.status().last_log_index;
        n.step(Input::ClientGone { id: RequestId(1) });
        let release = crate::lock::Command::Release {
            key: "a".into(),
            token: grant_at,
        };
        let logged: Vec<_> = n.log().iter().map(|e| e.proposal.command.clone()).collect();
        assert!(
            n.log()
                .iter()
                .any(|e| e.index > grant_at && e.proposal.command == release),
            "no Release of token {grant_at} after the Grant: {logged:?}"
        );
        // Both commit and apply: the key is free, and the Release is not proposed twice.
        let last = n.status().last_log_index;
        n.step(Input::Persisted {
            term: 1,
            index: last,
        });
        n.step(ack(2, 1, last));
        assert_eq!(n.table().holder("a"), None);
        let releases = (n.log().iter())
            .filter(|e| e.proposal.command == release)
            .count();
        assert_eq!(releases, 1, "{logged:?}");
    }

    #[test]
    fn a_follower_answers_not_leader_with_its_leader() {
        // DESIGN.md "Semantics of the lock ops": a non-leader proposes nothing.
        let mut n = node(2);
        n.step(super::super::test_support::append(1, 1, (0, 0), vec![], 0));
        let out = n.step(request(1, acquire("a", 10, 0)));
        assert_eq!(
            out.respond,
            vec![(RequestId(1), Response::NotLeader { leader: Some(1) })]
        );
        assert!(out.persist.is_none());
    }

    #[test]
    fn the_leader_answers_only_after_commit_and_apply() {
        // DESIGN.md "Semantics of the lock ops": never answer from unreplicated state.
        let mut n = leader();
        n.step(Input::Persisted { term: 1, index: 1 });
        let out = n.step(request(1, acquire("a", 10, 0)));
        assert!(out.respond.is_empty(), "{:?}", out.respond);
        n.step(Input::Persisted { term: 1, index: 2 });
        let out = n.step(ack(2, 1, 2));
        assert_eq!(
            out.respond,
            vec![(RequestId(1), Response::Granted { token: 2 })]
        );
    }

    #[test]
    fn a_leader_that_steps_down_answers_pending_requests_unknown() {
        // DESIGN.md "Clients": an answer that may or may not take effect is `info`.
        let mut n = leader();
        n.step(request(1, acquire("a", 10, 0)));
        let out = n.step(Input::Tick { now_ms: 300 });
        assert!(
            matches!(
                out.respond.as_slice(),
                [(RequestId(1), Response::Unknown { .. })]
            ),
            "{:?}",
            out.respond
        );
    }

    /// Persists the leader's log and acks it from node 2: commits what is pending and
    /// returns the answers.
    fn commit(n: &mut super::super::Node) -> Vec<(RequestId, Response)> {
        let last = n.status().last_log_index;
        n.step(Input::Persisted {
            term: 1,
            index: last,
        });
        n.step(ack(2, 1, last)).respond
    }

    /// Registers a session through the log (client request `id`); its id.
    fn session(n: &mut super::super::Node, id: u64) -> u64 {
        n.step(request(id, ClientRequest::RegisterSession { label: id }));
        match commit(n).as_slice() {
            [(_, Response::Registered { session })] => *session,
            other => panic!("registration: {other:?}"),
        }
    }

    #[test]
    fn a_session_at_its_key_bound_is_refused_one_more_key_and_below_it_is_granted() {
        // A hand-made mistake of 2026-12-07 (`held > held_max`) let a session take one key
        // past the bound; no simulated session ever holds two keys, and no test stood at
        // the bound itself.
        use crate::lock::Origin;
        let mut config = super::super::Config::new(1, vec![1, 2, 3]);
        config.keys_per_session_max = 2;
        let mut n = super::super::test_support::leader_with(config);
        let s = session(&mut n, 1);
        let take = |id: u64, key: &str| {
            request(
                id,
                ClientRequest::Acquire {
                    key: key.into(),
                    lease_ms: 60_000,
                    wait_ms: 0,
                    origin: Some(Origin {
                        session: s,
                        request: id,
                    }),
                },
            )
        };
        for (id, key) in [(2, "a"), (3, "b")] {
            n.step(take(id, key));
            let answers = commit(&mut n);
            assert!(
                matches!(answers.as_slice(), [(_, Response::Granted { .. })]),
                "key {key}, below the bound: {answers:?}"
            );
        }
        let before = n.status().last_log_index;
        let out = n.step(take(4, "c"));
        match out.respond.as_slice() {
            [(_, Response::Invalid { reason })] => {
                assert!(reason.contains("keys_per_session_max 2"), "{reason}")
            }
            other => panic!("a third key at keys_per_session_max 2: {other:?}"),
        }
        assert_eq!(n.status().last_log_index, before, "nothing proposed");
    }

    #[test]
    fn an_abandon_names_an_earlier_request_of_its_own_session_and_frees_its_grant() {
        // The deadline defect (issue 24 review): the client gives up a request whose answer
        // it never read. Anything but an earlier request of the asking session is refused
        // at the door; the real thing frees the grant through the log.
        use crate::lock::Origin;
        let mut n = leader();
        let s = session(&mut n, 1);
        let origin = |request| {
            Some(Origin {
                session: s,
                request,
            })
        };
        n.step(request(
            2,
            ClientRequest::Acquire {
                key: "k".into(),
                lease_ms: 60_000,
                wait_ms: 0,
                origin: origin(1),
            },
        ));
        assert!(matches!(
            commit(&mut n).as_slice(),
            [(RequestId(2), Response::Granted { .. })]
        ));
        let abandon = |request, origin| ClientRequest::Abandon {
            key: "k".into(),
            request,
            origin,
        };
        for (id, refused) in [(3, abandon(1, None)), (4, abandon(2, origin(2)))] {
            let out = n.step(request(id, refused));
            assert!(
                matches!(out.respond.as_slice(), [(_, Response::Invalid { .. })]),
                "{:?}",
                out.respond
            );
        }
        n.step(request(5, abandon(1, origin(2))));
        assert_eq!(commit(&mut n), vec![(RequestId(5), Response::Released)]);
        assert_eq!(n.table().holder("k"), None);
    }

    #[test]
    fn a_first_attempt_that_reaches_the_leader_after_its_retry_was_answered_busy_is_granted() {
        // Review (deadlines), the node's half of
        // `client::tests::a_busy_after_an_attempt_lost_in_flight_is_not_definite`: session B's
        // acquire of a held key is sent twice under one origin (the client lost the first
        // attempt at its deadline, e.g. a cut connection, and retried). The retry arrives
        // first and commits as GrantRejected: `Busy`, which the client reports as a definite
        // failure. The holder then releases, and the first attempt, which was still on the
        // wire, reaches the leader: a refusal is never replayed from the dedupe table, so it
        // is applied afresh and granted. The op took effect after its `Busy`.
        use crate::lock::Origin;
        let mut n = leader();
        let (a, b) = (session(&mut n, 1), session(&mut n, 2));
        let acquire_by = |session, request| ClientRequest::Acquire {
            key: "k".into(),
            lease_ms: 60_000,
            wait_ms: 0,
            origin: Some(Origin { session, request }),
        };
        n.step(request(3, acquire_by(a, 1)));
        let held = match commit(&mut n).as_slice() {
            [(RequestId(3), Response::Granted { token })] => *token,
            other => panic!("holder: {other:?}"),
        };
        // B's retry (request 5) arrives first.
        n.step(request(5, acquire_by(b, 1)));
        assert_eq!(commit(&mut n), vec![(RequestId(5), Response::Busy)]);
        // A releases.
        n.step(request(
            6,
            ClientRequest::Release {
                key: "k".into(),
                token: held,
                origin: Some(Origin {
                    session: a,
                    request: 2,
                }),
            },
        ));
        assert_eq!(commit(&mut n), vec![(RequestId(6), Response::Released)]);
        // B's first attempt (request 4, the same op) reaches the leader now.
        n.step(request(4, acquire_by(b, 1)));
        let late = commit(&mut n);
        assert!(
            matches!(late.as_slice(), [(RequestId(4), Response::Granted { .. })]),
            "{late:?}"
        );
        assert!(
            n.table().holder("k").is_some(),
            "the op answered Busy holds the key"
        );
    }

    #[test]
    fn a_late_attempt_of_an_older_request_does_not_unmake_the_newer_requests_dedupe() {
        // Review (deadlines). The table remembers one request per session and applies a
        // request under any other number as new (lock.rs), on the premise that a client runs
        // one request at a time. A client does, but an attempt it gave up on can still be on
        // the wire: its op 1 (acquire k1) was lost at its deadline and reported Unknown; its
        // op 2 (acquire k2) is granted, but the answer is lost and the client retries it.
        // Between the two, op 1's attempt reaches the leader: request 1 < 2 is applied as
        // new, granted, and replaces op 2's entry in the table. Op 2's retry is then
        // applied afresh against a key held by op 2's own grant: GrantRejected, `Busy`,
        // which the client reports as a definite failure while op 2's grant holds k2, known
        // to nobody, until its lease runs out. (Raft dissertation §6.3 answers or discards
        // an older request of a session; it never executes it after a newer one.)
        use crate::lock::Origin;
        let mut n = leader();
        let session = session(&mut n, 1);
        let acquire_by = |key: &str, request| ClientRequest::Acquire {
            key: key.into(),
            lease_ms: 60_000,
            wait_ms: 0,
            origin: Some(Origin { session, request }),
        };
        // Op 2, first attempt: granted (the answer is lost on the way back).
        n.step(request(11, acquire_by("k2", 2)));
        let token = match commit(&mut n).as_slice() {
            [(RequestId(11), Response::Granted { token })] => *token,
            other => panic!("op 2: {other:?}"),
        };
        // Op 1's attempt, given up on by the client, arrives late.
        n.step(request(12, acquire_by("k1", 1)));
        assert_eq!(
            commit(&mut n),
            vec![(RequestId(12), Response::SessionExpired)],
            "a late attempt of an earlier request is refused, as of an expired session"
        );
        assert_eq!(n.table().holder("k1"), None, "and changes nothing");
        // Op 2's retry.
        n.step(request(13, acquire_by("k2", 2)));
        let retry = commit(&mut n);
        assert_eq!(
            retry,
            vec![(RequestId(13), Response::Granted { token })],
            "op 2's retry must get its own grant back (k2 is held under token {token} by op 2)"
        );
    }
}
