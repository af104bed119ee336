#!/usr/bin/env python3
"""Side-by-side benchmark of Kafka-compatible brokers on object storage
(issue 12): Floe standalone on a local folder, Floe as a cluster of processes
on S3 (moto; a real S3 server when one is installed), Tansu on SQLite and on
the same S3 servers, each in turn, in one run, with the same load generator.

    .venv/bin/python bench/compare.py                # long mode: every target and workload
    .venv/bin/python bench/compare.py --quick        # seconds: the test suite runs this
    .venv/bin/python bench/compare.py --targets floe-local,tansu-sqlite --workloads W1,W3

What it builds, once, into the cache (~/.cache/floe-bench, or $FLOE_BENCH_CACHE):
  - rdkafka_performance from the librdkafka sources the `rdkafka-sys` crate
    ships (fetched with cargo, built with librdkafka's configure/make without
    SSL, SASL, zstd or curl);
  - Tansu (`cargo install tansu --features dynostore,libsql`), started in the
    background at the beginning of a long run;
  - Floe's release binary comes from `cargo build --release` (or $FLOE_BIN).

Workloads (see docs/benchmarks.md): W1 throughput of 1 KiB records and the
catch-up read of them (W1-read); W2 100-byte records on 1 and 100
partitions; W3 latency at fixed rates from the scheduled send time (a
generator on confluent-kafka: rdkafka_performance stamps the time a record
is handed over, not when it was due, so it hides queueing); W4 S3 with 20 ms
added round trip, store requests per GiB; W5 catch-up read of a backlog
while producing 10 MB/s; W6 time from `kill -9` of a broker to its
partitions taking writes again (cluster targets).

Per run: MB/s, records/s, percentiles, CPU-seconds of the server processes
per GiB (from /proc/PID/stat; beside them the S3 server's and the load
generator's, which share the machine's cores), their peak RSS (VmHWM, reset before each run
through /proc/PID/clear_refs), store requests per GiB (from the S3 server's
request log; on a local folder, Floe's floe_store_writes_total).
Output: results.md, results.json and charts (PNG) in --out (default
bench/results), the processes' logs in --out/raw.
"""

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import pathlib
import platform
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
import uuid

ROOT = pathlib.Path(__file__).resolve().parent.parent
CACHE = pathlib.Path(os.environ.get("FLOE_BENCH_CACHE", pathlib.Path.home() / ".cache" / "floe-bench"))
RDKAFKA_SYS = "4.10.0+2.12.1"  # librdkafka 2.12.1
TANSU_VERSION = "0.6.0"
GIB = 1 << 30
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
S3_KEY, S3_SECRET = "bench", "bench-secret"
GARAGE_VERSION = "2.5.0"
GARAGE_KEY, GARAGE_SECRET = "GK" + "b3" * 12, "5ec7" * 16


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_ok(url, timeout=2):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


def wait_until(what, pred, timeout, procs=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited with {p.p.returncode} while waiting for {what}:\n{p.tail()}")
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what}: not after {timeout} s")


# ---------------------------------------------------------------- builds

def run_logged(args, log_path, **kw):
    with open(log_path, "ab") as f:
        return subprocess.run([str(a) for a in args], stdout=f, stderr=subprocess.STDOUT, **kw)


def build_rdkafka_performance():
    """rdkafka_performance of librdkafka 2.12 as the rdkafka-sys crate ships
    it; cached. Returns its path."""
    out = CACHE / "bin" / "rdkafka_performance"
    if out.exists():
        return out
    (CACHE / "bin").mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    blog = CACHE / "rdkafka-build.log"
    crate = fetch_crate("rdkafka-sys", RDKAFKA_SYS, blog)
    src = CACHE / "src"
    src.mkdir(exist_ok=True)
    with tarfile.open(crate) as t:
        t.extractall(src, filter="data")
    lib = src / f"rdkafka-sys-{RDKAFKA_SYS}" / "librdkafka"
    log(f"building rdkafka_performance in {lib} (log: {blog})")
    for step in (["./configure", "--disable-ssl", "--disable-gssapi", "--disable-zstd", "--disable-curl",
                  "--disable-lz4-ext"],
                 ["make", f"-j{os.cpu_count() or 2}", "-C", "src"],
                 ["make", "-C", "examples", "rdkafka_performance"]):
        if run_logged(["nice", *step], blog, cwd=lib).returncode != 0:
            raise RuntimeError(f"building librdkafka failed at {step}; see {blog}")
    shutil.copy2(lib / "examples" / "rdkafka_performance", out)
    secs = time.monotonic() - t0
    (CACHE / "rdkafka_performance.build-seconds").write_text(f"{secs:.0f}\n")
    log(f"rdkafka_performance built in {secs:.0f} s")
    return out


def fetch_crate(name, version, blog):
    """The .crate file of `name` `version`, fetched by cargo (through the
    registry as this machine's cargo is set up) into its registry cache."""
    found = list((pathlib.Path.home() / ".cargo" / "registry" / "cache").glob(f"*/{name}-{version}.crate"))
    if found:
        return found[0]
    proj = CACHE / "fetch"
    (proj / "src").mkdir(parents=True, exist_ok=True)
    (proj / "Cargo.toml").write_text(
        f'[package]\nname = "floe-bench-fetch"\nversion = "0.0.0"\nedition = "2021"\n\n'
        f'[dependencies]\n{name} = {{ version = "={version}", default-features = false }}\n')
    (proj / "src" / "main.rs").write_text("fn main() {}\n")
    if run_logged(["cargo", "fetch"], blog, cwd=proj).returncode != 0:
        raise RuntimeError(f"cargo fetch of {name} {version} failed; see {blog}")
    found = list((pathlib.Path.home() / ".cargo" / "registry" / "cache").glob(f"*/{name}-{version}.crate"))
    if not found:
        raise RuntimeError(f"{name}-{version}.crate not in cargo's registry cache after cargo fetch")
    return found[0]


class CargoInstall:
    """`cargo install NAME --version V` into the cache (its own --root and
    target dir, niced), in the background: a long run starts the builds it
    will need first and waits for each when its target comes."""

    def __init__(self, name, version, features, default_features=True):
        self.name = name
        self.root = CACHE / name
        self.bin = self.root / "bin" / name
        self.args = ["nice", "-n", "10", "cargo", "install", name, "--version", version, "--locked",
                     "--features", features, "--root", str(self.root)]
        if not default_features:
            self.args.append("--no-default-features")
        self.proc = None
        self.log = CACHE / f"{name}-build.log"

    def start(self):
        if self.bin.exists() or self.proc:
            return
        CACHE.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, CARGO_TARGET_DIR=str(CACHE / f"{self.name}-target"), CARGO_INCREMENTAL="0")
        log(f"building {self.name} in the background (log: {self.log})")
        self.f = open(self.log, "ab")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(self.args, stdout=self.f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env)

    def wait(self):
        if self.bin.exists():
            return self.bin
        if not self.proc:
            self.start()
        log(f"waiting for the {self.name} build")
        self.proc.wait()
        if not self.bin.exists():
            raise RuntimeError(f"cargo install {self.name} failed; see {self.log}")
        log(f"{self.name} built in {time.monotonic() - self.t0:.0f} s")
        return self.bin


def build_floe():
    if os.environ.get("FLOE_BIN"):
        p = pathlib.Path(os.environ["FLOE_BIN"])
        if not p.exists():
            raise RuntimeError(f"FLOE_BIN={p} does not exist")
        return p
    log("cargo build --release --bin floe")
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "floe"], cwd=ROOT, check=True)
    return pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "floe"


# ---------------------------------------------------------------- processes

class Proc:
    """A child process with its output in a log file; stopped by pid."""

    def __init__(self, name, args, log_dir, env=None, cwd=None):
        self.name = name
        self.log_path = pathlib.Path(log_dir) / f"{name}.log"
        self.f = open(self.log_path, "ab")
        self.f.write(f"\n---- {time.time():.3f}: {' '.join(map(str, args))}\n".encode())
        self.f.flush()
        self.p = subprocess.Popen([str(a) for a in args], stdout=self.f, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env, cwd=cwd)

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

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
        self.f.close()

    def tail(self, n=30):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def cpu_seconds(pid):
    """User + system CPU-seconds of a live process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def reset_peak_rss(pid):
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")


def peak_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def read_ports(path, proc, timeout=60):
    wait_until(f"{path.name}", path.exists, timeout, [proc])
    time.sleep(0.05)
    return json.loads(path.read_text())


# ---------------------------------------------------------------- S3 servers

class Moto:
    """moto's S3 server on a free port; counts requests from its access log."""

    name = "moto"
    key, secret = S3_KEY, S3_SECRET
    floe_bucket, tansu_bucket = "floe", "tansu"

    def __init__(self, work):
        moto = pathlib.Path(sys.executable).parent / "moto_server"
        if not moto.exists():
            raise RuntimeError(f"{moto} missing: pip install -r tests/requirements.txt")
        self.proc = Proc("moto", [moto, "-H", "127.0.0.1", "-p", 0], work)
        self.port = None

        def ready():
            if self.port is None:
                m = re.search(r"Running on http://127\.0\.0\.1:(\d+)", self.proc.log_path.read_text(errors="replace"))
                if not m:
                    return False
                self.port = int(m.group(1))
            return http_ok(f"http://127.0.0.1:{self.port}/moto-api/")

        wait_until("moto", ready, 60, [self.proc])
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def mark(self):
        return self.proc.log_path.stat().st_size

    def requests_since(self, mark):
        """(writes, reads) since `mark`: PUT and POST (multipart) are writes,
        GET and HEAD reads."""
        with open(self.proc.log_path, "rb") as f:
            f.seek(mark)
            text = f.read().decode(errors="replace")
        # werkzeug colours some lines (206 answers) with ANSI escapes
        methods = re.findall(r'"(?:\x1b\[[0-9;]*m)*(PUT|POST|GET|HEAD|DELETE) /', text)
        return (sum(m in ("PUT", "POST") for m in methods), sum(m in ("GET", "HEAD") for m in methods))

    def create_bucket(self, bucket):
        import boto3
        s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                          aws_access_key_id=S3_KEY, aws_secret_access_key=S3_SECRET)
        with contextlib.suppress(Exception):
            s3.create_bucket(Bucket=bucket)

    def stop(self):
        self.proc.stop()


class Garage:
    """Garage (a real S3 server, `cargo install garage`) as one node in a
    folder of its own, with one bucket (`bench`) and one key. Counts
    requests from its log (one line per S3 request at INFO)."""

    name = "garage"
    bucket = "bench"
    key, secret = GARAGE_KEY, GARAGE_SECRET
    floe_bucket = tansu_bucket = "bench"

    def __init__(self, garage, work):
        d = pathlib.Path(work) / "garage"
        d.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        cfg = d / "garage.toml"
        cfg.write_text(f"""metadata_dir = "{d}/meta"
data_dir = "{d}/data"
db_engine = "lmdb"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:{free_port()}"
rpc_secret = "{os.urandom(32).hex()}"

[s3_api]
s3_region = "us-east-1"
api_bind_addr = "127.0.0.1:{self.port}"
""")
        env = dict(os.environ, RUST_LOG="garage=info,garage_api_common=info,garage_api_s3=info",
                   GARAGE_DEFAULT_ACCESS_KEY=GARAGE_KEY, GARAGE_DEFAULT_SECRET_KEY=GARAGE_SECRET,
                   GARAGE_DEFAULT_BUCKET=self.bucket)
        self.proc = Proc("garage", [garage, "-c", cfg, "server", "--single-node", "--default-bucket"], work, env=env)
        self.endpoint = f"http://127.0.0.1:{self.port}"

        def ready():
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return "bucket" in self.proc.log_path.read_text(errors="replace").lower()

        wait_until("garage", ready, 60, [self.proc])
        time.sleep(1)

    def mark(self):
        return self.proc.log_path.stat().st_size

    def requests_since(self, mark):
        with open(self.proc.log_path, "rb") as f:
            f.seek(mark)
            text = f.read().decode(errors="replace")
        methods = re.findall(r"\b(PUT|POST|GET|HEAD|DELETE) /", text)
        return (sum(m in ("PUT", "POST") for m in methods), sum(m in ("GET", "HEAD") for m in methods))

    def create_bucket(self, bucket, endpoint=None):
        pass  # one bucket, made at start

    def stop(self):
        self.proc.stop()


class DelayRelay:
    """A TCP relay to `upstream_port` that delays every chunk by `delay`
    seconds in each direction without limiting throughput (chunks are
    forwarded in order at their arrival time plus the delay): `2 × delay` of
    added round trip, as a store far away."""

    def __init__(self, upstream_port, delay):
        self.upstream_port = upstream_port
        self.delay = delay
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(10)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._conn, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _conn(self, cr, cw):
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            cw.close()
            return
        await asyncio.gather(self._pump(cr, uw), self._pump(ur, cw), return_exceptions=True)

    async def _pump(self, r, w):
        q = asyncio.Queue()

        async def writer():
            while True:
                due, data = await q.get()
                if data is None:
                    break
                wait = due - self.loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                w.write(data)
                await w.drain()
            w.close()

        wt = self.loop.create_task(writer())
        try:
            while True:
                data = await r.read(262144)
                await q.put((self.loop.time() + self.delay, data or None))
                if not data:
                    break
        except OSError:
            await q.put((0, None))
        with contextlib.suppress(Exception):
            await wt

    def stop(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)


# ---------------------------------------------------------------- targets

class Target:
    """A broker under test. `bootstrap`, `procs` (the server processes whose
    CPU and memory count), `store_mark()` / `store_requests(mark)`."""

    cluster = False
    s3 = None

    def server_procs(self):
        return self.procs

    def store_mark(self):
        return self.s3.mark() if self.s3 else None

    def store_requests(self, mark):
        return self.s3.requests_since(mark) if self.s3 else (None, None)

    def stop(self):
        for p in reversed(self.procs):
            p.stop()


class FloeLocal(Target):
    """`floe standalone` on a local folder (the log is a local object store with fsync)."""

    def __init__(self, floe, work, quick):
        self.work = work
        ports = work / "standalone.ports.json"
        self.proc = Proc("floe-standalone", [
            floe, "standalone", "--data-dir", work / "data", "--kafka-listen", "127.0.0.1:0",
            "--admin-listen", "127.0.0.1:0", "--meta-listen", "127.0.0.1:0", "--ports-file", ports], work,
            env=dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn")))
        self.procs = [self.proc]
        p = read_ports(ports, self.proc)
        self.bootstrap, self.admin = p["kafka"], p["admin"]
        wait_until("floe standalone /readyz", lambda: http_ok(f"http://{self.admin}/readyz"), 60, self.procs)

    def store_mark(self):
        return metric(self.admin, "floe_store_writes_total")

    def store_requests(self, mark):
        now = metric(self.admin, "floe_store_writes_total")
        return (now - mark if now is not None and mark is not None else None, None)


def metric(admin, name):
    """Sum of metric `name` (all label sets) on a process's /metrics, None if absent."""
    try:
        with urllib.request.urlopen(f"http://{admin}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    vals = [float(line.split()[-1]) for line in text.splitlines()
            if line.startswith(name + " ") or line.startswith(name + "{")]
    return sum(vals) if vals else None


class FloeCluster(Target):
    """A metadata node, two brokers and a proxy (separate processes) on an S3 store."""

    cluster = True

    def __init__(self, floe, work, s3, endpoint, quick):
        self.s3 = s3
        env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn"))
        store = (f"s3=s3://{s3.floe_bucket}?endpoint={endpoint}&region=us-east-1&path_style=true"
                 f"&access_key_id={s3.key}&secret_access_key={s3.secret}&create_bucket=false")
        any_port = "127.0.0.1:0"
        self.procs = []
        self.brokers = []
        try:
            meta = Proc("floe-meta", [floe, "meta", "--id", 1, "--listen", any_port, "--data-dir", work / "m1",
                                      "--init", "--ports-file", work / "meta.ports.json"], work, env=env)
            self.procs.append(meta)
            m = read_ports(work / "meta.ports.json", meta)["meta"]
            lease = ["--lease-ms", "2000"] if quick else []
            admins = []
            for bid in (1, 2):
                b = Proc(f"floe-broker{bid}", [
                    floe, "broker", "--id", bid, "--listen", any_port, "--meta", m, "--store", store,
                    "--admin-listen", any_port, "--ports-file", work / f"broker{bid}.ports.json", *lease],
                    work, env=env)
                self.procs.append(b)
                self.brokers.append(b)
                admins.append(read_ports(work / f"broker{bid}.ports.json", b)["admin"])
            proxy = Proc("floe-proxy", [floe, "proxy", "--listen", any_port, "--meta", m, "--admin-listen", any_port,
                                        "--ports-file", work / "proxy.ports.json"], work, env=env)
            self.procs.append(proxy)
            p = read_ports(work / "proxy.ports.json", proxy)
            self.bootstrap = p["kafka"]
            self.broker_admins = admins
            for a in admins + [p["admin"]]:
                wait_until(f"{a}/readyz", lambda a=a: http_ok(f"http://{a}/readyz"), 60, self.procs)
        except BaseException:
            self.stop()
            raise


class Tansu(Target):
    """One Tansu broker on SQLite (`sqlite://tansu.db` in its folder) or on S3."""

    def __init__(self, tansu, work, engine, s3=None, endpoint=None):
        self.s3 = s3
        port = free_port()
        env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn"))
        if engine == "s3":
            s3.create_bucket(s3.tansu_bucket)
            env.update(AWS_ACCESS_KEY_ID=s3.key, AWS_SECRET_ACCESS_KEY=s3.secret, AWS_DEFAULT_REGION="us-east-1",
                       AWS_REGION="us-east-1", AWS_ENDPOINT=endpoint, AWS_ALLOW_HTTP="true")
            url = f"s3://{s3.tansu_bucket}/"
        else:
            url = "sqlite://tansu.db"
        self.proc = Proc(f"tansu-{engine}", [
            tansu, "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
            "--advertised-listener-url", f"tcp://127.0.0.1:{port}", "--storage-engine", url], work, env=env, cwd=work)
        self.procs = [self.proc]
        self.bootstrap = f"127.0.0.1:{port}"

        def answers():
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True

        wait_until("tansu listening", answers, 60, self.procs)


# ---------------------------------------------------------------- load generators

def admin_client(bootstrap):
    import confluent_kafka.admin
    return confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap, topic, partitions, timeout=60):
    """Creates `topic` and waits until every partition has a leader."""
    import confluent_kafka.admin
    a = admin_client(bootstrap)
    deadline = time.monotonic() + timeout
    fut = a.create_topics([confluent_kafka.admin.NewTopic(topic, partitions, 1)], request_timeout=30)[topic]
    fut.result(timeout=timeout)
    while time.monotonic() < deadline:
        md = a.list_topics(topic, timeout=10).topics.get(topic)
        if md and not md.error and len(md.partitions) == partitions and all(
                p.leader >= 0 and not p.error for p in md.partitions.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic}: partitions without a leader after {timeout} s")


class RdkafkaPerformance:
    """librdkafka's rdkafka_performance, as built above."""

    name = "rdkafka_performance (librdkafka 2.12.1)"

    def __init__(self, path, log_dir):
        self.path = str(path)
        self.log_dir = log_dir

    def produce(self, bootstrap, topic, size, count, rate=None, linger_ms=5, timeout=900):
        args = [self.path, "-P", "-t", topic, "-b", bootstrap, "-s", size, "-c", count, "-a", "-1",
                "-X", f"linger.ms={linger_ms}", "-X", "batch.size=1000000", "-X", "message.timeout.ms=120000",
                "-i", 5000]
        if rate:
            args += ["-r", int(rate)]
        out = self._run(args, timeout, "produce")
        m = re.findall(r"% (\d+) messages produced \((\d+) bytes\), (\d+) delivered \(offset -?\d+, (\d+) failed\) "
                       r"in (\d+)ms", out)
        if not m:
            raise RuntimeError(f"rdkafka_performance produce: no summary in its output:\n{out[-2000:]}")
        sent, nbytes, ok, failed, ms = map(int, m[-1])
        return dict(sent=count, acked=ok, failed=failed + (count - ok - failed), bytes=ok * size,
                    secs=max(ms, 1) / 1000)

    def consume(self, bootstrap, topic, partitions, count, timeout=900):
        args = [self.path, "-C", "-t", topic, "-b", bootstrap, "-o", "beginning", "-c", count, "-i", 5000,
                "-X", "fetch.max.bytes=52428800", "-X", "receive.message.max.bytes=60000000"]
        for p in range(partitions):
            args += ["-p", p]
        t0 = time.monotonic()
        out = self._run(args, timeout, "consume")
        # Its own clock starts at the first record; the wall time also counts
        # connecting and the first fetches, and librdkafka's own wait: with
        # partitions assigned by hand and a leader connection not yet up when
        # the metadata arrives, it queries their start offsets 500 ms later
        # (a client timer, whatever the server; seen with debug=fetch,topic).
        wall = time.monotonic() - t0
        m = re.findall(r"% (\d+) messages \((\d+) bytes\) consumed in (\d+)ms", out)
        if not m:
            raise RuntimeError(f"rdkafka_performance consume: no summary in its output:\n{out[-2000:]}")
        n, nbytes, ms = map(int, m[-1])
        return dict(read=n, bytes=nbytes, secs=wall, stream_secs=max(ms, 1) / 1000)

    def _run(self, args, timeout, what):
        logf = pathlib.Path(self.log_dir) / f"rdkafka_performance-{what}.log"
        p = subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, text=True)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # SIGINT: it stops and prints its summary of what it did.
            p.send_signal(signal.SIGINT)
            try:
                out, _ = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
        with open(logf, "a") as f:
            f.write(f"\n---- {' '.join(map(str, args))}\n{out}")
        return out


class PythonGen:
    """A generator on confluent-kafka (the venv's, librdkafka 2.x inside):
    needs no build; the quick mode uses it."""

    name = "confluent-kafka (Python)"

    def __init__(self, log_dir):
        self.log_dir = log_dir

    def produce(self, bootstrap, topic, size, count, rate=None, linger_ms=5, timeout=900):
        import confluent_kafka
        p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms,
                                      "partitioner": "random", "queue.buffering.max.messages": 1000000,
                                      "message.timeout.ms": 120000})
        res = dict(acked=0, failed=0)

        def cb(err, _msg):
            res["failed" if err else "acked"] += 1

        value = os.urandom(size)
        t0 = time.monotonic()
        for i in range(count):
            while rate:
                wait = t0 + i / rate - time.monotonic()
                if wait <= 0:
                    break
                p.poll(wait)
            while True:
                try:
                    p.produce(topic, value, on_delivery=cb)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        left = p.flush(timeout)
        secs = time.monotonic() - t0
        return dict(sent=count, acked=res["acked"], failed=res["failed"] + left, bytes=res["acked"] * size,
                    secs=secs)

    def consume(self, bootstrap, topic, partitions, count, timeout=900):
        import confluent_kafka
        c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                                      "enable.auto.commit": False, "fetch.max.bytes": 52428800})
        c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                  for p in range(partitions)])
        n = nbytes = 0
        t0 = time.monotonic()
        deadline = t0 + timeout
        while n < count and time.monotonic() < deadline:
            for m in c.consume(min(10000, count - n), 1.0):
                if m.error():
                    continue
                n += 1
                nbytes += len(m.value() or b"")
        secs = time.monotonic() - t0
        c.close()
        return dict(read=n, bytes=nbytes, secs=secs)


def _produce_forever(bootstrap, topic, size, rate, acked):
    import confluent_kafka
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "partitioner": "random"})

    def cb(err, _msg):
        if not err:
            acked.value += 1

    value = os.urandom(size)
    t0 = time.monotonic()
    i = 0
    while True:
        wait = t0 + i / rate - time.monotonic()
        if wait > 0:
            p.poll(wait)
            continue
        with contextlib.suppress(BufferError):
            p.produce(topic, value, on_delivery=cb)
            i += 1
        p.poll(0)


class Background:
    """A producer in another process at a fixed rate (on a schedule, so it
    catches up when late: rdkafka_performance's -r sleeps after each record
    and falls well short of its rate on a busy machine)."""

    def __init__(self, bootstrap, topic, size, rate):
        ctx = multiprocessing.get_context("spawn")
        self.acked = ctx.Value("q", 0)
        self.size = size
        self.p = ctx.Process(target=_produce_forever, args=(bootstrap, topic, size, rate, self.acked), daemon=True)
        self.p.start()
        self.t0 = time.monotonic()

    def stop(self):
        """Stops it; returns the MB/s it had acknowledged."""
        secs = time.monotonic() - self.t0
        if self.p.is_alive():
            self.p.kill()
            self.p.join(10)
        return self.acked.value * self.size / secs / 1e6


# ---------------------------------------------------------------- W3: latency from the scheduled send time

HEADER = struct.Struct("<dQ")  # scheduled wall time, sequence number


def _latency_consumer(bootstrap, topic, starts, count, timeout, out_path, ready):
    import confluent_kafka
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 5,
                                  "fetch.min.bytes": 1})
    c.assign([confluent_kafka.TopicPartition(topic, p, o) for p, o in starts.items()])
    c.consume(1, 0.5)  # connected, fetching
    ready.set()
    lat = []
    deadline = time.time() + timeout
    while len(lat) < count and time.time() < deadline:
        # One record at a time: `consume(n, timeout)` returns only once it has
        # n records or the timeout passed, which would add up to the timeout
        # to every record's latency.
        m = c.poll(0.2)
        now = time.time()
        if m is None or m.error() or not m.value() or len(m.value()) < HEADER.size:
            continue
        sched, _ = HEADER.unpack_from(m.value())
        lat.append(now - sched)
    c.close()
    pathlib.Path(out_path).write_text(json.dumps(lat))


def latency_run(bootstrap, topic, partitions, size, rate, secs, linger_ms, work):
    """Produces `rate` records/s of `size` bytes for `secs` seconds, each
    stamped with the time it was due (not the time it was handed over, so a
    late generator shows as latency); a consumer in another process reads them
    as they come. Returns counts and the produce (acknowledged) and end-to-end
    (received) latencies in seconds."""
    import confluent_kafka
    count = max(1, int(rate * secs))
    # Warm the topic: a few records acknowledged before measuring.
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms,
                                  "partitioner": "random", "message.timeout.ms": 120000,
                                  "queue.buffering.max.kbytes": 1048576})
    for _ in range(2 * partitions):
        p.produce(topic, b"warm")
    p.flush(60)
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}"})
    starts = {i: c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, i), timeout=30)[1]
              for i in range(partitions)}
    c.close()
    out = pathlib.Path(work) / f"lat-{topic}.json"
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    cons = ctx.Process(target=_latency_consumer, args=(bootstrap, topic, starts, count, secs + 120, str(out), ready))
    cons.start()
    if not ready.wait(60):
        cons.kill()
        raise RuntimeError("the latency consumer did not start within 60 s")
    prod_lat = []
    failed = [0]

    def cb(err, msg):
        if err:
            failed[0] += 1
        else:
            prod_lat.append(time.time() - HEADER.unpack_from(msg.value())[0])

    pad = os.urandom(max(0, size - HEADER.size))
    lag = []  # how late the generator itself handed each record over
    t0 = time.time() + 0.05
    for i in range(count):
        due = t0 + i / rate
        while True:
            wait = due - time.time()
            if wait <= 0:
                break
            p.poll(wait)
        lag.append(time.time() - due)
        while True:
            try:
                p.produce(topic, HEADER.pack(due, i) + pad, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.005)
        p.poll(0)
    left = p.flush(120)
    cons.join(secs + 180)
    if cons.is_alive():
        cons.kill()
    e2e = json.loads(out.read_text()) if out.exists() else []
    return dict(sent=count, acked=len(prod_lat), failed=failed[0] + left, read=len(e2e), produce=prod_lat, e2e=e2e,
                lag=lag)


def pct(values, q):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


# ---------------------------------------------------------------- W6: kill -9 of a broker

def failover_run(target, topic, partitions, timeout):
    """Writes to every partition in turn (explicitly, one record per partition
    every ~10 ms) with an idempotent acks=all producer; kills broker 2 with
    SIGKILL; returns the time from the kill until every partition has
    acknowledged a record sent after it."""
    import confluent_kafka
    p = confluent_kafka.Producer({"bootstrap.servers": target.bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 1, "message.timeout.ms": 300000, "retry.backoff.ms": 50})
    first_ack = {}
    sent_after = {}
    kill_at = [None]
    stats = dict(acked=0, failed=0, sent=0)

    def cb(err, msg):
        if err:
            stats["failed"] += 1
            return
        stats["acked"] += 1
        part = msg.partition()
        sent_t = struct.unpack("<d", msg.value()[:8])[0]
        if kill_at[0] is not None and sent_t > kill_at[0] and part not in first_ack:
            first_ack[part] = time.time()

    def send_round():
        for part in range(partitions):
            p.produce(topic, struct.pack("<d", time.time()) + b"x" * 100, partition=part, on_delivery=cb)
            stats["sent"] += 1
        p.poll(0.01)

    t_end = time.time() + 3
    while time.time() < t_end:  # a steady state first
        send_round()
    victim = target.brokers[-1]
    kill_at[0] = time.time()
    victim.kill9()
    deadline = time.time() + timeout
    while len(first_ack) < partitions and time.time() < deadline:
        send_round()
    p.flush(60)
    recovered = len(first_ack) == partitions
    secs = (max(first_ack.values()) - kill_at[0]) if recovered else None
    return dict(stats, recovered=recovered, secs=secs, partitions_back=len(first_ack))


# ---------------------------------------------------------------- the run

def generator_cpu_seconds():
    """User + system CPU-seconds of this process and the children it has
    waited for: the load generator (in this process, or an
    rdkafka_performance run to its end), not the servers (still running)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class Meter:
    """CPU-seconds, peak RSS and store requests of a target's server
    processes over one workload; beside them the CPU-seconds of the S3
    server (on a machine of 2 cores it shares the CPU with the target and
    the generator) and of the load generator."""

    def __init__(self, target):
        self.t = target
        self.procs = [p for p in target.server_procs() if p.alive()]
        for p in self.procs:
            reset_peak_rss(p.pid)
        self.cpu0 = {p.pid: cpu_seconds(p.pid) for p in self.procs}
        s3 = getattr(target, "s3", None)
        self.store = s3.proc if s3 is not None and s3.proc.alive() else None
        self.store_cpu0 = cpu_seconds(self.store.pid) if self.store else 0.0
        self.gen_cpu0 = generator_cpu_seconds()
        self.mark = target.store_mark()

    def done(self):
        cpu = sum(max(0.0, cpu_seconds(pid) - c) for pid, c in self.cpu0.items())
        rss = sum(peak_rss_kib(p.pid) for p in self.procs if p.alive()) / 1024
        puts, gets = self.t.store_requests(self.mark)
        store_cpu = max(0.0, cpu_seconds(self.store.pid) - self.store_cpu0) if self.store else None
        gen_cpu = max(0.0, generator_cpu_seconds() - self.gen_cpu0)
        return dict(cpu_s=cpu, peak_rss_mib=rss, puts=puts, gets=gets, store_cpu_s=store_cpu,
                    gen_cpu_s=gen_cpu)


class Runner:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.out = pathlib.Path(args.out)
        self.raw = self.out / "raw"
        self.raw.mkdir(parents=True, exist_ok=True)
        self.rows = []
        self.s = args.scale

    def n(self, long, quick):
        return max(1, int(quick if self.quick else long * self.s))

    def row(self, target, workload, **kw):
        r = dict(target=target, workload=workload, **kw)
        b = r.get("bytes") or 0
        secs = r.get("secs")
        if secs and b:
            r["mb_s"] = b / secs / 1e6
        if secs and r.get("records"):
            r["rec_s"] = r["records"] / secs
        gib = b / GIB if b else 0
        if gib:
            for k in ("cpu_s", "store_cpu_s", "gen_cpu_s", "puts", "gets"):
                if r.get(k) is not None:
                    r[f"{k}_per_gib"] = r[k] / gib
        self.rows.append(r)
        shown = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
        log(f"  {shown}")
        (self.raw / "results.json").write_text(json.dumps(dict(info=None, rows=self.rows), indent=1))
        return r

    def topic(self, name):
        return f"{name}-{uuid.uuid4().hex[:6]}"

    # one target, the workloads that apply to it
    def run_target(self, name, target, gen, workloads):
        log(f"== {name} ({target.bootstrap})")
        for w in workloads:
            try:
                getattr(self, w.lower().replace("-", "_"))(name, target, gen)
            except Exception as e:  # noqa: BLE001 - one failed workload is reported, the run goes on
                log(f"  {w} on {name} failed: {e!r}")
                self.row(name, w, errors=1, note=f"failed: {str(e)[:200]}")
                if not all(p.alive() for p in target.procs if p not in getattr(target, "killed", [])):
                    log("  a server process died; skipping the rest of this target")
                    for p in target.procs:
                        if not p.alive():
                            log(f"  {p.name}:\n{p.tail(15)}")
                    return

    def produce_row(self, name, wl, target, gen, topic, size, count, partitions, **kw):
        create_topic(target.bootstrap, topic, partitions)
        m = Meter(target)
        res = gen.produce(target.bootstrap, topic, size, count, **kw)
        return self.row(name, wl, records=res["acked"], sent=res["sent"], errors=res["failed"],
                        bytes=res["bytes"], secs=res["secs"], partitions=partitions, size=size, **m.done())

    def read_row(self, name, wl, target, gen, topic, partitions, count, size):
        m = Meter(target)
        res = gen.consume(target.bootstrap, topic, partitions, count)
        extra = {}
        if res.get("stream_secs") and res["bytes"]:
            extra["stream_mb_s"] = res["bytes"] / res["stream_secs"] / 1e6
        return self.row(name, wl, records=res["read"], sent=count, errors=max(0, count - res["read"]), bytes=res["bytes"],
                        secs=res["secs"], partitions=partitions, size=size, **extra, **m.done())

    def w1(self, name, target, gen):
        topic = self.topic("w1")
        n = self.n(600_000, 2000)
        self.produce_row(name, "W1", target, gen, topic, 1024, n, 16)
        self.read_row(name, "W1-read", target, gen, topic, 16, n, 1024)

    def w2(self, name, target, gen):
        for parts in (1, 100):
            self.produce_row(name, f"W2-p{parts}", target, gen, self.topic(f"w2p{parts}"), 100,
                             self.n(1_000_000, 2000), parts)

    def w3(self, name, target, gen):
        cases = [("W3-1k", 1024, 1000, 1), ("W3-50MB", 16384, 3200, 5)]
        for wl, size, rate, linger in cases:
            if self.quick:
                rate = {1000: 200, 3200: 100}[rate]
            secs = 1 if self.quick else 30 * self.s
            topic = self.topic(wl.lower())
            create_topic(target.bootstrap, topic, 16)
            m = Meter(target)
            t0 = time.monotonic()
            res = latency_run(target.bootstrap, topic, 16, size, rate, secs, linger, self.raw)
            wall = time.monotonic() - t0
            ms = {}
            for kind in ("produce", "e2e"):
                for q, label in ((50, "p50"), (99, "p99"), (99.9, "p999")):
                    v = pct(res[kind], q)
                    ms[f"{kind}_{label}_ms"] = v * 1000 if v is not None else None
            ms["generator_lag_p50_ms"] = pct(res["lag"], 50) * 1000
            ms["generator_lag_p99_ms"] = pct(res["lag"], 99) * 1000
            self.row(name, wl, records=res["acked"], sent=res["sent"], read=res["read"],
                     errors=res["failed"] + max(0, res["sent"] - res["read"]),
                     duplicates_read=max(0, res["read"] - res["sent"]), bytes=res["acked"] * size,
                     secs=secs, partitions=16, size=size, rate=rate, linger_ms=linger, wall_s=wall,
                     **ms, **m.done())

    def w4(self, name, target, gen):
        # At 1 MB/s: the store requests a slow trickle costs per GiB.
        secs = 3 if self.quick else 30 * self.s
        n = int(1024 * secs)  # 1 KiB records at 1024/s
        # The Python generator keeps a schedule; rdkafka_performance's -r falls short of its rate.
        self.produce_row(name, "W4-1MB/s", target, PythonGen(self.raw), self.topic("w4r"), 1024, n, 16, rate=1024)
        self.produce_row(name, "W4-max", target, gen, self.topic("w4m"), 1024, self.n(200_000, 2000), 16)

    def w5(self, name, target, gen):
        topic = self.topic("w5")
        backlog = 3000 if self.quick else int(self.args.backlog_gib * GIB / 1024)  # --backlog-gib, not --scale
        res = self.produce_row(name, "W5-backlog", target, gen, topic, 1024, backlog, 16)
        bg = Background(target.bootstrap, topic, 1024, 10 * 1024 if not self.quick else 200)
        try:
            time.sleep(1)
            row = self.read_row(name, "W5-read", target, gen, topic, 16, res["records"], 1024)
        finally:
            row_bg = bg.stop()
        row["background_mb_s"] = row_bg
        log(f"  (the producer beside it acknowledged {row_bg:.1f} MB/s)")

    def w6(self, name, target, gen):
        if not target.cluster:
            return
        topic = self.topic("w6")
        create_topic(target.bootstrap, topic, 16)
        target.killed = [target.brokers[-1]]
        owned = metric(target.broker_admins[-1], "floe_broker_owned_partitions")
        res = failover_run(target, topic, 16, timeout=60 if self.quick else 120)
        self.row(name, "W6-kill9", records=res["acked"], sent=res["sent"], errors=res["failed"],
                 failover_s=res["secs"], recovered=res["recovered"], partitions=16, victim_owned=owned,
                 note=None if res["recovered"] else f"only {res['partitions_back']} of 16 partitions back")


TARGETS = ["floe-local", "tansu-sqlite", "floe-moto", "tansu-moto", "floe-garage", "tansu-garage"]
WORKLOADS = ["W1", "W2", "W3", "W4", "W5", "W6"]


def machine():
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) // 1024 // 1024
    cpu = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    disk = subprocess.run(["df", "-h", "--output=source,size,fstype", str(ROOT)], capture_output=True,
                          text=True).stdout.strip().splitlines()[-1]
    return dict(nproc=os.cpu_count(), cpu=cpu, mem_gib=mem, disk=" ".join(disk.split()), kernel=platform.release())


def run_on(runner, name, kind, delayed, workloads, floe, gen, tansu_build, garage_build, work_root):
    """Starts target `name` (on a fresh S3 server of `kind`, behind a 20 ms
    round-trip relay when `delayed`), runs `workloads` on it, stops it all."""
    if not workloads:
        return
    tname = name + ("+20ms" if delayed else "")
    # A target named again (`--targets a,b,a,b`: pairs alternated in one
    # run) gets a folder of its own each time.
    work = work_root / tname
    again = 1
    while work.exists():
        again += 1
        work = work_root / f"{tname}.{again}"
    work.mkdir()
    relay = target = server = None
    try:
        endpoint = None
        if kind == "moto":  # a fresh one per target: moto keeps every object in memory
            server = Moto(work)
            for b in ("floe", "tansu"):
                server.create_bucket(b)
        elif kind == "garage":
            server = Garage(garage_build.wait(), work)
        if server:
            endpoint = server.endpoint
            if delayed:
                relay = DelayRelay(server.port, 0.010)
                endpoint = f"http://127.0.0.1:{relay.port}"
        if name == "floe-local":
            target = FloeLocal(floe, work, runner.quick)
        elif name.startswith("floe-"):
            target = FloeCluster(floe, work, server, endpoint, runner.quick)
        elif name == "tansu-sqlite":
            target = Tansu(tansu_build.wait(), work, "sqlite")
        else:
            target = Tansu(tansu_build.wait(), work, "s3", server, endpoint)
        runner.run_target(tname, target, gen, workloads)
    except Exception as e:  # noqa: BLE001 - a target that fails to start is reported, the run goes on
        log(f"{tname} failed: {e!r}")
        runner.row(tname, "start", errors=1, note=f"failed: {str(e)[:300]}")
    finally:
        for x in (target, relay, server):
            if x:
                x.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny counts, seconds per workload (the test suite's mode)")
    ap.add_argument("--targets", default=None, help=f"comma-separated, of {','.join(TARGETS)} "
                    "(default: all; --quick: floe-local,floe-moto)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated, of " + ",".join(WORKLOADS))
    ap.add_argument("--gen", choices=["auto", "rdkafka", "python"], default="auto",
                    help="load generator for W1/W2/W4/W5 (auto: rdkafka_performance, python in --quick)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the long mode's counts and durations")
    ap.add_argument("--backlog-gib", type=float, default=2.0, help="W5 backlog (long mode)")
    ap.add_argument("--append", action="store_true",
                    help="keep the runs already in --out of other targets or workloads (a run in several sittings)")
    args = ap.parse_args()
    targets = (args.targets or ("floe-local,floe-moto" if args.quick else ",".join(TARGETS))).split(",")
    workloads = args.workloads.split(",")
    for t in targets:
        if t not in TARGETS:
            ap.error(f"unknown target {t}")
    for w in workloads:
        if w not in WORKLOADS:
            ap.error(f"unknown workload {w}")

    t_start = time.time()
    tansu_build = CargoInstall("tansu", TANSU_VERSION, "dynostore,libsql")
    garage_build = CargoInstall("garage", GARAGE_VERSION, "bundled-libs,lmdb", default_features=False)
    if any(t.startswith("tansu") for t in targets):
        tansu_build.start()
    if any(t.endswith("garage") for t in targets):
        garage_build.start()
    floe = build_floe()
    gen_kind = args.gen if args.gen != "auto" else ("python" if args.quick else "rdkafka")
    runner = Runner(args)
    earlier = {}
    prev = runner.raw / "results.json"
    if args.append and prev.exists():
        earlier = json.loads(prev.read_text())
        if isinstance(earlier, dict):
            runner.rows = [r for r in earlier["rows"] if r["target"].split("+")[0] not in targets
                           or r["workload"].split("-")[0] not in workloads + ["start"]]
    work_root = pathlib.Path(runner.raw) / "work"
    for t in targets:
        for suffix in ("", "+20ms"):
            shutil.rmtree(work_root / (t + suffix), ignore_errors=True)
    work_root.mkdir(parents=True, exist_ok=True)
    gen = (RdkafkaPerformance(build_rdkafka_performance(), runner.raw) if gen_kind == "rdkafka"
           else PythonGen(runner.raw))
    log(f"floe: {floe}; generator: {gen.name}")

    for name in targets:
        kind = name.split("-", 1)[1]  # local, sqlite, moto, garage
        run_on(runner, name, kind, False, [w for w in workloads if w != "W4"], floe, gen, tansu_build,
               garage_build, work_root)
        if "W4" in workloads and kind in ("moto", "garage"):
            run_on(runner, name, kind, True, ["W4"], floe, gen, tansu_build, garage_build, work_root)
    command = " ".join(["bench/compare.py"] + sys.argv[1:])
    if isinstance(earlier, dict) and earlier.get("info"):
        command = f"{earlier['info']['command']}`, then `{command}"
    info = dict(machine=machine(), generator=gen.name, floe=str(floe), command=command,
                started=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t_start)),
                minutes=round((time.time() - t_start) / 60, 1), quick=args.quick)
    if gen_kind == "rdkafka" and (CACHE / "rdkafka_performance.build-seconds").exists():
        info["rdkafka_performance_build_s"] = int((CACHE / "rdkafka_performance.build-seconds").read_text())
    (runner.raw / "results.json").write_text(json.dumps(dict(info=info, rows=runner.rows), indent=1))
    import report
    report.write(runner.out, info, runner.rows)
    log(f"done in {info['minutes']} min: {runner.out / 'results.md'}")
    return 1 if any(r.get("errors") for r in runner.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
