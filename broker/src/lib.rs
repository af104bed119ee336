//! floe-broker: partition logs on the object store.
//!
//! - [`broker`]: the broker and its produce / fetch / list-offsets calls.
//! - [`log`]: one partition's log (sequencing, queue, tail, committed index).
//! - [`flush`]: queued batches → one WAL object → one metadata commit.
//! - [`config`]: broker and per-topic settings.

pub mod broker;
pub mod config;
pub mod error;
mod flush;
pub mod group;
pub mod group_rpc;
pub mod log;
mod maintenance;
mod metrics;
pub mod producer;
pub mod rpc;
mod tasks;

pub use broker::{Acks, Broker, FetchData, OffsetAnswer, OffsetSpec, PendingProduce, ProduceOk};
pub use config::{BrokerConfig, LogConfig};
pub use error::{BrokerError, ErrorKind};
pub use rpc::{BrokerHandle, RemoteBroker};
