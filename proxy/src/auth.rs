//! Authentication on one Kafka connection: who it is ([`Principal`]) and,
//! on a SASL listener, the SaslHandshake/SaslAuthenticate exchange
//! (KIP-43, KIP-152) with its session lifetime and re-authentication
//! (KIP-368).
//!
//! As in Kafka, a SASL connection may send only ApiVersions, SaslHandshake
//! and SaslAuthenticate until it is authenticated; anything else closes
//! it. SaslHandshake v0 is followed by the mechanism's messages as bare
//! length-prefixed tokens, v1 by SaslAuthenticate requests. A failed
//! authentication is answered SASL_AUTHENTICATION_FAILED after a delay
//! (`--connection-failed-authentication-delay-ms`, against guessing), and
//! the connection is closed. With `--connections-max-reauth-ms` a session
//! lasts that long: a client re-authenticates on the same connection
//! (same mechanism, same user) before it ends, and a request after it
//! ended closes the connection.
//!
//! The exchange steps run on the blocking pool: checking a PLAIN password
//! against a SCRAM credential hashes it thousands of times.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use floe_metadata::scram::{ScramCredential, ScramMechanism};
use floe_metadata::watch::ClusterWatch;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

use crate::metrics;
use crate::principal::Principal;
use crate::sasl::{AuthError, AuthFailure, Credentials, Exchange, Mechanism, Step};

/// The SASL settings of the listeners that use SASL.
#[derive(Clone)]
pub struct SaslConfig {
    /// The mechanisms offered, in the order SaslHandshake lists them.
    pub mechanisms: Vec<Mechanism>,
    pub credentials: Arc<dyn Credentials>,
    /// How long a session lasts before the client must re-authenticate
    /// (Kafka's `connections.max.reauth.ms`); `None`: for the connection's life.
    pub reauth: Option<Duration>,
    /// How long a failed authentication waits before its answer.
    pub failure_delay: Duration,
}

impl std::fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslConfig")
            .field("mechanisms", &self.mechanisms)
            .field("reauth", &self.reauth)
            .field("failure_delay", &self.failure_delay)
            .finish_non_exhaustive()
    }
}

/// Users and passwords for PLAIN from a file: `USER:PASSWORD` a line
/// (the password is what follows the first colon); blank lines and lines
/// starting with `#` are skipped.
pub fn read_plain_users(path: &Path) -> Result<HashMap<String, String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut users = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let Some((user, password)) = line.split_once(':') else {
            return Err(format!(
                "{}:{}: expected USER:PASSWORD",
                path.display(),
                n + 1
            ));
        };
        if user.is_empty() {
            return Err(format!("{}:{}: empty user name", path.display(), n + 1));
        }
        users.insert(user.to_string(), password.to_string());
    }
    Ok(users)
}

/// The credentials a proxy checks: the SCRAM credentials of the cluster
/// view, and the PLAIN users file if there is one.
pub struct ViewCredentials {
    pub view: ClusterWatch,
    pub plain_users: Option<HashMap<String, String>>,
    /// OAUTHBEARER's token checker, when a JWKS is configured.
    pub oauth: Option<Arc<crate::oauth::OAuthValidator>>,
}

impl Credentials for ViewCredentials {
    fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        self.view
            .current()
            .scram
            .users
            .get(user)
            .and_then(|m| m.get(&mechanism))
            .cloned()
    }

    fn plain_password(&self, user: &str) -> Option<String> {
        self.plain_users.as_ref()?.get(user).cloned()
    }

    fn oauth(&self) -> Option<&crate::oauth::OAuthValidator> {
        self.oauth.as_deref()
    }
}

/// What the connection does with a request, given where authentication is.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// Handle it as usual.
    Serve,
    /// A SASL request: [`ConnectionAuth::handshake`] or
    /// [`ConnectionAuth::authenticate`] answer it, in order.
    Sasl,
    /// Close the connection (the reason is logged).
    Close(&'static str),
}

enum State {
    /// No SASL on this listener.
    Open,
    /// Waiting for SaslHandshake; `renewing` while re-authenticating.
    Handshake { renewing: bool },
    /// A mechanism chosen; its messages come in SaslAuthenticate (or bare,
    /// after SaslHandshake v0).
    Exchanging {
        mechanism: Mechanism,
        exchange: Box<dyn Exchange>,
        bare: bool,
        renewing: bool,
    },
    /// Authenticated, until `expires` if sessions have a lifetime.
    Done {
        mechanism: Mechanism,
        expires: Option<Instant>,
    },
}

/// Authentication state of one connection.
pub struct ConnectionAuth {
    sasl: Option<SaslConfig>,
    peer: SocketAddr,
    principal: Principal,
    state: State,
}

/// An answer from the exchange and whether the connection then closes.
#[derive(Debug)]
pub struct Answer<T> {
    pub response: T,
    pub close: bool,
}

impl ConnectionAuth {
    /// A connection's authentication: `sasl` on a SASL listener;
    /// `principal` is who TLS says it is (its certificate's subject) or
    /// `User:ANONYMOUS`.
    pub fn new(sasl: Option<SaslConfig>, peer: SocketAddr, principal: Principal) -> Self {
        let state = if sasl.is_some() {
            State::Handshake { renewing: false }
        } else {
            State::Open
        };
        ConnectionAuth {
            sasl,
            peer,
            principal,
            state,
        }
    }

    /// Who the connection is.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// Whether the next frame is a bare SASL token (after SaslHandshake v0).
    pub fn expects_bare_token(&self) -> bool {
        matches!(self.state, State::Exchanging { bare: true, .. })
    }

    /// What to do with a request of `key` (`None`: an unknown key).
    pub fn gate(&self, key: Option<ApiKey>, now: Instant) -> Gate {
        let sasl_request = matches!(
            key,
            Some(ApiKey::SaslHandshake) | Some(ApiKey::SaslAuthenticate)
        );
        match &self.state {
            State::Open if sasl_request => Gate::Close("SASL request on a listener without SASL"),
            State::Open => Gate::Serve,
            State::Done { expires, .. } => {
                if key == Some(ApiKey::SaslHandshake) {
                    Gate::Sasl
                } else if key == Some(ApiKey::SaslAuthenticate) {
                    Gate::Close("SaslAuthenticate without SaslHandshake")
                } else if expires.is_some_and(|e| now >= e) {
                    Gate::Close("the SASL session expired without re-authentication")
                } else {
                    Gate::Serve
                }
            }
            State::Handshake { .. } | State::Exchanging { .. } => match key {
                Some(ApiKey::ApiVersions) => Gate::Serve,
                _ if sasl_request => Gate::Sasl,
                _ => Gate::Close("a request before SASL authentication"),
            },
        }
    }

    /// Answers SaslHandshake: the mechanism is offered or the client is
    /// told the ones that are (UNSUPPORTED_SASL_MECHANISM, then closed).
    pub fn handshake(
        &mut self,
        version: i16,
        req: &SaslHandshakeRequest,
    ) -> Answer<SaslHandshakeResponse> {
        let Some(sasl) = self.sasl.as_ref() else {
            return self.illegal_handshake();
        };
        let mut resp = SaslHandshakeResponse::default();
        resp.mechanisms = sasl
            .mechanisms
            .iter()
            .map(|m| StrBytes::from_static_str(m.name()))
            .collect();
        let renewing = match &self.state {
            State::Handshake { renewing } => *renewing,
            // KIP-368: a re-authentication starts with SaslHandshake v1.
            State::Done { .. } if version >= 1 => true,
            _ => return self.illegal_handshake(),
        };
        let wanted = Mechanism::from_name(req.mechanism.as_str());
        let offered = wanted.filter(|m| sasl.mechanisms.contains(m));
        let previous = match &self.state {
            State::Done { mechanism, .. } => Some(*mechanism),
            _ => None,
        };
        match offered {
            Some(m) if previous.is_none_or(|p| p == m) => {
                self.state = State::Exchanging {
                    mechanism: m,
                    exchange: crate::sasl::exchange(m),
                    bare: version == 0,
                    renewing,
                };
                Answer {
                    response: resp,
                    close: false,
                }
            }
            _ => {
                tracing::info!(peer = %self.peer, mechanism = %req.mechanism.as_str(), "SASL mechanism not offered; closing the connection");
                metrics::authentication_failed("none", "mechanism");
                resp.error_code = ResponseError::UnsupportedSaslMechanism.code();
                Answer {
                    response: resp,
                    close: true,
                }
            }
        }
    }

    fn illegal_handshake(&mut self) -> Answer<SaslHandshakeResponse> {
        metrics::authentication_failed("none", "state");
        let mut resp = SaslHandshakeResponse::default();
        resp.error_code = ResponseError::IllegalSaslState.code();
        Answer {
            response: resp,
            close: true,
        }
    }

    /// Answers SaslAuthenticate with the mechanism's next message.
    pub async fn authenticate(
        &mut self,
        req: &SaslAuthenticateRequest,
    ) -> Answer<SaslAuthenticateResponse> {
        let mut resp = SaslAuthenticateResponse::default();
        if matches!(self.state, State::Exchanging { bare: true, .. }) {
            // After SaslHandshake v0 the tokens come bare.
            resp.error_code = ResponseError::IllegalSaslState.code();
            resp.error_message = Some(StrBytes::from_static_str(
                "SaslAuthenticate after SaslHandshake v0",
            ));
            return Answer {
                response: resp,
                close: true,
            };
        }
        match self.step(&req.auth_bytes).await {
            Ok((reply, lifetime)) => {
                resp.auth_bytes = bytes::Bytes::from(reply);
                resp.session_lifetime_ms =
                    lifetime.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                Answer {
                    response: resp,
                    close: false,
                }
            }
            Err(e) => {
                resp.error_code = if e.failure == AuthFailure::OutOfOrder {
                    ResponseError::IllegalSaslState.code()
                } else {
                    ResponseError::SaslAuthenticationFailed.code()
                };
                resp.error_message = Some(StrBytes::from_string(e.detail));
                Answer {
                    response: resp,
                    close: true,
                }
            }
        }
    }

    /// Takes a bare token (after SaslHandshake v0) and gives the bare
    /// answer, or `None` when the connection closes (a failure has no
    /// answer in this form).
    pub async fn bare_token(&mut self, token: &[u8]) -> Option<Vec<u8>> {
        self.step(token).await.ok().map(|(reply, _)| reply)
    }

    /// One step of the exchange in progress. On success returns the
    /// server's message and, once authenticated, the session's lifetime.
    /// The error's detail is what the client is told.
    async fn step(&mut self, message: &[u8]) -> Result<(Vec<u8>, Option<Duration>), AuthError> {
        let Some(sasl) = self.sasl.clone() else {
            return Err(AuthError::new(
                AuthFailure::OutOfOrder,
                "no SASL on this listener",
            ));
        };
        let State::Exchanging {
            mechanism,
            exchange,
            renewing,
            bare,
        } = std::mem::replace(&mut self.state, State::Handshake { renewing: false })
        else {
            return Err(AuthError::new(
                AuthFailure::OutOfOrder,
                "SaslAuthenticate before SaslHandshake",
            ));
        };
        let creds = sasl.credentials.clone();
        let message = message.to_vec();
        let mut exchange = exchange;
        let stepped = tokio::task::spawn_blocking(move || {
            let r = exchange.step(&message, creds.as_ref());
            (exchange, r)
        })
        .await;
        let (exchange, result) = match stepped {
            Ok(v) => v,
            Err(_) => {
                return Err(AuthError::new(
                    AuthFailure::Malformed,
                    "the authentication step failed",
                ));
            }
        };
        let outcome = match result {
            Ok(Step::Challenge(reply)) => {
                self.state = State::Exchanging {
                    mechanism,
                    exchange,
                    bare,
                    renewing,
                };
                return Ok((reply, None));
            }
            Ok(Step::Done { user, reply }) => {
                let principal = Principal::user(user);
                if renewing && principal != self.principal {
                    Err(AuthError::new(
                        AuthFailure::Unsupported,
                        "re-authentication as another user is not allowed",
                    ))
                } else {
                    Ok((principal, reply, exchange.expires()))
                }
            }
            Err(e) => Err(e),
        };
        match outcome {
            Ok((principal, reply, credential_expires)) => {
                metrics::authenticated(mechanism.name());
                if !renewing {
                    tracing::debug!(peer = %self.peer, %principal, mechanism = mechanism.name(), "authenticated");
                }
                self.principal = principal;
                let lifetime = session_lifetime(sasl.reauth, credential_expires, SystemTime::now());
                let expires = lifetime.map(|d| Instant::now() + d);
                self.state = State::Done { mechanism, expires };
                Ok((reply, lifetime))
            }
            Err(e) => {
                metrics::authentication_failed(mechanism.name(), e.failure.label());
                // The detail is for the log; the client is told as little
                // as Kafka tells it.
                tracing::info!(peer = %self.peer, mechanism = mechanism.name(), reason = e.failure.label(), detail = %e.detail, "SASL authentication failed; closing the connection");
                tokio::time::sleep(sasl.failure_delay).await;
                Err(AuthError::new(
                    e.failure,
                    format!(
                        "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                        mechanism.name()
                    ),
                ))
            }
        }
    }
}

/// A session's lifetime (KIP-368): `connections.max.reauth.ms`, shortened
/// to what is left of the credential (a token's `exp`) when it expires
/// sooner. Without a maximum, sessions last as long as their connection,
/// as in Kafka, whatever the credential.
fn session_lifetime(
    reauth: Option<Duration>,
    credential_expires: Option<SystemTime>,
    now: SystemTime,
) -> Option<Duration> {
    let max = reauth?;
    let left = credential_expires.map(|e| e.duration_since(now).unwrap_or(Duration::ZERO));
    Some(left.map_or(max, |l| l.min(max)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_session_ends_with_its_token_when_that_is_sooner() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hour = Duration::from_secs(3600);
        let soon = Some(now + Duration::from_secs(60));
        assert_eq!(
            session_lifetime(Some(hour), soon, now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            session_lifetime(Some(Duration::from_secs(10)), soon, now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(session_lifetime(Some(hour), None, now), Some(hour));
        // Without connections.max.reauth.ms a session lasts as its connection (Kafka's rule).
        assert_eq!(session_lifetime(None, soon, now), None);
        // Already expired: a session of zero, refused at the next request.
        assert_eq!(
            session_lifetime(Some(hour), Some(now - hour), now),
            Some(Duration::ZERO)
        );
    }

    struct Users;

    impl Credentials for Users {
        fn scram(&self, _: &str, _: ScramMechanism) -> Option<ScramCredential> {
            None
        }
        fn plain_password(&self, user: &str) -> Option<String> {
            ["alice", "bob"]
                .contains(&user)
                .then(|| format!("{user}-pw"))
        }
    }

    fn sasl(reauth: Option<Duration>) -> SaslConfig {
        SaslConfig {
            mechanisms: vec![Mechanism::Plain],
            credentials: Arc::new(Users),
            reauth,
            failure_delay: Duration::ZERO,
        }
    }

    fn conn(reauth: Option<Duration>) -> ConnectionAuth {
        ConnectionAuth::new(
            Some(sasl(reauth)),
            "127.0.0.1:1".parse().unwrap(),
            Principal::anonymous(),
        )
    }

    fn handshake(mechanism: &str) -> SaslHandshakeRequest {
        let mut r = SaslHandshakeRequest::default();
        r.mechanism = StrBytes::from_string(mechanism.to_string());
        r
    }

    fn token(user: &str, password: &str) -> SaslAuthenticateRequest {
        let mut r = SaslAuthenticateRequest::default();
        r.auth_bytes = bytes::Bytes::from(format!("\0{user}\0{password}"));
        r
    }

    #[tokio::test]
    async fn only_sasl_and_api_versions_are_served_before_authentication() {
        let now = Instant::now();
        let mut c = conn(None);
        assert_eq!(c.gate(Some(ApiKey::ApiVersions), now), Gate::Serve);
        assert!(matches!(
            c.gate(Some(ApiKey::Metadata), now),
            Gate::Close(_)
        ));
        assert!(matches!(c.gate(None, now), Gate::Close(_)));
        assert_eq!(c.gate(Some(ApiKey::SaslHandshake), now), Gate::Sasl);
        let a = c.handshake(1, &handshake("PLAIN"));
        assert!(!a.close);
        assert_eq!(a.response.error_code, 0);
        assert_eq!(a.response.mechanisms, [StrBytes::from_static_str("PLAIN")]);
        assert!(matches!(c.gate(Some(ApiKey::Produce), now), Gate::Close(_)));
        let a = c.authenticate(&token("alice", "alice-pw")).await;
        assert_eq!(a.response.error_code, 0, "{:?}", a.response.error_message);
        assert!(!a.close);
        assert_eq!(a.response.session_lifetime_ms, 0);
        assert_eq!(c.principal(), &Principal::user("alice"));
        assert_eq!(c.gate(Some(ApiKey::Produce), now), Gate::Serve);
        // SaslAuthenticate out of an exchange closes.
        assert!(matches!(
            c.gate(Some(ApiKey::SaslAuthenticate), now),
            Gate::Close(_)
        ));
    }

    #[tokio::test]
    async fn a_listener_without_sasl_serves_everything_but_sasl() {
        let c = ConnectionAuth::new(
            None,
            "127.0.0.1:1".parse().unwrap(),
            Principal::user("cert"),
        );
        let now = Instant::now();
        assert_eq!(c.gate(Some(ApiKey::Produce), now), Gate::Serve);
        assert!(matches!(
            c.gate(Some(ApiKey::SaslHandshake), now),
            Gate::Close(_)
        ));
        assert_eq!(c.principal(), &Principal::user("cert"));
    }

    #[tokio::test]
    async fn a_mechanism_not_offered_or_a_bad_password_closes_the_connection() {
        let mut c = conn(None);
        let a = c.handshake(1, &handshake("SCRAM-SHA-512"));
        assert!(a.close);
        assert_eq!(
            a.response.error_code,
            ResponseError::UnsupportedSaslMechanism.code()
        );
        assert_eq!(a.response.mechanisms.len(), 1);
        let mut c = conn(None);
        c.handshake(1, &handshake("PLAIN"));
        let a = c.authenticate(&token("alice", "nope")).await;
        assert!(a.close);
        assert_eq!(
            a.response.error_code,
            ResponseError::SaslAuthenticationFailed.code()
        );
        let msg = a.response.error_message.unwrap().to_string();
        assert!(
            msg.contains("invalid credentials") && !msg.contains("nope"),
            "{msg}"
        );
        assert!(c.principal().is_anonymous());
        // SaslAuthenticate before SaslHandshake.
        let mut c = conn(None);
        let a = c.authenticate(&token("alice", "alice-pw")).await;
        assert!(a.close);
        assert_eq!(
            a.response.error_code,
            ResponseError::IllegalSaslState.code()
        );
    }

    #[tokio::test]
    async fn a_session_ends_unless_renewed_by_the_same_user() {
        let mut c = conn(Some(Duration::from_secs(60)));
        c.handshake(1, &handshake("PLAIN"));
        let a = c.authenticate(&token("alice", "alice-pw")).await;
        assert_eq!(a.response.session_lifetime_ms, 60_000);
        let later = Instant::now() + Duration::from_secs(61);
        assert!(matches!(c.gate(Some(ApiKey::Fetch), later), Gate::Close(_)));
        // Re-authentication (SaslHandshake v1 on an authenticated connection).
        assert_eq!(c.gate(Some(ApiKey::SaslHandshake), later), Gate::Sasl);
        assert!(!c.handshake(1, &handshake("PLAIN")).close);
        let a = c.authenticate(&token("alice", "alice-pw")).await;
        assert_eq!(a.response.error_code, 0);
        assert_eq!(c.gate(Some(ApiKey::Fetch), Instant::now()), Gate::Serve);
        // As another user: refused, and the connection closes.
        c.handshake(1, &handshake("PLAIN"));
        let a = c.authenticate(&token("bob", "bob-pw")).await;
        assert!(a.close);
        assert_ne!(a.response.error_code, 0);
        // v0 handshakes cannot renew.
        let mut c = conn(None);
        c.handshake(1, &handshake("PLAIN"));
        c.authenticate(&token("alice", "alice-pw")).await;
        assert!(c.handshake(0, &handshake("PLAIN")).close);
    }

    #[tokio::test]
    async fn handshake_v0_takes_bare_tokens() {
        let mut c = conn(None);
        c.handshake(0, &handshake("PLAIN"));
        assert!(c.expects_bare_token());
        assert_eq!(c.bare_token(b"\0bob\0bob-pw").await, Some(Vec::new()));
        assert!(!c.expects_bare_token());
        assert_eq!(c.principal(), &Principal::user("bob"));
        let mut c = conn(None);
        c.handshake(0, &handshake("PLAIN"));
        assert_eq!(c.bare_token(b"\0bob\0bad").await, None);
    }

    #[test]
    fn the_plain_users_file_is_user_colon_password() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("users");
        std::fs::write(&p, "# users\nalice:a:b\n\nbob:\n").unwrap();
        let u = read_plain_users(&p).unwrap();
        assert_eq!(u["alice"], "a:b");
        assert_eq!(u["bob"], "");
        std::fs::write(&p, "nocolon\n").unwrap();
        assert!(read_plain_users(&p).unwrap_err().contains(":1"));
        assert!(read_plain_users(&dir.path().join("missing")).is_err());
    }
}
