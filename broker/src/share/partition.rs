//! The state of one share group on one partition (a *share-partition*,
//! KIP-932): which records are in flight, who holds a lock on which, how
//! often each was delivered, and the start offset below which everything
//! is done for this group.
//!
//! Synchronous and free of IO, with time passed in (epoch milliseconds, so
//! the durable form can carry deadlines): the partition's owner calls it
//! under a lock, stores its [`ShareSnapshot`] and serves the records. The
//! window `[start, end)` holds one slot per offset and never more than
//! [`ShareConfig::max_record_locks`] of them, which bounds memory per
//! share-partition whatever the consumers do.
//!
//! A record entering the window is first classified by the caller
//! ([`Arrival`]: the group's filter and the record's delay headers): one the
//! group's filter refuses is archived at once; one not due yet is *parked*,
//! moved out of the window into a list of at most
//! [`ShareConfig::max_delayed`] records with its due time, so that it
//! neither holds up the start offset nor fills the window; when that list
//! is full it waits in the window as an available record with a "not
//! before" time.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use floe_types::Offset;

use super::inspect::{AcquiredRecord, ShareInspection, Tally, due_minute};
use super::timers::{BucketState, MergeSource, TimerEntry, TimerIndex, TimerRef};

#[cfg(test)]
mod tests;

/// A share group member's id (the client chooses it, a UUID string).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(Arc<str>);

impl MemberId {
    pub fn new(id: &str) -> Self {
        Self(Arc::from(id))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a member acknowledges a record, with Kafka's codes
/// (ShareFetch / ShareAcknowledge `acknowledge_types`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AckType {
    /// The offset holds no record the client could deliver (a control
    /// batch, a compacted-away key): done, never delivered again.
    Gap,
    /// Processed: never delivered again.
    Accept,
    /// Give it back: available again (or archived at the delivery limit).
    Release,
    /// Cannot be processed: archived, never delivered again.
    Reject,
    /// Keep the lock for another lock duration (KIP-1222).
    Renew,
}

impl AckType {
    /// The type for a Kafka code; `None` for an unknown code.
    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            0 => Some(Self::Gap),
            1 => Some(Self::Accept),
            2 => Some(Self::Release),
            3 => Some(Self::Reject),
            4 => Some(Self::Renew),
            _ => None,
        }
    }

    pub fn code(self) -> i8 {
        match self {
            Self::Gap => 0,
            Self::Accept => 1,
            Self::Release => 2,
            Self::Reject => 3,
            Self::Renew => 4,
        }
    }
}

/// Floe's redelivery backoff: a released record is available again only
/// after `min(base × 2^(count−1), max)` ms. `base_ms == 0` (the default,
/// and Kafka's behaviour) redelivers at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backoff {
    pub base_ms: u64,
    pub max_ms: u64,
}

impl Backoff {
    /// The delay before a record delivered `deliveries` times is available
    /// again.
    pub fn delay_ms(self, deliveries: u16) -> u64 {
        if self.base_ms == 0 {
            return 0;
        }
        let doublings = u32::from(deliveries.saturating_sub(1)).min(32);
        self.base_ms
            .saturating_mul(1u64 << doublings)
            .min(self.max_ms.max(self.base_ms))
    }
}

/// A share-partition's settings (the group's configs, with Kafka's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareConfig {
    /// `share.record.lock.duration.ms`: how long an acquired record stays
    /// locked to its member.
    pub lock_duration_ms: u64,
    /// `share.delivery.count.limit`: a record delivered this many times is
    /// archived instead of being made available again.
    pub delivery_count_limit: u16,
    /// `group.share.partition.max.record.locks`: the most offsets in flight
    /// (between the start and the end offset) at once.
    pub max_record_locks: u32,
    /// Floe's redelivery backoff (none by default).
    pub backoff: Backoff,
    /// Delayed records parked out of the window at most; beyond, a delayed
    /// record waits in the window (and holds up the start offset).
    pub max_delayed: u32,
    /// Whether the group names a dead-letter topic (`floe.dlq.topic`): a
    /// REJECTed record, or one released or expired at the delivery limit,
    /// is then held as [`DeadLetterReason`] until the owner appended it
    /// there, instead of being archived at once.
    pub dead_letter: bool,
}

/// Kafka's defaults.
impl Default for ShareConfig {
    fn default() -> Self {
        Self {
            lock_duration_ms: 30_000,
            delivery_count_limit: 5,
            max_record_locks: 2_000,
            backoff: Backoff::default(),
            max_delayed: 2_000,
            dead_letter: false,
        }
    }
}

/// What a record entering the window is for the group (the caller decides,
/// from the group's filter and the record's headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Deliver it now.
    Deliver,
    /// The group's filter refuses it: archived, never delivered.
    Filtered,
    /// Not to be acquired before this time (epoch ms); at once if passed.
    DueAt(u64),
    /// Not for the group's isolation level (under `read_committed`: a
    /// record of an aborted transaction, a transaction marker): archived,
    /// never delivered.
    Hidden,
}

/// What records entering the window (and delayed ones delivered) came to
/// since the last [`SharePartition::take_stats`], for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArrivalStats {
    /// Archived at once by the group's filter.
    pub filtered: u64,
    /// Not due when they entered (parked or held in the window).
    pub delayed: u64,
    /// Of those, held in the window because the parked list was full.
    pub delayed_in_window: u64,
    /// For each delayed record acquired for the first time: how long after
    /// its due time (ms).
    pub lateness_ms: Vec<u64>,
}

impl ArrivalStats {
    /// Counts what records entering share-partitions' windows came to in
    /// one fetch (`malformed`: delay headers that could not be read).
    pub(crate) fn record(&self, malformed: u64) {
        use crate::metrics::{
            SHARE_DELAY_LATENESS, SHARE_DELAY_MALFORMED, SHARE_DELAYED, SHARE_DELAYED_IN_WINDOW,
            SHARE_FILTERED,
        };
        for (name, n) in [
            (SHARE_FILTERED, self.filtered),
            (SHARE_DELAYED, self.delayed),
            (SHARE_DELAYED_IN_WINDOW, self.delayed_in_window),
            (SHARE_DELAY_MALFORMED, malformed),
        ] {
            if n > 0 {
                metrics::counter!(name).increment(n);
            }
        }
        for ms in &self.lateness_ms {
            metrics::histogram!(SHARE_DELAY_LATENESS).record(std::time::Duration::from_millis(*ms));
        }
    }
}

/// Why a record goes to the dead-letter topic (the `floe-dlq-reason`
/// header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadLetterReason {
    /// A member REJECTed it.
    Rejected,
    /// Released, or its lock expired, at `share.delivery.count.limit`.
    DeliveryLimit,
}

impl DeadLetterReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rejected => "rejected",
            Self::DeliveryLimit => "delivery-count-limit",
        }
    }
}

/// Where a share-partition is in writing records to the dead-letter topic,
/// kept durably with its window so that a new owner repeats the one append
/// that may have landed with the same producer epoch and sequence (the
/// dead-letter partition then answers it as a duplicate): exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeadLetterProgress {
    /// The producer epoch of this share-partition's dead-letter producer.
    pub producer_epoch: i16,
    /// The sequence of the next append.
    pub next_sequence: i32,
    /// The offset whose append is under way (sent, or about to be, with
    /// `next_sequence`), until it is confirmed.
    pub in_flight: Option<Offset>,
}

/// One record to append to the dead-letter topic, with the producer epoch
/// and sequence to append it under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetter {
    pub offset: Offset,
    pub deliveries: u16,
    pub reason: DeadLetterReason,
    pub producer_epoch: i16,
    pub sequence: i32,
}

/// Why an acknowledgement or a restore was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    /// An offset of the batch is not acquired by this member (never
    /// acquired, acknowledged already, its lock expired, or another
    /// member's): Kafka's INVALID_RECORD_STATE (121).
    #[error("offset {offset} is not acquired by this member")]
    InvalidRecordState { offset: Offset },
    /// The request itself is malformed (inverted range, wrong number of
    /// types, an unknown type code): Kafka's INVALID_REQUEST (42).
    #[error("invalid request: {0}")]
    InvalidRequest(&'static str),
    /// A stored snapshot that does not describe a window.
    #[error("corrupt share-partition snapshot: {0}")]
    CorruptSnapshot(&'static str),
}

/// One range of acquired records, as ShareFetch answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub first: Offset,
    pub last: Offset,
    /// How many times these records have been delivered, this time
    /// included (1 on the first delivery).
    pub delivery_count: u16,
}

/// One acknowledgement batch: offsets `first..=last` and either one type
/// for all of them or one per offset (Kafka's `AcknowledgementBatch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckBatch {
    pub first: Offset,
    pub last: Offset,
    pub types: Vec<AckType>,
}

impl AckBatch {
    /// One type for the whole range.
    pub fn all(first: i64, last: i64, ty: AckType) -> Self {
        Self {
            first: Offset(first),
            last: Offset(last),
            types: vec![ty],
        }
    }

    /// The type for `offset` (inside the range, checked by the caller).
    fn type_at(&self, offset: i64) -> AckType {
        match self.types.as_slice() {
            [one] => *one,
            many => many[(offset - self.first.0) as usize],
        }
    }
}

/// The state an in-flight record is stored in (an acquired record is
/// stored as available: locks do not survive the owner).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurableState {
    /// Available from `not_before_ms` on (0: at once).
    Available {
        not_before_ms: u64,
    },
    Acknowledged,
    Archived,
    /// Waiting to be appended to the dead-letter topic (then archived).
    DeadLettering {
        reason: DeadLetterReason,
    },
}

/// Consecutive offsets in one stored state with one delivery count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotRange {
    pub first: Offset,
    pub last: Offset,
    pub state: DurableState,
    pub deliveries: u16,
}

/// The durable form of a share-partition: its start offset and its window
/// as ranges, from the start offset up, with no hole; and its parked
/// (delayed) records as ranges of available records with their due time
/// as "not before" (in offset order, anywhere below the window's end; a
/// parked record inside the window is written there as archived).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareSnapshot {
    pub start: Offset,
    pub ranges: Vec<SnapshotRange>,
    pub parked: Vec<SnapshotRange>,
    /// Delayed records written out of the parked list to timer buckets in
    /// the object store ([`super::timers`]).
    pub timers: Vec<BucketState>,
    /// The dead-letter producer's progress (default: none yet).
    pub dead_letter: DeadLetterProgress,
}

/// Delayed records to write out of the parked list as one timer bucket:
/// the parked list's later-due records not due yet (sorted), and small
/// buckets to merge into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealPlan {
    pub entries: Vec<TimerEntry>,
    pub merge: Vec<MergeSource>,
}

/// One offset of the window.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    Available {
        deliveries: u16,
        not_before_ms: u64,
    },
    Acquired {
        deliveries: u16,
        member: MemberId,
        until_ms: u64,
    },
    Acknowledged,
    Archived,
    /// Moved to the parked list (a delayed record): done as far as the
    /// window is concerned.
    Parked,
    /// Done for the group's consumers (never acquired again), but not
    /// archived until the owner appended it to the dead-letter topic.
    DeadLettering {
        deliveries: u16,
        reason: DeadLetterReason,
    },
}

impl Slot {
    fn is_done(&self) -> bool {
        matches!(self, Slot::Acknowledged | Slot::Archived | Slot::Parked)
    }
}

/// One share group's state on one partition.
#[derive(Debug, Clone)]
pub struct SharePartition {
    config: ShareConfig,
    /// The share-partition start offset (SPSO): everything below is done.
    start: i64,
    /// `window[i]` is offset `start + i`; its end is the SPEO, the first
    /// offset never acquired.
    window: VecDeque<Slot>,
    /// Delayed records out of the window, by offset: below the end offset,
    /// never done (removed once done), at most `max_delayed` of them.
    parked: BTreeMap<i64, Slot>,
    /// Delayed records written out of the parked list, by due time.
    timers: TimerIndex,
    /// The log's start as last seen: a timer entry below it is gone.
    log_start: i64,
    stats: ArrivalStats,
    dead_letter: DeadLetterProgress,
    /// Records made available with a backoff since the last
    /// [`SharePartition::take_backoffs`] (for the metrics).
    backoffs: u64,
}

impl SharePartition {
    /// A share-partition that starts at `start` (the group's
    /// `share.auto.offset.reset`: the log start or the high watermark).
    pub fn new(config: ShareConfig, start: Offset) -> Self {
        Self {
            config,
            start: start.0,
            window: VecDeque::new(),
            parked: BTreeMap::new(),
            timers: TimerIndex::default(),
            log_start: i64::MIN,
            stats: ArrivalStats::default(),
            dead_letter: DeadLetterProgress::default(),
            backoffs: 0,
        }
    }

    pub fn config(&self) -> &ShareConfig {
        &self.config
    }

    /// New settings (a group config changed); records in flight keep their
    /// locks, the new limits apply from the next change. When the group no
    /// longer names a dead-letter topic, the records waiting for it are
    /// archived (as they would have been without one). Returns whether
    /// that changed the state to write (the caller writes it: nothing else
    /// may, once nothing is left to acknowledge).
    #[must_use = "a state the new settings changed must be written"]
    pub fn set_config(&mut self, config: ShareConfig) -> bool {
        self.config = config;
        if config.dead_letter || self.dead_letters_pending() == 0 {
            return false;
        }
        for slot in self.window.iter_mut() {
            if matches!(slot, Slot::DeadLettering { .. }) {
                *slot = Slot::Archived;
            }
        }
        self.parked
            .retain(|_, slot| !matches!(slot, Slot::DeadLettering { .. }));
        self.abandon_in_flight();
        self.advance();
        true
    }

    /// The start offset (SPSO).
    pub fn start_offset(&self) -> Offset {
        Offset(self.start)
    }

    /// The end offset (SPEO): the first offset never acquired.
    pub fn end_offset(&self) -> Offset {
        Offset(self.end())
    }

    /// Offsets between the start and the end offset, whatever their state.
    pub fn in_flight(&self) -> usize {
        self.window.len()
    }

    /// Delayed records parked out of the window.
    pub fn parked(&self) -> usize {
        self.parked.len()
    }

    /// What entering records came to since the last call.
    pub fn take_stats(&mut self) -> ArrivalStats {
        std::mem::take(&mut self.stats)
    }

    fn end(&self) -> i64 {
        self.start + self.window.len() as i64
    }

    /// The first offset an acquire at `now_ms` would take: the oldest
    /// record available again (a parked one come due included), else the
    /// end offset (expired locks are released first). The caller reads the
    /// log from there, and acquires with the same `now_ms`.
    pub fn first_acquirable(&mut self, now_ms: u64) -> Offset {
        self.expire(now_ms);
        self.take_timers(now_ms);
        let due = |slot: &Slot| matches!(slot, Slot::Available { not_before_ms, .. } if *not_before_ms <= now_ms);
        let in_window = self
            .window
            .iter()
            .position(due)
            .map_or(self.end(), |i| self.start + i as i64);
        let parked = self
            .parked
            .iter()
            .find(|(_, slot)| due(slot))
            .map(|(offset, _)| *offset);
        Offset(parked.map_or(in_window, |p| p.min(in_window)))
    }

    /// The slot of `offset`: a parked record's, else the window's.
    fn slot_at(&self, offset: i64) -> Option<&Slot> {
        if let Some(slot) = self.parked.get(&offset) {
            return Some(slot);
        }
        let i = usize::try_from(offset.checked_sub(self.start)?).ok()?;
        self.window.get(i)
    }

    fn slot_at_mut(&mut self, offset: i64) -> Option<&mut Slot> {
        if self.parked.contains_key(&offset) {
            return self.parked.get_mut(&offset);
        }
        let i = usize::try_from(offset.checked_sub(self.start)?).ok()?;
        self.window.get_mut(i)
    }

    /// Acquires up to `max_records` records below `limit` (the high
    /// watermark, or the end of the batches the caller read) for `member`,
    /// locked until `now_ms + lock duration`: first records available again
    /// (released, expired; those whose backoff has passed), oldest first,
    /// then new offsets from the end offset, as far as the in-flight cap
    /// allows. Expired locks are released first.
    pub fn acquire(
        &mut self,
        member: &MemberId,
        max_records: u32,
        limit: Offset,
        now_ms: u64,
    ) -> Vec<Acquired> {
        self.acquire_with(
            member,
            max_records,
            Offset(i64::MIN),
            limit,
            now_ms,
            &mut |_| Some(Arrival::Deliver),
        )
    }

    /// [`Self::acquire`], where each offset entering the window is first
    /// given to `arrival` (called once per offset, in offset order; `None`
    /// stops new offsets entering, as the limit would): a
    /// record the group's filter refuses is archived at once, one not due
    /// yet is parked (or, the parked list full, kept in the window as
    /// available from its due time). Parked records come due like
    /// redeliveries, oldest offset first. Nothing below `from` (where the
    /// caller's read of the log starts) is acquired, should a record there
    /// have become available since [`Self::first_acquirable`].
    pub fn acquire_with(
        &mut self,
        member: &MemberId,
        max_records: u32,
        from: Offset,
        limit: Offset,
        now_ms: u64,
        arrival: &mut dyn FnMut(Offset) -> Option<Arrival>,
    ) -> Vec<Acquired> {
        self.expire(now_ms);
        self.take_timers(now_ms);
        let until_ms = now_ms.saturating_add(self.config.lock_duration_ms);
        let mut left = max_records as usize;
        let mut taken: Vec<(i64, u16)> = Vec::new();
        let mut take = |offset: i64, slot: &mut Slot, stats: &mut ArrivalStats| {
            let Slot::Available {
                deliveries,
                not_before_ms,
            } = *slot
            else {
                return false;
            };
            if not_before_ms > now_ms {
                return false;
            }
            if deliveries == 0 && not_before_ms > 0 {
                stats.lateness_ms.push(now_ms - not_before_ms);
            }
            let deliveries = deliveries.saturating_add(1);
            *slot = Slot::Acquired {
                deliveries,
                member: member.clone(),
                until_ms,
            };
            taken.push((offset, deliveries));
            true
        };
        for (&offset, slot) in self.parked.range_mut(from.0..) {
            if left == 0 || offset >= limit.0 {
                break;
            }
            if take(offset, slot, &mut self.stats) {
                left -= 1;
            }
        }
        let skip = usize::try_from(from.0.saturating_sub(self.start)).unwrap_or(0);
        for (i, slot) in self.window.iter_mut().enumerate().skip(skip) {
            if left == 0 || self.start + i as i64 >= limit.0 {
                break;
            }
            if take(self.start + i as i64, slot, &mut self.stats) {
                left -= 1;
            }
        }
        let cap = self.config.max_record_locks as usize;
        while left > 0 && self.end() < limit.0 && self.window.len() < cap {
            let offset = self.end();
            let Some(verdict) = arrival(Offset(offset)) else {
                break;
            };
            match verdict {
                Arrival::Filtered | Arrival::Hidden => {
                    if verdict == Arrival::Filtered {
                        self.stats.filtered += 1;
                    }
                    self.window.push_back(Slot::Archived);
                    self.advance();
                }
                Arrival::DueAt(due) if due > now_ms => {
                    self.stats.delayed += 1;
                    let waiting = Slot::Available {
                        deliveries: 0,
                        not_before_ms: due,
                    };
                    if self.parked.len() < self.config.max_delayed as usize {
                        self.parked.insert(offset, waiting);
                        self.window.push_back(Slot::Parked);
                        self.advance();
                    } else {
                        self.stats.delayed_in_window += 1;
                        self.window.push_back(waiting);
                    }
                }
                Arrival::Deliver | Arrival::DueAt(_) => {
                    self.window.push_back(Slot::Acquired {
                        deliveries: 1,
                        member: member.clone(),
                        until_ms,
                    });
                    taken.push((offset, 1));
                    left -= 1;
                }
            }
        }
        taken.sort_unstable_by_key(|(offset, _)| *offset);
        let mut out = Ranges::default();
        for (offset, deliveries) in taken {
            out.push(offset, deliveries);
        }
        out.0
    }

    /// Applies one acknowledgement batch of `member`, all or nothing: every
    /// offset must be acquired by `member` and its lock not expired at
    /// `now_ms`. The start offset then moves over what is done.
    pub fn acknowledge(
        &mut self,
        member: &MemberId,
        batch: &AckBatch,
        now_ms: u64,
    ) -> Result<(), ShareError> {
        let (first, last) = (batch.first.0, batch.last.0);
        if last < first {
            return Err(ShareError::InvalidRequest(
                "last offset before first offset",
            ));
        }
        let len = (last - first).saturating_add(1);
        if batch.types.is_empty() || (batch.types.len() != 1 && batch.types.len() as i64 != len) {
            return Err(ShareError::InvalidRequest(
                "acknowledge types do not match the range",
            ));
        }
        self.expire(now_ms);
        if last >= self.end() {
            return Err(ShareError::InvalidRecordState {
                offset: Offset(last),
            });
        }
        // At most window + parked offsets can be acquired, so this loop
        // stops at an offset that is not within that many steps.
        for offset in first..=last {
            match self.slot_at(offset) {
                Some(Slot::Acquired { member: holder, .. }) if holder == member => {}
                _ => {
                    return Err(ShareError::InvalidRecordState {
                        offset: Offset(offset),
                    });
                }
            }
        }
        let config = self.config;
        let mut parked_done = false;
        let mut backoffs = 0;
        for offset in first..=last {
            let in_parked = self.parked.contains_key(&offset);
            let Some(slot) = self.slot_at_mut(offset) else {
                continue;
            };
            let Slot::Acquired { deliveries, .. } = *slot else {
                continue;
            };
            match batch.type_at(offset) {
                AckType::Accept => *slot = Slot::Acknowledged,
                AckType::Gap => *slot = Slot::Archived,
                AckType::Reject if config.dead_letter => {
                    *slot = Slot::DeadLettering {
                        deliveries,
                        reason: DeadLetterReason::Rejected,
                    }
                }
                AckType::Reject => *slot = Slot::Archived,
                AckType::Release => {
                    *slot = released(config, deliveries, now_ms);
                    backoffs += u64::from(backed_off(slot, now_ms));
                }
                AckType::Renew => {
                    if let Slot::Acquired { until_ms, .. } = slot {
                        *until_ms = now_ms.saturating_add(config.lock_duration_ms);
                    }
                }
            }
            parked_done |= in_parked && slot.is_done();
        }
        self.backoffs += backoffs;
        if parked_done {
            self.parked.retain(|_, slot| !slot.is_done());
        }
        self.advance();
        Ok(())
    }

    /// Releases every lock that expired at `now_ms` (as a RELEASE: available
    /// again, or archived at the delivery limit). Returns how many.
    pub fn expire(&mut self, now_ms: u64) -> usize {
        let config = self.config;
        let mut n = 0;
        for slot in self.window.iter_mut().chain(self.parked.values_mut()) {
            if let Slot::Acquired {
                deliveries,
                until_ms,
                ..
            } = *slot
                && until_ms <= now_ms
            {
                *slot = released(config, deliveries, now_ms);
                self.backoffs += u64::from(backed_off(slot, now_ms));
                n += 1;
            }
        }
        if n > 0 {
            self.parked.retain(|_, slot| !slot.is_done());
            self.advance();
        }
        n
    }

    /// Releases every record `member` holds (it left the group or closed its
    /// share session). Returns how many.
    pub fn release_member(&mut self, member: &MemberId, now_ms: u64) -> usize {
        let config = self.config;
        let mut n = 0;
        for slot in self.window.iter_mut().chain(self.parked.values_mut()) {
            if let Slot::Acquired {
                deliveries,
                member: holder,
                ..
            } = slot
                && holder == member
            {
                *slot = released(config, *deliveries, now_ms);
                self.backoffs += u64::from(backed_off(slot, now_ms));
                n += 1;
            }
        }
        if n > 0 {
            self.parked.retain(|_, slot| !slot.is_done());
            self.advance();
        }
        n
    }

    /// When this share-partition next needs attention after `now_ms`: the
    /// earliest lock deadline, backoff end or parked record's due time, if
    /// any.
    pub fn next_deadline(&self, now_ms: u64) -> Option<u64> {
        // A bucket's entry due can be taken only into a parked list with
        // room (a record acknowledged, or its lock expiring, makes some).
        let timers = (self.parked.len() < self.config.max_delayed as usize)
            .then(|| self.timers.next_due())
            .flatten()
            .map(|due| due.max(now_ms.saturating_add(1)));
        self.window
            .iter()
            .chain(self.parked.values())
            .filter_map(|slot| match *slot {
                Slot::Acquired { until_ms, .. } => Some(until_ms),
                Slot::Available { not_before_ms, .. } if not_before_ms > now_ms => {
                    Some(not_before_ms)
                }
                _ => None,
            })
            .chain(timers)
            .min()
    }

    /// Moves timer entries that are due into the parked list, as far as it
    /// has room; one whose record is gone from the log is dropped.
    fn take_timers(&mut self, now_ms: u64) {
        while self.parked.len() < self.config.max_delayed.max(1) as usize {
            let Some(e) = self.timers.pop_due(now_ms) else {
                break;
            };
            if e.offset < self.log_start
                || e.offset >= self.end()
                || self.parked.contains_key(&e.offset)
            {
                continue;
            }
            self.parked.insert(
                e.offset,
                Slot::Available {
                    deliveries: 0,
                    not_before_ms: e.due_ms,
                },
            );
        }
    }

    /// The timer index (for the owner's timer task and metrics).
    pub fn timers(&mut self) -> &mut TimerIndex {
        &mut self.timers
    }

    /// Parked records not due at `now_ms` and never delivered: the ones a
    /// seal may write out.
    fn sealable(&self, now_ms: u64) -> Vec<TimerEntry> {
        self.parked
            .iter()
            .filter_map(|(offset, slot)| match *slot {
                Slot::Available {
                    deliveries: 0,
                    not_before_ms,
                } if not_before_ms > now_ms => Some(TimerEntry {
                    due_ms: not_before_ms,
                    offset: *offset,
                }),
                _ => None,
            })
            .collect()
    }

    /// Whether [`Self::plan_seal`] would give a plan now.
    pub fn seal_wanted(&self, now_ms: u64) -> bool {
        let cap = self.config.max_delayed.max(1) as usize;
        let seal_at = (cap * 3 / 4).max(1);
        // Most fetches find the parked list short: no walk then.
        !self.timers.is_sealing()
            && self.parked.len() >= seal_at
            && {
                let n = self.parked.values().filter(|slot| {
                matches!(slot, Slot::Available { deliveries: 0, not_before_ms } if *not_before_ms > now_ms)
            }).count();
                n >= seal_at && n > cap / 4
            }
    }

    /// When the parked list holds three quarters of its cap in records not
    /// due yet: all but the quarter due soonest, to write out as a timer
    /// bucket (with small buckets to merge in). One at a time: the owner
    /// reports [`Self::sealed`] or [`Self::seal_abandoned`].
    pub fn plan_seal(&mut self, now_ms: u64) -> Option<SealPlan> {
        let cap = self.config.max_delayed.max(1) as usize;
        let seal_at = (cap * 3 / 4).max(1);
        let keep = cap / 4;
        let mut entries = self.sealable(now_ms);
        if entries.len() < seal_at || entries.len() <= keep {
            return None;
        }
        if !self.timers.begin_seal() {
            return None;
        }
        entries.sort_unstable();
        entries.drain(..keep);
        let merge = self.timers.merge_sources(entries.len());
        Some(SealPlan { entries, merge })
    }

    /// The plan's bucket is stored as `object` holding `count` entries (the
    /// plan's and its merged buckets' pending ones), of which `first_chunk`
    /// are the first. Its records leave the parked list, unless one of them
    /// changed meanwhile (delivered, or gone): then nothing changes and the
    /// caller deletes the object (returns false).
    pub fn sealed(
        &mut self,
        plan: &SealPlan,
        object: TimerRef,
        count: u32,
        first_chunk: Vec<TimerEntry>,
    ) -> bool {
        let unchanged = plan.entries.iter().all(|e| {
            matches!(self.parked.get(&e.offset), Some(Slot::Available { deliveries: 0, not_before_ms }) if *not_before_ms == e.due_ms)
        });
        let Some(first) = first_chunk.first().copied() else {
            self.timers.seal_abandoned(&plan.merge);
            return false;
        };
        if !unchanged {
            self.timers.seal_abandoned(&plan.merge);
            return false;
        }
        for e in &plan.entries {
            self.parked.remove(&e.offset);
        }
        let bucket = BucketState {
            object,
            count,
            next: 0,
            next_due_ms: first.due_ms,
        };
        self.timers.sealed(bucket, first_chunk, &plan.merge);
        // The window's slots of records that left it for the parked list
        // stay done: the bucket holds them now. Delayed records that waited
        // in the window for want of room move to the room made.
        self.park_from_window();
        true
    }

    /// Moves delayed records waiting in the window (never delivered, with
    /// a due time) to the parked list, as far as it has room, so that they
    /// no longer hold up the start offset.
    fn park_from_window(&mut self) {
        let cap = self.config.max_delayed.max(1) as usize;
        for i in 0..self.window.len() {
            if self.parked.len() >= cap {
                break;
            }
            let slot = &mut self.window[i];
            if let Slot::Available {
                deliveries: 0,
                not_before_ms,
            } = *slot
                && not_before_ms > 0
            {
                let waiting = std::mem::replace(slot, Slot::Parked);
                self.parked.insert(self.start + i as i64, waiting);
            }
        }
        self.advance();
    }

    /// The plan's bucket was not written: nothing changes.
    pub fn seal_abandoned(&mut self, plan: &SealPlan) {
        self.timers.seal_abandoned(&plan.merge);
    }

    /// The log's start moved to `log_start` (retention, DeleteRecords):
    /// records below it are gone for this group too.
    pub fn advance_log_start(&mut self, log_start: Offset) {
        let log_start = log_start.0;
        self.log_start = self.log_start.max(log_start);
        if self
            .parked
            .first_key_value()
            .is_some_and(|(o, _)| *o < log_start)
        {
            self.parked = self.parked.split_off(&log_start);
        }
        if log_start <= self.start {
            return;
        }
        let drop = (log_start - self.start).min(self.window.len() as i64) as usize;
        self.window.drain(..drop);
        self.start = log_start;
        if self.dead_letter.in_flight.is_some_and(|o| o.0 < log_start) {
            self.abandon_in_flight();
        }
        self.advance();
    }

    /// The durable form: the start offset and the window as ranges;
    /// acquired records are stored as available with their counts.
    pub fn snapshot(&self) -> ShareSnapshot {
        let window = self
            .window
            .iter()
            .enumerate()
            .map(|(i, slot)| (self.start + i as i64, slot));
        ShareSnapshot {
            start: Offset(self.start),
            ranges: durable_ranges(window),
            parked: durable_ranges(self.parked.iter().map(|(o, slot)| (*o, slot))),
            timers: self.timers.states(),
            dead_letter: self.dead_letter,
        }
    }

    /// A share-partition resumed from its durable form (a new owner after a
    /// take-over). The ranges must run from the start offset up without a
    /// hole; a window wider than the cap is kept (the cap may have been
    /// lowered since) but nothing new is acquired until it shrinks.
    pub fn restore(config: ShareConfig, snapshot: &ShareSnapshot) -> Result<Self, ShareError> {
        let mut window = VecDeque::new();
        let mut next = snapshot.start.0;
        for r in &snapshot.ranges {
            if r.first.0 != next {
                return Err(ShareError::CorruptSnapshot("ranges not contiguous"));
            }
            if r.last.0 < r.first.0 {
                return Err(ShareError::CorruptSnapshot("inverted range"));
            }
            let len = r.last.0.saturating_sub(r.first.0).saturating_add(1);
            if window.len() as i64 + len > i64::from(config.max_record_locks.max(1)) * 4 {
                return Err(ShareError::CorruptSnapshot("window far beyond the cap"));
            }
            let slot = match r.state {
                DurableState::Available { not_before_ms } => {
                    restored_available(config, r.deliveries, not_before_ms)
                }
                DurableState::Acknowledged => Slot::Acknowledged,
                DurableState::Archived => Slot::Archived,
                DurableState::DeadLettering { reason } => Slot::DeadLettering {
                    deliveries: r.deliveries,
                    reason,
                },
            };
            window.extend(std::iter::repeat_n(slot, len as usize));
            next = r.last.0.saturating_add(1);
        }
        let mut parked = BTreeMap::new();
        let mut after = i64::MIN;
        for r in &snapshot.parked {
            if r.last.0 < r.first.0 || r.first.0 <= after {
                return Err(ShareError::CorruptSnapshot("parked ranges out of order"));
            }
            if r.last.0 >= next {
                return Err(ShareError::CorruptSnapshot("a parked record past the end"));
            }
            let state = match r.state {
                DurableState::Available { not_before_ms } => {
                    restored_available(config, r.deliveries, not_before_ms)
                }
                // A delayed record rejected once delivered, waiting for the
                // dead-letter topic.
                DurableState::DeadLettering { reason } => Slot::DeadLettering {
                    deliveries: r.deliveries,
                    reason,
                },
                _ => return Err(ShareError::CorruptSnapshot("a parked record that is done")),
            };
            let len = r.last.0.saturating_sub(r.first.0).saturating_add(1);
            if parked.len() as i64 + len > i64::from(config.max_delayed.max(1)) * 4 {
                return Err(ShareError::CorruptSnapshot(
                    "parked records far beyond the cap",
                ));
            }
            for offset in r.first.0..=r.last.0 {
                parked.insert(offset, state.clone());
                // Written as archived in the window.
                if let Some(slot) = usize::try_from(offset - snapshot.start.0)
                    .ok()
                    .and_then(|i| window.get_mut(i))
                {
                    *slot = Slot::Parked;
                }
            }
            after = r.last.0;
        }
        if snapshot.timers.len() > super::timers::MAX_BUCKETS {
            return Err(ShareError::CorruptSnapshot("more timer buckets than kept"));
        }
        if snapshot
            .timers
            .iter()
            .any(|b| b.next > b.count || b.count > floe_storage::timers::MAX_ENTRIES)
        {
            return Err(ShareError::CorruptSnapshot("a timer bucket past its count"));
        }
        let mut partition = Self {
            config,
            start: snapshot.start.0,
            window,
            parked,
            timers: TimerIndex::restore(&snapshot.timers),
            log_start: i64::MIN,
            stats: ArrivalStats::default(),
            dead_letter: snapshot.dead_letter,
            backoffs: 0,
        };
        // Restored under a config without a dead-letter topic: archived
        // (the caller finds the state changed and writes it).
        let _archived = partition.set_config(config);
        partition.advance();
        Ok(partition)
    }

    /// How many records were made available with a backoff since the last
    /// call.
    pub fn take_backoffs(&mut self) -> u64 {
        std::mem::take(&mut self.backoffs)
    }

    /// What an operator sees of this share-partition at `now_ms`, with at
    /// most `limit` acquired records listed (see [`super::inspect`]).
    pub fn inspect(&self, now_ms: u64, limit: usize) -> ShareInspection {
        let mut out = ShareInspection {
            start: self.start,
            end: self.end(),
            in_memory: true,
            parked: self.parked.len() as u64,
            timer_pending: self.timers.pending(),
            timer_buckets: self.timers.summaries(),
            ..ShareInspection::default()
        };
        let mut deliveries = Tally::default();
        let mut due = Tally::default();
        // The window's slots, then the parked ones (delayed, out of it).
        let window = self
            .window
            .iter()
            .enumerate()
            .map(|(i, slot)| (self.start + i as i64, slot, false));
        let parked = self.parked.iter().map(|(o, slot)| (*o, slot, true));
        for (offset, slot, is_parked) in window.chain(parked) {
            match slot {
                Slot::Available {
                    deliveries: d,
                    not_before_ms,
                } => {
                    deliveries.add(*d);
                    let later = *not_before_ms > now_ms;
                    if is_parked || later {
                        due.add(due_minute(*not_before_ms, now_ms));
                    }
                    match (is_parked, later) {
                        (true, _) => {}
                        (false, true) => out.backing_off += 1,
                        (false, false) => out.available += 1,
                    }
                }
                Slot::Acquired {
                    deliveries: d,
                    member,
                    until_ms,
                } => {
                    deliveries.add(*d);
                    out.acquired += 1;
                    if out.acquired_records.len() < limit {
                        out.acquired_records.push(AcquiredRecord {
                            offset,
                            member: member.as_str().to_owned(),
                            deliveries: *d,
                            lock_until_ms: *until_ms,
                        });
                    }
                }
                Slot::Acknowledged => out.acknowledged += 1,
                Slot::Archived => out.archived += 1,
                Slot::Parked => {}
                Slot::DeadLettering { deliveries: d, .. } => {
                    deliveries.add(*d);
                    out.dead_lettering += 1;
                }
            }
        }
        out.deliveries = deliveries.into_vec();
        out.due = due.into_vec();
        out
    }

    /// Records waiting to be appended to the dead-letter topic.
    pub fn dead_letters_pending(&self) -> usize {
        self.window
            .iter()
            .chain(self.parked.values())
            .filter(|s| matches!(s, Slot::DeadLettering { .. }))
            .count()
    }

    /// The dead-letter producer's progress (kept in the snapshot).
    pub fn dead_letter_progress(&self) -> DeadLetterProgress {
        self.dead_letter
    }

    /// A share-partition started afresh (an admin reset) after one whose
    /// dead-letter producer was at `prior`: its appends go on under the
    /// next producer epoch from sequence 0, so none repeats a sequence the
    /// dead-letter partition may already hold.
    pub fn after_dead_letters_of(mut self, prior: DeadLetterProgress) -> Self {
        if prior != DeadLetterProgress::default() {
            self.dead_letter = DeadLetterProgress {
                producer_epoch: next_epoch(prior.producer_epoch),
                next_sequence: 0,
                in_flight: None,
            };
        }
        self
    }

    /// The next record to append to the dead-letter topic: the one whose
    /// append is under way if any (it is repeated as it was), else the
    /// oldest waiting one, which becomes the one under way. The caller
    /// writes the snapshot before it appends, so that a new owner repeats
    /// the same append rather than a new one.
    pub fn next_dead_letter(&mut self) -> Option<DeadLetter> {
        let at = |this: &Self, offset: i64| match this.slot_at(offset) {
            Some(Slot::DeadLettering { deliveries, reason }) => Some((*deliveries, *reason)),
            _ => None,
        };
        let in_flight = self.dead_letter.in_flight.map(|o| o.0);
        let (offset, (deliveries, reason)) = match in_flight.and_then(|o| Some((o, at(self, o)?))) {
            Some(found) => found,
            None => {
                if in_flight.is_some() {
                    // No longer waiting (archived by a config change):
                    // its sequence may have been used.
                    self.abandon_in_flight();
                }
                let dead = |s: &Slot| matches!(s, Slot::DeadLettering { .. });
                let in_window = self
                    .window
                    .iter()
                    .position(dead)
                    .map(|i| self.start + i as i64);
                let parked = self.parked.iter().find(|(_, s)| dead(s)).map(|(o, _)| *o);
                let offset = match (in_window, parked) {
                    (Some(w), Some(p)) => w.min(p),
                    (w, p) => w.or(p)?,
                };
                (offset, at(self, offset)?)
            }
        };
        self.dead_letter.in_flight = Some(Offset(offset));
        Some(DeadLetter {
            offset: Offset(offset),
            deliveries,
            reason,
            producer_epoch: self.dead_letter.producer_epoch,
            sequence: self.dead_letter.next_sequence,
        })
    }

    /// The append of `offset` (the one under way) was confirmed: the
    /// record is archived and the next append takes the next sequence.
    /// Returns false (and changes nothing) for another offset.
    pub fn dead_lettered(&mut self, offset: Offset) -> bool {
        if self.dead_letter.in_flight != Some(offset) {
            return false;
        }
        if let Some(slot) = self.slot_at_mut(offset.0) {
            *slot = Slot::Archived;
        }
        self.parked.remove(&offset.0);
        self.dead_letter.in_flight = None;
        self.dead_letter.next_sequence = next_sequence(self.dead_letter.next_sequence);
        self.advance();
        true
    }

    /// The record under way is gone from the log (retention, compaction)
    /// and cannot be appended: archived without it.
    pub fn dead_letter_lost(&mut self, offset: Offset) {
        if self.dead_letter.in_flight == Some(offset) {
            self.abandon_in_flight();
        }
        if let Some(slot @ Slot::DeadLettering { .. }) = self.slot_at_mut(offset.0) {
            *slot = Slot::Archived;
            self.parked.remove(&offset.0);
        }
        self.advance();
    }

    /// The dead-letter partition refused the producer's epoch or sequence
    /// (not stored: it knows this producer at another point, e.g. the
    /// dead-letter topic changed and changed back). The producer starts a
    /// new epoch at sequence 0; the append under way stays under way.
    pub fn dead_letter_fenced(&mut self) {
        self.dead_letter.producer_epoch = next_epoch(self.dead_letter.producer_epoch);
        self.dead_letter.next_sequence = 0;
    }

    /// The append under way will not be repeated: its sequence may have
    /// been stored, so the next append must not reuse it under this epoch.
    fn abandon_in_flight(&mut self) {
        if self.dead_letter.in_flight.take().is_some() {
            self.dead_letter_fenced();
        }
    }

    /// Moves the start offset over the done prefix of the window.
    fn advance(&mut self) {
        while self.window.front().is_some_and(Slot::is_done) {
            self.window.pop_front();
            self.start += 1;
        }
    }

    #[cfg(test)]
    fn slot(&self, offset: i64) -> Option<&Slot> {
        self.slot_at(offset)
    }
}

/// Slots in offset order as durable ranges: acquired records as available
/// with their counts, parked slots of the window as archived (the parked
/// list carries them).
fn durable_ranges<'a>(slots: impl Iterator<Item = (i64, &'a Slot)>) -> Vec<SnapshotRange> {
    let mut ranges: Vec<SnapshotRange> = Vec::new();
    for (offset, slot) in slots {
        let (state, deliveries) = match *slot {
            Slot::Available {
                deliveries,
                not_before_ms,
            } => (DurableState::Available { not_before_ms }, deliveries),
            Slot::Acquired { deliveries, .. } => {
                (DurableState::Available { not_before_ms: 0 }, deliveries)
            }
            Slot::Acknowledged => (DurableState::Acknowledged, 0),
            Slot::Archived | Slot::Parked => (DurableState::Archived, 0),
            Slot::DeadLettering { deliveries, reason } => {
                (DurableState::DeadLettering { reason }, deliveries)
            }
        };
        match ranges.last_mut() {
            Some(r) if r.last.0 + 1 == offset && r.state == state && r.deliveries == deliveries => {
                r.last = Offset(offset)
            }
            _ => ranges.push(SnapshotRange {
                first: Offset(offset),
                last: Offset(offset),
                state,
                deliveries,
            }),
        }
    }
    ranges
}

/// A record stored as available with `deliveries`, as a new owner takes
/// it. Below the limit it is available. At the limit it was acquired for
/// its last delivery when its owner changed (an acquired record is stored
/// as available, and a release at the limit never leaves one available):
/// that lock did not survive the owner, so it ends as an expired lock at
/// the limit does, dead-lettered or archived, instead of being delivered
/// past the limit.
fn restored_available(config: ShareConfig, deliveries: u16, not_before_ms: u64) -> Slot {
    if deliveries >= config.delivery_count_limit {
        released(config, deliveries, not_before_ms)
    } else {
        Slot::Available {
            deliveries,
            not_before_ms,
        }
    }
}

/// What a released (or expired) record becomes.
fn released(config: ShareConfig, deliveries: u16, now_ms: u64) -> Slot {
    if deliveries >= config.delivery_count_limit && config.dead_letter {
        Slot::DeadLettering {
            deliveries,
            reason: DeadLetterReason::DeliveryLimit,
        }
    } else if deliveries >= config.delivery_count_limit {
        Slot::Archived
    } else {
        // Without a backoff, available at once, whatever the clock says: a
        // wall clock that ran ahead when the record was released (a jump
        // forward, corrected since) must not keep it back until that time
        // comes round again.
        let delay = config.backoff.delay_ms(deliveries);
        Slot::Available {
            deliveries,
            not_before_ms: if delay == 0 {
                0
            } else {
                now_ms.saturating_add(delay)
            },
        }
    }
}

/// Whether a released record waits for a backoff.
fn backed_off(slot: &Slot, now_ms: u64) -> bool {
    matches!(slot, Slot::Available { not_before_ms, .. } if *not_before_ms > now_ms)
}

/// Kafka's next sequence number (wrapping at `i32::MAX` to 0).
fn next_sequence(s: i32) -> i32 {
    if s == i32::MAX { 0 } else { s + 1 }
}

/// The next producer epoch (wrapping to 0 past `i16::MAX`).
fn next_epoch(e: i16) -> i16 {
    if e == i16::MAX { 0 } else { e + 1 }
}

/// Acquired offsets gathered into ranges of one delivery count.
#[derive(Default)]
struct Ranges(Vec<Acquired>);

impl Ranges {
    fn push(&mut self, offset: i64, delivery_count: u16) {
        match self.0.last_mut() {
            Some(r) if r.last.0 + 1 == offset && r.delivery_count == delivery_count => {
                r.last = Offset(offset)
            }
            _ => self.0.push(Acquired {
                first: Offset(offset),
                last: Offset(offset),
                delivery_count,
            }),
        }
    }
}
