#!/usr/bin/env bash
# Benchmark (not a test) of the metadata service: commits per second and
# p50/p99 commit latency through the HTTP API, on 1 and 3 nodes, with 1 and
# 100 partitions per commit. Real processes on 127.0.0.1-3; everything it
# starts, it stops. The load comes from `floe-dev meta bench` (the
# developers' binary, crate `floe-devtools`), which commits as a fake broker.
#
#   bench/meta.sh [seconds-per-run]     (default 10)
#
# NODES=1 or NODES=3 runs only that cluster size, PER=1 or PER=100 only that
# many partitions per commit (both: every case); CONCURRENCY sets the
# commits in flight (default 8). PERF=file records a profile of node 1
# (`perf record -g`) during the runs; STRACE=file counts its fsyncs
# (`strace -f -c`) during the runs.
#
# FLOE_BIN / FLOE_DEV_BIN run given binaries instead of building (to compare
# two versions); CARGO_TARGET_DIR is honoured.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-10}"
CONCURRENCY="${CONCURRENCY:-8}"
NODES="${NODES:-1 3}"
PER="${PER:-1 100}"
TARGET="${CARGO_TARGET_DIR:-target}"
if [ -z "${FLOE_BIN:-}" ]; then
    cargo build --release --quiet -p floe -p floe-devtools --bin floe --bin floe-dev
fi
BIN="${FLOE_BIN:-$TARGET/release/floe}"
DEV_BIN="${FLOE_DEV_BIN:-$TARGET/release/floe-dev}"
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

port() { python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' "$1"; }

run_cluster() {
    local n=$1
    local peers="" addrs=""
    declare -A addr
    for i in $(seq 1 "$n"); do
        addr[$i]="127.0.0.$i:$(port 127.0.0.$i)"
        peers+="${peers:+,}$i=${addr[$i]}"
        addrs+="${addrs:+,}${addr[$i]}"
    done
    PIDS=()
    for i in $(seq 1 "$n"); do
        local init=""
        [ "$i" = 1 ] && init="--init"
        "$BIN" meta --id "$i" --listen "${addr[$i]}" --peers "$peers" \
            --data-dir "$WORK/n$n-$i" $init >"$WORK/n$n-$i.log" 2>&1 &
        PIDS+=($!)
    done
    for _ in $(seq 1 100); do
        "$BIN" meta status --addrs "$addrs" 2>/dev/null | grep -q "leader [1-9]" && break
        sleep 0.2
    done
    local spy=""
    if [ -n "${PERF:-}" ]; then
        perf record -q -g -p "${PIDS[0]}" -o "$PERF" >/dev/null 2>&1 &
        spy=$!
    elif [ -n "${STRACE:-}" ]; then
        strace -f -c -e trace=fsync,fdatasync,pwrite64,write -o "$STRACE" -p "${PIDS[0]}" 2>/dev/null &
        spy=$!
    fi
    for per in $PER; do
        printf 'nodes=%s ' "$n"
        "$DEV_BIN" meta bench --addrs "$addrs" --partitions-per-commit "$per" \
            --concurrency "$CONCURRENCY" --seconds "$SECS"
    done
    if [ -n "$spy" ]; then
        kill -INT "$spy"
        wait "$spy" 2>/dev/null || true
    fi
    for p in "${PIDS[@]}"; do kill "$p"; done
    wait 2>/dev/null || true
}

for n in $NODES; do
    run_cluster "$n"
done
