//! TLS to the SQL catalog's PostgreSQL, as libpq's `sslmode` and
//! `sslrootcert` ask for it in the catalog's URI.
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` (or none given) | no | — |
//! | `prefer` | when the server offers it | as `require` |
//! | `require` | yes | not checked; with `sslrootcert`, as `verify-ca` (libpq does the same) |
//! | `verify-ca` | yes | signed by `sslrootcert`'s CAs (or the system's) |
//! | `verify-full` | yes | that, and made out to the host connected to |
//!
//! `sslrootcert` is a PEM file of CA certificates, or `system` for the
//! system's trust store (also what `verify-*` use without it); `sslcert`
//! and `sslkey` a client certificate (PEM) and its key, for a server that
//! authenticates by certificate. tokio-postgres knows only the first three
//! modes and none of those files: they are taken out of the URI here, and
//! the connector (rustls, with the aws-lc provider the rest of Floe uses) is
//! built from them. The handshake's signatures are checked in every mode.

use std::path::PathBuf;
use std::sync::Arc;

use floe_metadata::pem_files;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::{IndexerError, Result};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// Where the CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// The system's trust store.
    System,
    /// A PEM file.
    File(PathBuf),
}

/// What a catalog URI asks of TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub mode: Mode,
    pub roots: Option<Roots>,
    /// A client certificate and its key.
    pub client: Option<(PathBuf, PathBuf)>,
}

/// `uri` without its `sslmode` and `sslrootcert` parameters (what
/// tokio-postgres parses), and what they asked for.
pub fn split(uri: &str) -> Result<(String, Wanted)> {
    let mut wanted = Wanted {
        mode: Mode::Disable,
        roots: None,
        client: None,
    };
    let (mut cert, mut cert_key) = (None, None);
    let Some((base, query)) = uri.split_once('?') else {
        return Ok((uri.to_string(), wanted));
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let Some((key, value)) = url::form_urlencoded::parse(pair.as_bytes()).next() else {
            continue;
        };
        match &*key {
            "sslmode" => {
                wanted.mode = match &*value {
                    "disable" => Mode::Disable,
                    "prefer" => Mode::Prefer,
                    "require" => Mode::Require,
                    "verify-ca" => Mode::VerifyCa,
                    "verify-full" => Mode::VerifyFull,
                    other => {
                        return Err(IndexerError::invalid(format!(
                            "table catalog: sslmode {other:?} is not one of disable, prefer, \
                             require, verify-ca, verify-full"
                        )));
                    }
                }
            }
            "sslrootcert" => {
                wanted.roots = Some(if value == "system" {
                    Roots::System
                } else {
                    Roots::File(PathBuf::from(&*value))
                })
            }
            "sslcert" => cert = Some(PathBuf::from(&*value)),
            "sslkey" => cert_key = Some(PathBuf::from(&*value)),
            "sslpassword" => {
                return Err(IndexerError::invalid(
                    "table catalog: encrypted client keys (sslpassword) are not supported; \
                     give sslkey a key file that is not encrypted",
                ));
            }
            _ => kept.push(pair),
        }
    }
    wanted.client = match (cert, cert_key) {
        (None, None) => None,
        (Some(c), Some(k)) => Some((c, k)),
        _ => {
            return Err(IndexerError::invalid(
                "table catalog: sslcert and sslkey go together (a client certificate and its key)",
            ));
        }
    };
    let uri = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((uri, wanted))
}

impl Wanted {
    /// tokio-postgres's mode and the connector, or `None` without TLS.
    /// Reads `sslrootcert` (so that a missing or empty file is an error at
    /// start, not at the first commit).
    pub fn connector(&self) -> Result<Option<(SslMode, MakeRustlsConnect)>> {
        let mode = match self.mode {
            Mode::Disable => return Ok(None),
            Mode::Prefer => SslMode::Prefer,
            _ => SslMode::Require,
        };
        let provider = pem_files::provider();
        // The CAs a certificate must lead to (`require` without any: none).
        let chain = match (self.mode, &self.roots) {
            (Mode::Prefer | Mode::Require, None) => None,
            (_, roots) => Some(
                WebPkiServerVerifier::builder_with_provider(
                    Arc::new(self.roots(roots.as_ref())?),
                    provider.clone(),
                )
                .build()
                .map_err(|e| IndexerError::invalid(format!("table catalog TLS: {e}")))?,
            ),
        };
        let verifier: Arc<dyn ServerCertVerifier> = match chain {
            Some(webpki) if self.mode == Mode::VerifyFull => webpki,
            chain => Arc::new(Relaxed(chain)),
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| IndexerError::invalid(format!("table catalog TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match &self.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    pem_files::certs(cert).map_err(file)?,
                    pem_files::key(key).map_err(file)?,
                )
                .map_err(|e| {
                    IndexerError::invalid(format!("table catalog: sslcert/sslkey: {e}"))
                })?,
        };
        Ok(Some((mode, MakeRustlsConnect::new(config))))
    }

    fn roots(&self, roots: Option<&Roots>) -> Result<RootCertStore> {
        let mut store = RootCertStore::empty();
        match roots.unwrap_or(&Roots::System) {
            Roots::System => {
                let found = rustls_native_certs::load_native_certs();
                store.add_parsable_certificates(found.certs);
            }
            Roots::File(path) => store = pem_files::roots(path).map_err(file)?,
        }
        if store.is_empty() {
            return Err(IndexerError::invalid(format!(
                "table catalog: sslmode={} found no CA certificate in {}",
                match self.mode {
                    Mode::VerifyFull => "verify-full",
                    Mode::VerifyCa => "verify-ca",
                    _ => "require",
                },
                match roots {
                    Some(Roots::File(p)) => p.display().to_string(),
                    _ => "the system's trust store (give sslrootcert=FILE)".to_string(),
                }
            )));
        }
        Ok(store)
    }
}

/// A PEM file the URI names that cannot be used, said with its path.
fn file(e: pem_files::TlsError) -> IndexerError {
    IndexerError::invalid(format!("table catalog: {e}"))
}

/// The checks below `verify-full`: the chain only (`verify-ca`, and
/// `require` with `sslrootcert`), or none (`require` without, as libpq
/// does); the handshake's signatures are checked either way.
#[derive(Debug)]
struct Relaxed(Option<Arc<WebPkiServerVerifier>>);

impl ServerCertVerifier for Relaxed {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.0 else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        pem_files::verify_tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        pem_files::verify_tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        pem_files::provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_tls_parameters_leave_the_uri_and_say_what_is_wanted() {
        let (uri, w) = split(
            "postgresql://u:p@db:5432/lake?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(uri, "postgresql://u:p@db:5432/lake?application_name=x");
        assert_eq!(w.mode, Mode::VerifyFull);
        assert_eq!(w.roots, Some(Roots::File("/etc/ca.pem".into())));
        let (uri, w) = split("postgresql://db/lake?sslmode=require").unwrap();
        assert_eq!(
            (uri.as_str(), w.mode),
            ("postgresql://db/lake", Mode::Require)
        );
        let (_, w) = split("postgresql://db/lake?host=/run/pg&sslrootcert=system").unwrap();
        assert_eq!(
            (w.mode, w.roots.clone()),
            (Mode::Disable, Some(Roots::System))
        );
        assert!(
            split("postgresql://db/lake?sslmode=allow")
                .unwrap_err()
                .message
                .contains("not one of")
        );
        assert!(
            split("postgresql://db/lake?sslcert=/c.pem")
                .unwrap_err()
                .message
                .contains("go together")
        );
        let (_, with_cert) =
            split("postgresql://db/lake?sslmode=require&sslcert=/c.pem&sslkey=/c.key").unwrap();
        assert_eq!(with_cert.client, Some(("/c.pem".into(), "/c.key".into())));
        assert!(
            with_cert
                .connector()
                .err()
                .unwrap()
                .message
                .contains("/c.pem")
        );
        // Without TLS, no connector; with it, a connector in each mode.
        assert!(w.connector().unwrap().is_none());
        let require = Wanted {
            mode: Mode::Require,
            roots: None,
            client: None,
        };
        assert!(matches!(
            require.connector().unwrap(),
            Some((SslMode::Require, _))
        ));
        let missing = Wanted {
            mode: Mode::VerifyFull,
            roots: Some(Roots::File("/nonexistent/ca.pem".into())),
            client: None,
        };
        let e = missing.connector().err().unwrap();
        assert!(e.message.contains("/nonexistent/ca.pem"), "{}", e.message);
    }
}
