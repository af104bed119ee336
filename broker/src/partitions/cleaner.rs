//! The log cleaner: log compaction of the partitions whose topic's
//! `cleanup.policy` names `compact`, run from the maintenance loop.
//!
//! Only segments are cleaned: the committed WAL ranges not yet rewritten
//! into a segment are the log's active part (Kafka's active segment), and
//! so is any segment from the first one holding a record younger than
//! `min.compaction.lag.ms`. A pass:
//!
//! 1. is due when the dirty bytes (segments from the first dirty offset,
//!    what no cleaning has mapped yet) are at least `min.cleanable.dirty.ratio`
//!    of the cleanable segments' bytes, when the oldest dirty segment is
//!    older than `max.compaction.lag.ms`, or when a tombstone's delete
//!    horizon has passed;
//! 2. maps each key of the dirty segments to its latest offset, in a
//!    [`KeyMap`] of at most `--cleaner-map-bytes`: when it fills, the pass
//!    covers the dirty section up to there and the next pass goes on;
//! 3. cleans every segment from the log start to the map's end
//!    ([`clean_batch`]), grouping consecutive segments up to `segment.bytes`,
//!    and swaps each group that changed in with one ReplaceRanges (the old
//!    objects are left to the sweeper). A group left empty is carried into
//!    the next one, so a segment always holds a batch.
//!
//! Transactions (as Kafka's cleaner): the cleanable section ends below the
//! last stable offset, so an open transaction's records are never touched;
//! a committed transaction's records are compacted as any record; an
//! aborted one's (the partition's aborted index) are removed whole and
//! hide no earlier value; a COMMIT marker stays while records of its
//! transaction are left, then gets a delete horizon (`delete.retention.ms`,
//! as a tombstone) and goes at the first cleaning after it
//! ([`clean_decided_batch`]). ABORT markers stay: the aborted index keeps
//! its entries until the log start passes them, and a `read_committed`
//! client told of an aborted transaction whose records are gone drops
//! nothing, but needs the marker to stop dropping the producer's later
//! batches. (Kafka drops the index entry with the marker; here the index
//! lives in the metadata, which the cleaner does not rewrite.)
//!
//! The first dirty offset and the next delete horizon are kept in memory
//! only: after a restart or a change of owner the whole log is dirty once,
//! which costs one more cleaning and loses nothing (cleaning twice gives the
//! same log).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use floe_storage::batch::BatchIter;
use floe_storage::clean::{
    AbortedTxns, CleanPolicy, CleanedBatch, KeyMap, TxnCleaning, clean_decided_batch,
};
use floe_storage::segment::SegmentBuilder;
use floe_storage::{PartitionKey, RangeRead};

use crate::error::{BrokerError, ErrorKind, Result};
use crate::partitions::Partitions;
use crate::partitions::log::{PartitionLog, Status, StoredRange};
use crate::partitions::maintenance::{INDEX_INTERVAL_BYTES, swap_in};

/// What the cleaner remembers of one partition between passes.
#[derive(Debug, Clone, Copy)]
struct Progress {
    /// Offsets below this have been mapped by a cleaning.
    first_dirty: i64,
    /// The earliest delete horizon of the tombstones kept.
    next_horizon: Option<i64>,
}

/// The cleaner's memory of the partitions it cleaned.
#[derive(Debug, Default)]
pub(crate) struct Cleaner {
    progress: HashMap<PartitionKey, Progress>,
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PassStats {
    pub keys: usize,
    pub records_dropped: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub segments_written: usize,
    /// The map filled before the dirty end: another pass is due now.
    pub more: bool,
}

fn corrupt(r: &StoredRange, e: impl std::fmt::Display) -> BrokerError {
    BrokerError::new(ErrorKind::CorruptMessage, format!("{}: {e}", r.object))
}

impl Cleaner {
    /// Forgets partitions this broker no longer owns.
    pub(crate) fn retain(&mut self, owned: &[Arc<PartitionLog>]) {
        let keys: std::collections::HashSet<PartitionKey> = owned.iter().map(|l| l.key).collect();
        self.progress.retain(|k, _| keys.contains(k));
    }

    /// Cleans the partition if a pass is due (passes follow each other
    /// while the key map fills before the dirty end). `None`: nothing due.
    pub(crate) async fn clean(
        &mut self,
        b: &Partitions,
        log: &Arc<PartitionLog>,
    ) -> Result<Option<PassStats>> {
        let mut total: Option<PassStats> = None;
        let mut more = false;
        loop {
            let Some(s) = self.pass(b, log, more).await? else {
                return Ok(total);
            };
            let t = total.get_or_insert_with(PassStats::default);
            t.keys = t.keys.max(s.keys);
            t.records_dropped += s.records_dropped;
            t.bytes_before += s.bytes_before;
            t.bytes_after += s.bytes_after;
            t.segments_written += s.segments_written;
            if !s.more || b.is_stopping() {
                return Ok(total);
            }
            more = true;
        }
    }

    /// One pass; `go_on`: the pass before filled its map, so this one is
    /// due whatever the ratio.
    async fn pass(
        &mut self,
        b: &Partitions,
        log: &Arc<PartitionLog>,
        go_on: bool,
    ) -> Result<Option<PassStats>> {
        let now = floe_metadata::clock::now_ms() as i64;
        let (epoch, log_start, cfg, seg_bytes, segments, aborted) = {
            let st = log.lock();
            if st.status != Status::Active || !st.config.compacted {
                return Ok(None);
            }
            // Never an open transaction's data: the cleanable section ends
            // below the last stable offset, where every transaction is
            // decided (committed, or in the aborted index).
            let lso = st.txns.last_stable_offset(st.hw);
            let segments: Vec<StoredRange> = st
                .index
                .iter()
                .filter(|r| r.last_offset >= st.log_start)
                .take_while(|r| r.is_segment() && r.last_offset < lso)
                .cloned()
                .collect();
            let aborted = AbortedTxns::new(
                st.txns
                    .aborted_in(st.log_start, lso)
                    .into_iter()
                    .map(|a| (a.producer_id.0, a.first_offset, a.last_offset)),
            );
            (
                st.epoch,
                st.log_start,
                st.config.cleaning,
                st.config.segment_bytes,
                segments,
                aborted,
            )
        };
        let lag = cfg.min_compaction_lag_ms;
        let cleanable: Vec<StoredRange> = segments
            .into_iter()
            .take_while(|r| lag == 0 || r.max_timestamp <= now.saturating_sub(lag))
            .collect();
        let Some(end) = cleanable.last().map(|r| r.last_offset + 1) else {
            return Ok(None);
        };
        let progress = self.progress.entry(log.key).or_insert(Progress {
            first_dirty: log_start,
            next_horizon: None,
        });
        let first_dirty = progress.first_dirty.max(log_start);
        let all: u64 = cleanable.iter().map(|r| r.byte_len).sum();
        let dirty_ranges: Vec<&StoredRange> = cleanable
            .iter()
            .filter(|r| r.last_offset >= first_dirty)
            .collect();
        let dirty: u64 = dirty_ranges.iter().map(|r| r.byte_len).sum();
        let ratio_due = dirty > 0 && dirty as f64 >= cfg.min_cleanable_dirty_ratio * all as f64;
        let lag_due = dirty_ranges
            .first()
            .is_some_and(|r| r.max_timestamp <= now.saturating_sub(cfg.max_compaction_lag_ms));
        let horizon_due = progress.next_horizon.is_some_and(|h| now >= h);
        if !((go_on && dirty > 0) || ratio_due || lag_due || horizon_due) {
            return Ok(None);
        }

        // 1. The latest offset of each key of the dirty section.
        let mut map = KeyMap::with_budget(b.inner.cfg.cleaner_map_bytes);
        'map: for r in &dirty_ranges {
            let bytes = read(b, r).await?;
            for item in BatchIter::new(&bytes, usize::MAX) {
                let (pos, v) = item.map_err(|e| corrupt(r, e))?;
                if v.last_offset() < first_dirty {
                    continue;
                }
                let batch = bytes.slice(pos..pos + v.size());
                if !map
                    .add_decided_batch(&batch, &aborted)
                    .map_err(|e| corrupt(r, e))?
                {
                    break 'map;
                }
            }
        }
        map.cover_to(first_dirty);
        let map_end = map.end().unwrap_or(first_dirty);
        let mut stats = PassStats {
            keys: map.len(),
            more: map_end < end,
            ..PassStats::default()
        };

        // 2. Every segment below the map's end, cleaned against it.
        let policy = CleanPolicy {
            now_ms: now,
            delete_retention_ms: cfg.delete_retention_ms,
        };
        let mut next_horizon: Option<i64> = None;
        let to_clean: Vec<&StoredRange> = cleanable
            .iter()
            .filter(|r| r.first_offset < map_end)
            .collect();
        let mut i = 0;
        let mut carried: Vec<&StoredRange> = Vec::new();
        let mut carried_out: Vec<Bytes> = Vec::new();
        let mut txns = TxnCleaning::new(&aborted);
        while i < to_clean.len() {
            // A group: consecutive segments up to segment.bytes (at least one).
            let mut group: Vec<&StoredRange> = std::mem::take(&mut carried);
            let mut out: Vec<Bytes> = std::mem::take(&mut carried_out);
            let mut changed = !group.is_empty();
            let mut size = 0u64;
            while let Some(r) = to_clean.get(i) {
                if size > 0 && size + r.byte_len > seg_bytes {
                    break;
                }
                size += r.byte_len;
                if !group.is_empty() {
                    changed = true;
                }
                group.push(r);
                i += 1;
                let bytes = read(b, r).await?;
                for item in BatchIter::new(&bytes, usize::MAX) {
                    let (pos, v) = item.map_err(|e| corrupt(r, e))?;
                    let batch = bytes.slice(pos..pos + v.size());
                    let mut c = clean_decided_batch(&batch, &map, policy, &mut txns)
                        .map_err(|e| corrupt(r, e))?;
                    if c.bytes.is_none() && v.last_offset() + 1 == end {
                        // The newest batch of the cleanable section stays, so
                        // the log never ends in a gap a reader waits on.
                        c = CleanedBatch {
                            bytes: Some(batch.clone()),
                            changed: false,
                            records_kept: v.record_count().max(0) as usize,
                            records_dropped: 0,
                            horizon: None,
                        };
                    }
                    changed |= c.changed;
                    stats.records_dropped += c.records_dropped;
                    if let Some(h) = c.horizon {
                        next_horizon = Some(next_horizon.map_or(h, |n| n.min(h)));
                    }
                    out.extend(c.bytes);
                }
            }
            if !changed {
                continue;
            }
            if out.is_empty() {
                // Nothing left: goes with the next group.
                carried = group;
                continue;
            }
            let (Some(first), Some(last)) = (group.first(), group.last()) else {
                continue;
            };
            let (first_offset, last_offset) = (first.first_offset, last.last_offset);
            let mut builder = SegmentBuilder::with_base(INDEX_INTERVAL_BYTES, first_offset);
            for batch in out {
                builder.append(batch)?;
            }
            let built = builder.finish()?;
            let before: u64 = group.iter().map(|r| r.byte_len).sum();
            stats.bytes_before += before;
            stats.bytes_after += built.log_size;
            let max_ts = built.max_timestamp;
            swap_in(
                b,
                log,
                epoch,
                (first_offset, last_offset, max_ts),
                built,
                true,
            )
            .await?;
            stats.segments_written += 1;
        }
        if let Some(p) = self.progress.get_mut(&log.key) {
            p.first_dirty = map_end;
            p.next_horizon = next_horizon;
        }
        tracing::info!(
            partition = %log.key,
            keys = stats.keys,
            records_dropped = stats.records_dropped,
            bytes_before = stats.bytes_before,
            bytes_after = stats.bytes_after,
            segments_written = stats.segments_written,
            cleaned_to = map_end,
            "log cleaned"
        );
        Ok(Some(stats))
    }
}

async fn read(b: &Partitions, r: &StoredRange) -> Result<Bytes> {
    Ok(b.inner
        .reader
        .read_range(&r.object, r.byte_start..r.byte_start + r.byte_len)
        .await?)
}
