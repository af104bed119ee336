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

import os
import pathlib
import re
import socket
import struct
import sys
import threading
import time

import pytest

from consistency import History, Read, Write, check, decode, encode
from floe_cluster import Cluster, Proc, http_ok

confluent_kafka = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402

ACCESS = "access_key_id=floe&secret_access_key=floe-secret"


class Relay:
    """A TCP relay on a port of its own to `127.0.0.1:upstream_port`: the
    fault proxy in front of a store endpoint (or any TCP server).

    Modes (`set`): "pass" forwards; "delay" waits `delay` seconds before
    forwarding each chunk; "hang" accepts connections and holds every byte
    (a server that stopped answering) until the mode changes; "refuse"
    closes every connection, current and new (a server that is gone);
    "reset" does the same with a TCP reset.
    """

    def __init__(self, upstream_port):
        self.upstream = ("127.0.0.1", upstream_port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
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
                u = socket.create_connection(self.upstream, timeout=5)
                u.settimeout(None)
            except OSError:
                self._close(c)
                continue
            with self.lock:
                self.conns.update((c, u))
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c), daemon=True).start()

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
    """moto's S3 server on port 0 (it prints the port it is bound to)."""

    def __init__(self, log_path, timeout=30):
        moto_bin = pathlib.Path(sys.executable).parent / "moto_server"
        assert moto_bin.exists(), f"{moto_bin} missing: tests/run.sh installs moto[server]"
        self.proc = Proc([moto_bin, "-H", "127.0.0.1", "-p", 0], log_path)
        self.port = None
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.p.poll() is None, f"moto exited:\n{self.proc.tail()}"
            m = re.search(r"Running on http://127\.0\.0\.1:(\d+)", pathlib.Path(log_path).read_text(errors="replace"))
            if m and http_ok(f"http://127.0.0.1:{m.group(1)}/moto-api/"):
                self.port = int(m.group(1))
                return
            time.sleep(0.1)
        self.proc.kill9()
        raise AssertionError(f"moto not ready after {timeout}s:\n{self.proc.tail()}")

    def url(self, port=None, bucket="floe"):
        """The `s3://` store URL of `bucket` here, through `port` if given (a relay)."""
        return (f"s3://{bucket}?endpoint=http://127.0.0.1:{port or self.port}&region=us-east-1"
                f"&path_style=true&{ACCESS}")

    def stop(self):
        self.proc.stop()


class S3Cluster(Cluster):
    """A cluster whose store pool is `endpoints` moto servers, each behind a
    `Relay` (`relays[i]` in front of endpoint `e{i}`): 3 metadata nodes, 3
    brokers and 2 proxies by default, with the brokers' default lease.
    `objects()` lists the store (straight from the servers, past the relays)."""

    def __init__(self, floe_bin, tmp_path, metas=3, brokers=3, proxies=2, indexer=False, endpoints=2,
                 broker_flags=(), proxy_flags=(), indexer_flags=(), lease_ms=None):
        tmp_path = pathlib.Path(tmp_path)
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.motos, self.relays = [], []
        try:
            for i in range(endpoints):
                self.motos.append(Moto(tmp_path / f"moto{i}.log"))
                self.relays.append(Relay(self.motos[-1].port))
            stores = [f"e{i}={m.url(r.port)}" for i, (m, r) in enumerate(zip(self.motos, self.relays))]
            super().__init__(floe_bin, tmp_path, metas=metas, brokers=brokers, lease_ms=lease_ms,
                             broker_flags=broker_flags, proxy_flags=proxy_flags, proxies=proxies,
                             stores=stores, indexer=indexer, indexer_flags=indexer_flags)
        except BaseException:
            self._stop_servers()
            raise

    def objects(self, prefix=""):
        """{(endpoint id, key): size} of every object in every endpoint's bucket."""
        import boto3

        out = {}
        for i, m in enumerate(self.motos):
            s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{m.port}", region_name="us-east-1",
                              aws_access_key_id="floe", aws_secret_access_key="floe-secret")
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket="floe", Prefix=prefix):
                for o in page.get("Contents", []):
                    out[(f"e{i}", o["Key"])] = o["Size"]
        return out

    def _stop_servers(self):
        for r in self.relays:
            r.close()
        for m in self.motos:
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
    idempotence state (epochs, sequences, retries) goes to <dir>/producer-<id>.log."""
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
    return {"debug": "eos,protocol", "logger": log}


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
        self.stop_event.set()
        for p in self.producers:
            p.join(timeout)
            assert not p.is_alive(), f"producer {p.pid} did not finish in {timeout}s"

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


def read_confluent(bootstrap, topic, partitions, timeout=120):
    """Every record of every partition up to its high watermark, in fetch
    order, and the high watermarks."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {}
        for p in range(partitions):
            _, ends[p] = c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=30,
                                                 cached=False)
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


def read_kafka_python(bootstrap, topic, ends, timeout=120):
    """The same with kafka-python, a client that shares no code with the first."""
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
    """Reads `topic` back with two clients and checks every load's history:
    nothing acknowledged lost or misplaced, nothing duplicated, offsets
    strictly increasing, both readers agree. Returns the report."""
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
