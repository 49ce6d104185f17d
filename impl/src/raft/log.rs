//! The in-memory log: the entries after the latest snapshot, with the snapshot as its base.
//!
//! Indexes are absolute. The base is the snapshot's `last_index` (0 without a snapshot), and
//! `entries[i]` has index `base + 1 + i`. `term_at(base)` is the snapshot's `last_term`, so
//! the consistency check of AppendEntries works across the compaction point (Raft paper §7).

use super::message::{Entry, Index, Snapshot, Term};

/// The log of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct RaftLog {
    /// The latest snapshot; the entries follow it.
    pub(crate) snapshot: Option<Snapshot>,
    /// The entries after the snapshot, contiguous.
    pub(crate) entries: Vec<Entry>,
}

impl RaftLog {
    /// A log from what storage loaded.
    pub(crate) fn new(snapshot: Option<Snapshot>, entries: Vec<Entry>) -> Self {
        let log = RaftLog { snapshot, entries };
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

    /// The entry at `index`, if it is in memory.
    pub(crate) fn entry(&self, index: Index) -> Option<&Entry> {
        let base = self.base_index();
        if index <= base {
            return None;
        }
        self.entries.get(usize::try_from(index - base - 1).ok()?)
    }

    /// At most `max` entries from `from` on (an empty slice when `from` is past the end).
    ///
    /// # Panics
    ///
    /// Panics if `from` is at or below the base: those entries are compacted.
    pub(crate) fn entries_from(&self, from: Index, max: usize) -> &[Entry] {
        let base = self.base_index();
        assert!(
            from > base,
            "entries_from({from}) at or below the base {base}"
        );
        let start = usize::try_from(from - base - 1).unwrap_or(usize::MAX);
        let start = start.min(self.entries.len());
        let end = start.saturating_add(max).min(self.entries.len());
        &self.entries[start..end]
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
    /// its term (Raft paper §7); otherwise discards the whole log. Returns whether the suffix
    /// was discarded.
    pub(crate) fn install(&mut self, snapshot: Snapshot) -> bool {
        let keep = self.term_at(snapshot.last_index) == Some(snapshot.last_term);
        let last = snapshot.last_index;
        if keep {
            self.entries.retain(|e| e.index > last);
        } else {
            self.entries.clear();
        }
        self.snapshot = Some(snapshot);
        self.assert_contiguous();
        !keep
    }

    fn assert_contiguous(&self) {
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
        let discarded = log.install(Snapshot {
            last_index: 3,
            last_term: 2,
            table: LockTable::new(),
        });
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
        let discarded = log.install(Snapshot {
            last_index: 2,
            last_term: 4,
            table: LockTable::new(),
        });
        assert!(discarded);
        assert_eq!(log.last_index(), 2);
        assert_eq!(log.last_term(), 4);
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
}
