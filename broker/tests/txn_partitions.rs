//! Transactions on a partition's owner, driven through the real
//! coordinator (producer ids from the metadata's transactional
//! InitProducer step) whose markers go to the owner ([`OwnerMarkers`]):
//! transactional batches, COMMIT and ABORT markers, the last stable offset
//! and the aborted index as `read_committed` reads see them, and a new
//! owner that knows the open transactions and the aborted ones.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use floe_broker::txn::{Holding, Marker, MarkerError, MarkerWriter, TxnConfig, TxnCoordinator};
use floe_broker::{Acks, Broker, ErrorKind, OffsetSpec, PartitionOwner, RemoteBroker};
use floe_metadata::command::ShardFence;
use floe_metadata::ids::{Epoch, PartitionKey, ProducerId, TopicId, TransactionalId};
use floe_metadata::txn::{AbortedTxn, ProducerIdEpoch, TxnOp, TxnState};
use floe_storage::batch::{BatchIter, Compression};
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_testkit::{Cluster, wait_owned};

const WAIT: Duration = Duration::from_secs(20);

fn batch(pid: i64, epoch: i16, seq: i32, txn: bool, value: &str) -> Bytes {
    let mut b = BatchBuilder::new(0, 1_000);
    if pid >= 0 {
        b = b.producer(pid, epoch, seq, txn);
    }
    b.push(RecordSpec::new(None, Some(value.as_bytes().to_vec()), 0));
    b.build(Compression::None).unwrap()
}

/// (base offset, is control) of each batch fetched.
fn batches(pieces: &[Bytes]) -> Vec<(i64, bool)> {
    let mut all = BytesMut::new();
    for p in pieces {
        all.extend_from_slice(p);
    }
    BatchIter::new(&all, usize::MAX)
        .map(|r| {
            let (_, v) = r.unwrap();
            (v.base_offset(), v.is_control())
        })
        .collect()
}

async fn fence_of(b: &Broker, id: &TransactionalId) -> ShardFence {
    let started = Instant::now();
    loop {
        if let Ok(f) = b.txn().txn_fence(id) {
            return f;
        }
        assert!(started.elapsed() < WAIT, "shard never owned");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn until_state(b: &Broker, id: &TransactionalId, state: TxnState) {
    let started = Instant::now();
    loop {
        let all = b.meta().transactions().await.unwrap();
        let t = &all.iter().find(|(i, _)| i == id).unwrap().1;
        if t.state == state {
            return;
        }
        assert!(started.elapsed() < WAIT, "never {state:?}: {t:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A coordinator running on `b`, its markers written through `b`.
fn coordinator_at(b: &Broker) -> Arc<TxnCoordinator> {
    let holder = b.clone();
    TxnCoordinator::new(
        b.meta().clone(),
        Arc::new(b.owner_markers()),
        Arc::new(move |f| holder.shards().holds(f)),
        TxnConfig::default(),
    )
}

/// InitProducerId for `id`, then AddPartitionsToTxn of `key`, both
/// accepted: the producer, with a transaction open on `key`.
async fn begin_on(
    coord: &Arc<TxnCoordinator>,
    fence: ShardFence,
    id: &TransactionalId,
    key: PartitionKey,
) -> ProducerIdEpoch {
    let now = floe_metadata::clock::now_ms();
    let producer = coord
        .init_producer(fence, id, 60_000, None, now)
        .await
        .unwrap();
    let add = TxnOp::AddPartitions {
        producer,
        partitions: vec![key],
    };
    let r = coord.step(fence, id, now, add).await.unwrap();
    assert_eq!(r.refused, None);
    producer
}

async fn lso(b: &Broker, key: &PartitionKey) -> i64 {
    b.partitions()
        .list_offset(key, OffsetSpec::LastStable)
        .await
        .unwrap()
        .offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_and_aborted_transactions_on_a_partition_and_its_next_owner() {
    let c = Cluster::start().await;
    let topic = c.create_topic("txp", 1, &[]).await;
    let key = PartitionKey::new(topic, 0);
    let b = c.broker(|_| {}).await;
    wait_owned(&b, key).await;
    let id = TransactionalId::new("txp-1");
    let fence = fence_of(&b, &id).await;
    let coord = coordinator_at(&b);
    let now = floe_metadata::clock::now_ms();
    let producer: ProducerIdEpoch = coord
        .init_producer(fence, &id, 60_000, None, now)
        .await
        .unwrap();
    let (pid, epoch) = (producer.producer_id.0, producer.epoch.0);
    let add = TxnOp::AddPartitions {
        producer,
        partitions: vec![key],
    };
    let end = |commit| TxnOp::End { producer, commit };

    // A plain record at 0, then a transaction's two batches at 1 and 2.
    b.produce(&key, &batch(-1, 0, 0, false, "plain"), Acks::All)
        .await
        .unwrap();
    coord.step(fence, &id, now, add.clone()).await.unwrap();
    for (seq, v) in [(0, "t1a"), (1, "t1b")] {
        b.produce(&key, &batch(pid, epoch, seq, true, v), Acks::All)
            .await
            .unwrap();
    }
    assert_eq!(lso(&b, &key).await, 1, "the open transaction holds the LSO");
    assert_eq!(
        b.partitions()
            .list_offset(&key, OffsetSpec::Latest)
            .await
            .unwrap()
            .offset,
        3
    );
    let committed = b
        .fetch_isolated(&key, 0, 1 << 20, None, true)
        .await
        .unwrap();
    assert_eq!(
        (committed.high_watermark, committed.last_stable_offset),
        (3, 1)
    );
    assert_eq!(batches(&committed.records), vec![(0, false)]);
    let at_lso = b
        .fetch_isolated(&key, 1, 1 << 20, None, true)
        .await
        .unwrap();
    assert!(at_lso.records.is_empty());
    let all = b
        .fetch_isolated(&key, 0, 1 << 20, None, false)
        .await
        .unwrap();
    assert_eq!(
        batches(&all.records).len(),
        3,
        "read_uncommitted sees it all"
    );
    let ps = b.partitions().producers(&key).unwrap();
    let p = ps.iter().find(|p| p.producer_id == pid).unwrap();
    assert_eq!(
        (p.epoch, p.last_sequence, p.txn_start_offset),
        (epoch, 1, 1)
    );

    // Committed: the marker at 3, the LSO at the high watermark.
    coord.step(fence, &id, now, end(true)).await.unwrap();
    until_state(&b, &id, TxnState::CompleteCommit).await;
    assert_eq!(lso(&b, &key).await, 4);
    let d = b
        .fetch_isolated(&key, 0, 1 << 20, None, true)
        .await
        .unwrap();
    assert_eq!(
        batches(&d.records),
        vec![(0, false), (1, false), (2, false), (3, true)]
    );
    assert!(d.aborted.is_empty());
    // A marker retried after it landed writes nothing.
    let again = Marker {
        producer,
        commit: true,
        coordinator_epoch: fence.epoch,
    };
    b.owner_markers().write_marker(key, again).await.unwrap();
    assert_eq!(
        b.partitions()
            .list_offset(&key, OffsetSpec::Latest)
            .await
            .unwrap()
            .offset,
        4
    );

    // Aborted: its batch at 4, the marker at 5, in the aborted index.
    coord.step(fence, &id, now, add.clone()).await.unwrap();
    b.produce(&key, &batch(pid, epoch, 2, true, "t2"), Acks::All)
        .await
        .unwrap();
    coord.step(fence, &id, now, end(false)).await.unwrap();
    until_state(&b, &id, TxnState::CompleteAbort).await;
    assert_eq!(lso(&b, &key).await, 6);
    let aborted = AbortedTxn {
        producer_id: ProducerId(pid),
        first_offset: 4,
        last_offset: 5,
    };
    let d = b
        .fetch_isolated(&key, 0, 1 << 20, None, true)
        .await
        .unwrap();
    assert_eq!(d.aborted, vec![aborted]);
    let d = b
        .fetch_isolated(&key, 6, 1 << 20, None, true)
        .await
        .unwrap();
    assert!(d.aborted.is_empty(), "not in the range fetched");
    let d = b
        .fetch_isolated(&key, 0, 1 << 20, None, false)
        .await
        .unwrap();
    assert!(d.aborted.is_empty(), "read_uncommitted gets no list");

    // A third transaction left open at 6; then the owner goes away.
    coord.step(fence, &id, now, add.clone()).await.unwrap();
    b.produce(&key, &batch(pid, epoch, 3, true, "t3"), Acks::All)
        .await
        .unwrap();
    assert!(matches!(
        b.txn_durable(&key, ProducerId(pid)).await.unwrap(),
        Holding::All { follows: true, .. }
    ));
    b.shutdown().await;
    drop(coord);
    drop(b);

    // The next owner knows the open transaction and the aborted one.
    let b2 = c.broker(|_| {}).await;
    wait_owned(&b2, key).await;
    assert_eq!(lso(&b2, &key).await, 6);
    let d = b2
        .fetch_isolated(&key, 0, 1 << 20, None, true)
        .await
        .unwrap();
    assert_eq!((d.high_watermark, d.last_stable_offset), (7, 6));
    assert_eq!(d.aborted, vec![aborted]);
    // Begun under the previous owner: batches it answered may be lost, so
    // the transaction may not commit.
    assert_eq!(
        b2.txn_durable(&key, ProducerId(pid)).await.unwrap(),
        Holding::NotAll
    );
    let p = b2.partitions().producers(&key).unwrap();
    assert_eq!(
        p.iter()
            .find(|p| p.producer_id == pid)
            .unwrap()
            .txn_start_offset,
        6
    );
    // Its marker, over the RPC this time: the LSO moves past it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(floe_broker::server::serve(
        listener,
        b2.clone(),
        floe_metadata::http_server::HttpLimits::with_body_limit(floe_broker::rpc::MAX_BODY_BYTES),
    ));
    let remote = RemoteBroker::new(addr.to_string());
    let abort = Marker {
        producer,
        commit: false,
        coordinator_epoch: Epoch(fence.epoch.0 + 1),
    };
    remote.write_marker(&key, &abort).await.unwrap();
    assert_eq!(lso(&b2, &key).await, 8);
    let d = remote
        .fetch_isolated(&key, 0, 1 << 20, None, true)
        .await
        .unwrap();
    assert_eq!(d.last_stable_offset, 8);
    assert_eq!(
        d.aborted,
        vec![
            aborted,
            AbortedTxn {
                producer_id: ProducerId(pid),
                first_offset: 6,
                last_offset: 7
            }
        ]
    );
    let ps = remote.producers(&key).await.unwrap();
    assert_eq!(
        ps.iter()
            .find(|p| p.producer_id == pid)
            .unwrap()
            .txn_start_offset,
        -1
    );
    let latest = remote
        .list_offset(&key, OffsetSpec::LastStable, None)
        .await
        .unwrap();
    assert_eq!(latest.0.offset, 8);

    // A partition that does not exist: nothing to mark.
    let gone = PartitionKey::new(TopicId(uuid::Uuid::new_v4()), 0);
    assert_eq!(
        b2.owner_markers().write_marker(gone, abort).await,
        Err(MarkerError::Gone)
    );
    // Client batches may not be control batches.
    let mut forged = BatchBuilder::new(0, 1)
        .producer(pid, epoch, -1, true)
        .control();
    forged.push(RecordSpec::new(Some(vec![0, 0, 0, 1]), None, 0));
    let e = b2
        .produce(&key, &forged.build(Compression::None).unwrap(), Acks::All)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidRecord);
    server.abort();
    b2.shutdown().await;
}

/// Transactional batches are taken only from a producer whose ongoing
/// transaction holds the partition (KIP-890's check against the
/// metadata); a new instance of the transactional id aborts the old one's
/// transaction with a marker at the new epoch, which fences the old
/// instance's later batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unverified_and_zombie_transactional_batches_are_refused() {
    let c = Cluster::start().await;
    let topic = c.create_topic("txf", 2, &[]).await;
    let key = PartitionKey::new(topic, 0);
    let other = PartitionKey::new(topic, 1);
    let b = c.broker(|_| {}).await;
    wait_owned(&b, key).await;
    wait_owned(&b, other).await;

    // A producer id no transaction has.
    let e = b
        .produce(&key, &batch(4242, 0, 0, true, "forged"), Acks::All)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidTxnState);

    let id = TransactionalId::new("txf-1");
    let fence = fence_of(&b, &id).await;
    let coord = coordinator_at(&b);
    let now = floe_metadata::clock::now_ms();
    let old = begin_on(&coord, fence, &id, key).await;
    let (pid, epoch) = (old.producer_id.0, old.epoch.0);
    // A partition not added to the transaction.
    let e = b
        .produce(&other, &batch(pid, epoch, 0, true, "not added"), Acks::All)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidTxnState);
    b.produce(&key, &batch(pid, epoch, 0, true, "zombie"), Acks::All)
        .await
        .unwrap();
    assert_eq!(lso(&b, &key).await, 0);

    // A new instance: the open transaction is aborted at the next epoch.
    let started = Instant::now();
    let new = loop {
        match coord.init_producer(fence, &id, 60_000, None, now).await {
            Ok(p) => break p,
            Err(e) => {
                assert!(started.elapsed() < WAIT, "{e:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert!(new.epoch.0 > epoch);
    assert_eq!(lso(&b, &key).await, 2, "the abort marker at 1");
    let d = b
        .fetch_isolated(&key, 0, 1 << 20, None, true)
        .await
        .unwrap();
    assert_eq!(
        d.aborted,
        vec![AbortedTxn {
            producer_id: ProducerId(pid),
            first_offset: 0,
            last_offset: 1
        }]
    );
    let e = b
        .produce(&key, &batch(pid, epoch, 1, true, "late"), Acks::All)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidProducerEpoch);
    b.shutdown().await;
}

/// The coordinator's markers reach a partition owned by another broker
/// over the RPC: `OwnerMarkers` of a broker that does not own the
/// partition finds its owner in the cluster view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_reaches_the_owner_on_another_broker() {
    let c = Cluster::start().await;
    let topic = c.create_topic("txr", 1, &[]).await;
    let key = PartitionKey::new(topic, 0);
    // Each broker serves its RPC at the address it advertises.
    let mut servers = Vec::new();
    let mut brokers = Vec::new();
    for id in [1u32, 2] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let b = c
            .broker(|cfg| {
                cfg.id = id;
                cfg.advertise = addr.to_string();
            })
            .await;
        servers.push(tokio::spawn(floe_broker::server::serve(
            listener,
            b.clone(),
            floe_metadata::http_server::HttpLimits::with_body_limit(
                floe_broker::rpc::MAX_BODY_BYTES,
            ),
        )));
        brokers.push(b);
        if id == 1 {
            wait_owned(&brokers[0], key).await;
        }
    }
    // The owner, and the other broker once its view knows the owner's address.
    let started = Instant::now();
    let (owner, other) = loop {
        assert!(started.elapsed() < WAIT, "no owner in the views");
        let owned: Vec<bool> = brokers.iter().map(|b| b.owned().contains(&key)).collect();
        if let Some(i) = owned.iter().position(|o| *o) {
            let (o, x) = (&brokers[i], &brokers[1 - i]);
            let snap = x.view().current();
            let known = snap
                .by_id
                .get(&topic)
                .and_then(|t| t.partitions.iter().find(|p| p.partition == 0))
                .and_then(|p| p.owner)
                == Some(o.broker_id());
            if known && snap.broker_addr(o.broker_id()).is_some() {
                break (o.clone(), x.clone());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let id = TransactionalId::new("txr-1");
    // The id's coordinator: whichever broker holds its shard.
    let started = Instant::now();
    let (coordinator, fence) = loop {
        assert!(started.elapsed() < WAIT, "shard never owned");
        let held = [&owner, &other]
            .into_iter()
            .find_map(|b| b.txn().txn_fence(&id).ok().map(|f| (b.clone(), f)));
        if let Some(x) = held {
            break x;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let coord = coordinator_at(&coordinator);
    let producer = begin_on(&coord, fence, &id, key).await;
    owner
        .produce(
            &key,
            &batch(producer.producer_id.0, producer.epoch.0, 0, true, "t"),
            Acks::All,
        )
        .await
        .unwrap();
    assert_eq!(lso(&owner, &key).await, 0);
    // Asked from the broker that does not own the partition: all there.
    assert!(matches!(
        other
            .owner_markers()
            .durable(key, producer.producer_id)
            .await
            .unwrap(),
        Holding::All { follows: true, .. }
    ));
    // Written from the broker that does not own the partition.
    let commit = Marker {
        producer,
        commit: true,
        coordinator_epoch: fence.epoch,
    };
    other
        .owner_markers()
        .write_marker(key, commit)
        .await
        .unwrap();
    assert_eq!(lso(&owner, &key).await, 2);
    for s in servers {
        s.abort();
    }
    for b in brokers {
        b.shutdown().await;
    }
}

/// A marker is flushed at once where flushes are not paced (the producer's
/// next transaction and read_committed readers wait for it), and with the
/// next paced flush where they are (markers never add PUTs there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marker_goes_at_once_unless_flushes_are_paced() {
    for paced in [false, true] {
        let c = Cluster::start().await;
        let topic = c.create_topic("txm", 1, &[]).await;
        let key = PartitionKey::new(topic, 0);
        // No flush comes by the clock during the test.
        let b = c
            .broker(|cfg| {
                cfg.flush.interval = Duration::from_secs(3_600);
                cfg.flush.paced = paced;
            })
            .await;
        wait_owned(&b, key).await;
        let id = TransactionalId::new("txm-1");
        let fence = fence_of(&b, &id).await;
        let coord = coordinator_at(&b);
        let producer = begin_on(&coord, fence, &id, key).await;
        // acks=1: answered once sequenced, not flushed.
        b.produce(
            &key,
            &batch(producer.producer_id.0, producer.epoch.0, 0, true, "v"),
            Acks::Leader,
        )
        .await
        .unwrap();
        let marker = Marker {
            producer,
            commit: true,
            coordinator_epoch: fence.epoch,
        };
        let writer = b.owner_markers();
        let write = writer.write_marker(key, marker);
        tokio::pin!(write);
        if paced {
            // Nothing flushes it before the paced flush is due.
            let early = tokio::time::timeout(Duration::from_millis(500), &mut write).await;
            assert!(early.is_err(), "a paced broker flushed for a marker");
            b.shutdown().await;
        } else {
            tokio::time::timeout(WAIT, write)
                .await
                .expect("the marker waited for the flush interval")
                .unwrap();
            assert_eq!(lso(&b, &key).await, 2, "data at 0, the marker at 1");
            b.shutdown().await;
        }
    }
}

/// Appends an unknown producer's batch that does not start at sequence 0:
/// refused as not stored at first (its earlier batches may still come),
/// taken once the broker's gap grace has passed.
async fn append_after_the_gap_grace(b: &Broker, key: PartitionKey, records: &Bytes) {
    let first = b.partitions().append(&key, records, Acks::Leader);
    assert_eq!(
        first.err().map(|e| e.kind()),
        Some(ErrorKind::SequenceGap),
        "an unknown producer's gap is taken at once"
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match b.partitions().append(&key, records, Acks::Leader) {
            Ok(pending) => {
                pending.wait().await.unwrap();
                break;
            }
            Err(e) if e.kind() == ErrorKind::SequenceGap => {
                assert!(tokio::time::Instant::now() < deadline, "still refused: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// A transaction's batches answered once sequenced (`acks=1`, as the proxy
/// answers a transaction's produce): the owner's answer to the coordinator
/// before a commit waits for them to be durable; a producer's first batch
/// here at a sequence that does not follow (its earlier ones may have gone
/// to an owner that lost them) may not commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_waits_for_a_transactions_batches_answered_once_sequenced() {
    let c = Cluster::start().await;
    let topic = c.create_topic("txd", 1, &[]).await;
    let key = PartitionKey::new(topic, 0);
    // A flush only every 10 s unless asked: the wait below is the ask's.
    // An unknown producer's gap is refused for 300 ms.
    let b = c
        .broker(|cfg| {
            cfg.flush.interval = Duration::from_secs(10);
            cfg.producer_gap_grace = Duration::from_millis(300);
        })
        .await;
    wait_owned(&b, key).await;
    let id = TransactionalId::new("txd-1");
    let fence = fence_of(&b, &id).await;
    let coord = coordinator_at(&b);
    let producer = begin_on(&coord, fence, &id, key).await;
    let (pid, epoch) = (producer.producer_id.0, producer.epoch.0);
    for seq in 0..3 {
        b.partitions()
            .append(&key, &batch(pid, epoch, seq, true, "t"), Acks::Leader)
            .unwrap()
            .wait()
            .await
            .unwrap();
    }
    let (_, hw, leo) = b.log(&key).unwrap().offsets();
    assert_eq!((hw, leo), (0, 3), "answered before any flush");
    let epoch_now = b.log(&key).unwrap().epoch();
    assert_eq!(
        b.txn_durable(&key, producer.producer_id).await.unwrap(),
        Holding::All {
            follows: true,
            owner_epoch: epoch_now
        }
    );
    assert_eq!(b.log(&key).unwrap().offsets().1, 3, "durable once answered");
    // The commit goes through the same check, and the markers follow.
    let end = TxnOp::End {
        producer,
        commit: true,
    };
    let r = coord
        .step(fence, &id, floe_metadata::clock::now_ms(), end)
        .await;
    assert_eq!(r.unwrap().refused, None);
    until_state(&b, &id, TxnState::CompleteCommit).await;

    // Another producer, unknown here, whose first batch has sequence 5
    // (its earlier ones were refused, or went to an owner that lost them):
    // held, unproved; it commits because the partition kept its owner
    // since the transaction added it.
    let id2 = TransactionalId::new("txd-2");
    let fence2 = fence_of(&b, &id2).await;
    let coord2 = coordinator_at(&b);
    let p2 = begin_on(&coord2, fence2, &id2, key).await;
    append_after_the_gap_grace(&b, key, &batch(p2.producer_id.0, p2.epoch.0, 5, true, "u")).await;
    assert_eq!(
        b.txn_durable(&key, p2.producer_id).await.unwrap(),
        Holding::All {
            follows: false,
            owner_epoch: epoch_now
        }
    );
    let end2 = TxnOp::End {
        producer: p2,
        commit: true,
    };
    let r = coord2
        .step(fence2, &id2, floe_metadata::clock::now_ms(), end2)
        .await;
    assert_eq!(r.unwrap().refused, None);
    until_state(&b, &id2, TxnState::CompleteCommit).await;

    // A coordinator that did not see the partition added (a new one, after
    // its shard moved) cannot tell whether the owner changed: refused.
    let id3 = TransactionalId::new("txd-3");
    let fence3 = fence_of(&b, &id3).await;
    let p3 = begin_on(&coord2, fence3, &id3, key).await;
    append_after_the_gap_grace(&b, key, &batch(p3.producer_id.0, p3.epoch.0, 3, true, "w")).await;
    let end3 = TxnOp::End {
        producer: p3,
        commit: true,
    };
    let r = coordinator_at(&b)
        .step(fence3, &id3, floe_metadata::clock::now_ms(), end3)
        .await;
    assert!(
        matches!(r, Err(floe_broker::txn::CoordError::Abortable(_))),
        "{r:?}"
    );
    // A producer with nothing here has nothing to commit here either.
    assert_eq!(
        b.txn_durable(&key, ProducerId(p2.producer_id.0 + 1000))
            .await
            .unwrap(),
        Holding::NotAll
    );
    b.shutdown().await;
}
