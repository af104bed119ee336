//! The controller: runs on the Raft leader, turns lease expiry and load into
//! ownership changes. `plan` is a pure function of the model and the clock,
//! so its decisions are deterministic and testable; the loop that proposes
//! them lives in `node`.

use std::collections::BTreeMap;

use crate::command::{Command, NodeKind, OwnershipChange};
use crate::ids::BrokerId;
use crate::state::{ClusterState, NodeState};

/// Most ownership moves made to even out load in one round, so a new broker
/// takes its share over a few rounds rather than in one burst.
pub const MAX_BALANCE_MOVES_PER_ROUND: usize = 32;

/// What the controller proposes next, given the model at the leader's clock.
pub fn plan(state: &ClusterState, now_ms: u64) -> Vec<Command> {
    let expired = state
        .nodes
        .values()
        .any(|n| n.state != NodeState::Dead && n.lease_until_ms < now_ms);
    if expired {
        return vec![Command::ExpireLeases { now_ms }];
    }
    let changes = assign(state);
    if changes.is_empty() {
        Vec::new()
    } else {
        vec![Command::Reassign { changes }]
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Item {
    Partition(crate::ids::PartitionRef),
    Shard(crate::ids::ShardId),
}

fn change(item: Item, owner: Option<BrokerId>) -> OwnershipChange {
    match item {
        Item::Partition(partition) => OwnershipChange::Partition { partition, owner },
        Item::Shard(shard) => OwnershipChange::Shard { shard, owner },
    }
}

/// Gives every unowned (or draining-owned) partition and shard to the live
/// broker with the fewest, then moves items from the most to the least loaded
/// broker until counts differ by at most one. Ties break by broker id.
pub fn assign(state: &ClusterState) -> Vec<OwnershipChange> {
    let live: Vec<BrokerId> = state
        .nodes
        .values()
        .filter(|n| n.kind == NodeKind::Broker && n.state == NodeState::Live)
        .map(|n| n.id)
        .collect();
    if live.is_empty() {
        return Vec::new();
    }
    let items = state
        .partitions
        .iter()
        .map(|(p, s)| (Item::Partition(*p), s.ownership.owner))
        .chain(state.shards.iter().map(|(s, o)| (Item::Shard(*s), o.owner)));
    let mut load: BTreeMap<BrokerId, Vec<Item>> = live.iter().map(|b| (*b, Vec::new())).collect();
    let mut orphans = Vec::new();
    for (item, owner) in items {
        match owner.and_then(|o| load.get_mut(&o)) {
            Some(v) => v.push(item),
            None => orphans.push(item),
        }
    }
    let least = |load: &BTreeMap<BrokerId, Vec<Item>>| {
        load.iter()
            .min_by_key(|(b, v)| (v.len(), **b))
            .map(|(b, _)| *b)
    };
    let mut changes = Vec::new();
    for item in orphans {
        if let Some(b) = least(&load) {
            load.entry(b).or_default().push(item);
            changes.push(change(item, Some(b)));
        }
    }
    for _ in 0..MAX_BALANCE_MOVES_PER_ROUND {
        let Some((most, most_n)) = load
            .iter()
            .max_by_key(|(b, v)| (v.len(), std::cmp::Reverse(**b)))
            .map(|(b, v)| (*b, v.len()))
        else {
            break;
        };
        let Some(to) = least(&load) else { break };
        if most_n <= load.get(&to).map_or(0, |v| v.len()) + 1 {
            break;
        }
        let Some(item) = load.get_mut(&most).and_then(|v| v.pop()) else {
            break;
        };
        load.entry(to).or_default().push(item);
        changes.push(change(item, Some(to)));
    }
    changes
}
