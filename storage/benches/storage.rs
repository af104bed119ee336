#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Benchmarks of floe-storage's hot paths.
//!
//! Run them all (about two minutes) from the workspace root:
//!
//! ```text
//! cargo bench -p floe-storage --bench storage -- --noplot
//! ```
//!
//! or one group with a filter: `... -- --noplot index_lookup`.
//!
//! - `wal_local_fsync/{1MiB,8MiB}`: write a WAL object of many partitions to
//!   the local-folder backend (fsync on), then read its footer and every
//!   partition's range back. Reported as bytes of WAL object per second. The
//!   folder is under Cargo's `target/tmp`, so on a real disk, not a tmpfs.
//! - `index_lookup/{1000,1000000}`: `OffsetIndex::lookup` for pseudo-random
//!   targets in a `.index` of 10^3 and 10^6 entries. Reported per lookup.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use floe_storage::backend::BackendSpec;
use floe_storage::batch::Compression;
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_storage::segment::{INDEX_MAGIC, INDEX_VERSION, OFFSET_ENTRY_LEN, OffsetIndex};
use floe_storage::wal::{WalBuilder, WalObject, WalReader};
use floe_storage::{EndpointId, ObjectKey, PartitionKey, PoolOptions, StorePool, TopicId};

const MIB: usize = 1024 * 1024;
/// Topics × partitions per topic that share one WAL object.
const TOPICS: u8 = 4;
const PARTITIONS_PER_TOPIC: u32 = 16;
/// Records per batch and bytes per record value: batches of about 16 KiB.
const RECORDS_PER_BATCH: usize = 16;
const VALUE_LEN: usize = 1000;

/// A small xorshift generator, so runs are repeatable without a rand crate.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Builds the batches once, round-robin over the partitions, until they add
/// up to `target_bytes`, and lays them out as one WAL object.
fn wal_object(target_bytes: usize) -> WalObject {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let partitions: Vec<PartitionKey> = (0..TOPICS)
        .flat_map(|t| {
            (0..PARTITIONS_PER_TOPIC)
                .map(move |p| PartitionKey::new(TopicId::from_bytes([t; 16]), p))
        })
        .collect();
    let mut next_offset = vec![0i64; partitions.len()];
    let mut wal = WalBuilder::new();
    let mut i = 0usize;
    while (wal.data_bytes() as usize) < target_bytes {
        let slot = i % partitions.len();
        let mut b = BatchBuilder::new(next_offset[slot], 1_700_000_000_000 + i as i64);
        for r in 0..RECORDS_PER_BATCH {
            let value: Vec<u8> = (0..VALUE_LEN).map(|_| rng.next() as u8).collect();
            b.push(RecordSpec::new(
                Some(format!("key-{i}-{r}").into_bytes()),
                Some(value),
                r as i64,
            ));
        }
        let batch = b.build(Compression::None).expect("build batch");
        wal.append(partitions[slot], batch).expect("append batch");
        next_offset[slot] += RECORDS_PER_BATCH as i64;
        i += 1;
    }
    wal.finish()
}

fn wal_local_fsync(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let url = format!("file://{}", dir.path().display());
    let pool = rt.block_on(async {
        let store = BackendSpec::parse(&url)
            .expect("parse store URL")
            .open(&PoolOptions::default())
            .await
            .expect("open local store");
        StorePool::new(
            vec![(EndpointId::new("local"), store)],
            PoolOptions::default(),
        )
        .expect("store pool")
    });

    let mut group = c.benchmark_group("wal_local_fsync");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    for (name, mib) in [("1MiB", 1usize), ("8MiB", 8)] {
        let obj = wal_object(mib * MIB);
        let reader = WalReader::new(&pool);

        // Once, untimed: the round trip gives back exactly what was written.
        rt.block_on(async {
            let stored = pool
                .put_new(|t| ObjectKey::new(format!("check/{t}.wal")), obj.payload())
                .await
                .unwrap();
            assert_eq!(stored.size, obj.size);
            let footer = reader.footer(&stored).await.unwrap();
            assert_eq!(footer.entries, obj.entries);
            pool.delete(&stored).await.unwrap();
        });

        group.throughput(Throughput::Bytes(obj.size));
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (pool, reader, obj) = (&pool, &reader, &obj);
                async move {
                    let mut timed = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        let stored = pool
                            .put_new(|t| ObjectKey::new(format!("wal/{t}.wal")), obj.payload())
                            .await
                            .unwrap();
                        let footer = reader.footer(&stored).await.unwrap();
                        let mut read = 0usize;
                        for entry in &footer.entries {
                            read += reader.read_entry(&stored, entry).await.unwrap().len();
                        }
                        timed += start.elapsed();
                        black_box(read);
                        // Untimed: keep the disk from filling up.
                        pool.delete(&stored).await.unwrap();
                    }
                    timed
                }
            });
        });
    }
    group.finish();
}

/// A `.index` of `entries` entries in the documented layout: one entry per
/// batch of 10 records, one batch per 4 KiB of log.
fn offset_index(entries: u32, base_offset: i64) -> (OffsetIndex, u64) {
    let mut buf = BytesMut::with_capacity(16 + entries as usize * OFFSET_ENTRY_LEN);
    buf.put_slice(INDEX_MAGIC);
    buf.put_u16(INDEX_VERSION);
    buf.put_u16(OFFSET_ENTRY_LEN as u16);
    buf.put_i64(base_offset);
    for i in 0..entries {
        buf.put_u32(i * 10);
        buf.put_u32(i * 4096);
    }
    let log_size = entries as u64 * 4096;
    let index = OffsetIndex::parse(Bytes::from(buf)).expect("parse index");
    index.validate(log_size).expect("valid index");
    (index, log_size)
}

fn index_lookup(c: &mut Criterion) {
    const BASE: i64 = 5_000_000;
    let mut group = c.benchmark_group("index_lookup");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for entries in [1_000u32, 1_000_000] {
        let (index, _) = offset_index(entries, BASE);
        assert_eq!(index.len(), entries as usize);
        // Targets anywhere in the index's offset range (not only entry offsets).
        let span = entries as u64 * 10;
        let mut rng = XorShift(0x2545_f491_4f6c_dd1d ^ entries as u64);
        let targets: Vec<i64> = (0..4096)
            .map(|_| BASE + (rng.next() % span) as i64)
            .collect();
        for &t in targets.iter().take(64) {
            let want = ((t - BASE) / 10) as u32 * 4096;
            assert_eq!(index.lookup(t), want, "target {t}");
        }
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::from_parameter(entries), |b| {
            let mut i = 0usize;
            b.iter(|| {
                i = (i + 1) & (targets.len() - 1);
                index.lookup(black_box(targets[i]))
            });
        });
    }
    group.finish();
}

criterion_group!(benches, wal_local_fsync, index_lookup);
criterion_main!(benches);
