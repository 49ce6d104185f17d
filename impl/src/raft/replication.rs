//! Log replication, commitment, apply and snapshots (Raft paper §5.3, §5.4, §7).
//!
//! - The leader sends AppendEntries from each follower's `next_index`, at most
//!   `append_entries_max` entries, in `send_now`: its own log need not be durable first
//!   (thesis §10.2.1), but it counts itself toward a quorum only up to `Input::Persisted`.
//! - A follower answers after persist, so an acknowledgement promises durable entries.
//! - A rejection carries `reject_hint`: the follower's last index when its log is too short,
//!   else the first index of the conflicting term; the leader backs `next_index` off to it.
//! - The leader commits index `n` only when a majority matched `n` and the entry at `n` is of
//!   its current term (§5.4.2, Figure 8); earlier entries commit with it.
//! - Followers whose `next_index` fell below the compacted prefix get an InstallSnapshot.

use super::{
    Committed, Entry, Index, Message, Node, NodeId, Persist, Role, Snapshot, Term, quorum,
};
use crate::lock::{Command, Proposal};

impl Node {
    /// Dispatches a message from a peer after the term rules of Figure 2.
    pub(super) fn handle_message(&mut self, from: NodeId, msg: Message) {
        if from == self.config.id || !self.config.members.contains(&from) {
            return;
        }
        if let Some(progress) = self.progress.get_mut(&from) {
            progress.recent_active = true;
        }
        match msg {
            Message::PreVote {
                term,
                last_log_index,
                last_log_term,
            } => return self.handle_pre_vote(from, term, last_log_index, last_log_term),
            Message::PreVoteResponse { term, granted } => {
                return self.handle_pre_vote_response(from, term, granted);
            }
            _ => {}
        }
        let term = msg.term();
        let is_vote_request = matches!(msg, Message::RequestVote { .. });
        if term > self.term && is_vote_request && self.in_lease() {
            // Thesis §6.2/§9.6: a node following a live leader ignores disruptive candidates.
            return;
        }
        if term > self.term {
            let leader = match msg {
                Message::AppendEntries { .. } | Message::InstallSnapshot { .. } => Some(from),
                _ => None,
            };
            self.become_follower(term, leader);
        }
        if term < self.term {
            if matches!(
                msg,
                Message::AppendEntries { .. } | Message::InstallSnapshot { .. }
            ) {
                // Tell the stale leader about the newer term so that it steps down.
                self.send_now(from, self.reject(0));
            }
            return;
        }
        self.dispatch(from, msg);
    }

    fn dispatch(&mut self, from: NodeId, msg: Message) {
        match msg {
            Message::RequestVote {
                term,
                last_log_index,
                last_log_term,
            } => self.handle_request_vote(from, term, last_log_index, last_log_term),
            Message::RequestVoteResponse { term, granted } => {
                self.handle_request_vote_response(from, term, granted);
            }
            Message::AppendEntries {
                prev_log_index,
                prev_log_term,
                entries,
                leader_commit,
                ..
            } => self.handle_append_entries(
                from,
                prev_log_index,
                prev_log_term,
                entries,
                leader_commit,
            ),
            Message::AppendEntriesResponse {
                success,
                match_index,
                reject_hint,
                ..
            } => self.handle_append_entries_response(from, success, match_index, reject_hint),
            Message::InstallSnapshot { snapshot, .. } => {
                self.handle_install_snapshot(from, snapshot)
            }
            Message::InstallSnapshotResponse { last_index, .. } => {
                self.handle_install_snapshot_response(from, last_index);
            }
            Message::PreVote { .. } | Message::PreVoteResponse { .. } => {}
        }
    }

    fn reject(&self, reject_hint: Index) -> Message {
        Message::AppendEntriesResponse {
            term: self.term,
            success: false,
            match_index: 0,
            reject_hint,
        }
    }

    /// Appends `proposal` to the leader's log as a new entry of its term and sends it.
    /// Returns the entry's index.
    pub(super) fn append_proposal(&mut self, proposal: Proposal) -> Index {
        assert_eq!(self.role, Role::Leader, "only a leader appends proposals");
        let entry = Entry {
            term: self.term,
            index: self.log.last_index() + 1,
            proposal,
        };
        let index = entry.index;
        self.log.append(entry.clone());
        self.persist(Persist {
            entries: vec![entry],
            ..Persist::default()
        });
        self.broadcast_append();
        // A one-node cluster commits on `Input::Persisted`.
        index
    }

    /// Sends AppendEntries (or a snapshot) to every follower.
    pub(super) fn broadcast_append(&mut self) {
        for peer in self.peers() {
            self.send_append(peer);
        }
    }

    /// Sends `peer` the entries from its `next_index`, or the snapshot when they are
    /// compacted away.
    fn send_append(&mut self, peer: NodeId) {
        let Some(progress) = self.progress.get(&peer) else {
            return;
        };
        let prev_log_index = progress.next_index - 1;
        let Some(prev_log_term) = self.log.term_at(prev_log_index) else {
            if let Some(snapshot) = self.log.snapshot.clone() {
                let term = self.term;
                self.send_now(peer, Message::InstallSnapshot { term, snapshot });
            }
            return;
        };
        let entries = self
            .log
            .entries_from(prev_log_index + 1, self.config.append_entries_max)
            .to_vec();
        let msg = Message::AppendEntries {
            term: self.term,
            prev_log_index,
            prev_log_term,
            entries,
            leader_commit: self.commit_index,
        };
        self.send_now(peer, msg);
    }

    /// Accepts `from` as the leader of the current term and restarts the election timer.
    fn follow(&mut self, from: NodeId) {
        if self.role != Role::Follower || self.leader != Some(from) {
            self.become_follower(self.term, Some(from));
        } else {
            self.reset_election_timer();
        }
        self.leader_contact_ms = Some(self.now_ms);
    }

    /// AppendEntries at a follower (Raft paper Figure 2, receiver steps 2 to 5).
    fn handle_append_entries(
        &mut self,
        from: NodeId,
        prev_log_index: Index,
        prev_log_term: Term,
        mut entries: Vec<Entry>,
        leader_commit: Index,
    ) {
        self.follow(from);
        let last_new = prev_log_index + entries.len() as u64;
        // Entries at or below our commit index match the leader's (Leader Completeness):
        // skip them, so that a prefix compacted here needs no term check.
        let (prev_log_index, prev_log_term) = if prev_log_index < self.commit_index {
            entries.retain(|e| e.index > self.commit_index);
            let term = self.log.term_at(self.commit_index).unwrap_or(0);
            (self.commit_index, term)
        } else {
            (prev_log_index, prev_log_term)
        };
        if self.log.term_at(prev_log_index) != Some(prev_log_term) {
            let hint = if prev_log_index > self.log.last_index() {
                self.log.last_index()
            } else {
                self.log.first_index_of_term_at(prev_log_index)
            };
            self.send_after_persist(from, self.reject(hint));
            return;
        }
        self.append_entries_matching(entries);
        let commit = leader_commit.min(last_new);
        if commit > self.commit_index {
            self.commit_to(commit);
        }
        let msg = Message::AppendEntriesResponse {
            term: self.term,
            success: true,
            match_index: last_new.max(prev_log_index),
            reject_hint: 0,
        };
        self.send_after_persist(from, msg);
    }

    /// Appends the entries not already in the log, truncating a conflicting suffix first.
    fn append_entries_matching(&mut self, entries: Vec<Entry>) {
        let Some(first_new) = entries
            .iter()
            .position(|e| self.log.term_at(e.index) != Some(e.term))
        else {
            return;
        };
        let entries = entries[first_new..].to_vec();
        let from = entries[0].index;
        let truncate_from = if from <= self.log.last_index() {
            assert!(
                from > self.commit_index,
                "conflict at index {from} at or below commit index {}",
                self.commit_index
            );
            self.log.truncate_from(from);
            self.persisted_index = self.persisted_index.min(from - 1);
            Some(from)
        } else {
            None
        };
        for entry in &entries {
            self.log.append(entry.clone());
        }
        self.persist(Persist {
            truncate_from,
            entries,
            ..Persist::default()
        });
    }

    fn handle_append_entries_response(
        &mut self,
        from: NodeId,
        success: bool,
        match_index: Index,
        reject_hint: Index,
    ) {
        if self.role != Role::Leader {
            return;
        }
        let last_index = self.log.last_index();
        let Some(progress) = self.progress.get_mut(&from) else {
            return;
        };
        if success {
            progress.match_index = progress.match_index.max(match_index.min(last_index));
            progress.next_index = progress.next_index.max(progress.match_index + 1);
            self.maybe_commit();
            let progress = &self.progress[&from];
            if progress.next_index <= self.log.last_index() {
                self.send_append(from);
            }
        } else {
            let backed_off = progress.next_index.saturating_sub(1).min(reject_hint);
            progress.next_index = backed_off.max(progress.match_index + 1).max(1);
            self.send_append(from);
        }
    }

    /// InstallSnapshot at a follower (Raft paper §7).
    fn handle_install_snapshot(&mut self, from: NodeId, snapshot: Snapshot) {
        self.follow(from);
        let last_index = snapshot.last_index;
        if last_index > self.commit_index {
            let discarded = self.log.install(snapshot.clone());
            self.persisted_index = self.persisted_index.min(last_index);
            self.commit_index = last_index;
            self.table = snapshot.table.clone();
            self.rearm_all_leases();
            let truncate_from = discarded.then_some(last_index + 1);
            self.persist(Persist {
                snapshot: Some(snapshot),
                truncate_from,
                ..Persist::default()
            });
        }
        let term = self.term;
        self.send_after_persist(from, Message::InstallSnapshotResponse { term, last_index });
    }

    fn handle_install_snapshot_response(&mut self, from: NodeId, last_index: Index) {
        if self.role != Role::Leader {
            return;
        }
        let last = self.log.last_index();
        if let Some(progress) = self.progress.get_mut(&from) {
            progress.match_index = progress.match_index.max(last_index.min(last));
            progress.next_index = progress.next_index.max(progress.match_index + 1);
        }
        self.maybe_commit();
        if self
            .progress
            .get(&from)
            .is_some_and(|p| p.next_index <= last)
        {
            self.send_append(from);
        }
    }

    /// Commits the highest index a majority matched, if it is of the current term.
    pub(super) fn maybe_commit(&mut self) {
        let mut matches: Vec<Index> = self.progress.values().map(|p| p.match_index).collect();
        matches.push(self.persisted_index);
        let index = quorum::committed_index(&matches);
        if index > self.commit_index && self.log.term_at(index) == Some(self.term) {
            self.commit_to(index);
            // Followers learn the new commit index with the next append; send it now.
            self.broadcast_append();
        }
    }

    fn commit_to(&mut self, index: Index) {
        assert!(
            index <= self.log.last_index(),
            "commit {index} past last index {}",
            self.log.last_index()
        );
        self.commit_index = self.commit_index.max(index);
        self.apply_committed();
    }

    /// Applies every committed entry not yet applied, in log order.
    pub(super) fn apply_committed(&mut self) {
        while self.table.last_applied() < self.commit_index {
            let index = self.table.last_applied() + 1;
            let Some(entry) = self.log.entry(index).cloned() else {
                panic!(
                    "entry {index} to apply is missing (base {}, last {})",
                    self.log.base_index(),
                    self.log.last_index()
                );
            };
            self.apply_entry(entry);
        }
    }

    fn apply_entry(&mut self, entry: Entry) {
        let before = entry
            .proposal
            .command
            .key()
            .and_then(|key| self.table.holder(key).map(|h| (key.to_owned(), h.token)));
        let outcome = self.table.apply_proposal(entry.index, &entry.proposal);
        self.out.apply.push(Committed {
            index: entry.index,
            term: entry.term,
            proposal: entry.proposal.clone(),
            outcome: outcome.clone(),
        });
        self.after_apply_leases(&entry, before);
        self.answer_pending(&entry, &outcome);
        if self.role == Role::Leader
            && entry.index == self.noop_index
            && entry.proposal.command == Command::Noop
        {
            self.expire_locally_expired();
        }
    }

    /// Takes a snapshot and compacts the log once `snapshot_threshold_entries` entries were
    /// applied since the last one. Called at the start of a step, so that the snapshot is the
    /// first thing the step persists.
    pub(super) fn maybe_snapshot(&mut self) {
        let applied = self.table.last_applied();
        let threshold = self.config.snapshot_threshold_entries.max(1);
        if applied < self.log.base_index() + threshold {
            return;
        }
        let Some(last_term) = self.log.term_at(applied) else {
            return;
        };
        let snapshot = Snapshot {
            last_index: applied,
            last_term,
            table: self.table.clone(),
        };
        self.log.install(snapshot.clone());
        self.persist(Persist {
            snapshot: Some(snapshot),
            ..Persist::default()
        });
    }
}
