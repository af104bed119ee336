//! The partition owner's side of transactions as other brokers and the
//! proxy reach it: writing a COMMIT/ABORT marker ([`Partitions::write_marker`](crate::partitions::Partitions::write_marker),
//! over the RPC route `/rpc/txn/marker`), the coordinator's
//! [`MarkerWriter`] that finds each partition's owner ([`OwnerMarkers`]),
//! and the producers of a partition (DescribeProducers,
//! [`Partitions::producers`](crate::partitions::Partitions::producers), route `/rpc/producers`).

use std::sync::Weak;

use floe_metadata::ErrorKind as MetaKind;
use floe_metadata::ids::{Epoch, PartitionKey, ProducerEpoch, ProducerId};
use floe_metadata::txn::ProducerIdEpoch;

use super::{Holding, Marker, MarkerError, MarkerWriter};
use crate::error::{BrokerError, CallError, ErrorKind};
use crate::partitions::{Inner, Partitions, ProducerInfo};
use crate::rpc::{RemoteBroker, proto, routes};

/// The coordinator's [`MarkerWriter`]: finds each partition's owner in
/// the cluster view and writes there, directly when it is this broker,
/// else over the RPC. Holds its broker weakly (the broker holds the
/// coordinator that holds this).
#[derive(Debug)]
pub struct OwnerMarkers {
    broker: Weak<Inner>,
    peers: std::sync::Arc<crate::rpc::Peers>,
}

impl OwnerMarkers {
    /// Writes at `partitions` when this broker owns the partition, else at
    /// its owner through `peers`.
    pub fn new(partitions: &Partitions, peers: std::sync::Arc<crate::rpc::Peers>) -> Self {
        Self {
            broker: std::sync::Arc::downgrade(&partitions.inner),
            peers,
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
    Here(Partitions),
    Remote(Box<crate::rpc::RemoteBroker>),
}

impl OwnerMarkers {
    /// The owner of `partition` in the cluster view: this broker or another.
    async fn owner(&self, partition: PartitionKey) -> std::result::Result<Owner, MarkerError> {
        let Some(inner) = self.broker.upgrade() else {
            return Err(MarkerError::Failed("the broker stopped".into()));
        };
        let broker = Partitions { inner };
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
        let peer = self.peers.get(addr);
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
        let snap = Partitions { inner }.view().current();
        snap.by_id
            .get(&partition.topic)?
            .partitions
            .iter()
            .find(|p| p.partition == partition.partition)
            .map(|p| p.epoch.0)
    }
}

impl RemoteBroker {
    /// [`Partitions::write_marker`](crate::partitions::Partitions::write_marker) at this broker.
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

    /// [`Partitions::txn_durable`](crate::partitions::Partitions::txn_durable) at this broker.
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

    /// [`Partitions::producers`](crate::partitions::Partitions::producers) at this broker.
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

pub(crate) async fn rpc_marker(b: Partitions, req: proto::MarkerRequest) -> proto::MarkerResponse {
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

pub(crate) async fn rpc_durable(
    b: Partitions,
    req: proto::DurableRequest,
) -> proto::DurableResponse {
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
    b: Partitions,
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
