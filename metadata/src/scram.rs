//! SCRAM credentials (RFC 5802, RFC 7677; Kafka's KIP-554): per user and
//! mechanism, the salt, the iteration count and the two keys derived from
//! the salted password. The password itself, and the salted password, are
//! never stored: a stolen copy of the state lets nobody log in (it allows
//! an offline guess of the password, as with any salted hash).
//!
//! The credentials are kept in the model ([`crate::state::ClusterState`])
//! and shown to every proxy in the cluster view, which authenticates
//! clients with them (`floe_proxy::sasl`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::MetaError;

/// A SCRAM mechanism, with Kafka's numeric type (`ScramMechanism` in the
/// DescribeUserScramCredentials and AlterUserScramCredentials APIs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The mechanism's SASL name.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism of a SASL name.
    pub fn from_name(name: &str) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Kafka's numeric type: 1 for SCRAM-SHA-256, 2 for SCRAM-SHA-512.
    pub fn kafka_type(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The mechanism of Kafka's numeric type.
    pub fn from_kafka_type(t: i8) -> Option<ScramMechanism> {
        ScramMechanism::ALL
            .into_iter()
            .find(|m| m.kafka_type() == t)
    }

    /// The least iteration count accepted (Kafka's, RFC 7677's 4096 is the
    /// recommended default).
    pub const MIN_ITERATIONS: u32 = 4096;
    /// The most iteration count accepted (Kafka's bound).
    pub const MAX_ITERATIONS: u32 = 16384;
}

/// One user's credential for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    /// H(ClientKey), with ClientKey = HMAC(SaltedPassword, "Client Key").
    pub stored_key: Vec<u8>,
    /// HMAC(SaltedPassword, "Server Key").
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

/// The longest user name stored (bytes).
pub const MAX_USER_BYTES: usize = 1024;
/// The longest salt stored (bytes).
pub const MAX_SALT_BYTES: usize = 1024;

impl ScramMechanism {
    /// The length of the hash's output: that of StoredKey and ServerKey.
    pub fn key_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }
}

/// Every user's SCRAM credentials, by user and mechanism.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramModel {
    pub users: BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>,
}

/// One user's change: credentials set (added or replaced) and removed,
/// applied together or not at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramAlteration {
    pub user: String,
    pub upsert: Vec<(ScramMechanism, ScramCredential)>,
    pub delete: Vec<ScramMechanism>,
}

impl ScramCredential {
    /// Floe's bounds on a stored credential (Kafka's iteration bounds).
    pub fn validate(&self, mechanism: ScramMechanism) -> Result<(), MetaError> {
        let bad = |what: String| Err(MetaError::InvalidRequest(what));
        if !(ScramMechanism::MIN_ITERATIONS..=ScramMechanism::MAX_ITERATIONS)
            .contains(&self.iterations)
        {
            return bad(format!(
                "{} iterations must be within {}..={}, not {}",
                mechanism.name(),
                ScramMechanism::MIN_ITERATIONS,
                ScramMechanism::MAX_ITERATIONS,
                self.iterations
            ));
        }
        if self.salt.is_empty() || self.salt.len() > MAX_SALT_BYTES {
            return bad(format!("the salt must have 1 to {MAX_SALT_BYTES} bytes"));
        }
        let n = mechanism.key_len();
        if self.stored_key.len() != n || self.server_key.len() != n {
            return bad(format!("{} keys have {n} bytes", mechanism.name()));
        }
        Ok(())
    }
}

impl ScramAlteration {
    /// Floe's rules, which the proxy checks first with Kafka's errors.
    pub fn validate(&self) -> Result<(), MetaError> {
        if self.user.is_empty() || self.user.len() > MAX_USER_BYTES {
            return Err(MetaError::InvalidRequest(format!(
                "a user name has 1 to {MAX_USER_BYTES} bytes"
            )));
        }
        let mut seen = Vec::new();
        for m in self.upsert.iter().map(|(m, _)| m).chain(self.delete.iter()) {
            if seen.contains(m) {
                return Err(MetaError::InvalidRequest(format!(
                    "{} is altered twice for user {}",
                    m.name(),
                    self.user
                )));
            }
            seen.push(*m);
        }
        for (m, c) in &self.upsert {
            c.validate(*m)?;
        }
        Ok(())
    }
}

impl ScramModel {
    /// Applies one user's alteration whole, or refuses it: a deletion of a
    /// credential the user does not have is refused with
    /// [`MetaError::NotFound`] (Kafka's RESOURCE_NOT_FOUND), a change
    /// breaking the rules with [`MetaError::InvalidRequest`].
    pub fn alter(&mut self, a: &ScramAlteration) -> Result<(), MetaError> {
        a.validate()?;
        let current = self.users.get(&a.user);
        if let Some(m) = a
            .delete
            .iter()
            .find(|m| current.is_none_or(|c| !c.contains_key(m)))
        {
            return Err(MetaError::NotFound(format!(
                "user {} has no {} credential",
                a.user,
                m.name()
            )));
        }
        let creds = self.users.entry(a.user.clone()).or_default();
        for m in &a.delete {
            creds.remove(m);
        }
        for (m, c) in &a.upsert {
            creds.insert(*m, c.clone());
        }
        if creds.is_empty() {
            self.users.remove(&a.user);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::ErrorKind;

    fn cred(m: ScramMechanism, iterations: u32) -> ScramCredential {
        ScramCredential {
            salt: vec![1; 16],
            stored_key: vec![2; m.key_len()],
            server_key: vec![3; m.key_len()],
            iterations,
        }
    }

    fn alter(
        user: &str,
        upsert: &[(ScramMechanism, u32)],
        delete: &[ScramMechanism],
    ) -> ScramAlteration {
        ScramAlteration {
            user: user.into(),
            upsert: upsert.iter().map(|(m, i)| (*m, cred(*m, *i))).collect(),
            delete: delete.to_vec(),
        }
    }

    #[test]
    fn credentials_are_set_replaced_and_deleted_per_user() {
        use ScramMechanism::*;
        let mut m = ScramModel::default();
        m.alter(&alter("alice", &[(Sha256, 4096), (Sha512, 8192)], &[]))
            .unwrap();
        m.alter(&alter("alice", &[(Sha256, 5000)], &[])).unwrap();
        assert_eq!(m.users["alice"][&Sha256].iterations, 5000);
        assert_eq!(m.users["alice"][&Sha512].iterations, 8192);
        m.alter(&alter("alice", &[], &[Sha256, Sha512])).unwrap();
        assert!(m.users.is_empty());
        // Deleting what is not there is refused, and changes nothing.
        m.alter(&alter("bob", &[(Sha256, 4096)], &[])).unwrap();
        let before = m.clone();
        let kind = |r: Result<(), MetaError>| r.map_err(|e| e.kind());
        assert_eq!(
            kind(m.alter(&alter("bob", &[(Sha256, 5000)], &[Sha512]))),
            Err(ErrorKind::NotFound)
        );
        assert_eq!(
            kind(m.alter(&alter("carol", &[], &[Sha256]))),
            Err(ErrorKind::NotFound)
        );
        assert_eq!(m, before);
    }

    #[test]
    fn bad_credentials_are_refused() {
        use ScramMechanism::*;
        let mut m = ScramModel::default();
        for bad in [
            alter("", &[(Sha256, 4096)], &[]),
            alter(&"x".repeat(MAX_USER_BYTES + 1), &[(Sha256, 4096)], &[]),
            alter("a", &[(Sha256, 4095)], &[]),
            alter("a", &[(Sha512, 16385)], &[]),
            alter("a", &[(Sha256, 4096), (Sha256, 4096)], &[]),
            alter("a", &[(Sha256, 4096)], &[Sha256]),
        ] {
            assert_eq!(
                m.alter(&bad).map_err(|e| e.kind()),
                Err(ErrorKind::InvalidRequest),
                "{bad:?}"
            );
        }
        let mut short = alter("a", &[(Sha512, 4096)], &[]);
        short.upsert[0].1.stored_key.truncate(32);
        assert!(m.alter(&short).is_err());
        let mut no_salt = alter("a", &[(Sha256, 4096)], &[]);
        no_salt.upsert[0].1.salt.clear();
        assert!(m.alter(&no_salt).is_err());
        let mut long_salt = alter("a", &[(Sha256, 4096)], &[]);
        long_salt.upsert[0].1.salt = vec![1; MAX_SALT_BYTES + 1];
        assert!(m.alter(&long_salt).is_err());
        assert!(m.users.is_empty());
        // The bounds themselves are accepted.
        let mut longest = alter(&"x".repeat(MAX_USER_BYTES), &[(Sha512, 16384)], &[]);
        longest.upsert[0].1.salt = vec![1; MAX_SALT_BYTES];
        m.alter(&longest).unwrap();
        assert_eq!(m.users.len(), 1);
    }

    #[test]
    fn mechanisms_have_kafkas_names_and_numbers() {
        assert_eq!(
            ScramMechanism::from_name("SCRAM-SHA-512"),
            Some(ScramMechanism::Sha512)
        );
        assert_eq!(
            ScramMechanism::from_kafka_type(1),
            Some(ScramMechanism::Sha256)
        );
        assert_eq!(ScramMechanism::from_kafka_type(0), None);
        assert_eq!(ScramMechanism::Sha512.kafka_type(), 2);
    }
}
