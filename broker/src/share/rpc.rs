//! How a proxy reaches share groups: [`ShareOwner`] (the share-partitions
//! of a partition, at the partition's owner) and [`ShareCoordinator`] (a
//! share group's membership, at its coordinator shard's owner), each
//! implemented by the [`ShareNode`] of this process and by [`RemoteBroker`]
//! over the internal RPC (the routes `/rpc/share/*`), as
//! [`crate::partitions::PartitionOwner`] and the group `Coordinator` are.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floe_metadata::record_filter::RecordFilter;
use floe_storage::PartitionKey;
use floe_types::{Offset, TopicId};

use super::durable::{ShareStore, decode_window, encode_window};
use super::group::{
    Assignment, DescribedShareMember, Heartbeat, HeartbeatAnswer, ShareGroupDescription,
    ShareGroupError, ShareGroupState, TopicInfo,
};
use super::node::ShareNode;
use super::partition::{AckBatch, AckType, Acquired, Backoff, MemberId, ShareError, ShareSnapshot};
use super::service::{AutoOffsetReset, ShareFetched, ShareSettings};
use super::timers::{TimerRef, TimerStore, TimerStoreError};
use crate::error::{BrokerError, CallError, ErrorKind};
use crate::partitions::PartitionOwner;
use crate::rpc::{RemoteBroker, from_proto, key_of, part, proto as rpc_proto, to_proto};

/// One share group's member on one partition, with the group's settings.
#[derive(Debug, Clone)]
pub struct ShareCall {
    pub group: String,
    pub key: PartitionKey,
    pub member: MemberId,
    pub settings: ShareSettings,
}

/// The owner of a partition, for its share-partitions.
#[async_trait::async_trait]
pub trait ShareOwner: PartitionOwner {
    /// Acquires records for the member (see [`super::ShareService::fetch`]).
    async fn share_fetch(
        &self,
        call: &ShareCall,
        max_records: u32,
        max_bytes: usize,
    ) -> Result<ShareFetched, CallError>;

    /// Applies acknowledgements, answered once written (see
    /// [`super::ShareService::acknowledge`]).
    async fn share_acknowledge(
        &self,
        call: &ShareCall,
        batches: &[AckBatch],
    ) -> Result<Result<(), ShareError>, CallError>;

    /// Releases every record the member holds in the group on this broker.
    async fn share_release(&self, group: &str, member: &MemberId) -> Result<(), CallError>;
}

/// The coordinator of a share group (the owner of its shard).
#[async_trait::async_trait]
pub trait ShareCoordinator: Send + Sync + std::fmt::Debug {
    /// One heartbeat; `settings` carries the group's timings (its
    /// `share.heartbeat.interval.ms` and `share.session.timeout.ms`).
    async fn share_heartbeat(
        &self,
        group: &str,
        hb: &Heartbeat,
        settings: &ShareSettings,
    ) -> Result<HeartbeatAnswer, ShareGroupError>;

    /// `Ok(None)`: no such group.
    async fn share_describe(
        &self,
        group: &str,
    ) -> Result<Option<ShareGroupDescription>, ShareGroupError>;
}

pub mod proto {
    use crate::rpc::proto::{Error, Partition};

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Call {
        #[prost(string, tag = "1")]
        pub group: String,
        #[prost(message, optional, tag = "2")]
        pub partition: Option<Partition>,
        #[prost(string, tag = "3")]
        pub member: String,
        #[prost(uint64, tag = "4")]
        pub lock_duration_ms: u64,
        #[prost(bool, tag = "5")]
        pub reset_earliest: bool,
        /// 0 (as older proxies send): the broker's default.
        #[prost(uint32, tag = "6")]
        pub delivery_count_limit: u32,
        /// `share.auto.offset.reset` `by_duration:`, in ms (then
        /// `reset_earliest` is false); absent: latest or earliest.
        #[prost(uint64, optional, tag = "7")]
        pub reset_by_duration_ms: Option<u64>,
        /// The group's `floe.filter`; empty (as older proxies send): none.
        #[prost(string, tag = "8")]
        pub filter: String,
        /// `floe.retry.backoff.base.ms`; 0 (as older proxies send): none.
        #[prost(uint64, tag = "9")]
        pub backoff_base_ms: u64,
        /// `floe.retry.backoff.max.ms`.
        #[prost(uint64, tag = "10")]
        pub backoff_max_ms: u64,
        /// `floe.dlq.topic`; empty (as older proxies send): none.
        #[prost(string, tag = "11")]
        pub dead_letter_topic: String,
        /// `share.isolation.level=read_committed`.
        #[prost(bool, tag = "12")]
        pub read_committed: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct FetchRequest {
        #[prost(message, optional, tag = "1")]
        pub call: Option<Call>,
        #[prost(uint32, tag = "2")]
        pub max_records: u32,
        #[prost(uint64, tag = "3")]
        pub max_bytes: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Range {
        #[prost(int64, tag = "1")]
        pub first: i64,
        #[prost(int64, tag = "2")]
        pub last: i64,
        #[prost(uint32, tag = "3")]
        pub count: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct FetchResponse {
        #[prost(message, optional, tag = "1")]
        pub error: Option<Error>,
        #[prost(bytes = "bytes", tag = "2")]
        pub records: bytes::Bytes,
        #[prost(message, repeated, tag = "3")]
        pub acquired: Vec<Range>,
        #[prost(int64, tag = "4")]
        pub high_watermark: i64,
        #[prost(uint64, optional, tag = "5")]
        pub retry_in_ms: Option<u64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Batch {
        #[prost(int64, tag = "1")]
        pub first: i64,
        #[prost(int64, tag = "2")]
        pub last: i64,
        /// Kafka's acknowledge type codes.
        #[prost(bytes = "vec", tag = "3")]
        pub types: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AckRequest {
        #[prost(message, optional, tag = "1")]
        pub call: Option<Call>,
        #[prost(message, repeated, tag = "2")]
        pub batches: Vec<Batch>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AckResponse {
        #[prost(message, optional, tag = "1")]
        pub error: Option<Error>,
        /// 0, or Kafka's code of the refused batch (121, 42).
        #[prost(int32, tag = "2")]
        pub refused: i32,
        #[prost(int64, tag = "3")]
        pub offset: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ReleaseRequest {
        #[prost(string, tag = "1")]
        pub group: String,
        #[prost(string, tag = "2")]
        pub member: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ReleaseResponse {
        #[prost(message, optional, tag = "1")]
        pub error: Option<Error>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TopicPartitions {
        #[prost(string, tag = "1")]
        pub topic_id: String,
        #[prost(int32, repeated, tag = "2")]
        pub partitions: Vec<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct HeartbeatRequest {
        #[prost(string, tag = "1")]
        pub group: String,
        #[prost(string, tag = "2")]
        pub member: String,
        #[prost(int32, tag = "3")]
        pub member_epoch: i32,
        #[prost(bool, tag = "4")]
        pub has_subscription: bool,
        #[prost(string, repeated, tag = "5")]
        pub subscribed: Vec<String>,
        #[prost(string, optional, tag = "6")]
        pub rack_id: Option<String>,
        /// The group's `share.heartbeat.interval.ms`; 0 (as older proxies
        /// send): the coordinator's.
        #[prost(uint32, tag = "7")]
        pub heartbeat_interval_ms: u32,
        /// The group's `share.session.timeout.ms`; 0: the coordinator's.
        #[prost(uint32, tag = "8")]
        pub session_timeout_ms: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct HeartbeatResponse {
        /// 0, or Kafka's code.
        #[prost(int32, tag = "1")]
        pub error: i32,
        #[prost(string, tag = "2")]
        pub message: String,
        #[prost(int32, tag = "3")]
        pub member_epoch: i32,
        #[prost(uint32, tag = "4")]
        pub heartbeat_interval_ms: u32,
        #[prost(bool, tag = "5")]
        pub has_assignment: bool,
        #[prost(message, repeated, tag = "6")]
        pub assignment: Vec<TopicPartitions>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DescribeRequest {
        #[prost(string, tag = "1")]
        pub group: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Member {
        #[prost(string, tag = "1")]
        pub member_id: String,
        #[prost(int32, tag = "2")]
        pub member_epoch: i32,
        #[prost(string, optional, tag = "3")]
        pub rack_id: Option<String>,
        #[prost(string, repeated, tag = "4")]
        pub subscribed: Vec<String>,
        #[prost(message, repeated, tag = "5")]
        pub assignment: Vec<TopicPartitions>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DescribeResponse {
        #[prost(int32, tag = "1")]
        pub error: i32,
        #[prost(bool, tag = "2")]
        pub found: bool,
        #[prost(bool, tag = "3")]
        pub stable: bool,
        #[prost(int32, tag = "4")]
        pub group_epoch: i32,
        #[prost(int32, tag = "5")]
        pub assignment_epoch: i32,
        #[prost(message, repeated, tag = "6")]
        pub members: Vec<Member>,
    }
}

// Conversions.

pub(super) fn call_msg(c: &ShareCall) -> proto::Call {
    proto::Call {
        group: c.group.clone(),
        partition: Some(part(&c.key)),
        member: c.member.as_str().to_owned(),
        lock_duration_ms: c.settings.lock_duration_ms,
        reset_earliest: c.settings.reset == AutoOffsetReset::Earliest,
        delivery_count_limit: u32::from(c.settings.delivery_count_limit),
        reset_by_duration_ms: match c.settings.reset {
            AutoOffsetReset::ByDuration(ms) => Some(ms),
            _ => None,
        },
        filter: c
            .settings
            .filter
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        backoff_base_ms: c.settings.backoff.base_ms,
        backoff_max_ms: c.settings.backoff.max_ms,
        dead_letter_topic: c
            .settings
            .dead_letter_topic
            .as_deref()
            .unwrap_or_default()
            .to_owned(),
        read_committed: c.settings.read_committed,
    }
}

pub(super) fn call_from(c: Option<proto::Call>) -> Result<ShareCall, BrokerError> {
    let c = c.ok_or_else(|| BrokerError::new(ErrorKind::InvalidRequest, "no share call"))?;
    Ok(ShareCall {
        key: key_of(c.partition.as_ref())?,
        member: MemberId::new(&c.member),
        settings: ShareSettings {
            lock_duration_ms: c.lock_duration_ms,
            reset: match (c.reset_by_duration_ms, c.reset_earliest) {
                (Some(ms), _) => AutoOffsetReset::ByDuration(ms),
                (None, true) => AutoOffsetReset::Earliest,
                (None, false) => AutoOffsetReset::Latest,
            },
            delivery_count_limit: u16::try_from(c.delivery_count_limit).unwrap_or(u16::MAX),
            backoff: Backoff {
                base_ms: c.backoff_base_ms,
                max_ms: c.backoff_max_ms,
            },
            dead_letter_topic: (!c.dead_letter_topic.is_empty())
                .then(|| std::sync::Arc::from(c.dead_letter_topic.as_str())),
            read_committed: c.read_committed,
            filter: match c.filter.as_str() {
                "" => None,
                text => Some(Arc::new(RecordFilter::parse(text).map_err(|why| {
                    BrokerError::new(ErrorKind::InvalidRequest, format!("floe.filter: {why}"))
                })?)),
            },
            // Timings travel with heartbeats, not with calls to owners.
            ..ShareSettings::default()
        },
        group: c.group,
    })
}

const INVALID_RECORD_STATE: i32 = 121;
const INVALID_REQUEST: i32 = 42;
const UNKNOWN_MEMBER_ID: i32 = 25;
const FENCED_MEMBER_EPOCH: i32 = 110;
const GROUP_MAX_SIZE_REACHED: i32 = 81;
const NOT_COORDINATOR: i32 = 16;
const GROUP_ID_NOT_FOUND: i32 = 69;
const NON_EMPTY_GROUP: i32 = 68;

pub(crate) fn group_error_code(e: ShareGroupError) -> i32 {
    match e {
        ShareGroupError::UnknownMemberId => UNKNOWN_MEMBER_ID,
        ShareGroupError::FencedMemberEpoch => FENCED_MEMBER_EPOCH,
        ShareGroupError::GroupMaxSizeReached => GROUP_MAX_SIZE_REACHED,
        ShareGroupError::InvalidRequest(_) => INVALID_REQUEST,
        ShareGroupError::NotCoordinator => NOT_COORDINATOR,
        ShareGroupError::NotShareGroup => GROUP_ID_NOT_FOUND,
        ShareGroupError::NonEmptyGroup => NON_EMPTY_GROUP,
    }
}

pub(crate) fn group_error_from(code: i32) -> ShareGroupError {
    match code {
        GROUP_ID_NOT_FOUND => ShareGroupError::NotShareGroup,
        NON_EMPTY_GROUP => ShareGroupError::NonEmptyGroup,
        UNKNOWN_MEMBER_ID => ShareGroupError::UnknownMemberId,
        FENCED_MEMBER_EPOCH => ShareGroupError::FencedMemberEpoch,
        GROUP_MAX_SIZE_REACHED => ShareGroupError::GroupMaxSizeReached,
        INVALID_REQUEST => ShareGroupError::InvalidRequest("refused by the coordinator"),
        _ => ShareGroupError::NotCoordinator,
    }
}

fn assignment_msg(a: &Assignment) -> Vec<proto::TopicPartitions> {
    a.iter()
        .map(|(t, ps)| proto::TopicPartitions {
            topic_id: t.0.to_string(),
            partitions: ps.clone(),
        })
        .collect()
}

fn assignment_from(a: Vec<proto::TopicPartitions>) -> Assignment {
    a.into_iter()
        .filter_map(|tp| Some((TopicId(tp.topic_id.parse().ok()?), tp.partitions)))
        .collect()
}

fn batch_from(b: proto::Batch) -> Result<AckBatch, ShareError> {
    let types = b
        .types
        .iter()
        .map(|t| AckType::from_code(*t as i8))
        .collect::<Option<Vec<_>>>()
        .ok_or(ShareError::InvalidRequest("unknown acknowledge type"))?;
    Ok(AckBatch {
        first: Offset(b.first),
        last: Offset(b.last),
        types,
    })
}

// The broker's side: its own share service, over itself.

impl ShareNode {
    pub(crate) fn share_topics(&self) -> impl Fn(&str) -> Option<TopicInfo> + '_ {
        let snap = self.partitions.view().current();
        move |name| {
            snap.topics.get(name).map(|t| TopicInfo {
                id: t.id,
                partitions: t.partition_count,
            })
        }
    }

    /// Starts a task appending the share-partition's dead records to the
    /// group's dead-letter topic, if some wait and none runs.
    fn start_dead_letters(&self, call: &ShareCall) {
        if let Some(epoch) = self.service.claim_dead_letters(&call.group, &call.key) {
            self.spawn_dead_letters(&call.group, call.key, epoch);
        }
    }

    /// The same for every share-partition of `group` here (a member's
    /// records released at the delivery limit may have left dead records).
    fn start_group_dead_letters(&self, group: &str) {
        for (key, epoch) in self.service.claim_group_dead_letters(group) {
            self.spawn_dead_letters(group, key, epoch);
        }
    }

    /// Starts the share-partition's timer task when it has work and none
    /// runs.
    fn start_timers(&self, call: &ShareCall) {
        if let Some(claim) = self.service.claim_timer_work(&call.group, &call.key) {
            let (broker, group, key) = (self.clone(), call.group.clone(), call.key);
            tokio::spawn(async move {
                broker
                    .service
                    .run_timers(&broker, &group, &key, claim)
                    .await;
            });
        }
    }

    fn spawn_dead_letters(&self, group: &str, key: PartitionKey, epoch: u64) {
        let (broker, group) = (self.clone(), group.to_owned());
        tokio::spawn(async move {
            broker
                .service
                .run_dead_letters(&broker.partitions, &broker, &broker, &group, &key, epoch)
                .await;
        });
    }

    pub(crate) fn share_coordinator_check(&self, group: &str) -> Result<(), ShareGroupError> {
        if self.coordinates(group) {
            Ok(())
        } else {
            Err(ShareGroupError::NotCoordinator)
        }
    }

    /// Releases the records a member that left `group` holds on the other
    /// brokers (this one released its own): every broker in the view is
    /// told, since the member may hold records of partitions no longer in
    /// its assignment. In the background; a broker not reached keeps the
    /// records until their locks expire.
    pub(crate) fn release_elsewhere(&self, group: &str, member: MemberId) {
        let snap = self.partitions.view().current();
        let me = self.partitions.broker_id();
        for node in snap
            .nodes
            .iter()
            .filter(|n| n.kind == floe_metadata::model::NodeKind::Broker && n.id != me)
        {
            let peer = self.peers.get(&node.addr);
            let (group, member) = (group.to_owned(), member.clone());
            tokio::spawn(async move {
                if let Err(e) = peer.share_release(&group, &member).await {
                    tracing::debug!(group, member = member.as_str(), error = %e,
                        "a left member's records not released there; their locks expire");
                }
            });
        }
    }
}

/// Every second, removes the share group members silent for their
/// session timeout from the groups this broker coordinates, and releases
/// their records on every broker (so a consumer killed without leaving
/// gives its records back after the session timeout at the latest, or
/// sooner when their locks expire first).
pub(crate) async fn sweep_members(b: ShareNode) {
    const EVERY: Duration = Duration::from_secs(1);
    let partitions = b.partitions.clone();
    crate::coordinator::timers::every(partitions, EVERY, || {
        sweep_once(&b);
        std::future::ready(())
    })
    .await
}

/// One pass of [`sweep_members`].
fn sweep_once(b: &ShareNode) {
    let shards = b.partitions.view().current().shard_count();
    let owned = |group: &str| b.coordinator_of(group, shards);
    let gone = b.service.expire_members(&owned, &b.share_topics());
    for (group, member) in gone {
        tracing::info!(
            group,
            member = member.as_str(),
            "share group member timed out"
        );
        b.release_elsewhere(&group, member);
        // Records released at the delivery limit may wait for the DLQ.
        b.start_group_dead_letters(&group);
    }
}

/// The prefix of a share-partition's timer buckets:
/// `share-timers/{topic id}/{partition}/{group, hex}/`.
fn timer_prefix(group: &str, key: &PartitionKey) -> String {
    let hex: String = group.bytes().map(|b| format!("{b:02x}")).collect();
    format!("share-timers/{}/{}/{hex}/", key.topic.0, key.partition)
}

fn timer_error(e: floe_storage::StorageError) -> TimerStoreError {
    match e.kind() {
        floe_storage::ErrorKind::NotFound | floe_storage::ErrorKind::Corrupt => {
            TimerStoreError::Lost(e.to_string())
        }
        _ => TimerStoreError::Failed(e.to_string()),
    }
}

fn timer_object(group: &str, key: &PartitionKey, object: &TimerRef) -> floe_storage::ObjectRef {
    floe_storage::ObjectRef {
        endpoint: object.endpoint.clone(),
        key: floe_storage::ObjectKey::new(format!(
            "{}{}.tix",
            timer_prefix(group, key),
            object.token
        )),
        size: object.size,
    }
}

/// A stored object under a share-partition's timer prefix as a bucket (its
/// token is the file name without `.tix`).
fn timer_ref(prefix: &str, o: floe_storage::ObjectRef) -> Option<TimerRef> {
    let token = o.key.as_str().strip_prefix(prefix)?.strip_suffix(".tix")?;
    (!token.is_empty() && !token.contains('/')).then(|| TimerRef {
        endpoint: o.endpoint.clone(),
        token: std::sync::Arc::from(token),
        size: o.size,
    })
}

#[async_trait::async_trait]
impl TimerStore for ShareNode {
    async fn put_timers(
        &self,
        group: &str,
        key: &PartitionKey,
        bytes: bytes::Bytes,
    ) -> Result<TimerRef, TimerStoreError> {
        let prefix = timer_prefix(group, key);
        let stored = self
            .partitions
            .pool()
            .put_new(
                |t| floe_storage::ObjectKey::new(format!("{prefix}{}.tix", t.as_str())),
                bytes.into(),
            )
            .await
            .map_err(|e| TimerStoreError::Failed(e.to_string()))?;
        timer_ref(&prefix, stored)
            .ok_or_else(|| TimerStoreError::Failed("a bucket stored under another key".into()))
    }

    async fn read_timers(
        &self,
        group: &str,
        key: &PartitionKey,
        object: &TimerRef,
        range: std::ops::Range<u64>,
    ) -> Result<bytes::Bytes, TimerStoreError> {
        self.partitions
            .pool()
            .get_range(&timer_object(group, key, object), range)
            .await
            .map_err(timer_error)
    }

    async fn delete_timers(
        &self,
        group: &str,
        key: &PartitionKey,
        object: &TimerRef,
    ) -> Result<(), TimerStoreError> {
        self.partitions
            .pool()
            .delete(&timer_object(group, key, object))
            .await
            .map_err(|e| TimerStoreError::Failed(e.to_string()))
    }

    async fn list_timers(
        &self,
        group: &str,
        key: &PartitionKey,
    ) -> Result<Vec<TimerRef>, TimerStoreError> {
        let prefix = timer_prefix(group, key);
        let mut out = Vec::new();
        let endpoints: Vec<_> = self.partitions.pool().endpoint_ids().cloned().collect();
        for endpoint in endpoints {
            let listed = self
                .partitions
                .pool()
                .list(&endpoint, &prefix)
                .await
                .map_err(|e| TimerStoreError::Failed(e.to_string()))?;
            out.extend(listed.into_iter().filter_map(|o| timer_ref(&prefix, o)));
        }
        Ok(out)
    }
}

#[async_trait::async_trait]
impl ShareStore for ShareNode {
    fn owned_epoch(&self, key: &PartitionKey) -> Option<u64> {
        self.partitions.active_log(key).ok().map(|l| l.epoch())
    }

    async fn load(
        &self,
        group: &str,
        key: &PartitionKey,
    ) -> Result<Option<ShareSnapshot>, CallError> {
        let topic = self.partitions.topic_name(key)?;
        let offsets = self
            .partitions
            .meta()
            .fetch_offsets(group)
            .await
            .map_err(BrokerError::from)?;
        let Some(o) = offsets
            .into_iter()
            .find(|o| o.topic == topic && o.partition == key.partition)
        else {
            return Ok(None);
        };
        match decode_window(o.committed.offset, &o.committed.metadata) {
            Ok(s) => Ok(Some(s)),
            // Not a share group's state (a classic group's offset under the
            // same id): its offset is where the share group starts.
            Err(_) => Ok(Some(ShareSnapshot {
                start: Offset(o.committed.offset),
                ..ShareSnapshot::default()
            })),
        }
    }

    async fn save(
        &self,
        group: &str,
        key: &PartitionKey,
        epoch: u64,
        snapshot: &ShareSnapshot,
    ) -> Result<(), CallError> {
        self.partitions
            .meta()
            .share_state(
                self.partitions.owner_fence(key, epoch),
                group,
                snapshot.start.0,
                encode_window(snapshot),
            )
            .await
            .map_err(BrokerError::from)?;
        Ok(())
    }

    async fn forget(&self, group: &str, key: &PartitionKey, epoch: u64) -> Result<(), CallError> {
        self.partitions
            .meta()
            .share_forget(self.partitions.owner_fence(key, epoch), group)
            .await
            .map_err(BrokerError::from)?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl ShareOwner for ShareNode {
    async fn share_fetch(
        &self,
        call: &ShareCall,
        max_records: u32,
        max_bytes: usize,
    ) -> Result<ShareFetched, CallError> {
        let share = &self.service;
        let fetched = share
            .fetch(
                &self.partitions,
                self,
                &call.settings,
                &call.group,
                &call.key,
                &call.member,
                max_records,
                max_bytes,
            )
            .await;
        // Lock expiries at the delivery limit may have left dead records.
        self.start_dead_letters(call);
        // Delayed records to write out to the timer index, or to read back.
        self.start_timers(call);
        fetched
    }

    async fn share_acknowledge(
        &self,
        call: &ShareCall,
        batches: &[AckBatch],
    ) -> Result<Result<(), ShareError>, CallError> {
        let share = &self.service;
        let answer = share
            .acknowledge(
                &self.partitions,
                self,
                &call.settings,
                &call.group,
                &call.key,
                &call.member,
                batches,
            )
            .await;
        self.start_dead_letters(call);
        answer
    }

    async fn share_release(&self, group: &str, member: &MemberId) -> Result<(), CallError> {
        self.service.release_member(group, member);
        self.start_group_dead_letters(group);
        Ok(())
    }
}

#[async_trait::async_trait]
impl ShareCoordinator for ShareNode {
    async fn share_heartbeat(
        &self,
        group: &str,
        hb: &Heartbeat,
        settings: &ShareSettings,
    ) -> Result<HeartbeatAnswer, ShareGroupError> {
        self.share_coordinator_check(group)?;
        // One id namespace: a classic or consumer group's id is refused
        // (its stored offsets are read only for a join of a group not in
        // memory).
        let kind = if hb.member_epoch == 0 {
            self.kind_or_live(group).await
        } else {
            self.live_kind(group)
        };
        if super::namespace::refuses_share(kind) {
            return Err(ShareGroupError::NotShareGroup);
        }
        let (answer, gone) = self
            .service
            .heartbeat(group, hb, settings, &self.share_topics());
        for member in gone {
            self.release_elsewhere(group, member);
        }
        // Members that left or timed out had their records released here.
        self.start_group_dead_letters(group);
        answer
    }

    async fn share_describe(
        &self,
        group: &str,
    ) -> Result<Option<ShareGroupDescription>, ShareGroupError> {
        self.share_coordinator_check(group)?;
        Ok(self.service.describe(group))
    }
}

// The server's handlers.

pub(crate) async fn rpc_fetch(b: ShareNode, r: proto::FetchRequest) -> proto::FetchResponse {
    let failed = |e: &BrokerError| proto::FetchResponse {
        error: Some(to_proto(e)),
        ..Default::default()
    };
    let call = match call_from(r.call) {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    let max_bytes = usize::try_from(r.max_bytes).unwrap_or(usize::MAX);
    match b.share_fetch(&call, r.max_records, max_bytes).await {
        Ok(f) => proto::FetchResponse {
            error: None,
            records: f.records,
            acquired: f
                .acquired
                .iter()
                .map(|a| proto::Range {
                    first: a.first.0,
                    last: a.last.0,
                    count: u32::from(a.delivery_count),
                })
                .collect(),
            high_watermark: f.high_watermark,
            retry_in_ms: f.retry_in_ms,
        },
        Err(CallError::Broker(e)) => failed(&e),
        Err(e) => failed(&BrokerError::new(ErrorKind::OutcomeUnknown, e.to_string())),
    }
}

pub(crate) async fn rpc_ack(b: ShareNode, r: proto::AckRequest) -> proto::AckResponse {
    let failed = |e: &BrokerError| proto::AckResponse {
        error: Some(to_proto(e)),
        ..Default::default()
    };
    let call = match call_from(r.call) {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    let refused = |e: ShareError| match e {
        ShareError::InvalidRecordState { offset } => proto::AckResponse {
            error: None,
            refused: INVALID_RECORD_STATE,
            offset: offset.0,
        },
        _ => proto::AckResponse {
            error: None,
            refused: INVALID_REQUEST,
            offset: -1,
        },
    };
    let batches = match r
        .batches
        .into_iter()
        .map(batch_from)
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(b) => b,
        Err(e) => return refused(e),
    };
    match b.share_acknowledge(&call, &batches).await {
        Ok(Ok(())) => proto::AckResponse::default(),
        Ok(Err(e)) => refused(e),
        Err(CallError::Broker(e)) => failed(&e),
        Err(e) => failed(&BrokerError::new(ErrorKind::OutcomeUnknown, e.to_string())),
    }
}

pub(crate) async fn rpc_release(b: ShareNode, r: proto::ReleaseRequest) -> proto::ReleaseResponse {
    b.service
        .release_member(&r.group, &MemberId::new(&r.member));
    proto::ReleaseResponse { error: None }
}

pub(crate) async fn rpc_heartbeat(
    b: ShareNode,
    r: proto::HeartbeatRequest,
) -> proto::HeartbeatResponse {
    let hb = Heartbeat {
        member_id: MemberId::new(&r.member),
        member_epoch: r.member_epoch,
        subscribed_topics: r.has_subscription.then_some(r.subscribed),
        rack_id: r.rack_id,
    };
    let settings = ShareSettings {
        heartbeat_interval_ms: (r.heartbeat_interval_ms > 0).then_some(r.heartbeat_interval_ms),
        session_timeout_ms: (r.session_timeout_ms > 0).then_some(r.session_timeout_ms),
        ..ShareSettings::default()
    };
    match b.share_heartbeat(&r.group, &hb, &settings).await {
        Ok(a) => proto::HeartbeatResponse {
            error: 0,
            message: String::new(),
            member_epoch: a.member_epoch,
            heartbeat_interval_ms: a.heartbeat_interval_ms,
            has_assignment: a.assignment.is_some(),
            assignment: a
                .assignment
                .as_ref()
                .map(assignment_msg)
                .unwrap_or_default(),
        },
        Err(e) => proto::HeartbeatResponse {
            error: group_error_code(e),
            message: e.to_string(),
            ..Default::default()
        },
    }
}

pub(crate) async fn rpc_describe(
    b: ShareNode,
    r: proto::DescribeRequest,
) -> proto::DescribeResponse {
    match b.share_describe(&r.group).await {
        Err(e) => proto::DescribeResponse {
            error: group_error_code(e),
            ..Default::default()
        },
        Ok(None) => proto::DescribeResponse::default(),
        Ok(Some(d)) => proto::DescribeResponse {
            error: 0,
            found: true,
            stable: d.state == ShareGroupState::Stable,
            group_epoch: d.group_epoch,
            assignment_epoch: d.assignment_epoch,
            members: d
                .members
                .iter()
                .map(|m| proto::Member {
                    member_id: m.member_id.as_str().to_owned(),
                    member_epoch: m.member_epoch,
                    rack_id: m.rack_id.clone(),
                    subscribed: m.subscribed_topics.clone(),
                    assignment: assignment_msg(&m.assignment),
                })
                .collect(),
        },
    }
}

// The client's side: a broker in another process.

const SHARE_CALL_TIMEOUT: Duration = Duration::from_secs(10);

fn answered<T>(error: Option<rpc_proto::Error>, ok: impl FnOnce() -> T) -> Result<T, CallError> {
    match error {
        Some(e) => Err(from_proto(e).into()),
        None => Ok(ok()),
    }
}

#[async_trait::async_trait]
impl ShareOwner for RemoteBroker {
    async fn share_fetch(
        &self,
        call: &ShareCall,
        max_records: u32,
        max_bytes: usize,
    ) -> Result<ShareFetched, CallError> {
        let r = self
            .call_timeout::<routes::ShareFetch>(
                proto::FetchRequest {
                    call: Some(call_msg(call)),
                    max_records,
                    max_bytes: max_bytes as u64,
                },
                SHARE_CALL_TIMEOUT,
            )
            .await?;
        let (records, acquired, hw, retry) =
            (r.records, r.acquired, r.high_watermark, r.retry_in_ms);
        answered(r.error, || ShareFetched {
            records: if acquired.is_empty() {
                Bytes::new()
            } else {
                records
            },
            acquired: acquired
                .into_iter()
                .map(|a| Acquired {
                    first: Offset(a.first),
                    last: Offset(a.last),
                    delivery_count: u16::try_from(a.count).unwrap_or(u16::MAX),
                })
                .collect(),
            high_watermark: hw,
            retry_in_ms: retry,
        })
    }

    async fn share_acknowledge(
        &self,
        call: &ShareCall,
        batches: &[AckBatch],
    ) -> Result<Result<(), ShareError>, CallError> {
        let r = self
            .call_timeout::<routes::ShareAck>(
                proto::AckRequest {
                    call: Some(call_msg(call)),
                    batches: batches
                        .iter()
                        .map(|b| proto::Batch {
                            first: b.first.0,
                            last: b.last.0,
                            types: b.types.iter().map(|t| t.code() as u8).collect(),
                        })
                        .collect(),
                },
                SHARE_CALL_TIMEOUT,
            )
            .await?;
        let (refused, offset) = (r.refused, r.offset);
        answered(r.error, || match refused {
            0 => Ok(()),
            INVALID_RECORD_STATE => Err(ShareError::InvalidRecordState {
                offset: Offset(offset),
            }),
            _ => Err(ShareError::InvalidRequest("refused by the owner")),
        })
    }

    async fn share_release(&self, group: &str, member: &MemberId) -> Result<(), CallError> {
        let r = self
            .call_timeout::<routes::ShareRelease>(
                proto::ReleaseRequest {
                    group: group.to_owned(),
                    member: member.as_str().to_owned(),
                },
                SHARE_CALL_TIMEOUT,
            )
            .await?;
        answered(r.error, || ())
    }
}

#[async_trait::async_trait]
impl ShareCoordinator for RemoteBroker {
    async fn share_heartbeat(
        &self,
        group: &str,
        hb: &Heartbeat,
        settings: &ShareSettings,
    ) -> Result<HeartbeatAnswer, ShareGroupError> {
        let msg = proto::HeartbeatRequest {
            group: group.to_owned(),
            member: hb.member_id.as_str().to_owned(),
            member_epoch: hb.member_epoch,
            has_subscription: hb.subscribed_topics.is_some(),
            subscribed: hb.subscribed_topics.clone().unwrap_or_default(),
            rack_id: hb.rack_id.clone(),
            heartbeat_interval_ms: settings.heartbeat_interval_ms.unwrap_or(0),
            session_timeout_ms: settings.session_timeout_ms.unwrap_or(0),
        };
        let r = self
            .call_timeout::<routes::ShareHeartbeat>(msg, SHARE_CALL_TIMEOUT)
            .await
            .map_err(|_| ShareGroupError::NotCoordinator)?;
        if r.error != 0 {
            return Err(group_error_from(r.error));
        }
        Ok(HeartbeatAnswer {
            member_epoch: r.member_epoch,
            heartbeat_interval_ms: r.heartbeat_interval_ms,
            assignment: r.has_assignment.then(|| assignment_from(r.assignment)),
        })
    }

    async fn share_describe(
        &self,
        group: &str,
    ) -> Result<Option<ShareGroupDescription>, ShareGroupError> {
        let r = self
            .call_timeout::<routes::ShareDescribe>(
                proto::DescribeRequest {
                    group: group.to_owned(),
                },
                SHARE_CALL_TIMEOUT,
            )
            .await
            .map_err(|_| ShareGroupError::NotCoordinator)?;
        if r.error != 0 {
            return Err(group_error_from(r.error));
        }
        if !r.found {
            return Ok(None);
        }
        Ok(Some(ShareGroupDescription {
            group_id: group.to_owned(),
            state: if r.stable {
                ShareGroupState::Stable
            } else {
                ShareGroupState::Empty
            },
            group_epoch: r.group_epoch,
            assignment_epoch: r.assignment_epoch,
            members: r
                .members
                .into_iter()
                .map(|m| DescribedShareMember {
                    member_id: MemberId::new(&m.member_id),
                    member_epoch: m.member_epoch,
                    rack_id: m.rack_id,
                    subscribed_topics: m.subscribed,
                    assignment: assignment_from(m.assignment),
                })
                .collect(),
        }))
    }
}

/// The RPC routes of share groups (KIP-932).
pub mod routes {
    use super::proto as share;
    use crate::rpc::routes::{Route, routes};

    routes! {
        /// Share groups (KIP-932): acquire records of a share-partition at the
        /// partition's owner.
        ShareFetch = "/rpc/share/fetch": share::FetchRequest => share::FetchResponse;
        /// Acknowledgements, answered once the share state is written.
        ShareAck = "/rpc/share/ack": share::AckRequest => share::AckResponse;
        /// A member's records released (its share session closed).
        ShareRelease = "/rpc/share/release": share::ReleaseRequest => share::ReleaseResponse;
        /// ShareGroupHeartbeat at the group's coordinator.
        ShareHeartbeat = "/rpc/share/heartbeat": share::HeartbeatRequest => share::HeartbeatResponse;
        ShareDescribe = "/rpc/share/describe": share::DescribeRequest => share::DescribeResponse;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn group_errors_cross_the_rpc_as_kafka_codes() {
        for e in [
            ShareGroupError::UnknownMemberId,
            ShareGroupError::FencedMemberEpoch,
            ShareGroupError::GroupMaxSizeReached,
            ShareGroupError::NotCoordinator,
            ShareGroupError::NotShareGroup,
            ShareGroupError::NonEmptyGroup,
        ] {
            assert_eq!(group_error_from(group_error_code(e)), e);
        }
        assert!(matches!(
            group_error_from(group_error_code(ShareGroupError::InvalidRequest("x"))),
            ShareGroupError::InvalidRequest(_)
        ));
    }

    #[test]
    fn a_call_with_its_filter_crosses_the_rpc() {
        let call = ShareCall {
            group: "g".into(),
            key: PartitionKey::new(TopicId(uuid::Uuid::from_u128(7)), 3),
            member: MemberId::new("m"),
            settings: ShareSettings {
                filter: Some(Arc::new(RecordFilter::parse("A || k=v").unwrap())),
                ..ShareSettings::default()
            },
        };
        let back = call_from(Some(call_msg(&call))).unwrap();
        assert_eq!(back.settings, call.settings);
        let plain = ShareCall {
            settings: ShareSettings::default(),
            ..call
        };
        let mut msg = call_msg(&plain);
        assert_eq!(msg.filter, "");
        assert_eq!(call_from(Some(msg.clone())).unwrap().settings.filter, None);
        msg.filter = "A && B".into();
        assert!(call_from(Some(msg)).is_err());
    }

    #[test]
    fn an_assignment_crosses_the_rpc() {
        let mut a = Assignment::new();
        a.insert(TopicId(uuid::Uuid::from_u128(7)), vec![0, 2]);
        assert_eq!(assignment_from(assignment_msg(&a)), a);
    }

    #[test]
    fn a_groups_settings_cross_the_rpc_and_an_older_proxys_call_means_none() {
        let call = ShareCall {
            group: "g".into(),
            key: PartitionKey::new(TopicId(uuid::Uuid::from_u128(3)), 1),
            member: MemberId::new("m"),
            settings: ShareSettings {
                backoff: Backoff {
                    base_ms: 100,
                    max_ms: 800,
                },
                dead_letter_topic: Some(std::sync::Arc::from("dlq")),
                read_committed: true,
                ..ShareSettings::default()
            },
        };
        let back = call_from(Some(call_msg(&call))).unwrap();
        assert_eq!(back.settings, call.settings);
        // Fields 7 to 9 absent, as an older proxy sends: no backoff, no DLQ.
        let old = proto::Call {
            backoff_base_ms: 0,
            backoff_max_ms: 0,
            dead_letter_topic: String::new(),
            ..call_msg(&call)
        };
        let back = call_from(Some(old)).unwrap();
        assert_eq!(back.settings.backoff, Backoff::default());
        assert_eq!(back.settings.dead_letter_topic, None);
    }
}
