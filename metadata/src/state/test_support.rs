//! What the concerns' tests share: a model that numbers its commands
//! ([`Sm`]) and the small fixtures they build it with.

use std::collections::BTreeMap;

use crate::command::{
    Command, CommitRange, CommittedOffset, NewObject, NodeKind, ObjectSel, OwnedItem,
    OwnershipChange, Response,
};
use crate::controller;
use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch, PartitionKey, Revision, ShardId, TopicId};

use super::ClusterState;

pub(crate) fn tid(n: u8) -> TopicId {
    TopicId(uuid::Uuid::from_bytes([n; 16]))
}

/// The model with the revision of the last command applied.
pub(crate) struct Sm {
    pub state: ClusterState,
    pub rev: u64,
}

impl Sm {
    pub fn new() -> Self {
        Self {
            state: ClusterState::default(),
            rev: 0,
        }
    }
    pub fn apply(&mut self, c: Command) -> Response {
        self.rev += 1;
        self.state.apply(Revision(self.rev), &c)
    }
    pub fn ok(&mut self, c: Command) {
        let r = self.apply(c.clone());
        assert!(!matches!(r, Response::Error(_)), "{c:?} -> {r:?}");
    }
    pub fn error(&mut self, c: Command) -> MetaError {
        let before = self.state.clone();
        match self.apply(c) {
            Response::Error(e) => {
                let mut after = self.state.clone();
                after.revision = before.revision;
                assert_eq!(after, before, "a refused command changed nothing");
                e
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }
}

pub(crate) fn register(sm: &mut Sm, id: u32, now: u64) {
    sm.ok(Command::RegisterNode {
        id: BrokerId(id),
        kind: NodeKind::Broker,
        addr: format!("127.0.0.1:{}", 9000 + id),
        now_ms: now,
        lease_ms: 1000,
    });
}

/// Registers broker 2 and gives it `shard` (a coordinator move).
pub(crate) fn move_shard_to_broker_2(sm: &mut Sm, shard: ShardId) {
    register(sm, 2, 0);
    sm.ok(Command::Reassign {
        changes: vec![OwnershipChange {
            item: OwnedItem::Shard(shard),
            owner: Some(BrokerId(2)),
        }],
    });
}

pub(crate) fn topic(sm: &mut Sm, name: &str, id: TopicId, partitions: u32) {
    sm.ok(Command::CreateTopic {
        name: name.into(),
        id,
        partitions,
        config: BTreeMap::new(),
    });
}

pub(crate) fn range(t: TopicId, p: u32, epoch: u64, first: i64, last: i64) -> CommitRange {
    CommitRange {
        partition: PartitionKey {
            topic: t,
            partition: p,
        },
        epoch: Epoch(epoch),
        first_offset: first,
        last_offset: last,
        max_timestamp: 1,
        object: ObjectSel::New,
        byte_start: 0,
        byte_len: 10,
        producers: vec![],
    }
}

pub(crate) fn obj() -> Option<NewObject> {
    Some(NewObject {
        endpoint: "default".into(),
        key: "wal/x.wal".into(),
        size: 100,
    })
}

/// A cluster with broker 1 owning both partitions of topic "t" at epoch 1.
pub(crate) fn owned() -> Sm {
    let mut sm = Sm::new();
    register(&mut sm, 1, 0);
    topic(&mut sm, "t", tid(1), 2);
    for c in controller::plan(&sm.state, 0) {
        sm.ok(c);
    }
    sm
}

pub(crate) fn pt(t: TopicId, p: u32) -> OwnedItem {
    OwnedItem::Partition(PartitionKey {
        topic: t,
        partition: p,
    })
}

pub(crate) fn offset(o: i64) -> CommittedOffset {
    CommittedOffset {
        offset: o,
        leader_epoch: 0,
        metadata: String::new(),
    }
}

/// Partitions and shards broker `b` owns.
pub(crate) fn count(sm: &Sm, b: u32) -> usize {
    sm.state
        .topics
        .partitions
        .values()
        .map(|p| p.ownership)
        .chain(sm.state.topics.shards.values().copied())
        .filter(|o| o.owner == Some(BrokerId(b)))
        .count()
}

/// The difference between the most and the fewest items these brokers own.
pub(crate) fn spread(sm: &Sm, brokers: std::ops::RangeInclusive<u32>) -> usize {
    let counts: Vec<usize> = brokers.map(|b| count(sm, b)).collect();
    counts.iter().max().unwrap() - counts.iter().min().unwrap()
}

/// Every owner releases what it is asked to hand over, as a broker would.
pub(crate) fn release_all(sm: &mut Sm) {
    let mut by_owner: BTreeMap<BrokerId, Vec<(OwnedItem, Epoch)>> = BTreeMap::new();
    let partitions = sm
        .state
        .topics
        .partitions
        .iter()
        .map(|(p, s)| (OwnedItem::Partition(*p), s.ownership));
    let shards = sm
        .state
        .topics
        .shards
        .iter()
        .map(|(s, o)| (OwnedItem::Shard(*s), *o));
    for (item, o) in partitions.chain(shards) {
        if let (Some(owner), Some(_)) = (o.owner, o.handover) {
            by_owner.entry(owner).or_default().push((item, o.epoch));
        }
    }
    for (broker, items) in by_owner {
        sm.ok(Command::Release { broker, items });
    }
}
