//! The flags every Kafka-protocol command (`topic`, `group`, `offsets`,
//! `produce`, `consume`, …) shares: where the cluster is and how long to
//! wait for it.

use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use floe_client::{ClientError, Isolation, KafkaClient};

/// Where the cluster is, and how long to wait for it.
#[derive(Debug, Clone, Args)]
pub struct BootstrapArgs {
    /// Kafka bootstrap addresses (host:port), comma-separated: each is tried
    /// in turn until one answers. Any Floe proxy serves every request.
    #[arg(
        long,
        env = "FLOE_BOOTSTRAP",
        default_value = "127.0.0.1:9092",
        value_delimiter = ','
    )]
    pub bootstrap: Vec<String>,
    /// Deadline of connecting and of one request, in milliseconds (also sent
    /// to the broker as the timeout of requests that carry one).
    #[arg(long, env = "FLOE_REQUEST_TIMEOUT_MS", default_value_t = 30_000)]
    pub request_timeout_ms: u64,
    /// A properties file with the listener's security, librdkafka's keys:
    /// security.protocol, sasl.mechanism, sasl.username, sasl.password,
    /// ssl.ca.location, ssl.certificate.location, ssl.key.location (as the
    /// Kafka tools' --command-config). FLOE_SASL_PASSWORD overrides the
    /// password, so that it need not be in the file.
    #[arg(long, env = "FLOE_COMMAND_CONFIG", value_name = "FILE")]
    pub command_config: Option<std::path::PathBuf>,
    /// The security as librdkafka's properties, given by the caller instead
    /// of --command-config (the Kafka tools translate Java's keys first).
    #[arg(skip)]
    pub properties: Option<std::collections::BTreeMap<String, String>>,
}

impl BootstrapArgs {
    /// The security of --command-config (plaintext without one).
    pub fn security(&self) -> anyhow::Result<floe_client::security::ClientSecurity> {
        use floe_client::security::{ClientSecurity, parse_properties};
        if let Some(props) = &self.properties {
            return ClientSecurity::from_properties(props).context("--command-config");
        }
        let Some(path) = &self.command_config else {
            return Ok(ClientSecurity::plaintext());
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --command-config {}", path.display()))?;
        let mut props = parse_properties(&text)
            .with_context(|| format!("--command-config {}", path.display()))?;
        if let Ok(pw) = std::env::var("FLOE_SASL_PASSWORD") {
            props.insert("sasl.password".into(), pw);
        }
        ClientSecurity::from_properties(&props)
            .with_context(|| format!("--command-config {}", path.display()))
    }

    /// Connects to the first address that answers and negotiates versions.
    /// With one address its error is returned as it is; with several, every
    /// address's error.
    pub async fn connect(&self) -> anyhow::Result<KafkaClient> {
        let timeout = Duration::from_millis(self.request_timeout_ms);
        let security = std::sync::Arc::new(self.security()?);
        let addrs: Vec<&str> = self
            .bootstrap
            .iter()
            .map(|a| a.trim())
            .filter(|a| !a.is_empty())
            .collect();
        let mut errors: Vec<ClientError> = Vec::new();
        for addr in &addrs {
            match KafkaClient::connect_with(addr, timeout, security.clone()).await {
                Ok(client) => return Ok(client),
                Err(e) => {
                    tracing::debug!(addr, error = %e, "bootstrap address did not answer");
                    errors.push(e);
                }
            }
        }
        match (errors.len(), errors.pop()) {
            (_, None) => anyhow::bail!("--bootstrap names no address"),
            (1, Some(e)) => Err(e.into()),
            (_, Some(last)) => {
                let mut all: Vec<String> = errors.iter().map(ToString::to_string).collect();
                all.push(last.to_string());
                anyhow::bail!(
                    "none of the {} bootstrap addresses answered: {}",
                    addrs.len(),
                    all.join("; ")
                )
            }
        }
    }
}

/// `--isolation`: what a reader sees of transactions (Kafka's
/// `isolation.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum IsolationArg {
    /// Every record up to the high watermark, also of open and aborted
    /// transactions (Kafka's default).
    #[default]
    #[value(name = "read_uncommitted")]
    ReadUncommitted,
    /// Only committed records, up to the last stable offset.
    #[value(name = "read_committed")]
    ReadCommitted,
}

impl From<IsolationArg> for Isolation {
    fn from(a: IsolationArg) -> Self {
        match a {
            IsolationArg::ReadUncommitted => Isolation::ReadUncommitted,
            IsolationArg::ReadCommitted => Isolation::ReadCommitted,
        }
    }
}
