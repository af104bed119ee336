//! DescribeLogDirs: how many bytes each partition holds.
//!
//! A Floe partition lives in the object store, not in a broker's directory,
//! so each proxy answers with one log directory, [`LOG_DIR`], holding the
//! partitions it is named the leader of in Metadata. Tools that ask every
//! broker and add the answers up (`kafka-log-dirs.sh`, Cruise Control,
//! `AdminClient.describeLogDirs`) then count each partition once. The size
//! is what the metadata service's committed ranges of the partition hold
//! from its log start; the object store has no fixed volume, so the total
//! and usable bytes (v4) are `-1`, unknown, as Kafka reports when it cannot
//! tell.

use floe_metadata::api::MetaApi;
use floe_metadata::ids::PartitionKey;
use floe_metadata::model::TopicInfo;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};

use super::{kafka_error_for, str_bytes};
use crate::nodes::KafkaNodes;

/// The one log directory a proxy reports.
pub const LOG_DIR: &str = "object-store";

/// Sizes of the asked partitions (every topic's when `topics` is null) that
/// the node `me` leads.
pub async fn describe_log_dirs(
    meta: &dyn MetaApi,
    nodes: &KafkaNodes,
    me: i32,
    version: i16,
    req: &DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    let response = DescribeLogDirsResponse::default().with_throttle_time_ms(0);
    let asked: Vec<(String, Option<Vec<i32>>)> = match &req.topics {
        Some(topics) => topics
            .iter()
            .map(|t| (t.topic.0.to_string(), Some(t.partitions.clone())))
            .collect(),
        None => match meta.list_topics().await {
            Ok(all) => all.into_iter().map(|t| (t.name, None)).collect(),
            Err(e) => {
                // The top-level error is v3+; the directory's error says it
                // to every version.
                let code = kafka_error_for(&e).code();
                return response
                    .with_error_code(if version >= 3 { code } else { 0 })
                    .with_results(vec![dir(Vec::new()).with_error_code(code)]);
            }
        },
    };
    let mut topics = Vec::new();
    for (name, partitions) in asked {
        // A topic that does not exist (or was deleted meanwhile) is left
        // out, as a Kafka broker leaves out replicas it does not host.
        let Ok(info) = meta.describe_topic(&name).await else {
            continue;
        };
        let led = led_partitions(&info, partitions.as_deref(), nodes, me);
        if !led.is_empty() {
            topics.push(
                DescribeLogDirsTopic::default()
                    .with_name(TopicName(str_bytes(name)))
                    .with_partitions(led),
            );
        }
    }
    response.with_error_code(0).with_results(vec![dir(topics)])
}

/// The partitions of `info` (those in `only`, if given) whose leader is `me`,
/// with their stored bytes.
fn led_partitions(
    info: &TopicInfo,
    only: Option<&[i32]>,
    nodes: &KafkaNodes,
    me: i32,
) -> Vec<DescribeLogDirsPartition> {
    info.partitions
        .iter()
        .filter(|p| only.is_none_or(|o| o.contains(&(p.partition as i32))))
        .filter(|p| nodes.leader(&PartitionKey::new(info.id, p.partition)).id == me)
        .map(|p| {
            DescribeLogDirsPartition::default()
                .with_partition_index(p.partition as i32)
                .with_partition_size(
                    p.stored_bytes
                        .map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX)),
                )
                .with_offset_lag(0)
                .with_is_future_key(false)
        })
        .collect()
}

fn dir(topics: Vec<DescribeLogDirsTopic>) -> DescribeLogDirsResult {
    DescribeLogDirsResult::default()
        .with_error_code(0)
        .with_log_dir(str_bytes(LOG_DIR))
        .with_topics(topics)
        .with_total_bytes(-1)
        .with_usable_bytes(-1)
}
