//! A broker's own share groups served over itself ([`ShareNode`]): the
//! share service's fetches, acknowledgements and membership at this
//! broker, the share state and timer index it keeps through the metadata
//! and the object store, dead letters and timers started in the
//! background, the sweep of silent members, and the release of a leaving
//! member's records at the other brokers.

use std::time::Duration;

use floe_storage::PartitionKey;
use floe_types::Offset;

use super::durable::{ShareStore, decode_window, encode_window};
use super::group::{Heartbeat, HeartbeatAnswer, ShareGroupDescription, ShareGroupError, TopicInfo};
use super::node::ShareNode;
use super::partition::{AckBatch, MemberId, ShareError, ShareSnapshot};
use super::rpc::{ShareCall, ShareCoordinator, ShareOwner};
use super::service::{ShareFetched, ShareSettings};
use super::timers::{TimerRef, TimerStore, TimerStoreError};
use crate::error::{BrokerError, CallError};

impl ShareNode {
    pub(crate) fn share_topics(&self) -> impl Fn(&str) -> Option<TopicInfo> + '_ {
        let snap = self.partitions.view().current();
        move |name| {
            snap.topics.get(name).map(|t| TopicInfo {
                id: t.id,
                partitions: t.partition_count,
            })
        }
    }

    /// Starts a task appending the share-partition's dead records to the
    /// group's dead-letter topic, if some wait and none runs.
    fn start_dead_letters(&self, call: &ShareCall) {
        if let Some(epoch) = self.service.claim_dead_letters(&call.group, &call.key) {
            self.spawn_dead_letters(&call.group, call.key, epoch);
        }
    }

    /// The same for every share-partition of `group` here (a member's
    /// records released at the delivery limit may have left dead records).
    fn start_group_dead_letters(&self, group: &str) {
        for (key, epoch) in self.service.claim_group_dead_letters(group) {
            self.spawn_dead_letters(group, key, epoch);
        }
    }

    /// Starts the share-partition's timer task when it has work and none
    /// runs.
    fn start_timers(&self, call: &ShareCall) {
        if let Some(claim) = self.service.claim_timer_work(&call.group, &call.key) {
            let (broker, group, key) = (self.clone(), call.group.clone(), call.key);
            tokio::spawn(async move {
                broker
                    .service
                    .run_timers(&broker, &group, &key, claim)
                    .await;
            });
        }
    }

    fn spawn_dead_letters(&self, group: &str, key: PartitionKey, epoch: u64) {
        let (broker, group) = (self.clone(), group.to_owned());
        tokio::spawn(async move {
            broker
                .service
                .run_dead_letters(&broker.partitions, &broker, &broker, &group, &key, epoch)
                .await;
        });
    }

    pub(crate) fn share_coordinator_check(&self, group: &str) -> Result<(), ShareGroupError> {
        if self.coordinates(group) {
            Ok(())
        } else {
            Err(ShareGroupError::NotCoordinator)
        }
    }

    /// Releases the records a member that left `group` holds on the other
    /// brokers (this one released its own): every broker in the view is
    /// told, since the member may hold records of partitions no longer in
    /// its assignment. In the background; a broker not reached keeps the
    /// records until their locks expire.
    pub(crate) fn release_elsewhere(&self, group: &str, member: MemberId) {
        let snap = self.partitions.view().current();
        let me = self.partitions.broker_id();
        for node in snap
            .nodes
            .iter()
            .filter(|n| n.kind == floe_metadata::model::NodeKind::Broker && n.id != me)
        {
            let peer = self.peers.get(&node.addr);
            let (group, member) = (group.to_owned(), member.clone());
            tokio::spawn(async move {
                if let Err(e) = peer.share_release(&group, &member).await {
                    tracing::debug!(group, member = member.as_str(), error = %e,
                        "a left member's records not released there; their locks expire");
                }
            });
        }
    }
}

/// Every second, removes the share group members silent for their
/// session timeout from the groups this broker coordinates, and releases
/// their records on every broker (so a consumer killed without leaving
/// gives its records back after the session timeout at the latest, or
/// sooner when their locks expire first).
pub(crate) async fn sweep_members(b: ShareNode) {
    const EVERY: Duration = Duration::from_secs(1);
    let partitions = b.partitions.clone();
    crate::coordinator::timers::every(partitions, EVERY, || {
        sweep_once(&b);
        std::future::ready(())
    })
    .await
}

/// One pass of [`sweep_members`].
fn sweep_once(b: &ShareNode) {
    let shards = b.partitions.view().current().shard_count();
    let owned = |group: &str| b.shards.serves_id(group, shards);
    let gone = b.service.expire_members(&owned, &b.share_topics());
    for (group, member) in gone {
        tracing::info!(
            group,
            member = member.as_str(),
            "share group member timed out"
        );
        b.release_elsewhere(&group, member);
        // Records released at the delivery limit may wait for the DLQ.
        b.start_group_dead_letters(&group);
    }
}

/// The prefix of a share-partition's timer buckets:
/// `share-timers/{topic id}/{partition}/{group, hex}/`.
fn timer_prefix(group: &str, key: &PartitionKey) -> String {
    let hex: String = group.bytes().map(|b| format!("{b:02x}")).collect();
    format!("share-timers/{}/{}/{hex}/", key.topic.0, key.partition)
}

fn timer_error(e: floe_storage::StorageError) -> TimerStoreError {
    match e.kind() {
        floe_storage::ErrorKind::NotFound | floe_storage::ErrorKind::Corrupt => {
            TimerStoreError::Lost(e.to_string())
        }
        _ => TimerStoreError::Failed(e.to_string()),
    }
}

fn timer_object(group: &str, key: &PartitionKey, object: &TimerRef) -> floe_storage::ObjectRef {
    floe_storage::ObjectRef {
        endpoint: object.endpoint.clone(),
        key: floe_storage::ObjectKey::new(format!(
            "{}{}.tix",
            timer_prefix(group, key),
            object.token
        )),
        size: object.size,
    }
}

/// A stored object under a share-partition's timer prefix as a bucket (its
/// token is the file name without `.tix`).
fn timer_ref(prefix: &str, o: floe_storage::ObjectRef) -> Option<TimerRef> {
    let token = o.key.as_str().strip_prefix(prefix)?.strip_suffix(".tix")?;
    (!token.is_empty() && !token.contains('/')).then(|| TimerRef {
        endpoint: o.endpoint.clone(),
        token: std::sync::Arc::from(token),
        size: o.size,
    })
}

#[async_trait::async_trait]
impl TimerStore for ShareNode {
    async fn put_timers(
        &self,
        group: &str,
        key: &PartitionKey,
        bytes: bytes::Bytes,
    ) -> Result<TimerRef, TimerStoreError> {
        let prefix = timer_prefix(group, key);
        let stored = self
            .partitions
            .pool()
            .put_new(
                |t| floe_storage::ObjectKey::new(format!("{prefix}{}.tix", t.as_str())),
                bytes.into(),
            )
            .await
            .map_err(|e| TimerStoreError::Failed(e.to_string()))?;
        timer_ref(&prefix, stored)
            .ok_or_else(|| TimerStoreError::Failed("a bucket stored under another key".into()))
    }

    async fn read_timers(
        &self,
        group: &str,
        key: &PartitionKey,
        object: &TimerRef,
        range: std::ops::Range<u64>,
    ) -> Result<bytes::Bytes, TimerStoreError> {
        self.partitions
            .pool()
            .get_range(&timer_object(group, key, object), range)
            .await
            .map_err(timer_error)
    }

    async fn delete_timers(
        &self,
        group: &str,
        key: &PartitionKey,
        object: &TimerRef,
    ) -> Result<(), TimerStoreError> {
        self.partitions
            .pool()
            .delete(&timer_object(group, key, object))
            .await
            .map_err(|e| TimerStoreError::Failed(e.to_string()))
    }

    async fn list_timers(
        &self,
        group: &str,
        key: &PartitionKey,
    ) -> Result<Vec<TimerRef>, TimerStoreError> {
        let prefix = timer_prefix(group, key);
        let mut out = Vec::new();
        let endpoints: Vec<_> = self.partitions.pool().endpoint_ids().cloned().collect();
        for endpoint in endpoints {
            let listed = self
                .partitions
                .pool()
                .list(&endpoint, &prefix)
                .await
                .map_err(|e| TimerStoreError::Failed(e.to_string()))?;
            out.extend(listed.into_iter().filter_map(|o| timer_ref(&prefix, o)));
        }
        Ok(out)
    }
}

#[async_trait::async_trait]
impl ShareStore for ShareNode {
    fn owned_epoch(&self, key: &PartitionKey) -> Option<u64> {
        self.partitions.active_log(key).ok().map(|l| l.epoch())
    }

    async fn load(
        &self,
        group: &str,
        key: &PartitionKey,
    ) -> Result<Option<ShareSnapshot>, CallError> {
        let topic = self.partitions.topic_name(key)?;
        let offsets = self
            .partitions
            .meta()
            .fetch_offsets(group)
            .await
            .map_err(BrokerError::from)?;
        let Some(o) = offsets
            .into_iter()
            .find(|o| o.topic == topic && o.partition == key.partition)
        else {
            return Ok(None);
        };
        match decode_window(o.committed.offset, &o.committed.metadata) {
            Ok(s) => Ok(Some(s)),
            // Not a share group's state (a classic group's offset under the
            // same id): its offset is where the share group starts.
            Err(_) => Ok(Some(ShareSnapshot {
                start: Offset(o.committed.offset),
                ..ShareSnapshot::default()
            })),
        }
    }

    async fn save(
        &self,
        group: &str,
        key: &PartitionKey,
        epoch: u64,
        snapshot: &ShareSnapshot,
    ) -> Result<(), CallError> {
        self.partitions
            .meta()
            .share_state(
                self.partitions.owner_fence(key, epoch),
                group,
                snapshot.start.0,
                encode_window(snapshot),
            )
            .await
            .map_err(BrokerError::from)?;
        Ok(())
    }

    async fn forget(&self, group: &str, key: &PartitionKey, epoch: u64) -> Result<(), CallError> {
        self.partitions
            .meta()
            .share_forget(self.partitions.owner_fence(key, epoch), group)
            .await
            .map_err(BrokerError::from)?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl ShareOwner for ShareNode {
    async fn share_fetch(
        &self,
        call: &ShareCall,
        max_records: u32,
        max_bytes: usize,
    ) -> Result<ShareFetched, CallError> {
        let share = &self.service;
        let fetched = share
            .fetch(
                &self.partitions,
                self,
                &call.settings,
                &call.group,
                &call.key,
                &call.member,
                max_records,
                max_bytes,
            )
            .await;
        // Lock expiries at the delivery limit may have left dead records.
        self.start_dead_letters(call);
        // Delayed records to write out to the timer index, or to read back.
        self.start_timers(call);
        fetched
    }

    async fn share_acknowledge(
        &self,
        call: &ShareCall,
        batches: &[AckBatch],
    ) -> Result<Result<(), ShareError>, CallError> {
        let share = &self.service;
        let answer = share
            .acknowledge(
                &self.partitions,
                self,
                &call.settings,
                &call.group,
                &call.key,
                &call.member,
                batches,
            )
            .await;
        self.start_dead_letters(call);
        answer
    }

    async fn share_release(&self, group: &str, member: &MemberId) -> Result<(), CallError> {
        self.service.release_member(group, member);
        self.start_group_dead_letters(group);
        Ok(())
    }
}

#[async_trait::async_trait]
impl ShareCoordinator for ShareNode {
    async fn share_heartbeat(
        &self,
        group: &str,
        hb: &Heartbeat,
        settings: &ShareSettings,
    ) -> Result<HeartbeatAnswer, ShareGroupError> {
        self.share_coordinator_check(group)?;
        // One id namespace: a classic or consumer group's id is refused
        // (its stored offsets are read only for a join of a group not in
        // memory).
        let kind = if hb.member_epoch == 0 {
            self.kind_or_live(group).await
        } else {
            self.live_kind(group)
        };
        if super::namespace::refuses_share(kind) {
            return Err(ShareGroupError::NotShareGroup);
        }
        let topics = self.share_topics();
        let beat = || self.service.heartbeat(group, hb, settings, &topics);
        let (answer, gone) = if hb.member_epoch == 0 {
            // A join waits while an admin request holds the group.
            self.holds.join(group, beat).await
        } else {
            beat()
        };
        for member in gone {
            self.release_elsewhere(group, member);
        }
        // Members that left or timed out had their records released here.
        self.start_group_dead_letters(group);
        answer
    }

    async fn share_describe(
        &self,
        group: &str,
    ) -> Result<Option<ShareGroupDescription>, ShareGroupError> {
        self.share_coordinator_check(group)?;
        Ok(self.service.describe(group))
    }
}
