//! The console API's errors: an HTTP status and a JSON body with a kind the
//! page can act on and a sentence a person can read.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// What went wrong, as the page tells it apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No principal: a token is needed (401).
    Unauthenticated,
    /// The principal may not describe it (403).
    Denied,
    /// No such topic or group (404).
    NotFound,
    /// A parameter out of range or malformed, or an action not confirmed
    /// (400).
    Invalid,
    /// The action does not fit the resource's state: a topic that exists, a
    /// group with live members (409).
    Conflict,
    /// Floe could not answer now (503): the metadata service or an owner.
    Unavailable,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Unauthenticated => "unauthenticated",
            Kind::Denied => "denied",
            Kind::NotFound => "not_found",
            Kind::Invalid => "invalid",
            Kind::Conflict => "conflict",
            Kind::Unavailable => "unavailable",
        }
    }

    fn status(self) -> StatusCode {
        match self {
            Kind::Unauthenticated => StatusCode::UNAUTHORIZED,
            Kind::Denied => StatusCode::FORBIDDEN,
            Kind::NotFound => StatusCode::NOT_FOUND,
            Kind::Invalid => StatusCode::BAD_REQUEST,
            Kind::Conflict => StatusCode::CONFLICT,
            Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// An answer refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub kind: Kind,
    pub message: String,
}

impl ApiError {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        ApiError {
            kind,
            message: message.into(),
        }
    }

    /// The error a Kafka error code stands for, about `what`.
    pub fn from_code(code: i16, what: &str) -> Self {
        use kafka_protocol::ResponseError as E;
        let kind = match E::try_from_code(code) {
            Some(E::TopicAuthorizationFailed)
            | Some(E::GroupAuthorizationFailed)
            | Some(E::ClusterAuthorizationFailed) => Kind::Denied,
            Some(E::UnknownTopicOrPartition) | Some(E::GroupIdNotFound) => Kind::NotFound,
            Some(E::InvalidRequest)
            | Some(E::InvalidTopicException)
            | Some(E::InvalidPartitions)
            | Some(E::InvalidConfig)
            | Some(E::InvalidReplicationFactor)
            | Some(E::PolicyViolation)
            | Some(E::InvalidCommitOffsetSize) => Kind::Invalid,
            Some(E::TopicAlreadyExists)
            | Some(E::NonEmptyGroup)
            | Some(E::UnknownMemberId)
            | Some(E::IllegalGeneration)
            | Some(E::RebalanceInProgress) => Kind::Conflict,
            _ => Kind::Unavailable,
        };
        let name =
            E::try_from_code(code).map_or_else(|| format!("error {code}"), |e| format!("{e:?}"));
        let message = match kind {
            Kind::Denied => format!("{what}: not allowed ({name})"),
            Kind::NotFound => format!("{what}: not found"),
            _ => format!("{what}: {name}"),
        };
        ApiError { kind, message }
    }

    /// [`ApiError::from_code`] with the answer's own message when it has one.
    pub fn from_answer(code: i16, message: Option<&str>, what: &str) -> Self {
        let mut e = ApiError::from_code(code, what);
        if let Some(m) = message.filter(|m| !m.is_empty()) {
            e.message = format!("{}: {m}", e.message);
        }
        e
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message, "kind": self.kind.name() });
        (self.kind.status(), axum::Json(body)).into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
