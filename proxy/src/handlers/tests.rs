use std::sync::atomic::{AtomicUsize, Ordering};

use floe_broker::{BrokerError, ErrorKind, FetchData, OffsetAnswer, ProduceOk};
use floe_storage::TopicId;
use kafka_protocol::ResponseError;

use super::*;

fn one_batch(producer: Option<bool>) -> Vec<u8> {
    use floe_storage::batch::Compression;
    use floe_storage::records::{BatchBuilder, RecordSpec};
    let mut b = BatchBuilder::new(0, 1_000);
    if let Some(txn) = producer {
        b = b.producer(7, 0, 0, txn);
    }
    b.push(RecordSpec::new(None, Some(b"v".to_vec()), 0));
    b.build(Compression::None).unwrap().to_vec()
}

#[test]
fn only_a_transactions_batches_are_answered_once_sequenced() {
    let txn = one_batch(Some(true));
    let idempotent = one_batch(Some(false));
    let plain = one_batch(None);
    assert_eq!(ack_level(Acks::All, &txn), Acks::Leader);
    let two = [txn.clone(), txn.clone()].concat();
    assert_eq!(ack_level(Acks::All, &two), Acks::Leader);
    assert_eq!(ack_level(Acks::All, &idempotent), Acks::All);
    assert_eq!(ack_level(Acks::All, &plain), Acks::All);
    let mixed = [txn.clone(), plain].concat();
    assert_eq!(ack_level(Acks::All, &mixed), Acks::All, "as asked");
    assert_eq!(ack_level(Acks::All, &txn[..20]), Acks::All, "malformed");
    assert_eq!(ack_level(Acks::All, &[]), Acks::All, "empty");
    assert_eq!(ack_level(Acks::None, &txn), Acks::None);
}

/// An owner that answers NOT_OWNER to its first `not_ready` appends.
#[derive(Debug)]
struct FakeOwner {
    not_ready: usize,
    appends: AtomicUsize,
}

impl FakeOwner {
    fn new(not_ready: usize) -> Arc<Self> {
        Arc::new(Self {
            not_ready,
            appends: AtomicUsize::new(0),
        })
    }
}

#[async_trait::async_trait]
impl PartitionOwner for FakeOwner {
    async fn append(
        &self,
        key: &PartitionKey,
        _records: Bytes,
        _acks: Acks,
        _room_wait: Duration,
    ) -> Result<PendingProduce, CallError> {
        let n = self.appends.fetch_add(1, Ordering::SeqCst);
        if n < self.not_ready {
            return Err(BrokerError::not_owner(key).into());
        }
        Ok(PendingProduce::remote(async move {
            Ok(ProduceOk {
                base_offset: n as i64,
                log_start_offset: 0,
                log_append_time: -1,
            })
        }))
    }

    async fn fetch_isolated(
        &self,
        _: &PartitionKey,
        _: i64,
        _: usize,
        _: Option<u64>,
        _: bool,
    ) -> Result<FetchData, CallError> {
        Err(BrokerError::new(ErrorKind::Unsupported, "fake").into())
    }

    async fn producers(
        &self,
        _: &PartitionKey,
    ) -> Result<Vec<floe_broker::partitions::ProducerInfo>, CallError> {
        Err(BrokerError::new(ErrorKind::Unsupported, "fake").into())
    }

    async fn wait_for_data(&self, _: &PartitionKey, _: i64, _: tokio::time::Instant) {}

    async fn list_offset(
        &self,
        _: &PartitionKey,
        _: OffsetSpec,
        _: Option<u64>,
    ) -> Result<(OffsetAnswer, i64), CallError> {
        Err(BrokerError::new(ErrorKind::Unsupported, "fake").into())
    }

    async fn delete_records(&self, _: &PartitionKey, _: i64) -> Result<i64, CallError> {
        Err(BrokerError::new(ErrorKind::Unsupported, "fake").into())
    }
}

/// A view with `topic` of `count` partitions, the first `owned` owned,
/// and broker 3 `live` or not.
fn view_with(topic: Option<(&str, u32, u32)>, live: bool) -> ClusterSnapshot {
    use floe_metadata::ids::BrokerId as MetaBrokerId;
    use floe_metadata::model::{NodeInfo, NodeKind, NodeState};
    let mut s = ClusterSnapshot::default();
    s.nodes.push(NodeInfo {
        id: MetaBrokerId(3),
        kind: NodeKind::Broker,
        addr: "127.0.0.1:1".into(),
        state: if live {
            NodeState::Live
        } else {
            NodeState::Dead
        },
    });
    if let Some((name, count, owned)) = topic {
        let owner = |p| (p < owned).then_some(3);
        crate::test_support::add_topic(&mut s, name, 7, count, owner, |_| 1);
    }
    s
}

#[test]
fn a_created_topic_is_waited_for_in_the_view_even_while_no_broker_is_live() {
    let asked = [("t".to_string(), 3)];
    let shown = |topic, live| created_visible(&view_with(topic, live), &asked);
    // Not in the view yet: wait, with or without a live broker (the
    // client's next request would be answered UNKNOWN_TOPIC_OR_PARTITION).
    assert!(!shown(None, false));
    assert!(!shown(None, true));
    // Fewer partitions than created (CreatePartitions not seen yet).
    assert!(!shown(Some(("t", 2, 2)), true));
    assert!(!shown(Some(("t", 2, 0)), false));
    // Shown, no owner, no live broker: nothing will own them until one
    // registers, so no wait for owners.
    assert!(shown(Some(("t", 3, 0)), false));
    // A live broker: every partition must be owned.
    assert!(!shown(Some(("t", 3, 2)), true));
    assert!(shown(Some(("t", 3, 3)), true));
    assert!(shown(Some(("t", 4, 4)), true));
}

fn key() -> PartitionKey {
    PartitionKey::new(TopicId(uuid::Uuid::nil()), 0)
}

fn routing(kind: RoutingErrorKind) -> RoutingError {
    RoutingError::new(kind, "test")
}

#[test]
fn fetch_budgets_stay_within_the_proxy_caps() {
    let l = FetchLimits {
        max_bytes: 1000,
        max_partition_bytes: 300,
    };
    // No request-wide cap from the client (v3+ sends one, but 0 or less
    // means none): the proxy's applies.
    assert_eq!(l.request_budget(0), 1000);
    assert_eq!(l.request_budget(-1), 1000);
    assert_eq!(l.request_budget(i32::MAX), 1000);
    assert_eq!(l.request_budget(200), 200);
    // A partition gets the smallest of its ask, the cap and what is left.
    assert_eq!(l.partition_budget(8 << 20, 1000, true), 300);
    assert_eq!(l.partition_budget(100, 1000, false), 100);
    assert_eq!(l.partition_budget(8 << 20, 50, false), 50);
    assert_eq!(l.partition_budget(8 << 20, 0, false), 0, "nothing left");
    // The first partition with data is always asked for one batch.
    assert_eq!(l.partition_budget(0, 0, true), 1);
    assert_eq!(l.partition_budget(-5, 1000, true), 1);
    assert_eq!(l.partition_budget(-5, 1000, false), 0);
    let d = FetchLimits::default();
    assert_eq!(d.max_bytes, 55 * 1024 * 1024);
}

#[test]
fn a_negative_leader_epoch_asks_for_no_check() {
    assert_eq!(leader_epoch(-1), None);
    assert_eq!(leader_epoch(i32::MIN), None);
    assert_eq!(leader_epoch(0), Some(0));
    assert_eq!(leader_epoch(7), Some(7));
}

/// An acks=all produce of no records to `key()` through
/// `append_retrying`, waiting at most `wait` for an owner.
async fn produce_empty(
    route: impl Fn() -> Result<Arc<dyn PartitionOwner>, RoutingError>,
    failed: impl Fn(&CallError),
    wait: Duration,
) -> Result<PendingProduce, CallError> {
    append_retrying(
        route,
        failed,
        &key(),
        Bytes::new(),
        Acks::All,
        Duration::ZERO,
        wait,
    )
    .await
}

#[tokio::test]
async fn a_produce_waits_for_an_owner_still_taking_over() {
    let owner = FakeOwner::new(3);
    let o = owner.clone();
    let route = move || Ok(o.clone() as Arc<dyn PartitionOwner>);
    let pending = produce_empty(route, |_| {}, OWNER_CHANGE_WAIT)
        .await
        .expect("sequenced once the owner is ready");
    assert_eq!(pending.wait().await.expect("acknowledged").base_offset, 3);
    assert_eq!(owner.appends.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn a_produce_waits_for_a_partition_to_get_an_owner() {
    let owner = FakeOwner::new(0);
    let routes = AtomicUsize::new(0);
    let route = || match routes.fetch_add(1, Ordering::SeqCst) {
        0 => Err(routing(RoutingErrorKind::NoOwner)),
        1 => Err(routing(RoutingErrorKind::OwnerUnknown)),
        2 => Err(routing(RoutingErrorKind::Unreachable)),
        _ => Ok(owner.clone() as Arc<dyn PartitionOwner>),
    };
    produce_empty(route, |_| {}, OWNER_CHANGE_WAIT)
        .await
        .expect("sequenced once the partition has an owner");
    assert_eq!(routes.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn an_owner_never_ready_is_not_leader_or_follower_after_the_wait() {
    let owner = FakeOwner::new(usize::MAX);
    let o = owner.clone();
    let route = move || Ok(o.clone() as Arc<dyn PartitionOwner>);
    let started = tokio::time::Instant::now();
    let wait = Duration::from_millis(100);
    let e = produce_empty(route, |_| {}, wait)
        .await
        .expect_err("never ready");
    assert!(started.elapsed() >= wait);
    assert!(owner.appends.load(Ordering::SeqCst) > 1);
    assert_eq!(call_code(&e), ResponseError::NotLeaderOrFollower.code());
}

#[tokio::test]
async fn an_unknown_partition_is_answered_at_once() {
    let routes = AtomicUsize::new(0);
    let route = || {
        routes.fetch_add(1, Ordering::SeqCst);
        Err(routing(RoutingErrorKind::UnknownPartition))
    };
    let e = produce_empty(route, |_| {}, OWNER_CHANGE_WAIT)
        .await
        .expect_err("no such partition");
    assert_eq!(routes.load(Ordering::SeqCst), 1);
    assert_eq!(call_code(&e), ResponseError::UnknownTopicOrPartition.code());
}

/// A proxy cut off from the metadata service answers within a second,
/// not after the whole wait for a new owner.
#[tokio::test]
async fn a_stale_view_is_waited_out_for_a_second_only() {
    let started = tokio::time::Instant::now();
    let e = produce_empty(
        || Err(routing(RoutingErrorKind::StaleView)),
        |_| {},
        OWNER_CHANGE_WAIT,
    )
    .await
    .expect_err("never confirmed");
    assert!(started.elapsed() < OWNER_CHANGE_WAIT);
    assert!(started.elapsed() >= STALE_VIEW_WAIT);
    assert_eq!(call_code(&e), ResponseError::NotLeaderOrFollower.code());
}

#[test]
fn the_wait_for_a_new_owner_is_at_most_half_the_clients_timeout() {
    assert_eq!(owner_wait(30_000), OWNER_CHANGE_WAIT);
    assert_eq!(owner_wait(2_000), Duration::from_secs(1));
    assert_eq!(owner_wait(0), Duration::ZERO);
    assert_eq!(owner_wait(-1), Duration::ZERO);
}

#[test]
fn an_address_is_reported_at_most_once_a_second() {
    let r = DownReports::default();
    let t0 = tokio::time::Instant::now();
    assert!(r.due_at("127.0.0.1:1", t0));
    assert!(!r.due_at("127.0.0.1:1", t0 + Duration::from_millis(999)));
    assert!(r.due_at("127.0.0.1:2", t0), "each address on its own");
    assert!(r.due_at("127.0.0.1:1", t0 + Duration::from_millis(1000)));
}

/// An owner that is gone (its address refuses) until the view names a
/// new one: the produce waits, each refusal is heard (and reported),
/// and the write goes to the new owner with no error for the client.
#[tokio::test]
async fn a_produce_rides_through_its_owner_dying() {
    let new_owner = FakeOwner::new(1);
    let calls = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    let route = || match calls.fetch_add(1, Ordering::SeqCst) {
        0..=2 => {
            let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
            Err(RoutingError::connect_failed("127.0.0.1:1", &io))
        }
        3 => Err(routing(RoutingErrorKind::NoOwner)),
        _ => Ok(new_owner.clone() as Arc<dyn PartitionOwner>),
    };
    let failed = |e: &CallError| {
        if matches!(e, CallError::Routing(r) if r.is_refused()) {
            refused.fetch_add(1, Ordering::SeqCst);
        }
    };
    let pending = produce_empty(route, failed, OWNER_CHANGE_WAIT)
        .await
        .expect("sequenced at the new owner");
    assert_eq!(pending.wait().await.expect("acknowledged").base_offset, 1);
    assert_eq!(refused.load(Ordering::SeqCst), 3, "each refusal heard");
    assert_eq!(calls.load(Ordering::SeqCst), 6);
}
