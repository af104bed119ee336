//! One metadata node: Raft with its stores, the HTTP server, and the
//! controller loop that acts while this node is the leader.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;

use crate::api::server::{AppState, router};
use crate::clock::now_ms;
use crate::controller;
use crate::error::MetaError;
use crate::raft::log_store::LogStore;
use crate::raft::network::Network;
use crate::raft::state_machine::{SharedState, StateMachine};
use crate::raft::{NodeId, Raft};

/// Settings of one metadata node.
#[derive(Debug, Clone)]
pub struct MetaConfig {
    pub id: NodeId,
    /// Where the HTTP server listens.
    pub listen: SocketAddr,
    /// The address other nodes and clients use (defaults to `listen`).
    pub advertise: Option<String>,
    /// Initial voters (id → address), this node included. Empty: just this node.
    pub peers: BTreeMap<NodeId, String>,
    pub data_dir: PathBuf,
    /// Form a new cluster from `peers` if this node's log is empty. Only for
    /// the first start of a new cluster (a single node always may).
    pub init: bool,
    pub heartbeat_interval: Duration,
    pub election_timeout_min: Duration,
    /// Logs applied since the last snapshot that trigger a new one.
    pub snapshot_every: u64,
    /// Logs kept after a snapshot (older ones are purged).
    pub keep_logs: u64,
    /// How often the controller looks at leases and load.
    pub controller_interval: Duration,
    /// What the HTTP server allows its clients (body limit: the largest
    /// Raft append or snapshot, [`crate::api::server::MAX_REQUEST_BYTES`]).
    pub http: crate::http_server::HttpLimits,
}

impl MetaConfig {
    pub fn new(id: NodeId, listen: SocketAddr, data_dir: PathBuf) -> Self {
        Self {
            id,
            listen,
            advertise: None,
            peers: BTreeMap::new(),
            data_dir,
            init: false,
            heartbeat_interval: Duration::from_millis(100),
            election_timeout_min: Duration::from_millis(500),
            snapshot_every: 5000,
            keep_logs: 1000,
            controller_interval: Duration::from_millis(500),
            http: crate::http_server::HttpLimits::with_body_limit(
                crate::api::server::MAX_REQUEST_BYTES,
            ),
        }
    }

    fn advertised(&self) -> String {
        self.advertise
            .clone()
            .unwrap_or_else(|| self.listen.to_string())
    }
}

/// A running metadata node.
pub struct MetaNode {
    pub id: NodeId,
    pub raft: Raft,
    pub shared: SharedState,
    pub addr: SocketAddr,
    local: crate::api::LocalMeta,
    server: tokio::task::JoinHandle<()>,
    controller: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for MetaNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaNode")
            .field("id", &self.id)
            .field("addr", &self.addr)
            .finish()
    }
}

fn storage(e: impl std::fmt::Display) -> MetaError {
    MetaError::Storage(e.to_string())
}

impl MetaNode {
    pub async fn start(cfg: MetaConfig) -> Result<MetaNode, MetaError> {
        if cfg.id == 0 {
            return Err(MetaError::InvalidRequest("node id must be above 0".into()));
        }
        std::fs::create_dir_all(&cfg.data_dir).map_err(storage)?;
        let log = LogStore::open(&cfg.data_dir.join("raft-log.redb")).map_err(storage)?;
        let (sm, shared) = StateMachine::open(&cfg.data_dir.join("state")).map_err(storage)?;
        let raft_config = openraft::Config {
            cluster_name: "floe-metadata".into(),
            heartbeat_interval: cfg.heartbeat_interval.as_millis() as u64,
            election_timeout_min: cfg.election_timeout_min.as_millis() as u64,
            election_timeout_max: cfg.election_timeout_min.as_millis() as u64 * 2,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(cfg.snapshot_every),
            max_in_snapshot_log_to_keep: cfg.keep_logs,
            ..Default::default()
        }
        .validate()
        .map_err(|e| MetaError::InvalidConfig(e.to_string()))?;
        let raft = Raft::new(cfg.id, Arc::new(raft_config), Network::default(), log, sm)
            .await
            .map_err(|e| MetaError::Storage(e.to_string()))?;

        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| {
                MetaError::InvalidConfig(format!("cannot listen on {}: {e}", cfg.listen))
            })?;
        let addr = listener.local_addr().map_err(storage)?;
        let state = AppState {
            id: cfg.id,
            raft: raft.clone(),
            shared: shared.clone(),
        };
        let local = crate::api::LocalMeta::new(state.clone());
        let app = router(state.clone());
        let limits = cfg.http.clone();
        let server = tokio::spawn(async move {
            if let Err(e) = crate::http_server::serve(listener, app, limits, "metadata").await {
                tracing::error!(error = %e, "metadata server stopped");
            }
        });

        let mut peers = cfg.peers.clone();
        if peers.is_empty() {
            peers.insert(cfg.id, cfg.advertised());
        }
        let alone = peers.len() == 1 && peers.contains_key(&cfg.id);
        let initialized = raft
            .is_initialized()
            .await
            .map_err(|e| MetaError::Unavailable(e.to_string()))?;
        if !initialized && (cfg.init || alone) {
            let members: BTreeMap<NodeId, BasicNode> = peers
                .iter()
                .map(|(id, a)| (*id, BasicNode::new(a.clone())))
                .collect();
            match raft.initialize(members).await {
                Ok(()) => tracing::info!(node = cfg.id, "initialized a new metadata cluster"),
                Err(e) => tracing::warn!(node = cfg.id, error = %e, "cluster not initialized here"),
            }
        }

        let controller = tokio::spawn(controller_loop(state, cfg.controller_interval));
        tracing::info!(node = cfg.id, %addr, "metadata node started");
        Ok(MetaNode {
            id: cfg.id,
            raft,
            shared,
            addr,
            local,
            server,
            controller,
        })
    }

    /// The API of this node for roles in the same process: no HTTP, no
    /// encoding (`floe standalone`).
    pub fn local_api(&self) -> std::sync::Arc<dyn crate::api::MetaApi> {
        std::sync::Arc::new(self.local.clone())
    }

    /// Stops serving and shuts Raft down.
    pub async fn shutdown(self) {
        self.controller.abort();
        self.server.abort();
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
    }
}

/// While this node leads, proposes what [`controller::plan`] decides.
async fn controller_loop(state: AppState, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if state.raft.current_leader().await != Some(state.id) {
            continue;
        }
        let plan = state.shared.read(|s| controller::plan(s, now_ms()));
        for cmd in plan {
            tracing::info!(command = ?cmd, "controller");
            if let Err(e) = state.write(cmd).await {
                tracing::warn!(error = %e, "controller proposal failed");
                break;
            }
        }
    }
}
