"""Real Kafka clients against `floe standalone`: kcat (librdkafka 2.0), confluent-kafka
(librdkafka 2.x), kafka-python, aiokafka and kafkajs produce and read back exactly what
they sent; topic administration; offsets by timestamp; fetch from the middle of a
batch; retention and DeleteRecords moving the log start.

Most consumers here use assign(); the kafkajs consumer uses a group (kafkajs has
no group-less consumer), so it also exercises the group coordinator."""

import asyncio
import json
import pathlib
import random
import shutil
import subprocess
import time

import pytest

pytestmark = [pytest.mark.timeout(180),
              # kafka-python 3.0 reads its protocol schemas through a deprecated importlib API
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

JS_DIR = pathlib.Path(__file__).resolve().parent / "js"
CODECS = ["gzip", "snappy", "lz4", "zstd"]


# ---------------------------------------------------------------- helpers

def kcat(*args, input=None, timeout=120):
    exe = shutil.which("kcat")
    if exe is None:
        pytest.fail("kcat is not installed: tests/run.sh installs it (apt-get install kcat)")
    return subprocess.run([exe, *args], input=input, capture_output=True, timeout=timeout)


def confluent_produce(bootstrap, topic, messages, flush_every=None, **conf):
    """Produces [(key, value, headers, partition_or_None, timestamp_or_None)] and
    returns the delivery reports in produce order: [(error, partition, offset, timestamp)]."""
    from confluent_kafka import Producer

    config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000}
    config.update(conf)
    producer = Producer(config)
    reports = [None] * len(messages)

    def on_delivery(i):
        def cb(err, msg):
            reports[i] = (err, msg.partition(), msg.offset(), msg.timestamp()[1])
        return cb

    for i, (key, value, headers, partition, ts) in enumerate(messages):
        kw = {"key": key, "value": value, "on_delivery": on_delivery(i)}
        if headers is not None:
            kw["headers"] = headers
        if partition is not None:
            kw["partition"] = partition
        if ts is not None:
            kw["timestamp"] = ts
        while True:
            try:
                producer.produce(topic, **kw)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        if flush_every and (i + 1) % flush_every == 0:
            assert producer.flush(30) == 0, "flush timed out"
    assert producer.flush(60) == 0, "messages still undelivered after 60 s"
    assert None not in reports, "a delivery report is missing"
    return reports


def assert_delivered(reports):
    errors = [(i, r[0]) for i, r in enumerate(reports) if r[0] is not None]
    assert not errors, f"{len(errors)} deliveries failed, first: {errors[:3]}"


def first_difference(got, want):
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"first difference at line {i}: got {g!r}, want {w!r}"
    return f"got {len(got)} lines, want {len(want)}"


# ---------------------------------------------------------------- kcat

def kcat_lines(n, seed):
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,;!?= "
    lines = []
    for i in range(n):
        body = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 120)))
        lines.append(f"key-{i % 101:03d}:value-{i:05d}-{body}")
    return lines


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_round_trips_10000_keyed_messages_with_each_codec(standalone, codec):
    topic = f"kcat-{codec}"
    lines = kcat_lines(10_000, seed=codec)
    data = ("\n".join(lines) + "\n").encode()
    res = kcat("-b", standalone.bootstrap, "-P", "-t", topic, "-K:", "-z", codec, "-X", "acks=all", input=data)
    assert res.returncode == 0, f"kcat -P failed ({res.returncode}): {res.stderr.decode()[-2000:]}"
    assert b"ERROR" not in res.stderr, res.stderr.decode()[-2000:]

    res = kcat("-b", standalone.bootstrap, "-C", "-t", topic, "-e", "-o", "beginning", "-f", "%k:%s\n")
    assert res.returncode == 0, f"kcat -C failed ({res.returncode}): {res.stderr.decode()[-2000:]}"
    got = res.stdout.decode().splitlines()
    assert got == lines, first_difference(got, lines)


def test_kcat_lists_auto_created_and_created_topics_with_their_partitions(standalone, kit):
    kit.create_topic(standalone.bootstrap, "three-parts", partitions=3)
    res = kcat("-b", standalone.bootstrap, "-P", "-t", "auto-created", "-K:", "-X", "acks=all",
               input=b"k:first message\n")
    assert res.returncode == 0, res.stderr.decode()

    res = kcat("-b", standalone.bootstrap, "-L", "-J", timeout=60)
    assert res.returncode == 0, res.stderr.decode()
    md = json.loads(res.stdout)
    topics = {t["topic"]: t for t in md["topics"]}
    assert "auto-created" in topics and "three-parts" in topics, sorted(topics)
    assert sorted(p["partition"] for p in topics["auto-created"]["partitions"]) == [0]
    assert sorted(p["partition"] for p in topics["three-parts"]["partitions"]) == [0, 1, 2]
    brokers = {b["id"]: b["name"] for b in md["brokers"]}
    assert standalone.bootstrap in brokers.values(), f"advertised brokers {brokers}"
    for t in ("auto-created", "three-parts"):
        for p in topics[t]["partitions"]:
            assert p["leader"] in brokers, f"{t}/{p['partition']} leader {p['leader']} not among {brokers}"
            assert "error" not in p, p

    # The plain-text listing names the same.
    res = kcat("-b", standalone.bootstrap, "-L", timeout=60)
    text = res.stdout.decode()
    assert 'topic "three-parts" with 3 partitions' in text, text
    assert 'topic "auto-created" with 1 partitions' in text, text


def test_created_topics_and_partitions_have_leaders_when_the_admin_call_answers(standalone):
    """CreateTopics and CreatePartitions answer once every new partition is
    owned (the metadata service places them in the command that creates
    them), so a client's next Metadata request finds every leader: no
    LEADER_NOT_AVAILABLE, no first writes waiting for a controller round."""
    import confluent_kafka.admin

    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": standalone.bootstrap})

    def leaders(topic):
        md = admin.list_topics(topic=topic, timeout=10).topics[topic]
        assert md.error is None, md.error
        return {p.id: (p.leader, p.error) for p in md.partitions.values()}

    for i in range(3):
        topic = f"placed-{i}"
        admin.create_topics([confluent_kafka.admin.NewTopic(topic, 16, 1)])[topic].result(30)
        got = leaders(topic)
        assert sorted(got) == list(range(16)), got
        assert all(leader >= 0 and err is None for leader, err in got.values()), got
    admin.create_partitions([confluent_kafka.admin.NewPartitions("placed-0", 24)])["placed-0"].result(30)
    got = leaders("placed-0")
    assert sorted(got) == list(range(24)), got
    assert all(leader >= 0 and err is None for leader, err in got.values()), got


def test_produce_to_unknown_topic_fails_when_auto_create_is_off(standalone_factory, kit):
    from confluent_kafka import KafkaError, Producer

    s = standalone_factory(auto_create_topics=False)
    # A producer's Metadata request asks for auto-creation; the answer is UNKNOWN_TOPIC_OR_PARTITION.
    md = Producer({"bootstrap.servers": s.bootstrap}).list_topics(topic="never-created", timeout=10)
    t = md.topics.get("never-created")
    assert t is not None and t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, \
        f"Metadata for an unknown topic with auto-creation off: {t and t.error}"
    reports = confluent_produce(s.bootstrap, "never-created", [(b"k", b"v", None, None, None)],
                                **{"message.timeout.ms": 10000, "topic.metadata.propagation.max.ms": 1000})
    err = reports[0][0]
    assert err is not None and err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC), err
    consumer = kit.consumer(s.bootstrap)
    try:
        assert "never-created" not in consumer.list_topics(timeout=10).topics
    finally:
        consumer.close()
    # Created explicitly, it works.
    kit.create_topic(s.bootstrap, "now-created")
    assert_delivered(confluent_produce(s.bootstrap, "now-created", [(b"k", b"v", None, None, None)]))


# ---------------------------------------------------------------- confluent-kafka

def mixed_messages(n, seed):
    """Keyed messages with binary keys and values, empty and null values, headers
    (none, several, duplicate names, empty and null values)."""
    rng = random.Random(seed)
    keys = [b"key-\x00\xff-" + str(k).encode() for k in range(40)]
    base_ts = int(time.time() * 1000) - n
    out = []
    for i in range(n):
        key = keys[rng.randrange(len(keys))]
        if i % 97 == 3:
            value = None
        elif i % 89 == 5:
            value = b""
        else:
            value = rng.randbytes(rng.randrange(1, 3000))
            if i % 3 == 0:
                value = value[:40] * 20  # compressible
        if i % 5 == 0:
            headers = None
        else:
            headers = [("idx", str(i).encode()), ("bin", bytes([i % 256, 0, 255])), ("dup", b"1"), ("dup", b"2")]
            if i % 7 == 0:
                headers.append(("empty", b""))
            if i % 11 == 0:
                headers.append(("null", None))
        out.append((key, value, headers, None, base_ts + i))
    return out


@pytest.mark.parametrize("compression", ["none", *CODECS])
def test_confluent_round_trip_is_byte_identical_and_keys_stick_to_a_partition(standalone, kit, compression):
    from confluent_kafka import TIMESTAMP_CREATE_TIME

    topic = f"confluent-{compression}"
    kit.create_topic(standalone.bootstrap, topic, partitions=3)
    messages = mixed_messages(1500, seed=compression)
    reports = confluent_produce(standalone.bootstrap, topic, messages, **{"compression.type": compression})
    assert_delivered(reports)

    key_partitions = {}
    for (key, *_), (_, partition, _, _) in zip(messages, reports):
        key_partitions.setdefault(key, set()).add(partition)
    assert all(len(p) == 1 for p in key_partitions.values()), "a key went to two partitions"
    assert len({p for ps in key_partitions.values() for p in ps}) == 3, "keys spread over all 3 partitions"

    # Offsets per partition are 0..n-1 in produce order.
    per_partition = {}
    for i, (_, partition, offset, _) in enumerate(reports):
        per_partition.setdefault(partition, []).append((offset, i))
    for p, entries in per_partition.items():
        assert [o for o, _ in entries] == list(range(len(entries))), f"partition {p} offsets not 0..n-1 in order"

    records = kit.consume(standalone.bootstrap, topic, partitions=(0, 1, 2))
    got = {(r[0], r[1]): r for r in records}
    assert len(records) == len(messages) == len(got), f"read {len(records)} records, {len(got)} distinct"
    for i, ((key, value, headers, _, ts), (_, partition, offset, _)) in enumerate(zip(messages, reports)):
        r = got.get((partition, offset))
        assert r is not None, f"message {i} ({partition}/{offset}) not read back"
        _, _, rkey, rvalue, rheaders, (rts_type, rts) = r
        assert rkey == key, f"message {i}: key {rkey!r} != {key!r}"
        assert rvalue == value, f"message {i} at {partition}/{offset}: value differs " \
                                f"(got {None if rvalue is None else len(rvalue)} bytes, want {None if value is None else len(value)})"
        assert (rheaders or None) == headers, f"message {i}: headers {rheaders!r} != {headers!r}"
        assert rts_type == TIMESTAMP_CREATE_TIME and rts == ts, f"message {i}: timestamp {rts_type}/{rts} != {ts}"


# ---------------------------------------------------------------- kafka-python

def test_kafka_python_admin_creates_describes_alters_and_deletes_topics(standalone):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=standalone.bootstrap, client_id="floe-test-admin",
                             request_timeout_ms=30000)
    try:
        admin.create_topics({"kp-admin": {"num_partitions": 2, "replication_factor": 1,
                                           "configs": {"retention.ms": "3600000", "cleanup.policy": "delete"}}})
        admin.wait_for_topics(["kp-admin"], timeout_ms=20000)
        assert "kp-admin" in admin.list_topics()
        [described] = admin.describe_topics(["kp-admin"])
        assert described["error_code"] == 0, described
        assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1]

        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics({"kp-admin": {"num_partitions": 2, "replication_factor": 1}})

        resource = lambda **configs: ConfigResource(ConfigResourceType.TOPIC, "kp-admin", configs or None)
        modified = admin.describe_configs([resource()])["topic"]["kp-admin"]
        assert modified["retention.ms"]["value"] == "3600000", modified
        assert modified["cleanup.policy"]["value"] == "delete", modified

        every = admin.describe_configs([resource()], config_filter="all")["topic"]["kp-admin"]
        understood = ["retention.ms", "retention.bytes", "segment.bytes", "segment.ms", "max.message.bytes",
                      "cleanup.policy", "message.timestamp.type"]
        missing = [k for k in understood if k not in every]
        assert not missing, f"DescribeConfigs (all) lacks {missing}; has {sorted(every)}"

        res = admin.alter_configs([resource(**{"retention.ms": "7200000", "max.message.bytes": "2000000"})])
        assert res == {"topic": {"kp-admin": "OK"}}, res
        modified = admin.describe_configs([resource()])["topic"]["kp-admin"]
        assert modified["retention.ms"]["value"] == "7200000", modified
        assert modified["max.message.bytes"]["value"] == "2000000", modified
        assert modified["cleanup.policy"]["value"] == "delete", "altering one key kept the others"

        res = admin.alter_configs([resource(**{"retention.ms": "not-a-number"})], raise_on_unknown=False)
        assert res["topic"]["kp-admin"] != "OK", "an invalid value is refused"
        res = admin.alter_configs([resource(**{"no.such.config": "1"})], raise_on_unknown=False)
        assert res["topic"]["kp-admin"] != "OK", "an unknown key is refused"
        modified = admin.describe_configs([resource()])["topic"]["kp-admin"]
        assert modified["retention.ms"]["value"] == "7200000", "a refused change changed nothing"

        admin.delete_topics(["kp-admin"])
        deadline = time.monotonic() + 20
        while "kp-admin" in admin.list_topics():
            assert time.monotonic() < deadline, "deleted topic still listed after 20 s"
            time.sleep(0.2)
    finally:
        admin.close()


def test_kafka_python_producer_and_assigned_consumer_round_trip(standalone, kit):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = "kafka-python"
    kit.create_topic(standalone.bootstrap, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=standalone.bootstrap, acks="all", enable_idempotence=False,
                             linger_ms=5, request_timeout_ms=30000)
    sent = []
    try:
        futures = []
        for i in range(1000):
            key, value = f"k{i % 17}".encode(), f"kafka-python value {i} ".encode() * (1 + i % 5)
            headers = [("idx", str(i).encode())]
            futures.append((key, value, headers, producer.send(topic, key=key, value=value, headers=headers)))
        for key, value, headers, fut in futures:
            md = fut.get(timeout=60)
            sent.append((md.partition, md.offset, key, value, headers))
    finally:
        producer.close(timeout=10)

    consumer = KafkaConsumer(bootstrap_servers=standalone.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=30000)
    got = {}
    try:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    got[(r.partition, r.offset)] = (r.key, r.value, list(r.headers))
    finally:
        consumer.close()
    assert len(got) == len(sent), f"read {len(got)} of {len(sent)}"
    for partition, offset, key, value, headers in sent:
        assert got[(partition, offset)] == (key, value, headers), f"record {partition}/{offset} differs"


# ---------------------------------------------------------------- aiokafka

def test_aiokafka_send_and_wait_then_assigned_consumer_reads_all(standalone, kit):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    topic = "aiokafka"
    kit.create_topic(standalone.bootstrap, topic, partitions=1)

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=standalone.bootstrap, acks="all", enable_idempotence=False,
                                    request_timeout_ms=30000)
        await producer.start()
        sent = []
        try:
            for i in range(150):  # one at a time: each waits for its acknowledgement
                md = await producer.send_and_wait(topic, key=b"k%d" % (i % 7), value=b"aio %d" % i,
                                                  headers=[("idx", b"%d" % i)])
                sent.append((md.offset, b"k%d" % (i % 7), b"aio %d" % i))
            batch = [await producer.send(topic, key=b"b%d" % i, value=b"batched %d" % i) for i in range(350)]
            for i, fut in enumerate(batch):
                md = await asyncio.wait_for(fut, 60)
                sent.append((md.offset, b"b%d" % i, b"batched %d" % i))
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer(bootstrap_servers=standalone.bootstrap, group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    request_timeout_ms=30000)
        await consumer.start()
        got = []
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            deadline = time.monotonic() + 60
            while len(got) < len(sent) and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend((r.offset, r.key, r.value) for r in records)
        finally:
            await consumer.stop()
        return sent, got

    sent, got = asyncio.run(asyncio.wait_for(run(), 150))
    assert [s[0] for s in sent] == list(range(500)), "offsets 0..499 in send order"
    assert got == sent, first_difference(got, sent)


# ---------------------------------------------------------------- kafkajs

def node_script(*args, timeout):
    if shutil.which("node") is None:
        pytest.fail("node is not installed")
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.fail("kafkajs is not installed: tests/run.sh runs `npm ci` in tests/js")
    return subprocess.run(["node", str(JS_DIR / "kafkajs_client.js"), *args], capture_output=True, text=True,
                          timeout=timeout)


def test_kafkajs_producer_with_acks_all_and_admin_offsets(standalone, kit):
    topic = "kafkajs-produce"
    res = node_script("produce", standalone.bootstrap, topic, "1000", timeout=120)
    assert res.returncode == 0, f"kafkajs produce exited {res.returncode}: {res.stderr[-3000:]}"
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert [c[0] for c in out["chunks"]] == [0] * 10
    assert [c[2] for c in out["chunks"]] == [0] * 10, out["chunks"]
    assert [c[1] for c in out["chunks"]] == list(range(0, 1000, 100)), "each chunk's base offset"
    offsets = {int(o["partition"]): o for o in out["offsets"]}
    assert list(offsets) == [0]
    assert int(offsets[0]["high"]) == 1000 and int(offsets[0]["low"]) == 0, offsets

    records = kit.consume(standalone.bootstrap, topic)
    assert [(r[1], r[2], r[3], r[4]) for r in records] == [
        (i, f"key-{i % 13}".encode(), f"kafkajs-value-{i}".encode(), [("idx", str(i).encode())]) for i in range(1000)]


def test_kafkajs_consumer_reads_everything(standalone, kit):
    topic = "kafkajs-consume"
    kit.create_topic(standalone.bootstrap, topic)
    messages = [(f"key-{i % 13}".encode(), f"kafkajs-value-{i}".encode(), [("idx", str(i).encode())], None, None)
                for i in range(300)]
    assert_delivered(confluent_produce(standalone.bootstrap, topic, messages))
    res = node_script("consume", standalone.bootstrap, topic, "300", "10", timeout=120)
    assert res.returncode == 0, f"kafkajs consume exited {res.returncode}: {res.stderr[-3000:]}"
    got = json.loads(res.stdout.strip().splitlines()[-1])["messages"]
    assert got == [[0, i, f"key-{i % 13}", f"kafkajs-value-{i}", str(i)] for i in range(300)]


# ---------------------------------------------------------------- offsets, fetch positions, retention

def test_offsets_for_times_returns_first_offset_at_or_after_the_timestamp(standalone, kit):
    from confluent_kafka import OFFSET_END, TopicPartition

    topic = "by-time"
    kit.create_topic(standalone.bootstrap, topic)
    base = (int(time.time()) - 3600) * 1000  # an hour ago, whole seconds
    messages = [(None, b"t%d" % i, None, None, base + i * 1000) for i in range(100)]
    reports = confluent_produce(standalone.bootstrap, topic, messages, flush_every=25)  # 4 batches
    assert_delivered(reports)
    assert [r[2] for r in reports] == list(range(100))

    consumer = kit.consumer(standalone.bootstrap)
    try:
        cases = {base - 5000: 0, base: 0, base + 1: 1, base + 41_999: 42, base + 42_000: 42, base + 42_001: 43,
                 base + 74_500: 75, base + 99_000: 99, base + 99_001: OFFSET_END}
        got = {}
        for ts in cases:  # one partition may appear once per ListOffsets request
            [answer] = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=20)
            assert answer.error is None, f"timestamp base{ts - base:+}: {answer.error}"
            got[ts] = answer.offset
        wrong = {ts - base: (got[ts], want) for ts, want in cases.items() if got[ts] != want}
        assert not wrong, f"{{timestamp - base: (got, want)}}: {wrong}"
    finally:
        consumer.close()
    records = kit.consume(standalone.bootstrap, topic)
    assert [r[5][1] for r in records] == [base + i * 1000 for i in range(100)], "CreateTime kept as produced"


def test_log_append_time_topic_stamps_records_on_arrival(standalone, kit):
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

    topic = "append-time"
    kit.create_topic(standalone.bootstrap, topic, config={"message.timestamp.type": "LogAppendTime"})
    old = (int(time.time()) - 86400) * 1000
    before = int(time.time() * 1000)
    assert_delivered(confluent_produce(standalone.bootstrap, topic, [(None, b"x%d" % i, None, None, old)
                                                                     for i in range(20)]))
    after = int(time.time() * 1000)
    records = kit.consume(standalone.bootstrap, topic)
    assert len(records) == 20
    for r in records:
        ts_type, ts = r[5]
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME, f"offset {r[1]}: timestamp type {ts_type}"
        assert before - 5000 <= ts <= after + 5000, f"offset {r[1]}: timestamp {ts} not in [{before}, {after}]"


def test_fetch_from_the_middle_of_a_batch_starts_at_the_asked_offset(standalone, kit):
    from kafka import KafkaConsumer, TopicPartition

    topic = "mid-batch"
    kit.create_topic(standalone.bootstrap, topic)
    messages = [(b"k%d" % i, b"mid-batch value %03d" % i, None, None, None) for i in range(100)]
    # All 100 queued before the flush: one produce request, one batch.
    reports = confluent_produce(standalone.bootstrap, topic, messages, **{"linger.ms": 5000})
    assert_delivered(reports)
    assert [r[2] for r in reports] == list(range(100))

    records = kit.consume(standalone.bootstrap, topic, start=50)
    assert [r[1] for r in records] == list(range(50, 100)), f"offsets read from 50: {[r[1] for r in records][:5]}..."
    assert records[0][3] == b"mid-batch value 050"

    res = kcat("-b", standalone.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "50", "-c", "1", "-e",
               "-f", "%o %s\n", timeout=60)
    assert res.stdout.decode() == "50 mid-batch value 050\n", res.stderr.decode()[-1000:]

    consumer = KafkaConsumer(bootstrap_servers=standalone.bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 50)
        first = None
        deadline = time.monotonic() + 30
        while first is None and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=500, max_records=1).values():
                first = recs[0]
        assert first is not None and (first.offset, first.value) == (50, b"mid-batch value 050"), first
    finally:
        consumer.close()


def wait_low_watermark_above(kit, bootstrap, topic, floor, seconds=30):
    deadline = time.monotonic() + seconds
    low, high = kit.watermarks(bootstrap, topic)
    while low <= floor and time.monotonic() < deadline:
        time.sleep(0.5)
        low, high = kit.watermarks(bootstrap, topic)
    return low, high


def old_offset_is_out_of_range(kit, bootstrap, topic, offset):
    from confluent_kafka import KafkaError, TopicPartition

    consumer = kit.consumer(bootstrap, **{"auto.offset.reset": "error"})
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                return m.error().code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET), m.error()
            return False, f"read offset {m.offset()}"
        return False, "no answer in 20 s"
    finally:
        consumer.close()


@pytest.mark.parametrize("config", [
    {"retention.ms": "1000", "segment.bytes": "1024"},
    {"retention.bytes": "2048", "retention.ms": "-1", "segment.bytes": "1024"},
], ids=["retention.ms", "retention.bytes"])
def test_retention_deletes_old_segments_and_moves_the_log_start(standalone_factory, kit, config):
    s = standalone_factory(compaction_interval_ms=500, retention_check_interval_ms=500, flush_interval_ms=5)
    topic = "retained"
    kit.create_topic(s.bootstrap, topic, config=config)
    messages = [(None, b"%05d" % i + b"r" * 95, None, None, None) for i in range(200)]
    reports = confluent_produce(s.bootstrap, topic, messages, flush_every=10)  # 20 batches of ~1 KiB
    assert_delivered(reports)
    assert [r[2] for r in reports] == list(range(200))

    low, high = wait_low_watermark_above(kit, s.bootstrap, topic, 0, seconds=30)
    assert low > 0, f"log start still 0 after 30 s with {config} (high watermark {high})"
    assert high == 200, f"high watermark {high} after retention"
    if "retention.bytes" in config:
        # The retained tail is a few segments of ~1 KiB, not half the log.
        low, high = wait_low_watermark_above(kit, s.bootstrap, topic, 100, seconds=10)
        assert low > 100, f"only {low} of 200 ~110-byte records deleted with retention.bytes=2048"

    records = kit.consume(s.bootstrap, topic)
    assert records, "the log is readable after retention"
    first = records[0][1]
    assert first >= low, f"read offset {first} below the log start {low}"
    assert [r[1] for r in records] == list(range(first, 200))
    assert [r[3] for r in records] == [m[1] for m in messages[first:]]
    ok, what = old_offset_is_out_of_range(kit, s.bootstrap, topic, 0)
    assert ok, f"fetch at deleted offset 0: expected OFFSET_OUT_OF_RANGE, got {what}"


def test_delete_records_moves_the_low_watermark(standalone, kit):
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.errors import OffsetOutOfRangeError

    topic = "delete-records"
    kit.create_topic(standalone.bootstrap, topic)
    messages = [(None, b"dr %d" % i, None, None, None) for i in range(100)]
    assert_delivered(confluent_produce(standalone.bootstrap, topic, messages, flush_every=20))

    admin = KafkaAdminClient(bootstrap_servers=standalone.bootstrap, request_timeout_ms=30000)
    try:
        res = admin.delete_records({TopicPartition(topic, 0): 40})
        assert res[TopicPartition(topic, 0)]["low_watermark"] == 40, res
        assert kit.watermarks(standalone.bootstrap, topic) == (40, 100)
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({TopicPartition(topic, 0): 101})
    finally:
        admin.close()
    records = kit.consume(standalone.bootstrap, topic)
    assert [r[1] for r in records] == list(range(40, 100))

    confluent_admin = AdminClient({"bootstrap.servers": standalone.bootstrap})  # kept alive until answered
    futures = confluent_admin.delete_records([CTopicPartition(topic, 0, 60)], operation_timeout=20)
    deleted = list(futures.values())[0].result(timeout=30)
    assert deleted.low_watermark == 60
    assert kit.watermarks(standalone.bootstrap, topic) == (60, 100)
    ok, what = old_offset_is_out_of_range(kit, standalone.bootstrap, topic, 10)
    assert ok, f"fetch at deleted offset 10: expected OFFSET_OUT_OF_RANGE, got {what}"
