//! `floe broker` and `floe proxy`: the roles of a cluster, each its own
//! process. Brokers serve the internal RPC (protobuf over HTTP/2); proxies
//! speak Kafka and route every partition to its owner.

use floe_metadata::watch::ClusterWatch;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use floe_broker::Broker;
use floe_metadata::api::client::MetaClient;
use floe_metadata::ids::BrokerId;
use floe_proxy::Proxy;
use floe_proxy::registration::{Registration, RegistrationConfig};

use crate::admin_http::{self, AdminState};
use crate::ports_file::BoundPorts;
use crate::roles::{BrokerTuning, ClusterAccess, HttpTuning, ProxyTuning};

#[derive(Debug, Args)]
pub struct BrokerArgs {
    #[command(flatten)]
    pub config: crate::roles::ConfigFileArg,
    /// This broker's id (unique in the cluster, above 0). Default: the
    /// metadata service gives a new one at every start (from 1001 on, never
    /// an earlier node's), for brokers with no stable name (a Kubernetes
    /// Deployment's pods).
    #[arg(long, env = "FLOE_BROKER_ID", value_parser = clap::value_parser!(u32).range(1..))]
    pub id: Option<u32>,
    /// Where the internal RPC listens.
    #[arg(long, env = "FLOE_RPC_LISTEN", default_value = "127.0.0.1:9192")]
    pub listen: SocketAddr,
    /// The address proxies reach the RPC at (default: the listener).
    #[arg(long, env = "FLOE_RPC_ADVERTISE")]
    pub advertise: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterAccess,
    /// HTTP admin port: /livez, /readyz, /metrics.
    #[arg(long, env = "FLOE_ADMIN_LISTEN", default_value = "127.0.0.1:9645")]
    pub admin_listen: SocketAddr,
    /// Once every listener is bound, write their addresses here as JSON
    /// (`{"rpc": …, "admin": …}`); any listener may be on port 0.
    #[arg(long, env = "FLOE_PORTS_FILE")]
    pub ports_file: Option<PathBuf>,
    /// On SIGTERM, how long the broker waits for its partitions and
    /// coordinator shards to be handed over to the other brokers before it
    /// exits (0: exit at once; they then move when its lease runs out).
    #[arg(long, env = "FLOE_DRAIN_TIMEOUT_MS", default_value_t = 15_000)]
    pub drain_timeout_ms: u64,
    #[command(flatten)]
    pub tuning: BrokerTuning,
    #[command(flatten)]
    pub http: HttpTuning,
}

#[derive(Debug, Args)]
pub struct ProxyArgs {
    #[command(flatten)]
    pub config: crate::roles::ConfigFileArg,
    /// This proxy's node id in Kafka answers (unique among brokers and
    /// proxies, above 0). Default: the metadata service gives one (from
    /// 1001 on), and a new one if the registration ever expires.
    #[arg(long, env = "FLOE_PROXY_ID")]
    pub id: Option<u32>,
    /// The proxy's lease with the metadata service: a proxy silent this long
    /// (killed, cut off) is dropped from every Metadata answer.
    #[arg(long, env = "FLOE_PROXY_LEASE_MS", default_value_t = 3_000)]
    pub lease_ms: u64,
    /// The Kafka protocol listener.
    #[arg(long, env = "FLOE_KAFKA_LISTEN", default_value = "127.0.0.1:9092")]
    pub listen: SocketAddr,
    /// The HOST:PORT clients are told to connect to (default: the listener).
    #[arg(long, env = "FLOE_KAFKA_ADVERTISE")]
    pub advertise: Option<String>,
    #[command(flatten)]
    pub listeners: crate::listener_args::ListenerArgs,
    /// Metadata node addresses (comma-separated).
    #[arg(long, env = "FLOE_META", value_delimiter = ',', required = true)]
    pub meta: Vec<String>,
    /// The cluster id reported to clients.
    #[arg(long, env = "FLOE_CLUSTER_ID", default_value = "floe")]
    pub cluster_id: String,
    /// HTTP admin port: /livez, /readyz, /metrics.
    #[arg(long, env = "FLOE_ADMIN_LISTEN", default_value = "127.0.0.1:9646")]
    pub admin_listen: SocketAddr,
    /// Once every listener is bound, write their addresses here as JSON
    /// (`{"kafka": …, "admin": …}`); any listener may be on port 0.
    #[arg(long, env = "FLOE_PORTS_FILE")]
    pub ports_file: Option<PathBuf>,
    /// On SIGTERM, how long the proxy lets its connections finish the
    /// requests they sent (new connections are refused, no new request is
    /// read) before it exits.
    #[arg(long, env = "FLOE_DRAIN_TIMEOUT_MS", default_value_t = 10_000)]
    pub drain_timeout_ms: u64,
    /// The cluster's indexer (`http://HOST:PORT`, its admin port): the
    /// console's search by key asks it, as a cluster member, once the
    /// console has checked that the person may READ the topic. Without it
    /// the console's search says to use `floe query`.
    #[arg(long, env = "FLOE_CONSOLE_INDEXER", value_name = "URL")]
    pub console_indexer: Option<String>,
    #[command(flatten)]
    pub tuning: ProxyTuning,
    #[command(flatten)]
    pub http: HttpTuning,
}

pub async fn run_broker(args: BrokerArgs) -> anyhow::Result<()> {
    let meta = args.cluster.meta_client()?;
    let pool = args.cluster.open_store().await?;
    let rpc = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let rpc_addr = rpc.local_addr()?;
    // Registered with the metadata service: the bound address when the port was 0.
    let advertise = args
        .advertise
        .clone()
        .unwrap_or_else(|| rpc_addr.to_string());
    let mut config = args
        .tuning
        .config(args.id.unwrap_or(0), advertise, pool.kinds());
    if args.id.is_none() {
        config.id = meta
            .register_new_broker(&config.advertise, config.lease)
            .await
            .context("asking the metadata service for a broker id")?
            .0;
        tracing::info!(id = config.id, "broker id given by the metadata service");
    }
    let id = config.id;
    let view = ClusterWatch::start(meta.clone());
    let broker = Broker::start(config, meta, pool.clone(), view)
        .await
        .context("broker")?;
    // The transaction coordinator writes its markers at partitions' owners.
    broker.set_marker_writer(Arc::new(broker.owner_markers()));
    let b = broker.clone();
    let rpc_limits = args.http.limits(floe_broker::rpc::MAX_BODY_BYTES);
    let rpc_task = tokio::spawn(async move {
        if let Err(e) = floe_broker::server::serve(rpc, b, rpc_limits).await {
            tracing::error!(error = %e, "RPC server stopped");
        }
    });
    let state = Arc::new(AdminState::plain(true));
    let (admin_addr, admin_task) =
        admin_http::serve(args.admin_listen, state.clone(), &args.http).await?;
    BoundPorts::new()
        .with("rpc", rpc_addr)
        .with("admin", admin_addr)
        .publish("broker", args.ports_file.as_deref())?;
    crate::announce::say(&format!("floe broker {id} ready: RPC on {rpc_addr}"));
    crate::shutdown_signal().await;
    state.ready.store(false, Ordering::SeqCst);
    // A graceful stop: hand everything over first, so that clients see a
    // short pause per partition rather than a lease's worth of errors.
    if args.drain_timeout_ms > 0 {
        broker
            .drain(Duration::from_millis(args.drain_timeout_ms))
            .await;
    }
    broker.shutdown().await;
    rpc_task.abort();
    admin_task.abort();
    Ok(())
}

pub async fn run_proxy(args: ProxyArgs) -> anyhow::Result<()> {
    let meta = Arc::new(MetaClient::new(args.meta.clone())?);
    let max_view_age = Duration::from_millis(args.tuning.max_view_age_ms.max(1));
    // Long polls short enough that a healthy view is always confirmed
    // well within its bound.
    let view = ClusterWatch::start_polling(
        meta.clone(),
        (max_view_age / 3).min(ClusterWatch::DEFAULT_POLL),
    );
    // Bound first: with port 0, clients are given the port the system picked.
    let bound = args
        .listeners
        .bind(args.listen, args.advertise.as_deref(), &view)
        .await?;
    let kafka_addr = bound.listeners[0].0.local_addr()?;
    let advertise = bound.registered_address();
    let id = args.id.map(BrokerId);
    let kafka_id = match id {
        Some(BrokerId(0)) => anyhow::bail!("--id must be above 0"),
        Some(BrokerId(n)) => i32::try_from(n).context("--id must fit a Kafka node id (i32)")?,
        None => 0,
    };
    let ctx = args.tuning.context(
        kafka_id,
        &bound,
        args.cluster_id.clone(),
        meta.clone(),
        view.clone(),
        None,
    )?;
    // Registered before serving: a client's first Metadata answer already
    // names this proxy by its id.
    let registration = Registration::start(
        meta,
        RegistrationConfig {
            id,
            advertise: advertise.clone(),
            lease: Duration::from_millis(args.lease_ms.max(300)),
        },
        ctx.me.clone(),
    )
    .await
    .context("registering the proxy with the metadata service")?;
    let probes =
        floe_proxy::peers::spawn(ctx.me.clone(), view.clone(), floe_proxy::peers::PROBE_EVERY);
    let _tls_reload = bound.tls_reload;
    let search = match &args.console_indexer {
        Some(url) => Some(Arc::new(crate::console_search::RemoteSearch::new(url)?)
            as Arc<dyn floe_console::search::Search>),
        None => None,
    };
    let console = admin_http::console(ctx.clone(), &bound.listeners, search);
    let proxy = Proxy::start_listeners(bound.listeners, args.tuning.proxy_config(kafka_addr), ctx)?;
    let state = Arc::new(AdminState {
        ready: AtomicBool::new(false),
        indexer: None,
        console: Some(console),
    });
    let (admin_addr, admin_task) =
        admin_http::serve(args.admin_listen, state.clone(), &args.http).await?;
    crate::listener_args::with_listeners(BoundPorts::new(), &proxy)
        .with("admin", admin_addr)
        .publish("proxy", args.ports_file.as_deref())?;
    // Ready once the first cluster view came, however long the metadata
    // service takes (a one-shot wait used to leave /readyz at 503 for good
    // when it answered after 30 s).
    let becomes_ready = {
        let state = state.clone();
        let view = view.clone();
        tokio::spawn(async move {
            loop {
                let v = view
                    .wait_for(Duration::from_secs(30), |s| s.revision.0 > 0)
                    .await;
                if v.revision.0 > 0 {
                    state.ready.store(true, Ordering::SeqCst);
                    return;
                }
                tracing::warn!(
                    "no cluster view from the metadata service yet; /readyz answers 503 until one comes"
                );
            }
        })
    };
    crate::announce::say(&format!(
        "floe proxy listening: Kafka on {}",
        proxy.local_addr
    ));
    crate::shutdown_signal().await;
    becomes_ready.abort();
    state.ready.store(false, Ordering::SeqCst);
    // Out of every proxy's Metadata answers first, so that clients move on;
    // then the requests already read are answered before the connections close.
    registration.leave().await;
    probes.abort();
    proxy
        .shutdown(Duration::from_millis(args.drain_timeout_ms))
        .await;
    admin_task.abort();
    Ok(())
}
