"""Faults of the object store, the disks and the clock for the scenarios of
tests/test_faults_store.py (issue 41).

- `S3FaultRelay`: an HTTP relay in front of an S3 server (moto or Garage) that
  understands the requests it forwards and, at random from a seeded
  generator, answers 503 SlowDown or 500, acknowledges a PUT it never
  forwards (a lost write), lists from a stale view (objects written in the
  last seconds are left out), returns a GET's body short (the connection
  closed before Content-Length bytes, or a 200 whose Content-Length is
  short too), and answers 412 to conditional requests (If-None-Match /
  If-Match) though nothing conflicts. Every fault is counted.
- `FaultS3Cluster`: a `Cluster` whose store is one or more S3 servers,
  each behind an `S3FaultRelay`.
- `Tmpfs`: a small tmpfs mounted on a metadata node's data folder (a disk
  that fills), and `fsync_shim`: an LD_PRELOAD library whose fsync and
  fdatasync fail with EIO while a trigger file exists (an injected fsync
  failure, no test hook in Floe).
- `Transformer`: the consume-transform-produce loop of
  tests/txn_transformer.py as a process, started again whenever it exits.
- `Runs`: the per-run table (family, faults injected, operations,
  anomalies by kind), the seed (`FLOE_FAULTS_SEED` replays it) and the
  history of a failed run kept as JSON.
"""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import random
import re
import shutil
import socket
import socketserver
import subprocess
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler

from floe_cluster import Cluster
from s3_cluster import S3Cluster, start_s3_server


def seed():
    """The run's seed: FLOE_FAULTS_SEED, else a fresh one (printed by the caller)."""
    s = os.environ.get("FLOE_FAULTS_SEED")
    return int(s) if s else random.randrange(1 << 31)


def seconds(default):
    """Seconds of faults per family: FLOE_FAULTS_SECONDS (the long mode), else `default`."""
    s = os.environ.get("FLOE_FAULTS_SECONDS")
    return float(s) if s else default


def long_mode():
    return bool(os.environ.get("FLOE_FAULTS_SECONDS"))


# ------------------------------------------------------------------ the S3 fault relay

FAULTS = ("slowdown", "error500", "error500_after", "lost_put", "stale_list", "short_get", "short_get_200",
          "precondition")

_ERROR = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{msg}</Message>'
          '<RequestId>floe-fault</RequestId></Error>')


class S3FaultRelay:
    """An HTTP/1.1 relay to the S3 server at 127.0.0.1:`upstream_port` whose
    faults are drawn per request from `rng` with the probabilities in
    `rates` ({fault: probability}; see `FAULTS`). `lost_put_prefix` limits
    lost writes to keys under it (in the bucket), `list_lag` is how many
    seconds a listing lags the writes when `stale_list` fires (it always
    does when its rate is 1). `counts` holds the faults injected,
    `requests` the requests by operation, `conditional` the requests that
    carried If-None-Match or If-Match, and `lost` the keys of writes
    acknowledged and never stored."""

    def __init__(self, upstream_port, rng, rates=None, lost_put_prefix="", list_lag=5.0):
        self.upstream_port = upstream_port
        self.rng = rng
        self.rates = dict(rates or {})
        self.lost_put_prefix = lost_put_prefix
        self.list_lag = list_lag
        self.lock = threading.Lock()
        self.counts = Counter()
        self.requests = Counter()
        self.conditional = 0
        self.lost = []
        self.written = {}  # key -> when the relay last forwarded a PUT of it
        self.lose_left = 0
        self.answers = Counter()  # (operation, status) -> count, of requests forwarded
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle_one_request(self):
                try:
                    super().handle_one_request()
                except (ConnectionError, socket.timeout, http.client.HTTPException, OSError):
                    self.close_connection = True

            def do_GET(self):
                relay._serve(self)

            do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

        class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 128

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()

    def set(self, **rates):
        """Changes fault rates (0 turns one off)."""
        with self.lock:
            self.rates.update(rates)

    def lose_next(self, n=1):
        """The next `n` PUTs under `lost_put_prefix` are acknowledged and never stored."""
        with self.lock:
            self.lose_left = n

    def clear(self):
        with self.lock:
            self.rates = {}

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def _draw(self, fault):
        with self.lock:
            rate = self.rates.get(fault, 0.0)
            return rate > 0 and self.rng.random() < rate

    def _take_lose(self):
        with self.lock:
            if self.lose_left > 0:
                self.lose_left -= 1
                return True
            return False

    def _count(self, fault):
        with self.lock:
            self.counts[fault] += 1

    @staticmethod
    def _op(method, path):
        p, _, query = path.partition("?")
        parts = [x for x in p.split("/") if x]
        key = "/".join(parts[1:])
        if method == "GET" and not key:
            return "LIST", key
        if method == "POST":
            return ("DELETE_MANY" if "delete" in query else "MULTIPART"), key
        return method, key

    def _serve(self, h):
        body = b""
        if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = _read_chunked(h.rfile)
        elif h.headers.get("Content-Length"):
            body = h.rfile.read(int(h.headers["Content-Length"]))
        op, key = self._op(h.command, h.path)
        with self.lock:
            self.requests[op] += 1
        if "If-None-Match" in h.headers or "If-Match" in h.headers:
            with self.lock:
                self.conditional += 1
            if self._draw("precondition"):
                self._count("precondition")
                return _reply(h, 412, "PreconditionFailed", "At least one of the preconditions you specified did not hold")
        if self._draw("slowdown"):
            self._count("slowdown")
            return _reply(h, 503, "SlowDown", "Please reduce your request rate.")
        if self._draw("error500"):
            self._count("error500")
            return _reply(h, 500, "InternalError", "We encountered an internal error. Please try again.")
        if op == "PUT" and key.startswith(self.lost_put_prefix) and (self._take_lose() or self._draw("lost_put")):
            self._count("lost_put")
            with self.lock:
                self.lost.append(key)
            etag = '"%032x"' % self.rng.getrandbits(128)
            return _send(h, 200, [("ETag", etag), ("x-amz-request-id", "floe-fault")], b"")
        status, reason, headers, data = self._forward(h, body)
        with self.lock:
            self.answers[(op, status)] += 1
        if op == "PUT" and status == 200:
            with self.lock:
                self.written[key] = time.time()
        if self._draw("error500_after"):
            # Done upstream, but the client is told it failed.
            self._count("error500_after")
            return _reply(h, 500, "InternalError", "We encountered an internal error. Please try again.")
        if op == "LIST" and status == 200 and self._draw("stale_list"):
            data, hidden = self._stale(data)
            if hidden:
                self._count("stale_list")
        if op == "GET" and status in (200, 206) and len(data) > 1:
            if self._draw("short_get"):
                # Content-Length promises every byte; half come, then the
                # connection closes.
                self._count("short_get")
                return _send(h, status, headers, data, cut=len(data) // 2, reason=reason)
            if self._draw("short_get_200"):
                # A 200 whose Content-Length matches its short body: only a
                # reader that knows the size it asked for can tell.
                self._count("short_get_200")
                return _send(h, 200, [(k, v) for k, v in headers if k.lower() != "content-range"],
                             data[:len(data) // 2], reason="OK")
        return _send(h, status, headers, data, reason=reason, head=h.command == "HEAD")

    def _forward(self, h, body):
        conn = getattr(h, "_upstream", None)
        for attempt in range(2):
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=30)
                h._upstream = conn
            try:
                conn.putrequest(h.command, h.path, skip_host=True, skip_accept_encoding=True)
                for k, v in h.headers.items():
                    if k.lower() in ("transfer-encoding", "connection", "content-length"):
                        continue
                    conn.putheader(k, v)
                if body or h.command in ("PUT", "POST"):
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body if body else None)
                r = conn.getresponse()
                data = r.read()
                headers = [(k, v) for k, v in r.getheaders()
                           if k.lower() not in ("transfer-encoding", "connection", "content-length")]
                if h.command == "HEAD":
                    headers += [(k, v) for k, v in r.getheaders() if k.lower() == "content-length"]
                return r.status, r.reason, headers, data
            except (http.client.HTTPException, OSError):
                conn.close()
                conn = h._upstream = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _stale(self, xml):
        """The listing without the objects written in the last `list_lag` seconds."""
        text = xml.decode()
        now = time.time()
        with self.lock:
            recent = {k for k, at in self.written.items() if now - at < self.list_lag}
        hidden = 0

        def keep(m):
            nonlocal hidden
            k = re.search(r"<Key>(.*?)</Key>", m.group(0))
            if k and k.group(1) in recent:
                hidden += 1
                return ""
            return m.group(0)

        text = re.sub(r"<Contents>.*?</Contents>", keep, text, flags=re.S)
        if hidden:
            text = re.sub(r"<KeyCount>(\d+)</KeyCount>",
                          lambda m: f"<KeyCount>{int(m.group(1)) - hidden}</KeyCount>", text)
        return text.encode(), hidden

    def summary(self):
        return {"faults": dict(self.counts), "requests": dict(self.requests), "conditional": self.conditional}


def _read_chunked(f):
    out = b""
    while True:
        size = int(f.readline().split(b";")[0].strip(), 16)
        if size == 0:
            while f.readline() not in (b"\r\n", b"\n", b""):
                pass
            return out
        out += f.read(size)
        f.readline()


def _reply(h, status, code, msg):
    body = _ERROR.format(code=code, msg=msg).encode()
    return _send(h, status, [("Content-Type", "application/xml")], body)


def _send(h, status, headers, body, cut=None, reason=None, head=False):
    reason = reason or {200: "OK", 206: "Partial Content", 412: "Precondition Failed", 500: "Internal Server Error",
                        503: "Slow Down"}.get(status, "")
    lines = [f"HTTP/1.1 {status} {reason}"]
    lines += [f"{k}: {v}" for k, v in headers]
    if not head:
        lines.append(f"Content-Length: {len(body)}")
    if cut is not None:
        lines.append("Connection: close")
    data = ("\r\n".join(lines) + "\r\n\r\n").encode()
    h.wfile.write(data + (b"" if head else body[:cut] if cut is not None else body))
    h.wfile.flush()
    if cut is not None:
        h.close_connection = True
        try:
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class FaultS3Cluster(S3Cluster):
    """A `Cluster` whose store is `endpoints` S3 servers (moto, or Garage
    with FLOE_S3_SERVER=garage), each behind an `S3FaultRelay` (`relays[i]`
    in front of endpoint `e{i}`) drawing from `rng`. `objects()` and
    stopping are `S3Cluster`'s."""

    def __init__(self, floe_bin, tmp_path, rng, endpoints=1, **kw):
        tmp_path = pathlib.Path(tmp_path)
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.servers, self.relays = [], []
        try:
            for i in range(endpoints):
                # Garage's `port` is a plain relay to its socket, past which
                # the fault relay sits.
                self.servers.append(start_s3_server(tmp_path, i))
                self.relays.append(S3FaultRelay(self.servers[-1].port, random.Random(rng.random())))
            stores = [f"e{i}={m.url(r.port)}" for i, (m, r) in enumerate(zip(self.servers, self.relays))]
            Cluster.__init__(self, floe_bin, tmp_path, stores=stores, **kw)
        except BaseException:
            self._stop_servers()
            raise


# ------------------------------------------------------------------ consume-transform-produce

class Transformer:
    """tests/txn_transformer.py (read `src` at read_committed, write each
    value upper-cased to `dst` and commit the input offsets in the same
    transaction) as a process of its own, logging to `folder`. It exits on
    any transaction error: `watch()` starts it again (same transactional id,
    which fences the old one and aborts its open transaction) and counts
    it."""

    def __init__(self, bootstrap, src, dst, group, txn_id, folder):
        self.args = [bootstrap, src, dst, group, txn_id]
        self.group, self.src = group, src
        self.bootstrap = bootstrap
        self.folder = pathlib.Path(folder)
        self.runs = 0
        self.restarts = 0
        self.proc = None
        self.log = None
        self.start()

    def _log_path(self, n):
        return self.folder / f"transformer{n}.log"

    def start(self):
        import sys
        script = pathlib.Path(__file__).resolve().parent / "txn_transformer.py"
        self.log = open(self._log_path(self.runs), "w")
        self.proc = subprocess.Popen([sys.executable, str(script), *self.args], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.runs += 1

    def watch(self):
        """Starts it again if it exited."""
        if self.proc.poll() is not None:
            self.log.close()
            self.restarts += 1
            self.start()

    def commits(self):
        """Transactions it committed, over every run."""
        return sum(self._log_path(n).read_text().count("committed ") for n in range(self.runs)
                   if self._log_path(n).exists())

    def exits(self, limit=3):
        """The last lines of the logs of runs that exited (why they did)."""
        out = []
        for n in range(max(0, self.runs - 1 - limit), self.runs - 1):
            lines = self._log_path(n).read_text().strip().splitlines()
            out.append(lines[-1] if lines else "(no output)")
        return out

    def committed(self):
        """{partition: the group's committed offset} of `src` (-1001: none)."""
        import confluent_kafka
        c = confluent_kafka.Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                      "enable.auto.commit": False})
        try:
            md = c.list_topics(self.src, timeout=30).topics[self.src].partitions
            tps = [confluent_kafka.TopicPartition(self.src, p) for p in md]
            return {tp.partition: tp.offset for tp in c.committed(tps, timeout=30)}
        finally:
            c.close()

    def wait_done(self, ends, stall=90, timeout=600):
        """Waits (restarting it when it exits) until the group's committed
        offsets reach `ends` {partition: end}; returns whether they did.
        Gives up when they have not moved for `stall` seconds (a slow
        machine only makes it slower), or after `timeout`."""
        import confluent_kafka
        started = time.time()
        moved, last = started, None
        while time.time() - started < timeout and time.time() - moved < stall:
            self.watch()
            try:
                got = self.committed()
            except confluent_kafka.KafkaException:
                got = {}
            if all(e == 0 or got.get(p, -1) >= e for p, e in ends.items()):
                return True
            if got and got != last:
                moved, last = time.time(), got
            time.sleep(0.5)
        return False

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        if self.log:
            self.log.close()


# ------------------------------------------------------------------ disks

class Tmpfs:
    """A tmpfs of `size` mounted on `path` (created), unmounted by `close()`.
    `fill()` writes a file until the disk is full; `free()` removes it."""

    def __init__(self, path, size="16m"):
        self.path = pathlib.Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(self.path)],
                             capture_output=True, text=True, timeout=30)
        if res.returncode != 0:
            raise OSError(f"mount tmpfs on {self.path}: {res.stderr.strip()}")
        self.filler = self.path / "filler"

    def fill(self):
        """Fills the disk; returns the bytes written (0: it was full
        already, the node's own files took it all)."""
        n = 0
        chunk = b"\0" * (1 << 16)
        try:
            with open(self.filler, "ab") as f:
                try:
                    while True:
                        f.write(chunk)
                        f.flush()
                        n += len(chunk)
                except OSError:
                    pass
            # Byte by byte for the last partial page, so not even 4 KiB is left.
            with open(self.filler, "ab", buffering=0) as f:
                try:
                    while True:
                        f.write(b"\0" * 512)
                        n += 512
                except OSError:
                    pass
        except OSError:
            # Not even the filler could be created: full already.
            pass
        return n

    def free(self):
        if self.filler.exists():
            self.filler.unlink()

    def avail(self):
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def close(self):
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True, timeout=30)


def tmpfs_works(tmp):
    """Whether this machine lets the test mount a tmpfs (root in a container
    that allows it)."""
    try:
        t = Tmpfs(pathlib.Path(tmp) / "probe-tmpfs", "1m")
    except (OSError, FileNotFoundError):
        return False
    t.close()
    return True


FSYNC_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

/* fsync, fdatasync and syncfs fail with EIO while the file named by
   FLOE_TEST_FSYNC_FAIL exists; otherwise they are the real ones. */
static int failing(void) {
    const char *p = getenv("FLOE_TEST_FSYNC_FAIL");
    return p && access(p, F_OK) == 0;
}
#define WRAP(name) \
    int name(int fd) { \
        static int (*real)(int); \
        if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, #name); \
        if (failing()) { errno = EIO; return -1; } \
        return real(fd); \
    }
WRAP(fsync)
WRAP(fdatasync)
WRAP(syncfs)
"""


def fsync_shim(folder):
    """Builds the LD_PRELOAD library of `FSYNC_SHIM` in `folder`; None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    src = pathlib.Path(folder) / "fsync_shim.c"
    out = pathlib.Path(folder) / "fsync_shim.so"
    src.write_text(FSYNC_SHIM)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(src), "-ldl"], check=True,
                   capture_output=True, timeout=60)
    return out


# ------------------------------------------------------------------ the run table

class Runs:
    """The table the runner prints: one row per run (family, seconds, faults
    injected, operations, anomalies by kind)."""

    rows = []

    @classmethod
    def add(cls, family, seed_, secs, faults, operations, anomalies):
        cls.rows.append({"family": family, "seed": seed_, "seconds": round(secs, 1), "faults": dict(faults),
                         "operations": dict(operations), "anomalies": {k: v for k, v in anomalies.items() if v}})
        print(f"\n[faults] {family}: seed {seed_}, {secs:.0f} s, faults {dict(faults)}, "
              f"operations {dict(operations)}, anomalies {cls.rows[-1]['anomalies'] or 'none'}", flush=True)

    @classmethod
    def table(cls):
        if not cls.rows:
            return ""
        lines = ["| family | seed | seconds | faults injected | operations | anomalies by kind |",
                 "|---|---|---|---|---|---|"]
        for r in cls.rows:
            f = ", ".join(f"{k} {v}" for k, v in sorted(r["faults"].items())) or "-"
            o = ", ".join(f"{k} {v}" for k, v in sorted(r["operations"].items())) or "-"
            a = ", ".join(f"{k} {v}" for k, v in sorted(r["anomalies"].items())) or "none"
            lines.append(f"| {r['family']} | {r['seed']} | {r['seconds']} | {f} | {o} | {a} |")
        return "\n".join(lines)


def keep_history(tmp_path, name, data):
    """Writes a run's history as JSON in the test's folder and prints where."""
    path = pathlib.Path(tmp_path) / f"{name}-history.json"
    with open(path, "w") as f:
        json.dump(data, f, default=str)
    print(f"[faults] history of {name} kept in {path}", flush=True)
    return path
