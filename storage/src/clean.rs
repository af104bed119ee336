//! Log compaction's work on records: a capped map from key to the offset of
//! its latest record, and the rewriting of a batch that keeps only the
//! records that must stay.
//!
//! A batch keeps its base offset, last offset delta (so its last offset),
//! partition leader epoch, producer id, epoch and base sequence, codec and
//! the other attribute bits; its records keep their offsets and timestamps.
//! Only the records dropped are gone: offsets have gaps, as in a compacted
//! Kafka log. A batch with a tombstone (a record with a null value) that
//! stays gets a delete horizon (attribute bit 6, the horizon in the first
//! timestamp field, record timestamps re-encoded against it, as Kafka's
//! KIP-534); its tombstones go at the first cleaning after the horizon.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

use bytes::{BufMut, Bytes, BytesMut};

use crate::batch::{
    ATTRIBUTES_AT, BatchError, BatchView, CRC_AT, DELETE_HORIZON_BIT, FIRST_TIMESTAMP_AT,
    HEADER_LEN, LENGTH_AT, LOG_OVERHEAD, MAX_TIMESTAMP_AT, RECORD_COUNT_AT, TimestampType,
};
use crate::records::{DEFAULT_MAX_DECOMPRESSED, Record, compress, decode_records, put_varlong};

/// Memory one entry of a [`KeyMap`] is counted at: a slot is 25 bytes (a
/// 16-byte key hash, an 8-byte offset, a control byte) and the table is
/// 44% (just after it doubled) to 87% full, so a key takes 29 to 57 bytes.
pub const KEY_MAP_ENTRY_BYTES: u64 = 40;

/// The latest offset of each key seen, for keys hashed to 128 bits (two
/// independent 64-bit SipHashes: a collision, which could drop a key's
/// latest record, is about as likely as Kafka's MD5 one). Holds at most
/// `cap` keys; the offsets it covers are those below [`KeyMap::end`].
#[derive(Debug)]
pub struct KeyMap {
    map: HashMap<u128, i64>,
    cap: usize,
    hashers: (std::hash::RandomState, std::hash::RandomState),
    end: Option<i64>,
}

impl KeyMap {
    /// A map of at most `cap` keys (at least one).
    pub fn new(cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            cap: cap.max(1),
            hashers: (Default::default(), Default::default()),
            end: None,
        }
    }

    /// A map that fits in `bytes` of memory.
    pub fn with_budget(bytes: u64) -> Self {
        Self::new(usize::try_from(bytes / KEY_MAP_ENTRY_BYTES).unwrap_or(usize::MAX))
    }

    fn hash(&self, key: &[u8]) -> u128 {
        let a = self.hashers.0.hash_one(key);
        let b = self.hashers.1.hash_one(key);
        (u128::from(a) << 64) | u128::from(b)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Offsets below this are covered (`None`: nothing added yet).
    pub fn end(&self) -> Option<i64> {
        self.end
    }

    /// Marks offsets below `to` as covered (the section a previous cleaning
    /// left clean: its keys have no later record the map would not hold).
    pub fn cover_to(&mut self, to: i64) {
        self.end = Some(self.end.map_or(to, |e| e.max(to)));
    }

    /// The latest offset recorded for `key`.
    pub fn latest(&self, key: &[u8]) -> Option<i64> {
        self.map.get(&self.hash(key)).copied()
    }

    /// Records the keyed records of one batch. Returns `false`, recording
    /// nothing, if its new keys do not fit (unless the map is empty: a
    /// batch always fits an empty map, so every pass moves on). Control
    /// batches and transactional batches add no key (a transaction may be
    /// aborted: its records must not make an earlier value disappear), but
    /// are covered.
    pub fn add_batch(&mut self, batch: &Bytes) -> Result<bool, BatchError> {
        self.add(batch, None)
    }

    /// [`Self::add_batch`] for a batch below the partition's last stable
    /// offset, whose transaction is decided: a committed transaction's
    /// records add their keys as any record does; an aborted one's
    /// (`aborted`) add none.
    pub fn add_decided_batch(
        &mut self,
        batch: &Bytes,
        aborted: &AbortedTxns,
    ) -> Result<bool, BatchError> {
        self.add(batch, Some(aborted))
    }

    fn add(&mut self, batch: &Bytes, decided: Option<&AbortedTxns>) -> Result<bool, BatchError> {
        let view = BatchView::parse(batch, usize::MAX)?;
        let next = view.next_offset();
        let undecided_or_aborted = view.is_transactional()
            && decided.is_none_or(|a| a.holds(view.producer_id(), view.base_offset()));
        if view.is_control() || undecided_or_aborted {
            self.end = Some(next);
            return Ok(true);
        }
        let records = decode_records(batch, DEFAULT_MAX_DECOMPRESSED)?;
        let hashes: Vec<(u128, i64)> = records
            .iter()
            .filter_map(|r| r.key.as_ref().map(|k| (self.hash(k), r.offset)))
            .collect();
        if !self.map.is_empty() {
            let mut new: Vec<u128> = hashes
                .iter()
                .filter(|(h, _)| !self.map.contains_key(h))
                .map(|(h, _)| *h)
                .collect();
            new.sort_unstable();
            new.dedup();
            if !new.is_empty() && self.map.len() + new.len() > self.cap {
                return Ok(false);
            }
        }
        for (h, off) in hashes {
            let e = self.map.entry(h).or_insert(off);
            *e = (*e).max(off);
        }
        self.end = Some(next);
        Ok(true)
    }
}

/// A partition's aborted transactions, from its aborted index: per
/// producer id, the offsets each one covers (its first record to its ABORT
/// marker). A producer has one transaction open on a partition at a time,
/// so its transactional batches in such a range are that transaction's.
#[derive(Debug, Default, Clone)]
pub struct AbortedTxns(HashMap<i64, Vec<(i64, i64)>>);

impl AbortedTxns {
    /// From (producer id, first offset, last offset) triples.
    pub fn new(txns: impl IntoIterator<Item = (i64, i64, i64)>) -> Self {
        let mut by_producer: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        for (producer, first, last) in txns {
            by_producer.entry(producer).or_default().push((first, last));
        }
        Self(by_producer)
    }

    /// Whether the transactional batch of `producer_id` at `offset` is
    /// part of an aborted transaction.
    pub fn holds(&self, producer_id: i64, offset: i64) -> bool {
        self.0
            .get(&producer_id)
            .is_some_and(|r| r.iter().any(|&(f, l)| f <= offset && offset <= l))
    }
}

/// Cleaning a partition's decided section (below its last stable offset)
/// with its transactions, batch after batch in offset order from the log
/// start ([`clean_decided_batch`]): aborted transactions' batches go, and a
/// committed transaction's marker goes once none of its data is left and
/// its delete horizon has passed.
#[derive(Debug)]
pub struct TxnCleaning<'a> {
    aborted: &'a AbortedTxns,
    /// Producers whose current transaction still has records in the log.
    data_left: HashSet<i64>,
}

impl<'a> TxnCleaning<'a> {
    pub fn new(aborted: &'a AbortedTxns) -> Self {
        Self {
            aborted,
            data_left: HashSet::new(),
        }
    }
}

/// [`clean_batch`] for a batch below the last stable offset, fed in offset
/// order from the log start (see [`TxnCleaning`]):
///
/// - a batch of an aborted transaction goes whole;
/// - a COMMIT marker stays while records of its transaction are left; once
///   none is, it gets a delete horizon (`delete.retention.ms` from now, as
///   a tombstone does, so a reader that already fetched the transaction's
///   records still sees its end), and goes at the first cleaning after it;
/// - an ABORT marker stays: the aborted index (kept in the metadata until
///   the log start passes the transaction) still names its transaction in
///   `read_committed` fetches, and a client that was told of an aborted
///   transaction drops the producer's batches until it sees its marker.
pub fn clean_decided_batch(
    batch: &Bytes,
    map: &KeyMap,
    policy: CleanPolicy,
    txns: &mut TxnCleaning<'_>,
) -> Result<CleanedBatch, BatchError> {
    let view = BatchView::parse(batch, usize::MAX)?;
    let producer = view.producer_id();
    if view.is_control() {
        view.verify_crc()?;
        let unchanged = |horizon| CleanedBatch {
            bytes: Some(batch.clone()),
            changed: false,
            records_kept: view.record_count().max(0) as usize,
            records_dropped: 0,
            horizon,
        };
        if !view.is_transactional() {
            // Not a marker (a delayed batch): kept as it is.
            return Ok(unchanged(None));
        }
        let had_data = txns.data_left.remove(&producer);
        let commit = crate::control::read_marker(batch)?
            .is_some_and(|m| m.kind == crate::control::ControlType::Commit);
        // An ABORT marker stays (until the log start passes it): the
        // partition's aborted index keeps naming its transaction, and a
        // read_committed client takes the producer's later batches for
        // aborted until it sees that marker.
        if !commit || had_data {
            return Ok(unchanged(None));
        }
        let old_horizon = view.has_delete_horizon().then(|| view.first_timestamp());
        return Ok(match old_horizon {
            Some(h) if policy.now_ms >= h => CleanedBatch {
                bytes: None,
                changed: true,
                records_kept: 0,
                records_dropped: view.record_count().max(0) as usize,
                horizon: None,
            },
            Some(h) => unchanged(Some(h)),
            None => {
                let h = policy.now_ms.saturating_add(policy.delete_retention_ms);
                let records = decode_records(batch, DEFAULT_MAX_DECOMPRESSED)?;
                CleanedBatch {
                    bytes: Some(rebuild(&view, &records, Some(h))?),
                    changed: true,
                    records_kept: records.len(),
                    records_dropped: 0,
                    horizon: Some(h),
                }
            }
        });
    }
    if view.is_transactional() && txns.aborted.holds(producer, view.base_offset()) {
        view.verify_crc()?;
        return Ok(CleanedBatch {
            bytes: None,
            changed: true,
            records_kept: 0,
            records_dropped: view.record_count().max(0) as usize,
            horizon: None,
        });
    }
    let cleaned = clean_batch(batch, map, policy)?;
    if view.is_transactional() && cleaned.records_kept > 0 {
        txns.data_left.insert(producer);
    }
    Ok(cleaned)
}

/// What decides which records stay.
#[derive(Debug, Clone, Copy)]
pub struct CleanPolicy {
    /// The cleaner's clock (ms since the epoch).
    pub now_ms: i64,
    /// `delete.retention.ms`: how long a tombstone stays once a cleaning
    /// has seen it.
    pub delete_retention_ms: i64,
}

/// A batch after cleaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanedBatch {
    /// The batch to keep (`None`: every record went). The input bytes
    /// themselves when nothing changed.
    pub bytes: Option<Bytes>,
    /// Whether `bytes` differ from the input.
    pub changed: bool,
    pub records_kept: usize,
    pub records_dropped: usize,
    /// The delete horizon of the tombstones kept, if any.
    pub horizon: Option<i64>,
}

/// Cleans one batch against `map`: a record whose offset is below the map's
/// end goes if its key has a later record, if it has no key (a compacted
/// topic's records need one), or if it is a tombstone past its delete
/// horizon. Control batches stay whole.
pub fn clean_batch(
    batch: &Bytes,
    map: &KeyMap,
    policy: CleanPolicy,
) -> Result<CleanedBatch, BatchError> {
    let view = BatchView::parse(batch, usize::MAX)?;
    view.verify_crc()?;
    let unchanged = |kept: usize, horizon| CleanedBatch {
        bytes: Some(batch.clone()),
        changed: false,
        records_kept: kept,
        records_dropped: 0,
        horizon,
    };
    let end = map.end().unwrap_or(i64::MIN);
    if view.is_control() || view.base_offset() >= end {
        return Ok(unchanged(view.record_count().max(0) as usize, None));
    }
    let old_horizon = view.has_delete_horizon().then(|| view.first_timestamp());
    let records = decode_records(batch, DEFAULT_MAX_DECOMPRESSED)?;
    let total = records.len();
    let keep = |r: &Record| {
        if r.offset >= end {
            return true;
        }
        let Some(key) = &r.key else { return false };
        if map.latest(key).is_some_and(|latest| r.offset < latest) {
            return false;
        }
        // A tombstone stays until its horizon (set by the cleaning that
        // first keeps it).
        r.value.is_some() || old_horizon.is_none_or(|h| policy.now_ms < h)
    };
    let kept: Vec<Record> = records.into_iter().filter(|r| keep(r)).collect();
    let tombstones = kept.iter().any(|r| r.value.is_none());
    let horizon = tombstones.then(|| {
        old_horizon.unwrap_or_else(|| policy.now_ms.saturating_add(policy.delete_retention_ms))
    });
    if kept.len() == total && horizon == old_horizon {
        return Ok(unchanged(total, horizon));
    }
    let dropped = total - kept.len();
    if kept.is_empty() {
        return Ok(CleanedBatch {
            bytes: None,
            changed: true,
            records_kept: 0,
            records_dropped: dropped,
            horizon: None,
        });
    }
    let bytes = rebuild(&view, &kept, horizon)?;
    Ok(CleanedBatch {
        bytes: Some(bytes),
        changed: true,
        records_kept: kept.len(),
        records_dropped: dropped,
        horizon,
    })
}

/// `view`'s header with `records` (all from it, in order) as its records,
/// the first timestamp being `horizon` when there is one.
fn rebuild(
    view: &BatchView<'_>,
    records: &[Record],
    horizon: Option<i64>,
) -> Result<Bytes, BatchError> {
    let base_offset = view.base_offset();
    let first_ts = match horizon {
        Some(h) => h,
        None => records
            .iter()
            .map(|r| r.timestamp)
            .min()
            .unwrap_or(view.first_timestamp()),
    };
    let mut body = BytesMut::new();
    let mut rec = BytesMut::new();
    for r in records {
        rec.clear();
        rec.put_i8(0);
        put_varlong(&mut rec, r.timestamp.saturating_sub(first_ts));
        put_varlong(&mut rec, r.offset - base_offset);
        put_bytes(&mut rec, r.key.as_deref());
        put_bytes(&mut rec, r.value.as_deref());
        put_varlong(&mut rec, r.headers.len() as i64);
        for h in &r.headers {
            put_bytes(&mut rec, Some(&h.key));
            put_bytes(&mut rec, h.value.as_deref());
        }
        put_varlong(&mut body, rec.len() as i64);
        body.put_slice(&rec);
    }
    let packed = compress(view.compression(), &body)?;
    let length = i32::try_from(HEADER_LEN - LOG_OVERHEAD + packed.len())
        .map_err(|_| BatchError::Invalid("cleaned batch over 2 GiB"))?;
    let max_ts = match view.timestamp_type() {
        TimestampType::LogAppendTime => view.max_timestamp(),
        TimestampType::CreateTime => records
            .iter()
            .map(|r| r.timestamp)
            .max()
            .unwrap_or(view.max_timestamp()),
    };
    let mut attributes = view.attributes();
    if horizon.is_some() {
        attributes |= DELETE_HORIZON_BIT;
    } else {
        attributes &= !DELETE_HORIZON_BIT;
    }
    let mut out = BytesMut::with_capacity(HEADER_LEN + packed.len());
    out.put_slice(&view.bytes()[..HEADER_LEN]);
    out.put_slice(&packed);
    out[LENGTH_AT..LENGTH_AT + 4].copy_from_slice(&length.to_be_bytes());
    out[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    out[FIRST_TIMESTAMP_AT..FIRST_TIMESTAMP_AT + 8].copy_from_slice(&first_ts.to_be_bytes());
    out[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&max_ts.to_be_bytes());
    let count =
        i32::try_from(records.len()).map_err(|_| BatchError::Invalid("too many records"))?;
    out[RECORD_COUNT_AT..RECORD_COUNT_AT + 4].copy_from_slice(&count.to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_AT + 4..]);
    out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out.freeze())
}

fn put_bytes(buf: &mut BytesMut, b: Option<&[u8]>) {
    match b {
        None => put_varlong(buf, -1),
        Some(b) => {
            put_varlong(buf, b.len() as i64);
            buf.put_slice(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Compression;
    use crate::records::{BatchBuilder, RecordSpec};

    const NOW: i64 = 1_000_000;

    fn policy(now_ms: i64) -> CleanPolicy {
        CleanPolicy {
            now_ms,
            delete_retention_ms: 100,
        }
    }

    /// A batch at `base` of (key, value) records, timestamps 10 apart from 5000.
    fn batch(base: i64, recs: &[(&str, Option<&str>)], codec: Compression) -> Bytes {
        let mut b = BatchBuilder::new(base, 5000).producer(77, 3, 40, false);
        for (i, (k, v)) in recs.iter().enumerate() {
            b.push(RecordSpec::new(
                Some(k.as_bytes().to_vec()),
                v.map(|v| v.as_bytes().to_vec()),
                i as i64 * 10,
            ));
        }
        b.build(codec).unwrap()
    }

    fn values(b: &Bytes) -> Vec<(i64, i64, String, Option<String>)> {
        decode_records(b, DEFAULT_MAX_DECOMPRESSED)
            .unwrap()
            .into_iter()
            .map(|r| {
                let s = |x: Option<Bytes>| x.map(|x| String::from_utf8(x.to_vec()).unwrap());
                (r.offset, r.timestamp, s(r.key).unwrap(), s(r.value))
            })
            .collect()
    }

    /// Cleans `log` (batches) until nothing is left to map, as the broker's
    /// passes do: map from `first_dirty`, clean everything below the map's end.
    fn clean_log(log: &[Bytes], cap: usize, now: i64) -> (Vec<Bytes>, usize) {
        let mut log = log.to_vec();
        let mut first_dirty = 0i64;
        let mut passes = 0;
        let last = log
            .iter()
            .map(|b| BatchView::parse(b, usize::MAX).unwrap().next_offset())
            .max()
            .unwrap();
        while first_dirty < last {
            let mut map = KeyMap::new(cap);
            for b in &log {
                let v = BatchView::parse(b, usize::MAX).unwrap();
                if v.last_offset() < first_dirty {
                    continue;
                }
                if !map.add_batch(b).unwrap() {
                    break;
                }
            }
            log = log
                .iter()
                .filter_map(|b| clean_batch(b, &map, policy(now)).unwrap().bytes)
                .collect();
            first_dirty = map.end().unwrap();
            passes += 1;
        }
        (log, passes)
    }

    fn all_values(log: &[Bytes]) -> Vec<(i64, String, Option<String>)> {
        log.iter()
            .flat_map(values)
            .map(|(o, _, k, v)| (o, k, v))
            .collect()
    }

    #[test]
    fn the_latest_record_of_each_key_stays_at_its_offset() {
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Zstd,
            Compression::Lz4,
            Compression::Snappy,
        ] {
            let log = vec![
                batch(
                    0,
                    &[("a", Some("a1")), ("b", Some("b1")), ("c", Some("c1"))],
                    codec,
                ),
                batch(3, &[("a", Some("a2")), ("d", Some("d1"))], codec),
                batch(5, &[("b", Some("b2")), ("a", Some("a3"))], codec),
            ];
            let (out, passes) = clean_log(&log, 1000, NOW);
            assert_eq!(passes, 1);
            assert_eq!(
                all_values(&out),
                vec![
                    (2, "c".into(), Some("c1".into())),
                    (4, "d".into(), Some("d1".into())),
                    (5, "b".into(), Some("b2".into())),
                    (6, "a".into(), Some("a3".into())),
                ],
                "{codec:?}"
            );
            // Batches keep their base offset, last offset, producer and codec;
            // records keep their timestamps.
            let first = BatchView::parse(&out[0], usize::MAX).unwrap();
            first.verify_crc().unwrap();
            assert_eq!((first.base_offset(), first.last_offset()), (0, 2));
            assert_eq!(
                (
                    first.producer_id(),
                    first.producer_epoch(),
                    first.base_sequence()
                ),
                (77, 3, 40)
            );
            assert_eq!(first.compression(), codec);
            assert_eq!(values(&out[0])[0].1, 5020);
            // The last batch lost nothing: the very same bytes.
            assert_eq!(out[2], log[2]);
        }
    }

    #[test]
    fn tombstones_stay_until_their_horizon_then_go() {
        let log = vec![
            batch(
                0,
                &[("a", Some("a1")), ("b", Some("b1"))],
                Compression::None,
            ),
            batch(2, &[("a", None), ("c", Some("c1"))], Compression::None),
        ];
        let (out, _) = clean_log(&log, 1000, NOW);
        // The tombstone is kept, with a horizon now + delete.retention.ms.
        assert_eq!(
            all_values(&out),
            vec![
                (1, "b".into(), Some("b1".into())),
                (2, "a".into(), None),
                (3, "c".into(), Some("c1".into()))
            ]
        );
        let v = BatchView::parse(&out[1], usize::MAX).unwrap();
        assert!(v.has_delete_horizon());
        assert_eq!(v.first_timestamp(), NOW + 100);
        assert_eq!(values(&out[1])[0].1, 5000, "timestamps survive the horizon");
        // Before the horizon it stays; from it on it goes.
        let (again, _) = clean_log(&out, 1000, NOW + 99);
        assert_eq!(all_values(&again).len(), 3);
        let (later, _) = clean_log(&out, 1000, NOW + 100);
        assert_eq!(
            all_values(&later),
            vec![
                (1, "b".into(), Some("b1".into())),
                (3, "c".into(), Some("c1".into()))
            ]
        );
    }

    #[test]
    fn a_small_map_cleans_in_several_passes_to_the_same_log() {
        let mut log = Vec::new();
        let mut off = 0;
        for round in 0..5 {
            for chunk in 0..4 {
                let recs: Vec<(String, String)> = (0..5)
                    .map(|i| (format!("k{}", chunk * 5 + i), format!("v{round}")))
                    .collect();
                let refs: Vec<(&str, Option<&str>)> = recs
                    .iter()
                    .map(|(k, v)| (k.as_str(), Some(v.as_str())))
                    .collect();
                log.push(batch(off, &refs, Compression::Lz4));
                off += 5;
            }
        }
        let (one, p1) = clean_log(&log, 1000, NOW);
        let (many, p2) = clean_log(&log, 6, NOW);
        assert_eq!(p1, 1);
        assert!(p2 > 1, "{p2} passes");
        let want: Vec<_> = (0..20)
            .map(|i| (80 + i as i64, format!("k{i}"), Some("v4".to_string())))
            .collect();
        assert_eq!(all_values(&one), want);
        assert_eq!(all_values(&many), want);
    }

    #[test]
    fn control_and_transactional_batches_never_hide_a_value() {
        let mut txn = BatchBuilder::new(1, 5000).producer(9, 0, 0, true);
        txn.push(RecordSpec::new(
            Some(b"a".to_vec()),
            Some(b"maybe".to_vec()),
            0,
        ));
        let txn = txn.build(Compression::None).unwrap();
        let marker = crate::control::marker_batch(
            &crate::control::Marker {
                kind: crate::control::ControlType::Abort,
                producer_id: 9,
                producer_epoch: 0,
                coordinator_epoch: 0,
            },
            5000,
        )
        .unwrap();
        let mut marker = marker.to_vec();
        crate::batch::set_base_offset(&mut marker, 2).unwrap();
        let log = vec![
            batch(0, &[("a", Some("a1"))], Compression::None),
            txn,
            Bytes::from(marker),
        ];
        let (out, _) = clean_log(&log, 1000, NOW);
        assert_eq!(
            out.len(),
            3,
            "the aborted value does not replace a1, the marker stays"
        );
        assert_eq!(out, log);
    }

    fn txn_batch(base: i64, producer: i64, recs: &[(&str, &str)]) -> Bytes {
        let mut b = BatchBuilder::new(base, 5000).producer(producer, 0, 0, true);
        for (k, v) in recs {
            b.push(RecordSpec::new(
                Some(k.as_bytes().to_vec()),
                Some(v.as_bytes().to_vec()),
                0,
            ));
        }
        b.build(Compression::None).unwrap()
    }

    fn marker_at(at: i64, producer: i64, kind: crate::control::ControlType) -> Bytes {
        let m = crate::control::marker_batch(
            &crate::control::Marker {
                kind,
                producer_id: producer,
                producer_epoch: 0,
                coordinator_epoch: 0,
            },
            5000,
        )
        .unwrap();
        let mut m = m.to_vec();
        crate::batch::set_base_offset(&mut m, at).unwrap();
        Bytes::from(m)
    }

    /// One pass over a log below its LSO, as the broker's cleaner makes it
    /// with the partition's aborted transactions.
    fn clean_decided(log: &[Bytes], aborted: &AbortedTxns, now: i64) -> Vec<Bytes> {
        let mut map = KeyMap::new(1000);
        for b in log {
            assert!(map.add_decided_batch(b, aborted).unwrap());
        }
        let mut txns = TxnCleaning::new(aborted);
        log.iter()
            .filter_map(|b| {
                clean_decided_batch(b, &map, policy(now), &mut txns)
                    .unwrap()
                    .bytes
            })
            .collect()
    }

    fn offsets_and_kinds(log: &[Bytes]) -> Vec<(i64, bool)> {
        log.iter()
            .map(|b| {
                let v = BatchView::parse(b, usize::MAX).unwrap();
                v.verify_crc().unwrap();
                (v.base_offset(), v.is_control())
            })
            .collect()
    }

    #[test]
    fn aborted_records_go_and_commit_markers_go_once_their_transaction_is_empty_and_past_the_horizon()
     {
        use crate::control::ControlType::{Abort, Commit};
        let log = vec![
            batch(0, &[("a", Some("a1"))], Compression::None),
            txn_batch(1, 9, &[("a", "aborted")]),
            marker_at(2, 9, Abort),
            txn_batch(3, 10, &[("c", "c1")]),
            marker_at(4, 10, Commit),
            txn_batch(5, 11, &[("a", "a2"), ("b", "b1")]),
            marker_at(7, 11, Commit),
            batch(
                8,
                &[("b", Some("b2")), ("c", Some("c2"))],
                Compression::None,
            ),
        ];
        let aborted = AbortedTxns::new([(9, 1, 2)]);
        let out = clean_decided(&log, &aborted, NOW);
        assert_eq!(
            all_values(
                &out.iter()
                    .filter(|b| !is_control(b))
                    .cloned()
                    .collect::<Vec<_>>()
            ),
            vec![
                (5, "a".into(), Some("a2".into())),
                (8, "b".into(), Some("b2".into())),
                (9, "c".into(), Some("c2".into())),
            ],
            "the aborted value is gone and hides nothing; a committed one replaces a1"
        );
        // The COMMIT marker of the emptied transaction 10 (compacted away)
        // gets a delete horizon; the one of 11, which has a record left,
        // and the ABORT marker of 9 stay as they were.
        assert_eq!(
            offsets_and_kinds(&out),
            vec![(2, true), (4, true), (5, false), (7, true), (8, false)]
        );
        let horizons: Vec<Option<i64>> = out
            .iter()
            .filter(|b| is_control(b))
            .map(|b| {
                let v = BatchView::parse(b, usize::MAX).unwrap();
                v.has_delete_horizon().then(|| v.first_timestamp())
            })
            .collect();
        assert_eq!(horizons, vec![None, Some(NOW + 100), None]);
        assert_eq!(
            crate::control::read_marker(&out[0]).unwrap().unwrap().kind,
            Abort
        );
        // Before the horizon they stay; from it on they go.
        assert_eq!(clean_decided(&out, &aborted, NOW + 99), out);
        let later = clean_decided(&out, &aborted, NOW + 100);
        assert_eq!(
            offsets_and_kinds(&later),
            vec![(2, true), (5, false), (7, true), (8, false)]
        );
    }

    fn is_control(b: &Bytes) -> bool {
        BatchView::parse(b, usize::MAX).unwrap().is_control()
    }

    #[test]
    fn map_refuses_a_batch_over_its_cap_unless_empty() {
        let mut m = KeyMap::new(2);
        assert!(
            m.add_batch(&batch(
                0,
                &[("a", Some("1")), ("b", Some("1")), ("c", Some("1"))],
                Compression::None
            ))
            .unwrap()
        );
        assert_eq!(m.end(), Some(3));
        assert!(
            !m.add_batch(&batch(3, &[("d", Some("1"))], Compression::None))
                .unwrap()
        );
        assert!(
            m.add_batch(&batch(3, &[("a", Some("2"))], Compression::None))
                .unwrap()
        );
        assert_eq!(m.latest(b"a"), Some(3));
        assert_eq!(m.end(), Some(4));
    }
}
