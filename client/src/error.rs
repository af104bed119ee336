//! Errors of the client: what failed, a kind callers can branch on, and
//! whether sending the same request again can help.

use std::time::Duration;

use floe_proxy::codec::{CodecError, CodecErrorKind};
use floe_storage::batch::BatchError;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::StrBytes;

/// What went wrong, in terms a caller can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The broker could not be reached, or the connection broke. A new
    /// connection may succeed.
    Unavailable,
    /// No answer within the deadline; the connection is then in an unknown
    /// state and should be dropped.
    Timeout,
    /// The bytes on the wire were not what the protocol says (bad frame,
    /// undecodable body, an answer to another request).
    Protocol,
    /// The broker and this client share no version of an API.
    Unsupported,
    /// The topic or partition does not exist.
    NotFound,
    /// The broker answered with another Kafka error code.
    Broker,
    /// The caller asked for something impossible (e.g. a partition the
    /// topic does not have).
    InvalidInput,
    /// Records fetched from the broker do not decode, or records handed in
    /// could not be encoded.
    Corrupt,
    /// The broker refused this client's SASL login (or does not offer its
    /// mechanism); trying again with the same credentials will not help.
    Authentication,
}

/// An error of the Kafka client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// SASL authentication failed (the message never holds the password).
    #[error("SASL {mechanism} authentication failed: {message}")]
    Authentication {
        mechanism: &'static str,
        message: String,
    },
    /// The TCP connection could not be made.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// No answer within the deadline.
    #[error("{what}: no answer after {} ms", .after.as_millis())]
    Timeout { what: String, after: Duration },
    /// Writing a request failed.
    #[error("sending a {api:?} request: {source}")]
    Write {
        api: ApiKey,
        #[source]
        source: std::io::Error,
    },
    /// Encoding a request, or reading or decoding a response, failed.
    #[error("{api:?}: {source}")]
    Codec {
        api: ApiKey,
        #[source]
        source: CodecError,
    },
    /// The broker closed the connection instead of answering.
    #[error("the broker closed the connection before answering {api:?}")]
    Closed { api: ApiKey },
    /// A response answered another request than the one sent.
    #[error("{api:?}: the answer has correlation id {got}, the request had {expected}")]
    CorrelationMismatch {
        api: ApiKey,
        expected: i32,
        got: i32,
    },
    /// This client and the broker have no version of an API in common.
    #[error("{}", no_common_version(*.api_key, *.client, *.broker))]
    NoCommonVersion {
        api_key: i16,
        client: (i16, i16),
        broker: Option<(i16, i16)>,
    },
    /// The broker answered with a Kafka error code.
    #[error("{what}: {} ({}){}", kafka_error_name(*.error), .error.code(), message_suffix(.message))]
    Broker {
        what: String,
        error: ResponseError,
        message: Option<String>,
    },
    /// The broker's answer leaves out what was asked about.
    #[error("{what}")]
    MissingAnswer { what: String },
    /// What was waited for did not happen within the deadline (a new
    /// topic's partitions without leaders).
    #[error("{0}")]
    NotReady(String),
    /// The caller asked for something the topic or protocol does not allow.
    #[error("{0}")]
    InvalidInput(String),
    /// Record batches could not be built or decoded.
    #[error("{what}: {source}")]
    Records {
        what: String,
        #[source]
        source: BatchError,
    },
    /// A blocking task (batch encoding or decoding) did not finish.
    #[error("{what}: {source}")]
    Task {
        what: String,
        #[source]
        source: tokio::task::JoinError,
    },
}

impl ClientError {
    /// What went wrong, for callers that branch on it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Connect { .. } | Self::Write { .. } | Self::Closed { .. } => {
                ErrorKind::Unavailable
            }
            Self::Timeout { .. } | Self::NotReady(_) => ErrorKind::Timeout,
            // The connection broke while reading an answer.
            Self::Codec { source, .. } if source.kind() == CodecErrorKind::Io => {
                ErrorKind::Unavailable
            }
            Self::Codec { .. } | Self::CorrelationMismatch { .. } | Self::MissingAnswer { .. } => {
                ErrorKind::Protocol
            }
            Self::NoCommonVersion { .. } => ErrorKind::Unsupported,
            Self::Broker {
                error: ResponseError::UnknownTopicOrPartition | ResponseError::UnknownTopicId,
                ..
            } => ErrorKind::NotFound,
            Self::Broker { .. } => ErrorKind::Broker,
            Self::InvalidInput(_) => ErrorKind::InvalidInput,
            Self::Records { .. } | Self::Task { .. } => ErrorKind::Corrupt,
            Self::Authentication { .. } => ErrorKind::Authentication,
        }
    }

    /// Whether sending the same request again on the same connection may
    /// succeed: only a broker error Kafka marks as retriable (a leader
    /// moving, a partition not ready yet).
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Broker { error, .. } => error.is_retriable(),
            _ => false,
        }
    }

    /// The Kafka error the broker answered, if that is what this is.
    pub fn broker_error(&self) -> Option<ResponseError> {
        match self {
            Self::Broker { error, .. } => Some(*error),
            _ => None,
        }
    }
}

fn api_name(api_key: i16) -> String {
    match ApiKey::try_from(api_key) {
        Ok(k) => format!("{k:?}"),
        Err(()) => format!("api key {api_key}"),
    }
}

fn no_common_version(api_key: i16, client: (i16, i16), broker: Option<(i16, i16)>) -> String {
    let name = api_name(api_key);
    match broker {
        None => format!("the broker does not support {name}"),
        Some((lo, hi)) => format!(
            "{name}: the broker supports versions {lo}..={hi}, this client {}..={}",
            client.0, client.1
        ),
    }
}

fn message_suffix(message: &Option<String>) -> String {
    match message {
        Some(m) if !m.is_empty() => format!(": {m}"),
        _ => String::new(),
    }
}

/// The name Kafka gives an error code, e.g. `UNKNOWN_TOPIC_OR_PARTITION`.
pub fn kafka_error_name(error: ResponseError) -> String {
    if let ResponseError::Unknown(code) = error {
        return format!("UNKNOWN_ERROR_CODE_{code}");
    }
    // kafka-protocol displays the variant name, e.g. `UnknownTopicOrPartition`.
    let camel = error.to_string();
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// `Ok` for error code 0, else [`ClientError::Broker`] saying `what` failed.
pub fn check_code(
    code: i16,
    message: Option<&StrBytes>,
    what: impl FnOnce() -> String,
) -> Result<(), ClientError> {
    match ResponseError::try_from_code(code) {
        None => Ok(()),
        Some(error) => Err(ClientError::Broker {
            what: what(),
            error,
            message: message.map(|m| m.to_string()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_are_kafkas() {
        assert_eq!(
            kafka_error_name(ResponseError::UnknownTopicOrPartition),
            "UNKNOWN_TOPIC_OR_PARTITION"
        );
        assert_eq!(
            kafka_error_name(ResponseError::TopicAlreadyExists),
            "TOPIC_ALREADY_EXISTS"
        );
        assert_eq!(
            kafka_error_name(ResponseError::Unknown(999)),
            "UNKNOWN_ERROR_CODE_999"
        );
    }

    #[test]
    fn broker_errors_show_name_code_and_message() {
        let msg = StrBytes::from_static_str("Topic 't' already exists.");
        let err =
            check_code(36, Some(&msg), || "creating topic t".into()).expect_err("36 is an error");
        assert_eq!(
            err.to_string(),
            "creating topic t: TOPIC_ALREADY_EXISTS (36): Topic 't' already exists."
        );
        assert_eq!(err.kind(), ErrorKind::Broker);
        assert_eq!(err.broker_error(), Some(ResponseError::TopicAlreadyExists));
        assert!(check_code(0, None, String::new).is_ok());
    }

    #[test]
    fn an_empty_broker_message_is_left_out() {
        let empty = StrBytes::from_static_str("");
        let err = check_code(3, Some(&empty), || "topic t".into()).expect_err("3 is an error");
        assert_eq!(err.to_string(), "topic t: UNKNOWN_TOPIC_OR_PARTITION (3)");
    }

    #[test]
    fn unknown_topics_are_not_found_and_leader_moves_are_retriable() {
        let unknown = check_code(3, None, String::new).expect_err("an error");
        assert_eq!(unknown.kind(), ErrorKind::NotFound);
        let moved = check_code(ResponseError::NotLeaderOrFollower.code(), None, String::new)
            .expect_err("an error");
        assert!(moved.is_retriable());
        assert_eq!(moved.kind(), ErrorKind::Broker);
        let exists = check_code(36, None, String::new).expect_err("an error");
        assert!(!exists.is_retriable());
    }

    #[test]
    fn missing_versions_name_the_api() {
        let none = ClientError::NoCommonVersion {
            api_key: ApiKey::Fetch as i16,
            client: (4, 12),
            broker: None,
        };
        assert_eq!(none.to_string(), "the broker does not support Fetch");
        assert_eq!(none.kind(), ErrorKind::Unsupported);
        let old = ClientError::NoCommonVersion {
            api_key: ApiKey::Produce as i16,
            client: (3, 11),
            broker: Some((0, 2)),
        };
        assert_eq!(
            old.to_string(),
            "Produce: the broker supports versions 0..=2, this client 3..=11"
        );
        let unknown = ClientError::NoCommonVersion {
            api_key: 9999,
            client: (0, -1),
            broker: None,
        };
        assert_eq!(
            unknown.to_string(),
            "the broker does not support api key 9999"
        );
    }
}
