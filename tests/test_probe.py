"""`floe probe`, the container image's HEALTHCHECK, against a real metadata
node: the image sets `FLOE_ADMIN_LISTEN` for every role, and a metadata
node has no admin port, so the probe asks the metadata listener where
nothing listens at the admin address."""

import os
import subprocess
import time

from floe_cluster import Role, listen

# Port 1 (tcpmux): nothing listens there on these machines.
NOTHING = "0.0.0.0:1"


def probe(floe_bin, env, *args):
    return subprocess.run([str(floe_bin), "probe", *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, **env})


def test_the_images_probe_serves_a_metadata_node(floe_bin, tmp_path):
    meta = Role("meta1", lambda ports: [floe_bin, "meta", "--id", 1, "--listen", listen(ports, "meta"),
                                        "--data-dir", tmp_path / "m1", "--init"], tmp_path).start()
    try:
        # As in the image: an admin address for every role, the metadata
        # node's own listener beside it.
        env = {"FLOE_ADMIN_LISTEN": NOTHING, "FLOE_META_LISTEN": meta.addr("meta")}
        r = probe(floe_bin, env)
        assert r.returncode == 0, r.stderr
        deadline = time.time() + 30
        while (r := probe(floe_bin, env, "--path", "/readyz")).returncode != 0:
            assert time.time() < deadline, f"never ready: {r.stderr}"
            time.sleep(0.2)
        # Nothing at either address: a failure that names both.
        r = probe(floe_bin, {"FLOE_ADMIN_LISTEN": NOTHING, "FLOE_META_LISTEN": "127.0.0.1:1"})
        assert r.returncode != 0
        assert "nothing listens at 127.0.0.1:1" in r.stderr, r.stderr
        # An address given is the only one asked.
        r = probe(floe_bin, env, "--addr", "127.0.0.1:1")
        assert r.returncode != 0 and "nothing listens at 127.0.0.1:1" in r.stderr, r.stderr
    finally:
        meta.stop()
