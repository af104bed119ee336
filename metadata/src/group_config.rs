//! Group configuration (Kafka's GROUP config resource, type 32): the keys
//! Kafka defines per group, their defaults and bounds, and validation.
//! Stored in the model per group id ([`crate::state::GroupsState`]'s
//! `configs`), altered by [`crate::command::Command::AlterGroupConfig`]
//! and read by coordinators through `MetaApi::group_configs`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::MetaError;
use crate::topic_config::{at_least, one_of};

/// The Kafka type of a group config (as DescribeConfigs names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupConfigType {
    Int,
    String,
}

/// One known key: its default and the range Kafka's group coordinator
/// allows (`group.consumer.min.session.timeout.ms` and the like, at their
/// defaults).
struct Key {
    name: &'static str,
    default: &'static str,
    kind: GroupConfigType,
    check: fn(&str) -> Result<(), String>,
    doc: &'static str,
}

/// An `int` between `min` and `max`, both included.
fn int_between(v: &str, min: i64, max: i64) -> Result<(), String> {
    at_least(v, min)?;
    match v.parse::<i64>() {
        Ok(n) if n <= max => Ok(()),
        _ => Err(format!("{v} is above the maximum {max}")),
    }
}

/// `share.auto.offset.reset`: `latest`, `earliest` or `by_duration:` and an
/// ISO-8601 duration (`PnDTnHnMn.nS`, not negative), as Kafka takes it.
fn auto_offset_reset(v: &str) -> Result<(), String> {
    match v.strip_prefix("by_duration:") {
        Some(d) => iso_duration_ms(d)
            .map(|_| ())
            .ok_or_else(|| format!("{d:?} is not an ISO-8601 duration such as PT1H or P1DT30M")),
        None => one_of(v, &["latest", "earliest"]),
    }
}

/// The milliseconds of an ISO-8601 duration `P[nD][T[nH][nM][n[.n]S]]`
/// (days, hours, minutes, seconds; not negative), or `None`.
pub fn iso_duration_ms(s: &str) -> Option<u64> {
    let rest = s.strip_prefix('P').or_else(|| s.strip_prefix('p'))?;
    let (date, time) = match rest.split_once(['T', 't']) {
        Some((d, t)) if !t.is_empty() => (d, Some(t)),
        Some(_) => return None,
        None => (rest, None),
    };
    let mut total: f64 = 0.0;
    let mut parts = 0;
    let mut take = |text: &str, units: &[(char, f64)]| -> Option<()> {
        let mut number = String::new();
        let mut next_unit = 0;
        for c in text.chars() {
            if c.is_ascii_digit() || c == '.' {
                number.push(c);
                continue;
            }
            let c = c.to_ascii_uppercase();
            let at = units[next_unit..].iter().position(|(u, _)| *u == c)? + next_unit;
            let n: f64 = number.parse().ok()?;
            // Only seconds may have a fraction.
            if number.contains('.') && c != 'S' {
                return None;
            }
            total += n * units[at].1;
            parts += 1;
            next_unit = at + 1;
            number.clear();
        }
        number.is_empty().then_some(())
    };
    take(date, &[('D', 86_400_000.0)])?;
    if let Some(t) = time {
        take(t, &[('H', 3_600_000.0), ('M', 60_000.0), ('S', 1_000.0)])?;
    }
    (parts > 0 && total.is_finite() && total < u64::MAX as f64).then_some(total as u64)
}

pub const CONSUMER_SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";
pub const SHARE_SESSION_TIMEOUT_MS: &str = "share.session.timeout.ms";
pub const SHARE_HEARTBEAT_INTERVAL_MS: &str = "share.heartbeat.interval.ms";
pub const SHARE_RECORD_LOCK_DURATION_MS: &str = "share.record.lock.duration.ms";
pub const SHARE_DELIVERY_COUNT_LIMIT: &str = "share.delivery.count.limit";
pub const SHARE_AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";
pub const SHARE_ISOLATION_LEVEL: &str = "share.isolation.level";
pub const FLOE_FILTER: &str = "floe.filter";
pub const FLOE_RETRY_BACKOFF_BASE_MS: &str = "floe.retry.backoff.base.ms";
pub const FLOE_RETRY_BACKOFF_MAX_MS: &str = "floe.retry.backoff.max.ms";
pub const FLOE_DLQ_TOPIC: &str = "floe.dlq.topic";

/// The longest redelivery backoff (one day).
const MAX_BACKOFF_MS: i64 = 86_400_000;

/// `floe.dlq.topic`: empty (none) or a valid topic name.
fn dlq_topic(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    crate::state::validate_topic_name(v).map_err(|e| e.to_string())
}

const KEYS: &[Key] = &[
    Key {
        name: CONSUMER_SESSION_TIMEOUT_MS,
        default: "45000",
        kind: GroupConfigType::Int,
        check: |v| int_between(v, 45_000, 60_000),
        doc: "a member that sends no heartbeat for this long is removed from the group (45000 to 60000, above consumer.heartbeat.interval.ms); Floe's classic coordinator uses it, once set, instead of the session timeout a member joins with",
    },
    Key {
        name: CONSUMER_HEARTBEAT_INTERVAL_MS,
        default: "5000",
        kind: GroupConfigType::Int,
        check: |v| int_between(v, 5_000, 15_000),
        doc: "how often members of a consumer-protocol group heartbeat (5000 to 15000)",
    },
    Key {
        name: SHARE_SESSION_TIMEOUT_MS,
        default: "45000",
        kind: GroupConfigType::Int,
        check: |v| int_between(v, 45_000, 60_000),
        doc: "a share-group member that sends no heartbeat for this long is removed (45000 to 60000, above share.heartbeat.interval.ms)",
    },
    Key {
        name: SHARE_HEARTBEAT_INTERVAL_MS,
        default: "5000",
        kind: GroupConfigType::Int,
        check: |v| int_between(v, 5_000, 15_000),
        doc: "how often share-group members heartbeat (5000 to 15000)",
    },
    Key {
        name: SHARE_RECORD_LOCK_DURATION_MS,
        default: "30000",
        kind: GroupConfigType::Int,
        check: |v| int_between(v, 15_000, 60_000),
        doc: "how long a record a share consumer acquired stays locked to it (15000 to 60000)",
    },
    Key {
        name: SHARE_DELIVERY_COUNT_LIMIT,
        default: "5",
        kind: GroupConfigType::Int,
        check: |v| int_between(v, 2, 10),
        doc: "a record delivered this many times to a share group is archived instead of being delivered again (2 to 10)",
    },
    Key {
        name: SHARE_AUTO_OFFSET_RESET,
        default: "latest",
        kind: GroupConfigType::String,
        check: auto_offset_reset,
        doc: "where a share group starts reading a partition: latest, earliest, or by_duration:<ISO-8601 duration> (the first record at most that old)",
    },
    Key {
        name: SHARE_ISOLATION_LEVEL,
        default: "read_uncommitted",
        kind: GroupConfigType::String,
        check: |v| one_of(v, &["read_committed", "read_uncommitted"]),
        doc: "whether a share group reads records of transactions not yet committed (read_uncommitted) or only committed ones (read_committed)",
    },
    Key {
        name: FLOE_FILTER,
        default: "*",
        kind: GroupConfigType::String,
        check: |v| crate::record_filter::RecordFilter::parse(v).map(|_| ()),
        doc: "which records a share group is sent: * (all), or alternatives joined by ||, each a tag (matched against the floe-tag header) or header=value; others are archived for the group when they enter its window",
    },
    Key {
        name: FLOE_RETRY_BACKOFF_BASE_MS,
        default: "0",
        kind: GroupConfigType::Int,
        check: |v| int_between(v, 0, MAX_BACKOFF_MS),
        doc: "Floe: a share-group record released (or whose lock expired) for the n-th time is delivered again only after min(base x 2^(n-1), floe.retry.backoff.max.ms) ms; 0: at once, as Kafka (0 to 86400000)",
    },
    Key {
        name: FLOE_RETRY_BACKOFF_MAX_MS,
        default: "600000",
        kind: GroupConfigType::Int,
        check: |v| int_between(v, 1, MAX_BACKOFF_MS),
        doc: "Floe: the longest redelivery backoff, in ms (1 to 86400000, at least floe.retry.backoff.base.ms)",
    },
    Key {
        name: FLOE_DLQ_TOPIC,
        default: "",
        kind: GroupConfigType::String,
        check: dlq_topic,
        doc: "Floe: the topic a share-group record is appended to (with floe-dlq-* headers) when it is rejected or reaches share.delivery.count.limit, before it is archived; empty: none",
    },
];

fn find(name: &str) -> Result<&'static Key, MetaError> {
    KEYS.iter()
        .find(|k| k.name == name)
        .ok_or_else(|| MetaError::InvalidConfig(format!("unknown group config name: {name}")))
}

/// A group's explicit settings (keys not set take their defaults).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupConfigs {
    overrides: BTreeMap<String, String>,
}

/// One described group config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfigEntry {
    pub name: &'static str,
    pub value: String,
    pub is_default: bool,
    pub default: &'static str,
    pub kind: GroupConfigType,
    pub doc: &'static str,
}

impl GroupConfigs {
    /// Rebuilds a group's configs from `(name, value)` pairs as a
    /// description lists them: pairs of unknown keys or values that do not
    /// pass (from a node of another version) are left out.
    pub fn from_described<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut c = GroupConfigs::default();
        for (name, value) in pairs {
            if find(name).is_ok_and(|key| (key.check)(value).is_ok()) {
                c.overrides.insert(name.to_string(), value.to_string());
            }
        }
        c
    }

    /// Sets and removes keys, all or nothing: every key must be known and
    /// every value within its bounds, and the values in force afterwards
    /// must keep each session timeout above its heartbeat interval (Kafka's
    /// rules, answered INVALID_CONFIG).
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
        for (session, heartbeat) in [
            (CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
            (SHARE_SESSION_TIMEOUT_MS, SHARE_HEARTBEAT_INTERVAL_MS),
        ] {
            if next.int(session) <= next.int(heartbeat) {
                return Err(MetaError::InvalidConfig(format!(
                    "{session} must be greater than {heartbeat}"
                )));
            }
        }
        if next.int(FLOE_RETRY_BACKOFF_BASE_MS) > next.int(FLOE_RETRY_BACKOFF_MAX_MS) {
            return Err(MetaError::InvalidConfig(format!(
                "{FLOE_RETRY_BACKOFF_BASE_MS} must not be above {FLOE_RETRY_BACKOFF_MAX_MS}"
            )));
        }
        *self = next;
        Ok(())
    }

    /// The value in force for `name`, or `None` for an unknown key.
    pub fn get(&self, name: &str) -> Option<&str> {
        let key = KEYS.iter().find(|k| k.name == name)?;
        Some(self.overrides.get(name).map_or(key.default, |v| v.as_str()))
    }

    /// Whether `name` is set on the group (not its default).
    pub fn is_set(&self, name: &str) -> bool {
        self.overrides.contains_key(name)
    }

    /// An int key's value in force (its default if unknown or unreadable).
    fn int(&self, name: &str) -> u32 {
        let default = || {
            KEYS.iter()
                .find(|k| k.name == name)
                .and_then(|k| k.default.parse().ok())
                .unwrap_or(0)
        };
        self.get(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(default)
    }

    /// `consumer.session.timeout.ms` if set on the group.
    pub fn consumer_session_timeout_ms(&self) -> Option<u32> {
        self.is_set(CONSUMER_SESSION_TIMEOUT_MS)
            .then(|| self.int(CONSUMER_SESSION_TIMEOUT_MS))
    }

    pub fn consumer_heartbeat_interval_ms(&self) -> u32 {
        self.int(CONSUMER_HEARTBEAT_INTERVAL_MS)
    }

    pub fn share_session_timeout_ms(&self) -> u32 {
        self.int(SHARE_SESSION_TIMEOUT_MS)
    }

    pub fn share_heartbeat_interval_ms(&self) -> u32 {
        self.int(SHARE_HEARTBEAT_INTERVAL_MS)
    }

    pub fn share_record_lock_duration_ms(&self) -> u32 {
        self.int(SHARE_RECORD_LOCK_DURATION_MS)
    }

    pub fn share_delivery_count_limit(&self) -> u32 {
        self.int(SHARE_DELIVERY_COUNT_LIMIT)
    }

    /// `share.auto.offset.reset` as set: `latest`, `earliest` or
    /// `by_duration:…` (see [`iso_duration_ms`]).
    pub fn share_auto_offset_reset(&self) -> &str {
        self.get(SHARE_AUTO_OFFSET_RESET).unwrap_or("latest")
    }

    /// Whether `share.isolation.level` is `read_committed`.
    pub fn share_read_committed(&self) -> bool {
        self.get(SHARE_ISOLATION_LEVEL) == Some("read_committed")
    }

    /// `floe.filter` in force (`*` when not set or unreadable).
    pub fn floe_filter(&self) -> crate::record_filter::RecordFilter {
        self.get(FLOE_FILTER)
            .and_then(|v| crate::record_filter::RecordFilter::parse(v).ok())
            .unwrap_or_else(crate::record_filter::RecordFilter::all)
    }

    /// `floe.retry.backoff.base.ms` (0: no backoff).
    pub fn floe_retry_backoff_base_ms(&self) -> u32 {
        self.int(FLOE_RETRY_BACKOFF_BASE_MS)
    }

    /// `floe.retry.backoff.max.ms`.
    pub fn floe_retry_backoff_max_ms(&self) -> u32 {
        self.int(FLOE_RETRY_BACKOFF_MAX_MS)
    }

    /// `floe.dlq.topic`, if set to a topic.
    pub fn floe_dlq_topic(&self) -> Option<&str> {
        self.get(FLOE_DLQ_TOPIC).filter(|t| !t.is_empty())
    }

    /// Every known key with its value and whether it is the default.
    pub fn describe(&self) -> Vec<GroupConfigEntry> {
        KEYS.iter()
            .map(|k| GroupConfigEntry {
                name: k.name,
                value: self
                    .overrides
                    .get(k.name)
                    .cloned()
                    .unwrap_or_else(|| k.default.to_string()),
                is_default: !self.overrides.contains_key(k.name),
                default: k.default,
                kind: k.kind,
                doc: k.doc,
            })
            .collect()
    }

    /// The explicitly set keys.
    pub fn overrides(&self) -> &BTreeMap<String, String> {
        &self.overrides
    }

    pub fn is_empty(&self) -> bool {
        self.overrides.is_empty()
    }
}

/// Kafka's rule for a group id named in a config resource: not empty.
pub fn check_group_id(group: &str) -> Result<(), MetaError> {
    if group.is_empty() {
        return Err(MetaError::InvalidRequest(
            "a group config resource needs a group id".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_are_kafkas() {
        let c = GroupConfigs::default();
        assert_eq!(c.consumer_session_timeout_ms(), None);
        assert_eq!(c.consumer_heartbeat_interval_ms(), 5_000);
        assert_eq!(c.share_session_timeout_ms(), 45_000);
        assert_eq!(c.share_heartbeat_interval_ms(), 5_000);
        assert_eq!(c.share_record_lock_duration_ms(), 30_000);
        assert_eq!(c.share_delivery_count_limit(), 5);
        assert_eq!(c.share_auto_offset_reset(), "latest");
        assert!(!c.share_read_committed());
        assert!(c.describe().iter().all(|e| e.is_default));
        assert!(c.floe_filter().is_all());
        // Kafka's eight, then Floe's four (`floe.*`).
        assert_eq!(c.describe().len(), 12);
    }

    #[test]
    fn set_values_are_read_back_and_deleted_ones_return_to_the_default() {
        let mut c = GroupConfigs::default();
        c.alter(
            &m(&[
                (CONSUMER_SESSION_TIMEOUT_MS, "50000"),
                (SHARE_RECORD_LOCK_DURATION_MS, "15000"),
                (SHARE_AUTO_OFFSET_RESET, "by_duration:PT1H"),
                (SHARE_ISOLATION_LEVEL, "read_committed"),
                (SHARE_DELIVERY_COUNT_LIMIT, "10"),
                (FLOE_FILTER, "TagA || region=eu"),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(c.floe_filter().to_string(), "TagA || region=eu");
        assert_eq!(c.consumer_session_timeout_ms(), Some(50_000));
        assert_eq!(c.share_record_lock_duration_ms(), 15_000);
        assert_eq!(c.share_auto_offset_reset(), "by_duration:PT1H");
        assert!(c.share_read_committed());
        assert_eq!(c.share_delivery_count_limit(), 10);
        let d = c.describe();
        let e = d
            .iter()
            .find(|e| e.name == CONSUMER_SESSION_TIMEOUT_MS)
            .unwrap();
        assert!(!e.is_default);
        assert_eq!((e.value.as_str(), e.default), ("50000", "45000"));
        c.alter(&BTreeMap::new(), &[CONSUMER_SESSION_TIMEOUT_MS.into()])
            .unwrap();
        assert_eq!(c.consumer_session_timeout_ms(), None);
        let back = GroupConfigs::from_described(c.overrides().iter().map(|(k, v)| (&**k, &**v)));
        assert_eq!(back, c);
    }

    #[test]
    fn kafkas_bounds_and_rules_are_enforced_all_or_nothing() {
        let mut c = GroupConfigs::default();
        for (k, v) in [
            (CONSUMER_SESSION_TIMEOUT_MS, "44999"),
            (CONSUMER_SESSION_TIMEOUT_MS, "60001"),
            (CONSUMER_HEARTBEAT_INTERVAL_MS, "4999"),
            (SHARE_SESSION_TIMEOUT_MS, "abc"),
            (SHARE_HEARTBEAT_INTERVAL_MS, "15001"),
            (SHARE_RECORD_LOCK_DURATION_MS, "1000"),
            (SHARE_DELIVERY_COUNT_LIMIT, "1"),
            (SHARE_DELIVERY_COUNT_LIMIT, "11"),
            (SHARE_AUTO_OFFSET_RESET, "none"),
            (SHARE_AUTO_OFFSET_RESET, "by_duration:1h"),
            (SHARE_ISOLATION_LEVEL, "committed"),
            (FLOE_FILTER, "TagA && TagB"),
            (FLOE_FILTER, ""),
            (FLOE_RETRY_BACKOFF_BASE_MS, "-1"),
            (FLOE_RETRY_BACKOFF_BASE_MS, "86400001"),
            (FLOE_RETRY_BACKOFF_MAX_MS, "0"),
            (FLOE_RETRY_BACKOFF_BASE_MS, "700000"),
            (FLOE_DLQ_TOPIC, "no spaces"),
            (FLOE_DLQ_TOPIC, ".."),
            ("session.timeout.ms", "50000"),
        ] {
            let e = c
                .alter(&m(&[(SHARE_DELIVERY_COUNT_LIMIT, "3"), (k, v)]), &[])
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{k}={v}");
        }
        assert!(c.is_empty(), "nothing of a refused change is kept");
        let e = c.alter(&BTreeMap::new(), &["nope".into()]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        // Within Kafka's default bounds a session timeout (at least 45 s)
        // is always above its heartbeat interval (at most 15 s).
        c.alter(&m(&[(SHARE_HEARTBEAT_INTERVAL_MS, "15000")]), &[])
            .unwrap();
        c.alter(&m(&[(SHARE_SESSION_TIMEOUT_MS, "45000")]), &[])
            .unwrap();
        assert!(
            c.alter(
                &m(&[
                    (CONSUMER_SESSION_TIMEOUT_MS, "45000"),
                    (CONSUMER_HEARTBEAT_INTERVAL_MS, "15000")
                ]),
                &[]
            )
            .is_ok()
        );
        assert!(check_group_id("").is_err());
        assert!(check_group_id("g").is_ok());
    }

    #[test]
    fn floes_backoff_and_dead_letter_topic_are_read_back() {
        let mut c = GroupConfigs::default();
        assert_eq!(
            (
                c.floe_retry_backoff_base_ms(),
                c.floe_retry_backoff_max_ms(),
                c.floe_dlq_topic()
            ),
            (0, 600_000, None)
        );
        c.alter(
            &m(&[
                (FLOE_RETRY_BACKOFF_BASE_MS, "250"),
                (FLOE_RETRY_BACKOFF_MAX_MS, "1000"),
                (FLOE_DLQ_TOPIC, "orders.dlq"),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(
            (
                c.floe_retry_backoff_base_ms(),
                c.floe_retry_backoff_max_ms(),
                c.floe_dlq_topic()
            ),
            (250, 1_000, Some("orders.dlq"))
        );
        // The maximum may not go below the base in force.
        let e = c
            .alter(&m(&[(FLOE_RETRY_BACKOFF_MAX_MS, "100")]), &[])
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        // Set to empty: no dead-letter topic.
        c.alter(&m(&[(FLOE_DLQ_TOPIC, "")]), &[]).unwrap();
        assert_eq!(c.floe_dlq_topic(), None);
    }

    #[test]
    fn iso_durations_as_kafka_takes_them() {
        assert_eq!(iso_duration_ms("PT1H"), Some(3_600_000));
        assert_eq!(iso_duration_ms("P1DT30M"), Some(86_400_000 + 1_800_000));
        assert_eq!(iso_duration_ms("PT0.5S"), Some(500));
        assert_eq!(iso_duration_ms("P2D"), Some(172_800_000));
        for bad in [
            "", "P", "PT", "1H", "PT1D", "P1H", "PT1M1H", "P-1D", "PT1.5M",
        ] {
            assert_eq!(iso_duration_ms(bad), None, "{bad:?}");
        }
    }
}
