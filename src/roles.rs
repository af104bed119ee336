//! Settings shared by the commands that run a role (`floe standalone`,
//! `floe broker`, `floe proxy`, `floe indexer`), and their wiring.

use floe_metadata::watch::ClusterWatch;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use floe_broker::{Broker, BrokerConfig};
use floe_metadata::api::MetaApi;
use floe_metadata::api::client::MetaClient;
use floe_proxy::admin::{AdminConfig, ClusterIdentity};
use floe_proxy::handlers::{Context, FetchLimits};
use floe_storage::backend::EndpointConfig;
use floe_storage::{PoolOptions, StorePool};

/// Where a broker or an indexer finds the cluster: the metadata service
/// and the store pool the log lives in.
#[derive(Debug, Clone, Args)]
pub struct ClusterAccess {
    /// Metadata node addresses (comma-separated).
    #[arg(long, env = "FLOE_META", value_delimiter = ',', required = true)]
    pub meta: Vec<String>,
    /// Store endpoints, `id=URL` (repeat or comma-separate for a pool): file://DIR, s3://BUCKET/PREFIX?…
    #[arg(
        long = "store",
        env = "FLOE_STORE",
        value_delimiter = ',',
        required = true
    )]
    pub stores: Vec<String>,
    /// Deadline of one store write attempt; past it the bytes go to a new object.
    #[arg(long, env = "FLOE_STORE_WRITE_TIMEOUT_MS", default_value_t = 10_000)]
    pub write_timeout_ms: u64,
}

impl ClusterAccess {
    /// A client of the metadata service (it connects on first use).
    pub fn meta_client(&self) -> anyhow::Result<Arc<dyn MetaApi>> {
        Ok(Arc::new(MetaClient::new(self.meta.clone())?))
    }

    /// Opens the store pool (checks every endpoint's URL and options).
    pub async fn open_store(&self) -> anyhow::Result<Arc<StorePool>> {
        Ok(Arc::new(
            open_store(&self.stores, self.write_timeout_ms).await?,
        ))
    }
}

/// Opens a pool over `stores` (`URL` or `id=URL` each) with the given write
/// deadline; the other pool settings keep their defaults.
pub async fn open_store(stores: &[String], write_timeout_ms: u64) -> anyhow::Result<StorePool> {
    if write_timeout_ms == 0 {
        bail!("--write-timeout-ms must be above 0");
    }
    let endpoints = EndpointConfig::parse_list(stores)?;
    let opts = PoolOptions {
        write_timeout: Duration::from_millis(write_timeout_ms),
        ..PoolOptions::default()
    };
    Ok(StorePool::open(&endpoints, opts).await?)
}

/// How a broker flushes, compacts and cleans up.
#[derive(Debug, Clone, Args)]
pub struct BrokerTuning {
    /// A flush (WAL object + metadata commit) at least this often while data waits.
    #[arg(long, env = "FLOE_FLUSH_INTERVAL_MS", default_value_t = 5)]
    pub flush_interval_ms: u64,
    /// Start a flush early once this many bytes wait.
    #[arg(long, env = "FLOE_FLUSH_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub flush_bytes: usize,
    /// The broker's lease with the metadata service; a broker silent this long loses its partitions.
    #[arg(long, env = "FLOE_LEASE_MS", default_value_t = 10_000)]
    pub lease_ms: u64,
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
    /// How long the first rebalance of a new group waits for more members
    /// (Kafka's group.initial.rebalance.delay.ms).
    #[arg(
        long,
        env = "FLOE_GROUP_INITIAL_REBALANCE_DELAY_MS",
        default_value_t = 3000
    )]
    pub group_initial_rebalance_delay_ms: u64,
    /// Block cache for reads from the object store (bytes).
    #[arg(long, env = "FLOE_CACHE_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub cache_bytes: u64,
}

impl BrokerTuning {
    pub fn config(&self, id: u32, advertise: String) -> BrokerConfig {
        let mut c = BrokerConfig::new(id, advertise);
        c.flush_interval = Duration::from_millis(self.flush_interval_ms.max(1));
        c.flush_bytes = self.flush_bytes;
        c.lease = Duration::from_millis(self.lease_ms.max(300));
        c.compaction_interval = Duration::from_millis(self.compaction_interval_ms.max(10));
        c.retention_check_interval =
            Duration::from_millis(self.retention_check_interval_ms.max(10));
        c.orphan_grace = Duration::from_millis(self.orphan_grace_ms);
        c.cache_bytes = self.cache_bytes;
        c.group.initial_rebalance_delay =
            Duration::from_millis(self.group_initial_rebalance_delay_ms);
        c
    }
}

/// How the Kafka listener behaves.
#[derive(Debug, Clone, Args)]
pub struct ProxyTuning {
    /// Create topics on first use (Kafka's auto.create.topics.enable).
    #[arg(long, env = "FLOE_AUTO_CREATE_TOPICS", default_value_t = true, action = clap::ArgAction::Set)]
    pub auto_create_topics: bool,
    /// Partitions of a topic created without a count (Kafka's num.partitions).
    #[arg(long, env = "FLOE_DEFAULT_PARTITIONS", default_value_t = 1)]
    pub default_partitions: u32,
    /// Largest request accepted (socket.request.max.bytes).
    #[arg(long, env = "FLOE_MAX_REQUEST_BYTES", default_value_t = 100 * 1024 * 1024)]
    pub max_request_bytes: usize,
    /// Most record bytes in one Fetch answer, whatever the client's
    /// max_bytes (Kafka's broker fetch.max.bytes); the first partition with
    /// data still gets one whole batch.
    #[arg(long, env = "FLOE_FETCH_MAX_BYTES", default_value_t = FetchLimits::DEFAULT_MAX_BYTES)]
    pub fetch_max_bytes: usize,
    /// Most record bytes of one partition in one Fetch answer, whatever the
    /// client's partition_max_bytes (a larger single batch still comes whole).
    #[arg(
        long,
        env = "FLOE_FETCH_MAX_PARTITION_BYTES",
        default_value_t = FetchLimits::DEFAULT_MAX_PARTITION_BYTES
    )]
    pub fetch_max_partition_bytes: usize,
}

impl ProxyTuning {
    /// The proxy's request context. `advertise` is the HOST:PORT clients are
    /// given as the one broker; `cluster_id` identifies the cluster.
    pub fn context(
        &self,
        node_id: i32,
        advertise: &str,
        cluster_id: String,
        meta: Arc<dyn MetaApi>,
        view: ClusterWatch,
        local: Option<Broker>,
    ) -> anyhow::Result<Arc<Context>> {
        let (host, port) = advertise
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_string(), p.parse::<i32>().ok()?)))
            .with_context(|| format!("the advertised address {advertise:?} must be HOST:PORT"))?;
        Ok(Arc::new(Context {
            local,
            view,
            remotes: Default::default(),
            meta,
            admin: AdminConfig {
                default_partitions: self.default_partitions.max(1),
                identity: ClusterIdentity {
                    cluster_id,
                    node_id,
                    host,
                    port,
                },
            },
            auto_create_topics: self.auto_create_topics,
            max_fetch_wait: Duration::from_secs(30),
            fetch_limits: FetchLimits {
                max_bytes: self.fetch_max_bytes.max(1),
                max_partition_bytes: self.fetch_max_partition_bytes.max(1),
            },
            producer_ids: Default::default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cmd {
        #[command(flatten)]
        cluster: ClusterAccess,
    }

    #[tokio::test]
    async fn cluster_access_opens_the_pool_with_the_write_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("a=file://{}", dir.path().display());
        let cmd = Cmd::try_parse_from([
            "x",
            "--meta",
            "127.0.0.1:1,127.0.0.1:2",
            "--store",
            &url,
            "--write-timeout-ms",
            "2500",
        ])
        .unwrap();
        assert_eq!(cmd.cluster.meta, ["127.0.0.1:1", "127.0.0.1:2"]);
        let pool = cmd.cluster.open_store().await.unwrap();
        assert_eq!(pool.options().write_timeout, Duration::from_millis(2500));
        assert!(cmd.cluster.meta_client().is_ok());
    }

    #[tokio::test]
    async fn a_zero_write_deadline_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let err = open_store(&[url], 0).await.unwrap_err();
        assert!(err.to_string().contains("--write-timeout-ms"), "{err}");
    }

    #[test]
    fn meta_and_store_are_required() {
        // Not from the environment of whoever runs the tests.
        if std::env::var_os("FLOE_META").is_some() || std::env::var_os("FLOE_STORE").is_some() {
            return;
        }
        let err = Cmd::try_parse_from(["x", "--meta", "127.0.0.1:1"]).unwrap_err();
        assert!(err.to_string().contains("--store"), "{err}");
        let err = Cmd::try_parse_from(["x", "--store", "file:///tmp"]).unwrap_err();
        assert!(err.to_string().contains("--meta"), "{err}");
    }
}
