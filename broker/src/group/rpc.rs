//! Consumer-group calls over the internal RPC (protobuf over HTTP/2), so a
//! proxy can reach the coordinator of a group whose shard another broker
//! owns: the server's handlers and [`RemoteBroker`]'s implementation of
//! [`Coordinator`]. The broker answers only for shards it owns
//! (NOT_COORDINATOR otherwise). Errors travel as Kafka's group error codes.

use std::time::Duration;

use super::Coordinator;
use crate::group::assignor::Assignment;
use crate::group::consumer::{
    ConsumerGroupDescription, ConsumerHeartbeat, ConsumerHeartbeatAnswer, DescribedConsumer,
};
use crate::group::{
    CommitParams, DescribedMember, GroupDescription, GroupError, GroupListing, GroupState,
    GroupType, JoinMember, JoinParams, JoinResult, OffsetToCommit, SyncParams, SyncResult,
};
use crate::rpc::RemoteBroker;

pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Protocol {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(bytes = "bytes", tag = "2")]
        pub metadata: bytes::Bytes,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Join {
        #[prost(string, tag = "1")]
        pub group_id: String,
        #[prost(string, tag = "2")]
        pub member_id: String,
        #[prost(string, optional, tag = "3")]
        pub group_instance_id: Option<String>,
        #[prost(string, tag = "4")]
        pub client_id: String,
        #[prost(string, tag = "5")]
        pub client_host: String,
        #[prost(int32, tag = "6")]
        pub session_timeout_ms: i32,
        #[prost(int32, tag = "7")]
        pub rebalance_timeout_ms: i32,
        #[prost(string, tag = "8")]
        pub protocol_type: String,
        #[prost(message, repeated, tag = "9")]
        pub protocols: Vec<Protocol>,
        #[prost(bool, tag = "10")]
        pub require_known_member_id: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Member {
        #[prost(string, tag = "1")]
        pub member_id: String,
        #[prost(string, optional, tag = "2")]
        pub group_instance_id: Option<String>,
        #[prost(bytes = "bytes", tag = "3")]
        pub metadata: bytes::Bytes,
        #[prost(string, tag = "4")]
        pub client_id: String,
        #[prost(string, tag = "5")]
        pub client_host: String,
        #[prost(bytes = "bytes", tag = "6")]
        pub assignment: bytes::Bytes,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct JoinReply {
        #[prost(int32, tag = "1")]
        pub error: i32,
        #[prost(int32, tag = "2")]
        pub generation_id: i32,
        #[prost(string, optional, tag = "3")]
        pub protocol_type: Option<String>,
        #[prost(string, optional, tag = "4")]
        pub protocol_name: Option<String>,
        #[prost(string, tag = "5")]
        pub leader_id: String,
        #[prost(string, tag = "6")]
        pub member_id: String,
        #[prost(message, repeated, tag = "7")]
        pub members: Vec<Member>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Assignment {
        #[prost(string, tag = "1")]
        pub member_id: String,
        #[prost(bytes = "bytes", tag = "2")]
        pub assignment: bytes::Bytes,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sync {
        #[prost(string, tag = "1")]
        pub group_id: String,
        #[prost(int32, tag = "2")]
        pub generation_id: i32,
        #[prost(string, tag = "3")]
        pub member_id: String,
        #[prost(string, optional, tag = "4")]
        pub group_instance_id: Option<String>,
        #[prost(string, optional, tag = "5")]
        pub protocol_type: Option<String>,
        #[prost(string, optional, tag = "6")]
        pub protocol_name: Option<String>,
        #[prost(message, repeated, tag = "7")]
        pub assignments: Vec<Assignment>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SyncReply {
        #[prost(int32, tag = "1")]
        pub error: i32,
        #[prost(string, optional, tag = "2")]
        pub protocol_type: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub protocol_name: Option<String>,
        #[prost(bytes = "bytes", tag = "4")]
        pub assignment: bytes::Bytes,
    }

    /// One partition's offset in a [`Commit`]: the metadata API's message
    /// (the same fields the coordinator stores).
    pub use floe_metadata::api::proto::GroupOffset as Offset;

    /// An OffsetCommit; answered by an [`ErrorReply`] with one code per
    /// offset in `per_member`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Commit {
        #[prost(string, tag = "1")]
        pub group_id: String,
        #[prost(int32, tag = "2")]
        pub generation_id: i32,
        #[prost(string, tag = "3")]
        pub member_id: String,
        #[prost(string, optional, tag = "4")]
        pub group_instance_id: Option<String>,
        #[prost(message, repeated, tag = "5")]
        pub offsets: Vec<Offset>,
    }

    /// A heartbeat's member identity.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct MemberCall {
        #[prost(string, tag = "1")]
        pub group_id: String,
        #[prost(int32, tag = "2")]
        pub generation_id: i32,
        #[prost(string, tag = "3")]
        pub member_id: String,
        #[prost(string, optional, tag = "4")]
        pub group_instance_id: Option<String>,
        /// "heartbeat".
        #[prost(string, tag = "5")]
        pub op: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ErrorReply {
        #[prost(int32, tag = "1")]
        pub error: i32,
        #[prost(int32, repeated, tag = "2")]
        pub per_member: Vec<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Leave {
        #[prost(string, tag = "1")]
        pub group_id: String,
        #[prost(message, repeated, tag = "2")]
        pub members: Vec<Member>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct GroupIds {
        #[prost(string, repeated, tag = "1")]
        pub group_ids: Vec<String>,
        /// For ListGroups: the states to keep (empty: all).
        #[prost(string, repeated, tag = "2")]
        pub states: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Description {
        #[prost(int32, tag = "1")]
        pub error: i32,
        #[prost(string, tag = "2")]
        pub group_id: String,
        #[prost(string, tag = "3")]
        pub state: String,
        #[prost(string, tag = "4")]
        pub protocol_type: String,
        #[prost(string, tag = "5")]
        pub protocol_data: String,
        #[prost(message, repeated, tag = "6")]
        pub members: Vec<Member>,
        /// ListGroups: `classic` or `consumer` (empty: classic).
        #[prost(string, tag = "7")]
        pub group_type: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Descriptions {
        #[prost(message, repeated, tag = "1")]
        pub groups: Vec<Description>,
    }

    /// Partitions of one topic (a consumer group's assignment).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TopicParts {
        #[prost(bytes = "vec", tag = "1")]
        pub topic_id: Vec<u8>,
        #[prost(int32, repeated, tag = "2")]
        pub partitions: Vec<i32>,
    }

    /// A ConsumerGroupHeartbeat (KIP-848). `has_*` tell a null list from
    /// an empty one.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ConsumerBeat {
        #[prost(string, tag = "1")]
        pub group_id: String,
        #[prost(string, tag = "2")]
        pub member_id: String,
        #[prost(int32, tag = "3")]
        pub member_epoch: i32,
        #[prost(string, optional, tag = "4")]
        pub instance_id: Option<String>,
        #[prost(string, optional, tag = "5")]
        pub rack_id: Option<String>,
        #[prost(int32, tag = "6")]
        pub rebalance_timeout_ms: i32,
        #[prost(bool, tag = "7")]
        pub has_topic_names: bool,
        #[prost(string, repeated, tag = "8")]
        pub topic_names: Vec<String>,
        #[prost(string, optional, tag = "9")]
        pub topic_regex: Option<String>,
        #[prost(string, optional, tag = "10")]
        pub server_assignor: Option<String>,
        #[prost(bool, tag = "11")]
        pub has_owned: bool,
        #[prost(message, repeated, tag = "12")]
        pub owned: Vec<TopicParts>,
        #[prost(string, tag = "13")]
        pub client_id: String,
        #[prost(string, tag = "14")]
        pub client_host: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ConsumerBeatReply {
        #[prost(int32, tag = "1")]
        pub error: i32,
        #[prost(string, tag = "2")]
        pub member_id: String,
        #[prost(int32, tag = "3")]
        pub member_epoch: i32,
        #[prost(int32, tag = "4")]
        pub heartbeat_interval_ms: i32,
        #[prost(bool, tag = "5")]
        pub has_assignment: bool,
        #[prost(message, repeated, tag = "6")]
        pub assignment: Vec<TopicParts>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ConsumerMember {
        #[prost(string, tag = "1")]
        pub member_id: String,
        #[prost(string, optional, tag = "2")]
        pub instance_id: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub rack_id: Option<String>,
        #[prost(int32, tag = "4")]
        pub member_epoch: i32,
        #[prost(string, tag = "5")]
        pub client_id: String,
        #[prost(string, tag = "6")]
        pub client_host: String,
        #[prost(string, repeated, tag = "7")]
        pub topic_names: Vec<String>,
        #[prost(message, repeated, tag = "8")]
        pub assignment: Vec<TopicParts>,
        #[prost(message, repeated, tag = "9")]
        pub target: Vec<TopicParts>,
    }

    /// ConsumerGroupDescribe of one group.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ConsumerDescription {
        #[prost(int32, tag = "1")]
        pub error: i32,
        #[prost(string, tag = "2")]
        pub group_id: String,
        #[prost(string, tag = "3")]
        pub state: String,
        #[prost(int32, tag = "4")]
        pub group_epoch: i32,
        #[prost(int32, tag = "5")]
        pub assignment_epoch: i32,
        #[prost(string, tag = "6")]
        pub assignor: String,
        #[prost(message, repeated, tag = "7")]
        pub members: Vec<ConsumerMember>,
    }
}

const ALL_ERRORS: [GroupError; 22] = [
    GroupError::GroupSubscribedToTopic,
    GroupError::FencedMemberEpoch,
    GroupError::StaleMemberEpoch,
    GroupError::UnreleasedInstanceId,
    GroupError::UnsupportedAssignor,
    GroupError::InvalidRequest("refused by the coordinator"),
    GroupError::CoordinatorNotAvailable,
    GroupError::OffsetMetadataTooLarge,
    GroupError::UnknownTopicOrPartition,
    GroupError::NotCoordinator,
    GroupError::CoordinatorLoadInProgress,
    GroupError::UnknownMemberId,
    GroupError::IllegalGeneration,
    GroupError::RebalanceInProgress,
    GroupError::InconsistentGroupProtocol,
    GroupError::MemberIdRequired,
    GroupError::FencedInstanceId,
    GroupError::InvalidSessionTimeout,
    GroupError::NonEmptyGroup,
    GroupError::GroupIdNotFound,
    GroupError::InvalidGroupId,
    GroupError::UnknownServerError,
];

fn to_code(e: Option<GroupError>) -> i32 {
    e.map_or(0, |e| i32::from(e.kafka_code()))
}

/// The reply to a request with one result per item (offsets committed or
/// deleted, members leaving), or a request-wide error.
fn per_item_reply(answer: Result<Vec<Result<(), GroupError>>, GroupError>) -> proto::ErrorReply {
    match answer {
        Err(e) => proto::ErrorReply {
            error: to_code(Some(e)),
            per_member: vec![],
        },
        Ok(per) => proto::ErrorReply {
            error: 0,
            per_member: per.into_iter().map(|x| to_code(x.err())).collect(),
        },
    }
}

/// The answer to a request with one result per item (members leaving,
/// offsets committed): an unreachable coordinator is NOT_COORDINATOR, a
/// request-wide error fails the whole, and `expected` (when known) is how
/// many item results there must be.
fn per_item_results<E>(
    reply: Result<proto::ErrorReply, E>,
    expected: Option<usize>,
) -> Result<Vec<Result<(), GroupError>>, GroupError> {
    let reply = reply.map_err(|_| GroupError::NotCoordinator)?;
    if let Some(err) = from_code(reply.error) {
        return Err(err);
    }
    if expected.is_some_and(|n| n != reply.per_member.len()) {
        return Err(GroupError::UnknownServerError);
    }
    Ok(reply
        .per_member
        .into_iter()
        .map(|c| from_code(c).map_or(Ok(()), Err))
        .collect())
}

fn from_code(c: i32) -> Option<GroupError> {
    if c == 0 {
        return None;
    }
    Some(
        ALL_ERRORS
            .into_iter()
            .find(|e| i32::from(e.kafka_code()) == c)
            .unwrap_or(GroupError::UnknownServerError),
    )
}

fn state_from(s: &str) -> GroupState {
    [
        GroupState::Empty,
        GroupState::PreparingRebalance,
        GroupState::CompletingRebalance,
        GroupState::Stable,
        GroupState::Dead,
    ]
    .into_iter()
    .find(|x| x.as_str() == s)
    .unwrap_or(GroupState::Dead)
}

fn member_msg(m: &DescribedMember) -> proto::Member {
    proto::Member {
        member_id: m.member_id.clone(),
        group_instance_id: m.group_instance_id.clone(),
        metadata: m.metadata.clone(),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        assignment: m.assignment.clone(),
    }
}

fn description_msg(d: GroupDescription) -> proto::Description {
    proto::Description {
        error: to_code(d.error),
        group_id: d.group_id,
        state: d.state.as_str().to_string(),
        protocol_type: d.protocol_type,
        protocol_data: d.protocol_data,
        members: d.members.iter().map(member_msg).collect(),
        group_type: String::new(),
    }
}

fn description_from(d: proto::Description) -> GroupDescription {
    GroupDescription {
        error: from_code(d.error),
        group_id: d.group_id,
        state: state_from(&d.state),
        protocol_type: d.protocol_type,
        protocol_data: d.protocol_data,
        members: d
            .members
            .into_iter()
            .map(|m| DescribedMember {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                metadata: m.metadata,
                assignment: m.assignment,
            })
            .collect(),
    }
}

fn join_params(r: proto::Join) -> JoinParams {
    JoinParams {
        group_id: r.group_id,
        member_id: r.member_id,
        group_instance_id: r.group_instance_id,
        client_id: r.client_id,
        client_host: r.client_host,
        session_timeout_ms: r.session_timeout_ms,
        rebalance_timeout_ms: r.rebalance_timeout_ms,
        protocol_type: r.protocol_type,
        protocols: r
            .protocols
            .into_iter()
            .map(|p| (p.name, p.metadata))
            .collect(),
        require_known_member_id: r.require_known_member_id,
    }
}

fn join_msg(p: JoinParams) -> proto::Join {
    proto::Join {
        group_id: p.group_id,
        member_id: p.member_id,
        group_instance_id: p.group_instance_id,
        client_id: p.client_id,
        client_host: p.client_host,
        session_timeout_ms: p.session_timeout_ms,
        rebalance_timeout_ms: p.rebalance_timeout_ms,
        protocol_type: p.protocol_type,
        protocols: p
            .protocols
            .into_iter()
            .map(|(name, metadata)| proto::Protocol { name, metadata })
            .collect(),
        require_known_member_id: p.require_known_member_id,
    }
}

fn sync_params(r: proto::Sync) -> SyncParams {
    SyncParams {
        group_id: r.group_id,
        generation_id: r.generation_id,
        member_id: r.member_id,
        group_instance_id: r.group_instance_id,
        protocol_type: r.protocol_type,
        protocol_name: r.protocol_name,
        assignments: r
            .assignments
            .into_iter()
            .map(|a| (a.member_id, a.assignment))
            .collect(),
    }
}

fn sync_msg(p: SyncParams) -> proto::Sync {
    proto::Sync {
        group_id: p.group_id,
        generation_id: p.generation_id,
        member_id: p.member_id,
        group_instance_id: p.group_instance_id,
        protocol_type: p.protocol_type,
        protocol_name: p.protocol_name,
        assignments: p
            .assignments
            .into_iter()
            .map(|(member_id, assignment)| proto::Assignment {
                member_id,
                assignment,
            })
            .collect(),
    }
}

// The server side: each handler calls this broker's `Coordinator`, which
// answers NOT_COORDINATOR for a group whose shard it does not own.

pub(crate) async fn rpc_join(b: impl Coordinator, r: proto::Join) -> proto::JoinReply {
    let result = Coordinator::join_group(&b, join_params(r)).await;
    proto::JoinReply {
        error: to_code(result.error),
        generation_id: result.generation_id,
        protocol_type: result.protocol_type,
        protocol_name: result.protocol_name,
        leader_id: result.leader_id,
        member_id: result.member_id,
        members: result
            .members
            .into_iter()
            .map(|m| proto::Member {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                metadata: m.metadata,
                ..Default::default()
            })
            .collect(),
    }
}

pub(crate) async fn rpc_sync(b: impl Coordinator, r: proto::Sync) -> proto::SyncReply {
    let result = Coordinator::sync_group(&b, sync_params(r)).await;
    proto::SyncReply {
        error: to_code(result.error),
        protocol_type: result.protocol_type,
        protocol_name: result.protocol_name,
        assignment: result.assignment,
    }
}

const HEARTBEAT: &str = "heartbeat";

pub(crate) async fn rpc_commit(b: impl Coordinator, r: proto::Commit) -> proto::ErrorReply {
    let params = CommitParams {
        group_id: r.group_id,
        generation_id: r.generation_id,
        member_id: r.member_id,
        group_instance_id: r.group_instance_id,
        offsets: r
            .offsets
            .into_iter()
            .map(|o| OffsetToCommit {
                topic: o.topic,
                partition: o.partition,
                offset: o.offset,
                leader_epoch: o.leader_epoch,
                metadata: o.metadata,
            })
            .collect(),
    };
    per_item_reply(Coordinator::commit_offsets(&b, params).await)
}

pub(crate) async fn rpc_member(b: impl Coordinator, r: proto::MemberCall) -> proto::ErrorReply {
    let (g, generation, m, i) = (
        r.group_id.as_str(),
        r.generation_id,
        r.member_id.as_str(),
        r.group_instance_id.as_deref(),
    );
    let res = match r.op.as_str() {
        HEARTBEAT => Coordinator::heartbeat(&b, g, generation, m, i).await,
        _ => Err(GroupError::UnknownServerError),
    };
    proto::ErrorReply {
        error: to_code(res.err()),
        per_member: vec![],
    }
}

pub(crate) async fn rpc_leave(b: impl Coordinator, r: proto::Leave) -> proto::ErrorReply {
    let members: Vec<(String, Option<String>)> = r
        .members
        .into_iter()
        .map(|m| (m.member_id, m.group_instance_id))
        .collect();
    per_item_reply(Coordinator::leave_group(&b, &r.group_id, &members).await)
}

pub(crate) async fn rpc_describe(b: impl Coordinator, r: proto::GroupIds) -> proto::Descriptions {
    let mut groups = Vec::with_capacity(r.group_ids.len());
    for g in &r.group_ids {
        groups.push(description_msg(Coordinator::describe_group(&b, g).await));
    }
    proto::Descriptions { groups }
}

pub(crate) async fn rpc_list(b: impl Coordinator, r: proto::GroupIds) -> proto::Descriptions {
    let groups = Coordinator::list_groups(&b, &r.states)
        .await
        .into_iter()
        .map(|l| proto::Description {
            group_id: l.group_id,
            state: l.state,
            protocol_type: l.protocol_type,
            group_type: l.group_type.as_str().to_string(),
            ..Default::default()
        })
        .collect();
    proto::Descriptions { groups }
}

pub(crate) async fn rpc_delete_offsets(b: impl Coordinator, r: proto::Commit) -> proto::ErrorReply {
    let partitions: Vec<(String, u32)> = r
        .offsets
        .into_iter()
        .map(|o| (o.topic, o.partition))
        .collect();
    per_item_reply(Coordinator::delete_offsets(&b, &r.group_id, &partitions).await)
}

pub(crate) async fn rpc_delete(b: impl Coordinator, r: proto::GroupIds) -> proto::ErrorReply {
    let mut per = Vec::with_capacity(r.group_ids.len());
    for g in &r.group_ids {
        per.push(to_code(Coordinator::delete_group(&b, g).await.err()));
    }
    proto::ErrorReply {
        error: 0,
        per_member: per,
    }
}

fn parts_msg(a: &Assignment) -> Vec<proto::TopicParts> {
    a.iter()
        .map(|(t, ps)| proto::TopicParts {
            topic_id: t.0.as_bytes().to_vec(),
            partitions: ps.iter().copied().collect(),
        })
        .collect()
}

fn parts_from(v: Vec<proto::TopicParts>) -> Assignment {
    v.into_iter()
        .filter_map(|t| {
            let id = uuid::Uuid::from_slice(&t.topic_id).ok()?;
            Some((floe_types::TopicId(id), t.partitions.into_iter().collect()))
        })
        .collect()
}

fn beat_msg(hb: ConsumerHeartbeat) -> proto::ConsumerBeat {
    proto::ConsumerBeat {
        group_id: hb.group_id,
        member_id: hb.member_id,
        member_epoch: hb.member_epoch,
        instance_id: hb.instance_id,
        rack_id: hb.rack_id,
        rebalance_timeout_ms: hb.rebalance_timeout_ms,
        has_topic_names: hb.subscribed_topic_names.is_some(),
        topic_names: hb.subscribed_topic_names.unwrap_or_default(),
        topic_regex: hb.subscribed_topic_regex,
        server_assignor: hb.server_assignor,
        has_owned: hb.owned.is_some(),
        owned: hb.owned.as_ref().map(parts_msg).unwrap_or_default(),
        client_id: hb.client_id,
        client_host: hb.client_host,
    }
}

fn beat_from(r: proto::ConsumerBeat) -> ConsumerHeartbeat {
    ConsumerHeartbeat {
        group_id: r.group_id,
        member_id: r.member_id,
        member_epoch: r.member_epoch,
        instance_id: r.instance_id,
        rack_id: r.rack_id,
        rebalance_timeout_ms: r.rebalance_timeout_ms,
        subscribed_topic_names: r.has_topic_names.then_some(r.topic_names),
        subscribed_topic_regex: r.topic_regex,
        server_assignor: r.server_assignor,
        owned: r.has_owned.then(|| parts_from(r.owned)),
        client_id: r.client_id,
        client_host: r.client_host,
    }
}

pub(crate) async fn rpc_consumer_beat(
    b: impl Coordinator,
    r: proto::ConsumerBeat,
) -> proto::ConsumerBeatReply {
    match Coordinator::consumer_heartbeat(&b, beat_from(r)).await {
        Err(e) => proto::ConsumerBeatReply {
            error: to_code(Some(e)),
            ..Default::default()
        },
        Ok(a) => proto::ConsumerBeatReply {
            error: 0,
            member_id: a.member_id,
            member_epoch: a.member_epoch,
            heartbeat_interval_ms: a.heartbeat_interval_ms,
            has_assignment: a.assignment.is_some(),
            assignment: a.assignment.as_ref().map(parts_msg).unwrap_or_default(),
        },
    }
}

pub(crate) async fn rpc_consumer_describe(
    b: impl Coordinator,
    r: proto::GroupIds,
) -> proto::ConsumerDescription {
    let id = r.group_ids.into_iter().next().unwrap_or_default();
    match Coordinator::consumer_describe(&b, &id).await {
        Err(e) => proto::ConsumerDescription {
            error: to_code(Some(e)),
            group_id: id,
            ..Default::default()
        },
        Ok(d) => proto::ConsumerDescription {
            error: 0,
            group_id: d.group_id,
            state: d.state,
            group_epoch: d.group_epoch,
            assignment_epoch: d.assignment_epoch,
            assignor: d.assignor_name,
            members: d
                .members
                .into_iter()
                .map(|m| proto::ConsumerMember {
                    member_id: m.member_id,
                    instance_id: m.instance_id,
                    rack_id: m.rack_id,
                    member_epoch: m.member_epoch,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    topic_names: m.subscribed_topic_names,
                    assignment: parts_msg(&m.assignment),
                    target: parts_msg(&m.target_assignment),
                })
                .collect(),
        },
    }
}

// The client side: a coordinator in another process. A call that does not
// reach it is answered NOT_COORDINATOR (the client finds the coordinator
// again).

const MEMBER_CALL_TIMEOUT: Duration = Duration::from_secs(10);
const SYNC_TIMEOUT: Duration = Duration::from_secs(330);

impl RemoteBroker {
    async fn member_call(
        &self,
        op: &str,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        let msg = proto::MemberCall {
            group_id: group_id.to_string(),
            generation_id,
            member_id: member_id.to_string(),
            group_instance_id: group_instance_id.map(str::to_string),
            op: op.to_string(),
        };
        match self
            .call_timeout::<routes::GroupMember>(msg, MEMBER_CALL_TIMEOUT)
            .await
        {
            Err(_) => Err(GroupError::NotCoordinator),
            Ok(e) => from_code(e.error).map_or(Ok(()), Err),
        }
    }
}

#[async_trait::async_trait]
impl Coordinator for RemoteBroker {
    async fn join_group(&self, p: JoinParams) -> JoinResult {
        let member = p.member_id.clone();
        // A join may wait for a whole rebalance.
        let timeout =
            Duration::from_millis(u64::try_from(p.rebalance_timeout_ms.max(0)).unwrap_or(0))
                + Duration::from_secs(30);
        match self
            .call_timeout::<routes::GroupJoin>(join_msg(p), timeout)
            .await
        {
            Err(_) => JoinResult::failed(member, GroupError::NotCoordinator),
            Ok(j) => JoinResult {
                error: from_code(j.error),
                generation_id: j.generation_id,
                protocol_type: j.protocol_type,
                protocol_name: j.protocol_name,
                leader_id: j.leader_id,
                member_id: j.member_id,
                members: j
                    .members
                    .into_iter()
                    .map(|m| JoinMember {
                        member_id: m.member_id,
                        group_instance_id: m.group_instance_id,
                        metadata: m.metadata,
                    })
                    .collect(),
                skip_assignment: false,
            },
        }
    }

    async fn sync_group(&self, p: SyncParams) -> SyncResult {
        match self
            .call_timeout::<routes::GroupSync>(sync_msg(p), SYNC_TIMEOUT)
            .await
        {
            Err(_) => SyncResult::failed(GroupError::NotCoordinator),
            Ok(s) => SyncResult {
                error: from_code(s.error),
                protocol_type: s.protocol_type,
                protocol_name: s.protocol_name,
                assignment: s.assignment,
            },
        }
    }

    async fn heartbeat(
        &self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        self.member_call(
            HEARTBEAT,
            group_id,
            generation_id,
            member_id,
            group_instance_id,
        )
        .await
    }

    async fn commit_offsets(
        &self,
        p: CommitParams,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let n = p.offsets.len();
        let msg = proto::Commit {
            group_id: p.group_id,
            generation_id: p.generation_id,
            member_id: p.member_id,
            group_instance_id: p.group_instance_id,
            offsets: p
                .offsets
                .into_iter()
                .map(|o| proto::Offset {
                    topic: o.topic,
                    partition: o.partition,
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                    metadata: o.metadata,
                })
                .collect(),
        };
        let reply = self
            .call_timeout::<routes::GroupCommit>(msg, MEMBER_CALL_TIMEOUT)
            .await;
        per_item_results(reply, Some(n))
    }

    async fn leave_group(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let msg = proto::Leave {
            group_id: group_id.to_string(),
            members: members
                .iter()
                .map(|(m, i)| proto::Member {
                    member_id: m.clone(),
                    group_instance_id: i.clone(),
                    ..Default::default()
                })
                .collect(),
        };
        let reply = self
            .call_timeout::<routes::GroupLeave>(msg, MEMBER_CALL_TIMEOUT)
            .await;
        per_item_results(reply, None)
    }

    async fn describe_group(&self, group_id: &str) -> GroupDescription {
        let msg = proto::GroupIds {
            group_ids: vec![group_id.to_string()],
            states: vec![],
        };
        match self
            .call_timeout::<routes::GroupDescribe>(msg, MEMBER_CALL_TIMEOUT)
            .await
            .ok()
            .and_then(|d| d.groups.into_iter().next())
        {
            Some(d) => description_from(d),
            None => GroupDescription::failed(GroupError::NotCoordinator, group_id),
        }
    }

    async fn delete_group(&self, group_id: &str) -> Result<(), GroupError> {
        let msg = proto::GroupIds {
            group_ids: vec![group_id.to_string()],
            states: vec![],
        };
        match self
            .call_timeout::<routes::GroupDelete>(msg, MEMBER_CALL_TIMEOUT)
            .await
        {
            Err(_) => Err(GroupError::NotCoordinator),
            Ok(e) => e
                .per_member
                .first()
                .and_then(|c| from_code(*c))
                .map_or(Ok(()), Err),
        }
    }

    async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: &[(String, u32)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let msg = proto::Commit {
            group_id: group_id.to_string(),
            generation_id: -1,
            offsets: partitions
                .iter()
                .map(|(topic, partition)| proto::Offset {
                    topic: topic.clone(),
                    partition: *partition,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let reply = self
            .call_timeout::<routes::GroupDeleteOffsets>(msg, MEMBER_CALL_TIMEOUT)
            .await;
        per_item_results(reply, Some(partitions.len()))
    }

    async fn consumer_heartbeat(
        &self,
        hb: ConsumerHeartbeat,
    ) -> Result<ConsumerHeartbeatAnswer, GroupError> {
        let r = self
            .call_timeout::<routes::ConsumerBeat>(beat_msg(hb), MEMBER_CALL_TIMEOUT)
            .await
            .map_err(|_| GroupError::NotCoordinator)?;
        if let Some(e) = from_code(r.error) {
            return Err(e);
        }
        Ok(ConsumerHeartbeatAnswer {
            member_id: r.member_id,
            member_epoch: r.member_epoch,
            heartbeat_interval_ms: r.heartbeat_interval_ms,
            assignment: r.has_assignment.then(|| parts_from(r.assignment)),
        })
    }

    async fn consumer_describe(
        &self,
        group_id: &str,
    ) -> Result<ConsumerGroupDescription, GroupError> {
        let msg = proto::GroupIds {
            group_ids: vec![group_id.to_string()],
            states: vec![],
        };
        let d = self
            .call_timeout::<routes::ConsumerDescribe>(msg, MEMBER_CALL_TIMEOUT)
            .await
            .map_err(|_| GroupError::NotCoordinator)?;
        if let Some(e) = from_code(d.error) {
            return Err(e);
        }
        Ok(ConsumerGroupDescription {
            group_id: d.group_id,
            state: d.state,
            group_epoch: d.group_epoch,
            assignment_epoch: d.assignment_epoch,
            assignor_name: d.assignor,
            members: d
                .members
                .into_iter()
                .map(|m| DescribedConsumer {
                    member_id: m.member_id,
                    instance_id: m.instance_id,
                    rack_id: m.rack_id,
                    member_epoch: m.member_epoch,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    subscribed_topic_names: m.topic_names,
                    assignment: parts_from(m.assignment),
                    target_assignment: parts_from(m.target),
                })
                .collect(),
        })
    }

    /// ListGroups of this broker; none if it cannot be reached.
    async fn list_groups(&self, states: &[String]) -> Vec<GroupListing> {
        let msg = proto::GroupIds {
            group_ids: vec![],
            states: states.to_vec(),
        };
        match self
            .call_timeout::<routes::GroupList>(msg, MEMBER_CALL_TIMEOUT)
            .await
        {
            Err(_) => vec![],
            Ok(d) => d
                .groups
                .into_iter()
                .map(|g| GroupListing {
                    group_id: g.group_id,
                    protocol_type: g.protocol_type,
                    state: g.state,
                    group_type: if g.group_type == GroupType::Consumer.as_str() {
                        GroupType::Consumer
                    } else {
                        GroupType::Classic
                    },
                })
                .collect(),
        }
    }
}

/// The RPC routes of consumer groups.
pub mod routes {
    use super::proto as group;
    use crate::rpc::routes::{Route, routes};

    routes! {
        /// May wait for a whole rebalance.
        GroupJoin = "/rpc/group/join": group::Join => group::JoinReply;
        GroupSync = "/rpc/group/sync": group::Sync => group::SyncReply;
        /// Heartbeat (`MemberCall::op`).
        GroupMember = "/rpc/group/member": group::MemberCall => group::ErrorReply;
        /// OffsetCommit: one code per offset in `per_member`.
        GroupCommit = "/rpc/group/commit": group::Commit => group::ErrorReply;
        GroupLeave = "/rpc/group/leave": group::Leave => group::ErrorReply;
        GroupDescribe = "/rpc/group/describe": group::GroupIds => group::Descriptions;
        GroupList = "/rpc/group/list": group::GroupIds => group::Descriptions;
        /// DeleteGroups: the group's stored state deleted with it.
        GroupDelete = "/rpc/group/delete": group::GroupIds => group::ErrorReply;
        /// OffsetDelete (`Commit` without a member): one code per offset.
        GroupDeleteOffsets = "/rpc/group/delete-offsets": group::Commit => group::ErrorReply;
        /// ConsumerGroupHeartbeat (KIP-848).
        ConsumerBeat = "/rpc/group/consumer-heartbeat": group::ConsumerBeat => group::ConsumerBeatReply;
        /// ConsumerGroupDescribe of the first id.
        ConsumerDescribe = "/rpc/group/consumer-describe": group::GroupIds => group::ConsumerDescription;
    }
}
