//! floe-broker: partition logs on the object store, and the coordinators
//! that live beside them. Arrows point one way: coordinators → runtime →
//! core (`tests/test_layering.py` checks it).
//!
//! - [`partitions`]: the core, the partition owner: each owned partition's
//!   log (sequencing, producer state, a partition's side of transactions),
//!   flushes, maintenance, the lease, take-over and hand-over, delayed
//!   holds; [`PartitionOwner`] is the one interface others reach it by.
//! - [`coordinator`]: the coordinator runtime: the shards owned at their
//!   epochs, loading a shard on take-over and dropping it on hand-over,
//!   timers.
//! - [`group`], [`share`], [`txn`]: the coordinators (consumer groups,
//!   share groups (KIP-932), transactions), each its state machine, its
//!   service on the runtime and its RPC routes.
//! - [`broker`]: the composition root, [`Broker`]; [`owner`]: the traits
//!   the proxy calls on it or on [`RemoteBroker`]; [`rpc`]: the internal
//!   RPC's transport and client; [`server`]: its router.
//! - [`orphans`]: the orphan scan, which deletes log objects the metadata
//!   never learned of (run by the broker serving coordinator shard 0, and
//!   by `floe storage orphans`).
//! - [`config`]: every setting of a broker.

pub mod broker;
pub mod config;
pub mod coordinator;
pub mod error;
pub mod group;
mod metrics;
pub mod orphans;
pub mod owner;
pub mod partitions;
pub mod rpc;
pub mod server;
pub mod share;
pub mod trace;
pub mod txn;

pub use partitions::{delayed, log, producer};

/// The group coordinator's RPC (its routes, handlers and protobuf), by
/// its old path.
pub use group::rpc as group_rpc;

pub use broker::{Acks, Broker, FetchData, OffsetAnswer, OffsetSpec, PendingProduce, ProduceOk};
pub use config::{BrokerConfig, LogConfig};
pub use error::{BrokerError, CallError, ErrorKind, RecordError, RoutingError, RoutingErrorKind};
pub use metrics::render_group_lag;
pub use owner::{Coordinator, PartitionOwner, TxnCoordination};
pub use rpc::RemoteBroker;
