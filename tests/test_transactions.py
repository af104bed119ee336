"""Transactions with real clients (issue 14, docs/transactions.md).

Without `--transactions` (the default until the whole path works) a
transactional producer is refused at InitProducerId:
`test_a_transactional_producer_is_refused_until_transactions_work` holds
that promise. With the flag, the coordinator's side is tested here with what
needs no transactional batch in a partition (the partition side, markers and
read_committed, comes with it): init, fencing, offsets sent in a
transaction, abort, the timeout, and the admin APIs. The test of committed
and aborted records is written and skipped until the partition side works."""

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


@pytest.fixture(scope="module")
def txn_standalone(floe_bin, tmp_path_factory):
    """One `floe standalone --transactions` shared by the module's tests (each
    uses its own transactional ids and groups)."""
    from conftest import Standalone
    s = Standalone(floe_bin, tmp_path_factory.mktemp("txn"), transactions=True)
    s.start()
    yield s
    s.stop()


def txn_producer(bootstrap, txn_id, init_timeout=30, **extra):
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **extra})
    p.init_transactions(init_timeout)
    return p


def group_metadata(bootstrap, group):
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "enable.auto.commit": False})
    return c, c.consumer_group_metadata()


def committed(bootstrap, group, topic, **extra):
    """The group's committed offset of partition 0 (read_uncommitted: no
    require_stable), or None."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "enable.auto.commit": False,
                                  "isolation.level": "read_uncommitted", **extra})
    try:
        [tp] = c.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=30)
        return tp.offset if tp.offset >= 0 else None
    finally:
        c.close()


def admin(bootstrap):
    import kafka.admin
    return kafka.admin.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)


def wait_state(bootstrap, txn_id, states, timeout=60):
    """DescribeTransactions until `txn_id` is in one of `states`."""
    a = admin(bootstrap)
    deadline = time.time() + timeout
    try:
        while True:
            d = a.describe_transactions([txn_id])[txn_id]
            state = getattr(d.state, "value", d.state)
            if state in states:
                return d
            assert time.time() < deadline, f"{txn_id} still {state}"
            time.sleep(0.2)
    finally:
        a.close()


@pytest.mark.timeout(120)
def test_a_new_instance_fences_the_previous_one(txn_standalone):
    bootstrap = txn_standalone.bootstrap
    create_topic(bootstrap, "txn-fence-in", 1)
    first = txn_producer(bootstrap, "txn-fence")
    txn_producer(bootstrap, "txn-fence")
    consumer, meta = group_metadata(bootstrap, "txn-fence-g")
    first.begin_transaction()
    with pytest.raises(confluent_kafka.KafkaException) as e:
        first.send_offsets_to_transaction([confluent_kafka.TopicPartition("txn-fence-in", 0, 1)], meta, 30)
        first.commit_transaction(30)
    err = e.value.args[0]
    assert err.fatal() or err.code() in (confluent_kafka.KafkaError._FENCED,
                                         confluent_kafka.KafkaError.PRODUCER_FENCED,
                                         confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH), err
    consumer.close()


@pytest.mark.timeout(120)
def test_offsets_sent_in_a_transaction_are_committed_by_its_commit_only(txn_standalone):
    bootstrap = txn_standalone.bootstrap
    topic, group = "txn-offsets-in", "txn-offsets-g"
    create_topic(bootstrap, topic, 1)
    p = txn_producer(bootstrap, "txn-offsets")
    consumer, meta = group_metadata(bootstrap, group)

    p.begin_transaction()
    p.send_offsets_to_transaction([confluent_kafka.TopicPartition(topic, 0, 5)], meta, 30)
    assert committed(bootstrap, group, topic) is None, "pending until the commit"
    d = wait_state(bootstrap, "txn-offsets", {"Ongoing"})
    assert d.producer_id >= 0
    # A read_committed consumer's OffsetFetch (require_stable) is told the
    # offset is unstable: librdkafka keeps asking until its timeout.
    with pytest.raises(confluent_kafka.KafkaException):
        strict = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                           "isolation.level": "read_committed"})
        try:
            strict.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=3)
        finally:
            strict.close()
    p.commit_transaction(30)
    assert committed(bootstrap, group, topic) == 5

    # An aborted transaction's offsets are dropped.
    p.begin_transaction()
    p.send_offsets_to_transaction([confluent_kafka.TopicPartition(topic, 0, 9)], meta, 30)
    p.abort_transaction(30)
    wait_state(bootstrap, "txn-offsets", {"CompleteAbort"})
    assert committed(bootstrap, group, topic) == 5

    a = admin(bootstrap)
    try:
        # Per broker: every proxy answers for the whole cluster.
        listed = [t for ts in a.list_transactions().values() for t in ts]
        mine = [t for t in listed if t.transactional_id == "txn-offsets"]
        assert len(mine) == 1, listed
        assert getattr(mine[0].state, "value", mine[0].state) == "CompleteAbort"
        ongoing = a.list_transactions(state_filters=["Ongoing"]).values()
        assert not [t for ts in ongoing for t in ts if t.transactional_id == "txn-offsets"]
    finally:
        a.close()
    consumer.close()


@pytest.mark.timeout(120)
def test_a_hanging_transaction_is_aborted_by_its_timeout(txn_standalone):
    bootstrap = txn_standalone.bootstrap
    topic, group = "txn-hang-in", "txn-hang-g"
    create_topic(bootstrap, topic, 1)
    p = txn_producer(bootstrap, "txn-hang", **{"transaction.timeout.ms": 2000})
    consumer, meta = group_metadata(bootstrap, group)
    p.begin_transaction()
    p.send_offsets_to_transaction([confluent_kafka.TopicPartition(topic, 0, 3)], meta, 30)
    before = wait_state(bootstrap, "txn-hang", {"Ongoing"})
    # The coordinator aborts it and bumps the epoch: the producer is fenced.
    after = wait_state(bootstrap, "txn-hang", {"CompleteAbort"})
    assert after.producer_epoch == before.producer_epoch + 1
    with pytest.raises(confluent_kafka.KafkaException):
        p.commit_transaction(30)
    assert committed(bootstrap, group, topic) is None
    consumer.close()


@pytest.mark.timeout(240)
def test_the_coordinator_moves_with_its_shard_in_a_cluster(floe_bin, tmp_path):
    """Separate processes: the proxy reaches the coordinator over the internal
    RPC. The broker coordinating an open transaction is killed with SIGKILL;
    once its shard moved, a new instance of the producer gets its epoch (the
    open transaction aborted: its offsets dropped) and commits."""
    from floe_cluster import Cluster
    from test_cluster_failover import fnv1a_shard, owned_shards

    cluster = Cluster(floe_bin, tmp_path,
                      proxy_flags=("--default-partitions", "1", "--transactions", "true"))
    try:
        bootstrap = cluster.bootstrap
        topic, group, tid = "txn-move-in", "txn-move-g", "txn-move"
        create_topic(bootstrap, topic, 1)
        p = txn_producer(bootstrap, tid, init_timeout=60)
        consumer, meta = group_metadata(bootstrap, group)
        p.begin_transaction()
        p.send_offsets_to_transaction([confluent_kafka.TopicPartition(topic, 0, 5)], meta, 30)
        p.commit_transaction(30)
        assert committed(bootstrap, group, topic) == 5

        p.begin_transaction()
        p.send_offsets_to_transaction([confluent_kafka.TopicPartition(topic, 0, 9)], meta, 30)
        shard = fnv1a_shard(tid)
        [holder] = [b for b in cluster.brokers if shard in owned_shards(b.admin)]
        holder.kill9()
        again = txn_producer(bootstrap, tid, init_timeout=90)
        assert committed(bootstrap, group, topic) == 5, "the open transaction was aborted"
        again.begin_transaction()
        again.send_offsets_to_transaction([confluent_kafka.TopicPartition(topic, 0, 12)], meta, 30)
        again.commit_transaction(30)
        assert committed(bootstrap, group, topic) == 12
        consumer.close()
    finally:
        cluster.stop()
