//! Kafka's ACL APIs (CreateAcls, DescribeAcls, DeleteAcls) while no
//! authorizer runs: answered SECURITY_DISABLED, as a Kafka broker without
//! `authorizer.class.name` answers them, so that tools (`kafka-acls.sh`,
//! librdkafka's admin client) say ACLs are off instead of failing on an
//! unknown API.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

/// What clients are told, Kafka's words.
const NO_AUTHORIZER: &str = "No Authorizer is configured.";

fn disabled() -> (i16, Option<StrBytes>) {
    (
        ResponseError::SecurityDisabled.code(),
        Some(StrBytes::from_static_str(NO_AUTHORIZER)),
    )
}

pub fn create_acls(req: &CreateAclsRequest) -> CreateAclsResponse {
    let mut resp = CreateAclsResponse::default();
    resp.results = req
        .creations
        .iter()
        .map(|_| {
            let (code, msg) = disabled();
            let mut r = AclCreationResult::default();
            r.error_code = code;
            r.error_message = msg;
            r
        })
        .collect();
    resp
}

pub fn describe_acls() -> DescribeAclsResponse {
    let mut resp = DescribeAclsResponse::default();
    (resp.error_code, resp.error_message) = disabled();
    resp
}

pub fn delete_acls(req: &DeleteAclsRequest) -> DeleteAclsResponse {
    let mut resp = DeleteAclsResponse::default();
    resp.filter_results = req
        .filters
        .iter()
        .map(|_| {
            let (code, msg) = disabled();
            let mut r = DeleteAclsFilterResult::default();
            r.error_code = code;
            r.error_message = msg;
            r
        })
        .collect();
    resp
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;

    use super::*;

    #[test]
    fn every_acl_request_says_no_authorizer_is_configured() {
        let mut c = CreateAclsRequest::default();
        c.creations = vec![AclCreation::default(), AclCreation::default()];
        let r = create_acls(&c);
        assert_eq!(r.results.len(), 2);
        assert!(r.results.iter().all(|r| r.error_code == 54));
        assert_eq!(describe_acls().error_code, 54);
        let mut d = DeleteAclsRequest::default();
        d.filters = vec![DeleteAclsFilter::default()];
        let r = delete_acls(&d);
        assert_eq!(r.filter_results[0].error_code, 54);
        assert_eq!(
            r.filter_results[0].error_message.as_deref(),
            Some(NO_AUTHORIZER)
        );
    }
}
