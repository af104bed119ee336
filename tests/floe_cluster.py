"""A Floe cluster of separate processes on 127.0.0.1 for the end-to-end tests:
metadata nodes (`floe meta`), brokers (`floe broker`) and a Kafka proxy
(`floe proxy`) on a local folder store.

Nothing races for ports: every role starts on port 0 and reports where it is
bound in its `--ports-file`. Metadata node 1 forms the cluster, the others
`--join` it through the addresses already known. A role restarted on its data
asks for the ports it had (the other roles and the clients keep its address).
"""

import os
import pathlib
import signal
import ssl
import subprocess
import time
import urllib.request

from conftest import HARNESS_ENV, _tail, read_ports


# Health probes of a cluster with internal TLS, as the kubelet makes them:
# over TLS, without checking the server's certificate or presenting one.
PROBE_TLS = ssl.create_default_context()
PROBE_TLS.check_hostname = False
PROBE_TLS.verify_mode = ssl.CERT_NONE


def http_ok(url, timeout=1):
    try:
        with urllib.request.urlopen(url, timeout=timeout,
                                    context=PROBE_TLS if url.startswith("https") else None) as r:
            return r.status == 200
    except OSError:
        return False


def wait_http(url, timeout=30):
    """Waits for `url` to answer 200."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if http_ok(url):
            return
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready")


class Proc:
    """A child process with its output in `log_path` (for processes that are
    not a `Role`: given ports of their own or none)."""

    def __init__(self, args, log_path, env=None):
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.p = subprocess.Popen([str(a) for a in args], stdout=self.log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env)

    def kill9(self):
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGKILL)
            self.p.wait(10)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.kill9()
        self.log.close()

    def tail(self, n=30):
        return _tail(self.log_path, n)


class Role:
    """One `floe` process. `make_args(ports)` returns its command line for the
    ports of the previous start (None on the first: listen on port 0)."""

    def __init__(self, name, make_args, tmp_path, env=None):
        self.name = name
        self.make_args = make_args
        self.env = dict(env or {})
        self.log_path = pathlib.Path(tmp_path) / f"{name}.log"
        self.ports_path = pathlib.Path(tmp_path) / f"{name}.ports.json"
        self.ports = None
        self.p = None
        self.starts = 0

    def start(self):
        assert not self.alive(), f"{self.name} is already running"
        if self.ports_path.exists():
            self.ports_path.unlink()
        args = [str(a) for a in self.make_args(self.ports)] + ["--ports-file", str(self.ports_path)]
        self.starts += 1
        with open(self.log_path, "a") as log:
            log.write(f"\n---- start #{self.starts} at {time.time():.3f}: {' '.join(args)}\n")
            log.flush()
            env = {**HARNESS_ENV, **os.environ}
            env.setdefault("RUST_LOG", "info")
            env.update(self.env)
            self.p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=env)
        self.ports = read_ports(self.ports_path, self.p, 60, self.log_path)
        return self

    def port(self, name):
        """The port listener `name` is bound to (0 before the first start)."""
        return int(self.ports[name].rsplit(":", 1)[1]) if self.ports else 0

    def addr(self, name):
        return self.ports[name]

    @property
    def admin(self):
        return self.ports["admin"]

    @property
    def pid(self):
        return self.p.pid if self.p else None

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def kill9(self):
        if self.alive():
            os.kill(self.p.pid, signal.SIGKILL)
            self.p.wait(30)

    def stop(self):
        if self.alive():
            self.p.terminate()
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.kill9()

    def tail(self, n=40):
        return _tail(self.log_path, n)


def listen(ports, name):
    """`--listen` value: the previous port of listener `name`, else port 0."""
    return f"127.0.0.1:{int(ports[name].rsplit(':', 1)[1]) if ports else 0}"


class Cluster:
    """`metas` metadata nodes, `brokers` brokers, `proxies` proxies and, with
    `indexer`, the indexer, on the store endpoints `stores` (`id=URL` each; a
    local folder under `tmp_path` by default). Started by the constructor,
    ready when it returns. `lease_ms=None` leaves the brokers' lease at its
    default. `role_env(name)` gives a role's extra environment (`meta1`,
    `broker1`, `proxy`, `indexer`; `admin` for the floe tools the harness
    runs), and `https` says its internal ports speak TLS."""

    def __init__(self, floe_bin, tmp_path, metas=1, brokers=2, lease_ms=2000, broker_flags=(),
                 proxy_flags=("--default-partitions", "4"), proxies=1, stores=None, indexer=False,
                 indexer_flags=(), role_env=None, https=False):
        self.bin = str(floe_bin)
        # {role name: the `floe` it runs}, for roles that run another build
        # than `bin` (a rolling upgrade); read at each start.
        self.bins = {}
        self.role_env = role_env or (lambda name: {})
        self.scheme = "https" if https else "http"
        self.tmp = pathlib.Path(tmp_path)
        self.store = self.tmp / "store"
        self.store.mkdir(exist_ok=True)
        self.stores = list(stores) if stores else [f"local=file://{self.store}"]
        self.lease_ms = lease_ms
        self.broker_flags = tuple(broker_flags)
        self.metas = {}
        self.brokers = []
        self.proxies = []
        self.indexer = None
        try:
            for i in range(1, metas + 1):
                self.metas[i] = Role(f"meta{i}", self._meta_args(i), self.tmp,
                                     self.role_env(f"meta{i}")).start()
                self.wait_meta_member(i)
            for _ in range(brokers):
                self.add_broker(wait=False)
            for i in range(1, proxies + 1):
                name = "proxy" if i == 1 else f"proxy{i}"
                self.proxies.append(Role(name, self._proxy_args(name, proxy_flags), self.tmp,
                                         self.role_env(name)).start())
            if indexer:
                self.indexer = Role("indexer", self._indexer_args(indexer_flags), self.tmp,
                                    self.role_env("indexer")).start()
            for r in self.roles():
                if r not in self.metas.values():
                    self.wait_ready(r)
        except BaseException:
            self.stop()
            raise

    @property
    def proxy(self):
        """The first proxy (the only one unless `proxies` > 1)."""
        return self.proxies[0] if self.proxies else None

    def add_broker(self, flags=(), wait=True):
        """Starts broker `len(brokers) + 1` with the cluster's flags and `flags`."""
        bid = len(self.brokers) + 1
        b = Role(f"broker{bid}", self._broker_args(bid, self.lease_ms, (*self.broker_flags, *flags)), self.tmp,
                 self.role_env(f"broker{bid}"))
        self.brokers.append(b)
        b.start()
        if wait:
            self.wait_ready(b)
        return b

    def roles(self):
        """Every role, in start order."""
        return [*self.metas.values(), *self.brokers, *self.proxies, *([self.indexer] if self.indexer else [])]

    # command lines
    def bin_of(self, name):
        """The `floe` that role `name` runs at its next start."""
        return str(self.bins.get(name, self.bin))

    def _meta_args(self, i):
        def args(ports):
            a = [self.bin_of(f"meta{i}"), "meta", "--id", i, "--listen", listen(ports, "meta"),
                 "--data-dir", self.tmp / f"m{i}"]
            if i == 1:
                # Forms the cluster on its first start; a no-op once its log has entries.
                a.append("--init")
            else:
                others = [m.addr("meta") for j, m in self.metas.items() if j != i and m.ports]
                a += ["--join", ",".join(others)]
            return a
        return args

    @property
    def meta(self):
        """Every metadata node's address, for `--meta` (comma-separated)."""
        return ",".join(m.addr("meta") for m in self.metas.values())

    def _broker_args(self, bid, lease_ms, flags):
        lease = ["--lease-ms", lease_ms] if lease_ms is not None else []

        def args(ports):
            return [self.bin_of(f"broker{bid}"), "broker", "--id", bid, "--listen", listen(ports, "rpc"),
                    "--meta", self.meta,
                    "--store", ",".join(self.stores), "--admin-listen", listen(ports, "admin"), *lease, *flags]
        return args

    def _indexer_args(self, flags):
        def args(ports):
            return [self.bin_of("indexer"), "indexer", "--meta", self.meta, "--store", ",".join(self.stores),
                    "--admin-listen", listen(ports, "admin"), *flags]
        return args

    def _proxy_args(self, name, flags):
        def args(ports):
            return [self.bin_of(name), "proxy", "--listen", listen(ports, "kafka"), "--meta", self.meta,
                    "--admin-listen", listen(ports, "admin"), *flags]
        return args

    # addresses
    @property
    def kafka(self):
        return self.proxy.addr("kafka")

    @property
    def bootstrap(self):
        """Every proxy's Kafka address, comma-separated (`bootstrap.servers`)."""
        return ",".join(p.addr("kafka") for p in self.proxies)

    # waiting
    def wait_ready(self, role, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if not role.alive():
                raise AssertionError(f"{role.name} exited with {role.p.returncode}:\n{role.tail()}")
            if http_ok(f"{self.scheme}://{role.admin}/readyz"):
                return
            time.sleep(0.1)
        raise AssertionError(f"{role.name} not ready after {timeout}s:\n{role.tail()}")

    def meta_status(self):
        """{node id: (state, leader id, voter ids)} for every metadata node that answers."""
        import re
        out = {}
        for m in re.finditer(r"node (\d+) at \S+: (\w+) term \d+ leader (\d+) .*? members \[(.*)\]",
                             self.meta_status_text()):
            voters = {int(x.split("=")[0]) for x in m.group(4).split(", ") if x and "(learner)" not in x}
            out[int(m.group(1))] = (m.group(2), int(m.group(3)), voters)
        return out

    def meta_status_text(self, addrs=None):
        """What `floe meta status` prints for `addrs` (every metadata node by default)."""
        res = subprocess.run([self.bin, "meta", "status", "--addrs", addrs or self.meta], capture_output=True,
                             text=True, timeout=30, env={**os.environ, **self.role_env("admin")})
        return res.stdout

    def wait_meta_member(self, i, timeout=60):
        """Waits until node `i` is a voter in the view of a leader (a new node joins)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if not self.metas[i].alive():
                raise AssertionError(f"meta{i} exited:\n{self.metas[i].tail()}")
            st = self.meta_status()
            if any(s == "Leader" and i in voters for (s, _, voters) in st.values()):
                return
            time.sleep(0.2)
        raise AssertionError(f"meta{i} not a voter after {timeout}s: {self.meta_status()}")

    def meta_leader(self, timeout=60):
        """The id of the node that says it leads (waits for one)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            leaders = [i for i, (s, _, _) in self.meta_status().items() if s == "Leader"]
            if len(leaders) == 1:
                return leaders[0]
            time.sleep(0.2)
        raise AssertionError(f"no metadata leader after {timeout}s")

    def logs(self):
        return "\n".join(f"---- {r.name}:\n{r.tail(20)}" for r in self.roles())

    def stop_roles(self):
        """Stops every role (SIGTERM), the last started first."""
        for r in reversed(self.roles()):
            r.stop()

    def stop(self):
        self.stop_roles()
