//! The HTTP admin port every Floe process serves: `/livez`, `/readyz` and
//! Prometheus `/metrics`; with an indexer, its query API too.
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
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// What the admin port answers from (metrics come from the recorder).
pub struct AdminState {
    pub ready: AtomicBool,
    /// The indexer, whose query API is served here too.
    pub indexer: Option<floe_indexer::Indexer>,
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
    PROMETHEUS.get().map(|h| h.render()).unwrap_or_default()
}

/// The process's metrics recorder, installed by [`install_metrics_recorder`].
static PROMETHEUS: OnceLock<PrometheusHandle> = OnceLock::new();

/// Upper bounds of the flush duration histogram's buckets, in seconds.
const FLUSH_SECONDS_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Installs the Prometheus recorder that every crate's `metrics` calls
/// record on; `/metrics` renders it. Called first thing in `main`: series
/// registered before it (a store pool's) would go nowhere.
pub fn install_metrics_recorder() -> anyhow::Result<()> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("floe_broker_flush_duration_seconds".into()),
            FLUSH_SECONDS_BUCKETS,
        )?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    let _ = PROMETHEUS.set(handle);
    // Which version runs, for a dashboard over a rolling upgrade.
    metrics::gauge!("floe_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    Ok(())
}
