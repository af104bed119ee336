//! SASL mechanisms of the Kafka listener, without I/O: each exchange takes
//! the client's messages and answers the server's, until it names the
//! authenticated user or fails. The listener ([`crate::server`]) carries
//! the messages in SaslHandshake/SaslAuthenticate (KIP-152) and keeps the
//! outcome on the connection.
//!
//! - [`plain`]: PLAIN (RFC 4616), against a users file or the SCRAM
//!   credentials.
//! - [`scram`]: SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), the
//!   server's exchange, a client's (the `floe` tools use it), and the
//!   derivation of a stored credential from a password.
//! - [`oauthbearer`]: OAUTHBEARER (RFC 7628), a JWT checked by
//!   [`crate::oauth`].

pub mod oauthbearer;
pub mod plain;
pub mod scram;

use floe_metadata::scram::{ScramCredential, ScramMechanism};

/// A SASL mechanism the listener may offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Plain,
    Scram(ScramMechanism),
    OAuthBearer,
}

impl Mechanism {
    /// The mechanism's SASL name, as SaslHandshake carries it.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(m) => m.name(),
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// The mechanism of a SASL name (case matters, as in Kafka).
    pub fn from_name(name: &str) -> Option<Mechanism> {
        if name == "PLAIN" {
            return Some(Mechanism::Plain);
        }
        if name == "OAUTHBEARER" {
            return Some(Mechanism::OAuthBearer);
        }
        ScramMechanism::from_name(name).map(Mechanism::Scram)
    }
}

/// Where the mechanisms find users' secrets.
pub trait Credentials: Send + Sync {
    /// The user's SCRAM credential for `mechanism`, if it has one.
    fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential>;
    /// The user's password in the PLAIN users file, if a file is
    /// configured and names the user.
    fn plain_password(&self, user: &str) -> Option<String>;
    /// The OAUTHBEARER token checker, if one is configured.
    fn oauth(&self) -> Option<&crate::oauth::OAuthValidator> {
        None
    }
}

/// What one step of an exchange gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The server's next message; the exchange goes on.
    Challenge(Vec<u8>),
    /// Authenticated as `user`; `reply` is the server's last message (empty
    /// for PLAIN).
    Done { user: String, reply: Vec<u8> },
}

/// Why an exchange failed: the reason a metric counts. Clients are told
/// one message whatever the reason, so that an answer does not tell an
/// unknown user from a wrong password.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// The client's message does not follow the mechanism's grammar.
    Malformed,
    /// No such user (for the mechanism).
    UnknownUser,
    /// The password or proof is wrong.
    BadCredentials,
    /// The client asked for what Floe does not serve (an authorization id
    /// other than the user, channel binding, a SCRAM extension).
    Unsupported,
    /// A message arrived after the exchange ended or failed.
    OutOfOrder,
}

impl AuthFailure {
    /// The reason's label in metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            AuthFailure::Malformed => "malformed",
            AuthFailure::UnknownUser => "unknown_user",
            AuthFailure::BadCredentials => "bad_credentials",
            AuthFailure::Unsupported => "unsupported",
            AuthFailure::OutOfOrder => "out_of_order",
        }
    }
}

/// A failed exchange: the reason, and what went wrong for the log (never
/// a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct AuthError {
    pub failure: AuthFailure,
    pub detail: String,
}

impl AuthError {
    pub fn new(failure: AuthFailure, detail: impl Into<String>) -> AuthError {
        AuthError {
            failure,
            detail: detail.into(),
        }
    }
}

/// One authentication in progress on a connection.
pub trait Exchange: Send {
    /// Takes the client's next message and gives the server's answer.
    fn step(&mut self, client: &[u8], creds: &dyn Credentials) -> Result<Step, AuthError>;

    /// When the credential the client authenticated with expires (an
    /// OAUTHBEARER token's `exp`), if it does.
    fn expires(&self) -> Option<std::time::SystemTime> {
        None
    }
}

/// A new exchange of `mechanism`.
pub fn exchange(mechanism: Mechanism) -> Box<dyn Exchange> {
    match mechanism {
        Mechanism::Plain => Box::new(plain::PlainServer::default()),
        Mechanism::Scram(m) => Box::new(scram::ScramServer::new(m)),
        Mechanism::OAuthBearer => Box::new(oauthbearer::OAuthBearerServer::default()),
    }
}
