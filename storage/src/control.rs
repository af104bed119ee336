//! Transaction markers: the control batches (attributes transactional and
//! control) that end a producer's transaction on a partition. The batch
//! holds one record whose key says COMMIT or ABORT (version 0, then the
//! type: 0 abort, 1 commit, as Kafka's `ControlRecordType`) and whose value
//! carries the coordinator's epoch (version 0, then an int32). Clients skip
//! control batches; a `read_committed` reader uses them to end the
//! transactions the fetch's aborted-transaction list began.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::batch::{BatchError, BatchView, Compression};
#[cfg(test)]
use crate::records::decode_records;
use crate::records::{BatchBuilder, DecodeLimits, RecordSpec, RecordStream};

/// The outcome a marker writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
}

impl ControlType {
    fn code(self) -> i16 {
        match self {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
        }
    }
}

/// A marker as read back from a control batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub kind: ControlType,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
}

/// Encodes a marker batch at offset 0 (the owner writes its offset in when
/// it sequences it), with `timestamp_ms` as its record's time.
pub fn marker_batch(m: &Marker, timestamp_ms: i64) -> Result<Bytes, BatchError> {
    let mut key = BytesMut::with_capacity(4);
    key.put_i16(0);
    key.put_i16(m.kind.code());
    let mut value = BytesMut::with_capacity(6);
    value.put_i16(0);
    value.put_i32(m.coordinator_epoch);
    let mut b = BatchBuilder::new(0, timestamp_ms)
        .producer(m.producer_id, m.producer_epoch, -1, true)
        .control();
    b.push(RecordSpec::new(Some(key.to_vec()), Some(value.to_vec()), 0));
    b.build(Compression::None)
}

/// The marker a control batch holds; `None` for a batch that is not a
/// transactional control batch, or a control record of another kind (Kafka
/// has others, and Floe's delayed batches are control batches of a type of
/// their own, `crate::delayed`; a reader passes over them as over markers).
pub fn read_marker(batch: &Bytes) -> Result<Option<Marker>, BatchError> {
    let view = BatchView::parse(batch, usize::MAX)?;
    // Markers are transactional: a control batch that is not (a delayed
    // batch, `crate::delayed`) holds none.
    if !view.is_control() || !view.is_transactional() {
        return Ok(None);
    }
    let (producer_id, producer_epoch) = (view.producer_id(), view.producer_epoch());
    // The first record only, decoded as a stream (bounded).
    let Some(r) = RecordStream::new(batch, DecodeLimits::DEFAULT)?.next() else {
        return Ok(None);
    };
    let r = r?;
    let mut key = r.key.clone().unwrap_or_default();
    if key.len() < 4 {
        return Err(BatchError::Records("control record key too short".into()));
    }
    let (_version, kind) = (key.get_i16(), key.get_i16());
    let kind = match kind {
        0 => ControlType::Abort,
        1 => ControlType::Commit,
        _ => return Ok(None),
    };
    let mut value = r.value.clone().unwrap_or_default();
    let coordinator_epoch = if value.len() >= 6 {
        value.advance(2);
        value.get_i32()
    } else {
        -1
    };
    Ok(Some(Marker {
        kind,
        producer_id,
        producer_epoch,
        coordinator_epoch,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_batch_reads_back_and_is_a_transactional_control_batch() {
        for kind in [ControlType::Commit, ControlType::Abort] {
            let m = Marker {
                kind,
                producer_id: 4242,
                producer_epoch: 7,
                coordinator_epoch: 3,
            };
            let b = marker_batch(&m, 1_700_000_000_000).unwrap();
            let view = BatchView::parse(&b, usize::MAX).unwrap();
            view.verify_crc().unwrap();
            assert!(view.is_control() && view.is_transactional());
            assert_eq!(view.record_count(), 1);
            assert_eq!(view.base_sequence(), -1);
            assert_eq!((view.producer_id(), view.producer_epoch()), (4242, 7));
            assert_eq!(view.max_timestamp(), 1_700_000_000_000);
            assert_eq!(read_marker(&b).unwrap(), Some(m));
            // Key and value as Kafka lays them out.
            let r = &decode_records(&b, 1024).unwrap()[0];
            let code = if kind == ControlType::Commit { 1 } else { 0 };
            assert_eq!(r.key.as_deref(), Some(&[0, 0, 0, code][..]));
            assert_eq!(r.value.as_deref(), Some(&[0, 0, 0, 0, 0, 3][..]));
        }
    }

    #[test]
    fn a_data_batch_holds_no_marker() {
        let mut b = BatchBuilder::new(0, 1).producer(1, 0, 0, true);
        b.push(RecordSpec::new(None, Some(b"v".to_vec()), 0));
        let b = b.build(Compression::None).unwrap();
        assert_eq!(read_marker(&b).unwrap(), None);
        // A control batch whose key is too short is malformed.
        let mut c = BatchBuilder::new(0, 1).producer(1, 0, -1, true).control();
        c.push(RecordSpec::new(Some(vec![0]), None, 0));
        assert!(read_marker(&c.build(Compression::None).unwrap()).is_err());
    }
}
