#!/usr/bin/env bash
# Benchmark (not a test) of a new topic's first writes on `floe standalone`
# (release build, or $FLOE_BIN): for each of N topics, CreateTopics
# (16 partitions) through confluent-kafka's AdminClient, then one record
# per partition with acks=all from a producer that is already connected.
# Prints, over the N topics, the median and the worst of:
#   - create: how long CreateTopics took to answer;
#   - first ack: from the CreateTopics answer to the first record
#     acknowledged, and to the last of the 16.
# Everything it starts, it stops.
#
#   bench/new_topic.sh [topics]      (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-20}"
. bench/lib.sh
start_standalone

"$PY" - "$K" "$N" <<'PY'
import statistics
import sys
import time

import confluent_kafka
import confluent_kafka.admin

bootstrap, n = sys.argv[1], int(sys.argv[2])
PARTITIONS = 16
admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                     "linger.ms": 1, "enable.idempotence": True})
# Warm the producer's connection on a topic of its own.
warm = "bench-warm"
admin.create_topics([confluent_kafka.admin.NewTopic(warm, 1, 1)])[warm].result(30)
producer.produce(warm, b"x")
producer.flush(30)

create, first, last = [], [], []
for i in range(n):
    topic = f"bench-new-{i}"
    t0 = time.perf_counter()
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    t1 = time.perf_counter()
    acks = []

    def done(err, msg, acks=acks):
        if err is None:
            acks.append(time.perf_counter())
        else:
            print(f"delivery failed: {err}", file=sys.stderr)

    for p in range(PARTITIONS):
        producer.produce(topic, b"first", partition=p, on_delivery=done)
    producer.flush(60)
    assert len(acks) == PARTITIONS, f"{topic}: {len(acks)} of {PARTITIONS} acknowledged"
    create.append((t1 - t0) * 1000)
    first.append((min(acks) - t1) * 1000)
    last.append((max(acks) - t1) * 1000)


def row(name, xs):
    print(f"{name:<28} median {statistics.median(xs):8.1f} ms   worst {max(xs):8.1f} ms")


print(f"{n} topics of {PARTITIONS} partitions, one acks=all record per partition")
row("CreateTopics answered", create)
row("first record acknowledged", first)
row("16th record acknowledged", last)
PY
