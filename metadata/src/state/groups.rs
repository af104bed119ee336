//! Groups: consumer and share groups' committed offsets (and the share
//! state partitions' owners keep under a group), groups' configs, and
//! classic groups' membership as their coordinators stored it. Writes from
//! a coordinator are fenced by its shard's epoch, and share state by the
//! partition's; both fences are the topics concern's
//! ([`super::TopicsState`]), which the rules here read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::{CommittedOffset, ShardFence};
use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch, PartitionKey};
use crate::state::topics::TopicsState;

#[cfg(test)]
mod tests;

/// A group's committed offsets by (topic name, partition).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GroupOffsets(
    #[serde(with = "crate::serde_pairs")] pub BTreeMap<(String, u32), CommittedOffset>,
);

impl std::ops::Deref for GroupOffsets {
    type Target = BTreeMap<(String, u32), CommittedOffset>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for GroupOffsets {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// Groups' offsets, configs and stored membership, by group id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupsState {
    /// Committed offsets (and share state), by group id.
    pub offsets: BTreeMap<String, GroupOffsets>,
    /// Groups' configs (those with any set), by group id.
    pub configs: BTreeMap<String, crate::group_config::GroupConfigs>,
    /// Classic groups' membership as their coordinators stored it, by
    /// group id (see [`crate::command::Command::StoreGroup`]): only groups
    /// with members have one.
    pub records: BTreeMap<String, Vec<u8>>,
}

/// The reply's unknown (topic, partition)s of an offset commit.
pub(crate) type Unknown = Vec<(String, u32)>;

impl GroupsState {
    /// Stores offsets of existing partitions through the group's current
    /// coordinator; others are returned as unknown and not stored.
    pub(crate) fn commit_offsets(
        &mut self,
        topics: &TopicsState,
        group: &str,
        offsets: &[(String, u32, CommittedOffset)],
        fence: Option<&ShardFence>,
    ) -> Result<Unknown, MetaError> {
        if group.is_empty() {
            return Err(MetaError::InvalidRequest("empty group id".into()));
        }
        if crate::command::is_reserved_group(group) {
            return Err(MetaError::InvalidRequest(format!(
                "group id {group} is reserved for Floe's own use"
            )));
        }
        if let Some(f) = fence {
            topics.check_fence(f)?;
        }
        let (known, unknown): (Vec<_>, Vec<_>) = offsets
            .iter()
            .partition(|(t, p, _)| topics.has_partition(t, *p));
        if !known.is_empty() {
            let g = self.offsets.entry(group.to_string()).or_default();
            for (topic, partition, off) in known {
                g.insert((topic.clone(), *partition), off.clone());
            }
        }
        Ok(unknown
            .into_iter()
            .map(|(t, p, _)| (t.clone(), *p))
            .collect())
    }

    /// Stores (or forgets) a classic group's membership, from the
    /// coordinator of the group's shard (see
    /// [`crate::command::Command::StoreGroup`]).
    pub(crate) fn store_group(
        &mut self,
        topics: &TopicsState,
        fence: &ShardFence,
        group: &str,
        record: Option<&[u8]>,
    ) -> Result<(), MetaError> {
        if group.is_empty() {
            return Err(MetaError::InvalidRequest("empty group id".into()));
        }
        check_group_fence(topics, group, fence)?;
        match record {
            Some(r) => {
                self.records.insert(group.to_string(), r.to_vec());
            }
            None => {
                self.records.remove(group);
            }
        }
        Ok(())
    }

    /// Deletes a group's offsets of these partitions, from the coordinator
    /// of the group's shard.
    pub(crate) fn delete_offsets_fenced(
        &mut self,
        topics: &TopicsState,
        group: &str,
        partitions: &[(String, u32)],
        fence: &ShardFence,
    ) -> Result<(), MetaError> {
        check_group_fence(topics, group, fence)?;
        self.delete_offsets(group, partitions.iter().cloned());
        Ok(())
    }

    /// Forgets a group, from the coordinator of the group's shard.
    pub(crate) fn delete_group_fenced(
        &mut self,
        topics: &TopicsState,
        group: &str,
        fence: &ShardFence,
    ) -> Result<(), MetaError> {
        check_group_fence(topics, group, fence)?;
        self.delete_group(group);
        Ok(())
    }

    /// Forgets a group: its committed offsets and its stored membership.
    pub(crate) fn delete_group(&mut self, group: &str) {
        self.offsets.remove(group);
        self.records.remove(group);
    }

    /// Deletes a group's offsets of these (topic, partition)s; a group left
    /// with none is gone.
    pub(crate) fn delete_offsets(
        &mut self,
        group: &str,
        keys: impl IntoIterator<Item = (String, u32)>,
    ) {
        if let Some(g) = self.offsets.get_mut(group) {
            for key in keys {
                g.remove(&key);
            }
            if g.is_empty() {
                self.offsets.remove(group);
            }
        }
    }

    /// Forgets every group's offsets of a deleted topic (a group left with
    /// none stays, empty).
    pub(crate) fn forget_topic(&mut self, name: &str) {
        for offsets in self.offsets.values_mut() {
            offsets.retain(|(t, _), _| t != name);
        }
    }

    /// Stores a share group's state of a partition, from its owner at its
    /// epoch (see [`crate::command::Command::ShareState`]).
    pub(crate) fn share_state(
        &mut self,
        topics: &TopicsState,
        (broker, partition, epoch): (BrokerId, PartitionKey, Epoch),
        group: &str,
        state: &CommittedOffset,
    ) -> Result<(), MetaError> {
        if group.is_empty() {
            return Err(MetaError::InvalidRequest("empty group id".into()));
        }
        let key = topics.owned_offset_key(broker, partition, epoch)?;
        self.offsets
            .entry(group.to_string())
            .or_default()
            .insert(key, state.clone());
        Ok(())
    }

    /// Deletes a share group's state of a partition, from its owner at its
    /// epoch (see [`crate::command::Command::ForgetShareState`]).
    pub(crate) fn forget_share_state(
        &mut self,
        topics: &TopicsState,
        (broker, partition, epoch): (BrokerId, PartitionKey, Epoch),
        group: &str,
    ) -> Result<(), MetaError> {
        let key = topics.owned_offset_key(broker, partition, epoch)?;
        self.delete_offsets(group, [key]);
        Ok(())
    }

    /// Sets and deletes a group's configs, all or none; a group left with
    /// none set has no entry.
    pub(crate) fn alter_config(
        &mut self,
        group: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<(), MetaError> {
        crate::group_config::check_group_id(group)?;
        let mut configs = self.configs.get(group).cloned().unwrap_or_default();
        configs.alter(set, delete)?;
        if configs.is_empty() {
            self.configs.remove(group);
        } else {
            self.configs.insert(group.to_string(), configs);
        }
        Ok(())
    }
}

/// Refuses a coordinator's write of `group` through another shard than
/// the group's, or at a shard it does not own at the epoch it gave.
fn check_group_fence(
    topics: &TopicsState,
    group: &str,
    fence: &ShardFence,
) -> Result<(), MetaError> {
    let shards = u32::try_from(topics.shards.len()).unwrap_or(u32::MAX);
    let shard = crate::txn::shard_of(group, shards);
    if shard != fence.shard.0 {
        return Err(MetaError::InvalidRequest(format!(
            "group {group} is in shard {shard}, not {}",
            fence.shard
        )));
    }
    topics.check_fence(fence)
}
