//! floe-broker: partition logs on the object store.
//!
//! - [`broker`]: the broker and its produce / fetch / list-offsets calls.
//! - [`log`]: one partition's log (sequencing, queue, tail, committed index).
//! - [`flush`]: queued batches → one WAL object → one metadata commit.
//! - `lease`: until when the broker may serve; `backlog`: the cap on
//!   unflushed bytes.
//! - [`config`]: broker and per-topic settings.
//! - [`owner`]: the traits the proxy calls, a partition's owner and a
//!   group's coordinator, here or over [`rpc`].
//! - [`rpc`]: the internal RPC, its route table, server and client.
//! - [`txn`]: the transaction coordinator (run by every broker, reached
//!   through [`owner::TxnCoordination`]) and a partition's transactions.
//! - [`share`]: share groups (KIP-932): the share-partition state machine,
//!   the membership and the service the standalone proxy uses.

pub mod broker;
pub mod config;
pub mod coordinator;
pub mod error;
pub mod group;
mod metrics;
pub mod owner;
pub mod partitions;
pub mod rpc;
pub mod server;
pub mod share;
pub mod txn;

pub use partitions::{delayed, log, producer};

/// The group coordinator's RPC (its routes, handlers and protobuf), by
/// its old path.
pub use group::rpc as group_rpc;

pub use broker::{Acks, Broker, FetchData, OffsetAnswer, OffsetSpec, PendingProduce, ProduceOk};
pub use config::{BrokerConfig, LogConfig};
pub use error::{BrokerError, CallError, ErrorKind, RecordError, RoutingError, RoutingErrorKind};
pub use owner::{Coordinator, PartitionOwner, TxnCoordination};
pub use rpc::RemoteBroker;
