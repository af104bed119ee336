"""A rolling restart of every broker of a cluster of processes (3 metadata
nodes, 3 brokers, 2 proxies, S3 on moto) under an idempotent acks=all
confluent-kafka producer and a confluent-kafka consumer in a group that
commits after each batch it reads. Each broker in turn is stopped with
SIGTERM (it drains: hands its partitions and coordinator shards over, then
exits), started again on the same id and port, and given its share back
before the next one stops.

Checked: no error reaches the producer or the consumer (no failed delivery,
no failed commit, no error event), not even one a client retries by itself
(the proxies answered no NOT_LEADER_OR_FOLLOWER: a write refused by a
releasing owner is sent again by the proxy), nothing acknowledged is lost (the
two-reader consistency check), the committed group reads no record twice
and every acknowledged one, and its consumer is never rebalanced: each
coordinator move resumes the group from its stored membership (one
assignment in the whole run, no revocation). Printed per restart: the
longest time any partition took no acknowledged write (the figure
docs/operations.md quotes), and the same over 2 s without a restart for
comparison. FLOE_LONG=1: 12 partitions, 400 records/s, the whole cluster
rolled 3 times, medians printed; the CI form rolls it once on 6
partitions."""

import os
import signal
import threading
import time

import pytest

from s3_cluster import Load, S3Cluster, create_topic, median, verify
from test_s3_cluster_brokers import labelled, log_count, owned, window_gaps

confluent_kafka = pytest.importorskip("confluent_kafka")

LONG = os.environ.get("FLOE_LONG") == "1"
PARTITIONS = 12 if LONG else 6
RATE = 400 if LONG else 200
ROUNDS = 3 if LONG else 1


class GroupReader(threading.Thread):
    """A consumer in group `group` reading `topic` from the start, committing
    synchronously after each batch; records every (partition, offset) it was
    given and every error it saw. With `retriable_ok`, errors the client
    retries by itself (a proxy's connection closed, a coordinator moving)
    go to `retried` instead of `errors`."""

    def __init__(self, bootstrap, topic, group, retriable_ok=False):
        super().__init__(name="group-reader", daemon=True)
        self.stop_event = threading.Event()
        self.read = []  # [(partition, offset)]
        self.errors = []
        self.retried = []
        self.retriable_ok = retriable_ok
        self.assigned = []  # one list of partitions per assignment
        self.revoked = []
        self.c = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10_000,
            "error_cb": lambda e: self._error("error event", e),
        })
        self.c.subscribe(
            [topic],
            on_assign=lambda _c, ps: self.assigned.append(sorted(p.partition for p in ps)),
            on_revoke=lambda _c, ps: self.revoked.append(sorted(p.partition for p in ps)),
        )

    def run(self):
        try:
            while not self.stop_event.is_set():
                msgs = self.c.consume(num_messages=500, timeout=0.2)
                batch = []
                for m in msgs:
                    if m.error():
                        if m.error().code() != confluent_kafka.KafkaError._PARTITION_EOF:
                            self._error("message error", m.error())
                        continue
                    batch.append((m.partition(), m.offset()))
                if not batch:
                    continue
                self.read += batch
                try:
                    self.c.commit(asynchronous=False)
                except confluent_kafka.KafkaException as e:
                    # _NO_OFFSET: nothing new to commit (the batch was
                    # committed as part of a rebalance); anything else fails.
                    if e.args[0].code() != confluent_kafka.KafkaError._NO_OFFSET:
                        self._error("commit failed", e.args[0])
        finally:
            self.c.close()

    def _error(self, what, err):
        # librdkafka's error events other than fatal ones are informational:
        # it reconnects by itself. _ALL_BROKERS_DOWN comes when every proxy
        # the client knows is down at once: a proxy restarted without `--id`
        # registers under a new id, which a client learns only at its next
        # metadata refresh, so after both proxies restart one after the
        # other it may know just the second (it then reconnects through its
        # bootstrap addresses).
        retriable = err.retriable() or err.code() in (confluent_kafka.KafkaError._TRANSPORT,
                                                      confluent_kafka.KafkaError._ALL_BROKERS_DOWN)
        (self.retried if self.retriable_ok and retriable else self.errors).append(f"{what}: {err}")

    def wait_read(self, wanted, timeout=120):
        """Waits until every (partition, offset) of `wanted` was read."""
        deadline = time.time() + timeout
        while not wanted <= set(self.read):
            assert self.is_alive(), "the group reader stopped"
            assert time.time() < deadline, f"{len(wanted - set(self.read))} acknowledged records never read"
            time.sleep(0.1)

    def stop(self):
        self.stop_event.set()
        self.join(60)


def wait_share(cluster, broker, timeout=60, partitions=PARTITIONS):
    """Waits until `broker` owns its share again (and every partition of
    the cluster's `partitions` has an owner)."""
    deadline = time.time() + timeout
    while True:
        counts = [owned(cluster, b) for b in cluster.brokers]
        if owned(cluster, broker) >= partitions // len(cluster.brokers) - 1 and sum(counts) == partitions:
            return
        assert time.time() < deadline, f"{broker.name} not given its share back: {counts}"
        time.sleep(0.1)


@pytest.mark.timeout(900 if LONG else 300)
def test_a_rolling_restart_of_every_broker_surfaces_no_error(floe_bin, tmp_path):
    cluster = S3Cluster(floe_bin, tmp_path, endpoints=1)
    reader = None
    try:
        create_topic(cluster.bootstrap, "orders", PARTITIONS)
        load = Load(cluster.bootstrap, "orders", PARTITIONS, rate=RATE)
        reader = GroupReader(cluster.bootstrap, "orders", "rolling")
        reader.start()
        load.wait_acked(RATE, also=cluster.brokers)
        for b in cluster.brokers:
            wait_share(cluster, b)
        # The group is formed before the first restart, so that every
        # restart moves a live group's coordinator.
        deadline = time.time() + 60
        while not reader.assigned:
            assert time.time() < deadline and reader.is_alive(), "the group reader was never assigned"
            time.sleep(0.1)
        # The same figure with no restart, for comparison: on S3 the flush
        # pacing alone leaves gaps of about one flush interval.
        quiet_from = time.time()
        time.sleep(2)
        quiet, _ = window_gaps(load, quiet_from, time.time())
        gaps, exits = [], []
        for _ in range(ROUNDS):
            for b in cluster.brokers:
                stopped_at = time.time()
                b.p.send_signal(signal.SIGTERM)
                b.p.wait(30)
                exits.append(time.time() - stopped_at)
                assert b.p.returncode == 0, b.tail()
                b.start()
                cluster.wait_ready(b)
                wait_share(cluster, b)
                others = [o for o in cluster.brokers if o is not b]
                load.wait_acked(RATE // 2, timeout=120, also=others)
                worst, each = window_gaps(load, stopped_at, time.time())
                gaps.append(worst)
                print(f"{b.name} restarted (exited {exits[-1]:.2f} s after SIGTERM): longest partition gap "
                      f"{worst:.2f} s (per partition: {each})", flush=True)
        until = load.stop()
        assert not load.errors, load.errors[:5]
        # Not even an error the client retries by itself: a write refused by
        # an owner handing its partition over is sent again by the proxy,
        # to the new owner, instead of being answered NOT_LEADER_OR_FOLLOWER
        # (which makes librdkafka drain the partition, refresh its metadata
        # and back off). REQUEST_TIMED_OUT stays possible where a call is
        # cut off by a process ending (its outcome is unknown); the long
        # runs in docs/operations.md saw none.
        errors = {p.name: labelled(p.admin, "floe_proxy_produce_errors_total", "error") for p in cluster.proxies}
        print(f"produce errors answered by the proxies: {errors}", flush=True)
        for name, e in errors.items():
            assert "NotLeaderOrFollower" not in e, f"{name} answered produce errors: {e}"
        acked = {(w.partition, w.offset) for w in load.acked}
        reader.wait_read(acked)
        # Checked before close, which revokes everything.
        rebalances = (list(reader.assigned), list(reader.revoked))
        reader.stop()
        assert not reader.errors, reader.errors[:5]
        seen = {}
        for po in reader.read:
            seen[po] = seen.get(po, 0) + 1
        twice = sorted(po for po, n in seen.items() if n > 1)
        assert not twice, f"read twice by the committed group: {twice[:10]} ({len(twice)})"
        assert rebalances == ([list(range(PARTITIONS))], []), \
            f"the group was rebalanced (assigned, revoked): {rebalances}"
        resumed = sum(log_count(b, "group resumed from its stored membership") for b in cluster.brokers)
        assert resumed >= ROUNDS, f"group resumed {resumed} times"
        for b in cluster.brokers:
            assert log_count(b, "drained: everything handed over") == ROUNDS, b.tail()
        report = verify(cluster.bootstrap, [load], "orders", PARTITIONS)
        print(f"checked: {report.summary()}; group read {len(reader.read)} records once each", flush=True)
        print(f"rolling restart ({ROUNDS} x {len(cluster.brokers)} brokers, {PARTITIONS} partitions, "
              f"{RATE}/s): longest partition gap per restart median {median(gaps):.2f} s, worst "
              f"{max(gaps):.2f} s ({', '.join(f'{g:.2f}' for g in gaps)}), {quiet:.2f} s in 2 s without a "
              f"restart; exit after SIGTERM median "
              f"{median(exits):.2f} s; window {until - load.started:.0f} s", flush=True)
    finally:
        if reader is not None and reader.is_alive():
            reader.stop()
        cluster.stop()
