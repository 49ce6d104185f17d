//! What [`DataDir::open`](super::DataDir::open) does with the files it found: load the
//! newest segment on the snapshot, replay its records through [`Durable::apply`] (each
//! checked as a persist would be), re-apply a snapshot newer than the segment, and, only
//! once all of it is verified, cut a torn tail and remove the leftovers of earlier rewrites.

use std::path::Path;

use super::checks::check_persist;
use super::decoding::{Frame, check_file_header, read_frame};
use super::encoding::Record;
use super::files::{Listing, cut_torn_tail, io_error, remove_file_if_exists, sync_dir, tmp_name};
use super::{
    FILE_HEADER_BYTES, LOG_DIR, META_FILE, Recovered, SEGMENT_MAGIC, SNAPSHOT_FILE, StorageError,
};
use crate::raft::{Durable, Persist, Snapshot};
use crate::sys::fs;

/// A torn tail found by [`load_segment`].
struct Torn {
    offset: u64,
    reason: String,
}

/// What [`load_segment`] found.
pub(super) struct Loaded {
    pub(super) durable: Durable,
    file_bytes: u64,
    pub(super) valid_bytes: u64,
    pub(super) checkpoint_bytes: u64,
    torn: Option<Torn>,
    pub(super) snapshot_reapplied: bool,
}

/// Verifies and replays one segment on top of `snapshot` (the snapshot file's content).
pub(super) fn load_segment(
    path: &Path,
    dir: &Path,
    snapshot: Option<Snapshot>,
) -> Result<Loaded, StorageError> {
    let bytes = fs::read(path).map_err(io_error(path, "read"))?;
    check_file_header(path, &bytes, SEGMENT_MAGIC)?;
    let (mut durable, checkpoint_bytes, base_matches) =
        load_checkpoint(path, dir, &bytes, snapshot.as_ref())?;
    let (valid_bytes, torn) = replay_records(path, &bytes, checkpoint_bytes, &mut durable)?;
    let snapshot_reapplied = !base_matches && snapshot.is_some();
    if let Some(snapshot) = snapshot.filter(|_| snapshot_reapplied) {
        // As the core installs a snapshot (Raft paper §7): the log after it is kept only when
        // the log has the snapshot's last entry; otherwise the persist truncated it too.
        let s = snapshot.last_index;
        let term_at_s = durable
            .entries
            .iter()
            .find(|e| e.index == s)
            .map(|e| e.term)
            .or(durable
                .snapshot
                .as_ref()
                .filter(|b| b.last_index == s)
                .map(|b| b.last_term));
        let keep = term_at_s == Some(snapshot.last_term);
        let last_term = snapshot.last_term;
        let install = Persist {
            truncate_from: (!keep).then_some(s.saturating_add(1)),
            snapshot: Some(snapshot),
            ..Persist::default()
        };
        check_persist(&durable, &install).map_err(|reason| StorageError::Corrupt {
            path: dir.join(SNAPSHOT_FILE),
            offset: FILE_HEADER_BYTES as u64,
            reason: format!("the snapshot does not fit the log: {reason}"),
        })?;
        durable.apply(&install);
        // The persist under way carried the term the snapshot came in (an InstallSnapshot
        // from the leader of a later term), and that term went with the segment the crash
        // lost: the current term is never below the log's last term (Raft paper Figure 2).
        // No vote was given in a term above the durable one (a vote is durable before it is
        // sent), so the raised term has none.
        if durable.hard_state.term < last_term {
            durable.hard_state.term = last_term;
            durable.hard_state.voted_for = None;
        }
    }
    // Replay already refused every record that would break this; it stays as the last word.
    if durable.hard_state.commit > durable.last_index() {
        return Err(StorageError::Corrupt {
            path: path.to_path_buf(),
            offset: valid_bytes,
            reason: format!(
                "the log ends at index {} before the commit index {}",
                durable.last_index(),
                durable.hard_state.commit
            ),
        });
    }
    Ok(Loaded {
        durable,
        file_bytes: bytes.len() as u64,
        valid_bytes,
        checkpoint_bytes,
        torn,
        snapshot_reapplied,
    })
}

/// Reads the segment's checkpoint record. Returns the state it holds, on the snapshot it was
/// written after, the offset after it, and whether `snapshot` is that snapshot.
fn load_checkpoint(
    path: &Path,
    dir: &Path,
    bytes: &[u8],
    snapshot: Option<&Snapshot>,
) -> Result<(Durable, u64, bool), StorageError> {
    let corrupt = |reason: String| StorageError::Corrupt {
        path: path.to_path_buf(),
        offset: FILE_HEADER_BYTES as u64,
        reason,
    };
    // The checkpoint is written whole and renamed into place: a torn one is corruption.
    let (payload, next) = match read_frame(bytes, FILE_HEADER_BYTES) {
        Frame::Whole { payload, next } => (payload, next),
        Frame::Torn { reason } | Frame::Corrupt { reason } => return Err(corrupt(reason)),
    };
    let Ok(Record::Checkpoint {
        base_index,
        base_term,
        hard_state,
        entries,
    }) = serde_json::from_slice(payload)
    else {
        return Err(corrupt("the first record is not a checkpoint".to_string()));
    };
    let base = (base_index, base_term);
    if snapshot.is_none() && base != (0, 0) {
        return Err(StorageError::Corrupt {
            path: dir.join(SNAPSHOT_FILE),
            offset: 0,
            reason: format!(
                "missing, while {} starts after a snapshot at index {base_index}",
                path.display()
            ),
        });
    }
    let base_matches = snapshot.is_some_and(|s| (s.last_index, s.last_term) == base);
    // Replay on the snapshot the segment was written after: the snapshot file itself, or,
    // when a newer one replaced it, a stand-in with the same index and term.
    let base_snapshot = if base_matches {
        snapshot.cloned()
    } else {
        (base != (0, 0)).then(|| Snapshot {
            last_index: base_index,
            last_term: base_term,
            ..Snapshot::default()
        })
    };
    let mut durable = Durable {
        snapshot: base_snapshot,
        ..Durable::default()
    };
    let checkpoint = Persist {
        entries,
        hard_state: Some(hard_state),
        ..Persist::default()
    };
    check_persist(&durable, &checkpoint)
        .map_err(|reason| corrupt(format!("bad checkpoint: {reason}")))?;
    durable.apply(&checkpoint);
    Ok((durable, next as u64, base_matches))
}

/// Replays the `Ops` records from byte `start` on. Returns where the whole records end and
/// the torn tail after them, if any.
fn replay_records(
    path: &Path,
    bytes: &[u8],
    start: u64,
    durable: &mut Durable,
) -> Result<(u64, Option<Torn>), StorageError> {
    let corrupt = |offset: usize, reason: String| StorageError::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason,
    };
    let mut at = usize::try_from(start).expect("a segment offset fits in usize");
    while at < bytes.len() {
        let (payload, next) = match read_frame(bytes, at) {
            Frame::Whole { payload, next } => (payload, next),
            // Zeros to the end: space written ahead, or a record none of whose sectors
            // reached the disk. Nothing was lost that was acknowledged, and the next record
            // goes over them: kept, not cut, not reported (module doc, "Space written ahead").
            Frame::Torn { .. } if bytes[at..].iter().all(|&b| b == 0) => {
                return Ok((at as u64, None));
            }
            Frame::Torn { reason } => {
                let torn = Torn {
                    offset: at as u64,
                    reason,
                };
                return Ok((at as u64, Some(torn)));
            }
            Frame::Corrupt { reason } => return Err(corrupt(at, reason)),
        };
        let persist = match serde_json::from_slice(payload) {
            Ok(Record::Ops {
                truncate_from,
                entries,
                hard_state,
            }) => Persist {
                snapshot: None,
                truncate_from,
                entries,
                hard_state,
            },
            Ok(Record::Checkpoint { .. }) => {
                return Err(corrupt(
                    at,
                    "a checkpoint after the first record".to_string(),
                ));
            }
            Err(e) => return Err(corrupt(at, format!("cannot decode the record: {e}"))),
        };
        check_persist(durable, &persist).map_err(|reason| {
            corrupt(at, format!("the record does not follow the log: {reason}"))
        })?;
        durable.apply(&persist);
        at = next;
    }
    Ok((at as u64, None))
}

/// Cuts the torn tail of the verified newest segment and removes leftover files.
pub(super) fn repair(
    dir: &Path,
    listing: &Listing,
    segment_path: &Path,
    loaded: &Loaded,
) -> Result<Recovered, StorageError> {
    let mut recovered = Recovered::default();
    if let Some(torn) = &loaded.torn {
        crate::probe!("torn-tail-cut");
        cut_torn_tail(segment_path, loaded.valid_bytes)?;
        recovered.truncated_bytes = loaded.file_bytes - loaded.valid_bytes;
        recovered.torn_tail = Some(format!(
            "{} at byte {}: {}; cut {} bytes",
            segment_path.display(),
            torn.offset,
            torn.reason,
            recovered.truncated_bytes
        ));
    }
    remove_file_if_exists(&dir.join(tmp_name(META_FILE)), &mut recovered)?;
    remove_file_if_exists(&dir.join(tmp_name(SNAPSHOT_FILE)), &mut recovered)?;
    let superseded = &listing.segments[..listing.segments.len().saturating_sub(1)];
    for (_, old) in superseded {
        remove_file_if_exists(old, &mut recovered)?;
    }
    for tmp in &listing.tmp_files {
        remove_file_if_exists(tmp, &mut recovered)?;
    }
    if !recovered.removed_files.is_empty() {
        sync_dir(dir)?;
        sync_dir(&dir.join(LOG_DIR))?;
    }
    Ok(recovered)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::super::encoding::{encode_payload, file_header, push_frame};
    use super::super::files::{segment_name, write_file_atomic};
    use super::super::test_support::{entry, snapshot};
    use super::super::{DataDir, SNAPSHOT_MAGIC, SyncMode};
    use super::*;
    use crate::raft::HardState;

    #[test]
    fn snapshot_newer_than_the_segment_is_applied_and_the_segment_rewritten() {
        // Module docs, "Crash points": a crash between the snapshot's rename and the new
        // segment's leaves a snapshot newer than the log; recovery applies it, as
        // `Durable::apply` does for the snapshot part of a persist.
        let tmp = tempfile::tempdir().expect("tempdir");
        let (mut dir, _) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("open");
        let persist = Persist {
            entries: (1..=10).map(|i| entry(2, i)).collect(),
            hard_state: Some(HardState {
                term: 2,
                voted_for: None,
                commit: 6,
            }),
            ..Persist::default()
        };
        dir.persist(&persist).expect("persist");
        let old_segment = dir.segment_path().to_path_buf();
        drop(dir);
        // The first step of a snapshot persist, alone.
        let snap = snapshot(5, 2);
        let mut payload = Vec::new();
        encode_payload(&mut payload, &snap).expect("encode");
        let mut bytes = file_header(SNAPSHOT_MAGIC);
        push_frame(&mut bytes, &payload);
        write_file_atomic(tmp.path(), SNAPSHOT_FILE, &bytes, SyncMode::Fsync).expect("write");
        let (dir, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");
        let mut expected = Durable::default();
        expected.apply(&persist);
        expected.apply(&Persist {
            snapshot: Some(snap),
            ..Persist::default()
        });
        assert_eq!(loaded, expected);
        assert!(dir.recovered().snapshot_reapplied);
        assert_ne!(dir.segment_path(), old_segment, "the segment was rewritten");
        drop(dir);
        let (again, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");
        assert_eq!(loaded, expected);
        assert!(again.recovered().is_clean(), "{:?}", again.recovered());
    }

    #[test]
    fn snapshot_conflicting_with_the_older_log_drops_the_log_after_it_on_reapply() {
        // Raft paper §7: a log is kept after a snapshot only when it has the snapshot's last
        // entry; the core's persist then carries `truncate_from`, which a crash between the
        // two renames loses, so recovery applies the same rule.
        let tmp = tempfile::tempdir().expect("tempdir");
        let (mut dir, _) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("open");
        let persist = Persist {
            entries: (1..=10).map(|i| entry(2, i)).collect(),
            hard_state: Some(HardState {
                term: 3,
                voted_for: None,
                commit: 4,
            }),
            ..Persist::default()
        };
        dir.persist(&persist).expect("persist");
        drop(dir);
        let snap = snapshot(5, 3);
        let mut payload = Vec::new();
        encode_payload(&mut payload, &snap).expect("encode");
        let mut bytes = file_header(SNAPSHOT_MAGIC);
        push_frame(&mut bytes, &payload);
        write_file_atomic(tmp.path(), SNAPSHOT_FILE, &bytes, SyncMode::Fsync).expect("write");

        let (dir, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");

        assert!(dir.recovered().snapshot_reapplied);
        assert_eq!(loaded.snapshot, Some(snap));
        assert!(loaded.entries.is_empty(), "{:?}", loaded.entries);
        assert_eq!(loaded.hard_state.commit, 4);
    }

    #[test]
    fn a_snapshot_reapplied_after_a_crash_never_leaves_the_term_below_its_last_term() {
        // Module docs, "Crash points", and Raft paper Figure 2 (currentTerm is at least the
        // term of every entry in the log). A follower behind in term gets a one-chunk
        // snapshot from the leader of a later term: the persist carries the snapshot and the
        // new term together, and storage writes the snapshot file before the segment that
        // holds the term. A crash between the two reloaded the snapshot with the old term,
        // a node whose log ends in a term above its current term: the node's invariant check
        // stops it at restart, and in a release build it followed (and acknowledged its
        // whole snapshot to) a stale leader of a term between the two.
        use crate::lock::{Command, LockTable};
        use crate::raft::{Config, Input, Message, Node};
        let tmp = tempfile::tempdir().expect("tempdir");
        let (dir, durable) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("open");
        let config = Config::new(2, vec![1, 2, 3]);
        let (mut follower, _) = Node::new(config.clone(), durable, 0);
        let mut table = LockTable::new();
        table.apply(1, &Command::Noop);
        table.apply(
            2,
            &Command::Grant {
                key: "a".into(),
                lease_ms: 1_000,
            },
        );
        let sent = Snapshot {
            last_index: 2,
            last_term: 3,
            table,
        };
        let chunk = Message::InstallSnapshot {
            term: 3,
            last_index: 2,
            last_term: 3,
            offset: 0,
            data: serde_json::to_vec(&sent).expect("encode"),
            done: true,
        };
        let out = follower.step(Input::Message {
            from: 1,
            msg: chunk,
        });
        let persist = out.persist.expect("the install persists");
        assert_eq!(persist.hard_state.as_ref().map(|h| h.term), Some(3));
        let snap = persist
            .snapshot
            .clone()
            .expect("the snapshot is in the persist");

        // The crash: the snapshot file is in place (persist_with_snapshot's first write),
        // the segment with the new term is not.
        DataDir::write_snapshot_file(tmp.path(), &snap, SyncMode::Fsync).expect("write");
        drop(dir);
        let (dir, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");

        assert!(dir.recovered().snapshot_reapplied);
        assert!(
            loaded.hard_state.term >= loaded.last_term(),
            "recovered term {} below the log's last term {}",
            loaded.hard_state.term,
            loaded.last_term()
        );
        // The node restarts on it (its invariants are checked in debug builds).
        let (restarted, _) = Node::new(config, loaded, 0);
        assert!(restarted.status().term >= 3, "{:?}", restarted.status());
    }

    #[test]
    fn leftover_tmp_files_and_old_segments_are_removed() {
        // Module docs, "Crash points": leftovers of a rewrite are removed, and reported.
        let tmp = tempfile::tempdir().expect("tempdir");
        let (dir, _) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("open");
        let current = dir.segment_path().to_path_buf();
        drop(dir);
        let log_dir = tmp.path().join(LOG_DIR);
        let older = log_dir.join(segment_name(0));
        fs::copy(&current, &older).expect("copy");
        let stray = log_dir.join(tmp_name(&segment_name(7)));
        fs::write(&stray, b"half").expect("write");
        let (dir, _) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");
        let mut removed = dir.recovered().removed_files.clone();
        removed.sort();
        let mut expected = vec![older.clone(), stray.clone()];
        expected.sort();
        assert_eq!(removed, expected);
        assert!(!older.exists() && !stray.exists() && current.exists());
    }
}
