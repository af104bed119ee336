"""Traces and the request id (issue 43): with `--otlp-endpoint`
(`OTEL_EXPORTER_OTLP_ENDPOINT`) every process exports its spans over
OTLP/HTTP, and one produce is one trace from the proxy's `request` span,
through the broker's `rpc` span (a child, by the W3C trace context the
internal RPC carries), to the broker's `flush` span that follows from it (a
link). The same request id is in both processes' spans and in the broker's
JSON log line saying where the produce was committed.

The collector is a real OTLP/HTTP receiver: a small HTTP server here that
decodes each export with the OpenTelemetry project's own protobuf classes
(`opentelemetry-proto`), as a collector would."""

import http.server
import json
import threading
import time

import pytest

from floe_cluster import Cluster

pytestmark = [pytest.mark.timeout(180)]

trace_pb2 = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
confluent_kafka = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402


class Collector:
    """An OTLP/HTTP traces receiver on 127.0.0.1 (port 0): the spans
    received, each as a dict with its service."""

    def __init__(self):
        self.spans = []
        self.lock = threading.Lock()
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status = 200
                if self.path != "/v1/traces" or "protobuf" not in self.headers.get("Content-Type", ""):
                    status = 404
                else:
                    req = trace_pb2.ExportTraceServiceRequest()
                    req.ParseFromString(body)
                    collector.add(req)
                answer = trace_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, req):
        out = []
        for rs in req.resource_spans:
            attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append({
                        "service": attrs.get("service.name"),
                        "name": s.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent": s.parent_span_id.hex(),
                        "attrs": {a.key: (a.value.string_value or a.value.int_value) for a in s.attributes},
                        "links": [(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                    })
        with self.lock:
            self.spans.extend(out)

    def find(self, pred):
        with self.lock:
            return [s for s in self.spans if pred(s)]

    def stop(self):
        self.server.shutdown()


@pytest.fixture
def traced_cluster(floe_bin, tmp_path):
    collector = Collector()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "FLOE_LOG_FORMAT": "json",
           # The produce's commit is told at debug level, in its request's span.
           "RUST_LOG": "info,floe_broker::partitions::flush=debug"}
    cluster = Cluster(floe_bin, tmp_path, metas=1, brokers=1, role_env=lambda name: env)
    yield cluster, collector
    cluster.stop()
    collector.stop()


def wait_for(what, fn, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        assert time.monotonic() < deadline, f"no {what} in {timeout} s"
        time.sleep(0.2)


def test_a_produce_is_one_trace_from_the_proxy_through_the_brokers_flush(traced_cluster):
    cluster, collector = traced_cluster
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([confluent_kafka.admin.NewTopic("traced", 1)]).values():
        f.result(30)
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    p.produce("traced", value=b"followed", partition=0)
    assert p.flush(30) == 0

    # The proxy's span of the Produce request, with its id.
    produce = wait_for("Produce span from the proxy", lambda: collector.find(
        lambda s: s["service"] == "floe-proxy" and s["name"] == "request" and s["attrs"].get("api") == "Produce"))[0]
    rid = produce["attrs"]["request_id"]
    assert rid and produce["parent"] == "", produce
    # The broker served its call in the same trace, as the request span's child, with the same id.
    rpc = wait_for("the broker's produce call in the request's trace", lambda: collector.find(
        lambda s: s["service"] == "floe-broker" and s["name"] == "rpc" and s["trace_id"] == produce["trace_id"]
        and s["attrs"].get("route") == "/rpc/produce"))[0]
    assert rpc["parent"] == produce["span_id"], (rpc, produce)
    assert rpc["attrs"].get("request_id") == rid, rpc
    # The flush that wrote it follows from the call (a link), and names its WAL object.
    flush = wait_for("a flush linked to the call", lambda: collector.find(
        lambda s: s["service"] == "floe-broker" and s["name"] == "flush"
        and (rpc["trace_id"], rpc["span_id"]) in s["links"]))[0]
    assert flush["attrs"].get("object", "").startswith("wal/"), flush
    assert flush["attrs"].get("produces", 0) >= 1, flush

    # The broker's JSON log says where the produce was committed, in the
    # request's span: the same id, the same WAL object.
    broker = cluster.brokers[0]

    def committed():
        for line in broker.log_path.read_text().splitlines():
            if line.startswith("{"):
                e = json.loads(line)
                if e.get("message") == "produce committed" and e.get("span", {}).get("request_id") == rid:
                    return e
        return None

    line = wait_for("a 'produce committed' log line with the request id", committed)
    assert line["object"] == flush["attrs"]["object"], (line, flush)
    assert line["first_offset"] == line["last_offset"] == 0, line


def test_without_an_endpoint_nothing_is_exported_and_a_bad_one_is_refused(floe_bin, tmp_path):
    import subprocess
    bad = subprocess.run([str(floe_bin), "standalone", "--otlp-endpoint", "collector:4317"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--otlp-endpoint" in bad.stderr, bad.stderr
