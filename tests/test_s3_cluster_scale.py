"""Scenario 2, scale out: a fourth broker started under load takes its share
of the partitions and coordinator shards by hand-overs, with no log byte
copied in the store (the only new objects are WAL objects of new writes)
and no error reaching the application.

The time until the new broker owns its share and the store's objects before
and after are printed, never asserted (the bound asserted is far above
them, to catch a stall). FLOE_LONG=1 runs it five times and prints medians.
"""

import time
import urllib.request

import pytest

from s3_cluster import Load, S3Cluster, create_topic, median, repeats, verify

PARTITIONS = 12
SHARDS = 16


def owned(role):
    """(partitions, coordinator shards) the broker `role` serves, from its metrics."""
    parts, shards = 0, 0
    try:
        with urllib.request.urlopen(f"http://{role.admin}/metrics", timeout=2) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("floe_broker_owned_partitions "):
                    parts = int(float(line.split()[1]))
                elif line.startswith('floe_broker_owned_shard{shard="') and line.split()[-1] == "1":
                    shards += 1
    except OSError:
        pass
    return parts, shards


@pytest.mark.timeout(300 * repeats())
def test_a_fourth_broker_takes_its_share_under_load_copying_nothing(floe_bin, tmp_path):
    takes, totals = [], []
    for run in range(repeats()):
        cluster = S3Cluster(floe_bin, tmp_path / f"run{run}", metas=1, endpoints=1)
        try:
            create_topic(cluster.bootstrap, "orders", PARTITIONS)
            load = Load(cluster.bootstrap, "orders", PARTITIONS, rate=400)
            load.wait_acked(400, also=cluster.brokers)
            before = cluster.objects()
            share = (PARTITIONS + SHARDS) // 4
            started = time.time()
            new = cluster.add_broker(wait=False)
            ready = None
            while True:
                p, s = owned(new)
                if ready is None and p + s > 0:
                    ready = time.time()
                if p + s >= share:
                    break
                assert new.alive(), new.tail()
                assert time.time() - started < 60, f"broker 4 owns {p} partitions, {s} shards\n{cluster.logs()}"
                time.sleep(0.02)
            took = time.time() - started
            load.wait_acked(800, timeout=120, also=cluster.brokers)
            until = load.stop()
            after = cluster.objects()
            gaps = load.max_gap(started, until)
            takes.append(took)
            totals.append(max(gaps.values()))
            new_objects = {k: v for k, v in after.items() if k not in before}
            gone = [k for k in before if k not in after]
            print(f"broker 4 owns its share ({p} partitions, {s} shards) {took:.2f} s after it was started; "
                  f"longest partition pause {max(gaps.values()):.2f} s", flush=True)
            print(f"store objects: before {len(before)} ({sum(before.values())} bytes), after {len(after)} "
                  f"({sum(after.values())} bytes): {len(new_objects)} new ({sum(new_objects.values())} bytes), "
                  f"{len(gone)} deleted", flush=True)
            # No log byte copied: what is new is WAL objects of new writes only.
            copies = [k for k in new_objects if not k[1].startswith("wal/")]
            assert not copies, copies[:5]
            report = verify(cluster.bootstrap, [load], "orders", PARTITIONS)
            print(f"checked: {report.summary()}", flush=True)
        finally:
            cluster.stop()
    print(f"scale out: median time to own its share {median(takes):.2f} s, median longest partition pause "
          f"{median(totals):.2f} s over {len(takes)} runs")
