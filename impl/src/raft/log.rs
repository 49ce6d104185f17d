//! The in-memory log: the entries after the latest snapshot, with the snapshot as its base.
//!
//! Indexes are absolute. The base is the snapshot's `last_index` (0 without a snapshot), and
//! `entries[i]` has index `base + 1 + i`. `term_at(base)` is the snapshot's `last_term`, so
//! the consistency check of AppendEntries works across the compaction point (Raft paper §7).
//!
//! Compaction keeps a trailing window of entries at or below the base (`retained`,
//! `Config::snapshot_trailing_entries`), in memory only: they are committed, so they never
//! change, and a leader can send them to a follower a little behind instead of the whole
//! snapshot. A restarted node has none until it compacts again; storage keeps only the
//! entries after its snapshot.

use super::message::{Entry, Index, Snapshot, Term};

/// The log of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct RaftLog {
    /// The latest snapshot; the entries follow it.
    pub(crate) snapshot: Option<Snapshot>,
    /// The entries after the snapshot, contiguous.
    pub(crate) entries: Vec<Entry>,
    /// Up to `snapshot_trailing_entries` entries at or below the base, contiguous, ending at
    /// the base (empty, or its last entry has the base's index and term).
    pub(crate) retained: Vec<Entry>,
    /// A snapshot being received from the leader, in chunks.
    pub(crate) receiving: Option<SnapshotReceive>,
}

/// The part of a snapshot received so far: the bytes from offset 0 on, in order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SnapshotReceive {
    /// The term of the leader that sends it.
    pub(crate) term: Term,
    /// The snapshot's last index and term.
    pub(crate) last_index: Index,
    pub(crate) last_term: Term,
    /// The bytes received so far.
    pub(crate) bytes: Vec<u8>,
}

impl RaftLog {
    /// A log from what storage loaded.
    pub(crate) fn new(snapshot: Option<Snapshot>, entries: Vec<Entry>) -> Self {
        let log = RaftLog {
            snapshot,
            entries,
            retained: Vec::new(),
            receiving: None,
        };
        log.assert_contiguous();
        log
    }

    /// The index the entries follow (the snapshot's last index, or 0).
    pub(crate) fn base_index(&self) -> Index {
        self.snapshot.as_ref().map_or(0, |s| s.last_index)
    }

    /// The term at the base index.
    fn base_term(&self) -> Term {
        self.snapshot.as_ref().map_or(0, |s| s.last_term)
    }

    /// The index of the last entry (the base when there is none).
    pub(crate) fn last_index(&self) -> Index {
        self.entries.last().map_or(self.base_index(), |e| e.index)
    }

    /// The term of the last entry (the base term when there is none).
    pub(crate) fn last_term(&self) -> Term {
        self.entries.last().map_or(self.base_term(), |e| e.term)
    }

    /// The term of the entry at `index`, if it is known: `None` below the base or past the end.
    pub(crate) fn term_at(&self, index: Index) -> Option<Term> {
        if index == self.base_index() {
            return Some(self.base_term());
        }
        self.entry(index).map(|e| e.term)
    }

    /// The entry at `index`, if it is in memory (after the base, or in the trailing window).
    pub(crate) fn entry(&self, index: Index) -> Option<&Entry> {
        let base = self.base_index();
        if index <= base {
            let first = self.retained.first()?.index;
            return self
                .retained
                .get(usize::try_from(index.checked_sub(first)?).ok()?);
        }
        self.entries.get(usize::try_from(index - base - 1).ok()?)
    }

    /// The lowest index whose entry is in memory (the base + 1 without a trailing window).
    pub(crate) fn first_index(&self) -> Index {
        self.retained
            .first()
            .map_or(self.base_index() + 1, |e| e.index)
    }

    /// At most `max` entries from `from` on (none when `from` is past the end).
    ///
    /// # Panics
    ///
    /// Panics if `from` is below [`RaftLog::first_index`]: those entries are compacted.
    pub(crate) fn entries_from(&self, from: Index, max: usize) -> Vec<Entry> {
        let first = self.first_index();
        assert!(
            from >= first,
            "entries_from({from}) below the first index {first} in memory"
        );
        let base = self.base_index();
        let mut out = Vec::new();
        if from <= base {
            let start = usize::try_from(from - first).unwrap_or(usize::MAX);
            out.extend(self.retained.iter().skip(start).take(max).cloned());
        }
        let start = usize::try_from(from.saturating_sub(base + 1)).unwrap_or(usize::MAX);
        let start = start.min(self.entries.len());
        let end = start
            .saturating_add(max - out.len())
            .min(self.entries.len());
        out.extend_from_slice(&self.entries[start..end]);
        out
    }

    /// Appends `entry`, which must follow the last entry.
    ///
    /// # Panics
    ///
    /// Panics if the entry does not follow the last one or has a lower term.
    pub(crate) fn append(&mut self, entry: Entry) {
        assert_eq!(
            entry.index,
            self.last_index() + 1,
            "append of index {} after last index {}",
            entry.index,
            self.last_index()
        );
        assert!(
            entry.term >= self.last_term(),
            "append of term {} after last term {}",
            entry.term,
            self.last_term()
        );
        self.entries.push(entry);
    }

    /// Drops every entry with index >= `from`.
    pub(crate) fn truncate_from(&mut self, from: Index) {
        self.entries.retain(|e| e.index < from);
    }

    /// The highest index below `before`, and not below `floor`, whose term is at most
    /// `term`: where a leader whose entry at `before` has term `term` may match this log
    /// (etcd's `findConflictByTerm`). Entries of a higher term cannot match the leader's,
    /// whose terms up to `before` are at most `term`.
    pub(crate) fn last_index_of_term_at_most(
        &self,
        before: Index,
        term: Term,
        floor: Index,
    ) -> Index {
        let floor = floor.max(self.base_index());
        let mut index = before.saturating_sub(1).max(floor);
        while index > floor && self.term_at(index).is_none_or(|t| t > term) {
            index -= 1;
        }
        index
    }

    /// Replaces the prefix up to `snapshot.last_index` by `snapshot` (local compaction, or an
    /// installed snapshot). Keeps the suffix when the log holds the snapshot's last entry with
    /// its term (Raft paper §7), and then up to `trailing` entries at or below the snapshot
    /// in memory; otherwise discards the whole log. Returns whether the suffix was discarded.
    pub(crate) fn install(&mut self, snapshot: Snapshot, trailing: u64) -> bool {
        let keep = self.term_at(snapshot.last_index) == Some(snapshot.last_term);
        let last = snapshot.last_index;
        if keep {
            let moved = self.entries.iter().take_while(|e| e.index <= last).count();
            self.retained.extend(self.entries.drain(..moved));
            self.retained.retain(|e| e.index <= last);
            let excess = self
                .retained
                .len()
                .saturating_sub(usize::try_from(trailing).unwrap_or(usize::MAX));
            self.retained.drain(..excess);
        } else {
            self.entries.clear();
            self.retained.clear();
        }
        if self
            .receiving
            .as_ref()
            .is_some_and(|r| r.last_index <= last)
        {
            self.receiving = None;
        }
        self.snapshot = Some(snapshot);
        self.assert_contiguous();
        !keep
    }

    fn assert_contiguous(&self) {
        if let (Some(last), Some(snapshot)) = (self.retained.last(), &self.snapshot) {
            assert_eq!(
                (last.index, last.term),
                (snapshot.last_index, snapshot.last_term),
                "the trailing window does not end at the snapshot"
            );
        }
        for pair in self.retained.windows(2) {
            assert_eq!(
                pair[1].index,
                pair[0].index + 1,
                "trailing window not contiguous"
            );
        }
        let base = self.base_index();
        for (i, e) in self.entries.iter().enumerate() {
            let expected = base + 1 + i as u64;
            assert_eq!(
                e.index, expected,
                "log not contiguous: entry {i} has index {} not {expected}",
                e.index
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Command, LockTable, Proposal};

    fn entry(term: Term, index: Index) -> Entry {
        Entry {
            term,
            index,
            proposal: Proposal::system(Command::Noop),
        }
    }

    fn log_of(terms: &[Term]) -> RaftLog {
        let entries = terms.iter().zip(1..).map(|(t, i)| entry(*t, i)).collect();
        RaftLog::new(None, entries)
    }

    #[test]
    fn term_at_reads_through_the_snapshot_base() {
        // Raft paper §7: the snapshot keeps the last included index and term.
        let mut log = log_of(&[1, 1, 2, 2, 3]);
        let discarded = log.install(
            Snapshot {
                last_index: 3,
                last_term: 2,
                table: LockTable::new(),
            },
            0,
        );
        assert!(!discarded);
        assert_eq!(log.term_at(3), Some(2));
        assert_eq!(log.term_at(2), None);
        assert_eq!(log.term_at(5), Some(3));
        assert_eq!(log.last_index(), 5);
        assert_eq!(log.entries_from(4, 10).len(), 2);
    }

    #[test]
    fn install_of_a_conflicting_snapshot_discards_the_log() {
        // Raft paper §7: "If existing log entry has same index and term as snapshot's last
        // included entry, retain log entries following it" -- otherwise discard the log.
        let mut log = log_of(&[1, 1, 2]);
        let discarded = log.install(
            Snapshot {
                last_index: 2,
                last_term: 4,
                table: LockTable::new(),
            },
            5,
        );
        assert!(discarded);
        assert!(log.retained.is_empty(), "a conflicting log keeps no window");
        assert_eq!(log.last_index(), 2);
        assert_eq!(log.last_term(), 4);
    }

    #[test]
    fn compaction_keeps_a_trailing_window_that_reads_like_the_log() {
        // Issue 27: a follower a little behind gets entries, not a snapshot; the window holds
        // the last `trailing` entries at or below the snapshot.
        let mut log = log_of(&[1, 1, 2, 2, 3]);
        log.install(
            Snapshot {
                last_index: 4,
                last_term: 2,
                table: LockTable::new(),
            },
            2,
        );
        assert_eq!(log.first_index(), 3);
        assert_eq!((log.term_at(2), log.term_at(3)), (None, Some(2)));
        let from_three: Vec<Index> = log.entries_from(3, 10).iter().map(|e| e.index).collect();
        assert_eq!(from_three, vec![3, 4, 5]);
        assert_eq!(log.entries_from(4, 1).len(), 1);
    }

    #[test]
    fn reject_hint_skips_every_entry_of_a_higher_term() {
        // etcd raft, findConflictByTerm: back off past whole terms at once.
        let log = log_of(&[1, 2, 2, 4, 4]);
        assert_eq!(log.last_index_of_term_at_most(5, 3, 0), 3);
        assert_eq!(log.last_index_of_term_at_most(5, 1, 0), 1);
        assert_eq!(log.last_index_of_term_at_most(5, 0, 0), 0);
        assert_eq!(log.last_index_of_term_at_most(5, 1, 2), 2);
    }

    #[test]
    fn without_a_trailing_window_the_first_index_follows_the_base() {
        // The module doc: entries at or below the base are in memory only in the trailing
        // window; without one, the lowest index in memory is the one after the snapshot (the
        // bound below which `entries_from` panics).
        let mut log = log_of(&[1, 1, 2, 2, 3]);

        log.install(
            Snapshot {
                last_index: 3,
                last_term: 2,
                table: LockTable::new(),
            },
            0,
        );

        assert_eq!(log.first_index(), 4);
        let from_first: Vec<Index> = log.entries_from(4, 10).iter().map(|e| e.index).collect();
        assert_eq!(from_first, vec![4, 5]);
    }

    #[test]
    fn compaction_keeps_a_newer_snapshot_being_received_and_drops_one_it_covers() {
        // Raft paper §7: a snapshot at or below the new base is no longer needed; one past
        // it is still the leader's transfer in progress, and dropping it would restart that
        // transfer from byte 0.
        let receiving = |last_index| SnapshotReceive {
            term: 3,
            last_index,
            last_term: 3,
            bytes: vec![1, 2, 3],
        };
        let snapshot_at = |last_index, last_term| Snapshot {
            last_index,
            last_term,
            table: LockTable::new(),
        };
        let mut newer = log_of(&[1, 1, 2, 2, 3]);
        newer.receiving = Some(receiving(8));
        let mut covered = log_of(&[1, 1, 2, 2, 3]);
        covered.receiving = Some(receiving(3));

        newer.install(snapshot_at(3, 2), 0);
        covered.install(snapshot_at(3, 2), 0);

        assert_eq!(newer.receiving, Some(receiving(8)));
        assert_eq!(covered.receiving, None);
    }

    #[test]
    #[should_panic(expected = "log not contiguous")]
    fn a_loaded_log_with_a_gap_is_refused() {
        // `Node::new`'s `# Panics`: a log whose indexes skip one is a broken storage layer,
        // never a state to run from.
        RaftLog::new(None, vec![entry(1, 1), entry(1, 3)]);
    }
}
