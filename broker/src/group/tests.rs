//! Group coordinator behaviour, call by call as a Kafka client drives it.
//!
//! Most run on the real clock with short timeouts (tens to hundreds of
//! milliseconds). A test whose assertion sits between two deadlines (a
//! member removed at 200 ms, the next rebalance ending at 400 ms) runs on
//! a paused clock (`start_paused = true`), which moves only when every task
//! waits: on a loaded machine the real clock could pass both. The
//! coordinator only uses Tokio's clock.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::*;

const GROUP: &str = "g";

fn config() -> GroupConfig {
    GroupConfig {
        min_session_timeout: Duration::from_millis(10),
        max_session_timeout: Duration::from_secs(60),
        initial_rebalance_delay: Duration::from_millis(50),
        new_member_join_timeout: Duration::from_secs(60),
        shards: 8,
        offset_metadata_max_bytes: 4096,
        consumer: Default::default(),
    }
}

fn coordinator() -> Arc<GroupCoordinator> {
    Arc::new(GroupCoordinator::new(config()))
}

/// A coordinator whose first rebalance of a group waits `ms`.
fn coordinator_with_initial_delay(ms: u64) -> Arc<GroupCoordinator> {
    Arc::new(GroupCoordinator::new(GroupConfig {
        initial_rebalance_delay: Duration::from_millis(ms),
        ..config()
    }))
}

fn join(member_id: &str) -> JoinParams {
    JoinParams {
        group_id: GROUP.to_string(),
        member_id: member_id.to_string(),
        group_instance_id: None,
        client_id: "client".to_string(),
        client_host: "/127.0.0.1".to_string(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".to_string(),
        protocols: vec![("range".to_string(), Bytes::from_static(b"range-meta"))],
        require_known_member_id: false,
    }
}

fn static_join(instance: &str) -> JoinParams {
    JoinParams {
        group_instance_id: Some(instance.to_string()),
        ..join("")
    }
}

fn protocols(names: &[&str]) -> Vec<(String, Bytes)> {
    names
        .iter()
        .map(|n| (n.to_string(), Bytes::from(format!("{n}-meta"))))
        .collect()
}

fn sync(j: &JoinResult, assignments: Vec<(String, Bytes)>) -> SyncParams {
    SyncParams {
        group_id: GROUP.to_string(),
        generation_id: j.generation_id,
        member_id: j.member_id.clone(),
        group_instance_id: None,
        protocol_type: Some("consumer".to_string()),
        protocol_name: j.protocol_name.clone(),
        assignments,
    }
}

fn assignment_for(member_id: &str) -> Bytes {
    Bytes::from(format!("assigned-to-{member_id}"))
}

/// Fails the test instead of hanging when `f` does not finish in 5 s.
async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .expect("call did not return in time")
}

/// Sends all JoinGroups at once; the answers come back in the same order.
async fn join_all(c: &GroupCoordinator, params: Vec<JoinParams>) -> Vec<JoinResult> {
    within(futures::future::join_all(
        params.into_iter().map(|p| c.join_group(p)),
    ))
    .await
}

/// Sends every member's SyncGroup at once; the leader assigns
/// [`assignment_for`] each member.
async fn sync_all(c: &GroupCoordinator, joined: &[JoinResult]) -> Vec<SyncResult> {
    let params = joined.iter().map(|j| {
        let assignments = if j.member_id == j.leader_id {
            j.members
                .iter()
                .map(|m| (m.member_id.clone(), assignment_for(&m.member_id)))
                .collect()
        } else {
            Vec::new()
        };
        sync(j, assignments)
    });
    within(futures::future::join_all(params.map(|p| c.sync_group(p)))).await
}

/// A Stable group at generation 1 with one member per `params`.
async fn stable_group(c: &GroupCoordinator, params: Vec<JoinParams>) -> Vec<JoinResult> {
    let joined = join_all(c, params).await;
    for j in &joined {
        assert_eq!(j.error, None);
        assert_eq!(j.generation_id, 1);
    }
    for s in sync_all(c, &joined).await {
        assert_eq!(s.error, None);
    }
    assert_eq!(c.describe_group(GROUP).state, GroupState::Stable);
    joined
}

fn leader(joined: &[JoinResult]) -> &JoinResult {
    joined
        .iter()
        .find(|j| j.member_id == j.leader_id)
        .expect("a leader")
}

fn follower(joined: &[JoinResult]) -> &JoinResult {
    joined
        .iter()
        .find(|j| j.member_id != j.leader_id)
        .expect("a follower")
}

fn rejoin(j: &JoinResult) -> JoinParams {
    join(&j.member_id)
}

#[tokio::test]
async fn two_members_join_with_one_leader_and_the_same_generation() {
    let c = coordinator();
    let joined = join_all(&c, vec![join(""), join("")]).await;

    for j in &joined {
        assert_eq!(j.error, None);
        assert_eq!(j.generation_id, 1);
        assert!(j.member_id.starts_with("client-"), "{}", j.member_id);
        assert_eq!(j.protocol_type.as_deref(), Some("consumer"));
        assert_eq!(j.protocol_name.as_deref(), Some("range"));
        assert!(!j.skip_assignment);
    }
    assert_ne!(joined[0].member_id, joined[1].member_id);
    assert_eq!(joined[0].leader_id, joined[1].leader_id);
    let leader = leader(&joined);
    let mut listed: Vec<&str> = leader
        .members
        .iter()
        .map(|m| m.member_id.as_str())
        .collect();
    listed.sort_unstable();
    let mut ids: Vec<&str> = joined.iter().map(|j| j.member_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(listed, ids);
    assert!(leader.members.iter().all(|m| m.metadata == "range-meta"));
    assert!(follower(&joined).members.is_empty());
}

#[tokio::test]
async fn sync_hands_each_member_the_leaders_assignment() {
    let c = coordinator();
    let joined = join_all(&c, vec![join(""), join("")]).await;
    let (leader, follower) = (leader(&joined).clone(), follower(&joined).clone());

    // The follower's SyncGroup waits for the leader's.
    let c2 = c.clone();
    let f = follower.clone();
    let waiting = tokio::spawn(async move { c2.sync_group(sync(&f, Vec::new())).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiting.is_finished());
    assert_eq!(
        c.describe_group(GROUP).state,
        GroupState::CompletingRebalance
    );

    let assignments = vec![
        (leader.member_id.clone(), Bytes::from_static(b"for-leader")),
        (
            follower.member_id.clone(),
            Bytes::from_static(b"for-follower"),
        ),
    ];
    let mine = within(c.sync_group(sync(&leader, assignments))).await;
    let theirs = within(waiting).await.unwrap();

    assert_eq!(mine.error, None);
    assert_eq!(mine.assignment, "for-leader");
    assert_eq!(mine.protocol_name.as_deref(), Some("range"));
    assert_eq!(theirs.error, None);
    assert_eq!(theirs.assignment, "for-follower");
    assert_eq!(c.describe_group(GROUP).state, GroupState::Stable);
    // A SyncGroup in a Stable group returns the member's assignment again.
    let again = within(c.sync_group(sync(&follower, Vec::new()))).await;
    assert_eq!(again.assignment, "for-follower");
}

#[tokio::test]
async fn new_member_makes_the_others_rejoin_into_the_next_generation() {
    let c = coordinator();
    let joined = stable_group(&c, vec![join(""), join("")]).await;

    let c2 = c.clone();
    let third = tokio::spawn(async move { c2.join_group(join("")).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!third.is_finished());
    for j in &joined {
        assert_eq!(
            c.heartbeat(GROUP, 1, &j.member_id, None),
            Err(GroupError::RebalanceInProgress)
        );
    }

    let rejoined = join_all(&c, joined.iter().map(rejoin).collect()).await;
    let third = within(third).await.unwrap();
    let all: Vec<&JoinResult> = rejoined.iter().chain([&third]).collect();
    for j in &all {
        assert_eq!(j.error, None);
        assert_eq!(j.generation_id, 2);
        assert_eq!(j.leader_id, all[0].leader_id);
    }
    let leader = all.iter().find(|j| j.member_id == j.leader_id).unwrap();
    assert_eq!(leader.members.len(), 3);
    // Old-generation heartbeats are refused.
    assert_eq!(
        c.heartbeat(GROUP, 1, &third.member_id, None),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(c.heartbeat(GROUP, 2, &third.member_id, None), Ok(()));
}

#[tokio::test]
async fn member_without_heartbeats_is_removed_after_its_session_timeout() {
    let c = coordinator();
    let quiet = JoinParams {
        session_timeout_ms: 200,
        ..join("")
    };
    let joined = stable_group(&c, vec![join(""), quiet]).await;
    let (alive, quiet) = (&joined[0], &joined[1]);

    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(c.heartbeat(GROUP, 1, &quiet.member_id, None), Ok(()));
    assert_eq!(c.heartbeat(GROUP, 1, &alive.member_id, None), Ok(()));

    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        c.heartbeat(GROUP, 1, &alive.member_id, None),
        Err(GroupError::RebalanceInProgress)
    );
    assert_eq!(
        c.heartbeat(GROUP, 1, &quiet.member_id, None),
        Err(GroupError::UnknownMemberId)
    );
    let rejoined = within(c.join_group(rejoin(alive))).await;
    assert_eq!(rejoined.error, None);
    assert_eq!(rejoined.generation_id, 2);
    assert_eq!(rejoined.leader_id, alive.member_id);
    assert_eq!(rejoined.members.len(), 1);
}

#[tokio::test]
async fn leave_group_removes_the_member_and_rebalances() {
    let c = coordinator();
    let joined = stable_group(&c, vec![join(""), join("")]).await;
    let (stays, leaves) = (&joined[0], &joined[1]);

    let answers = c
        .leave_group(
            GROUP,
            &[
                (leaves.member_id.clone(), None),
                ("nobody".to_string(), None),
            ],
        )
        .unwrap();
    assert_eq!(answers, vec![Ok(()), Err(GroupError::UnknownMemberId)]);
    assert_eq!(
        c.heartbeat(GROUP, 1, &stays.member_id, None),
        Err(GroupError::RebalanceInProgress)
    );
    assert_eq!(
        c.heartbeat(GROUP, 1, &leaves.member_id, None),
        Err(GroupError::UnknownMemberId)
    );

    let rejoined = within(c.join_group(rejoin(stays))).await;
    assert_eq!(rejoined.generation_id, 2);
    assert_eq!(rejoined.members.len(), 1);
    assert_eq!(rejoined.members[0].member_id, stays.member_id);

    // The last member leaving empties the group.
    let answers = c
        .leave_group(GROUP, &[(stays.member_id.clone(), None)])
        .unwrap();
    assert_eq!(answers, vec![Ok(())]);
    assert_eq!(c.describe_group(GROUP).state, GroupState::Empty);
}

#[tokio::test]
async fn member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped() {
    let c = coordinator();
    let short = JoinParams {
        rebalance_timeout_ms: 300,
        ..join("")
    };
    let joined = stable_group(&c, vec![short.clone(), short]).await;
    let (leader, follower) = (leader(&joined), follower(&joined));

    // The leader's JoinGroup starts a rebalance; the follower keeps
    // heartbeating but never rejoins.
    let start = Instant::now();
    let c2 = c.clone();
    let leader_id = leader.member_id.clone();
    let rejoin_task = tokio::spawn(async move {
        c2.join_group(JoinParams {
            rebalance_timeout_ms: 300,
            ..join(&leader_id)
        })
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        c.heartbeat(GROUP, 1, &follower.member_id, None),
        Err(GroupError::RebalanceInProgress)
    );
    assert!(!rejoin_task.is_finished());

    let rejoined = within(rejoin_task).await.unwrap();
    assert!(start.elapsed() >= Duration::from_millis(250));
    assert_eq!(rejoined.error, None);
    assert_eq!(rejoined.generation_id, 2);
    assert_eq!(rejoined.members.len(), 1);
    assert_eq!(
        c.heartbeat(GROUP, 2, &follower.member_id, None),
        Err(GroupError::UnknownMemberId)
    );
}

#[tokio::test(start_paused = true)]
async fn member_that_never_syncs_is_removed_after_the_rebalance_timeout() {
    let c = coordinator();
    let short = JoinParams {
        rebalance_timeout_ms: 200,
        ..join("")
    };
    let joined = join_all(&c, vec![short.clone(), short]).await;
    let (leader, follower) = (leader(&joined), follower(&joined));
    let assignments = vec![(leader.member_id.clone(), Bytes::from_static(b"x"))];
    let synced = within(c.sync_group(sync(leader, assignments))).await;
    assert_eq!(synced.error, None);

    // Removed at 200 ms; the leader's next rebalance would end at 400 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        c.heartbeat(GROUP, 1, &follower.member_id, None),
        Err(GroupError::UnknownMemberId)
    );
    assert_eq!(
        c.heartbeat(GROUP, 1, &leader.member_id, None),
        Err(GroupError::RebalanceInProgress)
    );
}

#[tokio::test]
async fn new_member_gets_member_id_required_and_joins_with_that_id() {
    let c = coordinator();
    let first = within(c.join_group(JoinParams {
        require_known_member_id: true,
        ..join("")
    }))
    .await;
    assert_eq!(first.error, Some(GroupError::MemberIdRequired));
    assert_eq!(first.generation_id, -1);
    assert!(
        first.member_id.starts_with("client-"),
        "{}",
        first.member_id
    );
    assert!(c.describe_group(GROUP).members.is_empty());

    let made_up = within(c.join_group(join("client-made-up"))).await;
    assert_eq!(made_up.error, Some(GroupError::UnknownMemberId));

    let second = within(c.join_group(JoinParams {
        require_known_member_id: true,
        ..join(&first.member_id)
    }))
    .await;
    assert_eq!(second.error, None);
    assert_eq!(second.member_id, first.member_id);
    assert_eq!(second.leader_id, first.member_id);
    assert_eq!(second.generation_id, 1);
}

#[tokio::test]
async fn join_with_a_member_id_for_an_unknown_group_is_unknown_member_id() {
    let c = coordinator();
    let answer = within(c.join_group(join("client-x"))).await;
    assert_eq!(answer.error, Some(GroupError::UnknownMemberId));
    assert_eq!(c.describe_group(GROUP).state, GroupState::Dead);
}

#[tokio::test]
async fn static_member_restart_keeps_its_assignment_without_a_new_generation() {
    let c = coordinator();
    let joined = stable_group(&c, vec![static_join("a"), static_join("b")]).await;
    let leader = leader(&joined);
    let follower = follower(&joined);
    let instance = if leader.member_id.starts_with("a-") {
        "a"
    } else {
        "b"
    };
    assert!(leader.member_id.starts_with(&format!("{instance}-")));

    // The leader's process restarts: it joins without its member id.
    let restarted = within(c.join_group(static_join(instance))).await;
    assert_eq!(restarted.error, None);
    assert_eq!(restarted.generation_id, 1);
    assert_ne!(restarted.member_id, leader.member_id);
    assert!(restarted.member_id.starts_with(&format!("{instance}-")));
    // The old leader id comes back so that it does not run an assignment.
    assert_eq!(restarted.leader_id, leader.member_id);
    assert!(restarted.members.is_empty());

    let synced = within(c.sync_group(SyncParams {
        group_instance_id: Some(instance.to_string()),
        ..sync(&restarted, Vec::new())
    }))
    .await;
    assert_eq!(synced.error, None);
    assert_eq!(synced.assignment, assignment_for(&leader.member_id));

    // No rebalance for the others.
    let other = if instance == "a" { "b" } else { "a" };
    assert_eq!(
        c.heartbeat(GROUP, 1, &follower.member_id, Some(other)),
        Ok(())
    );
    let described = c.describe_group(GROUP);
    assert_eq!(described.state, GroupState::Stable);
    let ids: Vec<&str> = described
        .members
        .iter()
        .map(|m| m.member_id.as_str())
        .collect();
    assert!(ids.contains(&restarted.member_id.as_str()));
    assert!(!ids.contains(&leader.member_id.as_str()));
}

#[tokio::test]
async fn old_member_id_of_a_replaced_static_member_is_fenced() {
    let c = coordinator();
    let joined = stable_group(&c, vec![static_join("a")]).await;
    let old = &joined[0];
    let new = within(c.join_group(static_join("a"))).await;
    assert_eq!(new.error, None);
    let a = Some("a");

    assert_eq!(
        c.heartbeat(GROUP, 1, &old.member_id, a),
        Err(GroupError::FencedInstanceId)
    );
    assert_eq!(
        c.validate_commit(GROUP, 1, &old.member_id, a),
        Err(GroupError::FencedInstanceId)
    );
    let synced = within(c.sync_group(SyncParams {
        group_instance_id: Some("a".to_string()),
        ..sync(old, Vec::new())
    }))
    .await;
    assert_eq!(synced.error, Some(GroupError::FencedInstanceId));
    let rejoined = within(c.join_group(JoinParams {
        group_instance_id: Some("a".to_string()),
        ..join(&old.member_id)
    }))
    .await;
    assert_eq!(rejoined.error, Some(GroupError::FencedInstanceId));
    assert_eq!(
        c.leave_group(GROUP, &[(old.member_id.clone(), Some("a".to_string()))]),
        Ok(vec![Err(GroupError::FencedInstanceId)])
    );
    // The new member id is the one that works.
    assert_eq!(c.heartbeat(GROUP, 1, &new.member_id, a), Ok(()));
    // The admin form of LeaveGroup: instance id only.
    assert_eq!(
        c.leave_group(GROUP, &[(String::new(), Some("a".to_string()))]),
        Ok(vec![Ok(())])
    );
    assert_eq!(
        c.heartbeat(GROUP, 1, &new.member_id, a),
        Err(GroupError::UnknownMemberId)
    );
}

#[tokio::test]
async fn static_member_rejoining_with_a_new_protocol_choice_rebalances() {
    let c = coordinator();
    let joined = stable_group(&c, vec![static_join("a")]).await;
    assert_eq!(joined[0].protocol_name.as_deref(), Some("range"));

    let restarted = within(c.join_group(JoinParams {
        protocols: protocols(&["roundrobin", "range"]),
        ..static_join("a")
    }))
    .await;
    assert_eq!(restarted.error, None);
    assert_eq!(restarted.generation_id, 2);
    assert_eq!(restarted.protocol_name.as_deref(), Some("roundrobin"));
    assert_eq!(restarted.leader_id, restarted.member_id);
}

#[tokio::test]
async fn commit_with_a_stale_generation_is_illegal_generation() {
    let c = coordinator();
    let joined = join_all(&c, vec![join(""), join("")]).await;
    let member = &joined[0].member_id;
    // Between JoinGroup and SyncGroup.
    assert_eq!(
        c.validate_commit(GROUP, 1, member, None),
        Err(GroupError::RebalanceInProgress)
    );
    // Heartbeats are fine then (Kafka 3.x).
    assert_eq!(c.heartbeat(GROUP, 1, member, None), Ok(()));
    sync_all(&c, &joined).await;

    assert_eq!(c.validate_commit(GROUP, 1, member, None), Ok(()));
    assert_eq!(
        c.validate_commit(GROUP, 0, member, None),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        c.validate_commit(GROUP, 2, member, None),
        Err(GroupError::IllegalGeneration)
    );
}

#[tokio::test]
async fn commit_from_an_unknown_member_is_unknown_member_id() {
    let c = coordinator();
    stable_group(&c, vec![join("")]).await;
    assert_eq!(
        c.validate_commit(GROUP, 1, "client-stranger", None),
        Err(GroupError::UnknownMemberId)
    );
    assert_eq!(
        c.heartbeat(GROUP, 1, "client-stranger", None),
        Err(GroupError::UnknownMemberId)
    );
}

#[tokio::test]
async fn simple_commit_is_allowed_only_while_the_group_has_no_members() {
    let c = coordinator();
    // Unknown group: a client outside group management commits.
    assert_eq!(c.validate_commit(GROUP, -1, "", None), Ok(()));
    assert_eq!(
        c.validate_commit(GROUP, 3, "", None),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        c.validate_commit(GROUP, -1, "client-x", None),
        Err(GroupError::UnknownMemberId)
    );

    let joined = stable_group(&c, vec![join("")]).await;
    assert_eq!(
        c.validate_commit(GROUP, -1, "", None),
        Err(GroupError::UnknownMemberId)
    );

    c.leave_group(GROUP, &[(joined[0].member_id.clone(), None)])
        .unwrap();
    assert_eq!(c.describe_group(GROUP).state, GroupState::Empty);
    assert_eq!(c.validate_commit(GROUP, -1, "", None), Ok(()));
}

#[tokio::test]
async fn inconsistent_protocols_are_refused() {
    let c = coordinator_with_initial_delay(300);
    let first = {
        let c = c.clone();
        tokio::spawn(async move { c.join_group(join("")).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;

    let other_protocol = within(c.join_group(JoinParams {
        protocols: protocols(&["roundrobin"]),
        ..join("")
    }))
    .await;
    assert_eq!(
        other_protocol.error,
        Some(GroupError::InconsistentGroupProtocol)
    );
    let other_type = within(c.join_group(JoinParams {
        protocol_type: "connect".to_string(),
        ..join("")
    }))
    .await;
    assert_eq!(
        other_type.error,
        Some(GroupError::InconsistentGroupProtocol)
    );
    // One protocol in common is enough.
    let overlapping = JoinParams {
        protocols: protocols(&["roundrobin", "range"]),
        ..join("")
    };
    let (overlapping, first) = tokio::join!(c.join_group(overlapping), first);
    assert_eq!(overlapping.error, None);
    assert_eq!(first.unwrap().protocol_name.as_deref(), Some("range"));

    // A new group needs a protocol type and at least one protocol.
    let no_protocols = within(c.join_group(JoinParams {
        group_id: "other".to_string(),
        protocols: Vec::new(),
        ..join("")
    }))
    .await;
    assert_eq!(
        no_protocols.error,
        Some(GroupError::InconsistentGroupProtocol)
    );
    let no_type = within(c.join_group(JoinParams {
        group_id: "other".to_string(),
        protocol_type: String::new(),
        ..join("")
    }))
    .await;
    assert_eq!(no_type.error, Some(GroupError::InconsistentGroupProtocol));
}

#[tokio::test]
async fn protocol_is_chosen_by_the_members_votes() {
    let c = coordinator();
    let joined = join_all(
        &c,
        vec![
            JoinParams {
                protocols: protocols(&["range", "sticky", "roundrobin"]),
                ..join("")
            },
            JoinParams {
                protocols: protocols(&["sticky", "range"]),
                ..join("")
            },
            JoinParams {
                protocols: protocols(&["roundrobin", "sticky", "range"]),
                ..join("")
            },
        ],
    )
    .await;
    // Candidates: range, sticky. Votes: range 1, sticky 2.
    for j in &joined {
        assert_eq!(j.protocol_name.as_deref(), Some("sticky"));
    }
    let leader = leader(&joined);
    assert!(leader.members.iter().all(|m| m.metadata == "sticky-meta"));
}

#[tokio::test]
async fn session_timeout_outside_the_allowed_range_is_refused() {
    let c = GroupCoordinator::new(GroupConfig::default());
    for ms in [5_999, 1_800_001, -1] {
        let answer = within(c.join_group(JoinParams {
            session_timeout_ms: ms,
            ..join("")
        }))
        .await;
        assert_eq!(
            answer.error,
            Some(GroupError::InvalidSessionTimeout),
            "{ms}"
        );
    }
    for ms in [6_000, 1_800_000] {
        let answer = within(c.join_group(JoinParams {
            session_timeout_ms: ms,
            require_known_member_id: true,
            ..join("")
        }))
        .await;
        assert_eq!(answer.error, Some(GroupError::MemberIdRequired), "{ms}");
    }
    let empty_id = within(c.join_group(JoinParams {
        group_id: String::new(),
        ..join("")
    }))
    .await;
    assert_eq!(empty_id.error, Some(GroupError::InvalidGroupId));
}

#[tokio::test]
async fn deleting_a_group_with_members_is_non_empty_group() {
    let c = coordinator();
    let joined = stable_group(&c, vec![join("")]).await;
    let ids = vec![GROUP.to_string(), "unknown".to_string()];
    assert_eq!(
        c.delete_groups(&ids),
        vec![
            (GROUP.to_string(), Err(GroupError::NonEmptyGroup)),
            ("unknown".to_string(), Ok(())),
        ]
    );

    c.leave_group(GROUP, &[(joined[0].member_id.clone(), None)])
        .unwrap();
    assert_eq!(
        c.delete_groups(&ids[..1]),
        vec![(GROUP.to_string(), Ok(()))]
    );
    assert_eq!(c.describe_group(GROUP).state, GroupState::Dead);
    assert!(c.list_groups(&[]).is_empty());
}

#[tokio::test]
async fn dropping_a_shard_fails_its_waiting_calls_with_not_coordinator() {
    let c = coordinator_with_initial_delay(30_000);
    let shard = shard_of(GROUP, c.config().shards);
    let elsewhere = (0..)
        .map(|i| format!("other-{i}"))
        .find(|id| shard_of(id, c.config().shards) != shard)
        .unwrap();
    c.set_has_offsets(&elsewhere, true);

    let waiting = {
        let c = c.clone();
        tokio::spawn(async move { c.join_group(join("")).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        c.describe_group(GROUP).state,
        GroupState::PreparingRebalance
    );

    assert_eq!(c.drop_shard(shard), 1);
    let answer = within(waiting).await.unwrap();
    assert_eq!(answer.error, Some(GroupError::NotCoordinator));
    assert_eq!(c.describe_group(GROUP).state, GroupState::Dead);
    let listed: Vec<String> = c.list_groups(&[]).into_iter().map(|l| l.group_id).collect();
    assert_eq!(listed, vec![elsewhere]);
}

#[tokio::test]
async fn dropping_a_shard_fails_a_waiting_sync_with_not_coordinator() {
    let c = coordinator();
    let joined = join_all(&c, vec![join(""), join("")]).await;
    let f = follower(&joined).clone();
    let waiting = {
        let c = c.clone();
        tokio::spawn(async move { c.sync_group(sync(&f, Vec::new())).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiting.is_finished());

    assert_eq!(c.drop_shard(shard_of(GROUP, c.config().shards)), 1);
    let answer = within(waiting).await.unwrap();
    assert_eq!(answer.error, Some(GroupError::NotCoordinator));
}

#[tokio::test]
async fn describe_and_list_report_each_state() {
    let c = coordinator_with_initial_delay(300);
    assert_eq!(c.describe_group(GROUP).state, GroupState::Dead);

    let pending = {
        let c = c.clone();
        tokio::spawn(async move { c.join_group(join("")).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let described = c.describe_group(GROUP);
    assert_eq!(described.state, GroupState::PreparingRebalance);
    assert_eq!(described.members.len(), 1);
    assert_eq!(described.protocol_data, "");

    let joined = vec![within(pending).await.unwrap()];
    assert_eq!(
        c.describe_group(GROUP).state,
        GroupState::CompletingRebalance
    );
    let listed = c.list_groups(&["CompletingRebalance".to_string()]);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].group_id, GROUP);
    assert_eq!(listed[0].protocol_type, "consumer");
    assert!(c.list_groups(&["Stable".to_string()]).is_empty());

    sync_all(&c, &joined).await;
    let described = c.describe_group(GROUP);
    assert_eq!(described.state, GroupState::Stable);
    assert_eq!(described.state.as_str(), "Stable");
    assert_eq!(described.protocol_type, "consumer");
    assert_eq!(described.protocol_data, "range");
    let member = &described.members[0];
    assert_eq!(member.member_id, joined[0].member_id);
    assert_eq!(member.client_id, "client");
    assert_eq!(member.client_host, "/127.0.0.1");
    assert_eq!(member.metadata, "range-meta");
    assert_eq!(member.assignment, assignment_for(&joined[0].member_id));

    c.leave_group(GROUP, &[(joined[0].member_id.clone(), None)])
        .unwrap();
    let described = c.describe_group(GROUP);
    assert_eq!(described.state, GroupState::Empty);
    assert_eq!(described.protocol_type, "consumer");
    assert!(described.members.is_empty());
    assert_eq!(c.list_groups(&["empty".to_string()]).len(), 1);
    assert_eq!(c.list_groups(&[]).len(), 1);

    // An Empty group without offsets is forgotten by the idle sweep; one
    // with offsets is kept.
    c.set_has_offsets("with-offsets", true);
    assert_eq!(c.remove_idle_groups(), 1);
    let listed: Vec<String> = c.list_groups(&[]).into_iter().map(|l| l.group_id).collect();
    assert_eq!(listed, vec!["with-offsets".to_string()]);
    c.set_has_offsets("with-offsets", false);
    assert!(c.list_groups(&[]).is_empty());
}

#[tokio::test]
async fn first_rebalance_waits_the_initial_delay_for_more_members() {
    let c = coordinator_with_initial_delay(200);
    let start = Instant::now();
    let first = {
        let c = c.clone();
        tokio::spawn(async move { c.join_group(join("")).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Arrives within the delay: same generation, and the delay is extended.
    let second = within(c.join_group(join(""))).await;
    let first = within(first).await.unwrap();
    // Without the extension it would have ended at 200 ms.
    assert!(start.elapsed() >= Duration::from_millis(350));
    assert_eq!(first.generation_id, 1);
    assert_eq!(second.generation_id, 1);
    assert_eq!(first.leader_id, second.leader_id);
}

#[test]
fn shard_of_is_fnv1a_of_the_group_id() {
    // Published FNV-1a 32-bit test vectors.
    assert_eq!(shard_of("", u32::MAX), 0x811c_9dc5);
    assert_eq!(shard_of("a", u32::MAX), 0xe40c_292c);
    assert_eq!(shard_of("foobar", u32::MAX), 0xbf9c_f968);
    assert_eq!(shard_of("a", 1000), 0xe40c_292c % 1000);
    assert_eq!(shard_of("a", 0), 0);
    assert!((0..200).all(|i| shard_of(&format!("group-{i}"), 50) < 50));
}

#[test]
fn errors_carry_kafkas_codes() {
    let codes = [
        (GroupError::UnknownServerError, -1),
        (GroupError::CoordinatorLoadInProgress, 14),
        (GroupError::NotCoordinator, 16),
        (GroupError::IllegalGeneration, 22),
        (GroupError::InconsistentGroupProtocol, 23),
        (GroupError::InvalidGroupId, 24),
        (GroupError::UnknownMemberId, 25),
        (GroupError::InvalidSessionTimeout, 26),
        (GroupError::RebalanceInProgress, 27),
        (GroupError::NonEmptyGroup, 68),
        (GroupError::GroupIdNotFound, 69),
        (GroupError::MemberIdRequired, 79),
        (GroupError::FencedInstanceId, 82),
    ];
    for (error, code) in codes {
        assert_eq!(error.kafka_code(), code, "{error:?}");
    }
}

#[tokio::test]
async fn a_member_of_the_previous_coordinator_commits_until_the_group_rebalances_here() {
    let c = coordinator();
    // The group's shard moved here: its members still hold generation 5.
    assert_eq!(c.validate_commit(GROUP, 5, "client-a", None), Ok(()));
    assert_eq!(c.validate_commit(GROUP, 5, "client-b", None), Ok(()));
    assert!(c.validate_commit(GROUP, 4, "client-a", None).is_err());
    // Their heartbeats tell them to rejoin.
    assert_eq!(
        c.heartbeat(GROUP, 5, "client-a", None),
        Err(GroupError::UnknownMemberId)
    );
    // The next generation follows the adopted one; the old one is over.
    let joined = join_all(&c, vec![join("")]).await;
    assert_eq!(joined[0].generation_id, 6);
    sync_all(&c, &joined).await;
    assert!(c.validate_commit(GROUP, 5, "client-b", None).is_err());
    assert_eq!(
        c.validate_commit(GROUP, 6, &joined[0].member_id, None),
        Ok(())
    );
}

#[tokio::test]
async fn generations_start_above_the_previous_owners_after_a_shard_move() {
    let c = coordinator();
    let shard = shard_of(GROUP, config().shards);
    c.shard_taken(shard, 1);
    let first = join_all(&c, vec![join("")]).await;
    sync_all(&c, &first).await;
    let g1 = first[0].generation_id;
    assert_eq!(g1, first_generation(1) + 1);
    // The shard moves away and back (another owner had epoch 2 meanwhile).
    c.drop_shard(shard);
    c.shard_taken(shard, 3);
    let again = join_all(&c, vec![join("")]).await;
    assert!(
        again[0].generation_id > g1,
        "{} after {g1}",
        again[0].generation_id
    );
    assert_eq!(
        c.validate_commit(GROUP, g1, &first[0].member_id, None),
        Err(GroupError::UnknownMemberId)
    );
    // Consumer groups' epochs too.
    let topics = |_: &str| None;
    let beat = consumer::ConsumerHeartbeat {
        group_id: "cg".into(),
        member_id: "m".into(),
        member_epoch: 0,
        rebalance_timeout_ms: 1000,
        subscribed_topic_names: Some(vec![]),
        ..Default::default()
    };
    c.shard_taken(shard_of("cg", config().shards), 3);
    let a = c.consumer_heartbeat(beat, &topics).await.unwrap();
    assert!(a.member_epoch > first_generation(3), "{}", a.member_epoch);
    // A consumer group is forgotten when its last member leaves.
    let leave = consumer::ConsumerHeartbeat {
        group_id: "cg".into(),
        member_id: "m".into(),
        member_epoch: -1,
        ..Default::default()
    };
    c.consumer_heartbeat(leave, &topics).await.unwrap();
    assert_eq!(
        c.consumer_describe("cg").err(),
        Some(GroupError::GroupIdNotFound)
    );
    assert_eq!(first_generation(1 << 15), 0, "wraps within an i32");
    assert!(first_generation((1 << 15) - 1) > 0);
}

#[tokio::test]
async fn an_adopted_generation_commits_and_the_next_one_starts_above_the_shard_epochs() {
    let c = coordinator();
    let shard = shard_of(GROUP, config().shards);
    c.shard_taken(shard, 2);
    // Members of the previous coordinator (generation 7) commit after the move.
    assert_eq!(c.validate_commit(GROUP, 7, "client-a", None), Ok(()));
    assert!(c.validate_commit(GROUP, 6, "client-a", None).is_err());
    // Once a generation is formed here it is above the shard epoch's first,
    // and the adopted one is over.
    let joined = join_all(&c, vec![join("")]).await;
    sync_all(&c, &joined).await;
    assert!(joined[0].generation_id > first_generation(2));
    assert!(c.validate_commit(GROUP, 7, "client-a", None).is_err());
}

/// With a store: see the module's file.
#[path = "store_tests.rs"]
mod stored;
