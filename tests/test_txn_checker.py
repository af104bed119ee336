"""The transaction checker (tests/txn_checker.py), fed good and bad
histories: each kind of violation must be found, and nothing in a good
history may be reported."""

from txn_checker import History, Read, Txn, check, check_transform, encode


def good():
    """Three transactions of producer 1 (committed, aborted, unknown and
    committed in the end) and one of producer 2; two readers that agree."""
    txns = [Txn(1, 0, [(0, 0), (1, 1), (0, 2)], "committed"),
            Txn(1, 1, [(0, 0), (1, 1)], "aborted"),
            Txn(1, 2, [(1, 0)], "unknown"),
            Txn(2, 0, [(0, 0), (1, 1)], "committed")]
    reads = [Read(0, 0, encode(1, 0, 0)), Read(0, 2, encode(1, 0, 2)), Read(0, 5, encode(2, 0, 0)),
             Read(1, 0, encode(1, 0, 1)), Read(1, 4, encode(1, 2, 0)), Read(1, 6, encode(2, 0, 1))]
    return History(txns=txns, reads={"a": list(reads), "b": list(reads)})


def kinds(report):
    return {k for k, msgs in report.violations.items() if msgs}


def without(h, *values):
    for name in h.reads:
        h.reads[name] = [r for r in h.reads[name] if r.value not in values]
    return h


def test_a_good_history_passes():
    r = check(good())
    assert r.ok, r.summary()
    assert r.txns == {"committed": 2, "aborted": 1, "unknown": 1}
    assert r.unknown_visible == 1 and r.records == {"a": 6, "b": 6}


def test_an_unknown_transaction_may_be_invisible_as_a_whole():
    r = check(without(good(), encode(1, 2, 0)))
    assert r.ok, r.summary()
    assert r.unknown_visible == 0


def test_an_aborted_record_read_is_found():
    h = good()
    for name in h.reads:
        h.reads[name].append(Read(1, 9, encode(1, 1, 1)))
    r = check(h)
    assert kinds(r) == {"aborted_read"}
    assert "txn 1/1 (aborted" in r.violations["aborted_read"][0]


def test_a_torn_committed_transaction_is_found():
    r = check(without(good(), encode(1, 0, 2)))
    assert kinds(r) == {"torn"}
    assert "2 of 3 visible" in r.violations["torn"][0] and "[2]" in r.violations["torn"][0]


def test_a_torn_unknown_transaction_is_found():
    h = good()
    h.txns[2].records.append((0, 1))  # sent, never seen: half of it visible
    r = check(h)
    assert kinds(r) == {"torn"}


def test_a_lost_committed_transaction_is_found():
    r = check(without(good(), encode(2, 0, 0), encode(2, 0, 1)))
    assert kinds(r) == {"lost"}
    assert "txn 2/0 (committed, 2 records): none visible" in r.violations["lost"][0]


def test_a_record_seen_twice_is_found():
    h = good()
    for name in h.reads:
        h.reads[name].append(Read(0, 7, encode(2, 0, 0)))
    r = check(h)
    assert kinds(r) == {"duplicate"}


def test_offsets_going_back_and_records_out_of_send_order_are_found():
    h = good()
    h.reads["a"] = [Read(0, 0, encode(1, 0, 2)), Read(0, 2, encode(1, 0, 0)), Read(0, 1, encode(2, 0, 0)),
                    Read(1, 0, encode(1, 0, 1)), Read(1, 4, encode(1, 2, 0)), Read(1, 6, encode(2, 0, 1))]
    r = check(History(txns=h.txns, reads={"a": h.reads["a"]}))
    assert kinds(r) == {"order"}
    assert len(r.violations["order"]) == 2  # the offset back, and 1/0's records in partition 0


def test_readers_that_disagree_are_found():
    h = good()
    h.reads["b"] = [r if r.offset != 5 else Read(0, 5, encode(2, 0, 1)) for r in h.reads["b"]]
    h.reads["b"] = [r for r in h.reads["b"] if r.offset != 6]  # so that "b" holds each record once
    r = check(h)
    assert "disagree" in kinds(r)


def test_a_phantom_record_is_found():
    h = good()
    for name in h.reads:
        h.reads[name] += [Read(0, 8, b"not ours"), Read(0, 9, encode(3, 0, 0)), Read(1, 9, encode(1, 0, 0))]
    r = check(h)
    # the last one: a record of a real transaction in a partition it was never sent to
    assert kinds(r) == {"phantom"} and len(r.violations["phantom"]) == 6


def test_the_transform_check_finds_missing_duplicate_and_ahead_outputs():
    inputs = [(0, 0, b"a"), (0, 1, b"b"), (0, 2, b"c"), (1, 0, b"d")]
    ok = check_transform({0: 2, 1: 1}, inputs, [(0, b"A"), (0, b"B"), (1, b"D")])
    assert not any(ok.values()), ok
    bad = check_transform({0: 2, 1: 1}, inputs, [(0, b"A"), (0, b"A"), (0, b"C"), (1, b"Z")])
    assert {k for k, m in bad.items() if m} == {"missing", "duplicate", "ahead"}
    assert len(bad["missing"]) == 2 and len(bad["ahead"]) == 2
