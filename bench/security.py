#!/usr/bin/env python3
"""What TLS and SASL cost a client (issue 37's figures).

Starts `floe standalone` (the binary of `FLOE_BIN`, else the release build)
with a listener of each protocol (PLAINTEXT, SSL, SASL_SSL with SCRAM-SHA-512),
certificates made with openssl and a SCRAM user made with `floe user`, then
with confluent-kafka, for each listener in turn, `--rounds` times alternated:

- produce: `--records` records of `--size` bytes with acks=all to a topic of
  `--partitions` partitions, MB/s;
- consume: the same records read back from the beginning (assign()), MB/s;
- connect: a new client's first Metadata answer (TCP, TLS handshake, SASL
  exchange, ApiVersions, Metadata), median of `--connects` clients, ms.

Printed: each run, then per listener the medians and their ratio to
PLAINTEXT in the same run.

Usage: FLOE_BIN=target/release/floe python bench/security.py [--records 200000] [--rounds 3]
       python bench/security.py --quick    (a small run, as tests/test_bench_harness.py does)
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import confluent_kafka as ck  # noqa: E402
import confluent_kafka.admin  # noqa: E402

from conftest import Standalone, port_of  # noqa: E402

PASSWORD = "bench-password"
LISTENERS = ["PLAINTEXT", "SSL", "SASL_SSL"]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def certificates(d):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "30",
            "-subj", "/CN=bench CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=localhost",
            "-keyout", "server.key", "-out", "server.csr", cwd=d)
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "30", "-extfile", "server.ext", "-out", "server.pem", cwd=d)


class Secure(Standalone):
    def __init__(self, floe_bin, workdir, certs):
        super().__init__(floe_bin, workdir, name="bench-secure")
        self.certs = certs

    def args(self):
        return super().args() + [
            "--listeners", ",".join(f"{n}://127.0.0.1:0" for n in LISTENERS),
            "--ssl-certfile", str(self.certs / "server.pem"), "--ssl-keyfile", str(self.certs / "server.key"),
        ]


def client_conf(s, ports, listener):
    conf = {"bootstrap.servers": f"127.0.0.1:{ports[listener]}", "security.protocol": listener}
    if listener != "PLAINTEXT":
        conf["ssl.ca.location"] = str(s.certs / "ca.pem")
    if listener.startswith("SASL"):
        conf.update({"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "bench", "sasl.password": PASSWORD})
    return conf


def produce(conf, topic, records, size):
    p = ck.Producer({**conf, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
                     "enable.idempotence": True})
    value = b"x" * size
    start = time.monotonic()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=value, key=str(i % 1000))
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    assert p.flush(300) == 0
    return records * size / (time.monotonic() - start) / 1e6


def consume(conf, topic, partitions, records, size):
    """Reads with assign() (no group join in the time measured)."""
    c = ck.Consumer({**conf, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                     "fetch.max.bytes": 52428800})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    start = time.monotonic()
    deadline = start + 300
    while got < records and time.monotonic() < deadline:
        for m in c.consume(1000, 1.0):
            if m.error() is None:
                got += 1
    took = time.monotonic() - start
    c.close()
    assert got >= records, f"read {got} of {records}"
    return records * size / took / 1e6


def connect_ms(conf, topic, n):
    times = []
    for _ in range(n):
        start = time.monotonic()
        ck.admin.AdminClient(conf).list_topics(topic, timeout=30)
        times.append((time.monotonic() - start) * 1000)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connects", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="a small run: 2,000 records, 1 round, 3 connects")
    args = ap.parse_args()
    if args.quick:
        args.records, args.rounds, args.connects = 2000, 1, 3
    floe_bin = os.environ.get("FLOE_BIN") or str(ROOT / "target" / "release" / "floe")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        certs = tmp / "certs"
        certs.mkdir()
        certificates(certs)
        s = Secure(floe_bin, tmp, certs)
        s.start()
        try:
            bound = json.loads(s.ports_path.read_text())
            ports = {n: port_of(bound[f"kafka.{n.lower()}"]) for n in LISTENERS}
            env = dict(os.environ, FLOE_USER_PASSWORD=PASSWORD)
            subprocess.run([floe_bin, "user", "create", "bench", "--mechanism", "SCRAM-SHA-512",
                            "--bootstrap", f"127.0.0.1:{ports['PLAINTEXT']}"], env=env, check=True,
                           capture_output=True)
            results = {n: {"produce": [], "consume": [], "connect": []} for n in LISTENERS}
            for r in range(args.rounds):
                for n in LISTENERS:
                    conf = client_conf(s, ports, n)
                    topic = f"bench-{n.lower()}-{r}"
                    admin = ck.admin.AdminClient(conf)
                    admin.create_topics([ck.admin.NewTopic(topic, args.partitions, 1)])[topic].result(30)
                    pr = produce(conf, topic, args.records, args.size)
                    co = consume(conf, topic, args.partitions, args.records, args.size)
                    cn = connect_ms(conf, topic, args.connects)
                    results[n]["produce"].append(pr)
                    results[n]["consume"].append(co)
                    results[n]["connect"].append(cn)
                    print(f"round {r} {n:10} produce {pr:7.1f} MB/s  consume {co:7.1f} MB/s  connect {cn:6.1f} ms",
                          flush=True)
            med = {n: {k: statistics.median(v) for k, v in results[n].items()} for n in LISTENERS}
            base = med["PLAINTEXT"]
            print(f"\n{args.records} records of {args.size} B, {args.partitions} partitions, "
                  f"{args.rounds} rounds (medians; ratio to PLAINTEXT)")
            for n in LISTENERS:
                m = med[n]
                print(f"{n:10} produce {m['produce']:7.1f} MB/s ({m['produce'] / base['produce']:.2f})  "
                      f"consume {m['consume']:7.1f} MB/s ({m['consume'] / base['consume']:.2f})  "
                      f"connect {m['connect']:6.1f} ms ({m['connect'] / base['connect']:.2f})")
        finally:
            s.stop()


if __name__ == "__main__":
    main()
