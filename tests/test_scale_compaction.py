"""Metadata in proportion to data, not to time (issue 40): 1,000 partitions
written at a low rate, one record per partition per round, each round its own
flush. Without compaction every round adds one committed index entry per
partition; with WAL compaction by entry count and segment merges in tiers the
entries per partition stay under a bound however many rounds run, the WAL
objects whose ranges all moved into segments leave the store, and every
record reads back.

CI writes 200 partitions with the same rounds and thresholds (the bound is
per partition); FLOE_LONG=1 writes the 1,000.

Time is accelerated through the thresholds, not a clock: a round stands for
one flush interval of a partition written at a low rate (on S3, up to 4 a
second), and `--wal-compaction-entries 8` for the default 256. The figures for
real sizes and a simulated week are `bench/scale.py`'s (docs/running.md,
"Sizing")."""

import os
import pathlib
import subprocess
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

pytestmark = [pytest.mark.timeout(600)]

LONG = os.environ.get("FLOE_LONG") == "1"
# Each round costs a flush of every partition: 1,000 take about 3 minutes
# of a debug build, 200 under one.
PARTITIONS = 1000 if LONG else 200
# Past the first merge of FANOUT segments (ENTRIES * FANOUT = 32 rounds) and
# half again: enough to show the bound, three times the entries it allows.
ROUNDS = 48
ENTRIES = 8
FANOUT = 4


def metric(standalone, series):
    with urllib.request.urlopen(standalone.admin_url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
    return None


def wal_objects(standalone):
    return [p for p in pathlib.Path(standalone.data_dir).rglob("*.wal") if p.is_file()]


def index_entries(floe_bin, standalone, topic, partition):
    """A partition's committed index as the metadata has it (`floe meta index`)."""
    out = subprocess.run([str(floe_bin), "meta", "index", "--addrs", f"127.0.0.1:{standalone.meta_port}",
                          "--topic", topic, "--partition", str(partition)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [line for line in out.splitlines() if line.startswith("entry ")]


def wait_for(what, pred, timeout=120):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        ok, last = pred()
        if ok:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: still {last} after {timeout}s")


def test_a_thousand_low_rate_partitions_keep_a_bounded_index_and_store(floe_bin, standalone_factory, kit):
    s = standalone_factory(compaction_interval_ms=300, wal_compaction_entries=ENTRIES,
                           segment_merge_fanout=FANOUT, retention_check_interval_ms=500,
                           orphan_grace_ms=1000, default_partitions=1)
    topic = "trickle"
    kit.create_topic(s.bootstrap, topic, partitions=PARTITIONS)
    p = Producer({"bootstrap.servers": s.bootstrap, "linger.ms": 5, "acks": "all",
                  "enable.idempotence": True})
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)

    per_partition = []
    for r in range(ROUNDS):
        for part in range(PARTITIONS):
            p.produce(topic, key=b"k%d" % part, value=b"round-%03d-partition-%04d" % (r, part),
                      partition=part, on_delivery=report)
        assert p.flush(60) == 0, "a round was not acknowledged"
        entries = metric(s, "floe_broker_index_entries")
        if entries is not None:
            per_partition.append(entries / PARTITIONS)
    assert not errors, errors[:5]
    assert per_partition, "floe_broker_index_entries is served"

    # Each round is at least one flush per partition: without compaction a
    # partition would hold ROUNDS entries. With it, at most ENTRIES WAL
    # ranges (plus what came between two passes) and a few tier-0 segments.
    bound = ENTRIES + FANOUT + 4
    assert max(per_partition) <= bound, per_partition
    # The metadata agrees, partition by partition (a sample).
    for part in range(0, PARTITIONS, 97):
        got = index_entries(floe_bin, s, topic, part)
        assert 1 <= len(got) <= bound, (part, got)
    assert metric(s, 'floe_broker_compactions_total{kind="wal"}') >= PARTITIONS
    assert metric(s, 'floe_broker_compactions_total{kind="merge"}') > 0
    # Compaction of recent rounds read the partitions' tails, not the store.
    assert metric(s, 'floe_broker_compaction_range_reads_total{from="tail"}') > 0

    # WAL objects leave the store once every range in them moved into a
    # segment: what is left is what the last ENTRIES rounds or so wrote (a
    # partition compacts its ranges at ENTRIES), not the whole run.
    flushes = metric(s, "floe_broker_flushes_total")
    most_left = flushes * (ENTRIES + 3) / ROUNDS
    wal, _ = wait_for("WAL objects deleted after compaction",
                      lambda: (len(wal_objects(s)) <= most_left, (len(wal_objects(s)), flushes)))
    assert wal <= most_left < flushes / 2, (wal, flushes)

    # Every record reads back, in order, once.
    c = Consumer({"bootstrap.servers": s.bootstrap, "group.id": "check", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, part, 0) for part in range(PARTITIONS)])
    seen = {}
    deadline = time.monotonic() + 180
    while sum(len(v) for v in seen.values()) < PARTITIONS * ROUNDS and time.monotonic() < deadline:
        for m in c.consume(1000, timeout=1):
            assert m.error() is None, m.error()
            seen.setdefault(m.partition(), []).append((m.offset(), m.value()))
    c.close()
    for part in range(PARTITIONS):
        got = seen.get(part, [])
        assert [o for o, _ in got] == list(range(ROUNDS)), (part, got[:3])
        assert [v for _, v in got] == [b"round-%03d-partition-%04d" % (r, part) for r in range(ROUNDS)]
