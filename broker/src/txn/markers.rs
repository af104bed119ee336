//! The partition owner's side of transactions as other brokers and the
//! proxy reach it: writing a COMMIT/ABORT marker ([`Broker::write_marker`],
//! over the RPC route `/rpc/txn/marker`), the coordinator's
//! [`MarkerWriter`] that finds each partition's owner ([`OwnerMarkers`]),
//! and the producers of a partition (DescribeProducers,
//! [`Broker::producers`], route `/rpc/producers`).

use std::sync::Weak;

use floe_metadata::ErrorKind as MetaKind;
use floe_metadata::ids::{Epoch, PartitionKey, ProducerEpoch, ProducerId};
use floe_metadata::txn::ProducerIdEpoch;

use super::{Holding, Marker, MarkerError, MarkerWriter};
use crate::broker::{Broker, Inner};
use crate::error::{BrokerError, CallError, ErrorKind, Result};
use crate::log::MarkerAppended;
use crate::rpc::{RemoteBroker, proto, routes};

/// One producer of a partition as DescribeProducers answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerInfo {
    pub producer_id: i64,
    pub epoch: i16,
    /// The last sequence stored (-1: none known).
    pub last_sequence: i32,
    /// When it last wrote here (ms; -1: not known, e.g. since a take-over).
    pub last_timestamp: i64,
    /// Where its open transaction here begins (-1: none open).
    pub txn_start_offset: i64,
}

impl Broker {
    /// Writes `marker` at `key`, owned here: sequenced as a control batch
    /// and answered once it is committed. A producer with no transaction
    /// open on the partition needs no marker: answered at once.
    pub async fn write_marker(&self, key: &PartitionKey, marker: &Marker) -> Result<()> {
        if self.is_stopping() {
            return Err(BrokerError::new(
                ErrorKind::ShuttingDown,
                "the broker is stopping",
            ));
        }
        let log = self.active_log(key)?;
        let now = floe_metadata::clock::now_ms() as i64;
        // A marker is a few dozen bytes and frees the partition's LSO: it
        // is never refused for the backlog.
        let held = crate::backlog::Held::untracked();
        let (rx, queued) = match log.append_marker(marker, now, held)? {
            MarkerAppended::NotNeeded => return Ok(()),
            MarkerAppended::New(rx, queued) => (rx, queued),
        };
        // The producer's next transaction and read_committed readers wait
        // for this marker: it goes at once unless flushes are paced (a
        // store that charges per PUT), where it takes the next paced flush
        // as a produce does, so markers never raise the PUT rate.
        if !self.inner.cfg.flush.paced || queued >= self.inner.cfg.flush.bytes {
            self.inner.flush_now.notify_one();
        }
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(BrokerError::not_owner(key)),
        }
    }

    /// Before a commit is decided (the coordinator's
    /// [`MarkerWriter::durable`]): what this owner of `key` holds of
    /// `producer`'s open transaction there
    /// ([`crate::txn::partition::PartitionTxnLog::holding`]). When it holds
    /// all of it, answered once that is durable (the high watermark at the
    /// log end as it was when asked; a flush is asked for at once unless
    /// flushes are paced); [`Holding::NotAll`] at once if not, or if a
    /// failed flush rolls some of it back meanwhile.
    pub async fn txn_durable(&self, key: &PartitionKey, producer: ProducerId) -> Result<Holding> {
        if self.is_stopping() {
            return Err(BrokerError::new(
                ErrorKind::ShuttingDown,
                "the broker is stopping",
            ));
        }
        let log = self.active_log(key)?;
        let mut hw = log.subscribe_hw();
        let (target, follows, owner_epoch) = {
            let st = log.lock();
            let Some(follows) = st.txns.holding(producer) else {
                return Ok(Holding::NotAll);
            };
            (st.leo, follows, st.epoch)
        };
        self.request_sequenced();
        loop {
            {
                let st = log.lock();
                if st.status != crate::log::Status::Active {
                    return Err(BrokerError::not_owner(*key));
                }
                if st.txns.holding(producer).is_none() {
                    return Ok(Holding::NotAll);
                }
                if st.hw >= target {
                    return Ok(Holding::All {
                        follows,
                        owner_epoch,
                    });
                }
            }
            if hw.changed().await.is_err() {
                return Err(BrokerError::not_owner(*key));
            }
        }
    }

    /// KIP-890's check, before a produce is sequenced: a transactional
    /// batch that would begin a transaction on `key` (its producer has none
    /// open here) is taken only if the metadata shows that producer id, at
    /// that epoch, in an ongoing transaction that holds the partition
    /// (AddPartitionsToTxn is answered before the client sends). A batch
    /// of a transaction already open here needs no check: its marker ends
    /// it. So a forged or late transactional batch can never hold the last
    /// stable offset without a coordinator that will end it.
    pub(crate) async fn verify_transactional(
        &self,
        key: &PartitionKey,
        records: &[u8],
    ) -> Result<()> {
        // Headers only, without the log's lock: most produces hold no
        // transactional batch.
        let mut unchecked: Vec<(i64, i16)> = Vec::new();
        for item in floe_storage::batch::BatchIter::new(records, usize::MAX) {
            let Ok((_, v)) = item else { break }; // sequencing refuses it
            let who = (v.producer_id(), v.producer_epoch());
            if v.is_transactional() && !v.is_control() && !unchecked.contains(&who) {
                unchecked.push(who);
            }
        }
        if unchecked.is_empty() {
            return Ok(());
        }
        let Some(log) = self.log(key) else {
            return Ok(()); // sequencing refuses it
        };
        {
            let st = log.lock();
            unchecked.retain(|(pid, _)| !st.txns.is_open(ProducerId(*pid)));
        }
        if unchecked.is_empty() {
            return Ok(());
        }
        for (pid, epoch) in unchecked {
            // One keyed lookup: the transactional id holding this producer id.
            let txns = self
                .meta()
                .transactions_where(&floe_metadata::txn::TxnFilter {
                    producer_id: Some(floe_metadata::ids::ProducerId(pid)),
                    ..Default::default()
                })
                .await
                .map_err(BrokerError::from)?;
            let Some((id, t)) = txns.iter().find(|(_, t)| t.producer_id.0 == pid) else {
                return Err(BrokerError::new(
                    ErrorKind::InvalidTxnState,
                    format!("producer {pid} has no transaction"),
                ));
            };
            if t.epoch.0 > epoch {
                return Err(BrokerError::new(
                    ErrorKind::InvalidProducerEpoch,
                    format!(
                        "producer {pid} epoch {epoch} is fenced by epoch {}",
                        t.epoch.0
                    ),
                ));
            }
            if t.epoch.0 != epoch
                || t.state != floe_metadata::txn::TxnState::Ongoing
                || !t.partitions.contains(key)
            {
                return Err(BrokerError::new(
                    ErrorKind::InvalidTxnState,
                    format!(
                        "{key} is not in an ongoing transaction of {} at producer {pid} epoch {epoch}",
                        id.as_str()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The producers the owner of `key` knows, with their open
    /// transactions' start offsets.
    pub fn producers(&self, key: &PartitionKey) -> Result<Vec<ProducerInfo>> {
        let log = self.active_log(key)?;
        let st = log.lock();
        let mut out: Vec<ProducerInfo> = st
            .producers
            .describe()
            .into_iter()
            .map(|(id, epoch, last, at)| ProducerInfo {
                producer_id: id,
                epoch,
                last_sequence: last,
                last_timestamp: at,
                txn_start_offset: st.txns.open_since(ProducerId(id)).unwrap_or(-1),
            })
            .collect();
        // A producer with a transaction open but forgotten as idempotent
        // (expired) is still listed.
        for p in st.txns.open_producers() {
            if !out.iter().any(|i| i.producer_id == p.0) {
                out.push(ProducerInfo {
                    producer_id: p.0,
                    epoch: -1,
                    last_sequence: -1,
                    last_timestamp: -1,
                    txn_start_offset: st.txns.open_since(p).unwrap_or(-1),
                });
            }
        }
        Ok(out)
    }
}

/// The coordinator's [`MarkerWriter`]: finds each partition's owner in
/// the cluster view and writes there, directly when it is this broker,
/// else over the RPC. Holds its broker weakly (the broker holds the
/// coordinator that holds this).
#[derive(Debug)]
pub struct OwnerMarkers {
    broker: Weak<Inner>,
}

impl OwnerMarkers {
    pub fn new(broker: &Broker) -> Self {
        Self {
            broker: std::sync::Arc::downgrade(&broker.inner),
        }
    }
}

/// What a marker's failure means for the coordinator.
fn verdict(e: &BrokerError) -> MarkerError {
    match e.kind() {
        ErrorKind::UnknownTopicOrPartition => MarkerError::Gone,
        _ => MarkerError::Failed(e.to_string()),
    }
}

/// Where a partition's owner is, for the coordinator.
enum Owner {
    Here(Broker),
    Remote(Box<crate::rpc::RemoteBroker>),
}

impl OwnerMarkers {
    /// The owner of `partition` in the cluster view: this broker or another.
    async fn owner(&self, partition: PartitionKey) -> std::result::Result<Owner, MarkerError> {
        let Some(inner) = self.broker.upgrade() else {
            return Err(MarkerError::Failed("the broker stopped".into()));
        };
        let broker = Broker { inner };
        let snap = broker.view().current();
        let owner = snap
            .by_id
            .get(&partition.topic)
            .and_then(|t| {
                t.partitions
                    .iter()
                    .find(|p| p.partition == partition.partition)
            })
            .map(|p| p.owner);
        let owner = match owner {
            Some(Some(o)) => o,
            Some(None) => {
                return Err(MarkerError::Failed(format!(
                    "partition {partition} has no owner"
                )));
            }
            // Not in this broker's view: deleted, or a view behind the
            // metadata; the metadata says which.
            None => {
                return match broker.meta().partition_index(partition, i64::MAX).await {
                    Err(e)
                        if matches!(
                            e.kind(),
                            MetaKind::UnknownTopic | MetaKind::UnknownPartition
                        ) =>
                    {
                        Err(MarkerError::Gone)
                    }
                    Err(e) => Err(MarkerError::Failed(e.to_string())),
                    Ok(_) => Err(MarkerError::Failed(format!(
                        "partition {partition} is not in the cluster view yet"
                    ))),
                };
            }
        };
        if owner == broker.broker_id() {
            return Ok(Owner::Here(broker));
        }
        let Some(addr) = snap.broker_addr(owner) else {
            return Err(MarkerError::Failed(format!(
                "the owner {owner} of {partition} is not registered"
            )));
        };
        let peer = broker.inner.peers.get(addr);
        Ok(Owner::Remote(Box::new(peer)))
    }
}

/// What a remote owner's failure means for the coordinator.
fn call_verdict(e: CallError) -> MarkerError {
    match e {
        CallError::Broker(e) => verdict(&e),
        CallError::Routing(e) => MarkerError::Failed(e.to_string()),
    }
}

#[async_trait::async_trait]
impl MarkerWriter for OwnerMarkers {
    async fn write_marker(
        &self,
        partition: PartitionKey,
        marker: Marker,
    ) -> std::result::Result<(), MarkerError> {
        match self.owner(partition).await? {
            Owner::Here(b) => b
                .write_marker(&partition, &marker)
                .await
                .map_err(|e| verdict(&e)),
            Owner::Remote(peer) => peer
                .write_marker(&partition, &marker)
                .await
                .map_err(call_verdict),
        }
    }

    async fn durable(
        &self,
        partition: PartitionKey,
        producer: ProducerId,
    ) -> std::result::Result<Holding, MarkerError> {
        match self.owner(partition).await? {
            Owner::Here(b) => b
                .txn_durable(&partition, producer)
                .await
                .map_err(|e| verdict(&e)),
            Owner::Remote(peer) => peer
                .txn_durable(&partition, producer)
                .await
                .map_err(call_verdict),
        }
    }

    fn owner_epoch(&self, partition: PartitionKey) -> Option<u64> {
        let inner = self.broker.upgrade()?;
        let snap = Broker { inner }.view().current();
        snap.by_id
            .get(&partition.topic)?
            .partitions
            .iter()
            .find(|p| p.partition == partition.partition)
            .map(|p| p.epoch.0)
    }
}

impl RemoteBroker {
    /// [`Broker::write_marker`] at this broker.
    pub async fn write_marker(
        &self,
        key: &PartitionKey,
        marker: &Marker,
    ) -> std::result::Result<(), CallError> {
        let r = self
            .call::<routes::TxnMarker>(proto::MarkerRequest {
                partition: Some(crate::rpc::part(key)),
                producer_id: marker.producer.producer_id.0,
                producer_epoch: i32::from(marker.producer.epoch.0),
                commit: marker.commit,
                coordinator_epoch: marker.coordinator_epoch.0,
            })
            .await?;
        match r.error {
            None => Ok(()),
            Some(e) => Err(CallError::Broker(crate::rpc::from_proto(e))),
        }
    }

    /// [`Broker::txn_durable`] at this broker.
    pub async fn txn_durable(
        &self,
        key: &PartitionKey,
        producer: ProducerId,
    ) -> std::result::Result<Holding, CallError> {
        let r = self
            .call::<routes::TxnDurable>(proto::DurableRequest {
                partition: Some(crate::rpc::part(key)),
                producer_id: producer.0,
            })
            .await?;
        match r.error {
            None if r.all_here => Ok(Holding::All {
                follows: r.follows,
                owner_epoch: r.owner_epoch,
            }),
            None => Ok(Holding::NotAll),
            Some(e) => Err(CallError::Broker(crate::rpc::from_proto(e))),
        }
    }

    /// [`Broker::producers`] at this broker.
    pub async fn producers_of(
        &self,
        key: &PartitionKey,
    ) -> std::result::Result<Vec<ProducerInfo>, CallError> {
        let r = self
            .call::<routes::Producers>(proto::ProducersRequest {
                partition: Some(crate::rpc::part(key)),
            })
            .await?;
        if let Some(e) = r.error {
            return Err(CallError::Broker(crate::rpc::from_proto(e)));
        }
        Ok(r.producers
            .into_iter()
            .map(|p| ProducerInfo {
                producer_id: p.producer_id,
                epoch: i16::try_from(p.epoch).unwrap_or(-1),
                last_sequence: p.last_sequence,
                last_timestamp: p.last_timestamp,
                txn_start_offset: p.txn_start_offset,
            })
            .collect())
    }
}

pub(crate) async fn rpc_marker(b: Broker, req: proto::MarkerRequest) -> proto::MarkerResponse {
    let r = async {
        let key = crate::rpc::key_of(req.partition.as_ref())?;
        let epoch = i16::try_from(req.producer_epoch).map_err(|_| {
            BrokerError::new(ErrorKind::InvalidRequest, "producer epoch out of range")
        })?;
        let marker = Marker {
            producer: ProducerIdEpoch {
                producer_id: ProducerId(req.producer_id),
                epoch: ProducerEpoch(epoch),
            },
            commit: req.commit,
            coordinator_epoch: Epoch(req.coordinator_epoch),
        };
        b.write_marker(&key, &marker).await
    }
    .await;
    proto::MarkerResponse {
        error: r.err().map(|e| crate::rpc::to_proto(&e)),
    }
}

pub(crate) async fn rpc_durable(b: Broker, req: proto::DurableRequest) -> proto::DurableResponse {
    let r = async {
        let key = crate::rpc::key_of(req.partition.as_ref())?;
        b.txn_durable(&key, ProducerId(req.producer_id)).await
    }
    .await;
    match r {
        Ok(Holding::All {
            follows,
            owner_epoch,
        }) => proto::DurableResponse {
            all_here: true,
            follows,
            owner_epoch,
            ..Default::default()
        },
        Ok(Holding::NotAll) => proto::DurableResponse::default(),
        Err(e) => proto::DurableResponse {
            error: Some(crate::rpc::to_proto(&e)),
            ..Default::default()
        },
    }
}

pub(crate) async fn rpc_producers(
    b: Broker,
    req: proto::ProducersRequest,
) -> proto::ProducersResponse {
    let r = crate::rpc::key_of(req.partition.as_ref()).and_then(|k| b.producers(&k));
    match r {
        Ok(ps) => proto::ProducersResponse {
            error: None,
            producers: ps
                .into_iter()
                .map(|p| proto::ProducerInfo {
                    producer_id: p.producer_id,
                    epoch: i32::from(p.epoch),
                    last_sequence: p.last_sequence,
                    last_timestamp: p.last_timestamp,
                    txn_start_offset: p.txn_start_offset,
                })
                .collect(),
        },
        Err(e) => proto::ProducersResponse {
            error: Some(crate::rpc::to_proto(&e)),
            producers: Vec::new(),
        },
    }
}
