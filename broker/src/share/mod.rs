//! Share groups (KIP-932, "Queues for Kafka"): the broker's side. See
//! `docs/queues.md` for the design and what is built.
//!
//! - [`partition`]: one share group's state on one partition (the
//!   in-flight window of records, their locks, states and delivery counts),
//!   held by the partition's owner.
//! - [`group`]: one share group's membership and assignment (ShareGroup-
//!   Heartbeat, ShareGroupDescribe), held by its coordinator shard's owner.
//! - [`isolation`]: what a `read_committed` share group never sees
//!   (records of aborted transactions, markers).
//! - [`service`]: both, as one broker serves them (its coordinator shards'
//!   groups, its partitions' share-partitions).
//! - [`arrival`]: what a record entering a share-partition's window is for
//!   the group (its filter, its delay headers), read from its headers.
//! - [`durable`]: the share-partitions' durable form in the metadata
//!   service, fenced by the partition's epoch.
//! - [`rpc`]: how a proxy reaches them, in its process or another, and
//!   the coordinator's sweep of members that timed out.
//! - [`namespace`]: one id namespace for classic, consumer and share groups.
//! - [`admin`]: the admin side (listing and deleting share groups, moving
//!   or deleting a share-partition's start offset, inspecting it), in-process
//!   or over the RPC.
//! - [`inspect`]: a share-partition as an operator looks at it (counts by
//!   state and delivery count, delayed records by due minute, locks).

//! - [`timers`]: a share-partition's timer index, delayed records past
//!   its parked list in buckets in the object store.
//! - [`dead_letter`]: appending a group's dead records to its dead-letter
//!   topic, exactly once.

pub mod admin;
pub mod arrival;
mod calls;
pub mod dead_letter;
pub mod durable;
pub mod group;
pub mod holds;
pub mod inspect;
pub mod isolation;
pub mod namespace;
pub mod node;
pub mod partition;
pub mod rpc;
mod serve;
pub mod service;
pub mod timers;

pub use crate::config::DEFAULT_MAX_PARKED;

pub use admin::{ShareGroupAdmin, ShareGroupListing, SharePartitionAdmin};
pub use durable::ShareStore;
pub use group::{
    Assignment, DescribedShareMember, Heartbeat, HeartbeatAnswer, ShareGroup, ShareGroupConfig,
    ShareGroupDescription, ShareGroupError, ShareGroupState, TopicInfo,
};
pub use inspect::{AcquiredRecord, ShareInspection, TimerBucketSummary};
pub use namespace::GroupKind;
pub use node::ShareNode;
pub use partition::{
    AckBatch, AckType, Acquired, Arrival, ArrivalStats, Backoff, DeadLetter, DeadLetterProgress,
    DeadLetterReason, DurableState, MemberId, SealPlan, ShareConfig, ShareError, SharePartition,
    ShareSnapshot, SnapshotRange,
};
pub use rpc::{ShareCall, ShareCoordinator, ShareOwner};
pub(crate) use serve::sweep_members;
pub use service::{AutoOffsetReset, ShareFetched, ShareService, ShareSettings};
