//! TLS material from PEM files, for every Floe TLS endpoint (the Kafka
//! listeners' `floe_proxy::tls`, internal mTLS's [`crate::cluster_tls`]):
//! the one crypto provider, certificates, keys and CA roots read with the
//! file and the reason in each error, and the watch that reloads a
//! configuration when its files change.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, SystemTime};

use rustls::DigitallySignedStruct;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// TLS that cannot be set up, with the file and the reason.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {what}")]
    Content { path: PathBuf, what: String },
    #[error("TLS settings: {0}")]
    Config(String),
}

/// The crypto provider every Floe TLS endpoint uses, built once (rustls
/// asks for its schemes at every handshake).
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .clone()
}

/// A [`TlsError::Content`] of `path`.
pub fn content(path: &Path, what: impl Into<String>) -> TlsError {
    TlsError::Content {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// A TLS 1.2 handshake signature, checked as the WebPKI verifiers check it
/// (with [`provider`]'s algorithms), for verifiers of Floe's own.
pub fn verify_tls12(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    rustls::crypto::verify_tls12_signature(
        message,
        cert,
        dss,
        &provider().signature_verification_algorithms,
    )
}

/// A TLS 1.3 handshake signature, as [`verify_tls12`].
pub fn verify_tls13(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    rustls::crypto::verify_tls13_signature(
        message,
        cert,
        dss,
        &provider().signature_verification_algorithms,
    )
}

/// The certificates of a PEM file (at least one).
pub fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| content(path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(content(path, "holds no certificate"));
    }
    Ok(certs)
}

/// The private key of a PEM file.
pub fn key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| content(path, format!("holds no PEM private key: {e}")))
}

/// The CA certificates of a PEM file, as trust roots.
pub fn roots(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(path)? {
        roots
            .add(c)
            .map_err(|e| content(path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// The files' modification times (`None` for one that cannot be read):
/// files whose times changed are read again.
pub fn modified(files: &[&Path]) -> Vec<Option<SystemTime>> {
    files
        .iter()
        .map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok())
        .collect()
}

/// Calls `reload` on `target` every `every`, off the runtime's workers,
/// until `target` is dropped.
pub fn spawn_reload<T: Send + Sync + 'static>(
    target: &Arc<T>,
    every: Duration,
    reload: fn(&T) -> bool,
) -> tokio::task::JoinHandle<()> {
    let weak: Weak<T> = Arc::downgrade(target);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(me) = weak.upgrade() else { return };
            let _ = tokio::task::spawn_blocking(move || reload(&me)).await;
        }
    })
}
