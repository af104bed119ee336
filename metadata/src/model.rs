//! The cluster model as the metadata's clients see it: what the broker, the
//! proxy and the indexer read from the API, in domain types. The protobuf
//! messages of `api::proto` are only the wire form of these (`api::convert`).

use floe_types::{BrokerId, Epoch, ObjectId, ObjectRef, PartitionKey, Revision, ShardId, TopicId};

pub use crate::command::{CommitRange, NodeKind, ObjectSel, ProducerBatch};
pub use crate::state::NodeState;

/// One topic setting, with whether it is the default.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigEntry {
    pub name: String,
    pub value: String,
    pub is_default: bool,
}

/// A partition's owner and ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionInfo {
    pub partition: u32,
    pub owner: Option<BrokerId>,
    pub epoch: Epoch,
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// A hand-over in progress to this broker: the owner should finish what
    /// it has in flight and release.
    pub handover_to: Option<BrokerId>,
    /// Bytes its committed ranges hold from the log start: known in a
    /// described topic (`MetaApi::describe_topic`), not in the cluster view.
    pub stored_bytes: Option<u64>,
}

/// A topic with its settings and (where asked for) its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub id: TopicId,
    pub partition_count: u32,
    pub configs: Vec<ConfigEntry>,
    pub partitions: Vec<PartitionInfo>,
}

impl TopicInfo {
    pub fn partition_key(&self, partition: u32) -> Option<PartitionKey> {
        (partition < self.partition_count).then(|| PartitionKey::new(self.id, partition))
    }
}

/// A registered broker or proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub id: BrokerId,
    pub kind: NodeKind,
    pub addr: String,
    pub state: NodeState,
}

/// A coordinator shard's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardInfo {
    pub shard: ShardId,
    pub owner: Option<BrokerId>,
    pub epoch: Epoch,
    pub handover_to: Option<BrokerId>,
}

/// The cluster as brokers and proxies need it: who is where and who owns what.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterView {
    pub revision: Revision,
    /// Nothing changed after the revision asked from: every other field
    /// is empty, and the poller keeps the view it has.
    pub unchanged: bool,
    /// Only what changed after the revision asked from: `topics` are the
    /// topics that changed, `deleted_topics` those gone; the rest is whole.
    pub partial: bool,
    pub deleted_topics: Vec<TopicId>,
    pub nodes: Vec<NodeInfo>,
    pub topics: Vec<TopicInfo>,
    pub shards: Vec<ShardInfo>,
    pub quotas: crate::quota::QuotaModel,
    /// Users' SCRAM credentials (salted and hashed; never a password).
    pub scram: crate::scram::ScramModel,
    /// The ACLs.
    /// `None`: unchanged since the revision the view was asked from.
    pub acls: Option<crate::acl::AclModel>,
}

/// One committed range of a partition's log: offsets → bytes of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub object_id: ObjectId,
    pub object: ObjectRef,
    pub byte_start: u64,
    pub byte_len: u64,
}

/// A partition's committed index from some offset on, with its owner and
/// ends and the idempotent producers' last batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionIndex {
    pub info: PartitionInfo,
    pub entries: Vec<IndexEntry>,
    pub producers: Vec<ProducerBatch>,
    /// Its open transactions, and the aborted ones from the offset asked for.
    pub txns: crate::txn::PartitionTxns,
}

/// A broker's commit of one WAL object: each partition's range at the epoch
/// it was sequenced under. Accepted only at the current epoch and end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub broker: BrokerId,
    pub object: ObjectRef,
    pub ranges: Vec<CommitRange>,
}

/// What a commit became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOutcome {
    /// The id the metadata gave the object.
    pub object: ObjectId,
    pub high_watermarks: Vec<(PartitionKey, i64)>,
    pub revision: Revision,
}

/// An object no committed range refers to any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreferencedObject {
    pub id: ObjectId,
    pub object: ObjectRef,
}
