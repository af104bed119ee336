//! The flags every Kafka-protocol command (`topic`, `produce`, `consume`)
//! shares: where the broker is and how long to wait for it.

use std::time::Duration;

use clap::Args;
use floe_client::{ClientError, KafkaClient};

/// Where the broker is, and how long to wait for it.
#[derive(Debug, Clone, Args)]
pub struct BootstrapArgs {
    /// Kafka bootstrap address (host:port).
    #[arg(long, env = "FLOE_BOOTSTRAP", default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Deadline of connecting and of one request, in milliseconds (also sent
    /// to the broker as the timeout of requests that carry one).
    #[arg(long, env = "FLOE_REQUEST_TIMEOUT_MS", default_value_t = 30_000)]
    pub request_timeout_ms: u64,
}

impl BootstrapArgs {
    /// Connects and negotiates versions.
    pub async fn connect(&self) -> Result<KafkaClient, ClientError> {
        KafkaClient::connect(
            &self.bootstrap,
            Duration::from_millis(self.request_timeout_ms),
        )
        .await
    }
}
