//! The Kafka listeners' settings of `floe standalone` and `floe proxy`:
//! names, protocols and addresses (Kafka's `listeners`,
//! `advertised.listeners`, `listener.security.protocol.map`), TLS, and
//! SASL; and their binding (`docs/security.md`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use floe_metadata::watch::ClusterWatch;
use floe_proxy::auth::{SaslConfig, ViewCredentials};
use floe_proxy::listeners::{self, ListenerSpec};
use floe_proxy::nodes::Advertised;
use floe_proxy::principal::PrincipalRules;
use floe_proxy::sasl::Mechanism;
use floe_proxy::server::ListenerSecurity;
use floe_proxy::tls::{ClientAuth, TlsConfig, TlsSettings};
use tokio::net::TcpListener;

#[derive(Debug, Clone, Args)]
pub struct ListenerArgs {
    /// Kafka listeners, `NAME://HOST:PORT` (comma-separated), each with the
    /// security protocol its name maps to (PLAINTEXT, SSL, SASL_PLAINTEXT,
    /// SASL_SSL, or through --listener-security-protocol-map). Default: one
    /// PLAINTEXT listener on --kafka-listen.
    #[arg(long, env = "FLOE_LISTENERS", value_delimiter = ',')]
    pub listeners: Vec<String>,
    /// The `NAME://HOST:PORT` each listener's clients are told (by name;
    /// default: --kafka-advertise for the first, the bound address otherwise).
    #[arg(long, env = "FLOE_ADVERTISED_LISTENERS", value_delimiter = ',')]
    pub advertised_listeners: Vec<String>,
    /// `NAME:PROTOCOL` pairs for listener names other than the protocols'
    /// own (for example `INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL`).
    #[arg(
        long,
        env = "FLOE_LISTENER_SECURITY_PROTOCOL_MAP",
        value_delimiter = ','
    )]
    pub listener_security_protocol_map: Vec<String>,
    /// The TLS listeners' certificate chain (PEM, leaf first); read again
    /// when it changes.
    #[arg(long, env = "FLOE_SSL_CERTFILE")]
    pub ssl_certfile: Option<PathBuf>,
    /// The TLS listeners' private key (PEM).
    #[arg(long, env = "FLOE_SSL_KEYFILE")]
    pub ssl_keyfile: Option<PathBuf>,
    /// The CAs that sign client certificates (PEM), for --ssl-client-auth.
    #[arg(long, env = "FLOE_SSL_CAFILE")]
    pub ssl_cafile: Option<PathBuf>,
    /// Client certificates on TLS listeners: none, requested or required
    /// (Kafka's ssl.client.auth).
    #[arg(long, env = "FLOE_SSL_CLIENT_AUTH", default_value = "none")]
    pub ssl_client_auth: String,
    /// How a client certificate's subject becomes the principal's name
    /// (Kafka's ssl.principal.mapping.rules: `RULE:pattern/replacement/[LU]`
    /// entries and DEFAULT).
    #[arg(
        long,
        env = "FLOE_SSL_PRINCIPAL_MAPPING_RULES",
        default_value = "DEFAULT"
    )]
    pub ssl_principal_mapping_rules: String,
    /// How often the TLS files are checked for changes.
    #[arg(long, env = "FLOE_SSL_RELOAD_INTERVAL_MS", default_value_t = 10_000)]
    pub ssl_reload_interval_ms: u64,
    /// The SASL mechanisms SASL listeners offer (PLAIN, SCRAM-SHA-256,
    /// SCRAM-SHA-512).
    #[arg(
        long,
        env = "FLOE_SASL_ENABLED_MECHANISMS",
        value_delimiter = ',',
        default_value = "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN"
    )]
    pub sasl_enabled_mechanisms: Vec<String>,
    /// Users of PLAIN, `USER:PASSWORD` a line; PLAIN also accepts the
    /// SCRAM users' passwords (`floe user`).
    #[arg(long, env = "FLOE_SASL_PLAIN_USERS_FILE")]
    pub sasl_plain_users_file: Option<PathBuf>,
    /// How long a SASL session lasts before the client must
    /// re-authenticate on its connection (KIP-368); 0: as long as the
    /// connection.
    #[arg(long, env = "FLOE_CONNECTIONS_MAX_REAUTH_MS", default_value_t = 0)]
    pub connections_max_reauth_ms: u64,
    /// OAUTHBEARER's keys (Kafka's `sasl.oauthbearer.jwks.endpoint.url`):
    /// a JWKS file (`file:///path`, read again when it changes) or an
    /// identity provider's `http(s)://…` jwks_uri. Needed when
    /// --sasl-enabled-mechanisms lists OAUTHBEARER.
    #[arg(long, env = "FLOE_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL")]
    pub sasl_oauthbearer_jwks_endpoint_url: Option<String>,
    /// How often the JWKS is read or fetched again.
    #[arg(
        long,
        env = "FLOE_SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS",
        default_value_t = 3_600_000
    )]
    pub sasl_oauthbearer_jwks_endpoint_refresh_ms: u64,
    /// CAs (PEM) trusted for an https:// JWKS URL (default: the system's).
    #[arg(long, env = "FLOE_SASL_OAUTHBEARER_JWKS_CAFILE")]
    pub sasl_oauthbearer_jwks_cafile: Option<PathBuf>,
    /// Audiences a token must name (`aud`), comma-separated; none: not checked.
    #[arg(
        long,
        env = "FLOE_SASL_OAUTHBEARER_EXPECTED_AUDIENCE",
        value_delimiter = ','
    )]
    pub sasl_oauthbearer_expected_audience: Vec<String>,
    /// The issuer a token must name (`iss`); none: not checked.
    #[arg(long, env = "FLOE_SASL_OAUTHBEARER_EXPECTED_ISSUER")]
    pub sasl_oauthbearer_expected_issuer: Option<String>,
    /// The claim naming the principal (`User:` and its value).
    #[arg(
        long,
        env = "FLOE_SASL_OAUTHBEARER_SUB_CLAIM_NAME",
        default_value = "sub"
    )]
    pub sasl_oauthbearer_sub_claim_name: String,
    /// Tolerance on a token's `exp` and `nbf`, for clocks that differ.
    #[arg(
        long,
        env = "FLOE_SASL_OAUTHBEARER_CLOCK_SKEW_BUFFER_SECONDS",
        default_value_t = 30
    )]
    pub sasl_oauthbearer_clock_skew_buffer_seconds: u64,
    /// How long a failed authentication waits before its answer and the
    /// close (against password guessing).
    #[arg(
        long,
        env = "FLOE_CONNECTION_FAILED_AUTHENTICATION_DELAY_MS",
        default_value_t = 100
    )]
    pub connection_failed_authentication_delay_ms: u64,
}

/// The listeners, bound, with their security and advertised addresses.
pub struct BoundListeners {
    pub listeners: Vec<(TcpListener, ListenerSecurity)>,
    /// Each listener's advertised address, in order (the first is the default).
    pub advertised: Vec<Advertised>,
    /// Keeps reloading the TLS files while held.
    pub tls_reload: Option<tokio::task::JoinHandle<()>>,
    /// KIP-368's session lifetime of SASL connections (0: none), which
    /// DescribeConfigs shows as `connections.max.reauth.ms`.
    pub connections_max_reauth_ms: u64,
}

impl BoundListeners {
    /// The string a proxy registers (`HOST:PORT`, or `NAME://HOST:PORT,…`).
    pub fn registered_address(&self) -> String {
        let pairs: Vec<(String, String)> = self
            .advertised
            .iter()
            .map(|a| (a.listener.clone(), host_port(&a.host, a.port)))
            .collect();
        listeners::encode_advertised(&pairs)
    }
}

fn host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl ListenerArgs {
    /// The listeners to bind: --listeners, or one PLAINTEXT listener on
    /// `default_listen` advertised as `default_advertise`.
    fn specs(
        &self,
        default_listen: SocketAddr,
        default_advertise: Option<&str>,
    ) -> anyhow::Result<Vec<ListenerSpec>> {
        let map = listeners::parse_protocol_map(&self.listener_security_protocol_map)?;
        let advertised = listeners::parse_endpoints(&self.advertised_listeners)?;
        if self.listeners.is_empty() {
            if !advertised.is_empty() {
                bail!("--advertised-listeners needs --listeners");
            }
            return Ok(vec![ListenerSpec {
                name: "PLAINTEXT".into(),
                protocol: listeners::SecurityProtocol::Plaintext,
                bind: default_listen,
                advertise: default_advertise.map(str::to_string),
            }]);
        }
        let bound = listeners::parse_endpoints(&self.listeners)?;
        let mut specs = listeners::resolve(&bound, &advertised, &map)?;
        if let (Some(first), Some(a)) = (specs.first_mut(), default_advertise)
            && first.advertise.is_none()
        {
            first.advertise = Some(a.to_string());
        }
        Ok(specs)
    }

    fn tls(&self) -> anyhow::Result<Option<Arc<TlsConfig>>> {
        let (cert, key) = match (&self.ssl_certfile, &self.ssl_keyfile) {
            (None, None) => return Ok(None),
            (Some(c), Some(k)) => (c.clone(), k.clone()),
            _ => bail!("--ssl-certfile and --ssl-keyfile go together"),
        };
        let client_auth = ClientAuth::parse(&self.ssl_client_auth).with_context(|| {
            format!(
                "--ssl-client-auth {:?}: none, requested or required",
                self.ssl_client_auth
            )
        })?;
        let principal_rules = PrincipalRules::parse(&self.ssl_principal_mapping_rules)?;
        let tls = TlsConfig::new(TlsSettings {
            cert_file: cert,
            key_file: key,
            client_ca_file: self.ssl_cafile.clone(),
            client_auth,
            principal_rules,
        })?;
        Ok(Some(tls))
    }

    /// OAUTHBEARER's token checker, when its JWKS is configured.
    async fn oauth(
        &self,
        mechanisms: &[Mechanism],
    ) -> anyhow::Result<Option<Arc<floe_proxy::oauth::OAuthValidator>>> {
        use floe_proxy::oauth::{JwksSource, OAuthSettings, OAuthValidator};
        let listed = mechanisms.contains(&Mechanism::OAuthBearer);
        let Some(url) = &self.sasl_oauthbearer_jwks_endpoint_url else {
            if listed {
                bail!(
                    "OAUTHBEARER needs --sasl-oauthbearer-jwks-endpoint-url (the keys that sign tokens)"
                );
            }
            return Ok(None);
        };
        if !listed {
            bail!(
                "--sasl-oauthbearer-jwks-endpoint-url is set but --sasl-enabled-mechanisms does not list OAUTHBEARER"
            );
        }
        let settings = OAuthSettings {
            jwks: JwksSource::parse(url).map_err(anyhow::Error::msg)?,
            audience: self
                .sasl_oauthbearer_expected_audience
                .iter()
                .map(|a| a.trim().to_string())
                .filter(|a| !a.is_empty())
                .collect(),
            issuer: self.sasl_oauthbearer_expected_issuer.clone(),
            sub_claim: self.sasl_oauthbearer_sub_claim_name.clone(),
            clock_skew: Duration::from_secs(self.sasl_oauthbearer_clock_skew_buffer_seconds),
            refresh: Duration::from_millis(self.sasl_oauthbearer_jwks_endpoint_refresh_ms.max(100)),
            ca_file: self.sasl_oauthbearer_jwks_cafile.clone(),
        };
        let v = OAuthValidator::load(settings)
            .await
            .map_err(|e| anyhow::anyhow!("--sasl-oauthbearer-jwks-endpoint-url: {e}"))?;
        v.spawn_refresh();
        Ok(Some(v))
    }

    async fn sasl(&self, view: &ClusterWatch) -> anyhow::Result<SaslConfig> {
        let mut mechanisms = Vec::new();
        for name in &self.sasl_enabled_mechanisms {
            let name = name.trim();
            if name.is_empty() {
                continue;
            }
            let m = Mechanism::from_name(name).with_context(|| {
                format!("--sasl-enabled-mechanisms: {name:?} is not served (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)")
            })?;
            if !mechanisms.contains(&m) {
                mechanisms.push(m);
            }
        }
        let plain_users = match &self.sasl_plain_users_file {
            Some(path) => {
                Some(floe_proxy::auth::read_plain_users(path).map_err(anyhow::Error::msg)?)
            }
            None => None,
        };
        let oauth = self.oauth(&mechanisms).await?;
        Ok(SaslConfig {
            mechanisms,
            credentials: Arc::new(ViewCredentials {
                view: view.clone(),
                plain_users,
                oauth,
            }),
            reauth: (self.connections_max_reauth_ms > 0)
                .then(|| Duration::from_millis(self.connections_max_reauth_ms)),
            failure_delay: Duration::from_millis(self.connection_failed_authentication_delay_ms),
        })
    }

    /// Binds every listener (port 0: the system picks one, and that is
    /// advertised unless an address is given) and sets up its security.
    pub async fn bind(
        &self,
        default_listen: SocketAddr,
        default_advertise: Option<&str>,
        view: &ClusterWatch,
    ) -> anyhow::Result<BoundListeners> {
        let specs = self.specs(default_listen, default_advertise)?;
        let tls = self.tls()?;
        let needs_tls = specs.iter().any(|s| s.protocol.tls());
        if needs_tls && tls.is_none() {
            bail!("a TLS listener (SSL, SASL_SSL) needs --ssl-certfile and --ssl-keyfile");
        }
        let needs_sasl = specs.iter().any(|s| s.protocol.sasl());
        let sasl = if needs_sasl {
            Some(self.sasl(view).await?)
        } else {
            None
        };
        let mut out = Vec::new();
        let mut advertised = Vec::new();
        for spec in specs {
            let l = TcpListener::bind(spec.bind)
                .await
                .with_context(|| format!("cannot listen on {} ({})", spec.bind, spec.name))?;
            let addr = l.local_addr()?;
            let adv = spec.advertise.clone().unwrap_or_else(|| addr.to_string());
            let node = floe_proxy::nodes::KafkaNode::parse(0, &adv)
                .with_context(|| format!("the advertised address {adv:?} must be HOST:PORT"))?;
            advertised.push(Advertised {
                listener: spec.name.clone(),
                host: node.host,
                port: node.port,
            });
            let security = ListenerSecurity {
                name: Arc::from(spec.name.as_str()),
                protocol: spec.protocol,
                tls: spec.protocol.tls().then(|| tls.clone()).flatten(),
                sasl: spec.protocol.sasl().then(|| sasl.clone()).flatten(),
            };
            security.validate().map_err(anyhow::Error::msg)?;
            out.push((l, security));
        }
        let tls_reload = tls
            .filter(|_| needs_tls)
            .map(|t| t.spawn_reload(Duration::from_millis(self.ssl_reload_interval_ms.max(100))));
        Ok(BoundListeners {
            listeners: out,
            advertised,
            tls_reload,
            connections_max_reauth_ms: self.connections_max_reauth_ms,
        })
    }
}

/// `ports` with the proxy's listeners: `kafka` for the first, and
/// `kafka.NAME` (lower case) for each.
pub fn with_listeners(
    ports: crate::ports_file::BoundPorts,
    proxy: &floe_proxy::Proxy,
) -> crate::ports_file::BoundPorts {
    let mut ports = ports.with("kafka", proxy.local_addr);
    for (name, addr) in &proxy.local_addrs {
        ports = ports.with(format!("kafka.{}", name.to_ascii_lowercase()), *addr);
    }
    ports
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cmd {
        #[command(flatten)]
        l: ListenerArgs,
    }

    fn parse(args: &[&str]) -> ListenerArgs {
        let mut all = vec!["x"];
        all.extend_from_slice(args);
        Cmd::try_parse_from(all).unwrap().l
    }

    #[test]
    fn without_listeners_one_plaintext_listener_is_the_default() {
        if std::env::vars()
            .any(|(k, _)| k.starts_with("FLOE_LISTENER") || k.starts_with("FLOE_ADVERTISED"))
        {
            return;
        }
        let l = parse(&[]);
        let specs = l
            .specs("127.0.0.1:9092".parse().unwrap(), Some("h:1"))
            .unwrap();
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].protocol, listeners::SecurityProtocol::Plaintext);
        assert_eq!(specs[0].advertise.as_deref(), Some("h:1"));
        let l = parse(&["--advertised-listeners", "PLAINTEXT://h:1"]);
        assert!(l.specs("127.0.0.1:9092".parse().unwrap(), None).is_err());
    }

    #[tokio::test]
    async fn a_tls_listener_without_a_certificate_or_sasl_without_mechanisms_is_refused() {
        if std::env::vars().any(|(k, _)| k.starts_with("FLOE_SSL") || k.starts_with("FLOE_SASL")) {
            return;
        }
        // A view of a metadata service that is not there: never used here.
        let nowhere =
            floe_metadata::api::client::MetaClient::new(vec!["127.0.0.1:1".into()]).unwrap();
        let view = ClusterWatch::start(Arc::new(nowhere));
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let l = parse(&["--listeners", "SSL://127.0.0.1:0"]);
        let e = l.bind(any, None, &view).await.err().unwrap().to_string();
        assert!(e.contains("--ssl-certfile"), "{e}");
        let l = parse(&[
            "--listeners",
            "SASL_PLAINTEXT://127.0.0.1:0",
            "--sasl-enabled-mechanisms",
            "GSSAPI",
        ]);
        let e = l.bind(any, None, &view).await.err().unwrap().to_string();
        assert!(e.contains("GSSAPI"), "{e}");
        let l = parse(&[
            "--listeners",
            "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        ]);
        let bound = l.bind(any, None, &view).await.unwrap();
        assert_eq!(bound.listeners.len(), 2);
        assert!(
            bound
                .registered_address()
                .starts_with("SASL_PLAINTEXT://127.0.0.1:")
        );
    }
}
