//! Failover on real S3 servers: two moto processes, each behind a TCP fault
//! proxy. One endpoint is cut in the middle of a stream of writes, or hangs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{FaultProxy, Moto, ProxyMode, s3_url};
use floe_storage::backend::EndpointConfig;
use floe_storage::{ObjectKey, ObjectRef, PoolOptions, StorePool};
use futures::StreamExt;

fn opts() -> PoolOptions {
    PoolOptions {
        write_timeout: Duration::from_secs(2),
        read_timeout: Duration::from_secs(2),
        bench_cooldown: Duration::from_millis(500),
        max_write_attempts: 6,
        read_attempts: 3,
        retry_backoff: Duration::from_millis(20),
        ..PoolOptions::default()
    }
}

fn payload(i: usize) -> Bytes {
    let mut v = format!("object {i}:").into_bytes();
    v.resize(64 * 1024 + i * 97, (i % 251) as u8);
    Bytes::from(v)
}

struct Cluster {
    _motos: Vec<Moto>,
    proxies: Vec<FaultProxy>,
    pool: Arc<StorePool>,
}

async fn cluster() -> Cluster {
    let motos = vec![Moto::start(), Moto::start()];
    let mut proxies = Vec::new();
    for m in &motos {
        proxies.push(FaultProxy::start(m.port).await);
    }
    let urls: Vec<String> = ["a", "b"]
        .iter()
        .zip(&proxies)
        .map(|(id, p)| format!("{id}={}", s3_url("floe", "wal", &p.endpoint())))
        .collect();
    let eps = EndpointConfig::parse_list(&urls).unwrap();
    let pool = Arc::new(StorePool::open(&eps, opts()).await.unwrap());
    Cluster {
        _motos: motos,
        proxies,
        pool,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_endpoint_mid_stream_loses_and_duplicates_nothing() {
    let c = cluster().await;
    const WRITES: usize = 60;
    let done = Arc::new(AtomicUsize::new(0));
    let proxies = Arc::new(c.proxies);

    // The switch: cut endpoint a after 15 writes, restore it after 40.
    let switch = {
        let done = done.clone();
        let proxies = proxies.clone();
        tokio::spawn(async move {
            while done.load(Ordering::SeqCst) < 15 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            proxies[0].set(ProxyMode::Cut);
            while done.load(Ordering::SeqCst) < 40 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            proxies[0].set(ProxyMode::Pass);
        })
    };

    let results: Vec<(usize, ObjectRef)> = futures::stream::iter(0..WRITES)
        .map(|i| {
            let pool = c.pool.clone();
            let done = done.clone();
            async move {
                let obj = pool
                    .put_new(
                        |t| ObjectKey::new(format!("{i:04}/{t}.wal")),
                        payload(i).into(),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("write {i} failed: {e}"));
                done.fetch_add(1, Ordering::SeqCst);
                (i, obj)
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    switch.await.unwrap();

    // Every write succeeded exactly once, each in its own object.
    assert_eq!(results.len(), WRITES);
    let indexes: HashSet<usize> = results.iter().map(|(i, _)| *i).collect();
    assert_eq!(indexes.len(), WRITES);
    let keys: HashSet<(String, String)> = results
        .iter()
        .map(|(_, o)| (o.endpoint.to_string(), o.key.to_string()))
        .collect();
    assert_eq!(keys.len(), WRITES, "no object reported twice");
    let per_endpoint: HashMap<String, usize> =
        results.iter().fold(HashMap::new(), |mut m, (_, o)| {
            *m.entry(o.endpoint.to_string()).or_default() += 1;
            m
        });
    let stats = c.pool.stats();
    eprintln!("writes per endpoint: {per_endpoint:?}; pool stats: {stats:?}");
    assert!(
        stats[0].abandoned >= 1,
        "the cut broke at least one write on a: {stats:?}"
    );
    assert_eq!(stats[0].written + stats[1].written, WRITES as u64);
    assert!(
        per_endpoint.get("b").copied().unwrap_or(0) >= 25,
        "b carried the cut"
    );

    // With a back, everything reads back byte-identical from where it landed.
    for (i, obj) in &results {
        assert_eq!(
            c.pool.get(obj).await.unwrap(),
            payload(*i),
            "object {i} at {obj}"
        );
    }
    // a takes writes again once its cooldown is over and the probe that a
    // write then starts in the background has passed.
    tokio::time::sleep(opts().bench_cooldown).await;
    let mut landed_on_a = false;
    let until = Instant::now() + Duration::from_secs(30);
    for i in 0.. {
        let o = c
            .pool
            .put_new(|t| ObjectKey::new(format!("after/{t}")), payload(i).into())
            .await
            .unwrap();
        landed_on_a |= o.endpoint.as_str() == "a";
        if landed_on_a || Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(landed_on_a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_endpoint_costs_at_most_the_write_deadline() {
    let c = cluster().await;
    c.proxies[0].set(ProxyMode::Hang);
    let deadline = opts().write_timeout;
    let mut worst = Duration::ZERO;
    for i in 0..4 {
        let started = Instant::now();
        let obj = c
            .pool
            .put_new(|t| ObjectKey::new(format!("hang/{t}")), payload(i).into())
            .await
            .unwrap();
        worst = worst.max(started.elapsed());
        assert_eq!(obj.endpoint.as_str(), "b");
        assert_eq!(c.pool.get(&obj).await.unwrap(), payload(i));
    }
    let stats = c.pool.stats();
    assert!(
        stats[0].abandoned >= 1,
        "a was tried, then benched: {stats:?}"
    );
    eprintln!("slowest write with a hung endpoint: {worst:?} (deadline {deadline:?})");
    // One abandoned attempt costs the deadline; the rest is a healthy write.
    // The margin is generous because CI machines are shared and noisy.
    assert!(worst < deadline + Duration::from_secs(3), "worst {worst:?}");
}
