# Sourced by the bench scripts: builds the release binary (or runs
# $FLOE_BIN, to compare two versions in one sitting) and starts one
# `floe standalone` on free ports of 127.0.0.1 in a scratch folder, which the
# script's exit stops and removes. (Ports are picked here rather than read
# back from --ports-file so that versions without that flag can be run.)
#
#   start_standalone [extra standalone flags]
# sets BIN, PY, WORK, PID, K (Kafka), A (admin HTTP) and M (metadata), and
# returns once /readyz answers.

BIN="${FLOE_BIN:-${CARGO_TARGET_DIR:-target}/release/floe}"
PY=.venv/bin/python
WORK="$(mktemp -d)"
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_standalone() {
    [ -n "${FLOE_BIN:-}" ] || cargo build --release --quiet --bin floe
    K=127.0.0.1:$(port); A=127.0.0.1:$(port); M=127.0.0.1:$(port)
    "$BIN" standalone --data-dir "$WORK/data" --kafka-listen "$K" --admin-listen "$A" \
        --meta-listen "$M" "$@" 2>"$WORK/floe.log" &
    PID=$!
    for _ in $(seq 1 100); do
        curl -sf "http://$A/readyz" >/dev/null && return 0
        sleep 0.1
    done
    echo "floe standalone did not become ready; its log:" >&2
    tail -n 30 "$WORK/floe.log" >&2
    return 1
}
