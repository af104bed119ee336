//! Reads a partition's committed records straight from the object store, by
//! the committed index the metadata service keeps (WAL ranges and segments
//! alike are byte ranges of whole batches, read by
//! `floe_storage::committed::read_batches`, as the broker reads them).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use floe_metadata::api::MetaApi;
use floe_metadata::ids::TopicId;
use floe_metadata::txn::PartitionTxns;
use floe_storage::batch::BatchView;
use floe_storage::committed::{Batches, Wanted, read_batches};
use floe_storage::records::{DecodeLimits, Record, RecordStream};
use floe_storage::{PartitionKey, StorePool};

use crate::error::{IndexerError, Result};

/// Records read from a partition.
#[derive(Debug, Default)]
pub struct LogRead {
    pub records: Vec<Record>,
    /// The offset after the last batch read (where the next read starts).
    pub next_offset: i64,
    /// Batch bytes read.
    pub bytes: u64,
    /// Batches passed over because they cannot be decoded within the
    /// bounds or are malformed (their offsets count as read).
    pub skipped: u64,
    /// The partition's last stable offset when read: the read never goes
    /// past it (records of a transaction still open are not read yet).
    pub last_stable: i64,
}

/// Decoded record bytes one read gathers at most (keys, values and headers,
/// plus [`RECORD_OVERHEAD`] a record): the read ends after the batch that
/// reaches it, so an export file or a query holds at most this much plus one
/// batch's bound ([`DecodeLimits::DEFAULT`]), however well the log compresses.
pub const MAX_DECODED_BYTES: u64 = 256 * 1024 * 1024;

/// What a record costs in memory beyond its bytes (its struct and slices).
pub const RECORD_OVERHEAD: u64 = 128;

/// Reads committed records of partitions.
#[derive(Clone)]
pub struct LogReader {
    meta: Arc<dyn MetaApi>,
    pool: Arc<StorePool>,
}

impl LogReader {
    pub fn new(meta: Arc<dyn MetaApi>, pool: Arc<StorePool>) -> Self {
        Self { meta, pool }
    }

    /// Committed log bytes of the partition from `from` on (as the index
    /// says; ranges are whole batches, so this slightly overestimates).
    pub async fn bytes_after(&self, topic_id: TopicId, partition: u32, from: i64) -> Result<u64> {
        let idx = self
            .meta
            .partition_index(PartitionKey::new(topic_id, partition), from)
            .await?;
        Ok(idx.entries.iter().map(|e| e.byte_len).sum())
    }

    /// Committed records with offsets in `from..until` and below the last
    /// stable offset (see [`LogRead::last_stable`]), whole batches: the first batch
    /// always, then batches while their bytes stay within `max_bytes` (the
    /// rule of `floe_storage::committed`, which reads them) and their decoded
    /// records within `max_decoded` bytes (the read ends after the batch that
    /// reaches it; see [`MAX_DECODED_BYTES`]). Control batches, records of
    /// aborted transactions, and batches that cannot be decoded within the
    /// bounds, give no records (their offsets still count as read).
    pub async fn read(
        &self,
        topic_id: TopicId,
        partition: u32,
        from: i64,
        until: i64,
        max_bytes: u64,
        max_decoded: u64,
    ) -> Result<LogRead> {
        let mut out = LogRead {
            next_offset: from,
            ..LogRead::default()
        };
        if from >= until {
            out.last_stable = until;
            return Ok(out);
        }
        let idx = self
            .meta
            .partition_index(PartitionKey::new(topic_id, partition), from)
            .await?;
        out.last_stable = idx.txns.last_stable_offset(idx.info.high_watermark);
        let until = until.min(out.last_stable);
        if from >= until {
            return Ok(out);
        }
        let aborted = Aborted::of(&idx.txns, from, until);
        let wanted = Wanted {
            from,
            until,
            max_bytes,
        };
        let mut read = Batches::default();
        for e in &idx.entries {
            if e.first_offset >= until || read.stopped.is_some() {
                break;
            }
            let object = &e.object;
            // WAL ranges and segments alike: a byte range of whole batches.
            let end = e.byte_start.saturating_add(e.byte_len).min(object.size);
            read_batches(&*self.pool, object, e.byte_start..end, &wanted, &mut read).await?;
        }
        out.bytes = read.bytes;
        out.next_offset = from;
        let mut decoded = 0u64;
        for batch in &read.batches {
            let view = BatchView::parse(batch, usize::MAX)
                .map_err(|e| IndexerError::corrupt(format!("batch: {e}")))?;
            decoded += take_records(batch, from, until, &aborted, &mut out)?;
            out.next_offset = view.next_offset().min(until.max(from));
            if decoded >= max_decoded {
                break;
            }
        }
        if out.next_offset == from {
            out.next_offset = read.next_offset.unwrap_or(from);
        }
        if read.next_offset.is_none() && read.stopped.is_none() {
            // No batch in the ranges read: offsets a log compaction removed
            // at their end. The next read starts after them.
            if let Some(e) = idx.entries.iter().rev().find(|e| e.first_offset < until) {
                out.next_offset = out.next_offset.max((e.last_offset + 1).min(until));
            }
        }
        Ok(out)
    }
}

/// The aborted transactions of a read's range: per producer id, the offset
/// ranges its aborted transactions cover (first record to ABORT marker).
#[derive(Debug, Default)]
struct Aborted(HashMap<i64, Vec<(i64, i64)>>);

impl Aborted {
    fn of(txns: &PartitionTxns, from: i64, until: i64) -> Self {
        let mut by_producer: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        for a in txns.aborted_in(from, until - 1) {
            by_producer
                .entry(a.producer_id.0)
                .or_default()
                .push((a.first_offset, a.last_offset));
        }
        Self(by_producer)
    }

    /// Whether the transactional batch of `producer_id` at `offset` belongs
    /// to an aborted transaction. A producer has one transaction open on a
    /// partition at a time, so its batches between the first offset of an
    /// aborted transaction and its marker are that transaction's.
    fn holds(&self, producer_id: i64, offset: i64) -> bool {
        self.0
            .get(&producer_id)
            .is_some_and(|r| r.iter().any(|&(f, l)| f <= offset && offset <= l))
    }
}

/// The records of `batch` in `from..until` (none from a control batch, nor
/// from a batch of an aborted transaction); returns the decoded bytes they
/// take. A batch that cannot be decoded within [`DecodeLimits::DEFAULT`], or
/// whose records are malformed, gives none: it is logged, counted, and
/// passed over.
fn take_records(
    batch: &Bytes,
    from: i64,
    until: i64,
    aborted: &Aborted,
    out: &mut LogRead,
) -> Result<u64> {
    let view = BatchView::parse(batch, usize::MAX)
        .map_err(|e| IndexerError::corrupt(format!("batch: {e}")))?;
    if view.is_control() {
        return Ok(0);
    }
    if view.is_transactional() && aborted.holds(view.producer_id(), view.base_offset()) {
        return Ok(0);
    }
    let decoded = RecordStream::new(batch, DecodeLimits::DEFAULT).and_then(|records| {
        let mut kept = Vec::new();
        for r in records {
            let r = r?;
            if r.offset >= from && r.offset < until {
                kept.push(r);
            }
        }
        Ok(kept)
    });
    match decoded {
        Ok(kept) => {
            let bytes = kept.iter().map(record_bytes).sum();
            out.records.extend(kept);
            Ok(bytes)
        }
        Err(e) => {
            out.skipped += 1;
            crate::metrics::batch_skipped(e.is_over_bounds());
            tracing::warn!(
                base_offset = view.base_offset(),
                last_offset = view.last_offset(),
                error = %e,
                "skipping a stored batch that cannot be decoded within the bounds"
            );
            Ok(0)
        }
    }
}

/// What a decoded record takes in memory, about.
fn record_bytes(r: &Record) -> u64 {
    let len = |b: &Option<Bytes>| b.as_ref().map_or(0, |b| b.len() as u64);
    let headers: u64 = r
        .headers
        .iter()
        .map(|h| h.key.len() as u64 + len(&h.value) + 32)
        .sum();
    RECORD_OVERHEAD + len(&r.key) + len(&r.value) + headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_metadata::ids::{ProducerEpoch, ProducerId};
    use floe_metadata::txn::TxnEvent;

    #[test]
    fn aborted_ranges_hold_only_their_producers_batches() {
        let mut txns = PartitionTxns::default();
        let (p, q) = (ProducerId(7), ProducerId(8));
        let e = ProducerEpoch(0);
        txns.apply(&[
            TxnEvent::Begin {
                producer_id: p,
                epoch: e,
                offset: 10,
            },
            TxnEvent::Begin {
                producer_id: q,
                epoch: e,
                offset: 12,
            },
            TxnEvent::Marker {
                producer_id: p,
                epoch: e,
                commit: false,
                offset: 20,
            },
            TxnEvent::Marker {
                producer_id: q,
                epoch: e,
                commit: true,
                offset: 21,
            },
        ]);
        let aborted = Aborted::of(&txns, 0, 100);
        assert!(aborted.holds(7, 10) && aborted.holds(7, 19));
        assert!(!aborted.holds(7, 9) && !aborted.holds(7, 22));
        assert!(!aborted.holds(8, 12), "the committed one's records stay");
        assert!(
            !Aborted::of(&txns, 21, 100).holds(7, 22),
            "a range after the abort"
        );
        assert_eq!(txns.last_stable_offset(30), 30);
    }
}
