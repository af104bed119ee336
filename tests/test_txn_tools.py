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
from test_cli_kafka import floe, ok
from test_indexer import duck, exports, http_json, local_scan, records_url

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def txs(floe_bin, tmp_path_factory):
    s = Standalone(floe_bin, tmp_path_factory.mktemp("txn-tools"), transactions=True,
                   indexer_poll_ms=100, compaction_interval_ms=200)
    s.start()
    yield s
    s.stop()


def txn_producer(bootstrap, txn_id):
    # A timeout longer than any test: a transaction left open stays open.
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                                  "linger.ms": 5, "transaction.timeout.ms": 600000})
    p.init_transactions(30)
    return p


def transaction(p, topic, values, commit, partitions=2):
    """One transaction writing `values` round robin over the partitions."""
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(topic, key=f"k{i % 3}", value=json.dumps({"v": v}), partition=i % partitions)
    # Written before the end (an abort would drop what is not sent yet).
    assert p.flush(30) == 0
    if commit is None:
        return
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def end_offsets(bootstrap, topic, partitions, isolation="read_committed"):
    """What a reader is told the end is: read committed (ListOffsets with
    isolation_level=1) the LSO, read uncommitted the high watermark."""
    c = KafkaKit.consumer(bootstrap, **{"isolation.level": isolation})
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
        lso = end_offsets(bootstrap, topic, partitions)
        hw = end_offsets(bootstrap, topic, partitions, "read_uncommitted")
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

    lso = end_offsets(txs.bootstrap, topic, 2)
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
    got = exported_values(txs, topic)
    assert got == sorted(committed), (sorted(set(committed) - set(got)), sorted(set(got) - set(committed)))
    status, body = http_json(records_url(txs.admin_url, topic, limit=1000))
    assert status == 200, body
    assert sorted(json.loads(r["value"])["v"] for r in body["records"]) == sorted(committed)


def cli_json(floe_bin, bootstrap, *args):
    return [json.loads(line) for line in ok(floe(floe_bin, bootstrap, *args)).stdout.splitlines()]


def test_the_cli_reads_committed_and_shows_transactions_producers_and_lag(txs, floe_bin):
    topic, bs = "txn-cli", txs.bootstrap
    KafkaKit.create_topic(bs, topic, partitions=1)
    p = txn_producer(bs, "cli-a")
    # Offsets: c0..c2 0-2, COMMIT 3, a0..a2 4-6, ABORT 7, o0 o1 8-9 (open).
    for prefix, commit in (("c", True), ("a", False), ("o", None)):
        p.begin_transaction()
        for i in range(3 if prefix != "o" else 2):
            p.produce(topic, value=f"{prefix}{i}", partition=0)
        assert p.flush(30) == 0
        if commit is None:
            pass
        elif commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    def consume(*extra):
        out = ok(floe(floe_bin, bs, "consume", topic, "--timeout-ms", "1500", *extra)).stdout
        return out.splitlines()

    assert consume() == ["c0", "c1", "c2", "a0", "a1", "a2", "o0", "o1"], "read_uncommitted by default"
    assert consume("--isolation", "read_committed") == ["c0", "c1", "c2"]
    assert consume("--isolation", "read_committed", "--from", "end") == []

    listed = ok(floe(floe_bin, bs, "transactions", "list")).stdout
    assert any(line.split() == ["cli-a", str(line.split()[1]), "Ongoing"]
               for line in listed.splitlines()[1:]), listed
    assert [t["transactional_id"] for t in cli_json(floe_bin, bs, "transactions", "list", "--state", "Ongoing",
                                                    "--json")] == ["cli-a"]
    [d] = cli_json(floe_bin, bs, "transactions", "describe", "cli-a", "--json")
    assert d["state"] == "Ongoing" and d["partitions"] == [f"{topic}-0"] and d["start_ms"] > 0, d
    assert d["timeout_ms"] > 0 and d["producer_epoch"] >= 0, d
    [pr] = cli_json(floe_bin, bs, "producers", topic, "0", "--json")
    assert pr["producer_id"] == d["producer_id"] and pr["current_txn_start_offset"] == 8, pr
    table = ok(floe(floe_bin, bs, "producers", topic)).stdout
    assert "TXN-START-OFFSET" in table.splitlines()[0] and table.splitlines()[1].split()[-1] == "8", table
    missing = floe(floe_bin, bs, "transactions", "describe", "no-such-id")
    assert missing.returncode != 0 and "no-such-id" in missing.stderr, missing

    # A group that committed offset 2: its lag to the high watermark (10)
    # and, read committed, to the LSO (8).
    c = KafkaKit.consumer(bs, **{"group.id": "cli-g"})
    c.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 2)], asynchronous=False)
    c.close()
    [plain] = cli_json(floe_bin, bs, "group", "describe", "cli-g", "--json")
    [row] = plain["partitions"]
    assert (row["log_end_offset"], row["lag"], plain["lag_to"]) == (10, 8, "log_end_offset"), plain
    assert "last_stable_offset" not in row
    [rc] = cli_json(floe_bin, bs, "group", "describe", "cli-g", "--isolation", "read_committed", "--json")
    [row] = rc["partitions"]
    assert (row["log_end_offset"], row["last_stable_offset"], row["lag"], rc["total_lag"], rc["lag_to"]) == \
        (10, 8, 6, 6, "last_stable_offset"), rc
    out = ok(floe(floe_bin, bs, "group", "describe", "cli-g", "--isolation", "read_committed")).stdout
    assert "LAST-STABLE-OFFSET" in out and "TOTAL-LAG 6" in out, out

    p.commit_transaction(30)
    wait_stable(bs, topic, 1)
    assert consume("--isolation", "read_committed") == ["c0", "c1", "c2", "o0", "o1"]
    [d] = cli_json(floe_bin, bs, "transactions", "describe", "cli-a", "--json")
    assert d["state"] == "CompleteCommit" and d["partitions"] == [], d
    [pr] = cli_json(floe_bin, bs, "producers", topic, "0", "--json")
    assert pr["current_txn_start_offset"] is None, pr


def read_to_end(bootstrap, topic, isolation, timeout=30):
    """(offset, key, value) of every record a reader at `isolation` gets
    from the beginning of partition 0 to its end."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-tools-read",
                                  "enable.auto.commit": False, "enable.partition.eof": True,
                                  "isolation.level": isolation})
    c.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, f"{topic}: no end after {timeout}s; read {out}"
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    return out
                continue
            value = m.value().decode().split("-", 1)[0] if m.value() else None
            out.append((m.offset(), m.key().decode(), value))
    finally:
        c.close()


def test_compaction_removes_aborted_records_and_never_an_open_transactions(txs):
    topic, bs = "txn-compacted", txs.bootstrap
    KafkaKit.create_topic(bs, topic, partitions=1, config={
        "cleanup.policy": "compact", "segment.bytes": "1024", "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"})
    plain = confluent_kafka.Producer({"bootstrap.servers": bs, "enable.idempotence": True})

    # Values of 700 bytes in segments of 1024: about a batch a segment, so
    # that segments lie wholly below the LSO (the one holding it is not
    # cleaned).
    pad = "-" + "x" * 700

    def put(pairs):
        for k, v in pairs:
            plain.produce(topic, key=k, value=v + pad, partition=0)
        assert plain.flush(30) == 0

    t = txn_producer(bs, "compact-a")

    def txn(pairs, commit):
        t.begin_transaction()
        for k, v in pairs:
            t.produce(topic, key=k, value=v + pad, partition=0)
        assert t.flush(30) == 0
        if commit is not None:
            (t.commit_transaction if commit else t.abort_transaction)(30)

    put([("k1", "v1"), ("k2", "v1")])                    # 0, 1
    txn([("k1", "c1")], True)                            # 2, COMMIT 3
    txn([("k2", "aborted"), ("k3", "aborted")], False)   # 4, 5, ABORT 6
    # The markers are written after EndTxn is answered: a plain record sent
    # at once may land before the ABORT (seen once in CI: k5 at 6).
    wait_stable(bs, topic, 1)
    put([("k5", "v1")])                                  # 7
    wait_stable(bs, topic, 1)
    txn([("k2", "open")], None)                          # 8: open, holds the LSO
    put([("k5", "v2")])                                  # 9: after the LSO

    # Below the LSO: k1's old value goes (a committed transaction's record
    # replaces it as any record), the aborted records go. From the LSO on
    # nothing is cleaned: k2=open, and k5=v1 whose newer value is past it.
    want = [(1, "k2", "v1"), (2, "k1", "c1"), (7, "k5", "v1"), (8, "k2", "open"), (9, "k5", "v2")]
    deadline = time.monotonic() + 90
    while (got := read_to_end(bs, topic, "read_uncommitted")) != want:
        assert time.monotonic() < deadline, f"not compacted after 90 s: {got}, want {want}"
        time.sleep(0.5)
    assert read_to_end(bs, topic, "read_committed") == [(1, "k2", "v1"), (2, "k1", "c1"), (7, "k5", "v1")]

    # Committed, the transaction is decided: k2=v1 and k5=v1 go.
    t.commit_transaction(30)
    wait_stable(bs, topic, 1)                            # COMMIT 10
    put([("k6", "end")])
    want = [(2, "k1", "c1"), (8, "k2", "open"), (9, "k5", "v2"), (11, "k6", "end")]
    deadline = time.monotonic() + 90
    while (got := read_to_end(bs, topic, "read_committed")) != want:
        assert time.monotonic() < deadline, f"not compacted after 90 s: {got}, want {want}"
        time.sleep(0.5)
