"""Scenario 6 of issue 18: a store endpoint fails under load (a whole cluster
on S3, tests/s3_cluster.py: 3 metadata nodes, 3 brokers, 2 proxies, two moto
endpoints behind fault relays; default settings).

Under load from an idempotent acks=all producer, one endpoint hangs
(connections accepted, nothing answered), another is cut (connections
refused), and one is made slow (0.5 s added to every chunk each way): the
brokers' writes move to new objects on the other endpoint, produce goes on
with no error reaching the application, and after the endpoints are back
everything acknowledged reads back (the consistency check).

The figures printed (the longest time a partition took no acknowledged
write during each fault, the p99 produce latency while an endpoint is slow)
are the ones docs/operations.md quotes: FLOE_LONG=1 runs the scenario 5
times and prints the medians. Nothing here is a timed assertion: the bound
asserted (3 s) is far above the figure (about a second), to catch a write
that waits out the hard deadline (10 s), not to measure one.
"""

import time
import urllib.request

import pytest

from s3_cluster import Load, S3Cluster, create_topic, median, repeats, verify

pytest.importorskip("confluent_kafka")

PARTITIONS = 8
RATE = 400
# How long each fault holds: several flushes of every broker, and longer
# than the adaptive deadline's ceiling (1 s).
FAULT_SECONDS = 5


def store_counter(cluster, name):
    """The sum over every broker of the metric `name` (all label sets)."""
    total = 0.0
    for b in cluster.brokers:
        text = urllib.request.urlopen(f"http://{b.admin}/metrics", timeout=10).read().decode()
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
    return total


def broker_metrics(broker, name):
    """Every value of the metric `name` on `broker`."""
    text = urllib.request.urlopen(f"http://{broker.admin}/metrics", timeout=10).read().decode()
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith(name + "{") or line.startswith(name + " ")]


def wait_deadlines_learnt(cluster, timeout=120):
    """Waits until every broker that writes has learnt both endpoints' write
    latency (a new endpoint is allowed the deadline's ceiling, 1 s, until it
    has seen a few writes); returns the deadlines."""
    deadline = time.time() + timeout
    while True:
        learnt, writing = [], 0
        for b in cluster.brokers:
            if sum(broker_metrics(b, "floe_store_writes_total")) == 0:
                continue
            writing += 1
            got = broker_metrics(b, "floe_store_write_deadline_seconds")
            if len(got) == 2 and max(got) < 1.0:
                learnt += got
        if writing and len(learnt) == 2 * writing:
            return learnt
        assert time.time() < deadline, f"write deadlines not learnt after {timeout}s"
        time.sleep(0.5)


def under_fault(cluster, load, relay, mode, delay=0.0):
    """Holds `relay` in `mode` for FAULT_SECONDS under load, then passes
    again; returns the window (start, end) and the hedges and abandoned
    writes the brokers counted in it."""
    hedged = store_counter(cluster, "floe_store_hedged_writes_total")
    abandoned = store_counter(cluster, "floe_store_abandoned_writes_total")
    start = time.time()
    relay.set(mode, delay=delay)
    time.sleep(FAULT_SECONDS)
    # Still acknowledging while the fault holds.
    load.wait_acked(50, timeout=60, also=cluster.brokers)
    end = time.time()
    relay.set("pass")
    return (start, end,
            store_counter(cluster, "floe_store_hedged_writes_total") - hedged,
            store_counter(cluster, "floe_store_abandoned_writes_total") - abandoned)


@pytest.mark.timeout(240 * repeats())
def test_a_hung_cut_or_slow_endpoint_costs_a_partition_about_a_second(floe_bin, tmp_path):
    """Scenario 6: endpoint e0 hangs, then e1 is cut, then e0 is slow, each
    for a few seconds under load, with the default settings. Each fault
    costs a partition about a second of acknowledged writes (the adaptive
    write deadline: a write slower than its endpoint usually is goes to a
    new object on the other endpoint); no error reaches the producer; the
    slow endpoint does not set the produce latency; everything acknowledged
    reads back after the endpoints return."""
    figures = {"calm": [], "calm p99": [], "hang": [], "refuse": [], "slow p99": []}
    for run in range(repeats()):
        cluster = S3Cluster(floe_bin, tmp_path / f"run{run}")
        try:
            create_topic(cluster.bootstrap, "orders", PARTITIONS)
            load = Load(cluster.bootstrap, "orders", PARTITIONS, rate=RATE)
            load.wait_acked(RATE, timeout=120, also=cluster.brokers)
            learnt = wait_deadlines_learnt(cluster)
            # The pace without a fault, for comparison.
            start = time.time()
            time.sleep(FAULT_SECONDS)
            load.wait_acked(50, timeout=60, also=cluster.brokers)
            end = time.time()
            calm = max(load.max_gap(start, end).values())
            figures["calm"].append(calm)
            figures["calm p99"].append(load.latency_quantile(0.99, start, end))
            print(f"run {run}: write deadlines learnt ({min(learnt):.3f}-{max(learnt):.3f} s); without a "
                  f"fault: longest partition pause {calm:.2f} s, produce latency p50 "
                  f"{load.latency_quantile(0.5, start, end):.3f} s, p99 {figures['calm p99'][-1]:.3f} s",
                  flush=True)

            for name, relay, mode, delay in (("hang", cluster.relays[0], "hang", 0.0),
                                             ("refuse", cluster.relays[1], "refuse", 0.0),
                                             ("slow", cluster.relays[0], "delay", 0.5)):
                start, end, hedged, abandoned = under_fault(cluster, load, relay, mode, delay)
                gaps = load.max_gap(start, end)
                worst = max(gaps.values())
                if name == "slow":
                    p99 = load.latency_quantile(0.99, start, end)
                    p50 = load.latency_quantile(0.5, start, end)
                    figures["slow p99"].append(p99)
                    print(f"run {run}: e0 slow (+0.5 s a chunk each way) for {end - start:.1f} s: produce "
                          f"latency p50 {p50:.3f} s, p99 {p99:.3f} s; longest partition pause {worst:.2f} s; "
                          f"{hedged:.0f} writes hedged, {abandoned:.0f} abandoned", flush=True)
                else:
                    figures[name].append(worst)
                    print(f"run {run}: endpoint {mode} for {end - start:.1f} s: longest partition pause "
                          f"{worst:.2f} s (per partition: {', '.join(f'{g:.2f}' for g in gaps.values())}); "
                          f"{hedged:.0f} writes hedged, {abandoned:.0f} abandoned", flush=True)
                    assert abandoned >= 1, f"no write met the {mode} endpoint: the fault was not exercised"
                # Far above the ~1 s the deadline gives, far below the 10 s
                # hard deadline a write used to wait out (a slow endpoint
                # on a loaded machine once cost 2.9 s: more room there).
                bound = 5.0 if name == "slow" else 3.0
                assert worst <= bound, f"a partition took no write for {worst:.2f} s during {mode}: {gaps}"
                assert not load.errors, load.errors[:5]
                # Let the endpoint settle (and its probe run) between faults.
                load.wait_acked(RATE, timeout=60, also=cluster.brokers)

            load.stop()
            report = verify(cluster.bootstrap, [load], "orders", PARTITIONS)
            print(f"checked: {report.summary()}", flush=True)
        finally:
            cluster.stop()
    print("store endpoint failure, medians over "
          f"{len(figures['hang'])} runs: no fault {median(figures['calm']):.2f} s, "
          f"hang {median(figures['hang']):.2f} s, "
          f"refuse {median(figures['refuse']):.2f} s; p99 produce latency {median(figures['calm p99']):.3f} s "
          f"without a fault, {median(figures['slow p99']):.3f} s with a slow endpoint", flush=True)
