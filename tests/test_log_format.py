"""`--log-format json` (issue 43's structured logs): every line a process
writes to stderr is one JSON object with its timestamp, level, target and
message, the event's fields beside them (a log pipeline indexes them), and
the span it happened in; `text` (the default) stays what people read."""

import json
import re

import pytest

pytestmark = [pytest.mark.timeout(120)]

# Lines in a process's log file that are not log lines: the harness's own
# ("---- start #1: …") and what the standalone prints on stdout for people
# ("floe standalone ready: …"); the file holds both streams.
NOT_LOGS = re.compile(r"^(---- |floe standalone )")


def log_lines(s):
    return [line for line in s.log_path.read_text().splitlines() if line.strip() and not NOT_LOGS.match(line)]


def test_json_logs_are_one_object_a_line_with_the_events_fields(standalone_factory):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    s = standalone_factory(log_format="json")
    p = confluent_kafka.Producer({"bootstrap.servers": s.bootstrap, "acks": "all"})
    p.produce("json-logs", value=b"x")
    assert p.flush(30) == 0
    s.stop()
    lines = log_lines(s)
    assert lines, "the standalone logged nothing"
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:
            pytest.fail(f"a log line that is not JSON: {line[:200]}")
    for e in events:
        assert {"timestamp", "level", "target"} <= e.keys(), e
        assert e["level"] in {"TRACE", "DEBUG", "INFO", "WARN", "ERROR"}, e
    # An event's fields sit beside its message: the take-over of the topic's
    # partition names the partition and its epoch.
    took = [e for e in events if e.get("message") == "took partition over"]
    assert took and all("partition" in e and "epoch" in e for e in took), took[:3]


def test_text_logs_stay_the_default(standalone_factory):
    s = standalone_factory()
    s.stop()
    lines = log_lines(s)
    assert lines and not any(line.startswith("{") for line in lines), lines[:5]
    assert any("INFO" in line for line in lines), lines[:5]
