//! The coordinator against a metadata service that applies its steps to a
//! real model (`floe_metadata::state::ClusterState`), and partitions whose
//! markers fail on demand.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use floe_metadata::MetaError;
use floe_metadata::api::meta_api::{Reply, reply};
use floe_metadata::api::{RouteCall, routes, txn_routes};
use floe_metadata::command::{Command, NodeKind, OwnedItem, OwnershipChange, Response};
use floe_metadata::ids::{BrokerId, ProducerId, Revision, ShardId, TopicId};
use floe_metadata::state::ClusterState;

use super::*;

/// The metadata service: one model, the transaction steps applied to it.
#[derive(Debug)]
struct Meta {
    state: Mutex<(ClusterState, u64)>,
}

impl Meta {
    /// Broker 1 owns shard 0; topic "t" has three partitions.
    fn new() -> Arc<Self> {
        let m = Arc::new(Self {
            state: Mutex::new((ClusterState::default(), 0)),
        });
        for c in [
            Command::RegisterNode {
                id: BrokerId(1),
                kind: NodeKind::Broker,
                addr: "127.0.0.1:1".into(),
                now_ms: 1,
                lease_ms: u64::MAX / 4,
            },
            Command::CreateTopic {
                name: "t".into(),
                id: TopicId(uuid::Uuid::from_bytes([5; 16])),
                partitions: 3,
                config: Default::default(),
            },
        ] {
            m.apply(c);
        }
        m.move_shard();
        m
    }

    fn apply(&self, c: Command) -> Response {
        let mut g = self.state.lock().unwrap();
        g.1 += 1;
        let rev = Revision(g.1);
        g.0.apply(rev, &c)
    }

    /// Gives shard 0 to broker 1 again, at the next epoch.
    fn move_shard(&self) {
        self.apply(Command::Reassign {
            changes: vec![OwnershipChange {
                item: OwnedItem::Shard(ShardId(0)),
                owner: Some(BrokerId(1)),
            }],
        });
    }

    fn fence(&self) -> ShardFence {
        let g = self.state.lock().unwrap();
        ShardFence {
            broker: BrokerId(1),
            shard: ShardId(0),
            epoch: g.0.topics.shards[&ShardId(0)].epoch,
        }
    }

    fn partition(&self, p: u32) -> PartitionKey {
        let g = self.state.lock().unwrap();
        PartitionKey::new(g.0.topics.by_name["t"].id, p)
    }

    fn txn(&self, id: &str) -> TxnMeta {
        let g = self.state.lock().unwrap();
        g.0.producers.txn.ids()[&TransactionalId::new(id)].clone()
    }

    fn txns(&self) -> Vec<(TransactionalId, TxnMeta)> {
        let g = self.state.lock().unwrap();
        g.0.producers.txn.ids().clone().into_iter().collect()
    }
}

#[async_trait::async_trait]
impl MetaApi for Meta {
    async fn call_route(&self, call: RouteCall) -> Result<Reply, MetaError> {
        if let Some(req) = call.request::<routes::TxnList>() {
            let f = txn_routes::filter(req.clone());
            let g = self.state.lock().unwrap();
            let txns = g.0.producers.txn.select(&f);
            return Ok(reply::<routes::TxnList>(
                floe_metadata::api::proto::TxnListResponse {
                    txns: txns
                        .into_iter()
                        .map(|(id, t)| txn_routes::info_msg(id, t))
                        .collect(),
                },
            ));
        }
        let Some(req) = call.request::<routes::TxnStep>() else {
            return Err(MetaError::InvalidRequest(call.path().into()));
        };
        let cmd = txn_routes::command(req.clone())?;
        let id = cmd.id.clone();
        match self.apply(Command::Txn(cmd)) {
            Response::Txn(r) => Ok(reply::<routes::TxnStep>(txn_routes::reply_msg(&id, &r))),
            Response::Error(e) => Err(e),
            other => Err(MetaError::Storage(format!("{other:?}"))),
        }
    }
}

/// Partitions' owners: markers written, and failures on demand.
#[derive(Debug, Default)]
struct Owners {
    written: Mutex<Vec<(PartitionKey, Marker)>>,
    /// Attempts to fail, by partition.
    failing: Mutex<HashMap<PartitionKey, usize>>,
    gone: Mutex<HashSet<PartitionKey>>,
    /// Partitions whose owner may have lost answered batches.
    lost: Mutex<HashSet<PartitionKey>>,
    /// Durability checks to fail, by partition.
    unreachable: Mutex<HashMap<PartitionKey, usize>>,
    /// Durability checks asked, in order.
    asked: Mutex<Vec<PartitionKey>>,
    /// Partitions held whole but unproved (`follows` false), with the
    /// owner's epoch they answer.
    unproved: Mutex<HashMap<PartitionKey, u64>>,
}

impl Owners {
    fn written(&self) -> Vec<(PartitionKey, Marker)> {
        let mut w = self.written.lock().unwrap().clone();
        w.sort_by_key(|(p, _)| *p);
        w
    }
}

#[async_trait::async_trait]
impl MarkerWriter for Owners {
    async fn write_marker(&self, p: PartitionKey, m: Marker) -> Result<(), MarkerError> {
        if self.gone.lock().unwrap().contains(&p) {
            return Err(MarkerError::Gone);
        }
        if let Some(n) = self.failing.lock().unwrap().get_mut(&p)
            && *n > 0
        {
            *n -= 1;
            return Err(MarkerError::Failed("owner unreachable (test)".into()));
        }
        self.written.lock().unwrap().push((p, m));
        Ok(())
    }

    async fn durable(
        &self,
        p: PartitionKey,
        _producer: ProducerId,
    ) -> Result<Holding, MarkerError> {
        self.asked.lock().unwrap().push(p);
        if self.gone.lock().unwrap().contains(&p) {
            return Err(MarkerError::Gone);
        }
        if let Some(n) = self.unreachable.lock().unwrap().get_mut(&p)
            && *n > 0
        {
            *n -= 1;
            return Err(MarkerError::Failed("owner unreachable (test)".into()));
        }
        if self.lost.lock().unwrap().contains(&p) {
            return Ok(Holding::NotAll);
        }
        Ok(match self.unproved.lock().unwrap().get(&p) {
            Some(e) => Holding::All {
                follows: false,
                owner_epoch: *e,
            },
            None => Holding::All {
                follows: true,
                owner_epoch: 1,
            },
        })
    }

    /// Every partition at epoch 1 in this broker's view.
    fn owner_epoch(&self, _p: PartitionKey) -> Option<u64> {
        Some(1)
    }
}

struct Setup {
    meta: Arc<Meta>,
    owners: Arc<Owners>,
    holds: Arc<AtomicBool>,
    coord: Arc<TxnCoordinator>,
}

fn setup() -> Setup {
    setup_with(Duration::ZERO)
}

/// [`setup`] with steps held up to `completion_wait` while the previous
/// transaction completes.
fn setup_with(completion_wait: Duration) -> Setup {
    let meta = Meta::new();
    let owners = Arc::new(Owners::default());
    let holds = Arc::new(AtomicBool::new(true));
    let h = holds.clone();
    let coord = TxnCoordinator::new(
        meta.clone(),
        owners.clone(),
        Arc::new(move |_: &ShardFence| h.load(Ordering::SeqCst)),
        TxnConfig {
            max_backoff: Duration::from_millis(20),
            completion_wait,
            ..TxnConfig::default()
        },
    );
    Setup {
        meta,
        owners,
        holds,
        coord,
    }
}

fn tx() -> TransactionalId {
    TransactionalId::new("tx")
}

impl Setup {
    async fn init(&self) -> Result<ProducerIdEpoch, CoordError> {
        self.coord
            .init_producer(self.meta.fence(), &tx(), 60_000, None, 1_000)
            .await
    }

    async fn step(&self, op: TxnOp, now_ms: u64) -> TxnReply {
        let fence = self.meta.fence();
        self.coord.step(fence, &tx(), now_ms, op).await.unwrap()
    }

    async fn ok(&self, op: TxnOp, now_ms: u64) -> TxnMeta {
        let r = self.step(op, now_ms).await;
        assert_eq!(r.refused, None);
        r.txn.unwrap()
    }

    async fn add(&self, p: ProducerIdEpoch, partitions: &[u32], now_ms: u64) {
        let partitions = partitions.iter().map(|i| self.meta.partition(*i)).collect();
        self.ok(
            TxnOp::AddPartitions {
                producer: p,
                partitions,
            },
            now_ms,
        )
        .await;
    }

    /// The next `attempts` markers at partition `p` fail.
    fn fail_markers(&self, p: u32, attempts: usize) {
        self.owners
            .failing
            .lock()
            .unwrap()
            .insert(self.meta.partition(p), attempts);
    }

    /// EndTxn, accepted.
    async fn end(&self, producer: ProducerIdEpoch, commit: bool, now_ms: u64) -> TxnMeta {
        self.ok(TxnOp::End { producer, commit }, now_ms).await
    }

    /// Waits until "tx" is in `state` (for at most 20 s).
    async fn until(&self, state: TxnState) {
        until(&format!("{state:?}"), || self.meta.txn("tx").state == state).await;
    }
}

/// Waits until `f` holds, for at most 20 s.
async fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_commit_writes_a_marker_to_every_partition_then_completes() {
    let s = setup();
    let p = s.init().await.unwrap();
    s.add(p, &[0, 2], 2_000).await;
    let m = s.end(p, true, 3_000).await;
    // Answered once decided; the markers follow.
    assert_eq!(m.state, TxnState::PrepareCommit);
    s.until(TxnState::CompleteCommit).await;
    let marker = Marker {
        producer: p,
        commit: true,
        coordinator_epoch: s.meta.fence().epoch,
    };
    assert_eq!(
        s.owners.written(),
        vec![(s.meta.partition(0), marker), (s.meta.partition(2), marker)]
    );
}

#[tokio::test]
async fn a_marker_that_fails_is_written_again_and_a_deleted_partition_is_skipped() {
    let s = setup();
    let p = s.init().await.unwrap();
    s.add(p, &[0, 1], 2_000).await;
    s.fail_markers(0, 5);
    s.owners.gone.lock().unwrap().insert(s.meta.partition(1));
    s.end(p, false, 3_000).await;
    s.until(TxnState::CompleteAbort).await;
    let w = s.owners.written();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].0, s.meta.partition(0));
    assert!(!w[0].1.commit);
    assert_eq!(s.owners.failing.lock().unwrap()[&s.meta.partition(0)], 0);
}

#[tokio::test]
async fn a_new_instance_waits_for_the_abort_of_the_old_ones_transaction() {
    let s = setup();
    let old = s.init().await.unwrap();
    s.add(old, &[1], 2_000).await;
    // Its markers cannot be written for a while.
    s.fail_markers(1, 3);
    assert_eq!(
        s.init().await,
        Err(CoordError::Txn(TxnError::ConcurrentTransactions))
    );
    // The client asks again until the abort completed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let new = loop {
        match s.init().await {
            Ok(p) => break p,
            Err(CoordError::Txn(TxnError::ConcurrentTransactions)) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the abort never completed"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(new.producer_id, old.producer_id);
    assert_eq!(new.epoch.0, old.epoch.0 + 2);
    let w = s.owners.written();
    assert_eq!(w.len(), 1);
    assert!(!w[0].1.commit);
    assert_eq!(
        w[0].1.producer.epoch.0,
        old.epoch.0 + 1,
        "at the fencing epoch"
    );
    // The old instance is fenced.
    let end = TxnOp::End {
        producer: old,
        commit: true,
    };
    assert_eq!(
        s.step(end, 5_000).await.refused,
        Some(TxnError::ProducerFenced)
    );
}

#[tokio::test]
async fn a_new_coordinator_completes_what_the_old_one_decided() {
    let s = setup();
    let p = s.init().await.unwrap();
    s.add(p, &[0], 2_000).await;
    // The old coordinator decides, and cannot reach the partition before
    // it loses the shard.
    s.fail_markers(0, usize::MAX);
    s.end(p, true, 3_000).await;
    s.holds.store(false, Ordering::SeqCst);
    s.meta.move_shard();
    // The old coordinator gives up at its next failed attempt.
    until("the old coordinator to give up", || {
        s.coord.completing.lock().unwrap().is_empty()
    })
    .await;
    assert_eq!(s.meta.txn("tx").state, TxnState::PrepareCommit);

    // The new one (same process here, the shard's next epoch) takes over.
    s.owners.failing.lock().unwrap().clear();
    s.holds.store(true, Ordering::SeqCst);
    s.coord.resume(s.meta.fence(), s.meta.txns());
    s.until(TxnState::CompleteCommit).await;
    let w = s.owners.written();
    assert_eq!(w.len(), 1);
    assert!(w[0].1.commit);
    assert_eq!(w[0].1.coordinator_epoch, s.meta.fence().epoch);
}

#[tokio::test]
async fn a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let s = setup();
    let p = s.init().await.unwrap();
    s.add(p, &[2], 10_000).await;
    let txns = s.meta.txns();
    assert_eq!(
        s.coord.abort_expired(s.meta.fence(), &txns, 69_999).await,
        0
    );
    assert_eq!(
        s.coord.abort_expired(s.meta.fence(), &txns, 70_000).await,
        1
    );
    s.until(TxnState::CompleteAbort).await;
    let w = s.owners.written();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].1.producer.epoch.0, p.epoch.0 + 1);
    // The same stale view changes nothing the second time.
    assert_eq!(
        s.coord.abort_expired(s.meta.fence(), &txns, 80_000).await,
        0
    );
}

#[tokio::test]
async fn a_coordinator_whose_shard_moved_is_not_the_coordinator() {
    let s = setup();
    let stale = s.meta.fence();
    s.meta.move_shard();
    let r = s
        .coord
        .init_producer(stale, &tx(), 60_000, None, 1_000)
        .await;
    assert_eq!(r, Err(CoordError::NotCoordinator));
    // A timeout above the maximum is the transaction's own error.
    let r = s
        .coord
        .init_producer(s.meta.fence(), &tx(), u32::MAX, None, 1_000)
        .await;
    assert_eq!(r, Err(CoordError::Txn(TxnError::InvalidTransactionTimeout)));
}

#[tokio::test]
async fn the_next_transaction_waits_for_the_markers_of_the_last_instead_of_being_refused() {
    let s = setup_with(Duration::from_secs(20));
    let p = s.init().await.unwrap();
    s.add(p, &[0], 2_000).await;
    // The marker fails a few times (about 10 + 20 + 20 ms of backoff).
    s.fail_markers(0, 3);
    s.end(p, true, 3_000).await;
    // The next transaction's first AddPartitionsToTxn, at once: answered
    // once the commit completed, not CONCURRENT_TRANSACTIONS.
    let next = s
        .ok(
            TxnOp::AddPartitions {
                producer: p,
                partitions: vec![s.meta.partition(1)],
            },
            4_000,
        )
        .await;
    assert_eq!(next.state, TxnState::Ongoing);
    assert_eq!(
        next.partitions.iter().copied().collect::<Vec<_>>(),
        vec![s.meta.partition(1)]
    );
    assert_eq!(s.owners.written().len(), 1, "the commit's marker first");
    // A new instance is held the same way while the old one's transaction
    // is aborted.
    s.fail_markers(1, 3);
    let fresh = s.init().await.unwrap();
    assert_eq!(fresh.epoch.0, p.epoch.0 + 2, "fenced, then bumped");
    let w = s.owners.written();
    assert_eq!(w.len(), 2);
    assert!(!w[1].1.commit);
}

#[tokio::test]
async fn a_held_step_is_answered_concurrent_transactions_when_the_markers_take_too_long() {
    let s = setup_with(Duration::from_millis(100));
    let p = s.init().await.unwrap();
    s.add(p, &[0], 2_000).await;
    s.fail_markers(0, usize::MAX);
    s.end(p, true, 3_000).await;
    let started = tokio::time::Instant::now();
    let r = s
        .step(
            TxnOp::AddPartitions {
                producer: p,
                partitions: vec![s.meta.partition(1)],
            },
            4_000,
        )
        .await;
    assert_eq!(r.refused, Some(TxnError::ConcurrentTransactions));
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "held for the wait first"
    );
    // Once the owner is back, the commit completes.
    s.owners.failing.lock().unwrap().clear();
    s.until(TxnState::CompleteCommit).await;
}

#[tokio::test]
async fn a_commit_is_decided_once_every_partition_holds_the_transaction_durably() {
    let s = setup();
    let p = s.init().await.unwrap();
    s.add(p, &[0, 1], 2_000).await;
    // The owner of partition 1 cannot be reached twice, then answers.
    s.owners
        .unreachable
        .lock()
        .unwrap()
        .insert(s.meta.partition(1), 2);
    let t = s.end(p, true, 3_000).await;
    assert_eq!(t.state, TxnState::PrepareCommit);
    let mut asked = s.owners.asked.lock().unwrap().clone();
    asked.sort();
    assert_eq!(
        asked,
        vec![
            s.meta.partition(0),
            s.meta.partition(1),
            s.meta.partition(1),
            s.meta.partition(1)
        ]
    );
    s.until(TxnState::CompleteCommit).await;
}

#[tokio::test]
async fn a_commit_whose_answered_batches_may_be_lost_must_be_aborted() {
    let s = setup();
    let p = s.init().await.unwrap();
    s.add(p, &[0, 1], 2_000).await;
    s.owners.lost.lock().unwrap().insert(s.meta.partition(1));
    let end = TxnOp::End {
        producer: p,
        commit: true,
    };
    let r = s.coord.step(s.meta.fence(), &tx(), 3_000, end).await;
    assert!(matches!(r, Err(CoordError::Abortable(_))), "{r:?}");
    // Nothing decided: the transaction is still open, for the client to abort.
    assert_eq!(s.meta.txn("tx").state, TxnState::Ongoing);
    assert!(s.owners.written().is_empty());
    // An abort asks nothing of the owners.
    s.owners.asked.lock().unwrap().clear();
    s.end(p, false, 4_000).await;
    s.until(TxnState::CompleteAbort).await;
    assert!(s.owners.asked.lock().unwrap().is_empty());
    let w = s.owners.written();
    assert_eq!(w.len(), 2);
    assert!(w.iter().all(|(_, m)| !m.commit));
}

#[tokio::test]
async fn a_commit_whose_partition_does_not_answer_in_time_is_retried_by_the_client() {
    let meta = Meta::new();
    let owners = Arc::new(Owners::default());
    let coord = TxnCoordinator::new(
        meta.clone(),
        owners.clone(),
        Arc::new(|_: &ShardFence| true),
        TxnConfig {
            max_backoff: Duration::from_millis(20),
            commit_wait: Duration::from_millis(200),
            ..TxnConfig::default()
        },
    );
    let p = coord
        .init_producer(meta.fence(), &tx(), 60_000, None, 1_000)
        .await
        .unwrap();
    let add = TxnOp::AddPartitions {
        producer: p,
        partitions: vec![meta.partition(0)],
    };
    coord.step(meta.fence(), &tx(), 2_000, add).await.unwrap();
    owners
        .unreachable
        .lock()
        .unwrap()
        .insert(meta.partition(0), usize::MAX);
    let end = TxnOp::End {
        producer: p,
        commit: true,
    };
    let r = coord.step(meta.fence(), &tx(), 3_000, end.clone()).await;
    assert_eq!(r, Err(CoordError::Txn(TxnError::ConcurrentTransactions)));
    assert_eq!(meta.txn("tx").state, TxnState::Ongoing);
    // Once the owner answers, the retried EndTxn commits.
    owners.unreachable.lock().unwrap().clear();
    let r = coord.step(meta.fence(), &tx(), 4_000, end).await.unwrap();
    assert_eq!(r.refused, None);
    assert_eq!(r.txn.unwrap().state, TxnState::PrepareCommit);
}

#[tokio::test]
async fn an_unproved_first_batch_commits_only_if_the_partition_kept_its_owner() {
    let s = setup();
    let p = s.init().await.unwrap();
    s.add(p, &[0, 1], 2_000).await;
    // Partition 0's owner is the one the transaction added it at (epoch 1).
    s.owners
        .unproved
        .lock()
        .unwrap()
        .insert(s.meta.partition(0), 1);
    let t = s.end(p, true, 3_000).await;
    assert_eq!(t.state, TxnState::PrepareCommit);
    s.until(TxnState::CompleteCommit).await;
    assert!(
        s.coord.added.lock().unwrap().is_empty(),
        "forgotten once decided"
    );

    // The next transaction: partition 1 changed owner (epoch 2) since.
    s.add(p, &[1], 4_000).await;
    s.owners
        .unproved
        .lock()
        .unwrap()
        .insert(s.meta.partition(1), 2);
    let end = TxnOp::End {
        producer: p,
        commit: true,
    };
    let r = s.coord.step(s.meta.fence(), &tx(), 5_000, end).await;
    assert!(matches!(r, Err(CoordError::Abortable(_))), "{r:?}");
    assert_eq!(s.meta.txn("tx").state, TxnState::Ongoing);
}
