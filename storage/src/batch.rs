//! A zero-copy view of a Kafka RecordBatch (magic 2), Floe's storage format.
//!
//! Layout (all big-endian), as in Kafka:
//!
//! | at | size | field |
//! |---:|---:|---|
//! | 0 | 8 | base offset |
//! | 8 | 4 | batch length (bytes after this field) |
//! | 12 | 4 | partition leader epoch |
//! | 16 | 1 | magic (2) |
//! | 17 | 4 | CRC-32C of everything from `attributes` to the end |
//! | 21 | 2 | attributes |
//! | 23 | 4 | last offset delta |
//! | 27 | 8 | first (base) timestamp |
//! | 35 | 8 | max timestamp |
//! | 43 | 8 | producer id |
//! | 51 | 2 | producer epoch |
//! | 53 | 4 | base sequence |
//! | 57 | 4 | record count |
//! | 61 | … | records (possibly compressed) |
//!
//! Parsing never trusts a length: every field is read through bounds checks
//! and a malformed batch gives a [`BatchError`], never a panic.

use crate::bytes_ext::{be_i16, be_i32, be_i64, be_u16, be_u32};
use crate::error::StorageError;

/// Bytes before the batch-length field counts: base offset and batch length.
pub const LOG_OVERHEAD: usize = 12;
/// Size of the fixed header, up to and including the record count.
pub const HEADER_LEN: usize = 61;
/// The only record-batch format Floe stores.
pub const MAGIC_V2: u8 = 2;

pub(crate) const BASE_OFFSET_AT: usize = 0;
pub(crate) const LENGTH_AT: usize = 8;
pub(crate) const LEADER_EPOCH_AT: usize = 12;
pub(crate) const MAGIC_AT: usize = 16;
pub(crate) const CRC_AT: usize = 17;
pub(crate) const ATTRIBUTES_AT: usize = 21;
pub(crate) const LAST_OFFSET_DELTA_AT: usize = 23;
pub(crate) const FIRST_TIMESTAMP_AT: usize = 27;
pub(crate) const MAX_TIMESTAMP_AT: usize = 35;
pub(crate) const PRODUCER_ID_AT: usize = 43;
pub(crate) const PRODUCER_EPOCH_AT: usize = 51;
pub(crate) const BASE_SEQUENCE_AT: usize = 53;
pub(crate) const RECORD_COUNT_AT: usize = 57;

pub(crate) const COMPRESSION_MASK: u16 = 0x07;
pub(crate) const TIMESTAMP_TYPE_BIT: u16 = 0x08;
pub(crate) const TRANSACTIONAL_BIT: u16 = 0x10;
pub(crate) const CONTROL_BIT: u16 = 0x20;
pub(crate) const DELETE_HORIZON_BIT: u16 = 0x40;

/// Why a byte string is not a valid record batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("truncated batch: need {needed} bytes, have {available}")]
    Truncated { needed: usize, available: usize },
    #[error("batch length {length} is below the {min}-byte minimum")]
    TooShort { length: i64, min: usize },
    #[error("batch of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("unsupported record batch magic {0} (only magic 2 is supported)")]
    BadMagic(i8),
    #[error("CRC mismatch: header says {expected:#010x}, content has {actual:#010x}")]
    BadCrc { expected: u32, actual: u32 },
    #[error("invalid batch field: {0}")]
    Invalid(&'static str),
    #[error("unknown compression codec {0}")]
    UnknownCompression(u8),
    #[error("malformed records: {0}")]
    Records(String),
    /// Well-formed as far as read, but more than a reader decodes of one
    /// batch ([`crate::records::DecodeLimits`]): a decompression bomb, or a
    /// batch claiming more records than any client sends.
    #[error("records over the decoding bounds: {0}")]
    OverBounds(String),
}

impl BatchError {
    /// Whether the batch was refused for its size once decoded (not for
    /// being malformed).
    pub fn is_over_bounds(&self) -> bool {
        matches!(self, BatchError::OverBounds(_))
    }
}

impl From<BatchError> for StorageError {
    fn from(e: BatchError) -> Self {
        StorageError::with_source(crate::ErrorKind::InvalidInput, "bad record batch", e)
    }
}

/// Compression codec of a batch's records (attributes bits 0–2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn from_id(id: u8) -> Result<Self, BatchError> {
        Ok(match id {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            other => return Err(BatchError::UnknownCompression(other)),
        })
    }

    pub fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }
}

/// How the batch's timestamps were set (attributes bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// A validated view of one record batch, borrowing its bytes.
///
/// [`BatchView::parse`] checks that the bytes hold a whole batch of magic 2 with
/// a sane length; the CRC is checked separately by [`BatchView::verify_crc`]
/// because readers of already-validated data may skip it.
#[derive(Debug, Clone, Copy)]
pub struct BatchView<'a> {
    buf: &'a [u8],
}

impl<'a> BatchView<'a> {
    /// Reads the total size of the batch that starts at `buf`, from its header,
    /// without validating anything else. Needs at least [`LOG_OVERHEAD`] bytes.
    pub fn peek_size(buf: &[u8]) -> Result<usize, BatchError> {
        let length = be_i32(buf, LENGTH_AT).ok_or(BatchError::Truncated {
            needed: LOG_OVERHEAD,
            available: buf.len(),
        })?;
        let min = HEADER_LEN - LOG_OVERHEAD;
        if (length as i64) < min as i64 {
            return Err(BatchError::TooShort {
                length: length as i64,
                min,
            });
        }
        Ok(LOG_OVERHEAD + length as usize)
    }

    /// Views the batch at the start of `buf` (which may hold more after it).
    /// `max_size` bounds the batch's total size (header included).
    pub fn parse(buf: &'a [u8], max_size: usize) -> Result<Self, BatchError> {
        let size = Self::peek_size(buf)?;
        if size > max_size {
            return Err(BatchError::TooLarge {
                size,
                limit: max_size,
            });
        }
        if buf.len() < size {
            return Err(BatchError::Truncated {
                needed: size,
                available: buf.len(),
            });
        }
        let view = BatchView { buf: &buf[..size] };
        view.check_header()?;
        Ok(view)
    }

    /// The header checks of [`BatchView::parse`] (needs [`HEADER_LEN`] bytes).
    fn check_header(&self) -> Result<(), BatchError> {
        let view = *self;
        let magic = view.magic();
        if magic != MAGIC_V2 as i8 {
            return Err(BatchError::BadMagic(magic));
        }
        if view.last_offset_delta() < 0 {
            return Err(BatchError::Invalid("negative last offset delta"));
        }
        if view.record_count() < 0 {
            return Err(BatchError::Invalid("negative record count"));
        }
        if view
            .base_offset()
            .checked_add(view.last_offset_delta() as i64)
            .is_none()
        {
            return Err(BatchError::Invalid("last offset overflows"));
        }
        Compression::from_id((view.attributes() & COMPRESSION_MASK) as u8)?;
        Ok(())
    }

    /// The batch's bytes, exactly [`BatchView::size`] long.
    pub fn bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// Total size in bytes, header included.
    pub fn size(&self) -> usize {
        self.buf.len()
    }

    // The header fields below were proven present by `parse` (size >= HEADER_LEN),
    // so the bounds-checked reads cannot fail; `unwrap_or_default` keeps them total.
    fn i64_at(&self, at: usize) -> i64 {
        be_i64(self.buf, at).unwrap_or_default()
    }
    fn i32_at(&self, at: usize) -> i32 {
        be_i32(self.buf, at).unwrap_or_default()
    }

    pub fn base_offset(&self) -> i64 {
        self.i64_at(BASE_OFFSET_AT)
    }
    pub fn batch_length(&self) -> i32 {
        self.i32_at(LENGTH_AT)
    }
    pub fn partition_leader_epoch(&self) -> i32 {
        self.i32_at(LEADER_EPOCH_AT)
    }
    pub fn magic(&self) -> i8 {
        self.buf.get(MAGIC_AT).copied().unwrap_or_default() as i8
    }
    pub fn crc(&self) -> u32 {
        be_u32(self.buf, CRC_AT).unwrap_or_default()
    }
    pub fn attributes(&self) -> u16 {
        be_u16(self.buf, ATTRIBUTES_AT).unwrap_or_default()
    }
    pub fn compression(&self) -> Compression {
        // Validated in `parse`.
        Compression::from_id((self.attributes() & COMPRESSION_MASK) as u8)
            .unwrap_or(Compression::None)
    }
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes() & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes() & TRANSACTIONAL_BIT != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes() & CONTROL_BIT != 0
    }
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes() & DELETE_HORIZON_BIT != 0
    }
    pub fn last_offset_delta(&self) -> i32 {
        self.i32_at(LAST_OFFSET_DELTA_AT)
    }
    /// Offset of the last record: base offset + last offset delta.
    pub fn last_offset(&self) -> i64 {
        self.base_offset()
            .saturating_add(self.last_offset_delta() as i64)
    }
    /// Offset right after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }
    pub fn first_timestamp(&self) -> i64 {
        self.i64_at(FIRST_TIMESTAMP_AT)
    }
    pub fn max_timestamp(&self) -> i64 {
        self.i64_at(MAX_TIMESTAMP_AT)
    }
    pub fn producer_id(&self) -> i64 {
        self.i64_at(PRODUCER_ID_AT)
    }
    pub fn producer_epoch(&self) -> i16 {
        be_i16(self.buf, PRODUCER_EPOCH_AT).unwrap_or_default()
    }
    pub fn base_sequence(&self) -> i32 {
        self.i32_at(BASE_SEQUENCE_AT)
    }
    pub fn record_count(&self) -> i32 {
        self.i32_at(RECORD_COUNT_AT)
    }
    /// The records section (compressed if the batch is).
    pub fn records_bytes(&self) -> &'a [u8] {
        &self.buf[HEADER_LEN..]
    }

    /// CRC-32C over the bytes the header's CRC covers.
    pub fn compute_crc(&self) -> u32 {
        crc32c::crc32c(&self.buf[ATTRIBUTES_AT..])
    }

    /// The CRC-32C of all the batch's bytes, built from its stored CRC
    /// (which covers everything after its first 21 bytes) without reading
    /// the records again. Right only when the stored CRC is, so only for a
    /// batch that passed [`Self::verify_crc`] or was written here.
    pub fn whole_crc(&self) -> u32 {
        let head = crc32c::crc32c(&self.buf[..ATTRIBUTES_AT]);
        crate::crc::combine(head, self.crc(), self.buf.len() - ATTRIBUTES_AT)
    }

    pub fn verify_crc(&self) -> Result<(), BatchError> {
        let expected = self.crc();
        let actual = self.compute_crc();
        if expected == actual {
            Ok(())
        } else {
            Err(BatchError::BadCrc { expected, actual })
        }
    }
}

/// Writes `base_offset` into the batch at the start of `batch`. The CRC does
/// not cover the base offset, so it stays valid.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) -> Result<(), BatchError> {
    let field = batch
        .get_mut(BASE_OFFSET_AT..BASE_OFFSET_AT + 8)
        .ok_or(BatchError::Truncated {
            needed: 8,
            available: 0,
        })?;
    field.copy_from_slice(&base_offset.to_be_bytes());
    Ok(())
}

/// Writes the partition leader epoch into the batch (not covered by the CRC either).
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) -> Result<(), BatchError> {
    let field =
        batch
            .get_mut(LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4)
            .ok_or(BatchError::Truncated {
                needed: LEADER_EPOCH_AT + 4,
                available: 0,
            })?;
    field.copy_from_slice(&epoch.to_be_bytes());
    Ok(())
}

/// Marks a whole batch as stamped by the broker (`LogAppendTime`): sets the
/// timestamp-type attribute and the max timestamp to `now_ms`, and rewrites
/// the CRC, which covers both. Consumers then read `now_ms` for every record,
/// as in Kafka.
pub fn set_log_append_time(batch: &mut [u8], now_ms: i64) -> Result<(), BatchError> {
    if batch.len() < HEADER_LEN {
        return Err(BatchError::Truncated {
            needed: HEADER_LEN,
            available: batch.len(),
        });
    }
    let attrs = u16::from_be_bytes([batch[ATTRIBUTES_AT], batch[ATTRIBUTES_AT + 1]]) | 0x08;
    batch[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attrs.to_be_bytes());
    batch[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
    batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// [`set_log_append_time`] for a batch held as its header (`header`,
/// [`HEADER_LEN`] bytes, changed here) and the rest (`rest`, read only).
pub fn set_log_append_time_split(
    header: &mut [u8],
    rest: &[u8],
    now_ms: i64,
) -> Result<(), BatchError> {
    if header.len() != HEADER_LEN {
        return Err(BatchError::Truncated {
            needed: HEADER_LEN,
            available: header.len(),
        });
    }
    let attrs = u16::from_be_bytes([header[ATTRIBUTES_AT], header[ATTRIBUTES_AT + 1]]) | 0x08;
    header[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attrs.to_be_bytes());
    header[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&header[ATTRIBUTES_AT..]), rest);
    header[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// What a batch's header says of it, read from the header alone: for a
/// batch held in several pieces (a read across cache blocks) that is
/// handed on without being joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHead {
    /// Total size in bytes, header included.
    pub size: usize,
    pub base_offset: i64,
    pub last_offset: i64,
}

impl BatchHead {
    /// Checks the header at the start of `head` (at least [`HEADER_LEN`]
    /// bytes; the rest of the batch may be elsewhere) as
    /// [`BatchView::parse`] does.
    pub fn parse(head: &[u8], max_size: usize) -> Result<Self, BatchError> {
        let size = BatchView::peek_size(head)?;
        if size > max_size {
            return Err(BatchError::TooLarge {
                size,
                limit: max_size,
            });
        }
        if head.len() < HEADER_LEN {
            return Err(BatchError::Truncated {
                needed: HEADER_LEN,
                available: head.len(),
            });
        }
        let view = BatchView {
            buf: &head[..HEADER_LEN],
        };
        view.check_header()?;
        Ok(Self {
            size,
            base_offset: view.base_offset(),
            last_offset: view.last_offset(),
        })
    }

    /// Offset right after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset.saturating_add(1)
    }
}

/// One batch held as two pieces: its header as the broker wrote it (base
/// offset, leader epoch, and for `LogAppendTime` the timestamp, attributes
/// and CRC) and the rest of it, a slice of the bytes the client sent. A
/// produce so stores and writes its batches without copying them: only
/// the [`HEADER_LEN`] bytes of each header are new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitBatch {
    header: bytes::Bytes,
    body: bytes::Bytes,
}

impl SplitBatch {
    /// Puts a batch together from its header and the rest of it; the
    /// header is checked as [`BatchView::parse`] does and must say the
    /// batch is exactly as long as the two pieces.
    pub fn new(header: bytes::Bytes, body: bytes::Bytes) -> Result<Self, BatchError> {
        let head = BatchHead::parse(&header, usize::MAX)?;
        if header.len() != HEADER_LEN || head.size != HEADER_LEN + body.len() {
            return Err(BatchError::Invalid(
                "a split batch's pieces do not add up to its length",
            ));
        }
        Ok(Self { header, body })
    }

    fn head(&self) -> BatchView<'_> {
        // Only the header's fields are read through it (never its size).
        BatchView { buf: &self.header }
    }

    /// Total size in bytes, header included.
    pub fn len(&self) -> usize {
        HEADER_LEN + self.body.len()
    }

    /// Never: a batch has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The two pieces, to be sent or written one after the other.
    pub fn pieces(&self) -> [&bytes::Bytes; 2] {
        [&self.header, &self.body]
    }

    pub fn header(&self) -> &[u8] {
        &self.header
    }

    pub fn base_offset(&self) -> i64 {
        self.head().base_offset()
    }

    pub fn last_offset(&self) -> i64 {
        self.head().last_offset()
    }

    pub fn max_timestamp(&self) -> i64 {
        self.head().max_timestamp()
    }

    /// The CRC-32C of the whole batch, from its header and the CRC it
    /// carries (which covers the rest and was checked when produced), as
    /// [`BatchView::whole_crc`].
    pub fn whole_crc(&self) -> u32 {
        let head = crc32c::crc32c(&self.header[..ATTRIBUTES_AT]);
        crate::crc::combine(head, self.head().crc(), self.len() - ATTRIBUTES_AT)
    }

    /// Whether the rest of the batch is still a slice of a larger buffer
    /// that something else also holds (the client's request, other
    /// partitions' batches of it).
    pub fn shares_its_buffer(&self) -> bool {
        !self.body.is_unique()
    }

    /// Copies the rest of the batch into a buffer of its own, so that the
    /// request it came in is no longer held.
    pub fn detach(&mut self) {
        self.body = bytes::Bytes::copy_from_slice(&self.body);
    }

    /// The batch as one buffer (a copy).
    pub fn to_vec(&self) -> Vec<u8> {
        [&self.header[..], &self.body[..]].concat()
    }
}

/// Iterates over the batches of a byte string that holds whole batches back to
/// back (a `.log` object, a WAL range, a produce request's records).
#[derive(Debug, Clone)]
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
    max_size: usize,
    failed: bool,
}

impl<'a> BatchIter<'a> {
    pub fn new(buf: &'a [u8], max_size: usize) -> Self {
        Self {
            buf,
            pos: 0,
            max_size,
            failed: false,
        }
    }

    /// Byte position of the next batch.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<(usize, BatchView<'a>), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let at = self.pos;
        match BatchView::parse(&self.buf[at..], self.max_size) {
            Ok(view) => {
                self.pos += view.size();
                Some(Ok((at, view)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod log_append_time_tests {
    use super::*;
    use crate::records::{BatchBuilder, RecordSpec};

    #[test]
    fn log_append_time_keeps_the_crc_valid_and_sets_the_type() {
        let b = BatchBuilder::new(0, 1_000)
            .push(RecordSpec::new(None, Some(b"v".to_vec()), 5))
            .build(Compression::None)
            .unwrap();
        let mut raw = b.to_vec();
        set_log_append_time(&mut raw, 99_000).unwrap();
        let v = BatchView::parse(&raw, usize::MAX).unwrap();
        v.verify_crc().unwrap();
        assert_eq!(v.max_timestamp(), 99_000);
        assert_eq!(v.timestamp_type(), TimestampType::LogAppendTime);
        assert!(set_log_append_time(&mut raw[..20], 1).is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{BatchBuilder, RecordSpec};

    fn sample(base: i64, n: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(base, 1_700_000_000_000);
        for i in 0..n {
            b.push(RecordSpec::new(
                Some(format!("k{i}").into_bytes()),
                Some(vec![b'v'; 10]),
                i as i64,
            ));
        }
        b.build(Compression::None).unwrap().to_vec()
    }

    #[test]
    fn a_split_batch_reads_as_the_whole_one() {
        let whole = bytes::Bytes::from(sample(100, 5));
        let b = SplitBatch::new(whole.slice(..HEADER_LEN), whole.slice(HEADER_LEN..)).unwrap();
        let v = BatchView::parse(&whole, usize::MAX).unwrap();
        assert_eq!(b.len(), whole.len());
        assert_eq!(b.to_vec(), whole.to_vec());
        assert_eq!((b.base_offset(), b.last_offset()), (100, 104));
        assert_eq!(b.max_timestamp(), v.max_timestamp());
        assert_eq!(b.whole_crc(), crc32c::crc32c(&whole));
        // Pieces that do not add up to the length the header gives.
        let short = SplitBatch::new(whole.slice(..HEADER_LEN), whole.slice(HEADER_LEN + 1..));
        assert!(short.is_err());
        let no_header =
            SplitBatch::new(whole.slice(..HEADER_LEN - 1), whole.slice(HEADER_LEN - 1..));
        assert!(no_header.is_err());
    }

    #[test]
    fn log_append_time_on_a_split_batch_matches_the_whole_batch() {
        let mut whole = sample(0, 4);
        let mut header = whole[..HEADER_LEN].to_vec();
        set_log_append_time_split(&mut header, &whole[HEADER_LEN..], 42).unwrap();
        set_log_append_time(&mut whole, 42).unwrap();
        assert_eq!(header, whole[..HEADER_LEN]);
        BatchView::parse(&whole, usize::MAX)
            .unwrap()
            .verify_crc()
            .unwrap();
        assert!(set_log_append_time_split(&mut header[..60], &[], 42).is_err());
    }

    #[test]
    fn parses_header_fields_of_a_built_batch() {
        let bytes = sample(100, 5);
        let v = BatchView::parse(&bytes, usize::MAX).unwrap();
        assert_eq!(v.base_offset(), 100);
        assert_eq!(v.last_offset(), 104);
        assert_eq!(v.record_count(), 5);
        assert_eq!(v.magic(), 2);
        assert_eq!(v.first_timestamp(), 1_700_000_000_000);
        assert_eq!(v.max_timestamp(), 1_700_000_000_004);
        assert_eq!(v.compression(), Compression::None);
        assert_eq!(v.producer_id(), -1);
        assert!(!v.is_transactional() && !v.is_control());
        assert_eq!(v.size(), bytes.len());
        v.verify_crc().unwrap();
    }

    #[test]
    fn patching_base_offset_keeps_crc_valid() {
        let mut bytes = sample(0, 3);
        set_base_offset(&mut bytes, 1_000_000).unwrap();
        set_partition_leader_epoch(&mut bytes, 7).unwrap();
        let v = BatchView::parse(&bytes, usize::MAX).unwrap();
        assert_eq!(v.base_offset(), 1_000_000);
        assert_eq!(v.last_offset(), 1_000_002);
        assert_eq!(v.partition_leader_epoch(), 7);
        v.verify_crc().unwrap();
    }

    #[test]
    fn truncated_batch_is_an_error_at_every_cut() {
        let bytes = sample(0, 3);
        for cut in 0..bytes.len() {
            let err = BatchView::parse(&bytes[..cut], usize::MAX).unwrap_err();
            assert!(
                matches!(err, BatchError::Truncated { .. }),
                "cut at {cut}: {err:?}"
            );
        }
    }

    #[test]
    fn oversized_batch_is_rejected_before_reading_it() {
        let bytes = sample(0, 50);
        let err = BatchView::parse(&bytes, 100).unwrap_err();
        assert!(matches!(err, BatchError::TooLarge { limit: 100, .. }));
        // A huge declared length on a tiny buffer: an error, no allocation.
        let mut tiny = bytes[..HEADER_LEN].to_vec();
        tiny[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            BatchView::parse(&tiny, usize::MAX),
            Err(BatchError::Truncated { .. })
        ));
        tiny[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(matches!(
            BatchView::parse(&tiny, usize::MAX),
            Err(BatchError::TooShort { .. })
        ));
    }

    #[test]
    fn wrong_magic_is_rejected() {
        let mut bytes = sample(0, 1);
        bytes[MAGIC_AT] = 1;
        assert_eq!(
            BatchView::parse(&bytes, usize::MAX).unwrap_err(),
            BatchError::BadMagic(1)
        );
    }

    #[test]
    fn flipped_bit_fails_crc() {
        let mut bytes = sample(0, 4);
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        let v = BatchView::parse(&bytes, usize::MAX).unwrap();
        assert!(matches!(v.verify_crc(), Err(BatchError::BadCrc { .. })));
    }

    #[test]
    fn iterates_concatenated_batches_and_stops_on_garbage() {
        let mut log = sample(0, 2);
        log.extend(sample(2, 3));
        let n = log.len();
        let got: Vec<_> = BatchIter::new(&log, usize::MAX)
            .map(|r| r.unwrap().1.base_offset())
            .collect();
        assert_eq!(got, vec![0, 2]);
        log.extend_from_slice(&[0, 0, 0]);
        let mut it = BatchIter::new(&log, usize::MAX);
        assert!(it.next().unwrap().is_ok());
        assert!(it.next().unwrap().is_ok());
        assert_eq!(it.position(), n);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }

    #[test]
    fn flags_are_decoded_from_attributes() {
        let mut bytes = sample(0, 1);
        let attrs: u16 = 0x04 | TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT;
        bytes[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attrs.to_be_bytes());
        let v = BatchView::parse(&bytes, usize::MAX).unwrap();
        assert_eq!(v.compression(), Compression::Zstd);
        assert_eq!(v.timestamp_type(), TimestampType::LogAppendTime);
        assert!(v.is_transactional() && v.is_control());
        bytes[ATTRIBUTES_AT + 1] = 0x07;
        assert_eq!(
            BatchView::parse(&bytes, usize::MAX).unwrap_err(),
            BatchError::UnknownCompression(7)
        );
    }
}
