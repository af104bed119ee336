"""Delayed topics for classic consumers (docs/queues.md, "Delayed topics for
classic consumers"): a topic with `floe.delayed.delivery=true` holds records
produced with a `floe-deliver-at` / `floe-delay-ms` header due later in the
partition's log (as control batches of a Floe type) and appends each to the
topic when due, at a new offset, with its key, value and headers.

With `floe standalone`: an idempotent confluent-kafka producer sends plain and
delayed records; a confluent-kafka consumer sees the plain ones at once and each
delayed one only once due, exactly once, with its key, value and headers (plus
`floe-delayed-from`); kafka-python, aiokafka, kcat, kafkajs and `floe consume` read the topic
without error and never see the held entries; a `kill -9` of the standalone while
records are pending, and a restart on the same folder, delivers each still exactly
once and none early; a transactional producer's delayed record is refused
(INVALID_RECORD); the config is refused (INVALID_CONFIG) with compaction; a
share group on a delayed topic gets each record once, when due (its own delay
handling would do that alone: this checks the held entries do not disturb it)."""

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from collections import Counter

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,  # noqa: E402
                                   ConfigResource, NewTopic, ResourceType)

from test_cli_kafka import floe, ok  # noqa: E402
from test_kafka_clients import JS_DIR  # noqa: E402

pytestmark = pytest.mark.timeout(240)

DELAYED = {"floe.delayed.delivery": "true"}


def now_ms():
    return int(time.time() * 1000)


def producer(bootstrap, **extra):
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5}
    conf.update(extra)
    return Producer(conf)


def send_all(p, records, topic):
    """Sends (key, value, headers) records and waits for every delivery report;
    returns the errors (None for a stored record), in order."""
    results = [None] * len(records)
    done = [False] * len(records)

    def report(i):
        def cb(err, _msg):
            results[i] = err
            done[i] = True
        return cb

    for i, (key, value, headers) in enumerate(records):
        p.produce(topic, key=key, value=value, headers=headers, on_delivery=report(i))
    deadline = time.monotonic() + 60
    while not all(done):
        assert time.monotonic() < deadline, "delivery reports missing after 60 s"
        p.poll(0.1)
    p.flush(30)
    return results


def read_until(bootstrap, topic, wanted, timeout, kit):
    """A confluent-kafka consumer from the beginning, until every value in
    `wanted` was seen (or `timeout`): [(offset, key, value, headers, seen_ms)]."""
    c = kit.consumer(bootstrap)
    got = []
    try:
        c.assign([TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while not wanted <= {g[2] for g in got}:
            assert time.monotonic() < deadline, \
                f"not all seen after {timeout}s: missing {sorted(wanted - {g[2] for g in got})}"
            for m in c.consume(num_messages=500, timeout=0.2):
                assert m.error() is None, m.error()
                got.append((m.offset(), m.key(), m.value(), m.headers() or [], now_ms()))
    finally:
        c.close()
    return got


def header(headers, name):
    values = [v for k, v in headers if k == name]
    return values[-1] if values else None


def high_watermark(bootstrap, topic, kit):
    return kit.watermarks(bootstrap, topic)[1]


def test_classic_consumers_see_delayed_records_once_due_at_new_offsets_exactly_once(floe_bin, standalone, kit):
    topic = f"delayed-{uuid.uuid4().hex[:8]}"
    kit.create_topic(standalone.bootstrap, topic, config=DELAYED)
    start = now_ms()
    plain = [(b"pk%d" % i, b"plain-%d" % i, [("app", b"p%d" % i)]) for i in range(5)]
    due = {}
    delayed = []
    for i in range(6):
        at = start + 2_000 + 300 * i
        value = b"delayed-%d" % i
        due[value] = at
        delayed.append((b"dk%d" % i, value, [("app", b"d%d" % i), ("floe-deliver-at", str(at).encode())]))
    # A delay relative to the record's timestamp.
    delayed.append((b"dk-rel", b"delayed-rel", [("floe-delay-ms", b"2500")]))
    p = producer(standalone.bootstrap)
    sent_ms = now_ms()
    assert send_all(p, plain + delayed, topic) == [None] * (len(plain) + len(delayed))
    due[b"delayed-rel"] = sent_ms + 2_500
    # Plain records after the delayed ones are not held up.
    assert send_all(p, [(b"late", b"plain-after", [])], topic) == [None]

    values = {v for _, v, _ in plain + delayed} | {b"plain-after"}
    got = read_until(standalone.bootstrap, topic, values, timeout=60, kit=kit)
    by_value = {g[2]: g for g in got}
    counts = Counter(g[2] for g in got)
    assert all(n == 1 for n in counts.values()), f"read more than once: {counts}"
    plain_offsets = [by_value[v][0] for _, v, _ in plain] + [by_value[b"plain-after"][0]]
    assert plain_offsets == sorted(plain_offsets)
    for key, value, headers in delayed:
        offset, k, v, h, seen = by_value[value]
        assert k == key
        assert seen >= due[value] - 5, f"{value} seen {due[value] - seen} ms early"
        # Original headers first, then where it was held.
        assert h[:len(headers)] == headers, h
        assert header(h, "floe-delayed-from") is not None, h
        assert offset > max(plain_offsets), "a delayed record gets a new offset after the plain ones"
    # The plain ones were read long before the first delayed one was due.
    assert min(by_value[v][4] for _, v, _ in plain) < min(due.values())

    # Nothing more comes: the log ends with the re-appends, each once.
    time.sleep(0.5)
    end = high_watermark(standalone.bootstrap, topic, kit)
    everything = kit.consume(standalone.bootstrap, topic)
    assert Counter(r[3] for r in everything) == Counter(values), "every client-visible record once"
    assert end > len(values), "the held entries take offsets of their own"

    # Other clients read the same records and skip the held entries.
    expect = sorted((r[1], r[3]) for r in everything)
    assert kafka_python_read(standalone.bootstrap, topic, end) == expect
    assert aiokafka_read(standalone.bootstrap, topic, end) == expect
    assert kcat_read(standalone.bootstrap, topic) == sorted(v for _, v in expect)
    assert kafkajs_read(standalone.bootstrap, topic, len(expect)) == sorted(v for _, v in expect)
    # Floe's own consumer too.
    out = ok(floe(floe_bin, standalone.bootstrap, "consume", topic, "--timeout-ms", "1000",
                  "-f", "%o %s\n")).stdout
    assert sorted(tuple(line.split(" ", 1)) for line in out.splitlines()) == \
        sorted((str(o), v.decode()) for o, v in expect)


def kafka_python_read(bootstrap, topic, end):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", request_timeout_ms=30000)
    got = []
    try:
        tp = KTopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        deadline = time.monotonic() + 60
        while c.position(tp) < end:
            assert time.monotonic() < deadline, f"kafka-python at {c.position(tp)} of {end}"
            for records in c.poll(timeout_ms=500).values():
                got.extend((r.offset, r.value) for r in records)
    finally:
        c.close()
    return sorted(got)


def aiokafka_read(bootstrap, topic, end):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATopicPartition

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=30000)
        await c.start()
        got = []
        try:
            tp = ATopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            deadline = time.monotonic() + 60
            while await c.position(tp) < end:
                assert time.monotonic() < deadline, f"aiokafka at {await c.position(tp)} of {end}"
                for records in (await c.getmany(timeout_ms=500)).values():
                    got.extend((r.offset, r.value) for r in records)
        finally:
            await c.stop()
        return sorted(got)

    return asyncio.run(asyncio.wait_for(run(), 90))


def kcat_read(bootstrap, topic):
    exe = shutil.which("kcat")
    if exe is None:
        pytest.fail("kcat is not installed: tests/run.sh installs it (apt-get install kcat)")
    res = subprocess.run([exe, "-b", bootstrap, "-C", "-t", topic, "-e", "-o", "beginning", "-f", "%s\n"],
                         capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    return sorted(line for line in res.stdout.split(b"\n") if line)


def kafkajs_read(bootstrap, topic, count):
    if shutil.which("node") is None or not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.fail("node or kafkajs missing: tests/run.sh runs `npm ci` in tests/js")
    res = subprocess.run(["node", str(JS_DIR / "kafkajs_client.js"), "consume", bootstrap, topic, str(count), "60"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"kafkajs exited {res.returncode}: {res.stderr[-3000:]}"
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return sorted(m[3].encode() for m in out["messages"])


def test_pending_delayed_records_survive_kill_9_each_delivered_once_and_never_early(standalone, kit):
    topic = f"delayed-kill-{uuid.uuid4().hex[:8]}"
    kit.create_topic(standalone.bootstrap, topic, config=DELAYED)
    start = now_ms()
    due = {}
    records = []
    for i in range(30):
        # A third come due before the kill, the rest after the restart.
        at = start + (800 if i < 10 else 6_000) + 20 * i
        value = b"k9-%d" % i
        due[value] = at
        records.append((b"key%d" % i, value, [("floe-deliver-at", str(at).encode())]))
    p = producer(standalone.bootstrap)
    assert send_all(p, records, topic) == [None] * len(records)
    time.sleep(max(0.0, (start + 1_800 - now_ms()) / 1000))
    standalone.kill9()
    standalone.start()
    standalone.wait_ready()

    got = read_until(standalone.bootstrap, topic, set(due), timeout=90, kit=kit)
    for _, _, value, _, seen in got:
        assert seen >= due[value] - 5, f"{value} seen {due[value] - seen} ms early"
    # Each once, also a while after the last was due.
    time.sleep(1.0)
    everything = kit.consume(standalone.bootstrap, topic)
    counts = Counter(r[3] for r in everything)
    assert counts == Counter(set(due)), f"not each exactly once: {sorted(counts.items())}"


def test_a_transactional_delayed_record_is_refused_and_the_config_with_compaction(standalone, kit):
    topic = f"delayed-txn-{uuid.uuid4().hex[:8]}"
    kit.create_topic(standalone.bootstrap, topic, config=DELAYED)
    p = producer(standalone.bootstrap, **{"transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    p.init_transactions(30)
    p.begin_transaction()
    later = str(now_ms() + 60_000).encode()
    errors = send_all(p, [(b"k", b"in-txn", [("floe-deliver-at", later)])], topic)
    assert errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD, errors
    with pytest.raises(KafkaException):
        p.commit_transaction(30)
    p.abort_transaction(30)
    # A transaction without delays commits on the same topic.
    p.begin_transaction()
    assert send_all(p, [(b"k", b"plain-in-txn", [])], topic) == [None]
    p.commit_transaction(30)
    # (The commit's marker is written after EndTxn is answered: read until
    # the record is there rather than up to a high watermark read now.)
    got = read_until(standalone.bootstrap, topic, {b"plain-in-txn"}, timeout=30, kit=kit)
    assert [g[2] for g in got] == [b"plain-in-txn"]

    admin = AdminClient({"bootstrap.servers": standalone.bootstrap})
    both = NewTopic(f"delayed-compact-{uuid.uuid4().hex[:6]}", num_partitions=1, replication_factor=1,
                    config={"floe.delayed.delivery": "true", "cleanup.policy": "compact"})
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([both])[both.topic].result(30)
    err = refused.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG and "compact" in err.str(), err
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        for fut in admin.incremental_alter_configs([res]).values():
            fut.result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    entries = list(described.values())[0].result(30)
    assert entries["floe.delayed.delivery"].value == "true"
    assert entries["cleanup.policy"].value == "delete"


def test_a_share_group_on_a_delayed_topic_gets_each_record_once_when_due(standalone_factory, kit):
    from confluent_kafka import AcknowledgeType, ShareConsumer

    s = standalone_factory(share_groups=True, share_auto_offset_reset="earliest")
    topic = f"delayed-share-{uuid.uuid4().hex[:8]}"
    kit.create_topic(s.bootstrap, topic, config=DELAYED)
    due = {b"sh-%d" % i: now_ms() + 1_500 + 200 * i for i in range(4)}
    records = [(b"k", v, [("floe-deliver-at", str(at).encode())]) for v, at in due.items()]
    assert send_all(producer(s.bootstrap), records + [(b"k", b"sh-plain", [])], topic) == [None] * 5
    c = ShareConsumer({"bootstrap.servers": s.bootstrap, "group.id": f"sg-{uuid.uuid4().hex[:6]}",
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    got = Counter()
    try:
        deadline = time.monotonic() + 60
        while set(got) != set(due) | {b"sh-plain"}:
            assert time.monotonic() < deadline, f"share consumer got {got}"
            msgs = c.poll(0.2)
            for m in msgs:
                assert m.error() is None, m.error()
                if m.value() in due:
                    assert now_ms() >= due[m.value()] - 5, f"{m.value()} early"
                got[m.value()] += 1
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if len(msgs):
                c.commit_sync()
    finally:
        c.close()
    assert all(n == 1 for n in got.values()), got
