//! Probes of the other proxies' Kafka ports. A proxy killed without
//! leaving stays registered until its lease runs out (seconds); a port
//! that refuses connections says at once that nothing listens there, so
//! every proxy leaves such a peer out of its answers from its next probe
//! on ([`crate::nodes::SelfNode::set_refused`]). Only a refusal counts: a
//! connection that times out may be a network that lets the clients
//! through but not this proxy, and the lease settles that case.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use floe_metadata::model::{NodeKind, NodeState};
use floe_metadata::watch::ClusterWatch;

use crate::nodes::{KafkaNode, SelfNode};

/// How often the peers are probed.
pub const PROBE_EVERY: Duration = Duration::from_millis(250);
/// How long one probe waits for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// Probes every live peer in the view every `every` until aborted.
pub fn spawn(
    me: Arc<SelfNode>,
    view: ClusterWatch,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if me.is_alone() {
            return;
        }
        loop {
            tokio::time::sleep(every).await;
            let snap = view.current();
            let mine = me.id();
            let peers: Vec<KafkaNode> = snap
                .nodes
                .iter()
                .filter(|n| n.kind == NodeKind::Proxy && n.state == NodeState::Live)
                .filter_map(|n| KafkaNode::parse(i32::try_from(n.id.0).ok()?, &n.addr))
                .filter(|n| n.id != mine)
                .collect();
            let probes = peers
                .iter()
                .map(|p| async move { (p.id, refuses(p).await) });
            let refused: HashSet<i32> = futures::future::join_all(probes)
                .await
                .into_iter()
                .filter_map(|(id, refused)| refused.then_some(id))
                .collect();
            if !refused.is_empty() {
                tracing::debug!(
                    ?refused,
                    "peer proxies refusing connections; left out of answers"
                );
            }
            me.set_refused(refused);
        }
    })
}

/// Whether `peer`'s Kafka port refuses a connection now.
async fn refuses(peer: &KafkaNode) -> bool {
    let Ok(port) = u16::try_from(peer.port) else {
        return false;
    };
    let connect = tokio::net::TcpStream::connect((peer.host.as_str(), port));
    match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Err(e)) => e.kind() == std::io::ErrorKind::ConnectionRefused,
        Ok(Ok(_)) | Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn a_closed_port_refuses_and_a_listening_one_does_not() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = i32::from(l.local_addr().unwrap().port());
        let node = |port| KafkaNode {
            id: 1,
            host: "127.0.0.1".into(),
            port,
        };
        assert!(!refuses(&node(port)).await);
        drop(l);
        assert!(refuses(&node(port)).await);
    }
}
