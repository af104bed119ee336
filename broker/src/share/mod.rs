//! Share groups (KIP-932, "Queues for Kafka"): the broker's side. See
//! `docs/queues.md` for the design and what is built.
//!
//! - [`partition`]: one share group's state on one partition (the
//!   in-flight window of records, their locks, states and delivery counts),
//!   held by the partition's owner. Not wired into the broker yet.
//! - [`group`]: one share group's membership and assignment (ShareGroup-
//!   Heartbeat, ShareGroupDescribe), held by its coordinator shard's owner.
//! - [`service`]: both, as one broker serves them (its coordinator shards'
//!   groups, its partitions' share-partitions).
//! - [`durable`]: the share-partitions' durable form in the metadata
//!   service, fenced by the partition's epoch.
//! - [`rpc`]: how a proxy reaches them, in its process or another.
//! - [`dead_letter`]: appending a group's dead records to its dead-letter
//!   topic, exactly once.

pub mod dead_letter;
pub mod durable;
pub mod group;
pub mod partition;
pub mod rpc;
pub mod service;

pub use durable::ShareStore;
pub use group::{
    Assignment, DescribedShareMember, Heartbeat, HeartbeatAnswer, ShareGroup, ShareGroupConfig,
    ShareGroupDescription, ShareGroupError, ShareGroupState, TopicInfo,
};
pub use partition::{
    AckBatch, AckType, Acquired, Backoff, DeadLetter, DeadLetterProgress, DeadLetterReason,
    DurableState, MemberId, ShareConfig, ShareError, SharePartition, ShareSnapshot, SnapshotRange,
};
pub use rpc::{ShareCall, ShareCoordinator, ShareOwner};
pub use service::{AutoOffsetReset, ShareFetched, ShareService, ShareSettings};
