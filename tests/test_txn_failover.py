"""The transaction coordinator's broker killed mid-commit, in a cluster of
processes (issue 14, docs/transactions.md "What survives what").

Two brokers: one holds the transactional id's coordinator shard, the other
owns some of the transaction's partitions. The other one is stopped
(SIGSTOP), so its markers cannot be written; EndTxn is answered once the
decision is durable (PrepareCommit / PrepareAbort), and the coordinator's
broker is killed with SIGKILL before its last marker. Once the stopped
broker runs again it takes the shard over, sends the markers again and
completes the transaction: a read_committed consumer sees every record of
a committed transaction and none of an aborted one (then the records of a
later transaction, so the LSO moved past it). No test hook in the broker."""

import os
import signal
import time

import pytest

from floe_cluster import Cluster
from test_cluster_failover import fnv1a_shard, owned, owned_shards
from test_transactions import create_topic, read_committed, txn_producer, wait_state

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 4


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
    cluster = Cluster(floe_bin, tmp_path, lease_ms=8000,
                      proxy_flags=("--default-partitions", "1", "--transactions", "true"))
    stopped = None
    try:
        bootstrap = cluster.bootstrap
        topic, tid = f"txn-fo-{outcome}", f"txn-fo-{outcome}"
        create_topic(bootstrap, topic, PARTITIONS)
        p = txn_producer(bootstrap, tid, init_timeout=60)
        p.begin_transaction()
        decided = [(i % PARTITIONS, f"decided-{i}") for i in range(20)]
        for part, value in decided:
            p.produce(topic, value=value, partition=part)
        assert p.flush(30) == 0

        shard = fnv1a_shard(tid)
        [coordinator] = [b for b in cluster.brokers if shard in owned_shards(b.admin)]
        [other] = [b for b in cluster.brokers if b is not coordinator]
        assert owned(other.admin) > 0, "the other broker owns some of the partitions"
        os.kill(other.pid, signal.SIGSTOP)
        stopped = other
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
        prepare = "PrepareCommit" if outcome == "commit" else "PrepareAbort"
        d = wait_state(bootstrap, tid, {prepare}, timeout=30)
        assert d.producer_id >= 0
        coordinator.kill9()
        os.kill(other.pid, signal.SIGCONT)
        stopped = None
        del p

        # The new coordinator (the other broker, once the shard moved)
        # completes the decided transaction; a new instance then commits.
        complete = "CompleteCommit" if outcome == "commit" else "CompleteAbort"
        wait_moved(bootstrap, tid, complete, timeout=120)
        again = txn_producer(bootstrap, tid, init_timeout=90)
        again.begin_transaction()
        after = [(i % PARTITIONS, f"after-{i}") for i in range(8)]
        for part, value in after:
            again.produce(topic, value=value, partition=part)
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
