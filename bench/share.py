#!/usr/bin/env python3
"""Share groups against classic consumption (issue 15's figures).

Starts `floe standalone` (the binary of `FLOE_BIN`, else the release build)
on a fresh data dir with ports chosen by the system, produces `--records`
records of `--size` bytes to a topic of `--partitions` partitions (one by
default), then reads all of them:

- `classic`: one confluent-kafka `Consumer` of a new group (auto commit);
  its clock runs from the first record received to the last, as the share
  modes' clock does (group joins are not counted);
- `share-K` for each K of `--consumers` (default 1, 3 and 10): K
  `ShareConsumer`s, each in its own process, of a new share group, each
  record acknowledged ACCEPT explicitly (the acknowledgements ride on the
  next poll, as a client in a loop sends them).

Each mode runs `--rounds` times, alternated. Printed: records/s per run and
the median, the ratio to classic, and for share modes whether any record
was delivered twice. Then `--redeliveries` samples of the redelivery
latency after a lock expiry: a consumer takes one record and holds it
without acknowledging; another polls; the time from the lock's end (the
acquisition plus `--lock-ms`, the proxy's `--share-record-lock-duration-ms`)
to the record reaching the other consumer. Last, `--delayed` records with a
`floe-deliver-at` header spread over `--spread-ms` from now, read by one
`ShareConsumer`: how late each arrived after its due time (p50, p99, max),
and whether any arrived early.

`--redeliveries 0` and `--delayed 0` skip those parts.
With `--quick` everything is small (a smoke run of the script itself).

Usage: FLOE_BIN=target/release/floe python bench/share.py [--records 50000]
"""

import argparse
import multiprocessing as mp
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import confluent_kafka as ck  # noqa: E402
import confluent_kafka.admin  # noqa: E402

from conftest import Standalone  # noqa: E402


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def create(bootstrap, topic, partitions=1):
    a = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([ck.admin.NewTopic(topic, partitions, 1)])[topic].result(30)


def fill(bootstrap, topic, records, size):
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                     "queue.buffering.max.messages": 1_000_000})
    value = b"x" * size
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value=value)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0


def classic(bootstrap, topic, records):
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"classic-{uuid.uuid4().hex[:8]}",
                     "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = 0
    start = None
    deadline = time.monotonic() + 300
    while got < records:
        assert time.monotonic() < deadline, f"classic read {got} of {records}"
        for m in c.consume(1000, 0.5):
            if m.error() is None:
                if start is None:
                    start = time.perf_counter()
                got += 1
    elapsed = time.perf_counter() - start
    c.close()
    return records / elapsed


def share_worker(bootstrap, group, topic, total, counted, first, go, out, extra):
    """One share consumer: polls and ACCEPTs until `counted` reaches `total`;
    sends back the (partition, offset) pairs it got. The first record any worker gets sets
    `first` (the clock's start, as for classic)."""
    c = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                          "share.acknowledgement.mode": "explicit", **extra})
    c.subscribe([topic])
    go.wait()
    offsets = []
    deadline = time.monotonic() + 300
    while counted.value < total and time.monotonic() < deadline:
        msgs = c.poll(0.2)
        n = 0
        for m in msgs:
            if m.error() is None:
                c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
                offsets.append((m.partition(), m.offset()))
                n += 1
        if n:
            with counted.get_lock():
                if counted.value == 0:
                    first.value = time.perf_counter()
                counted.value += n
    c.commit_sync()
    c.close()
    out.put(offsets)


def share(bootstrap, topic, records, consumers, extra=None):
    """Returns (records/s, records delivered more than once)."""
    group = f"share-{uuid.uuid4().hex[:8]}"
    counted = mp.Value("q", 0)
    first = mp.Value("d", 0.0)
    go = mp.Event()
    out = mp.Queue()
    procs = [mp.Process(target=share_worker,
                        args=(bootstrap, group, topic, records, counted, first, go, out, extra or {}))
             for _ in range(consumers)]
    for p in procs:
        p.start()
    time.sleep(1.0)  # let them all subscribe: the group's first assignment
    go.set()
    started = time.perf_counter()
    while counted.value < records:
        time.sleep(0.005)
        assert time.perf_counter() - started < 300, f"share-{consumers} read {counted.value} of {records}"
    elapsed = time.perf_counter() - first.value
    seen = []
    for _ in procs:
        seen += out.get(timeout=60)
    for p in procs:
        p.join(60)
    return records / elapsed, len(seen) - len(set(seen))


def redelivery(bootstrap, topic, lock_ms, samples):
    """Seconds from each held record's lock end to its redelivery elsewhere."""
    out = []
    for _ in range(samples):
        group = f"redeliver-{uuid.uuid4().hex[:8]}"
        holder = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                   "share.acknowledgement.mode": "explicit"})
        holder.subscribe([topic])
        taken = None
        deadline = time.monotonic() + 60
        while taken is None:
            assert time.monotonic() < deadline, "the holder got nothing"
            for m in holder.poll(0.5):
                if m.error() is None and taken is None:
                    taken = (m.offset(), time.time())
        other = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "share.acknowledgement.mode": "explicit"})
        other.subscribe([topic])
        back = None
        deadline = time.monotonic() + 60 + lock_ms / 1000
        while back is None:
            assert time.monotonic() < deadline, "the held record never came back"
            for m in other.poll(0.05):
                if m.error() is None:
                    if m.offset() == taken[0]:
                        back = time.time()
                    other.acknowledge(m, ck.AcknowledgeType.ACCEPT)
        out.append(back - (taken[1] + lock_ms / 1000))
        other.close()
        holder.close()
    return out


def delayed(bootstrap, topic, n, spread_ms):
    """Lateness (s) of each delayed record after its due time, and how many
    came early."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    start_ms = int(time.time() * 1000) + 500
    due = {}
    for i in range(n):
        at = start_ms + (i * spread_ms) // max(n - 1, 1)
        key = f"d{i}".encode()
        due[key] = at / 1000
        p.produce(topic, key=key, value=b"x", headers=[("floe-deliver-at", str(at).encode())])
    assert p.flush(60) == 0
    c = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": f"delayed-{uuid.uuid4().hex[:8]}",
                          "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    late, early = [], 0
    deadline = time.monotonic() + 60 + spread_ms / 1000
    while len(late) + early < n:
        assert time.monotonic() < deadline, f"{len(late) + early} of {n} delayed records came"
        for m in c.poll(0.05):
            if m.error() is None:
                now = time.time()
                c.acknowledge(m, ck.AcknowledgeType.ACCEPT)
                d = now - due[m.key()]
                if d < 0:
                    early += 1
                else:
                    late.append(d)
    c.close()
    return late, early


def api_times(admin_url):
    """The proxy's answer time per Kafka API (`floe_proxy_request_seconds`, a
    histogram) for the share and fetch APIs: count, mean and the 0.5 and 0.99
    quantiles (interpolated within their buckets), in seconds."""
    import re
    import urllib.request
    with urllib.request.urlopen(admin_url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    pat = re.compile(r'^floe_proxy_request_seconds(_sum|_count|_bucket)\{([^}]*)\}\s+(\S+)')
    for line in text.splitlines():
        m = pat.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        api = labels.get("api", "")
        if api not in ("ShareFetch", "ShareAcknowledge", "Fetch"):
            continue
        t = out.setdefault(api, {"buckets": []})
        if m.group(1) == "_sum":
            t["sum"] = float(m.group(3))
        elif m.group(1) == "_count":
            t["count"] = float(m.group(3))
        else:
            t["buckets"].append((float(labels["le"]), float(m.group(3))))
    for t in out.values():
        t["mean"] = t.get("sum", 0.0) / t["count"] if t.get("count") else 0.0
        t.setdefault("count", 0.0)
        buckets = sorted(t.pop("buckets"))
        for q in ("0.5", "0.99"):
            t[q] = bucket_quantile(buckets, float(q))
    return out


def bucket_quantile(buckets, q):
    """The `q` quantile of cumulative (bound, count) buckets, interpolated
    linearly within the bucket it falls in (as Prometheus does)."""
    if not buckets or buckets[-1][1] == 0:
        return 0.0
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, cum in buckets:
        if cum >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * ((rank - below) / (cum - below) if cum > below else 1.0)
        lower, below = bound, cum
    return lower


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--consumers", type=int, nargs="+", default=[1, 3, 10])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-poll-records", type=int, default=0,
                    help="the ShareConsumers' max.poll.records (0: the client's default, 500)")
    ap.add_argument("--partitions", type=int, default=1,
                    help="partitions of the throughput rounds' topics")
    ap.add_argument("--lock-ms", type=int, default=1000)
    ap.add_argument("--redeliveries", type=int, default=5)
    ap.add_argument("--delayed", type=int, default=2000)
    ap.add_argument("--spread-ms", type=int, default=5000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.records, args.consumers, args.rounds, args.redeliveries = 2000, [1, 2], 1, 1
        args.delayed, args.spread_ms = 50, 1000
    floe = os.environ.get("FLOE_BIN", str(ROOT / "target" / "release" / "floe"))
    modes = [("classic", 0)] + [(f"share-{k}", k) for k in args.consumers]
    rates = {m: [] for m, _ in modes}
    dupes = {m: 0 for m, _ in modes}
    with tempfile.TemporaryDirectory(prefix="floe-bench-share-") as work:
        s = Standalone(floe, work, share_auto_offset_reset="earliest",
                       share_record_lock_duration_ms=args.lock_ms)
        s.start()
        try:
            for r in range(args.rounds):
                topic = f"bench-{r}"
                create(s.bootstrap, topic, args.partitions)
                fill(s.bootstrap, topic, args.records, args.size)
                for name, k in modes:
                    if k == 0:
                        rate = classic(s.bootstrap, topic, args.records)
                    else:
                        extra = {"max.poll.records": args.max_poll_records} if args.max_poll_records else {}
                        rate, d = share(s.bootstrap, topic, args.records, k, extra)
                        dupes[name] += d
                    rates[name].append(rate)
                    print(f"round {r} {name}: {rate:,.0f} records/s", flush=True)
            lat, late, early = [], [], 0
            if args.redeliveries:
                topic = "redelivery"
                create(s.bootstrap, topic)
                fill(s.bootstrap, topic, 10, args.size)
                lat = redelivery(s.bootstrap, topic, args.lock_ms, args.redeliveries)
            if args.delayed:
                topic = "delayed"
                create(s.bootstrap, topic)
                late, early = delayed(s.bootstrap, topic, args.delayed, args.spread_ms)
            answer_times = api_times(s.admin_url)
        finally:
            s.stop()
    base = statistics.median(rates["classic"])
    print(f"\n{args.records} records of {args.size} B on {args.partitions} partition(s), "
          f"{args.rounds} rounds, {floe}")
    print("| mode | records/s (median) | runs | ratio to classic | delivered twice |")
    print("|---|---|---|---|---|")
    for name, k in modes:
        med = statistics.median(rates[name])
        runs = ", ".join(f"{x:,.0f}" for x in rates[name])
        twice = "—" if k == 0 else str(dupes[name])
        print(f"| {name} | {med:,.0f} | {runs} | {med / base:.2f} | {twice} |")
    if answer_times:
        print("\nthe proxy's answer times over the whole run (floe_proxy_request_seconds; "
              "a fetch's wait for data included):")
        print("| API | requests | mean ms | p50 ms | p99 ms |")
        print("|---|---|---|---|---|")
        for api, t in sorted(answer_times.items()):
            print(f"| {api} | {t['count']:,.0f} | {t['mean'] * 1e3:.2f} | {t.get('0.5', 0) * 1e3:.2f} | "
                  f"{t.get('0.99', 0) * 1e3:.2f} |")
    if lat:
        print(f"\nredelivery after a {args.lock_ms} ms lock expired, {len(lat)} samples: "
              f"p50 {pct(lat, 0.5) * 1e3:.0f} ms, max {max(lat) * 1e3:.0f} ms after the lock's end")
    if late:
        print(f"{args.delayed} delayed records over {args.spread_ms} ms: lateness p50 {pct(late, 0.5) * 1e3:.0f} ms, "
              f"p99 {pct(late, 0.99) * 1e3:.0f} ms, max {max(late) * 1e3:.0f} ms; early: {early}")
    if any(dupes.values()):
        sys.exit("a record was delivered twice")
    if early:
        sys.exit("a delayed record came early")


if __name__ == "__main__":
    main()
