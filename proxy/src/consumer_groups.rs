//! Consumer groups of the new protocol (KIP-848): ConsumerGroupHeartbeat
//! and ConsumerGroupDescribe, handed to the group's coordinator like the
//! classic group requests (`crate::groups`). The coordinator assigns the
//! partitions (`floe_broker::group::assignor`); topics travel by id.

use floe_broker::group::GroupError;
use floe_broker::group::assignor::Assignment;
use floe_broker::group::consumer::ConsumerHeartbeat;
use floe_types::TopicId;
use kafka_protocol::messages::consumer_group_describe_response::{
    self as describe, DescribedGroup,
};
use kafka_protocol::messages::consumer_group_heartbeat_response as beat;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::errors::routing_code;
use crate::groups::ClientInfo;
use crate::handlers::Context;

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn owned_from(parts: &[consumer_group_heartbeat_request::TopicPartitions]) -> Assignment {
    let mut out = Assignment::new();
    for t in parts {
        out.entry(TopicId(t.topic_id))
            .or_default()
            .extend(t.partitions.iter().copied());
    }
    out
}

/// Kafka's message for an error, where it helps the client's user.
fn message(e: &GroupError) -> Option<StrBytes> {
    match e {
        GroupError::InvalidRequest(_)
        | GroupError::UnsupportedAssignor
        | GroupError::GroupIdNotFound => Some(s(e.to_string())),
        _ => None,
    }
}

impl Context {
    pub async fn consumer_group_heartbeat(
        &self,
        _version: i16,
        req: &ConsumerGroupHeartbeatRequest,
        client: &ClientInfo,
    ) -> ConsumerGroupHeartbeatResponse {
        let mut r = ConsumerGroupHeartbeatResponse::default();
        r.member_epoch = req.member_epoch;
        let c = match self.coordinator(&req.group_id.0) {
            Err(e) => {
                r.error_code = routing_code(&e);
                return r;
            }
            Ok(c) => c,
        };
        // v0 lets the coordinator make the member id; from v1 the client
        // makes it, and an empty one is refused.
        let member_id = if req.member_id.is_empty() && req.member_epoch == 0 {
            uuid::Uuid::new_v4().to_string()
        } else {
            req.member_id.to_string()
        };
        let hb = ConsumerHeartbeat {
            group_id: req.group_id.0.to_string(),
            member_id,
            member_epoch: req.member_epoch,
            instance_id: req.instance_id.as_ref().map(|i| i.to_string()),
            rack_id: req.rack_id.as_ref().map(|i| i.to_string()),
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            subscribed_topic_names: req
                .subscribed_topic_names
                .as_ref()
                .map(|ts| ts.iter().map(|t| t.0.to_string()).collect()),
            subscribed_topic_regex: req.subscribed_topic_regex.as_ref().map(|x| x.to_string()),
            server_assignor: req.server_assignor.as_ref().map(|x| x.to_string()),
            owned: req.topic_partitions.as_deref().map(owned_from),
            client_id: client.client_id.clone(),
            client_host: client.host.clone(),
        };
        match c.consumer_heartbeat(hb).await {
            Err(e) => {
                r.error_code = e.kafka_code();
                r.error_message = message(&e);
            }
            Ok(a) => {
                r.member_id = Some(s(a.member_id));
                r.member_epoch = a.member_epoch;
                r.heartbeat_interval_ms = a.heartbeat_interval_ms;
                r.assignment = a.assignment.map(|a| {
                    let mut out = beat::Assignment::default();
                    out.topic_partitions = a
                        .into_iter()
                        .map(|(topic, parts)| {
                            let mut tp = beat::TopicPartitions::default();
                            tp.topic_id = topic.0;
                            tp.partitions = parts.into_iter().collect();
                            tp
                        })
                        .collect();
                    out
                });
            }
        }
        r
    }

    pub async fn consumer_group_describe(
        &self,
        _version: i16,
        req: &ConsumerGroupDescribeRequest,
    ) -> ConsumerGroupDescribeResponse {
        let snap = self.view.current();
        let assignment = |a: Assignment| {
            let mut out = describe::Assignment::default();
            out.topic_partitions = a
                .into_iter()
                .map(|(topic, parts)| {
                    let mut tp = describe::TopicPartitions::default();
                    tp.topic_id = topic.0;
                    tp.topic_name = TopicName(s(snap
                        .by_id
                        .get(&topic)
                        .map(|t| t.name.clone())
                        .unwrap_or_default()));
                    tp.partitions = parts.into_iter().collect();
                    tp
                })
                .collect();
            out
        };
        let mut resp = ConsumerGroupDescribeResponse::default();
        for id in &req.group_ids {
            let mut d = DescribedGroup::default();
            d.group_id = id.clone();
            d.authorized_operations = i32::MIN;
            let described = match self.coordinator(id) {
                Err(e) => Err(routing_code(&e)),
                Ok(c) => c.consumer_describe(id).await.map_err(|e| {
                    d.error_message = match e {
                        GroupError::GroupIdNotFound => {
                            Some(s(format!("Group {} is not a consumer group.", id.0)))
                        }
                        _ => message(&e),
                    };
                    e.kafka_code()
                }),
            };
            match described {
                Err(code) => d.error_code = code,
                Ok(g) => {
                    d.group_state = s(g.state);
                    d.group_epoch = g.group_epoch;
                    d.assignment_epoch = g.assignment_epoch;
                    d.assignor_name = s(g.assignor_name);
                    d.members = g
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut x = describe::Member::default();
                            x.member_id = s(m.member_id);
                            x.instance_id = m.instance_id.map(s);
                            x.rack_id = m.rack_id.map(s);
                            x.member_epoch = m.member_epoch;
                            x.client_id = s(m.client_id);
                            x.client_host = s(m.client_host);
                            x.subscribed_topic_names = m
                                .subscribed_topic_names
                                .into_iter()
                                .map(|t| TopicName(s(t)))
                                .collect();
                            x.assignment = assignment(m.assignment);
                            x.target_assignment = assignment(m.target_assignment);
                            // 1: a member of the consumer protocol (v1).
                            x.member_type = 1;
                            x
                        })
                        .collect();
                }
            }
            resp.groups.push(d);
        }
        resp
    }
}
