use super::*;
use floe_storage::delayed::{DelayedRecord, Producer, delayed_batch};
use floe_storage::records::{BatchBuilder, RecordSpec};

fn entry(due: u64) -> DelayedRecord {
    DelayedRecord {
        due_ms: due,
        timestamp: 1,
        key: None,
        value: Some(Bytes::from_static(b"v")),
        headers: Vec::new(),
    }
}

/// A delayed batch at `base` with one entry per due time.
fn delayed_at(base: i64, dues: &[u64]) -> Bytes {
    let records: Vec<_> = dues.iter().map(|d| entry(*d)).collect();
    let b = delayed_batch(Producer::NONE, 1, &records, Compression::None).unwrap();
    at(b, base)
}

fn at(b: Bytes, base: i64) -> Bytes {
    let mut m = bytes::BytesMut::from(&b[..]);
    floe_storage::batch::set_base_offset(&mut m, base).unwrap();
    m.freeze()
}

/// The scheduler's re-append at `base` of the entries `ids`.
fn reappend_at(base: i64, ids: &[EntryId]) -> Bytes {
    let mut b = BatchBuilder::new(0, 1);
    for id in ids {
        let mut r = RecordSpec::new(None, Some(b"v".to_vec()), 0);
        r.headers = vec![(
            DELAYED_FROM_HEADER.as_bytes().to_vec(),
            Some(id.header_value().into_bytes()),
        )];
        b.push(r);
    }
    at(b.build(Compression::None).unwrap(), base)
}

fn plain_at(base: i64) -> Bytes {
    let mut b = BatchBuilder::new(0, 1);
    b.push(RecordSpec::new(None, Some(b"x".to_vec()), 0));
    at(b.build(Compression::None).unwrap(), base)
}

fn id(batch: i64, index: u32) -> EntryId {
    EntryId { batch, index }
}

#[test]
fn entries_less_their_reappends_are_pending_and_the_cursor_stays_below_them() {
    let mut s = Schedule::new(100, 10);
    // A batch ending before the cursor is passed over.
    s.feed(&delayed_at(5, &[1])).unwrap();
    assert_eq!(s.kept(), 0);
    s.feed(&delayed_at(10, &[300, 100])).unwrap();
    s.feed(&plain_at(12)).unwrap();
    s.feed(&delayed_at(13, &[200])).unwrap();
    let fed = s.feed(&reappend_at(14, &[id(10, 1)])).unwrap();
    assert_eq!(fed.reappends, 1);
    assert_eq!(s.read_to(), 15);
    assert_eq!(s.kept(), 2);
    assert_eq!(s.next_due(), Some(200));
    assert_eq!(s.due(250, 10), vec![id(13, 0)]);
    assert_eq!(s.due(1_000, 10), vec![id(13, 0), id(10, 0)]);
    assert_eq!(s.cursor(), 10);
    s.done(id(10, 0));
    assert_eq!(s.cursor(), 13);
    s.done(id(13, 0));
    assert_eq!(s.cursor(), 15, "nothing pending: the end");
    assert_eq!(s.next_due(), None);
}

#[test]
fn once_following_plain_batches_are_passed_over() {
    let mut s = Schedule::new(100, 0);
    s.feed(&delayed_at(0, &[100])).unwrap();
    s.follow();
    let fed = s.feed(&reappend_at(1, &[id(0, 0)])).unwrap();
    assert_eq!(fed, Fed::default());
    assert_eq!(
        (s.kept(), s.read_to()),
        (1, 2),
        "forgotten by the scheduler itself"
    );
    s.feed(&delayed_at(2, &[50])).unwrap();
    assert_eq!(s.due(1_000, 10), vec![id(2, 0), id(0, 0)]);
}

#[test]
fn a_client_record_naming_an_entry_does_not_cancel_it() {
    let mut s = Schedule::new(100, 0);
    s.feed(&delayed_at(0, &[100])).unwrap();
    let mut b = BatchBuilder::new(0, 1).producer(7, 0, 0, false);
    let mut r = RecordSpec::new(None, None, 0);
    r.headers = vec![(
        DELAYED_FROM_HEADER.as_bytes().to_vec(),
        Some(b"0.0".to_vec()),
    )];
    b.push(r);
    s.feed(&at(b.build(Compression::None).unwrap(), 1)).unwrap();
    assert_eq!(s.kept(), 1);
}

#[test]
fn the_bound_keeps_the_earliest_due_and_remembers_the_rest() {
    let mut s = Schedule::new(2, 0);
    s.feed(&delayed_at(0, &[500, 100])).unwrap();
    s.feed(&delayed_at(2, &[50, 900])).unwrap();
    assert_eq!(s.kept(), 2);
    assert_eq!(s.due(10_000, 10), vec![id(2, 0), id(0, 1)]);
    let left = s.left_out().unwrap();
    assert_eq!(left.earliest_due, 500);
    assert_eq!(left.lowest_batch, 0);
    assert_eq!(s.cursor(), 0, "the cursor never passes an entry left out");
    assert!(!s.needs_rescan(499));
    assert!(s.needs_rescan(500));
    s.done(id(2, 0));
    s.done(id(0, 1));
    assert!(s.needs_rescan(0), "the kept ones ran out");
    // Read again from the cursor after the re-appends: the entries done
    // took the room until their re-appends were read, so nothing is due
    // and the reading must be done again; with twice the room (what the
    // scheduler does then) the pending one is found.
    let read = |limit| {
        let mut again = Schedule::new(limit, s.cursor());
        again.feed(&delayed_at(0, &[500, 100])).unwrap();
        again.feed(&delayed_at(2, &[50, 900])).unwrap();
        again.feed(&reappend_at(4, &[id(2, 0), id(0, 1)])).unwrap();
        again
    };
    let same = read(2);
    assert!(same.due(10_000, 10).is_empty() && same.needs_rescan(10_000));
    let larger = read(4);
    assert_eq!(larger.due(10_000, 10), vec![id(0, 0), id(2, 1)]);
    assert!(larger.left_out().is_none());
    assert!(!larger.needs_rescan(10_000));
}

#[test]
fn entry_ids_read_back_from_their_header() {
    let i = id(123, 4);
    assert_eq!(EntryId::parse(i.header_value().as_bytes()), Some(i));
    for bad in [&b""[..], b"1", b"1.", b".2", b"a.b", b"1.-2", b"1.2.3"] {
        assert_eq!(EntryId::parse(bad), None, "{bad:?}");
    }
}
