//! Topic configuration: the Kafka keys Floe honours, their defaults, and validation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::MetaError;

/// One known configuration key.
struct Key {
    name: &'static str,
    default: &'static str,
    check: fn(&str) -> Result<(), String>,
    doc: &'static str,
}

pub(crate) fn at_least(v: &str, min: i64) -> Result<(), String> {
    match v.parse::<i64>() {
        Ok(n) if n >= min => Ok(()),
        Ok(n) => Err(format!("{n} is below the minimum {min}")),
        Err(_) => Err(format!("{v:?} is not an integer")),
    }
}

fn fits_i32(v: &str) -> Result<(), String> {
    match v.parse::<i64>() {
        Ok(n) if n <= i32::MAX as i64 => Ok(()),
        _ => Err(format!("{v} does not fit a 32-bit integer")),
    }
}

pub(crate) fn one_of(v: &str, allowed: &[&str]) -> Result<(), String> {
    if allowed.contains(&v) {
        Ok(())
    } else {
        Err(format!("{v:?} is not one of {allowed:?}"))
    }
}

fn ratio(v: &str) -> Result<(), String> {
    match v.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(()),
        Ok(x) => Err(format!("{x} is not between 0 and 1")),
        Err(_) => Err(format!("{v:?} is not a number")),
    }
}

/// The values of `compression.type`, as Kafka names them.
pub const COMPRESSION_TYPES: [&str; 6] =
    ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"];

const KEYS: &[Key] = &[
    Key {
        name: "retention.ms",
        default: "604800000",
        check: |v| at_least(v, -1),
        doc: "delete data older than this (-1: keep forever)",
    },
    Key {
        name: "retention.bytes",
        default: "-1",
        check: |v| at_least(v, -1),
        doc: "delete the oldest data beyond this size per partition (-1: no limit)",
    },
    Key {
        name: "max.message.bytes",
        default: "1048588",
        check: |v| at_least(v, 0).and_then(|()| fits_i32(v)),
        doc: "largest record batch accepted",
    },
    Key {
        name: "cleanup.policy",
        default: "delete",
        check: |v| {
            v.split(',')
                .try_for_each(|p| one_of(p.trim(), &["delete", "compact"]))
        },
        doc: "delete (by retention.ms/retention.bytes) and/or compact (keep the latest record of each key); a compact-only topic is never deleted by retention",
    },
    Key {
        name: "compression.type",
        default: "producer",
        check: |v| one_of(v, &COMPRESSION_TYPES),
        doc: "codec of stored batches: producer (kept as the producer compressed them), or uncompressed, gzip, snappy, lz4, zstd (batches in another codec are recompressed on produce)",
    },
    Key {
        name: "message.timestamp.type",
        default: "CreateTime",
        check: |v| one_of(v, &["CreateTime", "LogAppendTime"]),
        doc: "whose clock sets record timestamps",
    },
    Key {
        name: "segment.bytes",
        default: "1073741824",
        check: |v| at_least(v, 14).and_then(|()| fits_i32(v)),
        doc: "target size of a compacted segment",
    },
    Key {
        name: "segment.ms",
        default: "604800000",
        check: |v| at_least(v, 1),
        doc: "roll a segment after this long",
    },
    Key {
        name: "min.compaction.lag.ms",
        default: "0",
        check: |v| at_least(v, 0),
        doc: "minimum age before a record may be compacted",
    },
    Key {
        name: "max.compaction.lag.ms",
        default: "9223372036854775807",
        check: |v| at_least(v, 1),
        doc: "longest a record may stay uncompacted: a compacted partition whose oldest dirty segment is older is cleaned whatever its dirty ratio",
    },
    Key {
        name: "min.cleanable.dirty.ratio",
        default: "0.5",
        check: ratio,
        doc: "a compacted partition is cleaned when its dirty (not yet cleaned) bytes are at least this share of its segments' bytes",
    },
    Key {
        name: "delete.retention.ms",
        default: "86400000",
        check: |v| at_least(v, 0),
        doc: "how long a delete tombstone stays in a compacted topic after the cleaning that first kept it",
    },
    Key {
        name: "export.enabled",
        default: "false",
        check: |v| one_of(v, &["true", "false"]),
        doc: "the indexer exports this topic to Parquet",
    },
    Key {
        name: "export.index",
        default: "[]",
        check: |v| crate::export_def::IndexDefinition::parse(v).map(|_| ()),
        doc: "typed columns extracted from JSON values: [{\"name\",\"path\",\"type\"}]",
    },
    Key {
        name: "export.roll.ms",
        default: "30000",
        check: |v| at_least(v, 100),
        doc: "longest time committed data waits before it is written to a Parquet file",
    },
    Key {
        name: "export.file.bytes",
        default: "134217728",
        check: |v| at_least(v, 1024),
        doc: "log bytes that make a full Parquet file",
    },
    Key {
        name: "export.row.group.rows",
        default: "65536",
        check: |v| at_least(v, 1).and_then(|()| fits_i32(v)),
        doc: "rows per Parquet row group",
    },
    Key {
        name: "export.compression",
        default: "zstd",
        check: |v| one_of(v, &["zstd", "snappy", "lz4", "gzip", "none"]),
        doc: "Parquet page compression",
    },
    Key {
        name: "export.retention.ms",
        default: "-1",
        check: |v| at_least(v, -1),
        doc: "delete exported files whose newest record is older than this (-1: keep forever)",
    },
    Key {
        name: TABLE_FORMAT,
        default: "none",
        check: |v| one_of(v, &["none", "iceberg"]),
        doc: "iceberg: the indexer keeps the topic as an Iceberg v2 table (the export's Parquet files are its data files; turns the export on)",
    },
    Key {
        name: "table.partition",
        default: "day",
        check: |v| one_of(v, &["day", "hour", "none"]),
        doc: "the Iceberg table's partition spec: day or hour of the record's timestamp, or none",
    },
    Key {
        name: "table.mode",
        default: "append",
        check: |v| one_of(v, &["append", "upsert"]),
        doc: "append: every record is a row of the table; upsert: one row per key and partition, the latest (a tombstone deletes the key), by Iceberg position deletes",
    },
    Key {
        name: "table.target.file.bytes",
        default: "134217728",
        check: |v| at_least(v, 0),
        doc: "the table's compaction rewrites a partition's small files of one hour into files of up to this size (0: no compaction)",
    },
    Key {
        name: "table.snapshot.max.age.ms",
        default: "432000000",
        check: |v| at_least(v, 60000),
        doc: "the table's snapshots older than this are expired (the current one is kept), and the files only they name are deleted",
    },
    // Kafka's keys for a broker's local disk and its replicas. Floe has
    // neither (every acknowledged batch is already in the object store,
    // which keeps the copies): they are taken and shown, so that configs
    // copied from a Kafka cluster apply, and change nothing.
    Key {
        name: "flush.messages",
        default: "9223372036854775807",
        check: |v| at_least(v, 1),
        doc: "no effect in Floe: every acknowledged batch is already durable in the object store (Kafka: fsync after this many messages)",
    },
    Key {
        name: "flush.ms",
        default: "9223372036854775807",
        check: |v| at_least(v, 0),
        doc: "no effect in Floe: every acknowledged batch is already durable in the object store (Kafka: fsync after this long)",
    },
    Key {
        name: "index.interval.bytes",
        default: "4096",
        check: |v| at_least(v, 0).and_then(|()| fits_i32(v)),
        doc: "no effect in Floe, which keeps no local offset index (Kafka: bytes between offset index entries)",
    },
    Key {
        name: "segment.index.bytes",
        default: "10485760",
        check: |v| at_least(v, 4).and_then(|()| fits_i32(v)),
        doc: "no effect in Floe, which keeps no local offset index (Kafka: size of a segment's index file)",
    },
    Key {
        name: "segment.jitter.ms",
        default: "0",
        check: |v| at_least(v, 0),
        doc: "no effect in Floe (Kafka: random jitter subtracted from segment.ms)",
    },
    Key {
        name: "file.delete.delay.ms",
        default: "60000",
        check: |v| at_least(v, 0),
        doc: "no effect in Floe: objects are deleted once no index entry names them (Kafka: wait before deleting a file)",
    },
    Key {
        name: "preallocate",
        default: "false",
        check: |v| one_of(v, &["true", "false"]),
        doc: "no effect in Floe, which writes no local segment files (Kafka: preallocate segment files)",
    },
    Key {
        name: "min.insync.replicas",
        default: "1",
        check: |v| at_least(v, 1).and_then(|()| fits_i32(v)),
        doc: "no effect in Floe: a batch is acknowledged once the object store holds it, with the store's own copies (Kafka: replicas an acks=all write needs)",
    },
    Key {
        name: "unclean.leader.election.enable",
        default: "false",
        check: |v| one_of(v, &["true", "false"]),
        doc: "no effect in Floe: a partition's new owner reads the whole log from the object store, so no acknowledged record is ever lost (Kafka: let an out-of-sync replica lead)",
    },
    Key {
        name: "leader.replication.throttled.replicas",
        default: "",
        check: |_| Ok(()),
        doc: "no effect in Floe, which has no replicas to throttle",
    },
    Key {
        name: "follower.replication.throttled.replicas",
        default: "",
        check: |_| Ok(()),
        doc: "no effect in Floe, which has no replicas to throttle",
    },
    Key {
        name: DELAYED_DELIVERY,
        default: "false",
        check: |v| one_of(v, &["true", "false"]),
        doc: "hold records with a floe-deliver-at or floe-delay-ms header due later in the partition's log and append them to the topic when due (new offset, key, value and headers kept), so classic consumers see them only then; refused with cleanup.policy compact",
    },
];

/// The topic config that turns on delayed delivery for classic consumers
/// (`docs/queues.md`, "Delayed topics for classic consumers").
pub const DELAYED_DELIVERY: &str = "floe.delayed.delivery";

/// The key that makes a topic an Iceberg table.
pub const TABLE_FORMAT: &str = "table.format";

/// A topic's explicit settings (keys not set take their defaults).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    overrides: BTreeMap<String, String>,
}

/// One entry of a described configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: &'static str,
    pub value: String,
    pub is_default: bool,
    pub doc: &'static str,
}

impl TopicConfig {
    /// Validates `settings` and builds a config from them.
    pub fn from_settings(settings: &BTreeMap<String, String>) -> Result<Self, MetaError> {
        let mut c = TopicConfig::default();
        c.alter(settings, &[])?;
        Ok(c)
    }

    /// Rebuilds a config from `(name, value)` pairs as a topic's description
    /// lists them (the broker and the indexer read topics this way). Each
    /// pair goes through the same checks as [`TopicConfig::alter`], one at a
    /// time: an unknown key or a value that does not pass (from a node of
    /// another version) is left out and the key keeps its default, instead
    /// of discarding the other settings.
    pub fn from_described<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut c = TopicConfig::default();
        for (name, value) in pairs {
            if find(name).is_ok_and(|key| (key.check)(value).is_ok()) {
                c.overrides.insert(name.to_string(), value.to_string());
            }
        }
        c
    }

    /// Sets and removes keys; all-or-nothing.
    pub fn alter(
        &mut self,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<(), MetaError> {
        for (k, v) in set {
            let key = find(k)?;
            (key.check)(v).map_err(|why| MetaError::InvalidConfig(format!("{k}: {why}")))?;
        }
        for k in delete {
            find(k)?;
        }
        let mut next = self.clone();
        for k in delete {
            next.overrides.remove(k);
        }
        for (k, v) in set {
            next.overrides.insert(k.clone(), v.clone());
        }
        next.check_together()?;
        self.check_table_change(&next)?;
        *self = next;
        Ok(())
    }

    /// The rules between keys: a delayed topic cannot be compacted (the
    /// cleaner would keep a delayed entry's key only, and a re-append would
    /// hide newer records of its key).
    fn check_together(&self) -> Result<(), MetaError> {
        if self.delayed_delivery() && self.compacted() {
            return Err(MetaError::InvalidConfig(format!(
                "{DELAYED_DELIVERY}=true cannot go with a cleanup.policy that names compact: \
                 delayed records are re-appended under their key later, which compaction \
                 cannot order"
            )));
        }
        Ok(())
    }

    /// What Iceberg allows a table's columns: a typed column of
    /// `export.index` keeps its type while it is in the index (Iceberg only
    /// widens int to long and float to double, which the index's types
    /// never need). Removing the column and adding it back with another
    /// type is allowed: that is a new column.
    fn check_table_change(&self, next: &TopicConfig) -> Result<(), MetaError> {
        if !self.iceberg_table() && !next.iceberg_table() {
            return Ok(());
        }
        let before = self.export_index();
        for c in &next.export_index().columns {
            if let Some(old) = before
                .columns
                .iter()
                .find(|o| o.name.eq_ignore_ascii_case(&c.name) && o.kind != c.kind)
            {
                return Err(MetaError::InvalidConfig(format!(
                    "export.index: column {:?} is {} in the topic's Iceberg table, and Iceberg \
                     cannot change a {} column to {}; remove the column from export.index first \
                     (older snapshots keep its data) and add it back with the new type, or give \
                     the new type a new name",
                    c.name,
                    old.kind.name(),
                    old.kind.name(),
                    c.kind.name()
                )));
            }
        }
        Ok(())
    }

    /// The table's partitioning (`table.partition`): `day`, `hour` or `none`.
    pub fn table_partition(&self) -> &str {
        self.get("table.partition").unwrap_or("day")
    }

    /// Whether the table keeps one row per key (`table.mode=upsert`).
    pub fn table_upsert(&self) -> bool {
        self.get("table.mode") == Some("upsert")
    }

    /// The size the table's compaction writes files up to
    /// (`table.target.file.bytes`); 0: no compaction.
    pub fn table_target_file_bytes(&self) -> i64 {
        self.get_i64("table.target.file.bytes")
    }

    /// How old the table's snapshots grow before they are expired
    /// (`table.snapshot.max.age.ms`).
    pub fn table_snapshot_max_age_ms(&self) -> i64 {
        self.get_i64("table.snapshot.max.age.ms")
    }

    /// Whether the indexer keeps the topic as an Iceberg table
    /// (`table.format=iceberg`).
    pub fn iceberg_table(&self) -> bool {
        self.get(TABLE_FORMAT) == Some("iceberg")
    }

    /// Whether the topic holds records not due yet (`floe.delayed.delivery`).
    pub fn delayed_delivery(&self) -> bool {
        self.get(DELAYED_DELIVERY) == Some("true")
    }

    /// The value in force for `name`, or `None` for an unknown key.
    pub fn get(&self, name: &str) -> Option<&str> {
        let key = KEYS.iter().find(|k| k.name == name)?;
        Some(self.overrides.get(name).map_or(key.default, |v| v.as_str()))
    }

    fn get_i64(&self, name: &str) -> i64 {
        self.get(name).and_then(|v| v.parse().ok()).unwrap_or(-1)
    }

    pub fn retention_ms(&self) -> i64 {
        self.get_i64("retention.ms")
    }

    pub fn retention_bytes(&self) -> i64 {
        self.get_i64("retention.bytes")
    }

    pub fn max_message_bytes(&self) -> i64 {
        self.get_i64("max.message.bytes")
    }

    pub fn segment_bytes(&self) -> i64 {
        self.get_i64("segment.bytes")
    }

    pub fn segment_ms(&self) -> i64 {
        self.get_i64("segment.ms")
    }

    pub fn delete_retention_ms(&self) -> i64 {
        self.get_i64("delete.retention.ms")
    }

    pub fn min_compaction_lag_ms(&self) -> i64 {
        self.get_i64("min.compaction.lag.ms")
    }

    pub fn max_compaction_lag_ms(&self) -> i64 {
        self.get_i64("max.compaction.lag.ms")
    }

    pub fn min_cleanable_dirty_ratio(&self) -> f64 {
        self.get("min.cleanable.dirty.ratio")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.5)
    }

    /// Whether `cleanup.policy` names `compact` (alone or with `delete`):
    /// every record produced to the topic needs a key, as in Kafka.
    pub fn compacted(&self) -> bool {
        let policy = self.get("cleanup.policy").unwrap_or("delete");
        policy.split(',').any(|p| p.trim() == "compact")
    }

    /// Whether `cleanup.policy` asks for compaction and not deletion
    /// (`compact` alone): `retention.ms`/`retention.bytes` do not apply, as
    /// in Kafka (`compact,delete` compacts and deletes by both).
    pub fn compact_only(&self) -> bool {
        let policy = self.get("cleanup.policy").unwrap_or("delete");
        let mut parts = policy.split(',').map(str::trim);
        parts.clone().any(|p| p == "compact") && !parts.any(|p| p == "delete")
    }

    /// The codec batches are stored in (`compression.type`): `None` for
    /// `producer` (as the producer compressed them), else one of
    /// `uncompressed`, `gzip`, `snappy`, `lz4`, `zstd`.
    pub fn compression_type(&self) -> Option<&str> {
        self.get("compression.type").filter(|v| *v != "producer")
    }

    pub fn log_append_time(&self) -> bool {
        self.get("message.timestamp.type") == Some("LogAppendTime")
    }

    /// Whether the indexer exports this topic.
    pub fn export_enabled(&self) -> bool {
        self.get("export.enabled") == Some("true")
    }

    /// The export index definition (validated when it was set).
    pub fn export_index(&self) -> crate::export_def::IndexDefinition {
        crate::export_def::IndexDefinition::parse(self.get("export.index").unwrap_or("[]"))
            .unwrap_or_default()
    }

    pub fn export_roll_ms(&self) -> i64 {
        self.get_i64("export.roll.ms")
    }

    pub fn export_file_bytes(&self) -> i64 {
        self.get_i64("export.file.bytes")
    }

    pub fn export_row_group_rows(&self) -> i64 {
        self.get_i64("export.row.group.rows")
    }

    pub fn export_compression(&self) -> &str {
        self.get("export.compression").unwrap_or("zstd")
    }

    pub fn export_retention_ms(&self) -> i64 {
        self.get_i64("export.retention.ms")
    }

    /// Every known key with its value and whether it is the default.
    pub fn describe(&self) -> Vec<ConfigEntry> {
        KEYS.iter()
            .map(|k| ConfigEntry {
                name: k.name,
                value: self
                    .overrides
                    .get(k.name)
                    .cloned()
                    .unwrap_or_else(|| k.default.to_string()),
                is_default: !self.overrides.contains_key(k.name),
                doc: k.doc,
            })
            .collect()
    }

    /// The explicitly set keys.
    pub fn overrides(&self) -> &BTreeMap<String, String> {
        &self.overrides
    }
}

fn find(name: &str) -> Result<&'static Key, MetaError> {
    KEYS.iter()
        .find(|k| k.name == name)
        .ok_or_else(|| MetaError::InvalidConfig(format!("unknown topic config {name:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_disk_and_replica_keys_are_taken_and_say_they_do_nothing() {
        let c = TopicConfig::from_settings(&m(&[
            ("flush.ms", "12345678"),
            ("min.insync.replicas", "2"),
            ("preallocate", "true"),
        ]))
        .expect("Kafka's keys are taken");
        let described = c.describe();
        let flush = described
            .iter()
            .find(|e| e.name == "flush.ms")
            .expect("described");
        assert_eq!(
            (flush.value.as_str(), flush.is_default),
            ("12345678", false)
        );
        assert!(flush.doc.starts_with("no effect in Floe"), "{}", flush.doc);
        // Still checked as Kafka checks them.
        for bad in [
            ("flush.ms", "-5"),
            ("min.insync.replicas", "0"),
            ("preallocate", "yes"),
        ] {
            assert!(TopicConfig::from_settings(&m(&[bad])).is_err(), "{bad:?}");
        }
        // A key Kafka does not have is still refused.
        assert!(TopicConfig::from_settings(&m(&[("flush.never", "1")])).is_err());
    }

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_and_overrides() {
        let c = TopicConfig::from_settings(&m(&[("retention.ms", "1000")])).unwrap();
        assert_eq!(c.retention_ms(), 1000);
        assert_eq!(c.retention_bytes(), -1);
        assert_eq!(c.max_message_bytes(), 1_048_588);
        assert!(!c.log_append_time());
        let d = c.describe();
        let r = d.iter().find(|e| e.name == "retention.ms").unwrap();
        assert!(!r.is_default);
        assert!(
            d.iter()
                .find(|e| e.name == "cleanup.policy")
                .unwrap()
                .is_default
        );
    }

    #[test]
    fn compression_type_takes_kafkas_values() {
        assert_eq!(
            TopicConfig::default().get("compression.type"),
            Some("producer")
        );
        assert_eq!(TopicConfig::default().compression_type(), None);
        for v in COMPRESSION_TYPES {
            let c = TopicConfig::from_settings(&m(&[("compression.type", v)])).unwrap();
            assert_eq!(c.compression_type(), (v != "producer").then_some(v));
        }
    }

    #[test]
    fn compact_only_is_compact_without_delete() {
        let policy = |v: &str| TopicConfig::from_settings(&m(&[("cleanup.policy", v)])).unwrap();
        assert!(!TopicConfig::default().compact_only());
        assert!(!TopicConfig::default().compacted());
        assert!(policy("compact").compacted());
        assert!(policy("delete, compact").compacted());
        assert!(!policy("delete").compacted());
        assert!(policy("compact").compact_only());
        assert!(!policy("compact,delete").compact_only());
        assert!(!policy("delete, compact").compact_only());
        assert!(!policy("delete").compact_only());
    }

    #[test]
    fn compaction_settings_have_kafkas_defaults() {
        let c = TopicConfig::default();
        assert_eq!(c.delete_retention_ms(), 86_400_000);
        assert_eq!(c.min_compaction_lag_ms(), 0);
        assert_eq!(c.max_compaction_lag_ms(), i64::MAX);
        assert_eq!(c.min_cleanable_dirty_ratio(), 0.5);
        let c = TopicConfig::from_settings(&m(&[
            ("min.cleanable.dirty.ratio", "0.01"),
            ("max.compaction.lag.ms", "1000"),
        ]))
        .unwrap();
        assert_eq!(c.min_cleanable_dirty_ratio(), 0.01);
        assert_eq!(c.max_compaction_lag_ms(), 1000);
    }

    #[test]
    fn an_iceberg_table_refuses_a_type_change_and_takes_retention_and_compaction_settings() {
        let idx = |t: &str| format!(r#"[{{"name":"amount","path":"$.amount","type":"{t}"}}]"#);
        let mut c = TopicConfig::from_settings(&m(&[
            (TABLE_FORMAT, "iceberg"),
            ("export.index", &idx("float64")),
        ]))
        .unwrap();
        assert!(c.iceberg_table());
        let err = c
            .alter(&m(&[("export.index", &idx("string"))]), &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"amount\" is float64") && err.contains("to string"),
            "{err}"
        );
        // Removed, then added back with the new type: a new column.
        c.alter(&m(&[("export.index", "[]")]), &[]).unwrap();
        c.alter(&m(&[("export.index", &idx("string"))]), &[])
            .unwrap();
        // Turning the table on with a changed type at the same time is refused too.
        let mut plain = TopicConfig::from_settings(&m(&[("export.index", &idx("int64"))])).unwrap();
        assert!(
            plain
                .alter(
                    &m(&[(TABLE_FORMAT, "iceberg"), ("export.index", &idx("bool"))]),
                    &[]
                )
                .is_err()
        );
        // Without a table, exports change types freely.
        plain
            .alter(&m(&[("export.index", &idx("bool"))]), &[])
            .unwrap();
        // Files leave a table by retention, through a snapshot and the expiry of the older ones.
        c.alter(&m(&[("export.retention.ms", "1000")]), &[])
            .unwrap();
        assert_eq!(c.export_retention_ms(), 1000);
        assert_eq!(c.table_target_file_bytes(), 134_217_728);
        assert_eq!(c.table_snapshot_max_age_ms(), 432_000_000);
        c.alter(
            &m(&[
                ("table.target.file.bytes", "0"),
                ("table.snapshot.max.age.ms", "60000"),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(c.table_target_file_bytes(), 0);
        assert!(
            c.alter(&m(&[("table.snapshot.max.age.ms", "59999")]), &[])
                .is_err()
        );
        assert!(TopicConfig::from_settings(&m(&[(TABLE_FORMAT, "delta")])).is_err());
    }

    #[test]
    fn described_pairs_keep_what_passes_the_checks_one_by_one() {
        let c = TopicConfig::from_described([
            ("retention.ms", "1000"),
            ("segment.bytes", "1"),
            ("no.such.key", "1"),
            ("message.timestamp.type", "LogAppendTime"),
        ]);
        assert_eq!(c.retention_ms(), 1000);
        assert_eq!(c.segment_bytes(), 1_073_741_824, "too small: the default");
        assert!(c.log_append_time());
        assert_eq!(c.get("no.such.key"), None);
        // A full description (defaults included) gives back the same values.
        let d = c.describe();
        let again = TopicConfig::from_described(d.iter().map(|e| (e.name, e.value.as_str())));
        for e in &d {
            assert_eq!(again.get(e.name), Some(e.value.as_str()), "{}", e.name);
        }
    }

    #[test]
    fn invalid_values_and_unknown_keys_are_refused_whole() {
        let mut c = TopicConfig::default();
        for bad in [
            m(&[("retention.ms", "-2")]),
            m(&[("retention.ms", "soon")]),
            m(&[("cleanup.policy", "shred")]),
            m(&[("message.timestamp.type", "Whenever")]),
            m(&[("compression.type", "brotli")]),
            m(&[("compression.type", "none")]),
            m(&[("min.cleanable.dirty.ratio", "1.5")]),
            m(&[("min.cleanable.dirty.ratio", "half")]),
            m(&[("max.compaction.lag.ms", "0")]),
            m(&[("delete.retention.ms", "-1")]),
            m(&[("max.message.bytes", "99999999999")]),
            m(&[("no.such.key", "1")]),
            m(&[("retention.ms", "5"), ("segment.bytes", "1")]),
        ] {
            let err = c.alter(&bad, &[]).unwrap_err();
            assert!(matches!(err, MetaError::InvalidConfig(_)), "{bad:?}");
        }
        assert_eq!(c.retention_ms(), 604_800_000, "nothing applied");
        c.alter(&m(&[("cleanup.policy", "compact,delete")]), &[])
            .unwrap();
        c.alter(&BTreeMap::new(), &["cleanup.policy".into()])
            .unwrap();
        assert_eq!(c.get("cleanup.policy"), Some("delete"));
    }

    #[test]
    fn delayed_delivery_is_refused_with_compaction_however_it_is_set() {
        assert!(!TopicConfig::default().delayed_delivery());
        let refused = |r: Result<(), MetaError>| {
            let e = r.unwrap_err();
            assert!(
                matches!(&e, MetaError::InvalidConfig(m) if m.contains("floe.delayed.delivery") && m.contains("compact")),
                "{e:?}"
            );
        };
        refused(
            TopicConfig::from_settings(&m(&[
                (DELAYED_DELIVERY, "true"),
                ("cleanup.policy", "delete,compact"),
            ]))
            .map(|_| ()),
        );
        let mut c = TopicConfig::from_settings(&m(&[(DELAYED_DELIVERY, "true")])).unwrap();
        assert!(c.delayed_delivery());
        refused(c.alter(&m(&[("cleanup.policy", "compact")]), &[]));
        assert!(!c.compacted(), "nothing applied");
        let mut c = TopicConfig::from_settings(&m(&[("cleanup.policy", "compact")])).unwrap();
        refused(c.alter(&m(&[(DELAYED_DELIVERY, "true")]), &[]));
        // Both changed at once is checked on the result.
        c.alter(
            &m(&[(DELAYED_DELIVERY, "true")]),
            &["cleanup.policy".into()],
        )
        .unwrap();
        assert!(c.delayed_delivery() && !c.compacted());
        assert!(c.alter(&m(&[(DELAYED_DELIVERY, "yes")]), &[]).is_err());
    }
}
