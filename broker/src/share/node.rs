//! A broker's share groups: its [`ShareService`] (the share-partitions of
//! the partitions it owns, the groups of the coordinator shards it serves)
//! with what the service works over: the partitions, the shard table, the
//! classic and consumer groups (one id namespace with them) and the peers
//! it releases records at. Cheap to clone.

use std::sync::Arc;

use floe_storage::PartitionKey;

use super::ShareService;
use crate::coordinator::{ShardTable, shard_of};
use crate::error::CallError;
use crate::group::GroupCoordinator;
use crate::partitions::{
    Acks, FetchData, OffsetAnswer, OffsetSpec, PartitionOwner, Partitions, PendingProduce,
    ProducerInfo,
};
use crate::rpc::Peers;

#[derive(Clone)]
pub struct ShareNode {
    pub(crate) partitions: Partitions,
    pub(crate) shards: Arc<ShardTable>,
    pub(crate) groups: Arc<GroupCoordinator>,
    pub(crate) service: Arc<ShareService>,
    pub(crate) peers: Arc<Peers>,
}

impl std::fmt::Debug for ShareNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareNode")
            .field("broker", &self.partitions.id())
            .finish_non_exhaustive()
    }
}

impl ShareNode {
    pub fn new(
        partitions: Partitions,
        shards: Arc<ShardTable>,
        groups: Arc<GroupCoordinator>,
        service: ShareService,
        peers: Arc<Peers>,
    ) -> Self {
        Self {
            partitions,
            shards,
            groups,
            service: Arc::new(service),
            peers,
        }
    }

    /// The share service itself.
    pub fn service(&self) -> &ShareService {
        &self.service
    }

    /// Whether this broker coordinates `group` now, its ids spread over
    /// `shards` shards.
    pub(crate) fn coordinator_of(&self, group: &str, shards: u32) -> bool {
        self.shards.serves(shard_of(group, shards))
    }

    /// Whether this broker coordinates `group` now.
    pub(crate) fn coordinates(&self, group: &str) -> bool {
        self.coordinator_of(group, self.shards.shard_count())
    }
}

/// A share-partition's records are read and written at its partition, here.
#[async_trait::async_trait]
impl PartitionOwner for ShareNode {
    async fn append(
        &self,
        key: &PartitionKey,
        records: bytes::Bytes,
        acks: Acks,
        room_wait: std::time::Duration,
    ) -> Result<PendingProduce, CallError> {
        PartitionOwner::append(&self.partitions, key, records, acks, room_wait).await
    }

    async fn fetch_isolated(
        &self,
        key: &PartitionKey,
        offset: i64,
        max_bytes: usize,
        leader_epoch: Option<u64>,
        read_committed: bool,
    ) -> Result<FetchData, CallError> {
        PartitionOwner::fetch_isolated(
            &self.partitions,
            key,
            offset,
            max_bytes,
            leader_epoch,
            read_committed,
        )
        .await
    }

    async fn producers(&self, key: &PartitionKey) -> Result<Vec<ProducerInfo>, CallError> {
        PartitionOwner::producers(&self.partitions, key).await
    }

    async fn wait_for_data(&self, key: &PartitionKey, offset: i64, until: tokio::time::Instant) {
        PartitionOwner::wait_for_data(&self.partitions, key, offset, until).await
    }

    async fn list_offset(
        &self,
        key: &PartitionKey,
        spec: OffsetSpec,
        leader_epoch: Option<u64>,
    ) -> Result<(OffsetAnswer, i64), CallError> {
        PartitionOwner::list_offset(&self.partitions, key, spec, leader_epoch).await
    }

    async fn delete_records(&self, key: &PartitionKey, offset: i64) -> Result<i64, CallError> {
        PartitionOwner::delete_records(&self.partitions, key, offset).await
    }
}
