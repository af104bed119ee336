//! One metadata node: Raft with its stores, the HTTP server, and the
//! controller loop that acts while this node is the leader.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;

use crate::api::server::{AppState, router};
use crate::clock::{lease_now_ms, now_ms};
use crate::controller;
use crate::error::MetaError;
use crate::raft::log_store::LogStore;
use crate::raft::network::Network;
use crate::raft::proposer::{Limits, Proposer};
use crate::raft::state_machine::{SharedState, StateMachine};
use crate::raft::{NodeId, Raft};

/// How often the controller looks at leases and load by default: often
/// enough that a lease that ran out (2.5 s by default) moves its partitions
/// a few tens of milliseconds later, not a large part of a second.
pub const DEFAULT_CONTROLLER_INTERVAL: Duration = Duration::from_millis(100);

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
    /// Never form a cluster alone: this node waits to be added to an
    /// existing one (`floe meta --join`), even with no `peers`.
    pub joining: bool,
    pub heartbeat_interval: Duration,
    pub election_timeout_min: Duration,
    /// Logs applied since the last snapshot that trigger a new one.
    pub snapshot_every: u64,
    /// Logs kept after a snapshot (older ones are purged).
    pub keep_logs: u64,
    /// How often the controller looks at leases and load.
    pub controller_interval: Duration,
    /// Largest command accepted for proposal, in its binary encoding
    /// (`--meta-max-command-bytes`): a bigger one is refused with
    /// `ErrorKind::TooLarge` before it reaches the log.
    pub max_command_bytes: usize,
    /// Largest HTTP request body (Raft RPCs and the API). At least twice
    /// `max_command_bytes`, so one log entry always fits in an AppendEntries.
    pub max_rpc_bytes: usize,
    /// Idempotent producer state not written for this long is dropped
    /// (`producer.id.expiration.ms`); `None` keeps it forever.
    pub producer_expiration: Option<Duration>,
    /// A node dead for longer than this is removed from the model, once no
    /// partition or shard names it (`--dead-node-retention-ms`); `None`
    /// keeps dead nodes forever.
    pub dead_node_retention: Option<Duration>,
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
            joining: false,
            heartbeat_interval: Duration::from_millis(100),
            election_timeout_min: Duration::from_millis(500),
            snapshot_every: 5000,
            keep_logs: 1000,
            controller_interval: DEFAULT_CONTROLLER_INTERVAL,
            max_command_bytes: crate::api::server::DEFAULT_MAX_COMMAND_BYTES,
            max_rpc_bytes: crate::api::server::MAX_REQUEST_BYTES,
            http: crate::http_server::HttpLimits::with_body_limit(
                crate::api::server::MAX_REQUEST_BYTES,
            ),
            producer_expiration: Some(Duration::from_millis(
                crate::state::DEFAULT_PRODUCER_EXPIRATION_MS,
            )),
            dead_node_retention: Some(Duration::from_millis(
                crate::state::DEFAULT_DEAD_NODE_RETENTION_MS,
            )),
        }
    }

    /// The advertised address: `advertise`, else the address the listener
    /// is bound to (`bound`, which differs from `listen` on port 0).
    fn advertised(&self, bound: SocketAddr) -> String {
        self.advertise.clone().unwrap_or_else(|| bound.to_string())
    }
}

/// A running metadata node.
pub struct MetaNode {
    pub id: NodeId,
    pub raft: Raft,
    pub shared: SharedState,
    pub addr: SocketAddr,
    log: LogStore,
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
        if cfg.max_command_bytes == 0 || cfg.max_command_bytes > cfg.max_rpc_bytes / 2 {
            return Err(MetaError::InvalidConfig(format!(
                "the command bound ({} bytes) must be above 0 and at most half the request body limit ({} bytes)",
                cfg.max_command_bytes, cfg.max_rpc_bytes
            )));
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
            snapshot_max_chunk_size: (cfg.max_rpc_bytes as u64 / 4).min(3 * 1024 * 1024),
            ..Default::default()
        }
        .validate()
        .map_err(|e| MetaError::InvalidConfig(e.to_string()))?;
        let raft = Raft::new(
            cfg.id,
            Arc::new(raft_config),
            Network::new(cfg.max_rpc_bytes),
            log.clone(),
            sm,
        )
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
            max_command_bytes: cfg.max_command_bytes,
            proposer: Proposer::start(raft.clone(), Limits::new(cfg.max_command_bytes)),
            reads: crate::raft::reads::Reads::start(raft.clone()),
            controller_wake: Default::default(),
            dead_node_retention_ms: cfg.dead_node_retention.map(millis),
        };
        let local = crate::api::LocalMeta::new(state.clone());
        let app = router(state.clone(), cfg.max_rpc_bytes);
        // The HTTP layer's body limit is the Raft RPC bound.
        let mut limits = cfg.http.clone();
        limits.max_body_bytes = cfg.max_rpc_bytes;
        let server = tokio::spawn(async move {
            if let Err(e) = crate::http_server::serve(listener, app, limits, "metadata").await {
                tracing::error!(error = %e, "metadata server stopped");
            }
        });

        let mut peers = cfg.peers.clone();
        if peers.is_empty() {
            peers.insert(cfg.id, cfg.advertised(addr));
        }
        let alone = !cfg.joining && peers.len() == 1 && peers.contains_key(&cfg.id);
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

        let controller = tokio::spawn(controller_loop(
            state,
            cfg.controller_interval,
            cfg.producer_expiration,
        ));
        tracing::info!(node = cfg.id, %addr, "metadata node started");
        Ok(MetaNode {
            id: cfg.id,
            raft,
            shared,
            addr,
            log,
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

    /// How many times this node has synced its Raft log to disk since it
    /// started (each a durable write: appends, votes, truncations).
    pub fn log_syncs(&self) -> u64 {
        self.log.syncs()
    }

    /// Waits until Raft stops on its own: a fatal error, such as the log
    /// store failing to write (a disk full, an fsync that failed), after
    /// which this node can neither vote nor acknowledge anything. Returns
    /// the error.
    pub async fn raft_stopped(&self) -> String {
        let mut rx = self.raft.metrics();
        loop {
            if let Err(e) = &rx.borrow_and_update().running_state {
                return e.to_string();
            }
            if rx.changed().await.is_err() {
                return "raft stopped".to_string();
            }
        }
    }

    /// Stops serving and shuts Raft down.
    pub async fn shutdown(self) {
        self.controller.abort();
        self.server.abort();
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
        // A stopped node's data dir holds all it knew committed (a cold
        // backup is taken from one, docs/running.md): the committed id
        // reported since the last durable write is written now.
        if let Err(e) = self.log.write_committed().await {
            tracing::warn!(error = %e, "the committed log id not written at shutdown");
        }
    }
}

/// A duration in milliseconds (saturating).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// While this node leads, proposes what [`controller::plan`] decides. On
/// every node, it keeps the gauge of the nodes on record.
async fn controller_loop(state: AppState, every: Duration, producer_expiration: Option<Duration>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Whether this node has renewed every lease since it became leader.
    let mut renewed = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            // A broker registered (its share is planned now, not a round
            // later) or asked to be drained (its items are handed over now).
            _ = state.controller_wake.notified() => {}
        }
        state
            .shared
            .read(|s| crate::metrics::nodes_on_record(&s.nodes));
        if state.raft.current_leader().await != Some(state.id) {
            renewed = false;
            continue;
        }
        let now = now_ms();
        // Leases, hand-overs and dead nodes on the lease clock: a step of
        // the wall clock expires no lease early (crate::clock).
        let lease_now = lease_now_ms();
        if !renewed {
            // While there was no leader no node could renew its lease: a new
            // leader starts every live node's lease afresh on its own clock
            // (as Kafka's new controller does with broker sessions) rather
            // than declare them all dead and move every partition. A node
            // that is really gone loses its items one lease later.
            let renewals = state.shared.read(|s| controller::renew_all(s, lease_now));
            let mut ok = true;
            for cmd in renewals {
                if let Err(e) = state.write(cmd).await {
                    tracing::warn!(error = %e, "renewing the leases as a new leader failed");
                    ok = false;
                    break;
                }
            }
            renewed = ok;
            if !ok {
                continue;
            }
            tracing::info!("new leader: every live node's lease renewed");
        }
        let mut plan = state.shared.read(|s| controller::plan(s, lease_now));
        if let Some(ttl) = producer_expiration {
            let ttl_ms = millis(ttl);
            if let Some(c) = state
                .shared
                .read(|s| controller::expire_producers(s, now, ttl_ms))
            {
                plan.push(c);
            }
        }
        let txn_ttl = crate::txn::DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS;
        if let Some(c) = state
            .shared
            .read(|s| controller::expire_transactional_ids(s, now, txn_ttl))
        {
            plan.push(c);
        }
        let retention = state.dead_node_retention_ms;
        if let Some(c) = state
            .shared
            .read(|s| controller::sweep_dead_nodes(s, lease_now, retention))
        {
            plan.push(c);
        }
        if !propose(&state, plan).await {
            continue;
        }
        // A broker just marked dead (here, or by a report that its address
        // refuses connections) leaves items without an owner: place them in
        // this round rather than the next.
        let orphans = state.shared.read(controller::has_orphans);
        if orphans {
            let plan = state.shared.read(|s| controller::plan(s, lease_now));
            propose(&state, plan).await;
        }
    }
}

/// A controller command for the log: the moves of a reassignment or a
/// hand-over counted, with the first few (one line at 100,000 partitions,
/// not megabytes); any other command whole.
fn controller_summary(cmd: &crate::command::Command) -> String {
    use crate::command::Command;
    const SHOWN: usize = 4;
    let (name, changes) = match cmd {
        Command::Reassign { changes } => ("Reassign", changes),
        Command::BeginHandover { changes, .. } => ("BeginHandover", changes),
        other => return format!("{other:?}"),
    };
    let first: Vec<String> = changes
        .iter()
        .take(SHOWN)
        .map(|c| format!("{c:?}"))
        .collect();
    let more = changes.len().saturating_sub(SHOWN);
    if more == 0 {
        format!("{name} [{}]", first.join(", "))
    } else {
        format!(
            "{name} of {} items [{}, … {more} more]",
            changes.len(),
            first.join(", ")
        )
    }
}

/// Proposes the controller's commands in order; false once one failed.
async fn propose(state: &AppState, plan: Vec<crate::command::Command>) -> bool {
    for cmd in plan {
        tracing::info!(command = %controller_summary(&cmd), "controller");
        tracing::debug!(command = ?cmd, "controller");
        match state.write(cmd).await {
            Ok((crate::command::Response::NodesRemoved { nodes }, _)) if !nodes.is_empty() => {
                tracing::info!(nodes = ?nodes, "dead nodes removed");
                crate::metrics::nodes_removed(nodes.len());
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "controller proposal failed");
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::HashMap;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::api::client::MetaClient;
    use crate::api::{proto, routes};

    /// The status code of `GET /readyz` at `addr`.
    async fn readyz(addr: SocketAddr) -> u16 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer);
        let status = answer.split(' ').nth(1).expect("a status line");
        status.parse().expect("a status code")
    }

    /// A node whose Raft log cannot be written (a disk full, an fsync that
    /// failed) stops its Raft: it answers `/readyz` 503 from then on, and
    /// [`MetaNode::raft_stopped`] ends with the error, for `floe meta` to
    /// exit with it instead of lingering ready with a Raft that can neither
    /// vote nor acknowledge anything.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_whose_log_cannot_be_written_is_not_ready_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let node = MetaNode::start(MetaConfig::new(1, listen, dir.path().join("node-1")))
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while readyz(node.addr).await != 200 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the node never became ready"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let client = MetaClient::new(vec![node.addr.to_string()]).unwrap();
        client
            .call::<routes::CreateTopic>(&proto::CreateTopicRequest {
                name: "before".into(),
                partitions: 1,
                configs: HashMap::new(),
            })
            .await
            .unwrap();

        node.log.fail_writes();
        // A write: its log entry cannot be appended.
        let write = tokio::spawn(async move {
            client
                .call::<routes::CreateTopic>(&proto::CreateTopicRequest {
                    name: "after".into(),
                    partitions: 1,
                    configs: HashMap::new(),
                })
                .await
        });
        let error = tokio::time::timeout(Duration::from_secs(30), node.raft_stopped())
            .await
            .expect("Raft did not stop after its log failed to write");
        // openraft's words: "when Write Logs: … No space left on device".
        assert!(
            error.contains("Write Logs") && error.contains("No space left on device"),
            "the error says the log could not be written, and why: {error}"
        );
        assert_eq!(readyz(node.addr).await, 503, "not ready once Raft stopped");
        write.abort();
        node.shutdown().await;
    }
}
