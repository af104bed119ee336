//! The owner's control of its partitions: maintenance now (tests and
//! tools), flushing, stopping, taking a partition over and dropping it.

use std::sync::Arc;
use std::time::Duration;

use floe_storage::segment::SegmentMeta;
use floe_storage::{ObjectKey, ObjectRef, Offset, PartitionKey};

use crate::config::LogConfig;
use crate::error::{BrokerError, ErrorKind, Result};
use crate::partitions::log::{PartitionLog, Status, StoredRange};

use super::Partitions;

/// A partition assigned to this broker that it does not serve yet.
#[derive(Debug, Clone)]
pub(crate) struct TakeOver {
    pub key: PartitionKey,
    pub topic: String,
    pub epoch: u64,
    pub config: LogConfig,
}

/// Partitions whose indexes one metadata read asks for at a take-over.
const INDEXES_PER_READ: usize = 256;
/// Index reads of one take-over in flight at once.
const INDEX_READS_AT_ONCE: usize = 4;
/// Partitions of one index read loaded at once (each looks its segments'
/// index objects up in the store).
const LOADS_AT_ONCE: usize = 32;

impl Partitions {
    /// Compacts the WAL ranges of every owned partition that are due now
    /// (tests and tools). Returns the segments made.
    pub async fn compact_now(&self) -> Result<usize> {
        let mut n = 0;
        for log in self.logs() {
            n += crate::partitions::compaction::compact(self, &log).await?;
        }
        Ok(n)
    }

    /// Merges the small segments of every owned partition now, as many
    /// times as the merge plan asks (tests and tools). Returns the merges.
    pub async fn merge_now(&self) -> Result<usize> {
        let mut n = 0;
        for log in self.logs() {
            while crate::partitions::compaction::merge(self, &log).await? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Cleans every owned partition of a compacted topic now, as if no
    /// cleaning had run before (tests; the maintenance task does it every
    /// `compaction_interval`). Returns the records dropped.
    pub async fn clean_now(&self) -> Result<usize> {
        let mut cleaner = crate::partitions::cleaner::Cleaner::default();
        let mut n = 0;
        for log in self.logs() {
            if let Some(s) = cleaner.clean(self, &log).await? {
                n += s.records_dropped;
            }
        }
        Ok(n)
    }

    /// Applies retention to every owned partition now (tests; the
    /// maintenance task does it every `retention_check_interval`). Returns
    /// how many log starts moved.
    pub async fn retention_now(&self) -> Result<usize> {
        let mut n = 0;
        for log in self.logs() {
            if crate::partitions::maintenance::apply_retention(self, &log)
                .await?
                .is_some()
            {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Deletes the objects no committed range refers to any more, as the
    /// maintenance task does every `retention_check_interval` (tests; the
    /// grace period counts from this call, so only a zero grace deletes).
    pub async fn sweep_now(&self) -> Result<()> {
        crate::partitions::maintenance::sweep(self, &mut Default::default()).await
    }

    /// Tells the broker that the writes of one produce request are all
    /// sequenced here. Where flushes are not paced (a local folder), they
    /// go at once, together, instead of at the next tick of the flush
    /// interval; a flush in flight takes them as soon as it has committed.
    /// Where flushes are paced (S3), nothing changes: the pace decides.
    pub fn request_sequenced(&self) {
        if !self.inner.cfg.flush.paced {
            self.inner.flush_now.notify_one();
        }
    }

    /// Asks the flusher for a flush now, beside those in flight and whatever
    /// the pacing: a hand-over waits on it, and so do the writes a take-over
    /// held.
    pub(crate) fn flush_at_once(&self) {
        self.inner
            .flush_at_once
            .store(true, std::sync::atomic::Ordering::Release);
        self.inner.flush_now.notify_one();
    }

    /// Flushes everything queued now and waits for it (used at shutdown and hand-over).
    pub async fn flush_all(&self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let busy = self.logs().iter().any(|l| {
                let s = l.lock();
                s.status != Status::Gone && (!s.unflushed.is_empty() || s.in_flight > 0)
            });
            if !busy {
                return;
            }
            self.inner.flush_now.notify_one();
            let wait = self.inner.flushed.notified();
            if tokio::time::timeout_at(deadline, wait).await.is_err() {
                tracing::warn!("flush at shutdown did not finish in time");
                return;
            }
        }
    }

    /// Stops accepting writes, flushes what was accepted, and stops the loops.
    pub async fn shutdown(&self) {
        self.inner.stop.cancel();
        self.flush_all(Duration::from_secs(20)).await;
        let why = BrokerError::new(ErrorKind::ShuttingDown, "the broker stopped");
        for l in self.logs() {
            l.close(&why);
        }
        self.inner.stopped.notify_waiters();
        self.inner.flush_now.notify_one();
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.inner.stop.is_cancelled()
    }

    /// Takes partitions over, each at its epoch: reads their committed
    /// indexes from metadata, [`INDEXES_PER_READ`] under one linearizable
    /// read, then loads each. Returns the take-overs that failed (to be
    /// retried at the next look at the cluster view).
    pub(crate) async fn take_over(
        &self,
        wanted: Vec<TakeOver>,
    ) -> Vec<(PartitionKey, BrokerError)> {
        use futures::StreamExt;
        let chunks: Vec<Vec<TakeOver>> = {
            let mut it = wanted.into_iter().peekable();
            let mut out = Vec::new();
            while it.peek().is_some() {
                out.push(it.by_ref().take(INDEXES_PER_READ).collect());
            }
            out
        };
        futures::stream::iter(chunks)
            .map(|chunk| self.take_over_chunk(chunk))
            .buffer_unordered(INDEX_READS_AT_ONCE)
            .flat_map(futures::stream::iter)
            .collect()
            .await
    }

    /// One read of up to [`INDEXES_PER_READ`] indexes, then each partition
    /// loaded (its segments' index objects looked up in the store).
    async fn take_over_chunk(&self, chunk: Vec<TakeOver>) -> Vec<(PartitionKey, BrokerError)> {
        use futures::StreamExt;
        let asked: Vec<_> = chunk.iter().map(|t| (t.key, 0)).collect();
        let indexes = match self.inner.meta.partition_indexes(&asked).await {
            Ok(indexes) => indexes,
            Err(e) => {
                let e = BrokerError::from(e);
                return chunk.into_iter().map(|t| (t.key, e.clone())).collect();
            }
        };
        futures::stream::iter(chunk.into_iter().zip(indexes))
            .map(|(t, idx)| async move {
                let key = t.key;
                let r = match idx {
                    Ok(idx) => self.install(t, idx).await,
                    Err(e) => Err(e.into()),
                };
                r.err().map(|e| (key, e))
            })
            .buffer_unordered(LOADS_AT_ONCE)
            .filter_map(futures::future::ready)
            .collect()
            .await
    }

    /// Serves a partition taken over from its committed index.
    async fn install(&self, t: TakeOver, idx: floe_metadata::model::PartitionIndex) -> Result<()> {
        let TakeOver {
            key,
            topic,
            epoch,
            config,
        } = t;
        let info = idx.info;
        if info.owner != Some(self.broker_id()) || info.epoch.0 != epoch {
            return Err(BrokerError::not_owner(key));
        }
        // The age of a range taken over counts from now: a broker taking
        // thousands of partitions over does not compact them all at once.
        let now = floe_metadata::clock::now_ms() as i64;
        let ranges = futures::future::try_join_all(idx.entries.into_iter().map(|e| async move {
            let mut r = StoredRange {
                first_offset: e.first_offset,
                last_offset: e.last_offset,
                max_timestamp: e.max_timestamp,
                object: e.object,
                object_id: e.object_id.0,
                byte_start: e.byte_start,
                byte_len: e.byte_len,
                segment: None,
                committed_ms: now,
            };
            if r.is_segment() {
                r.segment = Some(Arc::new(self.segment_objects(&r.object, &r).await?));
            }
            Ok::<_, BrokerError>(r)
        }))
        .await?;
        let producers = crate::partitions::producer::Producers::from_batches(idx.producers)
            .with_gap_grace(self.inner.cfg.producer_gap_grace);
        let txns = idx.txns;
        let log = Arc::new(PartitionLog::new(
            key,
            topic,
            epoch,
            config,
            crate::partitions::log::Committed {
                log_start: info.log_start_offset,
                hw: info.high_watermark,
                index: ranges,
                producers,
                txns,
            },
        ));
        tracing::info!(partition = %key, epoch, hw = info.high_watermark, "took partition over");
        let old = self
            .inner
            .logs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, log);
        if let Some(old) = old {
            old.close(&BrokerError::not_owner(key));
        }
        Ok(())
    }

    /// Forgets a partition this broker no longer owns.
    pub(crate) fn drop_partition(&self, key: &PartitionKey) {
        let old = self
            .inner
            .logs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        if let Some(old) = old {
            tracing::info!(partition = %key, "partition no longer owned");
            old.close(&BrokerError::not_owner(key));
        }
        if let Some(l) = self.inner.listener.get() {
            l.partition_dropped(key);
        }
    }

    /// How this broker flushes (see [`crate::partitions::flush`]).
    pub(crate) fn flush_settings(&self) -> crate::partitions::flush::Flush<'_> {
        crate::partitions::flush::Flush {
            meta: self.inner.meta.as_ref(),
            pool: &self.inner.pool,
            broker: self.broker_id(),
            tail_budget: self.inner.cfg.tail_bytes_per_partition,
            retry_pause: Duration::from_millis(100),
            max_object_bytes: self.inner.cfg.max_wal_object_bytes,
        }
    }

    /// The logs in the order the next flush takes them: each flush starts
    /// at another partition, so that none waits behind the others when a
    /// flush cannot take everything.
    pub(crate) fn flush_order(&self) -> Vec<Arc<PartitionLog>> {
        let mut logs = self.logs();
        if !logs.is_empty() {
            let turn = self
                .inner
                .flush_turn
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let n = logs.len();
            logs.rotate_left(turn % n);
        }
        logs
    }
}

/// The segment a `.log` range refers to (its index objects' sizes included).
fn sibling(log: &ObjectRef, ext: &str) -> ObjectKey {
    let key = log.key.as_str();
    let stem = key.strip_suffix(".log").unwrap_or(key);
    ObjectKey::new(format!("{stem}.{ext}"))
}

impl Partitions {
    /// Looks up a segment's index objects next to its `.log`.
    pub(crate) async fn segment_objects(
        &self,
        log: &ObjectRef,
        r: &StoredRange,
    ) -> Result<SegmentMeta> {
        let index = self
            .inner
            .pool
            .head(&log.endpoint, &sibling(log, "index"))
            .await?;
        let timeindex = self
            .inner
            .pool
            .head(&log.endpoint, &sibling(log, "timeindex"))
            .await?;
        Ok(SegmentMeta {
            base_offset: Offset(r.first_offset),
            last_offset: Offset(r.last_offset),
            max_timestamp: r.max_timestamp,
            log: log.clone(),
            index,
            timeindex,
        })
    }

    /// The objects of a segment, for deletion.
    pub(crate) fn segment_siblings(log: &ObjectRef) -> [ObjectRef; 2] {
        [
            ObjectRef {
                endpoint: log.endpoint.clone(),
                key: sibling(log, "index"),
                size: 0,
            },
            ObjectRef {
                endpoint: log.endpoint.clone(),
                key: sibling(log, "timeindex"),
                size: 0,
            },
        ]
    }
}
