"""The internal planes with a cluster secret (`--cluster-secret-file`): three metadata
nodes (Raft), two brokers, a proxy and the indexer sign every request to each other,
and a Kafka client produces and consumes through them. A process without the secret
(raw HTTP, as an attacker on the network would send it) is refused with 401 at the
metadata API, the broker RPC and the query API, whatever it signs with; a signed
request replayed is refused too; health probes and /metrics stay open, and count
the refusals."""

import hashlib
import hmac
import os
import secrets
import time
import urllib.error
import urllib.request

import pytest

from floe_cluster import Cluster

pytestmark = [pytest.mark.timeout(300)]

SECRET = "floe-test-cluster-secret-" + secrets.token_hex(8)


def sign(secret, method, path, body=b"", ts=None, nonce=None):
    ts = ts if ts is not None else int(time.time() * 1000)
    nonce = nonce or secrets.token_hex(16)
    msg = f"v1\n{method}\n{path}\n{ts}\n{nonce}\n{hashlib.sha256(body).hexdigest()}".encode()
    return f"v1 ts={ts} nonce={nonce} sig={hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()}"


def call(addr, path, method="POST", body=b"", header=None):
    """(status, body) of a raw HTTP request."""
    req = urllib.request.Request(f"http://{addr}{path}", data=body if method == "POST" else None, method=method)
    req.add_header("content-type", "application/x-protobuf")
    if header:
        req.add_header("x-floe-auth", header)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture(scope="module")
def secured(floe_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster-auth")
    secret_file = d / "cluster-secret"
    secret_file.write_text(f"# the cluster's secret\n{SECRET}\n")
    old = os.environ.get("FLOE_CLUSTER_SECRET_FILE")
    os.environ["FLOE_CLUSTER_SECRET_FILE"] = str(secret_file)
    try:
        cluster = Cluster(floe_bin, d, metas=3, brokers=2, indexer=True)
    finally:
        if old is None:
            os.environ.pop("FLOE_CLUSTER_SECRET_FILE", None)
        else:
            os.environ["FLOE_CLUSTER_SECRET_FILE"] = old
    yield cluster
    cluster.stop()


def test_a_signed_cluster_serves_kafka_clients(secured):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    a = AdminClient({"bootstrap.servers": secured.kafka})
    a.create_topics([NewTopic("signed", 2, 1)])["signed"].result(30)
    p = Producer({"bootstrap.servers": secured.kafka, "acks": "all"})
    for i in range(20):
        p.produce("signed", value=f"v{i}")
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": secured.kafka, "group.id": "signed-g", "auto.offset.reset": "earliest"})
    c.subscribe(["signed"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 20 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert len(got) == 20


def test_unsigned_and_foreign_requests_are_refused_with_401(secured):
    meta = secured.metas[1].addr("meta")
    rpc = secured.brokers[0].addr("rpc")
    query = secured.indexer.admin
    for addr, path, method in ((meta, "/v1/watch", "POST"), (rpc, "/v1/produce", "POST"),
                               (query, "/v1/topics/signed/records?key=x", "GET")):
        status, body = call(addr, path, method)
        assert status == 401, (addr, path, status, body)
        assert b"cluster secret" in body
        forged = sign("not-the-cluster-secret-000", method, path)
        assert call(addr, path, method, header=forged)[0] == 401
        assert call(addr, path, method, header="v1 nonsense")[0] == 401
    # A request signed with the secret is served; the same bytes again are not.
    header = sign(SECRET, "POST", "/v1/watch")
    assert call(meta, "/v1/watch", header=header)[0] == 200
    assert call(meta, "/v1/watch", header=header)[0] == 401
    # A signature from ten minutes ago is refused.
    old = sign(SECRET, "POST", "/v1/watch", ts=int((time.time() - 600) * 1000))
    assert call(meta, "/v1/watch", header=old)[0] == 401


def test_probes_and_metrics_stay_open_and_count_refusals(secured):
    for role in (secured.brokers[0], secured.proxy, secured.indexer):
        assert call(role.admin, "/readyz", "GET")[0] == 200
    call(secured.brokers[0].addr("rpc"), "/v1/produce")
    status, body = call(secured.brokers[0].admin, "/metrics", "GET")
    assert status == 200
    lines = [l for l in body.decode().splitlines()
             if l.startswith("floe_http_unauthenticated_total") and 'server="broker_rpc"' in l]
    assert lines and sum(float(l.rsplit(" ", 1)[1]) for l in lines) >= 1, lines
