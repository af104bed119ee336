#!/usr/bin/env python3
"""Scale figures (issue 40, "100,000 partitions"): what a Floe cluster costs
per partition, per connection and per group member, and how long its
recoveries take, at 10,000 and 100,000 partitions. A benchmark, not a test:
it prints and writes figures, it asserts nothing about them.

The cluster: 3 metadata nodes (127.0.0.1-3), 2 brokers (127.0.0.4-5) on one
local-folder store they share, 1 proxy (127.0.0.6), every listener on port 0
(addresses read from the `--ports-file`s), started and stopped by pid.

    FLOE_BIN=target/release/floe .venv/bin/python bench/scale.py --partitions 10000 --rounds 100
    FLOE_BIN=… .venv/bin/python bench/scale.py --partitions 100000 --only sizes,metadata
    FLOE_BIN=… .venv/bin/python bench/scale.py --quick          # 200 partitions, under 2 minutes

Phases (`--only`, comma-separated; all by default, in this order):

- `sizes`: creates `--topics` topics of `--partitions` partitions in all
  (timed), then `--rounds` rounds of one record to every partition, each
  round acknowledged (acks=all: flushed and committed) before the next, so a
  round adds at most one index entry per partition. Every `--sample-every`
  rounds, and after `--settle` seconds at the end (a compaction interval):
  index entries per partition (a sample of `--index-sample` partitions read
  from the metadata API's PartitionIndex), objects in the store folder, each
  metadata node's RSS, `raft-log.redb` and `state/snapshot.bin`, the
  brokers' RSS. A week of low-rate writes cannot run in real time: project
  entries per partition from entries against rounds (one round = one flush
  that wrote to every partition).
- `metadata`: a Metadata request v12 for every topic (null topics), raw over
  a socket (time, answer bytes, partitions with a leader) and confluent-kafka
  `list_topics`; the metadata API's ListTopics and the cluster view that
  every broker and proxy watches (bytes).
- `connections`: `--connections` idle Kafka connections to the proxy (each
  sends ApiVersions), from 127.0.1.x (at most 900 per address, below the
  proxy's per-address limit); the proxy's RSS before and after.
- `members`: `--groups` consumer groups of `--members-per-group` members
  (KIP-848 ConsumerGroupHeartbeat v1, encoded here) on a topic of
  `--members-per-group` partitions; brokers' and proxy's RSS before/after.
- `takeover`: `kill -9` of broker 2; a producer sends one record to each of
  its partitions (read from the metadata API) at once and again after each
  failed delivery: the time until each has an acknowledged write sent after
  the kill, beside the controller's round from the metadata leader's log
  (`controller command=…` lines) and the survivor's `took partition over`
  lines.
- `restart`: every process stopped (SIGTERM, at once), all started again on
  their data and ports: the time until every partition has taken a write.

Environment: `FLOE_BIN` (else target/release/floe), `FLOE_SCALE_BROKER_ARGS`
(extra broker flags, shell words, e.g. `--wal-compaction-entries 64`),
`FLOE_SCALE_PROXY_ARGS`, `RUST_LOG` (default: warn, and info for the
metadata nodes' and brokers' own lines the phases read).

Output in `--out` (default bench/results/scale): `results.json`,
`results.md`, `samples.jsonl` (every 5 s: each process's RSS and CPU), and
the processes' logs in `raw/`. Each phase is bounded in time; a phase that
fails is recorded with the processes' last log lines and the run goes on
while the cluster lives. The processes' data is in `--work` (a temporary
folder, removed at the end unless `--keep`).
"""

import argparse
import asyncio
import collections
import contextlib
import datetime
import http.client
import json
import os
import pathlib
import re
import resource
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from compare import Proc, cpu_seconds, http_ok, log, machine, read_ports, wait_until  # noqa: E402

META_HOSTS = {1: "127.0.0.1", 2: "127.0.0.2", 3: "127.0.0.3"}
BROKER_HOSTS = {1: "127.0.0.4", 2: "127.0.0.5"}
PROXY_HOST = "127.0.0.6"
MIB = 1 << 20
ANSI = re.compile(r"\x1b\[[0-9;]*m")
PHASES = ("sizes", "metadata", "connections", "members", "takeover", "restart")


# ---------------------------------------------------------------- /proc and files

def proc_status(pid, field):
    """A `/proc/PID/status` field in KiB (VmRSS, VmHWM), 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_mib(proc):
    return round(proc_status(proc.pid, "VmRSS") / 1024, 1) if proc and proc.alive() else None


def open_fds(pid):
    with contextlib.suppress(OSError):
        return len(os.listdir(f"/proc/{pid}/fd"))
    return None


def file_size(path):
    with contextlib.suppress(OSError):
        return path.stat().st_size
    return None


def folder_objects(path):
    """(files, bytes) under `path`."""
    n = size = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            n += 1
            with contextlib.suppress(OSError):
                size += os.stat(os.path.join(dirpath, name)).st_size
    return n, size


def log_time(line):
    """The UTC time (epoch seconds) at the start of a log line, or None."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z", line)
    if not m:
        return None
    return datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()


def log_lines_since(path, since, needle):
    """[(time, line)] of the lines of log `path` holding `needle`, at or after `since`."""
    out = []
    with open(path, "rb") as f:
        for raw in f:
            if needle.encode() not in raw:
                continue
            line = ANSI.sub("", raw.decode(errors="replace"))
            t = log_time(line)
            if t is not None and t >= since:
                out.append((t, line))
    return out


# ---------------------------------------------------------------- protobuf (the metadata API)

def pb_varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_len(field, data):
    return pb_varint(field << 3 | 2) + pb_varint(len(data)) + data


def pb_uint(field, v):
    return pb_varint(field << 3) + pb_varint(v) if v else b""


def pb_fields(b):
    """(field, value) of a protobuf message: ints for varints, bytes otherwise."""
    i, n = 0, len(b)
    while i < n:
        key = shift = 0
        while True:
            x = b[i]
            i += 1
            key |= (x & 0x7F) << shift
            shift += 7
            if x < 0x80:
                break
        f, wt = key >> 3, key & 7
        if wt == 0:
            v = shift = 0
            while True:
                x = b[i]
                i += 1
                v |= (x & 0x7F) << shift
                shift += 7
                if x < 0x80:
                    break
        elif wt == 2:
            ln = shift = 0
            while True:
                x = b[i]
                i += 1
                ln |= (x & 0x7F) << shift
                shift += 7
                if x < 0x80:
                    break
            v = b[i:i + ln]
            i += ln
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"protobuf wire type {wt}")
        yield f, v


class MetaApi:
    """POSTs protobuf bodies to the metadata API (`/v1/…`), to the node that
    answers (the leader, for the routes that need it)."""

    def __init__(self, addrs):
        self.addrs = list(addrs)
        self.conns = {}
        self.first = 0

    def call(self, path, body=b"", timeout=60, retry_for=60):
        """The answer of whichever node serves `path`, trying each node in
        turn for up to `retry_for` seconds (a leader election, a node busy
        past its deadline)."""
        last = None
        deadline = time.monotonic() + retry_for
        k = -1
        while True:
            k += 1
            if k >= len(self.addrs) and time.monotonic() > deadline:
                break
            i = (self.first + k) % len(self.addrs)
            addr = self.addrs[i]
            try:
                c = self.conns.get(addr)
                if c is None:
                    host, port = addr.rsplit(":", 1)
                    c = self.conns[addr] = http.client.HTTPConnection(host, int(port), timeout=timeout)
                c.request("POST", path, body, {"content-type": "application/x-protobuf"})
                r = c.getresponse()
                data = r.read()
            except (OSError, http.client.HTTPException) as e:
                self.conns.pop(addr, None)
                last = repr(e)
                time.sleep(min(1.0, 0.05 * (k + 1)))
                continue
            if r.status == 200:
                self.first = i
                return data
            last = f"{addr}{path}: HTTP {r.status} {data[:200]!r}"
            time.sleep(min(1.0, 0.05 * (k + 1)))
        raise RuntimeError(f"metadata API {path}: {last}")

    def list_topics(self):
        """({name: (topic id, {partition: owner})}, answer bytes, seconds), from
        the cluster view (a watch from revision 0; ListTopics has no partitions)."""
        t0 = time.monotonic()
        data = self.call("/v1/watch", pb_uint(2, 1))
        secs = time.monotonic() - t0
        topics = {}
        for f, t in pb_fields(data):
            if f != 3:
                continue
            name = tid = None
            parts = {}
            for g, v in pb_fields(t):
                if g == 1:
                    name = bytes(v).decode()
                elif g == 2:
                    tid = bytes(v).decode()
                elif g == 5:
                    p = owner = 0
                    for h, w in pb_fields(v):
                        if h == 1:
                            p = w
                        elif h == 2:
                            owner = w
                    parts[p] = owner
            topics[name] = (tid, parts)
        return topics, len(data), secs

    def index_entries(self, topic_id, partition):
        """(entries in the partition's committed index, answer bytes)."""
        req = pb_len(1, pb_len(1, topic_id.encode()) + pb_uint(2, partition))
        data = self.call("/v1/partitions/index", req)
        return sum(1 for f, _ in pb_fields(data) if f == 2), len(data)

    def list_topics_bytes(self):
        """(bytes, seconds) of a ListTopics answer (topics and configs, no partitions)."""
        t0 = time.monotonic()
        data = self.call("/v1/topics/list")
        return len(data), time.monotonic() - t0

    def close(self):
        for c in self.conns.values():
            c.close()
        self.conns.clear()


# ---------------------------------------------------------------- Kafka wire (by hand)

def uvarint(n):
    return pb_varint(n)


def compact_str(s):
    if s is None:
        return b"\x00"
    b = s.encode()
    return uvarint(len(b) + 1) + b


def request(api_key, version, corr, body, flexible):
    """A request frame, header v2 (`flexible`) or v1."""
    cid = b"floe-scale"
    hdr = struct.pack(">hhih", api_key, version, corr, len(cid)) + cid + (b"\x00" if flexible else b"")
    return struct.pack(">i", len(hdr) + len(body)) + hdr + body


API_VERSIONS_V3 = compact_str("floe-scale") + compact_str("1") + b"\x00"


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("closed by the server")
        buf += chunk
    return bytes(buf)


def recv_frame(sock):
    (n,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, n)


class Reader:
    """Reads Kafka's wire types from a response body."""

    def __init__(self, b, i=0):
        self.b, self.i = b, i

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.i)
        self.i += struct.calcsize(fmt)
        return v[0]

    def uvarint(self):
        n = shift = 0
        while True:
            x = self.b[self.i]
            self.i += 1
            n |= (x & 0x7F) << shift
            shift += 7
            if x < 0x80:
                return n

    def compact_str(self):
        n = self.uvarint()
        if n == 0:
            return None
        s = self.b[self.i:self.i + n - 1]
        self.i += n - 1
        return s.decode(errors="replace")

    def tagged(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.i += self.uvarint()

    def int32_array(self):
        n = self.uvarint()
        self.i += 4 * max(0, n - 1)


def metadata_v12(addr, timeout=120):
    """A Metadata request v12 for every topic (null topics), over a new socket:
    seconds from the send to the whole answer, answer bytes, topics,
    partitions and partitions with a leader."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(request(18, 3, 1, API_VERSIONS_V3, True))
        recv_frame(s)
        body = b"\x00" + b"\x00" + b"\x00" + b"\x00"  # null topics, no auto-create, no authorized ops, no tags
        t0 = time.monotonic()
        s.sendall(request(3, 12, 2, body, True))
        frame = recv_frame(s)
        secs = time.monotonic() - t0
    r = Reader(frame)
    r.take(">i")  # correlation id
    r.tagged()
    r.take(">i")  # throttle
    for _ in range(r.uvarint() - 1):  # brokers
        r.take(">i")
        r.compact_str()
        r.take(">i")
        r.compact_str()
        r.tagged()
    r.compact_str()  # cluster id
    r.take(">i")  # controller
    topics = parts = led = 0
    for _ in range(r.uvarint() - 1):
        topics += 1
        r.take(">h")
        r.compact_str()
        r.i += 16 + 1  # topic id, is_internal
        for _ in range(r.uvarint() - 1):
            parts += 1
            r.take(">h")
            r.take(">i")
            leader = r.take(">i")
            led += leader >= 0
            r.take(">i")
            r.int32_array()
            r.int32_array()
            r.int32_array()
            r.tagged()
        r.take(">i")
        r.tagged()
    return dict(secs=secs, bytes=len(frame) + 4, topics=topics, partitions=parts, with_leader=led)


def cg_heartbeat(group, member, epoch, topics=None, rebalance_ms=-1, owned_empty=False):
    """A ConsumerGroupHeartbeat v1 body (KIP-848): a join when `topics` is given."""
    b = compact_str(group) + compact_str(member) + struct.pack(">i", epoch)
    b += b"\x00" + b"\x00"  # instance id, rack id: null
    b += struct.pack(">i", rebalance_ms)
    if topics is None:
        b += b"\x00"
    else:
        b += uvarint(len(topics) + 1) + b"".join(compact_str(t) for t in topics)
    b += b"\x00" + b"\x00"  # regex, server assignor: null
    b += b"\x01" if owned_empty else b"\x00"  # owned partitions: [] on a join, else null
    return b + b"\x00"


def cg_heartbeat_answer(frame):
    """(error code, member epoch) of a ConsumerGroupHeartbeat answer."""
    r = Reader(frame)
    r.take(">i")
    r.tagged()
    r.take(">i")
    err = r.take(">h")
    r.compact_str()
    r.compact_str()
    return err, r.take(">i")


class AsyncConn:
    """One Kafka connection, one request at a time."""

    def __init__(self, reader, writer):
        self.r, self.w, self.corr = reader, writer, 0

    @classmethod
    async def open(cls, addr, timeout):
        host, port = addr.rsplit(":", 1)
        r, w = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout)
        c = cls(r, w)
        await c.call(18, 3, API_VERSIONS_V3, timeout)
        return c

    async def call(self, api_key, version, body, timeout):
        self.corr += 1
        self.w.write(request(api_key, version, self.corr, body, True))
        await self.w.drain()
        (n,) = struct.unpack(">i", await asyncio.wait_for(self.r.readexactly(4), timeout))
        return await asyncio.wait_for(self.r.readexactly(n), timeout)

    def close(self):
        self.w.close()


# ---------------------------------------------------------------- the cluster

def meta_status(floe, addrs):
    """{node: (state, leader, voters)} for the nodes that answer `floe meta status`."""
    res = subprocess.run([str(floe), "meta", "status", "--addrs", ",".join(addrs)], capture_output=True,
                         text=True, timeout=30)
    out = {}
    for m in re.finditer(r"node (\d+) at \S+: (\w+) term \d+ leader (\d+) .*? members \[(.*)\]", res.stdout):
        voters = {int(x.split("=")[0]) for x in m.group(4).split(", ") if x and "(learner)" not in x}
        out[int(m.group(1))] = (m.group(2), int(m.group(3)), voters)
    return out


class Role:
    """One `floe` process that may be started again on its data and ports.
    `make_args(ports)` gives its command line for the ports of its previous
    start (None the first time: port 0)."""

    def __init__(self, name, make_args, work, env):
        self.name, self.make_args, self.work, self.env = name, make_args, work, env
        self.ports_path = work / f"{name}.ports.json"
        self.ports = None
        self.proc = None

    def spawn(self):
        with contextlib.suppress(FileNotFoundError):
            self.ports_path.unlink()
        self.proc = Proc(self.name, [*self.make_args(self.ports), "--ports-file", self.ports_path], self.work,
                         env=self.env)
        return self

    def wait_ports(self, timeout=60):
        self.ports = read_ports(self.ports_path, self.proc, timeout)
        return self

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.alive()

    def tail(self, n=20):
        return self.proc.tail(n) if self.proc else ""


def listen(host, ports, name):
    return f"{host}:{int(ports[name].rsplit(':', 1)[1]) if ports else 0}"


class Cluster:
    """3 metadata nodes, 2 brokers on one local-folder store, 1 proxy."""

    def __init__(self, floe, work, broker_args, proxy_args):
        self.floe, self.work = floe, work
        self.store = work / "store"
        self.store.mkdir(parents=True, exist_ok=True)
        base = dict(os.environ)
        user_log = os.environ.get("RUST_LOG")
        meta_env = dict(base, RUST_LOG=user_log or "warn,floe_metadata=info")
        broker_env = dict(base, RUST_LOG=user_log or "warn,floe_broker=info")
        proxy_env = dict(base, RUST_LOG=user_log or "warn")
        self.metas = {i: Role(f"meta{i}", self._meta_args(i), work, meta_env) for i in META_HOSTS}
        self.brokers = {b: Role(f"broker{b}", self._broker_args(b, broker_args), work, broker_env)
                        for b in BROKER_HOSTS}
        self.proxy = Role("proxy", self._proxy_args(proxy_args), work, proxy_env)

    def _meta_args(self, i):
        def args(ports):
            a = [self.floe, "meta", "--id", i, "--listen", listen(META_HOSTS[i], ports, "meta"),
                 "--data-dir", self.work / f"m{i}"]
            if i == 1:
                return a + ["--init"]  # a no-op once its log has entries
            return a + ["--join", self.metas[1].ports["meta"]]  # a no-op for a member (a restart)
        return args

    @property
    def meta_addrs(self):
        return [m.ports["meta"] for m in self.metas.values()]

    def _broker_args(self, b, extra):
        def args(ports):
            return [self.floe, "broker", "--id", b, "--listen", listen(BROKER_HOSTS[b], ports, "rpc"),
                    "--admin-listen", listen(BROKER_HOSTS[b], ports, "admin"), "--meta", ",".join(self.meta_addrs),
                    "--store", f"local=file://{self.store}", *extra]
        return args

    def _proxy_args(self, extra):
        def args(ports):
            return [self.floe, "proxy", "--listen", listen(PROXY_HOST, ports, "kafka"),
                    "--admin-listen", listen(PROXY_HOST, ports, "admin"), "--meta", ",".join(self.meta_addrs),
                    "--max-connections", 20000, *extra]
        return args

    def roles(self):
        return [*self.metas.values(), *self.brokers.values(), self.proxy]

    def procs(self):
        return [r.proc for r in self.roles() if r.proc]

    @property
    def bootstrap(self):
        return self.proxy.ports["kafka"]

    def start(self, timeout=120):
        """First start: node 1 forms the cluster, 2 and 3 join it one by one."""
        self.metas[1].spawn().wait_ports()
        for i in (2, 3):
            self.metas[i].spawn().wait_ports()
            addrs = [self.metas[j].ports["meta"] for j in range(1, i + 1)]
            wait_until(f"meta{i} a voter", lambda i=i, addrs=addrs: any(
                s == "Leader" and i in v for s, _, v in meta_status(self.floe, addrs).values()),
                timeout, self.procs())
        self._start_rest(timeout)

    def _start_rest(self, timeout):
        for b in self.brokers.values():
            b.spawn()
        for b in self.brokers.values():
            b.wait_ports(timeout)
        self.proxy.spawn().wait_ports(timeout)
        for r in [*self.brokers.values(), self.proxy]:
            wait_until(f"{r.name} /readyz", lambda r=r: http_ok(f"http://{r.ports['admin']}/readyz"), timeout,
                       self.procs())

    def restart(self, timeout=300):
        """Every role again on its data and ports: the metadata nodes at once
        (a quorum needs two), then the brokers and the proxy."""
        for m in self.metas.values():
            m.spawn()
        for m in self.metas.values():
            m.wait_ports(timeout)
        self._start_rest(timeout)

    def stop_all(self, grace=30, roles=None):
        """SIGTERM to every live role (of `roles`, default all) at once; SIGKILL
        after `grace` s. Returns the seconds it took."""
        t0 = time.monotonic()
        live = [r.proc for r in (roles or self.roles()) if r.alive()]
        for p in live:
            with contextlib.suppress(OSError):
                p.p.terminate()
        deadline = time.monotonic() + grace
        for p in live:
            try:
                p.p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"{p.name} still running {grace} s after SIGTERM: SIGKILL")
                p.kill9()
        for p in live:
            with contextlib.suppress(Exception):
                p.f.close()
        return time.monotonic() - t0

    def meta_leader(self):
        for i, (s, _, _) in meta_status(self.floe, self.meta_addrs).items():
            if s == "Leader":
                return i
        return None

    def meta_files(self):
        out = {}
        for i in self.metas:
            d = self.work / f"m{i}"
            out[f"meta{i}"] = dict(raft_log_mib=mib(file_size(d / "raft-log.redb")),
                                   snapshot_mib=mib(file_size(d / "state" / "snapshot.bin")))
        return out

    def rss(self):
        return {r.name: rss_mib(r.proc) for r in self.roles()}


def mib(n):
    return None if n is None else round(n / MIB, 2)


class Sampler(threading.Thread):
    """Every `every` s: each process's RSS and CPU-seconds, to samples.jsonl."""

    def __init__(self, cluster, path, every=5.0):
        super().__init__(daemon=True)
        self.c, self.path, self.every = cluster, path, every
        self.phase = "start"
        self.stopping = threading.Event()

    def run(self):
        with open(self.path, "a") as f:
            while not self.stopping.wait(self.every):
                row = dict(t=round(time.time(), 1), phase=self.phase)
                for r in self.c.roles():
                    if r.alive():
                        row[r.name] = dict(rss_mib=rss_mib(r.proc), cpu_s=round(cpu_seconds(r.pid), 1))
                f.write(json.dumps(row) + "\n")
                f.flush()

    def stop(self):
        self.stopping.set()


# ---------------------------------------------------------------- writing

class Writer:
    """An acks=all producer on aiokafka (not idempotent: no producer state
    per partition in the metadata). Not librdkafka: it sends one Produce
    request per partition, so a round of 10,000 partitions is 10,000
    requests, each waiting for a flush (see docs/benchmarks.md); aiokafka,
    like the Java client, puts every partition ready for a node in one
    request (up to 1 MiB)."""

    def __init__(self, bootstrap, topics):
        from aiokafka import AIOKafkaProducer
        self.loop = asyncio.new_event_loop()

        async def start():
            p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, linger_ms=5,
                                 request_timeout_ms=120000, retry_backoff_ms=50, metadata_max_age_ms=10000,
                                 max_request_size=1 << 20)
            await p.start()
            # Every topic's metadata in one request, not one per topic at its first send.
            await p.client.set_topics(sorted(topics))
            return p

        self.p = self.loop.run_until_complete(start())

    def write_each(self, targets, timeout):
        """One record to each (topic, partition) of `targets`, again after a
        failed delivery, until each has an acknowledged write or `timeout` s
        pass. Returns ({target: time.time() of its ack}, {error: count})."""
        return self.loop.run_until_complete(self._write_each(targets, timeout))

    async def _write_each(self, targets, timeout):
        acked, errors = {}, collections.Counter()
        value = b"s" * 16
        deadline = time.monotonic() + timeout
        todo = list(targets)
        while todo and time.monotonic() < deadline:
            futs = {}
            for key in todo:
                try:
                    futs[key] = await self.p.send(key[0], value, partition=key[1])
                except Exception as e:  # noqa: BLE001 - counted, sent again
                    errors[type(e).__name__] += 1
            for key, f in futs.items():
                f.add_done_callback(lambda f, key=key: f.exception() is None and acked.setdefault(key, time.time()))
            if futs:
                await asyncio.wait(list(futs.values()), timeout=max(0.1, deadline - time.monotonic()))
            for key, f in futs.items():
                if f.done() and f.exception() is not None:
                    errors[type(f.exception()).__name__] += 1
            todo = [k for k in targets if k not in acked]
            if todo:
                await asyncio.sleep(0.05)
        return acked, dict(errors)

    def close(self):
        with contextlib.suppress(Exception):
            self.loop.run_until_complete(asyncio.wait_for(self.p.stop(), 30))
        self.loop.close()


def pct(values, q):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


# ---------------------------------------------------------------- phases

class Bench:
    def __init__(self, args, floe):
        self.a = args
        self.floe = floe
        self.out = pathlib.Path(args.out)
        self.raw = self.out / "raw"
        self.raw.mkdir(parents=True, exist_ok=True)
        self.work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="floe-scale-"))
        self.work.mkdir(parents=True, exist_ok=True)
        broker_args = shlex.split(os.environ.get("FLOE_SCALE_BROKER_ARGS", ""))
        if not any(x.startswith("--consumer-group-session-timeout-ms") for x in broker_args):
            # 5,000 members join at about 40 a second here: with the default
            # 45 s session the first ones expire before the last join.
            broker_args += ["--consumer-group-session-timeout-ms", "600000"]
        proxy_args = shlex.split(os.environ.get("FLOE_SCALE_PROXY_ARGS", ""))
        self.c = Cluster(floe, self.work, broker_args, proxy_args)
        self.results = dict(info=dict(
            command=" ".join(["bench/scale.py"] + sys.argv[1:]), floe=str(floe),
            broker_args=broker_args, proxy_args=proxy_args, partitions=args.partitions, topics=args.topics,
            machine=machine(), load_at_start=os.getloadavg(),
            started=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())), phases={})
        self.targets = []  # every (topic, partition)
        self.meta = None
        self.sampler = None

    def topic_names(self):
        width = len(str(self.a.topics - 1))
        return [f"scale-{i:0{width}d}" for i in range(self.a.topics)]

    def per_topic(self):
        return self.a.partitions // self.a.topics

    # -- the run

    def run(self, phases):
        t0 = time.monotonic()
        log(f"starting the cluster in {self.work}")
        self.c.start()
        self.meta = MetaApi(self.c.meta_addrs)
        self.sampler = Sampler(self.c, self.out / "samples.jsonl")
        self.sampler.start()
        self.results["cluster_start_s"] = round(time.monotonic() - t0, 1)
        self.results["idle"] = dict(rss_mib=self.c.rss(), meta_files=self.c.meta_files())
        created = False
        for phase in phases:
            if phase != "sizes" and not created:
                self.phase("create", self.create_topics)
                created = True
            if phase == "sizes":
                created = True
            self.phase(phase, getattr(self, phase))
            if not self.c.metas[1].alive() and not self.c.metas[2].alive():
                log("the metadata quorum is gone: stopping")
                break

    def phase(self, name, fn):
        log(f"---- {name}")
        self.sampler.phase = name
        t0 = time.monotonic()
        rec = self.results["phases"].setdefault(name, {})
        try:
            fn(rec)
        except Exception as e:  # noqa: BLE001 - a phase that breaks is a finding: recorded, the run goes on
            log(f"{name} failed: {e!r}")
            rec["error"] = f"{type(e).__name__}: {str(e)[:2000]}"
            rec["rss_mib"] = self.c.rss()
            rec["alive"] = {r.name: r.alive() for r in self.c.roles()}
            rec["tails"] = {r.name: r.tail(15) for r in self.c.roles()}
        rec["phase_s"] = round(time.monotonic() - t0, 1)
        self.save()

    def save(self):
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1, default=str))

    def stop(self):
        if self.sampler:
            self.sampler.stop()
        if self.meta:
            self.meta.close()
        # The proxy and the brokers before the metadata nodes: with the
        # metadata gone they would wait out their deadline (15 s) to
        # deregister, as the restart phase's stop of everything at once
        # measures.
        self.c.stop_all(grace=20, roles=[self.c.proxy, *self.c.brokers.values()])
        self.c.stop_all(grace=20)
        for r in self.c.roles():
            if r.proc:
                with contextlib.suppress(OSError):
                    shutil.copy(r.proc.log_path, self.raw / r.proc.log_path.name)

    # -- create

    def create_topics(self, rec):
        """Creates the topics in CreateTopics requests of `--create-batch`
        topics (or fewer, at most 10,000 partitions a request) and waits until
        the metadata service shows every partition with an owner."""
        import confluent_kafka.admin as cka
        names, per = self.topic_names(), self.per_topic()
        batch = max(1, min(self.a.create_batch, 10000 // per))
        admin = cka.AdminClient({"bootstrap.servers": self.c.bootstrap, "socket.timeout.ms": 120000})
        t0 = time.monotonic()
        deadline = t0 + self.a.create_timeout
        errors = collections.Counter()
        for i in range(0, len(names), batch):
            futs = admin.create_topics([cka.NewTopic(n, per, 1) for n in names[i:i + batch]],
                                       request_timeout=120, operation_timeout=120)
            for _, f in futs.items():
                try:
                    f.result(timeout=max(1, deadline - time.monotonic()))
                except Exception as e:  # noqa: BLE001 - counted by kind (a retried request finds its topic there)
                    errors[re.sub(r"'[^']*'", "'…'", str(e))[:120]] += 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"created {i + batch} of {len(names)} topics in {self.a.create_timeout} s")
            if (i // batch) % 10 == 0:
                log(f"  {min(i + batch, len(names))} topics created, {time.monotonic() - t0:.0f} s")
        rec["requests_s"] = round(time.monotonic() - t0, 1)

        def all_owned():
            topics, _, _ = self.meta.list_topics()
            owned = sum(1 for n in names if n in topics for o in topics[n][1].values() if o)
            return owned == self.a.partitions

        wait_until("every partition owned", all_owned, max(10, deadline - time.monotonic()), self.c.procs())
        rec["create_s"] = round(time.monotonic() - t0, 1)
        rec["errors"] = dict(errors)
        rec["per_partition_ms"] = round(rec["create_s"] * 1000 / self.a.partitions, 3)
        topics, _, _ = self.meta.list_topics()
        self.targets = [(n, p) for n in names for p in range(per)]
        self.topic_ids = {n: topics[n][0] for n in names}
        rec["owners"] = dict(collections.Counter(str(o) for n in names for o in topics[n][1].values()))
        rec["rss_mib"] = self.c.rss()
        rec["meta_files"] = self.c.meta_files()
        log(f"  {len(names)} topics, {self.a.partitions} partitions in {rec['create_s']} s; owners {rec['owners']}")

    # -- sizes

    def sample(self, rounds):
        """Index entries on an even sample of partitions, store objects, metadata files and RSS."""
        step = max(1, len(self.targets) // self.a.index_sample)
        picked = self.targets[::step][:self.a.index_sample]
        counts, sizes = [], []
        t0 = time.monotonic()
        for t, p in picked:
            n, b = self.meta.index_entries(self.topic_ids[t], p)
            counts.append(n)
            sizes.append(b)
        objects, store_bytes = folder_objects(self.c.store)
        s = dict(rounds=rounds, t=round(time.time(), 1), index_sampled=len(picked),
                 index_mean=round(statistics.mean(counts), 2) if counts else None,
                 index_max=max(counts, default=None), index_min=min(counts, default=None),
                 index_answer_bytes_mean=round(statistics.mean(sizes)) if sizes else None,
                 index_read_s=round(time.monotonic() - t0, 2),
                 store_objects=objects, store_mib=mib(store_bytes),
                 objects_per_partition=round(objects / max(1, len(self.targets)), 4),
                 meta_files=self.c.meta_files(), rss_mib=self.c.rss())
        log(f"  round {rounds}: index entries/partition mean {s['index_mean']} max {s['index_max']}, "
            f"{objects} objects, meta1 RSS {s['rss_mib'].get('meta1')} MiB, "
            f"raft log {s['meta_files']['meta1']['raft_log_mib']} MiB, "
            f"snapshot {s['meta_files']['meta1']['snapshot_mib']} MiB")
        return s

    def sizes(self, rec):
        self.create_topics(self.results["phases"].setdefault("create", {}))
        self.save()
        w = Writer(self.c.bootstrap, self.topic_names())
        samples = rec["samples"] = [self.sample(0)]
        round_s, failures = [], collections.Counter()
        t0 = time.monotonic()
        try:
            for r in range(1, self.a.rounds + 1):
                left = self.a.rounds_timeout - (time.monotonic() - t0)
                if left <= 0:
                    rec["stopped"] = f"after {r - 1} rounds: --rounds-timeout {self.a.rounds_timeout} s"
                    log("  " + rec["stopped"])
                    break
                t1 = time.monotonic()
                acked, errors = w.write_each(self.targets, min(left, 300))
                round_s.append(time.monotonic() - t1)
                failures.update(errors)
                if len(acked) < len(self.targets):
                    rec["stopped"] = f"round {r}: {len(self.targets) - len(acked)} partitions not acknowledged"
                    log("  " + rec["stopped"])
                    break
                rec["rounds_done"] = r
                if r % self.a.sample_every == 0 or r == self.a.rounds:
                    samples.append(self.sample(r))
                    self.save()
        finally:
            w.close()
        rec["round_s"] = dict(p50=round(pct(round_s, 50), 2), max=round(max(round_s), 2),
                              mean=round(statistics.mean(round_s), 2)) if round_s else None
        rec["delivery_errors"] = dict(failures)
        if self.a.settle > 0:
            log(f"  settling {self.a.settle} s (compaction)")
            time.sleep(self.a.settle)
            s = self.sample(rec.get("rounds_done", 0))
            s["settled_s"] = self.a.settle
            samples.append(s)
        last = samples[-1]
        rec["final"] = last
        rounds = max(1, rec.get("rounds_done", 0))
        rec["index_entries_per_round"] = round((last["index_mean"] or 0) / rounds, 3)
        m1 = last["meta_files"]["meta1"]
        n = self.a.partitions
        rec["per_partition"] = dict(
            meta_rss_kib=round((last["rss_mib"]["meta1"] - self.results["idle"]["rss_mib"]["meta1"]) * 1024 / n, 2),
            raft_log_bytes=round((m1["raft_log_mib"] or 0) * MIB / n, 1),
            snapshot_bytes=round((m1["snapshot_mib"] or 0) * MIB / n, 1),
            store_objects=last["objects_per_partition"])

    # -- metadata

    def metadata(self, rec):
        raw = [metadata_v12(self.c.bootstrap) for _ in range(3)]
        rec["raw_v12"] = raw
        rec["raw_v12_s_median"] = round(statistics.median(r["secs"] for r in raw), 3)
        rec["raw_v12_bytes"] = raw[-1]["bytes"]
        import confluent_kafka.admin as cka
        admin = cka.AdminClient({"bootstrap.servers": self.c.bootstrap})
        admin.list_topics(timeout=120)  # connected and warm
        times = []
        for _ in range(3):
            t0 = time.monotonic()
            md = admin.list_topics(timeout=120)
            times.append(time.monotonic() - t0)
        rec["list_topics_s"] = [round(x, 3) for x in times]
        rec["list_topics_partitions"] = sum(len(t.partitions) for t in md.topics.values())
        nbytes, secs = self.meta.list_topics_bytes()
        rec["meta_list_topics"] = dict(bytes=nbytes, secs=round(secs, 3))
        _, vbytes, vsecs = self.meta.list_topics()
        rec["cluster_view"] = dict(bytes=vbytes, secs=round(vsecs, 3))
        log(f"  Metadata v12: {rec['raw_v12_s_median']} s, {rec['raw_v12_bytes']} bytes, "
            f"{raw[-1]['with_leader']}/{raw[-1]['partitions']} led; list_topics {rec['list_topics_s']} s; "
            f"cluster view {vbytes} bytes")

    # -- connections

    def connections(self, rec):
        n = self.a.connections
        proxy = self.c.proxy
        host, port = self.c.bootstrap.rsplit(":", 1)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < n + 200:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 500), hard))
        time.sleep(1)
        before = proc_status(proxy.pid, "VmRSS")
        rec["proxy_fds_before"] = open_fds(proxy.pid)
        socks, errors = [], collections.Counter()
        t0 = time.monotonic()
        deadline = t0 + self.a.phase_timeout
        try:
            for i in range(n):
                if time.monotonic() > deadline:
                    errors["phase timeout"] += 1
                    break
                src = f"127.0.1.{1 + i // 900}"
                s = socket.socket()
                try:
                    s.settimeout(10)
                    s.bind((src, 0))
                    s.connect((host, int(port)))
                    s.sendall(request(18, 3, i + 1, API_VERSIONS_V3, True))
                    recv_frame(s)
                    socks.append(s)
                except OSError as e:
                    errors[type(e).__name__ + ": " + str(e)[:80]] += 1
                    s.close()
            rec["open_s"] = round(time.monotonic() - t0, 1)
            time.sleep(3)
            after = proc_status(proxy.pid, "VmRSS")
            rec["open"] = len(socks)
            rec["errors"] = dict(errors)
            rec["proxy_fds_after"] = open_fds(proxy.pid)
            rec["proxy_rss_mib"] = dict(before=round(before / 1024, 1), after=round(after / 1024, 1))
            rec["per_connection_kib"] = round((after - before) / max(1, len(socks)), 2)
            # Still open after a minute of idleness? (sampled: one in 100)
            alive = 0
            for s in socks[::100]:
                try:
                    s.sendall(request(18, 3, 1, API_VERSIONS_V3, True))
                    recv_frame(s)
                    alive += 1
                except OSError:
                    pass
            rec["answering_sampled"] = f"{alive}/{len(socks[::100])}"
        finally:
            for s in socks:
                s.close()
        time.sleep(3)
        rec["proxy_rss_mib"]["after_close"] = rss_mib(proxy.proc)
        log(f"  {len(socks)} connections: proxy RSS {rec['proxy_rss_mib']} MiB, "
            f"{rec['per_connection_kib']} KiB each; errors {dict(errors)}")

    # -- members

    def members(self, rec):
        import confluent_kafka.admin as cka
        g, per = self.a.groups, self.a.members_per_group
        topic = "scale-members"
        admin = cka.AdminClient({"bootstrap.servers": self.c.bootstrap})
        with contextlib.suppress(Exception):
            admin.create_topics([cka.NewTopic(topic, per, 1)])[topic].result(60)
        wait_until("members topic owned", lambda: (lambda t: topic in t and all(t[topic][1].values()) and
                                                   len(t[topic][1]) == per)(self.meta.list_topics()[0]),
                   60, self.c.procs())
        who = [self.c.metas[1], *self.c.brokers.values(), self.c.proxy]
        time.sleep(2)
        before = {r.name: proc_status(r.pid, "VmRSS") for r in who}
        members = [(f"scale-group-{i:03d}", str(uuid.uuid4())) for i in range(g) for _ in range(per)]
        epochs = {}
        errors = collections.Counter()
        timeout = self.a.phase_timeout

        async def worker(queue, make_body, record):
            c = await AsyncConn.open(self.c.bootstrap, 30)
            try:
                while True:
                    try:
                        m = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    try:
                        err, epoch = cg_heartbeat_answer(await c.call(68, 1, make_body(m), 30))
                    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
                        errors[f"{record}: {type(e).__name__}"] += 1
                        c.close()
                        c = await AsyncConn.open(self.c.bootstrap, 30)
                        continue
                    if err:
                        errors[f"{record}: error {err}"] += 1
                    else:
                        epochs[m] = epoch
            finally:
                c.close()

        async def all_of(make_body, record, conns=32):
            q = asyncio.Queue()
            for m in members:
                q.put_nowait(m)
            await asyncio.wait_for(asyncio.gather(*(worker(q, make_body, record) for _ in range(conns))), timeout)

        t0 = time.monotonic()
        asyncio.run(all_of(lambda m: cg_heartbeat(m[0], m[1], 0, [topic], 60000, owned_empty=True), "join"))
        rec["join_s"] = round(time.monotonic() - t0, 1)
        rec["joined"] = len(epochs)
        time.sleep(2)
        after = {r.name: proc_status(r.pid, "VmRSS") for r in who}
        rec["meta_files_after"] = self.c.meta_files()
        joined = dict(epochs)
        epochs.clear()
        t1 = time.monotonic()
        asyncio.run(all_of(lambda m: cg_heartbeat(m[0], m[1], joined.get(m, 0)), "heartbeat"))
        rec["heartbeat_pass_s"] = round(time.monotonic() - t1, 1)
        rec["alive_at_heartbeat"] = len(epochs)
        rec["rss_mib"] = {k: dict(before=round(before[k] / 1024, 1), after=round(after[k] / 1024, 1)) for k in before}
        brokers = [r.name for r in self.c.brokers.values()]
        rec["per_member_kib"] = dict(
            brokers=round(sum(after[b] - before[b] for b in brokers) / len(members), 2),
            proxy=round((after["proxy"] - before["proxy"]) / len(members), 2),
            meta1=round((after["meta1"] - before["meta1"]) / len(members), 2))
        rec["errors"] = dict(errors)
        rec["members"] = len(members)
        asyncio.run(all_of(lambda m: cg_heartbeat(m[0], m[1], -1), "leave"))
        log(f"  {len(members)} members in {g} groups: joined {rec['joined']} in {rec['join_s']} s; "
            f"RSS {rec['rss_mib']}; per member {rec['per_member_kib']} KiB; errors {dict(errors)}")

    # -- takeover

    def owned_by(self, broker):
        topics, _, _ = self.meta.list_topics()
        return [(n, p) for n, (_, parts) in topics.items() if n.startswith("scale-") and n != "scale-members"
                for p, o in parts.items() if o == broker]

    def takeover(self, rec):
        victim_id = max(self.c.brokers)
        victim = self.c.brokers[victim_id]
        survivor = self.c.brokers[min(self.c.brokers)]
        targets = self.owned_by(victim_id)
        rec["victim_partitions"] = len(targets)
        w = Writer(self.c.bootstrap, sorted({t for t, _ in targets}))
        try:
            acked, _ = w.write_each(targets, 120)  # warm: metadata and connections
            rec["warm_acked"] = len(acked)
            kill_at = time.time()
            victim.proc.kill9()
            acked, errors = w.write_each(targets, self.a.phase_timeout)
        finally:
            w.close()
        times = [t - kill_at for t in acked.values()]
        rec["acked"] = len(acked)
        rec["delivery_errors"] = errors
        rec["all_written_s"] = round(max(times), 2) if len(acked) == len(targets) and times else None
        rec["ack_s"] = dict(p50=round(pct(times, 50), 2), p99=round(pct(times, 99), 2)) if times else None
        # The controller's round, from the metadata nodes' logs (the leader's has the lines).
        ctl = []
        for m in self.c.metas.values():
            for t, line in log_lines_since(m.proc.log_path, kill_at - 1, "controller"):
                cm = re.search(r"command=\"?(\w+)", line)
                ctl.append(dict(node=m.name, at_s=round(t - kill_at, 3), command=cm.group(1) if cm else line[:80],
                                line_bytes=len(line)))
            for t, line in log_lines_since(m.proc.log_path, kill_at - 1, "broker down"):
                ctl.append(dict(node=m.name, at_s=round(t - kill_at, 3), command="NodeDown (refused connections)",
                                line_bytes=len(line)))
        ctl.sort(key=lambda x: x["at_s"])
        rec["controller"] = ctl[:20]
        took = [t - kill_at for t, _ in log_lines_since(survivor.proc.log_path, kill_at, "took partition over")]
        rec["survivor_took_over"] = dict(count=len(took), first_s=round(min(took), 3) if took else None,
                                         last_s=round(max(took), 3) if took else None)
        # The round: the kill noticed (a NodeDown or ExpireLeases), the
        # Reassign proposed (logged before it is written), then committed,
        # applied and seen by the survivor (its first and last took-over lines).
        reassign = [x for x in ctl if x["command"] == "Reassign"]
        if reassign:
            rec["reassign_proposed_s"] = reassign[0]["at_s"]
            rec["reassign_line_bytes"] = reassign[0]["line_bytes"]
        if reassign and took:
            rec["reassign_to_first_takeover_s"] = round(min(took) - reassign[0]["at_s"], 3)
            rec["reassign_to_last_takeover_s"] = round(max(took) - reassign[0]["at_s"], 3)
        rec["rss_mib"] = self.c.rss()
        log(f"  {len(targets)} partitions of broker {victim_id}: all written after {rec['all_written_s']} s "
            f"(p50 {rec['ack_s']}); controller {[(x['command'], x['at_s']) for x in ctl[:6]]}; "
            f"survivor took {rec['survivor_took_over']}")

    # -- restart

    def restart(self, rec):
        rec["stop_s"] = round(self.c.stop_all(grace=60), 1)
        log(f"  stopped everything in {rec['stop_s']} s")
        self.meta.close()
        t0 = time.monotonic()
        start_at = time.time()
        self.c.restart(timeout=self.a.phase_timeout)
        rec["processes_ready_s"] = round(time.monotonic() - t0, 1)
        self.meta = MetaApi(self.c.meta_addrs)
        w = Writer(self.c.bootstrap, self.topic_names())
        try:
            acked, errors = w.write_each(self.targets, self.a.phase_timeout)
        finally:
            w.close()
        times = [t - start_at for t in acked.values()]
        rec["acked"] = len(acked)
        rec["partitions"] = len(self.targets)
        rec["delivery_errors"] = errors
        rec["all_written_s"] = round(max(times), 2) if len(acked) == len(self.targets) and times else None
        rec["ack_s"] = dict(p50=round(pct(times, 50), 2), p99=round(pct(times, 99), 2)) if times else None
        rec["rss_mib"] = self.c.rss()
        log(f"  restart: processes ready after {rec['processes_ready_s']} s, every partition written after "
            f"{rec['all_written_s']} s ({len(acked)}/{len(self.targets)})")


# ---------------------------------------------------------------- the report

def row(name, value, note=""):
    return f"| {name} | {value} | {note} |"


def markdown(res):
    info, ph = res["info"], res["phases"]
    out = [f"# Scale: {info['partitions']:,} partitions in {info['topics']:,} topics", "",
           f"`{info['command']}` — {info['started']}, `{info['floe']}`"
           + (f", broker flags `{' '.join(info['broker_args'])}`" if info["broker_args"] else ""), "",
           f"Machine: {info['machine']['nproc']} cores, {info['machine']['mem_gib']} GiB, load average at start "
           f"{', '.join(f'{x:.1f}' for x in info['load_at_start'])}.", "",
           "| figure | value | notes |", "|---|---|---|"]
    idle = res.get("idle", {}).get("rss_mib", {})
    out.append(row("RSS idle (MiB)", ", ".join(f"{k} {v}" for k, v in idle.items())))
    c = ph.get("create", {})
    if "create_s" in c:
        out.append(row("create topics", f"{c['create_s']} s", f"{c['per_partition_ms']} ms per partition; owners "
                       f"{c.get('owners')}"))
    s = ph.get("sizes", {})
    if s.get("final"):
        f = s["final"]
        out.append(row("rounds written", s.get("rounds_done", 0),
                       f"round p50 {s['round_s']['p50']} s, max {s['round_s']['max']} s" if s.get("round_s") else ""))
        out.append(row("index entries per partition", f"mean {f['index_mean']}, max {f['index_max']}",
                       f"{s['index_entries_per_round']} per round; sample of {f['index_sampled']}"))
        out.append(row("store objects", f"{f['store_objects']:,} ({f['store_mib']} MiB)",
                       f"{f['objects_per_partition']} per partition"))
        for k, v in f["meta_files"].items():
            out.append(row(f"{k} raft-log.redb / snapshot.bin (MiB)", f"{v['raft_log_mib']} / {v['snapshot_mib']}"))
        out.append(row("RSS at the end (MiB)", ", ".join(f"{k} {v}" for k, v in f["rss_mib"].items())))
        pp = s["per_partition"]
        out.append(row("per partition", f"meta RSS {pp['meta_rss_kib']} KiB, Raft log {pp['raft_log_bytes']} B, "
                       f"snapshot {pp['snapshot_bytes']} B, {pp['store_objects']} objects", "node 1; RSS over idle"))
    m = ph.get("metadata", {})
    if "raw_v12_bytes" in m:
        out.append(row("Metadata v12, every topic", f"{m['raw_v12_s_median']} s, {m['raw_v12_bytes']:,} bytes",
                       f"{m['raw_v12'][-1]['with_leader']:,}/{m['raw_v12'][-1]['partitions']:,} partitions led; "
                       f"median of 3"))
        out.append(row("confluent-kafka list_topics", ", ".join(f"{x} s" for x in m["list_topics_s"])))
        out.append(row("cluster view (watch answer)", f"{m['cluster_view']['bytes']:,} bytes",
                       f"sent whole to each broker and proxy when the view changed; ListTopics "
                       f"{m['meta_list_topics']['bytes']:,} bytes"))
    cn = ph.get("connections", {})
    if "per_connection_kib" in cn:
        out.append(row(f"idle connections ({cn['open']:,})", f"{cn['per_connection_kib']} KiB each",
                       f"proxy RSS {cn['proxy_rss_mib']} MiB; errors {cn['errors'] or 'none'}"))
    mb = ph.get("members", {})
    if "per_member_kib" in mb:
        out.append(row(f"consumer group members ({mb['members']:,})",
                       f"brokers {mb['per_member_kib']['brokers']} KiB, proxy {mb['per_member_kib']['proxy']} KiB, "
                       f"meta1 {mb['per_member_kib'].get('meta1')} KiB each",
                       f"joined {mb['joined']} in {mb['join_s']} s, {mb.get('alive_at_heartbeat')} answered a "
                       f"heartbeat after; RSS {mb['rss_mib']}; errors {mb['errors'] or 'none'}"))
    t = ph.get("takeover", {})
    if "victim_partitions" in t:
        out.append(row(f"take-over of {t['victim_partitions']:,} partitions (kill -9)",
                       f"{t['all_written_s']} s", f"acks p50/p99 {t['ack_s']}; survivor's took-over lines "
                       f"{t['survivor_took_over']}"))
        if t.get("controller"):
            out.append(row("controller round: Reassign proposed → survivor's first / last took-over line",
                           f"{t.get('reassign_to_first_takeover_s')} / {t.get('reassign_to_last_takeover_s')} s",
                           "after the kill: " + "; ".join(f"{x['command']} at {x['at_s']} s ({x['line_bytes']:,} B "
                                                          "logged)" for x in t["controller"][:5])))
    r = ph.get("restart", {})
    if "stop_s" in r:
        out.append(row("full restart", f"{r.get('all_written_s')} s",
                       f"stop {r['stop_s']} s; processes ready {r.get('processes_ready_s')} s; acked "
                       f"{r.get('acked')}/{r.get('partitions')}"))
    for name, p in ph.items():
        if p.get("error"):
            out.append(row(f"**{name} failed**", p["error"][:300].replace("|", "/").replace("\n", " ")))
    if s.get("samples"):
        out += ["", "Index entries per partition against rounds:", "",
                "| rounds | entries mean / max | store objects | meta1 RSS MiB | raft-log MiB | snapshot MiB |"
                " brokers RSS MiB |", "|---|---|---|---|---|---|---|"]
        for x in s["samples"]:
            mf = x["meta_files"]["meta1"]
            out.append(f"| {x['rounds']}{' +' + str(x['settled_s']) + ' s' if x.get('settled_s') else ''} | "
                       f"{x['index_mean']} / {x['index_max']} | {x['store_objects']:,} | {x['rss_mib']['meta1']} | "
                       f"{mf['raft_log_mib']} | {mf['snapshot_mib']} | {x['rss_mib']['broker1']}, "
                       f"{x['rss_mib']['broker2']} |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=10000)
    ap.add_argument("--topics", type=int, default=None, help="default: partitions / 10 (topics of 10)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of one record to every partition "
                    "(default 100; 20 at 100,000 partitions and more)")
    ap.add_argument("--rounds-timeout", type=float, default=1500, help="seconds of rounds at most")
    ap.add_argument("--sample-every", type=int, default=None, help="rounds between samples (default rounds/10)")
    ap.add_argument("--index-sample", type=int, default=200, help="partitions whose index is read per sample")
    ap.add_argument("--settle", type=float, default=40, help="seconds to wait after the rounds (compaction)")
    ap.add_argument("--create-batch", type=int, default=500, help="topics per CreateTopics request")
    ap.add_argument("--create-timeout", type=float, default=1800)
    ap.add_argument("--connections", type=int, default=10000)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--members-per-group", type=int, default=50)
    ap.add_argument("--phase-timeout", type=float, default=600, help="seconds per phase step at most")
    ap.add_argument("--only", default=",".join(PHASES), help="comma-separated, of " + ",".join(PHASES))
    ap.add_argument("--quick", action="store_true", help="200 partitions, small counts: under 2 minutes")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "scale"))
    ap.add_argument("--work", default=None, help="the processes' data (default: a new temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep --work")
    a = ap.parse_args()
    if a.quick:
        a.partitions, a.rounds, a.settle = 200, a.rounds or 5, 0
        a.connections, a.groups, a.members_per_group = 500, 10, 10
        a.phase_timeout, a.index_sample = 60, 50
        a.create_timeout = 120
    a.topics = a.topics or max(1, a.partitions // 10)
    if a.partitions % a.topics:
        ap.error("--partitions must be a multiple of --topics")
    a.rounds = a.rounds if a.rounds is not None else (20 if a.partitions >= 100000 else 100)
    a.sample_every = a.sample_every or max(1, a.rounds // 10)
    phases = a.only.split(",")
    for p in phases:
        if p not in PHASES:
            ap.error(f"unknown phase {p}")
    floe = pathlib.Path(os.environ.get("FLOE_BIN") or ROOT / "target" / "release" / "floe")
    if not floe.exists():
        ap.error(f"{floe} missing: set FLOE_BIN or cargo build --release")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the proxy inherits it: 10,000 connections
    # A SIGTERM (a timeout around the run) stops the cluster through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    b = Bench(a, floe)
    t0 = time.monotonic()
    try:
        b.run([p for p in PHASES if p in phases])
    finally:
        log("stopping the cluster")
        b.stop()
        b.results["minutes"] = round((time.monotonic() - t0) / 60, 1)
        b.results["info"]["load_at_end"] = os.getloadavg()
        b.save()
        (b.out / "results.md").write_text(markdown(b.results))
        if not a.keep and not a.work:
            shutil.rmtree(b.work, ignore_errors=True)
    log(f"done in {b.results['minutes']} min: {b.out / 'results.md'}")
    return 1 if any(p.get("error") for p in b.results["phases"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
