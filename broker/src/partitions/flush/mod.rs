//! The flush: the queued batches of the broker's partitions, up to
//! `max_object_bytes`, go into one WAL object (the rest into the next), the
//! object is written to the store pool (a failed write goes to a new
//! object), and one metadata commit records each partition's range at the
//! epoch it was sequenced under. Only then do the high watermarks move and
//! `acks=all` produces complete. Several flushes may be in flight at once
//! ([`pipeline`]): their writes overlap, their commits keep their order.
//!
//! The commit rules live in the metadata (`docs/metadata.md`); this module
//! decides what a refused commit means for each partition:
//!
//! - our object's range is already in the index: an earlier attempt landed
//!   and only its answer was lost (the commit is one Raft entry, so all of it
//!   landed): finish with it;
//! - the partition is still ours at this epoch and its committed end is where
//!   our range starts: the refusal was about another partition: commit again;
//! - the partition moved: its writes fail with NOT_LEADER, the log stops;
//! - the topic is gone: its writes fail with UNKNOWN_TOPIC_OR_PARTITION.
//!
//! A partition failed for good fails the same way, without a commit, in
//! every later flush still in flight (its ranges follow the failed one).

use std::sync::Arc;
use std::time::Duration;

use floe_metadata::MetaError;
use floe_metadata::api::MetaApi;
use floe_metadata::error::ErrorKind as MetaKind;
use floe_metadata::ids::{BrokerId, Epoch, ObjectId};
use floe_metadata::model::{Commit, CommitRange, IndexEntry, ObjectSel};
use floe_metadata::txn::RangeTxns;
use floe_storage::wal::{WalBuilder, WalEntry, WalObject};
use floe_storage::{ObjectKey, ObjectRef, StorePool};

use crate::error::{BrokerError, ErrorKind};
use crate::partitions::log::{PartitionLog, Pending, StoredRange};

/// What one flush needs from its broker.
pub(crate) struct Flush<'a> {
    pub meta: &'a dyn MetaApi,
    pub pool: &'a StorePool,
    pub broker: BrokerId,
    /// Committed bytes each partition keeps in memory for fetches.
    pub tail_budget: usize,
    /// Pause before a commit is tried again.
    pub retry_pause: Duration,
    /// The most bytes of batches one WAL object takes (a single produce
    /// larger than this goes alone); the rest waits for the next flush.
    pub max_object_bytes: usize,
}

/// What a flush did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Flushed {
    pub object: ObjectRef,
    /// Partitions whose writes were committed.
    pub committed: usize,
}

/// One partition's part of the flush.
struct Part {
    log: Arc<PartitionLog>,
    epoch: Epoch,
    pending: Vec<Pending>,
    entry: WalEntry,
}

/// What a refused commit turned out to be for one partition.
enum Verdict {
    /// Our range is in the index already (an earlier attempt landed).
    Landed(ObjectId),
    /// Still ours at the committed end: try again.
    Retry,
    /// Gone: fail its writes with this.
    Fail(BrokerError),
}

/// A flush whose object is built and not yet written: the queued batches
/// it took, each partition's at the epoch it was sequenced under.
pub(crate) struct Prepared {
    obj: WalObject,
    parts: Vec<Part>,
}

/// The most produces a flush's span follows from (links in a trace).
const MAX_LINKS: usize = 128;

impl Prepared {
    /// The span the flush runs in: a trace of its own, following from the
    /// spans its batches were sequenced in (the first [`MAX_LINKS`]), so
    /// that a request's trace leads to the flush that made it durable.
    pub(crate) fn span(&self) -> tracing::Span {
        let produces: usize = self.parts.iter().map(|p| p.pending.len()).sum();
        let span = tracing::info_span!(
            parent: None,
            "flush",
            // As i64: OpenTelemetry has no unsigned integers.
            bytes = i64::try_from(self.obj.size).unwrap_or(i64::MAX),
            partitions = self.parts.len() as i64,
            produces = produces as i64,
            object = tracing::field::Empty,
        );
        for p in self
            .parts
            .iter()
            .flat_map(|p| &p.pending)
            .filter(|p| p.span.id().is_some())
            .take(MAX_LINKS)
        {
            span.follows_from(&p.span);
        }
        span
    }

    /// The size of its WAL object.
    pub(crate) fn size(&self) -> usize {
        usize::try_from(self.obj.size).unwrap_or(usize::MAX)
    }
}

impl Flush<'_> {
    /// Flushes what `logs` have queued: [`Flush::prepare`], [`Flush::write`]
    /// and [`Flush::commit`] in turn. `None` when nothing was queued.
    #[cfg(test)]
    pub(crate) async fn run(&self, logs: Vec<Arc<PartitionLog>>) -> Option<Flushed> {
        let prepared = self.prepare(logs)?;
        let stored = self.write(&prepared).await;
        Some(self.commit(prepared, stored).await)
    }

    /// Takes what `logs` have queued, up to `max_object_bytes`, and builds
    /// the WAL object. `None` when nothing was queued. Ranges of the same
    /// partitions may still be in flight in earlier flushes: their commits
    /// must come first (see [`pipeline`]).
    pub(crate) fn prepare(&self, logs: Vec<Arc<PartitionLog>>) -> Option<Prepared> {
        let mut taken = Vec::new();
        let mut budget = self.max_object_bytes;
        for log in logs {
            if let Some((epoch, pending)) = log.take_unflushed(budget, taken.is_empty()) {
                let bytes: usize = pending.iter().map(|p| p.batches.len).sum();
                budget = budget.saturating_sub(bytes);
                taken.push((log, Epoch(epoch), pending));
            }
            if budget == 0 {
                break;
            }
        }
        if taken.is_empty() {
            return None;
        }
        // Each sequenced batch goes in as its own chunk: no copy.
        let mut wal = WalBuilder::new();
        let mut held = Vec::with_capacity(taken.len());
        for (log, epoch, pending) in taken {
            let appended = pending
                .iter()
                .try_for_each(|p| wal.append_split(log.key, &p.batches.stored));
            match appended {
                Ok(()) => held.push((log, epoch, pending)),
                Err(e) => {
                    wal.remove(&log.key);
                    tracing::error!(partition = %log.key, error = %e, "batches the WAL refused; failing them");
                    log.roll_back(
                        pending,
                        &BrokerError::new(ErrorKind::CorruptMessage, e.to_string()),
                    );
                }
            }
        }
        if wal.is_empty() {
            return None;
        }
        let obj = wal.finish();
        let mut parts = Vec::with_capacity(held.len());
        for (log, epoch, pending) in held {
            match obj.entries.iter().find(|e| e.partition == log.key) {
                Some(entry) => parts.push(Part {
                    log,
                    epoch,
                    pending,
                    entry: entry.clone(),
                }),
                None => log.roll_back(
                    pending,
                    &BrokerError::new(ErrorKind::CorruptMessage, "batches missing from the WAL"),
                ),
            }
        }
        Some(Prepared { obj, parts })
    }

    /// Commits a written object's ranges in one metadata command; a refused
    /// commit is sorted out per partition (see the module's rules). Ranges
    /// of partitions an earlier flush failed for good fail the same way
    /// without being tried.
    pub(crate) async fn commit(&self, prepared: Prepared, stored: ObjectRef) -> Flushed {
        let mut parts = Vec::with_capacity(prepared.parts.len());
        for part in prepared.parts {
            match part.log.flush_failure() {
                Some(why) => {
                    tracing::warn!(partition = %part.log.key, epoch = %part.epoch, error = %why, "failing the flushed writes behind a failed range");
                    part.log.abandon(part.pending, &why);
                }
                None => parts.push(part),
            }
        }
        let mut committed = 0;
        while !parts.is_empty() {
            let commit = self.commit_of(&stored, &parts);
            let txns = Self::txns_of(&parts);
            let answer = if txns.is_empty() {
                self.meta.commit(&commit).await
            } else {
                self.meta.commit_with_txns(&commit, &txns).await
            };
            match answer {
                Ok(outcome) => {
                    committed += parts.len();
                    self.finish(std::mem::take(&mut parts), &stored, outcome.object);
                }
                Err(e) if e.kind().is_retryable() => {
                    tracing::warn!(error = %e, "commit failed; retrying");
                    tokio::time::sleep(self.retry_pause).await;
                }
                Err(e) => {
                    tracing::info!(error = %e, "commit refused; checking ownership and the committed ends");
                    crate::metrics::commit_refused();
                    let mut keep = Vec::with_capacity(parts.len());
                    let mut landed = None;
                    for part in parts {
                        match self.verdict(&part, &stored).await {
                            Verdict::Landed(id) => {
                                landed = Some(id);
                                keep.push(part);
                            }
                            Verdict::Retry => keep.push(part),
                            Verdict::Fail(why) => {
                                tracing::warn!(partition = %part.log.key, epoch = %part.epoch, error = %why, "failing the flushed writes of a partition");
                                part.log.abandon(part.pending, &why);
                            }
                        }
                    }
                    if let Some(id) = landed {
                        // One commit is one Raft entry: every range of it
                        // that is still ours landed with it.
                        committed += keep.len();
                        self.finish(keep, &stored, id);
                        break;
                    }
                    parts = keep;
                    if !parts.is_empty() {
                        tokio::time::sleep(self.retry_pause).await;
                    }
                }
            }
        }
        Flushed {
            object: stored,
            committed,
        }
    }

    /// Writes the object; a failed write goes to a new object (and
    /// endpoint) until one lands: nothing is acknowledged before.
    pub(crate) async fn write(&self, prepared: &Prepared) -> ObjectRef {
        let obj = &prepared.obj;
        let broker = self.broker;
        let mut pause = Duration::from_millis(50);
        loop {
            match self
                .pool
                .put_new(
                    |t| ObjectKey::new(format!("wal/{broker}/{}.wal", t.as_str())),
                    obj.payload(),
                )
                .await
            {
                Ok(r) => {
                    tracing::Span::current().record("object", r.key.as_str());
                    return r;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "WAL write failed; retrying as a new object");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    fn commit_of(&self, stored: &ObjectRef, parts: &[Part]) -> Commit {
        Commit {
            broker: self.broker,
            object: stored.clone(),
            ranges: parts
                .iter()
                .map(|p| CommitRange {
                    partition: p.log.key,
                    epoch: p.epoch,
                    first_offset: p.entry.first_offset.0,
                    last_offset: p.entry.last_offset.0,
                    max_timestamp: p.entry.max_timestamp,
                    object: ObjectSel::New,
                    byte_start: p.entry.data_offset,
                    byte_len: p.entry.data_len,
                    producers: p
                        .pending
                        .iter()
                        .flat_map(|q| q.batches.producers.iter().copied())
                        .collect(),
                })
                .collect(),
        }
    }

    /// The transactional events (first batches of transactions, markers)
    /// of each part's range, for the partitions that have any: a flush
    /// without them sends a plain commit.
    fn txns_of(parts: &[Part]) -> Vec<RangeTxns> {
        parts
            .iter()
            .filter_map(|p| {
                let events = p
                    .log
                    .lock()
                    .txns
                    .events_in(p.entry.first_offset.0, p.entry.last_offset.0);
                (!events.is_empty()).then_some(RangeTxns {
                    partition: p.log.key,
                    events,
                })
            })
            .collect()
    }

    /// What the metadata holds now for a partition whose commit was refused.
    async fn verdict(&self, part: &Part, stored: &ObjectRef) -> Verdict {
        let first = part.entry.first_offset.0;
        let last = part.entry.last_offset.0;
        match self.meta.partition_index(part.log.key, first).await {
            Ok(idx) => {
                let ours = |x: &&IndexEntry| {
                    x.first_offset == first && x.last_offset == last && x.object.key == stored.key
                };
                if let Some(x) = idx.entries.iter().find(ours) {
                    Verdict::Landed(x.object_id)
                } else if idx.info.owner == Some(self.broker)
                    && idx.info.epoch == part.epoch
                    && idx.info.high_watermark == first
                {
                    Verdict::Retry
                } else {
                    Verdict::Fail(BrokerError::not_owner(part.log.key))
                }
            }
            Err(e) if topic_gone(&e) => Verdict::Fail(BrokerError::new(
                ErrorKind::UnknownTopicOrPartition,
                e.to_string(),
            )),
            Err(e) => {
                tracing::warn!(partition = %part.log.key, error = %e, "cannot read the partition index; retrying");
                Verdict::Retry
            }
        }
    }

    fn finish(&self, parts: Vec<Part>, stored: &ObjectRef, object_id: ObjectId) {
        let now = floe_metadata::clock::now_ms() as i64;
        // Each produce says, in its own request's span, where it went.
        if tracing::enabled!(tracing::Level::DEBUG) {
            for p in &parts {
                for pending in &p.pending {
                    pending.span.in_scope(|| {
                        tracing::debug!(
                            partition = %p.log.key,
                            first_offset = pending.batches.first_offset,
                            last_offset = pending.batches.last_offset,
                            object = stored.key.as_str(),
                            object_id = object_id.0,
                            "produce committed"
                        );
                    });
                }
            }
        }
        for p in parts {
            let range = StoredRange {
                first_offset: p.entry.first_offset.0,
                last_offset: p.entry.last_offset.0,
                max_timestamp: p.entry.max_timestamp,
                object: stored.clone(),
                object_id: object_id.0,
                byte_start: p.entry.data_offset,
                byte_len: p.entry.data_len,
                segment: None,
                committed_ms: now,
            };
            p.log.committed(p.pending, range, self.tail_budget);
        }
    }
}

/// The partition's topic was deleted while its data waited.
fn topic_gone(e: &MetaError) -> bool {
    matches!(
        e.kind(),
        MetaKind::UnknownTopic | MetaKind::UnknownPartition | MetaKind::InvalidRequest
    )
}

pub(crate) mod pipeline;

#[cfg(test)]
mod tests;
