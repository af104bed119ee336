//! Kafka admin requests answered from the metadata service: CreateTopics,
//! DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
//! IncrementalAlterConfigs and DescribeCluster; DescribeLogDirs
//! ([`log_dirs`]) also needs this proxy's own id, so the connection loop
//! calls it directly.
//!
//! The connection loop hands every decoded request to [`handle_admin`]; it
//! answers the ones above and returns `None` for the rest. Every answer is
//! built for the request's version: fields a version lacks keep their
//! defaults so that the response encodes at that version.
//!
//! What Floe does differently from a Kafka broker, and why:
//!
//! - **The proxies are the brokers** a client sees ([`crate::nodes`]);
//!   the brokers behind them are an internal detail. DescribeCluster lists
//!   the live proxies; broker configs are those of any of them.
//! - **Replication factor**: the data of a partition is made durable by the
//!   object store, not by copies on brokers. A CreateTopics replication
//!   factor of `-1` or any value of at least 1 is accepted, and every topic
//!   reports a replication factor of 1. Explicit replica assignments (in
//!   CreateTopics and CreatePartitions) are refused with `INVALID_REQUEST`:
//!   partitions are placed by the metadata controller.
//! - **Configs**: topic configs are those of `floe_metadata::topic_config`;
//!   an unknown key or a bad value is `INVALID_CONFIG`. Broker configs are
//!   static (the proxy's own settings) and cannot be altered.
//!   IncrementalAlterConfigs APPEND/SUBTRACT on a config that is not a list
//!   is `INVALID_CONFIG`, as Kafka answers it.
//! - **`validate_only`** is answered by running the same checks the
//!   metadata service runs (`validate_topic_name`, `TopicConfig`) without
//!   proposing a change.
//! - **Timeouts** (`timeout_ms`) are not used: an answer is sent once the
//!   metadata service committed the change, or its client gave up. The
//!   connection loop then holds a CreateTopics or CreatePartitions answer
//!   until this proxy's view shows the new topics and every new partition
//!   with an owner (at most `handlers::CREATED_VISIBLE_WAIT`; owners only
//!   while a broker is live), so that the client's next Metadata request
//!   finds their leaders and its next Produce finds the topic.
//!
//! The versions answered are those kafka-protocol 0.18 can decode and
//! encode ([`ADMIN_API_VERSIONS`]); Kafka 4 removed the older ones too.

mod cluster;
mod configs;
pub mod log_dirs;
pub mod quotas;
pub mod scram;
#[cfg(test)]
mod tests;
mod topics;

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use floe_metadata::api::MetaApi;
use floe_metadata::error::{ErrorKind, MetaError};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::nodes::KafkaNodes;

/// How the proxy presents itself to Kafka clients: the cluster's id, and
/// this proxy as a broker (its id when it is the only proxy, or until it is
/// registered; its advertised address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterIdentity {
    pub cluster_id: String,
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// Settings of the admin requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// Partitions of a topic created with `num_partitions = -1`.
    pub default_partitions: u32,
    pub identity: ClusterIdentity,
    /// KIP-368's session lifetime of SASL connections in ms (0: none),
    /// described as the broker config `connections.max.reauth.ms`.
    pub connections_max_reauth_ms: u64,
}

/// The admin APIs answered here with their lowest and highest version, for
/// ApiVersions.
pub const ADMIN_API_VERSIONS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
];

/// Answers an admin request from the metadata service. Returns `None` when
/// `body` is not one of the admin requests of this module.
/// `nodes` are the brokers clients are shown (DescribeCluster, broker configs).
pub async fn handle_admin(
    meta: &dyn MetaApi,
    cfg: &AdminConfig,
    nodes: &KafkaNodes,
    version: i16,
    body: &RequestKind,
) -> Option<ResponseKind> {
    Some(match body {
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(topics::create_topics(meta, cfg, version, r).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(topics::delete_topics(meta, version, r).await)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(topics::create_partitions(meta, r).await)
        }
        RequestKind::DescribeConfigs(r) => ResponseKind::DescribeConfigs(
            configs::describe_configs(meta, cfg, nodes, version, r).await,
        ),
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(configs::alter_configs(meta, r).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            ResponseKind::IncrementalAlterConfigs(configs::incremental_alter_configs(meta, r).await)
        }
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(cluster::describe_cluster(cfg, nodes, version, r))
        }
        _ => return None,
    })
}

/// The Kafka error a client expects for a metadata error. Admin requests
/// refine some of these where the request says more (a bad topic name is
/// `INVALID_TOPIC_EXCEPTION`, a bad partition count `INVALID_PARTITIONS`).
pub fn kafka_error_for(e: &MetaError) -> ResponseError {
    match e.kind() {
        ErrorKind::TopicExists => ResponseError::TopicAlreadyExists,
        ErrorKind::UnknownTopic | ErrorKind::UnknownPartition => {
            ResponseError::UnknownTopicOrPartition
        }
        ErrorKind::InvalidConfig => ResponseError::InvalidConfig,
        ErrorKind::InvalidRequest => ResponseError::InvalidRequest,
        // Ownership moved: the client refreshes its metadata and retries.
        ErrorKind::StaleEpoch | ErrorKind::NotOwner => ResponseError::NotLeaderOrFollower,
        // A commit that did not start at the committed end: internal to a
        // broker, never the client's doing.
        ErrorKind::OffsetMismatch | ErrorKind::ExportConflict => ResponseError::UnknownServerError,
        ErrorKind::UnknownBroker => ResponseError::BrokerNotAvailable,
        // The client already followed leaders until its deadline; retrying
        // later may help.
        ErrorKind::NotLeader | ErrorKind::Unavailable => ResponseError::RequestTimedOut,
        ErrorKind::Storage => ResponseError::KafkaStorageError,
        // Above the metadata's command bound (`--meta-max-command-bytes`):
        // the same request would be refused again.
        ErrorKind::TooLarge => ResponseError::InvalidRequest,
        ErrorKind::StaleCoordinator => ResponseError::NotCoordinator,
        ErrorKind::NotFound => ResponseError::ResourceNotFound,
        // Only a registration is refused for its version; never a client's.
        ErrorKind::Incompatible => ResponseError::UnsupportedVersion,
    }
}

/// Why one item of an admin request (a topic, a resource) was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    error: ResponseError,
    message: String,
}

impl Refusal {
    fn new(error: ResponseError, message: impl Into<String>) -> Self {
        Self {
            error,
            message: message.into(),
        }
    }

    /// A metadata error about `topic`, with a message for a Kafka user.
    fn from_meta(e: &MetaError, topic: &str) -> Self {
        let message = match e {
            MetaError::TopicExists(_) => format!("topic '{topic}' already exists"),
            MetaError::UnknownTopic(_) => format!("topic '{topic}' does not exist"),
            MetaError::InvalidConfig(m)
            | MetaError::InvalidRequest(m)
            | MetaError::Unavailable(m)
            | MetaError::Storage(m) => m.clone(),
            other => other.to_string(),
        };
        Self::new(kafka_error_for(e), message)
    }

    fn code(&self) -> i16 {
        self.error.code()
    }

    fn message(&self) -> Option<StrBytes> {
        Some(str_bytes(self.message.clone()))
    }
}

fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// Kafka's topic name rule, as the metadata service applies it.
fn check_topic_name(name: &str) -> Result<(), Refusal> {
    floe_metadata::state::validate_topic_name(name).map_err(|e| {
        let message = match e {
            MetaError::InvalidRequest(m) => m,
            other => other.to_string(),
        };
        Refusal::new(ResponseError::InvalidTopicException, message)
    })
}

/// The items that occur more than once.
fn repeated<T: Eq + Hash>(items: impl IntoIterator<Item = T>) -> HashSet<T> {
    let mut seen = HashMap::new();
    for item in items {
        *seen.entry(item).or_insert(0u32) += 1;
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(item, _)| item)
        .collect()
}
