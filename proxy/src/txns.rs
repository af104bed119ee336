//! The transaction requests (with `--transactions`): InitProducerId with a
//! transactional id, AddPartitionsToTxn (v0–v3, and v4+ with its
//! verify-only form answered from the coordinator's state),
//! AddOffsetsToTxn, TxnOffsetCommit, EndTxn, DescribeTransactions,
//! ListTransactions. Each goes to the transaction coordinator of its
//! transactional id (the broker owning the id's shard, as for groups) as a
//! `dyn TxnCoordination`; its refusals are Kafka's transaction errors
//! (`crate::errors::txn_code`). The design is in `docs/transactions.md`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use floe_broker::TxnCoordination;
use floe_broker::txn::CoordError;
use floe_metadata::command::CommittedOffset;
use floe_metadata::ids::TransactionalId as FloeTxnId;
use floe_metadata::ids::{PartitionKey, ProducerEpoch, ProducerId as FloeProducerId};
use floe_metadata::txn::{ProducerIdEpoch, TxnError, TxnMeta, TxnOp, TxnReply, TxnState};
use floe_metadata::watch::ClusterSnapshot;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedTxn;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::errors::{fenced_code, txn_code};
use crate::groups::ShardOwner;
use crate::handlers::Context;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn producer(id: ProducerId, epoch: i16) -> ProducerIdEpoch {
    ProducerIdEpoch {
        producer_id: FloeProducerId(id.0),
        epoch: ProducerEpoch(epoch),
    }
}

/// The step's refusal as an error, if any.
fn refusal(r: Result<TxnReply, CoordError>) -> Result<TxnReply, CoordError> {
    let r = r?;
    match r.refused {
        Some(e) => Err(e.into()),
        None => Ok(r),
    }
}

/// Whether a transaction holds pending offsets (open or being decided).
/// The longest an OffsetFetch waits for a committed transaction's offsets
/// ([`Context::settled_offsets`]).
const COMMITTING_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn pending(t: &TxnMeta) -> bool {
    matches!(
        t.state,
        TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
    )
}

impl Context {
    /// The transaction coordinator of `id`.
    fn txn_coordinator(&self, id: &str) -> Result<Arc<dyn TxnCoordination>, CoordError> {
        match self.shard_owner(id) {
            Ok(ShardOwner::Local(b)) => Ok(Arc::new(b)),
            Ok(ShardOwner::Remote(r)) => Ok(r),
            Err(e) => {
                tracing::debug!(transactional_id = id, error = %e, "no transaction coordinator");
                Err(CoordError::NotCoordinator)
            }
        }
    }

    async fn txn_step(&self, id: &str, op: TxnOp) -> Result<TxnReply, CoordError> {
        let c = self.txn_coordinator(id)?;
        refusal(c.txn_step(&FloeTxnId::new(id), op).await)
    }

    /// InitProducerId with a transactional id: the coordinator's producer id
    /// and epoch (bumped: the previous instance is fenced), or its refusal
    /// (CONCURRENT_TRANSACTIONS while an open transaction of a previous
    /// instance is being aborted: the client asks again).
    pub(crate) async fn init_txn_producer(
        &self,
        version: i16,
        req: &InitProducerIdRequest,
        id: &str,
    ) -> InitProducerIdResponse {
        let mut resp = InitProducerIdResponse::default();
        resp.producer_id = ProducerId(-1);
        resp.producer_epoch = -1;
        let expected = (req.producer_id.0 >= 0 && req.producer_epoch >= 0)
            .then(|| producer(req.producer_id, req.producer_epoch));
        let op = TxnOp::InitProducer {
            // 0 or negative: refused as INVALID_TRANSACTION_TIMEOUT.
            timeout_ms: u32::try_from(req.transaction_timeout_ms).unwrap_or(0),
            max_timeout_ms: 0,
            expected,
        };
        match self.txn_step(id, op).await {
            Ok(r) => match r.txn {
                Some(t) => {
                    resp.producer_id = ProducerId(t.producer_id.0);
                    resp.producer_epoch = t.epoch.0;
                }
                None => resp.error_code = ResponseError::CoordinatorNotAvailable.code(),
            },
            Err(e) => resp.error_code = txn_code(&e, fenced_code(version, 4)),
        }
        resp
    }

    /// The partitions of `topics`, or the per-partition codes when one does
    /// not exist (UNKNOWN_TOPIC_OR_PARTITION for those,
    /// OPERATION_NOT_ATTEMPTED for the others).
    fn txn_partitions(
        snap: &ClusterSnapshot,
        topics: &[AddPartitionsToTxnTopic],
    ) -> Result<Vec<PartitionKey>, Vec<AddPartitionsToTxnTopicResult>> {
        let mut keys = Vec::new();
        let mut unknown = false;
        for t in topics {
            for p in &t.partitions {
                match Self::key_of(snap, &t.name.0, *p) {
                    Some(k) => keys.push(k),
                    None => unknown = true,
                }
            }
        }
        if !unknown {
            return Ok(keys);
        }
        Err(topic_results(topics, |name, p| {
            if Self::key_of(snap, name, p).is_some() {
                ResponseError::OperationNotAttempted.code()
            } else {
                ResponseError::UnknownTopicOrPartition.code()
            }
        }))
    }

    /// One transaction's AddPartitionsToTxn: added (or, `verify_only`,
    /// checked against what the coordinator has), one code per partition.
    async fn add_partitions(
        &self,
        version: i16,
        id: &str,
        p: ProducerIdEpoch,
        topics: &[AddPartitionsToTxnTopic],
        verify_only: bool,
    ) -> Vec<AddPartitionsToTxnTopicResult> {
        let snap = self.view.current();
        let keys = match Self::txn_partitions(&snap, topics) {
            Ok(keys) => keys,
            Err(results) => return results,
        };
        let fenced = fenced_code(version, 2);
        if verify_only {
            return match self.verify_partitions(id, p).await {
                Err(e) => topic_results(topics, |_, _| txn_code(&e, fenced)),
                Ok(t) => {
                    let mut i = keys.iter();
                    topic_results(topics, |_, _| {
                        if i.next().is_some_and(|k| t.partitions.contains(k)) {
                            0
                        } else {
                            ResponseError::InvalidTxnState.code()
                        }
                    })
                }
            };
        }
        let op = TxnOp::AddPartitions {
            producer: p,
            partitions: keys,
        };
        let code = match self.txn_step(id, op).await {
            Ok(_) => 0,
            Err(e) => txn_code(&e, fenced),
        };
        topic_results(topics, |_, _| code)
    }

    /// The open transaction of `id` if it is the producer's (AddPartitionsToTxn
    /// v4+ verify-only, as Kafka's coordinator checks it).
    async fn verify_partitions(&self, id: &str, p: ProducerIdEpoch) -> Result<TxnMeta, CoordError> {
        let c = self.txn_coordinator(id)?;
        let t = c
            .describe_txn(&FloeTxnId::new(id))
            .await?
            .ok_or(CoordError::Txn(TxnError::InvalidProducerIdMapping))?;
        if t.producer_id != p.producer_id {
            return Err(TxnError::InvalidProducerIdMapping.into());
        }
        if t.epoch != p.epoch {
            return Err(TxnError::ProducerFenced.into());
        }
        if t.state.is_prepare() {
            return Err(TxnError::ConcurrentTransactions.into());
        }
        Ok(t)
    }

    pub async fn add_partitions_to_txn(
        &self,
        version: i16,
        req: &AddPartitionsToTxnRequest,
    ) -> AddPartitionsToTxnResponse {
        let mut resp = AddPartitionsToTxnResponse::default();
        if version <= 3 {
            let p = producer(
                req.v3_and_below_producer_id,
                req.v3_and_below_producer_epoch,
            );
            resp.results_by_topic_v3_and_below = self
                .add_partitions(
                    version,
                    &req.v3_and_below_transactional_id.0,
                    p,
                    &req.v3_and_below_topics,
                    false,
                )
                .await;
            return resp;
        }
        for t in &req.transactions {
            let p = producer(t.producer_id, t.producer_epoch);
            let mut r = AddPartitionsToTxnResult::default();
            r.transactional_id = t.transactional_id.clone();
            r.topic_results = self
                .add_partitions(version, &t.transactional_id.0, p, &t.topics, t.verify_only)
                .await;
            resp.results_by_transaction.push(r);
        }
        resp
    }

    pub async fn add_offsets_to_txn(
        &self,
        version: i16,
        req: &AddOffsetsToTxnRequest,
    ) -> AddOffsetsToTxnResponse {
        let mut resp = AddOffsetsToTxnResponse::default();
        let op = TxnOp::AddGroup {
            producer: producer(req.producer_id, req.producer_epoch),
            group: req.group_id.0.to_string(),
        };
        if let Err(e) = self.txn_step(&req.transactional_id.0, op).await {
            resp.error_code = txn_code(&e, fenced_code(version, 2));
        }
        resp
    }

    /// TxnOffsetCommit: the offsets wait in the transaction until its commit
    /// (OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT
    /// for them meanwhile). Routed by the transactional id: the pending
    /// offsets are the transaction's state.
    /// TxnOffsetCommit v3+: the consumer's member id, generation and
    /// instance id the producer sent, checked against the group at its
    /// coordinator as Kafka does: an unknown member is UNKNOWN_MEMBER_ID,
    /// another static member under the instance id FENCED_INSTANCE_ID, a
    /// generation other than the group's ILLEGAL_GENERATION. Nothing is
    /// checked when none was sent (an empty member id, generation -1): a
    /// producer sending offsets of a group it does not consume in. A
    /// rebalance under way does not refuse the offsets (Kafka's does not).
    /// The check is the heartbeat's (which refreshes the member's session,
    /// as a commit would).
    async fn check_txn_member(&self, version: i16, req: &TxnOffsetCommitRequest) -> i16 {
        let member = req.member_id.as_str();
        let generation = req.generation_id;
        let instance = req.group_instance_id.as_ref().map(|i| i.as_str());
        if version < 3 || (member.is_empty() && generation < 0 && instance.is_none()) {
            return 0;
        }
        let group = req.group_id.0.as_str();
        let c = match self.coordinator(group) {
            Ok(c) => c,
            Err(e) => return crate::errors::routing_code(&e),
        };
        use floe_broker::group::GroupError;
        match c.heartbeat(group, generation, member, instance).await {
            Ok(()) | Err(GroupError::RebalanceInProgress) => 0,
            // No generation sent: only the member is checked.
            Err(GroupError::IllegalGeneration) if generation < 0 => 0,
            // A generation without a member: Kafka compares the generation.
            Err(GroupError::UnknownMemberId) if member.is_empty() && instance.is_none() => {
                GroupError::IllegalGeneration.kafka_code()
            }
            Err(e) => e.kafka_code(),
        }
    }

    pub async fn txn_offset_commit(
        &self,
        version: i16,
        req: &TxnOffsetCommitRequest,
    ) -> TxnOffsetCommitResponse {
        let offsets: Vec<(String, u32, CommittedOffset)> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().filter_map(|p| {
                    Some((
                        t.name.0.to_string(),
                        u32::try_from(p.partition_index).ok()?,
                        CommittedOffset {
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata: p
                                .committed_metadata
                                .as_ref()
                                .map(|m| m.to_string())
                                .unwrap_or_default(),
                        },
                    ))
                })
            })
            .collect();
        let op = TxnOp::CommitOffsets {
            producer: producer(req.producer_id, req.producer_epoch),
            group: req.group_id.0.to_string(),
            offsets,
        };
        let member_code = self.check_txn_member(version, req).await;
        let (code, unknown) = if member_code != 0 {
            (member_code, HashSet::new())
        } else {
            match self.txn_step(&req.transactional_id.0, op).await {
                Ok(r) => (0, r.unknown.into_iter().collect::<HashSet<_>>()),
                // Kafka's group coordinator answers a stale epoch so.
                Err(e) => (
                    txn_code(&e, ResponseError::InvalidProducerEpoch),
                    HashSet::new(),
                ),
            }
        };
        let mut resp = TxnOffsetCommitResponse::default();
        for t in &req.topics {
            let mut rt = TxnOffsetCommitResponseTopic::default();
            rt.name = t.name.clone();
            for p in &t.partitions {
                let mut rp = TxnOffsetCommitResponsePartition::default();
                rp.partition_index = p.partition_index;
                let gone = u32::try_from(p.partition_index)
                    .map_or(true, |i| unknown.contains(&(t.name.0.to_string(), i)));
                rp.error_code = if code == 0 && gone {
                    ResponseError::UnknownTopicOrPartition.code()
                } else {
                    code
                };
                rt.partitions.push(rp);
            }
            resp.topics.push(rt);
        }
        resp
    }

    /// EndTxn: answered once the outcome is durable (PrepareCommit /
    /// PrepareAbort); the coordinator then writes the markers.
    pub async fn end_txn(&self, version: i16, req: &EndTxnRequest) -> EndTxnResponse {
        let mut resp = EndTxnResponse::default();
        resp.producer_id = ProducerId(-1);
        resp.producer_epoch = -1;
        let op = TxnOp::End {
            producer: producer(req.producer_id, req.producer_epoch),
            commit: req.committed,
        };
        if let Err(e) = self.txn_step(&req.transactional_id.0, op).await {
            resp.error_code = txn_code(&e, fenced_code(version, 2));
        }
        resp
    }

    pub async fn describe_transactions(
        &self,
        _version: i16,
        req: &DescribeTransactionsRequest,
    ) -> DescribeTransactionsResponse {
        let snap = self.view.current();
        let mut resp = DescribeTransactionsResponse::default();
        for id in &req.transactional_ids {
            let mut d = TransactionState::default();
            d.transactional_id = id.clone();
            d.producer_id = ProducerId(-1);
            d.producer_epoch = -1;
            d.transaction_start_time_ms = -1;
            let described = match self.txn_coordinator(&id.0) {
                Ok(c) => c.describe_txn(&FloeTxnId::new(id.0.as_str())).await,
                Err(e) => Err(e),
            };
            match described {
                Err(e) => d.error_code = txn_code(&e, ResponseError::ProducerFenced),
                Ok(None) => d.error_code = ResponseError::TransactionalIdNotFound.code(),
                Ok(Some(t)) => {
                    d.transaction_state = s(t.state.name());
                    d.transaction_timeout_ms = i32::try_from(t.timeout_ms).unwrap_or(i32::MAX);
                    if t.state == TxnState::Ongoing || t.state.is_prepare() {
                        d.transaction_start_time_ms = i64::try_from(t.started_ms).unwrap_or(-1);
                    }
                    d.producer_id = ProducerId(t.producer_id.0);
                    d.producer_epoch = t.epoch.0;
                    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                    for k in &t.partitions {
                        if let Some(topic) = snap.by_id.get(&k.topic) {
                            by_topic
                                .entry(topic.name.clone())
                                .or_default()
                                .push(k.partition as i32);
                        }
                    }
                    d.topics = by_topic
                        .into_iter()
                        .map(|(name, partitions)| {
                            let mut td = TopicData::default();
                            td.topic = TopicName(s(name));
                            td.partitions = partitions;
                            td
                        })
                        .collect();
                }
            }
            resp.transaction_states.push(d);
        }
        resp
    }

    /// ListTransactions: the transactions of the coordinator shards this
    /// proxy is named coordinator of (from the brokers that own them),
    /// filtered by state, producer id and (v1) how long
    /// they have been open.
    pub async fn list_transactions(
        &self,
        version: i16,
        req: &ListTransactionsRequest,
    ) -> ListTransactionsResponse {
        let mut resp = ListTransactionsResponse::default();
        let mut states = Vec::new();
        for f in &req.state_filters {
            match TxnState::ALL.iter().find(|st| st.name() == f.as_str()) {
                Some(st) => states.push(*st),
                None => resp.unknown_state_filters.push(f.clone()),
            }
        }
        let snap = self.view.current();
        let mut all = BTreeMap::new();
        let named = self.named_shards(&snap);
        let shard_count = snap.shard_count();
        for (owner, o) in self.shard_owners(&snap, &named) {
            let c: Arc<dyn TxnCoordination> = match o {
                ShardOwner::Local(local) => Arc::new(local),
                ShardOwner::Remote(r) => r,
            };
            match c.list_txns().await {
                Ok(txns) => all.extend(txns.into_iter().filter(|(id, _)| {
                    named.contains(&floe_broker::group::shard_of(&id.0, shard_count))
                })),
                Err(e) => {
                    tracing::info!(broker = %owner, error = %e, "a coordinator did not list its transactions");
                    resp.error_code = ResponseError::CoordinatorLoadInProgress.code();
                }
            }
        }
        let now = floe_metadata::clock::now_ms();
        let min_age = (version >= 1 && req.duration_filter >= 0)
            .then(|| u64::try_from(req.duration_filter).unwrap_or(0));
        for (id, t) in all {
            let state_ok =
                (states.is_empty() && req.state_filters.is_empty()) || states.contains(&t.state);
            let producer_ok = req.producer_id_filters.is_empty()
                || req
                    .producer_id_filters
                    .contains(&ProducerId(t.producer_id.0));
            let age_ok = min_age.is_none_or(|min| {
                (t.state == TxnState::Ongoing || t.state.is_prepare())
                    && now.saturating_sub(t.started_ms) >= min
            });
            if state_ok && producer_ok && age_ok {
                let mut l = ListedTxn::default();
                l.transactional_id = TransactionalId(s(id.0));
                l.producer_id = ProducerId(t.producer_id.0);
                l.transaction_state = s(t.state.name());
                resp.transaction_states.push(l);
            }
        }
        resp
    }

    /// The offsets of `group` that a transaction holds pending, as
    /// (topic, partition): OffsetFetch with `require_stable` answers
    /// UNSTABLE_OFFSET_COMMIT for them (none without `--transactions` or
    /// without `require_stable`). First it waits while a transaction whose
    /// commit is decided (PrepareCommit: EndTxn was answered, its markers
    /// are being written) still holds offsets of `group`, so that an
    /// OffsetFetch after EndTxn's answer sees them, as a read after a
    /// produce's answer counts it (at most [`COMMITTING_WAIT`]). One read of
    /// the transactions holding the group's offsets serves both.
    pub(crate) async fn settled_offsets(
        &self,
        group: &str,
        require_stable: bool,
    ) -> HashSet<(String, u32)> {
        if !self.transactions {
            return HashSet::new();
        }
        let holding = floe_metadata::txn::TxnFilter {
            pending_group: Some(group.to_string()),
            ..Default::default()
        };
        let deadline = tokio::time::Instant::now() + COMMITTING_WAIT;
        let holding = loop {
            let all = match self.meta.transactions_where(&holding).await {
                Ok(all) => all,
                Err(e) => {
                    tracing::info!(group, error = %e, "reading pending transactional offsets failed");
                    return HashSet::new();
                }
            };
            let committing = all
                .iter()
                .any(|(_, t)| t.state == TxnState::PrepareCommit && t.groups.contains_key(group));
            if !committing {
                break all;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::info!(
                    group,
                    "a committed transaction's offsets were not stored in time; answering without them"
                );
                break all;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        };
        if !require_stable {
            return HashSet::new();
        }
        holding
            .iter()
            .filter(|(_, t)| pending(t))
            .filter_map(|(_, t)| t.groups.get(group))
            .flat_map(|g| g.keys().cloned())
            .collect()
    }
}

/// One result per partition of `topics`, coded by `code(topic, partition)`.
fn topic_results(
    topics: &[AddPartitionsToTxnTopic],
    mut code: impl FnMut(&str, i32) -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| {
            let mut r = AddPartitionsToTxnTopicResult::default();
            r.name = t.name.clone();
            r.results_by_partition = t
                .partitions
                .iter()
                .map(|p| {
                    let mut x = AddPartitionsToTxnPartitionResult::default();
                    x.partition_index = *p;
                    x.partition_error_code = code(&t.name.0, *p);
                    x
                })
                .collect();
            r
        })
        .collect()
}
