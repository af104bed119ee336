//! The Kafka listener. Each connection reads frames in a loop; requests are
//! decoded and handled concurrently (pipelining) but produce requests are
//! sequenced in arrival order, requests whose effects Kafka orders wait for
//! the earlier ones of their lane ([`crate::ordering`]), and responses go
//! back in request order.
//!
//! A proxy serves one or more listeners ([`crate::listeners`]), each with
//! its security protocol: TLS is set up at accept ([`crate::tls`]), and a
//! SASL listener authenticates each connection before anything else
//! ([`crate::auth`]). Requests are answered within the listener's name
//! ([`crate::nodes::LISTENER`]), so that the brokers a client is shown are
//! at that listener's addresses.
//!
//! What a client may make it hold is bounded ([`ListenerLimits`]): a
//! connection over the connection limits is closed at accept; reading from
//! a connection pauses while it has too many requests or request bytes not
//! answered yet, or while the whole listener handles too many request
//! bytes; a connection idle too long is closed; a request whose decoding
//! would take too much memory closes its connection like any malformed one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use crate::admin::handle_admin;
use crate::auth::{ConnectionAuth, Gate, SaslConfig};
use crate::codec::{self, CodecErrorKind};
use crate::groups::ClientInfo;
use crate::handlers::{self, Context};
use crate::limits::{ConnectionCounter, ListenerLimits, LogEvery};
use crate::listeners::SecurityProtocol;
use crate::metrics;
use crate::principal::{Principal, PrincipalRules};
use crate::quota::{Mute, QuotaKind};
use crate::tls::TlsConfig;

/// Proxy settings.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub listen: SocketAddr,
    /// Largest request frame accepted (Kafka's `socket.request.max.bytes`).
    pub max_frame: usize,
    /// What clients may make the listener hold.
    pub limits: ListenerLimits,
}

/// How one listener's connections are secured.
#[derive(Debug, Clone)]
pub struct ListenerSecurity {
    /// The listener's name (`PLAINTEXT`, `SASL_SSL`, `EXTERNAL`, …).
    pub name: Arc<str>,
    pub protocol: SecurityProtocol,
    /// The certificate and client-certificate rules, for TLS protocols.
    pub tls: Option<Arc<TlsConfig>>,
    /// The mechanisms and credentials, for SASL protocols.
    pub sasl: Option<SaslConfig>,
}

impl ListenerSecurity {
    /// A PLAINTEXT listener named `PLAINTEXT`.
    pub fn plaintext() -> ListenerSecurity {
        ListenerSecurity {
            name: Arc::from("PLAINTEXT"),
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            sasl: None,
        }
    }

    /// Checks that what the protocol needs is there.
    pub fn validate(&self) -> Result<(), String> {
        if self.protocol.tls() && self.tls.is_none() {
            return Err(format!(
                "listener {} ({}) needs a certificate: --ssl-certfile and --ssl-keyfile",
                self.name, self.protocol
            ));
        }
        if self.protocol.sasl() && self.sasl.as_ref().is_none_or(|s| s.mechanisms.is_empty()) {
            return Err(format!(
                "listener {} ({}) needs SASL mechanisms: --sasl-enabled-mechanisms",
                self.name, self.protocol
            ));
        }
        Ok(())
    }
}

/// How long a TLS handshake may take before the connection is closed.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A running Kafka listener (or several).
#[derive(Debug)]
pub struct Proxy {
    /// The first listener's address.
    pub local_addr: SocketAddr,
    /// Every listener's name and address, in the order given.
    pub local_addrs: Vec<(Arc<str>, SocketAddr)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Set once the proxy is stopping: connections read no new request.
    stopping: tokio::sync::watch::Sender<bool>,
    open: Arc<OpenConnections>,
}

/// The connections being served, so that a stop can wait for them.
#[derive(Debug, Default)]
struct OpenConnections {
    count: AtomicUsize,
    closed: tokio::sync::Notify,
}

/// Counts one connection as open until dropped.
struct OpenGuard(Arc<OpenConnections>);

impl OpenGuard {
    fn new(open: &Arc<OpenConnections>) -> Self {
        open.count.fetch_add(1, Ordering::SeqCst);
        Self(open.clone())
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::SeqCst);
        self.0.closed.notify_waiters();
    }
}

/// What every connection of one listener shares.
#[derive(Debug)]
struct Shared {
    ctx: Arc<Context>,
    max_frame: usize,
    limits: ListenerLimits,
    /// Request bytes being handled by the whole listener.
    queued_bytes: Arc<Semaphore>,
    refused_log: LogEvery,
    /// Becomes true when the proxy stops: no new request is read.
    stopping: tokio::sync::watch::Receiver<bool>,
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
        Self::start_listeners(vec![(listener, ListenerSecurity::plaintext())], cfg, ctx)
    }

    /// Serves several listeners already bound, each with its security
    /// (`cfg.listen` is not used). The connection limits are the proxy's,
    /// across its listeners.
    pub fn start_listeners(
        listeners: Vec<(TcpListener, ListenerSecurity)>,
        cfg: ProxyConfig,
        ctx: Arc<Context>,
    ) -> std::io::Result<Proxy> {
        let mut local_addrs = Vec::new();
        for (l, sec) in &listeners {
            sec.validate().map_err(std::io::Error::other)?;
            local_addrs.push((sec.name.clone(), l.local_addr()?));
        }
        let Some(&(_, local_addr)) = local_addrs.first() else {
            return Err(std::io::Error::other("no listener"));
        };
        metrics::register();
        let limits = cfg.limits.clone();
        let counter = ConnectionCounter::new(limits.max_connections, limits.max_connections_per_ip);
        let (stopping, stopping_rx) = tokio::sync::watch::channel(false);
        let open = Arc::new(OpenConnections::default());
        let open_conns = open.clone();
        let shared = Arc::new(Shared {
            stopping: stopping_rx,
            ctx,
            max_frame: cfg.max_frame,
            queued_bytes: Arc::new(Semaphore::new(
                limits
                    .queued_max_request_bytes
                    .clamp(1, Semaphore::MAX_PERMITS),
            )),
            limits,
            refused_log: LogEvery::new(Duration::from_secs(10)),
        });
        let tasks = listeners
            .into_iter()
            .map(|(listener, security)| {
                let shared = shared.clone();
                let counter = counter.clone();
                let open_conns = open_conns.clone();
                let security = Arc::new(security);
                tokio::spawn(async move {
                    accept_loop(listener, security, shared, counter, open_conns).await;
                })
            })
            .collect();
        Ok(Proxy {
            local_addr,
            local_addrs,
            tasks,
            stopping,
            open,
        })
    }

    /// Stops accepting connections.
    pub fn stop(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }

    /// A graceful stop (`SIGTERM`): closes the listener (new connections
    /// are refused), lets every connection finish the requests it has read
    /// (their answers are written) but read no new one, and closes it; waits
    /// for that up to `grace`. Clients reconnect (to another proxy) and
    /// send what they had not sent. Returns the connections still open
    /// when `grace` ran out.
    pub async fn shutdown(&self, grace: Duration) -> usize {
        self.stop();
        let _ = self.stopping.send(true);
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let closed = self.open.closed.notified();
            let n = self.open.count.load(Ordering::SeqCst);
            if n == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, closed).await.is_err() {
                let n = self.open.count.load(Ordering::SeqCst);
                if n > 0 {
                    tracing::warn!(
                        connections = n,
                        "connections still open when the stop's grace period ran out"
                    );
                }
                return n;
            }
        }
    }
}

/// Accepts one listener's connections until the proxy stops.
async fn accept_loop(
    listener: TcpListener,
    security: Arc<ListenerSecurity>,
    shared: Arc<Shared>,
    counter: Arc<ConnectionCounter>,
    open_conns: Arc<OpenConnections>,
) {
    loop {
        match listener.accept().await {
            Ok((sock, peer)) => {
                let slot = match counter.admit(peer.ip()) {
                    Ok(slot) => slot,
                    Err(refused) => {
                        // Closed at once, as Kafka does.
                        drop(sock);
                        metrics::refused(refused.reason());
                        if let Some(held_back) = shared.refused_log.check() {
                            tracing::warn!(
                                %peer,
                                reason = refused.reason(),
                                max_connections = shared.limits.max_connections,
                                max_connections_per_ip = shared.limits.max_connections_per_ip,
                                refused_since_last_line = held_back,
                                "connection limit reached; closing new connections"
                            );
                        }
                        continue;
                    }
                };
                let _ = sock.set_nodelay(true);
                metrics::connection();
                let shared = shared.clone();
                let security = security.clone();
                let open = OpenGuard::new(&open_conns);
                tokio::spawn(async move {
                    let _open = open;
                    let result = match &security.tls {
                        None => {
                            let auth = ConnectionAuth::new(
                                security.sasl.clone(),
                                peer,
                                Principal::anonymous(),
                            );
                            let (rd, wr) = sock.into_split();
                            serve(rd, wr, peer, &shared, &security.name, auth).await
                        }
                        Some(tls) => {
                            let accepted = tokio::time::timeout(
                                TLS_HANDSHAKE_TIMEOUT,
                                tls.acceptor().accept(sock),
                            )
                            .await;
                            match accepted {
                                Ok(Ok(stream)) => {
                                    let principal =
                                        tls_principal(&stream, &tls.settings().principal_rules);
                                    let auth =
                                        ConnectionAuth::new(security.sasl.clone(), peer, principal);
                                    let (rd, wr) = tokio::io::split(stream);
                                    serve(rd, wr, peer, &shared, &security.name, auth).await
                                }
                                Ok(Err(e)) => {
                                    metrics::tls_handshake_failed();
                                    tracing::info!(%peer, listener = %security.name, error = %e, "TLS handshake failed; closing the connection");
                                    Ok(())
                                }
                                Err(_) => {
                                    metrics::tls_handshake_failed();
                                    tracing::info!(%peer, listener = %security.name, "TLS handshake did not complete in time; closing the connection");
                                    Ok(())
                                }
                            }
                        }
                    };
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended");
                    }
                    drop(slot);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// Who a TLS connection is: its client certificate's subject mapped by the
/// rules, or `User:ANONYMOUS` without one.
fn tls_principal<S>(
    stream: &tokio_rustls::server::TlsStream<S>,
    rules: &PrincipalRules,
) -> Principal {
    let (_, conn) = stream.get_ref();
    conn.peer_certificates()
        .and_then(|c| c.first())
        .and_then(|leaf| crate::principal::subject_of(leaf))
        .map(|subject| Principal::user(rules.map(&subject)))
        .unwrap_or_else(Principal::anonymous)
}

type Reply = oneshot::Receiver<Option<codec::Frame>>;

/// The room a request takes until it is handled: its bytes on its
/// connection and in the whole listener. Dropped once the answer is ready.
#[derive(Debug)]
struct Room {
    _connection: Option<OwnedSemaphorePermit>,
    _listener: Option<OwnedSemaphorePermit>,
}

/// Waits for room for a `len`-byte request: on the connection (`conn`) and
/// in the listener (`queued`). A request larger than a budget takes all of
/// it, so one request always gets through when nothing else is in flight.
async fn room_for(
    len: usize,
    conn: &Arc<Semaphore>,
    queued: &Arc<Semaphore>,
    limits: &ListenerLimits,
) -> Room {
    let permits = |budget: usize| u32::try_from(len.min(budget).max(1)).unwrap_or(u32::MAX);
    let connection = conn
        .clone()
        .acquire_many_owned(permits(limits.max_in_flight_bytes))
        .await
        .ok();
    let listener = queued
        .clone()
        .acquire_many_owned(permits(limits.queued_max_request_bytes))
        .await
        .ok();
    Room {
        _connection: connection,
        _listener: listener,
    }
}

/// Resolves once the proxy is stopping (never, if its handle was dropped
/// without a stop: the listener's task serves on).
async fn stopped(rx: &mut tokio::sync::watch::Receiver<bool>) {
    if rx.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// What ends the wait for the next request.
enum Next {
    Frame(usize),
    Closed,
    Idle,
}

async fn serve<R, W>(
    mut rd: R,
    mut wr: W,
    peer: SocketAddr,
    shared: &Shared,
    listener: &Arc<str>,
    mut auth: ConnectionAuth,
) -> Result<(), codec::CodecError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let ctx = &shared.ctx;
    let limits = &shared.limits;
    let max_frame = shared.max_frame;
    let host = peer.ip().to_string();
    // The connection's authorization decisions, kept until the ACLs change.
    let authz_cache = Arc::new(crate::authz::SessionCache::default());
    // Where Kafka orders a connection's effects, its requests wait for the
    // earlier ones of the same group, transaction or admin lane.
    let mut lanes = crate::ordering::Lanes::default();
    let max_in_flight = limits.max_in_flight_requests.max(1);
    let (tx, mut rx) = mpsc::channel::<Reply>(max_in_flight);
    // Requests read and not answered yet (their replies are queued or
    // being written).
    let unanswered = Arc::new(AtomicUsize::new(0));
    let in_flight_bytes = Arc::new(Semaphore::new(
        limits.max_in_flight_bytes.clamp(1, Semaphore::MAX_PERMITS),
    ));
    // Writer: answers in request order.
    let written = unanswered.clone();
    let writer = tokio::spawn(async move {
        while let Some(reply) = rx.recv().await {
            let answer = reply.await;
            written.fetch_sub(1, Ordering::SeqCst);
            match answer {
                Ok(Some(frame)) => {
                    metrics::bytes_out(frame.len() as u64);
                    if write_frame(&mut wr, frame).await.is_err() {
                        return;
                    }
                }
                Ok(None) => {}    // acks=0: no response
                Err(_) => return, // the handler gave up: close
            }
        }
        let _ = wr.shutdown().await;
    });
    let idle = limits.idle_timeout.max(Duration::from_millis(1));
    let mut stopping = shared.stopping.clone();
    // Set while a client over its quota is throttled (KIP-219).
    let mute = Arc::new(Mute::default());
    let result = async {
        loop {
            // The length prefix is read with `read` (cancel-safe), so that a
            // timeout that does not close the connection loses no byte.
            let mut prefix = [0u8; 4];
            let mut filled = 0;
            let next = loop {
                let read = tokio::time::timeout(idle, rd.read(&mut prefix[filled..]));
                // A stopping proxy reads no new request (one begun is read).
                let read = if filled == 0 {
                    tokio::select! {
                        r = read => r,
                        _ = stopped(&mut stopping) => break Next::Closed,
                    }
                } else {
                    read.await
                };
                match read {
                    Ok(Ok(0)) if filled == 0 => break Next::Closed,
                    Ok(Ok(0)) => return Err(codec::eof_in_length()),
                    Ok(Ok(n)) => {
                        filled += n;
                        if filled < prefix.len() {
                            continue;
                        }
                        match codec::frame_len(prefix, max_frame) {
                            Ok(len) => break Next::Frame(len),
                            Err(e) => {
                                metrics::bad_request();
                                if prefix[0] == 0x16 && prefix[1] == 0x03 {
                                    tracing::info!(%peer, %listener, "a TLS handshake on a listener without TLS; closing the connection");
                                } else {
                                    tracing::info!(%peer, error = %e, "request frame over the size limit; closing the connection");
                                }
                                return Err(e);
                            }
                        }
                    }
                    Ok(Err(e)) => return Err(e.into()),
                    // Idle only when nothing is in flight: a long poll
                    // being answered is not idleness.
                    Err(_) if unanswered.load(Ordering::SeqCst) == 0 => break Next::Idle,
                    Err(_) => continue,
                }
            };
            let len = match next {
                Next::Frame(len) => len,
                Next::Closed => return Ok(()),
                Next::Idle => {
                    metrics::idle_closed();
                    tracing::debug!(%peer, idle_ms = idle.as_millis() as u64, "closing an idle connection");
                    return Ok(());
                }
            };
            // Reading pauses here while the connection or the listener has
            // too many request bytes in flight.
            let room = room_for(len, &in_flight_bytes, &shared.queued_bytes, limits).await;
            let frame = match tokio::time::timeout(idle, codec::read_frame_body(&mut rd, len)).await {
                Ok(frame) => frame?,
                Err(_) => {
                    metrics::idle_closed();
                    tracing::debug!(%peer, "a request body did not arrive within the idle timeout; closing the connection");
                    return Ok(());
                }
            };
            metrics::request(len as u64 + 4);
            // After SaslHandshake v0 the mechanism's messages come bare.
            if auth.expects_bare_token() {
                let (otx, orx) = oneshot::channel();
                unanswered.fetch_add(1, Ordering::SeqCst);
                if tx.send(orx).await.is_err() {
                    return Ok(());
                }
                drop(room);
                let Some(reply) = auth.bare_token(&frame).await else {
                    drop(otx);
                    return Ok(());
                };
                let mut out = bytes::BytesMut::with_capacity(4 + reply.len());
                out.extend_from_slice(&u32::try_from(reply.len()).unwrap_or(u32::MAX).to_be_bytes());
                out.extend_from_slice(&reply);
                let _ = otx.send(Some(codec::Frame::One(out)));
                continue;
            }
            // A throttled client's next request waits out its mute.
            if let Some(until) = mute.until(tokio::time::Instant::now()) {
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => {}
                    _ = stopped(&mut stopping) => return Ok(()),
                }
            }
            let prefix = match codec::peek_prefix(&frame) {
                Ok(p) => p,
                Err(e) => {
                    metrics::bad_request();
                    return Err(e);
                }
            };
            let (otx, orx) = oneshot::channel();
            unanswered.fetch_add(1, Ordering::SeqCst);
            if tx.send(orx).await.is_err() {
                return Ok(());
            }
            let key = ApiKey::try_from(prefix.api_key).ok();
            // ApiVersions is answered at any version (KIP-511): an unknown
            // version gets the v0 answer with UNSUPPORTED_VERSION.
            if key == Some(ApiKey::ApiVersions) && !handlers::decodable(ApiKey::ApiVersions, prefix.api_version) {
                metrics::api_request(ApiKey::ApiVersions);
                let body = ResponseKind::ApiVersions(handlers::api_versions_with(ResponseError::UnsupportedVersion.code(), ctx.optional()));
                let out = codec::encode_response(ApiKey::ApiVersions, 0, prefix.correlation_id, &body)?;
                let _ = otx.send(Some(codec::Frame::One(out)));
                continue;
            }
            let Some(key) = key.filter(|k| handlers::decodable_with(*k, prefix.api_version, ctx.optional())) else {
                metrics::bad_request();
                tracing::info!(api_key = prefix.api_key, version = prefix.api_version, "unsupported API key or version; closing the connection");
                // Kafka closes the connection for versions it cannot parse.
                drop(otx);
                return Ok(());
            };
            metrics::api_request(key);
            let gate = auth.gate(Some(key), tokio::time::Instant::now());
            if let Gate::Close(why) = gate {
                tracing::info!(%peer, %listener, api = ?key, "{why}; closing the connection");
                drop(otx);
                return Ok(());
            }
            let req = match codec::decode_request_within(frame, limits.max_decode_bytes) {
                Ok(r) => r,
                Err(e) => {
                    metrics::bad_request();
                    tracing::info!(%peer, api_key = prefix.api_key, version = prefix.api_version, error = %e, "malformed request; closing the connection");
                    drop(otx);
                    if e.kind() == CodecErrorKind::Io {
                        return Err(e);
                    }
                    return Ok(());
                }
            };
            let version = req.version;
            let corr = prefix.correlation_id;
            let started = std::time::Instant::now();
            // SaslHandshake and SaslAuthenticate are answered here, in
            // order: the next request is read once authentication moved.
            if gate == Gate::Sasl {
                drop(room);
                let (out, close) = match &req.body {
                    RequestKind::SaslHandshake(r) => {
                        let a = auth.handshake(version, r);
                        (ResponseKind::SaslHandshake(a.response), a.close)
                    }
                    RequestKind::SaslAuthenticate(r) => {
                        let a = auth.authenticate(r).await;
                        (ResponseKind::SaslAuthenticate(a.response), a.close)
                    }
                    _ => return Ok(()),
                };
                metrics::request_seconds(key, started.elapsed());
                match codec::encode_response(key, version, corr, &out) {
                    Ok(out) => {
                        let _ = otx.send(Some(codec::Frame::One(out)));
                    }
                    Err(e) => {
                        tracing::warn!(?key, version, error = %e, "cannot encode a response");
                        return Ok(());
                    }
                }
                if close {
                    return Ok(());
                }
                continue;
            }
            let client = ClientInfo {
                client_id: req
                    .header
                    .client_id
                    .as_ref()
                    .map(|c| c.to_string())
                    .unwrap_or_default(),
                host: format!("/{host}"),
                principal: auth.principal().clone(),
                authz: authz_cache.clone(),
            };
            let listener = listener.clone();
            // The request's id and span follow it to the brokers, their
            // flushes and commits (floe_broker::trace).
            let rid = floe_broker::trace::RequestId::next();
            let span = tracing::info_span!(
                "request",
                request_id = %rid,
                api = ?key,
                version,
                client_id = %client.client_id,
                principal = %client.principal,
            );
            match req.body {
                RequestKind::Produce(mut p) => {
                    // Sequenced here, in order; the wait runs on its own.
                    let no_response = p.acks == 0;
                    let check = ctx.authz.check(&ctx.view.current().acls, &client);
                    let denied = crate::authz::requests::produce(&mut p, &check);
                    // Recorded as it is read: the connection's next request
                    // waits for the mute, however many are pipelined.
                    let throttled = throttle(ctx, &mute, QuotaKind::Produce, version, &client, len as u64);
                    let fut = traced(rid.clone(), span.clone(), crate::nodes::LISTENER.scope(listener.clone(), ctx.produce_start(version, p))).await;
                    tokio::spawn(traced(rid.clone(), span.clone(), crate::nodes::LISTENER.scope(listener, async move {
                        let mut resp = fut.await;
                        resp.responses.extend(denied);
                        drop(room);
                        metrics::request_seconds(key, started.elapsed());
                        resp.throttle_time_ms = hold_back(QuotaKind::Produce, version, throttled).await;
                        if no_response {
                            let _ = otx.send(None);
                            return;
                        }
                        let out = codec::encode_response(key, version, corr, &ResponseKind::Produce(resp));
                        let _ = otx.send(out.ok().map(codec::Frame::One));
                    })));
                }
                RequestKind::Fetch(f) => {
                    // Record bytes go out as the owners returned them.
                    let (ctx, mute) = (ctx.clone(), mute.clone());
                    tokio::spawn(traced(rid.clone(), span.clone(), crate::nodes::LISTENER.scope(listener, async move {
                        let mut answer = ctx.fetch_in_session(version, &f).await;
                        let check = ctx.authz.check(&ctx.view.current().acls, &client);
                        crate::authz::requests::fetch(&mut answer, &check);
                        drop(room);
                        metrics::request_seconds(key, started.elapsed());
                        let bytes = answer.records.iter().flatten().map(|b| b.len() as u64).sum();
                        let throttled = throttle(&ctx, &mute, QuotaKind::Fetch, version, &client, bytes);
                        let throttled = hold_back(QuotaKind::Fetch, version, throttled).await;
                        answer.resp.throttle_time_ms = answer.resp.throttle_time_ms.max(throttled);
                        match codec::encode_fetch_response(version, corr, answer) {
                            Ok(out) => {
                                let _ = otx.send(Some(out));
                            }
                            Err(e) => tracing::warn!(?key, version, error = %e, "cannot encode a response"),
                        }
                    })));
                }
                mut body => {
                    let ctx = ctx.clone();
                    let snap = ctx.view.current();
                    let check = ctx.authz.check(&snap.acls, &client);
                    let verdict = crate::authz::requests::before(&mut body, version, &check, &snap);
                    drop(snap);
                    if matches!(verdict, crate::authz::requests::Verdict::Close) {
                        tracing::info!(%peer, principal = %client.principal, api = ?key, "an API with no ACL rule, refused; closing the connection");
                        drop(otx);
                        return Ok(());
                    }
                    let mut turn = lanes.enter(crate::ordering::lanes_of(&body));
                    tokio::spawn(traced(rid.clone(), span.clone(), crate::nodes::LISTENER.scope(listener, async move {
                        turn.wait().await;
                        let resp = match verdict {
                            crate::authz::requests::Verdict::Answer(r) => Some(*r),
                            crate::authz::requests::Verdict::Serve(merge) => {
                                let mut resp = handle(&ctx, version, body, &client, &check).await;
                                if let (Some(r), Some(merge)) = (resp.as_mut(), merge) {
                                    merge(r);
                                }
                                resp
                            }
                            crate::authz::requests::Verdict::Close => None,
                        };
                        // Its effect is done: the next request of its lanes may go.
                        drop(turn);
                        drop(room);
                        metrics::request_seconds(key, started.elapsed());
                        let out = resp.and_then(|r| {
                            codec::encode_response(key, version, corr, &r)
                                .map(codec::Frame::One)
                                .map_err(|e| tracing::warn!(?key, version, error = %e, "cannot encode a response"))
                                .ok()
                        });
                        // No answer: the connection closes (as Kafka does), never hangs.
                        if let Some(out) = out {
                            let _ = otx.send(Some(out));
                        }
                    })));
                }
            }
        }
    }
    .await;
    drop(tx);
    let _ = writer.await;
    result
}

/// `fut` as the work of request `id`: in its span, and with its id on the
/// calls it makes to brokers.
fn traced<F: std::future::Future>(
    id: floe_broker::trace::RequestId,
    span: tracing::Span,
    fut: F,
) -> impl std::future::Future<Output = F::Output> {
    use tracing::Instrument as _;
    floe_broker::trace::REQUEST_ID
        .scope(id, fut)
        .instrument(span)
}

/// Records `bytes` of `kind` against the client's quota and returns how
/// long it is throttled: the connection is muted that long (KIP-219), or,
/// at a version before KIP-219, [`hold_back`] delays the answer instead.
fn throttle(
    ctx: &Context,
    mute: &Mute,
    kind: QuotaKind,
    version: i16,
    client: &ClientInfo,
    bytes: u64,
) -> Duration {
    let now = tokio::time::Instant::now();
    let quotas = ctx.view.current().quotas.clone();
    let t = ctx.quotas.record(
        &quotas,
        kind,
        &client.principal.name,
        &client.client_id,
        bytes,
        now,
    );
    if kind.mutes_at(version) {
        mute.extend(now, t);
    }
    t
}

/// Holds an answer back for a throttle `t` at a version before KIP-219;
/// returns its `throttle_time_ms`.
async fn hold_back(kind: QuotaKind, version: i16, t: Duration) -> i32 {
    if !t.is_zero() && !kind.mutes_at(version) {
        tokio::time::sleep(t).await;
    }
    crate::quota::millis(t)
}

/// Writes a response frame: one buffer, or its chunks with vectored writes
/// (a Fetch's record pieces are written from where they are).
async fn write_frame<W: tokio::io::AsyncWrite + Unpin>(
    wr: &mut W,
    frame: codec::Frame,
) -> std::io::Result<()> {
    match frame {
        codec::Frame::One(b) => wr.write_all(&b).await,
        codec::Frame::Chunks(mut chunks) => {
            chunks.retain(|c| !c.is_empty());
            let mut first = 0;
            while first < chunks.len() {
                let slices: Vec<std::io::IoSlice<'_>> = chunks[first..]
                    .iter()
                    .take(64)
                    .map(|c| std::io::IoSlice::new(c))
                    .collect();
                let mut n = wr.write_vectored(&slices).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::WriteZero.into());
                }
                while n > 0 && first < chunks.len() {
                    let len = chunks[first].len();
                    if n >= len {
                        n -= len;
                        first += 1;
                    } else {
                        bytes::Buf::advance(&mut chunks[first], n);
                        n = 0;
                    }
                }
            }
            Ok(())
        }
    }
}

/// Answers one request (other than Produce and Fetch) for `client` as a
/// connection of this proxy would: the same ACL checks before it, the same
/// handler, the same filtering of the answer. The console asks through
/// this, so that it can show nothing the principal could not ask for
/// itself. `None`: an API with no ACL rule, refused.
pub async fn serve_as(
    ctx: &Context,
    client: &ClientInfo,
    version: i16,
    mut body: RequestKind,
) -> Option<ResponseKind> {
    let snap = ctx.view.current();
    let check = ctx.authz.check(&snap.acls, client);
    let verdict = crate::authz::requests::before(&mut body, version, &check, &snap);
    drop(snap);
    match verdict {
        crate::authz::requests::Verdict::Answer(r) => Some(*r),
        crate::authz::requests::Verdict::Serve(merge) => {
            let mut resp = handle(ctx, version, body, client, &check).await;
            if let (Some(r), Some(merge)) = (resp.as_mut(), merge) {
                merge(r);
            }
            resp
        }
        crate::authz::requests::Verdict::Close => None,
    }
}

/// Answers a Produce for `client` as a connection would: partitions of
/// topics it may not write to are refused with Kafka's error, the others
/// appended (no quota).
pub async fn produce_as(
    ctx: &Context,
    client: &ClientInfo,
    version: i16,
    mut req: kafka_protocol::messages::ProduceRequest,
) -> kafka_protocol::messages::ProduceResponse {
    let check = ctx.authz.check(&ctx.view.current().acls, client);
    let denied = crate::authz::requests::produce(&mut req, &check);
    let mut resp = ctx.produce_start(version, req).await.await;
    resp.responses.extend(denied);
    resp
}

/// Answers a Fetch for `client` as a connection would, its answer filtered
/// by the ACLs the same way (no fetch session, no quota).
pub async fn fetch_as(
    ctx: &Context,
    client: &ClientInfo,
    version: i16,
    req: &kafka_protocol::messages::FetchRequest,
) -> codec::FetchAnswer {
    let mut answer = ctx.fetch_in_session(version, req).await;
    let check = ctx.authz.check(&ctx.view.current().acls, client);
    crate::authz::requests::fetch(&mut answer, &check);
    answer
}

/// Answers a request other than Produce and Fetch, which the connection
/// loop answers itself (Produce is sequenced in order there; Fetch's records
/// are written uncopied).
async fn handle(
    ctx: &Context,
    version: i16,
    body: RequestKind,
    client: &ClientInfo,
    check: &crate::authz::Check,
) -> Option<ResponseKind> {
    Some(match &body {
        RequestKind::ApiVersions(_) => {
            ResponseKind::ApiVersions(handlers::api_versions_with(0, ctx.optional()))
        }
        RequestKind::AddPartitionsToTxn(r) => {
            ResponseKind::AddPartitionsToTxn(ctx.add_partitions_to_txn(version, r).await)
        }
        RequestKind::AddOffsetsToTxn(r) => {
            ResponseKind::AddOffsetsToTxn(ctx.add_offsets_to_txn(version, r).await)
        }
        RequestKind::TxnOffsetCommit(r) => {
            ResponseKind::TxnOffsetCommit(ctx.txn_offset_commit(version, r).await)
        }
        RequestKind::EndTxn(r) => ResponseKind::EndTxn(ctx.end_txn(version, r).await),
        RequestKind::DescribeTransactions(r) => {
            ResponseKind::DescribeTransactions(ctx.describe_transactions(version, r).await)
        }
        RequestKind::ListTransactions(r) => {
            ResponseKind::ListTransactions(ctx.list_transactions(version, r).await)
        }
        RequestKind::ShareGroupHeartbeat(r) => {
            ResponseKind::ShareGroupHeartbeat(ctx.share_group_heartbeat(r).await)
        }
        RequestKind::ShareGroupDescribe(r) => {
            ResponseKind::ShareGroupDescribe(ctx.share_group_describe(r).await)
        }
        RequestKind::ShareFetch(r) => ResponseKind::ShareFetch(ctx.share_fetch(r).await),
        RequestKind::ShareAcknowledge(r) => {
            ResponseKind::ShareAcknowledge(ctx.share_acknowledge(r).await)
        }
        RequestKind::DescribeShareGroupOffsets(r) => {
            ResponseKind::DescribeShareGroupOffsets(ctx.describe_share_group_offsets(r).await)
        }
        RequestKind::AlterShareGroupOffsets(r) => {
            ResponseKind::AlterShareGroupOffsets(ctx.alter_share_group_offsets(r).await)
        }
        RequestKind::DeleteShareGroupOffsets(r) => {
            ResponseKind::DeleteShareGroupOffsets(ctx.delete_share_group_offsets(r).await)
        }
        RequestKind::Metadata(r) => ResponseKind::Metadata(ctx.metadata(version, r).await),
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(ctx.list_offsets(version, r).await)
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(ctx.delete_records(version, r).await)
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(ctx.offset_for_leader_epoch(version, r).await)
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
        RequestKind::ConsumerGroupHeartbeat(r) => ResponseKind::ConsumerGroupHeartbeat(
            ctx.consumer_group_heartbeat(version, r, client).await,
        ),
        RequestKind::ConsumerGroupDescribe(r) => {
            ResponseKind::ConsumerGroupDescribe(ctx.consumer_group_describe(version, r).await)
        }
        RequestKind::DescribeProducers(r) => {
            ResponseKind::DescribeProducers(ctx.describe_producers(version, r).await)
        }
        RequestKind::DeleteGroups(r) => {
            ResponseKind::DeleteGroups(ctx.delete_groups(version, r).await)
        }
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(ctx.find_coordinator(version, r))
        }
        RequestKind::DescribeTopicPartitions(r) => {
            let snap = ctx.view.current();
            let nodes = ctx.kafka_nodes(&snap);
            ResponseKind::DescribeTopicPartitions(crate::topic_partitions::describe(
                &snap, &nodes, r,
            ))
        }
        RequestKind::DescribeUserScramCredentials(r) => ResponseKind::DescribeUserScramCredentials(
            crate::admin::scram::describe_user_scram_credentials(&ctx.view.current().scram, r),
        ),
        RequestKind::AlterUserScramCredentials(r) => ResponseKind::AlterUserScramCredentials(
            crate::admin::scram::alter_user_scram_credentials(ctx.meta.as_ref(), &ctx.view, r)
                .await,
        ),
        RequestKind::CreateAcls(r) => ResponseKind::CreateAcls(
            crate::acls::create_acls(r, check, ctx.authz.enabled(), ctx.meta.as_ref(), &ctx.view)
                .await,
        ),
        RequestKind::DescribeAcls(r) => {
            ResponseKind::DescribeAcls(crate::acls::describe_acls(r, check, ctx.authz.enabled()))
        }
        RequestKind::DeleteAcls(r) => ResponseKind::DeleteAcls(
            crate::acls::delete_acls(r, check, ctx.authz.enabled(), ctx.meta.as_ref(), &ctx.view)
                .await,
        ),
        RequestKind::DescribeClientQuotas(r) => ResponseKind::DescribeClientQuotas(
            crate::admin::quotas::describe_client_quotas(&ctx.view.current().quotas, r),
        ),
        RequestKind::AlterClientQuotas(r) => ResponseKind::AlterClientQuotas(
            crate::admin::quotas::alter_client_quotas(ctx.meta.as_ref(), &ctx.view, r).await,
        ),
        RequestKind::DescribeLogDirs(r) => {
            let nodes = ctx.kafka_nodes(&ctx.view.current());
            ResponseKind::DescribeLogDirs(
                crate::admin::log_dirs::describe_log_dirs(
                    ctx.meta.as_ref(),
                    &nodes,
                    ctx.me.id(),
                    version,
                    r,
                )
                .await,
            )
        }
        _ => {
            let nodes = ctx.kafka_nodes(&ctx.view.current());
            let resp = handle_admin(ctx.meta.as_ref(), &ctx.admin, &nodes, version, &body).await;
            if let Some(resp) = &resp {
                let created = created_partitions(&body, resp, ctx.admin.default_partitions);
                ctx.await_owned(&created).await;
            }
            return resp;
        }
    })
}

/// The topics a CreateTopics or CreatePartitions request created or grew
/// (as its answer says) with their partition counts now; none for any other
/// request, or for `validate_only`.
fn created_partitions(req: &RequestKind, resp: &ResponseKind, default: u32) -> Vec<(String, u32)> {
    let (topics, done): (Vec<(&str, u32)>, Vec<&str>) = match (req, resp) {
        (RequestKind::CreateTopics(q), ResponseKind::CreateTopics(r)) if !q.validate_only => (
            q.topics
                .iter()
                .map(|t| {
                    (
                        t.name.as_str(),
                        u32::try_from(t.num_partitions).unwrap_or(default),
                    )
                })
                .collect(),
            r.topics
                .iter()
                .filter(|t| t.error_code == 0)
                .map(|t| t.name.as_str())
                .collect(),
        ),
        (RequestKind::CreatePartitions(q), ResponseKind::CreatePartitions(r))
            if !q.validate_only =>
        {
            (
                q.topics
                    .iter()
                    .map(|t| (t.name.as_str(), u32::try_from(t.count).unwrap_or(0)))
                    .collect(),
                r.results
                    .iter()
                    .filter(|t| t.error_code == 0)
                    .map(|t| t.name.as_str())
                    .collect(),
            )
        }
        _ => return Vec::new(),
    };
    topics
        .into_iter()
        .filter(|(name, _)| done.contains(name))
        .map(|(name, count)| (name.to_string(), count))
        .collect()
}
