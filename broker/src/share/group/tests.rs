//! Share group membership: joins, epochs, leaves, timeouts, assignment.

use floe_types::TopicId;

use super::*;

fn topic_id(n: u8) -> TopicId {
    TopicId(uuid::Uuid::from_bytes([n; 16]))
}

/// Topic "one" has 1 partition, "four" 4; "none" does not exist.
fn topics(name: &str) -> Option<TopicInfo> {
    match name {
        "one" => Some(TopicInfo {
            id: topic_id(1),
            partitions: 1,
        }),
        "four" => Some(TopicInfo {
            id: topic_id(4),
            partitions: 4,
        }),
        _ => None,
    }
}

fn m(id: &str) -> MemberId {
    MemberId::new(id)
}

fn join(id: &str, topics: &[&str]) -> Heartbeat {
    Heartbeat {
        member_id: m(id),
        member_epoch: 0,
        subscribed_topics: Some(topics.iter().map(|t| t.to_string()).collect()),
        rack_id: None,
    }
}

fn beat(id: &str, epoch: i32) -> Heartbeat {
    Heartbeat {
        member_id: m(id),
        member_epoch: epoch,
        subscribed_topics: None,
        rack_id: None,
    }
}

fn group() -> ShareGroup {
    ShareGroup::new("g", ShareGroupConfig::default())
}

fn parts(a: &Assignment, topic: u8) -> Vec<i32> {
    a.get(&topic_id(topic)).cloned().unwrap_or_default()
}

#[test]
fn a_joining_member_gets_an_epoch_and_every_partition_it_alone_subscribes_to() {
    let mut g = group();
    let ans = g.heartbeat(&join("a", &["four"]), 0, &topics).unwrap();
    assert_eq!(ans.member_epoch, 1);
    assert_eq!(ans.heartbeat_interval_ms, 5_000);
    assert_eq!(parts(&ans.assignment.unwrap(), 4), vec![0, 1, 2, 3]);
    // Nothing changed: no assignment sent again, same epoch.
    let ans = g.heartbeat(&beat("a", 1), 10, &topics).unwrap();
    assert_eq!(ans.member_epoch, 1);
    assert_eq!(ans.assignment, None);
}

#[test]
fn several_members_share_one_partition() {
    let mut g = group();
    for id in ["a", "b", "c"] {
        g.heartbeat(&join(id, &["one"]), 0, &topics).unwrap();
    }
    let d = g.describe();
    assert_eq!(d.members.len(), 3);
    for member in &d.members {
        assert_eq!(parts(&member.assignment, 1), vec![0]);
    }
}

#[test]
fn partitions_are_spread_when_there_are_fewer_members_than_partitions() {
    let mut g = group();
    g.heartbeat(&join("a", &["four"]), 0, &topics).unwrap();
    let ans = g.heartbeat(&join("b", &["four"]), 0, &topics).unwrap();
    assert_eq!(ans.member_epoch, 2);
    assert_eq!(parts(&ans.assignment.unwrap(), 4), vec![1, 3]);
    // The first member learns its new partitions at its next heartbeat,
    // with the new epoch.
    let ans = g.heartbeat(&beat("a", 1), 0, &topics).unwrap();
    assert_eq!(ans.member_epoch, 2);
    assert_eq!(parts(&ans.assignment.unwrap(), 4), vec![0, 2]);
}

#[test]
fn a_stale_epoch_is_fenced_and_an_unknown_member_refused() {
    let mut g = group();
    g.heartbeat(&join("a", &["one"]), 0, &topics).unwrap();
    g.heartbeat(&join("b", &["one"]), 0, &topics).unwrap();
    g.heartbeat(&beat("a", 1), 0, &topics).unwrap();
    assert_eq!(
        g.heartbeat(&beat("a", 1), 0, &topics),
        Err(ShareGroupError::FencedMemberEpoch)
    );
    assert_eq!(
        g.heartbeat(&beat("z", 1), 0, &topics),
        Err(ShareGroupError::UnknownMemberId)
    );
}

#[test]
fn a_leaving_member_is_removed_and_the_others_reassigned() {
    let mut g = group();
    g.heartbeat(&join("a", &["four"]), 0, &topics).unwrap();
    g.heartbeat(&join("b", &["four"]), 0, &topics).unwrap();
    let ans = g.heartbeat(&beat("b", 2), 0, &topics).unwrap();
    assert_eq!(ans.member_epoch, 2);
    let ans = g.heartbeat(&beat("a", -1), 0, &topics).unwrap();
    assert_eq!(ans.member_epoch, -1);
    let ans = g.heartbeat(&beat("b", 2), 0, &topics).unwrap();
    assert_eq!(ans.member_epoch, 3);
    assert_eq!(parts(&ans.assignment.unwrap(), 4), vec![0, 1, 2, 3]);
    assert_eq!(
        g.heartbeat(&beat("a", -1), 0, &topics),
        Err(ShareGroupError::UnknownMemberId)
    );
}

#[test]
fn a_silent_member_times_out() {
    let mut g = group();
    g.heartbeat(&join("a", &["one"]), 0, &topics).unwrap();
    g.heartbeat(&join("b", &["one"]), 30_000, &topics).unwrap();
    assert_eq!(g.next_deadline(), Some(45_000));
    assert_eq!(g.expire(44_999, &topics), Vec::<MemberId>::new());
    assert_eq!(g.expire(45_000, &topics), vec![m("a")]);
    assert!(!g.has_member(&m("a")));
    assert_eq!(
        g.heartbeat(&beat("a", 2), 45_001, &topics),
        Err(ShareGroupError::UnknownMemberId)
    );
    assert_eq!(g.describe().state, ShareGroupState::Stable);
    g.expire(1_000_000, &topics);
    assert_eq!(g.describe().state, ShareGroupState::Empty);
    assert!(g.is_empty());
}

#[test]
fn a_changed_subscription_bumps_the_epoch_and_reassigns() {
    let mut g = group();
    g.heartbeat(&join("a", &["one"]), 0, &topics).unwrap();
    let mut hb = beat("a", 1);
    hb.subscribed_topics = Some(vec!["one".into(), "four".into()]);
    let ans = g.heartbeat(&hb, 0, &topics).unwrap();
    assert_eq!(ans.member_epoch, 2);
    let a = ans.assignment.unwrap();
    assert_eq!(parts(&a, 1), vec![0]);
    assert_eq!(parts(&a, 4), vec![0, 1, 2, 3]);
}

#[test]
fn a_topic_created_after_the_join_is_assigned_at_the_next_heartbeat() {
    let mut g = group();
    let ans = g.heartbeat(&join("a", &["later"]), 0, &topics).unwrap();
    assert_eq!(ans.assignment, Some(Assignment::new()));
    let later = |name: &str| {
        (name == "later").then_some(TopicInfo {
            id: topic_id(9),
            partitions: 2,
        })
    };
    let ans = g.heartbeat(&beat("a", 1), 0, &later).unwrap();
    assert_eq!(ans.member_epoch, 2);
    assert_eq!(parts(&ans.assignment.unwrap(), 9), vec![0, 1]);
}

#[test]
fn malformed_joins_and_a_full_group_are_refused() {
    let mut g = ShareGroup::new(
        "g",
        ShareGroupConfig {
            max_members: 1,
            ..ShareGroupConfig::default()
        },
    );
    assert!(matches!(
        g.heartbeat(&join("", &["one"]), 0, &topics),
        Err(ShareGroupError::InvalidRequest(_))
    ));
    assert!(matches!(
        g.heartbeat(&join("a", &[]), 0, &topics),
        Err(ShareGroupError::InvalidRequest(_))
    ));
    g.heartbeat(&join("a", &["one"]), 0, &topics).unwrap();
    assert_eq!(
        g.heartbeat(&join("b", &["one"]), 0, &topics),
        Err(ShareGroupError::GroupMaxSizeReached)
    );
    // The same member joining again (epoch 0) is not a new member.
    assert!(g.heartbeat(&join("a", &["one"]), 0, &topics).is_ok());
}
