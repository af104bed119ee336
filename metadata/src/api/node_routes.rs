//! The nodes on record over the API (`crate::state::nodes`): the route that
//! lists them for `floe cluster nodes`.

use super::server::AppState;
use super::{convert, proto};
use crate::clock::lease_now_ms;
use crate::error::MetaError;
use crate::state::{ClusterState, NodeInfo};

/// Every node on record, with its lease, its death time and when it is
/// due for removal under this node's retention.
pub async fn list(s: AppState, _req: proto::Empty) -> Result<proto::ListNodesResponse, MetaError> {
    s.linearizable().await?;
    let retention = s.dead_node_retention_ms;
    Ok(s.shared.read(|st| proto::ListNodesResponse {
        nodes: st
            .nodes
            .by_id
            .values()
            .map(|n| record(st, n, retention))
            .collect(),
        now_ms: lease_now_ms(),
        dead_node_retention_ms: retention.unwrap_or(0),
        highest_id: st.nodes.highest_id.0,
    }))
}

fn record(st: &ClusterState, n: &NodeInfo, retention_ms: Option<u64>) -> proto::NodeRecord {
    proto::NodeRecord {
        id: n.id.0,
        kind: convert::node_kind_name(n.kind).to_string(),
        addr: n.addr.clone(),
        state: convert::node_state(n.state).to_string(),
        lease_ms: n.lease_ms,
        lease_until_ms: n.lease_until_ms,
        dead_since_ms: n.dead_since_ms.unwrap_or(0),
        removal_due_ms: retention_ms.and_then(|r| n.removal_due_ms(r)).unwrap_or(0),
        held_by: u32::try_from(st.topics.naming(n.id).count()).unwrap_or(u32::MAX),
    }
}
