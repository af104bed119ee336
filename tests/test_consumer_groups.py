"""Consumer groups (the classic protocol) with real clients against `floe standalone`:
a confluent-kafka group of three members through a clean leave and a join while
messages stream in (cooperative-sticky and range); kafka-python, kcat, aiokafka
and kafkajs subscribed in groups; committed offsets used by the next consumer of
the group, whichever client it is, and kept across a restart of Floe;
`auto.offset.reset` latest / error for a group without offsets; static members;
the admin calls on groups (list, describe, offsets, delete)."""

import asyncio
import itertools
import json
import pathlib
import shutil
import socket
import struct
import subprocess
import threading
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import (  # noqa: E402
    OFFSET_INVALID, Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException,
    Producer, TopicPartition)
from confluent_kafka.admin import AdminClient  # noqa: E402

pytestmark = [pytest.mark.timeout(120),
              # kafka-python 3.0 reads its protocol schemas through a deprecated importlib API
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

JS_DIR = pathlib.Path(__file__).resolve().parent / "js"


@pytest.fixture
def floe(standalone_factory):
    """A standalone whose first rebalance of a new group waits 300 ms, not 3 s, with
    its group coordinators up."""
    s = standalone_factory(group_initial_rebalance_delay_ms=300)
    wait_for_coordinators(s)
    return s


# ---------------------------------------------------------------- helpers

def wait_for(what, predicate, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def produce(bootstrap, topic, start, count, **conf):
    """Produces values b"<i>" (keys b"k<i>", spread over the partitions) for i in
    [start, start + count) with acks=all; returns {i: (partition, offset)}."""
    config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000}
    config.update(conf)
    p = Producer(config)
    where, errors = {}, []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            where[int(msg.value())] = (msg.partition(), msg.offset())

    for i in range(start, start + count):
        while True:
            try:
                p.produce(topic, key=b"k%d" % i, value=b"%d" % i, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0, "messages still undelivered after 60 s"
    assert not errors, f"{len(errors)} deliveries failed, first: {errors[:3]}"
    assert len(where) == count
    return where


def high_watermarks(bootstrap, topic, partitions):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "floe-tests-watermarks"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(partitions)}
    finally:
        c.close()


def group_consumer(bootstrap, group, **extra):
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": 60000, "topic.metadata.refresh.interval.ms": 5000}
    conf.update(extra)
    return Consumer(conf)


def admin_client(floe):
    # An admin client referenced by a failed test's traceback outlives its standalone:
    # its connection errors (level 3) would fill the rest of the session's output.
    return AdminClient({"bootstrap.servers": floe.bootstrap, "log_level": 2})


def find_coordinator_error(floe, group):
    """The error code of FindCoordinator (v1) for `group`, asked on a plain socket."""
    def string(text):
        data = text.encode()
        return struct.pack(">h", len(data)) + data

    body = struct.pack(">hhi", 10, 1, 1) + string("floe-tests") + string(group) + b"\x00"
    with socket.create_connection(("127.0.0.1", floe.kafka_port), timeout=10) as sock, \
            sock.makefile("rb") as reader:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size, = struct.unpack(">i", reader.read(4))
        answer = reader.read(size)
    assert len(answer) == size, "FindCoordinator: short answer"
    correlation, _throttle, error = struct.unpack(">iih", answer[:10])
    assert correlation == 1
    return error


def wait_for_coordinators(floe, timeout=30):
    """For about half a second after /readyz (and after a restart), FindCoordinator
    answers COORDINATOR_NOT_AVAILABLE (15, "the group's coordinator shard has no owner
    right now"). Consumers retry until there is one, but librdkafka's admin calls retry
    twice and then wait out their whole timeout: wait until a group has a coordinator."""
    deadline = time.monotonic() + timeout
    while (error := find_coordinator_error(floe, "floe-tests-probe")) != 0:
        assert error == 15, f"FindCoordinator answered error {error}"
        assert time.monotonic() < deadline, f"no group coordinator {timeout}s after start"
        time.sleep(0.05)


def committed_offsets(admin, group, timeout=30):
    """{(topic, partition): (offset, metadata)} committed by the group, from the admin API."""
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)
    result = futures[group].result(timeout=timeout)
    out = {}
    for tp in result.topic_partitions:
        assert tp.error is None, f"offset of {tp.topic}/{tp.partition} in {group}: {tp.error}"
        if tp.offset != OFFSET_INVALID:
            out[(tp.topic, tp.partition)] = (tp.offset, tp.metadata)
    return out


def kafka_python_committed(floe, group):
    """{(topic, partition): (offset, metadata)} from kafka-python's admin client.

    Metadata committed by another client than librdkafka is checked here:
    confluent-kafka hands the metadata librdkafka read to Python as a
    NUL-terminated C string, and librdkafka's own commits end it with a NUL, but
    another client's do not, so what confluent-kafka shows for them runs on into
    whatever follows in memory."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=floe.bootstrap, request_timeout_ms=30000)
    try:
        offsets = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    return {(tp.topic, tp.partition): (om.offset, om.metadata) for tp, om in offsets.items()}


def describe(admin, group, timeout=30):
    return admin.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout=timeout)


def listed_groups(admin, timeout=30):
    """{group id: state} from ListGroups."""
    result = admin.list_consumer_groups(request_timeout=timeout).result(timeout=timeout)
    assert not result.errors, result.errors
    return {g.group_id: g.state for g in result.valid}


def run_bounded(args, timeout):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- 1. a confluent group through a leave and a join

class Member(threading.Thread):
    """One confluent-kafka consumer of the group in its own thread: consumes,
    'processes' (records the value), commits the batch's offsets synchronously
    and records whether the commit succeeded; assignment changes go to the
    shared event log."""

    seq = itertools.count()  # global order of processings and events (next() is atomic under the GIL)

    def __init__(self, name, bootstrap, topic, group, strategy, log, seen, lock, **extra):
        super().__init__(name=f"member-{name}", daemon=True)
        self.extra = extra
        self.label, self.bootstrap, self.topic, self.group, self.strategy = name, bootstrap, topic, group, strategy
        self.log, self.seen, self.lock = log, seen, lock
        self.stopping = threading.Event()
        self.owned = set()
        self.processed = []     # (seq, value, batch number)
        self.batch_ok = []      # per batch: did its commit succeed
        self.commit_errors = []
        self.errors = []
        self.failure = None

    def event(self, kind, partitions):
        parts = sorted(tp.partition for tp in partitions)
        with self.lock:
            if kind == "assign":
                self.owned |= set(parts)
            else:
                self.owned -= set(parts)
            self.log.append((next(Member.seq), self.label, kind, parts))

    def owned_now(self):
        with self.lock:
            return set(self.owned)

    def run(self):
        try:
            c = group_consumer(self.bootstrap, self.group, **{"client.id": self.label,
                                                              "partition.assignment.strategy": self.strategy,
                                                              **self.extra})
            try:
                c.subscribe([self.topic], on_assign=lambda _, ps: self.event("assign", ps),
                            on_revoke=lambda _, ps: self.event("revoke", ps),
                            on_lost=lambda _, ps: self.event("lost", ps))
                while not self.stopping.is_set():
                    batch = []
                    for m in c.consume(num_messages=300, timeout=0.2):
                        if m.error():
                            self.errors.append(m.error())
                        else:
                            batch.append(m)
                    if not batch:
                        continue
                    n = len(self.batch_ok)
                    ends = {}
                    for m in batch:
                        self.processed.append((next(Member.seq), int(m.value()), n))
                        ends[m.partition()] = max(ends.get(m.partition(), -1), m.offset() + 1)
                    with self.lock:
                        self.seen.update(int(m.value()) for m in batch)
                    ok = True
                    try:
                        answer = c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in ends.items()],
                                          asynchronous=False)
                        bad = [tp for tp in answer if tp.error is not None]
                        if bad:
                            ok = False
                            self.commit_errors.append([(tp.partition, str(tp.error)) for tp in bad])
                    except KafkaException as e:
                        ok = False
                        self.commit_errors.append(str(e))
                    self.batch_ok.append(ok)
            finally:
                c.close()  # revokes; a dynamic member sends LeaveGroup, a static one does not
                with self.lock:
                    self.log.append((next(Member.seq), self.label, "closed", []))
        except Exception as e:  # reported by the test
            self.failure = e

    def stop(self, timeout=30):
        self.stopping.set()
        self.join(timeout)
        assert not self.is_alive(), f"{self.label} did not close within {timeout}s"
        assert self.failure is None, f"{self.label} failed: {self.failure!r}"


@pytest.mark.timeout(150)
@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_confluent_group_of_three_through_a_leave_and_a_join_processes_everything(floe, kit, strategy):
    topic, group, total, partitions = f"stream-{strategy}", f"g-{strategy}", 30_000, 6
    kit.create_topic(floe.bootstrap, topic, partitions=partitions)
    log, seen, lock = [], set(), threading.Lock()
    members = {}

    def start(name):
        members[name] = Member(name, floe.bootstrap, topic, group, strategy, log, seen, lock)
        members[name].start()

    def owners(names):
        """The members' assignments when they are disjoint and cover every partition."""
        owned = {n: members[n].owned_now() for n in names}
        every = [p for ps in owned.values() for p in ps]
        return owned if sorted(every) == list(range(partitions)) else None

    def distinct():
        with lock:
            return len(seen)

    producer_errors, stop_producing = [], threading.Event()

    def producer():
        try:
            for start_i in range(0, total, 1000):  # ~2,000 a second: the stream outlasts both rebalances
                if stop_producing.is_set():
                    return
                produce(floe.bootstrap, topic, start_i, 1000)
                time.sleep(0.3)
        except Exception as e:
            producer_errors.append(e)

    try:
        for name in "ABC":
            start(name)
        wait_for("A, B and C to share the 6 partitions", lambda: owners("ABC") and all(owners("ABC").values()), 30)
        feeder = threading.Thread(target=producer, name="producer", daemon=True)
        feeder.start()

        wait_for("7,000 messages processed", lambda: distinct() >= 7000, 60)
        leave_seq = next(Member.seq)
        members["C"].stop()
        wait_for("A and B to own the 6 partitions after C left", lambda: owners("AB"), 30)

        wait_for("16,000 messages processed", lambda: distinct() >= 16000, 60)
        before_join = {n: members[n].owned_now() for n in "AB"}
        join_seq = next(Member.seq)
        start("D")
        final = wait_for("A, B and D to share the 6 partitions", lambda: (o := owners("ABD")) and all(o.values()) and o,
                         45)
        wait_for(f"all {total} messages processed", lambda: distinct() >= total, 60)
        feeder.join(60)
        assert not feeder.is_alive() and not producer_errors, f"producer: {producer_errors}"
        time.sleep(1)  # anything processed twice late shows up
        stop_seq = next(Member.seq)
        for n in "ABD":
            members[n].stop()
    finally:
        stop_producing.set()
        for m in members.values():
            m.stopping.set()
        for m in members.values():
            m.join(30)

    for m in members.values():
        assert m.failure is None, f"{m.label} failed: {m.failure!r}"
        assert not m.errors, f"{m.label} got consume errors: {m.errors[:5]}"

    # Every message processed at least once.
    processings = sorted((seq, v, m.label, m.batch_ok[b]) for m in members.values() for seq, v, b in m.processed)
    values = {v for _, v, _, _ in processings}
    missing = sorted(set(range(total)) - values)
    assert not missing, f"{len(missing)} messages never processed, first {missing[:10]}"

    # A message is processed again only when an earlier processing of it was not
    # committed (its batch's commit failed): committed work is never handed out twice.
    by_value = {}
    for seq, v, who, ok in processings:
        by_value.setdefault(v, []).append((who, ok))
    duplicates = {v: occ for v, occ in by_value.items() if len(occ) > 1}
    uncommitted = sum(1 for m in members.values() for _, _, b in m.processed if not m.batch_ok[b])
    wrongly = {v: occ for v, occ in duplicates.items() if any(ok for _, ok in occ[:-1])}
    commit_errors = {m.label: m.commit_errors[:3] for m in members.values() if m.commit_errors}
    assert not wrongly, (f"{len(wrongly)} messages processed again after a successful commit, e.g. "
                         f"{list(wrongly.items())[:5]}; commit errors {commit_errors}")
    assert len(duplicates) <= uncommitted, (len(duplicates), uncommitted)
    # The member that left cleanly committed all it processed: nothing of it is redone.
    redone_from_c = [v for v, occ in duplicates.items() if occ[0][0] == "C"]
    assert len(redone_from_c) <= sum(1 for _, _, b in members["C"].processed if not members["C"].batch_ok[b])

    # The group's committed offsets are the end of every partition.
    admin = admin_client(floe)
    ends = high_watermarks(floe.bootstrap, topic, partitions)
    assert sum(ends.values()) == total
    committed = committed_offsets(admin, group)
    assert {p: committed.get((topic, p), (None,))[0] for p in range(partitions)} == ends, commit_errors

    # Assignments: the final one covers every partition once (checked by `owners`);
    # with cooperative-sticky, partitions that did not have to move stayed put.
    assert all(final.values()), final
    if strategy == "cooperative-sticky":
        leave_window = [e for e in log if leave_seq < e[0] < join_seq and e[1] in "AB"]
        assert not [e for e in leave_window if e[2] != "assign"], \
            f"A or B lost partitions when C left (only C's should move): {leave_window}"
        join_window = [e for e in log if join_seq < e[0] < stop_seq and e[1] in "AB" and e[2] in ("revoke", "lost")]
        for n in "AB":
            taken = {p for _, who, _, ps in join_window if who == n for p in ps}
            kept = before_join[n] - taken
            assert kept, f"{n} owned {sorted(before_join[n])} before D joined and lost all of them: {join_window}"
            assert kept <= final[n], (n, kept, final)
        assert final["D"], "D got partitions"


# ---------------------------------------------------------------- 2. every client in a group reads a whole topic

@pytest.fixture
def three_partitions_of_2000(floe, kit):
    topic = "shared-2000"
    kit.create_topic(floe.bootstrap, topic, partitions=3)
    where = produce(floe.bootstrap, topic, 0, 2000)
    assert {p for p, _ in where.values()} == {0, 1, 2}
    return topic, {(p, o): b"%d" % i for i, (p, o) in where.items()}


def assert_read_all_once(got, want, who):
    """got: [(partition, offset, value)] in the order received."""
    keys = [(p, o) for p, o, _ in got]
    assert len(keys) == len(set(keys)), f"{who}: {len(keys) - len(set(keys))} records read twice"
    missing = sorted(set(want) - set(keys))
    assert not missing, f"{who}: {len(missing)} of {len(want)} records not read, first {missing[:5]}"
    wrong = [(p, o, v) for p, o, v in got if want.get((p, o)) != v]
    assert not wrong, f"{who}: records differ from what was produced: {wrong[:5]}"
    for part in {p for p, _ in keys}:
        offsets = [o for p, o in keys if p == part]
        assert offsets == sorted(offsets), f"{who}: partition {part} read out of order"


def assert_committed_ends(admin, group, topic, want):
    ends = {}
    for p, o in want:
        ends[p] = max(ends.get(p, 0), o + 1)
    committed = committed_offsets(admin, group)
    assert {p: committed.get((topic, p), (None,))[0] for p in ends} == ends, f"{group} committed {committed}"


def test_kafka_python_subscribed_consumer_reads_a_topic_and_commits(floe, three_partitions_of_2000):
    from kafka import KafkaConsumer

    topic, want = three_partitions_of_2000
    consumer = KafkaConsumer(topic, bootstrap_servers=floe.bootstrap, group_id="kafka-python-group",
                             enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=10000,
                             heartbeat_interval_ms=1000, request_timeout_ms=30000)
    got = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < len(want) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((r.partition, r.offset, r.value) for r in records)
        assert {tp.partition for tp in consumer.assignment()} == {0, 1, 2}
        consumer.commit()
        # One more poll: nothing is read twice.
        for records in consumer.poll(timeout_ms=1000).values():
            got.extend((r.partition, r.offset, r.value) for r in records)
    finally:
        consumer.close()
    assert_read_all_once(got, want, "kafka-python")
    assert_committed_ends(admin_client(floe), "kafka-python-group", topic, want)


def test_kcat_balanced_consumer_reads_a_topic_and_commits(floe, three_partitions_of_2000):
    topic, want = three_partitions_of_2000
    exe = shutil.which("kcat")
    if exe is None:
        pytest.fail("kcat is not installed: tests/run.sh installs it (apt-get install kcat)")
    res = run_bounded([exe, "-b", floe.bootstrap, "-G", "kcat-group", "-X", "auto.offset.reset=earliest",
                       "-X", "session.timeout.ms=10000", "-X", "heartbeat.interval.ms=500",
                       "-e", "-q", "-f", "%p %o %s\n", topic], timeout=90)
    assert res.returncode == 0, f"kcat -G exited {res.returncode}: {res.stderr[-3000:]}"
    got = []
    for line in res.stdout.splitlines():
        p, o, v = line.split(" ", 2)
        got.append((int(p), int(o), v.encode()))
    assert_read_all_once(got, want, "kcat -G")
    # kcat leaves auto commit on: the offsets it stored are committed when it closes.
    assert_committed_ends(admin_client(floe), "kcat-group", topic, want)


def test_aiokafka_subscribed_consumer_reads_a_topic_and_commits(floe, three_partitions_of_2000):
    from aiokafka import AIOKafkaConsumer

    topic, want = three_partitions_of_2000

    async def run():
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=floe.bootstrap, group_id="aiokafka-group",
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    session_timeout_ms=10000, heartbeat_interval_ms=1000, request_timeout_ms=30000)
        await consumer.start()
        got = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < len(want) and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend((r.partition, r.offset, r.value) for r in records)
            assert {tp.partition for tp in consumer.assignment()} == {0, 1, 2}
            await consumer.commit()
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                got.extend((r.partition, r.offset, r.value) for r in records)
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(asyncio.wait_for(run(), 100))
    assert_read_all_once(got, want, "aiokafka")
    assert_committed_ends(admin_client(floe), "aiokafka-group", topic, want)


def node_script(*args, timeout):
    if shutil.which("node") is None:
        pytest.fail("node is not installed")
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.fail("kafkajs is not installed: tests/run.sh runs `npm ci` in tests/js")
    return run_bounded(["node", str(JS_DIR / "kafkajs_client.js"), *args], timeout=timeout)


def test_kafkajs_group_reads_a_topic_commits_and_resumes(floe, three_partitions_of_2000):
    topic, want = three_partitions_of_2000
    res = node_script("group", floe.bootstrap, topic, str(len(want)), "40", "kafkajs-group", timeout=100)
    assert res.returncode == 0, f"kafkajs group exited {res.returncode}: {res.stderr[-3000:]}"
    got = [(p, o, v.encode()) for p, o, _, v, _ in json.loads(res.stdout.strip().splitlines()[-1])["messages"]]
    assert_read_all_once(got, want, "kafkajs")
    admin = admin_client(floe)
    assert_committed_ends(admin, "kafkajs-group", topic, want)

    # The same group again: only what was produced since.
    more = produce(floe.bootstrap, topic, 2000, 150)
    res = node_script("group", floe.bootstrap, topic, "150", "40", "kafkajs-group", timeout=100)
    assert res.returncode == 0, f"kafkajs group (second run) exited {res.returncode}: {res.stderr[-3000:]}"
    got = [(p, o, v.encode()) for p, o, _, v, _ in json.loads(res.stdout.strip().splitlines()[-1])["messages"]]
    assert_read_all_once(got, {(p, o): b"%d" % i for i, (p, o) in more.items()}, "kafkajs, second run")


# ---------------------------------------------------------------- 3. committed offsets: the next consumer, a restart

def test_hundreds_of_asynchronous_commits_land_in_the_order_sent(floe, kit):
    """confluent-kafka commits 500 offsets asynchronously, one after the other, all in
    flight at once on its coordinator connection: the committed offset is the last one
    sent, as Kafka promises for one connection (librdkafka's 0030_offset_commit saw it
    go back by one when the commits' effects raced)."""
    topic, group, count = "async-commits", "async-commits-group", 500
    kit.create_topic(floe.bootstrap, topic, partitions=1)
    produce(floe.bootstrap, topic, 0, 10)
    answered, errors = [], []

    def on_commit(err, partitions):
        if err is not None:
            errors.append(err)
        answered.extend(tp.offset for tp in partitions)

    c = group_consumer(floe.bootstrap, group, on_commit=on_commit)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        # The first commit finds the coordinator; the rest follow it at once.
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        for offset in range(2, count + 1):
            c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=True)
        wait_for("every commit answered", lambda: c.poll(0.1) is None and len(answered) >= count - 1, 60)
        assert not errors, errors[:5]
        assert sorted(answered) == list(range(2, count + 1))
        fetched = c.committed([TopicPartition(topic, 0)], timeout=20)
        assert fetched[0].offset == count, f"committed {fetched[0].offset}, the last commit sent was {count}"
    finally:
        c.close()
    assert committed_offsets(admin_client(floe), group)[(topic, 0)][0] == count


def test_committed_offsets_resume_the_group_across_clients_and_a_restart(floe, kit):
    """confluent-kafka reads about a third of each partition and commits; kafka-python,
    in the same group, starts exactly there and reads another third; Floe restarts;
    aiokafka starts exactly where kafka-python committed and reads the rest."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition
    from kafka.structs import OffsetAndMetadata

    topic, group, partitions = "resume", "resume-group", 3
    kit.create_topic(floe.bootstrap, topic, partitions=partitions)
    where = produce(floe.bootstrap, topic, 0, 3000)
    value_at = {(p, o): b"%d" % i for i, (p, o) in where.items()}
    ends = high_watermarks(floe.bootstrap, topic, partitions)
    admin = admin_client(floe)

    # Phase 1: confluent-kafka reads about a third of each partition (a partition is
    # paused once past its third), committing synchronously after each batch.
    seen1, committed1, paused = [], {}, set()
    c = group_consumer(floe.bootstrap, group)
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(paused) < partitions:
            assert time.monotonic() < deadline, f"phase 1 read {len(seen1)} in 60 s"
            batch = [m for m in c.consume(num_messages=100, timeout=0.5) if not m.error()]
            if not batch:
                continue
            seen1.extend((m.partition(), m.offset(), m.value()) for m in batch)
            for m in batch:
                committed1[m.partition()] = m.offset() + 1
            answer = c.commit(offsets=[TopicPartition(topic, p, o, "phase-1") for p, o in committed1.items()],
                              asynchronous=False)
            assert all(tp.error is None for tp in answer), answer
            full = {p for p, o in committed1.items() if o >= ends[p] // 3} - paused
            if full:
                c.pause([TopicPartition(topic, p) for p in full])
                paused |= full
        # OffsetFetch from the member itself.
        fetched = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)
        assert {tp.partition: tp.offset for tp in fetched if tp.offset >= 0} == committed1
    finally:
        c.close()
    assert len(committed1) == partitions, f"phase 1 read from partitions {sorted(committed1)} only"
    assert committed_offsets(admin, group) == {(topic, p): (o, "phase-1") for p, o in committed1.items()}

    # Phase 2: kafka-python in the same group starts at those offsets and reads up to
    # about two thirds of each partition.
    seen2, committed2, paused = [], {}, set()
    consumer = KafkaConsumer(topic, bootstrap_servers=floe.bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=10000, heartbeat_interval_ms=1000,
                             request_timeout_ms=30000, max_poll_records=100)
    try:
        deadline = time.monotonic() + 60
        while len(paused) < partitions:
            assert time.monotonic() < deadline, f"phase 2 read {len(seen2)} in 60 s"
            batch = [r for records in consumer.poll(timeout_ms=500).values() for r in records]
            if not batch:
                continue
            seen2.extend((r.partition, r.offset, r.value) for r in batch)
            for r in batch:
                committed2[r.partition] = r.offset + 1
            consumer.commit({KpTopicPartition(topic, p): OffsetAndMetadata(o, "phase-2", -1)
                             for p, o in committed2.items()})
            full = {p for p, o in committed2.items() if o >= 2 * ends[p] // 3} - paused
            if full:
                consumer.pause(*[KpTopicPartition(topic, p) for p in full])
                paused |= full
    finally:
        consumer.close(autocommit=False)
    expected = {(topic, p): (committed2[p], "phase-2") for p in range(partitions)}
    assert kafka_python_committed(floe, group) == expected

    floe.terminate()
    floe.restart()
    wait_for_coordinators(floe)
    assert kafka_python_committed(floe, group) == expected, "committed offsets after a restart"
    # A new admin client: librdkafka's admin calls may wait out their whole
    # timeout on a connection that was cut by the restart.
    admin = admin_client(floe)

    # Phase 3: aiokafka starts where kafka-python committed and reads the rest.
    async def phase3():
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=floe.bootstrap, group_id=group,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    session_timeout_ms=10000, heartbeat_interval_ms=1000, request_timeout_ms=30000)
        await consumer.start()
        got = []
        try:
            deadline = time.monotonic() + 60
            rest = sum(ends.values()) - sum(committed2.values())
            while len(got) < rest and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend((r.partition, r.offset, r.value) for r in records)
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                got.extend((r.partition, r.offset, r.value) for r in records)
            await consumer.commit({AioTopicPartition(topic, p): o for p, o in ends.items()})
        finally:
            await consumer.stop()
        return got

    seen3 = asyncio.run(asyncio.wait_for(phase3(), 90))

    for phase, seen, start, stop in [(1, seen1, {p: 0 for p in range(partitions)}, committed1),
                                     (2, seen2, committed1, committed2), (3, seen3, committed2, ends)]:
        for p in range(partitions):
            offsets = [o for q, o, _ in seen if q == p]
            assert offsets == list(range(start[p], stop[p])), (
                f"phase {phase}, partition {p}: read offsets {offsets[:3]}..{offsets[-3:]} ({len(offsets)}), "
                f"expected [{start[p]}, {stop[p]})")
        wrong = [(p, o) for p, o, v in seen if value_at[(p, o)] != v]
        assert not wrong, f"phase {phase}: values differ at {wrong[:5]}"
    assert {k: o for k, (o, _) in committed_offsets(admin, group).items()} == {(topic, p): o for p, o in ends.items()}


def test_a_subscribed_member_keeps_consuming_through_a_restart_of_floe(floe, kit):
    topic, group = "through-restart", "through-restart-group"
    kit.create_topic(floe.bootstrap, topic, partitions=2)
    first = produce(floe.bootstrap, topic, 0, 500)
    log, seen, lock = [], set(), threading.Lock()
    m = Member("R", floe.bootstrap, topic, group, "range", log, seen, lock)
    m.start()
    try:
        wait_for("the first 500 messages", lambda: len(seen) >= 500, 60)
        floe.terminate()
        floe.restart()
        second = produce(floe.bootstrap, topic, 500, 500, **{"reconnect.backoff.max.ms": 500})
        wait_for("all 1000 messages", lambda: len(seen) >= 1000, 60)
        time.sleep(1)
        m.stop()
    finally:
        m.stopping.set()
        m.join(30)
    assert m.failure is None, m.failure
    values = [v for _, v, _ in m.processed]
    assert set(values) == set(range(1000))
    redone = len(values) - len(set(values))
    uncommitted = sum(1 for _, _, b in m.processed if not m.batch_ok[b])
    assert redone <= uncommitted, f"{redone} messages processed twice, only {uncommitted} were not committed"
    ends = {}
    for p, o in list(first.values()) + list(second.values()):
        ends[p] = max(ends.get(p, 0), o + 1)
    committed = committed_offsets(admin_client(floe), group)
    assert {p: committed.get((topic, p), (None,))[0] for p in ends} == ends


# ---------------------------------------------------------------- 4. a new group without committed offsets

def test_auto_offset_reset_latest_reads_only_what_is_produced_after_joining(floe, kit):
    topic, partitions = "latest", 3
    kit.create_topic(floe.bootstrap, topic, partitions=partitions)
    before = produce(floe.bootstrap, topic, 0, 600)
    ends = high_watermarks(floe.bootstrap, topic, partitions)
    stats = {}

    def on_stats(text):
        parts = json.loads(text).get("topics", {}).get(topic, {}).get("partitions", {})
        stats.update({int(p): (v["fetch_state"], v["next_offset"]) for p, v in parts.items() if int(p) >= 0})

    c = group_consumer(floe.bootstrap, "latest-group", **{"auto.offset.reset": "latest",
                                                          "statistics.interval.ms": 100, "stats_cb": on_stats})
    try:
        c.subscribe([topic])
        # Fetching from the reset positions (seen in the client's statistics) before producing more.
        deadline = time.monotonic() + 30
        while not (len(stats) == partitions and all(st == "active" for st, _ in stats.values())):
            assert time.monotonic() < deadline, f"partitions not fetching after 30 s: {stats}"
            read = [m for m in c.consume(num_messages=100, timeout=0.2) if not m.error()]
            assert not read, f"read {len(read)} messages produced before the group joined"
        assert {p: o for p, (_, o) in stats.items()} == ends, f"fetch positions {stats}, high watermarks {ends}"
        after = produce(floe.bootstrap, topic, 600, 300)
        got = {}
        deadline = time.monotonic() + 30
        while len(got) < 300 and time.monotonic() < deadline:
            for m in c.consume(num_messages=100, timeout=0.5):
                if not m.error():
                    got[int(m.value())] = (m.partition(), m.offset())
    finally:
        c.close()
    assert not set(got) & set(before), f"read {len(set(got) & set(before))} messages produced before joining"
    assert got == after


def test_a_group_without_offsets_and_no_reset_policy_gets_an_error(floe, kit):
    from kafka import KafkaConsumer
    from kafka.errors import NoOffsetForPartitionError

    topic = "no-reset"
    kit.create_topic(floe.bootstrap, topic, partitions=2)
    produce(floe.bootstrap, topic, 0, 50)
    ends = high_watermarks(floe.bootstrap, topic, 2)

    # confluent-kafka: auto.offset.reset=error reports _AUTO_OFFSET_RESET per partition, reads nothing.
    c = group_consumer(floe.bootstrap, "no-reset-confluent", **{"auto.offset.reset": "error"})
    errors, read = [], []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while {m.partition() for m in errors} != {0, 1} and time.monotonic() < deadline:
            for m in c.consume(num_messages=100, timeout=0.5):
                (errors if m.error() else read).append(m)
    finally:
        c.close()
    assert not read, f"read {len(read)} messages without a committed offset"
    codes = {(m.partition(), m.error().code()) for m in errors}
    assert codes == {(0, KafkaError._AUTO_OFFSET_RESET), (1, KafkaError._AUTO_OFFSET_RESET)}, \
        [str(m.error()) for m in errors]

    # kafka-python: auto_offset_reset="none" raises NoOffsetForPartitionError.
    consumer = KafkaConsumer(topic, bootstrap_servers=floe.bootstrap, group_id="no-reset-kafka-python",
                             enable_auto_commit=False, auto_offset_reset="none", session_timeout_ms=10000,
                             request_timeout_ms=30000)
    try:
        with pytest.raises(NoOffsetForPartitionError):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                assert not consumer.poll(timeout_ms=500), "read messages without a committed offset"
    finally:
        consumer.close()

    # With an offset committed for partition 0 only (by a consumer outside the group:
    # assign() and commit, generation -1, accepted while the group is empty),
    # partition 0 is read from there and partition 1 still has no offset.
    c = group_consumer(floe.bootstrap, "no-reset-confluent")
    try:
        c.assign([TopicPartition(topic, 0)])
        answer = c.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        assert [tp.error for tp in answer] == [None], answer
    finally:
        c.close()
    c = group_consumer(floe.bootstrap, "no-reset-confluent", **{"auto.offset.reset": "error"})
    got, errors = [], []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while not (len(got) >= ends[0] - 3 and errors) and time.monotonic() < deadline:
            for m in c.consume(num_messages=100, timeout=0.5):
                (errors if m.error() else got).append(m)
        for m in c.consume(num_messages=100, timeout=0.5):  # nothing more
            (errors if m.error() else got).append(m)
    finally:
        c.close()
    assert [(m.partition(), m.offset()) for m in got] == [(0, o) for o in range(3, ends[0])], \
        [(m.partition(), m.offset(), m.error()) for m in got][:5]
    assert {(m.partition(), m.error().code()) for m in errors} == {(1, KafkaError._AUTO_OFFSET_RESET)}


# ---------------------------------------------------------------- 5. admin: list, describe, offsets, delete

def test_admin_lists_describes_and_deletes_groups(floe, kit):
    topic, group, partitions = "admin-groups", "admin-group", 4
    kit.create_topic(floe.bootstrap, topic, partitions=partitions)
    produce(floe.bootstrap, topic, 0, 400)
    ends = high_watermarks(floe.bootstrap, topic, partitions)
    admin = admin_client(floe)
    log, seen, lock = [], set(), threading.Lock()
    members = [Member(name, floe.bootstrap, topic, group, "range", log, seen, lock) for name in ("m1", "m2")]
    for m in members:
        m.start()
    try:
        def stable_with_both():
            owned = [m.owned_now() for m in members]
            return all(owned) and sorted(p for o in owned for p in o) == list(range(partitions))

        wait_for("both members assigned", stable_with_both, 30)
        wait_for("400 messages processed", lambda: len(seen) >= 400, 30)

        assert listed_groups(admin).get(group) == ConsumerGroupState.STABLE, listed_groups(admin)
        d = describe(admin, group)
        assert d.group_id == group and d.state == ConsumerGroupState.STABLE, (d.state, d)
        assert not d.is_simple_consumer_group
        assert d.partition_assignor == "range", d.partition_assignor
        assert sorted(x.client_id for x in d.members) == ["m1", "m2"], d.members
        assert len({x.member_id for x in d.members}) == 2 and all(x.member_id for x in d.members)
        assert all(x.host for x in d.members), [x.host for x in d.members]
        by_client = {x.client_id: {(tp.topic, tp.partition) for tp in x.assignment.topic_partitions}
                     for x in d.members}
        for m in members:
            assert by_client[m.label] == {(topic, p) for p in m.owned_now()}, (by_client, m.label, m.owned)

        committed = wait_for("offsets committed at the end of every partition",
                             lambda: (o := committed_offsets(admin, group)) and
                             {k: v for k, (v, _) in o.items()} == {(topic, p): e for p, e in ends.items()} and o, 30)
        assert all(meta in ("", None) for _, meta in committed.values()), committed
        # Offsets of named partitions: an unknown partition has none.
        result = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 1), TopicPartition("no-such-topic", 0)])],
            request_timeout=30)[group].result(30)
        assert [(tp.topic, tp.partition, tp.offset) for tp in result.topic_partitions] == [
            (topic, 1, ends[1]), ("no-such-topic", 0, OFFSET_INVALID)]

        # A group with members cannot be deleted.
        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups([group], request_timeout=30)[group].result(30)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP, refused.value
    finally:
        for m in members:
            m.stopping.set()
        for m in members:
            m.join(30)
    for m in members:
        assert m.failure is None, m.failure

    d = describe(admin, group)
    assert d.state == ConsumerGroupState.EMPTY and not d.members, (d.state, d.members)
    assert listed_groups(admin).get(group) == ConsumerGroupState.EMPTY
    assert {k: v for k, (v, _) in committed_offsets(admin, group).items()} == {(topic, p): e for p, e in ends.items()}

    admin.delete_consumer_groups([group], request_timeout=30)[group].result(30)
    assert group not in listed_groups(admin)
    assert committed_offsets(admin, group) == {}, "offsets of a deleted group"

    # A new consumer in the deleted group starts over from auto.offset.reset.
    c = group_consumer(floe.bootstrap, group, **{"auto.offset.reset": "error"})
    try:
        c.subscribe([topic])
        errors = set()
        deadline = time.monotonic() + 30
        while len(errors) < partitions and time.monotonic() < deadline:
            for m in c.consume(num_messages=100, timeout=0.5):
                assert m.error(), f"read {m.partition()}/{m.offset()} in a deleted group"
                errors.add((m.partition(), m.error().code()))
        assert errors == {(p, KafkaError._AUTO_OFFSET_RESET) for p in range(partitions)}, errors
    finally:
        c.close()


def test_deleting_an_unknown_group_fails_with_group_id_not_found(floe, kit):
    """Kafka answers DeleteGroups for a group it does not have with GROUP_ID_NOT_FOUND (69)."""
    admin = admin_client(floe)
    # Offsets are stored only for a topic that exists.
    kit.create_topic(floe.bootstrap, "deleted-twice-topic", partitions=1)
    for group in ("never-existed", "deleted-twice"):
        if group == "deleted-twice":
            c = group_consumer(floe.bootstrap, group)
            try:
                c.assign([TopicPartition("deleted-twice-topic", 0)])
                c.commit(offsets=[TopicPartition("deleted-twice-topic", 0, 1)], asynchronous=False)
            finally:
                c.close()
            admin.delete_consumer_groups([group], request_timeout=30)[group].result(30)
        with pytest.raises(KafkaException) as gone:
            admin.delete_consumer_groups([group], request_timeout=30)[group].result(30)
        assert gone.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND, gone.value


# ---------------------------------------------------------------- static membership

def test_a_static_member_that_comes_back_gets_its_partitions_without_a_rebalance(floe, kit):
    topic, group, partitions = "static", "static-group", 4
    kit.create_topic(floe.bootstrap, topic, partitions=partitions)
    admin = admin_client(floe)
    log, seen, lock = [], set(), threading.Lock()

    def member(name):
        return Member(name, floe.bootstrap, topic, group, "range", log, seen, lock,
                      **{"group.instance.id": f"instance-{name}"})

    a = b = a2 = None
    try:
        a, b = member("a"), member("b")
        a.start()
        b.start()
        wait_for("a and b assigned", lambda: a.owned_now() and b.owned_now() and
                 len(a.owned_now() | b.owned_now()) == partitions, 30)
        time.sleep(1)
        owned_a, owned_b = a.owned_now(), b.owned_now()
        d = describe(admin, group)
        assert sorted(x.group_instance_id for x in d.members) == ["instance-a", "instance-b"], d.members
        ids = {x.group_instance_id: x.member_id for x in d.members}

        # a closes: a static member sends no LeaveGroup, so the group does not rebalance...
        mark = next(Member.seq)
        a.stop()
        time.sleep(1.5)
        d = describe(admin, group)
        assert d.state == ConsumerGroupState.STABLE and len(d.members) == 2, (d.state, d.members)
        # ...and a new process with the same instance id takes its place and its partitions.
        a2 = member("a")
        a2.start()
        wait_for("a's partitions back", lambda: a2.owned_now() == owned_a, 30)
        produce(floe.bootstrap, topic, 0, 200)
        wait_for("200 messages", lambda: len(seen) >= 200, 30)
        b_events = [e for e in log if e[0] > mark and e[1] == "b"]
        assert not b_events, f"b's assignment changed while a was replaced: {b_events}"
        assert b.owned_now() == owned_b
        d = describe(admin, group)
        now = {x.group_instance_id: x.member_id for x in d.members}
        assert set(now) == {"instance-a", "instance-b"} and now["instance-b"] == ids["instance-b"], (ids, now)
        assert now["instance-a"] != ids["instance-a"], "a new member id for the replacement of a"
    finally:
        for m in (a, b, a2):
            if m is not None:
                m.stopping.set()
        for m in (a, b, a2):
            if m is not None:
                m.join(30)
    for m in (a, b, a2):
        assert m.failure is None, m.failure
