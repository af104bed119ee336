#!/usr/bin/env bash
# Runs every fuzz target of Floe for a while, on a scratch copy of
# the committed seed corpus (so runs never add files to corpus/).
#
#   fuzz/run.sh [seconds-per-target]   (default 20)
#
# Needs cargo-fuzz (installed here if missing) and uses RUSTC_BOOTSTRAP=1 so
# the stable toolchain accepts the sanitizer flags. Crashing inputs land in
# fuzz/artifacts/<target>/. Exits non-zero if any target crashes.
set -euo pipefail

SECS="${1:-20}"
CARGO_FUZZ_VERSION="0.13.2"

cd "$(dirname "${BASH_SOURCE[0]}")"

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

export RUSTC_BOOTSTRAP=1

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

mapfile -t targets < <(cargo fuzz list)

# Every target in one build, first, so that the time limit is all fuzzing
# and the targets link side by side. FUZZ_BUILD=dev (no optimisation, the
# default) builds faster, which is most of a short run's time: 452 s from
# nothing on 2 cores. FUZZ_BUILD=release (cargo-fuzz's default: opt-level
# 3, one codegen unit; 1,141 s) runs about ten times as many inputs a
# second, worth it when the runs are long. Both have AddressSanitizer and
# debug assertions.
case "${FUZZ_BUILD:=dev}" in
    dev) BUILD=(--dev) ;;
    release) BUILD=() ;;
    *) echo "fuzz: FUZZ_BUILD is dev or release, not $FUZZ_BUILD" >&2; exit 2 ;;
esac
started=$SECONDS
if ! cargo fuzz build "${BUILD[@]}" >"$scratch/build.log" 2>&1; then
    cat "$scratch/build.log" >&2
    echo "fuzz: build failed" >&2
    exit 1
fi
echo "fuzz: ${#targets[@]} targets built ($FUZZ_BUILD) in $((SECONDS - started)) s"

failed=0
for t in "${targets[@]}"; do
    mkdir -p "$scratch/corpus/$t"
    if [[ -d "corpus/$t" ]]; then
        cp -R "corpus/$t/." "$scratch/corpus/$t/"
    fi
    log="$scratch/$t.log"
    if cargo fuzz run "${BUILD[@]}" "$t" "$scratch/corpus/$t" -- \
        -max_total_time="$SECS" -malloc_limit_mb=512 -rss_limit_mb=2048 -max_len=65536 \
        >>"$log" 2>&1; then
        runs="$(sed -n 's/^Done \([0-9][0-9]*\) runs in \([0-9][0-9]*\) second.*/\1 runs in \2s/p' "$log" | tail -n 1)"
        echo "fuzz $t: ${runs:-? runs}, no crash"
    else
        tail -n 60 "$log" >&2
        why="$(grep -m 1 -A 1 -E 'panicked at|ERROR: (AddressSanitizer|libFuzzer)' "$log" | tr '\n' ' ' || true)"
        echo "fuzz $t: CRASH: ${why:-see log above} (input saved under artifacts/$t/)" >&2
        failed=1
    fi
done
exit "$failed"
