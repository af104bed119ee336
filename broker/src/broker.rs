//! The broker: the partition owner at its core ([`Partitions`]) and the
//! coordinators on their shared runtime (consumer groups, share groups,
//! transactions), put together. This is where they are wired; each one's
//! rules live in its own module.

use std::sync::Arc;
use std::time::Duration;

use floe_metadata::api::MetaApi;
use floe_metadata::watch::ClusterWatch;
use floe_storage::StorePool;

use crate::config::BrokerConfig;
use crate::coordinator::{Runtime, ShardCoordinator, ShardTable};
use crate::error::Result;
use crate::partitions::Partitions;

pub use crate::partitions::{Acks, FetchData, OffsetAnswer, OffsetSpec, PendingProduce, ProduceOk};

/// The coordinators of a broker, and what they share.
pub(crate) struct Node {
    /// The consumer groups of the coordinator shards this broker owns.
    pub groups: Arc<crate::group::GroupService>,
    /// Coordinator shards owned, with their epochs.
    pub shards: Arc<ShardTable>,
    /// The transaction coordinator of the shards this broker owns.
    pub txn: Arc<crate::txn::TxnService>,
    /// Share groups (KIP-932): the groups of its coordinator shards and the
    /// share-partitions of its partitions.
    pub share: crate::share::ShareNode,
    /// Clients of the other brokers this one calls (markers, share
    /// releases), one per address.
    pub peers: Arc<crate::rpc::Peers>,
}

/// A running broker. Cheap to clone. Its partition calls are those of
/// [`Partitions`] (it dereferences to them).
#[derive(Clone)]
pub struct Broker {
    partitions: Partitions,
    pub(crate) node: Arc<Node>,
}

impl std::ops::Deref for Broker {
    type Target = Partitions;

    fn deref(&self) -> &Partitions {
        &self.partitions
    }
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker").field("id", &self.id()).finish()
    }
}

/// What the partition owner tells the coordinators.
struct Heard {
    runtime: Arc<Runtime>,
    node: std::sync::Weak<Node>,
}

impl crate::partitions::Listener for Heard {
    fn partition_dropped(&self, key: &floe_storage::PartitionKey) {
        if let Some(node) = self.node.upgrade() {
            node.share.service().forget_partition(key);
        }
    }

    fn lease_revalidated(&self, view: &floe_metadata::model::ClusterView) -> (usize, usize) {
        self.runtime.revalidate(view)
    }
}

impl Broker {
    /// Registers with the metadata service, starts the partition owner and
    /// the coordinators, and their background loops.
    pub async fn start(
        cfg: BrokerConfig,
        meta: Arc<dyn MetaApi>,
        pool: Arc<StorePool>,
        view: ClusterWatch,
    ) -> Result<Broker> {
        let max_parked = cfg.share_max_parked.max(4);
        let mut group_config = cfg.group.clone();
        group_config.shards = floe_metadata::state::DEFAULT_SHARDS;
        let txn_config = cfg.txn.clone();
        let broker_id = cfg.id;
        let partitions = Partitions::start(cfg, meta.clone(), pool, view).await?;
        let groups = Arc::new(
            crate::group::GroupCoordinator::new(group_config).with_store(Arc::new(
                crate::group::store::MetaGroupStore {
                    meta: meta.clone(),
                    broker: broker_id,
                },
            )),
        );
        let shards = Arc::new(ShardTable::new(partitions.clone()));
        let txn = crate::txn::TxnService::new(partitions.clone(), shards.clone(), txn_config);
        let peers: Arc<crate::rpc::Peers> = Arc::default();
        let group_service =
            crate::group::GroupService::new(partitions.clone(), shards.clone(), groups.clone());
        let node = Arc::new(Node {
            groups: group_service.clone(),
            shards: shards.clone(),
            txn: txn.clone(),
            share: crate::share::ShareNode::new(
                partitions.clone(),
                shards.clone(),
                groups.clone(),
                crate::share::ShareService::new(
                    crate::share::ShareConfig {
                        max_delayed: max_parked,
                        ..crate::share::ShareConfig::default()
                    },
                    crate::share::ShareGroupConfig::default(),
                ),
                peers.clone(),
            ),
            peers,
        });
        let b = Broker { partitions, node };
        let coordinators: Vec<Arc<dyn ShardCoordinator>> = vec![group_service.clone(), txn.clone()];
        let runtime = Arc::new(Runtime::new(b.partitions.clone(), shards, coordinators));
        b.partitions.set_listener(Arc::new(Heard {
            runtime: runtime.clone(),
            node: Arc::downgrade(&b.node),
        }));
        tokio::spawn(runtime.run());
        tokio::spawn(crate::txn::serve::timeouts(txn));
        tokio::spawn(crate::share::sweep_members(b.node.share.clone()));
        tokio::spawn(group_service.clone().forget_idle_groups());
        tokio::spawn(group_service.report_lag(Arc::new(OwnerEnds {
            broker: Arc::downgrade(&b.partitions.inner),
            peers: b.node.peers.clone(),
        })));
        tokio::spawn(crate::orphans::task::run(
            b.partitions.clone(),
            b.node.shards.clone(),
        ));
        Ok(b)
    }

    /// Runs an orphan scan now if this broker serves coordinator shard 0, as
    /// it does every `orphan_scan_interval` (tests and tools); `None` if it
    /// does not serve the shard.
    pub async fn scan_orphans_now(
        &self,
    ) -> Option<std::result::Result<crate::orphans::ScanReport, crate::orphans::OrphanError>> {
        crate::orphans::task::scan_if_ours(&self.partitions, &self.node.shards).await
    }

    /// The partition owner at this broker's core.
    pub fn partitions(&self) -> &Partitions {
        &self.partitions
    }

    /// The group coordinator, if this broker owns `group_id`'s shard now.
    pub fn coordinator(
        &self,
        group_id: &str,
        shard_count: u32,
    ) -> std::result::Result<&crate::group::GroupCoordinator, crate::group::GroupError> {
        self.node.groups.coordinator_at(group_id, shard_count)
    }

    /// The coordinator shards this broker serves now.
    pub fn owned_shards(&self) -> Vec<u32> {
        self.node.shards.owned()
    }

    /// The coordinator shards this broker owns, with their fences.
    pub fn shards(&self) -> &Arc<ShardTable> {
        &self.node.shards
    }

    /// The transaction coordinator on this broker's shards.
    pub fn txn(&self) -> &Arc<crate::txn::TxnService> {
        &self.node.txn
    }

    /// This broker's transaction coordinator.
    pub fn txn_coordinator(&self) -> &Arc<crate::txn::TxnCoordinator> {
        self.node.txn.coordinator()
    }

    /// Gives the transaction coordinator its marker writer (the partition
    /// side's, which needs this broker). False if one was given already.
    pub fn set_marker_writer(&self, w: Arc<dyn crate::txn::MarkerWriter>) -> bool {
        self.node.txn.set_marker_writer(w)
    }

    /// The marker writer of this broker's transaction coordinator: at the
    /// partition here, or at its owner over the RPC.
    pub fn owner_markers(&self) -> crate::txn::markers::OwnerMarkers {
        crate::txn::markers::OwnerMarkers::new(&self.partitions, self.node.peers.clone())
    }

    /// This broker's share groups.
    pub fn share(&self) -> &crate::share::ShareNode {
        &self.node.share
    }

    /// The coordinator of every shard this broker owns (ListGroups).
    pub fn groups(&self) -> &crate::group::GroupCoordinator {
        self.node.groups.coordinator()
    }

    /// How long a drained broker keeps answering before it stops (see
    /// [`Broker::drain`]).
    pub const DRAINED_LINGER: Duration = Duration::from_millis(200);

    /// Hands everything this broker owns to the other brokers before it
    /// stops (a graceful stop, `SIGTERM`): asks the metadata service to
    /// drain it, so the controller hands its partitions and coordinator
    /// shards over (each is flushed, then released, and its new owner takes
    /// it at the next epoch) and gives it nothing new; then waits, up to
    /// `within`, until it owns nothing. Meanwhile it keeps serving and
    /// renewing its lease, so a client sees at most a short pause per
    /// partition (its writes wait in the proxy for the new owner). Once it
    /// owns nothing it goes on answering for [`Self::DRAINED_LINGER`], so
    /// that calls routed here by a view a moment old are refused cleanly
    /// rather than cut off by the process ending. Returns
    /// whether everything moved; with no other live broker there is nowhere
    /// to move to, and it returns false at once.
    pub async fn drain(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        let me = self.broker_id();
        // A live broker to hand over to (not one draining too).
        let others = || {
            self.partitions.view().current().nodes.iter().any(|n| {
                n.id != me
                    && n.kind == floe_metadata::model::NodeKind::Broker
                    && n.state == floe_metadata::model::NodeState::Live
            })
        };
        if !others() {
            tracing::info!(broker = %me, "no other live broker: stopping without a hand-over");
            return false;
        }
        let started = tokio::time::Instant::now();
        loop {
            match self.partitions.meta().drain(me).await {
                Ok(()) => break,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::warn!(error = %e, "asking to be drained failed; will retry");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "asking to be drained failed; stopping without a hand-over");
                    return false;
                }
            }
        }
        tracing::info!(broker = %me, partitions = self.partitions.logs().len(), shards = self.owned_shards().len(), "draining: handing everything over");
        loop {
            let (partitions, shards) = (self.partitions.logs().len(), self.owned_shards().len());
            if partitions == 0 && shards == 0 {
                tracing::info!(broker = %me, elapsed_ms = started.elapsed().as_millis() as u64, "drained: everything handed over");
                // A proxy whose view has not shown the last release yet may
                // still send a write here: it is refused (nothing is owned)
                // and the proxy sends it to the new owner, where a process
                // already gone would have broken the call off and left
                // its outcome unknown (REQUEST_TIMED_OUT to the client).
                tokio::time::sleep(Self::DRAINED_LINGER).await;
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(broker = %me, partitions, shards, "drain did not finish in time; stopping anyway");
                return false;
            }
            if !others() {
                // Every other broker is draining or gone (the whole cluster
                // is being stopped): nobody will take the rest.
                tracing::info!(broker = %me, partitions, shards, "no live broker left to hand over to; stopping");
                return false;
            }
            // Wake the ownership loop at once rather than at its next round.
            let mut rx = self.partitions.view().subscribe();
            let _ = tokio::time::timeout(Duration::from_millis(50), rx.changed()).await;
        }
    }
}

/// The groups' lag's end offsets: each partition's high watermark from its
/// owner in the cluster view, here or over the RPC
/// ([`PartitionOwner::list_offset`](crate::PartitionOwner::list_offset)).
/// Holds its broker weakly (the broker holds the task that holds this).
struct OwnerEnds {
    broker: std::sync::Weak<crate::partitions::Inner>,
    peers: Arc<crate::rpc::Peers>,
}

#[async_trait::async_trait]
impl crate::group::lag::EndOffsets for OwnerEnds {
    async fn end_offset(&self, topic: &str, partition: u32) -> Option<i64> {
        use crate::PartitionOwner;
        let broker = Partitions {
            inner: self.broker.upgrade()?,
        };
        let snap = broker.view().current();
        let info = snap.topics.get(topic)?;
        let key = info.partition_key(partition)?;
        let owner = info
            .partitions
            .iter()
            .find(|p| p.partition == partition)?
            .owner?;
        let answer = if owner == broker.broker_id() {
            PartitionOwner::list_offset(&broker, &key, crate::OffsetSpec::Latest, None).await
        } else {
            let addr = snap.broker_addr(owner)?;
            self.peers
                .get(addr)
                .list_offset(&key, crate::OffsetSpec::Latest, None)
                .await
        };
        match answer {
            Ok((end, _)) => Some(end.offset),
            Err(e) => {
                tracing::debug!(partition = %key, error = %e, "end offset not read for the groups' lag");
                None
            }
        }
    }
}
