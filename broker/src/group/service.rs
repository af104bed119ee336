//! A broker's consumer groups (classic and KIP-848) on the coordinator
//! runtime: the [`GroupCoordinator`] of the shards it serves, loaded from
//! the metadata when a shard is taken over and dropped when it is handed
//! over, its offsets committed under the shard's fence, and its idle groups
//! forgotten.

use std::sync::Arc;
use std::time::Duration;

use floe_metadata::command::ShardFence;

use super::{GroupCoordinator, GroupError};
use crate::coordinator::{ShardCoordinator, ShardTable};
use crate::partitions::Partitions;

/// How long a join waits for the group's configs before it goes on with
/// the session timeout the member asked for.
const GROUP_CONFIGS_WAIT: Duration = Duration::from_secs(2);

pub struct GroupService {
    pub(crate) partitions: Partitions,
    pub(crate) shards: Arc<ShardTable>,
    coordinator: Arc<GroupCoordinator>,
    /// Held across a decision about a group's stored state and its write.
    pub(crate) gates: super::delete::Gates,
}

impl std::fmt::Debug for GroupService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupService")
            .field("broker", &self.partitions.id())
            .finish_non_exhaustive()
    }
}

impl GroupService {
    pub fn new(
        partitions: Partitions,
        shards: Arc<ShardTable>,
        coordinator: Arc<GroupCoordinator>,
    ) -> Arc<Self> {
        Arc::new(Self {
            partitions,
            shards,
            coordinator,
            gates: Default::default(),
        })
    }

    /// The groups of every shard this broker serves.
    pub fn coordinator(&self) -> &Arc<GroupCoordinator> {
        &self.coordinator
    }

    /// The group coordinator if this broker serves `group_id`'s shard now
    /// (its ids spread over `shard_count` shards), else NOT_COORDINATOR.
    pub fn coordinator_at(
        &self,
        group_id: &str,
        shard_count: u32,
    ) -> Result<&GroupCoordinator, GroupError> {
        if self.shards.serves_id(group_id, shard_count) {
            Ok(&self.coordinator)
        } else {
            Err(GroupError::NotCoordinator)
        }
    }

    /// [`GroupService::coordinator_at`] with the shard count of the view.
    pub fn coordinator_of(&self, group_id: &str) -> Result<&GroupCoordinator, GroupError> {
        self.coordinator_at(group_id, self.shards.shard_count())
    }

    /// The group's `consumer.session.timeout.ms` if set on it (a group
    /// config, `floe_metadata::group_config`): it then replaces the session
    /// timeout members join with. `None` when it is not set, or when the
    /// metadata service does not answer within [`GROUP_CONFIGS_WAIT`].
    pub(crate) async fn session_timeout_ms(&self, group_id: &str) -> Option<i32> {
        let asked = self.partitions.meta().group_configs(group_id);
        match tokio::time::timeout(GROUP_CONFIGS_WAIT, asked).await {
            Ok(Ok(configs)) => configs
                .consumer_session_timeout_ms()
                .and_then(|ms| i32::try_from(ms).ok()),
            Ok(Err(e)) => {
                tracing::debug!(group = %group_id, error = %e, "group configs not read");
                None
            }
            Err(_) => {
                tracing::debug!(group = %group_id, "group configs not read in time");
                None
            }
        }
    }

    /// Every `retention_check_interval` until the broker stops: groups with
    /// nothing left (Empty, no offsets; consumer groups without members)
    /// are forgotten, as Kafka's offset expiry does.
    pub(crate) async fn forget_idle_groups(self: Arc<Self>) {
        let every = self.partitions.config().retention_check_interval;
        let partitions = self.partitions.clone();
        crate::coordinator::timers::every(partitions, every, || {
            let idle = self.coordinator.remove_idle_groups();
            if idle > 0 {
                tracing::debug!(groups = idle, "idle groups forgotten");
            }
            std::future::ready(())
        })
        .await
    }
}

#[async_trait::async_trait]
impl ShardCoordinator for GroupService {
    fn name(&self) -> &'static str {
        "groups"
    }

    fn taking(&self, fence: &ShardFence) {
        self.coordinator.shard_taken(fence.shard.0, fence.epoch.0);
    }

    async fn load(&self, fence: &ShardFence) -> Result<usize, String> {
        let records =
            super::store::load_shard(self.partitions.meta().as_ref(), fence.shard.0).await?;
        Ok(self.coordinator.load_shard(fence.shard.0, records))
    }

    fn dropped(&self, shard: u32) -> usize {
        self.coordinator.drop_shard(shard)
    }
}
