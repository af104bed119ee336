use std::time::Duration;

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::*;

fn commit(group: &str) -> RequestKind {
    RequestKind::OffsetCommit(
        OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string()))),
    )
}

#[test]
fn commits_fetches_and_membership_of_a_group_share_its_lane() {
    let g = || Lane::Group("g".into());
    assert_eq!(lanes_of(&commit("g")), vec![g()]);
    let fetch = OffsetFetchRequest::default().with_groups(vec![
        offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_static_str("g"))),
        offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_static_str("h"))),
    ]);
    // v8's top-level group id is empty: it names nothing.
    assert_eq!(
        lanes_of(&RequestKind::OffsetFetch(fetch)),
        vec![g(), Lane::Group("h".into())]
    );
    let join = JoinGroupRequest::default().with_group_id(GroupId(StrBytes::from_static_str("g")));
    assert_eq!(lanes_of(&RequestKind::JoinGroup(join)), vec![g()]);
    let txn = TxnOffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g")))
        .with_transactional_id(TransactionalId(StrBytes::from_static_str("t")));
    assert_eq!(
        lanes_of(&RequestKind::TxnOffsetCommit(txn)),
        vec![g(), Lane::Transaction("t".into())]
    );
    let del = DeleteGroupsRequest::default().with_groups_names(vec![
        GroupId(StrBytes::from_static_str("g")),
        GroupId(StrBytes::from_static_str("g")),
    ]);
    assert_eq!(lanes_of(&RequestKind::DeleteGroups(del)), vec![g()]);
}

#[test]
fn reads_and_produce_run_beside_everything() {
    for body in [
        RequestKind::Metadata(MetadataRequest::default()),
        RequestKind::Fetch(FetchRequest::default()),
        RequestKind::ListOffsets(ListOffsetsRequest::default()),
        RequestKind::Produce(ProduceRequest::default()),
        RequestKind::FindCoordinator(FindCoordinatorRequest::default()),
        // An idempotent producer's id: no transactional id, no lane.
        RequestKind::InitProducerId(InitProducerIdRequest::default()),
    ] {
        assert!(lanes_of(&body).is_empty(), "{body:?}");
    }
    assert_eq!(
        lanes_of(&RequestKind::CreateTopics(CreateTopicsRequest::default())),
        vec![Lane::Admin]
    );
}

#[tokio::test]
async fn a_request_waits_for_the_one_before_it_in_its_lane_only() {
    let mut lanes = Lanes::default();
    let first = lanes.enter(vec![Lane::Group("g".into())]);
    let mut other = lanes.enter(vec![Lane::Group("h".into())]);
    let mut second = lanes.enter(vec![Lane::Group("g".into()), Lane::Admin]);
    let mut third = lanes.enter(vec![Lane::Admin]);
    assert!(other.is_free());
    other.wait().await;
    assert!(!second.is_free());
    assert!(
        tokio::time::timeout(Duration::from_millis(50), second.wait())
            .await
            .is_err(),
        "the second commit of g went before the first was done"
    );
    assert!(
        !third.is_free(),
        "third waits for second through the admin lane"
    );
    drop(first);
    second.wait().await;
    assert!(!third.is_free());
    drop(second);
    third.wait().await;
}

#[tokio::test]
async fn finished_lanes_are_forgotten() {
    let mut lanes = Lanes::default();
    for i in 0..PRUNE_ABOVE * 4 {
        drop(lanes.enter(vec![Lane::Group(format!("g{i}"))]));
    }
    assert!(lanes.len() <= PRUNE_ABOVE + 1, "{} lanes kept", lanes.len());
    assert!(lanes.enter(Vec::new()).is_free());
}
