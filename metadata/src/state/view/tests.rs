use super::*;
use crate::command::OwnershipChange;
use crate::ids::{BrokerId, PartitionKey, ShardId};

fn tid(n: u128) -> TopicId {
    TopicId(uuid::Uuid::from_u128(n))
}

fn moved(topic: u128, partition: u32) -> OwnershipChange {
    OwnershipChange {
        item: OwnedItem::Partition(PartitionKey {
            topic: tid(topic),
            partition,
        }),
        owner: Some(BrokerId(1)),
    }
}

#[test]
fn commands_say_what_they_change_in_the_view() {
    let st = ClusterState::default();
    let none = |cmd: &Command, resp: &Response| change_of(&st, cmd, resp, &[]).is_empty();
    let hb = Command::Heartbeat {
        id: BrokerId(1),
        now_ms: 5,
    };
    assert!(none(&hb, &Response::Ok));
    let expire = Command::ExpireLeases { now_ms: 5 };
    assert!(none(&expire, &Response::Expired { nodes: vec![] }));
    let died = change_of(
        &st,
        &expire,
        &Response::Expired {
            nodes: vec![BrokerId(2)],
        },
        &[],
    );
    assert!(died.all, "a death moves a node's items: everything");
    // A reassignment: the topics of its partitions; a shard is global.
    let mut changes = vec![moved(1, 0), moved(1, 1), moved(2, 0)];
    changes.push(OwnershipChange {
        item: OwnedItem::Shard(ShardId(3)),
        owner: Some(BrokerId(1)),
    });
    let c = change_of(&st, &Command::Reassign { changes }, &Response::Ok, &[]);
    assert_eq!(c.topics, BTreeSet::from([tid(1), tid(2)]));
    assert!(c.global && !c.all);
    // A refused command changed nothing.
    let refused = Response::Error(crate::MetaError::InvalidRequest("no".into()));
    assert!(none(
        &Command::Reassign {
            changes: vec![moved(1, 0)]
        },
        &refused
    ));
    // A deletion names what it deleted (read before it was applied).
    let del = Command::DeleteTopic { name: "t".into() };
    let c = change_of(&st, &del, &Response::Ok, &[tid(9)]);
    assert_eq!(c.deleted, BTreeSet::from([tid(9)]));
    // A batch merges its commands' changes.
    let batch = Command::Batch(vec![hb, Command::Drain { id: BrokerId(1) }]);
    let c = change_of(
        &st,
        &batch,
        &Response::Batch(vec![Response::Ok, Response::Ok]),
        &[],
    );
    assert!(c.global && c.topics.is_empty());
}

#[test]
fn a_change_of_too_many_topics_is_a_whole_one() {
    let st = ClusterState::default();
    let changes = (0..=MAX_TOPICS_PER_CHANGE as u128)
        .map(|t| moved(t, 0))
        .collect();
    assert!(change_of(&st, &Command::Reassign { changes }, &Response::Ok, &[]).all);
    let mut c = ViewChange::default();
    for t in 0..=MAX_TOPICS_PER_CHANGE as u128 {
        let one = ViewChange {
            topics: BTreeSet::from([tid(t)]),
            ..ViewChange::default()
        };
        c.merge(&one);
    }
    assert!(c.all && c.topics.is_empty());
}

#[test]
fn the_log_answers_what_changed_since_a_revision_it_reaches_back_to() {
    let mut log = ViewLog::new(Revision(10));
    let topic = |t| ViewChange {
        topics: BTreeSet::from([tid(t)]),
        ..ViewChange::default()
    };
    log.push(Revision(12), topic(1));
    log.push(Revision(15), topic(2));
    assert_eq!(log.since(Revision(9)), None, "before the log's base");
    assert_eq!(log.since(Revision(10)).map(|c| c.topics.len()), Some(2));
    assert_eq!(
        log.since(Revision(12)).map(|c| c.topics),
        Some(BTreeSet::from([tid(2)]))
    );
    assert_eq!(log.since(Revision(15)), Some(ViewChange::default()));
    // Past its bound the log forgets its oldest changes, and its base moves.
    for r in 0..VIEW_LOG_CHANGES as u64 {
        log.push(Revision(100 + r), topic(3));
    }
    assert_eq!(
        log.since(Revision(12)),
        None,
        "the change at 15 is forgotten"
    );
    assert!(
        log.since(Revision(15))
            .is_some_and(|c| c.topics == BTreeSet::from([tid(3)]))
    );
}
