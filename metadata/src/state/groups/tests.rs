//! The groups concern's rules, through `ClusterState::apply`.

use crate::command::{Command, CommittedOffset, Response};
use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch, PartitionKey, ShardId};
use crate::state::DEFAULT_SHARDS;
use crate::state::test_support::{Sm, move_shard_to_broker_2, offset, owned, tid};

#[test]
fn group_configs_are_set_refused_whole_and_forgotten_when_all_deleted() {
    let alter = |group: &str, set: &[(&str, &str)], delete: &[&str]| Command::AlterGroupConfig {
        group: group.into(),
        set: set
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        delete: delete.iter().map(|k| k.to_string()).collect(),
    };
    let mut sm = Sm::new();
    sm.ok(alter("g", &[("share.delivery.count.limit", "4")], &[]));
    assert_eq!(sm.state.groups.configs["g"].share_delivery_count_limit(), 4);
    let e = sm.error(alter(
        "g",
        &[
            ("share.delivery.count.limit", "6"),
            ("consumer.session.timeout.ms", "1"),
        ],
        &[],
    ));
    assert_eq!(e.kind(), crate::error::ErrorKind::InvalidConfig);
    let e = sm.error(alter("", &[("share.delivery.count.limit", "6")], &[]));
    assert_eq!(e.kind(), crate::error::ErrorKind::InvalidRequest);
    sm.ok(alter("g", &[], &["share.delivery.count.limit"]));
    assert!(sm.state.groups.configs.is_empty(), "no entry for defaults");
}

#[test]
fn group_offsets_and_producer_ids() {
    let mut sm = owned();
    let off = CommittedOffset {
        offset: 42,
        leader_epoch: 3,
        metadata: "m".into(),
    };
    sm.ok(Command::CommitOffsets {
        fence: None,
        group: "g".into(),
        offsets: vec![("t".into(), 0, off.clone())],
    });
    assert_eq!(sm.state.groups.offsets["g"][&("t".to_string(), 0)], off);
    sm.ok(Command::DeleteTopic { name: "t".into() });
    assert!(
        sm.state.groups.offsets["g"].is_empty(),
        "offsets of a deleted topic go"
    );
    let a = sm.apply(Command::AllocateProducerIds { count: 10 });
    let b = sm.apply(Command::AllocateProducerIds { count: 5 });
    assert_eq!(
        a,
        Response::ProducerIds {
            first: 1000,
            count: 10
        }
    );
    assert_eq!(
        b,
        Response::ProducerIds {
            first: 1010,
            count: 5
        }
    );
    sm.error(Command::AllocateProducerIds { count: 0 });
}

#[test]
fn offset_commits_are_fenced_by_the_coordinator_shards_epoch() {
    let mut sm = owned();
    let shard = ShardId(3);
    let held = sm.state.topics.shards[&shard];
    assert_eq!(held.owner, Some(BrokerId(1)));
    let commit = |o: i64, epoch: Epoch| Command::CommitOffsets {
        group: "g".into(),
        offsets: vec![("t".into(), 0, offset(o))],
        fence: Some(crate::command::ShardFence {
            broker: BrokerId(1),
            shard,
            epoch,
        }),
    };
    sm.ok(commit(100, held.epoch));
    // The shard moves to broker 2; broker 1 was paused and wakes up
    // with its old epoch and an older offset: refused, nothing moves.
    move_shard_to_broker_2(&mut sm, shard);
    assert!(matches!(
        sm.error(commit(50, held.epoch)),
        MetaError::StaleCoordinator { .. }
    ));
    // Right epoch, wrong broker: refused too.
    let now = sm.state.topics.shards[&shard].epoch;
    assert_eq!(
        sm.error(commit(50, now)).kind(),
        crate::ErrorKind::StaleCoordinator
    );
    assert_eq!(
        sm.state.groups.offsets["g"][&("t".to_string(), 0)].offset,
        100
    );
}

#[test]
fn group_records_are_fenced_by_their_shard_and_forgotten_with_the_group() {
    let mut sm = owned();
    let shard = ShardId(crate::txn::shard_of("g", DEFAULT_SHARDS));
    let held = sm.state.topics.shards[&shard];
    assert_eq!(held.owner, Some(BrokerId(1)));
    let store = |shard: ShardId, epoch: Epoch, record: Option<Vec<u8>>| Command::StoreGroup {
        fence: crate::command::ShardFence {
            broker: BrokerId(1),
            shard,
            epoch,
        },
        group: "g".into(),
        record,
    };
    sm.ok(store(shard, held.epoch, Some(vec![7])));
    assert_eq!(sm.state.groups.records["g"], vec![7]);
    // Through another shard: refused.
    let other = ShardId((shard.0 + 1) % DEFAULT_SHARDS);
    let other_epoch = sm.state.topics.shards[&other].epoch;
    assert_eq!(
        sm.error(store(other, other_epoch, Some(vec![8]))).kind(),
        crate::ErrorKind::InvalidRequest
    );
    // `None` forgets it; DeleteGroups does too.
    sm.ok(store(shard, held.epoch, None));
    assert!(!sm.state.groups.records.contains_key("g"));
    sm.ok(store(shard, held.epoch, Some(vec![9])));
    sm.ok(Command::DeleteGroups {
        groups: vec!["g".into()],
    });
    assert!(sm.state.groups.records.is_empty());
    // After the shard moves, the previous coordinator is refused.
    sm.ok(store(shard, held.epoch, Some(vec![1])));
    move_shard_to_broker_2(&mut sm, shard);
    assert_eq!(
        sm.error(store(shard, held.epoch, Some(vec![2]))).kind(),
        crate::ErrorKind::StaleCoordinator
    );
    assert_eq!(sm.state.groups.records["g"], vec![1]);
}

#[test]
fn group_deletes_are_fenced_by_the_coordinator_they_were_decided_with() {
    let mut sm = owned();
    let shard = ShardId(crate::txn::shard_of("g", DEFAULT_SHARDS));
    let held = sm.state.topics.shards[&shard];
    assert_eq!(held.owner, Some(BrokerId(1)));
    let fence = |broker: u32, shard: ShardId, epoch: Epoch| crate::command::ShardFence {
        broker: BrokerId(broker),
        shard,
        epoch,
    };
    let commit = |partition: u32| Command::CommitOffsets {
        group: "g".into(),
        offsets: vec![("t".into(), partition, offset(7))],
        fence: Some(fence(1, shard, held.epoch)),
    };
    let delete = |partition: u32, f| Command::DeleteOffsetsFenced {
        group: "g".into(),
        partitions: vec![("t".into(), partition)],
        fence: f,
    };
    sm.ok(commit(0));
    sm.ok(commit(1));
    sm.ok(delete(0, fence(1, shard, held.epoch)));
    assert!(!sm.state.groups.offsets["g"].contains_key(&("t".to_string(), 0)));
    // Through another shard than the group's: refused.
    let other = ShardId((shard.0 + 1) % DEFAULT_SHARDS);
    let other_epoch = sm.state.topics.shards[&other].epoch;
    assert_eq!(
        sm.error(delete(1, fence(1, other, other_epoch))).kind(),
        crate::ErrorKind::InvalidRequest
    );
    // The shard moves to broker 2: a delete decided with broker 1 is
    // stale, whether of offsets or of the whole group.
    move_shard_to_broker_2(&mut sm, shard);
    assert_eq!(
        sm.error(delete(1, fence(1, shard, held.epoch))).kind(),
        crate::ErrorKind::StaleCoordinator
    );
    let forget = |f| Command::DeleteGroupFenced {
        group: "g".into(),
        fence: f,
    };
    assert_eq!(
        sm.error(forget(fence(1, shard, held.epoch))).kind(),
        crate::ErrorKind::StaleCoordinator
    );
    assert_eq!(
        sm.state.groups.offsets["g"][&("t".to_string(), 1)].offset,
        7
    );
    // The new coordinator at its epoch: the group goes.
    let now = sm.state.topics.shards[&shard].epoch;
    sm.ok(forget(fence(2, shard, now)));
    assert!(!sm.state.groups.offsets.contains_key("g"));
}

#[test]
fn offsets_of_unknown_topics_or_partitions_are_not_stored() {
    let mut sm = owned();
    let r = sm.apply(Command::CommitOffsets {
        group: "g".into(),
        offsets: vec![
            ("t".into(), 1, offset(1)),
            ("t".into(), 2, offset(2)),
            ("nope".into(), 0, offset(3)),
        ],
        fence: None,
    });
    assert_eq!(
        r,
        Response::OffsetsCommitted {
            unknown: vec![("t".into(), 2), ("nope".into(), 0)]
        }
    );
    assert_eq!(sm.state.groups.offsets["g"].len(), 1);
    // Only unknown ones: no group is created.
    sm.apply(Command::CommitOffsets {
        group: "empty".into(),
        offsets: vec![("nope".into(), 0, offset(3))],
        fence: None,
    });
    assert!(!sm.state.groups.offsets.contains_key("empty"));
}

#[test]
fn share_state_is_written_only_by_the_owner_at_its_epoch() {
    let mut sm = owned();
    let p1 = PartitionKey {
        topic: tid(1),
        partition: 1,
    };
    let write = |epoch: u64, broker: u32, offset: i64| Command::ShareState {
        broker: BrokerId(broker),
        partition: p1,
        epoch: Epoch(epoch),
        group: "sg".into(),
        state: CommittedOffset {
            offset,
            leader_epoch: -1,
            metadata: "1;".into(),
        },
    };
    assert!(matches!(
        sm.error(write(2, 1, 5)),
        MetaError::StaleEpoch { .. }
    ));
    assert!(matches!(
        sm.error(write(1, 2, 5)),
        MetaError::NotOwner { .. }
    ));
    assert_eq!(sm.apply(write(1, 1, 5)), Response::Ok);
    // Stored as the group's offset of the partition, by topic name.
    assert_eq!(
        sm.state.groups.offsets["sg"][&("t".to_string(), 1)].offset,
        5
    );
    // Gone with the topic.
    sm.ok(Command::DeleteTopic { name: "t".into() });
    assert!(sm.state.groups.offsets["sg"].is_empty());
}

#[test]
fn share_state_is_forgotten_only_by_the_owner_at_its_epoch() {
    let mut sm = owned();
    let p1 = PartitionKey {
        topic: tid(1),
        partition: 1,
    };
    let state = |offset: i64| CommittedOffset {
        offset,
        leader_epoch: -1,
        metadata: "1;".into(),
    };
    for p in [0, 1] {
        sm.ok(Command::ShareState {
            broker: BrokerId(1),
            partition: PartitionKey {
                topic: tid(1),
                partition: p,
            },
            epoch: Epoch(1),
            group: "sg".into(),
            state: state(5),
        });
    }
    let forget = |epoch: u64, broker: u32| Command::ForgetShareState {
        broker: BrokerId(broker),
        partition: p1,
        epoch: Epoch(epoch),
        group: "sg".into(),
    };
    // A paused old owner (or another broker) deletes nothing.
    assert!(matches!(
        sm.error(forget(2, 1)),
        MetaError::StaleEpoch { .. }
    ));
    assert!(matches!(sm.error(forget(1, 2)), MetaError::NotOwner { .. }));
    assert_eq!(sm.state.groups.offsets["sg"].len(), 2);
    // The owner at its epoch deletes this partition's state only.
    assert_eq!(sm.apply(forget(1, 1)), Response::Ok);
    assert_eq!(
        sm.state.groups.offsets["sg"].keys().collect::<Vec<_>>(),
        vec![&("t".to_string(), 0)]
    );
    // Already gone: not an error.
    assert_eq!(sm.apply(forget(1, 1)), Response::Ok);
    // The group's last partition gone: the group is gone.
    sm.ok(Command::ForgetShareState {
        broker: BrokerId(1),
        partition: PartitionKey {
            topic: tid(1),
            partition: 0,
        },
        epoch: Epoch(1),
        group: "sg".into(),
    });
    assert!(!sm.state.groups.offsets.contains_key("sg"));
}

#[test]
fn the_delayed_cursor_group_is_written_by_the_owner_only_never_by_a_commit() {
    let mut sm = owned();
    let group = crate::command::DELAYED_CURSOR_GROUP;
    let cursor = CommittedOffset {
        offset: 42,
        leader_epoch: -1,
        metadata: "floe-delayed-cursor".into(),
    };
    assert_eq!(
        sm.apply(Command::ShareState {
            broker: BrokerId(1),
            partition: PartitionKey {
                topic: tid(1),
                partition: 1,
            },
            epoch: Epoch(1),
            group: group.into(),
            state: cursor.clone(),
        }),
        Response::Ok
    );
    assert!(matches!(
        sm.error(Command::CommitOffsets {
            fence: None,
            group: group.into(),
            offsets: vec![(
                "t".into(),
                1,
                CommittedOffset {
                    offset: 99,
                    ..cursor
                }
            )],
        }),
        MetaError::InvalidRequest(_)
    ));
    assert_eq!(
        sm.state.groups.offsets[group][&("t".to_string(), 1)].offset,
        42
    );
}
