//! SCRAM credentials over the API (`crate::scram`): the route that alters
//! them, one user's change at a time, and the conversions between the
//! model and its protobuf messages (the cluster view carries every user's
//! credentials to the proxies).

use std::collections::BTreeMap;

use super::proto;
use super::server::AppState;
use crate::command::{Command, Response};
use crate::error::MetaError;
use crate::scram::{ScramAlteration, ScramCredential, ScramMechanism, ScramModel};

fn credential(m: ScramMechanism, c: &ScramCredential) -> proto::ScramCredential {
    proto::ScramCredential {
        mechanism: i32::from(m.kafka_type()),
        salt: c.salt.clone(),
        stored_key: c.stored_key.clone(),
        server_key: c.server_key.clone(),
        iterations: c.iterations,
    }
}

fn mechanism(t: i32) -> Result<ScramMechanism, MetaError> {
    i8::try_from(t)
        .ok()
        .and_then(ScramMechanism::from_kafka_type)
        .ok_or_else(|| MetaError::InvalidRequest(format!("unknown SCRAM mechanism {t}")))
}

/// Every user's credentials, for the cluster view.
pub fn scram_users(m: &ScramModel) -> Vec<proto::ScramUser> {
    m.users
        .iter()
        .map(|(user, creds)| proto::ScramUser {
            user: user.clone(),
            credentials: creds.iter().map(|(m, c)| credential(*m, c)).collect(),
            delete: vec![],
        })
        .collect()
}

/// The model in a cluster view; credentials that cannot be read are left out.
pub fn scram_model(users: &[proto::ScramUser]) -> ScramModel {
    let mut m = ScramModel::default();
    for u in users {
        for c in &u.credentials {
            match mechanism(c.mechanism) {
                Ok(mech) => {
                    m.users.entry(u.user.clone()).or_default().insert(
                        mech,
                        ScramCredential {
                            salt: c.salt.clone(),
                            stored_key: c.stored_key.clone(),
                            server_key: c.server_key.clone(),
                            iterations: c.iterations,
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a SCRAM credential of the view cannot be read")
                }
            }
        }
    }
    m
}

/// The request making `alterations`.
pub fn alter_request(alterations: &[ScramAlteration]) -> proto::AlterScramRequest {
    proto::AlterScramRequest {
        users: alterations
            .iter()
            .map(|a| proto::ScramUser {
                user: a.user.clone(),
                credentials: a.upsert.iter().map(|(m, c)| credential(*m, c)).collect(),
                delete: a.delete.iter().map(|m| i32::from(m.kafka_type())).collect(),
            })
            .collect(),
    }
}

fn alteration(u: proto::ScramUser) -> Result<ScramAlteration, MetaError> {
    let upsert = u
        .credentials
        .into_iter()
        .map(|c| {
            Ok((
                mechanism(c.mechanism)?,
                ScramCredential {
                    salt: c.salt,
                    stored_key: c.stored_key,
                    server_key: c.server_key,
                    iterations: c.iterations,
                },
            ))
        })
        .collect::<Result<Vec<_>, MetaError>>()?;
    let delete = u
        .delete
        .into_iter()
        .map(mechanism)
        .collect::<Result<Vec<_>, MetaError>>()?;
    Ok(ScramAlteration {
        user: u.user,
        upsert,
        delete,
    })
}

fn result(user: String, r: Result<(), MetaError>) -> proto::ScramResult {
    match r {
        Ok(()) => proto::ScramResult {
            user,
            error_kind: String::new(),
            message: String::new(),
        },
        Err(e) => proto::ScramResult {
            user,
            error_kind: format!("{:?}", e.kind()),
            message: e.to_string(),
        },
    }
}

pub(super) async fn alter(
    s: AppState,
    req: proto::AlterScramRequest,
) -> Result<proto::AlterScramResponse, MetaError> {
    // Each user's change is its own command, all in one batch: each is
    // applied or refused on its own, as Kafka answers per user. A user
    // named twice is refused both times (the answer is one a user; Kafka's
    // DUPLICATE_RESOURCE, which the proxy finds first).
    let mut named: BTreeMap<String, usize> = BTreeMap::new();
    for u in &req.users {
        *named.entry(u.user.clone()).or_default() += 1;
    }
    let mut results: Vec<Option<proto::ScramResult>> = Vec::new();
    let mut commands = Vec::new();
    let mut users = Vec::new();
    for u in req.users {
        let user = u.user.clone();
        if named[&user] > 1 {
            let e = MetaError::InvalidRequest(format!("user {user} is named twice"));
            results.push(Some(result(user, Err(e))));
            continue;
        }
        match alteration(u) {
            Ok(a) => {
                results.push(None);
                users.push(user);
                commands.push(Command::AlterScramCredentials(a));
            }
            Err(e) => results.push(Some(result(user, Err(e)))),
        }
    }
    let mut revision = 0;
    let mut applied = Vec::new();
    if !commands.is_empty() {
        match s.write(Command::Batch(commands)).await? {
            (Response::Batch(rs), r) => {
                revision = r;
                applied = rs;
            }
            (Response::Error(e), _) => return Err(e),
            (other, _) => return Err(MetaError::Storage(format!("unexpected response {other:?}"))),
        }
    }
    let mut applied = users.into_iter().zip(applied);
    let results = results
        .into_iter()
        .map(|r| match r {
            Some(r) => r,
            None => match applied.next() {
                Some((user, Response::Ok)) => result(user, Ok(())),
                Some((user, Response::Error(e))) => result(user, Err(e)),
                Some((user, other)) => result(
                    user,
                    Err(MetaError::Storage(format!("unexpected response {other:?}"))),
                ),
                None => result(
                    String::new(),
                    Err(MetaError::Storage("a user's change has no response".into())),
                ),
            },
        })
        .collect();
    Ok(proto::AlterScramResponse { revision, results })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn credentials_survive_the_view_and_the_request() {
        let cred = ScramCredential {
            salt: vec![1; 8],
            stored_key: vec![2; 32],
            server_key: vec![3; 32],
            iterations: 4096,
        };
        let a = ScramAlteration {
            user: "alice".into(),
            upsert: vec![(ScramMechanism::Sha256, cred.clone())],
            delete: vec![ScramMechanism::Sha512],
        };
        let req = alter_request(std::slice::from_ref(&a));
        assert_eq!(alteration(req.users[0].clone()).unwrap(), a);
        let mut m = ScramModel::default();
        m.users
            .entry("alice".into())
            .or_default()
            .insert(ScramMechanism::Sha256, cred);
        assert_eq!(scram_model(&scram_users(&m)), m);
        let mut bad = req.users[0].clone();
        bad.delete = vec![7];
        assert!(alteration(bad).is_err());
    }

    #[tokio::test]
    async fn each_user_is_applied_or_refused_on_its_own() {
        use crate::api::{MetaApi, routes};
        use crate::node::{MetaConfig, MetaNode};

        let dir = tempfile::tempdir().unwrap();
        let mut cfg = MetaConfig::new(1, "127.0.0.1:0".parse().unwrap(), dir.path().join("meta"));
        cfg.init = true;
        let node = MetaNode::start(cfg).await.unwrap();
        let meta: std::sync::Arc<dyn MetaApi> = node.local_api();
        let change = |user: &str, upsert: bool, delete: bool| ScramAlteration {
            user: user.into(),
            upsert: if upsert {
                vec![(
                    ScramMechanism::Sha256,
                    ScramCredential {
                        salt: vec![1; 8],
                        stored_key: vec![2; 32],
                        server_key: vec![3; 32],
                        iterations: 4096,
                    },
                )]
            } else {
                vec![]
            },
            delete: if delete {
                vec![ScramMechanism::Sha512]
            } else {
                vec![]
            },
        };
        let r = meta
            .call::<routes::AlterScram>(alter_request(&[
                change("alice", true, false),
                // No SCRAM-SHA-512 credential to delete.
                change("bob", true, true),
                change("carol", true, false),
                change("carol", true, false),
            ]))
            .await
            .unwrap();
        assert!(r.revision > 0);
        let got: Vec<(&str, &str)> = r
            .results
            .iter()
            .map(|r| (r.user.as_str(), r.error_kind.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("alice", ""),
                ("bob", "NotFound"),
                ("carol", "InvalidRequest"),
                ("carol", "InvalidRequest"),
            ]
        );
        let users = meta
            .watch(crate::ids::Revision(0), std::time::Duration::ZERO)
            .await
            .unwrap()
            .scram
            .users;
        assert_eq!(users.keys().collect::<Vec<_>>(), ["alice"]);
        node.shutdown().await;
    }
}
