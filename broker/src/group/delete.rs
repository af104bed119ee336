//! DeleteGroups and OffsetDelete on the coordinator: whether the group's
//! stored state may go is decided from its live members, and the delete is
//! written to the metadata with the group's [`ShardFence`], both under the
//! group's gate (`GroupService::gate`). A join or an offset commit of the
//! group waits for the gate, so no member joins (and no offset is
//! committed) between the decision and the write, and a coordinator that
//! lost the shard meanwhile is refused by the fence (NOT_COORDINATOR).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use floe_metadata::ErrorKind as MetaKind;
use floe_metadata::command::ShardFence;

use super::service::GroupService;
use super::{GroupCoordinator, GroupError, GroupState, shard_of};

/// Gates above which the released ones are forgotten.
const PRUNE_ABOVE: usize = 1024;

/// One async lock per group id: held across a decision about the group's
/// stored state and the write that carries it out.
#[derive(Default)]
pub(crate) struct Gates {
    by_group: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl Gates {
    pub(crate) fn of(&self, group_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut by_group = self.by_group.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(gate) = by_group.get(group_id).and_then(Weak::upgrade) {
            return gate;
        }
        if by_group.len() > PRUNE_ABOVE {
            by_group.retain(|_, g| g.strong_count() > 0);
        }
        let gate = Arc::new(tokio::sync::Mutex::new(()));
        by_group.insert(group_id.to_string(), Arc::downgrade(&gate));
        gate
    }
}

impl GroupService {
    /// The group's gate (see [`Gates`]).
    pub(crate) fn gate(&self, group_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.gates.of(group_id)
    }

    /// Waits while a delete of the group's stored state is being decided
    /// and written (a join calls it first).
    pub(crate) async fn pass_gate(&self, group_id: &str) {
        let gate = self.gate(group_id);
        drop(gate.lock().await);
    }

    /// The fence this broker holds the group's shard with now.
    pub(crate) fn fence_of(&self, group_id: &str) -> Result<ShardFence, GroupError> {
        let shard = shard_of(group_id, self.shards.shard_count());
        self.shards.fence(shard).ok_or(GroupError::NotCoordinator)
    }

    /// [`crate::group::Coordinator::delete_group`] at `c`.
    pub(crate) async fn delete_group(
        &self,
        c: &GroupCoordinator,
        group_id: &str,
    ) -> Result<(), GroupError> {
        let gate = self.gate(group_id);
        let _held = gate.lock().await;
        let fence = self.fence_of(group_id)?;
        if let Some((_, Err(e))) = c.delete_groups(&[group_id.to_string()]).pop() {
            return Err(e);
        }
        self.partitions
            .meta()
            .delete_group(fence, group_id)
            .await
            .map_err(|e| written(group_id, &e))?;
        c.set_has_offsets(group_id, false);
        Ok(())
    }

    /// [`crate::group::Coordinator::delete_offsets`] at `c`.
    pub(crate) async fn delete_offsets(
        &self,
        c: &GroupCoordinator,
        group_id: &str,
        partitions: &[(String, u32)],
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        let gate = self.gate(group_id);
        let _held = gate.lock().await;
        let fence = self.fence_of(group_id)?;
        let subscribed = self.subscriptions(c, group_id).await?;
        let mut results = Vec::with_capacity(partitions.len());
        let mut delete = Vec::new();
        for (topic, partition) in partitions {
            if subscribed.holds(topic) {
                results.push(Err(GroupError::GroupSubscribedToTopic));
            } else {
                results.push(Ok(()));
                delete.push((topic.clone(), *partition));
            }
        }
        if !delete.is_empty() {
            self.partitions
                .meta()
                .delete_offsets(fence, group_id, &delete)
                .await
                .map_err(|e| written(group_id, &e))?;
        }
        Ok(results)
    }

    /// What the group's live members subscribe to; GROUP_ID_NOT_FOUND for
    /// a group neither the coordinator nor the metadata knows.
    async fn subscriptions(
        &self,
        c: &GroupCoordinator,
        group_id: &str,
    ) -> Result<Subscribed, GroupError> {
        let desc = c.describe_group(group_id);
        // A consumer group (KIP-848) is not a classic group: its members'
        // subscriptions are in its description.
        if desc.error == Some(GroupError::GroupIdNotFound)
            && let Ok(d) = c.consumer_describe(group_id)
        {
            return Ok(Subscribed {
                busy: !d.members.is_empty(),
                topics: Some(
                    d.members
                        .iter()
                        .flat_map(|m| m.subscribed_topic_names.iter().cloned())
                        .collect(),
                ),
            });
        }
        if let Some(e) = desc.error {
            return Err(e);
        }
        if desc.state == GroupState::Dead {
            let stored = self
                .partitions
                .meta()
                .fetch_offsets(group_id)
                .await
                .map_err(|_| GroupError::CoordinatorNotAvailable)?;
            if stored.is_empty() {
                return Err(GroupError::GroupIdNotFound);
            }
        }
        // While the group rebalances its subscriptions are not known: every
        // topic counts as subscribed then.
        let topics = match desc.state {
            GroupState::Stable if desc.protocol_type == "consumer" => desc
                .members
                .iter()
                .map(|m| subscribed_topics(&m.metadata))
                .collect::<Option<Vec<Vec<String>>>>()
                .map(|v| v.into_iter().flatten().collect()),
            _ => None,
        };
        Ok(Subscribed {
            busy: !matches!(desc.state, GroupState::Empty | GroupState::Dead),
            topics,
        })
    }
}

/// The topics a group's live members subscribe to.
struct Subscribed {
    /// Whether the group has live members.
    busy: bool,
    /// `None`: not known (every topic counts).
    topics: Option<Vec<String>>,
}

impl Subscribed {
    fn holds(&self, topic: &str) -> bool {
        self.busy
            && self
                .topics
                .as_ref()
                .is_none_or(|t| t.iter().any(|s| s == topic))
    }
}

/// A failed write of a group's stored state: NOT_COORDINATOR when the shard
/// moved (the client finds the coordinator again), COORDINATOR_NOT_AVAILABLE
/// otherwise.
fn written(group_id: &str, e: &floe_metadata::MetaError) -> GroupError {
    if e.kind() == MetaKind::StaleCoordinator {
        tracing::info!(group = %group_id, error = %e, "group delete fenced: the shard moved");
        GroupError::NotCoordinator
    } else {
        tracing::warn!(group = %group_id, error = %e, "deleting a group's stored state failed");
        GroupError::CoordinatorNotAvailable
    }
}

/// The topics a consumer-protocol subscription (JoinGroup metadata of
/// protocol type "consumer") names: version (i16), then an array of strings.
/// `None` if the bytes are not such a subscription.
pub fn subscribed_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut b = metadata;
    let take = |b: &mut &[u8], n: usize| -> Option<Vec<u8>> {
        if b.len() < n {
            return None;
        }
        let (head, tail) = b.split_at(n);
        *b = tail;
        Some(head.to_vec())
    };
    let _version = take(&mut b, 2)?;
    let count = i32::from_be_bytes(take(&mut b, 4)?.try_into().ok()?);
    if count < 0 || count as usize > b.len() / 2 {
        return None;
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = i16::from_be_bytes(take(&mut b, 2)?.try_into().ok()?);
        if len < 0 {
            return None;
        }
        out.push(String::from_utf8(take(&mut b, len as usize)?).ok()?);
    }
    Some(out)
}
