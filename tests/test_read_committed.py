"""read_committed readers of a topic without transactions (issue 14): Fetch
with isolation_level=1 stops at the last stable offset, which is the high
watermark when no transaction is open, so such a reader sees every record,
as a read_uncommitted one does, and its end offsets are the same."""

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402

N = 300


def consume_all(bootstrap, topic, partitions, isolation, expect, timeout=60):
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap,
                                  "group.id": f"rc-{isolation}",
                                  "enable.auto.commit": False,
                                  "isolation.level": isolation})
    c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
              for p in range(partitions)])
    out = []
    deadline = time.time() + timeout
    while time.time() < deadline and len(out) < expect:
        m = c.poll(0.2)
        if m is not None and not m.error():
            out.append((m.partition(), m.offset(), m.value().decode()))
    # The end offsets this reader is told (ListOffsets at its isolation level).
    ends = [c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)]
    c.close()
    return out, ends


@pytest.mark.timeout(180)
def test_a_read_committed_consumer_without_transactions_reads_everything(standalone):
    topic = "rc-plain"
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": standalone.bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, 2, 1)])[topic].result(30)
    p = confluent_kafka.Producer({"bootstrap.servers": standalone.bootstrap,
                                  "enable.idempotence": True, "linger.ms": 5})
    sent = []
    for i in range(N):
        p.produce(topic, value=f"v{i}", partition=i % 2)
        sent.append((i % 2, f"v{i}"))
    assert p.flush(30) == 0
    committed, ends_c = consume_all(standalone.bootstrap, topic, 2, "read_committed", N)
    uncommitted, ends_u = consume_all(standalone.bootstrap, topic, 2, "read_uncommitted", N)
    assert len(committed) == N and sorted(committed) == sorted(uncommitted)
    for part in (0, 1):
        assert [v for q, _, v in committed if q == part] == [v for q, v in sent if q == part]
    assert ends_c == ends_u == [N // 2, N // 2]
