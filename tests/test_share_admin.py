"""Share groups' admin side (KIP-932) against `floe standalone --share-groups true`,
with real clients: a group id is one kind of group (a classic consumer's group is
refused to a ShareConsumer with GROUP_ID_NOT_FOUND, a share group's to a classic
consumer with INCONSISTENT_GROUP_PROTOCOL, and a share group known only from its
stored state after a restart stays one); `floe group list / describe` show share
groups with their start offsets and lag; `floe group reset-offsets` and
`delete-offsets` move and delete a share group's start offsets
(AlterShareGroupOffsets, DeleteShareGroupOffsets) only while it has no members; a
share group is deleted with the AdminClient (DeleteGroups), refused while it has
members. confluent-kafka's AdminClient has no share-offset calls yet (2.16), hence
the CLI (docs/queues.md)."""

import json
import subprocess
import time
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import (  # noqa: E402
    AcknowledgeType, Consumer, KafkaError, KafkaException, Producer, ShareConsumer)
from confluent_kafka.admin import AdminClient  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def floe(floe_bin, tmp_path_factory):
    from conftest import Standalone

    s = Standalone(floe_bin, tmp_path_factory.mktemp("share-admin"), share_groups=True,
                   share_auto_offset_reset="earliest")
    s.start()
    yield s
    s.stop()


def cli(floe_bin, floe, *args):
    return subprocess.run([str(floe_bin), *args, "--bootstrap", floe.bootstrap],
                          capture_output=True, text=True, timeout=60)


def ok(res):
    assert res.returncode == 0, (res.stdout, res.stderr)
    return res


def produce(bootstrap, topic, n):
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i)
    assert p.flush(30) == 0


def share_consumer(bootstrap, group, topic):
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def acknowledge(consumer, count, ack=lambda m: AcknowledgeType.ACCEPT, timeout=30):
    """Reads `count` records of a ShareConsumer (explicit acknowledgement),
    acknowledging each as `ack(message)` says and committing each poll's;
    returns their (partition, offset, delivery count) in the order read."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"{len(got)} of {count} records: {got}"
        msgs = consumer.poll(0.5)
        for m in msgs:
            assert m.error() is None, m.error()
            got.append((m.partition(), m.offset(), m.delivery_count()))
            consumer.acknowledge(m, ack(m))
        if len(msgs):
            consumer.commit_sync()
    return got


def accept(consumer, count, timeout=30):
    """Accepts `count` records; returns their (offset, delivery count)."""
    return [(o, d) for _, o, d in acknowledge(consumer, count, timeout=timeout)]


def classic_error(bootstrap, group, topic, timeout=20):
    """The first error a classic consumer of `group` is told (None if it reads)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            return m.error().code() if m.error() else None
        return "nothing within the timeout"
    finally:
        c.close()


def share_error(bootstrap, group, topic):
    """The fatal error a ShareConsumer of `group` is told (None if it is not)."""
    sc = share_consumer(bootstrap, group, topic)
    try:
        for _ in range(20):
            sc.poll(0.5)
        return None
    except KafkaException as e:
        return e.args[0].code()
    finally:
        sc.close()


def listed(floe_bin, floe):
    rows = [json.loads(line) for line in ok(cli(floe_bin, floe, "group", "list", "--json")).stdout.splitlines()]
    return {r["group"]: (r["type"], r["state"]) for r in rows}


def described(floe_bin, floe, group):
    return json.loads(ok(cli(floe_bin, floe, "group", "describe", group, "--json")).stdout)


def test_a_group_id_is_one_kind_even_without_members_and_after_a_restart(floe, floe_bin, kit):
    topic = f"ns-{uuid.uuid4().hex[:8]}"
    kit.create_topic(floe.bootstrap, topic)
    produce(floe.bootstrap, topic, 3)
    classic, share = f"c-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"

    # A classic consumer reads and commits, then leaves: the id stays classic.
    assert classic_error(floe.bootstrap, classic, topic) is None
    assert share_error(floe.bootstrap, classic, topic) == KafkaError.GROUP_ID_NOT_FOUND

    # A share group reads, its member leaves: the id stays a share group.
    sc = share_consumer(floe.bootstrap, share, topic)
    try:
        assert [o for o, _ in accept(sc, 3)] == [0, 1, 2]
    finally:
        sc.close()
    assert classic_error(floe.bootstrap, share, topic) == KafkaError.INCONSISTENT_GROUP_PROTOCOL

    # After a restart only the stored share state says so: still refused, and
    # listed as an Empty share group.
    floe.restart()
    assert classic_error(floe.bootstrap, share, topic) == KafkaError.INCONSISTENT_GROUP_PROTOCOL
    assert share_error(floe.bootstrap, classic, topic) == KafkaError.GROUP_ID_NOT_FOUND
    assert listed(floe_bin, floe)[share] == ("share", "Empty")


def test_share_offsets_are_reset_and_deleted_only_without_members(floe, floe_bin, kit):
    topic, group = f"adm-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    kit.create_topic(floe.bootstrap, topic)
    produce(floe.bootstrap, topic, 6)
    admin = AdminClient({"bootstrap.servers": floe.bootstrap})

    sc = share_consumer(floe.bootstrap, group, topic)
    try:
        assert [o for o, _ in accept(sc, 6)] == list(range(6))
        assert listed(floe_bin, floe)[group] == ("share", "Stable")
        d = described(floe_bin, floe, group)
        assert (d["type"], d["state"], d["members"]) == ("share", "Stable", 1)
        assert [(p["start_offset"], p["log_end_offset"], p["lag"]) for p in d["partitions"]] == [(6, 6, 0)]
        # A member is live: no change, no deletion.
        res = cli(floe_bin, floe, "group", "reset-offsets", group, "--topic", topic,
                  "--to-earliest", "--execute")
        assert res.returncode != 0 and "member" in res.stderr, (res.stdout, res.stderr)
        res = cli(floe_bin, floe, "group", "delete-offsets", group, "--topic", topic)
        assert res.returncode != 0 and "NON_EMPTY_GROUP" in res.stderr, (res.stdout, res.stderr)
        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups([group], request_timeout=10)[group].result(15)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        sc.close()

    # No member: the start moves back to 2; records 2..5 come again, as new.
    ok(cli(floe_bin, floe, "group", "reset-offsets", group, "--topic", topic, "--to-offset", "2", "--execute"))
    d = described(floe_bin, floe, group)
    assert [(p["start_offset"], p["lag"]) for p in d["partitions"]] == [(2, 4)]
    assert d["total_lag"] == 4
    sc = share_consumer(floe.bootstrap, group, topic)
    try:
        assert accept(sc, 4) == [(2, 1), (3, 1), (4, 1), (5, 1)]
    finally:
        sc.close()

    # Deleted: no start offset is left for the group.
    ok(cli(floe_bin, floe, "group", "delete-offsets", group, "--topic", topic))
    assert described(floe_bin, floe, group)["partitions"] == []

    # DeleteGroups through the AdminClient: gone from the listing.
    admin.delete_consumer_groups([group], request_timeout=10)[group].result(15)
    assert group not in listed(floe_bin, floe)
    res = cli(floe_bin, floe, "group", "describe", group)
    assert res.returncode != 0 and "does not exist" in res.stderr, (res.stdout, res.stderr)
