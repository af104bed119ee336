//! `floe`: the one binary of Floe, with a subcommand per role.
//!
//! Roles: `meta`, `broker`, `proxy`, `indexer`, and `standalone` with all of
//! them in one process; tools: `cluster`, `storage`, `topic`, `offsets`,
//! `delete-records`, `configs`, `group`, `produce`, `consume`, `query`, `table`,
//! `probe`, `transactions`, `producers`.

mod acl_cmd;
mod admin_http;
mod announce;
mod certs_cmd;
#[cfg(test)]
mod cli_reference;
mod client_cmd;
mod cluster_cmd;
mod config_file;
mod console_search;
mod group_cmd;
mod indexer_cmd;
mod kafka_args;
mod kafka_tools;
mod listener_args;
mod meta_cmd;
mod nodes_cmd;
mod offsets_cmd;
mod ports_file;
mod probe_cmd;
mod record_format;
mod record_input;
mod role_env;
mod roles;
mod secrets_cmd;
mod share_group_cmd;
mod standalone;
mod storage_cmd;
mod table;
mod table_cmd;
mod telemetry;
mod time_arg;
mod topic_cmd;
mod txn_cmd;
mod user_cmd;

use clap::{Parser, Subcommand};

/// jemalloc reuses freed pages; glibc's malloc returns large blocks to the
/// kernel, so each new one is faulted in and zeroed again (see
/// docs/benchmarks.md, "The catch-up read").
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Debug, Parser)]
#[command(
    name = "floe",
    version,
    about = "Floe: a Kafka-compatible message queue on object storage"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The cluster secret (a file, one secret a line; the first signs, any
    /// verifies): every internal request (metadata API, Raft, broker RPC,
    /// admin and query API) is signed with it, and one without a valid
    /// signature is refused with 401 (docs/security.md). Give every process
    /// of the cluster, and the floe tools that call the internal ports, the
    /// same file.
    #[arg(
        long,
        global = true,
        env = "FLOE_CLUSTER_SECRET_FILE",
        value_name = "FILE"
    )]
    cluster_secret_file: Option<std::path::PathBuf>,
    /// Internal mTLS: the cluster CA's certificate (PEM; several while one
    /// is replaced). With --internal-tls-cert and --internal-tls-key, every
    /// internal port (metadata API, Raft, broker RPC, admin and query API)
    /// is served over TLS, every internal call presents this process's
    /// certificate, and a caller without a member certificate gets 401
    /// (docs/security.md). `floe certs` makes the files.
    #[arg(
        long,
        global = true,
        env = "FLOE_INTERNAL_TLS_CA",
        value_name = "FILE",
        requires_all = ["internal_tls_cert", "internal_tls_key"]
    )]
    internal_tls_ca: Option<std::path::PathBuf>,
    /// This process's certificate (PEM), signed by the cluster CA; its
    /// common name is its identity: metadata-ID, broker, broker-ID, proxy,
    /// indexer or admin. Read again when it changes.
    #[arg(
        long,
        global = true,
        env = "FLOE_INTERNAL_TLS_CERT",
        value_name = "FILE",
        requires = "internal_tls_ca"
    )]
    internal_tls_cert: Option<std::path::PathBuf>,
    /// The private key of --internal-tls-cert (PEM).
    #[arg(
        long,
        global = true,
        env = "FLOE_INTERNAL_TLS_KEY",
        value_name = "FILE",
        requires = "internal_tls_ca"
    )]
    internal_tls_key: Option<std::path::PathBuf>,
    /// Bearer tokens for people on the admin port's query API and web
    /// console (a file: `PRINCIPAL TOKEN` or `PRINCIPAL sha256:HEX` a line,
    /// read again when it changes): a token's principal may look up and
    /// backfill the topics its ACLs let it READ, and the console shows it
    /// what its ACLs let it describe.
    #[arg(
        long,
        global = true,
        env = "FLOE_ADMIN_TOKEN_FILE",
        value_name = "FILE"
    )]
    admin_token_file: Option<std::path::PathBuf>,
    /// How log lines are written to stderr: `text` for people, `json` (one
    /// object a line: timestamp, level, target, message and the event's
    /// fields, with the span it happened in) for a log pipeline.
    #[arg(
        long,
        global = true,
        env = "FLOE_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    log_format: LogFormat,
    /// Export traces over OTLP/HTTP to this collector (its base address,
    /// such as `http://otel-collector:4318`; spans go to `/v1/traces`): a
    /// span for each Kafka request, with its id, through the brokers it
    /// calls, their flushes and commits. Off without it.
    #[arg(
        long,
        global = true,
        env = "OTEL_EXPORTER_OTLP_ENDPOINT",
        value_name = "URL"
    )]
    otlp_endpoint: Option<String>,
}

/// The log lines' format (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with the object store that holds Floe's log.
    #[command(subcommand)]
    Storage(storage_cmd::StorageCommand),
    /// Run a metadata node (Raft), or query and manage a metadata cluster.
    Meta(meta_cmd::MetaArgs),
    /// What the metadata service knows of the cluster's brokers and proxies.
    #[command(subcommand)]
    Cluster(nodes_cmd::ClusterCommand),
    /// Run every role in one process on a local folder (Kafka on 127.0.0.1:9092).
    Standalone(Box<standalone::StandaloneArgs>),
    /// Run a broker (partition owner; internal RPC for proxies).
    Broker(cluster_cmd::BrokerArgs),
    /// Run a Kafka protocol proxy in front of the brokers.
    Proxy(Box<cluster_cmd::ProxyArgs>),
    /// Create, list, describe, alter and delete topics (Kafka protocol).
    #[command(subcommand)]
    Topic(topic_cmd::TopicCommand),
    /// A topic's first and end offsets per partition, and the offset at a time.
    Offsets(offsets_cmd::OffsetsArgs),
    /// Delete a topic's records before an offset (DeleteRecords).
    DeleteRecords(offsets_cmd::DeleteRecordsArgs),
    /// Show the configs of a topic, a broker or a group (DescribeConfigs).
    Configs(offsets_cmd::ConfigsArgs),
    /// List, describe (with lag), reset and delete consumer groups (Kafka protocol).
    #[command(subcommand)]
    Group(group_cmd::GroupCommand),
    /// Write stdin lines to a topic as records (Kafka protocol).
    Produce(client_cmd::ProduceArgs),
    /// Print a topic's records to stdout, one per line (Kafka protocol).
    Consume(client_cmd::ConsumeArgs),
    /// Run the indexer (Parquet exports and the query API), or backfill a topic.
    Indexer(indexer_cmd::IndexerArgs),
    /// Find a topic's records by key and time through the indexer.
    Query(indexer_cmd::QueryArgs),
    /// Topics that are Iceberg tables: list them, describe one.
    #[command(subcommand)]
    Table(table_cmd::TableCommand),
    /// Ask a Floe process on this machine for `/livez` (a container's health check).
    Probe(probe_cmd::ProbeArgs),
    /// List and describe transactions (ListTransactions, DescribeTransactions).
    #[command(subcommand)]
    Transactions(txn_cmd::TransactionsCommand),
    /// Show the producers of a topic's partitions: epochs, sequences, open
    /// transactions (DescribeProducers).
    Producers(txn_cmd::ProducersArgs),
    /// Create, list and delete SCRAM users (AlterUserScramCredentials,
    /// DescribeUserScramCredentials).
    #[command(subcommand)]
    User(user_cmd::UserCommand),
    /// Add, list and remove ACLs (CreateAcls, DescribeAcls, DeleteAcls),
    /// as kafka-acls.sh does.
    #[command(subcommand)]
    Acl(acl_cmd::AclCommand),
    /// Make the cluster CA and its processes' certificates (internal mTLS).
    #[command(subcommand)]
    Certs(certs_cmd::CertsCommand),
    /// Make a deployment's generated secrets once (the cluster secret, an S3
    /// server's root keys and their AWS credentials file).
    #[command(subcommand)]
    Secrets(secrets_cmd::SecretsCommand),
    /// Kafka's shell tools with Kafka's flags (`bin/kafka-topics.sh`, …;
    /// docs/kafka-tools.md).
    #[command(hide = true, disable_help_flag = true)]
    KafkaTool(kafka_tools::KafkaToolArgs),
}

/// The log filter without `RUST_LOG`: `info` for a process that runs a
/// role (the controller's assignments, hand-overs, leases are `info`
/// lines), `warn` for a tool, whose stderr is its user's.
fn default_log_filter(command: &Command) -> &'static str {
    let runs_a_role = match command {
        Command::Standalone(_) | Command::Broker(_) | Command::Proxy(_) => true,
        Command::Meta(args) => args.runs_a_node(),
        Command::Indexer(args) => args.action.is_none(),
        _ => false,
    };
    if runs_a_role { "info" } else { "warn" }
}

/// The process's role, for the traces' service name (`floe-<role>`).
fn role_name(command: &Command) -> &'static str {
    match command {
        Command::Standalone(_) => "standalone",
        Command::Broker(_) => "broker",
        Command::Proxy(_) => "proxy",
        Command::Meta(_) => "meta",
        Command::Indexer(_) => "indexer",
        _ => "cli",
    }
}

fn main() -> std::process::ExitCode {
    let args = role_env::with_role_env(std::env::args_os().collect(), |name| {
        std::env::var(name).ok()
    });
    let args = match config_file::with_config_file(args, |name| std::env::var(name).ok()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("floe: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let cli = Cli::parse_from(args);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log_filter(&cli.command)));
    let json = cli.log_format == LogFormat::Json;
    announce::use_json(json);
    let service = format!("floe-{}", role_name(&cli.command));
    let _traces = match telemetry::init(json, filter, cli.otlp_endpoint.as_deref(), &service) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("floe: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Some(path) = &cli.cluster_secret_file {
        let installed = floe_metadata::cluster_auth::ClusterSecret::read(path)
            .and_then(floe_metadata::cluster_auth::install);
        if let Err(e) = installed {
            eprintln!("floe: --cluster-secret-file: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let internal_tls = match (
        &cli.internal_tls_ca,
        &cli.internal_tls_cert,
        &cli.internal_tls_key,
    ) {
        (Some(ca), Some(cert), Some(key)) => {
            let files = floe_metadata::cluster_tls::TlsFiles {
                ca: ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
            };
            let installed = floe_metadata::cluster_tls::InternalTls::new(files)
                .and_then(|t| floe_metadata::cluster_tls::install(t.clone()).map(|()| t));
            match installed {
                Ok(t) => Some(t),
                Err(e) => {
                    eprintln!("floe: internal TLS: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
        _ => None,
    };
    if let Some(path) = &cli.admin_token_file {
        let installed = floe_metadata::admin_tokens::TokenFile::open(path.clone())
            .and_then(floe_metadata::admin_tokens::install);
        if let Err(e) = installed {
            eprintln!("floe: --admin-token-file: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    if let Err(e) = admin_http::install_metrics_recorder() {
        eprintln!("floe: {e:#}");
        return std::process::ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("floe: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let _reload = internal_tls.map(|t| t.spawn_reload(std::time::Duration::from_secs(10)));
        match cli.command {
            Command::Storage(cmd) => storage_cmd::run(cmd).await,
            Command::Meta(args) => meta_cmd::run(args).await,
            Command::Cluster(cmd) => nodes_cmd::run(cmd).await,
            Command::Standalone(args) => standalone::run(*args).await,
            Command::Broker(args) => cluster_cmd::run_broker(args).await,
            Command::Proxy(args) => cluster_cmd::run_proxy(*args).await,
            Command::Topic(cmd) => topic_cmd::run(cmd).await,
            Command::Offsets(args) => offsets_cmd::offsets(args).await,
            Command::DeleteRecords(args) => offsets_cmd::delete_records(args).await,
            Command::Configs(args) => offsets_cmd::configs(args).await,
            Command::Group(cmd) => group_cmd::run(cmd).await,
            Command::Produce(args) => client_cmd::produce(args).await,
            Command::Consume(args) => client_cmd::consume(args).await,
            Command::Indexer(args) => indexer_cmd::run(args).await,
            Command::Query(args) => indexer_cmd::query(args).await,
            Command::Table(cmd) => table_cmd::run(cmd).await,
            Command::Probe(args) => probe_cmd::run(args).await,
            Command::Transactions(cmd) => txn_cmd::run(cmd).await,
            Command::Producers(args) => txn_cmd::producers(args).await,
            Command::User(cmd) => user_cmd::run(cmd).await,
            Command::Acl(cmd) => acl_cmd::run(cmd).await,
            Command::Certs(cmd) => certs_cmd::run(cmd),
            Command::Secrets(cmd) => secrets_cmd::run(cmd),
            Command::KafkaTool(args) => kafka_tools::run(args).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floe: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
