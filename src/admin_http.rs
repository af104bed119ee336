//! The HTTP admin port every Floe process serves: `/livez`, `/readyz` and
//! Prometheus `/metrics`; with an indexer, its query API too.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use floe_broker::Broker;
use floe_proxy::server::ProxyStats;
use floe_storage::StorePool;

/// What the admin port reports on.
pub struct AdminState {
    pub ready: AtomicBool,
    pub proxy: Option<Arc<ProxyStats>>,
    pub broker: Option<Broker>,
    pub pool: Option<Arc<StorePool>>,
    /// The indexer, whose query API is served here too.
    pub indexer: Option<floe_indexer::Indexer>,
}

/// Starts the admin server on `listen`.
pub async fn serve(
    listen: SocketAddr,
    state: Arc<AdminState>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let mut app = Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state.clone());
    if let Some(ix) = &state.indexer {
        app = app.merge(floe_indexer::service::router(ix.clone()));
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "admin server stopped");
        }
    }))
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
    fn metric(out: &mut String, name: &str, kind: &str, value: u64) {
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "{name} {value}");
    }
    if let Some(p) = &s.proxy {
        metric(
            &mut out,
            "floe_proxy_connections_total",
            "counter",
            p.connections.load(Ordering::Relaxed),
        );
        metric(
            &mut out,
            "floe_proxy_requests_total",
            "counter",
            p.requests.load(Ordering::Relaxed),
        );
        metric(
            &mut out,
            "floe_proxy_bad_requests_total",
            "counter",
            p.bad_requests.load(Ordering::Relaxed),
        );
    }
    if let Some(b) = &s.broker {
        let st = b.stats();
        metric(
            &mut out,
            "floe_broker_owned_partitions",
            "gauge",
            b.owned().len() as u64,
        );
        metric(&mut out, "floe_broker_flushes_total", "counter", st.flushes);
        let shards = b.owned_shards();
        metric(
            &mut out,
            "floe_broker_owned_shards",
            "gauge",
            shards.len() as u64,
        );
        let _ = writeln!(out, "# TYPE floe_broker_owned_shard gauge");
        for shard in shards {
            let _ = writeln!(out, "floe_broker_owned_shard{{shard=\"{shard}\"}} 1");
        }
        metric(
            &mut out,
            "floe_broker_flushed_bytes_total",
            "counter",
            st.flushed_bytes,
        );
    }
    if let Some(pool) = &s.pool {
        let _ = writeln!(out, "# TYPE floe_store_writes_total counter");
        let _ = writeln!(out, "# TYPE floe_store_abandoned_writes_total counter");
        for e in pool.stats() {
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
    }
    if let Some(ix) = &s.indexer {
        let st = ix.stats();
        for (name, v) in [
            ("floe_indexer_files_written_total", &st.files_written),
            ("floe_indexer_rows_written_total", &st.rows_written),
            ("floe_indexer_log_bytes_read_total", &st.log_bytes_read),
            (
                "floe_indexer_parquet_bytes_written_total",
                &st.parquet_bytes_written,
            ),
            ("floe_indexer_files_deleted_total", &st.files_deleted),
            ("floe_indexer_errors_total", &st.errors),
        ] {
            metric(&mut out, name, "counter", v.load(Ordering::Relaxed));
        }
    }
    out
}
