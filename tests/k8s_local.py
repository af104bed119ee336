"""Runs rendered Kubernetes manifests (or a compose file) as local processes,
to prove that their wiring forms a working Floe cluster where no Kubernetes
or Docker can run.

Every pod gets a loopback address of its own (127.A.B.n, A and B random per
run, so that the charts' fixed ports collide with nothing else) and every
Service another one. A container's command line is the chart's `command` and
`args` (else the image's ENTRYPOINT and CMD, read from docker/Dockerfile), its
environment the image's ENV under the container's `env` (Secret, ConfigMap
and downward-API references resolved from the rendered objects, `$(VAR)`
expanded as the kubelet does). Then, in every argument and value:

- a Service's or a StatefulSet pod's DNS name, where it is followed by a
  port, becomes its address (a name of another namespace or a typo is left
  alone, and fails as it would in a cluster: nothing resolves it);
- `0.0.0.0:PORT` (listen on every interface) and `127.0.0.1:PORT` (the
  container's own loopback) become the pod's address;
- a volume's mount path becomes a folder of the pod under the test's tmp dir
  (any other absolute path is refused: the root filesystem is read-only).

A Service with a cluster address forwards each of its ports to the
targetPort of the pods its selector picks, each connection to one of them at
random (a TCP relay); a headless Service's names are its pods' addresses. Pods whose image is not Floe's (the bundled
S3 server) are played by a stand-in the caller gives (moto).
"""

import base64
import os
import pathlib
import random
import re
import shlex
import subprocess
import time
import urllib.request

from floe_cluster import PROBE_TLS, Proc
from s3_cluster import Relay

DOCKERFILE = pathlib.Path(__file__).resolve().parent.parent / "docker" / "Dockerfile"
FLOE_BINARY_IN_IMAGE = "/usr/local/bin/floe"


class Image:
    """The ENTRYPOINT, CMD and ENV of the runtime stage of docker/Dockerfile."""

    def __init__(self, path=DOCKERFILE):
        text = re.sub(r"\\\n", " ", pathlib.Path(path).read_text())
        stage = text.split("\nFROM ")[-1]  # the last stage is the image
        self.env = {}
        self.entrypoint, self.cmd = [], []
        for line in stage.splitlines():
            word, _, rest = line.strip().partition(" ")
            if word == "ENV":
                for item in shlex.split(rest):
                    k, _, v = item.partition("=")
                    self.env[k] = v
            elif word == "ENTRYPOINT":
                self.entrypoint = _exec_form(rest)
            elif word == "CMD":
                self.cmd = _exec_form(rest)
            elif word == "HEALTHCHECK":
                self.healthcheck = _exec_form(rest.split(" CMD ", 1)[1])


def _exec_form(text):
    import json
    return json.loads(text.strip())


class Net:
    """Loopback addresses of one run: 127.A.B.n."""

    def __init__(self):
        self.prefix = f"127.{random.randint(1, 254)}.{random.randint(0, 254)}"
        self.n = 0

    def take(self):
        self.n += 1
        assert self.n < 255
        return f"{self.prefix}.{self.n}"


def expand_vars(text, env):
    """Kubernetes' `$(VAR)` expansion: a defined VAR is replaced, `$$` is a
    `$`, anything else is left as it is."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, text)


class Pod:
    """One pod of a workload: its name, labels, spec and address."""

    def __init__(self, name, labels, spec, ip, kind, subdomain=None):
        self.name, self.labels, self.spec, self.ip, self.kind = name, labels, spec, ip, kind
        self.subdomain = subdomain
        self.procs = {}

    def container_port(self, port):
        """A port by number or by name (of any container of the pod)."""
        if isinstance(port, int):
            return port
        for c in self.spec.get("containers", []):
            for p in c.get("ports", []):
                if p.get("name") == port:
                    return p["containerPort"]
        raise AssertionError(f"pod {self.name} has no port named {port!r}")


class LocalCluster:
    """The objects of one release (`objects`: parsed manifests), run here."""

    def __init__(self, objects, floe_bin, tmp_path, namespace, stand_ins=None, cluster_domain="cluster.local"):
        self.objects = [o for o in objects if o]
        self.bin = str(floe_bin)
        self.tmp = pathlib.Path(tmp_path)
        self.ns = namespace
        self.domain = cluster_domain
        self.image = Image()
        self.net = Net()
        self.stand_ins = stand_ins or {}
        self.relays = []
        self.pods = []
        self.names = {}
        # Hooks included: the test pod's ConfigMap is one.
        self.secrets = {o["metadata"]["name"]: self._secret_data(o)
                        for o in [*self.of("Secret"), *self.of("Secret", hook=True)]}
        self.config_maps = {o["metadata"]["name"]: dict(o.get("data", {}))
                            for o in [*self.of("ConfigMap"), *self.of("ConfigMap", hook=True)]}

    # objects
    def of(self, kind, hook=False):
        """Objects of `kind`; `hook` True: only helm hooks (tests), False: none."""
        out = []
        for o in self.objects:
            if o.get("kind") != kind:
                continue
            is_hook = "helm.sh/hook" in (o["metadata"].get("annotations") or {})
            if is_hook == hook:
                out.append(o)
        return out

    def one(self, kind, name_suffix):
        found = [o for o in self.objects if o.get("kind") == kind and o["metadata"]["name"].endswith(name_suffix)]
        assert len(found) == 1, f"{kind} *{name_suffix}: {[o['metadata']['name'] for o in found]}"
        return found[0]

    @staticmethod
    def _secret_data(o):
        data = {k: base64.b64decode(v).decode() for k, v in (o.get("data") or {}).items()}
        data.update(o.get("stringData") or {})
        return data

    # pods and names
    def plan(self):
        """Gives every workload's pods and every Service an address and a name."""
        for sts in self.of("StatefulSet"):
            spec = sts["spec"]
            start = (spec.get("ordinals") or {}).get("start", 0)
            for i in range(start, start + spec.get("replicas", 1)):
                name = f"{sts['metadata']['name']}-{i}"
                labels = dict(spec["template"]["metadata"]["labels"])
                labels["apps.kubernetes.io/pod-index"] = str(i)
                labels["statefulset.kubernetes.io/pod-name"] = name
                self.pods.append(Pod(name, labels, spec["template"]["spec"], self.net.take(), "StatefulSet",
                                     subdomain=spec["serviceName"]))
        for dep in self.of("Deployment"):
            spec = dep["spec"]
            for i in range(spec.get("replicas", 1)):
                name = f"{dep['metadata']['name']}-{random.randrange(16**6):06x}-{i}"
                self.pods.append(Pod(name, dict(spec["template"]["metadata"]["labels"]), spec["template"]["spec"],
                                     self.net.take(), "Deployment"))
        for job in self.of("Job"):
            t = job["spec"]["template"]
            self.pods.append(Pod(f"{job['metadata']['name']}-0", dict(t["metadata"].get("labels", {})), t["spec"],
                                 self.net.take(), "Job"))
        for pod in self.of("Pod", hook=True):
            self.pods.append(Pod(pod["metadata"]["name"], dict(pod["metadata"].get("labels", {})), pod["spec"],
                                 self.net.take(), "TestPod"))
        for svc in self.of("Service"):
            name = svc["metadata"]["name"]
            picked = self.selected(svc)
            headless = svc["spec"].get("clusterIP") == "None"
            fq = [name, f"{name}.{self.ns}", f"{name}.{self.ns}.svc", f"{name}.{self.ns}.svc.{self.domain}"]
            if headless:
                for pod in picked:
                    if pod.subdomain == name:
                        for suffix in fq[1:]:
                            self.names[f"{pod.name}.{suffix}"] = pod.ip
                        self.names[f"{pod.name}.{name}"] = pod.ip
                if picked:
                    for n in fq:
                        self.names[n] = picked[0].ip
                continue
            ip = self.net.take()
            for n in fq:
                self.names[n] = ip
            svc["_ip"] = ip

    def selected(self, svc):
        sel = svc["spec"].get("selector") or {}
        return [p for p in self.pods if p.kind in ("StatefulSet", "Deployment")
                and all(p.labels.get(k) == v for k, v in sel.items())]

    def start_services(self):
        """A relay per port of every Service with a cluster address, to a pod it selects."""
        for svc in self.of("Service"):
            if "_ip" not in svc:
                continue
            picked = self.selected(svc)
            assert picked, f"Service {svc['metadata']['name']} selects no pod"
            for port in svc["spec"]["ports"]:
                targets = [(p.ip, p.container_port(port.get("targetPort", port["port"]))) for p in picked]
                # Each connection to a pod of the Service picked at random, as kube-proxy does.
                self.relays.append(Relay(lambda targets=targets: random.choice(targets),
                                         listen=(svc["_ip"], port["port"])))

    # one container's command line and environment
    def substitute(self, text, pod, mounts):
        names = sorted(self.names, key=len, reverse=True)
        if names:
            # A host name is always followed by its port in Floe's settings
            # (a bare word such as the `proxy` subcommand is not a host).
            pattern = r"(?<![\w.-])(" + "|".join(re.escape(n) for n in names) + r")(?=:\d)"
            text = re.sub(pattern, lambda m: self.names[m.group(1)], text)
        # Every interface, or the container's own loopback: the pod's address.
        text = text.replace("0.0.0.0:", f"{pod.ip}:").replace("127.0.0.1:", f"{pod.ip}:")
        for mount, local in sorted(mounts.items(), key=lambda kv: len(kv[0]), reverse=True):
            text = re.sub(rf"(?<![\w/]){re.escape(mount.rstrip('/'))}(?=/|$|[\s,:])", str(local), text)
        return text

    def env_of(self, pod, c):
        env = dict(self.image.env) if self.is_floe(c) else {}
        for src in c.get("envFrom", []):
            if "secretRef" in src:
                env.update(self.secrets[src["secretRef"]["name"]])
            if "configMapRef" in src:
                env.update(self.config_maps[src["configMapRef"]["name"]])
        for e in c.get("env", []):
            if "value" in e:
                env[e["name"]] = expand_vars(str(e["value"]), env)
                continue
            ref = e["valueFrom"]
            if "fieldRef" in ref:
                env[e["name"]] = self.field(pod, ref["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in ref:
                r = ref["secretKeyRef"]
                assert r["name"] in self.secrets, f"{pod.name}: no Secret {r['name']} (env {e['name']})"
                assert r["key"] in self.secrets[r["name"]], f"{pod.name}: Secret {r['name']} has no key {r['key']}"
                env[e["name"]] = self.secrets[r["name"]][r["key"]]
            elif "configMapKeyRef" in ref:
                r = ref["configMapKeyRef"]
                env[e["name"]] = self.config_maps[r["name"]][r["key"]]
            else:
                raise AssertionError(f"{pod.name}: env {e['name']}: {ref} not supported here")
        return env

    def field(self, pod, path):
        m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            value = pod.labels.get(m.group(2)) if m.group(1) == "labels" else None
            assert value is not None, f"{pod.name}: no {path}"
            return value
        return {"metadata.name": pod.name, "metadata.namespace": self.ns, "status.podIP": pod.ip,
                "spec.nodeName": "local", "metadata.uid": f"uid-{pod.name}"}[path]

    def is_floe(self, c):
        return c["image"].split(":")[0].endswith("/floe")

    def mounts_of(self, pod, c):
        """mountPath -> a folder of the pod (ConfigMap volumes hold their keys as
        files, with the container's mount paths in them made the folders: a
        client config naming a mounted CA file)."""
        volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
        out = {}
        def folder(m):
            # A volume several pods share (a compose file's named volume) has
            # one folder; any other is the pod's own.
            if volumes.get(m["name"], {}).get("_shared"):
                return self.tmp / "_volumes" / m["name"]
            return self.tmp / pod.name / m["name"]
        mounts = {m["mountPath"]: folder(m) for m in c.get("volumeMounts", [])}
        for m in c.get("volumeMounts", []):
            local = mounts[m["mountPath"]]
            local.mkdir(parents=True, exist_ok=True)
            v = volumes.get(m["name"], {})
            if "configMap" in v:
                items = v["configMap"].get("items")
                data = self.config_maps[v["configMap"]["name"]]
                for k, path in ([(i["key"], i["path"]) for i in items] if items else [(k, k) for k in data]):
                    text = data[k]
                    for mount_path, folder in mounts.items():
                        text = text.replace(mount_path + "/", f"{folder}/")
                    (local / path).write_text(text)
            if "secret" in v:
                self._write_secret(local, v["secret"]["secretName"], v["secret"].get("items"), pod)
            for src in v.get("projected", {}).get("sources", []):
                if "secret" in src:
                    self._write_secret(local, src["secret"]["name"], src["secret"].get("items"), pod)
            out[m["mountPath"]] = local
        return out

    def _write_secret(self, local, name, items, pod):
        """A Secret volume's files (all keys, or `items` as key -> path)."""
        assert name in self.secrets, f"{pod.name}: no Secret {name} to mount"
        data = self.secrets[name]
        for key, path in ([(i["key"], i["path"]) for i in items] if items else [(k, k) for k in data]):
            assert key in data, f"{pod.name}: Secret {name} has no key {key}"
            (local / path).write_text(data[key])

    def argv(self, pod, c):
        env = self.env_of(pod, c)
        command = c.get("command") or self.image.entrypoint
        args = c.get("args") if (c.get("args") is not None or c.get("command")) else self.image.cmd
        argv = [expand_vars(str(a), env) for a in [*command, *(args or [])]]
        assert argv[0] == FLOE_BINARY_IN_IMAGE, f"{pod.name}/{c['name']}: runs {argv[0]}, not the image's floe"
        mounts = self.mounts_of(pod, c)
        argv = [self.bin] + [self.substitute(a, pod, mounts) for a in argv[1:]]
        env = {k: self.substitute(v, pod, mounts) for k, v in env.items()}
        for value in [*argv[1:], *env.values()]:
            # A cluster DNS name left is one no Service or pod has (a typo, a
            # wrong Service or namespace): it would not resolve in a cluster.
            unknown = re.findall(rf"[\w.-]+\.svc(?:\.{re.escape(self.domain)})?(?=:\d)", value)
            assert not unknown, f"{pod.name}/{c['name']}: {unknown} resolve to nothing in {self.ns}"
            # A file path (an HTTP path such as /readyz has one segment).
            assert not re.match(r"/[^/\s]+/", value) or value.startswith(str(self.tmp)), \
                f"{pod.name}/{c['name']}: {value!r} is outside every volume (the root filesystem is read-only)"
        return argv, env

    # running
    def start_container(self, pod, c, run_env=None):
        argv, env = self.argv(pod, c)
        full_env = {"PATH": os.environ.get("PATH", ""), **env, **(run_env or {})}
        log = self.tmp / f"{pod.name}.{c['name']}.log"
        with open(log, "ab") as f:
            f.write(f"---- {shlex.join(argv)}\n".encode())
        proc = Proc(argv, log, env=full_env)
        proc.argv = argv
        pod.procs[c["name"]] = proc
        return proc

    def start_pod(self, pod):
        for c in pod.spec.get("containers", []):
            if not self.is_floe(c):
                self.stand_ins[c["image"].split(":")[0]](self, pod, c)
                continue
            self.start_container(pod, c)

    def run_to_completion(self, pod, timeout=120):
        """A Job's or a test pod's containers, init containers first, each until it exits 0."""
        for c in [*pod.spec.get("initContainers", []), *pod.spec["containers"]]:
            proc = self.start_container(pod, c)
            try:
                proc.p.wait(timeout)
            except Exception:
                proc.kill9()
                raise AssertionError(f"{pod.name}/{c['name']} still running after {timeout}s:\n{proc.tail()}")
            proc.log.close()
            assert proc.p.returncode == 0, \
                f"{pod.name}/{c['name']} exited with {proc.p.returncode}:\n{proc.tail()}"

    def probe_ok(self, pod, c, probe):
        if "exec" in probe:
            argv, env = self.argv(pod, {**c, "command": probe["exec"]["command"], "args": []})
            try:
                r = subprocess.run(argv, env={"PATH": os.environ.get("PATH", ""), **env}, capture_output=True,
                                   timeout=10)
            except subprocess.TimeoutExpired:
                return False
            return r.returncode == 0
        if "httpGet" in probe:
            g = probe["httpGet"]
            scheme = g.get("scheme", "HTTP").lower()
            url = f"{scheme}://{pod.ip}:{pod.container_port(g['port'])}{g.get('path', '/')}"
            try:
                # As the kubelet: HTTPS without checking the server's certificate.
                with urllib.request.urlopen(url, timeout=2,
                                            context=PROBE_TLS if scheme == "https" else None) as r:
                    return r.status == 200
            except OSError:
                return False
        raise AssertionError(f"{pod.name}/{c['name']}: probe {probe} not supported here")

    def wait_ready(self, pods, timeout=90):
        """Until every container passes its startup, liveness and readiness
        probes; a container that exits is started again (restartPolicy Always)."""
        deadline = time.time() + timeout
        waiting = [(p, c) for p in pods for c in p.spec["containers"] if self.is_floe(c)]
        restarts = {}
        while waiting and time.time() < deadline:
            still = []
            for pod, c in waiting:
                proc = pod.procs[c["name"]]
                if proc.p.poll() is not None:
                    n = restarts.get(pod.name, 0) + 1
                    assert n <= 5, f"{pod.name}/{c['name']} keeps exiting:\n{proc.tail()}"
                    restarts[pod.name] = n
                    proc.log.close()
                    time.sleep(0.5 * n)
                    self.start_container(pod, c)
                    still.append((pod, c))
                    continue
                probes = [c[k] for k in ("startupProbe", "livenessProbe", "readinessProbe") if k in c]
                assert probes, f"{pod.name}/{c['name']} has no probe"
                if not all(self.probe_ok(pod, c, p) for p in probes):
                    still.append((pod, c))
            waiting = still
            if waiting:
                time.sleep(0.2)
        assert not waiting, "not ready after %ss: %s\n%s" % (
            timeout, [f"{p.name}/{c['name']}" for p, c in waiting],
            "\n".join(f"---- {p.name}:\n{p.procs[c['name']].tail(15)}" for p, c in waiting))

    def stop(self):
        """SIGTERM to every process, the last started first; relays closed."""
        for pod in reversed(self.pods):
            for proc in reversed(list(pod.procs.values())):
                proc.stop()
        for r in self.relays:
            r.close()

    def logs(self):
        return "\n".join(f"---- {p.name}/{n}:\n{proc.tail(20)}" for p in self.pods for n, proc in p.procs.items())
