"""Reliability under chaos: a cluster of real processes (3 metadata nodes, 3
brokers, a proxy, a local folder store) takes idempotent acks=all writes from
several producers while a broker is killed with SIGKILL every 10-20 s and
restarted, and the metadata leader is killed and restarted a few times.
Afterwards two independent readers (confluent-kafka and kafka-python) read
every partition and the consistency checker (tests/consistency.py) compares
what they read with every delivery report: nothing acknowledged lost, nothing
stored twice, offsets strictly increasing, each record at its acknowledged
offset, both readers alike.

Sized by the environment (docs/operations.md, "Testing for reliability"):
  FLOE_SOAK_SECONDS     seconds of chaos (default 60; CI runs the default)
  FLOE_SOAK_SEED        seed of the chaos schedule (default: the time, logged)
  FLOE_SOAK_PRODUCERS   producers (default 4)
  FLOE_SOAK_RATE        records per second per producer, 0 for as fast as it goes (default 400)
  FLOE_SOAK_PARTITIONS  partitions of the topic (default 6)
  FLOE_SOAK_META_KILLS  metadata leader kills (default: 2, plus one per 5 minutes)
  FLOE_SOAK_REPORT      write the figures there as JSON too
  FLOE_SOAK_CLIENT_LOGS a folder for each producer's librdkafka log (idempotence state)
"""

import json
import os
import random
import threading
import time

import pytest

from consistency import History, check
from floe_cluster import Cluster
from s3_cluster import Producer, read_confluent, read_kafka_python, wait_leaders

confluent_kafka = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402

SOAK_SECONDS = float(os.environ.get("FLOE_SOAK_SECONDS", "60"))
SEED = int(os.environ.get("FLOE_SOAK_SEED") or time.time())
PRODUCERS = int(os.environ.get("FLOE_SOAK_PRODUCERS", "4"))
RATE = float(os.environ.get("FLOE_SOAK_RATE", "400"))
PARTITIONS = int(os.environ.get("FLOE_SOAK_PARTITIONS", "6"))
META_KILLS = int(os.environ.get("FLOE_SOAK_META_KILLS") or 2 + int(SOAK_SECONDS // 300))
TOPIC = "soak"


class Chaos(threading.Thread):
    """Kills a broker every 10-20 s (SIGKILL, restarted after 0.5-3 s) and, at
    evenly spread times, the metadata leader (restarted after 1-3 s). One
    action at a time; every action is logged with its time."""

    def __init__(self, cluster, seconds, seed, t0):
        super().__init__(name="chaos", daemon=True)
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.t0 = t0
        self.events = []  # (t, what)
        self.error = None
        plan = []
        t = self.rng.uniform(10, 20)
        while t < seconds:
            plan.append((t, "broker", self.rng.randrange(len(cluster.brokers)), self.rng.uniform(0.5, 3)))
            t += self.rng.uniform(10, 20)
        for k in range(META_KILLS):
            plan.append((seconds * (k + 0.5) / META_KILLS + 3, "meta-leader", None, self.rng.uniform(1, 3)))
        self.plan = sorted(plan, key=lambda e: e[0])
        self.seconds = seconds

    def log(self, what):
        t = time.time() - self.t0
        self.events.append((round(t, 3), what))
        print(f"[chaos t={t:7.2f}s] {what}", flush=True)

    def run(self):
        try:
            for at, kind, which, down in self.plan:
                wait = self.t0 + at - time.time()
                if wait > 0:
                    time.sleep(wait)
                if kind == "broker":
                    b = self.cluster.brokers[which]
                    self.log(f"kill -9 {b.name} (pid {b.pid})")
                    b.kill9()
                    time.sleep(down)
                    b.start()
                    self.cluster.wait_ready(b)
                    self.log(f"{b.name} restarted (pid {b.pid}) after {down:.1f}s down")
                else:
                    leader = self.cluster.meta_leader()
                    m = self.cluster.metas[leader]
                    self.log(f"kill -9 metadata leader {m.name} (pid {m.pid})")
                    m.kill9()
                    time.sleep(down)
                    m.start()
                    self.wait_meta_back(leader)
                    self.log(f"{m.name} restarted (pid {m.pid}) after {down:.1f}s down; "
                             f"leader now meta{self.cluster.meta_leader()}")
            # The load goes on to the end of the soak.
            rest = self.t0 + self.seconds - time.time()
            if rest > 0:
                time.sleep(rest)
        except Exception as e:  # reported by the test
            self.error = e
            self.log(f"chaos failed: {e!r}")

    def wait_meta_back(self, i, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = self.cluster.meta_status()
            if i in st and st[i][1] != 0:
                return
            time.sleep(0.2)
        raise AssertionError(f"meta{i} did not rejoin in {timeout}s: {self.cluster.meta_status()}")


def last_event_before(events, t):
    before = [e for e in events if e[0] <= t]
    return before[-1] if before else None


@pytest.mark.timeout(int(SOAK_SECONDS) + 900)
def test_chaos_soak_loses_and_duplicates_no_acknowledged_write(floe_bin, tmp_path):
    print(f"soak: {SOAK_SECONDS:.0f}s of chaos, seed {SEED} (FLOE_SOAK_SEED={SEED} replays it), "
          f"{PRODUCERS} producers at {RATE or 'unlimited'}/s each, {PARTITIONS} partitions, "
          f"{META_KILLS} metadata leader kills", flush=True)
    cluster = Cluster(floe_bin, tmp_path, metas=3, brokers=3, lease_ms=2000,
                      proxy_flags=("--default-partitions", str(PARTITIONS)))
    try:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.kafka})
        admin.create_topics([confluent_kafka.admin.NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(60)
        wait_leaders(cluster.kafka, TOPIC, PARTITIONS)

        stop = threading.Event()
        producers = [Producer(i, cluster.kafka, TOPIC, PARTITIONS, stop, rate=RATE) for i in range(1, PRODUCERS + 1)]
        t0 = time.time()
        chaos = Chaos(cluster, SOAK_SECONDS, SEED, t0)
        for p in producers:
            p.start()
        chaos.start()
        chaos.join(SOAK_SECONDS + 600)
        assert not chaos.is_alive(), "the chaos schedule did not finish"
        # A little quiet load after the last restart, then stop and flush.
        time.sleep(3)
        stop.set()
        for p in producers:
            p.join(260)
            assert not p.is_alive(), f"{p.name} did not flush in time"
        chaos_log = "\n".join(f"  t={t:8.2f}s {what}" for t, what in chaos.events)
        assert chaos.error is None, f"chaos failed: {chaos.error!r}\n{chaos_log}\n{cluster.logs()}"
        fatal = [(p.pid, f) for p in producers for f in p.fatal]
        elapsed = time.time() - t0

        # Every role back, every partition led, then read everything twice.
        for b in cluster.brokers:
            cluster.wait_ready(b)
        wait_leaders(cluster.kafka, TOPIC, PARTITIONS)
        acked = [w for p in producers for w in p.acked]
        unacked = {(p.pid, s) for p in producers for s in range(p.sent)} - {(w.producer, w.seq) for w in acked}
        read_timeout = 120 + len(acked) / 2000
        first, ends = read_confluent(cluster.kafka, TOPIC, PARTITIONS, read_timeout)
        second = read_kafka_python(cluster.kafka, TOPIC, ends, read_timeout)
        report = check(History(acked=acked, unacked=unacked,
                               reads={"confluent-kafka": first, "kafka-python": second}))

        kills = sum(1 for _, what in chaos.events if what.startswith("kill"))
        figures = {
            "seed": SEED, "seconds": round(elapsed, 1), "acknowledged": report.acked,
            "not_acknowledged": report.unacked, "not_acknowledged_but_stored": report.unacked_stored,
            "delivery_failures": sum(len(p.failed) for p in producers),
            "violations": report.counts(), "records_read": report.records,
            "high_watermarks": ends, "kills": kills, "fatal_producer_errors": fatal,
            "events": chaos.events,
        }
        print("soak figures: " + json.dumps({k: v for k, v in figures.items() if k != "events"}), flush=True)
        print("chaos:\n" + chaos_log, flush=True)
        if os.environ.get("FLOE_SOAK_REPORT"):
            with open(os.environ["FLOE_SOAK_REPORT"], "w") as f:
                json.dump(figures, f, indent=1)

        # Where a lost or misplaced write sits in the chaos: the last action before its ack.
        context = []
        for kind in ("lost", "misplaced", "duplicate"):
            for msg in report.violations[kind][:3]:
                t = None
                if "(t=" in msg:
                    t = float(msg.split("(t=", 1)[1].split(")", 1)[0]) - t0
                context.append(f"{kind}: {msg}; last chaos action before its ack: "
                               f"{last_event_before(chaos.events, t) if t is not None else '-'}")
        assert report.ok, (f"the consistency checker failed (seed {SEED}):\n{report.summary()}\n"
                           + "\n".join(context) + f"\nchaos:\n{chaos_log}")
        assert not fatal, f"idempotent producers failed fatally: {fatal[:3]}"
        assert kills >= 1 + (SOAK_SECONDS >= 30), f"too little chaos: {chaos.events}"
        assert report.acked > 0
    finally:
        cluster.stop()
