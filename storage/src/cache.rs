//! A bounded block cache for object reads.
//!
//! Objects are immutable (a key is never rewritten), so a cached block never
//! goes stale. Ranges are read as fixed-size blocks; concurrent misses on one
//! block share a single fetch. The budget counts the bytes held.

use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::error::{Result, StorageError};
use crate::ids::{EndpointId, ObjectKey, ObjectRef};
use crate::pool::RangeRead;

/// Default block size: 1 MiB.
pub const DEFAULT_BLOCK_SIZE: u64 = 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BlockKey {
    endpoint: EndpointId,
    key: ObjectKey,
    block: u64,
}

/// Hit and miss counts, for metrics and tests.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub hits: std::sync::atomic::AtomicU64,
    pub misses: std::sync::atomic::AtomicU64,
}

/// The cache itself, shared by every reader of a process.
#[derive(Debug, Clone)]
pub struct BlockCache {
    blocks: moka::future::Cache<BlockKey, Bytes>,
    block_size: u64,
    budget: u64,
    stats: Arc<CacheStats>,
}

impl BlockCache {
    /// A cache holding at most `budget_bytes` of blocks of `block_size` bytes.
    pub fn new(budget_bytes: u64, block_size: u64) -> Result<Self> {
        if block_size == 0 || block_size > u32::MAX as u64 {
            return Err(StorageError::config(format!(
                "cache block size must be between 1 byte and 4 GiB, not {block_size}"
            )));
        }
        let blocks = moka::future::Cache::builder()
            .max_capacity(budget_bytes)
            .weigher(|_k: &BlockKey, v: &Bytes| v.len().min(u32::MAX as usize) as u32)
            .build();
        Ok(Self {
            blocks,
            block_size,
            budget: budget_bytes,
            stats: Arc::default(),
        })
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

    /// Bytes currently held (after pending evictions are applied).
    pub async fn weighted_size(&self) -> u64 {
        self.blocks.run_pending_tasks().await;
        self.blocks.weighted_size()
    }

    async fn block<R: RangeRead>(&self, inner: &R, obj: &ObjectRef, block: u64) -> Result<Bytes> {
        use std::sync::atomic::Ordering::Relaxed;
        let key = BlockKey {
            endpoint: obj.endpoint.clone(),
            key: obj.key.clone(),
            block,
        };
        if let Some(b) = self.blocks.get(&key).await {
            self.stats.hits.fetch_add(1, Relaxed);
            return Ok(b);
        }
        let start = block * self.block_size;
        let end = (start + self.block_size).min(obj.size);
        self.blocks
            .try_get_with(key, async {
                self.stats.misses.fetch_add(1, Relaxed);
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

/// A [`RangeRead`] that serves reads of `inner` through a [`BlockCache`].
#[derive(Debug, Clone)]
pub struct CachedReader<R> {
    inner: R,
    cache: BlockCache,
}

impl<R: RangeRead> CachedReader<R> {
    pub fn new(inner: R, cache: BlockCache) -> Self {
        Self { inner, cache }
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
        let reader = CachedReader::new(&pool, cache.clone());
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

    #[tokio::test]
    async fn budget_bounds_the_bytes_held() {
        let (pool, obj, _) = pool_with_object(100_000).await;
        let cache = BlockCache::new(10_000, 1000).unwrap();
        let reader = CachedReader::new(&pool, cache.clone());
        reader.read_range(&obj, 0..100_000).await.unwrap();
        assert!(cache.weighted_size().await <= 10_000);
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
