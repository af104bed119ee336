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
        if let Some(held) = lock(&self.partitions).get_mut(&id)
            && held.epoch == epoch
        {
            if *held.sp.config() != config {
                held.sp.set_config(config);
            }
            if held.dead_letter_topic != settings.dead_letter_topic {
                held.dead_letter_topic = settings.dead_letter_topic.clone();
            }
            return Ok(epoch);
        }
        let mut fresh = false;
        let sp = match store.load(group_id, key).await? {
            Some(snapshot) => match SharePartition::restore(config, &snapshot) {
                Ok(sp) => sp,
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
        // "latest" again and skip what was produced in between.
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
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Mutex;

    use floe_storage::batch::Compression;
    use floe_storage::records::{BatchBuilder, RecordSpec};
    use floe_types::TopicId;

    use super::*;
    use crate::error::BrokerError;
    use crate::partitions::{Acks, FetchData, OffsetAnswer, PendingProduce};
    use crate::share::partition::{AckType, DurableState, ShareSnapshot};
    use crate::share::timers::{TimerRef, TimerStore, TimerStoreError};

    /// A log of batches of 3 records each, from `start` (the log start) up.
    #[derive(Debug)]
    struct FakeLog {
        start: Mutex<i64>,
        batches: Vec<(i64, Bytes)>,
        /// The share store: epoch owned, and what was written.
        epoch: Mutex<Option<u64>>,
        saved: Mutex<HashMap<String, (u64, ShareSnapshot)>>,
        /// What ListOffsets by timestamp answers (−1: no record that recent).
        by_time: Mutex<i64>,
        /// Writes of the share store, and a gate that holds them while a
        /// test holds it for writing.
        writes: std::sync::atomic::AtomicUsize,
        hold_writes: tokio::sync::RwLock<()>,
        /// Timer buckets by token, and whether the store fails.
        objects: Mutex<HashMap<String, Bytes>>,
        timers_fail: std::sync::atomic::AtomicBool,
    }

    #[async_trait::async_trait]
    impl TimerStore for FakeLog {
        async fn put_timers(
            &self,
            _: &str,
            _: &PartitionKey,
            bytes: Bytes,
        ) -> Result<TimerRef, TimerStoreError> {
            if self.timers_fail.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(TimerStoreError::Failed("down".into()));
            }
            let token = uuid::Uuid::new_v4().simple().to_string();
            let size = bytes.len() as u64;
            self.objects.lock().unwrap().insert(token.clone(), bytes);
            Ok(TimerRef {
                endpoint: floe_storage::EndpointId::new("default"),
                token: Arc::from(token.as_str()),
                size,
            })
        }

        async fn read_timers(
            &self,
            _: &str,
            _: &PartitionKey,
            object: &TimerRef,
            range: std::ops::Range<u64>,
        ) -> Result<Bytes, TimerStoreError> {
            if self.timers_fail.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(TimerStoreError::Failed("down".into()));
            }
            let objects = self.objects.lock().unwrap();
            let b = objects
                .get(&*object.token)
                .ok_or_else(|| TimerStoreError::Lost("no such bucket".into()))?;
            Ok(b.slice(range.start as usize..range.end as usize))
        }

        async fn delete_timers(
            &self,
            _: &str,
            _: &PartitionKey,
            object: &TimerRef,
        ) -> Result<(), TimerStoreError> {
            self.objects.lock().unwrap().remove(&*object.token);
            Ok(())
        }

        async fn list_timers(
            &self,
            _: &str,
            _: &PartitionKey,
        ) -> Result<Vec<TimerRef>, TimerStoreError> {
            Ok(self
                .objects
                .lock()
                .unwrap()
                .iter()
                .map(|(t, b)| TimerRef {
                    endpoint: floe_storage::EndpointId::new("default"),
                    token: Arc::from(t.as_str()),
                    size: b.len() as u64,
                })
                .collect())
        }
    }

    #[async_trait::async_trait]
    impl ShareStore for FakeLog {
        fn owned_epoch(&self, _: &PartitionKey) -> Option<u64> {
            *self.epoch.lock().unwrap()
        }

        async fn load(
            &self,
            group: &str,
            _: &PartitionKey,
        ) -> Result<Option<ShareSnapshot>, CallError> {
            Ok(self
                .saved
                .lock()
                .unwrap()
                .get(group)
                .map(|(_, s)| s.clone()))
        }

        async fn save(
            &self,
            group: &str,
            key: &PartitionKey,
            epoch: u64,
            snapshot: &ShareSnapshot,
        ) -> Result<(), CallError> {
            let _open = self.hold_writes.read().await;
            if Some(epoch) != *self.epoch.lock().unwrap() {
                return Err(BrokerError::not_owner(*key).into());
            }
            self.writes
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.saved
                .lock()
                .unwrap()
                .insert(group.to_owned(), (epoch, snapshot.clone()));
            Ok(())
        }

        async fn forget(&self, group: &str, _: &PartitionKey, _: u64) -> Result<(), CallError> {
            self.saved.lock().unwrap().remove(group);
            Ok(())
        }
    }

    impl FakeLog {
        fn new(batches: i64) -> Self {
            let batches = (0..batches)
                .map(|b| {
                    let mut builder = BatchBuilder::new(b * 3, 1_700_000_000_000);
                    for i in 0..3 {
                        builder.push(RecordSpec::new(None, Some(vec![i as u8]), 0));
                    }
                    (b * 3, builder.build(Compression::None).unwrap())
                })
                .collect();
            Self {
                start: Mutex::new(0),
                batches,
                epoch: Mutex::new(Some(1)),
                saved: Mutex::new(HashMap::new()),
                by_time: Mutex::new(-1),
                writes: Default::default(),
                hold_writes: Default::default(),
                objects: Default::default(),
                timers_fail: Default::default(),
            }
        }

        /// One batch per entry of `batches`, records with these headers.
        fn with_headers(batches: &[Vec<Vec<(&str, String)>>]) -> Self {
            let mut base = 0;
            let mut out = Vec::new();
            for recs in batches {
                let mut builder = BatchBuilder::new(base, 1_700_000_000_000);
                for headers in recs {
                    let mut r = RecordSpec::new(None, Some(b"v".to_vec()), 0);
                    r.headers = headers
                        .iter()
                        .map(|(k, v)| (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec())))
                        .collect();
                    builder.push(r);
                }
                out.push((base, builder.build(Compression::Lz4).unwrap()));
                base += recs.len() as i64;
            }
            Self {
                batches: out,
                ..Self::new(0)
            }
        }

        fn hw(&self) -> i64 {
            self.batches.last().map_or(0, |(base, b)| {
                let view = floe_storage::batch::BatchView::parse(b, b.len()).unwrap();
                base + i64::from(view.last_offset_delta()) + 1
            })
        }
    }

    #[async_trait::async_trait]
    impl PartitionOwner for FakeLog {
        async fn append(
            &self,
            _: &PartitionKey,
            _: Bytes,
            _: Acks,
            _: std::time::Duration,
        ) -> Result<PendingProduce, CallError> {
            Err(BrokerError::new(ErrorKind::InvalidRequest, "read only").into())
        }

        async fn fetch_isolated(
            &self,
            _: &PartitionKey,
            offset: i64,
            max_bytes: usize,
            _: Option<u64>,
            _: bool,
        ) -> Result<FetchData, CallError> {
            let start = *self.start.lock().unwrap();
            if offset < start || offset > self.hw() {
                return Err(BrokerError::new(ErrorKind::OffsetOutOfRange, "out").into());
            }
            let mut records: Vec<Bytes> = Vec::new();
            let mut size = 0;
            for (i, (_, b)) in self.batches.iter().enumerate() {
                let next = self.batches.get(i + 1).map_or(self.hw(), |(n, _)| *n);
                if next <= offset || (!records.is_empty() && size + b.len() > max_bytes) {
                    continue;
                }
                size += b.len();
                records.push(b.clone());
            }
            Ok(FetchData {
                high_watermark: self.hw(),
                log_start_offset: start,
                records,
                last_stable_offset: self.hw(),
                aborted: Vec::new(),
            })
        }

        async fn producers(
            &self,
            _: &PartitionKey,
        ) -> Result<Vec<crate::partitions::ProducerInfo>, CallError> {
            Ok(Vec::new())
        }

        async fn wait_for_data(&self, _: &PartitionKey, _: i64, _: tokio::time::Instant) {}

        async fn list_offset(
            &self,
            _: &PartitionKey,
            spec: OffsetSpec,
            _: Option<u64>,
        ) -> Result<(OffsetAnswer, i64), CallError> {
            let offset = match spec {
                OffsetSpec::Earliest => *self.start.lock().unwrap(),
                OffsetSpec::Timestamp(_) => *self.by_time.lock().unwrap(),
                _ => self.hw(),
            };
            Ok((
                OffsetAnswer {
                    offset,
                    timestamp: -1,
                },
                0,
            ))
        }

        async fn delete_records(&self, _: &PartitionKey, offset: i64) -> Result<i64, CallError> {
            *self.start.lock().unwrap() = offset;
            Ok(offset)
        }
    }

    fn service() -> ShareService {
        ShareService::new(ShareConfig::default(), ShareGroupConfig::default())
    }

    fn settings(reset: AutoOffsetReset) -> ShareSettings {
        ShareSettings { reset, ..EARLIEST }
    }

    const EARLIEST: ShareSettings = ShareSettings {
        lock_duration_ms: 30_000,
        reset: AutoOffsetReset::Earliest,
        delivery_count_limit: 0,
        heartbeat_interval_ms: None,
        session_timeout_ms: None,
        filter: None,
        read_committed: false,
        backoff: Backoff {
            base_ms: 0,
            max_ms: 0,
        },
        dead_letter_topic: None,
    };

    fn key() -> PartitionKey {
        PartitionKey::new(TopicId(uuid::Uuid::nil()), 0)
    }

    fn member() -> MemberId {
        MemberId::new("m")
    }

    #[tokio::test]
    async fn a_fetch_acquires_only_what_the_batches_it_read_hold() {
        let log = FakeLog::new(4);
        let svc = service();
        // One byte allowed: one whole batch is read, so three records.
        let f = svc
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1)
            .await
            .unwrap();
        assert_eq!(f.acquired.len(), 1);
        assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (0, 2));
        assert_eq!(end_of_batches(&f.records), Some(3));
        // The rest, up to max_records.
        let f = svc
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 4, 1 << 20)
            .await
            .unwrap();
        assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (3, 6));
        // A release comes back first, with its delivery count.
        ack(&svc, &log, &EARLIEST, 1, 1, AckType::Release).await;
        let f = svc
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 1, 1 << 20)
            .await
            .unwrap();
        assert_eq!(
            (f.acquired[0].first.0, f.acquired[0].delivery_count),
            (1, 2)
        );
    }

    /// Acknowledgements that arrive while the share-partition's state is
    /// being written are written together by the next write: three
    /// acknowledgements, two writes, and every one of them durable.
    #[tokio::test]
    async fn acknowledgements_queued_behind_a_write_share_the_next_one() {
        use std::sync::atomic::Ordering::SeqCst;
        let log = FakeLog::new(3);
        let svc = service();
        svc.fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 9, 1 << 20)
            .await
            .unwrap();
        let before = log.writes.load(SeqCst);
        let gate = log.hold_writes.write().await;
        let first = ack(&svc, &log, &EARLIEST, 0, 2, AckType::Accept);
        let second = ack(&svc, &log, &EARLIEST, 3, 5, AckType::Accept);
        let third = ack(&svc, &log, &EARLIEST, 6, 8, AckType::Accept);
        let all = async {
            tokio::join!(first, second, third);
        };
        let open = async {
            // Every acknowledgement applied and waiting for a write.
            tokio::task::yield_now().await;
            tokio::task::yield_now().await;
            drop(gate);
        };
        tokio::join!(all, open);
        assert_eq!(log.writes.load(SeqCst) - before, 2);
        assert_eq!(log.saved.lock().unwrap()["g"].1.start, Offset(9));
    }

    #[tokio::test]
    async fn a_new_share_partition_starts_at_the_reset_offset() {
        let log = FakeLog::new(2);
        let svc = service();
        let latest = settings(AutoOffsetReset::Latest);
        let f = svc
            .fetch(&log, &log, &latest, "g", &key(), &member(), 100, 1 << 20)
            .await
            .unwrap();
        assert!(f.acquired.is_empty());
        assert!(f.records.is_empty());
        let partitions = lock(&svc.partitions);
        let held = partitions.get(&("g".to_owned(), key())).unwrap();
        assert_eq!(held.sp.start_offset(), Offset(6));
        // Written at once: a new owner starts there too.
        assert_eq!(log.saved.lock().unwrap()["g"].1.start, Offset(6));
    }

    #[tokio::test]
    async fn a_share_partition_behind_the_log_start_moves_to_it() {
        let log = FakeLog::new(4);
        let svc = service();
        svc.fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 2, 1 << 20)
            .await
            .unwrap();
        svc.release_member("g", &member());
        log.delete_records(&key(), 6).await.unwrap();
        // The first read fails on the log start and moves the share-partition.
        let f = svc
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1 << 20)
            .await
            .unwrap();
        assert!(f.acquired.is_empty());
        let f = svc
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1 << 20)
            .await
            .unwrap();
        assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (6, 11));
        let snap = lock(&svc.partitions)
            .get(&("g".to_owned(), key()))
            .unwrap()
            .sp
            .snapshot();
        assert_eq!(snap.start, Offset(6));
        assert!(
            snap.ranges
                .iter()
                .all(|r| r.state == DurableState::Available { not_before_ms: 0 })
        );
    }

    #[tokio::test]
    async fn acknowledging_where_nothing_was_acquired_is_refused() {
        let log = FakeLog::new(1);
        let svc = service();
        let ack = |batches: Vec<AckBatch>| {
            let (svc, log) = (&svc, &log);
            async move {
                svc.acknowledge(log, log, &EARLIEST, "g", &key(), &member(), &batches)
                    .await
                    .unwrap()
            }
        };
        assert_eq!(
            ack(vec![AckBatch::all(0, 0, AckType::Accept)]).await,
            Err(ShareError::InvalidRecordState { offset: Offset(0) })
        );
        assert_eq!(ack(vec![]).await, Ok(()));
        // Only where the share-partition starts was written.
        let saved = log.saved.lock().unwrap()["g"].1.clone();
        assert_eq!((saved.start, saved.ranges.len()), (Offset(0), 0));
    }

    #[tokio::test]
    async fn a_new_owner_resumes_from_what_acknowledgements_wrote() {
        let log = FakeLog::new(3);
        let svc = service();
        let f = svc
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 6, 1 << 20)
            .await
            .unwrap();
        assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (0, 5));
        svc.acknowledge(
            &log,
            &log,
            &EARLIEST,
            "g",
            &key(),
            &member(),
            &[
                AckBatch::all(0, 1, AckType::Accept),
                AckBatch::all(3, 3, AckType::Accept),
            ],
        )
        .await
        .unwrap()
        .unwrap();
        // The partition moves (a new epoch): another broker, or this one
        // again, loads what was written.
        *log.epoch.lock().unwrap() = Some(2);
        let other = service();
        let f = other
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1 << 20)
            .await
            .unwrap();
        // 0, 1 and 3 were accepted: never again; 2, 4, 5 come back with
        // their delivery count, then the records never acquired.
        let got: Vec<(i64, i64, u16)> = f
            .acquired
            .iter()
            .map(|a| (a.first.0, a.last.0, a.delivery_count))
            .collect();
        assert_eq!(got, vec![(2, 2, 2), (4, 5, 2), (6, 8, 1)]);
        // The old owner's next acknowledgement is refused, not answered.
        let stale = svc
            .acknowledge(
                &log,
                &log,
                &EARLIEST,
                "g",
                &key(),
                &member(),
                &[AckBatch::all(2, 2, AckType::Accept)],
            )
            .await;
        assert!(stale.is_ok_and(|r| r.is_err()));
        *log.epoch.lock().unwrap() = None;
        assert!(
            other
                .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 1, 1)
                .await
                .is_err()
        );
    }

    fn offsets(f: &ShareFetched) -> Vec<i64> {
        f.acquired
            .iter()
            .flat_map(|a| a.first.0..=a.last.0)
            .collect()
    }

    #[tokio::test]
    async fn a_groups_filter_archives_what_it_refuses_and_other_groups_see_everything() {
        let tag = |t: &str| vec![("floe-tag", t.to_owned())];
        let log = FakeLog::with_headers(&[
            vec![tag("A"), tag("B"), vec![]],
            vec![tag("A"), vec![("region", "eu".to_owned())], tag("C")],
        ]);
        let svc = service();
        let only_a = ShareSettings {
            filter: Some(Arc::new(RecordFilter::parse("A || region=eu").unwrap())),
            ..EARLIEST
        };
        let f = svc
            .fetch(
                &log,
                &log,
                &only_a,
                "tagged",
                &key(),
                &member(),
                100,
                1 << 20,
            )
            .await
            .unwrap();
        assert_eq!(offsets(&f), vec![0, 3, 4]);
        let f = svc
            .fetch(
                &log,
                &log,
                &EARLIEST,
                "all",
                &key(),
                &member(),
                100,
                1 << 20,
            )
            .await
            .unwrap();
        assert_eq!(offsets(&f), vec![0, 1, 2, 3, 4, 5]);
        // Once the tagged group accepts its records, its start is past the
        // filtered ones too.
        svc.acknowledge(
            &log,
            &log,
            &only_a,
            "tagged",
            &key(),
            &member(),
            &[
                AckBatch::all(0, 0, AckType::Accept),
                AckBatch::all(3, 4, AckType::Accept),
            ],
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(log.saved.lock().unwrap()["tagged"].1.start, Offset(6));
    }

    #[tokio::test]
    async fn a_delayed_record_waits_for_its_time_across_a_new_owner() {
        let due = now_ms() + 600;
        let log = FakeLog::with_headers(&[vec![
            vec![],
            vec![("floe-deliver-at", due.to_string())],
            vec![("floe-delay-ms", "abc".to_owned())],
        ]]);
        let svc = service();
        let f = svc
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1 << 20)
            .await
            .unwrap();
        // The malformed delay is delivered at once; 1 waits.
        assert_eq!(offsets(&f), vec![0, 2]);
        svc.acknowledge(
            &log,
            &log,
            &EARLIEST,
            "g",
            &key(),
            &member(),
            &[AckBatch {
                first: Offset(0),
                last: Offset(2),
                types: vec![AckType::Accept, AckType::Gap, AckType::Accept],
            }],
        )
        .await
        .unwrap()
        .unwrap_err();
        svc.acknowledge(
            &log,
            &log,
            &EARLIEST,
            "g",
            &key(),
            &member(),
            &[
                AckBatch::all(0, 0, AckType::Accept),
                AckBatch::all(2, 2, AckType::Accept),
            ],
        )
        .await
        .unwrap()
        .unwrap();
        // Written: the start past it, and it parked with its due time.
        let saved = log.saved.lock().unwrap()["g"].1.clone();
        assert_eq!(saved.start, Offset(3));
        assert_eq!(
            saved.parked[0].state,
            DurableState::Available { not_before_ms: due }
        );
        // A new owner: nothing before its time, and told when to look again.
        *log.epoch.lock().unwrap() = Some(2);
        let other = service();
        let f = other
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1 << 20)
            .await
            .unwrap();
        assert!(f.acquired.is_empty());
        let wait = f.retry_in_ms.unwrap();
        assert!(wait > 0 && wait <= 600, "{wait}");
        tokio::time::sleep(std::time::Duration::from_millis(wait + 5)).await;
        let f = other
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1 << 20)
            .await
            .unwrap();
        assert_eq!(offsets(&f), vec![1]);
        assert!(now_ms() >= due);
    }

    /// A service whose share-partitions park 8 delayed records at most.
    fn small_parked() -> ShareService {
        ShareService::new(
            ShareConfig {
                max_delayed: 8,
                ..ShareConfig::default()
            },
            ShareGroupConfig::default(),
        )
    }

    /// Fetches and accepts what is acquired, doing the timer work the
    /// broker would start after each fetch; returns the offsets accepted.
    async fn fetch_accept(svc: &ShareService, log: &FakeLog) -> Vec<i64> {
        let f = svc
            .fetch(log, log, &EARLIEST, "g", &key(), &member(), 1_000, 1 << 20)
            .await
            .unwrap();
        let got = offsets(&f);
        for o in &got {
            svc.acknowledge(
                log,
                log,
                &EARLIEST,
                "g",
                &key(),
                &member(),
                &[AckBatch::all(*o, *o, AckType::Accept)],
            )
            .await
            .unwrap()
            .unwrap();
        }
        if let Some(claim) = svc.claim_timer_work("g", &key()) {
            svc.run_timers(log, "g", &key(), claim).await;
        }
        got
    }

    #[tokio::test]
    async fn delayed_records_past_the_parked_list_go_to_timer_buckets_and_come_back_when_due() {
        // 40 records, due in reverse order of their offsets, 20 to 800 ms
        // from now; then 5 plain records behind them.
        let base = now_ms() + 300;
        let mut recs: Vec<Vec<(&str, String)>> = (0..40)
            .map(|i| vec![("floe-deliver-at", (base + 20 * (40 - i)).to_string())])
            .collect();
        recs.extend((0..5).map(|_| vec![]));
        let log = FakeLog::with_headers(&[recs]);
        let svc = small_parked();
        // The plain records behind the backlog are not held up.
        let mut got = Vec::new();
        for _ in 0..10 {
            got.extend(fetch_accept(&svc, &log).await);
            if got.len() >= 5 {
                break;
            }
        }
        assert_eq!(got, vec![40, 41, 42, 43, 44]);
        // The parked list holds at most its cap; the rest is in buckets.
        let saved = log.saved.lock().unwrap()["g"].1.clone();
        let parked: i64 = saved.parked.iter().map(|r| r.last.0 - r.first.0 + 1).sum();
        assert!(parked <= 8, "{parked} parked");
        assert!(!saved.timers.is_empty(), "{saved:?}");
        assert_eq!(saved.start, Offset(45));
        assert!(!log.objects.lock().unwrap().is_empty());
        // Kill the owner halfway: a new one resumes from what was written.
        let mut delivered: Vec<(i64, u64)> = Vec::new();
        // The offsets each fetch handed out.
        let mut rounds: Vec<Vec<i64>> = Vec::new();
        let mut svc = svc;
        let mut moved = false;
        let deadline = now_ms() + 5_000;
        while delivered.len() < 40 && now_ms() < deadline {
            let round = fetch_accept(&svc, &log).await;
            for &o in &round {
                delivered.push((o, now_ms()));
            }
            if !round.is_empty() {
                rounds.push(round);
            }
            if !moved && delivered.len() >= 15 {
                moved = true;
                *log.epoch.lock().unwrap() = Some(2);
                svc = small_parked();
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let mut offsets: Vec<i64> = delivered.iter().map(|(o, _)| *o).collect();
        offsets.sort_unstable();
        assert_eq!(offsets, (0..40).collect::<Vec<_>>(), "each once");
        for (o, at) in &delivered {
            let due = base + 20 * (40 - *o as u64);
            assert!(*at >= due, "offset {o} delivered {} ms early", due - at);
        }
        // Delivered in due order: a fetch hands out the records due by then
        // together (in offset order; on a loaded machine several fall due
        // between two polls), and no fetch hands out a record due later
        // than one a later fetch hands out (a larger offset is due sooner).
        for pair in rounds.windows(2) {
            let (earlier, later) = (&pair[0], &pair[1]);
            assert!(
                earlier.iter().min() > later.iter().max(),
                "{earlier:?} delivered before {later:?}, which was due sooner"
            );
        }
        // Emptied buckets are deleted (the last ones once a state without
        // them is written, by the next timer task).
        fetch_accept(&svc, &log).await;
        let saved = log.saved.lock().unwrap()["g"].1.clone();
        assert!(saved.timers.is_empty(), "{saved:?}");
        assert!(log.objects.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_timer_store_that_fails_keeps_the_records_parked_and_tries_again() {
        let base = now_ms() + 60_000;
        let recs: Vec<Vec<(&str, String)>> = (0..12)
            .map(|i| vec![("floe-deliver-at", (base + i).to_string())])
            .collect();
        let log = FakeLog::with_headers(&[recs]);
        log.timers_fail
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let svc = small_parked();
        fetch_accept(&svc, &log).await;
        // Nothing written out: 8 parked, 4 wait in the window.
        assert!(log.objects.lock().unwrap().is_empty());
        assert!(
            lock(&svc.partitions)[&("g".to_owned(), key())]
                .timers
                .retry_at_ms
                > 0
        );
        assert!(
            svc.claim_timer_work("g", &key()).is_none(),
            "waits a second"
        );
        let held = |svc: &ShareService| {
            let p = lock(&svc.partitions);
            let h = &p[&("g".to_owned(), key())];
            (h.sp.parked(), h.sp.in_flight())
        };
        assert_eq!(held(&svc), (8, 4));
        log.timers_fail
            .store(false, std::sync::atomic::Ordering::SeqCst);
        lock(&svc.partitions)
            .get_mut(&("g".to_owned(), key()))
            .unwrap()
            .timers
            .retry_at_ms = 0;
        fetch_accept(&svc, &log).await;
        // Written out, and the records waiting in the window moved to the
        // room made in the parked list.
        assert!(!log.objects.lock().unwrap().is_empty());
        let (parked, in_flight) = held(&svc);
        assert!(parked <= 8 && in_flight == 0, "{parked} {in_flight}");
    }

    #[tokio::test]
    async fn a_fetch_behind_a_seal_looks_again_soon_and_takes_more_records_in() {
        // 30 records due in a minute, then one plain record.
        let base = now_ms() + 60_000;
        let mut recs: Vec<Vec<(&str, String)>> = (0..30)
            .map(|i| vec![("floe-deliver-at", (base + i).to_string())])
            .collect();
        recs.push(vec![]);
        let log = FakeLog::with_headers(&[recs]);
        let svc = ShareService::new(
            ShareConfig {
                max_delayed: 8,
                max_record_locks: 8,
                ..ShareConfig::default()
            },
            ShareGroupConfig::default(),
        );
        let (k, m) = (key(), member());
        let fetch = || svc.fetch(&log, &log, &EARLIEST, "g", &k, &m, 100, 1 << 20);
        // The parked list and the window fill with delayed records: nothing
        // acquired, and the seal they wait for is a few ms away, not the
        // minute the records are due in.
        let f = fetch().await.unwrap();
        assert!(f.acquired.is_empty());
        assert_eq!(f.retry_in_ms, Some(SEAL_RETRY_MS));
        // Each seal makes room for more; the plain record behind them comes
        // once they are all written out.
        let mut got = Vec::new();
        for _ in 0..20 {
            if let Some(claim) = svc.claim_timer_work("g", &key()) {
                svc.run_timers(&log, "g", &key(), claim).await;
            }
            let f = fetch().await.unwrap();
            got = offsets(&f);
            if !got.is_empty() {
                break;
            }
            assert_eq!(f.retry_in_ms, Some(SEAL_RETRY_MS));
        }
        assert_eq!(got, vec![30]);
    }

    #[tokio::test]
    async fn buckets_no_state_lists_are_swept_and_a_reset_deletes_them_all() {
        let base = now_ms() + 60_000;
        let recs: Vec<Vec<(&str, String)>> = (0..12)
            .map(|i| vec![("floe-deliver-at", (base + i).to_string())])
            .collect();
        let log = FakeLog::with_headers(&[recs]);
        // Left by an owner that died after writing it, before its state.
        let orphan = log
            .put_timers("g", &key(), floe_storage::timers::encode(&[]).unwrap())
            .await
            .unwrap();
        let svc = small_parked();
        fetch_accept(&svc, &log).await;
        let tokens: Vec<String> = log.objects.lock().unwrap().keys().cloned().collect();
        assert!(!tokens.is_empty());
        assert!(!tokens.contains(&orphan.token.to_string()), "swept");
        let saved = log.saved.lock().unwrap()["g"].1.clone();
        let listed: Vec<String> = saved
            .timers
            .iter()
            .map(|b| b.object.token.to_string())
            .collect();
        assert_eq!(listed.len(), tokens.len());
        assert!(listed.iter().all(|t| tokens.contains(t)));
        // Deleting the group's state (DeleteShareGroupOffsets, DeleteGroups)
        // deletes its buckets.
        svc.reset(&log, &log, &EARLIEST, "g", &key(), None)
            .await
            .unwrap();
        assert!(log.objects.lock().unwrap().is_empty());
    }

    #[test]
    fn a_refused_first_heartbeat_leaves_no_group() {
        let svc = service();
        let hb = Heartbeat {
            member_id: member(),
            member_epoch: 0,
            subscribed_topics: None,
            rack_id: None,
        };
        assert!(svc.heartbeat("g", &hb, &EARLIEST, &|_| None).0.is_err());
        assert!(svc.describe("g").is_none());
        let hb = Heartbeat {
            subscribed_topics: Some(vec!["t".into()]),
            ..hb
        };
        assert!(svc.heartbeat("g", &hb, &EARLIEST, &|_| None).0.is_ok());
        assert!(svc.has_member("g", &member()));
        assert!(svc.describe("g").is_some());
    }

    fn join(m: &MemberId) -> Heartbeat {
        Heartbeat {
            member_id: m.clone(),
            member_epoch: 0,
            subscribed_topics: Some(vec!["t".into()]),
            rack_id: None,
        }
    }

    #[test]
    fn a_groups_own_heartbeat_interval_is_told_to_its_members() {
        let svc = service();
        let (answer, _) = svc.heartbeat("g", &join(&member()), &EARLIEST, &|_| None);
        assert_eq!(answer.unwrap().heartbeat_interval_ms, 5_000);
        let own = ShareSettings {
            heartbeat_interval_ms: Some(700),
            ..EARLIEST
        };
        let (answer, _) = svc.heartbeat("h", &join(&member()), &own, &|_| None);
        assert_eq!(answer.unwrap().heartbeat_interval_ms, 700);
    }

    #[tokio::test]
    async fn a_silent_member_is_swept_out_after_its_groups_session_timeout_and_its_records_released()
     {
        let log = FakeLog::new(2);
        let svc = service();
        let quick = ShareSettings {
            session_timeout_ms: Some(30),
            ..EARLIEST
        };
        let (answer, gone) = svc.heartbeat("g", &join(&member()), &quick, &|_| None);
        assert!(answer.is_ok() && gone.is_empty());
        let f = svc
            .fetch(&log, &log, &quick, "g", &key(), &member(), 3, 1 << 20)
            .await
            .unwrap();
        assert_eq!(f.acquired.len(), 1);
        let owned = |_: &str| true;
        // Within the timeout: nobody goes.
        assert!(svc.expire_members(&owned, &|_| None).is_empty());
        tokio::time::sleep(std::time::Duration::from_millis(60)).await;
        let gone = svc.expire_members(&owned, &|_| None);
        assert_eq!(gone, vec![("g".to_owned(), member())]);
        assert!(!svc.has_member("g", &member()));
        // Its records are available again, long before their 30 s locks.
        let other = MemberId::new("other");
        let f = svc
            .fetch(&log, &log, &quick, "g", &key(), &other, 3, 1 << 20)
            .await
            .unwrap();
        assert_eq!(
            (f.acquired[0].first.0, f.acquired[0].delivery_count),
            (0, 2)
        );
    }

    #[test]
    fn the_sweep_forgets_groups_whose_shard_moved_away_without_releasing_anything() {
        let svc = service();
        let quick = ShareSettings {
            session_timeout_ms: Some(1),
            ..EARLIEST
        };
        assert!(
            svc.heartbeat("g", &join(&member()), &quick, &|_| None)
                .0
                .is_ok()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        // Not this broker's any more: forgotten, its member not "timed out"
        // (it heartbeats to the new coordinator).
        assert!(svc.expire_members(&|_| false, &|_| None).is_empty());
        assert!(svc.describe("g").is_none());
    }

    #[tokio::test]
    async fn by_duration_starts_at_the_first_recent_record_or_else_the_end() {
        let log = FakeLog::new(4);
        let svc = service();
        *log.by_time.lock().unwrap() = 6;
        let recent = settings(AutoOffsetReset::ByDuration(60_000));
        let f = svc
            .fetch(&log, &log, &recent, "g", &key(), &member(), 100, 1)
            .await
            .unwrap();
        assert_eq!(f.acquired[0].first.0, 6);
        // Nothing that recent: from the end, as "latest".
        *log.by_time.lock().unwrap() = -1;
        let f = svc
            .fetch(&log, &log, &recent, "h", &key(), &member(), 100, 1)
            .await
            .unwrap();
        assert!(f.acquired.is_empty());
        assert_eq!(log.saved.lock().unwrap()["h"].1.start, Offset(12));
    }

    fn header(base: i64, records: i32, body: usize) -> Vec<u8> {
        let mut b = vec![0u8; 61 + body];
        b[0..8].copy_from_slice(&base.to_be_bytes());
        let len = i32::try_from(b.len() - 12).unwrap();
        b[8..12].copy_from_slice(&len.to_be_bytes());
        b[23..27].copy_from_slice(&(records - 1).to_be_bytes());
        b
    }

    #[test]
    fn the_end_of_batches_is_past_the_last_whole_batch() {
        let mut two = header(10, 3, 5);
        two.extend(header(13, 2, 0));
        assert_eq!(end_of_batches(&two), Some(15));
        let cut = &two[..two.len() - 1];
        assert_eq!(end_of_batches(cut), Some(13));
        assert_eq!(end_of_batches(&two[..20]), None);
        assert_eq!(end_of_batches(&[]), None);
    }

    #[tokio::test]
    async fn a_reset_moves_the_start_at_the_owner_and_a_delete_starts_afresh() {
        let log = FakeLog::new(4);
        let svc = service();
        let f = svc
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 3, 1 << 20)
            .await
            .unwrap();
        assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (0, 2));
        ack(&svc, &log, &EARLIEST, 0, 1, AckType::Accept).await;
        assert_eq!(log.saved.lock().unwrap()["g"].1.start, Offset(2));
        // Back to 1: written before it is answered, and served from there
        // (an accepted record comes again only because the admin asked).
        let at = svc
            .reset(&log, &log, &EARLIEST, "g", &key(), Some(1))
            .await
            .unwrap();
        assert_eq!(at, Some(1));
        let saved = log.saved.lock().unwrap()["g"].1.clone();
        assert_eq!((saved.start, saved.ranges.len()), (Offset(1), 0));
        // Offset 2, acquired before the reset, is no longer held.
        let refused = svc
            .acknowledge(
                &log,
                &log,
                &EARLIEST,
                "g",
                &key(),
                &member(),
                &[AckBatch::all(2, 2, AckType::Accept)],
            )
            .await
            .unwrap();
        assert!(refused.is_err());
        let f = svc
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 2, 1 << 20)
            .await
            .unwrap();
        assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (1, 2));
        assert_eq!(f.acquired[0].delivery_count, 1);
        // Past the end: kept at the end.
        let at = svc
            .reset(&log, &log, &EARLIEST, "g", &key(), Some(1_000))
            .await
            .unwrap();
        assert_eq!(at, Some(log.hw()));
        // Deleted: nothing stored; the next fetch starts at the reset
        // policy (earliest here) again.
        let at = svc
            .reset(&log, &log, &EARLIEST, "g", &key(), None)
            .await
            .unwrap();
        assert_eq!(at, None);
        assert!(!log.saved.lock().unwrap().contains_key("g"));
        let f = svc
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 1, 1 << 20)
            .await
            .unwrap();
        assert_eq!(f.acquired[0].first.0, 0);
        // Not the owner: refused, nothing written.
        *log.epoch.lock().unwrap() = None;
        assert!(
            svc.reset(&log, &log, &EARLIEST, "g", &key(), Some(0))
                .await
                .is_err()
        );
    }

    #[test]
    fn a_share_group_with_members_is_not_deleted() {
        let svc = service();
        let topics = |_: &str| {
            Some(TopicInfo {
                id: TopicId(uuid::Uuid::nil()),
                partitions: 1,
            })
        };
        let join = Heartbeat {
            member_id: member(),
            member_epoch: 0,
            subscribed_topics: Some(vec!["t".into()]),
            rack_id: None,
        };
        let answer = svc.heartbeat("g", &join, &EARLIEST, &topics).0.unwrap();
        assert!(svc.has_group("g"));
        assert_eq!(
            svc.groups(),
            vec![("g".to_owned(), super::super::ShareGroupState::Stable)]
        );
        assert_eq!(svc.delete_group("g"), Err(ShareGroupError::NonEmptyGroup));
        let leave = Heartbeat {
            member_epoch: -1,
            subscribed_topics: None,
            ..join
        };
        let _ = answer;
        svc.heartbeat("g", &leave, &EARLIEST, &topics).0.unwrap();
        assert_eq!(
            svc.groups(),
            vec![("g".to_owned(), super::super::ShareGroupState::Empty)]
        );
        assert_eq!(svc.delete_group("g"), Ok(()));
        assert!(!svc.has_group("g"));
        assert!(svc.groups().is_empty());
    }

    // The dead-letter topic.

    /// A dead-letter partition that keeps what is appended and answers a
    /// batch repeating the last sequence of its producer and epoch as a
    /// duplicate (not stored again), as an idempotent partition does.
    #[derive(Default)]
    struct FakeDlq {
        exists: Mutex<bool>,
        stored: Mutex<Vec<Bytes>>,
        last: Mutex<HashMap<i64, (i16, i32)>>,
        /// Answers to give before the normal ones: `Err` after storing
        /// (`true`) or without storing (`false`).
        fail: Mutex<Vec<bool>>,
        /// Called on a failure (to move the partition, say).
        on_fail: Mutex<Option<Box<dyn FnMut() + Send>>>,
    }

    impl FakeDlq {
        fn new() -> Self {
            let d = Self::default();
            *d.exists.lock().unwrap() = true;
            d
        }

        fn records(&self) -> Vec<floe_storage::records::Record> {
            self.stored
                .lock()
                .unwrap()
                .iter()
                .flat_map(|b| floe_storage::records::decode_records(b, 1 << 20).unwrap())
                .collect()
        }
    }

    #[async_trait::async_trait]
    impl DeadLetterSink for FakeDlq {
        fn topic(&self, name: &str) -> Option<(TopicId, u32)> {
            (name == "dlq" && *self.exists.lock().unwrap()).then(|| (TopicId(uuid::Uuid::max()), 1))
        }

        fn topic_name(&self, _: TopicId) -> Option<String> {
            Some("src".into())
        }

        async fn append(&self, _: &PartitionKey, batch: Bytes) -> Result<(), CallError> {
            let v = floe_storage::batch::BatchView::parse(&batch, usize::MAX).unwrap();
            let (pid, epoch, seq) = (v.producer_id(), v.producer_epoch(), v.base_sequence());
            let fail = {
                let mut f = self.fail.lock().unwrap();
                (!f.is_empty()).then(|| f.remove(0))
            };
            let duplicate = self.last.lock().unwrap().get(&pid) == Some(&(epoch, seq));
            if fail != Some(false) && !duplicate {
                self.stored.lock().unwrap().push(batch.clone());
                self.last.lock().unwrap().insert(pid, (epoch, seq));
            }
            if fail.is_some() {
                if let Some(f) = self.on_fail.lock().unwrap().as_mut() {
                    f();
                }
                return Err(BrokerError::new(ErrorKind::OutcomeUnknown, "cut off").into());
            }
            Ok(())
        }
    }

    fn with_dlq() -> ShareSettings {
        ShareSettings {
            dead_letter_topic: Some(Arc::from("dlq")),
            ..EARLIEST
        }
    }

    fn quick(svc: ShareService) -> ShareService {
        ShareService {
            dead_letter_retry: (
                std::time::Duration::from_millis(5),
                std::time::Duration::from_millis(10),
            ),
            ..svc
        }
    }

    fn header_of(r: &floe_storage::records::Record, k: &str) -> Option<String> {
        r.headers
            .iter()
            .find(|h| h.key.as_ref() == k.as_bytes())
            .and_then(|h| h.value.as_ref())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// `member()` acknowledges `first..=last` of group "g" with `ty`, which
    /// must be taken.
    async fn ack(
        svc: &ShareService,
        log: &FakeLog,
        settings: &ShareSettings,
        first: i64,
        last: i64,
        ty: AckType,
    ) {
        svc.acknowledge(
            log,
            log,
            settings,
            "g",
            &key(),
            &member(),
            &[AckBatch::all(first, last, ty)],
        )
        .await
        .unwrap()
        .unwrap();
    }

    async fn reject(
        svc: &ShareService,
        log: &FakeLog,
        settings: &ShareSettings,
        first: i64,
        last: i64,
    ) {
        ack(svc, log, settings, first, last, AckType::Reject).await;
    }

    async fn run(svc: &ShareService, log: &FakeLog, dlq: &FakeDlq) {
        let epoch = svc.claim_dead_letters("g", &key()).unwrap();
        svc.run_dead_letters(log, log, dlq, "g", &key(), epoch)
            .await;
    }

    #[tokio::test]
    async fn rejected_records_are_appended_to_the_dead_letter_topic_once_then_archived() {
        let log = FakeLog::new(2);
        let svc = service();
        let dlq = FakeDlq::new();
        let settings = with_dlq();
        svc.fetch(&log, &log, &settings, "g", &key(), &member(), 3, 1 << 20)
            .await
            .unwrap();
        reject(&svc, &log, &settings, 1, 2).await;
        // The reject is written as waiting for the dead-letter topic.
        let saved = log.saved.lock().unwrap()["g"].1.clone();
        assert!(
            saved
                .ranges
                .iter()
                .any(|r| matches!(r.state, DurableState::DeadLettering { .. }))
        );
        run(&svc, &log, &dlq).await;
        let got = dlq.records();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].value.as_deref(), Some(&[1u8][..]));
        assert_eq!(header_of(&got[0], "floe-dlq-topic").as_deref(), Some("src"));
        assert_eq!(
            header_of(&got[0], "floe-dlq-partition").as_deref(),
            Some("0")
        );
        assert_eq!(header_of(&got[0], "floe-dlq-offset").as_deref(), Some("1"));
        assert_eq!(header_of(&got[1], "floe-dlq-offset").as_deref(), Some("2"));
        assert_eq!(
            header_of(&got[0], "floe-dlq-delivery-count").as_deref(),
            Some("1")
        );
        assert_eq!(
            header_of(&got[0], "floe-dlq-reason").as_deref(),
            Some("rejected")
        );
        // Archived and written: nothing waits, the claim is given back.
        let saved = log.saved.lock().unwrap()["g"].1.clone();
        assert_eq!(saved.dead_letter.next_sequence, 2);
        assert_eq!(saved.dead_letter.in_flight, None);
        assert!(
            !saved
                .ranges
                .iter()
                .any(|r| matches!(r.state, DurableState::DeadLettering { .. }))
        );
        assert_eq!(svc.claim_dead_letters("g", &key()), None);
        // Never delivered again: the next fetch skips them.
        ack(&svc, &log, &settings, 0, 0, AckType::Release).await;
        let f = svc
            .fetch(&log, &log, &settings, "g", &key(), &member(), 10, 1 << 20)
            .await
            .unwrap();
        let got: Vec<(i64, i64)> = f.acquired.iter().map(|a| (a.first.0, a.last.0)).collect();
        assert_eq!(got, vec![(0, 0), (3, 5)]);
    }

    #[tokio::test]
    async fn a_missing_dead_letter_topic_keeps_the_record_until_it_exists() {
        let log = FakeLog::new(1);
        let svc = quick(service());
        let dlq = FakeDlq::new();
        *dlq.exists.lock().unwrap() = false;
        let settings = with_dlq();
        svc.fetch(&log, &log, &settings, "g", &key(), &member(), 1, 1 << 20)
            .await
            .unwrap();
        reject(&svc, &log, &settings, 0, 0).await;
        let epoch = svc.claim_dead_letters("g", &key()).unwrap();
        let k = key();
        let task = svc.run_dead_letters(&log, &log, &dlq, "g", &k, epoch);
        let create = async {
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            // Still waiting, not archived, not delivered again.
            let held = lock(&svc.partitions)
                .get(&("g".to_owned(), key()))
                .unwrap()
                .sp
                .dead_letters_pending();
            assert_eq!(held, 1);
            *dlq.exists.lock().unwrap() = true;
        };
        tokio::join!(task, create);
        assert_eq!(dlq.records().len(), 1);
    }

    #[tokio::test]
    async fn an_append_cut_off_is_repeated_with_its_sequence_and_stored_once() {
        let log = FakeLog::new(1);
        let svc = quick(service());
        let dlq = FakeDlq::new();
        // Stored, but the answer is lost; then not stored and failed.
        *dlq.fail.lock().unwrap() = vec![true, false];
        let settings = with_dlq();
        svc.fetch(&log, &log, &settings, "g", &key(), &member(), 3, 1 << 20)
            .await
            .unwrap();
        reject(&svc, &log, &settings, 0, 1).await;
        run(&svc, &log, &dlq).await;
        let offsets: Vec<Option<String>> = dlq
            .records()
            .iter()
            .map(|r| header_of(r, "floe-dlq-offset"))
            .collect();
        assert_eq!(offsets, vec![Some("0".into()), Some("1".into())]);
    }

    #[tokio::test]
    async fn a_new_owner_repeats_the_append_under_way_and_it_is_not_stored_twice() {
        let log = Arc::new(FakeLog::new(1));
        let svc = quick(service());
        let dlq = FakeDlq::new();
        // The first append lands, its answer is lost, and the partition
        // moves to another owner (epoch 2) meanwhile.
        *dlq.fail.lock().unwrap() = vec![true];
        let moved = log.clone();
        *dlq.on_fail.lock().unwrap() = Some(Box::new(move || {
            *moved.epoch.lock().unwrap() = Some(2);
        }));
        let settings = with_dlq();
        svc.fetch(&*log, &*log, &settings, "g", &key(), &member(), 3, 1 << 20)
            .await
            .unwrap();
        reject(&svc, &log, &settings, 0, 0).await;
        // The old owner stops (its writes are refused).
        run(&svc, &log, &dlq).await;
        assert_eq!(dlq.records().len(), 1);
        let saved = log.saved.lock().unwrap()["g"].1.clone();
        assert_eq!(saved.dead_letter.in_flight, Some(Offset(0)));
        // The new owner loads that state and repeats the same append.
        let other = quick(service());
        other
            .fetch(&*log, &*log, &settings, "g", &key(), &member(), 1, 1 << 20)
            .await
            .unwrap();
        run(&other, &log, &dlq).await;
        assert_eq!(dlq.records().len(), 1, "stored once");
        let saved = log.saved.lock().unwrap()["g"].1.clone();
        assert_eq!(
            (saved.start, saved.dead_letter.in_flight),
            (Offset(1), None)
        );
    }

    #[tokio::test]
    async fn a_record_released_at_the_delivery_limit_is_dead_lettered_with_its_reason() {
        let log = FakeLog::new(1);
        let svc = service();
        let dlq = FakeDlq::new();
        let settings = ShareSettings {
            delivery_count_limit: 2,
            ..with_dlq()
        };
        for _ in 0..2 {
            let f = svc
                .fetch(&log, &log, &settings, "g", &key(), &member(), 1, 1 << 20)
                .await
                .unwrap();
            assert_eq!(f.acquired[0].first, Offset(0));
            ack(&svc, &log, &settings, 0, 0, AckType::Release).await;
        }
        run(&svc, &log, &dlq).await;
        let got = dlq.records();
        assert_eq!(got.len(), 1);
        assert_eq!(
            header_of(&got[0], "floe-dlq-reason").as_deref(),
            Some("delivery-count-limit")
        );
        assert_eq!(
            header_of(&got[0], "floe-dlq-delivery-count").as_deref(),
            Some("2")
        );
    }

    #[tokio::test]
    async fn the_groups_backoff_delays_a_released_record() {
        let log = FakeLog::new(1);
        let svc = service();
        let settings = ShareSettings {
            backoff: Backoff {
                base_ms: 60_000,
                max_ms: 60_000,
            },
            ..EARLIEST
        };
        svc.fetch(&log, &log, &settings, "g", &key(), &member(), 1, 1 << 20)
            .await
            .unwrap();
        ack(&svc, &log, &settings, 0, 0, AckType::Release).await;
        // Offset 0 waits a minute; 1 and 2 are not held up by it, and a
        // fetch that finds nothing is told when to look again.
        let f = svc
            .fetch(&log, &log, &settings, "g", &key(), &member(), 10, 1 << 20)
            .await
            .unwrap();
        let got: Vec<(i64, i64)> = f.acquired.iter().map(|a| (a.first.0, a.last.0)).collect();
        assert_eq!(got, vec![(1, 2)]);
        let f = svc
            .fetch(&log, &log, &settings, "g", &key(), &member(), 10, 1 << 20)
            .await
            .unwrap();
        assert!(f.acquired.is_empty());
        assert!(
            f.retry_in_ms.is_some_and(|ms| ms > 29_000 && ms <= 60_000),
            "{:?}",
            f.retry_in_ms
        );
    }

    #[tokio::test]
    async fn a_member_leaving_at_the_delivery_limit_leaves_dead_records_to_append() {
        let log = FakeLog::new(1);
        let svc = service();
        let dlq = FakeDlq::new();
        let settings = ShareSettings {
            delivery_count_limit: 2,
            ..with_dlq()
        };
        for _ in 0..2 {
            svc.fetch(&log, &log, &settings, "g", &key(), &member(), 1, 1 << 20)
                .await
                .unwrap();
            svc.release_member("g", &member());
        }
        assert_eq!(svc.claim_group_dead_letters("other"), vec![]);
        let claimed = svc.claim_group_dead_letters("g");
        assert_eq!(claimed.len(), 1);
        // Claimed once: a second claim finds the task running.
        assert_eq!(svc.claim_group_dead_letters("g"), vec![]);
        svc.run_dead_letters(&log, &log, &dlq, "g", &key(), claimed[0].1)
            .await;
        let got = dlq.records();
        assert_eq!(got.len(), 1);
        assert_eq!(
            header_of(&got[0], "floe-dlq-reason").as_deref(),
            Some("delivery-count-limit")
        );
    }
}
