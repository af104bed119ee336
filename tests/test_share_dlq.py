"""Floe's queue features on share groups (docs/queues.md, "Beyond the standard"),
with confluent-kafka's ShareConsumer against `floe standalone --share-groups true`
and a cluster of processes: a REJECTed record is appended to the group's
dead-letter topic (`floe.dlq.topic`) once, with its key, value, headers and
`floe-dlq-*` headers, and is never delivered again; a record released up to
`share.delivery.count.limit` goes there too, with its reason; a redelivery backoff
(`floe.retry.backoff.base.ms`) makes a released record come back no earlier than its
delay, without holding up the records behind it; the owner of the partition killed
(kill -9) after REJECTs leaves each rejected record in the dead-letter topic exactly
once."""

import os
import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import AcknowledgeType, Consumer, Producer, TopicPartition  # noqa: E402

from test_share_groups import owner_of_the_only_partition, produce, share_consumer  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def floe(floe_bin, tmp_path_factory):
    from conftest import Standalone

    s = Standalone(floe_bin, tmp_path_factory.mktemp("share-dlq"), share_groups=True,
                   share_auto_offset_reset="earliest", share_record_lock_duration_ms=3000)
    s.start()
    yield s
    s.stop()


def names():
    tag = uuid.uuid4().hex[:8]
    return f"src-{tag}", f"dlq-{tag}", f"g-{tag}"


def set_group_configs(bootstrap, group, configs):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(30)


def read_all(bootstrap, topic, at_least=0, timeout=30):
    """Every record of partition 0 of `topic` up to its high watermark, once it
    holds at least `at_least`, as (key, value, headers as a dict)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    tp = TopicPartition(topic, 0)
    try:
        deadline = time.monotonic() + timeout
        while True:
            _, high = c.get_watermark_offsets(tp, timeout=10)
            if high >= at_least:
                break
            assert time.monotonic() < deadline, f"{topic} holds {high} records, not {at_least}"
            time.sleep(0.2)
        c.assign([TopicPartition(topic, 0, 0)])
        out = []
        while len(out) < high:
            assert time.monotonic() < deadline + 30, f"read {len(out)} of {high}"
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            headers = {k: (v.decode() if v is not None else None) for k, v in (m.headers() or [])}
            out.append((m.key(), m.value(), headers))
        return out
    finally:
        c.close()


def consume(consumer, done, on_message, timeout=30):
    """Polls until `done()`, acknowledging each record with `on_message(m)`'s type."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not done after {timeout}s"
        msgs = consumer.poll(0.3)
        for m in msgs:
            assert m.error() is None, m.error()
            consumer.acknowledge(m, on_message(m))
        if len(msgs):
            consumer.commit_sync()


def test_a_rejected_record_goes_to_the_dead_letter_topic_once_and_never_comes_back(floe, kit):
    src, dlq, group = names()
    kit.create_topic(floe.bootstrap, src)
    kit.create_topic(floe.bootstrap, dlq)
    set_group_configs(floe.bootstrap, group, {"floe.dlq.topic": dlq})
    p = Producer({"bootstrap.servers": floe.bootstrap})
    for i in range(4):
        p.produce(src, key=b"k%d" % i, value=b"v%d" % i, headers=[("trace", b"t%d" % i)])
    assert p.flush(30) == 0
    seen = []
    c = share_consumer(floe.bootstrap, group, src)
    try:
        def take(m):
            seen.append(m.offset())
            return AcknowledgeType.REJECT if m.offset() == 2 else AcknowledgeType.ACCEPT
        consume(c, lambda: len(set(seen)) == 4, take)
        dead = read_all(floe.bootstrap, dlq, at_least=1)
        # A record produced after the rejected one arrives, and the rejected
        # one never again (the consumer keeps polling meanwhile).
        produce(floe.bootstrap, src, [b"after"])
        consume(c, lambda: 4 in seen, take)
    finally:
        c.close()
    assert sorted(seen) == [0, 1, 2, 3, 4], seen
    assert len(dead) == 1, dead
    key, value, headers = dead[0]
    assert (key, value) == (b"k2", b"v2")
    assert headers == {"trace": "t2", "floe-dlq-topic": src, "floe-dlq-partition": "0",
                       "floe-dlq-offset": "2", "floe-dlq-delivery-count": "1",
                       "floe-dlq-reason": "rejected", "floe-dlq-group": group}
    # Still exactly one once everything is done.
    assert len(read_all(floe.bootstrap, dlq)) == 1


def test_a_record_released_up_to_the_delivery_limit_goes_to_the_dead_letter_topic(floe, kit):
    src, dlq, group = names()
    kit.create_topic(floe.bootstrap, src)
    kit.create_topic(floe.bootstrap, dlq)
    set_group_configs(floe.bootstrap, group, {"floe.dlq.topic": dlq, "share.delivery.count.limit": "2"})
    produce(floe.bootstrap, src, [b"poison", b"fine"])
    deliveries = []
    c = share_consumer(floe.bootstrap, group, src)
    try:
        def take(m):
            deliveries.append((m.offset(), m.delivery_count()))
            return AcknowledgeType.RELEASE if m.value() == b"poison" else AcknowledgeType.ACCEPT
        consume(c, lambda: (0, 2) in deliveries and (1, 1) in deliveries, take)
        dead = read_all(floe.bootstrap, dlq, at_least=1)
    finally:
        c.close()
    assert len(dead) == 1, dead
    _, value, headers = dead[0]
    assert value == b"poison"
    assert (headers["floe-dlq-reason"], headers["floe-dlq-delivery-count"], headers["floe-dlq-offset"]) \
        == ("delivery-count-limit", "2", "0")
    assert sorted(deliveries) == [(0, 1), (0, 2), (1, 1)]


def test_a_backoff_delays_a_released_record_without_holding_up_the_next(floe, kit):
    """`floe.retry.backoff.base.ms` = 2000: a record released once comes back no
    earlier than 2 s after the release was confirmed (tolerance 100 ms for the
    confirmation's way back to the client; the owner starts the delay before it
    answers), and a record produced after it is delivered meanwhile."""
    src, _, group = names()
    kit.create_topic(floe.bootstrap, src)
    set_group_configs(floe.bootstrap, group, {"floe.retry.backoff.base.ms": "2000",
                                               "floe.retry.backoff.max.ms": "2000"})
    produce(floe.bootstrap, src, [b"first"])
    events = []
    c = share_consumer(floe.bootstrap, group, src)
    try:
        def take(m):
            events.append((m.offset(), m.delivery_count(), time.monotonic()))
            return AcknowledgeType.RELEASE if m.delivery_count() == 1 and m.offset() == 0 \
                else AcknowledgeType.ACCEPT
        consume(c, lambda: len(events) >= 1, take)
        released_at = time.monotonic()  # commit_sync returned: the release is applied
        produce(floe.bootstrap, src, [b"second"])
        consume(c, lambda: any(o == 0 and d == 2 for o, d, _ in events), take)
    finally:
        c.close()
    again = next(t for o, d, t in events if o == 0 and d == 2)
    assert again - released_at >= 2.0 - 0.1, again - released_at
    second = [t for o, _, t in events if o == 1]
    assert second and second[0] < again, events


def test_rejected_records_are_in_the_dead_letter_topic_once_after_the_owner_is_killed(floe_bin, tmp_path, kit):
    """Two brokers, one proxy; a ShareConsumer REJECTs every record; the broker
    owning the source partition is killed (kill -9) half-way: records whose
    REJECT was written are appended by the new owner if the old one had not
    (a possibly landed append repeated with its sequence is a duplicate), the
    others are delivered again and rejected again. The dead-letter topic ends
    with each record exactly once."""
    from floe_cluster import Cluster

    total = int(os.environ.get("FLOE_SHARE_DLQ_RECORDS", "40"))
    cluster = Cluster(floe_bin, tmp_path, metas=1, brokers=2, proxies=1, proxy_flags=(
        "--default-partitions", "1", "--share-groups", "true",
        "--share-auto-offset-reset", "earliest", "--share-record-lock-duration-ms", "3000"))
    try:
        bs = cluster.kafka
        src, dlq, group = names()
        kit.create_topic(bs, src)
        owner = owner_of_the_only_partition(cluster)
        kit.create_topic(bs, dlq)
        set_group_configs(bs, group, {"floe.dlq.topic": dlq})
        produce(bs, src, [b"r%d" % i for i in range(total)])
        from confluent_kafka import ShareConsumer
        c = ShareConsumer({"bootstrap.servers": bs, "group.id": group,
                           "share.acknowledgement.mode": "explicit", "max.poll.records": 5})
        c.subscribe([src])
        rejected = set()
        killed = False
        watch = Consumer({"bootstrap.servers": bs, "group.id": f"w-{uuid.uuid4().hex[:8]}"})
        try:
            deadline = time.monotonic() + 60
            # Until the dead-letter topic holds as many records as were
            # produced: a REJECT the dead owner had not written comes back and
            # is rejected again.
            while len(rejected) < total or \
                    watch.get_watermark_offsets(TopicPartition(dlq, 0), timeout=10)[1] < total:
                assert time.monotonic() < deadline, (len(rejected), cluster.logs())
                for m in c.poll(0.3):
                    if m.error() is None:
                        rejected.add(m.offset())
                        c.acknowledge(m, AcknowledgeType.REJECT)
                try:
                    c.commit_sync(30)
                except Exception:  # the owner died under this commit: delivered again
                    pass
                if not killed and len(rejected) >= total // 2:
                    owner.kill9()
                    killed = True
        finally:
            watch.close()
            try:
                c.close()
            except Exception:
                pass
        assert killed
        dead = read_all(bs, dlq, at_least=total)
        offsets = sorted(int(h["floe-dlq-offset"]) for _, _, h in dead)
        assert offsets == list(range(total)), offsets
        assert all(v == b"r%s" % h["floe-dlq-offset"].encode() for _, v, h in dead)
    finally:
        cluster.stop()
