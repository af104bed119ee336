"""A consistency checker for a history of writes and reads on a Kafka-like log.

A history is what the clients saw:
- the acknowledged writes: for each, the producer, its sequence number (both
  carried in the record's value), and the partition and offset the delivery
  report gave. The offset may be unknown (None): librdkafka acknowledges a
  batch whose answer was lost (a broker killed mid-request) once a later
  batch of the same producer and partition succeeds, since the broker's
  sequence check accepted the later one only after it, and reports it with
  offset -1. Such a write must be read once in its partition;
- the writes that were not acknowledged (failed or timed out): they may be
  in the log or not, but at most once;
- what each independent reader read, per partition in read order:
  (partition, offset, producer, sequence).

`check(history)` returns a `Report` naming every violation of:
- lost: an acknowledged write that no reader saw;
- misplaced: a reader holds something else at an acknowledged offset, or
  holds a write acknowledged without an offset in another partition;
- duplicate: one (producer, sequence) stored at two offsets (idempotence),
  unless each copy came under its own producer session (below);
- order: offsets not strictly increasing in a partition as read, or one
  producer's sequences not increasing with the offsets of a partition;
- disagree: two readers hold different records at one offset, or one of
  them has offsets the other has not;
- phantom: a record that no producer wrote.

A record stored twice where a reader saw the batches' producer ids and
epochs (`Read.session`), each copy under a different (producer id, epoch),
is reported as *resent*, not as a violation: the client sent it again under
a new epoch, where no broker (Kafka's included) can recognise it. librdkafka
does this after an epoch bump ("DrainBump", once messages time out or after
an out-of-order answer to a request behind a failed one) to messages waiting
for a retry, whether or not their first send was stored
(confluentinc/librdkafka#4953). A copy under the same (producer id, epoch)
as another stays a *duplicate*: the broker failed to recognise a retry. The
later copies of a resent record are left out of the order check (a new
epoch's sequence starts again).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict


@dataclasses.dataclass(frozen=True, slots=True)
class Write:
    producer: int
    seq: int
    partition: int
    offset: int | None  # None: acknowledged without an offset (see above)
    at: float = 0.0  # when the acknowledgement arrived (time.time()), for reports


@dataclasses.dataclass(frozen=True, slots=True)
class Read:
    partition: int
    offset: int
    producer: int
    seq: int
    # The Kafka producer session the record was stored under, (producer
    # id, producer epoch, sequence number), when the reader saw its batch.
    session: tuple | None = None


@dataclasses.dataclass
class History:
    acked: list  # [Write]
    unacked: set = dataclasses.field(default_factory=set)  # {(producer, seq)} sent, never acknowledged
    reads: dict = dataclasses.field(default_factory=dict)  # reader name -> [Read] in read order


class Violations:
    """What a checker's report shares: `violations`, {kind: [message]}."""

    @property
    def ok(self):
        return not any(self.violations.values())

    def counts(self):
        return {k: len(v) for k, v in self.violations.items()}


@dataclasses.dataclass
class Report(Violations):
    violations: dict  # kind -> [message]
    acked: int
    unacked: int
    unacked_stored: int
    records: dict  # reader -> records read
    # Records stored once per producer session: sent again by the client
    # under a new epoch (see the module's doc); not a violation.
    resent: list = dataclasses.field(default_factory=list)

    def summary(self, examples=5):
        lines = [f"acknowledged {self.acked}, not acknowledged {self.unacked} "
                 f"(of which stored {self.unacked_stored}), read {self.records}"]
        for kind, msgs in sorted(self.violations.items()):
            if msgs:
                lines.append(f"{kind}: {len(msgs)}, e.g. " + "; ".join(msgs[:examples]))
        if self.resent:
            lines.append(f"resent under a new producer epoch (not a violation): {len(self.resent)}, e.g. "
                         + "; ".join(self.resent[:examples]))
        return "\n".join(lines)


def encode(producer, seq):
    """The value a producer writes: b"<producer> <seq>"."""
    return f"{producer} {seq}".encode()


def decode(value):
    """The inverse of `encode`; None for a value it did not write."""
    try:
        p, s = value.split(b" ", 1)
        return int(p), int(s)
    except (ValueError, AttributeError):
        return None


def resent_copies(places, sessions):
    """The later copies of a record stored at `places` ([(partition,
    offset)]) when each copy is known to be under its own (producer id,
    epoch) in `sessions`; None when it is a duplicate."""
    seen = [sessions.get(pl) for pl in places]
    if any(x is None for x in seen) or len({x[:2] for x in seen}) < len(seen):
        return None
    return sorted(places)[1:]


def check(history: History) -> Report:
    v = defaultdict(list)
    resent = []
    readers = list(history.reads)
    # (partition, offset) -> (producer id, epoch, sequence), from every
    # reader that saw the batches (the readers are checked to agree).
    sessions = {(r.partition, r.offset): r.session
                for name in readers for r in history.reads[name] if r.session is not None}
    by_offset = {}  # reader -> {(partition, offset): (producer, seq)}
    for name in readers:
        at = {}
        last = {}
        where = defaultdict(list)
        for r in history.reads[name]:
            if r.partition in last and r.offset <= last[r.partition]:
                v["order"].append(f"{name}: partition {r.partition} offset {r.offset} read after "
                                  f"{last[r.partition]}")
            last[r.partition] = r.offset
            if (r.partition, r.offset) in at and at[(r.partition, r.offset)] != (r.producer, r.seq):
                v["disagree"].append(f"{name}: two records at {r.partition}/{r.offset}")
            at[(r.partition, r.offset)] = (r.producer, r.seq)
        for (p, o), rec in at.items():
            where[rec].append((p, o))
        later_copies = set()
        for rec, places in where.items():
            if len(places) > 1:
                again = resent_copies(places, sessions)
                if again is None:
                    v["duplicate"].append(f"{name}: producer {rec[0]} seq {rec[1]} at {sorted(places)}")
                else:
                    later_copies.update(again)
                    if name == readers[0]:
                        resent.append(f"producer {rec[0]} seq {rec[1]} at "
                                      + ", ".join(f"{p}/{o} (session {sessions[(p, o)]})"
                                                  for p, o in sorted(places)))
        # One producer's records in one partition: sequences grow with offsets.
        seqs = defaultdict(list)
        for (p, o), (prod, seq) in sorted(at.items()):
            if (p, o) not in later_copies:
                seqs[(p, prod)].append((o, seq))
        for (p, prod), pairs in seqs.items():
            for (o1, s1), (o2, s2) in zip(pairs, pairs[1:]):
                if s2 <= s1:
                    v["order"].append(f"{name}: producer {prod} seq {s2} at {p}/{o2} after seq {s1} at {p}/{o1}")
        by_offset[name] = at

    sent = {(w.producer, w.seq) for w in history.acked} | set(history.unacked)
    for name in readers:
        for (p, o), rec in by_offset[name].items():
            if rec not in sent:
                v["phantom"].append(f"{name}: {p}/{o} holds producer {rec[0]} seq {rec[1]}, never sent")

    # Readers agree with each other.
    for a, b in zip(readers, readers[1:]):
        ka, kb = set(by_offset[a]), set(by_offset[b])
        for p, o in sorted(ka ^ kb)[:1000]:
            has = a if (p, o) in ka else b
            v["disagree"].append(f"{p}/{o} read by {has} only")
        for key in sorted(ka & kb):
            if by_offset[a][key] != by_offset[b][key]:
                v["disagree"].append(f"{key[0]}/{key[1]}: {a} {by_offset[a][key]} != {b} {by_offset[b][key]}")

    # Every acknowledged write is where its acknowledgement said, for every reader.
    seen_acks = defaultdict(list)
    for w in history.acked:
        seen_acks[(w.producer, w.seq)].append(w)
    for rec, ws in seen_acks.items():
        if len({(w.partition, w.offset) for w in ws}) > 1:
            v["duplicate"].append(f"producer {rec[0]} seq {rec[1]} acknowledged at "
                                  f"{sorted((w.partition, w.offset) for w in ws)}")
    held = {name: set(by_offset[name].values()) for name in readers}
    places = {name: {rec: p for (p, _), rec in by_offset[name].items()} for name in readers}
    for w in history.acked:
        for name in readers:
            if w.offset is None:
                p = places[name].get((w.producer, w.seq))
                if p is None:
                    v["lost"].append(f"{name}: producer {w.producer} seq {w.seq} acknowledged in "
                                     f"partition {w.partition} without an offset (t={w.at:.3f}) not read")
                elif p != w.partition:
                    v["misplaced"].append(f"{name}: producer {w.producer} seq {w.seq} acknowledged in "
                                          f"partition {w.partition} without an offset (t={w.at:.3f}) "
                                          f"read in partition {p}")
                continue
            got = by_offset[name].get((w.partition, w.offset))
            if got == (w.producer, w.seq):
                continue
            if got is None:
                if (w.producer, w.seq) not in held[name]:
                    v["lost"].append(f"{name}: producer {w.producer} seq {w.seq} acknowledged at "
                                     f"{w.partition}/{w.offset} (t={w.at:.3f}) not read")
                else:
                    v["misplaced"].append(f"{name}: producer {w.producer} seq {w.seq} acknowledged at "
                                          f"{w.partition}/{w.offset} (t={w.at:.3f}) read elsewhere")
            else:
                v["misplaced"].append(f"{name}: at {w.partition}/{w.offset} producer {w.producer} seq {w.seq} "
                                      f"was acknowledged (t={w.at:.3f}), producer {got[0]} seq {got[1]} read")

    stored_unacked = 0
    if readers:
        stored_unacked = sum(1 for rec in history.unacked if rec in held[readers[0]])
    for kind in ("lost", "misplaced", "duplicate", "order", "disagree", "phantom"):
        v.setdefault(kind, [])
    return Report(violations=dict(v), acked=len(history.acked), unacked=len(history.unacked),
                  unacked_stored=stored_unacked,
                  records={name: len(by_offset[name]) for name in readers}, resent=resent)

