//! Recovery of a data dir from the outside: restarts, torn tails, corruption, refusals and
//! the `no-fsync` mutant's buffer. DESIGN.md, "Durability": a node restarted from its data
//! dir keeps its log; a data dir that fails its checksums is refused with a clear error,
//! never silently truncated past committed data.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use lockd::lock::{Command, LockTable, Proposal};
use lockd::raft::{Durable, Entry, HardState, Index, Persist, Snapshot, Term};
use lockd::storage::{DataDir, StorageError, SyncMode};

fn entry(term: Term, index: Index) -> Entry {
    Entry {
        term,
        index,
        proposal: Proposal::system(Command::Grant {
            key: format!("key-{index}"),
            lease_ms: 1000,
        }),
    }
}

fn hard_state(term: Term, voted_for: Option<u64>, commit: Index) -> HardState {
    HardState {
        term,
        voted_for,
        commit,
    }
}

fn append(entries: std::ops::RangeInclusive<Index>, term: Term, hs: Option<HardState>) -> Persist {
    Persist {
        entries: entries.map(|i| entry(term, i)).collect(),
        hard_state: hs,
        ..Persist::default()
    }
}

fn snapshot_at(last_index: Index, last_term: Term) -> Snapshot {
    let mut table = LockTable::new();
    table.apply(
        last_index,
        &Command::Grant {
            key: "snap".to_string(),
            lease_ms: 70,
        },
    );
    Snapshot {
        last_index,
        last_term,
        table,
    }
}

/// Persists each of `persists` in a new dir at `path`; returns the model and, for each
/// persist, the segment length before it (the byte offset of its record).
fn build(path: &Path, persists: &[Persist]) -> (Durable, Vec<u64>, PathBuf) {
    let (mut dir, _) = DataDir::open(path, SyncMode::Fsync).expect("open a new dir");
    let mut model = Durable::default();
    let mut offsets = Vec::new();
    for persist in persists {
        offsets.push(file_len(dir.segment_path()));
        dir.persist(persist).expect("persist");
        model.apply(persist);
    }
    offsets.push(file_len(dir.segment_path()));
    let segment = dir.segment_path().to_path_buf();
    (model, offsets, segment)
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).expect("stat").len()
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).expect("read");
    let at = usize::try_from(offset).expect("offset fits");
    bytes[at] ^= 0x20;
    fs::write(path, bytes).expect("write");
}

fn open_error(path: &Path) -> StorageError {
    match DataDir::open(path, SyncMode::Fsync) {
        Ok(_) => panic!("{} must be refused", path.display()),
        Err(e) => e,
    }
}

/// A record header claiming 100 payload bytes (its header checksum right), and only 30 of
/// them: 42 bytes of a record torn at a crash.
fn torn_record() -> Vec<u8> {
    let mut header = Vec::new();
    header.extend_from_slice(&100u32.to_le_bytes());
    header.extend_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
    let header_crc = crc32fast::hash(&header);
    header.extend_from_slice(&header_crc.to_le_bytes());
    header.extend_from_slice(&[b'{'; 30]);
    header
}

/// Three appends with hard states, as a leader's first term would leave them.
fn three_appends() -> Vec<Persist> {
    vec![
        append(1..=3, 1, Some(hard_state(1, Some(1), 0))),
        append(4..=6, 1, Some(hard_state(1, Some(1), 3))),
        append(7..=9, 1, Some(hard_state(1, Some(1), 6))),
    ]
}

#[test]
fn restart_keeps_term_vote_commit_entries_and_snapshot() {
    // DESIGN.md, "Durability": a node restarted from its data dir keeps its log.
    let tmp = tempfile::tempdir().expect("tempdir");
    let persists = vec![
        append(1..=5, 2, Some(hard_state(2, Some(3), 2))),
        Persist {
            snapshot: Some(snapshot_at(3, 2)),
            ..Persist::default()
        },
        Persist {
            truncate_from: Some(5),
            entries: vec![entry(4, 5), entry(4, 6)],
            hard_state: Some(hard_state(4, None, 4)),
            ..Persist::default()
        },
    ];
    let (model, _, _) = build(tmp.path(), &persists);

    let (dir, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");

    assert_eq!(loaded, model);
    assert_eq!(loaded.hard_state, hard_state(4, None, 4));
    assert_eq!(loaded.snapshot, Some(snapshot_at(3, 2)));
    let indices: Vec<(Index, Term)> = loaded.entries.iter().map(|e| (e.index, e.term)).collect();
    assert_eq!(indices, vec![(4, 2), (5, 4), (6, 4)]);
    assert!(dir.recovered().is_clean(), "{:?}", dir.recovered());
    assert_eq!(dir.durable(), &model);
}

#[test]
fn torn_partial_record_is_cut_back_to_the_last_whole_record() {
    // research/design.md §3.5: a torn tail (the final record short) was never acknowledged;
    // it is cut off, with a note.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (model, offsets, segment) = build(tmp.path(), &three_appends());
    // A torn record written by hand after the last whole one.
    let header = torn_record();
    let mut file = OpenOptions::new()
        .append(true)
        .open(&segment)
        .expect("open");
    file.write_all(&header).expect("write");
    drop(file);

    let (dir, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");

    assert_eq!(loaded, model, "the whole records are kept");
    assert_eq!(dir.recovered().truncated_bytes, 42);
    let note = dir.recovered().torn_tail.clone().expect("a note");
    assert!(note.contains(&format!("at byte {}", offsets[3])), "{note}");
    assert_eq!(file_len(&segment), offsets[3], "the file is cut back");
}

/// Where a rewritten segment's checkpoint ends: at its last byte that is not zero (the zero
/// bytes written ahead follow it).
fn checkpoint_end(segment: &[u8]) -> usize {
    segment.iter().rposition(|&b| b != 0).expect("a checkpoint") + 1
}

/// A dir whose segment was rewritten (a snapshot at 6) with `ahead` zero bytes after its
/// checkpoint; returns the dir, the model and the segment's length and checkpoint end.
fn rewritten_with_space_ahead(path: &Path, ahead: u64) -> (DataDir, Durable, u64, u64) {
    let mut options = lockd::storage::Options::new(SyncMode::Fsync);
    options.segment_ahead_bytes = ahead;
    let (mut dir, _) = DataDir::open_with(path, options).expect("open a new dir");
    let mut model = Durable::default();
    let mut persists = three_appends();
    persists.push(Persist {
        snapshot: Some(snapshot_at(6, 1)),
        ..Persist::default()
    });
    for persist in &persists {
        dir.persist(persist).expect("persist");
        model.apply(persist);
    }
    let bytes = fs::read(dir.segment_path()).expect("read");
    let checkpoint_end = checkpoint_end(&bytes) as u64;
    (dir, model, bytes.len() as u64, checkpoint_end)
}

#[test]
fn records_go_over_the_space_written_ahead_and_a_restart_keeps_them_without_a_cut() {
    // Storage module doc, "Space written ahead": a new segment ends in zeros written ahead;
    // records overwrite them in place, and a restart reads the zeros after the last record as
    // unused space: not torn, nothing cut, nothing reported.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut dir, mut model, len, checkpoint_end) = rewritten_with_space_ahead(tmp.path(), 4096);
    assert_eq!(
        len,
        checkpoint_end + 4096,
        "zeros written ahead of the records"
    );
    let more = append(10..=12, 1, Some(hard_state(1, Some(1), 9)));
    dir.persist(&more).expect("persist");
    model.apply(&more);
    let segment = dir.segment_path().to_path_buf();
    assert_eq!(file_len(&segment), len, "the record went over the zeros");
    drop(dir);

    let (dir, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");

    assert_eq!(loaded, model);
    assert_eq!(dir.recovered().torn_tail, None);
    assert_eq!(dir.recovered().truncated_bytes, 0);
    assert_eq!(file_len(&segment), len, "the space ahead is kept");
}

#[test]
fn records_past_the_space_written_ahead_extend_the_file_and_survive_restarts() {
    // More records than the zeros ahead hold: the file grows past them, and restarts in
    // between write at the end of the last whole record, never over one.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, mut model, len, _) = rewritten_with_space_ahead(tmp.path(), 512);
    drop(dir);
    for round in 0..4u64 {
        let (mut dir, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");
        assert_eq!(loaded, model, "round {round}");
        let first = 10 + round * 5;
        let more = append(
            first..=first + 4,
            1,
            Some(hard_state(1, Some(1), first - 1)),
        );
        dir.persist(&more).expect("persist");
        model.apply(&more);
    }
    let (dir, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");
    assert_eq!(loaded, model);
    assert_eq!(dir.recovered().torn_tail, None);
    assert!(
        file_len(dir.segment_path()) > len,
        "the file grew past the space ahead"
    );
}

#[test]
fn a_torn_record_inside_the_space_written_ahead_is_cut() {
    // A crash inside a write over the zeros: the record's first sector reached the disk, the
    // rest did not (zeros after it). It was never acknowledged: cut, with a note.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, model, _, checkpoint_end) = rewritten_with_space_ahead(tmp.path(), 4096);
    let segment = dir.segment_path().to_path_buf();
    drop(dir);
    let header = torn_record();
    let mut bytes = fs::read(&segment).expect("read");
    let at = checkpoint_end as usize;
    bytes[at..at + header.len()].copy_from_slice(&header);
    fs::write(&segment, bytes).expect("write");

    let (dir, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");

    assert_eq!(loaded, model, "the whole records are kept");
    let note = dir.recovered().torn_tail.clone().expect("a note");
    assert!(
        note.contains(&format!("at byte {checkpoint_end}")),
        "{note}"
    );
    assert_eq!(
        file_len(&segment),
        checkpoint_end,
        "cut back to the last whole record"
    );
}

#[test]
fn last_record_cut_mid_payload_loses_only_that_persist() {
    // research/design.md §3.5: a crash inside the last append; every earlier persist stays.
    let tmp = tempfile::tempdir().expect("tempdir");
    let persists = three_appends();
    let (_, offsets, segment) = build(tmp.path(), &persists);
    let file = OpenOptions::new().write(true).open(&segment).expect("open");
    file.set_len(offsets[2] + 20).expect("set_len");
    drop(file);

    let (dir, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");

    let mut expected = Durable::default();
    expected.apply(&persists[0]);
    expected.apply(&persists[1]);
    assert_eq!(loaded, expected);
    assert_eq!(dir.recovered().truncated_bytes, 20);
}

#[test]
fn flipped_byte_in_a_middle_record_is_refused_with_file_and_offset() {
    // DESIGN.md, "Durability": a data dir that fails its checksums is refused with a clear
    // error, never silently truncated.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_, offsets, segment) = build(tmp.path(), &three_appends());
    flip_byte(&segment, offsets[1] + 30);
    let damaged = fs::read(&segment).expect("read");

    let error = open_error(tmp.path());

    match &error {
        StorageError::Corrupt { path, offset, .. } => {
            assert_eq!(path, &segment);
            assert_eq!(*offset, offsets[1]);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains(&segment.display().to_string()),
        "{message}"
    );
    assert!(
        message.contains(&format!("at byte {}", offsets[1])),
        "{message}"
    );
    assert!(message.contains("checksum"), "{message}");
    assert_eq!(
        fs::read(&segment).expect("read"),
        damaged,
        "a refused dir is not repaired"
    );
}

#[test]
fn flipped_byte_in_a_middle_record_header_is_refused() {
    // research/design.md §3.5: only the final record may be torn; a damaged length in the
    // middle must not pass for a short final record.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_, offsets, segment) = build(tmp.path(), &three_appends());
    flip_byte(&segment, offsets[1] + 1);

    let error = open_error(tmp.path());

    assert!(
        matches!(&error, StorageError::Corrupt { offset, .. } if *offset == offsets[1]),
        "{error:?}"
    );
}

#[test]
fn flipped_byte_in_meta_is_refused() {
    // STYLE.md 12: checksum on write, verify on read; `meta` is checksummed too.
    let tmp = tempfile::tempdir().expect("tempdir");
    build(tmp.path(), &three_appends());
    let meta = tmp.path().join("meta");
    flip_byte(&meta, 9);

    let error = open_error(tmp.path());

    assert!(
        matches!(&error, StorageError::Corrupt { path, offset: 8, .. } if path == &meta),
        "{error:?}"
    );
    assert!(error.to_string().contains("meta"), "{error}");
}

#[test]
fn flipped_byte_in_the_snapshot_is_refused() {
    // STYLE.md 12: checksum on write, verify on read; the snapshot file is never "torn".
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut persists = three_appends();
    persists.push(Persist {
        snapshot: Some(snapshot_at(5, 1)),
        ..Persist::default()
    });
    build(tmp.path(), &persists);
    let snapshot = tmp.path().join("snapshot");
    let len = file_len(&snapshot);
    flip_byte(&snapshot, len - 5);

    let error = open_error(tmp.path());

    assert!(
        matches!(&error, StorageError::Corrupt { path, offset: 8, .. } if path == &snapshot),
        "{error:?}"
    );
}

#[test]
fn log_shorter_than_the_commit_index_is_refused() {
    // research/design.md §3.5: a log ending before the commit index is refused, naming the
    // file and offset. The middle record (entries 4..=6) is cut out by hand; the last one,
    // whose hard state says commit 6, then names entries that are gone.
    let tmp = tempfile::tempdir().expect("tempdir");
    let persists = vec![
        append(1..=3, 1, Some(hard_state(1, Some(1), 3))),
        append(4..=6, 1, None),
        Persist {
            hard_state: Some(hard_state(1, Some(1), 6)),
            ..Persist::default()
        },
    ];
    let (_, offsets, segment) = build(tmp.path(), &persists);
    let bytes = fs::read(&segment).expect("read");
    let (cut_start, cut_end) = (offsets[1] as usize, offsets[2] as usize);
    let spliced = [&bytes[..cut_start], &bytes[cut_end..]].concat();
    fs::write(&segment, spliced).expect("write");

    let error = open_error(tmp.path());

    match &error {
        StorageError::Corrupt {
            path,
            offset,
            reason,
        } => {
            assert_eq!(path, &segment);
            assert_eq!(*offset, offsets[1], "the record that names commit 6");
            assert!(reason.contains("commit index 6"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn refused_persist_leaves_state_and_files_unchanged() {
    // STYLE.md 12 (raft-rs CONTRIBUTING): a function that returns Err leaves self unchanged.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (model, offsets, segment) = build(tmp.path(), &three_appends());
    let (mut dir, _) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");
    let refused = [
        // Not contiguous: index 11 after 9.
        append(11..=11, 1, None),
        // Drops committed entries: the commit index is 6.
        Persist {
            truncate_from: Some(5),
            ..Persist::default()
        },
        // A commit index beyond the log.
        Persist {
            hard_state: Some(hard_state(1, Some(1), 10)),
            ..Persist::default()
        },
        // A term going back.
        Persist {
            hard_state: Some(hard_state(0, None, 6)),
            ..Persist::default()
        },
        // A second vote in term 1.
        Persist {
            hard_state: Some(hard_state(1, Some(2), 6)),
            ..Persist::default()
        },
        // A term below the last entry's.
        Persist {
            hard_state: Some(hard_state(2, None, 6)),
            entries: vec![entry(0, 10)],
            ..Persist::default()
        },
    ];
    for persist in &refused {
        let result = dir.persist(persist);

        assert!(
            matches!(result, Err(StorageError::InvalidPersist { .. })),
            "{persist:?} must be refused, got {result:?}"
        );
        assert_eq!(dir.durable(), &model, "after refusing {persist:?}");
        assert_eq!(
            file_len(&segment),
            offsets[3],
            "nothing written for {persist:?}"
        );
    }
    // Still usable after refusals (a refusal does not poison).
    dir.persist(&append(10..=10, 2, Some(hard_state(2, None, 9))))
        .expect("a valid persist after refusals");
    drop(dir);
    let (_, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");
    assert_eq!(loaded.last_index(), 10);
    assert_eq!(loaded.hard_state, hard_state(2, None, 9));
}

#[test]
fn user_buffer_loses_unflushed_writes_on_sigkill() {
    // research/design.md §3.5, mutant `no-fsync`: unsynced writes live in a user-space
    // buffer, so a SIGKILL (here: the DataDir leaked without its drop) loses them.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut dir, _) = DataDir::open(tmp.path(), SyncMode::UserBuffer).expect("open");
    let kept = append(1..=2, 1, Some(hard_state(1, Some(1), 2)));
    dir.persist(&kept).expect("persist");
    dir.flush_unsynced().expect("flush");
    dir.persist(&append(3..=4, 1, Some(hard_state(1, Some(1), 4))))
        .expect("persist");

    std::mem::forget(dir);

    let (_, loaded) = DataDir::open(tmp.path(), SyncMode::UserBuffer).expect("reopen");
    let mut expected = Durable::default();
    expected.apply(&kept);
    assert_eq!(loaded, expected, "only the flushed persist survives");
}

#[test]
fn user_buffer_keeps_writes_after_a_clean_drop() {
    // research/design.md §3.5, mutant `no-fsync`: the buffer reaches the file at shutdown.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut dir, _) = DataDir::open(tmp.path(), SyncMode::UserBuffer).expect("open");
    let persist = append(1..=4, 3, Some(hard_state(3, Some(2), 4)));
    dir.persist(&persist).expect("persist");

    drop(dir);

    let (_, loaded) = DataDir::open(tmp.path(), SyncMode::UserBuffer).expect("reopen");
    let mut expected = Durable::default();
    expected.apply(&persist);
    assert_eq!(loaded, expected);
}

#[test]
fn fsync_mode_keeps_every_persist_through_sigkill() {
    // io.rs Output contract, step 2: in Fsync mode a persist is on disk when it returns,
    // so a leaked (SIGKILLed) DataDir loses nothing.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut dir, _) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("open");
    let persist = append(1..=4, 3, Some(hard_state(3, Some(2), 4)));
    dir.persist(&persist).expect("persist");

    std::mem::forget(dir);

    let (_, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");
    let mut expected = Durable::default();
    expected.apply(&persist);
    assert_eq!(loaded, expected);
}

#[test]
fn dir_with_a_log_but_no_meta_is_refused() {
    // Module docs: `meta` marks a complete data dir; without it, existing files are not
    // taken for an empty dir.
    let tmp = tempfile::tempdir().expect("tempdir");
    build(tmp.path(), &three_appends());
    fs::remove_file(tmp.path().join("meta")).expect("remove meta");

    let error = open_error(tmp.path());

    assert!(
        matches!(error, StorageError::NotDataDir { .. }),
        "{error:?}"
    );
}

#[test]
fn missing_directory_is_created() {
    // Task brief: `open` creates the dir if missing.
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("a").join("b");

    let (dir, loaded) = DataDir::open(&path, SyncMode::Fsync).expect("open");

    assert_eq!(loaded, Durable::default());
    assert_eq!(dir.path(), path);
    assert!(path.join("meta").is_file());
}

#[test]
fn flipped_byte_in_a_lone_checkpoint_is_refused_not_cut() {
    // Module docs: a segment's checkpoint is written whole and renamed into place, so damage
    // to it is corruption even when it is the last record of the file.
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut persists = three_appends();
    persists.push(Persist {
        snapshot: Some(snapshot_at(6, 1)),
        ..Persist::default()
    });
    let (_, offsets, segment) = build(tmp.path(), &persists);
    assert_eq!(offsets.len(), 5);
    // The checkpoint ends at the last byte that is not zero: the rewritten segment has zero
    // bytes written ahead after it (storage module doc, "Space written ahead").
    let bytes = fs::read(&segment).expect("read");
    let checkpoint_end = checkpoint_end(&bytes);
    assert!(
        bytes.len() > checkpoint_end,
        "the rewritten segment has space written ahead"
    );
    flip_byte(&segment, checkpoint_end as u64 - 3);

    let error = open_error(tmp.path());

    assert!(
        matches!(&error, StorageError::Corrupt { path, offset: 8, .. } if path == &segment),
        "{error:?}"
    );
}

#[test]
fn missing_snapshot_under_a_compacted_log_is_refused() {
    // DESIGN.md, "Durability": never silently drop committed data; the entries up to the
    // snapshot exist only in the snapshot file.
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut persists = three_appends();
    persists.push(Persist {
        snapshot: Some(snapshot_at(6, 1)),
        ..Persist::default()
    });
    build(tmp.path(), &persists);
    let snapshot = tmp.path().join("snapshot");
    fs::remove_file(&snapshot).expect("remove snapshot");

    let error = open_error(tmp.path());

    assert!(
        matches!(&error, StorageError::Corrupt { path, .. } if path == &snapshot),
        "{error:?}"
    );
}

#[test]
fn unexpected_file_in_the_log_dir_is_refused() {
    // Module docs, "Crash points": only segments and `*.tmp` leftovers belong in `log/`.
    let tmp = tempfile::tempdir().expect("tempdir");
    build(tmp.path(), &three_appends());
    let stray = tmp.path().join("log").join("notes.txt");
    fs::write(&stray, b"hello").expect("write");

    let error = open_error(tmp.path());

    assert!(
        matches!(&error, StorageError::Corrupt { path, .. } if path == &stray),
        "{error:?}"
    );
}

#[test]
fn interrupted_creation_is_created_again() {
    // Module docs: `meta` is written last when a dir is created; a crash before it leaves
    // only the empty first segment, and no persist can have happened, so open starts over.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, _) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("open");
    drop(dir);
    fs::remove_file(tmp.path().join("meta")).expect("remove meta");

    let (mut dir, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");

    assert_eq!(loaded, Durable::default());
    dir.persist(&append(1..=1, 1, None)).expect("persist");
    assert!(tmp.path().join("meta").is_file());
}

#[test]
fn conflicting_snapshot_with_truncation_is_accepted_and_kept() {
    // Raft paper §7 and the core's InstallSnapshot persist: a snapshot whose last entry the
    // log does not have comes with `truncate_from` right after it, and the log goes.
    let tmp = tempfile::tempdir().expect("tempdir");
    let persists = vec![
        append(1..=8, 2, Some(hard_state(2, None, 3))),
        Persist {
            snapshot: Some(snapshot_at(6, 3)),
            truncate_from: Some(7),
            hard_state: Some(hard_state(3, None, 6)),
            ..Persist::default()
        },
        append(7..=7, 3, None),
    ];
    let (model, _, _) = build(tmp.path(), &persists);

    let (_, loaded) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");

    assert_eq!(loaded, model);
    let indices: Vec<(Index, Term)> = loaded.entries.iter().map(|e| (e.index, e.term)).collect();
    assert_eq!(indices, vec![(7, 3)]);
}

#[test]
fn a_snapshot_written_off_the_core_thread_is_recovered_before_and_after_its_adoption() {
    // Module docs, "Crash points", and issue 27 (snapshot writes off the event loop): the
    // server writes a local snapshot's file on a blocking thread while the core appends, then
    // adopts it. A crash between the two recovers the snapshot onto the log; after adoption
    // the log starts at it. Neither loses an entry.
    let tmp = tempfile::tempdir().expect("tempdir");
    let hs = hard_state(1, Some(1), 4);
    build(tmp.path(), &[append(1..=4, 1, Some(hs.clone()))]);
    let snapshot = snapshot_at(3, 1);
    DataDir::write_snapshot_file(tmp.path(), &snapshot, SyncMode::Fsync).expect("write");
    // The process died after the write, before adopting: the reopen applies the snapshot.
    let (mut dir, _) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("open");
    assert!(dir.recovered().snapshot_reapplied, "{:?}", dir.recovered());
    dir.persist(&append(5..=5, 1, None)).expect("append");
    drop(dir);
    let (mut dir, durable) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");
    assert_eq!(durable.snapshot.as_ref().map(|s| s.last_index), Some(3));
    let indexes: Vec<Index> = durable.entries.iter().map(|e| e.index).collect();
    assert_eq!(indexes, vec![4, 5]);

    dir.adopt_snapshot(&snapshot)
        .expect("adopting again does nothing");
    dir.persist(&append(6..=6, 1, None)).expect("append");
    let newer = snapshot_at(5, 1);
    DataDir::write_snapshot_file(tmp.path(), &newer, SyncMode::Fsync).expect("write");
    dir.adopt_snapshot(&newer).expect("adopt");
    drop(dir);
    let (_, durable) = DataDir::open(tmp.path(), SyncMode::Fsync).expect("reopen");
    assert_eq!(durable.snapshot.as_ref().map(|s| s.last_index), Some(5));
    let indexes: Vec<Index> = durable.entries.iter().map(|e| e.index).collect();
    assert_eq!(indexes, vec![6]);
    assert_eq!(durable.hard_state, hs);
}

#[test]
fn a_deferred_commit_hint_goes_out_with_the_next_record() {
    // Storage `commit_hint_only` (issue 27, speed): with `defer_commit_hint` a persist that
    // only raises the commit index writes nothing; the next record carries it. A crash in
    // between loses the hint only, never an entry, term or vote.
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut options = lockd::storage::Options::new(SyncMode::Fsync);
    options.defer_commit_hint = true;
    let (mut dir, _) = DataDir::open_with(tmp.path(), options.clone()).expect("open");
    dir.persist(&append(1..=3, 1, Some(hard_state(1, Some(1), 1))))
        .expect("append");
    let bytes = file_len(dir.segment_path());
    let hint = Persist {
        hard_state: Some(hard_state(1, Some(1), 3)),
        ..Persist::default()
    };
    dir.persist(&hint).expect("hint");
    assert_eq!(
        file_len(dir.segment_path()),
        bytes,
        "the hint wrote nothing"
    );
    assert_eq!(dir.durable().hard_state.commit, 3, "in memory");
    drop(dir);
    let (mut dir, durable) = DataDir::open_with(tmp.path(), options.clone()).expect("reopen");
    assert_eq!(
        durable.hard_state,
        hard_state(1, Some(1), 1),
        "the hint was lost"
    );
    assert_eq!(durable.last_index(), 3, "no entry was");

    dir.persist(&hint).expect("hint");
    dir.persist(&append(4..=4, 1, None)).expect("append");
    drop(dir);
    let (_, durable) = DataDir::open_with(tmp.path(), options).expect("reopen");
    assert_eq!(
        durable.hard_state,
        hard_state(1, Some(1), 3),
        "carried by entry 4"
    );
    assert_eq!(durable.last_index(), 4);
}

/// One seeded damage to `bytes` at or after `floor`: a flipped bit, a cut, a zeroed 512-byte
/// sector, or random bytes over a range. Returns the range it changed, and whether the bytes
/// after it are still there (false for a cut, or zeros to the end of the file).
fn damage(bytes: &mut Vec<u8>, floor: usize, state: &mut u64) -> (usize, usize, bool) {
    let mut next = || lockd::rng::splitmix64(state);
    let span = bytes.len() - floor;
    let at = floor + (next() as usize) % span;
    match next() % 4 {
        0 => {
            bytes[at] ^= 1 << (next() % 8);
            (at, at + 1, true)
        }
        1 => {
            bytes.truncate(at);
            (at, at, false)
        }
        2 => {
            let sector = at / 512 * 512;
            let start = sector.max(floor);
            let end = (sector + 512).min(bytes.len());
            bytes[start..end].fill(0);
            (start, end, end < bytes.len())
        }
        _ => {
            let end = (at + 1 + (next() as usize) % 64).min(bytes.len());
            for b in &mut bytes[at..end] {
                *b = next() as u8;
            }
            (at, end, true)
        }
    }
}

#[test]
fn seeded_damage_to_the_log_never_panics_and_never_loses_a_record_before_it() {
    // DESIGN.md, "Durability": a data dir that fails its checks is refused, never silently
    // truncated past committed data. A generator of damage past the segment's checkpoint
    // (bit flips, cuts, zeroed sectors, random bytes), against the module doc's rules:
    // - opening never panics, and a dir that opens holds exactly the state after a prefix of
    //   the persists, every persist whose record lies wholly before the damage included;
    // - a file cut inside a record (what a crash inside the last write leaves) opens, cut back
    //   to the last whole record;
    // - damage with a whole record after it is corruption: refused, never cut;
    // - after a repair, the next record is written where the whole records end and reads back.
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut persists = three_appends();
    for first in (10..=40).step_by(6) {
        let commit = first - 1;
        persists.push(append(
            first..=first + 5,
            1,
            Some(hard_state(1, Some(1), commit)),
        ));
    }
    let built = tmp.path().join("built");
    let (_, offsets, segment) = build(&built, &persists);
    let mut models = vec![Durable::default()];
    for persist in &persists {
        let mut next = models.last().expect("a model").clone();
        next.apply(persist);
        models.push(next);
    }
    let original = fs::read(&segment).expect("read");
    let checkpoint_end = usize::try_from(offsets[0]).expect("fits");
    let segment_name = segment.strip_prefix(&built).expect("inside").to_path_buf();
    let (mut opened, mut refused) = (0, 0);
    for seed in 0..400u64 {
        let mut bytes = original.clone();
        let mut state = seed;
        let (first_damaged, damage_end, rest_kept) = damage(&mut bytes, checkpoint_end, &mut state);
        if bytes == original {
            continue;
        }
        let dir = tmp.path().join(format!("seed-{seed}"));
        copy_dir(&built, &dir);
        fs::write(dir.join(&segment_name), &bytes).expect("write damaged");
        let result = std::panic::catch_unwind(|| DataDir::open(&dir, SyncMode::Fsync))
            .unwrap_or_else(|_| panic!("seed {seed}: open panicked"));
        // The persists whose records end at or before the first damaged byte.
        let intact = offsets[1..]
            .iter()
            .take_while(|end| **end as usize <= first_damaged)
            .count();
        // An untouched record after the damage: the damage is not a torn tail.
        let whole_after = rest_kept
            && offsets[..persists.len()]
                .iter()
                .any(|start| *start as usize >= damage_end);
        match result {
            Err(e) => {
                refused += 1;
                assert!(
                    whole_after || rest_kept,
                    "seed {seed}: a cut at byte {first_damaged} was refused ({e}); a crash \
                     inside the last write leaves the same"
                );
            }
            Ok((mut reopened, loaded)) => {
                opened += 1;
                let k = models.iter().position(|m| *m == loaded).unwrap_or_else(|| {
                    panic!(
                        "seed {seed}: damage at byte {first_damaged} opened to a state no \
                         prefix of the persists leaves"
                    )
                });
                assert!(
                    k >= intact,
                    "seed {seed}: damage at byte {first_damaged} lost persist {} (the first \
                     {intact} lie wholly before it)",
                    k + 1
                );
                assert!(
                    !whole_after,
                    "seed {seed}: damage at byte {first_damaged}, inside persist {} of {} \
                     with whole records after it, opened (at persist {k}) instead of being \
                     refused as corruption",
                    intact + 1,
                    persists.len()
                );
                // The next record goes where the whole ones end, and the one after a restart
                // reads it back: nothing the repair left behind can hide or break it.
                let last = loaded.last_index();
                let more = append(last + 1..=last + 2, 1, None);
                reopened.persist(&more).expect("persist after the repair");
                drop(reopened);
                let (_, again) = DataDir::open(&dir, SyncMode::Fsync)
                    .unwrap_or_else(|e| panic!("seed {seed}: reopen after a write: {e}"));
                let mut expected = loaded.clone();
                expected.apply(&more);
                assert_eq!(again, expected, "seed {seed}: the write after the repair");
            }
        }
        fs::remove_dir_all(&dir).expect("clean up");
    }
    // Both outcomes happen: the generator reaches torn tails and corruption alike.
    assert!(
        opened > 20 && refused > 20,
        "opened {opened}, refused {refused}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for entry in fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).expect("copy");
        }
    }
}
