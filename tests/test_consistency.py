"""The consistency checker of the reliability suite (tests/consistency.py),
fed good and bad histories: each kind of violation must be found."""

from consistency import History, Read, Write, check, decode, encode


def good():
    """Two producers, two partitions, two readers that agree."""
    acked = [Write(1, 0, 0, 0), Write(2, 0, 0, 1), Write(1, 1, 1, 0), Write(1, 2, 0, 2), Write(2, 1, 1, 1)]
    reads = [Read(0, 0, 1, 0), Read(0, 1, 2, 0), Read(0, 2, 1, 2), Read(1, 0, 1, 1), Read(1, 1, 2, 1)]
    return History(acked=acked, unacked={(2, 2)}, reads={"a": list(reads), "b": list(reads)})


def kinds(report):
    return {k for k, msgs in report.violations.items() if msgs}


def test_a_good_history_passes():
    r = check(good())
    assert r.ok, r.summary()
    assert r.acked == 5 and r.records == {"a": 5, "b": 5}


def test_an_unacknowledged_write_may_be_stored_once():
    h = good()
    for name in h.reads:
        h.reads[name].append(Read(1, 2, 2, 2))
    r = check(h)
    assert r.ok, r.summary()
    assert r.unacked_stored == 1


def test_a_lost_acknowledged_write_is_found():
    h = good()
    for name in h.reads:
        h.reads[name] = [x for x in h.reads[name] if (x.producer, x.seq) != (1, 2)]
    r = check(h)
    assert kinds(r) == {"lost"}
    assert "producer 1 seq 2" in r.violations["lost"][0]


def test_a_record_at_another_offset_than_acknowledged_is_found():
    h = good()
    h.acked[0] = Write(1, 0, 0, 5)
    assert "misplaced" in kinds(check(h))


def test_a_write_acknowledged_without_an_offset_must_be_read_once_in_its_partition():
    # librdkafka's implicit acknowledgement: offset -1, the partition known.
    h = good()
    h.acked[3] = Write(1, 2, 0, None)
    r = check(h)
    assert r.ok, r.summary()
    h.acked[3] = Write(1, 2, 1, None)
    r = check(h)
    assert kinds(r) == {"misplaced"}, r.summary()
    assert "without an offset" in r.violations["misplaced"][0]
    h.acked[3] = Write(1, 2, 0, None)
    for name in h.reads:
        h.reads[name] = [x for x in h.reads[name] if (x.producer, x.seq) != (1, 2)]
    assert kinds(check(h)) == {"lost"}


def test_a_duplicate_is_found():
    h = good()
    for name in h.reads:
        h.reads[name].append(Read(0, 3, 1, 1))
    r = check(h)
    assert "duplicate" in kinds(r), r.summary()


def test_an_unacknowledged_write_stored_twice_is_a_duplicate():
    h = good()
    for name in h.reads:
        h.reads[name] += [Read(1, 2, 2, 2), Read(1, 3, 2, 2)]
    assert "duplicate" in kinds(check(h))


def test_offsets_going_back_are_found():
    h = good()
    h.reads["a"] = [Read(0, 1, 2, 0), Read(0, 0, 1, 0)] + h.reads["a"][2:]
    assert "order" in kinds(check(h))


def test_a_producer_reordered_in_a_partition_is_found():
    h = good()
    # Producer 1's seq 2 stored before its seq 0 in partition 0.
    h.acked = [Write(1, 2, 0, 0), Write(2, 0, 0, 1), Write(1, 1, 1, 0), Write(1, 0, 0, 2), Write(2, 1, 1, 1)]
    reads = [Read(0, 0, 1, 2), Read(0, 1, 2, 0), Read(0, 2, 1, 0), Read(1, 0, 1, 1), Read(1, 1, 2, 1)]
    h.reads = {"a": list(reads), "b": list(reads)}
    r = check(h)
    assert kinds(r) == {"order"}, r.summary()


def test_readers_that_disagree_are_found():
    h = good()
    h.reads["b"] = h.reads["b"][:-1] + [Read(1, 1, 2, 2)]
    r = check(h)
    assert "disagree" in kinds(r)


def test_a_reader_that_misses_the_end_is_found():
    h = good()
    h.reads["b"] = h.reads["b"][:-1]
    r = check(h)
    assert {"disagree", "lost"} <= kinds(r)


def test_a_record_nobody_wrote_is_found():
    h = good()
    for name in h.reads:
        h.reads[name].append(Read(1, 2, 9, 9))
    assert kinds(check(h)) == {"phantom"}


def test_values_round_trip():
    assert decode(encode(3, 12345)) == (3, 12345)
    assert decode(b"garbage") is None
    assert decode(None) is None


def with_sessions(reads, sessions):
    """`reads` with the producer session of each (partition, offset) in `sessions`."""
    return [Read(r.partition, r.offset, r.producer, r.seq, sessions.get((r.partition, r.offset))) for r in reads]


def test_a_record_resent_under_a_new_epoch_is_reported_not_failed():
    # Producer 1's seq 2 stored at 0/2 under epoch 0, and again at 0/4
    # (after producer 2's seq 2) under epoch 1 from sequence 0: librdkafka
    # re-sent it after an epoch bump. Only one reader saw the sessions.
    h = good()
    sessions = {(0, 0): (7, 0, 0), (0, 2): (7, 0, 1), (0, 3): (8, 0, 1), (0, 4): (7, 1, 0)}
    for name in h.reads:
        h.reads[name] += [Read(0, 3, 2, 2), Read(0, 4, 1, 2)]
    h.reads["b"] = with_sessions(h.reads["b"], sessions)
    h.acked[3] = Write(1, 2, 0, 4)
    r = check(h)
    assert r.ok, r.summary()
    assert len(r.resent) == 1 and "0/2 (session (7, 0, 1))" in r.resent[0], r.resent
    assert "resent under a new producer epoch" in r.summary()


def test_a_record_stored_twice_in_one_session_is_a_duplicate():
    # The same batch (producer id 7, epoch 0, sequence 1) stored twice: the
    # broker did not recognise the retry.
    h = good()
    sessions = {(0, 2): (7, 0, 1), (0, 3): (7, 0, 1)}
    for name in h.reads:
        h.reads[name] = with_sessions(h.reads[name] + [Read(0, 3, 1, 2)], sessions)
    r = check(h)
    assert "duplicate" in kinds(r), r.summary()
    assert not r.resent


def test_a_double_whose_sessions_are_unknown_is_a_duplicate():
    h = good()
    for name in h.reads:
        h.reads[name] = with_sessions(h.reads[name] + [Read(0, 3, 1, 2)], {(0, 2): (7, 0, 1)})
    assert "duplicate" in kinds(check(h))


def test_sessions_of_records_from_noted_batches():
    from s3_cluster import session_at

    batches = [(0, (4, 7, 0, 10)), (5, (5, -1, -1, -1)), (6, (9, 7, 1, 0))]
    assert session_at(batches, 0) == (7, 0, 10)
    assert session_at(batches, 4) == (7, 0, 14)
    assert session_at(batches, 5) is None  # a batch without a producer sequence
    assert session_at(batches, 8) == (7, 1, 2)
    assert session_at(batches, 10) is None
    assert session_at([], 3) is None
