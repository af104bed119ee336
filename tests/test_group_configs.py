"""Group configs (Kafka 4's GROUP config resource, type 32) against one real
`floe standalone`: described and altered with real admin clients
(kafka-python's ConfigResourceType.GROUP; confluent-kafka where its
librdkafka sends type 32), refused with Kafka's errors, shown and altered
with `floe group configs` / `floe group alter` / `floe configs --group`, and
`consumer.session.timeout.ms` honoured by the classic coordinator."""

import time

import pytest

from test_cli_kafka import floe, ok

kafka = pytest.importorskip("kafka")
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient  # noqa: E402


@pytest.fixture
def server(module_standalone):
    return module_standalone


@pytest.fixture
def admin(server):
    a = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    yield a
    a.close()


def group_configs(admin, group):
    """{key: (value, source name)} of a group, as kafka-python describes it."""
    resp = admin.describe_configs([ConfigResource(ConfigResourceType.GROUP, group)], config_filter="all")
    return {k: (c["value"], c["config_source"]) for k, c in resp["group"][group].items()}


def altered(admin, group, configs, **kw):
    """IncrementalAlterConfigs on the group: 'OK' or the error's text."""
    res = admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group, configs=configs)],
                              incremental=True, **kw)
    return res["group"][group]


def floe_configs(floe_bin, bs, *args):
    """`name=value[\t(mark)]` lines as {name: (value, mark or None)}."""
    out = ok(floe(floe_bin, bs, *args)).stdout
    rows = {}
    for line in out.splitlines():
        kv, _, mark = line.strip().partition("\t")
        k, _, v = kv.partition("=")
        rows[k] = (v, mark.strip("()") or None)
    return rows


def test_kafka_python_describes_and_alters_group_configs(server, admin):
    configs = group_configs(admin, "gc-payments")
    assert configs["consumer.session.timeout.ms"] == ("45000", "DEFAULT_CONFIG")
    assert configs["share.record.lock.duration.ms"] == ("30000", "DEFAULT_CONFIG")
    assert configs["share.auto.offset.reset"] == ("latest", "DEFAULT_CONFIG")
    assert len(configs) == 12  # Kafka's eight and Floe's four floe.* keys

    assert altered(admin, "gc-payments", {
        "consumer.session.timeout.ms": "50000",
        "share.delivery.count.limit": "3",
    }) == "OK"
    configs = group_configs(admin, "gc-payments")
    assert configs["consumer.session.timeout.ms"] == ("50000", "DYNAMIC_GROUP_CONFIG")
    assert configs["share.delivery.count.limit"] == ("3", "DYNAMIC_GROUP_CONFIG")

    # Kafka's errors: a value out of bounds, an unknown key; nothing changes.
    for bad in ({"share.record.lock.duration.ms": "1000"}, {"no.such.key": "1"}):
        res = altered(admin, "gc-payments", bad, raise_on_unknown=False)
        assert res.startswith("[Error 40] InvalidConfigurationError"), res
    assert group_configs(admin, "gc-payments")["share.record.lock.duration.ms"] == ("30000", "DEFAULT_CONFIG")

    # DELETE returns a key to its default.
    assert altered(admin, "gc-payments", {"consumer.session.timeout.ms": ("DELETE", None)}) == "OK"
    configs = group_configs(admin, "gc-payments")
    assert configs["consumer.session.timeout.ms"] == ("45000", "DEFAULT_CONFIG")
    assert configs["share.delivery.count.limit"] == ("3", "DYNAMIC_GROUP_CONFIG")


def test_floe_cli_shows_and_alters_group_configs(floe_bin, server):
    bs = server.bootstrap
    rows = floe_configs(floe_bin, bs, "group", "configs", "gc-cli")
    assert rows["share.isolation.level"] == ("read_uncommitted", "default")
    out = ok(floe(floe_bin, bs, "group", "alter", "gc-cli", "--config", "share.isolation.level=read_committed",
                  "--config", "share.auto.offset.reset=by_duration:PT1H")).stdout
    assert "altered group gc-cli" in out
    rows = floe_configs(floe_bin, bs, "configs", "--group", "gc-cli")
    assert rows["share.isolation.level"] == ("read_committed", None)
    assert rows["share.auto.offset.reset"] == ("by_duration:PT1H", None)
    bad = floe(floe_bin, bs, "group", "alter", "gc-cli", "--config", "consumer.heartbeat.interval.ms=20000")
    assert bad.returncode != 0 and "INVALID_CONFIG" in (bad.stderr + bad.stdout).upper().replace(" ", "_"), bad
    ok(floe(floe_bin, bs, "group", "alter", "gc-cli", "--delete-config", "share.isolation.level"))
    rows = floe_configs(floe_bin, bs, "group", "configs", "gc-cli")
    assert rows["share.isolation.level"] == ("read_uncommitted", "default")
    assert rows["share.auto.offset.reset"] == ("by_duration:PT1H", None)


def test_confluent_kafka_reads_group_configs_when_its_client_sends_type_32(server):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource as CR, ResourceType

    a = AdminClient({"bootstrap.servers": server.bootstrap})
    fut = a.describe_configs([CR(ResourceType.GROUP, "gc-confluent")], request_timeout=30)
    try:
        configs = list(fut.values())[0].result(timeout=60)
    except confluent_kafka.KafkaException as e:
        pytest.skip(f"this librdkafka does not send group configs as type 32: {e}")
    assert configs["consumer.session.timeout.ms"].value == "45000"


def test_consumer_session_timeout_ms_replaces_the_members_own(server, admin):
    """A member asking for 3 s (below Floe's group.min.session.timeout.ms,
    6 s: refused INVALID_SESSION_TIMEOUT) joins once the group's
    consumer.session.timeout.ms is set: the coordinator uses that instead."""
    from kafka import KafkaConsumer, KafkaProducer

    topic, group = "gc-session", "gc-session-group"
    assert altered(admin, group, {"consumer.session.timeout.ms": "45000"}) == "OK"
    p = KafkaProducer(bootstrap_servers=server.bootstrap)
    p.send(topic, b"one").get(timeout=60)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=server.bootstrap, group_id=group, auto_offset_reset="earliest",
                      session_timeout_ms=3000, heartbeat_interval_ms=1000, enable_auto_commit=False)
    try:
        deadline = time.time() + 60
        got = []
        while not got:
            assert time.time() < deadline, "the member never joined and read"
            for records in c.poll(timeout_ms=500).values():
                got += [r.value for r in records]
        assert got == [b"one"]
    finally:
        c.close()
