//! Share groups (KIP-932, "Queues for Kafka"): the broker's side. See
//! `docs/queues.md` for the design and what is built.
//!
//! - [`partition`]: one share group's state on one partition (the
//!   in-flight window of records, their locks, states and delivery counts),
//!   held by the partition's owner. Not wired into the broker yet.

pub mod partition;

pub use partition::{
    AckBatch, AckType, Acquired, Backoff, DurableState, MemberId, ShareConfig, ShareError,
    SharePartition, ShareSnapshot, SnapshotRange,
};
