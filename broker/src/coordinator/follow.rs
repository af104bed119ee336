//! Following the cluster view's coordinator shards: a shard given to this
//! broker is loaded by every coordinator, then served; one handed over is
//! released; one handed over or lost is dropped by every coordinator (its
//! state lives on in the metadata, where the next owner reads it).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use floe_metadata::command::ShardFence;
use floe_metadata::ids::{Epoch, ShardId};
use floe_metadata::model::ShardInfo;

use super::{ShardCoordinator, ShardTable};
use crate::partitions::Partitions;

/// The coordinators of a broker and the shards they serve.
pub struct Runtime {
    partitions: Partitions,
    shards: Arc<ShardTable>,
    coordinators: Vec<Arc<dyn ShardCoordinator>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.coordinators.iter().map(|c| c.name()).collect();
        f.debug_struct("Runtime")
            .field("coordinators", &names)
            .field("shards", &self.shards.owned())
            .finish()
    }
}

impl Runtime {
    pub fn new(
        partitions: Partitions,
        shards: Arc<ShardTable>,
        coordinators: Vec<Arc<dyn ShardCoordinator>>,
    ) -> Self {
        Self {
            partitions,
            shards,
            coordinators,
        }
    }

    /// Follows the view until the broker stops: at each change, and every
    /// second (a failed load is tried again).
    pub async fn run(self: Arc<Self>) {
        let mut rx = self.partitions.view().subscribe();
        loop {
            if self.partitions.is_stopping() {
                return;
            }
            let snap = rx.borrow_and_update().clone();
            self.follow(&snap.shards).await;
            tokio::select! {
                r = rx.changed() => if r.is_err() { return },
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = self.partitions.stopped() => return,
            }
        }
    }

    fn drop_shard(&self, shard: u32, why: &'static str) {
        let held: Vec<(&'static str, usize)> = self
            .coordinators
            .iter()
            .map(|c| (c.name(), c.dropped(shard)))
            .collect();
        tracing::info!(shard, ?held, "{why}");
        crate::metrics::owned_shard(shard, false);
    }

    /// The shards `shards` gives this broker to serve (not being handed
    /// over), by number, with their epochs.
    fn served_in(&self, shards: &[ShardInfo]) -> HashMap<u32, u64> {
        let me = Some(self.partitions.broker_id());
        shards
            .iter()
            .filter(|s| s.owner == me && s.handover_to.is_none())
            .map(|s| (s.shard.0, s.epoch.0))
            .collect()
    }

    /// Drops every owned shard `wanted` does not give at the same epoch;
    /// returns (kept, dropped). The table is written only when one goes
    /// (most passes change nothing, and every coordinator call reads it).
    fn keep_only(&self, wanted: &HashMap<u32, u64>, why: &'static str) -> (usize, usize) {
        let stale = |shard: &u32, epoch: &u64| wanted.get(shard) != Some(epoch);
        {
            let owned = self.shards.read();
            if !owned.iter().any(|(s, e)| stale(s, e)) {
                return (owned.len(), 0);
            }
        }
        let mut owned = self.shards.write();
        let before = owned.len();
        owned.retain(|shard, epoch| {
            if stale(shard, epoch) {
                self.drop_shard(*shard, why);
                false
            } else {
                true
            }
        });
        (owned.len(), before - owned.len())
    }

    /// One pass over the view's shards: owned ones are served; one handed
    /// over or lost is dropped; one taken over is served once every
    /// coordinator has loaded it (until then its calls get
    /// NOT_COORDINATOR).
    async fn follow(&self, shards: &[ShardInfo]) {
        let me = Some(self.partitions.broker_id());
        let wanted = self.served_in(shards);
        self.keep_only(&wanted, "coordinator shard no longer served");
        let release: Vec<_> = shards
            .iter()
            .filter(|s| s.owner == me && s.handover_to.is_some())
            .map(|s| (s.shard, s.epoch))
            .collect();
        let new: Vec<_> = {
            let owned = self.shards.read();
            wanted
                .iter()
                .filter(|(shard, _)| !owned.contains_key(shard))
                .map(|(shard, epoch)| (ShardId(*shard), Epoch(*epoch)))
                .collect()
        };
        for (shard, epoch) in new {
            let fence = ShardFence {
                broker: self.partitions.broker_id(),
                shard,
                epoch,
            };
            if let Some(held) = self.load(&fence).await {
                tracing::info!(
                    shard = shard.0,
                    epoch = epoch.0,
                    ?held,
                    "coordinator shard taken over"
                );
                self.shards.write().insert(shard.0, epoch.0);
                crate::metrics::owned_shard(shard.0, true);
                for c in &self.coordinators {
                    c.served(&fence);
                }
            }
        }
        crate::metrics::owned_shards(self.shards.len());
        if !release.is_empty()
            && let Err(e) = self
                .partitions
                .meta()
                .release(self.partitions.broker_id(), &[], &release)
                .await
        {
            tracing::warn!(error = %e, "releasing coordinator shards failed");
        }
    }

    /// Every coordinator's load of `fence`'s shard; `None` (and nothing
    /// kept) if one fails.
    async fn load(&self, fence: &ShardFence) -> Option<Vec<(&'static str, usize)>> {
        let mut held = Vec::with_capacity(self.coordinators.len());
        for c in &self.coordinators {
            c.taking(fence);
        }
        for c in &self.coordinators {
            match c.load(fence).await {
                Ok(n) => held.push((c.name(), n)),
                Err(error) => {
                    tracing::warn!(shard = fence.shard.0, coordinator = c.name(), %error, "loading the shard failed; tried again at the next pass");
                    for c in &self.coordinators {
                        c.dropped(fence.shard.0);
                    }
                    return None;
                }
            }
        }
        Some(held)
    }

    /// After a lapsed lease: keeps only the shards `view` (read from the
    /// metadata service itself) still gives this broker at the same epoch.
    /// Returns (kept, dropped).
    pub fn revalidate(&self, view: &floe_metadata::model::ClusterView) -> (usize, usize) {
        let kept_dropped = self.keep_only(
            &self.served_in(&view.shards),
            "coordinator shard dropped after the lease ran out",
        );
        crate::metrics::owned_shards(self.shards.len());
        kept_dropped
    }
}
