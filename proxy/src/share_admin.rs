//! The admin side of share groups at the proxy: AlterShareGroupOffsets,
//! DeleteShareGroupOffsets, and the share groups' part of ListGroups,
//! DescribeGroups and DeleteGroups (`crate::groups` asks here).
//!
//! A group's kind and whether it has members are decided by its
//! coordinator ([`ShareGroupAdmin`]); a share-partition's start offset is
//! moved or deleted by the partition's owner ([`SharePartitionAdmin`]),
//! which holds it in memory too, fenced by the partition's epoch.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// A share-partition as [`Context::inspect_share_partition`] answers it.
pub use floe_broker::share::ShareInspection;
use floe_broker::share::{
    GroupKind, MemberId, ShareCall, ShareGroupAdmin, ShareGroupError, ShareGroupState,
    SharePartitionAdmin, ShareSettings,
};
use floe_metadata::api::{proto as mp, routes};
use floe_metadata::watch::ClusterSnapshot;
use floe_storage::PartitionKey;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::errors::call_code;
use crate::groups::ShardOwner;
use crate::handlers::Context;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// A group-wide refusal: Kafka's code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub code: i16,
    pub message: String,
}

impl Refusal {
    fn new(e: ResponseError, message: impl Into<String>) -> Self {
        Self {
            code: e.code(),
            message: message.into(),
        }
    }
}

/// What the coordinator's check of a group means for a change of its
/// share offsets (Kafka's answers): another kind of group is
/// GROUP_ID_NOT_FOUND, a group with members NON_EMPTY_GROUP, an unknown
/// group GROUP_ID_NOT_FOUND unless `create` (AlterShareGroupOffsets makes
/// the group).
pub(crate) fn offsets_refusal(
    group: &str,
    checked: Result<Option<GroupKind>, ShareGroupError>,
    create: bool,
) -> Option<Refusal> {
    match checked {
        Ok(Some(GroupKind::Share)) => None,
        Ok(None) if create => None,
        Ok(None) => Some(Refusal::new(
            ResponseError::GroupIdNotFound,
            format!("Group {group} not found."),
        )),
        Ok(Some(_)) => Some(Refusal::new(
            ResponseError::GroupIdNotFound,
            format!("Group {group} is not a share group."),
        )),
        Err(ShareGroupError::NonEmptyGroup) => Some(Refusal::new(
            ResponseError::NonEmptyGroup,
            "The group is not empty.",
        )),
        Err(ShareGroupError::NotShareGroup) => Some(Refusal::new(
            ResponseError::GroupIdNotFound,
            format!("Group {group} is not a share group."),
        )),
        Err(e) => Some(Refusal::new(ResponseError::NotCoordinator, e.to_string())),
    }
}

impl Context {
    /// The coordinator of `group`, for the admin side of share groups.
    pub(crate) fn share_group_admin(
        &self,
        group: &str,
    ) -> Result<Arc<dyn ShareGroupAdmin>, ShareGroupError> {
        match self.shard_owner(group) {
            Ok(ShardOwner::Local(b)) => Ok(Arc::new(b.share().clone())),
            Ok(ShardOwner::Remote(r)) => Ok(r),
            Err(_) => Err(ShareGroupError::NotCoordinator),
        }
    }

    /// The coordinator's check of `group` (its kind; NON_EMPTY_GROUP if it
    /// is a share group with members).
    pub(crate) async fn share_check(
        &self,
        group: &str,
    ) -> Result<Option<GroupKind>, ShareGroupError> {
        self.share_group_admin(group)?
            .share_check_empty(group, false)
            .await
    }

    /// [`Self::share_check`] that holds a group found empty at its
    /// coordinator (its joins wait) until [`Self::share_release`]: the
    /// share admin requests decide there and reset at the owners after.
    async fn share_hold(&self, group: &str) -> Result<Option<GroupKind>, ShareGroupError> {
        self.share_group_admin(group)?
            .share_check_empty(group, true)
            .await
    }

    /// Ends a hold of [`Self::share_hold`] or of a share group's delete.
    async fn share_release(&self, group: &str) {
        if let Ok(admin) = self.share_group_admin(group) {
            admin.share_release(group).await;
        }
    }

    fn share_partition_admin(
        &self,
        snap: &ClusterSnapshot,
        key: &PartitionKey,
    ) -> Result<Arc<dyn SharePartitionAdmin>, i16> {
        match self.owner_of(snap, key) {
            Ok(ShardOwner::Local(b)) => Ok(Arc::new(b.share().clone())),
            Ok(ShardOwner::Remote(r)) => Ok(r),
            Err(e) => Err(call_code(&e.into())),
        }
    }

    /// The group's settings, or the error to answer when they were never
    /// read and cannot be now ([`crate::share::SettingsUnread`]).
    async fn share_settings(&self, group: &str) -> Result<ShareSettings, i16> {
        match &self.share {
            Some(share) => share
                .settings_for(self.meta.as_ref(), group)
                .await
                .map_err(|e| e.code()),
            None => Ok(ShareSettings::default()),
        }
    }

    /// Moves (`Some`) or deletes (`None`) the group's state on one
    /// partition at its owner; 0 or Kafka's code.
    async fn reset_at_owner(
        &self,
        snap: &ClusterSnapshot,
        settings: &ShareSettings,
        group: &str,
        key: PartitionKey,
        to: Option<i64>,
    ) -> i16 {
        let owner = match self.share_partition_admin(snap, &key) {
            Ok(o) => o,
            Err(code) => return code,
        };
        let call = ShareCall {
            group: group.to_owned(),
            key,
            member: MemberId::new(""),
            settings: settings.clone(),
        };
        match owner.share_reset(&call, to).await {
            Ok(_) => 0,
            Err(e) => call_code(&e),
        }
    }

    /// The state of share group `group` on one partition as an operator
    /// sees it (the console's share-group page), asked of the partition's
    /// owner, with at most `limit` acquired records listed. `who` needs
    /// DESCRIBE on the group and on the topic, as DescribeShareGroupOffsets
    /// does. `Ok(None)`: the group has no state there. An error is Kafka's
    /// code.
    pub async fn inspect_share_partition(
        &self,
        who: &crate::groups::ClientInfo,
        group: &str,
        topic: &str,
        partition: u32,
        limit: u32,
    ) -> Result<Option<ShareInspection>, i16> {
        use floe_metadata::acl::Operation;
        let snap = self.view.current();
        let check = self.authz.check(&snap.acls, who);
        if !check.group(Operation::Describe, group) {
            return Err(ResponseError::GroupAuthorizationFailed.code());
        }
        if !check.topic(Operation::Describe, topic) {
            return Err(ResponseError::TopicAuthorizationFailed.code());
        }
        let key = snap
            .topics
            .get(topic)
            .and_then(|info| info.partition_key(partition))
            .ok_or(ResponseError::UnknownTopicOrPartition.code())?;
        let settings = self.share_settings(group).await?;
        let owner = self.share_partition_admin(&snap, &key)?;
        let call = ShareCall {
            group: group.to_owned(),
            key,
            member: MemberId::new(""),
            settings,
        };
        owner
            .share_inspect(&call, limit)
            .await
            .map_err(|e| call_code(&e))
    }

    /// The partitions `group` has share state stored on, by topic name.
    async fn stored_share_partitions(
        &self,
        group: &str,
    ) -> Result<BTreeMap<String, Vec<u32>>, String> {
        let stored = self
            .meta
            .call::<routes::FetchOffsets>(mp::FetchOffsetsRequest {
                group: group.to_owned(),
            })
            .await
            .map_err(|e| e.to_string())?;
        let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for o in stored.offsets {
            if floe_broker::share::durable::is_share_state(&o.metadata) {
                out.entry(o.topic).or_default().push(o.partition);
            }
        }
        Ok(out)
    }

    /// AlterShareGroupOffsets: each partition's start offset moved by its
    /// owner (kept within the log's start and end); refused while the
    /// group has members, and for a classic or consumer group.
    pub async fn alter_share_group_offsets(
        &self,
        req: &AlterShareGroupOffsetsRequest,
    ) -> AlterShareGroupOffsetsResponse {
        use alter_share_group_offsets_response::{
            AlterShareGroupOffsetsResponsePartition as Partition,
            AlterShareGroupOffsetsResponseTopic as Topic,
        };
        let group = req.group_id.to_string();
        let mut r = AlterShareGroupOffsetsResponse::default();
        let refusal = offsets_refusal(&group, self.share_hold(&group).await, true);
        if let Some(f) = &refusal {
            r.error_code = f.code;
            r.error_message = Some(s(f.message.clone()));
        }
        let snap = self.view.current();
        let settings = match self.share_settings(&group).await {
            Ok(settings) => settings,
            Err(code) => {
                r.error_code = code;
                if refusal.is_none() {
                    self.share_release(&group).await;
                }
                return r;
            }
        };
        for t in &req.topics {
            let mut out = Topic::default();
            out.topic_name = t.topic_name.clone();
            let info = snap.topics.get(t.topic_name.as_str());
            if let Some(i) = info {
                out.topic_id = i.id.0;
            }
            for p in &t.partitions {
                let mut pd = Partition::default();
                pd.partition_index = p.partition_index;
                let partition = info.and_then(|i| {
                    u32::try_from(p.partition_index)
                        .ok()
                        .filter(|p| *p < i.partition_count)
                        .map(|p| PartitionKey::new(i.id, p))
                });
                let (code, message) = if let Some(f) = &refusal {
                    (f.code, Some(f.message.clone()))
                } else if let Some(key) = partition {
                    if p.start_offset < 0 {
                        (
                            ResponseError::InvalidRequest.code(),
                            Some("a start offset is at least 0".to_owned()),
                        )
                    } else {
                        let code = self
                            .reset_at_owner(&snap, &settings, &group, key, Some(p.start_offset))
                            .await;
                        (code, None)
                    }
                } else {
                    (ResponseError::UnknownTopicOrPartition.code(), None)
                };
                pd.error_code = code;
                pd.error_message = message.map(s);
                out.partitions.push(pd);
            }
            r.responses.push(out);
        }
        if refusal.is_none() {
            self.share_release(&group).await;
        }
        r
    }

    /// DeleteShareGroupOffsets: the group's state on every partition of
    /// each topic deleted by the partitions' owners (a later fetch starts
    /// at `share.auto.offset.reset` again); refused while the group has
    /// members, for a classic or consumer group, and for an unknown group.
    pub async fn delete_share_group_offsets(
        &self,
        req: &DeleteShareGroupOffsetsRequest,
    ) -> DeleteShareGroupOffsetsResponse {
        let group = req.group_id.to_string();
        let mut r = DeleteShareGroupOffsetsResponse::default();
        if let Some(f) = offsets_refusal(&group, self.share_hold(&group).await, false) {
            r.error_code = f.code;
            r.error_message = Some(s(f.message));
            return r;
        }
        let r = self.delete_held_share_offsets(&group, req, r).await;
        self.share_release(&group).await;
        r
    }

    /// [`Self::delete_share_group_offsets`] once the group is held.
    async fn delete_held_share_offsets(
        &self,
        group: &str,
        req: &DeleteShareGroupOffsetsRequest,
        mut r: DeleteShareGroupOffsetsResponse,
    ) -> DeleteShareGroupOffsetsResponse {
        use delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic as Topic;
        let stored = match self.stored_share_partitions(group).await {
            Ok(s) => s,
            Err(e) => {
                r.error_code = ResponseError::CoordinatorNotAvailable.code();
                r.error_message = Some(s(e));
                return r;
            }
        };
        let snap = self.view.current();
        let settings = match self.share_settings(group).await {
            Ok(settings) => settings,
            Err(code) => {
                r.error_code = code;
                return r;
            }
        };
        for t in &req.topics {
            let mut out = Topic::default();
            out.topic_name = t.topic_name.clone();
            match snap.topics.get(t.topic_name.as_str()) {
                None => out.error_code = ResponseError::UnknownTopicOrPartition.code(),
                Some(info) => {
                    out.topic_id = info.id.0;
                    for p in stored.get(t.topic_name.as_str()).into_iter().flatten() {
                        let key = PartitionKey::new(info.id, *p);
                        let code = self
                            .reset_at_owner(&snap, &settings, group, key, None)
                            .await;
                        if code != 0 && out.error_code == 0 {
                            out.error_code = code;
                        }
                    }
                }
            }
            r.responses.push(out);
        }
        r
    }

    /// The share groups of the coordinator shards in `named`, as
    /// (group id, state): those in their coordinators' memory, and those
    /// known only from their stored state (no member since the coordinator
    /// started), as Empty.
    pub(crate) async fn share_listings(
        &self,
        snap: &ClusterSnapshot,
        named: &HashSet<u32>,
    ) -> Vec<(String, ShareGroupState)> {
        let shard_count = snap.shard_count();
        let mut listed: BTreeMap<String, ShareGroupState> = BTreeMap::new();
        for (_, owner) in self.shard_owners(snap, named) {
            let admin: Arc<dyn ShareGroupAdmin> = match owner {
                ShardOwner::Local(b) => Arc::new(b.share().clone()),
                ShardOwner::Remote(r) => r,
            };
            match admin.share_groups().await {
                Ok(groups) => listed.extend(groups.into_iter().map(|g| (g.group_id, g.state))),
                Err(e) => tracing::debug!(error = %e, "share groups not listed by a coordinator"),
            }
        }
        match self.meta.call::<routes::StoredGroups>(mp::Empty {}).await {
            Ok(stored) => {
                for g in stored.groups.into_iter().filter(|g| g.share) {
                    listed.entry(g.group).or_insert(ShareGroupState::Empty);
                }
            }
            Err(e) => tracing::debug!(error = %e, "stored share groups not listed"),
        }
        listed
            .into_iter()
            .filter(|(id, _)| named.contains(&floe_broker::group::shard_of(id, shard_count)))
            .collect()
    }

    /// DeleteGroups of a share group: its membership forgotten by its
    /// coordinator (NON_EMPTY_GROUP while it has members), its
    /// share-partitions dropped by their owners, its stored state deleted.
    /// 0 or Kafka's code.
    pub(crate) async fn delete_share_group(
        &self,
        group: &str,
        fence: floe_metadata::command::ShardFence,
    ) -> i16 {
        let admin = match self.share_group_admin(group) {
            Ok(a) => a,
            Err(_) => return ResponseError::NotCoordinator.code(),
        };
        if let Err(e) = admin.share_delete_group(group).await {
            return offsets_refusal(group, Err(e), false).map_or(0, |f| f.code);
        }
        // Held by the delete at the coordinator until the owners dropped
        // the group's share-partitions.
        let code = self.drop_deleted_share_group(group, fence).await;
        admin.share_release(group).await;
        code
    }

    /// The rest of [`Self::delete_share_group`] once the coordinator
    /// forgot (and holds) the group.
    async fn drop_deleted_share_group(
        &self,
        group: &str,
        fence: floe_metadata::command::ShardFence,
    ) -> i16 {
        let stored = match self.stored_share_partitions(group).await {
            Ok(s) => s,
            Err(_) => return ResponseError::CoordinatorNotAvailable.code(),
        };
        let snap = self.view.current();
        let settings = match self.share_settings(group).await {
            Ok(settings) => settings,
            Err(code) => return code,
        };
        for (topic, partitions) in stored {
            // A topic deleted since: its state goes with the group below.
            let Some(info) = snap.topics.get(&topic) else {
                continue;
            };
            for p in partitions {
                let key = PartitionKey::new(info.id, p);
                let code = self
                    .reset_at_owner(&snap, &settings, group, key, None)
                    .await;
                if code != 0 {
                    return code;
                }
            }
        }
        self.forget_stored_group(group, fence).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_offsets_are_refused_as_kafka_refuses_them() {
        let code = |checked, create| offsets_refusal("g", checked, create).map(|f| f.code);
        assert_eq!(code(Ok(Some(GroupKind::Share)), false), None);
        assert_eq!(code(Ok(None), true), None);
        assert_eq!(
            code(Ok(None), false),
            Some(ResponseError::GroupIdNotFound.code())
        );
        for other in [GroupKind::Classic, GroupKind::Consumer] {
            let f = offsets_refusal("g", Ok(Some(other)), true).unwrap_or_else(|| panic!());
            assert_eq!(f.code, ResponseError::GroupIdNotFound.code());
            assert_eq!(f.message, "Group g is not a share group.");
        }
        assert_eq!(
            code(Err(ShareGroupError::NonEmptyGroup), true),
            Some(ResponseError::NonEmptyGroup.code())
        );
        assert_eq!(
            code(Err(ShareGroupError::NotCoordinator), true),
            Some(ResponseError::NotCoordinator.code())
        );
    }
}
