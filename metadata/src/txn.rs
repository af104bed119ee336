//! The transaction coordinator's durable state: per transactional id, its
//! producer id and epoch, its state (Kafka's: Empty, Ongoing, Prepare*,
//! Complete*) and what the open transaction holds, with the rules of every
//! transition ([`TxnOp`]). Applied as Raft commands ([`Command::Txn`]), so a
//! coordinator that takes a shard over finds every transaction as the last
//! one left it. The design is in `docs/transactions.md`.
//!
//! Every operation is fenced twice: by the coordinator shard's epoch (the
//! broker proposing it must still own the shard, as for offset commits), and
//! by the producer id and epoch the client sent (an older instance of a
//! producer is refused with [`TxnError::ProducerFenced`]). Refusals are
//! Kafka's transaction errors one to one, as `floe_broker::group::GroupError`
//! is for groups, so the proxy maps them without guessing.
//!
//! [`Command::Txn`]: crate::command::Command::Txn

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

mod partition;

pub use partition::{AbortedTxn, OpenTxn, PartitionTxns, PartitionsTxns, RangeTxns, TxnEvent};

use crate::command::{CommitRange, CommittedOffset, NewObject, Response, ShardFence};
use crate::ids::BrokerId;
use crate::ids::{PartitionKey, ProducerEpoch, ProducerId, TransactionalId};
use crate::state::{ClusterState, GroupOffsets};

/// Kafka's default `transaction.max.timeout.ms`: 15 minutes.
pub const DEFAULT_TRANSACTION_MAX_TIMEOUT_MS: u32 = 900_000;

/// Kafka's default `transactional.id.expiration.ms`: 7 days. A
/// transactional id with no transaction open that long is forgotten, so
/// ids that clients leave behind do not fill the Raft state.
pub const DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS: u64 = 7 * 24 * 3_600_000;

/// The last epoch a producer id is bumped to; past it, InitProducerId gives
/// a new producer id at epoch 0 (Kafka keeps `i16::MAX` out of use).
pub const LAST_PRODUCER_EPOCH: i16 = i16::MAX - 1;

/// A transaction's state, as Kafka names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    /// Initialised, no transaction open.
    Empty,
    /// Partitions or groups were added: a transaction is open.
    Ongoing,
    /// EndTxn(commit) is decided; the markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a timeout or a new instance decided the abort; the
    /// markers are being written.
    PrepareAbort,
    /// Every COMMIT marker is written, the pending offsets are stored.
    CompleteCommit,
    /// Every ABORT marker is written, the pending offsets are dropped.
    CompleteAbort,
    /// Being removed. Not kept in the state (a removal is one command);
    /// named for DescribeTransactions' sake.
    Dead,
}

impl TxnState {
    /// Kafka's name of the state (DescribeTransactions, ListTransactions).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
        }
    }

    /// Every state, in the order of their wire codes (1 up).
    pub const ALL: [TxnState; 7] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
    ];

    /// The state's number on the metadata API's wire (never 0).
    pub fn code(self) -> u32 {
        Self::ALL
            .iter()
            .position(|s| *s == self)
            .map_or(0, |i| i as u32 + 1)
    }

    /// The state of a wire code.
    pub fn from_code(code: u32) -> Option<TxnState> {
        let i = usize::try_from(code.checked_sub(1)?).ok()?;
        Self::ALL.get(i).copied()
    }

    /// Whether markers are being written (the outcome is decided).
    pub fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// A producer id at an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerIdEpoch {
    pub producer_id: ProducerId,
    pub epoch: ProducerEpoch,
}

/// What the coordinator remembers of one transactional id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnMeta {
    pub producer_id: ProducerId,
    pub epoch: ProducerEpoch,
    /// The producer id and epoch before the last InitProducerId bump that
    /// named them (KIP-360), while nothing else happened since: a client
    /// that lost that answer and asks again with them gets the current ones,
    /// not a fencing error. `None` after a bump by a new instance (no pair
    /// named), so a fenced instance can never present its old pair.
    pub previous: Option<ProducerIdEpoch>,
    pub state: TxnState,
    /// The producer's `transaction.timeout.ms`.
    pub timeout_ms: u32,
    /// When the open transaction started (the proposer's clock); 0 when none is open.
    pub started_ms: u64,
    /// When the state last changed.
    pub updated_ms: u64,
    /// The partitions in the transaction: each gets a marker.
    pub partitions: BTreeSet<PartitionKey>,
    /// The groups in the transaction (AddOffsetsToTxn) with the offsets
    /// TxnOffsetCommit sent: pending until the commit completes.
    pub groups: BTreeMap<String, GroupOffsets>,
}

impl TxnMeta {
    fn current(&self) -> ProducerIdEpoch {
        ProducerIdEpoch {
            producer_id: self.producer_id,
            epoch: self.epoch,
        }
    }

    /// Whether the transaction is past its timeout at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        self.state == TxnState::Ongoing
            && now_ms >= self.started_ms.saturating_add(u64::from(self.timeout_ms))
    }

    /// Whether offsets of `group`'s (topic, partition) wait for this
    /// transaction (OffsetFetch with `require_stable` answers them
    /// UNSTABLE_OFFSET_COMMIT).
    pub fn holds_offset(&self, group: &str, topic: &str, partition: u32) -> bool {
        self.groups
            .get(group)
            .is_some_and(|g| g.contains_key(&(topic.to_string(), partition)))
    }

    /// Refuses a producer other than the current one.
    fn check_producer(&self, p: ProducerIdEpoch) -> Result<(), TxnError> {
        if p.producer_id != self.producer_id {
            Err(TxnError::InvalidProducerIdMapping)
        } else if p.epoch != self.epoch {
            Err(TxnError::ProducerFenced)
        } else {
            Ok(())
        }
    }

    /// The epoch bumped to fence the current instance. A fence may use
    /// `i16::MAX`, which InitProducerId never hands out (as in Kafka): the
    /// next InitProducerId then gives a new producer id.
    fn fence(&mut self) {
        if self.epoch.0 < i16::MAX {
            self.epoch = ProducerEpoch(self.epoch.0 + 1);
        }
    }

    /// Opens a transaction if none is open.
    fn begin(&mut self, now_ms: u64) {
        if self.state != TxnState::Ongoing {
            self.state = TxnState::Ongoing;
            self.started_ms = now_ms;
            self.partitions.clear();
            self.groups.clear();
        }
    }
}

/// Kafka's transaction errors, one to one (the proxy maps each to its code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum TxnError {
    /// The producer id is not the transactional id's (INVALID_PRODUCER_ID_MAPPING).
    #[error("the producer id is not this transactional id's")]
    InvalidProducerIdMapping,
    /// An older (or unknown) epoch: a newer instance took over
    /// (PRODUCER_FENCED; INVALID_PRODUCER_EPOCH to older request versions).
    #[error("the producer was fenced by a newer instance or a timeout")]
    ProducerFenced,
    /// Markers of the previous transaction are still being written
    /// (CONCURRENT_TRANSACTIONS, retriable).
    #[error("the previous transaction is still completing")]
    ConcurrentTransactions,
    /// The request does not fit the state (INVALID_TXN_STATE).
    #[error("the request does not fit the transaction's state")]
    InvalidTxnState,
    /// `transaction.timeout.ms` is 0 or above the maximum (INVALID_TRANSACTION_TIMEOUT).
    #[error("the transaction timeout is 0 or above the maximum")]
    InvalidTransactionTimeout,
    /// No state for this transactional id (INVALID_PRODUCER_ID_MAPPING in
    /// Kafka's answers to Add*/EndTxn; TRANSACTIONAL_ID_NOT_FOUND to Describe).
    #[error("unknown transactional id")]
    UnknownTransactionalId,
    /// A partition that does not exist (UNKNOWN_TOPIC_OR_PARTITION).
    #[error("unknown partition")]
    UnknownPartition,
    /// An empty transactional id or group id (INVALID_REQUEST).
    #[error("empty transactional id or group id")]
    InvalidRequest,
    /// Producer ids are exhausted.
    #[error("producer ids exhausted")]
    ProducerIdsExhausted,
}

impl TxnError {
    /// Every error, in the order of their wire codes (1 up; 0 is none).
    pub const ALL: [TxnError; 9] = [
        TxnError::InvalidProducerIdMapping,
        TxnError::ProducerFenced,
        TxnError::ConcurrentTransactions,
        TxnError::InvalidTxnState,
        TxnError::InvalidTransactionTimeout,
        TxnError::UnknownTransactionalId,
        TxnError::UnknownPartition,
        TxnError::InvalidRequest,
        TxnError::ProducerIdsExhausted,
    ];

    /// The error's number on the metadata API's wire (never 0).
    pub fn code(self) -> u32 {
        Self::ALL
            .iter()
            .position(|e| *e == self)
            .map_or(0, |i| i as u32 + 1)
    }

    /// The error of a wire code (`None` for 0 and unknown codes).
    pub fn from_code(code: u32) -> Option<TxnError> {
        let i = usize::try_from(code.checked_sub(1)?).ok()?;
        Self::ALL.get(i).copied()
    }
}

/// What a coordinator asks of a transaction. Each is one Raft command
/// ([`crate::command::Command::Txn`]); new ones go at the end (the binary
/// encoding numbers variants by position).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOp {
    /// InitProducerId with a transactional id. `expected` is the producer
    /// id and epoch the client already has (KIP-360), if any.
    InitProducer {
        timeout_ms: u32,
        max_timeout_ms: u32,
        expected: Option<ProducerIdEpoch>,
    },
    /// AddPartitionsToTxn.
    AddPartitions {
        producer: ProducerIdEpoch,
        partitions: Vec<PartitionKey>,
    },
    /// AddOffsetsToTxn.
    AddGroup {
        producer: ProducerIdEpoch,
        group: String,
    },
    /// TxnOffsetCommit: pending offsets of a group added before, as
    /// (topic, partition, offset); those of partitions that do not exist are
    /// not kept ([`TxnReply::unknown`]).
    CommitOffsets {
        producer: ProducerIdEpoch,
        group: String,
        offsets: Vec<(String, u32, CommittedOffset)>,
    },
    /// EndTxn: the outcome is decided (Prepare*).
    End {
        producer: ProducerIdEpoch,
        commit: bool,
    },
    /// Every marker of the decided outcome is written (Complete*).
    Complete {
        producer: ProducerIdEpoch,
        commit: bool,
    },
    /// The coordinator's timer: the transaction passed its timeout; it is
    /// aborted at the next epoch (the producer is fenced).
    AbortExpired { producer: ProducerIdEpoch },
}

/// A [`TxnOp`] on a transactional id, through the coordinator `fence` names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnCommand {
    pub fence: ShardFence,
    pub id: TransactionalId,
    /// The proposer's clock (start times, timeouts).
    pub now_ms: u64,
    pub op: TxnOp,
}

/// The answer to a [`TxnCommand`]: the refusal if any, and the
/// transaction's state after it (changed even by some refusals: a new
/// instance's InitProducerId aborts the open transaction and answers
/// [`TxnError::ConcurrentTransactions`]; the coordinator writes the markers
/// of whatever it finds in a Prepare state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnReply {
    pub refused: Option<TxnError>,
    pub txn: Option<TxnMeta>,
    /// Offsets of a CommitOffsets not kept: their partition does not exist.
    pub unknown: Vec<(String, u32)>,
}

/// The transactions of the whole cluster: the coordinators' state by
/// transactional id, and what each partition knows of them.
///
/// `ids` is changed only through this model's methods (the transaction
/// steps, [`TxnModel::insert`], [`TxnModel::expire_ids`]), which keep the
/// index by producer id with it; the index is not stored (snapshots keep
/// their layout) but rebuilt whenever a model is decoded.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(from = "TxnModelStored")]
pub struct TxnModel {
    ids: BTreeMap<TransactionalId, TxnMeta>,
    pub partitions: PartitionsTxns,
    /// The transactional id holding each producer id.
    #[serde(skip_serializing)]
    by_producer: BTreeMap<ProducerId, TransactionalId>,
}

/// [`TxnModel`] as stored: its fields without the index.
#[derive(Deserialize)]
struct TxnModelStored {
    ids: BTreeMap<TransactionalId, TxnMeta>,
    partitions: PartitionsTxns,
}

impl From<TxnModelStored> for TxnModel {
    fn from(s: TxnModelStored) -> Self {
        let by_producer = s
            .ids
            .iter()
            .map(|(id, t)| (t.producer_id, id.clone()))
            .collect();
        Self {
            ids: s.ids,
            partitions: s.partitions,
            by_producer,
        }
    }
}

/// The coordinator shard of a key (a group id or a transactional id):
/// 32-bit FNV-1a of its UTF-8 bytes, modulo `shards` (0 when `shards` is 0).
pub fn shard_of(key: &str, shards: u32) -> u32 {
    const OFFSET_BASIS: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;
    let hash = key
        .bytes()
        .fold(OFFSET_BASIS, |h, b| (h ^ u32::from(b)).wrapping_mul(PRIME));
    hash.checked_rem(shards).unwrap_or(0)
}

/// Which transactional ids a lookup wants (`TxnModel::select`); every
/// condition given must hold, and none given is every id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnFilter {
    /// These ids only (one keyed read each).
    pub ids: Vec<TransactionalId>,
    /// The id holding this producer id (the KIP-890 check of a partition).
    pub producer_id: Option<ProducerId>,
    /// The ids of these coordinator shards, out of `shard_count`.
    pub shards: Option<(u32, Vec<u32>)>,
    /// Transactions holding pending offsets of this group (open or being
    /// decided).
    pub pending_group: Option<String>,
}

impl TxnFilter {
    /// One id.
    pub fn id(id: TransactionalId) -> Self {
        Self {
            ids: vec![id],
            ..Self::default()
        }
    }

    /// The ids of `shards` out of `shard_count`.
    pub fn shards(shard_count: u32, shards: Vec<u32>) -> Self {
        Self {
            shards: Some((shard_count, shards)),
            ..Self::default()
        }
    }

    fn holds(&self, id: &TransactionalId, t: &TxnMeta) -> bool {
        self.producer_id.is_none_or(|p| t.producer_id == p)
            && self
                .shards
                .as_ref()
                .is_none_or(|(n, shards)| shards.contains(&shard_of(id.as_str(), *n)))
            && self.pending_group.as_ref().is_none_or(|g| {
                matches!(
                    t.state,
                    TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
                ) && t.groups.contains_key(g)
            })
    }
}

impl TxnModel {
    /// The ids `f` selects with their state: keyed reads when it names ids
    /// or a producer id, else one pass in memory (nothing of the others
    /// leaves the state machine).
    pub fn select(&self, f: &TxnFilter) -> Vec<(&TransactionalId, &TxnMeta)> {
        if !f.ids.is_empty() {
            f.ids
                .iter()
                .filter_map(|id| self.ids.get_key_value(id))
                .filter(|(id, t)| f.holds(id, t))
                .collect()
        } else if let Some(p) = f.producer_id {
            self.by_producer
                .get(&p)
                .and_then(|id| self.ids.get_key_value(id))
                .filter(|(id, t)| f.holds(id, t))
                .into_iter()
                .collect()
        } else {
            self.ids.iter().filter(|(id, t)| f.holds(id, t)).collect()
        }
    }

    /// Every transactional id's state.
    pub fn ids(&self) -> &BTreeMap<TransactionalId, TxnMeta> {
        &self.ids
    }

    /// Sets an id's state, keeping the index by producer id.
    pub fn insert(&mut self, id: TransactionalId, t: TxnMeta) {
        if let Some(old) = self.ids.get(&id) {
            self.by_producer.remove(&old.producer_id);
        }
        self.by_producer.insert(t.producer_id, id.clone());
        self.ids.insert(id, t);
    }

    /// Gives `id` a new producer id (its epochs ran out), keeping the index.
    fn set_producer_id(&mut self, id: &TransactionalId, producer_id: ProducerId) {
        if let Some(t) = self.ids.get_mut(id) {
            self.by_producer.remove(&t.producer_id);
            t.producer_id = producer_id;
            self.by_producer.insert(producer_id, id.clone());
        }
    }

    /// Ongoing transactions past their timeout at `now_ms`, with the
    /// producer the abort must name.
    pub fn expired(&self, now_ms: u64) -> Vec<(TransactionalId, ProducerIdEpoch)> {
        self.ids
            .iter()
            .filter(|(_, t)| t.expired(now_ms))
            .map(|(id, t)| (id.clone(), t.current()))
            .collect()
    }

    /// Whether an id has had no open transaction for `expiration_ms` at `now_ms`.
    fn idle(t: &TxnMeta, now_ms: u64, expiration_ms: u64) -> bool {
        matches!(
            t.state,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        ) && now_ms.saturating_sub(t.updated_ms) > expiration_ms
    }

    /// Whether [`crate::command::Command::ExpireTransactionalIds`] at
    /// `now_ms` would forget any id.
    pub fn ids_to_expire(&self, now_ms: u64, expiration_ms: u64) -> bool {
        self.ids
            .values()
            .any(|t| Self::idle(t, now_ms, expiration_ms))
    }

    /// Forgets the ids idle for longer than `expiration_ms` (an id with a
    /// transaction open or being decided is kept, however old).
    pub fn expire_ids(&mut self, now_ms: u64, expiration_ms: u64) {
        let by_producer = &mut self.by_producer;
        self.ids.retain(|_, t| {
            let keep = !Self::idle(t, now_ms, expiration_ms);
            if !keep {
                by_producer.remove(&t.producer_id);
            }
            keep
        });
    }

    /// Whether a transaction holds pending offsets of this group's partition.
    pub fn offset_pending(&self, group: &str, topic: &str, partition: u32) -> bool {
        self.ids
            .values()
            .any(|t| t.holds_offset(group, topic, partition))
    }
}

// The transaction commands' rules, which `ClusterState::apply` hands
// `Command::Txn` and `Command::CommitWithTxns` to. They span concerns of the
// model: the transactions and the producer id counter (`state::producers`),
// the shard fence and the partitions' index and producers (`state::topics`),
// and the offsets a committed transaction stores (`state::groups`).
impl ClusterState {
    /// Applies a [`TxnCommand`]: the shard fence first, then the transition.
    pub(crate) fn apply_txn(&mut self, cmd: &TxnCommand) -> Response {
        if let Err(e) = self.topics.check_fence(&cmd.fence) {
            return Response::Error(e);
        }
        let mut unknown = Vec::new();
        let refused = self.txn_step(cmd, &mut unknown).err();
        Response::Txn(TxnReply {
            refused,
            txn: self.producers.txn.ids.get(&cmd.id).cloned(),
            unknown,
        })
    }

    fn txn_step(
        &mut self,
        cmd: &TxnCommand,
        unknown: &mut Vec<(String, u32)>,
    ) -> Result<(), TxnError> {
        if cmd.id.as_str().is_empty() {
            return Err(TxnError::InvalidRequest);
        }
        let now_ms = cmd.now_ms;
        if let TxnOp::InitProducer {
            timeout_ms,
            max_timeout_ms,
            expected,
        } = &cmd.op
        {
            return self.init_txn_producer(
                &cmd.id,
                *timeout_ms,
                *max_timeout_ms,
                *expected,
                now_ms,
            );
        }
        // Checked before the transaction is borrowed: the partitions exist.
        if let TxnOp::AddPartitions { partitions, .. } = &cmd.op
            && partitions
                .iter()
                .any(|p| !self.topics.partitions.contains_key(p))
        {
            return Err(TxnError::UnknownPartition);
        }
        let Some(t) = self.producers.txn.ids.get_mut(&cmd.id) else {
            return Err(TxnError::UnknownTransactionalId);
        };
        match &cmd.op {
            TxnOp::InitProducer { .. } => Ok(()),
            TxnOp::AddPartitions {
                producer,
                partitions,
            } => {
                t.check_producer(*producer)?;
                if t.state.is_prepare() {
                    return Err(TxnError::ConcurrentTransactions);
                }
                t.begin(now_ms);
                t.partitions.extend(partitions.iter().copied());
                t.previous = None;
                t.updated_ms = now_ms;
                Ok(())
            }
            TxnOp::AddGroup { producer, group } => {
                if group.is_empty() {
                    return Err(TxnError::InvalidRequest);
                }
                t.check_producer(*producer)?;
                if t.state.is_prepare() {
                    return Err(TxnError::ConcurrentTransactions);
                }
                t.begin(now_ms);
                t.groups.entry(group.clone()).or_default();
                t.previous = None;
                t.updated_ms = now_ms;
                Ok(())
            }
            TxnOp::CommitOffsets {
                producer,
                group,
                offsets,
            } => {
                t.check_producer(*producer)?;
                if t.state != TxnState::Ongoing {
                    return Err(TxnError::InvalidTxnState);
                }
                let Some(pending) = t.groups.get_mut(group) else {
                    return Err(TxnError::InvalidTxnState);
                };
                for (topic, partition, off) in offsets {
                    if self.topics.has_partition(topic, *partition) {
                        pending.insert((topic.clone(), *partition), off.clone());
                    } else {
                        unknown.push((topic.clone(), *partition));
                    }
                }
                t.updated_ms = now_ms;
                Ok(())
            }
            TxnOp::End { producer, commit } => {
                t.check_producer(*producer)?;
                let (prepare, complete) = outcome_states(*commit);
                match t.state {
                    TxnState::Ongoing => {
                        t.state = prepare;
                        t.updated_ms = now_ms;
                        Ok(())
                    }
                    s if s == complete => Ok(()),
                    s if s == prepare => Err(TxnError::ConcurrentTransactions),
                    _ => Err(TxnError::InvalidTxnState),
                }
            }
            TxnOp::Complete { producer, commit } => {
                t.check_producer(*producer)?;
                let (prepare, complete) = outcome_states(*commit);
                if t.state == complete {
                    return Ok(());
                }
                if t.state != prepare {
                    return Err(TxnError::InvalidTxnState);
                }
                self.complete_txn(&cmd.id, *commit, now_ms);
                Ok(())
            }
            TxnOp::AbortExpired { producer } => {
                t.check_producer(*producer)?;
                if !t.expired(now_ms) {
                    return Err(TxnError::InvalidTxnState);
                }
                t.fence();
                t.state = TxnState::PrepareAbort;
                t.previous = None;
                t.updated_ms = now_ms;
                Ok(())
            }
        }
    }

    /// A broker's commit whose ranges hold transactional batches or
    /// markers: the commit's rules, then the events, all or nothing.
    pub(crate) fn commit_with_txns(
        &mut self,
        broker: BrokerId,
        object: Option<&NewObject>,
        ranges: &[CommitRange],
        now_ms: u64,
        txns: &[RangeTxns],
    ) -> Response {
        if let Err(e) = PartitionsTxns::check(ranges, txns) {
            return Response::Error(e);
        }
        let r = match self.topics.commit(broker, object, ranges, now_ms) {
            Ok(r) => r,
            Err(e) => return Response::Error(e),
        };
        for t in txns {
            self.producers.txn.partitions.apply(t);
            // A marker's epoch is the producer's on this partition from now
            // on: a fenced instance's later batches are refused.
            let Some(p) = self.topics.partitions.get_mut(&t.partition) else {
                continue;
            };
            let mut marked = Vec::new();
            for e in &t.events {
                if let TxnEvent::Marker {
                    producer_id,
                    epoch,
                    commit,
                    ..
                } = e
                {
                    if let Some(st) = p.producers.get_mut(&producer_id.0)
                        && st.epoch < epoch.0
                    {
                        st.epoch = epoch.0;
                        st.batches.clear();
                    }
                    let producer = ProducerIdEpoch {
                        producer_id: *producer_id,
                        epoch: *epoch,
                    };
                    marked.push((producer, *commit));
                }
            }
            for (producer, commit) in marked {
                self.marker_committed(t.partition, producer, commit, now_ms);
            }
        }
        r
    }

    /// Moves a decided transaction to its Complete state: its pending
    /// offsets are stored if it committed.
    fn complete_txn(&mut self, id: &TransactionalId, commit: bool, now_ms: u64) {
        let Some(t) = self.producers.txn.ids.get_mut(id) else {
            return;
        };
        t.state = outcome_states(commit).1;
        t.started_ms = 0;
        t.updated_ms = now_ms;
        t.partitions.clear();
        let groups = std::mem::take(&mut t.groups);
        if commit {
            self.store_txn_offsets(groups);
        }
    }

    /// A marker committed at `partition`: the decided transaction it ends
    /// (same producer id, epoch and outcome) no longer waits for it, and
    /// once it waits for none it is complete, in this same command, as its
    /// coordinator's `Complete` would make it (which then finds it done).
    /// A marker of anything else (a retry, an older epoch) changes nothing.
    fn marker_committed(
        &mut self,
        partition: PartitionKey,
        producer: ProducerIdEpoch,
        commit: bool,
        now_ms: u64,
    ) {
        let Some(id) = self
            .producers
            .txn
            .by_producer
            .get(&producer.producer_id)
            .cloned()
        else {
            return;
        };
        let Some(t) = self.producers.txn.ids.get_mut(&id) else {
            return;
        };
        if t.state != outcome_states(commit).0
            || t.current() != producer
            || !t.partitions.remove(&partition)
        {
            return;
        }
        t.updated_ms = t.updated_ms.max(now_ms);
        if t.partitions.is_empty() {
            self.complete_txn(&id, commit, now_ms);
        }
    }

    /// InitProducerId with a transactional id.
    fn init_txn_producer(
        &mut self,
        id: &TransactionalId,
        timeout_ms: u32,
        max_timeout_ms: u32,
        expected: Option<ProducerIdEpoch>,
        now_ms: u64,
    ) -> Result<(), TxnError> {
        if timeout_ms == 0 || timeout_ms > max_timeout_ms {
            return Err(TxnError::InvalidTransactionTimeout);
        }
        let Some(t) = self.producers.txn.ids.get_mut(id) else {
            let producer_id = self.take_producer_id()?;
            self.producers.txn.insert(
                id.clone(),
                TxnMeta {
                    producer_id,
                    epoch: ProducerEpoch(0),
                    previous: None,
                    state: TxnState::Empty,
                    timeout_ms,
                    started_ms: 0,
                    updated_ms: now_ms,
                    partitions: BTreeSet::new(),
                    groups: BTreeMap::new(),
                },
            );
            return Ok(());
        };
        let retry = expected.is_some() && expected == t.previous;
        if let Some(e) = expected
            && !retry
            && e != t.current()
        {
            return Err(TxnError::ProducerFenced);
        }
        match t.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                Err(TxnError::ConcurrentTransactions)
            }
            TxnState::Ongoing => {
                // A new instance: the old one is fenced and its transaction
                // aborted; the client asks again once the abort completed.
                t.fence();
                t.state = TxnState::PrepareAbort;
                t.previous = None;
                t.updated_ms = now_ms;
                Err(TxnError::ConcurrentTransactions)
            }
            TxnState::Empty
            | TxnState::CompleteCommit
            | TxnState::CompleteAbort
            | TxnState::Dead => {
                t.timeout_ms = timeout_ms;
                t.updated_ms = now_ms;
                if retry {
                    return Ok(());
                }
                // Only a client that named its current pair may retry with
                // it (KIP-360); a new instance (no pair) leaves nothing for
                // an older one to present.
                let before = expected.map(|_| t.current());
                if t.epoch.0 >= LAST_PRODUCER_EPOCH {
                    let producer_id = self.take_producer_id()?;
                    self.producers.txn.set_producer_id(id, producer_id);
                    let Some(t) = self.producers.txn.ids.get_mut(id) else {
                        return Err(TxnError::UnknownTransactionalId);
                    };
                    t.epoch = ProducerEpoch(0);
                    Self::reset_to_empty(t, before);
                } else {
                    t.epoch = ProducerEpoch(t.epoch.0 + 1);
                    Self::reset_to_empty(t, before);
                }
                Ok(())
            }
        }
    }

    fn reset_to_empty(t: &mut TxnMeta, before: Option<ProducerIdEpoch>) {
        t.previous = before;
        t.state = TxnState::Empty;
        t.started_ms = 0;
        t.partitions.clear();
        t.groups.clear();
    }

    /// One producer id from the counter the idempotent producers' blocks use.
    fn take_producer_id(&mut self) -> Result<ProducerId, TxnError> {
        let id = self.producers.next_id;
        self.producers.next_id = id.checked_add(1).ok_or(TxnError::ProducerIdsExhausted)?;
        Ok(ProducerId(id))
    }

    /// Stores a committed transaction's offsets (of existing partitions).
    fn store_txn_offsets(&mut self, groups: BTreeMap<String, GroupOffsets>) {
        for (group, offsets) in groups {
            let known: Vec<_> = offsets
                .0
                .into_iter()
                .filter(|((topic, partition), _)| self.topics.has_partition(topic, *partition))
                .collect();
            if !known.is_empty() {
                self.groups.offsets.entry(group).or_default().extend(known);
            }
        }
    }
}

/// The Prepare and Complete states of an outcome.
fn outcome_states(commit: bool) -> (TxnState, TxnState) {
    if commit {
        (TxnState::PrepareCommit, TxnState::CompleteCommit)
    } else {
        (TxnState::PrepareAbort, TxnState::CompleteAbort)
    }
}

#[cfg(test)]
mod tests;
