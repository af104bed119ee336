"""The live checks of the fault scenarios (tests/live_checks.py), fed good
and bad histories: each kind of violation must be found, and a good
history must pass."""

import struct

from consistency import Read, Write
from live_checks import (Assign, Commit, CommittedRead, LiveHistory, Watermark, check_live,
                         parse_group_metadata)


def kinds(v):
    return {k for k, msgs in v.items() if msgs}


def good():
    """Two members; partition 0 moves from a to b at generation 2; commits
    only move forward; the committed offsets read back; fresh watermarks."""
    h = LiveHistory()
    h.assigns = [Assign("a", 1, (0, 1), 1.0), Assign("a", 2, (1,), 5.0), Assign("b", 2, (0,), 5.1)]
    h.commits = [Commit("a", 1, ((0, 10), (1, 4)), 2.0, 2.1, True),
                 Commit("a", 1, ((0, 12),), 4.0, 4.1, True),
                 Commit("b", 2, ((0, 12),), 6.0, 6.1, True),
                 Commit("a", 1, ((0, 3),), 6.5, 6.6, False, "ILLEGAL_GENERATION"),  # refused: fine
                 Commit("b", 2, ((0, 20),), 7.0, 7.1, True)]
    h.committed_reads = [CommittedRead(((0, 12), (1, 4)), 6.05), CommittedRead(((0, 20), (1, 4)), 8.0)]
    h.watermarks = [Watermark(0, 2, 3.0), Watermark(0, 1, 1.5)]
    h.live_reads = [("a", Read(0, 0, 1, 0)), ("b", Read(0, 1, 1, 1))]
    return h


ACKED = [Write(1, 0, 0, 0, at=1.0), Write(1, 1, 0, 1, at=2.0)]
FINAL = {(0, 0): (1, 0), (0, 1): (1, 1)}


def test_a_good_history_passes():
    v = check_live(good(), ACKED, FINAL)
    assert not kinds(v), v


def test_two_members_owning_a_partition_at_one_generation_are_found():
    h = good()
    h.assigns.append(Assign("c", 2, (0,), 5.2))
    v = check_live(h, ACKED, FINAL)
    assert kinds(v) == {"generation_conflict"}
    assert "['b', 'c']" in v["generation_conflict"][0]


def test_the_same_partition_at_two_generations_is_no_conflict():
    h = good()
    h.assigns.append(Assign("b", 3, (0, 1), 9.0))
    assert not kinds(check_live(h, ACKED, FINAL))


def test_an_accepted_commit_going_backwards_is_found():
    h = good()
    # A zombie's commit accepted after a higher one: the offset moved back.
    h.commits.append(Commit("a", 1, ((0, 15),), 7.5, 7.6, True))
    v = check_live(h, ACKED, FINAL)
    assert "commit_backwards" in kinds(v)
    assert "committed 15" in v["commit_backwards"][0] and "committed 20" in v["commit_backwards"][0]


def test_commits_in_flight_together_may_land_in_either_order():
    h = good()
    # Sent before the commit of 20 was answered: not ordered after it.
    h.commits.append(Commit("b", 2, ((0, 18),), 7.05, 7.2, True))
    h.committed_reads = []
    assert not kinds(check_live(h, ACKED, FINAL))


def test_a_committed_offset_read_below_an_accepted_commit_is_found():
    h = good()
    h.committed_reads.append(CommittedRead(((0, 12),), 9.0))
    v = check_live(h, ACKED, FINAL)
    assert kinds(v) == {"commit_lost"}
    # Partition 1 missing altogether counts too.
    assert any("partition 1" in m for m in v["commit_lost"])


def test_a_watermark_behind_an_acknowledged_write_is_found():
    h = good()
    h.watermarks.append(Watermark(0, 1, 2.5, via="proxy2"))
    v = check_live(h, ACKED, FINAL)
    assert kinds(v) == {"stale_watermark"}
    assert "proxy2" in v["stale_watermark"][0]


def test_a_watermark_asked_before_the_acknowledgement_may_be_behind():
    h = good()
    h.watermarks.append(Watermark(0, 1, 1.9))
    assert not kinds(check_live(h, ACKED, FINAL))


def test_a_live_read_the_log_does_not_hold_is_found():
    h = good()
    h.live_reads.append(("b", Read(0, 2, 1, 7)))
    v = check_live(h, ACKED, FINAL)
    assert kinds(v) == {"divergent_read"}
    h.live_reads[-1] = ("b", Read(0, 1, 1, 7))
    assert kinds(check_live(h, ACKED, FINAL)) == {"divergent_read"}


def test_group_metadata_is_parsed():
    blob = b"CGMDv2:" + struct.pack(">i", 7) + b"grp\0rdkafka-1234\0\x01"
    assert parse_group_metadata(blob) == (7, "rdkafka-1234")
    assert parse_group_metadata(b"CGMDv2:" + struct.pack(">i", -1) + b"g\0\0\x01") == (-1, "")
    assert parse_group_metadata(b"nonsense") is None
    assert parse_group_metadata(None) is None


def test_the_history_serializes():
    import json
    json.dumps(good().to_json())
