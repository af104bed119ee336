//! Nodes: the brokers and proxies that registered, their leases and their
//! life (live, draining, dead, then removed). What a node owns is the
//! topics concern's ([`super::topics`]); the rules here only say which
//! nodes a restart or a death concerns, and [`super::ClusterState::apply`]
//! moves their ownership.
//!
//! A dead node stays on record for a retention (`--dead-node-retention-ms`)
//! and is then removed (`NodesState::sweep_dead`), unless something in
//! the model still refers to it. Its id is never given again: the highest
//! id ever registered or given is kept ([`NodesState::highest_id`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::NodeKind;
use crate::error::MetaError;
use crate::ids::BrokerId;

/// The id a proxy or a broker registers with to be given one
/// ([`crate::command::Command::RegisterNode`]).
pub const UNASSIGNED_ID: BrokerId = BrokerId(0);
/// The lowest id the metadata gives a proxy or a broker (as Kafka's
/// generated broker ids start above `reserved.broker.max.id`, 1000): below
/// it, ids are left to brokers and proxies that name their own.
pub const FIRST_PROXY_ID: u32 = 1001;
/// How long a dead node stays on record by default before it is removed
/// (`--dead-node-retention-ms`): an hour.
pub const DEFAULT_DEAD_NODE_RETENTION_MS: u64 = 3_600_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeState {
    Live,
    Draining,
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: BrokerId,
    pub kind: NodeKind,
    pub addr: String,
    pub lease_ms: u64,
    pub lease_until_ms: u64,
    pub state: NodeState,
    /// When the node was found dead: the `now_ms` of the lease sweep that
    /// marked it, or, for a node reported down (that command carries no
    /// time) or one of a snapshot of an older version, of the first
    /// `NodesState::sweep_dead` after. `None` while the node is not dead.
    /// Kept beside the nodes in snapshots (`wire.rs`, `node_deaths`), not
    /// in this record, whose binary layout older snapshots fix.
    #[serde(skip)]
    pub dead_since_ms: Option<u64>,
}

impl NodeInfo {
    /// When a dead node becomes due for removal with `retention_ms`: past
    /// this time it has been dead for longer than the retention. `None`
    /// while it is not dead, or its death time is not stamped yet.
    pub fn removal_due_ms(&self, retention_ms: u64) -> Option<u64> {
        match (self.state, self.dead_since_ms) {
            (NodeState::Dead, Some(since)) => Some(since.saturating_add(retention_ms)),
            _ => None,
        }
    }
}

/// The nodes on record, by id: live and draining ones, and dead ones until
/// they are removed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodesState {
    pub by_id: BTreeMap<BrokerId, NodeInfo>,
    /// The highest id ever registered or given (0: none yet). A node that
    /// asks for an id gets the one above it, so that no id is given twice,
    /// not even one of a node removed since.
    pub highest_id: BrokerId,
}

/// A registration that was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Registered {
    /// The node's id (given one if it asked for [`UNASSIGNED_ID`]).
    pub id: BrokerId,
    /// A broker registered while still on record as alive: a new process
    /// of it, which keeps what the previous one owned at the next epoch.
    pub restarted: bool,
}

impl NodesState {
    /// Registers a node (again): live, with a lease from `now_ms`. An id
    /// is one node's, of one kind: a broker and a proxy cannot share it.
    /// A node may ask for [`UNASSIGNED_ID`]: it gets the next id above
    /// every id registered or given so far ([`Self::highest_id`]) and at
    /// least [`FIRST_PROXY_ID`], never one an earlier node had, removed or
    /// not (a paused node's heartbeats cannot renew a newer node's lease).
    /// Brokers of a Kubernetes Deployment, whose pods have no ordinal, ask
    /// so. A removed node naming its own id registers anew.
    pub(crate) fn register(
        &mut self,
        id: BrokerId,
        kind: NodeKind,
        addr: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Registered, MetaError> {
        let id = if id == UNASSIGNED_ID {
            self.next_id()?
        } else {
            id
        };
        if let Some(n) = self.by_id.get(&id)
            && n.kind != kind
        {
            return Err(MetaError::InvalidRequest(format!(
                "node id {id} is already a {} id",
                match n.kind {
                    NodeKind::Broker => "broker",
                    NodeKind::Proxy => "proxy",
                }
            )));
        }
        // A broker registering while still on record as alive is a new
        // process of it (restarted within its lease).
        let restarted = kind == NodeKind::Broker
            && self
                .by_id
                .get(&id)
                .is_some_and(|n| n.state != NodeState::Dead);
        self.by_id.insert(
            id,
            NodeInfo {
                id,
                kind,
                addr: addr.to_string(),
                lease_ms,
                lease_until_ms: now_ms.saturating_add(lease_ms),
                state: NodeState::Live,
                dead_since_ms: None,
            },
        );
        self.highest_id = self.highest_id.max(id);
        Ok(Registered { id, restarted })
    }

    /// The id a node asking for one is given: above every id registered or
    /// given so far, and at least [`FIRST_PROXY_ID`].
    fn next_id(&self) -> Result<BrokerId, MetaError> {
        // Every id on record is at most `highest_id` (registrations raise
        // it); the records are looked at too, for a model built by hand.
        let above = self
            .by_id
            .keys()
            .next_back()
            .map_or(self.highest_id, |last| self.highest_id.max(*last));
        // Kafka names nodes with an i32: no id above it is given.
        match above.0.checked_add(1).map(|n| n.max(FIRST_PROXY_ID)) {
            Some(n) if i32::try_from(n).is_ok() => Ok(BrokerId(n)),
            _ => Err(MetaError::InvalidRequest(
                "every node id Kafka can name was given".into(),
            )),
        }
    }

    /// Renews a node's lease from `now_ms`; a dead node must register again.
    pub(crate) fn heartbeat(&mut self, id: BrokerId, now_ms: u64) -> Result<(), MetaError> {
        match self.by_id.get_mut(&id) {
            Some(n) if n.state != NodeState::Dead => {
                n.lease_until_ms = now_ms.saturating_add(n.lease_ms);
                Ok(())
            }
            _ => Err(MetaError::UnknownBroker(id)),
        }
    }

    /// A live node starts draining (a draining or dead one stays as it is).
    pub(crate) fn drain(&mut self, id: BrokerId) -> Result<(), MetaError> {
        match self.by_id.get_mut(&id) {
            Some(n) if n.state == NodeState::Live => {
                n.state = NodeState::Draining;
                Ok(())
            }
            Some(_) => Ok(()),
            None => Err(MetaError::UnknownBroker(id)),
        }
    }

    /// Marks dead, since `now_ms`, every node whose lease ended before
    /// `now_ms`, and returns their ids (in id order).
    pub(crate) fn expire(&mut self, now_ms: u64) -> Vec<BrokerId> {
        let expired: Vec<BrokerId> = self
            .by_id
            .values()
            .filter(|n| n.state != NodeState::Dead && n.lease_until_ms < now_ms)
            .map(|n| n.id)
            .collect();
        for id in &expired {
            self.mark_dead(*id, Some(now_ms));
        }
        expired
    }

    /// A broker reported down at `addr`: dead now if that is the address it
    /// registered with (not a later process elsewhere) and it is not dead
    /// already. Whether it was marked dead.
    pub(crate) fn down(&mut self, id: BrokerId, addr: &str) -> bool {
        let down = self.by_id.get(&id).is_some_and(|n| {
            n.kind == NodeKind::Broker && n.state != NodeState::Dead && n.addr == addr
        });
        if down {
            // The report carries no time: the next sweep stamps it.
            self.mark_dead(id, None);
        }
        down
    }

    fn mark_dead(&mut self, id: BrokerId, now_ms: Option<u64>) {
        if let Some(n) = self.by_id.get_mut(&id) {
            n.state = NodeState::Dead;
            n.dead_since_ms = now_ms;
        }
    }

    /// Whether a [`Self::sweep_dead`] at `now_ms` would change anything: a
    /// dead node has no death time yet, or (with a retention) one is due
    /// for removal and `referred` does not hold it.
    pub(crate) fn sweep_due(
        &self,
        now_ms: u64,
        retention_ms: Option<u64>,
        referred: impl Fn(BrokerId) -> bool,
    ) -> bool {
        self.by_id.values().any(|n| {
            (n.state == NodeState::Dead && n.dead_since_ms.is_none())
                || (removable(n, now_ms, retention_ms) && !referred(n.id))
        })
    }

    /// Stamps `now_ms` as the death time of the dead nodes that have none,
    /// then removes the nodes dead for longer than `retention_ms` (`None`:
    /// none is removed) that `referred` does not hold (something in the
    /// model still names them: they stay until it is moved). Returns the
    /// removed ids, in id order. Their ids are not given again
    /// ([`Self::highest_id`] stays above them).
    pub(crate) fn sweep_dead(
        &mut self,
        now_ms: u64,
        retention_ms: Option<u64>,
        referred: impl Fn(BrokerId) -> bool,
    ) -> Vec<BrokerId> {
        for n in self.by_id.values_mut() {
            if n.state == NodeState::Dead && n.dead_since_ms.is_none() {
                n.dead_since_ms = Some(now_ms);
            }
        }
        let removed: Vec<BrokerId> = self
            .by_id
            .values()
            .filter(|n| removable(n, now_ms, retention_ms) && !referred(n.id))
            .map(|n| n.id)
            .collect();
        for id in &removed {
            self.by_id.remove(id);
            self.highest_id = self.highest_id.max(*id);
        }
        removed
    }

    /// Whether `id` is a live broker (one that may be given items).
    pub(crate) fn is_live_broker(&self, id: BrokerId) -> bool {
        matches!(
            self.by_id.get(&id),
            Some(n) if n.kind == NodeKind::Broker && n.state == NodeState::Live
        )
    }
}

/// Whether `n` has been dead for longer than `retention_ms` at `now_ms`.
fn removable(n: &NodeInfo, now_ms: u64, retention_ms: Option<u64>) -> bool {
    retention_ms
        .and_then(|r| n.removal_due_ms(r))
        .is_some_and(|due| due < now_ms)
}

#[cfg(test)]
mod tests;
