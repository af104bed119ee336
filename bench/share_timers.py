#!/usr/bin/env python3
"""Share groups' timer buckets: what a huge backlog of delayed records costs
the broker.

Starts `floe standalone --share-groups true` (the binary of `FLOE_BIN`, else
the release build) on a fresh data dir, produces `--records` records of
`--size` bytes to a topic of one partition, each with `floe-delay-ms` of
`--delay-ms` (an hour: all far in the future), then one plain record. One
confluent-kafka `ShareConsumer` of a new share group (explicit
acknowledgements) polls until the broker has taken the whole backlog into
the group: the plain record behind it has arrived (the backlog did not hold
it up) and the share-partition's start offset (`floe group describe
--json`) has reached the log end. Meanwhile the broker writes the delayed
records out of each share-partition's parked list (`--share-max-parked`,
the broker's default unless `--max-parked` is given) to timer buckets in the
object store.

Printed as a Markdown table: the time to take the backlog in; the broker's
resident memory before the consumer started and its peak while the backlog
was taken in (VmHWM of the standalone, reset through /proc/<pid>/clear_refs
when the consumer starts; otherwise the peak since the process started);
the `.tix` objects under `share-timers/` in the store, their number and
bytes; the timer metrics; and the size of the share-partition's state in
the metadata service (the window text of its last `ShareState` write, found
in the metadata node's files; "n/a" when not found there).

The broker's block cache (`--cache-bytes`, 256 MiB by default) fills as
the backlog's log is read, and counts in its RSS: `--cache-bytes 16777216`
shows what the timer index itself costs.

`--quick` is 10,000 records (a smoke run of the script itself).

Usage: FLOE_BIN=/work/tgt-rel/release/floe python bench/share_timers.py [--records 1000000]
"""

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import confluent_kafka as ck  # noqa: E402
import confluent_kafka.admin  # noqa: E402

from conftest import Standalone  # noqa: E402

_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')

TIMER_METRICS = [
    ("floe_broker_share_timer_entries_total", "event", ("sealed", "lost")),
    ("floe_broker_share_timer_buckets_total", "event", ("written", "merged", "deleted")),
    ("floe_broker_share_timer_errors_total", "op", ("put", "read", "delete", "list")),
]
OTHER_METRICS = [
    "floe_broker_share_records_delayed_total",
    "floe_broker_share_delayed_in_window_total",
]


def scrape(s):
    """{(name, frozenset(labels)): value} of the broker's /metrics."""
    with urllib.request.urlopen(s.admin_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            out[(m.group(1), frozenset(_LABEL.findall(m.group(2) or "")))] = float(m.group(3))
    return out


def metric(samples, name, **labels):
    want = set(labels.items())
    vals = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    return sum(vals) if vals else None


def proc_kb(pid, field):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reset_peak(pid):
    """Resets VmHWM to the current RSS (Linux 4.0+); False if refused."""
    try:
        pathlib.Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def produce(bootstrap, topic, records, size, delay_ms):
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 200, "batch.size": 1_000_000,
                     "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576})
    value = b"x" * size
    headers = [("floe-delay-ms", str(delay_ms).encode())]
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value=value, headers=headers)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(300) == 0
    p.produce(topic, value=b"end")
    assert p.flush(60) == 0


def describe(floe, bootstrap, group):
    """(start offset, log end offset) of the group's one partition, or None."""
    res = subprocess.run([floe, "group", "describe", group, "--json"], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ, FLOE_BOOTSTRAP=bootstrap))
    if res.returncode != 0:
        return None
    rows = json.loads(res.stdout).get("partitions") or []
    if not rows:
        return None
    return rows[0].get("start_offset"), rows[0].get("log_end_offset")


def state_sizes(data_dir, group):
    """The lengths of the share-partition state texts written for `group`
    found in the metadata node's files (its Raft log and snapshots): a
    window text starts with `1;` a few bytes after the group's name. Returns
    (largest, how many found, file) or None (the file format is the
    metadata service's own: this is a scan, not a parse)."""
    name = group.encode()
    text = re.compile(re.escape(name) + rb"[\x00-\xff]{0,16}?(1;[0-9a-z:;,./_-]*)")
    found = []
    for path in sorted((data_dir / "meta").rglob("*")):
        if path.is_file() and path.stat().st_size <= 1 << 30:
            found += [(len(m.group(1)), path) for m in text.finditer(path.read_bytes())]
    if not found:
        return None
    largest, path = max(found, key=lambda f: f[0])
    return largest, len(found), path


class Sampler(threading.Thread):
    """Samples the standalone's RSS every 100 ms (the peak of the samples
    backs up VmHWM where clear_refs is refused)."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak_kb, self.stop = pid, 0, threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.peak_kb = max(self.peak_kb, proc_kb(self.pid, "VmRSS"))
            time.sleep(0.1)


def take_backlog(s, floe, topic, group, records, timeout):
    """Polls until the plain record came and the start offset reached the
    log end. Returns (seconds to the plain record, seconds to the start
    offset at the end, delayed records delivered (should be 0))."""
    c = ck.ShareConsumer({"bootstrap.servers": s.bootstrap, "group.id": group,
                          "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    t0 = time.monotonic()
    end_at = caught_up_at = None
    delivered = 0
    next_check = t0 + 1
    last_print = t0
    try:
        while caught_up_at is None:
            now = time.monotonic()
            assert now - t0 < timeout, f"backlog not taken in after {timeout}s"
            msgs = c.poll(0.2)
            for m in msgs:
                if m.error() is not None:
                    continue
                c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
                if m.value() == b"end":
                    end_at = end_at or time.monotonic() - t0
                else:
                    delivered += 1
            if len(msgs):
                c.commit_sync()
            if end_at is not None and time.monotonic() >= next_check:
                next_check = time.monotonic() + 1
                d = describe(floe, s.bootstrap, group)
                if d and d[0] is not None and d[1] is not None and d[0] >= d[1]:
                    caught_up_at = time.monotonic() - t0
            if time.monotonic() - last_print >= 10:
                last_print = time.monotonic()
                sealed = metric(scrape(s), "floe_broker_share_timer_entries_total", event="sealed")
                print(f"  {last_print - t0:.0f}s: sealed {sealed:,.0f} of {records:,}, "
                      f"plain record {'in' if end_at else 'not yet'}, "
                      f"broker RSS {mib(proc_kb(s.pid, 'VmRSS'))}", flush=True)
    finally:
        c.close()
    return end_at, caught_up_at, delivered


def mib(kb):
    return f"{kb / 1024:,.1f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--delay-ms", type=int, default=3_600_000)
    ap.add_argument("--max-parked", type=int, help="--share-max-parked (default: the broker's)")
    ap.add_argument("--cache-bytes", type=int,
                    help="the broker's --cache-bytes, its block cache for reads (default: the broker's, 256 MiB):"
                         " reading the backlog's log fills it, which shows in the RSS")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds to take the backlog in at most")
    ap.add_argument("--quick", action="store_true", help="10,000 records")
    ap.add_argument("--keep", action="store_true", help="keep the data dir (its path is printed)")
    args = ap.parse_args()
    if args.quick:
        args.records = 10_000
    floe = os.environ.get("FLOE_BIN", str(ROOT / "target" / "release" / "floe"))
    work = tempfile.mkdtemp(prefix="floe-bench-share-timers-")
    options = dict(share_groups=True, share_auto_offset_reset="earliest")
    if args.max_parked:
        options["share_max_parked"] = args.max_parked
    if args.cache_bytes is not None:
        options["cache_bytes"] = args.cache_bytes
    s = Standalone(floe, work, **options)
    s.start()
    try:
        topic, group = "timers", f"bench-{uuid.uuid4().hex[:8]}"
        a = ck.admin.AdminClient({"bootstrap.servers": s.bootstrap})
        a.create_topics([ck.admin.NewTopic(topic, 1, 1)])[topic].result(30)
        del a
        t = time.monotonic()
        produce(s.bootstrap, topic, args.records, args.size, args.delay_ms)
        produce_s = time.monotonic() - t
        print(f"produced {args.records:,} delayed records + 1 plain in {produce_s:.1f}s", flush=True)
        time.sleep(2)
        rss_before = proc_kb(s.pid, "VmRSS")
        hwm_since_start = proc_kb(s.pid, "VmHWM")
        reset = reset_peak(s.pid)
        sampler = Sampler(s.pid)
        sampler.start()
        end_at, caught_up_at, delivered = take_backlog(s, floe, topic, group, args.records, args.timeout)
        sampler.stop.set()
        sampler.join()
        peak = proc_kb(s.pid, "VmHWM") if reset else sampler.peak_kb
        rss_after = proc_kb(s.pid, "VmRSS")
        samples = scrape(s)
        tix = [p for p in s.data_dir.rglob("*.tix") if "share-timers" in p.parts]
        tix_bytes = sum(p.stat().st_size for p in tix)
        start_end = describe(floe, s.bootstrap, group)
    finally:
        s.stop()
    state = state_sizes(s.data_dir, group)

    rows = [
        ("binary", f"`{floe}`"),
        ("records (delayed, value bytes, delay)",
         f"{args.records:,} × {args.size} B, floe-delay-ms {args.delay_ms:,}"),
        ("--share-max-parked", str(args.max_parked or "broker default")),
        ("--cache-bytes", "broker default" if args.cache_bytes is None else f"{args.cache_bytes:,}"),
        ("produce time", f"{produce_s:.1f} s"),
        ("plain record behind the backlog received after", f"{end_at:.1f} s"),
        ("backlog taken in (start offset = log end) after", f"{caught_up_at:.1f} s"),
        ("start offset / log end at the end", f"{start_end}"),
        ("delayed records delivered (expected 0)", f"{delivered:,}"),
        ("broker RSS before the consumer", mib(rss_before)),
        ("broker peak RSS while taking the backlog in" + ("" if reset else " (sampled)"), mib(peak)),
        ("peak minus before", mib(peak - rss_before)),
        ("broker RSS at the end", mib(rss_after)),
        ("broker peak RSS since start (produce included)", mib(hwm_since_start)),
        (".tix objects (count, bytes)",
         f"{len(tix):,}, {tix_bytes:,} B ({tix_bytes / max(1, args.records):.1f} B/record)"),
    ]
    for name, label, values in TIMER_METRICS:
        for v in values:
            rows.append((f"`{name}{{{label}=\"{v}\"}}`", f"{metric(samples, name, **{label: v}) or 0:,.0f}"))
    for name in OTHER_METRICS:
        value = metric(samples, name)
        rows.append((f"`{name}`", "n/a" if value is None else f"{value:,.0f}"))
    rows.append(("share-partition state text, largest write found in the metadata node's files",
                 f"{state[0]:,} B (of {state[1]:,} found in {state[2].relative_to(s.data_dir)})"
                 if state else "n/a"))
    print()
    print("| measure | value |")
    print("|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    if args.keep:
        print(f"\ndata dir kept: {work}")
    else:
        import shutil
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
