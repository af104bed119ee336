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
