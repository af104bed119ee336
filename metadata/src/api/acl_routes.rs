//! ACLs over the API (`crate::acl`): the routes that add and remove them,
//! and the conversions between the model and its protobuf messages (the
//! cluster view carries every ACL to the proxies, which decide with them).

use super::proto;
use super::server::AppState;
use crate::acl::{AclBinding, AclFilter, AclModel, FilterCodes};
use crate::command::{Command, Response};
use crate::error::MetaError;

/// One ACL as the API carries it.
pub fn entry(b: &AclBinding) -> proto::AclEntry {
    proto::AclEntry {
        resource_type: i32::from(b.resource_type.code()),
        resource_name: b.resource_name.clone(),
        pattern: i32::from(b.pattern.code()),
        principal: b.principal.clone(),
        host: b.host.clone(),
        operation: i32::from(b.operation.code()),
        permission: i32::from(b.permission.code()),
    }
}

fn code(what: &str, c: i32) -> Result<i8, MetaError> {
    i8::try_from(c).map_err(|_| MetaError::InvalidRequest(format!("unknown {what} {c}")))
}

/// The ACL an entry names.
pub fn binding(e: proto::AclEntry) -> Result<AclBinding, MetaError> {
    AclBinding::from_codes(
        code("resource type", e.resource_type)?,
        e.resource_name,
        code("pattern type", e.pattern)?,
        e.principal,
        e.host,
        code("operation", e.operation)?,
        code("permission", e.permission)?,
    )
    .map_err(MetaError::InvalidRequest)
}

/// A filter as the API carries it.
pub fn filter_entry(f: &AclFilter) -> proto::AclFilterEntry {
    let c = f.codes();
    proto::AclFilterEntry {
        resource_type: i32::from(c.resource_type),
        resource_name: f.resource_name.clone(),
        pattern: i32::from(c.pattern),
        principal: f.principal.clone(),
        host: f.host.clone(),
        operation: i32::from(c.operation),
        permission: i32::from(c.permission),
    }
}

/// The filter an entry names.
pub fn filter(e: proto::AclFilterEntry) -> Result<AclFilter, MetaError> {
    let codes = FilterCodes {
        resource_type: code("resource type", e.resource_type)?,
        pattern: code("pattern type", e.pattern)?,
        operation: code("operation", e.operation)?,
        permission: code("permission", e.permission)?,
    };
    AclFilter::from_codes(codes, e.resource_name, e.principal, e.host)
        .map_err(MetaError::InvalidRequest)
}

/// Every ACL, for the cluster view.
pub fn entries(m: &AclModel) -> Vec<proto::AclEntry> {
    m.bindings.iter().map(entry).collect()
}

/// The model in a cluster view; an ACL that cannot be read is left out
/// (and logged): a proxy older than the service skips kinds it does not
/// know, which can only deny more.
pub fn model(entries: &[proto::AclEntry]) -> AclModel {
    let mut m = AclModel::default();
    for e in entries {
        match binding(e.clone()) {
            Ok(b) => {
                m.bindings.insert(b);
            }
            Err(e) => tracing::warn!(error = %e, "an ACL of the view cannot be read"),
        }
    }
    m
}

/// The request adding `bindings`.
pub fn create_request(bindings: &[AclBinding]) -> proto::CreateAclsRequest {
    proto::CreateAclsRequest {
        acls: bindings.iter().map(entry).collect(),
    }
}

/// The request removing what `filters` match.
pub fn delete_request(filters: &[AclFilter]) -> proto::DeleteAclsRequest {
    proto::DeleteAclsRequest {
        filters: filters.iter().map(filter_entry).collect(),
    }
}

/// The ACLs a delete removed, per filter.
pub fn deleted(r: proto::DeleteAclsResponse) -> Result<Vec<Vec<AclBinding>>, MetaError> {
    r.deleted
        .into_iter()
        .map(|l| l.acls.into_iter().map(binding).collect())
        .collect()
}

pub(super) async fn create(
    s: AppState,
    req: proto::CreateAclsRequest,
) -> Result<proto::CreateAclsResponse, MetaError> {
    let bindings = req
        .acls
        .into_iter()
        .map(binding)
        .collect::<Result<Vec<_>, _>>()?;
    match s.write(Command::CreateAcls(bindings)).await? {
        (Response::Ok, revision) => Ok(proto::CreateAclsResponse { revision }),
        (Response::Error(e), _) => Err(e),
        (other, _) => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

pub(super) async fn delete(
    s: AppState,
    req: proto::DeleteAclsRequest,
) -> Result<proto::DeleteAclsResponse, MetaError> {
    let filters = req
        .filters
        .into_iter()
        .map(filter)
        .collect::<Result<Vec<_>, _>>()?;
    match s.write(Command::DeleteAcls(filters)).await? {
        (Response::AclsDeleted(per_filter), revision) => Ok(proto::DeleteAclsResponse {
            revision,
            deleted: per_filter
                .iter()
                .map(|bs| proto::AclList {
                    acls: bs.iter().map(entry).collect(),
                })
                .collect(),
        }),
        (Response::Error(e), _) => Err(e),
        (other, _) => Err(MetaError::Storage(format!("unexpected response {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::acl::{Operation, PatternFilter, PatternType, Permission, ResourceType};

    fn b() -> AclBinding {
        AclBinding {
            resource_type: ResourceType::TransactionalId,
            resource_name: "tx-".into(),
            pattern: PatternType::Prefixed,
            principal: "User:alice".into(),
            host: "10.0.0.1".into(),
            operation: Operation::Write,
            permission: Permission::Deny,
        }
    }

    #[test]
    fn bindings_and_filters_survive_the_api() {
        assert_eq!(binding(entry(&b())).unwrap(), b());
        let m = model(&entries(&AclModel {
            bindings: [b()].into(),
            ..Default::default()
        }));
        assert_eq!(m.bindings.len(), 1);
        for f in [
            AclFilter::any(),
            AclFilter {
                resource_type: Some(ResourceType::Group),
                resource_name: Some("g".into()),
                pattern: PatternFilter::Match,
                principal: Some("User:*".into()),
                host: Some("*".into()),
                operation: Some(Operation::IdempotentWrite),
                permission: Some(Permission::Allow),
            },
        ] {
            assert_eq!(filter(filter_entry(&f)).unwrap(), f);
        }
    }

    #[test]
    fn a_watch_gets_the_acls_only_when_they_changed_after_its_revision() {
        use crate::ids::Revision;
        use crate::state::ClusterState;
        let mut s = ClusterState::default();
        assert_eq!(
            s.apply(Revision(5), &Command::CreateAcls(vec![b()])),
            Response::Ok
        );
        // Created again: nothing changes, nor does the revision.
        s.apply(Revision(6), &Command::CreateAcls(vec![b()]));
        assert_eq!(s.security.acls.revision, 5);
        let view = |since| crate::api::convert::cluster_view_since(&s, since);
        for since in [0, 4] {
            assert_eq!(view(since).acls.len(), 1, "since {since}");
            assert!(!view(since).acls_unchanged);
        }
        assert!(view(5).acls_unchanged && view(5).acls.is_empty());
        let back = crate::api::convert::cluster_view_from(view(7)).unwrap();
        assert!(back.acls.is_none());
        // A delete that removes nothing changes nothing either.
        let mut f = AclFilter::any();
        f.principal = Some("User:nobody".into());
        s.apply(Revision(8), &Command::DeleteAcls(vec![f]));
        assert_eq!(s.security.acls.revision, 5);
        s.apply(Revision(9), &Command::DeleteAcls(vec![AclFilter::any()]));
        assert_eq!(s.security.acls.revision, 9);
        assert!(!crate::api::convert::cluster_view_since(&s, 8).acls_unchanged);
    }

    #[test]
    fn unknown_codes_are_refused_or_left_out_of_the_view() {
        let mut e = entry(&b());
        e.operation = 99;
        assert!(binding(e.clone()).is_err());
        assert!(model(&[e]).bindings.is_empty());
        let mut f = filter_entry(&AclFilter::any());
        f.pattern = 0;
        assert!(filter(f).is_err());
        let mut e = entry(&b());
        e.resource_type = 1 << 20;
        assert!(binding(e).is_err());
    }
}
