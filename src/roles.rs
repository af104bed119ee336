//! Settings shared by the commands that run a role (`floe standalone`,
//! `floe broker`, `floe proxy`, `floe indexer`), and their wiring.

use floe_metadata::watch::ClusterWatch;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use floe_broker::config::FlushPolicy;
use floe_broker::{Broker, BrokerConfig};
use floe_metadata::api::MetaApi;
use floe_metadata::api::client::MetaClient;
use floe_metadata::http_server::HttpLimits;
use floe_proxy::admin::{AdminConfig, ClusterIdentity};
use floe_proxy::handlers::{Context, FetchLimits};
use floe_proxy::nodes::SelfNode;
use floe_proxy::{ListenerLimits, ProxyConfig};
use floe_storage::backend::EndpointConfig;
use floe_storage::{PoolOptions, StoreKind, StorePool};

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
    #[command(flatten)]
    pub tuning: StoreTuning,
    #[command(flatten)]
    pub io: StoreIo,
}

/// How the store pool times its writes (see docs/storage.md, "Failover").
#[derive(Debug, Clone, Args)]
pub struct StoreTuning {
    /// Hard deadline of one store write attempt; past it the attempt is
    /// abandoned (it was hedged to a new object long before, at its
    /// adaptive deadline).
    #[arg(long, env = "FLOE_STORE_WRITE_TIMEOUT_MS", default_value_t = 10_000)]
    pub write_timeout_ms: u64,
    /// Floor of the adaptive write deadline (4 × the p90 of the endpoint's
    /// recent writes), past which the bytes are also written as a new
    /// object on another endpoint.
    #[arg(long, env = "FLOE_STORE_WRITE_DEADLINE_MIN_MS", default_value_t = 250)]
    pub store_write_deadline_min_ms: u64,
    /// Ceiling of the adaptive write deadline (before the size allowance):
    /// a hung endpoint costs a write at most this, plus the allowance.
    #[arg(
        long,
        env = "FLOE_STORE_WRITE_DEADLINE_MAX_MS",
        default_value_t = 1_000
    )]
    pub store_write_deadline_max_ms: u64,
    /// Added to the adaptive write deadline per MiB written, so that a large
    /// object is not hedged for being large.
    #[arg(
        long,
        env = "FLOE_STORE_WRITE_DEADLINE_PER_MIB_MS",
        default_value_t = 64
    )]
    pub store_write_deadline_per_mib_ms: u64,
    /// How long new writes skip an endpoint that failed a write or was too
    /// slow, before a probe (write, read back, delete) decides whether it
    /// takes writes again.
    #[arg(long, env = "FLOE_STORE_BENCH_MS", default_value_t = 10_000)]
    pub store_bench_ms: u64,
}

impl Default for StoreTuning {
    fn default() -> Self {
        let d = floe_storage::DeadlinePolicy::default();
        let o = PoolOptions::default();
        Self {
            write_timeout_ms: o.write_timeout.as_millis() as u64,
            store_write_deadline_min_ms: d.min.as_millis() as u64,
            store_write_deadline_max_ms: d.max.as_millis() as u64,
            store_write_deadline_per_mib_ms: d.per_mib.as_millis() as u64,
            store_bench_ms: o.bench_cooldown.as_millis() as u64,
        }
    }
}

impl StoreTuning {
    /// The pool options these flags give (the others keep their defaults).
    pub fn pool_options(&self, direct_io: bool) -> anyhow::Result<PoolOptions> {
        if self.write_timeout_ms == 0 {
            bail!("--write-timeout-ms must be above 0");
        }
        if self.store_write_deadline_min_ms == 0
            || self.store_write_deadline_min_ms > self.store_write_deadline_max_ms
        {
            bail!(
                "--store-write-deadline-min-ms must be above 0 and at most --store-write-deadline-max-ms"
            );
        }
        let ms = Duration::from_millis;
        let defaults = PoolOptions::default();
        Ok(PoolOptions {
            write_timeout: ms(self.write_timeout_ms),
            deadline: floe_storage::DeadlinePolicy {
                min: ms(self.store_write_deadline_min_ms),
                max: ms(self.store_write_deadline_max_ms),
                per_mib: ms(self.store_write_deadline_per_mib_ms),
                ..defaults.deadline
            },
            bench_cooldown: ms(self.store_bench_ms),
            direct_io,
            ..defaults
        })
    }
}

/// How a local-folder store uses the page cache.
#[derive(Debug, Clone, Copy, Args)]
pub struct StoreIo {
    /// Large writes and range reads of a local-folder store bypass the page
    /// cache (O_DIRECT): a produce costs the broker less CPU (no copy into
    /// the page cache). `false` keeps written data in the page cache, for
    /// catch-up reads of recent data beyond the broker's block cache.
    #[arg(
        long = "store-direct-io",
        env = "FLOE_STORE_DIRECT_IO",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub direct_io: bool,
}

impl ClusterAccess {
    /// A client of the metadata service (it connects on first use).
    pub fn meta_client(&self) -> anyhow::Result<Arc<dyn MetaApi>> {
        Ok(Arc::new(MetaClient::new(self.meta.clone())?))
    }

    /// Opens the store pool (checks every endpoint's URL and options).
    pub async fn open_store(&self) -> anyhow::Result<Arc<StorePool>> {
        Ok(Arc::new(
            open_store(&self.stores, &self.tuning, self.io.direct_io).await?,
        ))
    }
}

/// Opens a pool over `stores` (`URL` or `id=URL` each) with the given write
/// deadlines and page-cache use; the other pool settings keep their defaults.
pub async fn open_store(
    stores: &[String],
    tuning: &StoreTuning,
    direct_io: bool,
) -> anyhow::Result<StorePool> {
    let opts = tuning.pool_options(direct_io)?;
    let endpoints = EndpointConfig::parse_list(stores)?;
    Ok(StorePool::open(&endpoints, opts).await?)
}

/// How a broker flushes, compacts and cleans up.
#[derive(Debug, Clone, Args)]
pub struct BrokerTuning {
    /// A flush (WAL object + metadata commit) at least this often while data
    /// waits. Default by the kind of store: 5 on a local folder, 250 on S3
    /// or HDFS.
    #[arg(long, env = "FLOE_FLUSH_INTERVAL_MS")]
    pub flush_interval_ms: Option<u64>,
    /// Start a flush at once when this many bytes wait. Default by the kind
    /// of store: 4 MiB on a local folder, 8 MiB on S3 or HDFS.
    #[arg(long, env = "FLOE_FLUSH_BYTES")]
    pub flush_bytes: Option<usize>,
    /// Whether the flush interval is also the least time between two
    /// flushes (unless --flush-bytes wait), which bounds the PUT rate.
    /// Default by the kind of store: false on a local folder, true on S3 or
    /// HDFS.
    #[arg(long, env = "FLOE_FLUSH_PACED", action = clap::ArgAction::Set)]
    pub flush_paced: Option<bool>,
    /// The broker's lease with the metadata service; a broker silent this long loses its partitions.
    #[arg(long, env = "FLOE_LEASE_MS", default_value_t = floe_broker::config::DEFAULT_LEASE_MS)]
    pub lease_ms: u64,
    /// How often compaction looks at every partition: WAL ranges that are
    /// due become segments, runs of small segments are merged.
    #[arg(long, env = "FLOE_COMPACTION_INTERVAL_MS", default_value_t = 30_000)]
    pub compaction_interval_ms: u64,
    /// Compact a partition's WAL ranges into a segment once it has this
    /// many (each flush that writes to a partition adds one index entry to
    /// the metadata).
    #[arg(
        long,
        env = "FLOE_WAL_COMPACTION_ENTRIES",
        default_value_t = floe_broker::config::DEFAULT_WAL_COMPACTION_ENTRIES
    )]
    pub wal_compaction_entries: usize,
    /// Compact a partition's WAL ranges once the oldest is this old,
    /// however few (how long a rarely written partition keeps a WAL object
    /// in the store).
    #[arg(
        long,
        env = "FLOE_WAL_COMPACTION_AGE_MS",
        default_value_t = floe_broker::config::DEFAULT_WAL_COMPACTION_AGE_MS
    )]
    pub wal_compaction_age_ms: u64,
    /// Merge small segments in tiers of this factor (a run of this many
    /// segments of one size tier becomes one, within segment.bytes and
    /// segment.ms); 0 or 1 never merges.
    #[arg(
        long,
        env = "FLOE_SEGMENT_MERGE_FANOUT",
        default_value_t = floe_broker::config::DEFAULT_SEGMENT_MERGE_FANOUT
    )]
    pub segment_merge_fanout: usize,
    /// Partitions a broker compacts (and merges) at once.
    #[arg(
        long,
        env = "FLOE_COMPACTION_CONCURRENCY",
        default_value_t = floe_broker::config::DEFAULT_COMPACTION_CONCURRENCY
    )]
    pub compaction_concurrency: usize,
    /// Memory for the log cleaner's key map (latest offset per key of a
    /// compacted partition); a partition with more keys is cleaned in
    /// several passes.
    #[arg(long, env = "FLOE_CLEANER_MAP_BYTES", default_value_t = floe_broker::config::DEFAULT_CLEANER_MAP_BYTES)]
    pub cleaner_map_bytes: u64,
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
    /// How often the broker serving coordinator shard 0 lists the store
    /// (wal/ and segments/) for objects the metadata never knew (late
    /// hedged writes, uncommitted flushes, segments a crash kept from being
    /// swapped in) and deletes those older than --orphan-scan-age-ms; 0: never.
    #[arg(
        long,
        env = "FLOE_ORPHAN_SCAN_INTERVAL_MS",
        default_value_t = 3_600_000
    )]
    pub orphan_scan_interval_ms: u64,
    /// An object the metadata does not know is deleted by the orphan scan
    /// only once it is this old (by the store's last-modified time): far
    /// longer than a write and its commit take.
    #[arg(long, env = "FLOE_ORPHAN_SCAN_AGE_MS", default_value_t = 3_600_000)]
    pub orphan_scan_age_ms: u64,
    /// How often the broker computes the lag of the consumer groups it
    /// coordinates (floe_broker_group_lag and floe_broker_group_lag_max on
    /// /metrics); 0: never.
    #[arg(long, env = "FLOE_GROUP_LAG_INTERVAL_MS", default_value_t = 30_000)]
    pub group_lag_interval_ms: u64,
    /// How long the first rebalance of a new group waits for more members
    /// (Kafka's group.initial.rebalance.delay.ms).
    #[arg(
        long,
        env = "FLOE_GROUP_INITIAL_REBALANCE_DELAY_MS",
        default_value_t = 3000
    )]
    pub group_initial_rebalance_delay_ms: u64,
    /// A member of a consumer group (the KIP-848 protocol) silent this long
    /// is removed (Kafka's group.consumer.session.timeout.ms).
    #[arg(
        long,
        env = "FLOE_CONSUMER_GROUP_SESSION_TIMEOUT_MS",
        default_value_t = 45_000
    )]
    pub consumer_group_session_timeout_ms: u64,
    /// The heartbeat interval told to consumer group members (Kafka's
    /// group.consumer.heartbeat.interval.ms).
    #[arg(
        long,
        env = "FLOE_CONSUMER_GROUP_HEARTBEAT_INTERVAL_MS",
        default_value_t = 5_000
    )]
    pub consumer_group_heartbeat_interval_ms: u32,
    /// Block cache for reads from the object store (bytes).
    #[arg(long, env = "FLOE_CACHE_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub cache_bytes: u64,
    /// Largest metadata string of one committed offset (Kafka's
    /// offset.metadata.max.bytes); larger: OFFSET_METADATA_TOO_LARGE.
    #[arg(long, env = "FLOE_OFFSET_METADATA_MAX_BYTES", default_value_t = 4096)]
    pub offset_metadata_max_bytes: usize,
    /// Idempotent producer state of a producer that has not written to a
    /// partition for this long is dropped (Kafka's producer.id.expiration.ms;
    /// 0: never). `floe standalone` uses it for the metadata too.
    #[arg(
        long,
        env = "FLOE_PRODUCER_ID_EXPIRATION_MS",
        default_value_t = 86_400_000
    )]
    pub producer_id_expiration_ms: u64,
    /// Bytes sequenced but not yet committed, over which a produce waits
    /// (up to its timeout_ms) for room and then answers REQUEST_TIMED_OUT.
    #[arg(long, env = "FLOE_MAX_UNFLUSHED_BYTES", default_value_t = floe_broker::config::DEFAULT_MAX_UNFLUSHED_BYTES)]
    pub max_unflushed_bytes: usize,
    /// The most bytes one WAL object carries; the rest goes into the next.
    #[arg(long, env = "FLOE_MAX_WAL_OBJECT_BYTES", default_value_t = floe_broker::config::DEFAULT_MAX_WAL_OBJECT_BYTES)]
    pub max_wal_object_bytes: usize,
    /// Flushes (WAL object write + metadata commit) in flight at once;
    /// beyond the first, one starts only when --flush-bytes wait; commits
    /// keep their order. 1: one flush at a time. Default by the kind of
    /// store: 1 on a local folder, 4 on S3 or HDFS.
    #[arg(long, env = "FLOE_MAX_FLUSHES_IN_FLIGHT")]
    pub max_flushes_in_flight: Option<usize>,
    /// For this long after the broker takes a partition over, writes to it
    /// are flushed at once, whatever the pacing (their producers already
    /// waited for the take-over); 0 (the default) turns it off. On S3 it
    /// made rolling restarts pause longer, not shorter (see
    /// docs/benchmarks.md).
    #[arg(long, env = "FLOE_FLUSH_AFTER_TAKEOVER_MS")]
    pub flush_after_takeover_ms: Option<u64>,
    /// The longest transaction.timeout.ms a transactional producer may ask
    /// for (Kafka's transaction.max.timeout.ms); above it InitProducerId
    /// answers INVALID_TRANSACTION_TIMEOUT.
    #[arg(long, env = "FLOE_TRANSACTION_MAX_TIMEOUT_MS", default_value_t = floe_metadata::txn::DEFAULT_TRANSACTION_MAX_TIMEOUT_MS)]
    pub transaction_max_timeout_ms: u32,
    /// Delayed records each partition of a delayed topic
    /// (floe.delayed.delivery) keeps in memory at most, the earliest due;
    /// the others are found again by reading the partition's log from its
    /// cursor when the kept ones run out or one of them comes due.
    #[arg(long, env = "FLOE_DELAYED_MAX_PENDING", default_value_t = floe_broker::delayed::DEFAULT_MAX_PENDING)]
    pub delayed_max_pending: usize,
    /// Delayed share-group records each share-partition keeps in its state
    /// in the metadata service at most (at least 4); when three quarters
    /// of them are not due yet, all but the soonest quarter are written to
    /// a timer bucket in the object store and read back when due.
    #[arg(long, env = "FLOE_SHARE_MAX_PARKED", default_value_t = floe_broker::share::DEFAULT_MAX_PARKED)]
    pub share_max_parked: u32,
}

/// Settings of the metadata service that `floe meta` and `floe
/// standalone` share: its size bounds, and how long it keeps dead nodes.
#[derive(Debug, Clone, Args)]
pub struct MetaTuning {
    /// Largest metadata command, encoded; a bigger one (a huge CreateTopics
    /// or offset commit) is refused before it reaches the Raft log.
    #[arg(long, env = "FLOE_META_MAX_COMMAND_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub meta_max_command_bytes: usize,
    /// Largest HTTP request body of the metadata service (Raft RPCs and the
    /// API); at least twice --meta-max-command-bytes.
    #[arg(long, env = "FLOE_META_MAX_REQUEST_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub meta_max_request_bytes: usize,
    /// How long a dead broker or proxy stays on record (listed by `floe
    /// cluster nodes`) before the metadata removes it; a node is removed
    /// only once no partition or coordinator shard names it. Its id is never
    /// given again. 0: dead nodes are kept forever.
    #[arg(
        long,
        env = "FLOE_DEAD_NODE_RETENTION_MS",
        default_value_t = floe_metadata::state::DEFAULT_DEAD_NODE_RETENTION_MS
    )]
    pub dead_node_retention_ms: u64,
}

impl MetaTuning {
    pub fn apply(&self, c: &mut floe_metadata::node::MetaConfig) {
        c.max_command_bytes = self.meta_max_command_bytes;
        c.max_rpc_bytes = self.meta_max_request_bytes;
        c.dead_node_retention = (self.dead_node_retention_ms > 0)
            .then(|| Duration::from_millis(self.dead_node_retention_ms));
    }
}

/// `producer.id.expiration.ms` as a duration (0: never).
pub fn producer_expiration(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

impl BrokerTuning {
    /// The broker's settings; the flush policy's defaults follow the kinds
    /// of store the broker writes to, explicit flags override them.
    pub fn config(
        &self,
        id: u32,
        advertise: String,
        store: impl IntoIterator<Item = StoreKind>,
    ) -> BrokerConfig {
        let mut c = BrokerConfig::new(id, advertise);
        c.flush = self.flush_policy(store);
        c.lease = Duration::from_millis(self.lease_ms.max(300));
        c.compaction_interval = Duration::from_millis(self.compaction_interval_ms.max(10));
        c.wal_compaction_entries = self.wal_compaction_entries.max(1);
        c.wal_compaction_age = Duration::from_millis(self.wal_compaction_age_ms);
        c.segment_merge_fanout = self.segment_merge_fanout;
        c.compaction_concurrency = self.compaction_concurrency.max(1);
        c.cleaner_map_bytes = self.cleaner_map_bytes;
        c.retention_check_interval =
            Duration::from_millis(self.retention_check_interval_ms.max(10));
        c.orphan_grace = Duration::from_millis(self.orphan_grace_ms);
        c.orphan_scan_interval = (self.orphan_scan_interval_ms > 0)
            .then(|| Duration::from_millis(self.orphan_scan_interval_ms.max(10)));
        c.orphan_scan_age = Duration::from_millis(self.orphan_scan_age_ms);
        c.group_lag_interval = (self.group_lag_interval_ms > 0)
            .then(|| Duration::from_millis(self.group_lag_interval_ms.max(100)));
        c.cache_bytes = self.cache_bytes;
        c.max_unflushed_bytes = self.max_unflushed_bytes.max(1);
        c.max_wal_object_bytes = self.max_wal_object_bytes.max(1);
        c.group.initial_rebalance_delay =
            Duration::from_millis(self.group_initial_rebalance_delay_ms);
        c.group.offset_metadata_max_bytes = self.offset_metadata_max_bytes;
        c.group.consumer.session_timeout_ms = self.consumer_group_session_timeout_ms.max(1);
        c.group.consumer.heartbeat_interval_ms = self.consumer_group_heartbeat_interval_ms.max(1);
        c.producer_expiration = producer_expiration(self.producer_id_expiration_ms);
        c.txn.max_timeout_ms = self.transaction_max_timeout_ms.max(1);
        c.delayed_max_pending = self.delayed_max_pending.max(1);
        c.share_max_parked = self.share_max_parked.max(4);
        c
    }
}

impl BrokerTuning {
    /// [`FlushPolicy::for_store`] with the flags that were given.
    pub fn flush_policy(&self, store: impl IntoIterator<Item = StoreKind>) -> FlushPolicy {
        let mut p = FlushPolicy::for_store(store);
        if let Some(ms) = self.flush_interval_ms {
            p.interval = Duration::from_millis(ms.max(1));
        }
        if let Some(bytes) = self.flush_bytes {
            p.bytes = bytes;
        }
        if let Some(paced) = self.flush_paced {
            p.paced = paced;
        }
        if let Some(n) = self.max_flushes_in_flight {
            p.max_in_flight = n.max(1);
        }
        if let Some(ms) = self.flush_after_takeover_ms {
            p.after_take_over = Duration::from_millis(ms);
        }
        p
    }
}

/// Limits of the internal HTTP servers of this process (the metadata API,
/// the broker RPC, the admin port and the indexer's query API).
#[derive(Debug, Clone, Args)]
pub struct HttpTuning {
    /// Open connections per internal HTTP server; more are closed at accept.
    #[arg(long, env = "FLOE_HTTP_MAX_CONNECTIONS", default_value_t = 1024)]
    pub http_max_connections: usize,
    /// Concurrent requests on one HTTP/2 connection (the broker RPC).
    #[arg(long, env = "FLOE_HTTP_MAX_CONCURRENT_STREAMS", default_value_t = 256)]
    pub http_max_concurrent_streams: u32,
    /// Time a client has to send a request's headers.
    #[arg(long, env = "FLOE_HTTP_HEADER_TIMEOUT_MS", default_value_t = 30_000)]
    pub http_header_timeout_ms: u64,
    /// Close an internal HTTP connection with nothing in flight after this long.
    #[arg(long, env = "FLOE_HTTP_IDLE_TIMEOUT_MS", default_value_t = 120_000)]
    pub http_idle_timeout_ms: u64,
}

impl HttpTuning {
    /// The limits of a server whose request bodies may be `max_body_bytes`.
    pub fn limits(&self, max_body_bytes: usize) -> HttpLimits {
        HttpLimits {
            max_connections: self.http_max_connections.max(1),
            max_body_bytes,
            max_concurrent_streams: self.http_max_concurrent_streams.max(1),
            header_read_timeout: Duration::from_millis(self.http_header_timeout_ms.max(1)),
            idle_timeout: Duration::from_millis(self.http_idle_timeout_ms.max(10)),
        }
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
    /// A cluster view the metadata service has not confirmed for this long
    /// is not routed on: produce, fetch, list-offsets and delete-records
    /// answer NOT_LEADER_OR_FOLLOWER until it is (default: the broker lease).
    /// Not used by `floe standalone`, whose view is in-process.
    #[arg(long, env = "FLOE_MAX_VIEW_AGE_MS", default_value_t = floe_broker::config::DEFAULT_LEASE_MS)]
    pub max_view_age_ms: u64,
    /// Topics one Metadata request may auto-create; the others it names get
    /// UNKNOWN_TOPIC_OR_PARTITION (retriable) and are created when asked again.
    #[arg(
        long,
        env = "FLOE_AUTO_CREATE_MAX_TOPICS_PER_REQUEST",
        default_value_t = 16
    )]
    pub auto_create_max_topics_per_request: usize,
    /// Open Kafka connections in all (max.connections); more are closed at accept.
    #[arg(long, env = "FLOE_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Open Kafka connections from one client address (max.connections.per.ip).
    #[arg(long, env = "FLOE_MAX_CONNECTIONS_PER_IP", default_value_t = 1_000)]
    pub max_connections_per_ip: usize,
    /// Requests read from one connection and not answered yet; reading pauses at this many.
    #[arg(
        long,
        env = "FLOE_MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION",
        default_value_t = floe_proxy::limits::DEFAULT_MAX_IN_FLIGHT_REQUESTS
    )]
    pub max_in_flight_requests_per_connection: usize,
    /// Request bytes of one connection being handled; reading pauses while over it.
    #[arg(long, env = "FLOE_MAX_IN_FLIGHT_BYTES_PER_CONNECTION", default_value_t = 100 * 1024 * 1024)]
    pub max_in_flight_bytes_per_connection: usize,
    /// Request bytes being handled by the whole listener (queued.max.request.bytes);
    /// every connection pauses reading while over it.
    #[arg(long, env = "FLOE_QUEUED_MAX_REQUEST_BYTES", default_value_t = 400 * 1024 * 1024)]
    pub queued_max_request_bytes: usize,
    /// Close a Kafka connection after this long without a request (connections.max.idle.ms).
    #[arg(long, env = "FLOE_CONNECTIONS_MAX_IDLE_MS", default_value_t = 600_000)]
    pub connections_max_idle_ms: u64,
    /// Memory one decoded request may take at most (it may also take at most
    /// 1 MiB + 64 × its size); a request over it closes the connection.
    #[arg(long, env = "FLOE_MAX_REQUEST_DECODE_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_request_decode_bytes: usize,
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
    /// Fetch sessions (KIP-227) this proxy keeps at most (Kafka's
    /// max.incremental.fetch.session.cache.slots); a new one replaces the
    /// least recently used; 0: none, every fetch names all its partitions.
    #[arg(
        long,
        env = "FLOE_MAX_FETCH_SESSIONS",
        default_value_t = floe_proxy::fetch_session::DEFAULT_MAX_SESSIONS
    )]
    pub max_fetch_sessions: usize,
    /// Samples in a client quota's measuring window (Kafka's quota.window.num).
    #[arg(long, env = "FLOE_QUOTA_WINDOW_NUM", default_value_t = floe_proxy::quota::DEFAULT_WINDOW_NUM)]
    pub quota_window_num: u32,
    /// Length of one sample of a client quota's window, in milliseconds
    /// (Kafka's quota.window.size.seconds, in ms).
    #[arg(long, env = "FLOE_QUOTA_WINDOW_SIZE_MS", default_value_t = 1000)]
    pub quota_window_size_ms: u64,
    /// Answer transactional producers (InitProducerId with a
    /// transactional.id, AddPartitionsToTxn, AddOffsetsToTxn,
    /// TxnOffsetCommit, EndTxn, DescribeTransactions, ListTransactions).
    /// On by default; `false`: a transactional producer is refused at
    /// InitProducerId, and the transaction APIs are not advertised.
    #[arg(long, env = "FLOE_TRANSACTIONS", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub transactions: bool,
    /// Answer share groups (KIP-932: ShareGroupHeartbeat, ShareGroupDescribe,
    /// ShareFetch, ShareAcknowledge, their admin APIs) and list them in
    /// ApiVersions. On by default; `false`: a share consumer is told the
    /// broker does not support share groups (docs/queues.md). The brokers
    /// serve share groups whatever this says: the proxy sends them the
    /// settings below with each call.
    #[arg(long, env = "FLOE_SHARE_GROUPS", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub share_groups: bool,
    /// The authorizer (Kafka's `authorizer.class.name`): `none` lets every
    /// authenticated client do everything and answers the ACL APIs
    /// SECURITY_DISABLED; `acl` refuses what no ACL allows (`floe acl`,
    /// docs/security.md).
    #[arg(long, env = "FLOE_AUTHORIZER", default_value = "none", value_parser = ["none", "acl"])]
    pub authorizer: String,
    /// Principals allowed everything by the authorizer, Kafka's
    /// `super.users`: `User:admin;User:ops`.
    #[arg(long, env = "FLOE_SUPER_USERS", default_value = "")]
    pub super_users: String,
    /// Allow everyone on a resource no ACL names (Kafka's
    /// `allow.everyone.if.no.acl.found`); off, such a resource is refused.
    #[arg(long, env = "FLOE_ALLOW_EVERYONE_IF_NO_ACL_FOUND", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_everyone_if_no_acl_found: bool,
    /// Where a share group starts reading a partition it has not read yet
    /// (`share.auto.offset.reset`, until group configs exist): `latest` or
    /// `earliest`.
    #[arg(long, env = "FLOE_SHARE_AUTO_OFFSET_RESET", default_value = "latest", value_parser = ["latest", "earliest"])]
    pub share_auto_offset_reset: String,
    /// How long a record acquired by a share consumer stays locked to it
    /// (`share.record.lock.duration.ms`, until group configs exist).
    #[arg(
        long,
        env = "FLOE_SHARE_RECORD_LOCK_DURATION_MS",
        default_value_t = 30_000
    )]
    pub share_record_lock_duration_ms: u64,
}

impl ProxyTuning {
    /// The Kafka listener's settings.
    pub fn proxy_config(&self, listen: std::net::SocketAddr) -> ProxyConfig {
        ProxyConfig {
            listen,
            max_frame: self.max_request_bytes,
            limits: ListenerLimits {
                max_connections: self.max_connections.max(1),
                max_connections_per_ip: self.max_connections_per_ip.max(1),
                max_in_flight_requests: self.max_in_flight_requests_per_connection.max(1),
                max_in_flight_bytes: self.max_in_flight_bytes_per_connection.max(1),
                queued_max_request_bytes: self.queued_max_request_bytes.max(1),
                idle_timeout: Duration::from_millis(self.connections_max_idle_ms.max(1)),
                max_decode_bytes: self.max_request_decode_bytes,
            },
        }
    }

    /// The proxy's request context. `bound` gives the addresses clients are
    /// given for this proxy (and the SASL session lifetime DescribeConfigs
    /// shows); `cluster_id` identifies the cluster; `local`
    /// is the broker of this process (`floe standalone`), which also lifts
    /// the bound on the view's age and makes this proxy the only one
    /// clients are shown (as `node_id`); otherwise it is one of the
    /// registered proxies ([`floe_proxy::registration`], which gives it
    /// its id).
    pub fn context(
        &self,
        node_id: i32,
        bound: &crate::listener_args::BoundListeners,
        cluster_id: String,
        meta: Arc<dyn MetaApi>,
        view: ClusterWatch,
        local: Option<Broker>,
    ) -> anyhow::Result<Arc<Context>> {
        let advertised = &bound.advertised;
        let connections_max_reauth_ms = bound.connections_max_reauth_ms;
        // With a broker in this process (`floe standalone`) the metadata is
        // in-process too: its view is never stale for lack of a network.
        let max_view_age = local
            .is_none()
            .then(|| Duration::from_millis(self.max_view_age_ms.max(1)));
        let first = advertised
            .first()
            .context("a proxy needs at least one listener")?;
        let (host, port) = (first.host.clone(), first.port);
        let share = self.share_groups.then(|| {
            use floe_broker::share::{AutoOffsetReset, ShareSettings};
            let reset = if self.share_auto_offset_reset == "earliest" {
                AutoOffsetReset::Earliest
            } else {
                AutoOffsetReset::Latest
            };
            Arc::new(floe_proxy::share::ShareContext::new(ShareSettings {
                lock_duration_ms: self.share_record_lock_duration_ms.max(1),
                reset,
                ..ShareSettings::default()
            }))
        });
        let me = if local.is_some() {
            SelfNode::alone(node_id, host.clone(), port)
        } else {
            SelfNode::registered(node_id, host.clone(), port)
        }
        .with_listeners(advertised.to_vec());
        Ok(Arc::new(Context {
            me: Arc::new(me),
            local,
            view,
            remotes: Default::default(),
            meta,
            admin: AdminConfig {
                default_partitions: self.default_partitions.max(1),
                connections_max_reauth_ms,
                identity: ClusterIdentity {
                    cluster_id,
                    node_id,
                    host,
                    port,
                },
            },
            auto_create_topics: self.auto_create_topics,
            auto_create_max_topics: self.auto_create_max_topics_per_request,
            max_fetch_wait: Duration::from_secs(30),
            fetch_limits: FetchLimits {
                max_bytes: self.fetch_max_bytes.max(1),
                max_partition_bytes: self.fetch_max_partition_bytes.max(1),
            },
            fetch_sessions: floe_proxy::fetch_session::FetchSessions::new(self.max_fetch_sessions),
            producer_ids: Default::default(),
            max_view_age,
            down_reports: Default::default(),
            transactions: self.transactions,
            share,
            quotas: floe_proxy::quota::Throttles::new(floe_proxy::quota::QuotaWindow {
                num: self.quota_window_num.max(1),
                size: Duration::from_millis(self.quota_window_size_ms.max(1)),
            }),
            authz: Arc::new(floe_proxy::authz::Authorizer::new(self.authz_settings()?)),
        }))
    }

    /// The authorizer's settings from the flags.
    pub fn authz_settings(&self) -> anyhow::Result<floe_proxy::authz::AuthzSettings> {
        let super_users = floe_proxy::authz::AuthzSettings::parse_super_users(&self.super_users)
            .map_err(|e| anyhow::anyhow!("--super-users: {e}"))?;
        let enabled = self.authorizer == "acl";
        if !enabled && !super_users.is_empty() {
            tracing::warn!(
                "--super-users is set but --authorizer is none: every client may do everything"
            );
        }
        Ok(floe_proxy::authz::AuthzSettings {
            enabled,
            super_users,
            allow_if_no_acls: self.allow_everyone_if_no_acl_found,
        })
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
            "--store-write-deadline-max-ms",
            "800",
            "--store-bench-ms",
            "3000",
        ])
        .unwrap();
        assert_eq!(cmd.cluster.meta, ["127.0.0.1:1", "127.0.0.1:2"]);
        let pool = cmd.cluster.open_store().await.unwrap();
        assert_eq!(pool.options().write_timeout, Duration::from_millis(2500));
        assert_eq!(pool.options().deadline.max, Duration::from_millis(800));
        assert_eq!(pool.options().deadline.min, Duration::from_millis(250));
        assert_eq!(pool.options().bench_cooldown, Duration::from_millis(3000));
        assert!(cmd.cluster.meta_client().is_ok());
    }

    #[tokio::test]
    async fn a_zero_write_deadline_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let zero = StoreTuning {
            write_timeout_ms: 0,
            ..StoreTuning::default()
        };
        let err = open_store(std::slice::from_ref(&url), &zero, true)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("--write-timeout-ms"), "{err}");
        let inverted = StoreTuning {
            store_write_deadline_min_ms: 2_000,
            ..StoreTuning::default()
        };
        let err = open_store(&[url], &inverted, true).await.unwrap_err();
        assert!(
            err.to_string().contains("--store-write-deadline-min-ms"),
            "{err}"
        );
    }

    #[derive(Debug, Parser)]
    struct Tuned {
        #[command(flatten)]
        broker: BrokerTuning,
    }

    #[test]
    fn the_flush_policy_follows_the_store_and_flags_override_it() {
        // Not from the environment of whoever runs the tests.
        if std::env::vars().any(|(k, _)| k.starts_with("FLOE_FLUSH_")) {
            return;
        }
        let none = Tuned::try_parse_from(["x"]).unwrap().broker;
        assert_eq!(none.flush_policy([StoreKind::Local]), FlushPolicy::LOCAL);
        assert_eq!(none.flush_policy([StoreKind::S3]), FlushPolicy::REMOTE);
        assert_eq!(
            none.flush_policy([StoreKind::Local, StoreKind::S3]),
            FlushPolicy::REMOTE
        );
        let cfg = none.config(1, "a:1".into(), [StoreKind::S3]);
        assert_eq!(cfg.flush.interval, Duration::from_millis(250));
        assert!(cfg.flush.paced);
        let set = Tuned::try_parse_from([
            "x",
            "--flush-interval-ms",
            "20",
            "--flush-bytes",
            "1000",
            "--flush-paced",
            "false",
            "--flush-after-takeover-ms",
            "250",
        ])
        .unwrap()
        .broker;
        let p = set.flush_policy([StoreKind::S3]);
        assert_eq!(
            (p.interval, p.bytes, p.paced, p.after_take_over),
            (
                Duration::from_millis(20),
                1000,
                false,
                Duration::from_millis(250)
            )
        );
        assert_eq!(
            none.flush_policy([StoreKind::S3]).after_take_over,
            Duration::ZERO
        );
    }

    #[derive(Debug, Parser)]
    struct ProxyTuned {
        #[command(flatten)]
        proxy: ProxyTuning,
    }

    #[test]
    fn share_groups_are_served_unless_turned_off() {
        if std::env::var_os("FLOE_SHARE_GROUPS").is_some() {
            return;
        }
        let parse = |args: &[&str]| ProxyTuned::try_parse_from(args).unwrap().proxy.share_groups;
        assert!(parse(&["x"]));
        assert!(parse(&["x", "--share-groups"]));
        assert!(!parse(&["x", "--share-groups", "false"]));
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

/// The config file every role takes (read before the flags are parsed:
/// [`crate::config_file`]).
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigFileArg {
    /// A TOML file of settings: keys are flag names without the dashes, at
    /// the top level (every role that has the flag) or in a [standalone],
    /// [broker], [proxy], [indexer] or [meta-node] table. Flags and environment
    /// variables win over it.
    #[arg(long = "config-file", env = "FLOE_CONFIG_FILE", value_name = "FILE")]
    pub config_file: Option<std::path::PathBuf>,
}
