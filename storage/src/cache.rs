//! A bounded block cache for object reads.
//!
//! Objects are immutable (a key is never rewritten), so a cached block never
//! goes stale. Ranges are read as fixed-size blocks; concurrent misses on one
//! block share a single fetch. The budget counts the bytes held.
//!
//! A reader that knows where it reads next asks for it ahead
//! ([`RangeRead::read_ahead`]): the blocks not held yet are read by a
//! background task, a few of them at once ([`READ_AHEAD_TASKS`] on S3,
//! [`READ_AHEAD_TASKS_LOCAL`] on a local folder; a read-ahead asked for
//! while all are busy is skipped), so that a catch-up
//! reader's next fetch finds its bytes in memory instead of waiting for the
//! store. A read-ahead and a read of the same block share one fetch.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::error::{Result, StorageError};
use crate::ids::{EndpointId, ObjectKey, ObjectRef};
use crate::pool::RangeRead;

/// Default block size: 1 MiB.
pub const DEFAULT_BLOCK_SIZE: u64 = 1024 * 1024;

/// Read-ahead tasks running at once, per cache (each reads its blocks one
/// after the other), on a store where each read is a network round trip
/// (S3, HDFS): enough for a fetch of sixteen partitions, each asking for a
/// few objects ahead, and for that many round trips in flight.
pub const READ_AHEAD_TASKS: usize = 32;

/// Read-ahead tasks on local folders. A disk is busy with a few reads
/// in flight; more of them only race each other's blocks out of the cache:
/// a catch-up read was 4–14% faster with 8 than with 32, in three sittings
/// (`docs/benchmarks.md`).
pub const READ_AHEAD_TASKS_LOCAL: usize = 8;

/// The read-ahead tasks for a pool of these kinds of store
/// ([`crate::StoreKind::any_remote`]).
pub fn read_ahead_tasks_for(kinds: impl IntoIterator<Item = crate::StoreKind>) -> usize {
    if crate::StoreKind::any_remote(kinds) {
        READ_AHEAD_TASKS
    } else {
        READ_AHEAD_TASKS_LOCAL
    }
}

/// How far past its read a sequential reader (a partition read from the
/// store) asks to be read ahead: a few fetches' worth of one partition.
pub const READ_AHEAD_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BlockKey {
    endpoint: EndpointId,
    key: ObjectKey,
    block: u64,
}

/// Hit and miss counts, for metrics and tests.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Blocks a read found held.
    pub hits: std::sync::atomic::AtomicU64,
    /// Blocks a read had to fetch. A read that waits for a fetch already
    /// under way (a read-ahead's, another read's) counts nowhere.
    pub misses: std::sync::atomic::AtomicU64,
    /// Blocks fetched by a read-ahead.
    pub read_ahead: std::sync::atomic::AtomicU64,
    /// Read-aheads skipped because every read-ahead task was running.
    pub read_ahead_skipped: std::sync::atomic::AtomicU64,
}

/// `floe_cache_blocks_total{outcome}`, beside [`CacheStats`].
fn count(stat: &std::sync::atomic::AtomicU64, outcome: &'static str) {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        metrics::describe_counter!(
            "floe_cache_blocks_total",
            "block-cache blocks of store reads, by outcome: hit (held), miss (fetched for a read), read_ahead (fetched ahead of a sequential reader), read_ahead_skipped (a read-ahead not started: every read-ahead task busy)"
        );
    });
    stat.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    metrics::counter!("floe_cache_blocks_total", "outcome" => outcome).increment(1);
}

/// The cache itself, shared by every reader of a process.
#[derive(Debug, Clone)]
pub struct BlockCache {
    blocks: moka::future::Cache<BlockKey, Bytes>,
    block_size: u64,
    budget: u64,
    stats: Arc<CacheStats>,
    /// Permits of the read-ahead tasks.
    ahead: Arc<tokio::sync::Semaphore>,
}

impl BlockCache {
    /// A cache holding at most `budget_bytes` of blocks of `block_size` bytes.
    pub fn new(budget_bytes: u64, block_size: u64) -> Result<Self> {
        if block_size == 0 || block_size > u32::MAX as u64 {
            return Err(StorageError::config(format!(
                "cache block size must be between 1 byte and 4 GiB, not {block_size}"
            )));
        }
        // Least recently used goes first. Not moka's default (TinyLFU), whose
        // admission refuses a new block while the cache is full of blocks
        // read more often: a catch-up reader's blocks, read ahead and then
        // read once per consumer, would be dropped before they are used.
        let blocks = moka::future::Cache::builder()
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .max_capacity(budget_bytes)
            .weigher(|_k: &BlockKey, v: &Bytes| v.len().min(u32::MAX as usize) as u32)
            .build();
        Ok(Self {
            blocks,
            block_size,
            budget: budget_bytes,
            stats: Arc::default(),
            ahead: Arc::new(tokio::sync::Semaphore::new(READ_AHEAD_TASKS)),
        })
    }

    /// The same cache with at most `tasks` read-ahead tasks at once (at
    /// least one) instead of [`READ_AHEAD_TASKS`].
    pub fn with_read_ahead_tasks(mut self, tasks: usize) -> Self {
        self.ahead = Arc::new(tokio::sync::Semaphore::new(tasks.max(1)));
        self
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// Whether block `block` of `obj` is held.
    #[cfg(test)]
    pub(crate) fn holds(&self, obj: &ObjectRef, block: u64) -> bool {
        self.blocks.contains_key(&Self::key(obj, block))
    }

    /// Bytes currently held (after pending evictions are applied).
    pub async fn weighted_size(&self) -> u64 {
        self.blocks.run_pending_tasks().await;
        self.blocks.weighted_size()
    }

    fn key(obj: &ObjectRef, block: u64) -> BlockKey {
        BlockKey {
            endpoint: obj.endpoint.clone(),
            key: obj.key.clone(),
            block,
        }
    }

    async fn block<R: RangeRead>(&self, inner: &R, obj: &ObjectRef, block: u64) -> Result<Bytes> {
        let key = Self::key(obj, block);
        if let Some(b) = self.blocks.get(&key).await {
            count(&self.stats.hits, "hit");
            return Ok(b);
        }
        self.fetch(inner, obj, key, false).await
    }

    /// Fetches a block into the cache, or waits for the fetch of it under
    /// way; counted as a miss or a read-ahead (`ahead`) if this call is the
    /// one that reads it.
    async fn fetch<R: RangeRead>(
        &self,
        inner: &R,
        obj: &ObjectRef,
        key: BlockKey,
        ahead: bool,
    ) -> Result<Bytes> {
        let block = key.block;
        let start = block * self.block_size;
        let end = (start + self.block_size).min(obj.size);
        self.blocks
            .try_get_with(key, async {
                if ahead {
                    count(&self.stats.read_ahead, "read_ahead");
                } else {
                    count(&self.stats.misses, "miss");
                }
                let bytes = inner.read_range(obj, start..end).await?;
                if bytes.len() as u64 != end - start {
                    return Err(StorageError::new(
                        crate::ErrorKind::Unavailable,
                        format!("{obj}: block {block} came back with {} bytes", bytes.len()),
                    ));
                }
                Ok(bytes)
            })
            .await
            .map_err(|e: Arc<StorageError>| (*e).clone())
    }

    /// Fetches the blocks of `range` of `obj` that are not held, in a task
    /// of their own, one after the other; skipped when every read-ahead
    /// task is running, when there is no cache, or outside a Tokio runtime. A
    /// block that fails is left out (the read that wants it tries again
    /// and reports the error).
    pub fn read_ahead<R>(&self, inner: &R, obj: &ObjectRef, range: Range<u64>)
    where
        R: RangeRead + Clone + 'static,
    {
        let end = range.end.min(obj.size);
        if self.budget == 0 || range.start >= end {
            return;
        }
        let bs = self.block_size;
        let wanted: Vec<u64> = (range.start / bs..=(end - 1) / bs)
            .filter(|&i| !self.blocks.contains_key(&Self::key(obj, i)))
            .collect();
        if wanted.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Ok(permit) = self.ahead.clone().try_acquire_owned() else {
            count(&self.stats.read_ahead_skipped, "read_ahead_skipped");
            return;
        };
        let (cache, inner, obj) = (self.clone(), inner.clone(), obj.clone());
        runtime.spawn(async move {
            let _permit = permit;
            for i in wanted {
                let key = Self::key(&obj, i);
                if cache.blocks.contains_key(&key) {
                    continue;
                }
                if cache.fetch(&inner, &obj, key, true).await.is_err() {
                    return;
                }
            }
        });
    }

    /// Reads `range` of `obj` through the cache, fetching missing blocks from `inner`.
    pub async fn read<R: RangeRead>(
        &self,
        inner: &R,
        obj: &ObjectRef,
        range: Range<u64>,
    ) -> Result<Bytes> {
        if range.start > range.end || range.end > obj.size {
            return Err(StorageError::invalid(format!(
                "range {range:?} is outside {obj}"
            )));
        }
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        if self.budget == 0 {
            return inner.read_range(obj, range).await;
        }
        let bs = self.block_size;
        let first = range.start / bs;
        let last = (range.end - 1) / bs;
        if first == last {
            let b = self.block(inner, obj, first).await?;
            let off = first * bs;
            return Ok(b.slice((range.start - off) as usize..(range.end - off) as usize));
        }
        let blocks =
            futures::future::try_join_all((first..=last).map(|i| self.block(inner, obj, i)))
                .await?;
        let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
        for (i, b) in (first..=last).zip(blocks) {
            let off = i * bs;
            let lo = range.start.max(off) - off;
            let hi = range.end.min(off + b.len() as u64) - off;
            out.extend_from_slice(&b[lo as usize..hi as usize]);
        }
        Ok(out.freeze())
    }
}

/// Starts a read-ahead of a range of an object ([`RangeRead::read_ahead`]).
type ReadAhead = Arc<dyn Fn(&ObjectRef, Range<u64>) + Send + Sync>;

/// A [`RangeRead`] that serves reads of `inner` through a [`BlockCache`].
#[derive(Clone)]
pub struct CachedReader<R> {
    inner: R,
    cache: BlockCache,
    ahead: Option<ReadAhead>,
}

impl<R: fmt::Debug> fmt::Debug for CachedReader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedReader")
            .field("inner", &self.inner)
            .field("cache", &self.cache)
            .field("reads_ahead", &self.ahead.is_some())
            .finish()
    }
}

impl<R: RangeRead + Clone + 'static> CachedReader<R> {
    /// Reads through `cache`, and reads ahead when asked to.
    pub fn new(inner: R, cache: BlockCache) -> Self {
        let (store, blocks) = (inner.clone(), cache.clone());
        let ahead: ReadAhead =
            Arc::new(move |obj: &ObjectRef, range| blocks.read_ahead(&store, obj, range));
        Self {
            inner,
            cache,
            ahead: Some(ahead),
        }
    }
}

impl<R: RangeRead> CachedReader<R> {
    /// Reads through `cache` and never ahead: for a reader that cannot be
    /// moved into a background task (one that borrows its store).
    pub fn without_read_ahead(inner: R, cache: BlockCache) -> Self {
        Self {
            inner,
            cache,
            ahead: None,
        }
    }

    pub fn cache(&self) -> &BlockCache {
        &self.cache
    }

    pub fn inner(&self) -> &R {
        &self.inner
    }
}

impl<R: RangeRead> RangeRead for CachedReader<R> {
    fn read_range(
        &self,
        obj: &ObjectRef,
        range: Range<u64>,
    ) -> impl std::future::Future<Output = Result<Bytes>> + Send {
        self.cache.read(&self.inner, obj, range)
    }

    fn read_boundary(&self) -> Option<u64> {
        (self.cache.budget > 0).then_some(self.cache.block_size)
    }

    fn read_ahead(&self, obj: &ObjectRef, range: Range<u64>) {
        if let Some(ahead) = &self.ahead {
            ahead(obj, range)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{PoolOptions, StorePool};
    use std::sync::atomic::Ordering::Relaxed;

    async fn pool_with_object(len: usize) -> (StorePool, ObjectRef, Vec<u8>) {
        let store = Arc::new(object_store::memory::InMemory::new());
        let pool =
            StorePool::new(vec![(EndpointId::new("m"), store)], PoolOptions::default()).unwrap();
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let obj = pool
            .put_new(|t| ObjectKey::new(format!("o/{t}")), data.clone().into())
            .await
            .unwrap();
        (pool, obj, data)
    }

    #[tokio::test]
    async fn ranges_across_blocks_match_the_object() {
        let (pool, obj, data) = pool_with_object(10_000).await;
        let cache = BlockCache::new(1 << 20, 1000).unwrap();
        let reader = CachedReader::new(Arc::new(pool), cache.clone());
        for (a, b) in [
            (0, 10),
            (990, 1010),
            (0, 10_000),
            (2500, 7501),
            (9999, 10_000),
            (5, 5),
        ] {
            let got = reader.read_range(&obj, a..b).await.unwrap();
            assert_eq!(&got[..], &data[a as usize..b as usize], "{a}..{b}");
        }
        assert!(reader.read_range(&obj, 9_000..10_001).await.is_err());
        let misses = cache.stats().misses.load(Relaxed);
        assert_eq!(misses, 10, "each block fetched once");
        reader.read_range(&obj, 0..10_000).await.unwrap();
        assert_eq!(cache.stats().misses.load(Relaxed), 10);
    }

    async fn wait_for(what: &str, done: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_read_ahead_fetches_the_blocks_not_held_in_the_background() {
        let (pool, obj, data) = pool_with_object(10_000).await;
        let cache = BlockCache::new(1 << 20, 1000).unwrap();
        let reader = CachedReader::new(Arc::new(pool), cache.clone());
        let stats = cache.stats();
        reader.read_range(&obj, 0..1000).await.unwrap();
        assert_eq!(stats.misses.load(Relaxed), 1);
        // Block 0 is held: blocks 1, 2 and 3 are fetched.
        reader.read_ahead(&obj, 500..4000);
        wait_for("blocks 1-3 read ahead", || {
            stats.read_ahead.load(Relaxed) == 3
        })
        .await;
        let got = reader.read_range(&obj, 1000..4000).await.unwrap();
        assert_eq!(&got[..], &data[1000..4000]);
        assert_eq!(
            stats.misses.load(Relaxed),
            1,
            "read from what was read ahead"
        );
        // Past the object's end is cut; held blocks are not fetched again.
        reader.read_ahead(&obj, 3000..20_000);
        wait_for("blocks 4-9 read ahead", || {
            stats.read_ahead.load(Relaxed) == 9
        })
        .await;
        reader.read_range(&obj, 0..10_000).await.unwrap();
        assert_eq!(stats.misses.load(Relaxed), 1);
        // A reader without read-ahead, or a cache without a budget, fetches nothing.
        let other = BlockCache::new(1 << 20, 1000).unwrap();
        let (pool2, obj2, _) = pool_with_object(3000).await;
        CachedReader::without_read_ahead(&pool2, other.clone()).read_ahead(&obj2, 0..3000);
        let none = BlockCache::new(0, 1000).unwrap();
        CachedReader::new(Arc::new(pool2), none.clone()).read_ahead(&obj2, 0..3000);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(other.stats().read_ahead.load(Relaxed), 0);
        assert_eq!(none.stats().read_ahead.load(Relaxed), 0);
    }

    /// A store whose reads wait until the test lets them through.
    #[derive(Clone)]
    struct Gated {
        pool: Arc<StorePool>,
        gate: Arc<tokio::sync::Semaphore>,
    }

    impl RangeRead for Gated {
        async fn read_range(&self, obj: &ObjectRef, range: Range<u64>) -> Result<Bytes> {
            let _pass = self.gate.acquire().await.expect("gate open");
            self.pool.read_range(obj, range).await
        }
    }

    #[tokio::test]
    async fn a_read_ahead_while_every_task_is_busy_is_skipped() {
        const TASKS: usize = 3;
        let (pool, obj, _) = pool_with_object((TASKS + 2) * 1000).await;
        let cache = BlockCache::new(1 << 20, 1000)
            .unwrap()
            .with_read_ahead_tasks(TASKS);
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let reader = CachedReader::new(
            Gated {
                pool: Arc::new(pool),
                gate: gate.clone(),
            },
            cache.clone(),
        );
        let stats = cache.stats();
        let n = TASKS as u64;
        for i in 0..n {
            reader.read_ahead(&obj, i * 1000..i * 1000 + 1);
        }
        reader.read_ahead(&obj, n * 1000..n * 1000 + 1);
        assert_eq!(stats.read_ahead_skipped.load(Relaxed), 1);
        gate.add_permits(1000);
        wait_for("the running read-aheads finished", || {
            stats.read_ahead.load(Relaxed) == n
        })
        .await;
        // Tasks free again: the same read-ahead now runs.
        wait_for("a task is free", || cache.ahead.available_permits() > 0).await;
        reader.read_ahead(&obj, n * 1000..n * 1000 + 1);
        wait_for("the later read-ahead ran", || {
            stats.read_ahead.load(Relaxed) == n + 1
        })
        .await;
        assert_eq!(stats.read_ahead_skipped.load(Relaxed), 1);
    }

    #[test]
    fn a_local_folder_reads_ahead_with_fewer_tasks_than_a_remote_store() {
        use crate::StoreKind::{Hdfs, Local, Memory, S3};
        assert_eq!(read_ahead_tasks_for([Local]), READ_AHEAD_TASKS_LOCAL);
        assert_eq!(
            read_ahead_tasks_for([Memory, Local]),
            READ_AHEAD_TASKS_LOCAL
        );
        assert_eq!(read_ahead_tasks_for([Local, S3]), READ_AHEAD_TASKS);
        assert_eq!(read_ahead_tasks_for([Hdfs]), READ_AHEAD_TASKS);
        let cache = BlockCache::new(1 << 20, 1000).unwrap();
        assert_eq!(cache.ahead.available_permits(), READ_AHEAD_TASKS);
        let cache = cache.with_read_ahead_tasks(0);
        assert_eq!(cache.ahead.available_permits(), 1, "at least one");
    }

    #[tokio::test]
    async fn budget_bounds_the_bytes_held() {
        let (pool, obj, _) = pool_with_object(100_000).await;
        let cache = BlockCache::new(10_000, 1000).unwrap();
        let reader = CachedReader::new(Arc::new(pool), cache.clone());
        reader.read_range(&obj, 0..100_000).await.unwrap();
        assert!(cache.weighted_size().await <= 10_000);
    }

    #[tokio::test]
    async fn a_new_block_displaces_the_least_recently_used_in_a_full_cache() {
        let (pool, obj, _) = pool_with_object(10_000).await;
        let cache = BlockCache::new(4000, 1000).unwrap();
        let reader = CachedReader::new(Arc::new(pool), cache.clone());
        // Four blocks fill the budget, each read several times.
        for _ in 0..3 {
            for b in 0..4u64 {
                reader
                    .read_range(&obj, b * 1000..b * 1000 + 1)
                    .await
                    .unwrap();
            }
            cache.blocks.run_pending_tasks().await;
        }
        // A block read once (a reader's next block) is kept, in place of
        // the one used longest ago.
        reader.read_range(&obj, 4000..4001).await.unwrap();
        cache.blocks.run_pending_tasks().await;
        assert!(cache.holds(&obj, 4), "the new block was refused");
        assert!(
            !cache.holds(&obj, 0),
            "the least recently used block stayed"
        );
        assert!(cache.weighted_size().await <= 4000);
    }

    #[tokio::test]
    async fn zero_budget_reads_through() {
        let (pool, obj, data) = pool_with_object(3000).await;
        let cache = BlockCache::new(0, 1000).unwrap();
        let got = cache.read(&pool, &obj, 100..2900).await.unwrap();
        assert_eq!(&got[..], &data[100..2900]);
        assert_eq!(cache.stats().misses.load(Relaxed), 0);
    }
}
