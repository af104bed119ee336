//! One connection to a Kafka broker: TCP to a bootstrap address, ApiVersions
//! negotiation, and typed request/response round trips.
//!
//! Frames are written with `floe_proxy::codec::encode_request` and read with
//! its `read_frame`; response bodies are decoded through its allocation
//! guard, so a hostile or broken broker cannot make the client allocate
//! more than the bytes it sent. One request is in flight at a time, and
//! every response's correlation id is checked against the request's.

use std::collections::HashMap;
use std::time::Duration;

use bytes::{Buf, Bytes};
use floe_proxy::codec::{self, CodecError};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, RequestKind, ResponseHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Request, StrBytes};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::error::{ClientError, check_code};
use crate::security::ClientSecurity;

/// The versions this client builds and reads correctly, per API. The version
/// used is the highest one both this list and the broker support.
pub(crate) const CLIENT_VERSIONS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::SaslHandshake, 1, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
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
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::InitProducerId, 0, 4),
    // Groups: one group per request (OffsetFetch v8 batches groups).
    // v5: the group's type (classic, consumer, share).
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::OffsetFetch, 1, 7),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    // Share groups (KIP-932), when the broker serves them.
    (ApiKey::ShareGroupDescribe, 1, 1),
    (ApiKey::DescribeShareGroupOffsets, 0, 0),
    (ApiKey::AlterShareGroupOffsets, 0, 0),
    (ApiKey::DeleteShareGroupOffsets, 0, 0),
    // Transactions and producers (`floe transactions`, `floe producers`).
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    // SCRAM users (`floe user`).
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
];

/// The client id sent in every request header.
pub const CLIENT_ID: &str = "floe-cli";

/// How much longer than the request timeout the client waits for an answer,
/// so that requests carrying the timeout to the broker get its reply.
const ANSWER_GRACE: Duration = Duration::from_secs(5);

/// A topic name as kafka-protocol wants it.
pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

/// A connection's bytes: plain TCP, or TLS over it.
#[derive(Debug)]
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// One connection to a Kafka broker, with the versions negotiated.
#[derive(Debug)]
pub struct KafkaClient {
    addr: String,
    stream: Stream,
    /// TLS and SASL of this connection, and of those it opens to others.
    security: Arc<ClientSecurity>,
    timeout: Duration,
    next_correlation_id: i32,
    /// The broker's version range per api key, from ApiVersions.
    broker_versions: HashMap<i16, (i16, i16)>,
}

impl KafkaClient {
    /// Connects to `addr` (host:port) and asks the broker which versions it
    /// supports: ApiVersions v3, then v0 if the broker refuses v3. `timeout`
    /// bounds connecting and each request; it is also sent to the broker in
    /// requests that carry a timeout.
    pub async fn connect(addr: &str, timeout: Duration) -> Result<Self, ClientError> {
        Self::connect_with(addr, timeout, Arc::new(ClientSecurity::plaintext())).await
    }

    /// [`KafkaClient::connect`] with TLS and SASL as `security` says: the
    /// TLS handshake after connecting, the SASL login after ApiVersions.
    pub async fn connect_with(
        addr: &str,
        timeout: Duration,
        security: Arc<ClientSecurity>,
    ) -> Result<Self, ClientError> {
        let stream = connect_step(addr, timeout, "connecting to", TcpStream::connect(addr)).await?;
        stream
            .set_nodelay(true)
            .map_err(|source| ClientError::Connect {
                addr: addr.to_owned(),
                source,
            })?;
        let stream = match &security.tls {
            None => Stream::Plain(stream),
            Some(tls) => {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                let name = security.server_name(host)?;
                let connector = tokio_rustls::TlsConnector::from(tls.clone());
                let tls = connect_step(
                    addr,
                    timeout,
                    "the TLS handshake with",
                    connector.connect(name, stream),
                )
                .await?;
                Stream::Tls(Box::new(tls))
            }
        };
        let mut client = Self {
            addr: addr.to_owned(),
            stream,
            security,
            timeout,
            next_correlation_id: 1,
            broker_versions: HashMap::new(),
        };
        client.negotiate().await?;
        client.log_in().await?;
        Ok(client)
    }

    /// A connection to another broker with this one's security.
    pub async fn connect_to(&self, addr: &str) -> Result<KafkaClient, ClientError> {
        KafkaClient::connect_with(addr, self.timeout, self.security.clone()).await
    }

    /// SASL, when the security asks for it: SaslHandshake v1, then the
    /// mechanism's messages in SaslAuthenticate.
    async fn log_in(&mut self) -> Result<(), ClientError> {
        let Some(login) = self.security.sasl.clone() else {
            return Ok(());
        };
        let failed = |message: String| ClientError::Authentication {
            mechanism: login.mechanism(),
            message,
        };
        let v = self.version::<SaslHandshakeRequest>()?;
        let hs = self
            .send(
                v,
                SaslHandshakeRequest::default()
                    .with_mechanism(StrBytes::from_static_str(login.mechanism())),
            )
            .await?;
        if hs.error_code != 0 {
            let offered: Vec<String> = hs.mechanisms.iter().map(|m| m.to_string()).collect();
            return Err(failed(format!(
                "the broker does not offer {} (it offers {})",
                login.mechanism(),
                offered.join(", ")
            )));
        }
        // The messages of the mechanism: the client's first, then its
        // answer to each of the server's.
        let mut scram = login.scram.map(|mech| {
            floe_proxy::sasl::scram::ScramClient::new(mech, &login.username, &login.password)
        });
        let mut message = match &mut scram {
            None => format!("\0{}\0{}", login.username, login.password).into_bytes(),
            Some(s) => s.client_first(),
        };
        let v = self.version::<SaslAuthenticateRequest>()?;
        loop {
            let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message));
            let r = self.send(v, req).await?;
            if r.error_code != 0 {
                return Err(failed(
                    r.error_message.map(|m| m.to_string()).unwrap_or_default(),
                ));
            }
            match &mut scram {
                // PLAIN: one message.
                None => break,
                Some(s) if s.awaits_server_final() => {
                    s.verify_server_final(&r.auth_bytes)
                        .map_err(|e| failed(e.detail))?;
                    break;
                }
                Some(s) => {
                    message = s
                        .client_final(&r.auth_bytes)
                        .map_err(|e| failed(e.detail))?
                }
            }
        }
        Ok(())
    }

    /// The address this client connected to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The request timeout in ms, as sent to the broker in requests that
    /// carry one.
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

/// One step of opening a connection (`what` `addr`), within `timeout`.
async fn connect_step<T>(
    addr: &str,
    timeout: Duration,
    what: &str,
    step: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, ClientError> {
    tokio::time::timeout(timeout, step)
        .await
        .map_err(|_| ClientError::Timeout {
            what: format!("{what} {addr}"),
            after: timeout,
        })?
        .map_err(|source| ClientError::Connect {
            addr: addr.to_owned(),
            source,
        })
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
    use kafka_protocol::messages::{FetchRequest, MetadataRequest, ProduceRequest, ResponseKind};

    use super::*;
    use crate::error::ErrorKind;
    use crate::test_support::{fake_broker, versions};

    #[test]
    fn client_versions_are_within_what_kafka_protocol_encodes() {
        for (api, lo, hi) in CLIENT_VERSIONS {
            let valid = api.valid_versions();
            assert!(lo <= hi, "{api:?}");
            assert!(*lo >= valid.min && *hi <= valid.max, "{api:?} {lo}..={hi}");
        }
    }

    #[tokio::test]
    async fn falls_back_to_api_versions_v0_and_picks_the_highest_common_version() {
        let addr = fake_broker(|req| {
            let id = req.header.correlation_id;
            if req.version >= 3 {
                // An old broker: refuses v3, answering in v0 what it knows.
                let body = versions(
                    ResponseError::UnsupportedVersion.code(),
                    &[(ApiKey::ApiVersions, 0, 2)],
                );
                return Some((ResponseKind::ApiVersions(body), id, 0));
            }
            let body = versions(
                0,
                &[
                    (ApiKey::ApiVersions, 0, 2),
                    (ApiKey::Metadata, 0, 9),
                    (ApiKey::Produce, 0, 2),
                ],
            );
            Some((ResponseKind::ApiVersions(body), id, req.version))
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
        assert_eq!(err.kind(), ErrorKind::Unsupported);
    }

    #[tokio::test]
    async fn an_answer_to_another_request_is_an_error() {
        let addr = fake_broker(|req| {
            let body = versions(0, &[(ApiKey::ApiVersions, 0, 3)]);
            Some((
                ResponseKind::ApiVersions(body),
                req.header.correlation_id + 100,
                req.version,
            ))
        })
        .await;
        let err = KafkaClient::connect(&addr, Duration::from_secs(5))
            .await
            .expect_err("the correlation id is wrong");
        assert!(
            matches!(err, ClientError::CorrelationMismatch { .. }),
            "{err}"
        );
        assert_eq!(err.kind(), ErrorKind::Protocol);
    }

    #[tokio::test]
    async fn a_refused_connection_is_unavailable() {
        // Bind and drop: nothing listens on the port afterwards.
        let addr = {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("binding a port");
            l.local_addr().expect("a local address").to_string()
        };
        let err = KafkaClient::connect(&addr, Duration::from_secs(5))
            .await
            .expect_err("nothing listens");
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert!(
            err.to_string()
                .starts_with(&format!("cannot connect to {addr}")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_broker_that_hangs_up_is_unavailable() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding a port");
        let addr = listener.local_addr().expect("a local address").to_string();
        tokio::spawn(async move {
            // Accept, then close without answering.
            let _ = listener.accept().await;
        });
        let err = KafkaClient::connect(&addr, Duration::from_secs(5))
            .await
            .expect_err("no answer");
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    }
}
