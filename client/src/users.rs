//! SCRAM users as `kafka-configs.sh --entity-type users` manages them
//! (KIP-554: DescribeUserScramCredentials, AlterUserScramCredentials).
//! The password never leaves the client: it is salted and hashed here
//! (`Hi(password, salt, i)`), and the broker derives what it stores from
//! that.

use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest,
};
use kafka_protocol::protocol::StrBytes;

use crate::connection::KafkaClient;
use crate::error::{ClientError, check_code};
use floe_metadata::scram::ScramMechanism;

/// One credential of a user, as the broker describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserCredential {
    pub user: String,
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512` (or the number of one unknown here).
    pub mechanism: String,
    pub iterations: i32,
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

impl KafkaClient {
    /// The credentials of `users` (every user for none).
    pub async fn describe_users(
        &mut self,
        users: &[String],
    ) -> Result<Vec<UserCredential>, ClientError> {
        let version = self.version::<DescribeUserScramCredentialsRequest>()?;
        let req = DescribeUserScramCredentialsRequest::default().with_users(
            (!users.is_empty()).then(|| {
                users
                    .iter()
                    .map(|u| UserName::default().with_name(sb(u)))
                    .collect()
            }),
        );
        let resp = self.send(version, req).await?;
        check_code(resp.error_code, resp.error_message.as_ref(), || {
            "describing SCRAM users".to_owned()
        })?;
        let mut out = Vec::new();
        for r in resp.results {
            let user = r.user.to_string();
            check_code(r.error_code, r.error_message.as_ref(), || {
                format!("user {user}")
            })?;
            for c in r.credential_infos {
                out.push(UserCredential {
                    user: user.clone(),
                    mechanism: ScramMechanism::from_kafka_type(c.mechanism)
                        .map_or_else(|| c.mechanism.to_string(), |m| m.name().to_string()),
                    iterations: c.iterations,
                });
            }
        }
        Ok(out)
    }

    /// Sets `user`'s credential for `mechanism` from `password`, with a new
    /// random salt and `iterations` rounds.
    pub async fn upsert_user(
        &mut self,
        user: &str,
        mechanism: ScramMechanism,
        password: &str,
        iterations: u32,
    ) -> Result<(), ClientError> {
        let mut salt = vec![0u8; 32];
        aws_lc_rs::rand::fill(&mut salt)
            .map_err(|_| ClientError::InvalidInput("no random bytes for a salt".into()))?;
        let salted = floe_proxy::sasl::scram::salted_password(
            mechanism,
            password.as_bytes(),
            &salt,
            iterations,
        );
        let up = ScramCredentialUpsertion::default()
            .with_name(sb(user))
            .with_mechanism(mechanism.kafka_type())
            .with_iterations(i32::try_from(iterations).unwrap_or(i32::MAX))
            .with_salt(salt.into())
            .with_salted_password(salted.into());
        self.alter_users(AlterUserScramCredentialsRequest::default().with_upsertions(vec![up]))
            .await
    }

    /// Deletes `user`'s credentials of `mechanisms`.
    pub async fn delete_user(
        &mut self,
        user: &str,
        mechanisms: &[ScramMechanism],
    ) -> Result<(), ClientError> {
        let deletions = mechanisms
            .iter()
            .map(|m| {
                ScramCredentialDeletion::default()
                    .with_name(sb(user))
                    .with_mechanism(m.kafka_type())
            })
            .collect();
        self.alter_users(AlterUserScramCredentialsRequest::default().with_deletions(deletions))
            .await
    }

    async fn alter_users(
        &mut self,
        req: AlterUserScramCredentialsRequest,
    ) -> Result<(), ClientError> {
        let version = self.version::<AlterUserScramCredentialsRequest>()?;
        let resp = self.send(version, req).await?;
        for r in resp.results {
            let user = r.user.to_string();
            check_code(r.error_code, r.error_message.as_ref(), || {
                format!("user {user}")
            })?;
        }
        Ok(())
    }
}
