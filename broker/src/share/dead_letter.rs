//! Writing a share group's dead records to its dead-letter topic
//! (`floe.dlq.topic`): finding the record in the source log, the record
//! the dead-letter topic gets (the original key, value and headers, plus
//! `floe-dlq-*` headers naming where it came from and why), the producer
//! that appends it idempotently, and [`DeadLetterSink`], the way to the
//! dead-letter partition's owner (this broker or another, over the RPC).
//!
//! Exactly once: each share-partition appends as its own idempotent
//! producer (an id derived from the group and the partition, see
//! [`producer_id`]), one record at a time, with the epoch and sequence its
//! durable state recorded before the append. A new owner repeats an append
//! that may have landed with the same epoch and sequence, and the
//! dead-letter partition answers it as a duplicate instead of storing it
//! twice.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use floe_storage::PartitionKey;
use floe_storage::batch::{BatchView, Compression};
use floe_storage::records::{DEFAULT_MAX_DECOMPRESSED, Record, RecordSpec, decode_records};
use floe_types::{Offset, TopicId};

use super::node::ShareNode;
use super::partition::DeadLetter;
use crate::error::{BrokerError, CallError, ErrorKind};
use crate::partitions::Acks;
use crate::partitions::PartitionOwner;
use crate::rpc::RemoteBroker;

/// The headers Floe adds to a dead-lettered record.
pub const HEADER_TOPIC: &str = "floe-dlq-topic";
pub const HEADER_PARTITION: &str = "floe-dlq-partition";
pub const HEADER_OFFSET: &str = "floe-dlq-offset";
pub const HEADER_DELIVERY_COUNT: &str = "floe-dlq-delivery-count";
pub const HEADER_REASON: &str = "floe-dlq-reason";
pub const HEADER_GROUP: &str = "floe-dlq-group";

/// How long an append may wait for room at the dead-letter partition.
const ROOM_WAIT: Duration = Duration::from_secs(5);

/// The way to a dead-letter topic's partitions.
#[async_trait::async_trait]
pub trait DeadLetterSink: Send + Sync {
    /// The topic's id and partition count, if it exists.
    fn topic(&self, name: &str) -> Option<(TopicId, u32)>;

    /// A topic's name, if it exists.
    fn topic_name(&self, id: TopicId) -> Option<String>;

    /// Appends `batch` (one idempotent batch) to `key`, answered once it is
    /// stored (`acks=all`); a duplicate of a batch stored before is answered
    /// as stored.
    async fn append(&self, key: &PartitionKey, batch: Bytes) -> Result<(), CallError>;
}

/// What the source log holds at a dead record's offset.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    Record(Record),
    /// Nothing to append: a control record, a key compacted away, or a batch
    /// that cannot be read.
    Nothing,
}

/// The record at `offset` in `pieces` (whole batches as a fetch returns
/// them, from that offset on; a batch may come in several pieces, its
/// header apart from its records).
pub fn find(pieces: &[Bytes], offset: Offset) -> Found {
    let joined: Bytes = match pieces {
        [one] => one.clone(),
        many => many.concat().into(),
    };
    let mut pos = 0;
    while pos < joined.len() {
        let Ok(view) = BatchView::parse(&joined[pos..], usize::MAX) else {
            return Found::Nothing;
        };
        let size = view.size();
        if view.base_offset() <= offset.0 && offset.0 <= view.last_offset() {
            if view.is_control() {
                return Found::Nothing;
            }
            let batch = joined.slice(pos..pos + size);
            return match decode_records(&batch, DEFAULT_MAX_DECOMPRESSED) {
                Ok(records) => records
                    .into_iter()
                    .find(|r| r.offset == offset.0)
                    .map_or(Found::Nothing, Found::Record),
                Err(_) => Found::Nothing,
            };
        }
        if view.base_offset() > offset.0 {
            return Found::Nothing;
        }
        pos += size;
    }
    Found::Nothing
}

/// Where a dead record came from.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub group: &'a str,
    pub topic: &'a str,
    pub partition: u32,
}

/// The producer id a share-partition appends to its dead-letter topic
/// under: derived from the group and the partition (FNV-1a), in the upper
/// half of the id space (`2^62` and above), which the metadata service's
/// producer id blocks (counted up from 0) never reach.
pub fn producer_id(group: &str, key: &PartitionKey) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let partition = key.partition.to_be_bytes();
    let bytes = group
        .as_bytes()
        .iter()
        .chain(&[0u8])
        .chain(key.topic.0.as_bytes())
        .chain(&partition);
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (1i64 << 62) | (h & ((1u64 << 62) - 1)) as i64
}

/// The batch appended to the dead-letter topic for `record`: one record,
/// with its key, value, timestamp and headers, and the `floe-dlq-*`
/// headers, under the share-partition's producer at the epoch and
/// sequence `dead` carries.
pub fn batch(
    record: &Record,
    source: Source<'_>,
    dead: &DeadLetter,
    producer_id: i64,
) -> Result<Bytes, CallError> {
    let mut headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = record
        .headers
        .iter()
        .map(|h| (h.key.to_vec(), h.value.as_ref().map(|v| v.to_vec())))
        .collect();
    for (k, v) in [
        (HEADER_TOPIC, source.topic.to_owned()),
        (HEADER_PARTITION, source.partition.to_string()),
        (HEADER_OFFSET, dead.offset.0.to_string()),
        (HEADER_DELIVERY_COUNT, dead.deliveries.to_string()),
        (HEADER_REASON, dead.reason.as_str().to_owned()),
        (HEADER_GROUP, source.group.to_owned()),
    ] {
        headers.push((k.as_bytes().to_vec(), Some(v.into_bytes())));
    }
    let mut spec = RecordSpec::new(
        record.key.as_ref().map(|k| k.to_vec()),
        record.value.as_ref().map(|v| v.to_vec()),
        0,
    );
    spec.headers = headers;
    let mut builder = floe_storage::records::BatchBuilder::new(0, record.timestamp).producer(
        producer_id,
        dead.producer_epoch,
        dead.sequence,
        false,
    );
    builder.push(spec);
    builder.build(Compression::None).map_err(|e| {
        CallError::from(BrokerError::new(
            ErrorKind::InvalidRequest,
            format!("dead-letter batch not built: {e}"),
        ))
    })
}

/// Whether the dead-letter partition refused the producer's epoch or
/// sequence (nothing was stored).
pub fn is_sequence_refusal(e: &CallError) -> bool {
    matches!(e, CallError::Broker(b) if matches!(
        b.kind(),
        ErrorKind::OutOfOrderSequence | ErrorKind::SequenceGap | ErrorKind::InvalidProducerEpoch
    ))
}

/// One RPC client per peer broker, reused by the dead-letter appends.
#[derive(Debug, Default)]
pub struct Peers(Mutex<HashMap<String, RemoteBroker>>);

impl Peers {
    fn get(&self, addr: &str) -> RemoteBroker {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(addr.to_owned())
            .or_insert_with(|| RemoteBroker::new(addr))
            .clone()
    }
}

/// A broker reaches a dead-letter partition as a proxy reaches a
/// partition's owner: itself when it owns it, else over the RPC.
#[async_trait::async_trait]
impl DeadLetterSink for ShareNode {
    fn topic(&self, name: &str) -> Option<(TopicId, u32)> {
        self.partitions
            .view()
            .current()
            .topics
            .get(name)
            .map(|t| (t.id, t.partition_count))
    }

    fn topic_name(&self, id: TopicId) -> Option<String> {
        self.partitions
            .view()
            .current()
            .by_id
            .get(&id)
            .map(|t| t.name.clone())
    }

    async fn append(&self, key: &PartitionKey, batch: Bytes) -> Result<(), CallError> {
        let snap = self.partitions.view().current();
        let owner = snap
            .by_id
            .get(&key.topic)
            .and_then(|t| t.partitions.iter().find(|p| p.partition == key.partition))
            .and_then(|p| p.owner)
            .ok_or_else(|| CallError::from(BrokerError::not_owner(*key)))?;
        let pending = if owner == self.partitions.broker_id() {
            PartitionOwner::append(&self.partitions, key, batch, Acks::All, ROOM_WAIT).await?
        } else {
            let addr = snap
                .broker_addr(owner)
                .ok_or_else(|| CallError::from(BrokerError::not_owner(*key)))?;
            let peer = self.service.dead_letter_peers.get(addr);
            peer.append(key, batch, Acks::All, ROOM_WAIT).await?
        };
        pending.wait().await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use floe_storage::records::BatchBuilder;

    use super::*;
    use crate::share::partition::DeadLetterReason;

    fn two_batches() -> Vec<Bytes> {
        let mut a = BatchBuilder::new(10, 1_000);
        let mut r = RecordSpec::new(Some(b"k".to_vec()), Some(b"v10".to_vec()), 0);
        r.headers = vec![(b"h".to_vec(), Some(b"x".to_vec()))];
        a.push(r);
        a.push(RecordSpec::new(None, Some(b"v11".to_vec()), 5));
        let mut b = BatchBuilder::new(12, 2_000);
        b.push(RecordSpec::new(None, Some(b"v12".to_vec()), 0));
        let mut joined = a.build(Compression::None).unwrap().to_vec();
        joined.extend_from_slice(&b.build(Compression::None).unwrap());
        vec![Bytes::from(joined)]
    }

    #[test]
    fn the_record_at_an_offset_is_found_in_whole_batches() {
        let pieces = two_batches();
        let Found::Record(r) = find(&pieces, Offset(11)) else {
            panic!("not found")
        };
        assert_eq!(
            (r.value.unwrap().as_ref(), r.timestamp),
            (&b"v11"[..], 1_005)
        );
        let Found::Record(r) = find(&pieces, Offset(12)) else {
            panic!("not found")
        };
        assert_eq!(r.value.unwrap().as_ref(), b"v12");
        assert_eq!(find(&pieces, Offset(13)), Found::Nothing);
        assert_eq!(find(&pieces, Offset(9)), Found::Nothing);
        // Hostile or cut bytes find nothing and do not panic.
        assert_eq!(
            find(&[Bytes::from_static(&[0xff; 40])], Offset(0)),
            Found::Nothing
        );
        let cut = pieces[0].slice(..pieces[0].len() - 3);
        assert!(matches!(find(&[cut], Offset(10)), Found::Record(_)));
        let cut = pieces[0].slice(..20);
        assert_eq!(find(&[cut], Offset(10)), Found::Nothing);
        // A batch in two pieces (its header apart, as the log serves it).
        let split = [pieces[0].slice(..61), pieces[0].slice(61..)];
        assert!(matches!(find(&split, Offset(12)), Found::Record(_)));
    }

    #[test]
    fn a_control_record_has_nothing_to_dead_letter() {
        let mut c = BatchBuilder::new(5, 0).producer(7, 0, -1, true).control();
        c.push(RecordSpec::new(Some(vec![0, 0, 0, 1]), Some(vec![0; 6]), 0));
        let pieces = vec![c.build(Compression::None).unwrap()];
        assert_eq!(find(&pieces, Offset(5)), Found::Nothing);
    }

    #[test]
    fn the_dead_letter_record_keeps_the_original_and_says_where_it_came_from() {
        let Found::Record(r) = find(&two_batches(), Offset(10)) else {
            panic!("not found")
        };
        let dead = DeadLetter {
            offset: Offset(10),
            deliveries: 3,
            reason: DeadLetterReason::DeliveryLimit,
            producer_epoch: 2,
            sequence: 9,
        };
        let source = Source {
            group: "g",
            topic: "orders",
            partition: 4,
        };
        let pid = producer_id("g", &PartitionKey::new(TopicId(uuid::Uuid::nil()), 4));
        let batch = batch(&r, source, &dead, pid).unwrap();
        let view = BatchView::parse(&batch, usize::MAX).unwrap();
        assert_eq!(
            (
                view.producer_id(),
                view.producer_epoch(),
                view.base_sequence()
            ),
            (pid, 2, 9)
        );
        let out = decode_records(&batch, DEFAULT_MAX_DECOMPRESSED).unwrap();
        assert_eq!(out.len(), 1);
        let out = &out[0];
        assert_eq!(out.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(out.value.as_deref(), Some(&b"v10"[..]));
        assert_eq!(out.timestamp, 1_000);
        let headers: Vec<(String, String)> = out
            .headers
            .iter()
            .map(|x| {
                (
                    String::from_utf8(x.key.to_vec()).unwrap(),
                    String::from_utf8(x.value.clone().unwrap_or_default().to_vec()).unwrap(),
                )
            })
            .collect();
        assert_eq!(
            headers,
            [
                ("h", "x"),
                (HEADER_TOPIC, "orders"),
                (HEADER_PARTITION, "4"),
                (HEADER_OFFSET, "10"),
                (HEADER_DELIVERY_COUNT, "3"),
                (HEADER_REASON, "delivery-count-limit"),
                (HEADER_GROUP, "g"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn each_share_partition_has_its_own_producer_id_above_the_allocated_ones() {
        let key = |p| PartitionKey::new(TopicId(uuid::Uuid::nil()), p);
        let ids = [
            producer_id("g", &key(0)),
            producer_id("g", &key(1)),
            producer_id("h", &key(0)),
        ];
        assert!(ids.iter().all(|id| *id >= 1 << 62));
        assert_ne!(ids[0], ids[1]);
        assert_ne!(ids[0], ids[2]);
        assert_eq!(ids[0], producer_id("g", &key(0)));
    }
}
