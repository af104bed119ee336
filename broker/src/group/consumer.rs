//! The state machine of one consumer group of the new protocol (KIP-848:
//! ConsumerGroupHeartbeat and ConsumerGroupDescribe).
//!
//! Every change of members, subscriptions or subscribed topics bumps the
//! group epoch; the coordinator's assignor then computes the target
//! assignment for that epoch. Each member moves towards its target by
//! heartbeats (incremental reconciliation): it first gives up the
//! partitions it must lose (keeping its epoch until it reports them gone),
//! then takes the new epoch and only those of its new partitions no other
//! member still holds; the rest come on later heartbeats, once released.
//! So a partition is never owned by two members at once.
//!
//! Synchronous, time passed in (milliseconds); sessions and revocations
//! time out on the next call that touches the group (any member's
//! heartbeat, a describe), so nothing runs in the background.

use std::collections::{BTreeMap, BTreeSet};

use floe_types::TopicId;

use super::assignor::{self, Assignment, AssignorMember};
use super::record::{
    ConsumerMemberRecord, ConsumerRecord, GroupRecord, SeenTopic, TopicPartitions,
};
use super::types::GroupError;
pub use crate::config::ConsumerGroupConfig;

/// A subscribed topic as the caller knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicMeta {
    pub id: TopicId,
    pub partitions: u32,
}

/// A ConsumerGroupHeartbeat as the coordinator needs it. `None` fields did
/// not change since the member's last heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerHeartbeat {
    pub group_id: String,
    /// Empty on a v0 join: the coordinator makes one.
    pub member_id: String,
    /// 0 joins, −1 leaves, −2 leaves for now (static members), else the
    /// member's current epoch.
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// −1: unchanged.
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member owns now.
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

/// What a heartbeat answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerHeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's partitions, when they changed since it was last told
    /// (or it joined, or it reported others).
    pub assignment: Option<Assignment>,
}

/// A member as ConsumerGroupDescribe shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribedConsumer {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub assignment: Assignment,
    pub target_assignment: Assignment,
}

/// ConsumerGroupDescribe's answer for one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerGroupDescription {
    pub group_id: String,
    /// Empty, Assigning, Reconciling, Stable (Kafka's names).
    pub state: String,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor_name: String,
    pub members: Vec<DescribedConsumer>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemberState {
    /// At the target of its epoch.
    Stable,
    /// Must report some partitions gone before it gets a new epoch.
    Unrevoked,
    /// At the new epoch, waiting for partitions others still hold.
    Unreleased,
}

#[derive(Debug, Clone)]
struct Member {
    instance_id: Option<String>,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    epoch: i32,
    previous_epoch: i32,
    state: MemberState,
    subscribed: BTreeSet<String>,
    assignor: Option<String>,
    rebalance_timeout_ms: u64,
    /// Partitions the member may consume now.
    assigned: Assignment,
    /// Partitions it was told to give up and has not reported gone.
    revoking: Assignment,
    last_seen_ms: u64,
    revoke_deadline_ms: Option<u64>,
    /// What the member was last told it has.
    told: Option<Assignment>,
    /// A static member that left with epoch −2: its partitions wait for
    /// its instance to come back (or its session to end).
    left_static: bool,
}

/// One consumer group.
#[derive(Debug, Clone)]
pub struct ConsumerGroup {
    id: String,
    group_epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, Member>,
    target: BTreeMap<String, Assignment>,
    /// The subscribed topics as they were when the target was computed.
    topics_seen: BTreeMap<String, Option<TopicMeta>>,
    assignor: String,
    /// The epoch of its shard the group was created or resumed under: its
    /// records are stored with it.
    pub(super) shard_epoch: u64,
    /// What the store holds of the group ([`Self::durable`] as last
    /// written, or loaded); `None`: nothing.
    pub(super) written: Option<Vec<u8>>,
}

fn state_code(s: MemberState) -> i32 {
    match s {
        MemberState::Stable => 0,
        MemberState::Unrevoked => 1,
        MemberState::Unreleased => 2,
    }
}

fn topic_partitions(a: &Assignment) -> Vec<TopicPartitions> {
    a.iter()
        .map(|(t, ps)| TopicPartitions {
            topic_id: t.as_bytes().to_vec(),
            partitions: ps.iter().copied().collect(),
        })
        .collect()
}

fn topic_id(bytes: &[u8]) -> Result<TopicId, String> {
    uuid::Uuid::from_slice(bytes)
        .map(TopicId)
        .map_err(|_| format!("a topic id of {} bytes", bytes.len()))
}

fn assignment(tps: &[TopicPartitions]) -> Result<Assignment, String> {
    let mut out = Assignment::new();
    for tp in tps {
        out.entry(topic_id(&tp.topic_id)?)
            .or_default()
            .extend(tp.partitions.iter().copied());
    }
    Ok(out)
}

fn contains_any(a: &Assignment, b: &Assignment) -> bool {
    b.iter()
        .any(|(t, ps)| a.get(t).is_some_and(|x| !x.is_disjoint(ps)))
}

fn intersect(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (t, ps) in a {
        if let Some(other) = b.get(t) {
            let both: BTreeSet<i32> = ps.intersection(other).copied().collect();
            if !both.is_empty() {
                out.insert(*t, both);
            }
        }
    }
    out
}

fn minus(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (t, ps) in a {
        let rest: BTreeSet<i32> = match b.get(t) {
            Some(other) => ps.difference(other).copied().collect(),
            None => ps.clone(),
        };
        if !rest.is_empty() {
            out.insert(*t, rest);
        }
    }
    out
}

fn is_subset(a: &Assignment, b: &Assignment) -> bool {
    minus(a, b).is_empty()
}

impl ConsumerGroup {
    /// A group whose epochs start above `first_epoch` (0, or higher after
    /// a shard move: see `GroupCoordinator::shard_taken`).
    pub fn new(id: &str, first_epoch: i32) -> Self {
        Self {
            id: id.to_string(),
            group_epoch: first_epoch,
            assignment_epoch: first_epoch,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            topics_seen: BTreeMap::new(),
            assignor: assignor::UNIFORM.to_string(),
            shard_epoch: 0,
            written: None,
        }
    }

    /// The group as stored: `None` when it has no members (its record is
    /// then deleted). Sessions and revocation deadlines are not stored: a
    /// resumed group starts them over.
    pub fn durable(&self) -> Option<Vec<u8>> {
        if self.members.is_empty() {
            return None;
        }
        let record = ConsumerRecord {
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            assignor: self.assignor.clone(),
            members: self
                .members
                .iter()
                .map(|(id, m)| ConsumerMemberRecord {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    epoch: m.epoch,
                    previous_epoch: m.previous_epoch,
                    state: state_code(m.state),
                    subscribed: m.subscribed.iter().cloned().collect(),
                    assignor: m.assignor.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    assigned: topic_partitions(&m.assigned),
                    revoking: topic_partitions(&m.revoking),
                    target: self
                        .target
                        .get(id)
                        .map(topic_partitions)
                        .unwrap_or_default(),
                    left_static: m.left_static,
                })
                .collect(),
            topics_seen: self
                .topics_seen
                .iter()
                .map(|(name, t)| SeenTopic {
                    name: name.clone(),
                    exists: t.is_some(),
                    topic_id: t.map(|t| t.id.as_bytes().to_vec()).unwrap_or_default(),
                    partitions: t.map_or(0, |t| t.partitions),
                })
                .collect(),
        };
        Some(
            GroupRecord {
                consumer: Some(record),
                ..Default::default()
            }
            .to_bytes(),
        )
    }

    /// A group as a previous coordinator stored it; every member's session
    /// (and a revocation in progress) starts over at `now_ms`, and each
    /// member is sent its whole assignment at its next heartbeat.
    pub fn restore(
        id: &str,
        record: ConsumerRecord,
        shard_epoch: u64,
        now_ms: u64,
    ) -> Result<Self, String> {
        let mut g = Self::new(id, record.group_epoch);
        g.assignment_epoch = record.assignment_epoch;
        if assignor::ASSIGNORS.contains(&record.assignor.as_str()) {
            g.assignor = record.assignor;
        }
        g.shard_epoch = shard_epoch;
        for t in record.topics_seen {
            let meta = if t.exists {
                Some(TopicMeta {
                    id: topic_id(&t.topic_id)?,
                    partitions: t.partitions,
                })
            } else {
                None
            };
            g.topics_seen.insert(t.name, meta);
        }
        for m in record.members {
            let state = match m.state {
                0 => MemberState::Stable,
                1 => MemberState::Unrevoked,
                2 => MemberState::Unreleased,
                other => return Err(format!("member state {other}")),
            };
            let target = assignment(&m.target)?;
            if !target.is_empty() {
                g.target.insert(m.member_id.clone(), target);
            }
            g.members.insert(
                m.member_id,
                Member {
                    instance_id: m.instance_id,
                    rack_id: m.rack_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    epoch: m.epoch,
                    previous_epoch: m.previous_epoch,
                    state,
                    subscribed: m.subscribed.into_iter().collect(),
                    assignor: m.assignor,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    assigned: assignment(&m.assigned)?,
                    revoking: assignment(&m.revoking)?,
                    last_seen_ms: now_ms,
                    revoke_deadline_ms: (state == MemberState::Unrevoked)
                        .then(|| now_ms.saturating_add(m.rebalance_timeout_ms)),
                    told: None,
                    left_static: m.left_static,
                },
            );
        }
        g.written = g.durable();
        Ok(g)
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn has_member(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }

    /// Kafka's state name.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.assignment_epoch != self.group_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.state != MemberState::Stable || m.epoch != self.assignment_epoch)
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    fn bump(&mut self) {
        self.group_epoch += 1;
    }

    fn remove(&mut self, member_id: &str, why: &str) {
        if self.members.remove(member_id).is_some() {
            self.target.remove(member_id);
            self.bump();
            tracing::info!(group = %self.id, member = %member_id, why, epoch = self.group_epoch, "consumer group member removed");
        }
    }

    /// Removes members whose session ended, or that did not give up their
    /// partitions within their rebalance timeout.
    pub fn expire(&mut self, cfg: &ConsumerGroupConfig, now_ms: u64) {
        let expired: Vec<(String, &'static str)> = self
            .members
            .iter()
            .filter_map(|(id, m)| {
                if m.last_seen_ms.saturating_add(cfg.session_timeout_ms) <= now_ms {
                    Some((id.clone(), "session timed out"))
                } else if m.revoke_deadline_ms.is_some_and(|d| d <= now_ms) {
                    Some((id.clone(), "revocation timed out"))
                } else {
                    None
                }
            })
            .collect();
        for (id, why) in expired {
            self.remove(&id, why);
        }
    }

    /// One heartbeat. Errors change nothing.
    pub fn heartbeat(
        &mut self,
        hb: ConsumerHeartbeat,
        cfg: &ConsumerGroupConfig,
        now_ms: u64,
        topics: &dyn Fn(&str) -> Option<TopicMeta>,
    ) -> Result<ConsumerHeartbeatAnswer, GroupError> {
        self.expire(cfg, now_ms);
        if hb
            .subscribed_topic_regex
            .as_deref()
            .is_some_and(|r| !r.is_empty())
        {
            return Err(GroupError::InvalidRequest(
                "regular expression subscriptions are not supported",
            ));
        }
        if let Some(a) = hb.server_assignor.as_deref()
            && !assignor::ASSIGNORS.contains(&a)
        {
            return Err(GroupError::UnsupportedAssignor);
        }
        let interval = i32::try_from(cfg.heartbeat_interval_ms).unwrap_or(i32::MAX);
        match hb.member_epoch {
            -1 | -2 => {
                let Some(m) = self.members.get_mut(&hb.member_id) else {
                    return Err(GroupError::UnknownMemberId);
                };
                if hb.member_epoch == -2 && m.instance_id.is_some() {
                    m.left_static = true;
                    tracing::info!(group = %self.id, member = %hb.member_id, "static consumer left for now");
                } else {
                    self.remove(&hb.member_id, "left");
                    self.recompute_if_needed(topics);
                }
                return Ok(ConsumerHeartbeatAnswer {
                    member_id: hb.member_id,
                    member_epoch: hb.member_epoch,
                    heartbeat_interval_ms: 0,
                    assignment: None,
                });
            }
            0 => self.join(&hb, now_ms)?,
            epoch => {
                let Some(m) = self.members.get(&hb.member_id) else {
                    return Err(GroupError::UnknownMemberId);
                };
                // The previous epoch is fine if the member only lost the
                // answer that moved it on (it owns nothing it should not).
                let lost_answer = epoch == m.previous_epoch
                    && hb.owned.as_ref().is_some_and(|o| is_subset(o, &m.assigned));
                if epoch != m.epoch && !lost_answer {
                    return Err(GroupError::FencedMemberEpoch);
                }
            }
        }
        let member_id = hb.member_id.clone();
        self.update(&hb, now_ms);
        self.recompute_if_needed(topics);
        self.reconcile(&member_id, hb.owned.as_ref(), now_ms);
        let Some(m) = self.members.get_mut(&member_id) else {
            return Err(GroupError::UnknownMemberId);
        };
        let reported_other = hb.owned.as_ref().is_some_and(|o| *o != m.assigned);
        let send = hb.member_epoch == 0 || reported_other || m.told.as_ref() != Some(&m.assigned);
        let assignment = send.then(|| m.assigned.clone());
        if send {
            m.told = Some(m.assigned.clone());
        }
        Ok(ConsumerHeartbeatAnswer {
            member_id,
            member_epoch: m.epoch,
            heartbeat_interval_ms: interval,
            assignment,
        })
    }

    /// A join (epoch 0): a new member, a static member coming back, or a
    /// member starting over (its old state is dropped).
    fn join(&mut self, hb: &ConsumerHeartbeat, now_ms: u64) -> Result<(), GroupError> {
        if hb.member_id.is_empty() {
            return Err(GroupError::InvalidRequest("a member id is required"));
        }
        let Some(names) = hb.subscribed_topic_names.as_ref() else {
            return Err(GroupError::InvalidRequest(
                "a join needs SubscribedTopicNames",
            ));
        };
        if hb.rebalance_timeout_ms < 0 {
            return Err(GroupError::InvalidRequest(
                "a join needs RebalanceTimeoutMs",
            ));
        }
        let old_static = hb.instance_id.as_ref().and_then(|i| {
            self.members
                .iter()
                .find(|(id, m)| m.instance_id.as_ref() == Some(i) && **id != hb.member_id)
                .map(|(id, m)| (id.clone(), m.left_static))
        });
        if let Some((old_id, left)) = old_static {
            if !left {
                return Err(GroupError::UnreleasedInstanceId);
            }
            // The same instance back: it takes over the old member's
            // partitions and epoch without a rebalance.
            if let Some(mut m) = self.members.remove(&old_id) {
                m.left_static = false;
                m.last_seen_ms = now_ms;
                m.told = None;
                if let Some(t) = self.target.remove(&old_id) {
                    self.target.insert(hb.member_id.clone(), t);
                }
                self.members.insert(hb.member_id.clone(), m);
                tracing::info!(group = %self.id, old = %old_id, new = %hb.member_id, "static consumer replaced");
                return Ok(());
            }
        }
        if self.members.contains_key(&hb.member_id) {
            self.remove(&hb.member_id, "rejoined");
        }
        self.members.insert(
            hb.member_id.clone(),
            Member {
                instance_id: hb.instance_id.clone(),
                rack_id: None,
                client_id: hb.client_id.clone(),
                client_host: hb.client_host.clone(),
                epoch: 0,
                previous_epoch: -1,
                state: MemberState::Stable,
                subscribed: names.iter().cloned().collect(),
                assignor: None,
                rebalance_timeout_ms: 0,
                assigned: Assignment::new(),
                revoking: Assignment::new(),
                last_seen_ms: now_ms,
                revoke_deadline_ms: None,
                told: None,
                left_static: false,
            },
        );
        self.bump();
        tracing::info!(group = %self.id, member = %hb.member_id, epoch = self.group_epoch, "consumer group member joined");
        Ok(())
    }

    /// Takes what changed in the heartbeat.
    fn update(&mut self, hb: &ConsumerHeartbeat, now_ms: u64) {
        let mut changed = false;
        if let Some(m) = self.members.get_mut(&hb.member_id) {
            m.last_seen_ms = now_ms;
            m.left_static = false;
            if let Some(names) = &hb.subscribed_topic_names {
                let names: BTreeSet<String> = names.iter().cloned().collect();
                if names != m.subscribed {
                    m.subscribed = names;
                    changed = true;
                }
            }
            if hb.server_assignor.is_some() && hb.server_assignor != m.assignor {
                m.assignor = hb.server_assignor.clone();
                changed = true;
            }
            if hb.rebalance_timeout_ms >= 0 {
                m.rebalance_timeout_ms = u64::try_from(hb.rebalance_timeout_ms).unwrap_or(0);
            }
            if hb.rack_id.is_some() {
                m.rack_id = hb.rack_id.clone();
            }
            if hb.instance_id.is_some() {
                m.instance_id = hb.instance_id.clone();
            }
        }
        if changed {
            self.bump();
        }
    }

    /// The assignor the members ask for most (ties to the first name;
    /// `uniform` when none asks).
    fn chosen_assignor(&self) -> String {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = m.assignor.as_deref() {
                *votes.entry(a).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
            .map_or_else(|| assignor::UNIFORM.to_string(), |(n, _)| n.to_string())
    }

    /// Bumps the group epoch if a subscribed topic appeared, went or
    /// changed its partition count; computes the target assignment when
    /// the group epoch is ahead of it.
    fn recompute_if_needed(&mut self, topics: &dyn Fn(&str) -> Option<TopicMeta>) {
        let names: BTreeSet<&String> = self.members.values().flat_map(|m| &m.subscribed).collect();
        let now: BTreeMap<String, Option<TopicMeta>> =
            names.into_iter().map(|n| (n.clone(), topics(n))).collect();
        if now != self.topics_seen {
            self.topics_seen = now;
            if self.assignment_epoch == self.group_epoch && !self.members.is_empty() {
                self.bump();
            }
        }
        if self.assignment_epoch == self.group_epoch {
            return;
        }
        let members: BTreeMap<String, AssignorMember> = self
            .members
            .iter()
            .map(|(id, m)| {
                let topics = m
                    .subscribed
                    .iter()
                    .filter_map(|n| self.topics_seen.get(n).copied().flatten())
                    .map(|t| (t.id, t.partitions))
                    .collect();
                (id.clone(), AssignorMember { topics })
            })
            .collect();
        self.assignor = self.chosen_assignor();
        self.target = assignor::assign(&self.assignor, &members, &self.target);
        self.assignment_epoch = self.group_epoch;
        tracing::info!(group = %self.id, epoch = self.group_epoch, assignor = %self.assignor, members = members.len(), "consumer group target assignment computed");
    }

    /// Partitions any member but `except` holds (assigned or not yet
    /// revoked).
    fn held_by_others(&self, except: &str) -> Assignment {
        let mut out = Assignment::new();
        for (id, m) in &self.members {
            if id == except {
                continue;
            }
            for a in [&m.assigned, &m.revoking] {
                for (t, ps) in a {
                    out.entry(*t).or_default().extend(ps.iter().copied());
                }
            }
        }
        out
    }

    /// Moves the member towards its target (KIP-848's reconciliation).
    fn reconcile(&mut self, member_id: &str, owned: Option<&Assignment>, now_ms: u64) {
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let held = self.held_by_others(member_id);
        let assignment_epoch = self.assignment_epoch;
        let Some(m) = self.members.get_mut(member_id) else {
            return;
        };
        if m.state == MemberState::Unrevoked {
            let gone = owned.is_some_and(|o| !contains_any(o, &m.revoking));
            if !gone {
                return;
            }
            m.revoking.clear();
            m.revoke_deadline_ms = None;
            m.state = MemberState::Unreleased;
        }
        if m.state == MemberState::Stable && m.epoch == assignment_epoch {
            return;
        }
        let revoke = minus(&m.assigned, &target);
        if !revoke.is_empty() {
            m.assigned = intersect(&m.assigned, &target);
            m.revoking = revoke;
            m.state = MemberState::Unrevoked;
            m.revoke_deadline_ms = Some(now_ms.saturating_add(m.rebalance_timeout_ms));
            return;
        }
        let free = minus(&target, &held);
        if m.epoch != assignment_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = assignment_epoch;
        }
        m.assigned = free;
        m.state = if m.assigned == target {
            MemberState::Stable
        } else {
            MemberState::Unreleased
        };
    }

    /// Whether an OffsetCommit (or a fetch of offsets with a member) may go
    /// on: a member at its epoch, or nobody (epoch −1, no member id) while
    /// the group has no members.
    pub fn validate_commit(
        &mut self,
        member_epoch: i32,
        member_id: &str,
        cfg: &ConsumerGroupConfig,
        now_ms: u64,
    ) -> Result<(), GroupError> {
        self.expire(cfg, now_ms);
        if member_epoch < 0 && member_id.is_empty() {
            return if self.members.is_empty() {
                Ok(())
            } else {
                Err(GroupError::UnknownMemberId)
            };
        }
        let m = self
            .members
            .get(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        match member_epoch.cmp(&m.epoch) {
            std::cmp::Ordering::Equal => Ok(()),
            std::cmp::Ordering::Less => Err(GroupError::StaleMemberEpoch),
            std::cmp::Ordering::Greater => Err(GroupError::FencedMemberEpoch),
        }
    }

    pub fn describe(&self) -> ConsumerGroupDescription {
        ConsumerGroupDescription {
            group_id: self.id.clone(),
            state: self.state().to_string(),
            group_epoch: self.group_epoch,
            assignment_epoch: self.assignment_epoch,
            assignor_name: self.assignor.clone(),
            members: self
                .members
                .iter()
                .map(|(id, m)| DescribedConsumer {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    member_epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_topic_names: m.subscribed.iter().cloned().collect(),
                    assignment: m.assigned.clone(),
                    target_assignment: self.target.get(id).cloned().unwrap_or_default(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
