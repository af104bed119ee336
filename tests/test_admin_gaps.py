"""Admin and protocol gaps a new user meets (issue 16), each with a real client
against one `floe standalone` shared by the module: CreateTopics with replica
assignments, the `compression.type` topic config, OffsetCommit for topics that do
not exist, keyless records on a compacted topic."""

import re

import pytest


pytestmark = [pytest.mark.timeout(180)]


@pytest.fixture
def server(module_standalone):
    return module_standalone


@pytest.fixture(autouse=True)
def _log_tail_on_failure(request, server):
    # conftest's report hook adds these processes' log tails to a failure.
    request.node._floe_standalones = [server]


def admin(server):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": server.bootstrap})


def create(server, topics, timeout=30):
    """Creates the NewTopics and returns {name: exception or None}."""
    client = admin(server)  # kept alive until every answer is in
    futures = client.create_topics(topics, operation_timeout=timeout)
    out = {}
    for name, f in futures.items():
        try:
            f.result(timeout=timeout)
            out[name] = None
        except Exception as e:  # noqa: BLE001 - the KafkaException is the answer looked at
            out[name] = e
    return out


def error_name(e):
    return e.args[0].name() if e is not None else None


# ---------------------------------------------------------------- replica assignments

def test_create_topics_accepts_consistent_replica_assignments_and_refuses_others(server):
    from confluent_kafka.admin import NewTopic

    got = create(server, [
        # Broker ids Floe does not have: the placement is Floe's, the ids are ignored.
        # librdkafka wants the count beside the assignments, and sends -1 in its place.
        NewTopic("assigned", num_partitions=3, replica_assignment=[[1, 2], [2, 3], [3, 1]]),
        NewTopic("assigned-uneven", num_partitions=2, replica_assignment=[[1, 2], [1]]),
        NewTopic("assigned-twice", num_partitions=1, replica_assignment=[[1, 1]]),
    ])
    assert got["assigned"] is None, got["assigned"]
    assert error_name(got["assigned-uneven"]) == "INVALID_REPLICA_ASSIGNMENT"
    assert error_name(got["assigned-twice"]) == "INVALID_REPLICA_ASSIGNMENT"
    for name in ("assigned-uneven", "assigned-twice"):
        assert got[name].args[0].str(), f"{name}: no error message"
    md = admin(server).list_topics(timeout=10).topics
    assert len(md["assigned"].partitions) == 3
    assert "assigned-uneven" not in md and "assigned-twice" not in md


# ---------------------------------------------------------------- compression.type

def describe_topic_config(server, topic):
    from confluent_kafka.admin import ConfigResource

    client = admin(server)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return client.describe_configs([res])[res].result(timeout=30)


def test_compression_type_is_validated_described_and_applied_to_produced_batches(server, kit):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    got = create(server, [
        NewTopic("zstd-topic", num_partitions=1, config={"compression.type": "zstd"}),
        NewTopic("brotli-topic", num_partitions=1, config={"compression.type": "brotli"}),
    ])
    assert got["zstd-topic"] is None, got["zstd-topic"]
    assert error_name(got["brotli-topic"]) == "INVALID_CONFIG"
    entry = describe_topic_config(server, "zstd-topic")["compression.type"]
    assert (entry.value, entry.is_default) == ("zstd", False)

    # Batches the producer compressed with gzip, and uncompressed ones, read back
    # exactly (the broker recompressed them into zstd; librdkafka checks the CRCs).
    messages = [(f"k{i % 7}".encode(), f"value-{i}".encode() * (1 + i % 5), None, 0, None) for i in range(500)]
    half = len(messages) // 2
    reports = kit_produce(server, "zstd-topic", messages[:half], **{"compression.type": "gzip"})
    reports += kit_produce(server, "zstd-topic", messages[half:], **{"compression.type": "none"})
    assert [r[2] for r in reports] == list(range(len(messages))), "offsets in produce order"
    read = kit.consume(server.bootstrap, "zstd-topic")
    assert [(r[1], r[2], r[3]) for r in read] == [(i, m[0], m[1]) for i, m in enumerate(messages)]

    # Altered incrementally and refused with an unknown codec.
    client = admin(server)
    res = ConfigResource(ConfigResource.Type.TOPIC, "zstd-topic", incremental_configs=[
        ConfigEntry("compression.type", "lz4", incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([res])[res].result(timeout=30)
    assert describe_topic_config(server, "zstd-topic")["compression.type"].value == "lz4"
    bad = ConfigResource(ConfigResource.Type.TOPIC, "zstd-topic", incremental_configs=[
        ConfigEntry("compression.type", "none", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        client.incremental_alter_configs([bad])[bad].result(timeout=30)
    assert e.value.args[0].name() == "INVALID_CONFIG"
    # A default topic keeps what the producer sent.
    kit.create_topic(server.bootstrap, "default-codec")
    assert describe_topic_config(server, "default-codec")["compression.type"].value == "producer"


def kit_produce(server, topic, messages, **conf):
    from test_kafka_clients import assert_delivered, confluent_produce

    reports = confluent_produce(server.bootstrap, topic, messages, **conf)
    assert_delivered(reports)
    return reports


# ---------------------------------------------------------------- OffsetCommit

def test_offset_commit_for_a_topic_or_partition_that_does_not_exist_is_refused_per_partition(server, kit):
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    kit.create_topic(server.bootstrap, "committed", partitions=2)
    group = "gaps-commit"
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        asked = [TopicPartition("committed", 0, 5), TopicPartition("no-such-topic", 0, 7),
                 TopicPartition("committed", 9, 3), TopicPartition("committed", 1, 4)]
        # librdkafka raises the first partition's error; what each partition
        # got is read back below from what was stored.
        with pytest.raises(KafkaException) as e:
            c.commit(offsets=asked, asynchronous=False)
        assert e.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, e.value
        stored = c.committed([TopicPartition("committed", 0), TopicPartition("committed", 1),
                              TopicPartition("no-such-topic", 0)], timeout=30)
        got = {(tp.topic, tp.partition): tp.offset for tp in stored}
        # The existing partitions are stored; nothing (-1001: no offset) for the missing ones.
        assert got[("committed", 0)] == 5 and got[("committed", 1)] == 4, got
        assert got[("no-such-topic", 0)] < 0, got
    finally:
        c.close()


# ---------------------------------------------------------------- keyless records on a compacted topic

def test_keyless_records_on_a_compacted_topic_are_refused_with_invalid_record(server, kit):
    from test_kafka_clients import confluent_produce

    kit.create_topic(server.bootstrap, "compacted", config={"cleanup.policy": "compact"})
    # One record per request (linger 0, batch of 1), so each delivery report is
    # its own batch's answer.
    conf = {"linger.ms": 0, "batch.num.messages": 1, "message.timeout.ms": 30000}
    reports = confluent_produce(server.bootstrap, "compacted",
                                [(b"k1", b"v1", None, 0, None), (None, b"no key", None, 0, None),
                                 (b"k2", b"v2", None, 0, None)], **conf)
    errors = [r[0].name() if r[0] else None for r in reports]
    assert errors == [None, "INVALID_RECORD", None], errors
    read = kit.consume(server.bootstrap, "compacted")
    assert [(r[2], r[3]) for r in read] == [(b"k1", b"v1"), (b"k2", b"v2")]


# ---------------------------------------------------------------- Metadata v0

def test_metadata_v0_with_an_empty_topic_list_lists_every_topic(server, kit):
    from test_kafka_clients import kcat

    kit.create_topic(server.bootstrap, "listed-at-v0", partitions=2)
    # Without ApiVersions, librdkafka falls back to Metadata v0, where "all
    # topics" is an empty list (v1+ sends null).
    out = kcat("-b", server.bootstrap, "-L", "-X", "api.version.request=false",
               "-X", "broker.version.fallback=0.9.0", timeout=60)
    assert out.returncode == 0, out.stderr
    assert 'topic "listed-at-v0" with 2 partitions' in out.stdout.decode(), out.stdout


# ---------------------------------------------------------------- OffsetForLeaderEpoch (runs last: restarts the server)

def api_requests(server, api):
    import re
    import urllib.request

    with urllib.request.urlopen(server.admin_url + "/metrics", timeout=10) as res:
        text = res.read().decode()
    m = re.search(r'floe_proxy_api_requests_total\{[^}]*api="%s"[^}]*\} (\d+)' % api, text)
    return int(m.group(1)) if m else 0


def test_a_consumer_validates_its_position_after_an_owner_change_and_keeps_reading(server, kit):
    import time

    from test_kafka_clients import confluent_produce
    from confluent_kafka import TopicPartition

    kit.create_topic(server.bootstrap, "validated")
    first = [(f"k{i}".encode(), f"a{i}".encode(), None, 0, None) for i in range(50)]
    confluent_produce(server.bootstrap, "validated", first)
    c = kit.consumer(server.bootstrap)
    try:
        c.assign([TopicPartition("validated", 0, 0)])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 50 and time.monotonic() < deadline:
            got += [m for m in c.consume(100, timeout=0.5) if not m.error()]
        assert [m.offset() for m in got] == list(range(50))
        # A restart: the partition is taken over again at a new epoch, which the
        # consumer sees in Metadata and checks its position against (KIP-320).
        # (Were the epoch kept, the client would ask only when its first fetch
        # after the restart happened to fail: a race, not a rule.)
        server.restart()
        deadline = time.monotonic() + 30
        while True:
            since = server.log_path.read_text().rsplit("---- start #", 1)[-1]
            since = re.sub(r"\x1b\[[0-9;]*m", "", since)  # the log's colours
            taken = [int(e) for e in re.findall(r"took partition over .*? epoch=(\d+)", since)]
            if taken or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert taken and min(taken) >= 2, f"the restart kept the epoch: {taken}"
        second = [(f"k{i}".encode(), f"b{i}".encode(), None, 0, None) for i in range(50)]
        confluent_produce(server.bootstrap, "validated", second)
        deadline = time.monotonic() + 90
        while len(got) < 100 and time.monotonic() < deadline:
            got += [m for m in c.consume(100, timeout=0.5) if not m.error()]
        # No reset to the beginning, no gap: the position was found valid.
        assert [m.offset() for m in got] == list(range(100))
        assert [m.value() for m in got[50:]] == [v for _, v, _, _, _ in second]
        assert api_requests(server, "OffsetForLeaderEpoch") > 0, "the client never asked"
    finally:
        c.close()


def test_describe_log_dirs_reports_each_partitions_stored_bytes(server, kit):
    """kafka-python's describe_log_dirs (as `kafka-log-dirs.sh` asks): one log
    directory, each partition once, its size the bytes stored."""
    from kafka.admin import KafkaAdminClient

    from test_kafka_clients import confluent_produce

    kit.create_topic(server.bootstrap, "sized", partitions=2)
    value = b"v" * 1000
    confluent_produce(server.bootstrap, "sized", [(None, value, None, 1, None)] * 20)
    client = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        answers = client.describe_log_dirs()
        asked = client.describe_log_dirs({"sized": [0, 1]})
    finally:
        client.close()

    def sizes(answers):
        """{partition: size} of "sized" over every broker's answer."""
        out = {}
        for broker in answers:
            for d in broker["log_dirs"]:
                assert d["error_code"] == 0, d
                for t in (t for t in d["topics"] if t["name"] == "sized"):
                    for p in t["partitions"]:
                        assert p["partition_index"] not in out, "a partition reported twice"
                        out[p["partition_index"]] = p["partition_size"]
        return out

    got = sizes(answers)
    assert sorted(got) == [0, 1], got
    # 20 records of 1,000 bytes went to partition 1; partition 0 holds nothing.
    assert got[0] == 0 and got[1] >= 20 * 1000, got
    assert sizes(asked) == got


def test_kafka_python_reads_many_partitions_through_an_incremental_fetch_session(server, kit):
    """kafka-python opens a fetch session (KIP-227) and then fetches
    incrementally: every record of 12 partitions arrives once, in order, also
    those written to two partitions while it reads."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    from test_kafka_clients import confluent_produce

    kit.create_topic(server.bootstrap, "sessions", partitions=12)
    first = [(None, f"a{p}-{i}".encode(), None, p, None) for p in range(12) for i in range(10)]
    confluent_produce(server.bootstrap, "sessions", first)
    before = fetches(server)
    c = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False,
                      auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        c.assign([TopicPartition("sessions", p) for p in range(12)])
        got = {}

        def read(until):
            deadline = time.monotonic() + 60
            while sum(len(v) for v in got.values()) < until and time.monotonic() < deadline:
                for tp, msgs in c.poll(timeout_ms=200).items():
                    got.setdefault(tp.partition, []).extend((m.offset, m.value.decode()) for m in msgs)

        read(120)
        second = [(None, f"b{p}-{i}".encode(), None, p, None) for p in (3, 7) for i in range(20)]
        confluent_produce(server.bootstrap, "sessions", second)
        read(160)
        handlers = list(c._fetcher._session_handlers.values())
    finally:
        c.close()
    for p in range(12):
        want = [f"a{p}-{i}" for i in range(10)] + ([f"b{p}-{i}" for i in range(20)] if p in (3, 7) else [])
        assert [v for _, v in got[p]] == want, p
        assert [o for o, _ in got[p]] == list(range(len(want))), p
    # The client holds a session the proxy opened, and fetched incrementally in it.
    assert any(h.next_metadata.session_id > 0 and h.next_metadata.epoch > 1 for h in handlers), \
        [(h.next_metadata.session_id, h.next_metadata.epoch) for h in handlers]
    after = fetches(server)
    assert after["opened"] > before["opened"] and after["incremental"] > before["incremental"], (before, after)
    assert after["refused"] == before["refused"]


def fetches(server):
    """floe_proxy_fetches_total by session use."""
    import re
    import urllib.request

    with urllib.request.urlopen(server.admin_url + "/metrics", timeout=10) as res:
        text = res.read().decode()
    out = {k: 0 for k in ("none", "opened", "incremental", "refused")}
    for k, v in re.findall(r'floe_proxy_fetches_total\{session="(\w+)"\} (\d+)', text):
        out[k] = int(v)
    return out
