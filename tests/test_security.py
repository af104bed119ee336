"""Kafka listeners with TLS and SASL, with real clients: confluent-kafka, kafka-python,
aiokafka, kafkajs and kcat over SASL_SSL with PLAIN and SCRAM, mTLS with kcat; failed
authentication, clients speaking the wrong protocol, certificate reload and
re-authentication (KIP-368). SCRAM users are made with `floe user`; certificates
with the `openssl` lines docs/security.md gives."""

import asyncio
import json
import os
import pathlib
import re
import shutil
import socket
import ssl
import struct
import subprocess
import time
import urllib.request
import uuid

import pytest

from conftest import Standalone, port_of, read_ports
from test_kafka_bad_input import recv_exact

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

JS_DIR = pathlib.Path(__file__).resolve().parent / "js"
PASSWORD = "alice-secret-Pa55"
FILE_PASSWORD = "bob-file-secret"


# ---------------------------------------------------------------- certificates

def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d, name):
    """A CA: NAME.key, NAME.pem (the lines of docs/security.md)."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-days", "3650", "-subj", f"/CN=Floe {name}", "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)


def make_cert(d, ca, name, subject, ext):
    """A certificate NAME.pem with key NAME.key signed by CA, with extensions EXT."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-subj", subject, "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    (d / f"{name}.ext").write_text(ext)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "825", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)


SERVER_EXT = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
CLIENT_EXT = "extendedKeyUsage=clientAuth\n"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    make_ca(d, "ca")
    make_cert(d, "ca", "server", "/CN=localhost", SERVER_EXT)
    make_cert(d, "ca", "client", "/CN=alice-cert/OU=eng/O=Floe", CLIENT_EXT)
    # A second CA and a server certificate from it, for the reload test.
    make_ca(d, "ca2")
    make_cert(d, "ca2", "server2", "/CN=localhost", SERVER_EXT)
    return d


# ---------------------------------------------------------------- the server

LISTENERS = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]


class SecureStandalone(Standalone):
    """`floe standalone` with a listener of each protocol. The first start binds port 0
    everywhere; a restart asks for the same ports again."""

    def __init__(self, floe_bin, workdir, certs, **options):
        super().__init__(floe_bin, workdir, name="secure", **options)
        self.certs = certs
        self.ports = {name: 0 for name in LISTENERS}
        self.tls_dir = pathlib.Path(workdir) / "tls"
        self.tls_dir.mkdir(exist_ok=True)
        # Files the server reads (copied: the reload test replaces them).
        for src, dst in (("server.pem", "server.pem"), ("server.key", "server.key"), ("ca.pem", "clients-ca.pem")):
            shutil.copy(certs / src, self.tls_dir / dst)
        (self.tls_dir / "plain-users").write_text(f"# PLAIN users\nbob:{FILE_PASSWORD}\n")

    def args(self):
        listeners = ",".join(f"{n}://127.0.0.1:{self.ports[n]}" for n in LISTENERS)
        return super().args() + [
            "--listeners", listeners,
            "--ssl-certfile", str(self.tls_dir / "server.pem"),
            "--ssl-keyfile", str(self.tls_dir / "server.key"),
            "--ssl-cafile", str(self.tls_dir / "clients-ca.pem"),
            "--ssl-client-auth", "requested",
            "--ssl-principal-mapping-rules", "RULE:^CN=(.*?),OU=.*$/$1/L,DEFAULT",
            "--ssl-reload-interval-ms", "200",
            "--sasl-plain-users-file", str(self.tls_dir / "plain-users"),
        ]

    def start(self):
        super().start()
        ports = json.loads(self.ports_path.read_text())
        for n in LISTENERS:
            self.ports[n] = port_of(ports[f"kafka.{n.lower()}"])
        return self

    def addr(self, listener):
        return f"127.0.0.1:{self.ports[listener]}"

    def metrics(self):
        with urllib.request.urlopen(self.admin_url + "/metrics", timeout=5) as r:
            return r.read().decode()

    def metric(self, name, **labels):
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name):
                continue
            m = re.match(r'^(\w+)(?:\{(.*)\})? (\S+)$', line)
            if not m or m.group(1) != name:
                continue
            got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            if all(got.get(k) == v for k, v in labels.items()):
                total += float(m.group(3))
        return total


@pytest.fixture(scope="module")
def secure(floe_bin, tmp_path_factory, certs):
    s = SecureStandalone(floe_bin, tmp_path_factory.mktemp("secure"), certs,
                         connections_max_reauth_ms=3000,
                         connection_failed_authentication_delay_ms=50)
    s.start()
    env = dict(os.environ, FLOE_USER_PASSWORD=PASSWORD)
    for mech in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        res = subprocess.run([str(floe_bin), "user", "create", "alice", "--mechanism", mech,
                              "--bootstrap", s.addr("PLAINTEXT")], env=env, capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0, res.stderr
    yield s
    s.stop()


def wait_for(cond, timeout=30, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout}s")


# ---------------------------------------------------------------- clients

def sasl_conf(secure, mechanism, user="alice", password=PASSWORD, listener="SASL_SSL"):
    conf = {"bootstrap.servers": secure.addr(listener), "security.protocol": listener,
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password}
    if listener.endswith("SSL"):
        conf["ssl.ca.location"] = str(secure.certs / "ca.pem")
    return conf


def confluent_round_trip(conf, topic, n=50):
    """Produces N records with acks=all and reads them back with a group; returns the values read."""
    from confluent_kafka import Consumer, Producer

    p = Producer({**conf, "acks": "all", "linger.ms": 5, "message.timeout.ms": 30000})
    errors = []
    for i in range(n):
        p.produce(topic, key=f"k{i}", value=f"v{i}", on_delivery=lambda e, m: e and errors.append(e))
    assert p.flush(60) == 0
    assert not errors, errors[:3]
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                  "session.timeout.ms": 10000})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
    c.close()
    return got


def confluent_fails(conf, timeout=15):
    """The error a confluent-kafka admin client gets listing topics, as text ('' if it worked).
    It asks again until `timeout`, or until the client reports an authentication or
    TLS failure: librdkafka would only try the same credentials again until then."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    final = (KafkaError._AUTHENTICATION, KafkaError._SSL)
    errors = []
    a = AdminClient({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + timeout
    while True:
        try:
            a.list_topics(timeout=max(0.05, min(0.5, deadline - time.monotonic())))
            return ""
        except Exception as e:  # noqa: BLE001 - the client's own error types
            # The cause (an authentication error) reaches error_cb on a poll.
            a.poll(0.05)
            if any(err.code() in final for err in errors) or time.monotonic() >= deadline:
                for _ in range(10):
                    if errors:
                        break
                    a.poll(0.2)
                return f"{e} {[str(err) for err in errors]}"


def kcat(*args, timeout=60, input=None):
    exe = shutil.which("kcat")
    if exe is None:
        pytest.fail("kcat is not installed: tests/run.sh installs it (apt-get install kcat)")
    return subprocess.run([exe, *args], capture_output=True, timeout=timeout, input=input)


# ---------------------------------------------------------------- tests

def test_each_listener_advertises_its_own_address(secure):
    from confluent_kafka.admin import AdminClient

    for listener, conf in (("PLAINTEXT", {"bootstrap.servers": secure.addr("PLAINTEXT")}),
                           ("SASL_SSL", sasl_conf(secure, "SCRAM-SHA-512")),
                           ("SASL_PLAINTEXT", sasl_conf(secure, "PLAIN", listener="SASL_PLAINTEXT")),
                           ("SSL", {"bootstrap.servers": secure.addr("SSL"), "security.protocol": "SSL",
                                    "ssl.ca.location": str(secure.certs / "ca.pem")})):
        md = AdminClient(conf).list_topics(timeout=30)
        ports = {b.port for b in md.brokers.values()}
        assert ports == {secure.ports[listener]}, (listener, ports)


@pytest.mark.parametrize("mechanism,user,password", [
    ("SCRAM-SHA-512", "alice", PASSWORD),
    ("SCRAM-SHA-256", "alice", PASSWORD),
    ("PLAIN", "alice", PASSWORD),          # PLAIN against the SCRAM credential
    ("PLAIN", "bob", FILE_PASSWORD),       # PLAIN against the users file
])
def test_confluent_kafka_over_sasl_ssl(secure, mechanism, user, password):
    topic = f"sec-confluent-{mechanism.lower()}-{user}"
    got = confluent_round_trip(sasl_conf(secure, mechanism, user, password), topic)
    assert sorted(got, key=lambda v: int(v[1:])) == [f"v{i}" for i in range(50)]


def test_kafka_python_over_sasl_ssl_with_scram_sha_256(secure):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    common = dict(bootstrap_servers=secure.addr("SASL_SSL"), security_protocol="SASL_SSL",
                  sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice", sasl_plain_password=PASSWORD,
                  ssl_cafile=str(secure.certs / "ca.pem"))
    topic = "sec-kafka-python"
    p = KafkaProducer(acks="all", **common)
    for i in range(20):
        p.send(topic, key=b"k", value=f"kp{i}".encode())
    p.flush(30)
    p.close()
    c = KafkaConsumer(consumer_timeout_ms=10000, auto_offset_reset="earliest", **common)
    c.assign([TopicPartition(topic, 0)])
    got = [m.value.decode() for _, m in zip(range(20), c)]
    c.close()
    assert got == [f"kp{i}" for i in range(20)]


def test_aiokafka_over_sasl_ssl_with_plain(secure):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    async def run():
        common = dict(bootstrap_servers=secure.addr("SASL_SSL"), security_protocol="SASL_SSL",
                      sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password=FILE_PASSWORD,
                      ssl_context=create_ssl_context(cafile=str(secure.certs / "ca.pem")))
        topic = "sec-aiokafka"
        p = AIOKafkaProducer(acks="all", **common)
        await p.start()
        try:
            for i in range(20):
                await p.send_and_wait(topic, f"ai{i}".encode(), partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(auto_offset_reset="earliest", **common)
        await c.start()
        try:
            c.assign([TopicPartition(topic, 0)])
            await c.seek_to_beginning()
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 20 and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=1000)
                for msgs in batch.values():
                    got += [m.value.decode() for m in msgs]
            return got
        finally:
            await c.stop()

    assert asyncio.run(run()) == [f"ai{i}" for i in range(20)]


def test_kafkajs_over_sasl_ssl_with_scram_sha_512(secure):
    env = dict(os.environ, KAFKAJS_SECURITY=json.dumps({
        "ca": (secure.certs / "ca.pem").read_text(),
        "sasl": {"mechanism": "scram-sha-512", "username": "alice", "password": PASSWORD}}))
    res = subprocess.run(["node", str(JS_DIR / "kafkajs_client.js"), "produce", secure.addr("SASL_SSL"),
                          "sec-kafkajs", "200"], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert [c[2] for c in out["chunks"]] == [0, 0], out


def test_kcat_over_sasl_ssl_and_with_a_client_certificate(secure):
    ca = str(secure.certs / "ca.pem")
    scram = ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
             "-X", "sasl.username=alice", "-X", f"sasl.password={PASSWORD}", "-X", f"ssl.ca.location={ca}"]
    res = kcat("-P", "-b", secure.addr("SASL_SSL"), "-t", "sec-kcat", *scram, input=b"a\nb\nc\n")
    assert res.returncode == 0, res.stderr
    res = kcat("-C", "-b", secure.addr("SASL_SSL"), "-t", "sec-kcat", "-e", "-o", "beginning", *scram)
    assert res.stdout.split() == [b"a", b"b", b"c"], res.stderr
    # mTLS: the client certificate's subject is the principal (the rules map
    # CN=alice-cert,OU=eng,O=Floe to alice-cert).
    mtls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={ca}",
            "-X", f"ssl.certificate.location={secure.certs / 'client.pem'}",
            "-X", f"ssl.key.location={secure.certs / 'client.key'}"]
    res = kcat("-C", "-b", secure.addr("SSL"), "-t", "sec-kcat", "-e", "-o", "beginning", *mtls)
    assert res.stdout.split() == [b"a", b"b", b"c"], res.stderr


def test_bad_credentials_are_refused_and_the_listener_keeps_serving(secure):
    before = secure.metric("floe_proxy_authentication_failures_total")
    for mechanism, user, password in (("SCRAM-SHA-512", "alice", "wrong"),
                                      ("SCRAM-SHA-256", "mallory", "whatever"),
                                      ("PLAIN", "alice", "wrong"),
                                      ("PLAIN", "nobody", "x")):
        err = confluent_fails({**sasl_conf(secure, mechanism, user, password), "retries": 0}, timeout=5)
        assert "Authentication failed" in err or "authentication" in err.lower(), (mechanism, user, err)
        # Served at once after: the listener is not stuck.
        assert confluent_fails(sasl_conf(secure, "SCRAM-SHA-512")) == ""
    wait_for(lambda: secure.metric("floe_proxy_authentication_failures_total") >= before + 4,
             what="four failures counted")
    assert secure.metric("floe_proxy_authentication_failures_total", reason="unknown_user") >= 2
    assert secure.metric("floe_proxy_authentication_failures_total", reason="bad_credentials") >= 2
    log = secure.log_path.read_text(errors="replace")
    assert "SASL authentication failed" in log and "127.0.0.1" in log
    for secret in ("wrong", "whatever", PASSWORD, FILE_PASSWORD):
        assert f"={secret}" not in log and f'"{secret}"' not in log


def test_wrong_protocols_get_a_clean_close(secure):
    # Plaintext Kafka bytes to a TLS port: the handshake fails, the port serves on.
    before = secure.metric("floe_proxy_tls_handshake_failures_total")
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_SSL"]), timeout=10) as s:
        s.sendall(struct.pack(">ihhi", 10, 18, 0, 1) + b"\x00\x00")
        assert s.recv(1024) in (b"",) or True  # an alert or a close, never a hang
        s.settimeout(10)
        while s.recv(4096):
            pass
    wait_for(lambda: secure.metric("floe_proxy_tls_handshake_failures_total") > before, what="counted")
    # TLS to a plaintext port: closed without an answer.
    ctx = ssl.create_default_context(cafile=str(secure.certs / "ca.pem"))
    with socket.create_connection(("127.0.0.1", secure.ports["PLAINTEXT"]), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionResetError, OSError)):
            ctx.wrap_socket(raw, server_hostname="localhost")
    # A request before SASL authentication closes the connection.
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10) as s:
        # Metadata v1, no topics (null array).
        body = struct.pack(">hhih", 3, 1, 7, -1) + struct.pack(">i", -1)
        s.sendall(struct.pack(">i", len(body)) + body)
        s.settimeout(10)
        assert s.recv(4096) == b""
    assert confluent_fails(sasl_conf(secure, "SCRAM-SHA-512")) == ""
    assert confluent_fails({"bootstrap.servers": secure.addr("PLAINTEXT")}) == ""


def kafka_request(api_key, version, corr, body, client_id=b"raw"):
    header = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    msg = header + body
    return struct.pack(">i", len(msg)) + msg


def read_frame(s):
    (n,) = struct.unpack(">i", recv_exact(s, 4))
    return recv_exact(s, n)


def test_sasl_handshake_v0_with_bare_tokens(secure):
    """SaslHandshake v0 is followed by the mechanism's messages without Kafka framing."""
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10) as s:
        mech = b"PLAIN"
        s.sendall(kafka_request(17, 0, 1, struct.pack(">h", len(mech)) + mech))
        resp = read_frame(s)
        corr, err = struct.unpack(">ih", resp[:6])
        assert (corr, err) == (1, 0)
        token = b"\x00bob\x00" + FILE_PASSWORD.encode()
        s.sendall(struct.pack(">i", len(token)) + token)
        assert read_frame(s) == b""  # PLAIN's empty answer: authenticated
        # Now an ordinary request is served: ApiVersions v0.
        s.sendall(kafka_request(18, 0, 2, b""))
        corr, err = struct.unpack(">ih", read_frame(s)[:6])
        assert (corr, err) == (2, 0)


def test_reauthentication_keeps_a_long_connection_serving(secure):
    """With --connections-max-reauth-ms 3000 the session ends every 3 s: librdkafka
    re-authenticates on its connection (KIP-368) and keeps being served."""
    from confluent_kafka import Consumer, Producer

    conf = sasl_conf(secure, "SCRAM-SHA-512")
    topic = "sec-reauth"
    before = secure.metric("floe_proxy_authentications_total", mechanism="SCRAM-SHA-512")
    p = Producer({**conf, "acks": "all", "linger.ms": 0})
    c = Consumer({**conf, "group.id": "reauth", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 9
    i = 0
    while time.monotonic() < deadline:
        p.produce(topic, value=f"r{i}")
        p.flush(10)
        i += 1
        m = c.poll(0.3)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
    end = time.monotonic() + 20
    while len(got) < i and time.monotonic() < end:
        m = c.poll(0.3)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
    c.close()
    assert got == [f"r{j}" for j in range(i)]
    # More authentications than connections opened: sessions were renewed.
    after = secure.metric("floe_proxy_authentications_total", mechanism="SCRAM-SHA-512")
    assert after - before >= 6, (before, after)
    assert "the SASL session expired" not in secure.log_path.read_text(errors="replace")


def test_a_changed_certificate_is_served_without_a_restart(secure):
    """The server's certificate files are replaced by ones from another CA: new
    connections get the new one within the reload interval, open ones keep theirs."""
    from confluent_kafka import Producer

    old = Producer(sasl_conf(secure, "SCRAM-SHA-512"))
    old.produce("sec-reload", value=b"before")
    assert old.flush(30) == 0
    shutil.copy(secure.certs / "server2.key", secure.tls_dir / "server.key.new")
    shutil.copy(secure.certs / "server2.pem", secure.tls_dir / "server.pem.new")
    os.replace(secure.tls_dir / "server.key.new", secure.tls_dir / "server.key")
    os.replace(secure.tls_dir / "server.pem.new", secure.tls_dir / "server.pem")
    conf2 = {**sasl_conf(secure, "SCRAM-SHA-512"), "ssl.ca.location": str(secure.certs / "ca2.pem")}
    wait_for(lambda: confluent_fails(conf2, timeout=5) == "", timeout=30, what="the new certificate served")
    assert secure.metric("floe_proxy_tls_reloads_total", result="ok") >= 1
    # The connection opened before goes on.
    old.produce("sec-reload", value=b"after")
    assert old.flush(30) == 0
    # Put the first certificate back for the other tests.
    shutil.copy(secure.certs / "server.key", secure.tls_dir / "server.key.new")
    shutil.copy(secure.certs / "server.pem", secure.tls_dir / "server.pem.new")
    os.replace(secure.tls_dir / "server.key.new", secure.tls_dir / "server.key")
    os.replace(secure.tls_dir / "server.pem.new", secure.tls_dir / "server.pem")
    wait_for(lambda: confluent_fails(sasl_conf(secure, "SCRAM-SHA-512"), timeout=5) == "", timeout=30,
             what="the first certificate served again")

def test_floe_tools_log_in_with_a_command_config(secure, floe_bin, tmp_path):
    """`floe topic` and `floe user` over SASL_SSL with SCRAM, and over mTLS, from a
    --command-config file with librdkafka's keys; the password from FLOE_SASL_PASSWORD."""
    cfg = tmp_path / "client.properties"
    cfg.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\nsasl.username=alice\n"
                   f"ssl.ca.location={secure.certs / 'ca.pem'}\n")
    env = dict(os.environ, FLOE_SASL_PASSWORD=PASSWORD)
    floe = str(floe_bin)
    res = subprocess.run([floe, "topic", "create", "sec-tools", "--partitions", "2", "--bootstrap",
                          secure.addr("SASL_SSL"), "--command-config", str(cfg)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([floe, "user", "list", "alice", "--bootstrap", secure.addr("SASL_SSL"),
                          "--command-config", str(cfg)], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "SCRAM-SHA-256" in res.stdout
    # A wrong password: a clear error, without the password.
    bad = dict(os.environ, FLOE_SASL_PASSWORD="not-the-password")
    res = subprocess.run([floe, "topic", "list", "--bootstrap", secure.addr("SASL_SSL"),
                          "--command-config", str(cfg)], env=bad, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert "authentication failed" in res.stderr.lower() and "not-the-password" not in res.stderr
    # mTLS with the client certificate.
    mtls = tmp_path / "mtls.properties"
    mtls.write_text(f"security.protocol=SSL\nssl.ca.location={secure.certs / 'ca.pem'}\n"
                    f"ssl.certificate.location={secure.certs / 'client.pem'}\n"
                    f"ssl.key.location={secure.certs / 'client.key'}\n")
    res = subprocess.run([floe, "topic", "list", "--bootstrap", secure.addr("SSL"), "--command-config", str(mtls)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "sec-tools" in res.stdout
    # A typo in the file is refused, never ignored.
    typo = tmp_path / "typo.properties"
    typo.write_text("security.protocl=SASL_SSL\n")
    res = subprocess.run([floe, "topic", "list", "--bootstrap", secure.addr("SASL_SSL"), "--command-config",
                          str(typo)], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "security.protocl" in res.stderr



def test_users_survive_a_restart_and_can_be_deleted(secure, floe_bin):
    secure.restart()
    assert confluent_fails(sasl_conf(secure, "SCRAM-SHA-512")) == ""
    res = subprocess.run([str(floe_bin), "user", "list", "--bootstrap", secure.addr("PLAINTEXT")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "alice" in res.stdout and "SCRAM-SHA-512" in res.stdout and PASSWORD not in res.stdout
    env = dict(os.environ, FLOE_USER_PASSWORD="temp-pass-1")
    res = subprocess.run([str(floe_bin), "user", "create", "carol", "--mechanism", "SCRAM-SHA-256",
                          "--bootstrap", secure.addr("PLAINTEXT")], env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    wait_for(lambda: confluent_fails(sasl_conf(secure, "SCRAM-SHA-256", "carol", "temp-pass-1")) == "",
             what="carol can log in")
    res = subprocess.run([str(floe_bin), "user", "delete", "carol", "--bootstrap", secure.addr("PLAINTEXT")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    wait_for(lambda: confluent_fails(sasl_conf(secure, "SCRAM-SHA-256", "carol", "temp-pass-1"), timeout=5) != "",
             what="carol refused")

