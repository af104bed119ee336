"""Network partitions and lying clocks (issue 41), with real processes: 3
metadata nodes, 3 brokers (2 s leases), 2 proxies on a local folder store,
every metadata node and broker reached only through a link the test can cut
(tests/faults_net.py). Idempotent acks=all producers write numbered records,
a consumer group of three confluent-kafka members reads and commits, a
probe asks each proxy for high watermarks, and a monitor reads the group's
committed offsets, while a seeded schedule injects one fault at a time:

- family `network`: a broker cut from the metadata service (still reached
  by proxies and the store), a broker cut from the proxies (still talking to
  the metadata), a metadata node isolated, the leader cut from the other
  metadata nodes (a minority), every metadata node cut from the others (no
  majority), one proxy cut from one broker, a link flapping, and one-way
  cuts (bytes pass one way, are held the other);
- family `clock`: the wall clock of the metadata leader, of a follower, of
  every metadata node or of a broker jumping forward or back by seconds, or
  running fast or slow (libfaketime, the monotonic clock left true: the
  metadata service measures leases on the wall clock, brokers on the
  monotonic one).

Afterwards every cut heals and every clock is true again; two independent
readers read everything back and `consistency.check` finds lost,
misplaced, duplicated, reordered or phantom records and readers that
disagree; `live_checks.check_live` finds two members owning a partition at
one generation, committed offsets moving back or lost, stale high
watermarks and live reads the log does not hold. In the clock family a
share group runs beside them (tests/share_load.py: a producer and two
ShareConsumers, one through each proxy, that accept, release and reject,
with a dead-letter topic), drained once every clock is true again and
checked by tests/share_checker.py; not in the network family, whose relays
(in this process) it starves (docs/operations.md). A table of the run is
printed: faults injected, operations, anomalies by kind.

Sized by the environment (docs/operations.md, "What Floe survives"):
  FLOE_FAULTS_SECONDS   seconds of faults per family (default 20: the CI run)
  FLOE_FAULTS_SEED      seed of the schedules (default: the time, printed)
  FLOE_FAULTS_FAMILIES  families to run, comma-separated (default: network,clock)
  FLOE_FAULTS_RATE      records per second per producer (default 150)
  FLOE_FAULTS_KINDS     only these fault kinds, comma-separated (default: every kind of the family)
  FLOE_FAULTS_SHARE     the families the share group runs in, comma-separated (default: clock in
                        the long mode, none in CI)
  FLOE_SOAK_CLIENT_LOGS a folder for each producer's librdkafka log (as in test_reliability.py)
A failed run writes its whole history (faults, writes, reads, group events)
as JSON in the test's tmp dir and prints the path.
"""

import dataclasses
import json
import os
import random
import threading
import time

import pytest

from consistency import History, Read, check, decode
from faults_net import NetCluster, faketime_available, latest_offset
from live_checks import (KINDS, Assign, Commit, CommittedRead, LiveHistory, Watermark, check_live,
                         parse_group_metadata)
from s3_cluster import Producer, read_confluent, read_kafka_python, wait_leaders
from share_load import ShareLoad

confluent_kafka = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402

SECONDS = float(os.environ.get("FLOE_FAULTS_SECONDS", "20"))
SEED = int(os.environ.get("FLOE_FAULTS_SEED") or time.time())
FAMILIES = os.environ.get("FLOE_FAULTS_FAMILIES", "network,clock").split(",")
RATE = float(os.environ.get("FLOE_FAULTS_RATE", "150"))
KINDS_ONLY = [k for k in os.environ.get("FLOE_FAULTS_KINDS", "").split(",") if k]
# The share group runs in the clock family in the long mode only: a stuck
# start offset it found there (docs/operations.md, "Found: a
# share-partition's start offset stuck") is not diagnosed yet, and CI must
# not fail at random on it.
SHARE_FAMILIES = os.environ.get("FLOE_FAULTS_SHARE",
                                "clock" if "FLOE_FAULTS_SECONDS" in os.environ else "").split(",")
PARTITIONS = 6
PRODUCERS = 2
MEMBERS = 3
LONG = SECONDS > 60


class Schedule(threading.Thread):
    """Injects one fault after another for `seconds`, each for a while, then
    heals it and lets the cluster settle; logs every action with its time."""

    def __init__(self, cluster, family, seconds, seed, t0):
        super().__init__(name=f"faults-{family}", daemon=True)
        self.cluster, self.family, self.seconds, self.t0 = cluster, family, seconds, t0
        self.rng = random.Random(f"{seed}-{family}")
        self.events = []  # (t, what)
        self.injected = {}  # kind -> count
        self.windows = []  # (kind, start, healed): time.time() of each fault
        self.recovery = {}  # kind -> the longest wait for a metadata leader after it healed (s)
        self.error = None
        self.stop = threading.Event()

    def log(self, what):
        t = time.time() - self.t0
        self.events.append((round(t, 3), what))
        print(f"[{self.family} t={t:7.2f}s] {what}", flush=True)

    def run(self):
        kinds = NETWORK if self.family == "network" else CLOCK
        if KINDS_ONLY:
            kinds = {k: f for k, f in kinds.items() if k in KINDS_ONLY} or kinds
        try:
            while time.time() - self.t0 < self.seconds and not self.stop.is_set():
                kind = self.rng.choice(sorted(kinds))
                hold = self.rng.uniform(1.0, 3.0 if not LONG else 8.0)
                self.injected[kind] = self.injected.get(kind, 0) + 1
                start = time.time()
                kinds[kind](self, hold)
                self.windows.append((kind, start, time.time()))
                self.settle(kind)
        except Exception as e:  # reported by the test
            self.error = e
            self.log(f"schedule failed: {e!r}")
        finally:
            self.cluster.net.heal()
            for c in self.cluster.clocks.values():
                c.set(0)

    def settle(self, kind):
        """A quiet gap, then a metadata leader known (no fault overlaps the
        last one's recovery); how long the leader took is kept per kind."""
        healed = time.time()
        self.stop.wait(self.rng.uniform(0.5, 2.0))
        self.cluster.meta_leader(timeout=300)
        took = round(time.time() - healed, 1)
        self.recovery[kind] = max(self.recovery.get(kind, 0.0), took)
        if took > 10:
            self.log(f"a metadata leader only {took}s after the {kind} healed")

    def wait(self, seconds):
        self.stop.wait(seconds)

    # who
    def leader(self):
        return f"meta{self.cluster.meta_leader()}"

    def any_of(self, names):
        return self.rng.choice(sorted(names))

    def heal(self):
        reset = self.rng.random() < 0.5
        n = self.cluster.net.heal(reset=reset)
        self.log(f"healed ({'reset' if reset else 'held bytes delivered'}: {n} connections reset)")


def cut_broker_from_meta(s, hold):
    c = s.cluster
    b = s.any_of(c.broker_names())
    c.net.partition([b], c.meta_names())
    s.log(f"{b} cut from every metadata node for {hold:.1f}s (proxies and the store still reach it)")
    s.wait(hold)
    s.heal()


def cut_broker_from_proxies(s, hold):
    c = s.cluster
    b = s.any_of(c.broker_names())
    c.net.partition([b], c.proxy_names())
    s.log(f"{b} cut from every proxy for {hold:.1f}s (it still talks to the metadata service)")
    s.wait(hold)
    s.heal()


def isolate_meta(s, hold):
    c = s.cluster
    m = s.leader() if s.rng.random() < 0.5 else s.any_of(c.meta_names())
    others = [r.name for r in c.roles() if r.name != m]
    c.net.partition([m], others)
    s.log(f"{m} isolated from every other role for {hold:.1f}s")
    s.wait(hold)
    s.heal()


def cut_meta_minority(s, hold):
    c = s.cluster
    m = s.leader()
    c.net.partition([m], [x for x in c.meta_names() if x != m])
    s.log(f"the metadata leader {m} cut from the other metadata nodes (a minority) for {hold:.1f}s")
    s.wait(hold)
    s.heal()


def cut_meta_majority(s, hold):
    c = s.cluster
    names = c.meta_names()
    for i, a in enumerate(names):
        c.net.partition([a], names[i + 1:])
    s.log(f"every metadata node cut from the others (no majority) for {hold:.1f}s")
    s.wait(hold)
    s.heal()


def cut_proxy_from_broker(s, hold):
    c = s.cluster
    p, b = s.any_of(c.proxy_names()), s.any_of(c.broker_names())
    c.net.cut(p, b)
    s.log(f"{p} cut from {b} for {hold:.1f}s")
    s.wait(hold)
    s.heal()


def flap(s, hold):
    c = s.cluster
    a, b = s.rng.choice([(s.any_of(c.broker_names()), s.leader()),
                         (s.any_of(c.proxy_names()), s.any_of(c.broker_names())),
                         (s.leader(), s.any_of([m for m in c.meta_names()]))])
    if a == b:
        return
    end = time.time() + hold
    n = 0
    while time.time() < end and not s.stop.is_set():
        c.net.cut(a, b)
        s.wait(s.rng.uniform(0.05, 0.6))
        c.net.heal(reset=s.rng.random() < 0.3)
        s.wait(s.rng.uniform(0.05, 0.6))
        n += 1
    s.log(f"link {a}<->{b} flapped {n} times over {hold:.1f}s")


def one_way(s, hold):
    c = s.cluster
    b, leader = s.any_of(c.broker_names()), s.leader()
    follower = s.any_of([m for m in c.meta_names() if m != leader])
    p = s.any_of(c.proxy_names())
    src, dst = s.rng.choice([(b, leader), (leader, b), (leader, follower), (follower, leader), (p, b), (b, p)])
    c.net.cut_oneway(src, dst)
    s.log(f"one-way cut: bytes {src} -> {dst} held, {dst} -> {src} pass, for {hold:.1f}s")
    s.wait(hold)
    s.heal()


NETWORK = {
    "broker-meta-cut": cut_broker_from_meta,
    "broker-proxies-cut": cut_broker_from_proxies,
    "meta-isolated": isolate_meta,
    "meta-minority": cut_meta_minority,
    "meta-majority": cut_meta_majority,
    "proxy-broker-cut": cut_proxy_from_broker,
    "flapping": flap,
    "one-way": one_way,
}


def clock_jump(s, names, label, hold):
    c = s.cluster
    by = s.rng.choice([-1, 1]) * s.rng.uniform(2.0, 12.0)
    for n in names:
        c.clocks[n].set(by)
    s.log(f"{label} ({', '.join(names)}) wall clock jumped {by:+.1f}s for {hold:.1f}s")
    s.wait(hold)
    for n in names:
        c.clocks[n].set(0)
    s.log(f"{label} wall clock jumped back by {-by:+.1f}s")


def leader_clock_jump(s, hold):
    clock_jump(s, [s.leader()], "metadata leader", hold)


def follower_clock_jump(s, hold):
    leader = s.leader()
    clock_jump(s, [s.any_of([m for m in s.cluster.meta_names() if m != leader])], "metadata follower", hold)


def all_meta_clock_jump(s, hold):
    clock_jump(s, s.cluster.meta_names(), "every metadata node", hold)


def broker_clock_jump(s, hold):
    clock_jump(s, [s.any_of(s.cluster.broker_names())], "broker", hold)


def meta_clock_drift(s, hold):
    m = s.leader() if s.rng.random() < 0.7 else s.any_of(s.cluster.meta_names())
    rate = s.rng.choice([0.25, 0.5, 1.5, 2.0, 3.0])
    clock = s.cluster.clocks[m]
    s.log(f"{m} wall clock runs at {rate}x for {hold:.1f}s")
    clock.drift(rate, hold, stop=s.stop)
    s.log(f"{m} wall clock {clock.offset:+.1f}s off, set true again")
    clock.set(0)


CLOCK = {
    "leader-clock-jump": leader_clock_jump,
    "follower-clock-jump": follower_clock_jump,
    "all-meta-clock-jump": all_meta_clock_jump,
    "broker-clock-jump": broker_clock_jump,
    "meta-clock-drift": meta_clock_drift,
}


class Member(threading.Thread):
    """A consumer group member: logs each assignment with its generation,
    every record it reads, and commits its position every second and when a
    rebalance takes partitions away, logging each commit with its generation
    and outcome."""

    def __init__(self, name, bootstrap, group, topic, live, stop):
        super().__init__(name=name, daemon=True)
        self.live, self.stop_event, self.topic = live, stop, topic
        self.reads = 0
        self.pos = {}
        self.c = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000, "client.id": name,
        })

    def generation(self):
        parsed = parse_group_metadata(self.c.consumer_group_metadata())
        return parsed[0] if parsed else -1

    def on_assign(self, consumer, parts):
        self.live.assigns.append(Assign(self.name, self.generation(), tuple(sorted(p.partition for p in parts)),
                                        time.time()))

    def on_revoke(self, consumer, parts):
        self.commit()
        for p in parts:
            self.pos.pop(p.partition, None)

    def commit(self):
        if not self.pos:
            return
        offsets = tuple(sorted(self.pos.items()))
        gen = self.generation()
        sent = time.time()
        ok, err = True, ""
        try:
            res = self.c.commit(offsets=[confluent_kafka.TopicPartition(self.topic, p, o) for p, o in offsets],
                                asynchronous=False)
            bad = [f"{r.partition}: {r.error}" for r in res or () if r.error]
            if bad:
                ok, err = False, "; ".join(bad)
        except confluent_kafka.KafkaException as e:
            ok, err = False, str(e)
        self.live.commits.append(Commit(self.name, gen, offsets, sent, time.time(), ok, err))

    def run(self):
        self.c.subscribe([self.topic], on_assign=self.on_assign, on_revoke=self.on_revoke)
        last_commit = time.time()
        try:
            while not self.stop_event.is_set():
                for m in self.c.consume(num_messages=500, timeout=0.2):
                    if m.error():
                        continue
                    rec = decode(m.value()) or (-1, -1)
                    self.live.live_reads.append((self.name, Read(m.partition(), m.offset(), *rec)))
                    self.pos[m.partition()] = m.offset() + 1
                    self.reads += 1
                if time.time() - last_commit >= 1.0:
                    self.commit()
                    last_commit = time.time()
            self.commit()
        finally:
            self.c.close()


class Probe(threading.Thread):
    """Asks each proxy in turn for a high watermark (a ListOffsets sent to
    that proxy alone), and now and then for the group's committed offsets,
    logging when each was asked."""

    def __init__(self, cluster, group, topic, live, stop):
        super().__init__(name="probe", daemon=True)
        self.live, self.stop_event, self.topic, self.group = live, stop, topic, group
        self.proxies = {p.name: p.addr("kafka") for p in cluster.proxies}
        # The committed offsets are read by a consumer of the group that never
        # joins it (no subscription), not by the admin API: librdkafka 2.16's
        # AdminClient crashes (SIGSEGV in rd_kafka_cgrp_op, from
        # rd_kafka_handle_OffsetFetch) on a retriable coordinator error of
        # ListConsumerGroupOffsets, as coordinators move under faults.
        self.reader = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                                                "enable.auto.commit": False})

    def committed(self):
        sent = time.time()
        got = self.reader.committed([confluent_kafka.TopicPartition(self.topic, p) for p in range(PARTITIONS)],
                                    timeout=5)
        offsets = tuple(sorted((tp.partition, tp.offset) for tp in got if not tp.error and tp.offset >= 0))
        self.live.committed_reads.append(CommittedRead(offsets, sent))

    def close(self):
        self.reader.close()

    def run(self):
        i = 0
        names = sorted(self.proxies)
        while not self.stop_event.wait(0.2):
            name = names[i % len(names)]
            p = (i // len(names)) % PARTITIONS
            i += 1
            sent = time.time()
            try:
                error, high = latest_offset(self.proxies[name], self.topic, p)
                if error == 0:
                    self.live.watermarks.append(Watermark(p, high, sent, name))
            except OSError:
                pass
            if i % 8 == 0:
                try:
                    self.committed()
                except confluent_kafka.KafkaException:
                    pass  # unavailable during a fault: no reading
        self.close()


def worst_pauses(windows, acked, after=10.0):
    """{fault kind: the longest time (s) a partition took no acknowledged
    write, from the fault's start to `after` seconds past its healing},
    the worst over every fault of the kind."""
    times = sorted(w.at for w in acked)
    by_partition = {}
    for w in acked:
        by_partition.setdefault(w.partition, []).append(w.at)
    for ts in by_partition.values():
        ts.sort()
    out = {}
    for kind, start, healed in windows:
        end = healed + after
        worst = 0.0
        for ts in by_partition.values():
            inside = [start] + [t for t in ts if start <= t <= end] + [end]
            worst = max(worst, max(b - a for a, b in zip(inside, inside[1:])))
        out[kind] = round(max(out.get(kind, 0.0), worst), 1)
    return out if times else {}


def table(rows):
    """The per-run table: one line per family."""
    head = ["family", "seed", "seconds", "faults", "acked", "unacked", "delivery_failures", "reads", "commits",
            "watermarks", "anomalies", "resent", "pauses", "leader_after", "share"]
    lines = [" | ".join(head)]
    for r in rows:
        lines.append(" | ".join(str(r[k]) for k in head))
    return "\n".join(lines)


def families():
    out = []
    for f in FAMILIES:
        if f == "clock" and not faketime_available():
            out.append(pytest.param(f, marks=pytest.mark.skip(reason="faketime not installed (tests/run.sh)")))
        else:
            out.append(f)
    return out


@pytest.mark.timeout(int(SECONDS) + 600)
@pytest.mark.parametrize("family", families())
def test_faults_lose_nothing_acknowledged_and_serve_nothing_stale(floe_bin, tmp_path, family):
    print(f"\nfaults: family {family}, {SECONDS:.0f}s, seed {SEED} (FLOE_FAULTS_SEED={SEED} replays it)", flush=True)
    topic, group = f"faults-{family}", f"group-{family}"
    cluster = NetCluster(floe_bin, tmp_path, clocks=family == "clock", metas=3, brokers=3, proxies=2,
                         lease_ms=2000, proxy_flags=("--default-partitions", str(PARTITIONS)))
    stop = threading.Event()
    live = LiveHistory()
    threads = []
    share = None
    try:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([confluent_kafka.admin.NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
        wait_leaders(cluster.bootstrap, topic, PARTITIONS)
        if family in SHARE_FAMILIES:
            share = ShareLoad(cluster.bootstrap, [p.addr("kafka") for p in cluster.proxies],
                              random.Random(f"{SEED}-share-{family}"))
        producers = [Producer(i, cluster.bootstrap, topic, PARTITIONS, stop, rate=RATE)
                     for i in range(1, PRODUCERS + 1)]
        members = [Member(f"member{i}", cluster.bootstrap, group, topic, live, stop) for i in range(1, MEMBERS + 1)]
        probe = Probe(cluster, group, topic, live, stop)
        threads = [*producers, *members, probe]
        for t in threads:
            t.start()
        if share:
            share.wait_flowing()
        t0 = time.time()
        schedule = Schedule(cluster, family, SECONDS, SEED, t0)
        schedule.start()
        schedule.join(SECONDS + 300)
        assert not schedule.is_alive(), "the fault schedule did not finish"
        # Load on a healed cluster until every partition is led and writes go through again.
        wait_leaders(cluster.bootstrap, topic, PARTITIONS, timeout=120)
        settle_acked = sum(len(p.acked) for p in producers) + 20
        deadline = time.time() + 120
        while sum(len(p.acked) for p in producers) < settle_acked and time.time() < deadline:
            time.sleep(0.1)
        stop.set()
        for t in threads:
            t.join(240)
            assert not t.is_alive(), f"{t.name} did not finish"
        if share:
            share.stop()
        elapsed = time.time() - t0
        final_probe = Probe(cluster, group, topic, live, threading.Event())
        try:
            deadline = time.time() + 120
            while True:  # the final committed offsets, once the group's coordinator answers
                try:
                    final_probe.committed()
                    break
                except confluent_kafka.KafkaException:
                    assert time.time() < deadline, "the committed offsets could not be read in 120 s"
        finally:
            final_probe.close()

        acked = [w for p in producers for w in p.acked]
        unacked = {(p.pid, s) for p in producers for s in range(p.sent)} - {(w.producer, w.seq) for w in acked}
        first, ends = read_confluent(cluster.bootstrap, topic, PARTITIONS, 120 + len(acked) / 2000)
        second = read_kafka_python(cluster.bootstrap, topic, ends, 120 + len(acked) / 2000)
        report = check(History(acked=acked, unacked=unacked, reads={"confluent-kafka": first, "kafka-python": second}))
        final = {(r.partition, r.offset): (r.producer, r.seq) for r in first}
        live_v = check_live(live, acked, final)
        # The share group: drained and checked (its history kept apart when it fails).
        share_anomalies, share_ops, share_report = {}, {}, None
        if share:
            share_anomalies, share_ops, share_report = share.finish(floe_bin, tmp_path, f"faults-{family}")
        fatal = [(p.pid, f) for p in producers for f in p.fatal]
        anomalies = {**{k: len(v) for k, v in report.violations.items()}, **{k: len(v) for k, v in live_v.items()},
                     **share_anomalies}
        row = {
            "family": family, "seed": SEED, "seconds": round(elapsed, 1),
            "faults": f"{sum(schedule.injected.values())} "
                      + json.dumps(dict(sorted(schedule.injected.items())), separators=(",", ":")),
            "acked": report.acked, "unacked": report.unacked,
            "reads": sum(m.reads for m in members) + sum(report.records.values()),
            "commits": f"{sum(c.ok for c in live.commits)}/{len(live.commits)}",
            "watermarks": len(live.watermarks),
            "pauses": json.dumps(worst_pauses(schedule.windows, acked), separators=(",", ":")),
            "delivery_failures": sum(len(p.failed) for p in producers),
            "leader_after": json.dumps(schedule.recovery, separators=(",", ":")),
            "anomalies": json.dumps({k: v for k, v in anomalies.items() if v} or {"none": 0}, separators=(",", ":")),
            # Sent again by librdkafka under a new epoch (consistency.py): counted, not a violation.
            "resent": len(report.resent),
            "share": json.dumps({k.removeprefix("share_"): v for k, v in share_ops.items()}, separators=(",", ":"))
                     if share else "-",
        }
        print("\n" + table([row]), flush=True)
        events = "\n".join(f"  t={t:8.2f}s {what}" for t, what in schedule.events)
        share_bad = share_report is not None and (not share_report.ok or share_anomalies["share_client_error"])
        failed = (not report.ok or any(live_v.values()) or share_bad or fatal or schedule.error is not None
                  or report.acked == 0 or sum(schedule.injected.values()) == 0)
        if failed:
            path = tmp_path / f"faults-{family}-history.json"
            path.write_text(json.dumps({
                "seed": SEED, "family": family, "row": row, "events": schedule.events,
                "violations": {**report.violations, **live_v}, "fatal": fatal,
                "acked": [dataclasses.astuple(w) for w in acked], "unacked": sorted(unacked),
                "reads": {"confluent-kafka": [dataclasses.astuple(r) for r in first],
                          "kafka-python": [dataclasses.astuple(r) for r in second]},
                "live": live.to_json(),
            }, default=str))
            print(f"history of the failed run: {path}", flush=True)
        assert schedule.error is None, f"the schedule failed: {schedule.error!r}\n{events}\n{cluster.logs()}"
        assert report.ok, f"consistency (seed {SEED}):\n{report.summary()}\nfaults:\n{events}"
        bad = {k: v[:5] for k, v in live_v.items() if v}
        assert not bad, f"live checks (seed {SEED}): {json.dumps(bad, indent=1)}\nfaults:\n{events}"
        assert not share_bad, \
            f"share groups (seed {SEED}):\n{share_report.summary()}\nproducer errors: {share.load.errors[:5]}" \
            f"\nfaults:\n{events}"
        assert not fatal, f"idempotent producers failed fatally: {fatal[:3]}"
        assert sum(schedule.injected.values()) > 0 and report.acked > 0
        assert set(anomalies) >= set(KINDS)
    finally:
        # Every client thread ends before the cluster does (a failed run too):
        # a client left running into the next scenario would outlive its cluster.
        stop.set()
        for t in threads:
            t.join(60)
        if share:
            share.close()
        cluster.stop()


def partition_owner(cluster):
    """The broker that owns the only partition of the cluster's only topic."""
    from test_cluster_failover import owned
    deadline = time.time() + 30
    while time.time() < deadline:
        owners = [b for b in cluster.brokers if owned(b.admin) == 1]
        if len(owners) == 1:
            return owners[0]
        time.sleep(0.1)
    raise AssertionError("no single owner of the partition")


def high_watermark(addr, topic):
    """The high watermark of partition 0 as the listener at `addr` itself answers."""
    error, offset = latest_offset(addr, topic, 0)
    if error:
        raise confluent_kafka.KafkaException(confluent_kafka.KafkaError(error))
    return offset


@pytest.mark.skipif(not faketime_available(), reason="faketime not installed (tests/run.sh)")
@pytest.mark.timeout(240)
def test_a_leader_clock_jumping_forward_lets_no_cut_off_owner_serve_a_stale_watermark(floe_bin, tmp_path):
    """The metadata leader's wall clock jumps 30 s forward while the owner of
    a partition and one proxy are cut from the metadata service. The owner
    still counts its lease on its own (monotonic) clock; the leader must not
    expire the lease early on its jumped clock and hand the partition to
    another broker while the old owner may still answer: a high watermark
    asked through the cut-off proxy after a write to the new owner was
    acknowledged must not be behind that write."""
    lease = 10000
    cluster = NetCluster(floe_bin, tmp_path, clocks=True, metas=1, brokers=2, proxies=2, lease_ms=lease,
                         proxy_flags=("--default-partitions", "1", "--max-view-age-ms", str(lease)))
    try:
        topic = "clock-jump"
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([confluent_kafka.admin.NewTopic(topic, 1, 1)])[topic].result(60)
        fresh, cut_off = cluster.proxies[1], cluster.proxies[0]
        wait_leaders(fresh.addr("kafka"), topic, 1)
        wait_leaders(cut_off.addr("kafka"), topic, 1)
        owner = partition_owner(cluster)
        p = confluent_kafka.Producer({"bootstrap.servers": fresh.addr("kafka"), "acks": "all",
                                      "enable.idempotence": True, "message.timeout.ms": 60000})
        acked = []

        def produce(n):
            for i in range(n):
                p.produce(topic, value=b"x", partition=0,
                          on_delivery=lambda e, m: acked.append(m.offset()) if e is None else None)
            p.flush(60)
        produce(5)
        assert len(acked) == 5 and high_watermark(cut_off.addr("kafka"), topic) == max(acked) + 1

        cluster.net.partition([owner.name, cut_off.name], cluster.meta_names())
        cut_at = time.time()
        cluster.clocks["meta1"].set(30)
        # Write through the other proxy until a write lands beyond the old
        # owner's end: the partition has moved (or the test gives up once the
        # old owner's lease surely ran out, which proves nothing either way).
        before = max(acked)
        # A new producer with short timeouts: the first one's requests to the
        # old owner hang until it gives up on them.
        p2 = confluent_kafka.Producer({"bootstrap.servers": fresh.addr("kafka"), "acks": "all",
                                       "message.timeout.ms": 1500, "request.timeout.ms": 1000,
                                       "retry.backoff.ms": 50, "topic.metadata.refresh.interval.ms": 200})
        while time.time() - cut_at < lease / 1000 * 0.8 and max(acked) <= before:
            p2.produce(topic, value=b"y", partition=0,
                       on_delivery=lambda e, m: acked.append(m.offset()) if e is None else None)
            p2.poll(0.1)
        moved = max(acked) > before
        moved_after = time.time() - cut_at
        p2.flush(5)
        stale, answers = None, []
        while moved and stale is None and time.time() - cut_at < lease / 1000 * 0.9:
            try:
                hw = high_watermark(cut_off.addr("kafka"), topic)
            except (confluent_kafka.KafkaException, OSError) as e:
                answers.append(str(e)[:40])
                continue
            answers.append(hw)
            if 0 <= hw <= max(acked):
                stale = (hw, max(acked), round(time.time() - cut_at, 2))
        print(f"watermarks through the cut-off proxy: {answers}", flush=True)
        print(f"moved={moved} ({moved_after:.2f}s after the cut); stale={stale}", flush=True)
        assert stale is None, (f"a high watermark of {stale[0]} answered through the cut-off proxy {stale[2]}s "
                               f"after the cut, though offset {stale[1]} was acknowledged by the new owner")
        # The owner heartbeats every fifth of a lease: its last heartbeat
        # before the cut reached the leader at most about that long before
        # it, so on a true clock its lease cannot end before four fifths of a
        # lease after the cut (0.6 leaves room for a slow heartbeat).
        assert not moved or moved_after >= lease / 1000 * 0.6, \
            f"the partition took a write at a new owner {moved_after:.2f}s after its owner was cut off"
        cluster.net.heal()
        cluster.clocks["meta1"].set(0)
        p.flush(60)
    finally:
        cluster.stop()
