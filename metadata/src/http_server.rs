//! The one way Floe's internal HTTP servers serve their routes: the
//! metadata API, the broker RPC and the admin port (with the indexer's
//! query API) all go through [`serve`], so each has the same protection
//! against a peer that asks too much:
//!
//! - at most [`HttpLimits::max_connections`] connections; one over it is
//!   closed as soon as it is accepted (counted, and logged at most every
//!   10 s);
//! - a request body over [`HttpLimits::max_body_bytes`] is answered
//!   `413 Payload Too Large` (at once when its `Content-Length` says so,
//!   else when the body grows past it);
//! - requests on one connection: one at a time over HTTP/1.1, at most
//!   [`HttpLimits::max_concurrent_streams`] over HTTP/2;
//! - a client must send a request's headers within
//!   [`HttpLimits::header_read_timeout`], and a connection with no request
//!   in flight and no bytes moving for [`HttpLimits::idle_timeout`] is
//!   closed (gracefully: HTTP/2 peers get a GOAWAY).
//!
//! The idle timeout must stay above the idle time of the clients' pooled
//! connections (30 s in [`crate::http::HttpClient`]), so that a client
//! rarely sends on a connection the server is closing.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// What one internal HTTP server allows its clients.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Open connections; more are closed at accept.
    pub max_connections: usize,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Concurrent requests (streams) on one HTTP/2 connection.
    pub max_concurrent_streams: u32,
    /// Time a client has to send a request's headers.
    pub header_read_timeout: Duration,
    /// A connection with nothing in flight and no bytes moving this long
    /// is closed.
    pub idle_timeout: Duration,
}

impl HttpLimits {
    /// The defaults, with `max_body_bytes` as the server needs.
    pub fn with_body_limit(max_body_bytes: usize) -> Self {
        Self {
            max_body_bytes,
            ..Self::default()
        }
    }
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_body_bytes: 1024 * 1024,
            max_concurrent_streams: 256,
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

const REFUSED: &str = "floe_http_connections_refused_total";
const IDLE_CLOSED: &str = "floe_http_connections_idle_closed_total";
const UNAUTHENTICATED: &str = "floe_http_unauthenticated_total";
const FORBIDDEN: &str = "floe_http_forbidden_total";

/// Serves `app` on `listener` with `limits` until the task is dropped.
/// `server` names it in logs and metrics (`metadata`, `broker_rpc`, `admin`).
/// Dropping it closes its open connections too: a node that stopped must not
/// keep answering a peer's pooled keep-alive connection (a metadata node
/// restarted on the same port would otherwise never see that peer's
/// requests, which its stopped predecessor answers with "raft stopped").
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    server: &'static str,
) -> std::io::Result<()> {
    metrics::describe_counter!(
        REFUSED,
        "internal HTTP connections closed at accept because --http-max-connections were open (`server` label)"
    );
    metrics::describe_counter!(
        IDLE_CLOSED,
        "internal HTTP connections closed after --http-idle-timeout-ms idle (`server` label)"
    );
    metrics::counter!(REFUSED, "server" => server).increment(0);
    metrics::describe_counter!(
        UNAUTHENTICATED,
        "internal HTTP requests and connections refused for want of a cluster identity (`server`; `reason`: missing, malformed, bad_signature, expired, replayed for the cluster secret; tls_handshake, no_certificate for internal TLS; bad_token for the admin port's bearer tokens)"
    );
    metrics::describe_counter!(
        FORBIDDEN,
        "internal HTTP requests refused (403) because a cluster member (known by its certificate) acted beyond its role (`server`; `identity`: its role)"
    );
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut last_refusal_log: Option<Instant> = None;
    let mut refused_since_log = 0u64;
    // Owned here, so that dropping this future aborts every connection.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let (sock, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(server, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(sock);
            metrics::counter!(REFUSED, "server" => server).increment(1);
            refused_since_log += 1;
            if last_refusal_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                tracing::warn!(
                    server,
                    %peer,
                    max_connections = limits.max_connections,
                    refused = refused_since_log,
                    "HTTP connection limit reached; closing new connections"
                );
                last_refusal_log = Some(Instant::now());
                refused_since_log = 0;
            }
            continue;
        };
        let _ = sock.set_nodelay(true);
        let app = app.clone();
        let limits = limits.clone();
        connections.spawn(async move {
            serve_connection(sock, peer, app, &limits, server).await;
            drop(slot);
        });
    }
}

/// When a connection last moved bytes, and how many requests it has in flight.
#[derive(Debug)]
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        })
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }
}

/// Counts a request in flight until dropped.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(a: &Arc<Activity>) -> Self {
        a.in_flight.fetch_add(1, Ordering::SeqCst);
        a.touch();
        Self(a.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A socket that notes every read and write in its [`Activity`].
struct Tracked {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn too_large(limit: usize) -> Response<Body> {
    let mut resp = Response::new(Body::from(format!(
        "request body over the limit of {limit} bytes\n"
    )));
    *resp.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
    resp
}

/// Who sent a request, as the internal servers know it: every request
/// they route carries one as an extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No cluster security is configured: anyone is a member.
    Open,
    /// A process of the cluster: by its certificate (internal mTLS), or
    /// `None` when it signed with the cluster secret (the secret is shared,
    /// so it tells no identity).
    Member(Option<crate::cluster_tls::Member>),
    /// A person with a bearer token (the admin port only): its principal.
    User(String),
    /// No one known: health probes and `/metrics` only.
    Anonymous,
}

/// The address a request came from (an extension of every request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

impl Caller {
    /// The member's identity, when known (mTLS).
    pub fn member(&self) -> Option<crate::cluster_tls::Member> {
        match self {
            Caller::Member(m) => *m,
            _ => None,
        }
    }
}

fn unauthorized(
    server: &'static str,
    path: &str,
    reason: &'static str,
    what: &str,
) -> Response<Body> {
    metrics::counter!(UNAUTHENTICATED, "server" => server, "reason" => reason).increment(1);
    tracing::info!(server, path = %path, reason, "internal request refused: {what}");
    // The console's pages read JSON errors (`{"error", "kind"}`).
    let mut resp = if path.starts_with("/ui/api/") {
        let body = serde_json::json!({
            "error": format!("{what} ({reason})"),
            "kind": "unauthenticated",
        });
        let mut r = Response::new(Body::from(body.to_string()));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        r
    } else {
        Response::new(Body::from(format!("401: {what} ({reason})\n")))
    };
    *resp.status_mut() = StatusCode::UNAUTHORIZED;
    resp
}

/// The answer refusing a member a request beyond its role (403, counted
/// in `floe_http_forbidden_total`).
pub fn forbidden(
    server: &'static str,
    path: &str,
    member: crate::cluster_tls::Member,
    why: &str,
) -> Response<Body> {
    metrics::counter!(FORBIDDEN, "server" => server, "identity" => member.role.name()).increment(1);
    tracing::warn!(server, path = %path, identity = %member, "internal request refused: {why}");
    let mut resp = Response::new(Body::from(format!("403: {why}\n")));
    *resp.status_mut() = StatusCode::FORBIDDEN;
    resp
}

/// The bearer token of a request, if it has one.
fn bearer<B>(req: &Request<B>) -> Option<&str> {
    let v = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Answers one request: refuses a body announced over the limit, caps the
/// rest, finds who sent it ([`Caller`]; 401 when the cluster is secured and
/// it is no one known), and counts it in flight while the router works on it.
async fn answer(
    app: Router,
    req: Request<Incoming>,
    limit: usize,
    activity: Arc<Activity>,
    server: &'static str,
    member: Option<crate::cluster_tls::Member>,
    peer: SocketAddr,
) -> Result<Response<Body>, Infallible> {
    let _in_flight = InFlight::new(&activity);
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Ok(too_large(limit));
    }
    // A body that grows past the limit fails to read: axum's extractors
    // answer 413 for it.
    let req = req.map(|b| Body::new(http_body_util::Limited::new(b, limit)));
    let path = req.uri().path().to_string();
    let secret = crate::cluster_auth::current();
    let tls = crate::cluster_tls::current();
    let tokens = if server == "admin" {
        crate::admin_tokens::current()
    } else {
        None
    };
    let (mut req, caller) = if crate::cluster_auth::is_open_path(&path) {
        (req, Caller::Anonymous)
    } else if member.is_some() {
        (req, Caller::Member(member))
    } else if let (Some(tokens), Some(token)) = (tokens, bearer(&req)) {
        match tokens.principal(token) {
            Some(p) => (req, Caller::User(p)),
            None => {
                return Ok(unauthorized(
                    server,
                    &path,
                    "bad_token",
                    "the bearer token is not one of --admin-token-file",
                ));
            }
        }
    } else if let Some(secret) = secret {
        match authenticated(secret, req, server, limit).await {
            Ok(req) => (req, Caller::Member(None)),
            Err(resp) => return Ok(resp),
        }
    } else if tls.is_some() || tokens.is_some() {
        return Ok(unauthorized(
            server,
            &path,
            "no_certificate",
            "this port needs a cluster member's certificate or a bearer token",
        ));
    } else {
        (req, Caller::Open)
    };
    req.extensions_mut().insert(caller);
    req.extensions_mut().insert(PeerAddr(peer));
    app.oneshot(req).await
}

/// The request, its body read, if its cluster signature holds; else the
/// answer refusing it (401, counted).
async fn authenticated(
    secret: &crate::cluster_auth::ClusterSecret,
    req: Request<Body>,
    server: &'static str,
    limit: usize,
) -> Result<Request<Body>, Response<Body>> {
    use http_body_util::BodyExt as _;
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Err(too_large(limit)),
    };
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path().to_string(), |p| p.as_str().to_string());
    let header = parts
        .headers
        .get(crate::cluster_auth::HEADER)
        .and_then(|v| v.to_str().ok());
    match secret.verify(
        header,
        parts.method.as_str(),
        &path,
        &body,
        std::time::SystemTime::now(),
    ) {
        Ok(()) => Ok(Request::from_parts(parts, Body::from(body))),
        Err(why) => Err(unauthorized(
            server,
            &path,
            why.label(),
            "this port needs requests signed with the cluster secret",
        )),
    }
}

async fn serve_connection(
    sock: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: &HttpLimits,
    server: &'static str,
) {
    let activity = Activity::new();
    activity.touch();
    let tracked = Tracked {
        inner: sock,
        activity: activity.clone(),
    };
    let Some(tls) = crate::cluster_tls::current() else {
        return serve_io(
            TokioIo::new(tracked),
            peer,
            None,
            activity,
            app,
            limits,
            server,
        )
        .await;
    };
    let handshake =
        tokio::time::timeout(limits.header_read_timeout, tls.acceptor().accept(tracked));
    match handshake.await {
        Ok(Ok(stream)) => {
            let member = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| crate::cluster_tls::Member::of_certificate(c));
            serve_io(
                TokioIo::new(stream),
                peer,
                member,
                activity,
                app,
                limits,
                server,
            )
            .await;
        }
        Ok(Err(e)) => {
            metrics::counter!(UNAUTHENTICATED, "server" => server, "reason" => "tls_handshake")
                .increment(1);
            tracing::info!(server, %peer, error = %e, "internal TLS handshake failed");
        }
        Err(_) => {
            metrics::counter!(UNAUTHENTICATED, "server" => server, "reason" => "tls_handshake")
                .increment(1);
            tracing::debug!(server, %peer, "internal TLS handshake timed out");
        }
    }
}

/// Serves HTTP on one (plain or TLS) connection, closing it when idle.
async fn serve_io<S>(
    io: TokioIo<S>,
    peer: SocketAddr,
    member: Option<crate::cluster_tls::Member>,
    activity: Arc<Activity>,
    app: Router,
    limits: &HttpLimits,
    server: &'static str,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limit = limits.max_body_bytes;
    let svc_activity = activity.clone();
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        answer(
            app.clone(),
            req,
            limit,
            svc_activity.clone(),
            server,
            member,
            peer,
        )
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams);
    let conn = builder.serve_connection(io, svc);
    tokio::pin!(conn);
    let idle = limits.idle_timeout.max(Duration::from_millis(10));
    let mut tick = tokio::time::interval(idle / 4);
    let mut closing = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(server, %peer, error = %e, "HTTP connection ended");
                }
                return;
            }
            _ = tick.tick() => {
                let quiet = activity.in_flight.load(Ordering::SeqCst) == 0 && activity.idle_for() >= idle;
                if quiet && !closing {
                    closing = true;
                    metrics::counter!(IDLE_CLOSED, "server" => server).increment(1);
                    tracing::debug!(server, %peer, "closing an idle HTTP connection");
                    conn.as_mut().graceful_shutdown();
                } else if closing && activity.idle_for() >= idle * 2 {
                    // The peer did not finish closing: drop the connection.
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use axum::routing::{get, post};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A stopped server closes the keep-alive connections it had open.
    #[tokio::test]
    async fn stopping_the_server_closes_its_open_connections() {
        let app = Router::new().route("/ok", get(|| async { "ok" }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(serve(listener, app, HttpLimits::default(), "test"));
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /ok HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0u8; 4096];
        let n = s.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        task.abort();
        let _ = task.await;
        // The connection is closed: a read ends (0 bytes or an error), it
        // does not wait for the idle timeout (120 s).
        let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        assert!(
            matches!(r, Ok(Ok(0)) | Ok(Err(_))),
            "the connection stayed open: {r:?}"
        );
    }

    async fn start(limits: HttpLimits) -> SocketAddr {
        let app = Router::new()
            .route(
                "/echo",
                post(|body: axum::body::Bytes| async move { body.len().to_string() }),
            )
            .route("/ok", get(|| async { "ok" }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, app, limits, "test"));
        addr
    }

    /// Sends raw bytes and reads until the server closes (or 5 s).
    async fn exchange(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(req).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn body_over_the_limit_is_413_and_under_it_is_served() {
        let addr = start(HttpLimits::with_body_limit(100)).await;
        let big = format!(
            "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\nconnection: close\r\n\r\n{}",
            "a".repeat(1000)
        );
        assert!(
            exchange(addr, big.as_bytes())
                .await
                .starts_with("HTTP/1.1 413")
        );
        // Chunked, with no length announced: refused once it grows past.
        let chunked = format!(
            "POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3e8\r\n{}\r\n0\r\n\r\n",
            "a".repeat(1000)
        );
        assert!(
            exchange(addr, chunked.as_bytes())
                .await
                .starts_with("HTTP/1.1 413")
        );
        let small =
            "POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello";
        let answer = exchange(addr, small.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    /// Our HTTP client, writing a body far larger than the socket buffers,
    /// reads the 413 answered before the body was read (it is not cut off
    /// mid-write): the Raft network tells "too large" from "unreachable" by it.
    #[tokio::test]
    async fn a_client_sending_a_large_refused_body_reads_the_413() {
        let addr = start(HttpLimits::with_body_limit(128 * 1024)).await;
        let client = crate::http::HttpClient::default();
        for _ in 0..3 {
            let r = client
                .post(
                    &addr.to_string(),
                    "/echo",
                    "application/octet-stream",
                    bytes::Bytes::from(vec![7u8; 8 * 1024 * 1024]),
                    Duration::from_secs(10),
                )
                .await;
            match r {
                Err(crate::http::HttpError::Status { status: 413, .. }) => {}
                other => panic!("expected 413, got {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn connections_over_the_limit_are_closed_at_once() {
        let limits = HttpLimits {
            max_connections: 2,
            ..HttpLimits::default()
        };
        let addr = start(limits).await;
        let _a = TcpStream::connect(addr).await.unwrap();
        let _b = TcpStream::connect(addr).await.unwrap();
        // The third is accepted by the kernel, then closed by the server.
        let answer = exchange(addr, b"GET /ok HTTP/1.1\r\nhost: x\r\n\r\n").await;
        assert!(answer.is_empty(), "{answer}");
        drop(_a);
        // A place is free again (the server notices the close first).
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let answer = exchange(
                addr,
                b"GET /ok HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
            )
            .await;
            if answer.starts_with("HTTP/1.1 200") {
                break;
            }
            assert!(Instant::now() < deadline, "no place freed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn silent_and_idle_connections_are_closed() {
        let limits = HttpLimits {
            header_read_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(300),
            ..HttpLimits::default()
        };
        let addr = start(limits).await;
        // Half a request line, then nothing: closed by the header timeout.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /ok HT").await.unwrap();
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "a silent client was not closed");
        // A served keep-alive connection left idle: closed too.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /ok HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "an idle client was not closed");
        assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
    }
}
