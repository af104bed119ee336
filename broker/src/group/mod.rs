//! The classic consumer-group coordinator (JoinGroup / SyncGroup /
//! Heartbeat / LeaveGroup, KIP-345 static members, KIP-394 member ids), one
//! per broker.
//!
//! Group ids are spread over [`GroupConfig::shards`] coordinator shards by
//! [`shard_of`]; the caller routes a request here only when this broker owns
//! the group's shard, and calls [`GroupCoordinator::drop_shard`] when it
//! loses one. Groups are created on first use. A classic group's membership
//! (generation, members, assignments) is written to a [`GroupStore`] before
//! a generation's assignment is handed out, a consumer group's (epochs,
//! target, members' partitions) before a heartbeat that changed it is
//! answered, and both are forgotten when the group empties; a broker taking
//! a shard over resumes its groups from there
//! ([`GroupCoordinator::load_shard`]), so members carry on without a
//! rebalance. Committed offsets are stored by the caller;
//! [`GroupCoordinator::validate_commit`] says whether a commit may be
//! stored.
//!
//! Each group sits behind its own lock; no lock is held across an await.
//! JoinGroup and SyncGroup wait on a oneshot channel. Timeouts (sessions,
//! rebalances, the initial rebalance delay) run on Tokio's clock in a task
//! per group that exists only while the group has something to time out.

pub mod assignor;
mod calls;
pub(crate) mod commit;
pub mod consumer;
pub mod delete;
mod handle;
pub mod lag;
mod member;
mod record;
pub mod rpc;
pub mod service;
mod state;
pub(crate) mod store;
mod types;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;

use consumer::{
    ConsumerGroup, ConsumerGroupDescription, ConsumerHeartbeat, ConsumerHeartbeatAnswer, TopicMeta,
};
use handle::GroupHandle;
use state::{Group, Outcome};

pub use calls::Coordinator;
pub use record::{GroupRecord, GroupStore, RecordError};
pub use service::GroupService;
pub use types::{
    CommitParams, DEFAULT_OFFSET_METADATA_MAX_BYTES, DescribedMember, GroupConfig,
    GroupDescription, GroupError, GroupListing, GroupState, GroupType, JoinMember, JoinParams,
    JoinResult, OffsetToCommit, SyncParams, SyncResult,
};

type ConsumerGroups = HashMap<String, Arc<Mutex<ConsumerGroup>>>;

/// The shard of a group id: 32-bit FNV-1a of the id's UTF-8 bytes, modulo
/// `shards` (0 when `shards` is 0).
pub fn shard_of(group_id: &str, shards: u32) -> u32 {
    floe_metadata::txn::shard_of(group_id, shards)
}

/// The groups of the coordinator shards this broker owns.
#[derive(Debug)]
pub struct GroupCoordinator {
    config: Arc<GroupConfig>,
    groups: Mutex<HashMap<String, Arc<GroupHandle>>>,
    /// Groups of the new protocol (KIP-848). Group ids are one namespace:
    /// an id is in `groups` or here (while it has members), never both.
    /// Lock order: `groups`, then `consumer`, then a group.
    consumer: Mutex<ConsumerGroups>,
    /// The origin of the consumer groups' millisecond clock.
    started: Instant,
    /// Per shard, the shard epoch this broker took the shard at, and the
    /// generation (and consumer group epoch) new groups start above: from
    /// that epoch, so generations keep increasing across a coordinator move.
    shard_starts: Mutex<HashMap<u32, ShardStart>>,
    /// Where groups are stored (`None`: nowhere, they live in memory only).
    store: Option<Arc<dyn GroupStore>>,
    /// Per consumer group, the turn to write it: one write at a time, each
    /// of the group as it is then, so the last one holds the latest state.
    consumer_turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// How long one write of a consumer group may take before the heartbeat
/// that waits on it is answered COORDINATOR_NOT_AVAILABLE.
const CONSUMER_STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, Clone, Copy, Default)]
struct ShardStart {
    epoch: u64,
    first_generation: i32,
}

/// Generations a coordinator may use before they reach those of the next
/// owner of its shard (2^16).
const GENERATIONS_PER_SHARD_EPOCH: i32 = 1 << 16;

/// The first generation of groups created under `shard_epoch`:
/// `shard_epoch × 2^16`, wrapping after 2^15 epochs (it must fit an i32).
pub fn first_generation(shard_epoch: u64) -> i32 {
    let epochs = u64::try_from(i32::MAX / GENERATIONS_PER_SHARD_EPOCH).unwrap_or(1) + 1;
    i32::try_from(shard_epoch % epochs).unwrap_or(0) * GENERATIONS_PER_SHARD_EPOCH
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig) -> Self {
        Self {
            config: Arc::new(config),
            groups: Mutex::new(HashMap::new()),
            consumer: Mutex::new(HashMap::new()),
            started: Instant::now(),
            shard_starts: Mutex::new(HashMap::new()),
            store: None,
            consumer_turns: Mutex::new(HashMap::new()),
        }
    }

    /// Stores groups (classic and consumer) in `store` (see [`GroupStore`]).
    pub fn with_store(mut self, store: Arc<dyn GroupStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// This broker took `shard` over at `shard_epoch`: its groups, created
    /// from now on, start their generations (and consumer group epochs) at
    /// [`first_generation`] of the epoch, above those of the shard's
    /// previous owners, and are stored under that epoch. The groups stored
    /// by the previous owner are resumed by [`Self::load_shard`].
    pub fn shard_taken(&self, shard: u32, shard_epoch: u64) {
        self.shard_starts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                shard,
                ShardStart {
                    epoch: shard_epoch,
                    first_generation: first_generation(shard_epoch),
                },
            );
    }

    fn shard_start(&self, shard: u32) -> ShardStart {
        self.shard_starts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&shard)
            .copied()
            .unwrap_or_default()
    }

    fn new_handle(&self, group_id: &str) -> Arc<GroupHandle> {
        let start = self.shard_start(shard_of(group_id, self.config.shards));
        GroupHandle::new(
            group_id.to_string(),
            start.first_generation,
            start.epoch,
            self.store.clone(),
        )
    }

    /// Resumes the groups of `shard` (taken over with [`Self::shard_taken`])
    /// from their stored records, as `(group id, record)`: each is Stable
    /// at its stored generation with its members and assignments, and each
    /// member's session starts now. A record that does not decode is
    /// skipped (its members rejoin). Returns how many groups were resumed.
    pub fn load_shard(&self, shard: u32, records: Vec<(String, Vec<u8>)>) -> usize {
        let start = self.shard_start(shard);
        let now = Instant::now();
        let mut loaded = 0;
        for (id, bytes) in records {
            if shard_of(&id, self.config.shards) != shard {
                continue;
            }
            let mut record = match GroupRecord::from_bytes(&id, &bytes) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "stored group skipped; its members rejoin");
                    continue;
                }
            };
            if let Some(consumer) = record.consumer.take() {
                let members = consumer.members.len();
                match ConsumerGroup::restore(&id, consumer, start.epoch, self.now_ms()) {
                    Ok(g) => {
                        let epoch = g.describe().group_epoch;
                        // One id namespace: a classic group of the same id
                        // (only ever an empty one) gives way.
                        if let Some(old) = self.groups().remove(&id) {
                            let mut old_group = old.lock();
                            old_group.kill(GroupError::NotCoordinator);
                            old.arm(&mut old_group, &self.config);
                        }
                        self.consumer_groups()
                            .insert(id.clone(), Arc::new(Mutex::new(g)));
                        loaded += 1;
                        tracing::info!(group = %id, epoch, members, "consumer group resumed from its stored membership");
                    }
                    Err(reason) => {
                        tracing::warn!(group = %id, %reason, "stored consumer group skipped; its members rejoin");
                    }
                }
                continue;
            }
            let (generation, members) = (record.generation, record.members.len());
            let group =
                state::Group::restore(id.clone(), record, start.first_generation, start.epoch, now);
            let handle = GroupHandle::with_group(group, self.store.clone());
            let previous = self.groups().insert(id.clone(), handle.clone());
            if let Some(old) = previous {
                let mut g = old.lock();
                g.kill(GroupError::NotCoordinator);
                old.arm(&mut g, &self.config);
            }
            let mut g = handle.lock();
            handle.arm(&mut g, &self.config);
            drop(g);
            loaded += 1;
            tracing::info!(group = %id, generation, members, "group resumed from its stored membership");
        }
        loaded
    }

    fn consumer_groups(&self) -> MutexGuard<'_, ConsumerGroups> {
        self.consumer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn consumer_group(&self, group_id: &str) -> Option<Arc<Mutex<ConsumerGroup>>> {
        self.consumer_groups().get(group_id).cloned()
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// ConsumerGroupHeartbeat. A join (epoch 0) creates the group; an id
    /// that is a classic group with members is GROUP_ID_NOT_FOUND (an
    /// empty classic group becomes a consumer group, its offsets kept).
    /// `topics` resolves subscribed topic names.
    ///
    /// A heartbeat that changed what is stored of the group (a join, a
    /// leave, new epochs or partitions) is answered once the group is
    /// stored: a coordinator that resumes it knows every epoch a member was
    /// told. Not stored, the answer is the store's error
    /// (COORDINATOR_NOT_AVAILABLE, or NOT_COORDINATOR once the shard moved).
    pub async fn consumer_heartbeat(
        &self,
        hb: ConsumerHeartbeat,
        topics: &(dyn Fn(&str) -> Option<TopicMeta> + Sync),
    ) -> Result<ConsumerHeartbeatAnswer, GroupError> {
        if hb.group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        let handle = {
            let mut classic = self.groups();
            if let Some(h) = classic.get(&hb.group_id).cloned() {
                let mut g = h.lock();
                match g.state() {
                    GroupState::Empty | GroupState::Dead if hb.member_epoch == 0 => {
                        g.kill(GroupError::NotCoordinator);
                        h.arm(&mut g, &self.config);
                        classic.remove(&hb.group_id);
                    }
                    _ => return Err(GroupError::GroupIdNotFound),
                }
            }
            let mut consumer = self.consumer_groups();
            match consumer.get(&hb.group_id) {
                Some(g) => g.clone(),
                None if hb.member_epoch == 0 => consumer
                    .entry(hb.group_id.clone())
                    .or_insert_with(|| {
                        let start = self.shard_start(shard_of(&hb.group_id, self.config.shards));
                        let mut g = ConsumerGroup::new(&hb.group_id, start.first_generation);
                        g.shard_epoch = start.epoch;
                        Arc::new(Mutex::new(g))
                    })
                    .clone(),
                None => return Err(GroupError::UnknownMemberId),
            }
        };
        let now = self.now_ms();
        let answer = {
            let mut g = handle.lock().unwrap_or_else(PoisonError::into_inner);
            g.heartbeat(hb.clone(), &self.config.consumer, now, topics)
        }?;
        self.store_consumer(&hb.group_id, &handle).await?;
        if hb.member_epoch == -1 {
            // The last member left: the group is forgotten (its committed
            // offsets stay in the metadata).
            let mut consumer = self.consumer_groups();
            let empty = consumer.get(&hb.group_id).is_some_and(|g| {
                Arc::ptr_eq(g, &handle)
                    && g.lock().unwrap_or_else(PoisonError::into_inner).is_empty()
            });
            if empty {
                consumer.remove(&hb.group_id);
            }
        }
        Ok(answer)
    }

    fn consumer_turn(&self, group_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.consumer_turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(group_id.to_string())
            .or_default()
            .clone()
    }

    /// Brings the store up to date with the consumer group (nothing to do
    /// when it holds the group as it is).
    async fn store_consumer(
        &self,
        group_id: &str,
        handle: &Arc<Mutex<ConsumerGroup>>,
    ) -> Result<(), GroupError> {
        let Some(store) = self.store.clone() else {
            return Ok(());
        };
        store_consumer_in(
            store,
            self.consumer_turn(group_id),
            self.config.shards,
            group_id,
            handle,
        )
        .await
    }

    /// Deletes the records of consumer groups this coordinator forgot
    /// (idle, or deleted), in the background.
    fn forget_consumers(&self, forgotten: Vec<(String, Arc<Mutex<ConsumerGroup>>)>) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for (id, handle) in forgotten {
            let stored = handle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .written
                .is_some();
            if !stored {
                continue;
            }
            let (store, turn, shards) =
                (store.clone(), self.consumer_turn(&id), self.config.shards);
            rt.spawn(async move {
                // The group is out of the coordinator's map, without
                // members: its record is deleted.
                if let Err(e) = store_consumer_in(store, turn, shards, &id, &handle).await {
                    tracing::warn!(group = %id, error = %e, "deleting a forgotten consumer group's record failed");
                }
            });
        }
    }

    /// ConsumerGroupDescribe of one group: GROUP_ID_NOT_FOUND for an
    /// unknown id or a classic group.
    pub fn consumer_describe(
        &self,
        group_id: &str,
    ) -> Result<ConsumerGroupDescription, GroupError> {
        let handle = self
            .consumer_group(group_id)
            .ok_or(GroupError::GroupIdNotFound)?;
        let now = self.now_ms();
        let mut g = handle.lock().unwrap_or_else(PoisonError::into_inner);
        g.expire(&self.config.consumer, now);
        Ok(g.describe())
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    fn groups(&self) -> MutexGuard<'_, HashMap<String, Arc<GroupHandle>>> {
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, group_id: &str) -> Option<Arc<GroupHandle>> {
        self.groups().get(group_id).cloned()
    }

    fn get_or_create(&self, group_id: &str) -> Arc<GroupHandle> {
        self.groups()
            .entry(group_id.to_string())
            .or_insert_with(|| self.new_handle(group_id))
            .clone()
    }

    /// Runs `f` on the group under its lock, then re-arms its timer.
    fn with_group<R>(
        &self,
        handle: &Arc<GroupHandle>,
        f: impl FnOnce(&mut Group, &GroupConfig, Instant) -> R,
    ) -> R {
        let mut group = handle.lock();
        let result = f(&mut group, &self.config, Instant::now());
        handle.arm(&mut group, &self.config);
        result
    }

    /// JoinGroup. Returns once the rebalance this join belongs to has
    /// completed (or at once for errors, MEMBER_ID_REQUIRED, and rejoins that
    /// change nothing).
    pub async fn join_group(&self, params: JoinParams) -> JoinResult {
        let member_id = params.member_id.clone();
        if params.group_id.is_empty() {
            return JoinResult::failed(member_id, GroupError::InvalidGroupId);
        }
        let session = i64::from(params.session_timeout_ms);
        let min = i64::try_from(self.config.min_session_timeout.as_millis()).unwrap_or(i64::MAX);
        let max = i64::try_from(self.config.max_session_timeout.as_millis()).unwrap_or(i64::MAX);
        if session < min || session > max {
            return JoinResult::failed(member_id, GroupError::InvalidSessionTimeout);
        }
        if let Some(cg) = self.consumer_group(&params.group_id) {
            let now = self.now_ms();
            let mut cg = cg.lock().unwrap_or_else(PoisonError::into_inner);
            cg.expire(&self.config.consumer, now);
            if !cg.is_empty() {
                return JoinResult::failed(member_id, GroupError::InconsistentGroupProtocol);
            }
            drop(cg);
            self.consumer_groups().remove(&params.group_id);
        }
        // Only a member without an id creates the group.
        let handle = if member_id.is_empty() {
            self.get_or_create(&params.group_id)
        } else {
            match self.get(&params.group_id) {
                Some(handle) => handle,
                None => return JoinResult::failed(member_id, GroupError::UnknownMemberId),
            }
        };
        let outcome = self.with_group(&handle, |g, cfg, now| g.join(params, cfg, now));
        match outcome {
            Outcome::Ready(result) => result,
            Outcome::Wait(rx) => rx
                .await
                .unwrap_or_else(|_| JoinResult::failed(member_id, GroupError::NotCoordinator)),
        }
    }

    /// SyncGroup. The leader's call hands out the assignment; a follower's
    /// waits for it.
    pub async fn sync_group(&self, params: SyncParams) -> SyncResult {
        if params.group_id.is_empty() {
            return SyncResult::failed(GroupError::InvalidGroupId);
        }
        let Some(handle) = self.get(&params.group_id) else {
            return SyncResult::failed(GroupError::UnknownMemberId);
        };
        let outcome = self.with_group(&handle, |g, _, now| g.sync(params, now));
        match outcome {
            Outcome::Ready(result) => result,
            Outcome::Wait(rx) => rx
                .await
                .unwrap_or_else(|_| SyncResult::failed(GroupError::NotCoordinator)),
        }
    }

    /// Heartbeat. `Err(RebalanceInProgress)` tells the member to rejoin.
    pub fn heartbeat(
        &self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        if group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        let handle = self.get(group_id).ok_or(GroupError::UnknownMemberId)?;
        self.with_group(&handle, |g, _, now| {
            g.heartbeat(generation_id, member_id, group_instance_id, now)
        })
    }

    /// LeaveGroup for `(member id, group instance id)` pairs (v3+ batches);
    /// one result per pair, in order. The outer error is for the request.
    pub fn leave_group(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        if group_id.is_empty() {
            return Err(GroupError::InvalidGroupId);
        }
        let Some(handle) = self.get(group_id) else {
            return Ok(vec![Err(GroupError::UnknownMemberId); members.len()]);
        };
        self.with_group(&handle, |g, cfg, now| {
            if g.state() == GroupState::Dead {
                return Err(GroupError::NotCoordinator);
            }
            Ok(g.leave(members, cfg, now))
        })
    }

    /// Whether an OffsetCommit with this generation and member may be
    /// stored. Generation -1 with an empty member id and no instance id is a
    /// commit by a client outside group management: allowed while the group
    /// is Empty or unknown, UNKNOWN_MEMBER_ID once it has members. Otherwise
    /// the member must be known (UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID) at
    /// the current generation (ILLEGAL_GENERATION), and not between JoinGroup
    /// and SyncGroup (REBALANCE_IN_PROGRESS). A member's commit counts as its
    /// heartbeat. An empty group id is allowed, as Kafka allows it here.
    pub fn validate_commit(
        &self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        group_instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        if let Some(cg) = self.consumer_group(group_id) {
            let now = self.now_ms();
            let mut cg = cg.lock().unwrap_or_else(PoisonError::into_inner);
            return cg.validate_commit(generation_id, member_id, &self.config.consumer, now);
        }
        let Some(handle) = self.get(group_id) else {
            return if generation_id >= 0 && !member_id.is_empty() {
                // A member of the group under its previous coordinator
                // (the group's shard moved here, e.g. a rolling restart):
                // its commit is taken, and it learns of the move at its
                // next heartbeat and rejoins. The shard fence keeps the
                // previous coordinator from committing meanwhile.
                let handle = self.get_or_create(group_id);
                self.with_group(&handle, |g, _, _| g.adopt(generation_id));
                tracing::info!(group = %group_id, generation = generation_id, "group adopted from its previous coordinator");
                Ok(())
            } else if generation_id >= 0 {
                Err(GroupError::IllegalGeneration)
            } else if !member_id.is_empty() || group_instance_id.is_some() {
                Err(GroupError::UnknownMemberId)
            } else {
                Ok(())
            };
        };
        self.with_group(&handle, |g, _, now| {
            g.validate_commit(generation_id, member_id, group_instance_id, now)
        })
    }

    /// Tells the coordinator whether the group has committed offsets. A
    /// group with offsets is created (Empty) if unknown, so that it is
    /// listed and described; an Empty group whose offsets are all gone is
    /// forgotten.
    pub fn set_has_offsets(&self, group_id: &str, has_offsets: bool) {
        let mut groups = self.groups();
        if self.consumer_groups().contains_key(group_id) {
            return;
        }
        if has_offsets {
            let handle = groups
                .entry(group_id.to_string())
                .or_insert_with(|| self.new_handle(group_id));
            handle.lock().has_offsets = true;
        } else if let Some(handle) = groups.get(group_id).cloned() {
            let mut group = handle.lock();
            group.has_offsets = false;
            if group.is_idle() {
                group.kill(GroupError::NotCoordinator);
                handle.arm(&mut group, &self.config);
                groups.remove(group_id);
            }
        }
    }

    /// DescribeGroups for one group. An unknown group is described as Dead
    /// with no error, as Kafka does.
    pub fn describe_group(&self, group_id: &str) -> GroupDescription {
        if self.consumer_group(group_id).is_some() {
            return GroupDescription {
                error: Some(GroupError::GroupIdNotFound),
                group_id: group_id.to_string(),
                state: GroupState::Dead,
                protocol_type: String::new(),
                protocol_data: String::new(),
                members: Vec::new(),
            };
        }
        match self.get(group_id) {
            Some(handle) => handle.lock().describe(),
            None => GroupDescription {
                error: None,
                group_id: group_id.to_string(),
                state: GroupState::Dead,
                protocol_type: String::new(),
                protocol_data: String::new(),
                members: Vec::new(),
            },
        }
    }

    /// ListGroups: every known group, or those in one of `states` (Kafka's
    /// state names, matched ignoring case), sorted by id.
    pub fn list_groups(&self, states: &[String]) -> Vec<GroupListing> {
        let handles: Vec<Arc<GroupHandle>> = self.groups().values().cloned().collect();
        let mut listed: Vec<GroupListing> = handles
            .iter()
            .map(|h| h.lock().listing())
            .filter(|l| l.state != GroupState::Dead.as_str())
            .chain(self.consumer_listings())
            .filter(|l| {
                states.is_empty() || states.iter().any(|s| s.eq_ignore_ascii_case(&l.state))
            })
            .collect();
        listed.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        listed
    }

    /// The groups whose lag is reported, with their type: classic groups
    /// with committed offsets or members (a coordinator that resumed a
    /// group knows its offsets only from its next commit), and consumer
    /// groups.
    pub fn lag_candidates(&self) -> Vec<(String, GroupType)> {
        let classic: Vec<(String, Arc<GroupHandle>)> = self
            .groups()
            .iter()
            .map(|(id, h)| (id.clone(), h.clone()))
            .collect();
        let mut out: Vec<(String, GroupType)> = classic
            .into_iter()
            .filter(|(_, h)| {
                let g = h.lock();
                g.has_offsets || !matches!(g.state(), GroupState::Empty | GroupState::Dead)
            })
            .map(|(id, _)| (id, GroupType::Classic))
            .collect();
        out.extend(
            self.consumer_groups()
                .keys()
                .map(|id| (id.clone(), GroupType::Consumer)),
        );
        out
    }

    /// Every consumer group, as ListGroups lists it.
    fn consumer_listings(&self) -> Vec<GroupListing> {
        let handles: Vec<Arc<Mutex<ConsumerGroup>>> =
            self.consumer_groups().values().cloned().collect();
        let now = self.now_ms();
        handles
            .iter()
            .map(|h| {
                let mut g = h.lock().unwrap_or_else(PoisonError::into_inner);
                g.expire(&self.config.consumer, now);
                let d = g.describe();
                GroupListing {
                    group_id: d.group_id,
                    protocol_type: "consumer".to_string(),
                    state: d.state,
                    group_type: GroupType::Consumer,
                }
            })
            .collect()
    }

    /// DeleteGroups: an Empty group is forgotten; one with members gives
    /// NON_EMPTY_GROUP. A group the coordinator does not know gives `Ok`:
    /// it may still have committed offsets, which the caller deletes (or
    /// answers GROUP_ID_NOT_FOUND when there were none).
    pub fn delete_groups(&self, group_ids: &[String]) -> Vec<(String, Result<(), GroupError>)> {
        let mut groups = self.groups();
        group_ids
            .iter()
            .map(|id| {
                let mut consumer = self.consumer_groups();
                if let Some(cg) = consumer.get(id).cloned() {
                    let now = self.now_ms();
                    let mut cg = cg.lock().unwrap_or_else(PoisonError::into_inner);
                    cg.expire(&self.config.consumer, now);
                    if !cg.is_empty() {
                        return (id.clone(), Err(GroupError::NonEmptyGroup));
                    }
                    drop(cg);
                    if let Some(h) = consumer.remove(id) {
                        self.forget_consumers(vec![(id.clone(), h)]);
                    }
                    tracing::info!(group = %id, "consumer group deleted");
                    return (id.clone(), Ok(()));
                }
                drop(consumer);
                let Some(handle) = groups.get(id).cloned() else {
                    return (id.clone(), Ok(()));
                };
                let mut group = handle.lock();
                let result = match group.state() {
                    GroupState::Empty | GroupState::Dead => {
                        group.kill(GroupError::NotCoordinator);
                        handle.arm(&mut group, &self.config);
                        groups.remove(id);
                        tracing::info!(group = %id, "group deleted");
                        Ok(())
                    }
                    _ => Err(GroupError::NonEmptyGroup),
                };
                (id.clone(), result)
            })
            .collect()
    }

    /// Forgets every group of `shard` (the broker no longer owns it); their
    /// waiting JoinGroup and SyncGroup calls get NOT_COORDINATOR. Returns
    /// how many groups were dropped.
    pub fn drop_shard(&self, shard: u32) -> usize {
        let dropped: Vec<Arc<GroupHandle>> = {
            let mut groups = self.groups();
            let ids: Vec<String> = groups
                .keys()
                .filter(|id| shard_of(id, self.config.shards) == shard)
                .cloned()
                .collect();
            let dropped = ids.iter().filter_map(|id| groups.remove(id)).collect();
            self.consumer_groups()
                .retain(|id, _| shard_of(id, self.config.shards) != shard);
            self.consumer_turns
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|id, _| shard_of(id, self.config.shards) != shard);
            dropped
        };
        for handle in &dropped {
            let mut group = handle.lock();
            group.kill(GroupError::NotCoordinator);
            handle.arm(&mut group, &self.config);
        }
        if !dropped.is_empty() {
            tracing::info!(shard, groups = dropped.len(), "coordinator shard dropped");
        }
        dropped.len()
    }

    /// Forgets Empty groups without committed offsets or pending members
    /// (Kafka drops those in its periodic offset expiry), and consumer
    /// groups without members (their offsets stay in the metadata); returns
    /// how many.
    pub fn remove_idle_groups(&self) -> usize {
        let mut groups = self.groups();
        let now = self.now_ms();
        let mut consumer = self.consumer_groups();
        let mut forgotten = Vec::new();
        consumer.retain(|id, handle| {
            let mut g = handle.lock().unwrap_or_else(PoisonError::into_inner);
            g.expire(&self.config.consumer, now);
            if g.is_empty() {
                forgotten.push((id.clone(), handle.clone()));
            }
            !g.is_empty()
        });
        let consumer_removed = forgotten.len();
        drop(consumer);
        self.forget_consumers(forgotten);
        let before = groups.len() + consumer_removed;
        groups.retain(|_, handle| {
            let mut group = handle.lock();
            if group.is_idle() {
                group.kill(GroupError::NotCoordinator);
                handle.arm(&mut group, &self.config);
                false
            } else {
                true
            }
        });
        before - groups.len()
    }
}

/// Writes the consumer group as it is now, unless the store already holds
/// that, under the group's turn.
async fn store_consumer_in(
    store: Arc<dyn GroupStore>,
    turn: Arc<tokio::sync::Mutex<()>>,
    shards: u32,
    group_id: &str,
    handle: &Arc<Mutex<ConsumerGroup>>,
) -> Result<(), GroupError> {
    let _turn = turn.lock().await;
    let (now, shard_epoch) = {
        let g = handle.lock().unwrap_or_else(PoisonError::into_inner);
        let now = g.durable();
        if now == g.written {
            return Ok(());
        }
        (now, g.shard_epoch)
    };
    let shard = shard_of(group_id, shards);
    let write = store.write(shard, shard_epoch, group_id, now.clone());
    tokio::time::timeout(CONSUMER_STORE_TIMEOUT, write)
        .await
        .unwrap_or(Err(GroupError::CoordinatorNotAvailable))?;
    handle
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .written = now;
    Ok(())
}
