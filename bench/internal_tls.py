#!/usr/bin/env python3
"""What internal mTLS costs (issue 37's figures): the same cluster with and
without TLS between its processes.

Starts two clusters of separate processes on a local folder store (a
metadata node, `--brokers` brokers and a proxy, as tests/floe_cluster.py
runs them), one plain and one with internal mTLS (`floe certs` identities:
the metadata API, Raft, the broker RPC over HTTP/2 and the admin ports over
TLS, every caller presenting its certificate). Then, `--rounds` times,
alternating between them, with confluent-kafka through the proxy (the
proxy's produce and fetch calls to the brokers are the internal traffic):

- produce: `--records` records of `--size` bytes with acks=all to a topic of
  `--partitions` partitions, MB/s;
- consume: the same records read back from the beginning (assign()), MB/s;
- create: a new topic's CreateTopics answer (the proxy, the metadata node
  and the brokers taking it over), median of `--creates`, ms.

Printed: each run, then the medians and their ratio to the plain cluster
in the same run.

Usage: FLOE_BIN=target/release/floe python bench/internal_tls.py [--records 200000] [--rounds 3]
       python bench/internal_tls.py --quick    (a small run, as tests/test_bench_harness.py does)
"""

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import confluent_kafka.admin  # noqa: E402

from floe_cluster import Cluster  # noqa: E402
from security import consume, produce  # noqa: E402

MODES = ["plain", "mtls"]


def identities(floe_bin, d, brokers):
    """A cluster CA and a certificate per role, from `floe certs`."""
    run = lambda *a: subprocess.run([floe_bin, "certs", *map(str, a)], check=True, capture_output=True)  # noqa: E731
    run("ca", "--out", d)
    names = {"meta1": "metadata-1", "proxy": "proxy", "admin": "admin",
             **{f"broker{b}": f"broker-{b}" for b in range(1, brokers + 1)}}
    for cert in names.values():
        run("issue", cert, "--ca-dir", d, "--out", d, "--host", "127.0.0.1")

    def env(role):
        cert = names[role]
        return {"FLOE_INTERNAL_TLS_CA": str(d / "ca.pem"), "FLOE_INTERNAL_TLS_CERT": str(d / f"{cert}.pem"),
                "FLOE_INTERNAL_TLS_KEY": str(d / f"{cert}.key")}
    return env


def create_ms(conf, prefix, partitions, n):
    admin = confluent_kafka.admin.AdminClient(conf)
    times = []
    for i in range(n):
        topic = f"{prefix}-{i}"
        start = time.monotonic()
        admin.create_topics([confluent_kafka.admin.NewTopic(topic, partitions, 1)])[topic].result(30)
        times.append((time.monotonic() - start) * 1000)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--brokers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--creates", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="a small run: 2,000 records, 1 round, 2 creates")
    args = ap.parse_args()
    if args.quick:
        args.records, args.rounds, args.creates = 2000, 1, 2
    floe_bin = os.environ.get("FLOE_BIN") or str(ROOT / "target" / "release" / "floe")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "certs").mkdir()
        tls_env = identities(floe_bin, tmp / "certs", args.brokers)
        clusters = {}
        try:
            for mode in MODES:
                (tmp / mode).mkdir()
                clusters[mode] = Cluster(
                    floe_bin, tmp / mode, metas=1, brokers=args.brokers, lease_ms=None,
                    proxy_flags=("--default-partitions", str(args.partitions)),
                    role_env=tls_env if mode == "mtls" else None, https=mode == "mtls")
            results = {m: {"produce": [], "consume": [], "create": []} for m in MODES}
            for r in range(args.rounds):
                for mode in MODES:
                    conf = {"bootstrap.servers": clusters[mode].bootstrap}
                    topic = f"bench-{mode}-{r}"
                    admin = confluent_kafka.admin.AdminClient(conf)
                    admin.create_topics([confluent_kafka.admin.NewTopic(topic, args.partitions, 1)])[topic].result(30)
                    pr = produce(conf, topic, args.records, args.size)
                    co = consume(conf, topic, args.partitions, args.records, args.size)
                    cr = create_ms(conf, f"created-{mode}-{r}", args.partitions, args.creates)
                    results[mode]["produce"].append(pr)
                    results[mode]["consume"].append(co)
                    results[mode]["create"].append(cr)
                    print(f"round {r} {mode:6} produce {pr:7.1f} MB/s  consume {co:7.1f} MB/s  "
                          f"create {cr:6.1f} ms", flush=True)
            med = {m: {k: statistics.median(v) for k, v in results[m].items()} for m in MODES}
            base = med["plain"]
            print(f"\n{args.records} records of {args.size} B, {args.partitions} partitions, {args.brokers} brokers, "
                  f"{args.rounds} rounds (medians; ratio to the plain cluster)")
            for m in MODES:
                v = med[m]
                print(f"{m:6} produce {v['produce']:7.1f} MB/s ({v['produce'] / base['produce']:.2f})  "
                      f"consume {v['consume']:7.1f} MB/s ({v['consume'] / base['consume']:.2f})  "
                      f"create {v['create']:6.1f} ms ({v['create'] / base['create']:.2f})")
        finally:
            for c in clusters.values():
                c.stop()


if __name__ == "__main__":
    main()
