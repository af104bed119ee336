//! Share groups (KIP-932) at the proxy, behind `--share-groups`:
//! ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch (with piggy-backed
//! acknowledgements) and ShareAcknowledge, and the share sessions.
//!
//! A share group's membership is served by its coordinator shard's owner
//! and its share-partitions by the partitions' owners ([`ShareCoordinator`],
//! [`ShareOwner`]: this process's broker or another over the internal
//! RPC); the proxy keeps the share sessions and sends each owner its part.
//! `docs/queues.md` says what is left.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use floe_broker::share::{
    AckBatch, AckType, AutoOffsetReset, Backoff, Heartbeat, MemberId, ShareCall, ShareCoordinator,
    ShareError, ShareGroupError, ShareOwner, ShareSettings,
};
use floe_metadata::group_config;
use floe_metadata::watch::ClusterSnapshot;
use floe_storage::PartitionKey;
use floe_types::{Offset, TopicId};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::errors::call_code;
use crate::handlers::Context;

/// The share APIs and versions ApiVersions lists with `--share-groups`.
pub const SHARE_SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ShareGroupHeartbeat, 1, 1),
    (ApiKey::ShareGroupDescribe, 1, 1),
    (ApiKey::ShareFetch, 1, 1),
    (ApiKey::ShareAcknowledge, 1, 1),
    (ApiKey::DescribeShareGroupOffsets, 0, 0),
    (ApiKey::AlterShareGroupOffsets, 0, 0),
    (ApiKey::DeleteShareGroupOffsets, 0, 0),
];

/// Share sessions one proxy keeps at most (Kafka's
/// `group.share.max.share.sessions`).
const MAX_SESSIONS: usize = 2_000;

/// Records a ShareFetch without `max_records` acquires at most.
const DEFAULT_MAX_RECORDS: u32 = 500;

/// The longest a ShareFetch that acquired nothing waits before it looks
/// again (it is woken earlier by new data or a lock to expire).
const RETRY_SLICE: Duration = Duration::from_millis(500);

/// One share session: (group, member) → the next epoch and its partitions.
#[derive(Debug, Default)]
struct Session {
    next_epoch: i32,
    partitions: BTreeSet<(uuid::Uuid, i32)>,
}

/// How long a group's configs read from the metadata service are used
/// before they are read again (a change made through another proxy takes
/// at most this long to apply here).
const GROUP_CONFIGS_TTL: Duration = Duration::from_secs(5);

/// How long a call waits for its group's configs to be read.
const CONFIGS_READ_WAIT: Duration = Duration::from_secs(2);

/// A group's configs were never read and cannot be now: the call is
/// answered with a retriable error rather than with settings that may not
/// be the group's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingsUnread;

impl SettingsUnread {
    /// The Kafka error a call answers: retriable, the client asks again.
    pub fn code(self) -> i16 {
        ResponseError::CoordinatorNotAvailable.code()
    }
}

/// The share groups' state this proxy serves, and its share sessions.
#[derive(Debug)]
pub struct ShareContext {
    /// The settings of a group without configs of its own (the flags),
    /// sent with each call to an owner.
    pub settings: ShareSettings,
    sessions: Mutex<HashMap<(String, String), Session>>,
    /// Each group's settings as its configs (the GROUP config resource)
    /// make them, with when they were read.
    resolved: Mutex<HashMap<String, (tokio::time::Instant, ShareSettings)>>,
}

impl ShareContext {
    pub fn new(settings: ShareSettings) -> Self {
        Self {
            settings,
            sessions: Mutex::new(HashMap::new()),
            resolved: Mutex::new(HashMap::new()),
        }
    }

    /// `group`'s settings: its `share.*` configs where set, else the
    /// flags'. Read from the metadata service at most every
    /// `GROUP_CONFIGS_TTL`. When they cannot be read, the last ones read
    /// stand, however old: a group's configs rarely change, and settings
    /// that are not the group's are harmful (sent to an owner without the
    /// group's dead-letter topic, they archive the records waiting for it;
    /// with another delivery limit, they deliver a record once too often).
    /// Never read at all, the call fails ([`SettingsUnread`]) and the client
    /// asks again.
    pub async fn settings_for(
        &self,
        meta: &dyn floe_metadata::api::MetaApi,
        group: &str,
    ) -> Result<ShareSettings, SettingsUnread> {
        let now = tokio::time::Instant::now();
        let cached = self
            .resolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(group)
            .cloned();
        if let Some((at, s)) = &cached
            && now.duration_since(*at) < GROUP_CONFIGS_TTL
        {
            return Ok(s.clone());
        }
        let read = tokio::time::timeout(CONFIGS_READ_WAIT, meta.group_configs(group)).await;
        let why = match read {
            Ok(Ok(configs)) => {
                let settings = self.apply(&configs, group);
                self.resolved
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(group.to_owned(), (now, settings.clone()));
                return Ok(settings);
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer in {} s", CONFIGS_READ_WAIT.as_secs()),
        };
        match cached {
            Some((at, s)) => {
                tracing::warn!(group, error = %why, age_s = now.duration_since(at).as_secs(),
                    "share group configs not read; the last ones read stand");
                Ok(s)
            }
            None => {
                tracing::warn!(group, error = %why,
                    "share group configs never read; the call fails for the client to retry");
                Err(SettingsUnread)
            }
        }
    }

    /// The flags' settings with `configs`' set keys over them.
    fn apply(&self, configs: &group_config::GroupConfigs, group: &str) -> ShareSettings {
        let mut s = self.settings.clone();
        let filter = configs.floe_filter();
        s.filter = (!filter.is_all()).then(|| Arc::new(filter));
        s.backoff = Backoff {
            base_ms: u64::from(configs.floe_retry_backoff_base_ms()),
            max_ms: u64::from(configs.floe_retry_backoff_max_ms()),
        };
        s.dead_letter_topic = configs.floe_dlq_topic().map(Arc::from);
        s.read_committed = configs.share_read_committed();
        if configs.is_set(group_config::SHARE_RECORD_LOCK_DURATION_MS) {
            s.lock_duration_ms = u64::from(configs.share_record_lock_duration_ms());
        }
        s.delivery_count_limit =
            u16::try_from(configs.share_delivery_count_limit()).unwrap_or(u16::MAX);
        if configs.is_set(group_config::SHARE_AUTO_OFFSET_RESET) {
            let value = configs.share_auto_offset_reset();
            match value {
                "earliest" => s.reset = AutoOffsetReset::Earliest,
                "latest" => s.reset = AutoOffsetReset::Latest,
                other => match other
                    .strip_prefix("by_duration:")
                    .and_then(group_config::iso_duration_ms)
                {
                    Some(ms) => s.reset = AutoOffsetReset::ByDuration(ms),
                    // Checked when it was set; only a config stored by a
                    // later version could get here.
                    None => tracing::warn!(
                        group,
                        value = other,
                        "share.auto.offset.reset not understood; using the flag's"
                    ),
                },
            }
        }
        if configs.is_set(group_config::SHARE_HEARTBEAT_INTERVAL_MS) {
            s.heartbeat_interval_ms = Some(configs.share_heartbeat_interval_ms());
        }
        if configs.is_set(group_config::SHARE_SESSION_TIMEOUT_MS) {
            s.session_timeout_ms = Some(configs.share_session_timeout_ms());
        }
        s
    }
}

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

/// Kafka's code for a refused heartbeat.
fn group_code(e: ShareGroupError) -> ResponseError {
    match e {
        ShareGroupError::UnknownMemberId => ResponseError::UnknownMemberId,
        ShareGroupError::FencedMemberEpoch => ResponseError::FencedMemberEpoch,
        ShareGroupError::GroupMaxSizeReached => ResponseError::GroupMaxSizeReached,
        ShareGroupError::InvalidRequest(_) => ResponseError::InvalidRequest,
        ShareGroupError::NotCoordinator => ResponseError::NotCoordinator,
        ShareGroupError::NotShareGroup => ResponseError::GroupIdNotFound,
        ShareGroupError::NonEmptyGroup => ResponseError::NonEmptyGroup,
    }
}

/// Kafka's code for a refused acknowledgement.
fn ack_code(e: &ShareError) -> ResponseError {
    match e {
        ShareError::InvalidRecordState { .. } => ResponseError::InvalidRecordState,
        ShareError::InvalidRequest(_) | ShareError::CorruptSnapshot(_) => {
            ResponseError::InvalidRequest
        }
    }
}

/// The index of the answer for partition `tp`, added if not there yet.
fn answer_at(
    answers: &mut Vec<((uuid::Uuid, i32), PartitionData)>,
    tp: (uuid::Uuid, i32),
) -> usize {
    if let Some(i) = answers.iter().position(|(k, _)| *k == tp) {
        return i;
    }
    let mut pd = PartitionData::default();
    pd.partition_index = tp.1;
    answers.push((tp, pd));
    answers.len() - 1
}

/// Acknowledgement batches of the wire, checked.
fn ack_batches(
    batches: &[share_fetch_request::AcknowledgementBatch],
) -> Result<Vec<AckBatch>, ResponseError> {
    batches
        .iter()
        .map(|b| {
            let types = b
                .acknowledge_types
                .iter()
                .map(|t| AckType::from_code(*t))
                .collect::<Option<Vec<_>>>()
                .ok_or(ResponseError::InvalidRequest)?;
            Ok(AckBatch {
                first: Offset(b.first_offset),
                last: Offset(b.last_offset),
                types,
            })
        })
        .collect()
}

/// What a session step decided.
enum SessionStep {
    /// Go on; the partitions to fetch from.
    Fetch(Vec<(uuid::Uuid, i32)>),
    /// Epoch −1: acknowledge, then the session is gone; the partitions it
    /// had, whose owners release the member's records.
    Close(Vec<(uuid::Uuid, i32)>),
}

impl Context {
    fn share(&self) -> Option<&Arc<ShareContext>> {
        self.share.as_ref()
    }

    /// The proxies named as brokers (the leaders answers name).
    fn node_endpoints(&self, snap: &ClusterSnapshot) -> Vec<NodeEndpoint> {
        self.kafka_nodes(snap)
            .all()
            .iter()
            .map(|k| {
                let mut n = NodeEndpoint::default();
                n.node_id = BrokerId(k.id);
                n.host = s(k.host.clone());
                n.port = k.port;
                n
            })
            .collect()
    }

    /// The coordinator of a share group: its shard's owner.
    fn share_coordinator(&self, group: &str) -> Result<Arc<dyn ShareCoordinator>, ResponseError> {
        match self.shard_owner(group) {
            Ok(crate::groups::ShardOwner::Local(b)) => Ok(Arc::new(b.share().clone())),
            Ok(crate::groups::ShardOwner::Remote(r)) => Ok(r),
            Err(_) => Err(ResponseError::NotCoordinator),
        }
    }

    /// The owner of a partition, for its share-partitions.
    fn share_owner(
        &self,
        snap: &ClusterSnapshot,
        key: &PartitionKey,
    ) -> Result<Arc<dyn ShareOwner>, i16> {
        match self.owner_of(snap, key) {
            Ok(crate::groups::ShardOwner::Local(b)) => Ok(Arc::new(b.share().clone())),
            Ok(crate::groups::ShardOwner::Remote(r)) => Ok(r),
            Err(e) => Err(call_code(&e.into())),
        }
    }

    /// Releases `member`'s records at the owners of `partitions`.
    async fn release_at_owners(&self, group: &str, member: &MemberId, partitions: &[PartitionKey]) {
        let snap = self.view.current();
        let mut done = Vec::new();
        for key in partitions {
            let Ok(owner) = self.share_owner(&snap, key) else {
                continue;
            };
            // One call per owner: it releases the member everywhere there.
            let who = snap
                .by_id
                .get(&key.topic)
                .and_then(|t| t.partitions.iter().find(|p| p.partition == key.partition))
                .and_then(|p| p.owner);
            if done.contains(&who) {
                continue;
            }
            done.push(who);
            if let Err(e) = owner.share_release(group, member).await {
                tracing::debug!(group, error = %e, "share release not delivered; locks expire");
            }
        }
    }

    fn leader(&self, snap: &ClusterSnapshot, key: &PartitionKey) -> LeaderIdAndEpoch {
        let mut l = LeaderIdAndEpoch::default();
        l.leader_id = self.kafka_nodes(snap).leader(key).id;
        l.leader_epoch = snap
            .by_id
            .get(&key.topic)
            .and_then(|t| t.partitions.iter().find(|p| p.partition == key.partition))
            .map_or(-1, |p| i32::try_from(p.epoch.0).unwrap_or(i32::MAX));
        l
    }

    pub async fn share_group_heartbeat(
        &self,
        req: &ShareGroupHeartbeatRequest,
    ) -> ShareGroupHeartbeatResponse {
        let mut r = ShareGroupHeartbeatResponse::default();
        if self.share().is_none() {
            r.error_code = ResponseError::UnsupportedVersion.code();
            return r;
        }
        let hb = Heartbeat {
            member_id: MemberId::new(req.member_id.as_str()),
            member_epoch: req.member_epoch,
            subscribed_topics: req
                .subscribed_topic_names
                .as_ref()
                .map(|ts| ts.iter().map(|t| t.0.to_string()).collect()),
            rack_id: req.rack_id.as_ref().map(|r| r.to_string()),
        };
        let coordinator = match self.share_coordinator(req.group_id.as_str()) {
            Ok(c) => c,
            Err(e) => {
                r.error_code = e.code();
                return r;
            }
        };
        let Some(share) = self.share() else {
            return r;
        };
        let settings = match share
            .settings_for(self.meta.as_ref(), req.group_id.as_str())
            .await
        {
            Ok(s) => s,
            Err(e) => {
                r.error_code = e.code();
                return r;
            }
        };
        match coordinator
            .share_heartbeat(req.group_id.as_str(), &hb, &settings)
            .await
        {
            Ok(answer) => {
                r.member_id = Some(req.member_id.clone());
                r.member_epoch = answer.member_epoch;
                r.heartbeat_interval_ms =
                    i32::try_from(answer.heartbeat_interval_ms).unwrap_or(i32::MAX);
                r.assignment = answer.assignment.map(|a| {
                    let mut out = share_group_heartbeat_response::Assignment::default();
                    out.topic_partitions = a
                        .into_iter()
                        .map(|(topic, partitions)| {
                            let mut tp = share_group_heartbeat_response::TopicPartitions::default();
                            tp.topic_id = topic.0;
                            tp.partitions = partitions;
                            tp
                        })
                        .collect();
                    out
                });
            }
            Err(ShareGroupError::NotShareGroup) => {
                r.error_code = ResponseError::GroupIdNotFound.code();
                r.error_message = Some(s(format!(
                    "Group {} is not a share group.",
                    req.group_id.as_str()
                )));
            }
            Err(e) => {
                r.error_code = group_code(e).code();
                r.error_message = Some(s(e.to_string()));
            }
        }
        r
    }

    pub async fn share_group_describe(
        &self,
        req: &ShareGroupDescribeRequest,
    ) -> ShareGroupDescribeResponse {
        let mut r = ShareGroupDescribeResponse::default();
        let snap = self.view.current();
        for id in &req.group_ids {
            let mut g = share_group_describe_response::DescribedGroup::default();
            g.group_id = id.clone();
            g.authorized_operations = i32::MIN;
            g.assignor_name = s("simple");
            let described = match self.share() {
                None => Ok(None),
                Some(_) => match self.share_coordinator(id.as_str()) {
                    Ok(c) => c.share_describe(id.as_str()).await,
                    Err(_) => Err(ShareGroupError::NotCoordinator),
                },
            };
            match described {
                Err(e) => {
                    g.error_code = group_code(e).code();
                    g.error_message = Some(s(e.to_string()));
                }
                Ok(None) => match self.share_check(id.as_str()).await {
                    // Known only from its stored state (no member since
                    // its coordinator started): Empty.
                    Ok(Some(floe_broker::share::GroupKind::Share)) => {
                        g.group_state = s("Empty");
                    }
                    // As Kafka says which: another kind of group, or none.
                    other => {
                        g.error_code = ResponseError::GroupIdNotFound.code();
                        g.group_state = s("Dead");
                        g.error_message = Some(s(match other {
                            Ok(Some(_)) => format!("Group {} is not a share group.", id.as_str()),
                            _ => format!("Group {} not found.", id.as_str()),
                        }));
                    }
                },
                Ok(Some(d)) => {
                    g.group_state = s(d.state.as_str());
                    g.group_epoch = d.group_epoch;
                    g.assignment_epoch = d.assignment_epoch;
                    g.members = d
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut out = share_group_describe_response::Member::default();
                            out.member_id = s(m.member_id.as_str());
                            out.member_epoch = m.member_epoch;
                            out.rack_id = m.rack_id.map(s);
                            out.subscribed_topic_names = m
                                .subscribed_topics
                                .into_iter()
                                .map(|t| TopicName(s(t)))
                                .collect();
                            out.assignment.topic_partitions = m
                                .assignment
                                .into_iter()
                                .map(|(topic, partitions)| {
                                    let mut tp =
                                        share_group_describe_response::TopicPartitions::default();
                                    tp.topic_id = topic.0;
                                    if let Some(t) = snap.by_id.get(&topic) {
                                        tp.topic_name = TopicName(s(t.name.clone()));
                                    }
                                    tp.partitions = partitions;
                                    tp
                                })
                                .collect();
                            out
                        })
                        .collect();
                }
            }
            r.groups.push(g);
        }
        r
    }

    /// One step of the share session of (group, member) at `epoch`, adding
    /// `add` and removing `forget`.
    fn session_step(
        share: &ShareContext,
        group: &str,
        member: &str,
        epoch: i32,
        add: &[(uuid::Uuid, i32)],
        forget: &[(uuid::Uuid, i32)],
    ) -> Result<SessionStep, ResponseError> {
        let mut sessions = share
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let key = (group.to_owned(), member.to_owned());
        match epoch {
            0 => {
                if !sessions.contains_key(&key) && sessions.len() >= MAX_SESSIONS {
                    return Err(ResponseError::ShareSessionLimitReached);
                }
                let session = Session {
                    next_epoch: 1,
                    partitions: add.iter().copied().collect(),
                };
                let partitions = session.partitions.iter().copied().collect();
                sessions.insert(key, session);
                Ok(SessionStep::Fetch(partitions))
            }
            -1 => match sessions.remove(&key) {
                Some(session) => Ok(SessionStep::Close(session.partitions.into_iter().collect())),
                None => Err(ResponseError::ShareSessionNotFound),
            },
            e => {
                let session = sessions
                    .get_mut(&key)
                    .ok_or(ResponseError::ShareSessionNotFound)?;
                if e != session.next_epoch {
                    return Err(ResponseError::InvalidShareSessionEpoch);
                }
                session.next_epoch = if e == i32::MAX { 1 } else { e + 1 };
                session.partitions.extend(add.iter().copied());
                for f in forget {
                    session.partitions.remove(f);
                }
                Ok(SessionStep::Fetch(
                    session.partitions.iter().copied().collect(),
                ))
            }
        }
    }

    pub async fn share_fetch(&self, req: &ShareFetchRequest) -> ShareFetchResponse {
        let mut r = ShareFetchResponse::default();
        let Some(share) = self.share().cloned() else {
            r.error_code = ResponseError::UnsupportedVersion.code();
            return r;
        };
        let (Some(group), Some(member_id)) = (req.group_id.as_ref(), req.member_id.as_ref()) else {
            r.error_code = ResponseError::InvalidRequest.code();
            return r;
        };
        let (group, member_id) = (group.as_str(), member_id.as_str());
        let member = MemberId::new(member_id);
        let settings = match share.settings_for(self.meta.as_ref(), group).await {
            Ok(s) => s,
            Err(e) => {
                r.error_code = e.code();
                return r;
            }
        };
        r.acquisition_lock_timeout_ms =
            i32::try_from(settings.lock_duration_ms).unwrap_or(i32::MAX);
        let snap = self.view.current();
        r.node_endpoints = self.node_endpoints(&snap);
        let call = |key: PartitionKey| ShareCall {
            group: group.to_owned(),
            key,
            member: member.clone(),
            settings: settings.clone(),
        };
        let has_acks = req
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .any(|p| !p.acknowledgement_batches.is_empty());
        if req.share_session_epoch == 0 && has_acks {
            r.error_code = ResponseError::InvalidRequest.code();
            return r;
        }
        if req.share_session_epoch == 0 && !self.is_share_member(group, &member).await {
            r.error_code = ResponseError::UnknownMemberId.code();
            return r;
        }
        let add: Vec<(uuid::Uuid, i32)> = req
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.topic_id, p.partition_index)))
            .collect();
        let forget: Vec<(uuid::Uuid, i32)> = req
            .forgotten_topics_data
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.topic_id, *p)))
            .collect();
        let step = match Self::session_step(
            &share,
            group,
            member_id,
            req.share_session_epoch,
            &add,
            &forget,
        ) {
            Ok(step) => step,
            Err(e) => {
                r.error_code = e.code();
                return r;
            }
        };
        let key_of = |topic: uuid::Uuid, partition: i32| {
            let p = u32::try_from(partition).ok()?;
            snap.by_id.get(&TopicId(topic))?.partition_key(p)
        };
        // Partition answers by (topic, partition), in request order.
        let mut answers: Vec<((uuid::Uuid, i32), PartitionData)> = Vec::new();
        // The acknowledgements of every partition at once (each waits for
        // its share-partition's state to be written), and beside them the
        // fetch: a record acknowledged here is not one a fetch could hand
        // out, so neither waits for the other. A closing session releases
        // the member's records only after its acknowledgements.
        let mut acks = Vec::new();
        for t in &req.topics {
            for p in &t.partitions {
                if p.acknowledgement_batches.is_empty() {
                    continue;
                }
                let tp = (t.topic_id, p.partition_index);
                let Some(key) = key_of(tp.0, tp.1) else {
                    acks.push(futures::future::Either::Left(std::future::ready((
                        tp,
                        ResponseError::UnknownTopicId.code(),
                        None,
                    ))));
                    continue;
                };
                let leader = Some(self.leader(&snap, &key));
                let batches = match ack_batches(&p.acknowledgement_batches) {
                    Ok(b) => b,
                    Err(code) => {
                        acks.push(futures::future::Either::Left(std::future::ready((
                            tp,
                            code.code(),
                            leader,
                        ))));
                        continue;
                    }
                };
                let snap = &snap;
                let call = call(key);
                acks.push(futures::future::Either::Right(async move {
                    let code = self.acknowledge_at_owner(snap, call, &batches).await;
                    (tp, code, leader)
                }));
            }
        }
        let acks = futures::future::join_all(acks);
        let acked = match step {
            SessionStep::Close(had) => {
                let acked = acks.await;
                let keys: Vec<PartitionKey> =
                    had.iter().filter_map(|tp| key_of(tp.0, tp.1)).collect();
                self.release_at_owners(group, &member, &keys).await;
                acked
            }
            SessionStep::Fetch(partitions) => {
                let (acked, ()) = tokio::join!(
                    acks,
                    self.share_fetch_records(&snap, req, &partitions, &call, &key_of, &mut answers)
                );
                acked
            }
        };
        for (tp, code, leader) in acked {
            let i = answer_at(&mut answers, tp);
            let pd = &mut answers[i].1;
            pd.acknowledge_error_code = code;
            if let Some(leader) = leader {
                pd.current_leader = leader;
            }
        }
        r.responses = group_by_topic(answers, |pd: &PartitionData| {
            pd.error_code != 0
                || pd.acknowledge_error_code != 0
                || pd.records.is_some()
                || !pd.acquired_records.is_empty()
        });
        r
    }

    /// The fetch half of a ShareFetch: records acquired from `partitions`
    /// up to the request's limits, waiting up to its `max_wait_ms` for any.
    async fn share_fetch_records(
        &self,
        snap: &ClusterSnapshot,
        req: &ShareFetchRequest,
        partitions: &[(uuid::Uuid, i32)],
        call: &(dyn Fn(PartitionKey) -> ShareCall + Sync),
        key_of: &(dyn Fn(uuid::Uuid, i32) -> Option<PartitionKey> + Sync),
        answers: &mut Vec<((uuid::Uuid, i32), PartitionData)>,
    ) {
        let max_records = u32::try_from(req.max_records)
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_MAX_RECORDS);
        let max_bytes = usize::try_from(req.max_bytes)
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or(self.fetch_limits.max_bytes)
            .min(self.fetch_limits.max_bytes);
        let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0))
            .min(self.max_fetch_wait);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let mut left = max_records;
            let mut got_any = false;
            // What to wait on if nothing is acquired: each partition's owner
            // and high watermark as read, and the earliest lock to expire.
            let mut read: Vec<(Arc<dyn ShareOwner>, PartitionKey, i64)> = Vec::new();
            let mut retry_in: Option<u64> = None;
            for &tp in partitions {
                if left == 0 {
                    break;
                }
                let Some(key) = key_of(tp.0, tp.1) else {
                    let i = answer_at(answers, tp);
                    answers[i].1.error_code = ResponseError::UnknownTopicId.code();
                    continue;
                };
                let owner = match self.share_owner(snap, &key) {
                    Ok(o) => o,
                    Err(code) => {
                        let i = answer_at(answers, tp);
                        answers[i].1.error_code = code;
                        continue;
                    }
                };
                match owner.share_fetch(&call(key), left, max_bytes).await {
                    Ok(f) if !f.acquired.is_empty() => {
                        got_any = true;
                        let i = answer_at(answers, tp);
                        let pd = &mut answers[i].1;
                        pd.current_leader = self.leader(snap, &key);
                        pd.records = Some(f.records);
                        for a in &f.acquired {
                            let n = (a.last.0 - a.first.0 + 1) as u32;
                            left = left.saturating_sub(n);
                            let mut ar = AcquiredRecords::default();
                            ar.first_offset = a.first.0;
                            ar.last_offset = a.last.0;
                            ar.delivery_count = i16::try_from(a.delivery_count).unwrap_or(i16::MAX);
                            pd.acquired_records.push(ar);
                        }
                    }
                    Ok(f) => {
                        if let Some(ms) = f.retry_in_ms {
                            retry_in = Some(retry_in.map_or(ms, |r| r.min(ms)));
                        }
                        if f.high_watermark >= 0 {
                            read.push((owner, key, f.high_watermark));
                        }
                    }
                    Err(e) => {
                        let i = answer_at(answers, tp);
                        answers[i].1.error_code = call_code(&e);
                    }
                }
            }
            if got_any || partitions.is_empty() || tokio::time::Instant::now() >= deadline {
                break;
            }
            // Until new data, a lock expiring or a backoff ending, or the
            // deadline; a slice at most, should a wake-up be missed.
            let now = tokio::time::Instant::now();
            let until = retry_in
                .map(|ms| now + Duration::from_millis(ms))
                .into_iter()
                .fold(deadline.min(now + RETRY_SLICE), tokio::time::Instant::min);
            if read.is_empty() {
                tokio::time::sleep_until(until).await;
            } else {
                let waits = read
                    .iter()
                    .map(|(owner, key, hw)| owner.wait_for_data(key, *hw, until));
                futures::future::select_all(waits).await;
            }
        }
    }

    pub async fn share_acknowledge(
        &self,
        req: &ShareAcknowledgeRequest,
    ) -> ShareAcknowledgeResponse {
        let mut r = ShareAcknowledgeResponse::default();
        let Some(share) = self.share().cloned() else {
            r.error_code = ResponseError::UnsupportedVersion.code();
            return r;
        };
        let (Some(group), Some(member_id)) = (req.group_id.as_ref(), req.member_id.as_ref()) else {
            r.error_code = ResponseError::InvalidRequest.code();
            return r;
        };
        let (group, member_id) = (group.as_str(), member_id.as_str());
        let member = MemberId::new(member_id);
        let settings = match share.settings_for(self.meta.as_ref(), group).await {
            Ok(s) => s,
            Err(e) => {
                r.error_code = e.code();
                return r;
            }
        };
        let snap = self.view.current();
        r.node_endpoints = self
            .node_endpoints(&snap)
            .into_iter()
            .map(|n| {
                let mut le = share_acknowledge_response::NodeEndpoint::default();
                le.node_id = n.node_id;
                le.host = n.host;
                le.port = n.port;
                le
            })
            .collect();
        if req.share_session_epoch == 0 {
            r.error_code = ResponseError::InvalidShareSessionEpoch.code();
            return r;
        }
        let step =
            match Self::session_step(&share, group, member_id, req.share_session_epoch, &[], &[]) {
                Ok(step) => step,
                Err(e) => {
                    r.error_code = e.code();
                    return r;
                }
            };
        // Every partition's acknowledgements at once: each waits for its
        // share-partition's state to be written.
        let snap = &snap;
        let (member, settings) = (&member, &settings);
        r.responses = futures::future::join_all(req.topics.iter().map(|t| async move {
            let mut tr = share_acknowledge_response::ShareAcknowledgeTopicResponse::default();
            tr.topic_id = t.topic_id;
            tr.partitions = futures::future::join_all(t.partitions.iter().map(|p| async move {
                let mut pd = share_acknowledge_response::PartitionData::default();
                pd.partition_index = p.partition_index;
                let key = u32::try_from(p.partition_index)
                    .ok()
                    .and_then(|i| snap.by_id.get(&TopicId(t.topic_id))?.partition_key(i));
                match key {
                    None => pd.error_code = ResponseError::UnknownTopicId.code(),
                    Some(key) => {
                        let leader = self.leader(snap, &key);
                        pd.current_leader.leader_id = leader.leader_id;
                        pd.current_leader.leader_epoch = leader.leader_epoch;
                        let batches: Vec<share_fetch_request::AcknowledgementBatch> = p
                            .acknowledgement_batches
                            .iter()
                            .map(|b| {
                                let mut out = share_fetch_request::AcknowledgementBatch::default();
                                out.first_offset = b.first_offset;
                                out.last_offset = b.last_offset;
                                out.acknowledge_types = b.acknowledge_types.clone();
                                out
                            })
                            .collect();
                        pd.error_code = match ack_batches(&batches) {
                            Err(code) => code.code(),
                            Ok(b) => {
                                let call = ShareCall {
                                    group: group.to_owned(),
                                    key,
                                    member: member.clone(),
                                    settings: settings.clone(),
                                };
                                self.acknowledge_at_owner(snap, call, &b).await
                            }
                        };
                    }
                }
                pd
            }))
            .await;
            tr
        }))
        .await;
        if let SessionStep::Close(had) = step {
            let keys: Vec<PartitionKey> = had
                .iter()
                .filter_map(|(t, p)| {
                    snap.by_id
                        .get(&TopicId(*t))?
                        .partition_key(u32::try_from(*p).ok()?)
                })
                .collect();
            self.release_at_owners(group, member, &keys).await;
        }
        r
    }

    /// Applies acknowledgements at the partition's owner: 0 or the code.
    async fn acknowledge_at_owner(
        &self,
        snap: &ClusterSnapshot,
        call: ShareCall,
        batches: &[AckBatch],
    ) -> i16 {
        let owner = match self.share_owner(snap, &call.key) {
            Ok(o) => o,
            Err(code) => return code,
        };
        match owner.share_acknowledge(&call, batches).await {
            Ok(Ok(())) => 0,
            Ok(Err(e)) => ack_code(&e).code(),
            Err(e) => call_code(&e),
        }
    }

    /// Whether `member` is in `group` (a coordinator that cannot answer now
    /// lets the session open: the member's heartbeats settle it).
    async fn is_share_member(&self, group: &str, member: &MemberId) -> bool {
        let Ok(coordinator) = self.share_coordinator(group) else {
            return true;
        };
        match coordinator.share_describe(group).await {
            Ok(Some(d)) => d.members.iter().any(|m| &m.member_id == member),
            Ok(None) => false,
            Err(_) => true,
        }
    }
}

impl Context {
    /// DescribeShareGroupOffsets: each share-partition's start offset, as
    /// its owner last wrote it (the group's stored offset of the partition,
    /// `Command::ShareState`); -1 for a partition the group has no state on
    /// yet. Without topics: every partition the group has state on.
    pub async fn describe_share_group_offsets(
        &self,
        req: &DescribeShareGroupOffsetsRequest,
    ) -> DescribeShareGroupOffsetsResponse {
        use describe_share_group_offsets_response::{
            DescribeShareGroupOffsetsResponseGroup as Group,
            DescribeShareGroupOffsetsResponsePartition as Partition,
            DescribeShareGroupOffsetsResponseTopic as Topic,
        };
        use floe_metadata::api::{proto as mp, routes};

        let mut r = DescribeShareGroupOffsetsResponse::default();
        let snap = self.view.current();
        for g in &req.groups {
            let mut out = Group::default();
            out.group_id = g.group_id.clone();
            let stored = self
                .meta
                .call::<routes::FetchOffsets>(mp::FetchOffsetsRequest {
                    group: g.group_id.to_string(),
                })
                .await;
            let states: std::collections::BTreeMap<(String, i32), i64> = match stored {
                Ok(resp) => resp
                    .offsets
                    .into_iter()
                    .filter(|o| floe_broker::share::durable::is_share_state(&o.metadata))
                    .filter_map(|o| Some(((o.topic, i32::try_from(o.partition).ok()?), o.offset)))
                    .collect(),
                Err(e) => {
                    out.error_code = ResponseError::CoordinatorNotAvailable.code();
                    out.error_message = Some(s(e.to_string()));
                    r.groups.push(out);
                    continue;
                }
            };
            let wanted: Vec<(String, Vec<i32>)> = match &g.topics {
                Some(topics) => topics
                    .iter()
                    .map(|t| (t.topic_name.to_string(), t.partitions.clone()))
                    .collect(),
                None => {
                    let mut by_topic: Vec<(String, Vec<i32>)> = Vec::new();
                    for (topic, p) in states.keys() {
                        match by_topic.last_mut() {
                            Some((t, ps)) if t == topic => ps.push(*p),
                            _ => by_topic.push((topic.clone(), vec![*p])),
                        }
                    }
                    by_topic
                }
            };
            for (name, partitions) in wanted {
                let mut t = Topic::default();
                t.topic_name = TopicName(s(name.clone()));
                let known = snap.topics.get(&name);
                if let Some(info) = known {
                    t.topic_id = info.id.0;
                }
                for p in partitions {
                    let mut pd = Partition::default();
                    pd.partition_index = p;
                    pd.leader_epoch = -1;
                    pd.start_offset = states.get(&(name.clone(), p)).copied().unwrap_or(-1);
                    let exists = known
                        .is_some_and(|i| u32::try_from(p).is_ok_and(|p| p < i.partition_count));
                    if !exists {
                        pd.error_code = ResponseError::UnknownTopicOrPartition.code();
                    }
                    t.partitions.push(pd);
                }
                out.topics.push(t);
            }
            r.groups.push(out);
        }
        r
    }
}

/// Partition answers (those `keep` keeps) grouped by topic, in order.
fn group_by_topic(
    answers: Vec<((uuid::Uuid, i32), PartitionData)>,
    keep: impl Fn(&PartitionData) -> bool,
) -> Vec<ShareFetchableTopicResponse> {
    let mut out: Vec<ShareFetchableTopicResponse> = Vec::new();
    for ((topic, _), pd) in answers {
        if !keep(&pd) {
            continue;
        }
        match out.iter_mut().find(|t| t.topic_id == topic) {
            Some(t) => t.partitions.push(pd),
            None => {
                let mut t = ShareFetchableTopicResponse::default();
                t.topic_id = topic;
                t.partitions.push(pd);
                out.push(t);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::handlers::decodable;

    fn ctx() -> ShareContext {
        ShareContext::new(ShareSettings::default())
    }

    /// A metadata service whose group configs name a dead-letter topic, until
    /// it stops answering.
    #[derive(Debug, Default)]
    struct Configs {
        down: std::sync::atomic::AtomicBool,
    }

    #[async_trait::async_trait]
    impl floe_metadata::api::MetaApi for Configs {
        async fn call_route(
            &self,
            call: floe_metadata::api::RouteCall,
        ) -> Result<floe_metadata::api::meta_api::Reply, floe_metadata::MetaError> {
            use floe_metadata::api::{proto, routes};
            if self.down.load(std::sync::atomic::Ordering::SeqCst)
                || call.request::<routes::GroupConfigs>().is_none()
            {
                return Err(floe_metadata::MetaError::Unavailable("down (test)".into()));
            }
            let set = [
                ("floe.dlq.topic", "dead"),
                ("share.delivery.count.limit", "3"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            Ok(floe_metadata::api::meta_api::reply::<routes::GroupConfigs>(
                proto::GroupConfigsResponse { set },
            ))
        }
    }

    /// Issue 41: a proxy that could not read a group's configs in time
    /// answered with its flags' settings, which name no dead-letter topic
    /// and another delivery limit: an owner given them archived the records
    /// waiting for the dead-letter topic and never wrote the start it moved.
    #[tokio::test(start_paused = true)]
    async fn configs_not_read_leave_the_last_ones_read_and_never_the_flags() {
        let share = ctx();
        let meta = Configs::default();
        let read = share.settings_for(&meta, "g").await.unwrap();
        assert_eq!(read.dead_letter_topic.as_deref(), Some("dead"));
        assert_eq!(read.delivery_count_limit, 3);
        meta.down.store(true, std::sync::atomic::Ordering::SeqCst);
        tokio::time::advance(GROUP_CONFIGS_TTL * 10).await;
        let stale = share.settings_for(&meta, "g").await.unwrap();
        assert_eq!(stale.dead_letter_topic.as_deref(), Some("dead"));
        assert_eq!(stale.delivery_count_limit, 3);
        // Never read: no settings at all, rather than the flags'.
        assert_eq!(
            share.settings_for(&meta, "other").await,
            Err(SettingsUnread)
        );
        assert_eq!(
            SettingsUnread.code(),
            ResponseError::CoordinatorNotAvailable.code()
        );
    }

    fn step(
        share: &ShareContext,
        epoch: i32,
        add: &[(uuid::Uuid, i32)],
        forget: &[(uuid::Uuid, i32)],
    ) -> Result<Vec<(uuid::Uuid, i32)>, ResponseError> {
        Context::session_step(share, "g", "m", epoch, add, forget).map(|s| match s {
            SessionStep::Fetch(p) => p,
            SessionStep::Close(_) => Vec::new(),
        })
    }

    #[test]
    fn a_groups_configs_make_its_settings_over_the_flags() {
        let share = ctx();
        let none = group_config::GroupConfigs::default();
        let unset = share.apply(&none, "g");
        let flags = ShareSettings::default();
        assert_eq!(
            (
                unset.reset,
                unset.heartbeat_interval_ms,
                unset.session_timeout_ms
            ),
            (flags.reset, None, None)
        );
        assert_eq!(unset.lock_duration_ms, flags.lock_duration_ms);
        let set = group_config::GroupConfigs::from_described([
            (group_config::SHARE_AUTO_OFFSET_RESET, "by_duration:PT1H"),
            (group_config::SHARE_HEARTBEAT_INTERVAL_MS, "6000"),
            (group_config::SHARE_SESSION_TIMEOUT_MS, "50000"),
            (group_config::SHARE_RECORD_LOCK_DURATION_MS, "15000"),
        ]);
        let s = share.apply(&set, "g");
        assert_eq!(s.reset, AutoOffsetReset::ByDuration(3_600_000));
        assert_eq!(s.heartbeat_interval_ms, Some(6_000));
        assert_eq!(s.session_timeout_ms, Some(50_000));
        assert_eq!(s.lock_duration_ms, 15_000);
    }

    #[test]
    fn a_groups_floe_filter_travels_in_its_settings() {
        use floe_metadata::group_config::{FLOE_FILTER, GroupConfigs};
        let share = ctx();
        let mut configs = GroupConfigs::default();
        assert_eq!(share.apply(&configs, "g").filter, None);
        let set = [(FLOE_FILTER.to_owned(), "TagA || k=v".to_owned())].into();
        configs.alter(&set, &[]).unwrap();
        let s = share.apply(&configs, "g");
        assert_eq!(s.filter.unwrap().to_string(), "TagA || k=v");
        // `*` is no filter at all.
        let set = [(FLOE_FILTER.to_owned(), "*".to_owned())].into();
        configs.alter(&set, &[]).unwrap();
        assert_eq!(share.apply(&configs, "g").filter, None);
    }

    #[test]
    fn share_apis_are_listed_and_decoded_only_with_share_groups() {
        let on = |share| crate::handlers::Optional {
            transactions: false,
            share,
        };
        let keys = |share| -> Vec<i16> {
            crate::handlers::api_versions_with(0, on(share))
                .api_keys
                .iter()
                .map(|k| k.api_key)
                .collect()
        };
        for (key, min, _) in SHARE_SUPPORTED {
            assert!(!keys(false).contains(&(*key as i16)));
            assert!(keys(true).contains(&(*key as i16)));
            assert!(!decodable(*key, *min));
            assert!(crate::handlers::decodable_with(*key, *min, on(true)));
        }
    }

    #[test]
    fn share_session_epochs_follow_kip_932() {
        let share = ctx();
        let (t, u) = (uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2));
        // No session yet: only epoch 0 opens one.
        assert_eq!(
            step(&share, 1, &[], &[]),
            Err(ResponseError::ShareSessionNotFound)
        );
        assert_eq!(step(&share, 0, &[(t, 0)], &[]), Ok(vec![(t, 0)]));
        // The next epoch is 1; a repeated or skipped one is refused.
        assert_eq!(
            step(&share, 2, &[], &[]),
            Err(ResponseError::InvalidShareSessionEpoch)
        );
        assert_eq!(step(&share, 1, &[(u, 3)], &[]), Ok(vec![(t, 0), (u, 3)]));
        assert_eq!(
            step(&share, 1, &[], &[]),
            Err(ResponseError::InvalidShareSessionEpoch)
        );
        assert_eq!(step(&share, 2, &[], &[(t, 0)]), Ok(vec![(u, 3)]));
        // −1 closes it; then it is gone.
        assert_eq!(step(&share, -1, &[], &[]), Ok(vec![]));
        assert_eq!(
            step(&share, -1, &[], &[]),
            Err(ResponseError::ShareSessionNotFound)
        );
        assert_eq!(
            step(&share, 3, &[], &[]),
            Err(ResponseError::ShareSessionNotFound)
        );
    }

    #[test]
    fn a_groups_backoff_and_dead_letter_topic_go_with_its_calls() {
        use floe_metadata::group_config::GroupConfigs;

        let share = ctx();
        let none = share.apply(&GroupConfigs::default(), "g");
        assert_eq!(
            none.backoff,
            Backoff {
                base_ms: 0,
                max_ms: 600_000
            }
        );
        assert_eq!(none.dead_letter_topic, None);
        let set = GroupConfigs::from_described([
            ("floe.retry.backoff.base.ms", "200"),
            ("floe.retry.backoff.max.ms", "5000"),
            ("floe.dlq.topic", "orders-dlq"),
        ]);
        let s = share.apply(&set, "g");
        assert_eq!(
            s.backoff,
            Backoff {
                base_ms: 200,
                max_ms: 5_000
            }
        );
        assert_eq!(s.dead_letter_topic.as_deref(), Some("orders-dlq"));
    }
}
