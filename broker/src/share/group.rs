//! The state machine of one share group's membership (KIP-932's
//! ShareGroupHeartbeat and ShareGroupDescribe): members join with epoch 0,
//! heartbeat with their current epoch, leave with −1, time out when
//! silent; the coordinator assigns partitions to members itself, several
//! members per partition when there are more members than partitions.
//!
//! Synchronous, time passed in (epoch milliseconds); topics are looked up
//! through the caller's `topics` function. Membership lives in memory only
//! (see `docs/queues.md`): a group's progress is in its share-partitions.

use std::collections::{BTreeMap, BTreeSet};

use floe_types::TopicId;

use super::partition::MemberId;

#[cfg(test)]
mod tests;

/// A topic a member may subscribe to, as the caller knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicInfo {
    pub id: TopicId,
    pub partitions: u32,
}

/// Settings of share groups (Kafka's `group.share.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupConfig {
    /// `share.heartbeat.interval.ms`, told to members.
    pub heartbeat_interval_ms: u32,
    /// `share.session.timeout.ms`: a member silent this long is removed.
    pub session_timeout_ms: u64,
    /// `group.share.max.size`: members per group.
    pub max_members: usize,
}

/// Kafka's defaults.
impl Default for ShareGroupConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval_ms: 5_000,
            session_timeout_ms: 45_000,
            max_members: 200,
        }
    }
}

/// Why a heartbeat was refused, named as Kafka names the error. Nothing
/// changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ShareGroupError {
    /// UNKNOWN_MEMBER_ID (25): the member is not (or no more) in the group.
    #[error("unknown member id")]
    UnknownMemberId,
    /// FENCED_MEMBER_EPOCH (110): the member's epoch is not its current one.
    #[error("fenced member epoch")]
    FencedMemberEpoch,
    /// GROUP_MAX_SIZE_REACHED (81).
    #[error("the group has the most members it may have")]
    GroupMaxSizeReached,
    /// INVALID_REQUEST (42): an empty member id, a join without topics.
    #[error("invalid request: {0}")]
    InvalidRequest(&'static str),
    /// NOT_COORDINATOR (16): the broker asked does not own the group's
    /// coordinator shard (now), or could not be reached.
    #[error("not the group's coordinator")]
    NotCoordinator,
    /// GROUP_ID_NOT_FOUND (69): the id is a classic or consumer group's
    /// (one id namespace, see `super::namespace`).
    #[error("the group is not a share group")]
    NotShareGroup,
    /// NON_EMPTY_GROUP (68): the group has members (a deletion, a change
    /// of its offsets).
    #[error("the group is not empty")]
    NonEmptyGroup,
}

/// One member's partitions: topic → partition indexes, sorted.
pub type Assignment = BTreeMap<TopicId, Vec<i32>>;

/// A ShareGroupHeartbeat as the coordinator needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    pub member_id: MemberId,
    /// 0 joins, −1 leaves, otherwise the member's current epoch.
    pub member_epoch: i32,
    /// `None`: unchanged since the last heartbeat.
    pub subscribed_topics: Option<Vec<String>>,
    pub rack_id: Option<String>,
}

/// What a heartbeat answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub member_epoch: i32,
    pub heartbeat_interval_ms: u32,
    /// The member's partitions when they changed (or it just joined).
    pub assignment: Option<Assignment>,
}

/// A member, as ShareGroupDescribe shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedShareMember {
    pub member_id: MemberId,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub subscribed_topics: Vec<String>,
    pub assignment: Assignment,
}

/// A share group's state (Kafka's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareGroupState {
    Empty,
    Stable,
}

impl ShareGroupState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::Stable => "Stable",
        }
    }
}

/// ShareGroupDescribe's answer for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupDescription {
    pub group_id: String,
    pub state: ShareGroupState,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: Vec<DescribedShareMember>,
}

#[derive(Debug, Clone)]
struct Member {
    epoch: i32,
    rack_id: Option<String>,
    subscribed: BTreeSet<String>,
    assignment: Assignment,
    last_seen_ms: u64,
}

/// One share group's membership.
#[derive(Debug, Clone)]
pub struct ShareGroup {
    id: String,
    config: ShareGroupConfig,
    /// Bumped by every change of members or subscriptions.
    epoch: i32,
    /// The group epoch the current assignment was computed at.
    assignment_epoch: i32,
    members: BTreeMap<MemberId, Member>,
}

impl ShareGroup {
    pub fn new(id: &str, config: ShareGroupConfig) -> Self {
        Self {
            id: id.to_owned(),
            config,
            epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Takes the group's settings as they are now (its configs may have
    /// changed): a new heartbeat interval is told at the next heartbeat, a
    /// new session timeout counts from each member's last heartbeat.
    pub fn set_config(&mut self, config: ShareGroupConfig) {
        self.config = config;
    }

    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether `member` is in the group (ShareFetch checks it).
    pub fn has_member(&self, member: &MemberId) -> bool {
        self.members.contains_key(member)
    }

    /// One heartbeat at `now_ms`. Silent members are removed first.
    pub fn heartbeat(
        &mut self,
        hb: &Heartbeat,
        now_ms: u64,
        topics: &dyn Fn(&str) -> Option<TopicInfo>,
    ) -> Result<HeartbeatAnswer, ShareGroupError> {
        if hb.member_id.as_str().is_empty() {
            return Err(ShareGroupError::InvalidRequest("empty member id"));
        }
        self.expire(now_ms, topics);
        let interval = self.config.heartbeat_interval_ms;
        match hb.member_epoch {
            -1 => {
                if self.members.remove(&hb.member_id).is_none() {
                    return Err(ShareGroupError::UnknownMemberId);
                }
                self.changed(topics);
                Ok(HeartbeatAnswer {
                    member_epoch: -1,
                    heartbeat_interval_ms: interval,
                    assignment: None,
                })
            }
            0 => {
                let subscribed: BTreeSet<String> = hb
                    .subscribed_topics
                    .iter()
                    .flatten()
                    .filter(|t| !t.is_empty())
                    .cloned()
                    .collect();
                if subscribed.is_empty() {
                    return Err(ShareGroupError::InvalidRequest(
                        "a joining member names no topic",
                    ));
                }
                if !self.members.contains_key(&hb.member_id)
                    && self.members.len() >= self.config.max_members
                {
                    return Err(ShareGroupError::GroupMaxSizeReached);
                }
                self.members.insert(
                    hb.member_id.clone(),
                    Member {
                        epoch: 0,
                        rack_id: hb.rack_id.clone(),
                        subscribed,
                        assignment: Assignment::new(),
                        last_seen_ms: now_ms,
                    },
                );
                self.changed(topics);
                Ok(self.answer(&hb.member_id, true))
            }
            epoch => {
                let member = self
                    .members
                    .get_mut(&hb.member_id)
                    .ok_or(ShareGroupError::UnknownMemberId)?;
                if epoch != member.epoch {
                    return Err(ShareGroupError::FencedMemberEpoch);
                }
                member.last_seen_ms = now_ms;
                let mut changed = false;
                if let Some(topics) = &hb.subscribed_topics {
                    let subscribed: BTreeSet<String> =
                        topics.iter().filter(|t| !t.is_empty()).cloned().collect();
                    if subscribed != member.subscribed {
                        member.subscribed = subscribed;
                        changed = true;
                    }
                }
                if changed {
                    self.changed(topics);
                } else {
                    // A topic created or grown since: assign its partitions.
                    self.reassign_if_topics_changed(topics);
                }
                Ok(self.answer(&hb.member_id, false))
            }
        }
    }

    /// Removes members silent for the session timeout at `now_ms`; returns
    /// them (their share sessions and locks are released by the caller).
    pub fn expire(
        &mut self,
        now_ms: u64,
        topics: &dyn Fn(&str) -> Option<TopicInfo>,
    ) -> Vec<MemberId> {
        let timeout = self.config.session_timeout_ms;
        let gone: Vec<MemberId> = self
            .members
            .iter()
            .filter(|(_, m)| m.last_seen_ms.saturating_add(timeout) <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        if !gone.is_empty() {
            for id in &gone {
                self.members.remove(id);
            }
            self.changed(topics);
        }
        gone
    }

    /// When the next member times out, if one may.
    pub fn next_deadline(&self) -> Option<u64> {
        self.members
            .values()
            .map(|m| {
                m.last_seen_ms
                    .saturating_add(self.config.session_timeout_ms)
            })
            .min()
    }

    pub fn describe(&self) -> ShareGroupDescription {
        ShareGroupDescription {
            group_id: self.id.clone(),
            state: if self.members.is_empty() {
                ShareGroupState::Empty
            } else {
                ShareGroupState::Stable
            },
            group_epoch: self.epoch,
            assignment_epoch: self.assignment_epoch,
            members: self
                .members
                .iter()
                .map(|(id, m)| DescribedShareMember {
                    member_id: id.clone(),
                    member_epoch: m.epoch,
                    rack_id: m.rack_id.clone(),
                    subscribed_topics: m.subscribed.iter().cloned().collect(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// The member's answer; its epoch catches up with the group's, and
    /// its assignment is sent when it is new to the member.
    fn answer(&mut self, id: &MemberId, joined: bool) -> HeartbeatAnswer {
        let epoch = self.epoch;
        let interval = self.config.heartbeat_interval_ms;
        match self.members.get_mut(id) {
            Some(member) => {
                let send = joined || member.epoch != epoch;
                member.epoch = epoch;
                HeartbeatAnswer {
                    member_epoch: epoch,
                    heartbeat_interval_ms: interval,
                    assignment: send.then(|| member.assignment.clone()),
                }
            }
            None => HeartbeatAnswer {
                member_epoch: -1,
                heartbeat_interval_ms: interval,
                assignment: None,
            },
        }
    }

    /// Members or subscriptions changed: a new group epoch and assignment.
    fn changed(&mut self, topics: &dyn Fn(&str) -> Option<TopicInfo>) {
        self.epoch = self.epoch.wrapping_add(1).max(1);
        self.assign(topics);
    }

    fn reassign_if_topics_changed(&mut self, topics: &dyn Fn(&str) -> Option<TopicInfo>) {
        let target = compute(&self.members, topics);
        let same = self
            .members
            .iter()
            .all(|(id, m)| target.get(id).is_some_and(|a| *a == m.assignment));
        if !same {
            self.changed(topics);
        }
    }

    fn assign(&mut self, topics: &dyn Fn(&str) -> Option<TopicInfo>) {
        let mut target = compute(&self.members, topics);
        for (id, member) in self.members.iter_mut() {
            member.assignment = target.remove(id).unwrap_or_default();
        }
        self.assignment_epoch = self.epoch;
    }
}

/// The assignment of every member: per topic, with M subscribed members
/// (in id order) and P partitions, partition p goes to member p mod M when
/// M ≤ P (each partition to one member), and member i gets partition
/// i mod P when M > P (each partition to several members). Every
/// subscribed member gets at least one partition of each topic with
/// partitions, and every partition at least one member.
fn compute(
    members: &BTreeMap<MemberId, Member>,
    topics: &dyn Fn(&str) -> Option<TopicInfo>,
) -> BTreeMap<MemberId, Assignment> {
    let mut out: BTreeMap<MemberId, Assignment> = members
        .keys()
        .map(|id| (id.clone(), Assignment::new()))
        .collect();
    let names: BTreeSet<&String> = members.values().flat_map(|m| &m.subscribed).collect();
    for name in names {
        let Some(info) = topics(name) else { continue };
        let subscribers: Vec<&MemberId> = members
            .iter()
            .filter(|(_, m)| m.subscribed.contains(name))
            .map(|(id, _)| id)
            .collect();
        let (m, p) = (subscribers.len(), info.partitions as usize);
        if m == 0 || p == 0 {
            continue;
        }
        for (i, member) in subscribers.iter().enumerate() {
            let parts: Vec<i32> = if m <= p {
                (i..p).step_by(m).map(|x| x as i32).collect()
            } else {
                vec![(i % p) as i32]
            };
            if let Some(a) = out.get_mut(*member) {
                a.insert(info.id, parts);
            }
        }
    }
    out
}
