//! Topics: their names, ids, partition counts and configs, each partition's
//! owner, epoch and committed log index, the store objects the index points
//! into, and who owns each coordinator shard. The rules are split by what
//! they change:
//!
//! - here: creating, deleting and configuring topics, and their exports;
//! - [`ownership`]: who owns a partition or shard, hand-overs, fencing;
//! - [`index`]: the committed log index (commits, truncation, compaction's
//!   replaced ranges, objects) and the idempotent producers it remembers;
//! - [`object_keys`]: the objects looked up by endpoint and key (derived,
//!   not in snapshots).
//!
//! The large tables (topics, partitions, objects) are persistent ordered
//! maps ([`OrdMap`]): sorted as a `BTreeMap` and serialized as one, but a
//! copy shares their nodes until either side changes them, so the copy of
//! the state a Raft snapshot is written from costs next to nothing, and a
//! change after it copies only the nodes on its path.

use std::collections::BTreeMap;
use std::ops::Range;

use imbl::OrdMap;
use serde::{Deserialize, Serialize};

use crate::error::MetaError;
use crate::ids::{Epoch, ObjectId, PartitionKey, ShardId, TopicId};
use crate::state::producers::ProducerState;
use crate::topic_config::TopicConfig;

pub mod index;
pub mod object_keys;
pub mod ownership;

#[cfg(test)]
mod tests;

/// Coordinator shards of a new cluster.
pub const DEFAULT_SHARDS: u32 = 16;
/// Most partitions a topic may have.
pub const MAX_PARTITIONS: u32 = 10_000;

/// Kafka's rule for topic names (the one validator, in `floe-types`).
pub fn validate_topic_name(name: &str) -> Result<(), MetaError> {
    floe_types::validate_topic_name(name).map_err(|e| MetaError::InvalidRequest(e.to_string()))
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topic {
    pub name: String,
    pub id: TopicId,
    pub partitions: u32,
    pub config: TopicConfig,
}

impl Topic {
    /// The keys of the topic's partitions.
    pub fn partition_keys(&self) -> impl Iterator<Item = PartitionKey> + use<> {
        let topic = self.id;
        (0..self.partitions).map(move |partition| PartitionKey { topic, partition })
    }
}

/// Who owns a partition or shard, and since which epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Ownership {
    pub owner: Option<crate::ids::BrokerId>,
    pub epoch: Epoch,
    /// A hand-over in progress: the owner is asked to finish what it has in
    /// flight and release, after which `to` owns it at the next epoch.
    #[serde(default)]
    pub handover: Option<Handover>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handover {
    pub to: crate::ids::BrokerId,
    pub since_ms: u64,
}

impl Ownership {
    /// A new owner (or none) at the next epoch, with no hand-over pending.
    pub fn moved_to(self, owner: Option<crate::ids::BrokerId>) -> Ownership {
        Ownership {
            owner,
            epoch: Epoch(self.epoch.0.saturating_add(1)),
            handover: None,
        }
    }
}

/// One entry of a partition's committed log index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub object: ObjectId,
    pub byte_start: u64,
    pub byte_len: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PartitionState {
    pub ownership: Ownership,
    pub log_start_offset: i64,
    /// Committed end: the offset after the last committed record.
    pub high_watermark: i64,
    pub index: Vec<IndexEntry>,
    /// Idempotent producers that wrote here: their epoch and last batches.
    #[serde(default)]
    pub producers: BTreeMap<i64, ProducerState>,
    /// What the indexer has exported.
    #[serde(default)]
    pub export: crate::export::ExportState,
}

impl PartitionState {
    /// Bytes of the committed ranges that hold records from the log start
    /// on (a range that straddles the log start counts whole, as a Kafka
    /// segment does until it is deleted).
    pub fn stored_bytes(&self) -> u64 {
        self.index
            .iter()
            .filter(|e| e.last_offset >= self.log_start_offset)
            .map(|e| e.byte_len)
            .sum()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectInfo {
    pub endpoint: String,
    pub key: String,
    pub size: u64,
    /// Index entries that point into this object.
    pub refs: u64,
}

/// The topics, their partitions, the objects their indexes point into and
/// the coordinator shards' owners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicsState {
    /// Topics by name.
    pub by_name: OrdMap<String, Topic>,
    pub partitions: OrdMap<PartitionKey, PartitionState>,
    pub objects: OrdMap<ObjectId, ObjectInfo>,
    /// The id the next new object is given.
    pub next_object_id: u64,
    /// The coordinator shards' owners.
    pub shards: BTreeMap<ShardId, Ownership>,
    /// The Iceberg tables of topics (`table.format=iceberg`), by topic id:
    /// a topic deleted and made again starts a new table.
    pub tables: BTreeMap<TopicId, crate::table::TableState>,
    /// `objects` by endpoint and key: derived from it (built on load, kept
    /// in step by the index's rules), never in a snapshot.
    pub(crate) object_keys: object_keys::ObjectKeys,
}

impl Default for TopicsState {
    fn default() -> Self {
        Self {
            by_name: OrdMap::new(),
            partitions: OrdMap::new(),
            objects: OrdMap::new(),
            object_keys: object_keys::ObjectKeys::default(),
            tables: BTreeMap::new(),
            next_object_id: 1,
            shards: (0..DEFAULT_SHARDS)
                .map(|i| (ShardId(i), Ownership::default()))
                .collect(),
        }
    }
}

impl TopicsState {
    /// Creates a topic with its partitions, owned by nobody yet (see
    /// [`super::ClusterState::place_new`]).
    pub(crate) fn create_topic(
        &mut self,
        name: &str,
        id: TopicId,
        partitions: u32,
        config: &BTreeMap<String, String>,
    ) -> Result<(), MetaError> {
        validate_topic_name(name)?;
        if self.by_name.contains_key(name) {
            return Err(MetaError::TopicExists(name.to_string()));
        }
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(MetaError::InvalidRequest(format!(
                "{partitions} partitions (1 to {MAX_PARTITIONS})"
            )));
        }
        if self.by_name.values().any(|t| t.id == id) {
            return Err(MetaError::InvalidRequest(format!("topic id {id} in use")));
        }
        let config = TopicConfig::from_settings(config)?;
        for p in 0..partitions {
            self.partitions.insert(
                PartitionKey {
                    topic: id,
                    partition: p,
                },
                PartitionState::default(),
            );
        }
        self.by_name.insert(
            name.to_string(),
            Topic {
                name: name.to_string(),
                id,
                partitions,
                config,
            },
        );
        Ok(())
    }

    /// Deletes a topic and its partitions (their index entries no longer
    /// hold their objects), and returns it: the transactions' and groups'
    /// records of it are theirs to forget.
    pub(crate) fn delete_topic(&mut self, name: &str) -> Result<Topic, MetaError> {
        let Some(topic) = self.by_name.remove(name) else {
            return Err(MetaError::UnknownTopic(name.to_string()));
        };
        self.tables.remove(&topic.id);
        for key in topic.partition_keys() {
            if let Some(state) = self.partitions.remove(&key) {
                for e in state.index {
                    self.release_object(e.object);
                }
            }
        }
        Ok(topic)
    }

    /// Adds partitions to a topic, up to `total`, owned by nobody yet, and
    /// returns the new partitions' numbers.
    pub(crate) fn create_partitions(
        &mut self,
        name: &str,
        total: u32,
    ) -> Result<(TopicId, Range<u32>), MetaError> {
        let Some(topic) = self.by_name.get_mut(name) else {
            return Err(MetaError::UnknownTopic(name.to_string()));
        };
        if total <= topic.partitions || total > MAX_PARTITIONS {
            return Err(MetaError::InvalidRequest(format!(
                "topic {name} has {} partitions; the new count must be larger (and at most {MAX_PARTITIONS}), not {total}",
                topic.partitions
            )));
        }
        for p in topic.partitions..total {
            self.partitions.insert(
                PartitionKey {
                    topic: topic.id,
                    partition: p,
                },
                PartitionState::default(),
            );
        }
        let (id, from) = (topic.id, topic.partitions);
        topic.partitions = total;
        Ok((id, from..total))
    }

    /// Changes a topic's settings.
    pub(crate) fn alter_config(
        &mut self,
        name: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<(), MetaError> {
        match self.by_name.get_mut(name) {
            None => Err(MetaError::UnknownTopic(name.to_string())),
            Some(t) => t.config.alter(set, delete),
        }
    }

    /// Whether `topic` exists with a partition `partition`.
    pub(crate) fn has_partition(&self, topic: &str, partition: u32) -> bool {
        self.by_name
            .get(topic)
            .is_some_and(|t| partition < t.partitions)
    }

    /// The indexer begins exporting a partition (see
    /// [`crate::export::ExportState::begin`]).
    pub(crate) fn export_begin(
        &mut self,
        partition: PartitionKey,
        generation: u64,
        file: &crate::export::ExportFile,
    ) -> Result<(), MetaError> {
        let p = self.partition_mut(partition)?;
        let (log_start, hw) = (p.log_start_offset, p.high_watermark);
        p.export.begin(generation, file.clone(), log_start, hw)
    }

    /// The indexer committed an export file of a partition.
    pub(crate) fn export_commit(
        &mut self,
        partition: PartitionKey,
        generation: u64,
        file: &crate::export::ExportFile,
    ) -> Result<(), MetaError> {
        self.partition_mut(partition)?
            .export
            .commit(generation, file.clone())
    }

    /// The indexer forgets export files of a partition.
    pub(crate) fn export_forget(
        &mut self,
        partition: PartitionKey,
        generation: u64,
        keys: &[String],
    ) -> Result<(), MetaError> {
        self.partition_mut(partition)?
            .export
            .forget(generation, keys)
    }

    /// Starts every partition of a topic over at a new export generation,
    /// and returns it.
    pub(crate) fn reset_exports(&mut self, name: &str) -> Result<u64, MetaError> {
        let Some(topic) = self.by_name.get(name) else {
            return Err(MetaError::UnknownTopic(name.to_string()));
        };
        let keys: Vec<PartitionKey> = topic.partition_keys().collect();
        let generation = keys
            .iter()
            .filter_map(|k| self.partitions.get(k))
            .map(|p| p.export.generation)
            .max()
            .unwrap_or(0)
            + 1;
        for k in &keys {
            if let Some(p) = self.partitions.get_mut(k) {
                p.export.reset(generation);
            }
        }
        let id = topic.id;
        if let Some(t) = self.tables.get_mut(&id) {
            t.compacting = None;
        }
        Ok(generation)
    }

    /// Records a compaction of a table's export files (see
    /// [`crate::table::Compaction`]): the files must be adjacent committed
    /// files of the partition, and the new one hold exactly their offsets
    /// and rows under a new name. Takes the place of a compaction left
    /// unfinished.
    pub(crate) fn table_compact_begin(
        &mut self,
        name: &str,
        c: &crate::table::Compaction,
    ) -> Result<(), MetaError> {
        let id = self.topic_id(name)?;
        if c.replaced.len() < 2 || c.replaced.len() > crate::table::MAX_COMPACTED_FILES {
            return Err(MetaError::InvalidRequest(format!(
                "a compaction replaces 2 to {} files, not {}",
                crate::table::MAX_COMPACTED_FILES,
                c.replaced.len()
            )));
        }
        let export = &self
            .partition_mut(PartitionKey::new(id, c.partition))?
            .export;
        let run = export.run_of(c.generation, &c.replaced)?;
        export.check_replacement(&run, &c.file)?;
        self.tables.entry(id).or_default().compacting = Some(c.clone());
        Ok(())
    }

    /// Puts the compacted `file` (now written, as it is) in place of the
    /// files its compaction replaces. A retried commit of a file already
    /// in place is accepted.
    pub(crate) fn table_compact_commit(
        &mut self,
        name: &str,
        partition: u32,
        generation: u64,
        file: &crate::export::ExportFile,
    ) -> Result<(), MetaError> {
        let id = self.topic_id(name)?;
        let intent = self.tables.get(&id).and_then(|t| t.compacting.clone());
        let export = &mut self.partition_mut(PartitionKey::new(id, partition))?.export;
        let Some(c) = intent.filter(|c| {
            c.partition == partition && c.generation == generation && c.file.key == file.key
        }) else {
            if export.generation == generation && export.files.iter().any(|f| f.key == file.key) {
                return Ok(());
            }
            return Err(MetaError::ExportConflict(format!(
                "{} is not the table's compaction in flight",
                file.key
            )));
        };
        let run = export.run_of(generation, &c.replaced)?;
        export.check_replacement(&run, file)?;
        export.replace_run(run, file.clone());
        if let Some(t) = self.tables.get_mut(&id) {
            t.compacting = None;
        }
        Ok(())
    }

    /// The field ids of a table's typed columns (see
    /// [`crate::table::TableState::ensure_columns`]).
    pub(crate) fn table_columns(
        &mut self,
        name: &str,
        columns: &[(String, String)],
    ) -> Result<Vec<i32>, MetaError> {
        let id = self.topic_id(name)?;
        self.tables.entry(id).or_default().ensure_columns(columns)
    }

    /// Moves a table's pointer (see [`crate::table::TableState::commit`]).
    pub(crate) fn table_commit(
        &mut self,
        name: &str,
        expected: Option<&str>,
        location: &str,
    ) -> Result<u64, MetaError> {
        let id = self.topic_id(name)?;
        self.tables
            .entry(id)
            .or_default()
            .commit(expected, location.to_string())
    }

    fn topic_id(&self, name: &str) -> Result<TopicId, MetaError> {
        self.by_name
            .get(name)
            .map(|t| t.id)
            .ok_or_else(|| MetaError::UnknownTopic(name.to_string()))
    }

    fn partition_mut(&mut self, partition: PartitionKey) -> Result<&mut PartitionState, MetaError> {
        self.partitions
            .get_mut(&partition)
            .ok_or(MetaError::UnknownPartition(partition))
    }
}
