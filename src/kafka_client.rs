//! A small Kafka client for the `floe` CLI commands (`topic`, `produce`,
//! `consume`): one TCP connection to a bootstrap address, ApiVersions
//! negotiation, and typed request/response round trips.
//!
//! Frames are written with `floe_proxy::codec::encode_request` and read with
//! its `read_frame`; response bodies are decoded through its allocation
//! guard. One request is in flight at a time, and every response's
//! correlation id is checked against the request's.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use bytes::{Buf, Bytes};
use clap::Args;
use floe_proxy::codec::{self, CodecError};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse,
    RequestHeader, RequestKind, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Request, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The versions this client builds and reads correctly, per API. The version
/// used is the highest one both this list and the broker support.
const CLIENT_VERSIONS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ApiVersions, 0, 3),
    // From v4 the request says whether to auto-create topics (never, here).
    (ApiKey::Metadata, 4, 12),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    // Record batches (magic 2) need Produce v3 and Fetch v4; from Produce v13
    // and Fetch v13 topics are named by id, which this client does not do.
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::ListOffsets, 1, 8),
];

const CLIENT_ID: &str = "floe-cli";

/// How much longer than the request timeout the client waits for an answer,
/// so that requests carrying the timeout to the broker get its reply.
const ANSWER_GRACE: Duration = Duration::from_secs(5);

/// Where the broker is, and how long to wait for it.
#[derive(Debug, Clone, Args)]
pub struct BootstrapArgs {
    /// Kafka bootstrap address (host:port).
    #[arg(long, env = "FLOE_BOOTSTRAP", default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// Deadline of connecting and of one request, in milliseconds (also sent
    /// to the broker as the timeout of requests that carry one).
    #[arg(long, env = "FLOE_REQUEST_TIMEOUT_MS", default_value_t = 30_000)]
    pub request_timeout_ms: u64,
}

impl BootstrapArgs {
    /// Connects and negotiates versions.
    pub async fn connect(&self) -> Result<KafkaClient, ClientError> {
        KafkaClient::connect(
            &self.bootstrap,
            Duration::from_millis(self.request_timeout_ms),
        )
        .await
    }
}

/// What went wrong talking to the broker.
#[derive(Debug)]
pub enum ClientError {
    /// The TCP connection could not be made.
    Connect {
        addr: String,
        source: std::io::Error,
    },
    /// No answer within the deadline.
    Timeout { what: String, after: Duration },
    /// Writing a request failed.
    Write { api: ApiKey, source: std::io::Error },
    /// Encoding a request, or reading or decoding a response, failed.
    Codec { api: ApiKey, source: CodecError },
    /// The broker closed the connection instead of answering.
    Closed { api: ApiKey },
    /// A response answered another request than the one sent.
    CorrelationMismatch {
        api: ApiKey,
        expected: i32,
        got: i32,
    },
    /// This client and the broker have no version of an API in common.
    NoCommonVersion {
        api_key: i16,
        client: (i16, i16),
        broker: Option<(i16, i16)>,
    },
    /// The broker answered with a Kafka error code.
    Broker {
        what: String,
        error: ResponseError,
        message: Option<String>,
    },
}

impl ClientError {
    /// Whether sending the same request again may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Broker { error, .. } => error.is_retriable(),
            _ => false,
        }
    }
}

fn api_name(api_key: i16) -> String {
    match ApiKey::try_from(api_key) {
        Ok(k) => format!("{k:?}"),
        Err(()) => format!("api key {api_key}"),
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Connect { addr, source } => write!(f, "cannot connect to {addr}: {source}"),
            Self::Timeout { what, after } => {
                write!(f, "{what}: no answer after {} ms", after.as_millis())
            }
            Self::Write { api, source } => write!(f, "sending a {api:?} request: {source}"),
            Self::Codec { api, source } => write!(f, "{api:?}: {source}"),
            Self::Closed { api } => {
                write!(
                    f,
                    "the broker closed the connection before answering {api:?}"
                )
            }
            Self::CorrelationMismatch { api, expected, got } => write!(
                f,
                "{api:?}: the answer has correlation id {got}, the request had {expected}"
            ),
            Self::NoCommonVersion {
                api_key,
                client,
                broker,
            } => {
                let name = api_name(*api_key);
                match broker {
                    None => write!(f, "the broker does not support {name}"),
                    Some((lo, hi)) => write!(
                        f,
                        "{name}: the broker supports versions {lo}..={hi}, this client {}..={}",
                        client.0, client.1
                    ),
                }
            }
            Self::Broker {
                what,
                error,
                message,
            } => {
                write!(f, "{what}: {} ({})", kafka_error_name(*error), error.code())?;
                match message {
                    Some(m) if !m.is_empty() => write!(f, ": {m}"),
                    _ => Ok(()),
                }
            }
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Connect { source, .. } | Self::Write { source, .. } => Some(source),
            Self::Codec { source, .. } => Some(source),
            _ => None,
        }
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

/// A topic name as kafka-protocol wants it.
pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

/// One connection to a Kafka broker, with the versions negotiated.
#[derive(Debug)]
pub struct KafkaClient {
    addr: String,
    stream: TcpStream,
    timeout: Duration,
    next_correlation_id: i32,
    /// The broker's version range per api key, from ApiVersions.
    broker_versions: HashMap<i16, (i16, i16)>,
}

impl KafkaClient {
    /// Connects to `addr` (host:port) and asks the broker which versions it
    /// supports: ApiVersions v3, then v0 if the broker refuses v3.
    pub async fn connect(addr: &str, timeout: Duration) -> Result<Self, ClientError> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ClientError::Timeout {
                what: format!("connecting to {addr}"),
                after: timeout,
            })?
            .map_err(|source| ClientError::Connect {
                addr: addr.to_owned(),
                source,
            })?;
        stream
            .set_nodelay(true)
            .map_err(|source| ClientError::Connect {
                addr: addr.to_owned(),
                source,
            })?;
        let mut client = Self {
            addr: addr.to_owned(),
            stream,
            timeout,
            next_correlation_id: 1,
            broker_versions: HashMap::new(),
        };
        client.negotiate().await?;
        Ok(client)
    }

    /// The request timeout, as sent to the broker in requests that carry one.
    pub fn timeout_ms(&self) -> i32 {
        i32::try_from(self.timeout.as_millis()).unwrap_or(i32::MAX)
    }

    async fn negotiate(&mut self) -> Result<(), ClientError> {
        let response = match self.api_versions(3).await? {
            Some(r) => r,
            // The broker does not know v3: it answered in v0, so ask in v0.
            None => match self.api_versions(0).await? {
                Some(r) => r,
                None => {
                    return Err(ClientError::Broker {
                        what: "ApiVersions v0".into(),
                        error: ResponseError::UnsupportedVersion,
                        message: None,
                    });
                }
            },
        };
        check_code(response.error_code, None, || "ApiVersions".into())?;
        self.broker_versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(())
    }

    /// One ApiVersions round trip; `None` if the broker answered
    /// UNSUPPORTED_VERSION (its answer is then in v0, whatever was asked).
    async fn api_versions(
        &mut self,
        version: i16,
    ) -> Result<Option<ApiVersionsResponse>, ClientError> {
        let mut req = ApiVersionsRequest::default();
        if version >= 3 {
            req.client_software_name = StrBytes::from_static_str(CLIENT_ID);
            req.client_software_version = StrBytes::from_static_str(env!("CARGO_PKG_VERSION"));
        }
        let body = self
            .round_trip(ApiKey::ApiVersions, version, req.into())
            .await?;
        // The error code comes first in every version.
        let code = body.clone().try_get_i16().unwrap_or(0);
        if code == ResponseError::UnsupportedVersion.code() {
            return Ok(None);
        }
        decode_body(ApiKey::ApiVersions, body, version).map(Some)
    }

    /// The version to send `R` at: the highest this client and the broker
    /// both support.
    pub fn version<R: Request>(&self) -> Result<i16, ClientError> {
        let api = api_key::<R>()?;
        let valid = api.valid_versions();
        let client = CLIENT_VERSIONS
            .iter()
            .find(|(k, _, _)| *k == api)
            .map(|(_, lo, hi)| ((*lo).max(valid.min), (*hi).min(valid.max)))
            .unwrap_or((valid.min, valid.max));
        let broker = self.broker_versions.get(&R::KEY).copied();
        let lo = client.0.max(broker.map_or(i16::MAX, |b| b.0));
        let hi = client.1.min(broker.map_or(i16::MIN, |b| b.1));
        if lo > hi {
            return Err(ClientError::NoCommonVersion {
                api_key: R::KEY,
                client,
                broker,
            });
        }
        Ok(hi)
    }

    /// Sends `req` at `version` and returns the broker's answer.
    pub async fn send<R>(&mut self, version: i16, req: R) -> Result<R::Response, ClientError>
    where
        R: Request,
        RequestKind: From<R>,
    {
        let api = api_key::<R>()?;
        let body = self.round_trip(api, version, req.into()).await?;
        decode_body(api, body, version)
    }

    /// Sends `req` at `version` without waiting for an answer (Produce with
    /// acks=0, which the broker does not answer).
    pub async fn send_only<R>(&mut self, version: i16, req: R) -> Result<(), ClientError>
    where
        R: Request,
        RequestKind: From<R>,
    {
        let api = api_key::<R>()?;
        self.write_request(api, version, req.into()).await?;
        Ok(())
    }

    /// Metadata of the named topics, or of every topic for `None`. Never
    /// asks the broker to create a topic.
    pub async fn metadata(
        &mut self,
        topics: Option<&[&str]>,
    ) -> Result<MetadataResponse, ClientError> {
        let version = self.version::<MetadataRequest>()?;
        let mut req = MetadataRequest::default();
        req.allow_auto_topic_creation = false;
        req.topics = topics.map(|names| {
            names
                .iter()
                .map(|n| MetadataRequestTopic::default().with_name(Some(topic_name(n))))
                .collect()
        });
        self.send(version, req).await
    }

    /// Metadata of one topic; an error if the broker reports one for it
    /// (UNKNOWN_TOPIC_OR_PARTITION when it does not exist).
    pub async fn topic(&mut self, name: &str) -> Result<MetadataResponseTopic, ClientError> {
        let response = self.metadata(Some(&[name])).await?;
        let found = response
            .topics
            .into_iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name));
        match found {
            Some(t) => {
                check_code(t.error_code, None, || format!("topic {name}"))?;
                Ok(t)
            }
            None => Err(ClientError::Broker {
                what: format!("topic {name}"),
                error: ResponseError::UnknownTopicOrPartition,
                message: Some("not in the metadata response".into()),
            }),
        }
    }

    /// Writes one request; returns its correlation id.
    async fn write_request(
        &mut self,
        api: ApiKey,
        version: i16,
        body: RequestKind,
    ) -> Result<i32, ClientError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1).max(1);
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
        let frame = codec::encode_request(&header, &body)
            .map_err(|source| ClientError::Codec { api, source })?;
        let write = async {
            self.stream.write_all(&frame).await?;
            self.stream.flush().await
        };
        tokio::time::timeout(self.timeout, write)
            .await
            .map_err(|_| ClientError::Timeout {
                what: format!("sending {api:?} to {}", self.addr),
                after: self.timeout,
            })?
            .map_err(|source| ClientError::Write { api, source })?;
        Ok(correlation_id)
    }

    /// Sends a request and returns the response body (after the header).
    async fn round_trip(
        &mut self,
        api: ApiKey,
        version: i16,
        body: RequestKind,
    ) -> Result<Bytes, ClientError> {
        let expected = self.write_request(api, version, body).await?;
        let wait = self.timeout + ANSWER_GRACE;
        let frame = tokio::time::timeout(
            wait,
            codec::read_frame(&mut self.stream, codec::DEFAULT_MAX_FRAME),
        )
        .await
        .map_err(|_| ClientError::Timeout {
            what: format!("{api:?} to {}", self.addr),
            after: wait,
        })?
        .map_err(|source| ClientError::Codec { api, source })?
        .ok_or(ClientError::Closed { api })?;
        let mut rest = frame;
        let header = ResponseHeader::decode(&mut rest, api.response_header_version(version))
            .map_err(|e| ClientError::Codec {
                api,
                source: CodecError::Malformed {
                    what: format!("{api:?} v{version} response header"),
                    reason: format!("{e:#}"),
                },
            })?;
        if header.correlation_id != expected {
            return Err(ClientError::CorrelationMismatch {
                api,
                expected,
                got: header.correlation_id,
            });
        }
        Ok(rest)
    }
}

fn api_key<R: Request>() -> Result<ApiKey, ClientError> {
    ApiKey::try_from(R::KEY).map_err(|()| ClientError::NoCommonVersion {
        api_key: R::KEY,
        client: (0, -1),
        broker: None,
    })
}

fn decode_body<T: Decodable>(api: ApiKey, body: Bytes, version: i16) -> Result<T, ClientError> {
    codec::decode_guarded::<T>(body, version).map_err(|source| ClientError::Codec { api, source })
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
        assert!(check_code(0, None, String::new).is_ok());
    }

    #[test]
    fn client_versions_are_within_what_kafka_protocol_encodes() {
        for (api, lo, hi) in CLIENT_VERSIONS {
            let valid = api.valid_versions();
            assert!(lo <= hi, "{api:?}");
            assert!(*lo >= valid.min && *hi <= valid.max, "{api:?} {lo}..={hi}");
        }
    }

    /// A fake broker: answers each request with `answer(request)`, until the
    /// client hangs up. `answer` returns the response, the correlation id to
    /// put in it and the version to encode it at.
    async fn fake_broker(
        answer: impl Fn(&codec::DecodedRequest) -> (kafka_protocol::messages::ResponseKind, i32, i16)
        + Send
        + 'static,
    ) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding a port");
        let addr = listener.local_addr().expect("a local address").to_string();
        tokio::spawn(async move {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            while let Ok(Some(frame)) = codec::read_frame(&mut conn, codec::DEFAULT_MAX_FRAME).await
            {
                let req = codec::decode_request(frame).expect("a valid request");
                let (body, correlation_id, version) = answer(&req);
                let out = codec::encode_response(req.api_key, version, correlation_id, &body)
                    .expect("encoding the answer");
                if conn.write_all(&out).await.is_err() {
                    return;
                }
            }
        });
        addr
    }

    fn versions(error_code: i16, keys: &[(ApiKey, i16, i16)]) -> ApiVersionsResponse {
        let mut r = ApiVersionsResponse::default();
        r.error_code = error_code;
        r.api_keys = keys
            .iter()
            .map(|(k, lo, hi)| {
                kafka_protocol::messages::api_versions_response::ApiVersion::default()
                    .with_api_key(*k as i16)
                    .with_min_version(*lo)
                    .with_max_version(*hi)
            })
            .collect();
        r
    }

    #[tokio::test]
    async fn falls_back_to_api_versions_v0_and_picks_the_highest_common_version() {
        use kafka_protocol::messages::{FetchRequest, ProduceRequest, ResponseKind};
        let addr = fake_broker(|req| {
            let id = req.header.correlation_id;
            if req.version >= 3 {
                // An old broker: refuses v3, answering in v0 what it knows.
                let body = versions(
                    ResponseError::UnsupportedVersion.code(),
                    &[(ApiKey::ApiVersions, 0, 2)],
                );
                return (ResponseKind::ApiVersions(body), id, 0);
            }
            let body = versions(
                0,
                &[
                    (ApiKey::ApiVersions, 0, 2),
                    (ApiKey::Metadata, 0, 9),
                    (ApiKey::Produce, 0, 2),
                ],
            );
            (ResponseKind::ApiVersions(body), id, req.version)
        })
        .await;
        let client = KafkaClient::connect(&addr, Duration::from_secs(5))
            .await
            .expect("negotiates");
        assert_eq!(client.version::<MetadataRequest>().ok(), Some(9));
        // The broker's Produce stops below the record batch format.
        let err = client
            .version::<ProduceRequest>()
            .expect_err("no common Produce version");
        assert!(err.to_string().contains("versions 0..=2"), "{err}");
        let err = client
            .version::<FetchRequest>()
            .expect_err("no Fetch at all");
        assert_eq!(err.to_string(), "the broker does not support Fetch");
    }

    #[tokio::test]
    async fn an_answer_to_another_request_is_an_error() {
        use kafka_protocol::messages::ResponseKind;
        let addr = fake_broker(|req| {
            let body = versions(0, &[(ApiKey::ApiVersions, 0, 3)]);
            (
                ResponseKind::ApiVersions(body),
                req.header.correlation_id + 100,
                req.version,
            )
        })
        .await;
        let err = KafkaClient::connect(&addr, Duration::from_secs(5))
            .await
            .expect_err("the correlation id is wrong");
        assert!(
            matches!(err, ClientError::CorrelationMismatch { .. }),
            "{err}"
        );
    }
}
