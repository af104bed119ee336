//! The data-plane requests: ApiVersions, Metadata, Produce, Fetch,
//! ListOffsets, DeleteRecords, FindCoordinator. Each partition's part goes to
//! the broker that owns it; this process's broker is called directly.

use floe_metadata::watch::{ClusterSnapshot, ClusterWatch};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floe_broker::{
    Acks, Broker, CallError, OffsetSpec, PartitionOwner, PendingProduce, RemoteBroker,
    RoutingError, RoutingErrorKind,
};
use floe_metadata::api::MetaApi;
use floe_storage::PartitionKey;
use futures::StreamExt;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersion;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::list_offsets_request::ListOffsetsPartition;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::admin::AdminConfig;
use crate::errors::{call_code, routing_code};
use crate::nodes::{KafkaNodes, SelfNode};

/// The API keys and versions this proxy answers, as ApiVersions lists them.
///
/// Produce starts at 0 although requests below v3 (the message formats
/// before record batches) are refused: librdkafka up to 2.11 enables gzip,
/// snappy and lz4 only if the broker's Produce range reaches down to v0.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 0, 11),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 8),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
];

/// The transaction APIs, answered only with `--transactions`
/// ([`Context::transactions`]); InitProducerId with a transactional id too.
pub const TXN_SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::AddPartitionsToTxn, 0, 4),
    (ApiKey::AddOffsetsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 3),
    (ApiKey::TxnOffsetCommit, 0, 3),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
];

/// The APIs that are answered only when switched on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Optional {
    /// `--transactions`: [`TXN_SUPPORTED`].
    pub transactions: bool,
    /// `--share-groups`: `crate::share::SHARE_SUPPORTED`.
    pub share: bool,
}

/// The APIs answered: [`SUPPORTED`], and the optional ones switched on.
fn answered(on: Optional) -> impl Iterator<Item = &'static (ApiKey, i16, i16)> {
    let txn: &'static [(ApiKey, i16, i16)] = if on.transactions { TXN_SUPPORTED } else { &[] };
    let share: &'static [(ApiKey, i16, i16)] = if on.share {
        crate::share::SHARE_SUPPORTED
    } else {
        &[]
    };
    SUPPORTED.iter().chain(txn).chain(share)
}

/// The lowest version of each key this proxy can decode (Produce: 3).
pub fn decodable(key: ApiKey, version: i16) -> bool {
    decodable_with(key, version, Optional::default())
}

/// [`decodable`], with the optional APIs switched on in `on`.
pub fn decodable_with(key: ApiKey, version: i16, on: Optional) -> bool {
    answered(on).any(|(k, min, max)| {
        *k == key && version <= *max && version >= (*min).max(key.valid_versions().min)
    })
}

/// What every handler needs.
#[derive(Debug)]
pub struct Context {
    /// The broker in this process, if any (`floe standalone`).
    pub local: Option<Broker>,
    pub view: ClusterWatch,
    /// Clients of brokers in other processes, by address.
    pub remotes: std::sync::Mutex<HashMap<String, Arc<RemoteBroker>>>,
    pub meta: Arc<dyn MetaApi>,
    pub admin: AdminConfig,
    /// This proxy as a Kafka broker, alone or among the registered proxies
    /// (the brokers clients are shown, [`crate::nodes`]).
    pub me: Arc<SelfNode>,
    pub auto_create_topics: bool,
    /// Topics one Metadata request may auto-create; the others named in it
    /// get UNKNOWN_TOPIC_OR_PARTITION (retriable: asked again, they are
    /// created then).
    pub auto_create_max_topics: usize,
    /// Upper bound on a fetch's wait, whatever the client asks.
    pub max_fetch_wait: Duration,
    /// Byte caps on a fetch's answer, whatever the client asks.
    pub fetch_limits: FetchLimits,
    /// Fetch sessions (KIP-227) of the clients of this proxy.
    pub fetch_sessions: crate::fetch_session::FetchSessions,
    /// Producer ids this proxy hands out, taken from metadata in blocks.
    pub producer_ids: ProducerIdBlock,
    /// How old the cluster view may be (since the metadata service last
    /// confirmed it) for produce, fetch, list-offsets and delete-records to
    /// be routed on it; older, they answer NOT_LEADER_OR_FOLLOWER. `None`:
    /// no bound (`floe standalone`, whose view is local).
    pub max_view_age: Option<Duration>,
    /// Owners whose address refused a connection, reported to the metadata
    /// service (at most once a second per address).
    pub down_reports: DownReports,
    /// Whether transactions are answered (`--transactions`): InitProducerId
    /// with a transactional id and the APIs of [`TXN_SUPPORTED`]. Off, a
    /// transactional producer is refused at InitProducerId.
    pub transactions: bool,
    /// Share groups (`--share-groups`): `None` leaves the share APIs out of
    /// ApiVersions.
    pub share: Option<Arc<crate::share::ShareContext>>,
    /// Client quotas' measures ([`crate::quota`]).
    pub quotas: crate::quota::Throttles,
    /// The authorizer ([`crate::authz`]).
    pub authz: Arc<crate::authz::Authorizer>,
}

/// Reports of owners whose address refused a connection: the process is
/// gone, so the metadata service (after checking the address itself)
/// moves its partitions at once instead of one lease later.
#[derive(Debug, Default)]
pub struct DownReports {
    /// When each address was last reported.
    last: std::sync::Mutex<HashMap<String, tokio::time::Instant>>,
}

impl DownReports {
    /// Least time between two reports of one address.
    const EVERY: Duration = Duration::from_secs(1);

    /// Whether `addr` may be reported now (and notes that it is).
    fn due(&self, addr: &str) -> bool {
        self.due_at(addr, tokio::time::Instant::now())
    }

    fn due_at(&self, addr: &str, now: tokio::time::Instant) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.get(addr).is_some_and(|t| now < *t + Self::EVERY) {
            return false;
        }
        last.retain(|_, t| now < *t + Self::EVERY);
        last.insert(addr.to_string(), now);
        true
    }
}

/// Most partitions of one Produce request being sequenced at their owners
/// at once, where brokers run in other processes than the proxy.
pub const SEQUENCED_TOGETHER: usize = 32;

/// Longest wait of CreateTopics and CreatePartitions for the new partitions
/// to show in this proxy's view with owners. Without a live broker in the
/// view they get none: the answer goes out once the topics show, and the
/// controller places them once a broker registers.
pub const CREATED_VISIBLE_WAIT: Duration = Duration::from_secs(3);

/// Whether `s` shows each of `topics` (name, partition count) created:
/// the topic with at least that many partitions, and every partition owned
/// unless no broker is live (then nothing gets an owner until one
/// registers, and waiting for owners would only hold the answer). The
/// topics themselves are waited for in every case: a view that lags the
/// metadata service would answer the client's next request for them
/// UNKNOWN_TOPIC_OR_PARTITION.
pub fn created_visible(s: &ClusterSnapshot, topics: &[(String, u32)]) -> bool {
    let live = s
        .brokers()
        .any(|n| n.state == floe_metadata::model::NodeState::Live);
    topics.iter().all(|(name, count)| {
        s.topics.get(name.as_str()).is_some_and(|t| {
            t.partition_count >= *count && (!live || t.partitions.iter().all(|p| p.owner.is_some()))
        })
    })
}

/// This proxy's caps on the bytes of a fetch's answer, applied on top of
/// the client's own `max_bytes` and `partition_max_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    /// Most record bytes in one answer (Kafka's broker `fetch.max.bytes`).
    pub max_bytes: usize,
    /// Most record bytes of one partition in one answer.
    pub max_partition_bytes: usize,
}

impl FetchLimits {
    /// Kafka's default `fetch.max.bytes`: 55 MiB.
    pub const DEFAULT_MAX_BYTES: usize = 57_671_680;
    /// One store read's worth per partition (`floe_storage::committed::READ_CHUNK`),
    /// eight times the clients' default `max.partition.fetch.bytes` (1 MiB).
    pub const DEFAULT_MAX_PARTITION_BYTES: usize = 8 * 1024 * 1024;

    /// The bytes a whole answer may take: the client's `max_bytes` (none
    /// if it is not positive) within this proxy's cap.
    pub fn request_budget(&self, client_max: i32) -> usize {
        let asked = usize::try_from(client_max).ok().filter(|&m| m > 0);
        asked.map_or(self.max_bytes, |m| m.min(self.max_bytes))
    }

    /// The bytes asked of one partition's owner: the client's
    /// `partition_max_bytes` within this proxy's cap and what is `left` of
    /// the answer's budget. The owner always answers at least one whole
    /// batch, so the first partition with data gets one even when it is
    /// larger than every cap (as Kafka does); later ones get nothing once
    /// the budget is spent (0: not asked).
    pub fn partition_budget(&self, client_max: i32, left: usize, first: bool) -> usize {
        let asked = usize::try_from(client_max).unwrap_or(0);
        let budget = asked.min(self.max_partition_bytes).min(left);
        if first { budget.max(1) } else { budget }
    }
}

impl Default for FetchLimits {
    fn default() -> Self {
        Self {
            max_bytes: Self::DEFAULT_MAX_BYTES,
            max_partition_bytes: Self::DEFAULT_MAX_PARTITION_BYTES,
        }
    }
}

/// A client's `current_leader_epoch`: `None` (-1, or any negative) asks for no check.
pub(crate) fn leader_epoch(e: i32) -> Option<u64> {
    u64::try_from(e).ok()
}

/// Producer ids reserved from the metadata service, handed out one by one.
#[derive(Debug, Default)]
pub struct ProducerIdBlock {
    next: tokio::sync::Mutex<(i64, i64)>,
}

/// Ids taken from the metadata service at a time.
const PRODUCER_ID_BLOCK: u32 = 1000;

/// How long a produce waits for its partition's owner to become ready
/// before answering NOT_LEADER_OR_FOLLOWER: an owner still taking the
/// partition over, one handing it over, one gone (refusing connections,
/// until the metadata service moves the partition), a partition with no
/// owner yet. Covers a lease running out (2.5 s by default) when a dead
/// owner's port does not refuse. At most half the client's own timeout.
const OWNER_CHANGE_WAIT: Duration = Duration::from_secs(5);

/// How long a produce waits for this proxy's view to be confirmed again
/// (see `append_retrying`).
const STALE_VIEW_WAIT: Duration = Duration::from_secs(1);

/// How long a write's acknowledgement is still waited for once its
/// partition moved to another owner (an answer already on its way).
const MOVED_GRACE: Duration = Duration::from_millis(500);

/// A partition's owner and epoch in a view (`None`: not in it).
type Ownership = Option<(Option<floe_metadata::ids::BrokerId>, u64)>;

/// The owner and epoch of `key` in `snap`.
fn ownership(snap: &ClusterSnapshot, key: &PartitionKey) -> Ownership {
    snap.by_id
        .get(&key.topic)
        .and_then(|t| t.partitions.iter().find(|p| p.partition == key.partition))
        .map(|p| (p.owner, p.epoch.0))
}

/// The wait for an owner a produce with timeout `timeout_ms` may take.
/// The acknowledgement a partition's records of a produce get. With
/// `acks=all`, a write of a transaction's batches only is answered once its
/// owner has sequenced it (as `acks=1`), not once it is durable: the
/// transaction's commit is decided only once every partition holds all of
/// it durably (the coordinator asks each owner before PrepareCommit, and a
/// transaction whose answered batches may have been lost must be aborted;
/// `docs/transactions.md`). So a transaction's produce requests, which a
/// client sends one after the other, do not each wait for a flush.
fn ack_level(acks: Acks, records: &[u8]) -> Acks {
    if acks != Acks::All {
        return acks;
    }
    let mut transactional = false;
    for item in floe_storage::batch::BatchIter::new(records, usize::MAX) {
        match item {
            Ok((_, v)) if v.is_transactional() && !v.is_control() => transactional = true,
            // Anything else (or malformed, which sequencing refuses) as asked.
            _ => return acks,
        }
    }
    if transactional { Acks::Leader } else { acks }
}

fn owner_wait(timeout_ms: i32) -> Duration {
    let half = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0) / 2);
    OWNER_CHANGE_WAIT.min(half)
}

impl ProducerIdBlock {
    async fn take(&self, meta: &dyn MetaApi) -> Result<i64, floe_metadata::MetaError> {
        let mut g = self.next.lock().await;
        if g.0 >= g.1 {
            let (first, count) = meta.producer_ids(PRODUCER_ID_BLOCK).await?;
            *g = (first, first.saturating_add(i64::from(count)));
        }
        let id = g.0;
        g.0 += 1;
        Ok(id)
    }
}

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn topic_name(v: &str) -> TopicName {
    TopicName(s(v))
}

pub fn api_versions(error: i16) -> ApiVersionsResponse {
    api_versions_with(error, Optional::default())
}

/// [`api_versions`], listing the optional APIs switched on in `on`.
pub fn api_versions_with(error: i16, on: Optional) -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.error_code = error;
    r.api_keys = answered(on)
        .map(|(k, min, max)| {
            let mut v = ApiVersion::default();
            v.api_key = *k as i16;
            v.min_version = *min;
            v.max_version = *max;
            v
        })
        .collect();
    r
}

impl Context {
    /// The optional APIs this proxy answers.
    pub fn optional(&self) -> Optional {
        Optional {
            transactions: self.transactions,
            share: self.share.is_some(),
        }
    }

    /// Where a partition's requests go: its owner, in this process or another.
    pub(crate) fn route(
        &self,
        snap: &ClusterSnapshot,
        key: &PartitionKey,
    ) -> Result<Arc<dyn PartitionOwner>, RoutingError> {
        Ok(match self.owner_of(snap, key)? {
            crate::groups::ShardOwner::Local(b) => Arc::new(b),
            crate::groups::ShardOwner::Remote(r) => r,
        })
    }

    /// The broker that owns a partition: this process's or a client of
    /// another (share groups reach its share-partitions through it too).
    pub(crate) fn owner_of(
        &self,
        snap: &ClusterSnapshot,
        key: &PartitionKey,
    ) -> Result<crate::groups::ShardOwner, RoutingError> {
        if let Some(max) = self.max_view_age
            && !self.view.confirmed_within(max)
        {
            return Err(RoutingError::new(
                RoutingErrorKind::StaleView,
                format!(
                    "the cluster view was not confirmed by the metadata service in the last {} ms",
                    max.as_millis()
                ),
            ));
        }
        let owner = snap
            .by_id
            .get(&key.topic)
            .and_then(|t| t.partitions.iter().find(|p| p.partition == key.partition))
            .ok_or_else(|| {
                RoutingError::new(
                    RoutingErrorKind::UnknownPartition,
                    format!("no partition {key} in the cluster view"),
                )
            })?
            .owner
            .ok_or_else(|| {
                RoutingError::new(
                    RoutingErrorKind::NoOwner,
                    format!("partition {key} has no owner"),
                )
            })?;
        if let Some(b) = self.local.as_ref().filter(|b| b.broker_id() == owner) {
            return Ok(crate::groups::ShardOwner::Local(b.clone()));
        }
        let addr = snap.broker_addr(owner).ok_or_else(|| {
            RoutingError::new(
                RoutingErrorKind::OwnerUnknown,
                format!("no address for broker {owner}, the owner of {key}"),
            )
        })?;
        Ok(crate::groups::ShardOwner::Remote(self.remote(addr)))
    }

    /// Sequences `records` at the partition's owner. Right after a partition
    /// is assigned (a new topic, a failover) the view may name an owner that
    /// has not finished taking it over, for a few milliseconds: the owner
    /// answers NOT_OWNER. Waiting for it here, briefly, keeps the order of
    /// this connection's batches; a client retry of a non-idempotent producer
    /// with several requests in flight could reorder them.
    async fn append_at_owner(
        &self,
        key: &PartitionKey,
        records: Bytes,
        acks: Acks,
        room_wait: Duration,
        owner_wait: Duration,
    ) -> Result<(PendingProduce, Ownership), CallError> {
        // The ownership the call in progress was routed under (`None`
        // between calls).
        let routed: std::sync::Mutex<Option<Ownership>> = std::sync::Mutex::new(None);
        let set = |o: Option<Ownership>| *routed.lock().unwrap_or_else(|p| p.into_inner()) = o;
        let attempts = append_retrying(
            || {
                let snap = self.view.current();
                set(Some(ownership(&snap, key)));
                self.route(&snap, key)
            },
            |e| {
                set(None);
                self.report_if_refused(key, e);
            },
            key,
            records,
            acks,
            room_wait,
            owner_wait,
        );
        tokio::pin!(attempts);
        // An owner that does not even sequence the write (paused, cut off)
        // is given up on once the partition moved away from it: as for the
        // acknowledgement (see `acknowledged`), the outcome is unknown.
        let mut rx = self.view.subscribe();
        let moved = async {
            loop {
                let now = ownership(&rx.borrow_and_update(), key);
                let was = *routed.lock().unwrap_or_else(|p| p.into_inner());
                if was.is_some_and(|was| was != now) {
                    return;
                }
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        let pending = tokio::select! {
            r = &mut attempts => r,
            _ = moved => match tokio::time::timeout(MOVED_GRACE, &mut attempts).await {
                Ok(r) => r,
                Err(_) => Err(floe_broker::BrokerError::outcome_unknown(format!(
                    "partition {key} moved to another owner while its write was being sequenced"
                ))
                .into()),
            },
        }?;
        let routed = routed.lock().unwrap_or_else(|p| p.into_inner()).flatten();
        Ok((pending, routed))
    }

    /// Waits for a sequenced write's acknowledgement, unless its partition
    /// moves meanwhile: then its owner (paused, cut off, or gone without
    /// closing its connections) can no longer commit it at its epoch, and
    /// the write is answered as of unknown outcome (REQUEST_TIMED_OUT: it
    /// may have been committed just before the move) after a short grace
    /// for an answer on its way, instead of holding this connection's later
    /// answers until the old owner wakes up. Clients retry it (an
    /// idempotent producer with the same sequence numbers, which the new
    /// owner recognises).
    fn acknowledged(
        &self,
        key: PartitionKey,
        pending: PendingProduce,
        routed: Ownership,
    ) -> impl std::future::Future<Output = Result<floe_broker::ProduceOk, CallError>> + Send + 'static
    {
        let mut rx = self.view.subscribe();
        async move {
            let wait = pending.wait();
            tokio::pin!(wait);
            let moved = async {
                loop {
                    if ownership(&rx.borrow_and_update(), &key) != routed {
                        return;
                    }
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            };
            tokio::select! {
                r = &mut wait => return r,
                _ = moved => {}
            }
            match tokio::time::timeout(MOVED_GRACE, &mut wait).await {
                Ok(r) => r,
                Err(_) => Err(floe_broker::BrokerError::outcome_unknown(format!(
                    "partition {key} moved to another owner while its write was being acknowledged"
                ))
                .into()),
            }
        }
    }

    /// A call to `key`'s owner failed: if its address refused the
    /// connection (nothing listens there), tells the metadata service, which
    /// checks it and moves the owner's partitions at once. In the background,
    /// at most once a second per address.
    pub(crate) fn report_if_refused(&self, key: &PartitionKey, e: &CallError) {
        if !matches!(e, CallError::Routing(r) if r.is_refused()) {
            return;
        }
        let snap = self.view.current();
        let Some(owner) = snap
            .by_id
            .get(&key.topic)
            .and_then(|t| t.partitions.iter().find(|p| p.partition == key.partition))
            .and_then(|p| p.owner)
        else {
            return;
        };
        let Some(addr) = snap.broker_addr(owner).map(str::to_string) else {
            return;
        };
        self.report_down(owner, addr);
    }

    /// Tells the metadata service that `owner`'s address `addr` refused a
    /// connection; it checks the address itself and, if nothing listens
    /// there, marks the broker dead and moves its partitions and
    /// coordinator shards at once. In the background, at most once a second
    /// per address.
    pub(crate) fn report_down(&self, owner: floe_metadata::ids::BrokerId, addr: String) {
        if !self.down_reports.due(&addr) {
            return;
        }
        let meta = self.meta.clone();
        tokio::spawn(async move {
            match meta.node_down(owner, &addr).await {
                Ok(true) => {
                    tracing::info!(broker = %owner, %addr, "reported a broker whose address refuses connections: marked dead")
                }
                Ok(false) => {
                    tracing::debug!(broker = %owner, %addr, "reported a refused connection; the broker was not marked dead")
                }
                Err(e) => {
                    tracing::warn!(broker = %owner, %addr, error = %e, "reporting a refused connection failed")
                }
            }
        });
    }

    /// The client of the broker at `addr` (one per address, reused).
    /// Each registered broker's store endpoints, asked of it (this
    /// process's broker directly), concurrently, each within `timeout`:
    /// `(broker id, its RPC address, the stats or why not)`, by id.
    pub async fn brokers_store_stats(
        &self,
        timeout: std::time::Duration,
    ) -> Vec<(
        u32,
        String,
        Result<floe_broker::rpc::proto::StoreStats, String>,
    )> {
        let snap = self.view.current();
        let brokers: Vec<(u32, String)> =
            snap.brokers().map(|n| (n.id.0, n.addr.clone())).collect();
        drop(snap);
        let asks = brokers.into_iter().map(|(id, addr)| async move {
            let stats = match self.local.as_ref().filter(|b| b.broker_id().0 == id) {
                Some(b) => Ok(floe_broker::rpc::store_stats(b.pool())),
                None => self
                    .remote(&addr)
                    .store_stats(timeout)
                    .await
                    .map_err(|e| e.to_string()),
            };
            (id, addr, stats)
        });
        let mut out = futures::future::join_all(asks).await;
        out.sort_by_key(|(id, _, _)| *id);
        out
    }

    pub(crate) fn remote(&self, addr: &str) -> Arc<RemoteBroker> {
        let mut remotes = self.remotes.lock().unwrap_or_else(|p| p.into_inner());
        remotes
            .entry(addr.to_string())
            .or_insert_with(|| Arc::new(RemoteBroker::new(addr)))
            .clone()
    }

    /// The brokers to name in answers given the view `snap`. A proxy whose
    /// view the metadata service has not confirmed within `max_view_age`
    /// (cut off from it) does not know which proxies are live: it names
    /// itself alone, and its partition requests answer
    /// NOT_LEADER_OR_FOLLOWER until the view is confirmed again.
    pub fn kafka_nodes(&self, snap: &ClusterSnapshot) -> KafkaNodes {
        if let Some(max) = self.max_view_age
            && !self.view.confirmed_within(max)
        {
            return KafkaNodes::new(Vec::new(), self.me.node());
        }
        self.me.nodes(snap)
    }

    pub(crate) fn key_of(
        snap: &ClusterSnapshot,
        topic: &str,
        partition: i32,
    ) -> Option<PartitionKey> {
        snap.partition_key(topic, partition)
    }

    /// Creates the topics in `names` that do not exist and have a legal
    /// name, at most `auto_create_max_topics` of them (the first ones named);
    /// returns the names it asked the metadata service for. A bad name is
    /// never sent there: the answer gives it INVALID_TOPIC_EXCEPTION.
    async fn auto_create<'a>(
        &self,
        snap: &ClusterSnapshot,
        names: &'a [String],
    ) -> Vec<&'a String> {
        let mut seen = std::collections::HashSet::new();
        let fresh: Vec<&String> = names
            .iter()
            .filter(|n| !snap.topics.contains_key(n.as_str()))
            .filter(|n| floe_types::validate_topic_name(n).is_ok())
            .filter(|n| seen.insert(n.as_str()))
            .collect();
        let bound = self.auto_create_max_topics;
        if fresh.len() > bound {
            crate::metrics::auto_create_deferred(fresh.len() - bound);
            tracing::info!(
                asked = fresh.len(),
                created = bound,
                "metadata request names more new topics than --auto-create-max-topics-per-request; the rest get UNKNOWN_TOPIC_OR_PARTITION"
            );
        }
        let missing: Vec<&String> = fresh.into_iter().take(bound).collect();
        for n in &missing {
            match self
                .meta
                .create_topic(n, self.admin.default_partitions, HashMap::new())
                .await
            {
                Ok(_) => tracing::info!(topic = %n, "auto-created topic"),
                Err(e) => tracing::debug!(topic = %n, error = %e, "auto-create failed"),
            }
        }
        missing
    }

    /// Metadata: every topic (or the ones asked for); the live proxies as
    /// the brokers, one of them the leader of each partition that has an
    /// owner (spread by [`KafkaNodes::leader`]).
    pub async fn metadata(&self, version: i16, req: &MetadataRequest) -> MetadataResponse {
        let view = &self.view;
        let mut snap = view.current();
        // From v1 a null list asks for every topic and an empty one for
        // none; v0 has no null, and an empty list asks for every topic.
        let wanted: Option<Vec<String>> = req
            .topics
            .as_ref()
            .filter(|ts| version >= 1 || !ts.is_empty())
            .map(|ts| {
                ts.iter()
                    .filter_map(|t| match &t.name {
                        Some(n) => Some(n.0.to_string()),
                        // v10+: a topic asked by id (share consumers do);
                        // an unknown id is left out.
                        None => snap
                            .by_id
                            .get(&floe_types::TopicId(t.topic_id))
                            .map(|info| info.name.clone()),
                    })
                    .collect()
            });
        // Auto-create topics that do not exist (Kafka's auto.create.topics.enable).
        let allow = version < 4 || req.allow_auto_topic_creation;
        if let (Some(names), true, true) = (&wanted, allow, self.auto_create_topics) {
            let missing = self.auto_create(&snap, names).await;
            if !missing.is_empty() {
                snap = view
                    .wait_for(Duration::from_secs(3), |s| {
                        missing.iter().all(|n| {
                            s.topics
                                .get(n.as_str())
                                .is_some_and(|t| t.partitions.iter().all(|p| p.owner.is_some()))
                        })
                    })
                    .await;
            }
        }
        let mut resp = MetadataResponse::default();
        crate::peers::fresh_for_answer(&self.me, &snap).await;
        let nodes = self.kafka_nodes(&snap);
        resp.brokers = nodes
            .all()
            .iter()
            .map(|n| {
                let mut b = MetadataResponseBroker::default();
                b.node_id = BrokerId(n.id);
                b.host = s(n.host.clone());
                b.port = n.port;
                b
            })
            .collect();
        if version >= 2 {
            resp.cluster_id = Some(s(self.admin.identity.cluster_id.clone()));
        }
        if version >= 1 {
            resp.controller_id = BrokerId(nodes.controller().id);
        }
        resp.cluster_authorized_operations = i32::MIN;
        let names: Vec<String> = match wanted {
            Some(n) => n,
            None => {
                let mut all: Vec<String> = snap.topics.keys().cloned().collect();
                all.sort();
                all
            }
        };
        for name in names {
            let mut t = MetadataResponseTopic::default();
            t.name = Some(topic_name(&name));
            t.topic_authorized_operations = i32::MIN;
            match snap.topics.get(&name) {
                None => {
                    t.error_code = if floe_types::validate_topic_name(&name).is_err() {
                        ResponseError::InvalidTopicException.code()
                    } else {
                        ResponseError::UnknownTopicOrPartition.code()
                    };
                }
                Some(tv) => {
                    if version >= 10 {
                        t.topic_id = tv.id.0;
                    }
                    for p in &tv.partitions {
                        let mut mp = MetadataResponsePartition::default();
                        mp.partition_index = p.partition as i32;
                        if version >= 7 {
                            mp.leader_epoch = i32::try_from(p.epoch.0).unwrap_or(i32::MAX);
                        }
                        if p.owner.is_none() {
                            mp.error_code = ResponseError::LeaderNotAvailable.code();
                            mp.leader_id = BrokerId(-1);
                        } else {
                            let key = PartitionKey::new(tv.id, p.partition);
                            let leader = BrokerId(nodes.leader(&key).id);
                            mp.leader_id = leader;
                            mp.replica_nodes = vec![leader];
                            mp.isr_nodes = vec![leader];
                        }
                        t.partitions.push(mp);
                    }
                }
            }
            resp.topics.push(t);
        }
        resp
    }

    /// Waits (at most [`CREATED_VISIBLE_WAIT`]) until this proxy's view shows
    /// each of `topics` with at least its partition count and, while a
    /// broker is live, every partition owned ([`created_visible`]), so that
    /// a CreateTopics or CreatePartitions is answered once a client's next
    /// Metadata or Produce request through this proxy finds the new
    /// partitions and their leaders (the metadata service places them in
    /// the command that creates them).
    pub async fn await_owned(&self, topics: &[(String, u32)]) {
        if topics.is_empty() {
            return;
        }
        self.view
            .wait_for(CREATED_VISIBLE_WAIT, |s| created_visible(s, topics))
            .await;
    }

    /// Sequences a produce request's partitions in request order (synchronously)
    /// and returns a future that waits for the acknowledgements.
    pub async fn produce_start(
        &self,
        version: i16,
        req: ProduceRequest,
    ) -> impl std::future::Future<Output = ProduceResponse> + Send + 'static {
        enum Part {
            /// Index, error code, message, the records that caused it.
            Done(i32, i16, Option<String>, Vec<BatchIndexAndErrorMessage>),
            Waiting(
                i32,
                std::pin::Pin<
                    Box<
                        dyn std::future::Future<Output = Result<floe_broker::ProduceOk, CallError>>
                            + Send,
                    >,
                >,
            ),
        }
        let snap = self.view.current();
        let acks = Acks::from_kafka(req.acks);
        // An owner whose unflushed bytes are over their cap may hold the
        // produce this long for room (Kafka's request timeout).
        let room_wait = Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0));
        let owner_wait = owner_wait(req.timeout_ms);
        // Each partition's write is sequenced at its owner (one RPC for an
        // owner in another process), several partitions at a time: they
        // are independent, and the request's are all sequenced before the
        // connection's next request is read, so each partition keeps the
        // order its writes came in. Where this process's broker is the
        // only one (a standalone) there is no round trip to overlap: a
        // request is sequenced one partition after the other, as it always
        // was. One look at the view's brokers, not one per partition.
        let local_id = self.local.as_ref().map(|b| b.broker_id());
        let remote = snap
            .brokers()
            .any(|n| n.state != floe_metadata::model::NodeState::Dead && Some(n.id) != local_id);
        let together = if remote { SEQUENCED_TOGETHER } else { 1 };
        let mut topics: Vec<(TopicName, Vec<Part>)> = Vec::new();
        // Whether a write sequenced here asks for a flush at once (below).
        let flush_asked = std::sync::atomic::AtomicBool::new(false);
        for t in req.topic_data {
            let name = &t.name;
            let snap = &snap;
            let flush_asked = &flush_asked;
            let parts: Vec<Part> = futures::stream::iter(t.partition_data)
                .map(|p| async move {
                    match (acks, Self::key_of(snap, &name.0, p.index)) {
                        (None, _) => Part::Done(
                            p.index,
                            ResponseError::InvalidRequiredAcks.code(),
                            None,
                            Vec::new(),
                        ),
                        (_, None) => Part::Done(
                            p.index,
                            ResponseError::UnknownTopicOrPartition.code(),
                            None,
                            Vec::new(),
                        ),
                        (Some(acks), Some(key)) => {
                            let records = p.records.unwrap_or_default();
                            let asked = acks;
                            let acks = ack_level(acks, &records);
                            let sequenced = self
                                .append_at_owner(&key, records, acks, room_wait, owner_wait)
                                .await;
                            match sequenced {
                                Ok((pending, routed)) => {
                                    // A transaction's batches answered at
                                    // once wait for its commit to ask for
                                    // their flush: the transaction's
                                    // requests then go in one object.
                                    if acks == asked {
                                        flush_asked.store(true, std::sync::atomic::Ordering::Relaxed);
                                    }
                                    Part::Waiting(
                                    p.index,
                                    Box::pin(self.acknowledged(key, pending, routed)),
                                )
                                }
                                Err(e) => {
                                    tracing::debug!(topic = %name.0.as_str(), partition = p.index, error = %e, "produce refused");
                                    Part::Done(
                                        p.index,
                                        call_code(&e),
                                        Some(e.to_string()),
                                        record_errors(&e),
                                    )
                                }
                            }
                        }
                    }
                })
                .buffered(together)
                .collect()
                .await;
            topics.push((t.name, parts));
        }
        // The request's writes at this process's broker go in one flush,
        // now, rather than at the flusher's next tick (where flushes are
        // not paced). Owners in other processes flush at their tick. A
        // transaction's batches, answered once sequenced, are flushed when
        // its EndTxn asks whether they are durable (or at the tick).
        let waiting = flush_asked.load(std::sync::atomic::Ordering::Relaxed);
        if let Some(local) = self.local.as_ref().filter(|_| waiting) {
            local.request_sequenced();
        }
        async move {
            let mut resp = ProduceResponse::default();
            for (name, parts) in topics {
                let mut tr = TopicProduceResponse::default();
                tr.name = name;
                for part in parts {
                    let mut pr = PartitionProduceResponse::default();
                    pr.base_offset = -1;
                    pr.log_append_time_ms = -1;
                    pr.log_start_offset = -1;
                    match part {
                        Part::Done(index, code, msg, record_errors) => {
                            pr.index = index;
                            pr.error_code = code;
                            if version >= 8 {
                                pr.error_message = msg.map(s);
                                pr.record_errors = record_errors;
                            }
                        }
                        Part::Waiting(index, pending) => {
                            pr.index = index;
                            match pending.await {
                                Ok(ok) => {
                                    pr.base_offset = ok.base_offset;
                                    pr.log_append_time_ms = ok.log_append_time;
                                    if version >= 5 {
                                        pr.log_start_offset = ok.log_start_offset;
                                    }
                                }
                                Err(e) => {
                                    tracing::debug!(topic = %tr.name.0.as_str(), partition = index, error = %e, "produce failed after it was sequenced");
                                    pr.error_code = call_code(&e);
                                    if version >= 8 {
                                        pr.error_message = Some(s(e.to_string()));
                                    }
                                }
                            }
                        }
                    }
                    if pr.error_code != 0 {
                        crate::metrics::produce_error(pr.error_code);
                    }
                    tr.partition_responses.push(pr);
                }
                resp.responses.push(tr);
            }
            resp
        }
    }

    pub async fn list_offsets(
        &self,
        version: i16,
        req: &ListOffsetsRequest,
    ) -> ListOffsetsResponse {
        let snap = self.view.current();
        let mut resp = ListOffsetsResponse::default();
        // v4 carries the client's current leader epoch, checked by the owner.
        let epoch_of = |p: &ListOffsetsPartition| {
            if version >= 4 {
                leader_epoch(p.current_leader_epoch)
            } else {
                None
            }
        };
        for t in &req.topics {
            let mut tr = ListOffsetsTopicResponse::default();
            tr.name = t.name.clone();
            for p in &t.partitions {
                let mut pr = ListOffsetsPartitionResponse::default();
                pr.partition_index = p.partition_index;
                pr.timestamp = -1;
                pr.offset = -1;
                pr.leader_epoch = -1;
                let spec = match p.timestamp {
                    // read_committed (v2+): latest is the last stable offset.
                    -1 if req.isolation_level == 1 => Some(OffsetSpec::LastStable),
                    -1 => Some(OffsetSpec::Latest),
                    // -4: earliest local (tiered storage): all of Floe's log is local.
                    -2 | -4 => Some(OffsetSpec::Earliest),
                    -3 => Some(OffsetSpec::MaxTimestamp),
                    t if t >= 0 => Some(OffsetSpec::Timestamp(t)),
                    _ => None,
                };
                match (spec, Self::key_of(&snap, &t.name.0, p.partition_index)) {
                    (None, _) => pr.error_code = ResponseError::InvalidRequest.code(),
                    (_, None) => pr.error_code = ResponseError::UnknownTopicOrPartition.code(),
                    (Some(spec), Some(key)) => match self.route(&snap, &key) {
                        Err(e) => pr.error_code = routing_code(&e),
                        Ok(h) => match h.list_offset(&key, spec, epoch_of(p)).await {
                            Ok((a, epoch)) => {
                                pr.offset = a.offset;
                                pr.timestamp = a.timestamp;
                                if version >= 4 {
                                    pr.leader_epoch = i32::try_from(epoch).unwrap_or(-1);
                                }
                            }
                            Err(e) => pr.error_code = call_code(&e),
                        },
                    },
                }
                tr.partitions.push(pr);
            }
            resp.topics.push(tr);
        }
        resp
    }

    /// DescribeProducers: per partition, the producers its owner knows
    /// (id, epoch, last sequence, last write, where an open transaction
    /// begins). The coordinator epoch of their last marker is not kept: -1.
    pub async fn describe_producers(
        &self,
        _version: i16,
        req: &DescribeProducersRequest,
    ) -> DescribeProducersResponse {
        use kafka_protocol::messages::describe_producers_response::{
            PartitionResponse, ProducerState, TopicResponse,
        };
        let snap = self.view.current();
        let mut resp = DescribeProducersResponse::default();
        for t in &req.topics {
            let mut tr = TopicResponse::default();
            tr.name = t.name.clone();
            for &index in &t.partition_indexes {
                let mut pr = PartitionResponse::default();
                pr.partition_index = index;
                let answer = match Self::key_of(&snap, &t.name.0, index) {
                    None => Err(ResponseError::UnknownTopicOrPartition.code()),
                    Some(key) => match self.route(&snap, &key) {
                        Err(e) => Err(routing_code(&e)),
                        Ok(h) => h.producers(&key).await.map_err(|e| call_code(&e)),
                    },
                };
                match answer {
                    Err(code) => pr.error_code = code,
                    Ok(ps) => {
                        pr.active_producers = ps
                            .into_iter()
                            .map(|p| {
                                let mut st = ProducerState::default();
                                st.producer_id = ProducerId(p.producer_id);
                                st.producer_epoch = i32::from(p.epoch);
                                st.last_sequence = p.last_sequence;
                                st.last_timestamp = p.last_timestamp;
                                st.coordinator_epoch = -1;
                                st.current_txn_start_offset = p.txn_start_offset;
                                st
                            })
                            .collect();
                    }
                }
                tr.partitions.push(pr);
            }
            resp.topics.push(tr);
        }
        resp
    }

    /// OffsetForLeaderEpoch (KIP-320): where the log of a leader epoch
    /// ends, so that a client can check its position after a change of
    /// owner. Floe's committed log is never truncated (an owner change keeps
    /// everything committed in the object store, and consumers read only
    /// what is committed), so every epoch up to the owner's current one ends
    /// at the high watermark: the answer is the epoch asked for and the high
    /// watermark, and no position a consumer reached is ever found
    /// diverged. An epoch newer than the owner's gets Kafka's undefined
    /// answer (epoch and offset -1). `current_leader_epoch` is checked as
    /// in Fetch and ListOffsets.
    pub async fn offset_for_leader_epoch(
        &self,
        _version: i16,
        req: &OffsetForLeaderEpochRequest,
    ) -> OffsetForLeaderEpochResponse {
        let snap = self.view.current();
        let mut resp = OffsetForLeaderEpochResponse::default();
        for t in &req.topics {
            let mut tr = OffsetForLeaderTopicResult::default();
            tr.topic = t.topic.clone();
            for p in &t.partitions {
                let mut pr = EpochEndOffset::default();
                pr.partition = p.partition;
                pr.leader_epoch = -1;
                pr.end_offset = -1;
                match Self::key_of(&snap, &t.topic.0, p.partition) {
                    None => pr.error_code = ResponseError::UnknownTopicOrPartition.code(),
                    Some(key) => match self.route(&snap, &key) {
                        Err(e) => pr.error_code = routing_code(&e),
                        Ok(h) => match h
                            .list_offset(
                                &key,
                                OffsetSpec::Latest,
                                leader_epoch(p.current_leader_epoch),
                            )
                            .await
                        {
                            Ok((hw, epoch)) => {
                                if (0..=epoch).contains(&i64::from(p.leader_epoch)) {
                                    pr.leader_epoch = p.leader_epoch;
                                    pr.end_offset = hw.offset;
                                }
                            }
                            Err(e) => pr.error_code = call_code(&e),
                        },
                    },
                }
                tr.partitions.push(pr);
            }
            resp.topics.push(tr);
        }
        resp
    }

    pub async fn delete_records(
        &self,
        _version: i16,
        req: &DeleteRecordsRequest,
    ) -> DeleteRecordsResponse {
        let snap = self.view.current();
        let mut resp = DeleteRecordsResponse::default();
        for t in &req.topics {
            let mut tr = DeleteRecordsTopicResult::default();
            tr.name = t.name.clone();
            for p in &t.partitions {
                let mut pr = DeleteRecordsPartitionResult::default();
                pr.partition_index = p.partition_index;
                pr.low_watermark = -1;
                match Self::key_of(&snap, &t.name.0, p.partition_index) {
                    None => pr.error_code = ResponseError::UnknownTopicOrPartition.code(),
                    Some(key) => match self.route(&snap, &key) {
                        Err(e) => pr.error_code = routing_code(&e),
                        Ok(h) => match h.delete_records(&key, p.offset).await {
                            Ok(low) => pr.low_watermark = low,
                            Err(e) => pr.error_code = call_code(&e),
                        },
                    },
                }
                tr.partitions.push(pr);
            }
            resp.topics.push(tr);
        }
        resp
    }

    /// InitProducerId for idempotent producers: a new producer id at epoch 0,
    /// or (KIP-360) the same id at the next epoch when the client asks to
    /// bump its own. A transactional id goes to its transaction coordinator
    /// with `--transactions`, and is refused (UNSUPPORTED_VERSION) without.
    pub async fn init_producer_id(
        &self,
        version: i16,
        req: &InitProducerIdRequest,
    ) -> InitProducerIdResponse {
        let mut resp = InitProducerIdResponse::default();
        resp.producer_id = ProducerId(-1);
        resp.producer_epoch = -1;
        if let Some(id) = &req.transactional_id {
            if !self.transactions {
                resp.error_code = ResponseError::UnsupportedVersion.code();
                return resp;
            }
            return self.init_txn_producer(version, req, &id.0).await;
        }
        if req.producer_id.0 >= 0 && req.producer_epoch >= 0 && req.producer_epoch < i16::MAX - 1 {
            resp.producer_id = req.producer_id;
            resp.producer_epoch = req.producer_epoch + 1;
            return resp;
        }
        match self.producer_ids.take(self.meta.as_ref()).await {
            Ok(id) => {
                resp.producer_id = ProducerId(id);
                resp.producer_epoch = 0;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot allocate a producer id");
                resp.error_code = ResponseError::CoordinatorNotAvailable.code();
            }
        }
        resp
    }
}

/// Sequences `records` at the owner `route` names, asking again (every
/// 10 ms at first, then less often, for up to `wait`) while the owner is
/// not ready: it answers NOT_OWNER (taking the partition over, handing it
/// over) or that its lease ran out, the partition has no owner or no
/// address yet, or the owner cannot be connected to (`failed` hears of
/// each such failure: a refused connection is reported). Each of these
/// means the write surely was not stored, so sending it again (to whichever
/// owner `route` names by then) cannot store it twice. A partition the
/// cluster does not have, and any other answer (an outcome unknown
/// included), are returned at once. The owner may hold the call up to
/// `room_wait` for room under its unflushed cap.
async fn append_retrying(
    route: impl Fn() -> Result<Arc<dyn PartitionOwner>, RoutingError>,
    failed: impl Fn(&CallError),
    key: &PartitionKey,
    records: Bytes,
    acks: Acks,
    room_wait: Duration,
    wait: Duration,
) -> Result<PendingProduce, CallError> {
    let started = tokio::time::Instant::now();
    let deadline = started + wait;
    // A view the metadata service has not confirmed lately says nothing of
    // the owner: this proxy is cut off, and waiting helps only if it is
    // confirmed again soon (a metadata leader election).
    let stale_deadline = started + wait.min(STALE_VIEW_WAIT);
    let mut pause = Duration::from_millis(10);
    loop {
        let res = match route() {
            Ok(owner) => owner.append(key, records.clone(), acks, room_wait).await,
            Err(e) => Err(e.into()),
        };
        let stale =
            matches!(&res, Err(CallError::Routing(r)) if r.kind() == RoutingErrorKind::StaleView);
        let until = if stale { stale_deadline } else { deadline };
        match res {
            Err(e) if e.owner_not_ready() && tokio::time::Instant::now() < until => {
                failed(&e);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// The records that made a refused batch invalid, for Produce v8+'s
/// `record_errors` (KIP-467).
fn record_errors(e: &CallError) -> Vec<BatchIndexAndErrorMessage> {
    let CallError::Broker(b) = e else {
        return Vec::new();
    };
    b.record_errors()
        .iter()
        .map(|r| {
            let mut out = BatchIndexAndErrorMessage::default();
            out.batch_index = r.batch_index;
            out.batch_index_error_message = Some(s(r.message.clone()));
            out
        })
        .collect()
}

#[cfg(test)]
mod tests;
