//! OffsetCommit on the coordinator: the member is checked by the group
//! coordinator, each offset's metadata against `offset.metadata.max.bytes`,
//! and the rest is stored in the metadata with a [`ShardFence`]: this
//! broker's id, the group's shard and the shard epoch it holds. The metadata
//! refuses the fence once the shard has moved (`StaleCoordinator`), which is
//! answered NOT_COORDINATOR, so a coordinator that was paused past a move
//! cannot write old offsets over the new coordinator's.

use floe_metadata::ErrorKind as MetaKind;
use floe_metadata::api::calls::GroupOffset;
use floe_metadata::command::{CommittedOffset, ShardFence};
use floe_metadata::ids::{Epoch, ShardId};

use super::service::GroupService;
use super::{CommitParams, GroupCoordinator, GroupError, shard_of};

impl GroupService {
    /// OffsetCommit of `p` at `c`, the coordinator this broker serves the
    /// group's shard with (see [`GroupService::coordinator_of`]).
    pub(crate) async fn commit_offsets(
        &self,
        c: &GroupCoordinator,
        p: CommitParams,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        // Not between a delete's decision and its write.
        let gate = self.gate(&p.group_id);
        let _held = gate.lock().await;
        let shards = self.shards.shard_count();
        c.validate_commit(
            &p.group_id,
            p.generation_id,
            &p.member_id,
            p.group_instance_id.as_deref(),
        )?;
        let shard = shard_of(&p.group_id, shards);
        let epoch = self
            .shards
            .fence(shard)
            .ok_or(GroupError::NotCoordinator)?
            .epoch
            .0;
        let max = c.config().offset_metadata_max_bytes;
        let mut results: Vec<Result<(), GroupError>> = vec![Ok(()); p.offsets.len()];
        let mut stored = Vec::new();
        for (i, o) in p.offsets.iter().enumerate() {
            if o.metadata.len() > max {
                results[i] = Err(GroupError::OffsetMetadataTooLarge);
            } else {
                stored.push(i);
            }
        }
        if results.iter().any(Result::is_err) {
            tracing::info!(
                group = %p.group_id,
                refused = results.len() - stored.len(),
                max,
                "offset commit metadata above offset.metadata.max.bytes"
            );
        }
        if stored.is_empty() {
            return Ok(results);
        }
        let offsets: Vec<GroupOffset> = stored
            .iter()
            .map(|&i| {
                let o = &p.offsets[i];
                GroupOffset {
                    topic: o.topic.clone(),
                    partition: o.partition,
                    committed: CommittedOffset {
                        offset: o.offset,
                        leader_epoch: o.leader_epoch,
                        metadata: o.metadata.clone(),
                    },
                }
            })
            .collect();
        let fence = ShardFence {
            broker: self.partitions.broker_id(),
            shard: ShardId(shard),
            epoch: Epoch(epoch),
        };
        match self
            .partitions
            .meta()
            .commit_offsets(fence, &p.group_id, &offsets)
            .await
        {
            Ok(unknown) => {
                for (topic, partition) in &unknown {
                    for &i in &stored {
                        let o = &p.offsets[i];
                        if &o.topic == topic && o.partition == *partition {
                            results[i] = Err(GroupError::UnknownTopicOrPartition);
                        }
                    }
                }
                c.set_has_offsets(&p.group_id, true);
                Ok(results)
            }
            Err(e) => match e.kind() {
                MetaKind::StaleCoordinator => {
                    tracing::info!(group = %p.group_id, shard, epoch, error = %e, "offset commit fenced: the shard moved");
                    Err(GroupError::NotCoordinator)
                }
                MetaKind::TooLarge => {
                    tracing::info!(group = %p.group_id, offsets = stored.len(), error = %e, "offset commit above the metadata's command bound");
                    for &i in &stored {
                        results[i] = Err(GroupError::OffsetMetadataTooLarge);
                    }
                    Ok(results)
                }
                MetaKind::InvalidRequest => Err(GroupError::InvalidGroupId),
                _ => {
                    tracing::warn!(group = %p.group_id, error = %e, "storing committed offsets failed");
                    Err(GroupError::CoordinatorNotAvailable)
                }
            },
        }
    }
}
