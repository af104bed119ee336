#!/usr/bin/env python3
"""What the authorizer costs a client (issue 37's figures): 1,000 ACLs against none.

Starts two `floe standalone`s (the binary of `FLOE_BIN`, else the release
build) side by side: one with no authorizer, one with `--authorizer acl` and
`--acls` ACLs (default 1,000: literal and prefixed, on topics, groups and
transactional ids, for other principals, plus the few that let the benchmark's
client, `User:ANONYMOUS` on the PLAINTEXT listener, write and read its
topics). Then, `--rounds` times alternated, with confluent-kafka on each:

- produce: `--records` records of `--size` bytes with acks=all, MB/s;
- consume: the same records read back from the beginning with a group
  (subscribe, so the group's requests are authorized too), MB/s from the
  first record (the group's join is not timed);
- metadata: a new client's first Metadata answer, median of `--connects`, ms.

Printed: each run, then the medians and the ratio of the ACL run to the open one.

Usage: FLOE_BIN=target/release/floe python bench/acls.py [--records 200000] [--rounds 3] [--acls 1000]
       python bench/acls.py --quick    (a small run, as tests/test_bench_harness.py does)
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import confluent_kafka as ck  # noqa: E402
import confluent_kafka.admin as cka  # noqa: E402

from conftest import Standalone, port_of  # noqa: E402
from security import connect_ms, produce  # noqa: E402

ADMIN_PASSWORD = "bench-admin-password"


class Node(Standalone):
    def __init__(self, floe_bin, workdir, name, authorizer):
        super().__init__(floe_bin, workdir, name=name)
        self.authorizer = authorizer
        self.users = pathlib.Path(workdir) / f"{name}-users"
        self.users.write_text(f"admin:{ADMIN_PASSWORD}\n")

    def args(self):
        extra = ["--listeners", "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                 "--sasl-plain-users-file", str(self.users)]
        if self.authorizer:
            extra += ["--authorizer", "acl", "--super-users", "User:admin"]
        return super().args() + extra

    def port(self, listener):
        return port_of(json.loads(self.ports_path.read_text())[f"kafka.{listener.lower()}"])

    def admin_conf(self):
        return {"bootstrap.servers": f"127.0.0.1:{self.port('SASL_PLAINTEXT')}",
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                "sasl.username": "admin", "sasl.password": ADMIN_PASSWORD}

    def client_conf(self):
        return {"bootstrap.servers": f"127.0.0.1:{self.port('PLAINTEXT')}"}


def acl_set(n):
    """n ACLs: those the benchmark needs, then others for other principals."""
    B = cka.AclBinding
    RT, PT, OP, PERM = cka.ResourceType, cka.ResourcePatternType, cka.AclOperation, cka.AclPermissionType
    me = "User:ANONYMOUS"
    acls = [
        B(RT.TOPIC, "bench-", PT.PREFIXED, me, "*", OP.ALL, PERM.ALLOW),
        B(RT.GROUP, "bench-", PT.PREFIXED, me, "*", OP.READ, PERM.ALLOW),
        B(RT.BROKER, "kafka-cluster", PT.LITERAL, me, "*", OP.IDEMPOTENT_WRITE, PERM.ALLOW),
    ]
    kinds = [(RT.TOPIC, OP.WRITE), (RT.TOPIC, OP.READ), (RT.GROUP, OP.READ), (RT.TRANSACTIONAL_ID, OP.WRITE)]
    i = 0
    while len(acls) < n:
        rt, op = kinds[i % len(kinds)]
        pattern = PT.PREFIXED if i % 5 == 0 else PT.LITERAL
        perm = PERM.DENY if i % 7 == 0 else PERM.ALLOW
        acls.append(B(rt, f"team{i % 50}-res{i}", pattern, f"User:user{i % 100}", "*", op, perm))
        i += 1
    return acls[:n]


def create_acls(node, acls):
    a = cka.AdminClient(node.admin_conf())
    for start in range(0, len(acls), 200):
        for f in a.create_acls(acls[start:start + 200], request_timeout=60).values():
            f.result()


def consume_group(conf, topic, records, size):
    c = ck.Consumer({**conf, "group.id": f"{topic}-g", "auto.offset.reset": "earliest",
                     "enable.auto.commit": True, "fetch.max.bytes": 52428800})
    c.subscribe([topic])
    got = 0
    start = None  # the first record: the group's join is not timed
    deadline = time.monotonic() + 300
    while got < records and time.monotonic() < deadline:
        for m in c.consume(1000, 1.0):
            if m.error() is None:
                start = start or time.monotonic()
                got += 1
    took = time.monotonic() - (start or time.monotonic())
    c.close()
    assert got >= records, f"read {got} of {records}"
    return records * size / took / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connects", type=int, default=20)
    ap.add_argument("--acls", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="a small run: 2,000 records, 1 round, 3 connects")
    args = ap.parse_args()
    if args.quick:
        args.records, args.rounds, args.connects = 2000, 1, 3
    floe_bin = os.environ.get("FLOE_BIN") or str(ROOT / "target" / "release" / "floe")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        nodes = {"none": Node(floe_bin, tmp, "open", False), "acl": Node(floe_bin, tmp, "acl", True)}
        for n in nodes.values():
            n.start()
        try:
            create_acls(nodes["acl"], acl_set(args.acls))
            results = {k: {"produce": [], "consume": [], "metadata": []} for k in nodes}
            for r in range(args.rounds):
                for k, node in nodes.items():
                    topic = f"bench-{k}-{r}"
                    a = cka.AdminClient(node.admin_conf())
                    a.create_topics([cka.NewTopic(topic, args.partitions, 1)])[topic].result(30)
                    conf = node.client_conf()
                    pr = produce(conf, topic, args.records, args.size)
                    co = consume_group(conf, topic, args.records, args.size)
                    md = connect_ms(conf, topic, args.connects)
                    for name, v in (("produce", pr), ("consume", co), ("metadata", md)):
                        results[k][name].append(v)
                    print(f"round {r} {k:5} produce {pr:7.1f} MB/s  consume {co:7.1f} MB/s  metadata {md:6.1f} ms",
                          flush=True)
            med = {k: {m: statistics.median(v) for m, v in results[k].items()} for k in nodes}
            base = med["none"]
            print(f"\n{args.records} records of {args.size} B, {args.partitions} partitions, {args.rounds} rounds, "
                  f"{args.acls} ACLs (medians; ratio to no authorizer)")
            for k in nodes:
                m = med[k]
                print(f"{k:5} produce {m['produce']:7.1f} MB/s ({m['produce'] / base['produce']:.2f})  "
                      f"consume {m['consume']:7.1f} MB/s ({m['consume'] / base['consume']:.2f})  "
                      f"metadata {m['metadata']:6.1f} ms ({m['metadata'] / base['metadata']:.2f})")
        finally:
            for n in nodes.values():
                n.stop()


if __name__ == "__main__":
    main()
