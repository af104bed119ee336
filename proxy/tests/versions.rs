//! Every data-plane API at every version the proxy advertises, over a real
//! TCP connection to a proxy with an in-process broker and metadata node:
//! each answer must encode at the request's version and decode back, with
//! the data the request asked for. A field set that the version does not
//! have would make the proxy close the connection, and the test fail.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

use floe_metadata::MetaError;
use floe_metadata::api::meta_api::Reply;
use floe_metadata::api::{MetaApi, RouteCall, routes};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use floe_broker::Acks;
use floe_proxy::codec::{self, decode_response, encode_request};
use floe_proxy::handlers::{SUPPORTED, TXN_SUPPORTED};
use floe_storage::batch::Compression;
use floe_storage::records::{BatchBuilder, RecordSpec};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

fn versions(key: ApiKey) -> std::ops::RangeInclusive<i16> {
    let (_, min, max) = SUPPORTED.iter().find(|(k, _, _)| *k == key).unwrap();
    // Produce v0–v2 are advertised for librdkafka but cannot be decoded.
    (*min).max(key.valid_versions().min)..=*max
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_data_plane_api_answers_at_every_advertised_version() {
    let e = env().await;
    let mut c = Conn::open(e.kafka).await;
    // ApiVersions lists what SUPPORTED says.
    for v in versions(ApiKey::ApiVersions) {
        let ResponseKind::ApiVersions(r) = c
            .call(
                ApiKey::ApiVersions,
                v,
                RequestKind::ApiVersions(ApiVersionsRequest::default()),
            )
            .await
        else {
            panic!()
        };
        assert_eq!(r.error_code, 0);
        assert_eq!(r.api_keys.len(), SUPPORTED.len());
    }
    // Metadata auto-creates the topic at every version.
    for v in versions(ApiKey::Metadata) {
        let req = auto_create("vt");
        let ResponseKind::Metadata(r) = c
            .call(ApiKey::Metadata, v, RequestKind::Metadata(req))
            .await
        else {
            panic!()
        };
        assert_eq!(r.brokers.len(), 1, "v{v}");
        assert_eq!(r.topics[0].error_code, 0, "v{v}");
        assert_eq!(r.topics[0].partitions[0].leader_id.0, 1, "v{v}");
    }
    // An empty topic list: every topic at v0 (which has no null list), none
    // from v1 (where null asks for all).
    for v in versions(ApiKey::Metadata) {
        let mut req = MetadataRequest::default();
        req.topics = Some(Vec::new());
        let ResponseKind::Metadata(r) = c
            .call(ApiKey::Metadata, v, RequestKind::Metadata(req))
            .await
        else {
            panic!()
        };
        let names: Vec<String> = r
            .topics
            .iter()
            .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
            .collect();
        let want: Vec<String> = if v == 0 {
            vec!["vt".into()]
        } else {
            Vec::new()
        };
        assert_eq!(names, want, "v{v}");
    }
    // Produce at each version appends one batch; offsets follow.
    let mut expected_offset = 0i64;
    for v in versions(ApiKey::Produce) {
        let mut pd = PartitionProduceData::default();
        pd.index = 0;
        pd.records = Some(one_batch(&format!("v{v}"), 1_000 + v as i64));
        let mut td = TopicProduceData::default();
        td.name = topic("vt");
        td.partition_data = vec![pd];
        let mut req = ProduceRequest::default();
        req.acks = -1;
        req.timeout_ms = 5000;
        req.topic_data = vec![td];
        let ResponseKind::Produce(r) = c.call(ApiKey::Produce, v, RequestKind::Produce(req)).await
        else {
            panic!()
        };
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(p.error_code, 0, "v{v}");
        assert_eq!(p.base_offset, expected_offset, "v{v}");
        expected_offset += 1;
    }
    // Fetch from offset 1 at each version: the batches from there on.
    for v in versions(ApiKey::Fetch) {
        let req = fetch_one("vt", 1, 100);
        let ResponseKind::Fetch(r) = c.call(ApiKey::Fetch, v, RequestKind::Fetch(req)).await else {
            panic!()
        };
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "v{v}");
        assert_eq!(p.high_watermark, expected_offset, "v{v}");
        let recs = p.records.clone().unwrap();
        let first = floe_storage::batch::BatchView::parse(&recs, usize::MAX).unwrap();
        assert_eq!(first.base_offset(), 1, "v{v}");
    }
    // ListOffsets: latest, earliest, and by time.
    for v in versions(ApiKey::ListOffsets) {
        for (ts, want) in [(-1i64, expected_offset), (-2, 0), (1_004, 1)] {
            let mut lp = ListOffsetsPartition::default();
            lp.partition_index = 0;
            lp.timestamp = ts;
            let mut lt = ListOffsetsTopic::default();
            lt.name = topic("vt");
            lt.partitions = vec![lp];
            let mut req = ListOffsetsRequest::default();
            req.replica_id = BrokerId(-1);
            req.topics = vec![lt];
            let ResponseKind::ListOffsets(r) = c
                .call(ApiKey::ListOffsets, v, RequestKind::ListOffsets(req))
                .await
            else {
                panic!()
            };
            let p = &r.topics[0].partitions[0];
            assert_eq!((p.error_code, p.offset), (0, want), "v{v} ts {ts}");
        }
    }
    // OffsetForLeaderEpoch: every epoch up to the owner's ends at the high
    // watermark (the committed log is never truncated); a newer one is
    // undefined; a client ahead of the owner, or an unknown topic, an error.
    let owned = e.broker.owned();
    let epoch = i32::try_from(e.broker.log(&owned[0]).unwrap().epoch()).unwrap();
    for v in versions(ApiKey::OffsetForLeaderEpoch) {
        for (name, current, asked, want) in [
            ("vt", epoch, epoch, (0, epoch, expected_offset)),
            ("vt", -1, 0, (0, 0, expected_offset)),
            ("vt", epoch, epoch + 1, (0, -1, -1)),
            ("vt", epoch + 1, epoch, (75, -1, -1)),
            ("nope", -1, 0, (3, -1, -1)),
        ] {
            let mut p = offset_for_leader_epoch_request::OffsetForLeaderPartition::default();
            p.partition = 0;
            p.current_leader_epoch = current;
            p.leader_epoch = asked;
            let mut t = offset_for_leader_epoch_request::OffsetForLeaderTopic::default();
            t.topic = topic(name);
            t.partitions = vec![p];
            let mut req = OffsetForLeaderEpochRequest::default();
            req.replica_id = BrokerId(-1);
            req.topics = vec![t];
            let ResponseKind::OffsetForLeaderEpoch(r) = c
                .call(
                    ApiKey::OffsetForLeaderEpoch,
                    v,
                    RequestKind::OffsetForLeaderEpoch(req),
                )
                .await
            else {
                panic!()
            };
            let p = &r.topics[0].partitions[0];
            assert_eq!(
                (p.error_code, p.leader_epoch, p.end_offset),
                want,
                "v{v} {name} current {current} asked {asked}"
            );
        }
    }
    // An unknown topic answers UNKNOWN_TOPIC_OR_PARTITION, not a hang.
    let mut pd = PartitionProduceData::default();
    pd.records = Some(one_batch("x", 1));
    let mut td = TopicProduceData::default();
    td.name = topic("nope");
    td.partition_data = vec![pd];
    let mut req = ProduceRequest::default();
    req.acks = 1;
    req.topic_data = vec![td];
    let ResponseKind::Produce(r) = c.call(ApiKey::Produce, 9, RequestKind::Produce(req)).await
    else {
        panic!()
    };
    assert_eq!(r.responses[0].partition_responses[0].error_code, 3);
    // FindCoordinator refuses a key type it does not know.
    let mut req = FindCoordinatorRequest::default();
    req.key = StrBytes::from_static_str("g");
    req.key_type = 5;
    let ResponseKind::FindCoordinator(r) = c
        .call(
            ApiKey::FindCoordinator,
            2,
            RequestKind::FindCoordinator(req),
        )
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 42, "an unknown key type is INVALID_REQUEST");
    e.broker.shutdown().await;
    if let Some(n) = e.cluster.meta_node {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_zero_gets_no_answer_and_later_requests_still_do() {
    let e = env().await;
    let mut c = Conn::open(e.kafka).await;
    let req = auto_create("z");
    c.call(ApiKey::Metadata, 9, RequestKind::Metadata(req))
        .await;
    // Pipelined: an acks=0 produce, then ApiVersions; the one answer is ApiVersions'.
    let mut pd = PartitionProduceData::default();
    pd.records = Some(one_batch("x", 1));
    let mut td = TopicProduceData::default();
    td.name = topic("z");
    td.partition_data = vec![pd];
    let mut req = ProduceRequest::default();
    req.acks = 0;
    req.topic_data = vec![td];
    let mut h = RequestHeader::default();
    h.request_api_key = ApiKey::Produce as i16;
    h.request_api_version = 9;
    h.correlation_id = 1000;
    let frame = encode_request(&h, &RequestKind::Produce(req)).unwrap();
    c.sock.write_all(&frame).await.unwrap();
    let ResponseKind::ApiVersions(_) = c
        .call(
            ApiKey::ApiVersions,
            3,
            RequestKind::ApiVersions(ApiVersionsRequest::default()),
        )
        .await
    else {
        panic!()
    };
    e.broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_records_on_a_compacted_topic_are_refused_with_record_errors() {
    let e = env().await;
    let t = e
        .cluster
        .create_topic("compacted", 1, &[("cleanup.policy", "compact,delete")])
        .await;
    floe_testkit::wait_owned(&e.broker, floe_storage::PartitionKey::new(t, 0)).await;
    let mut c = Conn::open(e.kafka).await;
    let keys = |keys: &[Option<&str>]| {
        let mut b = BatchBuilder::new(0, 1);
        for k in keys {
            b.push(RecordSpec::new(
                k.map(|k| k.as_bytes().to_vec()),
                Some(b"v".to_vec()),
                0,
            ));
        }
        b.build(Compression::Snappy).unwrap()
    };
    let produce = |batch: Bytes| {
        let mut pd = PartitionProduceData::default();
        pd.records = Some(batch);
        let mut td = TopicProduceData::default();
        td.name = topic("compacted");
        td.partition_data = vec![pd];
        let mut req = ProduceRequest::default();
        req.acks = -1;
        req.timeout_ms = 5000;
        req.topic_data = vec![td];
        RequestKind::Produce(req)
    };
    for v in versions(ApiKey::Produce).filter(|v| *v >= 3) {
        let batch = keys(&[Some("a"), None, Some("c"), None]);
        let ResponseKind::Produce(r) = c.call(ApiKey::Produce, v, produce(batch)).await else {
            panic!()
        };
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(p.error_code, 87, "INVALID_RECORD at v{v}");
        if v >= 8 {
            let indexes: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
            assert_eq!(indexes, vec![1, 3], "v{v}");
            assert!(
                p.record_errors
                    .iter()
                    .all(|e| e.batch_index_error_message.is_some())
            );
            assert!(p.error_message.is_some(), "v{v}");
        }
    }
    let ResponseKind::Produce(r) = c
        .call(ApiKey::Produce, 9, produce(keys(&[Some("a"), Some("b")])))
        .await
    else {
        panic!()
    };
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(
        (p.error_code, p.base_offset),
        (0, 0),
        "nothing stored before"
    );
    e.broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_idempotent_batch_is_stored_once() {
    let e = env().await;
    let mut c = Conn::open(e.kafka).await;
    let req = auto_create("idem");
    c.call(ApiKey::Metadata, 9, RequestKind::Metadata(req))
        .await;
    let mut ireq = InitProducerIdRequest::default();
    ireq.transactional_id = None;
    ireq.producer_id = ProducerId(-1);
    ireq.producer_epoch = -1;
    let ResponseKind::InitProducerId(init) = c
        .call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(ireq))
        .await
    else {
        panic!()
    };
    assert_eq!(init.error_code, 0);
    assert!(init.producer_id.0 >= 0);
    assert_eq!(init.producer_epoch, 0);
    let batch = BatchBuilder::new(0, 1)
        .producer(init.producer_id.0, 0, 0, false)
        .push(RecordSpec::new(None, Some(b"once".to_vec()), 0))
        .build(Compression::None)
        .unwrap();
    let produce = || {
        let mut pd = PartitionProduceData::default();
        pd.records = Some(batch.clone());
        let mut td = TopicProduceData::default();
        td.name = topic("idem");
        td.partition_data = vec![pd];
        let mut req = ProduceRequest::default();
        req.acks = -1;
        req.timeout_ms = 5000;
        req.topic_data = vec![td];
        RequestKind::Produce(req)
    };
    let ResponseKind::Produce(first) = c.call(ApiKey::Produce, 9, produce()).await else {
        panic!()
    };
    // The client lost the answer: a new connection, the same request again.
    let mut c2 = Conn {
        sock: TcpStream::connect(e.kafka).await.unwrap(),
        corr: 0,
    };
    let ResponseKind::Produce(again) = c2.call(ApiKey::Produce, 9, produce()).await else {
        panic!()
    };
    let (a, b) = (
        &first.responses[0].partition_responses[0],
        &again.responses[0].partition_responses[0],
    );
    assert_eq!((a.error_code, b.error_code), (0, 0));
    assert_eq!(
        a.base_offset, b.base_offset,
        "acknowledged with the original offset"
    );
    let mut lp = ListOffsetsPartition::default();
    lp.timestamp = -1;
    let mut lt = ListOffsetsTopic::default();
    lt.name = topic("idem");
    lt.partitions = vec![lp];
    let mut req = ListOffsetsRequest::default();
    req.topics = vec![lt];
    let ResponseKind::ListOffsets(r) = c2
        .call(ApiKey::ListOffsets, 5, RequestKind::ListOffsets(req))
        .await
    else {
        panic!()
    };
    assert_eq!(r.topics[0].partitions[0].offset, 1, "stored once");
    // A transactional id is refused plainly without `--transactions`.
    let mut req = InitProducerIdRequest::default();
    req.transactional_id = Some(TransactionalId(StrBytes::from_static_str("tx")));
    let ResponseKind::InitProducerId(r) = c2
        .call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(req))
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 35);
    e.broker.shutdown().await;
}

/// Where flushes are not paced (a local folder), a produce request's
/// writes are flushed together as soon as the request is sequenced, not at
/// the flusher's next tick: here the tick is an hour away, so without that
/// the request would not be answered at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_request_is_flushed_at_once_in_one_object_where_flushes_are_not_paced() {
    let e = env_configured(
        false,
        None,
        |m| m,
        |c| {
            c.flush = floe_broker::config::FlushPolicy {
                interval: Duration::from_secs(3_600),
                bytes: 8 * 1024 * 1024,
                paced: false,
                max_in_flight: 1,
                after_take_over: Duration::ZERO,
            };
        },
    )
    .await;
    let mut c = Conn::open(e.kafka).await;
    let mut req = CreateTopicsRequest::default();
    let mut t = CreatableTopic::default();
    t.name = topic("together");
    t.num_partitions = 3;
    t.replication_factor = 1;
    req.topics = vec![t];
    req.timeout_ms = 10_000;
    let ResponseKind::CreateTopics(created) = c
        .call(ApiKey::CreateTopics, 5, RequestKind::CreateTopics(req))
        .await
    else {
        panic!()
    };
    assert_eq!(created.topics[0].error_code, 0);
    let written = || -> u64 { e.broker.pool().stats().iter().map(|s| s.written).sum() };
    for round in 0..2 {
        let before = written();
        let mut td = TopicProduceData::default();
        td.name = topic("together");
        td.partition_data = (0..3)
            .map(|p| {
                let mut pd = PartitionProduceData::default();
                pd.index = p;
                pd.records = Some(one_batch(&format!("r{round}p{p}"), 0));
                pd
            })
            .collect();
        let mut req = ProduceRequest::default();
        req.acks = -1;
        req.timeout_ms = 5000;
        req.topic_data = vec![td];
        let answered = tokio::time::timeout(
            Duration::from_secs(30),
            c.call(ApiKey::Produce, 9, RequestKind::Produce(req)),
        )
        .await
        .expect("the request was flushed without waiting for the hour's tick");
        let ResponseKind::Produce(r) = answered else {
            panic!()
        };
        let codes: Vec<i16> = r.responses[0]
            .partition_responses
            .iter()
            .map(|p| p.error_code)
            .collect();
        assert_eq!(codes, vec![0, 0, 0]);
        assert_eq!(
            written() - before,
            1,
            "the three partitions in one WAL object"
        );
    }
    e.broker.shutdown().await;
}

fn versions_of(key: ApiKey) -> std::ops::RangeInclusive<i16> {
    versions(key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_group_api_answers_at_every_advertised_version() {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::leave_group_request::MemberIdentity;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;

    let e = env().await;
    let mut c = Conn::open(e.kafka).await;
    // Offsets are stored only for a topic that exists: auto-create "vt".
    let req = auto_create("vt");
    let ResponseKind::Metadata(r) = c
        .call(ApiKey::Metadata, 9, RequestKind::Metadata(req))
        .await
    else {
        panic!()
    };
    assert_eq!(r.topics[0].error_code, 0);
    // Wait until the coordinator shards have an owner.
    let mut found = false;
    for _ in 0..100 {
        let mut req = FindCoordinatorRequest::default();
        req.key = StrBytes::from_static_str("g0");
        let ResponseKind::FindCoordinator(r) = c
            .call(
                ApiKey::FindCoordinator,
                2,
                RequestKind::FindCoordinator(req),
            )
            .await
        else {
            panic!()
        };
        if r.error_code == 0 {
            assert_eq!(r.node_id.0, 1);
            found = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(found, "no coordinator");
    for v in versions_of(ApiKey::FindCoordinator) {
        let mut req = FindCoordinatorRequest::default();
        if v >= 4 {
            req.coordinator_keys = vec![StrBytes::from_static_str("g0")];
        } else {
            req.key = StrBytes::from_static_str("g0");
        }
        let ResponseKind::FindCoordinator(r) = c
            .call(
                ApiKey::FindCoordinator,
                v,
                RequestKind::FindCoordinator(req),
            )
            .await
        else {
            panic!()
        };
        let err = if v >= 4 {
            r.coordinators[0].error_code
        } else {
            r.error_code
        };
        assert_eq!(err, 0, "FindCoordinator v{v}");
    }
    for v in versions_of(ApiKey::JoinGroup) {
        let group = GroupId(StrBytes::from_string(format!("group-v{v}")));
        let mut member = StrBytes::default();
        let mut joined = None;
        // A member id asked for (79) takes one more call; a coordinator still
        // loading its shard's groups (14) is retried after a pause, as
        // clients do.
        for _ in 0..50 {
            let mut p = JoinGroupRequestProtocol::default();
            p.name = StrBytes::from_static_str("range");
            p.metadata = Bytes::from_static(b"meta");
            let mut req = JoinGroupRequest::default();
            req.group_id = group.clone();
            req.session_timeout_ms = 10_000;
            if v >= 1 {
                req.rebalance_timeout_ms = 10_000;
            }
            req.member_id = member.clone();
            req.group_instance_id = None;
            req.protocol_type = StrBytes::from_static_str("consumer");
            req.protocols = vec![p];
            let ResponseKind::JoinGroup(r) = c
                .call(ApiKey::JoinGroup, v, RequestKind::JoinGroup(req))
                .await
            else {
                panic!()
            };
            if r.error_code == 79 {
                member = r.member_id.clone();
                continue;
            }
            if r.error_code == 14 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            assert_eq!(r.error_code, 0, "JoinGroup v{v}");
            joined = Some(r);
            break;
        }
        let j = joined.unwrap_or_else(|| panic!("JoinGroup v{v} never joined"));
        assert_eq!(j.leader, j.member_id, "v{v}: the only member leads");
        assert_eq!(j.members.len(), 1);
        let sv = v.min(*versions_of(ApiKey::SyncGroup).end());
        let mut a = SyncGroupRequestAssignment::default();
        a.member_id = j.member_id.clone();
        a.assignment = Bytes::from_static(b"assigned");
        let mut req = SyncGroupRequest::default();
        req.group_id = group.clone();
        req.generation_id = j.generation_id;
        req.member_id = j.member_id.clone();
        req.group_instance_id = None;
        req.assignments = vec![a];
        let ResponseKind::SyncGroup(r) = c
            .call(ApiKey::SyncGroup, sv, RequestKind::SyncGroup(req))
            .await
        else {
            panic!()
        };
        assert_eq!(
            (r.error_code, &r.assignment[..]),
            (0, &b"assigned"[..]),
            "SyncGroup v{sv}"
        );
        let hv = v.min(*versions_of(ApiKey::Heartbeat).end());
        let mut req = HeartbeatRequest::default();
        req.group_id = group.clone();
        req.generation_id = j.generation_id;
        req.member_id = j.member_id.clone();
        req.group_instance_id = None;
        let ResponseKind::Heartbeat(r) = c
            .call(ApiKey::Heartbeat, hv, RequestKind::Heartbeat(req))
            .await
        else {
            panic!()
        };
        assert_eq!(r.error_code, 0, "Heartbeat v{hv}");
        // Commits: a stale generation is refused, the current one stored.
        for cv in versions_of(ApiKey::OffsetCommit) {
            // The refused commits (stale generation, unknown member) come
            // last: the fetch below sees the accepted one, so they stored nothing.
            for (generation, member, want) in [
                (j.generation_id, j.member_id.clone(), 0),
                (j.generation_id + 1, j.member_id.clone(), 22),
                (j.generation_id, StrBytes::from_static_str("nobody"), 25),
            ] {
                let mut cp = OffsetCommitRequestPartition::default();
                cp.partition_index = 0;
                cp.committed_offset = if want == 0 { 40 + i64::from(cv) } else { 999 };
                cp.committed_metadata = Some(StrBytes::from_static_str("m"));
                let mut ct = OffsetCommitRequestTopic::default();
                ct.name = topic("vt");
                ct.partitions = vec![cp];
                let mut req = OffsetCommitRequest::default();
                req.group_id = group.clone();
                req.generation_id_or_member_epoch = generation;
                req.member_id = member;
                req.group_instance_id = None;
                req.topics = vec![ct];
                let ResponseKind::OffsetCommit(r) = c
                    .call(ApiKey::OffsetCommit, cv, RequestKind::OffsetCommit(req))
                    .await
                else {
                    panic!()
                };
                assert_eq!(
                    r.topics[0].partitions[0].error_code, want,
                    "OffsetCommit v{cv} gen {generation}"
                );
            }
        }
        // A negative partition and a topic that does not exist: refused
        // per partition, nothing stored (partition 0 keeps the last commit).
        let cv = *versions_of(ApiKey::OffsetCommit).end();
        let mut req = OffsetCommitRequest::default();
        req.group_id = group.clone();
        req.generation_id_or_member_epoch = j.generation_id;
        req.member_id = j.member_id.clone();
        req.topics = [("vt", -1), ("no-such-topic", 0)]
            .into_iter()
            .map(|(name, partition)| {
                let mut cp = OffsetCommitRequestPartition::default();
                cp.partition_index = partition;
                cp.committed_offset = 999;
                let mut ct = OffsetCommitRequestTopic::default();
                ct.name = topic(name);
                ct.partitions = vec![cp];
                ct
            })
            .collect();
        let ResponseKind::OffsetCommit(r) = c
            .call(ApiKey::OffsetCommit, cv, RequestKind::OffsetCommit(req))
            .await
        else {
            panic!()
        };
        let codes: Vec<i16> = r
            .topics
            .iter()
            .map(|t| t.partitions[0].error_code)
            .collect();
        assert_eq!(codes, vec![3, 3], "UNKNOWN_TOPIC_OR_PARTITION");
        let last = 40 + i64::from(*versions_of(ApiKey::OffsetCommit).end());
        for fv in versions_of(ApiKey::OffsetFetch) {
            let mut req = OffsetFetchRequest::default();
            if fv >= 8 {
                let mut t = OffsetFetchRequestTopics::default();
                t.name = topic("vt");
                t.partition_indexes = vec![0, 1];
                let mut g = OffsetFetchRequestGroup::default();
                g.group_id = group.clone();
                g.topics = Some(vec![t]);
                req.groups = vec![g];
            } else {
                let mut t = OffsetFetchRequestTopic::default();
                t.name = topic("vt");
                t.partition_indexes = vec![0, 1];
                req.group_id = group.clone();
                req.topics = Some(vec![t]);
            }
            let ResponseKind::OffsetFetch(r) = c
                .call(ApiKey::OffsetFetch, fv, RequestKind::OffsetFetch(req))
                .await
            else {
                panic!()
            };
            let got: Vec<i64> = if fv >= 8 {
                r.groups[0].topics[0]
                    .partitions
                    .iter()
                    .map(|p| p.committed_offset)
                    .collect()
            } else {
                r.topics[0]
                    .partitions
                    .iter()
                    .map(|p| p.committed_offset)
                    .collect()
            };
            assert_eq!(got, vec![last, -1], "OffsetFetch v{fv}");
        }
        for dv in versions_of(ApiKey::DescribeGroups) {
            let mut req = DescribeGroupsRequest::default();
            req.groups = vec![group.clone()];
            let ResponseKind::DescribeGroups(r) = c
                .call(ApiKey::DescribeGroups, dv, RequestKind::DescribeGroups(req))
                .await
            else {
                panic!()
            };
            assert_eq!(
                r.groups[0].group_state.as_str(),
                "Stable",
                "DescribeGroups v{dv}"
            );
            assert_eq!(r.groups[0].members.len(), 1);
        }
        for lv in versions_of(ApiKey::ListGroups) {
            let ResponseKind::ListGroups(r) = c
                .call(
                    ApiKey::ListGroups,
                    lv,
                    RequestKind::ListGroups(ListGroupsRequest::default()),
                )
                .await
            else {
                panic!()
            };
            assert!(
                r.groups.iter().any(|g| g.group_id == group),
                "ListGroups v{lv}"
            );
        }
        // OffsetDelete refuses the topic while a live member subscribes to it.
        let offset_delete = || {
            use kafka_protocol::messages::offset_delete_request::{
                OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
            };
            let mut p = OffsetDeleteRequestPartition::default();
            p.partition_index = 0;
            let mut t = OffsetDeleteRequestTopic::default();
            t.name = topic("vt");
            t.partitions = vec![p];
            let mut req = OffsetDeleteRequest::default();
            req.group_id = group.clone();
            req.topics = vec![t];
            RequestKind::OffsetDelete(req)
        };
        let ResponseKind::OffsetDelete(r) = c.call(ApiKey::OffsetDelete, 0, offset_delete()).await
        else {
            panic!()
        };
        assert_eq!(
            r.topics[0].partitions[0].error_code, 86,
            "GROUP_SUBSCRIBED_TO_TOPIC"
        );
        let lv = v.min(*versions_of(ApiKey::LeaveGroup).end());
        let mut req = LeaveGroupRequest::default();
        req.group_id = group.clone();
        if lv >= 3 {
            let mut m = MemberIdentity::default();
            m.member_id = j.member_id.clone();
            m.group_instance_id = None;
            req.members = vec![m];
        } else {
            req.member_id = j.member_id.clone();
        }
        let ResponseKind::LeaveGroup(r) = c
            .call(ApiKey::LeaveGroup, lv, RequestKind::LeaveGroup(req))
            .await
        else {
            panic!()
        };
        assert_eq!(r.error_code, 0, "LeaveGroup v{lv}");
        let ResponseKind::OffsetDelete(r) = c.call(ApiKey::OffsetDelete, 0, offset_delete()).await
        else {
            panic!()
        };
        assert_eq!(
            (r.error_code, r.topics[0].partitions[0].error_code),
            (0, 0),
            "empty group"
        );
        let mut t = OffsetFetchRequestTopic::default();
        t.name = topic("vt");
        t.partition_indexes = vec![0];
        let mut req = OffsetFetchRequest::default();
        req.group_id = group.clone();
        req.topics = Some(vec![t]);
        let ResponseKind::OffsetFetch(r) = c
            .call(ApiKey::OffsetFetch, 6, RequestKind::OffsetFetch(req))
            .await
        else {
            panic!()
        };
        assert_eq!(r.topics[0].partitions[0].committed_offset, -1, "deleted");
        let dv = v.min(*versions_of(ApiKey::DeleteGroups).end());
        let mut req = DeleteGroupsRequest::default();
        req.groups_names = vec![group.clone()];
        let ResponseKind::DeleteGroups(r) = c
            .call(ApiKey::DeleteGroups, dv, RequestKind::DeleteGroups(req))
            .await
        else {
            panic!()
        };
        assert_eq!(r.results[0].error_code, 0, "DeleteGroups v{dv}");
    }
    e.broker.shutdown().await;
}

/// Fetch (v9+) and ListOffsets (v4+) check the client's current leader
/// epoch against the one Metadata reports: older is FENCED_LEADER_EPOCH
/// (74), newer UNKNOWN_LEADER_EPOCH (75), -1 no check. And a fetch naming
/// one partition many times is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_check_the_client_leader_epoch_and_name_a_partition_once() {
    let e = env().await;
    let mut c = Conn::open(e.kafka).await;
    let req = auto_create("ep");
    let ResponseKind::Metadata(r) = c
        .call(ApiKey::Metadata, 9, RequestKind::Metadata(req))
        .await
    else {
        panic!()
    };
    let epoch = r.topics[0].partitions[0].leader_epoch;
    assert!(epoch >= 0, "{epoch}");
    let mut pd = PartitionProduceData::default();
    pd.records = Some(one_batch("x", 1_000));
    let mut td = TopicProduceData::default();
    td.name = topic("ep");
    td.partition_data = vec![pd];
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 5000;
    req.topic_data = vec![td];
    let ResponseKind::Produce(r) = c.call(ApiKey::Produce, 9, RequestKind::Produce(req)).await
    else {
        panic!()
    };
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);

    let fetch = |epoch: i32, times: usize| {
        let mut ft = FetchTopic::default();
        ft.topic = topic("ep");
        for _ in 0..times {
            let mut fp = FetchPartition::default();
            fp.fetch_offset = 0;
            fp.partition_max_bytes = 1 << 20;
            fp.current_leader_epoch = epoch;
            ft.partitions.push(fp);
        }
        let mut req = FetchRequest::default();
        req.max_wait_ms = 0;
        req.max_bytes = 1 << 20;
        req.topics = vec![ft];
        RequestKind::Fetch(req)
    };
    let list = |epoch: i32| {
        let mut lp = ListOffsetsPartition::default();
        lp.timestamp = -1;
        lp.current_leader_epoch = epoch;
        let mut lt = ListOffsetsTopic::default();
        lt.name = topic("ep");
        lt.partitions = vec![lp];
        let mut req = ListOffsetsRequest::default();
        req.replica_id = BrokerId(-1);
        req.topics = vec![lt];
        RequestKind::ListOffsets(req)
    };
    let mut cases = vec![(-1, 0i16), (epoch, 0), (epoch + 1, 75)];
    if epoch > 0 {
        cases.push((epoch - 1, 74));
    }
    for (asked, want) in cases {
        for v in 9..=*versions(ApiKey::Fetch).end() {
            let ResponseKind::Fetch(r) = c.call(ApiKey::Fetch, v, fetch(asked, 1)).await else {
                panic!()
            };
            let p = &r.responses[0].partitions[0];
            assert_eq!(p.error_code, want, "fetch v{v} epoch {asked} of {epoch}");
            let has = p.records.as_ref().is_some_and(|r| !r.is_empty());
            assert_eq!(has, want == 0, "fetch v{v}");
        }
        for v in 4..=*versions(ApiKey::ListOffsets).end() {
            let ResponseKind::ListOffsets(r) = c.call(ApiKey::ListOffsets, v, list(asked)).await
            else {
                panic!()
            };
            let p = &r.topics[0].partitions[0];
            assert_eq!(
                p.error_code, want,
                "list offsets v{v} epoch {asked} of {epoch}"
            );
        }
    }
    // Before v9 (v4) the field is not on the wire: no check.
    let ResponseKind::Fetch(r) = c.call(ApiKey::Fetch, 4, fetch(epoch + 1, 1)).await else {
        panic!()
    };
    assert_eq!(r.responses[0].partitions[0].error_code, 0);

    // One partition named 200 times: one entry, its batch once.
    let ResponseKind::Fetch(r) = c.call(ApiKey::Fetch, 4, fetch(-1, 200)).await else {
        panic!()
    };
    assert_eq!(r.responses.len(), 1);
    assert_eq!(r.responses[0].partitions.len(), 1);
    let recs = r.responses[0].partitions[0].records.clone().unwrap();
    let first = floe_storage::batch::BatchView::parse(&recs, usize::MAX).unwrap();
    assert_eq!(first.size(), recs.len(), "the one batch, once");
    e.broker.shutdown().await;
    if let Some(n) = e.cluster.meta_node {
        n.shutdown().await;
    }
}

/// A graceful stop: the listener closes at once (new connections are
/// refused), a request the proxy has read is still answered (a long-polling
/// Fetch), and then the connection is closed; `shutdown` returns once it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_proxy_answers_what_it_read_then_closes() {
    let e = env().await;
    let mut c = Conn::open(e.kafka).await;
    c.call(
        ApiKey::Metadata,
        9,
        RequestKind::Metadata(auto_create("st")),
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while e.broker.owned().is_empty() {
        assert!(std::time::Instant::now() < deadline, "never owned");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A fetch at the end of an empty partition waits up to max_wait_ms.
    let req = fetch_one("st", 0, 1500);
    let mut h = RequestHeader::default();
    h.request_api_key = ApiKey::Fetch as i16;
    h.request_api_version = 12;
    h.correlation_id = 77;
    let frame = encode_request(&h, &RequestKind::Fetch(req)).unwrap();
    c.sock.write_all(&frame).await.unwrap();
    // Read by the proxy and waiting for data when the stop comes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let stop = tokio::spawn(async move {
        let left = e.proxy.shutdown(Duration::from_secs(10)).await;
        (left, e.proxy)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        TcpStream::connect(e.kafka).await.is_err(),
        "new connections are refused"
    );
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        codec::read_frame(&mut c.sock, 64 << 20),
    )
    .await
    .unwrap()
    .unwrap()
    .expect("the fetch read before the stop is answered");
    let d = decode_response(ApiKey::Fetch, 12, answer).unwrap();
    assert_eq!(d.header.correlation_id, 77);
    let ResponseKind::Fetch(f) = d.body else {
        panic!()
    };
    assert_eq!(f.responses[0].partitions[0].error_code, 0);
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "answered when its wait ended, after the stop began"
    );
    let closed = tokio::time::timeout(
        Duration::from_secs(10),
        codec::read_frame(&mut c.sock, 64 << 20),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(closed.is_none(), "then the connection is closed");
    let (left, _proxy) = stop.await.unwrap();
    assert_eq!(left, 0, "every connection closed within the grace period");
    assert!(started.elapsed() < Duration::from_secs(10));
    e.broker.shutdown().await;
}

fn txn_versions(key: ApiKey) -> std::ops::RangeInclusive<i16> {
    let (_, min, max) = TXN_SUPPORTED.iter().find(|(k, _, _)| *k == key).unwrap();
    *min..=*max
}

/// InitProducerId v4 with a transactional id, asked again while the
/// coordinator's shard has no owner yet (or a previous instance's
/// transaction is being aborted); the producer id and epoch.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transaction_api_answers_at_every_advertised_version() {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };

    let e = env_with(true, None).await;
    let mut c = Conn::open(e.kafka).await;
    let ResponseKind::ApiVersions(r) = c
        .call(
            ApiKey::ApiVersions,
            3,
            RequestKind::ApiVersions(ApiVersionsRequest::default()),
        )
        .await
    else {
        panic!()
    };
    assert_eq!(r.api_keys.len(), SUPPORTED.len() + TXN_SUPPORTED.len());
    for t in ["txv", "txv2"] {
        c.call(ApiKey::Metadata, 9, RequestKind::Metadata(auto_create(t)))
            .await;
    }
    let txv = |parts: Vec<i32>| {
        let mut t = AddPartitionsToTxnTopic::default();
        t.name = topic("txv");
        t.partitions = parts;
        t
    };
    let codes = |r: &AddPartitionsToTxnResponse, v: i16| -> Vec<i16> {
        let topics = if v <= 3 {
            r.results_by_topic_v3_and_below.clone()
        } else {
            r.results_by_transaction[0].topic_results.clone()
        };
        topics
            .iter()
            .flat_map(|t| {
                t.results_by_partition
                    .iter()
                    .map(|p| p.partition_error_code)
            })
            .collect()
    };
    for v in txn_versions(ApiKey::AddPartitionsToTxn) {
        let id = format!("tx-ap{v}");
        let (pid, epoch) = init_txn(&mut c, &id).await;
        let add = |topics: Vec<AddPartitionsToTxnTopic>, v: i16, verify: bool| {
            let mut r = AddPartitionsToTxnRequest::default();
            if v <= 3 {
                r.v3_and_below_transactional_id = txn_id(&id);
                r.v3_and_below_producer_id = pid;
                r.v3_and_below_producer_epoch = epoch;
                r.v3_and_below_topics = topics;
            } else {
                let mut t = AddPartitionsToTxnTransaction::default();
                t.transactional_id = txn_id(&id);
                t.producer_id = pid;
                t.producer_epoch = epoch;
                t.verify_only = verify;
                t.topics = topics;
                r.transactions = vec![t];
            }
            RequestKind::AddPartitionsToTxn(r)
        };
        // A partition that does not exist: nothing is added.
        let ResponseKind::AddPartitionsToTxn(r) = c
            .call(
                ApiKey::AddPartitionsToTxn,
                v,
                add(vec![txv(vec![0, 9])], v, false),
            )
            .await
        else {
            panic!()
        };
        assert_eq!(codes(&r, v), [55, 3], "v{v}");
        let ResponseKind::AddPartitionsToTxn(r) = c
            .call(
                ApiKey::AddPartitionsToTxn,
                v,
                add(vec![txv(vec![0])], v, false),
            )
            .await
        else {
            panic!()
        };
        assert_eq!(codes(&r, v), [0], "v{v}");
        if v >= 4 {
            // Verify-only answers from the coordinator's state: partition 0 is
            // in the transaction; nothing else is added.
            let mut other = txv(vec![0]);
            other.name = topic("txv2");
            let ResponseKind::AddPartitionsToTxn(r) = c
                .call(
                    ApiKey::AddPartitionsToTxn,
                    v,
                    add(vec![txv(vec![0]), other], v, true),
                )
                .await
            else {
                panic!()
            };
            assert_eq!(codes(&r, v), [0, 48], "v{v}");
        }
    }

    for v in txn_versions(ApiKey::AddOffsetsToTxn) {
        let id = format!("tx-ao{v}");
        let (pid, epoch) = init_txn(&mut c, &id).await;
        let mut req = AddOffsetsToTxnRequest::default();
        req.transactional_id = txn_id(&id);
        req.producer_id = pid;
        req.producer_epoch = epoch;
        req.group_id = GroupId(StrBytes::from_string(format!("g-ao{v}")));
        let ResponseKind::AddOffsetsToTxn(r) = c
            .call(
                ApiKey::AddOffsetsToTxn,
                v,
                RequestKind::AddOffsetsToTxn(req),
            )
            .await
        else {
            panic!()
        };
        assert_eq!(r.error_code, 0, "v{v}");
        let req_at = || {
            let mut p = TxnOffsetCommitRequestPartition::default();
            p.partition_index = 0;
            p.committed_offset = 7;
            let mut t = TxnOffsetCommitRequestTopic::default();
            t.name = topic("txv");
            t.partitions = vec![p];
            let mut req = TxnOffsetCommitRequest::default();
            req.transactional_id = txn_id(&id);
            req.group_id = GroupId(StrBytes::from_string(format!("g-ao{v}")));
            req.producer_id = pid;
            req.producer_epoch = epoch;
            req.topics = vec![t];
            req
        };
        for tv in txn_versions(ApiKey::TxnOffsetCommit) {
            let req = req_at();
            let ResponseKind::TxnOffsetCommit(r) = c
                .call(
                    ApiKey::TxnOffsetCommit,
                    tv,
                    RequestKind::TxnOffsetCommit(req),
                )
                .await
            else {
                panic!()
            };
            assert_eq!(r.topics[0].partitions[0].error_code, 0, "v{tv}");
            if tv >= 3 {
                // v3 names the consumer: checked against the group (which
                // has no member) as OffsetCommit does.
                for (member, generation, code) in [("nobody", 1, 25), ("", 4, 22)] {
                    let mut req = req_at();
                    req.member_id = StrBytes::from_static_str(member);
                    req.generation_id = generation;
                    let ResponseKind::TxnOffsetCommit(r) = c
                        .call(
                            ApiKey::TxnOffsetCommit,
                            tv,
                            RequestKind::TxnOffsetCommit(req),
                        )
                        .await
                    else {
                        panic!()
                    };
                    assert_eq!(
                        r.topics[0].partitions[0].error_code, code,
                        "v{tv} member {member:?} generation {generation}"
                    );
                }
            }
        }
    }

    for v in txn_versions(ApiKey::EndTxn) {
        let id = format!("tx-end{v}");
        let (old, old_epoch) = init_txn(&mut c, &id).await;
        let (pid, epoch) = init_txn(&mut c, &id).await;
        let end = |pid, epoch| {
            let mut req = EndTxnRequest::default();
            req.transactional_id = txn_id(&id);
            req.producer_id = pid;
            req.producer_epoch = epoch;
            req.committed = true;
            RequestKind::EndTxn(req)
        };
        // The fenced instance: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before.
        let ResponseKind::EndTxn(r) = c.call(ApiKey::EndTxn, v, end(old, old_epoch)).await else {
            panic!()
        };
        assert_eq!(r.error_code, if v >= 2 { 90 } else { 47 }, "v{v}");
        // Nothing open: INVALID_TXN_STATE.
        let ResponseKind::EndTxn(r) = c.call(ApiKey::EndTxn, v, end(pid, epoch)).await else {
            panic!()
        };
        assert_eq!(r.error_code, 48, "v{v}");
    }

    let mut req = DescribeTransactionsRequest::default();
    req.transactional_ids = vec![txn_id("tx-ao0"), txn_id("tx-none")];
    let ResponseKind::DescribeTransactions(r) = c
        .call(
            ApiKey::DescribeTransactions,
            0,
            RequestKind::DescribeTransactions(req),
        )
        .await
    else {
        panic!()
    };
    assert_eq!(r.transaction_states[0].error_code, 0);
    assert_eq!(
        r.transaction_states[0].transaction_state.as_str(),
        "Ongoing"
    );
    assert_eq!(r.transaction_states[1].error_code, 105);
    for v in txn_versions(ApiKey::ListTransactions) {
        let mut req = ListTransactionsRequest::default();
        req.state_filters = vec![
            StrBytes::from_static_str("Ongoing"),
            StrBytes::from_static_str("Bogus"),
        ];
        req.duration_filter = -1;
        let ResponseKind::ListTransactions(r) = c
            .call(
                ApiKey::ListTransactions,
                v,
                RequestKind::ListTransactions(req),
            )
            .await
        else {
            panic!()
        };
        assert_eq!(r.error_code, 0);
        assert_eq!(r.unknown_state_filters.len(), 1);
        assert!(
            r.transaction_states
                .iter()
                .any(|t| t.transactional_id.0.as_str() == "tx-ao0")
        );
        assert!(
            r.transaction_states
                .iter()
                .all(|t| t.transaction_state.as_str() == "Ongoing")
        );
    }
    e.broker.shutdown().await;
    if let Some(n) = e.cluster.meta_node {
        n.shutdown().await;
    }
}

/// Fetch at isolation level 1 at every version stops at the last stable
/// offset and lists the aborted transactions; level 0 reads to the high
/// watermark and lists none; ListOffsets (v2+) answers the LSO for
/// read_committed; DescribeProducers shows the open transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_fetches_stop_at_the_last_stable_offset() {
    let e = env().await;
    let mut c = Conn::open(e.kafka).await;
    let ResponseKind::Metadata(_) = c
        .call(
            ApiKey::Metadata,
            12,
            RequestKind::Metadata(auto_create("rc")),
        )
        .await
    else {
        panic!()
    };
    let started = std::time::Instant::now();
    let deadline = || assert!(started.elapsed() < Duration::from_secs(30), "timed out");
    let key = loop {
        deadline();
        if let Some(k) = e.broker.view().current().partition_key("rc", 0) {
            break k;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    floe_testkit::wait_owned(&e.broker, key).await;
    let b = &e.broker;
    // A transactional producer through the broker's coordinator logic.
    let id = floe_metadata::ids::TransactionalId::new("rc-tx");
    let fence = loop {
        deadline();
        if let Ok(f) = b.txn().txn_fence(&id) {
            break f;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let holder = b.clone();
    let coord = floe_broker::txn::TxnCoordinator::new(
        b.meta().clone(),
        Arc::new(b.owner_markers()),
        Arc::new(move |f| holder.shards().holds(f)),
        Default::default(),
    );
    let now = floe_metadata::clock::now_ms();
    let producer = coord
        .init_producer(fence, &id, 60_000, None, now)
        .await
        .unwrap();
    let pid = producer.producer_id.0;
    let add = floe_metadata::txn::TxnOp::AddPartitions {
        producer,
        partitions: vec![key],
    };
    let txn = |seq: i32| {
        BatchBuilder::new(0, 1_000)
            .producer(pid, producer.epoch.0, seq, true)
            .push(RecordSpec::new(None, Some(b"t".to_vec()), 0))
            .build(Compression::None)
            .unwrap()
    };
    // Aborted at 0 (marker at 1), plain at 2, open from 3.
    coord.step(fence, &id, now, add.clone()).await.unwrap();
    b.produce(&key, &txn(0), Acks::All).await.unwrap();
    let abort = floe_metadata::txn::TxnOp::End {
        producer,
        commit: false,
    };
    coord.step(fence, &id, now, abort).await.unwrap();
    while b.log(&key).unwrap().last_stable_offset() < 2 {
        deadline();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.produce(&key, &one_batch("plain", 1_000), Acks::All)
        .await
        .unwrap();
    loop {
        // Retried until the abort completed (CONCURRENT_TRANSACTIONS before).
        deadline();
        let r = coord.step(fence, &id, now, add.clone()).await.unwrap();
        if r.refused.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.produce(&key, &txn(1), Acks::All).await.unwrap();
    let bases = |recs: &Bytes| -> Vec<i64> {
        floe_storage::batch::BatchIter::new(recs, usize::MAX)
            .map(|r| r.unwrap().1.base_offset())
            .collect()
    };
    for v in versions(ApiKey::Fetch) {
        for isolation in [0i8, 1] {
            let mut req = fetch_one("rc", 0, 0);
            req.isolation_level = isolation;
            let ResponseKind::Fetch(r) = c.call(ApiKey::Fetch, v, RequestKind::Fetch(req)).await
            else {
                panic!()
            };
            let p = &r.responses[0].partitions[0];
            assert_eq!(p.error_code, 0, "v{v}");
            assert_eq!((p.high_watermark, p.last_stable_offset), (4, 3), "v{v}");
            let recs = p.records.clone().unwrap();
            if isolation == 1 {
                assert_eq!(bases(&recs), vec![0, 1, 2], "v{v}");
                let aborted = p.aborted_transactions.as_ref().unwrap();
                assert_eq!(aborted.len(), 1, "v{v}");
                assert_eq!(
                    (aborted[0].producer_id.0, aborted[0].first_offset),
                    (pid, 0)
                );
            } else {
                assert_eq!(bases(&recs), vec![0, 1, 2, 3], "v{v}");
                let none = p.aborted_transactions.as_ref().is_none_or(Vec::is_empty);
                assert!(none, "v{v}");
            }
        }
    }
    for v in versions(ApiKey::ListOffsets).filter(|v| *v >= 2) {
        for (isolation, want) in [(0i8, 4i64), (1, 3)] {
            let mut lp = ListOffsetsPartition::default();
            lp.partition_index = 0;
            lp.timestamp = -1;
            let mut lt = ListOffsetsTopic::default();
            lt.name = topic("rc");
            lt.partitions = vec![lp];
            let mut req = ListOffsetsRequest::default();
            req.replica_id = BrokerId(-1);
            req.isolation_level = isolation;
            req.topics = vec![lt];
            let ResponseKind::ListOffsets(r) = c
                .call(ApiKey::ListOffsets, v, RequestKind::ListOffsets(req))
                .await
            else {
                panic!()
            };
            let p = &r.topics[0].partitions[0];
            assert_eq!(
                (p.error_code, p.offset),
                (0, want),
                "v{v} isolation {isolation}"
            );
        }
    }
    for v in versions(ApiKey::DescribeProducers) {
        let mut t = describe_producers_request::TopicRequest::default();
        t.name = topic("rc");
        t.partition_indexes = vec![0];
        let mut req = DescribeProducersRequest::default();
        req.topics = vec![t];
        let ResponseKind::DescribeProducers(r) = c
            .call(
                ApiKey::DescribeProducers,
                v,
                RequestKind::DescribeProducers(req),
            )
            .await
        else {
            panic!()
        };
        let p = &r.topics[0].partitions[0];
        assert_eq!(p.error_code, 0);
        let s = p
            .active_producers
            .iter()
            .find(|s| s.producer_id.0 == pid)
            .unwrap();
        assert_eq!(
            (
                s.producer_epoch,
                s.last_sequence,
                s.current_txn_start_offset
            ),
            (0, 1, 3)
        );
    }
    e.broker.shutdown().await;
    if let Some(n) = e.cluster.meta_node {
        n.shutdown().await;
    }
}

/// The four share APIs at v1 with `--share-groups`: a member joins, is
/// described, fetches the records it is assigned, acknowledges them, and
/// they are not delivered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_share_apis_answer_at_v1() {
    use floe_broker::share::{AutoOffsetReset, ShareSettings};
    use floe_proxy::share::ShareContext;

    let share = ShareContext::new(ShareSettings {
        lock_duration_ms: 30_000,
        reset: AutoOffsetReset::Earliest,
        ..ShareSettings::default()
    });
    let e = env_with(false, Some(Arc::new(share))).await;
    let mut c = Conn::open(e.kafka).await;
    let ResponseKind::Metadata(md) = c
        .call(
            ApiKey::Metadata,
            12,
            RequestKind::Metadata(auto_create("q")),
        )
        .await
    else {
        panic!()
    };
    let topic_id = md.topics[0].topic_id;
    for value in ["a", "b"] {
        assert_eq!(c.produce_acked("q", value, 1).await, 0);
    }
    let group = GroupId(StrBytes::from_static_str("sg"));
    let member = StrBytes::from_static_str("bWVtYmVyLTE");

    let r = c.join_share(&group, &member, "q").await;
    assert_eq!((r.error_code, r.member_epoch), (0, 1));
    let assigned = &r.assignment.unwrap().topic_partitions[0];
    assert_eq!(
        (assigned.topic_id, assigned.partitions.clone()),
        (topic_id, vec![0])
    );

    let r = c
        .describe_share_groups(vec![
            group.clone(),
            GroupId(StrBytes::from_static_str("none")),
        ])
        .await;
    assert_eq!(r.groups[0].group_state.as_str(), "Stable");
    assert_eq!(r.groups[0].members[0].member_id, member);
    assert_eq!(
        r.groups[0].members[0].assignment.topic_partitions[0].topic_name,
        topic("q")
    );
    assert_eq!(r.groups[1].error_code, 69, "GROUP_ID_NOT_FOUND");

    let fetch = |epoch: i32, acks: Vec<share_fetch_request::AcknowledgementBatch>| {
        let mut p = share_fetch_request::FetchPartition::default();
        p.partition_index = 0;
        p.acknowledgement_batches = acks;
        let mut t = share_fetch_request::FetchTopic::default();
        t.topic_id = topic_id;
        t.partitions = vec![p];
        let mut f = ShareFetchRequest::default();
        f.group_id = Some(group.clone());
        f.member_id = Some(member.clone());
        f.share_session_epoch = epoch;
        f.max_wait_ms = 100;
        f.max_bytes = 1 << 20;
        f.max_records = 100;
        f.topics = vec![t];
        RequestKind::ShareFetch(f)
    };
    let ResponseKind::ShareFetch(r) = c.call(ApiKey::ShareFetch, 1, fetch(0, vec![])).await else {
        panic!()
    };
    assert_eq!(r.error_code, 0);
    let p = &r.responses[0].partitions[0];
    let acquired: Vec<(i64, i64, i16)> = p
        .acquired_records
        .iter()
        .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
        .collect();
    assert_eq!(acquired, vec![(0, 1, 1)]);
    assert!(p.records.as_ref().is_some_and(|b| !b.is_empty()));

    // Offset 0 accepted here, offset 1 through ShareAcknowledge.
    let mut b = share_fetch_request::AcknowledgementBatch::default();
    b.first_offset = 0;
    b.last_offset = 0;
    b.acknowledge_types = vec![1];
    let ResponseKind::ShareFetch(r) = c.call(ApiKey::ShareFetch, 1, fetch(1, vec![b])).await else {
        panic!()
    };
    assert_eq!(r.error_code, 0);
    assert_eq!(r.responses[0].partitions[0].acknowledge_error_code, 0);
    assert!(r.responses[0].partitions[0].acquired_records.is_empty());

    let a = accept_request(&group, &member, 2, topic_id, &[0], 1);
    let ResponseKind::ShareAcknowledge(r) = c
        .call(
            ApiKey::ShareAcknowledge,
            1,
            RequestKind::ShareAcknowledge(a),
        )
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 0);
    assert_eq!(r.responses[0].partitions[0].error_code, 0);

    // Both accepted: nothing to deliver; a stale epoch is refused.
    let ResponseKind::ShareFetch(r) = c.call(ApiKey::ShareFetch, 1, fetch(3, vec![])).await else {
        panic!()
    };
    assert_eq!(r.error_code, 0);
    assert!(r.responses.is_empty());
    let ResponseKind::ShareFetch(r) = c.call(ApiKey::ShareFetch, 1, fetch(3, vec![])).await else {
        panic!()
    };
    assert_eq!(r.error_code, 123, "INVALID_SHARE_SESSION_EPOCH");

    // DescribeShareGroupOffsets: the start offset the owner wrote, past both
    // accepted records; a partition that does not exist is an error.
    let describe = |topics| {
        let mut g =
            describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default();
        g.group_id = group.clone();
        g.topics = topics;
        let mut d = DescribeShareGroupOffsetsRequest::default();
        d.groups = vec![g];
        RequestKind::DescribeShareGroupOffsets(d)
    };
    let mut t =
        describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestTopic::default();
    t.topic_name = topic("q");
    t.partitions = vec![0, 99];
    let ResponseKind::DescribeShareGroupOffsets(r) = c
        .call(
            ApiKey::DescribeShareGroupOffsets,
            0,
            describe(Some(vec![t])),
        )
        .await
    else {
        panic!()
    };
    let got: Vec<(i32, i64, i16)> = r.groups[0].topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.start_offset, p.error_code))
        .collect();
    assert_eq!(got, vec![(0, 2, 0), (99, -1, 3)]);
    assert_eq!(r.groups[0].topics[0].topic_id, topic_id);
    let ResponseKind::DescribeShareGroupOffsets(r) = c
        .call(ApiKey::DescribeShareGroupOffsets, 0, describe(None))
        .await
    else {
        panic!()
    };
    assert_eq!(r.groups[0].topics.len(), 1);
    assert_eq!(r.groups[0].topics[0].partitions[0].start_offset, 2);
    e.broker.shutdown().await;
    if let Some(n) = e.cluster.meta_node {
        n.shutdown().await;
    }
}

/// The metadata API with share-state writes slowed down, counting how
/// many are in flight at once.
#[derive(Debug)]
struct SlowShareState {
    inner: Arc<dyn MetaApi>,
    in_flight: AtomicUsize,
    most: AtomicUsize,
}

#[async_trait::async_trait]
impl MetaApi for SlowShareState {
    async fn call_route(&self, call: RouteCall) -> Result<Reply, MetaError> {
        if call.request::<routes::ShareState>().is_none() {
            return self.inner.call_route(call).await;
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let reply = self.inner.call_route(call).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        reply
    }
}

/// A ShareAcknowledge accepting `offset` of each of `partitions` of one
/// topic.
fn accept_request(
    group: &GroupId,
    member: &StrBytes,
    epoch: i32,
    topic_id: uuid::Uuid,
    partitions: &[i32],
    offset: i64,
) -> ShareAcknowledgeRequest {
    let mut t = share_acknowledge_request::AcknowledgeTopic::default();
    t.topic_id = topic_id;
    t.partitions = partitions
        .iter()
        .map(|&i| {
            let mut b = share_acknowledge_request::AcknowledgementBatch::default();
            b.first_offset = offset;
            b.last_offset = offset;
            b.acknowledge_types = vec![1];
            let mut p = share_acknowledge_request::AcknowledgePartition::default();
            p.partition_index = i;
            p.acknowledgement_batches = vec![b];
            p
        })
        .collect();
    let mut a = ShareAcknowledgeRequest::default();
    a.group_id = Some(group.clone());
    a.member_id = Some(member.clone());
    a.share_session_epoch = epoch;
    a.topics = vec![t];
    a
}

/// Records a ShareFetch answer acquired, over all its partitions.
fn acquired_in(r: &ShareFetchResponse) -> usize {
    r.responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| p.acquired_records.len())
        .sum()
}

/// The acknowledgements of several partitions in one ShareFetch or one
/// ShareAcknowledge are written at once, not one partition after another.
#[tokio::test]
async fn acknowledgements_of_several_partitions_are_written_at_once() {
    use floe_broker::share::{AutoOffsetReset, ShareSettings};
    use floe_proxy::share::ShareContext;

    let share = ShareContext::new(ShareSettings {
        lock_duration_ms: 30_000,
        reset: AutoOffsetReset::Earliest,
        ..ShareSettings::default()
    });
    let slow = std::sync::OnceLock::new();
    let e = env_on(false, Some(Arc::new(share)), |m| {
        let s = Arc::new(SlowShareState {
            inner: m,
            in_flight: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
        });
        slow.set(s.clone()).unwrap();
        s
    })
    .await;
    let slow = slow.get().unwrap();
    let topic_id = e.cluster.create_topic("q4", 4, &[]).await;
    for p in 0..4 {
        let key = floe_storage::PartitionKey::new(topic_id, p);
        floe_testkit::wait_owned(&e.broker, key).await;
        e.broker
            .produce(&key, &one_batch("v", 1), Acks::All)
            .await
            .unwrap();
    }
    let mut c = Conn::open(e.kafka).await;
    let group = GroupId(StrBytes::from_static_str("sg4"));
    let member = StrBytes::from_static_str("bWVtYmVyLTQ");
    let r = c.join_share(&group, &member, "q4").await;
    assert_eq!(r.error_code, 0);
    let accept = |offset: i64| {
        let mut b = share_fetch_request::AcknowledgementBatch::default();
        b.first_offset = offset;
        b.last_offset = offset;
        b.acknowledge_types = vec![1];
        b
    };
    let fetch = |epoch: i32, acks: bool| {
        let mut t = share_fetch_request::FetchTopic::default();
        t.topic_id = topic_id.0;
        t.partitions = (0..4)
            .map(|i| {
                let mut p = share_fetch_request::FetchPartition::default();
                p.partition_index = i;
                if acks {
                    p.acknowledgement_batches = vec![accept(0)];
                }
                p
            })
            .collect();
        let mut f = ShareFetchRequest::default();
        f.group_id = Some(group.clone());
        f.member_id = Some(member.clone());
        f.share_session_epoch = epoch;
        f.max_wait_ms = 100;
        f.max_bytes = 1 << 20;
        f.max_records = 100;
        f.topics = vec![t];
        RequestKind::ShareFetch(f)
    };
    // One record of each partition acquired (each partition's state
    // written once as it starts), then all four accepted in one ShareFetch.
    let mut acquired = 0;
    let mut acquired_at = 0;
    for epoch in 0..10 {
        let ResponseKind::ShareFetch(r) = c.call(ApiKey::ShareFetch, 1, fetch(epoch, false)).await
        else {
            panic!()
        };
        assert_eq!(r.error_code, 0);
        acquired += acquired_in(&r);
        if acquired == 4 {
            slow.most.store(0, Ordering::SeqCst);
            let ResponseKind::ShareFetch(r) =
                c.call(ApiKey::ShareFetch, 1, fetch(epoch + 1, true)).await
            else {
                panic!()
            };
            let codes: Vec<i16> = r.responses[0]
                .partitions
                .iter()
                .map(|p| p.acknowledge_error_code)
                .collect();
            assert_eq!(codes, vec![0; 4]);
            acquired_at = epoch + 2;
            break;
        }
    }
    assert_eq!(acquired, 4, "one record acquired per partition");
    assert_eq!(slow.most.load(Ordering::SeqCst), 4, "four writes at once");
    // The same through ShareAcknowledge: a second record of each
    // partition acquired, then all four accepted in one request.
    for p in 0..4 {
        let key = floe_storage::PartitionKey::new(topic_id, p);
        e.broker
            .produce(&key, &one_batch("w", 1), Acks::All)
            .await
            .unwrap();
    }
    let mut again = 0;
    let mut epoch = acquired_at;
    while again < 4 && epoch < acquired_at + 10 {
        let ResponseKind::ShareFetch(r) = c.call(ApiKey::ShareFetch, 1, fetch(epoch, false)).await
        else {
            panic!()
        };
        assert_eq!(r.error_code, 0);
        again += acquired_in(&r);
        epoch += 1;
    }
    assert_eq!(again, 4, "the second record of each partition acquired");
    slow.most.store(0, Ordering::SeqCst);
    let a = accept_request(&group, &member, epoch, topic_id.0, &[0, 1, 2, 3], 1);
    let ResponseKind::ShareAcknowledge(r) = c
        .call(
            ApiKey::ShareAcknowledge,
            1,
            RequestKind::ShareAcknowledge(a),
        )
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 0);
    let codes: Vec<i16> = r.responses[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect();
    assert_eq!(codes, vec![0; 4]);
    assert_eq!(
        slow.most.load(Ordering::SeqCst),
        4,
        "four ShareAcknowledge writes at once"
    );
    e.broker.shutdown().await;
    if let Some(n) = e.cluster.meta_node {
        n.shutdown().await;
    }
}

/// The share groups' admin side: AlterShareGroupOffsets and
/// DeleteShareGroupOffsets v0, ListGroups v5 by type, DeleteGroups of a
/// share group, each refused while the group has a member; and one id
/// namespace (a share group's id refused to JoinGroup, a classic group's
/// to ShareGroupHeartbeat and AlterShareGroupOffsets).
#[tokio::test]
async fn the_share_admin_apis_answer_at_v0_and_keep_one_group_namespace() {
    use floe_broker::share::{AutoOffsetReset, ShareSettings};
    use floe_proxy::share::ShareContext;

    let share = ShareContext::new(ShareSettings {
        lock_duration_ms: 30_000,
        reset: AutoOffsetReset::Earliest,
        ..ShareSettings::default()
    });
    let e = env_with(false, Some(Arc::new(share))).await;
    let mut c = Conn::open(e.kafka).await;
    let ResponseKind::Metadata(md) = c
        .call(
            ApiKey::Metadata,
            12,
            RequestKind::Metadata(auto_create("q")),
        )
        .await
    else {
        panic!()
    };
    let topic_id = md.topics[0].topic_id;
    for value in ["a", "b", "c"] {
        assert_eq!(c.produce_acked("q", value, 1).await, 0);
    }
    let group = GroupId(StrBytes::from_static_str("sg"));
    let member = StrBytes::from_static_str("bWVtYmVyLTE");
    let heartbeat = |group: &GroupId, epoch: i32| {
        let mut hb = ShareGroupHeartbeatRequest::default();
        hb.group_id = group.clone();
        hb.member_id = member.clone();
        hb.member_epoch = epoch;
        hb.subscribed_topic_names = (epoch == 0).then(|| vec![topic("q")]);
        RequestKind::ShareGroupHeartbeat(hb)
    };
    let r = c.join_share(&group, &member, "q").await;
    assert_eq!(r.error_code, 0);
    // The share-partition starts (and is written) at its first fetch.
    let mut p = share_fetch_request::FetchPartition::default();
    p.partition_index = 0;
    let mut t = share_fetch_request::FetchTopic::default();
    t.topic_id = topic_id;
    t.partitions = vec![p];
    let mut f = ShareFetchRequest::default();
    f.group_id = Some(group.clone());
    f.member_id = Some(member.clone());
    f.max_wait_ms = 100;
    f.max_bytes = 1 << 20;
    f.max_records = 1;
    f.topics = vec![t];
    let ResponseKind::ShareFetch(r) = c
        .call(ApiKey::ShareFetch, 1, RequestKind::ShareFetch(f))
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 0);

    let alter = |group: &GroupId, partitions: Vec<(i32, i64)>| {
        let mut t =
            alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic::default();
        t.topic_name = topic("q");
        t.partitions = partitions
            .into_iter()
            .map(|(p, o)| {
                let mut x =
                    alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition::default();
                x.partition_index = p;
                x.start_offset = o;
                x
            })
            .collect();
        let mut a = AlterShareGroupOffsetsRequest::default();
        a.group_id = group.clone();
        a.topics = vec![t];
        RequestKind::AlterShareGroupOffsets(a)
    };
    let list = |types: &[&'static str]| {
        let mut l = ListGroupsRequest::default();
        l.types_filter = types.iter().map(|t| StrBytes::from_static_str(t)).collect();
        RequestKind::ListGroups(l)
    };
    let delete_group = |group: &GroupId| {
        let mut d = DeleteGroupsRequest::default();
        d.groups_names = vec![group.clone()];
        RequestKind::DeleteGroups(d)
    };

    // A member: every change is refused, and the group is listed Stable.
    let ResponseKind::AlterShareGroupOffsets(r) = c
        .call(
            ApiKey::AlterShareGroupOffsets,
            0,
            alter(&group, vec![(0, 0)]),
        )
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 68, "NON_EMPTY_GROUP");
    assert_eq!(r.responses[0].partitions[0].error_code, 68);
    let ResponseKind::DeleteGroups(r) = c.call(ApiKey::DeleteGroups, 2, delete_group(&group)).await
    else {
        panic!()
    };
    assert_eq!(r.results[0].error_code, 68);
    let ResponseKind::ListGroups(r) = c.call(ApiKey::ListGroups, 5, list(&["share"])).await else {
        panic!()
    };
    let listed: Vec<(&str, &str, &str)> = r
        .groups
        .iter()
        .map(|g| {
            (
                g.group_id.as_str(),
                g.group_state.as_str(),
                g.group_type.as_str(),
            )
        })
        .collect();
    assert_eq!(listed, vec![("sg", "Stable", "share")]);
    let ResponseKind::ListGroups(r) = c.call(ApiKey::ListGroups, 5, list(&["classic"])).await
    else {
        panic!()
    };
    assert!(r.groups.iter().all(|g| g.group_id.as_str() != "sg"));

    // One namespace: JoinGroup on a share group.
    let mut p = join_group_request::JoinGroupRequestProtocol::default();
    p.name = StrBytes::from_static_str("range");
    p.metadata = Bytes::from_static(b"meta");
    let mut j = JoinGroupRequest::default();
    j.group_id = group.clone();
    j.session_timeout_ms = 10_000;
    j.rebalance_timeout_ms = 10_000;
    j.protocol_type = StrBytes::from_static_str("consumer");
    j.protocols = vec![p];
    let ResponseKind::JoinGroup(r) = c
        .call(ApiKey::JoinGroup, 5, RequestKind::JoinGroup(j))
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 23, "INCONSISTENT_GROUP_PROTOCOL");

    // The member leaves: the start offset moves (kept within the log), a
    // partition that does not exist is refused.
    let ResponseKind::ShareGroupHeartbeat(r) = c
        .call(ApiKey::ShareGroupHeartbeat, 1, heartbeat(&group, -1))
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 0);
    let ResponseKind::AlterShareGroupOffsets(r) = c
        .call(
            ApiKey::AlterShareGroupOffsets,
            0,
            alter(&group, vec![(0, 2), (9, 0)]),
        )
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 0);
    let codes: Vec<i16> = r.responses[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect();
    assert_eq!(codes, vec![0, 3]);
    assert_eq!(r.responses[0].topic_id, topic_id);
    let describe = || {
        let mut g =
            describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default();
        g.group_id = group.clone();
        g.topics = None;
        let mut d = DescribeShareGroupOffsetsRequest::default();
        d.groups = vec![g];
        RequestKind::DescribeShareGroupOffsets(d)
    };
    let ResponseKind::DescribeShareGroupOffsets(r) = c
        .call(ApiKey::DescribeShareGroupOffsets, 0, describe())
        .await
    else {
        panic!()
    };
    assert_eq!(r.groups[0].topics[0].partitions[0].start_offset, 2);
    // OffsetFetch: a share group has no committed offsets.
    let mut of = OffsetFetchRequest::default();
    of.group_id = group.clone();
    of.topics = None;
    let ResponseKind::OffsetFetch(r) = c
        .call(ApiKey::OffsetFetch, 7, RequestKind::OffsetFetch(of))
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 69);

    // DeleteShareGroupOffsets: the state is gone.
    let mut t = delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic::default();
    t.topic_name = topic("q");
    let mut d = DeleteShareGroupOffsetsRequest::default();
    d.group_id = group.clone();
    d.topics = vec![t];
    let ResponseKind::DeleteShareGroupOffsets(r) = c
        .call(
            ApiKey::DeleteShareGroupOffsets,
            0,
            RequestKind::DeleteShareGroupOffsets(d),
        )
        .await
    else {
        panic!()
    };
    assert_eq!((r.error_code, r.responses[0].error_code), (0, 0));
    let ResponseKind::DescribeShareGroupOffsets(r) = c
        .call(ApiKey::DescribeShareGroupOffsets, 0, describe())
        .await
    else {
        panic!()
    };
    assert!(r.groups[0].topics.is_empty());

    // An admin's OffsetCommit would overwrite the share state: refused.
    let mut cp = offset_commit_request::OffsetCommitRequestPartition::default();
    cp.partition_index = 0;
    cp.committed_offset = 0;
    let mut ct = offset_commit_request::OffsetCommitRequestTopic::default();
    ct.name = topic("q");
    ct.partitions = vec![cp];
    let mut oc = OffsetCommitRequest::default();
    oc.group_id = group.clone();
    oc.generation_id_or_member_epoch = -1;
    oc.topics = vec![ct];
    let ResponseKind::OffsetCommit(r) = c
        .call(ApiKey::OffsetCommit, 8, RequestKind::OffsetCommit(oc))
        .await
    else {
        panic!()
    };
    assert_eq!(r.topics[0].partitions[0].error_code, 69);
    let mut op = offset_delete_request::OffsetDeleteRequestPartition::default();
    op.partition_index = 0;
    let mut ot = offset_delete_request::OffsetDeleteRequestTopic::default();
    ot.name = topic("q");
    ot.partitions = vec![op];
    let mut od = OffsetDeleteRequest::default();
    od.group_id = group.clone();
    od.topics = vec![ot];
    let ResponseKind::OffsetDelete(r) = c
        .call(ApiKey::OffsetDelete, 0, RequestKind::OffsetDelete(od))
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 69);

    // DeleteGroups: the share group is gone from the listing.
    let ResponseKind::DeleteGroups(r) = c.call(ApiKey::DeleteGroups, 2, delete_group(&group)).await
    else {
        panic!()
    };
    assert_eq!(r.results[0].error_code, 0);
    let ResponseKind::ListGroups(r) = c.call(ApiKey::ListGroups, 5, list(&[])).await else {
        panic!()
    };
    assert!(r.groups.iter().all(|g| g.group_id.as_str() != "sg"));

    // A classic group (offsets committed by an admin, no member): refused
    // to a share member and to AlterShareGroupOffsets, as Kafka says.
    let classic = GroupId(StrBytes::from_static_str("cg"));
    let mut cp = offset_commit_request::OffsetCommitRequestPartition::default();
    cp.partition_index = 0;
    cp.committed_offset = 1;
    let mut ct = offset_commit_request::OffsetCommitRequestTopic::default();
    ct.name = topic("q");
    ct.partitions = vec![cp];
    let mut oc = OffsetCommitRequest::default();
    oc.group_id = classic.clone();
    oc.generation_id_or_member_epoch = -1;
    oc.topics = vec![ct];
    let ResponseKind::OffsetCommit(r) = c
        .call(ApiKey::OffsetCommit, 8, RequestKind::OffsetCommit(oc))
        .await
    else {
        panic!()
    };
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let ResponseKind::ShareGroupHeartbeat(r) = c
        .call(ApiKey::ShareGroupHeartbeat, 1, heartbeat(&classic, 0))
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 69, "GROUP_ID_NOT_FOUND");
    assert_eq!(
        r.error_message.as_deref(),
        Some("Group cg is not a share group.")
    );
    let ResponseKind::AlterShareGroupOffsets(r) = c
        .call(
            ApiKey::AlterShareGroupOffsets,
            0,
            alter(&classic, vec![(0, 0)]),
        )
        .await
    else {
        panic!()
    };
    assert_eq!(r.error_code, 69);
    e.broker.shutdown().await;
    if let Some(n) = e.cluster.meta_node {
        n.shutdown().await;
    }
}

/// A Produce request's partitions are sequenced at their owners together:
/// one whose owner holds it (a second broker, in another "process" behind
/// its RPC, out of room for unflushed bytes for the request's whole
/// timeout) does not keep the request's other partition, at this proxy's
/// broker, from being sequenced and committed meanwhile. One after the
/// other, the second partition would wait the whole 30 s of the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_held_at_its_owner_does_not_hold_up_the_rest_of_the_request() {
    let e = env().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let pool = e.cluster.pool().await;
    let b2 = e
        .cluster
        .broker_on(pool, |c| {
            c.id = 2;
            c.advertise = addr.clone();
            // Never flushed in the test, and out of room after one write.
            c.flush.interval = Duration::from_secs(3_600);
            c.flush.paced = true;
            c.max_unflushed_bytes = 1;
        })
        .await;
    tokio::spawn(floe_broker::server::serve(
        listener,
        b2.clone(),
        floe_metadata::http_server::HttpLimits::with_body_limit(floe_broker::rpc::MAX_BODY_BYTES),
    ));
    let t = e.cluster.create_topic("spread", 2, &[]).await;
    let keys = [0, 1].map(|p| floe_storage::PartitionKey::new(t, p));
    // Placed one on each broker as they are created.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let (held, free) = loop {
        let (one, two) = (e.broker.owned(), b2.owned());
        if let (Some(f), Some(h)) = (
            keys.iter().find(|k| one.contains(k)),
            keys.iter().find(|k| two.contains(k)),
        ) {
            break (*h, *f);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not placed on both brokers"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The second broker's one write fills its room.
    let filler = {
        let b2 = b2.clone();
        tokio::spawn(async move { b2.produce(&held, &one_batch("filler", 0), Acks::All).await })
    };
    while b2.log(&held).map_or(0, |l| l.offsets().2) < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the filler was never sequenced"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // One request: the held partition first, then the free one.
    let mut td = TopicProduceData::default();
    td.name = topic("spread");
    td.partition_data = [held, free]
        .iter()
        .map(|k| {
            let mut pd = PartitionProduceData::default();
            pd.index = k.partition as i32;
            pd.records = Some(one_batch(&format!("p{}", k.partition), 0));
            pd
        })
        .collect();
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 30_000;
    req.topic_data = vec![td];
    let mut c = Conn::open(e.kafka).await;
    let request = tokio::spawn(async move {
        c.call(ApiKey::Produce, 9, RequestKind::Produce(req)).await;
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while e.broker.log(&free).map_or(0, |l| l.offsets().1) < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the free partition waited for the held one"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!request.is_finished(), "the held partition is still held");
    request.abort();
    filler.abort();
    e.broker.shutdown().await;
    b2.shutdown().await;
}
