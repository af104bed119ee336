#!/usr/bin/env bash
# Benchmark (not a test) of a catch-up read on `floe standalone` (release
# build, or $FLOE_BIN): N records of 1 KiB produced with kcat (acks=1) to a
# topic of 16 partitions, then read from the beginning three times with kcat.
# Prints, per read, MB/s and the broker's CPU-seconds per GB read (from
# /proc: user + system time of the floe process). kcat is often the limit of
# the MB/s; the CPU per GB is the broker's own cost.
# With PERF=1, `perf record --call-graph dwarf` samples the broker during the
# reads into $PERF_DATA (default /tmp/read.perf.data). With GEN=rdkafka,
# librdkafka's rdkafka_performance writes (acks=all) and reads instead of kcat
# ($RDKAFKA_PERF, default the one bench/compare.py builds into
# ~/.cache/floe-bench/bin), which reads faster than kcat can print.
# Everything it starts, it stops.
#
#   bench/read.sh [records]      (default 400000)
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-400000}"
. bench/lib.sh
start_standalone --default-partitions 16
RP="${RDKAFKA_PERF:-$HOME/.cache/floe-bench/bin/rdkafka_performance}"
if [ "${GEN:-kcat}" = rdkafka ]; then
    "$RP" -P -t r -b "$K" -s 1000 -c "$N" -a -1 -X linger.ms=5 -X batch.size=1000000 -i 100000 >/dev/null
else
    python3 -c "
import random
r = random.Random(1); a = 'abcdefghijklmnopqrstuvwxyz0123456789'
line = ''.join(r.choice(a) for _ in range(1000))
for i in range($N): print(f'{i:010d}{line[10:]}')" > "$WORK/msgs"
    kcat -P -b "$K" -t r -X acks=1 -X linger.ms=5 -X queue.buffering.max.messages=1000000 \
        -X batch.size=1000000 -l "$WORK/msgs"
fi
sleep 2
if [ -n "${PERF:-}" ]; then
    perf record -F 499 --call-graph dwarf,16384 -p "$PID" -o "${PERF_DATA:-/tmp/read.perf.data}" 2>/dev/null &
    PP=$!
    sleep 0.5
fi
cpu() { awk '{print ($14+$15)/100}' "/proc/$PID/stat"; }
for _ in 1 2 3; do
    c0=$(cpu); t0=$(date +%s.%N)
    if [ "${GEN:-kcat}" = rdkafka ]; then
        "$RP" -C -t r -b "$K" -o beginning -c "$N" -i 100000 -X fetch.max.bytes=52428800 \
            -X receive.message.max.bytes=60000000 $(for p in $(seq 0 15); do echo -p "$p"; done) >/dev/null
    else
        kcat -C -b "$K" -t r -e -o beginning -q -f '%o\n' -X fetch.max.bytes=52428800 \
            -X max.partition.fetch.bytes=8388608 | wc -l > /dev/null
    fi
    t1=$(date +%s.%N); c1=$(cpu)
    python3 -c "d=$t1-$t0; c=$c1-$c0; gb=$N*1000/1e9; print(f'read {$N} x 1 KiB: {d:.2f} s, {$N*1000/d/1e6:.1f} MB/s, broker {c:.2f} CPU-s, {c/gb:.2f} CPU-s per GB')"
done
if [ -n "${PERF:-}" ]; then kill -INT "$PP"; wait "$PP" || true; fi
