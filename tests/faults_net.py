"""Network and clock faults for a Floe cluster of real processes on 127.0.0.1.

The network: every server endpoint of the cluster (each metadata node's
port, each broker's RPC port) sits behind a `Link`, a TCP relay on a port of
its own that the endpoint advertises (`--advertise`), so that every
connection to it, from any role, goes through the relay. The relay tells
who connected by the process holding the other end of the connection
(/proc/net/tcp gives the socket's inode, /proc/<pid>/fd the process), and
the `Net` holds which links are cut between which roles and in which
direction:

    net.cut("broker1", "meta2")            # both directions
    net.cut_oneway("broker1", "meta2")     # broker1's bytes to meta2 stop; meta2's still reach broker1
    net.partition(["meta1"], ["meta2", "meta3", "broker1", ...])
    net.heal(reset=True)                   # every cut gone; held connections reset

A cut holds bytes (as a partition does to TCP: nothing arrives, nothing is
refused); a new connection across a cut is accepted and connects to its
server only once the cut heals. `heal(reset=True)` resets the connections
that had bytes held, like a TCP stack giving up; `reset=False` delivers the
held bytes late, like a retransmission that gets through. The processes
themselves only ever see 127.0.0.1.

The clocks: each role may run with libfaketime preloaded (Debian's
`faketime` package), reading its offset from a file the test writes
(`Clock.set(seconds)`), at most a second late (`FAKETIME_CACHE_DURATION=1`).
`DONT_FAKE_MONOTONIC=1` keeps CLOCK_MONOTONIC true: the attack is on the
wall clock, which is what the metadata service measures leases with
(`metadata/src/clock.rs`: the heartbeat's `now_ms`, taken by the node that
receives it, and the leader's `ExpireLeases`); the broker counts its own
lease on the monotonic clock (`broker/src/partitions/lease.rs`). A clock that
runs fast is an offset the test raises steadily (`Clock.drift`).
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import struct
import threading
import time

from floe_cluster import Cluster, listen
from s3_cluster import Relay

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
UP, DOWN = "up", "down"  # client-to-server bytes, server-to-client bytes


def faketime_available():
    return pathlib.Path(FAKETIME_LIB).exists()


def _tcp_table():
    """{(local port, remote port): inode} of every TCP socket of this network namespace."""
    out = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    out[(int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16))] = fields[9]
        except OSError:
            continue
    return out


def _socket_inodes(pid):
    """The inodes of the sockets process `pid` holds."""
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


# Closes a socket, with an RST when `reset` (as the S3 relay does).
_close = Relay._close


class _Conn:
    """One relayed connection: who opened it, its two sockets, whether a cut held its bytes."""

    def __init__(self, client, client_port):
        self.src = None  # the role that opened it, once asked (`Net.identify`)
        self.identified = False
        self.client_port = client_port
        self.client = client
        self.upstream = None
        self.held = False
        self.dead = False

    def kill(self, reset):
        self.dead = True
        for s in (self.client, self.upstream):
            if s is not None:
                _close(s, reset)


class Link:
    """The relay in front of server `name` (a role), to `upstream()` = (host,
    port) resolved at each connection (the server may restart)."""

    def __init__(self, net, name, upstream):
        self.net, self.name, self.upstream = net, name, upstream
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.conns = set()
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, name=f"link-{name}", daemon=True).start()

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def close(self):
        self.closed = True
        _close(self.sock)
        self.kill(lambda c: True, reset=False)

    def kill(self, which, reset):
        """Closes the connections `which(conn)` selects."""
        with self.lock:
            doomed = [c for c in self.conns if which(c)]
            self.conns.difference_update(doomed)
        for c in doomed:
            c.kill(reset)
        return len(doomed)

    def _accept(self):
        while not self.closed:
            try:
                c, peer = self.sock.accept()
                threading.Thread(target=self._serve, args=(c, peer[1]), daemon=True).start()
            except (OSError, RuntimeError):
                # Closed, or out of descriptors or threads for a moment: the
                # link must not stop accepting for good.
                time.sleep(0.05)

    def _serve(self, client, client_port):
        conn = _Conn(client, client_port)
        with self.lock:
            self.conns.add(conn)
        # Who opened it matters only while a cut ends at this link; otherwise
        # it is asked when one is made (no /proc reads while nothing is cut).
        if self.net.cuts_at(self.name):
            self.net.identify(self, [conn])
        # Across a cut the connection reaches its server only once the cut heals.
        while self.net.blocked(conn.src, self.name, UP) and not (conn.dead or self.closed):
            conn.held = True
            time.sleep(0.02)
        if conn.dead or self.closed:
            return
        try:
            conn.upstream = socket.create_connection(self.upstream(), timeout=5)
            conn.upstream.settimeout(None)
        except OSError:
            # Nobody listens there: the client sees its connection reset.
            self.kill(lambda c: c is conn, reset=True)
            return
        threading.Thread(target=self._pump, args=(conn, client, conn.upstream, UP), daemon=True).start()
        self._pump(conn, conn.upstream, client, DOWN)

    def _pump(self, conn, src, dst, direction):
        try:
            while not conn.dead:
                data = src.recv(65536)
                if not data:
                    break
                while self.net.blocked(conn.src, self.name, direction) and not conn.dead:
                    conn.held = True
                    time.sleep(0.02)
                if conn.dead:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            if not conn.dead:
                self.kill(lambda c: c is conn, reset=False)


def _children():
    """The pids of this process's children."""
    out = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            continue
    return out


def _role_name(pid):
    """The role a `floe` child process runs as: the name of its `--ports-file`
    (`<tmp>/<name>.ports.json`); None for other processes (the test's tools)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return None
    for flag, value in zip(args, args[1:]):
        if flag == b"--ports-file":
            return pathlib.Path(value.decode()).name.removesuffix(".ports.json")
    return None


class Net:
    """The links of a cluster and the cuts between its roles; a connection
    comes from the child process holding its other end, named by its ports
    file."""

    def __init__(self):
        self.names = {}  # pid -> role name (None: not a role)
        self.lookup = threading.Lock()
        self.links = {}
        self.cuts = {}  # (src, dst) -> {UP, DOWN}: directions held on connections src opened to dst
        self.lock = threading.Lock()
        self.unknown = 0  # connections from no role (the test's own tools): never cut

    def add_link(self, name, upstream):
        self.links[name] = Link(self, name, upstream)
        return self.links[name]

    def source_of(self, client_port, server_port):
        """The role that opened the connection from `client_port` to a link
        at `server_port` (None: not a role, e.g. the test's own tools)."""
        return self._lookup([(client_port, server_port)])[0]

    def _lookup(self, pairs):
        """The roles behind connections (client port, server port), from one
        read of the TCP table and of the roles' sockets for all of them, one
        lookup at a time: a read per connection, with dozens arriving at
        once when a cut is made or heals, made the relays the bottleneck
        (peers timed out and reconnected, and made it worse)."""
        with self.lookup:
            table = _tcp_table()
            sockets = {}
            for pid in _children():
                if pid not in self.names:
                    self.names[pid] = _role_name(pid)
                if self.names[pid] is not None:
                    for i in _socket_inodes(pid):
                        sockets[i] = self.names[pid]
        out = [sockets.get(table.get(pair)) for pair in pairs]
        self.unknown += sum(1 for name in out if name is None)
        return out

    def cuts_at(self, dst):
        """Whether some cut holds bytes on connections to link `dst`."""
        return any(d == dst and v for (_, d), v in list(self.cuts.items()))

    def identify(self, link, conns):
        """Names the role behind each of `conns` (connections to `link`) not yet named."""
        todo = [c for c in conns if not c.identified and not c.dead]
        if not todo:
            return
        for c, name in zip(todo, self._lookup([(c.client_port, link.port) for c in todo])):
            c.src = name
            c.identified = True

    def blocked(self, src, dst, direction):
        return src is not None and direction in self.cuts.get((src, dst), ())

    def _hold(self, src, dst, direction):
        with self.lock:
            self.cuts.setdefault((src, dst), set()).add(direction)
        # Connections accepted from now on are named as they come; those
        # already open are named now (the cut holds them a moment later).
        link = self.links.get(dst)
        if link is not None:
            with link.lock:
                conns = list(link.conns)
            self.identify(link, conns)

    def cut(self, a, b):
        """Nothing passes between roles `a` and `b`, either way, on any connection."""
        self.cut_oneway(a, b)
        self.cut_oneway(b, a)

    def cut_oneway(self, a, b):
        """Bytes from `a` to `b` are held; bytes from `b` to `a` pass."""
        self._hold(a, b, UP)  # connections a opened to b: a's requests
        self._hold(b, a, DOWN)  # connections b opened to a: a's answers

    def partition(self, side_a, side_b):
        """Cuts every link between the two sides."""
        for a in side_a:
            for b in side_b:
                self.cut(a, b)

    def heal(self, reset=False):
        """Removes every cut. With `reset`, connections whose bytes a cut
        held are reset (the other end's TCP gave up); otherwise the held
        bytes are delivered now. Returns how many were reset."""
        with self.lock:
            self.cuts = {}
        n = 0
        for link in self.links.values():
            if reset:
                n += link.kill(lambda c: c.held, reset=True)
            with link.lock:
                for c in link.conns:
                    c.held = False
        return n

    def describe(self):
        return sorted(f"{s}->{d}:{'/'.join(sorted(v))}" for (s, d), v in self.cuts.items() if v)

    def close(self):
        for link in self.links.values():
            link.close()


class Clock:
    """The wall clock of one role as libfaketime shows it: an offset in
    seconds from the true time, read from `path`. `set` jumps it; `drift`
    makes it run fast (rate > 1) or slow (rate < 1) for `seconds` by small
    steps, then leaves it where it got to."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.offset = 0.0
        self.set(0.0)

    def set(self, seconds):
        self.offset = float(seconds)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{self.offset:+.3f}\n")
        os.replace(tmp, self.path)

    def drift(self, rate, seconds, stop=None, step=0.25):
        end = time.monotonic() + seconds
        last = time.monotonic()
        while time.monotonic() < end and not (stop and stop.is_set()):
            time.sleep(step)
            now = time.monotonic()
            self.set(self.offset + (rate - 1.0) * (now - last))
            last = now

    def env(self):
        """The environment of a process whose wall clock this is."""
        return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME_TIMESTAMP_FILE": str(self.path),
                "FAKETIME_CACHE_DURATION": "1", "DONT_FAKE_MONOTONIC": "1"}


class NetCluster(Cluster):
    """A `Cluster` whose metadata nodes and brokers are reached, by every
    role, only through their `Link`s in `self.net` (each advertises its
    link's address), and, with `clocks`, whose roles run with a `Clock` each
    (`self.clocks[name]`, at offset 0 until set)."""

    def __init__(self, floe_bin, tmp_path, clocks=False, **kw):
        self.net = Net()
        self.clocks = {}
        self._with_clocks = clocks and faketime_available()
        self._tmp_clock = pathlib.Path(tmp_path)
        self.tmp = pathlib.Path(tmp_path)
        self.metas, self.brokers, self.proxies, self.indexer = {}, [], [], None
        try:
            super().__init__(floe_bin, tmp_path, role_env=self._env, **kw)
        except BaseException:
            self.net.close()
            raise

    def _env(self, name):
        if not self._with_clocks or name == "admin":
            return {}
        self.clocks[name] = Clock(self._tmp_clock / f"clock-{name}.txt")
        return self.clocks[name].env()

    def _link_for(self, name, port_name):
        """The link in front of role `name`'s listener `port_name`, to the
        address its ports file gives (written once it is bound, each start)."""
        if name not in self.net.links:
            ports = self.tmp / f"{name}.ports.json"

            def upstream():
                try:
                    host, port = json.loads(ports.read_text())[port_name].rsplit(":", 1)
                except (OSError, ValueError, KeyError) as e:
                    raise ConnectionRefusedError(f"{name} has no {port_name} port yet") from e
                return host, int(port)
            self.net.add_link(name, upstream)
        return self.net.links[name]

    def _meta_args(self, i):
        link = self._link_for(f"meta{i}", "meta")

        def args(ports):
            a = [self.bin, "meta", "--id", i, "--listen", listen(ports, "meta"), "--advertise", link.addr,
                 "--data-dir", self.tmp / f"m{i}"]
            if i == 1:
                a.append("--init")
            else:
                a += ["--join", ",".join(self.net.links[f"meta{j}"].addr for j in self.metas if j != i)]
            return a
        return args

    @property
    def meta(self):
        return ",".join(self.net.links[f"meta{i}"].addr for i in self.metas)

    def _broker_args(self, bid, lease_ms, flags):
        link = self._link_for(f"broker{bid}", "rpc")
        inner = super()._broker_args(bid, lease_ms, flags)
        return lambda ports: [*inner(ports), "--advertise", link.addr]

    def meta_names(self):
        return [f"meta{i}" for i in self.metas]

    def broker_names(self):
        return [b.name for b in self.brokers]

    def proxy_names(self):
        return [p.name for p in self.proxies]

    def stop(self):
        try:
            super().stop()
        finally:
            self.net.close()


def latest_offset(addr, topic, partition, timeout=3.0):
    """The high watermark of `topic`/`partition` as the Kafka listener at
    `addr` answers a ListOffsets (v1, latest) sent to it alone: a client
    library would send it to whichever listener its metadata names leader.
    Returns (error code, offset)."""
    name = topic.encode()
    body = struct.pack(">hhi", 2, 1, 1) + struct.pack(">h", 6) + b"probes"
    body += struct.pack(">ii", -1, 1) + struct.pack(">h", len(name)) + name
    body += struct.pack(">iiq", 1, partition, -1)
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _recv_exactly(s, 4))[0]
        resp = _recv_exactly(s, size)
    # correlation id, 1 topic (its name), 1 partition: index, error, timestamp, offset
    pos = 4 + 4
    (n,) = struct.unpack_from(">h", resp, pos)
    pos += 2 + n + 4
    _, error, _, offset = struct.unpack_from(">ihqq", resp, pos)
    return error, offset


def _recv_exactly(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed mid-answer")
        buf += chunk
    return buf
