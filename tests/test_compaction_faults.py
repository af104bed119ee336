"""Log compaction under faults (issue 16): `kill -9` of `floe standalone` while
its cleaner is in the middle of a job, and consumers reading from the middle of
the log while the cleaner swaps segments in.

The cleaner is made slow to finish with a tiny key map (`--cleaner-map-bytes`):
each pass maps a few keys, swaps the segments it cleaned, logs "log cleaned"
with how far it got (`cleaned_to`), and the next pass goes on. Seeing that line
is seeing the cleaner run. The topic is written first with a large
`min.compaction.lag.ms` (nothing cleanable), then the lag is set to 0, so the
whole job starts at once on a segmented log.

FLOE_COMPACTION_FAULTS_KEYS sets the number of keys (default 150, about 30 s for
both tests; a pass maps KEYS_PER_PASS keys, so the job's passes grow with it)."""

import os
import re
import time

import pytest

from test_kafka_clients import assert_delivered, confluent_produce

pytestmark = [pytest.mark.timeout(300)]

KEYS = int(os.environ.get("FLOE_COMPACTION_FAULTS_KEYS", "150"))
ROUNDS = 8
KEYS_PER_PASS = 10
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def compacted_server(standalone_factory, kit, topic):
    s = standalone_factory(compaction_interval_ms=100, flush_interval_ms=5,
                           cleaner_map_bytes=40 * KEYS_PER_PASS)
    kit.create_topic(s.bootstrap, topic, config={
        "cleanup.policy": "compact",
        "segment.bytes": "4096",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "3600000",
    })
    messages = [(b"key-%04d" % k, b"value-%04d-%02d-" % (k, r) + b"x" * 40, None, None, None)
                for r in range(ROUNDS) for k in range(KEYS)]
    # The last batch holds only a latest value (the newest batch is never cleaned).
    messages.append((b"key-end", b"end", None, None, None))
    # Batches of a few keys each: a pass maps whole batches, KEYS_PER_PASS keys.
    reports = confluent_produce(s.bootstrap, topic, messages, flush_every=KEYS_PER_PASS // 2)
    assert_delivered(reports)
    produced = {r[2]: (m[0], m[1]) for m, r in zip(messages, reports)}
    latest = {}
    for off in sorted(produced):
        latest[produced[off][0]] = off
    return s, produced, latest


def start_cleaning(s, topic):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": s.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=30)


def cleaned_lines(s):
    """The cleaned_to of every "log cleaned" line in the log so far."""
    text = ANSI.sub("", s.log_path.read_text(errors="replace"))
    return [int(m.group(1)) for line in text.splitlines() if "log cleaned" in line
            for m in [re.search(r"cleaned_to=(\d+)", line)] if m]


def wait_for_cleaning(s, seen, seconds=120):
    """Returns the cleaned_to values once more than `seen` lines are there."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        lines = cleaned_lines(s)
        if len(lines) > seen:
            return lines
        time.sleep(0.01)
    raise AssertionError(f"the cleaner did not run within {seconds}s")


def check_read(records, produced, latest, start):
    """A read from `start`: offsets strictly increasing, each record the one
    produced at its offset, and the latest value of every key at or after
    `start` there."""
    offsets = [r[1] for r in records]
    assert offsets == sorted(set(offsets)), "offsets strictly increase, no duplicates"
    for r in records:
        assert produced[r[1]] == (r[2], r[3]), f"offset {r[1]} reads {r[2:4]}, produced {produced[r[1]]}"
    have = set(offsets)
    lost = [(k, o) for k, o in latest.items() if o >= start and o not in have]
    assert not lost, f"latest values lost: {lost[:5]} ({len(lost)})"


def fully_compacted(kit, s, topic, produced, latest, seconds=120):
    want = sorted(latest.values())
    deadline = time.monotonic() + seconds
    got = None
    while time.monotonic() < deadline:
        got = [r[1] for r in kit.consume(s.bootstrap, topic)]
        if got == want:
            return
        time.sleep(0.5)
    raise AssertionError(f"not compacted after {seconds}s: {len(got)} records, want {len(want)}")


def test_kill9_during_compaction_loses_no_latest_value_and_the_job_finishes_after(
        standalone_factory, kit):
    topic = "compact-kill9"
    s, produced, latest = compacted_server(standalone_factory, kit, topic)
    end = max(produced) + 1
    before = len(cleaned_lines(s))
    start_cleaning(s, topic)
    lines = wait_for_cleaning(s, before)
    s.kill9()
    at_kill = cleaned_lines(s)
    print(f"killed after {len(at_kill) - before} passes, cleaned to {at_kill[-1]} of {end}")
    assert at_kill[-1] < end - 1, f"the job was over before the kill: {lines}"

    s.start()
    # Right after the restart: a consistent log, nothing lost.
    check_read(kit.consume(s.bootstrap, topic), produced, latest, 0)
    assert kit.watermarks(s.bootstrap, topic) == (0, end), "watermarks stay"
    # The job starts over (the dirty offset is in memory only) and finishes.
    fully_compacted(kit, s, topic, produced, latest)
    check_read(kit.consume(s.bootstrap, topic), produced, latest, 0)


def test_consumers_reading_from_the_middle_during_swaps_see_a_consistent_log(
        standalone_factory, kit):
    topic = "compact-swaps"
    s, produced, latest = compacted_server(standalone_factory, kit, topic)
    end = max(produced) + 1
    before = len(cleaned_lines(s))
    start_cleaning(s, topic)
    wait_for_cleaning(s, before)
    middle = end // 2
    reads = 0
    swaps_during = 0
    while True:
        n = len(cleaned_lines(s))
        check_read(kit.consume(s.bootstrap, topic, start=middle), produced, latest, middle)
        reads += 1
        after = cleaned_lines(s)
        swaps_during += len(after) - n
        if after and after[-1] >= end - 1 or reads >= 20:
            break
    print(f"{reads} reads from offset {middle}, {swaps_during} cleaner passes during them")
    assert swaps_during > 0, "no cleaning pass ran while reading"
    fully_compacted(kit, s, topic, produced, latest)
