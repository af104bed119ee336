//! A broker taking many partitions over reads their committed indexes in
//! batches (one linearizable read for hundreds of partitions), not one
//! metadata round trip each, and serves every one of them afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use floe_broker::{Acks, Broker};
use floe_metadata::MetaError;
use floe_metadata::api::meta_api::Reply;
use floe_metadata::api::{MetaApi, RouteCall, routes};
use floe_metadata::watch::ClusterWatch;
use floe_storage::PartitionKey;
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_testkit::{Cluster, broker_config};

/// The metadata API, counting index reads (single and batched) and the
/// partitions the batched ones asked for.
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn MetaApi>,
    single: AtomicUsize,
    batched: AtomicUsize,
    batched_partitions: AtomicUsize,
}

#[async_trait::async_trait]
impl MetaApi for Counting {
    async fn call_route(&self, call: RouteCall) -> Result<Reply, MetaError> {
        if call.request::<routes::PartitionIndex>().is_some() {
            self.single.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(r) = call.request::<routes::PartitionIndexes>() {
            self.batched.fetch_add(1, Ordering::SeqCst);
            self.batched_partitions
                .fetch_add(r.partitions.len(), Ordering::SeqCst);
        }
        self.inner.call_route(call).await
    }
}

fn batch(value: &str) -> Bytes {
    let mut b = BatchBuilder::new(0, 1);
    b.push(RecordSpec::new(None, Some(value.as_bytes().to_vec()), 0));
    b.build(floe_storage::batch::Compression::None).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_over_of_600_partitions_reads_their_indexes_in_batches() {
    const PARTITIONS: u32 = 600;
    let env = Cluster::start().await;
    let t = env.create_topic("many", PARTITIONS, &[]).await;
    let meta = Arc::new(Counting {
        inner: env.meta.clone(),
        single: AtomicUsize::new(0),
        batched: AtomicUsize::new(0),
        batched_partitions: AtomicUsize::new(0),
    });
    let view = ClusterWatch::start(meta.clone());
    let b: Broker = Broker::start(broker_config(), meta.clone(), env.pool().await, view)
        .await
        .unwrap();
    let started = Instant::now();
    while b.owned().len() < PARTITIONS as usize {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} of {PARTITIONS} partitions taken over",
            b.owned().len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(meta.single.load(Ordering::SeqCst), 0, "no index read alone");
    let reads = meta.batched.load(Ordering::SeqCst);
    assert!(
        reads <= PARTITIONS as usize / 20,
        "{reads} index reads for {PARTITIONS} partitions"
    );
    assert!(meta.batched_partitions.load(Ordering::SeqCst) >= PARTITIONS as usize);
    // Every partition taken over serves.
    for p in [0, PARTITIONS / 2, PARTITIONS - 1] {
        let key = PartitionKey::new(t, p);
        b.produce(&key, &batch("after"), Acks::All).await.unwrap();
    }
}
