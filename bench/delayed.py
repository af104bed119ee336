#!/usr/bin/env python3
"""Delayed topics for classic consumers: how late records arrive.

Starts `floe standalone` (the binary of `FLOE_BIN`, else the release build)
on a fresh data dir, creates a topic of one partition with
`floe.delayed.delivery=true`, and produces `--records` records with an
idempotent producer, each with a `floe-deliver-at` header spread evenly over
`--spread-ms` starting `--lead-ms` from now. One confluent-kafka consumer
reads the topic from the beginning and notes when each record arrives.
Printed: how late each arrived after its due time (p50, p99, max), whether
any arrived early, and whether any arrived twice.

Usage: FLOE_BIN=target/debug/floe python bench/delayed.py [--records 1000]
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time
from collections import Counter

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import confluent_kafka as ck  # noqa: E402
import confluent_kafka.admin  # noqa: E402

from conftest import Standalone  # noqa: E402


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def now_ms():
    return time.time() * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--spread-ms", type=int, default=5000)
    ap.add_argument("--lead-ms", type=int, default=1000)
    args = ap.parse_args()
    floe = os.environ.get("FLOE_BIN", str(ROOT / "target" / "release" / "floe"))
    with tempfile.TemporaryDirectory(prefix="floe-bench-delayed-") as work:
        s = Standalone(floe, work)
        s.start()
        try:
            topic = "delayed"
            a = ck.admin.AdminClient({"bootstrap.servers": s.bootstrap})
            a.create_topics([ck.admin.NewTopic(topic, 1, 1, config={"floe.delayed.delivery": "true"})])[
                topic].result(30)
            p = ck.Producer({"bootstrap.servers": s.bootstrap, "enable.idempotence": True, "linger.ms": 5})
            start = now_ms() + args.lead_ms
            due = {}
            for i in range(args.records):
                at = int(start + args.spread_ms * i / max(1, args.records))
                value = b"%d" % i
                due[value] = at
                p.produce(topic, value=value, headers=[("floe-deliver-at", str(at).encode())])
                p.poll(0)
            assert p.flush(60) == 0
            c = ck.Consumer({"bootstrap.servers": s.bootstrap, "group.id": "bench-delayed",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
            c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
            seen = Counter()
            late = []
            deadline = time.monotonic() + (args.lead_ms + args.spread_ms) / 1000 + 60
            while len(seen) < args.records and time.monotonic() < deadline:
                for m in c.consume(num_messages=500, timeout=0.1):
                    if m.error():
                        continue
                    t = now_ms()
                    seen[m.value()] += 1
                    late.append(t - due[m.value()])
            c.close()
            import urllib.request
            with urllib.request.urlopen(s.admin_url + "/metrics", timeout=5) as r:
                broker = [ln for ln in r.read().decode().splitlines()
                          if ln.startswith("floe_broker_delayed_lateness_seconds")
                          or ln.startswith("floe_broker_delayed_scans_total")]
        finally:
            s.stop()
    early = sum(1 for x in late if x < 0)
    twice = sum(1 for n in seen.values() if n > 1)
    print(f"{len(seen)} of {args.records} delayed records over {args.spread_ms} ms, {floe}")
    print("at the broker (due time to the re-append's commit):", *broker, sep="\n  ")
    print(f"lateness ms: p50 {pct(late, 0.5):.1f}, p99 {pct(late, 0.99):.1f}, max {max(late):.1f}; "
          f"early {early}, twice {twice}")


if __name__ == "__main__":
    main()
