"""Log compaction with real clients: keys updated many times on a topic with
cleanup.policy=compact are read back from the beginning by confluent-kafka and
kcat as the latest value of each key at its original offset; a consumer that
starts inside a compacted-away range gets the next record; a tombstone stays at
its offset, then goes once delete.retention.ms has passed."""

import time

import pytest

from test_kafka_clients import assert_delivered, confluent_produce, kcat

pytestmark = [pytest.mark.timeout(240)]

KEYS = 20
ROUNDS = 10


def latest_by_key(messages, reports):
    """The last (offset, key, value) per key, in offset order."""
    latest = {}
    for (key, value, *_), r in zip(messages, reports):
        latest[key] = (r[2], key, value)
    return sorted(latest.values())


def wait_for_view(kit, bootstrap, topic, want, what, seconds=90):
    """Reads the topic from the beginning until it is `want` (a list of
    (offset, key, value)); fails with the last view after `seconds`."""
    deadline = time.monotonic() + seconds
    got = None
    while time.monotonic() < deadline:
        got = [(r[1], r[2], r[3]) for r in kit.consume(bootstrap, topic)]
        if got == want:
            return got
        time.sleep(0.5)
    raise AssertionError(f"{what}: after {seconds}s the topic reads {len(got)} records, "
                         f"want {len(want)}; first of them {got[:5]} vs {want[:5]}")


def test_compacted_topic_keeps_the_latest_value_of_each_key(standalone_factory, kit):
    s = standalone_factory(compaction_interval_ms=200, flush_interval_ms=5)
    topic = "compacted"
    kit.create_topic(s.bootstrap, topic, config={
        "cleanup.policy": "compact",
        "segment.bytes": "2048",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "3000",
    })
    messages = [(b"key-%02d" % k, b"value-%02d-%02d-" % (k, r) + b"x" * 40, None, None, None)
                for r in range(ROUNDS) for k in range(KEYS)]
    # Key 7 is deleted; a last record keeps the log's end a live key.
    messages.append((b"key-07", None, None, None, None))
    messages.append((b"key-end", b"end", None, None, None))
    reports = confluent_produce(s.bootstrap, topic, messages, flush_every=KEYS,
                                 **{"compression.type": "lz4"})
    assert_delivered(reports)
    assert [r[2] for r in reports] == list(range(len(messages)))

    # Compacted: the latest value of each key, at its offset; the tombstone of
    # key-07 is its latest record (kept for delete.retention.ms, then removed).
    latest = latest_by_key(messages, reports)
    without_tombstone = [x for x in latest if x[1] != b"key-07"]
    deadline = time.monotonic() + 90
    while True:
        got = [(r[1], r[2], r[3]) for r in kit.consume(s.bootstrap, topic)]
        if got in (latest, without_tombstone):
            break
        assert time.monotonic() < deadline, \
            f"not compacted after 90 s: {len(got)} records, want {len(latest)}; first {got[:3]}"
        time.sleep(0.5)
    offsets = [g[0] for g in got]
    assert offsets == sorted(set(offsets)), "offsets strictly increase"
    assert kit.watermarks(s.bootstrap, topic) == (0, len(messages)), "watermarks stay"

    # A consumer that starts inside a range compacted away gets the next record.
    middle = kit.consume(s.bootstrap, topic, start=5)
    assert [(r[1], r[2], r[3]) for r in middle] == [g for g in got if g[0] >= 5]

    # The tombstone goes once delete.retention.ms has passed.
    wait_for_view(kit, s.bootstrap, topic, without_tombstone, "tombstone removal")

    # kcat (librdkafka 2.0) reads the compacted topic too.
    res = kcat("-b", s.bootstrap, "-C", "-t", topic, "-e", "-o", "beginning", "-f", "%o %k %s\n")
    assert res.returncode == 0, f"kcat -C failed ({res.returncode}): {res.stderr.decode()[-2000:]}"
    lines = res.stdout.decode().splitlines()
    assert lines == [f"{o} {k.decode()} {v.decode()}" for o, k, v in without_tombstone]
