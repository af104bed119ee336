"""The side-by-side benchmark harness (bench/compare.py) in its quick mode,
so that it cannot rot: Floe standalone and a Floe cluster on moto, every
workload with tiny counts and the load generator on confluent-kafka (no
build). Checks the table it writes and that its numbers are sane (every
record sent is acknowledged and read back, no errors); nothing about speed.

The two longest (the side-by-side table, 31 s; the scale bench, 33 s) run in
long mode only (FLOE_LONG=1): they check benchmark scripts, not Floe, and
CI's 60 minutes go where tests find bugs. The smaller benches' quick modes
run in CI."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("matplotlib")

ROOT = pathlib.Path(__file__).resolve().parent.parent
LONG = os.environ.get("FLOE_LONG") == "1"
long_mode_only = pytest.mark.skipif(not LONG, reason="long mode only (FLOE_LONG=1): a benchmark script's check")
TARGETS = ("floe-local", "floe-moto")


@long_mode_only
def test_quick_mode_produces_a_sane_table(floe_bin, tmp_path):
    out = tmp_path / "results"
    env = dict(os.environ, FLOE_BIN=str(floe_bin), FLOE_BENCH_CACHE=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, ROOT / "bench" / "compare.py", "--quick", "--out", out], env=env,
                         capture_output=True, text=True, timeout=540, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}"
    data = json.loads((out / "raw" / "results.json").read_text())
    rows = {(r["target"], r["workload"]): r for r in data["rows"]}
    assert data["info"]["quick"] and data["info"]["machine"]["nproc"] >= 1

    expected = {(t, w) for t in TARGETS
                for w in ("W1", "W1-read", "W2-p1", "W2-p100", "W3-1k", "W3-50MB", "W5-backlog", "W5-read")}
    expected |= {("floe-moto", "W6-kill9"), ("floe-moto+20ms", "W4-1MB/s"), ("floe-moto+20ms", "W4-max")}
    assert expected <= set(rows), f"missing runs: {sorted(expected - set(rows))}"
    for key, r in rows.items():
        assert not r.get("errors"), f"{key}: {r}"
        assert r["records"] == r["sent"] > 0 or (key[1] == "W5-read" and r["records"] >= r["sent"] > 0), f"{key}: {r}"
        if not key[1].startswith("W6"):
            assert r["mb_s"] > 0 and r["rec_s"] > 0, f"{key}: {r}"
            assert r["cpu_s"] >= 0 and r["peak_rss_mib"] > 0, f"{key}: {r}"
        if key[1].startswith("W3"):
            assert r["read"] == r["sent"], f"{key}: {r}"
            for kind in ("produce", "e2e"):
                p50, p99, p999 = (r[f"{kind}_{q}_ms"] for q in ("p50", "p99", "p999"))
                assert 0 < p50 <= p99 <= p999, f"{key}: {r}"
    # The S3 runs count the store's requests; the 20 ms one wrote something.
    assert rows[("floe-moto", "W1")]["puts"] > 0
    assert rows[("floe-moto+20ms", "W4-1MB/s")]["puts"] > 0
    # Beside the target's CPU, the S3 server's (none on a local folder) and
    # the load generator's: the three share the machine's cores.
    # One quick workload can cost the S3 server less than a clock tick, so
    # each S3 run is measured (a number, not None) and their sum is positive.
    s3_rows = [r for (t, w), r in rows.items() if t.startswith("floe-moto") and not w.startswith("W6")]
    assert all(r["store_cpu_s"] is not None and r["store_cpu_s"] >= 0 for r in s3_rows), s3_rows
    assert sum(r["store_cpu_s"] for r in s3_rows) > 0, s3_rows
    assert sum(r["gen_cpu_s"] for r in rows.values() if r.get("gen_cpu_s") is not None) > 0, rows
    assert rows[("floe-local", "W1")]["store_cpu_s"] is None
    w6 = rows[("floe-moto", "W6-kill9")]
    assert w6["recovered"] and w6["failover_s"] > 0, w6

    md = (out / "results.md").read_text()
    assert "| W1 |" in md and "floe-moto" in md and "## Every run" in md, md
    for chart in ("throughput.png", "records.png", "latency-w3-1k.png", "cpu.png"):
        assert (out / chart).stat().st_size > 1000, chart


def test_the_security_bench_quick_mode_runs_every_listener(floe_bin):
    """bench/security.py (TLS and SASL against PLAINTEXT) in its quick mode, so that it cannot rot."""
    env = dict(os.environ, FLOE_BIN=str(floe_bin))
    res = subprocess.run([sys.executable, ROOT / "bench" / "security.py", "--quick"], env=env,
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    for listener in ("PLAINTEXT", "SSL", "SASL_SSL"):
        line = next(l for l in res.stdout.splitlines() if l.startswith(listener) and "produce" in l)
        assert "MB/s" in line and " ms " in line + " ", line


def test_the_internal_tls_bench_quick_mode_compares_both_clusters(floe_bin):
    """bench/internal_tls.py (a cluster with internal mTLS against a plain one) in its quick mode."""
    env = dict(os.environ, FLOE_BIN=str(floe_bin))
    res = subprocess.run([sys.executable, ROOT / "bench" / "internal_tls.py", "--quick"], env=env,
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    for mode in ("plain", "mtls"):
        line = next(l for l in res.stdout.splitlines() if l.startswith(mode) and "produce" in l)
        assert "MB/s" in line and " ms (" in line, line


def test_the_acl_bench_quick_mode_compares_with_no_authorizer(floe_bin):
    """bench/acls.py (1,000 ACLs against no authorizer) in its quick mode, so that it cannot rot."""
    env = dict(os.environ, FLOE_BIN=str(floe_bin))
    res = subprocess.run([sys.executable, ROOT / "bench" / "acls.py", "--quick"], env=env,
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    assert "1000 ACLs" in res.stdout, res.stdout
    for run in ("none", "acl"):
        line = next(l for l in res.stdout.splitlines() if l.startswith(run) and "produce" in l)
        assert "MB/s" in line and "metadata" in line, line


def test_the_console_bench_quick_mode_times_every_route(floe_bin, tmp_path):
    """bench/console.py (issue 43's figures) in its quick mode, without the
    browser (tests/test_console.py drives that): every route answered and
    timed, so that it cannot rot."""
    out = tmp_path / "console"
    env = dict(os.environ, FLOE_BIN=str(floe_bin))
    res = subprocess.run([sys.executable, ROOT / "bench" / "console.py", "--quick", "--out", out], env=env,
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    results = json.loads((out / "results.json").read_text())
    assert results["partitions"] == 200 and len(results["routes"]) == 12, results
    assert all(r["median_ms"] > 0 and r["bytes"] > 0 for r in results["routes"].values()), results["routes"]
    assert "| a topic (" in (out / "results.md").read_text()


@long_mode_only
def test_the_scale_bench_quick_mode_runs_every_phase(floe_bin, tmp_path):
    """bench/scale.py (issue 40's figures) in its quick mode: 200 partitions on
    3 metadata nodes, 2 brokers and a proxy, every phase, so that it cannot rot."""
    out = tmp_path / "scale"
    env = dict(os.environ, FLOE_BIN=str(floe_bin))
    res = subprocess.run([sys.executable, ROOT / "bench" / "scale.py", "--quick", "--out", out], env=env,
                         capture_output=True, text=True, timeout=400, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    phases = json.loads((out / "results.json").read_text())["phases"]
    assert phases["sizes"]["rounds_done"] == 5, phases["sizes"]
    assert phases["metadata"]["raw_v12_bytes"] > 0
    assert phases["connections"]["open"] == 500 and phases["connections"]["per_connection_kib"] > 0
    assert phases["members"]["joined"] == phases["members"]["members"] == 100
    for phase in ("takeover", "restart"):
        assert phases[phase]["acked"] > 0 and phases[phase]["all_written_s"] is not None, phases[phase]
    assert "| take-over of" in (out / "results.md").read_text()
