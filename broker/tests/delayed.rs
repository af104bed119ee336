//! Delayed topics (`floe.delayed.delivery`) on a broker against a real
//! metadata node and a local store: held records are appended once due,
//! each once, with their key, value and headers, also when the partition
//! changes owner while some are pending and when fewer entries than are
//! pending fit the scheduler's memory bound.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use floe_broker::{Acks, Broker};
use floe_storage::PartitionKey;
use floe_storage::batch::{BatchIter, Compression};
use floe_storage::records::{BatchBuilder, RecordSpec, decode_records};
use floe_testkit::{Cluster, wait_owned};

fn now_ms() -> u64 {
    floe_metadata::clock::now_ms()
}

/// An idempotent batch of (value, due time) records (`None`: not delayed).
fn batch(pid: i64, seq: i32, records: &[(&str, Option<u64>)]) -> Bytes {
    let mut b = BatchBuilder::new(0, now_ms() as i64).producer(pid, 0, seq, false);
    for (value, due) in records {
        let mut r = RecordSpec::new(
            Some(format!("key-{value}").into_bytes()),
            Some(value.as_bytes().to_vec()),
            0,
        );
        r.headers
            .push((b"app".to_vec(), Some(value.as_bytes().to_vec())));
        if let Some(due) = due {
            r.headers.push((
                b"floe-deliver-at".to_vec(),
                Some(due.to_string().into_bytes()),
            ));
        }
        b.push(r);
    }
    b.build(Compression::None).unwrap()
}

/// What a classic consumer sees: the records of the data batches, as
/// (value, key, headers), in offset order.
type Seen = (String, Option<Bytes>, Vec<(Bytes, Option<Bytes>)>);

async fn visible(b: &Broker, key: &PartitionKey) -> Vec<Seen> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let d = b.fetch(key, offset, 64 * 1024).await.unwrap();
        if d.records.is_empty() {
            return out;
        }
        let all = Bytes::from(d.records.concat());
        for item in BatchIter::new(&all, usize::MAX) {
            let (at, view) = item.unwrap();
            offset = view.next_offset();
            if view.is_control() {
                continue;
            }
            let raw = all.slice(at..at + view.size());
            for r in decode_records(&raw, 1 << 20).unwrap() {
                let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
                let headers = r.headers.into_iter().map(|h| (h.key, h.value)).collect();
                out.push((value, r.key, headers));
            }
        }
    }
}

/// Polls until every value of `due` was seen, noting when each first was;
/// panics after 30 s or if one is seen before its due time.
async fn wait_seen(b: &Broker, key: &PartitionKey, due: &HashMap<&str, u64>) -> Vec<Seen> {
    let started = Instant::now();
    loop {
        let seen = visible(b, key).await;
        let now = now_ms();
        for (value, ..) in &seen {
            if let Some(at) = due.get(value.as_str()) {
                assert!(now + 5 >= *at, "{value} seen {} ms early", at - now);
            }
        }
        if due.keys().all(|v| seen.iter().any(|s| s.0 == *v)) {
            return seen;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let values: Vec<&str> = seen.iter().take(20).map(|s| s.0.as_str()).collect();
            panic!("not all seen after 30 s; the first values: {values:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_records_are_appended_once_due_and_once_across_a_change_of_owner() {
    let env = Cluster::start().await;
    let t = env
        .create_topic("dl", 1, &[("floe.delayed.delivery", "true")])
        .await;
    let key = PartitionKey::new(t, 0);
    // Two entries in memory at most: the others are found again by reading
    // the log from the cursor.
    let b = env.broker(|c| c.delayed_max_pending = 2).await;
    wait_owned(&b, key).await;
    let start = now_ms();
    let soon = [
        ("s1", start + 300),
        ("s2", start + 400),
        ("s3", start + 500),
    ];
    let later = [("l1", start + 2_500), ("l2", start + 2_600)];
    let first = batch(
        7,
        0,
        &[
            ("now", None),
            ("s1", Some(soon[0].1)),
            ("l1", Some(later[0].1)),
            ("s2", Some(soon[1].1)),
        ],
    );
    let stored = b.produce(&key, &first, Acks::All).await.unwrap();
    // A retry of the same batch is a duplicate: nothing is held twice.
    let again = b.produce(&key, &first, Acks::All).await.unwrap();
    assert_eq!(again.base_offset, stored.base_offset);
    b.produce(
        &key,
        &batch(7, 4, &[("s3", Some(soon[2].1)), ("l2", Some(later[1].1))]),
        Acks::All,
    )
    .await
    .unwrap();
    b.produce(&key, &batch(8, 0, &[("plain", None)]), Acks::All)
        .await
        .unwrap();

    let due: HashMap<&str, u64> = soon.into_iter().collect();
    let seen = wait_seen(&b, &key, &due).await;
    let s1 = seen.iter().find(|s| s.0 == "s1").unwrap();
    assert_eq!(s1.1.as_deref(), Some(&b"key-s1"[..]));
    assert_eq!(s1.2[0], (Bytes::from("app"), Some(Bytes::from("s1"))));
    assert!(
        s1.2.iter()
            .any(|(k, v)| k.as_ref() == b"floe-delayed-from" && v.is_some()),
        "{:?}",
        s1.2
    );
    // The held batch's record due at once ("now") came with it.
    assert!(seen.iter().any(|s| s.0 == "now"));
    b.shutdown().await;
    drop(b);

    // A new owner appends the rest, and none of the first ones again.
    let b2 = env.broker(|c| c.delayed_max_pending = 2).await;
    wait_owned(&b2, key).await;
    // The producer state came with the partition: a retry of the held
    // batch is still a duplicate.
    let retry = b2.produce(&key, &first, Acks::All).await.unwrap();
    assert_eq!(retry.base_offset, stored.base_offset);
    let due: HashMap<&str, u64> = later.into_iter().collect();
    wait_seen(&b2, &key, &due).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut values: Vec<String> = visible(&b2, &key).await.into_iter().map(|s| s.0).collect();
    values.sort();
    assert_eq!(values, ["l1", "l2", "now", "plain", "s1", "s2", "s3"]);
    b2.shutdown().await;
}
