//! Broker settings and the per-topic settings the broker acts on.

use std::time::Duration;

use floe_metadata::topic_config::TopicConfig;
use floe_storage::batch::Compression;

/// Default cap on a broker's unflushed bytes: four full WAL objects, so
/// that the queue keeps the flusher busy while one object is written and
/// a slow store stops producers after a bounded amount of memory.
pub const DEFAULT_MAX_UNFLUSHED_BYTES: usize = 64 * 1024 * 1024;

/// Default bound on one WAL object: large enough that a flush amortises
/// its PUT and its commit, small enough that one PUT finishes well inside
/// the store write deadline (10 s) even at a few MB/s.
pub const DEFAULT_MAX_WAL_OBJECT_BYTES: usize = 16 * 1024 * 1024;

/// Default memory of the log cleaner's key map (Kafka's
/// `log.cleaner.dedupe.buffer.size`): about 3.3 million keys at
/// [`floe_storage::clean::KEY_MAP_ENTRY_BYTES`] each.
pub const DEFAULT_CLEANER_MAP_BYTES: u64 = 128 * 1024 * 1024;

/// Default WAL entries of a partition that are compacted into a segment
/// (`--wal-compaction-entries`): about 18 KiB of metadata per partition
/// at most (70 bytes an entry), against one segment (three PUTs) per 256
/// flushes that wrote to the partition.
pub const DEFAULT_WAL_COMPACTION_ENTRIES: usize = 256;

/// Default age of a partition's oldest WAL range at which its ranges are
/// compacted (`--wal-compaction-age-ms`), whatever their count: how long a
/// WAL object is kept in the store for a partition that is rarely written.
pub const DEFAULT_WAL_COMPACTION_AGE_MS: u64 = 10 * 60 * 1000;

/// Default fanout of segment merges (`--segment-merge-fanout`).
pub const DEFAULT_SEGMENT_MERGE_FANOUT: usize = 8;

/// Default partitions a broker compacts at once
/// (`--compaction-concurrency`).
pub const DEFAULT_COMPACTION_CONCURRENCY: usize = 4;

/// Default broker lease (`--lease-ms`). Short, because moving a partition
/// early can never corrupt it (every commit is fenced by the partition's
/// epoch): a broker that dies without its port refusing connections (a
/// machine gone, a network cut) loses its partitions about 2.5 s after its
/// last heartbeat got through. Five heartbeats fit in it, so a broker
/// paused for a second (a GC-like stall) still renews in time.
pub const DEFAULT_LEASE_MS: u64 = 2_500;

/// Default time between orphan scans (`--orphan-scan-interval-ms`).
pub const DEFAULT_ORPHAN_SCAN_INTERVAL: Duration = Duration::from_secs(3_600);

/// Default time between rounds of the groups' lag (`--group-lag-interval-ms`).
pub const DEFAULT_GROUP_LAG_INTERVAL: Duration = Duration::from_secs(30);

/// Default safe age of the orphan scan (`--orphan-scan-age-ms`): far longer
/// than a write and its commit take, so an object being committed is never
/// taken for an orphan.
pub const DEFAULT_ORPHAN_SCAN_AGE: Duration = Duration::from_secs(3_600);

/// Heartbeats sent within one lease: a heartbeat every fifth of it.
pub const HEARTBEATS_PER_LEASE: u32 = 5;

/// When the broker flushes (writes one WAL object and commits it). Each
/// flush is one PUT, so on a store that charges per request the policy sets
/// the bill, and on any store it sets the latency of `acks=all` produces at
/// low rates: a produce waits for the next flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushPolicy {
    /// A flush at least this often while data waits.
    pub interval: Duration,
    /// A flush at once when this many bytes wait in the broker (sequenced
    /// and not yet committed), or in one partition.
    pub bytes: usize,
    /// The interval is also the least time between the starts of two
    /// flushes, unless `bytes` wait: at most one PUT per interval at low and
    /// middle rates. Without it, what queued during a flush goes as soon as
    /// that flush has committed (lowest latency, a PUT per flush round trip).
    pub paced: bool,
    /// Flushes in flight at once. Beyond the first, a flush starts only
    /// when a whole `bytes` object waits: under a heavy load the next
    /// objects are written while earlier ones still are (throughput is not
    /// one PUT's latency), while a light load keeps to one flush at a time
    /// and its latency. 1: each flush waits for the one before.
    pub max_in_flight: usize,
    /// For this long after the broker takes a partition over (a hand-over,
    /// a dead owner's partitions, a new topic), a write to it is flushed at
    /// once, beside flushes in flight and whatever the pacing: its
    /// producers already waited for the take-over (their writes held by the
    /// proxy). It costs a few PUTs per partition taken over. 0 (the default
    /// on every store): no exception. Measured on S3, the early flushes
    /// made a rolling restart's longest pause longer, not shorter (three
    /// flush intervals instead of two; docs/benchmarks.md, "Rolling
    /// restart: no flush at once after a take-over"): clients' requests
    /// answered out of the pace then miss the paced flushes.
    pub after_take_over: Duration,
}

impl FlushPolicy {
    /// A local folder (and memory): every 5 ms, and back to back while
    /// data keeps coming.
    pub const LOCAL: FlushPolicy = FlushPolicy {
        interval: Duration::from_millis(5),
        bytes: 4 * 1024 * 1024,
        paced: false,
        max_in_flight: 1,
        after_take_over: Duration::ZERO,
    };

    /// A store where each request is a network round trip with a price (S3)
    /// or a load on a shared server (HDFS): at most 4 PUTs a second below
    /// 8 MiB per 250 ms (32 MB/s), larger objects above.
    pub const REMOTE: FlushPolicy = FlushPolicy {
        interval: Duration::from_millis(250),
        bytes: 8 * 1024 * 1024,
        paced: true,
        max_in_flight: 4,
        after_take_over: Duration::ZERO,
    };

    /// The policy for a pool of these kinds of store: the remote one if any
    /// endpoint is remote (a write may land on any of them).
    pub fn for_store(kinds: impl IntoIterator<Item = floe_storage::StoreKind>) -> Self {
        if floe_storage::StoreKind::any_remote(kinds) {
            Self::REMOTE
        } else {
            Self::LOCAL
        }
    }
}

/// Settings of one broker process.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The broker id registered with the metadata service.
    pub id: u32,
    /// The address other processes reach this broker at (its RPC endpoint).
    pub advertise: String,
    /// When flushes happen ([`FlushPolicy::for_store`] picks it by the
    /// kind of store).
    pub flush: FlushPolicy,
    /// The lease asked for at registration; heartbeats renew it every
    /// [`HEARTBEATS_PER_LEASE`]th of it. Past it (counted from the last heartbeat that got through,
    /// minus a margin) the broker stops serving by itself.
    pub lease: Duration,
    /// Bytes sequenced but not yet committed, over which a produce waits
    /// for room (up to its timeout) instead of being queued.
    pub max_unflushed_bytes: usize,
    /// The most bytes of batches one WAL object carries.
    pub max_wal_object_bytes: usize,
    /// Committed batches kept in memory per partition for fetches at the tail.
    pub tail_bytes_per_partition: usize,
    /// Block cache for reads from the object store.
    pub cache_bytes: u64,
    /// How often committed WAL ranges are rewritten into segments and
    /// small segments merged (`partitions::compaction`).
    pub compaction_interval: Duration,
    /// A partition's WAL ranges are compacted into a segment once there
    /// are this many of them (index entries).
    pub wal_compaction_entries: usize,
    /// … or once the oldest of them is this old.
    pub wal_compaction_age: Duration,
    /// Segments are merged in tiers of this factor (a run of this many
    /// segments of one tier becomes one); below 2, never.
    pub segment_merge_fanout: usize,
    /// Partitions compacted at once by one broker.
    pub compaction_concurrency: usize,
    /// Memory for the log cleaner's key map (`--cleaner-map-bytes`): a
    /// partition with more keys than fit is cleaned in several passes.
    pub cleaner_map_bytes: u64,
    /// How often retention (time and size) is applied.
    pub retention_check_interval: Duration,
    /// How long an unreferenced object is left before it is deleted.
    pub orphan_grace: Duration,
    /// How often the broker serving coordinator shard 0 lists the store for
    /// objects the metadata does not know (`None`: never; see
    /// [`crate::orphans`]).
    pub orphan_scan_interval: Option<Duration>,
    /// An object the metadata does not know is deleted by the orphan scan
    /// only once it is this old (by the store's last-modified time).
    pub orphan_scan_age: Duration,
    /// How often the lag of the groups this broker coordinates is computed
    /// for `/metrics` (`None`: never; see [`crate::group::lag`]).
    pub group_lag_interval: Option<Duration>,
    /// Consumer-group coordinator settings (session limits, initial rebalance delay).
    pub group: GroupConfig,
    /// `producer.id.expiration.ms`: idempotent producer state a partition
    /// keeps for a producer that has not written for this long is dropped
    /// (`None`: kept forever).
    pub producer_expiration: Option<Duration>,
    /// How long a partition refuses (as not stored, NOT_LEADER_OR_FOLLOWER)
    /// a batch of an idempotent producer it does not know that does not
    /// start at sequence 0, from the first refusal: its earlier batches may
    /// still be retried; after it, the batch is taken as an expired
    /// producer's (`broker/src/partitions/producer.rs`).
    pub producer_gap_grace: Duration,
    /// The transaction coordinator's settings (`transaction.max.timeout.ms`).
    pub txn: TxnConfig,
    /// Delayed entries each partition of a delayed topic keeps in memory
    /// at most (the earliest due); the others are found again by reading
    /// the log from its cursor.
    pub delayed_max_pending: usize,
    /// Delayed share-group records each share-partition keeps in its parked
    /// list (in its state in the metadata service) at most; when three
    /// quarters of it are not due yet, all but the soonest quarter are
    /// written to a timer bucket in the object store.
    pub share_max_parked: u32,
}

impl BrokerConfig {
    /// How often the broker renews its lease.
    pub fn heartbeat_interval(&self) -> Duration {
        self.lease / HEARTBEATS_PER_LEASE
    }

    pub fn new(id: u32, advertise: impl Into<String>) -> Self {
        Self {
            id,
            advertise: advertise.into(),
            flush: FlushPolicy::LOCAL,
            lease: Duration::from_millis(DEFAULT_LEASE_MS),
            max_unflushed_bytes: DEFAULT_MAX_UNFLUSHED_BYTES,
            max_wal_object_bytes: DEFAULT_MAX_WAL_OBJECT_BYTES,
            tail_bytes_per_partition: 4 * 1024 * 1024,
            cache_bytes: 256 * 1024 * 1024,
            compaction_interval: Duration::from_secs(30),
            wal_compaction_entries: DEFAULT_WAL_COMPACTION_ENTRIES,
            wal_compaction_age: Duration::from_millis(DEFAULT_WAL_COMPACTION_AGE_MS),
            segment_merge_fanout: DEFAULT_SEGMENT_MERGE_FANOUT,
            compaction_concurrency: DEFAULT_COMPACTION_CONCURRENCY,
            cleaner_map_bytes: DEFAULT_CLEANER_MAP_BYTES,
            retention_check_interval: Duration::from_secs(30),
            orphan_grace: Duration::from_secs(60),
            orphan_scan_interval: Some(DEFAULT_ORPHAN_SCAN_INTERVAL),
            orphan_scan_age: DEFAULT_ORPHAN_SCAN_AGE,
            group_lag_interval: Some(DEFAULT_GROUP_LAG_INTERVAL),
            group: GroupConfig::default(),
            producer_expiration: Some(Duration::from_millis(
                floe_metadata::state::DEFAULT_PRODUCER_EXPIRATION_MS,
            )),
            producer_gap_grace: Duration::from_millis(
                crate::partitions::producer::DEFAULT_GAP_GRACE_MS,
            ),
            txn: TxnConfig::default(),
            delayed_max_pending: DEFAULT_MAX_PENDING,
            share_max_parked: DEFAULT_MAX_PARKED,
        }
    }
}

/// Which timestamp a batch carries once stored (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// The log cleaner's topic settings (Kafka's names and meanings).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CleaningConfig {
    /// `delete.retention.ms`: a tombstone stays this long after the
    /// cleaning that first kept it.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: a segment holding a younger record is not
    /// cleaned yet.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a partition whose oldest dirty segment is
    /// this old is cleaned whatever its dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`: cleaned when dirty bytes are at least
    /// this share of the segments' bytes.
    pub min_cleanable_dirty_ratio: f64,
}

/// The topic settings the broker's partition logs use.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    pub max_message_bytes: usize,
    pub timestamp_type: TimestampType,
    /// `None`: keep forever (`-1`).
    pub retention_ms: Option<i64>,
    pub retention_bytes: Option<i64>,
    pub segment_bytes: u64,
    pub segment_ms: i64,
    /// `cleanup.policy=compact` (without `delete`): retention by time and
    /// size does not apply.
    pub compact_only: bool,
    /// `cleanup.policy` names `compact`: a record without a key is refused,
    /// and the log cleaner keeps the latest record of each key.
    pub compacted: bool,
    /// What the log cleaner follows on a compacted topic.
    pub cleaning: CleaningConfig,
    /// `compression.type`: the codec produced batches are recompressed
    /// into (`None`: `producer`, stored as sent).
    pub compression: Option<Compression>,
    /// `floe.delayed.delivery`: records not due yet are held as delayed
    /// batches and appended again when due (the partitions' delayed module).
    pub delayed: bool,
}

impl Default for LogConfig {
    /// The defaults of the metadata's topic configs.
    fn default() -> Self {
        Self::from_topic_config(&TopicConfig::default())
    }
}

impl LogConfig {
    /// The settings in force in a topic config: its keys, defaults and
    /// checks are the metadata's (`floe_metadata::topic_config`); this only
    /// turns them into the types the partition log uses.
    pub fn from_topic_config(c: &TopicConfig) -> Self {
        let keep = |v: i64| (v >= 0).then_some(v);
        Self {
            max_message_bytes: c.max_message_bytes().clamp(0, i64::from(i32::MAX)) as usize,
            timestamp_type: if c.log_append_time() {
                TimestampType::LogAppendTime
            } else {
                TimestampType::CreateTime
            },
            retention_ms: keep(c.retention_ms()),
            retention_bytes: keep(c.retention_bytes()),
            segment_bytes: c.segment_bytes().max(1) as u64,
            segment_ms: c.segment_ms().max(1),
            compact_only: c.compact_only(),
            compacted: c.compacted(),
            cleaning: CleaningConfig {
                delete_retention_ms: c.delete_retention_ms().max(0),
                min_compaction_lag_ms: c.min_compaction_lag_ms().max(0),
                max_compaction_lag_ms: c.max_compaction_lag_ms().max(1),
                min_cleanable_dirty_ratio: c.min_cleanable_dirty_ratio().clamp(0.0, 1.0),
            },
            compression: c.compression_type().map(codec_of),
            delayed: c.delayed_delivery(),
        }
    }

    /// Reads the effective settings from a topic's description (entries the
    /// metadata does not know or would refuse take their defaults).
    pub fn from_entries(entries: &[floe_metadata::model::ConfigEntry]) -> Self {
        Self::from_topic_config(&TopicConfig::from_described(
            entries.iter().map(|e| (e.name.as_str(), e.value.as_str())),
        ))
    }
}

/// The codec a `compression.type` other than `producer` names (checked by
/// the metadata's topic config: an unknown name cannot get here, and would
/// read as uncompressed).
fn codec_of(name: &str) -> Compression {
    match name {
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        _ => Compression::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, value: &str) -> floe_metadata::model::ConfigEntry {
        floe_metadata::model::ConfigEntry {
            name: name.to_string(),
            value: value.to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_are_the_metadata_topic_config_defaults() {
        let meta = TopicConfig::default();
        let d = LogConfig::default();
        let get = |k: &str| meta.get(k).unwrap().parse::<i64>().unwrap();
        assert_eq!(d.max_message_bytes as i64, get("max.message.bytes"));
        assert_eq!(d.retention_ms, Some(get("retention.ms")));
        assert_eq!(get("retention.bytes"), -1);
        assert_eq!(d.retention_bytes, None);
        assert_eq!(d.segment_bytes as i64, get("segment.bytes"));
        assert_eq!(d.segment_ms, get("segment.ms"));
        assert_eq!(meta.get("message.timestamp.type"), Some("CreateTime"));
        assert_eq!(d.timestamp_type, TimestampType::CreateTime);
        // A described topic with every key at its default reads the same.
        let described: Vec<_> = meta
            .describe()
            .iter()
            .map(|e| entry(e.name, &e.value))
            .collect();
        assert_eq!(LogConfig::from_entries(&described), d);
        assert_eq!(LogConfig::from_entries(&[]), d);
    }

    #[test]
    fn entries_are_read_by_the_metadata_rules() {
        let c = LogConfig::from_entries(&[
            entry("retention.ms", "-1"),
            entry("retention.bytes", "4096"),
            entry("message.timestamp.type", "LogAppendTime"),
            entry("segment.ms", "60000"),
            entry("compression.type", "lz4"),
            // Refused by the metadata's checks: the default stands.
            entry("segment.bytes", "1"),
            entry("max.message.bytes", "99999999999"),
        ]);
        let d = LogConfig::default();
        assert_eq!(c.retention_ms, None);
        assert_eq!(c.retention_bytes, Some(4096));
        assert_eq!(c.timestamp_type, TimestampType::LogAppendTime);
        assert_eq!(c.segment_ms, 60_000);
        assert_eq!(c.compression, Some(Compression::Lz4));
        assert_eq!(d.compression, None, "producer: stored as sent");
        assert_eq!(c.segment_bytes, d.segment_bytes);
        assert_eq!(c.max_message_bytes, d.max_message_bytes);
    }
}

/// Settings of the group coordinator (Kafka's `group.*` broker settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`: a join asking for less is refused.
    pub min_session_timeout: Duration,
    /// `group.max.session.timeout.ms`: a join asking for more is refused.
    pub max_session_timeout: Duration,
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of an
    /// empty group waits for more members (extended by the same amount each
    /// time another member arrives, up to the rebalance timeout).
    pub initial_rebalance_delay: Duration,
    /// How long a new member's JoinGroup may wait before the member is
    /// dropped (Kafka's fixed `NewMemberJoinTimeoutMs`, five minutes).
    pub new_member_join_timeout: Duration,
    /// Number of coordinator shards group ids are spread over (like
    /// `offsets.topic.num.partitions`); [`crate::coordinator::shard_of`] maps an id to one.
    pub shards: u32,
    /// `offset.metadata.max.bytes`: an offset commit's metadata string above
    /// this is refused (OFFSET_METADATA_TOO_LARGE for that partition).
    pub offset_metadata_max_bytes: usize,
    /// Groups of the new protocol (KIP-848).
    pub consumer: ConsumerGroupConfig,
}

/// Default of `offset.metadata.max.bytes` (Kafka's).
pub const DEFAULT_OFFSET_METADATA_MAX_BYTES: usize = 4096;

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            min_session_timeout: Duration::from_millis(6_000),
            max_session_timeout: Duration::from_millis(1_800_000),
            initial_rebalance_delay: Duration::from_millis(3_000),
            new_member_join_timeout: Duration::from_secs(300),
            shards: 50,
            offset_metadata_max_bytes: DEFAULT_OFFSET_METADATA_MAX_BYTES,
            consumer: ConsumerGroupConfig::default(),
        }
    }
}

/// Settings of consumer groups (Kafka's `group.consumer.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerGroupConfig {
    /// `group.consumer.session.timeout.ms`.
    pub session_timeout_ms: u64,
    /// `group.consumer.heartbeat.interval.ms`, told to members.
    pub heartbeat_interval_ms: u32,
}

impl Default for ConsumerGroupConfig {
    fn default() -> Self {
        Self {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
        }
    }
}

/// The coordinator's settings.
#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`: the most a producer may ask for.
    pub max_timeout_ms: u32,
    /// The longest pause between two attempts at a marker or a completion.
    pub max_backoff: Duration,
    /// How long a step refused with CONCURRENT_TRANSACTIONS while this
    /// coordinator completes the previous transaction (AddPartitionsToTxn,
    /// AddOffsetsToTxn or InitProducerId right after an EndTxn) waits for
    /// that completion and is tried again, instead of being answered at
    /// once and retried by the client after its backoff (librdkafka's is
    /// 20 ms, Java's 20–100 ms). Zero answers at once.
    pub completion_wait: Duration,
    /// How long an EndTxn that commits waits for the transaction's
    /// partitions to hold it durably (their owners answered its produce
    /// requests once sequenced) before it is answered
    /// CONCURRENT_TRANSACTIONS, which clients retry.
    pub commit_wait: Duration,
}

impl Default for TxnConfig {
    fn default() -> Self {
        Self {
            max_timeout_ms: floe_metadata::txn::DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
            max_backoff: Duration::from_secs(1),
            completion_wait: Duration::from_secs(1),
            commit_wait: Duration::from_secs(5),
        }
    }
}

/// Delayed records a share-partition parks in its state at most (the
/// broker's default for `BrokerConfig::share_max_parked`; past it they go
/// to the timer index).
pub const DEFAULT_MAX_PARKED: u32 = 2_000;

/// Delayed entries a partition's scheduler keeps in memory at most (the
/// broker's default for `BrokerConfig::delayed_max_pending`).
pub const DEFAULT_MAX_PENDING: usize = 100_000;
