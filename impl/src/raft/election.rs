//! Leader election: randomized timeouts, pre-vote, votes, check-quorum (Raft paper §5.2,
//! thesis §9.6 and §6.2).
//!
//! - A follower whose election timer fires becomes a pre-candidate and asks for pre-votes
//!   for `term + 1` without changing any state; only a majority of pre-votes makes it a
//!   candidate, so a partitioned node rejoining does not bump everyone's term (thesis §9.6).
//! - A node that heard from its leader within the minimum election timeout rejects
//!   pre-votes and ignores vote requests of a higher term (the "leader lease" of thesis §6.2
//!   that check-quorum makes safe).
//! - A leader checks every minimum election timeout that a majority was heard from, and steps
//!   down otherwise (check-quorum), so a partitioned leader stops serving.

use super::{Index, Message, Node, NodeId, Progress, Role, Term, Timer};
use crate::lock::{Command, Proposal};

impl Node {
    /// Re-arms the election timer at a random point in `[min, max)` from now.
    pub(super) fn reset_election_timer(&mut self) {
        let min = self.config.election_timeout_min_ms;
        let span = self
            .config
            .election_timeout_max_ms
            .saturating_sub(min)
            .max(1);
        let at_ms = self.now_ms + min + self.next_random() % span;
        self.set_timer(Timer::Election, at_ms);
    }

    /// Whether this node has recently heard from a live leader (and so refuses to help
    /// depose it). Only with check-quorum, which makes a leader with no majority step down.
    pub(super) fn in_lease(&self) -> bool {
        if !self.check_quorum_on() {
            return false;
        }
        if self.role == Role::Leader {
            return true;
        }
        let window = self.config.election_timeout_min_ms;
        self.leader.is_some()
            && self
                .leader_contact_ms
                .is_some_and(|at| self.now_ms < at + window)
    }

    pub(super) fn handle_election_timeout(&mut self) {
        if self.role == Role::Leader {
            return;
        }
        self.campaign();
    }

    /// Starts an election: a pre-vote round with pre-vote on, else a real one.
    pub(super) fn campaign(&mut self) {
        if self.role == Role::Leader {
            return;
        }
        if self.config.pre_vote {
            self.become_pre_candidate();
        } else {
            self.become_candidate();
        }
    }

    fn become_pre_candidate(&mut self) {
        self.role = Role::PreCandidate;
        self.leader = None;
        self.votes.clear();
        self.votes.insert(self.config.id, true);
        self.reset_election_timer();
        if self.has_majority(1) {
            self.become_candidate();
            return;
        }
        let msg = Message::PreVote {
            term: self.term + 1,
            last_log_index: self.log.last_index(),
            last_log_term: self.log.last_term(),
        };
        for peer in self.peers() {
            self.send_now(peer, msg.clone());
        }
    }

    fn become_candidate(&mut self) {
        self.role = Role::Candidate;
        self.term += 1;
        self.voted_for = Some(self.config.id);
        self.leader = None;
        self.votes.clear();
        self.votes.insert(self.config.id, true);
        self.reset_election_timer();
        if self.has_majority(1) {
            self.become_leader();
            return;
        }
        let msg = Message::RequestVote {
            term: self.term,
            last_log_index: self.log.last_index(),
            last_log_term: self.log.last_term(),
        };
        // The candidate's own vote must be durable before it asks for others.
        for peer in self.peers() {
            self.send_after_persist(peer, msg.clone());
        }
    }

    /// Becomes leader of the current term: a Noop opens the term (Raft paper §8), and the
    /// leader counts toward the commit of entries of this term only from then on.
    pub(super) fn become_leader(&mut self) {
        assert_eq!(
            self.voted_for,
            Some(self.config.id),
            "leader of term {} did not vote for itself",
            self.term
        );
        self.role = Role::Leader;
        self.leader = Some(self.config.id);
        self.leader_contact_ms = Some(self.now_ms);
        self.votes.clear();
        let next_index = self.log.last_index() + 1;
        self.progress = self
            .peers()
            .into_iter()
            .map(|peer| {
                let progress = Progress {
                    next_index,
                    match_index: 0,
                    recent_active: false,
                };
                (peer, progress)
            })
            .collect();
        self.cancel_timer(Timer::Election);
        self.set_timer(Timer::Heartbeat, self.now_ms + self.config.heartbeat_ms);
        if self.check_quorum_on() {
            let at_ms = self.now_ms + self.config.election_timeout_min_ms;
            self.set_timer(Timer::CheckQuorum, at_ms);
        }
        self.noop_index = self.append_proposal(Proposal::system(Command::Noop));
    }

    /// Becomes a follower of `term`, with `leader` if known. A leader that steps down answers
    /// its pending proposals `Unknown` and its waiters `NotLeader`.
    pub(super) fn become_follower(&mut self, term: Term, leader: Option<NodeId>) {
        if term > self.term {
            self.term = term;
            self.voted_for = None;
        }
        if self.role == Role::Leader {
            self.cancel_timer(Timer::Heartbeat);
            self.cancel_timer(Timer::CheckQuorum);
            self.progress.clear();
            self.noop_index = 0;
            self.abandon_requests(leader);
        }
        self.role = Role::Follower;
        self.leader = leader;
        self.votes.clear();
        self.reset_election_timer();
    }

    /// Whether a log ending at (`last_log_index`, `last_log_term`) is at least as up-to-date
    /// as this node's (Raft paper §5.4.1).
    fn log_is_up_to_date(&self, last_log_index: Index, last_log_term: Term) -> bool {
        (last_log_term, last_log_index) >= (self.log.last_term(), self.log.last_index())
    }

    /// Pre-vote: grant when the candidate's term would be newer, its log is up to date, and
    /// this node is not following a live leader. Changes no state (thesis §9.6).
    pub(super) fn handle_pre_vote(
        &mut self,
        from: NodeId,
        term: Term,
        last_log_index: Index,
        last_log_term: Term,
    ) {
        let granted = term > self.term
            && !self.in_lease()
            && self.log_is_up_to_date(last_log_index, last_log_term);
        self.send_now(from, Message::PreVoteResponse { term, granted });
    }

    pub(super) fn handle_pre_vote_response(&mut self, from: NodeId, term: Term, granted: bool) {
        if self.role != Role::PreCandidate || term != self.term + 1 {
            return;
        }
        self.votes.insert(from, granted);
        let yes = self.votes.values().filter(|g| **g).count();
        if self.has_majority(yes) {
            self.become_candidate();
        }
    }

    /// RequestVote (Raft paper §5.2, §5.4.1). The caller already moved to `term` if it was
    /// newer. The answer goes after persist: it promises the vote is durable.
    pub(super) fn handle_request_vote(
        &mut self,
        from: NodeId,
        term: Term,
        last_log_index: Index,
        last_log_term: Term,
    ) {
        let granted = term == self.term
            && self.voted_for.is_none_or(|v| v == from)
            && self.log_is_up_to_date(last_log_index, last_log_term);
        if granted {
            self.voted_for = Some(from);
            self.reset_election_timer();
        }
        let term = self.term;
        self.send_after_persist(from, Message::RequestVoteResponse { term, granted });
    }

    pub(super) fn handle_request_vote_response(&mut self, from: NodeId, term: Term, granted: bool) {
        if self.role != Role::Candidate || term != self.term {
            return;
        }
        self.votes.insert(from, granted);
        let yes = self.votes.values().filter(|g| **g).count();
        if self.has_majority(yes) {
            self.become_leader();
        }
    }

    pub(super) fn handle_heartbeat_timeout(&mut self) {
        if self.role != Role::Leader {
            return;
        }
        self.broadcast_append();
        self.set_timer(Timer::Heartbeat, self.now_ms + self.config.heartbeat_ms);
    }

    /// Check-quorum: step down unless a majority (this node included) was heard from since
    /// the last check.
    pub(super) fn handle_check_quorum_timeout(&mut self) {
        if self.role != Role::Leader {
            return;
        }
        let active = 1 + self.progress.values().filter(|p| p.recent_active).count();
        if !self.has_majority(active) {
            self.become_follower(self.term, None);
            return;
        }
        for progress in self.progress.values_mut() {
            progress.recent_active = false;
        }
        let at_ms = self.now_ms + self.config.election_timeout_min_ms;
        self.set_timer(Timer::CheckQuorum, at_ms);
    }
}
