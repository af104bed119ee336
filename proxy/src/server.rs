//! The Kafka listener. Each connection reads frames in a loop; requests are
//! decoded and handled concurrently (pipelining) but produce requests are
//! sequenced in arrival order, and responses go back in request order.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::admin::handle_admin;
use crate::codec::{self, CodecErrorKind};
use crate::groups::ClientInfo;
use crate::handlers::{self, Context};
use crate::metrics;

/// Requests read ahead of their responses on one connection.
const MAX_IN_FLIGHT: usize = 64;

/// Proxy settings.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub listen: SocketAddr,
    /// Largest request frame accepted (Kafka's `socket.request.max.bytes`).
    pub max_frame: usize,
}

/// A running Kafka listener.
#[derive(Debug)]
pub struct Proxy {
    pub local_addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(cfg: ProxyConfig, ctx: Arc<Context>) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind(cfg.listen).await?;
        Self::start_on(listener, cfg, ctx)
    }

    /// Serves on a listener already bound (`cfg.listen` is not used): the
    /// caller learns the address first, to advertise it when the port was 0.
    pub fn start_on(
        listener: TcpListener,
        cfg: ProxyConfig,
        ctx: Arc<Context>,
    ) -> std::io::Result<Proxy> {
        let local_addr = listener.local_addr()?;
        metrics::register();
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((sock, peer)) => {
                        let _ = sock.set_nodelay(true);
                        metrics::connection();
                        let ctx = ctx.clone();
                        let max = cfg.max_frame;
                        tokio::spawn(async move {
                            if let Err(e) = serve(sock, ctx, max).await {
                                tracing::debug!(%peer, error = %e, "connection ended");
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                }
            }
        });
        Ok(Proxy { local_addr, task })
    }

    /// Stops accepting connections.
    pub fn stop(&self) {
        self.task.abort();
    }
}

type Reply = oneshot::Receiver<Option<BytesMut>>;

async fn serve(
    sock: TcpStream,
    ctx: Arc<Context>,
    max_frame: usize,
) -> Result<(), codec::CodecError> {
    let host = sock
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    let (mut rd, mut wr) = sock.into_split();
    let (tx, mut rx) = mpsc::channel::<Reply>(MAX_IN_FLIGHT);
    // Writer: answers in request order.
    let writer = tokio::spawn(async move {
        while let Some(reply) = rx.recv().await {
            match reply.await {
                Ok(Some(bytes)) => {
                    if wr.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                Ok(None) => {}    // acks=0: no response
                Err(_) => return, // the handler gave up: close
            }
        }
        let _ = wr.shutdown().await;
    });
    let result = async {
        loop {
            let Some(frame) = codec::read_frame(&mut rd, max_frame).await? else {
                return Ok(());
            };
            metrics::request();
            let prefix = match codec::peek_prefix(&frame) {
                Ok(p) => p,
                Err(e) => {
                    metrics::bad_request();
                    return Err(e);
                }
            };
            let (otx, orx) = oneshot::channel();
            if tx.send(orx).await.is_err() {
                return Ok(());
            }
            let key = ApiKey::try_from(prefix.api_key).ok();
            // ApiVersions is answered at any version (KIP-511): an unknown
            // version gets the v0 answer with UNSUPPORTED_VERSION.
            if key == Some(ApiKey::ApiVersions) && !handlers::decodable(ApiKey::ApiVersions, prefix.api_version) {
                metrics::api_request(ApiKey::ApiVersions);
                let body = ResponseKind::ApiVersions(handlers::api_versions(ResponseError::UnsupportedVersion.code()));
                let out = codec::encode_response(ApiKey::ApiVersions, 0, prefix.correlation_id, &body)?;
                let _ = otx.send(Some(out));
                continue;
            }
            let Some(key) = key.filter(|k| handlers::decodable(*k, prefix.api_version)) else {
                metrics::bad_request();
                tracing::info!(api_key = prefix.api_key, version = prefix.api_version, "unsupported API key or version; closing the connection");
                // Kafka closes the connection for versions it cannot parse.
                drop(otx);
                return Ok(());
            };
            metrics::api_request(key);
            let req = match codec::decode_request(frame) {
                Ok(r) => r,
                Err(e) => {
                    metrics::bad_request();
                    tracing::info!(api_key = prefix.api_key, version = prefix.api_version, error = %e, "malformed request; closing the connection");
                    drop(otx);
                    if e.kind() == CodecErrorKind::Io {
                        return Err(e);
                    }
                    return Ok(());
                }
            };
            let version = req.version;
            let corr = prefix.correlation_id;
            let client = ClientInfo {
                client_id: req
                    .header
                    .client_id
                    .as_ref()
                    .map(|c| c.to_string())
                    .unwrap_or_default(),
                host: format!("/{host}"),
            };
            match req.body {
                RequestKind::Produce(p) => {
                    // Sequenced here, in order; the wait runs on its own.
                    let no_response = p.acks == 0;
                    let fut = ctx.produce_start(version, p).await;
                    tokio::spawn(async move {
                        let resp = fut.await;
                        if no_response {
                            let _ = otx.send(None);
                            return;
                        }
                        let out = codec::encode_response(key, version, corr, &ResponseKind::Produce(resp));
                        let _ = otx.send(out.ok());
                    });
                }
                body => {
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        let resp = handle(&ctx, version, body, &client).await;
                        let out = resp.and_then(|r| {
                            codec::encode_response(key, version, corr, &r)
                                .map_err(|e| tracing::warn!(?key, version, error = %e, "cannot encode a response"))
                                .ok()
                        });
                        // No answer: the connection closes (as Kafka does), never hangs.
                        if let Some(out) = out {
                            let _ = otx.send(Some(out));
                        }
                    });
                }
            }
        }
    }
    .await;
    drop(tx);
    let _ = writer.await;
    result
}

async fn handle(
    ctx: &Context,
    version: i16,
    body: RequestKind,
    client: &ClientInfo,
) -> Option<ResponseKind> {
    Some(match &body {
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(handlers::api_versions(0)),
        RequestKind::Metadata(r) => ResponseKind::Metadata(ctx.metadata(version, r).await),
        RequestKind::Fetch(r) => ResponseKind::Fetch(ctx.fetch(version, r).await),
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(ctx.list_offsets(version, r).await)
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(ctx.delete_records(version, r).await)
        }
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(ctx.init_producer_id(version, r).await)
        }
        RequestKind::OffsetDelete(r) => {
            ResponseKind::OffsetDelete(ctx.offset_delete(version, r).await)
        }
        RequestKind::JoinGroup(r) => {
            ResponseKind::JoinGroup(ctx.join_group(version, r, client).await)
        }
        RequestKind::SyncGroup(r) => ResponseKind::SyncGroup(ctx.sync_group(version, r).await),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(ctx.heartbeat(version, r).await),
        RequestKind::LeaveGroup(r) => ResponseKind::LeaveGroup(ctx.leave_group(version, r).await),
        RequestKind::OffsetCommit(r) => {
            ResponseKind::OffsetCommit(ctx.offset_commit(version, r).await)
        }
        RequestKind::OffsetFetch(r) => {
            ResponseKind::OffsetFetch(ctx.offset_fetch(version, r).await)
        }
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(ctx.describe_groups(version, r).await)
        }
        RequestKind::ListGroups(r) => ResponseKind::ListGroups(ctx.list_groups(version, r).await),
        RequestKind::DeleteGroups(r) => {
            ResponseKind::DeleteGroups(ctx.delete_groups(version, r).await)
        }
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(ctx.find_coordinator(version, r))
        }
        _ => return handle_admin(ctx.meta.as_ref(), &ctx.admin, version, &body).await,
    })
}
