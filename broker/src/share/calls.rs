//! How a proxy reaches share groups: [`ShareOwner`] (the share-partitions
//! of a partition, at the partition's owner) and [`ShareCoordinator`] (a
//! share group's membership, at its coordinator shard's owner), each
//! implemented by the [`ShareNode`](super::ShareNode) of this process and
//! by `RemoteBroker` over the internal RPC (`super::rpc`), as
//! [`PartitionOwner`] and the group `Coordinator` are.

use floe_storage::PartitionKey;

use super::group::{Heartbeat, HeartbeatAnswer, ShareGroupDescription, ShareGroupError};
use super::partition::{AckBatch, MemberId, ShareError};
use super::service::{ShareFetched, ShareSettings};
use crate::error::CallError;
use crate::partitions::PartitionOwner;

/// One share group's member on one partition, with the group's settings.
#[derive(Debug, Clone)]
pub struct ShareCall {
    pub group: String,
    pub key: PartitionKey,
    pub member: MemberId,
    pub settings: ShareSettings,
}

/// The owner of a partition, for its share-partitions.
#[async_trait::async_trait]
pub trait ShareOwner: PartitionOwner {
    /// Acquires records for the member (see [`super::ShareService::fetch`]).
    async fn share_fetch(
        &self,
        call: &ShareCall,
        max_records: u32,
        max_bytes: usize,
    ) -> Result<ShareFetched, CallError>;

    /// Applies acknowledgements, answered once written (see
    /// [`super::ShareService::acknowledge`]).
    async fn share_acknowledge(
        &self,
        call: &ShareCall,
        batches: &[AckBatch],
    ) -> Result<Result<(), ShareError>, CallError>;

    /// Releases every record the member holds in the group on this broker.
    async fn share_release(&self, group: &str, member: &MemberId) -> Result<(), CallError>;
}

/// The coordinator of a share group (the owner of its shard).
#[async_trait::async_trait]
pub trait ShareCoordinator: Send + Sync + std::fmt::Debug {
    /// One heartbeat; `settings` carries the group's timings (its
    /// `share.heartbeat.interval.ms` and `share.session.timeout.ms`).
    async fn share_heartbeat(
        &self,
        group: &str,
        hb: &Heartbeat,
        settings: &ShareSettings,
    ) -> Result<HeartbeatAnswer, ShareGroupError>;

    /// `Ok(None)`: no such group.
    async fn share_describe(
        &self,
        group: &str,
    ) -> Result<Option<ShareGroupDescription>, ShareGroupError>;
}
