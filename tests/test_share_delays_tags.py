"""Floe's tag filters and delayed records for share groups (docs/queues.md,
"Beyond the standard"), with confluent-kafka's ShareConsumer against `floe
standalone --share-groups true`: two share groups with different `floe.filter`s
(set with `floe group alter` and with IncrementalAlterConfigs on the GROUP
resource) on one topic each get exactly their records, a group without one gets
them all, and a filter outside the accepted forms is INVALID_CONFIG; records with
`floe-deliver-at` times spread over ~2 s (and one with `floe-delay-ms`) arrive no
earlier than due and in due order, records behind them are not held up, a
malformed delay is delivered at once, and a kill -9 and restart of the standalone
in between loses none and delivers none early."""

import time
import urllib.request
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,  # noqa: E402
                                   ConfigResource, ResourceType)

from test_cli_kafka import floe, ok  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def share_consumer(bootstrap, group, topic):
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def consume_until(consumer, done, on_message, timeout=30):
    """Polls until `done()`, accepting every record and committing after each poll."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not done after {timeout}s"
        msgs = consumer.poll(0.2)
        for m in msgs:
            assert m.error() is None, m.error()
            on_message(m)
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
        if len(msgs):
            consumer.commit_sync()


def metric(server, name):
    with urllib.request.urlopen(server.admin_url + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return -1.0


def test_share_groups_with_different_filters_each_get_exactly_their_records(
        floe_bin, standalone_factory, kit):
    s = standalone_factory(share_groups=True, share_auto_offset_reset="earliest")
    topic = f"tags-{uuid.uuid4().hex[:8]}"
    kit.create_topic(s.bootstrap, topic)
    g_a, g_b, g_all = (f"{n}-{uuid.uuid4().hex[:6]}" for n in ("a", "b", "all"))

    # One group by `floe group alter`, the other by IncrementalAlterConfigs.
    ok(floe(floe_bin, s.bootstrap, "group", "alter", g_a, "--config", "floe.filter=TagA"))
    admin = AdminClient({"bootstrap.servers": s.bootstrap})
    res = ConfigResource(ResourceType.GROUP, g_b, incremental_configs=[
        ConfigEntry("floe.filter", "TagB || region=eu", incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)
    # Other forms are refused, saying which are accepted.
    bad = floe(floe_bin, s.bootstrap, "group", "alter", g_a, "--config", "floe.filter=TagA && TagB")
    text = bad.stderr + bad.stdout
    assert bad.returncode != 0 and "INVALID_CONFIG" in text.upper().replace(" ", "_"), text
    assert "accepted" in text, text

    # (value, headers); the last record matches both filters and ends each run.
    records = [
        (b"a1", [("floe-tag", b"TagA")]),
        (b"b1", [("floe-tag", b"TagB")]),
        (b"none", []),
        (b"eu", [("region", b"eu")]),
        (b"c1", [("floe-tag", b"TagC")]),
        (b"us", [("region", b"us"), ("floe-tag", b"tagA")]),
        (b"a2", [("floe-tag", b"TagA")]),
        (b"end", [("floe-tag", b"TagA"), ("region", b"eu")]),
    ]
    p = Producer({"bootstrap.servers": s.bootstrap})
    for value, headers in records:
        p.produce(topic, value=value, headers=headers)
    assert p.flush(30) == 0

    def run(group):
        got = []
        c = share_consumer(s.bootstrap, group, topic)
        try:
            consume_until(c, lambda: b"end" in got, lambda m: got.append(m.value()))
        finally:
            c.close()
        return got

    assert run(g_a) == [b"a1", b"a2", b"end"]
    assert run(g_b) == [b"b1", b"eu", b"end"]
    assert run(g_all) == [v for v, _ in records]
    assert metric(s, "floe_broker_share_records_filtered_total") == 10


def test_delayed_records_arrive_when_due_in_due_order_across_a_kill_9(
        standalone_factory, kit):
    s = standalone_factory(share_groups=True, share_auto_offset_reset="earliest")
    topic, group = f"delays-{uuid.uuid4().hex[:8]}", f"d-{uuid.uuid4().hex[:6]}"
    kit.create_topic(s.bootstrap, topic)

    # Ten records due every 200 ms from 2 s on, produced out of due order; one
    # delayed by floe-delay-ms from its timestamp; a malformed delay and plain
    # records behind them, which must not wait.
    t0 = int(time.time() * 1000)
    due = {}
    p = Producer({"bootstrap.servers": s.bootstrap})
    for i in [3, 0, 7, 1, 9, 4, 2, 8, 5, 6]:
        value = b"d%d" % i
        due[value] = t0 + 2000 + 200 * i
        p.produce(topic, value=value, headers=[("floe-deliver-at", str(due[value]).encode())])
    p.produce(topic, value=b"rel", headers=[("floe-delay-ms", b"2500")], timestamp=t0)
    due[b"rel"] = t0 + 2500
    p.produce(topic, value=b"bad", headers=[("floe-deliver-at", b"soon")])
    for i in range(3):
        p.produce(topic, value=b"p%d" % i)
    assert p.flush(30) == 0
    plain = {b"bad", b"p0", b"p1", b"p2"}

    arrivals = []  # (value, wall-clock ms when polled)
    accepted = set()

    def take(m):
        arrivals.append((m.value(), time.time() * 1000))

    # The plain records first, at once, then some delayed ones; then kill -9.
    c = share_consumer(s.bootstrap, group, topic)
    try:
        consume_until(c, lambda: plain <= {v for v, _ in arrivals} and
                      sum(v in due for v, _ in arrivals) >= 2, take)
    finally:
        c.close()
    accepted |= {v for v, _ in arrivals}
    first_run = len(arrivals)
    # (How many were still to wait when they entered depends on how soon the
    # first fetch came: printed, not asserted.)
    print("delayed on entry:", metric(s, "floe_broker_share_records_delayed_total"))
    assert metric(s, "floe_broker_share_delay_headers_malformed_total") == 1
    s.kill9()
    s.start()

    c = share_consumer(s.bootstrap, group, topic)
    try:
        consume_until(c, lambda: set(due) <= {v for v, _ in arrivals}, take)
        # Nothing accepted comes back: a short poll for stragglers.
        end = time.monotonic() + 1
        while time.monotonic() < end:
            for m in c.poll(0.2):
                arrivals.append((m.value(), time.time() * 1000))
    finally:
        c.close()

    values = [v for v, _ in arrivals]
    assert sorted(set(values)) == sorted(set(due) | plain), values
    # None lost, none accepted delivered again (the restart in between).
    again = [v for v in values[first_run:] if v in accepted]
    assert again == [], again
    # None early: the broker acquires a record at its due time at the soonest,
    # and the client sees it after that (same clock; 2 ms for rounding).
    early = [(v, at - due[v]) for v, at in arrivals if v in due and at < due[v] - 2]
    assert early == [], early
    # In due order, within 300 ms (records due together, or while the
    # standalone restarted, come in one fetch in offset order).
    firsts = {}
    for v, at in arrivals:
        firsts.setdefault(v, at)
    delayed = sorted((v for v in firsts if v in due), key=lambda v: due[v])
    out_of_order = [(a, b) for i, a in enumerate(delayed) for b in delayed[i + 1:]
                    if firsts[a] > firsts[b] + 300]
    assert out_of_order == [], out_of_order
    print("lateness ms:", {v.decode(): round(firsts[v] - due[v]) for v in delayed})
