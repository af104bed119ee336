//! ACLs as `kafka-acls.sh` manages them (KIP-140: CreateAcls,
//! DescribeAcls, DeleteAcls), with the model of `floe_metadata::acl`.

use floe_metadata::acl::{
    AclBinding, AclFilter, Operation, PatternFilter, PatternType, Permission, ResourceType,
};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::DeleteAclsMatchingAcl;
use kafka_protocol::messages::describe_acls_response::DescribeAclsResource;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;

use crate::connection::KafkaClient;
use crate::error::{ClientError, check_code};

/// Kafka's code for ANY in a filter.
const ANY: i8 = 1;

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn opt(s: &Option<String>) -> Option<StrBytes> {
    s.as_deref().map(sb)
}

/// A binding as a CreateAcls creation.
pub fn creation(b: &AclBinding) -> AclCreation {
    AclCreation::default()
        .with_resource_type(b.resource_type.code())
        .with_resource_name(sb(&b.resource_name))
        .with_resource_pattern_type(b.pattern.code())
        .with_principal(sb(&b.principal))
        .with_host(sb(&b.host))
        .with_operation(b.operation.code())
        .with_permission_type(b.permission.code())
}

/// A filter as DescribeAcls asks it.
pub fn describe_request(f: &AclFilter) -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_type_filter(f.resource_type.map_or(ANY, |t| t.code()))
        .with_resource_name_filter(opt(&f.resource_name))
        .with_pattern_type_filter(f.pattern.code())
        .with_principal_filter(opt(&f.principal))
        .with_host_filter(opt(&f.host))
        .with_operation(f.operation.map_or(ANY, |o| o.code()))
        .with_permission_type(f.permission.map_or(ANY, |p| p.code()))
}

/// A filter as DeleteAcls carries it.
pub fn delete_filter(f: &AclFilter) -> DeleteAclsFilter {
    DeleteAclsFilter::default()
        .with_resource_type_filter(f.resource_type.map_or(ANY, |t| t.code()))
        .with_resource_name_filter(opt(&f.resource_name))
        .with_pattern_type_filter(f.pattern.code())
        .with_principal_filter(opt(&f.principal))
        .with_host_filter(opt(&f.host))
        .with_operation(f.operation.map_or(ANY, |o| o.code()))
        .with_permission_type(f.permission.map_or(ANY, |p| p.code()))
}

#[allow(clippy::too_many_arguments)]
fn binding(
    rt: i8,
    name: &StrBytes,
    pattern: i8,
    principal: &StrBytes,
    host: &StrBytes,
    op: i8,
    perm: i8,
) -> Option<AclBinding> {
    let b = AclBinding {
        resource_type: ResourceType::from_code(rt)?,
        resource_name: name.to_string(),
        pattern: PatternType::from_code(pattern)?,
        principal: principal.to_string(),
        host: host.to_string(),
        operation: Operation::from_code(op)?,
        permission: Permission::from_code(perm)?,
    };
    Some(b)
}

/// The bindings of a DescribeAcls answer (those with codes unknown here
/// are skipped, and logged).
pub fn described(resources: &[DescribeAclsResource]) -> Vec<AclBinding> {
    let mut out = Vec::new();
    for r in resources {
        for a in &r.acls {
            match binding(
                r.resource_type,
                &r.resource_name,
                r.pattern_type,
                &a.principal,
                &a.host,
                a.operation,
                a.permission_type,
            ) {
                Some(b) => out.push(b),
                None => {
                    tracing::warn!(resource = %r.resource_name.as_str(), "an ACL with codes unknown here is skipped")
                }
            }
        }
    }
    out
}

fn matching(m: &DeleteAclsMatchingAcl) -> Option<AclBinding> {
    binding(
        m.resource_type,
        &m.resource_name,
        m.pattern_type,
        &m.principal,
        &m.host,
        m.operation,
        m.permission_type,
    )
}

impl KafkaClient {
    /// Creates `bindings` (CreateAcls); the first refused one is the error.
    pub async fn create_acls(&mut self, bindings: &[AclBinding]) -> Result<(), ClientError> {
        let version = self.version::<CreateAclsRequest>()?;
        let req =
            CreateAclsRequest::default().with_creations(bindings.iter().map(creation).collect());
        let resp = self.send(version, req).await?;
        for (r, b) in resp.results.iter().zip(bindings) {
            check_code(r.error_code, r.error_message.as_ref(), || {
                format!("creating the ACL {}", describe(b))
            })?;
        }
        Ok(())
    }

    /// The ACLs `filter` matches (DescribeAcls).
    pub async fn describe_acls(
        &mut self,
        filter: &AclFilter,
    ) -> Result<Vec<AclBinding>, ClientError> {
        let version = self.version::<DescribeAclsRequest>()?;
        let resp = self.send(version, describe_request(filter)).await?;
        check_code(resp.error_code, resp.error_message.as_ref(), || {
            "describing ACLs".to_owned()
        })?;
        Ok(described(&resp.resources))
    }

    /// Deletes what each filter matches (DeleteAcls); returns the deleted
    /// ACLs, per filter.
    pub async fn delete_acls(
        &mut self,
        filters: &[AclFilter],
    ) -> Result<Vec<Vec<AclBinding>>, ClientError> {
        let version = self.version::<DeleteAclsRequest>()?;
        let req =
            DeleteAclsRequest::default().with_filters(filters.iter().map(delete_filter).collect());
        let resp = self.send(version, req).await?;
        let mut out = Vec::new();
        for r in resp.filter_results {
            check_code(r.error_code, r.error_message.as_ref(), || {
                "deleting ACLs".to_owned()
            })?;
            out.push(r.matching_acls.iter().filter_map(matching).collect());
        }
        Ok(out)
    }
}

/// An ACL in words: `ALLOW User:alice from * WRITE on TOPIC orders (LITERAL)`.
pub fn describe(b: &AclBinding) -> String {
    format!(
        "{} {} from {} {} on {} {} ({})",
        b.permission.name(),
        b.principal,
        b.host,
        b.operation.name(),
        b.resource_type.name(),
        b.resource_name,
        b.pattern.name()
    )
}

/// Whether a filter matches only what the binding names (used to check a
/// round trip in tests).
pub fn exact_filter(b: &AclBinding) -> AclFilter {
    AclFilter {
        resource_type: Some(b.resource_type),
        resource_name: Some(b.resource_name.clone()),
        pattern: match b.pattern {
            PatternType::Literal => PatternFilter::Literal,
            PatternType::Prefixed => PatternFilter::Prefixed,
        },
        principal: Some(b.principal.clone()),
        host: Some(b.host.clone()),
        operation: Some(b.operation),
        permission: Some(b.permission),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use kafka_protocol::messages::describe_acls_response::AclDescription;

    use super::*;

    fn b() -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Group,
            resource_name: "billing".into(),
            pattern: PatternType::Prefixed,
            principal: "User:bob".into(),
            host: "*".into(),
            operation: Operation::Read,
            permission: Permission::Allow,
        }
    }

    #[test]
    fn filters_send_any_for_what_they_leave_open() {
        let r = describe_request(&AclFilter::any());
        assert_eq!(
            (
                r.resource_type_filter,
                r.pattern_type_filter,
                r.operation,
                r.permission_type
            ),
            (1, 1, 1, 1)
        );
        assert!(r.resource_name_filter.is_none() && r.principal_filter.is_none());
        let d = delete_filter(&exact_filter(&b()));
        assert_eq!(d.resource_type_filter, 3);
        assert_eq!(d.pattern_type_filter, 4);
        assert_eq!(
            d.resource_name_filter.as_ref().map(|s| s.to_string()),
            Some("billing".to_string())
        );
        let c = creation(&b());
        assert_eq!((c.operation, c.permission_type), (3, 3));
    }

    #[test]
    fn answers_flatten_into_bindings_and_skip_unknown_codes() {
        let acl = |op| {
            AclDescription::default()
                .with_principal(sb("User:bob"))
                .with_host(sb("*"))
                .with_operation(op)
                .with_permission_type(3)
        };
        let r = DescribeAclsResource::default()
            .with_resource_type(3)
            .with_resource_name(sb("billing"))
            .with_pattern_type(4)
            .with_acls(vec![acl(3), acl(99)]);
        assert_eq!(described(&[r]), vec![b()]);
        assert_eq!(
            describe(&b()),
            "ALLOW User:bob from * READ on GROUP billing (PREFIXED)"
        );
    }
}
