"""librdkafka's own test programs against Floe (long mode: `FLOE_LONG=1`, or
`FLOE_LIBRDKAFKA=1` for this file alone).

librdkafka 2.12.0's sources, with its `tests/` folder, come from the npm
registry: the node-rdkafka 3.6.1 package carries them (`deps/librdkafka`).
They are built once (`./configure`, `make libs`, `make -C tests build`, ~4
minutes on 2 cores) into `$FLOE_BENCH_CACHE/librdkafka-2.12.0` (default
`~/.cache/floe-bench`) and reused. Needs Node.js's npm, gcc, make, and the
OpenSSL and zlib headers (`libssl-dev`, `zlib1g-dev`).

Floe runs as `floe standalone` with a PLAINTEXT and a SASL_SSL listener,
`--authorizer acl --allow-everyone-if-no-acl-found true` and 4 partitions
for an auto-created topic (the setup Kafka's own runs of these tests use: a resource no ACL names is open to all, and the
tests narrow it with ACLs of their own), SCRAM users made with `floe user`
and PLAIN users from a file. Each test program runs with a `test.conf`
naming the listener and the credentials, and `TEST_KAFKA_VERSION=4.0.0`
(the Kafka whose APIs Floe answers). A program's exit status is its verdict;
its log is kept under the test's tmp folder and its tail printed on failure.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import tarfile
import tempfile

import pytest

from conftest import Standalone

LONG = os.environ.get("FLOE_LONG") == "1" or os.environ.get("FLOE_LIBRDKAFKA") == "1"
pytestmark = pytest.mark.skipif(not LONG, reason="long mode only (FLOE_LONG=1 or FLOE_LIBRDKAFKA=1)")

NODE_RDKAFKA = "node-rdkafka@3.6.1"
LIBRDKAFKA_VERSION = "2.12.0"
PLAIN_PASSWORD = "plain-admin-secret"
SCRAM_PASSWORD = "scram-user-secret"


def cache_dir():
    root = pathlib.Path(os.environ.get("FLOE_BENCH_CACHE") or pathlib.Path.home() / ".cache" / "floe-bench")
    return root / f"librdkafka-{LIBRDKAFKA_VERSION}"


def build_librdkafka():
    """The built source tree (its tests/test-runner), built once."""
    tree = cache_dir() / "src"
    runner = tree / "tests" / "test-runner"
    if runner.exists():
        return tree
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        subprocess.run(["npm", "pack", NODE_RDKAFKA, "--silent"], cwd=tmp, check=True, capture_output=True,
                       timeout=600)
        (tgz,) = tmp.glob("node-rdkafka-*.tgz")
        prefix = "package/deps/librdkafka/"
        with tarfile.open(tgz) as t:
            members = [m for m in t.getmembers() if m.name.startswith(prefix)]
            t.extractall(tmp, members=members, filter="data")
        src = tmp / prefix
        header = (src / "src" / "rdkafka.h").read_text()
        version = re.search(r"#define RD_KAFKA_VERSION\s+0x([0-9a-fA-F]{8})", header).group(1)
        got = ".".join(str(int(version[i:i + 2], 16)) for i in (0, 2, 4))
        assert got == LIBRDKAFKA_VERSION, f"{NODE_RDKAFKA} carries librdkafka {got}, not {LIBRDKAFKA_VERSION}"
        if tree.exists():
            shutil.rmtree(tree)
        tree.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), tree)
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
