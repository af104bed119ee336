//! Kafka's promises about a connection's requests, over a raw connection
//! to a proxy: the effects of pipelined requests of one group happen in the
//! order they were sent, and a produce that was answered is counted by the
//! reads that follow it (`docs/kafka-compatibility.md`, "Order and
//! read-your-writes").

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use floe_broker::config::FlushPolicy;
use floe_storage::batch::Compression;
use floe_storage::records::{BatchBuilder, RecordSpec};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

fn group(name: &str) -> GroupId {
    GroupId(StrBytes::from_string(name.to_string()))
}

/// OffsetCommit v8 of `offset` for partition 0 of `t`, outside any
/// generation (as an admin tool or a consumer without a group commits).
fn commit(g: &str, t: &str, offset: i64) -> RequestKind {
    let p = OffsetCommitRequestPartition::default()
        .with_partition_index(0)
        .with_committed_offset(offset);
    RequestKind::OffsetCommit(
        OffsetCommitRequest::default()
            .with_group_id(group(g))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(topic(t))
                    .with_partitions(vec![p]),
            ]),
    )
}

/// OffsetFetch v7 of partition 0 of `t`.
fn fetch_offset(g: &str, t: &str) -> RequestKind {
    RequestKind::OffsetFetch(
        OffsetFetchRequest::default()
            .with_group_id(group(g))
            .with_topics(Some(vec![
                OffsetFetchRequestTopic::default()
                    .with_name(topic(t))
                    .with_partition_indexes(vec![0]),
            ])),
    )
}

fn produce(t: &str, records: bytes::Bytes, acks: i16) -> RequestKind {
    RequestKind::Produce(
        ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(topic(t))
                    .with_partition_data(vec![
                        PartitionProduceData::default().with_records(Some(records)),
                    ]),
            ]),
    )
}

/// Creates `t` and waits until a produce to it is answered.
async fn ready_topic(c: &mut Conn, t: &str) {
    let _ = c
        .call(ApiKey::Metadata, 12, RequestKind::Metadata(auto_create(t)))
        .await;
    let started = std::time::Instant::now();
    while c.produce_acked(t, "warm-up", 1_000).await != 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{t} never took a write"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn committed_code(r: &ResponseKind) -> i16 {
    let ResponseKind::OffsetCommit(r) = r else {
        panic!("{r:?}")
    };
    r.topics[0].partitions[0].error_code
}

fn fetched_offset(r: &ResponseKind) -> i64 {
    let ResponseKind::OffsetFetch(r) = r else {
        panic!("{r:?}")
    };
    assert_eq!(r.error_code, 0);
    r.topics[0].partitions[0].committed_offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipelined_commits_of_a_group_land_in_the_order_sent() {
    let e = env().await;
    let mut c = Conn::open(e.kafka).await;
    ready_topic(&mut c, "ordered").await;
    // The group's coordinator shard is taken over in the background.
    let started = std::time::Instant::now();
    loop {
        let r = c
            .call(ApiKey::OffsetCommit, 8, commit("g", "ordered", 0))
            .await;
        if committed_code(&r) == 0 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // 300 commits, each followed by an OffsetFetch, every tenth by a
    // produce, all sent before any answer is read: each fetch sees the
    // commit sent just before it, and the last commit stays.
    const N: i64 = 300;
    let mut sent = Vec::new();
    for i in 1..=N {
        let corr = c
            .send(ApiKey::OffsetCommit, 8, commit("g", "ordered", i))
            .await;
        sent.push((ApiKey::OffsetCommit, corr, i));
        let corr = c
            .send(ApiKey::OffsetFetch, 7, fetch_offset("g", "ordered"))
            .await;
        sent.push((ApiKey::OffsetFetch, corr, i));
        if i % 10 == 0 {
            let corr = c
                .send(
                    ApiKey::Produce,
                    9,
                    produce("ordered", one_batch("between", 1_000), 1),
                )
                .await;
            sent.push((ApiKey::Produce, corr, i));
        }
    }
    let mut out_of_order = Vec::new();
    for (key, corr, i) in sent {
        let version = match key {
            ApiKey::OffsetCommit => 8,
            ApiKey::OffsetFetch => 7,
            _ => 9,
        };
        let r = c.recv(key, version, corr).await;
        match key {
            ApiKey::OffsetCommit => assert_eq!(committed_code(&r), 0, "commit {i}"),
            ApiKey::OffsetFetch => {
                let got = fetched_offset(&r);
                if got != i {
                    out_of_order.push((i, got));
                }
            }
            _ => {
                let ResponseKind::Produce(p) = r else {
                    panic!()
                };
                assert_eq!(p.responses[0].partition_responses[0].error_code, 0);
            }
        }
    }
    assert!(
        out_of_order.is_empty(),
        "fetches that did not see the commit sent just before them (sent, seen): {out_of_order:?}"
    );
    // And from another connection, afterwards.
    let mut other = Conn::open(e.kafka).await;
    let r = other
        .call(ApiKey::OffsetFetch, 7, fetch_offset("g", "ordered"))
        .await;
    assert_eq!(fetched_offset(&r), N);
}

/// ListOffsets v7 of partition 0 of `t` at `isolation` (0: read_uncommitted).
fn latest(t: &str, isolation: i8) -> RequestKind {
    let p = ListOffsetsPartition::default()
        .with_partition_index(0)
        .with_timestamp(-1);
    RequestKind::ListOffsets(
        ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(isolation)
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(topic(t))
                    .with_partitions(vec![p]),
            ]),
    )
}

fn listed(r: ResponseKind) -> i64 {
    let ResponseKind::ListOffsets(r) = r else {
        panic!("{r:?}")
    };
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

/// A proxy and broker (`--transactions` as given) whose broker flushes at
/// most every 3 s.
async fn slow_flushes(transactions: bool) -> Env {
    env_configured(
        transactions,
        None,
        |m| m,
        |cfg| {
            cfg.flush = FlushPolicy {
                interval: Duration::from_secs(3),
                paced: true,
                ..FlushPolicy::LOCAL
            };
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_answered_transactional_produce_is_counted_by_the_next_reads() {
    // A transaction's batches, answered once sequenced, would otherwise
    // stay uncounted until the next flush.
    let e = slow_flushes(true).await;
    let mut c = Conn::open(e.kafka).await;
    ready_topic(&mut c, "rw").await;
    let before = listed(c.call(ApiKey::ListOffsets, 7, latest("rw", 0)).await);
    let (pid, epoch) = init_txn(&mut c, "rw-tx").await;
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id("rw-tx"))
        .with_v3_and_below_producer_id(pid)
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(topic("rw"))
                .with_partitions(vec![0]),
        ]);
    let ResponseKind::AddPartitionsToTxn(r) = c
        .call(
            ApiKey::AddPartitionsToTxn,
            3,
            RequestKind::AddPartitionsToTxn(add),
        )
        .await
    else {
        panic!()
    };
    assert_eq!(
        r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        0
    );
    // Ten records in two batches, acks=all, each answered.
    for seq in [0, 5] {
        let mut b = BatchBuilder::new(0, 1_000).producer(pid.0, epoch, seq, true);
        for i in 0..5 {
            b.push(RecordSpec::new(None, Some(format!("r{i}").into_bytes()), 0));
        }
        let ResponseKind::Produce(p) = c
            .call(
                ApiKey::Produce,
                9,
                produce("rw", b.build(Compression::None).unwrap(), -1),
            )
            .await
        else {
            panic!()
        };
        assert_eq!(p.responses[0].partition_responses[0].error_code, 0);
    }
    // From another connection: the high watermark counts them, the last
    // stable offset does not (the transaction is open).
    let mut other = Conn::open(e.kafka).await;
    let hw = listed(other.call(ApiKey::ListOffsets, 7, latest("rw", 0)).await);
    let lso = listed(other.call(ApiKey::ListOffsets, 7, latest("rw", 1)).await);
    assert_eq!(
        hw,
        before + 10,
        "the answered records are not below the high watermark"
    );
    assert_eq!(
        lso, before,
        "the open transaction's records are below the last stable offset"
    );
    // A fetch at read_uncommitted that does not wait returns them too.
    let mut at_end = fetch_one("rw", before, 0);
    at_end.min_bytes = 0;
    let ResponseKind::Fetch(f) = other
        .call(ApiKey::Fetch, 11, RequestKind::Fetch(at_end))
        .await
    else {
        panic!()
    };
    let p = &f.responses[0].partitions[0];
    assert_eq!(p.high_watermark, before + 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_acks_one_produce_is_counted_by_the_next_fetch_that_does_not_wait() {
    let e = slow_flushes(false).await;
    let mut c = Conn::open(e.kafka).await;
    ready_topic(&mut c, "one").await;
    let before = listed(c.call(ApiKey::ListOffsets, 7, latest("one", 0)).await);
    let ResponseKind::Produce(p) = c
        .call(ApiKey::Produce, 9, produce("one", one_batch("v", 1_000), 1))
        .await
    else {
        panic!()
    };
    assert_eq!(p.responses[0].partition_responses[0].error_code, 0);
    let mut f = fetch_one("one", before, 0);
    f.min_bytes = 0;
    let ResponseKind::Fetch(f) = c.call(ApiKey::Fetch, 11, RequestKind::Fetch(f)).await else {
        panic!()
    };
    let p = &f.responses[0].partitions[0];
    assert_eq!(p.high_watermark, before + 1);
    assert!(
        p.records.as_ref().is_some_and(|r| !r.is_empty()),
        "the record is not returned"
    );
}

/// The metadata service, with the calls `slow` picks held back `by` (as a
/// slow or distant metadata leader would hold them).
struct Slowed {
    inner: std::sync::Arc<dyn floe_metadata::api::MetaApi>,
    slow: fn(&floe_metadata::api::RouteCall) -> bool,
    by: Duration,
}

impl std::fmt::Debug for Slowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slowed").field("by", &self.by).finish()
    }
}

#[async_trait::async_trait]
impl floe_metadata::api::MetaApi for Slowed {
    async fn call_route(
        &self,
        call: floe_metadata::api::RouteCall,
    ) -> Result<floe_metadata::api::meta_api::Reply, floe_metadata::MetaError> {
        if (self.slow)(&call) {
            tokio::time::sleep(self.by).await;
        }
        self.inner.call_route(call).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_made_while_a_delete_is_written_is_kept() {
    let e = env_on(false, None, |m| {
        std::sync::Arc::new(Slowed {
            inner: m,
            // The deletes of a group's stored state.
            slow: |call| {
                use floe_metadata::api::routes;
                call.request::<routes::DeleteGroups>().is_some()
                    || call.request::<routes::DeleteOffsets>().is_some()
            },
            by: Duration::from_millis(400),
        })
    })
    .await;
    let mut c = Conn::open(e.kafka).await;
    ready_topic(&mut c, "del").await;
    for (i, delete) in [true, false].into_iter().enumerate() {
        let g = format!("deleted-{i}");
        let started = std::time::Instant::now();
        loop {
            let r = c.call(ApiKey::OffsetCommit, 8, commit(&g, "del", 5)).await;
            if committed_code(&r) == 0 {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "{r:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The group is empty: DeleteGroups (or OffsetDelete of the
        // partition) is decided at once, and its write takes 400 ms. A
        // commit from another connection comes in meanwhile and is
        // answered: it must not be deleted by the write decided before it.
        let (body, key, version) = if delete {
            let d = DeleteGroupsRequest::default().with_groups_names(vec![group(&g)]);
            (RequestKind::DeleteGroups(d), ApiKey::DeleteGroups, 2)
        } else {
            let d = OffsetDeleteRequest::default()
                .with_group_id(group(&g))
                .with_topics(vec![
                    offset_delete_request::OffsetDeleteRequestTopic::default()
                        .with_name(topic("del"))
                        .with_partitions(vec![
                            offset_delete_request::OffsetDeleteRequestPartition::default()
                                .with_partition_index(0),
                        ]),
                ]);
            (RequestKind::OffsetDelete(d), ApiKey::OffsetDelete, 0)
        };
        let corr = c.send(key, version, body).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut other = Conn::open(e.kafka).await;
        let r = other
            .call(ApiKey::OffsetCommit, 8, commit(&g, "del", 9))
            .await;
        assert_eq!(committed_code(&r), 0);
        match c.recv(key, version, corr).await {
            ResponseKind::DeleteGroups(d) => assert_eq!(d.results[0].error_code, 0),
            ResponseKind::OffsetDelete(d) => {
                assert_eq!(d.error_code, 0);
                assert_eq!(d.topics[0].partitions[0].error_code, 0);
            }
            r => panic!("{r:?}"),
        }
        let r = other
            .call(ApiKey::OffsetFetch, 7, fetch_offset(&g, "del"))
            .await;
        assert_eq!(
            fetched_offset(&r),
            9,
            "an answered commit was deleted by a {key:?} decided before it"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn offsets_of_an_answered_commit_are_read_back_at_once() {
    let e = env_on(true, None, |m| {
        std::sync::Arc::new(Slowed {
            inner: m,
            // The step that completes a transaction (its markers written,
            // its offsets stored): op 6, `floe_metadata::api::txn_routes`.
            slow: |call| {
                call.request::<floe_metadata::api::routes::TxnStep>()
                    .is_some_and(|r| r.op == 6)
            },
            by: Duration::from_millis(500),
        })
    })
    .await;
    let mut c = Conn::open(e.kafka).await;
    ready_topic(&mut c, "txo").await;
    let (pid, epoch) = init_txn(&mut c, "txo-tx").await;
    let add = AddOffsetsToTxnRequest::default()
        .with_transactional_id(txn_id("txo-tx"))
        .with_producer_id(pid)
        .with_producer_epoch(epoch)
        .with_group_id(group("txo-g"));
    let ResponseKind::AddOffsetsToTxn(r) = c
        .call(
            ApiKey::AddOffsetsToTxn,
            3,
            RequestKind::AddOffsetsToTxn(add),
        )
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 0);
    let offsets = TxnOffsetCommitRequest::default()
        .with_transactional_id(txn_id("txo-tx"))
        .with_group_id(group("txo-g"))
        .with_producer_id(pid)
        .with_producer_epoch(epoch)
        .with_topics(vec![
            txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                .with_name(topic("txo"))
                .with_partitions(vec![
                    txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(7),
                ]),
        ]);
    let started = std::time::Instant::now();
    loop {
        let ResponseKind::TxnOffsetCommit(r) = c
            .call(
                ApiKey::TxnOffsetCommit,
                3,
                RequestKind::TxnOffsetCommit(offsets.clone()),
            )
            .await
        else {
            panic!()
        };
        let code = r.topics[0].partitions[0].error_code;
        if code == 0 {
            break;
        }
        // The group's coordinator shard is taken over in the background.
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "TxnOffsetCommit: {code}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let end = EndTxnRequest::default()
        .with_transactional_id(txn_id("txo-tx"))
        .with_producer_id(pid)
        .with_producer_epoch(epoch)
        .with_committed(true);
    let ResponseKind::EndTxn(r) = c.call(ApiKey::EndTxn, 3, RequestKind::EndTxn(end)).await else {
        panic!()
    };
    assert_eq!(r.error_code, 0);
    // The commit was answered; its completion (the offsets stored) takes
    // 500 ms more. A new client reads the offsets at once.
    let mut other = Conn::open(e.kafka).await;
    let r = other
        .call(ApiKey::OffsetFetch, 7, fetch_offset("txo-g", "txo"))
        .await;
    assert_eq!(
        fetched_offset(&r),
        7,
        "an answered commit's offsets were not read back"
    );
}
