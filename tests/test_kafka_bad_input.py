"""Hostile and broken Kafka requests on raw sockets against `floe standalone`.

Kafka framing: a 4-byte big-endian size, then the request (api key, version,
correlation id, client id, body). Whatever arrives, the server answers or closes
the connection within seconds (never hangs, never allocates what a length field
claims), and afterwards the same process still serves a normal client."""

import socket
import struct
import time

import pytest

pytestmark = pytest.mark.timeout(120)

ANSWER_WITHIN = 5.0  # seconds for an answer or a close
UNSUPPORTED_VERSION = 35
API_VERSIONS, METADATA, PRODUCE, FETCH, LIST_OFFSETS = 18, 3, 0, 1, 2


# ---------------------------------------------------------------- wire helpers

def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def string(s):
    return i16(len(s)) + s


def header(api_key, version, correlation_id, client_id=b"floe-bad-input", flexible=False):
    """Request header v1 (v2 when flexible: an empty tagged-field section follows)."""
    return struct.pack(">hhi", api_key, version, correlation_id) + string(client_id) + (b"\x00" if flexible else b"")


def frame(payload):
    return i32(len(payload)) + payload


def connect(standalone):
    host, port = standalone.bootstrap.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=ANSWER_WITHIN)
    s.settimeout(ANSWER_WITHIN)
    return s


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def read_answer(sock):
    """('closed', None) or ('response', bytes); fails the test when the server
    neither answers nor closes within ANSWER_WITHIN seconds."""
    try:
        head = recv_exact(sock, 4)
        if head is None:
            return "closed", None
        size = struct.unpack(">i", head)[0]
        assert 4 <= size <= 64 << 20, f"response frame size {size}"
        body = recv_exact(sock, size)
        return ("closed", None) if body is None else ("response", body)
    except (ConnectionResetError, BrokenPipeError):
        return "closed", None
    except socket.timeout:
        pytest.fail(f"no answer and no close within {ANSWER_WITHIN} s: the server hangs on this input")


def send(sock, data):
    try:
        sock.sendall(data)
    except (ConnectionResetError, BrokenPipeError):
        pass  # closed while we were still sending: an answer too


def wait_closed(sock):
    """Reads (and drops) answers until the server closes; fails on a hang."""
    for _ in range(10):
        kind, _ = read_answer(sock)
        if kind == "closed":
            return
    pytest.fail("the server keeps answering on a connection whose framing is broken")


def parse_api_versions_v0(body, correlation_id):
    corr, error, n = struct.unpack_from(">ihi", body, 0)
    assert corr == correlation_id, f"correlation id {corr}, sent {correlation_id}"
    assert 0 <= n < 1000 and len(body) == 10 + 6 * n, \
        f"not an ApiVersions v0 body: {len(body)} bytes for {n} entries: {body[:40].hex()}"
    return error, {k: (lo, hi) for k, lo, hi in struct.iter_unpack(">hhh", body[10:])}


def api_versions_v0(sock, correlation_id=7):
    send(sock, frame(header(API_VERSIONS, 0, correlation_id)))
    kind, body = read_answer(sock)
    assert kind == "response", "ApiVersions v0 got no answer"
    return parse_api_versions_v0(body, correlation_id)


def assert_still_serving(standalone, kit, rss_before=None):
    """The process is alive, answers ApiVersions on a new connection, and a normal
    client (confluent-kafka, acks=all) produces and reads back a message."""
    from confluent_kafka import Producer

    assert standalone.alive(), f"the server died (exit code {standalone.proc.returncode})"
    with connect(standalone) as s:
        error, versions = api_versions_v0(s)
    assert error == 0 and {PRODUCE, FETCH, METADATA, API_VERSIONS} <= set(versions), (error, versions)

    reports = []
    p = Producer({"bootstrap.servers": standalone.bootstrap, "acks": "all", "message.timeout.ms": 20000})
    p.produce("after-bad-input", key=b"k", value=b"still serving", on_delivery=lambda e, m: reports.append((e, m)))
    assert p.flush(30) == 0 and len(reports) == 1
    err, msg = reports[0]
    assert err is None, f"a normal producer fails after the bad input: {err}"
    records = kit.consume(standalone.bootstrap, "after-bad-input", start=msg.offset())
    assert [r[3] for r in records] == [b"still serving"]
    assert standalone.alive()
    if rss_before is not None:
        grown = standalone.rss_bytes() - rss_before
        assert grown < 256 << 20, f"resident memory grew by {grown >> 20} MiB: a length field was trusted"


# ---------------------------------------------------------------- framing

@pytest.mark.parametrize("data,then_eof", [
    pytest.param(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", False, id="http-request"),
    pytest.param(b"\x12\x34\x56\x78" + bytes(range(256)) * 4, False, id="size-305MB-then-garbage"),
    pytest.param(b"\x7f\xff\xff\xff" + b"\x00\x12\x00\x00\x00\x00\x00\x01" + b"A" * 1000, False, id="size-0x7fffffff"),
    pytest.param(b"\xff\xff\xff\xff" + b"\x00" * 16, False, id="size-minus-1"),
    pytest.param(b"\x80\x00\x00\x00" + b"\x00" * 16, False, id="size-min-int"),
    # A plausible size (66051) with only 1 KiB of garbage, then end of stream:
    # the server may wait for the rest, but must close once the client is gone.
    pytest.param(bytes(range(256)) * 4, True, id="garbage-then-eof-mid-frame"),
])
def test_broken_framing_closes_the_connection(standalone, kit, data, then_eof):
    rss = standalone.rss_bytes()
    with connect(standalone) as s:
        send(s, data)
        if then_eof:
            s.shutdown(socket.SHUT_WR)
        wait_closed(s)
    assert_still_serving(standalone, kit, rss_before=rss)


@pytest.mark.parametrize("payload", [
    pytest.param(b"", id="empty-frame"),
    pytest.param(b"\x00\x12\x00", id="truncated-header"),
    pytest.param(struct.pack(">hhi", API_VERSIONS, 0, 3) + i16(30000) + b"short", id="client-id-longer-than-frame"),
    pytest.param(struct.pack(">hhi", API_VERSIONS, 0, 3) + i16(-2), id="client-id-length-minus-2"),
    pytest.param(bytes(range(7, 47)), id="random-40-bytes"),
])
def test_malformed_request_in_a_valid_frame_is_answered_or_closed(standalone, kit, payload):
    rss = standalone.rss_bytes()
    with connect(standalone) as s:
        send(s, frame(payload))
        kind, _ = read_answer(s)
        if kind == "response":
            # The stream is still in step: a good request on the same connection works.
            error, _ = api_versions_v0(s, correlation_id=8)
            assert error == 0
    assert_still_serving(standalone, kit, rss_before=rss)


# ---------------------------------------------------------------- api keys and versions

def test_unknown_api_key_is_answered_or_closed(standalone, kit):
    with connect(standalone) as s:
        send(s, frame(header(999, 0, 41) + b"\x00" * 8))
        kind, body = read_answer(s)
        if kind == "response":
            assert struct.unpack_from(">i", body)[0] == 41, "response carries the request's correlation id"
    assert_still_serving(standalone, kit)


def test_api_versions_v99_answers_v0_with_unsupported_version_and_the_supported_range(standalone, kit):
    # KIP-511: a client sends its newest ApiVersions (flexible header, software
    # name and version); a broker that does not know the version answers v0 with
    # UNSUPPORTED_VERSION and its own range, so the client can retry lower.
    body = b"\x0afloe-test" + b"\x041.0" + b"\x00"  # compact strings, empty tagged fields
    with connect(standalone) as s:
        send(s, frame(header(API_VERSIONS, 99, 1234, flexible=True) + body))
        kind, answer = read_answer(s)
        assert kind == "response", "ApiVersions v99 must be answered, not closed"
        error, versions = parse_api_versions_v0(answer, 1234)
        assert error == UNSUPPORTED_VERSION, f"error code {error}, want {UNSUPPORTED_VERSION}"
        assert API_VERSIONS in versions, f"the answer lists ApiVersions' own range: {versions}"
        lo, hi = versions[API_VERSIONS]
        assert lo == 0 and 3 <= hi < 99, (lo, hi)
        # The connection stays usable: the client retries with a version it was told.
        error, versions = api_versions_v0(s, correlation_id=1235)
        assert error == 0
    assert_still_serving(standalone, kit)


@pytest.mark.parametrize("api_key", [METADATA, PRODUCE, FETCH, LIST_OFFSETS], ids=["metadata", "produce", "fetch",
                                                                                    "list-offsets"])
def test_unknown_version_of_a_known_key_is_refused_or_closed(standalone, kit, api_key):
    with connect(standalone) as s:
        send(s, frame(header(api_key, 99, 77, flexible=True) + b"\x00" * 16))
        kind, body = read_answer(s)
        if kind == "response":
            assert struct.unpack_from(">i", body)[0] == 77, "response carries the request's correlation id"
            assert UNSUPPORTED_VERSION.to_bytes(2, "big") in body[4:], \
                f"answered v99 without UNSUPPORTED_VERSION: {body[:40].hex()}"
    assert_still_serving(standalone, kit)


# ---------------------------------------------------------------- lengths inside requests

def metadata_v1(topics_count_bytes):
    return frame(header(METADATA, 1, 5) + topics_count_bytes)


def produce_v3(topic, records_field):
    body = i16(-1) + i16(-1) + i32(10000)  # no transactional id, acks=all, timeout
    body += i32(1) + string(topic.encode()) + i32(1) + i32(0) + records_field
    return frame(header(PRODUCE, 3, 9) + body)


@pytest.mark.parametrize("request_bytes", [
    pytest.param(metadata_v1(i32(0x7FFFFFFF) + b"x"), id="metadata-topics-count-0x7fffffff"),
    pytest.param(metadata_v1(i32(-2)), id="metadata-topics-count-minus-2"),
    pytest.param(metadata_v1(i32(1) + i16(0x7FFF) + b"abc"), id="metadata-topic-name-longer-than-frame"),
    pytest.param(produce_v3("bad-input", i32(0x7FFFFFFF) + b"\x00" * 8), id="produce-records-size-0x7fffffff"),
    pytest.param(frame(header(PRODUCE, 3, 9) + i16(-1) + i16(-1) + i32(10000) + i32(0x7FFFFFFF)),
                 id="produce-topics-count-0x7fffffff"),
])
def test_length_fields_beyond_the_frame_are_refused_without_allocating(standalone, kit, request_bytes):
    rss = standalone.rss_bytes()
    with connect(standalone) as s:
        send(s, request_bytes)
        kind, _ = read_answer(s)  # an error answer or a close, in time
        if kind == "response":
            error, _ = api_versions_v0(s, correlation_id=8)
            assert error == 0
    assert_still_serving(standalone, kit, rss_before=rss)


def test_garbage_record_batch_is_refused_and_nothing_is_appended(standalone, kit):
    kit.create_topic(standalone.bootstrap, "bad-input")
    garbage = bytes((i * 37) % 256 for i in range(61))  # the size of a batch header, nonsense inside
    with connect(standalone) as s:
        send(s, produce_v3("bad-input", i32(len(garbage)) + garbage))
        kind, body = read_answer(s)
        if kind == "response":
            # Produce v3 response: correlation id, [topic, [partition, error, base offset, log append time]], throttle.
            corr, n_topics = struct.unpack_from(">ii", body)
            assert corr == 9 and n_topics == 1
            name_len = struct.unpack_from(">h", body, 8)[0]
            pos = 10 + name_len
            n_parts, partition, error = struct.unpack_from(">iih", body, pos)
            assert (n_parts, partition) == (1, 0)
            assert error != 0, "a garbage record batch was accepted"
    assert kit.watermarks(standalone.bootstrap, "bad-input") == (0, 0), "the garbage batch was appended"
    assert_still_serving(standalone, kit)


def test_message_larger_than_max_message_bytes_is_refused_with_message_too_large(standalone, kit):
    from confluent_kafka import KafkaError, Producer

    kit.create_topic(standalone.bootstrap, "small-messages", config={"max.message.bytes": "1000"})
    reports = []
    p = Producer({"bootstrap.servers": standalone.bootstrap, "acks": "all", "message.timeout.ms": 20000,
                  "compression.type": "none"})
    p.produce("small-messages", value=bytes(i % 251 for i in range(5000)), on_delivery=lambda e, m: reports.append(e))
    assert p.flush(30) == 0
    assert len(reports) == 1 and reports[0] is not None, "a 5000-byte message was accepted with max.message.bytes=1000"
    assert reports[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, f"got {reports[0]}, want MESSAGE_TOO_LARGE (10)"

    p.produce("small-messages", value=b"small", on_delivery=lambda e, m: reports.append((e, m.offset())))
    assert p.flush(30) == 0
    assert reports[1] == (None, 0), f"a small message after the refused one: {reports[1]}"
    assert [r[3] for r in kit.consume(standalone.bootstrap, "small-messages")] == [b"small"]
    assert_still_serving(standalone, kit)


def test_a_hundred_half_open_connections_do_not_block_a_client(standalone, kit):
    """Connections that send half a frame and go silent must not stall others."""
    socks = []
    try:
        for i in range(100):
            s = connect(standalone)
            send(s, i32(64) + b"\x00\x12")  # a frame of 64 bytes, 2 sent
            socks.append(s)
        started = time.monotonic()
        assert_still_serving(standalone, kit)
        assert time.monotonic() - started < 30
    finally:
        for s in socks:
            s.close()
