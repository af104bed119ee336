//! The broker: owns partitions as the metadata says, sequences produced
//! batches, flushes them as WAL objects with one metadata commit per flush,
//! and serves fetches and offset lookups.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use floe_metadata::api::MetaApi;
use floe_metadata::ids::BrokerId;
use floe_metadata::model::NodeKind;
use floe_metadata::watch::ClusterWatch;
use floe_storage::batch::BatchIter;
use floe_storage::committed::{Batches, Wanted, read_batches};
use floe_storage::records::{DecodeLimits, RecordStream};
use floe_storage::segment::{SegmentMeta, SegmentReader};
use floe_storage::{
    BlockCache, CachedReader, ObjectKey, ObjectRef, Offset, PartitionKey, RangeRead, StorePool,
};
use tokio::sync::Notify;
use tokio_util_shim::CancelFlag;

use crate::admission::Admission;
use crate::config::{BrokerConfig, LogConfig};
use crate::error::{BrokerError, CallError, ErrorKind, Result};
use crate::log::{PartitionLog, ReadPlan, Status, StoredRange};

/// Batch bytes a timestamp lookup reads at a time.
const SCAN_STEP_BYTES: usize = 1024 * 1024;

/// `acks` of a produce request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    None,
    Leader,
    All,
}

impl Acks {
    pub fn from_kafka(acks: i16) -> Option<Self> {
        match acks {
            0 => Some(Acks::None),
            1 => Some(Acks::Leader),
            -1 => Some(Acks::All),
            _ => None,
        }
    }
}

/// The answer to a produce of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceOk {
    pub base_offset: i64,
    pub log_start_offset: i64,
    /// `-1` unless the topic uses `LogAppendTime`.
    pub log_append_time: i64,
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

/// A sequenced produce waiting for its acknowledgement level.
pub struct PendingProduce(Pending);

type RemoteAck =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<ProduceOk, CallError>> + Send>>;

enum Pending {
    Here(Here),
    Remote(RemoteAck),
}

/// A produce sequenced by this process's broker.
enum Here {
    Local {
        log: Arc<PartitionLog>,
        rx: Option<tokio::sync::oneshot::Receiver<Result<()>>>,
        ok: ProduceOk,
    },
    Duplicate {
        log: Arc<PartitionLog>,
        first_offset: i64,
        last_offset: i64,
    },
}

impl std::fmt::Debug for PendingProduce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Pending::Here(Here::Local { log, .. }) => write!(f, "PendingProduce({})", log.key),
            Pending::Remote(_) => write!(f, "PendingProduce(remote)"),
            Pending::Here(Here::Duplicate { log, .. }) => {
                write!(f, "PendingProduce({}, duplicate)", log.key)
            }
        }
    }
}

impl PendingProduce {
    /// A produce sequenced by a broker in another process.
    pub fn remote(
        fut: impl std::future::Future<Output = Result<ProduceOk, CallError>> + Send + 'static,
    ) -> Self {
        PendingProduce(Pending::Remote(Box::pin(fut)))
    }

    /// Waits for the acknowledgement. A remote owner that goes away before
    /// it answers is a routing failure ([`CallError::Routing`]).
    pub async fn wait(self) -> Result<ProduceOk, CallError> {
        match self.0 {
            Pending::Remote(f) => f.await,
            Pending::Here(here) => Ok(Self::wait_here(here).await?),
        }
    }

    async fn wait_here(here: Here) -> Result<ProduceOk> {
        let (log, rx, ok) = match here {
            Here::Local { log, rx, ok } => (log, rx, ok),
            Here::Duplicate {
                log,
                first_offset,
                last_offset,
            } => {
                let mut hw = log.subscribe_hw();
                loop {
                    if *hw.borrow_and_update() > last_offset {
                        break;
                    }
                    if log.status() == Status::Gone || hw.changed().await.is_err() {
                        // The original may still be in a flush that lands.
                        return Err(BrokerError::outcome_unknown(format!(
                            "{} changed hands while its first copy was being stored",
                            log.key
                        )));
                    }
                }
                let (log_start, _, _) = log.offsets();
                return Ok(ProduceOk {
                    base_offset: first_offset,
                    log_start_offset: log_start,
                    log_append_time: -1,
                });
            }
        };
        if let Some(rx) = rx {
            match rx.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(BrokerError::outcome_unknown(
                        "its flush was dropped (broker stopping)",
                    ));
                }
            }
        }
        let (log_start, _, _) = log.offsets();
        Ok(ProduceOk {
            log_start_offset: log_start,
            ..ok
        })
    }
}

mod tokio_util_shim {
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A flag every background loop checks to stop.
    #[derive(Debug, Default)]
    pub struct CancelFlag(AtomicBool);

    impl CancelFlag {
        pub fn cancel(&self) {
            self.0.store(true, Ordering::SeqCst);
        }
        pub fn is_cancelled(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }
}

pub(crate) struct Inner {
    pub cfg: BrokerConfig,
    pub meta: Arc<dyn MetaApi>,
    pub pool: Arc<StorePool>,
    pub reader: Arc<CachedReader<Arc<StorePool>>>,
    pub segments: SegmentReader<Arc<CachedReader<Arc<StorePool>>>>,
    pub logs: RwLock<HashMap<PartitionKey, Arc<PartitionLog>>>,
    pub view: ClusterWatch,
    pub flush_now: Notify,
    /// A partition being handed over waits for its last flush: the flusher
    /// starts it at once, beside flushes in flight if there is room and
    /// whatever the pacing, instead of after them (see `tasks::release`).
    pub flush_at_once: std::sync::atomic::AtomicBool,
    pub flushed: Notify,
    pub stop: CancelFlag,
    pub stopped: Notify,
    /// The consumer groups of the coordinator shards this broker owns.
    pub groups: crate::group::GroupCoordinator,
    /// Coordinator shards owned, with their epochs.
    pub shards: RwLock<HashMap<u32, u64>>,
    /// Until when this broker may serve (see [`crate::lease`]).
    pub lease: std::sync::Mutex<crate::lease::Lease>,
    /// Wakes the heartbeat loop at once (a request found the lease over).
    pub renew_now: Notify,
    /// Bytes sequenced and not yet committed, against their cap.
    pub backlog: Arc<crate::backlog::Backlog>,
    /// Which partition a flush starts with (turns, so none waits behind
    /// the others when a flush cannot take everything).
    pub flush_turn: std::sync::atomic::AtomicUsize,
    /// The transaction coordinator of the shards this broker owns.
    pub txn: Arc<crate::txn::TxnCoordinator>,
    /// Where its markers go (the partition side's writer, given later).
    pub markers: Arc<crate::txn::MarkerSlot>,
    /// Share groups (KIP-932): the groups of its coordinator shards and the
    /// share-partitions of its partitions.
    pub share: crate::share::ShareService,
    /// Clients of the other brokers this one calls (markers, share
    /// releases), one per address.
    pub peers: crate::rpc::Peers,
    /// The schedulers of the delayed topics' partitions it owns.
    pub delayed: crate::delayed::Schedulers,
}

/// A running broker. Cheap to clone.
#[derive(Clone)]
pub struct Broker {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("id", &self.inner.cfg.id)
            .finish()
    }
}

impl Broker {
    /// Registers with the metadata service and starts the background loops
    /// (heartbeat, ownership, flusher, compaction, retention).
    pub async fn start(
        cfg: BrokerConfig,
        meta: Arc<dyn MetaApi>,
        pool: Arc<StorePool>,
        view: ClusterWatch,
    ) -> Result<Broker> {
        tracing::info!(
            interval = ?cfg.flush.interval,
            bytes = cfg.flush.bytes,
            paced = cfg.flush.paced,
            after_take_over = ?cfg.flush.after_take_over,
            "flush policy"
        );
        let max_parked = cfg.share_max_parked.max(4);
        let cache = BlockCache::new(cfg.cache_bytes, 1024 * 1024)?
            .with_read_ahead_tasks(floe_storage::cache::read_ahead_tasks_for(pool.kinds()));
        let reader = Arc::new(CachedReader::new(pool.clone(), cache));
        let segments = SegmentReader::new(reader.clone(), 64 * 1024 * 1024);
        let mut lease = crate::lease::Lease::new(cfg.lease);
        let sent = tokio::time::Instant::now();
        meta.register(
            BrokerId(cfg.id),
            NodeKind::Broker,
            &cfg.advertise,
            cfg.lease,
        )
        .await?;
        lease.renewed(sent);
        let backlog = crate::backlog::Backlog::new(cfg.max_unflushed_bytes);
        let mut group_config = cfg.group.clone();
        group_config.shards = floe_metadata::state::DEFAULT_SHARDS;
        let markers = Arc::new(crate::txn::MarkerSlot::default());
        let txn_config = cfg.txn.clone();
        let groups = crate::group::GroupCoordinator::new(group_config).with_store(Arc::new(
            crate::group_store::MetaGroupStore {
                meta: meta.clone(),
                broker: cfg.id,
            },
        ));
        let inner = Arc::new_cyclic(|me: &std::sync::Weak<Inner>| {
            let me = me.clone();
            let holds: crate::txn::ShardCheck = Arc::new(move |f| {
                me.upgrade()
                    .is_some_and(|inner| Broker { inner }.holds_shard(f))
            });
            let txn =
                crate::txn::TxnCoordinator::new(meta.clone(), markers.clone(), holds, txn_config);
            Inner {
                cfg,
                meta,
                pool,
                reader,
                segments,
                logs: RwLock::new(HashMap::new()),
                view,
                flush_now: Notify::new(),
                flush_at_once: std::sync::atomic::AtomicBool::new(false),
                flushed: Notify::new(),
                stop: CancelFlag::default(),
                stopped: Notify::new(),
                groups,
                shards: RwLock::new(HashMap::new()),
                lease: std::sync::Mutex::new(lease),
                renew_now: Notify::new(),
                backlog,
                flush_turn: Default::default(),
                txn,
                markers,
                share: crate::share::ShareService::new(
                    crate::share::ShareConfig {
                        max_delayed: max_parked,
                        ..crate::share::ShareConfig::default()
                    },
                    crate::share::ShareGroupConfig::default(),
                ),
                peers: crate::rpc::Peers::default(),
                delayed: crate::delayed::Schedulers::default(),
            }
        });
        let b = Broker { inner };
        crate::metrics::register();
        tokio::spawn(crate::tasks::heartbeat(b.clone()));
        tokio::spawn(crate::tasks::ownership(b.clone()));
        tokio::spawn(crate::tasks::flusher(b.clone()));
        tokio::spawn(crate::maintenance::run(b.clone()));
        tokio::spawn(crate::txn::serve::timeouts(b.clone()));
        tokio::spawn(crate::share::rpc::sweep_members(b.clone()));
        Ok(b)
    }

    pub fn id(&self) -> u32 {
        self.inner.cfg.id
    }

    pub fn broker_id(&self) -> BrokerId {
        BrokerId(self.inner.cfg.id)
    }

    /// The group coordinator, if this broker owns `group_id`'s shard now.
    pub fn coordinator(
        &self,
        group_id: &str,
        shard_count: u32,
    ) -> std::result::Result<&crate::group::GroupCoordinator, crate::group::GroupError> {
        let shard = crate::group::shard_of(group_id, shard_count);
        if self.check_lease().is_ok()
            && self
                .inner
                .shards
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&shard)
        {
            Ok(&self.inner.groups)
        } else {
            Err(crate::group::GroupError::NotCoordinator)
        }
    }

    /// The coordinator shards this broker serves now.
    pub fn owned_shards(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .inner
            .shards
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect();
        v.sort_unstable();
        v
    }

    /// The coordinator of every shard this broker owns (ListGroups).
    pub fn groups(&self) -> &crate::group::GroupCoordinator {
        &self.inner.groups
    }

    pub fn view(&self) -> &ClusterWatch {
        &self.inner.view
    }

    /// The name of `key`'s topic in the current view; NOT_OWNER when the
    /// view does not know the topic (deleted, or not seen yet).
    pub(crate) fn topic_name(&self, key: &PartitionKey) -> Result<String> {
        self.view()
            .current()
            .by_id
            .get(&key.topic)
            .map(|t| t.name.clone())
            .ok_or_else(|| BrokerError::not_owner(*key))
    }

    pub fn meta(&self) -> &Arc<dyn MetaApi> {
        &self.inner.meta
    }

    pub fn pool(&self) -> &Arc<StorePool> {
        &self.inner.pool
    }

    /// Bytes sequenced and not yet committed (counted against
    /// `max_unflushed_bytes`).
    pub fn unflushed_bytes(&self) -> usize {
        self.inner.backlog.bytes()
    }

    /// What the block cache of store reads has served, fetched and read
    /// ahead.
    pub fn cache_stats(&self) -> &floe_storage::cache::CacheStats {
        self.inner.reader.cache().stats()
    }

    /// The partition's log if this broker owns it.
    pub fn log(&self, key: &PartitionKey) -> Option<Arc<PartitionLog>> {
        self.inner
            .logs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    pub(crate) fn logs(&self) -> Vec<Arc<PartitionLog>> {
        self.inner
            .logs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The partitions this broker serves right now.
    pub fn owned(&self) -> Vec<PartitionKey> {
        let mut v: Vec<_> = self
            .logs()
            .into_iter()
            .filter(|l| l.status() == Status::Active)
            .map(|l| l.key)
            .collect();
        v.sort_by_key(|k| (k.topic.0, k.partition));
        v
    }

    /// Whether this broker's lease surely still holds; if it ran out, the
    /// heartbeat loop is woken to renew it and the caller gets
    /// [`ErrorKind::LeaseExpired`].
    pub fn check_lease(&self) -> Result<()> {
        let now = tokio::time::Instant::now();
        let lease = self.inner.lease.lock().unwrap_or_else(|p| p.into_inner());
        if lease.serves_at(now) {
            return Ok(());
        }
        if lease.expired_at(now) {
            self.inner.renew_now.notify_one();
        }
        crate::metrics::lease_refusal();
        Err(BrokerError::new(
            ErrorKind::LeaseExpired,
            format!(
                "broker {} is not serving: its lease with the metadata service ran out",
                self.inner.cfg.id
            ),
        ))
    }

    /// The owned log of `key`, if this broker may serve it now.
    pub(crate) fn active_log(&self, key: &PartitionKey) -> Result<Arc<PartitionLog>> {
        self.check_lease()?;
        match self.log(key) {
            Some(l) if l.status() != Status::Gone => Ok(l),
            _ => Err(BrokerError::not_owner(key)),
        }
    }

    /// Validates and sequences produced batches (synchronously, so that a
    /// connection's requests are applied in the order they came). The
    /// returned [`PendingProduce`] resolves once the `acks` level is met:
    /// `acks=all` when the batches are in the object store and committed in
    /// metadata; `acks=1`/`0` at once.
    ///
    /// The bytes count against the broker's unflushed cap; when it is full,
    /// this fails at once with [`ErrorKind::Backpressure`] (see
    /// [`Broker::append_within`] to wait for room).
    pub fn append(&self, key: &PartitionKey, records: &[u8], acks: Acks) -> Result<PendingProduce> {
        let held = self.inner.backlog.try_hold(records.len());
        self.sequence(key, Bytes::copy_from_slice(records), acks, held, None)
            .map(|here| PendingProduce(Pending::Here(here)))
    }

    /// [`Broker::append`], waiting up to `room_wait` for the unflushed
    /// bytes to fall under their cap. Nothing is sequenced while it waits
    /// (a connection's requests keep their order: the caller awaits this
    /// before sequencing the next).
    pub async fn append_within(
        &self,
        key: &PartitionKey,
        records: Bytes,
        acks: Acks,
        room_wait: Duration,
    ) -> Result<PendingProduce> {
        self.verify_transactional(key, &records[..]).await?;
        let until = tokio::time::Instant::now() + room_wait;
        let held = self.inner.backlog.hold(records.len(), until).await;
        // What the topic's settings ask of the records (keys on a
        // compacted topic, its codec) is CPU work: off the runtime's
        // threads, before sequencing.
        let admission = self.log(key).map(|l| Admission::of(&l.lock().config));
        // Decided here whether or not there is work: `sequence` does not
        // look at the topic's settings again.
        let now = floe_metadata::clock::now_ms();
        let (records, admitted) = match admission {
            Some(a) if a.has_work(&records) => {
                let owned = records.clone();
                let done = tokio::task::spawn_blocking(move || a.admit(&owned, now))
                    .await
                    .map_err(|e| {
                        BrokerError::new(
                            ErrorKind::CorruptMessage,
                            format!("admission failed: {e}"),
                        )
                    })??;
                (done.records.unwrap_or(records), Some(done.delayed))
            }
            Some(_) => (records, Some(false)),
            None => (records, None),
        };
        self.sequence(key, records, acks, held, admitted)
            .map(|here| PendingProduce(Pending::Here(here)))
    }

    /// Sequences `records`; `admitted` when the topic's admission
    /// ([`Admission`]) was already decided for them (applied, or found to
    /// have nothing to do), with whether they hold delayed batches.
    fn sequence(
        &self,
        key: &PartitionKey,
        records: Bytes,
        acks: Acks,
        held: Option<crate::backlog::Held>,
        admitted: Option<bool>,
    ) -> Result<Here> {
        if self.inner.stop.is_cancelled() {
            return Err(BrokerError::new(
                ErrorKind::ShuttingDown,
                "the broker is stopping",
            ));
        }
        let log = self.active_log(key)?;
        let Some(held) = held else {
            let backlog = &self.inner.backlog;
            crate::metrics::backpressure();
            return Err(BrokerError::new(
                ErrorKind::Backpressure,
                format!(
                    "{} bytes wait for the object store (cap {}); try again",
                    backlog.bytes(),
                    backlog.cap()
                ),
            ));
        };
        let (records, delayed) = match admitted {
            Some(delayed) => (records, delayed),
            None => {
                let admission = Admission::of(&log.lock().config);
                let done = admission.admit(&records, floe_metadata::clock::now_ms())?;
                (done.records.unwrap_or(records), done.delayed)
            }
        };
        let now = floe_metadata::clock::now_ms() as i64;
        let appended = log.append(&records, acks == Acks::All, now, held, delayed)?;
        let (batches, rx, queued) = match appended {
            crate::log::Appended::New(b, rx, queued) => (b, rx, queued),
            crate::log::Appended::Duplicate {
                first_offset,
                last_offset,
            } => {
                // Answer once the original is committed, with its offsets.
                return Ok(Here::Duplicate {
                    log,
                    first_offset,
                    last_offset,
                });
            }
        };
        let flush = &self.inner.cfg.flush;
        if log.just_taken(flush.after_take_over) {
            // Its producers waited for the take-over: no pacing on top.
            self.flush_at_once();
        } else if queued >= flush.bytes || self.inner.backlog.bytes() >= flush.bytes {
            self.inner.flush_now.notify_one();
        }
        let log_append_time = match log.lock().config.timestamp_type {
            crate::config::TimestampType::LogAppendTime => now,
            crate::config::TimestampType::CreateTime => -1,
        };
        Ok(Here::Local {
            log,
            rx,
            ok: ProduceOk {
                base_offset: batches.first_offset,
                log_start_offset: 0,
                log_append_time,
            },
        })
    }

    /// [`Broker::append`] and wait.
    pub async fn produce(
        &self,
        key: &PartitionKey,
        records: &[u8],
        acks: Acks,
    ) -> Result<ProduceOk> {
        self.verify_transactional(key, records).await?;
        let held = self.inner.backlog.try_hold(records.len());
        let records = Bytes::copy_from_slice(records);
        PendingProduce::wait_here(self.sequence(key, records, acks, held, None)?).await
    }

    /// Appends a delayed topic's due records (`crate::delayed`): no
    /// admission (they are due, and carry the broker's own
    /// `floe-delayed-from` header), within the backlog's limits (waiting up
    /// to `room_wait` for room), answered once committed.
    pub(crate) async fn append_due(
        &self,
        key: &PartitionKey,
        records: Bytes,
        room_wait: Duration,
    ) -> Result<ProduceOk> {
        let until = tokio::time::Instant::now() + room_wait;
        let held = self.inner.backlog.hold(records.len(), until).await;
        PendingProduce::wait_here(self.sequence(key, records, Acks::All, held, Some(false))?).await
    }

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

    /// [`Broker::fetch`] for a client that knows the partition at
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

    /// [`Broker::fetch_at_epoch`] at an isolation level: `read_committed`
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
                    let got = self.read_ranges(&ranges, from, max_bytes, until).await?;
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
            if let Some(seg) = &r.segment {
                // A segment's index finds the batch holding `offset`.
                let from = offset.max(r.first_offset);
                let budget = wanted.max_bytes.saturating_sub(out.bytes).max(1);
                if let Some(read) = self.inner.segments.read(seg, Offset(from), budget).await? {
                    out.take(&read.bytes, &wanted).map_err(|e| {
                        BrokerError::new(ErrorKind::CorruptMessage, format!("{}: {e}", seg.log))
                    })?;
                }
                continue;
            }
            let bytes = r.byte_start..r.byte_start + r.byte_len;
            read_batches(&*self.inner.reader, &r.object, bytes, &wanted, &mut out).await?;
        }
        Ok(out.batches)
    }

    /// [`Broker::list_offset`] and the partition's epoch (-1 if unknown),
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

    /// ListOffsets for one partition.
    pub async fn list_offset(&self, key: &PartitionKey, spec: OffsetSpec) -> Result<OffsetAnswer> {
        let log = self.active_log(key)?;
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
                self.scan_records(std::slice::from_ref(r), log_start, hw, |off, ts| {
                    if ts == target && found.is_none() {
                        found = Some(off);
                    }
                    false
                })
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
                self.scan_records(&ranges, log_start, hw, |off, ts| {
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
        ranges: &[StoredRange],
        log_start: i64,
        hw: i64,
        mut f: impl FnMut(i64, i64) -> bool,
    ) -> Result<()> {
        for r in ranges {
            let mut offset = r.first_offset.max(log_start);
            while offset <= r.last_offset && offset < hw {
                let batches = self
                    .read_ranges(std::slice::from_ref(r), offset, SCAN_STEP_BYTES, hw)
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
        crate::maintenance::truncate(self, &log, log.epoch(), target).await
    }

    /// Compacts every owned partition now (tests and tools).
    pub async fn compact_now(&self) -> Result<usize> {
        let mut n = 0;
        for log in self.logs() {
            n += crate::maintenance::compact(self, &log).await?;
        }
        Ok(n)
    }

    /// Cleans every owned partition of a compacted topic now, as if no
    /// cleaning had run before (tests; the maintenance task does it every
    /// `compaction_interval`). Returns the records dropped.
    pub async fn clean_now(&self) -> Result<usize> {
        let mut cleaner = crate::cleaner::Cleaner::default();
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
            if crate::maintenance::apply_retention(self, &log)
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
        crate::maintenance::sweep(self, &mut Default::default()).await
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

    /// How long a drained broker keeps answering before it stops (see
    /// [`Broker::drain`]).
    pub const DRAINED_LINGER: Duration = Duration::from_millis(200);

    /// Hands everything this broker owns to the other brokers before it
    /// stops (a graceful stop, `SIGTERM`): asks the metadata service to
    /// drain it, so the controller hands its partitions and coordinator
    /// shards over (each is flushed, then released, and its new owner takes
    /// it at the next epoch) and gives it nothing new; then waits, up to
    /// `within`, until it owns nothing. Meanwhile it keeps serving and
    /// renewing its lease, so a client sees at most a short pause per
    /// partition (its writes wait in the proxy for the new owner). Once it
    /// owns nothing it goes on answering for [`Self::DRAINED_LINGER`], so
    /// that calls routed here by a view a moment old are refused cleanly
    /// rather than cut off by the process ending. Returns
    /// whether everything moved; with no other live broker there is nowhere
    /// to move to, and it returns false at once.
    pub async fn drain(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        let me = self.broker_id();
        // A live broker to hand over to (not one draining too).
        let others = || {
            self.inner.view.current().nodes.iter().any(|n| {
                n.id != me
                    && n.kind == floe_metadata::model::NodeKind::Broker
                    && n.state == floe_metadata::model::NodeState::Live
            })
        };
        if !others() {
            tracing::info!(broker = %me, "no other live broker: stopping without a hand-over");
            return false;
        }
        let started = tokio::time::Instant::now();
        loop {
            match self.inner.meta.drain(me).await {
                Ok(()) => break,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::warn!(error = %e, "asking to be drained failed; will retry");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "asking to be drained failed; stopping without a hand-over");
                    return false;
                }
            }
        }
        tracing::info!(broker = %me, partitions = self.logs().len(), shards = self.owned_shards().len(), "draining: handing everything over");
        loop {
            let (partitions, shards) = (self.logs().len(), self.owned_shards().len());
            if partitions == 0 && shards == 0 {
                tracing::info!(broker = %me, elapsed_ms = started.elapsed().as_millis() as u64, "drained: everything handed over");
                // A proxy whose view has not shown the last release yet may
                // still send a write here: it is refused (nothing is owned)
                // and the proxy sends it to the new owner, where a process
                // already gone would have broken the call off and left
                // its outcome unknown (REQUEST_TIMED_OUT to the client).
                tokio::time::sleep(Self::DRAINED_LINGER).await;
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(broker = %me, partitions, shards, "drain did not finish in time; stopping anyway");
                return false;
            }
            if !others() {
                // Every other broker is draining or gone (the whole cluster
                // is being stopped): nobody will take the rest.
                tracing::info!(broker = %me, partitions, shards, "no live broker left to hand over to; stopping");
                return false;
            }
            // Wake the ownership loop at once rather than at its next round.
            let mut rx = self.inner.view.subscribe();
            let _ = tokio::time::timeout(Duration::from_millis(50), rx.changed()).await;
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

    /// Takes a partition over at `epoch`: loads its committed index from metadata.
    pub(crate) async fn take_over(
        &self,
        key: PartitionKey,
        topic: String,
        epoch: u64,
        config: LogConfig,
    ) -> Result<()> {
        let idx = self.inner.meta.partition_index(key, 0).await?;
        let info = idx.info;
        if info.owner != Some(self.broker_id()) || info.epoch.0 != epoch {
            return Err(BrokerError::not_owner(key));
        }
        let mut ranges = idx
            .entries
            .into_iter()
            .map(|e| StoredRange {
                first_offset: e.first_offset,
                last_offset: e.last_offset,
                max_timestamp: e.max_timestamp,
                object: e.object,
                object_id: e.object_id.0,
                byte_start: e.byte_start,
                byte_len: e.byte_len,
                segment: None,
                committed_ms: 0,
            })
            .collect::<Vec<_>>();
        for r in ranges.iter_mut().filter(|r| r.is_segment()) {
            r.segment = Some(Arc::new(self.segment_objects(&r.object, r).await?));
        }
        let producers = crate::producer::Producers::from_batches(idx.producers);
        let txns = idx.txns;
        let log = Arc::new(PartitionLog::new(
            key,
            topic,
            epoch,
            config,
            crate::log::Committed {
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
        self.inner.share.forget_partition(key);
    }

    /// How this broker flushes (see [`crate::flush`]).
    pub(crate) fn flush_settings(&self) -> crate::flush::Flush<'_> {
        crate::flush::Flush {
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

impl Broker {
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
