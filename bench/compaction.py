#!/usr/bin/env python3
"""Log compaction figures (issue 16): keys per second compacted, bytes
reclaimed, and the key map's memory per million keys.

Starts `floe standalone` (the binary of `FLOE_BIN`, else the release build) on
a fresh data dir with ports chosen by the system and `--cleaner-map-bytes` of
`--map-bytes`, creates a compacted topic with `min.compaction.lag.ms` of an
hour (nothing cleanable), produces `--keys` keys `--rounds` times each
(`--size`-byte values, batches of `--batch` records of consecutive keys), waits
for the log to be segmented, then sets the lag to 0 and times the cleaner's job
from there to its last "log cleaned" line (the one that reaches the log's end).

Printed, from the cleaner's own log lines: passes, keys mapped per pass (the
most), records dropped, bytes before and after (reclaimed), the job's wall
time, records and distinct keys cleaned per second, and the map's memory per
million keys (`--map-bytes` / keys per full pass x 10^6) with the key space one
GiB of map holds in one pass. The process's peak RSS (VmHWM) is printed too.

Usage: FLOE_BIN=target/release/floe python bench/compaction.py [--keys 200000]
"""

import argparse
import os
import pathlib
import re
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import confluent_kafka as ck  # noqa: E402
import confluent_kafka.admin  # noqa: E402

from conftest import Standalone  # noqa: E402

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def passes(log_path):
    out = []
    for line in ANSI.sub("", log_path.read_text(errors="replace")).splitlines():
        if "log cleaned" not in line:
            continue
        f = dict(re.findall(r"(\w+)=(\d+)", line))
        out.append({k: int(v) for k, v in f.items()})
    return out


def log_size(bootstrap, topic):
    """The partition's size from DescribeLogDirs (kafka-python)."""
    from kafka.admin import KafkaAdminClient

    a = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        total = 0
        for broker in a.describe_log_dirs():
            for d in broker["log_dirs"]:
                for t in d.get("topics", []):
                    if t.get("name") == topic:
                        total += sum(p.get("partition_size", 0) for p in t.get("partitions", []))
        return total
    finally:
        a.close()


def peak_rss(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--map-bytes", type=int, default=128 << 20)
    ap.add_argument("--timeout", type=float, default=1800)
    a = ap.parse_args()
    floe_bin = os.environ.get("FLOE_BIN", str(ROOT / "target" / "release" / "floe"))
    with tempfile.TemporaryDirectory() as work:
        s = Standalone(floe_bin, work, cleaner_map_bytes=a.map_bytes, compaction_interval_ms=200)
        s.start()
        try:
            topic = "bench-compact"
            admin = ck.admin.AdminClient({"bootstrap.servers": s.bootstrap})
            admin.create_topics([ck.admin.NewTopic(topic, 1, 1, config={
                "cleanup.policy": "compact", "min.compaction.lag.ms": "3600000",
                "min.cleanable.dirty.ratio": "0.01", "segment.ms": "100"})])[topic].result(30)
            p = ck.Producer({"bootstrap.servers": s.bootstrap, "linger.ms": 5,
                             "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000})
            value = b"v" * a.size
            n = 0
            t0 = time.perf_counter()
            for r in range(a.rounds):
                for k in range(a.keys):
                    while True:
                        try:
                            p.produce(topic, value, key=b"key-%09d" % k)
                            break
                        except BufferError:
                            p.poll(0.05)
                    n += 1
                    if n % a.batch == 0:
                        p.flush(60)
            p.produce(topic, b"end", key=b"key-end")
            assert p.flush(120) == 0
            produced_s = time.perf_counter() - t0
            end = n  # the offset of key-end
            # Let the WAL ranges become segments (segment.ms 100, compaction every 200 ms).
            time.sleep(5)
            before = len(passes(s.log_path))
            size_before = log_size(s.bootstrap, topic)
            res = confluent_kafka.admin.ConfigResource(
                confluent_kafka.admin.ConfigResource.Type.TOPIC, topic, incremental_configs=[
                    confluent_kafka.admin.ConfigEntry(
                        "min.compaction.lag.ms", "0",
                        incremental_operation=confluent_kafka.admin.AlterConfigOpType.SET)])
            admin.incremental_alter_configs([res])[res].result(30)
            t0 = time.perf_counter()
            deadline = t0 + a.timeout
            done = None
            while time.perf_counter() < deadline:
                ps = passes(s.log_path)[before:]
                if ps and ps[-1].get("cleaned_to", 0) >= end:
                    done = time.perf_counter() - t0
                    break
                time.sleep(0.05)
            ps = passes(s.log_path)[before:]
            rss = peak_rss(s.pid)
            time.sleep(1)
            size_after = log_size(s.bootstrap, topic)
        finally:
            s.stop()
    records = a.keys * a.rounds + 1
    keys_per_pass = max((x.get("keys", 0) for x in ps), default=0)
    full = len(ps) > 1
    dropped = sum(x.get("records_dropped", 0) for x in ps)
    b_before = sum(x.get("bytes_before", 0) for x in ps)
    b_after = sum(x.get("bytes_after", 0) for x in ps)
    print(f"produced {records} records ({a.keys} keys x {a.rounds}, {a.size} B values) in {produced_s:.1f}s")
    if done is None:
        print(f"the job did not reach the end within {a.timeout}s; passes so far: {len(ps)}")
        return 1
    print(f"job: {len(ps)} passes in {done:.2f}s; keys per pass at most {keys_per_pass}"
          f"{' (map full)' if full else ''}; records dropped {dropped}")
    print(f"log size {size_before} -> {size_after} B: reclaimed {size_before - size_after} "
          f"({(size_before - size_after) / max(size_before, 1):.1%}); segments rewritten by the passes "
          f"{b_before} -> {b_after} B")
    print(f"records cleaned per second {records / done:,.0f}; distinct keys per second {a.keys / done:,.0f}")
    if full and keys_per_pass:
        per_million = a.map_bytes / keys_per_pass * 1e6
        print(f"map: {a.map_bytes} B held {keys_per_pass} keys per pass: {per_million / 2**20:.1f} MiB "
              f"per million keys, {2**30 / (a.map_bytes / keys_per_pass) / 1e6:.1f} million keys per GiB")
    print(f"peak RSS {rss / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
