//! Client quotas over the API (`crate::quota`): the route that alters them,
//! and the conversions between the model and its protobuf messages (the
//! cluster view carries every entity's quotas to the proxies).

use std::collections::BTreeMap;

use super::proto;
use super::server::AppState;
use crate::command::{Command, Response};
use crate::error::MetaError;
use crate::quota::{EntityName, QuotaAlteration, QuotaEntity, QuotaModel};

/// Entity type of a user, as Kafka names it.
pub const USER: &str = "user";
/// Entity type of a client id, as Kafka names it.
pub const CLIENT_ID: &str = "client-id";

fn part(entity_type: &str, name: &EntityName) -> proto::QuotaEntityPart {
    proto::QuotaEntityPart {
        entity_type: entity_type.to_string(),
        name: name.name().unwrap_or_default().to_string(),
        is_default: *name == EntityName::Default,
    }
}

/// An entity's parts, user first.
pub fn entity_parts(e: &QuotaEntity) -> Vec<proto::QuotaEntityPart> {
    let user = e.user.as_ref().map(|n| part(USER, n));
    let client = e.client_id.as_ref().map(|n| part(CLIENT_ID, n));
    user.into_iter().chain(client).collect()
}

/// The entity of `parts`; an unknown or repeated type is refused.
pub fn entity_of(parts: &[proto::QuotaEntityPart]) -> Result<QuotaEntity, MetaError> {
    let mut e = QuotaEntity::default();
    for p in parts {
        let name = if p.is_default {
            EntityName::Default
        } else {
            EntityName::Named(p.name.clone())
        };
        let slot = match p.entity_type.as_str() {
            USER => &mut e.user,
            CLIENT_ID => &mut e.client_id,
            other => {
                return Err(MetaError::InvalidRequest(format!(
                    "unknown quota entity type '{other}'"
                )));
            }
        };
        if slot.replace(name).is_some() {
            return Err(MetaError::InvalidRequest(format!(
                "quota entity type '{}' given twice",
                p.entity_type
            )));
        }
    }
    Ok(e)
}

/// Every entity's quotas, for the cluster view.
pub fn quota_entries(m: &QuotaModel) -> Vec<proto::QuotaEntry> {
    m.entries
        .iter()
        .map(|(e, values)| proto::QuotaEntry {
            entity: entity_parts(e),
            values: values
                .iter()
                .map(|(k, v)| proto::QuotaValue {
                    key: k.clone(),
                    value: *v,
                })
                .collect(),
            remove: vec![],
        })
        .collect()
}

/// The model in a cluster view; entries that cannot be read are left out.
pub fn quota_model(entries: &[proto::QuotaEntry]) -> QuotaModel {
    let mut m = QuotaModel::default();
    for q in entries {
        match entity_of(&q.entity) {
            Ok(e) => {
                m.entries.insert(
                    e,
                    q.values.iter().map(|v| (v.key.clone(), v.value)).collect(),
                );
            }
            Err(err) => tracing::warn!(error = %err, "a quota entry of the view cannot be read"),
        }
    }
    m
}

/// The request altering quotas as `alterations` say.
pub fn alter_request(alterations: &[QuotaAlteration]) -> proto::AlterQuotasRequest {
    proto::AlterQuotasRequest {
        alterations: alterations
            .iter()
            .map(|a| proto::QuotaEntry {
                entity: entity_parts(&a.entity),
                values: a
                    .set
                    .iter()
                    .map(|(k, v)| proto::QuotaValue {
                        key: k.clone(),
                        value: *v,
                    })
                    .collect(),
                remove: a.remove.clone(),
            })
            .collect(),
    }
}

pub(super) async fn alter(
    s: AppState,
    req: proto::AlterQuotasRequest,
) -> Result<proto::AlterQuotasResponse, MetaError> {
    let mut alterations = Vec::with_capacity(req.alterations.len());
    for a in req.alterations {
        alterations.push(QuotaAlteration {
            entity: entity_of(&a.entity)?,
            set: a
                .values
                .into_iter()
                .map(|v| (v.key, v.value))
                .collect::<BTreeMap<_, _>>(),
            remove: a.remove,
        });
    }
    match s.write(Command::AlterClientQuotas { alterations }).await? {
        (Response::Ok, revision) => Ok(proto::AlterQuotasResponse { revision }),
        (Response::Error(e), _) => Err(e),
        (other, _) => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn quotas_survive_the_view_and_requests() {
        let a = QuotaAlteration {
            entity: QuotaEntity {
                user: Some(EntityName::Default),
                client_id: Some(EntityName::Named("c".into())),
            },
            set: BTreeMap::from([("producer_byte_rate".into(), 10)]),
            remove: vec![],
        };
        let mut m = QuotaModel::default();
        m.alter(std::slice::from_ref(&a)).unwrap();
        assert_eq!(quota_model(&quota_entries(&m)), m);
        let req = alter_request(std::slice::from_ref(&a));
        assert_eq!(entity_of(&req.alterations[0].entity).unwrap(), a.entity);
        let twice = [
            part(USER, &EntityName::Default),
            part(USER, &EntityName::Default),
        ];
        assert!(entity_of(&twice).is_err());
    }
}
