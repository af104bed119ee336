"""A checker for transactions on a Kafka-like log, and the workload that
makes its histories (issue 41).

A history is what the clients saw:
- every transaction a transactional producer began: its producer, its
  number in that producer, the records it sent (partition and index in the
  transaction) and its outcome as the application knows it: `committed`
  (commit_transaction returned), `aborted` (abort_transaction returned, or
  the producer was fenced or closed before committing) or `unknown` (the
  commit was asked but its answer never came: a fatal error, a timeout);
- what each read_committed reader read, in read order: (partition, offset,
  value). A record's value names its transaction and its index in it
  (`encode`), so a reader's record is tied to one transaction.

`check(history)` returns a `Report` naming every violation of:
- aborted_read: a record of an aborted transaction is visible;
- torn: some but not all of a transaction's records are visible (to one
  reader), whatever its outcome;
- lost: a committed transaction none of whose records is visible;
- duplicate: one record visible at two offsets;
- order: a reader's offsets not strictly increasing in a partition, or one
  transaction's records out of their send order within a partition;
- disagree: two readers see different records at one offset;
- phantom: a record no transaction sent (or one whose value is not ours).

For a consume-transform-produce loop, `check_transform` compares the
group's committed offsets with the outputs: every input below its
partition's committed offset appears once in the output, and no input at
or past it does (read_committed).
"""

from __future__ import annotations

import dataclasses
import json
import random
import threading
import time
from collections import defaultdict

from consistency import Violations

OUTCOMES = ("committed", "aborted", "unknown")


def encode(producer, txn, index):
    return f"x{producer} {txn} {index}".encode()


def decode(value):
    """(producer, txn, index) of a record this workload wrote, or None."""
    try:
        tag, txn, index = value.decode().split(" ")
        if not tag.startswith("x"):
            return None
        return int(tag[1:]), int(txn), int(index)
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None


@dataclasses.dataclass
class Txn:
    producer: int
    txn: int
    records: list  # [(partition, index)] in send order
    outcome: str = "unknown"

    @property
    def key(self):
        return (self.producer, self.txn)


@dataclasses.dataclass(frozen=True, slots=True)
class Read:
    partition: int
    offset: int
    value: bytes


@dataclasses.dataclass
class History:
    txns: list  # [Txn]
    reads: dict = dataclasses.field(default_factory=dict)  # reader -> [Read]

    def to_json(self):
        return {"txns": [dataclasses.asdict(t) for t in self.txns],
                "reads": {r: [[x.partition, x.offset, x.value.decode(errors="replace")] for x in rs]
                          for r, rs in self.reads.items()}}


@dataclasses.dataclass
class Report(Violations):
    violations: dict  # kind -> [message]
    txns: dict  # outcome -> count
    records: dict  # reader -> records read
    unknown_visible: int = 0  # `unknown` transactions that turned out committed

    def summary(self, examples=5):
        lines = [f"transactions {self.txns} (unknown seen committed: {self.unknown_visible}), read {self.records}"]
        for kind, msgs in sorted(self.violations.items()):
            if msgs:
                lines.append(f"{kind}: {len(msgs)}, e.g. " + "; ".join(msgs[:examples]))
        return "\n".join(lines)


KINDS = ("aborted_read", "torn", "lost", "duplicate", "order", "disagree", "phantom")


def check(history: History) -> Report:
    v = {k: [] for k in KINDS}
    txns = {t.key: t for t in history.txns}
    unknown_seen = set()
    per_reader_offsets = {}
    for reader, reads in history.reads.items():
        seen = defaultdict(list)  # (producer, txn) -> [(partition, offset, index)]
        where = {}  # (producer, txn, index) -> (partition, offset)
        last = {}
        at = {}
        for r in reads:
            if r.partition in last and r.offset <= last[r.partition]:
                v["order"].append(f"{reader}: partition {r.partition} offset {r.offset} after {last[r.partition]}")
            last[r.partition] = r.offset
            at[(r.partition, r.offset)] = r.value
            d = decode(r.value)
            t = txns.get(d[:2]) if d else None
            if t is None or not any(idx == d[2] and p == r.partition for p, idx in t.records):
                v["phantom"].append(f"{reader}: {r.value!r} at {r.partition}/{r.offset}")
                continue
            rec = (d[0], d[1], d[2])
            if rec in where:
                v["duplicate"].append(f"{reader}: txn {d[0]}/{d[1]} record {d[2]} at "
                                      f"{where[rec][0]}/{where[rec][1]} and {r.partition}/{r.offset}")
                continue
            where[rec] = (r.partition, r.offset)
            seen[t.key].append((r.partition, r.offset, d[2]))
        per_reader_offsets[reader] = at
        for key, t in txns.items():
            got = seen.get(key, [])
            name = f"txn {key[0]}/{key[1]} ({t.outcome}, {len(t.records)} records)"
            if t.outcome == "aborted" and got:
                v["aborted_read"].append(f"{reader}: {name}: {len(got)} records visible, first at "
                                         f"{got[0][0]}/{got[0][1]}")
                continue
            if got and len(got) != len(t.records):
                missing = sorted(set(idx for _, idx in t.records) - {i for _, _, i in got})
                v["torn"].append(f"{reader}: {name}: {len(got)} of {len(t.records)} visible, "
                                 f"missing records {missing[:5]}")
            elif not got and t.outcome == "committed" and t.records:
                v["lost"].append(f"{reader}: {name}: none visible")
            elif got and t.outcome == "unknown":
                unknown_seen.add(key)
            by_part = defaultdict(list)
            for p, off, idx in got:
                by_part[p].append((off, idx))
            for p, xs in by_part.items():
                idxs = [i for _, i in sorted(xs)]
                if idxs != sorted(idxs):
                    v["order"].append(f"{reader}: {name}: records out of send order in partition {p}: {idxs[:8]}")
    readers = list(per_reader_offsets)
    for other in readers[1:]:
        a, b = per_reader_offsets[readers[0]], per_reader_offsets[other]
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                v["disagree"].append(f"{readers[0]} / {other} at {k[0]}/{k[1]}: {a.get(k)!r} / {b.get(k)!r}")
    outcomes = {o: sum(1 for t in history.txns if t.outcome == o) for o in OUTCOMES}
    return Report(violations=v, txns=outcomes, records={r: len(x) for r, x in history.reads.items()},
                  unknown_visible=len(unknown_seen))


def check_transform(committed, inputs, outputs):
    """A consume-transform-produce loop's result: `committed` {partition:
    the group's committed offset}, `inputs` [(partition, offset, value)] of
    the source, `outputs` [(partition, value)] read_committed from the
    destination, where an output is its input's value transformed
    (upper-cased). Returns {kind: [message]} for `missing` (an input below
    the committed offset with no output), `duplicate` (an output twice) and
    `ahead` (an output of an input at or past the committed offset, or of
    nothing)."""
    v = {"missing": [], "duplicate": [], "ahead": []}
    want = defaultdict(int)
    beyond = set()
    for p, off, value in inputs:
        if off < committed.get(p, 0):
            want[(p, value.upper())] += 1
        else:
            beyond.add((p, value.upper()))
    got = defaultdict(int)
    for p, value in outputs:
        got[(p, value)] += 1
    for k, n in sorted(want.items()):
        if got.get(k, 0) < n:
            v["missing"].append(f"partition {k[0]} {k[1]!r}: {got.get(k, 0)} of {n}")
    for k, n in sorted(got.items()):
        if k in want and n > want[k]:
            v["duplicate"].append(f"partition {k[0]} {k[1]!r}: {n} times")
        elif k not in want:
            v["ahead"].append(f"partition {k[0]} {k[1]!r}: " + ("past the committed offset" if k in beyond
                                                                else "no such input"))
    return v


# ------------------------------------------------------------------ the workload


class TxnProducer(threading.Thread):
    """One transactional producer (confluent-kafka, `transactional.id`)
    running transactions of 1..`max_records` records over the partitions of
    `topic` until `stop` is set; each one is committed or, with
    probability `abort`, aborted. Retriable commit errors are retried;
    abortable ones abort; a fatal one (or a commit that never answers)
    leaves the transaction `unknown` and starts a new producer with the same
    transactional id (which fences the old one and completes or aborts its
    open transaction)."""

    def __init__(self, pid, bootstrap, topic, partitions, stop, rng, abort=0.3, max_records=8, pace=0.02,
                 timeout=60, **conf):
        super().__init__(name=f"txn-producer-{pid}", daemon=True)
        self.pid, self.bootstrap, self.topic, self.partitions = pid, bootstrap, topic, partitions
        self.stop_event, self.rng, self.abort, self.max_records = stop, rng, abort, max_records
        self.pace, self.timeout, self.conf = pace, timeout, conf
        self.txns = []
        self.errors = []  # what the application saw, as text (retriable ones included)
        self.restarts = 0

    def _producer(self):
        import confluent_kafka

        p = confluent_kafka.Producer({"bootstrap.servers": self.bootstrap,
                                      "transactional.id": f"txn-check-{self.pid}",
                                      "linger.ms": 5, "transaction.timeout.ms": 60000,
                                      "message.timeout.ms": 60000, **self.conf})
        deadline = time.time() + 120
        while True:
            try:
                p.init_transactions(self.timeout)
                return p
            except confluent_kafka.KafkaException as e:
                self.errors.append(f"init: {e}")
                if time.time() > deadline or not e.args[0].retriable():
                    raise
                time.sleep(0.5)

    def run(self):
        import confluent_kafka

        p = self._producer()
        n = 0
        while not self.stop_event.is_set():
            t = Txn(self.pid, n, [])
            n += 1
            self.txns.append(t)
            try:
                p.begin_transaction()
                for i in range(self.rng.randint(1, self.max_records)):
                    part = self.rng.randrange(self.partitions)
                    while True:
                        try:
                            p.produce(self.topic, value=encode(self.pid, t.txn, i), partition=part)
                            break
                        except BufferError:
                            p.poll(0.05)
                    t.records.append((part, i))
                if self.rng.random() < self.abort:
                    self._abort(p, t)
                else:
                    self._commit(p, t)
            except confluent_kafka.KafkaException as e:
                err = e.args[0]
                self.errors.append(f"txn {t.txn}: {err}")
                if err.txn_requires_abort():
                    try:
                        self._abort(p, t)
                        continue
                    except confluent_kafka.KafkaException as e2:
                        self.errors.append(f"txn {t.txn} abort: {e2}")
                # Fatal, or an abort that failed. A commit asked and not
                # answered may have been decided: its outcome is known only
                # from what readers see (all or none). One never asked is
                # aborted by the new instance, which fences this one.
                if t.outcome != "committed":
                    t.outcome = "unknown" if t.outcome == "commit asked" else "aborted"
                self.restarts += 1
                p = self._producer()
            time.sleep(self.pace)
        # A transaction left open by the stop (none: each one ends above).
        p.flush(30)

    def _commit(self, p, t):
        t.outcome = "commit asked"
        self._retried(t, "commit", lambda: p.commit_transaction(self.timeout))
        t.outcome = "committed"

    def _abort(self, p, t):
        self._retried(t, "abort", lambda: p.abort_transaction(self.timeout))
        t.outcome = "aborted"

    def _retried(self, t, what, call):
        """`call()` until it succeeds, again after each retriable error
        (noted) until the timeout; any other error is raised."""
        import confluent_kafka

        deadline = time.time() + self.timeout
        while True:
            try:
                return call()
            except confluent_kafka.KafkaException as e:
                err = e.args[0]
                if err.retriable() and time.time() < deadline:
                    self.errors.append(f"txn {t.txn} {what} (retried): {err}")
                    time.sleep(0.2)
                    continue
                raise


class TxnLoad:
    """`producers` TxnProducers on `topic`, started at once; `stop()` ends
    them. `history(reads)` is their History; a commit still unanswered
    counts as `unknown` (all or none)."""

    _next_pid = 1000

    def __init__(self, bootstrap, topic, partitions, rng, producers=2, **kw):
        self.stop_event = threading.Event()
        self.producers = []
        for _ in range(producers):
            TxnLoad._next_pid += 1
            self.producers.append(TxnProducer(TxnLoad._next_pid, bootstrap, topic, partitions, self.stop_event,
                                              random.Random(rng.random()), **kw))
        for p in self.producers:
            p.start()

    @property
    def txns(self):
        return [t for p in self.producers for t in p.txns]

    def committed_count(self):
        return sum(1 for t in self.txns if t.outcome == "committed")

    def wait_committed(self, n, timeout=120):
        target = self.committed_count() + n
        deadline = time.time() + timeout
        while self.committed_count() < target:
            assert all(p.is_alive() for p in self.producers), self.errors()[-5:]
            assert time.time() < deadline, (f"{self.committed_count()} of {target} transactions committed "
                                            f"after {timeout}s; errors {self.errors()[-5:]}")
            time.sleep(0.1)

    def errors(self):
        return [e for p in self.producers for e in p.errors]

    def stop(self, timeout=180):
        self.stop_event.set()
        for p in self.producers:
            p.join(timeout)
            assert not p.is_alive(), f"transactional producer {p.pid} did not finish in {timeout}s"

    def history(self, reads):
        txns = []
        for t in self.txns:
            outcome = t.outcome if t.outcome in OUTCOMES else "unknown"
            txns.append(Txn(t.producer, t.txn, list(t.records), outcome))
        return History(txns=txns, reads=reads)


def read_committed_all(bootstrap, topic, partitions, timeout=120, group="txn-checker"):
    """Every record a read_committed confluent-kafka consumer sees from the
    start of each partition up to its last stable offset, in read order."""
    import confluent_kafka

    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        from s3_cluster import high_watermarks
        deadline = time.monotonic() + timeout
        ends = high_watermarks(c, topic, partitions, deadline)
        c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                  for p in range(partitions)])
        out, done = [], {p for p in ends if ends[p] == 0}
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"read_committed reader: {len(done)} of {partitions} " \
                                                f"partitions read to their end after {timeout}s"
            for m in c.consume(num_messages=2000, timeout=0.5):
                if m.error():
                    if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF \
                            and m.offset() >= ends[m.partition()]:
                        done.add(m.partition())
                    continue
                out.append(Read(m.partition(), m.offset(), m.value()))
        return out
    finally:
        c.close()


def read_committed_kafka_python(bootstrap, topic, partitions, timeout=120):
    """The same with kafka-python (a second client sharing no code)."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", isolation_level="read_committed",
                      request_timeout_ms=30000)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning()
        ends = c.end_offsets(tps)  # the last stable offsets at read_committed
        out = []
        deadline = time.monotonic() + timeout
        while any(c.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "kafka-python read_committed reader: not at the end " \
                                                f"after {timeout}s"
            for tp, records in c.poll(timeout_ms=500, max_records=2000).items():
                out += [Read(tp.partition, r.offset, r.value) for r in records]
        return out
    finally:
        c.close()


def dump(path, history, report):
    """Writes a history and its report as JSON (kept for a failed run)."""
    with open(path, "w") as f:
        json.dump({"history": history.to_json(), "violations": report.violations, "txns": report.txns}, f)
