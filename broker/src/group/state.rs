//! The state machine of one classic consumer group (Kafka's classic group
//! protocol as Kafka 3.x coordinators run it): members join, a rebalance
//! completes with a new generation and a leader, the leader's assignment is
//! handed out, sessions and rebalances time out.
//!
//! Everything here is synchronous and runs under the group's lock; waiting
//! JoinGroup / SyncGroup calls hold the receiving end of a oneshot channel
//! whose sender sits in their [`Member`]. Time is passed in (`now`), and the
//! group says when it next needs to be woken ([`Group::next_deadline`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::member::Member;
use super::record::{GroupRecord, MemberRecord, ProtocolRecord};
use super::types::{
    DescribedMember, GroupConfig, GroupDescription, GroupError, GroupListing, GroupState,
    JoinMember, JoinParams, JoinResult, SyncParams, SyncResult,
};

/// An answer now, or one to wait for.
#[derive(Debug)]
pub(super) enum Outcome<T> {
    Ready(T),
    Wait(oneshot::Receiver<T>),
}

/// What the metadata service should hold of a group next.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Durable {
    Record(GroupRecord),
    /// The group has no members: its record is deleted.
    Forget,
}

/// When the join phase of a rebalance ends.
#[derive(Debug, Clone, Copy)]
struct JoinTimer {
    at: Instant,
    /// `Some` for the first rebalance of an empty group: it never ends early
    /// and may be extended by this much more while new members keep coming.
    initial_remaining: Option<Duration>,
}

#[derive(Debug)]
pub(super) struct Group {
    pub id: String,
    state: GroupState,
    generation: i32,
    /// The generation before the first rebalance (see
    /// `GroupCoordinator::shard_taken`): 0, or higher after a shard move.
    first_generation: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// `group.instance.id` → member id.
    static_members: HashMap<String, String>,
    /// Ids handed out with MEMBER_ID_REQUIRED, until they join or expire.
    pending_members: HashMap<String, Instant>,
    /// Members of the current generation that have not sent SyncGroup yet.
    pending_sync: HashSet<String>,
    sync_deadline: Option<Instant>,
    join_timer: Option<JoinTimer>,
    new_member_added: bool,
    /// The caller says the group has committed offsets: it stays listed
    /// while Empty.
    pub has_offsets: bool,
    /// A timer task is running for this group.
    pub timer_running: bool,
    /// The instant the timer task sleeps until.
    pub timer_wake: Option<Instant>,
    /// A generation of the group under its previous coordinator (the
    /// group's shard moved here, its members do not know yet): commits of
    /// that generation are taken until the group moves past it here.
    adopted: Option<i32>,
    /// The epoch of its shard the group was created or resumed under: its
    /// records are stored with it, so a write from before a move is refused.
    pub shard_epoch: u64,
    /// Counts changes to what is stored of the group ([`Group::next_write`]).
    version: u64,
    /// The last version the metadata service holds.
    written: u64,
    /// The metadata service holds a record of the group.
    has_record: bool,
    /// The version whose storing hands the leader's assignment out: as in
    /// Kafka, members learn a generation's assignment only once it is
    /// stored, so a new coordinator resumes every generation a member knows.
    storing: Option<u64>,
    /// A replaced static member's JoinGroup answer, held until the
    /// replacement (this version) is stored: the new coordinator must not
    /// know only the old member id, which it would fence.
    held_join: Option<(u64, String, JoinResult)>,
    /// A task is writing the group to the store.
    pub persist_running: bool,
}

fn millis(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

impl Group {
    pub fn new(id: String, first_generation: i32, shard_epoch: u64) -> Self {
        Self {
            id,
            state: GroupState::Empty,
            generation: first_generation,
            first_generation,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            pending_sync: HashSet::new(),
            sync_deadline: None,
            join_timer: None,
            new_member_added: false,
            has_offsets: false,
            timer_running: false,
            timer_wake: None,
            adopted: None,
            shard_epoch,
            version: 0,
            written: 0,
            has_record: false,
            storing: None,
            held_join: None,
            persist_running: false,
        }
    }

    /// A group as a previous coordinator of its shard stored it: Stable
    /// with its members and assignments (Empty without members), each
    /// member's session starting now.
    pub fn restore(
        id: String,
        record: GroupRecord,
        first_generation: i32,
        shard_epoch: u64,
        now: Instant,
    ) -> Self {
        let mut g = Self::new(id, first_generation, shard_epoch);
        let non_empty = |s: String| (!s.is_empty()).then_some(s);
        g.generation = record.generation;
        g.protocol_type = non_empty(record.protocol_type);
        g.protocol_name = non_empty(record.protocol_name);
        for m in record.members {
            let session_timeout = Duration::from_millis(u64::from(m.session_timeout_ms));
            if let Some(instance) = &m.group_instance_id {
                g.static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            g.members.insert(
                m.member_id.clone(),
                Member {
                    id: m.member_id,
                    instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout,
                    rebalance_timeout: Duration::from_millis(u64::from(m.rebalance_timeout_ms)),
                    protocols: m
                        .protocols
                        .into_iter()
                        .map(|p| (p.name, p.metadata))
                        .collect(),
                    assignment: m.assignment,
                    is_new: false,
                    deadline: now + session_timeout,
                    join_tx: None,
                    sync_tx: None,
                },
            );
        }
        g.leader = if g.members.contains_key(&record.leader) {
            Some(record.leader)
        } else {
            g.members.keys().next().cloned()
        };
        g.has_record = true;
        if g.members.is_empty() {
            // A record of an empty group is stale: it is deleted.
            g.version = 1;
        } else {
            g.state = GroupState::Stable;
        }
        g
    }

    /// The group as stored: its generation, protocol, leader and members.
    fn record(&self) -> GroupRecord {
        let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
        GroupRecord {
            generation: self.generation,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol_name: self.protocol_name.clone().unwrap_or_default(),
            leader: self.leader.clone().unwrap_or_default(),
            members: self
                .members
                .values()
                .map(|m| MemberRecord {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: ms(m.session_timeout),
                    rebalance_timeout_ms: ms(m.rebalance_timeout),
                    protocols: m
                        .protocols
                        .iter()
                        .map(|(name, metadata)| ProtocolRecord {
                            name: name.clone(),
                            metadata: metadata.clone(),
                        })
                        .collect(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
            consumer: None,
        }
    }

    /// What to write to the store now, with the version it stands for;
    /// `None` when the store is up to date, or the group is between states
    /// that are stored (a rebalance in progress keeps the last record).
    pub fn next_write(&self) -> Option<(u64, Durable)> {
        if self.written == self.version {
            return None;
        }
        let durable = match self.state {
            GroupState::Stable => Durable::Record(self.record()),
            GroupState::CompletingRebalance if self.storing.is_some() => {
                Durable::Record(self.record())
            }
            GroupState::Empty if self.has_record => Durable::Forget,
            _ => return None,
        };
        Some((self.version, durable))
    }

    /// The store answered the write of `version` (`forget`: a deletion).
    /// Stored, the assignment waiting for it is handed out (the group is
    /// Stable) and a held JoinGroup answered; not stored, the generation is
    /// abandoned as Kafka does: its members get `error` and rejoin.
    pub fn on_written(
        &mut self,
        version: u64,
        forget: bool,
        result: Result<(), GroupError>,
        cfg: &GroupConfig,
        now: Instant,
    ) {
        if self.state == GroupState::Dead {
            return;
        }
        let storing_done = self.storing.is_some_and(|v| v <= version)
            && self.state == GroupState::CompletingRebalance;
        let held = match &self.held_join {
            Some((v, _, _)) if *v <= version => self.held_join.take(),
            _ => None,
        };
        match result {
            Ok(()) => {
                self.written = self.written.max(version);
                self.has_record = !forget;
                if storing_done {
                    self.storing = None;
                    self.propagate_assignment(now);
                    self.state = GroupState::Stable;
                    tracing::info!(group = %self.id, generation = self.generation, "group stable");
                }
                if let Some((_, id, result)) = held
                    && let Some(m) = self.members.get_mut(&id)
                {
                    m.answer_join(result);
                }
            }
            Err(error) => {
                tracing::warn!(group = %self.id, generation = self.generation, %error, "storing the group failed");
                if let Some((_, id, _)) = held
                    && let Some(m) = self.members.get_mut(&id)
                {
                    m.fail_join(&id, error);
                }
                if storing_done {
                    self.storing = None;
                    self.reset_and_propagate_error(error, now);
                    self.prepare_rebalance(cfg, now);
                }
            }
        }
    }

    /// Takes over generation `generation` of a group this coordinator did
    /// not hold (its shard moved here): a member of it may commit until the
    /// group rebalances here, which numbers the next generation after it.
    pub fn adopt(&mut self, generation: i32) {
        if self.state == GroupState::Empty && self.members.is_empty() && generation >= 0 {
            // The next generation formed here follows both the adopted one
            // and the first of this shard epoch (`GroupCoordinator::shard_taken`).
            self.generation = self.generation.max(generation);
            self.adopted = Some(self.adopted.map_or(generation, |a| a.max(generation)));
        }
    }

    pub fn state(&self) -> GroupState {
        self.state
    }

    /// Empty with nothing that would bring it back by itself.
    pub fn is_idle(&self) -> bool {
        self.state == GroupState::Empty && self.pending_members.is_empty() && !self.has_offsets
    }

    /// The longest rebalance timeout of the members.
    fn rebalance_timeout(&self) -> Duration {
        self.members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or(Duration::ZERO)
    }

    fn all_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(Member::awaiting_join)
    }

    /// Kafka's rule: the first member sets the protocol type (which must not
    /// be empty, with at least one protocol); later members must have the
    /// same type and a protocol every current member supports.
    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.state == GroupState::Empty {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols
                .iter()
                .any(|(name, _)| self.members.values().all(|m| m.supports(name)))
    }

    /// The protocol every member supports with the most first-choice votes
    /// (each member votes for the first of those in its own order); a tie
    /// goes to the name that sorts first.
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| self.members.values().all(|m| m.supports(name)))
            .collect();
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(choice) = m.vote(&candidates) {
                *votes.entry(choice).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(name, _)| name.to_string())
    }

    /// A static member's instance id must map to this member id (else
    /// FENCED_INSTANCE_ID, or UNKNOWN_MEMBER_ID for an unknown instance);
    /// the member id must be a member.
    fn validate_member(&self, member_id: &str, instance: Option<&str>) -> Result<(), GroupError> {
        if let Some(instance) = instance {
            match self.static_members.get(instance) {
                Some(current) if current != member_id => return Err(GroupError::FencedInstanceId),
                Some(_) => {}
                None => return Err(GroupError::UnknownMemberId),
            }
        }
        if self.members.contains_key(member_id) {
            Ok(())
        } else {
            Err(GroupError::UnknownMemberId)
        }
    }

    fn join_members(&self) -> Vec<JoinMember> {
        let protocol = self.protocol_name.as_deref().unwrap_or_default();
        self.members
            .values()
            .map(|m| JoinMember {
                member_id: m.id.clone(),
                group_instance_id: m.instance_id.clone(),
                metadata: m.metadata(protocol),
            })
            .collect()
    }

    /// The current generation as `member_id` sees it.
    fn current_join_result(&self, member_id: &str, leader_id: String) -> JoinResult {
        let members = if self.leader.as_deref() == Some(member_id) && leader_id == member_id {
            self.join_members()
        } else {
            Vec::new()
        };
        JoinResult {
            error: None,
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader_id,
            member_id: member_id.to_string(),
            members,
            skip_assignment: false,
        }
    }

    // ---- JoinGroup ----

    pub fn join(&mut self, p: JoinParams, cfg: &GroupConfig, now: Instant) -> Outcome<JoinResult> {
        let outcome = self.do_join(p, cfg, now);
        self.maybe_complete_join(now);
        outcome
    }

    fn do_join(&mut self, p: JoinParams, cfg: &GroupConfig, now: Instant) -> Outcome<JoinResult> {
        if self.state == GroupState::Dead {
            return Outcome::Ready(JoinResult::failed(p.member_id, GroupError::NotCoordinator));
        }
        if !self.supports_protocols(&p.protocol_type, &p.protocols) {
            return Outcome::Ready(JoinResult::failed(
                p.member_id,
                GroupError::InconsistentGroupProtocol,
            ));
        }
        if p.member_id.is_empty() {
            let prefix = p.group_instance_id.as_deref().unwrap_or(&p.client_id);
            let new_id = format!("{prefix}-{}", uuid::Uuid::new_v4());
            return match p.group_instance_id.clone() {
                Some(instance) => match self.static_members.get(&instance).cloned() {
                    Some(old_id) => self.replace_static_member(old_id, new_id, p, cfg, now),
                    None => self.add_member(new_id, p, cfg, now),
                },
                None if p.require_known_member_id => {
                    self.pending_members
                        .insert(new_id.clone(), now + millis(p.session_timeout_ms));
                    Outcome::Ready(JoinResult::failed(new_id, GroupError::MemberIdRequired))
                }
                None => self.add_member(new_id, p, cfg, now),
            };
        }
        if self.pending_members.contains_key(&p.member_id) {
            // Pending ids are only handed to dynamic members.
            if p.group_instance_id.is_some() {
                return Outcome::Ready(JoinResult::failed(
                    p.member_id,
                    GroupError::UnknownMemberId,
                ));
            }
            let id = p.member_id.clone();
            return self.add_member(id, p, cfg, now);
        }
        if let Err(e) = self.validate_member(&p.member_id, p.group_instance_id.as_deref()) {
            return Outcome::Ready(JoinResult::failed(p.member_id, e));
        }
        let is_leader = self.leader.as_deref() == Some(p.member_id.as_str());
        let matches = self
            .members
            .get(&p.member_id)
            .is_some_and(|m| m.matches(&p.protocols));
        match self.state {
            GroupState::PreparingRebalance => self.update_member(p, cfg, now),
            // Same metadata (the member probably lost the JoinGroup answer):
            // the current generation again.
            GroupState::CompletingRebalance if matches => {
                let leader = self.leader.clone().unwrap_or_default();
                Outcome::Ready(self.current_join_result(&p.member_id, leader))
            }
            GroupState::CompletingRebalance => self.update_member(p, cfg, now),
            // A leader's JoinGroup always rebalances (it may have seen a
            // metadata change the member metadata does not show); a follower
            // with unchanged metadata just gets the current generation.
            GroupState::Stable if is_leader || !matches => self.update_member(p, cfg, now),
            GroupState::Stable => {
                let leader = self.leader.clone().unwrap_or_default();
                Outcome::Ready(self.current_join_result(&p.member_id, leader))
            }
            GroupState::Empty | GroupState::Dead => {
                Outcome::Ready(JoinResult::failed(p.member_id, GroupError::UnknownMemberId))
            }
        }
    }

    fn add_member(
        &mut self,
        id: String,
        p: JoinParams,
        cfg: &GroupConfig,
        now: Instant,
    ) -> Outcome<JoinResult> {
        let (tx, rx) = oneshot::channel();
        if self.state == GroupState::PreparingRebalance && self.generation == self.first_generation
        {
            self.new_member_added = true;
        }
        if self.members.is_empty() {
            self.protocol_type = Some(p.protocol_type.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(id.clone());
        }
        if let Some(instance) = &p.group_instance_id {
            self.static_members.insert(instance.clone(), id.clone());
        }
        self.pending_members.remove(&id);
        tracing::debug!(group = %self.id, member = %id, "member added");
        self.members.insert(
            id.clone(),
            Member {
                id,
                instance_id: p.group_instance_id,
                client_id: p.client_id,
                client_host: p.client_host,
                session_timeout: millis(p.session_timeout_ms),
                rebalance_timeout: millis(p.rebalance_timeout_ms),
                protocols: p.protocols,
                assignment: Bytes::new(),
                is_new: true,
                // A new member cannot heartbeat before its JoinGroup is
                // answered; only a very long join removes it.
                deadline: now + cfg.new_member_join_timeout,
                join_tx: Some(tx),
                sync_tx: None,
            },
        );
        self.maybe_prepare_rebalance(cfg, now);
        Outcome::Wait(rx)
    }

    /// A known member rejoins: new metadata, a rebalance if none runs.
    fn update_member(
        &mut self,
        p: JoinParams,
        cfg: &GroupConfig,
        now: Instant,
    ) -> Outcome<JoinResult> {
        let (tx, rx) = oneshot::channel();
        if let Some(m) = self.members.get_mut(&p.member_id) {
            // A JoinGroup it sent before is superseded by this one.
            m.fail_join(&p.member_id, GroupError::RebalanceInProgress);
            m.protocols = p.protocols;
            m.session_timeout = millis(p.session_timeout_ms);
            m.rebalance_timeout = millis(p.rebalance_timeout_ms);
            m.join_tx = Some(tx);
        }
        self.maybe_prepare_rebalance(cfg, now);
        Outcome::Wait(rx)
    }

    /// A known static member joins with an empty member id (it restarted):
    /// the old member id is fenced and replaced by `new_id`, keeping the
    /// member's assignment. A Stable group does not rebalance unless the
    /// chosen protocol would change.
    fn replace_static_member(
        &mut self,
        old_id: String,
        new_id: String,
        p: JoinParams,
        cfg: &GroupConfig,
        now: Instant,
    ) -> Outcome<JoinResult> {
        let Some(mut member) = self.members.remove(&old_id) else {
            return Outcome::Ready(JoinResult::failed(
                p.member_id,
                GroupError::UnknownServerError,
            ));
        };
        let old_leader = self.leader.clone().unwrap_or_default();
        member.fail_join(&old_id, GroupError::FencedInstanceId);
        member.answer_sync(SyncResult::failed(GroupError::FencedInstanceId));
        let (tx, rx) = oneshot::channel();
        member.id = new_id.clone();
        member.client_id = p.client_id;
        member.client_host = p.client_host;
        member.session_timeout = millis(p.session_timeout_ms);
        member.rebalance_timeout = millis(p.rebalance_timeout_ms);
        member.protocols = p.protocols;
        member.heartbeat(now);
        member.join_tx = Some(tx);
        self.members.insert(new_id.clone(), member);
        if self.leader.as_deref() == Some(old_id.as_str()) {
            self.leader = Some(new_id.clone());
        }
        if let Some(instance) = p.group_instance_id {
            self.static_members.insert(instance, new_id.clone());
        }
        if self.pending_sync.remove(&old_id) {
            self.pending_sync.insert(new_id.clone());
        }
        tracing::info!(group = %self.id, old = %old_id, new = %new_id, "static member replaced");
        match self.state {
            GroupState::Stable => {
                if self.select_protocol() == self.protocol_name {
                    // The old leader id is returned even when this member was
                    // the leader, so that it does not compute an assignment a
                    // Stable group would not hand out.
                    let result = self.current_join_result(&new_id, old_leader);
                    self.version += 1;
                    self.held_join = Some((self.version, new_id.clone(), result));
                } else {
                    self.prepare_rebalance(cfg, now);
                }
            }
            // The leader may be assigning to the old member id: start over.
            GroupState::CompletingRebalance => self.prepare_rebalance(cfg, now),
            GroupState::PreparingRebalance => {}
            GroupState::Empty | GroupState::Dead => {
                if let Some(m) = self.members.get_mut(&new_id) {
                    m.fail_join(&new_id, GroupError::UnknownMemberId);
                }
            }
        }
        Outcome::Wait(rx)
    }

    fn maybe_prepare_rebalance(&mut self, cfg: &GroupConfig, now: Instant) {
        if matches!(
            self.state,
            GroupState::Empty | GroupState::Stable | GroupState::CompletingRebalance
        ) {
            self.prepare_rebalance(cfg, now);
        }
    }

    fn prepare_rebalance(&mut self, cfg: &GroupConfig, now: Instant) {
        if self.state == GroupState::CompletingRebalance {
            self.reset_and_propagate_error(GroupError::RebalanceInProgress, now);
        }
        // An assignment not stored yet is never handed out; a held JoinGroup
        // is answered by this rebalance.
        self.storing = None;
        self.held_join = None;
        self.pending_sync.clear();
        self.sync_deadline = None;
        let timeout = self.rebalance_timeout();
        self.join_timer = Some(if self.state == GroupState::Empty {
            JoinTimer {
                at: now + cfg.initial_rebalance_delay,
                initial_remaining: Some(timeout.saturating_sub(cfg.initial_rebalance_delay)),
            }
        } else {
            JoinTimer {
                at: now + timeout,
                initial_remaining: None,
            }
        });
        tracing::info!(
            group = %self.id,
            generation = self.generation,
            from = %self.state,
            "preparing to rebalance"
        );
        self.state = GroupState::PreparingRebalance;
        self.maybe_complete_join(now);
    }

    /// Completes the join phase early once every member has rejoined (not
    /// during the initial delay of an empty group, which always runs out).
    fn maybe_complete_join(&mut self, now: Instant) {
        let early = self
            .join_timer
            .is_some_and(|t| t.initial_remaining.is_none());
        if self.state == GroupState::PreparingRebalance && early && self.all_joined() {
            self.complete_join(now);
        }
    }

    /// The end of the join phase: dynamic members that did not rejoin are
    /// dropped (static ones stay until their session expires), then the next
    /// generation starts and every waiting JoinGroup is answered.
    fn complete_join(&mut self, now: Instant) {
        self.join_timer = None;
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join() && m.instance_id.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in gone {
            tracing::info!(group = %self.id, member = %id, "member did not rejoin in time; removed");
            self.remove_member(&id);
        }
        if !self.maybe_elect_joined_leader() && !self.members.is_empty() {
            // Only static members that did not rejoin are left: wait for
            // them to rejoin or for their sessions to expire.
            tracing::warn!(group = %self.id, "no member rejoined; extending the join phase");
            self.join_timer = Some(JoinTimer {
                at: now + self.rebalance_timeout(),
                initial_remaining: None,
            });
            return;
        }
        self.generation = self.generation.wrapping_add(1);
        // The adopted generation is over once one is formed here.
        self.adopted = None;
        self.pending_sync.clear();
        self.sync_deadline = None;
        self.new_member_added = false;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.state = GroupState::Empty;
            self.version += 1;
            tracing::info!(group = %self.id, generation = self.generation, "group is empty");
            return;
        }
        self.protocol_name = self.select_protocol();
        self.state = GroupState::CompletingRebalance;
        let leader = self.leader.clone().unwrap_or_default();
        let all = self.join_members();
        let template = self.current_join_result("", leader.clone());
        for m in self.members.values_mut() {
            let members = if m.id == leader {
                all.clone()
            } else {
                Vec::new()
            };
            m.answer_join(JoinResult {
                member_id: m.id.clone(),
                members,
                ..template.clone()
            });
            m.heartbeat(now);
            m.is_new = false;
            self.pending_sync.insert(m.id.clone());
        }
        self.sync_deadline = Some(now + self.rebalance_timeout());
        tracing::info!(
            group = %self.id,
            generation = self.generation,
            members = self.members.len(),
            leader = %leader,
            protocol = self.protocol_name.as_deref().unwrap_or_default(),
            "rebalance joined"
        );
    }

    /// Keeps the leader if it rejoined, else makes any rejoined member the
    /// leader; false if no member rejoined.
    fn maybe_elect_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader.as_deref() else {
            return false;
        };
        if self.members.get(leader).is_some_and(Member::awaiting_join) {
            return true;
        }
        match self.members.values().find(|m| m.awaiting_join()) {
            Some(m) => {
                self.leader = Some(m.id.clone());
                true
            }
            None => false,
        }
    }

    /// Takes the member out of every table (Kafka's `GroupMetadata.remove`).
    fn remove_member(&mut self, id: &str) -> Option<Member> {
        let member = self.members.remove(id)?;
        if let Some(instance) = &member.instance_id
            && self.static_members.get(instance).map(String::as_str) == Some(id)
        {
            self.static_members.remove(instance);
        }
        if self.leader.as_deref() == Some(id) {
            self.leader = self.members.keys().next().cloned();
        }
        self.pending_sync.remove(id);
        Some(member)
    }

    /// A member leaves or expires: its waiting calls get UNKNOWN_MEMBER_ID
    /// and the group rebalances (or the join phase may now be complete).
    fn remove_member_and_update(&mut self, id: &str, cfg: &GroupConfig, now: Instant) {
        if let Some(mut m) = self.remove_member(id) {
            m.fail_join("", GroupError::UnknownMemberId);
            m.answer_sync(SyncResult::failed(GroupError::UnknownMemberId));
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.maybe_prepare_rebalance(cfg, now)
            }
            GroupState::PreparingRebalance => self.maybe_complete_join(now),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    fn reset_and_propagate_error(&mut self, error: GroupError, now: Instant) {
        for m in self.members.values_mut() {
            m.assignment = Bytes::new();
            if m.answer_sync(SyncResult::failed(error)) {
                m.heartbeat(now);
            }
        }
    }

    fn propagate_assignment(&mut self, now: Instant) {
        let protocol_type = self.protocol_type.clone();
        let protocol_name = self.protocol_name.clone();
        for m in self.members.values_mut() {
            let result = SyncResult {
                error: None,
                protocol_type: protocol_type.clone(),
                protocol_name: protocol_name.clone(),
                assignment: m.assignment.clone(),
            };
            if m.answer_sync(result) {
                m.heartbeat(now);
            }
        }
    }

    // ---- SyncGroup ----

    pub fn sync(&mut self, p: SyncParams, now: Instant) -> Outcome<SyncResult> {
        let fail = |e| Outcome::Ready(SyncResult::failed(e));
        if self.state == GroupState::Dead {
            return fail(GroupError::NotCoordinator);
        }
        if let Err(e) = self.validate_member(&p.member_id, p.group_instance_id.as_deref()) {
            return fail(e);
        }
        if p.generation_id != self.generation {
            return fail(GroupError::IllegalGeneration);
        }
        if p.protocol_type.is_some() && p.protocol_type != self.protocol_type {
            return fail(GroupError::InconsistentGroupProtocol);
        }
        if p.protocol_name.is_some() && p.protocol_name != self.protocol_name {
            return fail(GroupError::InconsistentGroupProtocol);
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => fail(GroupError::UnknownMemberId),
            GroupState::PreparingRebalance => fail(GroupError::RebalanceInProgress),
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                if let Some(m) = self.members.get_mut(&p.member_id) {
                    m.answer_sync(SyncResult::failed(GroupError::RebalanceInProgress));
                    m.sync_tx = Some(tx);
                }
                self.synced(&p.member_id);
                if self.leader.as_deref() == Some(p.member_id.as_str()) && self.storing.is_none() {
                    // Members the leader left out get an empty assignment;
                    // ids that are not members are ignored. It is handed
                    // out once stored (`on_written`).
                    let mut given: HashMap<String, Bytes> = p.assignments.into_iter().collect();
                    for m in self.members.values_mut() {
                        m.assignment = given.remove(&m.id).unwrap_or_default();
                    }
                    self.version += 1;
                    self.storing = Some(self.version);
                }
                Outcome::Wait(rx)
            }
            GroupState::Stable => {
                self.synced(&p.member_id);
                let Some(m) = self.members.get_mut(&p.member_id) else {
                    return fail(GroupError::UnknownMemberId);
                };
                m.heartbeat(now);
                Outcome::Ready(SyncResult {
                    error: None,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    assignment: m.assignment.clone(),
                })
            }
        }
    }

    fn synced(&mut self, member_id: &str) {
        self.pending_sync.remove(member_id);
        if self.pending_sync.is_empty() {
            self.sync_deadline = None;
        }
    }

    // ---- Heartbeat, LeaveGroup, OffsetCommit ----

    pub fn heartbeat(
        &mut self,
        generation_id: i32,
        member_id: &str,
        instance: Option<&str>,
        now: Instant,
    ) -> Result<(), GroupError> {
        if self.state == GroupState::Dead {
            return Err(GroupError::NotCoordinator);
        }
        self.validate_member(member_id, instance)?;
        if generation_id != self.generation {
            return Err(GroupError::IllegalGeneration);
        }
        let state = self.state;
        let Some(m) = self.members.get_mut(member_id) else {
            return Err(GroupError::UnknownMemberId);
        };
        match state {
            GroupState::Empty | GroupState::Dead => Err(GroupError::UnknownMemberId),
            GroupState::CompletingRebalance | GroupState::Stable => {
                m.heartbeat(now);
                Ok(())
            }
            GroupState::PreparingRebalance => {
                m.heartbeat(now);
                Err(GroupError::RebalanceInProgress)
            }
        }
    }

    /// LeaveGroup for each `(member id, group instance id)`. An empty member
    /// id with an instance id removes that static member (the admin form).
    pub fn leave(
        &mut self,
        members: &[(String, Option<String>)],
        cfg: &GroupConfig,
        now: Instant,
    ) -> Vec<Result<(), GroupError>> {
        members
            .iter()
            .map(|(member_id, instance)| {
                if member_id.is_empty() {
                    let current = instance
                        .as_ref()
                        .and_then(|i| self.static_members.get(i).cloned())
                        .ok_or(GroupError::UnknownMemberId)?;
                    tracing::info!(group = %self.id, member = %current, "static member left");
                    self.remove_member_and_update(&current, cfg, now);
                    return Ok(());
                }
                if self.pending_members.remove(member_id).is_some() {
                    self.maybe_complete_join(now);
                    return Ok(());
                }
                self.validate_member(member_id, instance.as_deref())?;
                tracing::info!(group = %self.id, member = %member_id, "member left");
                self.remove_member_and_update(member_id, cfg, now);
                Ok(())
            })
            .collect()
    }

    /// Whether an OffsetCommit may be stored, as Kafka decides it. A commit
    /// by a member counts as its heartbeat.
    pub fn validate_commit(
        &mut self,
        generation_id: i32,
        member_id: &str,
        instance: Option<&str>,
        now: Instant,
    ) -> Result<(), GroupError> {
        if self.state == GroupState::Dead {
            return Err(GroupError::NotCoordinator);
        }
        let adopted = self.adopted == Some(generation_id)
            && matches!(
                self.state,
                GroupState::Empty | GroupState::PreparingRebalance
            )
            && !self.members.contains_key(member_id);
        if adopted {
            return Ok(());
        }
        if generation_id >= 0 || !member_id.is_empty() || instance.is_some() {
            self.validate_member(member_id, instance)?;
            if generation_id != self.generation {
                return Err(GroupError::IllegalGeneration);
            }
        } else if self.state != GroupState::Empty {
            // Only members may commit for a group that has members.
            return Err(GroupError::UnknownMemberId);
        }
        match self.state {
            GroupState::Empty => Ok(()),
            GroupState::CompletingRebalance => Err(GroupError::RebalanceInProgress),
            GroupState::Stable | GroupState::PreparingRebalance => {
                if let Some(m) = self.members.get_mut(member_id) {
                    m.heartbeat(now);
                }
                Ok(())
            }
            GroupState::Dead => Err(GroupError::NotCoordinator),
        }
    }

    // ---- Timers ----

    /// The earliest instant something times out; `None` when nothing can.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.state == GroupState::Dead {
            return None;
        }
        self.members
            .values()
            .map(|m| m.deadline)
            .chain(self.pending_members.values().copied())
            .chain(self.join_timer.map(|t| t.at))
            .chain(self.sync_deadline)
            .min()
    }

    /// Acts on everything that timed out by `now`.
    pub fn on_timer(&mut self, cfg: &GroupConfig, now: Instant) {
        if self.state == GroupState::Dead {
            return;
        }
        let before = self.pending_members.len();
        self.pending_members.retain(|_, deadline| *deadline > now);
        if self.pending_members.len() != before {
            self.maybe_complete_join(now);
        }

        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.deadline <= now)
            .map(|m| m.id.clone())
            .collect();
        for id in expired {
            let Some(m) = self.members.get_mut(&id) else {
                continue;
            };
            // A member with a JoinGroup or SyncGroup waiting is alive (its
            // client cannot heartbeat meanwhile), unless it is new.
            if !m.is_new && (m.awaiting_join() || m.awaiting_sync()) {
                m.heartbeat(now);
                continue;
            }
            tracing::info!(group = %self.id, member = %id, "session expired; member removed");
            self.remove_member_and_update(&id, cfg, now);
        }

        if let Some(timer) = self.join_timer
            && timer.at <= now
        {
            if self.state != GroupState::PreparingRebalance {
                self.join_timer = None;
            } else {
                match timer.initial_remaining {
                    Some(remaining)
                        if self.new_member_added
                            && !remaining.is_zero()
                            && !cfg.initial_rebalance_delay.is_zero() =>
                    {
                        self.new_member_added = false;
                        let delay = cfg.initial_rebalance_delay.min(remaining);
                        self.join_timer = Some(JoinTimer {
                            at: now + delay,
                            initial_remaining: Some(remaining - delay),
                        });
                    }
                    _ => self.complete_join(now),
                }
            }
        }

        if let Some(deadline) = self.sync_deadline
            && deadline <= now
        {
            self.sync_deadline = None;
            let waiting_for = matches!(
                self.state,
                GroupState::CompletingRebalance | GroupState::Stable
            ) && !self.pending_sync.is_empty();
            if waiting_for {
                let missing: Vec<String> = self.pending_sync.drain().collect();
                for id in &missing {
                    tracing::info!(group = %self.id, member = %id, "no SyncGroup in time; member removed");
                    if let Some(mut m) = self.remove_member(id) {
                        m.fail_join("", GroupError::UnknownMemberId);
                    }
                }
                self.prepare_rebalance(cfg, now);
            }
        }
    }

    /// The group is gone from this coordinator: every waiting call gets
    /// `error` and nothing times out any more.
    pub fn kill(&mut self, error: GroupError) {
        self.state = GroupState::Dead;
        self.storing = None;
        self.held_join = None;
        self.join_timer = None;
        self.sync_deadline = None;
        self.pending_members.clear();
        for m in self.members.values_mut() {
            let id = m.id.clone();
            m.fail_join(&id, error);
            m.answer_sync(SyncResult::failed(error));
        }
    }

    // ---- Describe / list ----

    pub fn describe(&self) -> GroupDescription {
        let stable = self.state == GroupState::Stable;
        let protocol = if stable {
            self.protocol_name.clone().unwrap_or_default()
        } else {
            String::new()
        };
        let members = self
            .members
            .values()
            .map(|m| DescribedMember {
                member_id: m.id.clone(),
                group_instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: if stable {
                    m.metadata(&protocol)
                } else {
                    Bytes::new()
                },
                assignment: if stable {
                    m.assignment.clone()
                } else {
                    Bytes::new()
                },
            })
            .collect();
        GroupDescription {
            error: None,
            group_id: self.id.clone(),
            state: self.state,
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol_data: protocol,
            members,
        }
    }

    pub fn listing(&self) -> GroupListing {
        GroupListing {
            group_id: self.id.clone(),
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            state: self.state.as_str().to_string(),
            group_type: super::GroupType::Classic,
        }
    }
}
