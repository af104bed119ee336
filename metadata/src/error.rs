//! Errors of the metadata service. Those a command can produce when applied
//! are deterministic and travel in the Raft log's responses; the others come
//! from the service around it (Raft, storage, network).

use serde::{Deserialize, Serialize};

use crate::ids::{BrokerId, Epoch, PartitionKey, ShardId};

/// What went wrong, in terms callers branch on (and the proxy maps to Kafka codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorKind {
    TopicExists,
    UnknownTopic,
    UnknownPartition,
    InvalidConfig,
    InvalidRequest,
    /// A commit or ownership action at an epoch that is no longer current.
    StaleEpoch,
    /// The broker does not own the partition or shard.
    NotOwner,
    /// The commit does not start at the partition's committed end.
    OffsetMismatch,
    UnknownBroker,
    /// This node is not the Raft leader; the error carries the leader's address if known.
    NotLeader,
    /// Raft could not serve (no quorum, shutting down, timed out).
    Unavailable,
    /// Local storage failed.
    Storage,
    /// An export step that does not follow the partition's export state
    /// (another generation, another pending file, a gap).
    ExportConflict,
    /// A command above the size bound (`--meta-max-command-bytes`); not proposed.
    TooLarge,
    /// An offset commit from a coordinator that does not own the group's
    /// shard at the epoch it gave (the shard moved): the coordinator answers
    /// NOT_COORDINATOR.
    StaleCoordinator,
    /// A change to something that does not exist (a SCRAM credential
    /// deleted that the user does not have: Kafka's RESOURCE_NOT_FOUND).
    NotFound,
    /// A node whose version may not work with this metadata node's
    /// (`floe_types::version::incompatibility`): refused at registration.
    Incompatible,
}

impl ErrorKind {
    /// The kind named as `{:?}` prints it (the API's error bodies carry that name).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "TopicExists" => Self::TopicExists,
            "UnknownTopic" => Self::UnknownTopic,
            "UnknownPartition" => Self::UnknownPartition,
            "InvalidConfig" => Self::InvalidConfig,
            "InvalidRequest" => Self::InvalidRequest,
            "StaleEpoch" => Self::StaleEpoch,
            "NotOwner" => Self::NotOwner,
            "OffsetMismatch" => Self::OffsetMismatch,
            "UnknownBroker" => Self::UnknownBroker,
            "NotLeader" => Self::NotLeader,
            "Unavailable" => Self::Unavailable,
            "Storage" => Self::Storage,
            "ExportConflict" => Self::ExportConflict,
            "TooLarge" => Self::TooLarge,
            "StaleCoordinator" => Self::StaleCoordinator,
            "NotFound" => Self::NotFound,
            "Incompatible" => Self::Incompatible,
            _ => return None,
        })
    }

    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorKind::NotLeader | ErrorKind::Unavailable)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum MetaError {
    #[error("topic {0:?} already exists")]
    TopicExists(String),
    #[error("unknown topic {0:?}")]
    UnknownTopic(String),
    #[error("unknown partition {0}")]
    UnknownPartition(PartitionKey),
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("stale epoch for {partition}: current {current}, given {given}")]
    StaleEpoch {
        partition: PartitionKey,
        current: Epoch,
        given: Epoch,
    },
    #[error("broker {broker} does not own {what} (owner: {owner:?})")]
    NotOwner {
        what: String,
        broker: BrokerId,
        owner: Option<BrokerId>,
    },
    #[error("commit for {partition} starts at offset {given}, committed end is {expected}")]
    OffsetMismatch {
        partition: PartitionKey,
        expected: i64,
        given: i64,
    },
    #[error("unknown broker {0}")]
    UnknownBroker(BrokerId),
    #[error("not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<String> },
    #[error("metadata unavailable: {0}")]
    Unavailable(String),
    #[error("metadata storage error: {0}")]
    Storage(String),
    #[error("export conflict: {0}")]
    ExportConflict(String),
    #[error("command of {size} bytes is above the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error(
        "broker {broker} does not coordinate shard {shard} at epoch {given} (owner {owner:?} at epoch {current})"
    )]
    StaleCoordinator {
        shard: ShardId,
        broker: BrokerId,
        given: Epoch,
        owner: Option<BrokerId>,
        current: Epoch,
    },
    /// An error the service answered, as the client receives it: the kind
    /// and the message (the structured fields stay on the server).
    #[error("{message}")]
    Remote { kind: ErrorKind, message: String },
    /// A change to something that does not exist ([`ErrorKind::NotFound`]).
    /// (Appended last: a serialized error numbers variants by position.)
    #[error("not found: {0}")]
    NotFound(String),
    /// A node of a version the metadata may not work with
    /// ([`ErrorKind::Incompatible`]).
    #[error("incompatible version: {0}")]
    Incompatible(String),
}

impl MetaError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            MetaError::TopicExists(_) => ErrorKind::TopicExists,
            MetaError::UnknownTopic(_) => ErrorKind::UnknownTopic,
            MetaError::UnknownPartition(_) => ErrorKind::UnknownPartition,
            MetaError::InvalidConfig(_) => ErrorKind::InvalidConfig,
            MetaError::InvalidRequest(_) => ErrorKind::InvalidRequest,
            MetaError::StaleEpoch { .. } => ErrorKind::StaleEpoch,
            MetaError::NotOwner { .. } => ErrorKind::NotOwner,
            MetaError::OffsetMismatch { .. } => ErrorKind::OffsetMismatch,
            MetaError::UnknownBroker(_) => ErrorKind::UnknownBroker,
            MetaError::NotLeader { .. } => ErrorKind::NotLeader,
            MetaError::Unavailable(_) => ErrorKind::Unavailable,
            MetaError::Storage(_) => ErrorKind::Storage,
            MetaError::ExportConflict(_) => ErrorKind::ExportConflict,
            MetaError::TooLarge { .. } => ErrorKind::TooLarge,
            MetaError::StaleCoordinator { .. } => ErrorKind::StaleCoordinator,
            MetaError::NotFound(_) => ErrorKind::NotFound,
            MetaError::Incompatible(_) => ErrorKind::Incompatible,
            MetaError::Remote { kind, .. } => *kind,
        }
    }
}
