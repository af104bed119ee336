"""The internal planes over mTLS (`--internal-tls-ca/-cert/-key`, certificates made
by `floe certs`): three metadata nodes (Raft over TLS), two brokers, a proxy and the
indexer, each with its own certificate, serve Kafka clients. Raw HTTPS calls, as a
process on the network would make them, show the walls:

- without a member certificate: 401 at the metadata API, the broker RPC and the query
  API; a certificate of another CA does not get through the handshake; plain HTTP to a
  TLS port gets no answer; probes stay open;
- with a member certificate, only its part: a broker acts only as itself, a proxy
  never as a broker, only metadata nodes of the membership send Raft messages, only
  admins change the membership (403, counted);
- people on the query API: a bearer token's principal needs a topic READ ACL.
"""

import json
import secrets
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from floe_cluster import Cluster

pytestmark = [pytest.mark.timeout(400)]

TOKEN = "query-token-" + secrets.token_hex(12)


def certs(floe_bin, d, *names, ca="ca"):
    out = d / ca
    if not (out / "ca.pem").exists():
        subprocess.run([floe_bin, "certs", "ca", "--out", out], check=True, capture_output=True)
    for n in names:
        args = [floe_bin, "certs", "issue", n, "--ca-dir", out, "--out", out, "--host", "127.0.0.1"]
        if n == "alice":
            args.append("--user")
        subprocess.run([str(a) for a in args], check=True, capture_output=True)
    return out


def tls_env(dir_, name):
    return {"FLOE_INTERNAL_TLS_CA": str(dir_ / "ca.pem"),
            "FLOE_INTERNAL_TLS_CERT": str(dir_ / f"{name}.pem"),
            "FLOE_INTERNAL_TLS_KEY": str(dir_ / f"{name}.key")}


CERT_OF = {"meta1": "metadata-1", "meta2": "metadata-2", "meta3": "metadata-3", "broker1": "broker-1",
           "broker2": "broker-2", "proxy": "proxy", "indexer": "indexer", "admin": "admin"}


@pytest.fixture(scope="module")
def secured(floe_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("internal-tls")
    ca = certs(floe_bin, d, *CERT_OF.values(), "metadata-9", "alice")
    certs(floe_bin, d, "admin", ca="other-ca")
    tokens = d / "tokens"
    tokens.write_text(f"# people of the query API\nUser:carol {TOKEN}\n")
    def env(name):
        e = tls_env(ca, CERT_OF[name])
        if name == "indexer":
            e["FLOE_ADMIN_TOKEN_FILE"] = str(tokens)
        return e
    cluster = Cluster(floe_bin, d, metas=3, brokers=2, indexer=True, role_env=env, https=True,
                      proxy_flags=("--default-partitions", "2", "--authorizer", "acl",
                                   "--super-users", "User:ANONYMOUS"))
    cluster.ca = ca
    cluster.other_ca = d / "other-ca"
    yield cluster
    cluster.stop()


def context(cluster, cert=None, ca_dir=None):
    ctx = ssl.create_default_context(cafile=str(cluster.ca / "ca.pem"))
    ctx.check_hostname = False
    if cert:
        d = ca_dir or cluster.ca
        ctx.load_cert_chain(str(d / f"{cert}.pem"), str(d / f"{cert}.key"))
    return ctx


def call(cluster, addr, path, body=b"", cert=None, method="POST", headers=None, ca_dir=None,
         content_type="application/x-protobuf"):
    """(status, body) of a raw HTTPS request presenting `cert` (a name in the CA dir)."""
    req = urllib.request.Request(f"https://{addr}{path}", data=body if method == "POST" else None,
                                 method=method)
    req.add_header("content-type", content_type)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=15, context=context(cluster, cert, ca_dir)) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(tag, value):
    """A protobuf field: an int (varint) or a str/bytes (length-delimited)."""
    if isinstance(value, int):
        return varint(tag << 3) + varint(value)
    b = value.encode() if isinstance(value, str) else value
    return varint(tag << 3 | 2) + varint(len(b)) + b


def test_kafka_clients_work_through_an_mtls_cluster(secured):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    a = AdminClient({"bootstrap.servers": secured.kafka})
    a.create_topics([NewTopic("mtls", 2, 1)])["mtls"].result(30)
    p = Producer({"bootstrap.servers": secured.kafka, "acks": "all"})
    for i in range(20):
        p.produce("mtls", key=f"k{i}", value=f"v{i}")
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": secured.kafka, "group.id": "mtls-g", "auto.offset.reset": "earliest"})
    c.subscribe(["mtls"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 20 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert len(got) == 20
    # Three metadata nodes agree over TLS (the harness's `floe meta status` is an admin).
    st = secured.meta_status()
    assert len(st) == 3 and sum(1 for s, _, _ in st.values() if s == "Leader") == 1, st


def test_callers_without_a_member_certificate_are_refused(secured):
    meta = secured.metas[1].addr("meta")
    rpc = secured.brokers[0].addr("rpc")
    query = secured.indexer.admin
    for addr, path, method in ((meta, "/v1/watch", "POST"), (rpc, "/v1/produce", "POST"),
                               (query, "/v1/topics/mtls/records?key=k1", "GET")):
        status, body = call(secured, addr, path, method=method)
        assert status == 401, (addr, path, status, body)
        # A Kafka user's certificate of the same CA is no member either.
        assert call(secured, addr, path, method=method, cert="alice")[0] == 401
        # A certificate of another CA: the handshake fails.
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            call(secured, addr, path, method=method, cert="admin", ca_dir=secured.other_ca)
        # Plain HTTP to a TLS port: no HTTP answer.
        host, port = addr.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(f"{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n".encode())
            s.settimeout(10)
            try:
                answer = s.recv(4096)
            except (ConnectionError, socket.timeout):
                answer = b""
            assert not answer.startswith(b"HTTP/1.1 200"), answer
    # Members are served: the admin reads the cluster view, the indexer's records.
    assert call(secured, meta, "/v1/watch", cert="admin")[0] in (200, 421)
    status, body = call(secured, query, "/v1/topics/mtls/records?key=k1", cert="admin", method="GET")
    assert status == 200, body
    # Probes stay open (no certificate), over TLS.
    for role in (secured.brokers[0], secured.proxy, secured.indexer):
        assert call(secured, role.admin, "/readyz", method="GET")[0] == 200


def leader_addr(secured):
    return secured.metas[secured.meta_leader()].addr("meta")


def test_members_act_only_as_themselves(secured):
    meta = leader_addr(secured)
    heartbeat_1 = field(1, 1)
    # Broker 2 renews broker 1's lease, or commits as it: 403. As itself: served.
    status, body = call(secured, meta, "/v1/nodes/heartbeat", heartbeat_1, cert="broker-2")
    assert status == 403 and b"broker-2" in body, (status, body)
    assert call(secured, meta, "/v1/commit", field(1, 1), cert="broker-2")[0] == 403
    assert call(secured, meta, "/v1/nodes/heartbeat", field(1, 2), cert="broker-2")[0] == 200
    # A proxy never registers or renews a broker, nor commits.
    reg = field(1, 5) + field(2, "broker") + field(3, "127.0.0.1:1") + field(4, 1000)
    assert call(secured, meta, "/v1/nodes/register", reg, cert="proxy")[0] == 403
    assert call(secured, meta, "/v1/nodes/heartbeat", heartbeat_1, cert="proxy")[0] == 403
    assert call(secured, meta, "/v1/commit", field(1, 1), cert="proxy")[0] == 403
    # Only admins (and metadata nodes) change the Raft membership.
    add = field(1, 9) + field(2, "127.0.0.1:1")
    for who in ("indexer", "proxy", "broker-1"):
        assert call(secured, meta, "/v1/members/add", add, cert=who)[0] == 403
    # Raft: a broker cannot vote; a metadata certificate outside the membership
    # cannot either; a member cannot speak as another node.
    vote = json.dumps({"vote": {"leader_id": {"term": 1000, "node_id": 9}, "committed": False},
                       "last_log_id": None}).encode()
    for who in ("broker-1", "metadata-9"):
        status, body = call(secured, meta, "/raft/vote", vote, cert=who, content_type="application/json")
        assert status == 403, (who, status, body)
    status, body = call(secured, meta, "/raft/vote", vote, cert="metadata-2", content_type="application/json")
    assert status == 403 and b"as node 9" in body, body
    # The cluster still has its leader and both brokers.
    assert secured.meta_leader() in (1, 2, 3)
    assert call(secured, meta, "/v1/status", b"", cert="admin")[0] == 200


def test_bearer_tokens_need_topic_read_acls(secured):
    query = secured.indexer.admin
    path = "/v1/topics/mtls/records?key=k3"
    bearer = {"authorization": f"Bearer {TOKEN}"}
    assert call(secured, query, path, method="GET", headers={"authorization": "Bearer wrong-token-000000"})[0] == 401
    status, body = call(secured, query, path, method="GET", headers=bearer)
    assert status == 403 and b"User:carol" in body, (status, body)
    subprocess.run([secured.bin, "acl", "add", "--bootstrap", secured.kafka, "--allow-principal", "User:carol",
                    "--operation", "READ", "--topic", "mtls"], check=True, capture_output=True, timeout=60)
    deadline = time.monotonic() + 30
    while True:
        status, body = call(secured, query, path, method="GET", headers=bearer)
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert status == 200, body
    assert [r["value"] for r in json.loads(body)["records"]] == ["v3"]
    # READ on one topic only.
    assert call(secured, query, "/v1/topics/other/records?key=x", method="GET", headers=bearer)[0] == 403


def test_refusals_are_counted(secured):
    call(secured, secured.brokers[0].addr("rpc"), "/v1/produce")
    status, body = call(secured, secured.brokers[0].admin, "/metrics", method="GET")
    assert status == 200
    text = body.decode()
    assert any(l.startswith("floe_http_unauthenticated_total") and 'reason="no_certificate"' in l
               for l in text.splitlines()), text[-2000:]
    # A member beyond its part is logged with its identity (metadata nodes
    # serve no /metrics yet; floe_http_forbidden_total counts it there).
    meta = leader_addr(secured)
    assert call(secured, meta, "/v1/nodes/heartbeat", field(1, 1), cert="broker-2")[0] == 403
    leader = secured.metas[secured.meta_leader()]
    deadline = time.monotonic() + 10
    while "may not renew or drain node 1" not in leader.log_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, leader.tail()
        time.sleep(0.2)
