//! A pool of object-store endpoints with failover to a new object.
//!
//! A write goes to a healthy endpoint under a key that embeds a fresh
//! [`WriteToken`]. If it errors or passes its deadline it is abandoned: its key
//! is never used again, the endpoint is benched for a cooldown, and the same
//! bytes are written as a new object, on another endpoint when there is one.
//! The caller gets back the [`ObjectRef`] of the object that really landed.
//! Reads go to the endpoint that holds the object.

use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt, PutOptions, PutPayload};

use crate::error::{ErrorKind, Result, StorageError};
use crate::ids::{EndpointId, ObjectKey, ObjectRef};

/// Timeouts and retry limits of a pool.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Deadline of one write attempt; past it the attempt is abandoned.
    pub write_timeout: Duration,
    /// Deadline of one read attempt.
    pub read_timeout: Duration,
    /// How long an endpoint that failed a write is skipped by new writes.
    pub bench_cooldown: Duration,
    /// Attempts per write before giving up (each one a new object).
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
            read_timeout: Duration::from_secs(10),
            bench_cooldown: Duration::from_secs(30),
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
}

struct Endpoint {
    id: EndpointId,
    store: Arc<dyn ObjectStore>,
    /// The folder of a local endpoint (for [`StorePool::remove_partial_writes`]).
    local_root: Option<std::path::PathBuf>,
    benched_until: Mutex<Option<Instant>>,
    written: AtomicU64,
    abandoned: AtomicU64,
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
    /// attempt on another endpoint was abandoned.
    failovers: metrics::Counter,
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
                "write attempts abandoned (error or deadline), by endpoint"
            );
            metrics::describe_counter!(
                "floe_store_failovers_total",
                "writes that landed on this endpoint after an attempt elsewhere was abandoned"
            );
            metrics::describe_counter!(
                "floe_store_errors_total",
                "failed calls to an endpoint, by operation (not-found answers excluded)"
            );
            metrics::describe_gauge!(
                "floe_store_endpoint_benched",
                "1 while new writes skip the endpoint after a failed write"
            );
        });
        let endpoint = id.as_str().to_string();
        Self {
            writes: metrics::counter!("floe_store_writes_total", "endpoint" => endpoint.clone()),
            abandoned: metrics::counter!("floe_store_abandoned_writes_total", "endpoint" => endpoint.clone()),
            failovers: metrics::counter!("floe_store_failovers_total", "endpoint" => endpoint.clone()),
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
    /// Write attempts abandoned here (error or deadline).
    pub abandoned: u64,
    pub benched: bool,
}

impl Endpoint {
    fn benched_until(&self) -> Option<Instant> {
        *self
            .benched_until
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set_benched(&self, until: Option<Instant>) {
        *self
            .benched_until
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = until;
        self.metrics
            .benched
            .set(if until.is_some() { 1.0 } else { 0.0 });
    }

    fn is_healthy(&self, now: Instant) -> bool {
        let healthy = self.benched_until().is_none_or(|t| t <= now);
        if healthy {
            // The cooldown may have passed since the last write here.
            self.metrics.benched.set(0.0);
        }
        healthy
    }
}

/// One or more object-store endpoints used as one.
pub struct StorePool {
    endpoints: Vec<Endpoint>,
    opts: PoolOptions,
    cursor: AtomicUsize,
}

impl fmt::Debug for StorePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<_> = self.endpoints.iter().map(|e| e.id.as_str()).collect();
        f.debug_struct("StorePool")
            .field("endpoints", &ids)
            .field("opts", &self.opts)
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
        let mut endpoints: Vec<Endpoint> = Vec::with_capacity(stores.len());
        for (id, store) in stores {
            if endpoints.iter().any(|e| e.id == id) {
                return Err(StorageError::config(format!("duplicate endpoint id {id}")));
            }
            endpoints.push(Endpoint {
                metrics: EndpointMetrics::new(&id),
                id,
                store,
                local_root: None,
                benched_until: Mutex::new(None),
                written: AtomicU64::new(0),
                abandoned: AtomicU64::new(0),
            });
        }
        Ok(Self {
            endpoints,
            opts,
            cursor: AtomicUsize::new(0),
        })
    }

    pub fn options(&self) -> &PoolOptions {
        &self.opts
    }

    pub fn endpoint_ids(&self) -> impl Iterator<Item = &EndpointId> {
        self.endpoints.iter().map(|e| &e.id)
    }

    /// Per-endpoint write counts.
    pub fn stats(&self) -> Vec<EndpointStats> {
        let now = Instant::now();
        self.endpoints
            .iter()
            .map(|e| EndpointStats {
                id: e.id.clone(),
                written: e.written.load(Ordering::Relaxed),
                abandoned: e.abandoned.load(Ordering::Relaxed),
                benched: !e.is_healthy(now),
            })
            .collect()
    }

    /// Whether the endpoint is currently benched after a failed write.
    pub fn is_benched(&self, id: &EndpointId) -> bool {
        self.endpoints
            .iter()
            .find(|e| &e.id == id)
            .is_some_and(|e| !e.is_healthy(Instant::now()))
    }

    fn endpoint(&self, id: &EndpointId) -> Result<&Endpoint> {
        self.endpoints
            .iter()
            .find(|e| &e.id == id)
            .ok_or_else(|| StorageError::config(format!("object refers to unknown endpoint {id}")))
    }

    /// Picks the endpoint for the next attempt: a healthy one this write has not
    /// tried, else an untried benched one, else the one benched the shortest.
    fn choose(&self, tried: &[usize]) -> usize {
        let n = self.endpoints.len();
        let start = self.cursor.fetch_add(1, Ordering::Relaxed) % n;
        let now = Instant::now();
        let order = (0..n).map(|i| (start + i) % n);
        if let Some(i) = order
            .clone()
            .find(|&i| !tried.contains(&i) && self.endpoints[i].is_healthy(now))
        {
            return i;
        }
        let soonest = |candidates: &mut dyn Iterator<Item = usize>| {
            candidates.min_by_key(|&i| self.endpoints[i].benched_until().unwrap_or(now))
        };
        soonest(&mut order.clone().filter(|i| !tried.contains(i)))
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

    /// Writes several objects that belong together (a segment's `.log`,
    /// `.index` and `.timeindex`) to one endpoint. If any of them fails, the
    /// whole group is written again under a new token.
    pub async fn put_group_new<F>(&self, parts_for: F) -> Result<Vec<ObjectRef>>
    where
        F: Fn(&WriteToken) -> Vec<(ObjectKey, PutPayload)>,
    {
        let mut tried: Vec<usize> = Vec::new();
        let mut last_err = None;
        for attempt in 1..=self.opts.max_write_attempts {
            let idx = self.choose(&tried);
            if tried.contains(&idx) {
                let exp = (attempt.saturating_sub(2)).min(5);
                let pause = self.opts.retry_backoff.saturating_mul(1 << exp);
                tokio::time::sleep(pause.min(Duration::from_secs(2))).await;
            } else {
                tried.push(idx);
            }
            let ep = &self.endpoints[idx];
            let token = WriteToken::fresh();
            let parts = parts_for(&token);
            if parts.is_empty() {
                return Err(StorageError::invalid("empty write group"));
            }
            match self.write_parts(ep, &parts).await {
                Ok(()) => {
                    ep.written.fetch_add(1, Ordering::Relaxed);
                    ep.metrics.writes.increment(1);
                    if tried.first() != Some(&idx) {
                        ep.metrics.failovers.increment(1);
                    }
                    if ep.benched_until().is_some() {
                        ep.set_benched(None);
                        tracing::info!(endpoint = %ep.id, "endpoint healthy again");
                    }
                    return Ok(parts
                        .into_iter()
                        .map(|(key, payload)| ObjectRef {
                            endpoint: ep.id.clone(),
                            key,
                            size: payload.content_length() as u64,
                        })
                        .collect());
                }
                Err(err) => {
                    ep.abandoned.fetch_add(1, Ordering::Relaxed);
                    ep.metrics.abandoned.increment(1);
                    ep.set_benched(Some(Instant::now() + self.opts.bench_cooldown));
                    tracing::warn!(
                        endpoint = %ep.id,
                        token = %token,
                        attempt,
                        error = %err,
                        "write abandoned; writing the bytes again as a new object"
                    );
                    last_err = Some(err);
                }
            }
        }
        let err =
            last_err.unwrap_or_else(|| StorageError::new(ErrorKind::Unavailable, "no attempt"));
        Err(StorageError::with_source(
            ErrorKind::Unavailable,
            format!(
                "write failed on every attempt ({} attempts)",
                self.opts.max_write_attempts
            ),
            err,
        ))
    }

    async fn write_parts(&self, ep: &Endpoint, parts: &[(ObjectKey, PutPayload)]) -> Result<()> {
        let writes = parts.iter().map(|(key, payload)| {
            let path = crate::ids::path_of(key);
            let store = ep.store.clone();
            let payload = payload.clone();
            async move {
                store
                    .put_opts(&path, payload, PutOptions::default())
                    .await
                    .map_err(|e| {
                        StorageError::from_object_store(format!("put {}:{path}", ep.id), e)
                    })
            }
        });
        let res = match tokio::time::timeout(
            self.opts.write_timeout,
            futures::future::try_join_all(writes),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(StorageError::with_source(
                ErrorKind::Unavailable,
                format!("write to endpoint {} failed", ep.id),
                e,
            )),
            Err(_) => Err(StorageError::new(
                ErrorKind::Timeout,
                format!(
                    "write to endpoint {} passed its {:?} deadline",
                    ep.id, self.opts.write_timeout
                ),
            )),
        };
        res.inspect_err(|e| count_error(&ep.id, "put", e))
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
        let parts = [(key, payload)];
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.write_parts(ep, &parts).await {
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
                Err(err) if attempt >= self.opts.max_write_attempts => return Err(err),
                Err(err) => {
                    tracing::warn!(endpoint = %ep.id, attempt, error = %err, "write failed; retrying the same key");
                    let exp = attempt.saturating_sub(1).min(5);
                    let pause = self.opts.retry_backoff.saturating_mul(1 << exp);
                    tokio::time::sleep(pause.min(Duration::from_secs(2))).await;
                }
            }
        }
    }

    /// Marks an endpoint as the local folder `root` (set by [`StorePool::open`]).
    pub(crate) fn set_local_root(&mut self, id: &EndpointId, root: std::path::PathBuf) {
        if let Some(ep) = self.endpoints.iter_mut().find(|e| &e.id == id) {
            ep.local_root = Some(root);
        }
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
        let path = crate::ids::path_of(&obj.key);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let res = tokio::time::timeout(
                self.opts.read_timeout,
                ep.store.get_range(&path, range.clone()),
            )
            .await;
            let err = match res {
                Ok(Ok(bytes)) if bytes.len() as u64 == range.end - range.start => return Ok(bytes),
                Ok(Ok(bytes)) => StorageError::new(
                    ErrorKind::Unavailable,
                    format!("read of {obj} {range:?} returned {} bytes", bytes.len()),
                ),
                Ok(Err(e)) => StorageError::from_object_store(format!("read {obj}"), e),
                Err(_) => StorageError::new(
                    ErrorKind::Timeout,
                    format!(
                        "read of {obj} passed its {:?} deadline",
                        self.opts.read_timeout
                    ),
                ),
            };
            count_error(&ep.id, "get", &err);
            if !err.is_retryable() || attempt >= self.opts.read_attempts {
                return Err(err);
            }
            tracing::debug!(object = %obj, attempt, error = %err, "read failed, retrying");
            tokio::time::sleep(self.opts.retry_backoff).await;
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
            self.opts.read_timeout,
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
            self.opts.write_timeout,
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
            self.opts.read_timeout,
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
