"""Consumer groups of the new protocol (KIP-848, `group.protocol=consumer`) with
confluent-kafka against `floe standalone`: two then three members on a
6-partition topic, each partition owned by one member at a time, every record
consumed once with commits; a member leaving and one `kill -9`-ed (its
partitions go to the others after the session timeout); a classic group and a
consumer group on the same topic; one group id namespace for both protocols;
ListGroups by type and ConsumerGroupDescribe."""

import os
import subprocess
import sys
import threading
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

pytestmark = pytest.mark.timeout(180)

SESSION_MS = 6000
TOPIC_PARTITIONS = 6


@pytest.fixture
def floe(standalone_factory):
    """A standalone whose consumer groups time members out after 6 s and ask
    for heartbeats every 500 ms."""
    return standalone_factory(consumer_group_session_timeout_ms=SESSION_MS,
                              consumer_group_heartbeat_interval_ms=500,
                              group_initial_rebalance_delay_ms=300)


def wait_for(what, predicate, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def produce(bootstrap, topic, start, count):
    """Values b"<i>" for i in [start, start + count), spread over the partitions."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(start, start + count):
        p.produce(topic, key=b"k%d" % i, value=b"%d" % i)
        p.poll(0)
    assert p.flush(60) == 0


class Member:
    """A consumer of the new protocol on its own thread: commits each record
    (synchronously) after recording it; records its assign / revoke events in
    `events` (shared, in the order they happen in this process)."""

    def __init__(self, bootstrap, group, topic, name, events, lock, protocol="consumer", **extra):
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                "auto.offset.reset": "earliest", "enable.auto.commit": False}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf["session.timeout.ms"] = 6000
        conf.update(extra)
        self.name, self.events, self.lock = name, events, lock
        self.seen = []
        self.errors = []
        self.owned = set()
        self.consumer = Consumer(conf)
        self.consumer.subscribe([topic], on_assign=self._assign, on_revoke=self._revoke, on_lost=self._revoke)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _assign(self, _c, parts):
        with self.lock:
            for p in parts:
                self.events.append(("assign", self.name, p.partition))
                self.owned.add(p.partition)

    def _revoke(self, _c, parts):
        with self.lock:
            for p in parts:
                self.events.append(("revoke", self.name, p.partition))
                self.owned.discard(p.partition)

    def _run(self):
        while not self.stop.is_set():
            m = self.consumer.poll(0.1)
            if m is None:
                continue
            if m.error():
                self.errors.append(m.error())
                continue
            with self.lock:
                self.seen.append(int(m.value()))
            try:
                self.consumer.commit(m, asynchronous=False)
            except Exception as e:  # a commit refused mid-rebalance; the record may be read again
                self.errors.append(e)

    def close(self):
        self.stop.set()
        self.thread.join(30)
        self.consumer.close()


def check_one_owner_at_a_time(events):
    """Per partition, events alternate: assigned to one member, revoked by that
    member, assigned to the next."""
    owner = {}
    for kind, member, p in events:
        if kind == "assign":
            assert owner.get(p) is None, f"partition {p} assigned to {member} while {owner[p]} owns it: {events}"
            owner[p] = member
        elif owner.get(p) == member:
            owner[p] = None


def all_seen(members, count):
    seen = [v for m in members for v in m.seen]
    return set(seen) >= set(range(count))


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_members_join_and_leave_each_partition_owned_once_records_consumed_once(floe, kit, assignor):
    topic, group = f"cp-join-leave-{assignor}", f"cp-g1-{assignor}"
    kit.create_topic(floe.bootstrap, topic, partitions=TOPIC_PARTITIONS)
    produce(floe.bootstrap, topic, 0, 300)
    events, lock = [], threading.Lock()
    conf = {"group.remote.assignor": assignor}
    a = Member(floe.bootstrap, group, topic, "a", events, lock, **conf)
    b = Member(floe.bootstrap, group, topic, "b", events, lock, **conf)
    members = [a, b]
    try:
        wait_for("two members owning 3 partitions each",
                 lambda: len(a.owned) == 3 and len(b.owned) == 3, 60)
        wait_for("the first 300 records", lambda: all_seen(members, 300), 60)
        c = Member(floe.bootstrap, group, topic, "c", events, lock, **conf)
        members.append(c)
        produce(floe.bootstrap, topic, 300, 300)
        wait_for("three members owning 2 partitions each",
                 lambda: all(len(m.owned) == 2 for m in members), 60)
        wait_for("600 records", lambda: all_seen(members, 600), 60)

        admin = AdminClient({"bootstrap.servers": floe.bootstrap})
        desc = admin.describe_consumer_groups([group])[group].result(30)
        assert desc.type == ConsumerGroupType.CONSUMER
        assert desc.partition_assignor == assignor
        assert len(desc.members) == 3
        assigned = sorted(tp.partition for m in desc.members for tp in m.assignment.topic_partitions)
        assert assigned == list(range(TOPIC_PARTITIONS))
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(30).valid
        assert [(g.group_id, g.type) for g in listed] == [(group, ConsumerGroupType.CONSUMER)]
        assert not [g for g in admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(30).valid
                    if g.group_id == group]

        # b leaves: its partitions go to a and c.
        b.close()
        members.remove(b)
        produce(floe.bootstrap, topic, 600, 300)
        wait_for("two members owning 3 partitions each again",
                 lambda: len(a.owned) == 3 and len(c.owned) == 3, 60)
        wait_for("900 records", lambda: all_seen([a, b, c], 900), 60)
    finally:
        for m in members:
            m.close()
    check_one_owner_at_a_time(events)
    seen = a.seen + b.seen + c.seen
    assert sorted(seen) == list(range(900)), "a record consumed twice or missed"


VICTIM = r"""
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "enable.auto.commit": False})
c.subscribe([sys.argv[3]], on_assign=lambda _c, ps: print("assigned", len(ps), flush=True))
while True:
    m = c.poll(0.1)
    if m is None or m.error():
        continue
    print("seen", int(m.value()), flush=True)
    c.commit(m, asynchronous=False)
    print("committed", int(m.value()), flush=True)
"""


def test_a_killed_member_loses_its_partitions_after_the_session_timeout(floe, kit, tmp_path):
    topic, group = "cp-kill", "cp-g2"
    kit.create_topic(floe.bootstrap, topic, partitions=TOPIC_PARTITIONS)
    out = tmp_path / "victim.out"
    events, lock = [], threading.Lock()
    survivor = Member(floe.bootstrap, group, topic, "survivor", events, lock)
    with open(out, "w") as f:
        victim = subprocess.Popen([sys.executable, "-c", VICTIM, floe.bootstrap, group, topic], stdout=f)
    try:
        # Whichever joined first, the two end up with three partitions each.
        wait_for("the victim to be assigned partitions", lambda: "assigned" in out.read_text(), 60)
        wait_for("the survivor to own 3 partitions", lambda: len(survivor.owned) == 3, 60)
        # Produced once both own partitions, so that both have records to read.
        produce(floe.bootstrap, topic, 0, 300)
        wait_for("the victim to consume", lambda: "committed" in out.read_text(), 60)
        victim.kill()
        victim.wait(10)
        produce(floe.bootstrap, topic, 300, 300)
        wait_for("the survivor to own every partition", lambda: len(survivor.owned) == TOPIC_PARTITIONS,
                 SESSION_MS / 1000 + 60)
        lines = out.read_text().splitlines()
        victim_seen = {int(x.split()[1]) for x in lines if x.startswith("seen ")}
        wait_for("every record", lambda: set(survivor.seen) | victim_seen >= set(range(600)), 60)
    finally:
        survivor.close()
        if victim.poll() is None:
            victim.kill()
    # Read twice only what the victim read (at most the records it had not
    # committed when killed, one per partition it owned).
    twice = set(survivor.seen) & victim_seen
    assert len(twice) <= 3, f"records read by both: {sorted(twice)}"
    again = sorted({v for v in survivor.seen if survivor.seen.count(v) > 1})
    # Said when it fails (seen once in 2026-12, not understood yet): which
    # records, the survivor's commit errors, and the group's events.
    assert not again, f"read twice by the survivor: {again}; errors {survivor.errors}; events {events}"


def test_classic_and_consumer_groups_on_one_topic_and_one_id_namespace(floe, kit):
    topic = "cp-mixed"
    kit.create_topic(floe.bootstrap, topic, partitions=TOPIC_PARTITIONS)
    produce(floe.bootstrap, topic, 0, 200)
    events, lock = [], threading.Lock()
    new = Member(floe.bootstrap, "cp-new", topic, "new", events, lock)
    old = Member(floe.bootstrap, "cp-old", topic, "old", events, lock, protocol="classic")
    intruder = None
    try:
        wait_for("both groups to read everything",
                 lambda: all_seen([new], 200) and all_seen([old], 200), 60)
        # A classic member cannot join the consumer group while it has members.
        intruder = Consumer({"bootstrap.servers": floe.bootstrap, "group.id": "cp-new",
                             "session.timeout.ms": 6000})
        intruder.subscribe([topic])
        errors = []

        def refused():
            m = intruder.poll(0.2)
            if m is not None and m.error():
                errors.append(m.error())
            return any(e.code() == KafkaError.INCONSISTENT_GROUP_PROTOCOL for e in errors)
        wait_for("INCONSISTENT_GROUP_PROTOCOL for the classic intruder", refused, 60)
        admin = AdminClient({"bootstrap.servers": floe.bootstrap})
        types = {g.group_id: g.type for g in admin.list_consumer_groups().result(30).valid}
        assert types.get("cp-new") == ConsumerGroupType.CONSUMER
        assert types.get("cp-old") == ConsumerGroupType.CLASSIC
        # OffsetDelete knows the consumer group's subscriptions (`floe group
        # delete-offsets` sends it).
        res = subprocess.run([str(floe.bin), "group", "delete-offsets", "cp-new", "--topic", f"{topic}:0"],
                             capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, FLOE_BOOTSTRAP=floe.bootstrap))
        assert "subscribed" in (res.stdout + res.stderr).lower(), (res.returncode, res.stdout, res.stderr)
    finally:
        if intruder is not None:
            intruder.close()
        new.close()
        old.close()
    assert sorted(new.seen) == list(range(200))
    assert sorted(old.seen) == list(range(200))
