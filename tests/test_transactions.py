"""Transactions with real clients (issue 14, docs/transactions.md).

With `--transactions false` (transactions are on by default) a
transactional producer is refused at InitProducerId:
`test_a_transactional_producer_is_refused_with_transactions_off` holds
that promise. With them on (`txn_standalone`, one process for the module;
a cluster of processes for the coordinator's failover): committed and
aborted transactions seen by read_committed and read_uncommitted
consumers, fencing, offsets sent in a transaction, the timeout and the
LSO it holds, a consume-transform-produce loop killed with SIGKILL and
restarted (exactly once), kafka-python's and aiokafka's transactional
producers, the admin APIs, and the benchmark's quick form."""

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
    return read_at(bootstrap, topic, partitions, expect, "read_committed", timeout)


def read_at(bootstrap, topic, partitions, expect, isolation, timeout=60, settle_s=1.5):
    """The records a consumer at `isolation` sees from the start of every
    partition, waiting for `expect` and then `settle_s` longer for any
    extra one, as (partition, value)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-check",
                                  "enable.auto.commit": False,
                                  "isolation.level": isolation})
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
            settle = settle or time.time() + settle_s
            if time.time() >= settle:
                break
    c.close()
    return out


@pytest.mark.timeout(120)
def test_a_transactional_producer_is_refused_with_transactions_off(floe_bin, tmp_path):
    from conftest import Standalone
    off = Standalone(floe_bin, tmp_path, transactions=False)
    off.start()
    try:
        p = confluent_kafka.Producer({"bootstrap.servers": off.bootstrap,
                                      "transactional.id": "txn-refused"})
        with pytest.raises(confluent_kafka.KafkaException) as e:
            p.init_transactions(5)
        # librdkafka takes it as retriable and asks again until the timeout.
        assert e.value.args[0].code() == confluent_kafka.KafkaError.UNSUPPORTED_VERSION
    finally:
        off.stop()


@pytest.mark.timeout(180)
def test_read_committed_sees_exactly_the_committed_transactions(txn_standalone):
    standalone = txn_standalone
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
    """One `floe standalone` (transactions on by default) shared by the
    module's tests (each uses its own transactional ids and groups)."""
    from conftest import Standalone
    s = Standalone(floe_bin, tmp_path_factory.mktemp("txn"))
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
        # Per broker: each proxy answers for the ids it is coordinator of.
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
                      proxy_flags=("--default-partitions", "1"))
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


def read_all(bootstrap, topic, partitions, expect, isolation, timeout=90):
    """(partition, value) of every data record, read from the start."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{isolation}",
                                  "enable.auto.commit": False, "isolation.level": isolation})
    c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
              for p in range(partitions)])
    out, deadline, settle = [], time.time() + timeout, None
    try:
        while time.time() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append((m.partition(), m.value().decode()))
            if len(out) >= expect:
                settle = settle or time.time() + 1.5
                if time.time() > settle:
                    break
    finally:
        c.close()
    return out


@pytest.mark.timeout(300)
def test_consume_transform_produce_is_exactly_once_across_kill_9(txn_standalone, tmp_path):
    """The transforming process is killed with SIGKILL three times while it
    runs and started again with the same transactional id: the output holds
    every input record exactly once, in each partition's order."""
    import os
    import signal
    import subprocess
    import sys

    bootstrap = txn_standalone.bootstrap
    src, dst, group = "eos-in", "eos-out", "eos-g"
    create_topic(bootstrap, src, 2)
    create_topic(bootstrap, dst, 2)
    inputs = [(i % 2, f"r{i:04d}") for i in range(800)]
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for part, v in inputs:
        p.produce(src, value=v, partition=part)
    assert p.flush(60) == 0
    script = os.path.join(os.path.dirname(__file__), "txn_transformer.py")

    def start(n):
        log = open(tmp_path / f"transformer{n}.log", "w")
        return subprocess.Popen([sys.executable, script, bootstrap, src, dst, group, "eos-transformer"],
                                stdout=log, stderr=subprocess.STDOUT), log

    def commits(n):
        return (tmp_path / f"transformer{n}.log").read_text().count("committed ")

    for n in range(3):
        proc, log = start(n)
        try:
            # Killed once it has committed at least one transaction, inside a later one.
            deadline = time.time() + 60
            while commits(n) < 1 and time.time() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert proc.poll() is None, (tmp_path / f"transformer{n}.log").read_text()
            assert commits(n) >= 1, "no transaction committed before the kill"
            time.sleep(0.2)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            log.close()
    proc, log = start(3)
    try:
        got = read_all(bootstrap, dst, 2, len(inputs), "read_committed", timeout=120)
    finally:
        proc.kill()
        proc.wait()
        log.close()
    expected = [(part, v.upper()) for part, v in inputs]
    assert sorted(got) == sorted(expected), \
        f"{len(got)} records, {len(set(got))} distinct, {len(expected)} expected"
    for part in (0, 1):
        assert [v for q, v in got if q == part] == [v for q, v in expected if q == part]
    # Aborted attempts left records that read_uncommitted sees, never read_committed.
    raw = read_all(bootstrap, dst, 2, len(inputs), "read_uncommitted", timeout=30)
    assert len(raw) >= len(expected)


@pytest.mark.timeout(180)
def test_kafka_python_and_aiokafka_transactional_producers(txn_standalone):
    """kafka-python's and aiokafka's transactional producers, each with one
    committed and one aborted transaction: read_committed sees the committed
    records only."""
    import asyncio

    import aiokafka
    import kafka

    bootstrap = txn_standalone.bootstrap
    topic = "txn-other-clients"
    create_topic(bootstrap, topic, 1)

    kp = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id="txn-kafka-python")
    kp.init_transactions()
    for commit in (True, False):
        kp.begin_transaction()
        for i in range(5):
            kp.send(topic, value=f"kp-{commit}-{i}".encode(), partition=0)
        # Sent before the end, so that an abort has records to abort (a
        # client drops what it has not sent yet).
        kp.flush()
        if commit:
            kp.commit_transaction()
        else:
            kp.abort_transaction()
    kp.close()

    async def aio():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="txn-aiokafka")
        await p.start()
        try:
            async with p.transaction():
                for i in range(5):
                    await p.send(topic, value=f"aio-True-{i}".encode(), partition=0)
            await p.begin_transaction()
            for i in range(5):
                await p.send_and_wait(topic, value=f"aio-False-{i}".encode(), partition=0)
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(aio())
    expected = [f"kp-True-{i}" for i in range(5)] + [f"aio-True-{i}" for i in range(5)]
    got = [v for _, v in read_all(bootstrap, topic, 1, len(expected), "read_committed")]
    assert got == expected
    raw = [v for _, v in read_all(bootstrap, topic, 1, 20, "read_uncommitted")]
    assert len(raw) == 20 and set(expected) <= set(raw)


@pytest.mark.timeout(180)
def test_a_hanging_transaction_holds_the_lso_until_its_timeout_aborts_it(txn_standalone):
    """A producer stops inside a transaction that wrote records: while it is
    open the last stable offset stays at its first record, so a later
    committed transaction waits behind it; its timeout aborts it and the LSO
    moves on."""
    bootstrap = txn_standalone.bootstrap
    topic = "txn-lso"
    create_topic(bootstrap, topic, 1)
    hanging = txn_producer(bootstrap, "txn-lso-hang", **{"transaction.timeout.ms": 6000})
    hanging.begin_transaction()
    for i in range(3):
        hanging.produce(topic, value=f"hang-{i}", partition=0)
    hanging.flush(30)
    later = txn_producer(bootstrap, "txn-lso-later")
    later.begin_transaction()
    for i in range(3):
        later.produce(topic, value=f"later-{i}", partition=0)
    later.commit_transaction(30)

    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-lso-g",
                                  "isolation.level": "read_committed"})
    try:
        before = wait_state(bootstrap, "txn-lso-hang", {"Ongoing", "PrepareAbort", "CompleteAbort"})
        _, lso = c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=30)
        after = wait_state(bootstrap, "txn-lso-hang", {"Ongoing", "PrepareAbort", "CompleteAbort"})
        if getattr(after.state, "value", after.state) == "Ongoing":
            assert getattr(before.state, "value", before.state) == "Ongoing"
            assert lso == 0, "the open transaction's first record bounds what read_committed sees"
        wait_state(bootstrap, "txn-lso-hang", {"CompleteAbort"})
    finally:
        c.close()
    got = [v for _, v in read_all(bootstrap, topic, 1, 3, "read_committed")]
    assert got == [f"later-{i}" for i in range(3)]


@pytest.mark.timeout(180)
def test_the_transaction_benchmark_runs_in_its_quick_form(floe_bin):
    """bench/txn.py with tiny counts, so the harness cannot rot: every mode
    gives a rate, and the transactional ones commit latencies; with
    --metrics, each mode's cost per transaction from /metrics."""
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parent.parent
    res = subprocess.run([sys.executable, root / "bench" / "txn.py", "--records", "300", "--partitions", "2",
                          "--per-txn", "10", "100", "--rounds", "1", "--metrics"],
                         env=dict(os.environ, FLOE_BIN=str(floe_bin)), capture_output=True, text=True,
                         timeout=170, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in res.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| mode")}
    assert {"idempotent", "txn-10", "txn-100"} <= set(rows), res.stdout
    for mode in ("txn-10", "txn-100"):
        p50, p99 = (float(x) for x in rows[mode].split("|")[5].split("/"))
        assert 0 < p50 <= p99, rows[mode]
    # --metrics: a transaction of 10 sends at least one AddPartitionsToTxn,
    # one Produce and one EndTxn, and costs flushes and metadata commands.
    costs = res.stdout.split("txn-10, per transaction (30 of them), from /metrics:")[1]
    costs = costs.split("txn-100, per transaction")[0]
    cost = {line.split("|")[1].strip(): line.split("|")[2:4] for line in costs.splitlines()
            if line.startswith("| ") and not line.startswith("| what")}
    assert float(cost["EndTxn requests"][0]) >= 1.0, costs
    assert float(cost["AddPartitionsToTxn requests"][0]) >= 1.0, costs
    assert float(cost["Produce requests"][0]) >= 1.0, costs
    assert float(cost["flushes, commit phase"][1]) > 0, costs
    assert float(cost["metadata commands"][0]) >= 3.0, costs
    # Each command's time from proposal to answer, and the log's durable
    # writes (fsync included) within it: one at least per command.
    proposed, writes = cost["metadata commands, proposal to answer"], cost["metadata log writes (fsync included)"]
    assert float(proposed[0]) >= 3.0 and float(writes[0]) >= 1.0, costs
    assert float(writes[1]) > 0 and float(proposed[1]) > 0, costs
