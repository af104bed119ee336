//! `floe indexer` (the role, and `backfill`) and `floe query`.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use floe_indexer::{Indexer, IndexerConfig};
use floe_metadata::api::MetaApi;
use floe_metadata::http::{HttpClient, HttpError};
use floe_storage::{EndpointId, StorePool};
use serde_json::Value;

use crate::admin_http::{self, AdminState};
use crate::roles::ClusterAccess;

/// Where `backfill` and `query` find the indexer's HTTP API by default (the
/// standalone admin port).
pub(crate) const DEFAULT_INDEXER: &str = "http://127.0.0.1:9644";

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct IndexerArgs {
    #[command(subcommand)]
    pub action: Option<IndexerAction>,
    #[command(flatten)]
    pub run: IndexerRunArgs,
}

#[derive(Debug, Subcommand)]
pub enum IndexerAction {
    /// Rebuild a topic's exports from the log (old files are deleted).
    Backfill(BackfillArgs),
}

#[derive(Debug, Args)]
pub struct IndexerRunArgs {
    #[command(flatten)]
    pub config: crate::roles::ConfigFileArg,
    /// The metadata service and the brokers' store pool.
    #[command(flatten)]
    pub cluster: ClusterAccess,
    /// HTTP port: /livez, /readyz, /metrics and the query API.
    #[arg(long, env = "FLOE_ADMIN_LISTEN", default_value = "127.0.0.1:9647")]
    pub admin_listen: SocketAddr,
    /// Once the HTTP port is bound, write its address here as JSON
    /// (`{"admin": …}`); it may be on port 0.
    #[arg(long, env = "FLOE_PORTS_FILE")]
    pub ports_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub tuning: IndexerTuning,
    #[command(flatten)]
    pub http: crate::roles::HttpTuning,
}

/// Indexer settings shared by `floe indexer` and `floe standalone`.
#[derive(Debug, Clone, Args)]
pub struct IndexerTuning {
    /// The store endpoint exports are written to (default: the first).
    #[arg(long, env = "FLOE_EXPORT_ENDPOINT")]
    pub export_endpoint: Option<String>,
    /// How often the indexer looks for committed data to export.
    #[arg(long, env = "FLOE_INDEXER_POLL_MS", default_value_t = 1000)]
    pub indexer_poll_ms: u64,
    /// Most log bytes per partition a query reads that are not exported yet.
    #[arg(long, env = "FLOE_QUERY_MAX_LOG_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub query_max_log_bytes: u64,
    /// How old an Iceberg table's metadata object that nothing refers to
    /// (left by a commit a crash cut short, or by a dropped snapshot) must
    /// be before it is deleted.
    #[arg(long, env = "FLOE_TABLE_ORPHAN_GRACE_MS", default_value_t = 600_000)]
    pub table_orphan_grace_ms: u64,
    /// An external SQL catalog every Iceberg table is published to as
    /// well, beside Floe's own REST catalog (the tables pyiceberg's
    /// SqlCatalog and Iceberg's JDBC catalog use): sqlite:PATH, or
    /// postgresql://user:password@host:port/database (TLS with libpq's
    /// ?sslmode=require|verify-ca|verify-full, sslrootcert=FILE,
    /// sslcert=FILE and sslkey=FILE).
    // Its value may hold a password: `--help` does not show the variable's.
    #[arg(long, env = "FLOE_TABLE_CATALOG", hide_env_values = true)]
    pub table_catalog: Option<String>,
    /// The catalog name Floe's rows carry in that catalog.
    #[arg(long, env = "FLOE_TABLE_CATALOG_NAME", default_value = floe_indexer::exporter::DEFAULT_CATALOG_NAME)]
    pub table_catalog_name: String,
}

impl IndexerTuning {
    pub fn config(&self) -> anyhow::Result<IndexerConfig> {
        if self.indexer_poll_ms == 0 {
            bail!("--indexer-poll-ms must be above 0");
        }
        Ok(IndexerConfig {
            poll: Duration::from_millis(self.indexer_poll_ms),
            endpoint: self.export_endpoint.as_deref().map(EndpointId::new),
            max_query_log_bytes: self.query_max_log_bytes,
            table_orphan_grace: Duration::from_millis(self.table_orphan_grace_ms),
            table_catalog: self.table_catalog.clone(),
            table_catalog_name: self.table_catalog_name.clone(),
            ..IndexerConfig::default()
        })
    }
}

#[derive(Debug, Args)]
pub struct BackfillArgs {
    /// The topic whose exports are rebuilt.
    #[arg(long)]
    pub topic: String,
    /// The indexer's HTTP API.
    #[arg(long, env = "FLOE_INDEXER", default_value = DEFAULT_INDEXER)]
    pub indexer: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout_s: u64,
}

#[derive(Debug, Args)]
pub struct QueryArgs {
    #[arg(long)]
    pub topic: String,
    /// Records whose key is this (UTF-8).
    #[arg(long)]
    pub key: Option<String>,
    /// From this time on (epoch ms or RFC 3339), inclusive.
    #[arg(long)]
    pub from: Option<String>,
    /// Before this time (epoch ms or RFC 3339), exclusive.
    #[arg(long)]
    pub to: Option<String>,
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// The indexer's HTTP API.
    #[arg(long, env = "FLOE_INDEXER", default_value = DEFAULT_INDEXER)]
    pub indexer: String,
}

pub async fn run(args: IndexerArgs) -> anyhow::Result<()> {
    match args.action {
        Some(IndexerAction::Backfill(b)) => backfill(b).await,
        None => run_role(args.run).await,
    }
}

/// Starts the indexer on a pool: the export loop runs until the handle is dropped.
pub fn start(
    meta: Arc<dyn MetaApi>,
    pool: Arc<StorePool>,
    tuning: &IndexerTuning,
) -> anyhow::Result<(Indexer, tokio::task::JoinHandle<()>)> {
    let ix = Indexer::new(meta, pool, tuning.config()?).context("indexer")?;
    let task = ix.start();
    Ok((ix, task))
}

async fn run_role(args: IndexerRunArgs) -> anyhow::Result<()> {
    let meta = args.cluster.meta_client()?;
    let pool = args.cluster.open_store().await?;
    let (ix, task) = start(meta, pool.clone(), &args.tuning)?;
    let state = Arc::new(AdminState {
        ready: AtomicBool::new(true),
        indexer: Some(ix),
        console: None,
    });
    let (admin_addr, admin_task) =
        admin_http::serve(args.admin_listen, state.clone(), &args.http).await?;
    crate::ports_file::BoundPorts::new()
        .with("admin", admin_addr)
        .publish("indexer", args.ports_file.as_deref())?;
    crate::announce::say(&format!(
        "floe indexer ready: query API on http://{admin_addr}"
    ));
    crate::shutdown_signal().await;
    state.ready.store(false, Ordering::SeqCst);
    task.abort();
    admin_task.abort();
    Ok(())
}

/// `http://host:port` → `host:port`.
fn authority(url: &str) -> anyhow::Result<&str> {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') {
        bail!("--indexer wants http://HOST:PORT, not {url:?}");
    }
    Ok(rest)
}

fn http_error(url: &str, e: HttpError) -> anyhow::Error {
    match e {
        HttpError::Status { status, body, .. } => {
            let msg = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["error"].as_str().map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
            anyhow::anyhow!("{url} answered {status}: {msg}")
        }
        other => anyhow::anyhow!("{other} (is the indexer or `floe standalone` running?)"),
    }
}

/// Percent-encodes a query parameter value.
pub(crate) fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(crate) async fn get_json(http: &HttpClient, base: &str, path: &str) -> anyhow::Result<Value> {
    let body = http
        .get(authority(base)?, path, Duration::from_secs(120))
        .await
        .map_err(|e| http_error(base, e))?;
    serde_json::from_slice(&body).context("the indexer's answer is not JSON")
}

/// POSTs an empty body to the indexer and reads its JSON answer (waiting up
/// to `wait`: a compaction rewrites files).
pub(crate) async fn post_json(
    http: &HttpClient,
    base: &str,
    path: &str,
    wait: Duration,
) -> anyhow::Result<Value> {
    let body = http
        .post(
            authority(base)?,
            path,
            "application/json",
            bytes::Bytes::new(),
            wait,
        )
        .await
        .map_err(|e| http_error(base, e))?;
    serde_json::from_slice(&body).context("the indexer's answer is not JSON")
}

/// Exported and target offsets summed over partitions.
fn progress(state: &Value, targets: &[(u64, i64, i64)]) -> (u64, u64) {
    let mut done = 0u64;
    let mut total = 0u64;
    for &(p, start, target) in targets {
        let exported = state["partitions"]
            .as_array()
            .and_then(|ps| ps.iter().find(|x| x["partition"].as_u64() == Some(p)))
            .and_then(|x| x["exported_offset"].as_i64())
            .unwrap_or(start);
        total += (target - start).max(0) as u64;
        done += (exported.min(target) - start).max(0) as u64;
    }
    (done, total)
}

async fn backfill(args: BackfillArgs) -> anyhow::Result<()> {
    let http = HttpClient::default();
    let path = format!("/v1/topics/{}/exports", encode(&args.topic));
    let before = get_json(&http, &args.indexer, &path).await?;
    if before["enabled"] != Value::Bool(true) {
        bail!(
            "topic {} does not have export.enabled=true; set it first (floe topic alter {} --config export.enabled=true)",
            args.topic,
            args.topic
        );
    }
    let body = http
        .post(
            authority(&args.indexer)?,
            &format!("/v1/topics/{}/backfill", encode(&args.topic)),
            "application/json",
            bytes::Bytes::new(),
            Duration::from_secs(30),
        )
        .await
        .map_err(|e| http_error(&args.indexer, e))?;
    let generation = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["generation"].as_u64())
        .unwrap_or(0);
    let state = get_json(&http, &args.indexer, &path).await?;
    let targets: Vec<(u64, i64, i64)> = state["partitions"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| {
                    Some((
                        p["partition"].as_u64()?,
                        p["log_start_offset"].as_i64()?,
                        p["high_watermark"].as_i64()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let (_, total) = progress(&state, &targets);
    let tty = std::io::stderr().is_terminal();
    let bar = if tty {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:40}] {pos}/{len} records ({per_sec}, {eta} left)",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(format!("backfill {}", args.topic));
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    eprintln!(
        "backfill of {} (generation {generation}): {total} records to export",
        args.topic
    );
    let started = Instant::now();
    let mut last_line = Instant::now();
    loop {
        let state = get_json(&http, &args.indexer, &path).await?;
        let gen_now = state["generation"].as_u64().unwrap_or(0);
        if gen_now != generation {
            bail!("another backfill (generation {gen_now}) started; this one stops");
        }
        let (done, total) = progress(&state, &targets);
        bar.set_position(done);
        if !tty && last_line.elapsed() >= Duration::from_secs(2) {
            eprintln!("backfill {}: {done}/{total} records", args.topic);
            last_line = Instant::now();
        }
        if done >= total {
            bar.finish();
            eprintln!(
                "backfill of {} done: {total} records in {:.1} s",
                args.topic,
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if started.elapsed() >= Duration::from_secs(args.timeout_s) {
            bar.abandon();
            bail!(
                "backfill not done after {} s ({done}/{total})",
                args.timeout_s
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub async fn query(args: QueryArgs) -> anyhow::Result<()> {
    let http = HttpClient::default();
    let mut params = vec![format!("limit={}", args.limit)];
    if let Some(k) = &args.key {
        params.push(format!("key={}", encode(k)));
    }
    if let Some(f) = &args.from {
        params.push(format!("from={}", encode(f)));
    }
    if let Some(t) = &args.to {
        params.push(format!("to={}", encode(t)));
    }
    let path = format!(
        "/v1/topics/{}/records?{}",
        encode(&args.topic),
        params.join("&")
    );
    let answer = get_json(&http, &args.indexer, &path).await?;
    let mut out = std::io::stdout().lock();
    let records = answer["records"].as_array().cloned().unwrap_or_default();
    for r in &records {
        writeln!(out, "{r}")?;
    }
    out.flush()?;
    let s = &answer["stats"];
    eprintln!(
        "{} records; files opened {} and read {} of {}, row groups read {} of {}, log records scanned {}",
        records.len(),
        s["files_opened"],
        s["files_read"],
        s["files"],
        s["row_groups_read"],
        s["row_groups"],
        s["log_records_scanned"]
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_parameters() {
        assert_eq!(
            authority("http://127.0.0.1:9644/").unwrap(),
            "127.0.0.1:9644"
        );
        assert_eq!(authority("127.0.0.1:1").unwrap(), "127.0.0.1:1");
        assert!(authority("http://h:1/x").is_err());
        assert_eq!(encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }

    #[test]
    fn progress_counts_offsets_up_to_the_targets() {
        let state = serde_json::json!({"partitions": [
            {"partition": 0, "exported_offset": 50},
            {"partition": 1, "exported_offset": 500},
        ]});
        assert_eq!(progress(&state, &[(0, 0, 100), (1, 10, 110)]), (150, 200));
    }
}
