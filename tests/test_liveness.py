"""Liveness and backpressure with real processes on 127.0.0.1.

- A broker paused (SIGSTOP) past its lease stops serving by itself and,
  resumed, serves nothing stale; a proxy cut off from the metadata service
  stops routing on its old view (answers NOT_LEADER_OR_FOLLOWER at once
  instead of sending to an owner that may be gone). Every write acknowledged
  to an idempotent acks=all producer is read back exactly once, where its
  acknowledgement said.
- The object store (moto S3 behind a TCP relay in this file) made slow, then
  refusing connections: produces back off with retriable errors, the
  broker's memory stays bounded by its unflushed cap, and everything
  acknowledged is there afterwards. Its acks=all writer sends 8 KB records
  at up to 250 a second in CI, 1,000 with FLOE_LONG=1 (the flood producer
  that presses on the cap is the same in both); what the writer queued
  while the store stalled is sent afterwards, so the rate sets how long
  the test takes.
"""

import os
import signal
import threading
import time
import urllib.request

import pytest

from floe_cluster import Role, http_ok, listen
from s3_cluster import Moto, Relay
from test_cluster_failover import owned

confluent_kafka = pytest.importorskip("confluent_kafka")
import confluent_kafka.admin  # noqa: E402

LONG = os.environ.get("FLOE_LONG") == "1"


def metric(admin, name):
    """The value of an unlabelled metric on a process's /metrics (-1 if absent)."""
    with urllib.request.urlopen(f"http://{admin}/metrics", timeout=2) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return -1


def memory_kib(pid, field):
    """VmRSS / VmHWM of a process, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def wait_for(what, pred, timeout, procs=()):
    deadline = time.time() + timeout
    while not pred():
        for p in procs:
            assert p.p.poll() is None, f"{p.log_path.name} exited:\n{p.tail()}"
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def start(procs, role):
    """Starts `role` (a `floe` process on port 0, ready once its ports file is
    written), listed in `procs` first so that it is stopped even if it fails."""
    procs.append(role)
    return role.start()


def start_moto(procs, tmp_path):
    """Starts moto's S3 server on port 0 and returns the port it printed."""
    moto = Moto(tmp_path / "moto.log")
    procs.append(moto.proc)
    return moto.port


def wait_ready(roles, procs, timeout=30):
    for r in roles:
        wait_for(f"{r.name}/readyz", lambda: http_ok(f"http://{r.admin}/readyz"), timeout, procs)


class Producing:
    """An idempotent acks=all producer writing `m0`, `m1`, … in a thread
    until stopped; records where each acknowledged value was stored."""

    def __init__(self, bootstrap, topic, value_bytes=0, pace=0.05, **conf):
        self.acked = {}
        self.failed = []
        self.sent = 0
        self.stop_flag = False
        self.pad = "x" * value_bytes
        self.topic = topic
        self.pace = pace
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 100,
            **conf,
        })
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _on_delivery(self, err, msg):
        if err is not None:
            self.failed.append(err)
        else:
            self.acked[msg.value().decode()[: msg.value().decode().find("|")]] = (msg.partition(), msg.offset())

    def _run(self):
        i = 0
        while not self.stop_flag:
            try:
                self.producer.produce(self.topic, key=f"k{i % 97}", value=f"m{i}|{self.pad}",
                                      on_delivery=self._on_delivery)
                i += 1
                self.sent = i
            except BufferError:
                self.producer.poll(0.05)
                continue
            if i % 50 == 0:
                # Paced (at most 50 / `pace` a second), unless `pace` is 0.
                self.producer.poll(0)
                if self.pace:
                    time.sleep(self.pace)

    def finish(self, timeout):
        self.stop_flag = True
        self.thread.join(10)
        left = self.producer.flush(timeout)
        assert left == 0, f"{left} messages never delivered"
        assert not self.failed, self.failed[:3]
        assert len(self.acked) == self.sent, (len(self.acked), self.sent)


def read_all(bootstrap, topic, partitions, expect, timeout=60):
    """Every value in `topic` -> the set of (partition, offset) it is at."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False,
    })
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(partitions)])
    seen = {}
    deadline = time.time() + timeout
    while len(seen) < expect and time.time() < deadline:
        m = consumer.poll(0.5)
        if m is None or m.error():
            continue
        v = m.value().decode()
        seen.setdefault(v[: v.find("|")] if "|" in v else v, set()).add((m.partition(), m.offset()))
    # Read on a little: a duplicate would come after the first copy.
    end = time.time() + 1.5
    while time.time() < end:
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            v = m.value().decode()
            seen.setdefault(v[: v.find("|")] if "|" in v else v, set()).add((m.partition(), m.offset()))
    consumer.close()
    return seen


def check_exactly_once(acked, seen):
    missing = [v for v in acked if v not in seen]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    wrong = [v for v, po in acked.items() if po not in seen[v]]
    assert not wrong, f"{len(wrong)} not at their acknowledged offsets, e.g. {wrong[:3]}"
    dupes = {v: po for v, po in seen.items() if len(po) > 1}
    assert not dupes, f"{len(dupes)} values stored twice, e.g. {list(dupes.items())[:3]}"
    offsets = {}
    for v, po in seen.items():
        for p, o in po:
            assert (p, o) not in offsets, f"{v} and {offsets[(p, o)]} both at {p}/{o}"
            offsets[(p, o)] = v


@pytest.mark.timeout(180)
def test_broker_paused_past_its_lease_and_a_cut_off_proxy_serve_nothing_stale(floe_bin, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    procs = []
    meta_relay = None
    try:
        # Every process listens on port 0 and reports its ports (`Role`).
        meta_role = start(procs, Role("meta", lambda ports: [
            floe_bin, "meta", "--id", 1, "--listen", listen(ports, "meta"),
            "--data-dir", tmp_path / "m1", "--init"], tmp_path))
        meta = meta_role.addr("meta")
        # Proxy B reaches the metadata service through a relay this test can cut.
        meta_relay = Relay(meta_role.port("meta"))
        brokers = []
        for bid in (1, 2):
            p = start(procs, Role(f"b{bid}", lambda ports, bid=bid: [
                floe_bin, "broker", "--id", bid, "--listen", listen(ports, "rpc"), "--meta", meta,
                "--store", f"local=file://{store}", "--admin-listen", listen(ports, "admin"),
                "--lease-ms", 2000], tmp_path))
            brokers.append((p, p.admin))
        proxy_a = start(procs, Role("proxy-a", lambda ports: [
            floe_bin, "proxy", "--listen", listen(ports, "kafka"), "--meta", meta,
            "--admin-listen", listen(ports, "admin")], tmp_path))
        proxy_b = start(procs, Role("proxy-b", lambda ports: [
            floe_bin, "proxy", "--listen", listen(ports, "kafka"),
            "--meta", f"127.0.0.1:{meta_relay.port}", "--admin-listen", listen(ports, "admin"),
            "--max-view-age-ms", 3000], tmp_path))
        kafka_a, kafka_b = proxy_a.addr("kafka"), proxy_b.addr("kafka")
        wait_ready([b for b, _ in brokers] + [proxy_a, proxy_b], procs)

        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": kafka_a})
        admin.create_topics([confluent_kafka.admin.NewTopic("events", 4, 1)])["events"].result(30)
        wait_for("partitions on both brokers",
                 lambda: owned(brokers[0][1]) == 2 and owned(brokers[1][1]) == 2, 30, procs)
        # Proxy B sees the topic before it is cut off.
        probe_conf = {"bootstrap.servers": kafka_b, "acks": "all", "linger.ms": 0,
                      "message.timeout.ms": 30000}
        warm = confluent_kafka.Producer(probe_conf)
        wait_for("proxy B routes", lambda: warm.list_topics("events", timeout=5).topics["events"].error is None,
                 20, procs)

        t0 = time.time()
        writer = Producing(kafka_a, "events", pace=0.1)
        wait_for("first acknowledgements", lambda: len(writer.acked) >= 500, 60, procs)

        print(f"paused at {time.time() - t0:.1f} s")
        # Pause broker 2 past its lease and cut proxy B off from the metadata.
        b2 = brokers[1][0]
        b2.p.send_signal(signal.SIGSTOP)
        meta_relay.set("refuse")
        paused_at = time.time()
        wait_for("broker 1 took every partition over", lambda: owned(brokers[0][1]) == 4, 30, procs[:2])
        acked_while_paused = len(writer.acked)
        wait_for("writes go on through the failover", lambda: len(writer.acked) > acked_while_paused + 200,
                 60, procs[:2])

        # Proxy B's view (broker 2 owns two partitions) is older than its
        # bound: produce answers NOT_LEADER_OR_FOLLOWER at once, on every
        # partition, instead of being sent to the paused broker (which would
        # never answer); Metadata still answers from the last view.
        # (kafka-python: librdkafka retries NOT_LEADER_OR_FOLLOWER until the
        # message times out, whatever `retries` says; this one reports it.)
        from kafka import KafkaProducer
        from kafka.errors import KafkaTimeoutError, NotLeaderForPartitionError

        time.sleep(max(0.0, paused_at + 3.5 - time.time()))
        stale = KafkaProducer(bootstrap_servers=kafka_b, acks="all", retries=0, enable_idempotence=False,
                              request_timeout_ms=15000, max_block_ms=15000)
        assert stale.partitions_for("events") == {0, 1, 2, 3}, "Metadata answers from the last view"
        futures = [stale.send("events", value=f"probe{p}".encode(), partition=p) for p in range(4)]
        outcomes = []
        for f in futures:
            try:
                f.get(timeout=30)
                outcomes.append("stored")
            except NotLeaderForPartitionError:
                outcomes.append("not leader")
            except KafkaTimeoutError:
                outcomes.append("timed out")
        stale.close(timeout=5)
        assert outcomes == ["not leader"] * 4, outcomes

        print(f"probed at {time.time() - t0:.1f} s")
        # Resume broker 2: it must not serve its old partitions. It renews
        # its lease, checks what it still owns, and drops the rest.
        b2.p.send_signal(signal.SIGCONT)
        wait_for("broker 2 renewed its lease after the lapse",
                 lambda: metric(brokers[1][1], "floe_broker_lease_lapses_total") >= 1, 30, procs)
        assert metric(brokers[1][1], "floe_broker_lease_refusals_total") >= 0
        meta_relay.set("pass")
        acked_after_resume = len(writer.acked)
        wait_for("writes after the resume", lambda: len(writer.acked) > acked_after_resume + 200, 60, procs)
        writer.finish(90)
        total = len(writer.acked)

        print(f"resumed at {time.time() - t0:.1f} s")
        # Proxy B routes again once its view is confirmed.
        fresh = confluent_kafka.Producer(probe_conf)
        ok = []
        fresh.produce("events", value="after", partition=0, on_delivery=lambda err, msg: ok.append(err))
        assert fresh.flush(30) == 0 and ok == [None], ok

        print(f"fresh at {time.time() - t0:.1f} s")
        seen = read_all(kafka_a, "events", 4, total + 1)
        check_exactly_once(writer.acked, seen)
        assert not [v for v in seen if v.startswith("probe")], "a refused probe was stored"
        print(f"read A at {time.time() - t0:.1f} s")
        # The same records through proxy B, now fresh.
        seen_b = read_all(kafka_b, "events", 4, total + 1)
        assert seen_b == seen
        print(f"acknowledged {total} writes; {acked_while_paused} before the pause")
    finally:
        for p in procs:
            if p.p is not None and p.p.poll() is None:
                p.p.send_signal(signal.SIGCONT)
        for p in reversed(procs):
            p.stop()
        if meta_relay is not None:
            meta_relay.close()


@pytest.mark.timeout(180)
def test_slow_then_failing_store_backs_produce_off_within_the_unflushed_cap(floe_bin, tmp_path):
    procs = []
    relay = None
    cap = 4 * 1024 * 1024
    try:
        # moto on port 0 prints the port it is bound to; the relay in front of it
        # is built from that port. Every `floe` process listens on port 0 too.
        relay = Relay(start_moto(procs, tmp_path))
        s3 = (f"s3=s3://floe?endpoint=http://127.0.0.1:{relay.port}&region=us-east-1&path_style=true"
              "&access_key_id=minio&secret_access_key=minio123")
        meta = start(procs, Role("meta", lambda ports: [
            floe_bin, "meta", "--id", 1, "--listen", listen(ports, "meta"),
            "--data-dir", tmp_path / "m1", "--init"], tmp_path)).addr("meta")
        broker = start(procs, Role("broker", lambda ports: [
            floe_bin, "broker", "--id", 1, "--listen", listen(ports, "rpc"),
            "--meta", meta, "--store", s3, "--admin-listen", listen(ports, "admin"),
            "--max-unflushed-bytes", cap, "--max-wal-object-bytes", 1024 * 1024,
            "--write-timeout-ms", 3000, "--cache-bytes", 8 * 1024 * 1024], tmp_path))
        proxy = start(procs, Role("proxy", lambda ports: [
            floe_bin, "proxy", "--listen", listen(ports, "kafka"), "--meta", meta,
            "--admin-listen", listen(ports, "admin")], tmp_path))
        broker_admin, kafka = broker.admin, proxy.addr("kafka")
        wait_ready([broker, proxy], procs)
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": kafka})
        admin.create_topics([confluent_kafka.admin.NewTopic("load", 2, 1)])["load"].result(30)
        wait_for("the broker owns the partitions", lambda: owned(broker_admin) == 2, 30, procs)

        admin.create_topics([confluent_kafka.admin.NewTopic("flood", 2, 1)])["flood"].result(30)
        # request.timeout.ms is the produce's timeout_ms: how long the broker
        # may hold a produce for room before REQUEST_TIMED_OUT.
        # 50 records every `pace` s: 1,000 a second (8 MB/s) in the long
        # mode, 250 in CI.
        writer = Producing(kafka, "load", value_bytes=8000, pace=0.05 if LONG else 0.2,
                           **{"request.timeout.ms": 3000})
        wait_for("a healthy start", lambda: len(writer.acked) >= 1000, 60, procs)
        pid = broker.p.pid
        base = memory_kib(pid, "VmRSS")
        base_hwm = memory_kib(pid, "VmHWM")

        # An acks=1 producer is answered as soon as its batches are
        # sequenced, so nothing on the client side limits what it sends:
        # only the broker's cap keeps the stalled bytes bounded.
        flood = Producing(kafka, "flood", value_bytes=16000, pace=0, **{
            "acks": 1, "enable.idempotence": False, "request.timeout.ms": 3000,
            "batch.size": 512 * 1024, "queue.buffering.max.kbytes": 32 * 1024})
        # Slow (every chunk held 200 ms: a 1 MiB PUT takes longer than the
        # write deadline), then refusing connections, then healthy.
        relay.set("delay", 0.2)
        time.sleep(8)
        relay.set("refuse")
        time.sleep(8)
        stalled_acks = len(writer.acked)
        backpressure = metric(broker_admin, "floe_broker_backpressure_refusals_total")
        peak = memory_kib(pid, "VmHWM")
        flood.stop_flag = True
        relay.set("pass")
        wait_for("writes after the store recovered", lambda: len(writer.acked) > stalled_acks + 1000, 90, procs)
        writer.finish(120)
        flood.finish(120)
        total = len(writer.acked)
        flooded = len(flood.acked)

        # The broker's memory while the store stalled: what it held at the
        # start plus the cap and the buffers around it (the object being
        # written, request bodies, allocator slack), far below what the
        # flood producer pushed at it.
        grew_mib = (peak - base_hwm) / 1024
        bound_mib = 16 * cap / (1024 * 1024)
        print(f"acknowledged {total} acks=all and {flooded} acks=1 writes "
              f"({(total * 8000 + flooded * 16000) / 2**20:.0f} MiB); broker VmRSS at start "
              f"{base / 1024:.0f} MiB, VmHWM {base_hwm / 1024:.0f} -> {peak / 1024:.0f} MiB "
              f"(+{grew_mib:.0f} MiB, bound {bound_mib:.0f}); backpressure refusals {backpressure:.0f}")
        assert grew_mib < bound_mib, f"the broker grew by {grew_mib:.0f} MiB while the store stalled"
        assert backpressure > 0, "produce never waited for room"

        seen = read_all(kafka, "load", 2, total)
        check_exactly_once(writer.acked, seen)
        seen_flood = read_all(kafka, "flood", 2, flooded)
        lost = [v for v in flood.acked if v not in seen_flood]
        assert not lost, f"{len(lost)} acknowledged acks=1 writes lost, e.g. {lost[:3]}"
    finally:
        for p in reversed(procs):
            p.stop()
        if relay is not None:
            relay.close()
