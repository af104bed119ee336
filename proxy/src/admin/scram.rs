//! SCRAM users (KIP-554): DescribeUserScramCredentials answered from this
//! proxy's view, AlterUserScramCredentials written to the metadata service
//! (`floe_metadata::scram`), each user's changes together or not at all.
//!
//! A client sends the salted password (`Hi(password, salt, i)`); the proxy
//! derives StoredKey and ServerKey from it ([`crate::sasl::scram`]) and
//! only those are stored. The errors are Kafka's, per user.

use std::collections::{BTreeMap, HashSet};

use floe_metadata::api::scram_routes::alter_request;
use floe_metadata::api::{MetaApi, routes};
use floe_metadata::ids::Revision;
use floe_metadata::scram::{ScramAlteration, ScramMechanism, ScramModel};
use floe_metadata::watch::ClusterWatch;
use floe_metadata::{ErrorKind, MetaError};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};

use super::{Refusal, kafka_error_for, str_bytes};

fn refusal(error: ResponseError, message: impl Into<String>) -> Refusal {
    Refusal::new(error, message)
}

/// Answers DescribeUserScramCredentials: the users named (every user for
/// none), their mechanisms and iteration counts; never a key.
pub fn describe_user_scram_credentials(
    scram: &ScramModel,
    req: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let info = |creds: &BTreeMap<ScramMechanism, floe_metadata::scram::ScramCredential>| {
        creds
            .iter()
            .map(|(m, c)| {
                CredentialInfo::default()
                    .with_mechanism(m.kafka_type())
                    .with_iterations(i32::try_from(c.iterations).unwrap_or(i32::MAX))
            })
            .collect::<Vec<_>>()
    };
    let named: Vec<String> = req
        .users
        .iter()
        .flatten()
        .map(|u| u.name.to_string())
        .collect();
    let results = if named.is_empty() {
        scram
            .users
            .iter()
            .map(|(user, creds)| {
                DescribeUserScramCredentialsResult::default()
                    .with_user(str_bytes(user.clone()))
                    .with_credential_infos(info(creds))
            })
            .collect()
    } else {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for n in &named {
            *counts.entry(n.as_str()).or_default() += 1;
        }
        let mut answered = HashSet::new();
        named
            .iter()
            .filter(|n| answered.insert(n.as_str()))
            .map(|user| {
                let r = DescribeUserScramCredentialsResult::default()
                    .with_user(str_bytes(user.clone()));
                let refused = if counts[user.as_str()] > 1 {
                    Some(refusal(
                        ResponseError::DuplicateResource,
                        format!("Cannot describe SCRAM credentials for the same user twice in a single request: {user}"),
                    ))
                } else {
                    match scram.users.get(user) {
                        Some(creds) => return r.with_credential_infos(info(creds)),
                        None => Some(refusal(
                            ResponseError::ResourceNotFound,
                            format!("Attempt to describe a user credential that does not exist: {user}"),
                        )),
                    }
                };
                match refused {
                    Some(f) => r.with_error_code(f.code()).with_error_message(f.message()),
                    None => r,
                }
            })
            .collect()
    };
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

/// One user's changes as the request gives them, before checks.
#[derive(Default)]
struct UserChange {
    alteration: Option<ScramAlteration>,
    refused: Option<Refusal>,
    /// Mechanisms named, to find one named twice.
    named: Vec<i8>,
}

impl UserChange {
    fn refuse(&mut self, r: Refusal) {
        if self.refused.is_none() {
            self.refused = Some(r);
        }
    }

    fn name(&mut self, mechanism: i8) {
        if self.named.contains(&mechanism) {
            self.refuse(refusal(
                ResponseError::DuplicateResource,
                "A user credential cannot be altered twice in the same request",
            ));
        }
        self.named.push(mechanism);
    }
}

fn mechanism_of(t: i8) -> Result<ScramMechanism, Refusal> {
    ScramMechanism::from_kafka_type(t).ok_or_else(|| {
        refusal(
            ResponseError::UnsupportedSaslMechanism,
            format!("Unknown SCRAM mechanism {t}"),
        )
    })
}

/// Answers AlterUserScramCredentials: each user's deletions and upsertions
/// checked, the valid users' changes written in one metadata call (each
/// applied or refused on its own), each user answered.
pub async fn alter_user_scram_credentials(
    meta: &dyn MetaApi,
    view: &ClusterWatch,
    req: &AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let current = view.current().scram.clone();
    let mut order: Vec<String> = Vec::new();
    let mut changes: BTreeMap<String, UserChange> = BTreeMap::new();
    fn change<'a>(
        order: &mut Vec<String>,
        changes: &'a mut BTreeMap<String, UserChange>,
        user: &str,
    ) -> &'a mut UserChange {
        if !changes.contains_key(user) {
            order.push(user.to_string());
        }
        changes.entry(user.to_string()).or_default()
    }
    for d in &req.deletions {
        let user = d.name.to_string();
        let c = change(&mut order, &mut changes, &user);
        c.name(d.mechanism);
        if user.is_empty() {
            c.refuse(refusal(
                ResponseError::UnacceptableCredential,
                "Username must not be empty",
            ));
            continue;
        }
        match mechanism_of(d.mechanism) {
            Err(r) => c.refuse(r),
            Ok(m) => {
                if current.users.get(&user).is_none_or(|u| !u.contains_key(&m)) {
                    c.refuse(refusal(
                        ResponseError::ResourceNotFound,
                        "Attempt to delete a user credential that does not exist",
                    ));
                }
                c.alteration
                    .get_or_insert_with(|| empty(&user))
                    .delete
                    .push(m);
            }
        }
    }
    for u in &req.upsertions {
        let user = u.name.to_string();
        let c = change(&mut order, &mut changes, &user);
        c.name(u.mechanism);
        if user.is_empty() {
            c.refuse(refusal(
                ResponseError::UnacceptableCredential,
                "Username must not be empty",
            ));
            continue;
        }
        let m = match mechanism_of(u.mechanism) {
            Ok(m) => m,
            Err(r) => {
                c.refuse(r);
                continue;
            }
        };
        let iterations = match u32::try_from(u.iterations) {
            Ok(i) if i < ScramMechanism::MIN_ITERATIONS => {
                c.refuse(refusal(
                    ResponseError::UnacceptableCredential,
                    "Too few iterations",
                ));
                continue;
            }
            Ok(i) if i > ScramMechanism::MAX_ITERATIONS => {
                c.refuse(refusal(
                    ResponseError::UnacceptableCredential,
                    "Too many iterations",
                ));
                continue;
            }
            Ok(i) => i,
            Err(_) => {
                c.refuse(refusal(
                    ResponseError::UnacceptableCredential,
                    "Too few iterations",
                ));
                continue;
            }
        };
        if u.salt.is_empty() || u.salted_password.is_empty() {
            c.refuse(refusal(
                ResponseError::UnacceptableCredential,
                "The salt and the salted password must not be empty",
            ));
            continue;
        }
        let cred = crate::sasl::scram::credential_from_salted_password(
            m,
            &u.salted_password,
            u.salt.to_vec(),
            iterations,
        );
        c.alteration
            .get_or_insert_with(|| empty(&user))
            .upsert
            .push((m, cred));
    }
    let valid: Vec<ScramAlteration> = order
        .iter()
        .filter_map(|u| {
            let c = &changes[u];
            if c.refused.is_some() {
                return None;
            }
            c.alteration.clone()
        })
        .collect();
    let mut outcome: BTreeMap<String, Result<(), Refusal>> = BTreeMap::new();
    if !valid.is_empty() {
        match meta.call::<routes::AlterScram>(alter_request(&valid)).await {
            Ok(r) => {
                for res in r.results {
                    let o = match meta_refusal(&res.error_kind, &res.message) {
                        None => Ok(()),
                        Some(f) => Err(f),
                    };
                    outcome.insert(res.user, o);
                }
                tracing::info!(users = valid.len(), "SCRAM credentials altered");
                super::quotas::await_revision(view, Revision(r.revision)).await;
            }
            Err(e) => {
                for a in &valid {
                    outcome.insert(
                        a.user.clone(),
                        Err(refusal(kafka_error_for(&e), e.to_string())),
                    );
                }
            }
        }
    }
    let results = order
        .iter()
        .map(|user| {
            let c = &changes[user];
            let r = AlterUserScramCredentialsResult::default().with_user(str_bytes(user.clone()));
            let refused = c
                .refused
                .clone()
                .or_else(|| outcome.get(user).and_then(|o| o.clone().err()));
            match refused {
                Some(f) => r.with_error_code(f.code()).with_error_message(f.message()),
                None => r,
            }
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// A user's refusal by the metadata service (its error kind's name, empty
/// when the change applied) in Kafka's terms: a credential deleted since
/// this proxy's view showed it is RESOURCE_NOT_FOUND, a credential breaking
/// the rules UNACCEPTABLE_CREDENTIAL, anything else as for every admin
/// request.
fn meta_refusal(kind: &str, message: &str) -> Option<Refusal> {
    if kind.is_empty() {
        return None;
    }
    let error = match ErrorKind::from_name(kind) {
        Some(ErrorKind::NotFound) => ResponseError::ResourceNotFound,
        Some(ErrorKind::InvalidRequest) | None => ResponseError::UnacceptableCredential,
        Some(kind) => kafka_error_for(&MetaError::Remote {
            kind,
            message: message.to_string(),
        }),
    };
    Some(refusal(error, message))
}

fn empty(user: &str) -> ScramAlteration {
    ScramAlteration {
        user: user.to_string(),
        upsert: Vec::new(),
        delete: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;
    use std::time::Duration;

    use floe_metadata::node::{MetaConfig, MetaNode};
    use kafka_protocol::messages::alter_user_scram_credentials_request::{
        ScramCredentialDeletion, ScramCredentialUpsertion,
    };
    use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;

    use super::*;
    use crate::sasl::scram::{salted_password, verify_password};

    fn upsert(
        user: &str,
        mechanism: i8,
        iterations: i32,
        password: &str,
    ) -> ScramCredentialUpsertion {
        let salt = b"0123456789abcdef".to_vec();
        let salted = ScramMechanism::from_kafka_type(mechanism)
            .map(|m| salted_password(m, password.as_bytes(), &salt, iterations.max(1) as u32))
            .unwrap_or_else(|| vec![1; 32]);
        ScramCredentialUpsertion::default()
            .with_name(str_bytes(user))
            .with_mechanism(mechanism)
            .with_iterations(iterations)
            .with_salt(salt.into())
            .with_salted_password(salted.into())
    }

    fn delete(user: &str, mechanism: i8) -> ScramCredentialDeletion {
        ScramCredentialDeletion::default()
            .with_name(str_bytes(user))
            .with_mechanism(mechanism)
    }

    fn codes(r: &AlterUserScramCredentialsResponse) -> Vec<(String, i16)> {
        r.results
            .iter()
            .map(|r| (r.user.to_string(), r.error_code))
            .collect()
    }

    #[test]
    fn metadata_refusals_have_kafkas_codes() {
        let code = |kind: &str| meta_refusal(kind, "m").map(|r| r.error);
        assert_eq!(code(""), None);
        assert_eq!(code("NotFound"), Some(ResponseError::ResourceNotFound));
        assert_eq!(
            code("InvalidRequest"),
            Some(ResponseError::UnacceptableCredential)
        );
        assert_eq!(code("Unavailable"), Some(ResponseError::RequestTimedOut));
        assert_eq!(code("what"), Some(ResponseError::UnacceptableCredential));
    }

    #[tokio::test]
    async fn users_are_altered_and_described_with_kafkas_errors() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = MetaConfig::new(1, "127.0.0.1:0".parse().unwrap(), dir.path().join("meta"));
        cfg.init = true;
        let node = MetaNode::start(cfg).await.unwrap();
        let meta: Arc<dyn MetaApi> = node.local_api();
        let view = ClusterWatch::start(meta.clone());
        let alter = |req: AlterUserScramCredentialsRequest| {
            let (meta, view) = (meta.clone(), view.clone());
            async move { alter_user_scram_credentials(meta.as_ref(), &view, &req).await }
        };
        // Two users, two mechanisms.
        let r = alter(
            AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                upsert("alice", 2, 8192, "pw-a"),
                upsert("alice", 1, 4096, "pw-a"),
                upsert("bob", 1, 4096, "pw-b"),
            ]),
        )
        .await;
        assert_eq!(codes(&r), [("alice".into(), 0), ("bob".into(), 0)]);
        // In the view at once, and the password checks against what is stored.
        let scram = view.current().scram.clone();
        let alice = &scram.users["alice"];
        assert_eq!(alice[&ScramMechanism::Sha512].iterations, 8192);
        assert!(verify_password(
            ScramMechanism::Sha512,
            &alice[&ScramMechanism::Sha512],
            b"pw-a"
        ));
        assert!(!verify_password(
            ScramMechanism::Sha512,
            &alice[&ScramMechanism::Sha512],
            b"pw-b"
        ));

        // Describe: all, named, unknown, twice.
        let all = describe_user_scram_credentials(
            &scram,
            &DescribeUserScramCredentialsRequest::default(),
        );
        assert_eq!(all.results.len(), 2);
        let infos: Vec<(i8, i32)> = all.results[0]
            .credential_infos
            .iter()
            .map(|i| (i.mechanism, i.iterations))
            .collect();
        assert_eq!(all.results[0].user.as_str(), "alice");
        assert_eq!(infos, [(1, 4096), (2, 8192)]);
        let named = |names: &[&str]| {
            DescribeUserScramCredentialsRequest::default().with_users(Some(
                names
                    .iter()
                    .map(|n| UserName::default().with_name(str_bytes(*n)))
                    .collect(),
            ))
        };
        let r =
            describe_user_scram_credentials(&scram, &named(&["bob", "nobody", "alice", "alice"]));
        let got: Vec<(String, i16, usize)> = r
            .results
            .iter()
            .map(|r| (r.user.to_string(), r.error_code, r.credential_infos.len()))
            .collect();
        assert_eq!(
            got,
            [
                ("bob".into(), 0, 1),
                ("nobody".into(), ResponseError::ResourceNotFound.code(), 0),
                ("alice".into(), ResponseError::DuplicateResource.code(), 0),
            ]
        );

        // Refusals, per user; a refused user's other changes do not apply.
        let r = alter(
            AlterUserScramCredentialsRequest::default()
                .with_deletions(vec![delete("bob", 2), delete("carol", 1)])
                .with_upsertions(vec![
                    upsert("bob", 1, 4096, "new"),
                    upsert("dave", 3, 4096, "x"),
                    upsert("erin", 1, 100, "x"),
                    upsert("frank", 1, 4096, "x"),
                    upsert("frank", 1, 4096, "y"),
                    upsert("", 1, 4096, "x"),
                ]),
        )
        .await;
        assert_eq!(
            codes(&r),
            [
                ("bob".into(), ResponseError::ResourceNotFound.code()),
                ("carol".into(), ResponseError::ResourceNotFound.code()),
                (
                    "dave".into(),
                    ResponseError::UnsupportedSaslMechanism.code()
                ),
                ("erin".into(), ResponseError::UnacceptableCredential.code()),
                ("frank".into(), ResponseError::DuplicateResource.code()),
                ("".into(), ResponseError::UnacceptableCredential.code()),
            ]
        );
        let scram = view.current().scram.clone();
        assert!(verify_password(
            ScramMechanism::Sha256,
            &scram.users["bob"][&ScramMechanism::Sha256],
            b"pw-b"
        ));
        assert_eq!(scram.users.len(), 2);

        // Deleting every credential of a user removes the user.
        let r = alter(
            AlterUserScramCredentialsRequest::default()
                .with_deletions(vec![delete("alice", 1), delete("alice", 2)]),
        )
        .await;
        assert_eq!(codes(&r), [("alice".into(), 0)]);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while view.current().scram.users.contains_key("alice") {
            assert!(tokio::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        node.shutdown().await;
    }
}
