//! Store pool failover against in-process stores with injected faults.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use floe_storage::fault::{Fault, FaultOps};
use floe_storage::{EndpointId, ErrorKind, ObjectKey, PoolOptions, StorePool};
use object_store::ObjectStore;
use object_store::memory::InMemory;

mod common;
use common::pool::{fixture, keys_in};

fn opts() -> PoolOptions {
    PoolOptions {
        write_timeout: Duration::from_millis(300),
        read_timeout: Duration::from_millis(300),
        bench_cooldown: Duration::from_millis(400),
        max_write_attempts: 4,
        read_attempts: 3,
        retry_backoff: Duration::from_millis(5),
        ..PoolOptions::default()
    }
}

fn payload(i: u32) -> Bytes {
    Bytes::from(format!("payload-{i}-").repeat(100))
}

#[tokio::test]
async fn failed_write_lands_on_the_other_endpoint_and_benches_the_first() {
    let f = fixture(2, opts());
    f.faults[0].set(Fault::Error, FaultOps::Writes);
    for i in 0..6 {
        let obj = f
            .pool
            .put_new(
                |t| ObjectKey::new(format!("wal/{t}.wal")),
                payload(i).into(),
            )
            .await
            .unwrap();
        assert_eq!(obj.endpoint.as_str(), "e1");
        assert_eq!(f.pool.get(&obj).await.unwrap(), payload(i));
    }
    assert!(f.pool.is_benched(&EndpointId::new("e0")));
    // While benched, e0 is not even tried: one failed attempt, then none.
    assert_eq!(f.faults[0].puts(), 1);
    f.faults[0].clear();
    tokio::time::sleep(Duration::from_millis(450)).await;
    // After its cooldown a write finds e0 benched and starts its probe; once
    // the probe has passed, e0 takes writes again.
    let mut on_e0 = 0;
    let until = Instant::now() + Duration::from_secs(10);
    for i in 0.. {
        let obj = f
            .pool
            .put_new(
                |t| ObjectKey::new(format!("wal/{t}.wal")),
                payload(i).into(),
            )
            .await
            .unwrap();
        on_e0 += (obj.endpoint.as_str() == "e0") as usize;
        if on_e0 > 0 || Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        on_e0 > 0,
        "e0 takes writes again after its cooldown and probe"
    );
    assert!(!f.pool.is_benched(&EndpointId::new("e0")));
}

#[tokio::test]
async fn hung_endpoint_costs_at_most_the_write_deadline() {
    let f = fixture(2, opts());
    f.faults[0].set(Fault::Hang, FaultOps::Writes);
    let started = Instant::now();
    // Round-robin starts at e0 for the first write.
    let obj = f
        .pool
        .put_new(|t| ObjectKey::new(format!("x/{t}")), payload(1).into())
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(obj.endpoint.as_str(), "e1");
    assert_eq!(f.faults[0].puts(), 1, "the hung endpoint was tried once");
    // One abandoned attempt (300 ms deadline) plus the good write; the bound
    // is loose because CI machines are noisy, but far below a hang.
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[tokio::test]
async fn torn_write_is_abandoned_and_its_key_never_reused() {
    let f = fixture(2, opts());
    f.faults[0].set_times(Fault::FailAfterBytes(10), FaultOps::Writes, 1);
    let obj = f
        .pool
        .put_new(
            |t| ObjectKey::new(format!("seg/{t}.log")),
            payload(7).into(),
        )
        .await
        .unwrap();
    assert_eq!(obj.endpoint.as_str(), "e1");
    assert_eq!(f.pool.get(&obj).await.unwrap(), payload(7));
    // The torn attempt left a partial object under its own key, which the
    // pool deletes in the background: it is never referenced.
    let until = Instant::now() + Duration::from_secs(10);
    while !keys_in(&f.raw[0]).await.is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        keys_in(&f.raw[0]).await.is_empty(),
        "the torn object is deleted"
    );
    assert_eq!(keys_in(&f.raw[1]).await, vec![obj.key.to_string()]);
}

#[tokio::test]
async fn single_endpoint_retries_as_new_objects() {
    let f = fixture(1, opts());
    f.faults[0].set_times(Fault::Error, FaultOps::Writes, 2);
    let mut tokens = std::sync::Mutex::new(Vec::new());
    let obj = f
        .pool
        .put_new(
            |t| {
                tokens.lock().unwrap().push(t.to_string());
                ObjectKey::new(format!("wal/{t}.wal"))
            },
            payload(3).into(),
        )
        .await
        .unwrap();
    let tokens = tokens.get_mut().unwrap();
    assert_eq!(tokens.len(), 3);
    let distinct: std::collections::HashSet<_> = tokens.iter().collect();
    assert_eq!(distinct.len(), 3, "every attempt has its own key");
    assert!(obj.key.as_str().contains(&tokens[2]));
    assert_eq!(f.faults[0].puts(), 3);
    assert_eq!(keys_in(&f.raw[0]).await, vec![obj.key.to_string()]);
}

#[tokio::test]
async fn write_fails_cleanly_when_every_attempt_fails() {
    let f = fixture(2, opts());
    f.faults[0].set(Fault::Error, FaultOps::Writes);
    f.faults[1].set(Fault::Error, FaultOps::Writes);
    let err = f
        .pool
        .put_new(|t| ObjectKey::new(format!("x/{t}")), payload(0).into())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert_eq!(f.faults[0].puts() + f.faults[1].puts(), 4);
}

#[tokio::test]
async fn reads_go_to_the_endpoint_that_holds_the_object() {
    let f = fixture(2, opts());
    f.faults[0].set(Fault::Error, FaultOps::Writes);
    let obj = f
        .pool
        .put_new(|t| ObjectKey::new(format!("x/{t}")), payload(9).into())
        .await
        .unwrap();
    assert_eq!(obj.endpoint.as_str(), "e1");
    f.faults[0].set(Fault::Error, FaultOps::All);
    assert_eq!(f.pool.get(&obj).await.unwrap(), payload(9));
    assert_eq!(f.faults[0].gets(), 0);
    // A read that breaks mid-transfer is retried on the same endpoint.
    f.faults[1].set_times(Fault::FailAfterBytes(5), FaultOps::Reads, 1);
    assert_eq!(
        f.pool.get_range(&obj, 10..500).await.unwrap(),
        payload(9).slice(10..500)
    );
    assert_eq!(
        f.faults[1].gets(),
        3,
        "one earlier read, the broken one, its retry"
    );
    // A missing object is NotFound, not retried.
    let missing = floe_storage::ObjectRef {
        key: ObjectKey::new("nope"),
        ..obj.clone()
    };
    assert_eq!(
        f.pool.get(&missing).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // Out-of-range reads are refused before any request.
    assert_eq!(
        f.pool
            .get_range(&obj, 0..obj.size + 1)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput
    );
}

#[tokio::test]
async fn a_write_group_lands_whole_on_one_endpoint() {
    let f = fixture(2, opts());
    // The second part of the first attempt fails: the whole group moves.
    f.faults[0].set(Fault::Error, FaultOps::Writes);
    let refs = f
        .pool
        .put_group_new(|t| {
            vec![
                (ObjectKey::new(format!("s/0.{t}.log")), payload(1).into()),
                (ObjectKey::new(format!("s/0.{t}.index")), payload(2).into()),
                (
                    ObjectKey::new(format!("s/0.{t}.timeindex")),
                    payload(3).into(),
                ),
            ]
        })
        .await
        .unwrap();
    assert_eq!(refs.len(), 3);
    assert!(refs.iter().all(|r| r.endpoint.as_str() == "e1"));
    for (r, i) in refs.iter().zip(1..) {
        assert_eq!(f.pool.get(r).await.unwrap(), payload(i));
    }
}

#[tokio::test]
async fn bad_pool_configs_are_refused() {
    let err = StorePool::new(vec![], opts()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    let m: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let err = StorePool::new(
        vec![
            (EndpointId::new("a"), m.clone()),
            (EndpointId::new("a"), m.clone()),
        ],
        opts(),
    )
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    let zero = PoolOptions {
        write_timeout: Duration::ZERO,
        ..opts()
    };
    assert_eq!(
        StorePool::new(vec![(EndpointId::new("a"), m)], zero)
            .unwrap_err()
            .kind(),
        ErrorKind::Config
    );
}

#[tokio::test]
async fn slow_write_within_the_deadline_stays_put_and_one_past_it_moves() {
    let f = fixture(2, opts());
    // 100 ms is inside the 300 ms deadline: the write succeeds where it started.
    f.faults[0].set(Fault::Delay(Duration::from_millis(100)), FaultOps::Writes);
    f.faults[1].set(Fault::Delay(Duration::from_millis(100)), FaultOps::Writes);
    for i in 0..4 {
        f.pool
            .put_new(|t| ObjectKey::new(format!("slow/{t}")), payload(i).into())
            .await
            .unwrap();
    }
    let stats = f.pool.stats();
    assert_eq!(
        stats.iter().map(|s| s.abandoned).sum::<u64>(),
        0,
        "{stats:?}"
    );
    assert_eq!(stats.iter().map(|s| s.written).sum::<u64>(), 4);
    // 2 s is past it: the attempt is abandoned and the bytes land on e1.
    f.faults[0].set(Fault::Delay(Duration::from_secs(2)), FaultOps::Writes);
    f.faults[1].clear();
    let mut moved = 0;
    for i in 0..2 {
        let obj = f
            .pool
            .put_new(|t| ObjectKey::new(format!("slow/{t}")), payload(i).into())
            .await
            .unwrap();
        assert_eq!(obj.endpoint.as_str(), "e1");
        moved += 1;
    }
    assert_eq!(moved, 2);
    assert!(f.pool.stats()[0].abandoned >= 1);
}

#[tokio::test]
async fn put_at_retries_the_same_key_on_the_same_endpoint() {
    let f = fixture(2, opts());
    // Two failed writes first: the third lands under the same key.
    f.faults[1].set_times(Fault::Error, FaultOps::Writes, 2);
    let key = ObjectKey::new("exports/t/dt=2026-11-29/hr=14/0-1-2.parquet");
    let obj = f
        .pool
        .put_at(&EndpointId::new("e1"), key.clone(), payload(7).into())
        .await
        .unwrap();
    assert_eq!(obj.key, key);
    assert_eq!(obj.endpoint, EndpointId::new("e1"));
    assert_eq!(keys_in(&f.raw[1]).await, vec![key.to_string()]);
    assert!(
        keys_in(&f.raw[0]).await.is_empty(),
        "never another endpoint"
    );
    assert_eq!(f.pool.get(&obj).await.unwrap(), payload(7));
    assert_eq!(f.faults[1].puts(), 3);
    // Every attempt failing is an error; an unknown endpoint is refused.
    f.faults[1].set(Fault::Error, FaultOps::Writes);
    let err = f
        .pool
        .put_at(&EndpointId::new("e1"), key.clone(), payload(8).into())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(
        f.pool
            .put_at(&EndpointId::new("nope"), key, payload(8).into())
            .await
            .is_err()
    );
    assert!(f.pool.store(&EndpointId::new("e0")).is_ok());
}

/// Every series of a debugging recorder as (name, endpoint label, value);
/// taking it resets the recorder's values.
fn series_now(snap: &metrics_util::debugging::Snapshotter) -> Vec<(String, String, String)> {
    snap.snapshot()
        .into_vec()
        .into_iter()
        .map(|(k, .., v)| {
            let endpoint = k
                .key()
                .labels()
                .find(|l| l.key() == "endpoint")
                .map(|l| l.value().to_string())
                .unwrap_or_default();
            (k.key().name().to_string(), endpoint, format!("{v:?}"))
        })
        .collect()
}

#[tokio::test]
async fn a_failover_is_counted_on_both_endpoints_and_the_bench_is_a_gauge() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    // The test runs on one thread: the local recorder sees every call.
    let _guard = metrics::set_default_local_recorder(&recorder);
    let f = fixture(2, opts());
    let registered = series_now(&snap);
    let has = |all: &[(String, String, String)], name: &str, endpoint: &str, value: &str| {
        assert!(
            all.iter()
                .any(|(n, e, v)| n == name && e == endpoint && v == value),
            "{name}{{endpoint={endpoint}}} is not {value}: {all:?}"
        );
    };
    has(&registered, "floe_store_writes_total", "e0", "Counter(0)");
    has(
        &registered,
        "floe_store_hedged_writes_total",
        "e0",
        "Counter(0)",
    );
    has(
        &registered,
        "floe_store_hedged_reads_total",
        "e0",
        "Counter(0)",
    );
    has(&registered, "floe_store_probes_total", "e0", "Counter(0)");
    // A new endpoint is allowed the ceiling, capped by the hard deadline
    // (300 ms here).
    has(
        &registered,
        "floe_store_write_deadline_seconds",
        "e1",
        "Gauge(0.3)",
    );
    f.faults[0].set(Fault::Error, FaultOps::Writes);
    for i in 0..2 {
        f.pool
            .put_new(
                |t| ObjectKey::new(format!("wal/{t}.wal")),
                payload(i).into(),
            )
            .await
            .unwrap();
    }
    let after = series_now(&snap);
    has(
        &after,
        "floe_store_abandoned_writes_total",
        "e0",
        "Counter(1)",
    );
    has(&after, "floe_store_errors_total", "e0", "Counter(1)");
    has(&after, "floe_store_writes_total", "e1", "Counter(2)");
    // The first write moved from e0; the second started on e1.
    has(&after, "floe_store_failovers_total", "e1", "Counter(1)");
    has(&after, "floe_store_endpoint_benched", "e0", "Gauge(1.0)");
    has(&after, "floe_store_endpoint_benched", "e1", "Gauge(0.0)");
}
