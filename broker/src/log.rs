//! One partition's log on its owner: sequencing, the unflushed queue, the
//! committed tail kept in memory, and the committed index (where every
//! committed range lives in the object store).

use std::collections::VecDeque;
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use floe_storage::batch::{self, BatchIter, BatchView};
use floe_storage::{ObjectRef, PartitionKey};
use tokio::sync::{oneshot, watch};

use crate::config::{LogConfig, TimestampType};
use crate::error::{BrokerError, ErrorKind, Result};
use crate::producer::{self, Check, ProducerBatch, Producers};

/// Batches with their offsets assigned.
#[derive(Debug, Clone)]
pub struct Batches {
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub bytes: Bytes,
    /// The idempotent batches among them.
    pub producers: Vec<ProducerBatch>,
}

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
    /// A retried idempotent batch that is already in the log, at these offsets.
    Duplicate { first_offset: i64, last_offset: i64 },
}

#[derive(Debug)]
pub(crate) struct Pending {
    pub batches: Batches,
    pub waiter: Option<Waiter>,
    /// Its bytes in the broker's backlog, given back when this is dropped
    /// (kept only for that).
    #[allow(dead_code)]
    pub held: crate::backlog::Held,
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
    pub unflushed: Vec<Pending>,
    pub unflushed_bytes: usize,
    /// Flushes holding batches of this partition that are not yet
    /// committed (several when WAL objects are written concurrently; their
    /// ranges are committed in offset order).
    pub in_flight: usize,
    /// Why a flush failed this partition for good (moved, topic gone): the
    /// ranges still in flight behind it fail the same way.
    pub flush_failed: Option<BrokerError>,
    pub tail: VecDeque<Batches>,
    pub tail_bytes: usize,
    pub index: Vec<StoredRange>,
    pub producers: Producers,
}

/// Where a fetch finds its data, decided under the lock, read outside it.
#[derive(Debug)]
pub(crate) enum ReadPlan {
    Empty,
    Memory(Vec<Bytes>),
    Store(Vec<StoredRange>),
}

/// One owned partition.
#[derive(Debug)]
pub struct PartitionLog {
    pub key: PartitionKey,
    pub topic: String,
    pub(crate) state: Mutex<LogState>,
    hw_tx: watch::Sender<i64>,
}

/// What the metadata holds of a partition when a broker takes it over.
#[derive(Debug, Default)]
pub(crate) struct Committed {
    pub log_start: i64,
    pub hw: i64,
    pub index: Vec<StoredRange>,
    pub producers: Producers,
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
                unflushed: Vec::new(),
                unflushed_bytes: 0,
                in_flight: 0,
                flush_failed: None,
                tail: VecDeque::new(),
                tail_bytes: 0,
                index,
                producers,
            }),
            hw_tx,
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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
    /// queued batches until they are committed or fail.
    pub(crate) fn append(
        &self,
        records: &[u8],
        wait: bool,
        now_ms: i64,
        held: crate::backlog::Held,
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
            if view.is_control() {
                return Err(BrokerError::new(
                    ErrorKind::InvalidRecord,
                    "clients may not produce control batches",
                ));
            }
            if view.is_transactional() {
                return Err(BrokerError::new(
                    ErrorKind::Unsupported,
                    "transactional batches are not supported yet",
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
            for &(i, pid, epoch, first, last) in &idempotent {
                match sim.check(pid, epoch, first, last)? {
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
                });
            }
        }
        let mut out = BytesMut::from(records);
        let first_offset = st.leo;
        let mut producers = Vec::new();
        let mut next = st.leo;
        let mut max_ts = -1i64;
        let epoch = i32::try_from(st.epoch).unwrap_or(i32::MAX);
        let mut at = 0usize;
        for size in sizes {
            let b = &mut out[at..at + size];
            let count = {
                let v = BatchView::parse(b, usize::MAX)
                    .map_err(|e| BrokerError::new(ErrorKind::CorruptMessage, e.to_string()))?;
                i64::from(v.last_offset_delta()) + 1
            };
            batch::set_base_offset(b, next)
                .map_err(|e| BrokerError::new(ErrorKind::CorruptMessage, e.to_string()))?;
            batch::set_partition_leader_epoch(b, epoch)
                .map_err(|e| BrokerError::new(ErrorKind::CorruptMessage, e.to_string()))?;
            if st.config.timestamp_type == TimestampType::LogAppendTime {
                batch::set_log_append_time(b, now_ms)
                    .map_err(|e| BrokerError::new(ErrorKind::CorruptMessage, e.to_string()))?;
            }
            let v = BatchView::parse(b, usize::MAX)
                .map_err(|e| BrokerError::new(ErrorKind::CorruptMessage, e.to_string()))?;
            max_ts = max_ts.max(v.max_timestamp());
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
            next = next.checked_add(count).ok_or_else(|| {
                BrokerError::new(ErrorKind::InvalidRecord, "offsets would overflow")
            })?;
            at += size;
        }
        for p in &producers {
            st.producers
                .record_at(*p, u64::try_from(now_ms).unwrap_or(0));
        }
        let batches = Batches {
            first_offset,
            last_offset: next - 1,
            max_timestamp: max_ts,
            bytes: out.freeze(),
            producers,
        };
        st.leo = next;
        let (waiter, rx) = if wait {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        st.unflushed_bytes += batches.bytes.len();
        let queued = st.unflushed_bytes;
        st.unflushed.push(Pending {
            batches: batches.clone(),
            waiter,
            held,
        });
        Ok(Appended::New(batches, rx, queued))
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
            let len = p.batches.bytes.len();
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
            st.index.push(range);
            for p in pending {
                st.tail_bytes += p.batches.bytes.len();
                st.tail.push_back(p.batches);
                waiters.extend(p.waiter);
            }
            while st.tail_bytes > tail_budget && st.tail.len() > 1 {
                if let Some(b) = st.tail.pop_front() {
                    st.tail_bytes -= b.bytes.len();
                }
            }
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
        let mut waiters: Vec<Waiter> = pending.into_iter().filter_map(|p| p.waiter).collect();
        {
            let mut st = self.lock();
            st.in_flight = st.in_flight.saturating_sub(1);
            waiters.extend(st.unflushed.drain(..).filter_map(|p| p.waiter));
            st.unflushed_bytes = 0;
            let end = from.unwrap_or(st.hw).max(st.hw);
            st.leo = end;
            st.producers.forget_from(end);
        }
        for w in waiters {
            let _ = w.send(Err(why.clone()));
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

    /// Decides where a fetch at `offset` reads from.
    pub(crate) fn plan_read(&self, offset: i64, max_bytes: usize) -> Result<(ReadPlan, i64, i64)> {
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
        if offset == hw {
            return Ok((ReadPlan::Empty, start, hw));
        }
        if let Some(front) = st.tail.front()
            && front.first_offset <= offset
        {
            let mut out = Vec::new();
            let mut total = 0usize;
            for b in st.tail.iter().filter(|b| b.last_offset >= offset) {
                // Whole produce requests are kept together; split them
                // into batches so the budget is honoured per batch.
                for item in BatchIter::new(&b.bytes, usize::MAX) {
                    let Ok((pos, v)) = item else { break };
                    if v.last_offset() < offset {
                        continue;
                    }
                    if total > 0 && total + v.size() > max_bytes {
                        return Ok((ReadPlan::Memory(out), start, hw));
                    }
                    total += v.size();
                    out.push(b.bytes.slice(pos..pos + v.size()));
                }
            }
            return Ok((ReadPlan::Memory(out), start, hw));
        }
        // The ranges from the one holding `offset`, up to the budget.
        let i = st.index.partition_point(|r| r.last_offset < offset);
        let mut ranges = Vec::new();
        let mut total = 0u64;
        for r in &st.index[i..] {
            if !ranges.is_empty() && total + r.byte_len > max_bytes as u64 {
                break;
            }
            total += r.byte_len;
            ranges.push(r.clone());
            if r.is_segment() {
                break; // a segment read brings its own budget
            }
        }
        Ok((ReadPlan::Store(ranges), start, hw))
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
}
