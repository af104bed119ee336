//! Share groups (KIP-932) as `kafka-share-groups.sh` sees them: a group's
//! members and assignment (ShareGroupDescribe), its start offset per
//! partition (DescribeShareGroupOffsets), and moving or deleting those
//! (AlterShareGroupOffsets, DeleteShareGroupOffsets), which the broker
//! refuses while the group has members.

use std::collections::BTreeMap;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest, GroupId, ShareGroupDescribeRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::connection::{KafkaClient, topic_name};
use crate::error::{ClientError, check_code};
use crate::groups::TopicPartition;

/// A member of a share group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareMember {
    pub member_id: String,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    /// Its partitions (several members may share one).
    pub assignment: Vec<TopicPartition>,
}

/// A share group as its coordinator describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupDescription {
    pub group_id: String,
    /// `Empty` or `Stable`.
    pub state: String,
    pub group_epoch: i32,
    pub members: Vec<ShareMember>,
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

impl KafkaClient {
    /// Whether the broker serves share groups (lists ShareGroupDescribe).
    pub fn serves_share_groups(&self) -> bool {
        self.version::<ShareGroupDescribeRequest>().is_ok()
    }

    /// The share group `group`; `None` when the broker serves no share
    /// groups or `group` is not one (GROUP_ID_NOT_FOUND).
    pub async fn describe_share_group(
        &mut self,
        group: &str,
    ) -> Result<Option<ShareGroupDescription>, ClientError> {
        let Ok(version) = self.version::<ShareGroupDescribeRequest>() else {
            return Ok(None);
        };
        let mut req = ShareGroupDescribeRequest::default();
        req.group_ids = vec![GroupId(sb(group))];
        let resp = self.send(version, req).await?;
        let g = resp
            .groups
            .into_iter()
            .find(|g| g.group_id.0.as_str() == group)
            .ok_or_else(|| ClientError::MissingAnswer {
                what: format!("the ShareGroupDescribe answer does not mention group {group}"),
            })?;
        if g.error_code == ResponseError::GroupIdNotFound.code() {
            return Ok(None);
        }
        check_code(g.error_code, g.error_message.as_ref(), || {
            format!("describing share group {group}")
        })?;
        let mut members: Vec<ShareMember> = g
            .members
            .into_iter()
            .map(|m| {
                let mut assignment: Vec<TopicPartition> = m
                    .assignment
                    .topic_partitions
                    .iter()
                    .flat_map(|t| {
                        t.partitions
                            .iter()
                            .map(move |p| (t.topic_name.0.to_string(), *p))
                    })
                    .collect();
                assignment.sort();
                ShareMember {
                    member_id: m.member_id.to_string(),
                    member_epoch: m.member_epoch,
                    client_id: m.client_id.to_string(),
                    client_host: m.client_host.to_string(),
                    assignment,
                }
            })
            .collect();
        members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
        Ok(Some(ShareGroupDescription {
            group_id: group.to_owned(),
            state: g.group_state.to_string(),
            group_epoch: g.group_epoch,
            members,
        }))
    }

    /// The share group's start offset of every partition it has state on.
    pub async fn share_start_offsets(
        &mut self,
        group: &str,
    ) -> Result<BTreeMap<TopicPartition, i64>, ClientError> {
        let version = self.version::<DescribeShareGroupOffsetsRequest>()?;
        let mut req = DescribeShareGroupOffsetsRequest::default();
        let mut g = DescribeShareGroupOffsetsRequestGroup::default();
        g.group_id = GroupId(sb(group));
        g.topics = None;
        req.groups = vec![g];
        let resp = self.send(version, req).await?;
        let mut out = BTreeMap::new();
        for g in resp.groups {
            check_code(g.error_code, g.error_message.as_ref(), || {
                format!("describing the offsets of share group {group}")
            })?;
            for t in g.topics {
                for p in t.partitions {
                    if p.error_code == 0 && p.start_offset >= 0 {
                        out.insert(
                            (t.topic_name.0.to_string(), p.partition_index),
                            p.start_offset,
                        );
                    }
                }
            }
        }
        Ok(out)
    }

    /// Moves the share group's start offsets (AlterShareGroupOffsets);
    /// refused while the group has members.
    pub async fn alter_share_offsets(
        &mut self,
        group: &str,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<(), ClientError> {
        let version = self.version::<AlterShareGroupOffsetsRequest>()?;
        let mut by_topic: BTreeMap<&str, Vec<AlterShareGroupOffsetsRequestPartition>> =
            BTreeMap::new();
        for ((topic, partition), offset) in offsets {
            let mut p = AlterShareGroupOffsetsRequestPartition::default();
            p.partition_index = *partition;
            p.start_offset = *offset;
            by_topic.entry(topic).or_default().push(p);
        }
        let mut req = AlterShareGroupOffsetsRequest::default();
        req.group_id = GroupId(sb(group));
        req.topics = by_topic
            .into_iter()
            .map(|(t, partitions)| {
                let mut topic = AlterShareGroupOffsetsRequestTopic::default();
                topic.topic_name = topic_name(t);
                topic.partitions = partitions;
                topic
            })
            .collect();
        let resp = self.send(version, req).await?;
        check_code(resp.error_code, resp.error_message.as_ref(), || {
            format!("altering the offsets of share group {group}")
        })?;
        for t in &resp.responses {
            for p in &t.partitions {
                check_code(p.error_code, p.error_message.as_ref(), || {
                    format!(
                        "altering the offset of share group {group} in {} partition {}",
                        t.topic_name.0, p.partition_index
                    )
                })?;
            }
        }
        Ok(())
    }

    /// Deletes the share group's state of whole topics
    /// (DeleteShareGroupOffsets); refused while the group has members.
    pub async fn delete_share_offsets(
        &mut self,
        group: &str,
        topics: &[String],
    ) -> Result<(), ClientError> {
        let version = self.version::<DeleteShareGroupOffsetsRequest>()?;
        let mut req = DeleteShareGroupOffsetsRequest::default();
        req.group_id = GroupId(sb(group));
        req.topics = topics
            .iter()
            .map(|t| {
                let mut topic = DeleteShareGroupOffsetsRequestTopic::default();
                topic.topic_name = topic_name(t);
                topic
            })
            .collect();
        let resp = self.send(version, req).await?;
        check_code(resp.error_code, resp.error_message.as_ref(), || {
            format!("deleting the offsets of share group {group}")
        })?;
        for t in &resp.responses {
            check_code(t.error_code, t.error_message.as_ref(), || {
                format!(
                    "deleting the offsets of share group {group} in {}",
                    t.topic_name.0
                )
            })?;
        }
        Ok(())
    }
}
