//! One member of a classic group: who it is, what it supports, its
//! assignment, its session deadline and the JoinGroup / SyncGroup it has
//! waiting, if any.

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::types::{GroupError, JoinResult, SyncResult};

#[derive(Debug)]
pub(super) struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    /// `(name, metadata)` in order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    /// Joined but no JoinGroup answered yet: its session is not watched,
    /// only [`super::GroupConfig::new_member_join_timeout`].
    pub is_new: bool,
    /// The member is removed at this instant unless it heartbeats first (a
    /// member with a JoinGroup or SyncGroup waiting counts as alive).
    pub deadline: Instant,
    pub join_tx: Option<oneshot::Sender<JoinResult>>,
    pub sync_tx: Option<oneshot::Sender<SyncResult>>,
}

impl Member {
    pub fn awaiting_join(&self) -> bool {
        self.join_tx.is_some()
    }

    pub fn awaiting_sync(&self) -> bool {
        self.sync_tx.is_some()
    }

    pub fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }

    /// The member's metadata for `protocol` (empty if it does not support it).
    pub fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    /// Same protocols with the same metadata in the same order.
    pub fn matches(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }

    /// The member's first choice among `candidates`.
    pub fn vote<'a>(&'a self, candidates: &[&str]) -> Option<&'a str> {
        self.protocols
            .iter()
            .map(|(name, _)| name.as_str())
            .find(|name| candidates.contains(name))
    }

    pub fn heartbeat(&mut self, now: Instant) {
        self.deadline = now + self.session_timeout;
    }

    /// Answers a waiting JoinGroup (no-op if none waits).
    pub fn answer_join(&mut self, result: JoinResult) {
        if let Some(tx) = self.join_tx.take() {
            // The caller may have gone away; nothing to do then.
            let _ = tx.send(result);
        }
    }

    pub fn fail_join(&mut self, member_id: &str, error: GroupError) {
        self.answer_join(JoinResult::failed(member_id, error));
    }

    /// Answers a waiting SyncGroup; true if one was waiting.
    pub fn answer_sync(&mut self, result: SyncResult) -> bool {
        match self.sync_tx.take() {
            Some(tx) => {
                let _ = tx.send(result);
                true
            }
            None => false,
        }
    }
}
