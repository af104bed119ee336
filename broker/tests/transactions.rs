//! The transaction coordinator of a real broker against a real metadata
//! node: the broker's fence for a transactional id's shard, a transaction
//! committed through it (markers to a stand-in for the partitions' owners,
//! which are not wired yet), and fences that are not the broker's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floe_broker::txn::{CoordError, Marker, MarkerError, MarkerWriter, TxnConfig, TxnCoordinator};
use floe_metadata::command::ShardFence;
use floe_metadata::ids::{BrokerId, Epoch, PartitionKey, TransactionalId};
use floe_metadata::txn::{ProducerIdEpoch, TxnOp, TxnState};
use floe_testkit::Cluster;

/// Markers as the partitions' owners would get them.
#[derive(Debug, Default)]
struct Markers(Mutex<Vec<(PartitionKey, Marker)>>);

#[async_trait::async_trait]
impl MarkerWriter for Markers {
    async fn write_marker(&self, p: PartitionKey, m: Marker) -> Result<(), MarkerError> {
        self.0.lock().unwrap().push((p, m));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_coordinates_the_transactions_of_its_shards() {
    let c = Cluster::start().await;
    let topic = c.create_topic("txn", 2, &[]).await;
    let b = c.broker(|_| {}).await;
    let id = TransactionalId::new("tx-1");

    // Once the broker owns the id's shard, it has a fence for it.
    let started = Instant::now();
    let fence = loop {
        match b.txn_fence(&id) {
            Ok(f) => break f,
            Err(e) => {
                assert_eq!(e, CoordError::NotCoordinator);
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "shard never owned"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert!(b.holds_shard(&fence));

    let markers = Arc::new(Markers::default());
    let holder = b.clone();
    let coord = TxnCoordinator::new(
        b.meta().clone(),
        markers.clone(),
        Arc::new(move |f| holder.holds_shard(f)),
        TxnConfig::default(),
    );
    let now = floe_metadata::clock::now_ms();
    let producer: ProducerIdEpoch = coord
        .init_producer(fence, &id, 60_000, None, now)
        .await
        .unwrap();
    let partitions: Vec<PartitionKey> = (0..2).map(|p| PartitionKey::new(topic, p)).collect();
    let add = TxnOp::AddPartitions {
        producer,
        partitions: partitions.clone(),
    };
    let r = coord.step(fence, &id, now, add).await.unwrap();
    assert_eq!(r.refused, None);
    let end = TxnOp::End {
        producer,
        commit: true,
    };
    let r = coord.step(fence, &id, now, end).await.unwrap();
    assert_eq!(r.txn.unwrap().state, TxnState::PrepareCommit);

    // The markers are written and the commit completed in the metadata.
    let started = Instant::now();
    loop {
        let all = b.meta().transactions().await.unwrap();
        let t = &all.iter().find(|(i, _)| *i == id).unwrap().1;
        if t.state == TxnState::CompleteCommit {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never completed: {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut written: Vec<PartitionKey> =
        markers.0.lock().unwrap().iter().map(|(p, _)| *p).collect();
    written.sort();
    assert_eq!(written, partitions);

    // Another epoch of the shard, or another broker, is not this fence.
    let moved = ShardFence {
        epoch: Epoch(fence.epoch.0 + 1),
        ..fence
    };
    let other = ShardFence {
        broker: BrokerId(fence.broker.0 + 1),
        ..fence
    };
    assert!(!b.holds_shard(&moved) && !b.holds_shard(&other));
    b.shutdown().await;
}
