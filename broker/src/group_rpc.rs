//! Consumer-group calls over the internal RPC (protobuf over HTTP/2), so a
//! proxy can reach the coordinator of a group whose shard another broker
//! owns. The broker answers only for shards it owns (NOT_COORDINATOR
//! otherwise). Errors travel as Kafka's group error codes.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use prost::Message;

use crate::broker::Broker;
use crate::group::{
    DescribedMember, GroupCoordinator, GroupDescription, GroupError, GroupListing, GroupState,
    JoinMember, JoinParams, JoinResult, SyncParams, SyncResult,
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

    /// Heartbeat and offset-commit validation: the same member identity.
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
        /// "heartbeat" or "validate-commit".
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
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Descriptions {
        #[prost(message, repeated, tag = "1")]
        pub groups: Vec<Description>,
    }
}

const ALL_ERRORS: [GroupError; 13] = [
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

fn reply(msg: impl Message) -> Response {
    use axum::response::IntoResponse;
    (
        [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
        msg.encode_to_vec(),
    )
        .into_response()
}

fn bad(e: impl std::fmt::Display) -> Response {
    use axum::response::IntoResponse;
    (axum::http::StatusCode::BAD_REQUEST, e.to_string()).into_response()
}

fn coordinator<'a>(b: &'a Broker, group: &str) -> Result<&'a GroupCoordinator, GroupError> {
    b.coordinator(group, b.view().current().shard_count())
}

pub(crate) async fn rpc_join(State(b): State<Broker>, body: Bytes) -> Response {
    let r = match proto::Join::decode(body) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let result = match coordinator(&b, &r.group_id) {
        Err(e) => JoinResult {
            error: Some(e),
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader_id: String::new(),
            member_id: r.member_id.clone(),
            members: vec![],
            skip_assignment: false,
        },
        Ok(c) => {
            c.join_group(JoinParams {
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
            })
            .await
        }
    };
    reply(proto::JoinReply {
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
    })
}

pub(crate) async fn rpc_sync(State(b): State<Broker>, body: Bytes) -> Response {
    let r = match proto::Sync::decode(body) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let result = match coordinator(&b, &r.group_id) {
        Err(e) => SyncResult {
            error: Some(e),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        },
        Ok(c) => {
            c.sync_group(SyncParams {
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
            })
            .await
        }
    };
    reply(proto::SyncReply {
        error: to_code(result.error),
        protocol_type: result.protocol_type,
        protocol_name: result.protocol_name,
        assignment: result.assignment,
    })
}

pub(crate) async fn rpc_member(State(b): State<Broker>, body: Bytes) -> Response {
    let r = match proto::MemberCall::decode(body) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let res = coordinator(&b, &r.group_id).and_then(|c| match r.op.as_str() {
        "heartbeat" => c.heartbeat(
            &r.group_id,
            r.generation_id,
            &r.member_id,
            r.group_instance_id.as_deref(),
        ),
        "validate-commit" => {
            let v = c.validate_commit(
                &r.group_id,
                r.generation_id,
                &r.member_id,
                r.group_instance_id.as_deref(),
            );
            if v.is_ok() {
                c.set_has_offsets(&r.group_id, true);
            }
            v
        }
        _ => Err(GroupError::UnknownServerError),
    });
    reply(proto::ErrorReply {
        error: to_code(res.err()),
        per_member: vec![],
    })
}

pub(crate) async fn rpc_leave(State(b): State<Broker>, body: Bytes) -> Response {
    let r = match proto::Leave::decode(body) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let members: Vec<(String, Option<String>)> = r
        .members
        .into_iter()
        .map(|m| (m.member_id, m.group_instance_id))
        .collect();
    let res = coordinator(&b, &r.group_id).and_then(|c| c.leave_group(&r.group_id, &members));
    reply(match res {
        Err(e) => proto::ErrorReply {
            error: to_code(Some(e)),
            per_member: vec![],
        },
        Ok(per) => proto::ErrorReply {
            error: 0,
            per_member: per.into_iter().map(|x| to_code(x.err())).collect(),
        },
    })
}

pub(crate) async fn rpc_describe(State(b): State<Broker>, body: Bytes) -> Response {
    let r = match proto::GroupIds::decode(body) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let groups = r
        .group_ids
        .iter()
        .map(|g| match coordinator(&b, g) {
            Ok(c) => description_msg(c.describe_group(g)),
            Err(e) => proto::Description {
                error: to_code(Some(e)),
                group_id: g.clone(),
                ..Default::default()
            },
        })
        .collect();
    reply(proto::Descriptions { groups })
}

pub(crate) async fn rpc_list(State(b): State<Broker>, body: Bytes) -> Response {
    let r = match proto::GroupIds::decode(body) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let groups = b
        .groups()
        .list_groups(&r.states)
        .into_iter()
        .map(|l| proto::Description {
            group_id: l.group_id,
            state: l.state.as_str().to_string(),
            protocol_type: l.protocol_type,
            ..Default::default()
        })
        .collect();
    reply(proto::Descriptions { groups })
}

pub(crate) async fn rpc_delete(State(b): State<Broker>, body: Bytes) -> Response {
    let r = match proto::GroupIds::decode(body) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let per = r
        .group_ids
        .iter()
        .map(|g| match coordinator(&b, g) {
            Err(e) => to_code(Some(e)),
            Ok(c) => match c.delete_groups(std::slice::from_ref(g)).pop() {
                Some((_, Err(e))) => to_code(Some(e)),
                _ => 0,
            },
        })
        .collect();
    reply(proto::ErrorReply {
        error: 0,
        per_member: per,
    })
}

/// A group coordinator: in this process, or a broker reached over the RPC.
#[derive(Debug, Clone)]
pub enum CoordinatorRef<'a> {
    Local(&'a GroupCoordinator),
    Remote(std::sync::Arc<RemoteBroker>),
}

fn unreachable_join(member_id: String) -> JoinResult {
    JoinResult {
        error: Some(GroupError::NotCoordinator),
        generation_id: -1,
        protocol_type: None,
        protocol_name: None,
        leader_id: String::new(),
        member_id,
        members: vec![],
        skip_assignment: false,
    }
}

impl CoordinatorRef<'_> {
    pub async fn join_group(&self, p: JoinParams) -> JoinResult {
        let r = match self {
            CoordinatorRef::Local(c) => return c.join_group(p).await,
            CoordinatorRef::Remote(r) => r,
        };
        let member = p.member_id.clone();
        // A join may wait for a whole rebalance.
        let timeout =
            Duration::from_millis(u64::try_from(p.rebalance_timeout_ms.max(0)).unwrap_or(0))
                + Duration::from_secs(30);
        let msg = proto::Join {
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
        };
        match r
            .call_timeout::<proto::JoinReply>("/rpc/group/join", msg, timeout)
            .await
        {
            Err(_) => unreachable_join(member),
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

    pub async fn sync_group(&self, p: SyncParams) -> SyncResult {
        let r = match self {
            CoordinatorRef::Local(c) => return c.sync_group(p).await,
            CoordinatorRef::Remote(r) => r,
        };
        let msg = proto::Sync {
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
        };
        match r
            .call_timeout::<proto::SyncReply>("/rpc/group/sync", msg, Duration::from_secs(330))
            .await
        {
            Err(_) => SyncResult {
                error: Some(GroupError::NotCoordinator),
                protocol_type: None,
                protocol_name: None,
                assignment: Bytes::new(),
            },
            Ok(s) => SyncResult {
                error: from_code(s.error),
                protocol_type: s.protocol_type,
                protocol_name: s.protocol_name,
                assignment: s.assignment,
            },
        }
    }

    async fn member_call(
        &self,
        op: &str,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        match self {
            CoordinatorRef::Local(c) => match op {
                "heartbeat" => c.heartbeat(group_id, generation_id, member_id, group_instance_id),
                _ => {
                    let v =
                        c.validate_commit(group_id, generation_id, member_id, group_instance_id);
                    if v.is_ok() {
                        c.set_has_offsets(group_id, true);
                    }
                    v
                }
            },
            CoordinatorRef::Remote(r) => {
                let msg = proto::MemberCall {
                    group_id: group_id.to_string(),
                    generation_id,
                    member_id: member_id.to_string(),
                    group_instance_id: group_instance_id.map(str::to_string),
                    op: op.to_string(),
                };
                match r
                    .call_timeout::<proto::ErrorReply>(
                        "/rpc/group/member",
                        msg,
                        Duration::from_secs(10),
                    )
                    .await
                {
                    Err(_) => Err(GroupError::NotCoordinator),
                    Ok(e) => from_code(e.error).map_or(Ok(()), Err),
                }
            }
        }
    }

    pub async fn heartbeat(
        &self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        self.member_call(
            "heartbeat",
            group_id,
            generation_id,
            member_id,
            group_instance_id,
        )
        .await
    }

    pub async fn validate_commit(
        &self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        self.member_call(
            "validate-commit",
            group_id,
            generation_id,
            member_id,
            group_instance_id,
        )
        .await
    }

    pub async fn leave_group(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let r = match self {
            CoordinatorRef::Local(c) => return c.leave_group(group_id, members),
            CoordinatorRef::Remote(r) => r,
        };
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
        match r
            .call_timeout::<proto::ErrorReply>("/rpc/group/leave", msg, Duration::from_secs(10))
            .await
        {
            Err(_) => Err(GroupError::NotCoordinator),
            Ok(e) => match from_code(e.error) {
                Some(err) => Err(err),
                None => Ok(e
                    .per_member
                    .into_iter()
                    .map(|c| from_code(c).map_or(Ok(()), Err))
                    .collect()),
            },
        }
    }

    pub async fn describe_group(&self, group_id: &str) -> GroupDescription {
        let r = match self {
            CoordinatorRef::Local(c) => return c.describe_group(group_id),
            CoordinatorRef::Remote(r) => r,
        };
        let msg = proto::GroupIds {
            group_ids: vec![group_id.to_string()],
            states: vec![],
        };
        match r
            .call_timeout::<proto::Descriptions>(
                "/rpc/group/describe",
                msg,
                Duration::from_secs(10),
            )
            .await
            .ok()
            .and_then(|d| d.groups.into_iter().next())
        {
            Some(d) => description_from(d),
            None => GroupDescription {
                error: Some(GroupError::NotCoordinator),
                group_id: group_id.to_string(),
                state: GroupState::Dead,
                protocol_type: String::new(),
                protocol_data: String::new(),
                members: vec![],
            },
        }
    }

    /// Deletes the group's membership state (the caller deletes its offsets).
    pub async fn delete_group(&self, group_id: &str) -> Result<(), GroupError> {
        let r = match self {
            CoordinatorRef::Local(c) => {
                return match c.delete_groups(&[group_id.to_string()]).pop() {
                    Some((_, Err(e))) => Err(e),
                    _ => Ok(()),
                };
            }
            CoordinatorRef::Remote(r) => r,
        };
        let msg = proto::GroupIds {
            group_ids: vec![group_id.to_string()],
            states: vec![],
        };
        match r
            .call_timeout::<proto::ErrorReply>("/rpc/group/delete", msg, Duration::from_secs(10))
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
}

/// ListGroups of one remote broker.
pub async fn list_remote(r: &RemoteBroker, states: &[String]) -> Vec<GroupListing> {
    let msg = proto::GroupIds {
        group_ids: vec![],
        states: states.to_vec(),
    };
    match r
        .call_timeout::<proto::Descriptions>("/rpc/group/list", msg, Duration::from_secs(10))
        .await
    {
        Err(_) => vec![],
        Ok(d) => d
            .groups
            .into_iter()
            .map(|g| GroupListing {
                group_id: g.group_id,
                protocol_type: g.protocol_type,
                state: state_from(&g.state),
            })
            .collect(),
    }
}
