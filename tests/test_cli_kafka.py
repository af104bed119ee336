"""`floe topic`, `floe produce` and `floe consume` against a real `floe standalone`:
the CLI's own Kafka client end to end (CreateTopics, Metadata, DescribeConfigs,
IncrementalAlterConfigs, DeleteTopics, Produce, ListOffsets, Fetch)."""

import collections
import os
import subprocess
import time

import pytest

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]


def floe(floe_bin, bootstrap, *args, input=None, timeout=120):
    """Runs `floe ARGS` with FLOE_BOOTSTRAP pointing at the standalone."""
    env = dict(os.environ, FLOE_BOOTSTRAP=bootstrap)
    return subprocess.run([str(floe_bin), *args], input=input, capture_output=True, text=True,
                          timeout=timeout, env=env)


def ok(res):
    assert res.returncode == 0, (f"{' '.join(map(str, res.args))}: exit {res.returncode}\n"
                                 f"stdout:\n{res.stdout}\nstderr:\n{res.stderr}")
    return res


def topics(floe_bin, bootstrap):
    """`floe topic list` as {name: partitions}."""
    out = ok(floe(floe_bin, bootstrap, "topic", "list")).stdout
    return {name: int(n) for name, n in (line.split("\t") for line in out.splitlines())}


def config_lines(describe_out):
    """The `name=value[\t(mark)]` lines after `configs:` in `floe topic describe`, by name."""
    lines = describe_out.split("configs:\n", 1)[1].splitlines()
    out = {}
    for line in lines:
        setting, _, mark = line.strip().partition("\t")
        name, _, value = setting.partition("=")
        out[name] = (value, mark)
    return out


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (MurmurHash2, seed 0x9747b28c), as a signed 32-bit int."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    whole = len(data) // 4 * 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[whole:]
    if tail:
        for i, b in enumerate(tail):
            h ^= b << (8 * i)
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_partition(key: str, partitions: int) -> int:
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def parse_offset_lines(out):
    """`partition:offset\tkey\tvalue` lines as [(partition, offset, key, value)]."""
    records = []
    for line in out.splitlines():
        position, key, value = line.split("\t")
        partition, offset = position.split(":")
        records.append((int(partition), int(offset), key, value))
    return records


def test_murmur2_reference_values():
    # Kafka's own test values for Utils.murmur2, checking the helper used below.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536


def test_topic_create_list_describe_alter_delete(floe_bin, standalone):
    bs = standalone.bootstrap
    res = ok(floe(floe_bin, bs, "topic", "create", "cli-admin", "--partitions", "3",
                  "--config", "retention.ms=123456"))
    assert "created topic cli-admin" in res.stdout

    assert topics(floe_bin, bs).get("cli-admin") == 3

    res = ok(floe(floe_bin, bs, "topic", "describe", "cli-admin"))
    assert "partitions 3" in res.stdout.splitlines()[0], res.stdout
    partition_lines = [l for l in res.stdout.splitlines() if l.strip().startswith("partition ")]
    assert [l.split()[1] for l in partition_lines] == ["0", "1", "2"], res.stdout
    configs = config_lines(res.stdout)
    assert configs["retention.ms"] == ("123456", ""), res.stdout
    defaults = [name for name, (_, mark) in configs.items() if mark.startswith("(default")]
    assert defaults, f"no config marked as a default:\n{res.stdout}"

    res = ok(floe(floe_bin, bs, "topic", "alter", "cli-admin", "--config", "retention.ms=654321"))
    assert "set retention.ms=654321" in res.stdout
    configs = config_lines(ok(floe(floe_bin, bs, "topic", "describe", "cli-admin")).stdout)
    assert configs["retention.ms"] == ("654321", "")

    ok(floe(floe_bin, bs, "topic", "alter", "cli-admin", "--delete-config", "retention.ms"))
    describe = ok(floe(floe_bin, bs, "topic", "describe", "cli-admin")).stdout
    value, mark = config_lines(describe)["retention.ms"]
    assert mark.startswith("(default"), describe
    assert value not in ("123456", "654321"), describe

    res = ok(floe(floe_bin, bs, "topic", "delete", "cli-admin"))
    assert "deleted topic cli-admin" in res.stdout
    deadline = time.monotonic() + 15
    while "cli-admin" in topics(floe_bin, bs):
        assert time.monotonic() < deadline, "cli-admin still listed 15 s after DeleteTopics"
        time.sleep(0.2)
    res = floe(floe_bin, bs, "topic", "describe", "cli-admin")
    assert res.returncode != 0
    assert "UNKNOWN_TOPIC_OR_PARTITION" in res.stderr, res.stderr


def test_creating_an_existing_topic_fails_with_the_brokers_error(floe_bin, standalone):
    bs = standalone.bootstrap
    ok(floe(floe_bin, bs, "topic", "create", "cli-twice"))
    res = floe(floe_bin, bs, "topic", "create", "cli-twice")
    assert res.returncode != 0
    assert "TOPIC_ALREADY_EXISTS" in res.stderr, res.stderr


def test_altering_nothing_is_refused_before_connecting(floe_bin):
    res = floe(floe_bin, "127.0.0.1:1", "topic", "alter", "t")
    assert res.returncode != 0
    assert "nothing to alter" in res.stderr


def test_unreachable_bootstrap_is_a_clear_error(floe_bin):
    res = floe(floe_bin, "127.0.0.1:1", "topic", "list")
    assert res.returncode != 0
    assert "cannot connect to 127.0.0.1:1" in res.stderr, res.stderr


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_keyed_lines_round_trip_with_kafkas_partitioning(floe_bin, standalone, compression):
    bs = standalone.bootstrap
    topic = f"cli-keyed-{compression}"
    ok(floe(floe_bin, bs, "topic", "create", topic, "--partitions", "3"))
    lines = [f"key-{i % 37}:value {i}" for i in range(1000)]
    res = ok(floe(floe_bin, bs, "produce", topic, "--key-separator", ":", "--compression", compression,
                  input="\n".join(lines) + "\n"))
    assert "produced 1000 record(s)" in res.stderr, res.stderr

    res = ok(floe(floe_bin, bs, "consume", topic, "--from", "beginning", "--max-messages", "1000"))
    got = res.stdout.splitlines()
    assert len(got) == 1000, res.stderr
    assert sorted(got) == sorted(line.replace(":", "\t", 1) for line in lines)

    res = ok(floe(floe_bin, bs, "consume", topic, "--from", "beginning", "--max-messages", "1000",
                  "--print-offsets"))
    records = parse_offset_lines(res.stdout)
    assert len(records) == 1000
    by_key = collections.defaultdict(list)
    for partition, offset, key, value in sorted(records):
        assert partition == kafka_partition(key, 3), f"{key} in partition {partition}"
        by_key[key].append(int(value.split()[1]))
    for key, values in by_key.items():
        assert values == sorted(values), f"{key}: values out of order {values}"
    # Offsets in each partition are 0..n-1 without gaps.
    for p in range(3):
        offsets = sorted(o for part, o, _, _ in records if part == p)
        assert offsets == list(range(len(offsets))), f"partition {p}"


def test_unkeyed_lines_go_to_one_partition_per_batch_in_turn(floe_bin, standalone):
    bs = standalone.bootstrap
    ok(floe(floe_bin, bs, "topic", "create", "cli-rr", "--partitions", "3"))
    lines = [f"line {i}" for i in range(30)]
    # A long linger: groups are cut by --batch-records only, however slowly stdin comes.
    res = ok(floe(floe_bin, bs, "produce", "cli-rr", "--batch-records", "10", "--linger-ms", "60000",
                  "--acks", "1", input="\n".join(lines) + "\n"))
    for p in range(3):
        assert f"partition {p}: 10 record(s), offsets 0..=9" in res.stderr, res.stderr
    res = ok(floe(floe_bin, bs, "consume", "cli-rr", "--print-offsets"))
    records = [line.split("\t") for line in res.stdout.splitlines()]
    by_partition = collections.defaultdict(list)
    for position, value in records:
        by_partition[int(position.split(":")[0])].append(value)
    assert sorted(by_partition) == [0, 1, 2]
    assert by_partition[0] == lines[0:10]
    assert by_partition[1] == lines[10:20]
    assert by_partition[2] == lines[20:30]


def test_fixed_partition_from_offset_and_from_end(floe_bin, standalone):
    bs = standalone.bootstrap
    ok(floe(floe_bin, bs, "topic", "create", "cli-fixed", "--partitions", "2"))
    lines = [f"k{i}=v{i}" for i in range(20)]
    ok(floe(floe_bin, bs, "produce", "cli-fixed", "--partition", "1", "--key-separator", "=",
            "--compression", "lz4", input="\n".join(lines) + "\n"))
    res = ok(floe(floe_bin, bs, "consume", "cli-fixed", "--partition", "1", "--from", "15",
                  "--print-offsets", "--timeout-ms", "1000"))
    assert res.stdout.splitlines() == [f"1:{i}\tk{i}\tv{i}" for i in range(15, 20)]
    res = ok(floe(floe_bin, bs, "consume", "cli-fixed", "--from=-3", "--timeout-ms", "1000"))
    assert res.stdout.splitlines() == [f"k{i}\tv{i}" for i in range(17, 20)]
    started = time.monotonic()
    res = ok(floe(floe_bin, bs, "consume", "cli-fixed", "--from", "end", "--timeout-ms", "500"))
    assert res.stdout == ""
    assert time.monotonic() - started < 10
    res = ok(floe(floe_bin, bs, "consume", "cli-fixed", "--partition", "0", "--timeout-ms", "500"))
    assert res.stdout == ""


def test_lines_are_sent_once_stdin_pauses(floe_bin, standalone):
    bs = standalone.bootstrap
    ok(floe(floe_bin, bs, "topic", "create", "cli-linger"))
    env = dict(os.environ, FLOE_BOOTSTRAP=bs)
    producer = subprocess.Popen([str(floe_bin), "produce", "cli-linger", "--linger-ms", "50"],
                                stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        producer.stdin.write("first\n")
        producer.stdin.flush()
        # stdin stays open: the line must go out after the linger, not at the end.
        res = ok(floe(floe_bin, bs, "consume", "cli-linger", "--max-messages", "1", "--timeout-ms", "10000"))
        assert res.stdout == "first\n"
        producer.stdin.write("second\n")
        producer.stdin.close()
        assert producer.wait(timeout=30) == 0, producer.stderr.read()
        assert "produced 2 record(s) to topic cli-linger in 2 request(s)" in producer.stderr.read()
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()


def test_acks_zero_writes_without_answers(floe_bin, standalone):
    bs = standalone.bootstrap
    ok(floe(floe_bin, bs, "topic", "create", "cli-acks0"))
    res = ok(floe(floe_bin, bs, "produce", "cli-acks0", "--acks", "0", input="a\nb\nc\n"))
    assert "offsets unknown (acks=0)" in res.stderr, res.stderr
    res = ok(floe(floe_bin, bs, "consume", "cli-acks0", "--max-messages", "3", "--timeout-ms", "5000"))
    assert res.stdout.splitlines() == ["a", "b", "c"]


def test_bad_input_and_unknown_topics_fail_clearly(floe_bin, standalone):
    bs = standalone.bootstrap
    ok(floe(floe_bin, bs, "topic", "create", "cli-bad"))
    res = floe(floe_bin, bs, "produce", "cli-bad", "--key-separator", ":", input="a:1\nno separator\n")
    assert res.returncode != 0
    assert "stdin line 2" in res.stderr, res.stderr
    # The line before the bad one was sent.
    res = ok(floe(floe_bin, bs, "consume", "cli-bad", "--timeout-ms", "1000"))
    assert res.stdout.splitlines() == ["a\t1"]

    res = floe(floe_bin, bs, "produce", "cli-bad", "--partition", "5", input="x\n")
    assert res.returncode != 0
    assert "no partition 5" in res.stderr, res.stderr

    for args in (["produce", "cli-missing"], ["consume", "cli-missing"]):
        res = floe(floe_bin, bs, *args, input="x\n")
        assert res.returncode != 0
        assert "UNKNOWN_TOPIC_OR_PARTITION" in res.stderr, res.stderr


def test_tools_without_a_shell_create_once_produce_from_a_file_and_check_a_count(floe_bin, standalone, tmp_path):
    """The flags the helm chart's test pod uses (distroless: no shell, no pipe)."""
    bs = standalone.bootstrap
    for _ in range(2):  # a second create of the same topic is not an error
        ok(floe(floe_bin, bs, "topic", "create", "cli-noshell", "--partitions", "2", "--if-not-exists"))
    assert topics(floe_bin, bs).get("cli-noshell") == 2
    records = tmp_path / "records.txt"
    records.write_text("one\ntwo\nthree\n")
    ok(floe(floe_bin, bs, "produce", "--input", str(records), "cli-noshell"))
    res = ok(floe(floe_bin, bs, "consume", "cli-noshell", "--timeout-ms", "3000", "--min-messages", "3"))
    assert sorted(res.stdout.splitlines()) == ["one", "three", "two"]
    res = floe(floe_bin, bs, "consume", "cli-noshell", "--timeout-ms", "2000", "--min-messages", "4")
    assert res.returncode != 0 and "3 records read from cli-noshell, expected at least 4" in res.stderr, res.stderr
    res = floe(floe_bin, bs, "produce", "--input", str(tmp_path / "missing.txt"), "cli-noshell")
    assert res.returncode != 0 and "cannot open" in res.stderr, res.stderr
