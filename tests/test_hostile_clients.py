"""Hostile clients on raw sockets against `floe standalone`: what one client
(or many) can make the Kafka listener spend is bounded.

Each test measures the process's peak resident memory (VmHWM in
/proc/PID/status) around the attack and asserts a bound that the attack would
break without the limit under test, then checks that a normal client
(confluent-kafka) still produces and consumes."""

import socket
import struct
import time

import pytest

from test_kafka_bad_input import (API_VERSIONS, METADATA, PRODUCE, api_versions_v0, assert_still_serving,
                                  connect, frame, header, i16, i32, read_answer, send, string)

pytestmark = pytest.mark.timeout(240)

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17


def vm_hwm(standalone):
    """Peak resident memory of the process so far, in bytes."""
    with open(f"/proc/{standalone.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


def uvarint(n):
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def closed_within(sock, seconds):
    """True when the server closes `sock` within `seconds` (answers are read and dropped)."""
    sock.settimeout(0.5)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return True
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


# ---------------------------------------------------------------- oversize frame

def test_frame_over_the_size_limit_closes_the_connection_without_reading_it(standalone_factory, kit):
    s = standalone_factory(max_request_bytes=1 << 20)
    hwm = vm_hwm(s)
    with connect(s) as sock:
        # 64 MiB announced, over the 1 MiB limit: closed before the body is read.
        send(sock, i32(64 << 20) + header(PRODUCE, 3, 1) + b"\x00" * 65536)
        assert read_answer(sock)[0] == "closed"
    assert vm_hwm(s) - hwm < 32 << 20
    assert_still_serving(s, kit)


# ---------------------------------------------------------------- decode bomb

def produce_v9_of_empty_topics(count):
    """A well-formed Produce v9 (flexible) naming `count` topics with empty names
    and no partitions: three bytes each on the wire, ~96 bytes each decoded."""
    body = b"\x00" + i16(1) + i32(30000)  # no transactional id, acks=1, timeout
    body += uvarint(count + 1) + b"\x01\x01\x00" * count + b"\x00"
    return frame(header(PRODUCE, 9, 11, flexible=True) + body)


def test_produce_that_would_decode_into_gigabytes_is_refused(standalone, kit):
    # 10 million empty topics: a 30 MB frame that kafka-protocol would turn
    # into ~1 GB of structs (and the handler into more).
    bomb = produce_v9_of_empty_topics(10_000_000)
    assert len(bomb) < 31 << 20
    hwm = vm_hwm(standalone)
    with connect(standalone) as sock:
        sock.settimeout(30)
        send(sock, bomb)
        assert closed_within(sock, 30), "the decode bomb was not refused"
    grown = vm_hwm(standalone) - hwm
    # The frame itself (30 MB) plus the decode budget (at most 64 MiB).
    assert grown < 160 << 20, f"peak memory grew by {grown >> 20} MiB"
    assert "bytes of memory" in standalone.log_tail(200)
    assert_still_serving(standalone, kit)


# ---------------------------------------------------------------- connection flood

def test_connections_over_the_limit_are_closed_and_the_rest_served(standalone_factory, kit):
    s = standalone_factory(max_connections=40, max_connections_per_ip=30)
    hwm = vm_hwm(s)
    socks = []
    try:
        for _ in range(200):
            try:
                socks.append(socket.create_connection(("127.0.0.1", s.kafka_port), timeout=5))
            except OSError:
                break
        # Those over the per-address limit are closed at once; the others answer.
        served, closed = 0, 0
        for sock in socks:
            sock.settimeout(5)
            send(sock, frame(header(API_VERSIONS, 0, 7)))
            kind, _ = read_answer(sock)
            if kind == "response":
                served += 1
            else:
                closed += 1
        assert served <= 30, f"{served} connections from one address were served, the limit is 30"
        assert closed >= len(socks) - 30
        assert s.alive()
        assert counter(s, 'floe_proxy_connections_refused_total{reason="max_connections_per_ip"}') >= closed
    finally:
        for sock in socks:
            sock.close()
    assert vm_hwm(s) - hwm < 128 << 20
    # The places are given back: a normal client is served.
    deadline = time.monotonic() + 20
    while True:
        with connect(s) as sock:
            send(sock, frame(header(API_VERSIONS, 0, 9)))
            if read_answer(sock)[0] == "response":
                break
        assert time.monotonic() < deadline, "connection places were not given back"
        time.sleep(0.2)
    assert_still_serving(s, kit)


def counter(standalone, series):
    """The value of one series on the admin port's /metrics (0 when absent)."""
    import urllib.request
    with urllib.request.urlopen(standalone.admin_url + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
    return 0


# ---------------------------------------------------------------- requests in flight

def test_a_connection_is_read_on_while_hundreds_of_produces_wait_for_their_flush(standalone_factory, kit):
    """A produce is answered after its flush (on S3 up to 250 ms + a PUT), and a
    client with linger.ms=1 sends up to a request a millisecond: the proxy must go
    on reading them, or they wait in the socket buffers and add seconds of latency
    (W3 on S3 had a p50 of 4.5 s with a bound of 64). Here no flush comes for a
    minute, so every produce read is still unanswered while the test counts them."""
    s = standalone_factory(flush_interval_ms=60_000, flush_paced="true", flush_bytes=1 << 30)
    kit.create_topic(s.bootstrap, "pipelined")
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": s.bootstrap, "enable.idempotence": False, "acks": "all",
                  "linger.ms": 0, "batch.num.messages": 1, "message.timeout.ms": 120_000,
                  "max.in.flight.requests.per.connection": 1_000_000})
    before = counter(s, "floe_proxy_requests_total")
    n = 300
    for _ in range(n):
        p.produce("pipelined", b"x", partition=0)
        p.poll(0)
    deadline = time.monotonic() + 30
    while (read := counter(s, "floe_proxy_requests_total") - before) < n:
        assert time.monotonic() < deadline, f"the proxy stopped reading at {read:.0f} of {n} produces in flight"
        p.poll(0.2)
    assert len(p) == n, "no produce was answered before its flush"
    p.purge()
    with connect(s) as sock:
        assert api_versions_v0(sock)[0] == 0


# ---------------------------------------------------------------- idle connection

def test_idle_connection_is_closed_after_the_idle_timeout(standalone_factory, kit):
    s = standalone_factory(connections_max_idle_ms=1000)
    with connect(s) as sock:
        error, _ = api_versions_v0(sock)
        assert error == 0
        # No request from now on: closed after about a second.
        assert closed_within(sock, 20), "an idle connection was not closed"
    # A connection that keeps asking stays open past the timeout.
    with connect(s) as sock:
        for i in range(8):
            error, _ = api_versions_v0(sock, correlation_id=100 + i)
            assert error == 0
            time.sleep(0.3)
    assert counter(s, "floe_proxy_connections_idle_closed_total") >= 1
    assert_still_serving(s, kit)


# ---------------------------------------------------------------- metadata flood

def metadata_v4(names, correlation_id=21):
    body = i32(len(names)) + b"".join(string(n.encode()) for n in names) + b"\x01"  # allow auto-create
    return frame(header(METADATA, 4, correlation_id) + body)


def parse_metadata_v4(body):
    """{topic name: error code} from a Metadata v4 response (after the length)."""
    pos = 4  # correlation id

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, body, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def take_str():
        nonlocal pos
        n = take(">h")
        if n < 0:
            return None
        s = body[pos:pos + n].decode()
        pos += n
        return s

    take(">i")  # throttle
    for _ in range(take(">i")):  # brokers
        take(">i"); take_str(); take(">i"); take_str()
    take_str()  # cluster id
    take(">i")  # controller
    out = {}
    for _ in range(take(">i")):
        err = take(">h")
        name = take_str()
        take(">b")  # internal
        for _ in range(take(">i")):
            take(">h"); take(">i"); take(">i")
            for _ in range(take(">i")):
                take(">i")
            for _ in range(take(">i")):
                take(">i")
        out[name] = err
    return out


def test_metadata_naming_thousands_of_new_topics_creates_only_a_few(standalone_factory, kit):
    s = standalone_factory(auto_create_max_topics_per_request=8)
    hwm = vm_hwm(s)
    fresh = [f"flood-{i}" for i in range(5000)]
    bad = ["bad/name", "..", "x" * 250, "sp ace"]
    with connect(s) as sock:
        sock.settimeout(60)
        send(sock, metadata_v4(fresh + bad))
        kind, body = read_answer(sock)
        assert kind == "response"
        errors = parse_metadata_v4(body)
    for name in bad:
        assert errors[name] == INVALID_TOPIC_EXCEPTION, (name, errors[name])
    created = [n for n in fresh if errors[n] == 0]
    deferred = [n for n in fresh if errors[n] == UNKNOWN_TOPIC_OR_PARTITION]
    assert len(created) == 8, f"{len(created)} topics auto-created by one request, the bound is 8"
    assert len(deferred) == len(fresh) - 8
    # Retriable: named again, the deferred ones are created (8 more).
    with connect(s) as sock:
        sock.settimeout(60)
        send(sock, metadata_v4(deferred[:8], correlation_id=22))
        kind, body = read_answer(sock)
        assert kind == "response"
        assert set(parse_metadata_v4(body).values()) == {0}
    from confluent_kafka.admin import AdminClient
    topics = AdminClient({"bootstrap.servers": s.bootstrap}).list_topics(timeout=10).topics
    assert not any(n in topics for n in bad)
    assert sum(1 for n in topics if n.startswith("flood-")) == 16
    assert vm_hwm(s) - hwm < 128 << 20
    assert_still_serving(s, kit)
