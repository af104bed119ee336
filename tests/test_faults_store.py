"""Faults beyond kill -9 (issue 41): the object store misbehaving, a metadata
node's disk full or its fsync failing, long pauses (SIGSTOP) of the
metadata leader and of the indexer; each checked with the produce/consume
checker (tests/consistency.py) and the transaction checker
(tests/txn_checker.py) under real clients and real processes.

Under the store faults and the pauses a share-group workload runs too
(tests/share_load.py: a producer and two ShareConsumers that accept,
release and reject, a dead-letter topic), drained once the faults are off
and checked with tests/share_checker.py.

Under the store faults a consume-transform-produce loop
(tests/txn_transformer.py) runs too, checked with `check_transform` (the
long mode, or FLOE_FAULTS_TRANSFORM=1: it costs CI half a minute).

Each scenario draws its faults from a seeded generator: the seed is
printed and FLOE_FAULTS_SEED replays it. FLOE_FAULTS_SECONDS sets how long
each family runs (the long mode; CI runs 8 s of store faults, one lost PUT,
at least two disk rounds and one pause of each kind). Every run
adds a row to the table printed at the end (family, faults injected,
operations, anomalies by kind), and a failed run keeps its history as
JSON in the test's folder (the path is printed).
"""

import os
import random
import re
import signal
import threading
import time
from collections import Counter

import pytest

import txn_checker
from consistency import History, check
from faults_store import (FaultS3Cluster, Runs, Tmpfs, Transformer, fsync_shim, keep_history, long_mode, seconds,
                          seed, tmpfs_works)
from floe_cluster import Cluster, http_ok
from s3_cluster import Load, create_topic, read_confluent, read_kafka_python, wait_leaders
from share_load import ShareLoad

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 6

ANSI = re.compile(r"\x1b\[[0-9;]*m")


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
    # A partition may be between owners a moment longer than its leader
    # shows (a broker just restarted): the watermarks are asked again.
    for attempt in range(10):
        try:
            first, ends = read_confluent(bootstrap, topic, PARTITIONS, timeout)
            break
        except confluent_kafka.KafkaException:
            if attempt == 9:
                raise
            time.sleep(1)
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
    # Sent again by librdkafka under a new epoch (consistency.py): counted, not a violation.
    ops = {"writes_acked": report.acked, "writes_resent": len(report.resent)}
    txn_report = None
    if txn_load is not None:
        reads = {"confluent": txn_checker.read_committed_all(bootstrap, txn_topic, PARTITIONS, timeout),
                 "kafka-python": txn_checker.read_committed_kafka_python(bootstrap, txn_topic, PARTITIONS,
                                                                         timeout)}
        th = txn_load.history(reads)
        txn_report = txn_checker.check(th)
        anomalies.update({f"txn_{k}": v for k, v in txn_report.counts().items()})
        ops.update({f"txns_{k}": v for k, v in txn_report.txns.items()})
        # What the transactional producers saw (each handled: retried, or
        # the transaction aborted), by error code.
        seen = Counter(m.group(1) for m in (re.search(r"code=(\w+)", e) for e in txn_load.errors()) if m)
        ops.update({f"txn_client_{k}": v for k, v in sorted(seen.items())})
    if any(anomalies.values()) or report.resent:
        data = {"writes": report.summary(), "client_errors": errors[:200],
                "acked": [list(w) for w in ([w.producer, w.seq, w.partition, w.offset, w.at] for w in acked)],
                "reads": {"confluent": [list(r) for r in ([r.partition, r.offset, r.producer, r.seq] for r in first)]},
                "sessions": [[r.partition, r.offset, *r.session] for r in second if r.session]}
        if txn_report is not None:
            data["txn"] = th.to_json()
            data["txn_summary"] = txn_report.summary()
        keep_history(tmp_path, name, data)
    return anomalies, ops, report, txn_report


def assert_clean(anomalies, report, txn_report, share_report=None):
    msg = report.summary() + ("\n" + txn_report.summary() if txn_report else "")
    if share_report is not None:
        msg += "\n" + share_report.summary()
    assert not any(anomalies.values()), f"anomalies {anomalies}\n{msg}"


def start_share(cluster, s):
    """The share-group workload (tests/share_load.py) through every proxy,
    drawing from a generator of its own (the scenario's faults stay those
    its seed gave before); `share.wait_flowing()` waits for it to be under
    way."""
    return ShareLoad(cluster.bootstrap, [p.addr("kafka") for p in cluster.proxies], random.Random(f"{s}-share"))


def finish_share(floe_bin, tmp_path, name, share, anomalies, ops):
    """Drains and checks the share workload (faults off); adds its counts
    to the run's; returns its report."""
    t0 = time.time()
    more, share_ops, share_report = share.finish(floe_bin, tmp_path, name)
    anomalies.update(more)
    ops.update(share_ops)
    ops["share_finish_s"] = round(time.time() - t0, 1)
    if not share_report.ok:
        print(f"[faults] {name}: share groups: {share_report.summary()}", flush=True)
    return share_report


# ------------------------------------------------------------------ the object store

# Compaction, merges, the sweeper and the orphan scan run every few
# seconds, so that they too read, write, list and delete through the faults.
STORE_FLAGS = ("--compaction-interval-ms", "2000", "--wal-compaction-entries", "16", "--orphan-grace-ms", "5000",
               "--orphan-scan-interval-ms", "3000", "--orphan-scan-age-ms", "15000")

STORE_RATES = {"slowdown": 0.04, "error500": 0.02, "error500_after": 0.02, "short_get": 0.03,
               "short_get_200": 0.03, "stale_list": 1.0, "precondition": 0.5}


XF_PARTITIONS = 3


def finish_transform(bootstrap, xf):
    """Lets the consume-transform-produce loop consume everything its input
    holds, then stops it; returns whether it got there."""
    ends = {}
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "xf-ends"})
    deadline = time.time() + 60
    try:
        for p in range(XF_PARTITIONS):
            while p not in ends:
                try:
                    _, ends[p] = c.get_watermark_offsets(confluent_kafka.TopicPartition("xf-in", p), timeout=30,
                                                         cached=False)
                except confluent_kafka.KafkaException:
                    if time.time() >= deadline:
                        raise
                    time.sleep(0.5)
    finally:
        c.close()
    done = xf.wait_done(ends)
    xf.stop()
    return done, ends


def check_transform(tmp_path, bootstrap, xf, feed, done, ends):
    """The consume-transform-produce loop's result: ({kind: count}, operations)."""
    deadline = time.time() + 60
    while True:
        try:
            committed = xf.committed()
            break
        except confluent_kafka.KafkaException:
            # The group's coordinator moving after the restarts.
            if time.time() >= deadline:
                raise
            time.sleep(0.5)
    inputs = txn_checker.read_committed_all(bootstrap, "xf-in", XF_PARTITIONS, group="xf-check-in")
    outputs = txn_checker.read_committed_all(bootstrap, "xf-out", XF_PARTITIONS, group="xf-check-out")
    v = txn_checker.check_transform(committed, [(r.partition, r.offset, r.value) for r in inputs],
                                    [(r.partition, r.value) for r in outputs])
    anomalies = {f"xf_{k}": len(x) for k, x in v.items()}
    anomalies["xf_stalled"] = 0 if done else 1
    anomalies["client_error"] = len(feed.errors)
    if any(anomalies.values()):
        keep_history(tmp_path, "transform", {"violations": v, "committed": committed, "ends": ends,
                                             "exits": xf.exits(20), "feed_errors": feed.errors[:50]})
        print(f"[faults] transform: {v}, committed {committed} of {ends}", flush=True)
    ops = {"xf_inputs": len(inputs), "xf_outputs": len(outputs), "xf_txns": xf.commits(),
           "xf_restarts": xf.restarts}
    return anomalies, ops


@pytest.mark.timeout(900 + 3 * seconds(0))
def test_store_faults_lose_nothing_and_a_killed_broker_too(floe_bin, tmp_path):
    """S3 answering 503 SlowDown and 500 (before and after doing the
    request), GETs cut short (the connection closed early, or a 200 whose
    body is short), listings that lag the writes, 412 on conditional
    requests, all at random while idempotent producers and transactional
    producers (commit and abort at random) write, a consume-transform-
    produce loop runs in transactions (the long mode, or
    FLOE_FAULTS_TRANSFORM=1), and one broker killed with SIGKILL
    in the middle: nothing acknowledged is lost, duplicated or misplaced,
    no aborted record and no part of a transaction is visible at
    read_committed, the transform's output holds each input it committed
    exactly once, no error reaches the application. The checks read
    everything back through the faulty store (the broker restarted reads
    its partitions from it)."""
    s, rng = run_seed("store")
    secs = seconds(8)
    # The transform costs CI about half a minute (its process, its group,
    # its drain and two more readers): the long mode runs it, and
    # FLOE_FAULTS_TRANSFORM=1 in a short run.
    with_transform = long_mode() or bool(os.environ.get("FLOE_FAULTS_TRANSFORM"))
    cluster = FaultS3Cluster(floe_bin, tmp_path, rng, brokers=2, metas=3, broker_flags=STORE_FLAGS)
    xf = share = None
    try:
        create_topic(cluster.bootstrap, "plain", PARTITIONS)
        create_topic(cluster.bootstrap, "txns", PARTITIONS)
        share = start_share(cluster, s)
        load = Load(cluster.bootstrap, "plain", PARTITIONS, rate=150)
        txns = txn_checker.TxnLoad(cluster.bootstrap, "txns", PARTITIONS, rng, producers=2)
        if with_transform:
            create_topic(cluster.bootstrap, "xf-in", XF_PARTITIONS)
            create_topic(cluster.bootstrap, "xf-out", XF_PARTITIONS)
            feed = Load(cluster.bootstrap, "xf-in", XF_PARTITIONS, rate=30)
            xf = Transformer(cluster.bootstrap, "xf-in", "xf-out", "xf-g", "xf-t", tmp_path)
        load.wait_acked(100, also=cluster.brokers)
        txns.wait_committed(3)
        share.wait_flowing()
        deadline = time.time() + 90
        while xf and xf.commits() < 1:
            assert time.time() < deadline, f"the transformer committed nothing in 90 s: {xf.exits()}"
            xf.watch()
            time.sleep(0.1)
        relay = cluster.relays[0]
        relay.set(**STORE_RATES)
        started = time.time()
        kills = 0
        next_kill = started + rng.uniform(0.3, 0.6) * secs
        while time.time() - started < secs:
            if xf:
                xf.watch()
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
        share.stop()
        if xf:
            feed.stop()
            # The transform consumes what is left, still through the faults.
            xf_done, xf_ends = finish_transform(cluster.bootstrap, xf)
        # Every broker restarted: what they serve now comes from the store,
        # through the faults.
        for b in cluster.brokers:
            b.kill9()
            b.start()
        for b in cluster.brokers:
            cluster.wait_ready(b)
        for topic in ("plain", "txns", *(("xf-in", "xf-out") if xf else ())):
            wait_leaders(cluster.bootstrap, topic, PARTITIONS if topic in ("plain", "txns") else XF_PARTITIONS)
        anomalies, ops, report, txn_report = check_all(tmp_path, "store", cluster.bootstrap, "plain", [load],
                                                       "txns", txns)
        if xf:
            more, xf_ops = check_transform(tmp_path, cluster.bootstrap, xf, feed, xf_done, xf_ends)
            anomalies["client_error"] += more.pop("client_error")
            anomalies.update(more)
            ops.update(xf_ops)
        relay.clear()
        faults = dict(relay.counts)
        faults["broker_kill9"] = kills + len(cluster.brokers)
        ops.update({f"s3_{k}": v for k, v in relay.requests.items()})
        ops["s3_conditional"] = relay.conditional
        # The share group drained with the faults off, on brokers that all
        # restarted since its records were acknowledged (their share state
        # restored from what the old owners wrote).
        elapsed = time.time() - started
        share_report = finish_share(floe_bin, tmp_path, "store", share, anomalies, ops)
        Runs.add("store", s, elapsed, faults, ops, anomalies)
        assert_clean(anomalies, report, txn_report, share_report)
        assert sum(faults.get(k, 0) for k in ("slowdown", "error500", "error500_after")) > 0, faults
        assert faults.get("short_get", 0) + faults.get("short_get_200", 0) > 0, faults
        if xf:
            assert ops["xf_inputs"] > 0 and ops["xf_txns"] > 0, ops
    finally:
        if xf:
            xf.stop()
        if share:
            share.close()
        cluster.stop()


def test_a_lost_acknowledged_put_is_detected_never_served_wrong(floe_bin, tmp_path):
    """A PUT of a WAL object that the store acknowledges and never stores
    (S3 itself never does this for a PUT it answered 200): Floe acknowledged
    its records, and cannot read them back. What it guarantees is detection:
    once the broker has to read them from the store (after a restart), a
    reader gets every record before the missing object, then nothing (no
    record skipped over, none served wrong, none made up), the broker logs
    an error naming the missing object, the records after it are read back
    exactly as acknowledged by a reader that seeks past it, and producing
    goes on."""
    s, rng = run_seed("lost-put")
    cluster = FaultS3Cluster(floe_bin, tmp_path, rng, brokers=1, metas=1)
    try:
        create_topic(cluster.bootstrap, "lost", 1)
        relay = cluster.relays[0]
        relay.lost_put_prefix = "wal/"
        load = Load(cluster.bootstrap, "lost", 1, rate=100)
        load.wait_acked(150)
        relay.lose_next(1)
        deadline = time.time() + 30
        while not relay.lost:
            assert time.time() < deadline, "no WAL object written in 30 s"
            time.sleep(0.05)
        load.wait_acked(150)
        load.stop()
        assert not load.errors, load.errors[:5]
        [lost_key] = relay.lost
        broker = cluster.brokers[0]
        broker.kill9()
        broker.start()
        cluster.wait_ready(broker)
        acked = {w.offset: (w.producer, w.seq) for w in load.acked}
        end = max(acked) + 1

        def consumer(offset):
            c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "lost-check",
                                          "enable.auto.commit": False})
            c.assign([confluent_kafka.TopicPartition("lost", 0, offset)])
            return c

        def hole_in_log():
            """(first, last offset, line) of the missing object the broker logged, or None."""
            for line in reversed(ANSI.sub("", broker.tail(400)).splitlines()):
                if "missing from the store" in line:
                    first = re.search(r"first_offset=(\d+)", line)
                    last = re.search(r"last_offset=(\d+)", line)
                    if first and last:
                        return int(first.group(1)), int(last.group(1)), line
            return None

        from consistency import decode
        # From the start: every record up to the missing object, then
        # nothing (watched for 2 s more once the reader is at it: it asks
        # again every few hundred ms and gets KAFKA_STORAGE_ERROR).
        c = consumer(0)
        got, hole, settle = [], None, None
        deadline = time.time() + 60
        try:
            while time.time() < deadline:
                for m in c.consume(500, 0.3):
                    if not m.error():
                        got.append((m.offset(), m.value()))
                hole = hole or hole_in_log()
                if hole and len(got) >= hole[0]:
                    settle = settle or time.time() + 2
                    if time.time() >= settle:
                        break
        finally:
            c.close()
        assert hole, f"the broker logged no missing object:\n{broker.tail(20)}"
        first, last, line = hole
        assert lost_key.rsplit("/", 1)[-1] in line, f"the object logged is not the lost one ({lost_key}): {line}"
        assert "partition=" in line, line
        offsets = [o for o, _ in got]
        assert offsets == list(range(first)), \
            f"a reader skipped over the missing object ({first}..{last}), went back or stopped early: " \
            f"{len(offsets)} records, up to {offsets[-1] if offsets else None}"
        wrong = [(o, decode(v)) for o, v in got if decode(v) != acked.get(o)]
        assert not wrong, f"records served that are not the ones acknowledged there: {wrong[:5]}"
        assert last + 1 < end, f"the missing object ({first}..{last}) is the last: nothing after it to read"
        # The records after the missing object, read back by a reader that
        # seeks past it, exactly as acknowledged.
        c = consumer(last + 1)
        after = []
        deadline = time.time() + 60
        try:
            while time.time() < deadline and len(after) < end - last - 1:
                after += [(m.offset(), m.value()) for m in c.consume(500, 0.3) if not m.error()]
        finally:
            c.close()
        assert [o for o, _ in after] == list(range(last + 1, end))
        assert all(decode(v) == acked[o] for o, v in after), "a record after the missing object differs"
        unreadable = last + 1 - first
        # Producing goes on.
        more = Load(cluster.bootstrap, "lost", 1, rate=100)
        more.wait_acked(50, timeout=60)
        more.stop()
        assert not more.errors, more.errors[:5]
        Runs.add("store: lost PUT", s, 0, {"lost_put": 1}, {"writes_acked": len(acked)},
                 {"unreadable_acked_detected": unreadable})
        print(f"[faults] lost PUT {lost_key}: offsets {first}..{last} unreadable ({unreadable} "
              f"acknowledged records), read back before and after it", flush=True)
    finally:
        cluster.stop()


# ------------------------------------------------------------------ disks of the metadata nodes

def start_loads(cluster, rng):
    """The idempotent load on "plain" and one transactional producer on
    "txns", once both are under way."""
    load = Load(cluster.bootstrap, "plain", PARTITIONS, rate=150)
    txns = txn_checker.TxnLoad(cluster.bootstrap, "txns", PARTITIONS, rng, producers=1)
    load.wait_acked(100, also=cluster.brokers)
    txns.wait_committed(3)
    return load, txns


def meta_state(cluster, i):
    """'exited', or the node's Raft state as `floe meta status` gives it ('gone' if it does not answer)."""
    if not cluster.metas[i].alive():
        return "exited"
    st = cluster.meta_status()
    return st[i][0] if i in st else "gone"


def wait_stopped_or_refusing(cluster, i, timeout=30):
    """Waits until node `i` exited, or answers but is not the leader and is
    not ready (`/readyz`); returns what it is and how long that took."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        state = meta_state(cluster, i)
        if state == "exited":
            return state, time.time() - t0
        if state != "Leader" and not http_ok(f"http://{cluster.metas[i].addr('meta')}/readyz"):
            return f"refusing ({state})", time.time() - t0
        time.sleep(0.2)
    return f"still {meta_state(cluster, i)}", time.time() - t0


def last_log(cluster, i):
    """Node `i`'s last log index as it reports it (None: no answer)."""
    m = re.search(r"last_log (\d+)", cluster.meta_status_text(cluster.metas[i].addr("meta")))
    return int(m.group(1)) if m else None


def keeps_persisting(cluster, i, timeout=15):
    """Whether node `i`, still a leader or follower on a full disk, goes on
    writing its log: redb, the log store, reuses the pages its purged
    entries freed inside its file, so a full disk stops a node only once
    its file must grow. A node whose log advances persists what it
    acknowledges; one that stays up while its log stands still (and the
    cluster's goes on) would be the fault the scenario looks for."""
    first = last_log(cluster, i)
    deadline = time.time() + timeout
    while time.time() < deadline:
        time.sleep(0.5)
        now = last_log(cluster, i)
        if first is not None and now is not None and now > first:
            return meta_state(cluster, i) in ("Leader", "Follower")
        if meta_state(cluster, i) == "exited":
            return True
    return False


def test_a_metadata_node_whose_disk_fills_or_whose_fsync_fails_stops(floe_bin, tmp_path):
    """Each metadata node's data folder on a small tmpfs of its own, and an
    LD_PRELOAD shim whose fsync fails with EIO on demand. In turn, under
    idempotent and transactional load: the leader's disk filled, a
    follower's disk filled, the leader's fsync failing, a follower's fsync
    failing. Each time the node must stop (or refuse: not the leader, not
    ready) rather than go on acknowledging what it could not persist, the
    cluster must go on with the other two (writes acknowledged meanwhile),
    and the node, given its disk back and started again on its folder,
    must rejoin. In the end nothing acknowledged is lost, no transaction is
    torn or lost, and the three nodes agree on one leader."""
    if not tmpfs_works(tmp_path):
        pytest.skip("cannot mount a tmpfs here (needs root and a container that allows mount)")
    shim = fsync_shim(tmp_path)
    if shim is None:
        pytest.skip("no C compiler for the fsync shim")
    s, rng = run_seed("disk")
    secs = seconds(8)
    disks = {i: Tmpfs(tmp_path / f"m{i}", "32m") for i in (1, 2, 3)}
    triggers = {i: tmp_path / f"fsync-fails-m{i}" for i in (1, 2, 3)}

    def env(name):
        if name.startswith("meta"):
            i = int(name[4:])
            return {"LD_PRELOAD": str(shim), "FLOE_TEST_FSYNC_FAIL": str(triggers[i])}
        return {}

    cluster = None
    try:
        cluster = Cluster(floe_bin, tmp_path, metas=3, brokers=2, role_env=env)
        create_topic(cluster.bootstrap, "plain", PARTITIONS)
        create_topic(cluster.bootstrap, "txns", PARTITIONS)
        load, txns = start_loads(cluster, rng)
        started = time.time()
        faults, outcomes, anomalies = {}, {}, {"node_lingers": 0, "cluster_stalled": 0, "no_rejoin": 0}
        # Every (node, fault) pair in turn; CI runs 8 s and at least two
        # rounds, both faults and both roles, which two first drawn from
        # the seed.
        pairs = [("leader", "disk_full"), ("follower", "fsync_eio"), ("leader", "fsync_eio"),
                 ("follower", "disk_full")]
        if rng.random() < 0.5:
            pairs = pairs[2:] + pairs[:2]
        least = 4 if long_mode() else 2
        rounds = 0
        while rounds < least or time.time() - started < secs:
            who, kind = pairs[rounds % 4]
            rounds += 1
            leader = cluster.meta_leader()
            i = leader if who == "leader" else rng.choice([j for j in cluster.metas if j != leader])
            name = f"{who}_{kind}"
            faults[name] = faults.get(name, 0) + 1
            if kind == "disk_full":
                if disks[i].fill() == 0:
                    faults["disk_full_already"] = faults.get("disk_full_already", 0) + 1
            else:
                triggers[i].touch()
            # The node must persist something to notice: the load commits
            # a metadata entry every flush, and a topic is created now.
            try:
                create_topic(cluster.bootstrap, f"during-{rounds}", 1)
            except confluent_kafka.KafkaException as e:
                # A retried creation whose first attempt was committed.
                assert e.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS, e
            state, took = wait_stopped_or_refusing(cluster, i)
            outcomes.setdefault(name, []).append(f"{state} after {took:.1f} s")
            if state.startswith("still") and kind == "disk_full" and keeps_persisting(cluster, i):
                # Its log store had room inside its file: it persists.
                outcomes[name][-1] += ", its log still written"
            elif state.startswith("still"):
                # Alive and ready though it cannot persist: a probe would
                # never restart it (found on main: Raft "Shutdown", /readyz 200).
                anomalies["node_lingers"] += 1
            # The other two go on.
            try:
                load.wait_acked(100, timeout=60, also=cluster.brokers)
                txns.wait_committed(2, timeout=60)
            except AssertionError as e:
                anomalies["cluster_stalled"] += 1
                print(f"[faults] {name} on meta{i}: the cluster stalled: {e}", flush=True)
            # Its disk back, started again on its folder.
            disks[i].free()
            triggers[i].unlink(missing_ok=True)
            cluster.metas[i].kill9()
            cluster.metas[i].start()
            try:
                cluster.wait_meta_member(i, timeout=60)
                deadline = time.time() + 60
                while meta_state(cluster, i) not in ("Follower", "Leader"):
                    assert time.time() < deadline, f"meta{i} is {meta_state(cluster, i)}"
                    time.sleep(0.2)
            except AssertionError as e:
                anomalies["no_rejoin"] += 1
                print(f"[faults] meta{i} did not rejoin after {name}: {e}\n{cluster.metas[i].tail()}", flush=True)
            print(f"[faults] {name} on meta{i}: {outcomes[name][-1]}", flush=True)
        load.stop()
        txns.stop()
        st = cluster.meta_status()
        leaders = {v[1] for v in st.values()}
        if len(st) != 3 or len(leaders) != 1:
            anomalies["no_rejoin"] += 1
        more, ops, report, txn_report = check_all(tmp_path, "disk", cluster.bootstrap, "plain", [load], "txns", txns)
        anomalies.update(more)
        for k, v in outcomes.items():
            ops[k] = "; ".join(v)
        Runs.add("disk", s, time.time() - started, faults, ops, anomalies)
        assert_clean(anomalies, report, txn_report)
        assert len(st) == 3 and len(leaders) == 1, st
    finally:
        if cluster:
            cluster.stop()
        for d in disks.values():
            d.close()


# ------------------------------------------------------------------ pauses

def test_long_pauses_of_the_metadata_leader_and_of_the_indexer(floe_bin, tmp_path):
    """A GC-like stop: the metadata leader SIGSTOPped for several seconds
    in the middle of commits under idempotent and transactional load, then
    SIGCONT (it comes back as a deposed leader); and the indexer stopped so
    in the middle of an export. Nothing acknowledged is lost, no
    transaction torn, and afterwards the exports hold each committed
    offset once: rows = distinct (partition, offset) = every record."""
    import duckdb

    s, rng = run_seed("pause")
    secs = seconds(10)
    cluster = Cluster(floe_bin, tmp_path, metas=3, brokers=2, indexer=True,
                      indexer_flags=("--indexer-poll-ms", "200"))
    stopped = []
    share = None
    try:
        create_topic(cluster.bootstrap, "plain", PARTITIONS, **{"export.enabled": "true", "export.roll.ms": "500"})
        create_topic(cluster.bootstrap, "txns", PARTITIONS)
        share = start_share(cluster, s)
        load, txns = start_loads(cluster, rng)
        share.wait_flowing()
        started = time.time()
        faults = {"meta_leader_sigstop": 0, "indexer_sigstop": 0}
        paused = []
        while faults["meta_leader_sigstop"] < 1 or time.time() - started < secs:
            for target in ("meta", "indexer"):
                if target == "meta":
                    role = cluster.metas[cluster.meta_leader()]
                else:
                    role = cluster.indexer
                    # Aim at an export in progress: an intent pending.
                    deadline = time.time() + 5
                    while time.time() < deadline:
                        try:
                            import json
                            import urllib.request
                            with urllib.request.urlopen(f"http://{role.admin}/v1/topics/plain/exports",
                                                        timeout=2) as r:
                                if any(p["pending"] for p in json.load(r)["partitions"]):
                                    break
                        except OSError:
                            pass
                        time.sleep(0.05)
                # Longer than a broker's lease (2 s) and many election
                # timeouts; CI pauses less long.
                pause = rng.uniform(4, 8) if long_mode() else rng.uniform(3, 4.5)
                os.kill(role.pid, signal.SIGSTOP)
                stopped.append(role)
                time.sleep(pause)
                os.kill(role.pid, signal.SIGCONT)
                stopped.remove(role)
                faults[f"{target}_{'leader_' if target == 'meta' else ''}sigstop"] += 1
                paused.append(round(pause, 1))
                load.wait_acked(100, timeout=90, also=cluster.brokers)
                txns.wait_committed(2, timeout=90)
        load.stop()
        txns.stop()
        share.stop()
        anomalies, ops, report, txn_report = check_all(tmp_path, "pause", cluster.bootstrap, "plain", [load],
                                                       "txns", txns)
        total = report.acked + report.unacked_stored
        store = tmp_path / "store" / "exports" / "plain"
        deadline = time.time() + 120
        rows = (0, 0)
        while time.time() < deadline:
            files = sorted(str(p) for p in store.rglob("*.parquet")) if store.exists() else []
            if files:
                rows = duckdb.sql(f'SELECT count(*), count(DISTINCT (partition, "offset")) '
                                  f'FROM read_parquet({files!r})').fetchone()
            if rows[0] != rows[1] or rows[1] >= total:
                break
            time.sleep(0.5)
        anomalies["export_row_twice"] = rows[0] - rows[1]
        anomalies["export_missing"] = max(0, total - rows[1])
        ops["export_rows"] = rows[0]
        ops["pauses_s"] = paused
        elapsed = time.time() - started
        share_report = finish_share(floe_bin, tmp_path, "pause", share, anomalies, ops)
        Runs.add("pause", s, elapsed, faults, ops, anomalies)
        assert_clean(anomalies, report, txn_report, share_report)
    finally:
        for role in stopped:
            os.kill(role.pid, signal.SIGCONT)
        if share:
            share.close()
        cluster.stop()
