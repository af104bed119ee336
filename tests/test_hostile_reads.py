"""Hostile reads against a `floe standalone`: a Fetch that names one partition
many times with no request-wide cap (the amplification a new user found: one
request answered with 2 GB), and a zstd decompression bomb stored as a valid
batch, after which the indexer's export and ListOffsets by timestamp still
work and the process is alive. Each checks the process's peak resident memory
(VmHWM) before and after."""

import pathlib
import struct
import time


from test_indexer import wait_exported
from test_kafka_bad_input import connect, read_answer

FETCH, LIST_OFFSETS = 1, 2


def peak_rss(standalone):
    """VmHWM: the most resident memory the process has had, in bytes."""
    for line in pathlib.Path(f"/proc/{standalone.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


def string(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def request(api_key, version, corr, body):
    payload = struct.pack(">hhi", api_key, version, corr) + string("hostile-reads") + body
    return struct.pack(">i", len(payload)) + payload


def fetch_v4(topic, partition, times, partition_max_bytes, max_bytes=0x7FFFFFFF):
    """Fetch v4 naming `topic`/`partition` `times` times from offset 0."""
    part = struct.pack(">iqi", partition, 0, partition_max_bytes)
    topics = struct.pack(">i", 1) + string(topic) + struct.pack(">i", times) + part * times
    # replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level
    return struct.pack(">iiiib", -1, 0, 1, max_bytes, 0) + topics


def produce_values(bootstrap, topic, values, **conf):
    from confluent_kafka import Producer

    reports = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000,
                  "linger.ms": 5, **conf})
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda e, m: reports.append((e, m)))
        p.poll(0)
    assert p.flush(60) == 0
    errors = [e for e, _ in reports if e is not None]
    assert not errors, errors
    return [m for _, m in reports]


def test_a_fetch_naming_one_partition_100_times_is_answered_once(standalone, kit):
    kit.create_topic(standalone.bootstrap, "amplified")
    # About 4 MB in the partition, from the store (past the in-memory tail).
    produce_values(standalone.bootstrap, "amplified", [bytes([i]) * 100_000 for i in range(40)])
    # A first fetch warms what every fetch shares (caches, buffers).
    with connect(standalone) as s:
        s.sendall(request(FETCH, 4, 1, fetch_v4("amplified", 0, 1, 8 << 20)))
        kind, body = read_answer(s)
        assert kind == "response"
    before = peak_rss(standalone)
    # Without a cap and without deduplication this answer is 100 x 4 MB.
    with connect(standalone) as s:
        s.settimeout(60)
        s.sendall(request(FETCH, 4, 2, fetch_v4("amplified", 0, 100, 8 << 20)))
        kind, body = read_answer(s)
    assert kind == "response"
    assert len(body) < 16 << 20, f"a {len(body) >> 20} MiB answer to a fetch of one 4 MB partition"
    corr, _throttle, ntopics = struct.unpack_from(">iii", body, 0)
    assert (corr, ntopics) == (2, 1)
    (name_len,) = struct.unpack_from(">h", body, 12)
    (nparts,) = struct.unpack_from(">i", body, 14 + name_len)
    assert nparts == 1, f"{nparts} partition entries for one partition named 100 times"
    grown = peak_rss(standalone) - before
    print(f"fetch answer {len(body)} bytes; peak RSS grew by {grown >> 20} MiB")
    assert grown < 128 << 20, f"peak resident memory grew by {grown >> 20} MiB for one fetch"
    assert standalone.alive()


def test_the_proxy_caps_a_fetch_whatever_the_client_asks(standalone_factory, kit):
    s = standalone_factory(fetch_max_bytes=1 << 20, fetch_max_partition_bytes=256 << 10)
    kit.create_topic(s.bootstrap, "capped", partitions=2)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": s.bootstrap, "acks": "all"})
    for i in range(40):
        p.produce("capped", value=bytes([i]) * 50_000, partition=i % 2)
    assert p.flush(60) == 0
    # Each partition holds ~1 MB; the client asks for 8 MiB of each, no request cap.
    topics = struct.pack(">i", 1) + string("capped") + struct.pack(">i", 2) \
        + struct.pack(">iqi", 0, 0, 8 << 20) + struct.pack(">iqi", 1, 0, 8 << 20)
    body = struct.pack(">iiiib", -1, 0, 1, 0x7FFFFFFF, 0) + topics
    with connect(s) as sock:
        sock.sendall(request(FETCH, 4, 9, body))
        kind, answer = read_answer(sock)
    assert kind == "response"
    # At most 1 MiB of records over both partitions, 256 KiB of each (whole
    # batches: one may go over by a batch).
    assert len(answer) < (1 << 20) + 200_000, len(answer)
    # A client still reads everything, a capped answer at a time.
    records = kit.consume(s.bootstrap, "capped", partitions=(0, 1))
    assert len(records) == 40


def list_offsets_v1(topic, partition, timestamp):
    parts = struct.pack(">i", 1) + struct.pack(">iq", partition, timestamp)
    return struct.pack(">i", -1) + struct.pack(">i", 1) + string(topic) + parts


def offset_for_time(standalone, topic, ts):
    with connect(standalone) as s:
        s.sendall(request(LIST_OFFSETS, 1, 5, list_offsets_v1(topic, 0, ts)))
        kind, body = read_answer(s)
    assert kind == "response"
    # corr, [topic: name, [partition, error, timestamp, offset]]
    (name_len,) = struct.unpack_from(">h", body, 8)
    at = 10 + name_len + 4
    partition, error, timestamp, offset = struct.unpack_from(">ihqq", body, at)
    return error, offset, timestamp


def test_a_zstd_bomb_is_passed_over_by_the_exporter_and_timestamp_lookups(standalone_factory, kit):
    s = standalone_factory(indexer_poll_ms=200)
    kit.create_topic(s.bootstrap, "bombed", config={"export.enabled": "true", "export.roll.ms": "200"})
    now = int(time.time() * 1000)
    before = produce_values(s.bootstrap, "bombed", [b"before"], **{"compression.type": "zstd"})
    rss_before = peak_rss(s)
    # One record of 80 MiB of zeros: ~10 KB on the wire, 80 MiB once decoded
    # (over the 64 MiB a reader decodes of one batch).
    bomb = produce_values(s.bootstrap, "bombed", [bytes(80 << 20)],
                          **{"compression.type": "zstd", "message.max.bytes": 100_000_000,
                             "batch.size": 100_000_000})
    time.sleep(0.05)
    after = produce_values(s.bootstrap, "bombed", [b"after"], **{"compression.type": "zstd"})
    offsets = [m.offset() for m in before + bomb + after]
    assert offsets == [0, 1, 2], offsets
    # The exporter moves past the bomb: everything exported, the bomb's offset too.
    body = wait_exported(s.admin_url, "bombed", want_hw={0: 3}, timeout=60)
    rows = sum(p["rows"] for p in body["partitions"])
    assert rows == 2, f"{rows} rows exported of the two ordinary records: {body}"
    # ListOffsets by timestamp answers past the bomb.
    error, offset, _ = offset_for_time(s, "bombed", after[0].timestamp()[1])
    assert error == 0
    assert offset in (1, 2), offset
    error, offset, _ = offset_for_time(s, "bombed", now + 3_600_000)
    assert (error, offset) == (0, -1)
    assert s.alive()
    grown = peak_rss(s) - rss_before
    print(f"peak RSS grew by {grown >> 20} MiB around the bomb")
    # The client produced 80 MiB through the process (it compresses to 10 KB
    # but librdkafka's buffers are not ours): the process itself stays well
    # under a few times the decoding bound.
    assert grown < 512 << 20, f"peak resident memory grew by {grown >> 20} MiB"
    with urllib_open(f"{s.admin_url}/metrics") as res:
        metrics = res.read().decode()
    skipped = [l for l in metrics.splitlines() if l.startswith("floe_indexer_batches_skipped_total")
               and 'reason="over_bounds"' in l]
    assert skipped and float(skipped[0].split()[-1]) >= 1, skipped


def urllib_open(url):
    import urllib.request

    return urllib.request.urlopen(url, timeout=10)
