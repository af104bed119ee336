//! Raft RPCs between metadata nodes: JSON bodies over HTTP/1.1 to the peer's
//! `/raft/*` routes (served by `server`).

use std::time::Duration;

use openraft::BasicNode;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{NodeId, TypeConfig};
use crate::http::{HttpClient, HttpError};

/// Makes one connection object per peer.
#[derive(Debug, Clone, Default)]
pub struct Network {
    client: HttpClient,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        PeerConnection {
            target,
            addr: node.addr.clone(),
            client: self.client.clone(),
        }
    }
}

/// RPCs to one peer.
#[derive(Debug)]
pub struct PeerConnection {
    target: NodeId,
    addr: String,
    client: HttpClient,
}

impl PeerConnection {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body = serde_json::to_vec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let timeout = option.hard_ttl().max(Duration::from_millis(50));
        let bytes = self
            .client
            .post(&self.addr, path, "application/json", body.into(), timeout)
            .await
            .map_err(|e| match e {
                HttpError::Unreachable { .. } | HttpError::Timeout { .. } => {
                    RPCError::Unreachable(openraft::error::Unreachable::new(&e))
                }
                other => RPCError::Network(NetworkError::new(&other)),
            })?;
        let res: Result<Resp, RaftError<NodeId, E>> =
            serde_json::from_slice(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        res.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call("/raft/append", &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call("/raft/snapshot", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call("/raft/vote", &rpc, &option).await
    }
}
