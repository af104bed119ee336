"""Checks of what clients saw while faults ran, beside the final read of
`consistency.check`:

- consumer groups: members (confluent-kafka consumers) log every assignment
  with the generation it came with, and every offset commit (sent, answered,
  accepted or not) with its generation. Found:
  - `generation_conflict`: two members were given one partition at the
    same generation;
  - `commit_backwards`: an accepted commit of a partition stored a lower
    offset than a commit accepted before it was sent (each owner starts from
    the committed offset and only moves forward, and a member that lost the
    partition is refused: its generation is old);
  - `commit_lost`: a read of the committed offsets (during the run or at its
    end) below a commit accepted before the read was sent;
- `stale_watermark`: a high watermark asked for after a write to the
  partition was acknowledged, below that write's offset (a stale owner, or
  a proxy on a stale view, answered);
- `divergent_read`: a record a live consumer read that the final log does
  not hold at that offset (an owner served something that was not kept).
"""

from __future__ import annotations

import dataclasses
import struct
from collections import defaultdict


@dataclasses.dataclass(frozen=True, slots=True)
class Assign:
    member: str
    generation: int
    partitions: tuple
    at: float


@dataclasses.dataclass(frozen=True, slots=True)
class Commit:
    member: str
    generation: int
    offsets: tuple  # ((partition, offset), ...)
    sent: float
    answered: float
    ok: bool
    error: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class CommittedRead:
    """The committed offsets as read at `sent` (a fetch of the group's offsets)."""
    offsets: tuple  # ((partition, offset), ...): -1 or missing: none
    sent: float


@dataclasses.dataclass(frozen=True, slots=True)
class Watermark:
    partition: int
    high: int
    sent: float
    via: str = ""


@dataclasses.dataclass
class LiveHistory:
    assigns: list = dataclasses.field(default_factory=list)  # [Assign]
    commits: list = dataclasses.field(default_factory=list)  # [Commit]
    committed_reads: list = dataclasses.field(default_factory=list)  # [CommittedRead]
    watermarks: list = dataclasses.field(default_factory=list)  # [Watermark]
    live_reads: list = dataclasses.field(default_factory=list)  # [(member, consistency.Read)]

    def to_json(self):
        return {k: [dataclasses.asdict(x) if dataclasses.is_dataclass(x) else x for x in v]
                for k, v in dataclasses.asdict(self).items()}


KINDS = ("generation_conflict", "commit_backwards", "commit_lost", "stale_watermark", "divergent_read")


def parse_group_metadata(blob):
    """(generation, member id) from librdkafka's serialized consumer group
    metadata (`Consumer.consumer_group_metadata()`: b"CGMDv2:", a big-endian
    int32 generation, then the group id and the member id, each ending in a
    NUL); None if it is not that."""
    if not isinstance(blob, (bytes, bytearray)) or not blob.startswith(b"CGMDv2:") or len(blob) < 11:
        return None
    (generation,) = struct.unpack(">i", blob[7:11])
    rest = blob[11:].split(b"\0")
    member = rest[1].decode(errors="replace") if len(rest) > 1 else ""
    return generation, member


def check_live(h: LiveHistory, acked=(), final=None):
    """Violations by kind (see the module's docstring). `acked`: the
    acknowledged writes (`consistency.Write`); `final`: {(partition, offset):
    (producer, seq)} as the final reader read the log."""
    v = {k: [] for k in KINDS}

    owners = defaultdict(set)
    for a in h.assigns:
        for p in a.partitions:
            owners[(a.generation, p)].add(a.member)
    for (gen, p), members in sorted(owners.items()):
        if len(members) > 1:
            v["generation_conflict"].append(f"partition {p} given to {sorted(members)} at generation {gen}")

    # The highest accepted commit of each partition, as of any time: commits
    # answered before it, in answer order.
    accepted = sorted((c for c in h.commits if c.ok), key=lambda c: c.answered)

    def floors(events):
        """For each (time, item) in time order: {partition: (offset, commit)}
        of the commits accepted before that time."""
        best, i = {}, 0
        for t, item in sorted(events, key=lambda e: e[0]):
            while i < len(accepted) and accepted[i].answered < t:
                for p, off in accepted[i].offsets:
                    if off > best.get(p, (-1, None))[0]:
                        best[p] = (off, accepted[i])
                i += 1
            yield item, best

    for c, best in floors((c.sent, c) for c in accepted):
        for p, off in c.offsets:
            floor, earlier = best.get(p, (-1, None))
            if off < floor:
                v["commit_backwards"].append(
                    f"partition {p}: {c.member} committed {off} (generation {c.generation}, sent "
                    f"t={c.sent:.3f}) after {earlier.member} committed {floor} (generation "
                    f"{earlier.generation}, accepted t={earlier.answered:.3f})")

    for r, best in floors((r.sent, r) for r in h.committed_reads):
        read = dict(r.offsets)
        for p, (off, _) in sorted(best.items()):
            if read.get(p, -1) < off:
                v["commit_lost"].append(f"partition {p}: committed offset read as {read.get(p, -1)} at "
                                        f"t={r.sent:.3f}, after a commit of {off} was accepted")

    by_partition = defaultdict(list)
    for w in acked:
        if w.offset is not None:
            by_partition[w.partition].append((w.at, w.offset))
    for ws in by_partition.values():
        ws.sort()
    for m in h.watermarks:
        best = -1
        for at, off in by_partition.get(m.partition, ()):
            if at >= m.sent:
                break
            best = max(best, off)
        if best >= m.high:
            v["stale_watermark"].append(f"partition {m.partition}: high watermark {m.high} via {m.via} asked "
                                        f"at t={m.sent:.3f}, after offset {best} was acknowledged")

    if final is not None:
        for member, r in h.live_reads:
            got = final.get((r.partition, r.offset))
            if got != (r.producer, r.seq):
                v["divergent_read"].append(f"{member} read producer {r.producer} seq {r.seq} at "
                                           f"{r.partition}/{r.offset}; the log holds {got}")
    return v
