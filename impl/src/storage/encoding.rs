//! The bytes written: the records of the log and the snapshot as serde_json payloads,
//! framed as `[u32 len][u32 crc32(payload)][u32 crc32(the previous 8 bytes)][payload]` after
//! a file header of magic and version (the format is in the module docs of `storage`).
//! The read side of each shape is here too, next to the write side, so the two stay alike.

use serde::{Deserialize, Serialize};

use super::{
    FILE_HEADER_BYTES, FORMAT_VERSION, RECORD_BYTES_MAX, RECORD_HEADER_BYTES, SEGMENT_MAGIC,
    StorageError,
};
use crate::raft::{Durable, Entry, HardState, Index, Term};

/// A record as written (borrowing the state it encodes).
#[derive(Serialize)]
pub(super) enum RecordRef<'a> {
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
pub(super) enum Record {
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

pub(super) fn file_header(magic: &[u8; 4]) -> Vec<u8> {
    let mut header = Vec::with_capacity(FILE_HEADER_BYTES);
    header.extend_from_slice(magic);
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header.extend_from_slice(&0u16.to_le_bytes());
    header
}

pub(super) fn encode_payload<T: Serialize>(
    out: &mut Vec<u8>,
    value: &T,
) -> Result<(), StorageError> {
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
pub(super) fn encode_record(out: &mut Vec<u8>, record: &RecordRef<'_>) -> Result<(), StorageError> {
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

pub(super) fn push_frame(out: &mut Vec<u8>, payload: &[u8]) {
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

/// The bytes of a segment whose checkpoint is `state`: the file header and one record.
pub(super) fn segment_file(state: &Durable) -> Result<Vec<u8>, StorageError> {
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
