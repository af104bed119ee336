//! The indexer's errors, with kinds callers (and the HTTP API) branch on.

use floe_metadata::MetaError;
use floe_storage::StorageError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The topic does not exist.
    UnknownTopic,
    /// A request parameter is wrong (the caller's doing).
    InvalidRequest,
    /// The export state moved under us (another generation, a reset): reload.
    Conflict,
    /// Stored bytes do not decode.
    Corrupt,
    /// The store or the metadata service failed; a later round retries.
    Unavailable,
}

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct IndexerError {
    pub kind: ErrorKind,
    pub message: String,
}

pub type Result<T, E = IndexerError> = std::result::Result<T, E>;

impl IndexerError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub fn corrupt(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Corrupt, message)
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidRequest, message)
    }
}

impl From<MetaError> for IndexerError {
    fn from(e: MetaError) -> Self {
        use floe_metadata::ErrorKind as K;
        let kind = match e.kind() {
            K::UnknownTopic | K::UnknownPartition => ErrorKind::UnknownTopic,
            K::ExportConflict => ErrorKind::Conflict,
            K::InvalidRequest | K::InvalidConfig => ErrorKind::InvalidRequest,
            _ => ErrorKind::Unavailable,
        };
        Self::new(kind, format!("metadata: {e}"))
    }
}

impl From<StorageError> for IndexerError {
    fn from(e: StorageError) -> Self {
        Self::new(ErrorKind::Unavailable, format!("store: {e}"))
    }
}
