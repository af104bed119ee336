"""Transactions in a cluster of processes: the coordinator's broker killed
mid-commit (issue 14, docs/transactions.md "What survives what").

Two brokers: one holds the transactional id's coordinator shard, the other
owns some of the transaction's partitions. The other one is stopped
(SIGSTOP), so its markers cannot be written; EndTxn is answered once the
decision is durable (PrepareCommit / PrepareAbort), and the coordinator's
broker is killed with SIGKILL before its last marker. Once the stopped
broker runs again it takes the shard over, sends the markers again and
completes the transaction: a read_committed consumer sees every record of
a committed transaction and none of an aborted one (then the records of a
later transaction, so the LSO moved past it). No test hook in the broker.
A commit is decided only once every owner says it holds the transaction's
batches durably, so there the other broker is stopped once the decision
is taken, while its markers wait for its next paced flush (every 2 s).

And a partition's owner killed (SIGKILL) while the batches it answered
(once sequenced, as a transaction's are) wait for its paced flush: the
commit is refused as abortable, the client aborts, and none of those
records is ever seen by read_committed.

And with two proxies, ListGroups and ListTransactions asked of each name
every group and transactional id once (and `floe group list`, through one
proxy, asks each)."""

import os
import signal
import time

import pytest

from floe_cluster import Cluster
from test_cluster_failover import fnv1a_shard, owned, owned_shards
from test_transactions import create_topic, read_at, read_committed, txn_producer, wait_state

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 4

# Flushes every 2 s at most: what a broker answered once sequenced (a
# transaction's batches, its markers) waits in its memory that long.
PACED = ("--flush-paced", "true", "--flush-interval-ms", "2000")


def coordinator_and_other(cluster, tid, timeout=30):
    """The broker holding `tid`'s coordinator shard, and the other one, once it
    owns some of the partitions (a new topic's partitions are taken over by
    their owners a moment after it is created)."""
    shard = fnv1a_shard(tid)
    deadline = time.time() + timeout
    while True:
        holders = [b for b in cluster.brokers if shard in owned_shards(b.admin)]
        if len(holders) == 1:
            [coordinator] = holders
            [other] = [b for b in cluster.brokers if b is not coordinator]
            if owned(other.admin) > 0:
                return coordinator, other
        assert time.time() < deadline, f"after {timeout}s no single coordinator of {tid}, or the other broker owns no partition"
        time.sleep(0.2)


def begin_with(bootstrap, tid, topic, prefix, n=20, init_timeout=60):
    """A transactional producer for `tid` with a transaction open holding
    `n` records spread over the partitions, every one answered."""
    p = txn_producer(bootstrap, tid, init_timeout=init_timeout)
    p.begin_transaction()
    records = [(i % PARTITIONS, f"{prefix}-{i}") for i in range(n)]
    for part, value in records:
        p.produce(topic, value=value, partition=part)
    assert p.flush(30) == 0
    return p, records


def wait_moved(bootstrap, tid, state, timeout):
    """DescribeTransactions until `tid` is in `state`, through NOT_COORDINATOR
    and the like while its shard moves."""
    import kafka.errors
    deadline = time.time() + timeout
    while True:
        try:
            return wait_state(bootstrap, tid, {state}, timeout=max(1, deadline - time.time()))
        except kafka.errors.KafkaError as e:
            assert time.time() < deadline, f"{tid} not {state}: {e}"
            time.sleep(0.5)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_the_coordinator_killed_between_prepare_and_its_last_marker(floe_bin, tmp_path, outcome):
    # A lease long enough that the stopped broker keeps its partitions while
    # the decision is taken and the coordinator killed.
    cluster = Cluster(floe_bin, tmp_path, lease_ms=8000, broker_flags=PACED,
                      proxy_flags=("--default-partitions", "1"))
    stopped = None
    try:
        bootstrap = cluster.bootstrap
        topic, tid = f"txn-fo-{outcome}", f"txn-fo-{outcome}"
        create_topic(bootstrap, topic, PARTITIONS)
        p, decided = begin_with(bootstrap, tid, topic, "decided")
        coordinator, other = coordinator_and_other(cluster, tid)
        if outcome == "commit":
            # The owners answer the commit's check once the batches are
            # durable (below the high watermark, so read_uncommitted sees
            # them); the markers then wait for the next paced flush.
            durable = read_at(bootstrap, topic, PARTITIONS, len(decided), "read_uncommitted",
                              settle_s=0)
            assert len(durable) == len(decided)
            p.commit_transaction(30)
            os.kill(other.pid, signal.SIGSTOP)
            stopped = other
        else:
            os.kill(other.pid, signal.SIGSTOP)
            stopped = other
            p.abort_transaction(30)
        prepare = "PrepareCommit" if outcome == "commit" else "PrepareAbort"
        complete = "CompleteCommit" if outcome == "commit" else "CompleteAbort"
        d = wait_state(bootstrap, tid, {prepare, complete}, timeout=30)
        assert d.producer_id >= 0
        coordinator.kill9()
        os.kill(other.pid, signal.SIGCONT)
        stopped = None
        del p

        # The new coordinator (the other broker, once the shard moved)
        # completes the decided transaction; a new instance then commits.
        wait_moved(bootstrap, tid, complete, timeout=120)
        again, after = begin_with(bootstrap, tid, topic, "after", n=8, init_timeout=90)
        again.commit_transaction(60)

        expected = (decided if outcome == "commit" else []) + after
        got = read_committed(bootstrap, topic, PARTITIONS, len(expected), timeout=90)
        assert sorted(got) == sorted(expected), "all or nothing, then the later transaction"
        for part in range(PARTITIONS):
            assert [v for q, v in got if q == part] == [v for q, v in expected if q == part]
    finally:
        if stopped is not None and stopped.alive():
            os.kill(stopped.pid, signal.SIGCONT)
        cluster.stop()


@pytest.mark.timeout(240)
def test_an_owner_killed_before_the_answered_batches_are_durable_aborts_the_commit(floe_bin, tmp_path):
    cluster = Cluster(floe_bin, tmp_path, lease_ms=3000, broker_flags=PACED,
                      proxy_flags=("--default-partitions", "1"))
    try:
        bootstrap = cluster.bootstrap
        topic, tid = "txn-lost", "txn-lost"
        create_topic(bootstrap, topic, PARTITIONS)
        coordinator, other = coordinator_and_other(cluster, tid)
        # Answered once sequenced: in the owners' memory until their next
        # paced flush; the other owner is killed before (or just after) it.
        p, _ = begin_with(bootstrap, tid, topic, "lost")
        other.kill9()
        # Its partitions move to the coordinator's broker, which cannot know
        # what the dead one answered: the commit must be aborted.
        with pytest.raises(confluent_kafka.KafkaException) as refused:
            p.commit_transaction(90)
        assert refused.value.args[0].txn_requires_abort(), refused.value
        assert scrape(f"http://{coordinator.admin}").get(
            "floe_broker_txn_commits_refused_total", 0) >= 1
        # librdkafka aborts with an epoch bump (InitProducerId), which
        # aborts the open transaction: the id is then Empty at a new epoch.
        p.abort_transaction(60)
        wait_state(bootstrap, tid, {"CompleteAbort", "Empty"}, timeout=60)
        del p

        again, after = begin_with(bootstrap, tid, topic, "after", n=8, init_timeout=90)
        again.commit_transaction(60)
        got = read_committed(bootstrap, topic, PARTITIONS, len(after), timeout=90)
        assert sorted(got) == sorted(after), "none of the aborted transaction"
    finally:
        cluster.stop()


def group_name(g):
    """A ListGroups entry's group id (kafka-python: a dict or a tuple)."""
    if isinstance(g, dict):
        return g["group_id"]
    return getattr(g, "group_id", None) or g[0]


@pytest.mark.timeout(180)
def test_each_proxy_lists_the_groups_and_transactions_it_coordinates(floe_bin, tmp_path):
    """Two proxies: ListGroups and ListTransactions asked of each (as admin
    clients do) name every group and transactional id once, at the proxy
    FindCoordinator names for it."""
    from test_transactions import admin

    cluster = Cluster(floe_bin, tmp_path, proxies=2,
                      proxy_flags=("--default-partitions", "1"))
    try:
        bootstrap = cluster.bootstrap
        topic = "txn-list-in"
        create_topic(bootstrap, topic, 1)
        tids = [f"txn-list-{i}" for i in range(8)]
        for tid in tids:
            txn_producer(bootstrap, tid, init_timeout=60)
        groups = [f"txn-list-g{i}" for i in range(8)]
        for g in groups:
            c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": g,
                                          "enable.auto.commit": False})
            c.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 1)], asynchronous=False)
            c.close()

        a = admin(bootstrap)
        try:
            # One entry per broker the client knows: each proxy.
            listed = a.list_transactions()
            proxies = sorted(listed)
            assert len(proxies) == 2, listed
            names = [t.transactional_id for ts in listed.values() for t in ts]
            assert sorted(n for n in names if n in tids) == sorted(tids), listed
            per_proxy = {b: [group_name(g) for g in a.list_groups(broker_ids=[b])] for b in proxies}
            named = [g for gs in per_proxy.values() for g in gs]
            assert sorted(g for g in named if g in groups) == sorted(groups), per_proxy
        finally:
            a.close()
        # `floe group list` through one proxy asks each of them.
        import json
        import subprocess
        out = subprocess.run([str(floe_bin), "group", "list", "--json", "--bootstrap", cluster.proxy.addr("kafka")],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        listed = [json.loads(line)["group"] for line in out.splitlines() if line.strip()]
        assert sorted(g for g in listed if g in groups) == sorted(groups), out
    finally:
        cluster.stop()


def scrape(admin_url):
    """`/metrics` as {name with labels: value}."""
    import urllib.request
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=5) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out


def wait_metric(admin_url, name, ok, timeout=60):
    """Scrapes until metric `name` (with its labels) satisfies `ok`."""
    deadline = time.time() + timeout
    while True:
        v = scrape(admin_url).get(name)
        if v is not None and ok(v):
            return v
        assert time.time() < deadline, f"{name} = {v}"
        time.sleep(0.2)


@pytest.mark.timeout(180)
def test_the_transaction_metrics_count_what_happened(txn_metrics_standalone):
    s = txn_metrics_standalone
    bootstrap, url = s.bootstrap, s.admin_url
    topic = "txn-metrics"
    lag = f'floe_broker_partition_lso_lag{{topic="{topic}",partition="0"}}'
    create_topic(bootstrap, topic, 1)
    p = txn_producer(bootstrap, "txn-metrics-1")
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=f"m{i}", partition=0)
    assert p.flush(30) == 0
    # The open transaction holds its five records back from read_committed.
    wait_metric(url, lag, lambda v: v == 5)
    wait_metric(url, "floe_broker_txn_open", lambda v: v >= 1)
    p.commit_transaction(30)
    wait_metric(url, lag, lambda v: v == 0)
    p.begin_transaction()
    p.produce(topic, value="aborted", partition=0)
    assert p.flush(30) == 0  # else nothing reaches the broker to abort
    p.abort_transaction(30)
    # A hanging transaction: aborted by its timeout.
    hang = txn_producer(bootstrap, "txn-metrics-2", **{"transaction.timeout.ms": 1500})
    hang.begin_transaction()
    hang.produce(topic, value="hangs", partition=0)
    assert hang.flush(30) == 0
    wait_metric(url, "floe_broker_txn_timed_out_total", lambda v: v >= 1)
    wait_metric(url, 'floe_broker_txn_completed_total{outcome="abort"}', lambda v: v >= 2)
    wait_metric(url, lag, lambda v: v == 0)
    m = scrape(url)
    assert m['floe_broker_txn_completed_total{outcome="commit"}'] >= 1, m
    # One marker per partition of each of the three transactions.
    assert m["floe_broker_txn_marker_writes_total"] >= 3, m
    assert "floe_broker_txn_marker_retries_total" in m, m
    count = [v for k, v in m.items() if k.startswith("floe_broker_txn_markers_duration_seconds_count")]
    assert count and count[0] >= 3, m


@pytest.fixture(scope="module")
def txn_metrics_standalone(floe_bin, tmp_path_factory):
    from conftest import Standalone
    s = Standalone(floe_bin, tmp_path_factory.mktemp("txn-metrics"))
    s.start()
    yield s
    s.stop()
