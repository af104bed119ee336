//! Segments: a partition's compacted log, as three objects per segment.
//!
//! - `.log`: whole record batches back to back, exactly as Kafka stores them.
//! - `.index`: sparse offset index. 16-byte header (magic `FLIX`, version u16,
//!   entry length u16 = 8, base offset i64), then entries of
//!   (offset − base: u32, byte position in `.log`: u32), one per
//!   `index_interval_bytes` of log and always one for the first batch.
//! - `.timeindex`: sparse time index. 16-byte header (magic `FLTI`, version,
//!   entry length = 16, base offset), then entries of (timestamp: i64,
//!   offset − base: u32, position: u32), where `timestamp` is the largest
//!   timestamp of every batch *before* `position`. Entries are written at the
//!   same points as the offset index, only when that timestamp grew.
//!
//! Objects are named `{prefix}/{base_offset:020}.{token}.{log|index|timeindex}`:
//! the write token keeps a rewritten segment from ever reusing a key.
//!
//! Lookups binary-search: the segment with the largest base ≤ target, then the
//! index entry with the largest offset ≤ target, then a short scan of batch
//! headers to the batch that holds the target.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{BatchError, BatchIter, BatchView};
use crate::bytes_ext::{be_i64, be_u16, be_u32};
use crate::error::{Result, StorageError};
use crate::ids::{ObjectKey, ObjectRef, Offset};
use crate::pool::{RangeRead, StorePool};
use crate::records::decode_records;

pub const INDEX_MAGIC: &[u8; 4] = b"FLIX";
pub const TIME_INDEX_MAGIC: &[u8; 4] = b"FLTI";
pub const INDEX_VERSION: u16 = 1;
pub const INDEX_HEADER_LEN: usize = 16;
pub const OFFSET_ENTRY_LEN: usize = 8;
pub const TIME_ENTRY_LEN: usize = 16;
pub const DEFAULT_INDEX_INTERVAL_BYTES: u64 = 4096;
/// How many bytes of `.log` a scan reads at a time.
const SCAN_CHUNK: u64 = 64 * 1024;

fn write_header(buf: &mut BytesMut, magic: &[u8; 4], entry_len: usize, base: i64) {
    buf.put_slice(magic);
    buf.put_u16(INDEX_VERSION);
    buf.put_u16(entry_len as u16);
    buf.put_i64(base);
}

fn parse_header(bytes: &[u8], magic: &[u8; 4], entry_len: usize, what: &str) -> Result<i64> {
    if bytes.len() < INDEX_HEADER_LEN {
        return Err(StorageError::corrupt(format!(
            "{what} of {} bytes is shorter than its header",
            bytes.len()
        )));
    }
    if &bytes[..4] != magic {
        return Err(StorageError::corrupt(format!("{what}: bad magic")));
    }
    let version = be_u16(bytes, 4).unwrap_or_default();
    if version != INDEX_VERSION {
        return Err(StorageError::corrupt(format!(
            "{what}: unsupported version {version}"
        )));
    }
    let len = be_u16(bytes, 6).unwrap_or_default() as usize;
    if len != entry_len {
        return Err(StorageError::corrupt(format!(
            "{what}: entry length {len}, expected {entry_len}"
        )));
    }
    if !(bytes.len() - INDEX_HEADER_LEN).is_multiple_of(entry_len) {
        return Err(StorageError::corrupt(format!(
            "{what}: {} bytes of entries is not a whole number of {entry_len}-byte entries",
            bytes.len() - INDEX_HEADER_LEN
        )));
    }
    let base = be_i64(bytes, 8).unwrap_or_default();
    // Offsets are never negative, and base + any u32 delta must fit an i64.
    if !(0..=i64::MAX - u32::MAX as i64).contains(&base) {
        return Err(StorageError::corrupt(format!(
            "{what}: impossible base offset {base}"
        )));
    }
    Ok(base)
}

/// The entries of an index file, read in place: binary search over the raw
/// bytes, no per-entry allocation.
#[derive(Debug, Clone)]
struct RawIndex {
    bytes: Bytes,
    base_offset: i64,
    entry_len: usize,
}

impl RawIndex {
    fn parse(bytes: Bytes, magic: &[u8; 4], entry_len: usize, what: &str) -> Result<Self> {
        let base_offset = parse_header(&bytes, magic, entry_len, what)?;
        Ok(Self {
            bytes,
            base_offset,
            entry_len,
        })
    }

    fn len(&self) -> usize {
        (self.bytes.len() - INDEX_HEADER_LEN) / self.entry_len
    }

    fn entry(&self, i: usize) -> Option<&[u8]> {
        if i >= self.len() {
            return None;
        }
        let at = INDEX_HEADER_LEN + i * self.entry_len;
        self.bytes.get(at..at + self.entry_len)
    }

    /// The number of leading entries for which `before` holds (entries are
    /// sorted so that it holds for a prefix).
    fn partition_point(&self, before: impl Fn(&[u8]) -> bool) -> usize {
        let (mut lo, mut hi) = (0usize, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.entry(mid).is_some_and(&before) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Checks every entry against the one before it (`increases`) and that
    /// every position (`pos`) is inside a log of `log_size` bytes.
    fn validate(
        &self,
        log_size: u64,
        what: &str,
        pos: impl Fn(&[u8]) -> u32,
        increases: impl Fn(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let mut prev: Option<&[u8]> = None;
        for i in 0..self.len() {
            let e = self
                .entry(i)
                .ok_or_else(|| StorageError::corrupt(format!("{what}: entry {i} is missing")))?;
            let p = pos(e);
            if p as u64 >= log_size.max(1) {
                return Err(StorageError::corrupt(format!(
                    "{what} entry {i} points past the log ({p} ≥ {log_size})"
                )));
            }
            if prev.is_some_and(|before| !increases(before, e)) {
                return Err(StorageError::corrupt(format!(
                    "{what} entry {i} does not increase"
                )));
            }
            prev = Some(e);
        }
        Ok(())
    }
}

/// A parsed `.index`.
#[derive(Debug, Clone)]
pub struct OffsetIndex {
    raw: RawIndex,
}

impl OffsetIndex {
    /// Checks the header and size; entries are read lazily.
    pub fn parse(bytes: Bytes) -> Result<Self> {
        let raw = RawIndex::parse(bytes, INDEX_MAGIC, OFFSET_ENTRY_LEN, "offset index")?;
        Ok(Self { raw })
    }

    pub fn base_offset(&self) -> i64 {
        self.raw.base_offset
    }

    pub fn len(&self) -> usize {
        self.raw.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn decode(&self, e: &[u8]) -> (i64, u32) {
        let rel = be_u32(e, 0).unwrap_or_default();
        let pos = be_u32(e, 4).unwrap_or_default();
        (self.raw.base_offset.saturating_add(rel as i64), pos)
    }

    /// Entry `i` as (absolute offset, position).
    pub fn entry(&self, i: usize) -> Option<(i64, u32)> {
        self.raw.entry(i).map(|e| self.decode(e))
    }

    /// Checks every entry: offsets and positions strictly increase and stay
    /// inside a log of `log_size` bytes.
    pub fn validate(&self, log_size: u64) -> Result<()> {
        self.raw.validate(
            log_size,
            "offset index",
            |e| self.decode(e).1,
            |a, b| {
                let (a, b) = (self.decode(a), self.decode(b));
                b.0 > a.0 && b.1 > a.1
            },
        )
    }

    /// Position of the indexed batch with the largest offset ≤ `target`
    /// (0 when the target is before every entry).
    pub fn lookup(&self, target: i64) -> u32 {
        let n = self.raw.partition_point(|e| self.decode(e).0 <= target);
        n.checked_sub(1)
            .and_then(|i| self.entry(i))
            .map_or(0, |(_, pos)| pos)
    }
}

/// A parsed `.timeindex`.
#[derive(Debug, Clone)]
pub struct TimeIndex {
    raw: RawIndex,
}

impl TimeIndex {
    pub fn parse(bytes: Bytes) -> Result<Self> {
        let raw = RawIndex::parse(bytes, TIME_INDEX_MAGIC, TIME_ENTRY_LEN, "time index")?;
        Ok(Self { raw })
    }

    pub fn base_offset(&self) -> i64 {
        self.raw.base_offset
    }

    pub fn len(&self) -> usize {
        self.raw.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn decode(&self, e: &[u8]) -> (i64, i64, u32) {
        let ts = be_i64(e, 0).unwrap_or_default();
        let rel = be_u32(e, 8).unwrap_or_default();
        let pos = be_u32(e, 12).unwrap_or_default();
        (ts, self.raw.base_offset.saturating_add(rel as i64), pos)
    }

    /// Entry `i` as (largest timestamp before it, absolute offset, position).
    pub fn entry(&self, i: usize) -> Option<(i64, i64, u32)> {
        self.raw.entry(i).map(|e| self.decode(e))
    }

    pub fn validate(&self, log_size: u64) -> Result<()> {
        self.raw.validate(
            log_size,
            "time index",
            |e| self.decode(e).2,
            |a, b| {
                let (a, b) = (self.decode(a), self.decode(b));
                b.0 > a.0 && b.1 > a.1 && b.2 > a.2
            },
        )
    }

    /// Position from which to scan for the first record with timestamp ≥
    /// `target`: the last entry whose "largest timestamp before" is < target.
    pub fn lookup(&self, target: i64) -> u32 {
        let n = self.raw.partition_point(|e| self.decode(e).0 < target);
        n.checked_sub(1)
            .and_then(|i| self.entry(i))
            .map_or(0, |(_, _, pos)| pos)
    }
}

/// A segment laid out in memory, ready to be written.
#[derive(Debug, Clone)]
pub struct BuiltSegment {
    pub base_offset: Offset,
    pub last_offset: Offset,
    pub max_timestamp: i64,
    pub log: Vec<Bytes>,
    pub log_size: u64,
    pub index: Bytes,
    pub timeindex: Bytes,
}

/// Builds a segment from a sequence of batches with increasing offsets.
#[derive(Debug)]
pub struct SegmentBuilder {
    interval: u64,
    base: Option<i64>,
    last: i64,
    max_ts: i64,
    log: Vec<Bytes>,
    pos: u64,
    since_index: u64,
    index: BytesMut,
    timeindex: BytesMut,
    last_time_entry: i64,
}

impl SegmentBuilder {
    pub fn new(index_interval_bytes: u64) -> Self {
        Self {
            interval: index_interval_bytes.max(1),
            base: None,
            last: i64::MIN,
            max_ts: i64::MIN,
            log: Vec::new(),
            pos: 0,
            since_index: 0,
            index: BytesMut::new(),
            timeindex: BytesMut::new(),
            last_time_entry: i64::MIN,
        }
    }

    /// A builder for a segment that starts at `base_offset` even if its
    /// first batch starts later (a cleaned segment whose first records were
    /// compacted away keeps the offsets it covers: its index is relative to
    /// `base_offset`).
    pub fn with_base(index_interval_bytes: u64, base_offset: i64) -> Self {
        let mut b = Self::new(index_interval_bytes);
        b.base = Some(base_offset);
        b.last = base_offset.saturating_sub(1);
        b
    }

    pub fn size(&self) -> u64 {
        self.pos
    }

    /// Whether adding `bytes` more with offsets up to `last_offset` would
    /// overflow the index's 32-bit relative offsets or positions.
    pub fn would_overflow(&self, bytes: u64, last_offset: i64) -> bool {
        let pos_overflow = self.pos + bytes > u32::MAX as u64;
        let off_overflow = self
            .base
            .is_some_and(|b| last_offset.saturating_sub(b) > u32::MAX as i64);
        pos_overflow || off_overflow
    }

    /// Appends whole batches (one or more, back to back).
    pub fn append(&mut self, batches: Bytes) -> Result<()> {
        let mut staged = Vec::new();
        for item in BatchIter::new(&batches, usize::MAX) {
            let (at, v) = item?;
            staged.push((
                at,
                v.size(),
                v.base_offset(),
                v.last_offset(),
                v.max_timestamp(),
            ));
        }
        if staged.is_empty() {
            return Err(StorageError::invalid("no batch to append"));
        }
        let last_of_all = staged.last().map(|s| s.3).unwrap_or_default();
        if self.would_overflow(batches.len() as u64, last_of_all) {
            return Err(StorageError::invalid(
                "segment would exceed 4 GiB or 2^32 offsets; start a new segment",
            ));
        }
        // Check order first so a refused append leaves the builder unchanged.
        let mut prev = self.last;
        for &(_, _, base, last, _) in &staged {
            if self.base.is_some() && base <= prev {
                return Err(StorageError::invalid(format!(
                    "batch at offset {base} does not follow offset {prev}"
                )));
            }
            prev = last;
        }
        for (_, size, base, last, max_ts) in staged {
            let base_offset = *self.base.get_or_insert(base);
            let rel = (base - base_offset) as u32;
            let pos = self.pos as u32;
            if self.index.is_empty() {
                write_header(&mut self.index, INDEX_MAGIC, OFFSET_ENTRY_LEN, base_offset);
                write_header(
                    &mut self.timeindex,
                    TIME_INDEX_MAGIC,
                    TIME_ENTRY_LEN,
                    base_offset,
                );
                self.index.put_u32(rel);
                self.index.put_u32(pos);
            } else if self.since_index >= self.interval {
                self.index.put_u32(rel);
                self.index.put_u32(pos);
                if self.max_ts > self.last_time_entry {
                    self.timeindex.put_i64(self.max_ts);
                    self.timeindex.put_u32(rel);
                    self.timeindex.put_u32(pos);
                    self.last_time_entry = self.max_ts;
                }
                self.since_index = 0;
            }
            self.since_index += size as u64;
            self.pos += size as u64;
            self.last = last;
            self.max_ts = self.max_ts.max(max_ts);
        }
        self.log.push(batches);
        Ok(())
    }

    pub fn finish(self) -> Result<BuiltSegment> {
        let base = self
            .base
            .filter(|_| !self.log.is_empty())
            .ok_or_else(|| StorageError::invalid("empty segment"))?;
        Ok(BuiltSegment {
            base_offset: Offset(base),
            last_offset: Offset(self.last),
            max_timestamp: self.max_ts,
            log: self.log,
            log_size: self.pos,
            index: self.index.freeze(),
            timeindex: self.timeindex.freeze(),
        })
    }
}

/// A stored segment, as the metadata records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentMeta {
    pub base_offset: Offset,
    pub last_offset: Offset,
    pub max_timestamp: i64,
    pub log: ObjectRef,
    pub index: ObjectRef,
    pub timeindex: ObjectRef,
}

/// The extensions of a segment's three objects, written side by side as
/// `{prefix}/{base offset:020}.{token}.{ext}` by [`write_segment`]; the
/// metadata knows a segment by its `.log`.
pub const SEGMENT_EXTENSIONS: [&str; 3] = ["log", "index", "timeindex"];

/// The key of the `.log` a segment's `.index` or `.timeindex` belongs to
/// (`None` for any other key): the object the metadata knows the segment by.
pub fn log_key_of_sibling(key: &ObjectKey) -> Option<ObjectKey> {
    let k = key.as_str();
    let stem = k
        .strip_suffix(".index")
        .or_else(|| k.strip_suffix(".timeindex"))?;
    Some(ObjectKey::new(format!("{stem}.log")))
}

/// Writes a built segment's three objects to one endpoint of the pool (all
/// again, under a new token, if any of them fails).
pub async fn write_segment(
    pool: &StorePool,
    prefix: &str,
    seg: BuiltSegment,
) -> Result<SegmentMeta> {
    let prefix = prefix.trim_end_matches('/');
    let base = seg.base_offset.0;
    let log: object_store::PutPayload = seg.log.iter().cloned().collect();
    let refs = pool
        .put_group_new(|token| {
            let name = |ext: &str| ObjectKey::new(format!("{prefix}/{base:020}.{token}.{ext}"));
            let [log_ext, index_ext, timeindex_ext] = SEGMENT_EXTENSIONS;
            vec![
                (name(log_ext), log.clone()),
                (name(index_ext), seg.index.clone().into()),
                (name(timeindex_ext), seg.timeindex.clone().into()),
            ]
        })
        .await?;
    let [log, index, timeindex]: [ObjectRef; 3] = refs
        .try_into()
        .map_err(|_| StorageError::invalid("segment write returned the wrong object count"))?;
    Ok(SegmentMeta {
        base_offset: seg.base_offset,
        last_offset: seg.last_offset,
        max_timestamp: seg.max_timestamp,
        log,
        index,
        timeindex,
    })
}

/// A partition's segments in offset order.
#[derive(Debug, Clone, Default)]
pub struct PartitionSegments {
    segments: Vec<SegmentMeta>,
}

impl PartitionSegments {
    /// Sorts by base offset and checks that segments do not overlap.
    pub fn new(mut segments: Vec<SegmentMeta>) -> Result<Self> {
        segments.sort_by_key(|s| s.base_offset);
        for w in segments.windows(2) {
            if w[1].base_offset <= w[0].last_offset {
                return Err(StorageError::corrupt(format!(
                    "segments at {} and {} overlap",
                    w[0].base_offset, w[1].base_offset
                )));
            }
        }
        Ok(Self { segments })
    }

    pub fn segments(&self) -> &[SegmentMeta] {
        &self.segments
    }

    /// The segment holding `offset`, or the first one after it when `offset`
    /// falls in a gap (or before the first segment).
    pub fn find(&self, offset: Offset) -> Option<&SegmentMeta> {
        let idx = self.segments.partition_point(|s| s.base_offset <= offset);
        match idx.checked_sub(1).map(|i| &self.segments[i]) {
            Some(s) if offset <= s.last_offset => Some(s),
            _ => self.segments.get(idx),
        }
    }

    /// The first segment whose largest timestamp is ≥ `ts`.
    pub fn find_time(&self, ts: i64) -> Option<&SegmentMeta> {
        self.segments.iter().find(|s| s.max_timestamp >= ts)
    }
}

/// Batches read from a segment: whole batches, the first holding the target.
#[derive(Debug, Clone)]
pub struct SegmentRead {
    pub bytes: Bytes,
    pub first_offset: Offset,
    pub next_offset: Offset,
}

#[derive(Debug, Clone, Copy)]
struct BatchAt {
    pos: u64,
    size: u64,
    last_offset: i64,
}

fn corrupt_log(obj: &ObjectRef, e: BatchError) -> StorageError {
    StorageError::with_source(crate::ErrorKind::Corrupt, format!("{obj}: bad batch"), e)
}

/// A bounded cache of parsed indexes, weighed by their bytes.
fn index_cache<V: Send + Sync + 'static>(
    budget: u64,
    len: fn(&V) -> usize,
) -> moka::future::Cache<ObjectKey, Arc<V>> {
    moka::future::Cache::builder()
        .max_capacity(budget)
        .weigher(move |_: &ObjectKey, v: &Arc<V>| len(v).min(u32::MAX as usize) as u32)
        .build()
}

/// Reads segments through any [`RangeRead`], keeping parsed indexes.
#[derive(Debug, Clone)]
pub struct SegmentReader<R> {
    reader: R,
    indexes: moka::future::Cache<ObjectKey, Arc<OffsetIndex>>,
    timeindexes: moka::future::Cache<ObjectKey, Arc<TimeIndex>>,
}

impl<R: RangeRead> SegmentReader<R> {
    /// `index_cache_bytes` bounds the parsed indexes kept in memory.
    pub fn new(reader: R, index_cache_bytes: u64) -> Self {
        Self {
            reader,
            indexes: index_cache(index_cache_bytes, |i: &OffsetIndex| i.raw.bytes.len()),
            timeindexes: index_cache(index_cache_bytes, |i: &TimeIndex| i.raw.bytes.len()),
        }
    }

    pub async fn offset_index(&self, seg: &SegmentMeta) -> Result<Arc<OffsetIndex>> {
        self.indexes
            .try_get_with(seg.index.key.clone(), async {
                let bytes = self
                    .reader
                    .read_range(&seg.index, 0..seg.index.size)
                    .await?;
                let idx = OffsetIndex::parse(bytes)?;
                if idx.base_offset() != seg.base_offset.0 {
                    return Err(StorageError::corrupt(format!(
                        "{}: index base {} ≠ segment base {}",
                        seg.index,
                        idx.base_offset(),
                        seg.base_offset
                    )));
                }
                idx.validate(seg.log.size)?;
                Ok(Arc::new(idx))
            })
            .await
            .map_err(|e: Arc<StorageError>| (*e).clone())
    }

    pub async fn time_index(&self, seg: &SegmentMeta) -> Result<Arc<TimeIndex>> {
        self.timeindexes
            .try_get_with(seg.timeindex.key.clone(), async {
                let bytes = self
                    .reader
                    .read_range(&seg.timeindex, 0..seg.timeindex.size)
                    .await?;
                let idx = TimeIndex::parse(bytes)?;
                idx.validate(seg.log.size)?;
                Ok(Arc::new(idx))
            })
            .await
            .map_err(|e: Arc<StorageError>| (*e).clone())
    }

    /// Scans batch headers from `pos` until `stop` says yes.
    async fn scan(
        &self,
        log: &ObjectRef,
        mut pos: u64,
        mut stop: impl FnMut(&BatchView<'_>) -> bool,
    ) -> Result<Option<BatchAt>> {
        let mut want = SCAN_CHUNK;
        while pos < log.size {
            let end = pos.saturating_add(want).min(log.size);
            let chunk = self.reader.read_range(log, pos..end).await?;
            let mut consumed = 0usize;
            let mut need_more = None;
            while consumed < chunk.len() {
                let buf = &chunk[consumed..];
                let size = match BatchView::peek_size(buf) {
                    Ok(s) => s,
                    Err(BatchError::Truncated { .. }) => {
                        need_more = Some(crate::batch::LOG_OVERHEAD as u64);
                        break;
                    }
                    Err(e) => return Err(corrupt_log(log, e)),
                };
                let at = pos + consumed as u64;
                if at + size as u64 > log.size {
                    return Err(StorageError::corrupt(format!(
                        "{log}: batch at {at} runs past the end"
                    )));
                }
                if size > buf.len() {
                    need_more = Some(size as u64);
                    break;
                }
                let view = BatchView::parse(buf, size).map_err(|e| corrupt_log(log, e))?;
                if stop(&view) {
                    return Ok(Some(BatchAt {
                        pos: at,
                        size: size as u64,
                        last_offset: view.last_offset(),
                    }));
                }
                consumed += size;
            }
            pos += consumed as u64;
            want = need_more.map_or(SCAN_CHUNK, |n| n.max(SCAN_CHUNK));
            if consumed == 0 && need_more.is_none() {
                break;
            }
        }
        Ok(None)
    }

    /// Whole batches from the one that contains `offset`, up to `max_bytes`
    /// (but always at least that first batch). `None` if the segment ends
    /// before `offset`.
    pub async fn read(
        &self,
        seg: &SegmentMeta,
        offset: Offset,
        max_bytes: u64,
    ) -> Result<Option<SegmentRead>> {
        if offset > seg.last_offset {
            return Ok(None);
        }
        let index = self.offset_index(seg).await?;
        let start_pos = index.lookup(offset.0) as u64;
        let Some(first) = self
            .scan(&seg.log, start_pos, |v| v.last_offset() >= offset.0)
            .await?
        else {
            return Ok(None);
        };
        // One read from the batch that holds the target up to the budget; the
        // whole batches inside it are the answer (the first one always).
        let budget = max_bytes.max(first.size);
        let read_end = first.pos.saturating_add(budget).min(seg.log.size);
        let bytes = self
            .reader
            .read_range(&seg.log, first.pos..read_end)
            .await?;
        // A reader of a segment reads on from here: its next bytes are
        // fetched while this answer goes out.
        self.reader.read_ahead(
            &seg.log,
            read_end..read_end.saturating_add(crate::cache::READ_AHEAD_BYTES),
        );
        let mut end = 0usize;
        let mut first_offset = None;
        let mut next = first.last_offset.saturating_add(1);
        for item in BatchIter::new(&bytes, usize::MAX) {
            let v = match item {
                Ok((_, v)) => v,
                // A batch cut by the budget ends the answer.
                Err(BatchError::Truncated { .. }) if end > 0 => break,
                Err(e) => return Err(corrupt_log(&seg.log, e)),
            };
            // Segments carry no checksum of their own: every batch's CRC is checked.
            v.verify_crc().map_err(|e| corrupt_log(&seg.log, e))?;
            first_offset.get_or_insert(v.base_offset());
            end += v.size();
            next = v.next_offset();
        }
        Ok(Some(SegmentRead {
            bytes: bytes.slice(..end),
            first_offset: Offset(first_offset.unwrap_or(offset.0)),
            next_offset: Offset(next),
        }))
    }

    /// The offset of the first record whose timestamp is ≥ `ts`, if any.
    pub async fn offset_for_timestamp(&self, seg: &SegmentMeta, ts: i64) -> Result<Option<Offset>> {
        let tindex = self.time_index(seg).await?;
        let mut pos = tindex.lookup(ts) as u64;
        loop {
            let Some(hit) = self
                .scan(&seg.log, pos, |v| v.max_timestamp() >= ts)
                .await?
            else {
                return Ok(None);
            };
            let batch = self
                .reader
                .read_range(&seg.log, hit.pos..hit.pos + hit.size)
                .await?;
            let records = decode_records(&batch, crate::records::DEFAULT_MAX_DECOMPRESSED)
                .map_err(|e| corrupt_log(&seg.log, e))?;
            if let Some(r) = records.iter().find(|r| r.timestamp >= ts) {
                return Ok(Some(Offset(r.offset)));
            }
            // The header's max timestamp overstated its records: keep going.
            pos = hit.pos + hit.size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Compression;
    use crate::ids::EndpointId;
    use crate::pool::PoolOptions;
    use crate::records::{BatchBuilder, RecordSpec};

    /// Batches of 1..=4 records, 30-byte values, timestamps going up by 10 per record
    /// (with a dip every 7th batch to make timestamps non-monotonic).
    fn batches(count: usize) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut off = 1000i64;
        for i in 0..count {
            let n = 1 + i % 4;
            let ts = 1_000_000 + off * 10 - if i % 7 == 3 { 500 } else { 0 };
            let mut b = BatchBuilder::new(off, ts);
            for r in 0..n {
                b.push(RecordSpec::new(
                    None,
                    Some(vec![r as u8; 30]),
                    r as i64 * 10,
                ));
            }
            out.push(b.build(Compression::None).unwrap());
            off += n as i64;
        }
        out
    }

    async fn stored(count: usize, interval: u64) -> (StorePool, SegmentMeta, Vec<Bytes>) {
        let pool = StorePool::new(
            vec![(
                EndpointId::new("m"),
                Arc::new(object_store::memory::InMemory::new()),
            )],
            PoolOptions::default(),
        )
        .unwrap();
        let bs = batches(count);
        let mut b = SegmentBuilder::new(interval);
        for x in &bs {
            b.append(x.clone()).unwrap();
        }
        let built = b.finish().unwrap();
        let meta = write_segment(&pool, "seg/t/0", built).await.unwrap();
        (pool, meta, bs)
    }

    #[tokio::test]
    async fn read_returns_the_batch_that_holds_the_offset() {
        let (pool, meta, bs) = stored(200, 500).await;
        assert_eq!(meta.base_offset, Offset(1000));
        assert!(
            meta.log
                .key
                .as_str()
                .starts_with("seg/t/0/00000000000000001000.")
        );
        assert!(meta.log.key.as_str().ends_with(".log"));
        let reader = SegmentReader::new(&pool, 1 << 20);
        for b in &bs {
            let v = BatchView::parse(b, usize::MAX).unwrap();
            for target in v.base_offset()..=v.last_offset() {
                let got = reader
                    .read(&meta, Offset(target), 1)
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(&got.bytes[..], &b[..], "target {target}");
                assert_eq!(got.first_offset, Offset(v.base_offset()));
                assert_eq!(got.next_offset, Offset(v.last_offset() + 1));
            }
        }
        assert!(
            reader
                .read(&meta, Offset(1_000_000), 1)
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_read_asks_for_the_segments_next_bytes_ahead() {
        use std::sync::atomic::Ordering::Relaxed;
        // Larger than a scan's chunk (64 KiB), so a read does not hold it all.
        let (pool, meta, _) = stored(3000, 500).await;
        assert!(meta.log.size > 4 * SCAN_CHUNK, "{}", meta.log.size);
        let cache = crate::BlockCache::new(64 << 20, 4096).unwrap();
        let reader = SegmentReader::new(
            crate::CachedReader::new(Arc::new(pool), cache.clone()),
            1 << 20,
        );
        let got = reader.read(&meta, Offset(1000), 1).await.unwrap().unwrap();
        let stats = cache.stats();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        // Everything after the read up to the segment's end (well under the
        // read-ahead) comes to be held.
        let last_block = (meta.log.size - 1) / 4096;
        while !(0..=last_block).all(|i| cache.holds(&meta.log, i)) {
            assert!(
                std::time::Instant::now() < deadline,
                "the segment's rest was not read ahead"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(stats.read_ahead.load(Relaxed) > 0);
        let misses = stats.misses.load(Relaxed);
        let rest = reader
            .read(&meta, got.next_offset, meta.log.size)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(rest.first_offset, got.next_offset);
        assert_eq!(
            stats.misses.load(Relaxed),
            misses,
            "the next read came from the cache"
        );
    }

    #[tokio::test]
    async fn read_fills_max_bytes_with_whole_batches() {
        let (pool, meta, bs) = stored(50, 500).await;
        let reader = SegmentReader::new(&pool, 1 << 20);
        let two = (bs[0].len() + bs[1].len()) as u64;
        let got = reader
            .read(&meta, Offset(1000), two + 5)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.bytes.len() as u64, two);
        let all = reader
            .read(&meta, Offset(1000), u64::MAX)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(all.bytes.len() as u64, meta.log.size);
        assert_eq!(all.next_offset.0, meta.last_offset.0 + 1);
    }

    #[tokio::test]
    async fn timestamp_lookup_finds_first_record_at_or_after() {
        let (pool, meta, bs) = stored(300, 400).await;
        let reader = SegmentReader::new(&pool, 1 << 20);
        let mut all: Vec<(i64, i64)> = Vec::new();
        for b in &bs {
            for r in decode_records(b, 1 << 20).unwrap() {
                all.push((r.offset, r.timestamp));
            }
        }
        let min_ts = all.iter().map(|x| x.1).min().unwrap();
        let max_ts = all.iter().map(|x| x.1).max().unwrap();
        for ts in (min_ts - 5..=max_ts + 5).step_by(37) {
            let want = all.iter().find(|(_, t)| *t >= ts).map(|(o, _)| Offset(*o));
            let got = reader.offset_for_timestamp(&meta, ts).await.unwrap();
            assert_eq!(got, want, "ts {ts}");
        }
    }

    #[test]
    fn index_lookup_is_largest_entry_at_or_below() {
        let mut b = SegmentBuilder::new(1);
        for x in batches(100) {
            b.append(x).unwrap();
        }
        let built = b.finish().unwrap();
        let idx = OffsetIndex::parse(built.index.clone()).unwrap();
        assert_eq!(idx.len(), 100);
        idx.validate(built.log_size).unwrap();
        assert_eq!(idx.lookup(0), 0);
        for i in 0..idx.len() {
            let (off, pos) = idx.entry(i).unwrap();
            assert_eq!(idx.lookup(off), pos);
        }
        TimeIndex::parse(built.timeindex)
            .unwrap()
            .validate(built.log_size)
            .unwrap();
    }

    #[test]
    fn corrupt_indexes_are_errors() {
        let mut b = SegmentBuilder::new(1);
        for x in batches(20) {
            b.append(x).unwrap();
        }
        let built = b.finish().unwrap();
        let good = built.index.to_vec();
        assert!(OffsetIndex::parse(Bytes::from_static(b"FLIX")).is_err());
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(OffsetIndex::parse(Bytes::from(bad)).is_err());
        let mut bad = good.clone();
        bad[5] = 9; // version
        assert!(OffsetIndex::parse(Bytes::from(bad)).is_err());
        let mut bad = good.clone();
        bad[8..16].copy_from_slice(&(i64::MAX - 1).to_be_bytes()); // base + delta overflows
        assert!(OffsetIndex::parse(Bytes::from(bad)).is_err());
        let mut bad = good.clone();
        bad[8..16].copy_from_slice(&(-1i64).to_be_bytes());
        assert!(OffsetIndex::parse(Bytes::from(bad)).is_err());
        let mut bad = good.clone();
        bad.push(0); // ragged entries
        assert!(OffsetIndex::parse(Bytes::from(bad)).is_err());
        let mut bad = good.clone();
        let at = INDEX_HEADER_LEN + 3 * OFFSET_ENTRY_LEN + 4;
        bad[at..at + 4].copy_from_slice(&u32::MAX.to_be_bytes()); // position past log
        let idx = OffsetIndex::parse(Bytes::from(bad)).unwrap();
        assert!(idx.validate(built.log_size).is_err());
        let mut bad = good.clone();
        let at = INDEX_HEADER_LEN + 5 * OFFSET_ENTRY_LEN;
        bad[at..at + 4].copy_from_slice(&0u32.to_be_bytes()); // offsets go backwards
        assert!(
            OffsetIndex::parse(Bytes::from(bad))
                .unwrap()
                .validate(built.log_size)
                .is_err()
        );
        let mut bad = good.clone();
        let at = INDEX_HEADER_LEN + 5 * OFFSET_ENTRY_LEN + 4;
        bad[at..at + 4].copy_from_slice(&1u32.to_be_bytes()); // offsets rise, position falls
        assert!(
            OffsetIndex::parse(Bytes::from(bad))
                .unwrap()
                .validate(built.log_size)
                .is_err()
        );
        // Time index with entries out of order.
        let t = built.timeindex.to_vec();
        let mut bad = t.clone();
        bad.extend_from_slice(&t[INDEX_HEADER_LEN..INDEX_HEADER_LEN + TIME_ENTRY_LEN]);
        assert!(
            TimeIndex::parse(Bytes::from(bad))
                .unwrap()
                .validate(built.log_size)
                .is_err()
        );
    }

    #[tokio::test]
    async fn corrupt_log_gives_error_not_panic() {
        let (pool, meta, _) = stored(20, 100).await;
        let mut raw = pool.get(&meta.log).await.unwrap().to_vec();
        for b in raw.iter_mut().skip(200).take(40) {
            *b = 0xff;
        }
        let bad = pool
            .put_new(|t| ObjectKey::new(format!("bad/{t}.log")), raw.into())
            .await
            .unwrap();
        let meta = SegmentMeta { log: bad, ..meta };
        let reader = SegmentReader::new(&pool, 1 << 20);
        let mut errors = 0;
        for off in meta.base_offset.0..=meta.last_offset.0 {
            match reader.read(&meta, Offset(off), 1 << 20).await {
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.kind(), crate::ErrorKind::Corrupt);
                    errors += 1;
                }
            }
        }
        assert!(errors > 0);
    }

    #[tokio::test]
    async fn a_segment_based_before_its_first_batch_reads_from_that_batch() {
        let (pool, _, bs) = stored(10, 100).await;
        let mut b = SegmentBuilder::with_base(100, 900);
        assert!(SegmentBuilder::with_base(100, 900).finish().is_err());
        for x in &bs {
            b.append(x.clone()).unwrap();
        }
        let built = b.finish().unwrap();
        assert_eq!(built.base_offset, Offset(900));
        let meta = write_segment(&pool, "seg/t/1", built).await.unwrap();
        let reader = SegmentReader::new(&pool, 1 << 20);
        let got = reader.read(&meta, Offset(950), 1).await.unwrap().unwrap();
        assert_eq!(&got.bytes[..], &bs[0][..]);
        assert_eq!(got.first_offset, Offset(1000));
    }

    #[test]
    fn builder_refuses_out_of_order_batches() {
        let bs = batches(3);
        let mut b = SegmentBuilder::new(100);
        b.append(bs[1].clone()).unwrap();
        assert!(b.append(bs[0].clone()).is_err());
        b.append(bs[2].clone()).unwrap();
        assert!(SegmentBuilder::new(1).finish().is_err());
    }

    #[test]
    fn partition_segments_find_by_offset_and_time() {
        let obj = |k: &str| ObjectRef {
            endpoint: EndpointId::new("m"),
            key: ObjectKey::new(k),
            size: 1,
        };
        let seg = |b: i64, l: i64, ts: i64| SegmentMeta {
            base_offset: Offset(b),
            last_offset: Offset(l),
            max_timestamp: ts,
            log: obj(&format!("{b}.log")),
            index: obj(&format!("{b}.index")),
            timeindex: obj(&format!("{b}.timeindex")),
        };
        let p = PartitionSegments::new(vec![seg(100, 199, 50), seg(0, 99, 10), seg(250, 300, 90)])
            .unwrap();
        assert_eq!(p.find(Offset(0)).unwrap().base_offset, Offset(0));
        assert_eq!(p.find(Offset(150)).unwrap().base_offset, Offset(100));
        assert_eq!(p.find(Offset(220)).unwrap().base_offset, Offset(250));
        assert!(p.find(Offset(301)).is_none());
        assert_eq!(p.find_time(11).unwrap().base_offset, Offset(100));
        assert!(p.find_time(91).is_none());
        assert!(PartitionSegments::new(vec![seg(0, 100, 1), seg(100, 200, 1)]).is_err());
    }

    #[tokio::test]
    async fn a_written_segments_index_objects_lead_back_to_its_log() {
        let (_pool, meta, _) = stored(20, 256).await;
        for sibling in [&meta.index, &meta.timeindex] {
            assert_eq!(log_key_of_sibling(&sibling.key), Some(meta.log.key.clone()));
        }
        assert_eq!(log_key_of_sibling(&meta.log.key), None);
        assert_eq!(log_key_of_sibling(&ObjectKey::new("wal/1/x.wal")), None);
    }
}
