"""`share.isolation.level` for share groups (docs/queues.md), with confluent-kafka's
transactional producer and ShareConsumer against `floe standalone`: a group set to
read_committed gets the records of committed transactions and of no transaction,
never those of an aborted one, and an open transaction's records (and what follows
them) only once it commits; the owner archives the aborted records and the
transaction markers itself, so the group's start offset moves over them with no
acknowledgement from the client. A read_uncommitted group on the same topic gets
every data record: the aborted ones and the open transaction's at once.
(Without the isolation level applied, the first group gets the aborted records
too: librdkafka's ShareConsumer does not drop them itself.)"""

import json
import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer  # noqa: E402

from test_cli_kafka import floe, ok  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def share_consumer(bootstrap, group, topic, extra=None):
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit", **(extra or {})})
    c.subscribe([topic])
    return c


def take(consumer, seconds):
    """Every value the consumer gets within `seconds`, each accepted."""
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msgs = consumer.poll(0.2)
        for m in msgs:
            assert m.error() is None, m.error()
            got.append(m.value())
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
        if len(msgs):
            consumer.commit_sync()
    return got


def take_until(consumer, want, timeout=30):
    got = []
    deadline = time.monotonic() + timeout
    while not want <= set(got):
        assert time.monotonic() < deadline, f"got {got}, wanted {want}"
        got += take(consumer, 0.2)
    return got


def test_a_read_committed_share_group_never_gets_aborted_or_open_transactions(
        floe_bin, standalone_factory, kit):
    s = standalone_factory(share_auto_offset_reset="earliest")
    topic = f"iso-{uuid.uuid4().hex[:8]}"
    kit.create_topic(s.bootstrap, topic, partitions=1)
    committed_group = f"rc-{uuid.uuid4().hex[:6]}"
    ok(floe(floe_bin, s.bootstrap, "group", "alter", committed_group,
            "--config", "share.isolation.level=read_committed"))
    uncommitted_group = f"ru-{uuid.uuid4().hex[:6]}"

    p = Producer({"bootstrap.servers": s.bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions(30)
    plain = Producer({"bootstrap.servers": s.bootstrap})
    plain.produce(topic, value=b"plain-1")
    assert plain.flush(30) == 0
    p.begin_transaction()
    for v in (b"c1", b"c2"):
        p.produce(topic, value=v)
    p.commit_transaction(30)
    p.begin_transaction()
    for v in (b"a1", b"a2", b"a3"):
        p.produce(topic, value=v)
    p.flush(30)  # stored, then aborted (an abort purges what is not sent yet)
    p.abort_transaction(30)
    plain.produce(topic, value=b"plain-2")
    assert plain.flush(30) == 0
    # An open transaction: its record, and what follows it, wait.
    p.begin_transaction()
    p.produce(topic, value=b"open-1")
    p.flush(30)
    plain.produce(topic, value=b"plain-3")
    assert plain.flush(30) == 0

    rc = share_consumer(s.bootstrap, committed_group, topic)
    ru = share_consumer(s.bootstrap, uncommitted_group, topic)
    def start_offset(group):
        res = ok(floe(floe_bin, s.bootstrap, "group", "describe", group, "--json"))
        return json.loads(res.stdout)["partitions"][0]["start_offset"]

    # Offsets: plain-1 0, c1 1, c2 2, commit marker 3, a1–a3 4–6, abort
    # marker 7, plain-2 8, open-1 9, plain-3 10.
    try:
        got = take_until(rc, {b"plain-1", b"c1", b"c2", b"plain-2"})
        got += take(rc, 1.5)
        assert sorted(got) == [b"c1", b"c2", b"plain-1", b"plain-2"], got
        # Everything below the open transaction is done for the group: the
        # markers and the aborted records were archived by the owner.
        assert start_offset(committed_group) == 9
        # read_uncommitted: every data record, the aborted and open ones too.
        seen = take_until(ru, {b"plain-1", b"c1", b"c2", b"a1", b"a2", b"a3", b"plain-2",
                               b"open-1", b"plain-3"})
        assert len(seen) == len(set(seen)) == 9, seen

        p.commit_transaction(30)
        got = take_until(rc, {b"open-1", b"plain-3"})
        got += take(rc, 1.0)
        assert sorted(got) == [b"open-1", b"plain-3"], got
        assert start_offset(committed_group) == 12  # past the commit marker at 11
    finally:
        rc.close()
        ru.close()
