//! The commands of the Raft log and their results.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch, ObjectId, PartitionKey, ShardId, TopicId};

/// What kind of process registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeKind {
    Broker,
    Proxy,
}

/// A store object that a commit introduces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewObject {
    pub endpoint: String,
    pub key: String,
    pub size: u64,
}

/// Where a committed range's bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObjectSel {
    /// The object this commit introduces.
    New,
    /// An object already known.
    Existing(ObjectId),
}

/// An idempotent producer's batch in a commit: what the partition's owner
/// needs to recognise a retried batch, after a change of owner too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// One partition's part of a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitRange {
    pub partition: PartitionKey,
    pub epoch: Epoch,
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub object: ObjectSel,
    pub byte_start: u64,
    pub byte_len: u64,
    /// Idempotent batches in the range, in offset order.
    #[serde(default)]
    pub producers: Vec<ProducerBatch>,
}

/// A consumer group's committed offset of one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

/// The group id under which each partition of a delayed topic keeps its
/// scheduler's cursor (the lowest offset that may still hold a pending
/// delayed entry), written by the partition's owner with
/// [`Command::ShareState`] (so fenced by the partition's epoch). Clients
/// cannot commit offsets under it ([`is_reserved_group`]), and it is not
/// listed as a group.
pub const DELAYED_CURSOR_GROUP: &str = "__floe.delayed";

/// Whether a group id is Floe's own (not a client's group).
pub fn is_reserved_group(group: &str) -> bool {
    group == DELAYED_CURSOR_GROUP
}

/// How a share-partition's state (written by [`Command::ShareState`])
/// begins its offset metadata: the broker's encoding of the window is
/// versioned by this prefix, which no classic commit of Floe's clients
/// writes. It is how a group's stored offsets tell a share group from a
/// classic one (one id namespace).
pub const SHARE_STATE_PREFIX: &str = "1;";

/// Whether a stored offset's metadata is a share-partition's state.
pub fn is_share_state(metadata: &str) -> bool {
    metadata.starts_with(SHARE_STATE_PREFIX)
}

/// The coordinator shard an offset commit comes through: the broker that
/// coordinates the group and the shard's epoch it holds. The commit is
/// applied only while that is the shard's current owner and epoch, so a
/// coordinator paused past a move cannot write (move offsets back) later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardFence {
    pub broker: BrokerId,
    pub shard: ShardId,
    pub epoch: Epoch,
}

/// What brokers own: partitions and coordinator shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum OwnedItem {
    Partition(PartitionKey),
    Shard(ShardId),
}

impl std::fmt::Display for OwnedItem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OwnedItem::Partition(p) => write!(f, "partition {p}"),
            OwnedItem::Shard(s) => write!(f, "shard {s}"),
        }
    }
}

/// A change the controller decides: a new owner (or none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnershipChange {
    pub item: OwnedItem,
    pub owner: Option<BrokerId>,
}

/// Every change to the model goes through one of these, in the Raft log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Registers a broker or a proxy, or registers it again (a new lease).
    /// A proxy may give [`crate::state::UNASSIGNED_ID`] to be given an id.
    RegisterNode {
        id: BrokerId,
        kind: NodeKind,
        addr: String,
        now_ms: u64,
        lease_ms: u64,
    },
    Heartbeat {
        id: BrokerId,
        now_ms: u64,
    },
    /// Marks a node as draining: the controller moves its partitions away.
    Drain {
        id: BrokerId,
    },
    /// Marks every live node whose lease ended before `now_ms` as dead and
    /// takes its partitions and shards away (epoch bumped).
    ExpireLeases {
        now_ms: u64,
    },
    /// Moves items at once, at the next epoch (for items whose owner is gone).
    Reassign {
        changes: Vec<OwnershipChange>,
    },
    /// Asks the owners of these items to hand them over to the new owners.
    BeginHandover {
        changes: Vec<OwnershipChange>,
        now_ms: u64,
    },
    /// The owner gives items up (at the epochs it holds them): to the pending
    /// hand-over target if there is one, else to nobody.
    Release {
        broker: BrokerId,
        items: Vec<(OwnedItem, Epoch)>,
    },
    CreateTopic {
        name: String,
        id: TopicId,
        partitions: u32,
        config: BTreeMap<String, String>,
    },
    DeleteTopic {
        name: String,
    },
    AlterTopicConfig {
        name: String,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
    },
    CreatePartitions {
        name: String,
        total: u32,
    },
    /// Appends ranges to partitions' committed log index, all or nothing.
    Commit {
        broker: BrokerId,
        object: Option<NewObject>,
        ranges: Vec<CommitRange>,
        /// The leader's clock when it proposed the commit: when the
        /// producers in it last wrote (`producer.id.expiration.ms`). 0 in
        /// entries written before it existed.
        #[serde(default)]
        now_ms: u64,
    },
    /// Stores a group's offsets of existing partitions (the others are
    /// answered as unknown, see [`Response::OffsetsCommitted`]).
    CommitOffsets {
        group: String,
        offsets: Vec<(String, u32, CommittedOffset)>,
        /// `None` only in entries written before fencing existed.
        #[serde(default)]
        fence: Option<ShardFence>,
    },
    DeleteGroups {
        groups: Vec<String>,
    },
    /// Deletes a group's committed offsets of these (topic, partition)s.
    DeleteOffsets {
        group: String,
        partitions: Vec<(String, u32)>,
    },
    AllocateProducerIds {
        count: u32,
    },
    /// Forgets objects that nothing references any more (after the sweeper deleted them).
    ForgetObjects {
        ids: Vec<ObjectId>,
    },
    /// Moves a partition's log start forward (DeleteRecords, retention):
    /// index entries wholly below it are dropped. Only the owner, at its epoch.
    TruncateLog {
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
        log_start_offset: i64,
    },
    /// Replaces the committed index entries that exactly cover
    /// `first_offset..=last_offset` by one entry in `object` (a segment that
    /// compaction wrote). Only the owner, at its epoch.
    ReplaceRanges {
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
        first_offset: i64,
        last_offset: i64,
        max_timestamp: i64,
        object: NewObject,
    },
    /// The indexer is about to write `file` (see [`crate::export`]).
    ExportBegin {
        partition: PartitionKey,
        generation: u64,
        file: crate::export::ExportFile,
    },
    /// The pending export file is durable (as `file` describes it).
    ExportCommit {
        partition: PartitionKey,
        generation: u64,
        file: crate::export::ExportFile,
    },
    /// Export files whose retention passed.
    ExportForget {
        partition: PartitionKey,
        generation: u64,
        keys: Vec<String>,
    },
    /// Starts a topic's exports over (backfill) at a new generation.
    ExportReset {
        topic: String,
    },
    /// Forgets idempotent producers that have not written to a partition
    /// for more than `expiration_ms` before `now_ms` (Kafka's
    /// `producer.id.expiration.ms`); producers with no known time start
    /// their clock at `now_ms`.
    ExpireProducers {
        now_ms: u64,
        expiration_ms: u64,
    },
    /// Commands proposed at about the same time, in one log entry (group
    /// commit, see [`crate::raft::proposer`]). Each is applied in turn as
    /// if it were alone: one refused changes nothing and does not stop the
    /// others. Answered [`Response::Batch`], one response per command.
    /// Never holds a batch (refused when decoded, see the `batch` module).
    Batch(#[serde(deserialize_with = "batch::deserialize")] Vec<Command>),
    /// A broker found gone before its lease ended: a connection to its
    /// address `addr` was refused, which the metadata leader checked itself
    /// (no process listens there). Marks it dead as [`Command::ExpireLeases`]
    /// would, if it is still registered at `addr`; otherwise nothing (it
    /// registered again elsewhere meanwhile). Answered
    /// [`Response::Expired`]. Last in the enum: the binary encoding numbers
    /// variants by position.
    NodeDown {
        id: BrokerId,
        addr: String,
    },
    /// A transaction coordinator's step on a transactional id (see
    /// [`crate::txn`]), fenced by the coordinator shard's epoch. Answered
    /// [`Response::Txn`] (or [`MetaError::StaleCoordinator`]).
    Txn(crate::txn::TxnCommand),
    /// A [`Command::Commit`] whose ranges hold transactional batches or
    /// markers, with those events per partition (see
    /// [`crate::txn::PartitionTxns`]): applied only if the commit is, and
    /// refused whole if an event lies outside its partition's range.
    /// Answered as a commit. Flushes without such events send `Commit`.
    CommitWithTxns {
        broker: BrokerId,
        object: Option<NewObject>,
        ranges: Vec<CommitRange>,
        now_ms: u64,
        txns: Vec<crate::txn::RangeTxns>,
    },
    /// Forgets transactional ids with no transaction open for more than
    /// `expiration_ms` before `now_ms` (Kafka's
    /// `transactional.id.expiration.ms`); proposed by the controller.
    ExpireTransactionalIds {
        now_ms: u64,
        expiration_ms: u64,
    },
    /// Sets and removes client quotas (AlterClientQuotas), all or nothing
    /// (see [`crate::quota`]). Answered [`Response::Ok`].
    AlterClientQuotas {
        alterations: Vec<crate::quota::QuotaAlteration>,
    },
    /// Sets and removes a group's configs (Kafka's GROUP config resource,
    /// see [`crate::group_config`]), all or nothing. The group need not
    /// exist: its configs are kept apart from its offsets.
    AlterGroupConfig {
        group: String,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
    },
    /// A share group's durable state on one partition (its start offset
    /// and its in-flight window, encoded by the broker in `state.metadata`),
    /// written by the partition's owner at the epoch it holds it: refused
    /// once the partition moved, so a paused old owner cannot answer an
    /// acknowledgement the new one does not know. Stored as the group's
    /// offset of the partition (so the start offset is what
    /// DescribeShareGroupOffsets reads). Answered [`Response::Ok`].
    ShareState {
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
        group: String,
        state: CommittedOffset,
    },
    /// A classic group's membership as its coordinator stored it last (its
    /// generation, leader, members and their assignments, encoded by the
    /// broker), so that the next coordinator of the group's shard resumes
    /// the group where it was, without a rebalance; `None` forgets it (the
    /// group has no members). Fenced by the coordinator's shard. Answered
    /// [`Response::Ok`].
    StoreGroup {
        fence: ShardFence,
        group: String,
        record: Option<Vec<u8>>,
    },
    /// Deletes a share group's state on one partition (a deleted share
    /// group, DeleteShareGroupOffsets), from the partition's owner at the
    /// epoch it holds it, like [`Command::ShareState`]: refused once the
    /// partition moved, so a paused old owner cannot delete the state the
    /// new owner has written since. Answered [`Response::Ok`]; a state
    /// already gone is not an error. (Appended last: postcard numbers
    /// variants by position.)
    ForgetShareState {
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
        group: String,
    },
    /// [`Command::DeleteOffsets`] as OffsetDelete writes it: applied only
    /// while the broker in `fence` owns the group's shard at that epoch
    /// (`StaleCoordinator` otherwise). The proxy decided the delete with
    /// that coordinator (the group not subscribed to the topics); after the
    /// shard has moved on, the decision is stale and must not remove
    /// offsets the new coordinator's group commits. (Appended last:
    /// postcard numbers variants by position.)
    DeleteOffsetsFenced {
        group: String,
        partitions: Vec<(String, u32)>,
        fence: ShardFence,
    },
    /// [`Command::DeleteGroups`] of one group as DeleteGroups writes it,
    /// after its coordinator forgot the group: fenced as
    /// [`Command::DeleteOffsetsFenced`].
    DeleteGroupFenced {
        group: String,
        fence: ShardFence,
    },
    /// Sets and deletes one user's SCRAM credentials
    /// (AlterUserScramCredentials, [`crate::scram`]), all or nothing.
    /// Answered [`Response::Ok`]; a deletion of a credential the user does
    /// not have is refused.
    AlterScramCredentials(crate::scram::ScramAlteration),
    /// Adds ACLs ([`crate::acl`]), all or none (one already there is kept
    /// once). Answered [`Response::Ok`].
    CreateAcls(Vec<crate::acl::AclBinding>),
    /// Removes the ACLs each filter matches. Answered
    /// [`Response::AclsDeleted`].
    DeleteAcls(Vec<crate::acl::AclFilter>),
    /// Sets and removes dynamic broker configs (Kafka's BROKER config
    /// resource, see [`crate::broker_config`]) of one broker id, or of
    /// every broker with the empty name; all or nothing.
    AlterBrokerConfig {
        broker: String,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
    },
    /// The controller's sweep of the dead nodes at `now_ms` (its clock):
    /// a dead node with no death time yet (reported down, or read from an
    /// older snapshot) is dead since `now_ms`; one dead for longer than
    /// `retention_ms` (`None`: kept forever) is removed, unless a partition
    /// or a coordinator shard still names it (see
    /// `NodesState::sweep_dead`). Answered
    /// [`Response::NodesRemoved`]. (Appended last: postcard numbers
    /// variants by position.)
    SweepDeadNodes {
        now_ms: u64,
        retention_ms: Option<u64>,
    },
    /// The field ids of a table's typed columns, new ones given the next
    /// free ids (see [`crate::table`]).
    TableColumns {
        topic: String,
        /// (name, type) pairs.
        columns: Vec<(String, String)>,
    },
    /// Moves a table's pointer from `expected` to `location`, or refuses.
    TableCommit {
        topic: String,
        expected: Option<String>,
        location: String,
    },
    /// Records a compaction of a table's export files before its file is
    /// written (see [`crate::table::Compaction`]).
    TableCompactBegin {
        topic: String,
        compaction: crate::table::Compaction,
    },
    /// Puts a written compacted file in place of the files it replaces.
    TableCompactCommit {
        topic: String,
        partition: u32,
        generation: u64,
        file: crate::export::ExportFile,
    },
}

/// Decoding the commands of a [`Command::Batch`]: a batch inside a batch is
/// refused, so a crafted body cannot nest batches deep enough to exhaust
/// the stack of the node that decodes it (postcard has no depth limit).
mod batch {
    use std::cell::Cell;

    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer};

    use super::Command;

    thread_local! {
        /// Whether this thread is decoding a batch's commands.
        static INSIDE: Cell<bool> = const { Cell::new(false) };
    }

    /// Clears [`INSIDE`] when the batch is decoded (or decoding unwinds).
    struct Inside;

    impl Drop for Inside {
        fn drop(&mut self) {
            INSIDE.with(|i| i.set(false));
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Command>, D::Error> {
        if INSIDE.with(|i| i.replace(true)) {
            return Err(D::Error::custom("a batch of commands inside a batch"));
        }
        let _inside = Inside;
        Vec::<Command>::deserialize(d)
    }
}

/// The result of applying one command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Ok,
    TopicCreated {
        id: TopicId,
    },
    Committed {
        object: Option<ObjectId>,
        high_watermarks: Vec<(PartitionKey, i64)>,
    },
    ProducerIds {
        first: i64,
        count: u32,
    },
    Expired {
        nodes: Vec<BrokerId>,
    },
    LogStart {
        log_start_offset: i64,
    },
    ExportGeneration {
        generation: u64,
    },
    /// Offsets stored, except those of these (topic, partition)s, which do
    /// not exist (nothing was stored for them).
    OffsetsCommitted {
        unknown: Vec<(String, u32)>,
    },
    Error(MetaError),
    /// The responses of a [`Command::Batch`]'s commands, in order.
    Batch(Vec<Response>),
    /// A node is registered under this id (the one it gave, or the one it
    /// was given).
    Registered {
        id: BrokerId,
    },
    /// The answer to a [`Command::Txn`].
    Txn(crate::txn::TxnReply),
    /// The ACLs a [`Command::DeleteAcls`] removed, per filter.
    AclsDeleted(Vec<Vec<crate::acl::AclBinding>>),
    /// The nodes a [`Command::SweepDeadNodes`] removed, in id order.
    NodesRemoved {
        nodes: Vec<BrokerId>,
    },
    /// The field ids of a [`Command::TableColumns`], in its order.
    TableColumnIds {
        ids: Vec<i32>,
    },
    /// The table's version after a [`Command::TableCommit`].
    TableVersion {
        version: u64,
    },
}
