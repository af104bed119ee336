//! The HTTP admin port every Floe process serves: `/livez`, `/readyz` and
//! Prometheus `/metrics`; with an indexer, its query API too; with a proxy,
//! the web console (`/ui`, [`floe_console`]).
//!
//! Each crate records its own metrics with the `metrics` crate where the
//! event happens; this binary installs the Prometheus recorder and renders
//! it on `/metrics` (docs/configuration.md lists the names).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::roles::HttpTuning;
use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// What the admin port answers from (metrics come from the recorder).
pub struct AdminState {
    pub ready: AtomicBool,
    /// The indexer, whose query API is served here too.
    pub indexer: Option<floe_indexer::Indexer>,
    /// The proxy, whose console is served here too.
    pub console: Option<Arc<floe_console::Console>>,
}

impl AdminState {
    /// The admin state of a process without an indexer or a proxy.
    pub fn plain(ready: bool) -> Self {
        AdminState {
            ready: AtomicBool::new(ready),
            indexer: None,
            console: None,
        }
    }
}

/// The console over a proxy's context, its charts read from this
/// process's metrics. Requests with no credentials are served (as
/// `User:ANONYMOUS`) only when every Kafka listener is PLAINTEXT: where
/// clients authenticate, the console must not let anyone past them.
/// With `indexer` (an indexer in this process), the console searches
/// records by key through it.
pub fn console(
    ctx: Arc<floe_proxy::handlers::Context>,
    listeners: &[(
        tokio::net::TcpListener,
        floe_proxy::server::ListenerSecurity,
    )],
    search: Option<Arc<dyn floe_console::search::Search>>,
) -> Arc<floe_console::Console> {
    let anonymous = listeners
        .iter()
        .all(|(_, s)| s.protocol == floe_proxy::listeners::SecurityProtocol::Plaintext);
    let render = Arc::new(render_metrics);
    let console = floe_console::Console::new(ctx, render, anonymous);
    Arc::new(match search {
        Some(s) => console.with_search(s),
        None => console,
    })
}

/// Largest request body on the admin port (the query API's backfill
/// request is the only one with a body, and it is small).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Starts the admin server on `listen` with `http`'s limits; returns the
/// address it is bound to (`listen` may have port 0) and the server's task.
pub async fn serve(
    listen: SocketAddr,
    state: Arc<AdminState>,
    http: &HttpTuning,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let mut app = Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state.clone());
    if let Some(ix) = &state.indexer {
        app = app.merge(floe_indexer::service::router(ix.clone()));
    }
    if let Some(console) = &state.console {
        app = app.merge(floe_console::router(console.clone()));
    }
    let limits = http.limits(MAX_BODY_BYTES);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        if let Err(e) = floe_metadata::http_server::serve(listener, app, limits, "admin").await {
            tracing::error!(error = %e, "admin server stopped");
        }
    });
    Ok((addr, task))
}

async fn readyz(State(s): State<Arc<AdminState>>) -> (StatusCode, &'static str) {
    if s.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    }
}

/// Renders every metric the process's roles recorded (Prometheus text).
async fn metrics() -> String {
    render_metrics()
}

/// The recorder's series, then the groups' lag, which the brokers of this
/// process keep themselves so that a group gone has no series
/// (`floe_broker::render_group_lag`).
fn render_metrics() -> String {
    let mut text = PROMETHEUS.get().map(|h| h.render()).unwrap_or_default();
    text.push_str(&floe_broker::render_group_lag());
    text
}

/// The process's metrics recorder, installed by [`install_metrics_recorder`].
static PROMETHEUS: OnceLock<PrometheusHandle> = OnceLock::new();

/// Upper bounds of every timing histogram's buckets, in seconds: from half
/// a millisecond (a request answered from memory) to half a minute (a
/// flush or a transaction's markers waiting out a failing store).
const SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Installs the Prometheus recorder that every crate's `metrics` calls
/// record on; `/metrics` renders it. Called first thing in `main`: series
/// registered before it (a store pool's) would go nowhere. Every timing is
/// a histogram with the same buckets ([`SECONDS_BUCKETS`]), so that it can
/// be summed across processes and its quantiles taken by Prometheus.
pub fn install_metrics_recorder() -> anyhow::Result<()> {
    let handle = PrometheusBuilder::new()
        .set_buckets(SECONDS_BUCKETS)?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    let _ = PROMETHEUS.set(handle);
    // A metadata node serves the same text on its own port.
    floe_metadata::api::server::set_metrics_render(|| {
        PROMETHEUS.get().map(|h| h.render()).unwrap_or_default()
    });
    // Which version runs, for a dashboard over a rolling upgrade.
    metrics::gauge!("floe_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    Ok(())
}
