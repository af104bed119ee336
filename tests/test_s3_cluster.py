"""A whole cluster on S3 (tests/s3_cluster.py: 3 metadata nodes, 3 brokers, 2
proxies, two moto endpoints behind fault relays), under load from idempotent
acks=all producers, through failures of the metadata service and a restart of
everything. Every run ends with the consistency check (nothing acknowledged
lost, nothing duplicated, offsets strictly increasing, two clients agree).

The figures printed (the longest time a partition took no acknowledged
write) are the ones docs/operations.md quotes: FLOE_LONG=1 runs each
scenario 5 times and prints the median. Nothing here is a timed assertion:
the bounds asserted are far above the figures, to catch a stall, not to
measure one.
"""

import time

import pytest

from s3_cluster import Load, S3Cluster, create_topic, median, repeats, verify

confluent_kafka = pytest.importorskip("confluent_kafka")
duckdb = pytest.importorskip("duckdb")

PARTITIONS = 12


@pytest.mark.timeout(300 * repeats())
def test_metadata_leader_killed_under_load_produce_pauses_and_goes_on(floe_bin, tmp_path):
    """Scenario 4: `kill -9` the Raft leader under load. The brokers keep
    their partitions (the new leader renews their leases before it expires
    any), produce stalls only while no leader can commit, and nothing
    acknowledged is lost."""
    pauses = []
    for run in range(repeats()):
        cluster = S3Cluster(floe_bin, tmp_path / f"run{run}")
        try:
            create_topic(cluster.bootstrap, "orders", PARTITIONS)
            load = Load(cluster.bootstrap, "orders", PARTITIONS, rate=400)
            load.wait_acked(400, also=cluster.brokers)
            leader = cluster.meta_leader()
            killed_at = time.time()
            cluster.metas[leader].kill9()
            load.wait_acked(1200, timeout=120, also=cluster.brokers)
            # The killed node comes back on its data and catches up.
            cluster.metas[leader].start()
            load.wait_acked(400, timeout=120, also=cluster.brokers)
            until = load.stop()
            gaps = load.max_gap(killed_at, until)
            pauses.append(max(gaps.values()))
            print(f"metadata leader {leader} killed: longest partition pause {pauses[-1]:.2f} s "
                  f"(per partition: {', '.join(f'{g:.2f}' for g in gaps.values())})", flush=True)
            report = verify(cluster.bootstrap, [load], "orders", PARTITIONS)
            print(f"checked: {report.summary()}", flush=True)
            assert max(gaps.values()) < 30, f"produce stalled: {gaps}\n{cluster.logs()}"
        finally:
            cluster.stop()
    print(f"metadata leader crash: median longest pause {median(pauses):.2f} s over {len(pauses)} runs")


def exported_rows(cluster, topic, tmp_path):
    """(rows, distinct (partition, offset)) over every Parquet file of `topic`'s exports."""
    files = []
    for (endpoint, key), _ in sorted(cluster.objects(f"exports/{topic}/").items()):
        if not key.endswith(".parquet"):
            continue
        s3 = cluster.servers[int(endpoint[1:])].client()
        local = tmp_path / f"export-{len(files)}.parquet"
        s3.download_file("floe", key, str(local))
        files.append(str(local))
    if not files:
        return 0, 0
    return duckdb.sql(f'SELECT count(*), count(DISTINCT (partition, "offset")) FROM read_parquet({files!r})'
                      ).fetchone()


def wait_exported(cluster, topic, total, tmp_path, timeout=90):
    """Waits until `topic`'s exports hold `total` rows, each offset once
    (fails at once on a row exported twice); returns (rows, distinct)."""
    deadline = time.time() + timeout
    while (rows := exported_rows(cluster, topic, tmp_path)) != (total, total):
        assert rows[0] == rows[1], f"a record exported twice: {rows}"
        assert time.time() < deadline, f"exports {rows} of {total} records\n{cluster.indexer.tail()}"
        time.sleep(0.5)
    return rows


def consume_and_commit(bootstrap, topic, group, n, timeout=60):
    """Reads `n` records of `topic` in consumer group `group`, commits, and
    returns the committed offsets {partition: offset}."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.time() + timeout
        while got < n:
            assert time.time() < deadline, f"read {got} of {n} in {timeout}s"
            for m in c.consume(num_messages=500, timeout=0.5):
                if not m.error():
                    got += 1
        c.commit(asynchronous=False)
        parts = [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
        return {tp.partition: tp.offset for tp in c.committed(parts, timeout=30)}
    finally:
        c.close()


def committed(bootstrap, topic, group):
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        parts = [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
        return {tp.partition: tp.offset for tp in c.committed(parts, timeout=30)}
    finally:
        c.close()


@pytest.mark.timeout(420)
def test_whole_cluster_restarted_on_its_dirs_and_store_keeps_everything(floe_bin, tmp_path):
    """Scenario 7: every process stopped, then started again on the same
    metadata folders and the same store: the log, committed offsets and
    exports are all there, and the exports stay exactly once (no row twice)
    while the indexer goes on after the restart."""
    cluster = S3Cluster(floe_bin, tmp_path, indexer=True, indexer_flags=("--indexer-poll-ms", "200"))
    try:
        create_topic(cluster.bootstrap, "orders", PARTITIONS, **{"export.enabled": "true",
                                                                 "export.roll.ms": "500"})
        load = Load(cluster.bootstrap, "orders", PARTITIONS, rate=400)
        load.wait_acked(2000, also=cluster.brokers)
        load.stop()
        assert not load.errors, load.errors[:5]
        offsets = consume_and_commit(cluster.bootstrap, "orders", "billing", 1000)
        assert sum(o for o in offsets.values() if o > 0) >= 1000, offsets
        deadline = time.time() + 60
        while exported_rows(cluster, "orders", tmp_path)[0] < 2000:
            assert time.time() < deadline, f"exports: {exported_rows(cluster, 'orders', tmp_path)}"
            time.sleep(0.5)
        objects_before = cluster.objects()

        # Every role stopped (SIGTERM), last started first, then started again.
        cluster.stop_roles()
        for r in cluster.roles():
            r.start()
        for r in cluster.roles():
            if r not in cluster.metas.values():
                cluster.wait_ready(r)

        # Nothing written before is gone (the store is immutable: same objects, same sizes).
        objects_after = cluster.objects()
        missing = {k for k in objects_before if k not in objects_after and not k[1].startswith("exports/")}
        assert not missing, f"{len(missing)} log objects gone after the restart: {sorted(missing)[:5]}"
        assert committed(cluster.bootstrap, "orders", "billing") == offsets
        more = Load(cluster.bootstrap, "orders", PARTITIONS, rate=400)
        more.wait_acked(1000, timeout=120, also=cluster.brokers)
        more.stop()
        report = verify(cluster.bootstrap, [load, more], "orders", PARTITIONS)
        total = report.acked + report.unacked_stored
        rows = wait_exported(cluster, "orders", total, tmp_path)
        print(f"whole-cluster restart: {total} records, {len(objects_after)} objects, exports {rows}")
    finally:
        cluster.stop()
