"""Kafka's shell tools as operators type them: the scripts in `bin/` (kafka-topics.sh,
kafka-configs.sh, kafka-consumer-groups.sh, kafka-get-offsets.sh, kafka-delete-records.sh,
the console producer and consumer, kafka-acls.sh) against a real `floe standalone`,
with Kafka's flags and Kafka's output; unknown and unsupported flags exit 1 naming
the flag (docs/kafka-tools.md)."""

import json
import os
import pathlib
import re
import subprocess
import uuid

import pytest

from conftest import ROOT, Standalone, port_of

pytestmark = pytest.mark.timeout(300)

BIN = ROOT / "bin"


def tool(floe_bin, name, *args, input=None, env=None, timeout=120):
    """Runs bin/NAME ARGS with FLOE_BIN pointing at the binary under test."""
    full_env = dict(os.environ, FLOE_BIN=str(floe_bin), RUST_LOG="warn")
    full_env.update(env or {})
    return subprocess.run([str(BIN / name), *args], input=input, capture_output=True, text=True,
                          env=full_env, timeout=timeout)


def ok(res):
    assert res.returncode == 0, f"exit {res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    return res.stdout


def failed(res):
    assert res.returncode == 1, f"exit {res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    return res.stderr


def name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def kafka(module_standalone, floe_bin):
    """`tool(...)` bound to the module's standalone: kafka("kafka-topics.sh", "--list")."""
    bs = module_standalone.bootstrap

    def run(script, *args, **kw):
        return tool(floe_bin, script, "--bootstrap-server", bs, *args, **kw)
    run.bootstrap = bs
    return run


def test_scripts_are_executable_and_find_floe_through_floe_bin():
    for script in ["kafka-topics.sh", "kafka-configs.sh", "kafka-consumer-groups.sh", "kafka-get-offsets.sh",
                   "kafka-delete-records.sh", "kafka-console-producer.sh", "kafka-console-consumer.sh",
                   "kafka-acls.sh"]:
        path = BIN / script
        assert path.exists() and os.access(path, os.X_OK), path
        assert path.read_text().startswith("#!/bin/sh\n")


def test_topics_create_list_describe_alter_delete(kafka):
    t = name("kt-topics")
    # The way librdkafka's test suite calls it.
    out = ok(kafka("kafka-topics.sh", "--create", "--topic", t, "--partitions", "3", "--replication-factor", "1",
                   "--config", "retention.ms=3600000", "--config", "cleanup.policy=delete"))
    assert out.strip() == f"Created topic {t}."
    assert t in ok(kafka("kafka-topics.sh", "--list")).splitlines()

    res = kafka("kafka-topics.sh", "--create", "--topic", t, "--partitions", "3")
    assert "already exists" in failed(res)
    ok(kafka("kafka-topics.sh", "--create", "--topic", t, "--partitions", "3", "--if-not-exists"))

    lines = ok(kafka("kafka-topics.sh", "--describe", "--topic", t)).splitlines()
    head = lines[0].split("\t")
    assert head[0] == f"Topic: {t}"
    assert re.fullmatch(r"TopicId: [A-Za-z0-9_-]{22}", head[1]), head
    assert head[2:4] == ["PartitionCount: 3", "ReplicationFactor: 1"]
    configs = dict(kv.split("=", 1) for kv in head[4].removeprefix("Configs: ").split(","))
    assert configs["retention.ms"] == "3600000" and configs["cleanup.policy"] == "delete", configs
    parts = [ln.split("\t") for ln in lines[1:]]
    assert [p[:6] for p in parts] == [["", f"Topic: {t}", f"Partition: {i}", "Leader: 1", "Replicas: 1", "Isr: 1"]
                                      for i in range(3)], lines

    # --topic is a regular expression matching whole names.
    described = ok(kafka("kafka-topics.sh", "--describe", "--topic", t[:-3] + "..."))
    assert described.startswith(f"Topic: {t}\t")
    assert ok(kafka("kafka-topics.sh", "--list", "--topic", t[:5])) == ""

    ok(kafka("kafka-topics.sh", "--alter", "--topic", t, "--partitions", "5"))
    assert "PartitionCount: 5" in ok(kafka("kafka-topics.sh", "--describe", "--topic", t))

    ok(kafka("kafka-topics.sh", "--delete", "--topic", t))
    assert t not in ok(kafka("kafka-topics.sh", "--list")).splitlines()
    assert "does not exist as expected" in failed(kafka("kafka-topics.sh", "--delete", "--topic", t))
    ok(kafka("kafka-topics.sh", "--delete", "--topic", t, "--if-exists"))
    assert "does not exist as expected" in failed(kafka("kafka-topics.sh", "--describe", "--topic", t))


def test_unknown_and_unsupported_flags_exit_1_naming_the_flag(kafka, floe_bin):
    err = failed(kafka("kafka-topics.sh", "--list", "--no-such-flag"))
    assert "--no-such-flag" in err and "not a recognized option" in err
    err = failed(tool(floe_bin, "kafka-topics.sh", "--zookeeper", "localhost:2181", "--list"))
    assert "--zookeeper" in err and "not supported by Floe" in err
    err = failed(kafka("kafka-topics.sh", "--create", "--topic", "x", "--replica-assignment", "1:2"))
    assert "--replica-assignment" in err and "not supported by Floe" in err
    err = failed(kafka("kafka-consumer-groups.sh", "--list", "--zookeeper", "z:2181"))
    assert "--zookeeper" in err
    assert "exactly one action" in failed(kafka("kafka-topics.sh", "--list", "--describe"))
    assert "--bootstrap-server must be specified" in failed(tool(floe_bin, "kafka-topics.sh", "--list"))


def test_configs_describe_and_alter(kafka):
    t = name("kt-configs")
    ok(kafka("kafka-topics.sh", "--create", "--topic", t, "--partitions", "1"))
    out = ok(kafka("kafka-configs.sh", "--entity-type", "topics", "--entity-name", t, "--alter",
                   "--add-config", "retention.ms=7200000,cleanup.policy=[compact,delete]"))
    assert out.strip() == f"Completed updating config for topic {t}."
    lines = ok(kafka("kafka-configs.sh", "--entity-type", "topics", "--entity-name", t, "--describe")).splitlines()
    assert lines[0] == f"Dynamic configs for topic {t} are:"
    assert "  retention.ms=7200000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=7200000}" in lines
    assert any(ln.startswith("  cleanup.policy=compact,delete ") for ln in lines), lines
    # --all also shows the defaults.
    everything = ok(kafka("kafka-configs.sh", "--topic", t, "--describe", "--all"))
    assert everything.startswith(f"All configs for topic {t} are:")
    assert "DEFAULT_CONFIG" in everything

    ok(kafka("kafka-configs.sh", "--topic", t, "--alter", "--delete-config", "retention.ms"))
    assert "retention.ms" not in ok(kafka("kafka-configs.sh", "--topic", t, "--describe"))
    assert "Invalid config(s): retention.ms" in failed(
        kafka("kafka-configs.sh", "--topic", t, "--alter", "--delete-config", "retention.ms"))
    assert "not supported" in failed(kafka("kafka-configs.sh", "--entity-type", "users", "--entity-name", "u",
                                           "--describe"))
    brokers = ok(kafka("kafka-configs.sh", "--entity-type", "brokers", "--describe"))
    assert "configs for broker" in brokers and "Default configs for brokers in the cluster are:" in brokers


def test_console_producer_and_consumer_round_trip_with_keys(kafka):
    t = name("kt-console")
    ok(kafka("kafka-topics.sh", "--create", "--topic", t, "--partitions", "2"))
    lines = [f"key{i}:value{i}" for i in range(10)]
    ok(kafka("kafka-console-producer.sh", "--topic", t, "--property", "parse.key=true",
             "--property", "key.separator=:", input="\n".join(lines) + "\n"))
    res = kafka("kafka-console-consumer.sh", "--topic", t, "--from-beginning", "--max-messages", "10",
                "--property", "print.key=true", "--property", "key.separator=:", "--timeout-ms", "20000")
    out = ok(res)
    assert sorted(out.splitlines()) == sorted(lines)
    assert "Processed a total of 10 messages" in res.stderr

    # Values only by default; partition, offset and timestamp on request.
    res = kafka("kafka-console-consumer.sh", "--topic", t, "--partition", "0", "--offset", "earliest",
                "--property", "print.partition=true", "--property", "print.offset=true",
                "--property", "print.timestamp=true", "--timeout-ms", "3000")
    rows = [ln.split("\t") for ln in ok(res).splitlines()]
    assert rows, res.stderr
    assert all(r[0].startswith("CreateTime:") and r[1] == "Partition:0" and r[2].startswith("Offset:") and
               r[3].startswith("value") for r in rows), rows
    assert [int(r[2].removeprefix("Offset:")) for r in rows] == list(range(len(rows)))
    assert f"Processed a total of {len(rows)} messages" in res.stderr


def test_console_producer_legacy_broker_list_and_a_line_without_separator(kafka, floe_bin):
    t = name("kt-legacy")
    ok(kafka("kafka-topics.sh", "--create", "--topic", t, "--partitions", "1"))
    ok(tool(floe_bin, "kafka-console-producer.sh", "--broker-list", kafka.bootstrap, "--topic", t,
            input="plain1\nplain2\n"))
    res = kafka("kafka-console-consumer.sh", "--topic", t, "--from-beginning", "--max-messages", "2",
                "--timeout-ms", "20000")
    assert ok(res).splitlines() == ["plain1", "plain2"]
    res = kafka("kafka-console-producer.sh", "--topic", t, "--property", "parse.key=true", input="no-tab-here\n")
    assert "separator" in failed(res)


def test_consumer_groups_list_describe_reset_delete(kafka):
    t, g = name("kt-groups"), name("kt-group")
    ok(kafka("kafka-topics.sh", "--create", "--topic", t, "--partitions", "2"))
    ok(kafka("kafka-console-producer.sh", "--topic", t, "--property", "parse.key=true",
             input="".join(f"k{i}\tv{i}\n" for i in range(8))))
    # A consumer with --group commits what it printed.
    res = kafka("kafka-console-consumer.sh", "--topic", t, "--group", g, "--from-beginning", "--max-messages", "8",
                "--timeout-ms", "20000")
    assert len(ok(res).splitlines()) == 8
    assert g in ok(kafka("kafka-consumer-groups.sh", "--list")).splitlines()

    res = kafka("kafka-consumer-groups.sh", "--describe", "--group", g)
    rows = [ln.split() for ln in ok(res).splitlines() if ln.strip()]
    assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                       "HOST", "CLIENT-ID"]
    body = {int(r[2]): r for r in rows[1:]}
    assert sorted(body) == [0, 1]
    assert sum(int(r[3]) for r in body.values()) == 8
    assert all(r[3] == r[4] and r[5] == "0" and r[6:] == ["-", "-", "-"] for r in body.values()), rows
    assert "has no active members" in res.stderr

    # Kafka's default is a dry run: the plan is printed, nothing committed.
    res = kafka("kafka-consumer-groups.sh", "--reset-offsets", "--group", g, "--topic", t, "--to-earliest")
    plan = [ln.split() for ln in ok(res).splitlines() if ln.strip()]
    assert plan[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert sorted((r[2], r[3]) for r in plan[1:]) == [("0", "0"), ("1", "0")]
    lags = [ln.split()[5] for ln in ok(kafka("kafka-consumer-groups.sh", "--describe", "--group", g)).splitlines()
            if ln.startswith(g)]
    assert lags == ["0", "0"]

    ok(kafka("kafka-consumer-groups.sh", "--reset-offsets", "--group", g, "--all-topics", "--shift-by", "-1",
             "--execute"))
    rows = [ln.split() for ln in ok(kafka("kafka-consumer-groups.sh", "--describe", "--group", g)).splitlines()
            if ln.startswith(g)]
    assert sum(int(r[5]) for r in rows) == 2, rows
    ok(kafka("kafka-consumer-groups.sh", "--reset-offsets", "--group", g, "--topic", f"{t}:0", "--to-offset", "0",
             "--execute"))
    rows = {r[2]: r for r in (ln.split() for ln in ok(kafka("kafka-consumer-groups.sh", "--describe", "--group", g))
                              .splitlines() if ln.startswith(g))}
    assert rows["0"][3] == "0"

    out = ok(kafka("kafka-consumer-groups.sh", "--delete-offsets", "--group", g, "--topic", f"{t}:0"))
    assert f"Request succeed for deleting offsets with topic {t} group {g}" in out
    out = ok(kafka("kafka-consumer-groups.sh", "--delete", "--group", g))
    assert out.strip() == f"Deletion of requested consumer groups ('{g}') was successful."
    assert "does not exist" in failed(kafka("kafka-consumer-groups.sh", "--describe", "--group", g))


def test_get_offsets_and_delete_records(kafka, tmp_path):
    t = name("kt-offsets")
    ok(kafka("kafka-topics.sh", "--create", "--topic", t, "--partitions", "2"))
    # Keyed lines all to one partition: key "a" under Kafka's partitioner.
    ok(kafka("kafka-console-producer.sh", "--topic", t, "--property", "parse.key=true",
             input="".join(f"a\tv{i}\n" for i in range(5))))
    latest = dict(ln.rsplit(":", 1) for ln in ok(kafka("kafka-get-offsets.sh", "--topic", t)).splitlines())
    assert sorted(latest) == [f"{t}:0", f"{t}:1"]
    assert sorted(latest.values()) == ["0", "5"]
    full = next(k for k, v in latest.items() if v == "5").rsplit(":", 1)[1]
    earliest = ok(kafka("kafka-get-offsets.sh", "--topic", t, "--time", "-2", "--partitions", full))
    assert earliest.splitlines() == [f"{t}:{full}:0"]

    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"partitions": [{"topic": t, "partition": int(full), "offset": 3}], "version": 1}))
    out = ok(kafka("kafka-delete-records.sh", "--offset-json-file", str(spec)))
    assert "Records delete operation completed:" in out
    assert f"partition: {t}-{full}\tlow_watermark: 3" in out.splitlines()
    assert ok(kafka("kafka-get-offsets.sh", "--topic", t, "--time", "earliest", "--partitions", full)).strip() \
        == f"{t}:{full}:3"
    spec.write_text("{not json")
    assert "JSON" in failed(kafka("kafka-delete-records.sh", "--offset-json-file", str(spec)))


# ---------------------------------------------------------------------------
# kafka-acls.sh, on a standalone with the authorizer

ADMIN_PASSWORD = "admin-Pa55"


class AclStandalone(Standalone):
    """The authorizer on, `User:admin` a super user logging in with SASL PLAIN."""

    def __init__(self, floe_bin, workdir):
        super().__init__(floe_bin, workdir, name="kafka-tools-acls")
        self.sasl_port = 0
        self.users_file = pathlib.Path(workdir) / "plain-users"
        self.users_file.write_text(f"admin:{ADMIN_PASSWORD}\n")

    def args(self):
        return super().args() + [
            "--listeners", f"PLAINTEXT://127.0.0.1:{self.kafka_port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "--sasl-plain-users-file", str(self.users_file),
            "--authorizer", "acl",
            "--super-users", "User:admin",
        ]

    def start(self):
        super().start()
        ports = json.loads(self.ports_path.read_text())
        self.sasl_port = port_of(ports["kafka.sasl_plaintext"])
        return self


def test_acls_add_list_remove_with_a_java_command_config(floe_bin, tmp_path):
    s = AclStandalone(floe_bin, tmp_path).start()
    try:
        cfg = tmp_path / "admin.properties"
        # A Java client's properties, the JAAS line continued as runbooks write it.
        cfg.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                       "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                       f"    username=\"admin\" password=\"{ADMIN_PASSWORD}\";\n")
        conn = ["--bootstrap-server", f"127.0.0.1:{s.sasl_port}", "--command-config", str(cfg)]

        def acls(*args):
            return tool(floe_bin, "kafka-acls.sh", *conn, *args)

        out = ok(acls("--add", "--allow-principal", "User:bob", "--operation", "Read", "--operation", "Describe",
                      "--topic", "orders", "--group", "billing"))
        assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:" in out
        assert "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)" in out
        ok(acls("--add", "--allow-principal", "User:carol", "--producer", "--topic", "orders"))

        listed = ok(acls("--list", "--topic", "orders"))
        assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:" \
            in listed
        for entry in ["(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)",
                      "(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)",
                      "(principal=User:carol, host=*, operation=WRITE, permissionType=ALLOW)",
                      "(principal=User:carol, host=*, operation=CREATE, permissionType=ALLOW)"]:
            assert entry in listed, listed
        mine = ok(acls("--list", "--principal", "User:carol"))
        assert mine.startswith("ACLs for principal `User:carol`") and "User:bob" not in mine
        # A group only takes its own operations, as in Kafka.
        assert "only supports" in failed(acls("--add", "--allow-principal", "User:bob", "--operation", "Write",
                                              "--group", "billing"))

        ok(acls("--remove", "--force", "--allow-principal", "User:bob", "--operation", "Read", "--topic", "orders"))
        listed = ok(acls("--list", "--topic", "orders"))
        assert "User:bob, host=*, operation=READ" not in listed and "User:bob, host=*, operation=DESCRIBE" in listed
        # Without principals, every ACL of the resource goes.
        ok(acls("--remove", "--force", "--topic", "orders"))
        assert "orders" not in ok(acls("--list", "--topic", "orders"))
        assert "name=billing" in ok(acls("--list"))

        # The Java keystore a runbook may still name is refused with what to do.
        jks = tmp_path / "jks.properties"
        jks.write_text("security.protocol=SSL\nssl.truststore.location=/etc/kafka/truststore.jks\n"
                       "ssl.truststore.password=changeit\n")
        err = failed(tool(floe_bin, "kafka-acls.sh", "--bootstrap-server", s.bootstrap, "--command-config", str(jks),
                          "--list"))
        assert "JKS" in err and "ssl.truststore.type=PEM" in err
    finally:
        s.stop()
