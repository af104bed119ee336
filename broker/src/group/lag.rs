//! Consumer lag of the groups this broker coordinates, for Prometheus
//! (`floe_broker_group_lag` and `floe_broker_group_lag_max`): every
//! `--group-lag-interval-ms`, for each classic and consumer group of the
//! shards served that has committed offsets, the sum and the max over its
//! partitions of the partition's end offset minus the committed offset (at
//! least 0). End offsets are asked of each partition's owner once per
//! round ([`EndOffsets`], however many groups commit on the partition); a
//! round is bounded in groups ([`MAX_GROUPS`]), partitions
//! ([`MAX_PARTITIONS`]) and time ([`ROUND_TIMEOUT`]).
//!
//! Each round replaces the whole of this broker's series, so a group
//! deleted, left without offsets or whose shard moved away is gone from
//! `/metrics` after the next round (see `crate::metrics::set_group_lag`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::{GroupType, service::GroupService};

/// Groups one round looks at, at most (the first by id).
pub const MAX_GROUPS: usize = 10_000;
/// Distinct partitions one round asks the end offset of, at most.
pub const MAX_PARTITIONS: usize = 100_000;
/// How long one round may take; a round not done by then removes this
/// broker's lag series until one is.
pub const ROUND_TIMEOUT: Duration = Duration::from_secs(20);
/// Calls (offset fetches, end offsets) one round has in flight at once.
const CONCURRENCY: usize = 16;

/// A partition by topic name and index, as offsets are committed.
pub type TopicPartition = (String, u32);

/// A group, its type and its committed offsets.
type Committed = (String, GroupType, Vec<(TopicPartition, i64)>);

/// A group's lag: over its partitions with a committed offset and a known
/// end offset, the sum and the max of (end − committed, at least 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lag {
    pub sum: i64,
    pub max: i64,
}

/// One group's lag, as the metrics report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLag {
    pub group: String,
    pub group_type: GroupType,
    pub lag: Lag,
}

/// The end offset (high watermark) of a partition, from its owner.
#[async_trait::async_trait]
pub trait EndOffsets: Send + Sync {
    /// `None` when the partition is unknown, has no owner, or its owner did
    /// not answer: the partition is left out of its groups' lag.
    async fn end_offset(&self, topic: &str, partition: u32) -> Option<i64>;
}

/// The lag of a group with `committed` offsets, given the partitions' end
/// offsets: partitions without an end offset are skipped, and a committed
/// offset past the end (the log truncated, or a commit ahead of the data)
/// counts 0. `None` when no partition has both.
pub fn lag_of<'a>(
    committed: impl IntoIterator<Item = (&'a TopicPartition, i64)>,
    ends: &HashMap<TopicPartition, i64>,
) -> Option<Lag> {
    let mut lag: Option<Lag> = None;
    for (tp, offset) in committed {
        let Some(end) = ends.get(tp) else { continue };
        let behind = end.saturating_sub(offset).max(0);
        let l = lag.get_or_insert(Lag { sum: 0, max: 0 });
        l.sum = l.sum.saturating_add(behind);
        l.max = l.max.max(behind);
    }
    lag
}

impl GroupService {
    /// Every `group_lag_interval` until the broker stops (never when it is
    /// `None`): one round of [`GroupService::lag_round`], its result
    /// published as this broker's lag series. The series are removed when
    /// the broker stops.
    pub(crate) async fn report_lag(self: Arc<Self>, ends: Arc<dyn EndOffsets>) {
        let Some(every) = self.partitions.config().group_lag_interval else {
            return;
        };
        let broker = self.partitions.id();
        let partitions = self.partitions.clone();
        crate::coordinator::timers::every(partitions, every, || {
            let this = self.clone();
            let ends = ends.clone();
            async move {
                match tokio::time::timeout(ROUND_TIMEOUT, this.lag_round(ends)).await {
                    Ok(lags) => crate::metrics::set_group_lag(
                        broker,
                        lags.into_iter()
                            .map(|l| crate::metrics::GroupLag {
                                group: l.group,
                                group_type: l.group_type.as_str(),
                                sum: l.lag.sum,
                                max: l.lag.max,
                            })
                            .collect(),
                    ),
                    // No value rather than an old one.
                    Err(_) => {
                        tracing::warn!(timeout = ?ROUND_TIMEOUT, "group lag round not done in time; its series removed until one is");
                        crate::metrics::set_group_lag(broker, Vec::new());
                    }
                }
            }
        })
        .await;
        crate::metrics::set_group_lag(broker, Vec::new());
    }

    /// The lag of every group this broker coordinates with committed
    /// offsets (at most [`MAX_GROUPS`] groups and [`MAX_PARTITIONS`]
    /// partitions), sorted by group id.
    pub(crate) async fn lag_round(&self, ends: Arc<dyn EndOffsets>) -> Vec<GroupLag> {
        let mut groups = self.coordinator().lag_candidates();
        groups.sort_by(|a, b| a.0.cmp(&b.0));
        groups.truncate(MAX_GROUPS);
        let meta = self.partitions.meta().clone();
        let fetched: Vec<Committed> =
            futures::stream::iter(groups)
                .map(|(group, group_type)| {
                    let meta = meta.clone();
                    async move {
                        match meta.fetch_offsets(&group).await {
                            Ok(offsets) => {
                                let offsets = offsets
                                    .into_iter()
                                    .filter(|o| o.committed.offset >= 0)
                                    .map(|o| ((o.topic, o.partition), o.committed.offset))
                                    .collect();
                                Some((group, group_type, offsets))
                            }
                            Err(e) => {
                                tracing::debug!(group = %group, error = %e, "group offsets not read for its lag");
                                None
                            }
                        }
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .filter_map(std::future::ready)
                .collect()
                .await;
        // Each partition once, however many groups commit on it.
        let mut wanted: HashSet<&TopicPartition> = HashSet::new();
        let mut kept = Vec::new();
        for (group, group_type, offsets) in &fetched {
            let new = offsets
                .iter()
                .filter(|(tp, _)| !wanted.contains(tp))
                .count();
            if wanted.len() + new > MAX_PARTITIONS {
                tracing::debug!(group = %group, "group lag left out: over the partitions of a round");
                continue;
            }
            wanted.extend(offsets.iter().map(|(tp, _)| tp));
            kept.push((group, *group_type, offsets));
        }
        let wanted: Vec<TopicPartition> = wanted.into_iter().cloned().collect();
        let ends: HashMap<TopicPartition, i64> = futures::stream::iter(wanted)
            .map(|tp| {
                let ends = ends.clone();
                async move { ends.end_offset(&tp.0, tp.1).await.map(|end| (tp, end)) }
            })
            .buffer_unordered(CONCURRENCY)
            .filter_map(std::future::ready)
            .collect()
            .await;
        let shard_count = self.shards.shard_count();
        let mut lags: Vec<GroupLag> = kept
            .into_iter()
            // A shard handed over during the round: its groups are the new
            // owner's to report.
            .filter(|(group, _, _)| self.shards.serves_id(group, shard_count))
            .filter_map(|(group, group_type, offsets)| {
                lag_of(offsets.iter().map(|(tp, o)| (tp, *o)), &ends).map(|lag| GroupLag {
                    group: group.clone(),
                    group_type,
                    lag,
                })
            })
            .collect();
        lags.sort_by(|a, b| a.group.cmp(&b.group));
        lags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, partition: u32) -> TopicPartition {
        (topic.to_string(), partition)
    }

    #[test]
    fn lag_is_the_sum_and_max_of_end_minus_committed() {
        let ends = HashMap::from([(tp("t", 0), 10), (tp("t", 1), 7), (tp("u", 0), 100)]);
        let committed = [(tp("t", 0), 4), (tp("t", 1), 7), (tp("u", 0), 1)];
        let lag = lag_of(committed.iter().map(|(t, o)| (t, *o)), &ends);
        assert_eq!(
            lag,
            Some(Lag {
                sum: 6 + 99,
                max: 99
            })
        );
    }

    #[test]
    fn lag_clamps_a_commit_past_the_end_to_zero() {
        let ends = HashMap::from([(tp("t", 0), 10), (tp("t", 1), 5)]);
        let committed = [(tp("t", 0), 15), (tp("t", 1), 2)];
        let lag = lag_of(committed.iter().map(|(t, o)| (t, *o)), &ends);
        assert_eq!(lag, Some(Lag { sum: 3, max: 3 }));
    }

    #[test]
    fn lag_skips_partitions_without_an_end_offset() {
        let ends = HashMap::from([(tp("t", 0), 10)]);
        let committed = [(tp("t", 0), 8), (tp("gone", 0), 0)];
        let lag = lag_of(committed.iter().map(|(t, o)| (t, *o)), &ends);
        assert_eq!(lag, Some(Lag { sum: 2, max: 2 }));
        let none: [(TopicPartition, i64); 1] = [(tp("gone", 0), 0)];
        assert_eq!(lag_of(none.iter().map(|(t, o)| (t, *o)), &ends), None);
    }

    #[test]
    fn lag_of_a_group_caught_up_is_zero() {
        let ends = HashMap::from([(tp("t", 0), 10), (tp("t", 1), 3)]);
        let committed = [(tp("t", 0), 10), (tp("t", 1), 3)];
        let lag = lag_of(committed.iter().map(|(t, o)| (t, *o)), &ends);
        assert_eq!(lag, Some(Lag { sum: 0, max: 0 }));
    }
}
