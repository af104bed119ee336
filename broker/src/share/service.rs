//! Share groups served by one broker: the share groups' membership of the
//! coordinator shards it owns, and the share-partitions of the partitions
//! it owns, over any [`PartitionOwner`] for the records and a
//! [`ShareStore`] for their durable form. Proxies reach it in the same
//! process or over the internal RPC (`super::rpc`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use floe_metadata::record_filter::RecordFilter;
use floe_storage::PartitionKey;
use floe_storage::records::DecodeLimits;
use floe_types::Offset;

use super::arrival::{Arrivals, split_batches};
use super::dead_letter::{self, DeadLetterSink, Found};
use super::durable::ShareStore;
use super::group::{
    Heartbeat, HeartbeatAnswer, ShareGroup, ShareGroupConfig, ShareGroupDescription,
    ShareGroupError, TopicInfo,
};
use super::inspect::ShareInspection;
use super::partition::{
    AckBatch, Acquired, Arrival, Backoff, MemberId, ShareConfig, ShareError, SharePartition,
    ShareSnapshot,
};
use crate::error::{BrokerError, CallError, ErrorKind};
use crate::partitions::OffsetSpec;
use crate::partitions::PartitionOwner;

/// Where a new share-partition starts (the group's
/// `share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    Earliest,
    /// Kafka's default: only records produced from now on.
    #[default]
    Latest,
    /// `by_duration:`: the first record no older than this many ms when
    /// the share-partition starts (the log end if none is).
    ByDuration(u64),
}

/// A share group's settings as the proxy resolves them (the group's
/// configs over the proxy's flags) and sends them with each call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareSettings {
    /// `share.record.lock.duration.ms`.
    pub lock_duration_ms: u64,
    /// `share.auto.offset.reset`.
    pub reset: AutoOffsetReset,
    /// `share.delivery.count.limit` (0: the broker's default, 5).
    pub delivery_count_limit: u16,
    /// `share.heartbeat.interval.ms` (`None`: the coordinator's, 5 s).
    pub heartbeat_interval_ms: Option<u32>,
    /// `share.session.timeout.ms` (`None`: the coordinator's, 45 s).
    pub session_timeout_ms: Option<u32>,
    /// `floe.filter` (`None`: every record).
    pub filter: Option<Arc<RecordFilter>>,
    /// `share.isolation.level=read_committed`: only records of committed
    /// transactions (and of no transaction), up to the last stable offset.
    pub read_committed: bool,
    /// `floe.retry.backoff.base.ms` / `floe.retry.backoff.max.ms` (base 0:
    /// none, as older proxies send).
    pub backoff: Backoff,
    /// `floe.dlq.topic` (none: records rejected or at the delivery limit
    /// are archived at once).
    pub dead_letter_topic: Option<Arc<str>>,
}

impl Default for ShareSettings {
    fn default() -> Self {
        Self {
            lock_duration_ms: ShareConfig::default().lock_duration_ms,
            reset: AutoOffsetReset::Latest,
            delivery_count_limit: ShareConfig::default().delivery_count_limit,
            heartbeat_interval_ms: None,
            session_timeout_ms: None,
            filter: None,
            read_committed: false,
            backoff: Backoff::default(),
            dead_letter_topic: None,
        }
    }
}

/// What one ShareFetch got from one partition.
#[derive(Debug)]
pub struct ShareFetched {
    /// Whole batches holding the acquired records (and possibly others,
    /// which the client skips: it delivers only acquired offsets).
    pub records: Bytes,
    pub acquired: Vec<Acquired>,
    /// The partition's high watermark when it was read (-1: not read), for
    /// a fetch that acquired nothing to wait for it to move.
    pub high_watermark: i64,
    /// When nothing was acquired: in how many ms a lock expires or a
    /// backoff ends on this share-partition, if one does.
    pub retry_in_ms: Option<u64>,
}

/// One share-partition, with the partition epoch its state was loaded at.
#[derive(Debug)]
struct Held {
    sp: SharePartition,
    epoch: u64,
    /// The group's dead-letter topic as the last call named it.
    dead_letter_topic: Option<Arc<str>>,
    /// Whether a task appends its records to the dead-letter topic now.
    dead_lettering: bool,
    /// The state as last written at `epoch` by [`ShareService::persist`]:
    /// a caller whose change is already in it (written by a call that
    /// came before it) has nothing to write.
    saved: Option<ShareSnapshot>,
    /// The timer index's object-store work (`timer_task`).
    timers: TimerWork,
}

/// Where a share-partition's timer task is.
#[derive(Debug)]
struct TimerWork {
    /// This share-partition in memory, unlike any other loaded before or
    /// after it (a reset replaces one at the same epoch): a task works
    /// only on the one it was claimed for.
    incarnation: u64,
    /// A task does it now.
    running: bool,
    /// Buckets left behind by an owner that died were looked for.
    swept: bool,
    /// Buckets emptied, in no state written since: deleted by the task.
    deletable: Vec<super::timers::TimerRef>,
    /// After a failure, no task before this time (epoch ms).
    retry_at_ms: u64,
}

impl Default for TimerWork {
    fn default() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Self {
            incarnation: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            running: false,
            swept: false,
            deletable: Vec::new(),
            retry_at_ms: 0,
        }
    }
}

mod timer_task;

type Id = (String, PartitionKey);

/// Share groups and share-partitions of this broker.
#[derive(Debug)]
pub struct ShareService {
    partition_config: ShareConfig,
    group_config: ShareGroupConfig,
    groups: Mutex<HashMap<String, ShareGroup>>,
    partitions: Mutex<HashMap<Id, Held>>,
    /// One writer at a time per share-partition, so its durable states are
    /// written in the order they were taken.
    writers: Mutex<HashMap<Id, Arc<tokio::sync::Mutex<()>>>>,
    /// RPC clients of the brokers owning dead-letter partitions.
    pub(crate) dead_letter_peers: dead_letter::Peers,
    /// The pause after a failed dead-letter append, and the most it grows
    /// to (doubling).
    dead_letter_retry: (std::time::Duration, std::time::Duration),
}

/// What one step of appending dead records did.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// One record appended (or found gone): look for the next.
    Done,
    /// Nothing waits (or no dead-letter topic any more).
    Idle,
    /// The share-partition is no longer held at the epoch the task began.
    Stop,
}

/// The pause after a failed dead-letter append, doubling up to the most.
const DEAD_LETTER_RETRY_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
const DEAD_LETTER_RETRY_MOST: std::time::Duration = std::time::Duration::from_secs(30);

/// The most one share-partition read takes from the log (at least one
/// batch is read whatever its size). An acquire takes at most
/// `max_records` records (500 by default), so reading up to a client's
/// fetch size (tens of MB) only copied bytes no member got: with a
/// backlog, that copy was most of a share fetch's cost (bench/share.py).
const SHARE_READ_BYTES: usize = 1 << 20;

/// How soon a fetch that acquired nothing looks again while its
/// share-partition writes delayed records out to the timer index.
const SEAL_RETRY_MS: u64 = 10;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The offset just past the last batch of `records` (whole batches in
/// offset order, as a fetch returns them); `None` if none is whole.
fn end_of_batches(records: &[u8]) -> Option<i64> {
    let mut pos = 0usize;
    let mut end = None;
    while let Some(header) = records.get(pos..pos + 27) {
        let base = i64::from_be_bytes(header[0..8].try_into().ok()?);
        let len = i32::from_be_bytes(header[8..12].try_into().ok()?);
        let delta = i32::from_be_bytes(header[23..27].try_into().ok()?);
        let size = usize::try_from(len).ok()?.checked_add(12)?;
        if records.len() < pos + size {
            break;
        }
        end = Some(base + i64::from(delta) + 1);
        pos += size;
    }
    end
}

/// Where a new share-partition of `key` starts, by `reset`.
async fn start_offset(
    owner: &dyn PartitionOwner,
    key: &PartitionKey,
    reset: AutoOffsetReset,
) -> Result<i64, CallError> {
    let spec = match reset {
        AutoOffsetReset::Earliest => OffsetSpec::Earliest,
        AutoOffsetReset::Latest => OffsetSpec::Latest,
        AutoOffsetReset::ByDuration(ms) => {
            let since = now_ms().saturating_sub(ms);
            OffsetSpec::Timestamp(i64::try_from(since).unwrap_or(i64::MAX))
        }
    };
    let (found, _) = owner.list_offset(key, spec, None).await?;
    if found.offset >= 0 {
        return Ok(found.offset);
    }
    // No record that recent: from the end, as Kafka does.
    let (end, _) = owner.list_offset(key, OffsetSpec::Latest, None).await?;
    Ok(end.offset)
}

impl ShareFetched {
    /// Nothing acquired; the log was read up to `high_watermark`.
    fn nothing(high_watermark: i64, retry_in_ms: Option<u64>) -> Self {
        Self {
            records: Bytes::new(),
            acquired: Vec::new(),
            high_watermark,
            retry_in_ms,
        }
    }
}

impl ShareService {
    /// `partition_config` gives the settings a call does not carry (the
    /// delivery limit, the in-flight cap, the backoff).
    pub fn new(partition_config: ShareConfig, group_config: ShareGroupConfig) -> Self {
        Self {
            partition_config,
            group_config,
            groups: Mutex::new(HashMap::new()),
            partitions: Mutex::new(HashMap::new()),
            writers: Mutex::new(HashMap::new()),
            dead_letter_peers: dead_letter::Peers::default(),
            dead_letter_retry: (DEAD_LETTER_RETRY_FIRST, DEAD_LETTER_RETRY_MOST),
        }
    }

    fn config(&self, settings: &ShareSettings) -> ShareConfig {
        let limit = match settings.delivery_count_limit {
            0 => self.partition_config.delivery_count_limit,
            n => n,
        };
        ShareConfig {
            lock_duration_ms: settings.lock_duration_ms.max(1),
            delivery_count_limit: limit,
            backoff: settings.backoff,
            dead_letter: settings.dead_letter_topic.is_some(),
            ..self.partition_config
        }
    }

    /// The group settings of one share group: the coordinator's, with the
    /// group's own timings over them.
    fn group_config(&self, settings: &ShareSettings) -> ShareGroupConfig {
        let mut config = self.group_config;
        if let Some(ms) = settings.heartbeat_interval_ms {
            config.heartbeat_interval_ms = ms.max(1);
        }
        if let Some(ms) = settings.session_timeout_ms {
            config.session_timeout_ms = u64::from(ms.max(1));
        }
        config
    }

    /// A ShareGroupHeartbeat. Returns its answer and the members that left
    /// the group with it (timed out, or this one leaving): their records
    /// are released here; the caller releases them at the other owners.
    pub fn heartbeat(
        &self,
        group_id: &str,
        hb: &Heartbeat,
        settings: &ShareSettings,
        topics: &dyn Fn(&str) -> Option<TopicInfo>,
    ) -> (Result<HeartbeatAnswer, ShareGroupError>, Vec<MemberId>) {
        let now = now_ms();
        let (answer, mut gone) = {
            let mut groups = lock(&self.groups);
            // A refused first heartbeat leaves no group behind.
            let existed = groups.contains_key(group_id);
            let mut group = groups
                .remove(group_id)
                .unwrap_or_else(|| ShareGroup::new(group_id, self.group_config));
            group.set_config(self.group_config(settings));
            let gone = group.expire(now, topics);
            let answer = group.heartbeat(hb, now, topics);
            if existed || answer.is_ok() {
                groups.insert(group_id.to_owned(), group);
            }
            (answer, gone)
        };
        if hb.member_epoch == -1 && answer.is_ok() {
            gone.push(hb.member_id.clone());
        }
        for member in &gone {
            self.release_member(group_id, member);
        }
        (answer, gone)
    }

    /// Removes the members silent for their group's session timeout, from
    /// the groups `owned` says this broker coordinates, and forgets the
    /// others' groups (their shard moved: the new coordinator has them).
    /// Returns the members removed; their records are released here, the
    /// caller releases them at the other owners.
    pub fn expire_members(
        &self,
        owned: &dyn Fn(&str) -> bool,
        topics: &dyn Fn(&str) -> Option<TopicInfo>,
    ) -> Vec<(String, MemberId)> {
        let now = now_ms();
        let mut gone = Vec::new();
        {
            let mut groups = lock(&self.groups);
            groups.retain(|id, _| owned(id));
            for (id, group) in groups.iter_mut() {
                if group.next_deadline().is_some_and(|at| at <= now) {
                    gone.extend(
                        group
                            .expire(now, topics)
                            .into_iter()
                            .map(|m| (id.clone(), m)),
                    );
                }
            }
        }
        for (group, member) in &gone {
            self.release_member(group, member);
        }
        gone
    }

    pub fn describe(&self, group_id: &str) -> Option<ShareGroupDescription> {
        lock(&self.groups).get(group_id).map(ShareGroup::describe)
    }

    /// Whether `member` is in `group_id` now.
    pub fn has_member(&self, group_id: &str, member: &MemberId) -> bool {
        lock(&self.groups)
            .get(group_id)
            .is_some_and(|g| g.has_member(member))
    }

    /// Releases every record `member` holds in `group_id` here (its share
    /// session closed, or it left). Not written: a release changes no
    /// delivery count, and a new owner restores acquired records as
    /// available anyway.
    pub fn release_member(&self, group_id: &str, member: &MemberId) {
        let now = now_ms();
        for ((g, _), held) in lock(&self.partitions).iter_mut() {
            if g == group_id {
                held.sp.release_member(member, now);
                crate::metrics::share_backoffs(held.sp.take_backoffs());
            }
        }
    }

    /// Forgets the share-partitions of a partition this broker no longer
    /// owns (their state is in the metadata service).
    pub fn forget_partition(&self, key: &PartitionKey) {
        lock(&self.partitions).retain(|(_, k), _| k != key);
        lock(&self.writers).retain(|(_, k), _| k != key);
    }

    /// The share-partition of `group_id` on `key` in memory, loaded at the
    /// partition's current epoch: restored from its durable form, or new at
    /// the log's start or end (`share.auto.offset.reset`). Returns that
    /// epoch; fails if this broker does not own the partition.
    async fn ensure(
        &self,
        owner: &dyn PartitionOwner,
        store: &dyn ShareStore,
        settings: &ShareSettings,
        group_id: &str,
        key: &PartitionKey,
    ) -> Result<u64, CallError> {
        let epoch = store
            .owned_epoch(key)
            .ok_or_else(|| CallError::from(BrokerError::not_owner(*key)))?;
        let config = self.config(settings);
        let id = (group_id.to_owned(), *key);
        let changed = match lock(&self.partitions).get_mut(&id) {
            Some(held) if held.epoch == epoch => {
                let changed = *held.sp.config() != config && held.sp.set_config(config);
                if held.dead_letter_topic != settings.dead_letter_topic {
                    held.dead_letter_topic = settings.dead_letter_topic.clone();
                }
                Some(changed)
            }
            _ => None,
        };
        match changed {
            // Records the new settings archived are written now: a fetch
            // that acquires nothing writes nothing, and with nothing left
            // to acknowledge the start offset written would stay behind.
            Some(true) => {
                self.persist(store, group_id, key).await?;
                return Ok(epoch);
            }
            Some(false) => return Ok(epoch),
            None => {}
        }
        // Whether the state in memory must be written at once: a new
        // share-partition, or one the settings changed as it was restored.
        let mut fresh = false;
        let sp = match store.load(group_id, key).await? {
            Some(snapshot) => match SharePartition::restore(config, &snapshot) {
                Ok(sp) => {
                    // Restored under settings without the group's dead-letter
                    // topic, the records waiting for it were archived.
                    fresh = sp.snapshot().start != snapshot.start;
                    sp
                }
                Err(e) => {
                    tracing::warn!(group = group_id, partition = %key, error = %e,
                        "share state unreadable; resuming at its start offset");
                    SharePartition::new(config, snapshot.start)
                }
            },
            None => {
                let start = start_offset(owner, key, settings.reset).await?;
                fresh = true;
                SharePartition::new(config, Offset(start))
            }
        };
        {
            let mut partitions = lock(&self.partitions);
            match partitions.get(&id) {
                // Loaded meanwhile by another call at this epoch: that one stands.
                Some(held) if held.epoch == epoch => fresh = false,
                _ => {
                    partitions.insert(
                        id,
                        Held {
                            sp,
                            epoch,
                            dead_letter_topic: settings.dead_letter_topic.clone(),
                            dead_lettering: false,
                            saved: None,
                            timers: TimerWork::default(),
                        },
                    );
                }
            }
        }
        // Where a new share-partition starts is written at once (Kafka
        // initializes the share state too): a new owner must not take
        // "latest" again and skip what was produced in between. So is a
        // start the restore moved.
        if fresh {
            self.persist(store, group_id, key).await?;
        }
        Ok(epoch)
    }

    /// Writes the share-partition's state; on failure forgets it (it is
    /// loaded again from what was written, or the partition moved).
    async fn persist(
        &self,
        store: &dyn ShareStore,
        group_id: &str,
        key: &PartitionKey,
    ) -> Result<(), CallError> {
        let id = (group_id.to_owned(), *key);
        let writer = lock(&self.writers).entry(id.clone()).or_default().clone();
        let _turn = writer.lock().await;
        let Some((snapshot, epoch, written, retired)) =
            lock(&self.partitions).get_mut(&id).map(|h| {
                let snapshot = h.sp.snapshot();
                // Buckets emptied before this state: deletable once it is
                // written.
                let retired = h.sp.timers().take_retired();
                let written = h.saved.as_ref() == Some(&snapshot);
                (snapshot, h.epoch, written, retired)
            })
        else {
            return Err(BrokerError::not_owner(*key).into());
        };
        // Group commit: callers that queued for the turn while a write was
        // in flight had their changes taken by the next write; the first of
        // them writes, the others find their state already written.
        if written {
            crate::metrics::share_state_write(false);
            if let Some(h) = lock(&self.partitions)
                .get_mut(&id)
                .filter(|h| h.epoch == epoch)
            {
                h.timers.deletable.extend(retired);
            }
            return Ok(());
        }
        let result = store.save(group_id, key, epoch, &snapshot).await;
        let mut partitions = lock(&self.partitions);
        match &result {
            Ok(()) => {
                crate::metrics::share_state_write(true);
                if let Some(h) = partitions.get_mut(&id).filter(|h| h.epoch == epoch) {
                    h.saved = Some(snapshot);
                    h.timers.deletable.extend(retired);
                }
            }
            Err(_) => {
                if partitions.get(&id).is_some_and(|h| h.epoch == epoch) {
                    partitions.remove(&id);
                }
            }
        }
        result
    }

    /// Applies a member's acknowledgements on one partition, batch by batch,
    /// and answers once the new state is written (so an ACCEPT answered is
    /// never undone by a new owner). The first refusal is answered (the
    /// batches before it stand, as in Kafka); the outer error is the call's
    /// (not the owner, the write refused).
    #[allow(clippy::too_many_arguments)]
    pub async fn acknowledge(
        &self,
        owner: &dyn PartitionOwner,
        store: &dyn ShareStore,
        settings: &ShareSettings,
        group_id: &str,
        key: &PartitionKey,
        member: &MemberId,
        batches: &[AckBatch],
    ) -> Result<Result<(), ShareError>, CallError> {
        if batches.is_empty() {
            return Ok(Ok(()));
        }
        self.ensure(owner, store, settings, group_id, key).await?;
        let now = now_ms();
        let (result, changed) = {
            let mut partitions = lock(&self.partitions);
            let Some(held) = partitions.get_mut(&(group_id.to_owned(), *key)) else {
                return Err(BrokerError::not_owner(*key).into());
            };
            let mut result = Ok(());
            let mut changed = false;
            for batch in batches {
                match held.sp.acknowledge(member, batch, now) {
                    Ok(()) => changed = true,
                    Err(e) if result.is_ok() => result = Err(e),
                    Err(_) => {}
                }
            }
            crate::metrics::share_backoffs(held.sp.take_backoffs());
            (result, changed)
        };
        if changed {
            self.persist(store, group_id, key).await?;
        }
        Ok(result)
    }

    /// Acquires up to `max_records` records of one partition for `member`
    /// and reads the batches holding them (up to `max_bytes`, at least one
    /// batch).
    #[allow(clippy::too_many_arguments)]
    pub async fn fetch(
        &self,
        owner: &dyn PartitionOwner,
        store: &dyn ShareStore,
        settings: &ShareSettings,
        group_id: &str,
        key: &PartitionKey,
        member: &MemberId,
        max_records: u32,
        max_bytes: usize,
    ) -> Result<ShareFetched, CallError> {
        self.ensure(owner, store, settings, group_id, key).await?;
        let id = (group_id.to_owned(), *key);
        let retry = |this: &Self| {
            let now = now_ms();
            lock(&this.partitions).get_mut(&id).and_then(|h| {
                let at = h.sp.next_deadline(now).map(|at| at.saturating_sub(now));
                // Delayed records waiting to be written out of the parked
                // list (or being written): once they are, more records can
                // enter, so the fetch looks again soon, not at its next
                // slice.
                let sealing = h.sp.timers().is_sealing() || h.sp.seal_wanted(now);
                match (at, sealing) {
                    (Some(ms), true) => Some(ms.min(SEAL_RETRY_MS)),
                    (None, true) => Some(SEAL_RETRY_MS),
                    (at, false) => at,
                }
            })
        };
        // One time for the whole acquire: what is due when the log is read
        // from the first acquirable offset is what the batches read hold.
        let now = now_ms();
        let (from, end) = match lock(&self.partitions).get_mut(&id) {
            Some(held) => {
                let from = held.sp.first_acquirable(now);
                crate::metrics::share_backoffs(held.sp.take_backoffs());
                (from, held.sp.end_offset())
            }
            None => return Ok(ShareFetched::nothing(-1, None)),
        };
        let read = owner.fetch_isolated(
            key,
            from.0,
            max_bytes.clamp(1, SHARE_READ_BYTES),
            None,
            settings.read_committed,
        );
        let data = match read.await {
            // Retention or DeleteRecords moved the log start past the
            // share-partition's start: what is gone is gone for it too.
            Err(CallError::Broker(e)) if e.kind() == ErrorKind::OffsetOutOfRange => {
                let (start, _) = owner.list_offset(key, OffsetSpec::Earliest, None).await?;
                if let Some(held) = lock(&self.partitions).get_mut(&id) {
                    held.sp.advance_log_start(Offset(start.offset));
                }
                return Ok(ShareFetched::nothing(-1, None));
            }
            other => other?,
        };
        let hw = data.high_watermark;
        if hw <= from.0 || data.records.is_empty() {
            return Ok(ShareFetched::nothing(hw, retry(self)));
        }
        let mut buf = BytesMut::with_capacity(data.bytes());
        for piece in &data.records {
            buf.extend_from_slice(piece);
        }
        let records = buf.freeze();
        let limit = end_of_batches(&records)
            .map_or(data.high_watermark, |end| end.min(data.high_watermark));
        // What the records that may enter the window are (their headers
        // decoded here, outside the lock): at most what one acquire can
        // take in, from the end offset as it was.
        let entering = usize::try_from(limit.saturating_sub(end.0))
            .unwrap_or(0)
            .min(max_records as usize + self.partition_config.max_record_locks as usize);
        let mut malformed = 0;
        let arrivals: Vec<Arrival> = if entering == 0 {
            Vec::new()
        } else {
            let batches = split_batches(&records);
            let mut a = Arrivals::new(&batches, settings.filter.clone(), DecodeLimits::DEFAULT);
            let out = (0..entering as i64)
                .map(|i| a.classify(Offset(end.0 + i)))
                .collect();
            malformed = a.malformed;
            out
        };
        // Under read_committed (the batches end at the last stable offset):
        // records of aborted transactions and markers never enter.
        let hidden = if settings.read_committed {
            super::isolation::hidden(&records, &data.aborted)
        } else {
            Vec::new()
        };
        let arrival = |offset: Offset| {
            if hidden
                .iter()
                .any(|(first, last)| (*first..=*last).contains(&offset.0))
            {
                return Some(Arrival::Hidden);
            }
            let i = usize::try_from(offset.0.checked_sub(end.0)?).ok()?;
            arrivals.get(i).copied()
        };
        let (acquired, stats) = match lock(&self.partitions).get_mut(&id) {
            Some(held) => {
                held.sp.advance_log_start(Offset(data.log_start_offset));
                let acquired = held.sp.acquire_with(
                    member,
                    max_records,
                    from,
                    Offset(limit),
                    now,
                    &mut |offset| arrival(offset),
                );
                crate::metrics::share_backoffs(held.sp.take_backoffs());
                (acquired, held.sp.take_stats())
            }
            None => (Vec::new(), Default::default()),
        };
        stats.record(malformed);
        if acquired.is_empty() {
            return Ok(ShareFetched::nothing(hw, retry(self)));
        }
        Ok(ShareFetched {
            records,
            acquired,
            high_watermark: hw,
            retry_in_ms: None,
        })
    }
}

/// The admin side: share groups listed and deleted at their coordinator,
/// a share-partition's start offset moved or deleted at its owner.
impl ShareService {
    /// Whether `group_id` is a share group in memory here.
    pub fn has_group(&self, group_id: &str) -> bool {
        lock(&self.groups).contains_key(group_id)
    }

    /// The share groups in memory here with their states, sorted by id.
    pub fn groups(&self) -> Vec<(String, super::group::ShareGroupState)> {
        let mut out: Vec<_> = lock(&self.groups)
            .iter()
            .map(|(id, g)| (id.clone(), g.describe().state))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Removes the members of `group_id` whose session ran out (and
    /// releases their records here), as a heartbeat would; returns them
    /// (the caller releases them at the other owners).
    pub fn expire_group(
        &self,
        group_id: &str,
        topics: &dyn Fn(&str) -> Option<TopicInfo>,
    ) -> Vec<MemberId> {
        let gone = match lock(&self.groups).get_mut(group_id) {
            Some(g) => g.expire(now_ms(), topics),
            None => return Vec::new(),
        };
        for member in &gone {
            self.release_member(group_id, member);
        }
        gone
    }

    /// Forgets a share group without members (NON_EMPTY_GROUP while it has
    /// some). Its share-partitions are dropped by their owners
    /// ([`Self::reset`]) and its stored state by the caller.
    pub fn delete_group(&self, group_id: &str) -> Result<(), ShareGroupError> {
        let mut groups = lock(&self.groups);
        match groups.get(group_id) {
            Some(g) if !g.is_empty() => Err(ShareGroupError::NonEmptyGroup),
            _ => {
                groups.remove(group_id);
                Ok(())
            }
        }
    }

    /// What an operator sees of `group_id`'s state on `key` (see
    /// [`super::inspect`]), with at most `limit` acquired records listed:
    /// from memory when this owner holds it at the partition's epoch, else
    /// from the state last written (nothing is loaded or created by a
    /// look). `None`: the group has no state on the partition.
    pub async fn inspect(
        &self,
        store: &dyn ShareStore,
        settings: &ShareSettings,
        group_id: &str,
        key: &PartitionKey,
        limit: usize,
    ) -> Result<Option<ShareInspection>, CallError> {
        let epoch = store
            .owned_epoch(key)
            .ok_or_else(|| CallError::from(BrokerError::not_owner(*key)))?;
        let now = now_ms();
        if let Some(held) = lock(&self.partitions)
            .get(&(group_id.to_owned(), *key))
            .filter(|h| h.epoch == epoch)
        {
            return Ok(Some(held.sp.inspect(now, limit)));
        }
        let Some(snapshot) = store.load(group_id, key).await? else {
            return Ok(None);
        };
        let sp = SharePartition::restore(self.config(settings), &snapshot).map_err(|e| {
            CallError::from(BrokerError::new(
                ErrorKind::Storage,
                format!("share state of {group_id} on {key}: {e}"),
            ))
        })?;
        let mut seen = sp.inspect(now, limit);
        seen.in_memory = false;
        Ok(Some(seen))
    }

    /// Moves the start offset of `group_id` on `key` to `to` (kept within
    /// the log's start and end), or with `None` deletes its state. Done by
    /// the partition's owner under the share-partition's writer turn, so no
    /// acknowledgement's write lands over it: the share-partition starts
    /// again at the new offset with an empty window (records acquired
    /// before are no longer held), written fenced by the partition epoch
    /// before the call is answered. Returns where it starts now.
    pub async fn reset(
        &self,
        owner: &dyn PartitionOwner,
        store: &dyn ShareStore,
        settings: &ShareSettings,
        group_id: &str,
        key: &PartitionKey,
        to: Option<i64>,
    ) -> Result<Option<i64>, CallError> {
        let epoch = store
            .owned_epoch(key)
            .ok_or_else(|| CallError::from(BrokerError::not_owner(*key)))?;
        let id = (group_id.to_owned(), *key);
        let writer = lock(&self.writers).entry(id.clone()).or_default().clone();
        let _turn = writer.lock().await;
        // Whatever is in memory is stale from here on, but the dead-letter
        // producer's progress carries on (so its appends stay exactly once).
        let prior = match lock(&self.partitions).remove(&id) {
            Some(held) => Some(held.sp.dead_letter_progress()),
            None => None,
        };
        let prior = match prior {
            Some(p) => p,
            None => store
                .load(group_id, key)
                .await?
                .map(|s| s.dead_letter)
                .unwrap_or_default(),
        };
        let Some(to) = to else {
            store.forget(group_id, key, epoch).await?;
            lock(&self.partitions).remove(&id);
            self.drop_timers(store, group_id, key).await;
            return Ok(None);
        };
        let (first, _) = owner.list_offset(key, OffsetSpec::Earliest, None).await?;
        let (end, _) = owner.list_offset(key, OffsetSpec::Latest, None).await?;
        let at = to.clamp(first.offset, end.offset.max(first.offset));
        let sp =
            SharePartition::new(self.config(settings), Offset(at)).after_dead_letters_of(prior);
        store.save(group_id, key, epoch, &sp.snapshot()).await?;
        // The state written lists no timer bucket: the old ones go.
        self.drop_timers(store, group_id, key).await;
        lock(&self.partitions).insert(
            id,
            Held {
                sp,
                epoch,
                dead_letter_topic: settings.dead_letter_topic.clone(),
                dead_lettering: false,
                saved: None,
                timers: TimerWork::default(),
            },
        );
        Ok(Some(at))
    }
}

impl ShareService {
    /// Claims the appending of the share-partition's dead records when some
    /// wait, the group names a dead-letter topic and no task appends them
    /// yet: the caller then runs [`ShareService::run_dead_letters`] with the
    /// epoch returned.
    pub fn claim_dead_letters(&self, group_id: &str, key: &PartitionKey) -> Option<u64> {
        let mut partitions = lock(&self.partitions);
        let held = partitions.get_mut(&(group_id.to_owned(), *key))?;
        if held.dead_lettering
            || held.dead_letter_topic.is_none()
            || held.sp.dead_letters_pending() == 0
        {
            return None;
        }
        held.dead_lettering = true;
        Some(held.epoch)
    }

    /// [`ShareService::claim_dead_letters`] for each share-partition of
    /// `group_id` here (after a member's records were released on all of
    /// them): the partitions claimed, with their epochs.
    pub fn claim_group_dead_letters(&self, group_id: &str) -> Vec<(PartitionKey, u64)> {
        let keys: Vec<PartitionKey> = lock(&self.partitions)
            .keys()
            .filter(|(g, _)| g == group_id)
            .map(|(_, k)| *k)
            .collect();
        keys.into_iter()
            .filter_map(|k| Some((k, self.claim_dead_letters(group_id, &k)?)))
            .collect()
    }

    /// Appends the share-partition's dead records to the group's
    /// dead-letter topic, oldest first, one at a time, each archived once
    /// its append is confirmed, until none waits or the share-partition is
    /// no longer held at `epoch`. A failed append leaves its record
    /// waiting and is tried again after a pause (1 s, doubling up to 30 s).
    pub async fn run_dead_letters(
        &self,
        owner: &dyn PartitionOwner,
        store: &dyn ShareStore,
        sink: &dyn DeadLetterSink,
        group_id: &str,
        key: &PartitionKey,
        epoch: u64,
    ) {
        let id = (group_id.to_owned(), *key);
        let (first_pause, most_pause) = self.dead_letter_retry;
        let mut pause = first_pause;
        let mut unwritten = false;
        loop {
            match self
                .dead_letter_step(owner, store, sink, group_id, key, epoch)
                .await
            {
                Ok(Step::Done) => {
                    pause = first_pause;
                    unwritten = true;
                }
                Ok(Step::Idle) => {
                    // The last archive is written too (else it rides on the
                    // next write; a new owner would repeat it as a duplicate).
                    if unwritten && self.persist(store, group_id, key).await.is_err() {
                        return;
                    }
                    unwritten = false;
                    let mut partitions = lock(&self.partitions);
                    match partitions.get_mut(&id) {
                        Some(held) if held.epoch == epoch => {
                            if held.dead_letter_topic.is_none()
                                || held.sp.dead_letters_pending() == 0
                            {
                                held.dead_lettering = false;
                                return;
                            }
                        }
                        _ => return,
                    }
                }
                Ok(Step::Stop) => return,
                Err(e) => {
                    tracing::warn!(group = group_id, partition = %key, error = %e,
                        retry_in_ms = pause.as_millis() as u64,
                        "dead-letter append failed; the record stays and is tried again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(most_pause);
                }
            }
        }
    }

    /// Appends the oldest dead record (or repeats the append under way).
    async fn dead_letter_step(
        &self,
        owner: &dyn PartitionOwner,
        store: &dyn ShareStore,
        sink: &dyn DeadLetterSink,
        group_id: &str,
        key: &PartitionKey,
        epoch: u64,
    ) -> Result<Step, CallError> {
        let id = (group_id.to_owned(), *key);
        let with_held = |f: &mut dyn FnMut(&mut Held)| {
            if let Some(held) = lock(&self.partitions)
                .get_mut(&id)
                .filter(|h| h.epoch == epoch)
            {
                f(held);
            }
        };
        let (dead, topic) = {
            let mut partitions = lock(&self.partitions);
            let Some(held) = partitions.get_mut(&id).filter(|h| h.epoch == epoch) else {
                return Ok(Step::Stop);
            };
            let Some(topic) = held.dead_letter_topic.clone() else {
                return Ok(Step::Idle);
            };
            let Some(dead) = held.sp.next_dead_letter() else {
                return Ok(Step::Idle);
            };
            (dead, topic)
        };
        // The append under way is written before it is made, so that a new
        // owner repeats this one (same epoch and sequence) and no other.
        self.persist(store, group_id, key).await?;
        let found = match owner.fetch(key, dead.offset.0, 1, None).await {
            Err(CallError::Broker(e)) if e.kind() == ErrorKind::OffsetOutOfRange => {
                dead_letter::Found::Nothing
            }
            Err(e) => return Err(e),
            Ok(data) => dead_letter::find(&data.records, dead.offset),
        };
        let Found::Record(record) = found else {
            tracing::warn!(group = group_id, partition = %key, offset = dead.offset.0,
                "a dead record is no longer in the log (or is a control record); archived without a dead-letter copy");
            with_held(&mut |h| h.sp.dead_letter_lost(dead.offset));
            return Ok(Step::Done);
        };
        let Some((dlq, partitions)) = sink.topic(&topic).filter(|(_, n)| *n > 0) else {
            crate::metrics::share_dead_letter_failed("missing_topic");
            return Err(BrokerError::new(
                ErrorKind::UnknownTopicOrPartition,
                format!("the dead-letter topic {topic} does not exist; create it (floe.dlq.topic names it)"),
            )
            .into());
        };
        let source_topic = sink.topic_name(key.topic).unwrap_or_default();
        let source = dead_letter::Source {
            group: group_id,
            topic: &source_topic,
            partition: key.partition,
        };
        let pid = dead_letter::producer_id(group_id, key);
        let batch = dead_letter::batch(&record, source, &dead, pid)?;
        let target = PartitionKey::new(dlq, key.partition % partitions);
        match sink.append(&target, batch).await {
            Ok(()) => {
                let mut archived = false;
                with_held(&mut |h| archived = h.sp.dead_lettered(dead.offset));
                if archived {
                    crate::metrics::share_dead_lettered(dead.reason.as_str());
                }
                Ok(Step::Done)
            }
            Err(e) if dead_letter::is_sequence_refusal(&e) => {
                // Not stored: a new producer epoch starts at sequence 0.
                crate::metrics::share_dead_letter_failed("refused_sequence");
                with_held(&mut |h| h.sp.dead_letter_fenced());
                Err(e)
            }
            Err(e) => {
                crate::metrics::share_dead_letter_failed("append");
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests;
