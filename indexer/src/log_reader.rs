//! Reads a partition's committed records straight from the object store, by
//! the committed index the metadata service keeps (WAL ranges and segments
//! alike are byte ranges of whole batches, read by
//! `floe_storage::committed::read_batches`, as the broker reads them).

use std::sync::Arc;

use bytes::Bytes;
use floe_metadata::api::MetaApi;
use floe_storage::batch::BatchView;
use floe_storage::committed::{Batches, Wanted, read_batches};
use floe_storage::records::{DEFAULT_MAX_DECOMPRESSED, Record, decode_records};
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
}

fn key_of(topic_id: &str, partition: u32) -> Result<PartitionKey> {
    let topic = floe_metadata::api::convert::topic_id(topic_id)?;
    Ok(PartitionKey::new(topic, partition))
}

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
    pub async fn bytes_after(&self, topic_id: &str, partition: u32, from: i64) -> Result<u64> {
        let idx = self
            .meta
            .partition_index(key_of(topic_id, partition)?, from)
            .await?;
        Ok(idx.entries.iter().map(|e| e.byte_len).sum())
    }

    /// Records with offsets in `from..until`, whole batches: the first batch
    /// always, then batches while their bytes stay within `max_bytes` (the
    /// rule of `floe_storage::committed`, which reads them). Control batches
    /// are skipped (their offsets still count as read).
    pub async fn read(
        &self,
        topic_id: &str,
        partition: u32,
        from: i64,
        until: i64,
        max_bytes: u64,
    ) -> Result<LogRead> {
        let mut out = LogRead {
            next_offset: from,
            ..LogRead::default()
        };
        if from >= until {
            return Ok(out);
        }
        let idx = self
            .meta
            .partition_index(key_of(topic_id, partition)?, from)
            .await?;
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
        out.next_offset = read.next_offset.unwrap_or(from);
        for batch in &read.batches {
            take_records(batch, from, until, &mut out.records)?;
        }
        Ok(out)
    }
}

/// The records of `batch` in `from..until` (none from a control batch).
fn take_records(batch: &Bytes, from: i64, until: i64, out: &mut Vec<Record>) -> Result<()> {
    let view = BatchView::parse(batch, usize::MAX)
        .map_err(|e| IndexerError::corrupt(format!("batch: {e}")))?;
    if view.is_control() {
        return Ok(());
    }
    let records = decode_records(batch, DEFAULT_MAX_DECOMPRESSED).map_err(|e| {
        IndexerError::corrupt(format!("batch at offset {}: {e}", view.base_offset()))
    })?;
    out.extend(
        records
            .into_iter()
            .filter(|r| r.offset >= from && r.offset < until),
    );
    Ok(())
}
