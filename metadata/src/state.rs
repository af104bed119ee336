//! The cluster model and the deterministic `apply` of commands to it. This is
//! the Raft state machine's content: every node applies the same log to it
//! and ends in the same state.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

#[cfg(test)]
use crate::command::ProducerBatch;
use crate::command::{
    Command, CommitRange, CommittedOffset, NewObject, NodeKind, ObjectSel, OwnedItem,
    OwnershipChange, Response,
};
use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch, ObjectId, PartitionKey, Revision, ShardId, TopicId};
use crate::topic_config::TopicConfig;

/// Coordinator shards of a new cluster.
pub const DEFAULT_SHARDS: u32 = 16;
/// Most partitions a topic may have.
pub const MAX_PARTITIONS: u32 = 10_000;
/// Default of `producer.id.expiration.ms`: a day, as Kafka.
pub const DEFAULT_PRODUCER_EXPIRATION_MS: u64 = 86_400_000;
/// The id a proxy or a broker registers with to be given one
/// ([`Command::RegisterNode`]).
pub const UNASSIGNED_ID: BrokerId = BrokerId(0);
/// The lowest id the metadata gives a proxy or a broker (as Kafka's
/// generated broker ids start above `reserved.broker.max.id`, 1000): below
/// it, ids are left to brokers and proxies that name their own.
pub const FIRST_PROXY_ID: u32 = 1001;
/// Most producer ids one allocation hands out.
pub const MAX_PRODUCER_ID_BLOCK: u32 = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeState {
    Live,
    Draining,
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: BrokerId,
    pub kind: NodeKind,
    pub addr: String,
    pub lease_ms: u64,
    pub lease_until_ms: u64,
    pub state: NodeState,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topic {
    pub name: String,
    pub id: TopicId,
    pub partitions: u32,
    pub config: TopicConfig,
}

/// Who owns a partition or shard, and since which epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Ownership {
    pub owner: Option<BrokerId>,
    pub epoch: Epoch,
    /// A hand-over in progress: the owner is asked to finish what it has in
    /// flight and release, after which `to` owns it at the next epoch.
    #[serde(default)]
    pub handover: Option<Handover>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handover {
    pub to: BrokerId,
    pub since_ms: u64,
}

impl Ownership {
    /// A new owner (or none) at the next epoch, with no hand-over pending.
    pub fn moved_to(self, owner: Option<BrokerId>) -> Ownership {
        Ownership {
            owner,
            epoch: Epoch(self.epoch.0.saturating_add(1)),
            handover: None,
        }
    }
}

/// One entry of a partition's committed log index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub object: ObjectId,
    pub byte_start: u64,
    pub byte_len: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PartitionState {
    pub ownership: Ownership,
    pub log_start_offset: i64,
    /// Committed end: the offset after the last committed record.
    pub high_watermark: i64,
    pub index: Vec<IndexEntry>,
    /// Idempotent producers that wrote here: their epoch and last batches.
    #[serde(default)]
    pub producers: BTreeMap<i64, ProducerState>,
    /// What the indexer has exported.
    #[serde(default)]
    pub export: crate::export::ExportState,
}

impl PartitionState {
    /// Bytes of the committed ranges that hold records from the log start
    /// on (a range that straddles the log start counts whole, as a Kafka
    /// segment does until it is deleted).
    pub fn stored_bytes(&self) -> u64 {
        self.index
            .iter()
            .filter(|e| e.last_offset >= self.log_start_offset)
            .map(|e| e.byte_len)
            .sum()
    }
}

/// Batches an idempotent producer's partition log remembers (as Kafka: five,
/// a client's most requests in flight with idempotence). The partition's
/// owner keeps the same number (`floe_broker::producer`), so a new owner
/// rebuilt from this state recognises the same retries.
pub const PRODUCER_BATCHES_KEPT: usize = 5;

/// What a partition remembers of one idempotent producer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ProducerState {
    pub epoch: i16,
    /// The last batches at `epoch`, oldest first, at most [`PRODUCER_BATCHES_KEPT`].
    pub batches: Vec<crate::command::ProducerBatch>,
    /// When it last wrote here (the commit's time); 0: not known yet.
    #[serde(default)]
    pub last_write_ms: u64,
}

impl ProducerState {
    /// Records a committed batch at `now_ms` (a newer epoch starts over).
    pub fn record(&mut self, b: crate::command::ProducerBatch, now_ms: u64) {
        self.last_write_ms = self.last_write_ms.max(now_ms);
        if b.epoch != self.epoch {
            self.epoch = b.epoch;
            self.batches.clear();
        }
        self.batches.push(b);
        if self.batches.len() > PRODUCER_BATCHES_KEPT {
            self.batches.remove(0);
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectInfo {
    pub endpoint: String,
    pub key: String,
    pub size: u64,
    /// Index entries that point into this object.
    pub refs: u64,
}

/// A group's committed offsets by (topic name, partition).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GroupOffsets(
    #[serde(with = "crate::serde_pairs")] pub BTreeMap<(String, u32), CommittedOffset>,
);

impl std::ops::Deref for GroupOffsets {
    type Target = BTreeMap<(String, u32), CommittedOffset>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for GroupOffsets {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// The whole model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    pub revision: Revision,
    pub nodes: BTreeMap<BrokerId, NodeInfo>,
    pub topics: BTreeMap<String, Topic>,
    #[serde(with = "crate::serde_pairs")]
    pub partitions: BTreeMap<PartitionKey, PartitionState>,
    pub objects: BTreeMap<ObjectId, ObjectInfo>,
    pub next_object_id: u64,
    pub groups: BTreeMap<String, GroupOffsets>,
    pub next_producer_id: i64,
    pub shards: BTreeMap<ShardId, Ownership>,
    /// The transaction coordinators' state. Last, and absent from
    /// snapshots of older versions (see `raft::state_machine`,
    /// `decode_applied`).
    #[serde(default)]
    pub txn: crate::txn::TxnModel,
    /// Client quotas ([`crate::quota`]). Absent from snapshots
    /// of older versions (see `raft::state_machine`, `decode_applied`).
    #[serde(default)]
    pub quotas: crate::quota::QuotaModel,
    /// Groups' configs (those with any set), by group id. Last, and absent
    /// from snapshots of older versions (see `raft::state_machine`).
    #[serde(default)]
    pub group_configs: BTreeMap<String, crate::group_config::GroupConfigs>,
    /// Classic groups' membership as their coordinators stored it, by
    /// group id (see [`Command::StoreGroup`]): only groups with members
    /// have one. Last, and absent from snapshots of older versions.
    #[serde(default)]
    pub group_records: BTreeMap<String, Vec<u8>>,
    /// Users' SCRAM credentials ([`crate::scram`]). Last, and absent from
    /// snapshots of older versions.
    #[serde(default)]
    pub scram: crate::scram::ScramModel,
    /// The ACLs ([`crate::acl`]). Last, and absent from snapshots of older
    /// versions.
    #[serde(default)]
    pub acls: crate::acl::AclModel,
    /// Dynamic broker configs ([`crate::broker_config`]) by broker
    /// resource name (an id, or empty for every broker): only those with
    /// any set. Last, and absent from snapshots of older versions.
    #[serde(default)]
    pub broker_configs: BTreeMap<String, crate::broker_config::BrokerConfigs>,
}

impl Default for ClusterState {
    fn default() -> Self {
        Self {
            revision: Revision(0),
            nodes: BTreeMap::new(),
            topics: BTreeMap::new(),
            partitions: BTreeMap::new(),
            objects: BTreeMap::new(),
            next_object_id: 1,
            groups: BTreeMap::new(),
            next_producer_id: 1000,
            shards: (0..DEFAULT_SHARDS)
                .map(|i| (ShardId(i), Ownership::default()))
                .collect(),
            txn: crate::txn::TxnModel::default(),
            quotas: crate::quota::QuotaModel::default(),
            group_configs: BTreeMap::new(),
            group_records: BTreeMap::new(),
            scram: crate::scram::ScramModel::default(),
            acls: crate::acl::AclModel::default(),
            broker_configs: BTreeMap::new(),
        }
    }
}

fn err(e: MetaError) -> Response {
    Response::Error(e)
}

/// Kafka's rule for topic names (the one validator, in `floe-types`).
pub fn validate_topic_name(name: &str) -> Result<(), MetaError> {
    floe_types::validate_topic_name(name).map_err(|e| MetaError::InvalidRequest(e.to_string()))
}

impl ClusterState {
    /// Applies one command at Raft log index `revision`.
    pub fn apply(&mut self, revision: Revision, cmd: &Command) -> Response {
        self.revision = revision;
        match cmd {
            Command::Batch(cmds) => {
                Response::Batch(cmds.iter().map(|c| self.apply(revision, c)).collect())
            }
            Command::RegisterNode {
                id,
                kind,
                addr,
                now_ms,
                lease_ms,
            } => self.register(*id, *kind, addr, *now_ms, *lease_ms),
            Command::Heartbeat { id, now_ms } => match self.nodes.get_mut(id) {
                Some(n) if n.state != NodeState::Dead => {
                    n.lease_until_ms = now_ms.saturating_add(n.lease_ms);
                    Response::Ok
                }
                _ => err(MetaError::UnknownBroker(*id)),
            },
            Command::Drain { id } => match self.nodes.get_mut(id) {
                Some(n) if n.state == NodeState::Live => {
                    n.state = NodeState::Draining;
                    Response::Ok
                }
                Some(_) => Response::Ok,
                None => err(MetaError::UnknownBroker(*id)),
            },
            Command::ExpireLeases { now_ms } => self.expire(*now_ms),
            Command::NodeDown { id, addr } => {
                let down = self.nodes.get(id).is_some_and(|n| {
                    n.kind == NodeKind::Broker && n.state != NodeState::Dead && n.addr == *addr
                });
                if down {
                    self.mark_dead(*id);
                }
                Response::Expired {
                    nodes: if down { vec![*id] } else { Vec::new() },
                }
            }
            Command::Reassign { changes } => self.reassign(changes),
            Command::BeginHandover { changes, now_ms } => self.begin_handover(changes, *now_ms),
            Command::Release { broker, items } => self.release(*broker, items),
            Command::TruncateLog {
                broker,
                partition,
                epoch,
                log_start_offset,
            } => self.truncate_log(*broker, *partition, *epoch, *log_start_offset),
            Command::ShareState {
                broker,
                partition,
                epoch,
                group,
                state,
            } => self.share_state(*broker, *partition, *epoch, group, state),
            Command::StoreGroup {
                fence,
                group,
                record,
            } => self.store_group(fence, group, record.as_deref()),
            Command::ForgetShareState {
                broker,
                partition,
                epoch,
                group,
            } => self.forget_share_state(*broker, *partition, *epoch, group),
            Command::ReplaceRanges {
                broker,
                partition,
                epoch,
                first_offset,
                last_offset,
                max_timestamp,
                object,
            } => self.replace_ranges(
                *broker,
                *partition,
                *epoch,
                (*first_offset, *last_offset, *max_timestamp),
                object,
            ),
            Command::ExportBegin {
                partition,
                generation,
                file,
            } => match self.partitions.get_mut(partition) {
                None => err(MetaError::UnknownPartition(*partition)),
                Some(p) => {
                    let (log_start, hw) = (p.log_start_offset, p.high_watermark);
                    match p.export.begin(*generation, file.clone(), log_start, hw) {
                        Ok(()) => Response::Ok,
                        Err(e) => err(e),
                    }
                }
            },
            Command::ExportCommit {
                partition,
                generation,
                file,
            } => match self.partitions.get_mut(partition) {
                None => err(MetaError::UnknownPartition(*partition)),
                Some(p) => match p.export.commit(*generation, file.clone()) {
                    Ok(()) => Response::Ok,
                    Err(e) => err(e),
                },
            },
            Command::ExportForget {
                partition,
                generation,
                keys,
            } => match self.partitions.get_mut(partition) {
                None => err(MetaError::UnknownPartition(*partition)),
                Some(p) => match p.export.forget(*generation, keys) {
                    Ok(()) => Response::Ok,
                    Err(e) => err(e),
                },
            },
            Command::ExportReset { topic } => self.reset_exports(topic),
            Command::CreateTopic {
                name,
                id,
                partitions,
                config,
            } => self.create_topic(name, *id, *partitions, config),
            Command::DeleteTopic { name } => self.delete_topic(name),
            Command::AlterTopicConfig { name, set, delete } => match self.topics.get_mut(name) {
                None => err(MetaError::UnknownTopic(name.clone())),
                Some(t) => match t.config.alter(set, delete) {
                    Ok(()) => Response::Ok,
                    Err(e) => err(e),
                },
            },
            Command::CreatePartitions { name, total } => self.create_partitions(name, *total),
            Command::Commit {
                broker,
                object,
                ranges,
                now_ms,
            } => self.commit(*broker, object.as_ref(), ranges, *now_ms),
            Command::CommitOffsets {
                group,
                offsets,
                fence,
            } => self.commit_offsets(group, offsets, fence.as_ref()),
            Command::ExpireProducers {
                now_ms,
                expiration_ms,
            } => {
                self.expire_producers(*now_ms, *expiration_ms);
                Response::Ok
            }
            Command::DeleteGroups { groups } => {
                for g in groups {
                    self.delete_group(g);
                }
                Response::Ok
            }
            Command::DeleteOffsets { group, partitions } => {
                self.delete_offsets(group, partitions.iter().cloned());
                Response::Ok
            }
            Command::DeleteOffsetsFenced {
                group,
                partitions,
                fence,
            } => match self.check_group_fence(group, fence) {
                Ok(()) => {
                    self.delete_offsets(group, partitions.iter().cloned());
                    Response::Ok
                }
                Err(e) => err(e),
            },
            Command::DeleteGroupFenced { group, fence } => {
                match self.check_group_fence(group, fence) {
                    Ok(()) => {
                        self.delete_group(group);
                        Response::Ok
                    }
                    Err(e) => err(e),
                }
            }
            Command::AllocateProducerIds { count } => {
                if *count == 0 || *count > MAX_PRODUCER_ID_BLOCK {
                    return err(MetaError::InvalidRequest(format!(
                        "producer id block of {count} (1 to {MAX_PRODUCER_ID_BLOCK})"
                    )));
                }
                let first = self.next_producer_id;
                let Some(next) = first.checked_add(*count as i64) else {
                    return err(MetaError::InvalidRequest("producer ids exhausted".into()));
                };
                self.next_producer_id = next;
                Response::ProducerIds {
                    first,
                    count: *count,
                }
            }
            Command::Txn(c) => self.apply_txn(c),
            Command::AlterClientQuotas { alterations } => match self.quotas.alter(alterations) {
                Ok(()) => Response::Ok,
                Err(e) => err(e),
            },
            Command::AlterScramCredentials(a) => match self.scram.alter(a) {
                Ok(()) => Response::Ok,
                Err(e) => err(e),
            },
            Command::CreateAcls(bindings) => {
                let before = self.acls.bindings.len();
                match self.acls.create(bindings) {
                    Ok(()) => {
                        if self.acls.bindings.len() != before {
                            self.acls.changed_at(revision.0);
                        }
                        Response::Ok
                    }
                    Err(e) => err(e),
                }
            }
            Command::DeleteAcls(filters) => {
                let gone = self.acls.delete(filters);
                if gone.iter().any(|g| !g.is_empty()) {
                    self.acls.changed_at(revision.0);
                }
                Response::AclsDeleted(gone)
            }
            Command::ExpireTransactionalIds {
                now_ms,
                expiration_ms,
            } => {
                self.txn.expire_ids(*now_ms, *expiration_ms);
                Response::Ok
            }
            Command::CommitWithTxns {
                broker,
                object,
                ranges,
                now_ms,
                txns,
            } => self.commit_with_txns(*broker, object.as_ref(), ranges, *now_ms, txns),
            Command::AlterGroupConfig { group, set, delete } => {
                self.alter_group_config(group, set, delete)
            }
            Command::AlterBrokerConfig {
                broker,
                set,
                delete,
            } => self.alter_broker_config(broker, set, delete),
            Command::ForgetObjects { ids } => {
                for id in ids {
                    if self.objects.get(id).is_some_and(|o| o.refs == 0) {
                        self.objects.remove(id);
                    }
                }
                Response::Ok
            }
        }
    }

    /// Stores offsets of existing partitions through the group's current
    /// coordinator; others are reported as unknown and not stored.
    fn commit_offsets(
        &mut self,
        group: &str,
        offsets: &[(String, u32, CommittedOffset)],
        fence: Option<&crate::command::ShardFence>,
    ) -> Response {
        if group.is_empty() {
            return err(MetaError::InvalidRequest("empty group id".into()));
        }
        if crate::command::is_reserved_group(group) {
            return err(MetaError::InvalidRequest(format!(
                "group id {group} is reserved for Floe's own use"
            )));
        }
        if let Some(f) = fence
            && let Err(e) = self.check_fence(f)
        {
            return err(e);
        }
        let exists = |topic: &str, partition: u32| {
            self.topics
                .get(topic)
                .is_some_and(|t| partition < t.partitions)
        };
        let (known, unknown): (Vec<_>, Vec<_>) =
            offsets.iter().partition(|(t, p, _)| exists(t, *p));
        if !known.is_empty() {
            let g = self.groups.entry(group.to_string()).or_default();
            for (topic, partition, off) in known {
                g.insert((topic.clone(), *partition), off.clone());
            }
        }
        Response::OffsetsCommitted {
            unknown: unknown
                .into_iter()
                .map(|(t, p, _)| (t.clone(), *p))
                .collect(),
        }
    }

    /// Stores (or forgets) a classic group's membership, from the
    /// coordinator of the group's shard (see [`Command::StoreGroup`]).
    fn store_group(
        &mut self,
        fence: &crate::command::ShardFence,
        group: &str,
        record: Option<&[u8]>,
    ) -> Response {
        if group.is_empty() {
            return err(MetaError::InvalidRequest("empty group id".into()));
        }
        if let Err(e) = self.check_group_fence(group, fence) {
            return err(e);
        }
        match record {
            Some(r) => {
                self.group_records.insert(group.to_string(), r.to_vec());
            }
            None => {
                self.group_records.remove(group);
            }
        }
        Response::Ok
    }

    /// Refuses a coordinator's write of `group` through another shard than
    /// the group's, or at a shard it does not own at the epoch it gave.
    fn check_group_fence(
        &self,
        group: &str,
        fence: &crate::command::ShardFence,
    ) -> Result<(), MetaError> {
        let shards = u32::try_from(self.shards.len()).unwrap_or(u32::MAX);
        let shard = crate::txn::shard_of(group, shards);
        if shard != fence.shard.0 {
            return Err(MetaError::InvalidRequest(format!(
                "group {group} is in shard {shard}, not {}",
                fence.shard
            )));
        }
        self.check_fence(fence)
    }

    /// Forgets a group: its committed offsets and its stored membership.
    fn delete_group(&mut self, group: &str) {
        self.groups.remove(group);
        self.group_records.remove(group);
    }

    /// Refuses a coordinator that does not own its shard at the epoch it gave.
    pub(crate) fn check_fence(&self, f: &crate::command::ShardFence) -> Result<(), MetaError> {
        let current = self.shards.get(&f.shard).copied().unwrap_or_default();
        if current.owner != Some(f.broker) || current.epoch != f.epoch {
            return Err(MetaError::StaleCoordinator {
                shard: f.shard,
                broker: f.broker,
                given: f.epoch,
                owner: current.owner,
                current: current.epoch,
            });
        }
        Ok(())
    }

    /// Drops producers that have not written for more than `expiration_ms`.
    fn expire_producers(&mut self, now_ms: u64, expiration_ms: u64) {
        for p in self.partitions.values_mut() {
            p.producers.retain(|_, st| {
                if st.last_write_ms == 0 {
                    st.last_write_ms = now_ms;
                }
                now_ms.saturating_sub(st.last_write_ms) <= expiration_ms
            });
        }
    }

    fn alter_group_config(
        &mut self,
        group: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Response {
        if let Err(e) = crate::group_config::check_group_id(group) {
            return err(e);
        }
        let mut configs = self.group_configs.get(group).cloned().unwrap_or_default();
        if let Err(e) = configs.alter(set, delete) {
            return err(e);
        }
        if configs.is_empty() {
            self.group_configs.remove(group);
        } else {
            self.group_configs.insert(group.to_string(), configs);
        }
        Response::Ok
    }

    fn alter_broker_config(
        &mut self,
        broker: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Response {
        if let Err(e) = crate::broker_config::check_resource(broker) {
            return err(e);
        }
        let mut configs = self.broker_configs.get(broker).cloned().unwrap_or_default();
        if let Err(e) = configs.alter(set, delete) {
            return err(e);
        }
        if configs.is_empty() {
            self.broker_configs.remove(broker);
        } else {
            self.broker_configs.insert(broker.to_string(), configs);
        }
        Response::Ok
    }

    /// Whether [`Command::ExpireProducers`] at `now_ms` would change anything.
    pub fn producers_to_expire(&self, now_ms: u64, expiration_ms: u64) -> bool {
        self.partitions.values().any(|p| {
            p.producers.values().any(|st| {
                st.last_write_ms == 0 || now_ms.saturating_sub(st.last_write_ms) > expiration_ms
            })
        })
    }

    /// Registers a node (again): live, with a lease from `now_ms`. An id
    /// is one node's, of one kind: a broker and a proxy cannot share it.
    /// A node may ask for [`UNASSIGNED_ID`]: it gets the next id above
    /// every id registered so far and at least [`FIRST_PROXY_ID`], never
    /// one an earlier node had (a paused node's heartbeats cannot renew a
    /// newer node's lease). Brokers of a Kubernetes Deployment, whose pods
    /// have no ordinal, ask so.
    fn register(
        &mut self,
        id: BrokerId,
        kind: NodeKind,
        addr: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Response {
        let id = if id == UNASSIGNED_ID {
            let above = self.nodes.keys().next_back().map_or(0, |b| b.0);
            BrokerId(above.saturating_add(1).max(FIRST_PROXY_ID))
        } else {
            id
        };
        if let Some(n) = self.nodes.get(&id)
            && n.kind != kind
        {
            return err(MetaError::InvalidRequest(format!(
                "node id {id} is already a {} id",
                match n.kind {
                    NodeKind::Broker => "broker",
                    NodeKind::Proxy => "proxy",
                }
            )));
        }
        // A broker registering while still on record as alive is a new
        // process of it (restarted within its lease): see `restarted`.
        let restarted = kind == NodeKind::Broker
            && self
                .nodes
                .get(&id)
                .is_some_and(|n| n.state != NodeState::Dead);
        self.nodes.insert(
            id,
            NodeInfo {
                id,
                kind,
                addr: addr.to_string(),
                lease_ms,
                lease_until_ms: now_ms.saturating_add(lease_ms),
                state: NodeState::Live,
            },
        );
        if restarted {
            self.restarted(id);
        }
        Response::Registered { id }
    }

    /// A broker's new process keeps what the previous one owned, at the
    /// next epoch: as a restarted Kafka broker leads its partitions at a new
    /// leader epoch, clients see the change (KIP-320: a consumer validates
    /// its position) and a commit the previous process still sends is
    /// refused. Hand-overs to or from it are called off (the new process
    /// knows of none; the controller plans them again).
    fn restarted(&mut self, id: BrokerId) {
        self.move_everything_of(id, Some(id));
    }

    fn expire(&mut self, now_ms: u64) -> Response {
        let expired: Vec<BrokerId> = self
            .nodes
            .values()
            .filter(|n| n.state != NodeState::Dead && n.lease_until_ms < now_ms)
            .map(|n| n.id)
            .collect();
        for id in &expired {
            self.mark_dead(*id);
        }
        Response::Expired { nodes: expired }
    }

    /// Marks a node dead: what it owned loses its owner at the next epoch
    /// (fencing any commit it still sends), hand-overs to it are called off.
    fn mark_dead(&mut self, id: BrokerId) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.state = NodeState::Dead;
        }
        self.move_everything_of(id, None);
    }

    /// Every partition and shard `id` owns goes to `owner` at the next
    /// epoch; hand-overs to `id` are called off.
    fn move_everything_of(&mut self, id: BrokerId, owner: Option<BrokerId>) {
        let slots = self
            .partitions
            .values_mut()
            .map(|p| &mut p.ownership)
            .chain(self.shards.values_mut());
        for o in slots {
            if o.owner == Some(id) {
                *o = o.moved_to(owner);
            } else if o.handover.is_some_and(|h| h.to == id) {
                o.handover = None;
            }
        }
    }

    fn slot(&self, item: &OwnedItem) -> Option<&Ownership> {
        match item {
            OwnedItem::Partition(p) => self.partitions.get(p).map(|p| &p.ownership),
            OwnedItem::Shard(s) => self.shards.get(s),
        }
    }

    fn slot_mut(&mut self, item: &OwnedItem) -> Option<&mut Ownership> {
        match item {
            OwnedItem::Partition(p) => self.partitions.get_mut(p).map(|p| &mut p.ownership),
            OwnedItem::Shard(s) => self.shards.get_mut(s),
        }
    }

    /// Checks that every item exists and every new owner is a live broker.
    fn check_changes(&self, changes: &[OwnershipChange]) -> Result<(), MetaError> {
        for c in changes {
            if self.slot(&c.item).is_none() {
                return Err(match c.item {
                    OwnedItem::Partition(p) => MetaError::UnknownPartition(p),
                    OwnedItem::Shard(s) => MetaError::InvalidRequest(format!("unknown shard {s}")),
                });
            }
            if let Some(o) = c.owner {
                match self.nodes.get(&o) {
                    Some(n) if n.kind == NodeKind::Broker && n.state == NodeState::Live => {}
                    _ => return Err(MetaError::UnknownBroker(o)),
                }
            }
        }
        Ok(())
    }

    fn reassign(&mut self, changes: &[OwnershipChange]) -> Response {
        if let Err(e) = self.check_changes(changes) {
            return err(e);
        }
        for c in changes {
            if let Some(slot) = self.slot_mut(&c.item) {
                *slot = slot.moved_to(c.owner);
            }
        }
        Response::Ok
    }

    fn begin_handover(&mut self, changes: &[OwnershipChange], now_ms: u64) -> Response {
        if let Err(e) = self.check_changes(changes) {
            return err(e);
        }
        if let Some(c) = changes.iter().find(|c| c.owner.is_none()) {
            return err(MetaError::InvalidRequest(format!(
                "hand-over of {} to nobody",
                c.item
            )));
        }
        for c in changes {
            if let (Some(slot), Some(to)) = (self.slot_mut(&c.item), c.owner) {
                if slot.owner.is_none() {
                    *slot = slot.moved_to(Some(to));
                } else if slot.owner != Some(to) {
                    slot.handover = Some(Handover {
                        to,
                        since_ms: now_ms,
                    });
                }
            }
        }
        Response::Ok
    }

    fn release(&mut self, broker: BrokerId, items: &[(OwnedItem, Epoch)]) -> Response {
        for (item, epoch) in items {
            let Some(slot) = self.slot(item) else {
                return err(MetaError::InvalidRequest(format!("unknown {item}")));
            };
            if slot.owner != Some(broker) {
                return err(MetaError::NotOwner {
                    what: item.to_string(),
                    broker,
                    owner: slot.owner,
                });
            }
            if slot.epoch != *epoch {
                if let OwnedItem::Partition(partition) = item {
                    return err(MetaError::StaleEpoch {
                        partition: *partition,
                        current: slot.epoch,
                        given: *epoch,
                    });
                }
                return err(MetaError::InvalidRequest(format!(
                    "{item}: epoch {epoch} is not current ({})",
                    slot.epoch
                )));
            }
        }
        for (item, _) in items {
            if let Some(slot) = self.slot_mut(item) {
                let next = slot.handover.map(|h| h.to);
                *slot = slot.moved_to(next);
            }
        }
        Response::Ok
    }

    fn create_topic(
        &mut self,
        name: &str,
        id: TopicId,
        partitions: u32,
        config: &BTreeMap<String, String>,
    ) -> Response {
        if let Err(e) = validate_topic_name(name) {
            return err(e);
        }
        if self.topics.contains_key(name) {
            return err(MetaError::TopicExists(name.to_string()));
        }
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return err(MetaError::InvalidRequest(format!(
                "{partitions} partitions (1 to {MAX_PARTITIONS})"
            )));
        }
        if self.topics.values().any(|t| t.id == id) {
            return err(MetaError::InvalidRequest(format!("topic id {id} in use")));
        }
        let config = match TopicConfig::from_settings(config) {
            Ok(c) => c,
            Err(e) => return err(e),
        };
        for p in 0..partitions {
            self.partitions.insert(
                PartitionKey {
                    topic: id,
                    partition: p,
                },
                PartitionState::default(),
            );
        }
        self.topics.insert(
            name.to_string(),
            Topic {
                name: name.to_string(),
                id,
                partitions,
                config,
            },
        );
        self.place_new(id, 0..partitions);
        Response::TopicCreated { id }
    }

    /// Gives new partitions their owners in the command that creates them
    /// (see [`crate::controller::place`]).
    fn place_new(&mut self, topic: TopicId, partitions: std::ops::Range<u32>) {
        let new: Vec<OwnedItem> = partitions
            .map(|partition| OwnedItem::Partition(PartitionKey { topic, partition }))
            .collect();
        for c in crate::controller::place(self, &new) {
            if let Some(slot) = self.slot_mut(&c.item) {
                *slot = slot.moved_to(c.owner);
            }
        }
    }

    fn delete_topic(&mut self, name: &str) -> Response {
        let Some(topic) = self.topics.remove(name) else {
            return err(MetaError::UnknownTopic(name.to_string()));
        };
        for p in 0..topic.partitions {
            let key = PartitionKey {
                topic: topic.id,
                partition: p,
            };
            self.txn.partitions.remove(&key);
            if let Some(state) = self.partitions.remove(&key) {
                for e in state.index {
                    if let Some(o) = self.objects.get_mut(&e.object) {
                        o.refs = o.refs.saturating_sub(1);
                    }
                }
            }
        }
        for offsets in self.groups.values_mut() {
            offsets.retain(|(t, _), _| t != name);
        }
        Response::Ok
    }

    fn reset_exports(&mut self, name: &str) -> Response {
        let Some(topic) = self.topics.get(name) else {
            return err(MetaError::UnknownTopic(name.to_string()));
        };
        let keys: Vec<PartitionKey> = (0..topic.partitions)
            .map(|partition| PartitionKey {
                topic: topic.id,
                partition,
            })
            .collect();
        let generation = keys
            .iter()
            .filter_map(|k| self.partitions.get(k))
            .map(|p| p.export.generation)
            .max()
            .unwrap_or(0)
            + 1;
        for k in &keys {
            if let Some(p) = self.partitions.get_mut(k) {
                p.export.reset(generation);
            }
        }
        Response::ExportGeneration { generation }
    }

    fn create_partitions(&mut self, name: &str, total: u32) -> Response {
        let Some(topic) = self.topics.get_mut(name) else {
            return err(MetaError::UnknownTopic(name.to_string()));
        };
        if total <= topic.partitions || total > MAX_PARTITIONS {
            return err(MetaError::InvalidRequest(format!(
                "topic {name} has {} partitions; the new count must be larger (and at most {MAX_PARTITIONS}), not {total}",
                topic.partitions
            )));
        }
        for p in topic.partitions..total {
            self.partitions.insert(
                PartitionKey {
                    topic: topic.id,
                    partition: p,
                },
                PartitionState::default(),
            );
        }
        let (id, from) = (topic.id, topic.partitions);
        topic.partitions = total;
        self.place_new(id, from..total);
        Response::Ok
    }

    fn check_range(
        &self,
        broker: BrokerId,
        r: &CommitRange,
        new_object: bool,
    ) -> Result<(), MetaError> {
        let p = self
            .partitions
            .get(&r.partition)
            .ok_or(MetaError::UnknownPartition(r.partition))?;
        if r.epoch != p.ownership.epoch {
            return Err(MetaError::StaleEpoch {
                partition: r.partition,
                current: p.ownership.epoch,
                given: r.epoch,
            });
        }
        if p.ownership.owner != Some(broker) {
            return Err(MetaError::NotOwner {
                what: r.partition.to_string(),
                broker,
                owner: p.ownership.owner,
            });
        }
        if r.first_offset != p.high_watermark {
            return Err(MetaError::OffsetMismatch {
                partition: r.partition,
                expected: p.high_watermark,
                given: r.first_offset,
            });
        }
        if r.last_offset < r.first_offset || r.last_offset == i64::MAX {
            return Err(MetaError::InvalidRequest(format!(
                "{}: last offset {} before first {}",
                r.partition, r.last_offset, r.first_offset
            )));
        }
        match &r.object {
            ObjectSel::New if !new_object => Err(MetaError::InvalidRequest(
                "range refers to a new object but the commit has none".into(),
            )),
            ObjectSel::Existing(id) if !self.objects.contains_key(id) => {
                Err(MetaError::InvalidRequest(format!("unknown object {id}")))
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn commit(
        &mut self,
        broker: BrokerId,
        object: Option<&NewObject>,
        ranges: &[CommitRange],
        now_ms: u64,
    ) -> Response {
        if ranges.is_empty() {
            return err(MetaError::InvalidRequest("commit without ranges".into()));
        }
        let mut seen = BTreeSet::new();
        for r in ranges {
            if !seen.insert(r.partition) {
                return err(MetaError::InvalidRequest(format!(
                    "{} appears twice in one commit",
                    r.partition
                )));
            }
            if let Err(e) = self.check_range(broker, r, object.is_some()) {
                return err(e);
            }
        }
        let new_id = object.map(|o| {
            let id = ObjectId(self.next_object_id);
            self.next_object_id = self.next_object_id.saturating_add(1);
            self.objects.insert(
                id,
                ObjectInfo {
                    endpoint: o.endpoint.clone(),
                    key: o.key.clone(),
                    size: o.size,
                    refs: 0,
                },
            );
            id
        });
        let mut hws = Vec::with_capacity(ranges.len());
        for r in ranges {
            let obj = match (&r.object, new_id) {
                (ObjectSel::Existing(id), _) => *id,
                (ObjectSel::New, Some(id)) => id,
                (ObjectSel::New, None) => continue, // refused by check_range
            };
            if let Some(o) = self.objects.get_mut(&obj) {
                o.refs += 1;
            }
            if let Some(p) = self.partitions.get_mut(&r.partition) {
                p.index.push(IndexEntry {
                    first_offset: r.first_offset,
                    last_offset: r.last_offset,
                    max_timestamp: r.max_timestamp,
                    object: obj,
                    byte_start: r.byte_start,
                    byte_len: r.byte_len,
                });
                p.high_watermark = r.last_offset + 1;
                for b in &r.producers {
                    p.producers
                        .entry(b.producer_id)
                        .or_default()
                        .record(*b, now_ms);
                }
                hws.push((r.partition, p.high_watermark));
            }
        }
        Response::Committed {
            object: new_id,
            high_watermarks: hws,
        }
    }

    fn owned_partition(
        &mut self,
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
    ) -> Result<&mut PartitionState, MetaError> {
        let p = self
            .partitions
            .get_mut(&partition)
            .ok_or(MetaError::UnknownPartition(partition))?;
        if p.ownership.epoch != epoch {
            return Err(MetaError::StaleEpoch {
                partition,
                current: p.ownership.epoch,
                given: epoch,
            });
        }
        if p.ownership.owner != Some(broker) {
            return Err(MetaError::NotOwner {
                what: partition.to_string(),
                broker,
                owner: p.ownership.owner,
            });
        }
        Ok(p)
    }

    /// Stores a share group's state of a partition, from its owner at its
    /// epoch (see [`Command::ShareState`]).
    fn share_state(
        &mut self,
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
        group: &str,
        state: &CommittedOffset,
    ) -> Response {
        if group.is_empty() {
            return err(MetaError::InvalidRequest("empty group id".into()));
        }
        match self.owned_offset_key(broker, partition, epoch) {
            Ok(key) => {
                self.groups
                    .entry(group.to_string())
                    .or_default()
                    .insert(key, state.clone());
                Response::Ok
            }
            Err(e) => err(e),
        }
    }

    /// Deletes a share group's state of a partition, from its owner at its
    /// epoch (see [`Command::ForgetShareState`]).
    fn forget_share_state(
        &mut self,
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
        group: &str,
    ) -> Response {
        match self.owned_offset_key(broker, partition, epoch) {
            Ok(key) => {
                self.delete_offsets(group, [key]);
                Response::Ok
            }
            Err(e) => err(e),
        }
    }

    /// The (topic name, partition) a group's offset of `partition` is kept
    /// under, if `broker` owns the partition at `epoch` (the share state's
    /// fence).
    fn owned_offset_key(
        &mut self,
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
    ) -> Result<(String, u32), MetaError> {
        self.owned_partition(broker, partition, epoch)?;
        self.topics
            .iter()
            .find(|(_, t)| t.id == partition.topic)
            .map(|(name, _)| (name.clone(), partition.partition))
            .ok_or(MetaError::UnknownPartition(partition))
    }

    /// Deletes a group's offsets of these (topic, partition)s; a group left
    /// with none is gone.
    fn delete_offsets(&mut self, group: &str, keys: impl IntoIterator<Item = (String, u32)>) {
        if let Some(g) = self.groups.get_mut(group) {
            for key in keys {
                g.remove(&key);
            }
            if g.is_empty() {
                self.groups.remove(group);
            }
        }
    }

    fn truncate_log(
        &mut self,
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
        log_start_offset: i64,
    ) -> Response {
        let p = match self.owned_partition(broker, partition, epoch) {
            Ok(p) => p,
            Err(e) => return err(e),
        };
        if log_start_offset > p.high_watermark || log_start_offset < 0 {
            return err(MetaError::InvalidRequest(format!(
                "log start {log_start_offset} outside [0, {}] of {partition}",
                p.high_watermark
            )));
        }
        // Never backwards: a late retention pass changes nothing.
        if log_start_offset <= p.log_start_offset {
            return Response::LogStart {
                log_start_offset: p.log_start_offset,
            };
        }
        p.log_start_offset = log_start_offset;
        let mut dropped = Vec::new();
        p.index.retain(|e| {
            let keep = e.last_offset >= log_start_offset;
            if !keep {
                dropped.push(e.object);
            }
            keep
        });
        for id in dropped {
            if let Some(o) = self.objects.get_mut(&id) {
                o.refs = o.refs.saturating_sub(1);
            }
        }
        self.txn.partitions.truncate(&partition, log_start_offset);
        Response::LogStart { log_start_offset }
    }

    fn replace_ranges(
        &mut self,
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
        (first, last, max_ts): (i64, i64, i64),
        object: &NewObject,
    ) -> Response {
        let next_id = ObjectId(self.next_object_id);
        let p = match self.owned_partition(broker, partition, epoch) {
            Ok(p) => p,
            Err(e) => return err(e),
        };
        // The entries to replace must cover exactly first..=last, contiguously.
        let Some(i) = p.index.iter().position(|e| e.first_offset == first) else {
            return err(MetaError::InvalidRequest(format!(
                "{partition}: no committed range starts at {first}"
            )));
        };
        let Some(j) = p.index[i..]
            .iter()
            .position(|e| e.last_offset == last)
            .map(|k| i + k)
        else {
            return err(MetaError::InvalidRequest(format!(
                "{partition}: no committed range ends at {last}"
            )));
        };
        let removed: Vec<IndexEntry> = p
            .index
            .splice(
                i..=j,
                [IndexEntry {
                    first_offset: first,
                    last_offset: last,
                    max_timestamp: max_ts,
                    object: next_id,
                    byte_start: 0,
                    byte_len: object.size,
                }],
            )
            .collect();
        self.next_object_id = self.next_object_id.saturating_add(1);
        self.objects.insert(
            next_id,
            ObjectInfo {
                endpoint: object.endpoint.clone(),
                key: object.key.clone(),
                size: object.size,
                refs: 1,
            },
        );
        for e in removed {
            if let Some(o) = self.objects.get_mut(&e.object) {
                o.refs = o.refs.saturating_sub(1);
            }
        }
        Response::Committed {
            object: Some(next_id),
            high_watermarks: vec![],
        }
    }

    /// Objects that no index entry references any more.
    pub fn unreferenced_objects(&self) -> Vec<(ObjectId, &ObjectInfo)> {
        self.objects
            .iter()
            .filter(|(_, o)| o.refs == 0)
            .map(|(id, o)| (*id, o))
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::command::OwnedItem;
    use crate::controller;

    #[test]
    fn group_configs_are_set_refused_whole_and_forgotten_when_all_deleted() {
        let alter =
            |group: &str, set: &[(&str, &str)], delete: &[&str]| Command::AlterGroupConfig {
                group: group.into(),
                set: set
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                delete: delete.iter().map(|k| k.to_string()).collect(),
            };
        let mut sm = Sm::new();
        sm.ok(alter("g", &[("share.delivery.count.limit", "4")], &[]));
        assert_eq!(sm.state.group_configs["g"].share_delivery_count_limit(), 4);
        let e = sm.error(alter(
            "g",
            &[
                ("share.delivery.count.limit", "6"),
                ("consumer.session.timeout.ms", "1"),
            ],
            &[],
        ));
        assert_eq!(e.kind(), crate::error::ErrorKind::InvalidConfig);
        let e = sm.error(alter("", &[("share.delivery.count.limit", "6")], &[]));
        assert_eq!(e.kind(), crate::error::ErrorKind::InvalidRequest);
        sm.ok(alter("g", &[], &["share.delivery.count.limit"]));
        assert!(sm.state.group_configs.is_empty(), "no entry for defaults");
    }

    fn tid(n: u8) -> TopicId {
        TopicId(uuid::Uuid::from_bytes([n; 16]))
    }

    struct Sm {
        state: ClusterState,
        rev: u64,
    }

    impl Sm {
        fn new() -> Self {
            Self {
                state: ClusterState::default(),
                rev: 0,
            }
        }
        fn apply(&mut self, c: Command) -> Response {
            self.rev += 1;
            self.state.apply(Revision(self.rev), &c)
        }
        fn ok(&mut self, c: Command) {
            let r = self.apply(c.clone());
            assert!(!matches!(r, Response::Error(_)), "{c:?} -> {r:?}");
        }
        fn error(&mut self, c: Command) -> MetaError {
            let before = self.state.clone();
            match self.apply(c) {
                Response::Error(e) => {
                    let mut after = self.state.clone();
                    after.revision = before.revision;
                    assert_eq!(after, before, "a refused command changed nothing");
                    e
                }
                other => panic!("expected an error, got {other:?}"),
            }
        }
    }

    fn register(sm: &mut Sm, id: u32, now: u64) {
        sm.ok(Command::RegisterNode {
            id: BrokerId(id),
            kind: NodeKind::Broker,
            addr: format!("127.0.0.1:{}", 9000 + id),
            now_ms: now,
            lease_ms: 1000,
        });
    }

    /// Registers broker 2 and gives it `shard` (a coordinator move).
    fn move_shard_to_broker_2(sm: &mut Sm, shard: ShardId) {
        register(sm, 2, 0);
        sm.ok(Command::Reassign {
            changes: vec![OwnershipChange {
                item: OwnedItem::Shard(shard),
                owner: Some(BrokerId(2)),
            }],
        });
    }

    fn topic(sm: &mut Sm, name: &str, id: TopicId, partitions: u32) {
        sm.ok(Command::CreateTopic {
            name: name.into(),
            id,
            partitions,
            config: BTreeMap::new(),
        });
    }

    pub(crate) fn range(t: TopicId, p: u32, epoch: u64, first: i64, last: i64) -> CommitRange {
        CommitRange {
            partition: PartitionKey {
                topic: t,
                partition: p,
            },
            epoch: Epoch(epoch),
            first_offset: first,
            last_offset: last,
            max_timestamp: 1,
            object: ObjectSel::New,
            byte_start: 0,
            byte_len: 10,
            producers: vec![],
        }
    }

    fn obj() -> Option<NewObject> {
        Some(NewObject {
            endpoint: "default".into(),
            key: "wal/x.wal".into(),
            size: 100,
        })
    }

    /// A cluster with broker 1 owning both partitions of topic "t" at epoch 1.
    fn owned() -> Sm {
        let mut sm = Sm::new();
        register(&mut sm, 1, 0);
        topic(&mut sm, "t", tid(1), 2);
        for c in controller::plan(&sm.state, 0) {
            sm.ok(c);
        }
        sm
    }

    fn pt(t: TopicId, p: u32) -> OwnedItem {
        OwnedItem::Partition(PartitionKey {
            topic: t,
            partition: p,
        })
    }

    #[test]
    fn topics_are_created_validated_and_deleted() {
        let mut sm = Sm::new();
        topic(&mut sm, "orders", tid(1), 3);
        assert_eq!(sm.state.partitions.len(), 3);
        assert!(matches!(
            sm.error(Command::CreateTopic {
                name: "orders".into(),
                id: tid(2),
                partitions: 1,
                config: BTreeMap::new()
            }),
            MetaError::TopicExists(_)
        ));
        for bad in ["", ".", "..", "a b", "x/y", &"n".repeat(250)] {
            sm.error(Command::CreateTopic {
                name: bad.into(),
                id: tid(3),
                partitions: 1,
                config: BTreeMap::new(),
            });
        }
        sm.error(Command::CreateTopic {
            name: "zero".into(),
            id: tid(3),
            partitions: 0,
            config: BTreeMap::new(),
        });
        let bad_config = [("retention.ms".to_string(), "x".to_string())].into();
        assert!(matches!(
            sm.error(Command::CreateTopic {
                name: "cfg".into(),
                id: tid(3),
                partitions: 1,
                config: bad_config
            }),
            MetaError::InvalidConfig(_)
        ));
        sm.ok(Command::CreatePartitions {
            name: "orders".into(),
            total: 5,
        });
        sm.error(Command::CreatePartitions {
            name: "orders".into(),
            total: 4,
        });
        assert_eq!(sm.state.partitions.len(), 5);
        sm.ok(Command::DeleteTopic {
            name: "orders".into(),
        });
        assert!(sm.state.partitions.is_empty());
        assert!(matches!(
            sm.error(Command::DeleteTopic {
                name: "orders".into()
            }),
            MetaError::UnknownTopic(_)
        ));
        // Re-created under the same name, it is a new topic id.
        topic(&mut sm, "orders", tid(9), 1);
        assert_eq!(sm.state.topics["orders"].id, tid(9));
    }

    #[test]
    fn commit_appends_to_the_index_and_moves_the_high_watermark() {
        let mut sm = owned();
        let r = sm.apply(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![range(tid(1), 0, 1, 0, 9), range(tid(1), 1, 1, 0, 4)],
        });
        let Response::Committed {
            object: Some(id),
            high_watermarks,
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!(high_watermarks.len(), 2);
        assert_eq!(sm.state.objects[&id].refs, 2);
        let p0 = &sm.state.partitions[&PartitionKey {
            topic: tid(1),
            partition: 0,
        }];
        assert_eq!(p0.high_watermark, 10);
        assert_eq!(p0.index.len(), 1);
        // The next commit must start where the last ended.
        let e = sm.error(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![range(tid(1), 0, 1, 0, 9)],
        });
        assert!(matches!(e, MetaError::OffsetMismatch { expected: 10, .. }));
        // A range ending at the largest offset would overflow the high watermark.
        sm.error(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![range(tid(1), 0, 1, 10, i64::MAX)],
        });
        let mut again = range(tid(1), 0, 1, 10, 19);
        again.object = ObjectSel::Existing(id);
        sm.ok(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: None,
            ranges: vec![again],
        });
        assert_eq!(sm.state.objects[&id].refs, 3);
    }

    #[test]
    fn stale_epoch_fences_the_whole_commit() {
        let mut sm = owned();
        register(&mut sm, 2, 0);
        // Partition 1 moves to broker 2 (epoch 2); broker 1 still thinks it owns both.
        sm.ok(Command::Reassign {
            changes: vec![OwnershipChange {
                item: pt(tid(1), 1),
                owner: Some(BrokerId(2)),
            }],
        });
        let e = sm.error(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![range(tid(1), 0, 1, 0, 9), range(tid(1), 1, 1, 0, 9)],
        });
        assert!(
            matches!(
                e,
                MetaError::StaleEpoch {
                    current: Epoch(2),
                    given: Epoch(1),
                    ..
                }
            ),
            "{e}"
        );
        // Right epoch, wrong broker.
        let e = sm.error(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![range(tid(1), 1, 2, 0, 9)],
        });
        assert!(matches!(e, MetaError::NotOwner { .. }));
        sm.ok(Command::Commit {
            now_ms: 0,
            broker: BrokerId(2),
            object: obj(),
            ranges: vec![range(tid(1), 1, 2, 0, 9)],
        });
    }

    #[test]
    fn a_broker_registering_again_while_alive_keeps_what_it_owned_at_the_next_epoch() {
        let mut sm = owned();
        let epochs = |sm: &Sm| -> Vec<(Option<BrokerId>, Epoch)> {
            let parts = sm.state.partitions.values().map(|p| p.ownership);
            parts
                .chain(sm.state.shards.values().copied())
                .map(|o| (o.owner, o.epoch))
                .collect()
        };
        let before = epochs(&sm);
        assert!(before.iter().all(|(o, _)| *o == Some(BrokerId(1))));
        // Its new process registers within the old one's lease.
        register(&mut sm, 1, 10);
        let after = epochs(&sm);
        assert_eq!(after.len(), before.len());
        for ((o, e), (o2, e2)) in before.iter().zip(&after) {
            assert_eq!(o2, o, "kept");
            assert_eq!(e2.0, e.0 + 1, "at the next epoch");
        }
        // A commit of the previous process, at the old epoch, is refused.
        let e = sm.error(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![range(tid(1), 0, 1, 0, 9)],
        });
        assert!(matches!(e, MetaError::StaleEpoch { .. }), "{e}");
        sm.ok(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![range(tid(1), 0, 2, 0, 9)],
        });
        // Another broker registering, or one registering after it was
        // found dead (it owns nothing then), moves nothing.
        let before = epochs(&sm);
        register(&mut sm, 2, 20);
        assert_eq!(epochs(&sm), before);
        sm.ok(Command::NodeDown {
            id: BrokerId(2),
            addr: "127.0.0.1:9002".into(),
        });
        let before = epochs(&sm);
        register(&mut sm, 2, 30);
        assert_eq!(epochs(&sm), before);
    }

    #[test]
    fn a_broker_down_at_its_registered_address_loses_everything_at_once() {
        let mut sm = owned();
        register(&mut sm, 2, 0);
        let down = |id: u32, port: u32| Command::NodeDown {
            id: BrokerId(id),
            addr: format!("127.0.0.1:{port}"),
        };
        // Not its address (it registered again elsewhere), or no such broker:
        // nothing changes.
        let before = sm.state.clone();
        assert_eq!(sm.apply(down(1, 9002)), Response::Expired { nodes: vec![] });
        assert_eq!(sm.apply(down(9, 9009)), Response::Expired { nodes: vec![] });
        let mut after = sm.state.clone();
        after.revision = before.revision;
        assert_eq!(after, before);
        // Its address: dead now, long before its lease ends.
        assert_eq!(
            sm.apply(down(1, 9001)),
            Response::Expired {
                nodes: vec![BrokerId(1)]
            }
        );
        assert_eq!(sm.state.nodes[&BrokerId(1)].state, NodeState::Dead);
        assert!(
            sm.state
                .partitions
                .values()
                .all(|p| p.ownership.owner.is_none() && p.ownership.epoch == Epoch(2))
        );
        assert!(controller::has_orphans(&sm.state));
        for c in controller::plan(&sm.state, 1) {
            sm.ok(c);
        }
        assert!(!controller::has_orphans(&sm.state));
        assert!(
            sm.state
                .partitions
                .values()
                .all(|p| p.ownership.owner == Some(BrokerId(2)))
        );
        // Dead already: a second report is nothing.
        assert_eq!(sm.apply(down(1, 9001)), Response::Expired { nodes: vec![] });
    }

    #[test]
    fn expired_lease_takes_ownership_away_and_controller_reassigns() {
        let mut sm = owned();
        register(&mut sm, 2, 0);
        sm.ok(Command::Heartbeat {
            id: BrokerId(2),
            now_ms: 5_000,
        });
        assert_eq!(
            controller::plan(&sm.state, 2_000),
            vec![Command::ExpireLeases { now_ms: 2_000 }]
        );
        let r = sm.apply(Command::ExpireLeases { now_ms: 2_000 });
        assert_eq!(
            r,
            Response::Expired {
                nodes: vec![BrokerId(1)]
            }
        );
        assert!(
            sm.state
                .partitions
                .values()
                .all(|p| p.ownership.owner.is_none() && p.ownership.epoch == Epoch(2))
        );
        for c in controller::plan(&sm.state, 2_000) {
            sm.ok(c);
        }
        assert!(
            sm.state
                .partitions
                .values()
                .all(|p| p.ownership.owner == Some(BrokerId(2)) && p.ownership.epoch == Epoch(3))
        );
        assert!(
            sm.state
                .shards
                .values()
                .all(|s| s.owner == Some(BrokerId(2)))
        );
        // A dead broker's heartbeat is refused: it must register again.
        assert!(matches!(
            sm.error(Command::Heartbeat {
                id: BrokerId(1),
                now_ms: 2_100
            }),
            MetaError::UnknownBroker(_)
        ));
    }

    fn register_proxy(sm: &mut Sm, id: u32, now: u64) -> BrokerId {
        match sm.apply(Command::RegisterNode {
            id: BrokerId(id),
            kind: NodeKind::Proxy,
            addr: format!("127.0.0.1:{}", 19000 + id),
            now_ms: now,
            lease_ms: 1000,
        }) {
            Response::Registered { id } => id,
            other => panic!("proxy registration answered {other:?}"),
        }
    }

    /// Proxies are nodes of their own kind: they may be given ids above
    /// every id so far (never one an earlier node had), share no id with a
    /// broker, own nothing, and expire like any node.
    #[test]
    fn proxies_register_with_their_own_ids_and_expire_owning_nothing() {
        let mut sm = owned();
        let a = register_proxy(&mut sm, 0, 0);
        assert_eq!(a, BrokerId(FIRST_PROXY_ID));
        let b = register_proxy(&mut sm, 0, 0);
        assert_eq!(b, BrokerId(FIRST_PROXY_ID + 1));
        // A proxy naming its own id keeps it.
        assert_eq!(register_proxy(&mut sm, 7, 0), BrokerId(7));
        // An id is one kind's: a proxy cannot take broker 1's, nor a broker a proxy's.
        let e = sm.error(Command::RegisterNode {
            id: BrokerId(1),
            kind: NodeKind::Proxy,
            addr: "x:1".into(),
            now_ms: 0,
            lease_ms: 1000,
        });
        assert!(matches!(e, MetaError::InvalidRequest(_)), "{e:?}");
        let e = sm.error(Command::RegisterNode {
            id: a,
            kind: NodeKind::Broker,
            addr: "x:1".into(),
            now_ms: 0,
            lease_ms: 1000,
        });
        assert!(matches!(e, MetaError::InvalidRequest(_)), "{e:?}");
        // A stopping proxy drains (no longer listed as live at once).
        sm.ok(Command::Drain { id: b });
        assert_eq!(sm.state.nodes[&b].state, NodeState::Draining);
        // Broker 1 keeps renewing; the proxies do not: they expire, and no
        // partition or shard moves.
        sm.ok(Command::Heartbeat {
            id: BrokerId(1),
            now_ms: 1_500,
        });
        let before: Vec<Ownership> = sm.state.partitions.values().map(|p| p.ownership).collect();
        let r = sm.apply(Command::ExpireLeases { now_ms: 1_500 });
        assert_eq!(
            r,
            Response::Expired {
                nodes: vec![BrokerId(7), a, b]
            }
        );
        let after: Vec<Ownership> = sm.state.partitions.values().map(|p| p.ownership).collect();
        assert_eq!(before, after);
        assert!(controller::plan(&sm.state, 1_500).is_empty());
        // Registered again without an id, a proxy gets a new one: never a dead one's.
        assert_eq!(
            register_proxy(&mut sm, 0, 2_000),
            BrokerId(FIRST_PROXY_ID + 2)
        );
    }

    /// A broker may ask for an id too (a Deployment's pod has no ordinal):
    /// it gets one above every id so far, never a dead node's, and owns
    /// partitions under it like any broker.
    #[test]
    fn a_broker_without_an_id_is_given_a_new_one_and_owns_partitions() {
        let mut sm = owned();
        fn register_broker(sm: &mut Sm, now_ms: u64) -> BrokerId {
            match sm.apply(Command::RegisterNode {
                id: UNASSIGNED_ID,
                kind: NodeKind::Broker,
                addr: "127.0.0.1:19500".into(),
                now_ms,
                lease_ms: 1000,
            }) {
                Response::Registered { id } => id,
                other => panic!("broker registration answered {other:?}"),
            }
        }
        let a = register_broker(&mut sm, 0);
        assert_eq!(a, BrokerId(FIRST_PROXY_ID));
        assert_eq!(sm.state.nodes[&a].kind, NodeKind::Broker);
        // Broker 1 goes silent: its partitions move to the new broker.
        sm.ok(Command::Heartbeat {
            id: a,
            now_ms: 1_500,
        });
        sm.apply(Command::ExpireLeases { now_ms: 1_500 });
        for c in controller::plan(&sm.state, 1_500) {
            sm.apply(c);
        }
        assert!(
            sm.state
                .partitions
                .values()
                .all(|p| p.ownership.owner == Some(a))
        );
        // Dead and registered again without an id: a new one, never a.
        sm.apply(Command::ExpireLeases { now_ms: 5_000 });
        assert_eq!(
            register_broker(&mut sm, 5_000),
            BrokerId(FIRST_PROXY_ID + 1)
        );
    }

    /// A new topic's partitions are owned by the command that creates them
    /// (no wait for the controller's next round), spread by load; without
    /// a live broker they wait for the controller.
    #[test]
    fn a_new_topic_is_owned_from_the_command_that_creates_it() {
        let mut sm = Sm::new();
        topic(&mut sm, "early", tid(1), 2);
        assert!(
            sm.state
                .partitions
                .values()
                .all(|p| p.ownership.owner.is_none())
        );
        register(&mut sm, 1, 0);
        register(&mut sm, 2, 0);
        for c in controller::plan(&sm.state, 0) {
            sm.ok(c);
        }
        let (c1, c2) = (count(&sm, 1), count(&sm, 2));
        topic(&mut sm, "orders", tid(2), 6);
        let orders: Vec<_> = sm
            .state
            .partitions
            .iter()
            .filter(|(k, _)| k.topic == tid(2))
            .map(|(_, p)| p.ownership)
            .collect();
        assert_eq!(orders.len(), 6);
        assert!(
            orders
                .iter()
                .all(|o| o.owner.is_some() && o.epoch == Epoch(1) && o.handover.is_none()),
            "{orders:?}"
        );
        assert_eq!(count(&sm, 1) + count(&sm, 2), c1 + c2 + 6);
        assert!(count(&sm, 1).abs_diff(count(&sm, 2)) <= 1, "spread by load");
        // New partitions of an existing topic too.
        sm.ok(Command::CreatePartitions {
            name: "orders".into(),
            total: 8,
        });
        assert!(
            sm.state
                .partitions
                .iter()
                .filter(|(k, _)| k.topic == tid(2))
                .all(|(_, p)| p.ownership.owner.is_some())
        );
        assert!(count(&sm, 1).abs_diff(count(&sm, 2)) <= 1);
        // Nothing left for the controller to place.
        assert!(controller::decide(&sm.state, 0).direct.is_empty());
    }

    #[test]
    fn a_new_leader_renews_every_live_lease_before_it_expires_any() {
        let mut sm = owned();
        register(&mut sm, 2, 0);
        // No leader for a while: both leases (1 s, from t=0) ran out.
        let now = 3_000;
        assert_eq!(
            controller::plan(&sm.state, now),
            vec![Command::ExpireLeases { now_ms: now }]
        );
        let renewals = controller::renew_all(&sm.state, now);
        assert_eq!(renewals.len(), 2, "{renewals:?}");
        for c in renewals {
            sm.ok(c);
        }
        // Nothing expires, nothing moves, no epoch changes.
        let before: Vec<_> = sm.state.partitions.values().map(|p| p.ownership).collect();
        assert!(
            !controller::plan(&sm.state, now)
                .iter()
                .any(|c| matches!(c, Command::ExpireLeases { .. }))
        );
        let after: Vec<_> = sm.state.partitions.values().map(|p| p.ownership).collect();
        assert_eq!(before, after);
        // A node that is really gone expires one lease later.
        assert_eq!(
            controller::plan(&sm.state, now + 1_001),
            vec![Command::ExpireLeases {
                now_ms: now + 1_001
            }]
        );
        // A dead node is not brought back by a renewal.
        sm.apply(Command::ExpireLeases {
            now_ms: now + 1_001,
        });
        assert!(controller::renew_all(&sm.state, now + 1_002).is_empty());
    }

    fn count(sm: &Sm, b: u32) -> usize {
        sm.state
            .partitions
            .values()
            .map(|p| p.ownership)
            .chain(sm.state.shards.values().copied())
            .filter(|o| o.owner == Some(BrokerId(b)))
            .count()
    }

    fn spread(sm: &Sm, brokers: std::ops::RangeInclusive<u32>) -> usize {
        let counts: Vec<usize> = brokers.map(|b| count(sm, b)).collect();
        counts.iter().max().unwrap() - counts.iter().min().unwrap()
    }

    /// Every owner releases what it is asked to hand over, as a broker would.
    fn release_all(sm: &mut Sm) {
        let mut by_owner: BTreeMap<BrokerId, Vec<(OwnedItem, Epoch)>> = BTreeMap::new();
        let partitions = sm
            .state
            .partitions
            .iter()
            .map(|(p, s)| (OwnedItem::Partition(*p), s.ownership));
        let shards = sm
            .state
            .shards
            .iter()
            .map(|(s, o)| (OwnedItem::Shard(*s), *o));
        for (item, o) in partitions.chain(shards) {
            if let (Some(owner), Some(_)) = (o.owner, o.handover) {
                by_owner.entry(owner).or_default().push((item, o.epoch));
            }
        }
        for (broker, items) in by_owner {
            sm.ok(Command::Release { broker, items });
        }
    }

    #[test]
    fn assignment_is_balanced_and_deterministic() {
        let mut sm = Sm::new();
        for b in 1..=3 {
            register(&mut sm, b, 0);
        }
        topic(&mut sm, "a", tid(1), 10);
        topic(&mut sm, "b", tid(2), 7);
        let first = controller::plan(&sm.state, 0);
        assert_eq!(
            first,
            controller::plan(&sm.state.clone(), 0),
            "deterministic"
        );
        for c in first {
            sm.ok(c);
        }
        let total = 17 + DEFAULT_SHARDS as usize;
        assert_eq!((1..=3).map(|b| count(&sm, b)).sum::<usize>(), total);
        assert!(spread(&sm, 1..=3) <= 1);
        assert!(
            controller::plan(&sm.state, 0).is_empty(),
            "stable once balanced"
        );

        // A new broker gets a fair share through hand-overs: nothing moves
        // until the owners release, then the new owner has it at epoch + 1.
        register(&mut sm, 4, 0);
        let plan = controller::plan(&sm.state, 500);
        assert!(
            matches!(plan.as_slice(), [Command::BeginHandover { .. }]),
            "{plan:?}"
        );
        for c in plan {
            sm.ok(c);
        }
        assert_eq!(
            count(&sm, 4),
            0,
            "owners keep their items until they release"
        );
        let again = controller::plan(&sm.state, 600);
        assert!(again.is_empty(), "no second hand-over: {again:?}");
        let before: BTreeMap<PartitionKey, Epoch> = sm
            .state
            .partitions
            .iter()
            .map(|(p, s)| (*p, s.ownership.epoch))
            .collect();
        release_all(&mut sm);
        assert!(spread(&sm, 1..=4) <= 1);
        // Partitions and shards are each evened out: the new broker takes
        // its share of the partitions, not only shards.
        let partitions_of = |b: u32| {
            sm.state
                .partitions
                .values()
                .filter(|p| p.ownership.owner == Some(BrokerId(b)))
                .count()
        };
        let shards_of = |b: u32| {
            sm.state
                .shards
                .values()
                .filter(|o| o.owner == Some(BrokerId(b)))
                .count()
        };
        let parts: Vec<usize> = (1..=4).map(partitions_of).collect();
        let shards: Vec<usize> = (1..=4).map(shards_of).collect();
        assert!(
            parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1,
            "partitions {parts:?}"
        );
        assert!(
            shards.iter().max().unwrap() - shards.iter().min().unwrap() <= 1,
            "shards {shards:?}"
        );
        for (p, s) in &sm.state.partitions {
            if s.ownership.owner == Some(BrokerId(4)) {
                assert_eq!(s.ownership.epoch.0, before[p].0 + 1);
            }
        }
    }

    #[test]
    fn unreleased_handover_is_forced_after_the_timeout() {
        let mut sm = owned();
        register(&mut sm, 2, 0);
        for c in controller::plan(&sm.state, 100) {
            sm.ok(c);
        }
        let pending = sm
            .state
            .partitions
            .values()
            .chain(std::iter::empty())
            .filter(|p| p.ownership.handover.is_some())
            .count()
            + sm.state
                .shards
                .values()
                .filter(|o| o.handover.is_some())
                .count();
        assert!(pending > 0);
        // The owner never releases (stuck or partitioned away), but stays alive.
        let later = 100 + controller::HANDOVER_TIMEOUT_MS + 1;
        for b in [1, 2] {
            sm.ok(Command::Heartbeat {
                id: BrokerId(b),
                now_ms: later,
            });
        }
        let plan = controller::plan(&sm.state, later);
        let Some(Command::Reassign { changes }) = plan.first() else {
            panic!("{plan:?}")
        };
        assert_eq!(changes.len(), pending);
        for c in plan {
            sm.ok(c);
        }
        assert!(spread(&sm, 1..=2) <= 1);
    }

    #[test]
    fn release_checks_owner_and_epoch_and_draining_moves_everything() {
        let mut sm = owned();
        register(&mut sm, 2, 0);
        let p0 = pt(tid(1), 0);
        assert!(matches!(
            sm.error(Command::Release {
                broker: BrokerId(2),
                items: vec![(p0, Epoch(1))]
            }),
            MetaError::NotOwner { .. }
        ));
        assert!(matches!(
            sm.error(Command::Release {
                broker: BrokerId(1),
                items: vec![(p0, Epoch(7))]
            }),
            MetaError::StaleEpoch { .. }
        ));
        sm.ok(Command::Drain { id: BrokerId(1) });
        for c in controller::plan(&sm.state, 0) {
            sm.ok(c);
        }
        release_all(&mut sm);
        assert_eq!(count(&sm, 1), 0, "a draining broker ends up owning nothing");
        assert_eq!(count(&sm, 2), 2 + DEFAULT_SHARDS as usize);
    }

    #[test]
    fn group_offsets_and_producer_ids() {
        let mut sm = owned();
        let off = CommittedOffset {
            offset: 42,
            leader_epoch: 3,
            metadata: "m".into(),
        };
        sm.ok(Command::CommitOffsets {
            fence: None,
            group: "g".into(),
            offsets: vec![("t".into(), 0, off.clone())],
        });
        assert_eq!(sm.state.groups["g"][&("t".to_string(), 0)], off);
        sm.ok(Command::DeleteTopic { name: "t".into() });
        assert!(
            sm.state.groups["g"].is_empty(),
            "offsets of a deleted topic go"
        );
        let a = sm.apply(Command::AllocateProducerIds { count: 10 });
        let b = sm.apply(Command::AllocateProducerIds { count: 5 });
        assert_eq!(
            a,
            Response::ProducerIds {
                first: 1000,
                count: 10
            }
        );
        assert_eq!(
            b,
            Response::ProducerIds {
                first: 1010,
                count: 5
            }
        );
        sm.error(Command::AllocateProducerIds { count: 0 });
    }

    #[test]
    fn each_command_of_a_batch_is_applied_as_if_alone() {
        let mut sm = Sm::new();
        let before = sm.state.clone();
        let r = sm.apply(Command::Batch(vec![
            Command::AllocateProducerIds { count: 10 },
            // Refused: changes nothing, and the next command still applies.
            Command::AllocateProducerIds { count: 0 },
            Command::AllocateProducerIds { count: 5 },
        ]));
        let Response::Batch(rs) = r else {
            panic!("expected a batch response, got {r:?}");
        };
        assert_eq!(
            rs[0],
            Response::ProducerIds {
                first: 1000,
                count: 10
            }
        );
        assert!(matches!(
            rs[1],
            Response::Error(MetaError::InvalidRequest(_))
        ));
        assert_eq!(
            rs[2],
            Response::ProducerIds {
                first: 1010,
                count: 5
            }
        );
        assert_eq!(rs.len(), 3);
        // The same commands one by one end in the same model.
        let mut alone = Sm::new();
        alone.state = before;
        alone.apply(Command::AllocateProducerIds { count: 10 });
        alone.apply(Command::AllocateProducerIds { count: 0 });
        alone.apply(Command::AllocateProducerIds { count: 5 });
        alone.state.revision = sm.state.revision;
        assert_eq!(alone.state, sm.state);
    }

    #[test]
    fn deleting_a_topic_releases_its_objects() {
        let mut sm = owned();
        let Response::Committed {
            object: Some(id), ..
        } = sm.apply(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![range(tid(1), 0, 1, 0, 9)],
        })
        else {
            panic!()
        };
        assert!(sm.state.unreferenced_objects().is_empty());
        sm.ok(Command::DeleteTopic { name: "t".into() });
        assert_eq!(sm.state.unreferenced_objects().len(), 1);
        sm.ok(Command::ForgetObjects { ids: vec![id] });
        assert!(sm.state.objects.is_empty());
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut sm = owned();
        sm.ok(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![range(tid(1), 0, 1, 0, 9)],
        });
        sm.ok(Command::CommitOffsets {
            fence: None,
            group: "g".into(),
            offsets: vec![(
                "t".into(),
                1,
                CommittedOffset {
                    offset: 5,
                    leader_epoch: 0,
                    metadata: String::new(),
                },
            )],
        });
        let json = serde_json::to_vec(&sm.state).unwrap();
        let back: ClusterState = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, sm.state);
    }

    #[test]
    fn truncate_moves_the_log_start_forward_only_and_releases_objects() {
        let mut sm = owned();
        let p0 = PartitionKey {
            topic: tid(1),
            partition: 0,
        };
        for (first, last) in [(0, 9), (10, 19), (20, 29)] {
            sm.ok(Command::Commit {
                now_ms: 0,
                broker: BrokerId(1),
                object: obj(),
                ranges: vec![range(tid(1), 0, 1, first, last)],
            });
        }
        assert_eq!(sm.state.unreferenced_objects().len(), 0);
        let truncate = |o: i64, epoch: u64, broker: u32| Command::TruncateLog {
            broker: BrokerId(broker),
            partition: p0,
            epoch: Epoch(epoch),
            log_start_offset: o,
        };
        assert!(matches!(
            sm.error(truncate(15, 2, 1)),
            MetaError::StaleEpoch { .. }
        ));
        assert!(matches!(
            sm.error(truncate(15, 1, 2)),
            MetaError::NotOwner { .. }
        ));
        assert!(matches!(
            sm.error(truncate(31, 1, 1)),
            MetaError::InvalidRequest(_)
        ));
        assert_eq!(
            sm.apply(truncate(15, 1, 1)),
            Response::LogStart {
                log_start_offset: 15
            }
        );
        let ps = &sm.state.partitions[&p0];
        assert_eq!(ps.log_start_offset, 15);
        assert_eq!(ps.index.first().map(|e| e.first_offset), Some(10));
        assert_eq!(
            sm.state.unreferenced_objects().len(),
            1,
            "the first WAL object"
        );
        // Backwards is a no-op that reports the current start.
        assert_eq!(
            sm.apply(truncate(5, 1, 1)),
            Response::LogStart {
                log_start_offset: 15
            }
        );
    }

    #[test]
    fn share_state_is_written_only_by_the_owner_at_its_epoch() {
        let mut sm = owned();
        let p1 = PartitionKey {
            topic: tid(1),
            partition: 1,
        };
        let write = |epoch: u64, broker: u32, offset: i64| Command::ShareState {
            broker: BrokerId(broker),
            partition: p1,
            epoch: Epoch(epoch),
            group: "sg".into(),
            state: CommittedOffset {
                offset,
                leader_epoch: -1,
                metadata: "1;".into(),
            },
        };
        assert!(matches!(
            sm.error(write(2, 1, 5)),
            MetaError::StaleEpoch { .. }
        ));
        assert!(matches!(
            sm.error(write(1, 2, 5)),
            MetaError::NotOwner { .. }
        ));
        assert_eq!(sm.apply(write(1, 1, 5)), Response::Ok);
        // Stored as the group's offset of the partition, by topic name.
        assert_eq!(sm.state.groups["sg"][&("t".to_string(), 1)].offset, 5);
        // Gone with the topic.
        sm.ok(Command::DeleteTopic { name: "t".into() });
        assert!(sm.state.groups["sg"].is_empty());
    }

    #[test]
    fn share_state_is_forgotten_only_by_the_owner_at_its_epoch() {
        let mut sm = owned();
        let p1 = PartitionKey {
            topic: tid(1),
            partition: 1,
        };
        let state = |offset: i64| CommittedOffset {
            offset,
            leader_epoch: -1,
            metadata: "1;".into(),
        };
        for p in [0, 1] {
            sm.ok(Command::ShareState {
                broker: BrokerId(1),
                partition: PartitionKey {
                    topic: tid(1),
                    partition: p,
                },
                epoch: Epoch(1),
                group: "sg".into(),
                state: state(5),
            });
        }
        let forget = |epoch: u64, broker: u32| Command::ForgetShareState {
            broker: BrokerId(broker),
            partition: p1,
            epoch: Epoch(epoch),
            group: "sg".into(),
        };
        // A paused old owner (or another broker) deletes nothing.
        assert!(matches!(
            sm.error(forget(2, 1)),
            MetaError::StaleEpoch { .. }
        ));
        assert!(matches!(sm.error(forget(1, 2)), MetaError::NotOwner { .. }));
        assert_eq!(sm.state.groups["sg"].len(), 2);
        // The owner at its epoch deletes this partition's state only.
        assert_eq!(sm.apply(forget(1, 1)), Response::Ok);
        assert_eq!(
            sm.state.groups["sg"].keys().collect::<Vec<_>>(),
            vec![&("t".to_string(), 0)]
        );
        // Already gone: not an error.
        assert_eq!(sm.apply(forget(1, 1)), Response::Ok);
        // The group's last partition gone: the group is gone.
        sm.ok(Command::ForgetShareState {
            broker: BrokerId(1),
            partition: PartitionKey {
                topic: tid(1),
                partition: 0,
            },
            epoch: Epoch(1),
            group: "sg".into(),
        });
        assert!(!sm.state.groups.contains_key("sg"));
    }

    #[test]
    fn the_delayed_cursor_group_is_written_by_the_owner_only_never_by_a_commit() {
        let mut sm = owned();
        let group = crate::command::DELAYED_CURSOR_GROUP;
        let cursor = CommittedOffset {
            offset: 42,
            leader_epoch: -1,
            metadata: "floe-delayed-cursor".into(),
        };
        assert_eq!(
            sm.apply(Command::ShareState {
                broker: BrokerId(1),
                partition: PartitionKey {
                    topic: tid(1),
                    partition: 1,
                },
                epoch: Epoch(1),
                group: group.into(),
                state: cursor.clone(),
            }),
            Response::Ok
        );
        assert!(matches!(
            sm.error(Command::CommitOffsets {
                fence: None,
                group: group.into(),
                offsets: vec![(
                    "t".into(),
                    1,
                    CommittedOffset {
                        offset: 99,
                        ..cursor
                    }
                )],
            }),
            MetaError::InvalidRequest(_)
        ));
        assert_eq!(sm.state.groups[group][&("t".to_string(), 1)].offset, 42);
    }

    #[test]
    fn replace_ranges_swaps_exact_runs_for_a_segment() {
        let mut sm = owned();
        let p0 = PartitionKey {
            topic: tid(1),
            partition: 0,
        };
        for (first, last) in [(0, 9), (10, 19), (20, 29)] {
            sm.ok(Command::Commit {
                now_ms: 0,
                broker: BrokerId(1),
                object: obj(),
                ranges: vec![range(tid(1), 0, 1, first, last)],
            });
        }
        let seg = NewObject {
            endpoint: "default".into(),
            key: "segments/x/0/00000000000000000000.t.log".into(),
            size: 30,
        };
        let replace = |first: i64, last: i64, epoch: u64| Command::ReplaceRanges {
            broker: BrokerId(1),
            partition: p0,
            epoch: Epoch(epoch),
            first_offset: first,
            last_offset: last,
            max_timestamp: 7,
            object: seg.clone(),
        };
        assert!(matches!(
            sm.error(replace(0, 19, 3)),
            MetaError::StaleEpoch { .. }
        ));
        assert!(matches!(
            sm.error(replace(1, 19, 1)),
            MetaError::InvalidRequest(_)
        ));
        assert!(matches!(
            sm.error(replace(0, 18, 1)),
            MetaError::InvalidRequest(_)
        ));
        sm.ok(replace(0, 19, 1));
        let ps = &sm.state.partitions[&p0];
        assert_eq!(ps.index.len(), 2);
        assert_eq!((ps.index[0].first_offset, ps.index[0].last_offset), (0, 19));
        assert_eq!(ps.index[0].byte_len, 30);
        assert_eq!(ps.high_watermark, 30, "the committed end does not move");
        assert_eq!(sm.state.unreferenced_objects().len(), 2, "both WAL objects");
    }

    #[test]
    fn committed_producer_batches_are_remembered_five_per_producer() {
        let mut sm = owned();
        let p0 = PartitionKey {
            topic: tid(1),
            partition: 0,
        };
        for i in 0..7i64 {
            let mut r = range(tid(1), 0, 1, i * 10, i * 10 + 9);
            let epoch = if i < 6 { 0 } else { 1 };
            r.producers = vec![ProducerBatch {
                producer_id: 42,
                epoch,
                first_sequence: (i * 10) as i32,
                last_sequence: (i * 10 + 9) as i32,
                first_offset: i * 10,
                last_offset: i * 10 + 9,
            }];
            sm.ok(Command::Commit {
                now_ms: 0,
                broker: BrokerId(1),
                object: obj(),
                ranges: vec![r],
            });
            let st = &sm.state.partitions[&p0].producers[&42];
            if i == 5 {
                assert_eq!(st.batches.len(), 5, "only the last five are kept");
                assert_eq!(st.batches[0].first_offset, 10);
            }
        }
        let st = &sm.state.partitions[&p0].producers[&42];
        assert_eq!(
            (st.epoch, st.batches.len()),
            (1, 1),
            "a new epoch starts over"
        );
        // A refused commit records nothing.
        let mut stale = range(tid(1), 0, 0, 70, 79);
        stale.producers = vec![ProducerBatch {
            producer_id: 7,
            epoch: 0,
            first_sequence: 0,
            last_sequence: 9,
            first_offset: 70,
            last_offset: 79,
        }];
        sm.error(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![stale],
        });
        assert!(!sm.state.partitions[&p0].producers.contains_key(&7));
    }

    fn offset(o: i64) -> CommittedOffset {
        CommittedOffset {
            offset: o,
            leader_epoch: 0,
            metadata: String::new(),
        }
    }

    #[test]
    fn offset_commits_are_fenced_by_the_coordinator_shards_epoch() {
        let mut sm = owned();
        let shard = ShardId(3);
        let held = sm.state.shards[&shard];
        assert_eq!(held.owner, Some(BrokerId(1)));
        let commit = |o: i64, epoch: Epoch| Command::CommitOffsets {
            group: "g".into(),
            offsets: vec![("t".into(), 0, offset(o))],
            fence: Some(crate::command::ShardFence {
                broker: BrokerId(1),
                shard,
                epoch,
            }),
        };
        sm.ok(commit(100, held.epoch));
        // The shard moves to broker 2; broker 1 was paused and wakes up
        // with its old epoch and an older offset: refused, nothing moves.
        move_shard_to_broker_2(&mut sm, shard);
        assert!(matches!(
            sm.error(commit(50, held.epoch)),
            MetaError::StaleCoordinator { .. }
        ));
        // Right epoch, wrong broker: refused too.
        let now = sm.state.shards[&shard].epoch;
        assert_eq!(
            sm.error(commit(50, now)).kind(),
            crate::ErrorKind::StaleCoordinator
        );
        assert_eq!(sm.state.groups["g"][&("t".to_string(), 0)].offset, 100);
    }

    #[test]
    fn group_records_are_fenced_by_their_shard_and_forgotten_with_the_group() {
        let mut sm = owned();
        let shard = ShardId(crate::txn::shard_of("g", DEFAULT_SHARDS));
        let held = sm.state.shards[&shard];
        assert_eq!(held.owner, Some(BrokerId(1)));
        let store = |shard: ShardId, epoch: Epoch, record: Option<Vec<u8>>| Command::StoreGroup {
            fence: crate::command::ShardFence {
                broker: BrokerId(1),
                shard,
                epoch,
            },
            group: "g".into(),
            record,
        };
        sm.ok(store(shard, held.epoch, Some(vec![7])));
        assert_eq!(sm.state.group_records["g"], vec![7]);
        // Through another shard: refused.
        let other = ShardId((shard.0 + 1) % DEFAULT_SHARDS);
        let other_epoch = sm.state.shards[&other].epoch;
        assert_eq!(
            sm.error(store(other, other_epoch, Some(vec![8]))).kind(),
            crate::ErrorKind::InvalidRequest
        );
        // `None` forgets it; DeleteGroups does too.
        sm.ok(store(shard, held.epoch, None));
        assert!(!sm.state.group_records.contains_key("g"));
        sm.ok(store(shard, held.epoch, Some(vec![9])));
        sm.ok(Command::DeleteGroups {
            groups: vec!["g".into()],
        });
        assert!(sm.state.group_records.is_empty());
        // After the shard moves, the previous coordinator is refused.
        sm.ok(store(shard, held.epoch, Some(vec![1])));
        move_shard_to_broker_2(&mut sm, shard);
        assert_eq!(
            sm.error(store(shard, held.epoch, Some(vec![2]))).kind(),
            crate::ErrorKind::StaleCoordinator
        );
        assert_eq!(sm.state.group_records["g"], vec![1]);
    }

    #[test]
    fn group_deletes_are_fenced_by_the_coordinator_they_were_decided_with() {
        let mut sm = owned();
        let shard = ShardId(crate::txn::shard_of("g", DEFAULT_SHARDS));
        let held = sm.state.shards[&shard];
        assert_eq!(held.owner, Some(BrokerId(1)));
        let fence = |broker: u32, shard: ShardId, epoch: Epoch| crate::command::ShardFence {
            broker: BrokerId(broker),
            shard,
            epoch,
        };
        let commit = |partition: u32| Command::CommitOffsets {
            group: "g".into(),
            offsets: vec![("t".into(), partition, offset(7))],
            fence: Some(fence(1, shard, held.epoch)),
        };
        let delete = |partition: u32, f| Command::DeleteOffsetsFenced {
            group: "g".into(),
            partitions: vec![("t".into(), partition)],
            fence: f,
        };
        sm.ok(commit(0));
        sm.ok(commit(1));
        sm.ok(delete(0, fence(1, shard, held.epoch)));
        assert!(!sm.state.groups["g"].contains_key(&("t".to_string(), 0)));
        // Through another shard than the group's: refused.
        let other = ShardId((shard.0 + 1) % DEFAULT_SHARDS);
        let other_epoch = sm.state.shards[&other].epoch;
        assert_eq!(
            sm.error(delete(1, fence(1, other, other_epoch))).kind(),
            crate::ErrorKind::InvalidRequest
        );
        // The shard moves to broker 2: a delete decided with broker 1 is
        // stale, whether of offsets or of the whole group.
        move_shard_to_broker_2(&mut sm, shard);
        assert_eq!(
            sm.error(delete(1, fence(1, shard, held.epoch))).kind(),
            crate::ErrorKind::StaleCoordinator
        );
        let forget = |f| Command::DeleteGroupFenced {
            group: "g".into(),
            fence: f,
        };
        assert_eq!(
            sm.error(forget(fence(1, shard, held.epoch))).kind(),
            crate::ErrorKind::StaleCoordinator
        );
        assert_eq!(sm.state.groups["g"][&("t".to_string(), 1)].offset, 7);
        // The new coordinator at its epoch: the group goes.
        let now = sm.state.shards[&shard].epoch;
        sm.ok(forget(fence(2, shard, now)));
        assert!(!sm.state.groups.contains_key("g"));
    }

    #[test]
    fn offsets_of_unknown_topics_or_partitions_are_not_stored() {
        let mut sm = owned();
        let r = sm.apply(Command::CommitOffsets {
            group: "g".into(),
            offsets: vec![
                ("t".into(), 1, offset(1)),
                ("t".into(), 2, offset(2)),
                ("nope".into(), 0, offset(3)),
            ],
            fence: None,
        });
        assert_eq!(
            r,
            Response::OffsetsCommitted {
                unknown: vec![("t".into(), 2), ("nope".into(), 0)]
            }
        );
        assert_eq!(sm.state.groups["g"].len(), 1);
        // Only unknown ones: no group is created.
        sm.apply(Command::CommitOffsets {
            group: "empty".into(),
            offsets: vec![("nope".into(), 0, offset(3))],
            fence: None,
        });
        assert!(!sm.state.groups.contains_key("empty"));
    }

    #[test]
    fn idle_producers_expire_by_the_time_in_the_commands() {
        let mut sm = owned();
        let p0 = PartitionKey {
            topic: tid(1),
            partition: 0,
        };
        let batch = |pid: i64, first: i64| ProducerBatch {
            producer_id: pid,
            epoch: 0,
            first_sequence: first as i32,
            last_sequence: first as i32,
            first_offset: first,
            last_offset: first,
        };
        let mut r = range(tid(1), 0, 1, 0, 0);
        r.producers = vec![batch(7, 0)];
        sm.ok(Command::Commit {
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![r],
            now_ms: 1_000,
        });
        let mut r = range(tid(1), 0, 1, 1, 1);
        r.producers = vec![batch(8, 1)];
        sm.ok(Command::Commit {
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![r],
            now_ms: 5_000,
        });
        assert!(!sm.state.producers_to_expire(5_000, 10_000));
        assert!(sm.state.producers_to_expire(11_001, 10_000));
        assert_eq!(
            controller::expire_producers(&sm.state, 11_001, 10_000),
            Some(Command::ExpireProducers {
                now_ms: 11_001,
                expiration_ms: 10_000
            })
        );
        sm.ok(Command::ExpireProducers {
            now_ms: 11_001,
            expiration_ms: 10_000,
        });
        let left: Vec<i64> = sm.state.partitions[&p0].producers.keys().copied().collect();
        assert_eq!(left, vec![8], "producer 7 idle 10.001 s: gone; 8 stays");
        // A producer from an entry without a time starts its clock at the
        // first expiry pass instead of going at once.
        sm.state
            .partitions
            .get_mut(&p0)
            .unwrap()
            .producers
            .get_mut(&8)
            .unwrap()
            .last_write_ms = 0;
        sm.ok(Command::ExpireProducers {
            now_ms: 100_000,
            expiration_ms: 10_000,
        });
        assert_eq!(
            sm.state.partitions[&p0].producers[&8].last_write_ms,
            100_000
        );
    }

    #[test]
    fn scram_credentials_are_altered_per_user_and_kept_in_snapshots() {
        use crate::scram::{ScramAlteration, ScramCredential, ScramMechanism};
        let cred = |iterations: u32| ScramCredential {
            salt: vec![1; 16],
            stored_key: vec![2; 32],
            server_key: vec![3; 32],
            iterations,
        };
        let set = |user: &str, iterations: u32| {
            Command::AlterScramCredentials(ScramAlteration {
                user: user.into(),
                upsert: vec![(ScramMechanism::Sha256, cred(iterations))],
                delete: vec![],
            })
        };
        let mut sm = Sm::new();
        sm.ok(set("alice", 4096));
        // One command a user in a batch, as `/v1/scram/alter` writes them:
        // bob's deletion of a credential he lacks is refused, alice's
        // change applies.
        let r = sm.apply(Command::Batch(vec![
            set("alice", 8192),
            Command::AlterScramCredentials(ScramAlteration {
                user: "bob".into(),
                upsert: vec![(ScramMechanism::Sha256, cred(4096))],
                delete: vec![ScramMechanism::Sha512],
            }),
        ]));
        let Response::Batch(rs) = r else {
            panic!("{r:?}")
        };
        assert_eq!(rs[0], Response::Ok);
        assert!(
            matches!(&rs[1], Response::Error(e) if e.kind() == crate::ErrorKind::NotFound),
            "{rs:?}"
        );
        assert_eq!(
            sm.state.scram.users["alice"][&ScramMechanism::Sha256].iterations,
            8192
        );
        assert!(!sm.state.scram.users.contains_key("bob"));
        // Bad credentials are refused and change nothing.
        assert_eq!(
            sm.error(set("carol", 100)).kind(),
            crate::ErrorKind::InvalidRequest
        );
        // A snapshot (the state as serialized) keeps them.
        let json = serde_json::to_vec(&sm.state).unwrap();
        let back: ClusterState = serde_json::from_slice(&json).unwrap();
        assert_eq!(back.scram, sm.state.scram);
        // One written before SCRAM credentials existed has none.
        let mut old: serde_json::Value = serde_json::from_slice(&json).unwrap();
        old.as_object_mut().unwrap().remove("scram");
        let back: ClusterState = serde_json::from_value(old).unwrap();
        assert!(back.scram.users.is_empty());
    }
}

#[cfg(test)]
mod stored_bytes_tests {
    use super::*;

    fn entry(first: i64, last: i64, len: u64) -> IndexEntry {
        IndexEntry {
            first_offset: first,
            last_offset: last,
            max_timestamp: 0,
            object: ObjectId(1),
            byte_start: 0,
            byte_len: len,
        }
    }

    #[test]
    fn stored_bytes_count_the_ranges_from_the_log_start_on() {
        let mut p = PartitionState {
            index: vec![entry(0, 9, 100), entry(10, 19, 200), entry(20, 29, 400)],
            ..PartitionState::default()
        };
        assert_eq!(p.stored_bytes(), 700);
        // A range the log start falls inside counts whole; one before it, not.
        p.log_start_offset = 15;
        assert_eq!(p.stored_bytes(), 600);
        p.log_start_offset = 30;
        assert_eq!(p.stored_bytes(), 0);
    }
}
