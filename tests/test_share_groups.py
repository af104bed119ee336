"""Share groups (KIP-932) with confluent-kafka's ShareConsumer against `floe
standalone --share-groups true`: one consumer and then three on one partition read
every record with explicit acknowledgements, none delivered to two consumers; a
RELEASEd record comes back with a higher delivery count; an accepted record never
comes back; the records of a consumer killed (kill -9) while holding them go to
another once their locks expire. Without the flag a ShareConsumer is told the
broker does not support share groups. In a cluster of processes (two brokers, two
proxies), consumers through both proxies share one partition, and the broker owning
it killed (kill -9) mid-way hands the share state over: nothing confirmed accepted
comes back (docs/queues.md)."""

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



def test_a_groups_delivery_count_limit_archives_a_record_released_that_often(floe, kit):
    """`share.delivery.count.limit`, set on the group (GROUP config resource),
    is applied by the share-partition: a record released at each delivery is
    delivered that many times and then archived, never again."""
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, ResourceType)

    topic, group = new_topic(kit, floe), f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": floe.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.delivery.count.limit", "2",
                    incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(30)
    produce(floe.bootstrap, topic, [b"a", b"b", b"c", b"d"])
    deliveries = []
    c = share_consumer(floe.bootstrap, group, topic)
    try:
        def take(m):
            deliveries.append((m.offset(), m.delivery_count()))
            return AcknowledgeType.RELEASE if m.offset() == 1 else AcknowledgeType.ACCEPT
        # Offset 1 is released at each delivery: twice, then archived. Record 3
        # comes after it, so once 3 is in and 1 came twice, wait a little for a
        # third delivery that must not come.
        poll_until(c, lambda: (1, 2) in deliveries and (3, 1) in deliveries, take)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for m in c.poll(0.5):
                assert m.error() is None, m.error()
                c.acknowledge(m, take(m))
    finally:
        c.close()
    assert sorted(deliveries) == [(0, 1), (1, 1), (1, 2), (2, 1), (3, 1)]


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


def test_with_the_flag_off_a_share_consumer_is_told_share_groups_are_not_supported(standalone_factory):
    standalone = standalone_factory(share_groups=False)
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


# ---- In a cluster of processes: share-partitions at the partition's owner.


def owner_of_the_only_partition(cluster):
    """The broker owning the cluster's only partition (by its owned-partitions gauge)."""
    import re
    import urllib.request

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        owners = []
        for b in cluster.brokers:
            if not b.alive():
                continue
            with urllib.request.urlopen(f"http://{b.admin}/metrics", timeout=5) as r:
                text = r.read().decode()
            m = re.search(r"^floe_broker_owned_partitions\s+(\d+)", text, re.M)
            if m and int(m.group(1)) == 1:
                owners.append(b)
        if len(owners) == 1:
            return owners[0]
        time.sleep(0.2)
    raise AssertionError("no single owner of the partition")


class Tracked:
    """A ShareConsumer that accepts what it gets and records which ACCEPTs the
    broker confirmed (the acknowledgement commit callback without an error)."""

    def __init__(self, bootstrap, group, topic, name, log):
        self.name, self.log = name, log
        # A few records a poll, so that both consumers get some.
        self.c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                "share.acknowledgement.mode": "explicit", "max.poll.records": 20})
        self.c.set_acknowledgement_commit_callback(self.acked)
        self.c.subscribe([topic])
        self.held = []

    def acked(self, offsets, exception):
        if exception is None:
            for _, offs in offsets.items():
                for o in offs:
                    self.log.append(("accepted", self.name, o))

    def hold(self, timeout=30):
        """Polls records and keeps them unacknowledged (until the next poll)."""
        deadline = time.monotonic() + timeout
        while not self.held:
            assert time.monotonic() < deadline, "nothing to hold"
            self.held = [m for m in self.c.poll(0.5) if m.error() is None]
            for m in self.held:
                self.log.append(("delivered", self.name, m.offset()))
        return [m.offset() for m in self.held]

    def poll_once(self):
        # Records held are acknowledged first (explicit mode wants them before
        # the next poll); after a failover the new owner refuses those.
        for m in self.held:
            self.c.acknowledge(m, AcknowledgeType.ACCEPT)
        self.held = []
        for m in self.c.poll(0.5):
            if m.error() is None:
                self.log.append(("delivered", self.name, m.offset()))
                self.c.acknowledge(m, AcknowledgeType.ACCEPT)
        try:
            self.c.commit_sync(30)
        except Exception as e:  # a failed commit: those ACCEPTs are not confirmed
            self.log.append(("commit-failed", self.name, str(e)))


def test_a_cluster_shares_a_partition_across_proxies_and_survives_its_owner_killed(floe_bin, tmp_path, kit):
    """Two ShareConsumers through two proxies on one partition; mid-way the
    broker owning the partition is killed (kill -9): the other broker takes it
    over with the share state the first wrote, so no record whose ACCEPT was
    confirmed is delivered again, and every record is accepted in the end."""
    from floe_cluster import Cluster

    total = int(os.environ.get("FLOE_SHARE_CLUSTER_RECORDS", "300"))
    cluster = Cluster(floe_bin, tmp_path, metas=1, brokers=2, proxies=2, proxy_flags=(
        "--default-partitions", "1", "--share-groups", "true",
        "--share-auto-offset-reset", "earliest", "--share-record-lock-duration-ms", "3000"))
    try:
        p1, p2 = (p.addr("kafka") for p in cluster.proxies)
        topic, group = f"share-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
        kit.create_topic(p1, topic)
        produce(p1, topic, [b"r%d" % i for i in range(total)])
        log = []
        consumers = [Tracked(p1, group, topic, "a", log), Tracked(p2, group, topic, "b", log)]

        def accepted():
            return {o for kind, _, o in log if kind == "accepted"}

        def consume_until(done, timeout):
            deadline = time.monotonic() + timeout
            while not done():
                assert time.monotonic() < deadline, (len(accepted()), cluster.logs())
                for c in consumers:
                    c.poll_once()

        try:
            consume_until(lambda: len(accepted()) >= total // 3, 90)
            # b holds records, unacknowledged, while the owner dies.
            held = consumers[1].hold()
            owner = owner_of_the_only_partition(cluster)
            before = set(accepted())
            killed_at = len(log)
            owner.kill9()
            consume_until(lambda: len(accepted()) == total, 120)
        finally:
            for c in consumers:
                try:
                    c.c.close()
                except Exception:  # the owner may be gone mid-close
                    pass
        # Nothing confirmed accepted came back: each offset delivered after
        # its confirmed ACCEPT is a failure.
        confirmed, again = set(), []
        for kind, who, o in log:
            if kind == "accepted":
                confirmed.add(o)
            elif o in confirmed:
                again.append((who, o))
        assert again == []
        assert sorted(accepted()) == list(range(total))
        # Both consumers got records, and some were accepted before the kill.
        assert {who for kind, who, _ in log if kind == "delivered"} == {"a", "b"}
        assert before and before <= accepted()
        # The held records were delivered again after the kill.
        after = {o for kind, _, o in log[killed_at:] if kind == "delivered"}
        assert set(held) - before <= after
        print("accepted before the kill:", len(before), "held:", len(held), "deliveries:",
              sum(1 for kind, _, _ in log if kind == "delivered"))
    finally:
        cluster.stop()
