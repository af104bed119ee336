//! `floe standalone`: every role in one process, on a local folder.
//!
//! A single-node metadata service (Raft with one voter) under `DATA/meta`,
//! the log in `DATA/store` (a local object store with fsync), one broker,
//! the Kafka listener, the indexer (Parquet exports under `DATA/store/exports`),
//! and an HTTP admin port with `/livez`, `/readyz`, Prometheus `/metrics` and
//! the query API. The roles call each other directly.

use floe_metadata::watch::ClusterWatch;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use floe_broker::Broker;
use floe_metadata::node::{MetaConfig, MetaNode};
use floe_proxy::Proxy;
use floe_storage::backend::EndpointConfig;
use floe_storage::{PoolOptions, StorePool};

use crate::admin_http::{self, AdminState};
use crate::indexer_cmd::IndexerTuning;
use crate::ports_file::BoundPorts;
use crate::roles::{BrokerTuning, HttpTuning, ProxyTuning};

#[derive(Debug, Args)]
pub struct StandaloneArgs {
    #[command(flatten)]
    pub config: crate::roles::ConfigFileArg,
    /// Where everything is kept (metadata and the log).
    #[arg(long, env = "FLOE_DATA_DIR", default_value = "./floe-data")]
    pub data_dir: PathBuf,
    /// The Kafka protocol listener.
    #[arg(long, env = "FLOE_KAFKA_LISTEN", default_value = "127.0.0.1:9092")]
    pub kafka_listen: SocketAddr,
    /// The HOST:PORT clients are told to connect to (default: the listener).
    #[arg(long, env = "FLOE_KAFKA_ADVERTISE")]
    pub kafka_advertise: Option<String>,
    #[command(flatten)]
    pub listeners: crate::listener_args::ListenerArgs,
    /// HTTP admin port: /livez, /readyz, /metrics and the indexer's query API.
    #[arg(long, env = "FLOE_ADMIN_LISTEN", default_value = "127.0.0.1:9644")]
    pub admin_listen: SocketAddr,
    /// The metadata service's HTTP API (keep it on loopback).
    #[arg(long, env = "FLOE_META_LISTEN", default_value = "127.0.0.1:9093")]
    pub meta_listen: SocketAddr,
    /// Once every listener is bound, write their addresses here as JSON
    /// (`{"kafka": …, "admin": …, "meta": …}`); any listener may be on port 0.
    #[arg(long, env = "FLOE_PORTS_FILE")]
    pub ports_file: Option<PathBuf>,
    #[command(flatten)]
    pub store_io: crate::roles::StoreIo,
    #[command(flatten)]
    pub meta: crate::roles::MetaTuning,
    #[command(flatten)]
    pub broker: BrokerTuning,
    #[command(flatten)]
    pub proxy: ProxyTuning,
    #[command(flatten)]
    pub indexer: IndexerTuning,
    #[command(flatten)]
    pub http: HttpTuning,
}

pub async fn run(args: StandaloneArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create {}", args.data_dir.display()))?;
    let data = std::fs::canonicalize(&args.data_dir)?;
    let mut mcfg = MetaConfig::new(1, args.meta_listen, data.join("meta"));
    mcfg.init = true;
    args.meta.apply(&mut mcfg);
    mcfg.producer_expiration =
        crate::roles::producer_expiration(args.broker.producer_id_expiration_ms);
    mcfg.http = args.http.limits(mcfg.max_rpc_bytes);
    let meta_node = MetaNode::start(mcfg).await.context("metadata service")?;
    // The roles of this process call the metadata node directly; its HTTP
    // API still serves `floe meta`, `floe topic` and other processes.
    let meta = meta_node.local_api();

    let store_dir = data.join("store");
    std::fs::create_dir_all(&store_dir)?;
    let endpoints = EndpointConfig::parse_list(&[format!("local=file://{}", store_dir.display())])?;
    let opts = PoolOptions {
        direct_io: args.store_io.direct_io,
        ..PoolOptions::default()
    };
    let pool = Arc::new(StorePool::open(&endpoints, opts).await?);

    // Bound first: with port 0, the address the broker and clients are
    // given is the one the system picked.
    let view = ClusterWatch::start(meta.clone());
    let bound = args
        .listeners
        .bind(args.kafka_listen, args.kafka_advertise.as_deref(), &view)
        .await?;
    let kafka_addr = bound.listeners[0].0.local_addr()?;
    let bcfg = args.broker.config(1, kafka_addr.to_string(), pool.kinds());
    let broker = Broker::start(bcfg, meta.clone(), pool.clone(), view.clone())
        .await
        .context("broker")?;
    // The transaction coordinator writes its markers at partitions' owners.
    broker.set_marker_writer(Arc::new(broker.owner_markers()));

    let ctx = args.proxy.context(
        1,
        &bound,
        cluster_id(&data)?,
        meta.clone(),
        view.clone(),
        Some(broker.clone()),
    )?;
    let _tls_reload = bound.tls_reload;
    let (indexer, indexer_task) =
        crate::indexer_cmd::start(meta.clone(), pool.clone(), &args.indexer)?;
    let console = admin_http::console(
        ctx.clone(),
        &bound.listeners,
        Some(Arc::new(crate::console_search::IndexerSearch(
            indexer.clone(),
        ))),
    );
    let proxy = Proxy::start_listeners(bound.listeners, args.proxy.proxy_config(kafka_addr), ctx)?;
    let state = Arc::new(AdminState {
        ready: AtomicBool::new(false),
        indexer: Some(indexer),
        console: Some(console),
    });
    let (admin_addr, admin_task) =
        admin_http::serve(args.admin_listen, state.clone(), &args.http).await?;
    crate::listener_args::with_listeners(BoundPorts::new(), &proxy)
        .with("admin", admin_addr)
        .with("meta", meta_node.addr)
        .publish("standalone", args.ports_file.as_deref())?;
    // Ready once the metadata answers and the view has arrived.
    let ready_view = view
        .wait_for(Duration::from_secs(30), |s| s.revision.0 > 0)
        .await;
    if ready_view.revision.0 == 0 {
        tracing::warn!("the cluster view has not arrived yet; serving anyway");
    }
    // And once the broker serves every coordinator shard, so that group
    // clients find a coordinator at once (bounded: serve anyway after 10 s).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let shards = view.current().shards.len();
        if shards > 0 && broker.owned_shards().len() == shards {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            tracing::warn!("coordinator shards not all served yet; serving anyway");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    state.ready.store(true, Ordering::SeqCst);
    crate::announce::say(&format!(
        "floe standalone ready: Kafka on {}, admin on http://{}, data in {}",
        proxy.local_addr,
        admin_addr,
        data.display()
    ));

    // Its metadata Raft stopped on a fatal error (its log could not be
    // written: a disk full, an fsync that failed): nothing can be committed
    // any more, so it exits with the error instead of lingering ready.
    let fatal = tokio::select! {
        () = crate::shutdown_signal() => None,
        e = meta_node.raft_stopped() => Some(e),
    };
    if let Some(e) = &fatal {
        tracing::error!(error = %e, "the metadata Raft stopped on a fatal error (its log could not be written: disk full, fsync failed?); exiting");
    }
    crate::announce::say("floe standalone: stopping (flushing what was accepted)");
    state.ready.store(false, Ordering::SeqCst);
    proxy.stop();
    indexer_task.abort();
    broker.shutdown().await;
    admin_task.abort();
    meta_node.shutdown().await;
    match fatal {
        Some(e) => anyhow::bail!("the metadata Raft stopped: {e}"),
        None => Ok(()),
    }
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
