//! A share-partition's timer bucket: delayed records' (due time, offset)
//! pairs, sorted by due time then offset, written once as one object and
//! read back a chunk at a time in due order (`docs/storage.md`, "Timer
//! buckets"). The broker keeps a few thousand delayed records per
//! share-partition in its state in the metadata service; past that it
//! writes the later-due ones here, so a backlog of any size costs the
//! owner a bounded amount of memory and state.
//!
//! Layout, all integers big-endian:
//!
//! ```text
//! header (16 bytes): "FLTI" | version u8 = 1 | 3 zero bytes | count u32 | crc32c u32 of the 12 bytes before
//! chunk k (k = 0, 1, …): min(CHUNK, count - k·CHUNK) entries of 16 bytes (due ms u64, offset i64)
//!                        | crc32c u32 of those entries
//! ```
//!
//! A chunk is the unit of reading: its byte range follows from `count`
//! alone ([`chunk_range`]), and its CRC checks it without the rest.

use bytes::{BufMut, Bytes, BytesMut};

/// Entries per chunk.
pub const CHUNK: u32 = 256;
/// The header's length in bytes.
pub const HEADER: u64 = 16;
/// One entry's length in bytes.
const ENTRY: u64 = 16;
const MAGIC: &[u8; 4] = b"FLTI";
const VERSION: u8 = 1;
/// The most entries one bucket holds (16 MiB of entries); a header
/// claiming more is refused before anything is allocated.
pub const MAX_ENTRIES: u32 = 1 << 20;

/// One delayed record: not to be delivered before `due_ms` (epoch ms).
/// Ordered by due time, then offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerEntry {
    pub due_ms: u64,
    pub offset: i64,
}

/// Why a bucket's bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimerError {
    #[error("timer bucket: {0}")]
    Malformed(&'static str),
    #[error("timer bucket: CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    BadCrc { stored: u32, computed: u32 },
}

/// The bytes of a bucket holding `entries` (sorted, at most
/// [`MAX_ENTRIES`]; the caller sorts).
pub fn encode(entries: &[TimerEntry]) -> Result<Bytes, TimerError> {
    if entries.len() > MAX_ENTRIES as usize {
        return Err(TimerError::Malformed("more entries than a bucket holds"));
    }
    if entries.windows(2).any(|w| w[0] > w[1]) {
        return Err(TimerError::Malformed("entries out of order"));
    }
    let count = entries.len() as u32;
    let mut out = BytesMut::with_capacity(object_size(count) as usize);
    out.put_slice(MAGIC);
    out.put_u8(VERSION);
    out.put_bytes(0, 3);
    out.put_u32(count);
    let crc = crc32c::crc32c(&out[..12]);
    out.put_u32(crc);
    for chunk in entries.chunks(CHUNK as usize) {
        let start = out.len();
        for e in chunk {
            out.put_u64(e.due_ms);
            out.put_i64(e.offset);
        }
        let crc = crc32c::crc32c(&out[start..]);
        out.put_u32(crc);
    }
    Ok(out.freeze())
}

/// The size of a bucket of `count` entries.
pub fn object_size(count: u32) -> u64 {
    let chunks = u64::from(count.div_ceil(CHUNK));
    HEADER + u64::from(count) * ENTRY + chunks * 4
}

/// The entry count a bucket's header gives.
pub fn decode_header(bytes: &[u8]) -> Result<u32, TimerError> {
    let header = bytes
        .get(..HEADER as usize)
        .ok_or(TimerError::Malformed("shorter than its header"))?;
    if &header[..4] != MAGIC {
        return Err(TimerError::Malformed("not a timer bucket"));
    }
    if header[4] != VERSION {
        return Err(TimerError::Malformed("unknown version"));
    }
    if header[5..8] != [0, 0, 0] {
        return Err(TimerError::Malformed("reserved bytes set"));
    }
    let stored = u32::from_be_bytes([header[12], header[13], header[14], header[15]]);
    let computed = crc32c::crc32c(&header[..12]);
    if stored != computed {
        return Err(TimerError::BadCrc { stored, computed });
    }
    let count = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    if count > MAX_ENTRIES {
        return Err(TimerError::Malformed("more entries than a bucket holds"));
    }
    Ok(count)
}

/// The chunk holding entry `index` of a bucket of `count` entries: the
/// index of its first entry, and its byte range (entries and CRC).
pub fn chunk_range(count: u32, index: u32) -> Option<(u32, std::ops::Range<u64>)> {
    if index >= count {
        return None;
    }
    let k = index / CHUNK;
    let first = k * CHUNK;
    let len = (count - first).min(CHUNK);
    let start = HEADER + u64::from(k) * (u64::from(CHUNK) * ENTRY + 4);
    Some((first, start..start + u64::from(len) * ENTRY + 4))
}

/// The entries of one chunk (as [`chunk_range`] gives its bytes), checked
/// against its CRC and in order.
pub fn decode_chunk(bytes: &[u8]) -> Result<Vec<TimerEntry>, TimerError> {
    let Some(body_len) = bytes.len().checked_sub(4) else {
        return Err(TimerError::Malformed("a chunk without its CRC"));
    };
    let (body, crc) = bytes.split_at(body_len);
    if body.is_empty()
        || !(body.len() as u64).is_multiple_of(ENTRY)
        || body.len() as u64 > ENTRY * u64::from(CHUNK)
    {
        return Err(TimerError::Malformed("a chunk of a wrong length"));
    }
    let stored = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(TimerError::BadCrc { stored, computed });
    }
    let entries: Vec<TimerEntry> = body
        .chunks_exact(ENTRY as usize)
        .map(|e| {
            let mut due = [0u8; 8];
            let mut offset = [0u8; 8];
            due.copy_from_slice(&e[..8]);
            offset.copy_from_slice(&e[8..]);
            TimerEntry {
                due_ms: u64::from_be_bytes(due),
                offset: i64::from_be_bytes(offset),
            }
        })
        .collect();
    if entries.windows(2).any(|w| w[0] > w[1]) {
        return Err(TimerError::Malformed("entries out of order"));
    }
    Ok(entries)
}

/// A whole bucket's entries (tools and tests; the broker reads chunks).
pub fn decode(bytes: &[u8]) -> Result<Vec<TimerEntry>, TimerError> {
    let count = decode_header(bytes)?;
    if bytes.len() as u64 != object_size(count) {
        return Err(TimerError::Malformed("length does not match the count"));
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut index = 0;
    while let Some((_, range)) = chunk_range(count, index) {
        let chunk = decode_chunk(&bytes[range.start as usize..range.end as usize])?;
        if out.last().zip(chunk.first()).is_some_and(|(a, b)| a > b) {
            return Err(TimerError::Malformed("entries out of order"));
        }
        index += chunk.len() as u32;
        out.extend(chunk);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn entries(n: u32) -> Vec<TimerEntry> {
        (0..n)
            .map(|i| TimerEntry {
                due_ms: 1_000 + u64::from(i / 3),
                offset: i64::from(i) * 7,
            })
            .collect()
    }

    #[test]
    fn a_bucket_reads_back_whole_and_by_chunk() {
        for n in [0, 1, 255, 256, 257, 1_000] {
            let e = entries(n);
            let bytes = encode(&e).unwrap();
            assert_eq!(bytes.len() as u64, object_size(n));
            assert_eq!(decode_header(&bytes).unwrap(), n);
            assert_eq!(decode(&bytes).unwrap(), e);
            let mut index = 0;
            let mut read = Vec::new();
            while let Some((first, range)) = chunk_range(n, index) {
                assert_eq!(first, index);
                let chunk = decode_chunk(&bytes[range.start as usize..range.end as usize]).unwrap();
                index += chunk.len() as u32;
                read.extend(chunk);
            }
            assert_eq!(read, e);
            // An index inside a chunk names that chunk.
            if n > 300 {
                assert_eq!(chunk_range(n, 300).unwrap().0, 256);
            }
        }
    }

    #[test]
    fn damaged_or_foreign_bytes_are_refused() {
        let bytes = encode(&entries(300)).unwrap();
        let mut flipped = bytes.to_vec();
        flipped[40] ^= 1;
        assert!(matches!(decode(&flipped), Err(TimerError::BadCrc { .. })));
        let mut header = bytes.to_vec();
        header[9] ^= 1;
        assert!(matches!(
            decode_header(&header),
            Err(TimerError::BadCrc { .. })
        ));
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(b"FLTX").is_err());
        assert!(decode_chunk(&[0, 0, 0]).is_err());
        assert!(decode_chunk(&[0; 4]).is_err());
        // In order only.
        let unsorted = [
            TimerEntry {
                due_ms: 2,
                offset: 0,
            },
            TimerEntry {
                due_ms: 1,
                offset: 1,
            },
        ];
        assert!(encode(&unsorted).is_err());
        // A header claiming a huge count is refused before any allocation.
        let mut huge = bytes[..16].to_vec();
        huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        let crc = crc32c::crc32c(&huge[..12]);
        huge[12..16].copy_from_slice(&crc.to_be_bytes());
        assert!(decode_header(&huge).is_err());
    }
}
