#!/usr/bin/env bash
# The whole test suite, from a fresh machine with Rust and Python 3.11:
# installs what the tests need, then runs fmt, clippy, every test, and each
# fuzz target for a bounded time. CI (.ci/run) runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
# In CI, 20 s a target (12 targets) built without optimisation: from
# nothing on 2 cores that build takes 452 s where the optimised one took
# 1,141 s, and runs a tenth as many inputs a second. The long mode runs 60 s
# a target, optimised. CI's 60 minutes go where its tests find more.
if [ "${FLOE_LONG:-}" = 1 ]; then
    FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
    export FUZZ_BUILD="${FUZZ_BUILD:-release}"
else
    FUZZ_SECONDS="${FUZZ_SECONDS:-20}"
fi
# One build from scratch gains nothing from incremental data (1.7 GB of it);
# CI's disk is limited. Set CARGO_INCREMENTAL=1 to keep it.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Each step says when it starts (minutes since the suite began), so a slow
# run shows where its time went,
# with the disk space left, since a full disk fails a build midway.
free_gb() { df -Pk . | awk 'NR == 2 { printf "%d", $4 / 1048576 }'; }
step() { printf '\n==> [%dm%02ds, %s GB free] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$(free_gb)" "$*"; }

step "system packages"
# strace; kcat (Debian bookworm: 1.7.1 on librdkafka 2.0.2) for the Kafka client
# tests; faketime (libfaketime, the clocks that lie in tests/test_faults_net.py); openssl; Node.js and npm for the kafkajs tests, and a Java 17 runtime for PySpark
# in the indexer tests (both already on the usual image).
need=()
command -v strace >/dev/null || need+=(strace)
command -v kcat >/dev/null || need+=(kcat)
command -v faketime >/dev/null || need+=(faketime)
# openssl makes the certificates of the TLS tests (tests/test_security.py).
command -v openssl >/dev/null || need+=(openssl)
# actionlint checks the workflows' run: scripts with shellcheck (tests/test_release.py).
command -v shellcheck >/dev/null || need+=(shellcheck)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
# PostgreSQL, the SQL catalog Iceberg tables are published to (tests/test_tables.py
# starts a server of its own on a Unix socket).
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || need+=(postgresql)
# Headless Chromium and its WebDriver for the web console's browser tests (tests/test_console.py).
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
if [ "${FLOE_LONG:-}" = 1 ]; then
    # Long mode builds librdkafka's test programs (tests/test_librdkafka_suite.py).
    for pkg in libssl-dev zlib1g-dev rapidjson-dev make gcc g++; do
        dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
    done
fi
if ((${#need[@]})); then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    # The JRE's post-install step links its man pages; slim images lack the folder.
    $sudo mkdir -p /usr/share/man/man1
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ "${FLOE_LONG:-}" = 1 ]; then
    # Long mode (not CI): the cluster scenarios also run on Garage, an S3
    # server built for production; its build (~20 min) is kept and reused.
    step "long mode: Garage ${GARAGE_VERSION:=2.5.0} for the cluster scenarios"
    GARAGE_ROOT="${FLOE_BENCH_CACHE:-$HOME/.cache/floe-bench}/garage"
    export FLOE_GARAGE_BIN="$GARAGE_ROOT/bin/garage"
    [ -x "$FLOE_GARAGE_BIN" ] || cargo install garage --version "$GARAGE_VERSION" --locked \
        --no-default-features --features bundled-libs,lmdb --root "$GARAGE_ROOT"
fi

step "python venv (.venv) with the test tools"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -r tests/requirements.txt

step "node packages for the kafkajs tests (tests/js, from package-lock.json)"
(cd tests/js && npm ci --no-audit --no-fund --loglevel=error)

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets; storage without S3; storage with HDFS)"
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p floe-storage --no-default-features --locked -- -D warnings
cargo clippy -p floe-storage --features hdfs --locked -- -D warnings

step "fuzz targets, ${FUZZ_SECONDS}s each"
fuzz/run.sh "$FUZZ_SECONDS"
# The fuzz builds (~3 GB) serve nothing after this step: on a short disk
# they make room for the test builds (~4 GB) that follow.
if [ "$(free_gb)" -lt 12 ]; then
    echo "under 12 GB free: removing fuzz/target"
    rm -rf fuzz/target
fi

step "rust tests"
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --locked --profile ci 2>&1 | tee target/nextest.log
else
    cargo test --workspace --locked 2>&1 | tee target/nextest.log
fi

# The build the rolling-upgrade test upgrades from (tests/upgrade-baseline),
# in this target folder so that it reuses the dependencies compiled above
# (100 s after the tests' build: Floe's crates, and tokio with the crates
# above it, which the tests compile with other features). It leaves its binaries in target/debug/; the next step
# puts this tree's back.
step "the previous build, for the rolling-upgrade test"
.venv/bin/python tests/upgrade_baseline.py

# The end-to-end tests' binaries, built with the test builds' features (tokio's
# test-util comes with a dev-dependency): `cargo build -p floe` alone would
# resolve other features and compile every tokio-using crate again (~2.5 min).
step "binaries for the end-to-end tests"
cargo build --workspace --bins --tests --locked
# Absolute: tests start them from other working directories.
FLOE_BIN="$(realpath "${CARGO_TARGET_DIR:-target}/debug/floe")"
FLOE_DEV_BIN="$(realpath "${CARGO_TARGET_DIR:-target}/debug/floe-dev")"
export FLOE_BIN FLOE_DEV_BIN

step "end-to-end tests (pytest)"
# The browser is installed above: the console's browser tests fail rather than skip without it.
export FLOE_REQUIRE_BROWSER=1
.venv/bin/pytest tests -q -p no:cacheprovider --timeout 600 --durations=40 2>&1 | tee target/pytest.log

if [ "${FLOE_LONG:-}" = 1 ]; then
    step "long mode: the cluster scenarios on Garage"
    FLOE_S3_SERVER=garage .venv/bin/pytest tests/test_s3_cluster*.py -q -s -p no:cacheprovider --timeout 3600 \
        2>&1 | tee target/pytest-garage.log
fi

# One closing line for the whole run.
rust_passed=$(grep -Eo '[0-9]+ passed' target/nextest.log | awk '{s+=$1} END {print s+0}')
py_passed=$(grep -Eo '[0-9]+ passed' target/pytest.log | tail -1 | awk '{print $1+0}')
if [ "${FLOE_LONG:-}" = 1 ]; then
    py_passed=$((py_passed + $(grep -Eo '[0-9]+ passed' target/pytest-garage.log | tail -1 | awk '{print $1+0}')))
fi
echo
echo "floe suite: $((rust_passed + py_passed)) passed, 0 failed, in $((SECONDS / 60))m$((SECONDS % 60))s"
