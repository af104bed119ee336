#!/usr/bin/env python3
"""Produce a backlog, read it back, and say where the read came from.

Starts `floe standalone` (the binary of `FLOE_BIN`, else the release build;
`FLOE_STORE_DIRECT_IO` and `FLOE_CACHE_BYTES` pass through) on a fresh data
dir, produces `--records` records of 1 KiB to a topic of 16 partitions with
the harness's `rdkafka_performance` (built by `bench/compare.py`), then
reads them all from the beginning and prints:

- the read's MB/s, of wall time and from the first record;
- the bytes the broker read from the disk meanwhile (`/proc/PID/io`);
- the block cache's blocks by outcome (`floe_cache_blocks_total`).

Usage: FLOE_BIN=target/release/floe python bench/readback.py [--records 1000000]
"""

import argparse
import os
import pathlib
import sys
import tempfile
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from compare import CACHE, RdkafkaPerformance, build_floe  # noqa: E402
from conftest import Standalone  # noqa: E402
from txn import create  # noqa: E402


def cache_blocks(admin):
    text = urllib.request.urlopen(admin + "/metrics").read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("floe_cache_blocks_total{"):
            out[line.split('"')[1]] = float(line.split()[-1])
    return out


def disk_read(pid):
    for line in open(f"/proc/{pid}/io"):
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    tool = CACHE / "bin" / "rdkafka_performance"
    if not tool.exists():
        sys.exit(f"{tool} is missing: bench/compare.py builds it")
    with tempfile.TemporaryDirectory() as work:
        gen = RdkafkaPerformance(tool, work)
        s = Standalone(str(build_floe()), work)
        s.start()
        try:
            create(s.bootstrap, "backlog", 16)
            p = gen.produce(s.bootstrap, "backlog", 1024, args.records)
            print(f"produced {p['acked']} records at {p['bytes'] / p['secs'] / 1e6:.0f} MB/s")
            blocks0, disk0 = cache_blocks(s.admin_url), disk_read(s.proc.pid)
            r = gen.consume(s.bootstrap, "backlog", 16, args.records)
            blocks1, disk1 = cache_blocks(s.admin_url), disk_read(s.proc.pid)
            print(f"read {r['read']} records ({r['bytes'] / 1e6:.0f} MB): {r['bytes'] / r['secs'] / 1e6:.0f} MB/s, "
                  f"{r['bytes'] / r['stream_secs'] / 1e6:.0f} MB/s from the first record")
            print(f"the broker read {(disk1 - disk0) / 1e6:.0f} MB from the disk")
            print("block cache: " + ", ".join(f"{k} {blocks1.get(k, 0) - blocks0.get(k, 0):.0f}"
                                               for k in sorted(blocks1)))
        finally:
            s.stop()


if __name__ == "__main__":
    main()
