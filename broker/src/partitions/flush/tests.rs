//! The flush against a fake metadata service (the commit rules in a few
//! lines, with knobs for lost answers, moved partitions and deleted topics)
//! and a store pool whose writes can be made to fail.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floe_metadata::MetaError;
use floe_metadata::api::meta_api::{Reply, reply};
use floe_metadata::api::{MetaApi, RouteCall, convert, proto, routes};
use floe_metadata::ids::{BrokerId, Epoch, PartitionKey, TopicId};
use floe_storage::batch::Compression;
use floe_storage::fault::{Fault, FaultHandle, FaultOps, FaultyStore};
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_storage::{EndpointId, PoolOptions, StorePool};
use tokio::sync::oneshot;

mod pipeline;

use super::Flush;
use crate::config::LogConfig;
use crate::error::{ErrorKind, Result};
use crate::partitions::backlog::{Backlog, Held};
use crate::partitions::log::{Appended, Batches, Committed, PartitionLog, Pending, Status};

const ME: BrokerId = BrokerId(1);

/// One partition as the fake metadata holds it.
#[derive(Debug, Clone)]
struct FakePartition {
    owner: BrokerId,
    epoch: Epoch,
    hw: i64,
    /// (first, last, object key, object id)
    entries: Vec<(i64, i64, String, u64)>,
}

#[derive(Debug, Default)]
struct Model {
    partitions: HashMap<PartitionKey, FakePartition>,
    next_object: u64,
    commits_applied: usize,
    /// Commits asked for, applied or refused.
    commit_attempts: usize,
    /// Apply the next commit but answer as if the leader died.
    lose_next_answer: bool,
    /// Apply the next commit, lose its answer, and answer the client's own
    /// retry of it instead (as `MetaClient` retries after a timeout or a
    /// leader change): the broker sees only a refusal.
    retry_inside_client: bool,
    topic_deleted: bool,
}

#[derive(Debug, Default)]
struct FakeMeta(Mutex<Model>);

impl FakeMeta {
    fn with(partitions: &[PartitionKey]) -> Arc<FakeMeta> {
        let m = FakeMeta::default();
        {
            let mut model = m.model();
            for p in partitions {
                model.partitions.insert(
                    *p,
                    FakePartition {
                        owner: ME,
                        epoch: Epoch(1),
                        hw: 0,
                        entries: Vec::new(),
                    },
                );
            }
        }
        Arc::new(m)
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn commit(&self, req: &proto::CommitRequest) -> std::result::Result<Reply, MetaError> {
        let mut m = self.model();
        m.commit_attempts += 1;
        if m.topic_deleted {
            return Err(MetaError::UnknownTopic("t".into()));
        }
        let ranges: Vec<_> = req
            .ranges
            .iter()
            .map(|r| Ok((convert::partition(r.partition.as_ref())?, r)))
            .collect::<std::result::Result<_, MetaError>>()?;
        for (p, r) in &ranges {
            let st = m.partitions.get(p).ok_or(MetaError::UnknownPartition(*p))?;
            if st.epoch.0 != r.epoch || st.owner.0 != req.broker {
                return Err(MetaError::StaleEpoch {
                    partition: *p,
                    current: st.epoch,
                    given: Epoch(r.epoch),
                });
            }
            if st.hw != r.first_offset {
                return Err(MetaError::OffsetMismatch {
                    partition: *p,
                    expected: st.hw,
                    given: r.first_offset,
                });
            }
        }
        m.next_object += 1;
        let id = m.next_object;
        let key = req
            .object
            .as_ref()
            .map(|o| o.key.clone())
            .unwrap_or_default();
        let mut hws = Vec::new();
        for (p, r) in &ranges {
            if let Some(st) = m.partitions.get_mut(p) {
                st.entries
                    .push((r.first_offset, r.last_offset, key.clone(), id));
                st.hw = r.last_offset + 1;
                hws.push(proto::HighWatermark {
                    partition: Some(convert::partition_msg(p)),
                    high_watermark: st.hw,
                });
            }
        }
        m.commits_applied += 1;
        if std::mem::take(&mut m.retry_inside_client) {
            drop(m);
            return self.commit(req);
        }
        if std::mem::take(&mut m.lose_next_answer) {
            return Err(MetaError::Unavailable(
                "the leader died before answering".into(),
            ));
        }
        Ok(reply::<routes::Commit>(proto::CommitResponse {
            object_id: id,
            high_watermarks: hws,
            revision: 7,
        }))
    }

    fn index(&self, req: &proto::IndexRequest) -> std::result::Result<Reply, MetaError> {
        let m = self.model();
        let p = convert::partition(req.partition.as_ref())?;
        if m.topic_deleted {
            return Err(MetaError::UnknownTopic("t".into()));
        }
        let st = m.partitions.get(&p).ok_or(MetaError::UnknownPartition(p))?;
        Ok(reply::<routes::PartitionIndex>(proto::IndexResponse {
            info: Some(proto::PartitionInfo {
                partition: p.partition,
                owner: st.owner.0,
                epoch: st.epoch.0,
                log_start_offset: 0,
                high_watermark: st.hw,
                handover_to: 0,
                stored_bytes: None,
            }),
            entries: st
                .entries
                .iter()
                .filter(|e| e.1 >= req.from_offset)
                .map(|(first, last, key, id)| proto::IndexEntry {
                    first_offset: *first,
                    last_offset: *last,
                    max_timestamp: 0,
                    object_id: *id,
                    object: Some(proto::StoreObject {
                        endpoint: "a".into(),
                        key: key.clone(),
                        size: 1,
                    }),
                    byte_start: 0,
                    byte_len: 1,
                })
                .collect(),
            producers: vec![],
            ..Default::default()
        }))
    }
}

#[async_trait::async_trait]
impl MetaApi for FakeMeta {
    async fn call_route(&self, call: RouteCall) -> std::result::Result<Reply, MetaError> {
        if let Some(req) = call.request::<routes::Commit>() {
            return self.commit(req);
        }
        if let Some(req) = call.request::<routes::PartitionIndex>() {
            return self.index(req);
        }
        Err(MetaError::InvalidRequest(format!(
            "the fake does not serve {}",
            call.path()
        )))
    }
}

fn key(n: u32) -> PartitionKey {
    PartitionKey::new(TopicId(uuid::Uuid::from_u128(7)), n)
}

fn log_of(p: PartitionKey) -> Arc<PartitionLog> {
    Arc::new(PartitionLog::new(
        p,
        "t".into(),
        1,
        LogConfig::default(),
        Committed {
            log_start: 0,
            hw: 0,
            index: Vec::new(),
            producers: Default::default(),
            txns: Default::default(),
        },
    ))
}

fn records(n: usize) -> bytes::Bytes {
    let mut b = BatchBuilder::new(0, 1_000);
    for i in 0..n {
        b.push(RecordSpec::new(
            None,
            Some(format!("v{i}").into_bytes()),
            i as i64,
        ));
    }
    b.build(Compression::None).expect("a batch")
}

/// Appends `n` records with acks=all; returns the receiver of the ack.
fn produce(log: &PartitionLog, n: usize) -> oneshot::Receiver<Result<()>> {
    match log
        .append(&records(n), true, 0, Held::untracked(), false)
        .expect("append")
    {
        Appended::New(_, Some(rx), _) => rx,
        other => panic!("unexpected {other:?}"),
    }
}

fn pool() -> (Arc<StorePool>, FaultHandle) {
    let (store, handle) = FaultyStore::wrap(Arc::new(object_store::memory::InMemory::new()));
    let opts = PoolOptions {
        retry_backoff: Duration::from_millis(1),
        bench_cooldown: Duration::from_millis(1),
        ..PoolOptions::default()
    };
    let pool = StorePool::new(vec![(EndpointId::new("a"), store)], opts).expect("pool");
    (Arc::new(pool), handle)
}

fn flush<'a>(meta: &'a FakeMeta, pool: &'a StorePool) -> Flush<'a> {
    Flush {
        meta,
        pool,
        broker: ME,
        tail_budget: 1 << 20,
        retry_pause: Duration::from_millis(1),
        max_object_bytes: 64 << 20,
    }
}

async fn acked(rx: oneshot::Receiver<Result<()>>) -> Result<()> {
    tokio::time::timeout(Duration::from_secs(5), rx)
        .await
        .expect("the ack came")
        .expect("the waiter was answered")
}

#[tokio::test]
async fn one_object_one_commit_then_every_write_is_acknowledged() {
    let meta = FakeMeta::with(&[key(0), key(1)]);
    let (pool, faults) = pool();
    let (a, b) = (log_of(key(0)), log_of(key(1)));
    let (ra1, ra2, rb) = (produce(&a, 3), produce(&a, 2), produce(&b, 4));
    let done = flush(&meta, &pool)
        .run(vec![a.clone(), b.clone()])
        .await
        .expect("something was flushed");
    assert_eq!(done.committed, 2);
    for rx in [ra1, ra2, rb] {
        acked(rx).await.expect("acknowledged");
    }
    assert_eq!(faults.puts(), 1, "one WAL object");
    {
        let m = meta.model();
        assert_eq!(m.commits_applied, 1, "one commit");
        // The ranges are the WAL entries' offsets, not recomputed.
        assert_eq!(
            m.partitions[&key(0)].entries,
            vec![(0, 4, done.object.key.to_string(), 1)]
        );
        assert_eq!(
            m.partitions[&key(1)].entries,
            vec![(0, 3, done.object.key.to_string(), 1)]
        );
    }
    assert_eq!(a.offsets().2, 5, "the high watermark moved");
    assert!(
        flush(&meta, &pool).run(vec![a, b]).await.is_none(),
        "nothing left"
    );
}

#[tokio::test]
async fn a_commit_whose_answer_was_lost_is_recognised_and_acknowledged_once() {
    let meta = FakeMeta::with(&[key(0), key(1)]);
    meta.model().lose_next_answer = true;
    let (pool, _) = pool();
    let (a, b) = (log_of(key(0)), log_of(key(1)));
    let (ra, rb) = (produce(&a, 2), produce(&b, 2));
    let done = flush(&meta, &pool).run(vec![a.clone(), b.clone()]).await;
    assert_eq!(done.map(|d| d.committed), Some(2));
    acked(ra).await.expect("acknowledged");
    acked(rb).await.expect("acknowledged");
    {
        let m = meta.model();
        assert_eq!(m.commits_applied, 1, "committed once, not again");
        assert_eq!(m.partitions[&key(0)].entries.len(), 1);
    }
    // The partition goes on from there.
    let rx = produce(&a, 1);
    flush(&meta, &pool).run(vec![a.clone()]).await;
    acked(rx).await.expect("the next write too");
    assert_eq!(meta.model().partitions[&key(0)].hw, 3);
}

#[tokio::test]
async fn a_commit_retried_inside_the_client_is_recognised_instead_of_retried_forever() {
    let meta = FakeMeta::with(&[key(0), key(1)]);
    meta.model().retry_inside_client = true;
    let (pool, _) = pool();
    let (a, b) = (log_of(key(0)), log_of(key(1)));
    let (ra, rb) = (produce(&a, 2), produce(&b, 3));
    let done = tokio::time::timeout(
        Duration::from_secs(10),
        flush(&meta, &pool).run(vec![a.clone(), b.clone()]),
    )
    .await
    .expect("the flush ends (it used to retry a landed commit forever)");
    assert_eq!(done.map(|d| d.committed), Some(2));
    acked(ra).await.expect("acknowledged");
    acked(rb).await.expect("acknowledged");
    assert_eq!(meta.model().commits_applied, 1, "committed once");
    assert_eq!(b.offsets().1, 3, "the high watermark moved");
}

#[tokio::test]
async fn a_moved_partition_fails_its_writes_and_the_others_commit() {
    let meta = FakeMeta::with(&[key(0), key(1)]);
    {
        let mut m = meta.model();
        let p = m.partitions.get_mut(&key(0)).expect("p0");
        p.owner = BrokerId(2);
        p.epoch = Epoch(2);
    }
    let (pool, _) = pool();
    let (a, b) = (log_of(key(0)), log_of(key(1)));
    let (ra, rb) = (produce(&a, 2), produce(&b, 2));
    let done = flush(&meta, &pool).run(vec![a.clone(), b.clone()]).await;
    assert_eq!(done.map(|d| d.committed), Some(1));
    let err = acked(ra)
        .await
        .expect_err("the moved partition's write fails");
    assert_eq!(err.kind(), ErrorKind::NotOwner);
    acked(rb)
        .await
        .expect("the other partition's write is acknowledged");
    assert_eq!(a.status(), Status::Gone);
    assert_eq!(b.status(), Status::Active);
    assert!(meta.model().partitions[&key(0)].entries.is_empty());
}

#[tokio::test]
async fn a_deleted_topic_fails_its_writes_as_unknown() {
    let meta = FakeMeta::with(&[key(0)]);
    meta.model().topic_deleted = true;
    let (pool, _) = pool();
    let a = log_of(key(0));
    let ra = produce(&a, 2);
    let done = flush(&meta, &pool).run(vec![a.clone()]).await;
    assert_eq!(done.map(|d| d.committed), Some(0));
    let err = acked(ra).await.expect_err("fails");
    assert_eq!(err.kind(), ErrorKind::UnknownTopicOrPartition);
}

#[tokio::test]
async fn a_failed_store_write_goes_to_a_new_object() {
    let meta = FakeMeta::with(&[key(0)]);
    let (pool, faults) = pool();
    faults.set_times(Fault::Error, FaultOps::Writes, 1);
    let a = log_of(key(0));
    let ra = produce(&a, 2);
    let done = flush(&meta, &pool).run(vec![a]).await.expect("flushed");
    acked(ra).await.expect("acknowledged");
    assert_eq!(faults.faults(), 1);
    assert_eq!(faults.puts(), 2, "written again as a new object");
    let m = meta.model();
    assert_eq!(
        m.partitions[&key(0)].entries[0].2,
        done.object.key.to_string(),
        "the object that landed is committed"
    );
}

#[tokio::test]
async fn batches_the_wal_refuses_fail_alone_and_the_partition_stays_flushable() {
    let meta = FakeMeta::with(&[key(0), key(1)]);
    let (pool, _) = pool();
    let (a, b) = (log_of(key(0)), log_of(key(1)));
    let rb = produce(&b, 2);
    // Batches the WAL refuses, queued as if sequenced at offset 0.
    let (tx, bad) = oneshot::channel();
    {
        let mut st = a.lock();
        st.leo = 3;
        st.unflushed.push(Pending {
            batches: Batches {
                first_offset: 0,
                last_offset: 2,
                max_timestamp: 0,
                // No batch at all: the WAL refuses it.
                stored: Vec::new(),
                len: 18,
                producers: vec![],
                committed_at: None,
            },
            waiter: Some(tx),
            span: tracing::Span::none(),
            held: Held::untracked(),
        });
    }
    let done = flush(&meta, &pool).run(vec![a.clone(), b.clone()]).await;
    assert_eq!(done.map(|d| d.committed), Some(1));
    assert_eq!(
        acked(bad).await.expect_err("refused").kind(),
        ErrorKind::CorruptMessage
    );
    acked(rb).await.expect("the other partition is unaffected");
    // Still ours, back at the committed end, and flushable again.
    assert_eq!(a.status(), Status::Active);
    assert_eq!(
        a.offsets().2,
        0,
        "the log end went back to the committed end"
    );
    let ra = produce(&a, 2);
    flush(&meta, &pool).run(vec![a.clone()]).await;
    acked(ra).await.expect("the next write is acknowledged");
    assert_eq!(meta.model().partitions[&key(0)].entries[0].0, 0);
}

/// Appends `n` records with acks=all, holding their bytes in `backlog`.
fn produce_held(
    log: &PartitionLog,
    backlog: &Arc<Backlog>,
    n: usize,
) -> Option<oneshot::Receiver<Result<()>>> {
    let r = records(n);
    let held = backlog.try_hold(r.len())?;
    match log.append(&r, true, 0, held, false).expect("append") {
        Appended::New(_, Some(rx), _) => Some(rx),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn one_wal_object_takes_at_most_its_bound_and_the_rest_goes_into_the_next() {
    let meta = FakeMeta::with(&[key(0), key(1)]);
    let (pool, faults) = pool();
    let (a, b) = (log_of(key(0)), log_of(key(1)));
    let size = records(3).len();
    // Room for two produces per object.
    let mut f = flush(&meta, &pool);
    f.max_object_bytes = 2 * size;
    let ra: Vec<_> = (0..3).map(|_| produce(&a, 3)).collect();
    let rb: Vec<_> = (0..2).map(|_| produce(&b, 3)).collect();
    let first = f.run(vec![a.clone(), b.clone()]).await.expect("flushed");
    assert_eq!(first.committed, 1, "only the first partition fit");
    assert_eq!(a.offsets().1, 6, "two of its three produces committed");
    assert_eq!(b.offsets().1, 0);
    assert_eq!(a.unflushed_bytes(), size, "the third waits");
    // The next flushes take the rest, each within the bound.
    let mut objects = 1;
    while let Some(done) = f.run(vec![a.clone(), b.clone()]).await {
        assert!(done.committed >= 1);
        objects += 1;
        assert!(objects <= 3, "no more objects than needed");
    }
    assert_eq!(objects, 3);
    assert_eq!(faults.puts(), 3);
    for rx in ra.into_iter().chain(rb) {
        acked(rx).await.expect("every write acknowledged");
    }
    assert_eq!((a.offsets().1, b.offsets().1), (9, 6));
    // Committed in order, each range where the previous one ended.
    let m = meta.model();
    let ends: Vec<_> = m.partitions[&key(0)]
        .entries
        .iter()
        .map(|e| (e.0, e.1))
        .collect();
    assert_eq!(ends, vec![(0, 5), (6, 8)]);
}

#[tokio::test]
async fn a_produce_larger_than_the_bound_goes_alone() {
    let meta = FakeMeta::with(&[key(0)]);
    let (pool, faults) = pool();
    let a = log_of(key(0));
    let mut f = flush(&meta, &pool);
    f.max_object_bytes = 10;
    let (r1, r2) = (produce(&a, 5), produce(&a, 5));
    f.run(vec![a.clone()]).await.expect("the first alone");
    acked(r1).await.expect("acknowledged");
    assert_eq!(a.offsets().1, 5);
    f.run(vec![a.clone()]).await.expect("then the second");
    acked(r2).await.expect("acknowledged");
    assert_eq!(faults.puts(), 2);
}

#[tokio::test]
async fn backlog_bytes_stay_held_while_the_store_fails_and_are_given_back_once_committed() {
    let meta = FakeMeta::with(&[key(0)]);
    let (pool, faults) = pool();
    let a = log_of(key(0));
    let size = records(4).len();
    let backlog = Backlog::new(2 * size);
    let r1 = produce_held(&a, &backlog, 4).expect("room");
    let r2 = produce_held(&a, &backlog, 4).expect("room");
    assert!(
        produce_held(&a, &backlog, 4).is_none(),
        "the cap is reached: no third produce"
    );
    // The store fails a few times: the flush keeps the bytes held.
    faults.set_times(Fault::Error, FaultOps::Writes, 3);
    let (b2, p2) = (backlog.clone(), pool.clone());
    let meta2 = meta.clone();
    let a2 = a.clone();
    let task = tokio::spawn(async move {
        let f = Flush {
            meta: meta2.as_ref(),
            pool: &p2,
            broker: ME,
            tail_budget: 1 << 20,
            retry_pause: Duration::from_millis(1),
            max_object_bytes: 64 << 20,
        };
        let done = f.run(vec![a2]).await;
        (done, b2.bytes())
    });
    let (done, after) = task.await.expect("joined");
    assert_eq!(done.map(|d| d.committed), Some(1));
    assert_eq!(faults.faults(), 3);
    acked(r1).await.expect("acknowledged");
    acked(r2).await.expect("acknowledged");
    assert_eq!(after, 0, "committed bytes are given back");
    assert!(produce_held(&a, &backlog, 4).is_some(), "room again");
}

#[tokio::test]
async fn backlog_bytes_of_failed_writes_are_given_back() {
    let meta = FakeMeta::with(&[key(0)]);
    {
        let mut m = meta.model();
        let p = m.partitions.get_mut(&key(0)).expect("p0");
        p.owner = BrokerId(2);
        p.epoch = Epoch(2);
    }
    let (pool, _) = pool();
    let a = log_of(key(0));
    let backlog = Backlog::new(1 << 20);
    let r1 = produce_held(&a, &backlog, 2).expect("room");
    assert!(backlog.bytes() > 0);
    flush(&meta, &pool).run(vec![a.clone()]).await;
    assert_eq!(
        acked(r1).await.expect_err("moved").kind(),
        ErrorKind::NotOwner
    );
    assert_eq!(backlog.bytes(), 0, "a failed write holds nothing");
    // Queued but never flushed, then the log is closed: given back too.
    let b = log_of(key(1));
    let _r = produce_held(&b, &backlog, 2).expect("room");
    assert!(backlog.bytes() > 0);
    b.close(&crate::error::BrokerError::not_owner(key(1)));
    assert_eq!(backlog.bytes(), 0);
}

/// A pool of two endpoints where `a` hangs: each flush whose write started
/// on `a` is hedged to `b` after the (short) adaptive deadline.
fn pool_with_a_hung_endpoint() -> (
    Arc<StorePool>,
    FaultHandle,
    Arc<object_store::memory::InMemory>,
) {
    let (a, a_faults) = FaultyStore::wrap(Arc::new(object_store::memory::InMemory::new()));
    let b = Arc::new(object_store::memory::InMemory::new());
    a_faults.set(Fault::Hang, FaultOps::Writes);
    let opts = PoolOptions {
        deadline: floe_storage::DeadlinePolicy {
            min: Duration::from_millis(20),
            max: Duration::from_millis(50),
            ..floe_storage::DeadlinePolicy::default()
        },
        write_timeout: Duration::from_secs(2),
        ..PoolOptions::default()
    };
    let pool = StorePool::new(
        vec![
            (
                EndpointId::new("a"),
                a as Arc<dyn object_store::ObjectStore>,
            ),
            (
                EndpointId::new("b"),
                b.clone() as Arc<dyn object_store::ObjectStore>,
            ),
        ],
        opts,
    )
    .expect("pool");
    (Arc::new(pool), a_faults, b)
}

#[tokio::test]
async fn a_hedged_write_is_committed_once_from_the_object_that_landed() {
    let meta = FakeMeta::with(&[key(0), key(1)]);
    let (pool, a_faults, b) = pool_with_a_hung_endpoint();
    let (p0, p1) = (log_of(key(0)), log_of(key(1)));
    let mut acks = Vec::new();
    let mut objects = Vec::new();
    for _ in 0..4 {
        acks.push(produce(&p0, 3));
        acks.push(produce(&p1, 2));
        let done = flush(&meta, &pool)
            .run(vec![p0.clone(), p1.clone()])
            .await
            .expect("flushed");
        assert_eq!(done.committed, 2);
        assert_eq!(done.object.endpoint.as_str(), "b", "landed where it could");
        objects.push(done.object.key.to_string());
    }
    for rx in acks {
        acked(rx).await.expect("acknowledged");
    }
    assert!(a_faults.puts() >= 1, "a write met the hung endpoint");
    assert_eq!(
        pool.stats()[0].hedged,
        a_faults.puts(),
        "{:?}",
        pool.stats()
    );
    {
        let m = meta.model();
        assert_eq!(m.commits_applied, 4, "one commit per flush, none twice");
        for (p, per_flush) in [(key(0), 3), (key(1), 2)] {
            let entries = &m.partitions[&p].entries;
            // No gap, no duplicate: each range starts where the last ended.
            let ranges: Vec<(i64, i64)> = entries.iter().map(|e| (e.0, e.1)).collect();
            let want: Vec<(i64, i64)> = (0..4)
                .map(|i| (i * per_flush, i * per_flush + per_flush - 1))
                .collect();
            assert_eq!(ranges, want);
            // Every committed object is one that landed (on b), one per flush.
            let keys: Vec<&String> = entries.iter().map(|e| &e.2).collect();
            assert_eq!(keys, objects.iter().collect::<Vec<_>>());
        }
    }
    use futures::TryStreamExt;
    use object_store::ObjectStore;
    let on_b: Vec<String> = b
        .list(None)
        .map_ok(|o| o.location.to_string())
        .try_collect()
        .await
        .expect("list");
    assert_eq!(
        on_b.len(),
        4,
        "the hung attempts left nothing on b: {on_b:?}"
    );
}
