#!/bin/sh
# Kafka's shell tools with Kafka's flags, served by Floe's `floe kafka-tool`
# (docs/kafka-tools.md). kafka-topics.sh and the others are links to this
# script: the name it is called by is the tool. The floe binary: $FLOE_BIN;
# else floe beside this script; else the newer of ../target/release/floe and
# ../target/debug/floe; else floe on the PATH.
tool=$(basename "$0")
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
if [ "$tool" = kafka-tool.sh ]; then
    echo "kafka-tool.sh: run it as one of the tools (kafka-topics.sh, kafka-configs.sh, ...): see docs/kafka-tools.md" >&2
    exit 1
fi
exec "$floe" kafka-tool "$tool" "$@"
