"""A cluster forgets what is gone (issue 40): brokers and proxies that
register without an id (a Kubernetes Deployment's pods, proxies started
without `--id`) are killed with SIGKILL and started again several times, as
pods are. Each start is given a new id, always above every id seen before;
each killed node is listed dead by `floe cluster nodes --json`, then removed
once it has been dead for longer than `--dead-node-retention-ms` (a few
seconds here), while the live nodes stay.

Processes listen on port 0 and report their addresses (tests/floe_cluster.py);
every wait polls a condition with a deadline.
"""

import json
import os
import subprocess
import time

from floe_cluster import Cluster, Role, listen

RETENTION_MS = 3000
LEASE_MS = 1000


def nodes(c):
    """{id: record} of every node on record, from `floe cluster nodes --json`."""
    res = subprocess.run([c.bin, "cluster", "nodes", "--json", "--addrs", c.meta], capture_output=True,
                         text=True, timeout=30, env={**os.environ, **c.role_env("admin")})
    assert res.returncode == 0, res.stderr
    out = {}
    for line in res.stdout.splitlines():
        n = json.loads(line)
        out[n["id"]] = n
    return out


def wait_for(what, cond, c, timeout=60):
    """Polls `cond(nodes)` until it returns something true, and returns it."""
    deadline = time.time() + timeout
    seen = None
    while time.time() < deadline:
        seen = nodes(c)
        got = cond(seen)
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what}: not after {timeout}s; nodes: {seen}\n{c.logs()}")


def unnamed_broker(c, n):
    """A broker started without --id (a Deployment's pod), on port 0."""
    def args(ports):
        return [c.bin, "broker", "--listen", listen(None, "rpc"), "--meta", c.meta,
                "--store", ",".join(c.stores), "--admin-listen", listen(None, "admin"),
                "--lease-ms", LEASE_MS, "--drain-timeout-ms", 0]
    return Role(f"pod{n}", args, c.tmp, c.role_env("broker"))


def registered_at(kind, addr):
    """A condition: the id of the live node of `kind` registered at `addr`."""
    def cond(ns):
        ids = [i for i, n in ns.items() if n["kind"] == kind and n["addr"] == addr and n["state"] == "live"]
        return ids[0] if len(ids) == 1 else None
    return cond


def test_killed_unnamed_nodes_get_new_ids_and_are_removed_after_the_retention(floe_bin, tmp_path):
    env = {"FLOE_DEAD_NODE_RETENTION_MS": str(RETENTION_MS)}
    c = Cluster(floe_bin, tmp_path, metas=1, brokers=1, lease_ms=LEASE_MS,
                proxy_flags=("--default-partitions", "4", "--lease-ms", LEASE_MS),
                role_env=lambda name: env if name.startswith("meta") else {})
    pods = []
    try:
        first = nodes(c)
        assert first[1]["kind"] == "broker" and first[1]["state"] == "live", first
        proxy_id = wait_for("the proxy is registered", registered_at("proxy", c.kafka), c)
        assert proxy_id >= 1001
        seen = set(first) | {proxy_id}
        killed = []
        for n in range(3):
            pod = unnamed_broker(c, n)
            pods.append(pod)
            pod.start()
            c.wait_ready(pod)
            pid = wait_for(f"pod {n} is registered", registered_at("broker", pod.addr("rpc")), c)
            assert pid > max(seen), f"pod {n} was given {pid}, not above every id seen: {sorted(seen)}"
            seen.add(pid)
            pod.kill9()
            killed.append(pid)
            # Listed dead (its lease ran out, or its port refused a proxy),
            # with the time it died and when it goes.
            dead = wait_for(f"node {pid} is dead with a death time",
                            lambda ns, pid=pid: ns.get(pid) if ns.get(pid, {}).get("dead_since_ms") else None, c)
            assert dead["state"] == "dead", dead
            assert dead["removal_due_ms"] == dead["dead_since_ms"] + RETENTION_MS, dead
            assert dead["lease_left_ms"] is None and dead["dead_for_ms"] >= 0, dead
        # The proxy restarts without an id too: a new one, above every other.
        c.proxy.kill9()
        killed.append(proxy_id)
        c.proxy.start()
        c.wait_ready(c.proxy)
        new_proxy = wait_for("the proxy registers again", registered_at("proxy", c.kafka), c)
        assert new_proxy > max(seen), f"the proxy was given {new_proxy} after {sorted(seen)}"
        seen.add(new_proxy)
        # Every killed node goes once dead for longer than the retention;
        # the live ones stay.
        wait_for("the killed nodes are removed", lambda ns: not set(killed) & set(ns), c,
                 timeout=LEASE_MS / 1000 + RETENTION_MS / 1000 + 60)
        left = nodes(c)
        assert left[1]["state"] == "live" and left[new_proxy]["state"] == "live", left
        assert set(left) == {1, new_proxy}, left
        # And an id is never given again once its node is gone.
        pod = unnamed_broker(c, 9)
        pods.append(pod)
        pod.start()
        c.wait_ready(pod)
        pid = wait_for("a last pod is registered", registered_at("broker", pod.addr("rpc")), c)
        assert pid > max(seen), f"{pid} after {sorted(seen)}"
    finally:
        for pod in pods:
            pod.stop()
        c.stop()
