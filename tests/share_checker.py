"""A checker for a history of a share-group workload (KIP-932, issue 41):
what producers wrote, what each ShareConsumer was delivered and how it
acknowledged it, the dead-letter topic read back at the end.

A record is a (partition, offset) of the share topic; its value is
`consistency.encode(producer, seq)`. The history holds:
- `acked` / `unacked`: the producers' writes (`consistency.Write`) and the
  (producer, seq) sent but never acknowledged; `log`: the share topic as
  read back at the end ({(partition, offset): (producer, seq)}), when it was;
- `deliveries`: every record a consumer's poll returned, with the delivery
  count the client shows (`Message.delivery_count()`) and when;
- `acks`: every acknowledgement sent (ACCEPT / RELEASE / REJECT) of a
  delivery, and its outcome: `confirmed` (the acknowledgement commit
  callback reported no error for it), `failed` (reported an error), or
  `unknown` (no answer: a commit timed out, the consumer closed);
- `consumers`: when each consumer was created; the final drain is one;
- `dead`: the dead-letter topic read back (the `floe-dlq-*` headers);
- `limit`: the group's `share.delivery.count.limit`; `drained`: the final
  drain saw every record done (the group's start offset at the log end).

What is a violation under at-least-once delivery. An acknowledgement that
was not confirmed may have been applied or not: a redelivery after it is
allowed, and so is the record being done without another delivery. A
confirmed ACCEPT or REJECT ends a record: the owner answers only once the
new state is committed (docs/queues.md, "What is durable"). librdkafka
fetches ahead of `poll()`, so a record may be returned to the application
after its lock ran out and another consumer took it: such a *stale*
delivery is counted, not reported, unless it is shown to be a new
acquisition: its own acknowledgement was confirmed (the owner held it
acquired by that consumer), or its consumer was created after the time
compared with. Kinds:

- `accepted_twice`: two deliveries of one record whose acknowledgements
  ending it (ACCEPT or REJECT) were both confirmed, at least one an ACCEPT
  (or both REJECTs);
- `delivered_after_ack`: a delivery, shown new as above, after a confirmed
  ACCEPT or REJECT of the record (not counted again when it is an
  `accepted_twice`);
- `count_back`: a delivery, shown new, after a confirmed RELEASE of a
  delivery with count n, with a count not above n (a confirmed RELEASE
  wrote the count); a count above the group's delivery limit is
  `over_limit`. A count that does not grow where no confirmed RELEASE
  wrote it is only counted (`count_repeats`): an acquisition is written
  with the next acknowledgement, and a new owner after a crash restores
  the count written last (docs/queues.md);
- `undelivered`: a record of the log (or an acknowledged write) for which
  no consumer sent an ACCEPT and that is not in the dead-letter topic at
  the end;
- `drain_stalled`: the final drain did not see every record done;
- `dlq_twice`: a record in the dead-letter topic more than once;
- `dlq_missing`: a record whose REJECT was confirmed, or whose RELEASE at
  the delivery limit was confirmed, not in the dead-letter topic at the end
  (the drain done: the start offset waits for dead-letter appends);
- `dlq_unexpected`: a dead-letter copy of a record whose ACCEPT was
  confirmed, or with reason `rejected` though no REJECT of it was sent, or
  with reason `delivery-count-limit` below the limit;
- `phantom`: a delivery or dead-letter copy of something no producer
  wrote, or not at the place the log holds it.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from consistency import Violations

KINDS = ("accepted_twice", "delivered_after_ack", "count_back", "over_limit", "undelivered", "drain_stalled",
         "dlq_twice", "dlq_missing", "dlq_unexpected", "phantom")

# What was found with a kind, told with it when it is found again.
FOUND = {
    "over_limit": "found in a 120 s pause run (seed 1402843990, history in "
                  "tests/histories/share-pause-1402843990.json.gz): a record acquired at the delivery limit "
                  "is written as Available with that count (an acquisition is written as Available), and a "
                  "new owner restores it as Available and acquires it once more instead of dead-lettering "
                  "it (broker/src/share/partition.rs `restore` and `acquire_with`); docs/operations.md",
    "drain_stalled": "found in a 120 s clock run (seed 4101, history in "
                     "tests/histories/share-clock-4101.json.gz): every record accepted or dead-lettered once as "
                     "the clients saw it, but a partition's start offset stayed at a record dead-lettered at the "
                     "limit whose copy was in the dead-letter topic, after the owner's last append failed "
                     "(its lease ran out) and was not tried again; docs/operations.md",
}

ACCEPT, RELEASE, REJECT = "ACCEPT", "RELEASE", "REJECT"
ENDING = (ACCEPT, REJECT)


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    id: int
    consumer: str
    partition: int
    offset: int
    record: tuple | None  # (producer, seq) decoded from the value; None: a value no producer of ours writes
    count: int | None  # the delivery count the client shows
    at: float  # when poll() returned it (time.time())


@dataclasses.dataclass(frozen=True, slots=True)
class Ack:
    delivery: int  # Delivery.id
    kind: str  # ACCEPT, RELEASE, REJECT
    sent: float
    outcome: str  # confirmed, failed, unknown
    answered: float | None = None  # when the outcome arrived


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetter:
    partition: int  # floe-dlq-partition
    offset: int  # floe-dlq-offset
    record: tuple | None  # the value decoded
    reason: str  # floe-dlq-reason
    count: int | None  # floe-dlq-delivery-count
    at: int = -1  # its offset in the dead-letter topic


@dataclasses.dataclass
class ShareHistory:
    acked: list = dataclasses.field(default_factory=list)  # [consistency.Write]
    unacked: set = dataclasses.field(default_factory=set)  # {(producer, seq)}
    log: dict | None = None  # {(partition, offset): (producer, seq)}
    deliveries: list = dataclasses.field(default_factory=list)  # [Delivery]
    acks: list = dataclasses.field(default_factory=list)  # [Ack]
    consumers: dict = dataclasses.field(default_factory=dict)  # name -> created at
    dead: list = dataclasses.field(default_factory=list)  # [DeadLetter]
    limit: int = 5
    drained: bool = True
    drain_note: str = ""  # the end state when the drain stalled

    def to_json(self):
        return {"acked": [dataclasses.astuple(w) for w in self.acked], "unacked": sorted(self.unacked),
                "log": None if self.log is None else sorted([p, o, *rec] for (p, o), rec in self.log.items()),
                "deliveries": [dataclasses.astuple(d) for d in self.deliveries],
                "acks": [dataclasses.astuple(a) for a in self.acks], "consumers": self.consumers,
                "dead": [dataclasses.astuple(d) for d in self.dead], "limit": self.limit,
                "drained": self.drained, "drain_note": self.drain_note}

    @classmethod
    def from_json(cls, data):
        from consistency import Write

        def rec(x):
            return tuple(x) if x is not None else None

        return cls(acked=[Write(*w) for w in data["acked"]], unacked={tuple(u) for u in data["unacked"]},
                   log=None if data["log"] is None else {(p, o): (a, b) for p, o, a, b in data["log"]},
                   deliveries=[Delivery(i, c, p, o, rec(r), n, t) for i, c, p, o, r, n, t in data["deliveries"]],
                   acks=[Ack(*a) for a in data["acks"]], consumers=dict(data["consumers"]),
                   dead=[DeadLetter(p, o, rec(r), why, n, at) for p, o, r, why, n, at in data["dead"]],
                   limit=data["limit"], drained=data["drained"], drain_note=data.get("drain_note", ""))


@dataclasses.dataclass
class ShareReport(Violations):
    violations: dict  # kind -> [message]
    records: int  # records of the share topic
    deliveries: int
    acks: dict  # (kind, outcome) -> count, as "ACCEPT/confirmed"
    dead: int  # copies in the dead-letter topic
    # Counted, not violations (see the module's doc).
    stale: list = dataclasses.field(default_factory=list)
    count_repeats: list = dataclasses.field(default_factory=list)
    redelivered: int = 0  # records delivered more than once

    def notes(self):
        return {"stale_deliveries": len(self.stale), "count_repeats": len(self.count_repeats),
                "redelivered": self.redelivered}

    def summary(self, examples=5):
        acks = ", ".join(f"{k} {v}" for k, v in sorted(self.acks.items()))
        lines = [f"share: {self.records} records, {self.deliveries} deliveries ({self.redelivered} records "
                 f"delivered again), acknowledgements {acks or 'none'}, {self.dead} dead letters"]
        for kind, msgs in sorted(self.violations.items()):
            if msgs:
                lines.append(f"{kind}: {len(msgs)}, e.g. " + "; ".join(msgs[:examples]))
                if kind in FOUND:
                    lines.append(f"  ({kind} was {FOUND[kind]})")
        for name, notes in (("stale deliveries (fetched ahead, not a violation)", self.stale),
                            ("delivery counts not growing, none written (not a violation)", self.count_repeats)):
            if notes:
                lines.append(f"{name}: {len(notes)}, e.g. " + "; ".join(notes[:examples]))
        return "\n".join(lines)


def _where(key):
    return f"{key[0]}/{key[1]}"


def check(h: ShareHistory) -> ShareReport:
    v = {k: [] for k in KINDS}
    stale, repeats = [], []

    # What the share topic holds: the log read back, else the acknowledged writes.
    records = dict(h.log) if h.log is not None else {}
    if h.log is None:
        for w in h.acked:
            if w.offset is not None:
                records[(w.partition, w.offset)] = (w.producer, w.seq)
    sent = {(w.producer, w.seq) for w in h.acked} | set(h.unacked)
    placed = defaultdict(set)  # (producer, seq) -> {(partition, offset)} as the log holds it
    for key, rec in records.items():
        placed[rec].add(key)

    def phantom(key, rec, what):
        if key in records:
            if records[key] != rec:
                return f"{what} {rec} at {_where(key)}, where the log holds {records[key]}"
            return None
        if rec is None or rec not in sent:
            return f"{what} {rec} at {_where(key)}, never written"
        if h.log is not None or placed.get(rec):
            return f"{what} {rec} at {_where(key)}, not a place the log holds it ({sorted(placed.get(rec, ()))})"
        return None

    by_id = {d.id: d for d in h.deliveries}
    deliveries = defaultdict(list)  # key -> [Delivery] by time
    for d in sorted(h.deliveries, key=lambda d: (d.at, d.id)):
        deliveries[(d.partition, d.offset)].append(d)
        msg = phantom((d.partition, d.offset), d.record, f"{d.consumer} was delivered")
        if msg:
            v["phantom"].append(msg)
    for key, ds in sorted(deliveries.items()):
        for d in ds:
            if d.count is not None and d.count > h.limit:
                v["over_limit"].append(f"{_where(key)} delivered to {d.consumer} with count {d.count}, over the "
                                       f"limit {h.limit} (t={d.at:.3f}; its counts {[x.count for x in ds]})")
    acks_of = defaultdict(list)  # delivery id -> [Ack]
    per_key = defaultdict(list)  # key -> [(Ack, Delivery)]
    counts = defaultdict(int)
    for a in h.acks:
        d = by_id.get(a.delivery)
        counts[f"{a.kind}/{a.outcome}"] += 1
        if d is None:
            continue
        acks_of[a.delivery].append(a)
        per_key[(d.partition, d.offset)].append((a, d))

    def confirmed(d, kinds):
        return any(a.outcome == "confirmed" and a.kind in kinds for a in acks_of[d.id])

    def new_after(d, t):
        """Whether delivery `d` was surely acquired after time `t`."""
        if d.at <= t:
            return False
        return h.consumers.get(d.consumer, float("-inf")) > t or confirmed(d, (ACCEPT, RELEASE, REJECT))

    for key in sorted(set(deliveries) | set(per_key)):
        ds = deliveries.get(key, [])
        ending = sorted(((a, d) for a, d in per_key.get(key, ()) if a.outcome == "confirmed" and a.kind in ENDING),
                        key=lambda x: x[0].answered if x[0].answered is not None else x[0].sent)
        twice = set()
        if len({d.id for _, d in ending}) > 1:
            kinds = [a.kind for a, _ in ending]
            if ACCEPT in kinds or kinds.count(REJECT) > 1:
                v["accepted_twice"].append(
                    f"{_where(key)}: " + ", then ".join(
                        f"{a.kind} by {d.consumer} (count {d.count}, confirmed t={a.answered:.3f})"
                        for a, d in ending))
                twice = {d.id for _, d in ending[1:]}
        if ending:
            first, fd = ending[0]
            t = first.answered if first.answered is not None else first.sent
            for d in ds:
                if d.id == fd.id or d.at <= t:
                    continue
                if new_after(d, t):
                    if d.id not in twice:
                        v["delivered_after_ack"].append(
                            f"{_where(key)} delivered to {d.consumer} (count {d.count}, t={d.at:.3f}) after "
                            f"{first.kind} by {fd.consumer} (count {fd.count}) was confirmed at t={t:.3f}")
                else:
                    stale.append(f"{_where(key)} to {d.consumer} (count {d.count}, t={d.at:.3f}) after "
                                 f"{first.kind} confirmed at t={t:.3f}")
        # Delivery counts.
        written = [(a.answered if a.answered is not None else a.sent, d) for a, d in per_key.get(key, ())
                   if a.kind == RELEASE and a.outcome == "confirmed" and d.count is not None]
        flagged = set()
        for t, rd in written:
            for d in ds:
                if d.id != rd.id and d.count is not None and d.count <= rd.count and new_after(d, t):
                    flagged.add(d.id)
                    v["count_back"].append(
                        f"{_where(key)} delivered to {d.consumer} with count {d.count} (t={d.at:.3f}) after a "
                        f"RELEASE of count {rd.count} by {rd.consumer} was confirmed at t={t:.3f}")
        for d1, d2 in zip(ds, ds[1:]):
            if d1.count is not None and d2.count is not None and d2.count <= d1.count and d2.id not in flagged:
                repeats.append(f"{_where(key)}: count {d1.count} to {d1.consumer} (t={d1.at:.3f}), then "
                               f"{d2.count} to {d2.consumer} (t={d2.at:.3f})")

    # The dead-letter topic.
    copies = defaultdict(list)
    for c in h.dead:
        key = (c.partition, c.offset)
        copies[key].append(c)
        msg = phantom(key, c.record, "the dead-letter topic holds")
        if msg:
            v["phantom"].append(msg)
    for key, cs in sorted(copies.items()):
        if len(cs) > 1:
            v["dlq_twice"].append(f"{_where(key)} in the dead-letter topic {len(cs)} times (at "
                                  f"{[c.at for c in cs]}, reasons {[c.reason for c in cs]})")
        acks = per_key.get(key, ())
        if any(a.kind == ACCEPT and a.outcome == "confirmed" for a, _ in acks):
            v["dlq_unexpected"].append(f"{_where(key)} in the dead-letter topic, though an ACCEPT of it was "
                                       f"confirmed")
        for c in cs:
            if c.reason == "rejected" and not any(a.kind == REJECT for a, _ in acks):
                v["dlq_unexpected"].append(f"{_where(key)} in the dead-letter topic as rejected, though no "
                                           f"consumer sent a REJECT of it")
            elif c.reason == "delivery-count-limit" and c.count is not None and c.count < h.limit:
                v["dlq_unexpected"].append(f"{_where(key)} in the dead-letter topic at delivery count {c.count}, "
                                           f"below the limit {h.limit}")
    if h.drained:
        for key, acks in sorted(per_key.items()):
            if key in copies:
                continue
            why = [f"{a.kind} of count {d.count} by {d.consumer} confirmed t={a.answered:.3f}" for a, d in acks
                   if a.outcome == "confirmed" and (a.kind == REJECT or
                                                    (a.kind == RELEASE and d.count is not None and
                                                     d.count >= h.limit))]
            if why:
                v["dlq_missing"].append(f"{_where(key)} not in the dead-letter topic after {why[0]}")

    # Every record accepted or dead-lettered in the end.
    accepted = {(d.partition, d.offset) for a in h.acks if a.kind == ACCEPT
                for d in [by_id.get(a.delivery)] if d is not None}
    for key, rec in sorted(records.items()):
        if key in accepted or key in copies:
            continue
        ds = deliveries.get(key, [])
        seen = (f"delivered {len(ds)} times, last with count {ds[-1].count} to {ds[-1].consumer}" if ds
                else "never delivered")
        v["undelivered"].append(f"{_where(key)} {rec}: {seen}, never accepted, not in the dead-letter topic")
    if not h.drained:
        v["drain_stalled"].append(f"the final drain did not see every record done (partition, start offset, "
                                  f"log end): {h.drain_note}; as the clients saw it, {len(v['undelivered'])} "
                                  f"records neither accepted nor dead-lettered")

    return ShareReport(violations=v, records=len(records), deliveries=len(h.deliveries), acks=dict(counts),
                       dead=len(h.dead), stale=stale, count_repeats=repeats,
                       redelivered=sum(1 for ds in deliveries.values() if len(ds) > 1))
