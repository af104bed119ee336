#!/usr/bin/env python3
"""Iceberg tables against the Parquet export, in one run (issue 44). Starts a
`floe standalone` (the binary of `FLOE_BIN`, else the release build) and:

- **catch-up throughput**: `--records` JSON records of about `--bytes` bytes
  are produced to three topics with nothing exported; then, `--rounds` times
  each, alternating, the topic `plain` (`export.enabled`) is exported from
  the start (a backfill) and the topic `table` (`table.format=iceberg`) is
  exported and committed from the start: records/s and MB/s of log (wall
  clock) until the whole log is in Parquet files, and until the whole log is
  in the table's current snapshot. Medians, and the ratio table / plain;
  likewise a third topic `upsert`, a table with `table.mode=upsert` (1,000
  keys: one row per key, the rest superseded by position deletes), against
  `table`;
- **steady load**: `--seconds` of 4 KiB records produced at `--rate` MB/s
  (split over `--producers` processes, as close as they get) to a third
  topic, a table with the default roll (30 s) and file size: the lag of the
  table behind the log (records and MB not in the current snapshot, sampled
  every second: median and worst), commits per minute, and the objects the
  table and its exports hold per GiB of data files;
- **compaction**: then `floe table compact` on that table: the files it
  wrote in place of how many, and how long it took.

Usage: FLOE_BIN=target/release/floe .venv/bin/python bench/tables.py [--records 400000] [--bytes 200]
       .venv/bin/python bench/tables.py --quick     (CI-sized: 20,000 records, 1 round, 10 s)
"""
import argparse
import concurrent.futures
import multiprocessing
import json
import os
import pathlib
import random
import shutil
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import confluent_kafka as ck  # noqa: E402
import confluent_kafka.admin as cka  # noqa: E402
from conftest import Standalone  # noqa: E402

INDEX = json.dumps([
    {"name": "id", "path": "$.id", "type": "int64"},
    {"name": "amount", "path": "$.amount", "type": "float64"},
    {"name": "customer", "path": "$.customer", "type": "string"},
])
PARTITIONS = 4


def floe_bin():
    found = os.environ.get("FLOE_BIN") or str(ROOT / "target" / "release" / "floe")
    if not pathlib.Path(found).exists():
        sys.exit(f"no floe binary at {found}: build it (cargo build --release) or set FLOE_BIN")
    return found


def get(url):
    return json.load(urllib.request.urlopen(url, timeout=30))


def metric(admin, name):
    for line in urllib.request.urlopen(f"{admin}/metrics", timeout=30).read().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def alter(bootstrap, topic, **configs):
    client = cka.AdminClient({"bootstrap.servers": bootstrap})
    entries = [cka.ConfigEntry(k.replace("__", "."), v, incremental_operation=cka.AlterConfigOpType.SET)
               for k, v in configs.items()]
    for f in client.incremental_alter_configs(
            [cka.ConfigResource(cka.ConfigResource.Type.TOPIC, topic, incremental_configs=entries)]).values():
        f.result(timeout=60)


def values(n, size, start=0):
    r = random.Random(start)
    letters = "abcdefghijklmnopqrstuvwxyz"
    for i in range(start, start + n):
        body = f'{{"id": {i}, "amount": {i % 1000 / 4}, "customer": "c{i % 97}", "note": "'
        pad = "".join(r.choices(letters, k=max(0, size - len(body) - 2)))
        yield f"k{i % 1000}".encode(), f'{body}{pad}"}}'.encode()


def steady_producer(bootstrap, topic, per_s, seconds, size, seed):
    """One producer process of the steady load: `per_s` records of `size`
    bytes a second (as close as it gets) for `seconds`; returns how many
    were acknowledged. The values' padding comes from a pool made once:
    drawing it per record held one process to about 10 MB/s."""
    r = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    pads = ["".join(r.choices(letters, k=size)) for _ in range(256)]
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                     "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000})
    acked = [0]

    def done(err, _m):
        if err is None:
            acked[0] += 1

    i = seed * 10**9
    start = time.monotonic()
    for sec in range(seconds):
        for _ in range(per_s):
            body = f'{{"id": {i}, "amount": {i % 1000 / 4}, "customer": "c{i % 97}", "note": "'
            value = f'{body}{pads[i % 256][:max(0, size - len(body) - 2)]}"}}'.encode()
            while True:
                try:
                    p.produce(topic, key=f"k{i % 1000}".encode(), value=value, on_delivery=done)
                    break
                except BufferError:
                    p.poll(0.01)
            i += 1
            if time.monotonic() - start > sec + 1:
                break
        p.poll(0)
        time.sleep(max(0.0, start + sec + 1 - time.monotonic()))
    p.flush(300)
    return acked[0]


def produce(bootstrap, topics, n, size):
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                     "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000})
    for key, value in values(n, size):
        for t in topics:
            while True:
                try:
                    p.produce(t, key=key, value=value)
                    break
                except BufferError:
                    p.poll(0.05)
    p.flush(300)


def ends(bootstrap, topic):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-tables"})
    try:
        return {p: c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(PARTITIONS)}
    finally:
        c.close()


def exported(admin, topic):
    s = get(f"{admin}/v1/topics/{topic}/exports")
    return {p["partition"]: p["exported_offset"] for p in s["partitions"]}, s["generation"]


def table_covered(admin, topic):
    """({partition: first offset not in the table}, export generation) of the current snapshot."""
    try:
        t = get(f"{admin}/iceberg/v1/namespaces/floe/tables/{topic}")
    except urllib.error.HTTPError:
        return {}, None
    m = t["metadata"]
    snap = next((s for s in m.get("snapshots", []) if s["snapshot-id"] == m.get("current-snapshot-id")), None)
    if snap is None:
        return {}, None
    offsets = {int(k): v for k, v in json.loads(snap["summary"].get("floe.offsets", "{}")).items()}
    return offsets, int(snap["summary"].get("floe.export-generation", -1))


def wait(done, what, timeout=1800):
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            sys.exit(f"{what}: not done after {timeout} s")
        time.sleep(0.05)


def store_objects(data_dir, prefixes):
    files, data_bytes = 0, 0
    for prefix in prefixes:
        for path in (data_dir / "store").glob(prefix + "/**/*"):
            if path.is_file() and "#" not in path.name:
                files += 1
                if path.suffix == ".parquet":
                    data_bytes += path.stat().st_size
    return files, data_bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--bytes", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=50.0, help="MB/s of the steady load")
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--producers", type=int, default=4, help="processes sharing the steady load")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the data folder (tens of GB after a full run)")
    a = ap.parse_args()
    if a.quick:
        a.records, a.rounds, a.seconds, a.rate, a.producers = 20_000, 1, 10, 5.0, 2
    binary = floe_bin()
    work = pathlib.Path(tempfile.mkdtemp(prefix="floe-bench-tables-"))
    s = Standalone(binary, work, name="bench", indexer_poll_ms=100)
    s.start()
    try:
        admin, kafka = s.admin_url, s.bootstrap
        common = {"export.index": INDEX, "export.roll.ms": "100"}
        topics_admin = cka.AdminClient({"bootstrap.servers": kafka})
        fs = topics_admin.create_topics(
            [cka.NewTopic(t, PARTITIONS, config=common) for t in ("plain", "table", "upsert")])
        for f in fs.values():
            f.result(timeout=60)
        t0 = time.time()
        produce(kafka, ["plain", "table", "upsert"], a.records, a.bytes)
        log_mb = a.records * (a.bytes + 4) / 1e6
        print(f"produced {a.records:,} records of ~{a.bytes} B to each topic in {time.time() - t0:.1f} s "
              f"({log_mb:.1f} MB of records each)")
        end_plain, end_table = ends(kafka, "plain"), ends(kafka, "table")
        end_of = {"table": end_table, "upsert": ends(kafka, "upsert")}
        rates = {"plain": [], "table": [], "upsert": []}
        alter(kafka, "plain", export__enabled="true")
        alter(kafka, "table", table__format="iceberg")
        alter(kafka, "upsert", table__format="iceberg", table__mode="upsert")
        # The first export of each (both at once) is not counted; then backfills, one at a time.
        wait(lambda: all(exported(admin, "plain")[0].get(p, 0) >= e for p, e in end_plain.items()), "plain")
        wait(lambda: all(table_covered(admin, "table")[0].get(p, 0) >= e for p, e in end_table.items()), "table")
        wait(lambda: all(table_covered(admin, "upsert")[0].get(p, 0) >= e for p, e in end_of["upsert"].items()),
             "upsert")
        for r in range(a.rounds):
            for topic in ("plain", "table", "upsert"):
                t0 = time.time()
                subprocess.run([binary, "indexer", "backfill", "--topic", topic, "--indexer", admin],
                               check=True, stderr=subprocess.DEVNULL)
                gen = exported(admin, topic)[1]
                if topic == "plain":
                    wait(lambda: all(exported(admin, "plain")[0].get(p, 0) >= e for p, e in end_plain.items()),
                         "plain")
                else:
                    def in_table():
                        offsets, g = table_covered(admin, topic)
                        return g == gen and all(offsets.get(p, 0) >= e for p, e in end_of[topic].items())
                    wait(in_table, topic)
                dt = time.time() - t0
                rates[topic].append(dt)
                print(f"round {r + 1}: {topic:5} {a.records / dt:,.0f} records/s, {log_mb / dt:.1f} MB/s ({dt:.2f} s)")
        med = {t: statistics.median(v) for t, v in rates.items()}
        print(f"catch-up (median of {a.rounds}): Parquet export {a.records / med['plain']:,.0f} records/s "
              f"({log_mb / med['plain']:.1f} MB/s); Iceberg table {a.records / med['table']:,.0f} records/s "
              f"({log_mb / med['table']:.1f} MB/s); table / export = {med['plain'] / med['table']:.2f}")
        print(f"catch-up (median of {a.rounds}): upsert table {a.records / med['upsert']:,.0f} records/s "
              f"({log_mb / med['upsert']:.1f} MB/s); upsert / append table = {med['table'] / med['upsert']:.2f}")

        # Steady load on a table with the default roll and file size.
        topics_admin.create_topics(
            [cka.NewTopic("steady", PARTITIONS, config={"table.format": "iceberg", "export.index": INDEX})]
        )["steady"].result(timeout=60)
        time.sleep(1)
        c0 = metric(admin, "floe_indexer_table_commits_total")
        size = 4096
        per_s = max(1, int(a.rate * 1e6 / size / a.producers))
        lag_records, lag_mb = [], []
        t_start = time.time()
        spawn = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(a.producers, mp_context=spawn) as pool:
            jobs = [pool.submit(steady_producer, kafka, "steady", per_s, a.seconds, size, k + 1)
                    for k in range(a.producers)]
            while not all(j.done() for j in jobs):
                tick = time.time()
                e = ends(kafka, "steady")
                covered, _ = table_covered(admin, "steady")
                behind = sum(max(0, e[q] - covered.get(q, 0)) for q in e)
                lag_records.append(behind)
                lag_mb.append(behind * size / 1e6)
                time.sleep(max(0.0, 1.0 - (time.time() - tick)))
            sent = sum(j.result() for j in jobs)
        elapsed = time.time() - t_start
        minutes = elapsed / 60
        commits = metric(admin, "floe_indexer_table_commits_total") - c0
        objects, data = store_objects(s.data_dir, ["tables/steady", "exports/steady"])
        print(f"steady: {sent * size / 1e6 / elapsed:.1f} MB/s produced for {elapsed:.0f} s by "
              f"{a.producers} producers (asked {a.rate} MB/s); table lag behind the log: median "
              f"{statistics.median(lag_records):,.0f} records ({statistics.median(lag_mb):.1f} MB), worst "
              f"{max(lag_records):,} ({max(lag_mb):.1f} MB); {commits / minutes:.1f} commits/min; "
              + (f"{objects} objects for {data / 2**30:.3f} GiB of data files "
                 f"({objects / (data / 2**30):,.0f} per GiB)" if data else "no data file yet"))

        # The table's small files of the load, compacted now (the indexer
        # does it by itself once an hour has ended).
        end = ends(kafka, "steady")
        wait(lambda: all(table_covered(admin, "steady")[0].get(q, 0) >= v for q, v in end.items()), "steady")
        t0 = time.time()
        out = subprocess.run([binary, "table", "compact", "steady", "--indexer", admin],
                             check=True, capture_output=True, text=True).stdout
        dt = time.time() - t0
        done = re.search(r"(\d+) files written in place of (\d+)", out)
        print(f"compaction: {done.group(1) if done else 0} files written in place of "
              f"{done.group(2) if done else 0} in {dt:.1f} s ({data / 1e6 / dt:.0f} MB/s of data files)")
    finally:
        s.stop()
        if a.keep:
            print(f"data kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
