//! Ownership moves, hand-overs and releases, as the controller plans
//! them, through `ClusterState::apply`.

use std::collections::BTreeMap;

use crate::command::Command;
use crate::controller;
use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch, PartitionKey};
use crate::state::DEFAULT_SHARDS;
use crate::state::test_support::{Sm, count, owned, pt, register, release_all, spread, tid, topic};

#[test]
fn assignment_is_balanced_and_deterministic() {
    let mut sm = Sm::new();
    for b in 1..=3 {
        register(&mut sm, b, 0);
    }
    topic(&mut sm, "a", tid(1), 10);
    topic(&mut sm, "b", tid(2), 7);
    let first = controller::plan(&sm.state, 0);
    assert_eq!(
        first,
        controller::plan(&sm.state.clone(), 0),
        "deterministic"
    );
    for c in first {
        sm.ok(c);
    }
    let total = 17 + DEFAULT_SHARDS as usize;
    assert_eq!((1..=3).map(|b| count(&sm, b)).sum::<usize>(), total);
    assert!(spread(&sm, 1..=3) <= 1);
    assert!(
        controller::plan(&sm.state, 0).is_empty(),
        "stable once balanced"
    );

    // A new broker gets a fair share through hand-overs: nothing moves
    // until the owners release, then the new owner has it at epoch + 1.
    register(&mut sm, 4, 0);
    let plan = controller::plan(&sm.state, 500);
    assert!(
        matches!(plan.as_slice(), [Command::BeginHandover { .. }]),
        "{plan:?}"
    );
    for c in plan {
        sm.ok(c);
    }
    assert_eq!(
        count(&sm, 4),
        0,
        "owners keep their items until they release"
    );
    let again = controller::plan(&sm.state, 600);
    assert!(again.is_empty(), "no second hand-over: {again:?}");
    let before: BTreeMap<PartitionKey, Epoch> = sm
        .state
        .topics
        .partitions
        .iter()
        .map(|(p, s)| (*p, s.ownership.epoch))
        .collect();
    release_all(&mut sm);
    assert!(spread(&sm, 1..=4) <= 1);
    // Partitions and shards are each evened out: the new broker takes
    // its share of the partitions, not only shards.
    let partitions_of = |b: u32| {
        sm.state
            .topics
            .partitions
            .values()
            .filter(|p| p.ownership.owner == Some(BrokerId(b)))
            .count()
    };
    let shards_of = |b: u32| {
        sm.state
            .topics
            .shards
            .values()
            .filter(|o| o.owner == Some(BrokerId(b)))
            .count()
    };
    let parts: Vec<usize> = (1..=4).map(partitions_of).collect();
    let shards: Vec<usize> = (1..=4).map(shards_of).collect();
    assert!(
        parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1,
        "partitions {parts:?}"
    );
    assert!(
        shards.iter().max().unwrap() - shards.iter().min().unwrap() <= 1,
        "shards {shards:?}"
    );
    for (p, s) in &sm.state.topics.partitions {
        if s.ownership.owner == Some(BrokerId(4)) {
            assert_eq!(s.ownership.epoch.0, before[p].0 + 1);
        }
    }
}

#[test]
fn unreleased_handover_is_forced_after_the_timeout() {
    let mut sm = owned();
    register(&mut sm, 2, 0);
    for c in controller::plan(&sm.state, 100) {
        sm.ok(c);
    }
    let pending = sm
        .state
        .topics
        .partitions
        .values()
        .chain(std::iter::empty())
        .filter(|p| p.ownership.handover.is_some())
        .count()
        + sm.state
            .topics
            .shards
            .values()
            .filter(|o| o.handover.is_some())
            .count();
    assert!(pending > 0);
    // The owner never releases (stuck or partitioned away), but stays alive.
    let later = 100 + controller::HANDOVER_TIMEOUT_MS + 1;
    for b in [1, 2] {
        sm.ok(Command::Heartbeat {
            id: BrokerId(b),
            now_ms: later,
        });
    }
    let plan = controller::plan(&sm.state, later);
    let Some(Command::Reassign { changes }) = plan.first() else {
        panic!("{plan:?}")
    };
    assert_eq!(changes.len(), pending);
    for c in plan {
        sm.ok(c);
    }
    assert!(spread(&sm, 1..=2) <= 1);
}

#[test]
fn release_checks_owner_and_epoch_and_draining_moves_everything() {
    let mut sm = owned();
    register(&mut sm, 2, 0);
    let p0 = pt(tid(1), 0);
    assert!(matches!(
        sm.error(Command::Release {
            broker: BrokerId(2),
            items: vec![(p0, Epoch(1))]
        }),
        MetaError::NotOwner { .. }
    ));
    assert!(matches!(
        sm.error(Command::Release {
            broker: BrokerId(1),
            items: vec![(p0, Epoch(7))]
        }),
        MetaError::StaleEpoch { .. }
    ));
    sm.ok(Command::Drain { id: BrokerId(1) });
    for c in controller::plan(&sm.state, 0) {
        sm.ok(c);
    }
    release_all(&mut sm);
    assert_eq!(count(&sm, 1), 0, "a draining broker ends up owning nothing");
    assert_eq!(count(&sm, 2), 2 + DEFAULT_SHARDS as usize);
}
