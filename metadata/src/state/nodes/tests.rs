//! The nodes concern's rules, and the ownership a restart or a death
//! moves, through `ClusterState::apply`.

use crate::command::{Command, NodeKind, Response};
use crate::controller;
use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch};
use crate::state::test_support::{Sm, obj, owned, range, register, tid};
use crate::state::{FIRST_PROXY_ID, NodeState, Ownership, UNASSIGNED_ID};

#[test]
fn a_broker_registering_again_while_alive_keeps_what_it_owned_at_the_next_epoch() {
    let mut sm = owned();
    let epochs = |sm: &Sm| -> Vec<(Option<BrokerId>, Epoch)> {
        let parts = sm.state.topics.partitions.values().map(|p| p.ownership);
        parts
            .chain(sm.state.topics.shards.values().copied())
            .map(|o| (o.owner, o.epoch))
            .collect()
    };
    let before = epochs(&sm);
    assert!(before.iter().all(|(o, _)| *o == Some(BrokerId(1))));
    // Its new process registers within the old one's lease.
    register(&mut sm, 1, 10);
    let after = epochs(&sm);
    assert_eq!(after.len(), before.len());
    for ((o, e), (o2, e2)) in before.iter().zip(&after) {
        assert_eq!(o2, o, "kept");
        assert_eq!(e2.0, e.0 + 1, "at the next epoch");
    }
    // A commit of the previous process, at the old epoch, is refused.
    let e = sm.error(Command::Commit {
        now_ms: 0,
        broker: BrokerId(1),
        object: obj(),
        ranges: vec![range(tid(1), 0, 1, 0, 9)],
    });
    assert!(matches!(e, MetaError::StaleEpoch { .. }), "{e}");
    sm.ok(Command::Commit {
        now_ms: 0,
        broker: BrokerId(1),
        object: obj(),
        ranges: vec![range(tid(1), 0, 2, 0, 9)],
    });
    // Another broker registering, or one registering after it was
    // found dead (it owns nothing then), moves nothing.
    let before = epochs(&sm);
    register(&mut sm, 2, 20);
    assert_eq!(epochs(&sm), before);
    sm.ok(Command::NodeDown {
        id: BrokerId(2),
        addr: "127.0.0.1:9002".into(),
    });
    let before = epochs(&sm);
    register(&mut sm, 2, 30);
    assert_eq!(epochs(&sm), before);
}

#[test]
fn a_broker_down_at_its_registered_address_loses_everything_at_once() {
    let mut sm = owned();
    register(&mut sm, 2, 0);
    let down = |id: u32, port: u32| Command::NodeDown {
        id: BrokerId(id),
        addr: format!("127.0.0.1:{port}"),
    };
    // Not its address (it registered again elsewhere), or no such broker:
    // nothing changes.
    let before = sm.state.clone();
    assert_eq!(sm.apply(down(1, 9002)), Response::Expired { nodes: vec![] });
    assert_eq!(sm.apply(down(9, 9009)), Response::Expired { nodes: vec![] });
    let mut after = sm.state.clone();
    after.revision = before.revision;
    assert_eq!(after, before);
    // Its address: dead now, long before its lease ends.
    assert_eq!(
        sm.apply(down(1, 9001)),
        Response::Expired {
            nodes: vec![BrokerId(1)]
        }
    );
    assert_eq!(sm.state.nodes.by_id[&BrokerId(1)].state, NodeState::Dead);
    assert!(
        sm.state
            .topics
            .partitions
            .values()
            .all(|p| p.ownership.owner.is_none() && p.ownership.epoch == Epoch(2))
    );
    assert!(controller::has_orphans(&sm.state));
    for c in controller::plan(&sm.state, 1) {
        sm.ok(c);
    }
    assert!(!controller::has_orphans(&sm.state));
    assert!(
        sm.state
            .topics
            .partitions
            .values()
            .all(|p| p.ownership.owner == Some(BrokerId(2)))
    );
    // Dead already: a second report is nothing.
    assert_eq!(sm.apply(down(1, 9001)), Response::Expired { nodes: vec![] });
}

#[test]
fn expired_lease_takes_ownership_away_and_controller_reassigns() {
    let mut sm = owned();
    register(&mut sm, 2, 0);
    sm.ok(Command::Heartbeat {
        id: BrokerId(2),
        now_ms: 5_000,
    });
    assert_eq!(
        controller::plan(&sm.state, 2_000),
        vec![Command::ExpireLeases { now_ms: 2_000 }]
    );
    let r = sm.apply(Command::ExpireLeases { now_ms: 2_000 });
    assert_eq!(
        r,
        Response::Expired {
            nodes: vec![BrokerId(1)]
        }
    );
    assert!(
        sm.state
            .topics
            .partitions
            .values()
            .all(|p| p.ownership.owner.is_none() && p.ownership.epoch == Epoch(2))
    );
    for c in controller::plan(&sm.state, 2_000) {
        sm.ok(c);
    }
    assert!(
        sm.state
            .topics
            .partitions
            .values()
            .all(|p| p.ownership.owner == Some(BrokerId(2)) && p.ownership.epoch == Epoch(3))
    );
    assert!(
        sm.state
            .topics
            .shards
            .values()
            .all(|s| s.owner == Some(BrokerId(2)))
    );
    // A dead broker's heartbeat is refused: it must register again.
    assert!(matches!(
        sm.error(Command::Heartbeat {
            id: BrokerId(1),
            now_ms: 2_100
        }),
        MetaError::UnknownBroker(_)
    ));
}

fn register_proxy(sm: &mut Sm, id: u32, now: u64) -> BrokerId {
    match sm.apply(Command::RegisterNode {
        id: BrokerId(id),
        kind: NodeKind::Proxy,
        addr: format!("127.0.0.1:{}", 19000 + id),
        now_ms: now,
        lease_ms: 1000,
    }) {
        Response::Registered { id } => id,
        other => panic!("proxy registration answered {other:?}"),
    }
}

/// Proxies are nodes of their own kind: they may be given ids above
/// every id so far (never one an earlier node had), share no id with a
/// broker, own nothing, and expire like any node.
#[test]
fn proxies_register_with_their_own_ids_and_expire_owning_nothing() {
    let mut sm = owned();
    let a = register_proxy(&mut sm, 0, 0);
    assert_eq!(a, BrokerId(FIRST_PROXY_ID));
    let b = register_proxy(&mut sm, 0, 0);
    assert_eq!(b, BrokerId(FIRST_PROXY_ID + 1));
    // A proxy naming its own id keeps it.
    assert_eq!(register_proxy(&mut sm, 7, 0), BrokerId(7));
    // An id is one kind's: a proxy cannot take broker 1's, nor a broker a proxy's.
    let e = sm.error(Command::RegisterNode {
        id: BrokerId(1),
        kind: NodeKind::Proxy,
        addr: "x:1".into(),
        now_ms: 0,
        lease_ms: 1000,
    });
    assert!(matches!(e, MetaError::InvalidRequest(_)), "{e:?}");
    let e = sm.error(Command::RegisterNode {
        id: a,
        kind: NodeKind::Broker,
        addr: "x:1".into(),
        now_ms: 0,
        lease_ms: 1000,
    });
    assert!(matches!(e, MetaError::InvalidRequest(_)), "{e:?}");
    // A stopping proxy drains (no longer listed as live at once).
    sm.ok(Command::Drain { id: b });
    assert_eq!(sm.state.nodes.by_id[&b].state, NodeState::Draining);
    // Broker 1 keeps renewing; the proxies do not: they expire, and no
    // partition or shard moves.
    sm.ok(Command::Heartbeat {
        id: BrokerId(1),
        now_ms: 1_500,
    });
    let before: Vec<Ownership> = sm
        .state
        .topics
        .partitions
        .values()
        .map(|p| p.ownership)
        .collect();
    let r = sm.apply(Command::ExpireLeases { now_ms: 1_500 });
    assert_eq!(
        r,
        Response::Expired {
            nodes: vec![BrokerId(7), a, b]
        }
    );
    let after: Vec<Ownership> = sm
        .state
        .topics
        .partitions
        .values()
        .map(|p| p.ownership)
        .collect();
    assert_eq!(before, after);
    assert!(controller::plan(&sm.state, 1_500).is_empty());
    // Registered again without an id, a proxy gets a new one: never a dead one's.
    assert_eq!(
        register_proxy(&mut sm, 0, 2_000),
        BrokerId(FIRST_PROXY_ID + 2)
    );
}

/// A broker may ask for an id too (a Deployment's pod has no ordinal):
/// it gets one above every id so far, never a dead node's, and owns
/// partitions under it like any broker.
#[test]
fn a_broker_without_an_id_is_given_a_new_one_and_owns_partitions() {
    let mut sm = owned();
    fn register_broker(sm: &mut Sm, now_ms: u64) -> BrokerId {
        match sm.apply(Command::RegisterNode {
            id: UNASSIGNED_ID,
            kind: NodeKind::Broker,
            addr: "127.0.0.1:19500".into(),
            now_ms,
            lease_ms: 1000,
        }) {
            Response::Registered { id } => id,
            other => panic!("broker registration answered {other:?}"),
        }
    }
    let a = register_broker(&mut sm, 0);
    assert_eq!(a, BrokerId(FIRST_PROXY_ID));
    assert_eq!(sm.state.nodes.by_id[&a].kind, NodeKind::Broker);
    // Broker 1 goes silent: its partitions move to the new broker.
    sm.ok(Command::Heartbeat {
        id: a,
        now_ms: 1_500,
    });
    sm.apply(Command::ExpireLeases { now_ms: 1_500 });
    for c in controller::plan(&sm.state, 1_500) {
        sm.apply(c);
    }
    assert!(
        sm.state
            .topics
            .partitions
            .values()
            .all(|p| p.ownership.owner == Some(a))
    );
    // Dead and registered again without an id: a new one, never a.
    sm.apply(Command::ExpireLeases { now_ms: 5_000 });
    assert_eq!(
        register_broker(&mut sm, 5_000),
        BrokerId(FIRST_PROXY_ID + 1)
    );
}

#[test]
fn a_new_leader_renews_every_live_lease_before_it_expires_any() {
    let mut sm = owned();
    register(&mut sm, 2, 0);
    // No leader for a while: both leases (1 s, from t=0) ran out.
    let now = 3_000;
    assert_eq!(
        controller::plan(&sm.state, now),
        vec![Command::ExpireLeases { now_ms: now }]
    );
    let renewals = controller::renew_all(&sm.state, now);
    assert_eq!(renewals.len(), 2, "{renewals:?}");
    for c in renewals {
        sm.ok(c);
    }
    // Nothing expires, nothing moves, no epoch changes.
    let before: Vec<_> = sm
        .state
        .topics
        .partitions
        .values()
        .map(|p| p.ownership)
        .collect();
    assert!(
        !controller::plan(&sm.state, now)
            .iter()
            .any(|c| matches!(c, Command::ExpireLeases { .. }))
    );
    let after: Vec<_> = sm
        .state
        .topics
        .partitions
        .values()
        .map(|p| p.ownership)
        .collect();
    assert_eq!(before, after);
    // A node that is really gone expires one lease later.
    assert_eq!(
        controller::plan(&sm.state, now + 1_001),
        vec![Command::ExpireLeases {
            now_ms: now + 1_001
        }]
    );
    // A dead node is not brought back by a renewal.
    sm.apply(Command::ExpireLeases {
        now_ms: now + 1_001,
    });
    assert!(controller::renew_all(&sm.state, now + 1_002).is_empty());
}

/// A broker asking for an id at `now` (a pod of a Deployment).
fn register_unnamed(sm: &mut Sm, now_ms: u64) -> BrokerId {
    match sm.apply(Command::RegisterNode {
        id: UNASSIGNED_ID,
        kind: NodeKind::Broker,
        addr: format!("127.0.0.1:{}", 20000 + now_ms % 1000),
        now_ms,
        lease_ms: 1000,
    }) {
        Response::Registered { id } => id,
        other => panic!("broker registration answered {other:?}"),
    }
}

fn sweep(now_ms: u64, retention_ms: u64) -> Command {
    Command::SweepDeadNodes {
        now_ms,
        retention_ms: Some(retention_ms),
    }
}

fn removed(ids: &[BrokerId]) -> Response {
    Response::NodesRemoved {
        nodes: ids.to_vec(),
    }
}

#[test]
fn a_dead_node_is_removed_once_dead_for_longer_than_the_retention_not_before() {
    let mut sm = owned();
    let a = register_unnamed(&mut sm, 0);
    // Broker 1 keeps renewing; `a` dies at 2 000.
    sm.ok(Command::Heartbeat {
        id: BrokerId(1),
        now_ms: 1_500,
    });
    sm.apply(Command::ExpireLeases { now_ms: 2_000 });
    let n = &sm.state.nodes.by_id[&a];
    assert_eq!(
        (n.state, n.dead_since_ms, n.removal_due_ms(10_000)),
        (NodeState::Dead, Some(2_000), Some(12_000))
    );
    // Not before the retention has passed: the controller proposes nothing,
    // and a sweep proposed anyway removes nothing.
    assert_eq!(
        controller::sweep_dead_nodes(&sm.state, 12_000, Some(10_000)),
        None
    );
    assert_eq!(sm.apply(sweep(12_000, 10_000)), removed(&[]));
    assert!(sm.state.nodes.by_id.contains_key(&a));
    // Past it: removed, and its heartbeat is refused like a dead node's.
    assert_eq!(
        controller::sweep_dead_nodes(&sm.state, 12_001, Some(10_000)),
        Some(sweep(12_001, 10_000))
    );
    assert_eq!(sm.apply(sweep(12_001, 10_000)), removed(&[a]));
    assert!(!sm.state.nodes.by_id.contains_key(&a));
    assert!(sm.state.nodes.by_id.contains_key(&BrokerId(1)));
    assert!(matches!(
        sm.error(Command::Heartbeat {
            id: a,
            now_ms: 12_002
        }),
        MetaError::UnknownBroker(_)
    ));
    assert_eq!(
        controller::sweep_dead_nodes(&sm.state, 99_000, Some(10_000)),
        None
    );
}

#[test]
fn dead_nodes_are_kept_forever_without_a_retention() {
    let mut sm = owned();
    let a = register_unnamed(&mut sm, 0);
    sm.apply(Command::ExpireLeases { now_ms: 2_000 });
    assert_eq!(
        controller::sweep_dead_nodes(&sm.state, u64::MAX, None),
        None
    );
    assert_eq!(
        sm.apply(Command::SweepDeadNodes {
            now_ms: u64::MAX,
            retention_ms: None
        }),
        removed(&[])
    );
    assert!(sm.state.nodes.by_id.contains_key(&a));
}

#[test]
fn a_node_reported_down_is_dead_since_the_next_sweep() {
    let mut sm = owned();
    register(&mut sm, 2, 0);
    sm.ok(Command::NodeDown {
        id: BrokerId(2),
        addr: "127.0.0.1:9002".into(),
    });
    // The report has no time: the controller's next round stamps it.
    assert_eq!(sm.state.nodes.by_id[&BrokerId(2)].dead_since_ms, None);
    assert_eq!(
        controller::sweep_dead_nodes(&sm.state, 500, None),
        Some(Command::SweepDeadNodes {
            now_ms: 500,
            retention_ms: None
        })
    );
    assert_eq!(sm.apply(sweep(500, 0)), removed(&[]));
    assert_eq!(sm.state.nodes.by_id[&BrokerId(2)].dead_since_ms, Some(500));
    assert_eq!(controller::sweep_dead_nodes(&sm.state, 500, None), None);
    assert_eq!(sm.apply(sweep(501, 0)), removed(&[BrokerId(2)]));
}

#[test]
fn a_dead_node_a_partition_or_shard_still_names_is_kept_until_it_moves() {
    let mut sm = owned();
    register(&mut sm, 2, 0);
    // A model where dead broker 2 still owns a partition and is the target
    // of a shard's hand-over (a death moves both at once; the sweep does
    // not count on it).
    sm.state.nodes.by_id.get_mut(&BrokerId(2)).unwrap().state = NodeState::Dead;
    sm.state
        .nodes
        .by_id
        .get_mut(&BrokerId(2))
        .unwrap()
        .dead_since_ms = Some(0);
    let p = *sm.state.topics.partitions.keys().next().unwrap();
    sm.state
        .topics
        .partitions
        .get_mut(&p)
        .unwrap()
        .ownership
        .owner = Some(BrokerId(2));
    let shard = *sm.state.topics.shards.keys().next().unwrap();
    sm.state.topics.shards.get_mut(&shard).unwrap().handover = Some(crate::state::Handover {
        to: BrokerId(2),
        since_ms: 0,
    });
    assert_eq!(
        controller::sweep_dead_nodes(&sm.state, 5_000, Some(1_000)),
        None
    );
    assert_eq!(sm.apply(sweep(5_000, 1_000)), removed(&[]));
    assert!(sm.state.nodes.by_id.contains_key(&BrokerId(2)));
    // The partition moves: the hand-over still names it.
    sm.ok(Command::Reassign {
        changes: vec![crate::command::OwnershipChange {
            item: crate::command::OwnedItem::Partition(p),
            owner: Some(BrokerId(1)),
        }],
    });
    assert_eq!(sm.apply(sweep(5_000, 1_000)), removed(&[]));
    // The hand-over is called off: nothing names it any more.
    sm.state.topics.shards.get_mut(&shard).unwrap().handover = None;
    assert_eq!(
        controller::sweep_dead_nodes(&sm.state, 5_000, Some(1_000)),
        Some(sweep(5_000, 1_000))
    );
    assert_eq!(sm.apply(sweep(5_000, 1_000)), removed(&[BrokerId(2)]));
}

/// Pod-like restarts: every start asks for an id, dies, and is removed.
/// The ids given only grow, never one seen before, even once every
/// earlier node is gone from the records.
#[test]
fn ids_are_never_given_again_after_their_nodes_are_removed() {
    let mut sm = owned();
    let mut seen = vec![BrokerId(1)];
    let mut now = 0;
    for _ in 0..5 {
        let id = register_unnamed(&mut sm, now);
        assert!(seen.iter().all(|s| *s < id), "{id} after {seen:?}");
        seen.push(id);
        sm.ok(Command::Heartbeat {
            id: BrokerId(1),
            now_ms: now + 1_500,
        });
        now += 2_000;
        sm.apply(Command::ExpireLeases { now_ms: now });
        assert_eq!(sm.apply(sweep(now + 101, 100)), removed(&[id]));
        assert_eq!(sm.state.nodes.highest_id, id);
    }
    assert_eq!(sm.state.nodes.by_id.len(), 1, "only broker 1 is left");
    assert_eq!(seen[1], BrokerId(FIRST_PROXY_ID));
    // A proxy asking for an id is given the next one too.
    assert_eq!(
        register_proxy(&mut sm, 0, now),
        BrokerId(seen.last().unwrap().0 + 1)
    );
    // A removed broker naming its own id registers anew (it owns nothing).
    sm.ok(Command::RegisterNode {
        id: seen[2],
        kind: NodeKind::Broker,
        addr: "127.0.0.1:9999".into(),
        now_ms: now,
        lease_ms: 1000,
    });
    assert_eq!(sm.state.nodes.by_id[&seen[2]].state, NodeState::Live);
    assert_eq!(sm.state.nodes.by_id[&seen[2]].dead_since_ms, None);
}

#[test]
fn a_broker_naming_a_high_id_raises_the_ids_given_after_it() {
    let mut sm = owned();
    register(&mut sm, 5_000, 0);
    assert_eq!(sm.state.nodes.highest_id, BrokerId(5_000));
    assert_eq!(register_unnamed(&mut sm, 0), BrokerId(5_001));
    // None left that Kafka can name above the last id: refused, nothing
    // given twice.
    sm.state.nodes.highest_id = BrokerId(i32::MAX as u32);
    let e = sm.error(Command::RegisterNode {
        id: UNASSIGNED_ID,
        kind: NodeKind::Proxy,
        addr: "x:1".into(),
        now_ms: 0,
        lease_ms: 1000,
    });
    assert!(matches!(e, MetaError::InvalidRequest(_)), "{e:?}");
}

/// The state of a cluster that removed nodes: dead ones with their death
/// times, and the highest id above every id on record.
fn after_removals() -> Sm {
    let mut sm = owned();
    let a = register_unnamed(&mut sm, 0);
    let b = register_unnamed(&mut sm, 0);
    sm.ok(Command::Heartbeat {
        id: BrokerId(1),
        now_ms: 1_500,
    });
    sm.ok(Command::Heartbeat {
        id: a,
        now_ms: 1_500,
    });
    sm.apply(Command::ExpireLeases { now_ms: 2_000 });
    assert_eq!(sm.apply(sweep(2_500, 100)), removed(&[b]));
    sm.ok(Command::Heartbeat {
        id: BrokerId(1),
        now_ms: 2_900,
    });
    sm.apply(Command::ExpireLeases { now_ms: 3_000 });
    assert_eq!(sm.state.nodes.by_id[&a].dead_since_ms, Some(3_000));
    assert_eq!(sm.state.nodes.highest_id, b);
    assert!(sm.state.nodes.by_id.keys().all(|id| *id < b));
    sm
}

#[test]
fn the_highest_id_and_the_death_times_survive_a_snapshot_round_trip() {
    let sm = after_removals();
    let bytes = crate::raft::codec::encode(&sm.state).unwrap();
    let back: crate::state::ClusterState = crate::raft::codec::decode(&bytes).unwrap();
    assert_eq!(back, sm.state);
    let json = serde_json::to_vec(&sm.state).unwrap();
    let back: crate::state::ClusterState = serde_json::from_slice(&json).unwrap();
    assert_eq!(back, sm.state);
    // The next id given after a restart is still above the removed one.
    let mut restarted = Sm::new();
    restarted.state = back;
    let b = sm.state.nodes.highest_id;
    assert_eq!(register_unnamed(&mut restarted, 4_000), BrokerId(b.0 + 1));
}

#[test]
fn a_snapshot_of_an_older_version_without_the_new_fields_reads() {
    let sm = after_removals();
    let mut json = serde_json::to_value(&sm.state).unwrap();
    let fields = json.as_object_mut().unwrap();
    assert!(fields.remove("highest_node_id").is_some());
    assert!(fields.remove("node_deaths").is_some());
    let back: crate::state::ClusterState = serde_json::from_value(json).unwrap();
    // Its dead nodes have no death time: the next sweep stamps them.
    let a = BrokerId(FIRST_PROXY_ID);
    assert_eq!(back.nodes.by_id[&a].state, NodeState::Dead);
    assert_eq!(back.nodes.by_id[&a].dead_since_ms, None);
    // The highest id is the highest on record (an older version removed
    // no node, so no id above it was ever given).
    assert_eq!(back.nodes.highest_id, a);
    let mut old = Sm::new();
    old.state = back;
    assert_eq!(
        controller::sweep_dead_nodes(&old.state, 9_000, Some(100)),
        Some(sweep(9_000, 100))
    );
    assert_eq!(old.apply(sweep(9_000, 100)), removed(&[]));
    assert_eq!(old.state.nodes.by_id[&a].dead_since_ms, Some(9_000));
    assert_eq!(old.apply(sweep(9_101, 100)), removed(&[a]));
    assert_eq!(register_unnamed(&mut old, 9_200), BrokerId(a.0 + 1));
}
