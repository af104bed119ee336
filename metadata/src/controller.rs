//! The controller: runs on the Raft leader, turns lease expiry and load into
//! ownership changes. [`plan`] is a pure function of the model and the clock,
//! so its decisions are deterministic and testable; the loop that proposes
//! them lives in `node`.
//!
//! Rules, in order:
//! 1. A node whose lease ended is marked dead; what it owned is taken away
//!    at the next epoch (which fences it).
//! 2. Items with no owner go at once to the live broker with the fewest of
//!    their kind (partitions, coordinator shards). A new topic's partitions
//!    are placed the same way by the command that creates them ([`place`]).
//! 3. A hand-over that the owner did not complete within
//!    [`HANDOVER_TIMEOUT_MS`] is forced: the target owns it at the next epoch.
//! 4. Items of a draining broker, and items that even out the load (until
//!    counts differ by at most one), are handed over: the owner is asked to
//!    finish and release, and the target takes them at the next epoch.
//!    Partitions and coordinator shards are evened out each on its own, so
//!    that a new broker takes its share of the partitions (the produce and
//!    fetch load), not only of the shards.
//!
//! Ties break by broker id, then by item order.
//!
//! Apart from these rules, a node dead for longer than the retention
//! (`--dead-node-retention-ms`) that no item names any more is removed
//! ([`sweep_dead_nodes`]).
//!
//! Leases are measured on the leader's lease clock (`now_ms` travels in the
//! commands): its wall clock as first read, advanced by its monotonic clock,
//! so that no step of the wall clock expires a lease early
//! ([`crate::clock::lease_now_ms`]). A new leader first renews every live
//! node's lease on its own clock ([`renew_all`]): no node could renew while
//! there was no leader, and expiring them all would move every partition
//! after each election. A node that is really gone loses its items one
//! lease later.

use std::collections::BTreeMap;

use crate::command::{Command, NodeKind, OwnedItem, OwnershipChange};
use crate::ids::BrokerId;
use crate::state::{ClusterState, NodeState, Ownership};

/// Most hand-overs started in one round, so a new broker takes its share
/// over a few rounds rather than in one burst.
pub const MAX_HANDOVERS_PER_ROUND: usize = 32;
/// How long an owner has to release an item it is asked to hand over.
pub const HANDOVER_TIMEOUT_MS: u64 = 10_000;

/// What a new leader proposes before anything else: a renewal of every
/// node's lease that is not dead, at `now_ms` (no node could renew while
/// there was no leader).
pub fn renew_all(state: &ClusterState, now_ms: u64) -> Vec<Command> {
    state
        .nodes
        .by_id
        .values()
        .filter(|n| n.state != NodeState::Dead)
        .map(|n| Command::Heartbeat { id: n.id, now_ms })
        .collect()
}

/// Owners for `new` items (a topic's new partitions), each to the live
/// broker with the fewest items owned or about to be received (ties by
/// id), as rule 2 places orphans. The create command applies it itself, so
/// that a new topic's partitions are owned the moment it exists instead of
/// at the controller's next round. Empty when no broker is live (the
/// controller places them once one is).
pub fn place(state: &ClusterState, new: &[OwnedItem]) -> Vec<OwnershipChange> {
    let mut load = placement_load(state);
    place_by_load(&mut load, new)
}

/// The partitions each live broker owns or is about to receive (the
/// target of a hand-over counts, not its owner): what [`place`] places by.
/// A scan of every partition; [`crate::state::ClusterState`] keeps it from
/// one topic creation to the next (`PlacementLoad`), since a burst of
/// 10,000 creations over 100,000 partitions spent most of every metadata
/// node's time here.
pub fn placement_load(state: &ClusterState) -> BTreeMap<BrokerId, usize> {
    let mut load: BTreeMap<BrokerId, usize> =
        live_brokers(state).into_iter().map(|b| (b, 0)).collect();
    if load.is_empty() {
        return load;
    }
    // Partitions only: shards are evened out on their own (rule 4).
    for (_, o) in items(state).filter(|(i, _)| matches!(i, OwnedItem::Partition(_))) {
        let to = o.handover.map(|h| h.to).or(o.owner);
        if let Some(n) = to.and_then(|b| load.get_mut(&b)) {
            *n += 1;
        }
    }
    load
}

/// [`place`] on a given `load`, which it counts the placed items into.
pub fn place_by_load(
    load: &mut BTreeMap<BrokerId, usize>,
    new: &[OwnedItem],
) -> Vec<OwnershipChange> {
    let mut out = Vec::with_capacity(new.len());
    for item in new {
        let Some((&b, n)) = load.iter_mut().min_by_key(|(b, n)| (**n, **b)) else {
            break;
        };
        *n += 1;
        out.push(OwnershipChange {
            item: *item,
            owner: Some(b),
        });
    }
    out
}

/// What the controller proposes next, given the model at the leader's clock.
pub fn plan(state: &ClusterState, now_ms: u64) -> Vec<Command> {
    let expired = state
        .nodes
        .by_id
        .values()
        .any(|n| n.state != NodeState::Dead && n.lease_until_ms < now_ms);
    if expired {
        return vec![Command::ExpireLeases { now_ms }];
    }
    let Decisions { direct, handovers } = decide(state, now_ms);
    let mut out = Vec::new();
    if !direct.is_empty() {
        out.push(Command::Reassign { changes: direct });
    }
    if !handovers.is_empty() {
        out.push(Command::BeginHandover {
            changes: handovers,
            now_ms,
        });
    }
    out
}

/// Whether some partition or shard has no owner while a broker could take
/// it (the controller then plans again at once instead of next round).
pub fn has_orphans(state: &ClusterState) -> bool {
    !live_brokers(state).is_empty() && items(state).any(|(_, o)| o.owner.is_none())
}

/// The controller's decisions of one round.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decisions {
    /// Moves at once (the owner is gone, or did not release in time).
    pub direct: Vec<OwnershipChange>,
    /// Hand-overs to start.
    pub handovers: Vec<OwnershipChange>,
}

/// The brokers that may receive items.
fn live_brokers(state: &ClusterState) -> Vec<BrokerId> {
    state
        .nodes
        .by_id
        .values()
        .filter(|n| n.kind == NodeKind::Broker && n.state == NodeState::Live)
        .map(|n| n.id)
        .collect()
}

fn items(state: &ClusterState) -> impl Iterator<Item = (OwnedItem, &Ownership)> {
    state
        .topics
        .partitions
        .iter()
        .map(|(p, s)| (OwnedItem::Partition(*p), &s.ownership))
        .chain(
            state
                .topics
                .shards
                .iter()
                .map(|(s, o)| (OwnedItem::Shard(*s), o)),
        )
}

pub fn decide(state: &ClusterState, now_ms: u64) -> Decisions {
    let live = live_brokers(state);
    let mut d = Decisions::default();
    if live.is_empty() {
        return d;
    }
    let draining = |b: &BrokerId| {
        state
            .nodes
            .by_id
            .get(b)
            .is_some_and(|n| n.state == NodeState::Draining)
    };
    // Load counts what each live broker owns or is about to receive.
    let mut load: BTreeMap<BrokerId, Vec<OwnedItem>> =
        live.iter().map(|b| (*b, Vec::new())).collect();
    let mut orphans = Vec::new();
    let mut from_draining = Vec::new();
    for (item, o) in items(state) {
        if let Some(h) = o.handover {
            if now_ms.saturating_sub(h.since_ms) > HANDOVER_TIMEOUT_MS && load.contains_key(&h.to) {
                d.direct.push(OwnershipChange {
                    item,
                    owner: Some(h.to),
                });
            }
            if let Some(v) = load.get_mut(&h.to) {
                v.push(item);
                continue;
            }
        }
        match o.owner {
            Some(b) if load.contains_key(&b) => load.entry(b).or_default().push(item),
            Some(b) if draining(&b) => from_draining.push(item),
            _ => orphans.push(item),
        }
    }
    // The broker with the fewest items of `item`'s kind (ties: fewest in
    // all, then lowest id).
    let least = |load: &BTreeMap<BrokerId, Vec<OwnedItem>>, item: &OwnedItem| {
        load.iter()
            .min_by_key(|(b, v)| (count(v, kind(item)), v.len(), **b))
            .map(|(b, _)| *b)
    };
    // Orphans move at once; a draining broker's items are handed over.
    for (items, out) in [(orphans, &mut d.direct), (from_draining, &mut d.handovers)] {
        for item in items {
            if let Some(b) = least(&load, &item) {
                load.entry(b).or_default().push(item);
                out.push(OwnershipChange {
                    item,
                    owner: Some(b),
                });
            }
        }
    }
    // Items already moving, or assigned this round, are not moved again.
    let assigned: std::collections::BTreeSet<OwnedItem> = d.direct.iter().map(|c| c.item).collect();
    let moving = |state: &ClusterState, item: &OwnedItem| {
        assigned.contains(item)
            || match item {
                OwnedItem::Partition(p) => state
                    .topics
                    .partitions
                    .get(p)
                    .is_some_and(|s| s.ownership.handover.is_some()),
                OwnedItem::Shard(s) => state
                    .topics
                    .shards
                    .get(s)
                    .is_some_and(|o| o.handover.is_some()),
            }
    };
    // Each kind evened out on its own, partitions first.
    for k in [Kind::Partition, Kind::Shard] {
        while d.handovers.len() < MAX_HANDOVERS_PER_ROUND {
            let Some((most, most_n)) = load
                .iter()
                .map(|(b, v)| (*b, count(v, k)))
                .max_by_key(|(b, n)| (*n, std::cmp::Reverse(*b)))
            else {
                break;
            };
            let Some((to, to_n)) = load
                .iter()
                .map(|(b, v)| (*b, count(v, k), v.len()))
                .min_by_key(|(b, n, all)| (*n, *all, *b))
                .map(|(b, n, _)| (b, n))
            else {
                break;
            };
            if most_n <= to_n + 1 {
                break;
            }
            let candidates = load.get(&most).cloned().unwrap_or_default();
            let Some(pos) = candidates
                .iter()
                .rposition(|i| kind(i) == k && !moving(state, i))
            else {
                break;
            };
            let item = candidates[pos];
            if let Some(v) = load.get_mut(&most) {
                v.remove(pos);
            }
            load.entry(to).or_default().push(item);
            d.handovers.push(OwnershipChange {
                item,
                owner: Some(to),
            });
        }
    }
    d
}

/// The two kinds of items, balanced each on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Partition,
    Shard,
}

fn kind(item: &OwnedItem) -> Kind {
    match item {
        OwnedItem::Partition(_) => Kind::Partition,
        OwnedItem::Shard(_) => Kind::Shard,
    }
}

fn count(items: &[OwnedItem], k: Kind) -> usize {
    items.iter().filter(|i| kind(i) == k).count()
}

/// The sweep of the dead nodes at `now_ms`, if it would change anything:
/// a dead node has no death time yet, or one has been dead for longer than
/// `retention_ms` (`None`: dead nodes are kept) and no partition or shard
/// names it (proposed by the leader's controller loop).
pub fn sweep_dead_nodes(
    s: &ClusterState,
    now_ms: u64,
    retention_ms: Option<u64>,
) -> Option<Command> {
    s.nodes
        .sweep_due(now_ms, retention_ms, |id| s.topics.refers_to(id))
        .then_some(Command::SweepDeadNodes {
            now_ms,
            retention_ms,
        })
}

/// The command that forgets producers idle for longer than `expiration_ms`,
/// if there are any (proposed by the leader's controller loop).
pub fn expire_producers(s: &ClusterState, now_ms: u64, expiration_ms: u64) -> Option<Command> {
    s.topics
        .producers_to_expire(now_ms, expiration_ms)
        .then_some(Command::ExpireProducers {
            now_ms,
            expiration_ms,
        })
}

/// The command that forgets transactional ids idle for longer than
/// `expiration_ms`, if there are any (proposed by the leader's controller loop).
pub fn expire_transactional_ids(
    s: &ClusterState,
    now_ms: u64,
    expiration_ms: u64,
) -> Option<Command> {
    s.producers
        .txn
        .ids_to_expire(now_ms, expiration_ms)
        .then_some(Command::ExpireTransactionalIds {
            now_ms,
            expiration_ms,
        })
}
