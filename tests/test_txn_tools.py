"""Transactions seen by Floe's own tools (issue 14, docs/transactions.md):
the indexer exports only committed records, never past the last stable
offset; the `floe` CLI reads read_committed and shows transactions and
producers; log compaction drops aborted records and keeps an open
transaction's.

One `floe standalone --transactions` serves the module (each test has its
own topics and transactional ids).
"""

import json
import time

import pytest

from conftest import KafkaKit, Standalone
from test_indexer import duck, exports, http_json, local_scan, records_url

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def txs(floe_bin, tmp_path_factory):
    s = Standalone(floe_bin, tmp_path_factory.mktemp("txn-tools"), transactions=True,
                   indexer_poll_ms=100)
    s.start()
    yield s
    s.stop()


def txn_producer(bootstrap, txn_id):
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                                  "linger.ms": 5})
    p.init_transactions(30)
    return p


def transaction(p, topic, values, commit, partitions=2):
    """One transaction writing `values` round robin over the partitions."""
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(topic, key=f"k{i % 3}", value=json.dumps({"v": v}), partition=i % partitions)
    if commit is None:
        assert p.flush(30) == 0
        return
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def last_stable_offsets(bootstrap, topic, partitions):
    """What a read_committed reader is told the end is (ListOffsets with
    isolation_level=1: the LSO)."""
    c = KafkaKit.consumer(bootstrap, **{"isolation.level": "read_committed"})
    try:
        return {p: c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10,
                                           cached=False)[1]
                for p in range(partitions)}
    finally:
        c.close()


def wait_stable(bootstrap, topic, partitions, timeout=60):
    """Waits until no transaction is open on the partitions (the markers
    are written after EndTxn is answered): returns the LSOs, then equal to
    the high watermarks."""
    deadline = time.monotonic() + timeout
    while True:
        lso = last_stable_offsets(bootstrap, topic, partitions)
        hw = {p: KafkaKit.watermarks(bootstrap, topic, p)[1] for p in range(partitions)}
        if lso == hw:
            return lso
        assert time.monotonic() < deadline, f"{topic}: LSO {lso} never reached the high watermarks {hw}"
        time.sleep(0.2)


def wait_exported_to(admin_url, topic, offsets, timeout=90):
    """Waits until each partition's exported offset is `offsets[p]`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = exports(admin_url, topic)
        got = {p["partition"]: p["exported_offset"] for p in last["partitions"]}
        if got == offsets:
            return last
        assert all(got[p] <= offsets[p] for p in got), f"exported past {offsets}: {last}"
        time.sleep(0.2)
    raise AssertionError(f"{topic} not exported to {offsets} after {timeout}s: {last}")


def exported_values(s, topic):
    con = duck()
    rows = con.execute(f'SELECT partition, "offset", decode(value) FROM {local_scan(s, topic)}').fetchall()
    offsets = [(p, o) for p, o, _ in rows]
    assert len(offsets) == len(set(offsets)), "each offset once"
    return sorted(json.loads(v)["v"] for _, _, v in rows)


def looked_up(s, topic, key):
    status, body = http_json(records_url(s.admin_url, topic, key=key, limit=1000))
    assert status == 200, (status, body)
    return sorted(json.loads(r["value"])["v"] for r in body["records"])


def test_the_indexer_exports_only_committed_records(txs):
    topic = "txn-export"
    KafkaKit.create_topic(txs.bootstrap, topic, partitions=2, config={
        "export.enabled": "true", "export.roll.ms": "200",
        "export.index": json.dumps([{"name": "v", "path": "$.v", "type": "string"}])})
    plain = confluent_kafka.Producer({"bootstrap.servers": txs.bootstrap, "enable.idempotence": True})
    for i in range(6):
        plain.produce(topic, value=json.dumps({"v": f"plain{i}"}), key=f"k{i % 3}", partition=i % 2)
    assert plain.flush(30) == 0
    a = txn_producer(txs.bootstrap, "export-a")
    b = txn_producer(txs.bootstrap, "export-b")
    committed = [f"plain{i}" for i in range(6)]
    for n in range(6):
        values = [f"t{n}-{i}" for i in range(5)]
        commit = n % 2 == 0
        transaction(a if n % 3 else b, topic, values, commit)
        if commit:
            committed += values
    wait_stable(txs.bootstrap, topic, 2)
    # One left open, and committed records after it (from the other
    # producer): they are above the LSO, so not exported yet either.
    opened = [f"open-{i}" for i in range(4)]
    transaction(a, topic, opened, None)
    later = [f"later-{i}" for i in range(4)]
    transaction(b, topic, later, True)

    lso = last_stable_offsets(txs.bootstrap, topic, 2)
    state = wait_exported_to(txs.admin_url, topic, lso)
    assert all(p["high_watermark"] > lso[p["partition"]] for p in state["partitions"]), state
    assert exported_values(txs, topic) == sorted(committed), "exactly the committed records below the LSO"
    # Lookups by key read the exports and the log after them: the same.
    for key in ("k0", "k1", "k2"):
        got = looked_up(txs, topic, key)
        assert not any(v.startswith(("open-", "later-")) for v in got), got
        assert set(got) <= set(committed), got
    assert set(looked_up(txs, topic, "k0")) | set(looked_up(txs, topic, "k1")) \
        | set(looked_up(txs, topic, "k2")) == set(committed)

    # The open transaction commits: its records and the later ones follow.
    a.commit_transaction(30)
    committed += opened + later
    wait_exported_to(txs.admin_url, topic, wait_stable(txs.bootstrap, topic, 2))
    assert exported_values(txs, topic) == sorted(committed)
    status, body = http_json(records_url(txs.admin_url, topic, limit=1000))
    assert status == 200, body
    assert sorted(json.loads(r["value"])["v"] for r in body["records"]) == sorted(committed)
