//! The transaction coordinator of a real broker against a real metadata
//! node: the broker's fence for a transactional id's shard, a transaction
//! committed through it (markers to a stand-in for the partitions' owners,
//! which are not wired yet), and fences that are not the broker's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floe_broker::txn::{
    CoordError, Holding, Marker, MarkerError, MarkerWriter, TxnConfig, TxnCoordinator,
};
use floe_metadata::command::ShardFence;
use floe_metadata::ids::{BrokerId, Epoch, PartitionKey, TransactionalId};
use floe_metadata::txn::{ProducerIdEpoch, TxnOp, TxnState};
use floe_testkit::Cluster;

/// Markers as the partitions' owners would get them; owners that hold
/// every transaction durably (epoch 1) and, when `unwritable`, cannot be
/// reached for its markers.
#[derive(Debug, Default)]
struct Markers {
    written: Mutex<Vec<(PartitionKey, Marker)>>,
    unwritable: bool,
}

#[async_trait::async_trait]
impl MarkerWriter for Markers {
    async fn write_marker(&self, p: PartitionKey, m: Marker) -> Result<(), MarkerError> {
        if self.unwritable {
            return Err(MarkerError::Failed("unreachable (test)".into()));
        }
        self.written.lock().unwrap().push((p, m));
        Ok(())
    }

    async fn durable(
        &self,
        _p: PartitionKey,
        _producer: floe_metadata::ids::ProducerId,
    ) -> Result<Holding, MarkerError> {
        Ok(Holding::All {
            follows: true,
            owner_epoch: 1,
        })
    }

    fn owner_epoch(&self, _p: PartitionKey) -> Option<u64> {
        Some(1)
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
        match b.txn().txn_fence(&id) {
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
    assert!(b.shards().holds(&fence));

    let markers = Arc::new(Markers::default());
    let holder = b.clone();
    let coord = TxnCoordinator::new(
        b.meta().clone(),
        markers.clone(),
        Arc::new(move |f| holder.shards().holds(f)),
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
    let mut written: Vec<PartitionKey> = markers
        .written
        .lock()
        .unwrap()
        .iter()
        .map(|(p, _)| *p)
        .collect();
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
    assert!(!b.shards().holds(&moved) && !b.shards().holds(&other));
    b.shutdown().await;
}

/// Waits until `b` owns a coordinator shard of `id`; panics after 20 s.
async fn fence_of(b: &floe_broker::Broker, id: &TransactionalId) -> ShardFence {
    let started = Instant::now();
    loop {
        if let Ok(f) = b.txn().txn_fence(id) {
            return f;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "shard never owned"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `id`'s transaction is in `state`; panics after 20 s.
async fn wait_state(
    meta: &Arc<dyn floe_metadata::api::MetaApi>,
    id: &TransactionalId,
    state: TxnState,
) -> floe_metadata::txn::TxnMeta {
    let started = Instant::now();
    loop {
        let all = meta.transactions().await.unwrap();
        if let Some((_, t)) = all.iter().find(|(i, _)| i == id)
            && t.state == state
        {
            return t.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{id} never {state:?}: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn init(timeout_ms: u32) -> TxnOp {
    TxnOp::InitProducer {
        timeout_ms,
        max_timeout_ms: 0,
        expected: None,
    }
}

/// The proxy's view: the coordinator reached over the internal RPC as a
/// `dyn TxnCoordination`. A new instance fences the old one, offsets sent
/// in a transaction are stored by its commit only, and a transaction past
/// its timeout is aborted by the broker's timer (its producer fenced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_reaches_the_coordinator_over_the_rpc() {
    use floe_broker::{RemoteBroker, TxnCoordination};
    use floe_metadata::api::{proto as mp, routes};
    use floe_metadata::command::CommittedOffset;
    use floe_metadata::txn::TxnError;

    let c = Cluster::start().await;
    c.create_topic("in", 1, &[]).await;
    let b = c.broker(|_| {}).await;
    let id = TransactionalId::new("tx-rpc");
    fence_of(&b, &id).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(floe_broker::server::serve(
        listener,
        b.clone(),
        floe_metadata::http_server::HttpLimits::with_body_limit(floe_broker::rpc::MAX_BODY_BYTES),
    ));
    let coord: Arc<dyn TxnCoordination> = Arc::new(RemoteBroker::new(addr.to_string()));

    let first = coord.txn_step(&id, init(60_000)).await.unwrap();
    assert_eq!(first.refused, None);
    let first = first.txn.unwrap();
    let second = coord
        .txn_step(&id, init(60_000))
        .await
        .unwrap()
        .txn
        .unwrap();
    assert_eq!(second.epoch.0, first.epoch.0 + 1);
    let old = ProducerIdEpoch {
        producer_id: first.producer_id,
        epoch: first.epoch,
    };
    let producer = ProducerIdEpoch {
        producer_id: second.producer_id,
        epoch: second.epoch,
    };
    let group = "g-rpc".to_string();
    let add = |producer| TxnOp::AddGroup {
        producer,
        group: group.clone(),
    };
    let r = coord.txn_step(&id, add(old)).await.unwrap();
    assert_eq!(r.refused, Some(TxnError::ProducerFenced));
    let r = coord.txn_step(&id, add(producer)).await.unwrap();
    assert_eq!(r.refused, None);
    let offsets = TxnOp::CommitOffsets {
        producer,
        group: group.clone(),
        offsets: vec![(
            "in".into(),
            0,
            CommittedOffset {
                offset: 42,
                leader_epoch: -1,
                metadata: String::new(),
            },
        )],
    };
    assert_eq!(coord.txn_step(&id, offsets).await.unwrap().refused, None);
    let described = coord.describe_txn(&id).await.unwrap().unwrap();
    assert_eq!(described.state, TxnState::Ongoing);
    assert!(described.holds_offset(&group, "in", 0));
    let fetch = || async {
        b.meta()
            .call::<routes::FetchOffsets>(mp::FetchOffsetsRequest {
                group: group.clone(),
            })
            .await
            .unwrap()
            .offsets
    };
    assert!(
        fetch().await.is_empty(),
        "pending offsets are not committed"
    );
    let end = TxnOp::End {
        producer,
        commit: true,
    };
    assert_eq!(coord.txn_step(&id, end).await.unwrap().refused, None);
    wait_state(b.meta(), &id, TxnState::CompleteCommit).await;
    let stored = fetch().await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].offset, 42);
    let listed = coord.list_txns().await.unwrap();
    assert!(listed.iter().any(|(i, _)| *i == id));

    // A transaction past its timeout is aborted by the timer.
    let hung = TransactionalId::new("tx-hung");
    fence_of(&b, &hung).await;
    let t = coord.txn_step(&hung, init(1)).await.unwrap().txn.unwrap();
    let p = ProducerIdEpoch {
        producer_id: t.producer_id,
        epoch: t.epoch,
    };
    let r = coord
        .txn_step(
            &hung,
            TxnOp::AddGroup {
                producer: p,
                group: "g-hung".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(r.refused, None);
    let aborted = wait_state(b.meta(), &hung, TxnState::CompleteAbort).await;
    assert_eq!(aborted.epoch.0, p.epoch.0 + 1, "the producer is fenced");

    // The coordinator's own steps are not a client's to ask.
    let complete = TxnOp::Complete {
        producer,
        commit: true,
    };
    assert_eq!(
        coord.txn_step(&id, complete).await,
        Err(CoordError::Txn(TxnError::InvalidRequest))
    );
    server.abort();
    let _ = server.await;
    b.shutdown().await;
}

/// A transaction decided on one broker whose markers could not be written
/// is completed by the broker that takes its shard over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_taken_over_completes_the_decided_transactions() {
    let c = Cluster::start().await;
    let topic = c.create_topic("txo", 1, &[]).await;
    let first = c.broker(|cfg| cfg.lease = Duration::from_secs(1)).await;
    let id = TransactionalId::new("tx-move");
    // Its markers all fail (the owners hold the transaction durably).
    assert!(first.set_marker_writer(Arc::new(Markers {
        unwritable: true,
        ..Markers::default()
    })));
    fence_of(&first, &id).await;
    let t = first
        .txn()
        .txn_step(&id, init(60_000))
        .await
        .unwrap()
        .txn
        .unwrap();
    let producer = ProducerIdEpoch {
        producer_id: t.producer_id,
        epoch: t.epoch,
    };
    let partition = PartitionKey::new(topic, 0);
    let add = TxnOp::AddPartitions {
        producer,
        partitions: vec![partition],
    };
    assert_eq!(first.txn().txn_step(&id, add).await.unwrap().refused, None);
    let end = TxnOp::End {
        producer,
        commit: true,
    };
    assert_eq!(first.txn().txn_step(&id, end).await.unwrap().refused, None);
    first.shutdown().await;

    let pool = c.pool().await;
    let second = c
        .broker_on(pool, |cfg| {
            cfg.id = 2;
            cfg.advertise = "127.0.0.1:2".into();
        })
        .await;
    let markers = Arc::new(Markers::default());
    assert!(second.set_marker_writer(markers.clone()));
    fence_of(&second, &id).await;
    wait_state(second.meta(), &id, TxnState::CompleteCommit).await;
    let written = markers.written.lock().unwrap().clone();
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].0, partition);
    assert!(written[0].1.commit);
    second.shutdown().await;
}
