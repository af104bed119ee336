//! The committed log index of each partition: commits that append to it
//! (from the partition's owner at its epoch), truncation of its start,
//! ranges replaced by a compacted segment, the store objects it points into
//! (with their reference counts) and the idempotent producers it remembers.

use std::collections::BTreeSet;

use crate::command::{CommitRange, NewObject, ObjectSel, Response};
use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch, ObjectId, PartitionKey};

use super::{IndexEntry, ObjectInfo, PartitionState, TopicsState};

/// Where a partition's log starts after a truncation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogStart {
    pub log_start_offset: i64,
    /// Whether it moved (never backwards: a late retention pass changes
    /// nothing).
    pub moved: bool,
}

/// Refuses a write to `p` from a broker that does not own it at `epoch`.
fn check_owner(
    p: &PartitionState,
    partition: PartitionKey,
    broker: BrokerId,
    epoch: Epoch,
) -> Result<(), MetaError> {
    if p.ownership.epoch != epoch {
        return Err(MetaError::StaleEpoch {
            partition,
            current: p.ownership.epoch,
            given: epoch,
        });
    }
    if p.ownership.owner != Some(broker) {
        return Err(MetaError::NotOwner {
            what: partition.to_string(),
            broker,
            owner: p.ownership.owner,
        });
    }
    Ok(())
}

impl TopicsState {
    fn check_range(
        &self,
        broker: BrokerId,
        r: &CommitRange,
        new_object: bool,
    ) -> Result<(), MetaError> {
        let p = self
            .partitions
            .get(&r.partition)
            .ok_or(MetaError::UnknownPartition(r.partition))?;
        check_owner(p, r.partition, broker, r.epoch)?;
        if r.first_offset != p.high_watermark {
            return Err(MetaError::OffsetMismatch {
                partition: r.partition,
                expected: p.high_watermark,
                given: r.first_offset,
            });
        }
        if r.last_offset < r.first_offset || r.last_offset == i64::MAX {
            return Err(MetaError::InvalidRequest(format!(
                "{}: last offset {} before first {}",
                r.partition, r.last_offset, r.first_offset
            )));
        }
        match &r.object {
            ObjectSel::New if !new_object => Err(MetaError::InvalidRequest(
                "range refers to a new object but the commit has none".into(),
            )),
            ObjectSel::Existing(id) if !self.objects.contains_key(id) => {
                Err(MetaError::InvalidRequest(format!("unknown object {id}")))
            }
            _ => Ok(()),
        }
    }

    /// A broker's commit of ranges of partitions it owns, in `object` (new)
    /// or in objects already known: every range is checked first, then all
    /// are appended. The reply is [`Response::Committed`].
    pub(crate) fn commit(
        &mut self,
        broker: BrokerId,
        object: Option<&NewObject>,
        ranges: &[CommitRange],
        now_ms: u64,
    ) -> Result<Response, MetaError> {
        if ranges.is_empty() {
            return Err(MetaError::InvalidRequest("commit without ranges".into()));
        }
        let mut seen = BTreeSet::new();
        for r in ranges {
            if !seen.insert(r.partition) {
                return Err(MetaError::InvalidRequest(format!(
                    "{} appears twice in one commit",
                    r.partition
                )));
            }
            self.check_range(broker, r, object.is_some())?;
        }
        let new_id = object.map(|o| self.new_object(o, 0));
        let mut hws = Vec::with_capacity(ranges.len());
        for r in ranges {
            let obj = match (&r.object, new_id) {
                (ObjectSel::Existing(id), _) => *id,
                (ObjectSel::New, Some(id)) => id,
                (ObjectSel::New, None) => continue, // refused by check_range
            };
            if let Some(o) = self.objects.get_mut(&obj) {
                o.refs += 1;
            }
            if let Some(p) = self.partitions.get_mut(&r.partition) {
                p.index.push(IndexEntry {
                    first_offset: r.first_offset,
                    last_offset: r.last_offset,
                    max_timestamp: r.max_timestamp,
                    object: obj,
                    byte_start: r.byte_start,
                    byte_len: r.byte_len,
                });
                p.high_watermark = r.last_offset + 1;
                for b in &r.producers {
                    p.producers
                        .entry(b.producer_id)
                        .or_default()
                        .record(*b, now_ms);
                }
                hws.push((r.partition, p.high_watermark));
            }
        }
        Ok(Response::Committed {
            object: new_id,
            high_watermarks: hws,
        })
    }

    /// A new object with `refs` references, under the next object id.
    fn new_object(&mut self, o: &NewObject, refs: u64) -> ObjectId {
        let id = ObjectId(self.next_object_id);
        self.next_object_id = self.next_object_id.saturating_add(1);
        let info = ObjectInfo {
            endpoint: o.endpoint.clone(),
            key: o.key.clone(),
            size: o.size,
            refs,
        };
        self.object_keys.insert(id, &info);
        self.objects.insert(id, info);
        id
    }

    /// One index entry less points into the object.
    pub(super) fn release_object(&mut self, id: ObjectId) {
        if let Some(o) = self.objects.get_mut(&id) {
            o.refs = o.refs.saturating_sub(1);
        }
    }

    /// The partition, if `broker` owns it at `epoch`.
    fn owned_partition(
        &mut self,
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
    ) -> Result<&mut PartitionState, MetaError> {
        let p = self
            .partitions
            .get_mut(&partition)
            .ok_or(MetaError::UnknownPartition(partition))?;
        check_owner(p, partition, broker, epoch)?;
        Ok(p)
    }

    /// The (topic name, partition) a group's offset of `partition` is kept
    /// under, if `broker` owns the partition at `epoch` (the share state's
    /// fence).
    pub(crate) fn owned_offset_key(
        &self,
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
    ) -> Result<(String, u32), MetaError> {
        let p = self
            .partitions
            .get(&partition)
            .ok_or(MetaError::UnknownPartition(partition))?;
        check_owner(p, partition, broker, epoch)?;
        self.by_name
            .iter()
            .find(|(_, t)| t.id == partition.topic)
            .map(|(name, _)| (name.clone(), partition.partition))
            .ok_or(MetaError::UnknownPartition(partition))
    }

    /// Moves a partition's log start forward (from its owner at its epoch):
    /// the index entries wholly before it go, and no longer hold their
    /// objects.
    pub(crate) fn truncate_log(
        &mut self,
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
        log_start_offset: i64,
    ) -> Result<LogStart, MetaError> {
        let p = self.owned_partition(broker, partition, epoch)?;
        if log_start_offset > p.high_watermark || log_start_offset < 0 {
            return Err(MetaError::InvalidRequest(format!(
                "log start {log_start_offset} outside [0, {}] of {partition}",
                p.high_watermark
            )));
        }
        // Never backwards: a late retention pass changes nothing.
        if log_start_offset <= p.log_start_offset {
            return Ok(LogStart {
                log_start_offset: p.log_start_offset,
                moved: false,
            });
        }
        p.log_start_offset = log_start_offset;
        let mut dropped = Vec::new();
        p.index.retain(|e| {
            let keep = e.last_offset >= log_start_offset;
            if !keep {
                dropped.push(e.object);
            }
            keep
        });
        for id in dropped {
            self.release_object(id);
        }
        Ok(LogStart {
            log_start_offset,
            moved: true,
        })
    }

    /// Replaces the index entries that cover exactly `first..=last` with
    /// one entry in `object` (a compacted segment), from the partition's
    /// owner at its epoch. The reply is [`Response::Committed`].
    pub(crate) fn replace_ranges(
        &mut self,
        broker: BrokerId,
        partition: PartitionKey,
        epoch: Epoch,
        (first, last, max_ts): (i64, i64, i64),
        object: &NewObject,
    ) -> Result<Response, MetaError> {
        let next_id = ObjectId(self.next_object_id);
        let p = self.owned_partition(broker, partition, epoch)?;
        // The entries to replace must cover exactly first..=last, contiguously.
        let Some(i) = p.index.iter().position(|e| e.first_offset == first) else {
            return Err(MetaError::InvalidRequest(format!(
                "{partition}: no committed range starts at {first}"
            )));
        };
        let Some(j) = p.index[i..]
            .iter()
            .position(|e| e.last_offset == last)
            .map(|k| i + k)
        else {
            return Err(MetaError::InvalidRequest(format!(
                "{partition}: no committed range ends at {last}"
            )));
        };
        let removed: Vec<IndexEntry> = p
            .index
            .splice(
                i..=j,
                [IndexEntry {
                    first_offset: first,
                    last_offset: last,
                    max_timestamp: max_ts,
                    object: next_id,
                    byte_start: 0,
                    byte_len: object.size,
                }],
            )
            .collect();
        let id = self.new_object(object, 1);
        debug_assert_eq!(id, next_id);
        for e in removed {
            self.release_object(e.object);
        }
        Ok(Response::Committed {
            object: Some(next_id),
            high_watermarks: vec![],
        })
    }

    /// Objects that no index entry references any more.
    pub fn unreferenced_objects(&self) -> Vec<(ObjectId, &ObjectInfo)> {
        self.objects
            .iter()
            .filter(|(_, o)| o.refs == 0)
            .map(|(id, o)| (*id, o))
            .collect()
    }

    /// Forgets objects that no index entry references (deleted from the
    /// store); a referenced one stays.
    pub(crate) fn forget_objects(&mut self, ids: &[ObjectId]) {
        for id in ids {
            if self.objects.get(id).is_some_and(|o| o.refs == 0)
                && let Some(o) = self.objects.remove(id)
            {
                self.object_keys.remove(*id, &o);
            }
        }
    }

    /// Drops producers that have not written for more than `expiration_ms`
    /// (and stamps those with no write time yet). Only the partitions this
    /// changes are written to: a write copies the nodes a snapshot's copy
    /// of the state still shares.
    pub(crate) fn expire_producers(&mut self, now_ms: u64, expiration_ms: u64) {
        let changed: Vec<PartitionKey> = self
            .partitions
            .iter()
            .filter(|(_, p)| expires_producers(p, now_ms, expiration_ms))
            .map(|(k, _)| *k)
            .collect();
        for k in changed {
            let Some(p) = self.partitions.get_mut(&k) else {
                continue;
            };
            p.producers.retain(|_, st| {
                if st.last_write_ms == 0 {
                    st.last_write_ms = now_ms;
                }
                now_ms.saturating_sub(st.last_write_ms) <= expiration_ms
            });
        }
    }

    /// Whether [`crate::command::Command::ExpireProducers`] at `now_ms`
    /// would change anything.
    pub fn producers_to_expire(&self, now_ms: u64, expiration_ms: u64) -> bool {
        self.partitions
            .values()
            .any(|p| expires_producers(p, now_ms, expiration_ms))
    }
}

/// Whether expiring producers at `now_ms` changes `p`: one of its producers
/// has not written for more than `expiration_ms`, or has no write time yet.
fn expires_producers(p: &PartitionState, now_ms: u64, expiration_ms: u64) -> bool {
    p.producers
        .values()
        .any(|st| st.last_write_ms == 0 || now_ms.saturating_sub(st.last_write_ms) > expiration_ms)
}

#[cfg(test)]
mod tests;
