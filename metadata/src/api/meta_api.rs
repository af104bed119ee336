//! The one way Floe's processes call the metadata service: [`MetaApi`].
//!
//! A call is a typed [`Route`] (path, request, reply). Two implementations
//! carry it: [`MetaClient`](super::client::MetaClient) over HTTP to the Raft
//! leader, and [`LocalMeta`], which serves it in-process on a node of the same
//! process (`floe standalone`) with no encoding and no socket. The operations
//! the broker, the proxy and the indexer use are methods on `dyn MetaApi`
//! taking and returning domain types ([`crate::model`]); the protobuf
//! messages stay at the wire.

use std::any::Any;
use std::time::Duration;

use futures::future::BoxFuture;
use prost::Message;

use super::routes::{self, Route};
use super::server::{AppState, Serve};
use super::{convert, proto, txn_routes};
use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch, PartitionKey, Revision, ShardId, TopicId, TransactionalId};
use crate::model::{
    ClusterView, Commit, CommitOutcome, PartitionIndex, TopicInfo, UnreferencedObject,
};
use crate::txn::{RangeTxns, TxnCommand, TxnFilter, TxnMeta, TxnReply};

/// A type-erased reply of a route.
pub type Reply = Box<dyn Any + Send>;

/// A type-erased request of a route.
type Request = Box<dyn Any + Send + Sync>;

/// Serves a type-erased request on a node of this process.
type ServeFn = fn(AppState, Request) -> BoxFuture<'static, Result<Reply, MetaError>>;

/// One call of a route, its request and how to carry it either way.
pub struct RouteCall {
    path: &'static str,
    req: Box<dyn Any + Send + Sync>,
    encode: fn(&(dyn Any + Send + Sync)) -> Vec<u8>,
    decode: fn(&[u8]) -> Result<Reply, prost::DecodeError>,
    serve: ServeFn,
}

impl std::fmt::Debug for RouteCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RouteCall({})", self.path)
    }
}

fn encode_as<R: Route>(req: &(dyn Any + Send + Sync)) -> Vec<u8> {
    req.downcast_ref::<R::Req>()
        .map(Message::encode_to_vec)
        .unwrap_or_default()
}

fn decode_as<R: Route>(bytes: &[u8]) -> Result<Reply, prost::DecodeError> {
    Ok(Box::new(R::Resp::decode(bytes)?))
}

fn serve_as<R: Serve>(
    s: AppState,
    req: Box<dyn Any + Send + Sync>,
) -> BoxFuture<'static, Result<Reply, MetaError>> {
    match req.downcast::<R::Req>() {
        Ok(req) => Box::pin(async move { Ok(Box::new(R::serve(s, *req).await?) as Reply) }),
        Err(_) => Box::pin(async {
            Err(MetaError::InvalidRequest(
                "request of the wrong type".into(),
            ))
        }),
    }
}

impl RouteCall {
    pub fn new<R: Serve>(req: R::Req) -> Self {
        Self {
            path: R::PATH,
            req: Box::new(req),
            encode: encode_as::<R>,
            decode: decode_as::<R>,
            serve: serve_as::<R>,
        }
    }

    pub fn path(&self) -> &'static str {
        self.path
    }

    /// The request, if this is a call of route `R` (for fakes in tests).
    pub fn request<R: Route>(&self) -> Option<&R::Req> {
        if self.path != R::PATH {
            return None;
        }
        self.req.downcast_ref::<R::Req>()
    }

    /// The request's protobuf encoding.
    pub fn encode(&self) -> Vec<u8> {
        (self.encode)(self.req.as_ref())
    }

    /// Decodes a reply of this route.
    pub fn decode_reply(&self, bytes: &[u8]) -> Result<Reply, MetaError> {
        (self.decode)(bytes)
            .map_err(|e| MetaError::Unavailable(format!("bad reply to {}: {e}", self.path)))
    }

    /// Serves the call on a node of this process.
    pub fn serve(self, s: AppState) -> BoxFuture<'static, Result<Reply, MetaError>> {
        (self.serve)(s, self.req)
    }
}

/// A reply to route `R` (for fakes in tests).
pub fn reply<R: Route>(resp: R::Resp) -> Reply {
    Box::new(resp)
}

/// How a process reaches the metadata service.
#[async_trait::async_trait]
pub trait MetaApi: Send + Sync + std::fmt::Debug {
    /// Carries one call to the service (to the leader, following it) and
    /// returns its reply.
    async fn call_route(&self, call: RouteCall) -> Result<Reply, MetaError>;
}

/// The metadata service in this process: calls go straight to the node's
/// handlers (the same ones its HTTP routes serve), with no encoding and no
/// socket. While the node has no leader yet (at start) a call first waits
/// for one, up to `deadline`, as the HTTP client does.
#[derive(Clone)]
pub struct LocalMeta {
    state: AppState,
    pub deadline: Duration,
}

impl std::fmt::Debug for LocalMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalMeta(node {})", self.state.id)
    }
}

impl LocalMeta {
    pub fn new(state: AppState) -> Self {
        Self {
            state,
            deadline: Duration::from_secs(15),
        }
    }
}

#[async_trait::async_trait]
impl MetaApi for LocalMeta {
    async fn call_route(&self, call: RouteCall) -> Result<Reply, MetaError> {
        let mut metrics = self.state.raft.metrics();
        if metrics.borrow().current_leader.is_none() {
            let elected = metrics.wait_for(|m| m.current_leader.is_some());
            match tokio::time::timeout(self.deadline, elected).await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => return Err(MetaError::Unavailable("the node stopped".into())),
                Err(_) => {
                    return Err(MetaError::Unavailable(
                        "no leader found before the deadline".into(),
                    ));
                }
            }
        }
        call.serve(self.state.clone()).await
    }
}

/// The operations, typed by route and by domain types.
impl dyn MetaApi + '_ {
    /// Calls route `R` with its protobuf request.
    pub async fn call<R: Serve>(&self, req: R::Req) -> Result<R::Resp, MetaError> {
        let reply = self.call_route(RouteCall::new::<R>(req)).await?;
        reply.downcast::<R::Resp>().map(|r| *r).map_err(|_| {
            MetaError::Unavailable(format!("a reply of the wrong type to {}", R::PATH))
        })
    }

    /// The cluster view once its revision passes `since` (or after `timeout`).
    pub async fn watch(
        &self,
        since: Revision,
        timeout: Duration,
    ) -> Result<ClusterView, MetaError> {
        let v = self
            .call::<routes::Watch>(proto::WatchRequest {
                since_revision: since.0,
                timeout_ms: timeout.as_millis() as u64,
                accept_unchanged: true,
                accept_partial: true,
            })
            .await?;
        convert::cluster_view_from(v)
    }

    pub async fn register(
        &self,
        id: BrokerId,
        kind: crate::model::NodeKind,
        addr: &str,
        lease: Duration,
    ) -> Result<(), MetaError> {
        self.call::<routes::Register>(proto::RegisterRequest {
            id: id.0,
            kind: convert::node_kind_name(kind).to_string(),
            addr: addr.to_string(),
            lease_ms: lease.as_millis() as u64,
            version: floe_types::version::VERSION.to_string(),
        })
        .await?;
        Ok(())
    }

    /// Registers a proxy (again) under `id`, or under an id the metadata
    /// gives it when `id` is `None`; returns the id.
    pub async fn register_proxy(
        &self,
        id: Option<BrokerId>,
        addr: &str,
        lease: Duration,
    ) -> Result<BrokerId, MetaError> {
        let r = self
            .call::<routes::Register>(proto::RegisterRequest {
                id: id.unwrap_or(crate::state::UNASSIGNED_ID).0,
                kind: convert::node_kind_name(crate::model::NodeKind::Proxy).to_string(),
                addr: addr.to_string(),
                lease_ms: lease.as_millis() as u64,
                version: floe_types::version::VERSION.to_string(),
            })
            .await?;
        Ok(BrokerId(r.id))
    }

    /// Registers a new broker under an id the metadata gives it (above
    /// every id so far, never an earlier node's); returns the id, which
    /// the broker then registers and renews under like a named one.
    pub async fn register_new_broker(
        &self,
        addr: &str,
        lease: Duration,
    ) -> Result<BrokerId, MetaError> {
        let r = self
            .call::<routes::Register>(proto::RegisterRequest {
                id: crate::state::UNASSIGNED_ID.0,
                kind: convert::node_kind_name(crate::model::NodeKind::Broker).to_string(),
                addr: addr.to_string(),
                lease_ms: lease.as_millis() as u64,
                version: floe_types::version::VERSION.to_string(),
            })
            .await?;
        Ok(BrokerId(r.id))
    }

    pub async fn heartbeat(&self, id: BrokerId) -> Result<(), MetaError> {
        self.call::<routes::Heartbeat>(proto::HeartbeatRequest { id: id.0 })
            .await?;
        Ok(())
    }

    /// Asks the controller to move everything this broker owns elsewhere
    /// (hand-overs), before it stops; it gets nothing new meanwhile.
    pub async fn drain(&self, id: BrokerId) -> Result<(), MetaError> {
        self.call::<routes::Drain>(proto::HeartbeatRequest { id: id.0 })
            .await?;
        Ok(())
    }

    /// Reports that broker `id`'s address `addr` refused a connection. The
    /// metadata leader checks the address itself and marks the broker dead
    /// at once if it refuses; returns whether it did.
    pub async fn node_down(&self, id: BrokerId, addr: &str) -> Result<bool, MetaError> {
        let r = self
            .call::<routes::NodeDown>(proto::NodeDownRequest {
                id: id.0,
                addr: addr.to_string(),
            })
            .await?;
        Ok(r.expired)
    }

    /// Gives up partitions and coordinator shards held at these epochs.
    pub async fn release(
        &self,
        broker: BrokerId,
        partitions: &[(PartitionKey, Epoch)],
        shards: &[(ShardId, Epoch)],
    ) -> Result<(), MetaError> {
        self.call::<routes::Release>(proto::ReleaseRequest {
            broker: broker.0,
            partitions: partitions
                .iter()
                .map(|(p, e)| proto::PartitionEpoch {
                    partition: Some(convert::partition_msg(p)),
                    epoch: e.0,
                })
                .collect(),
            shards: shards
                .iter()
                .map(|(s, e)| proto::ShardEpoch {
                    shard: s.0,
                    epoch: e.0,
                })
                .collect(),
        })
        .await?;
        Ok(())
    }

    /// Commits one WAL object's ranges (see `docs/metadata.md` for the rules).
    pub async fn commit(&self, commit: &Commit) -> Result<CommitOutcome, MetaError> {
        self.commit_with_txns(commit, &[]).await
    }

    /// A commit whose ranges hold transactional batches or markers, with
    /// their events per partition (see `crate::txn::PartitionTxns`).
    pub async fn commit_with_txns(
        &self,
        commit: &Commit,
        txns: &[RangeTxns],
    ) -> Result<CommitOutcome, MetaError> {
        let mut req = convert::commit_msg(commit);
        req.txns = txns.iter().map(txn_routes::range_txns_msg).collect();
        let r = self.call::<routes::Commit>(req).await?;
        convert::commit_outcome(r)
    }

    /// A partition's committed index from `from_offset` on.
    pub async fn partition_index(
        &self,
        partition: PartitionKey,
        from_offset: i64,
    ) -> Result<PartitionIndex, MetaError> {
        let r = self
            .call::<routes::PartitionIndex>(proto::IndexRequest {
                partition: Some(convert::partition_msg(&partition)),
                from_offset,
            })
            .await?;
        convert::partition_index_from(partition, r)
    }

    /// Several partitions' committed indexes, each from its offset, under
    /// one linearizable read (at most
    /// [`MAX_INDEXES`](super::server::MAX_INDEXES) at once). Each comes back
    /// on its own: a partition the metadata does not hold is
    /// [`MetaError::UnknownPartition`].
    pub async fn partition_indexes(
        &self,
        asked: &[(PartitionKey, i64)],
    ) -> Result<Vec<Result<PartitionIndex, MetaError>>, MetaError> {
        let r = self
            .call::<routes::PartitionIndexes>(proto::IndexesRequest {
                partitions: asked
                    .iter()
                    .map(|(p, from_offset)| proto::IndexRequest {
                        partition: Some(convert::partition_msg(p)),
                        from_offset: *from_offset,
                    })
                    .collect(),
            })
            .await?;
        if r.indexes.len() != asked.len() {
            return Err(MetaError::Unavailable(format!(
                "{} indexes answered for {} partitions asked",
                r.indexes.len(),
                asked.len()
            )));
        }
        Ok(asked
            .iter()
            .zip(r.indexes)
            .map(|((p, _), idx)| match idx.info {
                None => Err(MetaError::UnknownPartition(*p)),
                Some(_) => convert::partition_index_from(*p, idx),
            })
            .collect())
    }

    pub async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        configs: std::collections::HashMap<String, String>,
    ) -> Result<TopicId, MetaError> {
        let r = self
            .call::<routes::CreateTopic>(proto::CreateTopicRequest {
                name: name.to_string(),
                partitions,
                configs,
            })
            .await?;
        convert::topic_id(&r.topic_id)
    }

    pub async fn describe_topic(&self, name: &str) -> Result<TopicInfo, MetaError> {
        let t = self
            .call::<routes::DescribeTopic>(proto::TopicName {
                name: name.to_string(),
            })
            .await?;
        convert::topic_info_from(t)
    }

    /// Every topic, without its partitions.
    pub async fn list_topics(&self) -> Result<Vec<TopicInfo>, MetaError> {
        let r = self.call::<routes::ListTopics>(proto::Empty {}).await?;
        r.topics.into_iter().map(convert::topic_info_from).collect()
    }

    /// Producer ids `[first, first + count)`, never handed out before.
    pub async fn producer_ids(&self, count: u32) -> Result<(i64, u32), MetaError> {
        let r = self
            .call::<routes::ProducerIds>(proto::ProducerIdsRequest { count })
            .await?;
        Ok((r.first, r.count))
    }

    /// Objects no committed range refers to.
    pub async fn unreferenced_objects(&self) -> Result<Vec<UnreferencedObject>, MetaError> {
        let r = self
            .call::<routes::UnreferencedObjects>(proto::Empty {})
            .await?;
        r.objects
            .into_iter()
            .map(convert::unreferenced_from)
            .collect()
    }

    /// A topic's export progress (see `crate::export`).
    pub async fn export_state(
        &self,
        topic: &str,
    ) -> Result<crate::export::TopicExports, MetaError> {
        let m = self
            .call::<routes::ExportState>(proto::ExportStateRequest {
                topic: topic.to_string(),
            })
            .await?;
        super::export_routes::topic_exports_from(m)
    }

    pub async fn export_begin(
        &self,
        partition: PartitionKey,
        generation: u64,
        file: &crate::export::ExportFile,
    ) -> Result<(), MetaError> {
        let (partition, file) = (
            convert::partition_msg(&partition),
            super::export_routes::file_msg(file),
        );
        self.call::<routes::ExportBegin>(proto::ExportBeginRequest {
            partition: Some(partition),
            generation,
            file: Some(file),
        })
        .await?;
        Ok(())
    }

    pub async fn export_commit(
        &self,
        partition: PartitionKey,
        generation: u64,
        file: &crate::export::ExportFile,
    ) -> Result<(), MetaError> {
        let (partition, file) = (
            convert::partition_msg(&partition),
            super::export_routes::file_msg(file),
        );
        self.call::<routes::ExportCommit>(proto::ExportCommitRequest {
            partition: Some(partition),
            generation,
            file: Some(file),
        })
        .await?;
        Ok(())
    }

    pub async fn export_forget(
        &self,
        partition: PartitionKey,
        generation: u64,
        keys: Vec<String>,
    ) -> Result<(), MetaError> {
        let partition = convert::partition_msg(&partition);
        self.call::<routes::ExportForget>(proto::ExportForgetRequest {
            partition: Some(partition),
            generation,
            keys,
        })
        .await?;
        Ok(())
    }

    /// A transaction coordinator's step (see `crate::txn`): the refusal if
    /// any and the transaction's state after it. A coordinator whose shard
    /// moved gets `StaleCoordinator`.
    pub async fn txn_step(&self, cmd: &TxnCommand) -> Result<TxnReply, MetaError> {
        let r = self
            .call::<routes::TxnStep>(txn_routes::command_msg(cmd))
            .await?;
        txn_routes::reply(r)
    }

    /// Every transactional id's state.
    pub async fn transactions(&self) -> Result<Vec<(TransactionalId, TxnMeta)>, MetaError> {
        self.transactions_where(&TxnFilter::default()).await
    }

    /// The state of the transactional ids `f` selects (one keyed read for
    /// an id; the others never leave the metadata service).
    pub async fn transactions_where(
        &self,
        f: &TxnFilter,
    ) -> Result<Vec<(TransactionalId, TxnMeta)>, MetaError> {
        let r = self
            .call::<routes::TxnList>(txn_routes::filter_msg(f))
            .await?;
        r.txns.into_iter().map(txn_routes::info).collect()
    }

    /// A group's configs (Kafka's GROUP config resource): the values set on
    /// it, every other key at its default. A group never altered, or not
    /// existing, has only defaults. Read linearizably on the Raft leader.
    pub async fn group_configs(
        &self,
        group: &str,
    ) -> Result<crate::group_config::GroupConfigs, MetaError> {
        let r = self
            .call::<routes::GroupConfigs>(proto::GroupConfigsRequest {
                group: group.to_string(),
            })
            .await?;
        Ok(crate::group_config::GroupConfigs::from_described(
            r.set.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ))
    }

    /// A broker resource's dynamic configs (Kafka's BROKER config
    /// resource): those set on `broker` (an id, or empty for every broker)
    /// and those set for every broker. Read linearizably on the Raft leader.
    pub async fn broker_configs(
        &self,
        broker: &str,
    ) -> Result<
        (
            crate::broker_config::BrokerConfigs,
            crate::broker_config::BrokerConfigs,
        ),
        MetaError,
    > {
        let r = self
            .call::<routes::BrokerConfigs>(proto::BrokerConfigsRequest {
                broker: broker.to_string(),
            })
            .await?;
        let of = |m: &std::collections::HashMap<String, String>| {
            crate::broker_config::BrokerConfigs::from_described(
                m.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            )
        };
        Ok((of(&r.set), of(&r.cluster_default)))
    }

    /// Sets and removes a broker resource's dynamic configs, all or nothing
    /// (INVALID_CONFIG for a key that is not dynamic or a bad value).
    pub async fn alter_broker_configs(
        &self,
        broker: &str,
        set: std::collections::HashMap<String, String>,
        delete: Vec<String>,
    ) -> Result<(), MetaError> {
        self.call::<routes::AlterBrokerConfig>(proto::AlterBrokerConfigRequest {
            broker: broker.to_string(),
            set,
            delete,
        })
        .await?;
        Ok(())
    }

    /// Sets and removes a group's configs, all or nothing (INVALID_CONFIG
    /// for an unknown key or a value out of bounds).
    pub async fn alter_group_configs(
        &self,
        group: &str,
        set: std::collections::HashMap<String, String>,
        delete: Vec<String>,
    ) -> Result<(), MetaError> {
        self.call::<routes::AlterGroupConfig>(proto::AlterGroupConfigRequest {
            group: group.to_string(),
            set,
            delete,
        })
        .await?;
        Ok(())
    }

    /// A topic's Iceberg table as the Raft state keeps it.
    pub async fn table_state(&self, topic: &str) -> Result<crate::table::TableView, MetaError> {
        let r = self
            .call::<routes::TableState>(proto::TopicName {
                name: topic.to_string(),
            })
            .await?;
        Ok(crate::table::TableView {
            topic_id: convert::topic_id(&r.topic_id)?,
            state: crate::table::TableState {
                metadata_location: (!r.metadata_location.is_empty()).then_some(r.metadata_location),
                version: r.version,
                columns: r
                    .columns
                    .into_iter()
                    .map(|c| crate::table::TableColumn {
                        name: c.name,
                        kind: c.kind,
                        id: c.id,
                    })
                    .collect(),
                compacting: r
                    .compacting
                    .map(super::table_routes::compaction_from)
                    .transpose()?,
            },
        })
    }

    /// Records a compaction of a table's export files, before its file is
    /// written (see `crate::table::Compaction`).
    pub async fn table_compact_begin(
        &self,
        topic: &str,
        c: &crate::table::Compaction,
    ) -> Result<(), MetaError> {
        self.call::<routes::TableCompactBegin>(proto::TableCompactBeginRequest {
            topic: topic.to_string(),
            compaction: Some(super::table_routes::compaction_msg(c)),
        })
        .await?;
        Ok(())
    }

    /// Puts the written compacted `file` in place of the files its
    /// compaction replaces.
    pub async fn table_compact_commit(
        &self,
        topic: &str,
        partition: u32,
        generation: u64,
        file: &crate::export::ExportFile,
    ) -> Result<(), MetaError> {
        self.call::<routes::TableCompactCommit>(proto::TableCompactCommitRequest {
            topic: topic.to_string(),
            partition,
            generation,
            file: Some(super::export_routes::file_msg(file)),
        })
        .await?;
        Ok(())
    }

    /// The field ids of a table's typed columns, (name, type) pairs; new
    /// pairs get the next free ids.
    pub async fn table_columns(
        &self,
        topic: &str,
        columns: &[(String, String)],
    ) -> Result<Vec<i32>, MetaError> {
        let r = self
            .call::<routes::TableColumns>(proto::TableColumnsRequest {
                topic: topic.to_string(),
                columns: columns
                    .iter()
                    .map(|(name, kind)| proto::TableColumn {
                        name: name.clone(),
                        kind: kind.clone(),
                        id: 0,
                    })
                    .collect(),
            })
            .await?;
        Ok(r.ids)
    }

    /// Moves a table's pointer from `expected` to `location` (an
    /// `ExportConflict` when another commit moved it first); returns the
    /// table's version.
    pub async fn table_commit(
        &self,
        topic: &str,
        expected: Option<&str>,
        location: &str,
    ) -> Result<u64, MetaError> {
        let r = self
            .call::<routes::TableCommit>(proto::TableCommitRequest {
                topic: topic.to_string(),
                expected: expected.unwrap_or_default().to_string(),
                location: location.to_string(),
            })
            .await?;
        Ok(r.version)
    }

    /// Starts a topic's exports over; returns the new generation.
    pub async fn export_reset(&self, topic: &str) -> Result<u64, MetaError> {
        let r = self
            .call::<routes::ExportReset>(proto::ExportResetRequest {
                topic: topic.to_string(),
            })
            .await?;
        Ok(r.generation)
    }
}
