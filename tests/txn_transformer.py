"""A consume-transform-produce loop in transactions, as a separate process so
that tests/test_transactions.py can `kill -9` it: reads `SRC` (read_committed,
group `GROUP`, static member), writes each value upper-cased to `DST` (same
partition), and commits its input offsets in the same transaction
(`send_offsets_to_transaction`). A short pause inside every transaction makes
a kill land in an open one often. Exits on any transaction error (the test
starts it again with the same transactional id, which fences and aborts).

Usage: txn_transformer.py BOOTSTRAP SRC DST GROUP TRANSACTIONAL_ID"""

import sys
import time

import confluent_kafka as ck


def main():
    bootstrap, src, dst, group, txn_id = sys.argv[1:6]
    consumer = ck.Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        # A restarted instance takes the killed one's place at once.
        "group.instance.id": f"{txn_id}-member",
        "session.timeout.ms": 10000,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    })
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    producer.init_transactions(60)
    consumer.subscribe([src])
    while True:
        msgs = [m for m in consumer.consume(40, 0.5) if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(dst, key=m.key(), value=m.value().upper(), partition=m.partition())
        time.sleep(0.15)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        print(f"committed {len(msgs)}", flush=True)


if __name__ == "__main__":
    main()
