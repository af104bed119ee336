//! TLS for the Kafka listeners (rustls): the server's certificate chain and
//! key from PEM files, TLS 1.2 and 1.3 only, and client certificates
//! (mTLS) checked against a CA when asked for.
//!
//! The files are read again when they change ([`TlsConfig::spawn_reload`]
//! looks at their modification times): a new connection gets the new
//! certificate, open ones keep theirs, nothing restarts. A set of files
//! that does not load (a key that does not match, a half-written file) is
//! logged and counted, and the last good one is kept.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;

use crate::principal::PrincipalRules;
pub use floe_metadata::pem_files::{TlsError, provider};
use floe_metadata::pem_files::{certs, content, key};

/// Whether clients present a certificate (Kafka's `ssl.client.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// Not asked for.
    #[default]
    None,
    /// Asked for; a client without one is `User:ANONYMOUS` (or its SASL user).
    Requested,
    /// A client without a certificate the CA signed cannot connect.
    Required,
}

impl ClientAuth {
    pub fn parse(s: &str) -> Option<ClientAuth> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Some(ClientAuth::None),
            "requested" => Some(ClientAuth::Requested),
            "required" => Some(ClientAuth::Required),
            _ => None,
        }
    }
}

/// What TLS listeners are configured with.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The server's certificate chain (PEM), leaf first.
    pub cert_file: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// The CAs client certificates must chain to (PEM); needed unless
    /// `client_auth` is `None`.
    pub client_ca_file: Option<PathBuf>,
    pub client_auth: ClientAuth,
    /// How a client certificate's subject becomes a principal.
    pub principal_rules: PrincipalRules,
}

impl TlsSettings {
    /// The files this configuration is read from.
    fn files(&self) -> Vec<&Path> {
        let mut f = vec![self.cert_file.as_path(), self.key_file.as_path()];
        f.extend(self.client_ca_file.as_deref());
        f
    }

    /// Reads the files into a rustls configuration.
    pub fn load(&self) -> Result<ServerConfig, TlsError> {
        let provider = provider();
        let verifier = match (self.client_auth, &self.client_ca_file) {
            (ClientAuth::None, _) => WebPkiClientVerifier::no_client_auth(),
            (_, None) => {
                return Err(TlsError::Config(
                    "client certificates are asked for (--ssl-client-auth) but no CA is given (--ssl-cafile)"
                        .into(),
                ));
            }
            (auth, Some(ca)) => {
                let roots = floe_metadata::pem_files::roots(ca)?;
                let b =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
                let b = if auth == ClientAuth::Requested {
                    b.allow_unauthenticated()
                } else {
                    b
                };
                b.build().map_err(|e| TlsError::Config(e.to_string()))?
            }
        };
        let chain = certs(&self.cert_file)?;
        let key = key(&self.key_file)?;
        let mut cfg = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|e| {
                content(
                    &self.key_file,
                    format!("does not go with {}: {e}", self.cert_file.display()),
                )
            })?;
        cfg.alpn_protocols.clear();
        Ok(cfg)
    }
}

/// The TLS configuration new connections get, reloaded when its files change.
#[derive(Debug)]
pub struct TlsConfig {
    settings: TlsSettings,
    current: RwLock<Arc<ServerConfig>>,
    /// The files' modification times when last loaded.
    stamps: RwLock<Vec<Option<SystemTime>>>,
}

fn stamps(files: &[&Path]) -> Vec<Option<SystemTime>> {
    floe_metadata::pem_files::modified(files)
}

impl TlsConfig {
    /// Loads the files; an error here stops the process at start.
    pub fn new(settings: TlsSettings) -> Result<Arc<TlsConfig>, TlsError> {
        let stamped = stamps(&settings.files());
        let cfg = settings.load()?;
        Ok(Arc::new(TlsConfig {
            settings,
            current: RwLock::new(Arc::new(cfg)),
            stamps: RwLock::new(stamped),
        }))
    }

    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// What a new connection is served with.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let cfg = self
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        tokio_rustls::TlsAcceptor::from(cfg)
    }

    /// Reads the files again if any changed since they were last read;
    /// returns whether a new configuration is in use. A set that does not
    /// load keeps the old one (and is tried again at the next change).
    pub fn reload_if_changed(&self) -> bool {
        let now = stamps(&self.settings.files());
        {
            let mut seen = self.stamps.write().unwrap_or_else(|p| p.into_inner());
            if *seen == now {
                return false;
            }
            *seen = now;
        }
        match self.settings.load() {
            Ok(cfg) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(cfg);
                crate::metrics::tls_reload(true);
                tracing::info!(cert = %self.settings.cert_file.display(), "TLS certificate reloaded");
                true
            }
            Err(e) => {
                crate::metrics::tls_reload(false);
                tracing::warn!(error = %e, "TLS files changed but do not load; keeping the ones in use");
                false
            }
        }
    }

    /// Looks at the files every `every` and reloads them when they change.
    pub fn spawn_reload(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        floe_metadata::pem_files::spawn_reload(self, every, Self::reload_if_changed)
    }
}

#[cfg(test)]
pub(crate) mod test_certs {
    //! Certificates made for tests: a CA, a server certificate for
    //! 127.0.0.1 and localhost, client certificates.
    #![allow(clippy::unwrap_used)]

    use std::path::{Path, PathBuf};

    pub struct Ca {
        pub cert: rcgen::Certificate,
        pub issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    }

    pub fn ca(name: &str) -> Ca {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        Ca {
            cert,
            issuer: rcgen::Issuer::new(p, key),
        }
    }

    /// A certificate signed by `ca`: PEM of the chain and of the key.
    pub fn leaf(ca: &Ca, cn: &str, sans: &[&str]) -> (String, String) {
        let mut p =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.distinguished_name
            .push(rcgen::DnType::OrganizationalUnitName, "eng");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &ca.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    pub fn write(dir: &Path, name: &str, pem: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, pem).unwrap();
        p
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::test_certs::*;
    use super::*;

    fn settings(dir: &Path, cn: &str) -> TlsSettings {
        let ca = ca("test ca");
        let (cert, key) = leaf(&ca, cn, &["localhost", "127.0.0.1"]);
        TlsSettings {
            cert_file: write(dir, "server.pem", &cert),
            key_file: write(dir, "server.key", &key),
            client_ca_file: Some(write(dir, "ca.pem", &ca.cert.pem())),
            client_auth: ClientAuth::None,
            principal_rules: PrincipalRules::default(),
        }
    }

    #[test]
    fn bad_files_are_refused_with_the_file_named() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), "server");
        assert!(TlsConfig::new(s.clone()).is_ok());
        let missing = TlsSettings {
            cert_file: dir.path().join("nope.pem"),
            ..s.clone()
        };
        let e = TlsConfig::new(missing).unwrap_err().to_string();
        assert!(e.contains("nope.pem"), "{e}");
        let garbage = TlsSettings {
            key_file: write(dir.path(), "bad.key", "not a key"),
            ..s.clone()
        };
        let e = TlsConfig::new(garbage).unwrap_err().to_string();
        assert!(e.contains("bad.key"), "{e}");
        // A key of another certificate.
        let other = ca("other");
        let (_, other_key) = leaf(&other, "x", &["x"]);
        let mismatched = TlsSettings {
            key_file: write(dir.path(), "other.key", &other_key),
            ..s.clone()
        };
        let e = TlsConfig::new(mismatched).unwrap_err().to_string();
        assert!(e.contains("does not go with"), "{e}");
        let no_ca = TlsSettings {
            client_auth: ClientAuth::Required,
            client_ca_file: None,
            ..s
        };
        let e = TlsConfig::new(no_ca).unwrap_err().to_string();
        assert!(e.contains("--ssl-cafile"), "{e}");
    }

    #[test]
    fn changed_files_are_reloaded_and_bad_ones_keep_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), "first");
        let tls = TlsConfig::new(s.clone()).unwrap();
        assert!(!tls.reload_if_changed());
        let before = tls.current.read().unwrap().clone();
        // A new certificate and key (mtime moves; set it explicitly, a
        // coarse clock may not).
        let ca2 = ca("ca2");
        let (cert, key) = leaf(&ca2, "second", &["localhost"]);
        std::fs::write(&s.cert_file, cert).unwrap();
        std::fs::write(&s.key_file, key).unwrap();
        let later = SystemTime::now() + Duration::from_secs(5);
        for f in [&s.cert_file, &s.key_file] {
            std::fs::File::options()
                .write(true)
                .open(f)
                .unwrap()
                .set_modified(later)
                .unwrap();
        }
        assert!(tls.reload_if_changed());
        assert!(!Arc::ptr_eq(&before, &tls.current.read().unwrap()));
        // A half-written key: kept as it was.
        let in_use = tls.current.read().unwrap().clone();
        std::fs::write(&s.key_file, "-----BEGIN PRIVATE KEY-----\nAAAA").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&s.key_file)
            .unwrap()
            .set_modified(later + Duration::from_secs(5))
            .unwrap();
        assert!(!tls.reload_if_changed());
        assert!(Arc::ptr_eq(&in_use, &tls.current.read().unwrap()));
    }

    #[test]
    fn client_auth_parses_kafkas_values() {
        assert_eq!(ClientAuth::parse("required"), Some(ClientAuth::Required));
        assert_eq!(ClientAuth::parse("REQUESTED"), Some(ClientAuth::Requested));
        assert_eq!(ClientAuth::parse("none"), Some(ClientAuth::None));
        assert_eq!(ClientAuth::parse("maybe"), None);
    }
}
