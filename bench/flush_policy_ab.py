"""Produce latency and PUTs a second per broker on moto: the S3 flush
policy (the default) against the local one (5 ms, not paced, through
broker flags), alternated twice on clusters of one metadata node, two
brokers and one proxy (tests/s3_cluster.py).

    .venv/bin/python bench/flush_policy_ab.py path/to/floe [records a second]
"""
import pathlib
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from s3_cluster import Load, S3Cluster, create_topic, median

FLOE = sys.argv[1]
RATE = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
OLD = ("--flush-interval-ms", "5", "--flush-paced", "false", "--flush-bytes", "4194304")

def puts(cluster):
    n = 0.0
    for b in cluster.brokers:
        for line in urllib.request.urlopen(f"http://{b.admin}/metrics", timeout=10).read().decode().splitlines():
            if line.startswith("floe_store_writes_total"):
                n += float(line.rsplit(" ", 1)[1])
    return n

res = {"old": [], "new": []}
for rnd in range(2):
    for mode in ("old", "new"):
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"latab-{mode}"))
        c = S3Cluster(FLOE, tmp, metas=1, brokers=2, proxies=1, endpoints=1,
                      broker_flags=OLD if mode == "old" else ())
        try:
            create_topic(c.bootstrap, "t", 16)
            load = Load(c.bootstrap, "t", 16, rate=RATE)
            time.sleep(5)
            p0, t0 = puts(c), time.time()
            time.sleep(15)
            p1, t1 = puts(c), time.time()
            load.stop()
            p50, p99 = load.latency_quantile(0.5, t0, t1), load.latency_quantile(0.99, t0, t1)
            rate = (p1 - p0) / (t1 - t0) / len(c.brokers)
            res[mode].append((p50, p99, rate))
            print(f"round {rnd} {mode}: produce p50 {p50*1000:.0f} ms p99 {p99*1000:.0f} ms; {rate:.1f} PUTs/s per broker; errors {len(load.errors)}", flush=True)
        finally:
            c.stop()
for mode, xs in res.items():
    print(mode, "median p50 %.0f ms p99 %.0f ms PUTs/s/broker %.1f" % (median([x[0] for x in xs])*1000, median([x[1] for x in xs])*1000, median([x[2] for x in xs])))
