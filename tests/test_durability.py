"""What `floe standalone` acknowledged survives: kill -9 in the middle of a stream of
acks=all writes, and a clean SIGTERM shutdown."""

import time

import pytest

pytestmark = pytest.mark.timeout(300)

N = 20_000
KILL_AFTER_ACKS = 5_000


def payload(seq):
    return b"durable-%06d-" % seq + bytes((seq * 7 + j) % 251 for j in range(seq % 200))


class Tracker:
    """Delivery callbacks: seq -> offset for acknowledged messages, seq -> error for failed."""

    def __init__(self):
        self.acked = {}
        self.failed = {}

    def __call__(self, err, msg):
        seq = int(msg.key())
        if err is None:
            self.acked[seq] = msg.offset()
        else:
            self.failed[seq] = err


def producer(bootstrap, **extra):
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
            # One request in flight: a batch retried after the crash is sent
            # again before any later one, so acknowledged order is produce order.
            "max.in.flight.requests.per.connection": 1,
            "message.timeout.ms": 60000, "reconnect.backoff.ms": 100, "reconnect.backoff.max.ms": 1000}
    conf.update(extra)
    return Producer(conf)


def check_log(records, acked, what):
    """records: [(partition, offset, key, value, ...)] read from the beginning."""
    offsets = [r[1] for r in records]
    assert offsets == list(range(len(records))), f"{what}: offsets are not 0..{len(records) - 1} without holes"
    by_offset = {r[1]: (r[2], r[3]) for r in records}
    lost = [(seq, off) for seq, off in sorted(acked.items()) if by_offset.get(off) != (b"%06d" % seq, payload(seq))]
    assert not lost, f"{what}: {len(lost)} acknowledged messages not found at their offset, first (seq, offset): {lost[:5]}"
    ordered = [acked[seq] for seq in sorted(acked)]
    assert ordered == sorted(ordered) and len(set(ordered)) == len(ordered), \
        f"{what}: acknowledged offsets do not follow produce order"
    for r in records:  # anything else in the log is one of ours, whole
        seq = int(r[2])
        assert r[3] == payload(seq), f"{what}: offset {r[1]} holds a damaged copy of message {seq}"


@pytest.mark.parametrize("compaction_interval_ms", [30000, 200], ids=["wal-only", "compacting"])
def test_kill9_mid_stream_loses_no_acknowledged_message(standalone_factory, kit, compaction_interval_ms):
    # With a 200 ms compaction interval the kill also lands while WAL data is
    # being compacted into segments, and recovery reads both.
    standalone = standalone_factory(compaction_interval_ms=compaction_interval_ms)
    topic = "durable"
    kit.create_topic(standalone.bootstrap, topic)
    track = Tracker()
    p = producer(standalone.bootstrap)
    first_pid = standalone.pid
    produced, killed_at = 0, None
    deadline = time.monotonic() + 180
    while produced < N:
        assert time.monotonic() < deadline, f"producing stalled: {produced} produced, {len(track.acked)} acked"
        for seq in range(produced, min(N, produced + 100)):
            while True:
                try:
                    p.produce(topic, key=b"%06d" % seq, value=payload(seq), on_delivery=track)
                    break
                except BufferError:
                    p.poll(0.05)
        produced = min(N, produced + 100)
        p.poll(0.005)  # paced, so the kill lands in the middle of the stream
        if killed_at is None and len(track.acked) >= KILL_AFTER_ACKS:
            killed_at = (produced, len(track.acked))
            standalone.kill9()
            standalone.restart()
    assert killed_at is not None and killed_at[0] < N, f"the kill did not happen while producing: {killed_at}"
    undelivered = p.flush(120)
    assert undelivered == 0, f"{undelivered} messages neither acknowledged nor failed 120 s after the restart"
    print(f"killed pid {first_pid} after {killed_at[1]} acks with {killed_at[0]} produced; "
          f"{len(track.acked)} acknowledged, {len(track.failed)} failed in the end")
    assert len(track.acked) + len(track.failed) == N
    assert len(track.acked) > killed_at[1], "nothing was acknowledged after the restart"
    assert not track.failed, f"{len(track.failed)} failed deliveries, first: {list(track.failed.items())[:3]}"

    records = kit.consume(standalone.bootstrap, topic, timeout=120)
    assert len(records) >= len(track.acked)
    check_log(records, track.acked, "after kill -9 and restart")
    dupes = len(records) - len(set(int(r[2]) for r in records))
    print(f"log holds {len(records)} records ({dupes} duplicates from retries of unacknowledged batches)")


def test_sigterm_shutdown_keeps_everything_acknowledged(standalone, kit):
    topic = "clean-stop"
    kit.create_topic(standalone.bootstrap, topic)
    track = Tracker()
    for acks, seqs in (("all", range(0, 5000)), ("1", range(5000, 7500))):
        p = producer(standalone.bootstrap, acks=acks, **{"max.in.flight.requests.per.connection": 5})
        for seq in seqs:
            p.produce(topic, key=b"%06d" % seq, value=payload(seq), on_delivery=track)
            p.poll(0)
        assert p.flush(60) == 0
    assert not track.failed, list(track.failed.items())[:3]
    assert sorted(track.acked.values()) == list(range(7500))

    code = standalone.terminate(timeout=30)
    assert code == 0, f"exit code {code} after SIGTERM"
    standalone.start()
    records = kit.consume(standalone.bootstrap, topic)
    assert len(records) == 7500, f"{len(records)} records after a clean restart, 7500 acknowledged"
    check_log(records, track.acked, "after SIGTERM and restart")

    # The log goes on where it stopped.
    track2 = Tracker()
    p = producer(standalone.bootstrap)
    p.produce(topic, key=b"%06d" % 7500, value=payload(7500), on_delivery=track2)
    assert p.flush(30) == 0
    assert track2.acked == {7500: 7500}, (track2.acked, track2.failed)


def test_a_consumer_group_carries_on_across_a_kill9_restart(standalone):
    """The group's membership is stored with its offsets: after `floe standalone`
    is killed with SIGKILL and started again on its data dir, the consumer's
    heartbeats find its group (resumed from the metadata service), so it is never
    rebalanced and goes on reading what is produced after the restart."""
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "group-across-restart"
    admin = AdminClient({"bootstrap.servers": standalone.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    p = producer(standalone.bootstrap)
    for i in range(100):
        p.produce(topic, key=b"%06d" % i, value=payload(i), partition=i % 2)
    assert p.flush(30) == 0
    assigned, revoked = [], []
    c = Consumer({"bootstrap.servers": standalone.bootstrap, "group.id": "across-restart",
                  "auto.offset.reset": "earliest", "session.timeout.ms": 30000,
                  "heartbeat.interval.ms": 500, "reconnect.backoff.max.ms": 500})
    c.subscribe([topic],
                on_assign=lambda _c, ps: assigned.append(sorted(x.partition for x in ps)),
                on_revoke=lambda _c, ps: revoked.append(sorted(x.partition for x in ps)),
                on_lost=lambda _c, ps: revoked.append(("lost", sorted(x.partition for x in ps))))
    try:
        seen = set()

        def read_until(n, timeout):
            deadline = time.time() + timeout
            while len(seen) < n:
                assert time.time() < deadline, f"read {len(seen)} of {n}"
                m = c.poll(0.2)
                if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
                    continue
                if m.error():
                    continue  # transport errors while the process restarts
                seen.add(int(m.key()))

        read_until(100, 60)
        c.commit(asynchronous=False)
        standalone.kill9()
        standalone.start()
        p = producer(standalone.bootstrap)
        for i in range(100, 200):
            p.produce(topic, key=b"%06d" % i, value=payload(i), partition=i % 2)
        assert p.flush(60) == 0
        read_until(200, 90)
        assert (assigned, revoked) == ([[0, 1]], []), f"rebalanced (assigned, revoked): {assigned}, {revoked}"
        log = standalone.log_path.read_text(errors="replace")
        assert "group resumed from its stored membership" in log
    finally:
        c.close()
