//! The broker's internal RPC: protobuf over HTTP/2 (h2c), one route per
//! call. Record bytes travel as protobuf `bytes` fields decoded into
//! [`bytes::Bytes`], so they are sliced from the received buffer, not copied.
//!
//! A produce answers in two steps on one stream: the response headers as
//! soon as the batches are sequenced (so a proxy can keep a connection's
//! produce requests in order without waiting for the flush), the body once
//! the acknowledgement level is met.
//!
//! [`BrokerHandle`] is what the proxy calls: the broker in this process, or
//! a client of one in another.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prost::Message;

use floe_storage::{PartitionKey, TopicId};

use crate::broker::{Acks, Broker, FetchData, OffsetAnswer, OffsetSpec, PendingProduce, ProduceOk};
use crate::error::{BrokerError, ErrorKind, Result};

/// Messages of the internal RPC.
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Partition {
        #[prost(string, tag = "1")]
        pub topic_id: String,
        #[prost(uint32, tag = "2")]
        pub partition: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Error {
        #[prost(string, tag = "1")]
        pub kind: String,
        #[prost(string, tag = "2")]
        pub message: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProduceRequest {
        #[prost(message, optional, tag = "1")]
        pub partition: Option<Partition>,
        #[prost(sint32, tag = "2")]
        pub acks: i32,
        #[prost(bytes = "bytes", tag = "3")]
        pub records: bytes::Bytes,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProduceResponse {
        #[prost(message, optional, tag = "1")]
        pub error: Option<Error>,
        #[prost(int64, tag = "2")]
        pub base_offset: i64,
        #[prost(int64, tag = "3")]
        pub log_start_offset: i64,
        #[prost(int64, tag = "4")]
        pub log_append_time: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct FetchRequest {
        #[prost(message, optional, tag = "1")]
        pub partition: Option<Partition>,
        #[prost(int64, tag = "2")]
        pub offset: i64,
        #[prost(uint64, tag = "3")]
        pub max_bytes: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct FetchResponse {
        #[prost(message, optional, tag = "1")]
        pub error: Option<Error>,
        #[prost(int64, tag = "2")]
        pub high_watermark: i64,
        #[prost(int64, tag = "3")]
        pub log_start_offset: i64,
        #[prost(bytes = "bytes", repeated, tag = "4")]
        pub batches: Vec<bytes::Bytes>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WaitRequest {
        #[prost(message, optional, tag = "1")]
        pub partition: Option<Partition>,
        #[prost(int64, tag = "2")]
        pub offset: i64,
        #[prost(uint64, tag = "3")]
        pub timeout_ms: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListOffsetRequest {
        #[prost(message, optional, tag = "1")]
        pub partition: Option<Partition>,
        /// Kafka's encoding: -1 latest, -2 earliest, -3 max timestamp, else a timestamp.
        #[prost(int64, tag = "2")]
        pub spec: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListOffsetResponse {
        #[prost(message, optional, tag = "1")]
        pub error: Option<Error>,
        #[prost(int64, tag = "2")]
        pub offset: i64,
        #[prost(int64, tag = "3")]
        pub timestamp: i64,
        #[prost(int64, tag = "4")]
        pub epoch: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DeleteRecordsRequest {
        #[prost(message, optional, tag = "1")]
        pub partition: Option<Partition>,
        #[prost(int64, tag = "2")]
        pub offset: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DeleteRecordsResponse {
        #[prost(message, optional, tag = "1")]
        pub error: Option<Error>,
        #[prost(int64, tag = "2")]
        pub low_watermark: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Empty {}
}

fn kind_name(k: ErrorKind) -> &'static str {
    match k {
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
        ErrorKind::InvalidRequest => "InvalidRequest",
        ErrorKind::OutOfOrderSequence => "OutOfOrderSequence",
        ErrorKind::InvalidProducerEpoch => "InvalidProducerEpoch",
    }
}

fn kind_from(name: &str) -> ErrorKind {
    [
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
        ErrorKind::InvalidRequest,
        ErrorKind::OutOfOrderSequence,
        ErrorKind::InvalidProducerEpoch,
    ]
    .into_iter()
    .find(|k| kind_name(*k) == name)
    .unwrap_or(ErrorKind::Metadata)
}

fn to_proto(e: &BrokerError) -> proto::Error {
    proto::Error {
        kind: kind_name(e.kind()).to_string(),
        message: e.to_string(),
    }
}

fn from_proto(e: proto::Error) -> BrokerError {
    BrokerError::new(kind_from(&e.kind), e.message)
}

fn key_of(p: Option<&proto::Partition>) -> Result<PartitionKey> {
    let p = p.ok_or_else(|| BrokerError::new(ErrorKind::InvalidRequest, "no partition given"))?;
    let id = uuid::Uuid::parse_str(&p.topic_id)
        .map_err(|e| BrokerError::new(ErrorKind::InvalidRequest, format!("bad topic id: {e}")))?;
    Ok(PartitionKey::new(TopicId(id), p.partition))
}

fn part(key: &PartitionKey) -> proto::Partition {
    proto::Partition {
        topic_id: key.topic.0.to_string(),
        partition: key.partition,
    }
}

fn spec_to_i64(s: OffsetSpec) -> i64 {
    match s {
        OffsetSpec::Latest => -1,
        OffsetSpec::Earliest => -2,
        OffsetSpec::MaxTimestamp => -3,
        OffsetSpec::Timestamp(t) => t,
    }
}

fn spec_from_i64(v: i64) -> Result<OffsetSpec> {
    Ok(match v {
        -1 => OffsetSpec::Latest,
        -2 => OffsetSpec::Earliest,
        -3 => OffsetSpec::MaxTimestamp,
        t if t >= 0 => OffsetSpec::Timestamp(t),
        _ => {
            return Err(BrokerError::new(
                ErrorKind::InvalidRequest,
                format!("bad offset spec {v}"),
            ));
        }
    })
}

fn protobuf(msg: impl Message) -> Response {
    (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
        msg.encode_to_vec(),
    )
        .into_response()
}

fn bad(e: impl std::fmt::Display) -> Response {
    (StatusCode::BAD_REQUEST, e.to_string()).into_response()
}

/// The RPC routes of a broker.
pub fn router(broker: Broker) -> Router {
    Router::new()
        .route("/rpc/produce", post(rpc_produce))
        .route("/rpc/fetch", post(rpc_fetch))
        .route("/rpc/wait", post(rpc_wait))
        .route("/rpc/list-offset", post(rpc_list_offset))
        .route("/rpc/delete-records", post(rpc_delete_records))
        .route("/rpc/group/join", post(crate::group_rpc::rpc_join))
        .route("/rpc/group/sync", post(crate::group_rpc::rpc_sync))
        .route("/rpc/group/member", post(crate::group_rpc::rpc_member))
        .route("/rpc/group/leave", post(crate::group_rpc::rpc_leave))
        .route("/rpc/group/describe", post(crate::group_rpc::rpc_describe))
        .route("/rpc/group/list", post(crate::group_rpc::rpc_list))
        .route("/rpc/group/delete", post(crate::group_rpc::rpc_delete))
        .layer(axum::extract::DefaultBodyLimit::max(128 * 1024 * 1024))
        .with_state(broker)
}

/// Serves the RPC routes on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, broker: Broker) -> std::io::Result<()> {
    axum::serve(listener, router(broker)).await
}

async fn rpc_produce(State(b): State<Broker>, body: Bytes) -> Response {
    let req = match proto::ProduceRequest::decode(body) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let acks = match Acks::from_kafka(i16::try_from(req.acks).unwrap_or(i16::MAX)) {
        Some(a) => a,
        None => return bad(format!("bad acks {}", req.acks)),
    };
    let done = match key_of(req.partition.as_ref()).and_then(|k| b.append(&k, &req.records, acks)) {
        // Sequenced: the headers go now, the body when acknowledged.
        Ok(pending) => {
            let fut = async move {
                let r = match pending.wait().await {
                    Ok(ok) => proto::ProduceResponse {
                        error: None,
                        base_offset: ok.base_offset,
                        log_start_offset: ok.log_start_offset,
                        log_append_time: ok.log_append_time,
                    },
                    Err(e) => proto::ProduceResponse {
                        error: Some(to_proto(&e)),
                        ..Default::default()
                    },
                };
                Ok::<_, std::convert::Infallible>(Bytes::from(r.encode_to_vec()))
            };
            Body::from_stream(futures::stream::once(fut))
        }
        Err(e) => Body::from(
            proto::ProduceResponse {
                error: Some(to_proto(&e)),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
    };
    (StatusCode::OK, done).into_response()
}

async fn rpc_fetch(State(b): State<Broker>, body: Bytes) -> Response {
    let req = match proto::FetchRequest::decode(body) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let max = usize::try_from(req.max_bytes).unwrap_or(usize::MAX);
    let r = match key_of(req.partition.as_ref()) {
        Ok(k) => b.fetch(&k, req.offset, max).await,
        Err(e) => Err(e),
    };
    protobuf(match r {
        Ok(d) => proto::FetchResponse {
            error: None,
            high_watermark: d.high_watermark,
            log_start_offset: d.log_start_offset,
            batches: d.batches,
        },
        Err(e) => proto::FetchResponse {
            error: Some(to_proto(&e)),
            ..Default::default()
        },
    })
}

async fn rpc_wait(State(b): State<Broker>, body: Bytes) -> Response {
    let req = match proto::WaitRequest::decode(body) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    if let Ok(k) = key_of(req.partition.as_ref()) {
        let until = tokio::time::Instant::now() + Duration::from_millis(req.timeout_ms.min(60_000));
        b.wait_for_data(&k, req.offset, until).await;
    }
    protobuf(proto::Empty {})
}

async fn rpc_list_offset(State(b): State<Broker>, body: Bytes) -> Response {
    let req = match proto::ListOffsetRequest::decode(body) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let r = async {
        let k = key_of(req.partition.as_ref())?;
        let a = b.list_offset(&k, spec_from_i64(req.spec)?).await?;
        let epoch = b.log(&k).map(|l| l.epoch() as i64).unwrap_or(-1);
        Ok::<_, BrokerError>((a, epoch))
    }
    .await;
    protobuf(match r {
        Ok((a, epoch)) => proto::ListOffsetResponse {
            error: None,
            offset: a.offset,
            timestamp: a.timestamp,
            epoch,
        },
        Err(e) => proto::ListOffsetResponse {
            error: Some(to_proto(&e)),
            offset: -1,
            timestamp: -1,
            epoch: -1,
        },
    })
}

async fn rpc_delete_records(State(b): State<Broker>, body: Bytes) -> Response {
    let req = match proto::DeleteRecordsRequest::decode(body) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let r = match key_of(req.partition.as_ref()) {
        Ok(k) => b.delete_records(&k, req.offset).await,
        Err(e) => Err(e),
    };
    protobuf(match r {
        Ok(low) => proto::DeleteRecordsResponse {
            error: None,
            low_watermark: low,
        },
        Err(e) => proto::DeleteRecordsResponse {
            error: Some(to_proto(&e)),
            low_watermark: -1,
        },
    })
}

/// A client of a broker in another process (HTTP/2, one connection reused).
#[derive(Debug, Clone)]
pub struct RemoteBroker {
    addr: String,
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

fn unreachable(addr: &str, e: impl std::fmt::Display) -> BrokerError {
    // Retryable for a Kafka client: the partition moves when a broker dies.
    BrokerError::new(
        ErrorKind::NotOwner,
        format!("broker at {addr} unreachable: {e}"),
    )
}

impl RemoteBroker {
    pub fn new(addr: impl Into<String>) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        connector.set_nodelay(true);
        Self {
            addr: addr.into(),
            client: Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build(connector),
            timeout: Duration::from_secs(60),
        }
    }

    /// A call with its own deadline (group joins wait for a rebalance).
    pub(crate) async fn call_timeout<M: Message + Default>(
        &self,
        path: &str,
        req: impl Message,
        timeout: Duration,
    ) -> Result<M> {
        let call = async {
            let resp = self.send_within(path, req.encode_to_vec(), timeout).await?;
            Self::body(&self.addr, resp).await
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| unreachable(&self.addr, "timed out"))?
    }

    async fn send(
        &self,
        path: &str,
        body: Vec<u8>,
    ) -> Result<hyper::Response<hyper::body::Incoming>> {
        self.send_within(path, body, self.timeout).await
    }

    async fn send_within(
        &self,
        path: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<hyper::Response<hyper::body::Incoming>> {
        let req = hyper::Request::post(format!("http://{}{path}", self.addr))
            .header(hyper::header::CONTENT_TYPE, "application/x-protobuf")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| BrokerError::new(ErrorKind::InvalidRequest, e.to_string()))?;
        let resp = tokio::time::timeout(timeout, self.client.request(req))
            .await
            .map_err(|_| unreachable(&self.addr, "timed out"))?
            .map_err(|e| unreachable(&self.addr, e))?;
        if !resp.status().is_success() {
            return Err(BrokerError::new(
                ErrorKind::InvalidRequest,
                format!("broker at {} answered {}", self.addr, resp.status()),
            ));
        }
        Ok(resp)
    }

    async fn body<M: Message + Default>(
        addr: &str,
        resp: hyper::Response<hyper::body::Incoming>,
    ) -> Result<M> {
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(addr, e))?
            .to_bytes();
        M::decode(bytes).map_err(|e| unreachable(addr, format!("bad answer: {e}")))
    }

    async fn call<M: Message + Default>(&self, path: &str, req: impl Message) -> Result<M> {
        let resp = self.send(path, req.encode_to_vec()).await?;
        Self::body(&self.addr, resp).await
    }

    /// Sends a produce; returns once the remote broker sequenced it.
    pub async fn append(
        &self,
        key: &PartitionKey,
        records: Bytes,
        acks: Acks,
    ) -> Result<PendingProduce> {
        let req = proto::ProduceRequest {
            partition: Some(part(key)),
            acks: match acks {
                Acks::None => 0,
                Acks::Leader => 1,
                Acks::All => -1,
            },
            records,
        };
        let resp = self.send("/rpc/produce", req.encode_to_vec()).await?;
        let addr = self.addr.clone();
        Ok(PendingProduce::remote(async move {
            let r: proto::ProduceResponse = Self::body(&addr, resp).await?;
            match r.error {
                Some(e) => Err(from_proto(e)),
                None => Ok(ProduceOk {
                    base_offset: r.base_offset,
                    log_start_offset: r.log_start_offset,
                    log_append_time: r.log_append_time,
                }),
            }
        }))
    }

    pub async fn fetch(
        &self,
        key: &PartitionKey,
        offset: i64,
        max_bytes: usize,
    ) -> Result<FetchData> {
        let r: proto::FetchResponse = self
            .call(
                "/rpc/fetch",
                proto::FetchRequest {
                    partition: Some(part(key)),
                    offset,
                    max_bytes: max_bytes as u64,
                },
            )
            .await?;
        match r.error {
            Some(e) => Err(from_proto(e)),
            None => Ok(FetchData {
                high_watermark: r.high_watermark,
                log_start_offset: r.log_start_offset,
                batches: r.batches,
            }),
        }
    }

    pub async fn wait_for_data(
        &self,
        key: &PartitionKey,
        offset: i64,
        until: tokio::time::Instant,
    ) {
        let timeout = until.saturating_duration_since(tokio::time::Instant::now());
        let r: Result<proto::Empty> = self
            .call(
                "/rpc/wait",
                proto::WaitRequest {
                    partition: Some(part(key)),
                    offset,
                    timeout_ms: timeout.as_millis() as u64,
                },
            )
            .await;
        if r.is_err() {
            // Do not spin on an unreachable broker.
            tokio::time::sleep_until(
                until.min(tokio::time::Instant::now() + Duration::from_millis(200)),
            )
            .await;
        }
    }

    pub async fn list_offset(
        &self,
        key: &PartitionKey,
        spec: OffsetSpec,
    ) -> Result<(OffsetAnswer, i64)> {
        let r: proto::ListOffsetResponse = self
            .call(
                "/rpc/list-offset",
                proto::ListOffsetRequest {
                    partition: Some(part(key)),
                    spec: spec_to_i64(spec),
                },
            )
            .await?;
        match r.error {
            Some(e) => Err(from_proto(e)),
            None => Ok((
                OffsetAnswer {
                    offset: r.offset,
                    timestamp: r.timestamp,
                },
                r.epoch,
            )),
        }
    }

    pub async fn delete_records(&self, key: &PartitionKey, offset: i64) -> Result<i64> {
        let r: proto::DeleteRecordsResponse = self
            .call(
                "/rpc/delete-records",
                proto::DeleteRecordsRequest {
                    partition: Some(part(key)),
                    offset,
                },
            )
            .await?;
        match r.error {
            Some(e) => Err(from_proto(e)),
            None => Ok(r.low_watermark),
        }
    }
}

/// The broker a partition's requests go to: in this process or another.
#[derive(Debug, Clone)]
pub enum BrokerHandle {
    Local(Broker),
    Remote(Arc<RemoteBroker>),
}

impl BrokerHandle {
    /// Sequences a produce (in the order calls are made on one task) and
    /// returns what waits for its acknowledgement.
    pub async fn append(
        &self,
        key: &PartitionKey,
        records: Bytes,
        acks: Acks,
    ) -> Result<PendingProduce> {
        match self {
            BrokerHandle::Local(b) => b.append(key, &records, acks),
            BrokerHandle::Remote(r) => r.append(key, records, acks).await,
        }
    }

    pub async fn fetch(
        &self,
        key: &PartitionKey,
        offset: i64,
        max_bytes: usize,
    ) -> Result<FetchData> {
        match self {
            BrokerHandle::Local(b) => b.fetch(key, offset, max_bytes).await,
            BrokerHandle::Remote(r) => r.fetch(key, offset, max_bytes).await,
        }
    }

    pub async fn wait_for_data(
        &self,
        key: &PartitionKey,
        offset: i64,
        until: tokio::time::Instant,
    ) {
        match self {
            BrokerHandle::Local(b) => b.wait_for_data(key, offset, until).await,
            BrokerHandle::Remote(r) => r.wait_for_data(key, offset, until).await,
        }
    }

    /// The answer and the partition's epoch (-1 if unknown).
    pub async fn list_offset(
        &self,
        key: &PartitionKey,
        spec: OffsetSpec,
    ) -> Result<(OffsetAnswer, i64)> {
        match self {
            BrokerHandle::Local(b) => {
                let a = b.list_offset(key, spec).await?;
                Ok((a, b.log(key).map(|l| l.epoch() as i64).unwrap_or(-1)))
            }
            BrokerHandle::Remote(r) => r.list_offset(key, spec).await,
        }
    }

    pub async fn delete_records(&self, key: &PartitionKey, offset: i64) -> Result<i64> {
        match self {
            BrokerHandle::Local(b) => b.delete_records(key, offset).await,
            BrokerHandle::Remote(r) => r.delete_records(key, offset).await,
        }
    }
}
