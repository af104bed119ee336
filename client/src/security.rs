//! How the client reaches a secured listener: TLS (rustls) and SASL
//! (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), set from librdkafka's property
//! names (`security.protocol`, `sasl.mechanism`, `sasl.username`,
//! `sasl.password`, `ssl.ca.location`, `ssl.certificate.location`,
//! `ssl.key.location`, `ssl.endpoint.identification.algorithm`), as the
//! Kafka tools read them from `--command-config`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use floe_metadata::scram::ScramMechanism;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::error::ClientError;

/// A SASL login.
#[derive(Clone)]
pub struct SaslLogin {
    /// `None`: PLAIN; else the SCRAM mechanism.
    pub scram: Option<ScramMechanism>,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslLogin")
            .field("scram", &self.scram)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl SaslLogin {
    /// The mechanism's SASL name.
    pub fn mechanism(&self) -> &'static str {
        self.scram.map_or("PLAIN", ScramMechanism::name)
    }
}

/// TLS and SASL for every connection of a client.
#[derive(Clone, Default)]
pub struct ClientSecurity {
    /// TLS, when the protocol is SSL or SASL_SSL.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Check the server's certificate against this name instead of the
    /// address's host.
    pub server_name: Option<String>,
    /// SASL, when the protocol is SASL_PLAINTEXT or SASL_SSL.
    pub sasl: Option<SaslLogin>,
}

impl std::fmt::Debug for ClientSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSecurity")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl)
            .finish()
    }
}

fn invalid(msg: impl Into<String>) -> ClientError {
    ClientError::InvalidInput(msg.into())
}

/// `key=value` lines; `#` and `!` start comments, blank lines are skipped.
pub fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, ClientError> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| invalid(format!("line {}: expected key=value", n + 1)))?;
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(out)
}

fn read(path: &str) -> Result<Vec<u8>, ClientError> {
    std::fs::read(Path::new(path)).map_err(|e| invalid(format!("cannot read {path}: {e}")))
}

/// The librdkafka keys [`ClientSecurity::from_properties`] reads.
pub const PROPERTY_KEYS: &[&str] = &[
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
];

impl ClientSecurity {
    /// Plaintext, no authentication.
    pub fn plaintext() -> ClientSecurity {
        ClientSecurity::default()
    }

    /// From librdkafka's properties; an unknown key is an error (so that a
    /// typo does not silently connect without security).
    pub fn from_properties(
        props: &BTreeMap<String, String>,
    ) -> Result<ClientSecurity, ClientError> {
        if let Some(k) = props.keys().find(|k| !PROPERTY_KEYS.contains(&k.as_str())) {
            return Err(invalid(format!(
                "unknown property {k:?} (known: {})",
                PROPERTY_KEYS.join(", ")
            )));
        }
        let get = |k: &str| props.get(k).map(String::as_str);
        let protocol = get("security.protocol")
            .unwrap_or("PLAINTEXT")
            .to_ascii_uppercase();
        let (tls, sasl) = match protocol.as_str() {
            "PLAINTEXT" => (false, false),
            "SSL" => (true, false),
            "SASL_PLAINTEXT" => (false, true),
            "SASL_SSL" => (true, true),
            other => {
                return Err(invalid(format!(
                    "security.protocol {other:?}: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
                )));
            }
        };
        let mut out = ClientSecurity::default();
        if tls {
            out.tls = Some(Arc::new(tls_config(
                get("ssl.ca.location"),
                get("ssl.certificate.location"),
                get("ssl.key.location"),
            )?));
            if get("ssl.endpoint.identification.algorithm")
                .is_some_and(|a| a.eq_ignore_ascii_case("none"))
            {
                return Err(invalid(
                    "ssl.endpoint.identification.algorithm=none is not offered: give the certificate's name in the bootstrap address",
                ));
            }
        }
        if sasl {
            let mechanism = get("sasl.mechanism")
                .or(get("sasl.mechanisms"))
                .unwrap_or("PLAIN");
            let scram = match mechanism {
                "PLAIN" => None,
                m => Some(ScramMechanism::from_name(m).ok_or_else(|| {
                    invalid(format!(
                        "sasl.mechanism {m:?}: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
                    ))
                })?),
            };
            let username = get("sasl.username")
                .ok_or_else(|| invalid("SASL needs sasl.username"))?
                .to_string();
            let password = get("sasl.password")
                .ok_or_else(|| invalid("SASL needs sasl.password (or FLOE_SASL_PASSWORD)"))?
                .to_string();
            out.sasl = Some(SaslLogin {
                scram,
                username,
                password,
            });
        }
        Ok(out)
    }

    /// The name the server's certificate must hold, for `host`.
    pub(crate) fn server_name(&self, host: &str) -> Result<ServerName<'static>, ClientError> {
        let name = self.server_name.as_deref().unwrap_or(host);
        let name = name.trim_start_matches('[').trim_end_matches(']');
        ServerName::try_from(name.to_string()).map_err(|e| {
            invalid(format!(
                "{name:?} is not a name a certificate can hold: {e}"
            ))
        })
    }
}

/// rustls with the CAs of `ca` (the system's when none), and a client
/// certificate when both `cert` and `key` are given.
fn tls_config(
    ca: Option<&str>,
    cert: Option<&str>,
    key: Option<&str>,
) -> Result<rustls::ClientConfig, ClientError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let ca = ca.unwrap_or("/etc/ssl/certs/ca-certificates.crt");
    let pem = read(ca)?;
    for c in CertificateDer::pem_slice_iter(&pem) {
        let c = c.map_err(|e| invalid(format!("{ca}: {e}")))?;
        roots
            .add(c)
            .map_err(|e| invalid(format!("{ca}: not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(invalid(format!("{ca} holds no certificate")));
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| invalid(e.to_string()))?
        .with_root_certificates(roots);
    match (cert, key) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_slice_iter(&read(cert)?)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(format!("{cert}: {e}")))?;
            let key_der = PrivateKeyDer::from_pem_slice(&read(key)?)
                .map_err(|e| invalid(format!("{key}: {e}")))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| invalid(format!("{key} does not go with {cert}: {e}")))
        }
        _ => Err(invalid(
            "ssl.certificate.location and ssl.key.location go together",
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn props(text: &str) -> BTreeMap<String, String> {
        parse_properties(text).unwrap()
    }

    #[test]
    fn properties_give_sasl_and_refuse_what_is_not_known() {
        let p = props(
            "# a comment\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=alice\nsasl.password=a=b\n",
        );
        let s = ClientSecurity::from_properties(&p).unwrap();
        let login = s.sasl.unwrap();
        assert_eq!(login.mechanism(), "SCRAM-SHA-512");
        assert_eq!(login.password, "a=b");
        assert!(s.tls.is_none());
        assert!(!format!("{login:?}").contains("a=b"));
        let bad = |t: &str| {
            ClientSecurity::from_properties(&props(t))
                .unwrap_err()
                .to_string()
        };
        assert!(
            bad("security.protocol=SASL_PLAINTEXT\nsasl.username=a\n").contains("sasl.password")
        );
        assert!(bad("sasl.usernme=a\n").contains("sasl.usernme"));
        assert!(bad("security.protocol=TLS\n").contains("security.protocol"));
        assert!(bad("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\nsasl.username=a\nsasl.password=b\n")
            .contains("GSSAPI"));
        assert!(
            bad("security.protocol=SSL\nssl.ca.location=/nonexistent/ca.pem\n")
                .contains("/nonexistent")
        );
        assert!(parse_properties("novalue\n").is_err());
        assert!(
            ClientSecurity::from_properties(&props(""))
                .unwrap()
                .sasl
                .is_none()
        );
    }
}
