#!/usr/bin/env bash
# Benchmark (not a test) of the indexer in `floe standalone`, release build:
#   - export throughput: N JSON messages of about S bytes are produced with
#     exports off, then the topic is backfilled three times; for each run,
#     log MB/s of wall time and MB per CPU-second of the floe process (the
#     "per core" figure; the broker is idle meanwhile). Medians of the runs.
#   - produce-to-queryable lag: one acks=all message at a time with
#     export.roll.ms=1000; the time until the lookup API finds it (it reads
#     the log not exported yet) and until it is in a Parquet file (what
#     DuckDB and Spark see). p50 and p99.
# Everything it starts, it stops.
#
#   bench/indexer.sh [messages] [bytes]      (default 500000 200)
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-500000}"
SIZE="${2:-200}"
. bench/lib.sh
start_standalone --indexer-poll-ms 100
export FLOE_BOOTSTRAP="$K"
INDEX='[{"name":"id","path":"$.id","type":"int64"},{"name":"amount","path":"$.amount","type":"float64"},{"name":"customer","path":"$.customer","type":"string"}]'
"$BIN" topic create orders --partitions 4 --config export.roll.ms=100 --config "export.index=$INDEX" >/dev/null
"$BIN" topic create lag --partitions 1 --config export.enabled=true --config export.roll.ms=1000 >/dev/null

python3 - "$N" "$SIZE" > "$WORK/msgs" <<'PY'
import sys, random
n, size = int(sys.argv[1]), int(sys.argv[2])
r = random.Random(1)
letters = "abcdefghijklmnopqrstuvwxyz"
for i in range(n):
    body = f'{{"id": {i}, "amount": {i % 1000 / 4}, "customer": "c{i % 97}", "note": "'
    # Random text per message, so that the log is not far smaller than the records.
    pad = "".join(r.choices(letters, k=max(0, size - len(body) - 2)))
    print(f'k{i % 1000}\t{body}{pad}"}}')
PY
kcat -P -b "$K" -t orders -K$'\t' -z lz4 -X linger.ms=5 -X queue.buffering.max.messages=1000000 -l "$WORK/msgs"
"$BIN" topic alter orders --config export.enabled=true >/dev/null

RECORD_MB=$(python3 -c "import os; print(os.path.getsize('$WORK/msgs')/1e6)")
"$PY" - "$A" "$PID" "$N" "$BIN" "$RECORD_MB" <<'PY'
import json, os, statistics, subprocess, sys, time, urllib.request
admin, pid, n, binary = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
record_mb = float(sys.argv[5])  # keys and values as produced (uncompressed)
tick = os.sysconf("SC_CLK_TCK")

def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick

def metric(name):
    for line in urllib.request.urlopen(f"http://{admin}/metrics").read().decode().splitlines():
        if line.startswith(name + " "):
            return int(line.split()[1])
    return 0

def state():
    return json.load(urllib.request.urlopen(f"http://{admin}/v1/topics/orders/exports"))

def wait_exported():
    while True:
        s = state()
        if all(p["exported_offset"] >= p["high_watermark"] for p in s["partitions"]):
            return s
        time.sleep(0.05)

wait_exported()  # the first export, once exports are enabled
walls, per_cpu, mbs, rec_per_cpu, rows_per_s = [], [], [], [], []
for run in range(3):
    b0, c0, t0 = metric("floe_indexer_log_bytes_read_total"), cpu(), time.time()
    subprocess.run([binary, "indexer", "backfill", "--topic", "orders", "--indexer", f"http://{admin}"],
                   check=True, stderr=subprocess.DEVNULL)
    s = wait_exported()
    t1, c1, b1 = time.time(), cpu(), metric("floe_indexer_log_bytes_read_total")
    mb = (b1 - b0) / 1e6
    walls.append(mb / (t1 - t0)); per_cpu.append(mb / max(c1 - c0, 1e-9)); mbs.append(mb)
    rec_per_cpu.append(record_mb / max(c1 - c0, 1e-9)); rows_per_s.append(n / (t1 - t0))
    rows = sum(p["rows"] for p in s["partitions"]); pq = sum(p["bytes"] for p in s["partitions"]) / 1e6
    files = sum(p["files"] for p in s["partitions"])
    print(f"backfill {run + 1}: {mb:.1f} MB of log ({rows} rows) -> {files} files, {pq:.1f} MB Parquet "
          f"in {t1 - t0:.2f} s wall, {c1 - c0:.2f} s CPU")
print(f"export throughput (median of 3): {statistics.median(walls):.1f} MB/s of log wall-clock, "
      f"{statistics.median(per_cpu):.1f} MB of log per CPU-second (per core); "
      f"cores busy {statistics.median(walls) / statistics.median(per_cpu):.2f}; "
      f"{statistics.median(rec_per_cpu):.1f} MB of records (uncompressed) per CPU-second, "
      f"{statistics.median(rows_per_s):,.0f} rows/s")
PY

"$PY" - "$K" "$A" <<'PY'
import json, statistics, sys, time, urllib.request
import confluent_kafka as ck
kafka, admin = sys.argv[1], sys.argv[2]
p = ck.Producer({"bootstrap.servers": kafka, "acks": "all", "linger.ms": 0})
found, exported = [], []
for i in range(15):
    key = f"lag-{i}"
    t0 = time.time()
    p.produce("lag", key=key, value=json.dumps({"i": i}))
    p.flush(10)
    got_found = None
    while True:
        if got_found is None:
            r = json.load(urllib.request.urlopen(f"http://{admin}/v1/topics/lag/records?key={key}"))
            if r["records"]:
                got_found = time.time() - t0
                offset = r["records"][0]["offset"]
        s = json.load(urllib.request.urlopen(f"http://{admin}/v1/topics/lag/exports"))
        if got_found is not None and s["partitions"][0]["exported_offset"] > offset:
            exported.append(time.time() - t0)
            found.append(got_found)
            break
        time.sleep(0.01)
q = lambda xs, f: sorted(xs)[min(len(xs) - 1, int(len(xs) * f))] * 1000
print(f"produce-to-queryable (export.roll.ms=1000, poll 100 ms), {len(found)} messages: "
      f"lookup API p50 {q(found, .5):.0f} ms p99 {q(found, .99):.0f} ms; "
      f"in a Parquet file p50 {q(exported, .5):.0f} ms p99 {q(exported, .99):.0f} ms")
PY
