"""Transactions with real clients (issue 14, docs/transactions.md).

Until the whole path works, a transactional producer is refused at
InitProducerId: `test_a_transactional_producer_is_refused_until_transactions_work`
holds that promise (the branch can be merged at any commit). The test of
committed and aborted transactions is written and skipped: the session that
makes InitProducerId accept a transactional id removes the skip and the
refusal test together."""

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402


def create_topic(bootstrap, topic, partitions):
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, partitions, 1)])[topic].result(30)


def read_committed(bootstrap, topic, partitions, expect, timeout=60):
    """Every record a read_committed consumer sees (waiting for `expect`, then
    a little longer for any extra one), as (partition, value)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-check",
                                  "enable.auto.commit": False,
                                  "isolation.level": "read_committed"})
    c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
              for p in range(partitions)])
    out = []
    deadline = time.time() + timeout
    settle = None
    while time.time() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            out.append((m.partition(), m.value().decode()))
        if len(out) >= expect:
            settle = settle or time.time() + 1.5
            if time.time() > settle:
                break
    c.close()
    return out


@pytest.mark.timeout(120)
def test_a_transactional_producer_is_refused_until_transactions_work(standalone):
    p = confluent_kafka.Producer({"bootstrap.servers": standalone.bootstrap,
                                  "transactional.id": "txn-refused"})
    with pytest.raises(confluent_kafka.KafkaException) as e:
        p.init_transactions(5)
    # librdkafka takes it as retriable and asks again until the timeout.
    assert e.value.args[0].code() == confluent_kafka.KafkaError.UNSUPPORTED_VERSION


@pytest.mark.skip(reason="transactions are not enabled yet (issue 14): see docs/transactions.md")
@pytest.mark.timeout(180)
def test_read_committed_sees_exactly_the_committed_transactions(standalone):
    topic = "txn-basic"
    create_topic(standalone.bootstrap, topic, 2)
    p = confluent_kafka.Producer({"bootstrap.servers": standalone.bootstrap,
                                  "transactional.id": "txn-basic-1"})
    p.init_transactions(30)
    expected = []
    for t, commit in enumerate([True, False, True, False, True]):
        p.begin_transaction()
        for i in range(10):
            value = f"t{t}-{i}"
            p.produce(topic, value=value, partition=i % 2)
            if commit:
                expected.append((i % 2, value))
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    got = read_committed(standalone.bootstrap, topic, 2, len(expected))
    assert sorted(got) == sorted(expected), "exactly the committed records"
    for part in (0, 1):
        mine = [v for q, v in got if q == part]
        assert mine == [v for q, v in expected if q == part], f"partition {part} in order"
