"""The metadata service as real processes: a 3-node Raft cluster on
127.0.0.1 (ports picked by the system: node 1 forms the cluster, the others
join it through the addresses it reported), the leader killed with SIGKILL in the middle of a stream of
commits, a restarted node catching up, and a wiped node rebuilt from a snapshot."""

import re
import shutil
import signal
import subprocess
import time

import pytest

from conftest import read_ports


class Cluster:
    def __init__(self, floe_bin, floe_dev_bin, tmp_path, n=3, snapshot_every=50):
        self.bin = str(floe_bin)
        self.dev_bin = str(floe_dev_bin)
        self.tmp = tmp_path
        self.ids = list(range(1, n + 1))
        # Each node's address once it has reported it (port 0 on its first start).
        self.addrs = {}
        self.snapshot_every = snapshot_every
        self.procs = {}

    def data_dir(self, i):
        return self.tmp / f"meta-{i}"

    def start(self, i, init=False):
        """Starts node `i`: on port 0 the first time, on the port it had after.
        Node `init` forms the cluster; any other joins it through the nodes known."""
        listen = self.addrs.get(i, "127.0.0.1:0")
        ports = self.tmp / f"meta-{i}.ports.json"
        if ports.exists():
            ports.unlink()
        args = [self.bin, "meta", "--id", str(i), "--listen", listen, "--ports-file", str(ports),
                "--data-dir", str(self.data_dir(i)), "--snapshot-every", str(self.snapshot_every)]
        if init:
            args.append("--init")
        else:
            args += ["--join", ",".join(a for j, a in self.addrs.items() if j != i)]
        log_path = self.tmp / f"meta-{i}.log"
        with open(log_path, "a") as log:
            self.procs[i] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self.addrs[i] = read_ports(ports, self.procs[i], 60, log_path)["meta"]

    def start_all(self):
        """Node 1 forms the cluster, the others join one by one."""
        for i in self.ids:
            self.start(i, init=(i == 1))
            self.wait_voters(set(self.addrs))

    def wait_voters(self, ids, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            out = self.cli("status", timeout=30).stdout
            for m in re.finditer(r": Leader term .* members \[(.*)\]", out):
                voters = {int(x.split("=")[0]) for x in m.group(1).split(", ") if "(learner)" not in x}
                if voters == ids:
                    return
            time.sleep(0.2)
        raise AssertionError(f"voters {ids} not all in the cluster: {self.cli('status').stdout}")

    def kill(self, i):
        p = self.procs.pop(i)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)

    def stop_all(self):
        for i in list(self.procs):
            p = self.procs.pop(i)
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def cli(self, *args, timeout=60):
        return subprocess.run([self.bin, "meta", *args, "--addrs", ",".join(self.addrs.values())],
                              capture_output=True, text=True, timeout=timeout)

    def commit_stream(self, count):
        """`floe-dev meta commit-stream`: single-entry commits to topic `stream`."""
        return [self.dev_bin, "meta", "commit-stream", "--count", str(count),
                "--addrs", ",".join(self.addrs.values())]

    def status(self):
        """{node id: (leader id, last_applied)} for every node that answers."""
        out = self.cli("status", timeout=30).stdout
        seen = {}
        for m in re.finditer(r"node (\d+) at \S+: \w+ term \d+ leader (\d+) .*? last_applied (\d+)", out):
            seen[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
        return seen

    def wait_leader(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            leaders = {l for (l, _) in self.status().values() if l}
            if len(leaders) == 1:
                return leaders.pop()
            time.sleep(0.2)
        raise AssertionError("no leader elected")


@pytest.fixture
def cluster(floe_bin, floe_dev_bin, tmp_path):
    c = Cluster(floe_bin, floe_dev_bin, tmp_path)
    yield c
    c.stop_all()


def read_index(cluster):
    res = cluster.cli("index", "--topic", "stream")
    assert res.returncode == 0, res.stderr
    entries = [l.split() for l in res.stdout.splitlines() if l.startswith("entry ")]
    return [(int(f), int(l), k) for (_, f, l, k) in entries]


def test_leader_killed_mid_stream_loses_and_duplicates_nothing(cluster):
    cluster.start_all()
    first_leader = cluster.wait_leader()

    stream = subprocess.Popen(
        cluster.commit_stream(400),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked = []
    killed_at = None
    for line in stream.stdout:
        if line.startswith("ack "):
            acked.append(line.split()[3])
            if len(acked) == 150 and killed_at is None:
                leader = cluster.wait_leader()
                cluster.kill(leader)
                killed_at = leader
        elif line.startswith("longest_gap_ms"):
            gap_ms = int(line.split()[1])
    assert stream.wait(timeout=120) == 0, stream.stderr.read()
    assert killed_at is not None
    print(f"first leader {first_leader}, killed {killed_at}; longest pause between acknowledged commits: {gap_ms} ms")
    entries = read_index(cluster)
    # Each of the 400 commits landed once: acknowledged, or landed while its
    # answer was lost with the leader (the stream then read the committed end).
    assert len(entries) == 400
    print(f"{len(acked)} acknowledged, {400 - len(acked)} landed unacknowledged")
    keys = [k for (_, _, k) in entries]
    assert len(keys) == len(set(keys)), "no commit applied twice"
    assert set(acked) <= set(keys), "every acknowledged commit is on the new leader"
    # Offsets are contiguous from 0.
    assert [f for (f, _, _) in entries] == list(range(len(entries)))
    # Liveness: writes were accepted again well within the election timeouts plus retries.
    assert gap_ms < 30_000

    # The killed node restarts on its data dir and catches up.
    cluster.start(killed_at)
    deadline = time.time() + 30
    while time.time() < deadline:
        st = cluster.status()
        if killed_at in st and st[killed_at][1] >= max(a for (_, a) in st.values()):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"restarted node {killed_at} did not catch up: {cluster.status()}")


def test_wiped_node_is_rebuilt_from_a_snapshot(cluster):
    cluster.start_all()
    leader = cluster.wait_leader()
    res = subprocess.run(
        cluster.commit_stream(200),
        capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    victim = next(i for i in cluster.addrs if i != leader)
    cluster.kill(victim)
    shutil.rmtree(cluster.data_dir(victim))
    cluster.start(victim)
    deadline = time.time() + 30
    while time.time() < deadline:
        st = cluster.status()
        if victim in st and st[victim][1] >= st[leader][1] > 0:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"wiped node {victim} was not rebuilt: {cluster.status()}")
    snap = (cluster.data_dir(victim) / "state" / "snapshot.bin")
    assert snap.exists(), "the wiped node received a snapshot"
    assert len(read_index(cluster)) == 200


def test_bad_flags_are_clear_errors(floe_bin, tmp_path):
    res = subprocess.run([str(floe_bin), "meta", "--listen", "127.0.0.1:0"], capture_output=True, text=True)
    assert res.returncode != 0 and "--id is required" in res.stderr
    res = subprocess.run([str(floe_bin), "meta", "--id", "1", "--peers", "2=127.0.0.1:1"],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "must include this node" in res.stderr
    res = subprocess.run([str(floe_bin), "meta", "--id", "1", "--peers", "x"], capture_output=True, text=True)
    assert res.returncode != 0 and "id=host:port" in res.stderr


def test_test_drivers_are_not_in_the_floe_binary(floe_bin):
    # They register a fake broker 1 with a one-hour lease: only `floe-dev` has them.
    for driver in ("commit-stream", "bench"):
        res = subprocess.run([str(floe_bin), "meta", driver, "--addrs", "127.0.0.1:1"],
                             capture_output=True, text=True)
        assert res.returncode != 0
        assert f"unrecognized subcommand '{driver}'" in res.stderr, res.stderr


def test_a_joining_node_never_forms_a_cluster_of_its_own(cluster):
    # Nothing answers at the address it is told to join through: it waits,
    # uninitialized, instead of electing itself (as a lone node without --join does).
    cluster.addrs[1] = "127.0.0.1:1"
    cluster.start(2)
    time.sleep(3)
    res = subprocess.run([cluster.bin, "meta", "status", "--addrs", cluster.addrs[2]],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert re.search(r"node 2 at \S+: \w+ term \d+ leader 0 .* members \[\]", res.stdout), res.stdout
    assert cluster.procs[2].poll() is None, "the joining node is still running"


def test_a_cold_backup_of_one_node_restores_every_node(cluster):
    # docs/running.md's procedure: copy a stopped follower's data dir; after
    # losing every node, put that copy in each node's data dir and start them
    # with their old ids and addresses. The cluster comes back as it was at
    # the backup: what was committed after it is gone.
    cluster.start_all()
    leader = cluster.wait_leader()
    res = subprocess.run(cluster.commit_stream(100), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    follower = next(i for i in cluster.addrs if i != leader)
    # The copy holds what the follower has: it is stopped once it has caught
    # up with the leader (a majority acknowledged the last commit, which may
    # not have reached this follower yet).
    deadline = time.time() + 30
    while True:
        st = cluster.status()
        if follower in st and leader in st and st[follower][1] >= st[leader][1]:
            break
        assert time.time() < deadline, f"follower {follower} never caught up: {st}"
        time.sleep(0.1)
    p = cluster.procs.pop(follower)
    p.terminate()
    p.wait(timeout=30)
    backup = cluster.tmp / "backup"
    shutil.copytree(cluster.data_dir(follower), backup)
    cluster.start(follower)
    res = subprocess.run(cluster.commit_stream(50), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert len(read_index(cluster)) == 150

    cluster.stop_all()
    for i in cluster.ids:
        shutil.rmtree(cluster.data_dir(i))
        shutil.copytree(backup, cluster.data_dir(i))
    for i in cluster.ids:
        cluster.start(i)
    cluster.wait_leader(timeout=60)
    assert len(read_index(cluster)) == 100


def test_a_metadata_node_serves_its_metrics(floe_bin, tmp_path):
    """`/metrics` on a metadata node's own port (it has no admin port): its
    commands and Raft figures, open like the probes, for Prometheus."""
    import urllib.request

    from floe_cluster import Cluster

    cluster = Cluster(floe_bin, tmp_path, metas=1, brokers=1)
    try:
        addr = cluster.metas[1].addr("meta")
        deadline = time.monotonic() + 60
        while True:
            with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
                text = r.read().decode()
            if "floe_meta_commands_total" in text:
                break
            assert time.monotonic() < deadline, text[:2000]
            time.sleep(0.2)
        assert "floe_build_info" in text
        assert "floe_meta_command_seconds_bucket" in text, text[:2000]
    finally:
        cluster.stop()
