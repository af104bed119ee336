"""The console's JSON API (`/ui/api/`, docs/console.md) against what Kafka
answers, on a real `floe standalone`: every figure the pages show is checked
against confluent-kafka's own view of the same topics and groups (watermarks,
committed offsets), and the records against what was produced. Then the
rules: without security anyone is `User:ANONYMOUS`; with `--admin-token-file`
a request needs a token, and a principal sees only what its ACLs let it
describe (the same rules as on the Kafka port); where Kafka clients
authenticate and the admin port has no tokens, the console serves no one.
The browser's view of the same pages is tests/test_console.py."""

import base64
import json
import secrets
import time
import urllib.error
import urllib.request

import pytest

from test_acls import AclStandalone, binding, create_acls, create_topics
from test_acls import admin as admin_client

confluent_kafka = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402

pytestmark = [pytest.mark.timeout(300)]

TOPIC = "console-orders"
PARTITIONS = 3
RECORDS = 30
GROUP = "console-readers"


def call(base, path, token=None, data=None, content_type=None):
    """(status, JSON body or text) of a GET, or a POST when `data` is given."""
    headers = {"Content-Type": content_type} if content_type else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(base + path, data=data, method="POST" if data is not None else "GET",
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw, status, ctype = r.read(), r.status, r.headers.get("content-type", "")
    except urllib.error.HTTPError as e:
        raw, status, ctype = e.read(), e.code, e.headers.get("content-type", "")
    return status, (json.loads(raw) if "json" in ctype else raw.decode(errors="replace"))


def post(base, path, body, token=None, content_type="application/json"):
    """POST base+path with `body` as JSON (or as given, with another type)."""
    data = json.dumps(body).encode() if content_type == "application/json" else body
    return call(base, path, token, data, content_type)


def get(base, path, token=None):
    return call(base, path, token)


def ok(base, path, token=None):
    status, body = get(base, path, token)
    assert status == 200, f"GET {path}: {status} {body}"
    return body


@pytest.fixture(scope="module")
def data(module_standalone):
    """A topic of JSON records with keys and headers, one of 60 small topics
    for paging, and a group that committed behind the end."""
    s = module_standalone
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": s.bootstrap})
    topics = [confluent_kafka.admin.NewTopic(TOPIC, PARTITIONS)]
    topics += [confluent_kafka.admin.NewTopic(f"console-page-{i:02}", 1) for i in range(60)]
    for f in admin.create_topics(topics, request_timeout=30).values():
        f.result()
    p = confluent_kafka.Producer({"bootstrap.servers": s.bootstrap, "acks": "all"})
    t0 = int(time.time() * 1000)
    for i in range(RECORDS):
        p.produce(TOPIC, key=f"k{i}", value=json.dumps({"n": i, "name": f"item {i}"}).encode(),
                  partition=i % PARTITIONS, headers=[("source", b"test"), ("nothing", None)],
                  timestamp=t0 + i)
    p.produce(TOPIC, key=b"\xff\xfe", value=b"\x00\x01binary", partition=0, timestamp=t0 + RECORDS)
    assert p.flush(30) == 0
    c = confluent_kafka.Consumer({"bootstrap.servers": s.bootstrap, "group.id": GROUP,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    commits = [confluent_kafka.TopicPartition(TOPIC, p, 2) for p in range(PARTITIONS)]
    c.commit(offsets=commits, asynchronous=False)
    c.close()
    return {"base": s.admin_url, "bootstrap": s.bootstrap, "t0": t0}


def watermarks(bootstrap, topic, partitions):
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "console-watermarks"})
    try:
        return [c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=30, cached=False)
                for p in range(partitions)]
    finally:
        c.close()


def test_the_pages_are_served_to_anyone_and_unknown_routes_answer_json(data):
    base = data["base"]
    status, html = get(base, "/ui")
    assert status == 200 and "<html" in html.lower()
    assert get(base, "/ui/assets/app.js")[0] == 200
    assert get(base, "/ui/assets/no-such-file.js")[0] == 404
    status, body = get(base, "/ui/api/no-such-route")
    assert status == 404 and body["kind"] == "not_found", body
    assert ok(base, "/ui/api/whoami")["principal"] == "User:ANONYMOUS"


def test_the_overview_names_the_cluster_its_broker_and_what_it_owns(data):
    o = ok(data["base"], "/ui/api/overview")
    assert o["cluster_id"], o
    assert o["metadata"] and o["metadata"]["leader_id"] >= 1, o
    assert any(m["leader"] for m in o["metadata"]["members"]), o
    [broker] = o["brokers"]
    assert broker["state"] == "live" and broker["lease_left_ms"] > 0, broker
    # Every partition of every topic is owned by the one broker.
    assert broker["partitions"] == o["partitions"] >= PARTITIONS + 60, o
    assert o["unowned_partitions"] == 0
    assert o["topics"] >= 61


def test_topics_are_filtered_and_paged_on_the_server(data):
    base = data["base"]
    page1 = ok(base, "/ui/api/topics?q=CONSOLE-PAGE&limit=50")
    assert page1["total"] == 60 and len(page1["topics"]) == 50, page1["total"]
    page2 = ok(base, "/ui/api/topics?q=console-page&limit=50&offset=50")
    names = [t["name"] for t in page1["topics"] + page2["topics"]]
    assert names == [f"console-page-{i:02}" for i in range(60)]
    assert get(base, "/ui/api/topics?limit=0")[0] == 400
    assert get(base, "/ui/api/topics?limit=501")[0] == 400
    [row] = ok(base, f"/ui/api/topics?q={TOPIC}")["topics"]
    assert row["partitions"] == PARTITIONS and row["records"] == RECORDS + 1, row
    assert row["cleanup_policy"] == "delete" and row["retention_ms"] > 0, row


def test_a_topics_offsets_are_what_kafka_answers_with_owner_and_epoch(data):
    t = ok(data["base"], f"/ui/api/topics/{TOPIC}")
    marks = watermarks(data["bootstrap"], TOPIC, PARTITIONS)
    assert [(p["first_offset"], p["end_offset"]) for p in t["partitions"]] == [tuple(m) for m in marks]
    for p in t["partitions"]:
        assert p["lso"] == p["end_offset"] and p["owner"] == 1 and p["epoch"] >= 1, p
    retention = [c for c in t["configs"] if c["name"] == "retention.ms"]
    assert retention and retention[0]["default"] is True, t["configs"]
    status, body = get(data["base"], "/ui/api/topics/no-such-topic")
    assert status == 404 and body["kind"] == "not_found", body


def decode(b):
    return None if b is None else base64.b64decode(b)


def test_records_are_read_from_an_offset_or_a_time_as_produced(data):
    base = data["base"]
    page = ok(base, f"/ui/api/topics/{TOPIC}/records?partition=1&offset=0&limit=5")
    assert [r["offset"] for r in page["records"]] == [0, 1, 2, 3, 4]
    assert page["next_offset"] == 5 and page["end_offset"] == RECORDS // PARTITIONS
    first = page["records"][0]
    assert decode(first["key"]) == b"k1"
    assert json.loads(decode(first["value"])) == {"n": 1, "name": "item 1"}
    assert first["timestamp"] == data["t0"] + 1
    assert first["headers"] == [{"key": "source", "value": base64.b64encode(b"test").decode()},
                                {"key": "nothing", "value": None}]
    # From a time: the first record at or after it (record 7 is partition 1's offset 2).
    at = ok(base, f"/ui/api/topics/{TOPIC}/records?partition=1&timestamp={data['t0'] + 7}&limit=2")
    assert [r["offset"] for r in at["records"]] == [2, 3], at
    # The bytes as they are, when not text.
    last = ok(base, f"/ui/api/topics/{TOPIC}/records?partition=0&offset={RECORDS // PARTITIONS}")
    assert decode(last["records"][0]["key"]) == b"\xff\xfe"
    assert get(base, f"/ui/api/topics/{TOPIC}/records?partition=0&limit=201")[0] == 400
    assert get(base, f"/ui/api/topics/{TOPIC}/records?offset=1&timestamp=1")[0] == 400


def test_a_groups_offsets_and_lag_are_what_kafka_answers(data):
    base = data["base"]
    [row] = ok(base, f"/ui/api/groups?q={GROUP}")["groups"]
    assert row["type"] == "classic", row
    g = ok(base, f"/ui/api/groups/{GROUP}")
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": data["bootstrap"]})
    req = confluent_kafka.ConsumerGroupTopicPartitions(GROUP)
    committed = admin.list_consumer_group_offsets([req])[GROUP].result()
    want = {(tp.topic, tp.partition): tp.offset for tp in committed.topic_partitions}
    got = {(o["topic"], o["partition"]): o["committed"] for o in g["offsets"]}
    assert got == want, (got, want)
    marks = watermarks(data["bootstrap"], TOPIC, PARTITIONS)
    lag = sum(marks[p][1] - want[(TOPIC, p)] for p in range(PARTITIONS))
    assert g["total_lag"] == lag and lag > 0, g
    status, body = get(base, "/ui/api/groups/no-such-group")
    assert status == 404, body


def test_the_live_figures_count_this_proxys_requests(data):
    base = data["base"]
    before = ok(base, "/ui/api/metrics")
    p = confluent_kafka.Producer({"bootstrap.servers": data["bootstrap"], "acks": "all"})
    p.produce("console-live", value=b"x")
    assert p.flush(30) == 0
    # Produce latency needs a reading at least 1.5 s older than the one it
    # ends at, with the produce in between.
    deadline = time.time() + 30
    while True:
        after = ok(base, "/ui/api/metrics")
        if after["latency"] is not None or time.time() > deadline:
            break
        time.sleep(0.5)
    assert after["requests"] > before["requests"] and after["bytes_in"] > before["bytes_in"]
    assert after["bytes_out"] > before["bytes_out"]
    assert after["latency"] is not None and after["latency"]["p99_ms"] >= after["latency"]["p50_ms"] >= 0


def topic_configs(bootstrap, topic):
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    res = confluent_kafka.admin.ConfigResource(confluent_kafka.admin.ConfigResource.Type.TOPIC, topic)
    return {k: v.value for k, v in admin.describe_configs([res])[res].result().items()}


def partition_count(bootstrap, topic):
    """The topic's partitions, None when it does not exist (every topic is
    listed: naming it in Metadata would auto-create it)."""
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=30)
    t = md.topics.get(topic)
    return None if t is None or t.error is not None else len(t.partitions)


def test_topics_are_created_altered_grown_produced_to_and_deleted(data):
    base, bootstrap = data["base"], data["bootstrap"]
    status, body = post(base, "/ui/api/topics", {"name": "console-made", "partitions": 2,
                                                 "configs": {"retention.ms": "3600000"}})
    assert status == 200, body
    assert partition_count(bootstrap, "console-made") == 2
    assert topic_configs(bootstrap, "console-made")["retention.ms"] == "3600000"
    # Twice: Kafka's TOPIC_ALREADY_EXISTS, as a conflict.
    status, body = post(base, "/ui/api/topics", {"name": "console-made"})
    assert status == 409 and body["kind"] == "conflict", body
    # Not JSON (what a form of another site posts): refused, nothing made.
    status, body = post(base, "/ui/api/topics", b"name=console-forged", content_type="application/x-www-form-urlencoded")
    assert status == 400, body
    assert partition_count(bootstrap, "console-forged") is None
    # Settings: set, then back to the default.
    assert post(base, "/ui/api/topics/console-made/configs", {"set": {"retention.ms": "7200000"}})[0] == 200
    assert topic_configs(bootstrap, "console-made")["retention.ms"] == "7200000"
    assert post(base, "/ui/api/topics/console-made/configs", {"delete": ["retention.ms"]})[0] == 200
    assert topic_configs(bootstrap, "console-made")["retention.ms"] != "7200000"
    # Partitions only grow.
    assert post(base, "/ui/api/topics/console-made/partitions", {"count": 4})[0] == 200
    assert partition_count(bootstrap, "console-made") == 4
    status, body = post(base, "/ui/api/topics/console-made/partitions", {"count": 3})
    assert status == 400 and body["kind"] == "invalid", body
    # A record produced here is what a consumer reads there.
    status, body = post(base, "/ui/api/topics/console-made/produce",
                        {"partition": 3, "key": "k-1", "value": "hello", "headers": [{"key": "h", "value": "v"}]})
    assert status == 200 and body["partition"] == 3, body
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "console-made-reader",
                                  "enable.auto.commit": False})
    c.assign([confluent_kafka.TopicPartition("console-made", 3, body["offset"])])
    msg = None
    deadline = time.time() + 30
    while msg is None and time.time() < deadline:
        msg = c.poll(1)
    c.close()
    assert msg is not None and msg.error() is None, msg
    assert (msg.key(), msg.value(), msg.headers()) == (b"k-1", b"hello", [("h", b"v")])
    # Deleting needs the name typed again.
    status, body = post(base, "/ui/api/topics/console-made/delete", {"confirm": "console-mad"})
    assert status == 400 and "(console-made)" in body["error"], body
    assert partition_count(bootstrap, "console-made") == 4
    assert post(base, "/ui/api/topics/console-made/delete", {"confirm": "console-made"})[0] == 200
    deadline = time.time() + 30
    while partition_count(bootstrap, "console-made") is not None and time.time() < deadline:
        time.sleep(0.2)
    assert partition_count(bootstrap, "console-made") is None


def committed_of(bootstrap, group):
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    req = confluent_kafka.ConsumerGroupTopicPartitions(group)
    got = admin.list_consumer_group_offsets([req])[group].result()
    return {(tp.topic, tp.partition): tp.offset for tp in got.topic_partitions}


def test_offsets_are_reset_after_a_dry_run_only_while_the_group_is_inactive(data):
    base, bootstrap = data["base"], data["bootstrap"]
    group = "console-reset"
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[confluent_kafka.TopicPartition(TOPIC, p, 5) for p in range(PARTITIONS)], asynchronous=False)
    c.close()
    before = committed_of(bootstrap, group)
    status, plan = post(base, f"/ui/api/groups/{group}/reset-offsets", {"topic": TOPIC, "to": "shift", "value": -2})
    assert status == 200 and not plan["executed"] and plan["warning"] is None, plan
    assert [(o["partition"], o["current"], o["target"]) for o in plan["offsets"]] == [(p, 5, 3) for p in range(PARTITIONS)]
    assert committed_of(bootstrap, group) == before  # a dry run commits nothing
    status, done = post(base, f"/ui/api/groups/{group}/reset-offsets",
                        {"topic": TOPIC, "partitions": [1], "to": "earliest", "execute": True})
    assert status == 200 and done["executed"], done
    assert committed_of(bootstrap, group) == {**before, (TOPIC, 1): 0}
    status, body = post(base, f"/ui/api/groups/{group}/reset-offsets", {"to": "sideways"})
    assert status == 400, body
    # With a live member: the plan shows a warning, the reset is refused.
    live = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                     "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
    live.subscribe([TOPIC])
    try:
        deadline = time.time() + 30
        while not live.assignment() and time.time() < deadline:
            live.poll(0.5)
        status, plan = post(base, f"/ui/api/groups/{group}/reset-offsets", {"to": "latest"})
        assert status == 200 and plan["warning"] and "live member" in plan["warning"], plan
        status, body = post(base, f"/ui/api/groups/{group}/reset-offsets", {"to": "latest", "execute": True})
        assert status == 409 and body["kind"] == "conflict", body
    finally:
        live.close()


def share_starts(floe_bin, bootstrap, group):
    """A share group's start offsets as `floe group describe --json` answers them
    (DescribeShareGroupOffsets)."""
    from test_cli_kafka import floe as run_floe, ok as cli_ok

    d = json.loads(cli_ok(run_floe(floe_bin, bootstrap, "group", "describe", group, "--json")).stdout)
    return {(p["topic"], p["partition"]): p["start_offset"] for p in d["partitions"]}


def share_accept(consumer, count, timeout=30):
    """Accepts `count` records of a ShareConsumer: their (partition, offset, delivery count)."""
    from test_share_admin import acknowledge

    return sorted(acknowledge(consumer, count, timeout=timeout))


def test_a_share_groups_start_offsets_are_reset_after_a_dry_run_only_without_members(data, floe_bin, kit):
    from confluent_kafka import Producer, ShareConsumer

    from test_share_dlq import set_group_configs

    base, bootstrap = data["base"], data["bootstrap"]
    topic, group = "console-share-reset", "console-share-resetters"
    kit.create_topic(bootstrap, topic, partitions=2)
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(10):
        p.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0

    def share_consumer():
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([topic])
        return c

    sc = share_consumer()
    try:
        assert share_accept(sc, 10) == [(q, o, 1) for q in (0, 1) for o in range(5)]
        # A member is live: the plan warns, the reset is refused (409).
        status, plan = post(base, f"/ui/api/groups/{group}/reset-offsets", {"to": "earliest"})
        assert status == 200 and "1 member(s)" in plan["warning"], plan
        status, body = post(base, f"/ui/api/groups/{group}/reset-offsets", {"to": "earliest", "execute": True})
        assert status == 409 and body["kind"] == "conflict", body
    finally:
        sc.close()
    before = share_starts(floe_bin, bootstrap, group)
    assert before == {(topic, 0): 5, (topic, 1): 5}, before

    # The dry run: the plan from the start offsets, nothing moved.
    status, plan = post(base, f"/ui/api/groups/{group}/reset-offsets", {"to": "earliest"})
    assert status == 200 and not plan["executed"] and plan["warning"] is None, plan
    assert [(o["topic"], o["partition"], o["current"], o["target"]) for o in plan["offsets"]] == \
        [(topic, 0, 5, 0), (topic, 1, 5, 0)], plan
    status, plan = post(base, f"/ui/api/groups/{group}/reset-offsets", {"topic": topic, "to": "shift", "value": -2})
    assert [(o["partition"], o["target"]) for o in plan["offsets"]] == [(0, 3), (1, 3)], plan
    assert share_starts(floe_bin, bootstrap, group) == before
    # The group's page reads the same start offsets.
    assert {(o["topic"], o["partition"]): o["committed"] for o in ok(base, f"/ui/api/groups/{group}")["offsets"]} \
        == before

    # Executed on partition 1: its start moves back to 0, partition 0 stays.
    status, done = post(base, f"/ui/api/groups/{group}/reset-offsets",
                        {"topic": topic, "partitions": [1], "to": "earliest", "execute": True})
    assert status == 200 and done["executed"], done
    assert [(o["partition"], o["current"], o["target"]) for o in done["offsets"]] == [(1, 5, 0)], done
    assert share_starts(floe_bin, bootstrap, group) == {(topic, 0): 5, (topic, 1): 0}
    # A new member receives partition 1's records again, as new deliveries.
    sc = share_consumer()
    try:
        assert share_accept(sc, 5) == [(1, o, 1) for o in range(5)]
    finally:
        sc.close()


def test_a_group_is_deleted_once_its_id_is_typed_again(data):
    base, bootstrap = data["base"], data["bootstrap"]
    group = "console-doomed"
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[confluent_kafka.TopicPartition(TOPIC, 0, 1)], asynchronous=False)
    c.close()
    status, body = post(base, f"/ui/api/groups/{group}/delete", {"confirm": "console"})
    assert status == 400, body
    assert committed_of(bootstrap, group)
    assert post(base, f"/ui/api/groups/{group}/delete", {"confirm": group})[0] == 200
    assert get(base, f"/ui/api/groups/{group}")[0] == 404


TOKENS = {"admin": "admin-" + secrets.token_hex(8), "alice": "alice-" + secrets.token_hex(8)}


@pytest.fixture(scope="module")
def secured(floe_bin, tmp_path_factory):
    """ACLs on, tokens for User:admin (a super user) and User:alice."""
    d = tmp_path_factory.mktemp("console-acls")
    tokens = d / "tokens"
    tokens.write_text("".join(f"User:{u} {t}\n" for u, t in TOKENS.items()))
    s = AclStandalone(floe_bin, d, admin_token_file=str(tokens))
    s.start()
    create_topics(s, "seen", "hidden")
    create_acls(s, [binding("TOPIC", "seen", "User:alice", "DESCRIBE")])
    yield s
    s.stop()


def test_with_tokens_a_principal_sees_only_what_it_may_describe(secured):
    base = secured.admin_url
    assert get(base, "/ui/api/overview")[0] == 401
    assert get(base, "/ui/api/overview", token="wrong-token-00")[0] == 401
    assert get(base, "/ui/assets/app.js")[0] == 200
    assert ok(base, "/ui/api/whoami", TOKENS["alice"])["principal"] == "User:alice"
    names = [t["name"] for t in ok(base, "/ui/api/topics", TOKENS["alice"])["topics"]]
    assert names == ["seen"], names
    status, body = get(base, "/ui/api/topics/hidden", TOKENS["alice"])
    assert status == 403 and body["kind"] == "denied", body
    # DESCRIBE is not READ: its records are refused.
    status, body = get(base, "/ui/api/topics/seen/records?partition=0", TOKENS["alice"])
    assert status == 403, body
    # The cluster's insides need DESCRIBE on the cluster.
    o = ok(base, "/ui/api/overview", TOKENS["alice"])
    assert o["metadata"] is None and o["brokers"] == [] and "not allowed" in o["metadata_error"], o
    admin_view = ok(base, "/ui/api/overview", TOKENS["admin"])
    assert admin_view["metadata"] and admin_view["brokers"], admin_view
    names = {t["name"] for t in ok(base, "/ui/api/topics", TOKENS["admin"])["topics"]}
    assert {"seen", "hidden"} <= names
    # Actions are judged by the same ACLs: DESCRIBE lets alice create, alter or delete nothing.
    status, body = post(base, "/ui/api/topics", {"name": "alices"}, TOKENS["alice"])
    assert status == 403 and body["kind"] == "denied", body
    status, body = post(base, "/ui/api/topics/seen/delete", {"confirm": "seen"}, TOKENS["alice"])
    assert status == 403, body
    status, body = post(base, "/ui/api/topics/seen/produce", {"value": "x"}, TOKENS["alice"])
    assert status == 403, body
    assert post(base, "/ui/api/topics", {"name": "admins", "partitions": 1}, TOKENS["admin"])[0] == 200


def test_where_kafka_clients_authenticate_an_open_admin_port_serves_no_one(floe_bin, tmp_path):
    s = AclStandalone(floe_bin, tmp_path)
    s.start()
    try:
        status, body = get(s.admin_url, "/ui/api/whoami")
        assert status == 401 and "--admin-token-file" in body["error"], body
        assert get(s.admin_url, "/ui")[0] == 200
    finally:
        s.stop()


def test_a_share_groups_internals_and_redrive_answer_only_what_their_acls_allow(secured):
    """A redrive needs READ on the dead-letter topic, READ on its mark group
    and WRITE where the records go back: each missing one refuses it before
    anything is produced, and the mark does not move."""
    from confluent_kafka import Consumer, Producer, ShareConsumer, TopicPartition
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    s, alice = secured, TOKENS["alice"]
    base = s.admin_url
    group, source, dlq = "acl-queue", "acl-source", "acl-source.dlq"
    create_topics(s, source, partitions=2)
    create_topics(s, dlq, partitions=1)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("floe.dlq.topic", dlq, incremental_operation=AlterConfigOpType.SET)])
    admin = admin_client(s)
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
    # The group exists once a share consumer joined it.
    c = ShareConsumer({**s.conf("admin"), "group.id": group})
    c.subscribe([source])
    deadline = time.monotonic() + 30
    while not ok(base, "/ui/api/groups", TOKENS["admin"])["total"] or not any(
            g["id"] == group for g in ok(base, "/ui/api/groups", TOKENS["admin"])["groups"]):
        assert time.monotonic() < deadline, f"{group} never listed"
        c.poll(0.2)
    c.close()
    # Two dead letters of the group and one of another, as the broker writes them.
    p = Producer({**s.conf("admin"), "acks": "all"})
    for i, g in enumerate([group, "another-group", group]):
        p.produce(dlq, value=f"dead {i}".encode(), partition=0, headers=[
            ("floe-dlq-topic", source.encode()), ("floe-dlq-partition", b"1"), ("floe-dlq-offset", str(40 + i).encode()),
            ("floe-dlq-delivery-count", b"5"), ("floe-dlq-reason", b"rejected"), ("floe-dlq-group", g.encode()),
            ("app", b"kept")])
    assert p.flush(30) == 0

    def source_end():
        c = Consumer({**s.conf("admin"), "group.id": "acl-watermarks"})
        try:
            return c.get_watermark_offsets(TopicPartition(source, 1), timeout=30, cached=False)[1]
        finally:
            c.close()

    redrive = {"execute": True, "confirm": group}
    # No DESCRIBE on the group: alice does not even see it.
    assert get(base, f"/ui/api/groups/{group}/share", alice)[0] in (403, 404)
    create_acls(s, [binding("GROUP", group, "User:alice", "DESCRIBE"),
                    binding("TOPIC", source, "User:alice", "DESCRIBE"),
                    binding("TOPIC", dlq, "User:alice", "DESCRIBE")])
    internals = ok(base, f"/ui/api/groups/{group}/share", alice)
    # Which dead-letter topic the group names is a config: DESCRIBE_CONFIGS.
    assert internals["dead_letters"] is None and internals["configs_error"], internals
    assert get(base, f"/ui/api/groups/{group}/dead-letters", alice)[0] == 403
    create_acls(s, [binding("GROUP", group, "User:alice", "DESCRIBE_CONFIGS")])
    internals = ok(base, f"/ui/api/groups/{group}/share", alice)
    assert internals["dead_letters"]["topic"] == dlq, internals
    assert internals["dead_letters"]["not_redriven"] == 3, internals
    # DESCRIBE is not READ: the dead letters' records are refused.
    assert get(base, f"/ui/api/groups/{group}/dead-letters", alice)[0] == 403
    create_acls(s, [binding("TOPIC", dlq, "User:alice", "READ")])
    letters = ok(base, f"/ui/api/groups/{group}/dead-letters", alice)
    assert [(r["offset"], r["of_this_group"], r["origin"]["offset"]) for r in letters["records"]] == \
        [(0, True, 40), (1, False, 41), (2, True, 42)], letters
    # Where the redrive got to is the mark group's offsets: reading them needs DESCRIBE.
    status, body = post(base, f"/ui/api/groups/{group}/redrive", {}, alice)
    assert status == 403 and "floe-redrive." + group in body["error"], body
    create_acls(s, [binding("GROUP", "floe-redrive." + group, "User:alice", "DESCRIBE")])
    dry = post(base, f"/ui/api/groups/{group}/redrive", {}, alice)
    assert dry[0] == 200 and (dry[1]["redriven"], dry[1]["skipped"]) == (2, 1), dry
    # Not confirmed: refused whoever asks.
    status, body = post(base, f"/ui/api/groups/{group}/redrive", {"execute": True, "confirm": "x"}, TOKENS["admin"])
    assert status == 400 and "type the group's name" in body["error"], body
    end = source_end()
    # Moving the mark needs READ on it: refused before anything is produced.
    status, body = post(base, f"/ui/api/groups/{group}/redrive", redrive, alice)
    assert status == 403 and "floe-redrive." + group in body["error"], body
    assert source_end() == end
    create_acls(s, [binding("GROUP", "floe-redrive." + group, "User:alice", "READ")])
    # No WRITE on the source topic: refused, nothing produced, the mark where it was.
    status, body = post(base, f"/ui/api/groups/{group}/redrive", redrive, alice)
    assert status == 403 and "not redriven" in body["error"], body
    assert source_end() == end
    assert ok(base, f"/ui/api/groups/{group}/share", alice)["dead_letters"]["not_redriven"] == 3
    create_acls(s, [binding("TOPIC", source, "User:alice", "WRITE")])
    status, body = post(base, f"/ui/api/groups/{group}/redrive", redrive, alice)
    assert status == 200 and (body["redriven"], body["skipped"], body["remaining"]) == (2, 1, 0), body
    assert body["partitions"][0]["targets"] == [{"topic": source, "partition": 1, "records": 2}], body
    assert source_end() == end + 2
    c = Consumer({**s.conf("admin"), "group.id": "acl-reader", "enable.auto.commit": False})
    c.assign([TopicPartition(source, 1, end)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 2:
        assert time.monotonic() < deadline, got
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append((m.value(), dict(m.headers())))
    c.close()
    assert got == [(b"dead 0", {"app": b"kept", "floe-redriven-from": f"{dlq}/0/0".encode()}),
                   (b"dead 2", {"app": b"kept", "floe-redriven-from": f"{dlq}/0/2".encode()})], got
    # The mark is past all three: nothing left, nothing redriven twice.
    assert ok(base, f"/ui/api/groups/{group}/share", alice)["dead_letters"]["not_redriven"] == 0
    again = post(base, f"/ui/api/groups/{group}/redrive", redrive, alice)
    assert again[0] == 200 and again[1]["redriven"] == 0, again


def test_a_share_groups_reset_needs_read_on_the_group_and_its_topics(secured):
    """AlterShareGroupOffsets needs READ on the group and on each topic, as on the
    Kafka port; DESCRIBE shows the plan only."""
    from confluent_kafka import ShareConsumer

    s, alice = secured, TOKENS["alice"]
    base = s.admin_url
    group, topic = "acl-reset", "acl-reset-source"
    create_topics(s, topic, partitions=1)
    c = ShareConsumer({**s.conf("admin"), "group.id": group})
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    while not any(g["id"] == group for g in ok(base, "/ui/api/groups", TOKENS["admin"])["groups"]):
        assert time.monotonic() < deadline, f"{group} never listed"
        c.poll(0.2)
    c.close()
    body = {"topic": topic, "to": "earliest"}
    create_acls(s, [binding("GROUP", group, "User:alice", "DESCRIBE"),
                    binding("TOPIC", topic, "User:alice", "DESCRIBE")])
    status, plan = post(base, f"/ui/api/groups/{group}/reset-offsets", body, alice)
    assert status == 200 and [(o["partition"], o["target"]) for o in plan["offsets"]] == [(0, 0)], plan
    status, refused = post(base, f"/ui/api/groups/{group}/reset-offsets", {**body, "execute": True}, alice)
    assert status == 403 and refused["kind"] == "denied", refused
    create_acls(s, [binding("GROUP", group, "User:alice", "READ")])
    status, refused = post(base, f"/ui/api/groups/{group}/reset-offsets", {**body, "execute": True}, alice)
    assert status == 403 and refused["kind"] == "denied", refused
    create_acls(s, [binding("TOPIC", topic, "User:alice", "READ")])
    status, done = post(base, f"/ui/api/groups/{group}/reset-offsets", {**body, "execute": True}, alice)
    assert status == 200 and done["executed"], done
    offsets = ok(base, f"/ui/api/groups/{group}", TOKENS["admin"])["offsets"]
    assert [(o["topic"], o["partition"], o["committed"]) for o in offsets] == [(topic, 0, 0)], offsets


def test_a_group_that_is_not_a_share_group_has_no_share_state(data):
    base = data["base"]
    status, body = get(base, f"/ui/api/groups/{GROUP}/share")
    assert status == 400 and "only a share group" in body["error"], body
    assert get(base, "/ui/api/groups/no-such-group/share")[0] == 404
    status, body = post(base, f"/ui/api/groups/{GROUP}/redrive", {"execute": True, "confirm": GROUP})
    assert status == 400, body


# ---------------------------------------------------------------- search, objects, store endpoints

SEARCHED = "console-searched"


def consumed(bootstrap, topic, partitions):
    """Every record of `topic` as a consumer reads it: [(partition, offset, timestamp, key, value, headers)]."""
    marks = watermarks(bootstrap, topic, partitions)
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "console-search-reader",
                                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.assign([confluent_kafka.TopicPartition(topic, p, low) for p, (low, _high) in enumerate(marks)])
    want = sum(high - low for low, high in marks)
    out = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < want:
            assert time.monotonic() < deadline, f"read {len(out)} of {want} records"
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append((m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value(),
                        [(k, v) for k, v in (m.headers() or [])]))
    finally:
        c.close()
    return out


def wait_exported(base, topic, rows_wanted):
    """Polls the console until the topic's export holds `rows_wanted` rows with no lag."""
    deadline = time.monotonic() + 60
    while True:
        status, body = get(base, f"/ui/api/topics/{topic}/export")
        if status == 200 and body["enabled"] and body["partitions"] \
                and sum(p["lag"] for p in body["partitions"]) == 0 \
                and sum(p["rows"] for p in body["partitions"]) == rows_wanted:
            return body
        assert time.monotonic() < deadline, f"{topic} not exported after 60 s: {status} {body}"
        time.sleep(0.2)


def as_found(r):
    """A search's record as the consumer's tuple."""
    return (r["partition"], r["offset"], r["timestamp"], decode(r["key"]), decode(r["value"]),
            [(h["key"], decode(h["value"])) for h in r["headers"]])


def test_a_search_by_key_finds_what_a_consumer_reads_for_that_key(data):
    base, bootstrap = data["base"], data["bootstrap"]
    assert ok(base, "/ui/api/whoami")["search"] is True
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    topic = confluent_kafka.admin.NewTopic(SEARCHED, 2, config={"export.enabled": "true", "export.roll.ms": "300"})
    for f in admin.create_topics([topic], request_timeout=30).values():
        f.result()
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    t0 = int(time.time() * 1000)
    for i in range(40):
        p.produce(SEARCHED, key=f"user-{i % 4}", value=f"event {i}".encode(), partition=i % 2,
                  headers=[("n", str(i).encode())], timestamp=t0 + i)
    assert p.flush(30) == 0
    wait_exported(base, SEARCHED, 40)
    # Some records after the export: the search reads the log not exported yet too.
    for i in range(40, 46):
        p.produce(SEARCHED, key=f"user-{i % 4}", value=f"event {i}".encode(), partition=i % 2,
                  headers=[("n", str(i).encode())], timestamp=t0 + i)
    assert p.flush(30) == 0
    everything = consumed(bootstrap, SEARCHED, 2)
    for key in ("user-1", "user-2"):
        want = sorted((r for r in everything if r[3] == key.encode()), key=lambda r: (r[2], r[0], r[1]))
        answer = ok(base, f"/ui/api/topics/{SEARCHED}/search?key={key}")
        got = [as_found(r) for r in answer["records"]]
        assert got == want, (key, got, want)
        assert any(r[1] >= 20 for r in got), "the records produced after the export are found"
    # A time range narrows it; a limit bounds it.
    answer = ok(base, f"/ui/api/topics/{SEARCHED}/search?key=user-1&from={t0 + 10}&to={t0 + 20}")
    assert [as_found(r)[4] for r in answer["records"]] == [b"event 13", b"event 17"], answer
    assert len(ok(base, f"/ui/api/topics/{SEARCHED}/search?key=user-1&limit=2")["records"]) == 2
    assert ok(base, f"/ui/api/topics/{SEARCHED}/search?key=nobody")["records"] == []
    status, body = get(base, f"/ui/api/topics/{SEARCHED}/search")
    assert status == 400 and body["kind"] == "invalid", body
    status, body = get(base, f"/ui/api/topics/{SEARCHED}/search?key=a&limit=501")
    assert status == 400 and body["kind"] == "invalid", body
    status, body = get(base, "/ui/api/topics/no-such-topic/search?key=a")
    assert status == 404 and body["kind"] == "not_found", body


def covered(objects):
    """The offsets [first, end) the objects hold without a gap, from the first."""
    spans = sorted((o["first_offset"], o["last_offset"] + 1) for o in objects)
    if not spans:
        return None
    start, end = spans[0]
    for first, last in spans[1:]:
        assert first <= end, f"a gap between {end} and {first}: {spans}"
        end = max(end, last)
    return start, end


def test_a_partitions_objects_cover_its_offsets_as_list_offsets_answers(data):
    base = data["base"]
    marks = watermarks(data["bootstrap"], TOPIC, PARTITIONS)
    for p, (low, high) in enumerate(marks):
        answer = ok(base, f"/ui/api/topics/{TOPIC}/objects?partition={p}")
        assert answer["partition"] == p and answer["high_watermark"] == high, answer
        assert answer["total"] == len(answer["objects"]) > 0, answer
        assert answer["total"] == answer["wal_objects"] + answer["segments"], answer
        start, end = covered(answer["objects"])
        assert start <= low and end >= high, (p, low, high, answer["objects"])
        for o in answer["objects"]:
            assert o["kind"] in ("wal", "segment"), o
            assert o["endpoint"] and o["key"] and 0 < o["bytes"] <= o["object_bytes"], o
    # Paged: the last object alone, or the first.
    last = ok(base, f"/ui/api/topics/{TOPIC}/objects?partition=0&limit=1")
    assert len(last["objects"]) == 1 and last["offset"] == last["total"] - 1, last
    first = ok(base, f"/ui/api/topics/{TOPIC}/objects?partition=0&offset=0&limit=1")
    assert first["offset"] == 0 and first["objects"][0]["first_offset"] <= marks[0][0], first
    status, body = get(base, f"/ui/api/topics/{TOPIC}/objects?partition={PARTITIONS}")
    assert status == 404, body
    status, body = get(base, f"/ui/api/topics/{TOPIC}/objects?partition=0&limit=0")
    assert status == 400, body


def test_the_store_endpoints_count_this_processs_writes(data):
    answer = ok(data["base"], "/ui/api/stores")
    assert answer["scope"] == "this process" and answer["broker_here"] is True, answer
    endpoints = answer["endpoints"]
    assert endpoints and all(e["endpoint"] for e in endpoints), answer
    assert sum(e["writes"] for e in endpoints) > 0, answer
    assert not any(e["benched"] for e in endpoints), answer
    assert all(e["errors"] == 0 for e in endpoints), answer
    # The standalone's broker answers for its pool: the same endpoints, writes counted.
    [b] = answer["brokers"]
    assert b["error"] is None and [e["endpoint"] for e in b["endpoints"]] == [e["endpoint"] for e in endpoints], b
    assert sum(e["written"] for e in b["endpoints"]) > 0, b


def test_search_objects_and_stores_need_their_acls(secured):
    base, alice, admin = secured.admin_url, TOKENS["alice"], TOKENS["admin"]
    # DESCRIBE on seen is not READ: no search; the objects need DESCRIBE only.
    status, body = get(base, "/ui/api/topics/seen/search?key=a", alice)
    assert status == 403 and body["kind"] == "denied" and "READ" in body["error"], body
    assert get(base, "/ui/api/topics/seen/search?key=a", admin)[0] == 200
    assert ok(base, "/ui/api/topics/seen/objects?partition=0", alice)["partition"] == 0
    status, body = get(base, "/ui/api/topics/hidden/objects?partition=0", alice)
    assert status == 403 and body["kind"] == "denied", body
    status, body = get(base, "/ui/api/topics/hidden/search?key=a", alice)
    assert status == 403, body
    # A backfill needs READ too (as the indexer's API does), and an exported topic.
    status, body = post(base, "/ui/api/topics/seen/export/backfill", {"confirm": "seen"}, alice)
    assert status == 403 and "READ" in body["error"], body
    status, body = post(base, "/ui/api/topics/seen/export/backfill", {"confirm": "seen"}, admin)
    assert status == 400 and "export.enabled=true" in body["error"], body
    # The store endpoints, like the brokers, need DESCRIBE on the cluster.
    status, body = get(base, "/ui/api/stores", alice)
    assert status == 403 and body["kind"] == "denied", body
    assert ok(base, "/ui/api/stores", admin)["endpoints"]
    assert get(base, "/ui/api/stores")[0] == 401


def test_a_proxy_of_a_cluster_says_where_to_search_and_writes_to_no_store(floe_bin, tmp_path):
    """A proxy runs no indexer and no broker: whoami says search is not here,
    a search answers 503 naming `floe query`, the store endpoints say no broker
    writes from this process; the objects come from the metadata service all the same."""
    from floe_cluster import Cluster

    cluster = Cluster(floe_bin, tmp_path, brokers=1, proxy_flags=("--default-partitions", "1"))
    try:
        base = f"http://{cluster.proxy.admin}"
        bootstrap = cluster.proxy.addr("kafka")
        assert ok(base, "/ui/api/whoami")["search"] is False
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([confluent_kafka.admin.NewTopic("in-cluster", 1)], request_timeout=30).values():
            f.result()
        p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(5):
            p.produce("in-cluster", key=b"k", value=str(i).encode())
        assert p.flush(30) == 0
        status, body = get(base, "/ui/api/topics/in-cluster/search?key=k")
        assert status == 503 and body["kind"] == "unavailable" and "floe query --indexer" in body["error"], body
        stores = ok(base, "/ui/api/stores")
        assert stores["broker_here"] is False and all(e["writes"] == 0 for e in stores["endpoints"]), stores
        # Each broker answers for its own pool: the one broker wrote the records to its endpoint.
        [b] = stores["brokers"]
        assert b["broker"] == 1 and b["error"] is None, b
        [e] = b["endpoints"]
        assert e["endpoint"] == "local" and e["written"] > 0 and e["benched"] is False, e
        assert e["write_deadline_ms"] and e["write_deadline_ms"] > 0, e
        (low, high), = watermarks(bootstrap, "in-cluster", 1)
        start, end = covered(ok(base, "/ui/api/topics/in-cluster/objects?partition=0")["objects"])
        assert start <= low and end >= high == 5
    finally:
        cluster.stop()


def test_objects_show_segments_once_wal_ranges_are_compacted(standalone_factory):
    """With quick compaction (segment.ms=100) a partition's WAL ranges become
    segments: the route lists segments, then the WAL objects written after,
    and together they still hold every offset ListOffsets answers."""
    s = standalone_factory(compaction_interval_ms=200, flush_interval_ms=5)
    base = s.admin_url
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": s.bootstrap})
    topic = confluent_kafka.admin.NewTopic("compacted-objects", 1, config={"segment.ms": "100"})
    for f in admin.create_topics([topic], request_timeout=30).values():
        f.result()
    p = confluent_kafka.Producer({"bootstrap.servers": s.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(20):
        p.produce("compacted-objects", key=b"k", value=b"x" * 100)
        assert p.flush(30) == 0
    path = "/ui/api/topics/compacted-objects/objects?partition=0"
    deadline = time.monotonic() + 60
    while (answer := ok(base, path))["segments"] == 0:
        assert time.monotonic() < deadline, f"no segment after 60 s: {answer}"
        time.sleep(0.2)
    for i in range(5):
        p.produce("compacted-objects", key=b"k", value=b"y" * 100)
        assert p.flush(30) == 0
    answer = ok(base, path)
    (low, high), = watermarks(s.bootstrap, "compacted-objects", 1)
    assert high == 25 and answer["high_watermark"] == 25, answer
    start, end = covered(answer["objects"])
    assert start <= low and end >= high, (low, high, answer["objects"])
    kinds = [o["kind"] for o in answer["objects"]]
    assert "segment" in kinds, kinds
    assert all(o["key"].startswith("segments/") for o in answer["objects"] if o["kind"] == "segment")


def test_a_proxy_with_console_indexer_searches_through_the_clusters_indexer(floe_bin, tmp_path):
    """`--console-indexer` gives a cluster's proxy the search: the console
    checks the person's READ, then asks the indexer's query API as a cluster
    member; the records are the ones a consumer reads for the key."""
    from floe_cluster import Cluster, Role

    cluster = Cluster(floe_bin, tmp_path, brokers=1, indexer=True, proxy_flags=("--default-partitions", "2"))
    try:
        flags = ("--default-partitions", "2", "--console-indexer", f"http://{cluster.indexer.admin}")
        proxy = Role("proxy-search", cluster._proxy_args("proxy-search", flags), cluster.tmp).start()
        cluster.proxies.append(proxy)
        cluster.wait_ready(proxy)
        base = f"http://{proxy.admin}"
        assert ok(base, "/ui/api/whoami")["search"] is True
        bootstrap = proxy.addr("kafka")
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
        topic = confluent_kafka.admin.NewTopic("searched", 2, config={"export.enabled": "true"})
        for f in admin.create_topics([topic], request_timeout=30).values():
            f.result()
        p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(12):
            p.produce("searched", key=f"k{i % 3}".encode(), value=f"v{i}".encode())
        assert p.flush(30) == 0
        found = ok(base, "/ui/api/topics/searched/search?key=k1")
        values = sorted(base64.b64decode(r["value"]).decode() for r in found["records"])
        assert values == sorted(f"v{i}" for i in range(12) if i % 3 == 1), found
        assert all(base64.b64decode(r["key"]) == b"k1" for r in found["records"]), found
        status, body = get(base, "/ui/api/topics/no-such-topic/search?key=k1")
        assert status in (403, 404), (status, body)
    finally:
        cluster.stop()


def test_records_of_every_partition_come_merged_by_time_and_page_by_cursor(data):
    """The records of the topic's 3 partitions, produced at t0+i to partition
    i % 3, come back in the order they were produced, a page at a time, the
    cursor carrying each partition's position; from a time, from there on."""
    base, t0 = data["base"], data["t0"]
    seen, cursor = [], None
    for _ in range(10):
        q = f"/ui/api/topics/{TOPIC}/records/all?limit=7" + (f"&cursor={cursor}" if cursor else "")
        page = ok(base, q)
        seen += [(r["partition"], r["offset"], r["timestamp"]) for r in page["records"]]
        if not page["more"]:
            break
        cursor = page["cursor"]
    expected = [(i % PARTITIONS, i // PARTITIONS, t0 + i) for i in range(RECORDS)]
    expected.append((0, RECORDS // PARTITIONS, t0 + RECORDS))  # the binary record, last
    assert seen == expected, seen
    assert page["more"] is False and page["partitions"] == list(range(PARTITIONS)), page
    later = ok(base, f"/ui/api/topics/{TOPIC}/records/all?limit=3&timestamp={t0 + 15}")
    assert [(r["partition"], r["offset"]) for r in later["records"]] == \
        [(i % PARTITIONS, i // PARTITIONS) for i in (15, 16, 17)], later
    status, body = get(base, f"/ui/api/topics/{TOPIC}/records/all?cursor=0:x")
    assert status == 400, body
    status, body = get(base, f"/ui/api/topics/{TOPIC}/records/all?cursor=0:1&timestamp=5")
    assert status == 400, body


def test_the_iceberg_catalog_answers_by_the_query_apis_acls(secured):
    """The catalog under /iceberg is the query API's: no token 401, a table
    listed with DESCRIBE, loaded with READ (docs/tables.md#the-catalog)."""
    from confluent_kafka.admin import NewTopic
    from test_acls import admin

    s, alice = secured, TOKENS["alice"]
    a = admin(s)
    for f in a.create_topics([NewTopic("tbl", 1, config={"table.format": "iceberg"})],
                             request_timeout=30).values():
        f.result()
    # The query API judges by ACLs alone (a Kafka super user is not one there).
    create_acls(s, [binding("TOPIC", "tbl", "User:admin", "READ")])
    tables = "/iceberg/v1/namespaces/floe/tables"
    deadline = time.monotonic() + 60
    while not any(i["name"] == "tbl" for i in ok(s.admin_url, tables, TOKENS["admin"])["identifiers"]):
        assert time.monotonic() < deadline, "the table's first metadata file never came"
        time.sleep(0.3)
    assert get(s.admin_url, tables)[0] == 401
    assert ok(s.admin_url, tables, alice)["identifiers"] == []
    assert get(s.admin_url, f"{tables}/tbl", alice)[0] == 403
    create_acls(s, [binding("TOPIC", "tbl", "User:alice", "DESCRIBE")])
    wait_for = time.monotonic() + 10
    while ok(s.admin_url, tables, alice)["identifiers"] == []:  # ACLs are read again within 2 s
        assert time.monotonic() < wait_for
        time.sleep(0.3)
    assert get(s.admin_url, f"{tables}/tbl", alice)[0] == 403, "DESCRIBE lists, READ loads"
    create_acls(s, [binding("TOPIC", "tbl", "User:alice", "READ")])
    wait_for = time.monotonic() + 10
    while get(s.admin_url, f"{tables}/tbl", alice)[0] != 200:
        assert time.monotonic() < wait_for
        time.sleep(0.3)
    body = ok(s.admin_url, f"{tables}/tbl", alice)
    assert body["metadata"]["properties"]["floe.topic"] == "tbl", body
