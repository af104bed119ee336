//! Protobuf messages of the metadata HTTP API (prost). Every route takes and
//! returns one of these with `Content-Type: application/x-protobuf`; errors
//! come back as [`ErrorBody`] with a 4xx/5xx status.

use std::collections::HashMap;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// Any failed call.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ErrorBody {
    /// `crate::ErrorKind` as text (`NotLeader`, `StaleEpoch`, …).
    #[prost(string, tag = "1")]
    pub kind: String,
    #[prost(string, tag = "2")]
    pub message: String,
    /// For `NotLeader`: the leader's API address, when known.
    #[prost(string, tag = "3")]
    pub leader_addr: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateTopicRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(uint32, tag = "2")]
    pub partitions: u32,
    #[prost(map = "string, string", tag = "3")]
    pub configs: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateTopicResponse {
    #[prost(string, tag = "1")]
    pub topic_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TopicName {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AlterTopicConfigRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(map = "string, string", tag = "2")]
    pub set: HashMap<String, String>,
    #[prost(string, repeated, tag = "3")]
    pub delete: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreatePartitionsRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(uint32, tag = "2")]
    pub total: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigEntry {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
    #[prost(bool, tag = "3")]
    pub is_default: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PartitionInfo {
    #[prost(uint32, tag = "1")]
    pub partition: u32,
    /// 0 when unowned (broker ids start at 1).
    #[prost(uint32, tag = "2")]
    pub owner: u32,
    #[prost(uint64, tag = "3")]
    pub epoch: u64,
    #[prost(int64, tag = "4")]
    pub log_start_offset: i64,
    #[prost(int64, tag = "5")]
    pub high_watermark: i64,
    /// A hand-over in progress to this broker (0: none): the owner should
    /// finish what it has in flight and release.
    #[prost(uint32, tag = "6")]
    pub handover_to: u32,
    /// Bytes the partition's committed ranges hold from its log start (a
    /// described topic only; absent in the cluster view).
    #[prost(uint64, optional, tag = "7")]
    pub stored_bytes: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TopicInfo {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub topic_id: String,
    #[prost(uint32, tag = "3")]
    pub partition_count: u32,
    #[prost(message, repeated, tag = "4")]
    pub configs: Vec<ConfigEntry>,
    #[prost(message, repeated, tag = "5")]
    pub partitions: Vec<PartitionInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListTopicsResponse {
    #[prost(message, repeated, tag = "1")]
    pub topics: Vec<TopicInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterRequest {
    /// 0: a proxy asks to be given an id.
    #[prost(uint32, tag = "1")]
    pub id: u32,
    /// "broker" or "proxy".
    #[prost(string, tag = "2")]
    pub kind: String,
    #[prost(string, tag = "3")]
    pub addr: String,
    #[prost(uint64, tag = "4")]
    pub lease_ms: u64,
    /// The node's Floe version (`floe_types::version::VERSION`); empty
    /// from versions before it was sent (0.1.0), which are not checked.
    #[prost(string, tag = "5")]
    pub version: String,
}

/// The id a node is registered under (a proxy that gave 0 is given one).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterResponse {
    #[prost(uint32, tag = "1")]
    pub id: u32,
    /// The answering metadata node's Floe version (empty before 0.1.1).
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HeartbeatRequest {
    #[prost(uint32, tag = "1")]
    pub id: u32,
}

/// A broker whose address refused a connection (`/v1/nodes/down`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeDownRequest {
    #[prost(uint32, tag = "1")]
    pub id: u32,
    /// The address that refused: the broker's, as the reporter's view had it.
    #[prost(string, tag = "2")]
    pub addr: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeDownResponse {
    /// Whether the broker was marked dead (false: it was not registered
    /// there any more, or its address accepted the leader's own connection).
    #[prost(bool, tag = "1")]
    pub expired: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Partition {
    #[prost(string, tag = "1")]
    pub topic_id: String,
    #[prost(uint32, tag = "2")]
    pub partition: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CommitRange {
    #[prost(message, optional, tag = "1")]
    pub partition: Option<Partition>,
    #[prost(uint64, tag = "2")]
    pub epoch: u64,
    #[prost(int64, tag = "3")]
    pub first_offset: i64,
    #[prost(int64, tag = "4")]
    pub last_offset: i64,
    #[prost(int64, tag = "5")]
    pub max_timestamp: i64,
    /// 0: the object this commit introduces; otherwise an existing object id.
    #[prost(uint64, tag = "6")]
    pub object_id: u64,
    #[prost(uint64, tag = "7")]
    pub byte_start: u64,
    #[prost(uint64, tag = "8")]
    pub byte_len: u64,
    #[prost(message, repeated, tag = "9")]
    pub producers: Vec<ProducerBatch>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StoreObject {
    #[prost(string, tag = "1")]
    pub endpoint: String,
    #[prost(string, tag = "2")]
    pub key: String,
    #[prost(uint64, tag = "3")]
    pub size: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CommitRequest {
    #[prost(uint32, tag = "1")]
    pub broker: u32,
    #[prost(message, optional, tag = "2")]
    pub object: Option<StoreObject>,
    #[prost(message, repeated, tag = "3")]
    pub ranges: Vec<CommitRange>,
    /// Transactional batches and markers in the ranges, per partition
    /// (`crate::txn::RangeTxns`); empty for most commits.
    #[prost(message, repeated, tag = "4")]
    pub txns: Vec<RangeTxns>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HighWatermark {
    #[prost(message, optional, tag = "1")]
    pub partition: Option<Partition>,
    #[prost(int64, tag = "2")]
    pub high_watermark: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CommitResponse {
    #[prost(uint64, tag = "1")]
    pub object_id: u64,
    #[prost(message, repeated, tag = "2")]
    pub high_watermarks: Vec<HighWatermark>,
    /// The Raft log index of the commit.
    #[prost(uint64, tag = "3")]
    pub revision: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct IndexRequest {
    #[prost(message, optional, tag = "1")]
    pub partition: Option<Partition>,
    /// Only entries whose last offset is at or after this.
    #[prost(int64, tag = "2")]
    pub from_offset: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct IndexEntry {
    #[prost(int64, tag = "1")]
    pub first_offset: i64,
    #[prost(int64, tag = "2")]
    pub last_offset: i64,
    #[prost(int64, tag = "3")]
    pub max_timestamp: i64,
    #[prost(uint64, tag = "4")]
    pub object_id: u64,
    #[prost(message, optional, tag = "5")]
    pub object: Option<StoreObject>,
    #[prost(uint64, tag = "6")]
    pub byte_start: u64,
    #[prost(uint64, tag = "7")]
    pub byte_len: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct IndexResponse {
    #[prost(message, optional, tag = "1")]
    pub info: Option<PartitionInfo>,
    #[prost(message, repeated, tag = "2")]
    pub entries: Vec<IndexEntry>,
    /// The partition's idempotent producers (their last batches).
    #[prost(message, repeated, tag = "3")]
    pub producers: Vec<ProducerBatch>,
    /// Transactions open on the partition.
    #[prost(message, repeated, tag = "4")]
    pub open_txns: Vec<OpenTxn>,
    /// Aborted transactions ending at or after the index's first offset asked for.
    #[prost(message, repeated, tag = "5")]
    pub aborted_txns: Vec<AbortedTxn>,
}

/// Several partitions' indexes in one read (a take-over).
#[derive(Clone, PartialEq, prost::Message)]
pub struct IndexesRequest {
    #[prost(message, repeated, tag = "1")]
    pub partitions: Vec<IndexRequest>,
}

/// The indexes asked for, in the order asked; a partition the state does
/// not hold is answered without `info`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IndexesResponse {
    #[prost(message, repeated, tag = "1")]
    pub indexes: Vec<IndexResponse>,
}

/// An idempotent producer's batch (in a commit, or remembered by a partition).
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct ProducerBatch {
    #[prost(int64, tag = "1")]
    pub producer_id: i64,
    #[prost(int32, tag = "2")]
    pub epoch: i32,
    #[prost(int32, tag = "3")]
    pub first_sequence: i32,
    #[prost(int32, tag = "4")]
    pub last_sequence: i32,
    #[prost(int64, tag = "5")]
    pub first_offset: i64,
    #[prost(int64, tag = "6")]
    pub last_offset: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupOffset {
    #[prost(string, tag = "1")]
    pub topic: String,
    #[prost(uint32, tag = "2")]
    pub partition: u32,
    #[prost(int64, tag = "3")]
    pub offset: i64,
    #[prost(int32, tag = "4")]
    pub leader_epoch: i32,
    #[prost(string, tag = "5")]
    pub metadata: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CommitOffsetsRequest {
    #[prost(string, tag = "1")]
    pub group: String,
    #[prost(message, repeated, tag = "2")]
    pub offsets: Vec<GroupOffset>,
    /// The coordinator committing: its broker id, the group's shard and the
    /// shard epoch it holds (required for a commit). A delete gives the
    /// coordinator it was decided with (0: none, unfenced).
    #[prost(uint32, tag = "3")]
    pub broker: u32,
    #[prost(uint32, tag = "4")]
    pub shard: u32,
    #[prost(uint64, tag = "5")]
    pub shard_epoch: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CommitOffsetsResponse {
    /// Offsets not stored: their topic or partition does not exist
    /// (only topic and partition are set).
    #[prost(message, repeated, tag = "1")]
    pub unknown: Vec<GroupOffset>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct FetchOffsetsRequest {
    #[prost(string, tag = "1")]
    pub group: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct FetchOffsetsResponse {
    #[prost(message, repeated, tag = "1")]
    pub offsets: Vec<GroupOffset>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProducerIdsRequest {
    #[prost(uint32, tag = "1")]
    pub count: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProducerIdsResponse {
    #[prost(int64, tag = "1")]
    pub first: i64,
    #[prost(uint32, tag = "2")]
    pub count: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchRequest {
    #[prost(uint64, tag = "1")]
    pub since_revision: u64,
    #[prost(uint64, tag = "2")]
    pub timeout_ms: u64,
    /// The poller understands [`ClusterView::unchanged`] (older pollers
    /// leave it false and are sent the whole view every time).
    #[prost(bool, tag = "3")]
    pub accept_unchanged: bool,
    /// The poller understands [`ClusterView::partial`] (older pollers
    /// leave it false and are sent the whole view).
    #[prost(bool, tag = "4")]
    pub accept_partial: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeInfo {
    #[prost(uint32, tag = "1")]
    pub id: u32,
    #[prost(string, tag = "2")]
    pub kind: String,
    #[prost(string, tag = "3")]
    pub addr: String,
    /// "live", "draining" or "dead".
    #[prost(string, tag = "4")]
    pub state: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ShardInfo {
    #[prost(uint32, tag = "1")]
    pub shard: u32,
    #[prost(uint32, tag = "2")]
    pub owner: u32,
    #[prost(uint64, tag = "3")]
    pub epoch: u64,
    #[prost(uint32, tag = "4")]
    pub handover_to: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PartitionEpoch {
    #[prost(message, optional, tag = "1")]
    pub partition: Option<Partition>,
    #[prost(uint64, tag = "2")]
    pub epoch: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ShardEpoch {
    #[prost(uint32, tag = "1")]
    pub shard: u32,
    #[prost(uint64, tag = "2")]
    pub epoch: u64,
}

/// An owner gives up partitions and shards it holds at these epochs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReleaseRequest {
    #[prost(uint32, tag = "1")]
    pub broker: u32,
    #[prost(message, repeated, tag = "2")]
    pub partitions: Vec<PartitionEpoch>,
    #[prost(message, repeated, tag = "3")]
    pub shards: Vec<ShardEpoch>,
}

/// The cluster as brokers and proxies need it: who is where and who owns what.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClusterView {
    #[prost(uint64, tag = "1")]
    pub revision: u64,
    #[prost(message, repeated, tag = "2")]
    pub nodes: Vec<NodeInfo>,
    #[prost(message, repeated, tag = "3")]
    pub topics: Vec<TopicInfo>,
    #[prost(message, repeated, tag = "4")]
    pub shards: Vec<ShardInfo>,
    /// Client quotas (`crate::quota`).
    #[prost(message, repeated, tag = "5")]
    pub quotas: Vec<QuotaEntry>,
    /// Users' SCRAM credentials (`crate::scram`).
    #[prost(message, repeated, tag = "6")]
    pub scram: Vec<ScramUser>,
    /// The ACLs (`crate::acl`), unless `acls_unchanged`.
    #[prost(message, repeated, tag = "7")]
    pub acls: Vec<AclEntry>,
    /// The ACLs are left out: they did not change since the revision the
    /// watch asked from (the asker has them).
    #[prost(bool, tag = "8")]
    pub acls_unchanged: bool,
    /// Nothing in the view changed after the revision asked from (which
    /// `revision` repeats); every other field is empty. Sent only to a
    /// poller that set [`WatchRequest::accept_unchanged`].
    #[prost(bool, tag = "9")]
    pub unchanged: bool,
    /// Only what changed after the revision asked from: `topics` holds the
    /// topics that changed (whole), `deleted_topic_ids` those deleted;
    /// nodes, shards, quotas and users are whole as ever. Sent only to a
    /// poller that set [`WatchRequest::accept_partial`].
    #[prost(bool, tag = "10")]
    pub partial: bool,
    #[prost(string, repeated, tag = "11")]
    pub deleted_topic_ids: Vec<String>,
}

/// One ACL, with Kafka's codes for its resource type, pattern type,
/// operation and permission.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AclEntry {
    #[prost(int32, tag = "1")]
    pub resource_type: i32,
    #[prost(string, tag = "2")]
    pub resource_name: String,
    #[prost(int32, tag = "3")]
    pub pattern: i32,
    #[prost(string, tag = "4")]
    pub principal: String,
    #[prost(string, tag = "5")]
    pub host: String,
    #[prost(int32, tag = "6")]
    pub operation: i32,
    #[prost(int32, tag = "7")]
    pub permission: i32,
}

/// A filter of ACLs, Kafka's codes; 1 (ANY) or an absent string matches
/// anything.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AclFilterEntry {
    #[prost(int32, tag = "1")]
    pub resource_type: i32,
    #[prost(string, optional, tag = "2")]
    pub resource_name: Option<String>,
    #[prost(int32, tag = "3")]
    pub pattern: i32,
    #[prost(string, optional, tag = "4")]
    pub principal: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub host: Option<String>,
    #[prost(int32, tag = "6")]
    pub operation: i32,
    #[prost(int32, tag = "7")]
    pub permission: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateAclsRequest {
    #[prost(message, repeated, tag = "1")]
    pub acls: Vec<AclEntry>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateAclsResponse {
    /// The revision at which the ACLs were added.
    #[prost(uint64, tag = "1")]
    pub revision: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteAclsRequest {
    #[prost(message, repeated, tag = "1")]
    pub filters: Vec<AclFilterEntry>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AclList {
    #[prost(message, repeated, tag = "1")]
    pub acls: Vec<AclEntry>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteAclsResponse {
    /// The revision at which the ACLs were removed.
    #[prost(uint64, tag = "1")]
    pub revision: u64,
    /// The ACLs removed, per filter in the request's order.
    #[prost(message, repeated, tag = "2")]
    pub deleted: Vec<AclList>,
}

/// One SCRAM credential: a mechanism (Kafka's type: 1 SCRAM-SHA-256, 2
/// SCRAM-SHA-512) and what is stored of it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScramCredential {
    #[prost(int32, tag = "1")]
    pub mechanism: i32,
    #[prost(bytes = "vec", tag = "2")]
    pub salt: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub stored_key: Vec<u8>,
    #[prost(bytes = "vec", tag = "4")]
    pub server_key: Vec<u8>,
    #[prost(uint32, tag = "5")]
    pub iterations: u32,
}

/// A user's SCRAM credentials (in the view), or a change to them: the
/// credentials set and the mechanisms deleted.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScramUser {
    #[prost(string, tag = "1")]
    pub user: String,
    #[prost(message, repeated, tag = "2")]
    pub credentials: Vec<ScramCredential>,
    #[prost(int32, repeated, tag = "3")]
    pub delete: Vec<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AlterScramRequest {
    #[prost(message, repeated, tag = "1")]
    pub users: Vec<ScramUser>,
}

/// Each user's outcome, in the request's order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScramResult {
    #[prost(string, tag = "1")]
    pub user: String,
    /// Empty when the user's change applied; else the error's kind name.
    #[prost(string, tag = "2")]
    pub error_kind: String,
    #[prost(string, tag = "3")]
    pub message: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AlterScramResponse {
    /// The revision at which the changes applied.
    #[prost(uint64, tag = "1")]
    pub revision: u64,
    #[prost(message, repeated, tag = "2")]
    pub results: Vec<ScramResult>,
}

/// One part of a client-quota entity: its type (`user`, `client-id`) and
/// its name, or the default of that type.
#[derive(Clone, PartialEq, prost::Message)]
pub struct QuotaEntityPart {
    #[prost(string, tag = "1")]
    pub entity_type: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(bool, tag = "3")]
    pub is_default: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct QuotaValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(uint64, tag = "2")]
    pub value: u64,
}

/// An entity's quotas (in the view), or a change to them (`remove`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct QuotaEntry {
    #[prost(message, repeated, tag = "1")]
    pub entity: Vec<QuotaEntityPart>,
    #[prost(message, repeated, tag = "2")]
    pub values: Vec<QuotaValue>,
    #[prost(string, repeated, tag = "3")]
    pub remove: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AlterQuotasRequest {
    #[prost(message, repeated, tag = "1")]
    pub alterations: Vec<QuotaEntry>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AlterQuotasResponse {
    /// The revision at which the change applied: a proxy waits for its
    /// view to reach it before answering.
    #[prost(uint64, tag = "1")]
    pub revision: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Member {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(string, tag = "2")]
    pub addr: String,
    #[prost(bool, tag = "3")]
    pub voter: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusResponse {
    #[prost(uint64, tag = "1")]
    pub node_id: u64,
    /// 0 when no leader is known.
    #[prost(uint64, tag = "2")]
    pub leader_id: u64,
    #[prost(string, tag = "3")]
    pub leader_addr: String,
    #[prost(uint64, tag = "4")]
    pub term: u64,
    #[prost(message, repeated, tag = "5")]
    pub members: Vec<Member>,
    #[prost(uint64, tag = "6")]
    pub last_applied: u64,
    #[prost(uint64, tag = "7")]
    pub last_log_index: u64,
    #[prost(uint64, tag = "8")]
    pub snapshot_index: u64,
    #[prost(string, tag = "9")]
    pub state: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AddMemberRequest {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(string, tag = "2")]
    pub addr: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RemoveMemberRequest {
    #[prost(uint64, tag = "1")]
    pub id: u64,
}

/// A share group's state of one partition (see `Command::ShareState`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ShareStateRequest {
    #[prost(uint32, tag = "1")]
    pub broker: u32,
    #[prost(message, optional, tag = "2")]
    pub partition: Option<Partition>,
    #[prost(uint64, tag = "3")]
    pub epoch: u64,
    #[prost(string, tag = "4")]
    pub group: String,
    /// The share-partition start offset.
    #[prost(int64, tag = "5")]
    pub start_offset: i64,
    /// The in-flight window, as the broker encodes it.
    #[prost(string, tag = "6")]
    pub state: String,
}

/// Deletes a share group's state of a partition, from the partition's
/// owner at its epoch.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ShareForgetRequest {
    #[prost(uint32, tag = "1")]
    pub broker: u32,
    #[prost(message, optional, tag = "2")]
    pub partition: Option<Partition>,
    #[prost(uint64, tag = "3")]
    pub epoch: u64,
    #[prost(string, tag = "4")]
    pub group: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TruncateRequest {
    #[prost(uint32, tag = "1")]
    pub broker: u32,
    #[prost(message, optional, tag = "2")]
    pub partition: Option<Partition>,
    #[prost(uint64, tag = "3")]
    pub epoch: u64,
    #[prost(int64, tag = "4")]
    pub log_start_offset: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TruncateResponse {
    #[prost(int64, tag = "1")]
    pub log_start_offset: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ReplaceRangesRequest {
    #[prost(uint32, tag = "1")]
    pub broker: u32,
    #[prost(message, optional, tag = "2")]
    pub partition: Option<Partition>,
    #[prost(uint64, tag = "3")]
    pub epoch: u64,
    #[prost(int64, tag = "4")]
    pub first_offset: i64,
    #[prost(int64, tag = "5")]
    pub last_offset: i64,
    #[prost(int64, tag = "6")]
    pub max_timestamp: i64,
    #[prost(message, optional, tag = "7")]
    pub object: Option<StoreObject>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ObjectEntry {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(message, optional, tag = "2")]
    pub object: Option<StoreObject>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ObjectList {
    #[prost(message, repeated, tag = "1")]
    pub objects: Vec<ObjectEntry>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ForgetObjectsRequest {
    #[prost(uint64, repeated, tag = "1")]
    pub ids: Vec<u64>,
}

/// Where a store object is (see `routes::UnknownObjects`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ObjectName {
    #[prost(string, tag = "1")]
    pub endpoint: String,
    #[prost(string, tag = "2")]
    pub key: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UnknownObjectsRequest {
    /// At most `UNKNOWN_OBJECTS_MAX` of them.
    #[prost(message, repeated, tag = "1")]
    pub objects: Vec<ObjectName>,
}

/// How many objects the metadata's object table holds on one endpoint.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EndpointObjects {
    #[prost(string, tag = "1")]
    pub endpoint: String,
    #[prost(uint64, tag = "2")]
    pub objects: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UnknownObjectsResponse {
    /// The positions, in the request, of the objects the table does not
    /// hold, in ascending order.
    #[prost(uint32, repeated, tag = "1")]
    pub unknown: Vec<u32>,
    /// The endpoints the table holds objects on.
    #[prost(message, repeated, tag = "2")]
    pub endpoints: Vec<EndpointObjects>,
}

/// A group with stored offsets (see `routes::StoredGroups`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoredGroup {
    #[prost(string, tag = "1")]
    pub group: String,
    /// One of its offsets is a share-partition's state
    /// ([`crate::command::SHARE_STATE_PREFIX`]).
    #[prost(bool, tag = "2")]
    pub share: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StoredGroupsResponse {
    #[prost(message, repeated, tag = "1")]
    pub groups: Vec<StoredGroup>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteGroupsRequest {
    #[prost(string, repeated, tag = "1")]
    pub groups: Vec<String>,
    /// The coordinator the delete was decided with: its broker id (0:
    /// none, unfenced), the group's shard and the shard epoch the caller
    /// routed by. With a coordinator, one group only.
    #[prost(uint32, tag = "2")]
    pub broker: u32,
    #[prost(uint32, tag = "3")]
    pub shard: u32,
    #[prost(uint64, tag = "4")]
    pub shard_epoch: u64,
}

/// One Parquet file of a partition's exports (see `crate::export`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportFile {
    #[prost(string, tag = "1")]
    pub endpoint: String,
    #[prost(string, tag = "2")]
    pub key: String,
    #[prost(int64, tag = "3")]
    pub first_offset: i64,
    #[prost(int64, tag = "4")]
    pub last_offset: i64,
    #[prost(uint64, tag = "5")]
    pub rows: u64,
    #[prost(uint64, tag = "6")]
    pub size: u64,
    #[prost(int64, tag = "7")]
    pub min_timestamp: i64,
    #[prost(int64, tag = "8")]
    pub max_timestamp: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportStateRequest {
    #[prost(string, tag = "1")]
    pub topic: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PartitionExport {
    #[prost(uint32, tag = "1")]
    pub partition: u32,
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    #[prost(int64, tag = "3")]
    pub next_offset: i64,
    #[prost(message, optional, tag = "4")]
    pub pending: Option<ExportFile>,
    #[prost(message, repeated, tag = "5")]
    pub files: Vec<ExportFile>,
    #[prost(int64, tag = "6")]
    pub log_start_offset: i64,
    #[prost(int64, tag = "7")]
    pub high_watermark: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportStateResponse {
    #[prost(string, tag = "1")]
    pub topic_id: String,
    #[prost(message, repeated, tag = "2")]
    pub partitions: Vec<PartitionExport>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportBeginRequest {
    #[prost(message, optional, tag = "1")]
    pub partition: Option<Partition>,
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    #[prost(message, optional, tag = "3")]
    pub file: Option<ExportFile>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportCommitRequest {
    #[prost(message, optional, tag = "1")]
    pub partition: Option<Partition>,
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    #[prost(message, optional, tag = "3")]
    pub file: Option<ExportFile>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportForgetRequest {
    #[prost(message, optional, tag = "1")]
    pub partition: Option<Partition>,
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    #[prost(string, repeated, tag = "3")]
    pub keys: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportResetRequest {
    #[prost(string, tag = "1")]
    pub topic: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportResetResponse {
    #[prost(uint64, tag = "1")]
    pub generation: u64,
}

/// A producer id and epoch (the epoch is an i16 in Kafka).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnProducer {
    #[prost(int64, tag = "1")]
    pub producer_id: i64,
    #[prost(int32, tag = "2")]
    pub epoch: i32,
}

/// One step of a transaction coordinator (`crate::txn::TxnOp`): `op` says
/// which (1 init producer, 2 add partitions, 3 add group, 4 commit
/// offsets, 5 end, 6 complete, 7 abort expired) and which fields it uses.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnRequest {
    /// The coordinator: its broker id, the shard and the shard epoch it holds.
    #[prost(uint32, tag = "1")]
    pub broker: u32,
    #[prost(uint32, tag = "2")]
    pub shard: u32,
    #[prost(uint64, tag = "3")]
    pub shard_epoch: u64,
    #[prost(string, tag = "4")]
    pub transactional_id: String,
    #[prost(uint64, tag = "5")]
    pub now_ms: u64,
    #[prost(uint32, tag = "6")]
    pub op: u32,
    /// The client's producer id and epoch (for init: the ones it already
    /// has, if any).
    #[prost(message, optional, tag = "7")]
    pub producer: Option<TxnProducer>,
    #[prost(uint32, tag = "8")]
    pub timeout_ms: u32,
    #[prost(uint32, tag = "9")]
    pub max_timeout_ms: u32,
    #[prost(message, repeated, tag = "10")]
    pub partitions: Vec<Partition>,
    #[prost(string, tag = "11")]
    pub group: String,
    #[prost(message, repeated, tag = "12")]
    pub offsets: Vec<GroupOffset>,
    #[prost(bool, tag = "13")]
    pub commit: bool,
}

/// A group in a transaction with its pending offsets.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnGroup {
    #[prost(string, tag = "1")]
    pub group: String,
    #[prost(message, repeated, tag = "2")]
    pub offsets: Vec<GroupOffset>,
}

/// A transactional id's state (`crate::txn::TxnMeta`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnInfo {
    #[prost(string, tag = "1")]
    pub transactional_id: String,
    #[prost(message, optional, tag = "2")]
    pub producer: Option<TxnProducer>,
    #[prost(message, optional, tag = "3")]
    pub previous: Option<TxnProducer>,
    /// `TxnState::code`.
    #[prost(uint32, tag = "4")]
    pub state: u32,
    #[prost(uint32, tag = "5")]
    pub timeout_ms: u32,
    #[prost(uint64, tag = "6")]
    pub started_ms: u64,
    #[prost(uint64, tag = "7")]
    pub updated_ms: u64,
    #[prost(message, repeated, tag = "8")]
    pub partitions: Vec<Partition>,
    #[prost(message, repeated, tag = "9")]
    pub groups: Vec<TxnGroup>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnResponse {
    /// `TxnError::code`, 0 when accepted.
    #[prost(uint32, tag = "1")]
    pub refused: u32,
    /// The state after the step (absent: the id has none).
    #[prost(message, optional, tag = "2")]
    pub txn: Option<TxnInfo>,
    /// Offsets not kept: their partition does not exist.
    #[prost(message, repeated, tag = "3")]
    pub unknown: Vec<GroupOffset>,
}

/// Which transactional ids to list (`crate::txn::TxnFilter`); an empty
/// request (as older clients send) lists every id.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnListRequest {
    #[prost(string, repeated, tag = "1")]
    pub ids: Vec<String>,
    #[prost(int64, optional, tag = "2")]
    pub producer_id: Option<i64>,
    /// With `shards`: the ids of those shards out of this many.
    #[prost(uint32, optional, tag = "3")]
    pub shard_count: Option<u32>,
    #[prost(uint32, repeated, tag = "4")]
    pub shards: Vec<u32>,
    #[prost(string, optional, tag = "5")]
    pub pending_group: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnListResponse {
    #[prost(message, repeated, tag = "1")]
    pub txns: Vec<TxnInfo>,
}

/// A transactional event in a committed range (`crate::txn::TxnEvent`):
/// `kind` 1 a transaction begins, 2 a COMMIT marker, 3 an ABORT marker.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct TxnEvent {
    #[prost(uint32, tag = "1")]
    pub kind: u32,
    #[prost(int64, tag = "2")]
    pub producer_id: i64,
    #[prost(int32, tag = "3")]
    pub epoch: i32,
    #[prost(int64, tag = "4")]
    pub offset: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeTxns {
    #[prost(message, optional, tag = "1")]
    pub partition: Option<Partition>,
    #[prost(message, repeated, tag = "2")]
    pub events: Vec<TxnEvent>,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct OpenTxn {
    #[prost(int64, tag = "1")]
    pub producer_id: i64,
    #[prost(int32, tag = "2")]
    pub epoch: i32,
    #[prost(int64, tag = "3")]
    pub first_offset: i64,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct AbortedTxn {
    #[prost(int64, tag = "1")]
    pub producer_id: i64,
    #[prost(int64, tag = "2")]
    pub first_offset: i64,
    #[prost(int64, tag = "3")]
    pub last_offset: i64,
}

/// A classic group's membership from its coordinator (see
/// `Command::StoreGroup`); no `record` forgets it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoreGroupRequest {
    #[prost(uint32, tag = "1")]
    pub broker: u32,
    #[prost(uint32, tag = "2")]
    pub shard: u32,
    #[prost(uint64, tag = "3")]
    pub shard_epoch: u64,
    #[prost(string, tag = "4")]
    pub group: String,
    #[prost(bytes = "vec", optional, tag = "5")]
    pub record: Option<Vec<u8>>,
}

/// The stored membership of every group of one coordinator shard.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupRecordsRequest {
    #[prost(uint32, tag = "1")]
    pub shard: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupRecordsResponse {
    #[prost(message, repeated, tag = "1")]
    pub groups: Vec<GroupRecord>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupRecord {
    #[prost(string, tag = "1")]
    pub group: String,
    #[prost(bytes = "vec", tag = "2")]
    pub record: Vec<u8>,
}

/// A group's configs: asked by group id.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupConfigsRequest {
    #[prost(string, tag = "1")]
    pub group: String,
}

/// The configs set on a group (keys not listed are at their defaults, see
/// `crate::group_config`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct GroupConfigsResponse {
    #[prost(map = "string, string", tag = "1")]
    pub set: HashMap<String, String>,
}

/// A broker resource's dynamic configs (`crate::broker_config`): asked by
/// its name (a broker id, or empty for every broker).
#[derive(Clone, PartialEq, prost::Message)]
pub struct BrokerConfigsRequest {
    #[prost(string, tag = "1")]
    pub broker: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BrokerConfigsResponse {
    /// The configs set on the broker id asked.
    #[prost(map = "string, string", tag = "1")]
    pub set: HashMap<String, String>,
    /// The configs set for every broker (the empty name).
    #[prost(map = "string, string", tag = "2")]
    pub cluster_default: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AlterBrokerConfigRequest {
    #[prost(string, tag = "1")]
    pub broker: String,
    #[prost(map = "string, string", tag = "2")]
    pub set: HashMap<String, String>,
    #[prost(string, repeated, tag = "3")]
    pub delete: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AlterGroupConfigRequest {
    #[prost(string, tag = "1")]
    pub group: String,
    #[prost(map = "string, string", tag = "2")]
    pub set: HashMap<String, String>,
    #[prost(string, repeated, tag = "3")]
    pub delete: Vec<String>,
}

/// A node on record, as `floe cluster nodes` lists it (`routes::ListNodes`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeRecord {
    #[prost(uint32, tag = "1")]
    pub id: u32,
    /// "broker" or "proxy".
    #[prost(string, tag = "2")]
    pub kind: String,
    #[prost(string, tag = "3")]
    pub addr: String,
    /// "live", "draining" or "dead".
    #[prost(string, tag = "4")]
    pub state: String,
    /// The node's lease, and when it ends (ms since the Unix epoch, on the
    /// leader's clock that last renewed it).
    #[prost(uint64, tag = "5")]
    pub lease_ms: u64,
    #[prost(uint64, tag = "6")]
    pub lease_until_ms: u64,
    /// When a dead node was found dead (0: not dead, or not stamped yet).
    #[prost(uint64, tag = "7")]
    pub dead_since_ms: u64,
    /// When a dead node is removed, at the earliest (0: not dead, not
    /// stamped yet, or dead nodes are kept).
    #[prost(uint64, tag = "8")]
    pub removal_due_ms: u64,
    /// Partitions and coordinator shards that still name it (as owner or
    /// hand-over target): a dead node is kept while any does.
    #[prost(uint32, tag = "9")]
    pub held_by: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListNodesResponse {
    /// Every node on record, by id.
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<NodeRecord>,
    /// The answering node's clock (ms since the Unix epoch), to read the
    /// times above against.
    #[prost(uint64, tag = "2")]
    pub now_ms: u64,
    /// How long a dead node stays on record (`--dead-node-retention-ms`);
    /// 0: forever.
    #[prost(uint64, tag = "3")]
    pub dead_node_retention_ms: u64,
    /// The highest node id ever registered or given: the next node without
    /// an id gets one above it (at least 1001).
    #[prost(uint32, tag = "4")]
    pub highest_id: u32,
}

/// A topic's Iceberg table in the Raft state (`crate::table`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TableStateResponse {
    #[prost(string, tag = "1")]
    pub topic_id: String,
    /// The current metadata file; empty before the first commit.
    #[prost(string, tag = "2")]
    pub metadata_location: String,
    #[prost(uint64, tag = "3")]
    pub version: u64,
    #[prost(message, repeated, tag = "4")]
    pub columns: Vec<TableColumn>,
    /// The compaction in flight, if any.
    #[prost(message, optional, tag = "5")]
    pub compacting: Option<TableCompaction>,
}

/// A compaction of a table's export files (`crate::table::Compaction`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TableCompaction {
    #[prost(uint32, tag = "1")]
    pub partition: u32,
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    #[prost(message, optional, tag = "3")]
    pub file: Option<ExportFile>,
    #[prost(string, repeated, tag = "4")]
    pub replaced: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TableCompactBeginRequest {
    #[prost(string, tag = "1")]
    pub topic: String,
    #[prost(message, optional, tag = "2")]
    pub compaction: Option<TableCompaction>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TableCompactCommitRequest {
    #[prost(string, tag = "1")]
    pub topic: String,
    #[prost(uint32, tag = "2")]
    pub partition: u32,
    #[prost(uint64, tag = "3")]
    pub generation: u64,
    #[prost(message, optional, tag = "4")]
    pub file: Option<ExportFile>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TableColumn {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub kind: String,
    #[prost(int32, tag = "3")]
    pub id: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TableColumnsRequest {
    #[prost(string, tag = "1")]
    pub topic: String,
    /// Names and types (`id` unset).
    #[prost(message, repeated, tag = "2")]
    pub columns: Vec<TableColumn>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TableColumnsResponse {
    #[prost(int32, repeated, tag = "1")]
    pub ids: Vec<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TableCommitRequest {
    #[prost(string, tag = "1")]
    pub topic: String,
    /// The metadata file the commit is based on; empty for the first.
    #[prost(string, tag = "2")]
    pub expected: String,
    #[prost(string, tag = "3")]
    pub location: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TableCommitResponse {
    #[prost(uint64, tag = "1")]
    pub version: u64,
}

#[cfg(test)]
mod format_samples {
    #![allow(clippy::unwrap_used)]

    use prost::Message;

    use super::*;

    /// The messages every role sends or reads to stay in the cluster, as
    /// each release encoded them (`floe_types::format_samples`): a
    /// registration, a flush's commit and the cluster view. Protobuf reads
    /// an older message (a field it lacks takes its default) and skips an
    /// unknown one; the samples hold every release to that.
    fn messages() -> Vec<(&'static str, Vec<u8>)> {
        let partition = Some(Partition {
            topic_id: "5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a".into(),
            partition: 3,
        });
        let register = RegisterRequest {
            id: 2,
            kind: "broker".into(),
            addr: "10.0.0.2:9093".into(),
            lease_ms: 10_000,
            // 0.1.0 sent none; the field is empty here so that this
            // version writes the sample 0.1.0 wrote.
            version: String::new(),
        };
        let commit = CommitRequest {
            broker: 2,
            object: Some(StoreObject {
                endpoint: "default".into(),
                key: "wal/2/000001.wal".into(),
                size: 4_096,
            }),
            ranges: vec![CommitRange {
                partition: partition.clone(),
                epoch: 7,
                first_offset: 100,
                last_offset: 199,
                max_timestamp: 1_767_225_600_000,
                object_id: 0,
                byte_start: 0,
                byte_len: 4_000,
                producers: vec![ProducerBatch {
                    producer_id: 1_000,
                    epoch: 2,
                    first_sequence: 10,
                    last_sequence: 109,
                    first_offset: 100,
                    last_offset: 199,
                }],
            }],
            ..Default::default()
        };
        let view = ClusterView {
            revision: 42,
            nodes: vec![NodeInfo {
                id: 2,
                kind: "broker".into(),
                addr: "10.0.0.2:9093".into(),
                state: "live".into(),
            }],
            topics: vec![TopicInfo {
                name: "orders".into(),
                topic_id: "5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a".into(),
                partition_count: 1,
                configs: vec![ConfigEntry {
                    name: "retention.ms".into(),
                    value: "86400000".into(),
                    ..Default::default()
                }],
                partitions: vec![PartitionInfo {
                    partition: 0,
                    owner: 2,
                    epoch: 7,
                    log_start_offset: 0,
                    high_watermark: 200,
                    handover_to: 0,
                    stored_bytes: Some(4_000),
                }],
            }],
            shards: vec![ShardInfo {
                shard: 0,
                owner: 2,
                epoch: 3,
                handover_to: 0,
            }],
            ..Default::default()
        };
        vec![
            ("meta-api-register.pb", register.encode_to_vec()),
            ("meta-api-commit.pb", commit.encode_to_vec()),
            ("meta-api-view.pb", view.encode_to_vec()),
        ]
    }

    #[test]
    fn metadata_api_messages_of_every_release_decode() {
        let root = floe_types::format_samples::root(env!("CARGO_MANIFEST_DIR"));
        for (name, written) in messages() {
            floe_types::format_samples::check(
                &root,
                env!("CARGO_PKG_VERSION"),
                name,
                &written,
                |release, bytes| {
                    let ok = match name {
                        "meta-api-register.pb" => RegisterRequest::decode(&bytes[..])
                            .map(|m| m.addr == "10.0.0.2:9093" && m.lease_ms == 10_000),
                        "meta-api-commit.pb" => CommitRequest::decode(&bytes[..]).map(|m| {
                            m.ranges.len() == 1
                                && m.ranges[0].last_offset == 199
                                && m.ranges[0].producers[0].last_sequence == 109
                        }),
                        _ => ClusterView::decode(&bytes[..]).map(|m| {
                            m.revision == 42
                                && m.topics[0].partitions[0].high_watermark == 200
                                && m.shards[0].epoch == 3
                        }),
                    };
                    assert!(ok.unwrap(), "{release}: {name} read other values");
                },
            );
        }
    }
}
