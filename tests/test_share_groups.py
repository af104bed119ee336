"""Share groups (KIP-932) with confluent-kafka's ShareConsumer against `floe
standalone --share-groups true`: one consumer and then three on one partition read
every record with explicit acknowledgements, none delivered to two consumers; a
RELEASEd record comes back with a higher delivery count; an accepted record never
comes back; the records of a consumer killed (kill -9) while holding them go to
another once their locks expire. Without the flag a ShareConsumer is told the
broker does not support share groups. The share state is in memory for now
(docs/queues.md)."""

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer  # noqa: E402

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def floe(floe_bin, tmp_path_factory):
    from conftest import Standalone

    s = Standalone(floe_bin, tmp_path_factory.mktemp("share"), share_groups=True,
                   share_auto_offset_reset="earliest")
    s.start()
    yield s
    s.stop()


def produce(bootstrap, topic, values):
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(topic, value=v)
    assert p.flush(30) == 0


def share_consumer(bootstrap, group, topic):
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def poll_until(consumer, done, on_message, timeout=60):
    """Polls until `done()`; `on_message(m)` returns the acknowledgement type of each
    record (every polled record is acknowledged before the next poll)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not done after {timeout}s"
        msgs = consumer.poll(0.5)
        for m in msgs:
            assert m.error() is None, m.error()
            consumer.acknowledge(m, on_message(m))
        if len(msgs):
            consumer.commit_sync()


def new_topic(kit, floe):
    name = f"share-{uuid.uuid4().hex[:8]}"
    kit.create_topic(floe.bootstrap, name)
    return name


def test_one_consumer_reads_every_record_once_and_accepted_ones_never_return(floe, kit):
    topic, group = new_topic(kit, floe), f"g-{uuid.uuid4().hex[:8]}"
    values = [b"v%d" % i for i in range(50)]
    produce(floe.bootstrap, topic, values)
    got = []
    c = share_consumer(floe.bootstrap, group, topic)
    try:
        def take(m):
            got.append((m.offset(), m.value(), m.delivery_count()))
            return AcknowledgeType.ACCEPT
        poll_until(c, lambda: len(got) >= len(values), take)
    finally:
        c.close()
    assert [(o, v) for o, v, _ in got] == list(enumerate(values))
    assert {d for _, _, d in got} == {1}

    # A new member of the same group sees only what came after: the marker.
    produce(floe.bootstrap, topic, [b"marker"])
    later = []
    c = share_consumer(floe.bootstrap, group, topic)
    try:
        def take_later(m):
            later.append((m.offset(), m.value()))
            return AcknowledgeType.ACCEPT
        poll_until(c, lambda: any(v == b"marker" for _, v in later), take_later)
    finally:
        c.close()
    assert later == [(50, b"marker")]


def test_three_consumers_on_one_partition_share_its_records_without_duplicates(floe, kit):
    topic, group = new_topic(kit, floe), f"g-{uuid.uuid4().hex[:8]}"
    total = 300
    lock = threading.Lock()
    got = {}  # offset -> consumer index
    dupes = []
    errors = []

    def run(index, consumer):
        def take(m):
            with lock:
                if m.offset() in got:
                    dupes.append((m.offset(), got[m.offset()], index))
                got[m.offset()] = index
            return AcknowledgeType.ACCEPT
        try:
            poll_until(consumer, lambda: len(got) >= total, take, timeout=90)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    consumers = [share_consumer(floe.bootstrap, group, topic) for _ in range(3)]
    try:
        threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(consumers)]
        for t in threads:
            t.start()
        # Records arrive while the three consume, in waves.
        for wave in range(10):
            produce(floe.bootstrap, topic, [b"w%d-%d" % (wave, i) for i in range(total // 10)])
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
    finally:
        for c in consumers:
            c.close()
    assert not errors, errors
    assert dupes == []
    assert sorted(got) == list(range(total))
    print("records per consumer:", [sum(1 for i in got.values() if i == k) for k in range(3)])


def test_a_released_record_comes_back_with_a_higher_delivery_count(floe, kit):
    topic, group = new_topic(kit, floe), f"g-{uuid.uuid4().hex[:8]}"
    produce(floe.bootstrap, topic, [b"a", b"b", b"c"])
    deliveries = []
    c = share_consumer(floe.bootstrap, group, topic)
    try:
        def take(m):
            deliveries.append((m.offset(), m.delivery_count()))
            if m.offset() == 1 and m.delivery_count() == 1:
                return AcknowledgeType.RELEASE
            return AcknowledgeType.ACCEPT
        poll_until(c, lambda: (1, 2) in deliveries, take)
    finally:
        c.close()
    assert sorted(deliveries) == [(0, 1), (1, 1), (1, 2), (2, 1)]


# A share consumer that prints the offsets of its first poll and then holds them
# (never acknowledges) until it is killed.
HOLDER = textwrap.dedent("""
    import json, sys, time
    from confluent_kafka import ShareConsumer
    bootstrap, group, topic = sys.argv[1:4]
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    while True:
        msgs = c.poll(0.5)
        if len(msgs):
            print(json.dumps([m.offset() for m in msgs if m.error() is None]), flush=True)
            break
    time.sleep(3600)
""")


def test_records_of_a_killed_consumer_go_to_another_after_their_locks_expire(standalone_factory, kit):
    floe = standalone_factory(share_groups=True, share_auto_offset_reset="earliest",
                              share_record_lock_duration_ms=2000)
    topic, group = new_topic(kit, floe), f"g-{uuid.uuid4().hex[:8]}"
    produce(floe.bootstrap, topic, [b"r%d" % i for i in range(10)])
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, floe.bootstrap, group, topic],
                              stdout=subprocess.PIPE, text=True)
    try:
        held = json.loads(holder.stdout.readline() or "[]")
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
    assert held, "the holder got no records"
    got = {}
    c = share_consumer(floe.bootstrap, group, topic)
    try:
        def take(m):
            got[m.offset()] = m.delivery_count()
            return AcknowledgeType.ACCEPT
        poll_until(c, lambda: len(got) >= 10, take)
    finally:
        c.close()
    assert sorted(got) == list(range(10))
    # The held records were delivered a second time; the others once.
    assert {o: d for o, d in got.items() if o in held} == {o: 2 for o in held}
    assert all(d == 1 for o, d in got.items() if o not in held)


def test_without_the_flag_a_share_consumer_is_told_share_groups_are_not_supported(standalone):
    lines = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger = logging.getLogger(f"share-{uuid.uuid4().hex[:8]}")
    logger.addHandler(Collect())
    logger.setLevel(logging.DEBUG)
    c = ShareConsumer({"bootstrap.servers": standalone.bootstrap, "group.id": "g",
                       "debug": "cgrp", "logger": logger})
    c.subscribe(["anything"])
    try:
        deadline = time.monotonic() + 30
        while not any("ShareGroupHeartbeatRequest not supported by broker" in m for m in lines):
            assert time.monotonic() < deadline, lines[-5:]
            assert len(c.poll(0.2)) == 0
    finally:
        c.close()
