//! Which commands change the cluster view ([`crate::model::ClusterView`]:
//! nodes, topics with their partitions' owners, coordinator shards,
//! quotas, SCRAM users, ACLs), the snapshot every broker and proxy keeps
//! with one long poll, and what each changed.
//!
//! Most commands change nothing in it: a flush's commit, a heartbeat, an
//! offset commit, a compaction's ReplaceRanges change what the view leaves
//! out (index, high watermarks, leases, offsets). The watch answers a
//! poller only when the view changed after the revision it has, and then
//! with only the topics that changed ([`ViewLog`]) while the node's log of
//! changes reaches back that far (`Watch`, `crate::api::server`): at
//! 100,000 partitions the whole view is 12 MB.

use std::collections::{BTreeSet, VecDeque};

use crate::command::{Command, OwnedItem, Response};
use crate::ids::{Revision, TopicId};
use crate::state::ClusterState;

/// A change of the view larger than this many topics is sent as the
/// whole view (and kept in the [`ViewLog`] as such).
pub const MAX_TOPICS_PER_CHANGE: usize = 1024;

/// The view changes the [`ViewLog`] keeps, newest last.
pub const VIEW_LOG_CHANGES: usize = 1024;

/// What one command (or several, merged) changed in the view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ViewChange {
    /// Anything may have changed: a poller is sent the whole view (a node
    /// died or restarted: its items moved or their epochs did).
    pub all: bool,
    /// Nodes, coordinator shards, quotas, SCRAM users or ACLs (small; a
    /// partial view carries them whole).
    pub global: bool,
    /// Topics whose partitions, owners, epochs or configs changed.
    pub topics: BTreeSet<TopicId>,
    /// Topics deleted.
    pub deleted: BTreeSet<TopicId>,
}

impl ViewChange {
    fn everything() -> Self {
        Self {
            all: true,
            ..Self::default()
        }
    }

    fn global() -> Self {
        Self {
            global: true,
            ..Self::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.all && !self.global && self.topics.is_empty() && self.deleted.is_empty()
    }

    /// Adds `other` to this change; too many topics make it whole.
    pub fn merge(&mut self, other: &ViewChange) {
        if self.all {
            return;
        }
        if other.all {
            *self = Self::everything();
            return;
        }
        self.global |= other.global;
        self.topics.extend(other.topics.iter().copied());
        self.deleted.extend(other.deleted.iter().copied());
        if self.topics.len() + self.deleted.len() > MAX_TOPICS_PER_CHANGE {
            *self = Self::everything();
        }
    }

    fn of_items<'a>(items: impl Iterator<Item = &'a OwnedItem>) -> Self {
        let mut c = Self::default();
        for item in items {
            match item {
                OwnedItem::Partition(key) => {
                    c.topics.insert(key.topic);
                }
                OwnedItem::Shard(_) => c.global = true,
            }
            if c.topics.len() > MAX_TOPICS_PER_CHANGE {
                return Self::everything();
            }
        }
        c
    }
}

/// Before `cmd` is applied to `state`: the ids of the topics it deletes
/// (gone from the state after).
pub fn deleted_by(state: &ClusterState, cmd: &Command) -> Vec<TopicId> {
    match cmd {
        Command::DeleteTopic { name } => state
            .topics
            .by_name
            .get(name)
            .map(|t| t.id)
            .into_iter()
            .collect(),
        Command::Batch(cmds) => cmds.iter().flat_map(|c| deleted_by(state, c)).collect(),
        _ => Vec::new(),
    }
}

/// What applying `cmd` (answered `resp`; `state` is after it, `deleted`
/// what [`deleted_by`] said before it) changed in the view. A refused
/// command changed nothing. Exhaustive on purpose: a new command must say.
pub fn change_of(
    state: &ClusterState,
    cmd: &Command,
    resp: &Response,
    deleted: &[TopicId],
) -> ViewChange {
    if matches!(resp, Response::Error(_)) {
        return ViewChange::default();
    }
    let topic = |name: &String| {
        let mut c = ViewChange::default();
        if let Some(t) = state.topics.by_name.get(name) {
            c.topics.insert(t.id);
        }
        c
    };
    match cmd {
        Command::Batch(cmds) => {
            let mut c = ViewChange::default();
            let resps: Vec<&Response> = match resp {
                Response::Batch(r) => r.iter().collect(),
                _ => Vec::new(),
            };
            for (i, inner) in cmds.iter().enumerate() {
                let r = resps.get(i).copied().unwrap_or(&Response::Ok);
                c.merge(&change_of(state, inner, r, deleted));
            }
            c
        }
        // A broker's registration may be a restart (its items at the next
        // epoch); a death moves a node's items: everything.
        Command::RegisterNode { .. } => ViewChange::everything(),
        Command::Drain { .. } => ViewChange::global(),
        Command::ExpireLeases { .. } | Command::NodeDown { .. } => match resp {
            Response::Expired { nodes } if nodes.is_empty() => ViewChange::default(),
            _ => ViewChange::everything(),
        },
        // Dead nodes leave the node list once removed (a death time noted
        // is not in the view).
        Command::SweepDeadNodes { .. } => match resp {
            Response::NodesRemoved { nodes } if nodes.is_empty() => ViewChange::default(),
            _ => ViewChange::global(),
        },
        // Ownership: the topics of the partitions moved; shards are global.
        Command::Reassign { changes } | Command::BeginHandover { changes, .. } => {
            ViewChange::of_items(changes.iter().map(|c| &c.item))
        }
        Command::Release { items, .. } => ViewChange::of_items(items.iter().map(|(i, _)| i)),
        Command::CreateTopic { name, .. }
        | Command::AlterTopicConfig { name, .. }
        | Command::CreatePartitions { name, .. } => topic(name),
        Command::DeleteTopic { .. } => ViewChange {
            deleted: deleted.iter().copied().collect(),
            ..ViewChange::default()
        },
        // Quotas, users, ACLs, broker configs.
        Command::AlterClientQuotas { .. }
        | Command::AlterScramCredentials(_)
        | Command::CreateAcls(_)
        | Command::DeleteAcls(_)
        | Command::AlterBrokerConfig { .. } => ViewChange::global(),
        // The log's index, its watermarks and producers; leases; groups,
        // offsets, share state; transactions; exports and tables: not in the view.
        Command::Heartbeat { .. }
        | Command::Commit { .. }
        | Command::CommitWithTxns { .. }
        | Command::TruncateLog { .. }
        | Command::ReplaceRanges { .. }
        | Command::ForgetObjects { .. }
        | Command::ExpireProducers { .. }
        | Command::AllocateProducerIds { .. }
        | Command::Txn(_)
        | Command::ExpireTransactionalIds { .. }
        | Command::CommitOffsets { .. }
        | Command::StoreGroup { .. }
        | Command::DeleteGroups { .. }
        | Command::DeleteOffsets { .. }
        | Command::DeleteOffsetsFenced { .. }
        | Command::DeleteGroupFenced { .. }
        | Command::AlterGroupConfig { .. }
        | Command::ShareState { .. }
        | Command::ForgetShareState { .. }
        | Command::ExportBegin { .. }
        | Command::ExportCommit { .. }
        | Command::ExportForget { .. }
        | Command::ExportReset { .. }
        | Command::TableColumns { .. }
        | Command::TableCommit { .. }
        | Command::TableCompactBegin { .. }
        | Command::TableCompactCommit { .. } => ViewChange::default(),
    }
}

/// The last [`VIEW_LOG_CHANGES`] changes of the view, by revision: what a
/// poller that has the view as of a revision is missing. Kept in memory by
/// each metadata node, never in a snapshot: after a load it starts empty at
/// the loaded revision, and a poller from before it gets the whole view.
#[derive(Debug, Clone, Default)]
pub struct ViewLog {
    /// Every change after this revision is in `changes`.
    base: Revision,
    changes: VecDeque<(Revision, ViewChange)>,
}

impl ViewLog {
    pub fn new(base: Revision) -> Self {
        Self {
            base,
            changes: VecDeque::new(),
        }
    }

    /// Notes the change made at `revision` (not empty).
    pub fn push(&mut self, revision: Revision, change: ViewChange) {
        self.changes.push_back((revision, change));
        while self.changes.len() > VIEW_LOG_CHANGES {
            if let Some((r, _)) = self.changes.pop_front() {
                self.base = r;
            }
        }
    }

    /// What changed after `since`, merged; `None` when the log does not
    /// reach back that far (the whole view is needed).
    pub fn since(&self, since: Revision) -> Option<ViewChange> {
        if since < self.base {
            return None;
        }
        let mut c = ViewChange::default();
        for (_, change) in self.changes.iter().filter(|(r, _)| *r > since) {
            c.merge(change);
        }
        Some(c)
    }
}

#[cfg(test)]
mod tests;
