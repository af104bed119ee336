//! floe-metadata: the single source of truth of a Floe cluster.
//!
//! - [`state`]: the cluster model (nodes with leases, topics, partitions with
//!   owners, epochs and the committed log index, objects, group offsets,
//!   producer ids, coordinator shards, transactions) and the deterministic `apply` of
//!   [`command::Command`]s to it.
//! - [`controller`]: ownership decisions on the Raft leader.
//! - [`topic_config`]: topic settings with defaults and validation.
//! - [`group_config`]: group settings (Kafka's GROUP config resource).
//! - [`export_def`]: the indexer's per-topic typed columns (`export.index`).
//!
//! The model and its rules are described in `docs/metadata.md`.

pub mod acl;
pub mod admin_tokens;
pub mod api;
pub mod broker_config;
pub mod clock;
pub mod cluster_auth;
pub mod cluster_tls;
pub mod command;
pub mod controller;
pub mod error;
pub mod export;
pub mod export_def;
pub mod group_config;
pub mod http;
pub mod http_server;
pub mod ids;
mod metrics;
pub mod model;
pub mod node;
pub mod pem_files;
pub mod probe;
pub mod quota;
pub mod raft;
pub mod record_filter;
pub mod scram;
mod serde_pairs;
pub mod state;
pub mod table;
pub mod topic_config;
pub mod txn;
pub mod watch;

pub use error::{ErrorKind, MetaError};
