//! The broker's side of its [`TxnCoordinator`]: the steps a proxy asks for,
//! run under this broker's fence of the id's shard and its clock; the
//! transactions of a shard taken over resumed; and the timer that aborts
//! transactions past their timeout in the shards this broker owns.

use std::sync::Arc;
use std::time::Duration;

use floe_metadata::command::ShardFence;
use floe_metadata::ids::TransactionalId;
use floe_metadata::txn::{TxnError, TxnFilter, TxnMeta, TxnOp, TxnReply, TxnState};

use super::{CoordError, MarkerWriter, TxnCoordinator};
use crate::broker::Broker;

/// How often the timer looks for transactions past their timeout.
const TIMEOUT_CHECK: Duration = Duration::from_secs(1);

fn unavailable(e: impl std::fmt::Display) -> CoordError {
    CoordError::Unavailable(e.to_string())
}

impl Broker {
    /// This broker's transaction coordinator.
    pub fn txn_coordinator(&self) -> &Arc<TxnCoordinator> {
        &self.node.txn
    }

    /// Gives the coordinator its marker writer (the partition side's, which
    /// needs this broker). False if one was given already.
    pub fn set_marker_writer(&self, w: Arc<dyn MarkerWriter>) -> bool {
        self.node.markers.set(w)
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
                max_timeout_ms: self.node.txn.config().max_timeout_ms,
                expected,
            },
            TxnOp::Complete { .. } | TxnOp::AbortExpired { .. } => {
                return Err(TxnError::InvalidRequest.into());
            }
            op => op,
        };
        let fence = self.txn_fence(id)?;
        let now = floe_metadata::clock::now_ms();
        self.node.txn.step(fence, id, now, op).await
    }

    /// The transactions of the shards this broker coordinates now.
    pub async fn list_txns(&self) -> Result<Vec<(TransactionalId, TxnMeta)>, CoordError> {
        let owned = self.owned_shards();
        if owned.is_empty() || self.check_lease().is_err() {
            return Ok(Vec::new());
        }
        let shards = self.view().current().shard_count();
        self.inner
            .meta
            .transactions_where(&TxnFilter::shards(shards, owned))
            .await
            .map_err(unavailable)
    }

    /// One transactional id's state (`None`: unknown), if this broker
    /// coordinates it (NOT_COORDINATOR otherwise).
    pub async fn describe_txn(&self, id: &TransactionalId) -> Result<Option<TxnMeta>, CoordError> {
        self.txn_fence(id)?;
        let one = self
            .inner
            .meta
            .transactions_where(&TxnFilter::id(id.clone()))
            .await
            .map_err(unavailable)?;
        Ok(one.into_iter().find(|(i, _)| i == id).map(|(_, t)| t))
    }
}

/// Every second: the transactions of the shards this broker owns that are
/// past their timeout are aborted (their producer fenced). Reads nothing
/// until this coordinator has seen a transaction.
pub(crate) async fn timeouts(b: Broker) {
    let partitions = b.partitions().clone();
    crate::coordinator::timers::every(partitions, TIMEOUT_CHECK, || abort_expired(&b)).await
}

/// One pass of [`timeouts`].
async fn abort_expired(b: &Broker) {
    if !b.node.txn.is_active() || b.owned_shards().is_empty() {
        crate::metrics::txn_open(0);
        return;
    }
    let shards = b.view().current().shard_count();
    let owned = TxnFilter::shards(shards, b.owned_shards());
    let all = match b.inner.meta.transactions_where(&owned).await {
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
            .entry(crate::group::shard_of(id.as_str(), shards))
            .or_default()
            .push((id, t));
    }
    for (shard, txns) in by_shard {
        if let Some(fence) = b.shards().fence(shard) {
            b.node.txn.abort_expired(fence, &txns, now).await;
        }
    }
}

/// Transactions on the coordinator runtime: a shard taken over has the
/// transactions a previous coordinator decided completed.
pub(crate) struct TxnShards {
    partitions: crate::partitions::Partitions,
    shards: Arc<crate::coordinator::ShardTable>,
    txn: Arc<TxnCoordinator>,
}

impl TxnShards {
    pub(crate) fn new(b: &Broker) -> Self {
        Self {
            partitions: b.partitions().clone(),
            shards: b.shards().clone(),
            txn: b.txn_coordinator().clone(),
        }
    }

    /// The transactions of `shard` (taken over at `fence`) whose outcome a
    /// previous coordinator decided get their markers written and are
    /// completed. Retried until read, or the shard is no longer ours.
    async fn resume(
        partitions: crate::partitions::Partitions,
        shards: Arc<crate::coordinator::ShardTable>,
        txn: Arc<TxnCoordinator>,
        fence: ShardFence,
    ) {
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
    }
}

#[async_trait::async_trait]
impl crate::coordinator::ShardCoordinator for TxnShards {
    fn name(&self) -> &'static str {
        "transactions"
    }

    /// Transactions are read per step from the metadata: nothing to load.
    async fn load(&self, _fence: &ShardFence) -> Result<usize, String> {
        Ok(0)
    }

    fn served(&self, fence: &ShardFence) {
        tokio::spawn(Self::resume(
            self.partitions.clone(),
            self.shards.clone(),
            self.txn.clone(),
            *fence,
        ));
    }

    fn dropped(&self, _shard: u32) -> usize {
        0
    }
}
