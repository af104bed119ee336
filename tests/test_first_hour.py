"""docs/first-hour.md, run as written.

The page's ```sh blocks are run in order, in one bash (with `set -euo
pipefail`: a failing line fails the test), and what each block prints is
checked against what the page says the reader sees: the ```text block that
follows it, compared line by line (times, terms and log indexes aside), and
the checks in CHECKS below.

Only the lines in SUBSTITUTIONS are changed, each for a reason it gives,
and the test fails when one of them is no longer on the page:
- the page's `cargo build --release` is not run, nor the package install
  and the clone: the test runs the binary of FLOE_BIN (the `floe_bin`
  fixture). `target/release/floe` of the folder it starts in is a link to
  it, so the page's `export PATH="$PWD/target/release:$PATH"` finds it;
- MinIO is not run: it cannot be downloaded here, and no registry this
  machine reaches ships its server (none of Debian's packages, `apt-cache
  search minio`; the PyPI and npm packages named minio are clients, SDKs
  or wrappers that need Docker). moto's S3 server starts on MinIO's
  address (127.0.0.1:9000) instead;
- the Python venv is the one running the test, which has DuckDB and its
  httpfs extension (tests/requirements.txt).

It takes about 11 s (the page's waits are for conditions, 30 s at most
each; the test gives the whole page DEADLINE_S).

The page uses fixed ports (9092, 9000, 7071, …). So that they cannot
collide with anything else on the machine, the whole page runs in a
network namespace of its own (`unshare --net`, with `lo` brought up), and
in a PID namespace of its own: when the test ends the namespace's first
process (by pid), the kernel ends every process the page started, whatever
state the page was left in.
"""

import dataclasses
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "first-hour.md"
# The whole page, MinIO to the last `kill`, with room for a loaded machine.
DEADLINE_S = 50


@dataclasses.dataclass
class Substitution:
    name: str
    line: str  # the page's line, exactly
    instead: str  # what runs in its place (":" runs nothing)
    why: str


def substitutions():
    moto = pathlib.Path(sys.executable).parent / "moto_server"
    return [
        Substitution("packages", "sudo apt-get install -y git curl kcat python3-venv", ":",
                     "tests/run.sh installs kcat and curl; the test checks they are there"),
        Substitution("checkout", "git clone https://github.com/floe-mq/floe && cd floe", ":",
                     "the test starts in a folder named floe of its own"),
        Substitution("build", "cargo build --release", ":",
                     "no build: target/release/floe is a link to FLOE_BIN"),
        Substitution("minio-download",
                     "curl -fLo minio https://github.com/minio/minio/releases/download/RELEASE.2025-09-07T16-13-09Z/"
                     "minio.linux-amd64.RELEASE.2025-09-07T16-13-09Z",
                     ":", "MinIO cannot be downloaded here, and no package registry reached here has it"),
        Substitution("minio-checksum",
                     "echo '7c5bd8512c6e966455b1d198209358b2d191c77a83ab377c4073281065fb855f  minio' | sha256sum -c",
                     ":", "no MinIO binary"),
        Substitution("minio-chmod", "chmod +x minio", ":", "no MinIO binary"),
        Substitution("minio-server",
                     "MINIO_ROOT_USER=minio MINIO_ROOT_PASSWORD=minio123 ./minio server minio-data "
                     "--address 127.0.0.1:9000 --console-address 127.0.0.1:9001 > minio.log 2>&1 & echo $! > minio.pid",
                     f"{moto} -H 127.0.0.1 -p 9000 > minio.log 2>&1 & echo $! > minio.pid",
                     "moto's S3 server on MinIO's address (it takes any key)"),
        Substitution("python-venv",
                     "python3 -m venv .venv && .venv/bin/pip install duckdb==1.5.5 duckdb-extension-httpfs==1.5.5",
                     f"ln -s {sys.prefix} .venv",
                     "the test's venv has duckdb and duckdb-extension-httpfs (tests/requirements.txt)"),
    ]


# ---------------------------------------------------------------------------
# The page


@dataclasses.dataclass
class Block:
    body: str  # a ```sh block
    shown: str  # the ```text block after it (what the reader sees), or None
    line: int  # the page's line of the block's first line


def blocks(text):
    """The page's sh blocks, in order."""
    fenced = list(re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M))
    out = []
    for i, m in enumerate(fenced):
        if m.group(1) != "sh":
            continue
        after = fenced[i + 1] if i + 1 < len(fenced) else None
        out.append(Block(m.group(2), after.group(2) if after is not None and after.group(1) == "text" else None,
                         text.count("\n", 0, m.start(2)) + 1))
    return out


def substituted(sh_blocks):
    """The blocks with SUBSTITUTIONS applied; each must match one line of the page."""
    subs = substitutions()
    used = {s.name: 0 for s in subs}
    out = []
    for body in sh_blocks:
        lines = []
        for line in body.splitlines():
            for s in subs:
                if line == s.line:
                    used[s.name] += 1
                    line = f"{s.instead}  # substitution {s.name}: {s.why}"
            lines.append(line)
        out.append("\n".join(lines) + "\n")
    wrong = [f"{name}: the page has its line {n} times" for name, n in used.items() if n != 1]
    assert not wrong, "SUBSTITUTIONS no longer match docs/first-hour.md:\n" + "\n".join(wrong)
    return out


MARK = "@@@ first-hour"


def script(bodies, page_lines):
    """One bash script of the blocks, each announced by a marker line, and
    {script line: page line} of the page's lines in it."""
    lo_up = "ip link set lo up" if shutil.which("ip") else (
        f"{sys.executable} -c 'import fcntl, socket, struct; s = socket.socket(); "
        "flags = struct.unpack(\"16sH\", fcntl.ioctl(s, 0x8913, struct.pack(\"16sH\", b\"lo\", 0)))[1]; "
        "fcntl.ioctl(s, 0x8914, struct.pack(\"16sH\", b\"lo\", flags | 1))'")
    parts = ["set -euo pipefail",
             f"trap 'echo \"{MARK} failed at line $LINENO: $BASH_COMMAND\"' ERR",
             lo_up]
    where = {}
    for i, (body, first) in enumerate(zip(bodies, page_lines)):
        parts.append(f"echo '{MARK} block {i}'")
        for n, line in enumerate(body.splitlines()):
            parts.append(line)
            where[len(parts)] = first + n
    parts.append(f"echo '{MARK} end'")
    return "\n".join(parts) + "\n", where


def outputs(text):
    """{block number: what it printed}, and whether the script reached its end."""
    out = {}
    current = None
    for line in text.splitlines():
        m = re.fullmatch(rf"{MARK} block (\d+)", line)
        if m:
            current = int(m.group(1))
            out[current] = []
        elif current is not None and not line.startswith(MARK):
            out[current].append(line)
    return {k: "\n".join(v) for k, v in out.items()}, f"{MARK} end" in text.splitlines()


# ---------------------------------------------------------------------------
# What the reader sees


def normalize(line):
    """A line of output with what changes from run to run taken out: times,
    Raft terms and log indexes, which node leads, producer ids; runs of
    blanks are one."""
    line = re.sub(r"\b(term|last_applied|last_log|snapshot) \d+", r"\1 N", line)
    line = re.sub(r"\b(Leader|Follower|Candidate|Learner)\b", "ROLE", line)
    line = re.sub(r"\bleader \d+ \(\S+\)", "leader ID", line)
    line = re.sub(r"\bproducer id \d+", "producer id ID", line)
    line = re.sub(r"\bin \d+m\d+s\b", "in T", line)
    line = re.sub(r"(?<![\w.:])\d+(\.\d+)?(ms|s)\b", "T", line)
    return " ".join(line.split())


def check_shown(which, expected, printed):
    """Every line of the page's text block is among the lines the block printed."""
    got = {normalize(line) for line in printed.splitlines()}
    missing = [line for line in expected.splitlines() if line.strip() and normalize(line) not in got]
    assert not missing, (f"{which}: the page says the reader sees\n  " + "\n  ".join(missing)
                         + f"\nbut the block printed:\n{printed}")


def records(printed):
    """{key: value} of `floe consume` lines (key TAB value)."""
    return dict(re.findall(r"^(order\d+)\t(.*)$", printed, re.M))


def check_status(printed):
    nodes = re.findall(r"^node (\d) at \S+: (\w+) term \d+ leader (\d+) .* members \[(.*)\]$", printed, re.M)
    assert sorted(n for n, *_ in nodes) == ["1", "2", "3"], printed
    assert [role for _, role, *_ in nodes].count("Leader") == 1, printed
    assert len({leader for _, _, leader, _ in nodes}) == 1, printed
    members = "1=127.0.0.1:7071, 2=127.0.0.1:7072, 3=127.0.0.1:7073"
    assert all(m == members for *_, m in nodes), printed


def check_nodes(printed, states):
    rows = {(int(i), kind): state for i, kind, state in
            re.findall(r"^(\d+)\s+(broker|proxy)\s+\S+\s+(\w+)", printed, re.M)}
    for node, state in states.items():
        assert rows.get(node) == state, f"{node} is {rows.get(node)}, not {state}:\n{printed}"


def owned(printed):
    return [int(n) for n in re.findall(r"^floe_broker_owned_partitions (\d+)$", printed, re.M)]


def check_read_back(printed):
    kcat = re.findall(r"^(\d) (\d+) (order\d) (.*)$", printed, re.M)
    assert sorted(k for _, _, k, _ in kcat) == [f"order{n}" for n in range(1, 8)], printed
    assert all(v == f'{{"amount": {k[5:]}}}' for _, _, k, v in kcat), printed
    assert records(printed) == {f"order{n}": f'{{"amount": {n}}}' for n in range(1, 8)}, printed


def check(ok, printed):
    assert ok, printed


def eight_records(printed):
    check(records(printed) == {f"order{n}": f'{{"amount": {n}}}' for n in range(1, 9)}, printed)


# What the page says in prose that the reader sees, each checked on the one
# block that holds its key.
CHECKS = {
    "floe --version": lambda out: check(re.search(r"^floe \d+\.\d+\.\d+$", out, re.M), out),
    "floe meta status": check_status,
    "floe indexer --meta": lambda out: check_nodes(out, {(1, "broker"): "live", (2, "broker"): "live",
                                                         (1001, "proxy"): "live"}),
    "kcat -C": check_read_back,
    # Both brokers own partitions, 4 in all.
    "9202/metrics | grep '^floe_broker_owned_partitions'": lambda out: check(
        len(owned(out)) == 2 and sum(owned(out)) == 4, out),
    "duckdb.connect()": lambda out: check(re.search(r"│\s+7 │\s+28\.0 │", out), out),
    "kill -9": lambda out: (check(owned(out) == [4], out),
                            check_nodes(out, {(1, "broker"): "live", (2, "broker"): "dead"})),
    "order8": eight_records,
    # Broker 2 started again: live, with its share (the wait in the block).
    ">> broker2.log": lambda out: check_nodes(out, {(1, "broker"): "live", (2, "broker"): "live"}),
    # Each process stopped with exit status 0, and `jobs` prints nothing: none is left.
    "jobs": lambda out: check(all(re.fullmatch(r"\w+ stopped", line) for line in out.splitlines() if line), out),
}


# ---------------------------------------------------------------------------


def test_first_hour_page_runs_as_written(floe_bin, tmp_path):
    for tool in ("unshare", "bash", "curl", "kcat"):
        assert shutil.which(tool), f"{tool} is missing (tests/run.sh installs kcat and curl)"
    probe = subprocess.run(["unshare", "--net", "--pid", "--fork", "--kill-child", "true"], capture_output=True,
                           text=True, timeout=30)
    assert probe.returncode == 0, ("this test runs the page in network and PID namespaces of its own "
                                   f"(`unshare --net --pid`, as root): {probe.stderr.strip()}")
    page = blocks(PAGE.read_text())
    assert len(page) >= 10, f"docs/first-hour.md has {len(page)} sh blocks"
    bodies = substituted([b.body for b in page])
    for key in CHECKS:
        holding = [i for i, body in enumerate(bodies) if key in body]
        assert len(holding) == 1, f"check {key!r}: {len(holding)} blocks of the page hold it, not one"

    # The folder the page starts in is a checkout named floe whose release
    # build is FLOE_BIN; the page makes first-hour beside it.
    checkout = tmp_path / "floe"
    (checkout / "target" / "release").mkdir(parents=True)
    (checkout / "target" / "release" / "floe").symlink_to(floe_bin)
    sh, where = script(bodies, [b.line for b in page])
    (tmp_path / "first-hour.sh").write_text(sh)
    # The reader's environment: nothing of the test suite's FLOE_*, AWS_* or RUST_LOG.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOE_", "AWS_", "RUST_LOG"))}
    log_path = tmp_path / "first-hour.out"
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(["unshare", "--net", "--pid", "--fork", "--kill-child",
                                 "bash", tmp_path / "first-hour.sh"], cwd=checkout, env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            try:
                code = proc.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                code = None
        finally:
            # The namespace's first process; the kernel ends the rest with it.
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
    elapsed = time.monotonic() - started
    text = log_path.read_text(errors="replace")
    work = tmp_path / "first-hour"
    logs = "".join(f"\n---- {p.name}:\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
                   for p in sorted(work.glob("*.log"))) if work.exists() else ""
    failed = re.search(rf"^{MARK} failed at line (\d+): (.*)$", text, re.M)
    if failed:
        line = where.get(int(failed.group(1)))
        said = PAGE.read_text().splitlines()[line - 1] if line else failed.group(2)
        raise AssertionError(f"docs/first-hour.md line {line} failed: {said}\n"
                             f"output:\n{text[-6000:]}\nlogs:{logs}")
    assert code == 0, (f"the page's lines {'did not finish in %d s' % DEADLINE_S if code is None else 'failed'} "
                       f"(exit {code}); output:\n{text[-6000:]}\nlogs:{logs}")

    printed, finished = outputs(text)
    assert finished and sorted(printed) == list(range(len(bodies))), text
    for i, (body, block) in enumerate(zip(bodies, page)):
        if block.shown is not None:
            check_shown(f"the block at line {block.line}", block.shown, printed[i])
        for key, verify in CHECKS.items():
            if key in body:
                verify(printed[i])
    print(f"docs/first-hour.md ran in {elapsed:.1f} s")
