"""Share groups' timer buckets (docs/queues.md, delayed records): with
`floe standalone --share-max-parked 8`, a backlog of delayed records far past
what a share-partition's parked list holds is written out to timer buckets
(`share-timers/…/*.tix` objects in the store) and read back as it comes due,
with confluent-kafka's ShareConsumer (explicit acknowledgements):

- 300 records with `floe-deliver-at` times spread over 3 s in shuffled
  order, then 20 plain records: the plain ones come at once, every delayed
  one exactly once, none before its due time and in due order (within
  500 ms); buckets are written while records wait and none is left once
  everything is acknowledged;
- the same with a kill -9 of the standalone while records wait in buckets,
  and a restart on the same data dir: none lost, none early, none accepted
  before the kill delivered again."""

import random
import re
import time
import urllib.request
import uuid

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer  # noqa: E402

pytestmark = pytest.mark.timeout(90)

# The parked list's cap: buckets are sealed once 6 records in it wait.
MAX_PARKED = 8
DELAYED = 300
PLAIN = 20
# A record never arrives more than this after one due later than it (the
# broker takes due records in with a fetch, a chunk of a bucket at a time).
ORDER_SLACK_MS = 500

_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metric(server, name, **labels):
    """The sum of `name`'s samples whose labels include `labels` (-1: none)."""
    with urllib.request.urlopen(server.admin_url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    total, seen = 0.0, False
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or m.group(1) != name:
            continue
        have = dict(_LABEL.findall(m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
            seen = True
    return total if seen else -1.0


def timer_metrics(server):
    out = {f"entries.{e}": metric(server, "floe_broker_share_timer_entries_total", event=e)
           for e in ("sealed", "lost")}
    out.update({f"buckets.{e}": metric(server, "floe_broker_share_timer_buckets_total", event=e)
                for e in ("written", "merged", "deleted")})
    out["errors"] = metric(server, "floe_broker_share_timer_errors_total")
    return out


def buckets(server):
    """The timer bucket objects in the standalone's store."""
    return sorted(p for p in server.data_dir.rglob("*.tix") if "share-timers" in p.parts)


def share_consumer(bootstrap, group, topic):
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


class Arrivals:
    """What one test's consumers got: (value, offset, wall-clock ms when
    polled), and the values accepted (acknowledgement committed)."""

    def __init__(self):
        self.got = []
        self.accepted = set()

    def values(self):
        return {v for v, _, _ in self.got}

    def poll_accept(self, consumer, timeout=0.1, on_poll=None):
        """One poll; every record is ACCEPTed and the acknowledgements
        committed before returning."""
        msgs = consumer.poll(timeout)
        now = time.time() * 1000
        batch = []
        for m in msgs:
            assert m.error() is None, m.error()
            self.got.append((m.value(), m.offset(), now))
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            batch.append(m.value())
        if batch:
            consumer.commit_sync()
            self.accepted.update(batch)
        if on_poll:
            on_poll()
        return len(batch)

    def until(self, consumer, done, timeout, on_poll=None):
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, \
                f"not done after {timeout}s: {len(self.values())} distinct records so far"
            self.poll_accept(consumer, on_poll=on_poll)


def produce(bootstrap, topic, first_due_ms, spread_ms, seed):
    """DELAYED records due from `first_due_ms` over `spread_ms`, in an order
    shuffled against offset order, then PLAIN records. Returns ({value: due
    ms}, {plain values})."""
    dues = [first_due_ms + spread_ms * i // DELAYED for i in range(DELAYED)]
    random.Random(seed).shuffle(dues)
    due = {}
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i, at in enumerate(dues):
        value = b"d%03d" % i
        due[value] = at
        p.produce(topic, value=value, headers=[("floe-deliver-at", str(at).encode())])
    plain = {b"p%02d" % i for i in range(PLAIN)}
    for value in sorted(plain):
        p.produce(topic, value=value)
    assert p.flush(30) == 0
    return due, plain


def check_none_early(arrivals, due):
    # The broker acquires a record at its due time at the soonest (its clock,
    # the same machine's), and the client sees it after that.
    early = [(v.decode(), round(at - due[v], 1)) for v, _, at in arrivals.got if v in due and at < due[v]]
    assert early == [], f"delivered before due (value, ms after due): {early}"


def check_due_order(arrivals, due, values):
    """Each record of `values` arrived no later than ORDER_SLACK_MS after any
    record due after it."""
    firsts = {}
    for v, _, at in arrivals.got:
        firsts.setdefault(v, at)
    by_due = sorted(values, key=lambda v: (due[v], v))
    late = []
    soonest_after = float("inf")  # the first arrival among records due later
    soonest_value = None
    for v in reversed(by_due):
        if firsts[v] > soonest_after + ORDER_SLACK_MS:
            late.append((v.decode(), soonest_value.decode(), round(firsts[v] - soonest_after)))
        if firsts[v] < soonest_after:
            soonest_after, soonest_value = firsts[v], v
    assert late == [], f"out of due order by more than {ORDER_SLACK_MS} ms " \
                       f"(record, one due later that came first, ms): {late[:20]}"


def lateness(arrivals, due):
    firsts = {}
    for v, _, at in arrivals.got:
        firsts.setdefault(v, at)
    xs = sorted(firsts[v] - due[v] for v in due if v in firsts)
    return {"p50": round(xs[len(xs) // 2]), "p99": round(xs[int(len(xs) * 0.99)]), "max": round(xs[-1])}


def backlog(standalone_factory, kit, due_in_ms, seed):
    """A standalone parking MAX_PARKED delayed records at most, a new topic and
    group, and the records `produce` writes there, due from `due_in_ms` on."""
    s = standalone_factory(share_groups=True, share_auto_offset_reset="earliest",
                           share_max_parked=MAX_PARKED)
    topic, group = f"timers-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:6]}"
    kit.create_topic(s.bootstrap, topic)
    t0 = int(time.time() * 1000)
    due, plain = produce(s.bootstrap, topic, t0 + due_in_ms, 3000, seed=seed)
    return s, topic, group, t0, due, plain


def test_a_delayed_backlog_past_the_parked_list_goes_to_buckets_and_arrives_when_due_in_due_order(
        standalone_factory, kit):
    s, topic, group, t0, due, plain = backlog(standalone_factory, kit, 2500, seed=1)

    arrivals = Arrivals()
    tix_while_pending = []

    def watch():
        # Buckets seen while some delayed record is still to come.
        if len(arrivals.values() & set(due)) < DELAYED:
            found = buckets(s)
            if found:
                tix_while_pending.append(len(found))

    c = share_consumer(s.bootstrap, group, topic)
    try:
        # The plain records come at once: before the first delayed one is due.
        arrivals.until(c, lambda: plain <= arrivals.values(), timeout=20, on_poll=watch)
        plain_at = max(at for v, _, at in arrivals.got if v in plain)
        assert plain_at < t0 + 2500, \
            f"the plain records came {plain_at - t0:.0f} ms after producing, held up by the delayed ones"
        arrivals.until(c, lambda: set(due) <= arrivals.values(), timeout=25, on_poll=watch)
        # Nothing more comes (each record exactly once), and the emptied
        # buckets go: polling, since the owner's timer work runs after fetches.
        deadline = time.monotonic() + 10
        quiet_until = time.monotonic() + 1
        while time.monotonic() < deadline:
            arrivals.poll_accept(c, 0.2)
            if time.monotonic() >= quiet_until and not buckets(s):
                break
        left = buckets(s)
    finally:
        c.close()

    m = timer_metrics(s)
    print("timer metrics:", m, "buckets seen while pending (max):", max(tix_while_pending, default=0))
    print("lateness ms:", lateness(arrivals, due))

    values = [v for v, _, _ in arrivals.got]
    twice = sorted({v for v in values if values.count(v) > 1})
    assert twice == [], f"delivered more than once: {twice}"
    assert set(values) == set(due) | plain
    check_none_early(arrivals, due)
    check_due_order(arrivals, due, list(due))

    assert m["buckets.written"] > 0, m
    assert m["entries.sealed"] > 0, m
    assert m["entries.lost"] == 0, m
    assert m["errors"] == 0, m
    assert tix_while_pending, "no .tix object under share-timers/ while delayed records were pending"
    assert left == [], f"timer buckets left after everything was acknowledged: {left}; metrics {m}"


def test_delayed_records_in_buckets_survive_a_kill_9_none_early_none_accepted_again(
        standalone_factory, kit):
    # Due from 5 s on: the first consumer, the kill and the restart fit before.
    s, topic, group, t0, due, plain = backlog(standalone_factory, kit, 5000, seed=2)

    arrivals = Arrivals()
    c = share_consumer(s.bootstrap, group, topic)
    try:
        arrivals.until(c, lambda: plain <= arrivals.values(), timeout=20)
        # Keep fetching until most records wait in buckets (the owner seals
        # after fetches, and writes the state listing them with each seal).
        arrivals.until(c, lambda: metric(s, "floe_broker_share_timer_entries_total", event="sealed")
                       >= DELAYED * 2 // 3 and buckets(s), timeout=10)
    finally:
        c.close()
    before_kill = timer_metrics(s)
    tix_at_kill = buckets(s)
    killed_at = time.time() * 1000
    first_run = len(arrivals.got)
    accepted_before = set(arrivals.accepted)
    assert tix_at_kill, "no timer bucket to survive the kill"
    assert killed_at < min(due.values()), \
        f"the kill came {killed_at - min(due.values()):.0f} ms after the first record was due: too slow a run"
    s.kill9()
    s.start()
    restarted_at = time.time() * 1000

    c = share_consumer(s.bootstrap, group, topic)
    try:
        arrivals.until(c, lambda: set(due) <= arrivals.values(), timeout=30)
        # Nothing accepted comes back: a short poll for stragglers, until the
        # buckets are gone too.
        quiet_until, deadline = time.monotonic() + 1, time.monotonic() + 10
        while time.monotonic() < deadline:
            arrivals.poll_accept(c, 0.2)
            if time.monotonic() >= quiet_until and not buckets(s):
                break
        left = buckets(s)
    finally:
        c.close()

    after = timer_metrics(s)
    print("before the kill:", before_kill, "buckets:", len(tix_at_kill),
          f"restart took {restarted_at - killed_at:.0f} ms; after:", after)
    print("lateness ms:", lateness(arrivals, due))

    values = [v for v, _, _ in arrivals.got]
    assert set(values) == set(due) | plain, sorted(set(due) | plain - set(values))
    again = [v.decode() for v, _, _ in arrivals.got[first_run:] if v in accepted_before]
    assert again == [], f"accepted before the kill, delivered again after it: {again}"
    after_restart = [v for v, _, _ in arrivals.got[first_run:]]
    twice = sorted({v.decode() for v in after_restart if after_restart.count(v) > 1})
    assert twice == [], f"delivered more than once after the restart: {twice}"
    check_none_early(arrivals, due)
    # Records due once the new consumer was fetching come in due order.
    settled = restarted_at + 1000
    check_due_order(arrivals, due, [v for v in due if due[v] > settled])
    assert after["entries.lost"] == 0, after
    assert after["errors"] == 0, after
    assert left == [], f"timer buckets left after everything was acknowledged: {left}; metrics {after}"
