//! One conformance suite, run against every backend: memory, a local folder,
//! and S3 on a real moto server that the test starts and stops.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use floe_storage::backend::{BackendSpec, EndpointConfig};
use floe_storage::batch::{BatchView, Compression};
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_storage::segment::{SegmentBuilder, SegmentReader, write_segment};
use floe_storage::wal::{WalBuilder, WalReader};
use floe_storage::{
    BlockCache, CachedReader, ErrorKind, ObjectKey, Offset, PartitionKey, PoolOptions, StorePool,
    TopicId,
};

fn batch(base: i64, n: usize, ts: i64, codec: Compression) -> Bytes {
    let mut b = BatchBuilder::new(base, ts);
    for i in 0..n {
        b.push(RecordSpec::new(
            Some(format!("key-{}", base + i as i64).into_bytes()),
            Some(vec![(base as u8).wrapping_add(i as u8); 200]),
            i as i64,
        ));
    }
    b.build(codec).unwrap()
}

fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn open(url: &str) -> StorePool {
    let eps = EndpointConfig::parse_list(&[url]).unwrap();
    StorePool::open(&eps, PoolOptions::default()).await.unwrap()
}

/// Everything a backend must do for Floe.
async fn suite(pool: StorePool) {
    objects_round_trip(&pool).await;
    missing_and_deleted_objects(&pool).await;
    listing(&pool).await;
    wal_round_trip(&pool).await;
    segment_round_trip(&pool).await;
    large_object_through_the_cache(&pool).await;
}

async fn objects_round_trip(pool: &StorePool) {
    let data = Bytes::from(pseudo_random(100_003, 1));
    let obj = pool
        .put_new(
            |t| ObjectKey::new(format!("obj/{t}.bin")),
            data.clone().into(),
        )
        .await
        .unwrap();
    assert_eq!(obj.size, data.len() as u64);
    assert_eq!(pool.get(&obj).await.unwrap(), data);
    for (a, b) in [
        (0u64, 1u64),
        (1, 2),
        (99_000, 100_003),
        (4096, 8192),
        (7, 7),
    ] {
        assert_eq!(
            pool.get_range(&obj, a..b).await.unwrap(),
            data.slice(a as usize..b as usize),
            "{a}..{b}"
        );
    }
    let head = pool.head(&obj.endpoint, &obj.key).await.unwrap();
    assert_eq!(head, obj);
    // Two writes of the same bytes are two objects.
    let again = pool
        .put_new(
            |t| ObjectKey::new(format!("obj/{t}.bin")),
            data.clone().into(),
        )
        .await
        .unwrap();
    assert_ne!(again.key, obj.key);
    // An empty object is fine.
    let empty = pool
        .put_new(
            |t| ObjectKey::new(format!("obj/{t}.empty")),
            Bytes::new().into(),
        )
        .await
        .unwrap();
    assert_eq!(pool.get(&empty).await.unwrap().len(), 0);
}

async fn missing_and_deleted_objects(pool: &StorePool) {
    let obj = pool
        .put_new(
            |t| ObjectKey::new(format!("del/{t}")),
            Bytes::from_static(b"bye").into(),
        )
        .await
        .unwrap();
    pool.delete(&obj).await.unwrap();
    assert_eq!(
        pool.get(&obj).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // Deleting twice is not an error.
    pool.delete(&obj).await.unwrap();
    let head = pool.head(&obj.endpoint, &obj.key).await.unwrap_err();
    assert_eq!(head.kind(), ErrorKind::NotFound);
}

async fn listing(pool: &StorePool) {
    let ep = pool.endpoint_ids().next().unwrap().clone();
    let mut written = Vec::new();
    for i in 0..5u8 {
        written.push(
            pool.put_new(
                |t| ObjectKey::new(format!("list/a/{t}")),
                vec![i; 10].into(),
            )
            .await
            .unwrap(),
        );
    }
    pool.put_new(
        |t| ObjectKey::new(format!("list/ab/{t}")),
        vec![0; 3].into(),
    )
    .await
    .unwrap();
    let listed = pool.list(&ep, "list/a").await.unwrap();
    written.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(listed, written);
}

async fn wal_round_trip(pool: &StorePool) {
    let topic = TopicId::random();
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    let mut builder = WalBuilder::new();
    let mut expected = Vec::new();
    for p in 0..5u32 {
        let key = PartitionKey::new(topic, p);
        let mut bytes = Vec::new();
        for j in 0..3 {
            let b = batch(j * 10, 10, 1_000 + j, codecs[p as usize]);
            builder.append(key, b.clone()).unwrap();
            bytes.extend_from_slice(&b);
        }
        expected.push((key, bytes));
    }
    let wal = builder.finish();
    let obj = pool
        .put_new(
            |t| ObjectKey::new(format!("wal/0001/{t}.wal")),
            wal.payload(),
        )
        .await
        .unwrap();
    assert_eq!(obj.size, wal.size);
    let reader = WalReader::new(pool);
    let footer = reader.footer(&obj).await.unwrap();
    assert_eq!(footer.entries, wal.entries);
    for (key, bytes) in expected {
        let e = footer.entry(&key).unwrap();
        assert_eq!((e.first_offset, e.last_offset), (Offset(0), Offset(29)));
        let got = reader.read_entry(&obj, e).await.unwrap();
        assert_eq!(&got[..], &bytes[..]);
    }
    // A non-WAL object is reported as corrupt, not misread.
    let junk = pool
        .put_new(
            |t| ObjectKey::new(format!("wal/0001/{t}.wal")),
            vec![7u8; 5000].into(),
        )
        .await
        .unwrap();
    assert_eq!(
        reader.footer(&junk).await.unwrap_err().kind(),
        ErrorKind::Corrupt
    );
}

async fn segment_round_trip(pool: &StorePool) {
    let mut builder = SegmentBuilder::new(1024);
    let mut batches = Vec::new();
    let mut off = 500;
    for i in 0..100 {
        let b = batch(
            off,
            5,
            10_000 + off * 3,
            if i % 2 == 0 {
                Compression::None
            } else {
                Compression::Lz4
            },
        );
        off += 5;
        builder.append(b.clone()).unwrap();
        batches.push(b);
    }
    let meta = write_segment(pool, "segments/t/0", builder.finish().unwrap())
        .await
        .unwrap();
    assert_eq!(
        (meta.base_offset, meta.last_offset),
        (Offset(500), Offset(999))
    );
    assert_eq!(meta.log.endpoint, meta.index.endpoint);
    let reader = SegmentReader::new(pool, 1 << 20);
    for target in [500i64, 501, 777, 999] {
        let got = reader
            .read(&meta, Offset(target), 1)
            .await
            .unwrap()
            .unwrap();
        let v = BatchView::parse(&got.bytes, usize::MAX).unwrap();
        assert!(v.base_offset() <= target && target <= v.last_offset());
        assert_eq!(got.bytes.len(), v.size(), "exactly one whole batch");
    }
    // Record with offset 700 has timestamp 10_000 + 700*3 + 0 (its batch base is 700).
    assert_eq!(
        reader
            .offset_for_timestamp(&meta, 10_000 + 700 * 3)
            .await
            .unwrap(),
        Some(Offset(700))
    );
    assert_eq!(
        reader.offset_for_timestamp(&meta, i64::MAX).await.unwrap(),
        None
    );
}

async fn large_object_through_the_cache(pool: &StorePool) {
    let data = Bytes::from(pseudo_random(8 * 1024 * 1024 + 17, 2));
    let obj = pool
        .put_new(|t| ObjectKey::new(format!("big/{t}")), data.clone().into())
        .await
        .unwrap();
    let cached = CachedReader::without_read_ahead(pool, BlockCache::new(4 << 20, 1 << 20).unwrap());
    use floe_storage::RangeRead;
    for (a, b) in [
        (0u64, 10u64),
        (1_048_570, 1_048_590),
        (0, data.len() as u64),
    ] {
        assert_eq!(
            cached.read_range(&obj, a..b).await.unwrap(),
            data.slice(a as usize..b as usize)
        );
    }
}

#[tokio::test]
async fn memory_backend_conforms() {
    suite(open("memory://").await).await;
}

#[tokio::test]
async fn local_folder_backend_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    suite(open(&url).await).await;
    // Objects are plain files under the folder.
    assert!(dir.path().join("obj").is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_backend_on_moto_conforms() {
    let moto = common::Moto::start();
    // The bucket does not exist yet: opening the pool creates it.
    suite(open(&common::s3_url("floe-conf", "", &moto.endpoint())).await).await;
    // Under a prefix, with the bucket now existing.
    suite(
        open(&common::s3_url(
            "floe-conf",
            "cluster-a/data",
            &moto.endpoint(),
        ))
        .await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_unreachable_endpoint_fails_with_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = common::s3_url("nobody", "", &format!("http://127.0.0.1:{port}"));
    let eps = EndpointConfig::parse_list(&[url]).unwrap();
    let opts = PoolOptions {
        write_timeout: Duration::from_secs(2),
        read_timeout: Duration::from_secs(2),
        ..PoolOptions::default()
    };
    let err = StorePool::open(&eps, opts).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("nobody"), "{err}");
}

#[test]
fn hdfs_without_the_feature_says_so() {
    let spec = BackendSpec::parse("hdfs://namenode:9000/floe").unwrap();
    if cfg!(feature = "hdfs") {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = match rt.block_on(spec.open(&PoolOptions::default())) {
        Ok(_) => panic!("opened hdfs without the feature"),
        Err(e) => e,
    };
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("--features hdfs"), "{err}");
}
