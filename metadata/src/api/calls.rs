//! Typed calls of the metadata API for the brokers, the proxy and the
//! indexer: each takes and answers the domain's types and keeps the
//! protobuf messages of its route here, at the wire, so that no caller
//! builds or reads one.

use super::meta_api::MetaApi;
use super::{convert, proto, routes};
use crate::command::{CommittedOffset, ShardFence};
use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch, ObjectRef, PartitionKey};

/// A write by a partition's owner: fenced by the owner and the epoch it
/// holds the partition at (refused with `StaleEpoch` once it moved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerFence {
    pub broker: BrokerId,
    pub partition: PartitionKey,
    pub epoch: Epoch,
}

/// One partition's committed offset of a group, as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: u32,
    pub committed: CommittedOffset,
}

impl GroupOffset {
    fn from_msg(o: proto::GroupOffset) -> Self {
        let (topic, partition, committed) = convert::group_offset(o);
        GroupOffset {
            topic,
            partition,
            committed,
        }
    }

    fn msg(&self) -> proto::GroupOffset {
        convert::group_offset_msg(&self.topic, self.partition, &self.committed)
    }
}

/// What the metadata answered of a page of store objects
/// ([`routes::UnknownObjects`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnknownObjects {
    /// The positions, in the page asked about, of the objects its object
    /// table does not hold (ascending).
    pub unknown: Vec<usize>,
    /// The endpoints the table holds objects on, with how many.
    pub endpoints: std::collections::BTreeMap<String, u64>,
}

impl dyn MetaApi + '_ {
    /// Replaces the committed ranges from `first_offset` to `last_offset`
    /// of the fenced partition by one segment `object`; returns the
    /// segment's object id.
    pub async fn replace_ranges(
        &self,
        fence: OwnerFence,
        first_offset: i64,
        last_offset: i64,
        max_timestamp: i64,
        object: &ObjectRef,
    ) -> Result<u64, MetaError> {
        let r = self
            .call::<routes::ReplaceRanges>(proto::ReplaceRangesRequest {
                broker: fence.broker.0,
                partition: Some(convert::partition_msg(&fence.partition)),
                epoch: fence.epoch.0,
                first_offset,
                last_offset,
                max_timestamp,
                object: Some(convert::object_msg(object)),
            })
            .await?;
        Ok(r.object_id)
    }

    /// Moves the fenced partition's log start forward to `log_start_offset`
    /// (never back); returns the log start now.
    pub async fn truncate_log(
        &self,
        fence: OwnerFence,
        log_start_offset: i64,
    ) -> Result<i64, MetaError> {
        let r = self
            .call::<routes::TruncateLog>(proto::TruncateRequest {
                broker: fence.broker.0,
                partition: Some(convert::partition_msg(&fence.partition)),
                epoch: fence.epoch.0,
                log_start_offset,
            })
            .await?;
        Ok(r.log_start_offset)
    }

    /// Which of `objects` (at most `server::UNKNOWN_OBJECTS_MAX`) the
    /// metadata does not know: neither referenced by an index entry nor
    /// unreferenced and not yet forgotten. Read linearizably.
    pub async fn unknown_objects(
        &self,
        objects: &[ObjectRef],
    ) -> Result<UnknownObjects, MetaError> {
        let r = self
            .call::<routes::UnknownObjects>(proto::UnknownObjectsRequest {
                objects: objects
                    .iter()
                    .map(|o| proto::ObjectName {
                        endpoint: o.endpoint.as_str().to_string(),
                        key: o.key.as_str().to_string(),
                    })
                    .collect(),
            })
            .await?;
        let mut unknown = Vec::with_capacity(r.unknown.len());
        for i in r.unknown {
            match usize::try_from(i) {
                Ok(i) if i < objects.len() && unknown.last().is_none_or(|&l| l < i) => {
                    unknown.push(i)
                }
                _ => {
                    return Err(MetaError::Unavailable(format!(
                        "malformed reply: unknown object {i} of a page of {}",
                        objects.len()
                    )));
                }
            }
        }
        Ok(UnknownObjects {
            unknown,
            endpoints: r
                .endpoints
                .into_iter()
                .map(|e| (e.endpoint, e.objects))
                .collect(),
        })
    }

    /// Forgets objects no committed range refers to (deleted from the store).
    pub async fn forget_objects(&self, ids: Vec<u64>) -> Result<(), MetaError> {
        self.call::<routes::ForgetObjects>(proto::ForgetObjectsRequest { ids })
            .await?;
        Ok(())
    }

    /// Writes a share-partition's state (its start offset and the in-flight
    /// window as the broker encodes it) under `group`, fenced by the
    /// partition's owner.
    pub async fn share_state(
        &self,
        fence: OwnerFence,
        group: &str,
        start_offset: i64,
        state: String,
    ) -> Result<(), MetaError> {
        self.call::<routes::ShareState>(proto::ShareStateRequest {
            broker: fence.broker.0,
            partition: Some(convert::partition_msg(&fence.partition)),
            epoch: fence.epoch.0,
            group: group.to_owned(),
            start_offset,
            state,
        })
        .await?;
        Ok(())
    }

    /// Forgets a share-partition's state, fenced by the partition's owner.
    pub async fn share_forget(&self, fence: OwnerFence, group: &str) -> Result<(), MetaError> {
        self.call::<routes::ShareForget>(proto::ShareForgetRequest {
            broker: fence.broker.0,
            partition: Some(convert::partition_msg(&fence.partition)),
            epoch: fence.epoch.0,
            group: group.to_owned(),
        })
        .await?;
        Ok(())
    }

    /// Every committed offset of `group` (a share group's: its share-
    /// partitions' states).
    pub async fn fetch_offsets(&self, group: &str) -> Result<Vec<GroupOffset>, MetaError> {
        let r = self
            .call::<routes::FetchOffsets>(proto::FetchOffsetsRequest {
                group: group.to_owned(),
            })
            .await?;
        Ok(r.offsets.into_iter().map(GroupOffset::from_msg).collect())
    }

    /// Commits `offsets` of `group` under its coordinator's shard fence
    /// (refused with `StaleCoordinator` once the shard moved). Returns the
    /// (topic, partition)s not stored because they do not exist.
    pub async fn commit_offsets(
        &self,
        fence: ShardFence,
        group: &str,
        offsets: &[GroupOffset],
    ) -> Result<Vec<(String, u32)>, MetaError> {
        let r = self
            .call::<routes::CommitOffsets>(proto::CommitOffsetsRequest {
                group: group.to_owned(),
                offsets: offsets.iter().map(GroupOffset::msg).collect(),
                broker: fence.broker.0,
                shard: fence.shard.0,
                shard_epoch: fence.epoch.0,
            })
            .await?;
        Ok(r.unknown
            .into_iter()
            .map(|o| (o.topic, o.partition))
            .collect())
    }

    /// Deletes `group`'s committed offsets and membership record under its
    /// coordinator's shard fence (refused with `StaleCoordinator` once the
    /// shard moved).
    pub async fn delete_group(&self, fence: ShardFence, group: &str) -> Result<(), MetaError> {
        self.call::<routes::DeleteGroups>(proto::DeleteGroupsRequest {
            groups: vec![group.to_owned()],
            broker: fence.broker.0,
            shard: fence.shard.0,
            shard_epoch: fence.epoch.0,
        })
        .await?;
        Ok(())
    }

    /// Deletes the committed offsets of `partitions` (topic, index) of
    /// `group` under its coordinator's shard fence.
    pub async fn delete_offsets(
        &self,
        fence: ShardFence,
        group: &str,
        partitions: &[(String, u32)],
    ) -> Result<(), MetaError> {
        self.call::<routes::DeleteOffsets>(proto::CommitOffsetsRequest {
            group: group.to_owned(),
            offsets: partitions
                .iter()
                .map(|(topic, partition)| proto::GroupOffset {
                    topic: topic.clone(),
                    partition: *partition,
                    ..Default::default()
                })
                .collect(),
            broker: fence.broker.0,
            shard: fence.shard.0,
            shard_epoch: fence.epoch.0,
        })
        .await?;
        Ok(())
    }

    /// Stores a group's membership record under its coordinator's shard
    /// fence (`None`: forgets it).
    pub async fn store_group(
        &self,
        fence: ShardFence,
        group: &str,
        record: Option<Vec<u8>>,
    ) -> Result<(), MetaError> {
        self.call::<routes::StoreGroup>(proto::StoreGroupRequest {
            broker: fence.broker.0,
            shard: fence.shard.0,
            shard_epoch: fence.epoch.0,
            group: group.to_owned(),
            record,
        })
        .await?;
        Ok(())
    }

    /// The stored membership records of the groups of `shard`, by group id.
    pub async fn group_records(&self, shard: u32) -> Result<Vec<(String, Vec<u8>)>, MetaError> {
        let r = self
            .call::<routes::GroupRecords>(proto::GroupRecordsRequest { shard })
            .await?;
        Ok(r.groups.into_iter().map(|g| (g.group, g.record)).collect())
    }

    /// Deletes the topic `name`.
    pub async fn delete_topic(&self, name: &str) -> Result<(), MetaError> {
        self.call::<routes::DeleteTopic>(proto::TopicName {
            name: name.to_owned(),
        })
        .await?;
        Ok(())
    }

    /// Raises the topic's partition count to `total`.
    pub async fn create_partitions(&self, name: &str, total: u32) -> Result<(), MetaError> {
        self.call::<routes::CreatePartitions>(proto::CreatePartitionsRequest {
            name: name.to_owned(),
            total,
        })
        .await?;
        Ok(())
    }

    /// Sets the topic's configs in `set` and removes those in `delete`
    /// (validated by the metadata service, `crate::topic_config`).
    pub async fn alter_topic_config(
        &self,
        name: &str,
        set: impl IntoIterator<Item = (String, String)>,
        delete: Vec<String>,
    ) -> Result<(), MetaError> {
        self.call::<routes::AlterTopic>(proto::AlterTopicConfigRequest {
            name: name.to_owned(),
            set: set.into_iter().collect(),
            delete,
        })
        .await?;
        Ok(())
    }
}
