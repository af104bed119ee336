//! A request's trail through the processes it crosses. A proxy gives each
//! Kafka request an id ([`RequestId::next`]) and runs it in a `request`
//! span; the internal RPC carries the id ([`REQUEST_ID_HEADER`]) and the
//! W3C trace context of the caller's span (`traceparent`, when traces are
//! exported over OTLP), and the broker serves the call in an `rpc` span
//! that names the same id, as a child of the caller's span. A produced
//! batch keeps the span it was sequenced in, so that the flush that writes
//! it follows from it (a link, in OpenTelemetry's terms) and says in it
//! when its WAL object is committed: one id, in the logs and in the trace,
//! from the proxy through the flush and the commit.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::HeaderMap;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The header carrying a request's id on the internal RPC.
pub const REQUEST_ID_HEADER: &str = "x-floe-request-id";

/// The longest request id taken from a header.
const MAX_ID_LEN: usize = 64;

tokio::task_local! {
    /// The Kafka request this task works for: set by the proxy around each
    /// request, and by a broker around each call that named one.
    pub static REQUEST_ID: RequestId;
}

/// A Kafka request's id, unique across the cluster's processes in
/// practice: this process's random prefix and a counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(Arc<str>);

static NEXT: AtomicU64 = AtomicU64::new(1);

impl RequestId {
    /// A new id for a request received here.
    pub fn next() -> Self {
        static PREFIX: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
        let prefix = PREFIX.get_or_init(|| {
            let u = uuid::Uuid::new_v4();
            let b = u.as_bytes();
            u32::from_be_bytes([b[0], b[1], b[2], b[3]])
        });
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Self(format!("{prefix:08x}-{n:x}").into())
    }

    /// An id as a header carried it: printable ASCII without spaces, at
    /// most 64 characters; anything else is not taken.
    pub fn parse(s: &str) -> Option<Self> {
        let fine = !s.is_empty()
            && s.len() <= MAX_ID_LEN
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
        fine.then(|| Self(s.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The id of the request this task works for, if any.
pub fn current() -> Option<RequestId> {
    REQUEST_ID.try_with(RequestId::clone).ok()
}

/// Puts the current request's id and the current span's trace context
/// (nothing when traces are not exported) on an outgoing call's headers.
pub fn inject(headers: &mut HeaderMap) {
    if let Some(id) = current()
        && let Ok(v) = axum::http::HeaderValue::from_str(id.as_str())
    {
        headers.insert(REQUEST_ID_HEADER, v);
    }
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut HeaderInjector(headers));
    });
}

/// The span a call to `path` is served in, with the request id its
/// headers carry, a child of the caller's span when they carry a trace
/// context.
pub fn rpc_span(path: &'static str, headers: &HeaderMap) -> (tracing::Span, Option<RequestId>) {
    let id = headers
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(RequestId::parse);
    let span = tracing::info_span!(
        "rpc",
        route = path,
        request_id = id.as_ref().map(RequestId::as_str)
    );
    let parent =
        opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)));
    // Without a trace context (traces not exported) this sets nothing.
    let _ = span.set_parent(parent);
    (span, id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ_and_a_header_is_taken_only_when_it_is_plain_and_short() {
        let (a, b) = (RequestId::next(), RequestId::next());
        assert_ne!(a, b);
        assert_eq!(RequestId::parse(a.as_str()), Some(a));
        assert_eq!(RequestId::parse(""), None);
        assert_eq!(RequestId::parse("has space"), None);
        assert_eq!(RequestId::parse("new\nline"), None);
        assert_eq!(RequestId::parse(&"x".repeat(MAX_ID_LEN + 1)), None);
        assert!(RequestId::parse(&"x".repeat(MAX_ID_LEN)).is_some());
    }

    #[tokio::test]
    async fn the_id_in_scope_goes_on_a_call_and_comes_back_off_it() {
        let mut headers = HeaderMap::new();
        inject(&mut headers);
        assert!(
            headers.get(REQUEST_ID_HEADER).is_none(),
            "no request, no id"
        );
        let id = RequestId::next();
        REQUEST_ID
            .scope(id.clone(), async {
                inject(&mut headers);
            })
            .await;
        let (_, got) = rpc_span("/rpc/produce", &headers);
        assert_eq!(got, Some(id));
    }
}
