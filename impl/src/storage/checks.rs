//! The rules a persist must keep, checked on indices before anything is written (a refused
//! persist writes nothing) and again by recovery on every record it replays (a record that
//! breaks one is corruption): entries continue the log, terms never decrease, no step drops
//! a committed entry, the term never goes back and a vote never changes within a term.

use crate::raft::{Durable, HardState, Index, Persist, Term};

/// Checks that applying `persist` to `state` (as [`Durable::apply`] does) keeps every rule
/// that recovery verifies; computes on indices only, without copying the log.
pub(crate) fn check_persist(state: &Durable, persist: &Persist) -> Result<(), String> {
    let commit = state.hard_state.commit;
    let (mut base_index, mut base_term) = state
        .snapshot
        .as_ref()
        .map_or((0, 0), |s| (s.last_index, s.last_term));
    // The log after each step: (first index, last index), or None when empty.
    let mut range = state
        .entries
        .first()
        .zip(state.entries.last())
        .map(|(first, last)| (first.index, last.index));
    if let Some(snapshot) = &persist.snapshot {
        let s = snapshot.last_index;
        range = range.and_then(|(first, last)| {
            // `then`, not `then_some`: `s + 1` only where the log goes past `s`.
            (last > s && first <= s.saturating_add(1)).then(|| (s + 1, last))
        });
        (base_index, base_term) = (s, snapshot.last_term);
        let last = range.map_or(base_index, |r| r.1);
        if commit > last {
            return Err(format!(
                "the snapshot at index {s} leaves the log ending at {last}, before the commit index {commit}"
            ));
        }
    }
    if let Some(from) = persist.truncate_from {
        range = range.and_then(|(first, last)| (from > first).then(|| (first, last.min(from - 1))));
        let last = range.map_or(base_index, |r| r.1);
        if commit > last {
            return Err(format!(
                "truncating from index {from} drops committed entries (commit index {commit})"
            ));
        }
    }
    // Checked after the truncation, which may drop a suffix that conflicts with the snapshot
    // (the core's InstallSnapshot persist: the snapshot, then `truncate_from` after it).
    if persist.snapshot.is_some()
        && let Some((first, _)) = range
        && term_at(state, first) < base_term
    {
        return Err(format!(
            "the snapshot at index {base_index} has term {base_term}, above the term {} of \
             the entry after it",
            term_at(state, first)
        ));
    }
    let mut last_index = range.map_or(base_index, |r| r.1);
    let mut last_term = match range {
        Some((_, last)) => term_at(state, last),
        None => base_term,
    };
    for entry in &persist.entries {
        if last_index.checked_add(1) != Some(entry.index) {
            return Err(format!(
                "entry index {} does not follow the last index {last_index}",
                entry.index
            ));
        }
        if entry.term < last_term {
            return Err(format!(
                "entry {} has term {}, below the previous term {last_term}",
                entry.index, entry.term
            ));
        }
        (last_index, last_term) = (entry.index, entry.term);
    }
    if let Some(hard_state) = &persist.hard_state {
        check_hard_state(&state.hard_state, hard_state, last_index)?;
    }
    Ok(())
}

fn check_hard_state(old: &HardState, new: &HardState, last_index: Index) -> Result<(), String> {
    if new.term < old.term {
        return Err(format!(
            "the term goes back from {} to {}",
            old.term, new.term
        ));
    }
    if new.term == old.term && old.voted_for.is_some() && new.voted_for != old.voted_for {
        return Err(format!(
            "the vote of term {} changes from {:?} to {:?}",
            new.term, old.voted_for, new.voted_for
        ));
    }
    if new.commit > last_index {
        return Err(format!(
            "the commit index {} is beyond the last index {last_index}",
            new.commit
        ));
    }
    Ok(())
}

/// The term of the entry at `index`, which is in `state.entries` (they are contiguous).
fn term_at(state: &Durable, index: Index) -> Term {
    let first = state.entries.first().map_or(0, |e| e.index);
    let position = usize::try_from(index - first).expect("a log position fits in usize");
    let entry = &state.entries[position];
    assert_eq!(entry.index, index, "the in-memory log is contiguous");
    entry.term
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::test_support::entry;

    #[test]
    fn a_snapshot_at_the_last_possible_index_is_checked_without_overflow() {
        // Found by `raft::hostile_test` (seed 20110): a node that applied an entry at
        // u64::MAX snapshots there, and the check computed the index after the snapshot
        // (`s + 1`, in an eager `then_some`) even where the log ends before it.
        let mut state = Durable::default();
        state.apply(&Persist {
            entries: vec![entry(1, 1)],
            ..Persist::default()
        });
        let snapshot = Persist {
            snapshot: Some(crate::raft::Snapshot {
                last_index: u64::MAX,
                last_term: 1,
                ..crate::raft::Snapshot::default()
            }),
            ..Persist::default()
        };
        assert_eq!(check_persist(&state, &snapshot), Ok(()));
    }

    #[test]
    fn a_persist_that_drops_or_skips_entries_is_refused() {
        // Module docs, "Checks before writing": entries continue the log, and no truncation
        // drops a committed entry.
        let mut state = Durable::default();
        state.apply(&Persist {
            entries: (1..=3).map(|i| entry(1, i)).collect(),
            hard_state: Some(HardState {
                term: 1,
                voted_for: None,
                commit: 2,
            }),
            ..Persist::default()
        });
        let skips = Persist {
            entries: vec![entry(1, 5)],
            ..Persist::default()
        };
        let drops_committed = Persist {
            truncate_from: Some(2),
            ..Persist::default()
        };
        let follows = Persist {
            truncate_from: Some(3),
            entries: vec![entry(2, 3), entry(2, 4)],
            ..Persist::default()
        };

        let verdicts = [&skips, &drops_committed, &follows].map(|p| check_persist(&state, p));

        assert!(
            verdicts[0]
                .as_ref()
                .is_err_and(|e| e.contains("does not follow"))
        );
        assert!(
            verdicts[1]
                .as_ref()
                .is_err_and(|e| e.contains("drops committed"))
        );
        assert_eq!(verdicts[2], Ok(()));
    }
}
