//! Leader election: randomized timeouts, pre-vote, votes, check-quorum (Raft paper §5.2,
//! thesis §9.6 and §6.2).
//!
//! - A follower whose election timer fires becomes a pre-candidate and asks for pre-votes
//!   for `term + 1` without changing any state; only a majority of pre-votes makes it a
//!   candidate, so a partitioned node rejoining does not bump everyone's term (thesis §9.6).
//! - A node that heard from its leader within the minimum election timeout rejects
//!   pre-votes and ignores vote requests of a higher term (the "leader lease" of thesis §6.2
//!   that check-quorum makes safe).
//! - A leader checks every minimum election timeout that a majority answered its
//!   AppendEntries or InstallSnapshot in that window, and steps down otherwise
//!   (check-quorum), so a partitioned leader stops serving within two windows. Other
//!   messages do not count: a leader whose outbound links are cut still receives PreVotes. Its answers do not rely on this (they come from committed entries);
//!   the `stale-leader` mutant switches check-quorum off.

use super::{Index, Message, Node, NodeId, Progress, Role, Term, Timer};
use crate::bugs::Bug;
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
                    snapshot: None,
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
        self.clock_base_ms = (self.now_ms, self.table.clock_ms());
        self.noop_index = self.append_proposal(Proposal::system(Command::Noop));
    }

    /// Becomes a follower of `term`, with `leader` if known. A leader that steps down answers
    /// its pending proposals `Unknown` and its waiters `NotLeader`.
    pub(super) fn become_follower(&mut self, term: Term, leader: Option<NodeId>) {
        let led_term = self.term;
        if term > self.term {
            self.term = term;
            self.voted_for = None;
        }
        if self.role == Role::Leader {
            if !self.pending.is_empty() {
                crate::probe!("leader-stepped-down-with-pending");
            }
            self.cancel_timer(Timer::Heartbeat);
            self.cancel_timer(Timer::CheckQuorum);
            self.progress.clear();
            self.noop_index = 0;
            self.abandon_requests(led_term, leader);
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
        // A refusal names this node's own term (etcd raft does the same): a pre-candidate
        // behind it learns the term it must campaign above. Otherwise a node whose term is
        // ahead but whose log is behind (its RequestVote was lost) and a node with the longer
        // log but a lower term refuse each other's pre-votes for ever.
        let term = if granted { term } else { self.term };
        self.send_now(from, Message::PreVoteResponse { term, granted });
    }

    pub(super) fn handle_pre_vote_response(&mut self, from: NodeId, term: Term, granted: bool) {
        if !granted && term > self.term {
            // Refused by a node in a later term: no pre-vote for `self.term + 1` can pass
            // there, so move to its term and campaign above it next time.
            self.become_follower(term, None);
            return;
        }
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
        let answer = Message::RequestVoteResponse { term, granted };
        if self.bug(Bug::VoteBeforePersist) {
            // Mutant: the vote goes out before it is durable.
            self.send_now(from, answer);
        } else {
            self.send_after_persist(from, answer);
        }
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

    /// A clean exit (`Input::Exit`, thesis §3.10): a leader tells every follower to forget its
    /// lease, and the follower with the highest match index (the lowest id among equals) to
    /// campaign now, then steps down. This changes only when elections start, never how
    /// votes are granted (one durable vote per term, the up-to-date check, pre-vote first),
    /// so it cannot elect a leader that a timeout could not have elected.
    pub(super) fn handle_exit(&mut self) {
        if self.role != Role::Leader {
            return;
        }
        let successor = self
            .progress
            .iter()
            .max_by_key(|(id, p)| (p.match_index, std::cmp::Reverse(**id)))
            .map(|(id, _)| *id);
        let term = self.term;
        for peer in self.peers() {
            let campaign = Some(peer) == successor;
            self.send_now(peer, Message::TimeoutNow { term, campaign });
        }
        self.become_follower(self.term, None);
    }

    /// A follower hears that its leader stops: out of its lease at once, and with `campaign`
    /// an election now.
    pub(super) fn handle_timeout_now(&mut self, from: NodeId, campaign: bool) {
        if self.role != Role::Follower || self.leader != Some(from) {
            return;
        }
        self.leader = None;
        self.leader_contact_ms = None;
        if campaign {
            self.campaign();
        }
    }

    /// Check-quorum: step down unless a majority (this node included) answered this leader's
    /// AppendEntries or InstallSnapshot since the last check (`Progress::recent_active`).
    pub(super) fn handle_check_quorum_timeout(&mut self) {
        if self.role != Role::Leader {
            return;
        }
        let active = 1 + self.progress.values().filter(|p| p.recent_active).count();
        if !self.has_majority(active) {
            crate::probe!("check-quorum-step-down");
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

#[cfg(test)]
mod tests {
    use super::super::test_support::{append, leader, node};
    use super::super::{Config, Durable, Input, Message, Node, Role, Timer};
    use crate::bugs::{Bug, BugSet};
    use crate::lock::Command;

    #[test]
    fn pre_vote_changes_no_term() {
        // Raft thesis §9.6: a pre-candidate asks for term + 1 without incrementing its term.
        let mut n = node(1);
        let out = n.step(Input::Campaign);
        assert_eq!(n.status().role, Role::PreCandidate);
        assert_eq!(n.status().term, 0);
        assert!(
            out.send_now
                .iter()
                .all(|e| matches!(e.msg, Message::PreVote { term: 1, .. })),
            "{:?}",
            out.send_now
        );
        assert_eq!(out.send_now.len(), 2);
    }

    #[test]
    fn a_follower_that_hears_its_leader_rejects_pre_votes() {
        // Raft thesis §9.6 with check-quorum: a node in its leader's lease grants no pre-vote.
        let mut n = node(2);
        n.step(append(1, 1, (0, 0), vec![], 0));
        let out = n.step(Input::Message {
            from: 3,
            msg: Message::PreVote {
                term: 2,
                last_log_index: 0,
                last_log_term: 0,
            },
        });
        let granted = out
            .send_now
            .iter()
            .any(|e| matches!(e.msg, Message::PreVoteResponse { granted: true, .. }));
        assert!(!granted, "{:?}", out.send_now);
        assert_eq!(n.status().term, 1, "a pre-vote changes no term");
    }

    #[test]
    fn a_vote_is_sent_only_after_it_is_persisted() {
        // Raft paper Figure 2: votedFor is on stable storage before responding to an RPC.
        let mut n = node(2);
        let out = n.step(Input::Message {
            from: 1,
            msg: Message::RequestVote {
                term: 1,
                last_log_index: 0,
                last_log_term: 0,
            },
        });
        let voted = out.persist.as_ref().and_then(|p| p.hard_state.as_ref());
        assert_eq!(voted.map(|h| (h.term, h.voted_for)), Some((1, Some(1))));
        assert!(out.send_now.is_empty(), "{:?}", out.send_now);
        assert!(matches!(
            out.send_after_persist[0].msg,
            Message::RequestVoteResponse { granted: true, .. }
        ));
    }

    #[test]
    fn the_vote_before_persist_mutant_sends_its_vote_before_the_persist() {
        // bugs.rs, `vote-before-persist` (issue 24, item 4): the mutant moves the vote from
        // `send_after_persist` to `send_now`, still with the vote in `persist`; the clean node
        // keeps it behind the persist (Raft paper Figure 2).
        let request_vote = Input::Message {
            from: 1,
            msg: Message::RequestVote {
                term: 1,
                last_log_index: 0,
                last_log_term: 0,
            },
        };
        let is_vote = |e: &super::super::Envelope| {
            e.target == 1 && matches!(e.msg, Message::RequestVoteResponse { granted: true, .. })
        };
        let mut config = Config::new(2, vec![1, 2, 3]);
        config.bugs = BugSet::of(&[Bug::VoteBeforePersist]);
        let mut mutant = Node::new(config, Durable::default(), 0).0;
        let mut clean = node(2);

        let mutant_out = mutant.step(request_vote.clone());
        let clean_out = clean.step(request_vote);

        let voted = |out: &super::super::Output| {
            (out.persist.as_ref())
                .and_then(|p| p.hard_state.as_ref())
                .map(|h| (h.term, h.voted_for))
        };
        assert_eq!(voted(&mutant_out), Some((1, Some(1))));
        assert_eq!(voted(&clean_out), Some((1, Some(1))));
        assert!(mutant_out.send_now.iter().any(is_vote), "{mutant_out:?}");
        assert!(mutant_out.send_after_persist.is_empty(), "{mutant_out:?}");
        assert!(
            clean_out.send_after_persist.iter().any(is_vote),
            "{clean_out:?}"
        );
        assert!(clean_out.send_now.is_empty(), "{clean_out:?}");
    }

    #[test]
    fn a_candidate_with_a_stale_log_gets_no_vote() {
        // Raft paper §5.4.1: vote only for a log at least as up-to-date as one's own.
        let mut n = node(2);
        let noop = super::super::test_support::entry(1, 1, Command::Noop);
        n.step(append(1, 1, (0, 0), vec![noop], 0));
        let out = n.step(Input::Message {
            from: 3,
            msg: Message::RequestVote {
                term: 5,
                last_log_index: 0,
                last_log_term: 0,
            },
        });
        // In lease: the request is ignored; past the lease it is rejected on the log.
        assert!(
            out.send_after_persist.is_empty(),
            "{:?}",
            out.send_after_persist
        );
        n.step(Input::Tick { now_ms: 10_000 });
        let out = n.step(Input::Message {
            from: 3,
            msg: Message::RequestVote {
                term: 5,
                last_log_index: 0,
                last_log_term: 0,
            },
        });
        assert!(matches!(
            out.send_after_persist[0].msg,
            Message::RequestVoteResponse { granted: false, .. }
        ));
    }

    #[test]
    fn a_leader_that_exits_hands_over_to_its_most_up_to_date_follower() {
        // Raft thesis §3.10 (leadership transfer), etcd's MsgTimeoutNow: on a clean exit the
        // follower with the longest matching log campaigns at once.
        let mut n = leader();
        n.step(super::super::test_support::ack(2, 1, 1));
        let out = n.step(Input::Exit);
        let sent: Vec<(u64, &Message)> = out.send_now.iter().map(|e| (e.target, &e.msg)).collect();
        assert_eq!(
            sent,
            vec![
                (
                    2,
                    &Message::TimeoutNow {
                        term: 1,
                        campaign: true
                    }
                ),
                (
                    3,
                    &Message::TimeoutNow {
                        term: 1,
                        campaign: false
                    }
                ),
            ]
        );
        assert_eq!(n.status().role, Role::Follower);
    }

    #[test]
    fn timeout_now_ends_the_lease_and_the_successor_campaigns_at_once() {
        // Raft thesis §3.10 and §9.6: a follower in its leader's lease refuses pre-votes; a
        // TimeoutNow from that leader ends the lease, and with `campaign` starts a pre-vote
        // round without waiting for the election timer.
        let pre_vote = Input::Message {
            from: 2,
            msg: Message::PreVote {
                term: 2,
                last_log_index: 0,
                last_log_term: 0,
            },
        };
        let granted = |out: &super::super::Output| {
            out.send_now
                .iter()
                .any(|e| matches!(e.msg, Message::PreVoteResponse { granted: true, .. }))
        };
        let mut voter = node(3);
        voter.step(append(1, 1, (0, 0), vec![], 0));
        assert!(!granted(&voter.step(pre_vote.clone())), "in the lease");
        voter.step(Input::Message {
            from: 1,
            msg: Message::TimeoutNow {
                term: 1,
                campaign: false,
            },
        });
        assert!(granted(&voter.step(pre_vote)), "the leader left");

        let mut successor = node(2);
        successor.step(append(1, 1, (0, 0), vec![], 0));
        successor.step(Input::Message {
            from: 1,
            msg: Message::TimeoutNow {
                term: 1,
                campaign: true,
            },
        });
        assert_eq!(successor.status().role, Role::PreCandidate);
    }

    #[test]
    fn a_leader_that_hears_no_majority_steps_down() {
        // Raft thesis §6.2, check-quorum: step down after a window without a majority.
        let mut n = leader();
        let at = n.deadline(&Timer::CheckQuorum);
        assert_eq!(at, Some(300));
        n.step(Input::Tick { now_ms: 300 });
        assert_eq!(n.status().role, Role::Follower);
        assert_eq!(n.status().term, 1);
        assert!(n.deadline(&Timer::Heartbeat).is_none());
    }

    #[test]
    fn timeout_now_from_a_node_that_is_not_the_followers_leader_is_ignored() {
        // Raft thesis §3.10: a leader hands over to its own followers. A TimeoutNow from any
        // node this follower does not follow (it has not heard from the leader of the term
        // yet, or the message is stray) ends no lease and starts no election.
        let timeout_now = |from| Input::Message {
            from,
            msg: Message::TimeoutNow {
                term: 1,
                campaign: true,
            },
        };
        let mut unaware = node(3);
        let mut follower = node(3);
        follower.step(append(1, 1, (0, 0), vec![], 0));

        let unaware_out = unaware.step(timeout_now(1));
        let follower_out = follower.step(timeout_now(2));

        assert_eq!(unaware.status().role, Role::Follower);
        assert_eq!(unaware.status().term, 1);
        assert!(unaware_out.send_now.is_empty(), "{unaware_out:?}");
        assert_eq!(follower.status().role, Role::Follower);
        assert_eq!(
            follower.status().leader,
            Some(1),
            "still in leader 1's lease"
        );
        assert!(follower_out.send_now.is_empty(), "{follower_out:?}");
    }
}
