//! Share groups over the internal RPC (the routes `/rpc/share/*`): the
//! messages, the server's handlers and [`RemoteBroker`]'s implementation of
//! [`ShareOwner`] and [`ShareCoordinator`] (`super::calls`) for a broker in
//! another process.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floe_metadata::record_filter::RecordFilter;
use floe_types::{Offset, TopicId};

use super::group::{
    Assignment, DescribedShareMember, Heartbeat, HeartbeatAnswer, ShareGroupDescription,
    ShareGroupError, ShareGroupState,
};
use super::node::ShareNode;
use super::partition::{AckBatch, AckType, Acquired, Backoff, MemberId, ShareError};
use super::service::{AutoOffsetReset, ShareFetched, ShareSettings};
use crate::error::{BrokerError, CallError, ErrorKind};
use crate::rpc::{RemoteBroker, from_proto, key_of, part, proto as rpc_proto, to_proto};

pub use super::calls::{ShareCall, ShareCoordinator, ShareOwner};

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
    use floe_storage::PartitionKey;

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
