//! Raft RPCs between metadata nodes: bodies in the binary encoding of
//! [`super::codec`] over HTTP/1.1 to the peer's `/raft/*` routes (served by
//! `api::server`; a peer still on JSON is understood and answered in JSON).
//!
//! An AppendEntries whose body would pass the peer's body limit is not sent
//! whole: openraft is told [`PayloadTooLarge`] with how many entries fit, and
//! sends fewer at once. A peer that answers 413 anyway (a smaller limit than
//! ours) gets half as many next time; a single entry it refuses is reported
//! as unreachable, so openraft backs off instead of resending in a loop.

use std::time::Duration;

use openraft::BasicNode;
use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::codec;
use super::{NodeId, TypeConfig};
use crate::http::{HttpClient, HttpError};

/// Content type of Raft RPC bodies in the binary encoding.
pub const RAFT_BINARY: &str = "application/x-floe-raft";
/// Room left in a body for what is not entries (vote, log ids, framing).
const ENVELOPE_BYTES: usize = 64 * 1024;

/// Makes one connection object per peer.
#[derive(Debug, Clone)]
pub struct Network {
    client: HttpClient,
    max_body: usize,
}

impl Network {
    /// A network whose AppendEntries bodies stay within `max_body` bytes
    /// (the peers' HTTP body limit), unless one entry alone is larger.
    pub fn new(max_body: usize) -> Self {
        Self {
            client: HttpClient::default(),
            max_body,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        PeerConnection {
            target,
            addr: node.addr.clone(),
            client: self.client.clone(),
            max_body: self.max_body,
        }
    }
}

/// RPCs to one peer.
#[derive(Debug)]
pub struct PeerConnection {
    target: NodeId,
    addr: String,
    client: HttpClient,
    max_body: usize,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

/// A body the peer refused as too large (HTTP 413).
struct TooLarge;

impl PeerConnection {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<RpcResult<Resp, E>, TooLarge>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body = match codec::encode(req) {
            Ok(b) => b,
            Err(e) => return Ok(Err(RPCError::Network(NetworkError::new(&e)))),
        };
        // Within openraft's own deadline (the same TTL), so that a slow
        // peer is told apart below rather than by openraft's timeout, which
        // it answers without backing off.
        let ttl = option.hard_ttl();
        let timeout = (ttl - ttl / 10).max(Duration::from_millis(20));
        let bytes = match self
            .client
            .post(&self.addr, path, RAFT_BINARY, body.into(), timeout)
            .await
        {
            Ok(b) => b,
            Err(HttpError::Status { status: 413, .. }) => return Err(TooLarge),
            // A peer that cannot be connected to, or that did not answer in
            // time (the deadline is the heartbeat interval, 100 ms; a loaded
            // machine misses it): openraft backs off as `backoff` says
            // before it sends to the peer again.
            Err(e @ (HttpError::Unreachable { .. } | HttpError::Timeout { .. })) => {
                return Ok(Err(RPCError::Unreachable(Unreachable::new(&e))));
            }
            Err(other) => return Ok(Err(RPCError::Network(NetworkError::new(&other)))),
        };
        Ok(
            match codec::decode::<Result<Resp, RaftError<NodeId, E>>>(&bytes) {
                Err(e) => Err(RPCError::Network(NetworkError::new(&e))),
                Ok(res) => res.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e))),
            },
        )
    }

    /// How many leading entries fit in one body; `None` if all do.
    fn entries_that_fit(&self, rpc: &AppendEntriesRequest<TypeConfig>) -> Option<usize> {
        let budget = self.max_body.saturating_sub(ENVELOPE_BYTES);
        let mut total = 0usize;
        for (i, e) in rpc.entries.iter().enumerate() {
            total = total.saturating_add(codec::encoded_len(e).unwrap_or(usize::MAX));
            if total > budget {
                return Some(i.max(1));
            }
        }
        None
    }
}

fn too_large(entries: usize) -> RPCError<NodeId, BasicNode, RaftError<NodeId>> {
    RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(entries.max(1) as u64))
}

/// The pauses before sending again to a peer that stays unreachable or
/// slow: short at first, so that one answer a loaded machine delayed does
/// not hold replication up (a constant 500 ms, openraft's default, let
/// commits wait for a majority that was there, and broker leases ran out),
/// and growing, so that a peer that keeps missing its deadline is not sent
/// a new connection every heartbeat (each timed-out HTTP/1.1 request
/// closes its connection; ten new ones a second per peer swamped the fault
/// tests' relays until the cluster lost its majority for good).
fn retry_pauses() -> impl Iterator<Item = Duration> + Send + 'static {
    (0u32..)
        .map(|i| BACKOFF_FIRST.saturating_mul(1 << i.min(16)))
        .map(|d| d.min(BACKOFF_MAX))
}

/// The first pause of [`retry_pauses`].
const BACKOFF_FIRST: Duration = Duration::from_millis(20);
/// The longest pause of [`retry_pauses`].
const BACKOFF_MAX: Duration = Duration::from_millis(320);

impl RaftNetwork<TypeConfig> for PeerConnection {
    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(retry_pauses())
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let n = rpc.entries.len();
        if n > 1
            && let Some(fit) = self.entries_that_fit(&rpc)
        {
            tracing::debug!(
                peer = self.target,
                entries = n,
                fit,
                "append split to fit the body limit"
            );
            return Err(too_large(fit));
        }
        match self.call("/raft/append", &rpc, &option).await {
            Ok(res) => res,
            Err(TooLarge) if n > 1 => {
                tracing::info!(
                    peer = self.target,
                    entries = n,
                    "peer refused an append as too large; sending fewer entries"
                );
                Err(too_large(n / 2))
            }
            Err(TooLarge) => {
                tracing::warn!(
                    peer = self.target,
                    addr = %self.addr,
                    "peer refuses a single log entry as too large (its body limit is below this node's); backing off"
                );
                let e = std::io::Error::other("log entry above the peer's body limit");
                Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        match self.call("/raft/snapshot", &rpc, &option).await {
            Ok(res) => res,
            Err(TooLarge) => {
                let e = std::io::Error::other("snapshot chunk above the peer's body limit");
                Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.call("/raft/vote", &rpc, &option).await {
            Ok(res) => res,
            Err(TooLarge) => {
                let e = std::io::Error::other("vote above the peer's body limit");
                Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::Vote;

    fn peer(addr: String) -> PeerConnection {
        PeerConnection {
            target: 2,
            addr,
            client: HttpClient::default(),
            max_body: 1 << 20,
        }
    }

    fn vote() -> VoteRequest<NodeId> {
        VoteRequest::new(Vote::new(1, 1), None)
    }

    /// A peer that takes the connection and never answers (a loaded or
    /// paused process) is unreachable, answered before openraft's own
    /// deadline (which it would retry at once, on a new connection).
    #[tokio::test]
    async fn a_peer_slow_to_answer_is_unreachable_within_the_deadline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let held = tokio::spawn(async move {
            let mut conns = Vec::new();
            while let Ok((c, _)) = listener.accept().await {
                conns.push(c);
            }
        });
        let ttl = Duration::from_millis(100);
        let r = tokio::time::timeout(ttl, peer(addr).vote(vote(), RPCOption::new(ttl))).await;
        assert!(
            matches!(r, Ok(Err(RPCError::Unreachable(_)))),
            "not answered before openraft's deadline: {r:?}"
        );
        held.abort();
    }

    /// The pauses after a slow or unreachable peer start short and double
    /// up to a bound.
    #[test]
    fn retries_back_off_from_short_pauses_to_a_bound() {
        let p: Vec<u64> = retry_pauses()
            .take(8)
            .map(|d| d.as_millis() as u64)
            .collect();
        assert_eq!(p, [20, 40, 80, 160, 320, 320, 320, 320]);
        assert_eq!(retry_pauses().nth(100), Some(BACKOFF_MAX));
    }

    /// A peer whose port refuses connections is unreachable: openraft
    /// backs off before trying it again.
    #[tokio::test]
    async fn a_peer_that_refuses_connections_is_unreachable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let r = peer(addr)
            .vote(vote(), RPCOption::new(Duration::from_millis(500)))
            .await;
        assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
    }
}
