//! Share groups (KIP-932, "Queues for Kafka"): the broker's side. See
//! `docs/queues.md` for the design and what is built.
//!
//! - [`partition`]: one share group's state on one partition (the
//!   in-flight window of records, their locks, states and delivery counts),
//!   held by the partition's owner. Not wired into the broker yet.
//! - [`group`]: one share group's membership and assignment (ShareGroup-
//!   Heartbeat, ShareGroupDescribe), held by its coordinator shard's owner.
//! - [`service`]: both, in memory, for the proxy of `floe standalone`
//!   (behind `--share-groups`).

pub mod group;
pub mod partition;
pub mod service;

pub use group::{
    Assignment, DescribedShareMember, Heartbeat, HeartbeatAnswer, ShareGroup, ShareGroupConfig,
    ShareGroupDescription, ShareGroupError, ShareGroupState, TopicInfo,
};
pub use partition::{
    AckBatch, AckType, Acquired, Backoff, DurableState, MemberId, ShareConfig, ShareError,
    SharePartition, ShareSnapshot, SnapshotRange,
};
pub use service::{AutoOffsetReset, ShareFetched, ShareService};
