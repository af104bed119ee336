#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use floe_metadata::acl::{AclBinding, AclModel, PatternType, Permission, ResourceType};
use kafka_protocol::protocol::StrBytes;

use super::*;
use crate::authz::{Authorizer, AuthzSettings};
use crate::groups::ClientInfo;
use crate::principal::Principal;

fn allow(rt: ResourceType, name: &str, op: Op) -> AclBinding {
    AclBinding {
        resource_type: rt,
        resource_name: name.into(),
        pattern: PatternType::Literal,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: op,
        permission: Permission::Allow,
    }
}

/// Alice may write and read `orders`, read group `g`, write
/// transactional id `tx`.
fn alice() -> Check {
    let mut m = AclModel::default();
    m.create(&[
        allow(ResourceType::Topic, "orders", Op::Write),
        allow(ResourceType::Topic, "orders", Op::Read),
        allow(ResourceType::Group, "g", Op::Read),
        allow(ResourceType::TransactionalId, "tx", Op::Write),
    ])
    .unwrap();
    let az = Arc::new(Authorizer::new(AuthzSettings {
        enabled: true,
        super_users: vec!["User:admin".into()],
        allow_if_no_acls: false,
    }));
    let client = ClientInfo {
        principal: Principal::user("alice"),
        host: "/127.0.0.1".into(),
        ..Default::default()
    };
    az.check(&Arc::new(m), &client)
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.into()))
}

fn served(v: Verdict) -> Option<Merge> {
    match v {
        Verdict::Serve(m) => m,
        Verdict::Answer(_) => panic!("answered"),
        Verdict::Close => panic!("closed"),
    }
}

#[test]
fn a_produce_keeps_the_topics_it_may_write() {
    let c = alice();
    let mut req = ProduceRequest::default().with_topic_data(vec![
        produce_request::TopicProduceData::default().with_name(name("orders")),
        produce_request::TopicProduceData::default()
            .with_name(name("secret"))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default().with_index(3),
            ]),
    ]);
    let denied = produce(&mut req, &c);
    assert_eq!(req.topic_data.len(), 1);
    assert_eq!(denied[0].name.as_str(), "secret");
    assert_eq!(denied[0].partition_responses[0].index, 3);
    assert_eq!(denied[0].partition_responses[0].error_code, TOPIC_DENIED);
    // A transactional id it may not write refuses every topic.
    let mut req =
        req.with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("other"))));
    let denied = produce(&mut req, &c);
    assert!(req.topic_data.is_empty());
    assert_eq!(denied[0].partition_responses.len(), 0);
    assert_eq!(denied[0].name.as_str(), "orders");
}

#[test]
fn metadata_hides_what_may_not_be_described() {
    let c = alice();
    let snap = ClusterSnapshot::default();
    let mut all = RequestKind::Metadata(MetadataRequest::default().with_topics(None));
    let merge = served(before(&mut all, 12, &c, &snap)).unwrap();
    let mut resp = ResponseKind::Metadata(MetadataResponse::default().with_topics(vec![
        metadata_response::MetadataResponseTopic::default().with_name(Some(name("orders"))),
        metadata_response::MetadataResponseTopic::default().with_name(Some(name("secret"))),
    ]));
    merge(&mut resp);
    let ResponseKind::Metadata(r) = &resp else {
        panic!()
    };
    assert_eq!(r.topics.len(), 1);
    // Named, it is answered TOPIC_AUTHORIZATION_FAILED.
    let mut named = RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
        metadata_request::MetadataRequestTopic::default().with_name(Some(name("secret"))),
    ])));
    let merge = served(before(&mut named, 12, &c, &snap)).unwrap();
    let RequestKind::Metadata(q) = &named else {
        panic!()
    };
    assert!(q.topics.as_ref().unwrap().is_empty());
    let mut resp = ResponseKind::Metadata(MetadataResponse::default());
    merge(&mut resp);
    let ResponseKind::Metadata(r) = &resp else {
        panic!()
    };
    assert_eq!(r.topics[0].error_code, TOPIC_DENIED);
}

#[test]
fn describing_apis_answer_the_principals_operations() {
    let snap = ClusterSnapshot::default();
    let bits = |ops: &[Op]| ops.iter().fold(0i32, |acc, op| acc | (1 << op.code()));
    let groups = |c: &Check| {
        let mut req = RequestKind::DescribeGroups(
            DescribeGroupsRequest::default()
                .with_groups(vec![GroupId(StrBytes::from_static_str("g"))])
                .with_include_authorized_operations(true),
        );
        let merge = served(before(&mut req, 5, c, &snap)).unwrap();
        let mut resp =
            ResponseKind::DescribeGroups(DescribeGroupsResponse::default().with_groups(vec![
                describe_groups_response::DescribedGroup::default()
                    .with_group_id(GroupId(StrBytes::from_static_str("g"))),
            ]));
        merge(&mut resp);
        let ResponseKind::DescribeGroups(r) = resp else {
            panic!()
        };
        r.groups[0].authorized_operations
    };
    // READ on the group implies DESCRIBE, as in Kafka; nothing else.
    assert_eq!(groups(&alice()), bits(&[Op::Read, Op::Describe]));
    // Without an authorizer: every operation of a group.
    assert_eq!(groups(&Check::open()), bits(GROUP_OPS));
    // Not asked: the handler's answer is left alone.
    let mut req = RequestKind::DescribeGroups(DescribeGroupsRequest::default());
    assert!(served(before(&mut req, 5, &Check::open(), &snap)).is_none());

    let cluster = |c: &Check| {
        let mut req = RequestKind::DescribeCluster(
            DescribeClusterRequest::default().with_include_cluster_authorized_operations(true),
        );
        let merge = served(before(&mut req, 1, c, &snap)).unwrap();
        let mut resp = ResponseKind::DescribeCluster(DescribeClusterResponse::default());
        merge(&mut resp);
        let ResponseKind::DescribeCluster(r) = resp else {
            panic!()
        };
        r.cluster_authorized_operations
    };
    assert_eq!(cluster(&alice()), 0);
    assert_eq!(cluster(&Check::open()), bits(CLUSTER_OPS));

    // DescribeTopicPartitions always carries them.
    let mut req = RequestKind::DescribeTopicPartitions(DescribeTopicPartitionsRequest::default());
    let merge = served(before(&mut req, 0, &alice(), &snap)).unwrap();
    let mut resp = ResponseKind::DescribeTopicPartitions(
        DescribeTopicPartitionsResponse::default().with_topics(vec![
            describe_topic_partitions_response::DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(name("orders"))),
        ]),
    );
    merge(&mut resp);
    let ResponseKind::DescribeTopicPartitions(r) = resp else {
        panic!()
    };
    assert_eq!(
        r.topics[0].topic_authorized_operations,
        bits(&[Op::Read, Op::Write, Op::Describe])
    );
}

#[test]
fn group_requests_need_the_group() {
    let c = alice();
    let snap = ClusterSnapshot::default();
    let mut ok = RequestKind::JoinGroup(
        JoinGroupRequest::default().with_group_id(GroupId(StrBytes::from_static_str("g"))),
    );
    assert!(served(before(&mut ok, 5, &c, &snap)).is_none());
    let mut no = RequestKind::Heartbeat(
        HeartbeatRequest::default().with_group_id(GroupId(StrBytes::from_static_str("h"))),
    );
    let Verdict::Answer(b) = before(&mut no, 3, &c, &snap) else {
        panic!()
    };
    let ResponseKind::Heartbeat(r) = *b else {
        panic!()
    };
    assert_eq!(r.error_code, GROUP_DENIED);
    // An offset commit in a group it may not read: every partition refused.
    let mut commit = RequestKind::OffsetCommit(
        OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("h")))
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(name("orders"))
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default(),
                    ]),
            ]),
    );
    let Verdict::Answer(b) = before(&mut commit, 8, &c, &snap) else {
        panic!()
    };
    let ResponseKind::OffsetCommit(r) = *b else {
        panic!()
    };
    assert_eq!(r.topics[0].partitions[0].error_code, GROUP_DENIED);
    // FindCoordinator v4: only the keys it may describe go on.
    let mut find = RequestKind::FindCoordinator(
        FindCoordinatorRequest::default().with_coordinator_keys(vec![
            StrBytes::from_static_str("g"),
            StrBytes::from_static_str("h"),
        ]),
    );
    let merge = served(before(&mut find, 4, &c, &snap)).unwrap();
    let RequestKind::FindCoordinator(q) = &find else {
        panic!()
    };
    assert_eq!(q.coordinator_keys.len(), 1);
    let mut resp = ResponseKind::FindCoordinator(FindCoordinatorResponse::default());
    merge(&mut resp);
    let ResponseKind::FindCoordinator(r) = &resp else {
        panic!()
    };
    assert_eq!(r.coordinators[0].error_code, GROUP_DENIED);
}

#[test]
fn transactions_need_their_id() {
    let c = alice();
    let snap = ClusterSnapshot::default();
    let id = |s: &'static str| TransactionalId(StrBytes::from_static_str(s));
    let mut init = RequestKind::InitProducerId(
        InitProducerIdRequest::default().with_transactional_id(Some(id("tx"))),
    );
    assert!(served(before(&mut init, 4, &c, &snap)).is_none());
    let mut end = RequestKind::EndTxn(EndTxnRequest::default().with_transactional_id(id("other")));
    let Verdict::Answer(b) = before(&mut end, 3, &c, &snap) else {
        panic!()
    };
    let ResponseKind::EndTxn(r) = *b else {
        panic!()
    };
    assert_eq!(r.error_code, TXN_DENIED);
    // An idempotent producer that may write some topic may start.
    let mut idem =
        RequestKind::InitProducerId(InitProducerIdRequest::default().with_transactional_id(None));
    assert!(served(before(&mut idem, 4, &c, &snap)).is_none());
    // AddPartitionsToTxn with a topic it may not write adds nothing.
    let mut add = RequestKind::AddPartitionsToTxn(
        AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(id("tx"))
            .with_v3_and_below_topics(vec![
                add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(name("orders"))
                    .with_partitions(vec![0]),
                add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                    .with_name(name("secret"))
                    .with_partitions(vec![0]),
            ]),
    );
    let Verdict::Answer(b) = before(&mut add, 3, &c, &snap) else {
        panic!()
    };
    let ResponseKind::AddPartitionsToTxn(r) = *b else {
        panic!()
    };
    let codes: Vec<i16> = r
        .results_by_topic_v3_and_below
        .iter()
        .map(|t| t.results_by_partition[0].partition_error_code)
        .collect();
    assert_eq!(
        codes,
        vec![ResponseError::OperationNotAttempted.code(), TOPIC_DENIED]
    );
}

#[test]
fn a_fetch_answer_loses_the_records_of_topics_it_may_not_read() {
    let c = alice();
    let part = |i| {
        fetch_response::PartitionData::default()
            .with_partition_index(i)
            .with_high_watermark(9)
    };
    let mut answer = crate::codec::FetchAnswer {
        resp: FetchResponse::default().with_responses(vec![
            fetch_response::FetchableTopicResponse::default()
                .with_topic(name("secret"))
                .with_partitions(vec![part(0)]),
            fetch_response::FetchableTopicResponse::default()
                .with_topic(name("orders"))
                .with_partitions(vec![part(0)]),
        ]),
        records: vec![
            vec![bytes::Bytes::from_static(b"x")],
            vec![bytes::Bytes::from_static(b"y")],
        ],
    };
    fetch(&mut answer, &c);
    assert_eq!(
        answer.resp.responses[0].partitions[0].error_code,
        TOPIC_DENIED
    );
    assert!(answer.records[0].is_empty());
    assert_eq!(answer.records[1].len(), 1);
    assert_eq!(answer.resp.responses[1].partitions[0].high_watermark, 9);
}

#[test]
fn super_users_and_no_authorizer_pass_everything_and_unknown_apis_close() {
    let snap = ClusterSnapshot::default();
    let admin = Arc::new(Authorizer::new(AuthzSettings {
        enabled: true,
        super_users: vec!["User:admin".into()],
        allow_if_no_acls: false,
    }))
    .check(
        &Arc::default(),
        &ClientInfo {
            principal: Principal::user("admin"),
            ..Default::default()
        },
    );
    for c in [admin, Check::open()] {
        let mut req = RequestKind::DeleteGroups(
            DeleteGroupsRequest::default()
                .with_groups_names(vec![GroupId(StrBytes::from_static_str("any"))]),
        );
        assert!(served(before(&mut req, 2, &c, &snap)).is_none());
    }
    let mut other = RequestKind::ElectLeaders(ElectLeadersRequest::default());
    assert!(matches!(
        before(&mut other, 2, &alice(), &snap),
        Verdict::Close
    ));
}
