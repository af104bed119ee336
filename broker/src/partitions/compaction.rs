//! Compaction: what keeps a partition's committed index proportional to
//! the data it holds, not to how long it has been written.
//!
//! Every flush that writes to a partition commits one index entry (its
//! offsets → a byte range of a WAL object shared with the other partitions
//! of that flush). Two steps, run from the maintenance loop every
//! `--compaction-interval-ms`, bound the entries:
//!
//! 1. **WAL ranges → a segment** ([`compact`]): a partition's committed WAL
//!    ranges are rewritten into a segment of its own (`.log`, `.index`,
//!    `.timeindex`) once they are `--wal-compaction-entries` entries, or
//!    the oldest is `--wal-compaction-age-ms` old, or they reach
//!    `segment.bytes`, or the oldest is `segment.ms` old. A range whose
//!    batches are still in the partition's in-memory tail is taken from
//!    there: compacting recent data costs no store read. The WAL object
//!    leaves the store once every partition's range in it has moved
//!    (the sweeper deletes what no entry references).
//! 2. **Small segments → larger ones** ([`merge`]): segments are merged in
//!    size tiers, as an LSM tree's size-tiered compaction. A segment's tier
//!    is 0 below [`MERGE_TIER_BASE`] bytes and grows by one for each
//!    factor of `--segment-merge-fanout` above it; a run of at least
//!    fanout consecutive segments of one tier is merged into one, as long
//!    as the result stays within `segment.bytes` and spans at most
//!    `segment.ms` of record time. So a partition holds at most about
//!    fanout − 1 segments per tier below the cap, plus full segments,
//!    which retention removes: `segment.bytes` and `segment.ms` keep their
//!    Kafka meaning (the granularity of retention).
//!
//! A partition written at one record a second therefore keeps at most
//! `--wal-compaction-entries` WAL entries and a few dozen segments, however
//! long it runs. The cost is the rewrite: each tier rewrites a record once,
//! and each compaction or merge is one segment (three PUTs) and one
//! metadata command.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use floe_storage::RangeRead;
use floe_storage::segment::SegmentBuilder;

use crate::error::Result;
use crate::metrics;
use crate::partitions::Partitions;
use crate::partitions::log::{PartitionLog, Status, StoredRange};
use crate::partitions::maintenance::{INDEX_INTERVAL_BYTES, swap_in};

/// Segments smaller than this are of tier 0 (1 MiB).
pub(crate) const MERGE_TIER_BASE: u64 = 1024 * 1024;

/// Rewrites the partition's committed WAL ranges into segments of up to
/// `segment.bytes` when they are due (see the module's doc). Returns the
/// segments made.
pub(crate) async fn compact(b: &Partitions, log: &Arc<PartitionLog>) -> Result<usize> {
    let cfg = &b.inner.cfg;
    let (epoch, ranges, seg_bytes, seg_ms) = {
        let st = log.lock();
        if st.status != Status::Active {
            return Ok(0);
        }
        let wal: Vec<StoredRange> = st
            .index
            .iter()
            .filter(|r| !r.is_segment() && r.last_offset >= st.log_start)
            .cloned()
            .collect();
        (st.epoch, wal, st.config.segment_bytes, st.config.segment_ms)
    };
    if ranges.is_empty() {
        return Ok(0);
    }
    let total: u64 = ranges.iter().map(|r| r.byte_len).sum();
    let now = floe_metadata::clock::now_ms() as i64;
    let oldest = ranges.iter().map(|r| r.committed_ms).min().unwrap_or(now);
    let age_limit = i64::try_from(cfg.wal_compaction_age.as_millis())
        .unwrap_or(i64::MAX)
        .min(seg_ms);
    let due = total >= seg_bytes
        || ranges.len() >= cfg.wal_compaction_entries.max(1)
        || now.saturating_sub(oldest) >= age_limit;
    if !due {
        return Ok(0);
    }
    // Consecutive ranges make a segment (a run must be contiguous in the
    // index), up to segment.bytes each.
    let mut groups: Vec<Vec<StoredRange>> = Vec::new();
    let mut group_bytes = 0u64;
    for r in ranges {
        let start_new = match groups.last().and_then(|g| g.last()) {
            None => true,
            Some(prev) => {
                prev.last_offset + 1 != r.first_offset || group_bytes + r.byte_len > seg_bytes
            }
        };
        if start_new {
            groups.push(Vec::new());
            group_bytes = 0;
        }
        group_bytes += r.byte_len;
        if let Some(g) = groups.last_mut() {
            g.push(r);
        }
    }
    let mut made = 0;
    for g in groups {
        rewrite(b, log, epoch, &g, metrics::CompactionKind::Wal).await?;
        made += 1;
    }
    Ok(made)
}

/// Writes the consecutive entries `run` (WAL ranges, or segments) as one
/// segment and swaps it in for them. A WAL range still in the partition's
/// tail is taken from there; a cleaned segment may start after the offsets
/// it covers, so the new segment is based at the run's first offset.
async fn rewrite(
    b: &Partitions,
    log: &Arc<PartitionLog>,
    epoch: u64,
    run: &[StoredRange],
    kind: metrics::CompactionKind,
) -> Result<()> {
    let (Some(first), Some(last)) = (run.first(), run.last()) else {
        return Ok(());
    };
    let (first_offset, last_offset) = (first.first_offset, last.last_offset);
    let mut builder = SegmentBuilder::with_base(INDEX_INTERVAL_BYTES, first_offset);
    let mut bytes = 0u64;
    for r in run {
        let tail = match kind {
            metrics::CompactionKind::Wal => {
                let data = from_tail(log, r);
                metrics::compaction_range_read(data.is_some());
                data
            }
            metrics::CompactionKind::Merge => None,
        };
        let data = match tail {
            Some(data) => data,
            None => {
                b.inner
                    .reader
                    .read_range(&r.object, r.byte_start..r.byte_start + r.byte_len)
                    .await?
            }
        };
        bytes += data.len() as u64;
        builder.append(data)?;
    }
    let built = builder.finish()?;
    let max_ts = run.iter().map(|r| r.max_timestamp).max().unwrap_or(-1);
    swap_in(
        b,
        log,
        epoch,
        (first_offset, last_offset, max_ts),
        built,
        false,
    )
    .await?;
    metrics::compacted(kind, run.len(), bytes);
    tracing::debug!(partition = %log.key, first_offset, last_offset, entries = run.len(), ?kind, "compacted into a segment");
    Ok(())
}

/// The bytes of a committed WAL range, from the partition's in-memory tail
/// when every batch of it is still there (the same bytes the flush wrote:
/// checked by offsets and length), else `None`.
fn from_tail(log: &PartitionLog, r: &StoredRange) -> Option<Bytes> {
    let pieces: Vec<Bytes> = {
        let st = log.lock();
        let front = st.tail.front()?;
        if front.first_offset > r.first_offset {
            return None;
        }
        let mut pieces = Vec::new();
        let mut next = r.first_offset;
        let mut len = 0u64;
        for b in st
            .tail
            .iter()
            .filter(|b| b.last_offset >= r.first_offset && b.first_offset <= r.last_offset)
        {
            for v in &b.stored {
                if v.base_offset() != next || v.last_offset() > r.last_offset {
                    return None;
                }
                next = v.last_offset() + 1;
                len += v.len() as u64;
                pieces.extend(v.pieces().into_iter().cloned());
            }
        }
        if next != r.last_offset + 1 || len != r.byte_len {
            return None;
        }
        pieces
    };
    let mut out = BytesMut::with_capacity(usize::try_from(r.byte_len).ok()?);
    for p in pieces {
        out.extend_from_slice(&p);
    }
    Some(out.freeze())
}

/// What a merge plan needs of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentSpan {
    pub first_offset: i64,
    pub last_offset: i64,
    pub bytes: u64,
    pub max_timestamp: i64,
}

/// The size tier of a segment of `bytes` (see the module's doc).
pub(crate) fn tier(bytes: u64, fanout: u64) -> u32 {
    let fanout = fanout.max(2);
    let mut tier = 0;
    let mut bound = MERGE_TIER_BASE;
    while bytes >= bound {
        tier += 1;
        bound = bound.saturating_mul(fanout);
        if bound == u64::MAX {
            break;
        }
    }
    tier
}

/// The run of segments (indexes into `segs`, which are in offset order) to
/// merge next, if any: the first run of at least `fanout` consecutive,
/// contiguous segments of one tier, cut to what fits in `max_bytes` and
/// `max_span_ms` of record time (at least two segments). A segment's
/// records are taken to span from the previous segment's newest timestamp
/// to its own; the log's first segment, whose oldest record the index does
/// not know, is never merged (else it could grow newer forever and escape
/// retention).
pub(crate) fn plan_merge(
    segs: &[SegmentSpan],
    fanout: usize,
    max_bytes: u64,
    max_span_ms: i64,
) -> Option<std::ops::Range<usize>> {
    if fanout < 2 {
        return None;
    }
    let tiers: Vec<u32> = segs.iter().map(|s| tier(s.bytes, fanout as u64)).collect();
    let mut i = 0;
    while i < segs.len() {
        // The run of one tier from i.
        let mut j = i + 1;
        while j < segs.len()
            && tiers[j] == tiers[i]
            && segs[j - 1].last_offset + 1 == segs[j].first_offset
        {
            j += 1;
        }
        if j - i >= fanout {
            // Starting at each segment of the run in turn, what fits.
            for start in i.max(1)..j - 1 {
                // Its records are newer than the segment before it.
                let since = segs[start - 1].max_timestamp;
                let mut end = start;
                let mut bytes = 0u64;
                while end < j
                    && bytes + segs[end].bytes <= max_bytes
                    && segs[end].max_timestamp.saturating_sub(since) <= max_span_ms
                {
                    bytes += segs[end].bytes;
                    end += 1;
                }
                if end - start >= 2 {
                    return Some(start..end);
                }
            }
        }
        i = j;
    }
    None
}

/// Merges the partition's next run of small segments (see [`plan_merge`]).
/// Returns whether it merged one.
pub(crate) async fn merge(b: &Partitions, log: &Arc<PartitionLog>) -> Result<bool> {
    let fanout = b.inner.cfg.segment_merge_fanout;
    let (epoch, run) = {
        let st = log.lock();
        if st.status != Status::Active || fanout < 2 {
            return Ok(false);
        }
        let segs: Vec<&StoredRange> = st
            .index
            .iter()
            .filter(|r| r.is_segment() && r.last_offset >= st.log_start)
            .collect();
        let spans: Vec<SegmentSpan> = segs
            .iter()
            .map(|r| SegmentSpan {
                first_offset: r.first_offset,
                last_offset: r.last_offset,
                bytes: r.byte_len,
                max_timestamp: r.max_timestamp,
            })
            .collect();
        let Some(plan) = plan_merge(
            &spans,
            fanout,
            st.config.segment_bytes,
            st.config.segment_ms,
        ) else {
            return Ok(false);
        };
        let run: Vec<StoredRange> = segs[plan].iter().map(|r| (*r).clone()).collect();
        (st.epoch, run)
    };
    rewrite(b, log, epoch, &run, metrics::CompactionKind::Merge).await?;
    Ok(true)
}

/// One partition's compaction step: its WAL ranges, then its segments (up
/// to `max_merges` merges, so that a pass over many partitions stays short).
pub(crate) async fn compact_partition(
    b: &Partitions,
    log: &Arc<PartitionLog>,
    max_merges: usize,
) -> Result<()> {
    compact(b, log).await?;
    for _ in 0..max_merges {
        if b.is_stopping() || !merge(b, log).await? {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
