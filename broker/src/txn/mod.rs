//! The transaction coordinator of the coordinator shards this broker owns
//! (`docs/transactions.md`). A transaction's state lives in the metadata
//! service (`floe_metadata::txn`): every step is a Raft command fenced by
//! the shard's epoch, so this coordinator keeps nothing a successor would
//! miss. What it adds is what the metadata cannot do:
//!
//! - deliver the decided outcome: once a transaction is in PrepareCommit or
//!   PrepareAbort, write a COMMIT or ABORT marker to every partition in it
//!   ([`MarkerWriter`], retried until written, the partition is gone or the
//!   shard moved), then complete it in the metadata;
//! - resume what a previous coordinator left (a shard taken over:
//!   [`TxnCoordinator::resume`]);
//! - abort transactions past their timeout ([`TxnCoordinator::abort_expired`]).
//!
//! [`partition`] is the other side: a partition owner's view of the
//! transactions on its partition (open ones, LSO, aborted index).
//!
//! Every [`Broker`](crate::broker::Broker) runs one (`serve`, [`TxnService`]: the steps
//! the proxy asks for under the broker's fence and clock, the timeout
//! timer, resume at a shard's take-over); the proxy reaches it through
//! [`crate::owner::TxnCoordination`], here or over [`rpc`]. The markers go
//! through the broker's [`MarkerSlot`], which the partition side fills.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use floe_metadata::ErrorKind as MetaKind;
use floe_metadata::api::MetaApi;
use floe_metadata::command::ShardFence;
use floe_metadata::ids::{PartitionKey, TransactionalId};
use floe_metadata::txn::{
    ProducerIdEpoch, TxnCommand, TxnError, TxnFilter, TxnMeta, TxnOp, TxnReply, TxnState,
};

pub mod markers;
pub use crate::config::TxnConfig;
pub use crate::partitions::txn_log as partition;
pub use crate::partitions::txn_log::{Holding, Marker};
pub mod rpc;
pub(crate) mod serve;

pub use serve::TxnService;

#[cfg(test)]
mod tests;

/// The transaction coordinator of a transactional id (the broker that owns
/// the id's shard). Refusals by the transaction's rules are data
/// (`TxnReply::refused`); a broker that does not own the shard (or cannot
/// be reached) is [`CoordError::NotCoordinator`].
///
#[async_trait::async_trait]
pub trait TxnCoordination: Send + Sync + std::fmt::Debug {
    /// A client's step (InitProducer, AddPartitions, AddGroup,
    /// CommitOffsets, End) under the coordinator's fence and clock; an
    /// InitProducer's `max_timeout_ms` is the coordinator's.
    async fn txn_step(&self, id: &TransactionalId, op: TxnOp) -> Result<TxnReply, CoordError>;

    /// The id's state, `None` if it has none.
    async fn describe_txn(&self, id: &TransactionalId) -> Result<Option<TxnMeta>, CoordError>;

    /// The transactions of every shard the broker coordinates.
    async fn list_txns(&self) -> Result<Vec<(TransactionalId, TxnMeta)>, CoordError>;
}

/// Why a marker was not written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError {
    /// The partition no longer exists: nothing to mark.
    #[error("the partition no longer exists")]
    Gone,
    /// Not written this time (no owner, owner unreachable, a refused
    /// commit): to be tried again.
    #[error("marker not written: {0}")]
    Failed(String),
}

/// Writes markers at partitions' owners (over the internal RPC, or
/// directly when this broker owns the partition).
#[async_trait::async_trait]
pub trait MarkerWriter: Send + Sync + std::fmt::Debug {
    /// Returns once the marker is committed at `partition` (or was already:
    /// a marker for a transaction the partition no longer has open is a
    /// no-op answered ok).
    async fn write_marker(
        &self,
        partition: PartitionKey,
        marker: Marker,
    ) -> Result<(), MarkerError>;

    /// Before a commit is decided: what `partition`'s owner holds of
    /// `producer`'s open transaction there, answered once that is durable
    /// (see [`Holding`]).
    async fn durable(
        &self,
        partition: PartitionKey,
        producer: floe_metadata::ids::ProducerId,
    ) -> Result<Holding, MarkerError>;

    /// The ownership epoch of `partition` as this broker's cluster view
    /// knows it (`None`: not known), noted when a transaction adds it.
    fn owner_epoch(&self, partition: PartitionKey) -> Option<u64>;
}

/// The broker's marker writer, given after the broker is built
/// ([`serve::TxnService::set_marker_writer`]: the writer needs the
/// broker). Until then every marker fails (and is tried again).
#[derive(Debug, Default)]
pub struct MarkerSlot(std::sync::OnceLock<Arc<dyn MarkerWriter>>);

impl MarkerSlot {
    /// Sets the writer; false if one was set already (that one stays).
    pub fn set(&self, w: Arc<dyn MarkerWriter>) -> bool {
        self.0.set(w).is_ok()
    }
}

#[async_trait::async_trait]
impl MarkerWriter for MarkerSlot {
    async fn write_marker(
        &self,
        partition: PartitionKey,
        marker: Marker,
    ) -> Result<(), MarkerError> {
        match self.0.get() {
            Some(w) => w.write_marker(partition, marker).await,
            None => Err(MarkerError::Failed(
                "this broker has no marker writer yet".into(),
            )),
        }
    }

    async fn durable(
        &self,
        partition: PartitionKey,
        producer: floe_metadata::ids::ProducerId,
    ) -> Result<Holding, MarkerError> {
        match self.0.get() {
            Some(w) => w.durable(partition, producer).await,
            None => Err(MarkerError::Failed(
                "this broker has no marker writer yet".into(),
            )),
        }
    }

    fn owner_epoch(&self, partition: PartitionKey) -> Option<u64> {
        self.0.get().and_then(|w| w.owner_epoch(partition))
    }
}

/// Whether this broker still holds a coordinator shard at an epoch.
pub type ShardCheck = Arc<dyn Fn(&ShardFence) -> bool + Send + Sync>;

/// A coordinator's answer when the transaction's rules did not refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoordError {
    /// Refused by the transaction's rules (Kafka's error, one to one).
    #[error(transparent)]
    Txn(#[from] TxnError),
    /// The shard moved (NOT_COORDINATOR).
    #[error("not the coordinator any more")]
    NotCoordinator,
    /// The metadata service could not be reached (COORDINATOR_NOT_AVAILABLE).
    #[error("coordinator not available: {0}")]
    Unavailable(String),
    /// A commit that cannot be decided: batches a partition's owner
    /// answered may be lost. The transaction stays open for the client to
    /// abort (UNKNOWN_PRODUCER_ID: EndTxn up to v3, what the proxy offers,
    /// has no TRANSACTION_ABORTABLE).
    #[error("the transaction must be aborted: {0}")]
    Abortable(String),
}

/// The first pause between two attempts.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);

/// The transaction coordinator of one broker.
pub struct TxnCoordinator {
    meta: Arc<dyn MetaApi>,
    markers: Arc<dyn MarkerWriter>,
    holds: ShardCheck,
    config: TxnConfig,
    /// Transactions whose markers are being written by a task of ours.
    completing: Mutex<HashSet<TransactionalId>>,
    /// The open transactions' partitions added through this coordinator,
    /// each with its ownership epoch in this broker's view then
    /// ([`Holding::All`]'s `follows`).
    added: Mutex<HashMap<TransactionalId, BTreeMap<PartitionKey, u64>>>,
    /// Woken each time one of those tasks ends.
    completed: tokio::sync::Notify,
    /// Whether this coordinator has seen a transaction (a step, or one
    /// found at a take-over): until then the timeout timer reads nothing.
    active: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for TxnCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnCoordinator")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The epoch's current producer of a transaction.
fn producer_of(t: &TxnMeta) -> ProducerIdEpoch {
    ProducerIdEpoch {
        producer_id: t.producer_id,
        epoch: t.epoch,
    }
}

impl TxnCoordinator {
    pub fn new(
        meta: Arc<dyn MetaApi>,
        markers: Arc<dyn MarkerWriter>,
        holds: ShardCheck,
        config: TxnConfig,
    ) -> Arc<Self> {
        Arc::new(Self {
            meta,
            markers,
            holds,
            config,
            completing: Mutex::new(HashSet::new()),
            added: Mutex::new(HashMap::new()),
            completed: tokio::sync::Notify::new(),
            active: Default::default(),
        })
    }

    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    /// Whether a transaction was seen here (the timer has work).
    pub fn is_active(&self) -> bool {
        self.active.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set_active(&self) {
        self.active
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Applies one step in the metadata. A transaction the answer shows in
    /// a Prepare state gets its markers written by a task of its own (an
    /// EndTxn, and also an InitProducerId that aborted an open
    /// transaction), so the client is answered once the decision is durable.
    ///
    /// A client's next step refused with CONCURRENT_TRANSACTIONS because
    /// that task is still writing (the next transaction's first
    /// AddPartitionsToTxn, usually) waits for it, up to
    /// [`TxnConfig::completion_wait`], and is applied again: the producer
    /// goes on as soon as the markers are written, not at its next retry.
    pub async fn step(
        self: &Arc<Self>,
        fence: ShardFence,
        id: &TransactionalId,
        now_ms: u64,
        op: TxnOp,
    ) -> Result<TxnReply, CoordError> {
        // Kept for a second attempt only where one may follow.
        let again = matches!(
            op,
            TxnOp::AddPartitions { .. } | TxnOp::AddGroup { .. } | TxnOp::InitProducer { .. }
        )
        .then(|| op.clone());
        if let TxnOp::End {
            producer,
            commit: true,
        } = op
        {
            self.commit_ready(id, producer).await?;
        }
        let adding = match &op {
            TxnOp::AddPartitions { partitions, .. } => partitions.clone(),
            _ => Vec::new(),
        };
        let reply = self.step_once(fence, id, now_ms, op).await?;
        self.note_added(id, &adding, &reply);
        let concurrent = reply.refused == Some(TxnError::ConcurrentTransactions)
            && reply.txn.as_ref().is_some_and(|t| t.state.is_prepare());
        let Some(op) = again.filter(|_| concurrent) else {
            return Ok(reply);
        };
        if !self.wait_completed(id).await {
            return Ok(reply);
        }
        crate::metrics::txn_step_held();
        let now_ms = now_ms.max(floe_metadata::clock::now_ms());
        let reply = self.step_once(fence, id, now_ms, op).await?;
        self.note_added(id, &adding, &reply);
        Ok(reply)
    }

    /// Notes the ownership epochs of the partitions a step added to `id`'s
    /// open transaction (the first time each is added), and forgets them
    /// once it is no longer open.
    fn note_added(&self, id: &TransactionalId, adding: &[PartitionKey], reply: &TxnReply) {
        let open = reply
            .txn
            .as_ref()
            .is_some_and(|t| t.state == TxnState::Ongoing);
        let mut added = self.added.lock().unwrap_or_else(PoisonError::into_inner);
        if !open {
            if reply.refused.is_none() {
                added.remove(id);
            }
            return;
        }
        if reply.refused.is_some() || adding.is_empty() {
            return;
        }
        let known = added.entry(id.clone()).or_default();
        for p in adding {
            if let Some(e) = self.markers.owner_epoch(*p) {
                known.entry(*p).or_insert(e);
            }
        }
    }

    /// Before a commit is decided (PrepareCommit): each partition of the
    /// open transaction holds all of it, durably. Its owners answered the
    /// producer's batches once sequenced, so a batch could have been
    /// answered and then lost with its owner (`kill -9`, a failed flush)
    /// before it reached the object store; such a transaction is answered
    /// [`CoordError::Abortable`] and stays open for the client to abort.
    /// One not open (or of another producer) is left to the step, which
    /// answers it by the transaction's rules (a retried EndTxn, a fenced
    /// producer). Owners that cannot answer (moving, unreachable) are asked
    /// again until [`TxnConfig::commit_wait`]; then
    /// CONCURRENT_TRANSACTIONS, which the client retries.
    async fn commit_ready(
        &self,
        id: &TransactionalId,
        producer: ProducerIdEpoch,
    ) -> Result<(), CoordError> {
        let txns = self
            .meta
            .transactions_where(&TxnFilter::id(id.clone()))
            .await
            .map_err(|e| CoordError::Unavailable(e.to_string()))?;
        let Some((_, t)) = txns.into_iter().find(|(i, _)| i == id) else {
            return Ok(());
        };
        if t.state != TxnState::Ongoing || producer_of(&t) != producer {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + self.config.commit_wait;
        let checks = t.partitions.iter().map(|p| async move {
            let mut backoff = FIRST_BACKOFF;
            loop {
                let answer = tokio::time::timeout_at(
                    deadline,
                    self.markers.durable(*p, producer.producer_id),
                )
                .await;
                let whole = |follows: bool, owner_epoch: u64| {
                    follows || self.added_at(id, p) == Some(owner_epoch)
                };
                match answer {
                    Ok(Ok(Holding::All {
                        follows,
                        owner_epoch,
                    })) if whole(follows, owner_epoch) => return Ok(()),
                    Ok(Err(MarkerError::Gone)) => return Ok(()),
                    Ok(Ok(_)) => {
                        crate::metrics::txn_commit_refused();
                        tracing::info!(transactional_id = %id, partition = %p, "a commit refused: the owner may have lost batches it answered");
                        return Err(CoordError::Abortable(format!(
                            "{p} may have lost batches of this transaction that were answered"
                        )));
                    }
                    Ok(Err(MarkerError::Failed(why))) => {
                        if tokio::time::Instant::now() + backoff >= deadline {
                            tracing::info!(transactional_id = %id, partition = %p, error = %why, "a commit's partition did not answer in time");
                            return Err(TxnError::ConcurrentTransactions.into());
                        }
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(self.config.max_backoff);
                    }
                    Err(_) => return Err(TxnError::ConcurrentTransactions.into()),
                }
            }
        });
        futures::future::try_join_all(checks).await.map(|_| ())
    }

    /// The ownership epoch `p` had in this broker's view when `id`'s open
    /// transaction added it through this coordinator.
    fn added_at(&self, id: &TransactionalId, p: &PartitionKey) -> Option<u64> {
        self.added
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .and_then(|m| m.get(p))
            .copied()
    }

    /// Waits until no task of ours completes `id`, for at most
    /// [`TxnConfig::completion_wait`]. False if one still does.
    async fn wait_completed(&self, id: &TransactionalId) -> bool {
        if self.config.completion_wait.is_zero() {
            return false;
        }
        let deadline = tokio::time::Instant::now() + self.config.completion_wait;
        loop {
            let ended = self.completed.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if !self.is_completing(id) {
                return true;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return false;
            }
        }
    }

    fn is_completing(&self, id: &TransactionalId) -> bool {
        self.completing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(id)
    }

    async fn step_once(
        self: &Arc<Self>,
        fence: ShardFence,
        id: &TransactionalId,
        now_ms: u64,
        op: TxnOp,
    ) -> Result<TxnReply, CoordError> {
        self.set_active();
        let cmd = TxnCommand {
            fence,
            id: id.clone(),
            now_ms,
            op,
        };
        let reply = self.meta.txn_step(&cmd).await.map_err(|e| match e.kind() {
            MetaKind::StaleCoordinator => CoordError::NotCoordinator,
            _ => CoordError::Unavailable(e.to_string()),
        })?;
        if let Some(t) = &reply.txn
            && t.state.is_prepare()
        {
            self.spawn_completion(fence, id.clone(), t.clone());
        }
        Ok(reply)
    }

    /// InitProducerId with a transactional id: the producer id and epoch to
    /// use, or why not (CONCURRENT_TRANSACTIONS while an aborted
    /// transaction of an earlier instance completes: the client asks again).
    pub async fn init_producer(
        self: &Arc<Self>,
        fence: ShardFence,
        id: &TransactionalId,
        timeout_ms: u32,
        expected: Option<ProducerIdEpoch>,
        now_ms: u64,
    ) -> Result<ProducerIdEpoch, CoordError> {
        let op = TxnOp::InitProducer {
            timeout_ms,
            max_timeout_ms: self.config.max_timeout_ms,
            expected,
        };
        let reply = self.step(fence, id, now_ms, op).await?;
        if let Some(e) = reply.refused {
            return Err(e.into());
        }
        reply
            .txn
            .as_ref()
            .map(producer_of)
            .ok_or_else(|| CoordError::Unavailable("no state after InitProducerId".into()))
    }

    /// Takes over the transactions of a shard: those whose outcome was
    /// decided get their markers written and are completed.
    pub fn resume(
        self: &Arc<Self>,
        fence: ShardFence,
        txns: impl IntoIterator<Item = (TransactionalId, TxnMeta)>,
    ) {
        for (id, t) in txns {
            self.set_active();
            if t.state.is_prepare() {
                self.spawn_completion(fence, id, t);
            }
        }
    }

    /// Aborts the transactions of a shard past their timeout at `now_ms`
    /// (`txns` are the shard's): the producer is fenced and the markers
    /// written. Returns how many it aborted.
    pub async fn abort_expired(
        self: &Arc<Self>,
        fence: ShardFence,
        txns: &[(TransactionalId, TxnMeta)],
        now_ms: u64,
    ) -> usize {
        let mut aborted = 0;
        for (id, t) in txns.iter().filter(|(_, t)| t.expired(now_ms)) {
            let op = TxnOp::AbortExpired {
                producer: producer_of(t),
            };
            match self.step(fence, id, now_ms, op).await {
                Ok(r) if r.refused.is_none() => {
                    tracing::info!(transactional_id = %id, timeout_ms = t.timeout_ms, "transaction timed out: aborted");
                    crate::metrics::txn_timed_out();
                    aborted += 1;
                }
                // It moved on meanwhile (ended, or a new instance).
                Ok(_) => {}
                Err(e) => {
                    tracing::info!(transactional_id = %id, error = %e, "cannot abort a timed-out transaction now");
                    if e == CoordError::NotCoordinator {
                        break;
                    }
                }
            }
        }
        aborted
    }

    fn spawn_completion(self: &Arc<Self>, fence: ShardFence, id: TransactionalId, t: TxnMeta) {
        {
            let mut busy = self
                .completing
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !busy.insert(id.clone()) {
                return;
            }
        }
        let me = self.clone();
        tokio::spawn(async move {
            let res = me.complete(fence, &id, &t).await;
            if let Err(e) = res {
                tracing::info!(transactional_id = %id, error = %e, "transaction not completed here");
            }
            me.completing
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            me.completed.notify_waiters();
        });
    }

    /// Writes the markers of a decided transaction `t` and completes it in
    /// the metadata. Stops (NOT_COORDINATOR) once the shard moved: its new
    /// coordinator resumes.
    pub async fn complete(
        &self,
        fence: ShardFence,
        id: &TransactionalId,
        t: &TxnMeta,
    ) -> Result<(), CoordError> {
        let commit = match t.state {
            TxnState::PrepareCommit => true,
            TxnState::PrepareAbort => false,
            _ => return Err(TxnError::InvalidTxnState.into()),
        };
        let decided = std::time::Instant::now();
        let marker = Marker {
            producer: producer_of(t),
            commit,
            coordinator_epoch: fence.epoch,
        };
        let writes = t
            .partitions
            .iter()
            .map(|p| self.write_until_done(fence, *p, marker));
        for res in futures::future::join_all(writes).await {
            res?;
        }
        // The commit of the last marker usually completed it already.
        if !self.still_decided(id, marker.producer, commit).await {
            crate::metrics::txn_completed(commit, decided.elapsed());
            return Ok(());
        }
        let cmd = TxnCommand {
            fence,
            id: id.clone(),
            now_ms: floe_metadata::clock::now_ms(),
            op: TxnOp::Complete {
                producer: marker.producer,
                commit,
            },
        };
        let mut pause = FIRST_BACKOFF;
        loop {
            match self.meta.txn_step(&cmd).await {
                Ok(r) => {
                    return match r.refused {
                        None => {
                            crate::metrics::txn_completed(commit, decided.elapsed());
                            Ok(())
                        }
                        Some(e) => Err(e.into()),
                    };
                }
                Err(e) if e.kind() == MetaKind::StaleCoordinator => {
                    return Err(CoordError::NotCoordinator);
                }
                Err(e) => {
                    tracing::debug!(transactional_id = %id, error = %e, "completion not stored yet");
                    if !(self.holds)(&fence) {
                        return Err(CoordError::NotCoordinator);
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(self.config.max_backoff);
                }
            }
        }
    }

    /// Whether the metadata still shows `id` decided (PrepareCommit or
    /// PrepareAbort) at `producer` once every marker is written: then its
    /// completion is ours to store. The metadata completes a transaction
    /// in the command that commits its last marker, so usually it is
    /// complete already (and its producer may have begun the next one); a
    /// marker that was not needed or a partition that is gone leaves it
    /// decided. A failed read says yes: `Complete` is idempotent.
    async fn still_decided(
        &self,
        id: &TransactionalId,
        producer: ProducerIdEpoch,
        commit: bool,
    ) -> bool {
        let decided = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        match self
            .meta
            .transactions_where(&TxnFilter::id(id.clone()))
            .await
        {
            Ok(all) => all
                .iter()
                .find(|(i, _)| i == id)
                .is_some_and(|(_, t)| producer_of(t) == producer && t.state == decided),
            Err(_) => true,
        }
    }

    /// Writes one marker, again and again until it is written, the
    /// partition is gone or the shard is no longer ours.
    async fn write_until_done(
        &self,
        fence: ShardFence,
        partition: PartitionKey,
        marker: Marker,
    ) -> Result<(), CoordError> {
        let mut pause = FIRST_BACKOFF;
        loop {
            match self.markers.write_marker(partition, marker).await {
                Ok(()) => {
                    crate::metrics::txn_marker(true);
                    return Ok(());
                }
                Err(MarkerError::Gone) => return Ok(()),
                Err(MarkerError::Failed(why)) => {
                    crate::metrics::txn_marker(false);
                    tracing::debug!(%partition, why, "marker not written yet");
                    if !(self.holds)(&fence) {
                        return Err(CoordError::NotCoordinator);
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(self.config.max_backoff);
                }
            }
        }
    }
}
