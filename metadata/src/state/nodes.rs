//! Nodes: the brokers and proxies that registered, their leases and their
//! life (live, draining, dead). What a node owns is the topics concern's
//! ([`super::topics`]); the rules here only say which nodes a restart or a
//! death concerns, and [`super::ClusterState::apply`] moves their
//! ownership.

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
}

/// Every node that ever registered, by id (dead ones stay: their ids are
/// never given again).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodesState {
    pub by_id: BTreeMap<BrokerId, NodeInfo>,
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
    /// every id registered so far and at least [`FIRST_PROXY_ID`], never
    /// one an earlier node had (a paused node's heartbeats cannot renew a
    /// newer node's lease). Brokers of a Kubernetes Deployment, whose pods
    /// have no ordinal, ask so.
    pub(crate) fn register(
        &mut self,
        id: BrokerId,
        kind: NodeKind,
        addr: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Registered, MetaError> {
        let id = if id == UNASSIGNED_ID {
            let above = self.by_id.keys().next_back().map_or(0, |b| b.0);
            BrokerId(above.saturating_add(1).max(FIRST_PROXY_ID))
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
            },
        );
        Ok(Registered { id, restarted })
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

    /// Marks dead every node whose lease ended before `now_ms`, and returns
    /// their ids (in id order).
    pub(crate) fn expire(&mut self, now_ms: u64) -> Vec<BrokerId> {
        let expired: Vec<BrokerId> = self
            .by_id
            .values()
            .filter(|n| n.state != NodeState::Dead && n.lease_until_ms < now_ms)
            .map(|n| n.id)
            .collect();
        for id in &expired {
            self.mark_dead(*id);
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
            self.mark_dead(id);
        }
        down
    }

    fn mark_dead(&mut self, id: BrokerId) {
        if let Some(n) = self.by_id.get_mut(&id) {
            n.state = NodeState::Dead;
        }
    }

    /// Whether `id` is a live broker (one that may be given items).
    pub(crate) fn is_live_broker(&self, id: BrokerId) -> bool {
        matches!(
            self.by_id.get(&id),
            Some(n) if n.kind == NodeKind::Broker && n.state == NodeState::Live
        )
    }
}

#[cfg(test)]
mod tests;
