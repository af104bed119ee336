#!/usr/bin/env bash
# Benchmark (not a test) of Floe on S3: a cluster of processes on 127.0.0.1
# (`floe meta`, `floe broker` on an S3 store, `floe proxy`) on `moto_server`,
# loaded by librdkafka's `rdkafka_performance` (1 KiB records, a topic of 16
# partitions, acks=all):
#   W1  produce N records as fast as they go: MB/s;
#   W3  1,000 records/s for W3_SECONDS with linger.ms=1: p50/p99/p99.9 of
#       each record's produce latency (from its send to its acknowledgement).
# Both topics are warmed first (a few records each). Prints moto's and the
# broker's CPU-seconds during W1, and moto's PUT count and median PUT time
# (from its request log) as a hint of whether moto is the limit.
#
#   bench/s3.sh [records]          (default 200000)
#
# FLOE_BIN=path runs that binary instead of building the release one (to
# compare two versions in one sitting); BROKER_FLAGS="..." adds broker flags
# (e.g. "--max-flushes-in-flight 1"), PROXY_FLAGS="..." proxy flags;
# BROKERS=2 starts two brokers;
# RDKAFKA_PERF=path is the generator (default: built once from the librdkafka
# sources that rdkafka-sys ships, linked against confluent-kafka's
# librdkafka); PERF=1 samples the broker with `perf record` during W1 into
# $PERF_DATA (default /tmp/s3.perf.data). Everything it starts, it stops.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-200000}"
W3_SECONDS="${W3_SECONDS:-10}"
BROKERS="${BROKERS:-1}"
BIN="${FLOE_BIN:-${CARGO_TARGET_DIR:-target}/release/floe}"
[ -n "${FLOE_BIN:-}" ] || cargo build --release --quiet --bin floe
PY=.venv/bin/python
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "${KEEP:-}" ]; then echo "logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# The generator: rdkafka_performance from the librdkafka sources of the
# rdkafka-sys crate (its example program), built once into the target dir.
perf_tool() {
    if [ -n "${RDKAFKA_PERF:-}" ]; then echo "$RDKAFKA_PERF"; return; fi
    local out="${CARGO_TARGET_DIR:-target}/bench/rdkafka_performance"
    if [ ! -x "$out" ]; then
        local src lib
        src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/rdkafka-sys-*/librdkafka | tail -n 1)
        lib=$(ls "$PWD"/.venv/lib/python*/site-packages/confluent_kafka.libs/librdkafka-*.so.1 | head -n 1)
        mkdir -p "$(dirname "$out")/rdk"
        cp -r "$src/." "$(dirname "$out")/rdk/"
        (cd "$(dirname "$out")/rdk" && ./configure --disable-ssl --disable-sasl --disable-zstd \
            --disable-curl --disable-gssapi >/dev/null)
        gcc -O2 -I"$(dirname "$out")/rdk" -I"$(dirname "$out")/rdk/src" \
            "$(dirname "$out")/rdk/examples/rdkafka_performance.c" -o "$out" \
            "$lib" -Wl,-rpath,"$(dirname "$lib")" -lpthread -lm
    fi
    echo "$out"
}
RDK=$(perf_tool)

ports() { # waits for a role's --ports-file and prints the value of $2
    for _ in $(seq 1 200); do
        if [ -s "$1" ]; then
            python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2" && return 0
        fi
        sleep 0.05
    done
    echo "no ports file $1" >&2; return 1
}
ready() {
    for _ in $(seq 1 200); do curl -sf "http://$1/readyz" >/dev/null && return 0; sleep 0.1; done
    echo "$1 not ready" >&2; return 1
}

# moto on port 0 prints where it listens.
"$PWD/.venv/bin/moto_server" -H 127.0.0.1 -p 0 >"$WORK/moto.log" 2>&1 &
MOTO=$!; PIDS+=("$MOTO")
for _ in $(seq 1 200); do
    S3_PORT=$(grep -oE 'Running on http://127\.0\.0\.1:[0-9]+' "$WORK/moto.log" | grep -oE '[0-9]+$' | head -n 1 || true)
    [ -n "$S3_PORT" ] && break
    sleep 0.05
done
STORE="s3=s3://floe?endpoint=http://127.0.0.1:$S3_PORT&region=us-east-1&path_style=true&access_key_id=bench&secret_access_key=bench"

"$BIN" meta --id 1 --listen 127.0.0.1:0 --data-dir "$WORK/m1" --init --ports-file "$WORK/meta.ports" \
    >"$WORK/meta.log" 2>&1 &
PIDS+=("$!")
META=$(ports "$WORK/meta.ports" meta)
BROKER_PIDS=()
for id in $(seq 1 "$BROKERS"); do
    # shellcheck disable=SC2086
    "$BIN" broker --id "$id" --listen 127.0.0.1:0 --meta "$META" --store "$STORE" \
        --admin-listen 127.0.0.1:0 --ports-file "$WORK/broker$id.ports" ${BROKER_FLAGS:-} \
        >"$WORK/broker$id.log" 2>&1 &
    PIDS+=("$!"); BROKER_PIDS+=("$!")
done
"$BIN" proxy --listen 127.0.0.1:0 --meta "$META" --admin-listen 127.0.0.1:0 --default-partitions 16 ${PROXY_FLAGS:-} \
    --ports-file "$WORK/proxy.ports" >"$WORK/proxy.log" 2>&1 &
PIDS+=("$!")
for id in $(seq 1 "$BROKERS"); do ready "$(ports "$WORK/broker$id.ports" admin)"; done
ready "$(ports "$WORK/proxy.ports" admin)"
K=$(ports "$WORK/proxy.ports" kafka)

# Warm both topics (created on first use, 16 partitions, owners assigned).
for t in w1 w3; do
    "$RDK" -P -t "$t" -b "$K" -s 1024 -c 200 -a -1 -q >/dev/null 2>&1
done
sleep 1

cpu() { awk '{print ($14+$15)/100}' "/proc/$1/stat"; }
bcpu() { local s=0; for p in "${BROKER_PIDS[@]}"; do s=$(python3 -c "print($s+$(cpu "$p"))"); done; echo "$s"; }
puts_before=$(grep -c '"PUT /floe/wal' "$WORK/moto.log" || true)
if [ -n "${PERF:-}" ]; then
    perf record -F 499 -g -p "${BROKER_PIDS[0]}" -o "${PERF_DATA:-/tmp/s3.perf.data}" 2>/dev/null &
    PP=$!
    sleep 0.5
fi
m0=$(cpu "$MOTO"); b0=$(bcpu)
"$RDK" -P -t w1 -b "$K" -s 1024 -c "$N" -a -1 -X linger.ms=5 2>&1 | tail -n 5 >"$WORK/w1.out"
m1=$(cpu "$MOTO"); b1=$(bcpu)
if [ -n "${PERF:-}" ]; then kill -INT "$PP"; wait "$PP" || true; fi
puts_after=$(grep -c '"PUT /floe/wal' "$WORK/moto.log" || true)
"$PY" - "$WORK/w1.out" "$N" "$m0" "$m1" "$b0" "$b1" "$((puts_after - puts_before))" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
n = int(sys.argv[2])
# The last progress line is the summary (the earlier ones are printed every second).
found = re.findall(r"(\d+) delivered .* in (\d+)ms:", text)
if not found or int(found[-1][0]) != n:
    sys.exit("no summary from rdkafka_performance with every record delivered:\n" + text)
secs = int(found[-1][1]) / 1000
moto, broker = float(sys.argv[4]) - float(sys.argv[3]), float(sys.argv[6]) - float(sys.argv[5])
puts = int(sys.argv[7])
print(f"W1 {n} x 1 KiB acks=all: {secs:.2f} s, {n * 1024 / secs / 1e6:.1f} MB/s; "
      f"moto {moto:.1f} CPU-s ({moto / secs:.0%} of a core), broker {broker:.1f} CPU-s; "
      f"{puts} WAL PUTs ({n * 1024 / max(puts, 1) / 1e6:.2f} MB each)")
PY

# W3: a fixed rate; latency of each record from its send to its ack.
W3N=$((W3_SECONDS * 1000))
"$RDK" -P -t w3 -b "$K" -s 1024 -c "$W3N" -r 1000 -a -1 -X linger.ms=1 -l -A "$WORK/lat" -q \
    >/dev/null 2>&1
"$PY" - "$WORK/lat" <<'PY'
import sys
lat = sorted(int(x) / 1000 for x in open(sys.argv[1]) if x.strip())
q = lambda p: lat[min(len(lat) - 1, int(len(lat) * p))]
print(f"W3 1000 records/s x 1 KiB, linger.ms=1, acks=all: {len(lat)} records, "
      f"p50 {q(0.5):.1f} ms, p99 {q(0.99):.1f} ms, p99.9 {q(0.999):.1f} ms")
PY
