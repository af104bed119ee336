"""A rolling upgrade from the previous build of Floe to this one, under
load, one process at a time: a cluster of processes (3 metadata nodes, 3
brokers, 2 proxies and the indexer, S3 on moto) starts on the build named
in `tests/upgrade-baseline` (built by `tests/upgrade_baseline.py`), and
each process in turn is stopped with SIGTERM and started again on this
build, on the same data folder and ports, while an idempotent acks=all
confluent-kafka producer writes and a confluent-kafka consumer in a group
reads and commits. Two orders:

- `metadata-first`, the order docs/upgrading.md asks for: the metadata
  followers, the metadata leader last, then the brokers, the proxies and
  the indexer;
- `metadata-last`, the reverse: the indexer, the proxies, the brokers, and
  the metadata nodes last, the leader first (it leads again once it is
  back: a leader of the new build over followers of the old one).

Checked: every process exits cleanly on SIGTERM and runs this build at the
end; no error reaches the producer (no failed delivery, no fatal error) and
none the consumer does not retry by itself; nothing acknowledged is lost,
doubled or misplaced (the two-reader consistency check); the group reads
every acknowledged record; and the exports stay exactly once (rows equal
distinct offsets, and every record is exported). Printed per step: how long
it took and the longest time a partition took no acknowledged write.
FLOE_LONG=1: 12 partitions at 400 records/s, and the cluster is upgraded,
downgraded to the baseline in the same order and upgraded again (a patch
release promises both ways, docs/upgrading.md). CI runs the documented
order only (`metadata-last` is long mode's: 30 s of CI's 60 minutes).
"""

import os
import signal
import time

import pytest

import upgrade_baseline
from s3_cluster import Load, S3Cluster, create_topic, median, verify
from test_rolling_restart import GroupReader, wait_share
from test_s3_cluster import wait_exported
from test_s3_cluster_brokers import window_gaps

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("duckdb")

LONG = os.environ.get("FLOE_LONG") == "1"
PARTITIONS = 12 if LONG else 6
RATE = 400 if LONG else 200


@pytest.fixture(scope="session")
def baseline_bin(floe_bin):
    """The baseline's `floe` (built once, then cached in the target folder).
    The session's own binaries are built first (`floe_bin`), so that a
    baseline built here can put them back in `target/debug/`."""
    restore = () if os.environ.get("FLOE_BIN") else (("floe", "floe"), ("floe-devtools", "floe-dev"))
    return upgrade_baseline.build(restore=restore)


def steps(order):
    """The roles in the order `order` replaces them; "meta" stands for the
    metadata nodes, chosen when their turn comes (`next_meta`)."""
    meta = ["meta"] * 3
    rest = ["broker1", "broker2", "broker3", "proxy", "proxy2", "indexer"]
    return meta + rest if order == "metadata-first" else rest[::-1] + meta


def next_meta(cluster, order, done):
    """The metadata node to replace next: a follower while one is left and
    the leader last (metadata-first), or the leader while it is on the old
    build, then the others (metadata-last)."""
    leader = cluster.meta_leader()
    left = [i for i in cluster.metas if f"meta{i}" not in done]
    if order == "metadata-first":
        followers = [i for i in left if i != leader]
        return followers[0] if followers else leader
    return leader if leader in left else left[0]


def wait_meta_back(cluster, i, timeout=60):
    """Waits until metadata node `i` answers again, knows a leader, and is a
    voter in that leader's view."""
    deadline = time.time() + timeout
    while True:
        st = cluster.meta_status()
        mine = st.get(i)
        leader = mine[1] if mine else 0
        if leader and leader in st and st[leader][0] == "Leader" and i in st[leader][2]:
            return
        assert cluster.metas[i].alive(), f"meta{i} exited:\n{cluster.metas[i].tail()}"
        assert time.time() < deadline, f"meta{i} not back after {timeout}s: {st}"
        time.sleep(0.2)


def replace(cluster, role, new_bin):
    """Stops `role` with SIGTERM, checks it exits cleanly, and starts it on `new_bin`."""
    role.p.send_signal(signal.SIGTERM)
    role.p.wait(60)
    assert role.p.returncode == 0, f"{role.name} exited with {role.p.returncode}:\n{role.tail()}"
    cluster.bins[role.name] = new_bin
    role.start()


def roll(cluster, order, new_bin, load, label):
    """Replaces every process, one at a time in `order`, by one running
    `new_bin`; returns the longest partition gap of each step."""
    done, gaps = set(), []
    for step in steps(order):
        started = time.time()
        if step == "meta":
            i = next_meta(cluster, order, done)
            role = cluster.metas[i]
            was_leader = cluster.meta_leader() == i
            replace(cluster, role, new_bin)
            wait_meta_back(cluster, i)
            what = f"meta{i}{' (leader)' if was_leader else ''}"
        else:
            role = next(r for r in cluster.roles() if r.name == step)
            replace(cluster, role, new_bin)
            cluster.wait_ready(role)
            if role in cluster.brokers:
                wait_share(cluster, role, partitions=PARTITIONS)
            what = role.name
        done.add(role.name)
        load.wait_acked(RATE // 2, timeout=120, also=[r for r in cluster.roles() if r is not role])
        worst, _ = window_gaps(load, started, time.time())
        gaps.append(worst)
        print(f"{label}: {what} replaced in {time.time() - started:.1f} s, longest partition gap "
              f"{worst:.2f} s", flush=True)
    for r in cluster.roles():
        assert os.path.realpath(f"/proc/{r.pid}/exe") == os.path.realpath(new_bin), \
            f"{r.name} does not run {new_bin}"
    return gaps


@pytest.mark.timeout(1200 if LONG else 420)
@pytest.mark.parametrize("order", [
    "metadata-first",
    pytest.param("metadata-last", marks=pytest.mark.skipif(
        not LONG, reason="long mode only (FLOE_LONG=1): CI runs the order docs/upgrading.md asks for")),
])
def test_a_rolling_upgrade_from_the_previous_build_loses_nothing(order, baseline_bin, floe_bin, tmp_path):
    commit, version = upgrade_baseline.baseline()
    cluster = S3Cluster(baseline_bin, tmp_path, endpoints=1, indexer=True,
                        indexer_flags=("--indexer-poll-ms", "200"))
    reader = None
    try:
        create_topic(cluster.bootstrap, "orders", PARTITIONS, **{"export.enabled": "true",
                                                                 "export.roll.ms": "500"})
        load = Load(cluster.bootstrap, "orders", PARTITIONS, rate=RATE)
        reader = GroupReader(cluster.bootstrap, "orders", "upgrade", retriable_ok=True)
        reader.start()
        load.wait_acked(RATE, also=cluster.brokers)
        for b in cluster.brokers:
            wait_share(cluster, b, partitions=PARTITIONS)
        deadline = time.time() + 60
        while not reader.assigned:
            assert time.time() < deadline and reader.is_alive(), "the group reader was never assigned"
            time.sleep(0.1)

        gaps = roll(cluster, order, floe_bin, load, "upgrade")
        if LONG:
            gaps += roll(cluster, order, baseline_bin, load, "downgrade")
            gaps += roll(cluster, order, floe_bin, load, "upgrade again")
        until = load.stop()

        report = verify(cluster.bootstrap, [load], "orders", PARTITIONS)
        acked = {(w.partition, w.offset) for w in load.acked}
        reader.wait_read(acked)
        reader.stop()
        assert not reader.errors, reader.errors[:5]
        rows = wait_exported(cluster, "orders", report.acked + report.unacked_stored, tmp_path)
        print(f"rolling upgrade from {commit[:12]} ({version}), {order}: {report.summary()}; exports "
              f"{rows[0]} rows once each; the group read {len(reader.read)} records, retried "
              f"{len(reader.retried)} errors {reader.retried[:3]}; longest partition gap per step median "
              f"{median(gaps):.2f} s, worst {max(gaps):.2f} s; window {until - load.started:.0f} s", flush=True)
    finally:
        if reader is not None and reader.is_alive():
            reader.stop()
        cluster.stop()
