//! Probes of the other proxies' Kafka ports. A proxy killed without
//! leaving stays registered until its lease runs out (seconds); a port
//! that refuses connections says at once that nothing listens there, so
//! every proxy leaves such a peer out of its answers from its next probe
//! on ([`crate::nodes::SelfNode::set_refused`]). Only a refusal counts: a
//! connection that times out may be a network that lets the clients
//! through but not this proxy, and the lease settles that case.
//!
//! Peers are probed in the background ([`spawn`]) and before a Metadata
//! answer when the last probe is older than [`FRESH_FOR_ANSWERS`]
//! ([`fresh_for_answer`]): a client whose connection to a killed proxy
//! broke asks for metadata at once, and that answer already leaves the
//! killed proxy out.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use floe_metadata::model::{NodeKind, NodeState};
use floe_metadata::watch::{ClusterSnapshot, ClusterWatch};

use crate::nodes::{KafkaNode, SelfNode};

/// How often the peers are probed in the background.
pub const PROBE_EVERY: Duration = Duration::from_millis(250);
/// How old a probe a Metadata answer may rely on: a client that lost its
/// connection to a proxy asks for metadata at once, and should hear of
/// the loss in that answer, not in one a backoff later (librdkafka asks
/// again 1 to 2 s later), so an answer seldom relies on a probe made just
/// before the kill; a proxy still probes at most 100 times a second
/// however many clients ask.
pub const FRESH_FOR_ANSWERS: Duration = Duration::from_millis(10);
/// How long one probe waits for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How long an answer waits for a probe (a peer that neither accepts nor
/// refuses within it counts as not refusing).
const ANSWER_PROBE_TIMEOUT: Duration = Duration::from_millis(50);

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
            probe_if_older(&me, &view.current(), every, CONNECT_TIMEOUT).await;
        }
    })
}

/// Before an answer names the proxies: probes the peers unless a probe
/// ended within [`FRESH_FOR_ANSWERS`] (waiting for one under way).
pub async fn fresh_for_answer(me: &SelfNode, snap: &ClusterSnapshot) {
    if me.is_alone() {
        return;
    }
    probe_if_older(me, snap, FRESH_FOR_ANSWERS, ANSWER_PROBE_TIMEOUT).await;
}

/// Probes the live peers in `snap` unless the last probe ended within
/// `max_age`; one probe at a time.
async fn probe_if_older(
    me: &SelfNode,
    snap: &ClusterSnapshot,
    max_age: Duration,
    timeout: Duration,
) {
    let mut probed_at = me.probed_at.lock().await;
    if probed_at.is_some_and(|t| t.elapsed() < max_age) {
        return;
    }
    let mine = me.id();
    let peers: Vec<KafkaNode> = snap
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Proxy && n.state == NodeState::Live)
        .filter_map(|n| {
            let addr = crate::listeners::advertised_for(&n.addr, "")?;
            KafkaNode::parse(i32::try_from(n.id.0).ok()?, addr)
        })
        .filter(|n| n.id != mine)
        .collect();
    let probes = peers
        .iter()
        .map(|p| async move { (p.id, refuses(p, timeout).await) });
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
    *probed_at = Some(tokio::time::Instant::now());
}

/// Whether `peer`'s Kafka port refuses a connection now.
async fn refuses(peer: &KafkaNode, timeout: Duration) -> bool {
    let Ok(port) = u16::try_from(peer.port) else {
        return false;
    };
    let connect = tokio::net::TcpStream::connect((peer.host.as_str(), port));
    match tokio::time::timeout(timeout, connect).await {
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
        let wait = Duration::from_secs(5);
        assert!(!refuses(&node(port), wait).await);
        drop(l);
        assert!(refuses(&node(port), wait).await);
    }
}
