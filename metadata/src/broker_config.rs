//! Dynamic broker configs (Kafka's BROKER config resource, type 4, as
//! AlterConfigs and IncrementalAlterConfigs set them): per broker id, or
//! for every broker with the empty name (Kafka's cluster-wide default).
//!
//! Floe's processes take their settings from flags and the environment, and
//! apply none of these keys; they are kept in the model
//! ([`crate::state::BrokerConfigsState`]) and described back
//! with Kafka's dynamic sources, so that tools which set Kafka's dynamic
//! broker configs (`kafka-configs.sh --entity-type brokers`, librdkafka's
//! admin tests) work, and say in their documentation that they change
//! nothing. Only keys Kafka lets a running broker change are taken; any
//! other is INVALID_CONFIG, as in Kafka.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::MetaError;

/// The Kafka type of a dynamic broker config (as DescribeConfigs names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerConfigType {
    Boolean,
    String,
    Int,
    Short,
    Long,
    Double,
    List,
    Password,
}

use BrokerConfigType as T;

/// Kafka's dynamically updatable broker configs (listener, SSL and SASL
/// settings, log defaults, thread pools, connection limits, replication
/// throttles), with their types.
const KEYS: &[(&str, BrokerConfigType)] = &[
    // Thread pools.
    ("background.threads", T::Int),
    ("num.io.threads", T::Int),
    ("num.network.threads", T::Int),
    ("num.recovery.threads.per.data.dir", T::Int),
    ("num.replica.fetchers", T::Int),
    ("log.cleaner.threads", T::Int),
    // Log defaults for topics.
    ("log.cleanup.policy", T::List),
    ("log.retention.ms", T::Long),
    ("log.retention.minutes", T::Int),
    ("log.retention.hours", T::Int),
    ("log.retention.bytes", T::Long),
    ("log.segment.bytes", T::Int),
    ("log.roll.ms", T::Long),
    ("log.roll.hours", T::Int),
    ("log.flush.interval.messages", T::Long),
    ("log.flush.interval.ms", T::Long),
    ("log.index.interval.bytes", T::Int),
    ("log.index.size.max.bytes", T::Int),
    ("log.message.timestamp.type", T::String),
    ("log.preallocate", T::Boolean),
    ("log.segment.delete.delay.ms", T::Long),
    ("log.cleaner.delete.retention.ms", T::Long),
    ("log.cleaner.min.compaction.lag.ms", T::Long),
    ("log.cleaner.max.compaction.lag.ms", T::Long),
    ("log.cleaner.min.cleanable.ratio", T::Double),
    ("log.cleaner.io.max.bytes.per.second", T::Double),
    ("log.cleaner.dedupe.buffer.size", T::Long),
    ("log.cleaner.backoff.ms", T::Long),
    ("message.max.bytes", T::Int),
    ("compression.type", T::String),
    ("min.insync.replicas", T::Int),
    ("unclean.leader.election.enable", T::Boolean),
    // Listeners, TLS and SASL.
    ("listeners", T::String),
    ("advertised.listeners", T::String),
    ("listener.security.protocol.map", T::String),
    ("ssl.keystore.type", T::String),
    ("ssl.keystore.location", T::String),
    ("ssl.keystore.password", T::Password),
    ("ssl.key.password", T::Password),
    ("ssl.truststore.type", T::String),
    ("ssl.truststore.location", T::String),
    ("ssl.truststore.password", T::Password),
    ("ssl.client.auth", T::String),
    ("ssl.enabled.protocols", T::List),
    ("ssl.cipher.suites", T::List),
    ("ssl.endpoint.identification.algorithm", T::String),
    ("ssl.principal.mapping.rules", T::String),
    ("sasl.enabled.mechanisms", T::List),
    ("sasl.jaas.config", T::Password),
    ("sasl.kerberos.service.name", T::String),
    ("sasl.kerberos.kinit.cmd", T::String),
    ("sasl.kerberos.ticket.renew.window.factor", T::Double),
    ("sasl.kerberos.ticket.renew.jitter", T::Double),
    ("sasl.kerberos.min.time.before.relogin", T::Long),
    ("sasl.kerberos.principal.to.local.rules", T::List),
    ("sasl.login.refresh.window.factor", T::Double),
    ("sasl.login.refresh.window.jitter", T::Double),
    ("sasl.login.refresh.min.period.seconds", T::Short),
    ("sasl.login.refresh.buffer.seconds", T::Short),
    // Connection limits.
    ("max.connections", T::Int),
    ("max.connections.per.ip", T::Int),
    ("max.connections.per.ip.overrides", T::String),
    ("max.connection.creation.rate", T::Int),
    // Replication throttles and metrics.
    ("leader.replication.throttled.rate", T::Long),
    ("follower.replication.throttled.rate", T::Long),
    ("replica.alter.log.dirs.io.max.bytes.per.second", T::Long),
    ("metric.reporters", T::List),
];

/// What every described dynamic broker config says of itself.
pub const DOC: &str = "no effect in Floe, whose processes take their settings from flags and the \
     environment (docs/configuration.md); kept and described as Kafka keeps a dynamic broker config";

impl BrokerConfigType {
    fn check(self, v: &str) -> Result<(), String> {
        let parsed = match self {
            T::Boolean => ["true", "false"].contains(&v).then_some(()),
            T::Int => v.parse::<i32>().ok().map(|_| ()),
            T::Short => v.parse::<i16>().ok().map(|_| ()),
            T::Long => v.parse::<i64>().ok().map(|_| ()),
            T::Double => v.parse::<f64>().ok().filter(|x| x.is_finite()).map(|_| ()),
            T::String | T::List | T::Password => Some(()),
        };
        parsed.ok_or_else(|| format!("{v:?} is not a valid {}", self.name()))
    }

    /// Kafka's name of the type (DescribeConfigs' `config_type` names).
    pub fn name(self) -> &'static str {
        match self {
            T::Boolean => "boolean",
            T::String => "string",
            T::Int => "int",
            T::Short => "short",
            T::Long => "long",
            T::Double => "double",
            T::List => "list",
            T::Password => "password",
        }
    }
}

/// The type of a dynamic broker config key, or INVALID_CONFIG for a key
/// Kafka does not let a running broker change.
pub fn key_type(name: &str) -> Result<BrokerConfigType, MetaError> {
    KEYS.iter()
        .find(|(k, _)| *k == name)
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            MetaError::InvalidConfig(format!(
                "{name} is not a dynamic broker config (Kafka's read-only broker settings are \
                 Floe's flags)"
            ))
        })
}

/// A broker resource's name: a broker id, or empty for every broker.
pub fn check_resource(name: &str) -> Result<(), MetaError> {
    if name.is_empty() || name.parse::<i32>().is_ok_and(|id| id >= 0) {
        Ok(())
    } else {
        Err(MetaError::InvalidRequest(format!(
            "broker resource {name:?} is neither a broker id nor empty (every broker)"
        )))
    }
}

/// The dynamic configs set on one broker resource.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerConfigs {
    overrides: BTreeMap<String, String>,
}

impl BrokerConfigs {
    /// Rebuilds them from `(name, value)` pairs as a description lists
    /// them: pairs of unknown keys or of values that do not pass (from a
    /// node of another version) are left out.
    pub fn from_described<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut c = BrokerConfigs::default();
        for (name, value) in pairs {
            if key_type(name).is_ok_and(|t| t.check(value).is_ok()) {
                c.overrides.insert(name.to_string(), value.to_string());
            }
        }
        c
    }

    /// Sets and removes keys, all or nothing (INVALID_CONFIG for a key that
    /// is not dynamic or a value not of its type).
    pub fn alter(
        &mut self,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<(), MetaError> {
        for (k, v) in set {
            key_type(k)?
                .check(v)
                .map_err(|why| MetaError::InvalidConfig(format!("{k}: {why}")))?;
        }
        for k in delete {
            key_type(k)?;
        }
        for k in delete {
            self.overrides.remove(k);
        }
        for (k, v) in set {
            self.overrides.insert(k.clone(), v.clone());
        }
        Ok(())
    }

    /// The keys set, with their values.
    pub fn overrides(&self) -> &BTreeMap<String, String> {
        &self.overrides
    }

    pub fn is_empty(&self) -> bool {
        self.overrides.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn dynamic_keys_are_kept_typed_all_or_nothing() {
        let mut c = BrokerConfigs::default();
        c.alter(
            &m(&[
                ("sasl.kerberos.min.time.before.relogin", "58000"),
                ("log.cleanup.policy", "delete,compact"),
            ]),
            &[],
        )
        .expect("dynamic keys");
        assert_eq!(c.overrides().len(), 2);
        // A bad value, or a key a running Kafka broker cannot change,
        // refuses the whole alteration.
        for bad in [
            m(&[("background.threads", "many"), ("num.io.threads", "4")]),
            m(&[("broker.id", "3")]),
            m(&[("log.preallocate", "yes")]),
        ] {
            let before = c.clone();
            let e = c.alter(&bad, &[]).expect_err("refused");
            assert!(matches!(e, MetaError::InvalidConfig(_)), "{e:?}");
            assert_eq!(c, before);
        }
        c.alter(&BTreeMap::new(), &["log.cleanup.policy".into()])
            .expect("delete");
        assert_eq!(
            c.overrides().keys().collect::<Vec<_>>(),
            ["sasl.kerberos.min.time.before.relogin"]
        );
        let back = BrokerConfigs::from_described(
            c.overrides()
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .chain([("no.such.key", "1")]),
        );
        assert_eq!(back, c);
    }

    #[test]
    fn resources_are_broker_ids_or_empty() {
        assert!(check_resource("").is_ok());
        assert!(check_resource("1001").is_ok());
        assert!(check_resource("-1").is_err());
        assert!(check_resource("broker-1").is_err());
    }
}
