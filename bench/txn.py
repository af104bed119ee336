#!/usr/bin/env python3
"""Transactional produce against idempotent produce (issue 14's figures).

Starts `floe standalone --transactions` (the binary of `FLOE_BIN`, else the
release build) on a fresh data dir with ports chosen by the system, then, with
confluent-kafka, produces `--records` records of `--size` bytes to a topic of
`--partitions` partitions:

- `idempotent`: `enable.idempotence`, no transactions;
- `txn-N` for each N of `--per-txn` (default 10 and 1000): transactions of N
  records each (begin, produce, commit).

Each mode runs `--rounds` times, alternated, each on its own topic. Printed:
MB/s per run and its median, the ratio to idempotent, and the commit latency
(`commit_transaction()`, which returns once the coordinator has decided the
commit; its markers are written after, while the next transaction begins)
p50/p99 over every transaction of the mode.

With `--ids N`, N other transactional ids are registered first (a cluster
with many transactional producers), so lookups that grow with the ids show.

With `--metrics` (the standalone only), what each mode's runs cost per
transaction (per 1,000 records for `idempotent`) from the broker's `/metrics`:
requests by API with their mean time at the proxy, flushes with their mean
write and commit phases, markers, and metadata commands.

With `--s3`, the same runs go to a cluster of processes on S3 (one metadata
node, `--brokers` brokers, one proxy; the store is moto, or Garage with
`FLOE_S3_SERVER=garage`, as in `tests/s3_cluster.py`), where flushes are
paced (250 ms by default): a commit waits for its data's flush and for its
markers' flush.

Usage: FLOE_BIN=target/release/floe python bench/txn.py [--records 100000] [--ids 1000] [--s3] [--metrics]
"""

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import confluent_kafka as ck  # noqa: E402
import confluent_kafka.admin  # noqa: E402

from conftest import Standalone  # noqa: E402
from share_timers import scrape  # noqa: E402


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def create(bootstrap, topic, partitions):
    a = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([ck.admin.NewTopic(topic, partitions, 1)])[topic].result(30)


def run(bootstrap, topic, records, size, per_txn):
    """Returns (MB/s, [commit seconds])."""
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000, "enable.idempotence": True}
    if per_txn:
        conf["transactional.id"] = f"bench-{topic}"
    p = ck.Producer(conf)
    if per_txn:
        p.init_transactions(60)
    value = b"x" * size
    commits = []
    start = time.perf_counter()
    sent = 0
    while sent < records:
        n = min(per_txn or records, records - sent)
        if per_txn:
            p.begin_transaction()
        for _ in range(n):
            while True:
                try:
                    p.produce(topic, value=value)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        if per_txn:
            t = time.perf_counter()
            p.commit_transaction(60)
            commits.append(time.perf_counter() - t)
        sent += n
    assert p.flush(120) == 0
    elapsed = time.perf_counter() - start
    return records * size / elapsed / 1e6, commits


# What --metrics reports: (label, histogram base name), each label set a row,
# and (label, counter, its labels) as a count alone.
PER_TXN = [
    ("{api} requests", "floe_proxy_request_seconds"),
    ("flushes, {phase} phase", "floe_broker_flush_phase_seconds"),
    ("markers (decision to written)", "floe_broker_txn_markers_duration_seconds"),
    ("metadata commands, proposal to answer", "floe_meta_command_seconds"),
    ("metadata log writes (fsync included)", "floe_meta_log_write_seconds"),
]
COUNTS = [("metadata commands", "floe_meta_commands_total", {"result": "applied"}),
          ("steps held", "floe_broker_txn_steps_held_total", {})]


def cost_rows(delta, units):
    """Rows of (what, count per unit, mean ms) from a /metrics delta (as
    `share_timers.scrape` keys it)."""
    rows = []
    for label, base in PER_TXN:
        for (name, labels), count in sorted(delta.items(), key=lambda kv: sorted(kv[0][1])):
            if name != base + "_count" or count <= 0:
                continue
            secs = delta.get((base + "_sum", labels), 0.0)
            rows.append((label.format(**dict(labels)), count / units, secs / count * 1e3))
    for label, name, labels in COUNTS:
        total = sum(v for (n, ls), v in delta.items() if n == name and set(labels.items()) <= ls)
        if total > 0:
            rows.append((label, total / units, None))
    return rows


def describe(bootstrap, ids, calls):
    """Times `calls` DescribeTransactions of the registered ids."""
    import kafka.admin
    a = kafka.admin.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        a.describe_transactions(["bench-idle-0"])
        xs = []
        for r in range(calls):
            t = time.perf_counter()
            a.describe_transactions([f"bench-idle-{r % ids}"])
            xs.append(time.perf_counter() - t)
    finally:
        a.close()
    print(f"DescribeTransactions with {ids} ids: p50 {pct(xs, 0.5) * 1e3:.2f} ms, "
          f"p99 {pct(xs, 0.99) * 1e3:.2f} ms over {calls} calls", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--per-txn", type=int, nargs="+", default=[10, 1000])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ids", type=int, default=0,
                    help="transactional ids registered (InitProducerId) before measuring, as a cluster "
                         "with many producers has: lookups that read every id's state grow with them")
    ap.add_argument("--s3", action="store_true",
                    help="a cluster of processes on S3 (moto) instead of a standalone on a local folder")
    ap.add_argument("--brokers", type=int, default=2, help="brokers of the --s3 cluster")
    ap.add_argument("--metrics", action="store_true",
                    help="print what each mode costs per transaction, from the broker's /metrics "
                         "(the standalone only)")
    ap.add_argument("--describe", type=int, default=0,
                    help="after registering the ids, time this many DescribeTransactions of them "
                         "(kafka-python's admin client) and print p50/p99")
    args = ap.parse_args()
    if args.metrics and args.s3:
        ap.error("--metrics reads the standalone's /metrics; it does not go with --s3")
    floe = os.environ.get("FLOE_BIN", str(ROOT / "target" / "release" / "floe"))
    modes = [("idempotent", 0)] + [(f"txn-{n}", n) for n in args.per_txn]
    with tempfile.TemporaryDirectory(prefix="floe-bench-txn-") as work:
        if args.s3:
            from s3_cluster import S3Cluster
            s = S3Cluster(floe, work, metas=1, brokers=args.brokers, proxies=1, endpoints=1)
            where = f"a cluster on S3 ({args.brokers} brokers, 1 proxy, 1 metadata node)"
        else:
            s = Standalone(floe, work, transactions=True)
            s.start()
            where = "floe standalone on a local folder"
        try:
            for i in range(args.ids):
                ck.Producer({"bootstrap.servers": s.bootstrap,
                             "transactional.id": f"bench-idle-{i}"}).init_transactions(60)
            if args.describe:
                describe(s.bootstrap, max(args.ids, 1), args.describe)
            mbs = {m: [] for m, _ in modes}
            commits = {m: [] for m, _ in modes}
            costs = {m: {} for m, _ in modes}
            for r in range(args.rounds):
                for name, n in modes:
                    topic = f"{name}-{r}"
                    create(s.bootstrap, topic, args.partitions)
                    before = scrape(s) if args.metrics else {}
                    rate, c = run(s.bootstrap, topic, args.records, args.size, n)
                    if args.metrics:
                        after = scrape(s)
                        for k, v in after.items():
                            costs[name][k] = costs[name].get(k, 0.0) + v - before.get(k, 0.0)
                    mbs[name].append(rate)
                    commits[name] += c
                    print(f"round {r} {name}: {rate:.1f} MB/s", flush=True)
        finally:
            s.stop()
    base = statistics.median(mbs["idempotent"])
    print(f"\n{where}: {args.records} records of {args.size} B, {args.partitions} partitions, "
          f"{args.rounds} rounds, {args.ids} other transactional ids, {floe}")
    print("| mode | MB/s (median) | runs | ratio to idempotent | commit p50 / p99 ms |")
    print("|---|---|---|---|---|")
    for name, _ in modes:
        med = statistics.median(mbs[name])
        lat = (f"{pct(commits[name], 0.5) * 1e3:.1f} / {pct(commits[name], 0.99) * 1e3:.1f}"
               if commits[name] else "—")
        runs = ", ".join(f"{x:.1f}" for x in mbs[name])
        print(f"| {name} | {med:.1f} | {runs} | {med / base:.2f} | {lat} |")
    if args.metrics:
        for name, n in modes:
            per = n or 1000
            units = args.records * args.rounds / per
            what = "transaction" if n else "1,000 records"
            print(f"\n{name}, per {what} ({units:.0f} of them), from /metrics:")
            print("| what | per " + ("transaction" if n else "1,000 records") + " | mean ms |")
            print("|---|---|---|")
            for label, count, ms in cost_rows(costs[name], units):
                print(f"| {label} | {count:.2f} | {'—' if ms is None else f'{ms:.2f}'} |")


if __name__ == "__main__":
    main()
