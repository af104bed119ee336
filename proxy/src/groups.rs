//! Consumer-group requests (the classic protocol): FindCoordinator, JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
//! DescribeGroups, ListGroups, DeleteGroups. The coordinator is the broker
//! that owns the group's shard; committed offsets live in the metadata.
//!
//! The coordinator is a `dyn Coordinator`: this process's broker (`floe
//! standalone`) or another broker reached over the internal RPC
//! (`floe_broker::group_rpc`). A group whose coordinator cannot be found is
//! a `RoutingError`, coded by `crate::errors::routing_code`.

use std::collections::HashMap;

use std::sync::Arc;

use floe_broker::group::{CommitParams, GroupError, JoinParams, OffsetToCommit, SyncParams};
use floe_broker::{Coordinator, RoutingError, RoutingErrorKind};
use floe_metadata::api::proto as mp;
use floe_metadata::api::routes;
use floe_metadata::command::ShardFence;
use floe_metadata::ids::{BrokerId as FloeBrokerId, ShardId};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator as FoundCoordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::errors::routing_code;
use crate::handlers::Context;

/// Who sent a request (for DescribeGroups).
#[derive(Debug, Clone, Default)]
pub struct ClientInfo {
    pub client_id: String,
    pub host: String,
    /// Who the connection authenticated as.
    pub principal: crate::principal::Principal,
    /// The connection's authorization decisions.
    pub authz: std::sync::Arc<crate::authz::SessionCache>,
}

/// Where a coordinator shard is served.
pub(crate) enum ShardOwner {
    /// This process's broker.
    Local(floe_broker::Broker),
    /// A broker in another process.
    Remote(Arc<floe_broker::RemoteBroker>),
}

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn code(e: Option<GroupError>) -> i16 {
    e.map_or(0, |e| e.kafka_code())
}

/// A member's call (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
/// OffsetCommit) that meets its coordinator on the move (the group's shard
/// has no owner yet, its owner cannot be reached, or has not loaded the
/// shard's groups yet) is answered COORDINATOR_LOAD_IN_PROGRESS, which
/// clients retry here. NOT_COORDINATOR would send them to FindCoordinator,
/// which names this proxy again (any proxy forwards to the shard's owner);
/// librdkafka then drops its pending OffsetCommit at each coordinator
/// change and can stop heartbeating until its session runs out.
fn member_code(code: i16) -> i16 {
    if code == ResponseError::NotCoordinator.code() {
        ResponseError::CoordinatorLoadInProgress.code()
    } else {
        code
    }
}

impl Context {
    pub(crate) fn shard_count(&self) -> u32 {
        self.view.current().shard_count()
    }

    /// The broker that owns the coordinator shard of `key` (a group id or a
    /// transactional id): this process's broker or a client of another.
    pub(crate) fn shard_owner(&self, key: &str) -> Result<ShardOwner, RoutingError> {
        self.shard_owner_fenced(key).map(|(owner, _)| owner)
    }

    /// [`Self::shard_owner`], with the owner's fence from the same view: an
    /// admin write of a group (OffsetDelete, DeleteGroups) decided with that
    /// coordinator carries it, and the metadata applies the write only while
    /// that broker still owns the shard at that epoch. A decision asked of a
    /// coordinator the shard has since left is refused (NOT_COORDINATOR: the
    /// client asks again) instead of removing what the new coordinator's
    /// group stored.
    pub(crate) fn shard_owner_fenced(
        &self,
        key: &str,
    ) -> Result<(ShardOwner, ShardFence), RoutingError> {
        let not_coordinator =
            |why: &str| RoutingError::new(RoutingErrorKind::NotCoordinator, why.to_string());
        let snap = self.view.current();
        let shard = floe_broker::group::shard_of(key, snap.shard_count());
        let (owner, epoch) = snap
            .shards
            .iter()
            .find(|x| x.shard.0 == shard && x.handover_to.is_none())
            .and_then(|x| Some((x.owner?, x.epoch)))
            .ok_or_else(|| not_coordinator("the key's coordinator shard has no owner"))?;
        let fence = ShardFence {
            broker: owner,
            shard: ShardId(shard),
            epoch,
        };
        if let Some(local) = self.local.as_ref().filter(|b| b.broker_id() == owner) {
            return Ok((ShardOwner::Local(local.clone()), fence));
        }
        let addr = snap
            .broker_addr(owner)
            .ok_or_else(|| not_coordinator("no address for the key's coordinator"))?;
        let remote = self.remote(addr);
        if remote.refused() {
            // The last call to this coordinator found nothing listening
            // (the client asks again after NOT_COORDINATOR): reported as a
            // partition's owner is, so its shards move at once instead of
            // one lease later.
            self.report_down(owner, addr.to_string());
        }
        Ok((ShardOwner::Remote(remote), fence))
    }

    /// The coordinator shards this proxy is named coordinator of
    /// (FindCoordinator's answer): ListGroups and ListTransactions answer
    /// for their keys only, so that an admin client asking every broker
    /// gets each group and transaction once.
    pub(crate) fn named_shards(
        &self,
        snap: &floe_metadata::watch::ClusterSnapshot,
    ) -> std::collections::HashSet<u32> {
        let nodes = self.kafka_nodes(snap);
        let me = self.me.id();
        (0..snap.shard_count())
            .filter(|shard| nodes.coordinator(*shard).id == me)
            .collect()
    }

    /// Every broker that owns one of the coordinator shards `shards`, once,
    /// with how to reach it (ListGroups and ListTransactions ask each of
    /// them).
    pub(crate) fn shard_owners(
        &self,
        snap: &floe_metadata::watch::ClusterSnapshot,
        shards: &std::collections::HashSet<u32>,
    ) -> Vec<(FloeBrokerId, ShardOwner)> {
        let mut owners: Vec<FloeBrokerId> = snap
            .shards
            .iter()
            .filter(|x| shards.contains(&x.shard.0))
            .filter_map(|x| x.owner)
            .collect();
        owners.sort_unstable();
        owners.dedup();
        owners
            .into_iter()
            .filter_map(|owner| {
                let o = if let Some(local) = self.local.as_ref().filter(|b| b.broker_id() == owner)
                {
                    ShardOwner::Local(local.clone())
                } else {
                    ShardOwner::Remote(self.remote(snap.broker_addr(owner)?))
                };
                Some((owner, o))
            })
            .collect()
    }

    /// The coordinator of `group_id`: the broker that owns its shard.
    pub(crate) fn coordinator(&self, group_id: &str) -> Result<Arc<dyn Coordinator>, RoutingError> {
        self.coordinator_fenced(group_id).map(|(c, _)| c)
    }

    /// [`Self::coordinator`], with its fence from the view that named it.
    pub(crate) fn coordinator_fenced(
        &self,
        group_id: &str,
    ) -> Result<(Arc<dyn Coordinator>, ShardFence), RoutingError> {
        let (owner, fence) = self.shard_owner_fenced(group_id)?;
        let c: Arc<dyn Coordinator> = match owner {
            ShardOwner::Local(local) => {
                local
                    .coordinator(group_id, self.shard_count())
                    .map_err(|_| {
                        RoutingError::new(
                            RoutingErrorKind::NotCoordinator,
                            "this broker has not taken the group's shard over",
                        )
                    })?;
                Arc::new(local)
            }
            ShardOwner::Remote(r) => r,
        };
        Ok((c, fence))
    }

    /// FindCoordinator: this proxy (it forwards to the shard's owner) once
    /// the key's shard has an owner.
    pub fn find_coordinator(
        &self,
        version: i16,
        req: &FindCoordinatorRequest,
    ) -> FindCoordinatorResponse {
        let keys: Vec<StrBytes> = if version >= 4 {
            req.coordinator_keys.clone()
        } else {
            vec![req.key.clone()]
        };
        let snap = self.view.current();
        let shards = self.shard_count();
        let answer = |key: &str| -> (i16, Option<&'static str>) {
            // Groups (0) and transactional ids (1) are sharded the same way.
            // (Transactions themselves are refused at InitProducerId.)
            if !(0..=1).contains(&req.key_type) {
                return (
                    ResponseError::InvalidRequest.code(),
                    Some("unknown key type"),
                );
            }
            let shard = floe_broker::group::shard_of(key, shards);
            let owned = snap
                .shards
                .iter()
                .any(|x| x.shard.0 == shard && x.owner.is_some() && x.handover_to.is_none());
            if owned {
                (0, None)
            } else {
                (
                    ResponseError::CoordinatorNotAvailable.code(),
                    Some("the group's coordinator shard has no owner right now"),
                )
            }
        };
        // Each shard's groups are coordinated "at" one proxy, spread over
        // them all (any proxy routes to the real coordinator).
        let nodes = self.kafka_nodes(&snap);
        let at = |key: &str| nodes.coordinator(floe_broker::group::shard_of(key, shards));
        let mut resp = FindCoordinatorResponse::default();
        if version >= 4 {
            for k in keys {
                let (err, msg) = answer(&k);
                let mut c = FoundCoordinator::default();
                c.key = k;
                c.error_code = err;
                c.error_message = msg.map(s);
                if err == 0 {
                    let n = at(&c.key);
                    c.node_id = BrokerId(n.id);
                    c.host = s(n.host.clone());
                    c.port = n.port;
                } else {
                    c.node_id = BrokerId(-1);
                    c.port = -1;
                }
                resp.coordinators.push(c);
            }
        } else {
            let (err, msg) = answer(&req.key);
            resp.error_code = err;
            if version >= 1 {
                resp.error_message = msg.map(s);
            }
            if err == 0 {
                let n = at(&req.key);
                resp.node_id = BrokerId(n.id);
                resp.host = s(n.host.clone());
                resp.port = n.port;
            } else {
                resp.node_id = BrokerId(-1);
                resp.port = -1;
            }
        }
        resp
    }

    pub async fn join_group(
        &self,
        version: i16,
        req: &JoinGroupRequest,
        client: &ClientInfo,
    ) -> JoinGroupResponse {
        let mut resp = JoinGroupResponse::default();
        let result = match self.coordinator(&req.group_id.0) {
            Err(e) => {
                resp.error_code = member_code(routing_code(&e));
                resp.generation_id = -1;
                resp.member_id = req.member_id.clone();
                return resp;
            }
            Ok(c) => {
                c.join_group(JoinParams {
                    group_id: req.group_id.0.to_string(),
                    member_id: req.member_id.to_string(),
                    group_instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
                    client_id: client.client_id.clone(),
                    client_host: client.host.clone(),
                    session_timeout_ms: req.session_timeout_ms,
                    rebalance_timeout_ms: if version >= 1 {
                        req.rebalance_timeout_ms
                    } else {
                        req.session_timeout_ms
                    },
                    protocol_type: req.protocol_type.to_string(),
                    protocols: req
                        .protocols
                        .iter()
                        .map(|p| (p.name.to_string(), p.metadata.clone()))
                        .collect(),
                    require_known_member_id: version >= 4,
                })
                .await
            }
        };
        resp.error_code = member_code(code(result.error));
        resp.generation_id = result.generation_id;
        if version >= 7 {
            resp.protocol_type = result.protocol_type.map(s);
        }
        resp.protocol_name = Some(s(result.protocol_name.unwrap_or_default()));
        resp.leader = s(result.leader_id);
        resp.member_id = s(result.member_id);
        resp.members = result
            .members
            .into_iter()
            .map(|m| {
                let mut x = JoinGroupResponseMember::default();
                x.member_id = s(m.member_id);
                if version >= 5 {
                    x.group_instance_id = m.group_instance_id.map(s);
                }
                x.metadata = m.metadata;
                x
            })
            .collect();
        resp
    }

    pub async fn sync_group(&self, version: i16, req: &SyncGroupRequest) -> SyncGroupResponse {
        let mut resp = SyncGroupResponse::default();
        let result = match self.coordinator(&req.group_id.0) {
            Err(e) => {
                resp.error_code = member_code(routing_code(&e));
                return resp;
            }
            Ok(c) => {
                c.sync_group(SyncParams {
                    group_id: req.group_id.0.to_string(),
                    generation_id: req.generation_id,
                    member_id: req.member_id.to_string(),
                    group_instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
                    protocol_type: req.protocol_type.as_ref().map(|p| p.to_string()),
                    protocol_name: req.protocol_name.as_ref().map(|p| p.to_string()),
                    assignments: req
                        .assignments
                        .iter()
                        .map(|a| (a.member_id.to_string(), a.assignment.clone()))
                        .collect(),
                })
                .await
            }
        };
        resp.error_code = member_code(code(result.error));
        if version >= 5 {
            resp.protocol_type = result.protocol_type.map(s);
            resp.protocol_name = result.protocol_name.map(s);
        }
        resp.assignment = result.assignment;
        resp
    }

    pub async fn heartbeat(&self, _version: i16, req: &HeartbeatRequest) -> HeartbeatResponse {
        let mut resp = HeartbeatResponse::default();
        resp.error_code = member_code(match self.coordinator(&req.group_id.0) {
            Err(e) => routing_code(&e),
            Ok(c) => c
                .heartbeat(
                    &req.group_id.0,
                    req.generation_id,
                    &req.member_id,
                    req.group_instance_id.as_ref().map(|i| i.as_str()),
                )
                .await
                .err()
                .map_or(0, |e| e.kafka_code()),
        });
        resp
    }

    pub async fn leave_group(&self, version: i16, req: &LeaveGroupRequest) -> LeaveGroupResponse {
        let mut resp = LeaveGroupResponse::default();
        let members: Vec<(String, Option<String>)> = if version >= 3 {
            req.members
                .iter()
                .map(|m| {
                    (
                        m.member_id.to_string(),
                        m.group_instance_id.as_ref().map(|i| i.to_string()),
                    )
                })
                .collect()
        } else {
            vec![(req.member_id.to_string(), None)]
        };
        let c = match self.coordinator(&req.group_id.0) {
            Err(e) => {
                resp.error_code = member_code(routing_code(&e));
                return resp;
            }
            Ok(c) => c,
        };
        match c.leave_group(&req.group_id.0, &members).await {
            Err(e) => resp.error_code = member_code(e.kafka_code()),
            Ok(per) => {
                if version >= 3 {
                    resp.members = members
                        .iter()
                        .zip(per)
                        .map(|((id, inst), r)| {
                            let mut m = MemberResponse::default();
                            m.member_id = s(id.clone());
                            m.group_instance_id = inst.clone().map(s);
                            m.error_code = r.err().map_or(0, |e| e.kafka_code());
                            m
                        })
                        .collect();
                } else if let Some(Err(e)) = per.into_iter().next() {
                    resp.error_code = e.kafka_code();
                }
            }
        }
        resp
    }

    pub async fn offset_commit(
        &self,
        _version: i16,
        req: &OffsetCommitRequest,
    ) -> OffsetCommitResponse {
        let group = req.group_id.0.to_string();
        // The coordinator checks the member, the metadata's size, and stores
        // the offsets fenced by its shard's epoch; one result per partition.
        let offsets: Vec<OffsetToCommit> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| OffsetToCommit {
                    topic: t.name.0.to_string(),
                    // A negative index names no partition: u32::MAX is over
                    // any topic's partition count, so the metadata answers
                    // it UNKNOWN_TOPIC_OR_PARTITION (before, it was stored
                    // as partition 0's offset).
                    partition: u32::try_from(p.partition_index).unwrap_or(u32::MAX),
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p
                        .committed_metadata
                        .as_ref()
                        .map(|m| m.to_string())
                        .unwrap_or_default(),
                })
            })
            .collect();
        let n = offsets.len();
        let codes: Vec<i16> = match self.coordinator(&group) {
            Err(e) => vec![member_code(routing_code(&e)); n],
            Ok(c) => match c
                .commit_offsets(CommitParams {
                    group_id: group.clone(),
                    generation_id: req.generation_id_or_member_epoch,
                    member_id: req.member_id.to_string(),
                    group_instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
                    offsets,
                })
                .await
            {
                Err(e) => vec![member_code(e.kafka_code()); n],
                Ok(per) => per.into_iter().map(|r| code(r.err())).collect(),
            },
        };
        let mut codes = codes.into_iter();
        let mut resp = OffsetCommitResponse::default();
        resp.topics = req
            .topics
            .iter()
            .map(|t| {
                let mut rt = OffsetCommitResponseTopic::default();
                rt.name = t.name.clone();
                rt.partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let mut rp = OffsetCommitResponsePartition::default();
                        rp.partition_index = p.partition_index;
                        rp.error_code = codes.next().unwrap_or(0);
                        rp
                    })
                    .collect();
                rt
            })
            .collect();
        resp
    }

    /// The committed offsets of one group: (topic, partition) → (offset, epoch, metadata).
    /// The group's committed offsets; GROUP_ID_NOT_FOUND for a share group.
    async fn committed(&self, group: &str) -> Result<HashMap<(String, i32), mp::GroupOffset>, i16> {
        if let Err(e) = self.coordinator(group) {
            return Err(routing_code(&e));
        }
        let r: Result<mp::FetchOffsetsResponse, _> = self
            .meta
            .call::<routes::FetchOffsets>(mp::FetchOffsetsRequest {
                group: group.to_string(),
            })
            .await;
        match r {
            // A share group's stored offsets are its share state, not
            // committed offsets (Kafka: GROUP_ID_NOT_FOUND, "Group … is not
            // a consumer group.").
            Ok(r)
                if r.offsets
                    .iter()
                    .any(|o| floe_broker::share::durable::is_share_state(&o.metadata)) =>
            {
                Err(GroupError::GroupIdNotFound.kafka_code())
            }
            Ok(r) => Ok(r
                .offsets
                .into_iter()
                .map(|o| ((o.topic.clone(), o.partition as i32), o))
                .collect()),
            Err(e) => {
                tracing::warn!(group, error = %e, "reading committed offsets failed");
                Err(ResponseError::CoordinatorLoadInProgress.code())
            }
        }
    }

    pub async fn offset_fetch(
        &self,
        version: i16,
        req: &OffsetFetchRequest,
    ) -> OffsetFetchResponse {
        let mut resp = OffsetFetchResponse::default();
        if version >= 8 {
            for g in &req.groups {
                let mut rg = OffsetFetchResponseGroup::default();
                rg.group_id = g.group_id.clone();
                let unstable = self
                    .settled_offsets(&g.group_id.0, req.require_stable)
                    .await;
                match self.committed(&g.group_id.0).await {
                    Err(e) => rg.error_code = e,
                    Ok(committed) => {
                        let wanted: Option<Vec<(String, Vec<i32>)>> = g.topics.as_ref().map(|ts| {
                            ts.iter()
                                .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                                .collect()
                        });
                        for (topic, parts) in select(&committed, wanted) {
                            let mut rt = OffsetFetchResponseTopics::default();
                            rt.name = TopicName(s(topic.clone()));
                            for (p, o) in parts {
                                let mut rp = OffsetFetchResponsePartitions::default();
                                rp.partition_index = p;
                                rp.committed_offset = o.as_ref().map_or(-1, |o| o.offset);
                                rp.committed_leader_epoch =
                                    o.as_ref().map_or(-1, |o| o.leader_epoch);
                                rp.metadata = Some(s(o.map(|o| o.metadata).unwrap_or_default()));
                                rp.error_code = unstable_code(&unstable, &topic, p);
                                rt.partitions.push(rp);
                            }
                            rg.topics.push(rt);
                        }
                    }
                }
                resp.groups.push(rg);
            }
            return resp;
        }
        let unstable = self
            .settled_offsets(&req.group_id.0, version >= 7 && req.require_stable)
            .await;
        match self.committed(&req.group_id.0).await {
            Err(e) => {
                if version >= 2 {
                    resp.error_code = e;
                }
                // v0–v1: the error goes on every partition asked for.
                for t in req.topics.iter().flatten() {
                    let mut rt = OffsetFetchResponseTopic::default();
                    rt.name = t.name.clone();
                    for p in &t.partition_indexes {
                        let mut rp = OffsetFetchResponsePartition::default();
                        rp.partition_index = *p;
                        rp.committed_offset = -1;
                        rp.error_code = e;
                        rt.partitions.push(rp);
                    }
                    resp.topics.push(rt);
                }
            }
            Ok(committed) => {
                let wanted: Option<Vec<(String, Vec<i32>)>> = req.topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                        .collect()
                });
                for (topic, parts) in select(&committed, wanted) {
                    let mut rt = OffsetFetchResponseTopic::default();
                    rt.name = TopicName(s(topic.clone()));
                    for (p, o) in parts {
                        let mut rp = OffsetFetchResponsePartition::default();
                        rp.partition_index = p;
                        rp.committed_offset = o.as_ref().map_or(-1, |o| o.offset);
                        if version >= 5 {
                            rp.committed_leader_epoch = o.as_ref().map_or(-1, |o| o.leader_epoch);
                        }
                        rp.metadata = Some(s(o.map(|o| o.metadata).unwrap_or_default()));
                        rp.error_code = unstable_code(&unstable, &topic, p);
                        rt.partitions.push(rp);
                    }
                    resp.topics.push(rt);
                }
            }
        }
        resp
    }

    pub async fn describe_groups(
        &self,
        version: i16,
        req: &DescribeGroupsRequest,
    ) -> DescribeGroupsResponse {
        let mut resp = DescribeGroupsResponse::default();
        for g in &req.groups {
            let mut d = DescribedGroup::default();
            d.group_id = g.clone();
            match self.coordinator(g) {
                Err(e) => d.error_code = routing_code(&e),
                Ok(c) => {
                    let desc = c.describe_group(g).await;
                    d.error_code = code(desc.error);
                    if version >= 6 && desc.error == Some(GroupError::GroupIdNotFound) {
                        d.error_message = Some(s(format!("Group {} is not a classic group.", g.0)));
                    }
                    // A share group is not a classic group either (v6+
                    // says so; before, Kafka answers Dead without error).
                    if version >= 6
                        && desc.error.is_none()
                        && desc.state == floe_broker::group::GroupState::Dead
                        && matches!(
                            self.share_check(&g.0).await,
                            Ok(Some(floe_broker::share::GroupKind::Share))
                                | Err(floe_broker::share::ShareGroupError::NonEmptyGroup)
                        )
                    {
                        d.error_code = GroupError::GroupIdNotFound.kafka_code();
                        d.error_message = Some(s(format!("Group {} is not a classic group.", g.0)));
                    }
                    d.group_state = s(desc.state.as_str());
                    d.protocol_type = s(desc.protocol_type);
                    d.protocol_data = s(desc.protocol_data);
                    d.members = desc
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut x = DescribedGroupMember::default();
                            x.member_id = s(m.member_id);
                            if version >= 4 {
                                x.group_instance_id = m.group_instance_id.map(s);
                            }
                            x.client_id = s(m.client_id);
                            x.client_host = s(m.client_host);
                            x.member_metadata = m.metadata;
                            x.member_assignment = m.assignment;
                            x
                        })
                        .collect();
                }
            }
            if version >= 3 {
                d.authorized_operations = i32::MIN;
            }
            resp.groups.push(d);
        }
        resp
    }

    /// ListGroups: the groups of the coordinator shards this proxy is named
    /// coordinator of, from the brokers that own them.
    pub async fn list_groups(&self, version: i16, req: &ListGroupsRequest) -> ListGroupsResponse {
        let states: Vec<String> = if version >= 4 {
            req.states_filter.iter().map(|s| s.to_string()).collect()
        } else {
            Vec::new()
        };
        // v5: `classic`, `consumer` (the coordinators' groups) and `share`
        // (the share groups of the same shards, `crate::share_admin`).
        let types: Vec<String> = if version >= 5 {
            req.types_filter
                .iter()
                .map(|s| s.to_ascii_lowercase())
                .collect()
        } else {
            Vec::new()
        };
        let snap = self.view.current();
        let mut listed = Vec::new();
        let named = self.named_shards(&snap);
        let shard_count = snap.shard_count();
        for (_, owner) in self.shard_owners(&snap, &named) {
            let c: Arc<dyn Coordinator> = match owner {
                ShardOwner::Local(local) => Arc::new(local),
                ShardOwner::Remote(r) => r,
            };
            listed.extend(c.list_groups(&states).await.into_iter().filter(|l| {
                named.contains(&floe_broker::group::shard_of(&l.group_id, shard_count))
                    && (types.is_empty() || types.iter().any(|t| t == l.group_type.as_str()))
            }));
        }
        let share_wanted = types.is_empty() || types.iter().any(|t| t == "share");
        let shares = if share_wanted {
            self.share_listings(&snap, &named).await
        } else {
            Vec::new()
        };
        let mut resp = ListGroupsResponse::default();
        resp.groups = listed
            .into_iter()
            .map(|l| {
                let mut g = ListedGroup::default();
                g.group_id = GroupId(s(l.group_id));
                g.protocol_type = s(l.protocol_type);
                if version >= 4 {
                    g.group_state = s(l.state);
                }
                if version >= 5 {
                    g.group_type = s(l.group_type.as_str());
                }
                g
            })
            .collect();
        for (id, state) in shares {
            if !states.is_empty()
                && !states
                    .iter()
                    .any(|x| x.eq_ignore_ascii_case(state.as_str()))
            {
                continue;
            }
            let mut g = ListedGroup::default();
            g.group_id = GroupId(s(id));
            g.protocol_type = s("share");
            if version >= 4 {
                g.group_state = s(state.as_str());
            }
            if version >= 5 {
                g.group_type = s("share");
            }
            resp.groups.push(g);
        }
        resp.groups.sort_by(|a, b| a.group_id.0.cmp(&b.group_id.0));
        resp
    }

    /// OffsetDelete: removes committed offsets, except of topics the group's
    /// live members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC), as the
    /// group's coordinator decides ([`floe_broker::group::Coordinator::delete_offsets`]).
    pub async fn offset_delete(
        &self,
        _version: i16,
        req: &OffsetDeleteRequest,
    ) -> OffsetDeleteResponse {
        let mut resp = OffsetDeleteResponse::default();
        let group = req.group_id.0.to_string();
        let c = match self.coordinator(&group) {
            Err(e) => {
                resp.error_code = routing_code(&e);
                return resp;
            }
            Ok(c) => c,
        };
        // A share group's stored offsets are its share state: changed only
        // through DeleteShareGroupOffsets (Kafka: GROUP_ID_NOT_FOUND).
        if matches!(
            self.share_check(&group).await,
            Ok(Some(floe_broker::share::GroupKind::Share))
                | Err(floe_broker::share::ShareGroupError::NonEmptyGroup)
        ) {
            resp.error_code = GroupError::GroupIdNotFound.kafka_code();
            return resp;
        }
        // Decided and written by the coordinator, under the group's gate
        // and fenced by its shard epoch.
        let asked: Vec<(String, u32)> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    // A negative index names no partition: u32::MAX is over
                    // any topic's partition count, so the metadata answers
                    // it UNKNOWN_TOPIC_OR_PARTITION.
                    (
                        t.name.0.to_string(),
                        u32::try_from(p.partition_index).unwrap_or(u32::MAX),
                    )
                })
            })
            .collect();
        let mut results = match c.delete_offsets(&group, &asked).await {
            Ok(r) => r.into_iter(),
            Err(e) => {
                resp.error_code = e.kafka_code();
                return resp;
            }
        };
        for t in &req.topics {
            let mut rt = kafka_protocol::messages::offset_delete_response::OffsetDeleteResponseTopic::default();
            rt.name = t.name.clone();
            for p in &t.partitions {
                let mut rp = kafka_protocol::messages::offset_delete_response::OffsetDeleteResponsePartition::default();
                rp.partition_index = p.partition_index;
                rp.error_code = results
                    .next()
                    .and_then(Result::err)
                    .map_or(0, |e| e.kafka_code());
                rt.partitions.push(rp);
            }
            resp.topics.push(rt);
        }
        resp
    }

    pub async fn delete_groups(
        &self,
        _version: i16,
        req: &DeleteGroupsRequest,
    ) -> DeleteGroupsResponse {
        let mut resp = DeleteGroupsResponse::default();
        for g in &req.groups_names {
            let mut r = DeletableGroupResult::default();
            r.group_id = g.clone();
            r.error_code = match self.coordinator_fenced(g) {
                Err(e) => routing_code(&e),
                Ok((c, fence)) => {
                    // A share group: deleted through its coordinator and
                    // its partitions' owners.
                    if matches!(
                        self.share_check(&g.0).await,
                        Ok(Some(floe_broker::share::GroupKind::Share))
                            | Err(floe_broker::share::ShareGroupError::NonEmptyGroup)
                    ) {
                        r.error_code = self.delete_share_group(&g.0, fence).await;
                        resp.results.push(r);
                        continue;
                    }
                    // A group neither the coordinator nor the metadata knows: GROUP_ID_NOT_FOUND.
                    let unknown = c.describe_group(&g.0).await.state
                        == floe_broker::group::GroupState::Dead
                        && self.committed(&g.0).await.is_ok_and(|o| o.is_empty());
                    if unknown {
                        resp.results.push({
                            let mut r = DeletableGroupResult::default();
                            r.group_id = g.clone();
                            r.error_code = GroupError::GroupIdNotFound.kafka_code();
                            r
                        });
                        continue;
                    }
                    // Its stored state goes with it: decided and written
                    // by the coordinator, fenced by its shard epoch.
                    c.delete_group(&g.0)
                        .await
                        .err()
                        .map_or(0, |e| e.kafka_code())
                }
            };
            resp.results.push(r);
        }
        resp
    }

    /// Deletes a group's stored offsets and membership in the metadata,
    /// fenced by the coordinator the delete was decided with. 0 or Kafka's
    /// code.
    pub(crate) async fn forget_stored_group(&self, group: &str, fence: ShardFence) -> i16 {
        let deleted: Result<mp::Empty, _> = self
            .meta
            .call::<routes::DeleteGroups>(mp::DeleteGroupsRequest {
                groups: vec![group.to_owned()],
                broker: fence.broker.0,
                shard: fence.shard.0,
                shard_epoch: fence.epoch.0,
            })
            .await;
        match deleted {
            Ok(_) => 0,
            Err(e) => group_delete_code(&e),
        }
    }
}

/// The answer to a group's stored state (offsets, membership) not deleted:
/// NOT_COORDINATOR when the coordinator it was decided with no longer owns
/// the group's shard (the client finds the coordinator again and retries),
/// COORDINATOR_NOT_AVAILABLE otherwise.
pub(crate) fn group_delete_code(e: &floe_metadata::MetaError) -> i16 {
    if e.kind() == floe_metadata::ErrorKind::StaleCoordinator {
        ResponseError::NotCoordinator.code()
    } else {
        ResponseError::CoordinatorNotAvailable.code()
    }
}

/// The topics a consumer-protocol subscription (JoinGroup metadata of
/// protocol type "consumer") names: version (i16), then an array of strings.
/// `None` if the bytes are not such a subscription.
/// UNSTABLE_OFFSET_COMMIT for an offset a transaction holds pending.
fn unstable_code(unstable: &std::collections::HashSet<(String, u32)>, topic: &str, p: i32) -> i16 {
    let held = u32::try_from(p).is_ok_and(|p| unstable.contains(&(topic.to_string(), p)));
    if held {
        ResponseError::UnstableOffsetCommit.code()
    } else {
        0
    }
}

/// Per topic: each partition asked for, with its committed offset if any.
type Selection = Vec<(String, Vec<(i32, Option<mp::GroupOffset>)>)>;

/// The partitions an OffsetFetch asks for (all committed ones when `wanted`
/// is None), with their committed offsets if any.
fn select(
    committed: &HashMap<(String, i32), mp::GroupOffset>,
    wanted: Option<Vec<(String, Vec<i32>)>>,
) -> Selection {
    match wanted {
        Some(w) => w
            .into_iter()
            .map(|(t, parts)| {
                let ps = parts
                    .into_iter()
                    .map(|p| (p, committed.get(&(t.clone(), p)).cloned()))
                    .collect();
                (t, ps)
            })
            .collect(),
        None => {
            let mut by: HashMap<String, Vec<(i32, Option<mp::GroupOffset>)>> = HashMap::new();
            for ((t, p), o) in committed {
                by.entry(t.clone()).or_default().push((*p, Some(o.clone())));
            }
            let mut v: Vec<_> = by.into_iter().collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            for (_, ps) in &mut v {
                ps.sort_by_key(|(p, _)| *p);
            }
            v
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delete_decided_with_a_coordinator_that_moved_is_asked_again() {
        use floe_metadata::ids::{BrokerId, Epoch, ShardId};
        let stale = floe_metadata::MetaError::StaleCoordinator {
            shard: ShardId(3),
            broker: BrokerId(1),
            given: Epoch(4),
            owner: Some(BrokerId(2)),
            current: Epoch(5),
        };
        assert_eq!(
            group_delete_code(&stale),
            ResponseError::NotCoordinator.code()
        );
        let down = floe_metadata::MetaError::Unavailable("no leader".into());
        assert_eq!(
            group_delete_code(&down),
            ResponseError::CoordinatorNotAvailable.code()
        );
    }

    #[test]
    fn a_member_meeting_a_moving_coordinator_is_told_to_retry_here() {
        let not_coordinator = ResponseError::NotCoordinator.code();
        assert_eq!(
            member_code(not_coordinator),
            ResponseError::CoordinatorLoadInProgress.code()
        );
        assert_eq!(
            member_code(routing_code(&RoutingError::new(
                RoutingErrorKind::NotCoordinator,
                "moving".to_string()
            ))),
            ResponseError::CoordinatorLoadInProgress.code()
        );
        for other in [
            0,
            GroupError::UnknownMemberId.kafka_code(),
            GroupError::IllegalGeneration.kafka_code(),
        ] {
            assert_eq!(member_code(other), other);
        }
    }
}
