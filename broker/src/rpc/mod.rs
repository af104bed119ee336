//! The broker's internal RPC: protobuf over HTTP/2 (h2c), one route per
//! call. Record bytes travel as protobuf `bytes` fields decoded into
//! [`bytes::Bytes`], so they are sliced from the received buffer, not copied.
//!
//! A produce answers in two steps on one stream: the response headers as
//! soon as the batches are sequenced (so a proxy can keep a connection's
//! produce requests in order without waiting for the flush), the body once
//! the acknowledgement level is met.
//!
//! Every route is one type in [`routes`] (path, request, reply), served by
//! [`crate::server::router`] and called by [`RemoteBroker`], which implements
//! [`PartitionOwner`] and [`Coordinator`](crate::owner::Coordinator) for a
//! broker in another process.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prost::Message;

use floe_metadata::api::convert;
use floe_storage::PartitionKey;

use crate::error::{BrokerError, CallError, ErrorKind, RecordError, Result, RoutingError};
use crate::partitions::{
    Acks, FetchData, OffsetAnswer, OffsetSpec, PartitionOwner, Partitions, PendingProduce,
    ProduceOk,
};

pub mod routes;
use routes::Route;

/// Messages of the internal RPC.
pub mod proto {
    /// A partition on the wire: the metadata API's message, one definition
    /// for both APIs.
    pub use floe_metadata::api::proto::Partition;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Error {
        #[prost(string, tag = "1")]
        pub kind: String,
        #[prost(string, tag = "2")]
        pub message: String,
        /// The records that made a batch invalid (a peer that does not
        /// send them: none).
        #[prost(message, repeated, tag = "3")]
        pub record_errors: Vec<RecordError>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RecordError {
        #[prost(int32, tag = "1")]
        pub batch_index: i32,
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
        /// How long the owner may wait for room under its unflushed cap
        /// (0: not at all, as from a peer that does not send it).
        #[prost(uint64, tag = "4")]
        pub room_wait_ms: u64,
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
        /// The client's current leader epoch; absent: no check.
        #[prost(uint64, optional, tag = "4")]
        pub leader_epoch: Option<u64>,
        /// Isolation level 1: only below the last stable offset.
        #[prost(bool, tag = "5")]
        pub read_committed: bool,
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
        /// Absent from a broker that predates transactions: the high
        /// watermark.
        #[prost(int64, optional, tag = "5")]
        pub last_stable_offset: Option<i64>,
        #[prost(message, repeated, tag = "6")]
        pub aborted: Vec<AbortedTxn>,
    }

    /// An aborted transaction's records on a partition.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AbortedTxn {
        #[prost(int64, tag = "1")]
        pub producer_id: i64,
        #[prost(int64, tag = "2")]
        pub first_offset: i64,
        #[prost(int64, tag = "3")]
        pub last_offset: i64,
    }

    /// A COMMIT or ABORT marker to write at a partition's owner.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct MarkerRequest {
        #[prost(message, optional, tag = "1")]
        pub partition: Option<Partition>,
        #[prost(int64, tag = "2")]
        pub producer_id: i64,
        #[prost(int32, tag = "3")]
        pub producer_epoch: i32,
        #[prost(bool, tag = "4")]
        pub commit: bool,
        #[prost(uint64, tag = "5")]
        pub coordinator_epoch: u64,
    }

    /// The answer once the marker is committed (or needed no writing).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct MarkerResponse {
        #[prost(message, optional, tag = "1")]
        pub error: Option<Error>,
    }

    /// Before a commit is decided: is a producer's open transaction on
    /// the partition wholly its owner's, and durable (answered once it is).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DurableRequest {
        #[prost(message, optional, tag = "1")]
        pub partition: Option<Partition>,
        #[prost(int64, tag = "2")]
        pub producer_id: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DurableResponse {
        #[prost(message, optional, tag = "1")]
        pub error: Option<Error>,
        /// False: batches the owner answered may be lost; not to commit.
        #[prost(bool, tag = "2")]
        pub all_here: bool,
        /// Its first batch there proved none of the producer's missing
        /// before it (`Holding::All`).
        #[prost(bool, tag = "3")]
        pub follows: bool,
        /// The owner's epoch of the partition.
        #[prost(uint64, tag = "4")]
        pub owner_epoch: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProducersRequest {
        #[prost(message, optional, tag = "1")]
        pub partition: Option<Partition>,
    }

    /// The producers a partition's owner knows (DescribeProducers).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProducersResponse {
        #[prost(message, optional, tag = "1")]
        pub error: Option<Error>,
        #[prost(message, repeated, tag = "2")]
        pub producers: Vec<ProducerInfo>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProducerInfo {
        #[prost(int64, tag = "1")]
        pub producer_id: i64,
        #[prost(int32, tag = "2")]
        pub epoch: i32,
        #[prost(int32, tag = "3")]
        pub last_sequence: i32,
        #[prost(int64, tag = "4")]
        pub last_timestamp: i64,
        #[prost(int64, tag = "5")]
        pub txn_start_offset: i64,
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
        /// The client's current leader epoch; absent: no check.
        #[prost(uint64, optional, tag = "3")]
        pub leader_epoch: Option<u64>,
        /// Latest for a `read_committed` reader: the last stable offset.
        #[prost(bool, tag = "4")]
        pub last_stable: bool,
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

    /// One store endpoint as a broker's pool sees it.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StoreEndpoint {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(uint64, tag = "2")]
        pub written: u64,
        #[prost(uint64, tag = "3")]
        pub abandoned: u64,
        #[prost(uint64, tag = "4")]
        pub hedged: u64,
        #[prost(bool, tag = "5")]
        pub benched: bool,
        /// The adaptive deadline of a small write there now (0: unknown).
        #[prost(uint64, tag = "6")]
        pub write_deadline_ms: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StoreStats {
        #[prost(message, repeated, tag = "1")]
        pub endpoints: Vec<StoreEndpoint>,
    }
}

/// The store endpoints of a broker's pool: its writes, abandoned and hedged
/// attempts since it started, whether new writes skip each (benched), and
/// the adaptive deadline of a small write there now (the console's
/// overview).
pub fn store_stats(pool: &floe_storage::StorePool) -> proto::StoreStats {
    proto::StoreStats {
        endpoints: pool
            .stats()
            .into_iter()
            .map(|e| proto::StoreEndpoint {
                write_deadline_ms: pool
                    .write_deadline(&e.id, 0)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                id: e.id.as_str().to_string(),
                written: e.written,
                abandoned: e.abandoned,
                hedged: e.hedged,
                benched: e.benched,
            })
            .collect(),
    }
}

pub(crate) async fn rpc_store_stats(b: Partitions, _: proto::Empty) -> proto::StoreStats {
    store_stats(b.pool())
}

pub(crate) fn to_proto(e: &BrokerError) -> proto::Error {
    proto::Error {
        kind: e.kind().name().to_string(),
        message: e.to_string(),
        record_errors: e
            .record_errors()
            .iter()
            .map(|r| proto::RecordError {
                batch_index: r.batch_index,
                message: r.message.clone(),
            })
            .collect(),
    }
}

pub(crate) fn from_proto(e: proto::Error) -> BrokerError {
    // A kind this broker does not know (a newer peer) is no verdict on the
    // data: for a write it may be stored or not (clients retry it with the
    // same sequence numbers).
    let kind = ErrorKind::from_name(&e.kind).unwrap_or(ErrorKind::OutcomeUnknown);
    let records = e
        .record_errors
        .into_iter()
        .map(|r| RecordError {
            batch_index: r.batch_index,
            message: r.message,
        })
        .collect();
    BrokerError::new(kind, e.message).with_record_errors(records)
}

pub(crate) fn key_of(p: Option<&proto::Partition>) -> Result<PartitionKey> {
    convert::partition(p).map_err(|e| BrokerError::new(ErrorKind::InvalidRequest, e.to_string()))
}

pub(crate) fn part(key: &PartitionKey) -> proto::Partition {
    convert::partition_msg(key)
}

fn spec_to_i64(s: OffsetSpec) -> i64 {
    match s {
        OffsetSpec::Latest | OffsetSpec::LastStable => -1,
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

pub(crate) fn protobuf(msg: impl Message) -> Response {
    (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
        msg.encode_to_vec(),
    )
        .into_response()
}

pub(crate) fn bad(e: impl std::fmt::Display) -> Response {
    (StatusCode::BAD_REQUEST, e.to_string()).into_response()
}

/// The header that marks a reply given whole at once (`Answer::Now`).
/// For a produce it means the write was refused before it was sequenced
/// (not owned, being handed over, the lease ran out, no room): surely not
/// stored, so the caller may send it again elsewhere. A produce answered
/// without it was sequenced, and only its body (the acknowledgement) is
/// still to come.
pub const ANSWERED_NOW: &str = "floe-answered-now";

/// Largest RPC request body: a produce of the largest Kafka request
/// (100 MiB) with room for its framing.
pub const MAX_BODY_BYTES: usize = 128 * 1024 * 1024;

/// What a handler answers: its reply now, or (a produce) the headers now
/// and the reply as the body once it is ready.
pub(crate) enum Answer<T> {
    Now(T),
    Later(futures::future::BoxFuture<'static, T>),
}

fn produce_failed(e: &BrokerError) -> proto::ProduceResponse {
    proto::ProduceResponse {
        error: Some(to_proto(e)),
        ..Default::default()
    }
}

/// Longest wait for room a produce RPC may ask for.
const MAX_ROOM_WAIT: Duration = Duration::from_secs(60);

/// How long a produce may take to be *sequenced* (its response headers),
/// beyond its wait for room. Sequencing is quick; an owner that takes
/// longer is paused or cut off, and the produce fails instead of holding
/// the connection's later requests for the whole RPC timeout. Its outcome is unknown (the owner may still sequence and store
/// it), so the client hears REQUEST_TIMED_OUT and retries it as possibly
/// persisted: an idempotent producer with the same sequence numbers.
/// Twice the default lease: an owner paused longer than a lease has lost
/// its partitions by then (and refuses when it wakes), so the retry goes
/// to the new owner.
const SEQUENCE_TIMEOUT: Duration = Duration::from_secs(5);

/// Sequences the batches (once there is room under the unflushed cap); the
/// reply waits for the acknowledgement.
pub(crate) async fn rpc_produce(
    b: Partitions,
    req: proto::ProduceRequest,
) -> Answer<proto::ProduceResponse> {
    let Some(acks) = Acks::from_kafka(i16::try_from(req.acks).unwrap_or(i16::MAX)) else {
        return Answer::Now(produce_failed(&BrokerError::new(
            ErrorKind::InvalidRequest,
            format!("bad acks {}", req.acks),
        )));
    };
    let room_wait = Duration::from_millis(req.room_wait_ms).min(MAX_ROOM_WAIT);
    let appended = match key_of(req.partition.as_ref()) {
        Ok(k) => {
            b.append_within(&k, req.records.clone(), acks, room_wait)
                .await
        }
        Err(e) => Err(e),
    };
    match appended {
        Ok(pending) => Answer::Later(Box::pin(async move {
            match pending.wait().await {
                Ok(ok) => proto::ProduceResponse {
                    error: None,
                    base_offset: ok.base_offset,
                    log_start_offset: ok.log_start_offset,
                    log_append_time: ok.log_append_time,
                },
                Err(CallError::Broker(e)) => produce_failed(&e),
                Err(CallError::Routing(e)) => {
                    produce_failed(&BrokerError::new(ErrorKind::NotOwner, e.to_string()))
                }
            }
        })),
        Err(e) => Answer::Now(produce_failed(&e)),
    }
}

pub(crate) async fn rpc_fetch(b: Partitions, req: proto::FetchRequest) -> proto::FetchResponse {
    let max = usize::try_from(req.max_bytes).unwrap_or(usize::MAX);
    let r = match key_of(req.partition.as_ref()) {
        Ok(k) => {
            b.fetch_isolated(&k, req.offset, max, req.leader_epoch, req.read_committed)
                .await
        }
        Err(e) => Err(e),
    };
    match r {
        Ok(d) => proto::FetchResponse {
            error: None,
            high_watermark: d.high_watermark,
            log_start_offset: d.log_start_offset,
            batches: d.records,
            last_stable_offset: Some(d.last_stable_offset),
            aborted: d
                .aborted
                .iter()
                .map(|a| proto::AbortedTxn {
                    producer_id: a.producer_id.0,
                    first_offset: a.first_offset,
                    last_offset: a.last_offset,
                })
                .collect(),
        },
        Err(e) => proto::FetchResponse {
            error: Some(to_proto(&e)),
            ..Default::default()
        },
    }
}

pub(crate) async fn rpc_wait(b: Partitions, req: proto::WaitRequest) -> proto::Empty {
    if let Ok(k) = key_of(req.partition.as_ref()) {
        let until = tokio::time::Instant::now() + Duration::from_millis(req.timeout_ms.min(60_000));
        b.wait_for_data(&k, req.offset, until).await;
    }
    proto::Empty {}
}

pub(crate) async fn rpc_list_offset(
    b: Partitions,
    req: proto::ListOffsetRequest,
) -> proto::ListOffsetResponse {
    let r = async {
        let k = key_of(req.partition.as_ref())?;
        let spec = match spec_from_i64(req.spec)? {
            OffsetSpec::Latest if req.last_stable => OffsetSpec::LastStable,
            s => s,
        };
        b.list_offset_and_epoch(&k, spec, req.leader_epoch).await
    }
    .await;
    match r {
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
    }
}

pub(crate) async fn rpc_delete_records(
    b: Partitions,
    req: proto::DeleteRecordsRequest,
) -> proto::DeleteRecordsResponse {
    let r = match key_of(req.partition.as_ref()) {
        Ok(k) => b.delete_records(&k, req.offset).await,
        Err(e) => Err(e),
    };
    match r {
        Ok(low) => proto::DeleteRecordsResponse {
            error: None,
            low_watermark: low,
        },
        Err(e) => proto::DeleteRecordsResponse {
            error: Some(to_proto(&e)),
            low_watermark: -1,
        },
    }
}

/// One [`RemoteBroker`] per peer address, made on first use and reused (so
/// each peer keeps one connection).
#[derive(Debug, Default)]
pub struct Peers {
    by_addr: std::sync::Mutex<std::collections::HashMap<String, RemoteBroker>>,
}

impl Peers {
    /// The client of the broker at `addr`.
    pub fn get(&self, addr: &str) -> RemoteBroker {
        self.by_addr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(addr.to_owned())
            .or_insert_with(|| RemoteBroker::new(addr))
            .clone()
    }
}

/// A client of a broker in another process (HTTP/2, one connection reused).
#[derive(Debug, Clone)]
pub struct RemoteBroker {
    addr: String,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
    /// Whether the last call of [`RemoteBroker::call_timeout`] found the
    /// address refusing connections (nothing listens there).
    refused: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

type Answered = hyper::Response<hyper::body::Incoming>;

impl RemoteBroker {
    pub fn new(addr: impl Into<String>) -> Self {
        Self {
            addr: addr.into(),
            client: Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build(floe_metadata::cluster_tls::connector(
                    Duration::from_secs(2),
                    true,
                )),
            timeout: Duration::from_secs(60),
            refused: Default::default(),
        }
    }

    /// Whether the last call to this broker found its address
    /// refusing connections: the process is gone (the proxy reports it to
    /// the metadata service, as it does for a partition's owner).
    pub fn refused(&self) -> bool {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The broker's store endpoints ([`store_stats`]).
    pub async fn store_stats(&self, timeout: Duration) -> Result<proto::StoreStats, CallError> {
        self.call_timeout::<routes::StoreStats>(proto::Empty {}, timeout)
            .await
    }

    /// Calls route `R`; the client's deadline is for the response headers.
    pub(crate) async fn call<R: Route>(&self, req: R::Req) -> Result<R::Resp, CallError> {
        let answer = async {
            let resp = self.send::<R>(req, self.timeout).await?;
            Self::body::<R>(&self.addr, resp).await
        }
        .await;
        self.note_refused(answer)
    }

    /// Notes whether `answer` found the address refusing connections.
    fn note_refused<T>(&self, answer: Result<T, CallError>) -> Result<T, CallError> {
        let refused = matches!(&answer, Err(CallError::Routing(r)) if r.is_refused());
        self.refused
            .store(refused, std::sync::atomic::Ordering::Relaxed);
        answer
    }

    /// Calls route `R` with its own deadline (group joins wait for a
    /// rebalance), for the headers and the body together.
    pub(crate) async fn call_timeout<R: Route>(
        &self,
        req: R::Req,
        timeout: Duration,
    ) -> Result<R::Resp, CallError> {
        let call = async {
            let resp = self.send::<R>(req, timeout).await?;
            Self::body::<R>(&self.addr, resp).await
        };
        let answer = tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| CallError::from(RoutingError::unreachable(&self.addr, "timed out")))
            .and_then(|r| r);
        self.note_refused(answer)
    }

    /// Sends a request of route `R`; returns once the response headers came.
    async fn send<R: Route>(&self, req: R::Req, timeout: Duration) -> Result<Answered, CallError> {
        let req = Self::request::<R>(&self.addr, req)?;
        let resp = tokio::time::timeout(timeout, self.client.request(req))
            .await
            .map_err(|_| RoutingError::unreachable(&self.addr, "timed out"))?
            .map_err(|e| RoutingError::connect_failed(&self.addr, &e))?;
        Self::check_status(&self.addr, resp)
    }

    /// [`Self::send`] for a write. Only a failed connect proves the broker
    /// never took it (unreachable: the caller may route it again); a request
    /// that went out and got no answer in time may have been sequenced and
    /// stored ([`ErrorKind::OutcomeUnknown`]).
    async fn send_write<R: Route>(
        &self,
        req: R::Req,
        timeout: Duration,
    ) -> Result<Answered, CallError> {
        let req = Self::request::<R>(&self.addr, req)?;
        let addr = &self.addr;
        match tokio::time::timeout(timeout, self.client.request(req)).await {
            Err(_) => Err(BrokerError::outcome_unknown(format!(
                "broker at {addr} did not answer in {timeout:?}"
            ))
            .into()),
            Ok(Err(e)) if e.is_connect() => Err(RoutingError::connect_failed(addr, &e).into()),
            Ok(Err(e)) => Err(BrokerError::outcome_unknown(format!(
                "the call to broker at {addr} broke off: {e}"
            ))
            .into()),
            Ok(Ok(resp)) => Self::check_status(addr, resp),
        }
    }

    fn request<R: Route>(
        addr: &str,
        req: R::Req,
    ) -> Result<hyper::Request<Full<Bytes>>, CallError> {
        let body = Bytes::from(req.encode_to_vec());
        let mut builder = hyper::Request::post(format!(
            "{}://{addr}{}",
            floe_metadata::cluster_tls::scheme(),
            R::PATH
        ))
        .header(hyper::header::CONTENT_TYPE, "application/x-protobuf");
        if let Some(headers) = builder.headers_mut() {
            crate::trace::inject(headers);
        }
        if let Some(s) = floe_metadata::cluster_auth::current() {
            builder = builder.header(
                floe_metadata::cluster_auth::HEADER,
                s.sign("POST", R::PATH, &body, std::time::SystemTime::now()),
            );
        }
        Ok(builder
            .body(Full::new(body))
            .map_err(|e| BrokerError::new(ErrorKind::InvalidRequest, e.to_string()))?)
    }

    fn check_status(addr: &str, resp: Answered) -> Result<Answered, CallError> {
        if !resp.status().is_success() {
            return Err(BrokerError::new(
                ErrorKind::InvalidRequest,
                format!("broker at {} answered {}", addr, resp.status()),
            )
            .into());
        }
        Ok(resp)
    }

    /// Reads the reply of route `R` from the response body.
    async fn body<R: Route>(addr: &str, resp: Answered) -> Result<R::Resp, CallError> {
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| RoutingError::unreachable(addr, e))?
            .to_bytes();
        Ok(R::Resp::decode(bytes)
            .map_err(|e| RoutingError::unreachable(addr, format!("bad answer: {e}")))?)
    }

    /// Reads a produce's answer from the body; a body that does not come
    /// leaves the outcome unknown.
    async fn produce_answer(addr: &str, resp: Answered) -> Result<ProduceOk, CallError> {
        let r = Self::body::<routes::Produce>(addr, resp)
            .await
            .map_err(|e| match e {
                CallError::Routing(r) => BrokerError::outcome_unknown(r).into(),
                other => other,
            })?;
        answered(r.error, || ProduceOk {
            base_offset: r.base_offset,
            log_start_offset: r.log_start_offset,
            log_append_time: r.log_append_time,
        })
    }
}

fn answered<T>(error: Option<proto::Error>, ok: impl FnOnce() -> T) -> Result<T, CallError> {
    match error {
        Some(e) => Err(from_proto(e).into()),
        None => Ok(ok()),
    }
}

#[async_trait::async_trait]
impl PartitionOwner for RemoteBroker {
    /// Sends a produce; returns once the remote broker sequenced it (the
    /// response headers), the acknowledgement coming with the body. A
    /// refusal before sequencing ([`ANSWERED_NOW`]) is returned here.
    async fn append(
        &self,
        key: &PartitionKey,
        records: Bytes,
        acks: Acks,
        room_wait: Duration,
    ) -> Result<PendingProduce, CallError> {
        let room_wait = room_wait.min(MAX_ROOM_WAIT);
        let req = proto::ProduceRequest {
            partition: Some(part(key)),
            acks: match acks {
                Acks::None => 0,
                Acks::Leader => 1,
                Acks::All => -1,
            },
            records,
            room_wait_ms: room_wait.as_millis() as u64,
        };
        // The headers come once the batches are sequenced, after any wait
        // for room.
        let resp = self
            .send_write::<routes::Produce>(req, self.timeout.min(SEQUENCE_TIMEOUT) + room_wait)
            .await?;
        let addr = self.addr.clone();
        if resp.headers().contains_key(ANSWERED_NOW) {
            // Refused before it was sequenced: the refusal is the answer to
            // this call, so that the caller can tell it from a failure
            // after sequencing and send the write again (to the partition's
            // next owner, say). Without the header (a broker from before
            // it) a refusal comes as below, like a failure after sequencing.
            let ok = Self::produce_answer(&addr, resp).await?;
            return Ok(PendingProduce::remote(async move { Ok(ok) }));
        }
        // Sequenced: from here a lost answer leaves the outcome unknown.
        Ok(PendingProduce::remote(async move {
            Self::produce_answer(&addr, resp).await
        }))
    }

    async fn fetch_isolated(
        &self,
        key: &PartitionKey,
        offset: i64,
        max_bytes: usize,
        leader_epoch: Option<u64>,
        read_committed: bool,
    ) -> Result<FetchData, CallError> {
        let r = self
            .call::<routes::Fetch>(proto::FetchRequest {
                partition: Some(part(key)),
                offset,
                max_bytes: max_bytes as u64,
                leader_epoch,
                read_committed,
            })
            .await?;
        answered(r.error, || FetchData {
            high_watermark: r.high_watermark,
            log_start_offset: r.log_start_offset,
            last_stable_offset: r.last_stable_offset.unwrap_or(r.high_watermark),
            aborted: r
                .aborted
                .iter()
                .map(|a| floe_metadata::txn::AbortedTxn {
                    producer_id: floe_metadata::ids::ProducerId(a.producer_id),
                    first_offset: a.first_offset,
                    last_offset: a.last_offset,
                })
                .collect(),
            records: r.batches,
        })
    }

    async fn wait_for_data(&self, key: &PartitionKey, offset: i64, until: tokio::time::Instant) {
        let timeout = until.saturating_duration_since(tokio::time::Instant::now());
        let r = self
            .call::<routes::Wait>(proto::WaitRequest {
                partition: Some(part(key)),
                offset,
                timeout_ms: timeout.as_millis() as u64,
            })
            .await;
        if r.is_err() {
            // Do not spin on an unreachable broker.
            tokio::time::sleep_until(
                until.min(tokio::time::Instant::now() + Duration::from_millis(200)),
            )
            .await;
        }
    }

    async fn list_offset(
        &self,
        key: &PartitionKey,
        spec: OffsetSpec,
        leader_epoch: Option<u64>,
    ) -> Result<(OffsetAnswer, i64), CallError> {
        let r = self
            .call::<routes::ListOffset>(proto::ListOffsetRequest {
                partition: Some(part(key)),
                spec: spec_to_i64(spec),
                leader_epoch,
                last_stable: spec == OffsetSpec::LastStable,
            })
            .await?;
        answered(r.error, || {
            (
                OffsetAnswer {
                    offset: r.offset,
                    timestamp: r.timestamp,
                },
                r.epoch,
            )
        })
    }

    async fn producers(
        &self,
        key: &PartitionKey,
    ) -> Result<Vec<crate::partitions::ProducerInfo>, CallError> {
        self.producers_of(key).await
    }

    async fn delete_records(&self, key: &PartitionKey, offset: i64) -> Result<i64, CallError> {
        let r = self
            .call::<routes::DeleteRecords>(proto::DeleteRecordsRequest {
                partition: Some(part(key)),
                offset,
            })
            .await?;
        answered(r.error, || r.low_watermark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_crosses_the_rpc_with_its_record_errors() {
        let e = BrokerError::new(ErrorKind::InvalidRecord, "keyless").with_record_errors(vec![
            RecordError {
                batch_index: 2,
                message: "no key".into(),
            },
        ]);
        let back = from_proto(to_proto(&e));
        assert_eq!(back.kind(), ErrorKind::InvalidRecord);
        assert_eq!(back.to_string(), "keyless");
        assert_eq!(back.record_errors(), e.record_errors());
    }

    /// The produce and fetch messages between proxies and brokers (and
    /// between brokers) as each release encoded them
    /// (`floe_types::format_samples`): brokers of two versions call each
    /// other while they roll.
    #[test]
    fn produce_and_fetch_messages_of_every_release_decode() {
        use prost::Message;
        let partition = Some(proto::Partition {
            topic_id: "5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a".into(),
            partition: 3,
        });
        let produce = proto::ProduceRequest {
            partition: partition.clone(),
            acks: -1,
            records: bytes::Bytes::from_static(b"a record batch"),
            room_wait_ms: 5_000,
        };
        let answer = proto::ProduceResponse {
            error: Some(proto::Error {
                kind: "InvalidRecord".into(),
                message: "keyless".into(),
                record_errors: vec![proto::RecordError {
                    batch_index: 2,
                    message: "no key".into(),
                }],
            }),
            base_offset: 100,
            log_start_offset: 7,
            log_append_time: -1,
        };
        let fetch = proto::FetchRequest {
            partition,
            offset: 100,
            max_bytes: 1 << 20,
            leader_epoch: Some(7),
            read_committed: true,
        };
        let root = floe_types::format_samples::root(env!("CARGO_MANIFEST_DIR"));
        let version = env!("CARGO_PKG_VERSION");
        let check = |name: &str, written: Vec<u8>, read: &dyn Fn(&[u8]) -> bool| {
            floe_types::format_samples::check(&root, version, name, &written, |release, b| {
                assert!(read(&b), "{release}: {name} read other values");
            });
        };
        let p = produce.clone();
        check("rpc-produce.pb", produce.encode_to_vec(), &|b| {
            proto::ProduceRequest::decode(b).unwrap() == p
        });
        let a = answer.clone();
        check("rpc-produce-answer.pb", answer.encode_to_vec(), &|b| {
            proto::ProduceResponse::decode(b).unwrap() == a
        });
        let f = fetch.clone();
        check("rpc-fetch.pb", fetch.encode_to_vec(), &|b| {
            proto::FetchRequest::decode(b).unwrap() == f
        });
    }
}
