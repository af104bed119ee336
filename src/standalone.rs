//! `floe standalone`: every role in one process, on a local folder.
//!
//! A single-node metadata service (Raft with one voter) under
//! `DATA/meta`, the log in `DATA/store` (a local object store with fsync),
//! one broker, the Kafka listener, and an HTTP admin port with `/livez`,
//! `/readyz` and Prometheus `/metrics`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use clap::Args;
use floe_broker::{Broker, BrokerConfig, ClusterWatch};
use floe_metadata::api::client::MetaClient;
use floe_metadata::node::{MetaConfig, MetaNode};
use floe_proxy::admin::{AdminConfig, ClusterIdentity};
use floe_proxy::handlers::Context;
use floe_proxy::server::ProxyStats;
use floe_proxy::{Proxy, ProxyConfig};
use floe_storage::backend::EndpointConfig;
use floe_storage::{PoolOptions, StorePool};

#[derive(Debug, Args)]
pub struct StandaloneArgs {
    /// Where everything is kept (metadata and the log).
    #[arg(long, env = "FLOE_DATA_DIR", default_value = "./floe-data")]
    pub data_dir: PathBuf,
    /// The Kafka protocol listener.
    #[arg(long, env = "FLOE_KAFKA_LISTEN", default_value = "127.0.0.1:9092")]
    pub kafka_listen: SocketAddr,
    /// The host and port clients are told to connect to (default: the listener).
    #[arg(long, env = "FLOE_KAFKA_ADVERTISE")]
    pub kafka_advertise: Option<String>,
    /// HTTP admin port: /livez, /readyz, /metrics.
    #[arg(long, env = "FLOE_ADMIN_LISTEN", default_value = "127.0.0.1:9644")]
    pub admin_listen: SocketAddr,
    /// The metadata service's HTTP API (kept on loopback).
    #[arg(long, env = "FLOE_META_LISTEN", default_value = "127.0.0.1:9093")]
    pub meta_listen: SocketAddr,
    /// Create topics on first use (Kafka's auto.create.topics.enable).
    #[arg(long, env = "FLOE_AUTO_CREATE_TOPICS", default_value_t = true, action = clap::ArgAction::Set)]
    pub auto_create_topics: bool,
    /// Partitions of a topic created without a count (Kafka's num.partitions).
    #[arg(long, env = "FLOE_DEFAULT_PARTITIONS", default_value_t = 1)]
    pub default_partitions: u32,
    /// A flush (WAL object + metadata commit) at least this often while data waits.
    #[arg(long, env = "FLOE_FLUSH_INTERVAL_MS", default_value_t = 5)]
    pub flush_interval_ms: u64,
    /// Start a flush early once this many bytes wait.
    #[arg(long, env = "FLOE_FLUSH_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub flush_bytes: usize,
    /// How often committed WAL ranges are compacted into segments.
    #[arg(long, env = "FLOE_COMPACTION_INTERVAL_MS", default_value_t = 30_000)]
    pub compaction_interval_ms: u64,
    /// How often retention and the unreferenced-object sweeper run.
    #[arg(
        long,
        env = "FLOE_RETENTION_CHECK_INTERVAL_MS",
        default_value_t = 30_000
    )]
    pub retention_check_interval_ms: u64,
    /// How long an unreferenced object stays before it is deleted.
    #[arg(long, env = "FLOE_ORPHAN_GRACE_MS", default_value_t = 60_000)]
    pub orphan_grace_ms: u64,
    /// Largest request accepted (socket.request.max.bytes).
    #[arg(long, env = "FLOE_MAX_REQUEST_BYTES", default_value_t = 100 * 1024 * 1024)]
    pub max_request_bytes: usize,
}

struct AdminState {
    ready: AtomicBool,
    proxy: Arc<ProxyStats>,
    broker: Broker,
    pool: Arc<StorePool>,
}

pub async fn run(args: StandaloneArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create {}", args.data_dir.display()))?;
    let data = std::fs::canonicalize(&args.data_dir)?;
    let mut mcfg = MetaConfig::new(1, args.meta_listen, data.join("meta"));
    mcfg.init = true;
    let meta_node = MetaNode::start(mcfg).await.context("metadata service")?;
    let meta = Arc::new(MetaClient::new(vec![meta_node.addr.to_string()])?);

    let store_dir = data.join("store");
    std::fs::create_dir_all(&store_dir)?;
    let endpoints = EndpointConfig::parse_list(&[format!("local=file://{}", store_dir.display())])?;
    let pool = Arc::new(StorePool::open(&endpoints, PoolOptions::default()).await?);

    let view = ClusterWatch::start(meta.clone());
    let mut bcfg = BrokerConfig::new(1, args.kafka_listen.to_string());
    bcfg.flush_interval = Duration::from_millis(args.flush_interval_ms.max(1));
    bcfg.flush_bytes = args.flush_bytes;
    bcfg.compaction_interval = Duration::from_millis(args.compaction_interval_ms.max(10));
    bcfg.retention_check_interval = Duration::from_millis(args.retention_check_interval_ms.max(10));
    bcfg.orphan_grace = Duration::from_millis(args.orphan_grace_ms);
    let broker = Broker::start(bcfg, meta.clone(), pool.clone(), view.clone())
        .await
        .context("broker")?;

    let advertise = args
        .kafka_advertise
        .clone()
        .unwrap_or_else(|| args.kafka_listen.to_string());
    let (host, port) = advertise
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_string(), p.parse::<i32>().ok()?)))
        .context("--kafka-advertise must be HOST:PORT")?;
    let ctx = Arc::new(Context {
        broker: broker.clone(),
        meta: meta.clone(),
        admin: AdminConfig {
            default_partitions: args.default_partitions.max(1),
            identity: ClusterIdentity {
                cluster_id: cluster_id(&data)?,
                node_id: 1,
                host,
                port,
            },
        },
        auto_create_topics: args.auto_create_topics,
        max_fetch_wait: Duration::from_secs(30),
    });
    let proxy = Proxy::start(
        ProxyConfig {
            listen: args.kafka_listen,
            max_frame: args.max_request_bytes,
        },
        ctx,
    )
    .await
    .with_context(|| format!("cannot listen on {}", args.kafka_listen))?;

    let state = Arc::new(AdminState {
        ready: AtomicBool::new(false),
        proxy: proxy.stats.clone(),
        broker: broker.clone(),
        pool: pool.clone(),
    });
    let app = Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state.clone());
    let admin = tokio::net::TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.admin_listen))?;
    let admin_task = tokio::spawn(async move {
        if let Err(e) = axum::serve(admin, app).await {
            tracing::error!(error = %e, "admin server stopped");
        }
    });
    // Ready once the metadata answers and the view has arrived.
    let ready_view = view
        .wait_for(Duration::from_secs(30), |s| s.revision > 0)
        .await;
    if ready_view.revision == 0 {
        tracing::warn!("the cluster view has not arrived yet; serving anyway");
    }
    state.ready.store(true, Ordering::SeqCst);
    tracing::info!(kafka = %proxy.local_addr, admin = %args.admin_listen, data = %data.display(), "floe standalone ready");
    eprintln!(
        "floe standalone ready: Kafka on {}, admin on http://{}, data in {}",
        proxy.local_addr,
        args.admin_listen,
        data.display()
    );

    crate::shutdown_signal().await;
    eprintln!("floe standalone: stopping (flushing what was accepted)");
    state.ready.store(false, Ordering::SeqCst);
    proxy.stop();
    broker.shutdown().await;
    admin_task.abort();
    meta_node.shutdown().await;
    Ok(())
}

/// A stable cluster id, kept in the data folder.
fn cluster_id(data: &std::path::Path) -> anyhow::Result<String> {
    let path = data.join("cluster-id");
    if let Ok(s) = std::fs::read_to_string(&path) {
        let s = s.trim();
        if !s.is_empty() {
            return Ok(s.to_string());
        }
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    std::fs::write(&path, &id)?;
    Ok(id)
}

async fn readyz(State(s): State<Arc<AdminState>>) -> (StatusCode, &'static str) {
    if s.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    }
}

async fn metrics(State(s): State<Arc<AdminState>>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let p = &s.proxy;
    let _ = writeln!(out, "# TYPE floe_proxy_connections_total counter");
    let _ = writeln!(
        out,
        "floe_proxy_connections_total {}",
        p.connections.load(Ordering::Relaxed)
    );
    let _ = writeln!(out, "# TYPE floe_proxy_requests_total counter");
    let _ = writeln!(
        out,
        "floe_proxy_requests_total {}",
        p.requests.load(Ordering::Relaxed)
    );
    let _ = writeln!(out, "# TYPE floe_proxy_bad_requests_total counter");
    let _ = writeln!(
        out,
        "floe_proxy_bad_requests_total {}",
        p.bad_requests.load(Ordering::Relaxed)
    );
    let _ = writeln!(out, "# TYPE floe_broker_owned_partitions gauge");
    let _ = writeln!(
        out,
        "floe_broker_owned_partitions {}",
        s.broker.owned().len()
    );
    let st = s.broker.stats();
    let _ = writeln!(out, "# TYPE floe_broker_flushes_total counter");
    let _ = writeln!(out, "floe_broker_flushes_total {}", st.flushes);
    let _ = writeln!(out, "# TYPE floe_broker_flushed_bytes_total counter");
    let _ = writeln!(out, "floe_broker_flushed_bytes_total {}", st.flushed_bytes);
    let _ = writeln!(out, "# TYPE floe_store_writes_total counter");
    let _ = writeln!(out, "# TYPE floe_store_abandoned_writes_total counter");
    for e in s.pool.stats() {
        let _ = writeln!(
            out,
            "floe_store_writes_total{{endpoint=\"{}\"}} {}",
            e.id, e.written
        );
        let _ = writeln!(
            out,
            "floe_store_abandoned_writes_total{{endpoint=\"{}\"}} {}",
            e.id, e.abandoned
        );
    }
    out
}
