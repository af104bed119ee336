#!/bin/sh
# Kafka's kafka-console-producer.sh with Kafka's flags, served by Floe's `floe kafka-tool`
# (docs/kafka-tools.md). The floe binary: $FLOE_BIN; else floe beside this
# script; else the newer of ../target/release/floe and ../target/debug/floe;
# else floe on the PATH.
here=$(dirname "$(readlink -f "$0" 2>/dev/null || echo "$0")")
floe=${FLOE_BIN:-}
if [ -z "$floe" ]; then
    release=$here/../target/release/floe
    debug=$here/../target/debug/floe
    if [ -x "$here/floe" ]; then
        floe=$here/floe
    elif [ -x "$release" ] && [ -x "$debug" ]; then
        if [ "$debug" -nt "$release" ]; then floe=$debug; else floe=$release; fi
    elif [ -x "$release" ]; then
        floe=$release
    elif [ -x "$debug" ]; then
        floe=$debug
    else
        floe=floe
    fi
fi
exec "$floe" kafka-tool kafka-console-producer.sh "$@"
