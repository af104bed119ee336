// The coordinator with a [`GroupStore`]: a generation's assignment is
// handed out once stored, a new coordinator resumes the stored group, and
// the record is forgotten when the group empties.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use super::*;

/// A store in memory that can be held shut (writes wait) or made to fail.
#[derive(Debug)]
struct MemStore {
    records: Mutex<HashMap<String, Vec<u8>>>,
    /// `(shard epoch, group, stored)` of every write, in order.
    writes: Mutex<Vec<(u64, String, bool)>>,
    /// Writes wait while it is false.
    gate: watch::Sender<bool>,
    fail: AtomicBool,
}

impl MemStore {
    fn new(open: bool) -> Arc<Self> {
        Arc::new(Self {
            records: Mutex::new(HashMap::new()),
            writes: Mutex::new(Vec::new()),
            gate: watch::Sender::new(open),
            fail: AtomicBool::new(false),
        })
    }

    fn open(&self) {
        self.gate.send_replace(true);
    }

    fn shut(&self) {
        self.gate.send_replace(false);
    }

    fn record(&self, group: &str) -> Option<GroupRecord> {
        self.records
            .lock()
            .unwrap()
            .get(group)
            .map(|b| GroupRecord::from_bytes(group, b).unwrap())
    }

    fn all(&self) -> Vec<(String, Vec<u8>)> {
        let r = self.records.lock().unwrap();
        r.iter().map(|(g, b)| (g.clone(), b.clone())).collect()
    }
}

#[async_trait::async_trait]
impl GroupStore for MemStore {
    async fn write(
        &self,
        _shard: u32,
        shard_epoch: u64,
        group: &str,
        record: Option<Vec<u8>>,
    ) -> Result<(), GroupError> {
        let mut gate = self.gate.subscribe();
        gate.wait_for(|open| *open)
            .await
            .expect("the store is alive");
        if self.fail.load(Ordering::SeqCst) {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        self.writes
            .lock()
            .unwrap()
            .push((shard_epoch, group.to_string(), record.is_some()));
        let mut records = self.records.lock().unwrap();
        match record {
            Some(r) => records.insert(group.to_string(), r),
            None => records.remove(group),
        };
        Ok(())
    }
}

fn stored_coordinator(store: &Arc<MemStore>, shard_epoch: u64) -> Arc<GroupCoordinator> {
    let c = GroupCoordinator::new(config()).with_store(store.clone());
    c.shard_taken(shard_of(GROUP, config().shards), shard_epoch);
    Arc::new(c)
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within 5 s");
}

#[tokio::test]
async fn a_generations_assignment_is_handed_out_once_stored() {
    let store = MemStore::new(false);
    let c = stored_coordinator(&store, 3);
    let joined = join_all(&c, vec![join(""), join("")]).await;
    let syncs = {
        let (c, joined) = (c.clone(), joined.clone());
        tokio::spawn(async move { sync_all(&c, &joined).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!syncs.is_finished(), "answered before the group was stored");
    assert_eq!(
        c.describe_group(GROUP).state,
        GroupState::CompletingRebalance
    );
    store.open();
    for s in within(syncs).await.unwrap() {
        assert_eq!(s.error, None);
    }
    assert_eq!(c.describe_group(GROUP).state, GroupState::Stable);
    let record = store.record(GROUP).expect("stored");
    assert_eq!(record.generation, joined[0].generation_id);
    assert_eq!(record.leader, leader(&joined).member_id);
    assert_eq!(record.protocol_name, "range");
    let mut stored: Vec<(String, Bytes)> = record
        .members
        .iter()
        .map(|m| (m.member_id.clone(), m.assignment.clone()))
        .collect();
    stored.sort();
    let mut expected: Vec<(String, Bytes)> = joined
        .iter()
        .map(|j| (j.member_id.clone(), assignment_for(&j.member_id)))
        .collect();
    expected.sort();
    assert_eq!(stored, expected);
    assert!(
        store.writes.lock().unwrap().iter().all(|w| w.0 == 3),
        "written under the shard epoch it holds"
    );
}

#[tokio::test]
async fn a_generation_that_cannot_be_stored_is_abandoned_and_its_members_rejoin() {
    let store = MemStore::new(true);
    store.fail.store(true, Ordering::SeqCst);
    let c = stored_coordinator(&store, 1);
    let joined = join_all(&c, vec![join(""), join("")]).await;
    for s in sync_all(&c, &joined).await {
        assert_eq!(s.error, Some(GroupError::CoordinatorNotAvailable));
    }
    assert_eq!(
        c.describe_group(GROUP).state,
        GroupState::PreparingRebalance
    );
    // Once the store works again, the rejoin forms a stored generation.
    store.fail.store(false, Ordering::SeqCst);
    let again = join_all(&c, joined.iter().map(rejoin).collect()).await;
    assert!(again[0].generation_id > joined[0].generation_id);
    for s in sync_all(&c, &again).await {
        assert_eq!(s.error, None);
    }
    assert_eq!(
        store.record(GROUP).unwrap().generation,
        again[0].generation_id
    );
}

#[tokio::test]
async fn a_new_coordinator_resumes_the_stored_group_without_a_rebalance() {
    let store = MemStore::new(true);
    let before = stored_coordinator(&store, 1);
    let joined = join_all(&before, vec![join(""), static_join("s")]).await;
    sync_all(&before, &joined).await;
    let generation = joined[0].generation_id;
    // The shard moves: the old coordinator drops it, a new one takes it
    // over at a later epoch and loads what was stored.
    let shard = shard_of(GROUP, config().shards);
    before.drop_shard(shard);
    let after = stored_coordinator(&store, 2);
    assert_eq!(after.load_shard(shard, store.all()), 1);

    let described = after.describe_group(GROUP);
    assert_eq!(described.state, GroupState::Stable);
    assert_eq!(described.protocol_data, "range");
    let mut members: Vec<(String, Bytes)> = described
        .members
        .iter()
        .map(|m| (m.member_id.clone(), m.assignment.clone()))
        .collect();
    members.sort();
    let mut expected: Vec<(String, Bytes)> = joined
        .iter()
        .map(|j| (j.member_id.clone(), assignment_for(&j.member_id)))
        .collect();
    expected.sort();
    assert_eq!(members, expected);
    // Members carry on: heartbeats, commits, a follower's unchanged rejoin
    // and SyncGroup all answer the stored generation.
    let dynamic = joined
        .iter()
        .find(|j| !j.member_id.starts_with("s-"))
        .unwrap();
    let fixed = joined
        .iter()
        .find(|j| j.member_id.starts_with("s-"))
        .unwrap();
    assert_eq!(
        after.heartbeat(GROUP, generation, &dynamic.member_id, None),
        Ok(())
    );
    assert_eq!(
        after.heartbeat(GROUP, generation, &fixed.member_id, Some("s")),
        Ok(())
    );
    assert_eq!(
        after.validate_commit(GROUP, generation, &dynamic.member_id, None),
        Ok(())
    );
    let f = follower(&joined);
    let again = within(after.join_group(JoinParams {
        group_instance_id: f.member_id.starts_with("s-").then(|| "s".to_string()),
        ..rejoin(f)
    }))
    .await;
    assert_eq!(again.error, None);
    assert_eq!(again.generation_id, generation);
    let synced = within(after.sync_group(SyncParams {
        group_instance_id: f.member_id.starts_with("s-").then(|| "s".to_string()),
        ..sync(&again, Vec::new())
    }))
    .await;
    assert_eq!(synced.assignment, assignment_for(&f.member_id));
    // The old coordinator's member ids of another generation are not taken.
    assert_eq!(
        after.heartbeat(GROUP, generation + 1, &dynamic.member_id, None),
        Err(GroupError::IllegalGeneration)
    );
    // A record that does not decode is skipped: its members rejoin.
    let garbage = vec![("other".to_string(), vec![0xff, 0xff])];
    assert_eq!(
        after.load_shard(shard_of("other", config().shards), garbage),
        0
    );
}

#[tokio::test]
async fn a_resumed_group_whose_members_are_gone_empties_and_is_forgotten() {
    let store = MemStore::new(true);
    let before = stored_coordinator(&store, 1);
    let short = JoinParams {
        session_timeout_ms: 100,
        rebalance_timeout_ms: 100,
        ..join("")
    };
    let joined = join_all(&before, vec![short]).await;
    sync_all(&before, &joined).await;
    assert!(store.record(GROUP).is_some());
    let shard = shard_of(GROUP, config().shards);
    before.drop_shard(shard);
    let after = stored_coordinator(&store, 2);
    assert_eq!(after.load_shard(shard, store.all()), 1);
    // Nobody heartbeats: the member's session (from the load) runs out,
    // the group empties and its record is deleted.
    eventually("the record forgotten", || store.record(GROUP).is_none()).await;
    assert_eq!(after.describe_group(GROUP).state, GroupState::Empty);
    let last = store.writes.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last, (2, GROUP.to_string(), false));
}

#[tokio::test]
async fn a_replaced_static_member_is_answered_once_its_new_id_is_stored() {
    let store = MemStore::new(true);
    let c = stored_coordinator(&store, 1);
    let first = join_all(&c, vec![static_join("a")]).await;
    sync_all(&c, &first).await;
    // The instance restarts while the store is held shut: its JoinGroup
    // waits, since a coordinator resuming the group with only the old
    // member id would fence the new one.
    store.shut();
    let restarted = {
        let c = c.clone();
        tokio::spawn(async move { c.join_group(static_join("a")).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !restarted.is_finished(),
        "answered before the new id was stored"
    );
    store.open();
    let restarted = within(restarted).await.unwrap();
    assert_eq!(restarted.error, None);
    assert_ne!(restarted.member_id, first[0].member_id);
    let record = store.record(GROUP).unwrap();
    assert_eq!(record.members.len(), 1);
    assert_eq!(record.members[0].member_id, restarted.member_id);
    assert_eq!(record.members[0].group_instance_id.as_deref(), Some("a"));
}

fn consumer_join(member: &str) -> consumer::ConsumerHeartbeat {
    consumer::ConsumerHeartbeat {
        group_id: "cg".into(),
        member_id: member.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 5_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(Default::default()),
        ..Default::default()
    }
}

fn consumer_topics(name: &str) -> Option<consumer::TopicMeta> {
    (name == "t").then_some(consumer::TopicMeta {
        id: floe_types::TopicId(uuid::Uuid::from_bytes([3; 16])),
        partitions: 4,
    })
}

#[tokio::test]
async fn a_consumer_group_is_stored_before_answering_and_resumed_by_the_next_coordinator() {
    let store = MemStore::new(true);
    let shard = shard_of("cg", config().shards);
    let before = GroupCoordinator::new(config()).with_store(store.clone());
    before.shard_taken(shard, 1);
    let before = Arc::new(before);
    let a = before
        .consumer_heartbeat(consumer_join("a"), &consumer_topics)
        .await
        .unwrap();
    assert!(store.record("cg").unwrap().consumer.is_some());
    // Held shut: b's join waits for the store.
    store.shut();
    let b = {
        let c = before.clone();
        tokio::spawn(async move {
            c.consumer_heartbeat(consumer_join("b"), &consumer_topics)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!b.is_finished(), "answered before the group was stored");
    store.open();
    let b = within(b).await.unwrap().unwrap();
    let stored = store.record("cg").unwrap().consumer.unwrap();
    assert_eq!(stored.members.len(), 2);
    // A plain heartbeat that changes nothing stored writes nothing.
    let writes = store.writes.lock().unwrap().len();
    let again = consumer::ConsumerHeartbeat {
        member_epoch: b.member_epoch,
        subscribed_topic_names: None,
        rebalance_timeout_ms: -1,
        owned: b.assignment.clone(),
        ..consumer_join("b")
    };
    before
        .consumer_heartbeat(again.clone(), &consumer_topics)
        .await
        .unwrap();
    before
        .consumer_heartbeat(again.clone(), &consumer_topics)
        .await
        .unwrap();
    assert_eq!(store.writes.lock().unwrap().len(), writes);

    // The shard moves: the next coordinator resumes both members.
    before.drop_shard(shard);
    let after = GroupCoordinator::new(config()).with_store(store.clone());
    after.shard_taken(shard, 2);
    assert_eq!(after.load_shard(shard, store.all()), 1);
    let described = after.consumer_describe("cg").unwrap();
    assert_eq!(described.members.len(), 2);
    let answer = after
        .consumer_heartbeat(again, &consumer_topics)
        .await
        .expect("b carries on at its epoch");
    assert_eq!(answer.member_epoch, b.member_epoch);
    let a_epoch = described
        .members
        .iter()
        .find(|m| m.member_id == "a")
        .map(|m| m.member_epoch)
        .unwrap();
    assert!(a_epoch >= a.member_epoch);
    assert_eq!(after.validate_commit("cg", a_epoch, "a", None), Ok(()));
    // Both leave: the record is deleted with the group.
    for m in ["a", "b"] {
        let leave = consumer::ConsumerHeartbeat {
            group_id: "cg".into(),
            member_id: m.into(),
            member_epoch: -1,
            ..Default::default()
        };
        after
            .consumer_heartbeat(leave, &consumer_topics)
            .await
            .unwrap();
    }
    assert!(store.record("cg").is_none());
    let last = store.writes.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last, (2, "cg".to_string(), false));
}

#[tokio::test]
async fn a_consumer_heartbeat_whose_change_cannot_be_stored_is_an_error() {
    let store = MemStore::new(true);
    store.fail.store(true, Ordering::SeqCst);
    let c = GroupCoordinator::new(config()).with_store(store.clone());
    let e = c
        .consumer_heartbeat(consumer_join("a"), &consumer_topics)
        .await
        .unwrap_err();
    assert_eq!(e, GroupError::CoordinatorNotAvailable);
    // Once the store works, the member's retry joins.
    store.fail.store(false, Ordering::SeqCst);
    c.consumer_heartbeat(consumer_join("a"), &consumer_topics)
        .await
        .unwrap();
    assert!(store.record("cg").is_some());
}
