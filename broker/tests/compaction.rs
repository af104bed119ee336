//! Compaction against a real metadata node and a local store: WAL ranges
//! become a segment after `--wal-compaction-entries` entries (taken from
//! the partition's in-memory tail, no store read), small segments merge
//! in tiers, and a partition written for a long time keeps a bounded
//! index, in the broker and in the metadata.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use floe_broker::{Acks, Broker};
use floe_storage::PartitionKey;
use floe_storage::batch::{BatchIter, Compression};
use floe_storage::records::{BatchBuilder, RecordSpec, decode_records};
use floe_testkit::{Cluster, wait_owned};

fn record(v: &str, ts: i64) -> Bytes {
    let mut b = BatchBuilder::new(0, ts);
    b.push(RecordSpec::new(
        Some(b"k".to_vec()),
        Some(v.as_bytes().to_vec()),
        0,
    ));
    b.build(Compression::None).unwrap()
}

/// Every record's (offset, value) from the log start to the high watermark.
async fn read_all(b: &Broker, key: &PartitionKey) -> Vec<(i64, String)> {
    let (mut offset, hw, _) = b.log(key).unwrap().offsets();
    let mut out = Vec::new();
    while offset < hw {
        let d = b.fetch(key, offset, 64 * 1024).await.unwrap();
        assert!(!d.records.is_empty(), "nothing at {offset} below {hw}");
        let all = Bytes::from(d.records.concat());
        for item in BatchIter::new(&all, usize::MAX) {
            let (at, view) = item.unwrap();
            for r in decode_records(&all.slice(at..at + view.size()), 1 << 20).unwrap() {
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
    out
}

fn files(dir: &std::path::Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files(&p, suffix));
            } else if p.to_string_lossy().ends_with(suffix) {
                out.push(p);
            }
        }
    }
    out
}

async fn produce(b: &Broker, key: &PartitionKey, v: &str, ts: i64) -> i64 {
    b.produce(key, &record(v, ts), Acks::All)
        .await
        .unwrap()
        .base_offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_ranges_become_a_segment_at_the_entry_count_read_from_the_tail() {
    let env = Cluster::start().await;
    let t = env.create_topic("trickle", 1, &[]).await;
    let key = PartitionKey::new(t, 0);
    let b = env.broker(|c| c.wal_compaction_entries = 8).await;
    wait_owned(&b, key).await;
    let mut expected = Vec::new();
    for i in 0..7 {
        let v = format!("v{i}");
        expected.push((produce(&b, &key, &v, 1_000 + i).await, v));
    }
    let log = b.log(&key).unwrap();
    assert_eq!(
        log.index_counts(),
        (7, 0),
        "one entry per acknowledged produce"
    );
    assert_eq!(b.compact_now().await.unwrap(), 0, "7 entries: not due");
    let v = "v7".to_string();
    expected.push((produce(&b, &key, &v, 1_007).await, v));
    // The WAL objects are gone from the store: compaction reads the
    // ranges from the partition's tail.
    let wal = files(&env.store, ".wal");
    assert!(!wal.is_empty());
    for f in &wal {
        std::fs::remove_file(f).unwrap();
    }
    assert_eq!(b.compact_now().await.unwrap(), 1, "8 entries: one segment");
    assert_eq!(log.index_counts(), (0, 1));
    let meta = env.meta.partition_index(key, 0).await.unwrap();
    assert_eq!(meta.entries.len(), 1, "the metadata holds one entry");
    assert_eq!(read_all(&b, &key).await, expected);
    b.shutdown().await;

    // A new process reads the segment from the store.
    let b = env.broker(|_| {}).await;
    wait_owned(&b, key).await;
    assert_eq!(read_all(&b, &key).await, expected);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_segments_merge_and_a_long_trickle_keeps_a_bounded_index() {
    let env = Cluster::start().await;
    let t = env.create_topic("steady", 1, &[]).await;
    let key = PartitionKey::new(t, 0);
    let (entries, fanout) = (4, 3);
    let b = env
        .broker(|c| {
            c.wal_compaction_entries = entries;
            c.segment_merge_fanout = fanout;
            c.orphan_grace = Duration::ZERO;
        })
        .await;
    wait_owned(&b, key).await;
    let log = b.log(&key).unwrap();
    let mut expected = Vec::new();
    let mut most = 0;
    for i in 0..120 {
        let v = format!("value-{i}");
        expected.push((produce(&b, &key, &v, 1_000 + i).await, v));
        // The maintenance loop's pass, by hand.
        b.compact_now().await.unwrap();
        b.merge_now().await.unwrap();
        let (wal, segs) = log.index_counts();
        assert!(wal < entries, "{wal} WAL entries after a pass");
        most = most.max(wal + segs);
    }
    // 120 flushes: without compaction, 120 entries; with it, under
    // `entries` WAL ranges, the log's first segment (never merged) and
    // fewer than `fanout` segments of tier 0 after it.
    assert!(most <= entries + fanout, "{most} entries at most");
    let (wal, segs) = log.index_counts();
    let meta = env.meta.partition_index(key, 0).await.unwrap();
    assert_eq!(meta.entries.len(), wal + segs, "the metadata agrees");
    assert_eq!(read_all(&b, &key).await, expected);
    // The replaced objects leave the store once the sweeper runs.
    b.sweep_now().await.unwrap();
    let logs = files(&env.store, ".log").len();
    assert_eq!(logs, segs, "one .log object per segment left");
    assert!(files(&env.store, ".wal").len() <= wal + 1);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_never_spans_more_than_segment_ms_of_record_time() {
    let env = Cluster::start().await;
    let t = env.create_topic("timed", 1, &[("segment.ms", "250")]).await;
    let key = PartitionKey::new(t, 0);
    let b = env
        .broker(|c| {
            c.wal_compaction_entries = 1;
            c.segment_merge_fanout = 2;
        })
        .await;
    wait_owned(&b, key).await;
    let mut expected = Vec::new();
    // Records 100 ms apart in record time, one segment each.
    for i in 0..10 {
        let v = format!("t{i}");
        expected.push((produce(&b, &key, &v, 10_000 + i * 100).await, v));
        b.compact_now().await.unwrap();
    }
    assert_eq!(b.log(&key).unwrap().index_counts(), (0, 10));
    b.merge_now().await.unwrap();
    let meta = env.meta.partition_index(key, 0).await.unwrap();
    let mut since = None;
    for e in &meta.entries {
        if let Some(s) = since {
            assert!(e.max_timestamp - s <= 250, "{:?}", meta.entries);
        }
        since = Some(e.max_timestamp);
    }
    // The first segment stays; the nine after it pair up at most.
    assert!((5..10).contains(&meta.entries.len()), "{:?}", meta.entries);
    assert_eq!(read_all(&b, &key).await, expected);
    b.shutdown().await;
}
