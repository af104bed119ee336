"""librdkafka's own test programs against Floe (long mode: `FLOE_LONG=1`, or
`FLOE_LIBRDKAFKA=1` for this file alone).

librdkafka 2.12.1's sources, with its `tests/` folder, come from the crates.io
registry: the `rdkafka-sys` crate (4.10.0+2.12.1) carries them
(`librdkafka/`); the crate file's SHA-256 is checked. They are built once
(`./configure`, `make libs`, `make -C tests build`, ~4 minutes on 2 cores)
into `$FLOE_BENCH_CACHE/librdkafka-2.12.1` (default `~/.cache/floe-bench`)
and reused. Needs gcc, make, and the OpenSSL and zlib headers (`libssl-dev`,
`zlib1g-dev`).

Two kinds of run:

- The whole suite as a new user meets it (`test_the_whole_suite`): a plain
  `floe standalone` (PLAINTEXT, topics auto-created with 4 partitions, an
  authorizer open to what no ACL names, and the cleaner every 15 s: the
  clusters librdkafka's own runs use), every test that needs a broker (not
  the local-only ones: `test-runner -L`), each program run on its own with a
  generous time limit, `KAFKA_PATH` at this repository (its `bin/` holds
  `kafka-topics.sh` and the other Kafka tools, [docs/kafka-tools.md]) and
  `BROKERS` at the listener. Each test's verdict goes in a table
  (`librdkafka-suite.md` in the test's tmp folder, or `$FLOE_LIBRDKAFKA_REPORT`);
  a test that does not pass must be in `NOT_PASSING` with the reason.
- Security (`test_0081_…`, `test_client_tests_…`): a standalone with PLAINTEXT
  and SASL_SSL listeners, `--authorizer acl --allow-everyone-if-no-acl-found
  true` (the setup Kafka's own runs of these tests use: a resource no ACL
  names is open to all, and the tests narrow it with ACLs of their own),
  SCRAM users made with `floe user` and PLAIN users from a file. Each program
  runs with a `test.conf` naming the listener and the credentials.

Every run sets `TEST_KAFKA_VERSION=4.0.0` (the Kafka whose APIs Floe
answers). A program's exit status is its verdict; its log is kept under the
test's tmp folder and its tail printed on failure.
"""

import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.request

import pytest

from conftest import Standalone

LONG = os.environ.get("FLOE_LONG") == "1" or os.environ.get("FLOE_LIBRDKAFKA") == "1"
pytestmark = pytest.mark.skipif(not LONG, reason="long mode only (FLOE_LONG=1 or FLOE_LIBRDKAFKA=1)")

LIBRDKAFKA_VERSION = "2.12.1"
CRATE = "rdkafka-sys-4.10.0+2.12.1"
CRATE_URL = f"https://static.crates.io/crates/rdkafka-sys/{CRATE}.crate"
CRATE_SHA256 = "e234cf318915c1059d4921ef7f75616b5219b10b46e9f3a511a15eb4b56a3f77"
PLAIN_PASSWORD = "plain-admin-secret"
SCRAM_PASSWORD = "scram-user-secret"
REPO = pathlib.Path(__file__).resolve().parent.parent


def cache_dir():
    root = pathlib.Path(os.environ.get("FLOE_BENCH_CACHE") or pathlib.Path.home() / ".cache" / "floe-bench")
    return root / f"librdkafka-{LIBRDKAFKA_VERSION}"


def build_librdkafka():
    """The built source tree (its tests/test-runner), built once."""
    tree = cache_dir() / "src"
    runner = tree / "tests" / "test-runner"
    # A build made before RapidJSON was installed skips the tests that need
    # it (0053_stats, 0098, 0101, 0110): built again once it is there.
    config = tree / "Makefile.config"
    without_json = config.exists() and not re.search(r"WITH_RAPIDJSON=\s*y", config.read_text())
    if runner.exists() and not (without_json and pathlib.Path("/usr/include/rapidjson").exists()):
        return tree
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        crate = tmp / f"{CRATE}.crate"
        with urllib.request.urlopen(CRATE_URL, timeout=300) as r:
            crate.write_bytes(r.read())
        digest = hashlib.sha256(crate.read_bytes()).hexdigest()
        assert digest == CRATE_SHA256, f"{CRATE_URL}: sha256 {digest}, expected {CRATE_SHA256}"
        prefix = f"{CRATE}/librdkafka/"
        with tarfile.open(crate) as t:
            members = [m for m in t.getmembers() if m.name.startswith(prefix)]
            t.extractall(tmp, members=members, filter="data")
        src = tmp / prefix
        header = (src / "src" / "rdkafka.h").read_text()
        version = re.search(r"#define RD_KAFKA_VERSION\s+0x([0-9a-fA-F]{8})", header).group(1)
        got = ".".join(str(int(version[i:i + 2], 16)) for i in (0, 2, 4))
        assert got == LIBRDKAFKA_VERSION, f"{CRATE} carries librdkafka {got}, not {LIBRDKAFKA_VERSION}"
        if tree.exists():
            shutil.rmtree(tree)
        tree.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), tree)
    # The crate's files lose their modes: the build's scripts need them.
    for script in list(tree.glob("*.sh")) + list(tree.glob("configure*")) + list(tree.glob("mklove/**/*")) + \
            list(tree.glob("tests/*.sh")) + list(tree.glob("packaging/tools/*")):
        if script.is_file():
            script.chmod(0o755)
    steps = [["./configure", "--disable-gssapi", "--disable-curl", "--disable-zstd", "--disable-lz4-ext"],
             ["make", "-j2", "libs"], ["make", "-j2", "-C", "tests", "build"]]
    for step in steps:
        r = subprocess.run(step, cwd=tree, capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, f"{' '.join(step)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert runner.exists()
    return tree


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class SuiteServer(Standalone):
    def __init__(self, floe_bin, workdir):
        super().__init__(floe_bin, workdir, name="librdkafka")
        d = self.tls = pathlib.Path(workdir) / "tls"
        d.mkdir()
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=suite CA",
                "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key",
                "-out", "server.csr", cwd=d)
        (d / "ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "30", "-extfile", "ext", "-out", "server.pem", cwd=d)
        (d / "plain-users").write_text(f"admin:{PLAIN_PASSWORD}\n")

    def args(self):
        d = self.tls
        return super().args() + [
            "--listeners", "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "--ssl-certfile", str(d / "server.pem"), "--ssl-keyfile", str(d / "server.key"),
            "--sasl-plain-users-file", str(d / "plain-users"),
            "--authorizer", "acl", "--allow-everyone-if-no-acl-found", "true",
            "--connections-max-reauth-ms", "10000",
            # As the clusters librdkafka's own runs use (trivup): topics a
            # test auto-creates have several partitions.
            "--default-partitions", "4",
        ]


@pytest.fixture(scope="module")
def suite(floe_bin, tmp_path_factory):
    tree = build_librdkafka()
    s = SuiteServer(floe_bin, tmp_path_factory.mktemp("librdkafka"))
    s.start()
    ports = json.loads(s.ports_path.read_text())
    s.sasl_ssl = ports["kafka.sasl_ssl"]
    env = dict(os.environ, FLOE_USER_PASSWORD=SCRAM_PASSWORD)
    for mech in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        r = subprocess.run([str(floe_bin), "user", "create", "scram-user", "--mechanism", mech,
                            "--bootstrap", ports["kafka.plaintext"]], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
    yield tree, s
    s.stop()


def run_tests(suite, tmp_path, tests, mechanism, timeout):
    tree, server = suite
    user, password = ("admin", PLAIN_PASSWORD) if mechanism == "PLAIN" else ("scram-user", SCRAM_PASSWORD)
    conf = tmp_path / "test.conf"
    conf.write_text("\n".join([
        f"metadata.broker.list={server.sasl_ssl}",
        "security.protocol=SASL_SSL",
        f"sasl.mechanisms={mechanism}",
        f"sasl.username={user}",
        f"sasl.password={password}",
        f"ssl.ca.location={server.tls / 'ca.pem'}",
        "test.topic.random=true",
    ]) + "\n")
    tests_dir = tree / "tests"
    env = dict(os.environ, TESTS=",".join(tests), TEST_KAFKA_VERSION="4.0.0", RDKAFKA_TEST_CONF=str(conf),
               LD_LIBRARY_PATH=f"{tree / 'src'}:{tree / 'src-cpp'}")
    log = tmp_path / "test-runner.log"
    # A folder of its own for what the programs leave behind.
    work = tmp_path / "run"
    work.mkdir()
    with open(log, "w") as out:
        r = subprocess.run([str(tests_dir / "test-runner")], cwd=work, env=env, stdout=out,
                           stderr=subprocess.STDOUT, timeout=timeout)
    text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))
    failures = [line for line in text.splitlines() if "failed at" in line or "### Test" in line]
    assert r.returncode == 0, f"librdkafka tests {tests} with {mechanism}: exit {r.returncode}\n" + \
        "\n".join(failures[:20]) + "\n" + "\n".join(text.splitlines()[-40:])
    for t in tests:
        assert re.search(rf"\|\s*{t}_\S+\s*\|\s*PASSED", text), f"{t} did not pass:\n{text[-3000:]}"


def test_0081_admin_whole_over_sasl_ssl_with_plain(suite, tmp_path):
    """Every admin API librdkafka has, ACLs with authorized operations included."""
    run_tests(suite, tmp_path, ["0081"], "PLAIN", timeout=1800)


@pytest.mark.parametrize("test", ["0001", "0012", "0135", "0142"])
def test_client_tests_over_sasl_ssl_with_scram_sha_512(suite, tmp_path, test):
    """Produce and consume (0001, 0012), credentials set at run time (0135),
    and KIP-368 re-authentication (0142) with a SCRAM user, each program in a
    run of its own."""
    run_tests(suite, tmp_path, [test], "SCRAM-SHA-512", timeout=1200)


# ---------------------------------------------------------------- the whole suite

# Tests that do not pass against Floe, and why. Every other test that needs a
# broker must pass. A reason names what Floe does not offer (and says so to
# the client) or what the test needs that no Floe can give.
NOT_PASSING = {
    # Its transactions are produced by a Java program (TransactionProducerCli,
    # built with `make java` against $KAFKA_PATH/libs, Kafka's own jars):
    # without Kafka's Java client, nothing is produced and it reads 0 of 5.
    "0098": "produces with Kafka's Java client (tests/java, built against Kafka's jars in "
            "$KAFKA_PATH/libs); no Java Kafka client here (no Maven), so it reads 0 of 5",
}

# Each program's own time limits are multiplied by this (test.timeout.multiplier):
# a shared 2-core machine runs the broker and the client side by side.
TIMEOUT_MULTIPLIER = 3
# The wall-clock limit of one program.
PROGRAM_SECONDS = 900


def broker_tests(tree):
    """(number, name, scenario) of every test in test.c's table that needs a
    broker (not TEST_F_LOCAL) and runs in a whole-suite run (not
    TEST_F_MANUAL), in the table's order; several entries may share a
    number. The scenario is "default", or "noautocreate" for tests that need
    a cluster that does not create topics on a client's request."""
    text = (tree / "tests" / "test.c").read_text()
    table = text[text.index("struct test tests[] = {"):]
    table = table[:table.index("};")]
    out = []
    # Each entry runs from its `_TEST(` to the next one.
    for entry in table.split("_TEST(")[1:]:
        m = re.match(r"(\d{4})_(\w+)", entry)
        if not m or "TEST_F_LOCAL" in entry or "TEST_F_MANUAL" in entry:
            continue
        scenario = "noautocreate" if '"noautocreate"' in entry else "default"
        out.append((m.group(1), f"{m.group(1)}_{m.group(2)}", scenario))
    return out


def verdicts(log_text):
    """{test name: PASSED|FAILED|SKIPPED} from the runner's summary table."""
    out = {}
    for m in re.finditer(r"\|\s*(\d{4}_\w+)\s*\|\s*(PASSED|FAILED|SKIPPED)\s*\|", log_text):
        out[m.group(1)] = m.group(2)
    return out


def why_failed(log_text):
    """The first failure a test program reports, with the line that says why."""
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("### Test") and "failed at" in line and "<MAIN>" not in line:
            detail = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return f"{line.strip('# ')}: {detail}"[:400]
    tail = [line for line in lines if line.strip()][-1:]
    return tail[0][:400] if tail else ""


def skip_reason(log_text, name):
    """Why the program skipped `name` ("" if it did not)."""
    m = re.search(rf"\[{re.escape(name)}\s*/[^\]]*\] WARN: SKIPPING TEST: (.*)", log_text)
    return m.group(1).strip() if m else ""


def suite_standalone(floe_bin, workdir, name, **options):
    # As the clusters librdkafka's own runs use (trivup): topics a test
    # auto-creates have several partitions; an authorizer that lets
    # everyone at what no ACL names (0081 and 0109 add ACLs of their own);
    # and the log cleaner's pace of Kafka's default (log.cleaner.backoff.ms,
    # 15 s: 0077 waits 20 s for a compaction; Floe's default is 30 s).
    s = Standalone(floe_bin, workdir, name=name, default_partitions=4, authorizer="acl",
                   allow_everyone_if_no_acl_found=True, compaction_interval_ms=15000, **options)
    s.start()
    return s


@pytest.fixture(scope="module")
def scenarios(floe_bin, tmp_path_factory):
    """librdkafka's scenario name → its standalone: "default", and
    "noautocreate" (topics are not created on a client's request)."""
    default = suite_standalone(floe_bin, tmp_path_factory.mktemp("librdkafka-default"), "default")
    noauto = suite_standalone(floe_bin, tmp_path_factory.mktemp("librdkafka-noauto"), "noautocreate",
                              auto_create_topics=False)
    yield {"default": default, "noautocreate": noauto}
    default.stop()
    noauto.stop()


def test_the_whole_suite(floe_bin, scenarios, tmp_path):
    """Every broker test of librdkafka 2.12.1, one program at a time, against a
    standalone with KAFKA_PATH at this repository's Kafka tools."""
    tree = build_librdkafka()
    tests_dir = tree / "tests"
    only = os.environ.get("FLOE_LIBRDKAFKA_TESTS")
    runs = []
    for number, name, scenario in broker_tests(tree):
        if (number, scenario) not in runs and (not only or number in only.split(",")):
            runs.append((number, scenario))
    results = {}
    for number, scenario in runs:
        server = scenarios[scenario]
        # Programs find the library's files as from its tests/ folder
        # (`../src/statistics_schema.json`): a tests/ of their own beside a
        # link to the built src/.
        work = tmp_path / f"{number}-{scenario}" / "tests"
        work.mkdir(parents=True)
        (work.parent / "src").symlink_to(tree / "src")
        conf = work / "test.conf"
        conf.write_text("\n".join([
            f"metadata.broker.list={server.bootstrap}",
            f"test.timeout.multiplier={TIMEOUT_MULTIPLIER}",
            "test.topic.random=true",
        ]) + "\n")
        env = dict(os.environ, TEST_KAFKA_VERSION="4.0.0", RDKAFKA_TEST_CONF=str(conf),
                   TEST_SCENARIO=scenario, TESTS=number,
                   KAFKA_PATH=str(REPO), BROKERS=server.bootstrap, FLOE_BIN=str(floe_bin),
                   LD_LIBRARY_PATH=f"{tree / 'src'}:{tree / 'src-cpp'}")
        log = work / "test-runner.log"
        started = time.monotonic()
        with open(log, "w") as out:
            try:
                r = subprocess.run([str(tests_dir / "test-runner"), "-L"], cwd=work, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, timeout=PROGRAM_SECONDS)
                code = r.returncode
            except subprocess.TimeoutExpired:
                code = None
        seconds = time.monotonic() - started
        text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))
        mine = {n for num, n, sc in broker_tests(tree) if num == number and sc == scenario}
        found = {n: v for n, v in verdicts(text).items() if n in mine}
        for n, v in found.items():
            results[n] = (v, seconds, why_failed(text) if v == "FAILED" else skip_reason(text, n))
        if code is None:
            results[f"{number}_* ({scenario})"] = ("TIMEOUT", seconds, f"over {PROGRAM_SECONDS} s")
        elif not found or (code != 0 and "FAILED" not in {v for v in found.values()}):
            results[f"{number}_* ({scenario})"] = ("PASSED" if code == 0 else "FAILED", seconds,
                                                   "" if code == 0 else why_failed(text))
    report = pathlib.Path(os.environ.get("FLOE_LIBRDKAFKA_REPORT") or tmp_path / "librdkafka-suite.md")
    rows = ["| test | result | seconds | reason |", "|---|---|---:|---|"]
    for name, (v, seconds, reason) in results.items():
        note = NOT_PASSING.get(name.split("_")[0], reason) if v != "PASSED" else ""
        rows.append(f"| {name} | {v} | {seconds:.0f} | {note.replace('|', '/')} |")
    counts = {}
    for v, _, _ in results.values():
        counts[v] = counts.get(v, 0) + 1
    report.write_text(f"librdkafka {LIBRDKAFKA_VERSION}: {counts}\n\n" + "\n".join(rows) + "\n")
    print(report.read_text())
    unexpected = [f"{name}: {v} {reason}" for name, (v, _, reason) in results.items()
                  if v in ("FAILED", "TIMEOUT") and name.split("_")[0] not in NOT_PASSING]
    assert not unexpected, "tests that do not pass and are not in NOT_PASSING:\n" + "\n".join(unexpected)
