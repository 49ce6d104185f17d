//! Files: `std::fs`, or turmoil's per-host simulated disk inside a simulation.
//!
//! The simulated disk keeps writes pending until `sync_all`/`sync_data`, and a crash of the
//! host drops what was never synced (and new directory entries whose directory was never
//! synced): exactly the failures the data dir's fsync discipline is there to survive.
//! Only the calls `crate::storage` makes are here.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

#[cfg(feature = "sim")]
use turmoil::fs::shim::std::fs as sim;

#[cfg(feature = "sim")]
use super::simulated;

/// An open file.
#[derive(Debug)]
pub enum File {
    /// A real file.
    Std(std::fs::File),
    /// A file on the simulated disk, and whether it was opened to append.
    #[cfg(feature = "sim")]
    Sim(sim::File, bool),
}

impl File {
    /// Creates (or truncates) `path` for writing.
    pub fn create(path: &Path) -> io::Result<File> {
        #[cfg(feature = "sim")]
        if simulated() {
            return sim::File::create(path).map(|f| File::Sim(f, false));
        }
        std::fs::File::create(path).map(File::Std)
    }

    /// Opens an existing `path` for writing at byte `offset` (no truncation): a log
    /// segment's records go over the zeros written ahead of them (`storage`, "Space written
    /// ahead"), and past its end once those are used up.
    pub fn open_write_at(path: &Path, offset: u64) -> io::Result<File> {
        use std::io::{Seek, SeekFrom};
        let mut file = File::open_write(path)?;
        match &mut file {
            File::Std(f) => f.seek(SeekFrom::Start(offset))?,
            #[cfg(feature = "sim")]
            File::Sim(f, _) => f.seek(SeekFrom::Start(offset))?,
        };
        Ok(file)
    }

    /// Opens an existing `path` for writing (no truncation).
    pub fn open_write(path: &Path) -> io::Result<File> {
        #[cfg(feature = "sim")]
        if simulated() {
            return sim::OpenOptions::new()
                .write(true)
                .open(path)
                .map(|f| File::Sim(f, false));
        }
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map(File::Std)
    }

    /// Writes all of `bytes` at the file's position.
    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            File::Std(file) => file.write_all(bytes),
            #[cfg(feature = "sim")]
            File::Sim(file, append) => {
                still_simulated()?;
                write_by_sectors(file, *append, bytes)
            }
        }
    }

    /// fdatasync.
    pub fn sync_data(&self) -> io::Result<()> {
        match self {
            File::Std(file) => file.sync_data(),
            #[cfg(feature = "sim")]
            File::Sim(file, _) => {
                still_simulated()?;
                file.sync_data()
            }
        }
    }

    /// fsync.
    pub fn sync_all(&self) -> io::Result<()> {
        match self {
            File::Std(file) => file.sync_all(),
            #[cfg(feature = "sim")]
            File::Sim(file, _) => {
                still_simulated()?;
                file.sync_all()
            }
        }
    }

    /// Truncates or extends the file to `bytes`.
    pub fn set_len(&self, bytes: u64) -> io::Result<()> {
        match self {
            File::Std(file) => file.set_len(bytes),
            #[cfg(feature = "sim")]
            File::Sim(file, _) => {
                still_simulated()?;
                file.set_len(bytes)
            }
        }
    }
}

/// The sector of the simulated disk: a crash keeps or loses each one whole.
#[cfg(feature = "sim")]
pub const SECTOR_BYTES: u64 = 512;

/// Writes `bytes` as one write per disk sector it touches (at file offsets that are
/// multiples of [`SECTOR_BYTES`]), so that the simulated disk, which tears each pending
/// write on its own at a crash, keeps any subset of the sectors, in any order, with zeros
/// where the file's length covers a sector never written: a real disk's writeback. (One
/// write of many sectors would only ever lose a suffix.)
#[cfg(feature = "sim")]
fn write_by_sectors(file: &mut sim::File, append: bool, bytes: &[u8]) -> io::Result<()> {
    use std::io::Seek;
    // An append-mode file writes at its end; the cursor says where otherwise.
    let mut offset = if append {
        file.metadata()?.len()
    } else {
        file.stream_position()?
    };
    let mut rest = bytes;
    while !rest.is_empty() {
        let room = SECTOR_BYTES - offset % SECTOR_BYTES;
        let n = rest.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        file.write_all(&rest[..n])?;
        offset += n as u64;
        rest = &rest[n..];
    }
    Ok(())
}

/// A simulated file outlives its simulation when the host's tasks are dropped after the
/// simulation ended (a data dir's drop writes its user-space buffer out, `no-fsync`): turmoil's
/// disk is gone then, and reaching it would panic inside turmoil. An error instead, which the
/// drop ignores as it ignores every error.
#[cfg(feature = "sim")]
fn still_simulated() -> io::Result<()> {
    if simulated() {
        Ok(())
    } else {
        Err(io::Error::other(
            "a simulated file used after its simulation ended",
        ))
    }
}

/// Creates `path` and its missing parents.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    #[cfg(feature = "sim")]
    if simulated() {
        return sim::create_dir_all(path);
    }
    std::fs::create_dir_all(path)
}

/// Creates the directory `path`.
pub fn create_dir(path: &Path) -> io::Result<()> {
    #[cfg(feature = "sim")]
    if simulated() {
        return sim::create_dir(path);
    }
    std::fs::create_dir(path)
}

/// Removes `path` and everything under it.
pub fn remove_dir_all(path: &Path) -> io::Result<()> {
    #[cfg(feature = "sim")]
    if simulated() {
        return sim::remove_dir_all(path);
    }
    std::fs::remove_dir_all(path)
}

/// Removes the file `path`.
pub fn remove_file(path: &Path) -> io::Result<()> {
    #[cfg(feature = "sim")]
    if simulated() {
        return sim::remove_file(path);
    }
    std::fs::remove_file(path)
}

/// Renames `from` to `to`, replacing `to`.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(feature = "sim")]
    if simulated() {
        return sim::rename(from, to);
    }
    std::fs::rename(from, to)
}

/// The whole contents of `path`.
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    #[cfg(feature = "sim")]
    if simulated() {
        return sim::read(path);
    }
    std::fs::read(path)
}

/// Whether `path` exists.
pub fn exists(path: &Path) -> io::Result<bool> {
    #[cfg(feature = "sim")]
    if simulated() {
        return Ok(sim::exists(path));
    }
    path.try_exists()
}

/// The entries of the directory `path`: each one's path and file name.
pub fn read_dir(path: &Path) -> io::Result<Vec<(PathBuf, String)>> {
    #[cfg(feature = "sim")]
    if simulated() {
        let mut entries = Vec::new();
        for entry in sim::read_dir(path)? {
            let entry = entry?;
            entries.push((
                entry.path(),
                entry.file_name().to_string_lossy().into_owned(),
            ));
        }
        return Ok(entries);
    }
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        entries.push((
            entry.path(),
            entry.file_name().to_string_lossy().into_owned(),
        ));
    }
    Ok(entries)
}

/// fsyncs the directory `path`, so that the entries created or renamed in it survive a
/// crash.
pub fn sync_dir(path: &Path) -> io::Result<()> {
    #[cfg(feature = "sim")]
    if simulated() {
        return sim::sync_dir(path);
    }
    std::fs::File::open(path).and_then(|dir| dir.sync_all())
}
