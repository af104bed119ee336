//! DescribeClientQuotas and AlterClientQuotas (KIP-546): client quotas as
//! the metadata service keeps them (`floe_metadata::quota`), enforced by
//! every proxy (`crate::quota`).
//!
//! Entity types are `user` and `client-id`, each named or the default (a
//! null name). Without authentication every client is the user `ANONYMOUS`.
//! The keys stored and enforced are `producer_byte_rate` and
//! `consumer_byte_rate`, whole numbers of at least 1; `request_percentage`,
//! `controller_mutation_rate` and the `ip` entity's
//! `connection_creation_rate` are refused with INVALID_REQUEST (Floe does
//! not enforce them), as is any other key or entity type.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use floe_metadata::api::quota_routes::{CLIENT_ID, USER, alter_request};
use floe_metadata::api::{MetaApi, routes};
use floe_metadata::ids::Revision;
use floe_metadata::quota::{EntityName, KEYS, QuotaAlteration, QuotaEntity, QuotaModel};
use floe_metadata::watch::ClusterWatch;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::alter_client_quotas_request::{
    EntityData as AlterEntity, EntryData as AlterEntry,
};
use kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as AlteredEntity, EntryData as AlteredEntry,
};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::describe_client_quotas_response::{
    EntityData as DescribedEntity, EntryData as DescribedEntry, ValueData,
};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};

use super::{Refusal, kafka_error_for, str_bytes};

/// Keys Kafka knows that Floe does not enforce.
const NOT_ENFORCED: &[&str] = &[
    "request_percentage",
    "controller_mutation_rate",
    "connection_creation_rate",
];
/// Longest wait of an answer to AlterClientQuotas for this proxy's view to
/// show the change (so that a describe right after sees it).
const VISIBLE_WAIT: Duration = Duration::from_secs(3);

/// DescribeClientQuotas's match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

fn invalid(message: impl Into<String>) -> Refusal {
    Refusal::new(ResponseError::InvalidRequest, message)
}

/// The entity an AlterClientQuotas entry names.
fn entity_of(parts: &[AlterEntity]) -> Result<QuotaEntity, Refusal> {
    if parts.is_empty() {
        return Err(invalid("a quota entity names a user, a client id, or both"));
    }
    let mut e = QuotaEntity::default();
    for p in parts {
        let name = match &p.entity_name {
            None => EntityName::Default,
            Some(n) => EntityName::Named(n.to_string()),
        };
        let slot = match p.entity_type.as_str() {
            USER => &mut e.user,
            CLIENT_ID => &mut e.client_id,
            "ip" => {
                return Err(invalid(
                    "ip quotas (connection_creation_rate) are not supported by Floe",
                ));
            }
            other => return Err(invalid(format!("unknown quota entity type '{other}'"))),
        };
        if slot.replace(name).is_some() {
            return Err(invalid(format!(
                "entity type '{}' given twice in one entity",
                p.entity_type.as_str()
            )));
        }
    }
    Ok(e)
}

/// The change an AlterClientQuotas entry asks for, checked.
fn alteration_of(entry: &AlterEntry) -> Result<QuotaAlteration, Refusal> {
    let entity = entity_of(&entry.entity)?;
    let mut set = BTreeMap::new();
    let mut remove = Vec::new();
    let mut seen = HashSet::new();
    for op in &entry.ops {
        let key = op.key.as_str();
        if NOT_ENFORCED.contains(&key) {
            return Err(invalid(format!("quota '{key}' is not enforced by Floe")));
        }
        if !KEYS.contains(&key) {
            return Err(invalid(format!("unknown quota key '{key}'")));
        }
        if !seen.insert(key) {
            return Err(invalid(format!("quota key '{key}' given twice")));
        }
        if op.remove {
            remove.push(key.to_string());
            continue;
        }
        let v = op.value;
        if !v.is_finite() || v.fract() != 0.0 {
            return Err(invalid(format!("quota '{key}' must be a whole number")));
        }
        if v < 1.0 || v > i64::MAX as f64 {
            return Err(invalid(format!(
                "quota '{key}' must be between 1 and {}",
                i64::MAX
            )));
        }
        set.insert(key.to_string(), v as u64);
    }
    Ok(QuotaAlteration {
        entity,
        set,
        remove,
    })
}

/// Answers AlterClientQuotas: every valid entry in one metadata command
/// (unless `validate_only`), each invalid one refused on its own.
pub async fn alter_client_quotas(
    meta: &dyn MetaApi,
    view: &ClusterWatch,
    req: &AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let mut results: Vec<Result<(), Refusal>> = Vec::with_capacity(req.entries.len());
    let mut valid = Vec::new();
    let mut entities = HashSet::new();
    for entry in &req.entries {
        let r = alteration_of(entry).and_then(|a| {
            if entities.insert(a.entity.clone()) {
                Ok(a)
            } else {
                Err(invalid("entity given twice in one request"))
            }
        });
        results.push(r.map(|a| valid.push(a)));
    }
    if !req.validate_only && !valid.is_empty() {
        let written = meta
            .call::<routes::AlterQuotas>(alter_request(&valid))
            .await;
        match written {
            Ok(r) => {
                tracing::info!(entities = valid.len(), "client quotas altered");
                await_revision(view, Revision(r.revision)).await;
            }
            Err(e) => {
                let refusal = Refusal::new(kafka_error_for(&e), e.to_string());
                for r in results.iter_mut().filter(|r| r.is_ok()) {
                    *r = Err(refusal.clone());
                }
            }
        }
    }
    let entries = req
        .entries
        .iter()
        .zip(results)
        .map(|(entry, r)| {
            let entity = entry
                .entity
                .iter()
                .map(|p| {
                    AlteredEntity::default()
                        .with_entity_type(p.entity_type.clone())
                        .with_entity_name(p.entity_name.clone())
                })
                .collect();
            let (code, message) = match r {
                Ok(()) => (0, None),
                Err(refusal) => (refusal.code(), refusal.message()),
            };
            AlteredEntry::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_entity(entity)
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}

/// Waits (at most [`VISIBLE_WAIT`]) until this proxy's view has reached
/// `revision`.
pub(crate) async fn await_revision(view: &ClusterWatch, revision: Revision) {
    let mut rx = view.subscribe();
    let reached = rx.wait_for(|s| s.revision >= revision);
    if tokio::time::timeout(VISIBLE_WAIT, reached).await.is_err() {
        tracing::debug!(
            revision = revision.0,
            "quota change not in this proxy's view yet"
        );
    }
}

/// One filter component, checked.
struct Filter {
    entity_type: &'static str,
    /// `None`: any name or the default; `Some(None)`: the default.
    name: Option<Option<String>>,
}

fn filter_of(c: &ComponentData) -> Result<Filter, Refusal> {
    let entity_type = match c.entity_type.as_str() {
        USER => USER,
        CLIENT_ID => CLIENT_ID,
        "ip" => "ip",
        other => return Err(invalid(format!("unknown quota entity type '{other}'"))),
    };
    let name = match (c.match_type, &c._match) {
        (MATCH_EXACT, Some(n)) => Some(Some(n.to_string())),
        (MATCH_EXACT, None) => return Err(invalid("an exact match needs a name")),
        (MATCH_DEFAULT, _) => Some(None),
        (MATCH_SPECIFIED, _) => None,
        (other, _) => return Err(invalid(format!("unknown match type {other}"))),
    };
    Ok(Filter { entity_type, name })
}

fn part_of<'a>(e: &'a QuotaEntity, entity_type: &str) -> Option<&'a EntityName> {
    match entity_type {
        USER => e.user.as_ref(),
        CLIENT_ID => e.client_id.as_ref(),
        _ => None,
    }
}

fn matches(e: &QuotaEntity, filters: &[Filter], strict: bool) -> bool {
    let all = filters
        .iter()
        .all(|f| match (part_of(e, f.entity_type), &f.name) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(n), Some(want)) => n.name() == want.as_deref(),
        });
    let types = usize::from(e.user.is_some()) + usize::from(e.client_id.is_some());
    all && (!strict || types == filters.len())
}

/// Answers DescribeClientQuotas from this proxy's view.
pub fn describe_client_quotas(
    quotas: &QuotaModel,
    req: &DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let filters: Result<Vec<Filter>, Refusal> = req.components.iter().map(filter_of).collect();
    let filters = match filters {
        Ok(f) => f,
        Err(r) => {
            return DescribeClientQuotasResponse::default()
                .with_error_code(r.code())
                .with_error_message(r.message());
        }
    };
    let mut types = HashSet::new();
    if !filters.iter().all(|f| types.insert(f.entity_type)) {
        let r = invalid("entity type given twice in the filter");
        return DescribeClientQuotasResponse::default()
            .with_error_code(r.code())
            .with_error_message(r.message());
    }
    let entries = quotas
        .entries
        .iter()
        .filter(|(e, _)| matches(e, &filters, req.strict))
        .map(|(e, values)| {
            let parts = [(USER, e.user.as_ref()), (CLIENT_ID, e.client_id.as_ref())];
            let entity = parts
                .into_iter()
                .filter_map(|(t, n)| {
                    n.map(|n| {
                        DescribedEntity::default()
                            .with_entity_type(str_bytes(t))
                            .with_entity_name(n.name().map(str_bytes))
                    })
                })
                .collect();
            let values = values
                .iter()
                .map(|(k, v)| {
                    ValueData::default()
                        .with_key(str_bytes(k.clone()))
                        .with_value(*v as f64)
                })
                .collect();
            DescribedEntry::default()
                .with_entity(entity)
                .with_values(values)
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use kafka_protocol::messages::alter_client_quotas_request::OpData;

    use super::*;

    fn entity(t: &str, n: Option<&str>) -> AlterEntity {
        AlterEntity::default()
            .with_entity_type(str_bytes(t))
            .with_entity_name(n.map(str_bytes))
    }

    fn op(key: &str, value: f64) -> OpData {
        OpData::default().with_key(str_bytes(key)).with_value(value)
    }

    fn entry(parts: Vec<AlterEntity>, ops: Vec<OpData>) -> AlterEntry {
        AlterEntry::default().with_entity(parts).with_ops(ops)
    }

    #[test]
    fn alterations_are_checked_as_kafka_checks_them() {
        let ok = entry(
            vec![entity(CLIENT_ID, Some("c")), entity(USER, None)],
            vec![op("producer_byte_rate", 1024.0)],
        );
        let a = alteration_of(&ok).unwrap();
        assert_eq!(a.entity.user, Some(EntityName::Default));
        assert_eq!(a.set["producer_byte_rate"], 1024);
        for bad in [
            entry(vec![], vec![op("producer_byte_rate", 1.0)]),
            entry(
                vec![entity("ip", None)],
                vec![op("producer_byte_rate", 1.0)],
            ),
            entry(
                vec![entity("group", None)],
                vec![op("producer_byte_rate", 1.0)],
            ),
            entry(
                vec![entity(USER, None), entity(USER, Some("u"))],
                vec![op("producer_byte_rate", 1.0)],
            ),
            entry(
                vec![entity(USER, None)],
                vec![op("request_percentage", 50.0)],
            ),
            entry(vec![entity(USER, None)], vec![op("bogus", 50.0)]),
            entry(
                vec![entity(USER, None)],
                vec![op("producer_byte_rate", 1.5)],
            ),
            entry(
                vec![entity(USER, None)],
                vec![op("producer_byte_rate", 0.0)],
            ),
            entry(
                vec![entity(USER, None)],
                vec![op("producer_byte_rate", f64::NAN)],
            ),
            entry(
                vec![entity(USER, None)],
                vec![op("producer_byte_rate", 1.0), op("producer_byte_rate", 2.0)],
            ),
        ] {
            let r = alteration_of(&bad).unwrap_err();
            assert_eq!(r.error, ResponseError::InvalidRequest, "{bad:?}");
        }
    }

    /// The fuzz seeds of the quota requests (`fuzz/corpus/kafka_requests/*quotas*`)
    /// decode as what they are named after and re-encode to the same bytes.
    #[test]
    fn the_quota_request_seeds_decode_and_re_encode() {
        use kafka_protocol::messages::ApiKey;

        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/kafka_requests");
        for version in 0..=1 {
            for (name, key) in [
                ("describeclientquotas", ApiKey::DescribeClientQuotas),
                ("alterclientquotas", ApiKey::AlterClientQuotas),
            ] {
                let file = format!("{name}_v{version}");
                let bytes = bytes::Bytes::from(std::fs::read(dir.join(&file)).unwrap());
                let decoded = crate::codec::decode_request(bytes.clone()).unwrap();
                assert_eq!((decoded.api_key, decoded.version), (key, version), "{file}");
                let again = crate::codec::encode_request(&decoded.header, &decoded.body).unwrap();
                assert_eq!(&again[4..], &bytes[..], "{file}");
            }
        }
    }

    fn component(t: &str, match_type: i8, name: Option<&str>) -> ComponentData {
        ComponentData::default()
            .with_entity_type(str_bytes(t))
            .with_match_type(match_type)
            .with_match(name.map(str_bytes))
    }

    #[test]
    fn describe_filters_by_exact_default_and_specified_names_and_strictness() {
        let mut m = QuotaModel::default();
        let set = |user: Option<EntityName>, client: Option<EntityName>| QuotaAlteration {
            entity: QuotaEntity {
                user,
                client_id: client,
            },
            set: BTreeMap::from([("consumer_byte_rate".to_string(), 5)]),
            remove: vec![],
        };
        m.alter(&[
            set(None, Some(EntityName::Named("c".into()))),
            set(None, Some(EntityName::Default)),
            set(
                Some(EntityName::Default),
                Some(EntityName::Named("c".into())),
            ),
        ])
        .unwrap();
        let n = |components: Vec<ComponentData>, strict: bool| {
            let req = DescribeClientQuotasRequest::default()
                .with_components(components)
                .with_strict(strict);
            let r = describe_client_quotas(&m, &req);
            assert_eq!(r.error_code, 0);
            r.entries.unwrap().len()
        };
        assert_eq!(n(vec![], false), 3);
        assert_eq!(n(vec![], true), 0);
        assert_eq!(
            n(vec![component(CLIENT_ID, MATCH_EXACT, Some("c"))], false),
            2
        );
        assert_eq!(
            n(vec![component(CLIENT_ID, MATCH_EXACT, Some("c"))], true),
            1
        );
        assert_eq!(n(vec![component(CLIENT_ID, MATCH_DEFAULT, None)], false), 1);
        assert_eq!(
            n(vec![component(CLIENT_ID, MATCH_SPECIFIED, None)], true),
            2
        );
        assert_eq!(n(vec![component(USER, MATCH_SPECIFIED, None)], false), 1);
        let bad = DescribeClientQuotasRequest::default().with_components(vec![component(
            CLIENT_ID,
            MATCH_EXACT,
            None,
        )]);
        assert_eq!(
            describe_client_quotas(&m, &bad).error_code,
            ResponseError::InvalidRequest.code()
        );
    }
}
