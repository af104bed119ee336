//! A broker's share groups: its [`ShareService`] (the share-partitions of
//! the partitions it owns, the groups of the coordinator shards it serves)
//! with what the service works over: the partitions, the shard table, the
//! classic and consumer groups (one id namespace with them) and the peers
//! it releases records at. Cheap to clone.

use std::sync::Arc;

use super::ShareService;
use crate::coordinator::ShardTable;
use crate::group::GroupCoordinator;
use crate::partitions::Partitions;
use crate::rpc::Peers;

#[derive(Clone)]
pub struct ShareNode {
    pub(crate) partitions: Partitions,
    pub(crate) shards: Arc<ShardTable>,
    pub(crate) groups: Arc<GroupCoordinator>,
    pub(crate) service: Arc<ShareService>,
    pub(crate) peers: Arc<Peers>,
    /// Groups an admin request holds between its decision and its resets.
    pub(crate) holds: Arc<super::holds::AdminHolds>,
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
            holds: Default::default(),
        }
    }

    /// The share service itself.
    pub fn service(&self) -> &ShareService {
        &self.service
    }

    /// Whether this broker coordinates `group` now.
    pub(crate) fn coordinates(&self, group: &str) -> bool {
        self.shards.serves_id(group, self.shards.shard_count())
    }
}

/// A share-partition's records are read and written at its partition, here.
impl crate::partitions::LocalOwner for ShareNode {
    fn local(&self) -> &Partitions {
        &self.partitions
    }
}
