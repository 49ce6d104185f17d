//! The file-system steps of the data dir, all through [`crate::sys::fs`]: creating a dir,
//! listing the log's segments, writing a file whole (tmp, fsync, rename, fsync the
//! directory), cutting a torn tail, removing leftovers, and the typed error of each call.

use std::io;
use std::path::{Path, PathBuf};

use super::encoding::{file_header, segment_file};
use super::{
    LOG_DIR, META_FILE, META_MAGIC, Recovered, SEGMENT_SUFFIX, SNAPSHOT_FILE, StorageError,
    SyncMode, TMP_SUFFIX,
};
use crate::raft::Durable;
use crate::sys::fs::{self, File};

/// The segments of the log dir, oldest first, and its leftover temporary files.
pub(super) struct Listing {
    pub(super) segments: Vec<(u64, PathBuf)>,
    pub(super) tmp_files: Vec<PathBuf>,
}

pub(super) fn list_segments(log_dir: &Path) -> Result<Listing, StorageError> {
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

pub(super) fn segment_name(generation: u64) -> String {
    format!("{generation:020}{SEGMENT_SUFFIX}")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

pub(super) fn tmp_name(name: &str) -> String {
    format!("{name}{TMP_SUFFIX}")
}

/// Creates a fresh data dir in `dir`: the first segment, then `meta` as the "done" mark.
///
/// A dir without `meta` that holds exactly what an interrupted creation leaves (the empty
/// first segment, `*.tmp` files) is created again: no persist can have happened there, since
/// `open` only returns after `meta` is written. Anything else is refused.
pub(super) fn initialize(dir: &Path) -> Result<(), StorageError> {
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
        0,
        SyncMode::Fsync,
    )?;
    let mut meta = file_header(META_MAGIC);
    let crc = crc32fast::hash(&meta);
    meta.extend_from_slice(&crc.to_le_bytes());
    write_file_atomic(dir, META_FILE, &meta, SyncMode::Fsync)
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

/// Writes segment `generation` holding `segment_file`, then `ahead` zero bytes (space
/// written ahead for the records to come, see the module doc of `storage`); returns its path.
pub(super) fn write_segment(
    log_dir: &Path,
    generation: u64,
    segment_file: &[u8],
    ahead: u64,
    sync: SyncMode,
) -> Result<PathBuf, StorageError> {
    let name = segment_name(generation);
    write_file_atomic_padded(log_dir, &name, segment_file, ahead, sync)?;
    Ok(log_dir.join(name))
}

/// Writes `dir/name` whole: tmp file, fsync, rename, fsync the directory.
pub(super) fn write_file_atomic(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    sync: SyncMode,
) -> Result<(), StorageError> {
    write_file_atomic_padded(dir, name, bytes, 0, sync)
}

/// [`write_file_atomic`] of `bytes` followed by `zeros` zero bytes.
fn write_file_atomic_padded(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    zeros: u64,
    sync: SyncMode,
) -> Result<(), StorageError> {
    const ZEROS: [u8; 4096] = [0; 4096];
    let tmp = dir.join(tmp_name(name));
    let target = dir.join(name);
    let mut file = File::create(&tmp).map_err(io_error(&tmp, "create"))?;
    file.write_all(bytes).map_err(io_error(&tmp, "write"))?;
    let mut left = zeros;
    while left > 0 {
        let n = left.min(ZEROS.len() as u64);
        file.write_all(&ZEROS[..n as usize])
            .map_err(io_error(&tmp, "write zeros ahead"))?;
        left -= n;
    }
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

pub(super) fn cut_torn_tail(path: &Path, valid_bytes: u64) -> Result<(), StorageError> {
    let file = File::open_write(path).map_err(io_error(path, "open to cut the torn tail"))?;
    file.set_len(valid_bytes)
        .map_err(io_error(path, "cut the torn tail"))?;
    file.sync_all().map_err(io_error(path, "fsync"))
}

/// Opens segment `path` to write its records from byte `offset` on.
pub(super) fn open_segment_at(path: &Path, offset: u64) -> Result<File, StorageError> {
    File::open_write_at(path, offset).map_err(io_error(path, "open to write records"))
}

pub(super) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    fs::sync_dir(dir).map_err(io_error(dir, "fsync directory"))
}

pub(super) fn exists(path: &Path) -> Result<bool, StorageError> {
    fs::exists(path).map_err(io_error(path, "stat"))
}

pub(super) fn remove_file_if_exists(
    path: &Path,
    recovered: &mut Recovered,
) -> Result<(), StorageError> {
    match fs::remove_file(path) {
        Ok(()) => {
            recovered.removed_files.push(path.to_path_buf());
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(path, "remove leftover file")(e)),
    }
}

pub(super) fn io_error<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(io::Error) -> StorageError + 'a {
    move |source| StorageError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}
