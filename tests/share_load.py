"""A share-group workload run beside the loads of the fault scenarios
(issue 41), checked by tests/share_checker.py.

`ShareLoad` creates a share topic and its dead-letter topic, sets the
group's configs (start at the earliest record, a delivery limit of 3, a
15 s lock (the least a group may set), `floe.dlq.topic`), and runs an idempotent producer of unique
values (`s3_cluster.Load`) and two confluent-kafka ShareConsumers (threads,
explicit acknowledgement, each through one of the cluster's proxies in
turn) that ACCEPT most records, RELEASE some, REJECT a few (drawn from the
scenario's seeded generator), and RELEASE every "poison" record (one in 25)
until the delivery limit dead-letters it. Every delivery (with its delivery
count) and every acknowledgement (with its outcome from the
acknowledgement commit callback) is logged.

`stop()` ends them with the other loads; `finish()`, once the faults are
off, drains the group with a fresh consumer that accepts everything until
`floe group describe` shows every partition's start offset at its log end
(every record accepted or archived, dead-letter appends included), reads
the share topic and the dead-letter topic back, and runs the checker:
({kind: count}, operations, report), keeping the history as JSON when
anything is wrong (always with FLOE_FAULTS_KEEP_SHARE=1).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
import uuid
from collections import defaultdict, deque

import confluent_kafka
import confluent_kafka.admin
from confluent_kafka import AcknowledgeType, ShareConsumer

from consistency import decode
from faults_store import keep_history
from s3_cluster import Load, read_confluent, wait_leaders
from share_checker import ACCEPT, REJECT, RELEASE, Ack, DeadLetter, Delivery, ShareHistory, check

TYPES = {ACCEPT: AcknowledgeType.ACCEPT, RELEASE: AcknowledgeType.RELEASE, REJECT: AcknowledgeType.REJECT}
LIMIT = 3
LOCK_MS = 15000  # the least a group config may set
POISON = 25  # every POISON-th value of a producer is released at every delivery


def set_group_configs(bootstrap, group, configs, timeout=60):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(timeout)


class ShareLog:
    """What every consumer of one run saw, in one place (threads append)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.deliveries = []  # [Delivery]
        self.acks = []  # [[delivery, kind, sent, outcome, answered]]
        self.consumers = {}  # name -> created at
        self.errors = defaultdict(int)  # what consumers were told, by error name

    def deliver(self, name, m, at):
        with self.lock:
            d = Delivery(len(self.deliveries), name, m.partition(), m.offset(), decode(m.value()),
                         m.delivery_count(), at)
            self.deliveries.append(d)
            return d

    def sent(self, delivery, kind):
        with self.lock:
            self.acks.append([delivery, kind, time.time(), "unknown", None])
            return len(self.acks) - 1

    def answered(self, i, ok):
        with self.lock:
            if self.acks[i][3] == "unknown":
                self.acks[i][3] = "confirmed" if ok else "failed"
                self.acks[i][4] = time.time()

    def error(self, e):
        name = e.args[0].name() if e.args and hasattr(e.args[0], "name") else type(e).__name__
        with self.lock:
            self.errors[name] += 1


class Worker(threading.Thread):
    """One ShareConsumer: polls, acknowledges each record as `policy(delivery)`
    says, commits the acknowledgements after each poll, until `stop`."""

    def __init__(self, name, bootstrap, group, topic, log, policy, stop):
        super().__init__(name=name, daemon=True)
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.log, self.policy, self.stop_event = log, policy, stop
        self.pending = defaultdict(deque)  # (partition, offset) -> [ack index] not answered yet
        self.polled = 0

    def on_commit(self, offsets, exception):
        for tp, offs in offsets.items():
            for o in offs:
                q = self.pending.get((tp.partition, o))
                if q:
                    self.log.answered(q.popleft(), exception is None)
        if exception is not None:
            self.log.error(exception)

    def run(self):
        self.log.consumers[self.name] = time.time()
        c = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.name,
                           "share.acknowledgement.mode": "explicit", "max.poll.records": 50})
        c.set_acknowledgement_commit_callback(self.on_commit)
        c.subscribe([self.topic])
        try:
            while not self.stop_event.is_set():
                try:
                    msgs = c.poll(0.3)
                except Exception as e:  # noqa: BLE001 -- counted; the loop polls again
                    self.log.error(e)
                    time.sleep(0.2)
                    continue
                now = time.time()
                for m in msgs:
                    if m.error() is not None:
                        self.log.error(confluent_kafka.KafkaException(m.error()))
                        continue
                    d = self.log.deliver(self.name, m, now)
                    self.polled += 1
                    kind = self.policy(d)
                    try:
                        c.acknowledge(m, TYPES[kind])
                    except Exception as e:  # noqa: BLE001 -- not sent: the lock runs out
                        self.log.error(e)
                        continue
                    self.pending[(d.partition, d.offset)].append(self.log.sent(d.id, kind))
                if len(msgs):
                    try:
                        c.commit_sync(10)
                    except Exception as e:  # noqa: BLE001 -- the outcome stays unknown, or comes later
                        self.log.error(e)
        finally:
            try:
                c.close()
            except Exception as e:  # noqa: BLE001
                self.log.error(e)


class ShareLoad:
    """The workload (see the module's doc). `proxies`: the Kafka addresses
    of the cluster's proxies (consumer i goes through proxy i mod n)."""

    def __init__(self, bootstrap, proxies, rng, partitions=2, rate=40, consumers=2, name="share"):
        tag = uuid.uuid4().hex[:6]
        self.bootstrap, self.partitions = bootstrap, partitions
        self.topic, self.dlq, self.group = f"{name}-{tag}", f"{name}-dlq-{tag}", f"{name}-g-{tag}"
        t0 = time.time()
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([confluent_kafka.admin.NewTopic(self.topic, partitions, 1),
                                      confluent_kafka.admin.NewTopic(self.dlq, 1, 1)]).values():
            f.result(60)
        wait_leaders(bootstrap, self.topic, partitions)
        wait_leaders(bootstrap, self.dlq, 1)
        set_group_configs(bootstrap, self.group, {
            "share.auto.offset.reset": "earliest", "share.delivery.count.limit": str(LIMIT),
            "share.record.lock.duration.ms": str(LOCK_MS), "floe.dlq.topic": self.dlq})
        self.log = ShareLog()
        self.stop_event = threading.Event()
        self.load = Load(bootstrap, self.topic, partitions, rate=rate)
        self.workers = []
        for i in range(consumers):
            draw = random.Random(rng.random())
            self.workers.append(Worker(f"{name}{i + 1}", proxies[i % len(proxies)], self.group, self.topic,
                                       self.log, self._policy(draw), self.stop_event))
        for w in self.workers:
            w.start()
        self.drained, self.drain_note, self.drain_s = False, "", 0.0
        self.setup_s = time.time() - t0
        self.stop_s = 0.0

    @staticmethod
    def _policy(draw):
        def choose(d):
            if d.record is not None and d.record[1] % POISON == 7:
                return RELEASE
            x = draw.random()
            return REJECT if x < 0.04 else RELEASE if x < 0.14 else ACCEPT
        return choose

    def confirmed(self):
        with self.log.lock:
            return sum(1 for a in self.log.acks if a[3] == "confirmed")

    def wait_flowing(self, n=20, timeout=60):
        """Waits until `n` acknowledgements are confirmed: the group is under way."""
        deadline = time.time() + timeout
        while self.confirmed() < n:
            assert time.time() < deadline, (f"{self.confirmed()} share acknowledgements confirmed after {timeout}s "
                                            f"(errors {dict(self.log.errors)})")
            time.sleep(0.05)

    def close(self):
        """Stops every client without waiting (a failed run's cleanup)."""
        self.load.stop_event.set()
        self.stop_event.set()

    def stop(self):
        t0 = time.time()
        self.stop_event.set()
        self.load.stop()
        for w in self.workers:
            w.join(60)
            assert not w.is_alive(), f"{w.name} did not stop"
        self.stop_s = time.time() - t0

    def describe(self, floe_bin):
        res = subprocess.run([str(floe_bin), "group", "describe", self.group, "--json", "--bootstrap", self.bootstrap,
                              "--request-timeout-ms", "10000"], capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            return None, res.stderr.strip()[-300:]
        d = json.loads(res.stdout)
        return d, [(p.get("partition"), p.get("start_offset"), p.get("log_end_offset")) for p in d["partitions"]]

    def drain(self, floe_bin, timeout=60):
        """A fresh consumer accepts everything left until every partition's
        start offset is at its log end (or `timeout`)."""
        started = time.time()
        stop = threading.Event()
        drain = Worker(f"{self.workers[0].name[:-1]}-drain", self.bootstrap, self.group, self.topic, self.log,
                       lambda d: ACCEPT, stop)
        drain.start()
        try:
            deadline = started + timeout
            while True:
                time.sleep(0.5)
                d, note = self.describe(floe_bin)
                self.drain_note = f"{note}"
                if d is not None and len(d["partitions"]) == self.partitions and d["total_lag"] == 0:
                    self.drained = True
                    break
                if time.time() >= deadline:
                    break
        finally:
            stop.set()
            drain.join(60)
        self.drain_s = time.time() - started

    def read_dead(self, timeout=60):
        c = confluent_kafka.Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"read-{self.dlq}",
                                      "enable.auto.commit": False})
        tp = confluent_kafka.TopicPartition(self.dlq, 0)
        try:
            _, high = c.get_watermark_offsets(tp, timeout=30, cached=False)
            c.assign([confluent_kafka.TopicPartition(self.dlq, 0, 0)])
            out = []
            deadline = time.monotonic() + timeout
            pos = 0
            while pos < high:
                assert time.monotonic() < deadline, f"dead-letter reader at {pos} of {high} after {timeout}s"
                for m in c.consume(500, 0.5):
                    if m.error() or m.offset() >= high:
                        continue
                    h = {k: (v.decode() if v is not None else None) for k, v in (m.headers() or [])}
                    count = h.get("floe-dlq-delivery-count")
                    out.append(DeadLetter(int(h.get("floe-dlq-partition", -1)), int(h.get("floe-dlq-offset", -1)),
                                          decode(m.value()), h.get("floe-dlq-reason", ""),
                                          int(count) if count else None, m.offset()))
                    pos = m.offset() + 1
            return out
        finally:
            c.close()

    def history(self, log, dead):
        unacked = set()
        for p in self.load.producers:
            got = {w.seq for w in p.acked}
            unacked |= {(p.pid, s) for s in range(p.sent) if s not in got}
        with self.log.lock:
            acks = [Ack(*a) for a in self.log.acks]
            deliveries = list(self.log.deliveries)
        return ShareHistory(acked=self.load.acked, unacked=unacked, log=log, deliveries=deliveries, acks=acks,
                            consumers=dict(self.log.consumers), dead=dead, limit=LIMIT, drained=self.drained,
                            drain_note=self.drain_note)

    def finish(self, floe_bin, tmp_path, name, timeout=60):
        """Drains, reads back and checks: ({kind: count}, operations, report)."""
        self.drain(floe_bin, timeout)
        reads, _ = read_confluent(self.bootstrap, self.topic, self.partitions, timeout)
        log = {(r.partition, r.offset): (r.producer, r.seq) for r in reads}
        dead = self.read_dead(timeout)
        h = self.history(log, dead)
        report = check(h)
        anomalies = {f"share_{k}": len(v) for k, v in report.violations.items()}
        anomalies["share_client_error"] = len(self.load.errors)
        ops = {"share_records": report.records, "share_deliveries": report.deliveries,
               "share_redelivered": report.redelivered, "share_dead_letters": report.dead,
               "share_stale_deliveries": len(report.stale), "share_count_repeats": len(report.count_repeats),
               "share_setup_s": round(self.setup_s, 1),
               "share_stop_s": round(self.stop_s, 1), "share_drain_s": round(self.drain_s, 1)}
        for kind in (ACCEPT, RELEASE, REJECT):
            ops[f"share_{kind.lower()}_confirmed"] = report.acks.get(f"{kind}/confirmed", 0)
        ops["share_acks_unconfirmed"] = sum(n for k, n in report.acks.items() if not k.endswith("/confirmed"))
        if self.log.errors:
            ops["share_client_errors"] = dict(self.log.errors)
        if any(anomalies.values()) or os.environ.get("FLOE_FAULTS_KEEP_SHARE"):
            keep_history(tmp_path, f"{name}-share", {"summary": report.summary(), "violations": report.violations,
                                                     "producer_errors": self.load.errors[:50],
                                                     "history": h.to_json()})
        return anomalies, ops, report
