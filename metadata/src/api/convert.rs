//! Conversions between the model and the API's protobuf messages.

use crate::api::proto;
use crate::error::MetaError;
use crate::ids::{PartitionRef, TopicId};
use crate::state::{ClusterState, NodeState, PartitionState, Topic};

pub fn topic_id(s: &str) -> Result<TopicId, MetaError> {
    uuid::Uuid::parse_str(s)
        .map(TopicId)
        .map_err(|_| MetaError::InvalidRequest(format!("bad topic id {s:?}")))
}

pub fn partition(p: Option<&proto::Partition>) -> Result<PartitionRef, MetaError> {
    let p = p.ok_or_else(|| MetaError::InvalidRequest("missing partition".into()))?;
    Ok(PartitionRef {
        topic: topic_id(&p.topic_id)?,
        partition: p.partition,
    })
}

pub fn partition_msg(p: &PartitionRef) -> proto::Partition {
    proto::Partition {
        topic_id: p.topic.to_string(),
        partition: p.partition,
    }
}

pub fn partition_info(index: u32, p: &PartitionState) -> proto::PartitionInfo {
    proto::PartitionInfo {
        partition: index,
        owner: p.ownership.owner.map_or(0, |b| b.0),
        epoch: p.ownership.epoch.0,
        log_start_offset: p.log_start_offset,
        high_watermark: p.high_watermark,
        handover_to: p.ownership.handover.map_or(0, |h| h.to.0),
    }
}

pub fn topic_info(state: &ClusterState, t: &Topic, with_partitions: bool) -> proto::TopicInfo {
    let partitions = if with_partitions {
        (0..t.partitions)
            .filter_map(|i| {
                state
                    .partitions
                    .get(&PartitionRef {
                        topic: t.id,
                        partition: i,
                    })
                    .map(|p| partition_info(i, p))
            })
            .collect()
    } else {
        Vec::new()
    };
    proto::TopicInfo {
        name: t.name.clone(),
        topic_id: t.id.to_string(),
        partition_count: t.partitions,
        configs: t
            .config
            .describe()
            .into_iter()
            .map(|e| proto::ConfigEntry {
                name: e.name.to_string(),
                value: e.value,
                is_default: e.is_default,
            })
            .collect(),
        partitions,
    }
}

pub fn node_state(s: NodeState) -> &'static str {
    match s {
        NodeState::Live => "live",
        NodeState::Draining => "draining",
        NodeState::Dead => "dead",
    }
}

pub fn cluster_view(state: &ClusterState) -> proto::ClusterView {
    proto::ClusterView {
        revision: state.revision.0,
        nodes: state
            .nodes
            .values()
            .map(|n| proto::NodeInfo {
                id: n.id.0,
                kind: match n.kind {
                    crate::command::NodeKind::Broker => "broker",
                    crate::command::NodeKind::Proxy => "proxy",
                }
                .to_string(),
                addr: n.addr.clone(),
                state: node_state(n.state).to_string(),
            })
            .collect(),
        topics: state
            .topics
            .values()
            .map(|t| topic_info(state, t, true))
            .collect(),
        shards: state
            .shards
            .iter()
            .map(|(s, o)| proto::ShardInfo {
                shard: s.0,
                owner: o.owner.map_or(0, |b| b.0),
                epoch: o.epoch.0,
                handover_to: o.handover.map_or(0, |h| h.to.0),
            })
            .collect(),
    }
}

/// An idempotent producer's batch from the API (epochs are Kafka's i16).
pub fn producer_batch(
    b: &proto::ProducerBatch,
) -> Result<crate::command::ProducerBatch, MetaError> {
    let epoch = i16::try_from(b.epoch).map_err(|_| {
        MetaError::InvalidRequest(format!("producer epoch {} out of range", b.epoch))
    })?;
    if b.last_offset < b.first_offset {
        return Err(MetaError::InvalidRequest(
            "producer batch ends before it starts".into(),
        ));
    }
    Ok(crate::command::ProducerBatch {
        producer_id: b.producer_id,
        epoch,
        first_sequence: b.first_sequence,
        last_sequence: b.last_sequence,
        first_offset: b.first_offset,
        last_offset: b.last_offset,
    })
}

pub fn producer_batch_msg(b: &crate::command::ProducerBatch) -> proto::ProducerBatch {
    proto::ProducerBatch {
        producer_id: b.producer_id,
        epoch: i32::from(b.epoch),
        first_sequence: b.first_sequence,
        last_sequence: b.last_sequence,
        first_offset: b.first_offset,
        last_offset: b.last_offset,
    }
}
