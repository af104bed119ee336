//! DescribeCluster: the live proxies are the cluster's brokers, the one with
//! the lowest id its controller (as Metadata answers).

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::{AdminConfig, str_bytes};
use crate::nodes::KafkaNodes;

/// DescribeCluster endpoint types.
const ENDPOINT_BROKERS: i8 = 1;
const ENDPOINT_CONTROLLERS: i8 = 2;

/// `cluster_authorized_operations` when the client did not ask for them.
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;

/// Kafka's ACL operations that apply to the cluster resource (CREATE,
/// ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
/// IDEMPOTENT_WRITE). Floe has no authorization, so all are allowed, as a
/// Kafka broker without an authorizer reports.
const CLUSTER_OPERATIONS: [u8; 7] = [5, 7, 8, 9, 10, 11, 12];

pub(super) fn describe_cluster(
    cfg: &AdminConfig,
    nodes: &KafkaNodes,
    version: i16,
    req: &DescribeClusterRequest,
) -> DescribeClusterResponse {
    let response = DescribeClusterResponse::default()
        .with_throttle_time_ms(0)
        .with_cluster_id(str_bytes(cfg.identity.cluster_id.clone()))
        .with_controller_id(BrokerId(nodes.controller().id));
    // v0 has no endpoint type: it describes brokers.
    let endpoint = if version >= 1 {
        req.endpoint_type
    } else {
        ENDPOINT_BROKERS
    };
    if endpoint != ENDPOINT_BROKERS {
        let (error, message) = if endpoint == ENDPOINT_CONTROLLERS {
            (
                ResponseError::MismatchedEndpointType,
                "this is a broker endpoint; Floe's controllers are not reachable over Kafka",
            )
        } else {
            (
                ResponseError::UnsupportedEndpointType,
                "unknown endpoint type",
            )
        };
        return response
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(message)));
    }
    let operations = if req.include_cluster_authorized_operations {
        CLUSTER_OPERATIONS
            .iter()
            .fold(0i32, |bits, op| bits | (1 << op))
    } else {
        OPERATIONS_NOT_ASKED
    };
    let brokers = nodes
        .all()
        .iter()
        .map(|n| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(n.id))
                .with_host(str_bytes(n.host.clone()))
                .with_port(n.port)
                .with_rack(None)
        })
        .collect();
    response
        .with_error_code(0)
        .with_error_message(None)
        .with_brokers(brokers)
        .with_cluster_authorized_operations(operations)
}
