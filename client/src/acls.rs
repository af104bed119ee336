//! ACLs as `kafka-acls.sh` manages them (KIP-140: CreateAcls,
//! DescribeAcls, DeleteAcls), with the model of `floe_metadata::acl`.
//!
//! The requests are built and the answers read by pure functions
//! ([`create_request`], [`describe_request`], [`delete_request`],
//! [`created`], [`described`], [`deleted`]), so that both can be checked
//! without a broker; the methods on [`KafkaClient`] only send them.
//!
//! An ACL in an answer with a code unknown here (a resource type, pattern,
//! operation or permission `floe_metadata::acl` does not have) is skipped
//! with a warning. SECURITY_DISABLED (a cluster without an authorizer) and
//! CLUSTER_AUTHORIZATION_FAILED (the principal lacks ALTER or DESCRIBE on
//! the cluster) come back as [`ClientError::Broker`] with a message saying
//! what they mean.

use floe_metadata::acl::{
    AclBinding, AclFilter, CLUSTER_NAME, Operation, PatternFilter, PatternType,
};
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

use crate::connection::KafkaClient;
use crate::error::{ClientError, check_code};

/// Kafka's code for ANY in a filter (resource type, pattern type,
/// operation, permission).
pub use floe_metadata::acl::ANY_CODE as ANY;

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

/// The CreateAcls request creating `bindings`, in order.
pub fn create_request(bindings: &[AclBinding]) -> CreateAclsRequest {
    CreateAclsRequest::default().with_creations(bindings.iter().map(creation).collect())
}

/// A filter as DescribeAcls asks it (a name, principal or host left open is
/// null).
pub fn describe_request(f: &AclFilter) -> DescribeAclsRequest {
    let c = f.codes();
    DescribeAclsRequest::default()
        .with_resource_type_filter(c.resource_type)
        .with_resource_name_filter(opt(&f.resource_name))
        .with_pattern_type_filter(c.pattern)
        .with_principal_filter(opt(&f.principal))
        .with_host_filter(opt(&f.host))
        .with_operation(c.operation)
        .with_permission_type(c.permission)
}

/// A filter as DeleteAcls carries it.
pub fn delete_filter(f: &AclFilter) -> DeleteAclsFilter {
    let c = f.codes();
    DeleteAclsFilter::default()
        .with_resource_type_filter(c.resource_type)
        .with_resource_name_filter(opt(&f.resource_name))
        .with_pattern_type_filter(c.pattern)
        .with_principal_filter(opt(&f.principal))
        .with_host_filter(opt(&f.host))
        .with_operation(c.operation)
        .with_permission_type(c.permission)
}

/// The DeleteAcls request with `filters`, in order.
pub fn delete_request(filters: &[AclFilter]) -> DeleteAclsRequest {
    DeleteAclsRequest::default().with_filters(filters.iter().map(delete_filter).collect())
}

/// One ACL of an answer, as codes and strings.
struct Answered<'a> {
    resource_type: i8,
    resource_name: &'a StrBytes,
    pattern: i8,
    principal: &'a StrBytes,
    host: &'a StrBytes,
    operation: i8,
    permission: i8,
}

impl<'a> Answered<'a> {
    fn described(r: &'a DescribeAclsResource, a: &'a AclDescription) -> Self {
        Answered {
            resource_type: r.resource_type,
            resource_name: &r.resource_name,
            pattern: r.pattern_type,
            principal: &a.principal,
            host: &a.host,
            operation: a.operation,
            permission: a.permission_type,
        }
    }

    fn deleted(m: &'a DeleteAclsMatchingAcl) -> Self {
        Answered {
            resource_type: m.resource_type,
            resource_name: &m.resource_name,
            pattern: m.pattern_type,
            principal: &m.principal,
            host: &m.host,
            operation: m.operation,
            permission: m.permission_type,
        }
    }

    /// The binding, or `None` when a code is unknown here.
    fn decode(&self) -> Option<AclBinding> {
        AclBinding::from_codes(
            self.resource_type,
            self.resource_name.to_string(),
            self.pattern,
            self.principal.to_string(),
            self.host.to_string(),
            self.operation,
            self.permission,
        )
        .ok()
    }

    /// The binding, or `None` (and a warning) when a code is unknown here.
    fn binding(&self) -> Option<AclBinding> {
        let b = self.decode();
        if b.is_none() {
            tracing::warn!(
                resource_type = self.resource_type,
                resource = %self.resource_name.as_str(),
                pattern_type = self.pattern,
                principal = %self.principal.as_str(),
                operation = self.operation,
                permission_type = self.permission,
                "skipping an ACL with a code unknown to this client"
            );
        }
        b
    }
}

/// Reads a CreateAcls answer: the first refused creation is the error,
/// naming its binding.
pub fn created(resp: &CreateAclsResponse, bindings: &[AclBinding]) -> Result<(), ClientError> {
    if resp.results.len() != bindings.len() {
        return Err(ClientError::MissingAnswer {
            what: format!(
                "CreateAcls: {} result(s) for {} ACL(s)",
                resp.results.len(),
                bindings.len()
            ),
        });
    }
    for (r, b) in resp.results.iter().zip(bindings) {
        check_creation(r, b)?;
    }
    Ok(())
}

fn check_creation(r: &AclCreationResult, b: &AclBinding) -> Result<(), ClientError> {
    check_acl_code(
        r.error_code,
        r.error_message.as_ref(),
        Operation::Alter,
        || format!("creating the ACL {}", describe(b)),
    )
}

/// The bindings of a DescribeAcls answer, each resource's ACLs flattened
/// (those with codes unknown here skipped, with a warning).
pub fn described(resp: &DescribeAclsResponse) -> Result<Vec<AclBinding>, ClientError> {
    check_acl_code(
        resp.error_code,
        resp.error_message.as_ref(),
        Operation::Describe,
        || "listing ACLs".to_owned(),
    )?;
    Ok(flatten(&resp.resources))
}

/// Every ACL of every resource of a DescribeAcls answer, as bindings.
pub fn flatten(resources: &[DescribeAclsResource]) -> Vec<AclBinding> {
    resources
        .iter()
        .flat_map(|r| r.acls.iter().map(move |a| Answered::described(r, a)))
        .filter_map(|a| a.binding())
        .collect()
}

/// The ACLs a DeleteAcls answer says were deleted, per filter of
/// `filters` (the request's, in order).
pub fn deleted(
    resp: &DeleteAclsResponse,
    filters: &[AclFilter],
) -> Result<Vec<Vec<AclBinding>>, ClientError> {
    if resp.filter_results.len() != filters.len() {
        return Err(ClientError::MissingAnswer {
            what: format!(
                "DeleteAcls: {} result(s) for {} filter(s)",
                resp.filter_results.len(),
                filters.len()
            ),
        });
    }
    resp.filter_results
        .iter()
        .zip(filters)
        .map(|(r, f)| deleted_by(r, f))
        .collect()
}

/// The ACLs one filter deleted; an ACL the broker matched but could not
/// delete is an error naming it (as Kafka's admin client reports it).
fn deleted_by(r: &DeleteAclsFilterResult, f: &AclFilter) -> Result<Vec<AclBinding>, ClientError> {
    check_acl_code(
        r.error_code,
        r.error_message.as_ref(),
        Operation::Alter,
        || format!("removing ACLs matching {}", describe_filter(f)),
    )?;
    let mut out = Vec::with_capacity(r.matching_acls.len());
    for m in &r.matching_acls {
        let b = Answered::deleted(m).binding();
        check_acl_code(
            m.error_code,
            m.error_message.as_ref(),
            Operation::Alter,
            || match &b {
                Some(b) => format!("removing the ACL {}", describe(b)),
                None => format!("removing an ACL on {}", m.resource_name.as_str()),
            },
        )?;
        out.extend(b);
    }
    Ok(out)
}

/// What SECURITY_DISABLED means here.
const ACLS_OFF: &str = "ACLs are off: the cluster runs without an authorizer \
                        (a Floe proxy needs --authorizer acl)";

/// [`check_code`], with the meaning of the two errors every ACL request can
/// get: SECURITY_DISABLED (no authorizer) and CLUSTER_AUTHORIZATION_FAILED
/// (`needs` on the cluster is missing).
fn check_acl_code(
    code: i16,
    message: Option<&StrBytes>,
    needs: Operation,
    what: impl FnOnce() -> String,
) -> Result<(), ClientError> {
    check_code(code, message, what).map_err(|e| explained(e, needs))
}

/// A broker error with what it means for ACLs added to its message.
fn explained(e: ClientError, needs: Operation) -> ClientError {
    let ClientError::Broker {
        what,
        error,
        message,
    } = e
    else {
        return e;
    };
    let hint = match error {
        ResponseError::SecurityDisabled => ACLS_OFF.to_owned(),
        ResponseError::ClusterAuthorizationFailed => format!(
            "the principal needs {} on the cluster ({CLUSTER_NAME}), or to be a super user",
            needs.name()
        ),
        _ => {
            return ClientError::Broker {
                what,
                error,
                message,
            };
        }
    };
    let message = match message.filter(|m| !m.trim().is_empty()) {
        Some(m) => format!("{} ({hint})", m.trim()),
        None => hint,
    };
    ClientError::Broker {
        what,
        error,
        message: Some(message),
    }
}

impl KafkaClient {
    /// Creates `bindings` (CreateAcls); the first refused one is the error,
    /// naming it. Needs ALTER on the cluster.
    pub async fn create_acls(&mut self, bindings: &[AclBinding]) -> Result<(), ClientError> {
        if bindings.is_empty() {
            return Ok(());
        }
        let version = self.version::<CreateAclsRequest>()?;
        let resp = self.send(version, create_request(bindings)).await?;
        created(&resp, bindings)
    }

    /// The ACLs `filter` matches (DescribeAcls). Needs DESCRIBE on the
    /// cluster.
    pub async fn describe_acls(
        &mut self,
        filter: &AclFilter,
    ) -> Result<Vec<AclBinding>, ClientError> {
        let version = self.version::<DescribeAclsRequest>()?;
        let resp = self.send(version, describe_request(filter)).await?;
        described(&resp)
    }

    /// Deletes what each filter matches (DeleteAcls); returns the deleted
    /// ACLs, per filter (one two filters match is listed under the first).
    /// Needs ALTER on the cluster.
    pub async fn delete_acls(
        &mut self,
        filters: &[AclFilter],
    ) -> Result<Vec<Vec<AclBinding>>, ClientError> {
        if filters.is_empty() {
            return Ok(Vec::new());
        }
        let version = self.version::<DeleteAclsRequest>()?;
        let resp = self.send(version, delete_request(filters)).await?;
        deleted(&resp, filters)
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

/// The name of a filter's pattern type, as Kafka writes it.
pub fn pattern_filter_name(p: PatternFilter) -> &'static str {
    match p {
        PatternFilter::Any => "ANY",
        PatternFilter::Match => "MATCH",
        PatternFilter::Literal => "LITERAL",
        PatternFilter::Prefixed => "PREFIXED",
    }
}

/// A filter in words: what it sets, or `every ACL`.
pub fn describe_filter(f: &AclFilter) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(t) = f.resource_type {
        parts.push(t.name().to_owned());
    }
    if let Some(n) = &f.resource_name {
        parts.push(n.clone());
    }
    if f.pattern != PatternFilter::Any {
        parts.push(format!("({})", pattern_filter_name(f.pattern)));
    }
    if let Some(p) = &f.principal {
        parts.push(format!("principal {p}"));
    }
    if let Some(h) = &f.host {
        parts.push(format!("host {h}"));
    }
    if let Some(o) = f.operation {
        parts.push(format!("operation {}", o.name()));
    }
    if let Some(p) = f.permission {
        parts.push(p.name().to_owned());
    }
    if parts.is_empty() {
        "every ACL".to_owned()
    } else {
        parts.join(" ")
    }
}

/// The filter matching exactly `b` and nothing else.
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

    use crate::ErrorKind;

    use super::*;
    use floe_metadata::acl::{Permission, ResourceType};

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

    fn topic_write() -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: "orders".into(),
            pattern: PatternType::Literal,
            principal: "User:alice".into(),
            host: "10.0.0.1".into(),
            operation: Operation::Write,
            permission: Permission::Deny,
        }
    }

    fn matching(b: &AclBinding) -> DeleteAclsMatchingAcl {
        DeleteAclsMatchingAcl::default()
            .with_resource_type(b.resource_type.code())
            .with_resource_name(sb(&b.resource_name))
            .with_pattern_type(b.pattern.code())
            .with_principal(sb(&b.principal))
            .with_host(sb(&b.host))
            .with_operation(b.operation.code())
            .with_permission_type(b.permission.code())
    }

    fn acl(op: i8) -> AclDescription {
        AclDescription::default()
            .with_principal(sb("User:bob"))
            .with_host(sb("*"))
            .with_operation(op)
            .with_permission_type(3)
    }

    #[test]
    fn filters_send_any_and_null_for_what_they_leave_open() {
        let r = describe_request(&AclFilter::any());
        assert_eq!(
            (
                r.resource_type_filter,
                r.pattern_type_filter,
                r.operation,
                r.permission_type
            ),
            (ANY, ANY, ANY, ANY)
        );
        assert!(r.resource_name_filter.is_none());
        assert!(r.principal_filter.is_none() && r.host_filter.is_none());
        let d = delete_request(&[exact_filter(&b()), AclFilter::any()]);
        assert_eq!(d.filters.len(), 2);
        let f = &d.filters[0];
        assert_eq!((f.resource_type_filter, f.pattern_type_filter), (3, 4));
        assert_eq!((f.operation, f.permission_type), (3, 3));
        assert_eq!(
            f.resource_name_filter.as_ref().map(|s| s.to_string()),
            Some("billing".to_string())
        );
        assert_eq!(
            f.principal_filter.as_ref().map(|s| s.to_string()),
            Some("User:bob".to_string())
        );
        assert_eq!(d.filters[1].resource_type_filter, ANY);
        let mut m = AclFilter::any();
        m.pattern = PatternFilter::Match;
        m.resource_name = Some("orders".into());
        assert_eq!(describe_request(&m).pattern_type_filter, 2);
    }

    #[test]
    fn creations_carry_kafkas_codes_in_order() {
        let r = create_request(&[b(), topic_write()]);
        assert_eq!(r.creations.len(), 2);
        let c = &r.creations[1];
        assert_eq!(
            (
                c.resource_type,
                c.resource_pattern_type,
                c.operation,
                c.permission_type
            ),
            (2, 3, 4, 2)
        );
        assert_eq!(c.host.as_str(), "10.0.0.1");
        assert_eq!(c.principal.as_str(), "User:alice");
    }

    #[test]
    fn answers_flatten_into_bindings_and_skip_unknown_codes() {
        let r = DescribeAclsResource::default()
            .with_resource_type(3)
            .with_resource_name(sb("billing"))
            .with_pattern_type(4)
            .with_acls(vec![acl(3), acl(99)]);
        let unknown_type = DescribeAclsResource::default()
            .with_resource_type(6)
            .with_resource_name(sb("token"))
            .with_pattern_type(3)
            .with_acls(vec![acl(3)]);
        let mut write = b();
        write.operation = Operation::Write;
        let resp = DescribeAclsResponse::default().with_resources(vec![
            r.clone().with_acls(vec![acl(3), acl(99), acl(4)]),
            unknown_type,
        ]);
        assert_eq!(described(&resp).unwrap(), vec![b(), write]);
        assert_eq!(flatten(&[r]), vec![b()]);
        assert_eq!(
            describe(&b()),
            "ALLOW User:bob from * READ on GROUP billing (PREFIXED)"
        );
    }

    #[test]
    fn a_disabled_authorizer_says_acls_are_off() {
        let resp = DescribeAclsResponse::default()
            .with_error_code(54)
            .with_error_message(Some(sb("No Authorizer is configured.")));
        let e = described(&resp).unwrap_err();
        assert_eq!(e.broker_error(), Some(ResponseError::SecurityDisabled));
        let text = e.to_string();
        assert!(text.contains("SECURITY_DISABLED (54)"), "{text}");
        assert!(text.contains("ACLs are off"), "{text}");
        assert!(text.contains("No Authorizer is configured."), "{text}");
        // Without a broker message, the hint alone.
        let bare = described(&DescribeAclsResponse::default().with_error_code(54)).unwrap_err();
        assert!(bare.to_string().ends_with(ACLS_OFF), "{bare}");
    }

    #[test]
    fn a_missing_cluster_permission_is_named() {
        let resp = DescribeAclsResponse::default().with_error_code(31);
        let text = described(&resp).unwrap_err().to_string();
        assert!(text.contains("CLUSTER_AUTHORIZATION_FAILED (31)"), "{text}");
        assert!(text.contains("DESCRIBE on the cluster"), "{text}");
        let resp = CreateAclsResponse::default().with_results(vec![
            AclCreationResult::default(),
            AclCreationResult::default().with_error_code(31),
        ]);
        let text = created(&resp, &[b(), topic_write()])
            .unwrap_err()
            .to_string();
        assert!(text.contains("ALTER on the cluster"), "{text}");
        assert!(
            text.contains("creating the ACL DENY User:alice from 10.0.0.1 WRITE on TOPIC orders"),
            "{text}"
        );
        // Other errors are left as check_code makes them.
        let resp = CreateAclsResponse::default().with_results(vec![
            AclCreationResult::default()
                .with_error_code(42)
                .with_error_message(Some(sb("bad host"))),
        ]);
        let e = created(&resp, &[b()]).unwrap_err();
        assert!(
            e.to_string().ends_with("INVALID_REQUEST (42): bad host"),
            "{e}"
        );
    }

    #[test]
    fn creations_answered_in_full_or_refused() {
        let ok = CreateAclsResponse::default().with_results(vec![AclCreationResult::default(); 2]);
        created(&ok, &[b(), topic_write()]).unwrap();
        let short = CreateAclsResponse::default().with_results(vec![AclCreationResult::default()]);
        let e = created(&short, &[b(), topic_write()]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol);
    }

    #[test]
    fn deletions_are_listed_per_filter() {
        let filters = [exact_filter(&b()), AclFilter::any()];
        let mut weird = matching(&b());
        weird.operation = 99;
        let resp = DeleteAclsResponse::default().with_filter_results(vec![
            DeleteAclsFilterResult::default().with_matching_acls(vec![matching(&b()), weird]),
            DeleteAclsFilterResult::default().with_matching_acls(vec![matching(&topic_write())]),
        ]);
        assert_eq!(
            deleted(&resp, &filters).unwrap(),
            vec![vec![b()], vec![topic_write()]]
        );
        // One result for two filters: the answer is short.
        let short = DeleteAclsResponse::default()
            .with_filter_results(vec![DeleteAclsFilterResult::default()]);
        assert_eq!(
            deleted(&short, &filters).unwrap_err().kind(),
            ErrorKind::Protocol
        );
    }

    #[test]
    fn a_failed_deletion_names_the_filter_or_the_acl() {
        let filters = [exact_filter(&b())];
        let refused = DeleteAclsResponse::default()
            .with_filter_results(vec![DeleteAclsFilterResult::default().with_error_code(54)]);
        let text = deleted(&refused, &filters).unwrap_err().to_string();
        assert!(
            text.starts_with("removing ACLs matching GROUP billing (PREFIXED) principal User:bob"),
            "{text}"
        );
        assert!(text.contains("ACLs are off"), "{text}");
        let mut failed = matching(&b());
        failed.error_code = 31;
        let one = DeleteAclsResponse::default().with_filter_results(vec![
            DeleteAclsFilterResult::default().with_matching_acls(vec![failed]),
        ]);
        let text = deleted(&one, &filters).unwrap_err().to_string();
        assert!(
            text.starts_with("removing the ACL ALLOW User:bob from * READ on GROUP billing"),
            "{text}"
        );
        assert!(text.contains("ALTER on the cluster"), "{text}");
    }

    #[test]
    fn filters_in_words() {
        assert_eq!(describe_filter(&AclFilter::any()), "every ACL");
        let mut f = AclFilter::any();
        f.resource_type = Some(ResourceType::Topic);
        f.pattern = PatternFilter::Match;
        f.operation = Some(Operation::Write);
        f.permission = Some(Permission::Deny);
        assert_eq!(describe_filter(&f), "TOPIC (MATCH) operation WRITE DENY");
    }

    /// A broker keeping ACLs in a model, as the proxy does, speaking the
    /// ACL APIs at their newest versions; `disabled`: answering each
    /// SECURITY_DISABLED.
    mod fake {
        use std::sync::{Arc, Mutex};
        use std::time::Duration;

        use floe_metadata::acl::AclModel;
        use floe_proxy::codec::DecodedRequest;
        use kafka_protocol::messages::describe_acls_response::{
            AclDescription, DescribeAclsResource,
        };
        use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

        use super::super::*;
        use crate::connection::CLIENT_VERSIONS;
        use crate::test_support::{fake_broker, versions};

        fn string(s: &Option<StrBytes>) -> Option<String> {
            s.as_ref().map(|s| s.to_string())
        }

        #[allow(clippy::too_many_arguments)]
        fn filter(
            rt: i8,
            name: &Option<StrBytes>,
            pattern: i8,
            principal: &Option<StrBytes>,
            host: &Option<StrBytes>,
            op: i8,
            perm: i8,
        ) -> AclFilter {
            let codes = floe_metadata::acl::FilterCodes {
                resource_type: rt,
                pattern,
                operation: op,
                permission: perm,
            };
            AclFilter::from_codes(codes, string(name), string(principal), string(host)).unwrap()
        }

        fn create(m: &mut AclModel, r: &CreateAclsRequest) -> ResponseKind {
            let results = r
                .creations
                .iter()
                .map(|c| {
                    let b = AclBinding::from_codes(
                        c.resource_type,
                        c.resource_name.to_string(),
                        c.resource_pattern_type,
                        c.principal.to_string(),
                        c.host.to_string(),
                        c.operation,
                        c.permission_type,
                    )
                    .unwrap();
                    match m.create(&[b]) {
                        Ok(()) => AclCreationResult::default(),
                        Err(e) => AclCreationResult::default()
                            .with_error_code(42)
                            .with_error_message(Some(sb(&e.to_string()))),
                    }
                })
                .collect();
            ResponseKind::CreateAcls(CreateAclsResponse::default().with_results(results))
        }

        fn describe(m: &AclModel, r: &DescribeAclsRequest) -> ResponseKind {
            let f = filter(
                r.resource_type_filter,
                &r.resource_name_filter,
                r.pattern_type_filter,
                &r.principal_filter,
                &r.host_filter,
                r.operation,
                r.permission_type,
            );
            let resources = m
                .describe(&f)
                .map(|b| {
                    DescribeAclsResource::default()
                        .with_resource_type(b.resource_type.code())
                        .with_resource_name(sb(&b.resource_name))
                        .with_pattern_type(b.pattern.code())
                        .with_acls(vec![
                            AclDescription::default()
                                .with_principal(sb(&b.principal))
                                .with_host(sb(&b.host))
                                .with_operation(b.operation.code())
                                .with_permission_type(b.permission.code()),
                        ])
                })
                .collect();
            ResponseKind::DescribeAcls(DescribeAclsResponse::default().with_resources(resources))
        }

        fn delete(m: &mut AclModel, r: &DeleteAclsRequest) -> ResponseKind {
            let filters: Vec<AclFilter> = r
                .filters
                .iter()
                .map(|f| {
                    filter(
                        f.resource_type_filter,
                        &f.resource_name_filter,
                        f.pattern_type_filter,
                        &f.principal_filter,
                        &f.host_filter,
                        f.operation,
                        f.permission_type,
                    )
                })
                .collect();
            let results = m
                .delete(&filters)
                .iter()
                .map(|gone| {
                    DeleteAclsFilterResult::default()
                        .with_matching_acls(gone.iter().map(super::matching).collect())
                })
                .collect();
            ResponseKind::DeleteAcls(DeleteAclsResponse::default().with_filter_results(results))
        }

        fn answer(m: &Mutex<AclModel>, disabled: bool, req: &DecodedRequest) -> ResponseKind {
            let mut m = m.lock().unwrap();
            match &req.body {
                RequestKind::ApiVersions(_) => {
                    let mut keys = CLIENT_VERSIONS.to_vec();
                    keys.extend([
                        (ApiKey::CreateAcls, 1, 3),
                        (ApiKey::DescribeAcls, 1, 3),
                        (ApiKey::DeleteAcls, 1, 3),
                    ]);
                    ResponseKind::ApiVersions(versions(0, &keys))
                }
                RequestKind::DescribeAcls(_) if disabled => ResponseKind::DescribeAcls(
                    DescribeAclsResponse::default()
                        .with_error_code(54)
                        .with_error_message(Some(sb("No Authorizer is configured."))),
                ),
                RequestKind::CreateAcls(r) => create(&mut m, r),
                RequestKind::DescribeAcls(r) => describe(&m, r),
                RequestKind::DeleteAcls(r) => delete(&mut m, r),
                other => panic!("unexpected {other:?}"),
            }
        }

        pub(super) async fn broker(disabled: bool) -> KafkaClient {
            let model = Arc::new(Mutex::new(AclModel::default()));
            let addr = fake_broker(move |req| {
                Some((
                    answer(&model, disabled, req),
                    req.header.correlation_id,
                    req.version,
                ))
            })
            .await;
            KafkaClient::connect(&addr, Duration::from_secs(5))
                .await
                .expect("connects")
        }
    }

    #[tokio::test]
    async fn acls_round_trip_through_a_broker() {
        let mut c = fake::broker(false).await;
        c.create_acls(&[b(), topic_write()]).await.unwrap();
        let mut all = c.describe_acls(&AclFilter::any()).await.unwrap();
        all.sort();
        let mut want = vec![b(), topic_write()];
        want.sort();
        assert_eq!(all, want);
        let mut topics = AclFilter::any();
        topics.resource_type = Some(ResourceType::Topic);
        assert_eq!(c.describe_acls(&topics).await.unwrap(), vec![topic_write()]);
        let mut bad = b();
        bad.principal = "bob".into();
        let e = c.create_acls(&[bad]).await.unwrap_err().to_string();
        assert!(
            e.contains("creating the ACL ALLOW bob") && e.contains("Type:name"),
            "{e}"
        );
        let gone = c
            .delete_acls(&[exact_filter(&b()), topics.clone(), topics])
            .await
            .unwrap();
        assert_eq!(gone, vec![vec![b()], vec![topic_write()], vec![]]);
        assert!(c.describe_acls(&AclFilter::any()).await.unwrap().is_empty());
        assert_eq!(
            c.delete_acls(&[]).await.unwrap(),
            Vec::<Vec<AclBinding>>::new()
        );
    }

    #[tokio::test]
    async fn a_broker_without_an_authorizer_says_so() {
        let mut c = fake::broker(true).await;
        let e = c.describe_acls(&AclFilter::any()).await.unwrap_err();
        assert_eq!(e.broker_error(), Some(ResponseError::SecurityDisabled));
        assert!(e.to_string().contains("ACLs are off"), "{e}");
    }
}
