//! Reading an owned partition: fetches (whole batches, at an isolation
//! level), offset lookups, and moving the log start.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use floe_storage::batch::BatchIter;
use floe_storage::committed::{Batches, Wanted, read_batches};
use floe_storage::records::{DecodeLimits, RecordStream};
use floe_storage::{Offset, PartitionKey, RangeRead};

use crate::error::{BrokerError, ErrorKind, Result};
use crate::partitions::log::{PartitionLog, ReadPlan, Status, StoredRange};

use super::Partitions;

/// Batch bytes a timestamp lookup reads at a time.
const SCAN_STEP_BYTES: usize = 1024 * 1024;

/// How long a read waits for records answered before they were durable to
/// be committed ([`Partitions::count_answered`]).
const ANSWERED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// When a read of committed records last logged a failure (seconds since
/// the epoch), and how many it held back since: a consumer stalled on an
/// object the store no longer has asks again every few hundred ms.
static READ_FAILURE_LOGGED: AtomicU64 = AtomicU64::new(0);
static READ_FAILURES_HELD: AtomicU64 = AtomicU64::new(0);

/// Logs a failed read of a committed range, at most once every 10 s. An
/// object that is gone (the store acknowledged a write it did not keep, or
/// it was deleted by hand) is an error: its records cannot be served, and
/// readers stop before them instead of skipping them.
fn log_read_failure(key: &PartitionKey, r: &StoredRange, e: &BrokerError) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let last = READ_FAILURE_LOGGED.load(Ordering::Relaxed);
    if now < last + 10
        || READ_FAILURE_LOGGED
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        READ_FAILURES_HELD.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let held = READ_FAILURES_HELD.swap(0, Ordering::Relaxed);
    let object = r
        .segment
        .as_ref()
        .map(|s| s.log.to_string())
        .unwrap_or_else(|| r.object.to_string());
    if e.store_kind() == Some(floe_storage::ErrorKind::NotFound) {
        tracing::error!(partition = %key, object, first_offset = r.first_offset, last_offset = r.last_offset, held_back = held, error = %e,
            "a committed object is missing from the store: its records cannot be served (readers stop before them)");
    } else {
        tracing::warn!(partition = %key, object, first_offset = r.first_offset, last_offset = r.last_offset, held_back = held, error = %e,
            "reading committed records failed; clients retry");
    }
}

/// The answer to a fetch of one partition.
#[derive(Debug, Clone, Default)]
pub struct FetchData {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// Whole batches in offset order, the first holding the fetch offset,
    /// in pieces to be sent one after the other: a batch read across two
    /// cache blocks is two pieces, not copied into one buffer.
    pub records: Vec<Bytes>,
    /// The last stable offset (the high watermark when no transaction is
    /// open); a `read_committed` fetch returns nothing at or past it.
    pub last_stable_offset: i64,
    /// For a `read_committed` fetch: the aborted transactions whose
    /// records may be among those returned (their producer and first
    /// offset tell the client which records to drop).
    pub aborted: Vec<floe_metadata::txn::AbortedTxn>,
}

impl FetchData {
    pub fn bytes(&self) -> usize {
        self.records.iter().map(Bytes::len).sum()
    }
}

/// Which offset a ListOffsets asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Earliest,
    Latest,
    MaxTimestamp,
    /// The first record with a timestamp at or after this (ms).
    Timestamp(i64),
    /// The latest offset a `read_committed` reader sees: the last stable
    /// offset.
    LastStable,
}

/// (offset, timestamp) as ListOffsets answers; offset −1 when nothing matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetAnswer {
    pub offset: i64,
    pub timestamp: i64,
}

impl Partitions {
    /// Whole batches from the one holding `offset`, up to `max_bytes` (at
    /// least one batch). With `max_wait`, waits for data beyond the high
    /// watermark until `min_bytes` are there or the time is up.
    pub async fn fetch(
        &self,
        key: &PartitionKey,
        offset: i64,
        max_bytes: usize,
    ) -> Result<FetchData> {
        self.fetch_at_epoch(key, offset, max_bytes, None).await
    }

    /// [`Partitions::fetch`](crate::partitions::Partitions::fetch) for a client that knows the partition at
    /// `leader_epoch` (`None`: no check), as Fetch v9+ asks.
    pub async fn fetch_at_epoch(
        &self,
        key: &PartitionKey,
        offset: i64,
        max_bytes: usize,
        leader_epoch: Option<u64>,
    ) -> Result<FetchData> {
        self.fetch_isolated(key, offset, max_bytes, leader_epoch, false)
            .await
    }

    /// [`Partitions::fetch_at_epoch`](crate::partitions::Partitions::fetch_at_epoch) at an isolation level: `read_committed`
    /// reads only below the last stable offset and answers the aborted
    /// transactions of what it may return.
    pub async fn fetch_isolated(
        &self,
        key: &PartitionKey,
        offset: i64,
        max_bytes: usize,
        leader_epoch: Option<u64>,
        read_committed: bool,
    ) -> Result<FetchData> {
        let log = self.active_log(key)?;
        log.check_epoch(leader_epoch)?;
        if !read_committed {
            // At the end of what is durable, with records answered beyond
            // it: they are counted (and returned) once their flush lands,
            // which comes at the flusher's pace.
            self.count_answered(&log, Some(offset), false).await;
        }
        let (mut plan, mut bounds) = log.plan_read(offset, max_bytes, read_committed)?;
        let records = loop {
            let until = if read_committed {
                bounds.lso
            } else {
                bounds.hw
            };
            match plan {
                ReadPlan::Empty => break Vec::new(),
                ReadPlan::Memory(b) => break b,
                ReadPlan::Store(ranges) => {
                    let from = ranges
                        .first()
                        .map_or(offset, |r| offset.max(r.first_offset));
                    let got = self
                        .read_ranges(key, &ranges, from, max_bytes, until)
                        .await?;
                    // The partition's next bytes are fetched while this
                    // answer goes out: a catch-up reader's next fetch finds
                    // them in the block cache.
                    if let Some(last) = ranges.last() {
                        for (obj, range) in
                            log.read_ahead_of(last, floe_storage::cache::READ_AHEAD_BYTES)
                        {
                            self.inner.reader.read_ahead(&obj, range);
                        }
                    }
                    // A cleaned segment has no batch for offsets compacted
                    // away at its end: the answer starts after it.
                    match ranges.last() {
                        Some(r) if got.is_empty() && r.last_offset + 1 < until => {
                            // The answer is the later plan's: its bounds (the
                            // LSO may have moved on), and the aborted
                            // transactions of both ranges.
                            let (next, later) =
                                log.plan_read(r.last_offset + 1, max_bytes, read_committed)?;
                            plan = next;
                            let mut aborted = std::mem::take(&mut bounds.aborted);
                            for a in later.aborted.iter() {
                                if !aborted.contains(a) {
                                    aborted.push(*a);
                                }
                            }
                            bounds = later;
                            bounds.aborted = aborted;
                        }
                        _ => break got,
                    }
                }
            }
        };
        Ok(FetchData {
            high_watermark: bounds.hw,
            log_start_offset: bounds.log_start,
            records,
            last_stable_offset: bounds.lso,
            aborted: bounds.aborted,
        })
    }

    /// Waits until the high watermark counts the records a producer of
    /// `log` was answered for before they were durable (a transaction's
    /// batches, `acks` 0 or 1): after an answer, a read counts what was
    /// answered, as in Kafka an answered `acks=all` produce is below the
    /// high watermark. A read `from` an offset waits only if it is at the
    /// high watermark or past it. `flush_now` asks for their flush at once instead of
    /// at the flusher's pace. Bounded by [`ANSWERED_WAIT`]: a flush that
    /// keeps failing is retried in new objects meanwhile, and a partition
    /// that moves ends the wait.
    async fn count_answered(&self, log: &PartitionLog, from: Option<i64>, flush_now: bool) {
        let Some(end) = log.answered_uncounted(from) else {
            return;
        };
        if flush_now {
            self.flush_at_once();
        }
        let until = tokio::time::Instant::now() + ANSWERED_WAIT;
        let mut rx = log.subscribe_hw();
        loop {
            if *rx.borrow_and_update() >= end || log.status() != Status::Active {
                return;
            }
            if tokio::time::timeout_at(until, rx.changed()).await.is_err() {
                tracing::warn!(partition = %log.key, end, "records answered before they were durable are not committed yet; answering without them");
                return;
            }
        }
    }

    /// Waits until the partition's high watermark passes `offset` or `until`.
    pub async fn wait_for_data(
        &self,
        key: &PartitionKey,
        offset: i64,
        until: tokio::time::Instant,
    ) {
        let Some(log) = self.log(key) else { return };
        let mut rx = log.subscribe_hw();
        loop {
            if *rx.borrow_and_update() > offset || log.status() == Status::Gone {
                return;
            }
            if tokio::time::timeout_at(until, rx.changed()).await.is_err() {
                return;
            }
        }
    }

    async fn read_ranges(
        &self,
        key: &PartitionKey,
        ranges: &[StoredRange],
        offset: i64,
        max_bytes: usize,
        until: i64,
    ) -> Result<Vec<Bytes>> {
        let wanted = Wanted {
            from: offset,
            until,
            max_bytes: max_bytes as u64,
        };
        let mut out = Batches::pieces();
        for r in ranges {
            if out.stopped.is_some() {
                break;
            }
            // The whole ranges read so far: a range that fails ends the
            // read there, and what came before it is answered (as a fetch
            // that reached its size would be); the next fetch starts at the
            // range that failed and gets its error.
            let whole = out.batches.len();
            let res = self.read_range(r, offset, &wanted, &mut out).await;
            if let Err(e) = res {
                log_read_failure(key, r, &e);
                if whole == 0 {
                    return Err(e);
                }
                out.batches.truncate(whole);
                break;
            }
        }
        Ok(out.batches)
    }

    async fn read_range(
        &self,
        r: &StoredRange,
        offset: i64,
        wanted: &Wanted,
        out: &mut Batches,
    ) -> Result<()> {
        if let Some(seg) = &r.segment {
            // A segment's index finds the batch holding `offset`.
            let from = offset.max(r.first_offset);
            let budget = wanted.max_bytes.saturating_sub(out.bytes).max(1);
            if let Some(read) = self.inner.segments.read(seg, Offset(from), budget).await? {
                out.take(&read.bytes, wanted).map_err(|e| {
                    BrokerError::new(ErrorKind::CorruptMessage, format!("{}: {e}", seg.log))
                })?;
            }
            return Ok(());
        }
        let bytes = r.byte_start..r.byte_start + r.byte_len;
        read_batches(&*self.inner.reader, &r.object, bytes, wanted, out).await?;
        Ok(())
    }

    /// [`Partitions::list_offset`](crate::partitions::Partitions::list_offset) and the partition's epoch (-1 if unknown),
    /// as ListOffsets answers them.
    /// `leader_epoch` (the client's, `None`: no check) is checked first.
    pub async fn list_offset_and_epoch(
        &self,
        key: &PartitionKey,
        spec: OffsetSpec,
        leader_epoch: Option<u64>,
    ) -> Result<(OffsetAnswer, i64)> {
        self.active_log(key)?.check_epoch(leader_epoch)?;
        let a = self.list_offset(key, spec).await?;
        Ok((a, self.log(key).map(|l| l.epoch() as i64).unwrap_or(-1)))
    }

    /// ListOffsets for one partition. Every record a producer was answered
    /// for is counted: the high watermark and the timestamp lookups wait
    /// for the flush of records answered before they were durable (asked
    /// for at once).
    pub async fn list_offset(&self, key: &PartitionKey, spec: OffsetSpec) -> Result<OffsetAnswer> {
        let log = self.active_log(key)?;
        if !matches!(spec, OffsetSpec::Earliest | OffsetSpec::LastStable) {
            self.count_answered(&log, None, true).await;
        }
        let (log_start, hw, _) = log.offsets();
        match spec {
            OffsetSpec::Earliest => Ok(OffsetAnswer {
                offset: log_start,
                timestamp: -1,
            }),
            OffsetSpec::Latest => Ok(OffsetAnswer {
                offset: hw,
                timestamp: -1,
            }),
            OffsetSpec::LastStable => Ok(OffsetAnswer {
                offset: log.last_stable_offset(),
                timestamp: -1,
            }),
            OffsetSpec::MaxTimestamp => {
                let ranges: Vec<StoredRange> = log.lock().index.clone();
                let best = ranges
                    .iter()
                    .filter(|r| r.last_offset >= log_start)
                    .max_by_key(|r| (r.max_timestamp, std::cmp::Reverse(r.first_offset)));
                let Some(r) = best else {
                    return Ok(OffsetAnswer {
                        offset: -1,
                        timestamp: -1,
                    });
                };
                let target = r.max_timestamp;
                let mut found = None;
                self.scan_records(
                    &log.key,
                    std::slice::from_ref(r),
                    log_start,
                    hw,
                    |off, ts| {
                        if ts == target && found.is_none() {
                            found = Some(off);
                        }
                        false
                    },
                )
                .await?;
                Ok(OffsetAnswer {
                    offset: found.unwrap_or(r.last_offset),
                    timestamp: target,
                })
            }
            OffsetSpec::Timestamp(t) => {
                let ranges: Vec<StoredRange> = log
                    .lock()
                    .index
                    .iter()
                    .filter(|r| r.last_offset >= log_start && r.max_timestamp >= t)
                    .cloned()
                    .collect();
                let mut found = None;
                self.scan_records(&log.key, &ranges, log_start, hw, |off, ts| {
                    if ts >= t {
                        found = Some((off, ts));
                        true
                    } else {
                        false
                    }
                })
                .await?;
                Ok(match found {
                    Some((offset, timestamp)) => OffsetAnswer { offset, timestamp },
                    None => OffsetAnswer {
                        offset: -1,
                        timestamp: -1,
                    },
                })
            }
        }
    }

    /// Calls `f(offset, timestamp)` for the records of `ranges` in order until it returns true.
    ///
    /// Every record of every batch read is looked at: no batch is skipped
    /// for what its header claims. Each batch is decoded as a stream
    /// within [`DecodeLimits::DEFAULT`] (1 MiB of batches read at a time),
    /// so a decompression bomb costs at most its bounds; a batch that
    /// cannot be decoded within them, or is malformed, is passed over with
    /// a warning (its records cannot be looked at) and the scan goes on.
    async fn scan_records(
        &self,
        key: &PartitionKey,
        ranges: &[StoredRange],
        log_start: i64,
        hw: i64,
        mut f: impl FnMut(i64, i64) -> bool,
    ) -> Result<()> {
        for r in ranges {
            let mut offset = r.first_offset.max(log_start);
            while offset <= r.last_offset && offset < hw {
                let batches = self
                    .read_ranges(key, std::slice::from_ref(r), offset, SCAN_STEP_BYTES, hw)
                    .await?;
                if batches.is_empty() {
                    break;
                }
                for b in &batches {
                    let next = match BatchIter::new(b, usize::MAX).next() {
                        Some(Ok((_, v))) => v.next_offset(),
                        _ => {
                            return Err(BrokerError::new(
                                ErrorKind::CorruptMessage,
                                format!("a stored batch of {} does not parse", r.object.key),
                            ));
                        }
                    };
                    let decoded = RecordStream::new(b, DecodeLimits::DEFAULT).and_then(|records| {
                        for rec in records {
                            let rec = rec?;
                            if rec.offset >= log_start && f(rec.offset, rec.timestamp) {
                                return Ok(true);
                            }
                        }
                        Ok(false)
                    });
                    match decoded {
                        Ok(true) => return Ok(()),
                        Ok(false) => {}
                        Err(e) => {
                            crate::metrics::batch_not_decoded(e.is_over_bounds());
                            tracing::warn!(
                                object = %r.object.key,
                                offset,
                                error = %e,
                                "passing over a stored batch that cannot be decoded"
                            );
                        }
                    }
                    offset = offset.max(next);
                }
            }
        }
        Ok(())
    }

    /// DeleteRecords: moves the log start to `offset` (`-1`: the high
    /// watermark). Returns the new log start (the low watermark).
    pub async fn delete_records(&self, key: &PartitionKey, offset: i64) -> Result<i64> {
        let log = self.active_log(key)?;
        let (start, hw, _) = log.offsets();
        let target = if offset == -1 { hw } else { offset };
        if target < 0 || target > hw {
            return Err(BrokerError::new(
                ErrorKind::OffsetOutOfRange,
                format!("cannot delete records up to {offset}: the log ends at {hw}"),
            ));
        }
        if target <= start {
            return Ok(start);
        }
        crate::partitions::maintenance::truncate(self, &log, log.epoch(), target).await
    }
}
