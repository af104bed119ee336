//! The classic consumer-group coordinator (JoinGroup / SyncGroup /
//! Heartbeat / LeaveGroup, KIP-345 static members, KIP-394 member ids), one
//! per broker.
//!
//! Group ids are spread over [`GroupConfig::shards`] coordinator shards by
//! [`shard_of`]; the caller routes a request here only when this broker owns
//! the group's shard, and calls [`GroupCoordinator::drop_shard`] when it
//! loses one. Groups are created on first use and live in memory only:
//! after a shard moves, members rejoin at the new owner. Committed offsets
//! are stored by the caller; [`GroupCoordinator::validate_commit`] says
//! whether a commit may be stored.
//!
//! Each group sits behind its own lock; no lock is held across an await.
//! JoinGroup and SyncGroup wait on a oneshot channel. Timeouts (sessions,
//! rebalances, the initial rebalance delay) run on Tokio's clock in a task
//! per group that exists only while the group has something to time out.

mod handle;
mod member;
mod state;
mod types;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;

use handle::GroupHandle;
use state::{Group, Outcome};

pub use types::{
    CommitParams, DEFAULT_OFFSET_METADATA_MAX_BYTES, DescribedMember, GroupConfig,
    GroupDescription, GroupError, GroupListing, GroupState, JoinMember, JoinParams, JoinResult,
    OffsetToCommit, SyncParams, SyncResult,
};

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
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig) -> Self {
        Self {
            config: Arc::new(config),
            groups: Mutex::new(HashMap::new()),
        }
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
            .or_insert_with(|| GroupHandle::new(group_id.to_string()))
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
        if has_offsets {
            let handle = groups
                .entry(group_id.to_string())
                .or_insert_with(|| GroupHandle::new(group_id.to_string()));
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
            .filter(|l| l.state != GroupState::Dead)
            .filter(|l| {
                states.is_empty()
                    || states
                        .iter()
                        .any(|s| s.eq_ignore_ascii_case(l.state.as_str()))
            })
            .collect();
        listed.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        listed
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
            ids.iter().filter_map(|id| groups.remove(id)).collect()
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
    /// (Kafka drops those in its periodic offset expiry); returns how many.
    pub fn remove_idle_groups(&self) -> usize {
        let mut groups = self.groups();
        let before = groups.len();
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
