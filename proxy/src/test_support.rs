//! Helpers for this crate's unit tests.

use std::sync::Arc;

use floe_metadata::ids::{BrokerId, Epoch, TopicId};
use floe_metadata::model::{PartitionInfo, TopicInfo};
use floe_metadata::watch::ClusterSnapshot;

/// Puts into `snap` a topic `name` (id `id`) of `count` partitions as the
/// cluster view holds it, partition `p` owned by `owner(p)` at `epoch(p)`.
pub(crate) fn add_topic(
    snap: &mut ClusterSnapshot,
    name: &str,
    id: u128,
    count: u32,
    owner: impl Fn(u32) -> Option<u32>,
    epoch: impl Fn(u32) -> u64,
) {
    let info = Arc::new(TopicInfo {
        name: name.to_string(),
        id: TopicId(uuid::Uuid::from_u128(id)),
        partition_count: count,
        configs: Vec::new(),
        partitions: (0..count)
            .map(|p| PartitionInfo {
                partition: p,
                owner: owner(p).map(BrokerId),
                epoch: Epoch(epoch(p)),
                log_start_offset: 0,
                high_watermark: 0,
                handover_to: None,
                stored_bytes: None,
            })
            .collect(),
    });
    snap.by_id.insert(info.id, info.clone());
    snap.topics.insert(name.to_string(), info);
}
