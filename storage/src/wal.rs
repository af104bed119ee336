//! WAL objects: one object holding the batches of many partitions.
//!
//! A broker's flusher writes one WAL object per flush. Layout (version 1,
//! big-endian; see `docs/storage.md`):
//!
//! ```text
//! [data: the batches of partition A back to back][partition B]...
//! [footer: entry_count × 72-byte entries, sorted by (topic id, partition)]
//! [trailer: 24 bytes]
//! ```
//!
//! Entry: topic id (16), partition u32, reserved u32, data offset u64,
//! data length u64, first offset i64, last offset i64, max timestamp i64,
//! batch count u32, CRC-32C of the data range u32.
//!
//! Trailer: footer length u32, entry count u32, CRC-32C of (footer ‖ the two
//! preceding trailer fields) u32, version u16, reserved u16, magic `FLOEWAL1`.
//!
//! A reader fetches the tail first (one ranged GET usually covers trailer and
//! footer), then only the byte range of the partition it wants.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{BatchIter, BatchView, SplitBatch};
use crate::bytes_ext::{be_i64, be_u16, be_u32, be_u64};
use crate::error::{Result, StorageError};
use crate::ids::{ObjectRef, Offset, PartitionKey, TopicId};
use crate::pool::RangeRead;

pub const WAL_MAGIC: &[u8; 8] = b"FLOEWAL1";
pub const WAL_VERSION: u16 = 1;
pub const TRAILER_LEN: usize = 24;
pub const ENTRY_LEN: usize = 72;
/// How much of the tail a reader fetches first, hoping to get the whole footer.
pub const TAIL_PREFETCH: u64 = 64 * 1024;

/// Where one partition's batches sit in a WAL object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalEntry {
    pub partition: PartitionKey,
    pub data_offset: u64,
    pub data_len: u64,
    pub first_offset: Offset,
    pub last_offset: Offset,
    pub max_timestamp: i64,
    pub batch_count: u32,
    pub data_crc: u32,
}

impl WalEntry {
    pub fn byte_range(&self) -> std::ops::Range<u64> {
        self.data_offset..self.data_offset.saturating_add(self.data_len)
    }
}

/// Collects the batches of one flush and lays them out as a WAL object.
#[derive(Debug, Default)]
pub struct WalBuilder {
    parts: BTreeMap<PartitionKey, PartBuf>,
    bytes: u64,
}

#[derive(Debug)]
struct PartBuf {
    chunks: Vec<Bytes>,
    len: u64,
    first: i64,
    last: i64,
    max_ts: i64,
    crc: u32,
    /// Record batches appended (an append may carry several).
    batches: u32,
}

/// What [`WalBuilder`] reads of a batch's header.
#[derive(Debug)]
struct Head {
    base_offset: i64,
    last_offset: i64,
    max_timestamp: i64,
    whole_crc: u32,
    size: usize,
}

/// A finished WAL object: its bytes (as chunks, written without a copy) and its footer.
#[derive(Debug, Clone)]
pub struct WalObject {
    pub chunks: Vec<Bytes>,
    pub entries: Vec<WalEntry>,
    pub size: u64,
}

impl WalObject {
    /// The object as one payload for the store pool.
    pub fn payload(&self) -> object_store::PutPayload {
        self.chunks.iter().cloned().collect()
    }
}

impl WalBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one or more whole batches of `partition`, already assigned their
    /// offsets. Offsets within a partition must increase. Each batch's CRC
    /// must be right (checked when it was produced): the entry's data CRC is
    /// built from them rather than from reading the bytes once more.
    pub fn append(&mut self, partition: PartitionKey, batches: Bytes) -> Result<()> {
        let mut heads = Vec::new();
        for item in BatchIter::new(&batches, usize::MAX) {
            let (_, view): (usize, BatchView<'_>) = item?;
            heads.push(Head {
                base_offset: view.base_offset(),
                last_offset: view.last_offset(),
                max_timestamp: view.max_timestamp(),
                whole_crc: view.whole_crc(),
                size: view.size(),
            });
        }
        debug_assert_eq!(
            heads
                .iter()
                .fold(0, |crc, h| crate::crc::combine(crc, h.whole_crc, h.size)),
            crc32c::crc32c(&batches),
            "the batches are whole and their CRCs right"
        );
        self.add(partition, &heads, vec![batches])
    }

    /// [`WalBuilder::append`] for batches held as a header and the rest
    /// ([`SplitBatch`]): their pieces are written as they are.
    pub fn append_split(&mut self, partition: PartitionKey, batches: &[SplitBatch]) -> Result<()> {
        let heads: Vec<Head> = batches
            .iter()
            .map(|b| Head {
                base_offset: b.base_offset(),
                last_offset: b.last_offset(),
                max_timestamp: b.max_timestamp(),
                whole_crc: b.whole_crc(),
                size: b.len(),
            })
            .collect();
        let chunks = batches
            .iter()
            .flat_map(|b| b.pieces())
            .filter(|p| !p.is_empty())
            .cloned()
            .collect();
        self.add(partition, &heads, chunks)
    }

    fn add(&mut self, partition: PartitionKey, heads: &[Head], chunks: Vec<Bytes>) -> Result<()> {
        let mut crc = 0u32;
        let mut first = None;
        let mut last = None;
        let mut max_ts = i64::MIN;
        let mut count = 0u32;
        let mut len = 0u64;
        let prev_last = self.parts.get(&partition).map(|p| p.last);
        let mut expect_after = prev_last;
        for h in heads {
            if let Some(prev) = expect_after
                && h.base_offset <= prev
            {
                return Err(StorageError::invalid(format!(
                    "{partition}: batch at offset {} does not follow offset {prev}",
                    h.base_offset
                )));
            }
            crc = crate::crc::combine(crc, h.whole_crc, h.size);
            expect_after = Some(h.last_offset);
            first.get_or_insert(h.base_offset);
            last = Some(h.last_offset);
            max_ts = max_ts.max(h.max_timestamp);
            count = count.saturating_add(1);
            len += h.size as u64;
        }
        let (Some(first), Some(last)) = (first, last) else {
            return Err(StorageError::invalid("no batch to append"));
        };
        let part = self.parts.entry(partition).or_insert(PartBuf {
            chunks: Vec::new(),
            len: 0,
            first,
            last,
            max_ts,
            crc: 0,
            batches: 0,
        });
        part.batches = part.batches.saturating_add(count);
        part.crc = crate::crc::combine(part.crc, crc, len as usize);
        part.chunks.extend(chunks);
        part.len += len;
        part.last = last;
        part.max_ts = part.max_ts.max(max_ts);
        self.bytes += len;
        Ok(())
    }

    /// Takes a partition's batches out again (its later append failed).
    pub fn remove(&mut self, partition: &PartitionKey) {
        if let Some(p) = self.parts.remove(partition) {
            self.bytes -= p.len;
        }
    }

    /// Bytes of batch data appended so far.
    pub fn data_bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    pub fn finish(self) -> WalObject {
        let mut chunks = Vec::new();
        let mut entries = Vec::with_capacity(self.parts.len());
        let mut pos = 0u64;
        for (partition, part) in self.parts {
            entries.push(WalEntry {
                partition,
                data_offset: pos,
                data_len: part.len,
                first_offset: Offset(part.first),
                last_offset: Offset(part.last),
                max_timestamp: part.max_ts,
                batch_count: part.batches,
                data_crc: part.crc,
            });
            pos += part.len;
            chunks.extend(part.chunks);
        }
        let footer = encode_footer(&entries);
        let size = pos + footer.len() as u64;
        chunks.push(footer);
        WalObject {
            chunks,
            entries,
            size,
        }
    }
}

fn encode_footer(entries: &[WalEntry]) -> Bytes {
    let mut buf = BytesMut::with_capacity(entries.len() * ENTRY_LEN + TRAILER_LEN);
    for e in entries {
        buf.put_slice(e.partition.topic.as_bytes());
        buf.put_u32(e.partition.partition);
        buf.put_u32(0);
        buf.put_u64(e.data_offset);
        buf.put_u64(e.data_len);
        buf.put_i64(e.first_offset.0);
        buf.put_i64(e.last_offset.0);
        buf.put_i64(e.max_timestamp);
        buf.put_u32(e.batch_count);
        buf.put_u32(e.data_crc);
    }
    let footer_len = buf.len() as u32;
    buf.put_u32(footer_len);
    buf.put_u32(entries.len() as u32);
    let crc = crc32c::crc32c(&buf);
    buf.put_u32(crc);
    buf.put_u16(WAL_VERSION);
    buf.put_u16(0);
    buf.put_slice(WAL_MAGIC);
    buf.freeze()
}

/// The parsed trailer: how long the footer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalTrailer {
    pub footer_len: u32,
    pub entry_count: u32,
    pub footer_crc: u32,
    pub version: u16,
}

impl WalTrailer {
    /// Parses the last [`TRAILER_LEN`] bytes of an object of `object_size` bytes.
    pub fn parse(tail: &[u8], object_size: u64) -> Result<Self> {
        if tail.len() != TRAILER_LEN || object_size < TRAILER_LEN as u64 {
            return Err(StorageError::corrupt(format!(
                "WAL object of {object_size} bytes is too small for its trailer"
            )));
        }
        if &tail[16..24] != WAL_MAGIC {
            return Err(StorageError::corrupt("not a WAL object: bad magic"));
        }
        let version = be_u16(tail, 12).unwrap_or_default();
        if version != WAL_VERSION {
            return Err(StorageError::corrupt(format!(
                "unsupported WAL version {version}"
            )));
        }
        let t = WalTrailer {
            footer_len: be_u32(tail, 0).unwrap_or_default(),
            entry_count: be_u32(tail, 4).unwrap_or_default(),
            footer_crc: be_u32(tail, 8).unwrap_or_default(),
            version,
        };
        if t.footer_len as u64 != t.entry_count as u64 * ENTRY_LEN as u64 {
            return Err(StorageError::corrupt(format!(
                "WAL footer length {} does not fit {} entries",
                t.footer_len, t.entry_count
            )));
        }
        if t.footer_len as u64 + TRAILER_LEN as u64 > object_size {
            return Err(StorageError::corrupt(format!(
                "WAL footer of {} bytes exceeds the object's {object_size} bytes",
                t.footer_len
            )));
        }
        Ok(t)
    }

    /// Bytes of footer plus trailer at the end of the object.
    pub fn tail_len(&self) -> u64 {
        self.footer_len as u64 + TRAILER_LEN as u64
    }
}

/// The index at the end of a WAL object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalFooter {
    pub entries: Vec<WalEntry>,
}

impl WalFooter {
    /// Parses footer and trailer from `tail`, which must be the last bytes of an
    /// object of `object_size` bytes (at least footer + trailer of them).
    pub fn parse(tail: &[u8], object_size: u64) -> Result<Self> {
        if tail.len() < TRAILER_LEN || tail.len() as u64 > object_size {
            return Err(StorageError::corrupt("WAL tail shorter than its trailer"));
        }
        let trailer = WalTrailer::parse(&tail[tail.len() - TRAILER_LEN..], object_size)?;
        let need = trailer.tail_len() as usize;
        if tail.len() < need {
            return Err(StorageError::corrupt(format!(
                "WAL tail of {} bytes is shorter than footer and trailer ({need})",
                tail.len()
            )));
        }
        let footer_and_lens = &tail[tail.len() - need..tail.len() - TRAILER_LEN + 8];
        let crc = crc32c::crc32c(footer_and_lens);
        if crc != trailer.footer_crc {
            return Err(StorageError::corrupt(format!(
                "WAL footer CRC mismatch: trailer says {:#010x}, footer has {crc:#010x}",
                trailer.footer_crc
            )));
        }
        let data_end = object_size - trailer.tail_len();
        let footer = &footer_and_lens[..trailer.footer_len as usize];
        let mut entries = Vec::with_capacity(trailer.entry_count as usize);
        for raw in footer.chunks_exact(ENTRY_LEN) {
            let mut topic = [0u8; 16];
            topic.copy_from_slice(&raw[..16]);
            let e = WalEntry {
                partition: PartitionKey::new(
                    TopicId::from_bytes(topic),
                    be_u32(raw, 16).unwrap_or_default(),
                ),
                data_offset: be_u64(raw, 24).unwrap_or_default(),
                data_len: be_u64(raw, 32).unwrap_or_default(),
                first_offset: Offset(be_i64(raw, 40).unwrap_or_default()),
                last_offset: Offset(be_i64(raw, 48).unwrap_or_default()),
                max_timestamp: be_i64(raw, 56).unwrap_or_default(),
                batch_count: be_u32(raw, 64).unwrap_or_default(),
                data_crc: be_u32(raw, 68).unwrap_or_default(),
            };
            let end = e.data_offset.checked_add(e.data_len);
            if end.is_none_or(|end| end > data_end) {
                return Err(StorageError::corrupt(format!(
                    "WAL entry for {} points past the data section",
                    e.partition
                )));
            }
            if e.first_offset > e.last_offset {
                return Err(StorageError::corrupt(format!(
                    "WAL entry for {} has first offset {} after last {}",
                    e.partition, e.first_offset, e.last_offset
                )));
            }
            if let Some(prev) = entries.last().map(|p: &WalEntry| p.partition)
                && prev >= e.partition
            {
                return Err(StorageError::corrupt("WAL footer entries are not sorted"));
            }
            entries.push(e);
        }
        Ok(WalFooter { entries })
    }

    pub fn entry(&self, partition: &PartitionKey) -> Option<&WalEntry> {
        self.entries
            .binary_search_by(|e| e.partition.cmp(partition))
            .ok()
            .map(|i| &self.entries[i])
    }
}

/// Reads WAL objects through any [`RangeRead`] (the pool, or the cache in front of it).
#[derive(Debug, Clone)]
pub struct WalReader<R> {
    reader: R,
}

impl<R: RangeRead> WalReader<R> {
    pub fn new(reader: R) -> Self {
        Self { reader }
    }

    /// Reads and checks the footer, with one ranged read when it is small.
    pub async fn footer(&self, obj: &ObjectRef) -> Result<WalFooter> {
        if obj.size < TRAILER_LEN as u64 {
            return Err(StorageError::corrupt(format!(
                "{obj} is too small to be a WAL object"
            )));
        }
        let first = obj.size.min(TAIL_PREFETCH);
        let tail = self.read_exact(obj, obj.size - first..obj.size).await?;
        let trailer = WalTrailer::parse(&tail[tail.len() - TRAILER_LEN..], obj.size)?;
        let need = trailer.tail_len();
        if need <= tail.len() as u64 {
            return WalFooter::parse(&tail, obj.size);
        }
        let tail = self.read_exact(obj, obj.size - need..obj.size).await?;
        WalFooter::parse(&tail, obj.size)
    }

    async fn read_exact(&self, obj: &ObjectRef, range: std::ops::Range<u64>) -> Result<Bytes> {
        let want = range.end - range.start;
        let bytes = self.reader.read_range(obj, range).await?;
        if bytes.len() as u64 != want {
            return Err(StorageError::new(
                crate::ErrorKind::Unavailable,
                format!("{obj}: asked for {want} bytes, got {}", bytes.len()),
            ));
        }
        Ok(bytes)
    }

    /// Reads one partition's batches, checking the range's CRC.
    pub async fn read_entry(&self, obj: &ObjectRef, entry: &WalEntry) -> Result<Bytes> {
        let data = self.reader.read_range(obj, entry.byte_range()).await?;
        let crc = crc32c::crc32c(&data);
        if crc != entry.data_crc {
            return Err(StorageError::corrupt(format!(
                "{obj}: data of {} fails its CRC",
                entry.partition
            )));
        }
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Compression;
    use crate::records::{BatchBuilder, RecordSpec};

    fn batch(base: i64, n: usize, ts: i64) -> Bytes {
        let mut b = BatchBuilder::new(base, ts);
        for i in 0..n {
            b.push(RecordSpec::new(None, Some(vec![i as u8; 20]), i as i64));
        }
        b.build(Compression::None).unwrap()
    }

    fn sample() -> (Vec<PartitionKey>, WalObject) {
        let t1 = TopicId::random();
        let t2 = TopicId::random();
        let keys = vec![
            PartitionKey::new(t1, 0),
            PartitionKey::new(t1, 3),
            PartitionKey::new(t2, 1),
        ];
        let mut w = WalBuilder::new();
        w.append(keys[1], batch(10, 3, 500)).unwrap();
        w.append(keys[0], batch(0, 2, 100)).unwrap();
        w.append(keys[1], batch(13, 1, 900)).unwrap();
        w.append(keys[2], batch(7, 4, 50)).unwrap();
        (keys, w.finish())
    }

    fn flatten(o: &WalObject) -> Vec<u8> {
        o.chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    fn split(b: &Bytes) -> SplitBatch {
        let at = crate::batch::HEADER_LEN;
        SplitBatch::new(b.slice(..at), b.slice(at..)).unwrap()
    }

    #[test]
    fn split_batches_make_the_same_object_as_whole_ones() {
        let key = PartitionKey::new(TopicId::random(), 2);
        let (a, b, c) = (batch(10, 3, 500), batch(13, 1, 900), batch(14, 5, 700));
        let mut whole = WalBuilder::new();
        whole.append(key, a.clone()).unwrap();
        whole
            .append(key, [b.clone(), c.clone()].concat().into())
            .unwrap();
        let mut split_up = WalBuilder::new();
        split_up.append_split(key, &[split(&a)]).unwrap();
        split_up.append_split(key, &[split(&b), split(&c)]).unwrap();
        let (w, s) = (whole.finish(), split_up.finish());
        assert_eq!(
            w.entries, s.entries,
            "offsets, timestamps, count and data CRC"
        );
        assert_eq!(flatten(&w), flatten(&s));
        assert_eq!(s.entries[0].data_crc, crc32c::crc32c(&[a, b, c].concat()));
        assert!(
            split_up_refuses_what_does_not_follow(key, &split(&batch(12, 1, 0))),
            "offsets must increase"
        );
    }

    fn split_up_refuses_what_does_not_follow(key: PartitionKey, late: &SplitBatch) -> bool {
        let mut w = WalBuilder::new();
        w.append_split(key, &[split(&batch(10, 3, 500))]).unwrap();
        w.append_split(key, std::slice::from_ref(late)).is_err()
    }

    #[test]
    fn footer_round_trips_and_ranges_hold_the_batches() {
        let (keys, obj) = sample();
        let bytes = flatten(&obj);
        assert_eq!(bytes.len() as u64, obj.size);
        let footer = WalFooter::parse(&bytes, obj.size).unwrap();
        assert_eq!(footer.entries, obj.entries);
        let e = footer.entry(&keys[1]).unwrap();
        assert_eq!((e.first_offset, e.last_offset), (Offset(10), Offset(13)));
        assert_eq!(e.max_timestamp, 900);
        assert_eq!(e.batch_count, 2);
        let data = &bytes[e.data_offset as usize..(e.data_offset + e.data_len) as usize];
        assert_eq!(crc32c::crc32c(data), e.data_crc);
        let bases: Vec<i64> = BatchIter::new(data, usize::MAX)
            .map(|r| r.unwrap().1.base_offset())
            .collect();
        assert_eq!(bases, vec![10, 13]);
        assert!(
            footer
                .entry(&PartitionKey::new(TopicId::random(), 0))
                .is_none()
        );
    }

    #[test]
    fn the_batch_count_counts_batches_not_appends() {
        let key = PartitionKey::new(TopicId::random(), 0);
        let mut both = bytes::BytesMut::new();
        both.extend_from_slice(&batch(0, 2, 100));
        both.extend_from_slice(&batch(2, 1, 200));
        let mut w = WalBuilder::new();
        w.append(key, both.freeze()).unwrap();
        w.append(key, batch(3, 1, 300)).unwrap();
        let obj = w.finish();
        assert_eq!(obj.entries[0].batch_count, 3);
    }

    #[test]
    fn out_of_order_batches_are_refused() {
        let p = PartitionKey::new(TopicId::random(), 0);
        let mut w = WalBuilder::new();
        w.append(p, batch(10, 3, 0)).unwrap();
        let err = w.append(p, batch(12, 1, 0)).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
        assert!(w.append(p, Bytes::from_static(b"garbage")).is_err());
    }

    #[test]
    fn corrupt_footers_are_errors() {
        let (_, obj) = sample();
        let good = flatten(&obj);
        let n = good.len();
        // Every single-byte flip in footer or trailer is caught.
        let footer_start = n - TRAILER_LEN - obj.entries.len() * ENTRY_LEN;
        for at in footer_start..n {
            if (n - 10..n - 8).contains(&at) {
                // reserved u16 in the trailer is not covered.
                continue;
            }
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            let res = WalFooter::parse(&bad, n as u64);
            assert!(
                res.is_err(),
                "flip at {at} (footer starts {footer_start}) went unnoticed"
            );
        }
        // Truncated objects.
        for cut in [0, 5, TRAILER_LEN - 1, TRAILER_LEN, TRAILER_LEN + 10] {
            assert!(WalFooter::parse(&good[n - cut..], cut as u64).is_err());
        }
        // A huge entry count on a small object: an error, no allocation.
        let mut bad = good.clone();
        bad[n - 20..n - 16].copy_from_slice(&u32::MAX.to_be_bytes());
        bad[n - 24..n - 20]
            .copy_from_slice(&(u32::MAX / ENTRY_LEN as u32 * ENTRY_LEN as u32).to_be_bytes());
        assert!(WalFooter::parse(&bad, n as u64).is_err());
    }
}
