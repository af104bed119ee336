//! Broker errors, with kinds the proxy maps to Kafka error codes.

use floe_metadata::error::{ErrorKind as MetaKind, MetaError};
use floe_storage::StorageError;

/// What went wrong, in terms a caller branches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// This broker does not own the partition (or is handing it over).
    NotOwner,
    UnknownTopicOrPartition,
    /// The fetch or list offset is outside `[log start, high watermark]`.
    OffsetOutOfRange,
    /// A batch is larger than the topic's `max.message.bytes`.
    MessageTooLarge,
    /// A batch failed its CRC or its framing.
    CorruptMessage,
    /// A well-formed batch Floe refuses (old magic, control batch from a client…).
    InvalidRecord,
    /// A feature a batch needs that Floe does not have yet (transactions).
    Unsupported,
    /// The object store failed and the write could not be completed.
    Storage,
    /// The metadata service could not be reached or refused.
    Metadata,
    /// The broker is stopping.
    ShuttingDown,
    /// An idempotent batch whose sequence does not follow the last one.
    OutOfOrderSequence,
    /// An idempotent batch from an older producer epoch.
    InvalidProducerEpoch,
    InvalidRequest,
    /// The broker's lease with the metadata service ran out (it was paused
    /// or cut off): it serves nothing until the lease is renewed and its
    /// ownership checked. Retryable: another broker takes over, or this one
    /// comes back.
    LeaseExpired,
    /// The broker's unflushed bytes stayed over their cap for the whole
    /// wait (the store is slow or failing). Retryable: nothing was sequenced.
    Backpressure,
    /// The client's leader epoch is older than the partition's: it missed
    /// a change of owner (Kafka's FENCED_LEADER_EPOCH).
    FencedLeaderEpoch,
    /// The client's leader epoch is newer than this owner knows (Kafka's
    /// UNKNOWN_LEADER_EPOCH).
    UnknownLeaderEpoch,
    /// A write reached its owner but its outcome is not known: the answer
    /// was lost (the owner stopped or was cut off after taking it) or the
    /// owner's state changed while it waited. It may be stored or not.
    /// Kafka's REQUEST_TIMED_OUT, which clients treat as *possibly
    /// persisted*: an idempotent producer retries with the same sequence
    /// numbers (answered with the stored offsets if it was stored) and never
    /// re-sequences it under a new epoch, as it may after a definite
    /// refusal such as NOT_LEADER_OR_FOLLOWER.
    OutcomeUnknown,
    /// An idempotent batch that leaves a gap, from a producer that has not
    /// written to this owner since it took the partition over: its
    /// predecessors, failed by the previous owner, are still to come.
    /// Nothing stored; clients see NOT_LEADER_OR_FOLLOWER and retry it after
    /// them (see `producer.rs`).
    SequenceGap,
    /// A transactional batch from a producer whose transaction does not
    /// hold this partition (not added with AddPartitionsToTxn, already
    /// decided, or no transactional producer's id): Kafka's
    /// INVALID_TXN_STATE (KIP-890's verification).
    InvalidTxnState,
}

impl ErrorKind {
    /// Every kind, once.
    pub const ALL: [ErrorKind; 20] = [
        ErrorKind::NotOwner,
        ErrorKind::UnknownTopicOrPartition,
        ErrorKind::OffsetOutOfRange,
        ErrorKind::MessageTooLarge,
        ErrorKind::CorruptMessage,
        ErrorKind::InvalidRecord,
        ErrorKind::Unsupported,
        ErrorKind::Storage,
        ErrorKind::Metadata,
        ErrorKind::ShuttingDown,
        ErrorKind::OutOfOrderSequence,
        ErrorKind::InvalidProducerEpoch,
        ErrorKind::InvalidRequest,
        ErrorKind::LeaseExpired,
        ErrorKind::Backpressure,
        ErrorKind::FencedLeaderEpoch,
        ErrorKind::UnknownLeaderEpoch,
        ErrorKind::OutcomeUnknown,
        ErrorKind::SequenceGap,
        ErrorKind::InvalidTxnState,
    ];

    /// The kind's name as the internal RPC carries it (its variant name).
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::NotOwner => "NotOwner",
            ErrorKind::UnknownTopicOrPartition => "UnknownTopicOrPartition",
            ErrorKind::OffsetOutOfRange => "OffsetOutOfRange",
            ErrorKind::MessageTooLarge => "MessageTooLarge",
            ErrorKind::CorruptMessage => "CorruptMessage",
            ErrorKind::InvalidRecord => "InvalidRecord",
            ErrorKind::Unsupported => "Unsupported",
            ErrorKind::Storage => "Storage",
            ErrorKind::Metadata => "Metadata",
            ErrorKind::ShuttingDown => "ShuttingDown",
            ErrorKind::OutOfOrderSequence => "OutOfOrderSequence",
            ErrorKind::InvalidProducerEpoch => "InvalidProducerEpoch",
            ErrorKind::InvalidRequest => "InvalidRequest",
            ErrorKind::LeaseExpired => "LeaseExpired",
            ErrorKind::Backpressure => "Backpressure",
            ErrorKind::FencedLeaderEpoch => "FencedLeaderEpoch",
            ErrorKind::UnknownLeaderEpoch => "UnknownLeaderEpoch",
            ErrorKind::OutcomeUnknown => "OutcomeUnknown",
            ErrorKind::SequenceGap => "SequenceGap",
            ErrorKind::InvalidTxnState => "InvalidTxnState",
        }
    }

    /// The kind of a name that [`ErrorKind::name`] gave.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Why one record of a refused batch was refused (Kafka's KIP-467
/// `record_errors`): its index in its batch and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub batch_index: i32,
    pub message: String,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct BrokerError {
    kind: ErrorKind,
    message: String,
    /// The records that made a batch invalid ([`ErrorKind::InvalidRecord`]).
    record_errors: Vec<RecordError>,
    /// The object store's kind of error, for one that came from it (a
    /// missing object is told from a store that failed).
    store_kind: Option<floe_storage::ErrorKind>,
}

impl BrokerError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            record_errors: Vec::new(),
            store_kind: None,
        }
    }

    /// This error with the records that caused it.
    pub fn with_record_errors(mut self, record_errors: Vec<RecordError>) -> Self {
        self.record_errors = record_errors;
        self
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn record_errors(&self) -> &[RecordError] {
        &self.record_errors
    }

    /// The object store's kind of error, if it came from the store.
    pub fn store_kind(&self) -> Option<floe_storage::ErrorKind> {
        self.store_kind
    }

    /// A write whose outcome is not known ([`ErrorKind::OutcomeUnknown`]).
    pub fn outcome_unknown(why: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorKind::OutcomeUnknown,
            format!("the write may or may not be stored: {why}"),
        )
    }

    pub fn not_owner(what: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorKind::NotOwner,
            format!("this broker does not own {what}"),
        )
    }
}

impl From<StorageError> for BrokerError {
    fn from(e: StorageError) -> Self {
        let kind = match e.kind() {
            floe_storage::ErrorKind::Corrupt => ErrorKind::CorruptMessage,
            _ => ErrorKind::Storage,
        };
        let mut out = Self::new(kind, e.to_string());
        out.store_kind = Some(e.kind());
        out
    }
}

impl From<MetaError> for BrokerError {
    fn from(e: MetaError) -> Self {
        let kind = match e.kind() {
            MetaKind::UnknownTopic | MetaKind::UnknownPartition => {
                ErrorKind::UnknownTopicOrPartition
            }
            MetaKind::StaleEpoch | MetaKind::NotOwner => ErrorKind::NotOwner,
            MetaKind::InvalidConfig | MetaKind::InvalidRequest => ErrorKind::InvalidRequest,
            _ => ErrorKind::Metadata,
        };
        Self::new(kind, e.to_string())
    }
}

pub type Result<T, E = BrokerError> = std::result::Result<T, E>;

/// Why a call did not reach the broker that answers it: a partition's owner
/// or a group's coordinator. These stay typed up to the proxy, which turns
/// them into Kafka error codes in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoutingErrorKind {
    /// The cluster view has no such partition.
    UnknownPartition,
    /// The partition has no owner right now (being assigned or moved).
    NoOwner,
    /// The owner is named but the view has no address for it.
    OwnerUnknown,
    /// The owner did not answer: connect, timeout, or a broken stream.
    Unreachable,
    /// No broker coordinates the group right now, or the one asked does not.
    NotCoordinator,
    /// The proxy's cluster view was not confirmed by the metadata service
    /// for longer than it may be trusted: the owner it names may be gone.
    StaleView,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct RoutingError {
    kind: RoutingErrorKind,
    message: String,
    /// The owner's address refused the connection: no process listens
    /// there (it is gone, not slow).
    refused: bool,
}

impl RoutingError {
    pub fn new(kind: RoutingErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            refused: false,
        }
    }

    pub fn kind(&self) -> RoutingErrorKind {
        self.kind
    }

    /// Whether asking again soon may reach an owner: everything but a
    /// partition the cluster does not have.
    pub fn is_retryable(&self) -> bool {
        self.kind != RoutingErrorKind::UnknownPartition
    }

    pub fn unreachable(addr: &str, cause: impl std::fmt::Display) -> Self {
        Self::new(
            RoutingErrorKind::Unreachable,
            format!("broker at {addr} unreachable: {cause}"),
        )
    }

    /// An owner that could not be connected to: [`Self::unreachable`],
    /// marked refused when the cause is a refused connection (nothing
    /// listens at `addr`; see [`Self::is_refused`]).
    pub fn connect_failed(addr: &str, cause: &(dyn std::error::Error + 'static)) -> Self {
        let mut e = Self::unreachable(addr, cause);
        e.refused = floe_metadata::probe::is_refused(cause);
        e
    }

    /// Whether the owner's address refused the connection: the process is
    /// gone (a timeout or a broken stream says nothing of the kind). The
    /// proxy reports it to the metadata service, which then moves the
    /// owner's partitions at once instead of one lease later.
    pub fn is_refused(&self) -> bool {
        self.refused
    }
}

/// A call to a partition's owner failed: it could not be reached
/// ([`RoutingError`]), or it answered with an error ([`BrokerError`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Routing(#[from] RoutingError),
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

impl CallError {
    /// Whether the partition's owner may answer soon where it could not now:
    /// a retryable routing failure, an owner still taking the partition
    /// over (NOT_OWNER), or one renewing its lease.
    pub fn owner_not_ready(&self) -> bool {
        match self {
            CallError::Routing(r) => r.is_retryable(),
            CallError::Broker(b) => {
                matches!(b.kind(), ErrorKind::NotOwner | ErrorKind::LeaseExpired)
            }
        }
    }
}

#[cfg(test)]
mod kind_tests {
    use super::ErrorKind;

    #[test]
    fn every_kind_travels_by_its_own_name() {
        for k in ErrorKind::ALL {
            assert_eq!(k.name(), format!("{k:?}"));
            assert_eq!(ErrorKind::from_name(k.name()), Some(k));
        }
        let mut names: Vec<_> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ErrorKind::ALL.len(), "each kind once");
        assert_eq!(ErrorKind::from_name("SomethingNewer"), None);
    }
}
