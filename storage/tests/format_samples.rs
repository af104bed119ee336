//! Sample files of every format Floe writes to the object store
//! ([`floe_types::format_samples`]): each release's samples read, with the
//! same contents, and this version writes exactly its own.
//! `FLOE_BLESS_FORMATS=1 cargo test -p floe-storage --test format_samples`
//! writes this version's samples.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use floe_storage::batch::{Compression, set_base_offset};
use floe_storage::control::{ControlType, Marker, marker_batch, read_marker};
use floe_storage::delayed::{DelayedRecord, Producer, delayed_batch, read_delayed};
use floe_storage::records::{BatchBuilder, DecodeLimits, RecordHeader, RecordSpec, decode_records};
use floe_storage::segment::{OffsetIndex, SegmentBuilder, TimeIndex};
use floe_storage::timers::{self, TimerEntry};
use floe_storage::wal::{WalBuilder, WalFooter};
use floe_storage::{PartitionKey, TopicId};

/// [`floe_types::format_samples::check`] for this crate's version.
fn check(name: &str, written: &[u8], read: impl Fn(&str, Bytes)) {
    let root = floe_types::format_samples::root(env!("CARGO_MANIFEST_DIR"));
    floe_types::format_samples::check(&root, env!("CARGO_PKG_VERSION"), name, written, |r, b| {
        read(r, Bytes::from(b))
    });
}

fn key() -> PartitionKey {
    PartitionKey::new(TopicId(uuid::Uuid::from_bytes([0x5a; 16])), 3)
}

const T0: i64 = 1_767_225_600_000; // 2026-01-01

/// Two batches at offsets 0..=2 and 3..=4: plain records with headers and
/// a null key, then an idempotent producer's (uncompressed: a codec's output is not
/// Floe's format, and may change with the codec's crate).
fn batches() -> Bytes {
    let mut plain = BatchBuilder::new(0, T0);
    for i in 0..3u8 {
        let mut r = RecordSpec::new(
            (i != 1).then(|| format!("k{i}").into_bytes()),
            Some(format!("value {i}").into_bytes()),
            i64::from(i),
        );
        r.headers = vec![(b"h".to_vec(), Some(vec![i]))];
        plain.push(r);
    }
    let mut idem = BatchBuilder::new(0, T0 + 10).producer(1000, 2, 7, false);
    idem.push(RecordSpec::new(Some(b"k3".to_vec()), None, 0));
    idem.push(RecordSpec::new(Some(b"k4".to_vec()), Some(vec![4; 64]), 1));
    let mut second = idem.build(Compression::None).unwrap().to_vec();
    set_base_offset(&mut second, 3).unwrap();
    let mut out = plain.build(Compression::None).unwrap().to_vec();
    out.extend_from_slice(&second);
    Bytes::from(out)
}

/// What [`batches`] hold: (offset, timestamp, key, value).
type Row = (i64, i64, Option<Vec<u8>>, Option<Vec<u8>>);

fn expected_rows() -> Vec<Row> {
    vec![
        (0, T0, Some(b"k0".to_vec()), Some(b"value 0".to_vec())),
        (1, T0 + 1, None, Some(b"value 1".to_vec())),
        (2, T0 + 2, Some(b"k2".to_vec()), Some(b"value 2".to_vec())),
        (3, T0 + 10, Some(b"k3".to_vec()), None),
        (4, T0 + 11, Some(b"k4".to_vec()), Some(vec![4; 64])),
    ]
}

fn rows_of(log: &Bytes) -> Vec<Row> {
    let mut out = Vec::new();
    for item in floe_storage::batch::BatchIter::new(log, usize::MAX) {
        let (at, view) = item.unwrap();
        let batch = log.slice(at..at + view.size());
        for r in decode_records(&batch, 1 << 20).unwrap() {
            out.push((
                r.offset,
                r.timestamp,
                r.key.map(|k| k.to_vec()),
                r.value.map(|v| v.to_vec()),
            ));
        }
    }
    out
}

#[test]
fn wal_objects_of_every_release_read() {
    let mut b = WalBuilder::new();
    b.append(key(), batches()).unwrap();
    let other = PartitionKey::new(TopicId(uuid::Uuid::from_bytes([0x11; 16])), 0);
    b.append(other, batches()).unwrap();
    let object = b.finish();
    let written: Vec<u8> = object.chunks.iter().flat_map(|c| c.to_vec()).collect();
    check("wal.bin", &written, |release, bytes| {
        let size = bytes.len() as u64;
        let footer = WalFooter::parse(&bytes, size).unwrap_or_else(|e| panic!("{release}: {e}"));
        let entry = footer
            .entries
            .iter()
            .find(|e| e.partition == key())
            .unwrap();
        assert_eq!(
            (entry.first_offset.0, entry.last_offset.0),
            (0, 4),
            "{release}"
        );
        let data =
            bytes.slice(entry.data_offset as usize..(entry.data_offset + entry.data_len) as usize);
        assert_eq!(crc32c::crc32c(&data), entry.data_crc, "{release}");
        assert_eq!(rows_of(&data), expected_rows(), "{release}");
        assert_eq!(footer.entries.len(), 2, "{release}");
    });
}

#[test]
fn segments_and_their_indexes_of_every_release_read() {
    let mut b = SegmentBuilder::new(64);
    b.append(batches()).unwrap();
    let seg = b.finish().unwrap();
    let log: Vec<u8> = seg.log.iter().flat_map(|c| c.to_vec()).collect();
    check("segment.log", &log, |release, bytes| {
        assert_eq!(rows_of(&bytes), expected_rows(), "{release}");
    });
    check("segment.index", &seg.index, |release, bytes| {
        let index = OffsetIndex::parse(bytes).unwrap_or_else(|e| panic!("{release}: {e}"));
        index.validate(seg.log_size).unwrap();
        assert_eq!(index.base_offset(), 0, "{release}");
        assert!(!index.is_empty(), "{release}");
        assert_eq!(index.lookup(0), 0, "{release}");
    });
    check("segment.timeindex", &seg.timeindex, |release, bytes| {
        let index = TimeIndex::parse(bytes).unwrap_or_else(|e| panic!("{release}: {e}"));
        index.validate(seg.log_size).unwrap();
        assert_eq!(index.base_offset(), 0, "{release}");
        assert_eq!(index.lookup(T0), 0, "{release}");
    });
}

#[test]
fn timer_buckets_of_every_release_read() {
    let entries: Vec<TimerEntry> = (0..300)
        .map(|i| TimerEntry {
            due_ms: T0 as u64 + i * 1000,
            offset: i as i64 * 3,
        })
        .collect();
    let written = timers::encode(&entries).unwrap();
    check("timers.bin", &written, |release, bytes| {
        assert_eq!(
            timers::decode(&bytes).unwrap_or_else(|e| panic!("{release}: {e}")),
            entries,
            "{release}"
        );
    });
}

#[test]
fn transaction_markers_and_delayed_batches_of_every_release_read() {
    let marker = Marker {
        kind: ControlType::Commit,
        producer_id: 1000,
        producer_epoch: 2,
        coordinator_epoch: 9,
    };
    let written = marker_batch(&marker, T0).unwrap();
    check("marker.batch", &written, |release, bytes| {
        assert_eq!(read_marker(&bytes).unwrap(), Some(marker), "{release}");
    });
    let held = vec![
        DelayedRecord {
            due_ms: T0 as u64 + 60_000,
            timestamp: T0,
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"later")),
            headers: vec![RecordHeader {
                key: Bytes::from_static(b"h"),
                value: None,
            }],
        },
        DelayedRecord {
            due_ms: T0 as u64 + 120_000,
            timestamp: T0 + 1,
            key: None,
            value: None,
            headers: Vec::new(),
        },
    ];
    let producer = Producer {
        id: 1000,
        epoch: 2,
        base_sequence: 5,
    };
    let written = delayed_batch(producer, T0, &held, Compression::None).unwrap();
    check("delayed.batch", &written, |release, bytes| {
        let got = read_delayed(&bytes, DecodeLimits::DEFAULT)
            .unwrap_or_else(|e| panic!("{release}: {e}"))
            .unwrap_or_else(|| panic!("{release}: not a delayed batch"));
        let records: Vec<DelayedRecord> = got.into_iter().map(|(_, r)| r).collect();
        assert_eq!(records, held, "{release}");
    });
}
