"""Faults beyond kill -9 (issue 41): the object store misbehaving, a metadata
node's disk full or its fsync failing, long pauses (SIGSTOP) of the
metadata leader and of the indexer; each checked with the produce/consume
checker (tests/consistency.py) and the transaction checker
(tests/txn_checker.py) under real clients and real processes.

Each scenario draws its faults from a seeded generator: the seed is
printed and FLOE_FAULTS_SEED replays it. FLOE_FAULTS_SECONDS sets how long
each family runs (the long mode; CI runs a few seconds of each). Every run
adds a row to the table printed at the end (family, faults injected,
operations, anomalies by kind), and a failed run keeps its history as
JSON in the test's folder (the path is printed).
"""

import os
import random
import signal
import threading
import time

import pytest

import txn_checker
from consistency import History, check
from faults_store import (FaultS3Cluster, Runs, Tmpfs, fsync_shim, keep_history, long_mode, seconds, seed,
                          tmpfs_works)
from floe_cluster import Cluster, http_ok
from s3_cluster import Load, create_topic, read_confluent, read_kafka_python

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 6


@pytest.fixture(scope="module", autouse=True)
def table():
    yield
    print("\n" + Runs.table(), flush=True)


def run_seed(name):
    s = seed()
    print(f"\n[faults] {name}: seed {s} (FLOE_FAULTS_SEED={s} replays it)", flush=True)
    return s, random.Random(s)


def check_all(tmp_path, name, bootstrap, topic, loads, txn_topic=None, txn_load=None, timeout=180):
    """Reads `topic` back with two clients and `txn_topic` with two
    read_committed clients; returns ({kind: count}, operations), keeping the
    histories as JSON when anything is wrong."""
    first, ends = read_confluent(bootstrap, topic, PARTITIONS, timeout)
    second = read_kafka_python(bootstrap, topic, ends, timeout)
    acked, unacked = [], set()
    errors = []
    for load in loads:
        h = load.history({})
        acked += h.acked
        unacked |= h.unacked
        errors += load.errors
    report = check(History(acked=acked, unacked=unacked, reads={"confluent": first, "kafka-python": second}))
    anomalies = dict(report.counts())
    anomalies["client_error"] = len(errors)
    ops = {"writes_acked": report.acked}
    txn_report = None
    if txn_load is not None:
        reads = {"confluent": txn_checker.read_committed_all(bootstrap, txn_topic, PARTITIONS, timeout),
                 "kafka-python": txn_checker.read_committed_kafka_python(bootstrap, txn_topic, PARTITIONS,
                                                                         timeout)}
        th = txn_load.history(reads)
        txn_report = txn_checker.check(th)
        anomalies.update({f"txn_{k}": v for k, v in txn_report.counts().items()})
        ops.update({f"txns_{k}": v for k, v in txn_report.txns.items()})
    if any(anomalies.values()):
        data = {"writes": report.summary(), "client_errors": errors[:200],
                "acked": [list(w) for w in ([w.producer, w.seq, w.partition, w.offset, w.at] for w in acked)],
                "reads": {"confluent": [list(r) for r in ([r.partition, r.offset, r.producer, r.seq] for r in first)]}}
        if txn_report is not None:
            data["txn"] = th.to_json()
            data["txn_summary"] = txn_report.summary()
        keep_history(tmp_path, name, data)
    return anomalies, ops, report, txn_report


def assert_clean(anomalies, report, txn_report):
    msg = report.summary() + ("\n" + txn_report.summary() if txn_report else "")
    assert not any(anomalies.values()), f"anomalies {anomalies}\n{msg}"


# ------------------------------------------------------------------ the object store

# Compaction, merges, the sweeper and the orphan scan run every few
# seconds, so that they too read, write, list and delete through the faults.
STORE_FLAGS = ("--compaction-interval-ms", "2000", "--wal-compaction-entries", "16", "--orphan-grace-ms", "5000",
               "--orphan-scan-interval-ms", "3000", "--orphan-scan-age-ms", "15000")

STORE_RATES = {"slowdown": 0.04, "error500": 0.02, "error500_after": 0.02, "short_get": 0.03,
               "short_get_200": 0.03, "stale_list": 1.0, "precondition": 0.5}


@pytest.mark.timeout(600)
def test_store_faults_lose_nothing_and_a_killed_broker_too(floe_bin, tmp_path):
    """S3 answering 503 SlowDown and 500 (before and after doing the
    request), GETs cut short (the connection closed early, or a 200 whose
    body is short), listings that lag the writes, 412 on conditional
    requests, all at random while idempotent producers and transactional
    producers (commit and abort at random) write, and one broker killed
    with SIGKILL in the middle: nothing acknowledged is lost, duplicated or
    misplaced, no aborted record and no part of a transaction is visible at
    read_committed, no error reaches the application. The checks read
    everything back through the faulty store (the broker restarted reads
    its partitions from it)."""
    s, rng = run_seed("store")
    secs = seconds(12)
    cluster = FaultS3Cluster(floe_bin, tmp_path, rng, brokers=2, metas=3, broker_flags=STORE_FLAGS)
    try:
        create_topic(cluster.bootstrap, "plain", PARTITIONS)
        create_topic(cluster.bootstrap, "txns", PARTITIONS)
        load = Load(cluster.bootstrap, "plain", PARTITIONS, rate=150)
        txns = txn_checker.TxnLoad(cluster.bootstrap, "txns", PARTITIONS, rng, producers=2)
        load.wait_acked(100, also=cluster.brokers)
        txns.wait_committed(3)
        relay = cluster.relays[0]
        relay.set(**STORE_RATES)
        started = time.time()
        kills = 0
        next_kill = started + rng.uniform(0.3, 0.6) * secs
        while time.time() - started < secs:
            if time.time() >= next_kill:
                victim = rng.choice(cluster.brokers)
                victim.kill9()
                kills += 1
                time.sleep(rng.uniform(0.5, 2.0))
                victim.start()
                cluster.wait_ready(victim)
                next_kill = time.time() + max(secs / 3, 20)
            time.sleep(0.2)
        load.stop()
        txns.stop()
        # Every broker restarted: what they serve now comes from the store,
        # through the faults.
        for b in cluster.brokers:
            b.kill9()
            b.start()
        for b in cluster.brokers:
            cluster.wait_ready(b)
        anomalies, ops, report, txn_report = check_all(tmp_path, "store", cluster.bootstrap, "plain", [load],
                                                       "txns", txns)
        relay.clear()
        faults = dict(relay.counts)
        faults["broker_kill9"] = kills + len(cluster.brokers)
        ops.update({f"s3_{k}": v for k, v in relay.requests.items()})
        ops["s3_conditional"] = relay.conditional
        Runs.add("store", s, time.time() - started, faults, ops, anomalies)
        assert_clean(anomalies, report, txn_report)
        assert sum(faults.get(k, 0) for k in ("slowdown", "error500", "error500_after")) > 0, faults
        assert faults.get("short_get", 0) + faults.get("short_get_200", 0) > 0, faults
    finally:
        cluster.stop()
