#!/usr/bin/env python3
"""How fast the web console answers at scale (issue 43: "works at 1,000 topics
and 10,000 partitions; every page loads in under a second on the standalone").

Starts a `floe standalone` (the binary of `FLOE_BIN`, else the release build),
creates `--topics` topics of `--partitions` partitions (1,000 x 10 by default),
writes a record to every partition of a sample of them, and commits offsets
for `--groups` consumer groups. Then:

- each JSON route the pages read, `--rounds` times: median, p90 and the
  slowest, in ms (the overview, a page of topics, a filtered page, a topic, its
  records, its producers, groups, a group, transactions, exports);
- with `--browser` (Debian's chromium and chromium-driver, Selenium): each page
  loaded in headless Chromium from a fresh navigation until its table or chart
  is drawn, `--rounds` times, median and slowest, in ms.

Printed as a table, and written to `--out` (results.md and results.json).

Usage: FLOE_BIN=target/release/floe python bench/console.py [--topics 1000] [--partitions 10] [--browser]
       python bench/console.py --quick    (50 topics of 4 partitions, 3 rounds)
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import confluent_kafka as ck  # noqa: E402
import confluent_kafka.admin as cka  # noqa: E402

from conftest import Standalone  # noqa: E402


def floe_bin():
    found = os.environ.get("FLOE_BIN") or str(ROOT / "target" / "release" / "floe")
    if not pathlib.Path(found).exists():
        sys.exit(f"no floe binary at {found}: build it (cargo build --release) or set FLOE_BIN")
    return found


def create_topics(bootstrap, names, partitions, batch=100):
    admin = cka.AdminClient({"bootstrap.servers": bootstrap})
    for i in range(0, len(names), batch):
        fs = admin.create_topics([cka.NewTopic(n, partitions) for n in names[i:i + batch]], request_timeout=120)
        for f in fs.values():
            f.result()


def fill(bootstrap, names, partitions, groups):
    """A record in every partition of the sample's topics; offsets committed
    for `groups` groups on the first sample topic."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for n in names:
        for part in range(partitions):
            p.produce(n, key=f"k{part}", value=json.dumps({"topic": n, "partition": part}).encode(), partition=part)
    assert p.flush(120) == 0
    for g in range(groups):
        c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"console-bench-group-{g:04}",
                         "enable.auto.commit": False})
        c.commit(offsets=[ck.TopicPartition(names[0], part, 0) for part in range(partitions)], asynchronous=False)
        c.close()


def timed_get(url):
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
        assert r.status == 200, (url, r.status)
    return (time.perf_counter() - t0) * 1000, len(body)


def summary(samples):
    s = sorted(samples)
    p90 = s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))]
    return {"median_ms": round(statistics.median(s), 1), "p90_ms": round(p90, 1), "max_ms": round(s[-1], 1)}


def bench_routes(admin_url, routes, rounds):
    out = {}
    for label, path in routes:
        timed_get(admin_url + path)  # a first call warms what a first visitor warms
        samples, size = [], 0
        for _ in range(rounds):
            ms, size = timed_get(admin_url + path)
            samples.append(ms)
        out[label] = {**summary(samples), "bytes": size, "route": path}
    return out


def bench_pages(admin_url, pages, rounds):
    """Each page from a fresh navigation until `ready` (a CSS selector) shows
    and the page is no longer busy, in ms."""
    from selenium import webdriver
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        opts.add_argument(a)
    opts.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path="/usr/bin/chromedriver"), options=opts)
    out = {}
    try:
        for label, route, ready in pages:
            samples = []
            for i in range(rounds + 1):
                driver.get("about:blank")
                t0 = time.perf_counter()
                driver.get(f"{admin_url}/ui/{route}")
                WebDriverWait(driver, 60).until(lambda d: d.execute_script(
                    "return document.querySelector(arguments[0]) !== null"
                    " && document.getElementById('main').getAttribute('aria-busy') !== 'true'", ready))
                if i:  # the first load fills the browser's cache of the assets
                    samples.append((time.perf_counter() - t0) * 1000)
            out[label] = summary(samples)
    finally:
        driver.quit()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--sample", type=int, default=20, help="topics given a record in every partition")
    ap.add_argument("--groups", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--browser", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "bench" / "results" / "console")
    a = ap.parse_args()
    if a.quick:
        a.topics, a.partitions, a.sample, a.groups, a.rounds = 50, 4, 5, 10, 3
    work = pathlib.Path(tempfile.mkdtemp(prefix="floe-console-bench-"))
    s = Standalone(floe_bin(), work, name="console-bench")
    s.start()
    try:
        names = [f"bench-topic-{i:05}" for i in range(a.topics)]
        t0 = time.perf_counter()
        create_topics(s.bootstrap, names, a.partitions)
        created_s = time.perf_counter() - t0
        fill(s.bootstrap, names[:a.sample], a.partitions, a.groups)
        topic, group = names[0], "console-bench-group-0000"
        routes = [
            ("overview", "/ui/api/overview"),
            ("topics, first page of 50", "/ui/api/topics?limit=50"),
            ("topics, a filtered page", "/ui/api/topics?q=topic-009&limit=50"),
            ("topics, the last page", f"/ui/api/topics?offset={max(0, a.topics - 50)}&limit=50"),
            ("a topic", f"/ui/api/topics/{topic}"),
            ("its records (20)", f"/ui/api/topics/{topic}/records?partition=0&offset=0"),
            ("its producers", f"/ui/api/topics/{topic}/producers"),
            ("groups, first page", "/ui/api/groups?limit=50"),
            ("a group", f"/ui/api/groups/{group}"),
            ("transactions", "/ui/api/transactions"),
            ("exports", "/ui/api/exports"),
            ("metrics", "/ui/api/metrics"),
        ]
        results = {"topics": a.topics, "partitions": a.topics * a.partitions, "groups": a.groups,
                   "create_s": round(created_s, 1), "routes": bench_routes(s.admin_url, routes, a.rounds)}
        if a.browser:
            pages = [
                ("overview", "#/", "#brokers"),
                ("topics", "#/topics", "#topics-list"),
                ("a topic", f"#/topics/{topic}", "#partitions"),
                ("its records", f"#/topics/{topic}/records", "#records"),
                ("groups", "#/groups", "#groups-list"),
                ("a group", f"#/groups/{group}", "#offsets"),
            ]
            results["pages"] = bench_pages(s.admin_url, pages, max(3, a.rounds // 4))
    finally:
        s.stop()
    lines = [f"Console at {a.topics:,} topics, {a.topics * a.partitions:,} partitions, {a.groups:,} groups "
             f"(created in {results['create_s']} s; binary {floe_bin()})", "",
             "| route | median ms | p90 ms | slowest ms | answer bytes |", "|---|---|---|---|---|"]
    for label, r in results["routes"].items():
        lines.append(f"| {label} (`{r['route']}`) | {r['median_ms']} | {r['p90_ms']} | {r['max_ms']} | {r['bytes']:,} |")
    if "pages" in results:
        lines += ["", "| page in headless Chromium | median ms | p90 ms | slowest ms |", "|---|---|---|---|"]
        for label, r in results["pages"].items():
            lines.append(f"| {label} | {r['median_ms']} | {r['p90_ms']} | {r['max_ms']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.md").write_text(text)
    (a.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
