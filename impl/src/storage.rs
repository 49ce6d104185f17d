//! The data dir: a node's term, vote, commit hint, log and snapshot on disk.
//!
//! [`DataDir::persist`] carries out one [`Persist`] of the core's output and returns only
//! when it is durable (in [`SyncMode::Fsync`]), so the driver may then send the answers that
//! depend on it (the IO contract on [`crate::raft::Output`]). [`DataDir::open`] verifies and
//! loads what an earlier process left. The on-disk state always equals the reference
//! semantics [`Durable::apply`] applied to the persists that returned `Ok`, in order, plus
//! possibly a part of the one that was under way at a crash (see "Crash points" below).
//!
//! # Format (version 1)
//!
//! ```text
//! <dir>/meta                 b"LKSM" u16 version, u16 0, u32 crc32(previous 8 bytes)
//!                            written once, when the dir is created (the "initialized" mark)
//! <dir>/snapshot             b"LKSN" u16 version, u16 0, then one record holding the Snapshot
//! <dir>/log/<gen:020>.seg    b"LKSG" u16 version, u16 0, then records:
//!                              first   Checkpoint { base_index, base_term, hard_state, entries }
//!                              then    Ops { truncate_from, entries, hard_state }, one per persist
//! record                     [u32 len][u32 crc32(payload)][u32 crc32(the previous 8 bytes)][payload]
//!                            payload = serde_json of the record; integers little-endian
//! ```
//!
//! The log is a write-ahead log of persists rather than a list of entries: one persist is one
//! record, written with one `write` and one `fdatasync`, and recovery replays the records
//! through [`Durable::apply`]. This keeps the common case (append entries and the hard state)
//! at one append and one fsync, makes every persist atomic (a torn record loses the whole
//! persist, never half of it), and makes truncation an append too. It departs from the
//! research note's `meta` holding the hard state (design.md §3.5): rewriting `meta` by
//! tmp + fsync + rename + fsync(dir) on every term or commit change would cost three fsyncs on
//! the acquire path. The hard state lives in the log records instead, and `meta` only marks
//! the dir as initialized and names the format version.
//!
//! The record header has its own checksum, so a length is trusted only when it is what was
//! written: a damaged length in the middle of the log cannot pass for a short last record.
//!
//! # Compaction
//!
//! A persist with a snapshot writes `snapshot` (tmp, fsync, rename, fsync dir), then a new
//! segment `gen + 1` whose checkpoint is the whole state after the persist (tmp, fsync,
//! rename, fsync dir), then removes the old segment. The same rewrite, without a snapshot,
//! runs before a persist when the segment has grown past [`Options::compact_segment_bytes_min`]
//! and [`COMPACT_GROWTH_FACTOR`] times its checkpoint: dead records (old hard states,
//! truncated entries) then take at most a constant factor of the space, and the rewrite cost
//! is amortized over the records it drops.
//!
//! # Crash points and recovery
//!
//! [`DataDir::open`] reads `meta`, then `snapshot`, then the newest segment, and replays it.
//! - A torn last record (the file ends inside it, or it is complete but its payload checksum
//!   fails and only zero bytes follow, or the tail from it on is all zero bytes) was the
//!   persist under way at the crash; it was never acknowledged. It is cut off
//!   (`set_len` + fsync) and reported in [`DataDir::recovered`]; the library has no logger.
//! - Any other damage (a bad checksum with data after it, a bad header, a record that does
//!   not follow the log, an unknown file) is refused with [`StorageError::Corrupt`] naming
//!   the file and the byte offset. Nothing is repaired in that case.
//! - A snapshot newer than the segment's base is a crash between the snapshot's rename and
//!   the new segment's: the snapshot is applied to the replayed log as [`Durable::apply`]
//!   does, and the segment is rewritten at once.
//! - Older segments and `*.tmp` files are leftovers of a finished or an unfinished rewrite;
//!   they are removed (and listed in [`Recovered::removed_files`]).
//! - A dir without `meta` is created afresh when it holds only what an interrupted creation
//!   leaves (the empty first segment); with any other lockd file it is refused
//!   ([`StorageError::NotDataDir`]).
//!
//! # Checks before writing
//!
//! A persist is refused with [`StorageError::InvalidPersist`] before anything is written when
//! applying it would leave a state that recovery refuses: entries that do not continue the
//! log (index = last + 1, terms never decreasing, none below a snapshot's term), a commit index beyond the last index at
//! any step (so no truncation or snapshot drops a committed entry), a term that goes back, a
//! vote that changes within a term, or a record larger than [`RECORD_BYTES_MAX`].
//!
//! # Errors and poisoning
//!
//! A persist that returns `Err` leaves the in-memory view ([`DataDir::durable`]) unchanged. An
//! I/O error may leave the files ahead of it (a partly written record, a renamed snapshot),
//! and after a failed fsync the page cache can no longer be trusted (PostgreSQL's
//! "fsyncgate"), so the `DataDir` is then poisoned: every later persist returns
//! [`StorageError::Poisoned`], and the driver must stop and reopen, which recovers as after a
//! crash.
//!
//! # The `no-fsync` mutant
//!
//! [`SyncMode::UserBuffer`] keeps appended records in a user-space buffer and writes them to
//! the file only on [`DataDir::flush_unsynced`], on a clean drop, when the buffer passes
//! [`USER_BUFFER_BYTES_MAX`], or when a rewrite replaces the segment. It never fsyncs. A
//! SIGKILL then really loses acknowledged writes; merely skipping fsync would not, since the
//! kernel's page cache survives `kill -9`.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::raft::{Durable, Entry, HardState, Index, Persist, Snapshot, Term};
use crate::sys::fs::{self, File};

/// The on-disk format version written to and expected in every file header.
pub const FORMAT_VERSION: u16 = 1;

/// The largest record payload, in bytes, that is written or read.
///
/// A checkpoint holds the whole log after the snapshot, so this bounds that log too; the
/// core's `snapshot_threshold_entries` and `uncommitted_entries_max` keep it far smaller.
pub const RECORD_BYTES_MAX: usize = 256 << 20;

/// A segment is rewritten when it is this many times larger than its checkpoint (and larger
/// than [`Options::compact_segment_bytes_min`]).
pub const COMPACT_GROWTH_FACTOR: u64 = 4;

/// The default of [`Options::compact_segment_bytes_min`].
pub const COMPACT_SEGMENT_BYTES_MIN_DEFAULT: u64 = 4 << 20;

/// In [`SyncMode::UserBuffer`], the buffer is written out (without fsync) when it passes this.
pub const USER_BUFFER_BYTES_MAX: usize = 16 << 20;

const META_MAGIC: &[u8; 4] = b"LKSM";
const SNAPSHOT_MAGIC: &[u8; 4] = b"LKSN";
const SEGMENT_MAGIC: &[u8; 4] = b"LKSG";
const FILE_HEADER_BYTES: usize = 8;
const META_BYTES: usize = FILE_HEADER_BYTES + 4;
const RECORD_HEADER_BYTES: usize = 12;
const META_FILE: &str = "meta";
const SNAPSHOT_FILE: &str = "snapshot";
const LOG_DIR: &str = "log";
const SEGMENT_SUFFIX: &str = ".seg";
const TMP_SUFFIX: &str = ".tmp";

/// How [`DataDir::persist`] makes writes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncMode {
    /// Write, then `fdatasync` (and fsync the directory after a rename) before returning.
    Fsync,
    /// The `no-fsync` mutant: writes are kept in a user-space buffer and only reach the file
    /// on [`DataDir::flush_unsynced`] or a clean drop, so a SIGKILL really loses them
    /// (`kill -9` keeps the page cache, so merely skipping fsync would be invisible).
    UserBuffer,
}

/// How to open a data dir.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// How writes are made durable.
    pub sync: SyncMode,
    /// A segment is never rewritten (compacted) while smaller than this, in bytes.
    pub compact_segment_bytes_min: u64,
}

impl Options {
    /// The defaults, with `sync`.
    pub fn new(sync: SyncMode) -> Self {
        Options {
            sync,
            compact_segment_bytes_min: COMPACT_SEGMENT_BYTES_MIN_DEFAULT,
        }
    }
}

/// What [`DataDir::open`] repaired: the library's "log line", for the driver to print.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recovered {
    /// Bytes cut from the end of the log segment (a torn last record).
    pub truncated_bytes: u64,
    /// Where the torn tail began and why it was judged torn, when one was cut.
    pub torn_tail: Option<String>,
    /// Whether a snapshot newer than the log was applied to it (a crash in the middle of a
    /// snapshot persist), after which the segment was rewritten.
    pub snapshot_reapplied: bool,
    /// Leftover files of earlier rewrites that were removed.
    pub removed_files: Vec<PathBuf>,
}

impl Recovered {
    /// Whether nothing had to be repaired.
    pub fn is_clean(&self) -> bool {
        self.truncated_bytes == 0 && !self.snapshot_reapplied && self.removed_files.is_empty()
    }
}

/// An error of the data dir.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An operating-system call failed.
    #[error("{path}: {op}: {source}", path = path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// A file is damaged or inconsistent; the dir is refused and nothing was repaired.
    #[error("{path} at byte {offset}: {reason}", path = path.display())]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// The byte offset in it where the damage was found.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The directory holds lockd files but no `meta`, so it is not (or no longer) a
    /// complete data dir.
    #[error("{path}: not a lockd data dir: {reason}", path = path.display())]
    NotDataDir {
        /// The directory.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
    /// The persist was refused before anything was written; the data dir is unchanged.
    #[error("persist refused, nothing written: {reason}")]
    InvalidPersist {
        /// Which rule it breaks.
        reason: String,
    },
    /// An earlier I/O error left the files possibly ahead of the in-memory view; reopen.
    #[error("{path}: data dir poisoned by an earlier I/O error; reopen it", path = path.display())]
    Poisoned {
        /// The data dir.
        path: PathBuf,
    },
}

/// A record as written (borrowing the state it encodes).
#[derive(Serialize)]
enum RecordRef<'a> {
    Checkpoint {
        base_index: Index,
        base_term: Term,
        hard_state: &'a HardState,
        entries: &'a [Entry],
    },
    Ops {
        truncate_from: Option<Index>,
        entries: &'a [Entry],
        hard_state: Option<&'a HardState>,
    },
}

/// A record as read; the same shape as [`RecordRef`].
#[derive(Deserialize)]
enum Record {
    Checkpoint {
        base_index: Index,
        base_term: Term,
        hard_state: HardState,
        entries: Vec<Entry>,
    },
    Ops {
        truncate_from: Option<Index>,
        entries: Vec<Entry>,
        hard_state: Option<HardState>,
    },
}

/// The open log segment.
#[derive(Debug)]
struct Segment {
    generation: u64,
    path: PathBuf,
    file: File,
    /// Its length, counting the bytes still in the user-space buffer.
    bytes: u64,
    /// The length of its header and checkpoint record.
    checkpoint_bytes: u64,
}

/// An open data dir. See the module docs for the format and the rules.
///
/// ```
/// use lockd::lock::{Command, Proposal};
/// use lockd::raft::{Entry, HardState, Persist};
/// use lockd::storage::{DataDir, SyncMode};
///
/// let tmp = tempfile::tempdir()?;
/// let (mut dir, durable) = DataDir::open(tmp.path(), SyncMode::Fsync)?;
/// assert!(durable.entries.is_empty());
/// let persist = Persist {
///     entries: vec![Entry { term: 1, index: 1, proposal: Proposal::system(Command::Noop) }],
///     hard_state: Some(HardState { term: 1, voted_for: Some(1), commit: 0 }),
///     ..Persist::default()
/// };
/// dir.persist(&persist)?; // durable when it returns: now send the acknowledgements
/// drop(dir);
/// let (_, durable) = DataDir::open(tmp.path(), SyncMode::Fsync)?;
/// assert_eq!(durable.last_index(), 1);
/// assert_eq!(durable.hard_state.voted_for, Some(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    options: Options,
    durable: Durable,
    segment: Segment,
    /// Records not yet written to the segment file ([`SyncMode::UserBuffer`] only).
    pending: Vec<u8>,
    /// A reused encoding buffer.
    scratch: Vec<u8>,
    recovered: Recovered,
    poisoned: bool,
}

impl DataDir {
    /// Opens the data dir at `path`, creating it when missing; verifies and loads it.
    ///
    /// Returns the dir and the durable state it holds. A torn last record is cut off and
    /// reported in [`DataDir::recovered`]; any other damage is an error naming the file and
    /// byte offset.
    pub fn open(path: &Path, sync: SyncMode) -> Result<(DataDir, Durable), StorageError> {
        DataDir::open_with(path, Options::new(sync))
    }

    /// [`DataDir::open`] with every option.
    pub fn open_with(path: &Path, options: Options) -> Result<(DataDir, Durable), StorageError> {
        fs::create_dir_all(path).map_err(io_error(path, "create directory"))?;
        let meta_path = path.join(META_FILE);
        if !exists(&meta_path)? {
            initialize(path)?;
        }
        read_meta(&meta_path)?;
        let snapshot = read_snapshot(&path.join(SNAPSHOT_FILE))?;
        let listing = list_segments(&path.join(LOG_DIR))?;
        let Some((generation, segment_path)) = listing.segments.last().cloned() else {
            return Err(StorageError::Corrupt {
                path: path.join(LOG_DIR),
                offset: 0,
                reason: "no log segment".to_string(),
            });
        };
        let loaded = load_segment(&segment_path, path, snapshot)?;
        // Everything is verified; only now repair.
        let recovered = repair(path, &listing, &segment_path, &loaded)?;
        let file = open_append(&segment_path)?;
        let mut dir = DataDir {
            path: path.to_path_buf(),
            options,
            durable: loaded.durable,
            segment: Segment {
                generation,
                path: segment_path,
                file,
                bytes: loaded.valid_bytes,
                checkpoint_bytes: loaded.checkpoint_bytes,
            },
            pending: Vec::new(),
            scratch: Vec::new(),
            recovered,
            poisoned: false,
        };
        if loaded.snapshot_reapplied {
            // Finish the interrupted snapshot persist, so the segment's base is the snapshot.
            dir.recovered.snapshot_reapplied = true;
            let rewritten = segment_file(&dir.durable)?;
            dir.rewrite_segment(&rewritten)?;
        }
        let durable = dir.durable.clone();
        Ok((dir, durable))
    }

    /// Makes `persist` durable, then updates the in-memory view. In [`SyncMode::Fsync`] the
    /// write is fsync'd before this returns.
    ///
    /// On `Err` the in-memory view is unchanged; an I/O error also poisons the dir (see the
    /// module docs), while [`StorageError::InvalidPersist`] means nothing was written.
    pub fn persist(&mut self, persist: &Persist) -> Result<(), StorageError> {
        if self.poisoned {
            return Err(StorageError::Poisoned {
                path: self.path.clone(),
            });
        }
        if persist.is_empty() {
            return Ok(());
        }
        check_persist(&self.durable, persist)
            .map_err(|reason| StorageError::InvalidPersist { reason })?;
        let result = match &persist.snapshot {
            Some(snapshot) => self.persist_with_snapshot(persist, snapshot),
            None => self.append_ops(persist),
        };
        if let Err(StorageError::Io { .. }) = &result {
            self.poisoned = true;
        }
        result
    }

    /// Writes the user-space buffer of [`SyncMode::UserBuffer`] to the segment file, without
    /// fsync. Does nothing in [`SyncMode::Fsync`], where nothing is buffered.
    pub fn flush_unsynced(&mut self) -> Result<(), StorageError> {
        if self.poisoned {
            return Err(StorageError::Poisoned {
                path: self.path.clone(),
            });
        }
        let result = self.write_pending();
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    /// The data dir's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The state as of the last persist that returned `Ok` (what a reopen after a clean
    /// shutdown loads).
    pub fn durable(&self) -> &Durable {
        &self.durable
    }

    /// What [`DataDir::open`] repaired.
    pub fn recovered(&self) -> &Recovered {
        &self.recovered
    }

    /// The log segment currently appended to.
    pub fn segment_path(&self) -> &Path {
        &self.segment.path
    }

    /// The common case: one `Ops` record, one write, one fdatasync.
    fn append_ops(&mut self, persist: &Persist) -> Result<(), StorageError> {
        let mut frame = std::mem::take(&mut self.scratch);
        let encoded = encode_record(
            &mut frame,
            &RecordRef::Ops {
                truncate_from: persist.truncate_from,
                entries: &persist.entries,
                hard_state: persist.hard_state.as_ref(),
            },
        );
        let result = encoded.and_then(|()| {
            if self.should_compact() {
                let compacted = segment_file(&self.durable)?;
                self.rewrite_segment(&compacted)?;
            }
            self.append_frame(&frame)
        });
        frame.clear();
        self.scratch = frame;
        result?;
        self.durable.apply(persist);
        Ok(())
    }

    fn should_compact(&self) -> bool {
        self.segment.bytes > self.options.compact_segment_bytes_min
            && self.segment.bytes > COMPACT_GROWTH_FACTOR * self.segment.checkpoint_bytes
    }

    fn append_frame(&mut self, frame: &[u8]) -> Result<(), StorageError> {
        match self.options.sync {
            SyncMode::Fsync => {
                let path = &self.segment.path;
                self.segment
                    .file
                    .write_all(frame)
                    .map_err(io_error(path, "append record"))?;
                self.segment
                    .file
                    .sync_data()
                    .map_err(io_error(path, "fdatasync"))?;
            }
            SyncMode::UserBuffer => {
                self.pending.extend_from_slice(frame);
                if self.pending.len() > USER_BUFFER_BYTES_MAX {
                    self.write_pending()?;
                }
            }
        }
        self.segment.bytes += frame.len() as u64;
        Ok(())
    }

    fn write_pending(&mut self) -> Result<(), StorageError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.segment
            .file
            .write_all(&self.pending)
            .map_err(io_error(&self.segment.path, "append buffered records"))?;
        self.pending.clear();
        Ok(())
    }

    /// Snapshot file first, then a new segment checkpointing the state after the persist.
    /// Both files are encoded before either is written, so that a refusal writes nothing.
    fn persist_with_snapshot(
        &mut self,
        persist: &Persist,
        snapshot: &Snapshot,
    ) -> Result<(), StorageError> {
        let mut next = self.durable.clone();
        next.apply(persist);
        let mut payload = Vec::new();
        encode_payload(&mut payload, snapshot)?;
        let mut snapshot_file = file_header(SNAPSHOT_MAGIC);
        push_frame(&mut snapshot_file, &payload);
        let segment_file = segment_file(&next)?;
        write_file_atomic(&self.path, SNAPSHOT_FILE, &snapshot_file, self.options.sync)?;
        self.rewrite_segment(&segment_file)?;
        self.durable = next;
        Ok(())
    }

    /// Replaces the segment with a new one holding `segment_file` (see [`segment_file`]),
    /// then removes the old one.
    fn rewrite_segment(&mut self, segment_file: &[u8]) -> Result<(), StorageError> {
        let log_dir = self.path.join(LOG_DIR);
        let generation = self.segment.generation + 1;
        let path = write_segment(&log_dir, generation, segment_file, self.options.sync)?;
        let checkpoint_bytes = segment_file.len() as u64;
        let file = open_append(&path)?;
        let old = std::mem::replace(
            &mut self.segment,
            Segment {
                generation,
                path,
                file,
                bytes: checkpoint_bytes,
                checkpoint_bytes,
            },
        );
        // The buffered records are part of the state now in the new checkpoint.
        self.pending.clear();
        drop(old.file);
        fs::remove_file(&old.path).map_err(io_error(&old.path, "remove old segment"))?;
        if self.options.sync == SyncMode::Fsync {
            sync_dir(&log_dir)?;
        }
        Ok(())
    }
}

impl Drop for DataDir {
    /// A clean drop writes the user-space buffer out ([`SyncMode::UserBuffer`]); errors are
    /// ignored, as a drop cannot report them (call [`DataDir::flush_unsynced`] to see them).
    fn drop(&mut self) {
        if !self.poisoned {
            let _ignored = self.write_pending();
        }
    }
}

/// Checks that applying `persist` to `state` (as [`Durable::apply`] does) keeps every rule
/// that recovery verifies; computes on indices only, without copying the log.
fn check_persist(state: &Durable, persist: &Persist) -> Result<(), String> {
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
            (last > s && first <= s.saturating_add(1)).then_some((s + 1, last))
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
        range =
            range.and_then(|(first, last)| (from > first).then_some((first, last.min(from - 1))));
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

// ---- encoding ----

fn file_header(magic: &[u8; 4]) -> Vec<u8> {
    let mut header = Vec::with_capacity(FILE_HEADER_BYTES);
    header.extend_from_slice(magic);
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header.extend_from_slice(&0u16.to_le_bytes());
    header
}

fn encode_payload<T: Serialize>(out: &mut Vec<u8>, value: &T) -> Result<(), StorageError> {
    serde_json::to_writer(&mut *out, value).map_err(|e| StorageError::InvalidPersist {
        reason: format!("cannot encode: {e}"),
    })?;
    if out.len() > RECORD_BYTES_MAX {
        return Err(StorageError::InvalidPersist {
            reason: format!(
                "the record is {} bytes, more than {RECORD_BYTES_MAX}",
                out.len()
            ),
        });
    }
    Ok(())
}

/// Encodes `record` as one whole frame into `out` (cleared first).
fn encode_record(out: &mut Vec<u8>, record: &RecordRef<'_>) -> Result<(), StorageError> {
    out.clear();
    // Encode after room for the header, then fill the header in.
    out.extend_from_slice(&[0; RECORD_HEADER_BYTES]);
    serde_json::to_writer(&mut *out, record).map_err(|e| StorageError::InvalidPersist {
        reason: format!("cannot encode: {e}"),
    })?;
    let len = out.len() - RECORD_HEADER_BYTES;
    if len > RECORD_BYTES_MAX {
        return Err(StorageError::InvalidPersist {
            reason: format!("the record is {len} bytes, more than {RECORD_BYTES_MAX}"),
        });
    }
    let header = record_header(&out[RECORD_HEADER_BYTES..]);
    out[..RECORD_HEADER_BYTES].copy_from_slice(&header);
    Ok(())
}

fn push_frame(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(&record_header(payload));
    out.extend_from_slice(payload);
}

fn record_header(payload: &[u8]) -> [u8; RECORD_HEADER_BYTES] {
    let len = u32::try_from(payload.len()).expect("payloads are at most RECORD_BYTES_MAX");
    let mut header = [0; RECORD_HEADER_BYTES];
    header[0..4].copy_from_slice(&len.to_le_bytes());
    header[4..8].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    let header_crc = crc32fast::hash(&header[0..8]);
    header[8..12].copy_from_slice(&header_crc.to_le_bytes());
    header
}

// ---- decoding ----

/// One frame read at an offset.
enum Frame<'a> {
    /// A whole record whose checksums hold; the next frame starts at `next`.
    Whole { payload: &'a [u8], next: usize },
    /// The tail from here on is a record that was being written at a crash.
    Torn { reason: String },
    /// Damage that a crash cannot explain.
    Corrupt { reason: String },
}

fn read_frame(bytes: &[u8], at: usize) -> Frame<'_> {
    let rest = &bytes[at..];
    if rest.len() < RECORD_HEADER_BYTES {
        return Frame::Torn {
            reason: format!("a short record header ({} bytes)", rest.len()),
        };
    }
    let header_crc = u32_at(rest, 8);
    if crc32fast::hash(&rest[0..8]) != header_crc {
        if rest.iter().all(|&b| b == 0) {
            return Frame::Torn {
                reason: "zero bytes to the end of the file".to_string(),
            };
        }
        return Frame::Corrupt {
            reason: "record header checksum mismatch".to_string(),
        };
    }
    let len = u32_at(rest, 0) as usize;
    if len == 0 || len > RECORD_BYTES_MAX {
        return Frame::Corrupt {
            reason: format!("record length {len} out of range 1..={RECORD_BYTES_MAX}"),
        };
    }
    let end = RECORD_HEADER_BYTES + len;
    if end > rest.len() {
        return Frame::Torn {
            reason: format!(
                "a short record ({} of {len} payload bytes)",
                rest.len() - RECORD_HEADER_BYTES
            ),
        };
    }
    let payload = &rest[RECORD_HEADER_BYTES..end];
    if crc32fast::hash(payload) != u32_at(rest, 4) {
        if rest[end..].iter().all(|&b| b == 0) {
            return Frame::Torn {
                reason: "the last record's payload checksum fails".to_string(),
            };
        }
        return Frame::Corrupt {
            reason: "record payload checksum mismatch".to_string(),
        };
    }
    Frame::Whole {
        payload,
        next: at + end,
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn check_file_header(path: &Path, bytes: &[u8], magic: &[u8; 4]) -> Result<(), StorageError> {
    let corrupt = |offset: u64, reason: String| StorageError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason,
    };
    if bytes.len() < FILE_HEADER_BYTES {
        return Err(corrupt(
            0,
            format!("a short file header ({} bytes)", bytes.len()),
        ));
    }
    if &bytes[0..4] != magic {
        return Err(corrupt(
            0,
            format!("bad magic {:?}, expected {:?}", &bytes[0..4], magic),
        ));
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != FORMAT_VERSION {
        return Err(corrupt(
            4,
            format!("format version {version}, expected {FORMAT_VERSION}"),
        ));
    }
    if bytes[6..8] != [0, 0] {
        return Err(corrupt(6, "reserved header bytes are not zero".to_string()));
    }
    Ok(())
}

fn read_meta(path: &Path) -> Result<(), StorageError> {
    let bytes = fs::read(path).map_err(io_error(path, "read"))?;
    check_file_header(path, &bytes, META_MAGIC)?;
    if bytes.len() != META_BYTES {
        return Err(StorageError::Corrupt {
            path: path.to_path_buf(),
            offset: FILE_HEADER_BYTES as u64,
            reason: format!("meta is {} bytes, expected {META_BYTES}", bytes.len()),
        });
    }
    if crc32fast::hash(&bytes[..FILE_HEADER_BYTES]) != u32_at(&bytes, FILE_HEADER_BYTES) {
        return Err(StorageError::Corrupt {
            path: path.to_path_buf(),
            offset: FILE_HEADER_BYTES as u64,
            reason: "meta checksum mismatch".to_string(),
        });
    }
    Ok(())
}

fn read_snapshot(path: &Path) -> Result<Option<Snapshot>, StorageError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path, "read")(e)),
    };
    check_file_header(path, &bytes, SNAPSHOT_MAGIC)?;
    let corrupt = |offset: usize, reason: String| StorageError::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason,
    };
    // The snapshot file is written whole and renamed into place: a torn one is corruption.
    let (payload, next) = match read_frame(&bytes, FILE_HEADER_BYTES) {
        Frame::Whole { payload, next } => (payload, next),
        Frame::Torn { reason } | Frame::Corrupt { reason } => {
            return Err(corrupt(FILE_HEADER_BYTES, reason));
        }
    };
    if next != bytes.len() {
        return Err(corrupt(next, "bytes after the snapshot record".to_string()));
    }
    serde_json::from_slice(payload).map(Some).map_err(|e| {
        corrupt(
            FILE_HEADER_BYTES,
            format!("cannot decode the snapshot: {e}"),
        )
    })
}

/// A torn tail found by [`load_segment`].
struct Torn {
    offset: u64,
    reason: String,
}

/// What [`load_segment`] found.
struct Loaded {
    durable: Durable,
    file_bytes: u64,
    valid_bytes: u64,
    checkpoint_bytes: u64,
    torn: Option<Torn>,
    snapshot_reapplied: bool,
}

/// Verifies and replays one segment on top of `snapshot` (the snapshot file's content).
fn load_segment(
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
fn repair(
    dir: &Path,
    listing: &Listing,
    segment_path: &Path,
    loaded: &Loaded,
) -> Result<Recovered, StorageError> {
    let mut recovered = Recovered::default();
    if let Some(torn) = &loaded.torn {
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

// ---- files ----

/// The segments of the log dir, oldest first, and its leftover temporary files.
struct Listing {
    segments: Vec<(u64, PathBuf)>,
    tmp_files: Vec<PathBuf>,
}

fn list_segments(log_dir: &Path) -> Result<Listing, StorageError> {
    let mut listing = Listing {
        segments: Vec::new(),
        tmp_files: Vec::new(),
    };
    let read_dir = fs::read_dir(log_dir).map_err(io_error(log_dir, "list"))?;
    for (path, name) in read_dir {
        if name.ends_with(TMP_SUFFIX) {
            listing.tmp_files.push(path);
        } else if let Some(generation) = parse_segment_name(&name) {
            listing.segments.push((generation, path));
        } else {
            return Err(StorageError::Corrupt {
                path,
                offset: 0,
                reason: "an unexpected file in the log directory".to_string(),
            });
        }
    }
    listing.segments.sort();
    Ok(listing)
}

fn segment_name(generation: u64) -> String {
    format!("{generation:020}{SEGMENT_SUFFIX}")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn tmp_name(name: &str) -> String {
    format!("{name}{TMP_SUFFIX}")
}

/// Creates a fresh data dir in `dir`: the first segment, then `meta` as the "done" mark.
///
/// A dir without `meta` that holds exactly what an interrupted creation leaves (the empty
/// first segment, `*.tmp` files) is created again: no persist can have happened there, since
/// `open` only returns after `meta` is written. Anything else is refused.
fn initialize(dir: &Path) -> Result<(), StorageError> {
    let log_dir = dir.join(LOG_DIR);
    if exists(&log_dir)? {
        if !exists(&dir.join(SNAPSHOT_FILE))? && is_interrupted_creation(&log_dir)? {
            fs::remove_dir_all(&log_dir).map_err(io_error(&log_dir, "remove"))?;
        } else {
            return Err(StorageError::NotDataDir {
                path: dir.to_path_buf(),
                reason: format!(
                    "`{META_FILE}` is missing but `{LOG_DIR}` holds data; \
                     restore `{META_FILE}` or remove the dir to start afresh"
                ),
            });
        }
    } else if exists(&dir.join(SNAPSHOT_FILE))? {
        return Err(StorageError::NotDataDir {
            path: dir.to_path_buf(),
            reason: format!("`{META_FILE}` is missing but `{SNAPSHOT_FILE}` exists"),
        });
    }
    fs::create_dir(&log_dir).map_err(io_error(&log_dir, "create directory"))?;
    sync_dir(dir)?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        // The data dir itself may be new: make its entry in the parent durable too.
        sync_dir(parent)?;
    }
    write_segment(
        &log_dir,
        1,
        &segment_file(&Durable::default())?,
        SyncMode::Fsync,
    )?;
    let mut meta = file_header(META_MAGIC);
    let crc = crc32fast::hash(&meta);
    meta.extend_from_slice(&crc.to_le_bytes());
    write_file_atomic(dir, META_FILE, &meta, SyncMode::Fsync)
}

/// The bytes of a segment whose checkpoint is `state`: the file header and one record.
fn segment_file(state: &Durable) -> Result<Vec<u8>, StorageError> {
    let (base_index, base_term) = state
        .snapshot
        .as_ref()
        .map_or((0, 0), |s| (s.last_index, s.last_term));
    let mut frame = Vec::new();
    encode_record(
        &mut frame,
        &RecordRef::Checkpoint {
            base_index,
            base_term,
            hard_state: &state.hard_state,
            entries: &state.entries,
        },
    )?;
    let mut bytes = file_header(SEGMENT_MAGIC);
    bytes.extend_from_slice(&frame);
    Ok(bytes)
}

/// Whether `log_dir` holds only what [`initialize`] writes before `meta`.
fn is_interrupted_creation(log_dir: &Path) -> Result<bool, StorageError> {
    let first = segment_name(1);
    let first_tmp = tmp_name(&first);
    let empty_segment = segment_file(&Durable::default())?;
    let read_dir = fs::read_dir(log_dir).map_err(io_error(log_dir, "list"))?;
    for (path, name) in read_dir {
        if name == first_tmp {
            continue;
        }
        if name != first {
            return Ok(false);
        }
        let bytes = fs::read(&path).map_err(io_error(&path, "read"))?;
        if bytes != empty_segment {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes segment `generation` holding `segment_file`; returns its path.
fn write_segment(
    log_dir: &Path,
    generation: u64,
    segment_file: &[u8],
    sync: SyncMode,
) -> Result<PathBuf, StorageError> {
    let name = segment_name(generation);
    write_file_atomic(log_dir, &name, segment_file, sync)?;
    Ok(log_dir.join(name))
}

/// Writes `dir/name` whole: tmp file, fsync, rename, fsync the directory.
fn write_file_atomic(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    sync: SyncMode,
) -> Result<(), StorageError> {
    let tmp = dir.join(tmp_name(name));
    let target = dir.join(name);
    let mut file = File::create(&tmp).map_err(io_error(&tmp, "create"))?;
    file.write_all(bytes).map_err(io_error(&tmp, "write"))?;
    if sync == SyncMode::Fsync {
        file.sync_all().map_err(io_error(&tmp, "fsync"))?;
    }
    drop(file);
    fs::rename(&tmp, &target).map_err(io_error(&target, "rename into place"))?;
    if sync == SyncMode::Fsync {
        sync_dir(dir)?;
    }
    Ok(())
}

fn cut_torn_tail(path: &Path, valid_bytes: u64) -> Result<(), StorageError> {
    let file = File::open_write(path).map_err(io_error(path, "open to cut the torn tail"))?;
    file.set_len(valid_bytes)
        .map_err(io_error(path, "cut the torn tail"))?;
    file.sync_all().map_err(io_error(path, "fsync"))
}

fn open_append(path: &Path) -> Result<File, StorageError> {
    File::open_append(path).map_err(io_error(path, "open for append"))
}

fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    fs::sync_dir(dir).map_err(io_error(dir, "fsync directory"))
}

fn exists(path: &Path) -> Result<bool, StorageError> {
    fs::exists(path).map_err(io_error(path, "stat"))
}

fn remove_file_if_exists(path: &Path, recovered: &mut Recovered) -> Result<(), StorageError> {
    match fs::remove_file(path) {
        Ok(()) => {
            recovered.removed_files.push(path.to_path_buf());
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(path, "remove leftover file")(e)),
    }
}

fn io_error<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> StorageError + 'a {
    move |source| StorageError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Command, LockTable, Origin, Proposal};
    use std::fs::{self, OpenOptions};

    /// A small seeded generator (splitmix64), so that a failing seed replays exactly.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            crate::rng::splitmix64(&mut self.0)
        }

        /// Uniform in `low..=high`.
        fn range(&mut self, low: u64, high: u64) -> u64 {
            assert!(low <= high, "empty range {low}..={high}");
            low + self.next() % (high - low + 1)
        }

        fn chance(&mut self, percent: u64) -> bool {
            self.next() % 100 < percent
        }
    }

    fn entry(term: Term, index: Index) -> Entry {
        Entry {
            term,
            index,
            proposal: Proposal {
                origin: Some(Origin {
                    client: index % 7,
                    request: index,
                }),
                command: Command::Grant {
                    key: format!("key-{index}"),
                    lease_ms: 100 + index,
                },
            },
        }
    }

    fn snapshot(last_index: Index, last_term: Term) -> Snapshot {
        let mut table = LockTable::new();
        if last_index > 0 {
            table.apply(
                last_index,
                &Command::Grant {
                    key: format!("snap-{last_index}"),
                    lease_ms: 50,
                },
            );
        }
        Snapshot {
            last_index,
            last_term,
            table,
        }
    }

    /// A persist that every rule accepts, drawn from `rng` for the state `model`.
    fn valid_persist(rng: &mut Rng, model: &Durable) -> Persist {
        let mut persist = Persist::default();
        let mut after = model.clone();
        let commit = model.hard_state.commit;
        if rng.chance(10) {
            // Any snapshot index at or past the commit index, possibly beyond the log.
            let s = rng.range(commit, model.last_index() + 3);
            let term_at_s = after.entries.iter().find(|e| e.index == s).map(|e| e.term);
            let base_term = model.snapshot.as_ref().filter(|x| x.last_index == s);
            let term = term_at_s
                .or(base_term.map(|x| x.last_term))
                .unwrap_or(model.last_term().max(model.hard_state.term));
            if let Some(term_at_s) = term_at_s
                && rng.chance(30)
            {
                // The core's install of a conflicting snapshot: the log after it goes too.
                persist.snapshot = Some(snapshot(s, term_at_s + 1));
                persist.truncate_from = Some(s + 1);
            } else {
                persist.snapshot = Some(snapshot(s, term));
            }
            after.apply(&persist);
        }
        if persist.truncate_from.is_none() && rng.chance(20) && after.last_index() >= commit {
            let from = rng.range(commit + 1, after.last_index() + 1);
            persist.truncate_from = Some(from);
            after.apply(&Persist {
                truncate_from: Some(from),
                ..Persist::default()
            });
        }
        let mut term = after.last_term().max(model.hard_state.term);
        for _ in 0..rng.range(0, 4) {
            if rng.chance(20) {
                term += 1;
            }
            persist.entries.push(entry(term, after.last_index() + 1));
            after.entries.push(entry(term, after.last_index() + 1));
        }
        if rng.chance(60) {
            let old = &model.hard_state;
            let new_term = old.term + rng.range(0, 1);
            let voted_for = if new_term == old.term && old.voted_for.is_some() {
                old.voted_for
            } else {
                rng.chance(50).then(|| rng.range(1, 5))
            };
            persist.hard_state = Some(HardState {
                term: new_term,
                voted_for,
                commit: rng.range(commit.min(after.last_index()), after.last_index()),
            });
        }
        persist
    }

    /// A persist that breaks one rule, or None when the state allows no such break.
    fn invalid_persist(rng: &mut Rng, model: &Durable) -> Option<Persist> {
        let last = model.last_index();
        let commit = model.hard_state.commit;
        match rng.range(0, 2) {
            0 => Some(Persist {
                entries: vec![entry(model.last_term(), last + 2)],
                ..Persist::default()
            }),
            1 => (commit > 0 && commit > model.snapshot.as_ref().map_or(0, |s| s.last_index)).then(
                || Persist {
                    truncate_from: Some(commit),
                    ..Persist::default()
                },
            ),
            _ => Some(Persist {
                hard_state: Some(HardState {
                    commit: last + 1,
                    ..model.hard_state.clone()
                }),
                ..Persist::default()
            }),
        }
    }

    /// How often `run_random` did each kind of thing, to show that it did.
    #[derive(Debug, Default)]
    struct Seen {
        refusals: u64,
        snapshots: u64,
        truncations: u64,
        rewrites: u64,
        cuts: u64,
        reopens: u64,
    }

    fn run_random(seed: u64, sync: SyncMode, steps: usize, seen: &mut Seen) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("data");
        let mut options = Options::new(sync);
        options.compact_segment_bytes_min = 8192;
        let mut rng = Rng(seed);
        let (mut dir, loaded) = DataDir::open_with(&path, options.clone()).expect("open");
        let mut model = Durable::default();
        assert_eq!(loaded, model, "seed {seed}: a new dir is empty");
        for step in 0..steps {
            let context = format!("seed {seed} {sync:?} step {step}");
            if rng.chance(10)
                && let Some(bad) = invalid_persist(&mut rng, &model)
            {
                let result = dir.persist(&bad);
                assert!(
                    matches!(result, Err(StorageError::InvalidPersist { .. })),
                    "{context}: {bad:?} must be refused, got {result:?}"
                );
                assert_eq!(
                    dir.durable(),
                    &model,
                    "{context}: a refusal changes nothing"
                );
                seen.refusals += 1;
                continue;
            }
            let persist = valid_persist(&mut rng, &model);
            let before = (
                dir.segment_path().to_path_buf(),
                dir.segment.bytes,
                model.clone(),
            );
            dir.persist(&persist)
                .unwrap_or_else(|e| panic!("{context}: {persist:?} refused: {e}"));
            model.apply(&persist);
            assert_eq!(
                dir.durable(),
                &model,
                "{context}: in-memory view after {persist:?}"
            );
            let appended = before.0 == dir.segment_path() && dir.segment.bytes > before.1;
            seen.snapshots += u64::from(persist.snapshot.is_some());
            seen.truncations += u64::from(persist.truncate_from.is_some());
            seen.rewrites += u64::from(before.0 != dir.segment_path());
            if sync == SyncMode::Fsync && appended && rng.chance(10) {
                // A crash inside the last append: cut the file somewhere in its record.
                let cut = rng.range(before.1, dir.segment.bytes - 1);
                drop(dir);
                let file = OpenOptions::new()
                    .write(true)
                    .open(&before.0)
                    .expect("open");
                file.set_len(cut).expect("set_len");
                model = before.2;
                let (reopened, loaded) = DataDir::open_with(&path, options.clone())
                    .unwrap_or_else(|e| panic!("{context}: reopen after a cut at {cut}: {e}"));
                assert_eq!(loaded, model, "{context}: a torn append loses only itself");
                assert_eq!(
                    reopened.recovered().truncated_bytes,
                    cut - before.1,
                    "{context}"
                );
                seen.cuts += 1;
                dir = reopened;
            } else if rng.chance(25) {
                drop(dir);
                let (reopened, loaded) = DataDir::open_with(&path, options.clone())
                    .unwrap_or_else(|e| panic!("{context}: reopen: {e}"));
                assert_eq!(loaded, model, "{context}: reopen loads what was persisted");
                assert!(
                    reopened.recovered().is_clean(),
                    "{context}: {:?}",
                    reopened.recovered()
                );
                seen.reopens += 1;
                dir = reopened;
            }
        }
    }

    #[test]
    fn random_persists_and_reopens_equal_durable_apply() {
        // io.rs: `Durable::apply` is the reference semantics storage implements on disk.
        // Seeds are fixed for determinism; LOCKD_STORAGE_SEED=N replays one seed.
        let seeds: Vec<u64> = match std::env::var("LOCKD_STORAGE_SEED") {
            Ok(seed) => vec![seed.parse().expect("LOCKD_STORAGE_SEED is a u64")],
            Err(_) => (0..12).collect(),
        };
        let replaying_one = seeds.len() == 1;
        let mut seen = Seen::default();
        for seed in seeds {
            let sync = if seed % 2 == 0 {
                SyncMode::Fsync
            } else {
                SyncMode::UserBuffer
            };
            run_random(seed, sync, 200, &mut seen);
        }
        if !replaying_one {
            for (what, count) in [
                ("refusals", seen.refusals),
                ("snapshots", seen.snapshots),
                ("truncations", seen.truncations),
                ("rewrites", seen.rewrites),
                ("cuts", seen.cuts),
                ("reopens", seen.reopens),
            ] {
                assert!(count >= 5, "the seeds exercised too few {what}: {seen:?}");
            }
        }
    }

    #[test]
    fn flipped_length_in_a_middle_record_is_corruption_not_a_torn_tail() {
        // research/design.md §3.5: only the final record may be torn; the header checksum
        // keeps a damaged length from passing for a short final record.
        let mut bytes = Vec::new();
        push_frame(&mut bytes, b"{\"first\":1}");
        push_frame(&mut bytes, b"{\"second\":2}");
        bytes[1] ^= 0x40;
        let frame = read_frame(&bytes, 0);
        assert!(
            matches!(&frame, Frame::Corrupt { reason } if reason.contains("header checksum")),
            "a flipped length must be corruption"
        );
    }

    #[test]
    fn zero_filled_or_short_tails_are_torn() {
        // research/design.md §3.5: a torn tail is a short final record or garbage past it.
        let mut bytes = Vec::new();
        push_frame(&mut bytes, b"{\"whole\":1}");
        let whole = bytes.len();
        bytes.extend_from_slice(&[0; 40]);
        assert!(
            matches!(read_frame(&bytes, whole), Frame::Torn { .. }),
            "zeros"
        );
        let mut short = Vec::new();
        push_frame(&mut short, b"{\"cut\":12345}");
        short.truncate(short.len() - 3);
        assert!(matches!(read_frame(&short, 0), Frame::Torn { .. }), "short");
        assert!(
            matches!(read_frame(&short[..5], 0), Frame::Torn { .. }),
            "short header"
        );
    }

    #[test]
    fn compaction_rewrites_the_segment_and_keeps_the_state() {
        // Module docs, "Compaction": a grown segment is rewritten from its checkpoint.
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut options = Options::new(SyncMode::Fsync);
        options.compact_segment_bytes_min = 512;
        let (mut dir, _) = DataDir::open_with(tmp.path(), options.clone()).expect("open");
        let first_segment = dir.segment_path().to_path_buf();
        let mut model = Durable::default();
        for commit in 1..=40 {
            let persist = Persist {
                entries: if commit % 10 == 1 {
                    (commit..commit + 10).map(|i| entry(1, i)).collect()
                } else {
                    Vec::new()
                },
                hard_state: Some(HardState {
                    term: 1,
                    voted_for: Some(1),
                    commit,
                }),
                ..Persist::default()
            };
            dir.persist(&persist).expect("persist");
            model.apply(&persist);
        }
        assert_ne!(
            dir.segment_path(),
            first_segment,
            "the segment was rewritten"
        );
        assert!(!first_segment.exists(), "the old segment was removed");
        drop(dir);
        let (_, loaded) = DataDir::open_with(tmp.path(), options).expect("reopen");
        assert_eq!(loaded, model);
    }

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
