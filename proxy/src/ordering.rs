//! The order of a connection's effects (Kafka's promise that the requests
//! of one connection take effect in the order they were sent).
//!
//! Kafka's broker handles one request of a connection at a time. Floe reads
//! ahead and handles a connection's requests concurrently (pipelining keeps
//! its throughput: fetches of different partitions, metadata, lookups), so
//! where Kafka's order is something a client relies on, a request waits
//! for the earlier requests of its connection that touch the same thing:
//! its [`Lane`]s. Each lane is a chain: a request in it starts once the
//! request before it in the same lane is answered (its effect done).
//!
//! - A group's offsets and membership: OffsetCommit, TxnOffsetCommit,
//!   OffsetFetch, OffsetDelete, DeleteGroups, JoinGroup, SyncGroup,
//!   Heartbeat, LeaveGroup, ConsumerGroupHeartbeat, ShareGroupHeartbeat and
//!   the share-group offset admin: asynchronous commits land in the order
//!   sent (a later one is never overwritten by an earlier one), and an
//!   OffsetFetch sees the commits sent before it.
//! - A share member's acknowledgements: ShareFetch and ShareAcknowledge of
//!   one group and member.
//! - A transactional id: InitProducerId, AddPartitionsToTxn,
//!   AddOffsetsToTxn, TxnOffsetCommit and EndTxn.
//! - Administration: requests that change or read topics, configs, ACLs,
//!   quotas, credentials and records (CreateTopics … DescribeAcls), one
//!   lane per connection: an admin client's request sees the changes it
//!   asked for before.
//!
//! Produce is ordered where it is read (each partition's writes are
//! sequenced before the connection's next request is read,
//! [`crate::server`]); Fetch, ListOffsets, Metadata and the other reads
//! run beside everything else, as their answers do not depend on the
//! order of a connection's requests but on what is committed.

use std::collections::HashMap;

use kafka_protocol::messages::RequestKind;
use kafka_protocol::protocol::StrBytes;
use tokio::sync::watch;

/// A thing whose requests take effect in the order a connection sent them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Lane {
    /// A consumer or share group's offsets and membership.
    Group(String),
    /// A share group member's acquisitions and acknowledgements.
    ShareMember { group: String, member: String },
    /// A transactional id's state.
    Transaction(String),
    /// Topics, configs, ACLs, quotas, credentials, records.
    Admin,
}

/// The lanes `body` is ordered in (none: it runs beside everything).
pub fn lanes_of(body: &RequestKind) -> Vec<Lane> {
    let group = |g: &str| Lane::Group(g.to_string());
    let txn = |t: &str| Lane::Transaction(t.to_string());
    let mut lanes = match body {
        RequestKind::OffsetCommit(r) => vec![group(&r.group_id)],
        RequestKind::OffsetFetch(r) => {
            let mut out = vec![group(&r.group_id)];
            out.extend(r.groups.iter().map(|g| group(&g.group_id)));
            out
        }
        RequestKind::OffsetDelete(r) => vec![group(&r.group_id)],
        RequestKind::DeleteGroups(r) => r.groups_names.iter().map(|g| group(g)).collect(),
        RequestKind::JoinGroup(r) => vec![group(&r.group_id)],
        RequestKind::SyncGroup(r) => vec![group(&r.group_id)],
        RequestKind::Heartbeat(r) => vec![group(&r.group_id)],
        RequestKind::LeaveGroup(r) => vec![group(&r.group_id)],
        RequestKind::ConsumerGroupHeartbeat(r) => vec![group(&r.group_id)],
        RequestKind::ShareGroupHeartbeat(r) => vec![group(&r.group_id)],
        RequestKind::AlterShareGroupOffsets(r) => vec![group(&r.group_id), Lane::Admin],
        RequestKind::DeleteShareGroupOffsets(r) => vec![group(&r.group_id), Lane::Admin],
        RequestKind::ShareFetch(r) => share_member(r.group_id.as_deref(), r.member_id.as_ref()),
        RequestKind::ShareAcknowledge(r) => {
            share_member(r.group_id.as_deref(), r.member_id.as_ref())
        }
        RequestKind::TxnOffsetCommit(r) => vec![group(&r.group_id), txn(&r.transactional_id)],
        RequestKind::InitProducerId(r) => r.transactional_id.iter().map(|t| txn(t)).collect(),
        RequestKind::AddPartitionsToTxn(r) => {
            let mut out = vec![txn(&r.v3_and_below_transactional_id)];
            out.extend(r.transactions.iter().map(|t| txn(&t.transactional_id)));
            out
        }
        RequestKind::AddOffsetsToTxn(r) => vec![txn(&r.transactional_id)],
        RequestKind::EndTxn(r) => vec![txn(&r.transactional_id)],
        RequestKind::CreateTopics(_)
        | RequestKind::DeleteTopics(_)
        | RequestKind::CreatePartitions(_)
        | RequestKind::DeleteRecords(_)
        | RequestKind::AlterConfigs(_)
        | RequestKind::IncrementalAlterConfigs(_)
        | RequestKind::DescribeConfigs(_)
        | RequestKind::CreateAcls(_)
        | RequestKind::DeleteAcls(_)
        | RequestKind::DescribeAcls(_)
        | RequestKind::AlterClientQuotas(_)
        | RequestKind::DescribeClientQuotas(_)
        | RequestKind::AlterUserScramCredentials(_)
        | RequestKind::DescribeUserScramCredentials(_) => vec![Lane::Admin],
        _ => Vec::new(),
    };
    // An empty name (a transactional id of v4's AddPartitionsToTxn, v8's
    // OffsetFetch group) names nothing.
    lanes.retain(|l| !matches!(l, Lane::Group(g) | Lane::Transaction(g) if g.is_empty()));
    let mut unique = Vec::with_capacity(lanes.len());
    for lane in lanes.drain(..) {
        if !unique.contains(&lane) {
            unique.push(lane);
        }
    }
    unique
}

fn share_member(group: Option<&StrBytes>, member: Option<&StrBytes>) -> Vec<Lane> {
    match (group, member) {
        (Some(g), Some(m)) => vec![Lane::ShareMember {
            group: g.to_string(),
            member: m.to_string(),
        }],
        _ => Vec::new(),
    }
}

/// Lanes of one connection above which finished ones are forgotten.
const PRUNE_ABOVE: usize = 256;

/// One connection's lanes: for each, the request last entered in it.
#[derive(Default)]
pub struct Lanes {
    last: HashMap<Lane, watch::Receiver<()>>,
}

impl Lanes {
    /// Enters a request, read now, in `lanes`: its [`Turn`] comes once the
    /// requests entered before it in any of them are done.
    pub fn enter(&mut self, lanes: Vec<Lane>) -> Turn {
        if lanes.is_empty() {
            return Turn::default();
        }
        let (done, rx) = watch::channel(());
        let mut before = Vec::new();
        for lane in lanes {
            if let Some(prev) = self.last.insert(lane, rx.clone()) {
                before.push(prev);
            }
        }
        if self.last.len() > PRUNE_ABOVE {
            // A closed channel is a request done: nothing waits on it.
            self.last.retain(|_, rx| rx.has_changed().is_ok());
        }
        Turn {
            before,
            _done: Some(done),
        }
    }

    /// Lanes with a request still in them or remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.last.len()
    }
}

/// A request's place in its lanes. Dropping it (once the request is
/// answered, or given up) lets the next request of each lane go.
#[derive(Default)]
pub struct Turn {
    before: Vec<watch::Receiver<()>>,
    /// Held until the request is done; its drop closes the channel the
    /// next requests wait on.
    _done: Option<watch::Sender<()>>,
}

impl Turn {
    /// Waits until the requests before this one in its lanes are done.
    pub async fn wait(&mut self) {
        for mut rx in std::mem::take(&mut self.before) {
            // Nothing is ever sent: `changed` returns when the sender,
            // held by the earlier request's turn, is dropped.
            while rx.changed().await.is_ok() {}
        }
    }

    /// Whether this request waits for none.
    #[cfg(test)]
    fn is_free(&self) -> bool {
        self.before.iter().all(|rx| rx.has_changed().is_err())
    }
}

#[cfg(test)]
#[path = "ordering/tests.rs"]
mod tests;
