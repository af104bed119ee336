//! Storage errors: a kind callers can branch on, a message, and the cause.

use std::fmt;
use std::sync::Arc;

/// What went wrong, in terms a caller can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The object (or bucket) does not exist.
    NotFound,
    /// The endpoint failed or could not be reached. Another endpoint, or the
    /// same one later, may succeed.
    Unavailable,
    /// The operation passed its deadline and was abandoned.
    Timeout,
    /// Bytes read from the store do not match their format (bad checksum,
    /// impossible lengths, wrong magic).
    Corrupt,
    /// The caller handed in data that breaks the format's rules.
    InvalidInput,
    /// A configuration value is wrong; nothing will work until it is fixed.
    Config,
    /// An operation the backend does not support.
    Unsupported,
}

impl ErrorKind {
    /// Whether trying again (here or on another endpoint) can help.
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorKind::Unavailable | ErrorKind::Timeout)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            ErrorKind::NotFound => "not found",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::Config => "configuration",
            ErrorKind::Unsupported => "unsupported",
        };
        f.write_str(s)
    }
}

type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// An error of the storage layer. Cheap to clone, so that one failed read can
/// be reported to every waiter of the block cache.
#[derive(Debug, Clone, thiserror::Error)]
#[error("storage {kind} error: {message}")]
pub struct StorageError {
    kind: ErrorKind,
    message: String,
    #[source]
    source: Option<Cause>,
}

impl StorageError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind,
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }

    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }

    pub fn corrupt(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Corrupt, message)
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }

    /// Classify an `object_store` error.
    pub fn from_object_store(context: impl fmt::Display, err: object_store::Error) -> Self {
        use object_store::Error as E;
        let kind = match &err {
            E::NotFound { .. } => ErrorKind::NotFound,
            E::NotSupported { .. } | E::NotImplemented { .. } => ErrorKind::Unsupported,
            E::InvalidPath { .. } | E::UnknownConfigurationKey { .. } => ErrorKind::Config,
            E::PermissionDenied { .. } | E::Unauthenticated { .. } => ErrorKind::Unavailable,
            _ => ErrorKind::Unavailable,
        };
        Self::with_source(kind, format!("{context}: {err}"), err)
    }
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;
