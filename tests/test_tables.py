"""Topics as Iceberg tables (`table.format=iceberg`), read by real engines.

A module-wide `floe standalone` holds topic `sales`: JSON records (some not
JSON, some with a field of the wrong type or missing, tombstones, keyless
records, headers) produced with confluent-kafka over two partitions. The
tests read its table through Floe's REST catalog with pyiceberg and with
DuckDB's iceberg extension (the PyPI wheel, loaded from its file), and
compare every row with what a Kafka consumer of the topic reads; they
travel back to an older snapshot, evolve the schema across a restart, and
`kill -9` the process in each phase of a commit (`FLOE_TABLE_PAUSE_AT`).
"""

import json
import os
import pathlib
import re
import signal
import time
import urllib.error
import urllib.request

import pytest

from conftest import Standalone

pytestmark = [pytest.mark.timeout(300)]

NS = "floe"
INDEX = [
    {"name": "amount", "path": "$.amount", "type": "float64"},
    {"name": "customer", "path": "$.customer", "type": "string"},
    {"name": "n", "path": "$.n", "type": "int64"},
]
CONFIG = {
    "table.format": "iceberg",
    "export.index": json.dumps(INDEX),
    "export.roll.ms": "300",
    "export.file.bytes": "16384",
}
PARTITIONS = 2
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def send(bootstrap, topic, records):
    """Produces `records` (dicts of Producer.produce's arguments) with acks=all;
    returns the acknowledged messages by (partition, offset)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked, errors = {}, []

    def done(err, m):
        if err is not None:
            errors.append(err)
        else:
            acked[(m.partition(), m.offset())] = m

    n = 0
    for n, r in enumerate(records, 1):
        p.produce(topic, on_delivery=done, **r)
        if n % 500 == 0:
            p.poll(0)
    p.flush(60)
    assert not errors, errors[:3]
    assert len(acked) == n
    return acked


def produce(bootstrap, topic, n, start=0):
    """n records, acknowledged (acks=all), with a mix of values; returns {(p, o): value}."""
    def records():
        for i in range(start, start + n):
            if i % 50 == 7:
                value = b"not json"
            elif i % 50 == 11:
                value = None  # a tombstone
            elif i % 50 == 13:
                value = json.dumps({"amount": "wrong type", "n": i}).encode()
            else:
                value = json.dumps({"amount": i / 4, "customer": f"c{i % 17}", "n": i}).encode()
            key = None if i % 10 == 3 else f"k{i}".encode()
            yield {"value": value, "key": key, "partition": i % PARTITIONS,
                   "headers": [("src", b"t")] if i % 5 == 0 else None}

    return {k: m.value() for k, m in send(bootstrap, topic, records()).items()}


def catalog_at(uri, **props):
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog("floe", uri=uri, **props)


def catalog(s):
    return catalog_at(f"{s.admin_url}/iceberg")


def covered(table):
    """{partition: first offset not in the table} of the current snapshot."""
    snap = table.current_snapshot()
    if snap is None:
        return {}
    return {int(k): v for k, v in json.loads(snap.summary.additional_properties.get("floe.offsets", "{}")).items()}


def wait_covered(s, kit, topic, timeout=90):
    """Waits until the table's current snapshot covers every partition's high
    watermark; returns the loaded table."""
    ends = {p: kit.watermarks(s.bootstrap, topic, p)[1] for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            t = catalog(s).load_table((NS, topic))
            last = covered(t)
            if all(last.get(p, 0) >= end for p, end in ends.items()):
                return t
        except Exception as e:  # not a table yet
            last = e
        time.sleep(0.3)
    raise AssertionError(f"{topic}: the table covers {last!r}, the log ends at {ends}; log:\n{s.log_tail()}")


def rows_of(table, snapshot_id=None):
    """{(partition, offset): row dict} of a table scan."""
    scan = table.scan(snapshot_id=snapshot_id) if snapshot_id else table.scan()
    rows = scan.to_arrow().to_pylist()
    out = {}
    for r in rows:
        k = (r["partition"], r["offset"])
        assert k not in out, f"row {k} twice"
        out[k] = r
    assert len(out) == len(rows)
    return out


def expected_amount(value):
    try:
        v = json.loads(value)
    except (TypeError, ValueError):
        return None
    a = v.get("amount") if isinstance(v, dict) else None
    return float(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else None


def iceberg_extension():
    """The iceberg and avro extension files shipped by their DuckDB wheels."""
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    files = []
    for mod, name in [(duckdb_extension_avro, "avro"), (duckdb_extension_iceberg, "iceberg")]:
        found = sorted(pathlib.Path(mod.__file__).parent.glob(f"extensions/*/{name}.duckdb_extension"))
        assert found, f"no {name}.duckdb_extension in {mod.__file__}"
        files.append(found[-1])
    return files


def duck():
    import duckdb

    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    for f in iceberg_extension():
        con.execute(f"LOAD '{f}'")
    return con


@pytest.fixture(scope="module")
def sales(floe_bin, tmp_path_factory, kit):
    s = Standalone(floe_bin, tmp_path_factory.mktemp("tables"), name="tables", indexer_poll_ms=200)
    s.start()
    kit.create_topic(s.bootstrap, "sales", partitions=PARTITIONS, config=CONFIG)
    # Three rounds, each committed before the next: three snapshots at least.
    acked = {}
    for r in range(3):
        acked.update(produce(s.bootstrap, "sales", 1000, start=r * 1000))
        wait_covered(s, kit, "sales")
    yield s, acked
    s.stop()


def test_pyiceberg_reads_what_a_kafka_consumer_reads(sales, kit):
    s, acked = sales
    cat = catalog(s)
    assert (NS, "sales") in [tuple(i) for i in cat.list_tables(NS)]
    table = cat.load_table((NS, "sales"))
    consumed = kit.consume(s.bootstrap, "sales", partitions=range(PARTITIONS))
    by_offset = {(p, o): (k, v, h) for p, o, k, v, h, _ in consumed}
    assert set(by_offset) == set(acked)
    rows = rows_of(table)
    assert set(rows) == set(by_offset), "one row per record, none missing"
    nulls = 0
    for k, (key, value, headers) in by_offset.items():
        r = rows[k]
        assert r["key"] == key and r["value"] == value, k
        assert [(h["key"], h["value"]) for h in r["headers"]] == list(headers or []), k
        assert r["amount"] == expected_amount(value), (k, value)
        nulls += r["amount"] is None
    assert nulls > 0, "values that are not JSON or not a number give NULL"
    schema = {f.name: f.field_id for f in table.schema().fields}
    assert schema["partition"] == 1 and schema["offset"] == 2 and schema["amount"] >= 10
    summary = table.current_snapshot().summary
    assert int(summary.additional_properties["total-records"]) == len(acked)


def test_duckdb_reads_the_same_rows(sales, kit):
    s, acked = sales
    table = catalog(s).load_table((NS, "sales"))
    con = duck()
    count, total, keys = con.execute(
        f"SELECT count(*), sum(amount), count(DISTINCT key) FROM iceberg_scan('{table.metadata_location}')"
    ).fetchone()
    assert count == len(acked)
    want = sum(a for a in (expected_amount(v) for v in acked.values()) if a is not None)
    assert abs(total - want) < 1e-6 * max(1, want)
    distinct_keys = {k for (p, o), k in ((po, r["key"]) for po, r in rows_of(table).items()) if k is not None}
    assert keys == len(distinct_keys)
    # Per offset, the same values as pyiceberg.
    pairs = con.execute(
        f"SELECT \"partition\", \"offset\", value FROM iceberg_scan('{table.metadata_location}')"
    ).fetchall()
    assert {(p, o): (bytes(v) if v is not None else None) for p, o, v in pairs} == acked


def test_time_travel_returns_exactly_what_an_older_snapshot_committed(sales, kit):
    s, _ = sales
    table = catalog(s).load_table((NS, "sales"))
    snaps = [sn for sn in table.snapshots() if int(sn.summary.additional_properties.get("total-records", 0)) > 0]
    assert len(snaps) >= 2, "several commits happened while producing"
    old = snaps[0]
    ends = {int(k): v for k, v in json.loads(old.summary.additional_properties["floe.offsets"]).items()}
    rows = rows_of(table, snapshot_id=old.snapshot_id)
    assert len(rows) == int(old.summary.additional_properties["total-records"])
    assert all(o < ends.get(p, 0) for p, o in rows)
    now = rows_of(table)
    want = {k for k in now if k[1] < ends.get(k[0], 0)}
    assert set(rows) == want, "the old snapshot holds exactly the records below its offsets"


def test_the_catalog_refuses_writes_and_unknown_tables(sales):
    s, _ = sales
    req = urllib.request.Request(f"{s.admin_url}/iceberg/v1/namespaces/{NS}/tables", method="POST",
                                 data=b'{"name":"x","schema":{"type":"struct","fields":[]}}',
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 406
    body = json.loads(e.value.read())
    assert body["error"]["type"] == "UnsupportedOperationException"
    assert "table.format=iceberg" in body["error"]["message"]
    from pyiceberg.exceptions import NoSuchTableError

    with pytest.raises(NoSuchTableError):
        catalog(s).load_table((NS, "no-such-topic"))


def alter(bootstrap, topic, **configs):
    """IncrementalAlterConfigs SET of `configs` (dots written as __); raises the broker's error."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k.replace("__", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=30)


def wait_paused(s, phase, marker):
    """Waits until the process started after `marker` earlier starts logs that a
    table commit is paused (FLOE_TABLE_PAUSE_AT) at `phase`."""
    deadline = time.monotonic() + 60
    pattern = re.compile(r"table commit paused.*phase\W+" + re.escape(phase))
    while not any(pattern.search(line) for line in
                  ANSI.sub("", s.log_path.read_text()).split("---- start #")[marker].splitlines()):
        assert time.monotonic() < deadline, f"no pause at {phase}; log:\n{s.log_tail()}"
        time.sleep(0.1)


def test_kill9_in_each_phase_of_a_commit_loses_and_doubles_nothing(standalone_factory, kit, monkeypatch):
    """The process is killed (SIGKILL) while a commit is paused after each of its
    phases, with acknowledged records waiting behind it; after each restart the
    table ends up with every acknowledged record exactly once."""
    phases = ["manifest", "manifest-list", "metadata", "pointer"]
    monkeypatch.setenv("FLOE_TABLE_PAUSE_AT", phases[0])
    s = standalone_factory(name="crash", indexer_poll_ms=100, table_orphan_grace_ms=0)
    kit.create_topic(s.bootstrap, "crash", partitions=PARTITIONS, config=CONFIG)
    acked, n = {}, 0
    for i, phase in enumerate(phases):
        if i:
            monkeypatch.setenv("FLOE_TABLE_PAUSE_AT", phase)
            s.start()
        marker = s.log_path.read_text().count("---- start #")
        acked.update(produce(s.bootstrap, "crash", 300, start=n))
        n += 300
        wait_paused(s, phase, marker)
        # More acknowledged records behind the paused commit.
        acked.update(produce(s.bootstrap, "crash", 100, start=n))
        n += 100
        s.kill9()
    monkeypatch.delenv("FLOE_TABLE_PAUSE_AT")
    s.start()
    acked.update(produce(s.bootstrap, "crash", 100, start=n))
    table = wait_covered(s, kit, "crash")
    rows = rows_of(table)
    assert set(rows) == set(acked), (
        f"missing {sorted(set(acked) - set(rows))[:5]}, extra {sorted(set(rows) - set(acked))[:5]}")
    assert all(rows[k]["value"] == v for k, v in acked.items())
    assert int(table.current_snapshot().summary.additional_properties["total-records"]) == len(acked)
    # What the killed commits left (a manifest, a list, a metadata file the
    # pointer never reached) is swept; everything the table names stays.
    folder = s.data_dir / "store" / "tables" / "crash" / "metadata"
    deadline = time.monotonic() + 60
    while True:
        table = catalog(s).load_table((NS, "crash"))
        named = {table.metadata_location} | {e.metadata_file for e in table.metadata.metadata_log}
        named |= {sn.manifest_list for sn in table.snapshots()}
        named |= {m.manifest_path for m in table.current_snapshot().manifests(table.io)}
        on_disk = {f"file://{p}" for p in folder.iterdir() if "#" not in p.name}
        assert named <= on_disk, f"named but gone: {sorted(named - on_disk)[:3]}"
        if on_disk == named:
            break
        assert time.monotonic() < deadline, f"never swept: {sorted(on_disk - named)[:5]}"
        time.sleep(0.5)
    assert len(rows_of(table)) == len(acked)


def test_a_column_added_across_a_restart_is_a_new_field_and_a_type_change_is_refused(sales, kit):
    from confluent_kafka import KafkaException

    s, _ = sales
    kit.create_topic(s.bootstrap, "evolve", partitions=PARTITIONS, config=CONFIG)
    old = produce(s.bootstrap, "evolve", 200)
    before = wait_covered(s, kit, "evolve")
    old_ids = {f.name: f.field_id for f in before.schema().fields}
    old_snapshot = before.current_snapshot().snapshot_id

    changed = [dict(c, type="string") if c["name"] == "amount" else c for c in INDEX]
    with pytest.raises(KafkaException) as e:
        alter(s.bootstrap, "evolve", export__index=json.dumps(changed))
    assert "Iceberg cannot change a float64 column to string" in str(e.value), e.value

    alter(s.bootstrap, "evolve", export__index=json.dumps(INDEX + [{"name": "sku", "path": "$.sku", "type": "string"}]))
    s.restart()
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": s.bootstrap, "acks": "all"})
    for i in range(100):
        p.produce("evolve", value=json.dumps({"amount": 1.5, "sku": f"s{i}", "n": i}).encode(), partition=i % PARTITIONS)
    assert p.flush(60) == 0
    table = wait_covered(s, kit, "evolve")
    ids = {f.name: f.field_id for f in table.schema().fields}
    assert {k: ids[k] for k in old_ids} == old_ids, "old columns keep their ids"
    assert ids["sku"] > max(old_ids.values()), "a new column gets a new id"
    rows = rows_of(table)
    assert len(rows) == 300
    assert all(rows[k]["sku"] is None for k in old), "files written before have NULL there"
    new = [r for k, r in rows.items() if k not in old]
    assert sorted(r["sku"] for r in new) == sorted(f"s{i}" for i in range(100))
    # The older snapshot still reads with its own schema.
    assert "sku" not in rows_of(table, snapshot_id=old_snapshot)[next(iter(old))]


def test_floe_table_lists_and_describes(sales, floe_bin):
    import subprocess

    s, acked = sales
    env = dict(os.environ, FLOE_INDEXER=s.admin_url)
    listed = subprocess.run([str(floe_bin), "table", "list"], env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "floe.sales" in listed.stdout.split()
    out = subprocess.run([str(floe_bin), "table", "describe", "sales", "--snapshots", "2"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    table = catalog(s).load_table((NS, "sales"))
    snap = table.current_snapshot()
    assert f"current snapshot {snap.snapshot_id}: {len(acked)} records" in out.stdout, out.stdout
    assert re.search(r"^\s+2  offset  long not null$", out.stdout, re.M), out.stdout
    assert out.stdout.count("append") == 2, out.stdout
    missing = subprocess.run([str(floe_bin), "table", "describe", "nope"], env=env, capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode != 0 and "no table floe.nope" in missing.stderr, missing.stderr


def test_a_table_by_hour_keeps_each_file_in_one_hour_and_readers_prune(sales, kit):
    """Records timestamped over three hours, with late ones of an earlier hour
    among them: every data file is in one hour's partition, every row in its
    file's hour, and a scan of one hour plans only that hour's files."""
    from confluent_kafka import Producer
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    s, _ = sales
    kit.create_topic(s.bootstrap, "hourly", partitions=PARTITIONS, config=dict(CONFIG, **{"table.partition": "hour"}))
    hour = 3_600_000
    base = (int(time.time() * 1000) // hour - 5) * hour
    p = Producer({"bootstrap.servers": s.bootstrap, "acks": "all", "linger.ms": 5})
    stamps = {}
    for i in range(600):
        ts = base + (i // 200) * hour + (i % 200) * 1000
        if i % 97 == 5:
            ts -= hour  # late: the hour before
        stamps[i] = ts
        p.produce("hourly", value=json.dumps({"amount": 1.0, "n": i}).encode(), partition=i % PARTITIONS,
                  timestamp=ts)
    assert p.flush(60) == 0
    table = wait_covered(s, kit, "hourly")
    assert [f.name for f in table.spec().fields] == ["timestamp_hour"]
    files = table.inspect.files().to_pylist()
    assert files and all(f["partition"]["timestamp_hour"] is not None for f in files)
    rows = rows_of(table)
    assert len(rows) == 600
    by_file = {}
    for task in table.scan().plan_files():
        by_file[task.file.file_path] = task.file.partition[0]
    # Every row lies in the hour of the file holding it.
    import pyarrow.parquet as pq

    for path, part in by_file.items():
        t = pq.read_table(path.removeprefix("file://"), columns=["timestamp"]).column(0).to_pylist()
        assert all(int(x.timestamp() * 1000) // hour == part for x in t), path
    hours = sorted({ts // hour for ts in stamps.values()})
    assert len(hours) == 4, "three hours and the late records' one"
    one = hours[1] * hour
    window = And(GreaterThanOrEqual("timestamp", one * 1000), LessThan("timestamp", (one + hour) * 1000))
    planned = list(table.scan(row_filter=window).plan_files())
    assert planned and len(planned) < len(by_file), (len(planned), len(by_file))
    assert all(t.file.partition[0] == hours[1] for t in planned)


def data_files(table):
    """The data files (URIs) of the table's current snapshot."""
    return {t.file.file_path for t in table.scan().plan_files()}


def floe_table(floe_bin, s, *args):
    import subprocess

    r = subprocess.run([floe_bin, "table", *args, "--indexer", s.admin_url],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def expire_until_only_the_table_is_left(floe_bin, s, topic):
    """`floe table expire --older-than-ms 0` until the store holds exactly the
    current snapshot's files (a compaction of an hour that just ended may
    commit in between); returns the table."""
    folder = s.data_dir / "store" / "exports" / topic
    deadline = time.monotonic() + 60
    while True:
        out = floe_table(floe_bin, s, "expire", topic, "--older-than-ms", "0")
        assert re.search(r"\d+ snapshots expired, \d+ files deleted", out), out
        table = catalog(s).load_table((NS, topic))
        on_disk = {f"file://{p}" for p in folder.rglob("*.parquet")}
        if len(list(table.snapshots())) == 1 and on_disk == data_files(table):
            return table
        assert time.monotonic() < deadline, (
            f"after expiry the store has {sorted(on_disk - data_files(table))[:3]} more, "
            f"{sorted(data_files(table) - on_disk)[:3]} less")
        time.sleep(0.5)


def test_compaction_under_load_and_expiry_keep_every_record_once(standalone_factory, kit, floe_bin, monkeypatch):
    """Small files are compacted (`floe table compact`) while a producer
    writes: a replace snapshot names fewer, larger files, every acknowledged
    record is read once by pyiceberg and DuckDB, and an older snapshot still
    reads its small files; `floe table expire` then deletes exactly the files
    no snapshot names. A `kill -9` between a compacted file's write and its
    commit loses and doubles nothing."""
    import threading

    s = standalone_factory(name="compact", indexer_poll_ms=100)
    kit.create_topic(s.bootstrap, "lake", partitions=PARTITIONS, config=CONFIG)
    acked = {}
    for r in range(3):
        acked.update(produce(s.bootstrap, "lake", 500, start=r * 500))
        first = wait_covered(s, kit, "lake")
    before = first.current_snapshot().snapshot_id
    before_rows = rows_of(first)
    small = data_files(first)
    assert len(small) >= 6, small

    stop, more, errors = threading.Event(), {}, []

    def load():
        n = 1500
        try:
            while not stop.is_set():
                more.update(produce(s.bootstrap, "lake", 200, start=n))
                n += 200
        except Exception as e:  # reported below
            errors.append(e)

    th = threading.Thread(target=load)
    th.start()
    try:
        outs = []
        for _ in range(3):
            outs.append(floe_table(floe_bin, s, "compact", "lake"))
            time.sleep(1)
    finally:
        stop.set()
        th.join(120)
    assert not errors, errors
    acked.update(more)
    print("".join(outs), end="", flush=True)
    done = [tuple(map(int, m)) for m in re.findall(r"(\d+) files written in place of (\d+)", "".join(outs))]
    assert done and done[0][1] > done[0][0] >= 1, outs
    table = wait_covered(s, kit, "lake")
    rows = rows_of(table)
    assert set(rows) == set(acked), (
        f"missing {sorted(set(acked) - set(rows))[:5]}, extra {sorted(set(rows) - set(acked))[:5]}")
    assert all(rows[k]["value"] == v for k, v in acked.items())
    ops = [sn.summary.operation.value for sn in table.snapshots()]
    assert "replace" in ops, ops
    # The snapshot before the compaction still reads its small files.
    assert rows_of(table, snapshot_id=before) == before_rows
    con = duck()
    (count,) = con.execute(f"SELECT count(*) FROM iceberg_scan('{table.metadata_location}')").fetchone()
    assert count == len(acked)

    table = expire_until_only_the_table_is_left(floe_bin, s, "lake")
    print(f"lake: {len(data_files(table))} data files after compaction and expiry "
          f"(the table had {len(small)} before the load)", flush=True)
    assert len(data_files(table)) < len(small) + len(more) // 200
    assert set(rows_of(table)) == set(acked)

    # Killed between a compacted file's write and its commit.
    monkeypatch.setenv("FLOE_TABLE_PAUSE_AT", "compacted")
    s.kill9()
    s.start()
    marker = s.log_path.read_text().count("---- start #")
    n = 1500 + len(more)
    for _ in range(3):
        acked.update(produce(s.bootstrap, "lake", 300, start=n))
        n += 300
        wait_covered(s, kit, "lake")
    import subprocess

    pending = subprocess.Popen([floe_bin, "table", "compact", "lake", "--indexer", s.admin_url],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_paused(s, "compacted", marker)
        s.kill9()
    finally:
        pending.kill()
        pending.wait()
    monkeypatch.delenv("FLOE_TABLE_PAUSE_AT")
    s.start()
    acked.update(produce(s.bootstrap, "lake", 100, start=n))
    table = wait_covered(s, kit, "lake")
    assert set(rows_of(table)) == set(acked)
    floe_table(floe_bin, s, "compact", "lake")
    table = expire_until_only_the_table_is_left(floe_bin, s, "lake")
    rows = rows_of(table)
    assert set(rows) == set(acked)
    assert all(rows[k]["value"] == v for k, v in acked.items())


class SqlCatalogDb:
    """A SQL catalog's database as Floe (`--table-catalog`) and SQLAlchemy
    (pyiceberg's SqlCatalog, and the test's own reads and writes) name it."""

    def __init__(self, floe_uri, sqlalchemy_url, **connect_args):
        import sqlalchemy

        self.floe_uri = floe_uri
        self.url = sqlalchemy_url
        self.engine = sqlalchemy.create_engine(sqlalchemy_url, connect_args=connect_args)

    def row(self, topic, catalog_name="floe"):
        """(metadata_location, previous_metadata_location) of `topic`'s row, or
        None (also before Floe created the catalog's tables)."""
        import sqlalchemy

        if not sqlalchemy.inspect(self.engine).has_table("iceberg_tables"):
            return None
        with self.engine.connect() as c:
            r = c.execute(sqlalchemy.text(
                "SELECT metadata_location, previous_metadata_location FROM iceberg_tables "
                "WHERE catalog_name = :c AND table_namespace = :ns AND table_name = :t"),
                {"c": catalog_name, "ns": NS, "t": topic}).fetchone()
        return tuple(r) if r else None

    def execute(self, statement, **args):
        import sqlalchemy

        with self.engine.begin() as c:
            c.execute(sqlalchemy.text(statement), args)

    def catalog(self):
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog("floe", uri=self.url)


def postgres_server(folder, log, tls=None):
    """Starts Debian's PostgreSQL on a Unix socket in `folder` (no TCP port),
    as the `postgres` user when the tests run as root; returns the process.
    With `tls` (certificate, key and CA files), it also listens on a TCP port
    of 127.0.0.1 (`proc.port`) that takes TLS connections only, the user
    `certuser` by a client certificate of that CA."""
    import pwd
    import shutil
    import socket as sockets
    import subprocess

    found = sorted(pathlib.Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if not found:
        pytest.fail("PostgreSQL is not installed: tests/run.sh installs it (apt-get install postgresql)")
    bindir = found[-1].parent
    run_as = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(folder, user.pw_uid, user.pw_gid)
        run_as = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups"]
    data = folder / "data"
    subprocess.run(run_as + [str(bindir / "initdb"), "-D", str(data), "-U", "floe", "--auth=trust"],
                   check=True, capture_output=True, timeout=120)
    options = ["-c", "listen_addresses=", "-c", "fsync=off"]
    if tls:
        # The server takes its key only from a file of its own, mode 0600.
        for src, name in ((tls[0], "server.crt"), (tls[1], "server.key"), (tls[2], "root.crt")):
            shutil.copy(src, folder / name)
            os.chmod(folder / name, 0o600)
        (data / "pg_hba.conf").write_text("local all all trust\n"
                                          "hostssl all certuser 127.0.0.1/32 cert\n"
                                          "hostssl all all 127.0.0.1/32 trust\n"
                                          "hostnossl all all 127.0.0.1/32 reject\n")
        if run_as:
            for f in (folder / "server.crt", folder / "server.key", folder / "root.crt", data / "pg_hba.conf"):
                os.chown(f, user.pw_uid, user.pw_gid)
        options = ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "ssl=on",
                   "-c", f"ssl_cert_file={folder / 'server.crt'}", "-c", f"ssl_key_file={folder / 'server.key'}",
                   "-c", f"ssl_ca_file={folder / 'root.crt'}"]
    # PostgreSQL cannot be given port 0: a TCP port is one that was free a
    # moment ago, and taken again when another process got it first.
    for _ in range(5):
        port = 5432
        if tls:
            with sockets.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
        proc = subprocess.Popen(run_as + [str(bindir / "postgres"), "-D", str(data), "-k", str(folder),
                                          "-p", str(port)] + options,
                                stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        socket = folder / f".s.PGSQL.{port}"
        deadline = time.monotonic() + 60
        while not socket.exists() and proc.poll() is None:
            assert time.monotonic() < deadline, "postgres did not open its socket"
            time.sleep(0.1)
        if proc.poll() is None:
            proc.port = port
            return proc
        log.flush()
        if "could not bind" not in pathlib.Path(log.name).read_text():
            pytest.fail(f"postgres exited: {log.name}")
    pytest.fail(f"postgres found no free port: {log.name}")


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_catalog_db(request, tmp_path):
    if request.param == "sqlite":
        db = tmp_path / "catalog.db"
        yield SqlCatalogDb(f"sqlite:{db}", f"sqlite:///{db}")
        return
    import tempfile

    # Its own folder under /tmp: the postgres user cannot reach into pytest's.
    folder = pathlib.Path(tempfile.mkdtemp(prefix="floe-pg-"))
    with open(tmp_path / "postgres.log", "w") as log:
        proc = postgres_server(folder, log)
        try:
            # The database `postgres` initdb made; the socket's folder as libpq's host.
            db = SqlCatalogDb(f"postgresql://floe@/postgres?host={folder}",
                              f"postgresql+pg8000://floe@/postgres?unix_sock={folder}/.s.PGSQL.5432")
            yield db
            db.engine.dispose()
        finally:
            # Fast shutdown: the clients still connected (Floe's) are cut off.
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except Exception:
                proc.kill()
                proc.wait()
            import shutil

            shutil.rmtree(folder, ignore_errors=True)


def wait_for(condition, what, seconds=60):
    deadline = time.monotonic() + seconds
    while not (last := condition()):
        assert time.monotonic() < deadline, f"{what}: not after {seconds}s (last: {last!r})"
        time.sleep(0.2)
    return last


def test_an_external_sql_catalog_follows_every_commit_and_leaves_foreign_ones_alone(
        standalone_factory, kit, sql_catalog_db, monkeypatch):
    """With `--table-catalog` (SQLite, and a real PostgreSQL server) every
    commit is published to that SQL catalog too, which pyiceberg's SqlCatalog reads with the same rows as
    Floe's REST catalog. Killed after a commit and before its publication,
    the row catches up after the restart; a row someone else moved is left
    alone (and counted), one deleted is registered again, and the row of a
    deleted topic goes."""
    from confluent_kafka.admin import AdminClient

    db = sql_catalog_db
    monkeypatch.setenv("FLOE_TABLE_PAUSE_AT", "pointer")
    s = standalone_factory(name="published", indexer_poll_ms=100, table_catalog=db.floe_uri)
    kit.create_topic(s.bootstrap, "pub", partitions=PARTITIONS, config=CONFIG)
    acked = produce(s.bootstrap, "pub", 300)
    wait_paused(s, "pointer", s.log_path.read_text().count("---- start #"))
    s.kill9()
    # The table's first commit is in the Raft state; the catalog has no row yet.
    assert db.row("pub") is None
    monkeypatch.delenv("FLOE_TABLE_PAUSE_AT")
    s.start()
    acked.update(produce(s.bootstrap, "pub", 300, start=300))
    table = wait_covered(s, kit, "pub")

    def published():
        row = db.row("pub")
        return row if row and row[0] == catalog(s).load_table((NS, "pub")).metadata_location else None

    location, previous = wait_for(published, "the SQL catalog names the table's metadata file")
    assert previous in {e.metadata_file for e in catalog(s).load_table((NS, "pub")).metadata.metadata_log}
    sql = db.catalog()
    assert [t for t in sql.list_tables(NS)] == [(NS, "pub")]
    theirs = sql.load_table((NS, "pub"))
    assert theirs.metadata_location == location
    rows = rows_of(theirs)
    assert set(rows) == set(acked)
    assert all(rows[k]["value"] == v for k, v in acked.items())
    assert rows == rows_of(catalog(s).load_table((NS, "pub")))

    # Someone else's commit: the row is left as it is, and counted.
    foreign = "file:///elsewhere/tables/pub/metadata/00009-foreign.metadata.json"
    db.execute("UPDATE iceberg_tables SET metadata_location = :f WHERE table_name = 'pub'", f=foreign)
    conflicts = s.metric("floe_indexer_catalog_errors_total", '{reason="conflict"}')
    acked.update(produce(s.bootstrap, "pub", 200, start=600))
    wait_covered(s, kit, "pub")
    wait_for(lambda: s.metric("floe_indexer_catalog_errors_total", '{reason="conflict"}') > conflicts,
             "a conflict counted")
    assert db.row("pub")[0] == foreign
    # The row dropped from the catalog: the next commit registers the table again.
    db.execute("DELETE FROM iceberg_tables WHERE table_name = 'pub'")
    acked.update(produce(s.bootstrap, "pub", 200, start=800))
    wait_covered(s, kit, "pub")
    wait_for(published, "the table registered again")
    assert set(rows_of(db.catalog().load_table((NS, "pub")))) == set(acked)
    assert s.metric("floe_indexer_catalog_publishes_total") >= 3

    # A deleted topic's row goes.
    admin = AdminClient({"bootstrap.servers": s.bootstrap})
    for f in admin.delete_topics(["pub"]).values():
        f.result(timeout=30)
    wait_for(lambda: db.row("pub") is None, "the deleted topic's row dropped")


UPSERT = {
    "table.format": "iceberg",
    "table.mode": "upsert",
    "cleanup.policy": "compact",
    "export.index": json.dumps([{"name": "amount", "path": "$.amount", "type": "float64"}]),
    "export.roll.ms": "300",
}


def produce_keyed(bootstrap, topic, n, start=0):
    """n records over 40 keys, every 7th a tombstone; returns {(p, o): (key, value)}."""
    records = ({"key": f"acct-{i % 40}".encode(),
                "value": None if i % 7 == 3 else json.dumps({"amount": i, "n": i}).encode()}
               for i in range(start, start + n))
    return {k: (m.key(), m.value()) for k, m in send(bootstrap, topic, records).items()}


def latest_of(records):
    """What a compacted topic keeps of {(p, o): (key, value)}: per (partition,
    key) the last (offset, value), none after a tombstone."""
    out = {}
    for (p, o), (k, v) in sorted(records.items()):
        if v is None:
            out.pop((p, k), None)
        else:
            out[(p, k)] = (o, v)
    return out


def keyed_view(rows):
    """{(partition, key): (offset, value)} of rows (p, key, offset, value); a key twice fails."""
    view = {}
    for p, k, o, v in rows:
        k = bytes(k)
        assert (p, k) not in view, f"key {(p, k)} twice: offsets {view[(p, k)][0]} and {o}"
        view[(p, k)] = (o, bytes(v) if v is not None else None)
    return view


def table_view(table, snapshot_id=None):
    return keyed_view((r["partition"], r["key"], r["offset"], r["value"])
                      for r in rows_of(table, snapshot_id).values())


def test_an_upsert_table_holds_the_latest_value_per_key_like_a_compacted_topic(
        standalone_factory, kit, floe_bin, monkeypatch):
    """`table.mode=upsert` on a compacted topic: pyiceberg and DuckDB read one row
    per key, the latest (a tombstone's key is gone), as a Kafka consumer ends up
    with; time travel returns the latest as of an older snapshot; a `kill -9`
    in a commit (after its delete files are written), a compaction and a switch
    to `append` and back keep that true."""
    s = standalone_factory(name="upsert", indexer_poll_ms=100)
    kit.create_topic(s.bootstrap, "accounts", partitions=PARTITIONS, config=UPSERT)
    acked = {}
    for r in range(3):
        acked.update(produce_keyed(s.bootstrap, "accounts", 300, start=r * 300))
        table = wait_covered(s, kit, "accounts")
        if r == 0:
            first = (table.current_snapshot().snapshot_id, latest_of(acked))
    want = latest_of(acked)
    assert len(want) < len(acked) - 200, "most records were superseded"
    assert table_view(table) == want
    consumed = kit.consume(s.bootstrap, "accounts", partitions=range(PARTITIONS))
    assert latest_of({(p, o): (k, v) for p, o, k, v, _, _ in consumed}) == want, "what a consumer ends up with"
    summary = table.current_snapshot().summary
    props = summary.additional_properties
    assert props["floe.table-mode"] == "upsert" and int(props["total-position-deletes"]) > 0
    assert int(props["total-records"]) - int(props["total-position-deletes"]) == len(want)
    assert summary.operation.value == "overwrite"

    con = duck()
    rows = con.execute(
        f"SELECT \"partition\", key, \"offset\", value FROM iceberg_scan('{table.metadata_location}')"
    ).fetchall()
    assert keyed_view(rows) == want, "DuckDB applies the position deletes too"
    amount = con.execute(f"SELECT sum(amount) FROM iceberg_scan('{table.metadata_location}')").fetchone()[0]
    assert amount == sum(json.loads(v)["amount"] for _, v in want.values())
    assert table_view(table, first[0]) == first[1], "time travel: the latest as of then"

    # Killed after a commit wrote its delete files, before the pointer moved:
    # the restarted indexer finds the keys in the table's files again.
    s.kill9()
    monkeypatch.setenv("FLOE_TABLE_PAUSE_AT", "manifest-list")
    s.start()
    marker = s.log_path.read_text().count("---- start #")
    acked.update(produce_keyed(s.bootstrap, "accounts", 200, start=900))
    wait_paused(s, "manifest-list", marker)
    s.kill9()
    monkeypatch.delenv("FLOE_TABLE_PAUSE_AT")
    s.start()
    acked.update(produce_keyed(s.bootstrap, "accounts", 100, start=1100))
    assert table_view(wait_covered(s, kit, "accounts")) == latest_of(acked)

    # Every record a row again in append mode; one per key back in upsert.
    def mode_is(mode):
        t = catalog(s).load_table((NS, "accounts"))
        return t if t.current_snapshot().summary.additional_properties.get("floe.table-mode") == mode else None

    alter(s.bootstrap, "accounts", table__mode="append")
    assert len(rows_of(wait_for(lambda: mode_is(None), "append mode"))) == len(acked)
    alter(s.bootstrap, "accounts", table__mode="upsert")
    assert table_view(wait_for(lambda: mode_is("upsert"), "upsert mode")) == latest_of(acked)

    # A compaction moves rows to other files; the deletes move with them.
    before = len(data_files(catalog(s).load_table((NS, "accounts"))))
    out = floe_table(floe_bin, s, "compact", "accounts")
    table = catalog(s).load_table((NS, "accounts"))
    assert len(data_files(table)) < before, out
    assert table_view(table) == latest_of(acked)
    described = floe_table(floe_bin, s, "describe", "accounts")
    assert f"upsert: {len(latest_of(acked))} rows, one per key" in described, described


def test_the_sql_catalog_on_postgresql_over_tls_checks_the_server_certificate(
        standalone_factory, kit, floe_bin, tmp_path):
    """`--table-catalog postgresql://…?sslmode=…&sslrootcert=…` against a real
    PostgreSQL that takes TLS connections only: `verify-full` with the right CA
    publishes; `verify-ca` publishes to a server whose certificate names
    another host, which `verify-full` refuses; a certificate of another CA is
    refused; `require` publishes without a CA; `disable` is turned away by
    the server; a user the server knows by its client certificate publishes
    with `sslcert`/`sslkey` and is turned away without. Refusals are counted
    as the catalog being unavailable."""
    import shutil
    import ssl
    import subprocess
    import tempfile

    ca, other = tmp_path / "ca", tmp_path / "other"
    for out in (ca, other):
        subprocess.run([floe_bin, "certs", "ca", "--out", str(out)], check=True, capture_output=True)
    # A cluster identity's certificate serves TLS (the name matters not).
    subprocess.run([floe_bin, "certs", "issue", "proxy", "--ca-dir", str(ca), "--out", str(ca),
                    "--host", "127.0.0.1"], check=True, capture_output=True)
    subprocess.run([floe_bin, "certs", "issue", "certuser", "--user", "--ca-dir", str(ca), "--out", str(ca)],
                   check=True, capture_output=True)
    folder = pathlib.Path(tempfile.mkdtemp(prefix="floe-pg-tls-"))
    with open(tmp_path / "postgres.log", "w") as log:
        proc = postgres_server(folder, log, tls=(ca / "proxy.pem", ca / "proxy.key", ca / "ca.pem"))
        try:
            at = f"127.0.0.1:{proc.port}"
            # The test's own reads go over TLS too (the server takes nothing else).
            db = SqlCatalogDb(None, f"postgresql+pg8000://floe@{at}/postgres",
                              ssl_context=ssl.create_default_context(cafile=str(ca / "ca.pem")))
            elsewhere = f"postgresql://floe@db.invalid:{proc.port}/postgres?hostaddr=127.0.0.1"
            db.execute("CREATE ROLE certuser LOGIN")
            db.execute("GRANT ALL ON SCHEMA public TO certuser")
            as_certuser = f"postgresql://certuser@{at}/postgres?sslmode=verify-full&sslrootcert={ca}/ca.pem"
            cases = [
                # First: certuser creates the catalog's tables (floe, a superuser, may use them).
                ("client_cert", f"{as_certuser}&sslcert={ca}/certuser.pem&sslkey={ca}/certuser.key", True),
                ("no_client_cert", as_certuser, False),
                ("verify_full", f"postgresql://floe@{at}/postgres?sslmode=verify-full&sslrootcert={ca}/ca.pem", True),
                ("verify_ca", f"{elsewhere}&sslmode=verify-ca&sslrootcert={ca}/ca.pem", True),
                ("wrong_name", f"{elsewhere}&sslmode=verify-full&sslrootcert={ca}/ca.pem", False),
                ("other_ca", f"postgresql://floe@{at}/postgres?sslmode=verify-full&sslrootcert={other}/ca.pem",
                 False),
                ("require", f"postgresql://floe@{at}/postgres?sslmode=require", True),
                ("disable", f"postgresql://floe@{at}/postgres?sslmode=disable", False),
            ]
            for name, uri, published in cases:
                s = standalone_factory(name=f"tls-{name}", indexer_poll_ms=100, table_catalog=uri,
                                       table_catalog_name=name)
                kit.create_topic(s.bootstrap, "t", partitions=PARTITIONS, config=CONFIG)
                produce(s.bootstrap, "t", 20)
                wait_covered(s, kit, "t")
                if published:
                    wait_for(lambda: db.row("t", catalog_name=name), f"{name}: the row published")
                else:
                    wait_for(lambda: s.metric("floe_indexer_catalog_errors_total", '{reason="unavailable"}') > 0,
                             f"{name}: the catalog refused")
                    assert db.row("t", catalog_name=name) is None, name
                    assert s.metric("floe_indexer_catalog_publishes_total") == 0, name
                s.stop()
            db.engine.dispose()
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except Exception:
                proc.kill()
                proc.wait()
            shutil.rmtree(folder, ignore_errors=True)
