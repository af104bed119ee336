//! Consumer-group administration: list, describe, committed offsets, commit
//! as an admin (no member), delete groups and offsets — what
//! `kafka-consumer-groups.sh` does.
//!
//! Every request goes to the connected address: a Floe proxy forwards group
//! requests to the group's coordinator itself, so no FindCoordinator round
//! trip is needed.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, DeleteGroupsRequest, DescribeGroupsRequest, GroupId,
    ListGroupsRequest, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::connection::{KafkaClient, topic_name};
use crate::error::{ClientError, check_code};

/// A (topic, partition) pair.
pub type TopicPartition = (String, i32);

/// A group in a listing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupListing {
    pub group_id: String,
    /// `consumer` for Kafka consumers; empty for a group that only has
    /// committed offsets.
    pub protocol_type: String,
    /// The state, if the broker says (ListGroups v4 and later).
    pub state: Option<String>,
    /// `classic`, `consumer` or `share`, if the broker says (ListGroups v5
    /// and later).
    pub group_type: Option<String>,
}

/// One member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The partitions assigned to it (decoded for protocol type `consumer`;
    /// empty otherwise or while the group rebalances).
    pub assignment: Vec<TopicPartition>,
}

/// A group as its coordinator describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    /// Kafka's state names: `Empty`, `Stable`, `PreparingRebalance`,
    /// `CompletingRebalance`, `Dead`.
    pub state: String,
    pub protocol_type: String,
    /// The assignor chosen (`range`, `cooperative-sticky`, …).
    pub protocol: String,
    pub members: Vec<GroupMember>,
}

impl GroupDescription {
    /// Whether the group has live members: offsets may then only be
    /// changed by them (Kafka refuses a reset then).
    pub fn is_active(&self) -> bool {
        !matches!(self.state.as_str(), "Empty" | "Dead")
    }
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// The partitions in a consumer-protocol assignment: a version (i16) and
/// the assignment at that version. Empty bytes (a rebalance) are no
/// partitions; bytes that do not decode are an error.
pub fn decode_assignment(bytes: &Bytes) -> Result<Vec<TopicPartition>, ClientError> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let malformed = |why: String| ClientError::MissingAnswer {
        what: format!("a member's assignment does not decode: {why}"),
    };
    if bytes.len() < 2 {
        return Err(malformed("shorter than its version".into()));
    }
    let version = i16::from_be_bytes([bytes[0], bytes[1]]).clamp(0, 3);
    let assignment: ConsumerProtocolAssignment =
        floe_proxy::codec::decode_guarded(bytes.slice(2..), version)
            .map_err(|e| malformed(e.to_string()))?;
    let mut out: Vec<TopicPartition> = assignment
        .assigned_partitions
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.topic.0.to_string(), *p))
        })
        .collect();
    out.sort();
    Ok(out)
}

impl KafkaClient {
    /// Every group the cluster knows, sorted by id: each broker lists the
    /// groups it is coordinator of (as Kafka's do), so every broker of the
    /// Metadata answer is asked (this connection when it is one of them).
    pub async fn list_groups(&mut self) -> Result<Vec<GroupListing>, ClientError> {
        let meta = self.metadata(Some(&[])).await?;
        let mut groups = Vec::new();
        for b in &meta.brokers {
            let addr = format!("{}:{}", b.host.as_str(), b.port);
            if addr == self.addr() {
                groups.extend(self.list_groups_here().await?);
            } else {
                let mut other = self.connect_to(&addr).await?;
                groups.extend(other.list_groups_here().await?);
            }
        }
        if meta.brokers.is_empty() {
            groups = self.list_groups_here().await?;
        }
        groups.sort();
        groups.dedup();
        Ok(groups)
    }

    /// The groups the broker of this connection lists.
    async fn list_groups_here(&mut self) -> Result<Vec<GroupListing>, ClientError> {
        let version = self.version::<ListGroupsRequest>()?;
        let resp = self.send(version, ListGroupsRequest::default()).await?;
        check_code(resp.error_code, None, || "listing groups".into())?;
        let mut groups: Vec<GroupListing> = resp
            .groups
            .iter()
            .map(|g| GroupListing {
                group_id: g.group_id.0.to_string(),
                protocol_type: g.protocol_type.to_string(),
                state: (version >= 4).then(|| g.group_state.to_string()),
                group_type: (version >= 5).then(|| g.group_type.to_string()),
            })
            .collect();
        groups.sort();
        Ok(groups)
    }

    /// One group's state and members (DescribeGroups).
    pub async fn describe_group(&mut self, group: &str) -> Result<GroupDescription, ClientError> {
        let version = self.version::<DescribeGroupsRequest>()?;
        let mut req = DescribeGroupsRequest::default();
        req.groups = vec![GroupId(sb(group))];
        let resp = self.send(version, req).await?;
        let g = resp
            .groups
            .into_iter()
            .find(|g| g.group_id.0.as_str() == group)
            .ok_or_else(|| ClientError::MissingAnswer {
                what: format!("the DescribeGroups answer does not mention group {group}"),
            })?;
        check_code(g.error_code, g.error_message.as_ref(), || {
            format!("describing group {group}")
        })?;
        let consumer = g.protocol_type.as_str() == "consumer";
        let mut members = Vec::with_capacity(g.members.len());
        for m in g.members {
            let assignment = if consumer {
                decode_assignment(&m.member_assignment)?
            } else {
                Vec::new()
            };
            members.push(GroupMember {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.map(|i| i.to_string()),
                client_id: m.client_id.to_string(),
                client_host: m.client_host.to_string(),
                assignment,
            });
        }
        members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
        Ok(GroupDescription {
            group_id: group.to_owned(),
            state: g.group_state.to_string(),
            protocol_type: g.protocol_type.to_string(),
            protocol: g.protocol_data.to_string(),
            members,
        })
    }

    /// The group's committed offsets, every topic (OffsetFetch with no
    /// topic list). Partitions without a committed offset are left out.
    pub async fn committed_offsets(
        &mut self,
        group: &str,
    ) -> Result<BTreeMap<TopicPartition, i64>, ClientError> {
        let version = self.version::<OffsetFetchRequest>()?;
        let mut req = OffsetFetchRequest::default();
        req.group_id = GroupId(sb(group));
        req.topics = None;
        let resp = self.send(version, req).await?;
        check_code(resp.error_code, None, || {
            format!("fetching the offsets of group {group}")
        })?;
        let mut out = BTreeMap::new();
        for t in &resp.topics {
            for p in &t.partitions {
                check_code(p.error_code, None, || {
                    format!(
                        "fetching the offset of group {group} in {} partition {}",
                        t.name.0, p.partition_index
                    )
                })?;
                if p.committed_offset >= 0 {
                    out.insert(
                        (t.name.0.to_string(), p.partition_index),
                        p.committed_offset,
                    );
                }
            }
        }
        Ok(out)
    }

    /// Commits `offsets` for the group as an admin, not as a member
    /// (generation -1, no member id): the coordinator accepts that only
    /// while the group has no live members.
    pub async fn commit_offsets(
        &mut self,
        group: &str,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<(), ClientError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let version = self.version::<OffsetCommitRequest>()?;
        let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for ((topic, partition), offset) in offsets {
            by_topic.entry(topic).or_default().push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(*partition)
                    .with_committed_offset(*offset)
                    .with_committed_leader_epoch(-1)
                    .with_committed_metadata(Some(StrBytes::default())),
            );
        }
        let mut req = OffsetCommitRequest::default();
        req.group_id = GroupId(sb(group));
        req.generation_id_or_member_epoch = -1;
        req.member_id = StrBytes::default();
        req.retention_time_ms = -1;
        req.topics = by_topic
            .into_iter()
            .map(|(t, partitions)| {
                OffsetCommitRequestTopic::default()
                    .with_name(topic_name(t))
                    .with_partitions(partitions)
            })
            .collect();
        let resp = self.send(version, req).await?;
        for t in &resp.topics {
            for p in &t.partitions {
                check_code(p.error_code, None, || {
                    format!(
                        "committing the offset of group {group} in {} partition {}",
                        t.name.0, p.partition_index
                    )
                })?;
            }
        }
        Ok(())
    }

    /// Deletes a group and its committed offsets (DeleteGroups); refused by
    /// the coordinator while the group has members.
    pub async fn delete_group(&mut self, group: &str) -> Result<(), ClientError> {
        let version = self.version::<DeleteGroupsRequest>()?;
        let mut req = DeleteGroupsRequest::default();
        req.groups_names = vec![GroupId(sb(group))];
        let resp = self.send(version, req).await?;
        let r = resp
            .results
            .iter()
            .find(|r| r.group_id.0.as_str() == group)
            .ok_or_else(|| ClientError::MissingAnswer {
                what: format!("the DeleteGroups answer does not mention group {group}"),
            })?;
        check_code(r.error_code, None, || format!("deleting group {group}"))
    }

    /// Deletes the group's committed offsets of these partitions
    /// (OffsetDelete); refused for topics live members subscribe to.
    pub async fn delete_offsets(
        &mut self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<(), ClientError> {
        if partitions.is_empty() {
            return Ok(());
        }
        let version = self.version::<OffsetDeleteRequest>()?;
        let mut by_topic: BTreeMap<&str, Vec<OffsetDeleteRequestPartition>> = BTreeMap::new();
        for (topic, partition) in partitions {
            by_topic
                .entry(topic)
                .or_default()
                .push(OffsetDeleteRequestPartition::default().with_partition_index(*partition));
        }
        let mut req = OffsetDeleteRequest::default();
        req.group_id = GroupId(sb(group));
        req.topics = by_topic
            .into_iter()
            .map(|(t, partitions)| {
                OffsetDeleteRequestTopic::default()
                    .with_name(topic_name(t))
                    .with_partitions(partitions)
            })
            .collect();
        let resp = self.send(version, req).await?;
        check_code(resp.error_code, None, || {
            format!("deleting offsets of group {group}")
        })?;
        for t in &resp.topics {
            for p in &t.partitions {
                check_code(p.error_code, None, || {
                    format!(
                        "deleting the offset of group {group} in {} partition {}",
                        t.name.0, p.partition_index
                    )
                })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as Assigned;
    use kafka_protocol::protocol::Encodable;

    use super::*;

    fn encoded(version: i16, assignment: &ConsumerProtocolAssignment) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_i16(version);
        assignment.encode(&mut buf, version).expect("encodes");
        buf.freeze()
    }

    #[test]
    fn an_assignment_decodes_to_sorted_topic_partitions() {
        let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
            Assigned::default()
                .with_topic(topic_name("b"))
                .with_partitions(vec![1, 0]),
            Assigned::default()
                .with_topic(topic_name("a"))
                .with_partitions(vec![2]),
        ]);
        for version in [0, 1, 3] {
            let got = decode_assignment(&encoded(version, &assignment)).expect("decodes");
            assert_eq!(
                got,
                vec![("a".into(), 2), ("b".into(), 0), ("b".into(), 1)],
                "v{version}"
            );
        }
    }

    #[test]
    fn an_empty_assignment_is_none_and_garbage_is_an_error() {
        assert_eq!(decode_assignment(&Bytes::new()).expect("empty"), vec![]);
        assert!(decode_assignment(&Bytes::from_static(&[0])).is_err());
        assert!(decode_assignment(&Bytes::from_static(&[0, 0, 0, 0, 0, 9])).is_err());
    }

    #[test]
    fn only_empty_and_dead_groups_are_inactive() {
        let mut d = GroupDescription {
            group_id: "g".into(),
            state: "Empty".into(),
            protocol_type: String::new(),
            protocol: String::new(),
            members: vec![],
        };
        assert!(!d.is_active());
        d.state = "Dead".into();
        assert!(!d.is_active());
        for s in ["Stable", "PreparingRebalance", "CompletingRebalance"] {
            d.state = s.into();
            assert!(d.is_active(), "{s}");
        }
    }
}
