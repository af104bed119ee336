#!/usr/bin/env bash
# Benchmark (not a test) of the Kafka path of `floe standalone`, release
# build, real clients on 127.0.0.1:
#   - kcat producing N messages of S bytes (acks=all, then acks=1; lz4),
#     and consuming them back: MB/s and messages/s;
#   - one-message round trips with acks=all (confluent-kafka, a flush per
#     message): p50/p99 latency — this is the flush interval plus one WAL
#     write with fsync plus one metadata commit.
# Everything it starts, it stops.
#
#   bench/kafka.sh [messages] [bytes]      (default 500000 200)
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-500000}"
SIZE="${2:-200}"
. bench/lib.sh
start_standalone --default-partitions 4

python3 - "$N" "$SIZE" > "$WORK/msgs" <<'PY'
import sys, random
n, size = int(sys.argv[1]), int(sys.argv[2])
r = random.Random(1)
alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 "
line = "".join(r.choice(alphabet) for _ in range(size))
for i in range(n):
    print(f"k{i % 1000}:{i:010d}{line[10:]}")
PY
MB=$(python3 -c "import os; print(os.path.getsize('$WORK/msgs')/1e6)")

now() { date +%s.%N; }
rate() { python3 -c "d=$2-$1; print(f'{d:.2f} s, {$N/d:,.0f} msg/s, {$MB/d:.1f} MB/s')"; }

for acks in all 1; do
    t0=$(now)
    kcat -P -b "$K" -t "bench-$acks" -K: -z lz4 -X acks=$acks -X linger.ms=5 -X queue.buffering.max.messages=1000000 -l "$WORK/msgs"
    t1=$(now)
    echo "produce acks=$acks: $N × $SIZE B: $(rate "$t0" "$t1")"
done
t0=$(now)
got=$(kcat -C -b "$K" -t bench-all -e -o beginning -q -f '\n' | wc -l)
t1=$(now)
echo "consume (from the store, after compaction may have run): $got messages: $(rate "$t0" "$t1")"

"$PY" - "$K" <<'PY'
import sys, time
import confluent_kafka as ck
p = ck.Producer({"bootstrap.servers": sys.argv[1], "acks": "all", "linger.ms": 0})
lat = []
for i in range(500):
    t = time.perf_counter()
    p.produce("latency", value=b"x" * 100)
    p.flush(10)
    lat.append((time.perf_counter() - t) * 1000)
lat.sort()
print(f"acks=all round trip, one 100 B message: p50 {lat[len(lat)//2]:.2f} ms, p99 {lat[int(len(lat)*0.99)]:.2f} ms")
PY
