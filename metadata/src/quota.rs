//! Client quotas (Kafka's KIP-13, KIP-55, KIP-257, KIP-546): byte rates set
//! on user and client-id entities, kept in the model
//! ([`crate::state::ClusterState::quotas`]) and shown to every proxy in the
//! cluster view. The proxies enforce them (`floe_proxy::quota`).
//!
//! An entity names a user, a client id, or both; each part is a name or the
//! default (Kafka's `<default>`). Which entity's quota applies to a client
//! is Kafka's order of precedence ([`QuotaModel::resolve`]), looked up for
//! each key on its own.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::MetaError;

/// Bytes per second a client may produce (request bytes).
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
/// Bytes per second a client may fetch (response bytes).
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
/// The quota keys stored and enforced.
pub const KEYS: &[&str] = &[PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE];

/// One part of an entity: a name, or the default of its type.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EntityName {
    Default,
    Named(String),
}

impl EntityName {
    /// `None` for the default, as the Kafka protocol writes it.
    pub fn name(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n),
        }
    }

    fn matches(&self, actual: &str) -> bool {
        match self {
            EntityName::Default => true,
            EntityName::Named(n) => n == actual,
        }
    }
}

/// A quota entity: a user, a client id, or both.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaEntity {
    pub user: Option<EntityName>,
    pub client_id: Option<EntityName>,
}

/// A change to one entity's quotas: keys set, then keys removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaAlteration {
    pub entity: QuotaEntity,
    pub set: BTreeMap<String, u64>,
    pub remove: Vec<String>,
}

/// Every entity's quotas.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaModel {
    #[serde(with = "crate::serde_pairs")]
    pub entries: BTreeMap<QuotaEntity, BTreeMap<String, u64>>,
}

/// The quota that applies to a client for one key, and the entity it was
/// set on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub bytes_per_second: u64,
    pub entity: QuotaEntity,
}

impl QuotaAlteration {
    /// Floe's rules, which the proxy checks first with Kafka's errors.
    pub fn validate(&self) -> Result<(), MetaError> {
        if self.entity.user.is_none() && self.entity.client_id.is_none() {
            return Err(MetaError::InvalidRequest(
                "a quota entity names a user, a client id, or both".into(),
            ));
        }
        for (key, value) in &self.set {
            if !KEYS.contains(&key.as_str()) {
                return Err(MetaError::InvalidRequest(format!(
                    "unknown quota key '{key}'"
                )));
            }
            if *value == 0 {
                return Err(MetaError::InvalidRequest(format!(
                    "quota '{key}' must be at least 1"
                )));
            }
        }
        Ok(())
    }
}

impl QuotaModel {
    /// Applies every alteration, or none if one is invalid.
    pub fn alter(&mut self, alterations: &[QuotaAlteration]) -> Result<(), MetaError> {
        for a in alterations {
            a.validate()?;
        }
        for a in alterations {
            let values = self.entries.entry(a.entity.clone()).or_default();
            for (k, v) in &a.set {
                values.insert(k.clone(), *v);
            }
            for k in &a.remove {
                values.remove(k);
            }
            if values.is_empty() {
                self.entries.remove(&a.entity);
            }
        }
        Ok(())
    }

    /// The quota of `key` for a client of `user` with `client_id`: the
    /// first entity in Kafka's order that sets it — user and client id,
    /// user and default client id, user alone, default user and client id,
    /// default user and default client id, default user alone, client id
    /// alone, default client id alone.
    pub fn resolve(&self, user: &str, client_id: &str, key: &str) -> Option<Resolved> {
        if self.entries.is_empty() {
            return None;
        }
        use EntityName::{Default as D, Named as N};
        let u = || N(user.to_string());
        let c = || N(client_id.to_string());
        let order = [
            (Some(u()), Some(c())),
            (Some(u()), Some(D)),
            (Some(u()), None),
            (Some(D), Some(c())),
            (Some(D), Some(D)),
            (Some(D), None),
            (None, Some(c())),
            (None, Some(D)),
        ];
        order.into_iter().find_map(|(user_part, client_part)| {
            let entity = QuotaEntity {
                user: user_part,
                client_id: client_part,
            };
            let v = *self.entries.get(&entity)?.get(key)?;
            debug_assert!(
                entity.user.as_ref().is_none_or(|e| e.matches(user))
                    && entity
                        .client_id
                        .as_ref()
                        .is_none_or(|e| e.matches(client_id))
            );
            Some(Resolved {
                bytes_per_second: v,
                entity,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn named(s: &str) -> Option<EntityName> {
        Some(EntityName::Named(s.into()))
    }

    fn set(user: Option<EntityName>, client_id: Option<EntityName>, v: u64) -> QuotaAlteration {
        QuotaAlteration {
            entity: QuotaEntity { user, client_id },
            set: BTreeMap::from([(PRODUCER_BYTE_RATE.to_string(), v)]),
            remove: vec![],
        }
    }

    #[test]
    fn the_most_specific_entity_wins_in_kafkas_order() {
        let mut m = QuotaModel::default();
        m.alter(&[set(None, Some(EntityName::Default), 8)]).unwrap();
        let r = |m: &QuotaModel, c: &str| m.resolve("ANONYMOUS", c, PRODUCER_BYTE_RATE).unwrap();
        assert_eq!(r(&m, "a").bytes_per_second, 8);
        m.alter(&[set(None, named("a"), 7)]).unwrap();
        assert_eq!(r(&m, "a").bytes_per_second, 7);
        assert_eq!(r(&m, "b").bytes_per_second, 8);
        m.alter(&[set(Some(EntityName::Default), None, 6)]).unwrap();
        assert_eq!(r(&m, "a").bytes_per_second, 6);
        m.alter(&[set(named("ANONYMOUS"), named("a"), 1)]).unwrap();
        assert_eq!(r(&m, "a").bytes_per_second, 1);
        assert_eq!(r(&m, "b").bytes_per_second, 6);
        assert!(m.resolve("ANONYMOUS", "a", CONSUMER_BYTE_RATE).is_none());
    }

    #[test]
    fn removing_every_key_forgets_the_entity_and_bad_changes_apply_nothing() {
        let mut m = QuotaModel::default();
        m.alter(&[set(None, named("a"), 5)]).unwrap();
        let bad = QuotaAlteration {
            entity: QuotaEntity::default(),
            set: BTreeMap::new(),
            remove: vec![],
        };
        assert!(m.alter(&[set(None, named("b"), 1), bad]).is_err());
        assert!(m.alter(&[set(None, named("b"), 0)]).is_err());
        assert_eq!(m.entries.len(), 1);
        m.alter(&[QuotaAlteration {
            entity: QuotaEntity {
                user: None,
                client_id: named("a"),
            },
            set: BTreeMap::new(),
            remove: vec![PRODUCER_BYTE_RATE.into()],
        }])
        .unwrap();
        assert!(m.entries.is_empty());
    }
}
