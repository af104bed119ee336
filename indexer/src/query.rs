//! Lookups by key and time over a topic: its export files (pruned by their
//! time range, then inside each file by statistics and bloom filters) and
//! the part of the log not exported yet.

use floe_storage::EndpointId;
use futures::StreamExt;

use crate::error::{ErrorKind, IndexerError, Result};
use crate::exporter::Indexer;
use crate::lookup::{self, Found, Query};

/// Largest `limit` a query may ask for.
pub const MAX_LIMIT: usize = 10_000;

/// What a lookup did, to show how much it could skip.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct QueryStats {
    /// Export files of the topic.
    pub files: usize,
    /// Files whose footer (statistics, bloom filters) was read: the others
    /// were outside the time range by the file list alone.
    pub files_opened: usize,
    /// Files whose data was read (at least one row group decoded).
    pub files_read: usize,
    pub row_groups: usize,
    pub row_groups_read: usize,
    pub row_groups_pruned_by_stats: usize,
    pub row_groups_pruned_by_bloom: usize,
    /// Records of the log not exported yet that were looked at.
    pub log_records_scanned: u64,
    /// Whether some of the log not exported yet was beyond the scan limit.
    pub log_scan_limited: bool,
}

#[derive(Debug, Default)]
pub struct QueryAnswer {
    pub records: Vec<Found>,
    pub stats: QueryStats,
}

/// Finds the records of `topic` that match `q`, ordered by (timestamp,
/// partition, offset), at most `q.limit`.
pub async fn run(ix: &Indexer, topic: &str, q: &Query) -> Result<QueryAnswer> {
    if q.limit == 0 || q.limit > MAX_LIMIT {
        return Err(IndexerError::invalid(format!(
            "limit must be 1 to {MAX_LIMIT}"
        )));
    }
    let state = ix.meta().export_state(topic).await.map_err(|e| {
        let e = IndexerError::from(e);
        if e.kind == ErrorKind::UnknownTopic {
            IndexerError::new(ErrorKind::UnknownTopic, format!("unknown topic {topic:?}"))
        } else {
            e
        }
    })?;
    let mut answer = QueryAnswer::default();
    let mut candidates = Vec::new();
    for p in &state.partitions {
        for f in &p.files {
            answer.stats.files += 1;
            let after_from = q.from_ms.is_none_or(|from| f.max_timestamp >= from);
            let before_to = q.to_ms.is_none_or(|to| f.min_timestamp < to);
            if after_from && before_to {
                candidates.push(f.clone());
            }
        }
    }
    answer.stats.files_opened = candidates.len();
    let pool = ix.pool().clone();
    let searches: Vec<_> = futures::stream::iter(candidates)
        .map(|f| {
            let pool = pool.clone();
            async move {
                let store = pool.store(&EndpointId::new(&f.endpoint))?;
                lookup::search_file(
                    store,
                    object_store::path::Path::from(f.key.as_str()),
                    f.size,
                    q,
                    f.rows,
                )
                .await
                .map_err(|e| IndexerError::new(ErrorKind::Unavailable, format!("{}: {e}", f.key)))
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    for s in searches {
        let (found, fs) = s?;
        if fs.row_groups_read > 0 {
            answer.stats.files_read += 1;
        }
        answer.stats.row_groups += fs.row_groups;
        answer.stats.row_groups_read += fs.row_groups_read;
        answer.stats.row_groups_pruned_by_stats += fs.pruned_by_stats;
        answer.stats.row_groups_pruned_by_bloom += fs.pruned_by_bloom;
        answer.records.extend(found);
    }
    // The log after the exported offset.
    let limit_bytes = ix.config().max_query_log_bytes;
    for p in &state.partitions {
        let start = p.next_offset.max(p.log_start_offset);
        if start >= p.high_watermark {
            continue;
        }
        let read = ix
            .reader()
            .read(
                state.topic_id,
                p.partition,
                start,
                p.high_watermark,
                limit_bytes,
                crate::log_reader::MAX_DECODED_BYTES,
            )
            .await?;
        // Records of an open transaction (at the LSO and after) are not
        // committed yet: a query does not see them, as the exports do not.
        if read.next_offset < p.high_watermark.min(read.last_stable) {
            answer.stats.log_scan_limited = true;
        }
        answer.stats.log_records_scanned += read.records.len() as u64;
        let mut n = 0;
        for r in read.records {
            if n >= q.limit {
                break;
            }
            if q.matches(r.key.as_deref(), r.timestamp) {
                n += 1;
                answer.records.push(Found::of(p.partition, r));
            }
        }
    }
    answer
        .records
        .sort_by_key(|r| (r.timestamp, r.partition, r.offset));
    answer.records.dedup_by_key(|r| (r.partition, r.offset));
    answer.records.truncate(q.limit);
    Ok(answer)
}
