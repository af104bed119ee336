//! Who owns each partition and coordinator shard: moves decided by the
//! controller, hand-overs and their releases, and the fence a coordinator's
//! write is checked against. Every move is to the next epoch, so a former
//! owner's late write is refused.

use crate::command::{OwnedItem, OwnershipChange};
use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch, PartitionKey};
use crate::state::nodes::NodesState;

use super::{Handover, Ownership, TopicsState};

/// Whether `o` names `id`: as the owner, or as the target of a hand-over.
fn names(o: &Ownership, id: BrokerId) -> bool {
    o.owner == Some(id) || o.handover.is_some_and(|h| h.to == id)
}

/// What `id` owns goes to `owner` at the next epoch; a hand-over to `id`
/// is called off.
fn move_off(o: &mut Ownership, id: BrokerId, owner: Option<BrokerId>) {
    if o.owner == Some(id) {
        *o = o.moved_to(owner);
    } else if o.handover.is_some_and(|h| h.to == id) {
        o.handover = None;
    }
}

impl TopicsState {
    /// Every partition and shard `id` owns goes to `owner` at the next
    /// epoch; hand-overs to `id` are called off. Only the partitions that
    /// name `id` are written to: a write copies the nodes a snapshot's copy
    /// of the state still shares.
    pub(crate) fn move_everything_of(&mut self, id: BrokerId, owner: Option<BrokerId>) {
        let named: Vec<PartitionKey> = self
            .partitions
            .iter()
            .filter(|(_, p)| names(&p.ownership, id))
            .map(|(k, _)| *k)
            .collect();
        for k in named {
            if let Some(p) = self.partitions.get_mut(&k) {
                move_off(&mut p.ownership, id, owner);
            }
        }
        for o in self.shards.values_mut() {
            move_off(o, id, owner);
        }
    }

    /// The partitions' and coordinator shards' ownerships that name `id`:
    /// as the owner, or as the target of a hand-over. Nothing else in the
    /// model refers to a node (commands carry ids, checked against these;
    /// dynamic broker configs are kept by name, for any id, as Kafka keeps
    /// them), so a dead node none names may be removed.
    pub(crate) fn naming(&self, id: BrokerId) -> impl Iterator<Item = &Ownership> + '_ {
        self.partitions
            .values()
            .map(|p| &p.ownership)
            .chain(self.shards.values())
            .filter(move |o| names(o, id))
    }

    /// Whether any partition or coordinator shard names `id` ([`Self::naming`]).
    pub(crate) fn refers_to(&self, id: BrokerId) -> bool {
        self.naming(id).next().is_some()
    }

    fn slot(&self, item: &OwnedItem) -> Option<&Ownership> {
        match item {
            OwnedItem::Partition(p) => self.partitions.get(p).map(|p| &p.ownership),
            OwnedItem::Shard(s) => self.shards.get(s),
        }
    }

    fn slot_mut(&mut self, item: &OwnedItem) -> Option<&mut Ownership> {
        match item {
            OwnedItem::Partition(p) => self.partitions.get_mut(p).map(|p| &mut p.ownership),
            OwnedItem::Shard(s) => self.shards.get_mut(s),
        }
    }

    /// Checks that every item exists and every new owner is a live broker.
    fn check_changes(
        &self,
        nodes: &NodesState,
        changes: &[OwnershipChange],
    ) -> Result<(), MetaError> {
        for c in changes {
            if self.slot(&c.item).is_none() {
                return Err(match c.item {
                    OwnedItem::Partition(p) => MetaError::UnknownPartition(p),
                    OwnedItem::Shard(s) => MetaError::InvalidRequest(format!("unknown shard {s}")),
                });
            }
            if let Some(o) = c.owner
                && !nodes.is_live_broker(o)
            {
                return Err(MetaError::UnknownBroker(o));
            }
        }
        Ok(())
    }

    /// Moves items at once, each to its new owner (or none) at the next
    /// epoch: all, or none if one is unknown or goes to no live broker.
    pub(crate) fn reassign(
        &mut self,
        nodes: &NodesState,
        changes: &[OwnershipChange],
    ) -> Result<(), MetaError> {
        self.check_changes(nodes, changes)?;
        self.apply_changes(changes);
        Ok(())
    }

    /// Moves each item to its new owner (or none) at the next epoch,
    /// unchecked (the changes come from the model itself).
    pub(crate) fn apply_changes(&mut self, changes: &[OwnershipChange]) {
        for c in changes {
            if let Some(slot) = self.slot_mut(&c.item) {
                *slot = slot.moved_to(c.owner);
            }
        }
    }

    /// Asks the owners to hand items over: an item without an owner moves
    /// at once, an owned one when its owner releases it.
    pub(crate) fn begin_handover(
        &mut self,
        nodes: &NodesState,
        changes: &[OwnershipChange],
        now_ms: u64,
    ) -> Result<(), MetaError> {
        self.check_changes(nodes, changes)?;
        if let Some(c) = changes.iter().find(|c| c.owner.is_none()) {
            return Err(MetaError::InvalidRequest(format!(
                "hand-over of {} to nobody",
                c.item
            )));
        }
        for c in changes {
            if let (Some(slot), Some(to)) = (self.slot_mut(&c.item), c.owner) {
                if slot.owner.is_none() {
                    *slot = slot.moved_to(Some(to));
                } else if slot.owner != Some(to) {
                    slot.handover = Some(Handover {
                        to,
                        since_ms: now_ms,
                    });
                }
            }
        }
        Ok(())
    }

    /// An owner releases items at the epochs it holds them: each goes to
    /// its hand-over's receiver (or nobody) at the next epoch. All or none.
    pub(crate) fn release(
        &mut self,
        broker: BrokerId,
        items: &[(OwnedItem, Epoch)],
    ) -> Result<(), MetaError> {
        for (item, epoch) in items {
            let Some(slot) = self.slot(item) else {
                return Err(MetaError::InvalidRequest(format!("unknown {item}")));
            };
            if slot.owner != Some(broker) {
                return Err(MetaError::NotOwner {
                    what: item.to_string(),
                    broker,
                    owner: slot.owner,
                });
            }
            if slot.epoch != *epoch {
                if let OwnedItem::Partition(partition) = item {
                    return Err(MetaError::StaleEpoch {
                        partition: *partition,
                        current: slot.epoch,
                        given: *epoch,
                    });
                }
                return Err(MetaError::InvalidRequest(format!(
                    "{item}: epoch {epoch} is not current ({})",
                    slot.epoch
                )));
            }
        }
        for (item, _) in items {
            if let Some(slot) = self.slot_mut(item) {
                let next = slot.handover.map(|h| h.to);
                *slot = slot.moved_to(next);
            }
        }
        Ok(())
    }

    /// Refuses a coordinator that does not own its shard at the epoch it gave.
    pub(crate) fn check_fence(&self, f: &crate::command::ShardFence) -> Result<(), MetaError> {
        let current = self.shards.get(&f.shard).copied().unwrap_or_default();
        if current.owner != Some(f.broker) || current.epoch != f.epoch {
            return Err(MetaError::StaleCoordinator {
                shard: f.shard,
                broker: f.broker,
                given: f.epoch,
                owner: current.owner,
                current: current.epoch,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
