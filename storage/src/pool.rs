//! A pool of object-store endpoints with failover to a new object.
//!
//! A write goes to a healthy endpoint under a key that embeds a fresh
//! [`WriteToken`]. Each endpoint has an adaptive deadline learnt from its
//! recent writes ([`crate::latency`]): a write still running past it is
//! *hedged* — the same bytes are written as a new object on another
//! endpoint (the same one when there is only one) while the first attempt
//! keeps going — and whichever lands first is the object. A write that
//! errors, or runs past the hard `write_timeout`, is abandoned and written
//! again as a new object. The caller gets back the [`ObjectRef`] of the
//! object that really landed; the others are never referenced, and the pool
//! deletes them once their attempt has ended.
//!
//! An endpoint that failed a write or was hedged away from is benched: new
//! writes skip it for `bench_cooldown`, then a small probe (write, read
//! back, delete) must pass within its deadline before it takes writes
//! again.
//!
//! Reads can only go to the endpoint that holds the object. A read request
//! slower than the endpoint's reads usually are (the same adaptive
//! deadline, learnt from its reads) is asked again beside the first, and
//! the first answer wins; that rides out one stuck connection, not an
//! endpoint that is down, whose reads fail after `read_timeout` per attempt.

use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectStore, ObjectStoreExt, PutOptions, PutPayload};
use tokio::time::Instant;

use crate::error::{ErrorKind, Result, StorageError};
use crate::ids::{EndpointId, ObjectKey, ObjectRef};
use crate::latency::{DeadlinePolicy, LatencyWindow};

/// Timeouts and retry limits of a pool.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Hard deadline of one write attempt; past it the attempt is abandoned
    /// (it was hedged long before, at its adaptive deadline).
    pub write_timeout: Duration,
    /// How the adaptive deadline, past which a write is hedged, is derived.
    pub deadline: DeadlinePolicy,
    /// Deadline of one read attempt.
    pub read_timeout: Duration,
    /// How long an endpoint that failed a write, or was too slow, is skipped
    /// by new writes before it is probed.
    pub bench_cooldown: Duration,
    /// Attempts per write before giving up (each one a new object; a hedge
    /// is an attempt).
    pub max_write_attempts: u32,
    /// Attempts per read (same object, same endpoint) for retryable errors.
    pub read_attempts: u32,
    /// Pause before retrying on an endpoint that already failed this write.
    pub retry_backoff: Duration,
    /// Large puts and range reads of local folders bypass the page cache
    /// (`O_DIRECT`, [`crate::direct`]).
    pub direct_io: bool,
}

impl Default for PoolOptions {
    fn default() -> Self {
        Self {
            write_timeout: Duration::from_secs(10),
            deadline: DeadlinePolicy::default(),
            read_timeout: Duration::from_secs(10),
            bench_cooldown: Duration::from_secs(10),
            max_write_attempts: 6,
            read_attempts: 3,
            retry_backoff: Duration::from_millis(50),
            direct_io: false,
        }
    }
}

impl PoolOptions {
    pub fn validate(&self) -> Result<()> {
        if self.write_timeout.is_zero() || self.read_timeout.is_zero() {
            return Err(StorageError::config("storage timeouts must be above zero"));
        }
        if self.max_write_attempts == 0 || self.read_attempts == 0 {
            return Err(StorageError::config(
                "storage attempt counts must be at least 1",
            ));
        }
        let d = &self.deadline;
        if d.min.is_zero() || d.min > d.max {
            return Err(StorageError::config(
                "the write deadline's floor must be above zero and at most its ceiling",
            ));
        }
        if !(d.multiplier.is_finite() && d.multiplier >= 1.0) {
            return Err(StorageError::config(
                "the write deadline's multiplier must be at least 1",
            ));
        }
        Ok(())
    }
}

/// A unique name for one write attempt. Keys built from it are never reused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WriteToken(String);

impl WriteToken {
    fn fresh() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WriteToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Reading a byte range of an object, through the pool or a cache in front of it.
///
/// An implementation returns exactly `range.end - range.start` bytes or an
/// error; callers still check, and treat a short read as an error.
pub trait RangeRead: Send + Sync {
    fn read_range(
        &self,
        obj: &ObjectRef,
        range: Range<u64>,
    ) -> impl Future<Output = Result<Bytes>> + Send;

    /// A read that stays between two multiples of this comes back without
    /// a copy (a block cache's block size); `None`: every range costs alike.
    fn read_boundary(&self) -> Option<u64> {
        None
    }

    /// Starts reading `range` of `obj` in the background, so that a
    /// sequential reader finds its next read ready: a cache's read-ahead.
    /// Never waits and never fails (a read-ahead that cannot run is
    /// skipped; the read itself comes later and reports its own errors).
    /// By default nothing happens.
    fn read_ahead(&self, _obj: &ObjectRef, _range: Range<u64>) {}
}

impl<T: RangeRead> RangeRead for Arc<T> {
    fn read_range(
        &self,
        obj: &ObjectRef,
        range: Range<u64>,
    ) -> impl Future<Output = Result<Bytes>> + Send {
        (**self).read_range(obj, range)
    }
    fn read_boundary(&self) -> Option<u64> {
        (**self).read_boundary()
    }
    fn read_ahead(&self, obj: &ObjectRef, range: Range<u64>) {
        (**self).read_ahead(obj, range)
    }
}

impl<T: RangeRead> RangeRead for &T {
    fn read_range(
        &self,
        obj: &ObjectRef,
        range: Range<u64>,
    ) -> impl Future<Output = Result<Bytes>> + Send {
        (**self).read_range(obj, range)
    }
    fn read_boundary(&self) -> Option<u64> {
        (**self).read_boundary()
    }
    fn read_ahead(&self, obj: &ObjectRef, range: Range<u64>) {
        (**self).read_ahead(obj, range)
    }
}

/// Whether an endpoint takes new writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Healthy,
    /// Skipped by new writes until `until`; then probed.
    Benched {
        until: Instant,
    },
    /// Its cooldown is over and a probe is running.
    Probing,
}

/// What kind of store an endpoint is (its URL's scheme): the broker picks
/// its flush policy by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreKind {
    Local,
    Memory,
    S3,
    Hdfs,
}

impl StoreKind {
    /// Whether every request is a network round trip with a price (S3) or
    /// a cost on a shared server (HDFS's NameNode): such stores want fewer,
    /// larger objects.
    pub fn is_remote(self) -> bool {
        matches!(self, StoreKind::S3 | StoreKind::Hdfs)
    }

    /// Whether a pool of these kinds of store is to be treated as remote:
    /// any endpoint is (a write or a read may go to any of them).
    pub fn any_remote(kinds: impl IntoIterator<Item = StoreKind>) -> bool {
        kinds.into_iter().any(StoreKind::is_remote)
    }

    /// Whether a slow write may be hedged on the same endpoint (when the
    /// pool has no other): a new request to a remote store may take a
    /// healthy connection or server; a second write to a local disk only
    /// competes with the first.
    pub fn hedges_in_place(self) -> bool {
        self != StoreKind::Local
    }
}

struct Endpoint {
    id: EndpointId,
    store: Arc<dyn ObjectStore>,
    kind: StoreKind,
    /// The folder of a local endpoint (for [`StorePool::remove_partial_writes`]).
    local_root: Option<std::path::PathBuf>,
    /// How other programs name this endpoint's objects (`file:///…/`,
    /// `s3://bucket/prefix/`); `None` for a pool built by hand.
    base_uri: Option<String>,
    health: Mutex<Health>,
    /// Recent writes (the adaptive write deadline).
    latency: LatencyWindow,
    /// Recent reads (when a read is asked for again beside the first).
    read_latency: LatencyWindow,
    written: AtomicU64,
    abandoned: AtomicU64,
    hedged: AtomicU64,
    metrics: EndpointMetrics,
}

/// The endpoint's series on the process's metrics recorder (registered when
/// the pool is built, so that they are served at zero from the start).
struct EndpointMetrics {
    /// `floe_store_writes_total`: write attempts that succeeded here.
    writes: metrics::Counter,
    /// `floe_store_abandoned_writes_total`: attempts abandoned here.
    abandoned: metrics::Counter,
    /// `floe_store_failovers_total`: writes that landed here after an
    /// attempt on another endpoint was abandoned or hedged.
    failovers: metrics::Counter,
    /// `floe_store_hedged_writes_total`: attempts here that passed their
    /// adaptive deadline, so that the bytes were also written elsewhere.
    hedged: metrics::Counter,
    /// `floe_store_hedged_reads_total`: reads here slower than the
    /// endpoint's adaptive deadline, asked for again beside the first.
    hedged_reads: metrics::Counter,
    /// `floe_store_probes_total{outcome="ok"}` and `{outcome="failed"}`.
    probes_ok: metrics::Counter,
    probes_failed: metrics::Counter,
    /// `floe_store_write_deadline_seconds`: the adaptive deadline of a
    /// small write here now.
    deadline: metrics::Gauge,
    /// `floe_store_endpoint_benched`: 1 while new writes skip the endpoint.
    benched: metrics::Gauge,
}

impl EndpointMetrics {
    fn new(id: &EndpointId) -> Self {
        static DESCRIBED: std::sync::Once = std::sync::Once::new();
        DESCRIBED.call_once(|| {
            metrics::describe_counter!(
                "floe_store_writes_total",
                "write attempts that succeeded, by endpoint"
            );
            metrics::describe_counter!(
                "floe_store_abandoned_writes_total",
                "write attempts abandoned (error, hard deadline, or a hedge landed first), by endpoint"
            );
            metrics::describe_counter!(
                "floe_store_failovers_total",
                "writes that landed on this endpoint after an attempt elsewhere was abandoned or hedged"
            );
            metrics::describe_counter!(
                "floe_store_hedged_writes_total",
                "write attempts that passed the endpoint's adaptive deadline, so the bytes were also written as a new object"
            );
            metrics::describe_counter!(
                "floe_store_hedged_reads_total",
                "reads slower than the endpoint's adaptive deadline, asked for again beside the first"
            );
            metrics::describe_counter!(
                "floe_store_probes_total",
                "probes (write, read back, delete) of a benched endpoint after its cooldown, by outcome"
            );
            metrics::describe_gauge!(
                "floe_store_write_deadline_seconds",
                "the adaptive deadline of a small write on this endpoint"
            );
            metrics::describe_counter!(
                "floe_store_errors_total",
                "failed calls to an endpoint, by operation (not-found answers excluded)"
            );
            metrics::describe_gauge!(
                "floe_store_endpoint_benched",
                "1 while new writes skip the endpoint after a failed or slow write"
            );
        });
        let endpoint = id.as_str().to_string();
        Self {
            writes: metrics::counter!("floe_store_writes_total", "endpoint" => endpoint.clone()),
            abandoned: metrics::counter!("floe_store_abandoned_writes_total", "endpoint" => endpoint.clone()),
            failovers: metrics::counter!("floe_store_failovers_total", "endpoint" => endpoint.clone()),
            hedged: metrics::counter!("floe_store_hedged_writes_total", "endpoint" => endpoint.clone()),
            hedged_reads: metrics::counter!("floe_store_hedged_reads_total", "endpoint" => endpoint.clone()),
            probes_ok: metrics::counter!("floe_store_probes_total", "endpoint" => endpoint.clone(), "outcome" => "ok"),
            probes_failed: metrics::counter!("floe_store_probes_total", "endpoint" => endpoint.clone(), "outcome" => "failed"),
            deadline: metrics::gauge!("floe_store_write_deadline_seconds", "endpoint" => endpoint.clone()),
            benched: metrics::gauge!("floe_store_endpoint_benched", "endpoint" => endpoint),
        }
    }
}

/// Counts a failed call to an endpoint (`floe_store_errors_total`); a
/// missing object is an answer, not an error of the endpoint.
fn count_error(endpoint: &EndpointId, op: &'static str, err: &StorageError) {
    if err.kind() != ErrorKind::NotFound {
        metrics::counter!("floe_store_errors_total", "endpoint" => endpoint.as_str().to_string(), "op" => op)
            .increment(1);
    }
}

/// Write counts of one endpoint since the pool was built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointStats {
    pub id: EndpointId,
    /// Write attempts (objects or groups) that succeeded here.
    pub written: u64,
    /// Write attempts abandoned here (error, hard deadline, or lost to a hedge).
    pub abandoned: u64,
    /// Write attempts here that passed their adaptive deadline and were hedged.
    pub hedged: u64,
    /// Whether new writes skip it (benched, or benched and being probed).
    pub benched: bool,
}

/// Bytes of a probe object.
const PROBE_BYTES: usize = 1024;

/// Attempts of one write running at once: the first and one hedge.
const MAX_RUNNING_ATTEMPTS: usize = 2;

impl Endpoint {
    fn health(&self) -> Health {
        *self.health.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_health(&self, h: Health) {
        *self.health.lock().unwrap_or_else(|p| p.into_inner()) = h;
        self.metrics
            .benched
            .set(if h == Health::Healthy { 0.0 } else { 1.0 });
    }

    fn bench(&self, cooldown: Duration) {
        self.set_health(Health::Benched {
            until: Instant::now() + cooldown,
        });
    }

    /// When the endpoint may take writes again (now if it does).
    fn available_at(&self, now: Instant) -> Instant {
        match self.health() {
            Health::Benched { until } => until.max(now),
            Health::Healthy | Health::Probing => now,
        }
    }

    /// The adaptive deadline of a write of `bytes` here.
    fn deadline(&self, opts: &PoolOptions, bytes: u64) -> Duration {
        self.latency
            .deadline(&opts.deadline, bytes, opts.write_timeout)
    }

    fn record_write(&self, opts: &PoolOptions, took: Duration, bytes: u64) {
        self.latency.record(&opts.deadline, took, bytes);
        self.metrics
            .deadline
            .set(self.deadline(opts, 0).as_secs_f64());
    }
}

/// What the pool shares with the tasks it spawns (probes, clean-ups).
struct Shared {
    endpoints: Vec<Arc<Endpoint>>,
    opts: PoolOptions,
    /// The key this pool's probes write (one per pool, deleted after each).
    probe_key: ObjectKey,
}

impl Shared {
    /// Whether new writes may go to endpoint `i` now. An endpoint whose
    /// cooldown is over is probed (in the background) and takes writes once
    /// the probe has passed.
    fn ready(self: &Arc<Self>, i: usize, now: Instant) -> bool {
        let ep = &self.endpoints[i];
        let mut h = ep.health.lock().unwrap_or_else(|p| p.into_inner());
        match *h {
            Health::Healthy => true,
            Health::Probing => false,
            Health::Benched { until } if until > now => false,
            Health::Benched { .. } => match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    *h = Health::Probing;
                    rt.spawn(probe(self.clone(), i));
                    false
                }
                // No runtime to probe on (a synchronous caller): take it back.
                Err(_) => {
                    *h = Health::Healthy;
                    drop(h);
                    ep.metrics.benched.set(0.0);
                    true
                }
            },
        }
    }
}

/// Writes a small object to a benched endpoint, reads it back and deletes
/// it; within the endpoint's deadline each, the endpoint takes writes
/// again, else it is benched for another cooldown.
async fn probe(shared: Arc<Shared>, i: usize) {
    let ep = &shared.endpoints[i];
    let opts = &shared.opts;
    let path = crate::ids::path_of(&shared.probe_key);
    let body = Bytes::from(
        format!("floe probe {}", ep.id)
            .into_bytes()
            .repeat(PROBE_BYTES / 16),
    );
    let deadline = ep.deadline(opts, body.len() as u64);
    let started = Instant::now();
    let put = tokio::time::timeout(
        deadline,
        ep.store
            .put_opts(&path, body.clone().into(), PutOptions::default()),
    )
    .await;
    let outcome = match put {
        Ok(Ok(_)) => {
            let took = started.elapsed();
            let read =
                tokio::time::timeout(deadline, ep.store.get_range(&path, 0..body.len() as u64))
                    .await;
            match read {
                Ok(Ok(got)) if got == body => {
                    ep.record_write(opts, took, body.len() as u64);
                    Ok(())
                }
                Ok(Ok(_)) => Err("read back other bytes".to_string()),
                Ok(Err(e)) => Err(format!("read back: {e}")),
                Err(_) => Err(format!("read back passed its {deadline:?} deadline")),
            }
        }
        Ok(Err(e)) => Err(format!("write: {e}")),
        Err(_) => Err(format!("write passed its {deadline:?} deadline")),
    };
    match outcome {
        Ok(()) => {
            ep.set_health(Health::Healthy);
            ep.metrics.probes_ok.increment(1);
            tracing::info!(endpoint = %ep.id, took = ?started.elapsed(), "probe passed; endpoint takes writes again");
        }
        Err(why) => {
            ep.bench(opts.bench_cooldown);
            ep.metrics.probes_failed.increment(1);
            tracing::warn!(endpoint = %ep.id, error = %why, cooldown = ?opts.bench_cooldown, "probe failed; endpoint stays benched");
        }
    }
    let _ = tokio::time::timeout(opts.write_timeout, ep.store.delete(&path)).await;
}

/// One attempt of a write: where it went and what it wrote.
struct Attempt {
    idx: usize,
    token: WriteToken,
    parts: Vec<(ObjectKey, u64)>,
    started: Instant,
    /// Past this the attempt is hedged.
    hedge_at: Instant,
    deadline: Duration,
    running: bool,
    hedged: bool,
}

/// The end of attempt `i` of a write.
type AttemptFuture = BoxFuture<'static, (usize, Result<()>)>;

/// Writes `parts` to `ep`, all or none, within `hard`.
async fn write_parts(
    ep: &Endpoint,
    parts: &[(ObjectKey, PutPayload)],
    hard: Duration,
) -> Result<()> {
    let writes = parts.iter().map(|(key, payload)| {
        let path = crate::ids::path_of(key);
        let store = ep.store.clone();
        let payload = payload.clone();
        async move {
            store
                .put_opts(&path, payload, PutOptions::default())
                .await
                .map_err(|e| StorageError::from_object_store(format!("put {}:{path}", ep.id), e))
        }
    });
    let res = match tokio::time::timeout(hard, futures::future::try_join_all(writes)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(StorageError::with_source(
            ErrorKind::Unavailable,
            format!("write to endpoint {} failed", ep.id),
            e,
        )),
        Err(_) => Err(StorageError::new(
            ErrorKind::Timeout,
            format!("write to endpoint {} passed its {hard:?} deadline", ep.id),
        )),
    };
    res.inspect_err(|e| count_error(&ep.id, "put", e))
}

/// Deletes the objects of an abandoned attempt, which are never referenced
/// (the write landed elsewhere under another key). Tried again a few times
/// while the endpoint fails; an object a late write lands after the last
/// try stays, unknown to the metadata, until the brokers' orphan scan
/// (`floe_broker::orphans`) finds it by listing the store.
async fn delete_abandoned(ep: Arc<Endpoint>, keys: Vec<ObjectKey>, opts: PoolOptions) {
    const PAUSES: [u64; 5] = [0, 1, 5, 30, 120];
    let mut left = keys;
    for pause in PAUSES {
        tokio::time::sleep(Duration::from_secs(pause)).await;
        let mut still = Vec::new();
        for key in left {
            let path = crate::ids::path_of(&key);
            match tokio::time::timeout(opts.write_timeout, ep.store.delete(&path)).await {
                Ok(Ok(()) | Err(object_store::Error::NotFound { .. })) => {}
                _ => still.push(key),
            }
        }
        if still.is_empty() {
            return;
        }
        left = still;
    }
    tracing::warn!(endpoint = %ep.id, objects = ?left, "cannot delete the objects of abandoned writes; they stay unreferenced");
}

/// One read request of `range` of `obj`, within `hard`; a short answer is
/// an error.
async fn read_once(
    ep: &Endpoint,
    path: &object_store::path::Path,
    obj: &ObjectRef,
    range: Range<u64>,
    hard: Duration,
) -> Result<Bytes> {
    let want = range.end - range.start;
    let res = tokio::time::timeout(hard, ep.store.get_range(path, range.clone())).await;
    let err = match res {
        Ok(Ok(bytes)) if bytes.len() as u64 == want => return Ok(bytes),
        Ok(Ok(bytes)) => StorageError::new(
            ErrorKind::Unavailable,
            format!("read of {obj} {range:?} returned {} bytes", bytes.len()),
        ),
        Ok(Err(e)) => StorageError::from_object_store(format!("read {obj}"), e),
        Err(_) => StorageError::new(
            ErrorKind::Timeout,
            format!("read of {obj} passed its {hard:?} deadline"),
        ),
    };
    count_error(&ep.id, "get", &err);
    Err(err)
}

/// One or more object-store endpoints used as one.
pub struct StorePool {
    shared: Arc<Shared>,
    cursor: AtomicUsize,
}

impl fmt::Debug for StorePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<_> = self.endpoints().iter().map(|e| e.id.as_str()).collect();
        f.debug_struct("StorePool")
            .field("endpoints", &ids)
            .field("opts", &self.shared.opts)
            .finish()
    }
}

impl StorePool {
    /// A pool over stores that are already built (see [`crate::backend`] to
    /// build them from URLs). Endpoint ids must be distinct.
    pub fn new(stores: Vec<(EndpointId, Arc<dyn ObjectStore>)>, opts: PoolOptions) -> Result<Self> {
        opts.validate()?;
        if stores.is_empty() {
            return Err(StorageError::config(
                "a store pool needs at least one endpoint",
            ));
        }
        let mut endpoints: Vec<Arc<Endpoint>> = Vec::with_capacity(stores.len());
        for (id, store) in stores {
            if endpoints.iter().any(|e| e.id == id) {
                return Err(StorageError::config(format!("duplicate endpoint id {id}")));
            }
            let ep = Endpoint {
                metrics: EndpointMetrics::new(&id),
                id,
                store,
                kind: StoreKind::Memory,
                local_root: None,
                base_uri: None,
                health: Mutex::new(Health::Healthy),
                latency: LatencyWindow::default(),
                read_latency: LatencyWindow::default(),
                written: AtomicU64::new(0),
                abandoned: AtomicU64::new(0),
                hedged: AtomicU64::new(0),
            };
            ep.metrics.deadline.set(ep.deadline(&opts, 0).as_secs_f64());
            endpoints.push(Arc::new(ep));
        }
        let probe_key = ObjectKey::new(format!("_floe/probe/{}", uuid::Uuid::new_v4().simple()));
        Ok(Self {
            shared: Arc::new(Shared {
                endpoints,
                opts,
                probe_key,
            }),
            cursor: AtomicUsize::new(0),
        })
    }

    fn endpoints(&self) -> &[Arc<Endpoint>] {
        &self.shared.endpoints
    }

    pub fn options(&self) -> &PoolOptions {
        &self.shared.opts
    }

    pub fn endpoint_ids(&self) -> impl Iterator<Item = &EndpointId> {
        self.endpoints().iter().map(|e| &e.id)
    }

    /// The kinds of store of the endpoints.
    pub fn kinds(&self) -> impl Iterator<Item = StoreKind> + '_ {
        self.endpoints().iter().map(|e| e.kind)
    }

    /// Per-endpoint write counts.
    pub fn stats(&self) -> Vec<EndpointStats> {
        self.endpoints()
            .iter()
            .map(|e| EndpointStats {
                id: e.id.clone(),
                written: e.written.load(Ordering::Relaxed),
                abandoned: e.abandoned.load(Ordering::Relaxed),
                hedged: e.hedged.load(Ordering::Relaxed),
                benched: e.health() != Health::Healthy,
            })
            .collect()
    }

    /// Whether new writes skip the endpoint (benched after a failed or slow
    /// write, or waiting for its probe).
    pub fn is_benched(&self, id: &EndpointId) -> bool {
        self.endpoints()
            .iter()
            .find(|e| &e.id == id)
            .is_some_and(|e| e.health() != Health::Healthy)
    }

    /// The adaptive deadline of a write of `bytes` on an endpoint now.
    pub fn write_deadline(&self, id: &EndpointId, bytes: u64) -> Result<Duration> {
        Ok(self.endpoint(id)?.deadline(&self.shared.opts, bytes))
    }

    fn endpoint(&self, id: &EndpointId) -> Result<&Arc<Endpoint>> {
        self.endpoints()
            .iter()
            .find(|e| &e.id == id)
            .ok_or_else(|| StorageError::config(format!("object refers to unknown endpoint {id}")))
    }

    /// Picks the endpoint for the next attempt, never one in `avoid` (the
    /// endpoints this write is running on) unless there is no other: a
    /// healthy one this write has not tried, else an untried benched one,
    /// else the one available soonest.
    fn choose(&self, tried: &[usize], avoid: &[usize]) -> usize {
        let n = self.endpoints().len();
        let start = self.cursor.fetch_add(1, Ordering::Relaxed) % n;
        let now = Instant::now();
        let order = (0..n).map(|i| (start + i) % n);
        if let Some(i) = order
            .clone()
            .find(|&i| !tried.contains(&i) && !avoid.contains(&i) && self.shared.ready(i, now))
        {
            return i;
        }
        let soonest = |candidates: &mut dyn Iterator<Item = usize>| {
            candidates.min_by_key(|&i| self.endpoints()[i].available_at(now))
        };
        soonest(
            &mut order
                .clone()
                .filter(|i| !tried.contains(i) && !avoid.contains(i)),
        )
        .or_else(|| soonest(&mut order.clone().filter(|i| !avoid.contains(i))))
        .or_else(|| soonest(&mut order.clone()))
        .unwrap_or(start)
    }

    /// Writes `payload` as a new object whose key `key_for` builds from a fresh
    /// token; on failure, as another new object. Returns where it landed.
    pub async fn put_new<F>(&self, key_for: F, payload: PutPayload) -> Result<ObjectRef>
    where
        F: Fn(&WriteToken) -> ObjectKey,
    {
        let mut refs = self
            .put_group_new(|token| vec![(key_for(token), payload.clone())])
            .await?;
        refs.pop()
            .ok_or_else(|| StorageError::new(ErrorKind::InvalidInput, "empty write group"))
    }

    /// Starts an attempt of a write on endpoint `idx`.
    fn start_attempt<F>(
        &self,
        idx: usize,
        parts_for: &F,
        attempts: &mut Vec<Attempt>,
        running: &mut FuturesUnordered<AttemptFuture>,
    ) -> Result<()>
    where
        F: Fn(&WriteToken) -> Vec<(ObjectKey, PutPayload)>,
    {
        let ep = self.endpoints()[idx].clone();
        let token = WriteToken::fresh();
        let parts = parts_for(&token);
        if parts.is_empty() {
            return Err(StorageError::invalid("empty write group"));
        }
        let bytes: u64 = parts.iter().map(|(_, p)| p.content_length() as u64).sum();
        let deadline = ep.deadline(&self.shared.opts, bytes);
        let started = Instant::now();
        let i = attempts.len();
        attempts.push(Attempt {
            idx,
            token,
            parts: parts
                .iter()
                .map(|(k, p)| (k.clone(), p.content_length() as u64))
                .collect(),
            started,
            hedge_at: started + deadline,
            deadline,
            running: true,
            hedged: false,
        });
        let hard = self.shared.opts.write_timeout;
        running.push(Box::pin(async move {
            (i, write_parts(&ep, &parts, hard).await)
        }));
        Ok(())
    }

    /// Writes several objects that belong together (a segment's `.log`,
    /// `.index` and `.timeindex`) to one endpoint. If any of them fails, the
    /// whole group is written again under a new token; if the attempt is
    /// slower than its endpoint's adaptive deadline, the group is also
    /// written under a new token elsewhere and the first to land wins.
    pub async fn put_group_new<F>(&self, parts_for: F) -> Result<Vec<ObjectRef>>
    where
        F: Fn(&WriteToken) -> Vec<(ObjectKey, PutPayload)>,
    {
        let opts = &self.shared.opts;
        let mut tried: Vec<usize> = Vec::new();
        let mut attempts: Vec<Attempt> = Vec::new();
        let mut running: FuturesUnordered<AttemptFuture> = FuturesUnordered::new();
        let mut last_err = None;
        loop {
            if running.is_empty() {
                let n = attempts.len() as u32;
                if n >= opts.max_write_attempts {
                    break;
                }
                let idx = self.choose(&tried, &[]);
                if tried.contains(&idx) {
                    let exp = n.saturating_sub(1).min(5);
                    let pause = opts.retry_backoff.saturating_mul(1 << exp);
                    tokio::time::sleep(pause.min(Duration::from_secs(2))).await;
                } else {
                    tried.push(idx);
                }
                self.start_attempt(idx, &parts_for, &mut attempts, &mut running)?;
            }
            let may_hedge = running.len() < MAX_RUNNING_ATTEMPTS
                && (attempts.len() as u32) < opts.max_write_attempts;
            let hedge_at = attempts
                .iter()
                .filter(|a| a.running && !a.hedged)
                .map(|a| a.hedge_at)
                .min()
                .filter(|_| may_hedge);
            let far = Instant::now() + opts.write_timeout;
            tokio::select! {
                Some((i, res)) = running.next() => {
                    attempts[i].running = false;
                    let a = &attempts[i];
                    let ep = &self.endpoints()[a.idx];
                    match res {
                        Ok(()) => {
                            let took = a.started.elapsed();
                            let bytes = a.parts.iter().map(|(_, n)| n).sum();
                            ep.record_write(opts, took, bytes);
                            ep.written.fetch_add(1, Ordering::Relaxed);
                            ep.metrics.writes.increment(1);
                            if i > 0 && attempts[0].idx != a.idx {
                                ep.metrics.failovers.increment(1);
                            }
                            if took <= a.deadline && ep.health() != Health::Healthy {
                                ep.set_health(Health::Healthy);
                                tracing::info!(endpoint = %ep.id, "endpoint healthy again");
                            }
                            let refs = a
                                .parts
                                .iter()
                                .map(|(key, size)| ObjectRef {
                                    endpoint: ep.id.clone(),
                                    key: key.clone(),
                                    size: *size,
                                })
                                .collect();
                            self.abandon_losers(&attempts, running);
                            return Ok(refs);
                        }
                        Err(err) => {
                            ep.abandoned.fetch_add(1, Ordering::Relaxed);
                            ep.metrics.abandoned.increment(1);
                            ep.bench(opts.bench_cooldown);
                            tracing::warn!(
                                endpoint = %ep.id,
                                token = %a.token,
                                attempt = i + 1,
                                error = %err,
                                "write abandoned; writing the bytes again as a new object"
                            );
                            let keys = a.parts.iter().map(|(k, _)| k.clone()).collect();
                            tokio::spawn(delete_abandoned(ep.clone(), keys, opts.clone()));
                            last_err = Some(err);
                        }
                    }
                }
                _ = tokio::time::sleep_until(hedge_at.unwrap_or(far)), if hedge_at.is_some() => {
                    let Some(slow) = attempts
                        .iter()
                        .position(|a| a.running && !a.hedged && Some(a.hedge_at) == hedge_at)
                    else {
                        continue;
                    };
                    attempts[slow].hedged = true;
                    let ep = &self.endpoints()[attempts[slow].idx];
                    let busy: Vec<usize> = attempts.iter().filter(|a| a.running).map(|a| a.idx).collect();
                    let idx = self.choose(&tried, &busy);
                    if busy.contains(&idx) && !self.endpoints()[idx].kind.hedges_in_place() {
                        // A second write to the same local disk only slows
                        // the first: wait for it.
                        continue;
                    }
                    ep.hedged.fetch_add(1, Ordering::Relaxed);
                    ep.metrics.hedged.increment(1);
                    ep.bench(opts.bench_cooldown);
                    if !tried.contains(&idx) {
                        tried.push(idx);
                    }
                    tracing::warn!(
                        endpoint = %ep.id,
                        token = %attempts[slow].token,
                        deadline = ?attempts[slow].deadline,
                        to = %self.endpoints()[idx].id,
                        "write slower than its deadline; writing the bytes as a new object too"
                    );
                    self.start_attempt(idx, &parts_for, &mut attempts, &mut running)?;
                }
            }
        }
        let err =
            last_err.unwrap_or_else(|| StorageError::new(ErrorKind::Unavailable, "no attempt"));
        Err(StorageError::with_source(
            ErrorKind::Unavailable,
            format!(
                "write failed on every attempt ({} attempts)",
                opts.max_write_attempts
            ),
            err,
        ))
    }

    /// Once one attempt of a write has landed, the others still running are
    /// abandoned: they run on in the background up to their hard deadline
    /// and then their objects, never referenced, are deleted.
    fn abandon_losers(&self, attempts: &[Attempt], running: FuturesUnordered<AttemptFuture>) {
        if running.is_empty() {
            return;
        }
        let mut losers = Vec::new();
        for (i, a) in attempts.iter().enumerate().filter(|(_, a)| a.running) {
            let ep = self.endpoints()[a.idx].clone();
            ep.abandoned.fetch_add(1, Ordering::Relaxed);
            ep.metrics.abandoned.increment(1);
            let keys: Vec<ObjectKey> = a.parts.iter().map(|(k, _)| k.clone()).collect();
            losers.push((i, ep, keys));
        }
        let opts = self.shared.opts.clone();
        tokio::spawn(async move {
            let mut running = running;
            while let Some((i, _)) = running.next().await {
                if let Some(pos) = losers.iter().position(|(j, ..)| *j == i) {
                    let (_, ep, keys) = losers.swap_remove(pos);
                    tokio::spawn(delete_abandoned(ep, keys, opts.clone()));
                }
            }
        });
    }

    /// Writes `payload` under a fixed `key` on one endpoint, retrying the same
    /// key (for files whose names must be deterministic, such as the
    /// indexer's exports; rewriting one puts the same bytes there again).
    pub async fn put_at(
        &self,
        endpoint: &EndpointId,
        key: ObjectKey,
        payload: PutPayload,
    ) -> Result<ObjectRef> {
        let ep = self.endpoint(endpoint)?;
        let opts = &self.shared.opts;
        let parts = [(key, payload)];
        let mut attempt = 0;
        loop {
            attempt += 1;
            match write_parts(ep, &parts, opts.write_timeout).await {
                Ok(()) => {
                    ep.written.fetch_add(1, Ordering::Relaxed);
                    ep.metrics.writes.increment(1);
                    let [(key, payload)] = parts;
                    return Ok(ObjectRef {
                        endpoint: ep.id.clone(),
                        key,
                        size: payload.content_length() as u64,
                    });
                }
                Err(err) if attempt >= opts.max_write_attempts => return Err(err),
                Err(err) => {
                    tracing::warn!(endpoint = %ep.id, attempt, error = %err, "write failed; retrying the same key");
                    let exp = attempt.saturating_sub(1).min(5);
                    let pause = opts.retry_backoff.saturating_mul(1 << exp);
                    tokio::time::sleep(pause.min(Duration::from_secs(2))).await;
                }
            }
        }
    }

    /// Records what kind of store an endpoint is, and the folder of a local
    /// one (set by [`StorePool::open`], before the pool is shared).
    pub(crate) fn set_kind(
        &mut self,
        id: &EndpointId,
        kind: StoreKind,
        local_root: Option<std::path::PathBuf>,
        base_uri: String,
    ) {
        let Some(shared) = Arc::get_mut(&mut self.shared) else {
            return;
        };
        if let Some(ep) = shared
            .endpoints
            .iter_mut()
            .find(|e| &e.id == id)
            .and_then(Arc::get_mut)
        {
            ep.kind = kind;
            ep.local_root = local_root;
            ep.base_uri = Some(base_uri);
        }
    }

    /// The URI other programs read an object under (`file:///…/key`,
    /// `s3://bucket/prefix/key`), or `None` when the endpoint is unknown or
    /// was built by hand (tests).
    pub fn uri(&self, endpoint: &EndpointId, key: &ObjectKey) -> Option<String> {
        let ep = self.endpoints().iter().find(|e| &e.id == endpoint)?;
        Some(format!("{}{}", ep.base_uri.as_deref()?, key.as_str()))
    }

    /// Deletes what writes cut short by a crash left in a local folder under
    /// `prefix`: `object_store` writes a local object to `{key}#{n}` and
    /// renames it when complete, so a process killed mid-write leaves that
    /// staging file, which listings do not show but other readers of the
    /// folder (Spark, a shell glob) may. Only files at least `older_than` old
    /// are removed, so writes in flight are left alone. Object stores with
    /// atomic puts (S3) have nothing to clean: returns 0.
    pub async fn remove_partial_writes(
        &self,
        endpoint: &EndpointId,
        prefix: &str,
        older_than: Duration,
    ) -> Result<usize> {
        let ep = self.endpoint(endpoint)?;
        let Some(root) = ep.local_root.clone() else {
            return Ok(0);
        };
        let dir = root.join(prefix.trim_start_matches('/'));
        tokio::task::spawn_blocking(move || remove_staging_files(&dir, older_than))
            .await
            .map_err(|e| StorageError::new(ErrorKind::Unavailable, e.to_string()))?
    }

    /// The object store behind an endpoint, for readers that need the
    /// `ObjectStore` interface itself (Parquet's async reader).
    pub fn store(&self, endpoint: &EndpointId) -> Result<Arc<dyn ObjectStore>> {
        Ok(self.endpoint(endpoint)?.store.clone())
    }

    /// Reads a byte range of an object from the endpoint that holds it.
    pub async fn get_range(&self, obj: &ObjectRef, range: Range<u64>) -> Result<Bytes> {
        if range.start > range.end || range.end > obj.size {
            return Err(StorageError::invalid(format!(
                "range {range:?} is outside {obj}"
            )));
        }
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let ep = self.endpoint(&obj.endpoint)?;
        let opts = &self.shared.opts;
        let path = crate::ids::path_of(&obj.key);
        let len = range.end - range.start;
        let mut attempt = 0;
        loop {
            attempt += 1;
            // A request slower than the endpoint's reads usually are gets a
            // second one beside it (another connection, maybe another
            // server behind the endpoint's address); the first answer wins.
            let deadline = ep
                .read_latency
                .deadline(&opts.deadline, len, opts.read_timeout);
            let started = Instant::now();
            // Boxed: the object store's read futures are large, and every
            // caller of a read would carry two of them.
            let mut first = Box::pin(read_once(ep, &path, obj, range.clone(), opts.read_timeout));
            let res = match tokio::time::timeout(deadline, &mut first).await {
                Ok(r) => r,
                Err(_) => {
                    ep.metrics.hedged_reads.increment(1);
                    tracing::debug!(object = %obj, ?deadline, "read slower than its deadline; asking again beside it");
                    let mut second =
                        Box::pin(read_once(ep, &path, obj, range.clone(), opts.read_timeout));
                    tokio::select! {
                        r = &mut first => if r.is_ok() { r } else { second.await },
                        r = &mut second => if r.is_ok() { r } else { first.await },
                    }
                }
            };
            let err = match res {
                Ok(bytes) => {
                    ep.read_latency
                        .record(&opts.deadline, started.elapsed(), len);
                    return Ok(bytes);
                }
                Err(e) => e,
            };
            if !err.is_retryable() || attempt >= opts.read_attempts {
                return Err(err);
            }
            tracing::debug!(object = %obj, attempt, error = %err, "read failed, retrying");
            tokio::time::sleep(opts.retry_backoff).await;
        }
    }

    /// Reads a whole object.
    pub async fn get(&self, obj: &ObjectRef) -> Result<Bytes> {
        self.get_range(obj, 0..obj.size).await
    }

    /// The size of an object, from the endpoint (for objects known only by key).
    pub async fn head(&self, endpoint: &EndpointId, key: &ObjectKey) -> Result<ObjectRef> {
        let ep = self.endpoint(endpoint)?;
        let meta = tokio::time::timeout(
            self.shared.opts.read_timeout,
            ep.store.head(&crate::ids::path_of(key)),
        )
        .await
        .map_err(|_| StorageError::new(ErrorKind::Timeout, format!("head {endpoint}:{key}")))
        .and_then(|r| {
            r.map_err(|e| StorageError::from_object_store(format!("head {endpoint}:{key}"), e))
        })
        .inspect_err(|e| count_error(endpoint, "head", e))?;
        Ok(ObjectRef {
            endpoint: endpoint.clone(),
            key: key.clone(),
            size: meta.size,
        })
    }

    /// Deletes an object. Deleting one that is already gone succeeds.
    pub async fn delete(&self, obj: &ObjectRef) -> Result<()> {
        let ep = self.endpoint(&obj.endpoint)?;
        let res = tokio::time::timeout(
            self.shared.opts.write_timeout,
            ep.store.delete(&crate::ids::path_of(&obj.key)),
        )
        .await
        .map_err(|_| StorageError::new(ErrorKind::Timeout, format!("delete {obj}")));
        match res {
            Ok(Ok(()) | Err(object_store::Error::NotFound { .. })) => Ok(()),
            Ok(Err(e)) => Err(StorageError::from_object_store(format!("delete {obj}"), e)),
            Err(e) => Err(e),
        }
        .inspect_err(|e| count_error(&obj.endpoint, "delete", e))
    }

    /// Lists the objects under `prefix` on one endpoint (for sweepers and tools).
    pub async fn list(&self, endpoint: &EndpointId, prefix: &str) -> Result<Vec<ObjectRef>> {
        let ep = self.endpoint(endpoint)?;
        let prefix = object_store::path::Path::from(prefix);
        let metas: Vec<_> = tokio::time::timeout(
            self.shared.opts.read_timeout,
            ep.store.list(Some(&prefix)).try_collect::<Vec<_>>(),
        )
        .await
        .map_err(|_| StorageError::new(ErrorKind::Timeout, format!("list {endpoint}:{prefix}")))
        .and_then(|r| {
            r.map_err(|e| StorageError::from_object_store(format!("list {endpoint}:{prefix}"), e))
        })
        .inspect_err(|e| count_error(endpoint, "list", e))?;
        let mut out: Vec<ObjectRef> = metas
            .into_iter()
            .map(|m| ObjectRef {
                endpoint: endpoint.clone(),
                key: ObjectKey::new(m.location.as_ref()),
                size: m.size,
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

/// An object as a listing shows it: where it is, and when it was last
/// written (the store's clock: S3's `Last-Modified`, a file's mtime).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    pub object: ObjectRef,
    pub last_modified: SystemTime,
}

impl ListedObject {
    /// How long ago it was written, as of `now` (zero for a time ahead of
    /// `now`: a clock that runs ahead makes an object look young, never old).
    pub fn age(&self, now: SystemTime) -> Duration {
        now.duration_since(self.last_modified).unwrap_or_default()
    }
}

/// Pages of a listing (see [`StorePool::list_pages`]).
pub type ListPages = futures::stream::BoxStream<'static, Result<Vec<ListedObject>>>;

impl StorePool {
    /// Lists the objects under `prefix` on one endpoint a page of at most
    /// `page` objects at a time, in the store's order, for scans of stores
    /// too large to list in one answer (millions of objects). Each page must
    /// come within the read timeout; the stream ends after the first error.
    pub fn list_pages(
        &self,
        endpoint: &EndpointId,
        prefix: &str,
        page: usize,
    ) -> Result<ListPages> {
        let ep = self.endpoint(endpoint)?.clone();
        let timeout = self.shared.opts.read_timeout;
        let endpoint = endpoint.clone();
        let what = format!("list {endpoint}:{prefix}");
        let metas = ep
            .store
            .list(Some(&object_store::path::Path::from(prefix)))
            .try_chunks(page.max(1));
        let pages = futures::stream::unfold(Some(metas), move |metas| {
            let (endpoint, what) = (endpoint.clone(), what.clone());
            async move {
                let mut metas = metas?;
                let next = match tokio::time::timeout(timeout, metas.next()).await {
                    Ok(None) => return None,
                    Ok(Some(Ok(page))) => Ok(page),
                    Ok(Some(Err(e))) => Err(StorageError::from_object_store(what, e.1)),
                    Err(_) => Err(StorageError::new(ErrorKind::Timeout, what)),
                };
                let page = next.inspect_err(|e| count_error(&endpoint, "list", e));
                let page = page.map(|metas| {
                    metas
                        .into_iter()
                        .map(|m| ListedObject {
                            object: ObjectRef {
                                endpoint: endpoint.clone(),
                                key: ObjectKey::new(m.location.as_ref()),
                                size: m.size,
                            },
                            last_modified: SystemTime::from(m.last_modified),
                        })
                        .collect()
                });
                // After an error the stream ends.
                let rest = page.is_ok().then_some(metas);
                Some((page, rest))
            }
        });
        Ok(Box::pin(pages))
    }
}

impl RangeRead for StorePool {
    fn read_range(
        &self,
        obj: &ObjectRef,
        range: Range<u64>,
    ) -> impl Future<Output = Result<Bytes>> + Send {
        self.get_range(obj, range)
    }
}

/// Whether a file name is a local staging name: `…#` followed by digits.
fn is_staging_name(name: &str) -> bool {
    name.rsplit_once('#').is_some_and(|(stem, n)| {
        !stem.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    })
}

fn remove_staging_files(dir: &std::path::Path, older_than: Duration) -> Result<usize> {
    let io = |e: std::io::Error| {
        StorageError::new(ErrorKind::Unavailable, format!("{}: {e}", dir.display()))
    };
    let mut removed = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io)?;
            let meta = entry.metadata().map_err(io)?;
            if meta.is_dir() {
                stack.push(entry.path());
                continue;
            }
            let old_enough = meta
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_some_and(|age| age >= older_than);
            if old_enough && entry.file_name().to_str().is_some_and(is_staging_name) {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io(e)),
                }
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod staging_tests {
    use super::*;

    #[test]
    fn staging_names() {
        assert!(is_staging_name(
            "0-00000000000000000000-00000000000000000009.parquet#1"
        ));
        assert!(is_staging_name("x.wal#12"));
        assert!(!is_staging_name("x.parquet"));
        assert!(!is_staging_name("x#"));
        assert!(!is_staging_name("#1"));
        assert!(!is_staging_name("x#1a"));
    }
}

#[cfg(test)]
mod listing_tests {
    use super::*;

    #[tokio::test]
    async fn a_listing_comes_in_pages_with_each_objects_time() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let pool = StorePool::new(vec![(EndpointId::new("m"), store)], PoolOptions::default())
            .expect("pool");
        let before = SystemTime::now() - Duration::from_secs(1);
        for i in 0..5 {
            pool.put_at(
                &EndpointId::new("m"),
                ObjectKey::new(format!("wal/1/{i}.wal")),
                Bytes::from(vec![0u8; i + 1]).into(),
            )
            .await
            .expect("put");
        }
        pool.put_at(
            &EndpointId::new("m"),
            ObjectKey::new("other/x"),
            Bytes::from_static(b"x").into(),
        )
        .await
        .expect("put");
        let pages: Vec<Vec<ListedObject>> = pool
            .list_pages(&EndpointId::new("m"), "wal/", 2)
            .expect("list")
            .try_collect()
            .await
            .expect("pages");
        assert_eq!(
            pages.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![2, 2, 1]
        );
        let mut sizes: Vec<u64> = pages.iter().flatten().map(|o| o.object.size).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, vec![1, 2, 3, 4, 5]);
        for o in pages.iter().flatten() {
            assert!(o.object.key.as_str().starts_with("wal/1/"));
            assert!(
                o.last_modified >= before && o.age(SystemTime::now()) < Duration::from_secs(60)
            );
        }
        assert!(
            pool.list_pages(&EndpointId::new("nope"), "wal/", 2)
                .is_err()
        );
    }
}
