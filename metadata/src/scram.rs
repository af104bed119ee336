//! SCRAM credentials (RFC 5802, RFC 7677; Kafka's KIP-554): per user and
//! mechanism, the salt, the iteration count and the two keys derived from
//! the salted password. The password itself, and the salted password, are
//! never stored: a stolen copy of the state lets nobody log in (it allows
//! an offline guess of the password, as with any salted hash).
//!
//! The credentials are kept in the model ([`crate::state::ClusterState`])
//! and shown to every proxy in the cluster view, which authenticates
//! clients with them (`floe_proxy::sasl`).

use serde::{Deserialize, Serialize};

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
