//! A broker against a real metadata node (HTTP on 127.0.0.1) and a local
//! object store: produce with acks=all, fetch from the tail and from the
//! store, a restart that reads back what was acknowledged, offsets by
//! timestamp, compaction into segments, retention and the sweeper.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use floe_broker::group::{CommitParams, GroupError, OffsetToCommit};
use floe_broker::{Acks, Broker, Coordinator, ErrorKind, OffsetSpec};
use floe_storage::batch::{BatchIter, Compression};
use floe_storage::records::{BatchBuilder, RecordSpec, decode_records};
use floe_storage::{PartitionKey, TopicId};
use floe_testkit::{Cluster, wait_owned};

fn batch(values: &[&str], ts: i64, codec: Compression) -> Bytes {
    let mut b = BatchBuilder::new(0, ts);
    for (i, v) in values.iter().enumerate() {
        b.push(RecordSpec::new(
            Some(format!("k{i}").into_bytes()),
            Some(v.as_bytes().to_vec()),
            i as i64,
        ));
    }
    b.build(codec).unwrap()
}

/// A fetch answer's pieces joined: its batches back to back.
fn joined(d: &floe_broker::FetchData) -> Vec<u8> {
    d.records.concat()
}

/// All records (offset, value) from `offset` to the high watermark.
async fn read_all(b: &Broker, key: &PartitionKey, mut offset: i64) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    loop {
        let d = b.fetch(key, offset, 64 * 1024).await.unwrap();
        if d.records.is_empty() {
            return out;
        }
        let all = bytes::Bytes::from(joined(&d));
        for item in BatchIter::new(&all, usize::MAX) {
            let (at, view) = item.unwrap();
            let raw = all.slice(at..at + view.size());
            for r in decode_records(&raw, 1 << 20).unwrap() {
                if r.offset >= offset {
                    out.push((
                        r.offset,
                        String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
                    ));
                }
            }
            offset = view.next_offset();
        }
    }
}

/// Produces `values` as one batch with acks=all and adds each record's
/// (offset, value) to `expected`; returns the batch's base offset.
async fn produce_expecting(
    b: &Broker,
    key: &PartitionKey,
    values: Vec<String>,
    ts: i64,
    codec: Compression,
    expected: &mut Vec<(i64, String)>,
) -> i64 {
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let ok = b
        .produce(key, &batch(&refs, ts, codec), Acks::All)
        .await
        .unwrap();
    for (j, v) in values.into_iter().enumerate() {
        expected.push((ok.base_offset + j as i64, v));
    }
    ok.base_offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_batches_survive_a_restart_and_are_served_from_the_store() {
    let env = Cluster::start().await;
    let t = env.create_topic("orders", 2, &[]).await;
    let key = PartitionKey::new(t, 1);
    let b = env.broker(|_| {}).await;
    wait_owned(&b, key).await;

    let mut expected = Vec::new();
    for i in 0..20 {
        let vals: Vec<String> = (0..5).map(|j| format!("v{i}-{j}")).collect();
        let codec = [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ][i % 5];
        let base =
            produce_expecting(&b, &key, vals, 1_000 + i as i64 * 10, codec, &mut expected).await;
        assert_eq!(base, i as i64 * 5);
    }
    let (start, hw, leo) = b.log(&key).unwrap().offsets();
    assert_eq!((start, hw, leo), (0, 100, 100));
    assert_eq!(read_all(&b, &key, 0).await, expected);
    // From the middle of a batch: the batch holding it comes back whole.
    let d = b.fetch(&key, 7, 1).await.unwrap();
    let all = joined(&d);
    let mut batches = BatchIter::new(&all, usize::MAX);
    let (_, v) = batches.next().unwrap().unwrap();
    assert!(batches.next().is_none(), "one batch even over max_bytes");
    assert_eq!(v.base_offset(), 5);
    // Out of range.
    assert_eq!(
        b.fetch(&key, 101, 1024).await.unwrap_err().kind(),
        ErrorKind::OffsetOutOfRange
    );
    // Not owned.
    let other = PartitionKey::new(TopicId(uuid::Uuid::new_v4()), 0);
    assert_eq!(
        b.fetch(&other, 0, 1024).await.unwrap_err().kind(),
        ErrorKind::NotOwner
    );

    b.shutdown().await;
    drop(b);
    // A new broker process (same id): nothing in memory, everything from the store.
    let b2 = env.broker(|_| {}).await;
    wait_owned(&b2, key).await;
    assert_eq!(b2.log(&key).unwrap().offsets().1, 100);
    assert_eq!(read_all(&b2, &key, 0).await, expected);
    let ok = b2
        .produce(
            &key,
            &batch(&["after"], 5_000, Compression::None),
            Acks::All,
        )
        .await
        .unwrap();
    assert_eq!(ok.base_offset, 100);
    b2.shutdown().await;
    if let Some(n) = env.meta_node {
        n.shutdown().await;
    }
}

/// A fetch that reads from the store asks for the partition's next WAL
/// objects ahead, so that a catch-up reader's next fetches find them in the
/// block cache instead of waiting for the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_from_the_store_reads_the_partitions_next_objects_ahead() {
    use std::sync::atomic::Ordering::Relaxed;
    let env = Cluster::start().await;
    let t = env.create_topic("ahead", 1, &[]).await;
    let key = PartitionKey::new(t, 0);
    let b = env.broker(|_| {}).await;
    wait_owned(&b, key).await;
    let mut expected = Vec::new();
    for i in 0..8 {
        // acks=all: each produce is its own flush, so its own WAL object.
        let vals: Vec<String> = (0..3).map(|j| format!("r{i}-{j}")).collect();
        produce_expecting(&b, &key, vals, 1_000, Compression::None, &mut expected).await;
    }
    b.shutdown().await;
    drop(b);
    // A new broker process: nothing in memory, every read from the store.
    let b2 = env.broker(|_| {}).await;
    wait_owned(&b2, key).await;
    let first = b2.fetch(&key, 0, 1).await.unwrap();
    assert!(!first.records.is_empty());
    let stats = b2.cache_stats();
    let deadline = Instant::now() + Duration::from_secs(20);
    while stats.read_ahead.load(Relaxed) < 7 {
        assert!(
            Instant::now() < deadline,
            "the seven later objects were not read ahead: {} were",
            stats.read_ahead.load(Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let misses = stats.misses.load(Relaxed);
    assert_eq!(read_all(&b2, &key, 0).await, expected);
    assert_eq!(
        stats.misses.load(Relaxed),
        misses,
        "every later fetch found its object in the cache"
    );
    b2.shutdown().await;
    if let Some(n) = env.meta_node {
        n.shutdown().await;
    }
}

/// The records of a fetch answer at or after `from` (offset, value), and
/// the offset after its last batch.
fn records_of(d: &floe_broker::FetchData, from: i64) -> (Vec<(i64, String)>, i64) {
    let all = bytes::Bytes::from(joined(d));
    let mut out = Vec::new();
    let mut next = from;
    for item in BatchIter::new(&all, usize::MAX) {
        let (at, view) = item.unwrap();
        let raw = all.slice(at..at + view.size());
        for r in decode_records(&raw, 1 << 20).unwrap() {
            if r.offset >= from {
                out.push((
                    r.offset,
                    String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
                ));
            }
        }
        next = view.next_offset();
    }
    (out, next)
}

/// A committed object the store no longer has (it acknowledged a PUT it
/// did not keep, or someone deleted it): a fetch answers the batches
/// before it, a fetch at it fails with a storage error (Kafka's
/// KAFKA_STORAGE_ERROR, which clients retry) naming the missing object,
/// and no fetch ever skips past it or serves other records in its place.
/// Before, one failed range failed the whole fetch: a reader from offset 0
/// got nothing at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_stops_before_a_committed_object_the_store_lost() {
    let env = Cluster::start().await;
    let t = env.create_topic("holes", 1, &[]).await;
    let key = PartitionKey::new(t, 0);
    let b = env.broker(|_| {}).await;
    wait_owned(&b, key).await;
    let mut expected = Vec::new();
    // The WAL object each batch went to (acks=all: one flush each).
    let mut objects = Vec::new();
    let mut seen: std::collections::HashSet<String> = walk(&env.store).into_iter().collect();
    for i in 0..6 {
        let vals: Vec<String> = (0..3).map(|j| format!("h{i}-{j}")).collect();
        let base = produce_expecting(&b, &key, vals, 1_000, Compression::None, &mut expected).await;
        assert_eq!(base, i * 3);
        let new: Vec<String> = walk(&env.store)
            .into_iter()
            .filter(|p| p.ends_with(".wal") && !seen.contains(p))
            .collect();
        assert_eq!(new.len(), 1, "one WAL object per acks=all produce: {new:?}");
        seen.extend(new.iter().cloned());
        objects.extend(new);
    }
    b.shutdown().await;
    drop(b);
    // The store lost the fourth batch's object (offsets 9 to 11).
    std::fs::remove_file(&objects[3]).unwrap();
    // A new broker process: every read from the store.
    let b2 = env.broker(|_| {}).await;
    wait_owned(&b2, key).await;
    assert_eq!(b2.log(&key).unwrap().offsets().1, 18);

    let mut offset = 0;
    let mut got = Vec::new();
    let error = loop {
        match b2.fetch(&key, offset, 1 << 20).await {
            Ok(d) => {
                let (records, next) = records_of(&d, offset);
                assert!(
                    !records.is_empty(),
                    "an empty answer at {offset}, below the high watermark"
                );
                got.extend(records);
                offset = next;
            }
            Err(e) => break e,
        }
    };
    assert_eq!(offset, 9, "the reader stops at the missing object");
    assert_eq!(got, expected[..9], "the batches before it, whole");
    assert_eq!(error.kind(), ErrorKind::Storage, "{error}");
    assert_eq!(
        error.store_kind(),
        Some(floe_storage::ErrorKind::NotFound),
        "{error}"
    );
    let name = std::path::Path::new(&objects[3])
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        error.to_string().contains(&name),
        "names the object: {error}"
    );
    // Asked again (as a client retries), the same: never the records after
    // the hole in its place.
    let again = b2.fetch(&key, 9, 1 << 20).await.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::Storage);
    let inside = b2.fetch(&key, 10, 1 << 20).await.unwrap_err();
    assert_eq!(inside.kind(), ErrorKind::Storage);
    // Past the hole, the rest is served.
    assert_eq!(read_all(&b2, &key, 12).await, expected[12..]);
    b2.shutdown().await;
    if let Some(n) = env.meta_node {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_by_time_validation_and_acks() {
    let env = Cluster::start().await;
    let t = env
        .create_topic("times", 1, &[("max.message.bytes", "2000")])
        .await;
    let key = PartitionKey::new(t, 0);
    let b = env.broker(|_| {}).await;
    wait_owned(&b, key).await;
    // Timestamps not monotonic across batches: 100.., 300.., 200..
    for base in [100, 300, 200] {
        b.produce(
            &key,
            &batch(&["a", "b", "c"], base, Compression::None),
            Acks::All,
        )
        .await
        .unwrap();
    }
    let at = |t| b.list_offset(&key, OffsetSpec::Timestamp(t));
    assert_eq!(at(0).await.unwrap().offset, 0);
    assert_eq!(at(101).await.unwrap().offset, 1);
    assert_eq!(at(102).await.unwrap().offset, 2);
    assert_eq!(
        at(103).await.unwrap().offset,
        3,
        "first record with ts >= 103 is offset 3 (ts 300)"
    );
    assert_eq!(at(250).await.unwrap().offset, 3);
    assert_eq!(at(303).await.unwrap().offset, -1);
    let max = b.list_offset(&key, OffsetSpec::MaxTimestamp).await.unwrap();
    assert_eq!((max.offset, max.timestamp), (5, 302));
    assert_eq!(
        b.list_offset(&key, OffsetSpec::Latest)
            .await
            .unwrap()
            .offset,
        9
    );
    assert_eq!(
        b.list_offset(&key, OffsetSpec::Earliest)
            .await
            .unwrap()
            .offset,
        0
    );

    // Too large for max.message.bytes.
    let big = "x".repeat(3000);
    let e = b
        .produce(&key, &batch(&[&big], 1, Compression::None), Acks::All)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MessageTooLarge);
    // A flipped byte fails the CRC; nothing is assigned.
    let mut bad = batch(&["a"], 1, Compression::None).to_vec();
    let n = bad.len();
    bad[n - 2] ^= 0xff;
    assert_eq!(
        b.produce(&key, &bad, Acks::All).await.unwrap_err().kind(),
        ErrorKind::CorruptMessage
    );
    assert_eq!(
        b.produce(&key, &bad[..30], Acks::All)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::CorruptMessage
    );
    assert_eq!(b.log(&key).unwrap().offsets().2, 9);
    // acks=1 answers at sequencing; the data still becomes durable.
    let ok = b
        .produce(&key, &batch(&["one"], 400, Compression::None), Acks::Leader)
        .await
        .unwrap();
    assert_eq!(ok.base_offset, 9);
    b.flush_all(Duration::from_secs(5)).await;
    assert_eq!(b.log(&key).unwrap().offsets().1, 10);
    b.shutdown().await;
}

/// Log compaction keeps the latest record of each key at its offset; a
/// fetch from an offset compacted away answers from the next batch, and a
/// tombstone goes once delete.retention.ms has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cleaner_keeps_the_latest_record_of_each_key() {
    let env = Cluster::start().await;
    let topic = env
        .create_topic(
            "cleaned",
            1,
            &[
                ("cleanup.policy", "compact"),
                ("segment.bytes", "1000"),
                ("delete.retention.ms", "0"),
            ],
        )
        .await;
    let key = PartitionKey::new(topic, 0);
    let b = env.broker(|_| {}).await;
    wait_owned(&b, key).await;
    let one = |k: &str, v: Option<&str>, codec| {
        let mut x = BatchBuilder::new(0, 1_000);
        x.push(RecordSpec::new(
            Some(k.as_bytes().to_vec()),
            v.map(|v| v.as_bytes().to_vec()),
            0,
        ));
        x.build(codec).unwrap()
    };
    for i in 0..40 {
        let v = format!("v{i}-{}", "p".repeat(60));
        let codec = if i % 2 == 0 {
            Compression::Zstd
        } else {
            Compression::None
        };
        b.produce(
            &key,
            &one(&format!("k{}", i % 4), Some(&v), codec),
            Acks::All,
        )
        .await
        .unwrap();
    }
    // k3's last value is deleted; offset 41 keeps the log's end a record.
    b.produce(&key, &one("k3", None, Compression::None), Acks::All)
        .await
        .unwrap();
    b.produce(&key, &one("k0", Some("last"), Compression::None), Acks::All)
        .await
        .unwrap();
    assert!(b.compact_now().await.unwrap() >= 3, "several segments");
    assert_eq!(b.clean_now().await.unwrap(), 38);
    let got = read_all_keys(&b, &key, 0).await;
    let want: Vec<(i64, String, Option<String>)> = vec![
        (37, "k1".into(), Some(format!("v37-{}", "p".repeat(60)))),
        (38, "k2".into(), Some(format!("v38-{}", "p".repeat(60)))),
        (40, "k3".into(), None),
        (41, "k0".into(), Some("last".into())),
    ];
    assert_eq!(got, want);
    // From inside a gap: the next batch.
    assert_eq!(read_all_keys(&b, &key, 5).await, want);
    assert_eq!(read_all_keys(&b, &key, 39).await, want[2..]);
    // Every record has timestamp 1000: by time, the first one kept.
    let at = b
        .list_offset(&key, OffsetSpec::Timestamp(1_000))
        .await
        .unwrap();
    assert_eq!(at.offset, 37);
    // The tombstone's horizon (delete.retention.ms = 0) has passed at the
    // next cleaning.
    assert_eq!(b.clean_now().await.unwrap(), 1);
    let got = read_all_keys(&b, &key, 0).await;
    assert_eq!(got, [want[0].clone(), want[1].clone(), want[3].clone()]);
    b.shutdown().await;
}

/// Every record from `offset` on as (offset, key, value).
async fn read_all_keys(
    b: &Broker,
    key: &PartitionKey,
    mut offset: i64,
) -> Vec<(i64, String, Option<String>)> {
    let hw = b.log(key).unwrap().offsets().1;
    let mut out = Vec::new();
    let text = |x: Option<bytes::Bytes>| x.map(|x| String::from_utf8(x.to_vec()).unwrap());
    while offset < hw {
        let d = b.fetch(key, offset, 64 * 1024).await.unwrap();
        assert!(!d.records.is_empty(), "nothing at {offset} below {hw}");
        let all = bytes::Bytes::from(joined(&d));
        for item in BatchIter::new(&all, usize::MAX) {
            let (at, view) = item.unwrap();
            let raw = all.slice(at..at + view.size());
            for r in decode_records(&raw, 1 << 20).unwrap() {
                if r.offset >= offset {
                    out.push((r.offset, text(r.key).unwrap(), text(r.value)));
                }
            }
            offset = view.next_offset();
        }
    }
    out
}

/// A compact-only topic is never deleted by retention (the cleaner keeps
/// the latest record of each key instead), while `compact,delete` still
/// deletes by size as Kafka does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_only_topics_skip_time_and_size_retention() {
    let env = Cluster::start().await;
    let limits = [
        ("segment.bytes", "2000"),
        ("retention.bytes", "3000"),
        ("retention.ms", "1"),
    ];
    let compact = env
        .create_topic(
            "compacted",
            1,
            &[&limits[..], &[("cleanup.policy", "compact")]].concat(),
        )
        .await;
    let both = env
        .create_topic(
            "compacted-and-deleted",
            1,
            &[&limits[..], &[("cleanup.policy", "compact,delete")]].concat(),
        )
        .await;
    let (kc, kb) = (PartitionKey::new(compact, 0), PartitionKey::new(both, 0));
    let b = env
        .broker(|c| c.retention_check_interval = Duration::from_secs(3600))
        .await;
    wait_owned(&b, kc).await;
    wait_owned(&b, kb).await;
    for key in [kc, kb] {
        for i in 0..30 {
            let v = format!("{i:04}-{}", "p".repeat(100));
            b.produce(&key, &batch(&[&v], 1_000 + i, Compression::None), Acks::All)
                .await
                .unwrap();
        }
    }
    assert!(
        b.compact_now().await.unwrap() >= 4,
        "segments in both topics"
    );
    assert_eq!(b.retention_now().await.unwrap(), 1, "only compact,delete");
    assert_eq!(b.log(&kc).unwrap().offsets().0, 0, "compact-only keeps all");
    assert_eq!(read_all(&b, &kc, 0).await.len(), 30);
    assert!(
        b.log(&kb).unwrap().offsets().0 > 0,
        "compact,delete deletes"
    );
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_retention_and_the_sweeper() {
    let env = Cluster::start().await;
    let t = env
        .create_topic(
            "logs",
            1,
            &[("segment.bytes", "2000"), ("retention.bytes", "3000")],
        )
        .await;
    let key = PartitionKey::new(t, 0);
    let b = env
        .broker(|c| {
            c.orphan_grace = Duration::from_millis(0);
            // Retention and the sweeper run when this test says (below), so
            // none of it happens between compaction and the first reads.
            c.retention_check_interval = Duration::from_secs(3600);
        })
        .await;
    wait_owned(&b, key).await;
    let mut expected = Vec::new();
    for i in 0..30 {
        let v = format!("{i:04}-{}", "p".repeat(100));
        let ok = b
            .produce(&key, &batch(&[&v], 1_000 + i, Compression::None), Acks::All)
            .await
            .unwrap();
        expected.push((ok.base_offset, v));
    }
    let wal_files = || {
        walk(&env.store)
            .into_iter()
            .filter(|p| p.ends_with(".wal"))
            .count()
    };
    let before = wal_files();
    assert!(before >= 1);
    let made = b.compact_now().await.unwrap();
    assert!(
        made >= 2,
        "30 × ~190 bytes in segments of 2000 bytes: {made}"
    );
    // Fetches now come from segments and return the same records.
    assert_eq!(read_all(&b, &key, 0).await, expected);
    assert_eq!(
        b.list_offset(&key, OffsetSpec::Timestamp(1_010))
            .await
            .unwrap()
            .offset,
        10
    );
    let segs = walk(&env.store)
        .into_iter()
        .filter(|p| p.ends_with(".log"))
        .count();
    assert_eq!(segs, made);
    // Retention by bytes (3000) drops the oldest segments, never the newest.
    let started = Instant::now();
    loop {
        b.retention_now().await.unwrap();
        b.sweep_now().await.unwrap();
        let (start, _, _) = b.log(&key).unwrap().offsets();
        if start > 0 && wal_files() == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "retention and sweeping did not happen (start {start}, wal files {})",
            wal_files()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (start, hw, _) = b.log(&key).unwrap().offsets();
    assert!(start > 0 && start < hw);
    assert_eq!(
        b.fetch(&key, 0, 1024).await.unwrap_err().kind(),
        ErrorKind::OffsetOutOfRange
    );
    assert_eq!(
        read_all(&b, &key, start).await,
        expected[start as usize..].to_vec()
    );
    // DeleteRecords moves it further, to the exact offset asked.
    assert_eq!(b.delete_records(&key, 25).await.unwrap(), 25);
    assert_eq!(
        b.list_offset(&key, OffsetSpec::Earliest)
            .await
            .unwrap()
            .offset,
        25
    );
    assert_eq!(
        b.delete_records(&key, 99).await.unwrap_err().kind(),
        ErrorKind::OffsetOutOfRange
    );
    // Deleting the topic removes its data: the broker drops the partition
    // and the sweeper deletes every object of it.
    env.meta
        .call::<floe_metadata::api::routes::DeleteTopic>(floe_metadata::api::proto::TopicName {
            name: "logs".into(),
        })
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        b.sweep_now().await.unwrap();
        let left = walk(&env.store);
        if left.is_empty() && b.log(&key).is_none() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "objects left after the topic was deleted: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.shutdown().await;
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

fn idempotent(pid: i64, epoch: i16, seq: i32, values: &[&str]) -> Bytes {
    let mut b = BatchBuilder::new(0, 1_000).producer(pid, epoch, seq, false);
    for v in values {
        b.push(RecordSpec::new(None, Some(v.as_bytes().to_vec()), 0));
    }
    b.build(Compression::None).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produced_batches_are_recompressed_into_the_topics_compression_type() {
    let env = Cluster::start().await;
    let t = env
        .create_topic("zstd-topic", 1, &[("compression.type", "zstd")])
        .await;
    let key = PartitionKey::new(t, 0);
    let b = env.broker(|_| {}).await;
    wait_owned(&b, key).await;
    let mut expected = Vec::new();
    // Every codec, through the async path (recompressed off the runtime)
    // and the synchronous one.
    for (i, codec) in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ]
    .into_iter()
    .enumerate()
    {
        let vals: Vec<String> = (0..4).map(|j| format!("{codec:?}-{j}")).collect();
        let refs: Vec<&str> = vals.iter().map(String::as_str).collect();
        let produced = batch(&refs, 1_000, codec);
        let base = if i % 2 == 0 {
            b.produce(&key, &produced, Acks::All)
                .await
                .unwrap()
                .base_offset
        } else {
            let pending = b
                .append_within(&key, produced.clone(), Acks::All, Duration::from_secs(5))
                .await
                .unwrap();
            pending.wait().await.unwrap().base_offset
        };
        assert_eq!(base, i as i64 * 4);
        expected.extend(
            vals.into_iter()
                .enumerate()
                .map(|(j, v)| (base + j as i64, v)),
        );
    }
    // An idempotent batch recompressed, then its retry: recognised as the same.
    let first = b
        .produce(&key, &idempotent(9, 0, 0, &["once"]), Acks::All)
        .await
        .unwrap();
    let again = b
        .produce(&key, &idempotent(9, 0, 0, &["once"]), Acks::All)
        .await
        .unwrap();
    assert_eq!((first.base_offset, again.base_offset), (20, 20));
    expected.push((20, "once".to_string()));
    assert_eq!(read_all(&b, &key, 0).await, expected);
    let d = b.fetch(&key, 0, 1 << 20).await.unwrap();
    let all = joined(&d);
    let mut n = 0;
    for item in BatchIter::new(&all, usize::MAX) {
        let (_, v) = item.unwrap();
        v.verify_crc().unwrap();
        assert_eq!(
            v.compression(),
            Compression::Zstd,
            "batch at {}",
            v.base_offset()
        );
        n += 1;
    }
    assert_eq!(n, 6);
    // A corrupt batch is refused, not given a fresh CRC.
    let mut bad = batch(&["x"], 1, Compression::Gzip).to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let e = b.produce(&key, &bad, Acks::All).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CorruptMessage);
    b.shutdown().await;
    if let Some(n) = env.meta_node {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_batches_are_stored_once_across_a_change_of_owner() {
    let env = Cluster::start().await;
    let t = env.create_topic("idem", 1, &[]).await;
    let key = PartitionKey::new(t, 0);
    let b = env.broker(|_| {}).await;
    wait_owned(&b, key).await;
    let first = b
        .produce(&key, &idempotent(7, 0, 0, &["a", "b"]), Acks::All)
        .await
        .unwrap();
    assert_eq!(first.base_offset, 0);
    // The same batch again (a client retry): acknowledged with the original offset.
    let again = b
        .produce(&key, &idempotent(7, 0, 0, &["a", "b"]), Acks::All)
        .await
        .unwrap();
    assert_eq!(again.base_offset, 0);
    assert_eq!(b.log(&key).unwrap().offsets().2, 2, "nothing appended");
    // A gap in the sequence, an old epoch.
    let e = b
        .produce(&key, &idempotent(7, 0, 5, &["x"]), Acks::All)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfOrderSequence);
    let next = b
        .produce(&key, &idempotent(7, 0, 2, &["c"]), Acks::All)
        .await
        .unwrap();
    assert_eq!(next.base_offset, 2);
    // Plain batches are not affected.
    b.produce(&key, &batch(&["plain"], 1, Compression::None), Acks::All)
        .await
        .unwrap();
    b.shutdown().await;
    drop(b);

    // A new owner knows the producer from the metadata.
    let b2 = env.broker(|_| {}).await;
    wait_owned(&b2, key).await;
    let dup = b2
        .produce(&key, &idempotent(7, 0, 2, &["c"]), Acks::All)
        .await
        .unwrap();
    assert_eq!(
        dup.base_offset, 2,
        "a retry after the change of owner is a duplicate"
    );
    assert_eq!(b2.log(&key).unwrap().offsets().2, 4);
    // A gap before the producer wrote to the new owner: its earlier batches
    // may still be on their way (retried after the old owner failed them),
    // so it is refused as not stored, not as out of order.
    let e = b2
        .produce(&key, &idempotent(7, 0, 9, &["d"]), Acks::All)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::SequenceGap);
    let next = b2
        .produce(&key, &idempotent(7, 0, 3, &["c2"]), Acks::All)
        .await
        .unwrap();
    assert_eq!(next.base_offset, 4);
    // Once it wrote here, a gap is out of order, as in Kafka.
    let e = b2
        .produce(&key, &idempotent(7, 0, 9, &["d"]), Acks::All)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfOrderSequence);
    b2.produce(&key, &idempotent(7, 1, 0, &["new epoch"]), Acks::All)
        .await
        .unwrap();
    let e = b2
        .produce(&key, &idempotent(7, 0, 3, &["fenced"]), Acks::All)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidProducerEpoch);
    b2.shutdown().await;
}

fn commit_params(group: &str, offsets: &[(&str, u32, i64, usize)]) -> CommitParams {
    CommitParams {
        group_id: group.to_string(),
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
        offsets: offsets
            .iter()
            .map(|(topic, partition, offset, metadata)| OffsetToCommit {
                topic: topic.to_string(),
                partition: *partition,
                offset: *offset,
                leader_epoch: -1,
                metadata: "m".repeat(*metadata),
            })
            .collect(),
    }
}

/// Waits (10 s at most) until `b`'s view shows broker `id` live: a drain
/// hands over only to brokers it sees.
async fn wait_seen_live(b: &Broker, id: u32) {
    let started = Instant::now();
    while !b
        .view()
        .current()
        .nodes
        .iter()
        .any(|n| n.id.0 == id && n.state == floe_metadata::model::NodeState::Live)
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "broker {id} not seen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Commits through `b` until it coordinates the group (bounded).
async fn commit_when_coordinator(b: &Broker, p: CommitParams) -> Vec<Result<(), GroupError>> {
    let started = Instant::now();
    loop {
        match Coordinator::commit_offsets(b, p.clone()).await {
            Ok(r) => return r,
            Err(GroupError::NotCoordinator) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "broker {} never became the coordinator",
            b.id()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn committed_offset(env: &Cluster, group: &str) -> i64 {
    let r = env
        .meta
        .call::<floe_metadata::api::routes::FetchOffsets>(
            floe_metadata::api::proto::FetchOffsetsRequest {
                group: group.into(),
            },
        )
        .await
        .unwrap();
    r.offsets
        .iter()
        .find(|o| o.topic == "offsets")
        .unwrap()
        .offset
}

/// Offset commits are checked and fenced on the coordinator: metadata above
/// offset.metadata.max.bytes and partitions that do not exist are refused
/// alone, and a coordinator paused past its lease (its loops stopped, its
/// view of the shards kept) cannot move a group's offsets back when it
/// wakes up after the shard moved: NOT_COORDINATOR, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_whose_shard_moved_cannot_move_offsets_back() {
    let env = Cluster::start().await;
    env.create_topic("offsets", 1, &[]).await;
    let group = "fenced-group";
    let b1 = env.broker(|c| c.lease = Duration::from_millis(1000)).await;
    let r = commit_when_coordinator(
        &b1,
        commit_params(
            group,
            &[
                ("offsets", 0, 100, 4096),
                ("offsets", 1, 5, 0),
                ("nope", 0, 5, 0),
            ],
        ),
    )
    .await;
    assert_eq!(
        r,
        vec![
            Ok(()),
            Err(GroupError::UnknownTopicOrPartition),
            Err(GroupError::UnknownTopicOrPartition)
        ]
    );
    let r = Coordinator::commit_offsets(&b1, commit_params(group, &[("offsets", 0, 7, 4097)]))
        .await
        .unwrap();
    assert_eq!(r, vec![Err(GroupError::OffsetMetadataTooLarge)]);
    assert_eq!(committed_offset(&env, group).await, 100);

    // Broker 1 stops answering (paused); its shards go to broker 2.
    b1.shutdown().await;
    let b2 = env.broker(|c| c.id = 2).await;
    let r = commit_when_coordinator(&b2, commit_params(group, &[("offsets", 0, 200, 0)])).await;
    assert_eq!(r, vec![Ok(())]);

    // Broker 1 wakes up with its old shard epoch and an older offset: it
    // still believes it coordinates the group, the metadata says no.
    let shard = floe_broker::group::shard_of(group, floe_metadata::state::DEFAULT_SHARDS);
    assert!(
        b1.owned_shards().contains(&shard),
        "{:?}",
        b1.owned_shards()
    );
    let stale =
        Coordinator::commit_offsets(&b1, commit_params(group, &[("offsets", 0, 50, 0)])).await;
    assert_eq!(stale, Err(GroupError::NotCoordinator));
    assert_eq!(committed_offset(&env, group).await, 200);
    b2.shutdown().await;
}

/// A classic group formed on one broker carries on at the broker its shard
/// is handed to (a drain, as in a rolling restart): the member's heartbeat,
/// commit and SyncGroup at the new coordinator answer the same generation
/// and assignment, with no rebalance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_carries_on_at_the_broker_its_shard_is_handed_to() {
    use floe_broker::group::{GroupState, JoinParams, SyncParams};
    let env = Cluster::start().await;
    env.create_topic("offsets", 1, &[]).await;
    let group = "resumed-group";
    let quick = |c: &mut floe_broker::BrokerConfig| {
        c.group.initial_rebalance_delay = Duration::ZERO;
    };
    let one = env
        .broker(|c| {
            c.id = 1;
            quick(c);
        })
        .await;
    let join = JoinParams {
        group_id: group.into(),
        member_id: String::new(),
        group_instance_id: None,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 30_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"sub"))],
        require_known_member_id: false,
    };
    let started = Instant::now();
    let joined = loop {
        let j = Coordinator::join_group(&one, join.clone()).await;
        match j.error {
            None => break j,
            Some(GroupError::NotCoordinator) => {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "no coordinator"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Some(e) => panic!("{e}"),
        }
    };
    let sync = SyncParams {
        group_id: group.into(),
        generation_id: joined.generation_id,
        member_id: joined.member_id.clone(),
        group_instance_id: None,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments: vec![(joined.member_id.clone(), Bytes::from_static(b"mine"))],
    };
    let synced = Coordinator::sync_group(&one, sync.clone()).await;
    assert_eq!(synced.error, None);
    assert_eq!(synced.assignment, Bytes::from_static(b"mine"));

    let two = env
        .broker(|c| {
            c.id = 2;
            quick(c);
        })
        .await;
    wait_seen_live(&one, 2).await;
    assert!(one.drain(Duration::from_secs(15)).await, "handed over");
    // The member finds the new coordinator and carries on.
    let (generation, member) = (joined.generation_id, joined.member_id.as_str());
    let started = Instant::now();
    loop {
        match Coordinator::heartbeat(&two, group, generation, member, None).await {
            Ok(()) => break,
            Err(GroupError::NotCoordinator) => {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "no coordinator"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the member was not resumed: {e}"),
        }
    }
    let described = Coordinator::describe_group(&two, group).await;
    assert_eq!(described.state, GroupState::Stable);
    assert_eq!(described.members.len(), 1);
    assert_eq!(described.members[0].assignment, Bytes::from_static(b"mine"));
    let mut commit = commit_params(group, &[("offsets", 0, 42, 0)]);
    commit.generation_id = generation;
    commit.member_id = member.to_string();
    assert_eq!(
        Coordinator::commit_offsets(&two, commit).await,
        Ok(vec![Ok(())])
    );
    let again = Coordinator::sync_group(&two, sync).await;
    assert_eq!(again.error, None);
    assert_eq!(again.assignment, Bytes::from_static(b"mine"));
    two.shutdown().await;
}

/// A zstd batch whose one record inflates past the decoding bound (64 MiB
/// of zeros: a few KiB on the wire), followed by ordinary batches: a
/// lookup by time passes over the bomb and still finds the record after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_by_time_passes_over_a_decompression_bomb() {
    let env = Cluster::start().await;
    let t = env.create_topic("bombs", 1, &[]).await;
    let key = PartitionKey::new(t, 0);
    let b = env.broker(|_| {}).await;
    wait_owned(&b, key).await;
    let zeros = vec![0u8; floe_storage::records::DEFAULT_MAX_DECOMPRESSED + 1];
    let mut bomb = BatchBuilder::new(0, 100);
    bomb.push(RecordSpec::new(None, Some(zeros), 0));
    let bomb = bomb.build(Compression::Zstd).unwrap();
    assert!(bomb.len() < 64 * 1024, "{} bytes", bomb.len());
    b.produce(&key, &bomb, Acks::All).await.unwrap();
    b.produce(&key, &batch(&["a", "b"], 200, Compression::Zstd), Acks::All)
        .await
        .unwrap();
    let at = |t| b.list_offset(&key, OffsetSpec::Timestamp(t));
    let found = at(150).await.unwrap();
    assert_eq!((found.offset, found.timestamp), (1, 200));
    assert_eq!(at(201).await.unwrap().offset, 2);
    assert_eq!(at(202).await.unwrap().offset, -1);
    // The bomb itself is served as stored: fetch copies bytes, decodes nothing.
    let d = b.fetch(&key, 0, 1024).await.unwrap();
    // (base offset and leader epoch are the broker's, the rest as produced)
    assert!(
        joined(&d)[16..bomb.len()] == bomb[16..],
        "the bomb as produced"
    );
    b.shutdown().await;
    if let Some(n) = env.meta_node {
        n.shutdown().await;
    }
}

/// A graceful stop: a draining broker hands every partition and coordinator
/// shard over (flushed first), owns nothing when `drain` returns, and
/// everything it acknowledged is served by the broker that took over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_broker_hands_everything_over_before_it_stops() {
    let env = Cluster::start().await;
    let t = env.create_topic("drain", 4, &[]).await;
    let keys: Vec<PartitionKey> = (0..4).map(|p| PartitionKey::new(t, p)).collect();
    let one = env.broker(|c| c.id = 1).await;
    for k in &keys {
        wait_owned(&one, *k).await;
    }
    let two = env.broker(|c| c.id = 2).await;
    // Alone, a broker has nowhere to hand over to: until it sees broker 2.
    wait_seen_live(&one, 2).await;
    // Writes acknowledged by whichever broker owns each partition now.
    let mut written = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let value = format!("before-{i}");
        let started = Instant::now();
        let ok = loop {
            let owner = if one.owned().contains(k) { &one } else { &two };
            match owner
                .produce(k, &batch(&[&value], 1, Compression::None), Acks::All)
                .await
            {
                Ok(ok) => break ok,
                Err(e) => {
                    assert!(started.elapsed() < Duration::from_secs(10), "{e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        written.push((*k, ok.base_offset, value));
    }
    let started = Instant::now();
    assert!(
        one.drain(Duration::from_secs(15)).await,
        "everything handed over"
    );
    println!("drained in {} ms", started.elapsed().as_millis());
    assert!(one.owned().is_empty());
    assert!(one.owned_shards().is_empty());
    for k in &keys {
        wait_owned(&two, *k).await;
    }
    let started = Instant::now();
    while two.owned_shards().len() < 16 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "shards not taken over"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (k, offset, value) in &written {
        let got = read_all(&two, k, *offset).await;
        assert_eq!(got.first(), Some(&(*offset, value.clone())), "{k}");
    }
    one.shutdown().await;
    two.shutdown().await;
}

/// On a store that charges per request the flush policy is paced: flushes
/// start at least one interval apart however many produces wait, and a
/// backlog of `bytes` still goes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_flush_policy_bounds_the_writes_per_interval() {
    let env = Cluster::start().await;
    let t = env.create_topic("paced", 4, &[]).await;
    let keys: Vec<PartitionKey> = (0..4).map(|p| PartitionKey::new(t, p)).collect();
    let interval = Duration::from_millis(200);
    let pool = env.pool().await;
    let b = env
        .broker_on(pool.clone(), |c| {
            c.flush = floe_broker::config::FlushPolicy {
                interval,
                bytes: 256 * 1024,
                paced: true,
                max_in_flight: 1,
                after_take_over: Duration::ZERO,
            };
        })
        .await;
    for k in &keys {
        wait_owned(&b, *k).await;
    }
    let written =
        |pool: &floe_storage::StorePool| -> u64 { pool.stats().iter().map(|s| s.written).sum() };
    // Eight producers, each with one small acks=all batch in flight at a
    // time, for about 1.5 s.
    let before = written(&pool);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let b = b.clone();
        let key = keys[i % keys.len()];
        tasks.push(tokio::spawn(async move {
            let mut acked = 0;
            while started.elapsed() < Duration::from_millis(1500) {
                b.produce(&key, &batch(&["v"], 1, Compression::None), Acks::All)
                    .await
                    .unwrap();
                acked += 1;
            }
            acked
        }));
    }
    let mut acked = 0;
    for t in tasks {
        acked += t.await.unwrap();
    }
    let elapsed = started.elapsed();
    let puts = written(&pool) - before;
    // Each flush starts an interval after the one before: a slow machine
    // only makes fewer.
    let most = elapsed.as_millis() / interval.as_millis() + 2;
    println!("{acked} produces in {elapsed:?}: {puts} WAL writes (at most {most})");
    assert!(puts as u128 <= most, "{puts} writes in {elapsed:?}");
    assert!(acked >= puts, "several produces per write");
    // A backlog of `bytes` does not wait for the interval.
    let pool2 = env.pool().await;
    b.shutdown().await;
    let b = env
        .broker_on(pool2, |c| {
            c.flush = floe_broker::config::FlushPolicy {
                interval: Duration::from_secs(600),
                bytes: 64 * 1024,
                paced: true,
                max_in_flight: 1,
                after_take_over: Duration::ZERO,
            };
        })
        .await;
    wait_owned(&b, keys[0]).await;
    let big = "x".repeat(100 * 1024);
    let produced = tokio::time::timeout(
        Duration::from_secs(60),
        b.produce(&keys[0], &batch(&[&big], 1, Compression::None), Acks::All),
    )
    .await;
    assert!(
        produced.is_ok(),
        "the backlog went before the 10-minute interval"
    );
    produced.unwrap().unwrap();
    b.shutdown().await;
}

/// Writes to a partition the broker has just taken over are flushed at
/// once, paced or not (their producers already waited for the take-over);
/// past `after_take_over`, and with it at 0, they wait for the pace again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_just_after_a_take_over_are_flushed_without_waiting_for_the_pace() {
    let env = Cluster::start().await;
    let t = env.create_topic("moved", 1, &[]).await;
    let key = PartitionKey::new(t, 0);
    let policy = |after_take_over| floe_broker::config::FlushPolicy {
        // No paced flush comes by the clock during the test.
        interval: Duration::from_secs(3_600),
        bytes: 8 * 1024 * 1024,
        paced: true,
        max_in_flight: 4,
        after_take_over,
    };
    let write = |b: floe_broker::Broker| async move {
        let records = batch(&["v"], 1, Compression::None);
        let w = b.produce(&key, &records, Acks::All);
        tokio::time::timeout(Duration::from_millis(700), w).await
    };
    // Within the window: acknowledged at once, twice.
    let b = env
        .broker(|c| c.flush = policy(Duration::from_secs(600)))
        .await;
    wait_owned(&b, key).await;
    for _ in 0..2 {
        let acked = write(b.clone()).await;
        assert!(
            acked.is_ok(),
            "a write just after the take-over waited for the pace"
        );
        acked.unwrap().unwrap();
    }
    b.shutdown().await;
    // Without the exception, and after the window: the pace holds.
    for window in [Duration::ZERO, Duration::from_millis(200)] {
        let b = env.broker(|c| c.flush = policy(window)).await;
        wait_owned(&b, key).await;
        tokio::time::sleep(window).await;
        assert!(
            write(b.clone()).await.is_err(),
            "a write {window:?} after the take-over went before the paced flush"
        );
        b.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_groups_are_forgotten_by_the_maintenance_task() {
    let env = Cluster::start().await;
    let b = env
        .broker(|c| c.retention_check_interval = Duration::from_millis(200))
        .await;
    // A member of a previous coordinator's generation commits: the group is
    // adopted here, Empty and without offsets, so nothing keeps it.
    b.groups().validate_commit("idle", 3, "m", None).unwrap();
    assert_eq!(b.groups().list_groups(&[]).len(), 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !b.groups().list_groups(&[]).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the idle group was never forgotten"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.shutdown().await;
}
