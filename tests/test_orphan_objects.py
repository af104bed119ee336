"""Objects the metadata never knew (what a late hedged write, a flush never
committed or a segment a crash kept from its swap leave in the store):
`floe storage orphans` lists exactly them without deleting anything, and the
broker's orphan scan deletes them once they are older than the safe age,
while every object the metadata knows stays and every record still reads."""

import os
import pathlib
import subprocess
import time
import uuid

import pytest

from test_kafka_clients import assert_delivered, confluent_produce

pytestmark = [pytest.mark.timeout(300)]

LOG_PREFIXES = ("wal", "segments")
TWO_HOURS = 2 * 3600


def log_files(store):
    """Every file under the log prefixes, as keys relative to the store."""
    out = set()
    for prefix in LOG_PREFIXES:
        for p in (store / prefix).rglob("*"):
            if p.is_file():
                out.add(p.relative_to(store).as_posix())
    return out


def wait_for(what, condition, seconds=60, every=0.2):
    """Polls `condition` until it returns something true; fails after `seconds`."""
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what}: not after {seconds}s (last: {last!r})")


def orphans_cmd(floe_bin, s, *extra):
    store = s.data_dir / "store"
    res = subprocess.run(
        [str(floe_bin), "storage", "orphans", "--store", f"local=file://{store}",
         "--addrs", f"127.0.0.1:{s.meta_port}", *extra],
        capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    listed = {}
    for line in res.stdout.splitlines():
        if line.startswith("local:"):
            key, rest = line[len("local:"):].split("  ", 1)
            listed[key] = rest
    return listed, res.stdout


def test_orphans_are_listed_by_the_tool_and_deleted_by_the_broker_once_old(standalone_factory, floe_bin, kit):
    # The scan runs every 300 ms with the default safe age (an hour); the
    # sweeper keeps unreferenced objects the metadata knows for an hour, so
    # that the set of known objects stays still while the test looks.
    s = standalone_factory(orphan_scan_interval_ms=300, orphan_grace_ms=3_600_000,
                           compaction_interval_ms=200)
    store = s.data_dir / "store"
    topic = "orphans"
    kit.create_topic(s.bootstrap, topic, config={"segment.bytes": "4000", "segment.ms": "100"})
    messages = [(b"k%03d" % i, b"value-%03d-" % i + b"x" * 100, None, None, None) for i in range(200)]
    assert_delivered(confluent_produce(s.bootstrap, topic, messages, flush_every=20))

    # Compaction has written segments (with their index objects) and the
    # log has come to rest: two looks a second apart see the same files.
    def settled():
        a = log_files(store)
        time.sleep(1)
        b = log_files(store)
        return a if a == b and any(k.endswith(".timeindex") for k in a) else None
    known = wait_for("segments written and the store at rest", settled)
    assert any(k.endswith(".wal") for k in known), known

    # What a late hedge, a flush never committed and a segment never swapped
    # in leave behind.
    seg = f"segments/{uuid.uuid4()}/0/00000000000000000000.{uuid.uuid4().hex}"
    planted = {f"wal/1/{uuid.uuid4().hex}.wal", f"wal/7/{uuid.uuid4().hex}.wal",
               f"{seg}.log", f"{seg}.index", f"{seg}.timeindex"}
    for key in planted:
        p = store / key
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(300))

    # The tool lists exactly the planted objects: young, so kept; a dry run
    # with no safe age would delete them and still deletes nothing.
    listed, out = orphans_cmd(floe_bin, s)
    assert set(listed) == planted, out
    assert all("300 bytes" in v and "younger than the safe age: kept" in v for v in listed.values()), out
    assert "dry run: nothing deleted" in out
    listed, out = orphans_cmd(floe_bin, s, "--safe-age-ms", "0")
    assert set(listed) == planted, out
    assert all("would be deleted with --delete" in v for v in listed.values()), out
    assert log_files(store) == known | planted

    # The broker scans too, and leaves young objects alone.
    scans = s.metric("floe_broker_orphan_scans_total", '{outcome="completed"}')
    wait_for("two more orphan scans",
             lambda: s.metric("floe_broker_orphan_scans_total", '{outcome="completed"}') >= scans + 2)
    assert log_files(store) == known | planted
    assert s.metric("floe_broker_orphan_objects_unknown") == len(planted)

    # Two hours old: the next scan deletes them, and nothing else.
    old = time.time() - TWO_HOURS
    for key in planted:
        os.utime(store / key, (old, old))
    wait_for("the planted objects deleted", lambda: not (log_files(store) & planted), seconds=60)
    assert log_files(store) == known
    assert s.metric("floe_broker_orphan_objects_deleted_total") == len(planted)
    assert s.metric("floe_broker_orphan_bytes_deleted_total") == 300 * len(planted)
    listed, out = orphans_cmd(floe_bin, s, "--safe-age-ms", "0")
    assert listed == {}, out

    # Every record produced still reads, from segments and WAL objects.
    got = [(r[2], r[3]) for r in kit.consume(s.bootstrap, topic)]
    assert got == [(k, v) for k, v, *_ in messages]
