//! The partition owner at the broker's core: the logs of the partitions
//! this broker owns (sequencing, producer state, the transactions' side on
//! a partition, its last stable offset), their flushes to the object store,
//! maintenance (compaction, retention, the cleaner), the lease that lets the
//! broker serve, and delayed-record holds.
//!
//! It knows nothing of the coordinators (groups, share groups,
//! transactions): they call [`Partitions`], and hear of what it does through
//! the one [`Listener`] the broker gives it.

pub(crate) mod admission;
pub(crate) mod backlog;
pub(crate) mod cleaner;
pub(crate) mod compaction;
mod control;
pub(crate) mod delay_headers;
pub mod delayed;
pub(crate) mod flush;
pub(crate) mod lease;
pub mod log;
pub(crate) mod maintenance;
mod owner;
mod produce;
pub mod producer;
mod read;
pub(crate) mod tasks;
pub mod txn_log;
mod txn_markers;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use floe_metadata::api::MetaApi;
use floe_metadata::ids::BrokerId;
use floe_metadata::model::NodeKind;
use floe_metadata::watch::ClusterWatch;
use floe_storage::segment::SegmentReader;
use floe_storage::{BlockCache, CachedReader, PartitionKey, StorePool};
use tokio::sync::Notify;

use crate::config::BrokerConfig;
use crate::error::{BrokerError, ErrorKind, Result};
use log::{PartitionLog, Status};

pub use owner::{LocalOwner, PartitionOwner};
pub use produce::{Acks, PendingProduce, ProduceOk};
pub use read::{FetchData, OffsetAnswer, OffsetSpec};
pub use txn_markers::ProducerInfo;

/// What the partition owner tells the rest of the broker (the
/// coordinators), which it does not know. Given once, after start.
pub trait Listener: Send + Sync {
    /// `key` is no longer served here (moved away, deleted, or lost with
    /// the lease).
    fn partition_dropped(&self, key: &PartitionKey);

    /// The lease ran out and was renewed: `view` is the cluster as the
    /// metadata service itself answered (not the watch, which may be as old
    /// as the lapse). Before the broker serves again, whatever else it owns
    /// keeps only what `view` still gives it at the same epoch. Returns
    /// (kept, dropped).
    fn lease_revalidated(&self, view: &floe_metadata::model::ClusterView) -> (usize, usize);
}

pub(crate) mod cancel {
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
    pub stop: cancel::CancelFlag,
    pub stopped: Notify,
    /// Until when this broker may serve (see [`lease`]).
    pub lease: std::sync::Mutex<lease::Lease>,
    /// Wakes the heartbeat loop at once (a request found the lease over).
    pub renew_now: Notify,
    /// Bytes sequenced and not yet committed, against their cap.
    pub backlog: Arc<backlog::Backlog>,
    /// Which partition a flush starts with (turns, so none waits behind
    /// the others when a flush cannot take everything).
    pub flush_turn: std::sync::atomic::AtomicUsize,
    /// The schedulers of the delayed topics' partitions it owns.
    pub delayed: delayed::Schedulers,
    /// Who hears of dropped partitions and revalidated leases.
    pub listener: OnceLock<Arc<dyn Listener>>,
}

/// The partitions a broker owns, and what serves them. Cheap to clone.
#[derive(Clone)]
pub struct Partitions {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Partitions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partitions")
            .field("broker", &self.inner.cfg.id)
            .finish()
    }
}

impl Partitions {
    /// Registers with the metadata service and starts the partition owner's
    /// background loops (heartbeat, ownership, flusher, maintenance).
    pub async fn start(
        cfg: BrokerConfig,
        meta: Arc<dyn MetaApi>,
        pool: Arc<StorePool>,
        view: ClusterWatch,
    ) -> Result<Partitions> {
        tracing::info!(
            interval = ?cfg.flush.interval,
            bytes = cfg.flush.bytes,
            paced = cfg.flush.paced,
            after_take_over = ?cfg.flush.after_take_over,
            "flush policy"
        );
        let cache = BlockCache::new(cfg.cache_bytes, 1024 * 1024)?
            .with_read_ahead_tasks(floe_storage::cache::read_ahead_tasks_for(pool.kinds()));
        let reader = Arc::new(CachedReader::new(pool.clone(), cache));
        let segments = SegmentReader::new(reader.clone(), 64 * 1024 * 1024);
        let mut lease = lease::Lease::new(cfg.lease);
        let sent = tokio::time::Instant::now();
        meta.register(
            BrokerId(cfg.id),
            NodeKind::Broker,
            &cfg.advertise,
            cfg.lease,
        )
        .await?;
        lease.renewed(sent);
        let backlog = backlog::Backlog::new(cfg.max_unflushed_bytes);
        let inner = Arc::new(Inner {
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
            stop: cancel::CancelFlag::default(),
            stopped: Notify::new(),
            lease: std::sync::Mutex::new(lease),
            renew_now: Notify::new(),
            backlog,
            flush_turn: Default::default(),
            delayed: delayed::Schedulers::default(),
            listener: OnceLock::new(),
        });
        let p = Partitions { inner };
        crate::metrics::register();
        tokio::spawn(tasks::heartbeat(p.clone()));
        tokio::spawn(tasks::ownership(p.clone()));
        tokio::spawn(tasks::flusher(p.clone()));
        tokio::spawn(maintenance::run(p.clone()));
        Ok(p)
    }

    /// Gives the one listener of dropped partitions and revalidated leases
    /// (false if one was given already).
    pub fn set_listener(&self, l: Arc<dyn Listener>) -> bool {
        self.inner.listener.set(l).is_ok()
    }

    /// Returns when the broker stops.
    pub async fn stopped(&self) {
        self.inner.stopped.notified().await
    }

    /// What a write of this broker as `partition`'s owner at `epoch` is
    /// fenced by in the metadata.
    pub fn owner_fence(
        &self,
        partition: &PartitionKey,
        epoch: u64,
    ) -> floe_metadata::api::calls::OwnerFence {
        floe_metadata::api::calls::OwnerFence {
            broker: self.broker_id(),
            partition: *partition,
            epoch: floe_metadata::ids::Epoch(epoch),
        }
    }

    /// The settings the broker started with.
    pub fn config(&self) -> &BrokerConfig {
        &self.inner.cfg
    }

    pub fn id(&self) -> u32 {
        self.inner.cfg.id
    }

    pub fn broker_id(&self) -> BrokerId {
        BrokerId(self.inner.cfg.id)
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
}
