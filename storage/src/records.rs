//! The records inside a batch: decoding (with decompression, bounded) and a
//! builder that encodes batches for tests, benchmarks and tools.
//!
//! Record layout (Kafka magic 2), varints zig-zag encoded:
//! `length varint, attributes i8, timestampDelta varlong, offsetDelta varint,
//!  keyLength varint, key, valueLength varint, value,
//!  headerCount varint, [headerKeyLength varint, headerKey, headerValueLength varint, headerValue]*`

use std::io::{Read, Write};

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{BatchError, BatchView, Compression, HEADER_LEN, MAGIC_V2, TimestampType};

/// Bound on the decompressed size of one batch's records: the one cap every
/// reader of stored batches uses (broker timestamp lookups, segment time
/// lookups, the indexer's export and queries, the CLI's consumer).
pub const DEFAULT_MAX_DECOMPRESSED: usize = 64 * 1024 * 1024;

/// Bound on the records one batch may hold: far above what clients send
/// (librdkafka's `batch.num.messages` is 10,000; a Java producer's 16 KiB
/// `batch.size` holds a few thousand at most), and what keeps a batch that
/// claims millions of tiny records from costing millions of steps.
pub const DEFAULT_MAX_RECORDS: usize = 1 << 20;

/// Decompressed bytes pulled from a codec at a time: what a streamed decode
/// holds beyond the records it has handed out.
const STREAM_CHUNK: usize = 64 * 1024;

/// What a reader decodes of one batch at most: decompressed bytes and
/// records. A batch over either is refused with
/// [`BatchError::OverBounds`] (the records before the bound have been
/// handed out by then, when streaming).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    pub max_bytes: usize,
    pub max_records: usize,
}

impl DecodeLimits {
    /// [`DEFAULT_MAX_DECOMPRESSED`] and [`DEFAULT_MAX_RECORDS`].
    pub const DEFAULT: DecodeLimits = DecodeLimits {
        max_bytes: DEFAULT_MAX_DECOMPRESSED,
        max_records: DEFAULT_MAX_RECORDS,
    };
}

impl Default for DecodeLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

fn over(msg: impl Into<String>) -> BatchError {
    BatchError::OverBounds(msg.into())
}

/// Largest zstd window a batch may need (32 MiB), bounding the decoder's memory.
const ZSTD_WINDOW_LOG_MAX: u32 = 25;

/// The smallest possible encoded record: length, attributes, and five one-byte varints.
const MIN_RECORD_LEN: usize = 7;

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<RecordHeader>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

fn malformed(msg: impl Into<String>) -> BatchError {
    BatchError::Records(msg.into())
}

/// Decompresses a batch's records section, refusing to produce more than `max` bytes.
pub fn decompress(codec: Compression, data: &[u8], max: usize) -> Result<Vec<u8>, BatchError> {
    fn bounded(mut r: impl Read, max: usize) -> Result<Vec<u8>, BatchError> {
        let mut out = Vec::new();
        let limit = (max as u64).saturating_add(1);
        r.by_ref()
            .take(limit)
            .read_to_end(&mut out)
            .map_err(|e| malformed(format!("decompression failed: {e}")))?;
        if out.len() > max {
            return Err(over(format!("decompressed records exceed {max} bytes")));
        }
        Ok(out)
    }
    match codec {
        Compression::None => {
            if data.len() > max {
                return Err(over(format!("records exceed {max} bytes")));
            }
            Ok(data.to_vec())
        }
        Compression::Snappy => snappy_decompress(data, max),
        codec => bounded(decoder(codec, data)?, max),
    }
}

/// A reader of the decompressed records section (gzip, lz4 and zstd
/// stream; snappy blocks are decompressed whole, within the cap, by
/// `snappy_decompress`). `Send`, so a [`RecordStream`] may live across an
/// await.
fn decoder<'a>(
    codec: Compression,
    data: &'a [u8],
) -> Result<Box<dyn Read + Send + 'a>, BatchError> {
    Ok(match codec {
        Compression::None => Box::new(data),
        Compression::Gzip => Box::new(flate2::read::GzDecoder::new(data)),
        Compression::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(data)),
        Compression::Zstd => {
            let mut dec = zstd::stream::read::Decoder::new(data)
                .map_err(|e| malformed(format!("zstd: {e}")))?;
            // A frame may ask for a window of up to 2 GiB; producers use a few MiB.
            dec.window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| malformed(format!("zstd: {e}")))?;
            Box::new(dec)
        }
        Compression::Snappy => {
            return Err(malformed("snappy is decompressed by blocks, not streamed"));
        }
    })
}

/// The framing snappy-java (Kafka's Java client) writes around snappy blocks.
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;

fn snappy_decompress(data: &[u8], max: usize) -> Result<Vec<u8>, BatchError> {
    fn block(b: &[u8], max: usize, out: &mut Vec<u8>) -> Result<(), BatchError> {
        let len = snap::raw::decompress_len(b).map_err(|e| malformed(format!("snappy: {e}")))?;
        if out.len().saturating_add(len) > max {
            return Err(over(format!("decompressed records exceed {max} bytes")));
        }
        let start = out.len();
        out.resize(start + len, 0);
        snap::raw::Decoder::new()
            .decompress(b, &mut out[start..])
            .map_err(|e| malformed(format!("snappy: {e}")))?;
        Ok(())
    }
    let mut out = Vec::new();
    if data.starts_with(XERIAL_MAGIC) {
        let mut pos = XERIAL_HEADER_LEN.min(data.len());
        while pos < data.len() {
            let len = crate::bytes_ext::be_u32(data, pos)
                .ok_or_else(|| malformed("snappy: truncated xerial block length"))?
                as usize;
            pos += 4;
            let chunk = data
                .get(pos..pos.saturating_add(len))
                .ok_or_else(|| malformed("snappy: truncated xerial block"))?;
            block(chunk, max, &mut out)?;
            pos += len;
        }
    } else {
        block(data, max, &mut out)?;
    }
    Ok(out)
}

/// Compresses a records section with `codec`, as Kafka clients do.
pub fn compress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, BatchError> {
    let io = |e: std::io::Error| malformed(format!("compression failed: {e}"));
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(data).map_err(io)?;
            enc.finish().map_err(io)
        }
        Compression::Snappy => snap::raw::Encoder::new()
            .compress_vec(data)
            .map_err(|e| malformed(format!("snappy: {e}"))),
        Compression::Lz4 => {
            let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
            enc.write_all(data).map_err(io)?;
            enc.finish().map_err(|e| malformed(format!("lz4: {e}")))
        }
        Compression::Zstd => zstd::bulk::compress(data, 3).map_err(io),
    }
}

/// A cursor over varint-encoded fields with bounds checks on every read.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn varlong(&mut self) -> Result<i64, BatchError> {
        let mut raw: u64 = 0;
        for i in 0..10 {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| malformed("truncated varint"))?;
            self.pos += 1;
            raw |= ((b & 0x7f) as u64) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
            }
        }
        Err(malformed("varint longer than 10 bytes"))
    }

    fn varint(&mut self) -> Result<i32, BatchError> {
        let v = self.varlong()?;
        i32::try_from(v).map_err(|_| malformed("varint out of 32-bit range"))
    }

    fn take(&mut self, n: usize) -> Result<std::ops::Range<usize>, BatchError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| malformed("field runs past the end of the record"))?;
        let r = self.pos..end;
        self.pos = end;
        Ok(r)
    }

    fn nullable(&mut self, base: &Bytes) -> Result<Option<Bytes>, BatchError> {
        let len = self.varint()?;
        match len {
            -1 => Ok(None),
            n if n < -1 => Err(malformed("negative length")),
            n => Ok(Some(base.slice(self.take(n as usize)?))),
        }
    }
}

/// Decodes every record of the batch at the start of `batch`, within
/// `max_decompressed` bytes and [`DEFAULT_MAX_RECORDS`] records (see
/// [`RecordStream`] to look at them one by one instead).
pub fn decode_records(batch: &Bytes, max_decompressed: usize) -> Result<Vec<Record>, BatchError> {
    let limits = DecodeLimits {
        max_bytes: max_decompressed,
        ..DecodeLimits::DEFAULT
    };
    let view = BatchView::parse(batch, usize::MAX)?;
    let body_len = view.size() - HEADER_LEN;
    let stream = RecordStream::new(batch, limits)?;
    // Room for what the bytes present can hold, not what the header claims.
    let cap = stream.claimed().min(body_len / MIN_RECORD_LEN + 1);
    let mut out = Vec::with_capacity(cap);
    for r in stream {
        out.push(r?);
    }
    Ok(out)
}

/// Where a [`RecordStream`] takes its record bytes from.
enum Source<'a> {
    /// Uncompressed: records are slices of the batch.
    Plain { body: Bytes, pos: usize },
    /// Compressed: decompressed [`STREAM_CHUNK`] at a time into `buf`.
    Stream {
        reader: Box<dyn Read + Send + 'a>,
        buf: BytesMut,
        eof: bool,
    },
}

/// The records of one batch, decoded one at a time: a compressed batch is
/// decompressed as its records are read, so what is held at once is one
/// chunk and the records the caller keeps, never the whole batch. Stops with
/// [`BatchError::OverBounds`] once more than [`DecodeLimits::max_bytes`]
/// would be decompressed or more than [`DecodeLimits::max_records`] records
/// are claimed, and with [`BatchError::Records`] at malformed bytes; after
/// an error it yields nothing more.
pub struct RecordStream<'a> {
    source: Source<'a>,
    limits: DecodeLimits,
    /// Bytes of the records section read so far (decompressed).
    pulled: usize,
    base_offset: i64,
    first_timestamp: i64,
    max_timestamp: i64,
    log_append: bool,
    claimed: usize,
    left: usize,
}

impl std::fmt::Debug for RecordStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordStream")
            .field("base_offset", &self.base_offset)
            .field("left", &self.left)
            .field("pulled", &self.pulled)
            .finish()
    }
}

impl<'a> RecordStream<'a> {
    /// The records of the batch at the start of `batch` (its header must
    /// parse). A record count over `limits` is refused here, before any work.
    pub fn new(batch: &'a Bytes, limits: DecodeLimits) -> Result<Self, BatchError> {
        let view = BatchView::parse(batch, usize::MAX)?;
        let claimed = usize::try_from(view.record_count()).unwrap_or(0);
        if claimed > limits.max_records {
            return Err(over(format!(
                "the batch at offset {} claims {claimed} records, over {}",
                view.base_offset(),
                limits.max_records
            )));
        }
        let source = match view.compression() {
            Compression::None => Source::Plain {
                body: batch.slice(HEADER_LEN..view.size()),
                pos: 0,
            },
            Compression::Snappy => Source::Stream {
                reader: Box::new(std::io::Cursor::new(snappy_decompress(
                    &batch[HEADER_LEN..view.size()],
                    limits.max_bytes,
                )?)),
                buf: BytesMut::new(),
                eof: false,
            },
            codec => Source::Stream {
                reader: decoder(codec, &batch[HEADER_LEN..view.size()])?,
                buf: BytesMut::new(),
                eof: false,
            },
        };
        Ok(Self {
            source,
            limits,
            pulled: 0,
            base_offset: view.base_offset(),
            first_timestamp: view.first_timestamp(),
            max_timestamp: view.max_timestamp(),
            log_append: view.timestamp_type() == TimestampType::LogAppendTime,
            claimed,
            left: claimed,
        })
    }

    /// The record count the batch's header claims.
    pub fn claimed(&self) -> usize {
        self.claimed
    }

    /// Bytes of the records section read so far (decompressed).
    pub fn decoded_bytes(&self) -> usize {
        match &self.source {
            Source::Plain { pos, .. } => *pos,
            Source::Stream { buf, .. } => self.pulled - buf.len(),
        }
    }

    /// Makes at least `n` bytes available unless the records end first.
    fn fill(&mut self, n: usize) -> Result<(), BatchError> {
        let Source::Stream { reader, buf, eof } = &mut self.source else {
            return Ok(());
        };
        while buf.len() < n && !*eof {
            let room = (self.limits.max_bytes.saturating_add(1)).saturating_sub(self.pulled);
            if room == 0 {
                return Err(over(format!(
                    "decompressed records exceed {} bytes",
                    self.limits.max_bytes
                )));
            }
            let want = (n - buf.len()).max(STREAM_CHUNK).min(room);
            let start = buf.len();
            buf.resize(start + want, 0);
            let got = match reader.read(&mut buf[start..]) {
                Ok(got) => got,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
                Err(e) => {
                    buf.truncate(start);
                    return Err(malformed(format!("decompression failed: {e}")));
                }
            };
            buf.truncate(start + got);
            self.pulled += got;
            if got == 0 {
                *eof = true;
            }
        }
        if self.pulled > self.limits.max_bytes {
            return Err(over(format!(
                "decompressed records exceed {} bytes",
                self.limits.max_bytes
            )));
        }
        Ok(())
    }

    /// The next `n` bytes of the records section.
    fn take(&mut self, n: usize) -> Result<Bytes, BatchError> {
        if n > self.limits.max_bytes {
            return Err(over(format!(
                "a record of {n} bytes is over {} bytes",
                self.limits.max_bytes
            )));
        }
        self.fill(n)?;
        match &mut self.source {
            Source::Plain { body, pos } => {
                let end = pos
                    .checked_add(n)
                    .filter(|&e| e <= body.len())
                    .ok_or_else(|| malformed("a record runs past the end of the batch"))?;
                let out = body.slice(*pos..end);
                *pos = end;
                Ok(out)
            }
            Source::Stream { buf, .. } => {
                if buf.len() < n {
                    return Err(malformed("a record runs past the end of the records"));
                }
                Ok(buf.split_to(n).freeze())
            }
        }
    }

    /// A record's length prefix.
    fn length(&mut self) -> Result<usize, BatchError> {
        self.fill(5)?;
        let (avail, len) = match &self.source {
            Source::Plain { body, pos } => {
                let rest = body.get(*pos..).unwrap_or_default();
                let mut c = Cursor { buf: rest, pos: 0 };
                (c.varint(), c.pos)
            }
            Source::Stream { buf, .. } => {
                let mut c = Cursor { buf, pos: 0 };
                (c.varint(), c.pos)
            }
        };
        let value = avail?;
        self.take(len)?;
        usize::try_from(value).map_err(|_| malformed("negative record length"))
    }

    fn next_record(&mut self) -> Result<Record, BatchError> {
        let len = self.length()?;
        let body = self.take(len)?;
        let mut rec = Cursor { buf: &body, pos: 0 };
        rec.take(1)?; // attributes, unused
        let ts_delta = rec.varlong()?;
        let offset_delta = rec.varint()?;
        let key = rec.nullable(&body)?;
        let value = rec.nullable(&body)?;
        let header_count = rec.varint()?;
        if header_count < 0 {
            return Err(malformed("negative header count"));
        }
        let mut headers = Vec::with_capacity((header_count as usize).min(len / 2));
        for _ in 0..header_count {
            let klen = rec.varint()?;
            if klen < 0 {
                return Err(malformed("null header key"));
            }
            let key = body.slice(rec.take(klen as usize)?);
            let value = rec.nullable(&body)?;
            headers.push(RecordHeader { key, value });
        }
        if rec.pos != body.len() {
            return Err(malformed("record length does not match its fields"));
        }
        Ok(Record {
            offset: self.base_offset.saturating_add(offset_delta as i64),
            timestamp: if self.log_append {
                self.max_timestamp
            } else {
                self.first_timestamp.saturating_add(ts_delta)
            },
            key,
            value,
            headers,
        })
    }
}

impl Iterator for RecordStream<'_> {
    type Item = Result<Record, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let r = self.next_record();
        if r.is_err() {
            self.left = 0;
        }
        Some(r)
    }
}

/// A record to encode with [`BatchBuilder`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordSpec {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub timestamp_delta: i64,
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl RecordSpec {
    pub fn new(key: Option<Vec<u8>>, value: Option<Vec<u8>>, timestamp_delta: i64) -> Self {
        Self {
            key,
            value,
            timestamp_delta,
            headers: Vec::new(),
        }
    }
}

/// Encodes one record batch (magic 2) the way a Kafka producer does.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    base_offset: i64,
    base_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    records: Vec<RecordSpec>,
}

pub(crate) fn put_varlong(buf: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        buf.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    buf.put_u8(z as u8);
}

fn put_nullable(buf: &mut BytesMut, b: &Option<Vec<u8>>) {
    match b {
        None => put_varlong(buf, -1),
        Some(b) => {
            put_varlong(buf, b.len() as i64);
            buf.put_slice(b);
        }
    }
}

impl BatchBuilder {
    pub fn new(base_offset: i64, base_timestamp: i64) -> Self {
        Self {
            base_offset,
            base_timestamp,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
            control: false,
            records: Vec::new(),
        }
    }

    /// Marks the batch as sent by an idempotent (or transactional) producer.
    pub fn producer(
        mut self,
        id: i64,
        epoch: i16,
        base_sequence: i32,
        transactional: bool,
    ) -> Self {
        self.producer_id = id;
        self.producer_epoch = epoch;
        self.base_sequence = base_sequence;
        self.transactional = transactional;
        self
    }

    /// Marks the batch as a control batch (see [`crate::control`]).
    pub fn control(mut self) -> Self {
        self.control = true;
        self
    }

    pub fn push(&mut self, record: RecordSpec) -> &mut Self {
        self.records.push(record);
        self
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Encodes the batch. Fails only if the codec fails.
    pub fn build(&self, codec: Compression) -> Result<Bytes, BatchError> {
        let mut body = BytesMut::new();
        let mut rec = BytesMut::new();
        for (i, r) in self.records.iter().enumerate() {
            rec.clear();
            rec.put_i8(0);
            put_varlong(&mut rec, r.timestamp_delta);
            put_varlong(&mut rec, i as i64);
            put_nullable(&mut rec, &r.key);
            put_nullable(&mut rec, &r.value);
            put_varlong(&mut rec, r.headers.len() as i64);
            for (k, v) in &r.headers {
                put_varlong(&mut rec, k.len() as i64);
                rec.put_slice(k);
                put_nullable(&mut rec, v);
            }
            put_varlong(&mut body, rec.len() as i64);
            body.put_slice(&rec);
        }
        let records = compress(codec, &body)?;
        let max_delta = self
            .records
            .iter()
            .map(|r| r.timestamp_delta)
            .max()
            .unwrap_or(0);
        let mut attributes = codec.id() as u16;
        if self.transactional {
            attributes |= 0x10;
        }
        if self.control {
            attributes |= 0x20;
        }
        let mut out = BytesMut::with_capacity(HEADER_LEN + records.len());
        out.put_i64(self.base_offset);
        out.put_i32((HEADER_LEN - 12 + records.len()) as i32);
        out.put_i32(-1); // partition leader epoch
        out.put_u8(MAGIC_V2);
        out.put_u32(0); // CRC, filled below
        out.put_u16(attributes);
        out.put_i32(self.records.len().saturating_sub(1) as i32);
        out.put_i64(self.base_timestamp);
        out.put_i64(self.base_timestamp + max_delta);
        out.put_i64(self.producer_id);
        out.put_i16(self.producer_epoch);
        out.put_i32(self.base_sequence);
        out.put_i32(self.records.len() as i32);
        out.put_slice(&records);
        let crc = crc32c::crc32c(&out[21..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        Ok(out.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> BatchBuilder {
        let mut b = BatchBuilder::new(40, 1_000);
        b.push(RecordSpec::new(
            Some(b"a".to_vec()),
            Some(b"one".to_vec()),
            0,
        ));
        b.push(RecordSpec::new(None, None, 5));
        let mut with_headers = RecordSpec::new(Some(b"c".to_vec()), Some(vec![7u8; 3000]), 2);
        with_headers.headers = vec![
            (b"h1".to_vec(), Some(b"x".to_vec())),
            (b"h2".to_vec(), None),
        ];
        b.push(with_headers);
        b
    }

    const ALL_CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    #[test]
    fn every_codec_round_trips() {
        for codec in ALL_CODECS {
            let batch = builder().build(codec).unwrap();
            let view = BatchView::parse(&batch, usize::MAX).unwrap();
            view.verify_crc().unwrap();
            assert_eq!(view.compression(), codec);
            let recs = decode_records(&batch, DEFAULT_MAX_DECOMPRESSED).unwrap();
            assert_eq!(recs.len(), 3, "{codec:?}");
            assert_eq!(recs[0].offset, 40);
            assert_eq!(recs[0].key.as_deref(), Some(&b"a"[..]));
            assert_eq!(recs[1].key, None);
            assert_eq!(recs[1].value, None);
            assert_eq!(recs[1].timestamp, 1_005);
            assert_eq!(recs[2].offset, 42);
            assert_eq!(recs[2].value.as_ref().map(|v| v.len()), Some(3000));
            assert_eq!(recs[2].headers.len(), 2);
            assert_eq!(recs[2].headers[1].value, None);
            assert_eq!(view.max_timestamp(), 1_005);
        }
    }

    #[test]
    fn xerial_framed_snappy_is_decoded() {
        let plain = b"hello hello hello hello".repeat(50);
        let block = snap::raw::Encoder::new().compress_vec(&plain).unwrap();
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&1u32.to_be_bytes());
        framed.extend_from_slice(&1u32.to_be_bytes());
        for half in [&block[..], &block[..]] {
            framed.extend_from_slice(&(half.len() as u32).to_be_bytes());
            framed.extend_from_slice(half);
        }
        let out = decompress(Compression::Snappy, &framed, 1 << 20).unwrap();
        assert_eq!(out.len(), plain.len() * 2);
    }

    #[test]
    fn decompression_bomb_is_refused() {
        let zeros = vec![0u8; 4 << 20];
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let packed = compress(codec, &zeros).unwrap();
            let err = decompress(codec, &packed, 1 << 20).unwrap_err();
            assert!(err.to_string().contains("exceed"), "{codec:?}: {err}");
        }
    }

    #[test]
    fn default_cap_admits_64_mib_of_records_and_no_more() {
        assert_eq!(DEFAULT_MAX_DECOMPRESSED, 64 * 1024 * 1024);
        let at_cap = vec![0u8; DEFAULT_MAX_DECOMPRESSED];
        let packed = compress(Compression::Zstd, &at_cap).unwrap();
        let out = decompress(Compression::Zstd, &packed, DEFAULT_MAX_DECOMPRESSED).unwrap();
        assert_eq!(out.len(), DEFAULT_MAX_DECOMPRESSED);
        let over = vec![0u8; DEFAULT_MAX_DECOMPRESSED + 1];
        let packed = compress(Compression::Zstd, &over).unwrap();
        let err = decompress(Compression::Zstd, &packed, DEFAULT_MAX_DECOMPRESSED).unwrap_err();
        assert!(err.to_string().contains("exceed"), "{err}");
    }

    #[test]
    fn corrupt_records_give_errors_not_panics() {
        let batch = builder().build(Compression::None).unwrap();
        for cut in HEADER_LEN..batch.len() {
            let mut b = batch[..cut].to_vec();
            let len = (b.len() - 12) as i32;
            b[8..12].copy_from_slice(&len.to_be_bytes());
            assert!(
                decode_records(&Bytes::from(b), 1 << 20).is_err(),
                "cut {cut}"
            );
        }
        // A record count far beyond the bytes present.
        let mut b = batch.to_vec();
        b[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_records(&Bytes::from(b), 1 << 20).is_err());
    }

    /// A zstd batch of `count` empty records (4 bytes each decompressed):
    /// tiny on the wire, large once decoded.
    fn bomb(count: usize) -> Bytes {
        let mut b = BatchBuilder::new(0, 1_000);
        for _ in 0..count {
            b.push(RecordSpec::new(None, None, 0));
        }
        b.build(Compression::Zstd).unwrap()
    }

    #[test]
    fn streamed_records_equal_decoded_ones_for_every_codec() {
        for codec in ALL_CODECS {
            let batch = builder().build(codec).unwrap();
            let all = decode_records(&batch, DEFAULT_MAX_DECOMPRESSED).unwrap();
            let streamed: Vec<Record> = RecordStream::new(&batch, DecodeLimits::DEFAULT)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(streamed, all, "{codec:?}");
        }
    }

    #[test]
    fn a_bomb_is_decoded_only_up_to_the_bounds_then_refused() {
        let batch = bomb(300_000);
        assert!(
            batch.len() < 1_200_000 / 4,
            "{} bytes on the wire",
            batch.len()
        );
        let limits = DecodeLimits {
            max_bytes: 256 * 1024,
            max_records: DEFAULT_MAX_RECORDS,
        };
        let mut stream = RecordStream::new(&batch, limits).unwrap();
        let mut n = 0usize;
        let err = loop {
            match stream.next() {
                Some(Ok(_)) => n += 1,
                Some(Err(e)) => break e,
                None => panic!("the whole bomb was decoded"),
            }
            assert!(stream.pulled <= limits.max_bytes + 1);
        };
        assert!(err.is_over_bounds(), "{err}");
        assert!(n > 0 && n < 300_000, "{n} records before the bound");
        assert!(stream.next().is_none(), "nothing after an error");
        // The same with the whole-batch decoder.
        let err = decode_records(&batch, limits.max_bytes).unwrap_err();
        assert!(err.is_over_bounds(), "{err}");
    }

    #[test]
    fn a_batch_claiming_too_many_records_is_refused_before_any_work() {
        let batch = bomb(1000);
        let limits = DecodeLimits {
            max_bytes: DEFAULT_MAX_DECOMPRESSED,
            max_records: 999,
        };
        let err = RecordStream::new(&batch, limits).unwrap_err();
        assert!(err.is_over_bounds(), "{err}");
        // A count far beyond the records present, within the bound: an
        // error once the records run out, not an allocation.
        let mut b = builder().build(Compression::Zstd).unwrap().to_vec();
        b[57..61].copy_from_slice(&1_000_000i32.to_be_bytes());
        let b = Bytes::from(b);
        let results: Vec<_> = RecordStream::new(&b, DecodeLimits::DEFAULT)
            .unwrap()
            .collect();
        assert_eq!(results.len(), 4, "three records, then the error");
        assert!(results[3].as_ref().is_err_and(|e| !e.is_over_bounds()));
    }

    #[test]
    fn log_append_time_applies_max_timestamp_to_all_records() {
        let mut b = builder().build(Compression::None).unwrap().to_vec();
        b[22] |= 0x08;
        let recs = decode_records(&Bytes::from(b), 1 << 20).unwrap();
        assert!(recs.iter().all(|r| r.timestamp == 1_005));
    }
}
