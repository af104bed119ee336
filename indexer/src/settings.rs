//! A topic's export settings (its `export.*` configs) and the names of
//! export files.

use std::time::Duration;

use chrono::{DateTime, Datelike, Timelike, Utc};
use floe_metadata::export_def::IndexDefinition;
use floe_metadata::topic_config::TopicConfig;

use crate::columns::{FileCompression, FileOptions};

/// Milliseconds in an hour: files never reach into a later hour.
pub const HOUR_MS: i64 = 3_600_000;

/// What a topic's configs say about its exports.
#[derive(Debug, Clone)]
pub struct ExportSettings {
    /// Exported: `export.enabled`, or the topic is an Iceberg table.
    pub enabled: bool,
    /// The topic is an Iceberg table (`table.format=iceberg`).
    pub table: bool,
    /// The table's partitions by record time (`table.partition`), `None`
    /// when unpartitioned or not a table. A table's files never mix two.
    pub bucket: Option<TimeBucket>,
    /// The table keeps one row per key (`table.mode=upsert`).
    pub upsert: bool,
    pub definition: IndexDefinition,
    pub roll: Duration,
    pub file_bytes: u64,
    pub file: FileOptions,
    /// `None`: keep exports forever.
    pub retention: Option<Duration>,
    /// The size a table's compaction writes files up to
    /// (`table.target.file.bytes`); 0: none.
    pub target_file_bytes: u64,
    /// How old a table's snapshots grow before they are expired
    /// (`table.snapshot.max.age.ms`).
    pub snapshot_max_age: Duration,
}

impl ExportSettings {
    pub fn from_config(c: &TopicConfig) -> Self {
        let positive = |v: i64, floor: i64| v.max(floor) as u64;
        Self {
            enabled: c.export_enabled() || c.iceberg_table(),
            table: c.iceberg_table(),
            bucket: match (c.iceberg_table(), c.table_partition()) {
                (true, "day") => Some(TimeBucket::Day),
                (true, "hour") => Some(TimeBucket::Hour),
                _ => None,
            },
            upsert: c.iceberg_table() && c.table_upsert(),
            definition: c.export_index(),
            roll: Duration::from_millis(positive(c.export_roll_ms(), 100)),
            file_bytes: positive(c.export_file_bytes(), 1024),
            file: FileOptions {
                compression: FileCompression::parse(c.export_compression())
                    .unwrap_or(FileCompression::Zstd),
                row_group_rows: positive(c.export_row_group_rows(), 1) as usize,
            },
            retention: (c.export_retention_ms() >= 0)
                .then(|| Duration::from_millis(c.export_retention_ms() as u64)),
            target_file_bytes: positive(c.table_target_file_bytes(), 0),
            snapshot_max_age: Duration::from_millis(positive(
                c.table_snapshot_max_age_ms(),
                60_000,
            )),
        }
    }

    /// From a topic as the metadata API lists it (read as the broker reads
    /// it: `TopicConfig::from_described`).
    pub fn from_topic(t: &floe_metadata::model::TopicInfo) -> Self {
        Self::from_config(&TopicConfig::from_described(
            t.configs
                .iter()
                .filter(|e| !e.is_default)
                .map(|e| (e.name.as_str(), e.value.as_str())),
        ))
    }
}

/// A table's partitions by record time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeBucket {
    Day,
    Hour,
}

impl TimeBucket {
    /// Which bucket `ts_ms` is in: days or hours since the epoch (UTC), as
    /// Iceberg's `day` and `hour` transforms number them.
    pub fn of(self, ts_ms: i64) -> i64 {
        match self {
            TimeBucket::Day => ts_ms.div_euclid(24 * HOUR_MS),
            TimeBucket::Hour => ts_ms.div_euclid(HOUR_MS),
        }
    }
}

/// The hour bucket of a timestamp.
pub fn hour_of(ts_ms: i64) -> i64 {
    ts_ms.div_euclid(HOUR_MS)
}

/// `exports/{topic}/dt=YYYY-MM-DD/hr=HH/{partition}-{first:020}-{last:020}.parquet`,
/// dated by the UTC hour of the file's first record.
pub fn file_key(topic: &str, partition: u32, first: i64, last: i64, first_ts_ms: i64) -> String {
    let at: DateTime<Utc> = DateTime::from_timestamp_millis(first_ts_ms).unwrap_or_default();
    format!(
        "{}dt={:04}-{:02}-{:02}/hr={:02}/{partition}-{first:020}-{last:020}.parquet",
        topic_prefix(topic),
        at.year(),
        at.month(),
        at.day(),
        at.hour()
    )
}

/// Where a topic's exports live (with the trailing slash).
pub fn topic_prefix(topic: &str) -> String {
    format!("exports/{topic}/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_follow_the_hive_layout() {
        // 2026-11-29T14:05:00Z
        let ts = 1_795_961_100_000;
        assert_eq!(
            file_key("orders", 3, 0, 41, ts),
            "exports/orders/dt=2026-11-29/hr=14/3-00000000000000000000-00000000000000000041.parquet"
        );
        assert_eq!(hour_of(ts), hour_of(ts - 5 * 60 * 1000));
        assert_ne!(hour_of(ts), hour_of(ts + 55 * 60 * 1000));
        // A record without a timestamp (-1) files under the epoch's hour.
        assert!(file_key("t", 0, 0, 0, -1).contains("dt=1969-12-31/hr=23/"));
    }

    #[test]
    fn settings_come_from_the_topic_configs() {
        let mut set = std::collections::BTreeMap::new();
        set.insert("export.enabled".to_string(), "true".to_string());
        set.insert("export.roll.ms".to_string(), "1500".to_string());
        set.insert("export.compression".to_string(), "snappy".to_string());
        set.insert("export.retention.ms".to_string(), "60000".to_string());
        let s = ExportSettings::from_config(&TopicConfig::from_settings(&set).unwrap());
        assert!(s.enabled);
        assert_eq!(s.roll, Duration::from_millis(1500));
        assert_eq!(s.file.compression, FileCompression::Snappy);
        assert_eq!(s.retention, Some(Duration::from_secs(60)));
        assert!(!s.table);
        let d = ExportSettings::from_config(&TopicConfig::default());
        assert!(!d.enabled);
        let mut t = std::collections::BTreeMap::new();
        t.insert("table.format".to_string(), "iceberg".to_string());
        let t = ExportSettings::from_config(&TopicConfig::from_settings(&t).unwrap());
        assert!(t.enabled && t.table, "a table is exported");
        assert_eq!(t.bucket, Some(TimeBucket::Day), "by day unless told");
        assert!(!t.upsert, "every record a row unless told");
        let mut u = std::collections::BTreeMap::new();
        u.insert("table.format".to_string(), "iceberg".to_string());
        u.insert("table.mode".to_string(), "upsert".to_string());
        assert!(ExportSettings::from_config(&TopicConfig::from_settings(&u).unwrap()).upsert);
        u.insert("table.mode".to_string(), "merge".to_string());
        assert!(
            TopicConfig::from_settings(&u).is_err(),
            "an unknown mode is refused"
        );
        assert_eq!(TimeBucket::Day.of(-1), -1);
        assert_eq!(TimeBucket::Hour.of(2 * HOUR_MS + 5), 2);
        assert_eq!(d.retention, None);
        assert_eq!(d.file.compression, FileCompression::Zstd);
    }
}
