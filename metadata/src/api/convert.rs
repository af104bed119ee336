//! Conversions between the model and the API's protobuf messages.

use crate::api::proto;
use crate::error::MetaError;
use crate::ids::{PartitionKey, TopicId};
use crate::state::{ClusterState, NodeState, PartitionState, Topic};

pub fn topic_id(s: &str) -> Result<TopicId, MetaError> {
    s.parse()
        .map_err(|e: floe_types::BadTopicId| MetaError::InvalidRequest(e.to_string()))
}

pub fn partition(p: Option<&proto::Partition>) -> Result<PartitionKey, MetaError> {
    let p = p.ok_or_else(|| MetaError::InvalidRequest("missing partition".into()))?;
    Ok(PartitionKey {
        topic: topic_id(&p.topic_id)?,
        partition: p.partition,
    })
}

pub fn partition_msg(p: &PartitionKey) -> proto::Partition {
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
        stored_bytes: None,
    }
}

pub fn topic_info(state: &ClusterState, t: &Topic, with_partitions: bool) -> proto::TopicInfo {
    topic_info_with(state, t, with_partitions, true)
}

/// A topic as [`topic_info`] describes it, its partitions' stored bytes
/// left out when not `with_bytes` (the cluster view: they change at every
/// commit and cost a pass over each partition's index).
fn topic_info_with(
    state: &ClusterState,
    t: &Topic,
    with_partitions: bool,
    with_bytes: bool,
) -> proto::TopicInfo {
    let partitions = if with_partitions {
        (0..t.partitions)
            .filter_map(|i| {
                state
                    .topics
                    .partitions
                    .get(&PartitionKey {
                        topic: t.id,
                        partition: i,
                    })
                    .map(|p| proto::PartitionInfo {
                        stored_bytes: with_bytes.then(|| p.stored_bytes()),
                        ..partition_info(i, p)
                    })
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

/// The view for a watch from revision `since`: the ACLs are left out when
/// they did not change after it (they can be many; the view goes out at
/// every change of the cluster).
pub fn cluster_view_since(state: &ClusterState, since: u64) -> proto::ClusterView {
    cluster_view_since_with(state, since, |_| true)
}

/// The view's changes after `since` (a partial view): the topics in
/// `change` that exist, whole, and those gone; everything else whole.
pub fn cluster_view_delta(
    state: &ClusterState,
    since: u64,
    change: &crate::state::view::ViewChange,
) -> proto::ClusterView {
    let mut v = cluster_view_since_with(state, since, |t| change.topics.contains(&t.id));
    let present: std::collections::BTreeSet<TopicId> = state
        .topics
        .by_name
        .values()
        .map(|t| t.id)
        .filter(|id| change.topics.contains(id))
        .collect();
    v.deleted_topic_ids = change
        .deleted
        .iter()
        .chain(change.topics.iter())
        .filter(|id| !present.contains(id))
        .map(|id| id.to_string())
        .collect();
    v.partial = true;
    v
}

pub fn cluster_view(state: &ClusterState) -> proto::ClusterView {
    cluster_view_with(state, |_| true)
}

/// [`cluster_view_since`] with only the topics `include` takes.
fn cluster_view_since_with(
    state: &ClusterState,
    since: u64,
    include: impl Fn(&Topic) -> bool,
) -> proto::ClusterView {
    let mut v = cluster_view_with(state, include);
    if since > 0 && state.security.acls.revision <= since {
        v.acls = Vec::new();
        v.acls_unchanged = true;
    }
    v
}

/// The cluster view with the topics `include` takes.
fn cluster_view_with(state: &ClusterState, include: impl Fn(&Topic) -> bool) -> proto::ClusterView {
    proto::ClusterView {
        revision: state.revision.0,
        nodes: state
            .nodes
            .by_id
            .values()
            .map(|n| proto::NodeInfo {
                id: n.id.0,
                kind: node_kind_name(n.kind).to_string(),
                addr: n.addr.clone(),
                state: node_state(n.state).to_string(),
            })
            .collect(),
        topics: state
            .topics
            .by_name
            .values()
            .filter(|t| include(t))
            .map(|t| topic_info_with(state, t, true, false))
            .collect(),
        quotas: super::quota_routes::quota_entries(&state.quotas),
        scram: super::scram_routes::scram_users(&state.security.scram),
        acls: super::acl_routes::entries(&state.security.acls),
        acls_unchanged: false,
        unchanged: false,
        partial: false,
        deleted_topic_ids: Vec::new(),
        shards: state
            .topics
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

// ---- wire → model (what clients read) and model → wire (what they send) ----

fn malformed(what: &str) -> MetaError {
    MetaError::Unavailable(format!("malformed reply: {what}"))
}

pub fn node_kind_name(k: crate::command::NodeKind) -> &'static str {
    match k {
        crate::command::NodeKind::Broker => "broker",
        crate::command::NodeKind::Proxy => "proxy",
    }
}

/// The kind [`node_kind_name`] names.
pub fn node_kind(name: &str) -> Option<crate::command::NodeKind> {
    [
        crate::command::NodeKind::Broker,
        crate::command::NodeKind::Proxy,
    ]
    .into_iter()
    .find(|k| node_kind_name(*k) == name)
}

/// The state [`node_state`] names (an unknown one reads as dead).
fn node_state_from(name: &str) -> NodeState {
    [NodeState::Live, NodeState::Draining]
        .into_iter()
        .find(|s| node_state(*s) == name)
        .unwrap_or(NodeState::Dead)
}

pub fn object_ref(o: &proto::StoreObject) -> crate::ids::ObjectRef {
    crate::ids::ObjectRef {
        endpoint: crate::ids::EndpointId::new(&o.endpoint),
        key: crate::ids::ObjectKey::new(&o.key),
        size: o.size,
    }
}

pub fn object_msg(o: &crate::ids::ObjectRef) -> proto::StoreObject {
    proto::StoreObject {
        endpoint: o.endpoint.as_str().to_string(),
        key: o.key.as_str().to_string(),
        size: o.size,
    }
}

pub fn partition_info_from(p: &proto::PartitionInfo) -> crate::model::PartitionInfo {
    use crate::ids::{BrokerId, Epoch};
    crate::model::PartitionInfo {
        partition: p.partition,
        owner: BrokerId::from_wire(p.owner),
        epoch: Epoch(p.epoch),
        log_start_offset: p.log_start_offset,
        high_watermark: p.high_watermark,
        handover_to: BrokerId::from_wire(p.handover_to),
        stored_bytes: p.stored_bytes,
    }
}

pub fn topic_info_from(t: proto::TopicInfo) -> Result<crate::model::TopicInfo, MetaError> {
    Ok(crate::model::TopicInfo {
        id: topic_id(&t.topic_id)?,
        partition_count: t.partition_count,
        partitions: t.partitions.iter().map(partition_info_from).collect(),
        configs: t
            .configs
            .into_iter()
            .map(|c| crate::model::ConfigEntry {
                name: c.name,
                value: c.value,
                is_default: c.is_default,
            })
            .collect(),
        name: t.name,
    })
}

pub fn cluster_view_from(v: proto::ClusterView) -> Result<crate::model::ClusterView, MetaError> {
    use crate::ids::{BrokerId, Epoch, Revision, ShardId};
    use crate::model::{NodeInfo, ShardInfo};
    let mut topics = Vec::with_capacity(v.topics.len());
    for t in v.topics {
        match topic_info_from(t) {
            Ok(t) => topics.push(t),
            Err(e) => tracing::warn!(error = %e, "topic with a bad id in the view"),
        }
    }
    let nodes = v
        .nodes
        .into_iter()
        .filter_map(|n| {
            Some(NodeInfo {
                id: BrokerId(n.id),
                kind: node_kind(&n.kind)?,
                state: node_state_from(&n.state),
                addr: n.addr,
            })
        })
        .collect();
    let quotas = super::quota_routes::quota_model(&v.quotas);
    let scram = super::scram_routes::scram_model(&v.scram);
    let acls = (!v.acls_unchanged).then(|| super::acl_routes::model(&v.acls));
    Ok(crate::model::ClusterView {
        revision: Revision(v.revision),
        unchanged: v.unchanged,
        partial: v.partial,
        deleted_topics: v
            .deleted_topic_ids
            .iter()
            .filter_map(|id| topic_id(id).ok())
            .collect(),
        nodes,
        topics,
        quotas,
        scram,
        acls,
        shards: v
            .shards
            .iter()
            .map(|s| ShardInfo {
                shard: ShardId(s.shard),
                owner: BrokerId::from_wire(s.owner),
                epoch: Epoch(s.epoch),
                handover_to: BrokerId::from_wire(s.handover_to),
            })
            .collect(),
    })
}

pub fn partition_index_from(
    partition: PartitionKey,
    r: proto::IndexResponse,
) -> Result<crate::model::PartitionIndex, MetaError> {
    let info = r
        .info
        .as_ref()
        .map(partition_info_from)
        .ok_or_else(|| malformed("an index without the partition's state"))?;
    let entries = r
        .entries
        .iter()
        .map(|e| {
            let object = e.object.as_ref().ok_or_else(|| {
                malformed(&format!(
                    "{partition}: committed range {}..={} without its object",
                    e.first_offset, e.last_offset
                ))
            })?;
            Ok(crate::model::IndexEntry {
                first_offset: e.first_offset,
                last_offset: e.last_offset,
                max_timestamp: e.max_timestamp,
                object_id: crate::ids::ObjectId(e.object_id),
                object: object_ref(object),
                byte_start: e.byte_start,
                byte_len: e.byte_len,
            })
        })
        .collect::<Result<_, MetaError>>()?;
    let producers = r
        .producers
        .iter()
        .map(producer_batch)
        .collect::<Result<_, _>>()
        .map_err(|e| malformed(&e.to_string()))?;
    Ok(crate::model::PartitionIndex {
        info,
        entries,
        producers,
        txns: super::txn_routes::partition_txns(&r)?,
    })
}

pub fn commit_range_msg(r: &crate::command::CommitRange) -> proto::CommitRange {
    proto::CommitRange {
        partition: Some(partition_msg(&r.partition)),
        epoch: r.epoch.0,
        first_offset: r.first_offset,
        last_offset: r.last_offset,
        max_timestamp: r.max_timestamp,
        object_id: match r.object {
            crate::command::ObjectSel::New => 0,
            crate::command::ObjectSel::Existing(id) => id.0,
        },
        byte_start: r.byte_start,
        byte_len: r.byte_len,
        producers: r.producers.iter().map(producer_batch_msg).collect(),
    }
}

pub fn commit_msg(c: &crate::model::Commit) -> proto::CommitRequest {
    proto::CommitRequest {
        broker: c.broker.0,
        object: Some(object_msg(&c.object)),
        ranges: c.ranges.iter().map(commit_range_msg).collect(),
        txns: Vec::new(),
    }
}

pub fn commit_outcome(r: proto::CommitResponse) -> Result<crate::model::CommitOutcome, MetaError> {
    Ok(crate::model::CommitOutcome {
        object: crate::ids::ObjectId(r.object_id),
        high_watermarks: r
            .high_watermarks
            .iter()
            .map(|h| Ok((partition(h.partition.as_ref())?, h.high_watermark)))
            .collect::<Result<_, MetaError>>()?,
        revision: crate::ids::Revision(r.revision),
    })
}

pub fn unreferenced_from(
    e: proto::ObjectEntry,
) -> Result<crate::model::UnreferencedObject, MetaError> {
    let o = e
        .object
        .as_ref()
        .ok_or_else(|| malformed("an object entry without its object"))?;
    Ok(crate::model::UnreferencedObject {
        id: crate::ids::ObjectId(e.id),
        object: object_ref(o),
    })
}

/// A group's committed offset of one partition as the API carries it.
pub fn group_offset_msg(
    topic: &str,
    partition: u32,
    o: &crate::command::CommittedOffset,
) -> proto::GroupOffset {
    proto::GroupOffset {
        topic: topic.to_string(),
        partition,
        offset: o.offset,
        leader_epoch: o.leader_epoch,
        metadata: o.metadata.clone(),
    }
}

/// A group's committed offset of one partition read from the API.
pub fn group_offset(o: proto::GroupOffset) -> (String, u32, crate::command::CommittedOffset) {
    (
        o.topic,
        o.partition,
        crate::command::CommittedOffset {
            offset: o.offset,
            leader_epoch: o.leader_epoch,
            metadata: o.metadata,
        },
    )
}

/// Offsets not stored because their (topic, partition) does not exist:
/// only topic and partition are set.
pub fn unknown_offsets_msg(unknown: &[(String, u32)]) -> Vec<proto::GroupOffset> {
    unknown
        .iter()
        .map(|(topic, partition)| proto::GroupOffset {
            topic: topic.clone(),
            partition: *partition,
            ..Default::default()
        })
        .collect()
}
