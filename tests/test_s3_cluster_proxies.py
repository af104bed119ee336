"""Several proxies: every proxy registers with the metadata service, and
every Metadata answer names the live proxies as the brokers, with partition
leadership spread over them; a proxy that stops leaves the answers within
seconds; a client that knows one address (a Kubernetes Service) finds the
others; and under load, losing a proxy costs a pause, not data (scenario 8).

Figures are printed, never asserted: the bounds asserted are far above them,
to catch a stall, not to measure one. FLOE_LONG=1 runs scenario 8 five times
and prints the median.
"""

import re
import subprocess
import time

import pytest

from floe_cluster import Cluster
from s3_cluster import Load, Relay, S3Cluster, create_topic, median, repeats, verify

confluent_kafka = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402

PARTITIONS = 12


def brokers_and_leaders(bootstrap, topic):
    """({broker id: "host:port"}, {partition: leader id}) as a client bootstrapped on `bootstrap` sees them."""
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic=topic, timeout=30)
    brokers = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
    leaders = {p.id: p.leader for p in md.topics[topic].partitions.values()}
    return brokers, leaders


def kcat_brokers(bootstrap, topic):
    """The brokers and leaders `kcat -L` prints."""
    out = subprocess.run(["kcat", "-L", "-b", bootstrap, "-t", topic, "-m", "10"], capture_output=True,
                         text=True, timeout=60).stdout
    brokers = {int(i): a for i, a in re.findall(r"broker (\d+) at (\S+)", out)}
    leaders = {int(p): int(lead) for p, lead in re.findall(r"partition (\d+), leader (\d+)", out)}
    return brokers, leaders


def wait_brokers(bootstrap, topic, want, timeout=60):
    """Waits until a client bootstrapped on `bootstrap` is shown exactly the
    broker addresses `want`; returns (seconds waited, brokers)."""
    t0 = time.time()
    while True:
        try:
            brokers, _ = brokers_and_leaders(bootstrap, topic)
            if set(brokers.values()) == set(want):
                return time.time() - t0, brokers
        except confluent_kafka.KafkaException:
            pass
        assert time.time() - t0 < timeout, f"brokers still {brokers} after {timeout}s, want {want}"
        time.sleep(0.1)


@pytest.mark.timeout(300)
def test_every_proxy_is_listed_leaders_are_spread_and_a_stopped_proxy_leaves(floe_bin, tmp_path):
    cluster = Cluster(floe_bin, tmp_path, metas=1, brokers=2, proxies=2)
    try:
        p1, p2 = (p.addr("kafka") for p in cluster.proxies)
        create_topic(p1, "spread", PARTITIONS)
        # Both proxies name both proxies, with the same ids and the same leaders.
        b1, l1 = brokers_and_leaders(p1, "spread")
        b2, l2 = brokers_and_leaders(p2, "spread")
        assert set(b1.values()) == {p1, p2}, b1
        assert (b1, l1) == (b2, l2)
        per = {b: sum(1 for lead in l1.values() if lead == b) for b in b1}
        assert sorted(per.values()) == [PARTITIONS // 2] * 2, per
        print(f"brokers {b1}; partitions led per proxy {per}")
        # kcat sees the same.
        assert kcat_brokers(p2, "spread") == (b1, l1)
        # DescribeCluster lists both too.
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": p1})
        described = admin.describe_cluster(request_timeout=30).result(30)
        assert {f"{n.host}:{n.port}" for n in described.nodes} == {p1, p2}
        assert described.controller.id in b1

        # One address in front of the proxies (a Service): the client is told
        # of the proxies themselves and writes to every partition through them.
        service = Relay(int(p1.rsplit(":", 1)[1]))
        try:
            prod = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{service.port}",
                                             "enable.idempotence": True})
            done = []
            for p in range(PARTITIONS):
                prod.produce("spread", value=b"via-service", partition=p,
                             on_delivery=lambda err, msg: done.append(err))
            assert prod.flush(60) == 0
            assert done == [None] * PARTITIONS, done
        finally:
            service.close()

        # kill -9: dropped within a lease and a controller round.
        cluster.proxies[1].kill9()
        waited, _ = wait_brokers(p1, "spread", {p1})
        print(f"a killed proxy left the Metadata answers after {waited:.2f} s")
        _, leaders = brokers_and_leaders(p1, "spread")
        assert set(leaders.values()) == set(brokers_and_leaders(p1, "spread")[0]), leaders
        # Back (with a new id), then SIGTERM: it leaves at once.
        cluster.proxies[1].start()
        cluster.wait_ready(cluster.proxies[1])
        p2 = cluster.proxies[1].addr("kafka")
        wait_brokers(p1, "spread", {p1, p2})
        cluster.proxies[1].stop()
        waited, _ = wait_brokers(p1, "spread", {p1})
        print(f"a stopped (SIGTERM) proxy left the Metadata answers after {waited:.2f} s")
    finally:
        cluster.stop()


@pytest.mark.timeout(300 * repeats())
def test_proxy_killed_under_load_clients_move_to_the_other(floe_bin, tmp_path):
    """Scenario 8: `kill -9` one of two proxies under load: the producers,
    bootstrapped on both, go on through the other; nothing acknowledged is
    lost and no error reaches the application."""
    pauses = []
    for run in range(repeats()):
        cluster = S3Cluster(floe_bin, tmp_path / f"run{run}", metas=1, endpoints=1)
        try:
            create_topic(cluster.bootstrap, "orders", PARTITIONS)
            load = Load(cluster.bootstrap, "orders", PARTITIONS, rate=400)
            load.wait_acked(400, also=cluster.brokers)
            survivor = cluster.proxies[0].addr("kafka")
            killed_at = time.time()
            cluster.proxies[1].kill9()
            load.wait_acked(1600, timeout=120, also=[*cluster.brokers, cluster.proxies[0]])
            until = load.stop()
            gaps = load.max_gap(killed_at, until)
            pauses.append(max(gaps.values()))
            print(f"proxy killed: longest partition pause {pauses[-1]:.2f} s "
                  f"(per partition: {', '.join(f'{g:.2f}' for g in gaps.values())})", flush=True)
            report = verify(survivor, [load], "orders", PARTITIONS)
            print(f"checked: {report.summary()}", flush=True)
            assert max(gaps.values()) < 60, f"produce stalled: {gaps}\n{cluster.logs()}"
        finally:
            cluster.stop()
    print(f"proxy loss: median longest pause {median(pauses):.2f} s over {len(pauses)} runs")
