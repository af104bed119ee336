//! OAUTHBEARER tokens (KIP-255, KIP-768): JWTs checked against the keys of
//! a JWKS, read from a file or fetched from a URL (an identity provider's
//! `jwks_uri`) and refreshed, with Kafka's checks: the signature (RSA,
//! RSA-PSS, ECDSA or EdDSA: never `none` or a shared secret), `exp`,
//! `nbf`, the audience and the issuer, within a clock-skew buffer; the
//! principal's name is a claim (`sub` by default).

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use crate::sasl::{AuthError, AuthFailure};

/// Where the keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// A JWKS file (`file:///path` or a path), read again when it changes.
    File(PathBuf),
    /// An `http://` or `https://` URL, fetched again every refresh.
    Url(String),
}

impl JwksSource {
    /// Kafka's `sasl.oauthbearer.jwks.endpoint.url`: `file://…`, a path,
    /// `http://…` or `https://…`.
    pub fn parse(s: &str) -> Result<JwksSource, String> {
        if let Some(p) = s.strip_prefix("file://") {
            return Ok(JwksSource::File(PathBuf::from(p)));
        }
        if s.starts_with("https://") || s.starts_with("http://") {
            return Ok(JwksSource::Url(s.to_string()));
        }
        if s.contains("://") {
            return Err(format!(
                "{s}: a JWKS comes from file://, http:// or https://"
            ));
        }
        Ok(JwksSource::File(PathBuf::from(s)))
    }
}

/// How tokens are checked.
#[derive(Debug, Clone)]
pub struct OAuthSettings {
    pub jwks: JwksSource,
    /// Accepted audiences (`aud`); none: not checked.
    pub audience: Vec<String>,
    /// The accepted issuer (`iss`), if checked.
    pub issuer: Option<String>,
    /// The claim naming the principal.
    pub sub_claim: String,
    /// Tolerance on `exp` and `nbf`.
    pub clock_skew: Duration,
    /// How often the keys are read or fetched again.
    pub refresh: Duration,
    /// CAs for an `https://` JWKS URL (PEM); none: the system's bundle.
    pub ca_file: Option<PathBuf>,
}

/// The longest token accepted (bytes).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// A checked token: who it names and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub principal: String,
    pub expires: SystemTime,
}

/// Checks tokens with the keys last loaded.
#[derive(Debug)]
pub struct OAuthValidator {
    settings: OAuthSettings,
    keys: RwLock<JwkSet>,
    /// The file's modification time when last read.
    read_at: RwLock<Option<SystemTime>>,
}

const ASYMMETRIC: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

fn bad(failure: AuthFailure, detail: impl Into<String>) -> AuthError {
    AuthError::new(failure, detail)
}

impl OAuthValidator {
    /// Loads the keys once; a JWKS that cannot be had is an error (the
    /// listener does not start on a typo).
    pub async fn load(settings: OAuthSettings) -> Result<Arc<OAuthValidator>, String> {
        let v = Arc::new(OAuthValidator {
            settings,
            keys: RwLock::new(JwkSet { keys: Vec::new() }),
            read_at: RwLock::new(None),
        });
        v.refresh().await?;
        Ok(v)
    }

    /// A validator with the keys of a JWKS document (tests, fuzzing).
    pub fn from_jwks_json(settings: OAuthSettings, jwks: &str) -> Result<OAuthValidator, String> {
        let keys: JwkSet =
            serde_json::from_str(jwks).map_err(|e| format!("the JWKS is not valid: {e}"))?;
        Ok(Self::with_keys(settings, keys))
    }

    /// A validator with these keys (tests, fuzzing).
    pub fn with_keys(settings: OAuthSettings, keys: JwkSet) -> OAuthValidator {
        OAuthValidator {
            settings,
            keys: RwLock::new(keys),
            read_at: RwLock::new(None),
        }
    }

    /// Reads or fetches the keys again (a file only when it changed); on
    /// failure the old keys are kept.
    pub async fn refresh(&self) -> Result<(), String> {
        let text = match &self.settings.jwks {
            JwksSource::File(p) => {
                let modified = std::fs::metadata(p)
                    .and_then(|m| m.modified())
                    .map_err(|e| format!("cannot read the JWKS {}: {e}", p.display()))?;
                if *self.read_at.read().unwrap_or_else(|e| e.into_inner()) == Some(modified) {
                    return Ok(());
                }
                let text = std::fs::read(p)
                    .map_err(|e| format!("cannot read the JWKS {}: {e}", p.display()))?;
                *self.read_at.write().unwrap_or_else(|e| e.into_inner()) = Some(modified);
                text
            }
            JwksSource::Url(u) => fetch(u, self.settings.ca_file.as_deref()).await?,
        };
        let set: JwkSet =
            serde_json::from_slice(&text).map_err(|e| format!("the JWKS is not valid: {e}"))?;
        if set.keys.is_empty() {
            return Err("the JWKS has no key".into());
        }
        let n = set.keys.len();
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = set;
        tracing::debug!(keys = n, "OAUTHBEARER keys loaded");
        Ok(())
    }

    /// Refreshes the keys every `refresh` until the validator is dropped.
    pub fn spawn_refresh(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let every = self.settings.refresh.max(Duration::from_millis(100));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(v) = weak.upgrade() else { return };
                if let Err(e) = v.refresh().await {
                    tracing::warn!(error = %e, "OAUTHBEARER keys not refreshed; the old ones are kept");
                }
            }
        })
    }

    /// Checks a token; `now` is the time it is judged at.
    pub fn verify(&self, token: &str, now: SystemTime) -> Result<Verified, AuthError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(bad(AuthFailure::Malformed, "the token is too long"));
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| bad(AuthFailure::Malformed, format!("not a JWT: {e}")))?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(bad(
                AuthFailure::Unsupported,
                format!("algorithm {:?} is not accepted", header.alg),
            ));
        }
        let key = {
            let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
            let jwk = match &header.kid {
                Some(kid) => keys.find(kid),
                None if keys.keys.len() == 1 => keys.keys.first(),
                None => None,
            }
            .ok_or_else(|| {
                bad(
                    AuthFailure::BadCredentials,
                    "no key of the JWKS signs the token",
                )
            })?;
            DecodingKey::from_jwk(jwk)
                .map_err(|e| bad(AuthFailure::BadCredentials, format!("unusable key: {e}")))?
        };
        let mut v = Validation::new(header.alg);
        v.leeway = self.settings.clock_skew.as_secs();
        v.validate_nbf = true;
        // `exp` is checked below against `now` (and so testable).
        v.validate_exp = false;
        v.set_required_spec_claims(&["exp"]);
        if self.settings.audience.is_empty() {
            v.validate_aud = false;
        } else {
            v.set_audience(&self.settings.audience);
        }
        if let Some(iss) = &self.settings.issuer {
            v.set_issuer(&[iss]);
        }
        let data = jsonwebtoken::decode::<serde_json::Value>(token, &key, &v)
            .map_err(|e| bad(AuthFailure::BadCredentials, format!("token refused: {e}")))?;
        let claims = data.claims;
        let exp = claims
            .get("exp")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| bad(AuthFailure::Malformed, "no numeric exp claim"))?;
        let now_s = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if exp.saturating_add(self.settings.clock_skew.as_secs()) <= now_s {
            return Err(bad(AuthFailure::BadCredentials, "the token has expired"));
        }
        if let Some(nbf) = claims.get("nbf").and_then(serde_json::Value::as_u64)
            && nbf > now_s.saturating_add(self.settings.clock_skew.as_secs())
        {
            return Err(bad(
                AuthFailure::BadCredentials,
                "the token is not valid yet",
            ));
        }
        let principal = claims
            .get(&self.settings.sub_claim)
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                bad(
                    AuthFailure::Malformed,
                    format!("no {} claim names the principal", self.settings.sub_claim),
                )
            })?;
        Ok(Verified {
            principal: principal.to_string(),
            expires: UNIX_EPOCH + Duration::from_secs(exp),
        })
    }
}

/// GETs `url` (`http://` or `https://`, trusting `ca_file` or the
/// system's CAs), within 10 s, at most 1 MiB.
async fn fetch(url: &str, ca_file: Option<&std::path::Path>) -> Result<Vec<u8>, String> {
    use http_body_util::{BodyExt, Empty, Limited};
    use hyper_util::rt::TokioIo;

    let uri: hyper::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let https = uri.scheme_str() == Some("https");
    let host = uri
        .host()
        .ok_or_else(|| format!("{url}: no host"))?
        .to_string();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let work = async {
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        let req = hyper::Request::get(path)
            .header(hyper::header::HOST, host.as_str())
            .body(Empty::<bytes::Bytes>::new())
            .map_err(|e| format!("{url}: {e}"))?;
        let resp = if https {
            let connector = tokio_rustls::TlsConnector::from(Arc::new(client_tls(ca_file)?));
            let name = rustls_pki_types::ServerName::try_from(host.clone())
                .map_err(|e| format!("{url}: {e}"))?;
            let tls = connector
                .connect(name, tcp)
                .await
                .map_err(|e| format!("{url}: TLS: {e}"))?;
            let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            tokio::spawn(conn);
            send.send_request(req)
                .await
                .map_err(|e| format!("{url}: {e}"))?
        } else {
            let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            tokio::spawn(conn);
            send.send_request(req)
                .await
                .map_err(|e| format!("{url}: {e}"))?
        };
        if !resp.status().is_success() {
            return Err(format!("{url}: HTTP {}", resp.status()));
        }
        let body = Limited::new(resp.into_body(), 1 << 20)
            .collect()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        Ok(body.to_bytes().to_vec())
    };
    tokio::time::timeout(Duration::from_secs(10), work)
        .await
        .map_err(|_| format!("{url}: no answer within 10 s"))?
}

/// A TLS client trusting the CAs of `ca_file`, else the system's bundle.
fn client_tls(ca_file: Option<&std::path::Path>) -> Result<rustls::ClientConfig, String> {
    use rustls_pki_types::pem::PemObject;
    const SYSTEM: &str = "/etc/ssl/certs/ca-certificates.crt";
    let path = ca_file.unwrap_or(std::path::Path::new(SYSTEM));
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read the CAs {}: {e}", path.display()))?
    {
        let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
}

/// Keys and tokens for tests (and the fuzz target): an ECDSA P-256 key, its
/// JWKS, and tokens it signs.
#[cfg(test)]
pub mod test_keys {
    use base64::Engine as _;
    use jsonwebtoken::{EncodingKey, Header};

    /// A signing key and its public JWK.
    pub struct TestKey {
        pub kid: String,
        der: Vec<u8>,
        pub jwk: serde_json::Value,
    }

    impl TestKey {
        pub fn new(kid: &str) -> TestKey {
            let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
                .unwrap_or_else(|e| panic!("key: {e}"));
            let raw = kp.public_key_raw();
            let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            let jwk = serde_json::json!({
                "kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig",
                "x": b64.encode(&raw[1..33]), "y": b64.encode(&raw[33..65]),
            });
            TestKey {
                kid: kid.into(),
                der: kp.serialize_der(),
                jwk,
            }
        }

        /// A JWKS of these keys, as JSON.
        pub fn jwks(keys: &[&TestKey]) -> String {
            serde_json::json!({ "keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>() })
                .to_string()
        }

        /// A token with these claims, signed ES256 with this key's kid.
        pub fn sign(&self, claims: &serde_json::Value) -> String {
            let mut h = Header::new(jsonwebtoken::Algorithm::ES256);
            h.kid = Some(self.kid.clone());
            jsonwebtoken::encode(&h, claims, &EncodingKey::from_ec_der(&self.der))
                .unwrap_or_else(|e| panic!("sign: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use base64::Engine as _;
    use serde_json::json;

    use super::test_keys::TestKey;
    use super::*;

    fn settings(jwks: JwksSource) -> OAuthSettings {
        OAuthSettings {
            jwks,
            audience: vec!["floe".into()],
            issuer: Some("https://idp.test".into()),
            sub_claim: "sub".into(),
            clock_skew: Duration::from_secs(30),
            refresh: Duration::from_secs(3600),
            ca_file: None,
        }
    }

    fn validator(keys: &[&TestKey]) -> OAuthValidator {
        let set: JwkSet = serde_json::from_str(&TestKey::jwks(keys)).unwrap();
        OAuthValidator::with_keys(settings(JwksSource::File("unused".into())), set)
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    fn claims(exp: u64) -> serde_json::Value {
        json!({"sub": "alice", "aud": "floe", "iss": "https://idp.test", "exp": exp, "iat": now()})
    }

    #[test]
    fn a_signed_token_names_its_principal_until_it_expires() {
        let k = TestKey::new("k1");
        let v = validator(&[&k]);
        let exp = now() + 600;
        let got = v.verify(&k.sign(&claims(exp)), SystemTime::now()).unwrap();
        assert_eq!(got.principal, "alice");
        assert_eq!(got.expires, UNIX_EPOCH + Duration::from_secs(exp));
        // Past its exp (and the skew): refused.
        let later = SystemTime::now() + Duration::from_secs(700);
        assert_eq!(
            v.verify(&k.sign(&claims(exp)), later).unwrap_err().failure,
            AuthFailure::BadCredentials
        );
    }

    #[test]
    fn bad_tokens_are_refused_with_their_reason() {
        let k = TestKey::new("k1");
        let other = TestKey::new("k1");
        let v = validator(&[&k]);
        let t = now();
        let refused = |token: String| v.verify(&token, SystemTime::now()).unwrap_err().failure;
        // Signed by another key under the same kid.
        assert_eq!(
            refused(other.sign(&claims(t + 600))),
            AuthFailure::BadCredentials
        );
        // Expired, not yet valid, another audience, another issuer.
        assert_eq!(
            refused(k.sign(&claims(t - 120))),
            AuthFailure::BadCredentials
        );
        let mut c = claims(t + 600);
        c["nbf"] = json!(t + 300);
        assert_eq!(refused(k.sign(&c)), AuthFailure::BadCredentials);
        let mut c = claims(t + 600);
        c["aud"] = json!("someone-else");
        assert_eq!(refused(k.sign(&c)), AuthFailure::BadCredentials);
        let mut c = claims(t + 600);
        c["iss"] = json!("https://evil.test");
        assert_eq!(refused(k.sign(&c)), AuthFailure::BadCredentials);
        // No principal claim.
        let mut c = claims(t + 600);
        c.as_object_mut().unwrap().remove("sub");
        assert_eq!(refused(k.sign(&c)), AuthFailure::Malformed);
        // alg none and a shared secret are never accepted.
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let body = b64.encode(claims(t + 600).to_string());
        for alg in ["none", "HS256"] {
            let head = b64.encode(json!({"alg": alg, "kid": "k1"}).to_string());
            let failure = refused(format!("{head}.{body}.c2ln"));
            assert!(
                matches!(failure, AuthFailure::Unsupported | AuthFailure::Malformed),
                "{alg}"
            );
        }
        assert_eq!(refused("not-a-jwt".into()), AuthFailure::Malformed);
        assert_eq!(
            refused("x".repeat(MAX_TOKEN_BYTES + 1)),
            AuthFailure::Malformed
        );
    }

    #[tokio::test]
    async fn a_jwks_file_is_read_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        let (k1, k2) = (TestKey::new("k1"), TestKey::new("k2"));
        std::fs::write(&path, TestKey::jwks(&[&k1])).unwrap();
        let v = OAuthValidator::load(settings(JwksSource::File(path.clone())))
            .await
            .unwrap();
        let token2 = k2.sign(&claims(now() + 600));
        assert!(v.verify(&token2, SystemTime::now()).is_err());
        // A rotation: the new key is served once the file changed.
        std::fs::write(&path, TestKey::jwks(&[&k1, &k2])).unwrap();
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(SystemTime::now() + Duration::from_secs(5))
            .unwrap();
        v.refresh().await.unwrap();
        assert_eq!(
            v.verify(&token2, SystemTime::now()).unwrap().principal,
            "alice"
        );
        // A broken file keeps the keys there were.
        std::fs::write(&path, "{not json").unwrap();
        f.set_modified(SystemTime::now() + Duration::from_secs(10))
            .unwrap();
        assert!(v.refresh().await.is_err());
        assert!(v.verify(&token2, SystemTime::now()).is_ok());
        // A missing file is an error at start.
        assert!(
            OAuthValidator::load(settings(JwksSource::File(dir.path().join("none"))))
                .await
                .is_err()
        );
        assert_eq!(
            JwksSource::parse("file:///etc/jwks.json").unwrap(),
            JwksSource::File("/etc/jwks.json".into())
        );
        assert!(JwksSource::parse("ftp://x").is_err());
    }
}
