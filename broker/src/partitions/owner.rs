//! [`PartitionOwner`]: the one narrow interface to a partition's owner,
//! here ([`Partitions`]) or in another process (the RPC's `RemoteBroker`).
//! The proxy and the coordinators (share groups, the dead-letter writer)
//! reach partitions through it and nothing else.

use bytes::Bytes;
use floe_storage::PartitionKey;

use super::{Acks, FetchData, OffsetAnswer, OffsetSpec, Partitions, PendingProduce};
use crate::error::CallError;

/// The broker that owns a partition.
#[async_trait::async_trait]
pub trait PartitionOwner: Send + Sync + std::fmt::Debug {
    /// Sequences a produce (in the order calls are made on one task) and
    /// returns what waits for its acknowledgement. While the owner's
    /// unflushed bytes are over their cap it waits for room, up to
    /// `room_wait` (the request's timeout), then fails with
    /// [`ErrorKind::Backpressure`](crate::ErrorKind::Backpressure).
    async fn append(
        &self,
        key: &PartitionKey,
        records: Bytes,
        acks: Acks,
        room_wait: std::time::Duration,
    ) -> Result<PendingProduce, CallError>;

    /// Whole batches from the one holding `offset`, up to `max_bytes` (at
    /// least one). With `leader_epoch` (the client's current leader epoch),
    /// the owner first checks it against the partition's epoch
    /// ([`ErrorKind::FencedLeaderEpoch`](crate::ErrorKind::FencedLeaderEpoch)
    /// if older, [`ErrorKind::UnknownLeaderEpoch`](crate::ErrorKind::UnknownLeaderEpoch)
    /// if newer).
    async fn fetch(
        &self,
        key: &PartitionKey,
        offset: i64,
        max_bytes: usize,
        leader_epoch: Option<u64>,
    ) -> Result<FetchData, CallError> {
        self.fetch_isolated(key, offset, max_bytes, leader_epoch, false)
            .await
    }

    /// [`PartitionOwner::fetch`] at an isolation level: with
    /// `read_committed`, only below the last stable offset, with the
    /// aborted transactions of that range.
    async fn fetch_isolated(
        &self,
        key: &PartitionKey,
        offset: i64,
        max_bytes: usize,
        leader_epoch: Option<u64>,
        read_committed: bool,
    ) -> Result<FetchData, CallError>;

    /// The producers the owner knows of the partition (DescribeProducers).
    async fn producers(&self, key: &PartitionKey) -> Result<Vec<super::ProducerInfo>, CallError>;

    /// Returns when data past `offset` may be there, or at `until`.
    async fn wait_for_data(&self, key: &PartitionKey, offset: i64, until: tokio::time::Instant);

    /// The answer and the partition's epoch (-1 if unknown); `leader_epoch`
    /// is checked as for [`PartitionOwner::fetch`].
    async fn list_offset(
        &self,
        key: &PartitionKey,
        spec: OffsetSpec,
        leader_epoch: Option<u64>,
    ) -> Result<(OffsetAnswer, i64), CallError>;

    /// Moves the log start to `offset`; returns the new low watermark.
    async fn delete_records(&self, key: &PartitionKey, offset: i64) -> Result<i64, CallError>;
}

/// What holds this process's partition owner ([`Partitions`] itself, the
/// broker, its share groups): each is a [`PartitionOwner`] by the one
/// implementation below, which answers with [`CallError`].
pub trait LocalOwner: Send + Sync + std::fmt::Debug {
    fn local(&self) -> &Partitions;
}

impl LocalOwner for Partitions {
    fn local(&self) -> &Partitions {
        self
    }
}

#[async_trait::async_trait]
impl<T: LocalOwner> PartitionOwner for T {
    async fn append(
        &self,
        key: &PartitionKey,
        records: Bytes,
        acks: Acks,
        room_wait: std::time::Duration,
    ) -> Result<PendingProduce, CallError> {
        Ok(Partitions::append_within(self.local(), key, records, acks, room_wait).await?)
    }

    async fn fetch_isolated(
        &self,
        key: &PartitionKey,
        offset: i64,
        max_bytes: usize,
        leader_epoch: Option<u64>,
        read_committed: bool,
    ) -> Result<FetchData, CallError> {
        Ok(Partitions::fetch_isolated(
            self.local(),
            key,
            offset,
            max_bytes,
            leader_epoch,
            read_committed,
        )
        .await?)
    }

    async fn producers(&self, key: &PartitionKey) -> Result<Vec<super::ProducerInfo>, CallError> {
        Ok(Partitions::producers(self.local(), key)?)
    }

    async fn wait_for_data(&self, key: &PartitionKey, offset: i64, until: tokio::time::Instant) {
        Partitions::wait_for_data(self.local(), key, offset, until).await
    }

    async fn list_offset(
        &self,
        key: &PartitionKey,
        spec: OffsetSpec,
        leader_epoch: Option<u64>,
    ) -> Result<(OffsetAnswer, i64), CallError> {
        Ok(self
            .local()
            .list_offset_and_epoch(key, spec, leader_epoch)
            .await?)
    }

    async fn delete_records(&self, key: &PartitionKey, offset: i64) -> Result<i64, CallError> {
        Ok(Partitions::delete_records(self.local(), key, offset).await?)
    }
}
