//! Fuzzes the SASL exchanges of the Kafka listener (`floe_proxy::sasl`):
//! PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER servers fed arbitrary client
//! messages, with fixed credentials holding one user ("alice", password
//! "secret") and one OAUTHBEARER key (whose private half nobody has). The
//! first byte picks the exchange (bits 0-1: PLAIN, SCRAM-SHA-256 and
//! SCRAM-SHA-512 with the server nonce "fuzz", SCRAM-SHA-512 with a random
//! one; bit 2: no users file, so PLAIN checks the SCRAM credential; bit 3:
//! OAUTHBEARER instead); the rest, split at '\n', is the sequence of client
//! messages. Nothing may panic; an exchange that ends, well or not, answers
//! nothing more but OutOfOrder; only alice can authenticate, and no token
//! is ever accepted.

#![no_main]

use std::sync::LazyLock;

use floe_metadata::scram::{ScramCredential, ScramMechanism};
use floe_proxy::oauth::{JwksSource, OAuthSettings, OAuthValidator};
use floe_proxy::sasl::oauthbearer::{OAuthBearerServer, parse_client_first};
use floe_proxy::sasl::plain::PlainServer;
use floe_proxy::sasl::scram::{ScramServer, credential_from_salted_password, salted_password};
use floe_proxy::sasl::{AuthFailure, Credentials, Exchange, Step};
use libfuzzer_sys::fuzz_target;

const USER: &str = "alice";
const PASSWORD: &str = "secret";
const SALT: &[u8] = b"floe-fuzz-salt!!";
/// Few iterations, so that PLAIN against a SCRAM credential stays cheap.
const ITERATIONS: u32 = 64;
/// The server nonce of the deterministic SCRAM exchanges.
const SERVER_NONCE: &str = "fuzz";

fn credential(mech: ScramMechanism) -> ScramCredential {
    let salted = salted_password(mech, PASSWORD.as_bytes(), SALT, ITERATIONS);
    credential_from_salted_password(mech, &salted, SALT.to_vec(), ITERATIONS)
}

/// A P-256 public key; its private key was thrown away.
const JWKS: &str = r#"{"keys": [{"kty": "EC", "crv": "P-256", "kid": "fuzz", "alg": "ES256", "x": "GrunnvIkOUIx9uB3HSH_kEiYqqGBQ74iFzz0KljlIwA", "y": "lxUcTFpDQaWPU41EOSEVuhYdWS8dtjCblzKsXCyIxqg"}]}"#;

static OAUTH: LazyLock<OAuthValidator> = LazyLock::new(|| {
    let settings = OAuthSettings {
        jwks: JwksSource::File("unused".into()),
        audience: vec!["floe".into()],
        issuer: None,
        sub_claim: "sub".into(),
        clock_skew: std::time::Duration::from_secs(30),
        refresh: std::time::Duration::from_secs(3600),
        ca_file: None,
    };
    OAuthValidator::from_jwks_json(settings, JWKS).unwrap_or_else(|e| panic!("{e}"))
});

static SHA256: LazyLock<ScramCredential> = LazyLock::new(|| credential(ScramMechanism::Sha256));
static SHA512: LazyLock<ScramCredential> = LazyLock::new(|| credential(ScramMechanism::Sha512));

/// One user, with both SCRAM credentials and, if `users_file`, a PLAIN
/// password.
struct OneUser {
    users_file: bool,
}

impl Credentials for OneUser {
    fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        if user != USER {
            return None;
        }
        Some(match mechanism {
            ScramMechanism::Sha256 => SHA256.clone(),
            ScramMechanism::Sha512 => SHA512.clone(),
        })
    }

    fn plain_password(&self, user: &str) -> Option<String> {
        (self.users_file && user == USER).then(|| PASSWORD.to_owned())
    }

    fn oauth(&self) -> Option<&OAuthValidator> {
        Some(&OAUTH)
    }
}

fn server(which: u8) -> Box<dyn Exchange> {
    if which & 8 != 0 {
        return Box::new(OAuthBearerServer::default());
    }
    match which & 3 {
        0 => Box::new(PlainServer::default()),
        1 => Box::new(ScramServer::with_nonce(
            ScramMechanism::Sha256,
            SERVER_NONCE.to_owned(),
        )),
        2 => Box::new(ScramServer::with_nonce(
            ScramMechanism::Sha512,
            SERVER_NONCE.to_owned(),
        )),
        _ => Box::new(ScramServer::new(ScramMechanism::Sha512)),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let creds = OneUser {
        users_file: which & 4 == 0,
    };
    if which & 8 != 0 {
        // The parser alone, on the whole input, too.
        let _ = parse_client_first(rest);
    }
    let mut exchange = server(which);
    let mut ended = false;
    for message in rest.split(|&b| b == b'\n').take(8) {
        let step = exchange.step(message, &creds);
        if ended {
            assert!(matches!(step, Err(ref e) if e.failure == AuthFailure::OutOfOrder));
            continue;
        }
        match step {
            Ok(Step::Challenge(reply)) => assert!(std::str::from_utf8(&reply).is_ok()),
            Ok(Step::Done { user, .. }) => {
                assert!(which & 8 == 0, "a token nobody could sign was accepted");
                assert_eq!(user, USER);
                ended = true;
            }
            Err(e) => {
                assert!(!e.detail.contains(PASSWORD));
                ended = true;
            }
        }
    }
});
