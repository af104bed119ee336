"""The helm chart (helm/floe) and the image (docker/), checked without a
Kubernetes cluster or a Docker engine:

- the chart renders with Helm's own library (helm-python-sdk) for a matrix of
  values, `helm lint --strict` is clean, every object passes
  kubernetes-validate --strict for two Kubernetes versions, yamllint is
  clean, and values.schema.json refuses wrong values with a message naming
  the value;
- docs/upgrading.md's ordered upgrade, on the rendered objects: a role's
  own image tag changes that role's workload alone, the last step (the
  release's tag set, the role tags cleared) renders every workload as the
  step before, and a new chart version changes no pod template by itself;
- the rendered manifests form a working cluster: every container of the
  StatefulSets, Deployments, the bucket Job and the `helm test` pod is
  started as a local process with the command line and environment the
  chart gives it (tests/k8s_local.py maps names to loopback addresses), moto
  plays the bundled S3 server, and a Kafka client at the proxy Service's
  address produces, consumes in a group and sees a Parquet export appear;
- docker/compose.yaml is started the same way and the README's kcat example
  runs against it; the Dockerfile passes hadolint.

A chart that names a wrong port, env var or argument fails the cluster test:
a process does not start, a probe does not answer, or a name does not resolve.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest
import yaml

helm = pytest.importorskip("helm_python")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

from k8s_local import LocalCluster  # noqa: E402
from s3_cluster import Moto  # noqa: E402

import confluent_kafka  # noqa: E402
import confluent_kafka.admin  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "floe"
COMPOSE = ROOT / "docker" / "compose.yaml"
NAMESPACE = "streaming"
RELEASE = "events"
# Two recent Kubernetes versions (kubernetes-validate carries their schemas).
KUBE_VERSIONS = ("1.34.0", "1.37.0")
BIN = pathlib.Path(sys.executable).parent

EXTERNAL_S3 = {"minio": {"enabled": False},
               "s3": {"endpoint": "https://s3.eu-west-1.amazonaws.com", "region": "eu-west-1",
                      "existingSecret": "floe-s3-credentials"}}
MATRIX = {
    "defaults": {},
    "external-s3-existing-secret": EXTERNAL_S3,
    "external-s3-keys-and-bucket-job": {
        "minio": {"enabled": False},
        "s3": {"endpoint": "http://s3.storage.svc:9000", "pathStyle": True, "prefix": "prod/floe",
               "accessKeyId": "AKIAFLOE", "secretAccessKey": "floe-secret-key", "createBucket": True}},
    "bundled-rustfs": {"minio": {"image": {"repository": "rustfs/rustfs", "tag": "1.0.0"}, "args": ["/data"],
                                 "rootUserEnv": "RUSTFS_ACCESS_KEY", "rootPasswordEnv": "RUSTFS_SECRET_KEY",
                                 "healthPath": "/health", "rootPassword": "a-long-password"}},
    "loadbalancer": {"proxy": {"service": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["10.0.0.0/8"],
                                           "externalTrafficPolicy": "Local"},
                               "advertisedAddress": "kafka.example.com:9092"}},
    "nodeport": {"proxy": {"service": {"type": "NodePort", "nodePort": 30092},
                           "advertisedAddress": "node1.example.com:30092"}},
    "autoscaling": {"broker": {"autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 12}}},
    "one-metadata-node": {"metadata": {"replicas": 1}, "indexer": {"enabled": False}},
    "internal-tls-cert-manager-sasl-ssl": {
        "security": {"internalTls": {"enabled": True,
                                     "certManager": {"enabled": True, "issuerRef": {"name": "floe-ca"}}},
                     "kafka": {"protocol": "SASL_SSL", "tls": {"secretName": "kafka-tls"},
                               "sasl": {"mechanisms": ["SCRAM-SHA-512", "OAUTHBEARER"],
                                        "oauthbearer": {"jwksEndpointUrl": "https://idp.example.com/jwks"}},
                               "authorizer": "acl", "superUsers": ["User:admin"]}},
        "tests": {"commandConfigSecret": "floe-test-client"},
        "metrics": {"serviceMonitor": {"enabled": True}}},
    "cluster-secret-ssl": {"security": {"clusterSecret": {"existingSecret": "floe-cluster-secret"},
                                        "kafka": {"protocol": "SSL", "tls": {"secretName": "kafka-tls",
                                                                             "clientAuth": "required"}}}},
    # A step of docs/upgrading.md's ordered upgrade: the metadata nodes on the
    # new version, replaced by hand (OnDelete), every other role on the old one.
    "ordered-upgrade-step": {"image": {"tag": "0.1.0"},
                             "metadata": {"image": {"tag": "0.2.0"}, "updateStrategy": "OnDelete"}},
    "monitoring-and-client-policy": {
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        "networkPolicy": {"kafkaClients": [{"namespaceSelector": {"matchLabels": {"team": "payments"}}}]}},
    "grafana-dashboards": {
        "metrics": {"serviceMonitor": {"enabled": True},
                    "dashboards": {"enabled": True, "annotations": {"grafana_folder": "Floe"}}}},
    "table-catalog-postgresql": {"indexer": {"tableCatalog": {"existingSecret": "lake-catalog", "name": "lake",
                                                              "caSecret": "lake-db-ca"}}},
}


def chart(path=CHART):
    return helm.Chart.load(str(path))


def render(values, revision=1, path=CHART):
    """{template path: text} and the objects, as `helm install` would create them."""
    out = chart(path).render(values, name=RELEASE, namespace=NAMESPACE, revision=revision, is_install=True)
    texts = {k: v for k, v in out.items() if k.endswith(".yaml") and v.strip()}
    objects = [o for t in texts.values() for o in yaml.safe_load_all(t) if o]
    return texts, objects


def floe_containers(objects):
    for o in objects:
        spec = o.get("spec", {})
        pod = spec.get("template", {}).get("spec") if "template" in spec else (spec if o["kind"] == "Pod" else None)
        if not pod:
            continue
        for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            if c["image"].split(":")[0].endswith("/floe"):
                yield o, pod, c


# ---------------------------------------------------------------------------
# Rendering, lint, schemas


@pytest.mark.parametrize("case", MATRIX)
def test_chart_renders_lints_and_validates(case):
    values = MATRIX[case]
    texts, objects = render(values)
    report = helm.lint(str(CHART), values, strict=True, namespace=NAMESPACE, kube_version="v1.34.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report.get("errors", [])
    assert not problems, problems
    for version in KUBE_VERSIONS:
        for o in objects:
            if o["apiVersion"].startswith(("monitoring.coreos.com/", "cert-manager.io/")):
                continue  # CRDs (prometheus-operator, cert-manager): not in Kubernetes' schemas
            try:
                kubernetes_validate.validate(o, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                raise AssertionError(f"{o['kind']} {o['metadata']['name']} on {version}: {e.message}") from e
    certificates = [o for o in objects if o["kind"] == "Certificate"]
    if values.get("security", {}).get("internalTls", {}).get("certManager", {}).get("enabled"):
        # One per identity, each into the Secret its pods mount.
        mounted = {src["secret"]["name"] for o in objects if o["kind"] in ("StatefulSet", "Deployment")
                   for v in o["spec"]["template"]["spec"].get("volumes", []) if "projected" in v
                   for src in v["projected"]["sources"]}
        assert sorted(c["spec"]["commonName"] for c in certificates) == \
            ["broker", "indexer", "metadata-1", "metadata-2", "metadata-3", "proxy"]
        assert {c["spec"]["secretName"] for c in certificates} == mounted
        assert all({"server auth", "client auth"} <= set(c["spec"]["usages"]) for c in certificates)
    else:
        assert not certificates
    kinds = sorted({o["kind"] for o in objects})
    assert {"StatefulSet", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"} <= set(kinds), kinds


def test_yaml_is_lint_clean(tmp_path):
    rendered = []
    for i, values in enumerate(MATRIX.values()):
        texts, _ = render(values)
        path = tmp_path / f"rendered-{i}.yaml"
        path.write_text("".join(f"---\n{t.strip()}\n" for t in texts.values()))
        rendered.append(path)
    files = [CHART / "Chart.yaml", CHART / "values.yaml", COMPOSE, *rendered]
    r = subprocess.run([BIN / "yamllint", "--strict", "-c", ROOT / "tests" / "yamllint.yaml", *files],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


BAD_VALUES = [
    ({"metadata": {"replicas": 2}}, "/metadata/replicas"),
    ({"broker": {"replicas": 0}}, "/broker/replicas"),
    ({"brokers": {"replicas": 3}}, "brokers"),
    ({"proxy": {"service": {"type": "LoadBalancer"}}}, "advertisedAddress"),
    ({"proxy": {"service": {"type": "Ingress"}}}, "/proxy/service/type"),
    ({"proxy": {"advertisedAddress": "kafka.example.com"}}, "/proxy/advertisedAddress"),
    ({"minio": {"enabled": False}}, "/s3"),
    ({"minio": {"enabled": False}, "s3": {"accessKeyId": "only-the-key"}}, "secretAccessKey"),
    ({"s3": {"bucket": "Floe_Bucket"}}, "/s3/bucket"),
    ({"s3": {"endpoint": "s3.example.com:9000"}}, "/s3/endpoint"),
    ({"minio": {"persistence": {"size": "10 GB"}}}, "/minio/persistence/size"),
    ({"minio": {"rootPassword": "short"}}, "/minio/rootPassword"),
    ({"broker": {"autoscaling": {"targetCPUUtilizationPercentage": 150}}}, "targetCPUUtilizationPercentage"),
    ({"broker": {"drainTimeoutMs": 60000}}, "terminationGracePeriodSeconds"),
    ({"proxy": {"drainTimeoutMs": 40000}}, "terminationGracePeriodSeconds"),
    ({"metadata": {"updateStrategy": "Partitioned"}}, "/metadata/updateStrategy"),
    ({"broker": {"image": {"repository": "ghcr.io/someone/floe"}}}, "/broker/image"),
    # An unquoted 1 in a values file is a number; a label value is a string.
    ({"metrics": {"dashboards": {"enabled": True, "labelValue": 1}}}, "/metrics/dashboards/labelValue"),
    ({"metrics": {"dashboards": {"label": "grafana dashboard"}}}, "/metrics/dashboards/label"),
]


@pytest.mark.parametrize("values,named", BAD_VALUES, ids=[json.dumps(v) for v, _ in BAD_VALUES])
def test_schema_refuses_bad_values_naming_them(values, named):
    with pytest.raises(helm.HelmError) as e:
        render(values)
    assert named in str(e.value), str(e.value)


def test_the_sql_catalog_uri_reaches_the_indexer_from_its_secret_alone():
    """The SQL catalog's URI may hold a password: the indexer reads it from
    the Secret named; no value of the chart holds it, and without a Secret
    the indexer has no catalog."""
    def env_of(values):
        _, objects = render(values)
        return {e["name"]: e for o, _, c in floe_containers(objects)
                if o["metadata"]["name"].endswith("-indexer") for e in c.get("env", [])}

    env = env_of(MATRIX["table-catalog-postgresql"])
    assert env["FLOE_TABLE_CATALOG"] == {"name": "FLOE_TABLE_CATALOG", "valueFrom": {
        "secretKeyRef": {"name": "lake-catalog", "key": "uri"}}}
    assert env["FLOE_TABLE_CATALOG_NAME"]["value"] == "lake"
    assert "FLOE_TABLE_CATALOG" not in env_of({})
    # The database's CA, for sslrootcert=/etc/floe/table-catalog-ca/ca.crt.
    for values, secured in ((MATRIX["table-catalog-postgresql"], False), (MATRIX["internal-tls-cert-manager-sasl-ssl"], True)):
        values = {**values, "indexer": {"tableCatalog": {"existingSecret": "c", "caSecret": "lake-db-ca"}}}
        _, objects = render(values)
        [(o, pod, c)] = [t for t in floe_containers(objects) if t[0]["metadata"]["name"].endswith("-indexer")]
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["table-catalog-ca"] == {"name": "table-catalog-ca", "mountPath": "/etc/floe/table-catalog-ca",
                                              "readOnly": True}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["table-catalog-ca"]["secret"] == {
            "secretName": "lake-db-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
        assert (len(mounts) > 1) == secured, "the cluster's own mounts stay"
    _, plain = render({})
    [(_, pod, c)] = [t for t in floe_containers(plain) if t[0]["metadata"]["name"].endswith("-indexer")]
    assert "volumeMounts" not in c and "volumes" not in pod


def test_pods_are_locked_down_and_probed():
    _, objects = render({})
    for o, pod, c in floe_containers(objects):
        where = f"{o['kind']} {o['metadata']['name']}/{c['name']}"
        sc, psc = c["securityContext"], pod["securityContext"]
        assert sc["readOnlyRootFilesystem"] and sc["runAsNonRoot"] and not sc["allowPrivilegeEscalation"], where
        assert sc["capabilities"]["drop"] == ["ALL"], where
        assert psc["runAsUser"] == 65532 and psc["runAsNonRoot"], where
        assert c["resources"]["requests"] and c["resources"]["limits"]["memory"], where
        assert pod["automountServiceAccountToken"] is False, where
        if o["kind"] in ("StatefulSet", "Deployment"):
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                assert c[probe]["httpGet"]["path"] in ("/livez", "/readyz"), where
            assert pod["affinity"]["podAntiAffinity"] and pod["topologySpreadConstraints"], where
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    # The metadata PDB keeps a Raft majority (2 of 3); brokers are given time to hand over.
    assert by_name[("PodDisruptionBudget", f"{RELEASE}-floe-meta")]["spec"]["minAvailable"] == 2
    broker = by_name[("Deployment", f"{RELEASE}-floe-broker")]["spec"]["template"]["spec"]
    drain = next(e["value"] for e in broker["containers"][0]["env"] if e["name"] == "FLOE_DRAIN_TIMEOUT_MS")
    assert broker["terminationGracePeriodSeconds"] * 1000 > int(drain)
    # The proxies' console searches through the indexer's Service, when there is one.
    proxy = by_name[("Deployment", f"{RELEASE}-floe-proxy")]["spec"]["template"]["spec"]
    proxy_env = {e["name"]: e.get("value") for e in proxy["containers"][0]["env"]}
    assert proxy_env["FLOE_CONSOLE_INDEXER"] == f"http://{RELEASE}-floe-indexer:9644", proxy_env
    assert ("Service", f"{RELEASE}-floe-indexer") in by_name
    _, no_indexer = render({"indexer": {"enabled": False}})
    for o in no_indexer:
        if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-proxy"):
            names = {e["name"] for e in o["spec"]["template"]["spec"]["containers"][0]["env"]}
            assert "FLOE_CONSOLE_INDEXER" not in names
    assert not any("volumeClaimTemplates" in o["spec"] for o in objects if o["metadata"]["name"].endswith("-broker"))
    # One metadata node: no PDB could keep a majority, so none is made.
    _, one = render({"metadata": {"replicas": 1}})
    assert not [o for o in one if o["kind"] == "PodDisruptionBudget" and o["metadata"]["name"].endswith("-meta")]


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def test_network_policies_and_the_service_monitor_select_real_pods_and_ports(tmp_path):
    """What the local run cannot see: a NetworkPolicy naming a port no pod
    has, or leaving out one of the release's own pods, would cut traffic in a
    cluster; a ServiceMonitor must find the metrics Service and its pods."""
    values = MATRIX["monitoring-and-client-policy"]
    _, objects = render(values)
    cluster = LocalCluster(objects, "floe", tmp_path, NAMESPACE)
    cluster.plan()
    pods = cluster.pods
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert {p["metadata"]["name"].rsplit("-", 1)[1] for p in policies} == {"meta", "broker", "proxy", "indexer",
                                                                           "minio"}
    for policy in policies:
        spec = policy["spec"]
        guarded = [p for p in pods if matches(spec["podSelector"], p.labels)]
        assert guarded, f"{policy['metadata']['name']} selects no pod"
        for rule in spec["ingress"]:
            for port in rule["ports"]:
                for p in guarded:
                    p.container_port(port["port"])  # fails on a port the pod does not have
            for peer in rule.get("from", []):
                if "podSelector" in peer and "namespaceSelector" not in peer:
                    # Every pod of the release (roles, the bucket Job, the test pod) is let in.
                    assert all(matches(peer["podSelector"], p.labels) for p in pods), policy["metadata"]["name"]
    monitor = next(o for o in objects if o["kind"] == "ServiceMonitor")
    service = next(o for o in objects if o["kind"] == "Service"
                   and matches(monitor["spec"]["selector"], o["metadata"]["labels"]))
    scraped = [p for p in pods if all(p.labels.get(k) == v for k, v in service["spec"]["selector"].items())]
    roles = sorted(p.labels["app.kubernetes.io/component"] for p in scraped)
    assert roles == ["broker", "broker", "indexer", "meta", "meta", "meta", "proxy", "proxy"], roles
    # Each pod is scraped on one of the Service's ports: its admin port, or a
    # metadata node's own port (it has no admin port).
    ports = {sp["name"]: sp["targetPort"] for sp in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["admin", "meta"]
    assert set(ports) == {"admin", "meta"}
    for p in scraped:
        target = ports["meta"] if p.labels["app.kubernetes.io/component"] == "meta" else ports["admin"]
        p.container_port(target)


def dashboard_configmaps(objects):
    return [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboards")]


def test_dashboards_ship_as_one_configmap_for_the_grafana_sidecar():
    """helm/floe/dashboards/*.json, each file a key with its text unchanged,
    under the label the sidecar watches; nothing without the value. The
    chart with them passes the validation above (the "grafana-dashboards"
    case of MATRIX)."""
    files = {p.name: p.read_text() for p in sorted((CHART / "dashboards").glob("*.json"))}
    assert len(files) == 5, sorted(files)
    _, objects = render({})
    assert dashboard_configmaps(objects) == []
    texts, objects = render(MATRIX["grafana-dashboards"])
    [cm] = dashboard_configmaps(objects)
    assert cm["metadata"]["name"] == f"{RELEASE}-floe-dashboards"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Floe"}
    assert cm["data"] == files
    assert len(texts["floe/templates/dashboards.yaml"].encode()) < 1024 * 1024, "a ConfigMap holds at most 1 MiB"
    # Another sidecar's label.
    _, objects = render({"metrics": {"dashboards": {"enabled": True, "label": "grafana.example.com/dashboard",
                                                    "labelValue": "floe"}}})
    [cm] = dashboard_configmaps(objects)
    assert cm["metadata"]["labels"]["grafana.example.com/dashboard"] == "floe"
    assert "grafana_dashboard" not in cm["metadata"]["labels"]
    assert "annotations" not in cm["metadata"]


def test_dockerfile_builds_every_workspace_member_in_its_dependency_layer():
    """The cached dependency layer copies each member's Cargo.toml and makes
    an empty crate for it: a member left out would fail the image's build."""
    import tomllib
    members = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
    text = (ROOT / "docker" / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY (\w+)/Cargo\.toml \1/$", text, re.M))
    stubbed = set(re.search(r"for lib in ([\w ]+); do", text).group(1).split())
    assert copied == {m for m in members if m != "."}, copied
    libs = {m for m in members if m != "." and (ROOT / m / "src" / "lib.rs").exists()}
    assert stubbed == libs, (stubbed, libs)
    for m in members:
        if m != "." and (ROOT / m / "src" / "main.rs").exists():
            assert f"{m}/src/main.rs" in text, m


def test_dockerfile_passes_hadolint():
    r = subprocess.run([BIN / "hadolint", ROOT / "docker" / "Dockerfile"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# ---------------------------------------------------------------------------
# One role at a time: docs/upgrading.md ("A minor upgrade with the chart, in order")


# A role's values key, the kind and name suffix of its workload, its container.
ROLES = {"metadata": ("StatefulSet", "-meta", "meta"), "broker": ("Deployment", "-broker", "broker"),
         "proxy": ("Deployment", "-proxy", "proxy"), "indexer": ("Deployment", "-indexer", "indexer")}
OLD, NEW = "0.1.0", "0.2.0"


def images(objects):
    """{(kind, name, container): image} of every Floe container."""
    return {(o["kind"], o["metadata"]["name"], c["name"]): c["image"] for o, _, c in floe_containers(objects)}


def workloads(objects):
    """{(kind, name): object} of the StatefulSets and Deployments: what rolls pods."""
    return {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] in ("StatefulSet", "Deployment")}


def role_tags(tag, **metadata):
    """Values giving every role its own image tag (and `metadata` more metadata values)."""
    values = {role: {"image": {"tag": tag}} for role in ROLES}
    values["metadata"].update(metadata)
    return values


def test_every_role_runs_the_charts_app_version_by_default(tmp_path):
    """No tag set: every Floe container runs the chart's appVersion, the
    per-role tags are empty in values.yaml. So are they when the values are
    those of a chart without per-role tags: `helm upgrade --reuse-values`
    renders the new templates with the previous chart's values."""
    app = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    repo = chart().values["image"]["repository"]
    for role in ROLES:
        assert chart().values[role]["image"] == {"tag": ""}, role
    _, objects = render({})
    found = images(objects)
    assert {k[0] for k in found} >= {"StatefulSet", "Deployment", "Job", "Pod"}, found
    assert set(found.values()) == {f"{repo}:{app}"}, found
    older = tmp_path / "floe"
    shutil.copytree(CHART, older)
    values = yaml.safe_load((older / "values.yaml").read_text())
    for role in ROLES:
        del values[role]["image"]
    del values["metadata"]["updateStrategy"]
    (older / "values.yaml").write_text(yaml.safe_dump(values))
    _, objects = render({}, path=older)
    assert set(images(objects).values()) == {f"{repo}:{app}"}
    assert workloads(objects)[("StatefulSet", f"{RELEASE}-floe-meta")]["spec"]["updateStrategy"] == \
        {"type": "RollingUpdate"}


@pytest.mark.parametrize("role", ROLES)
def test_a_roles_own_tag_moves_that_role_alone(role):
    """`<role>.image.tag`: that role's pods run it, every other Floe
    container keeps `image.tag`, and no other workload changes at all (the
    upgrade step rolls that role only)."""
    kind, suffix, container = ROLES[role]
    _, before = render({"image": {"tag": OLD}})
    _, after = render({"image": {"tag": OLD}, role: {"image": {"tag": NEW}}})
    moved = {k: v for k, v in images(after).items() if v != images(before)[k]}
    name = f"{RELEASE}-floe{suffix}"
    assert moved == {(kind, name, container): f"ghcr.io/floe-mq/floe:{NEW}"}, moved
    assert set(images(before).values()) == {f"ghcr.io/floe-mq/floe:{OLD}"}
    changed = [k for k, o in workloads(after).items() if o != workloads(before)[k]]
    assert changed == [(kind, name)], changed
    # The role's workload differs by its image only.
    a, b = workloads(after)[(kind, name)], workloads(before)[(kind, name)]
    a["spec"]["template"]["spec"]["containers"][0]["image"] = b["spec"]["template"]["spec"]["containers"][0]["image"]
    assert a == b


def test_metadata_update_strategy_on_delete():
    """metadata.updateStrategy: RollingUpdate by default; OnDelete leaves
    each node on its old spec until its pod is deleted (the leader last)."""
    meta = ("StatefulSet", f"{RELEASE}-floe-meta")
    _, objects = render({})
    assert workloads(objects)[meta]["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
    _, objects = render({"metadata": {"updateStrategy": "OnDelete"}})
    sts = workloads(objects)[meta]
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(sts, version, strict=True)


def test_the_last_step_of_an_ordered_upgrade_rolls_no_pod():
    """The last step sets image.tag to the new version and clears the
    per-role tags: every workload renders exactly as in the step before,
    where each role had its own tag at the new version, so no pod rolls
    again. Only the bucket Job (a new one each revision, on image.tag) and
    the `helm test` hooks differ."""
    # In a cluster the generated MinIO password is read back (lookup); here it is given.
    kept = {"minio": {"rootPassword": "a-long-password"}}
    _, before = render({**kept, "image": {"tag": OLD}, **role_tags(NEW, updateStrategy="OnDelete")}, revision=5)
    _, after = render({**kept, "image": {"tag": NEW}, **role_tags("", updateStrategy="OnDelete")}, revision=6)
    assert workloads(after) == workloads(before)
    assert set(images(after).values()) == {f"ghcr.io/floe-mq/floe:{NEW}"}

    def others(objects):
        return sorted((json.dumps(o, sort_keys=True) for o in objects if o["kind"] != "Job"
                       and "helm.sh/hook" not in (o["metadata"].get("annotations") or {})))

    assert others(after) == others(before)


def test_a_new_chart_version_rolls_no_pod_by_itself(tmp_path):
    """The pods' labels carry no chart or app version: a new chart whose
    pod specs are the same (the image pinned) changes no pod template, so
    it rolls nothing, and the selectors stay as they are."""
    newer = tmp_path / "floe"
    shutil.copytree(CHART, newer)
    meta = yaml.safe_load((newer / "Chart.yaml").read_text())
    text = (newer / "Chart.yaml").read_text()
    text = text.replace(f"\nversion: {meta['version']}\n", "\nversion: 9.9.9\n")
    text = text.replace(f'appVersion: "{meta["appVersion"]}"', 'appVersion: "9.9.9"')
    (newer / "Chart.yaml").write_text(text)
    values = {"image": {"tag": OLD}}
    _, old = render(values)
    _, new = render(values, path=newer)
    old, new = workloads(old), workloads(new)
    assert old.keys() == new.keys() and len(old) == 5, old.keys()  # meta, minio, broker, proxy, indexer
    for key in old:
        assert new[key]["metadata"]["labels"] != old[key]["metadata"]["labels"], key  # the chart did change
        assert new[key]["spec"]["selector"] == old[key]["spec"]["selector"], key
        assert new[key]["spec"]["template"] == old[key]["spec"]["template"], key


# ---------------------------------------------------------------------------
# The rendered chart as a working cluster


def moto_stand_in(cluster, pod, c):
    """The bundled S3 server's container, played by moto on the pod's address
    and port. moto takes any key, so the root credentials the server would
    be given are kept to compare with what the Floe containers sign with."""
    port = pod.container_port(c["ports"][0]["name"])
    env = cluster.env_of(pod, c)
    cluster.s3_root = (env.get("MINIO_ROOT_USER"), env.get("MINIO_ROOT_PASSWORD"))
    if "MINIO_ROOT_USER_FILE" in env:  # MinIO's docker-secret form: the keys in files
        mounts = cluster.mounts_of(pod, c)
        cluster.s3_root = tuple(pathlib.Path(cluster.substitute(env[k], pod, mounts)).read_text().strip()
                                for k in ("MINIO_ROOT_USER_FILE", "MINIO_ROOT_PASSWORD_FILE"))
    cluster.moto = Moto(cluster.tmp / f"{pod.name}.moto.log", host=pod.ip, port=port)
    pod.procs[c["name"]] = cluster.moto.proc


def assert_floe_signs_as_the_s3_root(cluster):
    for pod in cluster.pods:
        for c in [*pod.spec.get("initContainers", []), *pod.spec["containers"]]:
            env = cluster.env_of(pod, c) if cluster.is_floe(c) else {}
            if "FLOE_STORE" in env:
                assert (env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")) == cluster.s3_root, \
                    f"{pod.name}/{c['name']} signs with other credentials than the S3 server's"


def bucket_exists(s3, bucket):
    try:
        s3.head_bucket(Bucket=bucket)
        return True
    except Exception:  # botocore's ClientError (404)
        return False


def kafka_round_trip(bootstrap, topic, n=200, export=False, client=None):
    """Creates a topic (exported to Parquet with `export`), produces `n`
    records with acks=all and reads them back in a consumer group; `client`
    adds settings (security) to every client."""
    client = client or {}
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap, **client})
    config = {"export.enabled": "true", "export.roll.ms": "1000"} if export else {}
    new = confluent_kafka.admin.NewTopic(topic, num_partitions=3, replication_factor=1, config=config)
    for f in admin.create_topics([new], request_timeout=30).values():
        f.result(60)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                         "enable.idempotence": True, **client})
    delivered, errors = [], []
    for i in range(n):
        producer.produce(topic, key=f"k{i}", value=json.dumps({"i": i}),
                         on_delivery=lambda err, msg: (errors if err else delivered).append(err or msg))
    assert producer.flush(60) == 0
    assert not errors and len(delivered) == n, errors[:3]
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "helm-proof",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **client})
    consumer.subscribe([topic])
    seen = set()
    deadline = time.time() + 90
    while len(seen) < n and time.time() < deadline:
        msg = consumer.poll(1.0)
        if msg is None or msg.error():
            continue
        seen.add(json.loads(msg.value())["i"])
    consumer.commit(asynchronous=False)
    consumer.close()
    assert seen == set(range(n)), f"read {len(seen)} of {n}"


def wait_export(s3, bucket, topic, timeout=60):
    """The Parquet files of `topic` in the bucket, once there is one."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"exports/{topic}/")
        keys = [o["Key"] for o in listed.get("Contents", []) if o["Key"].endswith(".parquet")]
        if keys:
            return keys
        time.sleep(0.5)
    raise AssertionError(f"no Parquet export of {topic} after {timeout} s")


def start_release(cluster):
    """Starts a rendered release as `helm install` would: the S3 server, the
    bucket Job (to completion), the metadata nodes, then the Deployments,
    each group once its probes pass."""
    cluster.start_services()
    by_kind = lambda kind: [p for p in cluster.pods if p.kind == kind]  # noqa: E731
    minio = [p for p in by_kind("StatefulSet") if p.name.endswith("-minio-0")]
    assert len(minio) == 1
    cluster.start_pod(minio[0])
    assert all(cluster.s3_root) and len(cluster.s3_root[1]) >= 16, "no generated root password"
    assert_floe_signs_as_the_s3_root(cluster)
    s3 = cluster.moto.client()
    assert not bucket_exists(s3, "floe")
    # The bucket Job creates the bucket; the roles' store URL never does.
    for job in by_kind("Job"):
        cluster.run_to_completion(job)
    assert bucket_exists(s3, "floe")
    metas = [p for p in by_kind("StatefulSet") if p not in minio]
    assert [p.labels["apps.kubernetes.io/pod-index"] for p in metas] == [str(i + 1) for i in range(len(metas))]
    for p in metas:
        cluster.start_pod(p)
    cluster.wait_ready(metas)
    rest = by_kind("Deployment")
    for p in rest:
        cluster.start_pod(p)
    cluster.wait_ready(rest)
    return s3


def test_rendered_chart_forms_a_working_cluster(floe_bin, tmp_path):
    _, objects = render({})
    cluster = LocalCluster(objects, floe_bin, tmp_path, NAMESPACE,
                           stand_ins={"quay.io/minio/minio": moto_stand_in})
    cluster.plan()
    try:
        assert sorted(p.name.split("-floe-")[1].split("-")[0] for p in cluster.pods if p.kind == "Deployment") == \
            ["broker", "broker", "indexer", "proxy", "proxy"]
        s3 = start_release(cluster)
        # `helm test`: creates a topic, produces from its ConfigMap, consumes; twice (it can run again).
        for _ in range(2):
            for p in [p for p in cluster.pods if p.kind == "TestPod"]:
                cluster.run_to_completion(p)
        service = cluster.one("Service", "-proxy")
        bootstrap = f"{service['_ip']}:{service['spec']['ports'][0]['port']}"
        kafka_round_trip(bootstrap, "orders", export=True)
        assert wait_export(s3, "floe", "orders")
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()


def tls_secret(d, name):
    """A Secret as `kubectl create secret generic` makes it from `floe certs` files."""
    return {"tls.crt": (d / f"{name}.pem").read_text(), "tls.key": (d / f"{name}.key").read_text(),
            "ca.crt": (d / "ca.pem").read_text()}


def test_rendered_chart_forms_a_working_cluster_with_security_on(floe_bin, tmp_path):
    """Internal mTLS from Secrets made with `floe certs` and a TLS Kafka
    listener: the release forms a cluster, `helm test` passes over TLS, and
    a client that trusts the listener's CA produces and consumes; the
    internal ports refuse a caller without a member certificate."""
    _, objects = render({"metadata": {"replicas": 3}, "indexer": {"enabled": False},
                         "security": {"internalTls": {"enabled": True},
                                      "kafka": {"protocol": "SSL", "tls": {"secretName": "kafka-tls"}}}})
    cluster = LocalCluster(objects, floe_bin, tmp_path, NAMESPACE,
                           stand_ins={"quay.io/minio/minio": moto_stand_in})
    cluster.plan()
    full = cluster.one("StatefulSet", "-meta")["metadata"]["name"].removesuffix("-meta")
    certs = tmp_path / "certs"
    run = lambda *a: subprocess.run([str(floe_bin), "certs", *a], check=True, capture_output=True)  # noqa: E731
    run("ca", "--out", certs)
    for ident in ("metadata-1", "metadata-2", "metadata-3", "broker", "proxy"):
        run("issue", ident, "--ca-dir", certs, "--out", certs)
        cluster.secrets[f"{full}-internal-tls-{ident}"] = tls_secret(certs, ident)
    # The listener's certificate names every address a client is told or dials.
    service = cluster.one("Service", "-proxy")
    proxies = [p for p in cluster.pods if p.name.startswith(f"{full}-proxy")]
    kafka_certs = tmp_path / "kafka-certs"
    subprocess.run([str(floe_bin), "certs", "ca", "--out", kafka_certs], check=True, capture_output=True)
    hosts = [a for ip in [service["_ip"], *(p.ip for p in proxies)] for a in ("--host", ip)]
    subprocess.run([str(floe_bin), "certs", "issue", "kafka", "--user", "--ca-dir", kafka_certs,
                    "--out", kafka_certs, *hosts], check=True, capture_output=True)
    cluster.secrets["kafka-tls"] = tls_secret(kafka_certs, "kafka")
    try:
        start_release(cluster)
        for p in [p for p in cluster.pods if p.kind == "TestPod"]:
            cluster.run_to_completion(p)
        bootstrap = f"{service['_ip']}:{service['spec']['ports'][0]['port']}"
        kafka_round_trip(bootstrap, "secured", client={"security.protocol": "SSL",
                                                       "ssl.ca.location": str(kafka_certs / "ca.pem")})
        # A plaintext Kafka client gets nowhere; an internal port wants a member.
        plain = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
        with pytest.raises(confluent_kafka.KafkaException):
            plain.list_topics(timeout=5)
        meta = cluster.one("StatefulSet", "-meta")
        meta_pod = next(p for p in cluster.pods if p.name == f"{meta['metadata']['name']}-1")
        import ssl
        import urllib.error
        import urllib.request
        ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        ctx.check_hostname = False
        req = urllib.request.Request(f"https://{meta_pod.ip}:{meta_pod.container_port('meta')}/v1/watch",
                                     data=b"", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10, context=ctx)
        assert e.value.code == 401
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()


def test_outside_clients_reach_every_proxy_through_the_load_balancers_address(floe_bin, tmp_path):
    """proxy.service.type=LoadBalancer: every proxy advertises the load
    balancer's address, and a client that only knows that address produces
    and consumes through whichever proxy each connection lands on."""
    _, objects = render({"metadata": {"replicas": 1}, "broker": {"replicas": 1}, "indexer": {"enabled": False},
                         "tests": {"enabled": False},
                         "proxy": {"service": {"type": "LoadBalancer"},
                                   "advertisedAddress": "kafka.example.com:9092"}})
    cluster = LocalCluster(objects, floe_bin, tmp_path, NAMESPACE,
                           stand_ins={"quay.io/minio/minio": moto_stand_in})
    cluster.plan()
    service = cluster.one("Service", "-proxy")
    assert service["spec"]["type"] == "LoadBalancer"
    # The load balancer's DNS name points at the Service's address.
    cluster.names["kafka.example.com"] = service["_ip"]
    lb = f"{service['_ip']}:9092"
    try:
        start_release(cluster)
        brokers = confluent_kafka.admin.AdminClient({"bootstrap.servers": lb}).list_topics(timeout=30).brokers
        assert len(brokers) == 2 and {f"{b.host}:{b.port}" for b in brokers.values()} == {lb}, brokers
        kafka_round_trip(lb, "outside")
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()


# ---------------------------------------------------------------------------
# docker/compose.yaml the same way


def compose_objects(compose, image):
    """Compose services as the Deployments and Services LocalCluster runs:
    one pod per service, named by the service, its `command` as the args;
    named volumes are shared by the services that mount them; a service with
    `restart: "no"` is a one-shot (`_oneshot`), run to completion."""
    objects = []
    named = set(compose.get("volumes") or {})
    for name, svc in compose["services"].items():
        env = [{"name": k, "value": str(v)} for k, v in (svc.get("environment") or {}).items()]
        ports = []
        for p in svc.get("ports", []):
            host, _, target = str(p).rpartition(":")
            ports.append({"name": f"p{target}", "containerPort": int(target), "_published": int(host.split(":")[-1])})
        mounts = [{"name": v.split(":")[0], "mountPath": v.split(":")[1]} for v in svc.get("volumes", [])]
        volumes = [{"name": m["name"], "_shared": True} for m in mounts if m["name"] in named]
        c = {"name": name, "image": svc.get("image") or image, "env": env, "ports": ports, "volumeMounts": mounts}
        if "command" in svc:
            c["args"] = list(svc["command"])
            if "--owner" in c["args"] and os.geteuid() != 0:
                # Only root gives files away; the test runs as the one user.
                i = c["args"].index("--owner")
                del c["args"][i:i + 2]
        if "entrypoint" in svc:
            c["command"] = svc["entrypoint"]
        check = (svc.get("healthcheck") or {}).get("test")
        if check:
            assert check[0] == "CMD", f"{name}: healthcheck must be exec form"
            c["readinessProbe"] = {"exec": {"command": check[1:]}}
        objects.append({"kind": "Deployment", "metadata": {"name": name},
                        "spec": {"replicas": 1, "template": {"metadata": {"labels": {"compose": name}},
                                                             "spec": {"containers": [c], "volumes": volumes}}},
                        "_depends_on": svc.get("depends_on") or {},
                        "_oneshot": str(svc.get("restart")) == "no"})
    return objects


def test_compose_file_forms_a_working_cluster(floe_bin, tmp_path):
    compose = yaml.safe_load(COMPOSE.read_text())
    floe_image = compose["x-floe"]["image"]
    cluster = LocalCluster(compose_objects(compose, floe_image), floe_bin, tmp_path, "compose",
                           stand_ins={"quay.io/minio/minio": moto_stand_in})
    cluster.plan()
    host = cluster.net.take()  # the machine compose runs on: published ports and `localhost`
    pods = {"-".join(p.name.split("-")[:-2]): p for p in cluster.pods}
    cluster.names = {name: p.ip for name, p in pods.items()}
    cluster.names["localhost"] = host
    from s3_cluster import Relay
    try:
        oneshot = {o["metadata"]["name"] for o in cluster.objects if o.get("_oneshot")}
        for name, p in pods.items():
            for c in p.spec["containers"]:
                for port in c["ports"]:
                    cluster.relays.append(Relay((p.ip, port["containerPort"]), listen=(host, port["_published"])))
                if not cluster.is_floe(c) or "readinessProbe" in c or name in oneshot:
                    continue
                # No healthcheck of its own: the image's HEALTHCHECK.
                c["readinessProbe"] = {"exec": {"command": cluster.image.healthcheck}}
        deps = {o["metadata"]["name"]: o["_depends_on"] for o in cluster.objects}
        started = set()
        while len(started) < len(pods):
            ready = [n for n in pods if n not in started and all(d in started for d in deps[n])]
            assert ready, f"depends_on has a cycle among {set(pods) - started}"
            for n in ready:
                if n in oneshot:
                    cluster.run_to_completion(pods[n])
                else:
                    cluster.start_pod(pods[n])
            cluster.wait_ready([pods[n] for n in ready if n not in oneshot])
            started.update(ready)
        # The generated secrets: MinIO's root keys are what every Floe
        # process signs with (its AWS credentials file), and every Floe
        # process shares one cluster secret.
        assert "secrets" in oneshot
        assert all(cluster.s3_root) and "floe-secret" not in cluster.s3_root, cluster.s3_root
        for name, p in pods.items():
            for c in p.spec["containers"]:
                if not cluster.is_floe(c) or name in oneshot:
                    continue
                _, env = cluster.argv(p, c)
                assert pathlib.Path(env["FLOE_CLUSTER_SECRET_FILE"]).read_text().strip(), name
                if "FLOE_STORE" in env:
                    creds = pathlib.Path(env["AWS_SHARED_CREDENTIALS_FILE"]).read_text()
                    keys = tuple(re.search(rf"^{k} = (\S+)$", creds, re.M).group(1)
                                 for k in ("aws_access_key_id", "aws_secret_access_key"))
                    assert keys == cluster.s3_root, f"{name} signs with other keys than MinIO's root"
                    assert "AWS_SECRET_ACCESS_KEY" not in env, name
        # The query API is published, but refuses a caller without the
        # cluster secret (it serves topic data).
        import urllib.error
        import urllib.request
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://{host}:9644/v1/topics/demo/records?key=key1", timeout=10)
        assert refused.value.code == 401
        # The README's kcat example, at the published port.
        bootstrap = f"{host}:9092"
        kcat = shutil.which("kcat")
        if kcat:
            lines = "".join(f"key{i}:value{i}\n" for i in range(1, 6))
            subprocess.run([kcat, "-P", "-b", bootstrap, "-t", "demo", "-K:"], input=lines, text=True,
                           check=True, timeout=60)
            out = subprocess.run([kcat, "-C", "-b", bootstrap, "-t", "demo", "-e", "-o", "beginning",
                                  "-f", "%k %s\n"], capture_output=True, text=True, check=True, timeout=60)
            assert sorted(out.stdout.splitlines()) == [f"key{i} value{i}" for i in range(1, 6)], out.stdout
        kafka_round_trip(bootstrap, "sales", export=True)
        assert wait_export(cluster.moto.client(), "floe", "sales")
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()



def test_admin_ports_and_compose_ports_are_closed_by_default():
    """Safe defaults: the admin ports (the query API reads topic data) admit only
    the release's pods unless networkPolicy.adminClients names more; the compose
    file publishes its ports on 127.0.0.1 only."""
    def admin_rules(values):
        _, objects = render(values)
        rules = [r for o in objects if o["kind"] == "NetworkPolicy" for r in o["spec"]["ingress"]
                 if any(p["port"] == "admin" for p in r["ports"])]
        assert len(rules) == 3, rules  # broker, proxy, indexer
        return rules

    for rule in admin_rules({}):
        peers = rule.get("from")
        assert peers and all("podSelector" in p and "namespaceSelector" not in p for p in peers), rule
    prometheus = {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}
    for rule in admin_rules({"networkPolicy": {"adminClients": [prometheus]}}):
        assert prometheus in rule["from"] and len(rule["from"]) == 2, rule
    compose = yaml.safe_load(COMPOSE.read_text())
    published = [p for svc in compose["services"].values() for p in svc.get("ports", [])]
    assert published and all(str(p).startswith("127.0.0.1:") for p in published), published
