#![allow(clippy::unwrap_used)]

use std::sync::Mutex;

use floe_storage::batch::Compression;
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_types::TopicId;

use super::*;
use crate::error::BrokerError;
use crate::partitions::{Acks, FetchData, OffsetAnswer, PendingProduce};
use crate::share::partition::{AckType, DurableState, ShareSnapshot};
use crate::share::timers::{TimerRef, TimerStore, TimerStoreError};

/// A log of batches of 3 records each, from `start` (the log start) up.
#[derive(Debug)]
struct FakeLog {
    start: Mutex<i64>,
    batches: Vec<(i64, Bytes)>,
    /// The share store: epoch owned, and what was written.
    epoch: Mutex<Option<u64>>,
    saved: Mutex<HashMap<String, (u64, ShareSnapshot)>>,
    /// What ListOffsets by timestamp answers (−1: no record that recent).
    by_time: Mutex<i64>,
    /// Writes of the share store, and a gate that holds them while a
    /// test holds it for writing.
    writes: std::sync::atomic::AtomicUsize,
    hold_writes: tokio::sync::RwLock<()>,
    /// Timer buckets by token, and whether the store fails.
    objects: Mutex<HashMap<String, Bytes>>,
    timers_fail: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl TimerStore for FakeLog {
    async fn put_timers(
        &self,
        _: &str,
        _: &PartitionKey,
        bytes: Bytes,
    ) -> Result<TimerRef, TimerStoreError> {
        if self.timers_fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(TimerStoreError::Failed("down".into()));
        }
        let token = uuid::Uuid::new_v4().simple().to_string();
        let size = bytes.len() as u64;
        self.objects.lock().unwrap().insert(token.clone(), bytes);
        Ok(TimerRef {
            endpoint: floe_storage::EndpointId::new("default"),
            token: Arc::from(token.as_str()),
            size,
        })
    }

    async fn read_timers(
        &self,
        _: &str,
        _: &PartitionKey,
        object: &TimerRef,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes, TimerStoreError> {
        if self.timers_fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(TimerStoreError::Failed("down".into()));
        }
        let objects = self.objects.lock().unwrap();
        let b = objects
            .get(&*object.token)
            .ok_or_else(|| TimerStoreError::Lost("no such bucket".into()))?;
        Ok(b.slice(range.start as usize..range.end as usize))
    }

    async fn delete_timers(
        &self,
        _: &str,
        _: &PartitionKey,
        object: &TimerRef,
    ) -> Result<(), TimerStoreError> {
        self.objects.lock().unwrap().remove(&*object.token);
        Ok(())
    }

    async fn list_timers(
        &self,
        _: &str,
        _: &PartitionKey,
    ) -> Result<Vec<TimerRef>, TimerStoreError> {
        Ok(self
            .objects
            .lock()
            .unwrap()
            .iter()
            .map(|(t, b)| TimerRef {
                endpoint: floe_storage::EndpointId::new("default"),
                token: Arc::from(t.as_str()),
                size: b.len() as u64,
            })
            .collect())
    }
}

#[async_trait::async_trait]
impl ShareStore for FakeLog {
    fn owned_epoch(&self, _: &PartitionKey) -> Option<u64> {
        *self.epoch.lock().unwrap()
    }

    async fn load(
        &self,
        group: &str,
        _: &PartitionKey,
    ) -> Result<Option<ShareSnapshot>, CallError> {
        Ok(self
            .saved
            .lock()
            .unwrap()
            .get(group)
            .map(|(_, s)| s.clone()))
    }

    async fn save(
        &self,
        group: &str,
        key: &PartitionKey,
        epoch: u64,
        snapshot: &ShareSnapshot,
    ) -> Result<(), CallError> {
        let _open = self.hold_writes.read().await;
        if Some(epoch) != *self.epoch.lock().unwrap() {
            return Err(BrokerError::not_owner(*key).into());
        }
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.saved
            .lock()
            .unwrap()
            .insert(group.to_owned(), (epoch, snapshot.clone()));
        Ok(())
    }

    async fn forget(&self, group: &str, _: &PartitionKey, _: u64) -> Result<(), CallError> {
        self.saved.lock().unwrap().remove(group);
        Ok(())
    }
}

impl FakeLog {
    fn new(batches: i64) -> Self {
        let batches = (0..batches)
            .map(|b| {
                let mut builder = BatchBuilder::new(b * 3, 1_700_000_000_000);
                for i in 0..3 {
                    builder.push(RecordSpec::new(None, Some(vec![i as u8]), 0));
                }
                (b * 3, builder.build(Compression::None).unwrap())
            })
            .collect();
        Self {
            start: Mutex::new(0),
            batches,
            epoch: Mutex::new(Some(1)),
            saved: Mutex::new(HashMap::new()),
            by_time: Mutex::new(-1),
            writes: Default::default(),
            hold_writes: Default::default(),
            objects: Default::default(),
            timers_fail: Default::default(),
        }
    }

    /// One batch per entry of `batches`, records with these headers.
    fn with_headers(batches: &[Vec<Vec<(&str, String)>>]) -> Self {
        let mut base = 0;
        let mut out = Vec::new();
        for recs in batches {
            let mut builder = BatchBuilder::new(base, 1_700_000_000_000);
            for headers in recs {
                let mut r = RecordSpec::new(None, Some(b"v".to_vec()), 0);
                r.headers = headers
                    .iter()
                    .map(|(k, v)| (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec())))
                    .collect();
                builder.push(r);
            }
            out.push((base, builder.build(Compression::Lz4).unwrap()));
            base += recs.len() as i64;
        }
        Self {
            batches: out,
            ..Self::new(0)
        }
    }

    fn hw(&self) -> i64 {
        self.batches.last().map_or(0, |(base, b)| {
            let view = floe_storage::batch::BatchView::parse(b, b.len()).unwrap();
            base + i64::from(view.last_offset_delta()) + 1
        })
    }
}

#[async_trait::async_trait]
impl PartitionOwner for FakeLog {
    async fn append(
        &self,
        _: &PartitionKey,
        _: Bytes,
        _: Acks,
        _: std::time::Duration,
    ) -> Result<PendingProduce, CallError> {
        Err(BrokerError::new(ErrorKind::InvalidRequest, "read only").into())
    }

    async fn fetch_isolated(
        &self,
        _: &PartitionKey,
        offset: i64,
        max_bytes: usize,
        _: Option<u64>,
        _: bool,
    ) -> Result<FetchData, CallError> {
        let start = *self.start.lock().unwrap();
        if offset < start || offset > self.hw() {
            return Err(BrokerError::new(ErrorKind::OffsetOutOfRange, "out").into());
        }
        let mut records: Vec<Bytes> = Vec::new();
        let mut size = 0;
        for (i, (_, b)) in self.batches.iter().enumerate() {
            let next = self.batches.get(i + 1).map_or(self.hw(), |(n, _)| *n);
            if next <= offset || (!records.is_empty() && size + b.len() > max_bytes) {
                continue;
            }
            size += b.len();
            records.push(b.clone());
        }
        Ok(FetchData {
            high_watermark: self.hw(),
            log_start_offset: start,
            records,
            last_stable_offset: self.hw(),
            aborted: Vec::new(),
        })
    }

    async fn producers(
        &self,
        _: &PartitionKey,
    ) -> Result<Vec<crate::partitions::ProducerInfo>, CallError> {
        Ok(Vec::new())
    }

    async fn wait_for_data(&self, _: &PartitionKey, _: i64, _: tokio::time::Instant) {}

    async fn list_offset(
        &self,
        _: &PartitionKey,
        spec: OffsetSpec,
        _: Option<u64>,
    ) -> Result<(OffsetAnswer, i64), CallError> {
        let offset = match spec {
            OffsetSpec::Earliest => *self.start.lock().unwrap(),
            OffsetSpec::Timestamp(_) => *self.by_time.lock().unwrap(),
            _ => self.hw(),
        };
        Ok((
            OffsetAnswer {
                offset,
                timestamp: -1,
            },
            0,
        ))
    }

    async fn delete_records(&self, _: &PartitionKey, offset: i64) -> Result<i64, CallError> {
        *self.start.lock().unwrap() = offset;
        Ok(offset)
    }
}

fn service() -> ShareService {
    ShareService::new(ShareConfig::default(), ShareGroupConfig::default())
}

fn settings(reset: AutoOffsetReset) -> ShareSettings {
    ShareSettings { reset, ..EARLIEST }
}

const EARLIEST: ShareSettings = ShareSettings {
    lock_duration_ms: 30_000,
    reset: AutoOffsetReset::Earliest,
    delivery_count_limit: 0,
    heartbeat_interval_ms: None,
    session_timeout_ms: None,
    filter: None,
    read_committed: false,
    backoff: Backoff {
        base_ms: 0,
        max_ms: 0,
    },
    dead_letter_topic: None,
};

fn key() -> PartitionKey {
    PartitionKey::new(TopicId(uuid::Uuid::nil()), 0)
}

fn member() -> MemberId {
    MemberId::new("m")
}

#[tokio::test]
async fn a_fetch_acquires_only_what_the_batches_it_read_hold() {
    let log = FakeLog::new(4);
    let svc = service();
    // One byte allowed: one whole batch is read, so three records.
    let f = svc
        .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1)
        .await
        .unwrap();
    assert_eq!(f.acquired.len(), 1);
    assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (0, 2));
    assert_eq!(end_of_batches(&f.records), Some(3));
    // The rest, up to max_records.
    let f = svc
        .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 4, 1 << 20)
        .await
        .unwrap();
    assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (3, 6));
    // A release comes back first, with its delivery count.
    ack(&svc, &log, &EARLIEST, 1, 1, AckType::Release).await;
    let f = svc
        .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 1, 1 << 20)
        .await
        .unwrap();
    assert_eq!(
        (f.acquired[0].first.0, f.acquired[0].delivery_count),
        (1, 2)
    );
}

/// Acknowledgements that arrive while the share-partition's state is
/// being written are written together by the next write: three
/// acknowledgements, two writes, and every one of them durable.
#[tokio::test]
async fn acknowledgements_queued_behind_a_write_share_the_next_one() {
    use std::sync::atomic::Ordering::SeqCst;
    let log = FakeLog::new(3);
    let svc = service();
    svc.fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 9, 1 << 20)
        .await
        .unwrap();
    let before = log.writes.load(SeqCst);
    let gate = log.hold_writes.write().await;
    let first = ack(&svc, &log, &EARLIEST, 0, 2, AckType::Accept);
    let second = ack(&svc, &log, &EARLIEST, 3, 5, AckType::Accept);
    let third = ack(&svc, &log, &EARLIEST, 6, 8, AckType::Accept);
    let all = async {
        tokio::join!(first, second, third);
    };
    let open = async {
        // Every acknowledgement applied and waiting for a write.
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        drop(gate);
    };
    tokio::join!(all, open);
    assert_eq!(log.writes.load(SeqCst) - before, 2);
    assert_eq!(log.saved.lock().unwrap()["g"].1.start, Offset(9));
}

#[tokio::test]
async fn a_new_share_partition_starts_at_the_reset_offset() {
    let log = FakeLog::new(2);
    let svc = service();
    let latest = settings(AutoOffsetReset::Latest);
    let f = svc
        .fetch(&log, &log, &latest, "g", &key(), &member(), 100, 1 << 20)
        .await
        .unwrap();
    assert!(f.acquired.is_empty());
    assert!(f.records.is_empty());
    let partitions = lock(&svc.partitions);
    let held = partitions.get(&("g".to_owned(), key())).unwrap();
    assert_eq!(held.sp.start_offset(), Offset(6));
    // Written at once: a new owner starts there too.
    assert_eq!(log.saved.lock().unwrap()["g"].1.start, Offset(6));
}

#[tokio::test]
async fn a_share_partition_behind_the_log_start_moves_to_it() {
    let log = FakeLog::new(4);
    let svc = service();
    svc.fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 2, 1 << 20)
        .await
        .unwrap();
    svc.release_member("g", &member());
    log.delete_records(&key(), 6).await.unwrap();
    // The first read fails on the log start and moves the share-partition.
    let f = svc
        .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1 << 20)
        .await
        .unwrap();
    assert!(f.acquired.is_empty());
    let f = svc
        .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1 << 20)
        .await
        .unwrap();
    assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (6, 11));
    let snap = lock(&svc.partitions)
        .get(&("g".to_owned(), key()))
        .unwrap()
        .sp
        .snapshot();
    assert_eq!(snap.start, Offset(6));
    assert!(
        snap.ranges
            .iter()
            .all(|r| r.state == DurableState::Available { not_before_ms: 0 })
    );
}

#[tokio::test]
async fn acknowledging_where_nothing_was_acquired_is_refused() {
    let log = FakeLog::new(1);
    let svc = service();
    let ack = |batches: Vec<AckBatch>| {
        let (svc, log) = (&svc, &log);
        async move {
            svc.acknowledge(log, log, &EARLIEST, "g", &key(), &member(), &batches)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        ack(vec![AckBatch::all(0, 0, AckType::Accept)]).await,
        Err(ShareError::InvalidRecordState { offset: Offset(0) })
    );
    assert_eq!(ack(vec![]).await, Ok(()));
    // Only where the share-partition starts was written.
    let saved = log.saved.lock().unwrap()["g"].1.clone();
    assert_eq!((saved.start, saved.ranges.len()), (Offset(0), 0));
}

#[tokio::test]
async fn a_new_owner_resumes_from_what_acknowledgements_wrote() {
    let log = FakeLog::new(3);
    let svc = service();
    let f = svc
        .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 6, 1 << 20)
        .await
        .unwrap();
    assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (0, 5));
    svc.acknowledge(
        &log,
        &log,
        &EARLIEST,
        "g",
        &key(),
        &member(),
        &[
            AckBatch::all(0, 1, AckType::Accept),
            AckBatch::all(3, 3, AckType::Accept),
        ],
    )
    .await
    .unwrap()
    .unwrap();
    // The partition moves (a new epoch): another broker, or this one
    // again, loads what was written.
    *log.epoch.lock().unwrap() = Some(2);
    let other = service();
    let f = other
        .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1 << 20)
        .await
        .unwrap();
    // 0, 1 and 3 were accepted: never again; 2, 4, 5 come back with
    // their delivery count, then the records never acquired.
    let got: Vec<(i64, i64, u16)> = f
        .acquired
        .iter()
        .map(|a| (a.first.0, a.last.0, a.delivery_count))
        .collect();
    assert_eq!(got, vec![(2, 2, 2), (4, 5, 2), (6, 8, 1)]);
    // The old owner's next acknowledgement is refused, not answered.
    let stale = svc
        .acknowledge(
            &log,
            &log,
            &EARLIEST,
            "g",
            &key(),
            &member(),
            &[AckBatch::all(2, 2, AckType::Accept)],
        )
        .await;
    assert!(stale.is_ok_and(|r| r.is_err()));
    *log.epoch.lock().unwrap() = None;
    assert!(
        other
            .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 1, 1)
            .await
            .is_err()
    );
}

fn offsets(f: &ShareFetched) -> Vec<i64> {
    f.acquired
        .iter()
        .flat_map(|a| a.first.0..=a.last.0)
        .collect()
}

#[tokio::test]
async fn a_groups_filter_archives_what_it_refuses_and_other_groups_see_everything() {
    let tag = |t: &str| vec![("floe-tag", t.to_owned())];
    let log = FakeLog::with_headers(&[
        vec![tag("A"), tag("B"), vec![]],
        vec![tag("A"), vec![("region", "eu".to_owned())], tag("C")],
    ]);
    let svc = service();
    let only_a = ShareSettings {
        filter: Some(Arc::new(RecordFilter::parse("A || region=eu").unwrap())),
        ..EARLIEST
    };
    let f = svc
        .fetch(
            &log,
            &log,
            &only_a,
            "tagged",
            &key(),
            &member(),
            100,
            1 << 20,
        )
        .await
        .unwrap();
    assert_eq!(offsets(&f), vec![0, 3, 4]);
    let f = svc
        .fetch(
            &log,
            &log,
            &EARLIEST,
            "all",
            &key(),
            &member(),
            100,
            1 << 20,
        )
        .await
        .unwrap();
    assert_eq!(offsets(&f), vec![0, 1, 2, 3, 4, 5]);
    // Once the tagged group accepts its records, its start is past the
    // filtered ones too.
    svc.acknowledge(
        &log,
        &log,
        &only_a,
        "tagged",
        &key(),
        &member(),
        &[
            AckBatch::all(0, 0, AckType::Accept),
            AckBatch::all(3, 4, AckType::Accept),
        ],
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(log.saved.lock().unwrap()["tagged"].1.start, Offset(6));
}

#[tokio::test]
async fn a_delayed_record_waits_for_its_time_across_a_new_owner() {
    let due = now_ms() + 600;
    let log = FakeLog::with_headers(&[vec![
        vec![],
        vec![("floe-deliver-at", due.to_string())],
        vec![("floe-delay-ms", "abc".to_owned())],
    ]]);
    let svc = service();
    let f = svc
        .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1 << 20)
        .await
        .unwrap();
    // The malformed delay is delivered at once; 1 waits.
    assert_eq!(offsets(&f), vec![0, 2]);
    svc.acknowledge(
        &log,
        &log,
        &EARLIEST,
        "g",
        &key(),
        &member(),
        &[AckBatch {
            first: Offset(0),
            last: Offset(2),
            types: vec![AckType::Accept, AckType::Gap, AckType::Accept],
        }],
    )
    .await
    .unwrap()
    .unwrap_err();
    svc.acknowledge(
        &log,
        &log,
        &EARLIEST,
        "g",
        &key(),
        &member(),
        &[
            AckBatch::all(0, 0, AckType::Accept),
            AckBatch::all(2, 2, AckType::Accept),
        ],
    )
    .await
    .unwrap()
    .unwrap();
    // Written: the start past it, and it parked with its due time.
    let saved = log.saved.lock().unwrap()["g"].1.clone();
    assert_eq!(saved.start, Offset(3));
    assert_eq!(
        saved.parked[0].state,
        DurableState::Available { not_before_ms: due }
    );
    // A new owner: nothing before its time, and told when to look again.
    *log.epoch.lock().unwrap() = Some(2);
    let other = service();
    let f = other
        .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1 << 20)
        .await
        .unwrap();
    assert!(f.acquired.is_empty());
    let wait = f.retry_in_ms.unwrap();
    assert!(wait > 0 && wait <= 600, "{wait}");
    tokio::time::sleep(std::time::Duration::from_millis(wait + 5)).await;
    let f = other
        .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 100, 1 << 20)
        .await
        .unwrap();
    assert_eq!(offsets(&f), vec![1]);
    assert!(now_ms() >= due);
}

/// A service whose share-partitions park 8 delayed records at most.
fn small_parked() -> ShareService {
    ShareService::new(
        ShareConfig {
            max_delayed: 8,
            ..ShareConfig::default()
        },
        ShareGroupConfig::default(),
    )
}

/// Fetches and accepts what is acquired, doing the timer work the
/// broker would start after each fetch; returns the offsets accepted.
async fn fetch_accept(svc: &ShareService, log: &FakeLog) -> Vec<i64> {
    let f = svc
        .fetch(log, log, &EARLIEST, "g", &key(), &member(), 1_000, 1 << 20)
        .await
        .unwrap();
    let got = offsets(&f);
    for o in &got {
        svc.acknowledge(
            log,
            log,
            &EARLIEST,
            "g",
            &key(),
            &member(),
            &[AckBatch::all(*o, *o, AckType::Accept)],
        )
        .await
        .unwrap()
        .unwrap();
    }
    if let Some(claim) = svc.claim_timer_work("g", &key()) {
        svc.run_timers(log, "g", &key(), claim).await;
    }
    got
}

#[tokio::test]
async fn delayed_records_past_the_parked_list_go_to_timer_buckets_and_come_back_when_due() {
    // 40 records, due in reverse order of their offsets, 20 to 800 ms
    // from now; then 5 plain records behind them.
    let base = now_ms() + 300;
    let mut recs: Vec<Vec<(&str, String)>> = (0..40)
        .map(|i| vec![("floe-deliver-at", (base + 20 * (40 - i)).to_string())])
        .collect();
    recs.extend((0..5).map(|_| vec![]));
    let log = FakeLog::with_headers(&[recs]);
    let svc = small_parked();
    // The plain records behind the backlog are not held up.
    let mut got = Vec::new();
    for _ in 0..10 {
        got.extend(fetch_accept(&svc, &log).await);
        if got.len() >= 5 {
            break;
        }
    }
    assert_eq!(got, vec![40, 41, 42, 43, 44]);
    // The parked list holds at most its cap; the rest is in buckets.
    let saved = log.saved.lock().unwrap()["g"].1.clone();
    let parked: i64 = saved.parked.iter().map(|r| r.last.0 - r.first.0 + 1).sum();
    assert!(parked <= 8, "{parked} parked");
    assert!(!saved.timers.is_empty(), "{saved:?}");
    assert_eq!(saved.start, Offset(45));
    assert!(!log.objects.lock().unwrap().is_empty());
    // Kill the owner halfway: a new one resumes from what was written.
    let mut delivered: Vec<(i64, u64)> = Vec::new();
    // The offsets each fetch handed out.
    let mut rounds: Vec<Vec<i64>> = Vec::new();
    let mut svc = svc;
    let mut moved = false;
    let deadline = now_ms() + 5_000;
    while delivered.len() < 40 && now_ms() < deadline {
        let round = fetch_accept(&svc, &log).await;
        for &o in &round {
            delivered.push((o, now_ms()));
        }
        if !round.is_empty() {
            rounds.push(round);
        }
        if !moved && delivered.len() >= 15 {
            moved = true;
            *log.epoch.lock().unwrap() = Some(2);
            svc = small_parked();
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let mut offsets: Vec<i64> = delivered.iter().map(|(o, _)| *o).collect();
    offsets.sort_unstable();
    assert_eq!(offsets, (0..40).collect::<Vec<_>>(), "each once");
    for (o, at) in &delivered {
        let due = base + 20 * (40 - *o as u64);
        assert!(*at >= due, "offset {o} delivered {} ms early", due - at);
    }
    // Delivered in due order: a fetch hands out the records due by then
    // together (in offset order; on a loaded machine several fall due
    // between two polls), and no fetch hands out a record due later
    // than one a later fetch hands out (a larger offset is due sooner).
    for pair in rounds.windows(2) {
        let (earlier, later) = (&pair[0], &pair[1]);
        assert!(
            earlier.iter().min() > later.iter().max(),
            "{earlier:?} delivered before {later:?}, which was due sooner"
        );
    }
    // Emptied buckets are deleted (the last ones once a state without
    // them is written, by the next timer task).
    fetch_accept(&svc, &log).await;
    let saved = log.saved.lock().unwrap()["g"].1.clone();
    assert!(saved.timers.is_empty(), "{saved:?}");
    assert!(log.objects.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_timer_store_that_fails_keeps_the_records_parked_and_tries_again() {
    let base = now_ms() + 60_000;
    let recs: Vec<Vec<(&str, String)>> = (0..12)
        .map(|i| vec![("floe-deliver-at", (base + i).to_string())])
        .collect();
    let log = FakeLog::with_headers(&[recs]);
    log.timers_fail
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let svc = small_parked();
    fetch_accept(&svc, &log).await;
    // Nothing written out: 8 parked, 4 wait in the window.
    assert!(log.objects.lock().unwrap().is_empty());
    assert!(
        lock(&svc.partitions)[&("g".to_owned(), key())]
            .timers
            .retry_at_ms
            > 0
    );
    assert!(
        svc.claim_timer_work("g", &key()).is_none(),
        "waits a second"
    );
    let held = |svc: &ShareService| {
        let p = lock(&svc.partitions);
        let h = &p[&("g".to_owned(), key())];
        (h.sp.parked(), h.sp.in_flight())
    };
    assert_eq!(held(&svc), (8, 4));
    log.timers_fail
        .store(false, std::sync::atomic::Ordering::SeqCst);
    lock(&svc.partitions)
        .get_mut(&("g".to_owned(), key()))
        .unwrap()
        .timers
        .retry_at_ms = 0;
    fetch_accept(&svc, &log).await;
    // Written out, and the records waiting in the window moved to the
    // room made in the parked list.
    assert!(!log.objects.lock().unwrap().is_empty());
    let (parked, in_flight) = held(&svc);
    assert!(parked <= 8 && in_flight == 0, "{parked} {in_flight}");
}

#[tokio::test]
async fn a_fetch_behind_a_seal_looks_again_soon_and_takes_more_records_in() {
    // 30 records due in a minute, then one plain record.
    let base = now_ms() + 60_000;
    let mut recs: Vec<Vec<(&str, String)>> = (0..30)
        .map(|i| vec![("floe-deliver-at", (base + i).to_string())])
        .collect();
    recs.push(vec![]);
    let log = FakeLog::with_headers(&[recs]);
    let svc = ShareService::new(
        ShareConfig {
            max_delayed: 8,
            max_record_locks: 8,
            ..ShareConfig::default()
        },
        ShareGroupConfig::default(),
    );
    let (k, m) = (key(), member());
    let fetch = || svc.fetch(&log, &log, &EARLIEST, "g", &k, &m, 100, 1 << 20);
    // The parked list and the window fill with delayed records: nothing
    // acquired, and the seal they wait for is a few ms away, not the
    // minute the records are due in.
    let f = fetch().await.unwrap();
    assert!(f.acquired.is_empty());
    assert_eq!(f.retry_in_ms, Some(SEAL_RETRY_MS));
    // Each seal makes room for more; the plain record behind them comes
    // once they are all written out.
    let mut got = Vec::new();
    for _ in 0..20 {
        if let Some(claim) = svc.claim_timer_work("g", &key()) {
            svc.run_timers(&log, "g", &key(), claim).await;
        }
        let f = fetch().await.unwrap();
        got = offsets(&f);
        if !got.is_empty() {
            break;
        }
        assert_eq!(f.retry_in_ms, Some(SEAL_RETRY_MS));
    }
    assert_eq!(got, vec![30]);
}

#[tokio::test]
async fn buckets_no_state_lists_are_swept_and_a_reset_deletes_them_all() {
    let base = now_ms() + 60_000;
    let recs: Vec<Vec<(&str, String)>> = (0..12)
        .map(|i| vec![("floe-deliver-at", (base + i).to_string())])
        .collect();
    let log = FakeLog::with_headers(&[recs]);
    // Left by an owner that died after writing it, before its state.
    let orphan = log
        .put_timers("g", &key(), floe_storage::timers::encode(&[]).unwrap())
        .await
        .unwrap();
    let svc = small_parked();
    fetch_accept(&svc, &log).await;
    let tokens: Vec<String> = log.objects.lock().unwrap().keys().cloned().collect();
    assert!(!tokens.is_empty());
    assert!(!tokens.contains(&orphan.token.to_string()), "swept");
    let saved = log.saved.lock().unwrap()["g"].1.clone();
    let listed: Vec<String> = saved
        .timers
        .iter()
        .map(|b| b.object.token.to_string())
        .collect();
    assert_eq!(listed.len(), tokens.len());
    assert!(listed.iter().all(|t| tokens.contains(t)));
    // Deleting the group's state (DeleteShareGroupOffsets, DeleteGroups)
    // deletes its buckets.
    svc.reset(&log, &log, &EARLIEST, "g", &key(), None)
        .await
        .unwrap();
    assert!(log.objects.lock().unwrap().is_empty());
}

#[test]
fn a_refused_first_heartbeat_leaves_no_group() {
    let svc = service();
    let hb = Heartbeat {
        member_id: member(),
        member_epoch: 0,
        subscribed_topics: None,
        rack_id: None,
    };
    assert!(svc.heartbeat("g", &hb, &EARLIEST, &|_| None).0.is_err());
    assert!(svc.describe("g").is_none());
    let hb = Heartbeat {
        subscribed_topics: Some(vec!["t".into()]),
        ..hb
    };
    assert!(svc.heartbeat("g", &hb, &EARLIEST, &|_| None).0.is_ok());
    assert!(svc.has_member("g", &member()));
    assert!(svc.describe("g").is_some());
}

fn join(m: &MemberId) -> Heartbeat {
    Heartbeat {
        member_id: m.clone(),
        member_epoch: 0,
        subscribed_topics: Some(vec!["t".into()]),
        rack_id: None,
    }
}

#[test]
fn a_groups_own_heartbeat_interval_is_told_to_its_members() {
    let svc = service();
    let (answer, _) = svc.heartbeat("g", &join(&member()), &EARLIEST, &|_| None);
    assert_eq!(answer.unwrap().heartbeat_interval_ms, 5_000);
    let own = ShareSettings {
        heartbeat_interval_ms: Some(700),
        ..EARLIEST
    };
    let (answer, _) = svc.heartbeat("h", &join(&member()), &own, &|_| None);
    assert_eq!(answer.unwrap().heartbeat_interval_ms, 700);
}

#[tokio::test]
async fn a_silent_member_is_swept_out_after_its_groups_session_timeout_and_its_records_released() {
    let log = FakeLog::new(2);
    let svc = service();
    let quick = ShareSettings {
        session_timeout_ms: Some(30),
        ..EARLIEST
    };
    let (answer, gone) = svc.heartbeat("g", &join(&member()), &quick, &|_| None);
    assert!(answer.is_ok() && gone.is_empty());
    let f = svc
        .fetch(&log, &log, &quick, "g", &key(), &member(), 3, 1 << 20)
        .await
        .unwrap();
    assert_eq!(f.acquired.len(), 1);
    let owned = |_: &str| true;
    // Within the timeout: nobody goes.
    assert!(svc.expire_members(&owned, &|_| None).is_empty());
    tokio::time::sleep(std::time::Duration::from_millis(60)).await;
    let gone = svc.expire_members(&owned, &|_| None);
    assert_eq!(gone, vec![("g".to_owned(), member())]);
    assert!(!svc.has_member("g", &member()));
    // Its records are available again, long before their 30 s locks.
    let other = MemberId::new("other");
    let f = svc
        .fetch(&log, &log, &quick, "g", &key(), &other, 3, 1 << 20)
        .await
        .unwrap();
    assert_eq!(
        (f.acquired[0].first.0, f.acquired[0].delivery_count),
        (0, 2)
    );
}

#[test]
fn the_sweep_forgets_groups_whose_shard_moved_away_without_releasing_anything() {
    let svc = service();
    let quick = ShareSettings {
        session_timeout_ms: Some(1),
        ..EARLIEST
    };
    assert!(
        svc.heartbeat("g", &join(&member()), &quick, &|_| None)
            .0
            .is_ok()
    );
    std::thread::sleep(std::time::Duration::from_millis(5));
    // Not this broker's any more: forgotten, its member not "timed out"
    // (it heartbeats to the new coordinator).
    assert!(svc.expire_members(&|_| false, &|_| None).is_empty());
    assert!(svc.describe("g").is_none());
}

#[tokio::test]
async fn by_duration_starts_at_the_first_recent_record_or_else_the_end() {
    let log = FakeLog::new(4);
    let svc = service();
    *log.by_time.lock().unwrap() = 6;
    let recent = settings(AutoOffsetReset::ByDuration(60_000));
    let f = svc
        .fetch(&log, &log, &recent, "g", &key(), &member(), 100, 1)
        .await
        .unwrap();
    assert_eq!(f.acquired[0].first.0, 6);
    // Nothing that recent: from the end, as "latest".
    *log.by_time.lock().unwrap() = -1;
    let f = svc
        .fetch(&log, &log, &recent, "h", &key(), &member(), 100, 1)
        .await
        .unwrap();
    assert!(f.acquired.is_empty());
    assert_eq!(log.saved.lock().unwrap()["h"].1.start, Offset(12));
}

fn header(base: i64, records: i32, body: usize) -> Vec<u8> {
    let mut b = vec![0u8; 61 + body];
    b[0..8].copy_from_slice(&base.to_be_bytes());
    let len = i32::try_from(b.len() - 12).unwrap();
    b[8..12].copy_from_slice(&len.to_be_bytes());
    b[23..27].copy_from_slice(&(records - 1).to_be_bytes());
    b
}

#[test]
fn the_end_of_batches_is_past_the_last_whole_batch() {
    let mut two = header(10, 3, 5);
    two.extend(header(13, 2, 0));
    assert_eq!(end_of_batches(&two), Some(15));
    let cut = &two[..two.len() - 1];
    assert_eq!(end_of_batches(cut), Some(13));
    assert_eq!(end_of_batches(&two[..20]), None);
    assert_eq!(end_of_batches(&[]), None);
}

#[tokio::test]
async fn a_reset_moves_the_start_at_the_owner_and_a_delete_starts_afresh() {
    let log = FakeLog::new(4);
    let svc = service();
    let f = svc
        .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 3, 1 << 20)
        .await
        .unwrap();
    assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (0, 2));
    ack(&svc, &log, &EARLIEST, 0, 1, AckType::Accept).await;
    assert_eq!(log.saved.lock().unwrap()["g"].1.start, Offset(2));
    // Back to 1: written before it is answered, and served from there
    // (an accepted record comes again only because the admin asked).
    let at = svc
        .reset(&log, &log, &EARLIEST, "g", &key(), Some(1))
        .await
        .unwrap();
    assert_eq!(at, Some(1));
    let saved = log.saved.lock().unwrap()["g"].1.clone();
    assert_eq!((saved.start, saved.ranges.len()), (Offset(1), 0));
    // Offset 2, acquired before the reset, is no longer held.
    let refused = svc
        .acknowledge(
            &log,
            &log,
            &EARLIEST,
            "g",
            &key(),
            &member(),
            &[AckBatch::all(2, 2, AckType::Accept)],
        )
        .await
        .unwrap();
    assert!(refused.is_err());
    let f = svc
        .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 2, 1 << 20)
        .await
        .unwrap();
    assert_eq!((f.acquired[0].first.0, f.acquired[0].last.0), (1, 2));
    assert_eq!(f.acquired[0].delivery_count, 1);
    // Past the end: kept at the end.
    let at = svc
        .reset(&log, &log, &EARLIEST, "g", &key(), Some(1_000))
        .await
        .unwrap();
    assert_eq!(at, Some(log.hw()));
    // Deleted: nothing stored; the next fetch starts at the reset
    // policy (earliest here) again.
    let at = svc
        .reset(&log, &log, &EARLIEST, "g", &key(), None)
        .await
        .unwrap();
    assert_eq!(at, None);
    assert!(!log.saved.lock().unwrap().contains_key("g"));
    let f = svc
        .fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 1, 1 << 20)
        .await
        .unwrap();
    assert_eq!(f.acquired[0].first.0, 0);
    // Not the owner: refused, nothing written.
    *log.epoch.lock().unwrap() = None;
    assert!(
        svc.reset(&log, &log, &EARLIEST, "g", &key(), Some(0))
            .await
            .is_err()
    );
}

#[test]
fn a_share_group_with_members_is_not_deleted() {
    let svc = service();
    let topics = |_: &str| {
        Some(TopicInfo {
            id: TopicId(uuid::Uuid::nil()),
            partitions: 1,
        })
    };
    let join = Heartbeat {
        member_id: member(),
        member_epoch: 0,
        subscribed_topics: Some(vec!["t".into()]),
        rack_id: None,
    };
    let answer = svc.heartbeat("g", &join, &EARLIEST, &topics).0.unwrap();
    assert!(svc.has_group("g"));
    assert_eq!(
        svc.groups(),
        vec![("g".to_owned(), super::super::ShareGroupState::Stable)]
    );
    assert_eq!(svc.delete_group("g"), Err(ShareGroupError::NonEmptyGroup));
    let leave = Heartbeat {
        member_epoch: -1,
        subscribed_topics: None,
        ..join
    };
    let _ = answer;
    svc.heartbeat("g", &leave, &EARLIEST, &topics).0.unwrap();
    assert_eq!(
        svc.groups(),
        vec![("g".to_owned(), super::super::ShareGroupState::Empty)]
    );
    assert_eq!(svc.delete_group("g"), Ok(()));
    assert!(!svc.has_group("g"));
    assert!(svc.groups().is_empty());
}

// The dead-letter topic.

/// A dead-letter partition that keeps what is appended and answers a
/// batch repeating the last sequence of its producer and epoch as a
/// duplicate (not stored again), as an idempotent partition does.
#[derive(Default)]
struct FakeDlq {
    exists: Mutex<bool>,
    stored: Mutex<Vec<Bytes>>,
    last: Mutex<HashMap<i64, (i16, i32)>>,
    /// Answers to give before the normal ones: `Err` after storing
    /// (`true`) or without storing (`false`).
    fail: Mutex<Vec<bool>>,
    /// Called on a failure (to move the partition, say).
    on_fail: Mutex<Option<Box<dyn FnMut() + Send>>>,
}

impl FakeDlq {
    fn new() -> Self {
        let d = Self::default();
        *d.exists.lock().unwrap() = true;
        d
    }

    fn records(&self) -> Vec<floe_storage::records::Record> {
        self.stored
            .lock()
            .unwrap()
            .iter()
            .flat_map(|b| floe_storage::records::decode_records(b, 1 << 20).unwrap())
            .collect()
    }
}

#[async_trait::async_trait]
impl DeadLetterSink for FakeDlq {
    fn topic(&self, name: &str) -> Option<(TopicId, u32)> {
        (name == "dlq" && *self.exists.lock().unwrap()).then(|| (TopicId(uuid::Uuid::max()), 1))
    }

    fn topic_name(&self, _: TopicId) -> Option<String> {
        Some("src".into())
    }

    async fn append(&self, _: &PartitionKey, batch: Bytes) -> Result<(), CallError> {
        let v = floe_storage::batch::BatchView::parse(&batch, usize::MAX).unwrap();
        let (pid, epoch, seq) = (v.producer_id(), v.producer_epoch(), v.base_sequence());
        let fail = {
            let mut f = self.fail.lock().unwrap();
            (!f.is_empty()).then(|| f.remove(0))
        };
        let duplicate = self.last.lock().unwrap().get(&pid) == Some(&(epoch, seq));
        if fail != Some(false) && !duplicate {
            self.stored.lock().unwrap().push(batch.clone());
            self.last.lock().unwrap().insert(pid, (epoch, seq));
        }
        if fail.is_some() {
            if let Some(f) = self.on_fail.lock().unwrap().as_mut() {
                f();
            }
            return Err(BrokerError::new(ErrorKind::OutcomeUnknown, "cut off").into());
        }
        Ok(())
    }
}

fn with_dlq() -> ShareSettings {
    ShareSettings {
        dead_letter_topic: Some(Arc::from("dlq")),
        ..EARLIEST
    }
}

fn quick(svc: ShareService) -> ShareService {
    ShareService {
        dead_letter_retry: (
            std::time::Duration::from_millis(5),
            std::time::Duration::from_millis(10),
        ),
        ..svc
    }
}

fn header_of(r: &floe_storage::records::Record, k: &str) -> Option<String> {
    r.headers
        .iter()
        .find(|h| h.key.as_ref() == k.as_bytes())
        .and_then(|h| h.value.as_ref())
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// `member()` acknowledges `first..=last` of group "g" with `ty`, which
/// must be taken.
async fn ack(
    svc: &ShareService,
    log: &FakeLog,
    settings: &ShareSettings,
    first: i64,
    last: i64,
    ty: AckType,
) {
    svc.acknowledge(
        log,
        log,
        settings,
        "g",
        &key(),
        &member(),
        &[AckBatch::all(first, last, ty)],
    )
    .await
    .unwrap()
    .unwrap();
}

async fn reject(
    svc: &ShareService,
    log: &FakeLog,
    settings: &ShareSettings,
    first: i64,
    last: i64,
) {
    ack(svc, log, settings, first, last, AckType::Reject).await;
}

async fn run(svc: &ShareService, log: &FakeLog, dlq: &FakeDlq) {
    let epoch = svc.claim_dead_letters("g", &key()).unwrap();
    svc.run_dead_letters(log, log, dlq, "g", &key(), epoch)
        .await;
}

#[tokio::test]
async fn rejected_records_are_appended_to_the_dead_letter_topic_once_then_archived() {
    let log = FakeLog::new(2);
    let svc = service();
    let dlq = FakeDlq::new();
    let settings = with_dlq();
    svc.fetch(&log, &log, &settings, "g", &key(), &member(), 3, 1 << 20)
        .await
        .unwrap();
    reject(&svc, &log, &settings, 1, 2).await;
    // The reject is written as waiting for the dead-letter topic.
    let saved = log.saved.lock().unwrap()["g"].1.clone();
    assert!(
        saved
            .ranges
            .iter()
            .any(|r| matches!(r.state, DurableState::DeadLettering { .. }))
    );
    run(&svc, &log, &dlq).await;
    let got = dlq.records();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].value.as_deref(), Some(&[1u8][..]));
    assert_eq!(header_of(&got[0], "floe-dlq-topic").as_deref(), Some("src"));
    assert_eq!(
        header_of(&got[0], "floe-dlq-partition").as_deref(),
        Some("0")
    );
    assert_eq!(header_of(&got[0], "floe-dlq-offset").as_deref(), Some("1"));
    assert_eq!(header_of(&got[1], "floe-dlq-offset").as_deref(), Some("2"));
    assert_eq!(
        header_of(&got[0], "floe-dlq-delivery-count").as_deref(),
        Some("1")
    );
    assert_eq!(
        header_of(&got[0], "floe-dlq-reason").as_deref(),
        Some("rejected")
    );
    // Archived and written: nothing waits, the claim is given back.
    let saved = log.saved.lock().unwrap()["g"].1.clone();
    assert_eq!(saved.dead_letter.next_sequence, 2);
    assert_eq!(saved.dead_letter.in_flight, None);
    assert!(
        !saved
            .ranges
            .iter()
            .any(|r| matches!(r.state, DurableState::DeadLettering { .. }))
    );
    assert_eq!(svc.claim_dead_letters("g", &key()), None);
    // Never delivered again: the next fetch skips them.
    ack(&svc, &log, &settings, 0, 0, AckType::Release).await;
    let f = svc
        .fetch(&log, &log, &settings, "g", &key(), &member(), 10, 1 << 20)
        .await
        .unwrap();
    let got: Vec<(i64, i64)> = f.acquired.iter().map(|a| (a.first.0, a.last.0)).collect();
    assert_eq!(got, vec![(0, 0), (3, 5)]);
}

#[tokio::test]
async fn a_missing_dead_letter_topic_keeps_the_record_until_it_exists() {
    let log = FakeLog::new(1);
    let svc = quick(service());
    let dlq = FakeDlq::new();
    *dlq.exists.lock().unwrap() = false;
    let settings = with_dlq();
    svc.fetch(&log, &log, &settings, "g", &key(), &member(), 1, 1 << 20)
        .await
        .unwrap();
    reject(&svc, &log, &settings, 0, 0).await;
    let epoch = svc.claim_dead_letters("g", &key()).unwrap();
    let k = key();
    let task = svc.run_dead_letters(&log, &log, &dlq, "g", &k, epoch);
    let create = async {
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        // Still waiting, not archived, not delivered again.
        let held = lock(&svc.partitions)
            .get(&("g".to_owned(), key()))
            .unwrap()
            .sp
            .dead_letters_pending();
        assert_eq!(held, 1);
        *dlq.exists.lock().unwrap() = true;
    };
    tokio::join!(task, create);
    assert_eq!(dlq.records().len(), 1);
}

#[tokio::test]
async fn an_append_cut_off_is_repeated_with_its_sequence_and_stored_once() {
    let log = FakeLog::new(1);
    let svc = quick(service());
    let dlq = FakeDlq::new();
    // Stored, but the answer is lost; then not stored and failed.
    *dlq.fail.lock().unwrap() = vec![true, false];
    let settings = with_dlq();
    svc.fetch(&log, &log, &settings, "g", &key(), &member(), 3, 1 << 20)
        .await
        .unwrap();
    reject(&svc, &log, &settings, 0, 1).await;
    run(&svc, &log, &dlq).await;
    let offsets: Vec<Option<String>> = dlq
        .records()
        .iter()
        .map(|r| header_of(r, "floe-dlq-offset"))
        .collect();
    assert_eq!(offsets, vec![Some("0".into()), Some("1".into())]);
}

#[tokio::test]
async fn a_new_owner_repeats_the_append_under_way_and_it_is_not_stored_twice() {
    let log = Arc::new(FakeLog::new(1));
    let svc = quick(service());
    let dlq = FakeDlq::new();
    // The first append lands, its answer is lost, and the partition
    // moves to another owner (epoch 2) meanwhile.
    *dlq.fail.lock().unwrap() = vec![true];
    let moved = log.clone();
    *dlq.on_fail.lock().unwrap() = Some(Box::new(move || {
        *moved.epoch.lock().unwrap() = Some(2);
    }));
    let settings = with_dlq();
    svc.fetch(&*log, &*log, &settings, "g", &key(), &member(), 3, 1 << 20)
        .await
        .unwrap();
    reject(&svc, &log, &settings, 0, 0).await;
    // The old owner stops (its writes are refused).
    run(&svc, &log, &dlq).await;
    assert_eq!(dlq.records().len(), 1);
    let saved = log.saved.lock().unwrap()["g"].1.clone();
    assert_eq!(saved.dead_letter.in_flight, Some(Offset(0)));
    // The new owner loads that state and repeats the same append.
    let other = quick(service());
    other
        .fetch(&*log, &*log, &settings, "g", &key(), &member(), 1, 1 << 20)
        .await
        .unwrap();
    run(&other, &log, &dlq).await;
    assert_eq!(dlq.records().len(), 1, "stored once");
    let saved = log.saved.lock().unwrap()["g"].1.clone();
    assert_eq!(
        (saved.start, saved.dead_letter.in_flight),
        (Offset(1), None)
    );
}

#[tokio::test]
async fn a_record_released_at_the_delivery_limit_is_dead_lettered_with_its_reason() {
    let log = FakeLog::new(1);
    let svc = service();
    let dlq = FakeDlq::new();
    let settings = ShareSettings {
        delivery_count_limit: 2,
        ..with_dlq()
    };
    for _ in 0..2 {
        let f = svc
            .fetch(&log, &log, &settings, "g", &key(), &member(), 1, 1 << 20)
            .await
            .unwrap();
        assert_eq!(f.acquired[0].first, Offset(0));
        ack(&svc, &log, &settings, 0, 0, AckType::Release).await;
    }
    run(&svc, &log, &dlq).await;
    let got = dlq.records();
    assert_eq!(got.len(), 1);
    assert_eq!(
        header_of(&got[0], "floe-dlq-reason").as_deref(),
        Some("delivery-count-limit")
    );
    assert_eq!(
        header_of(&got[0], "floe-dlq-delivery-count").as_deref(),
        Some("2")
    );
}

#[tokio::test]
async fn the_groups_backoff_delays_a_released_record() {
    let log = FakeLog::new(1);
    let svc = service();
    let settings = ShareSettings {
        backoff: Backoff {
            base_ms: 60_000,
            max_ms: 60_000,
        },
        ..EARLIEST
    };
    svc.fetch(&log, &log, &settings, "g", &key(), &member(), 1, 1 << 20)
        .await
        .unwrap();
    ack(&svc, &log, &settings, 0, 0, AckType::Release).await;
    // Offset 0 waits a minute; 1 and 2 are not held up by it, and a
    // fetch that finds nothing is told when to look again.
    let f = svc
        .fetch(&log, &log, &settings, "g", &key(), &member(), 10, 1 << 20)
        .await
        .unwrap();
    let got: Vec<(i64, i64)> = f.acquired.iter().map(|a| (a.first.0, a.last.0)).collect();
    assert_eq!(got, vec![(1, 2)]);
    let f = svc
        .fetch(&log, &log, &settings, "g", &key(), &member(), 10, 1 << 20)
        .await
        .unwrap();
    assert!(f.acquired.is_empty());
    assert!(
        f.retry_in_ms.is_some_and(|ms| ms > 29_000 && ms <= 60_000),
        "{:?}",
        f.retry_in_ms
    );
}

#[tokio::test]
async fn a_member_leaving_at_the_delivery_limit_leaves_dead_records_to_append() {
    let log = FakeLog::new(1);
    let svc = service();
    let dlq = FakeDlq::new();
    let settings = ShareSettings {
        delivery_count_limit: 2,
        ..with_dlq()
    };
    for _ in 0..2 {
        svc.fetch(&log, &log, &settings, "g", &key(), &member(), 1, 1 << 20)
            .await
            .unwrap();
        svc.release_member("g", &member());
    }
    assert_eq!(svc.claim_group_dead_letters("other"), vec![]);
    let claimed = svc.claim_group_dead_letters("g");
    assert_eq!(claimed.len(), 1);
    // Claimed once: a second claim finds the task running.
    assert_eq!(svc.claim_group_dead_letters("g"), vec![]);
    svc.run_dead_letters(&log, &log, &dlq, "g", &key(), claimed[0].1)
        .await;
    let got = dlq.records();
    assert_eq!(got.len(), 1);
    assert_eq!(
        header_of(&got[0], "floe-dlq-reason").as_deref(),
        Some("delivery-count-limit")
    );
}

/// Issue 41 (seed 4101, clock family): a record dead-lettered at the
/// delivery limit whose copy landed, yet the share-partition's start
/// offset as written (what DescribeShareGroupOffsets reads) stays on it
/// for good. A call whose settings name no dead-letter topic (a proxy
/// that cannot read the group's configs in 2 s answers with its flags',
/// which have none: `proxy/src/share.rs`, `settings_for`) reaches the
/// owner while the append's answer is lost and the task pauses: `ensure`
/// sets that config, which archives the waiting record and moves the
/// start, in memory only; the task's next step finds no topic and ends
/// without writing (its last step failed, nothing "unwritten"); a fetch
/// that acquires nothing writes nothing either. With no acknowledgement
/// left on the partition (the drain accepted everything), nothing ever
/// writes the start the owner holds.
#[tokio::test]
async fn a_record_archived_by_a_call_naming_no_dead_letter_topic_has_its_start_written() {
    let log = FakeLog::new(1);
    let svc = ShareService {
        // The task pauses long enough after a failed append for the
        // other call to land meanwhile.
        dead_letter_retry: (
            std::time::Duration::from_millis(200),
            std::time::Duration::from_millis(400),
        ),
        ..service()
    };
    let dlq = FakeDlq::new();
    let settings = ShareSettings {
        delivery_count_limit: 2,
        ..with_dlq()
    };
    // Offset 0 released at the limit: waiting for the dead-letter topic.
    for _ in 0..2 {
        let f = svc
            .fetch(&log, &log, &settings, "g", &key(), &member(), 1, 1 << 20)
            .await
            .unwrap();
        assert_eq!(f.acquired[0].first, Offset(0));
        ack(&svc, &log, &settings, 0, 0, AckType::Release).await;
    }
    // Everything after it accepted (each acceptance written, start 0).
    let f = svc
        .fetch(&log, &log, &settings, "g", &key(), &member(), 10, 1 << 20)
        .await
        .unwrap();
    assert_eq!(offsets(&f), vec![1, 2]);
    ack(&svc, &log, &settings, 1, 2, AckType::Accept).await;
    assert_eq!(log.saved.lock().unwrap()["g"].1.start, Offset(0));
    // The append lands, its answer is lost: the task pauses.
    *dlq.fail.lock().unwrap() = vec![true];
    let epoch = svc.claim_dead_letters("g", &key()).unwrap();
    let k = key();
    // A proxy's flags' settings: no dead-letter topic (nor the group's
    // limit or lock).
    let flags = EARLIEST;
    let task = svc.run_dead_letters(&log, &log, &dlq, "g", &k, epoch);
    let meanwhile = async {
        while dlq.records().is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        // A fetch through a proxy that fell back to its flags' settings.
        svc.fetch(&log, &log, &flags, "g", &k, &member(), 10, 1 << 20)
            .await
            .unwrap();
    };
    tokio::join!(task, meanwhile);
    // The drain goes on through proxies that read the configs again: it
    // finds nothing to acquire, and nothing waits for the dead-letter
    // topic.
    let f = svc
        .fetch(&log, &log, &settings, "g", &key(), &member(), 10, 1 << 20)
        .await
        .unwrap();
    assert!(f.acquired.is_empty());
    assert_eq!(svc.claim_dead_letters("g", &key()), None);
    assert_eq!(dlq.records().len(), 1, "one copy landed");
    // In memory everything is done...
    let held = lock(&svc.partitions)
        .get(&("g".to_owned(), key()))
        .map(|h| h.sp.start_offset());
    assert_eq!(held, Some(Offset(3)));
    // ...and that is what the owner must have written.
    let saved = log.saved.lock().unwrap()["g"].1.clone();
    assert_eq!(
        (saved.start, saved.dead_letter.in_flight),
        (Offset(3), None),
        "the written start offset stays on the dead-lettered record"
    );
}

/// A look at a share-partition reads the owner's memory when it holds the
/// partition at its epoch, else the state last written (where nothing is
/// acquired); it loads and creates nothing, and only the owner answers.
#[tokio::test]
async fn an_inspection_reads_memory_else_the_written_state_and_creates_nothing() {
    let log = FakeLog::new(3);
    let svc = service();
    assert_eq!(
        svc.inspect(&log, &EARLIEST, "g", &key(), 10).await.unwrap(),
        None,
        "no state: nothing to show, and none made"
    );
    assert_eq!(
        svc.inspect(&log, &EARLIEST, "g", &key(), 10).await.unwrap(),
        None
    );
    svc.fetch(&log, &log, &EARLIEST, "g", &key(), &member(), 4, 1 << 20)
        .await
        .unwrap();
    ack(&svc, &log, &EARLIEST, 0, 0, AckType::Accept).await;
    let seen = svc
        .inspect(&log, &EARLIEST, "g", &key(), 10)
        .await
        .unwrap()
        .expect("state");
    assert!(seen.in_memory);
    assert_eq!((seen.start, seen.end, seen.acquired), (1, 4, 3));
    assert_eq!(seen.acquired_records.len(), 3);
    // Another epoch: this owner's memory is stale, the written state shows
    // the three locked records as available.
    *log.epoch.lock().unwrap() = Some(2);
    let written = svc
        .inspect(&log, &EARLIEST, "g", &key(), 10)
        .await
        .unwrap()
        .expect("state");
    assert!(!written.in_memory);
    assert_eq!(
        (
            written.start,
            written.end,
            written.available,
            written.acquired
        ),
        (1, 4, 3, 0)
    );
    *log.epoch.lock().unwrap() = None;
    assert!(svc.inspect(&log, &EARLIEST, "g", &key(), 10).await.is_err());
}
