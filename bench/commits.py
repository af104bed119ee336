#!/usr/bin/env python3
"""Pipelined asynchronous offset commits, as librdkafka's `commit(asynchronous=True)`
sends them: one consumer commits `--commits` increasing offsets of one partition
without waiting, all in flight on its coordinator connection, and the time until
every commit is answered is measured (commits per second).

Since issue 39 the commits of one group on one connection take effect in the
order sent, one after the other (`proxy/src/ordering.rs`); before, they ran
side by side and could land out of order. This measures what that order costs.

Each binary of `--bins` (default: `FLOE_BIN`) runs as its own `floe standalone`
on a fresh data dir with ports chosen by the system; the binaries alternate
A B B A … for `--rounds` rounds (the host's drift falls on both alike).
Printed: commits/s per run, and per binary the median and its ratio to the
first binary's.

Usage: python bench/commits.py --bins /tmp/before/floe /tmp/after/floe [--commits 2000] [--rounds 4]
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


def one_run(floe_bin, commits):
    with tempfile.TemporaryDirectory() as tmp:
        s = Standalone(floe_bin, tmp, name="commits")
        s.start()
        try:
            a = ck.admin.AdminClient({"bootstrap.servers": s.bootstrap})
            a.create_topics([ck.admin.NewTopic("c", 1, 1)])["c"].result(30)
            answered = []
            c = ck.Consumer({"bootstrap.servers": s.bootstrap, "group.id": "bench",
                             "enable.auto.commit": False,
                             "on_commit": lambda err, ps: answered.append(err)})
            try:
                c.assign([ck.TopicPartition("c", 0, 0)])
                c.commit(offsets=[ck.TopicPartition("c", 0, 0)], asynchronous=False)
                start = time.perf_counter()
                for offset in range(1, commits + 1):
                    c.commit(offsets=[ck.TopicPartition("c", 0, offset)], asynchronous=True)
                while len(answered) < commits:
                    c.poll(0.01)
                elapsed = time.perf_counter() - start
                errors = [e for e in answered if e is not None]
                assert not errors, errors[:3]
                last = c.committed([ck.TopicPartition("c", 0)], timeout=30)[0].offset
            finally:
                c.close()
            return commits / elapsed, last
        finally:
            s.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bins", nargs="+", default=[os.environ.get("FLOE_BIN", str(ROOT / "target/release/floe"))])
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    rates = {b: [] for b in args.bins}
    for r in range(args.rounds):
        order = args.bins if r % 2 == 0 else list(reversed(args.bins))
        for b in order:
            rate, last = one_run(b, args.commits)
            rates[b].append(rate)
            print(f"round {r + 1} {b}: {rate:,.0f} commits/s, committed {last} "
                  f"({'the last sent' if last == args.commits else 'NOT the last sent'})", flush=True)
    first = statistics.median(rates[args.bins[0]])
    for b in args.bins:
        m = statistics.median(rates[b])
        print(f"{b}: median {m:,.0f} commits/s over {len(rates[b])} runs, ratio {m / first:.2f}")


if __name__ == "__main__":
    main()
