//! Raft RPCs between metadata nodes: bodies in the binary encoding of
//! [`super::codec`] over HTTP/1.1 to the peer's `/raft/*` routes (served by
//! `api::server`; a peer still on JSON is understood and answered in JSON).
//!
//! An AppendEntries must be written and answered by the peer within
//! openraft's deadline, the heartbeat interval (100 ms). One whose body
//! would pass [`APPEND_BYTES`] (or the peer's body limit, if lower) is not
//! sent whole: openraft is told [`PayloadTooLarge`] with how many entries
//! fit, and sends fewer at once. One of several entries that times out is
//! sent again at once as half as many (the peer may be slow only because
//! the append is large: a backlog of thousands of group-committed entries,
//! sent 300 at a time, missed the deadline on every try and stalled every
//! commit); a single entry that times out is reported as unreachable, so
//! openraft backs off. A peer that answers 413 (a smaller limit than ours)
//! gets half as many next time; a single entry it refuses is reported as
//! unreachable too, so openraft backs off instead of resending in a loop.

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
/// The entries' bytes sent in one AppendEntries, at most (unless one entry
/// alone is larger): what a peer decodes, writes to its log with an fsync
/// and answers well within the heartbeat interval on a loaded machine.
pub const APPEND_BYTES: usize = 1024 * 1024;

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

/// Why a call did not get an answer that openraft should see as is.
enum Unsent {
    /// The peer refused the body as too large (HTTP 413).
    TooLarge,
    /// The peer did not answer within the deadline.
    TimedOut(HttpError),
}

impl PeerConnection {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<RpcResult<Resp, E>, Unsent>
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
            Err(HttpError::Status { status: 413, .. }) => return Err(Unsent::TooLarge),
            Err(e @ HttpError::Timeout { .. }) => return Err(Unsent::TimedOut(e)),
            // A peer that cannot be connected to: openraft backs off as
            // `backoff` says before it sends to the peer again.
            Err(e @ HttpError::Unreachable { .. }) => {
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
        let budget = self
            .max_body
            .saturating_sub(ENVELOPE_BYTES)
            .min(APPEND_BYTES);
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

/// A peer that did not answer in time (the deadline is the heartbeat
/// interval, 100 ms; a loaded machine misses it): openraft backs off as
/// `backoff` says before it sends to the peer again.
fn slow<E: std::error::Error>(e: &HttpError) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
    RPCError::Unreachable(Unreachable::new(e))
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
            Err(Unsent::TimedOut(_)) if n > 1 => {
                tracing::info!(
                    peer = self.target,
                    entries = n,
                    "append not answered in time; sending half as many entries"
                );
                Err(too_large(n / 2))
            }
            Err(Unsent::TimedOut(e)) => Err(slow(&e)),
            Err(Unsent::TooLarge) if n > 1 => {
                tracing::info!(
                    peer = self.target,
                    entries = n,
                    "peer refused an append as too large; sending fewer entries"
                );
                Err(too_large(n / 2))
            }
            Err(Unsent::TooLarge) => {
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
            Err(Unsent::TimedOut(e)) => Err(slow(&e)),
            Err(Unsent::TooLarge) => {
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
            Err(Unsent::TimedOut(e)) => Err(slow(&e)),
            Err(Unsent::TooLarge) => {
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
        let (addr, held) = silent_peer().await;
        let ttl = Duration::from_millis(100);
        let r = tokio::time::timeout(ttl, peer(addr).vote(vote(), RPCOption::new(ttl))).await;
        assert!(
            matches!(r, Ok(Err(RPCError::Unreachable(_)))),
            "not answered before openraft's deadline: {r:?}"
        );
        held.abort();
    }

    /// Log entries `first..first + n`, each a topic creation whose config
    /// holds `bytes` bytes.
    fn entries(first: u64, n: u64, bytes: usize) -> Vec<crate::raft::Entry> {
        (first..first + n)
            .map(|i| crate::raft::Entry {
                log_id: crate::raft::LogId::new(openraft::CommittedLeaderId::new(1, 1), i),
                payload: openraft::EntryPayload::Normal(crate::command::Command::CreateTopic {
                    name: format!("t{i}"),
                    id: crate::ids::TopicId(uuid::Uuid::from_u128(u128::from(i))),
                    partitions: 10,
                    config: std::collections::BTreeMap::from([(
                        "x".to_string(),
                        "v".repeat(bytes),
                    )]),
                }),
            })
            .collect()
    }

    fn append(entries: Vec<crate::raft::Entry>) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: None,
            leader_commit: None,
            entries,
        }
    }

    /// A peer that holds its connections and never answers.
    async fn silent_peer() -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let held = tokio::spawn(async move {
            let mut conns = Vec::new();
            while let Ok((c, _)) = listener.accept().await {
                conns.push(c);
            }
        });
        (addr, held)
    }

    /// An append of several entries that the peer does not answer in time
    /// is sent again as half as many, at once (openraft's entries hint);
    /// one entry that times out makes openraft back off instead.
    #[tokio::test]
    async fn an_append_not_answered_in_time_is_sent_again_halved() {
        let (addr, held) = silent_peer().await;
        let ttl = Duration::from_millis(100);
        let mut p = peer(addr);
        let r = p
            .append_entries(append(entries(1, 8, 10)), RPCOption::new(ttl))
            .await;
        match r {
            Err(RPCError::PayloadTooLarge(t)) => assert_eq!(t.entries_hint(), 4),
            other => panic!("not halved: {other:?}"),
        }
        let r = p
            .append_entries(append(entries(1, 1, 10)), RPCOption::new(ttl))
            .await;
        assert!(matches!(r, Err(RPCError::Unreachable(_))), "{r:?}");
        held.abort();
    }

    /// A backlog is sent in appends of at most `APPEND_BYTES`, however
    /// high the peers' body limit: what a peer can write and answer within
    /// the heartbeat interval.
    #[test]
    fn an_append_is_cut_at_the_append_budget() {
        let mut p = peer("127.0.0.1:9".into());
        p.max_body = 64 << 20;
        let each = 100 * 1024;
        let rpc = append(entries(1, 30, each));
        let fit = p
            .entries_that_fit(&rpc)
            .expect("30 entries of 100 KiB are cut");
        assert!(
            (fit * each) <= APPEND_BYTES && ((fit + 1) * each) > APPEND_BYTES - 4096,
            "{fit} entries of {each} bytes"
        );
        assert_eq!(p.entries_that_fit(&append(entries(1, 5, each))), None);
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
