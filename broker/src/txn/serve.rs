//! The broker's side of its [`TxnCoordinator`]: the steps a proxy asks for,
//! run under this broker's fence of the id's shard and its clock; the
//! transactions of a shard taken over resumed; and the timer that aborts
//! transactions past their timeout in the shards this broker owns.

use std::sync::Arc;
use std::time::Duration;

use floe_metadata::command::ShardFence;
use floe_metadata::ids::TransactionalId;
use floe_metadata::txn::{TxnError, TxnFilter, TxnMeta, TxnOp, TxnReply, TxnState};

use super::{CoordError, MarkerSlot, MarkerWriter, TxnCoordinator};
use crate::coordinator::{ShardCoordinator, ShardTable};
use crate::partitions::Partitions;

/// How often the timer looks for transactions past their timeout.
const TIMEOUT_CHECK: Duration = Duration::from_secs(1);

fn unavailable(e: impl std::fmt::Display) -> CoordError {
    CoordError::Unavailable(e.to_string())
}

/// A broker's transaction coordinator on the coordinator runtime: the
/// shards it serves, the partitions it reads its clock and view from.
pub struct TxnService {
    partitions: Partitions,
    shards: Arc<ShardTable>,
    coordinator: Arc<TxnCoordinator>,
    markers: Arc<MarkerSlot>,
}

impl std::fmt::Debug for TxnService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnService")
            .field("broker", &self.partitions.id())
            .finish_non_exhaustive()
    }
}

impl TxnService {
    /// The coordinator of `shards`' transactions, its writes fenced by
    /// them, its markers written by the writer given later
    /// ([`TxnService::set_marker_writer`]).
    pub fn new(
        partitions: Partitions,
        shards: Arc<ShardTable>,
        config: super::TxnConfig,
    ) -> Arc<Self> {
        let markers = Arc::new(MarkerSlot::default());
        let holds: super::ShardCheck = {
            let shards = shards.clone();
            Arc::new(move |f| shards.holds(f))
        };
        let coordinator =
            TxnCoordinator::new(partitions.meta().clone(), markers.clone(), holds, config);
        Arc::new(Self {
            partitions,
            shards,
            coordinator,
            markers,
        })
    }

    /// This broker's transaction coordinator.
    pub fn coordinator(&self) -> &Arc<TxnCoordinator> {
        &self.coordinator
    }

    /// Gives the coordinator its marker writer (the partition side's, which
    /// needs this broker). False if one was given already.
    pub fn set_marker_writer(&self, w: Arc<dyn MarkerWriter>) -> bool {
        self.markers.set(w)
    }

    /// The fence under which this broker coordinates `id`: the id's shard
    /// and the epoch this broker holds it at. NOT_COORDINATOR when the shard
    /// is not ours, or our lease may have lapsed.
    pub fn txn_fence(&self, id: &TransactionalId) -> Result<ShardFence, CoordError> {
        self.shards
            .serving_fence(self.shards.shard_of(id.as_str()))
            .ok_or(CoordError::NotCoordinator)
    }

    /// One client step on `id` (InitProducer, AddPartitions, AddGroup,
    /// CommitOffsets, End), under this broker's fence of the id's shard and
    /// at its clock. Refusals by the transaction's rules are in the reply;
    /// the coordinator's own steps (Complete, AbortExpired) are not the
    /// client's to ask (INVALID_REQUEST).
    pub async fn txn_step(&self, id: &TransactionalId, op: TxnOp) -> Result<TxnReply, CoordError> {
        let op = match op {
            TxnOp::InitProducer {
                timeout_ms,
                expected,
                ..
            } => TxnOp::InitProducer {
                timeout_ms,
                max_timeout_ms: self.coordinator.config().max_timeout_ms,
                expected,
            },
            TxnOp::Complete { .. } | TxnOp::AbortExpired { .. } => {
                return Err(TxnError::InvalidRequest.into());
            }
            op => op,
        };
        let fence = self.txn_fence(id)?;
        let now = floe_metadata::clock::now_ms();
        self.coordinator.step(fence, id, now, op).await
    }

    /// The transactions of the shards this broker coordinates now.
    pub async fn list_txns(&self) -> Result<Vec<(TransactionalId, TxnMeta)>, CoordError> {
        let owned = self.shards.owned();
        if owned.is_empty() || self.partitions.check_lease().is_err() {
            return Ok(Vec::new());
        }
        let shards = self.shards.shard_count();
        self.partitions
            .meta()
            .transactions_where(&TxnFilter::shards(shards, owned))
            .await
            .map_err(unavailable)
    }

    /// One transactional id's state (`None`: unknown), if this broker
    /// coordinates it (NOT_COORDINATOR otherwise).
    pub async fn describe_txn(&self, id: &TransactionalId) -> Result<Option<TxnMeta>, CoordError> {
        self.txn_fence(id)?;
        let one = self
            .partitions
            .meta()
            .transactions_where(&TxnFilter::id(id.clone()))
            .await
            .map_err(unavailable)?;
        Ok(one.into_iter().find(|(i, _)| i == id).map(|(_, t)| t))
    }
}

/// Every second: the transactions of the shards this broker owns that are
/// past their timeout are aborted (their producer fenced). Reads nothing
/// until this coordinator has seen a transaction.
pub(crate) async fn timeouts(svc: Arc<TxnService>) {
    let partitions = svc.partitions.clone();
    crate::coordinator::timers::every(partitions, TIMEOUT_CHECK, || svc.abort_expired()).await
}

impl TxnService {
    /// One pass of [`timeouts`].
    async fn abort_expired(&self) {
        let owned = self.shards.owned();
        if !self.coordinator.is_active() || owned.is_empty() {
            crate::metrics::txn_open(0);
            return;
        }
        let shards = self.shards.shard_count();
        let owned = TxnFilter::shards(shards, owned);
        let all = match self.partitions.meta().transactions_where(&owned).await {
            Ok(all) => all,
            Err(e) => {
                tracing::debug!(error = %e, "reading transactions for their timeouts failed");
                return;
            }
        };
        let now = floe_metadata::clock::now_ms();
        crate::metrics::txn_open(
            all.iter()
                .filter(|(_, t)| t.state == TxnState::Ongoing || t.state.is_prepare())
                .count(),
        );
        let mut by_shard: std::collections::HashMap<u32, Vec<(TransactionalId, TxnMeta)>> =
            Default::default();
        for (id, t) in all.into_iter().filter(|(_, t)| t.expired(now)) {
            by_shard
                .entry(crate::coordinator::shard_of(id.as_str(), shards))
                .or_default()
                .push((id, t));
        }
        for (shard, txns) in by_shard {
            if let Some(fence) = self.shards.fence(shard) {
                self.coordinator.abort_expired(fence, &txns, now).await;
            }
        }
    }
}

#[async_trait::async_trait]
impl ShardCoordinator for TxnService {
    fn name(&self) -> &'static str {
        "transactions"
    }

    /// Transactions are read per step from the metadata: nothing to load.
    async fn load(&self, _fence: &ShardFence) -> Result<usize, String> {
        Ok(0)
    }

    /// The transactions of the shard a previous coordinator decided get
    /// their markers written and are completed. Retried until read, or the
    /// shard is no longer ours.
    fn served(&self, fence: &ShardFence) {
        let (partitions, shards, txn, fence) = (
            self.partitions.clone(),
            self.shards.clone(),
            self.coordinator.clone(),
            *fence,
        );
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(50);
            loop {
                if !shards.holds(&fence) || partitions.is_stopping() {
                    return;
                }
                let mine = TxnFilter::shards(shards.shard_count(), vec![fence.shard.0]);
                match partitions.meta().transactions_where(&mine).await {
                    Ok(mine) => {
                        txn.resume(fence, mine);
                        return;
                    }
                    Err(e) => {
                        tracing::info!(shard = fence.shard.0, error = %e, "reading the shard's transactions failed; will retry");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                    }
                }
            }
        });
    }

    /// Transactions hold no state per shard here.
    fn dropped(&self, _shard: u32) -> usize {
        0
    }
}

#[async_trait::async_trait]
impl super::TxnCoordination for TxnService {
    async fn txn_step(&self, id: &TransactionalId, op: TxnOp) -> Result<TxnReply, CoordError> {
        TxnService::txn_step(self, id, op).await
    }

    async fn describe_txn(&self, id: &TransactionalId) -> Result<Option<TxnMeta>, CoordError> {
        TxnService::describe_txn(self, id).await
    }

    async fn list_txns(&self) -> Result<Vec<(TransactionalId, TxnMeta)>, CoordError> {
        TxnService::list_txns(self).await
    }
}
