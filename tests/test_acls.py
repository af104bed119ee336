"""ACLs with real clients: a `floe standalone` with `--authorizer acl`, a super user
and SASL PLAIN users. confluent-kafka's admin client creates, describes and deletes
ACLs; a principal allowed to write one topic and read one group produces and
consumes there and gets Kafka's authorization errors elsewhere; Metadata hides what
it may not describe; ACLs hold after a restart; `floe acl` manages them; kcat and
kafka-python see the same errors."""

import json
import os
import pathlib
import shutil
import subprocess
import time
import uuid

import pytest

from conftest import Standalone, port_of

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

USERS = {"admin": "admin-Pa55", "alice": "alice-Pa55", "bob": "bob-Pa55"}
LISTENERS = ["PLAINTEXT", "SASL_PLAINTEXT"]


class AclStandalone(Standalone):
    """A standalone with a PLAINTEXT listener (User:ANONYMOUS) and a SASL_PLAINTEXT
    one whose PLAIN users are in a file; the authorizer on, `User:admin` a super user."""

    def __init__(self, floe_bin, workdir, **options):
        super().__init__(floe_bin, workdir, name="acls", **options)
        self.ports = {n: 0 for n in LISTENERS}
        self.users_file = pathlib.Path(workdir) / "plain-users"
        self.users_file.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items()))

    def args(self):
        listeners = ",".join(f"{n}://127.0.0.1:{self.ports[n]}" for n in LISTENERS)
        return super().args() + [
            "--listeners", listeners,
            "--sasl-plain-users-file", str(self.users_file),
            "--authorizer", "acl",
            "--super-users", "User:admin",
        ]

    def start(self):
        super().start()
        ports = json.loads(self.ports_path.read_text())
        for n in LISTENERS:
            self.ports[n] = port_of(ports[f"kafka.{n.lower()}"])
        return self

    def addr(self, listener="SASL_PLAINTEXT"):
        return f"127.0.0.1:{self.ports[listener]}"

    def conf(self, user):
        if user is None:
            return {"bootstrap.servers": self.addr("PLAINTEXT")}
        return {"bootstrap.servers": self.addr(), "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": USERS[user]}


@pytest.fixture(scope="module")
def acl_cluster(floe_bin, tmp_path_factory):
    s = AclStandalone(floe_bin, tmp_path_factory.mktemp("acls"))
    s.start()
    yield s
    s.stop()


def admin(s, user="admin"):
    from confluent_kafka.admin import AdminClient
    return AdminClient(s.conf(user))


def binding(rt, name, principal, op, perm="ALLOW", pattern="LITERAL"):
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)
    return AclBinding(getattr(ResourceType, rt), name, getattr(ResourcePatternType, pattern), principal, "*",
                      getattr(AclOperation, op), getattr(AclPermissionType, perm))


def create_acls(s, bindings, user="admin"):
    a = admin(s, user)
    fs = a.create_acls(bindings, request_timeout=30)
    for f in fs.values():
        f.result()


def create_topics(s, *names, partitions=2):
    from confluent_kafka.admin import NewTopic
    a = admin(s)
    fs = a.create_topics([NewTopic(n, partitions) for n in names], request_timeout=30)
    for f in fs.values():
        f.result()


def produce(conf, topic, n=5):
    """Produces n records; returns the delivery errors' names (empty: all stored)."""
    from confluent_kafka import Producer
    errors = []
    p = Producer({**conf, "acks": "all", "message.timeout.ms": 10000, "retries": 0})
    for i in range(n):
        p.produce(topic, value=f"v{i}", on_delivery=lambda e, m: e and errors.append(e.name()))
    p.flush(30)
    return errors


def consume(conf, topic, group, n, timeout=30):
    """Reads n records with a group; returns (values, the first error's name or None)."""
    from confluent_kafka import Consumer
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    c.subscribe([topic])
    got, error = [], None
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if not m.error().retriable() or "AUTHORIZATION" in m.error().name():
                error = m.error().name()
                break
            continue
        got.append(m.value().decode())
    c.close()
    return got, error


def test_only_what_acls_allow_is_served(acl_cluster):
    s = acl_cluster
    create_topics(s, "acl-orders", "acl-secret")
    # Nobody but the super user may manage ACLs.
    from confluent_kafka import KafkaException
    with pytest.raises(KafkaException) as e:
        create_acls(s, [binding("TOPIC", "x", "User:alice", "READ")], user="alice")
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(e.value) or "authoriz" in str(e.value).lower()
    # Alice may write and read acl-orders, in group acl-g only.
    create_acls(s, [
        binding("TOPIC", "acl-orders", "User:alice", "WRITE"),
        binding("TOPIC", "acl-orders", "User:alice", "READ"),
        binding("GROUP", "acl-g", "User:alice", "READ"),
    ])
    alice = s.conf("alice")
    assert produce(alice, "acl-orders") == []
    got, error = consume(alice, "acl-orders", "acl-g", 5)
    assert error is None and sorted(got) == [f"v{i}" for i in range(5)]
    # Elsewhere: Kafka's errors.
    assert produce(alice, "acl-secret", n=1) == ["TOPIC_AUTHORIZATION_FAILED"]
    _, error = consume(alice, "acl-orders", "other-group", 1, timeout=20)
    assert error == "GROUP_AUTHORIZATION_FAILED"
    # Metadata hides the topics alice may not describe; the super user sees all.
    listed = set(admin(s, "alice").list_topics(timeout=20).topics)
    assert "acl-orders" in listed and "acl-secret" not in listed
    assert {"acl-orders", "acl-secret"} <= set(admin(s).list_topics(timeout=20).topics)
    # ListGroups shows alice only her group.
    a = admin(s, "alice")
    groups = {g.group_id for g in a.list_consumer_groups(request_timeout=20).result().valid}
    assert groups <= {"acl-g"}
    # An anonymous client (the PLAINTEXT listener) may do nothing.
    assert produce(s.conf(None), "acl-orders", n=1) == ["TOPIC_AUTHORIZATION_FAILED"]
    assert "acl-orders" not in admin(s, None).list_topics(timeout=20).topics
    # bob, with no ACL, cannot create a topic; with CREATE on a prefix he can.
    from confluent_kafka.admin import NewTopic
    bob = admin(s, "bob")
    fs = bob.create_topics([NewTopic("bob-t1", 1)], request_timeout=20)
    with pytest.raises(KafkaException) as e:
        fs["bob-t1"].result()
    assert "TOPIC_AUTHORIZATION_FAILED" in str(e.value)
    create_acls(s, [binding("TOPIC", "bob-", "User:bob", "CREATE", pattern="PREFIXED")])
    bob.create_topics([NewTopic("bob-t2", 1)], request_timeout=20)["bob-t2"].result()


def test_acls_are_described_deleted_and_enforced_at_once(acl_cluster):
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType
    s = acl_cluster
    create_topics(s, "acl-temp")
    create_acls(s, [binding("TOPIC", "acl-temp", "User:bob", "WRITE"),
                    binding("TOPIC", "acl-temp", "User:bob", "WRITE", perm="DENY", pattern="PREFIXED")])
    bob = s.conf("bob")
    # A DENY wins over an ALLOW.
    assert produce(bob, "acl-temp", n=1) == ["TOPIC_AUTHORIZATION_FAILED"]
    match_bob = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
                                 AclOperation.ANY, AclPermissionType.ANY)
    a = admin(s)
    described = a.describe_acls(match_bob, request_timeout=20).result()
    assert {(b.name, b.permission_type.name, b.resource_pattern_type.name) for b in described} >= {
        ("acl-temp", "ALLOW", "LITERAL"), ("acl-temp", "DENY", "PREFIXED")}
    only_deny = AclBindingFilter(ResourceType.TOPIC, "acl-temp", ResourcePatternType.PREFIXED, "User:bob", None,
                                 AclOperation.ANY, AclPermissionType.DENY)
    deleted = list(a.delete_acls([only_deny], request_timeout=20).values())[0].result()
    assert [b.permission_type.name for b in deleted] == ["DENY"]
    # The same connection's cache follows the change: bob may write now.
    assert produce(bob, "acl-temp", n=1) == []
    # Describing needs DESCRIBE on the cluster (kafka-python raises the answer's
    # error; librdkafka 2.x returns an empty list for it).
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePatternFilter)
    from kafka.admin import ResourceType as KResourceType
    from kafka.errors import ClusterAuthorizationFailedError
    k = KafkaAdminClient(bootstrap_servers=s.addr(), security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                         sasl_plain_username="bob", sasl_plain_password=USERS["bob"])
    with pytest.raises(ClusterAuthorizationFailedError):
        k.describe_acls(ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                                  permission_type=ACLPermissionType.ANY,
                                  resource_pattern=ResourcePatternFilter(KResourceType.ANY, None,
                                                                         ACLResourcePatternType.ANY)))
    k.close()


def test_acls_survive_a_restart(acl_cluster):
    s = acl_cluster
    create_topics(s, "acl-durable")
    create_acls(s, [binding("TOPIC", "acl-durable", "User:alice", "ALL")])
    s.restart()
    assert produce(s.conf("alice"), "acl-durable", n=2) == []
    assert produce(s.conf("bob"), "acl-durable", n=1) == ["TOPIC_AUTHORIZATION_FAILED"]


def test_kcat_and_kafka_python_see_the_authorization_errors(acl_cluster):
    s = acl_cluster
    create_topics(s, "acl-kcat")
    exe = shutil.which("kcat")
    if exe is None:
        pytest.fail("kcat is not installed: tests/run.sh installs it (apt-get install kcat)")
    base = [exe, "-b", s.addr(), "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
            "-X", "sasl.username=bob", "-X", f"sasl.password={USERS['bob']}"]
    res = subprocess.run(base + ["-P", "-t", "acl-kcat"], input=b"one\n", capture_output=True, timeout=60)
    assert res.returncode != 0
    assert b"authoriz" in res.stderr.lower(), res.stderr
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError
    p = KafkaProducer(bootstrap_servers=s.addr(), security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                      sasl_plain_username="bob", sasl_plain_password=USERS["bob"], max_block_ms=10000)
    with pytest.raises(TopicAuthorizationFailedError):
        p.send("acl-kcat", b"x").get(timeout=20)
    p.close()


def test_floe_acl_adds_lists_and_removes(acl_cluster, floe_bin, tmp_path):
    s = acl_cluster
    cfg = tmp_path / "admin.properties"
    cfg.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=admin\n")
    env = dict(os.environ, FLOE_SASL_PASSWORD=USERS["admin"])
    floe = [str(floe_bin), "acl"]
    conn = ["--bootstrap", s.addr(), "--command-config", str(cfg)]

    def run(*args, ok=True):
        res = subprocess.run(floe + list(args) + conn, env=env, capture_output=True, text=True, timeout=60)
        if ok:
            assert res.returncode == 0, res.stderr
        return res

    create_topics(s, "acl-cli")
    run("add", "--allow-principal", "User:bob", "--producer", "--topic", "acl-cli")
    assert produce(s.conf("bob"), "acl-cli", n=2) == []
    listed = run("list", "--principal", "User:bob").stdout
    assert "acl-cli" in listed and "WRITE" in listed
    # A removal with no selector is refused instead of deleting everything.
    res = run("remove", ok=False)
    assert res.returncode != 0
    run("remove", "--principal", "User:bob", "--topic", "acl-cli")
    assert "acl-cli" not in run("list", "--principal", "User:bob").stdout
    assert produce(s.conf("bob"), "acl-cli", n=1) == ["TOPIC_AUTHORIZATION_FAILED"]
    # Without the super user's credentials: the authorization error, named.
    res = subprocess.run(floe + ["list", "--bootstrap", s.addr("PLAINTEXT")], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode != 0 and "authoriz" in res.stderr.lower(), res.stderr


def test_a_transactional_producer_needs_its_transactional_id(acl_cluster):
    from confluent_kafka import KafkaException, Producer
    s = acl_cluster
    create_topics(s, "acl-txn")
    create_acls(s, [binding("TOPIC", "acl-txn", "User:alice", "WRITE"),
                    binding("TRANSACTIONAL_ID", "alice-tx", "User:alice", "WRITE")])
    alice = s.conf("alice")
    p = Producer({**alice, "transactional.id": "alice-tx", "transaction.timeout.ms": 30000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("acl-txn", value=b"in-txn")
    p.commit_transaction(30)
    # Another transactional id: refused at InitProducerId, with Kafka's error.
    q = Producer({**alice, "transactional.id": "someone-else"})
    with pytest.raises(KafkaException) as e:
        q.init_transactions(30)
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in str(e.value), e.value


def test_acls_hold_on_every_proxy_and_through_a_coordinator_move(floe_bin, tmp_path):
    """Two proxies and two brokers: an ACL created through one proxy is enforced by
    the other (the ACLs are the cluster's, in the metadata service), and still after
    the broker coordinating the group is killed with SIGKILL and its shards move."""
    from floe_cluster import Cluster
    users = tmp_path / "plain-users"
    users.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items()))
    cluster = Cluster(floe_bin, tmp_path, brokers=2, proxies=2, proxy_flags=(
        "--default-partitions", "2", "--listeners", "SASL_PLAINTEXT://127.0.0.1:0",
        "--sasl-plain-users-file", str(users), "--authorizer", "acl", "--super-users", "User:admin"))
    try:
        def conf(proxy, user):
            return {"bootstrap.servers": proxy.addr("kafka"), "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": USERS[user]}

        from confluent_kafka.admin import AdminClient, NewTopic
        a = AdminClient(conf(cluster.proxies[0], "admin"))
        a.create_topics([NewTopic("acl-cluster", 2, 1)])["acl-cluster"].result(30)
        for f in a.create_acls([binding("TOPIC", "acl-cluster", "User:alice", "ALL"),
                                binding("GROUP", "acl-cg", "User:alice", "READ")], request_timeout=30).values():
            f.result()
        on_second = conf(cluster.proxies[1], "alice")

        def until_allowed():
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if produce(on_second, "acl-cluster", n=1) == []:
                    return
                time.sleep(0.2)
            raise AssertionError("the ACL never reached the second proxy")

        until_allowed()
        assert produce(conf(cluster.proxies[1], "bob"), "acl-cluster", n=1) == ["TOPIC_AUTHORIZATION_FAILED"]
        got, error = consume(on_second, "acl-cluster", "acl-cg", 1)
        assert error is None and got
        cluster.brokers[0].kill9()
        assert produce(on_second, "acl-cluster", n=3) == []
        got, error = consume(on_second, "acl-cluster", "acl-cg", 3, timeout=60)
        assert error is None and len(got) >= 3
        _, error = consume(conf(cluster.proxies[1], "bob"), "acl-cluster", "acl-cg", 1, timeout=20)
        assert error in ("GROUP_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED")
    finally:
        cluster.stop()
