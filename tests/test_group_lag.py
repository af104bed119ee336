"""Consumer lag on /metrics (floe_broker_group_lag and _max) of a real
`floe standalone` with a short --group-lag-interval-ms: a classic group's
offsets committed with confluent-kafka at known positions on a topic of two
partitions give the expected sum and max; committing up to the end brings
them to 0; deleting the group removes its series."""

import re
import time
import urllib.request

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from test_consumer_groups import wait_for_coordinators  # noqa: E402

pytestmark = pytest.mark.timeout(120)

SERIES = re.compile(r'^(floe_broker_group_lag(?:_max)?)\{group="([^"]*)",type="(\w+)"\} (\S+)$', re.M)


def lag_series(floe):
    """{(metric, group, type): value} of the lag series /metrics renders now."""
    text = urllib.request.urlopen(f"{floe.admin_url}/metrics", timeout=10).read().decode()
    return {(m, g, t): float(v) for m, g, t, v in SERIES.findall(text)}


def wait_for_lag(floe, group, want, timeout=30):
    """Waits until the group's series are `want` ({"sum": n, "max": n, "type": t}),
    or gone when `want` is None; returns the last series seen."""
    deadline = time.monotonic() + timeout
    while True:
        series = lag_series(floe)
        mine = {(m, t): v for (m, g, t), v in series.items() if g == group}
        if want is None:
            if not mine:
                return series
        elif mine == {("floe_broker_group_lag", want["type"]): want["sum"],
                      ("floe_broker_group_lag_max", want["type"]): want["max"]}:
            return series
        assert time.monotonic() < deadline, f"group {group}: want {want}, /metrics has {mine}"
        time.sleep(0.1)


def commit(bootstrap, group, topic, offsets):
    """Commits {partition: offset} for `group` (no membership: generation -1)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def test_group_lag_metric_follows_commits_and_goes_with_the_group(standalone_factory, kit):
    floe = standalone_factory(group_lag_interval_ms=500)
    wait_for_coordinators(floe)
    topic, group = "lag-topic", "lag-group"
    kit.create_topic(floe.bootstrap, topic, partitions=2)
    p = Producer({"bootstrap.servers": floe.bootstrap, "acks": "all", "linger.ms": 5})
    for partition, count in ((0, 10), (1, 6)):
        for i in range(count):
            p.produce(topic, value=b"%d" % i, partition=partition)
    assert p.flush(30) == 0

    # Ends 10 and 6: lag 10-3 = 7 and 6-2 = 4.
    commit(floe.bootstrap, group, topic, {0: 3, 1: 2})
    wait_for_lag(floe, group, {"type": "classic", "sum": 11, "max": 7})

    commit(floe.bootstrap, group, topic, {0: 10, 1: 6})
    wait_for_lag(floe, group, {"type": "classic", "sum": 0, "max": 0})

    # More records: the lag follows the end offsets.
    for i in range(5):
        p.produce(topic, value=b"more%d" % i, partition=1)
    assert p.flush(30) == 0
    wait_for_lag(floe, group, {"type": "classic", "sum": 5, "max": 5})

    admin = AdminClient({"bootstrap.servers": floe.bootstrap, "log_level": 2})
    admin.delete_consumer_groups([group], request_timeout=30)[group].result(30)
    series = wait_for_lag(floe, group, None)
    assert not any(m.startswith("floe_broker_group_lag") and g == group for m, g, _ in series)
