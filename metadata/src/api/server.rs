//! The metadata node's HTTP server (axum): Raft RPCs between nodes under
//! `/raft/*` (the binary encoding of `raft::codec`, or JSON from a node of
//! an older version, answered in kind), and the protobuf API under `/v1/*`.
//!
//! Sizes: a command whose binary encoding is above `max_command_bytes` is
//! refused before it is proposed (`ErrorKind::TooLarge`), and every body is
//! limited to `max_rpc_bytes` (at least twice the command bound, so one
//! entry always fits in an AppendEntries).
//!
//! Writes go through the Raft leader; a follower answers `421 Misdirected`
//! with the leader's address in [`proto::ErrorBody`], and the client follows.
//! Reads that must be current (`describe`, `index`, group offsets, `watch`)
//! first confirm leadership with a quorum (`ensure_linearizable`); reads
//! that arrive together share one confirmation ([`crate::raft::reads`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use floe_types::version::{InvalidVersion, VERSION, Version, incompatibility};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use prost::Message;

use crate::api::routes::{self, Route};
use crate::api::{PROTOBUF, convert, proto};
use crate::clock::{lease_now_ms, now_ms};
use crate::cluster_tls::{Member, NodeRole, Role};
use crate::command::{
    Command, CommitRange, NewObject, NodeKind, ObjectSel, OwnedItem, Response, ShardFence,
};
use crate::error::{ErrorKind, MetaError};
use crate::http_server::Caller;
use crate::ids::{BrokerId, Epoch, ObjectId, PartitionKey, ShardId};
use crate::raft::codec::{self, Format};
use crate::raft::proposer::Proposer;
use crate::raft::state_machine::SharedState;
use crate::raft::{NodeId, Raft};
use futures::future::BoxFuture;

/// Default largest request body (Raft appends and snapshots included).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;
/// Default largest command, encoded (`--meta-max-command-bytes`).
pub const DEFAULT_MAX_COMMAND_BYTES: usize = 8 * 1024 * 1024;
/// Longest a watch may wait.
pub const MAX_WATCH: Duration = Duration::from_secs(60);

#[derive(Clone)]
pub struct AppState {
    pub id: NodeId,
    pub raft: Raft,
    pub shared: SharedState,
    /// Largest command accepted for proposal, encoded.
    pub max_command_bytes: usize,
    /// Where proposals queue to share log entries (group commit).
    pub proposer: Proposer,
    /// Where linearizable reads queue to share leadership confirmations.
    pub reads: crate::raft::reads::Reads,
    /// Wakes the controller before its next round: a broker registered
    /// (a new broker takes its share without waiting for the round), or
    /// one was found down (its items are placed at once).
    pub controller_wake: std::sync::Arc<tokio::sync::Notify>,
    /// How long a dead node stays on record (`None`: forever), as this
    /// node's controller removes them; told in the node listing.
    pub dead_node_retention_ms: Option<u64>,
}

/// An API failure, sent as a protobuf [`proto::ErrorBody`].
#[derive(Debug)]
pub struct ApiError(pub MetaError);

impl From<MetaError> for ApiError {
    fn from(e: MetaError) -> Self {
        ApiError(e)
    }
}

pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::NotLeader => StatusCode::MISDIRECTED_REQUEST,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Storage => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::UnknownTopic
        | ErrorKind::UnknownPartition
        | ErrorKind::UnknownBroker
        | ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::TopicExists
        | ErrorKind::StaleEpoch
        | ErrorKind::NotOwner
        | ErrorKind::OffsetMismatch
        | ErrorKind::ExportConflict => StatusCode::CONFLICT,
        ErrorKind::InvalidConfig | ErrorKind::InvalidRequest => StatusCode::BAD_REQUEST,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::StaleCoordinator | ErrorKind::Incompatible => StatusCode::CONFLICT,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> HttpResponse {
        let leader_addr = match &self.0 {
            MetaError::NotLeader { leader } => leader.clone().unwrap_or_default(),
            _ => String::new(),
        };
        let body = proto::ErrorBody {
            kind: format!("{:?}", self.0.kind()),
            message: self.0.to_string(),
            leader_addr,
        };
        (
            status_of(self.0.kind()),
            [(header::CONTENT_TYPE, PROTOBUF)],
            body.encode_to_vec(),
        )
            .into_response()
    }
}

pub(super) fn ok<M: Message>(m: M) -> HttpResponse {
    ([(header::CONTENT_TYPE, PROTOBUF)], m.encode_to_vec()).into_response()
}

pub(super) fn decode<M: Message + Default>(body: &Bytes) -> Result<M, ApiError> {
    M::decode(body.as_ref()).map_err(|e| {
        ApiError(MetaError::InvalidRequest(format!(
            "malformed request body: {e}"
        )))
    })
}

pub(crate) fn not_leader<E>(e: &RaftError<NodeId, E>) -> Option<MetaError>
where
    E: std::fmt::Debug + openraft::TryAsRef<openraft::error::ForwardToLeader<NodeId, BasicNode>>,
{
    e.forward_to_leader().map(|f| MetaError::NotLeader {
        leader: f.leader_node.as_ref().map(|n| n.addr.clone()),
    })
}

impl AppState {
    /// Proposes a command and waits until it is committed and applied.
    pub async fn write(&self, cmd: Command) -> Result<(Response, u64), MetaError> {
        let size = crate::raft::codec::encoded_len(&cmd)
            .map_err(|e| MetaError::InvalidRequest(format!("cannot encode the command: {e}")))?;
        if size > self.max_command_bytes {
            crate::metrics::command_too_large();
            tracing::info!(
                size,
                max = self.max_command_bytes,
                "command refused: too large"
            );
            return Err(MetaError::TooLarge {
                size,
                max: self.max_command_bytes,
            });
        }
        let started = std::time::Instant::now();
        let written = self.proposer.propose(cmd, size).await;
        crate::metrics::command_seconds(started.elapsed());
        crate::metrics::command(&written);
        match written? {
            (Response::Error(e), _) => Err(e),
            r => Ok(r),
        }
    }

    /// Confirms with a quorum that this node is still the leader and has
    /// applied everything committed before the call.
    pub async fn linearizable(&self) -> Result<(), MetaError> {
        self.reads.linearizable().await
    }
}

/// How the process renders its metrics (Prometheus text), set once by the
/// binary that installed the recorder ([`set_metrics_render`]).
type Render = Box<dyn Fn() -> String + Send + Sync>;
static METRICS_RENDER: std::sync::OnceLock<Render> = std::sync::OnceLock::new();

/// Makes `/metrics` of the metadata nodes of this process render the
/// process's metrics with `render` (the first call wins).
pub fn set_metrics_render(render: impl Fn() -> String + Send + Sync + 'static) {
    let _ = METRICS_RENDER.set(Box::new(render));
}

/// `/metrics` of a metadata node: the process's metrics in Prometheus
/// text (the node's Raft, commands and reads among them), open like the
/// probes; empty where no recorder was installed.
async fn metrics() -> String {
    METRICS_RENDER.get().map(|r| r()).unwrap_or_default()
}

/// Routes of one metadata node; bodies above `max_body` bytes are answered 413.
pub fn router(state: AppState, max_body: usize) -> Router {
    Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/raft/append", post(raft_append))
        .route("/raft/vote", post(raft_vote))
        .route("/raft/snapshot", post(raft_snapshot))
        .merge(api_routes())
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state)
}

/// `/readyz` of a metadata node (probes): 200 once it knows a leader, 503
/// before (a node that cannot reach a majority does not) and once its Raft
/// stopped on a fatal error (its log could not be written).
async fn readyz(State(s): State<AppState>) -> (StatusCode, &'static str) {
    let metrics = s.raft.metrics();
    let m = metrics.borrow();
    if m.running_state.is_err() {
        (StatusCode::SERVICE_UNAVAILABLE, "raft stopped\n")
    } else if m.current_leader.is_some() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "no leader\n")
    }
}

/// A route this server answers: the typed handler behind its path. The
/// HTTP router and the in-process client both call it.
pub trait Serve: Route {
    fn serve(s: AppState, req: Self::Req) -> BoxFuture<'static, Result<Self::Resp, MetaError>>;
}

/// The HTTP face of a typed handler: decode, check that the caller may
/// send it ([`permitted`]), serve, encode.
async fn handle<R: Serve>(
    State(s): State<AppState>,
    caller: Option<axum::Extension<Caller>>,
    body: Bytes,
) -> Result<HttpResponse, ApiError> {
    let req: R::Req = decode(&body)?;
    if let Some(member) = caller.and_then(|c| c.0.member())
        && let Err(why) = permitted(&s, member, R::PATH, &req)
    {
        return Ok(crate::http_server::forbidden(
            "metadata",
            R::PATH,
            member,
            &why,
        ));
    }
    Ok(ok(R::serve(s, req).await?))
}

/// Whether a member (known by its certificate) may send `req` to `path`:
/// only metadata nodes and admins change the Raft membership; a broker acts
/// only as a broker, and as itself when its certificate names its id; a
/// proxy registers, renews and drains only proxies. Everything else is open
/// to every member.
fn permitted(
    s: &AppState,
    member: Member,
    path: &str,
    req: &(dyn std::any::Any + Send + Sync),
) -> Result<(), String> {
    use routes::Route as _;
    if matches!(member.role, Role::Admin | Role::Metadata) {
        return Ok(());
    }
    if path == routes::AddMember::PATH || path == routes::RemoveMember::PATH {
        return Err("only metadata nodes and admins change the Raft membership".into());
    }
    let as_broker = |id: u32| {
        if member.may_act_as_broker(id) {
            Ok(())
        } else {
            Err(format!("{member} may not act as broker {id}"))
        }
    };
    if let Some(r) = req.downcast_ref::<proto::RegisterRequest>() {
        let kind = match convert::node_kind(&r.kind) {
            Some(NodeKind::Proxy) => NodeRole::Proxy,
            _ => NodeRole::Broker,
        };
        return if member.may_act_as_node(kind, r.id) {
            Ok(())
        } else {
            Err(format!("{member} may not register as {} {}", r.kind, r.id))
        };
    }
    if let Some(r) = req.downcast_ref::<proto::HeartbeatRequest>() {
        let kind = s.shared.read(|st| {
            st.nodes.by_id.get(&BrokerId(r.id)).map(|n| match n.kind {
                NodeKind::Proxy => NodeRole::Proxy,
                NodeKind::Broker => NodeRole::Broker,
            })
        });
        // An unknown node: the handler answers that.
        return match kind {
            Some(kind) if !member.may_act_as_node(kind, r.id) => {
                Err(format!("{member} may not renew or drain node {}", r.id))
            }
            _ => Ok(()),
        };
    }
    let broker = if let Some(r) = req.downcast_ref::<proto::CommitRequest>() {
        Some(r.broker)
    } else if let Some(r) = req.downcast_ref::<proto::ReleaseRequest>() {
        Some(r.broker)
    } else if let Some(r) = req.downcast_ref::<proto::TruncateRequest>() {
        Some(r.broker)
    } else if let Some(r) = req.downcast_ref::<proto::ReplaceRangesRequest>() {
        Some(r.broker)
    } else if let Some(r) = req.downcast_ref::<proto::ShareStateRequest>() {
        Some(r.broker)
    } else if let Some(r) = req.downcast_ref::<proto::ShareForgetRequest>() {
        Some(r.broker)
    } else if let Some(r) = req.downcast_ref::<proto::TxnRequest>() {
        Some(r.broker)
    } else if let Some(r) = req.downcast_ref::<proto::StoreGroupRequest>() {
        Some(r.broker)
    } else if let Some(r) = req.downcast_ref::<proto::CommitOffsetsRequest>() {
        // A delete of offsets decided by no coordinator (0) is a proxy's.
        (path == routes::CommitOffsets::PATH || r.broker != 0).then_some(r.broker)
    } else {
        None
    };
    match broker {
        Some(id) => as_broker(id),
        None => Ok(()),
    }
}

macro_rules! serve {
    ($($route:ident => $f:path,)*) => {
        $(
            impl Serve for routes::$route {
                fn serve(
                    s: AppState,
                    req: Self::Req,
                ) -> BoxFuture<'static, Result<Self::Resp, MetaError>> {
                    Box::pin($f(s, req))
                }
            }
        )*

        /// Every `/v1` route, each at its typed path.
        fn api_routes() -> Router<AppState> {
            Router::new()
                $(.route(routes::$route::PATH, post(handle::<routes::$route>)))*
        }
    };
}

serve! {
    Status => status,
    AddMember => add_member,
    RemoveMember => remove_member,
    CreateTopic => create_topic,
    DeleteTopic => delete_topic,
    AlterTopic => alter_topic,
    CreatePartitions => create_partitions,
    ListTopics => list_topics,
    DescribeTopic => describe_topic,
    Register => register,
    Heartbeat => heartbeat,
    Drain => drain,
    NodeDown => node_down,
    Release => release,
    Commit => commit,
    PartitionIndex => partition_index,
    PartitionIndexes => partition_indexes,
    CommitOffsets => commit_offsets,
    FetchOffsets => fetch_offsets,
    DeleteGroups => delete_groups,
    DeleteOffsets => delete_offsets,
    ProducerIds => producer_ids,
    Watch => watch,
    TruncateLog => truncate_log,
    ReplaceRanges => replace_ranges,
    UnreferencedObjects => unreferenced_objects,
    ForgetObjects => forget_objects,
    UnknownObjects => unknown_objects,
    ExportState => super::export_routes::state,
    ExportBegin => super::export_routes::begin,
    ExportCommit => super::export_routes::commit,
    ExportForget => super::export_routes::forget,
    TxnStep => super::txn_routes::step,
    TxnList => super::txn_routes::list,
    ExportReset => super::export_routes::reset,
    TableState => super::table_routes::state,
    TableColumns => super::table_routes::columns,
    TableCommit => super::table_routes::commit,
    TableCompactBegin => super::table_routes::compact_begin,
    TableCompactCommit => super::table_routes::compact_commit,
    AlterQuotas => super::quota_routes::alter,
    AlterScram => super::scram_routes::alter,
    CreateAcls => super::acl_routes::create,
    DeleteAcls => super::acl_routes::delete,
    GroupConfigs => group_configs,
    AlterGroupConfig => alter_group_config,
    BrokerConfigs => super::broker_config_routes::configs,
    AlterBrokerConfig => super::broker_config_routes::alter,
    ShareState => share_state,
    ShareForget => share_forget,
    StoreGroup => store_group,
    GroupRecords => group_records,
    StoredGroups => stored_groups,
    ListNodes => super::node_routes::list,
}

/// A Raft RPC's answer, in the format its request came in.
fn raft_reply<T: serde::Serialize>(format: Format, v: &T) -> HttpResponse {
    let content_type = match format {
        Format::Binary => crate::raft::network::RAFT_BINARY,
        Format::Json => "application/json",
    };
    match codec::encode_as(format, v) {
        Ok(b) => ([(header::CONTENT_TYPE, content_type)], b).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn raft_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<(Format, T), String> {
    codec::decode(body)
        .map(|v| (Format::of(body), v))
        .map_err(|e| e.to_string())
}

fn bad_body(why: String) -> HttpResponse {
    (StatusCode::BAD_REQUEST, why).into_response()
}

/// Whether node `id` is outside the membership this node knows. A node
/// that knows none yet (the cluster is forming) cannot tell, and says no.
fn stranger(s: &AppState, id: NodeId) -> bool {
    let m = s.raft.metrics().borrow().membership_config.clone();
    let known = m.membership();
    known.nodes().next().is_some() && known.get_node(&id).is_none()
}

/// Whether a Raft message may come from this caller: with internal mTLS,
/// only a metadata node sends them, as itself (the vote's node is its
/// certificate's id); a vote request (`in_membership`) only from a node of
/// the membership this node knows. Appends and snapshots are not held to
/// the membership: a node that joins, or lags behind a change, does not
/// know the leader yet.
fn raft_sender(
    s: &AppState,
    caller: Option<axum::Extension<Caller>>,
    path: &str,
    vote: &openraft::Vote<NodeId>,
    in_membership: bool,
) -> Result<(), Box<HttpResponse>> {
    let Some(member) = caller.and_then(|c| c.0.member()) else {
        return Ok(());
    };
    let sender = vote.leader_id().voted_for();
    let why = if member.role != Role::Metadata {
        Some(format!("{member} is not a metadata node"))
    } else if member.id.map(u64::from) != sender {
        Some(format!(
            "{member} sent a Raft message as node {}",
            sender.map_or_else(|| "?".to_string(), |n| n.to_string())
        ))
    } else if in_membership && stranger(s, sender.unwrap_or_default()) {
        Some(format!("{member} is not in the Raft membership"))
    } else {
        None
    };
    match why {
        Some(why) => Err(Box::new(crate::http_server::forbidden(
            "metadata", path, member, &why,
        ))),
        None => Ok(()),
    }
}

async fn raft_append(
    State(s): State<AppState>,
    caller: Option<axum::Extension<Caller>>,
    body: Bytes,
) -> HttpResponse {
    match raft_body::<openraft::raft::AppendEntriesRequest<crate::raft::TypeConfig>>(&body) {
        Ok((f, req)) => match raft_sender(&s, caller, "/raft/append", &req.vote, false) {
            Ok(()) => raft_reply(f, &s.raft.append_entries(req).await),
            Err(resp) => *resp,
        },
        Err(why) => bad_body(why),
    }
}

async fn raft_vote(
    State(s): State<AppState>,
    caller: Option<axum::Extension<Caller>>,
    body: Bytes,
) -> HttpResponse {
    match raft_body::<openraft::raft::VoteRequest<NodeId>>(&body) {
        Ok((f, req)) => match raft_sender(&s, caller, "/raft/vote", &req.vote, true) {
            Ok(()) => raft_reply(f, &s.raft.vote(req).await),
            Err(resp) => *resp,
        },
        Err(why) => bad_body(why),
    }
}

async fn raft_snapshot(
    State(s): State<AppState>,
    caller: Option<axum::Extension<Caller>>,
    body: Bytes,
) -> HttpResponse {
    match raft_body::<openraft::raft::InstallSnapshotRequest<crate::raft::TypeConfig>>(&body) {
        Ok((f, req)) => match raft_sender(&s, caller, "/raft/snapshot", &req.vote, false) {
            Ok(()) => raft_reply(f, &s.raft.install_snapshot(req).await),
            Err(resp) => *resp,
        },
        Err(why) => bad_body(why),
    }
}

async fn status(s: AppState, _: proto::Empty) -> Result<proto::StatusResponse, MetaError> {
    let m = s.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let leader_addr = m
        .current_leader
        .and_then(|l| membership.get_node(&l).map(|n| n.addr.clone()))
        .unwrap_or_default();
    Ok(proto::StatusResponse {
        node_id: s.id,
        leader_id: m.current_leader.unwrap_or(0),
        leader_addr,
        term: m.current_term,
        members: membership
            .nodes()
            .map(|(id, n)| proto::Member {
                id: *id,
                addr: n.addr.clone(),
                voter: voters.contains(id),
            })
            .collect(),
        last_applied: m.last_applied.map_or(0, |l| l.index),
        last_log_index: m.last_log_index.unwrap_or(0),
        snapshot_index: m.snapshot.map_or(0, |l| l.index),
        state: format!("{:?}", m.state),
    })
}

async fn add_member(s: AppState, req: proto::AddMemberRequest) -> Result<proto::Empty, MetaError> {
    if req.id == 0 || req.addr.is_empty() {
        return Err(MetaError::InvalidRequest(
            "member needs an id above 0 and an address".into(),
        ));
    }
    let map = |e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>| {
        not_leader(&e).unwrap_or_else(|| MetaError::Unavailable(e.to_string()))
    };
    s.raft
        .add_learner(req.id, BasicNode::new(req.addr.clone()), true)
        .await
        .map_err(map)?;
    s.raft
        .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([req.id])), false)
        .await
        .map_err(map)?;
    tracing::info!(member = req.id, addr = %req.addr, "member added");
    Ok(proto::Empty {})
}

async fn remove_member(
    s: AppState,
    req: proto::RemoveMemberRequest,
) -> Result<proto::Empty, MetaError> {
    s.raft
        .change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([req.id])), false)
        .await
        .map_err(|e| not_leader(&e).unwrap_or_else(|| MetaError::Unavailable(e.to_string())))?;
    tracing::info!(member = req.id, "member removed");
    Ok(proto::Empty {})
}

fn map_of(m: std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    m.into_iter().collect()
}

async fn create_topic(
    s: AppState,
    req: proto::CreateTopicRequest,
) -> Result<proto::CreateTopicResponse, MetaError> {
    // A bad name is refused before anything is proposed to Raft.
    crate::state::validate_topic_name(&req.name)?;
    let id = crate::ids::TopicId(uuid::Uuid::new_v4());
    let (resp, _) = s
        .write(Command::CreateTopic {
            name: req.name,
            id,
            partitions: req.partitions,
            config: map_of(req.configs),
        })
        .await?;
    match resp {
        Response::TopicCreated { id } => Ok(proto::CreateTopicResponse {
            topic_id: id.to_string(),
        }),
        other => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

async fn delete_topic(s: AppState, req: proto::TopicName) -> Result<proto::Empty, MetaError> {
    s.write(Command::DeleteTopic { name: req.name }).await?;
    Ok(proto::Empty {})
}

async fn alter_topic(
    s: AppState,
    req: proto::AlterTopicConfigRequest,
) -> Result<proto::Empty, MetaError> {
    s.write(Command::AlterTopicConfig {
        name: req.name,
        set: map_of(req.set),
        delete: req.delete,
    })
    .await?;
    Ok(proto::Empty {})
}

async fn group_configs(
    s: AppState,
    req: proto::GroupConfigsRequest,
) -> Result<proto::GroupConfigsResponse, MetaError> {
    crate::group_config::check_group_id(&req.group)?;
    s.linearizable().await?;
    let set = s.shared.read(|st| {
        st.groups
            .configs
            .get(&req.group)
            .map(|c| c.overrides().clone().into_iter().collect())
            .unwrap_or_default()
    });
    Ok(proto::GroupConfigsResponse { set })
}

async fn alter_group_config(
    s: AppState,
    req: proto::AlterGroupConfigRequest,
) -> Result<proto::Empty, MetaError> {
    s.write(Command::AlterGroupConfig {
        group: req.group,
        set: map_of(req.set),
        delete: req.delete,
    })
    .await?;
    Ok(proto::Empty {})
}

async fn create_partitions(
    s: AppState,
    req: proto::CreatePartitionsRequest,
) -> Result<proto::Empty, MetaError> {
    s.write(Command::CreatePartitions {
        name: req.name,
        total: req.total,
    })
    .await?;
    Ok(proto::Empty {})
}

async fn list_topics(s: AppState, _: proto::Empty) -> Result<proto::ListTopicsResponse, MetaError> {
    s.linearizable().await?;
    Ok(s.shared.read(|st| proto::ListTopicsResponse {
        topics: st
            .topics
            .by_name
            .values()
            .map(|t| convert::topic_info(st, t, false))
            .collect(),
    }))
}

async fn describe_topic(s: AppState, req: proto::TopicName) -> Result<proto::TopicInfo, MetaError> {
    s.linearizable().await?;
    s.shared
        .read(|st| {
            st.topics
                .by_name
                .get(&req.name)
                .map(|t| convert::topic_info(st, t, true))
        })
        .ok_or(MetaError::UnknownTopic(req.name))
}

async fn register(
    s: AppState,
    req: proto::RegisterRequest,
) -> Result<proto::RegisterResponse, MetaError> {
    let kind = convert::node_kind(&req.kind).ok_or_else(|| {
        MetaError::InvalidRequest(format!("node kind {:?}: broker or proxy", req.kind))
    })?;
    // A node may leave its id to the metadata (0).
    if req.lease_ms == 0 {
        return Err(MetaError::InvalidRequest("lease must be above 0".into()));
    }
    check_version(&req.version, &req.kind)?;
    match s
        .write(Command::RegisterNode {
            id: BrokerId(req.id),
            kind,
            addr: req.addr,
            now_ms: lease_now_ms(),
            lease_ms: req.lease_ms,
        })
        .await?
    {
        (Response::Registered { id }, _) => {
            if kind == NodeKind::Broker {
                s.controller_wake.notify_one();
            }
            Ok(proto::RegisterResponse {
                id: id.0,
                version: VERSION.to_string(),
            })
        }
        (other, _) => Err(MetaError::Unavailable(format!(
            "unexpected answer to a registration: {other:?}"
        ))),
    }
}

/// Refuses a node whose version may not work beside this metadata node's
/// (`floe_types::version::incompatibility`). A node that says no version
/// is of 0.1.0, from before versions were sent, and is let in.
fn check_version(version: &str, kind: &str) -> Result<(), MetaError> {
    if version.is_empty() {
        return Ok(());
    }
    let node: Version = version
        .parse()
        .map_err(|e: InvalidVersion| MetaError::InvalidRequest(e.to_string()))?;
    match incompatibility(&node, &Version::current()) {
        None => Ok(()),
        Some(why) => {
            tracing::warn!(kind, version, "registration refused: {why}");
            Err(MetaError::Incompatible(format!("{kind} {why}")))
        }
    }
}

async fn heartbeat(s: AppState, req: proto::HeartbeatRequest) -> Result<proto::Empty, MetaError> {
    s.write(Command::Heartbeat {
        id: BrokerId(req.id),
        now_ms: lease_now_ms(),
    })
    .await?;
    Ok(proto::Empty {})
}

async fn drain(s: AppState, req: proto::HeartbeatRequest) -> Result<proto::Empty, MetaError> {
    s.write(Command::Drain {
        id: BrokerId(req.id),
    })
    .await?;
    // Its items are handed over in this round rather than the next.
    s.controller_wake.notify_one();
    Ok(proto::Empty {})
}

/// How long the leader waits for its own connection to a broker reported
/// down: a refusal comes back at once; anything slower is not one.
const NODE_DOWN_PROBE: Duration = Duration::from_millis(500);

/// A broker's address refused a proxy's (or a peer's) connection. A refused
/// connection means no process listens there, unlike a timeout, so the
/// broker is marked dead at once instead of one lease later, but only if
/// it is still registered at that address and the address refuses this
/// node's own connection too: a report about a process that has since been
/// restarted on the same port (it accepts again) changes nothing, and a
/// broker cannot be expired by a report alone. Safe either way: every
/// commit is fenced by the partition's epoch.
async fn node_down(
    s: AppState,
    req: proto::NodeDownRequest,
) -> Result<proto::NodeDownResponse, MetaError> {
    let id = BrokerId(req.id);
    let registered = s.shared.read(|st| {
        st.nodes.by_id.get(&id).is_some_and(|n| {
            n.kind == crate::command::NodeKind::Broker
                && n.state != crate::state::NodeState::Dead
                && n.addr == req.addr
        })
    });
    if !registered || !crate::probe::refuses_connections(&req.addr, NODE_DOWN_PROBE).await {
        return Ok(proto::NodeDownResponse { expired: false });
    }
    let (r, _) = s
        .write(Command::NodeDown {
            id,
            addr: req.addr.clone(),
        })
        .await?;
    let expired = matches!(r, Response::Expired { ref nodes } if !nodes.is_empty());
    if expired {
        tracing::info!(broker = %id, addr = %req.addr, "broker down: its address refuses connections");
        // Its items have no owner: placed now, not a round later.
        s.controller_wake.notify_one();
    }
    Ok(proto::NodeDownResponse { expired })
}

async fn release(s: AppState, req: proto::ReleaseRequest) -> Result<proto::Empty, MetaError> {
    let mut items = Vec::with_capacity(req.partitions.len() + req.shards.len());
    for p in &req.partitions {
        items.push((
            OwnedItem::Partition(convert::partition(p.partition.as_ref())?),
            Epoch(p.epoch),
        ));
    }
    for sh in &req.shards {
        items.push((
            OwnedItem::Shard(crate::ids::ShardId(sh.shard)),
            Epoch(sh.epoch),
        ));
    }
    if items.is_empty() {
        return Err(MetaError::InvalidRequest("nothing to release".into()));
    }
    s.write(Command::Release {
        broker: BrokerId(req.broker),
        items,
    })
    .await?;
    Ok(proto::Empty {})
}

async fn commit(
    s: AppState,
    req: proto::CommitRequest,
) -> Result<proto::CommitResponse, MetaError> {
    let ranges = req
        .ranges
        .iter()
        .map(|r| {
            Ok(CommitRange {
                partition: convert::partition(r.partition.as_ref())?,
                epoch: Epoch(r.epoch),
                first_offset: r.first_offset,
                last_offset: r.last_offset,
                max_timestamp: r.max_timestamp,
                object: if r.object_id == 0 {
                    ObjectSel::New
                } else {
                    ObjectSel::Existing(ObjectId(r.object_id))
                },
                byte_start: r.byte_start,
                byte_len: r.byte_len,
                producers: r
                    .producers
                    .iter()
                    .map(convert::producer_batch)
                    .collect::<Result<_, _>>()?,
            })
        })
        .collect::<Result<Vec<_>, MetaError>>()?;
    let txns = req
        .txns
        .iter()
        .map(super::txn_routes::range_txns)
        .collect::<Result<Vec<_>, MetaError>>()?;
    let (now_ms, broker) = (now_ms(), BrokerId(req.broker));
    let object = req.object.map(|o| NewObject {
        endpoint: o.endpoint,
        key: o.key,
        size: o.size,
    });
    let cmd = if txns.is_empty() {
        Command::Commit {
            now_ms,
            broker,
            object,
            ranges,
        }
    } else {
        Command::CommitWithTxns {
            now_ms,
            broker,
            object,
            ranges,
            txns,
        }
    };
    let (resp, index) = s.write(cmd).await?;
    match resp {
        Response::Committed {
            object,
            high_watermarks,
        } => Ok(proto::CommitResponse {
            object_id: object.map_or(0, |o| o.0),
            high_watermarks: high_watermarks
                .iter()
                .map(|(p, hw)| proto::HighWatermark {
                    partition: Some(convert::partition_msg(p)),
                    high_watermark: *hw,
                })
                .collect(),
            revision: index,
        }),
        other => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

async fn partition_index(
    s: AppState,
    req: proto::IndexRequest,
) -> Result<proto::IndexResponse, MetaError> {
    let p = convert::partition(req.partition.as_ref())?;
    s.linearizable().await?;
    s.shared
        .read(|st| index_of(st, &p, req.from_offset))
        .ok_or(MetaError::UnknownPartition(p))
}

/// Most partitions one [`PartitionIndexes`](super::routes::PartitionIndexes)
/// call reads.
pub const MAX_INDEXES: usize = 1024;

async fn partition_indexes(
    s: AppState,
    req: proto::IndexesRequest,
) -> Result<proto::IndexesResponse, MetaError> {
    if req.partitions.len() > MAX_INDEXES {
        return Err(MetaError::InvalidRequest(format!(
            "{} partitions asked for in one index read, at most {MAX_INDEXES}",
            req.partitions.len()
        )));
    }
    let asked = req
        .partitions
        .iter()
        .map(|r| Ok((convert::partition(r.partition.as_ref())?, r.from_offset)))
        .collect::<Result<Vec<_>, MetaError>>()?;
    s.linearizable().await?;
    Ok(s.shared.read(|st| proto::IndexesResponse {
        indexes: asked
            .iter()
            .map(|(p, from)| index_of(st, p, *from).unwrap_or_default())
            .collect(),
    }))
}

/// A partition's committed index from `from_offset` on, if the state holds
/// the partition.
fn index_of(
    st: &crate::state::ClusterState,
    p: &PartitionKey,
    from_offset: i64,
) -> Option<proto::IndexResponse> {
    let ps = st.topics.partitions.get(p)?;
    Some(proto::IndexResponse {
        info: Some(convert::partition_info(p.partition, ps)),
        entries: ps
            .index
            .iter()
            .filter(|e| e.last_offset >= from_offset)
            .map(|e| proto::IndexEntry {
                first_offset: e.first_offset,
                last_offset: e.last_offset,
                max_timestamp: e.max_timestamp,
                object_id: e.object.0,
                object: st
                    .topics
                    .objects
                    .get(&e.object)
                    .map(|o| proto::StoreObject {
                        endpoint: o.endpoint.clone(),
                        key: o.key.clone(),
                        size: o.size,
                    }),
                byte_start: e.byte_start,
                byte_len: e.byte_len,
            })
            .collect(),
        producers: ps
            .producers
            .values()
            .flat_map(|p| p.batches.iter().map(convert::producer_batch_msg))
            .collect(),
        ..super::txn_routes::partition_txns_msg(st.producers.txn.partitions.get(p), from_offset)
    })
}

/// The coordinator a group request names on the wire (broker 0: none).
fn wire_fence(broker: u32, shard: u32, epoch: u64) -> Option<ShardFence> {
    BrokerId::from_wire(broker).map(|broker| ShardFence {
        broker,
        shard: ShardId(shard),
        epoch: Epoch(epoch),
    })
}

async fn commit_offsets(
    s: AppState,
    req: proto::CommitOffsetsRequest,
) -> Result<proto::CommitOffsetsResponse, MetaError> {
    let Some(fence) = wire_fence(req.broker, req.shard, req.shard_epoch) else {
        return Err(MetaError::InvalidRequest(
            "an offset commit names its coordinator (broker, shard, epoch)".into(),
        ));
    };
    let (resp, _) = s
        .write(Command::CommitOffsets {
            fence: Some(fence),
            group: req.group,
            offsets: req.offsets.into_iter().map(convert::group_offset).collect(),
        })
        .await?;
    match resp {
        Response::OffsetsCommitted { unknown } => Ok(proto::CommitOffsetsResponse {
            unknown: convert::unknown_offsets_msg(&unknown),
        }),
        other => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

async fn fetch_offsets(
    s: AppState,
    req: proto::FetchOffsetsRequest,
) -> Result<proto::FetchOffsetsResponse, MetaError> {
    s.linearizable().await?;
    Ok(s.shared.read(|st| proto::FetchOffsetsResponse {
        offsets: st
            .groups
            .offsets
            .get(&req.group)
            .map(|g| {
                g.iter()
                    .map(|((topic, partition), o)| convert::group_offset_msg(topic, *partition, o))
                    .collect()
            })
            .unwrap_or_default(),
    }))
}

async fn stored_groups(
    s: AppState,
    _req: proto::Empty,
) -> Result<proto::StoredGroupsResponse, MetaError> {
    s.linearizable().await?;
    Ok(s.shared.read(|st| proto::StoredGroupsResponse {
        groups: st
            .groups
            .offsets
            .iter()
            .filter(|(group, _)| !crate::command::is_reserved_group(group))
            .map(|(group, offsets)| proto::StoredGroup {
                group: group.clone(),
                share: offsets
                    .values()
                    .any(|o| crate::command::is_share_state(&o.metadata)),
            })
            .collect(),
    }))
}

async fn producer_ids(
    s: AppState,
    req: proto::ProducerIdsRequest,
) -> Result<proto::ProducerIdsResponse, MetaError> {
    match s
        .write(Command::AllocateProducerIds { count: req.count })
        .await?
    {
        (Response::ProducerIds { first, count }, _) => {
            Ok(proto::ProducerIdsResponse { first, count })
        }
        (other, _) => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

async fn watch(s: AppState, req: proto::WatchRequest) -> Result<proto::ClusterView, MetaError> {
    s.linearizable().await?;
    let timeout = Duration::from_millis(req.timeout_ms).min(MAX_WATCH);
    let since = crate::ids::Revision(req.since_revision);
    // Answered when the view changed after `since` (most commands, a
    // flush's commit for one, do not change it), or at the timeout.
    let view = s.shared.wait_view_beyond(since, timeout).await;
    if req.accept_unchanged && since.0 > 0 && view <= since {
        return Ok(proto::ClusterView {
            revision: since.0,
            unchanged: true,
            ..Default::default()
        });
    }
    Ok(s.shared.read_with_views(|state, views| {
        // A poller that has the view as of `since` is sent what changed
        // since, while the node's log of changes reaches back that far and
        // the change is not a whole one.
        if req.accept_partial
            && since.0 > 0
            && let Some(change) = views.since(since)
            && !change.all
        {
            return convert::cluster_view_delta(state, req.since_revision, &change);
        }
        convert::cluster_view_since(state, req.since_revision)
    }))
}

async fn truncate_log(
    s: AppState,
    req: proto::TruncateRequest,
) -> Result<proto::TruncateResponse, MetaError> {
    let partition = convert::partition(req.partition.as_ref())?;
    let (resp, _) = s
        .write(Command::TruncateLog {
            broker: BrokerId(req.broker),
            partition,
            epoch: Epoch(req.epoch),
            log_start_offset: req.log_start_offset,
        })
        .await?;
    match resp {
        Response::LogStart { log_start_offset } => Ok(proto::TruncateResponse { log_start_offset }),
        other => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

async fn share_state(
    s: AppState,
    req: proto::ShareStateRequest,
) -> Result<proto::Empty, MetaError> {
    let partition = convert::partition(req.partition.as_ref())?;
    let (resp, _) = s
        .write(Command::ShareState {
            broker: BrokerId(req.broker),
            partition,
            epoch: Epoch(req.epoch),
            group: req.group,
            state: crate::command::CommittedOffset {
                offset: req.start_offset,
                leader_epoch: -1,
                metadata: req.state,
            },
        })
        .await?;
    match resp {
        Response::Ok => Ok(proto::Empty {}),
        other => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

async fn share_forget(
    s: AppState,
    req: proto::ShareForgetRequest,
) -> Result<proto::Empty, MetaError> {
    let partition = convert::partition(req.partition.as_ref())?;
    let (resp, _) = s
        .write(Command::ForgetShareState {
            broker: BrokerId(req.broker),
            partition,
            epoch: Epoch(req.epoch),
            group: req.group,
        })
        .await?;
    match resp {
        Response::Ok => Ok(proto::Empty {}),
        other => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

async fn store_group(
    s: AppState,
    req: proto::StoreGroupRequest,
) -> Result<proto::Empty, MetaError> {
    s.write(Command::StoreGroup {
        fence: crate::command::ShardFence {
            broker: BrokerId(req.broker),
            shard: ShardId(req.shard),
            epoch: Epoch(req.shard_epoch),
        },
        group: req.group,
        record: req.record,
    })
    .await?;
    Ok(proto::Empty {})
}

async fn group_records(
    s: AppState,
    req: proto::GroupRecordsRequest,
) -> Result<proto::GroupRecordsResponse, MetaError> {
    s.linearizable().await?;
    let groups = s.shared.read(|st| {
        let shards = u32::try_from(st.topics.shards.len()).unwrap_or(u32::MAX);
        st.groups
            .records
            .iter()
            .filter(|(g, _)| crate::txn::shard_of(g, shards) == req.shard)
            .map(|(g, r)| proto::GroupRecord {
                group: g.clone(),
                record: r.clone(),
            })
            .collect()
    });
    Ok(proto::GroupRecordsResponse { groups })
}

async fn replace_ranges(
    s: AppState,
    req: proto::ReplaceRangesRequest,
) -> Result<proto::CommitResponse, MetaError> {
    let partition = convert::partition(req.partition.as_ref())?;
    let Some(o) = req.object else {
        return Err(MetaError::InvalidRequest(
            "replace without an object".into(),
        ));
    };
    let (resp, index) = s
        .write(Command::ReplaceRanges {
            broker: BrokerId(req.broker),
            partition,
            epoch: Epoch(req.epoch),
            first_offset: req.first_offset,
            last_offset: req.last_offset,
            max_timestamp: req.max_timestamp,
            object: NewObject {
                endpoint: o.endpoint,
                key: o.key,
                size: o.size,
            },
        })
        .await?;
    match resp {
        Response::Committed { object, .. } => Ok(proto::CommitResponse {
            object_id: object.map_or(0, |o| o.0),
            high_watermarks: vec![],
            revision: index,
        }),
        other => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

async fn unreferenced_objects(
    s: AppState,
    _: proto::Empty,
) -> Result<proto::ObjectList, MetaError> {
    s.linearizable().await?;
    let objects = s.shared.read(|st| {
        st.topics
            .unreferenced_objects()
            .into_iter()
            .map(|(id, o)| proto::ObjectEntry {
                id: id.0,
                object: Some(proto::StoreObject {
                    endpoint: o.endpoint.clone(),
                    key: o.key.clone(),
                    size: o.size,
                }),
            })
            .collect()
    });
    Ok(proto::ObjectList { objects })
}

async fn forget_objects(
    s: AppState,
    req: proto::ForgetObjectsRequest,
) -> Result<proto::Empty, MetaError> {
    s.write(Command::ForgetObjects {
        ids: req.ids.into_iter().map(ObjectId).collect(),
    })
    .await?;
    Ok(proto::Empty {})
}

/// Most objects one `UnknownObjects` request may name.
pub const UNKNOWN_OBJECTS_MAX: usize = 10_000;

async fn unknown_objects(
    s: AppState,
    req: proto::UnknownObjectsRequest,
) -> Result<proto::UnknownObjectsResponse, MetaError> {
    if req.objects.len() > UNKNOWN_OBJECTS_MAX {
        return Err(MetaError::InvalidRequest(format!(
            "{} objects in one question (at most {UNKNOWN_OBJECTS_MAX})",
            req.objects.len()
        )));
    }
    // Linearizable: an object committed before the question is known in
    // the answer (an orphan scan lists first, then asks).
    s.linearizable().await?;
    Ok(s.shared.read(|st| {
        let topics = &st.topics;
        proto::UnknownObjectsResponse {
            unknown: (0u32..)
                .zip(&req.objects)
                .filter(|(_, o)| !topics.knows_object(&o.endpoint, &o.key))
                .map(|(i, _)| i)
                .collect(),
            endpoints: topics
                .object_endpoints()
                .map(|(endpoint, objects)| proto::EndpointObjects {
                    endpoint: endpoint.to_string(),
                    objects,
                })
                .collect(),
        }
    }))
}

async fn delete_groups(
    s: AppState,
    req: proto::DeleteGroupsRequest,
) -> Result<proto::Empty, MetaError> {
    let cmd = match wire_fence(req.broker, req.shard, req.shard_epoch) {
        None => Command::DeleteGroups { groups: req.groups },
        Some(fence) => match <[String; 1]>::try_from(req.groups) {
            Ok([group]) => Command::DeleteGroupFenced { group, fence },
            Err(groups) => {
                return Err(MetaError::InvalidRequest(format!(
                    "a delete through a coordinator names one group, not {}",
                    groups.len()
                )));
            }
        },
    };
    s.write(cmd).await?;
    Ok(proto::Empty {})
}

async fn delete_offsets(
    s: AppState,
    req: proto::CommitOffsetsRequest,
) -> Result<proto::Empty, MetaError> {
    let group = req.group;
    let partitions = req
        .offsets
        .into_iter()
        .map(|o| (o.topic, o.partition))
        .collect();
    let cmd = match wire_fence(req.broker, req.shard, req.shard_epoch) {
        None => Command::DeleteOffsets { group, partitions },
        Some(fence) => Command::DeleteOffsetsFenced {
            group,
            partitions,
            fence,
        },
    };
    s.write(cmd).await?;
    Ok(proto::Empty {})
}
