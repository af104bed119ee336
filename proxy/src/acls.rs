//! Kafka's ACL APIs: CreateAcls, DescribeAcls, DeleteAcls (KIP-140).
//!
//! With the authorizer on, the ACLs are stored in the metadata service
//! (`floe_metadata::acl`) and described from the cluster view; creating and
//! deleting needs ALTER on the cluster, describing DESCRIBE. With it off,
//! every request is answered SECURITY_DISABLED, as a Kafka broker without
//! `authorizer.class.name` answers them, so that tools (`kafka-acls.sh`,
//! librdkafka's admin client) say ACLs are off instead of failing on an
//! unknown API.

use std::collections::BTreeMap;

use floe_metadata::acl::{
    AclBinding, AclFilter, FilterCodes, Operation, PatternType, ResourceType,
};
use floe_metadata::api::MetaApi;
use floe_metadata::api::acl_routes;
use floe_metadata::api::routes;
use floe_metadata::ids::Revision;
use floe_metadata::watch::ClusterWatch;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::authz::Check;
use crate::authz::requests::CLUSTER_DENIED;

/// What clients are told, Kafka's words.
const NO_AUTHORIZER: &str = "No Authorizer is configured.";

fn text(s: impl Into<String>) -> Option<StrBytes> {
    Some(StrBytes::from_string(s.into()))
}

fn disabled() -> (i16, Option<StrBytes>) {
    (ResponseError::SecurityDisabled.code(), text(NO_AUTHORIZER))
}

fn denied(op: &str) -> (i16, Option<StrBytes>) {
    (
        CLUSTER_DENIED,
        text(format!("{op} on the cluster is needed")),
    )
}

/// A creation as a binding, or why it cannot be one (Kafka's
/// INVALID_REQUEST with a message).
fn binding(c: &AclCreation) -> Result<AclBinding, String> {
    let b = AclBinding::from_codes(
        c.resource_type,
        c.resource_name.to_string(),
        c.resource_pattern_type,
        c.principal.to_string(),
        c.host.to_string(),
        c.operation,
        c.permission_type,
    )?;
    b.validate().map_err(|e| e.to_string())?;
    Ok(b)
}

/// A Kafka filter's fields as a filter.
fn filter(
    codes: FilterCodes,
    name: &Option<StrBytes>,
    principal: &Option<StrBytes>,
    host: &Option<StrBytes>,
) -> Result<AclFilter, String> {
    let s = |v: &Option<StrBytes>| v.as_ref().map(|v| v.to_string());
    AclFilter::from_codes(codes, s(name), s(principal), s(host))
}

pub async fn create_acls(
    req: &CreateAclsRequest,
    c: &Check,
    enabled: bool,
    meta: &dyn MetaApi,
    view: &ClusterWatch,
) -> CreateAclsResponse {
    let answer = |codes: Vec<(i16, Option<StrBytes>)>| {
        let mut resp = CreateAclsResponse::default();
        resp.results = codes
            .into_iter()
            .map(|(code, msg)| {
                let mut r = AclCreationResult::default();
                r.error_code = code;
                r.error_message = msg;
                r
            })
            .collect();
        resp
    };
    if !enabled {
        return answer(req.creations.iter().map(|_| disabled()).collect());
    }
    if !c.cluster(Operation::Alter) {
        return answer(req.creations.iter().map(|_| denied("ALTER")).collect());
    }
    let parsed: Vec<Result<AclBinding, String>> = req.creations.iter().map(binding).collect();
    let valid: Vec<AclBinding> = parsed
        .iter()
        .filter_map(|b| b.as_ref().ok().cloned())
        .collect();
    let stored = if valid.is_empty() {
        Ok(())
    } else {
        match meta
            .call::<routes::CreateAcls>(acl_routes::create_request(&valid))
            .await
        {
            Ok(r) => {
                tracing::info!(acls = valid.len(), "ACLs created");
                crate::admin::quotas::await_revision(view, Revision(r.revision)).await;
                Ok(())
            }
            Err(e) => Err((
                crate::admin::kafka_error_for(&e).code(),
                text(e.to_string()),
            )),
        }
    };
    answer(
        parsed
            .into_iter()
            .map(|b| match (b, &stored) {
                (Err(why), _) => (ResponseError::InvalidRequest.code(), text(why)),
                (Ok(_), Ok(())) => (0, None),
                (Ok(_), Err(e)) => e.clone(),
            })
            .collect(),
    )
}

/// Bindings grouped by resource, as Describe and Delete answer them.
fn by_resource(bindings: &[&AclBinding]) -> Vec<DescribeAclsResource> {
    let mut out: BTreeMap<(ResourceType, &str, PatternType), Vec<AclDescription>> = BTreeMap::new();
    for b in bindings {
        let mut d = AclDescription::default();
        d.principal = StrBytes::from_string(b.principal.clone());
        d.host = StrBytes::from_string(b.host.clone());
        d.operation = b.operation.code();
        d.permission_type = b.permission.code();
        out.entry((b.resource_type, &b.resource_name, b.pattern))
            .or_default()
            .push(d);
    }
    out.into_iter()
        .map(|((rt, name, pattern), acls)| {
            let mut r = DescribeAclsResource::default();
            r.resource_type = rt.code();
            r.resource_name = StrBytes::from_string(name.to_string());
            r.pattern_type = pattern.code();
            r.acls = acls;
            r
        })
        .collect()
}

pub fn describe_acls(req: &DescribeAclsRequest, c: &Check, enabled: bool) -> DescribeAclsResponse {
    let mut resp = DescribeAclsResponse::default();
    if !enabled {
        (resp.error_code, resp.error_message) = disabled();
        return resp;
    }
    if !c.cluster(Operation::Describe) {
        (resp.error_code, resp.error_message) = denied("DESCRIBE");
        return resp;
    }
    let codes = FilterCodes {
        resource_type: req.resource_type_filter,
        pattern: req.pattern_type_filter,
        operation: req.operation,
        permission: req.permission_type,
    };
    match filter(
        codes,
        &req.resource_name_filter,
        &req.principal_filter,
        &req.host_filter,
    ) {
        Ok(f) => {
            let found: Vec<&AclBinding> = c.acls().describe(&f).collect();
            resp.resources = by_resource(&found);
        }
        Err(why) => {
            resp.error_code = ResponseError::InvalidRequest.code();
            resp.error_message = text(why);
        }
    }
    resp
}

fn deleted_acl(b: &AclBinding) -> DeleteAclsMatchingAcl {
    let mut m = DeleteAclsMatchingAcl::default();
    m.resource_type = b.resource_type.code();
    m.resource_name = StrBytes::from_string(b.resource_name.clone());
    m.pattern_type = b.pattern.code();
    m.principal = StrBytes::from_string(b.principal.clone());
    m.host = StrBytes::from_string(b.host.clone());
    m.operation = b.operation.code();
    m.permission_type = b.permission.code();
    m
}

fn delete_filter(f: &DeleteAclsFilter) -> Result<AclFilter, String> {
    let codes = FilterCodes {
        resource_type: f.resource_type_filter,
        pattern: f.pattern_type_filter,
        operation: f.operation,
        permission: f.permission_type,
    };
    filter(
        codes,
        &f.resource_name_filter,
        &f.principal_filter,
        &f.host_filter,
    )
}

pub async fn delete_acls(
    req: &DeleteAclsRequest,
    c: &Check,
    enabled: bool,
    meta: &dyn MetaApi,
    view: &ClusterWatch,
) -> DeleteAclsResponse {
    let refused = |(code, msg): (i16, Option<StrBytes>)| {
        let mut r = DeleteAclsFilterResult::default();
        r.error_code = code;
        r.error_message = msg;
        r
    };
    let mut resp = DeleteAclsResponse::default();
    if !enabled {
        resp.filter_results = req.filters.iter().map(|_| refused(disabled())).collect();
        return resp;
    }
    if !c.cluster(Operation::Alter) {
        resp.filter_results = req
            .filters
            .iter()
            .map(|_| refused(denied("ALTER")))
            .collect();
        return resp;
    }
    let parsed: Vec<Result<AclFilter, String>> = req.filters.iter().map(delete_filter).collect();
    let valid: Vec<AclFilter> = parsed
        .iter()
        .filter_map(|f| f.as_ref().ok().cloned())
        .collect();
    let outcome = if valid.is_empty() {
        Ok(Vec::new())
    } else {
        match meta
            .call::<routes::DeleteAcls>(acl_routes::delete_request(&valid))
            .await
        {
            Ok(r) => {
                let revision = Revision(r.revision);
                let gone = acl_routes::deleted(r);
                crate::admin::quotas::await_revision(view, revision).await;
                gone.map_err(|e| {
                    (
                        ResponseError::UnknownServerError.code(),
                        text(e.to_string()),
                    )
                })
            }
            Err(e) => Err((
                crate::admin::kafka_error_for(&e).code(),
                text(e.to_string()),
            )),
        }
    };
    let mut gone = match &outcome {
        Ok(per_filter) => per_filter.clone().into_iter(),
        Err(_) => Vec::new().into_iter(),
    };
    resp.filter_results = parsed
        .into_iter()
        .map(|f| match (f, &outcome) {
            (Err(why), _) => refused((ResponseError::InvalidRequest.code(), text(why))),
            (Ok(_), Err(e)) => refused(e.clone()),
            (Ok(_), Ok(_)) => {
                let mut r = DeleteAclsFilterResult::default();
                r.matching_acls = gone
                    .next()
                    .unwrap_or_default()
                    .iter()
                    .map(deleted_acl)
                    .collect();
                if !r.matching_acls.is_empty() {
                    tracing::info!(acls = r.matching_acls.len(), "ACLs deleted");
                }
                r
            }
        })
        .collect();
    resp
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;

    use super::*;
    use floe_metadata::acl::{PatternFilter, Permission};

    fn creation(rt: i8, name: &str, pattern: i8, principal: &str, op: i8, perm: i8) -> AclCreation {
        let mut c = AclCreation::default();
        c.resource_type = rt;
        c.resource_name = StrBytes::from_string(name.into());
        c.resource_pattern_type = pattern;
        c.principal = StrBytes::from_string(principal.into());
        c.host = StrBytes::from_static_str("*");
        c.operation = op;
        c.permission_type = perm;
        c
    }

    #[test]
    fn creations_become_bindings_or_say_why_not() {
        let b = binding(&creation(2, "orders", 3, "User:alice", 4, 3)).unwrap();
        assert_eq!(b.resource_type, ResourceType::Topic);
        assert_eq!(b.operation, Operation::Write);
        assert_eq!(b.permission, Permission::Allow);
        for bad in [
            creation(1, "t", 3, "User:a", 4, 3), // ANY resource type
            creation(6, "t", 3, "User:a", 4, 3), // delegation token
            creation(2, "t", 1, "User:a", 4, 3), // ANY pattern
            creation(2, "t", 3, "User:a", 1, 3), // ANY operation
            creation(2, "t", 3, "User:a", 4, 1), // ANY permission
            creation(2, "t", 3, "alice", 4, 3),  // no principal type
            creation(4, "t", 3, "User:a", 7, 3), // cluster not named kafka-cluster
        ] {
            assert!(binding(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn without_an_authorizer_every_request_says_so() {
        let c = Check::open();
        let mut d = DeleteAclsRequest::default();
        d.filters = vec![DeleteAclsFilter::default()];
        let r = describe_acls(&DescribeAclsRequest::default(), &c, false);
        assert_eq!(r.error_code, 54);
        assert_eq!(r.error_message.as_deref(), Some(NO_AUTHORIZER));
    }

    fn codes(resource_type: i8, pattern: i8, operation: i8, permission: i8) -> FilterCodes {
        FilterCodes {
            resource_type,
            pattern,
            operation,
            permission,
        }
    }

    #[test]
    fn filters_take_any_and_refuse_unknown_codes() {
        let f = filter(codes(1, 1, 1, 1), &None, &None, &None).unwrap();
        assert_eq!(f, AclFilter::any());
        assert!(filter(codes(9, 1, 1, 1), &None, &None, &None).is_err());
        assert!(filter(codes(1, 0, 1, 1), &None, &None, &None).is_err());
        let name = Some(StrBytes::from_static_str("t"));
        let f = filter(codes(2, 2, 3, 3), &name, &None, &None).unwrap();
        assert_eq!(f.pattern, PatternFilter::Match);
        assert_eq!(f.operation, Some(Operation::Read));
    }
}
