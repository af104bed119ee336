//! What the proxy calls on a group's coordinator ([`Coordinator`]): the
//! broker that owns the group's shard, in this process (`Broker`) or in
//! another (the RPC's `RemoteBroker`).

use super::consumer::{ConsumerGroupDescription, ConsumerHeartbeat, ConsumerHeartbeatAnswer};
use super::{
    CommitParams, GroupDescription, GroupError, GroupListing, JoinParams, JoinResult, SyncParams,
    SyncResult,
};

/// The coordinator of a group (the broker that owns the group's shard).
#[async_trait::async_trait]
pub trait Coordinator: Send + Sync + std::fmt::Debug {
    async fn join_group(&self, p: JoinParams) -> JoinResult;

    async fn sync_group(&self, p: SyncParams) -> SyncResult;

    async fn heartbeat(
        &self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), GroupError>;

    /// OffsetCommit: checks the member, then stores the offsets in the
    /// metadata fenced by the group's shard epoch this coordinator holds (a
    /// coordinator whose shard moved gets NOT_COORDINATOR, and can never
    /// move offsets back). One result per offset, in order:
    /// OFFSET_METADATA_TOO_LARGE above `offset.metadata.max.bytes`,
    /// UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist
    /// (neither is stored).
    async fn commit_offsets(
        &self,
        p: CommitParams,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError>;

    async fn leave_group(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError>;

    async fn describe_group(&self, group_id: &str) -> GroupDescription;

    /// DeleteGroups of one group: refused (NON_EMPTY_GROUP) while it has
    /// members; else its membership and committed offsets are deleted,
    /// decided and written by the coordinator under the group's gate and
    /// fenced by its shard epoch.
    async fn delete_group(&self, group_id: &str) -> Result<(), GroupError>;

    /// OffsetDelete: the committed offsets of `partitions` deleted, except
    /// of topics the group's live members subscribe to
    /// (GROUP_SUBSCRIBED_TO_TOPIC per partition); decided and written as
    /// [`Coordinator::delete_group`]. A partition index that does not fit
    /// (a negative one) is `u32::MAX`: it names no partition.
    async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: &[(String, u32)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError>;

    /// The groups of every shard this broker coordinates (ListGroups).
    async fn list_groups(&self, states: &[String]) -> Vec<GroupListing>;

    /// ConsumerGroupHeartbeat (KIP-848).
    async fn consumer_heartbeat(
        &self,
        hb: ConsumerHeartbeat,
    ) -> Result<ConsumerHeartbeatAnswer, GroupError>;

    /// ConsumerGroupDescribe of one group.
    async fn consumer_describe(
        &self,
        group_id: &str,
    ) -> Result<ConsumerGroupDescription, GroupError>;
}
