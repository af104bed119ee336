//! One partition's log on its owner: sequencing, the unflushed queue, the
//! committed tail kept in memory, and the committed index (where every
//! committed range lives in the object store).

use std::collections::VecDeque;
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use floe_storage::batch::{self, BatchView, HEADER_LEN, SplitBatch};
use floe_storage::{ObjectRef, PartitionKey};
use tokio::sync::{oneshot, watch};

use crate::config::{LogConfig, TimestampType};
use crate::error::{BrokerError, ErrorKind, Result};
use crate::partitions::producer::{self, Check, ProducerBatch, Producers};
use crate::partitions::txn_log::PartitionTxnLog;
use floe_metadata::ids::{ProducerEpoch, ProducerId};
use floe_metadata::txn::{AbortedTxn, PartitionTxns};

/// Batches with their offsets assigned.
#[derive(Debug, Clone)]
pub struct Batches {
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    /// Each batch as its header written here and the rest of it, a slice
    /// of the request it came in (never copied).
    pub stored: Vec<SplitBatch>,
    /// Their total size in bytes.
    pub len: usize,
    /// The idempotent batches among them.
    pub producers: Vec<ProducerBatch>,
    /// When they went into the partition's tail (committed).
    pub committed_at: Option<std::time::Instant>,
}

impl Batches {
    /// Gives the batches buffers of their own once they have been in the
    /// tail for `after`: a slice of a request holds the whole request in
    /// memory, which must not outlive the tail's turnover by much (a
    /// partition that gets a small part of every request, or none, would
    /// otherwise hold many requests, or one forever).
    ///
    /// Returns whether they were that old (and so hold no request now).
    fn detach_if_older(&mut self, now: std::time::Instant, after: std::time::Duration) -> bool {
        let old = self
            .committed_at
            .is_some_and(|at| now.saturating_duration_since(at) >= after);
        if old {
            for b in self.stored.iter_mut().filter(|b| b.shares_its_buffer()) {
                b.detach();
            }
        }
        old
    }
}

/// How long committed batches in a partition's tail may go on holding the
/// request they came in ([`Batches::detach_if_older`]).
pub(crate) const TAIL_DETACH_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// A committed range of the log and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRange {
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub object: ObjectRef,
    pub object_id: u64,
    pub byte_start: u64,
    pub byte_len: u64,
    /// For a segment: its three objects (with the index sizes).
    pub segment: Option<std::sync::Arc<floe_storage::segment::SegmentMeta>>,
    /// When this broker committed it (ms; 0 when loaded at take-over).
    pub committed_ms: i64,
}

impl StoredRange {
    /// Segments are named `….log`; anything else is a WAL object.
    pub fn is_segment(&self) -> bool {
        self.segment.is_some() || self.object.key.as_str().ends_with(".log")
    }
}

/// What a produce waits on (acks=all): the flush that carries its batches.
pub(crate) type Waiter = oneshot::Sender<Result<()>>;

/// What [`PartitionLog::append`] gives back.
#[derive(Debug)]
pub(crate) enum Appended {
    /// The batches as stored, the receiver for `acks=all`, and the bytes now
    /// waiting for a flush.
    New(Batches, Option<oneshot::Receiver<Result<()>>>, usize),
    /// A retried idempotent batch that is already in the log, at these
    /// offsets; `rollbacks` is [`LogState::rollbacks`] when it was found
    /// (see [`PartitionLog::wait_duplicate`]).
    Duplicate {
        first_offset: i64,
        last_offset: i64,
        rollbacks: u64,
    },
}

/// What [`PartitionLog::append_marker`] gives back.
#[derive(Debug)]
pub(crate) enum MarkerAppended {
    /// Sequenced: the receiver resolves once it is committed.
    New(oneshot::Receiver<Result<()>>, usize),
    /// The producer has no transaction open here: nothing to write.
    NotNeeded,
}

#[derive(Debug)]
pub(crate) struct Pending {
    pub batches: Batches,
    pub waiter: Option<Waiter>,
    /// The span it was sequenced in (its Kafka request's, or the RPC call's
    /// serving it): the flush that writes it follows from it
    /// ([`crate::trace`]).
    pub span: tracing::Span,
    /// Its bytes in the broker's backlog, given back when this is dropped
    /// (kept only for that).
    #[allow(dead_code)]
    pub held: crate::partitions::backlog::Held,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Owned and accepting writes.
    Active,
    /// Being handed over: no new writes, the queue drains.
    Releasing,
    /// No longer owned.
    Gone,
}

#[derive(Debug)]
pub(crate) struct LogState {
    pub epoch: u64,
    pub status: Status,
    pub config: LogConfig,
    pub log_start: i64,
    /// Next offset to assign.
    pub leo: i64,
    /// Committed end: everything below it is durable and readable.
    pub hw: i64,
    /// The end of the records a producer was answered for before they
    /// were durable (`acks` 0 or 1, and a transaction's batches, answered
    /// once sequenced): reads that must count them wait for the high
    /// watermark to reach it ([`PartitionLog::answered_uncounted`]).
    pub answered_end: i64,
    pub unflushed: Vec<Pending>,
    pub unflushed_bytes: usize,
    /// Flushes holding batches of this partition that are not yet
    /// committed (several when WAL objects are written concurrently; their
    /// ranges are committed in offset order).
    pub in_flight: usize,
    /// Why a flush failed this partition for good (moved, topic gone): the
    /// ranges still in flight behind it fail the same way.
    pub flush_failed: Option<BrokerError>,
    /// Flushes rolled back so far ([`PartitionLog::roll_back`]): their
    /// offsets are given again to later batches.
    pub rollbacks: u64,
    pub tail: VecDeque<Batches>,
    pub tail_bytes: usize,
    /// How many of the tail's first batches hold buffers of their own
    /// ([`Batches::detach_if_older`]).
    pub tail_detached: usize,
    pub index: Vec<StoredRange>,
    pub producers: Producers,
    /// The partition's transactions: open ones, the aborted index, and the
    /// events of batches sequenced but not committed yet.
    pub txns: PartitionTxnLog,
}

/// Where a fetch finds its data, decided under the lock, read outside it.
#[derive(Debug)]
pub(crate) enum ReadPlan {
    Empty,
    Memory(Vec<Bytes>),
    Store(Vec<StoredRange>),
}

impl LogState {
    /// Drops the oldest batches of the tail.
    pub(crate) fn pop_tail(&mut self) -> Option<Batches> {
        let b = self.tail.pop_front()?;
        self.tail_bytes -= b.len;
        self.tail_detached = self.tail_detached.saturating_sub(1);
        Some(b)
    }

    /// Detaches the tail's batches older than [`TAIL_DETACH_AFTER`]. The
    /// tail is in commit order: the first `tail_detached` are done, and
    /// the first young one ends the walk.
    fn detach_old(&mut self, now: std::time::Instant) {
        let done = self.tail_detached.min(self.tail.len());
        let mut n = done;
        for b in self.tail.iter_mut().skip(done) {
            if !b.detach_if_older(now, TAIL_DETACH_AFTER) {
                break;
            }
            n += 1;
        }
        self.tail_detached = n;
    }
}

/// One owned partition.
#[derive(Debug)]
pub struct PartitionLog {
    pub key: PartitionKey,
    pub topic: String,
    pub(crate) state: Mutex<LogState>,
    hw_tx: watch::Sender<i64>,
    /// When this broker took the partition over (see
    /// [`PartitionLog::just_taken`]).
    taken_at: std::time::Instant,
}

/// What the metadata holds of a partition when a broker takes it over.
#[derive(Debug, Default)]
pub(crate) struct Committed {
    pub log_start: i64,
    pub hw: i64,
    pub index: Vec<StoredRange>,
    pub producers: Producers,
    /// Its transactions as the metadata committed them.
    pub txns: PartitionTxns,
}

/// Where a fetch may read up to, and what a `read_committed` reader
/// needs to drop aborted records (decided under the log's lock with the
/// plan).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadBounds {
    pub log_start: i64,
    pub hw: i64,
    /// The last stable offset: the first offset of the oldest open
    /// transaction, or the high watermark.
    pub lso: i64,
    /// For `read_committed`: the aborted transactions overlapping the
    /// range that may be returned (empty otherwise).
    pub aborted: Vec<AbortedTxn>,
}

impl PartitionLog {
    pub(crate) fn new(
        key: PartitionKey,
        topic: String,
        epoch: u64,
        config: LogConfig,
        committed: Committed,
    ) -> Self {
        let Committed {
            log_start,
            hw,
            index,
            producers,
            txns,
        } = committed;
        let (hw_tx, _) = watch::channel(hw);
        Self {
            key,
            topic,
            state: Mutex::new(LogState {
                epoch,
                status: Status::Active,
                config,
                log_start,
                leo: hw,
                hw,
                answered_end: hw,
                unflushed: Vec::new(),
                unflushed_bytes: 0,
                in_flight: 0,
                flush_failed: None,
                rollbacks: 0,
                tail: VecDeque::new(),
                tail_bytes: 0,
                tail_detached: 0,
                index,
                producers,
                txns: PartitionTxnLog::from_committed(txns),
            }),
            hw_tx,
            taken_at: std::time::Instant::now(),
        }
    }

    /// Whether this broker took the partition over less than `within` ago
    /// (see [`crate::config::FlushPolicy::after_take_over`]).
    pub(crate) fn just_taken(&self, within: std::time::Duration) -> bool {
        // Checked on every produce: no clock read where the window is off.
        !within.is_zero() && self.taken_at.elapsed() < within
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The committed index's entries at or above the log start, as (WAL
    /// ranges, segments).
    pub fn index_counts(&self) -> (usize, usize) {
        let st = self.lock();
        let live = st.index.iter().filter(|r| r.last_offset >= st.log_start);
        let (segments, wal): (Vec<&StoredRange>, Vec<&StoredRange>) =
            live.partition(|r| r.is_segment());
        (wal.len(), segments.len())
    }

    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    pub fn status(&self) -> Status {
        self.lock().status
    }

    /// (log start, high watermark, log end).
    pub fn offsets(&self) -> (i64, i64, i64) {
        let s = self.lock();
        (s.log_start, s.hw, s.leo)
    }

    /// The end of records answered before they were durable that the high
    /// watermark does not count yet, if any, for a read from `from` (one at
    /// or past the high watermark; `None` for a read that counts the whole
    /// log). One look under the lock: a fetch asks it every time.
    pub(crate) fn answered_uncounted(&self, from: Option<i64>) -> Option<i64> {
        let s = self.lock();
        let at_end = from.is_none_or(|o| o >= s.hw);
        (at_end && s.answered_end > s.hw).then_some(s.answered_end)
    }

    pub fn subscribe_hw(&self) -> watch::Receiver<i64> {
        self.hw_tx.subscribe()
    }

    pub(crate) fn publish_hw(&self, hw: i64) {
        self.hw_tx.send_replace(hw);
    }

    /// Validates the produced batches, assigns their offsets and queues them
    /// for the flusher. Returns the batches as stored and, for `acks=all`, the
    /// receiver that resolves once they are committed. `held` is the
    /// request's reservation in the broker's backlog; it stays with the
    /// queued batches until they are committed or fail. `delayed`: the
    /// records went through a delayed topic's admission, whose delayed
    /// batches (control, not transactional) are the only control batches
    /// taken here.
    pub(crate) fn append(
        &self,
        records: &Bytes,
        wait: bool,
        now_ms: i64,
        held: crate::partitions::backlog::Held,
        delayed: bool,
    ) -> Result<Appended> {
        let mut st = self.lock();
        if st.status != Status::Active {
            return Err(BrokerError::not_owner(self.key));
        }
        let max = st.config.max_message_bytes;
        // Check every batch before anything is assigned: all or nothing.
        let mut sizes = Vec::new();
        // (producer id, epoch, first sequence, last sequence, record count) of idempotent batches.
        let mut idempotent = Vec::new();
        let mut pos = 0usize;
        while pos < records.len() {
            let rest = &records[pos..];
            let size = BatchView::peek_size(rest)
                .map_err(|e| BrokerError::new(ErrorKind::CorruptMessage, e.to_string()))?;
            if size > max {
                return Err(BrokerError::new(
                    ErrorKind::MessageTooLarge,
                    format!(
                        "a batch of {size} bytes is over the topic's max.message.bytes ({max})"
                    ),
                ));
            }
            let view = BatchView::parse(rest, usize::MAX)
                .map_err(|e| BrokerError::new(ErrorKind::CorruptMessage, e.to_string()))?;
            view.verify_crc()
                .map_err(|e| BrokerError::new(ErrorKind::CorruptMessage, e.to_string()))?;
            // A delayed batch (control, never transactional) is taken only
            // from a delayed topic's admission.
            let delayed_batch = delayed && !view.is_transactional();
            if view.is_control() && !delayed_batch {
                return Err(BrokerError::new(
                    ErrorKind::InvalidRecord,
                    "clients may not produce control batches",
                ));
            }
            if view.is_transactional() && view.producer_id() < 0 {
                return Err(BrokerError::new(
                    ErrorKind::InvalidRecord,
                    "a transactional batch without a producer id",
                ));
            }
            if view.producer_id() >= 0 {
                let count = view.last_offset_delta().saturating_add(1);
                idempotent.push((
                    sizes.len(),
                    view.producer_id(),
                    view.producer_epoch(),
                    view.base_sequence(),
                    producer::last_seq(view.base_sequence(), count),
                ));
            }
            sizes.push(view.size());
            pos += view.size();
        }
        if sizes.is_empty() {
            return Err(BrokerError::new(
                ErrorKind::CorruptMessage,
                "a produce carried no record batch",
            ));
        }
        // Idempotence: every batch checked against the producers' state (as
        // if the earlier batches of this request were in already).
        if !idempotent.is_empty() {
            let mut sim = st.producers.clone();
            let mut duplicates = Vec::new();
            // The gap grace runs on the monotonic clock: a wall clock
            // stepped forward must not cut it short.
            let now = floe_metadata::clock::lease_now_ms();
            for &(i, pid, epoch, first, last) in &idempotent {
                let checked = sim.check(pid, epoch, first, last, now);
                if let Err(e) = &checked
                    && e.kind() == ErrorKind::SequenceGap
                {
                    st.producers.note_gap(pid, now);
                }
                match checked? {
                    Check::Duplicate(d) => duplicates.push(d),
                    Check::Append => sim.record(ProducerBatch {
                        producer_id: pid,
                        epoch,
                        first_sequence: first,
                        last_sequence: last,
                        first_offset: i as i64,
                        last_offset: i as i64,
                    }),
                }
            }
            if !duplicates.is_empty() {
                if duplicates.len() != sizes.len() {
                    return Err(BrokerError::new(
                        ErrorKind::OutOfOrderSequence,
                        "a request mixes already-stored and new idempotent batches",
                    ));
                }
                return Ok(Appended::Duplicate {
                    first_offset: duplicates.iter().map(|d| d.first_offset).min().unwrap_or(0),
                    last_offset: duplicates.iter().map(|d| d.last_offset).max().unwrap_or(0),
                    rollbacks: st.rollbacks,
                });
            }
        }
        let first_offset = st.leo;
        let mut producers = Vec::new();
        // (producer, epoch, offset) of each transactional batch.
        let mut transactional = Vec::new();
        let mut stored = Vec::with_capacity(sizes.len());
        let mut next = st.leo;
        let mut max_ts = -1i64;
        let epoch = i32::try_from(st.epoch).unwrap_or(i32::MAX);
        let log_append_time = st.config.timestamp_type == TimestampType::LogAppendTime;
        let corrupt = |e: floe_storage::batch::BatchError| {
            BrokerError::new(ErrorKind::CorruptMessage, e.to_string())
        };
        let mut at = 0usize;
        for size in sizes {
            let whole = &records[at..at + size];
            let v = BatchView::parse(whole, usize::MAX).map_err(corrupt)?;
            let count = i64::from(v.last_offset_delta()) + 1;
            // Only the header changes: offsets and leader epoch (outside
            // the CRC) and, for LogAppendTime, the attributes, the max
            // timestamp and the CRC, which covers the records too and is
            // computed over them where they are.
            let mut header = BytesMut::from(&whole[..HEADER_LEN]);
            batch::set_base_offset(&mut header, next).map_err(corrupt)?;
            batch::set_partition_leader_epoch(&mut header, epoch).map_err(corrupt)?;
            if log_append_time {
                batch::set_log_append_time_split(&mut header, &whole[HEADER_LEN..], now_ms)
                    .map_err(corrupt)?;
            }
            let split = SplitBatch::new(header.freeze(), records.slice(at + HEADER_LEN..at + size))
                .map_err(corrupt)?;
            max_ts = max_ts.max(split.max_timestamp());
            if v.is_transactional() {
                // Its sequence proves that nothing of this producer is
                // missing before it here: it follows what this partition
                // knows of the producer, or is its first (0).
                let follows = v.base_sequence() == 0 || st.producers.knows(v.producer_id());
                transactional.push((
                    ProducerId(v.producer_id()),
                    ProducerEpoch(v.producer_epoch()),
                    next,
                    follows,
                ));
            }
            if v.producer_id() >= 0 {
                producers.push(ProducerBatch {
                    producer_id: v.producer_id(),
                    epoch: v.producer_epoch(),
                    first_sequence: v.base_sequence(),
                    last_sequence: producer::last_seq(
                        v.base_sequence(),
                        v.last_offset_delta().saturating_add(1),
                    ),
                    first_offset: next,
                    last_offset: next + count - 1,
                });
            }
            stored.push(split);
            next = next.checked_add(count).ok_or_else(|| {
                BrokerError::new(ErrorKind::InvalidRecord, "offsets would overflow")
            })?;
            at += size;
        }
        for p in &producers {
            st.producers
                .record_at(*p, u64::try_from(now_ms).unwrap_or(0));
        }
        for (pid, epoch, offset, follows) in transactional {
            st.txns.sequenced_batch(pid, epoch, offset, follows);
        }
        let batches = Batches {
            first_offset,
            last_offset: next - 1,
            max_timestamp: max_ts,
            len: at,
            stored,
            producers,
            committed_at: None,
        };
        st.leo = next;
        let (waiter, rx) = if wait {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            // Answered before it is durable.
            st.answered_end = next;
            (None, None)
        };
        st.unflushed_bytes += batches.len;
        let queued = st.unflushed_bytes;
        st.unflushed.push(Pending {
            batches: batches.clone(),
            waiter,
            span: tracing::Span::current(),
            held,
        });
        Ok(Appended::New(batches, rx, queued))
    }

    /// Sequences a COMMIT or ABORT marker (a control batch) for a
    /// producer's open transaction, like a produce with `acks=all`; the
    /// receiver resolves once it is committed. A producer with no
    /// transaction open here needs none (a retry whose first write
    /// landed, or a partition it never wrote to).
    pub(crate) fn append_marker(
        &self,
        marker: &crate::partitions::txn_log::Marker,
        now_ms: i64,
        held: crate::partitions::backlog::Held,
    ) -> Result<MarkerAppended> {
        let mut st = self.lock();
        if st.status != Status::Active {
            return Err(BrokerError::not_owner(self.key));
        }
        let (pid, epoch) = (marker.producer.producer_id, marker.producer.epoch);
        if !st.txns.needs_marker(pid) {
            return Ok(MarkerAppended::NotNeeded);
        }
        let m = floe_storage::control::Marker {
            kind: if marker.commit {
                floe_storage::control::ControlType::Commit
            } else {
                floe_storage::control::ControlType::Abort
            },
            producer_id: pid.0,
            producer_epoch: epoch.0,
            coordinator_epoch: i32::try_from(marker.coordinator_epoch.0).unwrap_or(i32::MAX),
        };
        let corrupt = |e: floe_storage::batch::BatchError| {
            BrokerError::new(ErrorKind::CorruptMessage, e.to_string())
        };
        let mut out =
            BytesMut::from(&floe_storage::control::marker_batch(&m, now_ms).map_err(corrupt)?[..]);
        let offset = st.leo;
        batch::set_base_offset(&mut out, offset).map_err(corrupt)?;
        let leader_epoch = i32::try_from(st.epoch).unwrap_or(i32::MAX);
        batch::set_partition_leader_epoch(&mut out, leader_epoch).map_err(corrupt)?;
        let len = out.len();
        let header = out.split_to(HEADER_LEN).freeze();
        let batches = Batches {
            first_offset: offset,
            last_offset: offset,
            max_timestamp: now_ms,
            stored: vec![SplitBatch::new(header, out.freeze()).map_err(corrupt)?],
            len,
            producers: Vec::new(),
            committed_at: None,
        };
        st.txns.sequenced_marker(pid, epoch, marker.commit, offset);
        // The marker's epoch is the producer's here from now on (as the
        // metadata applies it with the commit): a fenced instance's later
        // batches are refused.
        st.producers.fence(pid.0, epoch.0);
        st.leo = offset + 1;
        let (tx, rx) = oneshot::channel();
        st.unflushed_bytes += batches.len;
        let queued = st.unflushed_bytes;
        st.unflushed.push(Pending {
            batches,
            waiter: Some(tx),
            span: tracing::Span::current(),
            held,
        });
        Ok(MarkerAppended::New(rx, queued))
    }

    /// Takes the queue for a flush (at the epoch it was sequenced under):
    /// produces in order, up to `max_bytes`; the rest waits for the next
    /// flush. With `at_least_one`, a first produce larger than `max_bytes`
    /// is taken alone (it could never fit otherwise). Earlier flushes of
    /// this partition may still be in flight: the flusher commits their
    /// ranges first.
    pub(crate) fn take_unflushed(
        &self,
        max_bytes: usize,
        at_least_one: bool,
    ) -> Option<(u64, Vec<Pending>)> {
        let mut st = self.lock();
        if st.unflushed.is_empty() || st.status == Status::Gone {
            return None;
        }
        let mut n = 0;
        let mut bytes = 0usize;
        for p in &st.unflushed {
            let len = p.batches.len;
            if bytes.saturating_add(len) > max_bytes && (n > 0 || !at_least_one) {
                break;
            }
            n += 1;
            bytes = bytes.saturating_add(len);
        }
        if n == 0 {
            return None;
        }
        st.in_flight += 1;
        st.unflushed_bytes = st.unflushed_bytes.saturating_sub(bytes);
        let taken = if n == st.unflushed.len() {
            std::mem::take(&mut st.unflushed)
        } else {
            st.unflushed.drain(..n).collect()
        };
        Some((st.epoch, taken))
    }

    /// Gives the tail's batches that have held their request for
    /// [`TAIL_DETACH_AFTER`] buffers of their own (for a partition that
    /// no longer commits anything).
    pub(crate) fn detach_old_tail(&self) {
        self.lock().detach_old(std::time::Instant::now());
    }

    /// Bytes queued and not yet taken by a flush.
    #[cfg(test)]
    pub(crate) fn unflushed_bytes(&self) -> usize {
        self.lock().unflushed_bytes
    }

    /// The flush committed these batches at `range`.
    pub(crate) fn committed(&self, pending: Vec<Pending>, range: StoredRange, tail_budget: usize) {
        let hw = range.last_offset + 1;
        let mut waiters = Vec::new();
        {
            let mut st = self.lock();
            st.in_flight = st.in_flight.saturating_sub(1);
            st.hw = st.hw.max(hw);
            st.txns.committed_through(range.last_offset);
            st.index.push(range);
            let now = std::time::Instant::now();
            for p in pending {
                let mut batches = p.batches;
                batches.committed_at = Some(now);
                st.tail_bytes += batches.len;
                st.tail.push_back(batches);
                waiters.extend(p.waiter);
            }
            while st.tail_bytes > tail_budget && st.tail.len() > 1 {
                st.pop_tail();
            }
            st.detach_old(now);
        }
        self.publish_hw(hw);
        for w in waiters {
            let _ = w.send(Ok(()));
        }
    }

    /// The flush failed for good for this partition (it moved, or its
    /// topic is gone): the log is no longer ours; these batches, everything
    /// queued, and the ranges of later flushes still in flight (see
    /// [`PartitionLog::flush_failure`]) fail with `why`.
    pub(crate) fn abandon(&self, pending: Vec<Pending>, why: &BrokerError) {
        {
            let mut st = self.lock();
            st.in_flight = st.in_flight.saturating_sub(1);
            st.flush_failed.get_or_insert_with(|| why.clone());
        }
        self.stop(pending, why);
    }

    /// Why an earlier flush failed this partition for good, if one did.
    pub(crate) fn flush_failure(&self) -> Option<BrokerError> {
        self.lock().flush_failed.clone()
    }

    /// Fails `pending` and everything queued, and marks the log gone.
    fn stop(&self, pending: Vec<Pending>, why: &BrokerError) {
        let mut waiters: Vec<Waiter> = pending.into_iter().filter_map(|p| p.waiter).collect();
        {
            let mut st = self.lock();
            st.status = Status::Gone;
            waiters.extend(st.unflushed.drain(..).filter_map(|p| p.waiter));
            st.unflushed_bytes = 0;
        }
        for w in waiters {
            let _ = w.send(Err(why.clone()));
        }
        // Wake long polls so that they see the partition is gone.
        self.hw_tx.send_modify(|_| {});
    }

    /// The flush could not take these batches (they were never written):
    /// they fail, and so does everything queued after them, since their
    /// offsets follow; the log end goes back to where they started (the
    /// end of the ranges committed or still in flight before them) and the
    /// partition stays ours and flushable.
    pub(crate) fn roll_back(&self, pending: Vec<Pending>, why: &BrokerError) {
        let from = pending.first().map(|p| p.batches.first_offset);
        let producers_of = |ps: &[Pending]| -> Vec<ProducerId> {
            ps.iter()
                .flat_map(|p| p.batches.producers.iter())
                .map(|b| ProducerId(b.producer_id))
                .collect()
        };
        let mut rolled = producers_of(&pending);
        let mut waiters: Vec<Waiter> = pending.into_iter().filter_map(|p| p.waiter).collect();
        {
            let mut st = self.lock();
            st.in_flight = st.in_flight.saturating_sub(1);
            rolled.extend(producers_of(&st.unflushed));
            waiters.extend(st.unflushed.drain(..).filter_map(|p| p.waiter));
            st.unflushed_bytes = 0;
            let end = from.unwrap_or(st.hw).max(st.hw);
            st.leo = end;
            st.rollbacks += 1;
            st.producers.forget_from(end);
            st.txns.forget_from(end, &rolled);
        }
        for w in waiters {
            let _ = w.send(Err(why.clone()));
        }
        // A commit waiting for its batches to be durable learns they may
        // be lost (`Broker::txn_durable`).
        self.hw_tx.send_modify(|_| {});
    }

    /// Waits until the original of a retried idempotent batch, found at
    /// `first_offset..=last_offset` ([`Appended::Duplicate`]), is
    /// committed. Fails, for the client to send it again, when the
    /// partition leaves this broker, or when a flush was rolled back since
    /// the duplicate was found: the original may have been in it, its
    /// offsets are then given to later batches, and answering with them
    /// would acknowledge a record that is not stored (a retry finds its
    /// sequence expected again, or committed if the original survived).
    pub(crate) async fn wait_duplicate(&self, last_offset: i64, rollbacks: u64) -> Result<()> {
        let mut hw = self.subscribe_hw();
        loop {
            // First: after a rollback, later batches move the high
            // watermark past the offsets the original had.
            if self.lock().rollbacks != rollbacks {
                return Err(BrokerError::outcome_unknown(format!(
                    "a flush of {} was rolled back while its first copy was being stored",
                    self.key
                )));
            }
            if *hw.borrow_and_update() > last_offset {
                return Ok(());
            }
            // The original may still be in a flush that lands.
            if self.status() == Status::Gone {
                return Err(BrokerError::outcome_unknown(format!(
                    "{} changed hands while its first copy was being stored",
                    self.key
                )));
            }
            if hw.changed().await.is_err() {
                return Err(BrokerError::outcome_unknown(format!(
                    "{} closed while its first copy was being stored",
                    self.key
                )));
            }
        }
    }

    /// Stops the log (ownership lost or broker stopping). Ranges already
    /// handed to a flush are committed or failed by it.
    pub(crate) fn close(&self, why: &BrokerError) {
        self.stop(Vec::new(), why);
    }

    /// Checks a client's current leader epoch (`None`: no check) against
    /// the epoch this broker owns the partition at, as Kafka does for
    /// Fetch and ListOffsets: an older one is fenced (the client missed a
    /// change of owner), a newer one unknown here (this broker has not
    /// caught up with the metadata yet). Both are retriable for clients.
    pub fn check_epoch(&self, leader_epoch: Option<u64>) -> Result<()> {
        let Some(theirs) = leader_epoch else {
            return Ok(());
        };
        let ours = self.epoch();
        match theirs.cmp(&ours) {
            std::cmp::Ordering::Equal => Ok(()),
            std::cmp::Ordering::Less => Err(BrokerError::new(
                ErrorKind::FencedLeaderEpoch,
                format!(
                    "leader epoch {theirs} of {} is older than the current {ours}",
                    self.key
                ),
            )),
            std::cmp::Ordering::Greater => Err(BrokerError::new(
                ErrorKind::UnknownLeaderEpoch,
                format!(
                    "leader epoch {theirs} of {} is newer than this broker's {ours}",
                    self.key
                ),
            )),
        }
    }

    /// Decides where a fetch at `offset` reads from. A `read_committed`
    /// fetch reads only below the last stable offset and gets the aborted
    /// transactions of that range.
    pub(crate) fn plan_read(
        &self,
        offset: i64,
        max_bytes: usize,
        read_committed: bool,
    ) -> Result<(ReadPlan, ReadBounds)> {
        let st = self.lock();
        if st.status == Status::Gone {
            return Err(BrokerError::not_owner(self.key));
        }
        let (start, hw) = (st.log_start, st.hw);
        if offset < start || offset > hw {
            return Err(BrokerError::new(
                ErrorKind::OffsetOutOfRange,
                format!("offset {offset} is outside [{start}, {hw}] of {}", self.key),
            ));
        }
        let lso = st.txns.last_stable_offset(hw);
        let until = if read_committed { lso } else { hw };
        let mut bounds = ReadBounds {
            log_start: start,
            hw,
            lso,
            aborted: Vec::new(),
        };
        if offset >= until {
            return Ok((ReadPlan::Empty, bounds));
        }
        if read_committed {
            bounds.aborted = st.txns.aborted_in(offset, until - 1);
        }
        if let Some(front) = st.tail.front()
            && front.first_offset <= offset
        {
            let mut out = Vec::new();
            let mut total = 0usize;
            for b in st.tail.iter().filter(|b| b.last_offset >= offset) {
                // Whole produce requests are kept together; the budget is
                // honoured per batch.
                for v in &b.stored {
                    if v.last_offset() < offset {
                        continue;
                    }
                    if v.base_offset() >= until || (total > 0 && total + v.len() > max_bytes) {
                        return Ok((ReadPlan::Memory(out), bounds));
                    }
                    total += v.len();
                    out.extend(v.pieces().into_iter().filter(|p| !p.is_empty()).cloned());
                }
            }
            return Ok((ReadPlan::Memory(out), bounds));
        }
        // The ranges from the one holding `offset`, up to the budget.
        let i = st.index.partition_point(|r| r.last_offset < offset);
        let mut ranges = Vec::new();
        let mut total = 0u64;
        for r in st.index[i..].iter().take_while(|r| r.first_offset < until) {
            if !ranges.is_empty() && total + r.byte_len > max_bytes as u64 {
                break;
            }
            total += r.byte_len;
            ranges.push(r.clone());
            if r.is_segment() {
                break; // a segment read brings its own budget
            }
        }
        Ok((ReadPlan::Store(ranges), bounds))
    }

    /// Where a reader that has just read `last` from the store reads next,
    /// as byte ranges of objects: the rest of `last` and the WAL ranges
    /// after it, about `bytes` of them (adjacent ranges of one object
    /// merged), up to the next segment, whose first `bytes` end the list.
    /// Nothing after a segment: its reader reads ahead in it.
    pub(crate) fn read_ahead_of(
        &self,
        last: &StoredRange,
        bytes: u64,
    ) -> Vec<(ObjectRef, std::ops::Range<u64>)> {
        let st = self.lock();
        let i = st
            .index
            .partition_point(|r| r.last_offset < last.first_offset);
        let mut rest = st.index[i..].iter();
        let mut out: Vec<(ObjectRef, std::ops::Range<u64>)> = Vec::new();
        match rest.next() {
            Some(r) if r.segment.is_none() => {
                out.push((r.object.clone(), r.byte_start..r.byte_start + r.byte_len))
            }
            // A segment's reader reads ahead in it.
            _ => return out,
        }
        let mut ahead = 0u64;
        for r in rest {
            if ahead >= bytes {
                break;
            }
            if let Some(seg) = &r.segment {
                out.push((seg.log.clone(), 0..bytes - ahead));
                break;
            }
            ahead += r.byte_len;
            let range = r.byte_start..r.byte_start + r.byte_len;
            match out.last_mut() {
                Some((obj, prev)) if *obj == r.object && prev.end == range.start => {
                    prev.end = range.end
                }
                _ => out.push((r.object.clone(), range)),
            }
        }
        out
    }

    /// The last stable offset now.
    pub fn last_stable_offset(&self) -> i64 {
        let st = self.lock();
        st.txns.last_stable_offset(st.hw)
    }

    /// The high watermark minus the last stable offset now: what open
    /// transactions hold back from read_committed readers.
    pub fn lso_lag(&self) -> i64 {
        let st = self.lock();
        st.hw - st.txns.last_stable_offset(st.hw)
    }
}

#[cfg(test)]
mod tests {
    use floe_storage::TopicId;

    use super::*;

    fn log_at(epoch: u64) -> PartitionLog {
        PartitionLog::new(
            PartitionKey::new(TopicId(uuid::Uuid::nil()), 0),
            "t".into(),
            epoch,
            LogConfig::default(),
            Committed::default(),
        )
    }

    fn request(batches: &[(usize, i64)]) -> Bytes {
        use floe_storage::batch::Compression;
        use floe_storage::records::{BatchBuilder, RecordSpec};
        let mut out = BytesMut::new();
        for &(n, ts) in batches {
            let mut b = BatchBuilder::new(0, ts);
            for i in 0..n {
                b.push(RecordSpec::new(None, Some(vec![i as u8; 100]), i as i64));
            }
            out.extend_from_slice(&b.build(Compression::None).unwrap());
        }
        out.freeze()
    }

    fn appended(log: &PartitionLog, records: &Bytes, now_ms: i64) -> Batches {
        match log
            .append(
                records,
                false,
                now_ms,
                crate::partitions::backlog::Held::untracked(),
                false,
            )
            .unwrap()
        {
            Appended::New(b, _, _) => b,
            other => panic!("{other:?}"),
        }
    }

    fn joined(b: &Batches) -> Vec<u8> {
        b.stored.iter().flat_map(SplitBatch::to_vec).collect()
    }

    fn within(piece: &[u8], buf: &[u8]) -> bool {
        let r = buf.as_ptr_range();
        r.contains(&piece.as_ptr()) && piece.as_ptr_range().end <= r.end
    }

    #[test]
    fn an_append_patches_the_headers_and_keeps_the_clients_records_where_they_are() {
        let log = log_at(7);
        log.lock().leo = 40;
        let req = request(&[(3, 1_000), (5, 2_000)]);
        let b = appended(&log, &req, 9_999);
        assert_eq!((b.first_offset, b.last_offset), (40, 47));
        assert_eq!(b.len, req.len());
        assert_eq!(b.stored.len(), 2);
        let whole = joined(&b);
        let mut expect_base = 40;
        for item in floe_storage::batch::BatchIter::new(&whole, usize::MAX) {
            let (_, v) = item.unwrap();
            assert_eq!(v.base_offset(), expect_base);
            assert_eq!(v.partition_leader_epoch(), 7);
            v.verify_crc().expect("the client's CRC still holds");
            expect_base = v.next_offset();
        }
        assert_eq!(expect_base, 48);
        for s in &b.stored {
            let [header, body] = s.pieces();
            assert_eq!(header.len(), HEADER_LEN);
            assert!(within(body, &req), "the records are not copied");
            assert!(!within(header, &req), "the header is a copy");
            let one = s.to_vec();
            let v = BatchView::parse(&one, usize::MAX).unwrap();
            assert_eq!(s.whole_crc(), v.whole_crc());
        }
        assert_eq!(
            &req[..8],
            &0i64.to_be_bytes(),
            "the client's base offset is left alone"
        );
    }

    #[test]
    fn log_append_time_rewrites_the_split_header_and_its_crc() {
        let cfg = LogConfig {
            timestamp_type: TimestampType::LogAppendTime,
            ..LogConfig::default()
        };
        let log = PartitionLog::new(
            PartitionKey::new(TopicId(uuid::Uuid::nil()), 0),
            "t".into(),
            1,
            cfg,
            Committed::default(),
        );
        let req = request(&[(4, 1_000)]);
        let b = appended(&log, &req, 123_456);
        assert_eq!(b.max_timestamp, 123_456);
        let whole = joined(&b);
        let v = BatchView::parse(&whole, usize::MAX).unwrap();
        assert_eq!(
            v.timestamp_type(),
            floe_storage::batch::TimestampType::LogAppendTime
        );
        assert_eq!(v.max_timestamp(), 123_456);
        v.verify_crc()
            .expect("the CRC is rewritten over the new header");
        assert!(within(b.stored[0].pieces()[1], &req));
    }

    /// A producer's retry that comes while its first copy is in a flush
    /// waits for that flush. When the flush is rolled back, the first copy
    /// is not stored and its offsets go to the next batches; the retry
    /// must not be answered with those offsets (it was: it waited for the
    /// high watermark to pass them, which the next batches' commit did),
    /// but fail, and sent again it is taken as new.
    #[tokio::test]
    async fn a_retry_of_a_rolled_back_batch_is_not_answered_with_its_offsets() {
        use floe_storage::batch::Compression;
        use floe_storage::records::{BatchBuilder, RecordSpec};
        let idempotent = |seq: i32| {
            let mut b = BatchBuilder::new(0, 1).producer(7, 0, seq, false);
            b.push(RecordSpec::new(None, Some(b"a".to_vec()), 0));
            b.push(RecordSpec::new(None, Some(b"b".to_vec()), 1));
            b.build(Compression::None).unwrap()
        };
        let append = |log: &PartitionLog, records: &Bytes| {
            log.append(
                records,
                true,
                1,
                crate::partitions::backlog::Held::untracked(),
                false,
            )
            .unwrap()
        };
        let log = log_at(1);
        assert!(matches!(append(&log, &idempotent(0)), Appended::New(..)));
        let (_, flushing) = log.take_unflushed(usize::MAX, true).unwrap();
        let Appended::Duplicate {
            first_offset,
            last_offset,
            rollbacks,
        } = append(&log, &idempotent(0))
        else {
            panic!("the retry is a duplicate of the batch in flight");
        };
        assert_eq!((first_offset, last_offset), (0, 1));
        // The flush fails; another client's batch takes offsets 0 and 1
        // and is committed.
        log.roll_back(
            flushing,
            &BrokerError::new(ErrorKind::Storage, "flush failed"),
        );
        let other = appended(&log, &request(&[(2, 1)]), 1);
        assert_eq!((other.first_offset, other.last_offset), (0, 1));
        let (_, next) = log.take_unflushed(usize::MAX, true).unwrap();
        log.committed(next, wal_range((0, 1), &obj("w", 100), 0..100), usize::MAX);
        assert_eq!(
            log.offsets().1,
            2,
            "the high watermark passed the original's offsets"
        );
        let e = log
            .wait_duplicate(last_offset, rollbacks)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutcomeUnknown, "{e}");
        // Sent again, the batch is new: stored after the other client's.
        match append(&log, &idempotent(0)) {
            Appended::New(b, ..) => assert_eq!((b.first_offset, b.last_offset), (2, 3)),
            other => panic!("{other:?}"),
        }
    }

    /// Without a rollback, the retry is answered once the original is
    /// committed.
    #[tokio::test]
    async fn a_retry_is_answered_once_its_original_is_committed() {
        use floe_storage::batch::Compression;
        use floe_storage::records::{BatchBuilder, RecordSpec};
        let mut b = BatchBuilder::new(0, 1).producer(8, 0, 0, false);
        b.push(RecordSpec::new(None, Some(b"a".to_vec()), 0));
        let batch = b.build(Compression::None).unwrap();
        let append = |log: &PartitionLog| {
            log.append(
                &batch,
                true,
                1,
                crate::partitions::backlog::Held::untracked(),
                false,
            )
            .unwrap()
        };
        let log = log_at(1);
        assert!(matches!(append(&log), Appended::New(..)));
        let (_, flushing) = log.take_unflushed(usize::MAX, true).unwrap();
        let Appended::Duplicate {
            last_offset,
            rollbacks,
            ..
        } = append(&log)
        else {
            panic!("a duplicate");
        };
        log.committed(
            flushing,
            wal_range((0, 0), &obj("w", 10), 0..10),
            usize::MAX,
        );
        log.wait_duplicate(last_offset, rollbacks).await.unwrap();
    }

    fn obj(key: &str, size: u64) -> ObjectRef {
        ObjectRef {
            endpoint: floe_storage::EndpointId::new("e"),
            key: floe_storage::ObjectKey::new(key),
            size,
        }
    }

    fn wal_range(offsets: (i64, i64), o: &ObjectRef, bytes: std::ops::Range<u64>) -> StoredRange {
        StoredRange {
            first_offset: offsets.0,
            last_offset: offsets.1,
            max_timestamp: 0,
            object: o.clone(),
            object_id: 0,
            byte_start: bytes.start,
            byte_len: bytes.end - bytes.start,
            segment: None,
            committed_ms: 0,
        }
    }

    /// What a fetch that read `last` asks to be read ahead: the rest of the
    /// log's ranges after it, neighbours in one object merged, up to the
    /// byte budget; a segment on the way is asked for from its start (its
    /// own reader reads ahead inside it), and one read from asks nothing.
    #[test]
    fn read_ahead_follows_the_ranges_after_the_one_read_into_a_segment() {
        let log = log_at(1);
        let (a, b) = (obj("wal/a.wal", 1_000), obj("wal/b.wal", 1_000));
        let seg_log = obj("seg/30.log", 10_000);
        let segment = floe_storage::segment::SegmentMeta {
            base_offset: floe_storage::Offset(30),
            last_offset: floe_storage::Offset(99),
            max_timestamp: 0,
            log: seg_log.clone(),
            index: obj("seg/30.index", 10),
            timeindex: obj("seg/30.timeindex", 10),
        };
        let mut in_segment = wal_range((30, 99), &seg_log, 0..10_000);
        in_segment.segment = Some(std::sync::Arc::new(segment));
        let first = wal_range((0, 9), &a, 0..100);
        log.lock().index = vec![
            first.clone(),
            wal_range((10, 19), &a, 100..300),
            wal_range((20, 29), &b, 50..250),
            in_segment.clone(),
        ];
        // 200 + 200 bytes ahead pass a budget of 350: the segment is not reached.
        assert_eq!(
            log.read_ahead_of(&first, 350),
            vec![(a.clone(), 0..300), (b.clone(), 50..250)]
        );
        // With 500, what is left of the budget is asked of the segment's log.
        assert_eq!(
            log.read_ahead_of(&first, 500),
            vec![(a.clone(), 0..300), (b.clone(), 50..250), (seg_log, 0..100)]
        );
        assert!(log.read_ahead_of(&in_segment, 500).is_empty());
    }

    #[test]
    fn tail_batches_let_go_of_their_request_once_old() {
        let log = log_at(1);
        let req = request(&[(2, 0)]);
        let (old, young) = (appended(&log, &req, 0), appended(&log, &req, 0));
        let now = std::time::Instant::now();
        {
            let mut st = log.lock();
            for (mut b, at) in [(old, now - TAIL_DETACH_AFTER * 2), (young, now)] {
                b.committed_at = Some(at);
                st.tail_bytes += b.len;
                st.tail.push_back(b);
            }
        }
        log.detach_old_tail();
        let st = log.lock();
        assert_eq!(st.tail_detached, 1);
        let [_, old_body] = st.tail[0].stored[0].pieces();
        let [_, young_body] = st.tail[1].stored[0].pieces();
        assert!(!within(old_body, &req), "the old batch holds a copy");
        assert!(within(young_body, &req), "the young one still the request");
        assert_eq!(joined(&st.tail[0])[HEADER_LEN..], req[HEADER_LEN..]);
    }

    #[test]
    fn a_fetch_from_the_tail_gets_each_batch_as_its_pieces() {
        let log = log_at(1);
        let req = request(&[(2, 0), (3, 0)]);
        let b = appended(&log, &req, 0);
        {
            let mut st = log.lock();
            st.hw = 5;
            st.tail_bytes += b.len;
            st.tail.push_back(b);
        }
        let (plan, _) = log.plan_read(2, usize::MAX, false).unwrap();
        let ReadPlan::Memory(pieces) = plan else {
            panic!("{plan:?}")
        };
        assert_eq!(pieces.len(), 2, "the second batch: header and records");
        let one = pieces.concat();
        let v = BatchView::parse(&one, usize::MAX).unwrap();
        assert_eq!((v.base_offset(), v.last_offset()), (2, 4));
        v.verify_crc().unwrap();
    }

    #[test]
    fn a_client_leader_epoch_is_checked_against_the_owners() {
        let log = log_at(5);
        assert!(log.check_epoch(None).is_ok(), "no epoch: no check");
        assert!(log.check_epoch(Some(5)).is_ok());
        let older = log.check_epoch(Some(4)).unwrap_err();
        assert_eq!(older.kind(), ErrorKind::FencedLeaderEpoch, "{older}");
        let newer = log.check_epoch(Some(6)).unwrap_err();
        assert_eq!(newer.kind(), ErrorKind::UnknownLeaderEpoch, "{newer}");
    }

    #[test]
    fn a_delayed_batch_is_taken_from_admission_only_and_deduplicated_like_its_batch() {
        use floe_storage::batch::Compression;
        use floe_storage::delayed::{DelayedRecord, Producer, delayed_batch};
        let log = PartitionLog::new(
            PartitionKey::new(TopicId(uuid::Uuid::nil()), 0),
            "t".into(),
            1,
            LogConfig::default(),
            Committed::default(),
        );
        let r = DelayedRecord {
            due_ms: 99,
            timestamp: 1,
            key: None,
            value: None,
            headers: Vec::new(),
        };
        let p = Producer {
            id: 5,
            epoch: 0,
            base_sequence: 0,
        };
        let b = delayed_batch(p, 1, &[r.clone(), r], Compression::None).unwrap();
        let append = |delayed| {
            log.append(
                &b,
                false,
                1,
                crate::partitions::backlog::Held::untracked(),
                delayed,
            )
        };
        // As a client's produce: refused, as any control batch.
        let e = append(false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidRecord);
        match append(true).unwrap() {
            Appended::New(batches, ..) => {
                assert_eq!((batches.first_offset, batches.last_offset), (0, 1));
            }
            other => panic!("{other:?}"),
        }
        // The producer's retry of the same sequence is a duplicate.
        match append(true).unwrap() {
            Appended::Duplicate {
                first_offset,
                last_offset,
                ..
            } => assert_eq!((first_offset, last_offset), (0, 1)),
            other => panic!("{other:?}"),
        }
        // A transactional control batch (a marker's shape) never is taken.
        let mut m = floe_storage::records::BatchBuilder::new(0, 1)
            .producer(6, 0, -1, true)
            .control();
        m.push(floe_storage::records::RecordSpec::new(None, None, 0));
        let m = m.build(Compression::None).unwrap();
        let e = log
            .append(
                &m,
                false,
                1,
                crate::partitions::backlog::Held::untracked(),
                true,
            )
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidRecord);
    }
}
