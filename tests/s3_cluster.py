"""A whole Floe cluster on S3 for the scenario tests: real processes on
127.0.0.1 (metadata nodes, brokers, proxies, optionally the indexer) whose
store pool is one or more S3 servers (moto), each behind a TCP fault relay;
load from idempotent acks=all producers that record when each write was
acknowledged; and a check of everything acknowledged against what two
independent clients read back (`consistency.check`).

    cluster = S3Cluster(floe_bin, tmp_path)          # 3 metas, 3 brokers, 2 proxies, 2 endpoints
    create_topic(cluster.bootstrap, "t", 12)
    load = Load(cluster.bootstrap, "t", 12)
    ... cluster.brokers[0].kill9(), cluster.relays[0].set("hang"), ...
    load.stop(); print(load.max_gap(t0, t1)); verify(cluster.bootstrap, [load], "t", 12)

Nothing races for ports: every process listens on port 0 and reports where
it is bound (moto prints it, `floe` writes a ports file, a relay binds before
it is used).
"""

import bisect
import contextlib
import dataclasses
import os
import pathlib
import re
import socket
import struct
import sys
import threading
import time
from collections import defaultdict

import pytest

from consistency import History, Read, Write, check, decode, encode
from floe_cluster import Cluster, Proc, http_ok

confluent_kafka = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402

class Relay:
    """A TCP relay on a port of its own to `127.0.0.1:upstream_port`: the
    fault proxy in front of a store endpoint (or any TCP server).

    Modes (`set`): "pass" forwards; "delay" waits `delay` seconds before
    forwarding each chunk; "hang" accepts connections and holds every byte
    (a server that stopped answering) until the mode changes; "refuse"
    closes every connection, current and new (a server that is gone);
    "reset" does the same with a TCP reset.
    """

    def __init__(self, upstream, listen=("127.0.0.1", 0)):
        # A port on 127.0.0.1, a (host, port), the path of a Unix socket, or a
        # function giving a (host, port) for each new connection.
        self.upstream = upstream if isinstance(upstream, (str, tuple)) or callable(upstream) \
            else ("127.0.0.1", upstream)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(listen)
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.mode = "pass"
        self.delay = 0.0
        self.conns = set()
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def set(self, mode, delay=0.0):
        assert mode in ("pass", "delay", "hang", "refuse", "reset"), mode
        self.mode, self.delay = mode, delay
        if mode in ("refuse", "reset"):
            with self.lock:
                conns, self.conns = self.conns, set()
            for c in conns:
                self._close(c, reset=mode == "reset")

    def close(self):
        self.closed = True
        self.set("refuse")
        self._close(self.sock)

    @staticmethod
    def _close(s, reset=False):
        if reset:
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        else:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            s.close()
        except OSError:
            pass

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.mode in ("refuse", "reset"):
                self._close(c, reset=self.mode == "reset")
                continue
            try:
                u = self._connect()
            except OSError:
                self._close(c)
                continue
            with self.lock:
                self.conns.update((c, u))
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c), daemon=True).start()

    def _connect(self):
        if isinstance(self.upstream, str):
            u = socket.socket(socket.AF_UNIX)
            u.settimeout(5)
            u.connect(self.upstream)
        else:
            target = self.upstream() if callable(self.upstream) else self.upstream
            u = socket.create_connection(target, timeout=5)
        u.settimeout(None)
        return u

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                while self.mode == "hang" and not self.closed:
                    time.sleep(0.02)
                if not data or self.mode in ("refuse", "reset"):
                    break
                if self.mode == "delay":
                    time.sleep(self.delay)
                    if self.mode in ("refuse", "reset"):
                        break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self.lock:
                self.conns.discard(src)
                self.conns.discard(dst)
            self._close(src)
            self._close(dst)


class Moto:
    """moto's S3 server on port 0 (it prints the port it is bound to), or on
    `host`:`port` when given, which makes a bucket on the first write to it."""

    key, secret = "floe", "floe-secret"

    def __init__(self, log_path, timeout=30, host="127.0.0.1", port=0):
        moto_bin = pathlib.Path(sys.executable).parent / "moto_server"
        assert moto_bin.exists(), f"{moto_bin} missing: tests/run.sh installs moto[server]"
        self.host = host
        self.proc = Proc([moto_bin, "-H", host, "-p", port], log_path)
        self.port = None
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.p.poll() is None, f"moto exited:\n{self.proc.tail()}"
            m = re.search(rf"Running on http://{re.escape(host)}:(\d+)", pathlib.Path(log_path).read_text(errors="replace"))
            if m and http_ok(f"http://{host}:{m.group(1)}/moto-api/"):
                self.port = int(m.group(1))
                return
            time.sleep(0.1)
        self.proc.kill9()
        raise AssertionError(f"moto not ready after {timeout}s:\n{self.proc.tail()}")

    @property
    def upstream(self):
        """Where a relay in front of it connects."""
        return self.port

    def url(self, port=None, bucket="floe"):
        """The `s3://` store URL of `bucket` here, through `port` if given (a relay)."""
        return (f"s3://{bucket}?endpoint=http://{self.host}:{port or self.port}&region=us-east-1"
                f"&path_style=true&access_key_id={self.key}&secret_access_key={self.secret}")

    def client(self):
        import boto3
        return boto3.client("s3", endpoint_url=f"http://{self.host}:{self.port}", region_name="us-east-1",
                            aws_access_key_id=self.key, aws_secret_access_key=self.secret)

    def stop(self):
        self.proc.stop()


class Garage:
    """Garage, an S3 server built for production (`cargo install garage`), as
    one node in a folder of its own: its S3 API on a Unix socket (no port to
    race for; `Relay`s in front of it give TCP ports), one bucket (`floe`)
    and one key, made at its first start. Restarted on the same folder, it
    keeps its data."""

    key, secret = "GK" + "f10e" * 6, "5ec7" * 16
    host = "127.0.0.1"  # of the relays in front of it

    def __init__(self, garage_bin, folder, timeout=60):
        d = pathlib.Path(folder)
        d.mkdir(parents=True, exist_ok=True)
        self.socket = str(d / "s3.sock")
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        cfg = d / "garage.toml"
        cfg.write_text(f"""metadata_dir = "{d}/meta"
data_dir = "{d}/data"
db_engine = "lmdb"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:0"
rpc_secret = "{os.urandom(32).hex()}"

[s3_api]
s3_region = "us-east-1"
api_bind_addr = "{self.socket}"
""")
        env = dict(os.environ, RUST_LOG="garage=info", GARAGE_DEFAULT_ACCESS_KEY=self.key,
                   GARAGE_DEFAULT_SECRET_KEY=self.secret, GARAGE_DEFAULT_BUCKET="floe")
        self.proc = Proc([garage_bin, "-c", cfg, "server", "--single-node", "--default-bucket"],
                         d / "garage.log", env=env)
        # Its own relay for listing the bucket (the test's relays may be faulted).
        self.admin_relay = None
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.p.poll() is None, f"garage exited:\n{self.proc.tail()}"
            if os.path.exists(self.socket) and self._bucket_ready():
                return
            time.sleep(0.2)
        self.stop()
        raise AssertionError(f"garage not ready after {timeout}s:\n{self.proc.tail()}")

    def _bucket_ready(self):
        try:
            if self.admin_relay is None:
                self.admin_relay = Relay(self.socket)
            self.client().head_bucket(Bucket="floe")
            return True
        except Exception:
            return False

    @property
    def upstream(self):
        return self.socket

    @property
    def port(self):
        """A port that always reaches the server (for listing, past the test's relays)."""
        return self.admin_relay.port

    def client(self):
        import boto3
        return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.admin_relay.port}", region_name="us-east-1",
                            aws_access_key_id=self.key, aws_secret_access_key=self.secret)

    def url(self, port=None, bucket="floe"):
        return (f"s3://{bucket}?endpoint=http://{self.host}:{port or self.port}&region=us-east-1"
                f"&path_style=true&access_key_id={self.key}&secret_access_key={self.secret}")

    def stop(self):
        self.proc.stop()
        if self.admin_relay:
            self.admin_relay.close()


def garage_bin():
    """The Garage binary: $FLOE_GARAGE_BIN, or the one tests/run.sh's long mode
    installs into ~/.cache/floe-bench/garage (the benchmarks' cache)."""
    path = os.environ.get("FLOE_GARAGE_BIN") or os.path.expanduser("~/.cache/floe-bench/garage/bin/garage")
    return path if os.path.exists(path) else None


def s3_server():
    """Which S3 server the cluster scenarios run on: $FLOE_S3_SERVER, `moto`
    (the default) or `garage`."""
    name = os.environ.get("FLOE_S3_SERVER", "moto")
    assert name in ("moto", "garage"), f"FLOE_S3_SERVER={name}: moto or garage"
    if name == "garage" and garage_bin() is None:
        pytest.fail("FLOE_S3_SERVER=garage but no Garage binary: set FLOE_GARAGE_BIN or run "
                    "`FLOE_LONG=1 bash tests/run.sh`, which installs it")
    return name


def start_s3_server(tmp_path, i):
    """Endpoint `i`'s S3 server in `tmp_path`: moto, or Garage with
    FLOE_S3_SERVER=garage (see `s3_server`)."""
    if s3_server() == "garage":
        return Garage(garage_bin(), pathlib.Path(tmp_path) / f"garage{i}")
    return Moto(pathlib.Path(tmp_path) / f"moto{i}.log")


class S3Cluster(Cluster):
    """A cluster whose store pool is `endpoints` S3 servers (moto, or Garage
    with FLOE_S3_SERVER=garage), each behind a `Relay` (`relays[i]` in front
    of endpoint `e{i}`): 3 metadata nodes, 3 brokers and 2 proxies by
    default, with the brokers' default lease. `objects()` lists the store
    (straight from the servers, past the relays)."""

    def __init__(self, floe_bin, tmp_path, metas=3, brokers=3, proxies=2, indexer=False, endpoints=2,
                 broker_flags=(), proxy_flags=(), indexer_flags=(), lease_ms=None):
        tmp_path = pathlib.Path(tmp_path)
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.servers, self.relays = [], []
        try:
            for i in range(endpoints):
                self.servers.append(start_s3_server(tmp_path, i))
                self.relays.append(Relay(self.servers[-1].upstream))
            stores = [f"e{i}={m.url(r.port)}" for i, (m, r) in enumerate(zip(self.servers, self.relays))]
            super().__init__(floe_bin, tmp_path, metas=metas, brokers=brokers, lease_ms=lease_ms,
                             broker_flags=broker_flags, proxy_flags=proxy_flags, proxies=proxies,
                             stores=stores, indexer=indexer, indexer_flags=indexer_flags)
        except BaseException:
            self._stop_servers()
            raise

    def objects(self, prefix=""):
        """{(endpoint id, key): size} of every object in every endpoint's bucket."""
        out = {}
        for i, m in enumerate(self.servers):
            s3 = m.client()
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket="floe", Prefix=prefix):
                for o in page.get("Contents", []):
                    out[(f"e{i}", o["Key"])] = o["Size"]
        return out

    def _stop_servers(self):
        for r in self.relays:
            r.close()
        for m in self.servers:
            m.stop()

    def stop(self):
        try:
            super().stop()
        finally:
            self._stop_servers()


def create_topic(bootstrap, topic, partitions, timeout=60, **config):
    """Creates `topic` and waits until every partition has a leader."""
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, partitions, 1, config=config)])[topic].result(timeout)
    wait_leaders(bootstrap, topic, partitions, timeout)


def wait_leaders(bootstrap, topic, partitions, timeout=90):
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            md = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
            if md is not None and md.error is None and len(md.partitions) == partitions \
                    and all(p.leader >= 0 for p in md.partitions.values()):
                return
        except confluent_kafka.KafkaException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{topic} has partitions without a leader after {timeout}s")


def debug_config(pid):
    """With FLOE_SOAK_CLIENT_LOGS=<dir>, each producer's librdkafka log of its
    idempotence state (epochs, sequences, retries) goes to <dir>/producer-<id>.log;
    FLOE_CLIENT_DEBUG names other librdkafka debug contexts (`eos,protocol,msg`
    adds each batch sent and delivered, per partition)."""
    where = os.environ.get("FLOE_SOAK_CLIENT_LOGS")
    if not where:
        return {}
    import logging
    log = logging.getLogger(f"producer-{pid}")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    os.makedirs(where, exist_ok=True)
    h = logging.FileHandler(os.path.join(where, f"producer-{pid}.log"))
    h.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    log.addHandler(h)
    return {"debug": os.environ.get("FLOE_CLIENT_DEBUG", "eos,protocol"), "logger": log}


class Producer(threading.Thread):
    """Writes `encode(pid, seq)` for seq = 0, 1, 2, … round-robin over the
    partitions of `topic` (at `rate` records a second; 0: as fast as it can)
    until `stop` is set, then flushes. Records every delivery report: the
    acknowledged writes with when they were acknowledged and how long they
    took, the failed ones, and fatal errors."""

    def __init__(self, pid, bootstrap, topic, partitions, stop, rate=0, **conf):
        super().__init__(name=f"producer-{pid}", daemon=True)
        self.pid, self.topic, self.partitions, self.rate = pid, topic, partitions, rate
        self.stop_event = stop
        self.acked = []  # [Write]
        self.latency = []  # [(acknowledged at, seconds from produce() to acknowledgement)]
        self.failed = {}  # seq -> error
        self.fatal = []
        self.sent = 0
        self.unflushed = 0
        self._sent_at = {}
        self.p = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "client.id": f"load-{pid}",
            "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            # Long enough to ride through every fault: a record is given up
            # (not acknowledged) only if the cluster stays down this long.
            "message.timeout.ms": 180_000, "retry.backoff.ms": 100,
            "queue.buffering.max.messages": 20_000,
            "error_cb": self.on_error,
            **debug_config(pid), **conf,
        })

    def on_error(self, err):
        if err.fatal():
            self.fatal.append(str(err))

    def on_delivery(self, err, msg):
        now = time.time()
        pid, seq = decode(msg.value())
        sent = self._sent_at.pop(seq, now)
        if err is not None:
            self.failed[seq] = str(err)
        else:
            self.acked.append(Write(pid, seq, msg.partition(), msg.offset(), now))
            self.latency.append((now, now - sent))

    def run(self):
        started = time.monotonic()
        seq = 0
        while not self.stop_event.is_set() and not self.fatal:
            if self.rate > 0:
                ahead = seq / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    self.p.poll(min(ahead, 0.05))
                    continue
            try:
                self._sent_at[seq] = time.time()
                self.p.produce(self.topic, value=encode(self.pid, seq), partition=seq % self.partitions,
                               on_delivery=self.on_delivery)
            except BufferError:
                self.p.poll(0.05)
                continue
            seq += 1
            if seq % 50 == 0:
                self.p.poll(0)
        self.sent = seq
        self.unflushed = self.p.flush(200)
        self.p = None  # closes its connections


class Load:
    """`producers` idempotent acks=all producers on `topic`, each at `rate`
    records a second, started at once; `stop()` ends them and waits for
    every outstanding delivery report."""

    _next_pid = 0

    def __init__(self, bootstrap, topic, partitions, rate=500, producers=1, **conf):
        self.topic, self.partitions = topic, partitions
        self.stop_event = threading.Event()
        self.producers = []
        for _ in range(producers):
            Load._next_pid += 1
            self.producers.append(Producer(Load._next_pid, bootstrap, topic, partitions, self.stop_event,
                                           rate=rate, **conf))
        self.started = time.time()
        for p in self.producers:
            p.start()

    @property
    def acked(self):
        return [w for p in self.producers for w in p.acked]

    @property
    def errors(self):
        """What the application saw fail: failed deliveries, fatal errors, records never flushed."""
        out = []
        for p in self.producers:
            out += [f"producer {p.pid} seq {s}: {e}" for s, e in sorted(p.failed.items())]
            out += [f"producer {p.pid}: fatal {e}" for e in p.fatal]
            if p.unflushed:
                out.append(f"producer {p.pid}: {p.unflushed} records never delivered")
        return out

    def wait_acked(self, n, timeout=60, also=()):
        """Waits until `n` more writes than now are acknowledged; `also`: roles that must stay alive."""
        target = len(self.acked) + n
        deadline = time.time() + timeout
        while len(self.acked) < target:
            for r in also:
                assert r.alive(), f"{r.name} exited:\n{r.tail()}"
            assert time.time() < deadline, f"{len(self.acked)} of {target} acknowledged after {timeout}s"
            assert not any(p.fatal for p in self.producers), self.errors
            time.sleep(0.05)

    def stop(self, timeout=240):
        """Stops the producers, waits for their last delivery reports, and
        returns when it was asked to (the end of a measured window)."""
        stopped_at = time.time()
        self.stop_event.set()
        for p in self.producers:
            p.join(timeout)
            assert not p.is_alive(), f"producer {p.pid} did not finish in {timeout}s"
        return stopped_at

    def max_gap(self, since, until):
        """{partition: the longest time (s) within [since, until] in which it took no acknowledged write}."""
        times = {p: [since] for p in range(self.partitions)}
        for w in self.acked:
            if since <= w.at <= until:
                times[w.partition].append(w.at)
        out = {}
        for p, ts in times.items():
            ts = sorted(ts) + [until]
            out[p] = max(b - a for a, b in zip(ts, ts[1:]))
        return out

    def latency_quantile(self, q, since=0.0, until=float("inf")):
        """The `q` quantile (0..1) of produce-to-acknowledgement times of writes acknowledged in the window."""
        lat = sorted(d for p in self.producers for (at, d) in p.latency if since <= at <= until)
        if not lat:
            return None
        return lat[min(len(lat) - 1, int(q * len(lat)))]

    def history(self, reads):
        unacked = set()
        for p in self.producers:
            got = {w.seq for w in p.acked}
            unacked |= {(p.pid, s) for s in range(p.sent) if s not in got}
        return History(acked=self.acked, unacked=unacked, reads=reads)


def high_watermarks(consumer, topic, partitions, deadline):
    """{partition: high watermark} of `topic`, asked of each partition's
    owner; a partition between owners (just after a fault) answers
    NOT_LEADER_FOR_PARTITION for a moment and is asked again until
    `deadline` (time.monotonic())."""
    ends = {}
    for p in range(partitions):
        while p not in ends:
            try:
                _, ends[p] = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p),
                                                            timeout=30, cached=False)
            except confluent_kafka.KafkaException:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
    return ends


def read_confluent(bootstrap, topic, partitions, timeout=120):
    """Every record of every partition up to its high watermark, in fetch
    order, and the high watermarks."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        deadline = time.monotonic() + timeout
        ends = high_watermarks(c, topic, partitions, deadline)
        c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                  for p in range(partitions)])
        out, pos = [], {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(pos[p] < ends[p] for p in pos):
            assert time.monotonic() < deadline, f"confluent reader: at {pos} of {ends} after {timeout}s"
            for m in c.consume(num_messages=5000, timeout=0.5):
                if m.error() or m.offset() >= ends[m.partition()]:
                    continue
                rec = decode(m.value()) or (-1, -1)
                out.append(Read(m.partition(), m.offset(), *rec))
                pos[m.partition()] = m.offset() + 1
        return out, ends
    finally:
        c.close()


class _SessionsOf:
    """kafka-python's fetched records of one partition, noting each v2
    batch's producer id, epoch and base sequence as the consumer unpacks
    it: {(partition, base offset): (last offset, producer id, epoch, base
    sequence)}. Client code never sees them otherwise."""

    def __init__(self, records, partition, into):
        self._records, self._partition, self._into = records, partition, into

    def next_batch(self, *args, **kwargs):
        b = self._records.next_batch(*args, **kwargs)
        if b is not None and getattr(b, "magic", 0) == 2 and b.producer_id >= 0:
            self._into[(self._partition, b.base_offset)] = (b.last_offset, b.producer_id, b.producer_epoch,
                                                            b.base_sequence)
        return b

    def __getattr__(self, name):
        return getattr(self._records, name)


@contextlib.contextmanager
def batch_sessions():
    """While open, kafka-python consumers note the producer session of each
    batch they unpack; yields the dict they fill (see `_SessionsOf`). If
    kafka-python's internals differ, nothing is noted (a reader then reports
    no sessions, and the checker treats every double as a duplicate)."""
    from kafka.consumer.fetcher import Fetcher

    into = {}
    holder = getattr(Fetcher, "PartitionRecords", None)
    original = getattr(holder, "_unpack_records", None)
    if original is None:
        yield into
        return

    def unpack(self, tp, records, *args, **kwargs):
        return original(self, tp, _SessionsOf(records, tp.partition, into), *args, **kwargs)

    holder._unpack_records = unpack
    try:
        yield into
    finally:
        holder._unpack_records = original


def session_at(batches, offset):
    """(producer id, epoch, sequence) of the record at `offset` from the
    noted batches (a sorted list of (base offset, (last, pid, epoch, base
    sequence))) of `partition`; None when not noted."""
    i = bisect.bisect_right(batches, (offset, (float("inf"),))) - 1
    if i < 0:
        return None
    base, (last, pid, epoch, seq) = batches[i]
    if offset > last or seq < 0:
        return None
    return (pid, epoch, seq + (offset - base))


def read_kafka_python(bootstrap, topic, ends, timeout=120):
    """The same with kafka-python, a client that shares no code with the
    first. Each record carries the producer session it was stored under
    (`Read.session`), for telling a client's re-send from a duplicate."""
    with batch_sessions() as noted:
        out = _read_kafka_python(bootstrap, topic, ends, timeout)
    per = defaultdict(list)
    for (p, base), rest in noted.items():
        per[p].append((base, rest))
    for p in per:
        per[p].sort()
    return [dataclasses.replace(r, session=session_at(per[r.partition], r.offset)) for r in out]


def _read_kafka_python(bootstrap, topic, ends, timeout):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", request_timeout_ms=30000, max_partition_fetch_bytes=4 << 20)
    try:
        tps = [TopicPartition(topic, p) for p in ends]
        c.assign(tps)
        c.seek_to_beginning()
        out, pos = [], {p: 0 for p in ends}
        deadline = time.monotonic() + timeout
        while any(pos[p] < ends[p] for p in pos):
            assert time.monotonic() < deadline, f"kafka-python reader: at {pos} of {ends} after {timeout}s"
            for tp, records in c.poll(timeout_ms=500, max_records=5000).items():
                for r in records:
                    if r.offset >= ends[tp.partition]:
                        continue
                    rec = decode(r.value) or (-1, -1)
                    out.append(Read(tp.partition, r.offset, *rec))
                    pos[tp.partition] = r.offset + 1
        return out
    finally:
        c.close()


def verify(bootstrap, loads, topic, partitions, timeout=120):
    """Checks that no error reached the loads' application, then reads
    `topic` back with two clients and checks every load's history: nothing
    acknowledged lost or misplaced, nothing duplicated, offsets strictly
    increasing, both readers agree. Returns the report."""
    for load in loads:
        assert not load.errors, load.errors[:5]
    first, ends = read_confluent(bootstrap, topic, partitions, timeout)
    second = read_kafka_python(bootstrap, topic, ends, timeout)
    acked, unacked = [], set()
    for load in loads:
        h = load.history({})
        acked += h.acked
        unacked |= h.unacked
    report = check(History(acked=acked, unacked=unacked, reads={"confluent": first, "kafka-python": second}))
    assert report.ok, report.summary()
    return report


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2) if xs else None


def repeats():
    """How many times a scenario runs: 1 in CI, 5 with FLOE_LONG=1 (medians for the docs)."""
    return 5 if os.environ.get("FLOE_LONG") == "1" else 1
