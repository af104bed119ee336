//! Delayed batches: how a topic with `floe.delayed.delivery` holds records
//! not due yet in its own log. A delayed batch is a control batch (control
//! attribute set, never the transactional one) with the producer id, epoch
//! and base sequence of the batch it replaces, so idempotent de-duplication
//! works on it as on any batch. Each of its records stands for one record
//! of the produced batch, at the same offset delta: its key is a control
//! key (version 0, type [`DELAYED_CONTROL_TYPE`]) and its value the
//! original record ([`DelayedRecord`], encoded by [`encode_value`]).
//!
//! Kafka clients skip control batches and pass over control types they do
//! not know; [`crate::control::read_marker`] reads no marker from one.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::batch::{BatchError, BatchView, Compression};
use crate::records::{BatchBuilder, DecodeLimits, RecordHeader, RecordSpec, RecordStream};

/// The control type of a delayed record's key ("Fd"): not Kafka's ABORT
/// (0) or COMMIT (1), nor any type Kafka uses.
pub const DELAYED_CONTROL_TYPE: i16 = 0x4664;

/// The version of [`encode_value`]'s layout.
const VALUE_VERSION: i16 = 0;

/// One delayed record: when it is due and the record as produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayedRecord {
    /// Epoch milliseconds.
    pub due_ms: u64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<RecordHeader>,
}

/// The control key of a delayed record.
pub fn control_key() -> [u8; 4] {
    let mut k = [0u8; 4];
    k[2..].copy_from_slice(&DELAYED_CONTROL_TYPE.to_be_bytes());
    k
}

fn put_bytes(out: &mut BytesMut, b: Option<&[u8]>) {
    match b {
        None => out.put_i32(-1),
        Some(b) => {
            out.put_i32(i32::try_from(b.len()).unwrap_or(i32::MAX));
            out.put_slice(b);
        }
    }
}

/// The value of a delayed record: version (i16), due (i64 ms), timestamp
/// (i64), key and value (i32 length, −1 for null, then the bytes), the
/// header count (i32) and each header's key and value the same way.
pub fn encode_value(r: &DelayedRecord) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(VALUE_VERSION);
    out.put_i64(i64::try_from(r.due_ms).unwrap_or(i64::MAX));
    out.put_i64(r.timestamp);
    put_bytes(&mut out, r.key.as_deref());
    put_bytes(&mut out, r.value.as_deref());
    out.put_i32(i32::try_from(r.headers.len()).unwrap_or(i32::MAX));
    for h in &r.headers {
        put_bytes(&mut out, Some(&h.key));
        put_bytes(&mut out, h.value.as_deref());
    }
    out.freeze()
}

fn bad(msg: &str) -> BatchError {
    BatchError::Records(format!("delayed record: {msg}"))
}

fn take_i32(b: &mut Bytes) -> Result<i32, BatchError> {
    if b.remaining() < 4 {
        return Err(bad("truncated"));
    }
    Ok(b.get_i32())
}

/// Bytes whose length is read first; never more than what is there.
fn take_bytes(b: &mut Bytes) -> Result<Option<Bytes>, BatchError> {
    let len = take_i32(b)?;
    if len == -1 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| bad("negative length"))?;
    if len > b.remaining() {
        return Err(bad("length past the end"));
    }
    Ok(Some(b.split_to(len)))
}

/// Reads [`encode_value`]'s layout back. Lengths are checked against the
/// bytes present: nothing is allocated beyond them.
pub fn decode_value(mut b: Bytes) -> Result<DelayedRecord, BatchError> {
    if b.remaining() < 18 {
        return Err(bad("truncated"));
    }
    if b.get_i16() != VALUE_VERSION {
        return Err(bad("unknown version"));
    }
    let due = b.get_i64();
    let timestamp = b.get_i64();
    let key = take_bytes(&mut b)?;
    let value = take_bytes(&mut b)?;
    let count = usize::try_from(take_i32(&mut b)?).map_err(|_| bad("negative header count"))?;
    // Each header takes at least 8 bytes.
    if count > b.remaining() / 8 {
        return Err(bad("more headers than bytes"));
    }
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let key = take_bytes(&mut b)?.ok_or_else(|| bad("a null header key"))?;
        let value = take_bytes(&mut b)?;
        headers.push(RecordHeader { key, value });
    }
    if b.has_remaining() {
        return Err(bad("bytes after the headers"));
    }
    Ok(DelayedRecord {
        due_ms: u64::try_from(due).map_err(|_| bad("negative due time"))?,
        timestamp,
        key,
        value,
        headers,
    })
}

/// Who produced the batch a delayed batch replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Producer {
    pub id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
}

impl Producer {
    /// A batch without a producer id.
    pub const NONE: Producer = Producer {
        id: -1,
        epoch: -1,
        base_sequence: -1,
    };
}

/// Encodes a delayed batch at offset 0 holding `records` (one per offset,
/// in order), timestamped `timestamp_ms` (the time it was held: retention
/// counts from then), in `codec`.
pub fn delayed_batch(
    producer: Producer,
    timestamp_ms: i64,
    records: &[DelayedRecord],
    codec: Compression,
) -> Result<Bytes, BatchError> {
    let mut b = BatchBuilder::new(0, timestamp_ms)
        .producer(producer.id, producer.epoch, producer.base_sequence, false)
        .control();
    for r in records {
        b.push(RecordSpec::new(
            Some(control_key().to_vec()),
            Some(encode_value(r).to_vec()),
            0,
        ));
    }
    b.build(codec)
}

/// Whether a batch is a delayed batch: a control batch whose first record
/// has the delayed control key. `Ok(None)` for any other batch.
pub fn read_delayed(
    batch: &Bytes,
    limits: DecodeLimits,
) -> Result<Option<Vec<(i64, DelayedRecord)>>, BatchError> {
    let view = BatchView::parse(batch, usize::MAX)?;
    if !view.is_control() || view.is_transactional() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for (i, r) in RecordStream::new(batch, limits)?.enumerate() {
        let r = r?;
        let key = r.key.as_deref().unwrap_or_default();
        if key != control_key() {
            if i == 0 {
                return Ok(None);
            }
            return Err(bad("a delayed batch with another control record"));
        }
        let value = r.value.ok_or_else(|| bad("no value"))?;
        out.push((r.offset, decode_value(value)?));
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(due: u64, headers: usize) -> DelayedRecord {
        DelayedRecord {
            due_ms: due,
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::from_static(b"k")),
            value: None,
            headers: (0..headers)
                .map(|i| RecordHeader {
                    key: Bytes::from(format!("h{i}")),
                    value: (i % 2 == 0).then(|| Bytes::from_static(b"v")),
                })
                .collect(),
        }
    }

    #[test]
    fn a_delayed_value_reads_back_and_a_damaged_one_is_refused() {
        let r = record(1_700_000_005_000, 3);
        let v = encode_value(&r);
        assert_eq!(decode_value(v.clone()).unwrap(), r);
        for cut in 0..v.len() {
            assert!(decode_value(v.slice(..cut)).is_err(), "cut at {cut}");
        }
        let mut longer = BytesMut::from(&v[..]);
        longer.put_u8(0);
        assert!(decode_value(longer.freeze()).is_err());
        // A header count far beyond the bytes allocates nothing.
        let mut huge = BytesMut::from(&encode_value(&record(5, 0))[..]);
        let n = huge.len();
        huge[n - 4..].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_value(huge.freeze()).is_err());
    }

    #[test]
    fn a_delayed_batch_is_a_non_transactional_control_batch_with_no_marker() {
        let records = vec![record(10, 0), record(20, 2)];
        let p = Producer {
            id: 42,
            epoch: 3,
            base_sequence: 7,
        };
        for codec in [Compression::None, Compression::Gzip] {
            let b = delayed_batch(p, 1_000, &records, codec).unwrap();
            let view = BatchView::parse(&b, usize::MAX).unwrap();
            view.verify_crc().unwrap();
            assert!(view.is_control() && !view.is_transactional());
            assert_eq!((view.producer_id(), view.producer_epoch()), (42, 3));
            assert_eq!(view.base_sequence(), 7);
            assert_eq!(view.last_offset_delta(), 1);
            assert_eq!(crate::control::read_marker(&b).unwrap(), None);
            let read = read_delayed(&b, DecodeLimits::DEFAULT).unwrap().unwrap();
            assert_eq!(read, vec![(0, records[0].clone()), (1, records[1].clone())]);
        }
    }

    #[test]
    fn markers_and_data_batches_are_not_delayed_batches() {
        let m = crate::control::marker_batch(
            &crate::control::Marker {
                kind: crate::control::ControlType::Commit,
                producer_id: 1,
                producer_epoch: 0,
                coordinator_epoch: 0,
            },
            5,
        )
        .unwrap();
        assert_eq!(read_delayed(&m, DecodeLimits::DEFAULT).unwrap(), None);
        let mut d = BatchBuilder::new(0, 1);
        d.push(RecordSpec::new(None, Some(b"v".to_vec()), 0));
        let d = d.build(Compression::None).unwrap();
        assert_eq!(read_delayed(&d, DecodeLimits::DEFAULT).unwrap(), None);
    }
}
