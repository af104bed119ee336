//! Several flushes in flight against the fake metadata, on a store whose
//! writes a test holds, releases or fails one by one: the PUTs may land in
//! any order, the commits may not.

use std::collections::HashSet;

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use tokio::sync::watch;

use super::super::pipeline::Pipeline;
use super::*;

/// What the store's writes have done so far, and what the test asks of them.
#[derive(Debug, Default)]
struct GateState {
    /// PUTs begun, numbered from 1 in the order they began, with their keys.
    keys: Vec<String>,
    /// PUTs that have returned, by number.
    done: HashSet<usize>,
    /// PUTs that wait until released, by number.
    held: HashSet<usize>,
    /// PUTs that fail once released, by number.
    failing: HashSet<usize>,
}

/// Controls the writes of every [`GatedStore`] made from it.
#[derive(Debug, Clone)]
struct Gate(Arc<watch::Sender<GateState>>);

impl Gate {
    fn new() -> Self {
        Gate(Arc::new(watch::Sender::new(GateState::default())))
    }

    /// PUT number `n` waits until released (and fails then with `fail`).
    fn hold(&self, n: usize, fail: bool) {
        self.0.send_modify(|s| {
            s.held.insert(n);
            if fail {
                s.failing.insert(n);
            }
        });
    }

    fn release(&self, n: usize) {
        self.0.send_modify(|s| {
            s.held.remove(&n);
        });
    }

    fn begun(&self) -> usize {
        self.0.borrow().keys.len()
    }

    /// The key PUT number `n` wrote to.
    fn key(&self, n: usize) -> String {
        self.0.borrow().keys[n - 1].clone()
    }

    fn is_done(&self, n: usize) -> bool {
        self.0.borrow().done.contains(&n)
    }
}

/// An in-memory store whose PUTs a [`Gate`] controls.
#[derive(Debug)]
struct GatedStore {
    inner: InMemory,
    gate: Gate,
}

impl std::fmt::Display for GatedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GatedStore")
    }
}

#[async_trait]
impl ObjectStore for GatedStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let mut n = 0;
        self.gate.0.send_modify(|s| {
            s.keys.push(location.to_string());
            n = s.keys.len();
        });
        let mut rx = self.gate.0.subscribe();
        let _ = rx.wait_for(|s| !s.held.contains(&n)).await;
        let fail = self.gate.0.borrow().failing.contains(&n);
        let res = if fail {
            Err(object_store::Error::Generic {
                store: "GatedStore",
                source: "the test failed this write".into(),
            })
        } else {
            self.inner.put_opts(location, payload, opts).await
        };
        self.gate.0.send_modify(|s| {
            s.done.insert(n);
        });
        res
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// A pool of two gated endpoints (a failed write goes to the other one).
fn gated_pool() -> (Arc<StorePool>, Gate) {
    let gate = Gate::new();
    let store = |_| -> Arc<dyn ObjectStore> {
        Arc::new(GatedStore {
            inner: InMemory::new(),
            gate: gate.clone(),
        })
    };
    let opts = PoolOptions {
        retry_backoff: Duration::from_millis(1),
        bench_cooldown: Duration::from_millis(1),
        ..PoolOptions::default()
    };
    let pool = StorePool::new(
        vec![
            (EndpointId::new("a"), store(0)),
            (EndpointId::new("b"), store(1)),
        ],
        opts,
    )
    .expect("pool");
    (Arc::new(pool), gate)
}

/// Runs the flushes in flight until `until` holds; none may finish before.
async fn drive_until(pipe: &mut Pipeline<'_>, until: impl Fn() -> bool) {
    let run = async {
        loop {
            if until() {
                return;
            }
            // Polls the flushes once, then lets the other tasks run.
            let step = futures::poll!(pipe.next());
            assert!(step.is_pending(), "no flush may finish yet: {step:?}");
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the store got that far");
}

/// Polls the flushes in flight a few times and checks that none commits.
async fn none_commits(pipe: &mut Pipeline<'_>, meta: &FakeMeta) {
    for _ in 0..20 {
        let step = futures::poll!(pipe.next());
        assert!(step.is_pending(), "no flush may finish yet: {step:?}");
        tokio::task::yield_now().await;
    }
    assert_eq!(meta.model().commit_attempts, 0, "no commit was tried");
}

async fn next_done(pipe: &mut Pipeline<'_>) -> super::super::pipeline::Done {
    tokio::time::timeout(Duration::from_secs(10), pipe.next())
        .await
        .expect("a flush finished")
        .expect("a flush was in flight")
}

fn entries(meta: &FakeMeta, p: PartitionKey) -> Vec<(i64, i64, String)> {
    meta.model().partitions[&p]
        .entries
        .iter()
        .map(|(first, last, key, _)| (*first, *last, key.clone()))
        .collect()
}

#[tokio::test]
async fn a_second_object_that_lands_first_is_committed_after_the_first() {
    let meta = FakeMeta::with(&[key(0), key(1)]);
    let (pool, gate) = gated_pool();
    let f = flush(&meta, &pool);
    let mut pipe = Pipeline::new(&f, 4);
    let (a, b) = (log_of(key(0)), log_of(key(1)));
    gate.hold(1, false);
    let ra1 = produce(&a, 3);
    assert!(pipe.start(vec![a.clone(), b.clone()]), "the first flush");
    drive_until(&mut pipe, || gate.begun() == 1).await;
    // More for the same partition, and for another, while the first is
    // being written: a second object, written at once.
    let (ra2, rb) = (produce(&a, 2), produce(&b, 4));
    assert!(pipe.start(vec![a.clone(), b.clone()]), "the second flush");
    drive_until(&mut pipe, || gate.is_done(2)).await;
    none_commits(&mut pipe, &meta).await;
    assert_eq!(a.offsets().1, 0, "nothing acknowledged out of order");
    assert_eq!(b.offsets().1, 0, "the second object waits as a whole");
    gate.release(1);
    let first = next_done(&mut pipe).await;
    let second = next_done(&mut pipe).await;
    assert_eq!(first.flushed.object.key.to_string(), gate.key(1));
    assert_eq!(second.flushed.object.key.to_string(), gate.key(2));
    assert_eq!((first.flushed.committed, second.flushed.committed), (1, 2));
    for rx in [ra1, ra2, rb] {
        acked(rx).await.expect("acknowledged");
    }
    assert_eq!(
        entries(&meta, key(0)),
        vec![(0, 2, gate.key(1)), (3, 4, gate.key(2))],
        "committed in offset order"
    );
    assert_eq!(meta.model().commit_attempts, 2, "no commit was refused");
    assert_eq!((a.offsets().1, b.offsets().1), (5, 4));
    assert_eq!(a.lock().in_flight, 0);
}

#[tokio::test]
async fn a_failed_first_write_goes_to_a_new_object_and_the_order_holds() {
    let meta = FakeMeta::with(&[key(0)]);
    let (pool, gate) = gated_pool();
    let f = flush(&meta, &pool);
    let mut pipe = Pipeline::new(&f, 4);
    let a = log_of(key(0));
    gate.hold(1, true);
    let r1 = produce(&a, 3);
    assert!(pipe.start(vec![a.clone()]));
    drive_until(&mut pipe, || gate.begun() == 1).await;
    let r2 = produce(&a, 2);
    assert!(pipe.start(vec![a.clone()]));
    drive_until(&mut pipe, || gate.is_done(2)).await;
    none_commits(&mut pipe, &meta).await;
    // The first write fails: its bytes go to a new object (PUT 3), and the
    // second object still waits for it.
    gate.release(1);
    let first = next_done(&mut pipe).await;
    let second = next_done(&mut pipe).await;
    assert_eq!(gate.begun(), 3, "written again as a new object");
    assert_ne!(gate.key(3), gate.key(1), "the failed key is not reused");
    assert_eq!(first.flushed.object.key.to_string(), gate.key(3));
    assert_eq!(second.flushed.object.key.to_string(), gate.key(2));
    acked(r1).await.expect("acknowledged");
    acked(r2).await.expect("acknowledged");
    assert_eq!(
        entries(&meta, key(0)),
        vec![(0, 2, gate.key(3)), (3, 4, gate.key(2))],
        "in order, no gap, the abandoned object not committed"
    );
    assert_eq!(meta.model().commit_attempts, 2);
}

#[tokio::test]
async fn a_partition_found_moved_fails_its_later_ranges_in_flight_too() {
    let meta = FakeMeta::with(&[key(0), key(1)]);
    let (pool, gate) = gated_pool();
    let f = flush(&meta, &pool);
    let mut pipe = Pipeline::new(&f, 4);
    let (a, b) = (log_of(key(0)), log_of(key(1)));
    gate.hold(1, false);
    let (ra1, rb1) = (produce(&a, 2), produce(&b, 2));
    assert!(pipe.start(vec![a.clone(), b.clone()]));
    drive_until(&mut pipe, || gate.begun() == 1).await;
    let (ra2, rb2) = (produce(&a, 2), produce(&b, 2));
    assert!(pipe.start(vec![a.clone(), b.clone()]));
    drive_until(&mut pipe, || gate.is_done(2)).await;
    // The controller moves the first partition while both are in flight.
    {
        let mut m = meta.model();
        let p = m.partitions.get_mut(&key(0)).expect("p0");
        p.owner = BrokerId(2);
        p.epoch = Epoch(2);
    }
    gate.release(1);
    let first = next_done(&mut pipe).await;
    let second = next_done(&mut pipe).await;
    assert_eq!((first.flushed.committed, second.flushed.committed), (1, 1));
    for rx in [ra1, ra2] {
        let err = acked(rx)
            .await
            .expect_err("the moved partition's writes fail");
        assert_eq!(err.kind(), ErrorKind::NotOwner, "{err}");
    }
    acked(rb1)
        .await
        .expect("the other partition is acknowledged");
    acked(rb2)
        .await
        .expect("the other partition is acknowledged");
    assert_eq!(a.status(), Status::Gone);
    assert_eq!(
        a.lock().in_flight,
        0,
        "both of its flushes are done with it"
    );
    assert!(entries(&meta, key(0)).is_empty());
    assert_eq!(
        entries(&meta, key(1))
            .iter()
            .map(|e| (e.0, e.1))
            .collect::<Vec<_>>(),
        vec![(0, 1), (2, 3)]
    );
    assert_eq!(
        meta.model().commit_attempts,
        3,
        "one refusal: the second flush does not try the moved partition again"
    );
}

#[tokio::test]
async fn a_deleted_topic_fails_every_range_in_flight_as_unknown() {
    let meta = FakeMeta::with(&[key(0)]);
    let (pool, gate) = gated_pool();
    let f = flush(&meta, &pool);
    let mut pipe = Pipeline::new(&f, 4);
    let a = log_of(key(0));
    gate.hold(1, false);
    let r1 = produce(&a, 2);
    assert!(pipe.start(vec![a.clone()]));
    drive_until(&mut pipe, || gate.begun() == 1).await;
    let r2 = produce(&a, 2);
    assert!(pipe.start(vec![a.clone()]));
    drive_until(&mut pipe, || gate.is_done(2)).await;
    meta.model().topic_deleted = true;
    gate.release(1);
    next_done(&mut pipe).await;
    next_done(&mut pipe).await;
    for rx in [r1, r2] {
        let err = acked(rx).await.expect_err("fails");
        assert_eq!(err.kind(), ErrorKind::UnknownTopicOrPartition, "{err}");
    }
    assert_eq!(meta.model().commit_attempts, 1);
}

#[tokio::test]
async fn batches_the_wal_refuses_behind_a_range_in_flight_roll_back_to_its_end() {
    let meta = FakeMeta::with(&[key(0)]);
    let (pool, gate) = gated_pool();
    let f = flush(&meta, &pool);
    let mut pipe = Pipeline::new(&f, 4);
    let a = log_of(key(0));
    gate.hold(1, false);
    let r1 = produce(&a, 3);
    assert!(pipe.start(vec![a.clone()]));
    drive_until(&mut pipe, || gate.begun() == 1).await;
    // Batches the WAL refuses, queued as if sequenced at 3..=5.
    let (tx, bad) = oneshot::channel();
    {
        let mut st = a.lock();
        st.leo = 6;
        st.unflushed.push(Pending {
            batches: Batches {
                first_offset: 3,
                last_offset: 5,
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
    assert!(!pipe.start(vec![a.clone()]), "nothing left to write");
    assert_eq!(
        acked(bad).await.expect_err("refused").kind(),
        ErrorKind::CorruptMessage
    );
    assert_eq!(
        a.offsets().2,
        3,
        "the log end goes back to the end of the range in flight, not the committed end"
    );
    let r2 = produce(&a, 2);
    assert!(pipe.start(vec![a.clone()]));
    gate.release(1);
    next_done(&mut pipe).await;
    next_done(&mut pipe).await;
    acked(r1).await.expect("acknowledged");
    acked(r2).await.expect("acknowledged");
    assert_eq!(
        entries(&meta, key(0))
            .iter()
            .map(|e| (e.0, e.1))
            .collect::<Vec<_>>(),
        vec![(0, 2), (3, 4)]
    );
}

#[tokio::test]
async fn at_most_the_set_number_of_flushes_are_in_flight() {
    let meta = FakeMeta::with(&[key(0)]);
    let (pool, gate) = gated_pool();
    let f = flush(&meta, &pool);
    let mut pipe = Pipeline::new(&f, 2);
    let a = log_of(key(0));
    gate.hold(1, false);
    gate.hold(2, false);
    let mut acks = Vec::new();
    for n in 1..=2 {
        acks.push(produce(&a, 1));
        assert!(pipe.start(vec![a.clone()]));
        drive_until(&mut pipe, || gate.begun() == n).await;
    }
    acks.push(produce(&a, 1));
    assert!(!pipe.has_room());
    assert!(!pipe.start(vec![a.clone()]), "full: the third waits");
    assert_eq!(a.unflushed_bytes(), records(1).len(), "still queued");
    gate.release(1);
    next_done(&mut pipe).await;
    assert!(pipe.start(vec![a.clone()]), "room again");
    gate.release(2);
    while pipe.next().await.is_some() {}
    for rx in acks {
        acked(rx).await.expect("acknowledged");
    }
    assert_eq!(a.offsets().1, 3);
}

#[tokio::test]
async fn with_a_flush_in_flight_another_starts_only_for_a_whole_object() {
    let meta = FakeMeta::with(&[key(0)]);
    let (pool, gate) = gated_pool();
    let f = flush(&meta, &pool);
    let mut pipe = Pipeline::new(&f, 3);
    let a = log_of(key(0));
    let object = 4 * records(1).len();
    assert!(!pipe.may_start(false, 0, object), "nothing asked, none due");
    assert!(
        pipe.may_start(true, 0, object),
        "none in flight: when asked or due"
    );
    gate.hold(1, false);
    let first = produce(&a, 1);
    assert!(pipe.start(vec![a.clone()]));
    drive_until(&mut pipe, || gate.begun() == 1).await;
    let in_flight = pipe.bytes();
    assert!(
        in_flight >= records(1).len(),
        "its object counted: {in_flight}"
    );
    // A light load waits for the flush in flight, even when asked or due.
    assert!(!pipe.may_start(true, in_flight + object - 1, object));
    // A whole object waiting starts the next one beside it.
    assert!(pipe.may_start(false, in_flight + object, object));
    gate.hold(2, false);
    let second = produce(&a, 4);
    assert!(pipe.start(vec![a.clone()]));
    drive_until(&mut pipe, || gate.begun() == 2).await;
    assert!(pipe.bytes() > in_flight);
    gate.release(1);
    gate.release(2);
    while pipe.next().await.is_some() {}
    assert_eq!(pipe.bytes(), 0, "given back as they commit");
    acked(first).await.expect("acknowledged");
    acked(second).await.expect("acknowledged");
}
