//! Broker settings and the per-topic settings the broker acts on.

use std::collections::HashMap;
use std::time::Duration;

/// Settings of one broker process.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The broker id registered with the metadata service.
    pub id: u32,
    /// The address other processes reach this broker at (its RPC endpoint).
    pub advertise: String,
    /// A flush happens at least this often while data waits.
    pub flush_interval: Duration,
    /// A flush starts early once this many bytes wait.
    pub flush_bytes: usize,
    /// The lease asked for at registration; heartbeats renew it at a third of it.
    pub lease: Duration,
    /// Committed batches kept in memory per partition for fetches at the tail.
    pub tail_bytes_per_partition: usize,
    /// Block cache for reads from the object store.
    pub cache_bytes: u64,
    /// How often committed WAL ranges are rewritten into segments.
    pub compaction_interval: Duration,
    /// How often retention (time and size) is applied.
    pub retention_check_interval: Duration,
    /// How long an unreferenced object is left before it is deleted.
    pub orphan_grace: Duration,
    /// Consumer-group coordinator settings (session limits, initial rebalance delay).
    pub group: crate::group::GroupConfig,
}

impl BrokerConfig {
    pub fn new(id: u32, advertise: impl Into<String>) -> Self {
        Self {
            id,
            advertise: advertise.into(),
            flush_interval: Duration::from_millis(5),
            flush_bytes: 4 * 1024 * 1024,
            lease: Duration::from_secs(10),
            tail_bytes_per_partition: 4 * 1024 * 1024,
            cache_bytes: 256 * 1024 * 1024,
            compaction_interval: Duration::from_secs(30),
            retention_check_interval: Duration::from_secs(30),
            orphan_grace: Duration::from_secs(60),
            group: crate::group::GroupConfig::default(),
        }
    }
}

/// Which timestamp a batch carries once stored (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// The topic settings the broker's partition logs use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    pub max_message_bytes: usize,
    pub timestamp_type: TimestampType,
    /// `None`: keep forever (`-1`).
    pub retention_ms: Option<i64>,
    pub retention_bytes: Option<i64>,
    pub segment_bytes: u64,
    pub segment_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            max_message_bytes: 1_048_588,
            timestamp_type: TimestampType::CreateTime,
            retention_ms: Some(7 * 24 * 3600 * 1000),
            retention_bytes: None,
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
        }
    }
}

impl LogConfig {
    /// Reads the effective settings (defaults included) from a topic's description.
    pub fn from_entries(entries: &[floe_metadata::model::ConfigEntry]) -> Self {
        let map: HashMap<&str, &str> = entries
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_str()))
            .collect();
        let mut c = LogConfig::default();
        let int = |k: &str| map.get(k).and_then(|v| v.trim().parse::<i64>().ok());
        if let Some(v) = int("max.message.bytes") {
            c.max_message_bytes = v.clamp(0, i32::MAX as i64) as usize;
        }
        if let Some(v) = map.get("message.timestamp.type")
            && v.eq_ignore_ascii_case("LogAppendTime")
        {
            c.timestamp_type = TimestampType::LogAppendTime;
        }
        if let Some(v) = int("retention.ms") {
            c.retention_ms = (v >= 0).then_some(v);
        }
        if let Some(v) = int("retention.bytes") {
            c.retention_bytes = (v >= 0).then_some(v);
        }
        if let Some(v) = int("segment.bytes") {
            c.segment_bytes = v.max(1) as u64;
        }
        if let Some(v) = int("segment.ms") {
            c.segment_ms = v.max(1);
        }
        c
    }
}
