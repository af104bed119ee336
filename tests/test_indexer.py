"""The indexer end to end: topics exported to Parquet, read by DuckDB and Spark.

A module-wide `floe standalone` holds topic `orders`: 100,000 JSON messages
(some not JSON, some with fields of the wrong type, tombstones, keyless
records, headers) produced with confluent-kafka over an hour boundary. The
tests read its exports with DuckDB (every row compared with what was
produced), with PySpark, and through the lookup API and `floe query`; they
run the examples of docs/indexer.md as they are written there. Separate
processes check `kill -9` while exporting (every offset exactly once) and a
cluster (meta, broker, proxy, `floe indexer`) whose store is a moto S3
server, read by DuckDB through httpfs.

The backfill test rebuilds `orders`' exports, so it comes last of the tests
on the shared standalone.
"""

import base64
import datetime as dt
import json
import pathlib
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import ROOT, KafkaKit, Standalone, read_ports

pytestmark = [pytest.mark.timeout(180)]

DOC = ROOT / "docs" / "indexer.md"
CODECS = ["gzip", "snappy", "lz4", "zstd"]
HOUR_MS = 3_600_000
FILE_NAME = re.compile(r"^(\d+)-(\d{20})-(\d{20})\.parquet$")

# The index definition of `orders`: every type, a nested path and a quoted field.
ORDERS_INDEX = [
    {"name": "id", "path": "$.id", "type": "int64"},
    {"name": "amount", "path": "$.amount", "type": "float64"},
    {"name": "customer", "path": "$.customer", "type": "string"},
    {"name": "ok", "path": "$.ok", "type": "bool"},
    {"name": "at", "path": "$.at", "type": "timestamp"},
    {"name": "sku", "path": "$.items[0].sku", "type": "string"},
    {"name": "big", "path": '$["big number"]', "type": "int64"},
]
ORDERS_COLUMNS = [c["name"] for c in ORDERS_INDEX]
ORDERS_N = 100_000
ORDERS_PARTITIONS = 4
# Small files and row groups, so that a lookup has files to skip and every file
# has several row groups; a short roll so that the test does not wait.
ORDERS_CONFIG = {
    "export.enabled": "true",
    "export.index": json.dumps(ORDERS_INDEX),
    "export.roll.ms": "1000",
    "export.file.bytes": "65536",
    "export.row.group.rows": "1000",
}


# ---------------------------------------------------------------- helpers

def http_json(url, method="GET", timeout=30):
    """(status, parsed JSON body) of one request; error statuses are returned, not raised."""
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            body = res.read()
            status = res.status
    except urllib.error.HTTPError as e:
        body = e.read()
        status = e.code
    try:
        return status, json.loads(body) if body else None
    except ValueError:
        return status, body.decode(errors="replace")


def records_url(admin_url, topic, **params):
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    return f"{admin_url}/v1/topics/{urllib.parse.quote(topic)}/records" + (f"?{query}" if query else "")


def exports(admin_url, topic):
    status, body = http_json(f"{admin_url}/v1/topics/{urllib.parse.quote(topic)}/exports")
    assert status == 200, f"GET exports of {topic}: {status} {body}"
    return body


def wait_exported(admin_url, topic, want_hw=None, timeout=90):
    """Polls GET /v1/topics/{topic}/exports until every partition's exported_offset
    equals its high watermark (and the high watermarks are `want_hw`, a
    {partition: offset} dict, when given). Returns the last answer."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            status, body = http_json(f"{admin_url}/v1/topics/{topic}/exports", timeout=5)
        except OSError as e:  # a restarting process
            status, body = None, repr(e)
        last = (status, body)
        if status == 200 and body["partitions"]:
            parts = body["partitions"]
            hws = {p["partition"]: p["high_watermark"] for p in parts}
            if all(p["exported_offset"] == p["high_watermark"] for p in parts) \
                    and (want_hw is None or hws == want_hw):
                return body
        time.sleep(0.2)
    raise AssertionError(f"{topic} not exported after {timeout}s (want high watermarks {want_hw}); "
                         f"last answer: {last}")


def duck():
    """A DuckDB connection that never downloads an extension."""
    import duckdb

    return duckdb.connect(config={"autoinstall_known_extensions": "false",
                                  "autoload_known_extensions": "false"})


def httpfs_extension():
    """The httpfs extension file shipped by the duckdb-extension-httpfs wheel."""
    import duckdb_extension_httpfs

    found = sorted(pathlib.Path(duckdb_extension_httpfs.__file__).parent.glob("extensions/*/httpfs.duckdb_extension"))
    assert found, "duckdb-extension-httpfs holds no httpfs.duckdb_extension (tests/requirements.txt)"
    return found[-1]


def export_dir(s, topic):
    return s.data_dir / "store" / "exports" / topic


def scan(glob):
    """A DuckDB table expression over every export file of a topic."""
    # hive_types: without it DuckDB guesses each folder column's type from
    # its values, and takes hr=00 .. hr=09 for text (docs/indexer.md).
    return (f"read_parquet('{glob}', hive_partitioning = true, union_by_name = true, filename = true, "
            f"hive_types = {{'dt': DATE, 'hr': INTEGER}})")


def local_scan(s, topic):
    return scan(f"{export_dir(s, topic)}/**/*.parquet")


def export_files(folder):
    """Every file under an export folder, as paths relative to it."""
    folder = pathlib.Path(folder)
    return sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def check_layout(files, hw):
    """Every file is dt=…/hr=…/{partition}-{first:020}-{last:020}.parquet, and per
    partition the files' offset ranges are consecutive from 0 to HW-1 (no gap,
    no overlap). Returns [(partition, first, last, dt, hr, relative path)]."""
    stray = [str(f) for f in files if not FILE_NAME.match(f.name) or len(f.parts) != 3
             or not re.fullmatch(r"dt=\d{4}-\d{2}-\d{2}", f.parts[0]) or not re.fullmatch(r"hr=\d{2}", f.parts[1])]
    # Spark reads every file of the folder whose name does not start with _ or .
    # (DuckDB's *.parquet glob does not): nothing else may be left there, such as
    # the staging file (`….parquet#1`) of a local write cut short by a crash,
    # which Spark reads as a second copy of the file's rows.
    assert not stray, f"files in the export folder that do not follow the layout (Spark reads them): {stray[:10]}"
    out = []
    for f in files:
        m = FILE_NAME.match(f.name)
        out.append((int(m[1]), int(m[2]), int(m[3]), f.parts[0][3:], int(f.parts[1][3:]), f))
    for p, end in hw.items():
        ranges = sorted((first, last) for q, first, last, *_ in out if q == p)
        want = 0
        for first, last in ranges:
            assert first == want and last >= first, \
                f"partition {p}: file {first}-{last} after offset {want - 1} (gap or overlap); ranges {ranges[:20]}"
            want = last + 1
        assert want == end, f"partition {p}: files end at offset {want}, high watermark {end}"
    assert {q for q, *_ in out} <= set(hw), f"files of partitions {sorted({q for q, *_ in out})}, topic has {sorted(hw)}"
    return out


def assert_each_offset_once(con, table, hw):
    """count(*) = count(DISTINCT (partition, offset)) = sum of high watermarks, and
    per partition the offsets are exactly [0, HW)."""
    total, distinct = con.sql(f'SELECT count(*), count(DISTINCT (partition, "offset")) FROM {table}').fetchone()
    per = {p: (n, lo, hi) for p, n, lo, hi in con.sql(
        f'SELECT partition, count(DISTINCT "offset"), min("offset"), max("offset") FROM {table} GROUP BY ALL').fetchall()}
    assert total == distinct, f"{total - distinct} rows are a second copy of a (partition, offset)"
    want = {p: (h, 0, h - 1) for p, h in hw.items() if h > 0}
    assert per == want, f"per partition (offsets, min, max): got {per}, want {want}"
    assert total == sum(hw.values())


def top_level_columns(con, path):
    """[(name, repetition type)] of a Parquet file's top-level columns (parquet_schema
    lists every node depth-first; nested names like a header's `key` are skipped)."""
    nodes = con.sql(f"SELECT name, repetition_type, coalesce(num_children, 0) FROM parquet_schema('{path}')").fetchall()
    out, stack = [], []
    for name, rep, children in nodes[1:]:
        if not stack:
            out.append((name, rep))
        else:
            stack[-1] -= 1
        if children:
            stack.append(children)
        while stack and stack[-1] == 0:
            stack.pop()
    return out


def utc_ms(ms):
    return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=ms)


def rfc3339(ms, offset_hours=0):
    t = utc_ms(ms).astimezone(dt.timezone(dt.timedelta(hours=offset_hours)))
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def json_path(doc, path):
    """The spec's paths: $, .field, ["field"], [N]. Returns MISSING when a step fails."""
    node = doc
    for field, quoted, index in re.findall(r'\.([^.\[]+)|\["([^"]*)"\]|\[(\d+)\]', path[1:]):
        if index:
            if not isinstance(node, list) or int(index) >= len(node):
                return MISSING
            node = node[int(index)]
        else:
            if not isinstance(node, dict) or (field or quoted) not in node:
                return MISSING
            node = node[field or quoted]
    return node


MISSING = object()


def typed_value(value, column):
    """What the spec says the typed column holds for a record value (None is NULL):
    strict JSON typing, NULL for anything that does not parse or match."""
    if value is None:
        return None
    try:
        doc = json.loads(value.decode("utf-8"), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except (UnicodeDecodeError, ValueError):
        return None
    v = json_path(doc, column["path"])
    kind = column["type"]
    is_int = type(v) is int and -2**63 <= v < 2**63
    if kind == "int64":
        return v if is_int else None
    if kind == "float64":
        return float(v) if type(v) in (int, float) else None
    if kind == "string":
        return v if type(v) is str else None
    if kind == "bool":
        return v if type(v) is bool else None
    if kind == "timestamp":
        if is_int:
            return v
        if type(v) is str and RFC3339.match(v):
            t = dt.datetime.fromisoformat(v.replace("z", "Z").replace("t", "T"))
            return (t - utc_ms(0)) // dt.timedelta(milliseconds=1)
        return None
    raise AssertionError(kind)


def field_bytes(obj, name):
    """A key/value field of a lookup answer as bytes: the string when UTF-8, else
    `{name}_base64`; checks that UTF-8 bytes come as a string."""
    if obj.get(name) is not None:
        return obj[name].encode()
    if obj.get(f"{name}_base64") is not None:
        raw = base64.b64decode(obj[f"{name}_base64"])
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw
        raise AssertionError(f"{name} {raw!r} is UTF-8 but came as {name}_base64: {obj}")
    return None


def api_record(r):
    """A lookup answer's record as (partition, offset, timestamp, key, value, headers)."""
    headers = tuple((h["key"], field_bytes(h, "value")) for h in r["headers"])
    return r["partition"], r["offset"], r["timestamp"], field_bytes(r, "key"), field_bytes(r, "value"), headers


def produce(bootstrap, topic, messages, **conf):
    """Produces [(key, value, headers, timestamp_ms)] with confluent-kafka (acks=all)
    and returns the delivery reports [(partition, offset)] in produce order."""
    from confluent_kafka import Producer

    config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 10,
              "message.timeout.ms": 60000, "enable.idempotence": True}
    config.update(conf)
    p = Producer(config)
    reports = [None] * len(messages)
    errors = []

    def on_delivery(i):
        def cb(err, msg):
            if err is not None:
                errors.append((i, err))
            reports[i] = (msg.partition(), msg.offset())
        return cb

    for i, (key, value, headers, ts) in enumerate(messages):
        kw = {"key": key, "value": value, "on_delivery": on_delivery(i)}
        if headers:
            kw["headers"] = headers
        if ts is not None:
            kw["timestamp"] = ts
        while True:
            try:
                p.produce(topic, **kw)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(120) == 0, "messages still undelivered after 120 s"
    assert not errors, f"{len(errors)} deliveries failed, first: {errors[:3]}"
    return reports


def high_watermarks(reports, partitions):
    hw = {p: 0 for p in range(partitions)}
    for p, o in reports:
        hw[p] = max(hw[p], o + 1)
    return hw


# ---------------------------------------------------------------- the 100,000 orders

def order_message(i, ts):
    """Message i of `orders`: (key, value, headers, timestamp). Mostly good JSON;
    every thousand has one of each kind of bad or odd value."""
    kind = i % 1000
    key = None if kind == 988 else f"k{kind}".encode()
    headers = None
    if i % 10 == 0:
        headers = [("source", b"test"), ("i", str(i).encode())]
    elif i % 10 == 5:
        headers = [("bin", b"\xff\x00\x01")]
    if kind == 999:  # not JSON; every other one not UTF-8 either
        value = (b"\xff\xfe not json " if i % 2000 == 999 else b"plain text, not JSON ") + str(i).encode()
    elif kind == 998:  # JSON, every field of the wrong type
        value = json.dumps({"id": str(i), "amount": "12.5", "customer": i, "ok": "true", "at": True,
                            "items": {"sku": "s"}, "big number": "1"}).encode()
    elif kind == 997:
        value = b""  # empty: not JSON
    elif kind == 996:
        value = None  # a tombstone
    else:
        doc = {"id": i,
               # any JSON number is a float64: an integer every 20th (the same number)
               "amount": i // 4 if i % 20 == 0 else i * 0.25,
               "customer": f"c{i % 97}",
               "ok": i % 3 == 0,
               "at": rfc3339(ts),
               "items": [{"sku": f"s{i % 7}", "qty": 1}]}
        if kind == 995:
            doc["id"] = i + 0.5           # not an integer: NULL
            doc["at"] = ts                # epoch milliseconds: a timestamp
        elif kind == 994:
            doc["big number"] = 2**63     # does not fit int64: NULL
            doc["at"] = rfc3339(ts, 2)    # RFC 3339 with an offset
        elif kind == 993:
            doc["big number"] = -2**63    # fits
            doc["customer"] = "Zoë ✓ \"quoted\""
        elif kind == 992:
            doc["big number"] = 2**63 - 1
            del doc["ok"]                 # missing: NULL
            doc["items"] = []             # $.items[0] missing: NULL
        elif kind == 991:
            doc["amount"] = None          # JSON null: NULL
            doc["at"] = "yesterday"       # not RFC 3339: NULL
            doc["customer"] = ["c"]       # an array: NULL
        elif kind == 990:
            doc = [doc]                   # paths start at an object: all NULL
        elif kind == 989:
            doc["id"] = float(i)          # 989.0 is not a JSON integer: NULL
            doc["at"] = float(ts)         # nor a timestamp
        value = json.dumps(doc, ensure_ascii=False).encode()
    return key, value, headers, ts


class Orders:
    """The shared standalone and what was produced to `orders`."""

    def __init__(self, s, boundary, base, rows, hw):
        self.s = s
        self.boundary = boundary    # the hour boundary the timestamps cross
        self.base = base            # timestamp of message 0; message i has base + i
        self.rows = rows            # (partition, offset) -> (i, key, value, headers, ts)
        self.hw = hw

    @property
    def admin(self):
        return self.s.admin_url

    def typed(self, i_or_row):
        _, key, value, headers, ts = i_or_row
        return tuple(typed_value(value, c) for c in ORDERS_INDEX)

    def expected(self, pred):
        """(partition, offset) of the produced records for which pred(row) holds, in the
        lookup order (timestamp, partition, offset)."""
        hits = [(row[4], po[0], po[1]) for po, row in self.rows.items() if pred(row)]
        return [(p, o) for _, p, o in sorted(hits)]


@pytest.fixture(scope="module")
def orders(floe_bin, tmp_path_factory):
    s = Standalone(floe_bin, tmp_path_factory.mktemp("indexer"), name="indexer", indexer_poll_ms=200)
    s.start()
    try:
        KafkaKit.create_topic(s.bootstrap, "orders", partitions=ORDERS_PARTITIONS, config=ORDERS_CONFIG)
        # Timestamps 1 ms apart over an hour boundary, all in the past (so none is
        # "in the future" and none is near the topic's 7-day retention).
        now = int(time.time() * 1000)
        boundary = (now - 120_000) - (now - 120_000) % HOUR_MS
        base = boundary - 50_000
        messages = [order_message(i, base + i) for i in range(ORDERS_N)]
        started = time.monotonic()
        reports = produce(s.bootstrap, "orders", messages, **{"compression.type": "lz4"})
        produced = time.monotonic()
        rows = {po: (i, *messages[i][:2], tuple(messages[i][2] or ()), messages[i][3])
                for i, po in enumerate(reports)}
        assert len(rows) == ORDERS_N, "two messages acknowledged at the same offset"
        hw = high_watermarks(reports, ORDERS_PARTITIONS)
        wait_exported(s.admin_url, "orders", hw, timeout=120)
        print(f"orders: produced {ORDERS_N} in {produced - started:.1f}s, "
              f"exported {time.monotonic() - produced:.1f}s later; high watermarks {hw}")
        yield Orders(s, boundary, base, rows, hw)
    finally:
        s.stop()


@pytest.fixture(autouse=True)
def _logs_of_the_shared_standalone(request):
    """Adds the shared standalone's log tail to a failed test's report (conftest's hook)."""
    if "orders" in request.fixturenames:
        o = request.getfixturevalue("orders")
        request.node._floe_standalones = getattr(request.node, "_floe_standalones", []) + [o.s]
    yield


# ---------------------------------------------------------------- DuckDB on the local exports

def test_duckdb_reads_every_produced_record_with_its_typed_columns(orders):
    s, hw = orders.s, orders.hw
    con = duck()
    table = local_scan(s, "orders")
    layout = check_layout(export_files(export_dir(s, "orders")), hw)
    print(f"orders: {len(layout)} files, per partition "
          f"{ {p: sum(1 for q, *_ in layout if q == p) for p in hw} }")
    assert len(layout) >= 4 * ORDERS_PARTITIONS, "export.file.bytes=64 KiB should make several files a partition"

    # Row count, per-partition max offset, no (partition, offset) twice.
    assert_each_offset_once(con, table, hw)
    assert dict(con.sql(f'SELECT partition, max("offset") FROM {table} GROUP BY ALL').fetchall()) == \
        {p: h - 1 for p, h in hw.items()}

    # Each file holds what its name says, in the dt/hr of its first record.
    per_file = con.sql(f"""
        SELECT filename, min(partition), max(partition), min("offset"), max("offset"), count(*),
               arg_min(epoch_ms(timestamp), "offset"), max(epoch_ms(timestamp)), any_value(dt)::VARCHAR,
               any_value(hr)
        FROM {table} GROUP BY filename""").fetchall()
    by_path = {str(pathlib.Path(f).relative_to(export_dir(s, "orders"))): rest for f, *rest in per_file}
    hours = set()
    for p, first, last, day, hour, rel in layout:
        pmin, pmax, omin, omax, n, first_ts, max_ts, hive_dt, hive_hr = by_path[str(rel)]
        assert (pmin, pmax, omin, omax, n) == (p, p, first, last, last - first + 1), \
            f"{rel}: holds partitions {pmin}-{pmax}, offsets {omin}-{omax}, {n} rows"
        start = utc_ms(first_ts)
        assert (day, hour) == (start.strftime("%Y-%m-%d"), start.hour), \
            f"{rel}: first record at {start.isoformat()}, folder dt={day}/hr={hour:02}"
        assert (hive_dt, hive_hr) == (day, hour), f"hive columns {hive_dt}/{hive_hr} for {rel}"
        assert max_ts < first_ts - first_ts % HOUR_MS + HOUR_MS, f"{rel} holds records of a later hour"
        hours.add((day, hour))
    assert len(hours) == 2, f"timestamps cross one hour boundary: files in {sorted(hours)}"

    # Every row is what was produced: timestamp, key, value, headers and typed columns.
    cols = ", ".join(f'"{c}"' if c != "at" else 'epoch_ms("at")' for c in ORDERS_COLUMNS)
    got = con.sql(f'SELECT partition, "offset", epoch_ms(timestamp), key, value, headers, {cols} '
                  f"FROM {table}").fetchall()
    assert len(got) == ORDERS_N
    wrong = []
    for p, o, ts, key, value, headers, *typed in got:
        row = orders.rows[(p, o)]
        want = (row[4], row[1], row[2], row[3], orders.typed(row))
        have = (ts, key, value, tuple((h["key"], h["value"]) for h in headers), tuple(typed))
        if have != want:
            wrong.append(f"({p}, {o}) message {row[0]}: got {have!r:.600}, want {want!r:.600}")
    assert not wrong, f"{len(wrong)} rows differ from what was produced:\n" + "\n".join(wrong[:5])

    # The same, as the sums and NULL counts an analyst would check.
    typed_rows = [orders.typed(r) for r in orders.rows.values()]
    want_nulls = [sum(t[k] is None for t in typed_rows) for k in range(len(ORDERS_INDEX))]
    nulls = con.sql("SELECT " + ", ".join(f'count(*) - count("{c}")' for c in ORDERS_COLUMNS)
                    + f" FROM {table}").fetchone()
    assert list(nulls) == want_nulls, f"NULLs per typed column {dict(zip(ORDERS_COLUMNS, nulls))}, " \
                                      f"want {dict(zip(ORDERS_COLUMNS, want_nulls))}"
    # 500 a column from values that are not JSON, empty, tombstones, all wrong types or
    # an array; 100 or 200 more from single bad fields; `big` is set in 200 values only.
    assert want_nulls == [700, 600, 600, 600, 700, 600, 99_800], want_nulls
    sum_id, sum_amount = con.sql(f"SELECT sum(id), sum(amount) FROM {table}").fetchone()
    assert sum_id == sum(t[0] for t in typed_rows if t[0] is not None)
    assert sum_amount == sum(t[1] for t in typed_rows if t[1] is not None)

    # Schema: the fixed columns, then the index definition, in order.
    one = layout[0][5]
    described = con.sql(f"DESCRIBE SELECT * FROM read_parquet('{export_dir(s, 'orders') / one}', "
                        "hive_partitioning = false)").fetchall()
    types = [(name, kind.replace('"', "")) for name, kind, *_ in described]
    assert types == [("partition", "INTEGER"), ("offset", "BIGINT"), ("timestamp", "TIMESTAMP WITH TIME ZONE"),
                     ("key", "BLOB"), ("value", "BLOB"), ("headers", "STRUCT(key VARCHAR, value BLOB)[]"),
                     ("id", "BIGINT"), ("amount", "DOUBLE"), ("customer", "VARCHAR"), ("ok", "BOOLEAN"),
                     ("at", "TIMESTAMP WITH TIME ZONE"), ("sku", "VARCHAR"), ("big", "BIGINT")], types
    required = {name for name, rep in top_level_columns(con, export_dir(s, "orders") / one) if rep == "REQUIRED"}
    assert {"partition", "offset", "timestamp", "headers"} <= required, f"REQUIRED columns: {required}"
    assert not required & {"key", "value", *ORDERS_COLUMNS}, f"REQUIRED columns: {required}"
    # The definition the file was written with, in its key-value metadata.
    kv = dict(con.sql(f"SELECT decode(key), decode(value) FROM parquet_kv_metadata('{export_dir(s, 'orders') / one}')")
              .fetchall())
    assert json.loads(kv.get("floe.index", "null")) == ORDERS_INDEX, kv.keys()

    # Row groups of at most export.row.group.rows, zstd, bloom filters on key and the typed columns.
    meta = con.sql(f"""
        SELECT file_name, row_group_id, any_value(row_group_num_rows),
               list(DISTINCT compression), list(path_in_schema) FILTER (WHERE bloom_filter_offset IS NOT NULL)
        FROM parquet_metadata('{export_dir(s, 'orders')}/**/*.parquet') GROUP BY ALL""").fetchall()
    groups = {}
    for f, _, n, codecs, bloom in meta:
        groups.setdefault(f, []).append(n)
        assert n <= 1000, f"{f}: a row group of {n} rows (export.row.group.rows=1000)"
        assert codecs == ["ZSTD"], f"{f}: compression {codecs}"
        missing = {"key", *ORDERS_COLUMNS} - set(bloom or [])
        assert not missing, f"{f}: no bloom filter on {missing}"
    assert max(len(g) for g in groups.values()) >= 2, "no file has several row groups"
    # The bloom filters answer: an absent key is excluded from (nearly) every row group.
    probes = con.sql(f"SELECT count(*), count(*) FILTER (WHERE bloom_filter_excludes) FROM parquet_bloom_probe("
                     f"'{export_dir(s, 'orders')}/**/*.parquet', 'key', 'k988'::BLOB)").fetchone()
    assert probes[1] >= 0.8 * probes[0], f"bloom filters exclude key k988 from {probes[1]} of {probes[0]} row groups"


def doc_block(tag):
    """The fenced ```python block after `<!-- tested: TAG -->` in docs/indexer.md."""
    m = re.search(r"<!-- tested: " + re.escape(tag) + r" -->\s*```python\n(.*?)```", DOC.read_text(), re.S)
    assert m, f"docs/indexer.md has no ```python block marked <!-- tested: {tag} -->"
    return m.group(1)


def run_doc_block(tag, cwd, monkeypatch, replace=None):
    """Runs a docs/indexer.md example as written (only `replace` substituted), in
    `cwd`; returns its variables."""
    code = doc_block(tag)
    for old, new in (replace or {}).items():
        assert old in code, f"the {tag} example no longer contains {old!r}"
        code = code.replace(old, new)
    monkeypatch.chdir(cwd)
    namespace = {"__name__": f"docs_indexer_{tag}"}
    exec(compile(code, f"docs/indexer.md <!-- tested: {tag} -->", "exec"), namespace)
    return namespace


def doc_folder(orders, tmp_path):
    """A folder where `floe-data` is the shared standalone's data dir, as in the doc."""
    (tmp_path / "floe-data").symlink_to(orders.s.data_dir, target_is_directory=True)
    return tmp_path


def test_documented_duckdb_example_gives_the_produced_figures(orders, tmp_path, monkeypatch):
    ns = run_doc_block("duckdb", doc_folder(orders, tmp_path), monkeypatch)
    typed = {po: orders.typed(r) for po, r in orders.rows.items()}
    want = []
    for p in sorted(orders.hw):
        amounts = [t[1] for (q, _), t in typed.items() if q == p and t[1] is not None]
        want.append((p, orders.hw[p], orders.hw[p] - 1, sum(amounts)))
    assert ns["per_partition"] == want
    c7 = sorted(((t[1], po) for po, t in typed.items() if t[2] == "c7" and t[1] is not None), reverse=True)[:5]
    assert ns["top"] == [(p, o, orders.rows[(p, o)][1].decode(), amount) for amount, (p, o) in c7]
    assert ns["unparsed"] == sum(t[0] is None for t in typed.values())


# ---------------------------------------------------------------- Spark

def test_spark_reads_the_same_exports_as_duckdb(orders, tmp_path, monkeypatch):
    """One Spark session (local[1]), started by the documented example itself."""
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS",
                       "--master local[1] --driver-memory 512m --conf spark.ui.enabled=false "
                       "--conf spark.driver.host=127.0.0.1 --conf spark.driver.bindAddress=127.0.0.1 "
                       "--conf spark.sql.shuffle.partitions=4 --conf spark.ui.showConsoleProgress=false pyspark-shell")
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    started = time.monotonic()
    ns = {}
    try:
        ns = run_doc_block("spark", doc_folder(orders, tmp_path), monkeypatch)
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        frame = ns["orders"]
        con = duck()
        table = local_scan(orders.s, "orders")
        duck_per_partition = con.sql(f'SELECT partition, count(*), max("offset"), sum(amount) FROM {table} '
                                     "GROUP BY partition ORDER BY partition").fetchall()
        assert [tuple(r) for r in ns["per_partition"]] == duck_per_partition

        fields = {f.name: f.dataType for f in frame.schema.fields}
        assert isinstance(fields["partition"], T.IntegerType) and isinstance(fields["offset"], T.LongType)
        assert isinstance(fields["timestamp"], T.TimestampType) and isinstance(fields["at"], T.TimestampType)
        assert isinstance(fields["key"], T.BinaryType) and isinstance(fields["value"], T.BinaryType)
        assert isinstance(fields["headers"], T.ArrayType)
        assert isinstance(fields["amount"], T.DoubleType) and isinstance(fields["ok"], T.BooleanType)
        assert isinstance(fields["dt"], T.DateType) and isinstance(fields["hr"], T.IntegerType), fields

        row = frame.agg(F.count("*"), F.countDistinct("partition", "offset"), F.sum("id"),
                        F.sum(F.when(F.col("id").isNull(), 1).otherwise(0)),
                        F.sum(F.unix_millis("timestamp")), F.sum(F.unix_millis("at")),
                        F.sum(F.when(F.col("ok"), 1).otherwise(0)), F.sum(F.size("headers"))).collect()[0]
        want = con.sql(f"""SELECT count(*), count(DISTINCT (partition, "offset")), sum(id), count(*) - count(id),
                                  sum(epoch_ms(timestamp)), sum(epoch_ms("at")), count(*) FILTER (WHERE ok),
                                  sum(len(headers)) FROM {table}""").fetchone()
        assert tuple(row) == tuple(want), f"Spark {tuple(row)} != DuckDB {want}"
        hours = sorted(tuple(r) for r in frame.select(F.col("dt").cast("string"), "hr").distinct().collect())
        assert hours == sorted(con.sql(f"SELECT DISTINCT dt::VARCHAR, hr FROM {table}").fetchall())
        print(f"Spark: session and checks in {time.monotonic() - started:.1f}s")
    finally:
        if "spark" in ns:
            ns["spark"].stop()


# ---------------------------------------------------------------- lookups

def total_files(orders, topic="orders"):
    return len(export_files(export_dir(orders.s, topic)))


def test_lookup_by_key_matches_a_full_scan_and_reads_few_files(orders):
    con = duck()
    table = local_scan(orders.s, "orders")
    files = total_files(orders)
    # k7: 100 records, all in one of the four partitions (keyed partitioning), so
    # bloom filters can skip the files of the other three. k988: no record has it.
    for key, count in (("k7", 100), ("k988", 0)):
        status, body = http_json(records_url(orders.admin, "orders", key=key, limit=1000))
        assert status == 200, (status, body)
        got = [api_record(r) for r in body["records"]]
        scanned = con.sql(f'SELECT partition, "offset", epoch_ms(timestamp) FROM {table} WHERE key = ?::BLOB '
                          'ORDER BY 3, 1, 2', params=[key.encode()]).fetchall()
        assert [(p, o) for p, o, _ in scanned] == orders.expected(lambda r: r[1] == key.encode())
        assert len(scanned) == count
        assert [(p, o, ts) for p, o, ts, *_ in got] == scanned, "lookup and full scan differ"
        for p, o, ts, k, v, h in got:
            _, rk, rv, rh, rts = orders.rows[(p, o)]
            assert (k, v, h) == (rk, rv, rh), f"({p}, {o}): the lookup answers {(k, v, h)!r:.300}"
        stats = body["stats"]
        print(f"lookup key={key}: {len(got)} records; stats {stats}; {files} files on disk")
        assert stats["log_records_scanned"] == 0, "everything is exported: no log to scan"
        assert 0 < stats["files"] <= files
        assert stats["files_read"] <= stats["files"] / 2, \
            f"key {key}: {stats['files_read']} of {stats['files']} files read; the key is in one partition of four"


def test_lookup_by_time_range_and_limit(orders):
    base, admin = orders.base, orders.admin
    # Messages 50000..50099: one timestamp each, every key.
    lo, hi = base + 50_000, base + 50_100
    want = orders.expected(lambda r: lo <= r[4] < hi)
    assert len(want) == 100
    for frm, to in ((lo, hi), (rfc3339(lo), rfc3339(hi)), (rfc3339(lo, 2), rfc3339(hi, -5))):
        status, body = http_json(records_url(admin, "orders", **{"from": frm, "to": to, "limit": 1000}))
        assert status == 200, (frm, to, status, body)
        assert [(r["partition"], r["offset"]) for r in body["records"]] == want, f"from={frm} to={to}"
    stats = body["stats"]
    print(f"time range of 100 ms: stats {stats}")
    assert stats["files_read"] <= stats["files"] / 2, f"a 100 ms range read {stats}"

    # Over the hour boundary: records from files of both hours.
    b = orders.boundary
    status, body = http_json(records_url(admin, "orders", **{"from": b - 10, "to": b + 10}))
    assert status == 200
    assert [(r["partition"], r["offset"]) for r in body["records"]] == orders.expected(lambda r: b - 10 <= r[4] < b + 10)

    # Key and time together; `to` is exclusive.
    status, body = http_json(records_url(admin, "orders", key="k7", **{"from": base + 7, "to": base + 5007}))
    assert status == 200
    assert [r["timestamp"] - base for r in body["records"]] == [7, 1007, 2007, 3007, 4007]

    # limit: the first N by (timestamp, partition, offset); default 100.
    status, body = http_json(records_url(admin, "orders", key="k7", limit=3))
    assert [r["timestamp"] - base for r in body["records"]] == [7, 1007, 2007]
    status, body = http_json(records_url(admin, "orders"))
    assert status == 200 and len(body["records"]) == 100, len(body["records"])
    assert [(r["partition"], r["offset"]) for r in body["records"]] == orders.expected(lambda r: r[0] < 100)
    # The largest limit answers 10000 records.
    status, body = http_json(records_url(admin, "orders", limit=10000))
    assert status == 200 and len(body["records"]) == 10000, (status, str(body)[:300])
    assert [(r["partition"], r["offset"]) for r in body["records"]] == orders.expected(lambda r: r[0] < 10000)


def test_floe_query_prints_one_json_record_per_line(orders, floe_bin):
    args = [str(floe_bin), "query", "--topic", "orders", "--key", "k7", "--from", rfc3339(orders.base),
            "--limit", "4", "--indexer", orders.admin]
    res = subprocess.run(args, capture_output=True, timeout=60)
    assert res.returncode == 0, f"floe query exited {res.returncode}: {res.stderr.decode()[-2000:]}"
    lines = res.stdout.decode().splitlines()
    records = [json.loads(line) for line in lines]
    status, body = http_json(records_url(orders.admin, "orders", key="k7", limit=4, **{"from": orders.base}))
    assert records == body["records"], "floe query and the HTTP answer differ"
    assert [r["timestamp"] - orders.base for r in records] == [7, 1007, 2007, 3007]
    assert res.stderr.strip(), "no summary line on stderr"
    print("floe query stderr:", res.stderr.decode().strip())

    # Nothing found: no line on stdout, exit 0.
    res = subprocess.run([str(floe_bin), "query", "--topic", "orders", "--key", "k988", "--indexer", orders.admin],
                         capture_output=True, timeout=60)
    assert res.returncode == 0 and res.stdout == b"", (res.returncode, res.stdout[:300], res.stderr[-500:])
    # An unknown topic: an error, not an empty answer.
    res = subprocess.run([str(floe_bin), "query", "--topic", "no-such-topic", "--indexer", orders.admin],
                         capture_output=True, timeout=60)
    assert res.returncode != 0 and res.stdout == b"", (res.returncode, res.stdout[:300])


def test_lookup_finds_records_not_exported_yet(orders):
    s = orders.s
    # An hour's roll and big files: nothing of this topic is exported during the test.
    KafkaKit.create_topic(s.bootstrap, "recent", partitions=2,
                          config={"export.enabled": "true", "export.roll.ms": "3600000",
                                  "export.index": json.dumps([{"name": "n", "path": "$.n", "type": "int64"}])})
    now = int(time.time() * 1000)
    messages = [(f"r{i % 3}".encode(), json.dumps({"n": i}).encode(), None, now - 1000 + i) for i in range(30)]
    reports = produce(s.bootstrap, "recent", messages)
    status, body = http_json(records_url(s.admin_url, "recent", key="r1"))
    assert status == 200, (status, body)
    assert sorted((r["partition"], r["offset"]) for r in body["records"]) == \
        sorted(po for po, m in zip(reports, messages) if m[0] == b"r1")
    assert [json.loads(r["value"])["n"] for r in body["records"]] == list(range(1, 30, 3)), "ordered by timestamp"
    assert body["stats"]["log_records_scanned"] >= 10 and body["stats"]["files"] == 0, body["stats"]
    state = exports(s.admin_url, "recent")
    assert state["enabled"] is True
    assert all(p["exported_offset"] == 0 and p["files"] == 0 for p in state["partitions"]), state
    assert {p["partition"]: p["high_watermark"] for p in state["partitions"]} == high_watermarks(reports, 2)
    assert not export_files(export_dir(s, "recent"))


def test_bad_query_parameters_and_unknown_topics(orders):
    admin = orders.admin
    for url in (records_url(admin, "no-such-topic"), f"{admin}/v1/topics/no-such-topic/exports"):
        status, body = http_json(url)
        assert status == 404, (url, status, body)
        assert isinstance(body, dict) and body.get("error"), body
    for params in ({"from": "yesterday"}, {"to": "2025-13-45T99:00:00Z"}, {"from": "12abc"},
                   {"limit": "ten"}, {"limit": "-1"}, {"limit": "0"}, {"limit": "10001"}, {"keys": "k7"}):
        status, body = http_json(records_url(admin, "orders", **params))
        assert status == 400, (params, status, str(body)[:300])
        assert isinstance(body, dict) and body.get("error"), (params, body)


def test_bad_values_huge_values_binary_keys_and_an_empty_topic(orders):
    s = orders.s
    index = [{"name": "n", "path": "$.n", "type": "int64"}, {"name": "s", "path": "$.s", "type": "string"}]
    config = {"export.enabled": "true", "export.roll.ms": "500", "export.index": json.dumps(index)}
    KafkaKit.create_topic(s.bootstrap, "odd", partitions=1, config=config)
    KafkaKit.create_topic(s.bootstrap, "empty", partitions=3, config=config)
    now = int(time.time() * 1000)
    huge_json = json.dumps({"n": 8, "s": "x" * 900_000}).encode()
    messages = [
        (b"a", b"not json at all", None, now - 10),
        (b"b", b'{"n": "7", "s": 7}', None, now - 9),
        (b"c", b'{"n": 1.5}', None, now - 8),
        (b"d", b'{"n": 7, "s": "seven"}', [("h", b"v"), ("bin", b"\xff\xfe")], now - 7),
        (b"e", huge_json, None, now - 6),
        (b"f", bytes(range(256)) * 3600, None, now - 5),    # 900 KiB, not JSON, not UTF-8
        (b"\xff\x00binary key", b'{"n": 9}', None, now - 4),
        (None, None, None, now - 3),
    ]
    reports = produce(s.bootstrap, "odd", messages, **{"compression.type": "zstd", "linger.ms": 0})
    assert [o for _, o in reports] == list(range(len(messages)))
    wait_exported(s.admin_url, "odd", {0: len(messages)})

    con = duck()
    rows = con.sql(f'SELECT "offset", key, octet_length(value), n, length(s) FROM {local_scan(s, "odd")} '
                   'ORDER BY "offset"').fetchall()
    assert rows == [(0, b"a", 15, None, None), (1, b"b", 18, None, None), (2, b"c", 10, None, None),
                    (3, b"d", 22, 7, 5), (4, b"e", len(huge_json), 8, 900_000), (5, b"f", 921_600, None, None),
                    (6, b"\xff\x00binary key", 8, 9, None), (7, None, None, None, None)], rows

    status, body = http_json(records_url(s.admin_url, "odd", **{"from": now - 100}))
    assert status == 200, (status, str(body)[:300])
    got = [api_record(r) for r in body["records"]]
    assert [(o, k, v) for _, o, _, k, v, _ in got] == [(i, m[0], m[1]) for i, m in enumerate(messages)]
    assert got[3][5] == (("h", b"v"), ("bin", b"\xff\xfe")), got[3][5]
    raw = body["records"]
    assert raw[4]["value"] == huge_json.decode(), "the 900 KB JSON value comes back whole"
    assert raw[5]["value"] is None and base64.b64decode(raw[5]["value_base64"]) == messages[5][1]
    assert raw[6]["key"] is None and base64.b64decode(raw[6]["key_base64"]) == messages[6][0]
    assert raw[7]["key"] is None and raw[7]["value"] is None and raw[7]["headers"] == []
    assert raw[3]["headers"][1]["value"] is None and raw[3]["headers"][1]["value_base64"] == \
        base64.b64encode(b"\xff\xfe").decode()

    # An empty topic: exported up to 0, no file, an empty answer.
    state = exports(s.admin_url, "empty")
    assert sorted(p["partition"] for p in state["partitions"]) == [0, 1, 2], state
    assert all((p["exported_offset"], p["high_watermark"], p["files"]) == (0, 0, 0) for p in state["partitions"]), state
    status, body = http_json(records_url(s.admin_url, "empty", key="a"))
    assert (status, body["records"]) == (200, []), (status, body)
    status, body = http_json(records_url(s.admin_url, "empty"))
    assert (status, body["records"]) == (200, []), (status, body)
    assert not export_files(export_dir(s, "empty"))


def test_bad_index_definition_is_refused_with_invalid_config(orders):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": orders.s.bootstrap})
    resource = ConfigResource("topic", "orders")
    before = {k: v.value for k, v in admin.describe_configs([resource])[resource].result(30).items()}
    bad = ['[{"name":"amount","path":"amount","type":"float64"}]',      # path without $
           '[{"name":"offset","path":"$.o","type":"int64"}]',           # a fixed column's name
           '[{"name":"a","path":"$.a","type":"decimal"}]',              # no such type
           '[{"name":"a","path":"$.a","type":"int64"},{"name":"A","path":"$.b","type":"string"}]',
           '{"name":"a"}', "not json"]
    for definition in bad:
        r = ConfigResource("topic", "orders", incremental_configs=[
            ConfigEntry("export.index", definition, incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException) as e:
            admin.incremental_alter_configs([r])[r].result(30)
        assert e.value.args[0].code() == KafkaError.INVALID_CONFIG, (definition, e.value)
    for key, value in (("export.roll.ms", "10"), ("export.compression", "brotli"), ("export.enabled", "yes")):
        r = ConfigResource("topic", "orders", incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException) as e:
            admin.incremental_alter_configs([r])[r].result(30)
        assert e.value.args[0].code() == KafkaError.INVALID_CONFIG, (key, value, e.value)
    fut = admin.create_topics([NewTopic("bad-index", 1, 1, config={"export.enabled": "true", "export.index": "[1]"})])
    with pytest.raises(KafkaException) as e:
        fut["bad-index"].result(30)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG, e.value
    after = {k: v.value for k, v in admin.describe_configs([resource])[resource].result(30).items()}
    assert after == before, "a refused change changed the configs"


def test_a_changed_index_definition_starts_files_with_the_new_schema(orders):
    s = orders.s
    first = [{"name": "a", "path": "$.a", "type": "int64"}, {"name": "b", "path": "$.b", "type": "string"}]
    second = [{"name": "a", "path": "$.a", "type": "int64"}, {"name": "c", "path": "$.c", "type": "float64"}]
    KafkaKit.create_topic(s.bootstrap, "evolve", partitions=1,
                          config={"export.enabled": "true", "export.roll.ms": "300", "export.index": json.dumps(first)})
    now = int(time.time() * 1000)
    value = lambda i: json.dumps({"a": i, "b": f"b{i}", "c": i / 2}).encode()
    produce(s.bootstrap, "evolve", [(None, value(i), None, now - 1000 + i) for i in range(50)])
    wait_exported(s.admin_url, "evolve", {0: 50})
    subprocess.run([str(s.bin), "topic", "alter", "evolve", "--bootstrap", s.bootstrap,
                    "--config", f"export.index={json.dumps(second)}"], check=True, capture_output=True, timeout=60)
    time.sleep(3)  # the indexer sees config changes on its next poll (1 s)
    produce(s.bootstrap, "evolve", [(None, value(i), None, now - 1000 + i) for i in range(50, 100)])
    wait_exported(s.admin_url, "evolve", {0: 100})

    con = duck()
    rows = con.sql(f'SELECT "offset", a, b, c FROM {local_scan(s, "evolve")} ORDER BY "offset"').fetchall()
    assert rows == [(i, i, f"b{i}", None) for i in range(50)] + [(i, i, None, i / 2) for i in range(50, 100)], \
        [r for r in rows if r[0] in (0, 49, 50, 99)]
    schemas = {}
    for f in export_files(export_dir(s, "evolve")):
        names = [n for n, *_ in con.sql(f"DESCRIBE SELECT * FROM read_parquet('{export_dir(s, 'evolve') / f}', "
                                        "hive_partitioning = false)").fetchall()]
        schemas[str(f)] = names[6:]
    assert set(map(tuple, schemas.values())) == {("a", "b"), ("a", "c")}, schemas


@pytest.mark.parametrize("codec", CODECS + ["none"])
def test_each_producer_codec_and_export_compression(orders, codec):
    """Batches compressed with each Kafka codec are exported, and the files use the
    topic's export.compression."""
    s = orders.s
    topic = f"codec-{codec}"
    KafkaKit.create_topic(s.bootstrap, topic, partitions=1,
                          config={"export.enabled": "true", "export.roll.ms": "300", "export.compression": codec,
                                  "export.index": json.dumps([{"name": "n", "path": "$.n", "type": "int64"}])})
    now = int(time.time() * 1000)
    produce(s.bootstrap, topic, [(f"k{i}".encode(), json.dumps({"n": i, "pad": "p" * (i % 50)}).encode(), None, now - 2000 + i)
                                 for i in range(2000)], **{"compression.type": codec})
    wait_exported(s.admin_url, topic, {0: 2000})
    con = duck()
    assert con.sql(f'SELECT count(*), count(DISTINCT "offset"), sum(n) FROM {local_scan(s, topic)}').fetchone() == \
        (2000, 2000, sum(range(2000)))
    codecs = {c for (c,) in con.sql(f"SELECT DISTINCT compression FROM parquet_metadata('{export_dir(s, topic)}/**/*.parquet')").fetchall()}
    want = {"gzip": {"GZIP"}, "snappy": {"SNAPPY"}, "lz4": {"LZ4", "LZ4_RAW"}, "zstd": {"ZSTD"}, "none": {"UNCOMPRESSED"}}[codec]
    assert codecs and codecs <= want, f"export.compression={codec}: files use {codecs}"


def test_export_retention_deletes_old_files_and_keeps_the_log(orders):
    """export.retention.ms is the exports' own: files of records older than it are
    deleted (and not exported again), while the topic's log keeps the records."""
    s = orders.s
    KafkaKit.create_topic(s.bootstrap, "aging", partitions=1,
                          config={"export.enabled": "true", "export.roll.ms": "300",
                                  "export.retention.ms": str(HOUR_MS)})
    now = int(time.time() * 1000)
    hour = lambda ms: ms - ms % HOUR_MS
    old_base, new_base = hour(now - 3 * HOUR_MS) + 1000, max(hour(now), now - 60_000)  # each within one hour
    old = [(b"old", b"o%d" % i, None, old_base + i) for i in range(100)]
    new = [(b"new", b"n%d" % i, None, new_base + i) for i in range(100)]
    produce(s.bootstrap, "aging", old + new)
    wait_exported(s.admin_url, "aging", {0: 200})
    deadline = time.monotonic() + 20
    while (state := exports(s.admin_url, "aging"))["partitions"][0]["files"] != 1:
        assert time.monotonic() < deadline, f"the file of 3-hour-old records was not deleted: {state}"
        time.sleep(0.2)
    assert state["partitions"][0]["exported_offset"] == 200, state
    con = duck()
    assert con.sql(f'SELECT min("offset"), max("offset"), count(*) FROM {local_scan(s, "aging")}').fetchone() == \
        (100, 199, 100)
    assert [str(f.parts[1]) for f in export_files(export_dir(s, "aging"))] == [f"hr={utc_ms(new_base).hour:02}"]
    status, body = http_json(records_url(s.admin_url, "aging", key="old"))
    assert (status, body["records"]) == (200, []), "records whose files retention deleted are not found"
    # The log is the topic's: all 200 records are still there for consumers.
    assert len(KafkaKit.consume(s.bootstrap, "aging")) == 200


# ---------------------------------------------------------------- backfill (last on `orders`)

def test_backfill_rebuilds_the_exports_with_each_offset_once(orders, floe_bin):
    s = orders.s
    before = exports(s.admin_url, "orders")
    old_files = set(export_files(export_dir(s, "orders")))
    started = time.monotonic()
    res = subprocess.run([str(floe_bin), "indexer", "backfill", "--topic", "orders", "--indexer", s.admin_url],
                         capture_output=True, timeout=150, stdin=subprocess.DEVNULL)
    took = time.monotonic() - started
    out = (res.stdout + res.stderr).decode(errors="replace")
    assert res.returncode == 0, f"backfill exited {res.returncode}: {out[-3000:]}"
    assert out.strip(), "backfill printed no progress"
    assert "\r" not in out, "not a terminal: plain lines, not a redrawn bar"
    print(f"backfill of {ORDERS_N} records in {took:.1f}s; last lines: {out.strip().splitlines()[-3:]}")

    after = wait_exported(s.admin_url, "orders", orders.hw, timeout=30)
    assert after["generation"] > before["generation"], (before["generation"], after["generation"])
    check_layout(export_files(export_dir(s, "orders")), orders.hw)
    con = duck()
    assert_each_offset_once(con, local_scan(s, "orders"), orders.hw)
    want_sum = sum(t[0] for t in (orders.typed(r) for r in orders.rows.values()) if t[0] is not None)
    assert con.sql(f"SELECT sum(id) FROM {local_scan(s, 'orders')}").fetchone()[0] == want_sum
    print(f"files before {len(old_files)}, after {total_files(orders)}")

    # Unknown topic: refused, non-zero exit.
    res = subprocess.run([str(floe_bin), "indexer", "backfill", "--topic", "no-such-topic", "--indexer", s.admin_url],
                         capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode != 0, res.stdout.decode()[-500:]
    status, body = http_json(f"{s.admin_url}/v1/topics/no-such-topic/backfill", method="POST")
    assert status == 404, (status, body)


# ---------------------------------------------------------------- kill -9 while exporting

def test_kill9_while_exporting_leaves_every_offset_exactly_once(standalone_factory):
    from confluent_kafka import Producer

    s = standalone_factory(name="crash", indexer_poll_ms=100)
    topic = "crash"
    KafkaKit.create_topic(s.bootstrap, topic, partitions=2, config={
        "export.enabled": "true", "export.roll.ms": "200", "export.file.bytes": "32768",
        "export.row.group.rows": "500",
        "export.index": json.dumps([{"name": "n", "path": "$.n", "type": "int64"}])})
    stop = threading.Event()
    acked, failed = set(), []

    def on_delivery(err, msg):
        if err is None:
            acked.add(json.loads(msg.value())["n"])
        else:
            failed.append(err)

    def producer_loop():
        # Not idempotent: a retry after a kill may store a message twice; the
        # exports must still hold each *offset* once.
        p = Producer({"bootstrap.servers": s.bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 120000,
                      "reconnect.backoff.max.ms": 500, "enable.idempotence": False})
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, key=f"k{i % 50}", value=json.dumps({"n": i, "pad": "x" * 100}), on_delivery=on_delivery)
            except BufferError:
                p.poll(0.05)
                continue
            i += 1
            if i % 100 == 0:
                p.poll(0)
                time.sleep(0.05)  # about 2000 messages a second
        p.flush(120)

    thread = threading.Thread(target=producer_loop, daemon=True)
    thread.start()
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    kills = []
    try:
        time.sleep(2)
        for _ in range(3):
            time.sleep(rng.uniform(0.3, 1.5))
            # Aim at a moment when a file is being written: an intent is pending.
            pending = False
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and not pending:
                try:
                    status, body = http_json(f"{s.admin_url}/v1/topics/{topic}/exports", timeout=2)
                    pending = status == 200 and any(p["pending"] for p in body["partitions"])
                except OSError:
                    pass
            s.kill9()
            kills.append(pending)
            s.start()
        time.sleep(1.5)
    finally:
        stop.set()
        thread.join(150)
    assert not thread.is_alive(), "the producer did not finish"
    assert not failed, f"{len(failed)} messages not acknowledged: {failed[:3]}"

    state = wait_exported(s.admin_url, topic, timeout=90)
    hw = {p["partition"]: p["high_watermark"] for p in state["partitions"]}
    assert hw == {p: KafkaKit.watermarks(s.bootstrap, topic, p)[1] for p in hw}
    print(f"kill -9 x{len(kills)} (seed {seed}; intent pending at the kill: {kills}); high watermarks {hw}; "
          f"{len(acked)} acknowledged")
    con = duck()
    assert_each_offset_once(con, local_scan(s, topic), hw)
    exported = {n for (n,) in con.sql(f"SELECT DISTINCT n FROM {local_scan(s, topic)}").fetchall()}
    lost = acked - exported
    assert not lost, f"{len(lost)} acknowledged messages are in no export file, e.g. {sorted(lost)[:5]}"
    # What DuckDB's *.parquet glob sees is right; the folder as Spark lists it must be too.
    layout = check_layout(export_files(export_dir(s, topic)), hw)
    assert len(layout) > 6, f"only {len(layout)} files: the kills did not fall among exports"


# ---------------------------------------------------------------- a cluster on S3 (moto)

class Proc:
    """A child process; a `floe` role is given `--ports-file` and `ports` holds
    the addresses it reported (its listeners are on port 0)."""

    def __init__(self, args, log_path, ports_file=False):
        self.log_path = log_path
        self.log = open(log_path, "wb")
        args = [str(a) for a in args]
        ports_path = pathlib.Path(f"{log_path}.ports.json")
        if ports_file:
            args += ["--ports-file", str(ports_path)]
        self.p = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self.ports = read_ports(ports_path, self.p, 60, log_path) if ports_file else None
        except AssertionError:
            self.stop()
            raise

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)
        self.log.close()

    def tail(self, n=30):
        try:
            return "\n".join(pathlib.Path(self.log_path).read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def wait_until(what, check, procs, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            assert p.p.poll() is None, f"{p.log_path.name} exited with {p.p.returncode}:\n{p.tail()}"
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{what} not after {timeout}s;\n" + "\n".join(f"--- {p.log_path.name}\n{p.tail(15)}" for p in procs))


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except urllib.error.HTTPError:
        return False


def test_duckdb_reads_exports_from_s3_through_httpfs(floe_bin, tmp_path, monkeypatch):
    moto_bin = pathlib.Path(sys.executable).parent / "moto_server"
    assert moto_bin.exists(), f"{moto_bin} missing: tests/run.sh installs moto[server]"
    # moto on port 0 prints the port it is bound to.
    procs = [Proc([moto_bin, "-H", "127.0.0.1", "-p", 0], tmp_path / "moto.log")]
    try:
        moto_port = None

        def moto_ready():
            nonlocal moto_port
            if moto_port is None:
                m = re.search(r"Running on http://127\.0\.0\.1:(\d+)", (tmp_path / "moto.log").read_text())
                if not m:
                    return False
                moto_port = int(m.group(1))
            return http_ok(f"http://127.0.0.1:{moto_port}/moto-api/")

        wait_until("moto", moto_ready, procs, timeout=30)
        store = (f"s3=s3://floe?endpoint=http://127.0.0.1:{moto_port}&region=us-east-1&path_style=true"
                 "&access_key_id=minio&secret_access_key=minio123")
        any_port = "127.0.0.1:0"
        procs.append(Proc([floe_bin, "meta", "--id", 1, "--listen", any_port, "--data-dir", tmp_path / "m1",
                           "--init"], tmp_path / "meta.log", ports_file=True))
        meta = procs[-1].ports["meta"]
        procs.append(Proc([floe_bin, "broker", "--id", 1, "--listen", any_port, "--meta", meta,
                           "--store", store, "--admin-listen", any_port], tmp_path / "broker.log", ports_file=True))
        broker_admin = procs[-1].ports["admin"]
        procs.append(Proc([floe_bin, "proxy", "--listen", any_port, "--meta", meta, "--admin-listen", any_port],
                          tmp_path / "proxy.log", ports_file=True))
        kafka, proxy_admin = procs[-1].ports["kafka"], procs[-1].ports["admin"]
        procs.append(Proc([floe_bin, "indexer", "--meta", meta, "--store", store, "--admin-listen", any_port,
                           "--indexer-poll-ms", 200], tmp_path / "indexer.log", ports_file=True))
        indexer_admin = procs[-1].ports["admin"]
        for admin in (broker_admin, proxy_admin):
            wait_until(f"{admin}/readyz", lambda: http_ok(f"http://{admin}/readyz"), procs)

        KafkaKit.create_topic(kafka, "orders", partitions=2, config={
            "export.enabled": "true", "export.roll.ms": "1000",
            "export.index": json.dumps([{"name": "amount", "path": "$.amount", "type": "float64"}])})
        now = int(time.time() * 1000)
        n = 3000
        reports = produce(kafka, "orders", [(f"k{i % 10}".encode(), json.dumps({"amount": i * 0.5}).encode(), None,
                                             now - n + i) for i in range(n)])
        hw = high_watermarks(reports, 2)
        deadline = time.monotonic() + 90
        while True:
            try:
                wait_exported(f"http://{indexer_admin}", "orders", hw, timeout=5)
                break
            except AssertionError:
                for p in procs:
                    assert p.p.poll() is None, f"{p.log_path.name} exited with {p.p.returncode}:\n{p.tail()}"
                if time.monotonic() > deadline:
                    raise AssertionError("exports on S3 did not catch up in 90 s;\n" +
                                         "\n".join(f"--- {p.log_path.name}\n{p.tail(15)}" for p in procs))

        # The documented example, as written but for the server's address.
        ns = run_doc_block("duckdb-s3", tmp_path, monkeypatch, replace={"127.0.0.1:9000": f"127.0.0.1:{moto_port}"})
        assert ns["per_partition"] == [(p, hw[p], hw[p] - 1) for p in sorted(hw) if hw[p]], ns["per_partition"]
        con = ns["con"]
        table = scan("s3://floe/exports/orders/**/*.parquet")
        assert_each_offset_once(con, table, hw)
        assert con.sql(f"SELECT sum(amount) FROM {table}").fetchone()[0] == sum(i * 0.5 for i in range(n))
        files = [f for (f,) in con.sql("SELECT file FROM glob('s3://floe/exports/orders/**')").fetchall()]
        check_layout([pathlib.PurePosixPath(f.split("/exports/orders/", 1)[1]) for f in files], hw)

        # The lookup API of the indexer process reads the same files.
        status, body = http_json(records_url(f"http://{indexer_admin}", "orders", key="k3", limit=1000))
        assert status == 200, (status, body)
        want = sorted(po for po, i in zip(reports, range(n)) if i % 10 == 3)
        assert sorted((r["partition"], r["offset"]) for r in body["records"]) == want
        print(f"S3: {len(files)} files; lookup stats {body['stats']}")

        # A topic that is an Iceberg table on S3, read through the indexer's
        # catalog by pyiceberg and by DuckDB (docs/tables.md).
        from test_tables import catalog_at, iceberg_extension

        KafkaKit.create_topic(kafka, "sales", partitions=2, config={
            "table.format": "iceberg", "export.roll.ms": "500",
            "export.index": json.dumps([{"name": "amount", "path": "$.amount", "type": "float64"}])})
        reports = produce(kafka, "sales", [(None, json.dumps({"amount": i}).encode(), None, now + i)
                                            for i in range(500)])
        hw = high_watermarks(reports, 2)
        s3 = {"s3.endpoint": f"http://127.0.0.1:{moto_port}", "s3.access-key-id": "minio",
              "s3.secret-access-key": "minio123", "s3.region": "us-east-1"}
        cat = catalog_at(f"http://{indexer_admin}/iceberg", **s3)
        deadline, snap, last, covered = time.monotonic() + 90, None, None, {}
        while True:
            try:
                t = cat.load_table(("floe", "sales"))
                snap = t.current_snapshot()
                covered = json.loads(snap.summary.additional_properties["floe.offsets"]) if snap else {}
                if all(covered.get(str(p), 0) >= hw[p] for p in hw):
                    break
            except Exception as e:  # not a table yet
                last = e
            assert time.monotonic() < deadline, f"the table on S3 did not catch up: {covered} {last!r}"
            time.sleep(0.3)
        assert t.metadata_location.startswith("s3://floe/tables/sales/metadata/"), t.metadata_location
        rows = t.scan().to_arrow()
        assert rows.num_rows == 500 and sum(rows.column("amount").to_pylist()) == sum(range(500))
        for f in iceberg_extension():
            con.execute(f"LOAD '{f}'")
        assert con.sql(f"SELECT count(*), sum(amount) FROM iceberg_scan('{t.metadata_location}')").fetchone() == (
            500, sum(range(500)))
    finally:
        for p in reversed(procs):
            p.stop()
