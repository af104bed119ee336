//! The coordinator shards a broker owns, each at the epoch the metadata
//! gave it: a coordinator serves an id only while its shard is here and
//! the broker's lease holds, and fences what it writes with the shard's
//! [`ShardFence`].

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

use floe_metadata::command::ShardFence;
use floe_metadata::ids::{BrokerId, Epoch, ShardId};

use crate::partitions::Partitions;

/// The shard of a group or transactional id: 32-bit FNV-1a of the id's
/// UTF-8 bytes, modulo `shards` (0 when `shards` is 0).
pub fn shard_of(id: &str, shards: u32) -> u32 {
    floe_metadata::txn::shard_of(id, shards)
}

/// The shards owned here, by number, with their epochs.
#[derive(Debug)]
pub struct ShardTable {
    partitions: Partitions,
    owned: RwLock<HashMap<u32, u64>>,
}

impl ShardTable {
    pub fn new(partitions: Partitions) -> Self {
        Self {
            partitions,
            owned: RwLock::new(HashMap::new()),
        }
    }

    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<u32, u64>> {
        self.owned.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<u32, u64>> {
        self.owned.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The shards served now, in order.
    pub fn owned(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.read().keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// How many shards are served now.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// The number of shards ids fall in, as the cluster view has it.
    pub fn shard_count(&self) -> u32 {
        self.partitions.view().current().shard_count()
    }

    /// The shard `id` falls in.
    pub fn shard_of(&self, id: &str) -> u32 {
        shard_of(id, self.shard_count())
    }

    /// Whether this broker serves `shard` now: it owns it and its lease
    /// surely holds.
    pub fn serves(&self, shard: u32) -> bool {
        self.partitions.check_lease().is_ok() && self.read().contains_key(&shard)
    }

    /// Whether this broker serves the shard `id` falls in, its ids spread
    /// over `shard_count` shards.
    pub fn serves_id(&self, id: &str, shard_count: u32) -> bool {
        self.serves(shard_of(id, shard_count))
    }

    /// The fence of `shard` if this broker owns it (the lease unchecked).
    pub fn fence(&self, shard: u32) -> Option<ShardFence> {
        let epoch = *self.read().get(&shard)?;
        Some(ShardFence {
            broker: self.partitions.broker_id(),
            shard: ShardId(shard),
            epoch: Epoch(epoch),
        })
    }

    /// The fence of `shard` if this broker serves it now (see
    /// [`ShardTable::serves`]).
    pub fn serving_fence(&self, shard: u32) -> Option<ShardFence> {
        if self.partitions.check_lease().is_err() {
            return None;
        }
        self.fence(shard)
    }

    /// Whether this broker still holds `f`'s shard at `f`'s epoch, its
    /// lease holding.
    pub fn holds(&self, f: &ShardFence) -> bool {
        f.broker == BrokerId(self.partitions.id())
            && self.partitions.check_lease().is_ok()
            && self.read().get(&f.shard.0) == Some(&f.epoch.0)
    }
}
