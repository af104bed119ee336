//! A broker whose heartbeats stop getting through (the metadata service is
//! still there, only this broker is cut off from it) stops serving by
//! itself once its lease ran out, and serves again, what is still its own,
//! once heartbeats get through.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use floe_broker::{Acks, Broker, ErrorKind, OffsetSpec};
use floe_metadata::MetaError;
use floe_metadata::api::meta_api::Reply;
use floe_metadata::api::{MetaApi, RouteCall, routes};
use floe_metadata::watch::ClusterWatch;
use floe_storage::PartitionKey;
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_testkit::{Cluster, broker_config, wait_owned};

/// The metadata API with this broker's heartbeats and registrations cut.
#[derive(Debug)]
struct Cuttable {
    inner: Arc<dyn MetaApi>,
    cut: AtomicBool,
}

#[async_trait::async_trait]
impl MetaApi for Cuttable {
    async fn call_route(&self, call: RouteCall) -> Result<Reply, MetaError> {
        let lease_call = call.request::<routes::Heartbeat>().is_some()
            || call.request::<routes::Register>().is_some();
        if lease_call && self.cut.load(Ordering::SeqCst) {
            return Err(MetaError::Unavailable("cut off (test)".into()));
        }
        self.inner.call_route(call).await
    }
}

/// The metadata API answering this broker's heartbeats slowly, counting
/// how many are in flight at once.
#[derive(Debug)]
struct Slow {
    inner: Arc<dyn MetaApi>,
    delay: Duration,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

#[async_trait::async_trait]
impl MetaApi for Slow {
    async fn call_route(&self, call: RouteCall) -> Result<Reply, MetaError> {
        if call.request::<routes::Heartbeat>().is_none() {
            return self.inner.call_route(call).await;
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        let reply = self.inner.call_route(call).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        reply
    }
}

fn batch(value: &str) -> Bytes {
    let mut b = BatchBuilder::new(0, 1);
    b.push(RecordSpec::new(None, Some(value.as_bytes().to_vec()), 0));
    b.build(floe_storage::batch::Compression::None).unwrap()
}

async fn until<T>(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(started.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_cut_off_past_its_lease_refuses_everything_then_serves_again() {
    let env = Cluster::start().await;
    let t = env.create_topic("leased", 1, &[]).await;
    let key = PartitionKey::new(t, 0);
    let meta = Arc::new(Cuttable {
        inner: env.meta.clone(),
        cut: AtomicBool::new(false),
    });
    let mut cfg = broker_config();
    cfg.lease = Duration::from_millis(1000);
    let view = ClusterWatch::start(meta.clone());
    let b = Broker::start(cfg, meta.clone(), env.pool().await, view)
        .await
        .unwrap();
    wait_owned(&b, key).await;
    b.produce(&key, &batch("before"), Acks::All).await.unwrap();

    meta.cut.store(true, Ordering::SeqCst);
    // Within the lease (less its margin) after the last heartbeat sent,
    // the broker refuses by itself: the metadata service is not asked.
    until(
        "the lease to run out",
        Duration::from_secs(10),
        async || b.check_lease().err(),
    )
    .await;
    let e = b
        .produce(&key, &batch("late"), Acks::All)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LeaseExpired, "{e}");
    let e = b.fetch(&key, 0, 1 << 20).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LeaseExpired);
    let e = b.list_offset(&key, OffsetSpec::Latest).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LeaseExpired);
    let e = b.delete_records(&key, 0).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LeaseExpired);
    for group in ["g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"] {
        assert!(
            b.coordinator(group, 16).is_err(),
            "no group is coordinated without a lease"
        );
    }

    // The metadata service expires the broker too (its lease counts from
    // when heartbeats arrived, later than the broker counts from).
    let moved = until(
        "the metadata to expire the broker",
        Duration::from_secs(20),
        async || {
            let idx = env.meta.partition_index(key, 0).await.ok()?;
            (idx.info.epoch.0 > 1).then_some(idx.info.epoch.0)
        },
    )
    .await;
    assert!(moved > 1);

    // Back in touch: it registers anew, drops the partition it held at the
    // old epoch and takes it over at the new one.
    meta.cut.store(false, Ordering::SeqCst);
    let ok = until("serving again", Duration::from_secs(20), async || {
        b.produce(&key, &batch("after"), Acks::All).await.ok()
    })
    .await;
    assert_eq!(
        ok.base_offset, 1,
        "the acknowledged write is kept, nothing else"
    );
    let data = b.fetch(&key, 0, 1 << 20).await.unwrap();
    assert_eq!(data.high_watermark, 2);
    assert!(b.log(&key).unwrap().epoch() > 1, "owned at a new epoch");
}

/// A heartbeat answered late does not hold back the next one: they go out
/// on the interval from their send times, so a broker stalled for a while
/// (a GC-like pause) has the whole lease less one interval to renew, not
/// that less the metadata service's answer time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_their_cadence_while_answers_are_slow() {
    let env = Cluster::start().await;
    let t = env.create_topic("slow-meta", 1, &[]).await;
    let key = PartitionKey::new(t, 0);
    let mut cfg = broker_config();
    cfg.lease = Duration::from_millis(2000);
    let every = cfg.heartbeat_interval();
    let meta = Arc::new(Slow {
        inner: env.meta.clone(),
        // Each answer takes three intervals.
        delay: every * 3,
        in_flight: AtomicUsize::new(0),
        most_in_flight: AtomicUsize::new(0),
    });
    let view = ClusterWatch::start(meta.clone());
    let b = Broker::start(cfg, meta.clone(), env.pool().await, view)
        .await
        .unwrap();
    wait_owned(&b, key).await;
    until(
        "heartbeats overlapping",
        Duration::from_secs(20),
        async || (meta.most_in_flight.load(Ordering::SeqCst) >= 2).then_some(()),
    )
    .await;
    // Answers three intervals late still keep the lease (1.8 s from each
    // send) unbroken: the broker serves all along.
    for i in 0..5 {
        b.produce(&key, &batch(&format!("r{i}")), Acks::All)
            .await
            .unwrap();
        tokio::time::sleep(every).await;
    }
    b.check_lease().unwrap();
}
