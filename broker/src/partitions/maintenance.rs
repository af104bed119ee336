//! Background upkeep of the logs this broker owns:
//!
//! - compaction: committed WAL ranges are rewritten into per-partition
//!   segments (`.log`, `.index`, `.timeindex`), and small segments merged,
//!   each swapped in with one metadata command
//!   (see [`crate::partitions::compaction`]);
//! - log cleaning: the segments of a compacted topic keep the latest record
//!   of each key (see [`crate::partitions::cleaner`]);
//! - retention: whole segments older than `retention.ms`, or beyond
//!   `retention.bytes`, leave the log (the log start moves);
//! - producer expiry: idempotent producers idle for `producer.id.expiration.ms`
//!   are forgotten (checked with retention);
//! - idle groups: Empty groups without offsets, and consumer groups without
//!   members, are forgotten (checked with retention);
//! - the sweeper: objects no index entry references any more are deleted
//!   from the store after a grace period, then forgotten by the metadata.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use floe_storage::EndpointId;
use floe_storage::segment::write_segment;

use crate::error::{BrokerError, Result};
use crate::partitions::cleaner::Cleaner;
use crate::partitions::log::{PartitionLog, Status, StoredRange};
use crate::partitions::{Partitions, compaction};

/// Index entry every this many bytes of a segment.
pub(crate) const INDEX_INTERVAL_BYTES: u64 = 4096;

pub(crate) async fn run(b: Partitions) {
    let cfg = b.inner.cfg.clone();
    let mut next_compaction = tokio::time::Instant::now() + cfg.compaction_interval;
    let mut next_retention = tokio::time::Instant::now() + cfg.retention_check_interval;
    let mut seen_unreferenced: HashMap<u64, Instant> = HashMap::new();
    let mut next_detach = tokio::time::Instant::now() + crate::partitions::log::TAIL_DETACH_AFTER;
    let mut cleaner = Cleaner::default();
    loop {
        let next = next_compaction.min(next_retention).min(next_detach);
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = b.inner.stopped.notified() => return,
        }
        if b.is_stopping() {
            return;
        }
        let now = tokio::time::Instant::now();
        if now >= next_detach {
            // Committed batches stop holding their requests in memory
            // even where nothing more is committed.
            for log in b.logs() {
                log.detach_old_tail();
            }
            next_detach = now + crate::partitions::log::TAIL_DETACH_AFTER;
        }
        if now >= next_compaction {
            let logs = b.logs();
            compaction_pass(&b, &logs).await;
            if b.is_stopping() {
                return;
            }
            cleaner.retain(&logs);
            for log in &logs {
                if b.is_stopping() {
                    return;
                }
                if let Err(e) = cleaner.clean(&b, log).await {
                    tracing::warn!(partition = %log.key, error = %e, "log cleaning failed; will retry");
                }
            }
            next_compaction = now + cfg.compaction_interval;
        }
        if now >= next_retention {
            if let Some(ttl) = cfg.producer_expiration {
                expire_producers(&b, ttl);
            }
            for log in b.logs() {
                if let Err(e) = apply_retention(&b, &log).await {
                    tracing::warn!(partition = %log.key, error = %e, "retention failed; will retry");
                }
            }
            if let Err(e) = sweep(&b, &mut seen_unreferenced).await {
                tracing::warn!(error = %e, "sweeping unreferenced objects failed");
            }
            next_retention = now + cfg.retention_check_interval;
        }
    }
}

/// Compacts and merges every partition of `logs`, a few at once
/// (`--compaction-concurrency`), then publishes the index's size.
async fn compaction_pass(b: &Partitions, logs: &[Arc<PartitionLog>]) {
    use futures::StreamExt;
    /// Merges one partition does in one pass at most.
    const MERGES_PER_PASS: usize = 4;
    let concurrency = b.inner.cfg.compaction_concurrency.max(1);
    futures::stream::iter(logs)
        .for_each_concurrent(concurrency, |log| async move {
            if b.is_stopping() {
                return;
            }
            if let Err(e) = compaction::compact_partition(b, log, MERGES_PER_PASS).await {
                tracing::warn!(partition = %log.key, error = %e, "compaction failed; will retry");
            }
        })
        .await;
    let (mut entries, mut segments) = (0, 0);
    for log in logs {
        let st = log.lock();
        entries += st.index.len();
        segments += st.index.iter().filter(|r| r.is_segment()).count();
    }
    crate::metrics::index_size(entries, segments);
}

/// Writes `built` as a segment of the partition and swaps it in for the
/// index entries that cover exactly `first..=last` (one metadata command,
/// ReplaceRanges; the objects it replaces are left to the sweeper). With
/// `drop_tail`, committed batches the broker keeps in memory for those
/// offsets are dropped too (their bytes changed: fetches go to the store).
pub(crate) async fn swap_in(
    b: &Partitions,
    log: &Arc<PartitionLog>,
    epoch: u64,
    (first_offset, last_offset, max_ts): (i64, i64, i64),
    built: floe_storage::segment::BuiltSegment,
    drop_tail: bool,
) -> Result<()> {
    let prefix = format!("segments/{}/{}", log.key.topic.0, log.key.partition);
    let seg = write_segment(&b.inner.pool, &prefix, built).await?;
    // The segment covers the entries it replaces, whatever offsets its
    // first and last batches have.
    let seg = floe_storage::segment::SegmentMeta {
        base_offset: floe_storage::Offset(first_offset),
        last_offset: floe_storage::Offset(last_offset),
        max_timestamp: max_ts,
        ..seg
    };
    let fence = b.owner_fence(&log.key, epoch);
    let replaced = b
        .meta()
        .replace_ranges(fence, first_offset, last_offset, max_ts, &seg.log)
        .await;
    let object_id = match replaced {
        Ok(r) => r,
        Err(e) => {
            // The segment is not referenced: delete it now.
            for o in [&seg.log, &seg.index, &seg.timeindex] {
                let _ = b.inner.pool.delete(o).await;
            }
            return Err(e.into());
        }
    };
    let range = StoredRange {
        first_offset,
        last_offset,
        max_timestamp: max_ts,
        object: seg.log.clone(),
        object_id,
        byte_start: 0,
        byte_len: seg.log.size,
        segment: Some(Arc::new(seg)),
        committed_ms: floe_metadata::clock::now_ms() as i64,
    };
    let mut st = log.lock();
    if let (Some(i), Some(j)) = (
        st.index.iter().position(|r| r.first_offset == first_offset),
        st.index.iter().position(|r| r.last_offset == last_offset),
    ) && i <= j
    {
        st.index.splice(i..=j, [range]);
    }
    if drop_tail {
        while st
            .tail
            .front()
            .is_some_and(|t| t.first_offset <= last_offset)
        {
            st.pop_tail();
        }
    }
    Ok(())
}

/// Deletes whole segments by `retention.ms` and `retention.bytes` (never the
/// newest entry of the log). A compact-only topic (`cleanup.policy=compact`)
/// is skipped, as in Kafka: the cleaner keeps the latest value of each key,
/// which deleting by time or size would lose (`compact,delete` does both).
pub(crate) async fn apply_retention(
    b: &Partitions,
    log: &Arc<PartitionLog>,
) -> Result<Option<i64>> {
    let (epoch, start, new_start) = {
        let st = log.lock();
        if st.status != Status::Active || st.index.len() < 2 || st.config.compact_only {
            return Ok(None);
        }
        let now = floe_metadata::clock::now_ms() as i64;
        let live: Vec<&StoredRange> = st
            .index
            .iter()
            .filter(|r| r.last_offset >= st.log_start)
            .collect();
        let mut total: i64 = live.iter().map(|r| r.byte_len as i64).sum();
        let mut new_start = None;
        for (i, r) in live.iter().enumerate() {
            if i + 1 == live.len() || !r.is_segment() {
                break;
            }
            let too_old = st
                .config
                .retention_ms
                .is_some_and(|ms| r.max_timestamp < now.saturating_sub(ms));
            let too_big = st
                .config
                .retention_bytes
                .is_some_and(|max| total - r.byte_len as i64 >= max);
            if !(too_old || too_big) {
                break;
            }
            total -= r.byte_len as i64;
            new_start = Some(r.last_offset + 1);
        }
        (st.epoch, st.log_start, new_start)
    };
    match new_start {
        Some(s) if s > start => truncate(b, log, epoch, s).await.map(Some),
        _ => Ok(None),
    }
}

/// Forgets, in every owned partition, idempotent producers idle for longer
/// than `ttl` (`producer.id.expiration.ms`; the metadata's controller drops
/// them from the committed state the same way).
pub(crate) fn expire_producers(b: &Partitions, ttl: std::time::Duration) {
    let now = floe_metadata::clock::now_ms();
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    for log in b.logs() {
        let n = log.lock().producers.expire(now, ttl_ms);
        if n > 0 {
            tracing::info!(partition = %log.key, producers = n, "idle idempotent producers expired");
        }
    }
}

/// Moves the log start to `offset` in metadata, then in memory.
pub(crate) async fn truncate(
    b: &Partitions,
    log: &Arc<PartitionLog>,
    epoch: u64,
    offset: i64,
) -> Result<i64> {
    let start = b
        .meta()
        .truncate_log(b.owner_fence(&log.key, epoch), offset)
        .await
        .map_err(BrokerError::from)?;
    {
        let mut st = log.lock();
        st.log_start = st.log_start.max(start);
        let ls = st.log_start;
        st.index.retain(|r| r.last_offset >= ls);
        st.txns.truncate(ls);
        while st.tail.front().is_some_and(|t| t.last_offset < ls) {
            st.pop_tail();
        }
    }
    tracing::info!(partition = %log.key, log_start = start, "log start moved");
    Ok(start)
}

/// Deletes objects that no index entry has referenced for the grace period.
pub(crate) async fn sweep(b: &Partitions, seen: &mut HashMap<u64, Instant>) -> Result<()> {
    let list = b
        .inner
        .meta
        .unreferenced_objects()
        .await
        .map_err(BrokerError::from)?;
    let now = Instant::now();
    let grace = b.inner.cfg.orphan_grace;
    let current: std::collections::HashSet<u64> = list.iter().map(|o| o.id.0).collect();
    seen.retain(|id, _| current.contains(id));
    let mut forget = Vec::new();
    for o in &list {
        let first = *seen.entry(o.id.0).or_insert(now);
        if now.duration_since(first) < grace {
            continue;
        }
        let obj = o.object.clone();
        let mut all = vec![obj.clone()];
        if obj.key.as_str().ends_with(".log") {
            all.extend(Partitions::segment_siblings(&obj));
        }
        let mut ok = true;
        for x in &all {
            if let Err(e) = b.inner.pool.delete(x).await
                && e.kind() != floe_storage::ErrorKind::NotFound
            {
                tracing::warn!(object = %x, error = %e, "cannot delete an unreferenced object");
                ok = false;
            }
        }
        if ok {
            forget.push(o.id.0);
        }
    }
    if !forget.is_empty() {
        let n = forget.len();
        b.meta()
            .forget_objects(forget)
            .await
            .map_err(BrokerError::from)?;
        tracing::info!(objects = n, "deleted unreferenced objects");
    }
    // WAL writes a crash cut short leave staging files in a local folder that
    // no listing shows; only this broker writes under its WAL prefix.
    let prefix = format!("wal/{}/", b.id());
    let endpoints: Vec<EndpointId> = b.inner.pool.endpoint_ids().cloned().collect();
    for ep in endpoints {
        match b
            .inner
            .pool
            .remove_partial_writes(&ep, &prefix, grace)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(endpoint = %ep, files = n, "removed half-written WAL files"),
            Err(e) => {
                tracing::warn!(endpoint = %ep, error = %e, "cannot remove half-written WAL files")
            }
        }
    }
    Ok(())
}
