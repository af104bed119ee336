"""Brokers failing and stopping in a whole cluster on S3 (tests/s3_cluster.py:
3 metadata nodes, 3 brokers, 2 proxies, two moto endpoints behind relays),
with the default lease, under load from idempotent acks=all producers on 12
partitions. Every run ends with the consistency check (nothing acknowledged
lost, nothing duplicated, offsets strictly increasing, two clients agree).

- scenario 1: a broker killed with SIGKILL: its partitions are served again
  within seconds (its port refuses connections: a proxy reports it, the
  metadata leader checks it and moves them at once);
- scenario 3: a broker stopped with SIGTERM: it hands its partitions over
  first, and no produce fails;
- scenario 5: a broker paused (SIGSTOP) past its lease, its partitions
  moved, then resumed: what it still had in flight is fenced;
- a broker paused for a second (a GC-like stall) keeps its partitions.

CI runs scenario 1 and the one-second pause; scenarios 3 and 5 run in the
long mode only (FLOE_LONG=1), since CI already covers what they check:
tests/test_rolling_restart.py stops every broker with SIGTERM under load
and checks more (no error of any kind, every hand-over drained, exit code
0), and tests/test_liveness.py pauses a broker past its lease under
acks=all writes and checks that, resumed, it serves nothing stale and every
acknowledged write is read back once.

The figures printed (the longest time a partition took no acknowledged
write) are the ones docs/operations.md quotes: FLOE_LONG=1 runs each
scenario 5 times and prints the median. Nothing here is a timed assertion
but the loose bounds the issue sets (6 s for a crash, where the goal is 3 s);
they are far above the figures, to catch a regression to lease-length
detection, not to measure.
"""

import os
import pathlib
import signal
import time
import urllib.request

import pytest

from s3_cluster import Load, S3Cluster, create_topic, median, repeats, verify

pytest.importorskip("confluent_kafka")

PARTITIONS = 12
RATE = 400
LONG = os.environ.get("FLOE_LONG") == "1"


def metric(admin, name):
    """The value of an unlabelled metric on a process's /metrics (-1 if absent)."""
    with urllib.request.urlopen(f"http://{admin}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return -1.0


def labelled(admin, name, label):
    """{value of `label`: the sum of metric `name` with it} on a process's /metrics."""
    out = {}
    with urllib.request.urlopen(f"http://{admin}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + "{") and f'{label}="' in line:
                value = line.split(f'{label}="', 1)[1].split('"', 1)[0]
                out[value] = out.get(value, 0) + float(line.split()[-1])
    return out


def log_count(role, text):
    """Lines of `role`'s log containing `text`."""
    return sum(text in line for line in pathlib.Path(role.log_path).read_text(errors="replace").splitlines())


def meta_count(cluster, text):
    return sum(log_count(m, text) for m in cluster.metas.values())


def owned(cluster, broker):
    return metric(broker.admin, "floe_broker_owned_partitions")


def wait_balanced(cluster, load, timeout=60):
    """Load flowing and every broker owning its share (the hand-overs after
    the brokers registered one by one are over)."""
    load.wait_acked(RATE, also=cluster.brokers)
    deadline = time.time() + timeout
    while True:
        counts = [owned(cluster, b) for b in cluster.brokers]
        if min(counts) >= PARTITIONS // len(cluster.brokers) - 1 and sum(counts) == PARTITIONS:
            return counts
        assert time.time() < deadline, f"partitions not balanced: {counts}"
        time.sleep(0.2)


def window_gaps(load, since, until):
    gaps = load.max_gap(since, until)
    return max(gaps.values()), ", ".join(f"{g:.2f}" for g in gaps.values())


@pytest.mark.timeout(240 * repeats())
def test_a_broker_killed_under_load_has_its_partitions_served_again_within_seconds(floe_bin, tmp_path):
    """Scenario 1: `kill -9` one of three brokers under load, default
    settings. Its partitions go on elsewhere within seconds (goal 3 s; a
    lease-length stall, 10 s before, fails the 6 s bound), no error reaches
    the application, nothing acknowledged is lost or doubled."""
    windows = []
    for run in range(repeats()):
        cluster = S3Cluster(floe_bin, tmp_path / f"run{run}")
        try:
            create_topic(cluster.bootstrap, "orders", PARTITIONS)
            load = Load(cluster.bootstrap, "orders", PARTITIONS, rate=RATE)
            counts = wait_balanced(cluster, load)
            victim = cluster.brokers[1]
            killed_at = time.time()
            victim.kill9()
            survivors = [b for b in cluster.brokers if b is not victim]
            load.wait_acked(3 * RATE, timeout=120, also=survivors)
            until = load.stop()
            worst, each = window_gaps(load, killed_at, until)
            windows.append(worst)
            print(f"broker killed (owned {counts[1]:.0f} of {PARTITIONS}): longest partition gap {worst:.2f} s "
                  f"(per partition: {each}); reported down: {meta_count(cluster, 'refuses connections')}",
                  flush=True)
            report = verify(cluster.bootstrap, [load], "orders", PARTITIONS)
            print(f"checked: {report.summary()}", flush=True)
            assert worst <= 6, f"partitions of the killed broker stalled {worst:.2f} s\n{cluster.logs()}"
        finally:
            cluster.stop()
    print(f"broker crash: median unavailability window {median(windows):.2f} s over {len(windows)} runs "
          f"({', '.join(f'{w:.2f}' for w in windows)})")


@pytest.mark.skipif(not LONG, reason="long mode only (FLOE_LONG=1)")
@pytest.mark.timeout(240 * repeats())
def test_a_broker_stopped_with_sigterm_hands_over_and_no_produce_fails(floe_bin, tmp_path):
    """Scenario 3 (scale in): SIGTERM one of three brokers under load. It
    hands its partitions and coordinator shards over before it exits; no
    produce failure reaches the application and the pause is short."""
    pauses, stops = [], []
    for run in range(repeats()):
        cluster = S3Cluster(floe_bin, tmp_path / f"run{run}")
        try:
            create_topic(cluster.bootstrap, "orders", PARTITIONS)
            load = Load(cluster.bootstrap, "orders", PARTITIONS, rate=RATE)
            wait_balanced(cluster, load)
            victim = cluster.brokers[2]
            stopped_at = time.time()
            victim.p.send_signal(signal.SIGTERM)
            victim.p.wait(30)
            stops.append(time.time() - stopped_at)
            assert log_count(victim, "drained: everything handed over") == 1, victim.tail()
            survivors = cluster.brokers[:2]
            load.wait_acked(3 * RATE, timeout=120, also=survivors)
            until = load.stop()
            worst, each = window_gaps(load, stopped_at, until)
            pauses.append(worst)
            print(f"broker stopped (SIGTERM, exited after {stops[-1]:.2f} s): longest partition gap "
                  f"{worst:.2f} s (per partition: {each})", flush=True)
            assert not load.errors, load.errors[:5]
            assert victim.p.returncode == 0, victim.tail()
            report = verify(cluster.bootstrap, [load], "orders", PARTITIONS)
            print(f"checked: {report.summary()}", flush=True)
            assert sum(owned(cluster, b) for b in survivors) == PARTITIONS
        finally:
            cluster.stop()
    print(f"scale in (SIGTERM): median longest pause {median(pauses):.2f} s, median time to exit "
          f"{median(stops):.2f} s over {len(pauses)} runs")


@pytest.mark.skipif(not LONG, reason="long mode only (FLOE_LONG=1)")
@pytest.mark.timeout(240 * repeats())
def test_a_zombie_broker_resumed_after_its_partitions_moved_is_fenced(floe_bin, tmp_path):
    """Scenario 5: SIGSTOP a broker past its lease (its port still accepts
    connections, so only the lease can tell), let its partitions move,
    SIGCONT it: whatever it had in flight is refused (its epoch is stale),
    it serves nothing stale, and no reader sees divergent data."""
    windows = []
    for run in range(repeats()):
        cluster = S3Cluster(floe_bin, tmp_path / f"run{run}")
        try:
            create_topic(cluster.bootstrap, "orders", PARTITIONS)
            load = Load(cluster.bootstrap, "orders", PARTITIONS, rate=RATE)
            counts = wait_balanced(cluster, load)
            zombie = cluster.brokers[0]
            others = cluster.brokers[1:]
            expired_before = meta_count(cluster, "ExpireLeases")
            paused_at = time.time()
            os.kill(zombie.pid, signal.SIGSTOP)
            try:
                # Its partitions move once its lease ran out on the leader.
                deadline = time.time() + 60
                while sum(owned(cluster, b) for b in others) < PARTITIONS:
                    assert time.time() < deadline, f"partitions not moved: {cluster.logs()}"
                    time.sleep(0.1)
                load.wait_acked(2 * RATE, timeout=120, also=others)
            finally:
                os.kill(zombie.pid, signal.SIGCONT)
            resumed_at = time.time()
            # It finds its lease over, checks what is still its own (nothing),
            # and serves again; the controller gives it a share back.
            deadline = time.time() + 60
            while metric(zombie.admin, "floe_broker_lease_lapses_total") < 1:
                assert time.time() < deadline, zombie.tail()
                time.sleep(0.1)
            load.wait_acked(2 * RATE, timeout=120, also=cluster.brokers)
            until = load.stop()
            worst, each = window_gaps(load, paused_at, resumed_at)
            windows.append(worst)
            print(f"broker paused past its lease (owned {counts[0]:.0f}): longest partition gap {worst:.2f} s "
                  f"(per partition: {each}); commits refused at a stale epoch: "
                  f"{metric(zombie.admin, 'floe_broker_commit_refusals_total'):.0f}", flush=True)
            assert meta_count(cluster, "ExpireLeases") > expired_before, "moved by its lease"
            report = verify(cluster.bootstrap, [load], "orders", PARTITIONS)
            print(f"checked: {report.summary()}", flush=True)
            assert until > resumed_at
        finally:
            cluster.stop()
    print(f"zombie broker: median longest gap while paused {median(windows):.2f} s over {len(windows)} runs")


@pytest.mark.timeout(240)
def test_a_broker_paused_for_a_second_keeps_its_partitions(floe_bin, tmp_path):
    """No flapping: a broker stalled for about a second (a GC-like pause,
    SIGSTOP then SIGCONT) renews its lease in time with the default
    settings; nothing moves, no lease lapses, and the load goes on."""
    cluster = S3Cluster(floe_bin, tmp_path)
    try:
        create_topic(cluster.bootstrap, "orders", PARTITIONS)
        load = Load(cluster.bootstrap, "orders", PARTITIONS, rate=RATE)
        counts = wait_balanced(cluster, load)
        paused = cluster.brokers[0]
        expired_before = meta_count(cluster, "ExpireLeases")
        down_before = meta_count(cluster, "refuses connections")
        took_before = [log_count(b, "took partition over") for b in cluster.brokers]
        for _ in range(3):
            os.kill(paused.pid, signal.SIGSTOP)
            time.sleep(1.0)
            os.kill(paused.pid, signal.SIGCONT)
            load.wait_acked(RATE, timeout=60, also=cluster.brokers)
        load.stop()
        assert not load.errors, load.errors[:5]
        assert meta_count(cluster, "ExpireLeases") == expired_before, "a lease ran out"
        assert meta_count(cluster, "refuses connections") == down_before
        assert metric(paused.admin, "floe_broker_lease_lapses_total") <= 0
        assert [log_count(b, "took partition over") for b in cluster.brokers] == took_before, "a partition moved"
        assert [owned(cluster, b) for b in cluster.brokers] == counts
        verify(cluster.bootstrap, [load], "orders", PARTITIONS)
    finally:
        cluster.stop()
