//! The Raft side of the metadata service (openraft 0.9): type config, the
//! log store on disk, the state machine, and the network between nodes.

// openraft's traits dictate `StorageError` (over 200 bytes) as the error type.
#![allow(clippy::result_large_err)]

pub mod codec;
pub mod log_store;
pub mod network;
pub mod proposer;
pub mod reads;
pub mod state_machine;

use std::io::Cursor;

use crate::command::{Command, Response};

/// Raft node ids (distinct from broker ids).
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// Floe's Raft types: commands in, responses out, nodes known by address.
    pub TypeConfig:
        D = Command,
        R = Response,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;
