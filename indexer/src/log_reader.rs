//! Reads a partition's committed records straight from the object store, by
//! the committed index the metadata service keeps (WAL ranges and segments
//! alike are byte ranges of whole batches).

use std::sync::Arc;

use bytes::Bytes;
use floe_metadata::api::client::MetaClient;
use floe_storage::batch::{BatchIter, BatchView};
use floe_storage::records::{DEFAULT_MAX_DECOMPRESSED, Record, decode_records};
use floe_storage::{EndpointId, ObjectKey, ObjectRef, StorePool};

use crate::error::{IndexerError, Result};

/// Bytes read from the store at a time.
const CHUNK: u64 = 8 * 1024 * 1024;
/// Smallest prefix that tells a batch's size.
const SIZE_PREFIX: u64 = 12;

/// Records read from a partition.
#[derive(Debug, Default)]
pub struct LogRead {
    pub records: Vec<Record>,
    /// The offset after the last batch read (where the next read starts).
    pub next_offset: i64,
    /// Batch bytes read.
    pub bytes: u64,
}

/// Reads committed records of partitions.
#[derive(Clone)]
pub struct LogReader {
    meta: Arc<MetaClient>,
    pool: Arc<StorePool>,
}

impl LogReader {
    pub fn new(meta: Arc<MetaClient>, pool: Arc<StorePool>) -> Self {
        Self { meta, pool }
    }

    /// Committed log bytes of the partition from `from` on (as the index
    /// says; ranges are whole batches, so this slightly overestimates).
    pub async fn bytes_after(&self, topic_id: &str, partition: u32, from: i64) -> Result<u64> {
        let idx = self.meta.partition_index(topic_id, partition, from).await?;
        Ok(idx.entries.iter().map(|e| e.byte_len).sum())
    }

    /// Records with offsets in `from..until`, whole batches, stopping after
    /// the batch that brings the bytes read to `max_bytes` or more.
    /// Control batches are skipped (their offsets still count as read).
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
        let idx = self.meta.partition_index(topic_id, partition, from).await?;
        for e in &idx.entries {
            if e.first_offset >= until || out.bytes >= max_bytes {
                break;
            }
            let Some(o) = &e.object else {
                return Err(IndexerError::corrupt(format!(
                    "index entry {}..={} of partition {partition} has no object",
                    e.first_offset, e.last_offset
                )));
            };
            let object = ObjectRef {
                endpoint: EndpointId::new(&o.endpoint),
                key: ObjectKey::new(&o.key),
                size: o.size,
            };
            let end = e.byte_start.saturating_add(e.byte_len).min(object.size);
            let mut pos = e.byte_start;
            while pos < end && out.bytes < max_bytes {
                let size = self.batch_size(&object, pos, end).await?;
                let want = size.max(CHUNK).min(end - pos);
                let chunk = self.pool.get_range(&object, pos..pos + want).await?;
                let mut consumed = 0usize;
                let mut stop = false;
                for item in BatchIter::new(&chunk, usize::MAX) {
                    let (at, view) = match item {
                        Ok(v) => v,
                        // The chunk ends inside a batch: read on from there.
                        Err(_) if consumed > 0 => break,
                        Err(err) => {
                            return Err(IndexerError::corrupt(format!("{object} at {pos}: {err}")));
                        }
                    };
                    consumed = at + view.size();
                    if view.last_offset() < from {
                        continue;
                    }
                    if view.base_offset() >= until {
                        stop = true;
                        break;
                    }
                    take_batch(
                        &chunk.slice(at..at + view.size()),
                        &view,
                        from,
                        until,
                        &mut out,
                    )?;
                    if out.bytes >= max_bytes {
                        stop = true;
                        break;
                    }
                }
                if consumed == 0 {
                    return Err(IndexerError::corrupt(format!(
                        "{object} at {pos}: no whole batch in {want} bytes"
                    )));
                }
                pos += consumed as u64;
                if stop {
                    return Ok(out);
                }
            }
        }
        Ok(out)
    }

    /// The size of the batch at `pos` (read from its header).
    async fn batch_size(&self, object: &ObjectRef, pos: u64, end: u64) -> Result<u64> {
        let head = self
            .pool
            .get_range(object, pos..(pos + SIZE_PREFIX).min(end))
            .await?;
        let size = BatchView::peek_size(&head)
            .map_err(|e| IndexerError::corrupt(format!("{object} at {pos}: {e}")))?;
        Ok(size as u64)
    }
}

fn take_batch(
    batch: &Bytes,
    view: &BatchView<'_>,
    from: i64,
    until: i64,
    out: &mut LogRead,
) -> Result<()> {
    out.bytes += view.size() as u64;
    out.next_offset = out.next_offset.max(view.next_offset());
    if view.is_control() {
        return Ok(());
    }
    let records = decode_records(batch, DEFAULT_MAX_DECOMPRESSED).map_err(|e| {
        IndexerError::corrupt(format!("batch at offset {}: {e}", view.base_offset()))
    })?;
    out.records.extend(
        records
            .into_iter()
            .filter(|r| r.offset >= from && r.offset < until),
    );
    Ok(())
}
