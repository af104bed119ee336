//! mTLS on the internal planes: the metadata API and Raft, the broker RPC
//! and the admin port (with the indexer's query API) are served over TLS,
//! and every process of the cluster presents a certificate that the
//! cluster's own CA signed (`floe certs`). The certificate's common name
//! is the process's identity, a [`Member`]: `metadata-1`, `broker-7` or
//! `broker`, `proxy`, `indexer`, `admin`. The metadata API holds each
//! identity to its part ([`Member::may_act_as_node`], the Raft routes).
//!
//! Peers are checked by the CA and by their identity, not by host name:
//! pods move and brokers advertise IP addresses, so the CA must be the
//! cluster's own and sign nothing else. A client certificate is asked for
//! but not required at the handshake, so that health probes (`/livez`,
//! `/readyz`) and `/metrics` stay open; every other path answers 401 to a
//! caller without a member certificate (or a bearer token on the admin
//! port).
//!
//! The files are read again when they change ([`InternalTls::spawn_reload`]):
//! new connections get the new certificate; the CA file may hold several
//! CAs while one is replaced. Installed once per process ([`install`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

pub use crate::pem_files::TlsError;
use crate::pem_files::{content, provider, verify_tls12, verify_tls13};

/// What a cluster process is, by its certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A metadata node (Raft voter or learner); always with its node id.
    Metadata,
    Broker,
    Proxy,
    Indexer,
    /// An operator's tools (`floe meta`, `floe query`): may do anything.
    Admin,
}

impl Role {
    pub const ALL: [Role; 5] = [
        Role::Metadata,
        Role::Broker,
        Role::Proxy,
        Role::Indexer,
        Role::Admin,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Role::Metadata => "metadata",
            Role::Broker => "broker",
            Role::Proxy => "proxy",
            Role::Indexer => "indexer",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.name() == s)
    }
}

/// A process of the cluster: its role and, for metadata nodes and brokers
/// given a fixed id, its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Member {
    pub role: Role,
    pub id: Option<u32>,
}

impl Member {
    /// The identity of a common name: `ROLE` or `ROLE-ID`. A metadata
    /// node's name must carry its id.
    pub fn parse(cn: &str) -> Option<Member> {
        let (role, id) = match cn.rsplit_once('-') {
            Some((r, id)) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => {
                (Role::parse(r)?, Some(id.parse::<u32>().ok()?))
            }
            _ => (Role::parse(cn)?, None),
        };
        if role == Role::Metadata && id.is_none() {
            return None;
        }
        Some(Member { role, id })
    }

    /// The common name of this identity.
    pub fn name(&self) -> String {
        match self.id {
            Some(id) => format!("{}-{id}", self.role.name()),
            None => self.role.name().to_string(),
        }
    }

    /// The member a DER certificate names, if its common name is one.
    pub fn of_certificate(der: &[u8]) -> Option<Member> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let cn = cert.subject().iter_common_name().next()?.as_str().ok()?;
        Member::parse(cn)
    }

    /// Whether this member may register, heartbeat or drain node `id` of
    /// kind `kind` (`broker` or `proxy`): a broker only brokers (only
    /// `id` itself when its certificate carries an id), a proxy only
    /// proxies; metadata nodes and admins any.
    pub fn may_act_as_node(&self, kind: NodeRole, id: u32) -> bool {
        match (self.role, kind) {
            (Role::Admin | Role::Metadata, _) => true,
            (Role::Broker, NodeRole::Broker) => self.id.is_none_or(|mine| mine == id),
            (Role::Proxy, NodeRole::Proxy) => true,
            _ => false,
        }
    }

    /// Whether this member may act as broker `id` (commit, release,
    /// truncate, coordinate): a broker as itself, metadata nodes and admins
    /// as any.
    pub fn may_act_as_broker(&self, id: u32) -> bool {
        self.may_act_as_node(NodeRole::Broker, id)
    }
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// The kind of a registered node, as [`Member::may_act_as_node`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRole {
    Broker,
    Proxy,
}

/// The files of a process's internal TLS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The cluster CA(s) peers' certificates must chain to (PEM).
    pub ca: PathBuf,
    /// This process's certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

impl TlsFiles {
    fn all(&self) -> [&Path; 3] {
        [&self.ca, &self.cert, &self.key]
    }
}

/// One loaded set of files.
struct Loaded {
    key: Arc<CertifiedKey>,
    me: Member,
    clients: Arc<dyn ClientCertVerifier>,
    servers: Arc<WebPkiServerVerifier>,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded").field("me", &self.me).finish()
    }
}

fn load(files: &TlsFiles) -> Result<Loaded, TlsError> {
    let provider = provider();
    let roots = Arc::new(crate::pem_files::roots(&files.ca)?);
    let clients = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| content(&files.ca, e.to_string()))?;
    let servers = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| content(&files.ca, e.to_string()))?;
    let chain = crate::pem_files::certs(&files.cert)?;
    let me = Member::of_certificate(&chain[0]).ok_or_else(|| {
        content(
            &files.cert,
            "its common name is not a cluster identity (metadata-ID, broker, broker-ID, proxy, indexer or admin; `floe certs issue` makes them)",
        )
    })?;
    let key = crate::pem_files::key(&files.key)?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| content(&files.key, format!("not a usable private key: {e}")))?;
    let key = CertifiedKey::new(chain, signing);
    key.keys_match().map_err(|e| {
        content(
            &files.key,
            format!("does not go with {}: {e}", files.cert.display()),
        )
    })?;
    Ok(Loaded {
        key: Arc::new(key),
        me,
        clients,
        servers,
    })
}

fn stamps(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    crate::pem_files::modified(&files.all())
}

/// A process's internal TLS: what its servers serve and its clients present.
#[derive(Debug)]
pub struct InternalTls {
    files: TlsFiles,
    current: RwLock<Arc<Loaded>>,
    stamps: RwLock<Vec<Option<SystemTime>>>,
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

impl InternalTls {
    /// Reads the files; an error stops the process at start.
    pub fn new(files: TlsFiles) -> Result<Arc<InternalTls>, TlsError> {
        let stamped = stamps(&files);
        let loaded = Arc::new(load(&files)?);
        Ok(Arc::new_cyclic(|me: &std::sync::Weak<InternalTls>| {
            let dynamic = Arc::new(Dynamic(me.clone()));
            let versions = [&rustls::version::TLS13, &rustls::version::TLS12];
            // The builders fail only on protocol versions the provider
            // lacks; aws-lc-rs has both.
            #[allow(clippy::expect_used)]
            let mut server = rustls::ServerConfig::builder_with_provider(provider())
                .with_protocol_versions(&versions)
                .expect("aws-lc-rs supports TLS 1.2 and 1.3")
                .with_client_cert_verifier(dynamic.clone())
                .with_cert_resolver(dynamic.clone());
            server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            #[allow(clippy::expect_used)]
            let client = rustls::ClientConfig::builder_with_provider(provider())
                .with_protocol_versions(&versions)
                .expect("aws-lc-rs supports TLS 1.2 and 1.3")
                .dangerous()
                .with_custom_certificate_verifier(dynamic.clone())
                .with_client_cert_resolver(dynamic);
            InternalTls {
                files,
                current: RwLock::new(loaded),
                stamps: RwLock::new(stamped),
                server: Arc::new(server),
                client: Arc::new(client),
            }
        }))
    }

    fn loaded(&self) -> Arc<Loaded> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// This process's identity.
    pub fn me(&self) -> Member {
        self.loaded().me
    }

    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.server.clone())
    }

    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        self.client.clone()
    }

    /// Reads the files again if any changed; returns whether new ones are
    /// in use. A set that does not load keeps the old one.
    pub fn reload_if_changed(&self) -> bool {
        let now = stamps(&self.files);
        {
            let mut seen = self.stamps.write().unwrap_or_else(|p| p.into_inner());
            if *seen == now {
                return false;
            }
            *seen = now;
        }
        match load(&self.files) {
            Ok(l) => {
                tracing::info!(identity = %l.me, "internal TLS certificate reloaded");
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(l);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "internal TLS files changed but do not load; keeping the ones in use");
                false
            }
        }
    }

    /// Looks at the files every `every` and reloads them when they change.
    pub fn spawn_reload(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        crate::pem_files::spawn_reload(self, every, Self::reload_if_changed)
    }
}

/// Answers rustls from the current files (a weak link: the configs live
/// inside the [`InternalTls`] they point back to).
#[derive(Debug)]
struct Dynamic(std::sync::Weak<InternalTls>);

impl Dynamic {
    fn loaded(&self) -> Option<Arc<Loaded>> {
        self.0.upgrade().map(|t| t.loaded())
    }
}

fn gone() -> rustls::Error {
    rustls::Error::General("internal TLS was shut down".into())
}

impl ResolvesServerCert for Dynamic {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.loaded().map(|l| l.key.clone())
    }
}

impl ResolvesClientCert for Dynamic {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.loaded().map(|l| l.key.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

impl ClientCertVerifier for Dynamic {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let l = self.loaded().ok_or_else(gone)?;
        l.clients.verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

impl ServerCertVerifier for Dynamic {
    /// The chain must lead to the cluster CA and the certificate must name
    /// a member; the host name is not checked (see the module's docs).
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let l = self.loaded().ok_or_else(gone)?;
        let checked = l.servers.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match checked {
            // Name checks come after the chain's: it chains to our CA.
            Ok(_)
            | Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => {}
            Err(e) => return Err(e),
        }
        if Member::of_certificate(end_entity).is_some() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

static INSTALLED: OnceLock<Arc<InternalTls>> = OnceLock::new();

/// Makes `tls` the process's internal TLS (once, at start).
pub fn install(tls: Arc<InternalTls>) -> Result<(), TlsError> {
    INSTALLED.set(tls).map_err(|_| TlsError::Content {
        path: PathBuf::new(),
        what: "internal TLS installed twice".into(),
    })
}

/// The process's internal TLS, if on.
pub fn current() -> Option<&'static Arc<InternalTls>> {
    INSTALLED.get()
}

/// `https` when internal TLS is on, else `http`.
pub fn scheme() -> &'static str {
    if current().is_some() { "https" } else { "http" }
}

/// The connector every internal HTTP client uses: TLS with this process's
/// certificate when internal TLS is on, plain TCP otherwise; HTTP/2 only
/// when `http2` (the broker RPC), else HTTP/1.1.
pub fn connector(
    connect_timeout: Duration,
    http2: bool,
) -> hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector> {
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    http.enforce_http(false);
    let cfg = match current() {
        Some(t) => (*t.client_config()).clone(),
        // Never used for an https URL (scheme() says http), but the
        // connector needs one.
        None => rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map(|b| {
                b.with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
            })
            .unwrap_or_else(|_| {
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
            }),
    };
    let b = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(cfg)
        .https_or_http();
    if http2 {
        b.enable_http2().wrap_connector(http)
    } else {
        b.enable_http1().wrap_connector(http)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn identities_parse_from_common_names() {
        assert_eq!(
            Member::parse("metadata-3"),
            Some(Member {
                role: Role::Metadata,
                id: Some(3)
            })
        );
        assert_eq!(Member::parse("metadata"), None);
        assert_eq!(
            Member::parse("broker"),
            Some(Member {
                role: Role::Broker,
                id: None
            })
        );
        assert_eq!(Member::parse("broker-7").unwrap().name(), "broker-7");
        assert_eq!(Member::parse("proxy").unwrap().role, Role::Proxy);
        assert_eq!(Member::parse("alice"), None);
        assert_eq!(Member::parse("broker-x"), None);
        assert_eq!(Member::parse("broker-99999999999"), None);
        assert_eq!(Member::parse(""), None);
    }

    #[test]
    fn members_act_only_as_themselves() {
        let b7 = Member::parse("broker-7").unwrap();
        assert!(b7.may_act_as_broker(7));
        assert!(!b7.may_act_as_broker(8));
        assert!(!b7.may_act_as_node(NodeRole::Proxy, 7));
        let any_broker = Member::parse("broker").unwrap();
        assert!(any_broker.may_act_as_broker(8));
        let proxy = Member::parse("proxy").unwrap();
        assert!(proxy.may_act_as_node(NodeRole::Proxy, 3));
        assert!(!proxy.may_act_as_node(NodeRole::Broker, 3));
        assert!(!proxy.may_act_as_broker(3));
        assert!(!Member::parse("indexer").unwrap().may_act_as_broker(1));
        assert!(Member::parse("admin").unwrap().may_act_as_broker(1));
    }
}
