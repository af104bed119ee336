"""The operator's commands against one real `floe standalone`:
- `floe group` with a real consumer group (confluent-kafka): list, describe
  with lag (the columns of `kafka-consumer-groups.sh --describe`),
  reset-offsets (every target, dry run, refused with live members),
  delete-offsets and delete;
- `floe offsets`, `floe delete-records`, `floe configs`, `floe topic
  add-partitions`, describe of every topic, --if-exists / --if-not-exists,
  several --bootstrap addresses;
- `floe produce` (JSON lines, headers, tombstones, timestamps, idempotence)
  and `floe consume` (--output json, -f format strings, --from-time,
  --group with commits, --follow), checked with confluent-kafka too."""

import json
import subprocess
import time

import pytest

from test_cli_kafka import floe, ok


@pytest.fixture
def server(module_standalone):
    """One standalone for the module: each test uses its own topic and group."""
    return module_standalone


def table_of(out, first_column):
    """The rows of a `floe` table as dicts by column, from its header line
    (the first line starting with `first_column`) to the first line that is
    not a row."""
    lines = out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(first_column + " "))
    header = lines[start].split()
    rows = []
    for line in lines[start + 1:]:
        cells = line.split()
        if len(cells) != len(header):
            break
        rows.append(dict(zip(header, cells)))
    return rows


def table(out):
    return table_of(out, "GROUP")


def describe(floe_bin, bs, group):
    out = ok(floe(floe_bin, bs, "group", "describe", group)).stdout
    rows = {(r["TOPIC"], int(r["PARTITION"])): r for r in table(out)}
    total = int(out.rsplit("TOTAL-LAG ", 1)[1].split()[0])
    return out, rows, total


def produce(floe_bin, bs, topic, n, partition):
    lines = "".join(f"v{i}\n" for i in range(n))
    ok(floe(floe_bin, bs, "produce", topic, "--partition", str(partition), input=lines))


def join_and_commit(bs, topic, group, expect):
    """A confluent-kafka consumer in `group` that reads `expect` records,
    commits them and stays in the group (returned; the caller closes it)."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "client.id": "cli-groups-test"})
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < expect:
        assert time.monotonic() < deadline, f"read {got} of {expect} records in 60 s"
        for m in c.consume(num_messages=100, timeout=0.5):
            assert not m.error(), m.error()
            got += 1
    c.commit(asynchronous=False)
    return c


def test_describe_shows_members_offsets_and_lag_and_reset_waits_for_an_empty_group(floe_bin, server):
    bs = server.bootstrap
    topic, group = "cli-grp-lag", "cli-g-lag"
    ok(floe(floe_bin, bs, "topic", "create", topic, "--partitions", "2"))
    produce(floe_bin, bs, topic, 6, 0)
    produce(floe_bin, bs, topic, 4, 1)
    consumer = join_and_commit(bs, topic, group, 10)
    try:
        listing = table(ok(floe(floe_bin, bs, "group", "list")).stdout)
        assert {"GROUP": group, "TYPE": "classic", "STATE": "Stable", "PROTOCOL-TYPE": "consumer"} in listing, listing

        produce(floe_bin, bs, topic, 3, 1)
        out, rows, total = describe(floe_bin, bs, group)
        assert "state Stable, 1 member(s)" in out, out
        assert rows[(topic, 0)]["CURRENT-OFFSET"] == "6" and rows[(topic, 0)]["LAG"] == "0", out
        assert rows[(topic, 1)]["CURRENT-OFFSET"] == "4", out
        assert rows[(topic, 1)]["LOG-END-OFFSET"] == "7" and rows[(topic, 1)]["LAG"] == "3", out
        assert total == 3, out
        for r in rows.values():
            assert r["CONSUMER-ID"] != "-" and r["CLIENT-ID"] == "cli-groups-test", out

        members = table(ok(floe(floe_bin, bs, "group", "describe", group, "--members")).stdout)
        assert len(members) == 1 and members[0]["#PARTITIONS"] == "2", members

        res = floe(floe_bin, bs, "group", "reset-offsets", group, "--topic", topic, "--to-earliest",
                   "--execute")
        assert res.returncode != 0 and "live member" in res.stderr, res.stderr
        res = floe(floe_bin, bs, "group", "delete", group)
        assert res.returncode != 0 and "NON_EMPTY_GROUP" in res.stderr, res.stderr
        res = floe(floe_bin, bs, "consume", topic, "--group", group, "--max-messages", "1")
        assert res.returncode != 0 and "has live members" in res.stderr, res.stderr
    finally:
        consumer.close()

    out, rows, total = describe(floe_bin, bs, group)
    assert "state Empty, 0 member(s)" in out, out
    assert total == 3 and all(r["CONSUMER-ID"] == "-" for r in rows.values()), out

    got = json.loads(ok(floe(floe_bin, bs, "group", "describe", group, "--json")).stdout)
    assert got["state"] == "Empty" and got["total_lag"] == 3 and got["members"] == 0, got
    assert [(p["partition"], p["current_offset"], p["log_end_offset"], p["lag"], p["consumer_id"])
            for p in got["partitions"]] == [(0, 6, 6, 0, None), (1, 4, 7, 3, None)], got
    listed = [json.loads(l) for l in ok(floe(floe_bin, bs, "group", "list", "--json")).stdout.splitlines()]
    assert {"group": group, "type": "classic", "state": "Empty", "protocol_type": "consumer"} in listed, listed


def test_reset_offsets_to_every_target(floe_bin, server):
    bs = server.bootstrap
    topic, group = "cli-grp-reset", "cli-g-reset"
    ok(floe(floe_bin, bs, "topic", "create", topic, "--partitions", "2"))
    produce(floe_bin, bs, topic, 10, 0)
    produce(floe_bin, bs, topic, 5, 1)
    join_and_commit(bs, topic, group, 15).close()

    def reset(*how, execute=True):
        args = ["group", "reset-offsets", group, *how] + (["--execute"] if execute else [])
        return table(ok(floe(floe_bin, bs, *args)).stdout)

    def committed():
        return {p: r["CURRENT-OFFSET"] for (_, p), r in describe(floe_bin, bs, group)[1].items()}

    # A dry run (the default) shows the plan and changes nothing.
    plan = reset("--topic", topic, "--to-earliest", execute=False)
    assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["NEW-OFFSET"]) for r in plan] == \
        [("0", "10", "0"), ("1", "5", "0")], plan
    assert committed() == {0: "10", 1: "5"}

    reset("--topic", topic, "--to-earliest")
    assert committed() == {0: "0", 1: "0"}
    reset("--all-topics", "--shift-by", "3")
    assert committed() == {0: "3", 1: "3"}
    reset("--topic", f"{topic}:1", "--shift-by=-10")
    assert committed() == {0: "3", 1: "0"}, "a shift stops at the first offset"
    reset("--topic", topic, "--to-offset", "7")
    assert committed() == {0: "7", 1: "5"}, "an offset past the end is the end"
    reset("--topic", f"{topic}:0", "--to-latest")
    assert committed() == {0: "10", 1: "5"}
    reset("--topic", topic, "--to-datetime", "1970-01-01T00:00:00Z")
    assert committed() == {0: "0", 1: "0"}
    reset("--topic", topic, "--to-datetime", "2999-01-01")
    assert committed() == {0: "10", 1: "5"}, "no record after the time: the end"

    res = floe(floe_bin, bs, "group", "reset-offsets", group, "--topic", topic)
    assert res.returncode != 0 and "--to-earliest" in res.stderr, res.stderr


def test_delete_offsets_then_the_group(floe_bin, server):
    bs = server.bootstrap
    topic, group = "cli-grp-delete", "cli-g-delete"
    ok(floe(floe_bin, bs, "topic", "create", topic, "--partitions", "2"))
    produce(floe_bin, bs, topic, 2, 0)
    produce(floe_bin, bs, topic, 2, 1)
    join_and_commit(bs, topic, group, 4).close()

    res = ok(floe(floe_bin, bs, "group", "delete-offsets", group, "--topic", f"{topic}:0"))
    assert f"in {topic} partition 0" in res.stdout
    _, rows, _ = describe(floe_bin, bs, group)
    assert set(rows) == {(topic, 1)}, rows

    ok(floe(floe_bin, bs, "group", "delete", group))
    assert group not in [r["GROUP"] for r in table(ok(floe(floe_bin, bs, "group", "list")).stdout)]
    res = floe(floe_bin, bs, "group", "describe", group)
    assert res.returncode != 0 and "does not exist" in res.stderr, res.stderr


def offsets(floe_bin, bs, topic, *extra):
    rows = table_of(ok(floe(floe_bin, bs, "offsets", topic, *extra)).stdout, "TOPIC")
    return {int(r["PARTITION"]): r for r in rows}


def test_offsets_and_delete_records(floe_bin, server):
    bs = server.bootstrap
    topic = "cli-offsets"
    ok(floe(floe_bin, bs, "topic", "create", topic, "--partitions", "2"))
    produce(floe_bin, bs, topic, 5, 0)
    produce(floe_bin, bs, topic, 2, 1)
    got = offsets(floe_bin, bs, topic, "--time", "0")
    assert [(r["EARLIEST"], r["LATEST"], r["RECORDS"], r["AT-TIME"]) for r in got.values()] == \
        [("0", "5", "5", "0"), ("0", "2", "2", "0")], got
    got = offsets(floe_bin, bs, topic, "--partition", "1", "--time", "2999-01-01")
    assert list(got) == [1] and got[1]["AT-TIME"] == "-1", got
    got = [json.loads(l) for l in ok(floe(floe_bin, bs, "offsets", topic, "--json")).stdout.splitlines()]
    assert got == [{"topic": topic, "partition": p, "earliest": 0, "latest": n, "records": n, "at_time": None}
                   for p, n in ((0, 5), (1, 2))], got

    res = ok(floe(floe_bin, bs, "delete-records", topic, "--partition", "0", "--before", "3"))
    assert table_of(res.stdout, "TOPIC") == [{"TOPIC": topic, "PARTITION": "0", "EARLIEST": "3"}]
    ok(floe(floe_bin, bs, "delete-records", topic, "--partition", "1", "--before", "end"))
    got = offsets(floe_bin, bs, topic)
    assert [(r["EARLIEST"], r["LATEST"], r["RECORDS"]) for r in got.values()] == \
        [("3", "5", "2"), ("2", "2", "0")], got
    res = floe(floe_bin, bs, "delete-records", topic, "--partition", "0", "--before", "99")
    assert res.returncode != 0 and "OFFSET_OUT_OF_RANGE" in res.stderr, res.stderr


def test_topic_add_partitions_describe_all_and_existence_flags(floe_bin, server):
    bs = server.bootstrap
    topic = "cli-grow"
    ok(floe(floe_bin, bs, "topic", "create", topic))
    res = ok(floe(floe_bin, bs, "topic", "create", topic, "--if-not-exists"))
    assert "exists already" in res.stdout
    ok(floe(floe_bin, bs, "topic", "add-partitions", topic, "--total", "3"))
    produce(floe_bin, bs, topic, 4, 2)
    res = floe(floe_bin, bs, "topic", "add-partitions", topic, "--total", "2")
    assert res.returncode != 0 and "INVALID_PARTITIONS" in res.stderr, res.stderr

    # Every topic at once, with offsets per partition (a second topic, so that the
    # test does not lean on the others' topics).
    ok(floe(floe_bin, bs, "topic", "create", "cli-grow-second", "--if-not-exists"))
    out = ok(floe(floe_bin, bs, "topic", "describe")).stdout
    block = out.split(f"topic {topic}\t", 1)[1].split("\n\n", 1)[0]
    parts = [l.split("\t") for l in block.splitlines() if l.strip().startswith("partition ")]
    assert len(parts) == 3, block
    assert "latest 4" in parts[2] and "records 4" in parts[2], block
    # Stored bytes per partition (DescribeLogDirs): only partition 2 holds records.
    sizes = [int(next(c for c in p if c.startswith("bytes ")).split()[1]) for p in parts]
    assert sizes[0] == sizes[1] == 0 and sizes[2] > 0, block
    assert out.count("\ntopic ") + out.startswith("topic ") >= 2, out

    for cmd in (["topic", "delete", "cli-missing"], ["topic", "add-partitions", "cli-missing", "--total", "2"],
                ["topic", "alter", "cli-missing", "--config", "retention.ms=1"]):
        assert floe(floe_bin, bs, *cmd).returncode != 0, cmd
        res = ok(floe(floe_bin, bs, *cmd, "--if-exists"))
        assert "does not exist" in res.stdout, cmd


def test_configs_of_a_broker_and_several_bootstrap_addresses(floe_bin, server):
    bs = server.bootstrap
    topic = "cli-configs"
    ok(floe(floe_bin, bs, "topic", "create", topic, "--config", "retention.ms=4242"))
    leader = ok(floe(floe_bin, bs, "topic", "describe", topic)).stdout.split("leader ", 1)[1].split()[0]
    out = ok(floe(floe_bin, bs, "configs", "--broker", leader)).stdout
    assert out.strip() and all("=" in l for l in out.splitlines()), out
    out = ok(floe(floe_bin, bs, "configs", "--topic", topic)).stdout
    assert "  retention.ms=4242\n" in out, out

    # The first address refuses: the next one is used.
    res = ok(floe(floe_bin, f"127.0.0.1:1,{bs}", "topic", "list"))
    assert topic in res.stdout
    res = floe(floe_bin, "127.0.0.1:1,127.0.0.1:2", "topic", "list")
    assert res.returncode != 0 and "none of the 2 bootstrap addresses answered" in res.stderr, res.stderr


JSON_LINES = "".join(json.dumps(r) + "\n" for r in [
    {"key": "a", "value": "1", "headers": [["h", "x"], ["h", "y"]], "timestamp": 1000},
    {"key": "a", "timestamp": 2000},
    {"value": {"n": 2}, "timestamp": "1970-01-01T00:00:03Z"},
    {"key": {"base64": "/wA="}, "value": "bin", "headers": {"e": None}, "timestamp": 5000},
])


def test_produce_json_lines_and_consume_them_as_json_and_formats(floe_bin, server, kit):
    bs = server.bootstrap
    topic = "cli-json"
    ok(floe(floe_bin, bs, "topic", "create", topic))
    res = ok(floe(floe_bin, bs, "produce", topic, "--input-format", "json", input=JSON_LINES))
    assert "idempotent: producer id" in res.stderr, res.stderr

    out = ok(floe(floe_bin, bs, "consume", topic, "--output", "json")).stdout
    got = [json.loads(l) for l in out.splitlines()]
    assert [(r["offset"], r["key"], r["value"], r["headers"]) for r in got] == [
        (0, "a", "1", [["h", "x"], ["h", "y"]]),
        (1, "a", None, []),
        (2, None, '{"n":2}', []),
        (3, {"base64": "/wA="}, "bin", [["e", None]]),
    ], got
    assert got[0]["timestamp"] == 1000 and got[2]["timestamp"] == 3000 and got[3]["timestamp"] == 5000
    assert got[0]["topic"] == topic and got[0]["partition"] == 0

    out = ok(floe(floe_bin, bs, "consume", topic, "--max-messages", "3",
                   "-f", r"%p:%o|%T|%k|%K|%S|%h\n")).stdout
    assert out.splitlines()[:3] == ["0:0|1000|a|1|1|h=x,h=y", "0:1|2000|a|1|-1|",
                                    "0:2|3000||-1|7|"], out

    # Time lookups: the first record at or after 2.5 s is offset 2.
    assert offsets(floe_bin, bs, topic, "--time", "2500")[0]["AT-TIME"] == "2"
    out = ok(floe(floe_bin, bs, "consume", topic, "--from-time", "1970-01-01T00:00:02.500Z", "-f", r"%o\n")).stdout
    assert out.split() == ["2", "3"], out

    # A Kafka client sees the same headers, tombstone and timestamps.
    seen = kit.consume(bs, topic)
    assert [(m[2], m[3]) for m in seen] == [(b"a", b"1"), (b"a", None), (None, b'{"n":2}'), (b"\xff\x00", b"bin")]
    assert seen[0][4] == [("h", b"x"), ("h", b"y")] and seen[0][5][1] == 1000


def test_text_produce_with_headers_timestamp_and_tombstones(floe_bin, server):
    bs = server.bootstrap
    topic = "cli-text-flags"
    ok(floe(floe_bin, bs, "topic", "create", topic))
    res = ok(floe(floe_bin, bs, "produce", topic, "--key-separator", ":", "--header", "src=cli",
                  "--timestamp", "2024-05-01T12:00:00Z", "--empty-as-null", "--acks", "1",
                  input="k:v\nk:\n"))
    assert "idempotent" not in res.stderr, "acks=1 writes without a producer id"
    got = [json.loads(l) for l in ok(floe(floe_bin, bs, "consume", topic, "--output", "json")).stdout.splitlines()]
    assert [(r["key"], r["value"], r["headers"], r["timestamp"]) for r in got] == [
        ("k", "v", [["src", "cli"]], 1714564800000), ("k", None, [["src", "cli"]], 1714564800000)], got
    res = floe(floe_bin, bs, "produce", topic, "--input-format", "json", input='{"vlaue": 1}\n')
    assert res.returncode != 0 and "stdin line 1" in res.stderr and "unknown field" in res.stderr, res.stderr


def test_consume_with_a_group_commits_and_resumes(floe_bin, server):
    bs = server.bootstrap
    topic, group = "cli-consume-group", "cli-g-consume"
    ok(floe(floe_bin, bs, "topic", "create", topic))
    produce(floe_bin, bs, topic, 5, 0)
    out = ok(floe(floe_bin, bs, "consume", topic, "--group", group, "--max-messages", "3")).stdout
    assert out.split() == ["v0", "v1", "v2"], out
    assert describe(floe_bin, bs, group)[1][(topic, 0)]["CURRENT-OFFSET"] == "3"
    out = ok(floe(floe_bin, bs, "consume", topic, "--group", group, "--timeout-ms", "1000")).stdout
    assert out.split() == ["v3", "v4"], out
    _, rows, total = describe(floe_bin, bs, group)
    assert rows[(topic, 0)]["CURRENT-OFFSET"] == "5" and total == 0


def test_follow_waits_for_new_records(floe_bin, server):
    bs = server.bootstrap
    topic = "cli-follow"
    ok(floe(floe_bin, bs, "topic", "create", topic))
    follower = subprocess.Popen([str(floe_bin), "consume", topic, "--follow", "--max-messages", "2",
                                 "--bootstrap", bs], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        produce(floe_bin, bs, topic, 1, 0)
        produce(floe_bin, bs, topic, 1, 0)
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 0, err
    assert out.split() == ["v0", "v0"], out


def test_test_drivers_refuse_a_cluster_with_live_brokers(floe_dev_bin, server):
    # `floe-dev meta commit-stream` / `bench` register a fake broker: pointed at
    # a real cluster they would take its partitions over.
    for driver in (["commit-stream", "--count", "1"], ["bench", "--seconds", "1"]):
        res = subprocess.run([str(floe_dev_bin), "meta", *driver, "--addrs", f"127.0.0.1:{server.meta_port}"],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode != 0 and "has live brokers" in res.stderr, res.stderr


def num_partitions_setting(floe_bin, bs):
    """The `num.partitions` a standalone reports (its --default-partitions)."""
    ok(floe(floe_bin, bs, "topic", "create", "cli-settings", "--if-not-exists"))
    leader = ok(floe(floe_bin, bs, "topic", "describe", "cli-settings")).stdout.split("leader ", 1)[1].split()[0]
    out = ok(floe(floe_bin, bs, "configs", "--broker", leader)).stdout
    return out.split("num.partitions=", 1)[1].split()[0]


def test_a_config_file_sets_a_roles_flags(floe_bin, standalone_factory, tmp_path, monkeypatch):
    # The third way beside flags and variables: top-level keys for every role
    # that has the flag, a [role] table for one role.
    cfg = tmp_path / "floe.toml"
    cfg.write_text('flush-interval-ms = 5\n[standalone]\ndefault-partitions = 3\n[proxy]\ndefault-partitions = 7\n')
    s = standalone_factory(config_file=str(cfg))
    assert num_partitions_setting(floe_bin, s.bootstrap) == "3"
    s.stop()

    # A variable wins over the file, and the role's own name over the shared one.
    monkeypatch.setenv("FLOE_DEFAULT_PARTITIONS", "9")
    monkeypatch.setenv("FLOE_STANDALONE_DEFAULT_PARTITIONS", "4")
    s = standalone_factory(name="per-role-env", config_file=str(cfg))
    assert num_partitions_setting(floe_bin, s.bootstrap) == "4"

    cfg.write_text("flush-intervl-ms = 5\n")
    res = subprocess.run([str(floe_bin), "standalone", "--config-file", str(cfg)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode != 0 and "flush-intervl-ms" in res.stderr, res.stderr
