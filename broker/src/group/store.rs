//! Classic groups' membership in the metadata service (`Command::StoreGroup`):
//! the coordinator writes a group through [`MetaGroupStore`], fenced by the
//! shard epoch it holds the group's shard at, and a broker taking a shard
//! over reads the shard's groups back with [`load_shard`] before it serves
//! the shard.

use std::sync::Arc;
use std::time::Duration;

use floe_metadata::ErrorKind as MetaKind;
use floe_metadata::api::MetaApi;
use floe_metadata::command::ShardFence;
use floe_metadata::ids::{BrokerId, Epoch, ShardId};

use crate::group::{GroupError, GroupStore};

/// How long reading a shard's groups may take before the take-over is
/// tried again (at the next pass over the shards).
const LOAD_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(crate) struct MetaGroupStore {
    pub meta: Arc<dyn MetaApi>,
    pub broker: u32,
}

#[async_trait::async_trait]
impl GroupStore for MetaGroupStore {
    async fn write(
        &self,
        shard: u32,
        shard_epoch: u64,
        group: &str,
        record: Option<Vec<u8>>,
    ) -> Result<(), GroupError> {
        let forget = record.is_none();
        let store = |record: Option<Vec<u8>>| {
            self.meta.store_group(
                ShardFence {
                    broker: BrokerId(self.broker),
                    shard: ShardId(shard),
                    epoch: Epoch(shard_epoch),
                },
                group,
                record,
            )
        };
        match store(record).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == MetaKind::StaleCoordinator => {
                tracing::info!(group, shard, shard_epoch, error = %e, "group not stored: the shard moved");
                Err(GroupError::NotCoordinator)
            }
            Err(e) if e.kind() == MetaKind::TooLarge && !forget => {
                // Above the metadata's command bound (thousands of members
                // with large subscriptions): the group runs unstored, and
                // an older record must not outlive it.
                tracing::warn!(group, error = %e, "group membership too large to store; a coordinator move makes its members rejoin");
                store(None)
                    .await
                    .map(|_| ())
                    .map_err(|_| GroupError::CoordinatorNotAvailable)
            }
            Err(e) => {
                tracing::warn!(group, error = %e, "storing the group failed");
                Err(GroupError::CoordinatorNotAvailable)
            }
        }
    }
}

/// The stored groups of `shard`, as `(group id, record)`, read
/// linearizably (the previous coordinator's last write is seen).
pub(crate) async fn load_shard(
    meta: &dyn MetaApi,
    shard: u32,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    match tokio::time::timeout(LOAD_TIMEOUT, meta.group_records(shard)).await {
        Ok(Ok(records)) => Ok(records),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer in {LOAD_TIMEOUT:?}")),
    }
}
