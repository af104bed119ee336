//! DescribeCluster: the proxy is the cluster's only broker and its controller.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::{AdminConfig, str_bytes};

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
    version: i16,
    req: &DescribeClusterRequest,
) -> DescribeClusterResponse {
    let id = &cfg.identity;
    let response = DescribeClusterResponse::default()
        .with_throttle_time_ms(0)
        .with_cluster_id(str_bytes(id.cluster_id.clone()))
        .with_controller_id(BrokerId(id.node_id));
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
    let broker = DescribeClusterBroker::default()
        .with_broker_id(BrokerId(id.node_id))
        .with_host(str_bytes(id.host.clone()))
        .with_port(id.port)
        .with_rack(None);
    response
        .with_error_code(0)
        .with_error_message(None)
        .with_brokers(vec![broker])
        .with_cluster_authorized_operations(operations)
}
