"""End-to-end tests of the `floe` binary: real processes, real files."""

import json
import os
import pathlib
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The environment of every `floe` process the harness starts (`Standalone`
# here, `Role` in tests/floe_cluster.py), unless the test's environment or
# command line sets it. A new classic group's first rebalance waits 3 s by
# default for more members (Kafka's group.initial.rebalance.delay.ms); the
# tests start their members together or wait for the assignment they
# expect, so 300 ms (what the group tests set themselves) takes nothing
# from them and saves about 2.7 s per group in CI.
HARNESS_ENV = {"FLOE_GROUP_INITIAL_REBALANCE_DELAY_MS": "300"}


def _build_bin(package, name) -> pathlib.Path:
    """Builds binary `name` of workspace package `package` (debug) and returns its path."""
    subprocess.run(["cargo", "build", "--quiet", "-p", package, "--bin", name], cwd=ROOT, check=True)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    path = target / "debug" / name
    assert path.exists(), path
    return path


@pytest.fixture(scope="session")
def floe_bin() -> pathlib.Path:
    """Builds the `floe` binary (debug) once per session and returns its path;
    with FLOE_BIN set, uses that binary as it is (a long soak keeps running
    the build it started with while the tree is rebuilt)."""
    if os.environ.get("FLOE_BIN"):
        path = pathlib.Path(os.environ["FLOE_BIN"])
        assert path.exists(), path
        return path
    return _build_bin("floe", "floe")


@pytest.fixture(scope="session")
def floe_dev_bin() -> pathlib.Path:
    """Builds `floe-dev`, the developers' test drivers (crate `floe-devtools`),
    once per session and returns its path; with FLOE_DEV_BIN set, uses
    that binary as it is."""
    if os.environ.get("FLOE_DEV_BIN"):
        path = pathlib.Path(os.environ["FLOE_DEV_BIN"])
        assert path.exists(), path
        return path
    return _build_bin("floe-devtools", "floe-dev")


def read_ports(path, proc=None, timeout=60, log_path=None):
    """Waits for the `--ports-file` a `floe` role writes once every listener is
    bound (port 0 picks a free port) and returns it: {"kafka": "127.0.0.1:40123", ...}.
    Fails early when `proc` (a Popen) exits first."""
    path = pathlib.Path(path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode} before writing {path}; log tail:\n"
                                 f"{_tail(log_path) if log_path else ''}")
        time.sleep(0.05)
    raise AssertionError(f"{path} not written after {timeout}s; log tail:\n{_tail(log_path) if log_path else ''}")


def port_of(addr):
    """"127.0.0.1:40123" -> 40123."""
    return int(addr.rsplit(":", 1)[1])


def _tail(path, lines=60):
    try:
        text = pathlib.Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class Standalone:
    """One `floe standalone` process on 127.0.0.1 with its own data dir and ports.

    The first start listens on port 0 everywhere and reads the bound ports from
    `--ports-file`; a restart asks for the same ports again, so that clients keep
    their bootstrap address. Options are the contract's flags without the dashes (`compaction_interval_ms=500`
    becomes `--compaction-interval-ms 500`). stdout and stderr go to `log_path`;
    every (re)start appends to it, behind a marker line.
    """

    READY_TIMEOUT = 60

    def __init__(self, floe_bin, workdir, name="standalone", **options):
        self.bin = str(floe_bin)
        self.name = name
        workdir = pathlib.Path(workdir)
        self.data_dir = workdir / f"{name}-data"
        self.log_path = workdir / f"{name}.log"
        self.ports_path = workdir / f"{name}.ports.json"
        # Known once the first start has reported them (0: let the system pick).
        self.kafka_port = 0
        self.admin_port = 0
        self.meta_port = 0
        self.options = {k.replace("_", "-"): v for k, v in options.items()}
        self.proc = None
        self.starts = 0

    # addresses
    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def admin_url(self):
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def args(self):
        args = [self.bin, "standalone",
                "--data-dir", str(self.data_dir),
                "--kafka-listen", self.bootstrap,
                "--admin-listen", f"127.0.0.1:{self.admin_port}",
                "--meta-listen", f"127.0.0.1:{self.meta_port}",
                "--ports-file", str(self.ports_path)]
        for flag, value in self.options.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            args += [f"--{flag}", str(value)]
        return args

    def metric(self, name, labels=""):
        """The value of one series of /metrics (`labels` as written there,
        `{reason="x"}`), 0 when it is absent."""
        with urllib.request.urlopen(self.admin_url + "/metrics", timeout=10) as res:
            text = res.read().decode()
        m = re.search(r"^%s%s (\d+(?:\.\d+)?)$" % (re.escape(name), re.escape(labels)), text, re.M)
        return float(m.group(1)) if m else 0.0

    # lifecycle
    def start(self):
        assert not self.alive(), f"{self.name} is already running (pid {self.pid})"
        self.starts += 1
        with open(self.log_path, "a") as log:
            log.write(f"\n---- start #{self.starts}: {' '.join(self.args())}\n")
            log.flush()
            env = {**HARNESS_ENV, **os.environ}
            env.setdefault("RUST_LOG", "info")
            env.setdefault("RUST_BACKTRACE", "1")
            if self.ports_path.exists():
                self.ports_path.unlink()
            self.proc = subprocess.Popen(self.args(), stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         env=env)
        ports = read_ports(self.ports_path, self.proc, self.READY_TIMEOUT, self.log_path)
        self.kafka_port = port_of(ports["kafka"])
        self.admin_port = port_of(ports["admin"])
        self.meta_port = port_of(ports["meta"])
        self.wait_ready()
        return self

    def wait_ready(self, timeout=None):
        deadline = time.monotonic() + (timeout or self.READY_TIMEOUT)
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited with {self.proc.returncode} before /readyz; log tail:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.admin_url + "/readyz", timeout=2) as res:
                    if res.status == 200:
                        return
                    last = res.status
            except (urllib.error.URLError, OSError) as e:
                last = e
            time.sleep(0.1)
        raise AssertionError(f"{self.name} not ready after {timeout or self.READY_TIMEOUT}s "
                             f"(last answer: {last!r}); log tail:\n{self.log_tail()}")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        """SIGKILL by pid; returns once the process is reaped."""
        assert self.alive(), f"{self.name} is not running"
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self, timeout=30):
        """SIGTERM by pid, waits for the exit and returns the exit code. A process
        still running after `timeout` seconds is killed and the call fails."""
        assert self.alive(), f"{self.name} is not running"
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
            raise AssertionError(f"{self.name} still running {timeout}s after SIGTERM; log tail:\n{self.log_tail()}")

    def restart(self):
        """Starts again on the same data dir and ports (terminating first if running)."""
        if self.alive():
            self.terminate()
        return self.start()

    def stop(self):
        """Teardown: ends the process by pid, whatever state it is in."""
        if self.alive():
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)

    def log_tail(self, lines=60):
        return _tail(self.log_path, lines)

    def rss_bytes(self):
        """Resident memory of the process (from /proc), for allocation checks."""
        for line in pathlib.Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def __repr__(self):
        return f"Standalone(pid={self.pid}, kafka={self.bootstrap}, admin={self.admin_url})"


@pytest.fixture
def standalone_factory(floe_bin, tmp_path, request):
    """Starts `floe standalone` processes with options: `standalone_factory(compaction_interval_ms=500)`.
    Every process started is ended at teardown; on a failed test the log tails are
    added to the report."""
    started = []
    request.node._floe_standalones = started

    def start(name=None, **options):
        s = Standalone(floe_bin, tmp_path, name=name or f"standalone{len(started) or ''}", **options)
        started.append(s)
        return s.start()

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def standalone(standalone_factory):
    """One `floe standalone` with default options, ready (GET /readyz answered 200)."""
    return standalone_factory()


@pytest.fixture(scope="module")
def module_standalone(floe_bin, tmp_path_factory, request):
    """One `floe standalone` with default options shared by a module's tests
    (each uses its own topics and groups)."""
    s = Standalone(floe_bin, tmp_path_factory.mktemp(request.module.__name__))
    s.start()
    yield s
    s.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for s in getattr(item, "_floe_standalones", []):
            report.sections.append((f"{s.name} log tail ({s.log_path})", s.log_tail()))


class KafkaKit:
    """Small helpers on confluent-kafka shared by the Kafka tests (imported lazily,
    so the other tests run without it)."""

    @staticmethod
    def create_topic(bootstrap, name, partitions=1, config=None, timeout=30):
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                                config=dict(config or {}))], operation_timeout=timeout)
        futures[name].result(timeout=timeout)
        # The topic is usable once Metadata lists it with a leader for every partition.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            md = admin.list_topics(topic=name, timeout=10).topics.get(name)
            if md is not None and md.error is None and len(md.partitions) == partitions \
                    and all(p.leader >= 0 for p in md.partitions.values()):
                return
            time.sleep(0.1)
        raise AssertionError(f"topic {name} created but not in metadata with leaders after {timeout}s")

    @staticmethod
    def consumer(bootstrap, **extra):
        from confluent_kafka import Consumer

        # Consumer groups are not implemented yet: a group.id is required by the
        # client, but only assign() is used and nothing is committed.
        conf = {"bootstrap.servers": bootstrap, "group.id": "floe-tests-assign-only",
                "enable.auto.commit": False, "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest"}
        conf.update(extra)
        return Consumer(conf)

    @staticmethod
    def watermarks(bootstrap, topic, partition=0):
        from confluent_kafka import TopicPartition

        c = KafkaKit.consumer(bootstrap)
        try:
            return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
        finally:
            c.close()

    @staticmethod
    def consume(bootstrap, topic, partitions=(0,), start=None, timeout=60):
        """Reads every partition from `start` (default: the beginning) up to the high
        watermark read before starting. Returns [(partition, offset, key, value,
        headers, (timestamp_type, timestamp))], in fetch order per partition."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        c = KafkaKit.consumer(bootstrap)
        try:
            # Per partition, the offset reading stops at: the high watermark, or
            # nothing to read when the range [max(start, low), high) is empty.
            ends, pos = {}, {}
            for p in partitions:
                low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                ends[p] = high
                pos[p] = max(low, start or 0)
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING if start is None else start) for p in partitions])
            out, errors = [], []
            deadline = time.monotonic() + timeout
            while any(pos[p] < ends[p] for p in partitions):
                if time.monotonic() > deadline:
                    raise AssertionError(f"consume {topic}: timed out after {timeout}s; next offsets {pos}, "
                                         f"high watermarks {ends}, {len(out)} records, errors {errors[-5:]}")
                for m in c.consume(num_messages=1000, timeout=0.5):
                    if m.error():
                        errors.append(m.error())
                        continue
                    out.append((m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.timestamp()))
                    pos[m.partition()] = m.offset() + 1
            return out
        finally:
            c.close()


@pytest.fixture(scope="session")
def kit():
    return KafkaKit
