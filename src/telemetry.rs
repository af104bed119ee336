//! Where the process's logs and traces go: log lines on stderr (text, or
//! JSON with `--log-format json`), filtered by `RUST_LOG`; and, with
//! `--otlp-endpoint` (`OTEL_EXPORTER_OTLP_ENDPOINT`), every span also
//! exported as an OpenTelemetry span over OTLP/HTTP (protobuf, to
//! `{endpoint}/v1/traces`), with the W3C trace context carried on the
//! internal RPC (`floe_broker::trace`). Traces are off without an endpoint:
//! nothing is sent anywhere by default.

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Ends the export when dropped: the spans still buffered are sent first
/// (a process killed with SIGKILL loses them).
pub struct Traces(SdkTracerProvider);

impl Drop for Traces {
    fn drop(&mut self) {
        if let Err(e) = self.0.shutdown() {
            eprintln!("floe: exporting the last traces: {e}");
        }
    }
}

/// The OTLP/HTTP address of traces for a collector's base `endpoint`
/// (`http://host:4318` → `http://host:4318/v1/traces`); an endpoint that
/// names a path already is kept as it is.
pub fn traces_url(endpoint: &str) -> anyhow::Result<String> {
    let url = url::Url::parse(endpoint)
        .with_context(|| format!("--otlp-endpoint {endpoint:?}: not a URL"))?;
    anyhow::ensure!(
        matches!(url.scheme(), "http" | "https"),
        "--otlp-endpoint {endpoint:?}: http:// or https:// (OTLP over HTTP)"
    );
    Ok(match url.path() {
        "" | "/" => format!("{}/v1/traces", endpoint.trim_end_matches('/')),
        _ => endpoint.to_string(),
    })
}

/// Installs the log lines (as `json` or text) filtered by `filter`, and the
/// trace export when `otlp` names a collector, as service `service` (unless
/// `OTEL_SERVICE_NAME` names it).
pub fn init(
    json: bool,
    filter: tracing_subscriber::EnvFilter,
    otlp: Option<&str>,
    service: &str,
) -> anyhow::Result<Option<Traces>> {
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = if json {
        // The event's fields at the top level beside `message`, and the
        // span it happened in, so that a pipeline can index them.
        lines
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .boxed()
    } else {
        lines.boxed()
    };
    let Some(endpoint) = otlp.filter(|e| !e.is_empty()) else {
        tracing_subscriber::registry()
            .with(filter)
            .with(lines)
            .try_init()
            .context("installing the log lines")?;
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(traces_url(endpoint)?)
        .build()
        .context("--otlp-endpoint: the exporter")?;
    let name = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| service.to_string());
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(name)
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let tracer = provider.tracer("floe");
    tracing_subscriber::registry()
        .with(filter)
        .with(lines)
        .with(tracing_opentelemetry::layer().with_tracer(tracer))
        .try_init()
        .context("installing the log lines and the trace export")?;
    Ok(Some(Traces(provider)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collectors_base_address_gets_the_traces_path() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otlp.example/custom/traces").unwrap(),
            "https://otlp.example/custom/traces"
        );
        assert!(traces_url("collector:4317").is_err());
        assert!(traces_url("grpc://collector:4317").is_err());
    }
}
