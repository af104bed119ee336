//! The metadata service's HTTP API: protobuf messages, the axum server, and a
//! client that follows the leader.

pub mod acl_routes;
pub mod broker_config_routes;
pub mod calls;
pub mod client;
pub mod convert;
mod export_routes;
pub mod meta_api;
pub mod node_routes;
pub mod proto;
pub mod quota_routes;
pub mod routes;
pub mod scram_routes;
pub mod server;
pub mod table_routes;
pub mod txn_routes;

/// Content type of every API body.
pub const PROTOBUF: &str = "application/x-protobuf";

pub use meta_api::{LocalMeta, MetaApi, RouteCall};
