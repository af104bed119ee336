//! The proxy's metrics, recorded on the process's `metrics` recorder (the
//! `floe` binary serves them on `/metrics`).

use kafka_protocol::messages::ApiKey;
use metrics::{Unit, counter, describe_counter, describe_histogram, histogram};

const CONNECTIONS: &str = "floe_proxy_connections_total";
const REQUESTS: &str = "floe_proxy_requests_total";
const BYTES_IN: &str = "floe_proxy_bytes_in_total";
const BYTES_OUT: &str = "floe_proxy_bytes_out_total";
const BAD_REQUESTS: &str = "floe_proxy_bad_requests_total";
const API_REQUESTS: &str = "floe_proxy_api_requests_total";
const REFUSED: &str = "floe_proxy_connections_refused_total";
const IDLE_CLOSED: &str = "floe_proxy_connections_idle_closed_total";
const AUTO_CREATE_DEFERRED: &str = "floe_proxy_auto_create_deferred_total";
const FETCHES: &str = "floe_proxy_fetches_total";
const THROTTLED: &str = "floe_proxy_throttled_total";
const THROTTLE_MS: &str = "floe_proxy_throttle_ms_total";
const PRODUCE_ERRORS: &str = "floe_proxy_produce_errors_total";
const REQUEST_SECONDS: &str = "floe_proxy_request_seconds";
const AUTHENTICATIONS: &str = "floe_proxy_authentications_total";
const AUTH_FAILURES: &str = "floe_proxy_authentication_failures_total";
const AUTHZ_DENIED: &str = "floe_proxy_authorization_denied_total";
const TLS_HANDSHAKE_FAILURES: &str = "floe_proxy_tls_handshake_failures_total";
const TLS_RELOADS: &str = "floe_proxy_tls_reloads_total";

/// Describes the proxy's metrics and registers its counters at zero.
pub(crate) fn register() {
    describe_counter!(CONNECTIONS, "Kafka connections accepted");
    describe_counter!(REQUESTS, "request frames read");
    describe_counter!(
        BYTES_IN,
        "bytes of Kafka request frames read, size prefixes included"
    );
    describe_counter!(
        BYTES_OUT,
        "bytes of Kafka response frames written, size prefixes included"
    );
    describe_counter!(
        BAD_REQUESTS,
        "requests that could not be read or decoded, or whose API key or version is not supported (the connection is closed)"
    );
    describe_counter!(
        API_REQUESTS,
        "decoded requests by API key (`api` label: Produce, Fetch, …)"
    );
    describe_counter!(
        REFUSED,
        "connections closed at accept because a limit was reached (`reason`: max_connections, max_connections_per_ip)"
    );
    describe_counter!(
        IDLE_CLOSED,
        "connections closed after --connections-max-idle-ms without a request"
    );
    describe_counter!(
        AUTO_CREATE_DEFERRED,
        "topics named in Metadata requests that were not auto-created because of --auto-create-max-topics-per-request"
    );
    describe_counter!(
        FETCHES,
        "Fetch requests by fetch session use (`session`: none, opened, incremental, refused)"
    );
    describe_counter!(
        THROTTLED,
        "answers throttled by a client quota (`quota`: produce, fetch)"
    );
    describe_counter!(
        THROTTLE_MS,
        "throttle time given to clients over their quota, in milliseconds (`quota`: produce, fetch)"
    );
    describe_counter!(
        PRODUCE_ERRORS,
        "partitions of Produce requests answered with an error (`error`: the Kafka error's name)"
    );
    describe_histogram!(
        REQUEST_SECONDS,
        Unit::Seconds,
        "from a request decoded to its answer encoded, by API key (`api` label), a Fetch's or ShareFetch's wait for data included"
    );
    describe_counter!(
        AUTHENTICATIONS,
        "successful SASL authentications and re-authentications (`mechanism`)"
    );
    describe_counter!(
        AUTH_FAILURES,
        "failed SASL authentications (`mechanism`; `reason`: malformed, unknown_user, bad_credentials, unsupported, out_of_order, mechanism, state, expired)"
    );
    describe_counter!(
        AUTHZ_DENIED,
        "operations on resources refused by the authorizer (`resource_type`, `operation`): a whole request or some of its topics, groups or ids"
    );
    describe_counter!(
        TLS_HANDSHAKE_FAILURES,
        "TLS connections closed before their handshake completed (a plaintext client, a bad or missing client certificate, a timeout)"
    );
    describe_counter!(
        TLS_RELOADS,
        "times the TLS files were read again after they changed (`result`: ok, failed: the old ones are kept)"
    );
    counter!(IDLE_CLOSED).increment(0);
    counter!(AUTO_CREATE_DEFERRED).increment(0);
    counter!(CONNECTIONS).increment(0);
    counter!(REQUESTS).increment(0);
    counter!(BYTES_IN).increment(0);
    counter!(BYTES_OUT).increment(0);
    counter!(BAD_REQUESTS).increment(0);
}

/// A SASL authentication that succeeded.
pub(crate) fn authenticated(mechanism: &'static str) {
    counter!(AUTHENTICATIONS, "mechanism" => mechanism).increment(1);
}

/// A SASL authentication that failed, and why.
pub(crate) fn authentication_failed(mechanism: &'static str, reason: &'static str) {
    counter!(AUTH_FAILURES, "mechanism" => mechanism, "reason" => reason).increment(1);
}

/// A TLS handshake that did not complete.
pub(crate) fn tls_handshake_failed() {
    counter!(TLS_HANDSHAKE_FAILURES).increment(1);
}

/// The TLS files read again: in use (`ok`), or not loadable.
pub(crate) fn tls_reload(ok: bool) {
    counter!(TLS_RELOADS, "result" => if ok { "ok" } else { "failed" }).increment(1);
}

/// An answer throttled for `time` by a `quota` (produce, fetch).
pub(crate) fn throttled(quota: &'static str, time: std::time::Duration) {
    counter!(THROTTLED, "quota" => quota).increment(1);
    counter!(THROTTLE_MS, "quota" => quota)
        .increment(u64::try_from(time.as_millis()).unwrap_or(u64::MAX));
}

/// A partition of a Produce answered with Kafka error `code` (not 0).
pub(crate) fn produce_error(code: i16) {
    use kafka_protocol::ResponseError;
    let error = match ResponseError::try_from_code(code) {
        Some(ResponseError::Unknown(_)) | None => code.to_string(),
        Some(e) => format!("{e:?}"),
    };
    counter!(PRODUCE_ERRORS, "error" => error).increment(1);
}

/// A request (or part of one) refused by the authorizer.
pub(crate) fn authorization_denied(
    rt: floe_metadata::acl::ResourceType,
    op: floe_metadata::acl::Operation,
) {
    counter!(AUTHZ_DENIED, "resource_type" => rt.name(), "operation" => op.name()).increment(1);
}

/// A Fetch and how it used a fetch session.
pub(crate) fn fetch(session: &'static str) {
    counter!(FETCHES, "session" => session).increment(1);
}

pub(crate) fn connection() {
    counter!(CONNECTIONS).increment(1);
}

/// A request frame was read.
/// A request frame of `bytes` (its size prefix included) was read.
pub(crate) fn request(bytes: u64) {
    counter!(REQUESTS).increment(1);
    counter!(BYTES_IN).increment(bytes);
}

/// A response frame of `bytes` (its size prefix included) is written.
pub(crate) fn bytes_out(bytes: u64) {
    counter!(BYTES_OUT).increment(bytes);
}

/// A connection was closed at accept (`reason`: the limit reached).
pub(crate) fn refused(reason: &'static str) {
    counter!(REFUSED, "reason" => reason).increment(1);
}

pub(crate) fn idle_closed() {
    counter!(IDLE_CLOSED).increment(1);
}

/// `n` topics of a Metadata request were left for a later request.
pub(crate) fn auto_create_deferred(n: usize) {
    counter!(AUTO_CREATE_DEFERRED).increment(n as u64);
}

pub(crate) fn bad_request() {
    counter!(BAD_REQUESTS).increment(1);
}

/// A request of API `key` was answered `took` after it was decoded.
pub(crate) fn request_seconds(key: ApiKey, took: std::time::Duration) {
    histogram!(REQUEST_SECONDS, "api" => format!("{key:?}")).record(took.as_secs_f64());
}

/// A request of a supported API key and version, about to be handled.
pub(crate) fn api_request(key: ApiKey) {
    counter!(API_REQUESTS, "api" => format!("{key:?}")).increment(1);
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::ApiKey;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    #[test]
    fn requests_are_counted_in_total_and_by_api_key() {
        let recorder = DebuggingRecorder::new();
        let snap = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            super::register();
            for key in [ApiKey::Produce, ApiKey::Produce, ApiKey::Fetch] {
                super::request(100);
                super::api_request(key);
            }
            super::bytes_out(60);
            super::produce_error(6);
            super::produce_error(6);
            super::produce_error(-12345);
            super::request_seconds(ApiKey::ShareFetch, std::time::Duration::from_millis(7));
        });
        let values: Vec<(String, Vec<String>, DebugValue)> = snap
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(k, .., v)| {
                let labels = k
                    .key()
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()));
                (k.key().name().to_string(), labels.collect(), v)
            })
            .collect();
        let value = |name: &str, label: &[&str]| {
            values
                .iter()
                .find(|(n, l, _)| n == name && l == label)
                .map(|(.., v)| v)
        };
        assert_eq!(value(super::REQUESTS, &[]), Some(&DebugValue::Counter(3)));
        assert_eq!(value(super::BYTES_IN, &[]), Some(&DebugValue::Counter(300)));
        assert_eq!(value(super::BYTES_OUT, &[]), Some(&DebugValue::Counter(60)));
        assert_eq!(
            value(super::BAD_REQUESTS, &[]),
            Some(&DebugValue::Counter(0))
        );
        assert_eq!(
            value(super::API_REQUESTS, &["api=Produce"]),
            Some(&DebugValue::Counter(2))
        );
        assert_eq!(
            value(super::API_REQUESTS, &["api=Fetch"]),
            Some(&DebugValue::Counter(1))
        );
        // Answer times by API key, in seconds.
        assert!(matches!(
            value(super::REQUEST_SECONDS, &["api=ShareFetch"]),
            Some(DebugValue::Histogram(v)) if v.len() == 1 && (v[0].into_inner() - 0.007).abs() < 1e-9
        ));
        // Produce errors by name; a code without one by its number.
        assert_eq!(
            value(super::PRODUCE_ERRORS, &["error=NotLeaderOrFollower"]),
            Some(&DebugValue::Counter(2))
        );
        assert_eq!(
            value(super::PRODUCE_ERRORS, &["error=-12345"]),
            Some(&DebugValue::Counter(1))
        );
    }
}
