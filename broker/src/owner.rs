//! Who answers a partition's or a group's requests, as the proxy sees it:
//! [`PartitionOwner`] (the broker that owns a partition),
//! [`Coordinator`] (the broker that coordinates a group) and
//! [`TxnCoordination`] (the one that coordinates a transactional id). Each is
//! implemented by the [`Broker`] of this process and by
//! [`RemoteBroker`](crate::rpc::RemoteBroker), the client of a broker in
//! another; the proxy holds `Arc<dyn …>` and does not know which.
//!
//! A partition call that does not reach its owner fails with a
//! [`RoutingError`](crate::error::RoutingError) inside [`CallError`](crate::error::CallError); the
//! proxy maps it to a Kafka code. Group calls answer with Kafka's group
//! errors (`GroupError`), a coordinator that cannot be reached being
//! NOT_COORDINATOR.

use floe_metadata::ids::TransactionalId;
use floe_metadata::txn::{TxnMeta, TxnOp, TxnReply};

use crate::broker::Broker;
pub use crate::group::Coordinator;
use crate::group::consumer::{
    ConsumerGroupDescription, ConsumerHeartbeat, ConsumerHeartbeatAnswer, TopicMeta,
};
use crate::group::{
    CommitParams, GroupDescription, GroupError, GroupListing, GroupState, JoinParams, JoinResult,
    SyncParams, SyncResult,
};
pub use crate::partitions::PartitionOwner;
use crate::txn::CoordError;
pub use crate::txn::TxnCoordination;

#[async_trait::async_trait]
impl TxnCoordination for Broker {
    async fn txn_step(&self, id: &TransactionalId, op: TxnOp) -> Result<TxnReply, CoordError> {
        self.node.txn.txn_step(id, op).await
    }

    async fn describe_txn(&self, id: &TransactionalId) -> Result<Option<TxnMeta>, CoordError> {
        self.node.txn.describe_txn(id).await
    }

    async fn list_txns(&self) -> Result<Vec<(TransactionalId, TxnMeta)>, CoordError> {
        self.node.txn.list_txns().await
    }
}

/// The local coordinator answers only for the shards this broker owns now
/// (NOT_COORDINATOR otherwise), as it does over the RPC.
#[async_trait::async_trait]
impl Coordinator for Broker {
    async fn join_group(&self, mut p: JoinParams) -> JoinResult {
        match self.node.groups.coordinator_of(&p.group_id) {
            Ok(c) => {
                // One id namespace: a share group's id is refused.
                let kind = self.share().kind_or_live(&p.group_id).await;
                if let Some(e) = crate::share::namespace::refusal_of_share(kind, true) {
                    return JoinResult::failed(p.member_id, e);
                }
                if let Some(ms) = self.node.groups.session_timeout_ms(&p.group_id).await {
                    p.session_timeout_ms = ms;
                }
                // Not between a delete's decision and its write.
                self.node.groups.pass_gate(&p.group_id).await;
                c.join_group(p).await
            }
            Err(e) => JoinResult::failed(p.member_id, e),
        }
    }

    async fn sync_group(&self, p: SyncParams) -> SyncResult {
        match self.node.groups.coordinator_of(&p.group_id) {
            Ok(c) => c.sync_group(p).await,
            Err(e) => SyncResult::failed(e),
        }
    }

    async fn heartbeat(
        &self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        self.node.groups.coordinator_of(group_id)?.heartbeat(
            group_id,
            generation_id,
            member_id,
            group_instance_id,
        )
    }

    async fn commit_offsets(
        &self,
        p: CommitParams,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let groups = self.node.groups.coordinator_of(&p.group_id)?;
        // One id namespace: a share group's stored offsets are its share
        // state, never a commit (Kafka answers GROUP_ID_NOT_FOUND). A
        // member's commit is of a classic or consumer group (their joins
        // refuse share groups); an admin's (no generation) is checked
        // against what is stored too.
        let kind = if p.generation_id < 0 {
            self.share().kind_or_live(&p.group_id).await
        } else {
            self.share().live_kind(&p.group_id)
        };
        if kind == Some(crate::share::GroupKind::Share) {
            return Err(GroupError::GroupIdNotFound);
        }
        self.node.groups.commit_offsets(groups, p).await
    }

    async fn leave_group(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        self.node
            .groups
            .coordinator_of(group_id)?
            .leave_group(group_id, members)
    }

    async fn describe_group(&self, group_id: &str) -> GroupDescription {
        match self.node.groups.coordinator_of(group_id) {
            Ok(c) => c.describe_group(group_id),
            Err(e) => GroupDescription::failed(e, group_id),
        }
    }

    async fn delete_group(&self, group_id: &str) -> Result<(), GroupError> {
        let groups = &self.node.groups;
        groups
            .delete_group(groups.coordinator_of(group_id)?, group_id)
            .await
    }

    async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: &[(String, u32)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let groups = &self.node.groups;
        groups
            .delete_offsets(groups.coordinator_of(group_id)?, group_id, partitions)
            .await
    }

    async fn list_groups(&self, states: &[String]) -> Vec<GroupListing> {
        self.groups().list_groups(states)
    }

    async fn consumer_heartbeat(
        &self,
        hb: ConsumerHeartbeat,
    ) -> Result<ConsumerHeartbeatAnswer, GroupError> {
        let c = self.node.groups.coordinator_of(&hb.group_id)?;
        // One id namespace: a share group's id is refused (its stored
        // state is read only for a join of a group not in memory).
        let kind = if hb.member_epoch == 0 {
            self.share().kind_or_live(&hb.group_id).await
        } else {
            self.share().live_kind(&hb.group_id)
        };
        if let Some(e) = crate::share::namespace::refusal_of_share(kind, false) {
            return Err(e);
        }
        if hb.member_epoch == 0 {
            // A join: not between a delete's decision and its write.
            self.node.groups.pass_gate(&hb.group_id).await;
        }
        let snap = self.view().current();
        let topics = |name: &str| {
            snap.topics.get(name).map(|t| TopicMeta {
                id: t.id,
                partitions: t.partition_count,
            })
        };
        c.consumer_heartbeat(hb, &topics).await
    }

    async fn consumer_describe(
        &self,
        group_id: &str,
    ) -> Result<ConsumerGroupDescription, GroupError> {
        self.node
            .groups
            .coordinator_of(group_id)?
            .consumer_describe(group_id)
    }
}

impl GroupDescription {
    /// A description that is only `error` (a dead group).
    pub fn failed(error: GroupError, group_id: &str) -> Self {
        GroupDescription {
            error: Some(error),
            group_id: group_id.to_string(),
            state: GroupState::Dead,
            protocol_type: String::new(),
            protocol_data: String::new(),
            members: vec![],
        }
    }
}

/// A broker's partitions are those of its [`Partitions`](crate::partitions::Partitions) (a caller that
/// holds the broker itself calls `broker.partitions()` for answers with
/// `BrokerError`; the trait's answer with `CallError`).
impl crate::partitions::LocalOwner for Broker {
    fn local(&self) -> &crate::partitions::Partitions {
        self.partitions()
    }
}
