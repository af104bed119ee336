//! The orphan scan against a real metadata node and a local store folder:
//! objects the metadata never knew are found and, once older than the safe
//! age, deleted; objects it knows (referenced, or unreferenced and waiting
//! for the sweeper) and a known segment's index objects never are.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use floe_broker::orphans::{Orphan, OrphanError, ScanOptions, scan};
use floe_broker::{Acks, Broker};
use floe_storage::batch::Compression;
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_storage::{PartitionKey, TopicId};
use floe_testkit::{Cluster, wait_owned};

const HOUR: Duration = Duration::from_secs(3_600);

fn batch(value: &str, ts: i64) -> Bytes {
    let mut b = BatchBuilder::new(0, ts);
    b.push(RecordSpec::new(
        Some(b"k".to_vec()),
        Some(value.as_bytes().to_vec()),
        0,
    ));
    b.build(Compression::None).unwrap()
}

/// Every file under `dir`, as keys relative to it.
fn files(dir: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().to_string();
                out.insert(rel);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    out
}

/// Makes a file look `age` old to a listing.
fn set_age(path: &Path, age: Duration) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

fn plant(store: &Path, key: &str, age: Duration) -> PathBuf {
    let p = store.join(key);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, b"what a late hedge leaves").unwrap();
    set_age(&p, age);
    p
}

/// A broker with a topic whose log is in segments (with their index
/// objects), in WAL objects compaction left unreferenced (known to the
/// metadata, not swept yet), and in WAL objects still referenced.
async fn a_log(env: &Cluster) -> (Broker, TopicId, Vec<String>) {
    let t = env
        .create_topic("logs", 1, &[("segment.bytes", "1000")])
        .await;
    let key = PartitionKey::new(t, 0);
    let b = env.broker(|_| {}).await;
    wait_owned(&b, key).await;
    let mut values = Vec::new();
    for i in 0..20 {
        let v = format!("{i:04}-{}", "p".repeat(100));
        b.produce(&key, &batch(&v, 1_000 + i), Acks::All)
            .await
            .unwrap();
        values.push(v);
    }
    assert!(b.compact_now().await.unwrap() >= 2);
    for i in 20..23 {
        let v = format!("{i:04}-tail");
        b.produce(&key, &batch(&v, 1_000 + i), Acks::All)
            .await
            .unwrap();
        values.push(v);
    }
    (b, t, values)
}

/// Every value of the topic's partition, read from offset 0.
async fn values(b: &Broker, t: TopicId) -> Vec<String> {
    let key = PartitionKey::new(t, 0);
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let d = b.fetch(&key, offset, 1 << 20).await.unwrap();
        if d.records.is_empty() {
            return out;
        }
        let all = Bytes::from(d.records.concat());
        for item in floe_storage::batch::BatchIter::new(&all, usize::MAX) {
            let (at, view) = item.unwrap();
            let raw = all.slice(at..at + view.size());
            for r in floe_storage::records::decode_records(&raw, 1 << 20).unwrap() {
                if r.offset >= offset {
                    out.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
                }
            }
            offset = view.next_offset();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_objects_older_than_the_safe_age_go_and_known_ones_stay() {
    let env = Cluster::start().await;
    let (b, t, produced) = a_log(&env).await;
    let before = files(&env.store);
    assert!(before.iter().any(|k| k.ends_with(".index")), "{before:?}");
    assert!(before.iter().any(|k| k.ends_with(".wal")), "{before:?}");
    // Everything the broker wrote looks old: only knowledge keeps it.
    for k in &before {
        set_age(&env.store.join(k), 2 * HOUR);
    }
    let seg = format!("segments/{}/0/00000000000000000000.0rphan", t.0);
    let old: BTreeSet<String> = [
        "wal/77/late-hedge.wal".to_string(),
        format!("{seg}.log"),
        format!("{seg}.index"),
        format!("{seg}.timeindex"),
    ]
    .into();
    for k in &old {
        plant(&env.store, k, 2 * HOUR);
    }
    plant(&env.store, "wal/77/young.wal", Duration::from_secs(5));
    // Not a log prefix: never listed, whatever its age.
    plant(&env.store, "exports/logs/x.parquet", 2 * HOUR);

    let pool = env.pool().await;
    // A dry run finds exactly the planted objects and deletes nothing.
    let mut seen: Vec<Orphan> = Vec::new();
    let dry = ScanOptions {
        delete: false,
        ..ScanOptions::deleting(HOUR)
    };
    let r = scan(
        &pool,
        env.meta.as_ref(),
        &dry,
        |o| seen.push(o.clone()),
        || true,
    )
    .await
    .unwrap();
    let found: BTreeSet<String> = seen.iter().map(|o| o.object.key.to_string()).collect();
    let mut planted = old.clone();
    planted.insert("wal/77/young.wal".into());
    assert_eq!(found, planted);
    assert_eq!((r.unknown, r.old_enough, r.deleted), (5, 4, 0));
    assert!(seen.iter().all(|o| !o.deleted));
    assert!(
        seen.iter()
            .all(|o| o.old_enough == (o.object.key.as_str() != "wal/77/young.wal"))
    );
    assert_eq!(files(&env.store).len(), before.len() + 6);

    // A scan that deletes takes the old ones, and only them.
    let r = scan(
        &pool,
        env.meta.as_ref(),
        &ScanOptions::deleting(HOUR),
        |_| {},
        || true,
    )
    .await
    .unwrap();
    assert_eq!((r.unknown, r.deleted, r.delete_failures), (5, 4, 0));
    let mut want = before.clone();
    want.insert("wal/77/young.wal".into());
    want.insert("exports/logs/x.parquet".into());
    assert_eq!(files(&env.store), want);
    // What the metadata knows still reads back whole.
    assert_eq!(values(&b, t).await, produced);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_without_the_clusters_endpoint_ids_deletes_nothing() {
    let env = Cluster::start().await;
    let (b, _, _) = a_log(&env).await;
    for k in files(&env.store) {
        set_age(&env.store.join(k), 2 * HOUR);
    }
    let before = files(&env.store);
    // The same folder, under the id a lone store gets (`default`), not the
    // cluster's `local`: every object would look unknown.
    let url = format!("file://{}", env.store.display());
    let endpoints = floe_storage::backend::EndpointConfig::parse_list(&[url]).unwrap();
    let pool = floe_storage::StorePool::open(&endpoints, floe_storage::PoolOptions::default())
        .await
        .unwrap();
    let err = scan(
        &pool,
        env.meta.as_ref(),
        &ScanOptions::deleting(HOUR),
        |_| {},
        || true,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, OrphanError::ForeignPool { missing, .. } if missing == &["local".to_string()]),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert_eq!(files(&env.store), before);
    b.shutdown().await;
}

/// A store full of log objects checked against a metadata cluster that
/// knows none (another cluster's, a fresh one): refused, nothing deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_cluster_that_knows_no_object_deletes_nothing() {
    let env = Cluster::start().await;
    let (b, _, _) = a_log(&env).await;
    b.shutdown().await;
    for k in files(&env.store) {
        set_age(&env.store.join(k), 2 * HOUR);
    }
    let before = files(&env.store);
    let other = Cluster::start().await;
    let pool = env.pool().await;
    let err = scan(
        &pool,
        other.meta.as_ref(),
        &ScanOptions::deleting(HOUR),
        |_| {},
        || true,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, OrphanError::NothingKnown), "{err}");
    assert!(!err.is_retryable());
    assert_eq!(files(&env.store), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_serving_shard_zero_scans_and_a_scan_told_to_stop_deletes_nothing() {
    let env = Cluster::start().await;
    let (b, t, produced) = a_log(&env).await;
    let started = Instant::now();
    while !b.owned_shards().contains(&0) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "shard 0 never served"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for k in files(&env.store) {
        set_age(&env.store.join(k), 2 * HOUR);
    }
    let before = files(&env.store);
    plant(&env.store, "wal/77/a.wal", 2 * HOUR);
    plant(
        &env.store,
        "segments/x/0/00000000000000000000.b.log",
        2 * HOUR,
    );

    // Told to stop (the shard moved): nothing more is asked or deleted.
    let pool = env.pool().await;
    let r = scan(
        &pool,
        env.meta.as_ref(),
        &ScanOptions::deleting(HOUR),
        |_| {},
        || false,
    )
    .await
    .unwrap();
    assert!(r.stopped);
    assert_eq!(r.deleted, 0);
    assert_eq!(files(&env.store).len(), before.len() + 2);

    // The broker scans: it serves shard 0 (the default safe age is an hour).
    let r = b
        .scan_orphans_now()
        .await
        .expect("the broker serves shard 0")
        .unwrap();
    assert_eq!((r.unknown, r.deleted, r.stopped), (2, 2, false));
    assert_eq!(files(&env.store), before);
    assert_eq!(values(&b, t).await, produced);
    b.shutdown().await;
}
