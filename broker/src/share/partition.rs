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

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use floe_types::Offset;

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
            dead_letter: false,
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
/// as ranges, from the start offset up, with no hole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareSnapshot {
    pub start: Offset,
    pub ranges: Vec<SnapshotRange>,
    /// The dead-letter producer's progress (default: none yet).
    pub dead_letter: DeadLetterProgress,
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
    /// Done for the group's consumers (never acquired again), but not
    /// archived until the owner appended it to the dead-letter topic.
    DeadLettering {
        deliveries: u16,
        reason: DeadLetterReason,
    },
}

impl Slot {
    fn is_done(&self) -> bool {
        matches!(self, Slot::Acknowledged | Slot::Archived)
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
    /// archived (as they would have been without one).
    pub fn set_config(&mut self, config: ShareConfig) {
        self.config = config;
        if !config.dead_letter && self.dead_letters_pending() > 0 {
            for slot in self.window.iter_mut() {
                if matches!(slot, Slot::DeadLettering { .. }) {
                    *slot = Slot::Archived;
                }
            }
            self.abandon_in_flight();
            self.advance();
        }
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

    fn end(&self) -> i64 {
        self.start + self.window.len() as i64
    }

    /// The first offset an acquire at `now_ms` would take: the oldest
    /// record available again, else the end offset (expired locks are
    /// released first). The caller reads the log from there.
    pub fn first_acquirable(&mut self, now_ms: u64) -> Offset {
        self.expire(now_ms);
        let due = self.window.iter().position(|slot| {
            matches!(slot, Slot::Available { not_before_ms, .. } if *not_before_ms <= now_ms)
        });
        Offset(due.map_or(self.end(), |i| self.start + i as i64))
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
        self.expire(now_ms);
        let until_ms = now_ms.saturating_add(self.config.lock_duration_ms);
        let mut left = max_records as usize;
        let mut out = Ranges::default();
        for (i, slot) in self.window.iter_mut().enumerate() {
            if left == 0 || self.start + i as i64 >= limit.0 {
                break;
            }
            if let Slot::Available {
                deliveries,
                not_before_ms,
            } = *slot
                && not_before_ms <= now_ms
            {
                let deliveries = deliveries.saturating_add(1);
                *slot = Slot::Acquired {
                    deliveries,
                    member: member.clone(),
                    until_ms,
                };
                out.push(self.start + i as i64, deliveries);
                left -= 1;
            }
        }
        let cap = self.config.max_record_locks as usize;
        while left > 0 && self.end() < limit.0 && self.window.len() < cap {
            let offset = self.end();
            self.window.push_back(Slot::Acquired {
                deliveries: 1,
                member: member.clone(),
                until_ms,
            });
            out.push(offset, 1);
            left -= 1;
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
        if first < self.start || last >= self.end() {
            let offset = if first < self.start { first } else { last };
            return Err(ShareError::InvalidRecordState {
                offset: Offset(offset),
            });
        }
        let lo = (first - self.start) as usize;
        let hi = (last - self.start) as usize;
        for (i, slot) in self.window.range(lo..=hi).enumerate() {
            match slot {
                Slot::Acquired { member: holder, .. } if holder == member => {}
                _ => {
                    return Err(ShareError::InvalidRecordState {
                        offset: Offset(first + i as i64),
                    });
                }
            }
        }
        let config = self.config;
        for (i, slot) in self.window.range_mut(lo..=hi).enumerate() {
            let Slot::Acquired { deliveries, .. } = *slot else {
                continue;
            };
            match batch.type_at(first + i as i64) {
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
                    self.backoffs += u64::from(backed_off(slot, now_ms));
                }
                AckType::Renew => {
                    if let Slot::Acquired { until_ms, .. } = slot {
                        *until_ms = now_ms.saturating_add(config.lock_duration_ms);
                    }
                }
            }
        }
        self.advance();
        Ok(())
    }

    /// Releases every lock that expired at `now_ms` (as a RELEASE: available
    /// again, or archived at the delivery limit). Returns how many.
    pub fn expire(&mut self, now_ms: u64) -> usize {
        let config = self.config;
        let mut n = 0;
        for slot in self.window.iter_mut() {
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
            self.advance();
        }
        n
    }

    /// Releases every record `member` holds (it left the group or closed its
    /// share session). Returns how many.
    pub fn release_member(&mut self, member: &MemberId, now_ms: u64) -> usize {
        let config = self.config;
        let mut n = 0;
        for slot in self.window.iter_mut() {
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
            self.advance();
        }
        n
    }

    /// When this share-partition next needs attention after `now_ms`: the
    /// earliest lock deadline or backoff end, if any.
    pub fn next_deadline(&self, now_ms: u64) -> Option<u64> {
        self.window
            .iter()
            .filter_map(|slot| match *slot {
                Slot::Acquired { until_ms, .. } => Some(until_ms),
                Slot::Available { not_before_ms, .. } if not_before_ms > now_ms => {
                    Some(not_before_ms)
                }
                _ => None,
            })
            .min()
    }

    /// The log's start moved to `log_start` (retention, DeleteRecords):
    /// records below it are gone for this group too.
    pub fn advance_log_start(&mut self, log_start: Offset) {
        let log_start = log_start.0;
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
        let mut ranges: Vec<SnapshotRange> = Vec::new();
        for (i, slot) in self.window.iter().enumerate() {
            let offset = self.start + i as i64;
            let (state, deliveries) = match *slot {
                Slot::Available {
                    deliveries,
                    not_before_ms,
                } => (DurableState::Available { not_before_ms }, deliveries),
                Slot::Acquired { deliveries, .. } => {
                    (DurableState::Available { not_before_ms: 0 }, deliveries)
                }
                Slot::Acknowledged => (DurableState::Acknowledged, 0),
                Slot::Archived => (DurableState::Archived, 0),
                Slot::DeadLettering { deliveries, reason } => {
                    (DurableState::DeadLettering { reason }, deliveries)
                }
            };
            match ranges.last_mut() {
                Some(r) if r.state == state && r.deliveries == deliveries => {
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
        ShareSnapshot {
            start: Offset(self.start),
            ranges,
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
            let len = r.last.0 - r.first.0 + 1;
            if window.len() as i64 + len > i64::from(config.max_record_locks.max(1)) * 4 {
                return Err(ShareError::CorruptSnapshot("window far beyond the cap"));
            }
            let slot = match r.state {
                DurableState::Available { not_before_ms } => Slot::Available {
                    deliveries: r.deliveries,
                    not_before_ms,
                },
                DurableState::Acknowledged => Slot::Acknowledged,
                DurableState::Archived => Slot::Archived,
                DurableState::DeadLettering { reason } => Slot::DeadLettering {
                    deliveries: r.deliveries,
                    reason,
                },
            };
            window.extend(std::iter::repeat_n(slot, len as usize));
            next = r.last.0 + 1;
        }
        let mut partition = Self {
            config,
            start: snapshot.start.0,
            window,
            dead_letter: snapshot.dead_letter,
            backoffs: 0,
        };
        // Restored under a config without a dead-letter topic: archived.
        partition.set_config(config);
        partition.advance();
        Ok(partition)
    }

    /// How many records were made available with a backoff since the last
    /// call.
    pub fn take_backoffs(&mut self) -> u64 {
        std::mem::take(&mut self.backoffs)
    }

    /// Records waiting to be appended to the dead-letter topic.
    pub fn dead_letters_pending(&self) -> usize {
        self.window
            .iter()
            .filter(|s| matches!(s, Slot::DeadLettering { .. }))
            .count()
    }

    /// The dead-letter producer's progress (kept in the snapshot).
    pub fn dead_letter_progress(&self) -> DeadLetterProgress {
        self.dead_letter
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
                let i = self
                    .window
                    .iter()
                    .position(|s| matches!(s, Slot::DeadLettering { .. }))?;
                let offset = self.start + i as i64;
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
        if let Ok(i) = usize::try_from(offset.0 - self.start)
            && let Some(slot) = self.window.get_mut(i)
        {
            *slot = Slot::Archived;
        }
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
        if let Ok(i) = usize::try_from(offset.0 - self.start)
            && let Some(slot @ Slot::DeadLettering { .. }) = self.window.get_mut(i)
        {
            *slot = Slot::Archived;
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

    fn slot_at(&self, offset: i64) -> Option<&Slot> {
        let i = usize::try_from(offset - self.start).ok()?;
        self.window.get(i)
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
        Slot::Available {
            deliveries,
            not_before_ms: now_ms.saturating_add(config.backoff.delay_ms(deliveries)),
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
