"""Client quotas (issue 16) with real clients against one `floe standalone`:
AlterClientQuotas and DescribeClientQuotas from kafka-python (its protocol
messages: kafka-python 3.0 has no admin method for them), then a confluent-kafka
producer under a produce quota and a consumer under a fetch quota, whose rates
measured over several seconds stay near the quota and who are told they are
throttled (librdkafka's throttle callback).

The bounds are generous, never timing alone: bytes through in a measured span
<= quota x span x 1.5 + the burst a new client may send (one whole quota window)
+ one request."""

import re
import time
import urllib.request

import pytest

pytestmark = [pytest.mark.timeout(240)]

# Small quota windows keep the first burst and the test short: 4 samples of 0.5 s.
WINDOW_NUM = 4
WINDOW_SIZE_S = 0.5
WINDOW_S = WINDOW_NUM * WINDOW_SIZE_S
RATE = 100 * 1024
SPAN_S = 6.0
REQUEST_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def server(floe_bin, tmp_path_factory):
    from conftest import Standalone

    s = Standalone(floe_bin, tmp_path_factory.mktemp("quotas"),
                   quota_window_num=WINDOW_NUM, quota_window_size_ms=int(WINDOW_SIZE_S * 1000))
    s.start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _log_tail_on_failure(request, server):
    request.node._floe_standalones = [server]


def kafka_admin(server):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)


def call(admin, request, node_id=None):
    async def send():
        return await admin._manager.send(request, node_id=node_id)

    return admin._manager.run(send)


def alter(admin, entries, validate_only=False):
    """entries: [(entity {type: name or None}, {key: value or None to remove})];
    returns [(error code, message)] in order."""
    from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest as Req

    req = Req(entries=[
        Req.EntryData(
            entity=[Req.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
            ops=[Req.EntryData.OpData(key=k, value=float(v or 0), remove=v is None)
                 for k, v in ops.items()])
        for entity, ops in entries
    ], validate_only=validate_only)
    resp = call(admin, req)
    return [(e.error_code, e.error_message) for e in resp.entries]


def describe(admin, components, strict=False, node_id=None):
    """components: [(entity type, match type, name)]; returns {entity tuple: {key: value}}."""
    from kafka.protocol.admin.client_quotas import DescribeClientQuotasRequest as Req

    req = Req(components=[Req.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components],
              strict=strict)
    resp = call(admin, req, node_id)
    assert resp.error_code == 0, (resp.error_code, resp.error_message)
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values} for entry in resp.entries}


def metric(server, name, label):
    with urllib.request.urlopen(server.admin_url + "/metrics", timeout=10) as res:
        text = res.read().decode()
    m = re.search(rf'^{name}{{[^}}]*{label}[^}}]*}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


INVALID_REQUEST = 42


def test_quotas_are_altered_validated_and_described(server):
    admin = kafka_admin(server)
    try:
        got = alter(admin, [
            ({"client-id": "app"}, {"producer_byte_rate": 1024, "consumer_byte_rate": 2048}),
            ({"client-id": None}, {"producer_byte_rate": 4096}),
            ({"user": None, "client-id": "app"}, {"consumer_byte_rate": 512}),
            ({"client-id": "bad"}, {"request_percentage": 50}),
            ({"client-id": "bad"}, {"producer_byte_rate": 1.5}),
            ({"client-id": "bad2"}, {"producer_byte_rate": 0}),
            ({"ip": "127.0.0.1"}, {"connection_creation_rate": 5}),
            ({"group": "g"}, {"producer_byte_rate": 5}),
            ({"client-id": "bad3"}, {"bogus_rate": 5}),
        ])
        assert [c for c, _ in got[:3]] == [0, 0, 0], got
        assert [c for c, _ in got[3:]] == [INVALID_REQUEST] * 6, got
        assert all(m for _, m in got[3:]), got
        # validate_only changes nothing.
        assert alter(admin, [({"client-id": "dry"}, {"producer_byte_rate": 10})], validate_only=True) == [(0, None)]

        everything = describe(admin, [])
        assert everything == {
            (("client-id", "app"),): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
            (("client-id", None),): {"producer_byte_rate": 4096.0},
            (("user", None), ("client-id", "app")): {"consumer_byte_rate": 512.0},
        }, everything
        exact = describe(admin, [("client-id", 0, "app")])
        assert set(exact) == {(("client-id", "app"),), (("user", None), ("client-id", "app"))}
        assert set(describe(admin, [("client-id", 0, "app")], strict=True)) == {(("client-id", "app"),)}
        assert set(describe(admin, [("client-id", 1, None)])) == {(("client-id", None),)}
        assert set(describe(admin, [("user", 2, None)])) == {(("user", None), ("client-id", "app"))}

        # Removing keys; an entity without keys is gone.
        assert alter(admin, [({"client-id": "app"}, {"consumer_byte_rate": None}),
                             ({"client-id": None}, {"producer_byte_rate": None}),
                             ({"user": None, "client-id": "app"}, {"consumer_byte_rate": None})]) == [(0, None)] * 3
        assert describe(admin, []) == {(("client-id", "app"),): {"producer_byte_rate": 1024.0}}
        assert alter(admin, [({"client-id": "app"}, {"producer_byte_rate": None})]) == [(0, None)]
        assert describe(admin, []) == {}
    finally:
        admin.close()


def set_quota(server, client_id, key, rate):
    admin = kafka_admin(server)
    try:
        assert alter(admin, [({"client-id": client_id}, {key: rate})]) == [(0, None)]
    finally:
        admin.close()


def bound(span):
    return RATE * span * 1.5 + RATE * WINDOW_S + REQUEST_BYTES


def test_a_producer_over_its_quota_is_throttled_near_the_quota(server, kit):
    from confluent_kafka import Producer

    topic, client_id = "quota-produce", "quota-producer"
    kit.create_topic(server.bootstrap, topic)
    set_quota(server, client_id, "producer_byte_rate", RATE)
    throttles = []
    delivered = []  # (monotonic time, bytes)
    p = Producer({"bootstrap.servers": server.bootstrap, "client.id": client_id,
                  "linger.ms": 5, "batch.size": REQUEST_BYTES, "acks": "all",
                  "throttle_cb": lambda e: throttles.append(e.throttle_time)})

    def on_delivery(err, msg):
        if err is None:
            delivered.append((time.monotonic(), len(msg.value())))

    payload = b"x" * 1000
    start = time.monotonic()
    while time.monotonic() - start < SPAN_S:
        try:
            p.produce(topic, payload, callback=on_delivery)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.poll(0.5)
    end = time.monotonic()
    p.purge()
    p.flush(10)
    span = end - start
    total = sum(b for _, b in delivered)
    print(f"produced {total} bytes in {span:.1f}s under a {RATE} B/s quota; "
          f"{len(throttles)} throttle events, max {max(throttles, default=0)}")
    assert total <= bound(span), (total, bound(span))
    assert total > 0
    assert throttles and max(throttles) > 0, "librdkafka saw no throttling"
    assert metric(server, "floe_proxy_throttled_total", 'quota="produce"') > 0
    # Later seconds alone stay near the quota too (the first burst excluded).
    late = sum(b for t, b in delivered if t >= start + WINDOW_S)
    assert late <= RATE * (end - start - WINDOW_S) * 1.5 + RATE * WINDOW_S + REQUEST_BYTES, late


def test_a_consumer_over_its_quota_is_throttled_near_the_quota(server, kit):
    from confluent_kafka import Consumer, Producer

    topic, client_id = "quota-fetch", "quota-consumer"
    kit.create_topic(server.bootstrap, topic)
    # Twice what the consumer may read in the span, produced without a quota.
    want = int(bound(SPAN_S) * 2)
    p = Producer({"bootstrap.servers": server.bootstrap, "client.id": "quota-free",
                  "linger.ms": 5, "batch.size": REQUEST_BYTES})
    payload = b"y" * 1000
    for _ in range(want // len(payload) + 1):
        while True:
            try:
                p.produce(topic, payload)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    set_quota(server, client_id, "consumer_byte_rate", RATE)
    throttles = []
    c = Consumer({"bootstrap.servers": server.bootstrap, "client.id": client_id,
                  "group.id": "quota-group", "auto.offset.reset": "earliest",
                  "fetch.max.bytes": REQUEST_BYTES, "max.partition.fetch.bytes": REQUEST_BYTES,
                  "message.max.bytes": REQUEST_BYTES, "receive.message.max.bytes": 2 * REQUEST_BYTES,
                  "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    c.subscribe([topic])
    got = 0
    first = None
    try:
        deadline = time.monotonic() + 60
        # The span starts at the first record (the group's join is not the quota's).
        while time.monotonic() < deadline and (first is None or time.monotonic() - first < SPAN_S):
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            if first is None:
                first = time.monotonic()
            got += len(m.value())
        span = time.monotonic() - (first or time.monotonic())
    finally:
        c.close()
    print(f"consumed {got} bytes in {span:.1f}s under a {RATE} B/s quota; "
          f"{len(throttles)} throttle events, max {max(throttles, default=0)}")
    assert got > 0
    assert got <= bound(span), (got, bound(span))
    assert got < want, "the consumer read everything: no throttling"
    assert throttles and max(throttles) > 0, "librdkafka saw no throttling"
    assert metric(server, "floe_proxy_throttled_total", 'quota="fetch"') > 0


def test_a_quota_altered_through_one_proxy_is_seen_by_every_proxy(floe_bin, tmp_path):
    from kafka.admin import KafkaAdminClient

    from floe_cluster import Cluster

    cluster = Cluster(floe_bin, tmp_path, metas=1, brokers=1, proxies=2)
    try:
        p1 = cluster.proxies[0].addr("kafka")
        admin = KafkaAdminClient(bootstrap_servers=p1, request_timeout_ms=30000)
        try:
            assert alter(admin, [({"client-id": "everywhere"}, {"consumer_byte_rate": 4096})]) == [(0, None)]
            want = {(("client-id", "everywhere"),): {"consumer_byte_rate": 4096.0}}
            nodes = [b.node_id for b in admin._manager.cluster.brokers()]
            assert len(nodes) == 2, nodes
            deadline = time.monotonic() + 30
            for node in nodes:
                while (got := describe(admin, [], node_id=node)) != want:
                    assert time.monotonic() < deadline, f"proxy {node} describes {got}"
                    time.sleep(0.2)
        finally:
            admin.close()
    finally:
        cluster.stop()
