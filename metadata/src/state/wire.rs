//! How [`ClusterState`] is serialized in snapshots: as the flat struct of
//! earlier versions, whose fields are the concerns' fields side by side, in
//! their order then (postcard writes a struct as its fields in order, with
//! no names; JSON snapshots of older versions are still read). Fields added
//! since the first release come last with a default, so that an older
//! JSON snapshot lacking them reads; older binary layouts are read by
//! `raft::state_machine`'s `decode_applied`.
//!
//! Serializing goes through [`FlatRef`], which borrows every field (nothing
//! is cloned but the nodes' death times); deserializing reads a [`Flat`]
//! and moves its fields into the concerns.
//!
//! A node's record ([`NodeInfo`]) keeps the layout of the first release: it
//! sits inside a map early in the struct, where a field added to it would
//! make every older snapshot unreadable. What was added to nodes since
//! (the highest id given, when each dead node died) comes last, as fields
//! of their own.

use std::collections::BTreeMap;

use imbl::OrdMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{
    BrokerConfigsState, ClusterState, GroupOffsets, GroupsState, NodeInfo, NodesState, ObjectInfo,
    Ownership, PartitionState, ProducersState, SecurityState, Topic, TopicsState,
};
use crate::ids::{BrokerId, ObjectId, PartitionKey, Revision, ShardId};

/// The snapshot layout of [`ClusterState`], owned: what is read.
#[derive(Debug, Deserialize)]
#[serde(rename = "ClusterState")]
pub(crate) struct Flat {
    pub revision: Revision,
    pub nodes: BTreeMap<BrokerId, NodeInfo>,
    pub topics: OrdMap<String, Topic>,
    #[serde(with = "crate::serde_pairs")]
    pub partitions: OrdMap<PartitionKey, PartitionState>,
    pub objects: OrdMap<ObjectId, ObjectInfo>,
    pub next_object_id: u64,
    pub groups: BTreeMap<String, GroupOffsets>,
    pub next_producer_id: i64,
    pub shards: BTreeMap<ShardId, Ownership>,
    /// The transaction coordinators' state. Absent from snapshots of older
    /// versions (see `raft::state_machine`, `decode_applied`).
    #[serde(default)]
    pub txn: crate::txn::TxnModel,
    /// Client quotas. Absent from snapshots of older versions.
    #[serde(default)]
    pub quotas: crate::quota::QuotaModel,
    /// Groups' configs. Absent from snapshots of older versions.
    #[serde(default)]
    pub group_configs: BTreeMap<String, crate::group_config::GroupConfigs>,
    /// Classic groups' stored membership. Absent from snapshots of older
    /// versions.
    #[serde(default)]
    pub group_records: BTreeMap<String, Vec<u8>>,
    /// SCRAM credentials. Absent from snapshots of older versions.
    #[serde(default)]
    pub scram: crate::scram::ScramModel,
    /// ACLs. Absent from snapshots of older versions.
    #[serde(default)]
    pub acls: crate::acl::AclModel,
    /// Dynamic broker configs. Absent from snapshots of older versions.
    #[serde(default)]
    pub broker_configs: BTreeMap<String, crate::broker_config::BrokerConfigs>,
    /// The highest node id ever registered or given
    /// ([`NodesState::highest_id`]). Absent from snapshots of older
    /// versions, which removed no node: the highest id on record then.
    #[serde(default)]
    pub highest_node_id: BrokerId,
    /// When each dead node was found dead ([`NodeInfo::dead_since_ms`]).
    /// Absent from snapshots of older versions: their dead nodes are
    /// stamped by the next sweep.
    #[serde(default)]
    pub node_deaths: BTreeMap<BrokerId, u64>,
    /// Topics' Iceberg tables. Absent from snapshots of older versions.
    #[serde(default)]
    pub tables: BTreeMap<crate::ids::TopicId, crate::table::TableState>,
}

/// The snapshot layout of [`ClusterState`], borrowed: what is written.
/// The same fields as [`Flat`], in the same order, with the same
/// attributes.
#[derive(Serialize)]
#[serde(rename = "ClusterState")]
struct FlatRef<'a> {
    revision: &'a Revision,
    nodes: &'a BTreeMap<BrokerId, NodeInfo>,
    topics: &'a OrdMap<String, Topic>,
    #[serde(serialize_with = "pairs")]
    partitions: &'a OrdMap<PartitionKey, PartitionState>,
    objects: &'a OrdMap<ObjectId, ObjectInfo>,
    next_object_id: &'a u64,
    groups: &'a BTreeMap<String, GroupOffsets>,
    next_producer_id: &'a i64,
    shards: &'a BTreeMap<ShardId, Ownership>,
    txn: &'a crate::txn::TxnModel,
    quotas: &'a crate::quota::QuotaModel,
    group_configs: &'a BTreeMap<String, crate::group_config::GroupConfigs>,
    group_records: &'a BTreeMap<String, Vec<u8>>,
    scram: &'a crate::scram::ScramModel,
    acls: &'a crate::acl::AclModel,
    broker_configs: &'a BTreeMap<String, crate::broker_config::BrokerConfigs>,
    highest_node_id: &'a BrokerId,
    node_deaths: BTreeMap<BrokerId, u64>,
    tables: &'a BTreeMap<crate::ids::TopicId, crate::table::TableState>,
}

/// [`crate::serde_pairs`] through the borrow.
fn pairs<K: Serialize + Ord, V: Serialize, S: Serializer>(
    map: &&OrdMap<K, V>,
    s: S,
) -> Result<S::Ok, S::Error> {
    crate::serde_pairs::serialize(*map, s)
}

impl<'a> From<&'a ClusterState> for FlatRef<'a> {
    fn from(s: &'a ClusterState) -> Self {
        FlatRef {
            revision: &s.revision,
            nodes: &s.nodes.by_id,
            topics: &s.topics.by_name,
            partitions: &s.topics.partitions,
            objects: &s.topics.objects,
            next_object_id: &s.topics.next_object_id,
            groups: &s.groups.offsets,
            next_producer_id: &s.producers.next_id,
            shards: &s.topics.shards,
            txn: &s.producers.txn,
            quotas: &s.quotas,
            group_configs: &s.groups.configs,
            group_records: &s.groups.records,
            scram: &s.security.scram,
            acls: &s.security.acls,
            broker_configs: &s.broker_configs.by_resource,
            highest_node_id: &s.nodes.highest_id,
            node_deaths: s
                .nodes
                .by_id
                .values()
                .filter_map(|n| n.dead_since_ms.map(|t| (n.id, t)))
                .collect(),
            tables: &s.topics.tables,
        }
    }
}

impl From<Flat> for ClusterState {
    fn from(f: Flat) -> Self {
        ClusterState {
            revision: f.revision,
            nodes: nodes_of(f.nodes, f.highest_node_id, &f.node_deaths),
            topics: TopicsState {
                by_name: f.topics,
                partitions: f.partitions,
                object_keys: super::topics::object_keys::ObjectKeys::build(&f.objects),
                objects: f.objects,
                next_object_id: f.next_object_id,
                shards: f.shards,
                tables: f.tables,
            },
            groups: GroupsState {
                offsets: f.groups,
                configs: f.group_configs,
                records: f.group_records,
            },
            producers: ProducersState {
                next_id: f.next_producer_id,
                txn: f.txn,
            },
            quotas: f.quotas,
            security: SecurityState {
                scram: f.scram,
                acls: f.acls,
            },
            broker_configs: BrokerConfigsState {
                by_resource: f.broker_configs,
            },
            placement: Default::default(),
        }
    }
}

/// The nodes' state from their snapshot fields: each dead node's death
/// time put back in its record, and the highest id given at least the
/// highest on record (an older snapshot has none).
fn nodes_of(
    mut by_id: BTreeMap<BrokerId, NodeInfo>,
    highest_id: BrokerId,
    deaths: &BTreeMap<BrokerId, u64>,
) -> NodesState {
    for (id, n) in by_id.iter_mut() {
        if n.state == super::NodeState::Dead {
            n.dead_since_ms = deaths.get(id).copied();
        }
    }
    let highest_id = by_id
        .keys()
        .next_back()
        .map_or(highest_id, |last| highest_id.max(*last));
    NodesState { by_id, highest_id }
}

impl Serialize for ClusterState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        FlatRef::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for ClusterState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Flat::deserialize(d).map(ClusterState::from)
    }
}

#[cfg(test)]
mod tests;
