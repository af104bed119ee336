"""Idempotent producers with real clients: confluent-kafka with
`enable.idempotence=true` (every codec) and kafka-python, whose producer is
idempotent by default. Every message is acknowledged and stored exactly
once, in order per partition; a restart in the middle (the producer's
retries land on a new owner with the state from the metadata) stores no
duplicate."""

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402
kafka = pytest.importorskip("kafka")


def read_values(bootstrap, topic, partitions, expect, timeout=60):
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "idem-check",
                                  "enable.auto.commit": False})
    c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
              for p in range(partitions)])
    out = []
    deadline = time.time() + timeout
    while len(out) < expect and time.time() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        out.append((m.partition(), m.offset(), m.value().decode()))
    # Anything beyond the expected count would be a duplicate: look a little longer.
    end = time.time() + 1.5
    while time.time() < end:
        m = c.poll(0.2)
        if m is not None and not m.error():
            out.append((m.partition(), m.offset(), m.value().decode()))
    c.close()
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_confluent_idempotent_producer_stores_each_message_once(standalone, codec):
    topic = f"idem-{codec}"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": standalone.bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, 3, 1)])[topic].result(30)
    p = confluent_kafka.Producer({"bootstrap.servers": standalone.bootstrap,
                                  "enable.idempotence": True, "compression.type": codec,
                                  "linger.ms": 2})
    errors = []
    n = 10000
    for i in range(n):
        p.produce(topic, key=f"k{i % 13}", value=f"{i}",
                  on_delivery=lambda e, m: errors.append(e) if e else None)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors[:3]
    got = read_values(standalone.bootstrap, topic, 3, n)
    values = [v for _, _, v in got]
    assert sorted(values, key=int) == [str(i) for i in range(n)], "each message exactly once"
    # Per key (one partition each), in the order produced.
    by_part = {}
    for part, off, v in sorted(got):
        by_part.setdefault(part, []).append(int(v))
    for part, vs in by_part.items():
        per_key = {}
        for v in vs:
            per_key.setdefault(v % 13, []).append(v)
        for k, seq in per_key.items():
            assert seq == sorted(seq), f"partition {part} key {k} out of order"


@pytest.mark.timeout(120)
def test_fetched_batches_carry_each_records_producer_session(standalone):
    """What tells a client's re-send under a new epoch from a stored retry
    (tests/consistency.py): the producer id, epoch and sequence numbers of
    each stored batch, as a fetch returns them, seen through the
    checkers' kafka-python reader."""
    from s3_cluster import read_kafka_python

    topic = "idem-sessions"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": standalone.bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, 2, 1)])[topic].result(30)
    p = confluent_kafka.Producer({"bootstrap.servers": standalone.bootstrap, "enable.idempotence": True,
                                  "linger.ms": 5})
    n = 3000
    for i in range(n):
        p.produce(topic, value=f"1 {i}".encode(), partition=i % 2)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    reads = read_kafka_python(standalone.bootstrap, topic, {0: n // 2, 1: n // 2}, timeout=60)
    assert len(reads) == n
    assert all(r.session is not None for r in reads), [r for r in reads if r.session is None][:3]
    assert len({r.session[:2] for r in reads}) == 1, "one producer id and epoch"
    for part in (0, 1):
        seqs = [r.session[2] for r in sorted(reads, key=lambda r: r.offset) if r.partition == part]
        assert seqs == list(range(n // 2)), f"partition {part}: sequences {seqs[:5]}..."


@pytest.mark.timeout(180)
def test_kafka_python_default_idempotent_producer_survives_a_restart(standalone):
    producer = kafka.KafkaProducer(bootstrap_servers=standalone.bootstrap, acks="all",
                                   retries=20, retry_backoff_ms=200,
                                   request_timeout_ms=10000)
    assert producer.config.get("enable_idempotence", True) is not False
    futures = [producer.send("idem-kp", value=b"%d" % i) for i in range(2000)]
    producer.flush(30)
    assert all(f.get(10) for f in futures)
    # Restart Floe under the producer: the state of producer ids comes back
    # from the metadata; retried batches are not stored twice.
    standalone.terminate()
    standalone.restart()
    futures = [producer.send("idem-kp", value=b"%d" % i) for i in range(2000, 4000)]
    producer.flush(60)
    assert all(f.get(30) for f in futures)
    producer.close()
    got = read_values(standalone.bootstrap, "idem-kp", 1, 4000)
    values = [int(v) for _, _, v in got]
    assert values == list(range(4000)), f"{len(values)} values, in order, once"
