//! floe-proxy: the Kafka wire protocol in front of Floe's brokers.
//!
//! - [`codec`]: frames and guarded request decoding, response encoding.
//! - [`server`]: the listener and connections (pipelining, responses in order).
//! - [`ordering`]: which of a connection's requests take effect in the order sent.
//! - [`limits`]: what clients may make the listener hold (connections,
//!   requests and bytes in flight, idle time, decoded memory).
//! - [`handlers`]: the data-plane requests (ApiVersions, Metadata, Produce,
//!   Fetch, ListOffsets, DeleteRecords), routed to the partition's broker.
//! - [`admin`]: topic and config administration answered from the metadata service.
//! - [`nodes`]: the brokers clients are shown (the live proxies), partition
//!   leaders and coordinators spread over them.
//! - [`registration`]: a proxy's registration and lease with the metadata service.
//! - [`peers`]: probes of the other proxies' ports (a killed one is left out at once).
//! - [`quota`]: client quotas enforced by throttling (KIP-13, KIP-219).
//! - [`share`]: share groups (KIP-932) behind `--share-groups`, and the share sessions.
//! - [`authz`]: ACLs (Kafka's authorizer): what each API needs, decided per request.
//! - [`acls`]: CreateAcls, DescribeAcls, DeleteAcls.

pub mod acls;
pub mod admin;
pub mod auth;
pub mod authz;
pub mod codec;
mod consumer_groups;
mod errors;
pub mod fetch;
pub mod fetch_session;
pub mod groups;
pub mod handlers;
pub mod limits;
pub mod listeners;
mod metrics;
pub mod nodes;
pub mod oauth;
pub mod ordering;
pub mod peers;
pub mod principal;
pub mod quota;
pub mod registration;
pub mod sasl;
pub mod server;
pub mod share;
pub mod share_admin;
#[cfg(test)]
mod test_support;
pub mod tls;
pub mod topic_partitions;
mod txns;

pub use limits::ListenerLimits;
pub use server::{Proxy, ProxyConfig};
