//! What a record entering a share-partition's window is for the group
//! ([`Arrival`]), read from its headers: the group's filter (`floe.filter`)
//! and the record's delay (`floe-deliver-at`, `floe-delay-ms`).
//!
//! The records are the whole batches a share fetch read; they come from
//! producers, so nothing here trusts them: the batches are decoded with the
//! storage's bounded [`RecordStream`], and a batch or header that does not
//! decode makes its records deliverable at once (counted as malformed),
//! never a panic. Offsets are asked for in increasing order and each batch
//! is decoded at most once, only the batches holding records that enter the
//! window.

use std::sync::Arc;

use bytes::Bytes;
use floe_metadata::record_filter::RecordFilter;
use floe_storage::batch::{BatchView, Compression};
use floe_storage::records::{DecodeLimits, Record, RecordStream};
use floe_types::Offset;

use super::partition::Arrival;

pub use crate::partitions::delay_headers::{DELAY_MS_HEADER, DELIVER_AT_HEADER};
use crate::partitions::delay_headers::{DELAY_PREFIX, due_time, mentions};

/// The batches of one share fetch, split once (cheap: `Bytes` slices).
pub fn split_batches(records: &Bytes) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while let Some(rest) = records.get(pos..) {
        let Ok(view) = BatchView::parse(rest, rest.len()) else {
            break;
        };
        let size = view.size();
        out.push(records.slice(pos..pos + size));
        pos += size;
    }
    out
}

/// What records entering the window are, one offset after the other.
pub struct Arrivals<'a> {
    batches: &'a [Bytes],
    filter: Option<Arc<RecordFilter>>,
    limits: DecodeLimits,
    /// The batch being read: its index, first and last offsets and
    /// whether its records need no look (a control batch, or the plain
    /// path); its records stream (`None`: not decoded, or it failed).
    at: usize,
    bounds: Option<(i64, i64, bool)>,
    stream: Option<RecordStream<'a>>,
    opened: bool,
    /// A record read past the offset asked for (a compacted gap).
    ahead: Option<Record>,
    /// Delay headers that were not decimal times, and batches that did not
    /// decode: their records are delivered at once.
    pub malformed: u64,
}

impl std::fmt::Debug for Arrivals<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arrivals")
            .field("at", &self.at)
            .field("malformed", &self.malformed)
            .finish()
    }
}

impl<'a> Arrivals<'a> {
    /// Over `batches` (see [`split_batches`]), for a group with `filter`
    /// (`None` or `*`: every record is for it).
    pub fn new(
        batches: &'a [Bytes],
        filter: Option<Arc<RecordFilter>>,
        limits: DecodeLimits,
    ) -> Self {
        Self {
            batches,
            filter: filter.filter(|f| !f.is_all()),
            limits,
            at: 0,
            bounds: None,
            stream: None,
            opened: false,
            ahead: None,
            malformed: 0,
        }
    }

    /// What the record at `offset` is; offsets must be asked for in
    /// increasing order. An offset with no record (a control batch, a gap)
    /// is delivered: the client acknowledges it as a GAP.
    pub fn classify(&mut self, offset: Offset) -> Arrival {
        match self.record_at(offset.0) {
            Some(record) => self.verdict(&record),
            None => Arrival::Deliver,
        }
    }

    fn verdict(&mut self, record: &Record) -> Arrival {
        if let Some(filter) = &self.filter {
            let headers = record
                .headers
                .iter()
                .map(|h| (h.key.as_ref(), h.value.as_deref()));
            if !filter.matches(headers) {
                return Arrival::Filtered;
            }
        }
        match due_time(record) {
            Ok(Some(due)) => Arrival::DueAt(due),
            Ok(None) => Arrival::Deliver,
            Err(crate::partitions::delay_headers::Malformed) => {
                self.malformed += 1;
                Arrival::Deliver
            }
        }
    }

    /// The record at `offset`, if the batches hold one.
    fn record_at(&mut self, offset: i64) -> Option<Record> {
        // The batch holding `offset`.
        loop {
            let (base, last, skip) = match self.bounds {
                Some(b) => b,
                None => {
                    let batch = self.batches.get(self.at)?;
                    let view = BatchView::parse(batch, batch.len()).ok()?;
                    // The plain path: no filter, and an uncompressed batch
                    // that cannot hold a delay header: every record is
                    // delivered, nothing is decoded.
                    let plain = self.filter.is_none()
                        && view.compression() == Compression::None
                        && !mentions(view.records_bytes(), DELAY_PREFIX);
                    let b = (
                        view.base_offset(),
                        view.last_offset(),
                        view.is_control() || plain,
                    );
                    self.bounds = Some(b);
                    b
                }
            };
            if last >= offset {
                if base > offset || skip {
                    return None;
                }
                break;
            }
            self.at += 1;
            self.bounds = None;
            self.stream = None;
            self.opened = false;
            self.ahead = None;
        }
        if !self.opened {
            self.opened = true;
            let batch = &self.batches[self.at];
            match RecordStream::new(batch, self.limits) {
                Ok(stream) => self.stream = Some(stream),
                Err(_) => self.malformed += 1,
            }
        }
        if let Some(r) = self.ahead.take() {
            if r.offset == offset {
                return Some(r);
            }
            if r.offset > offset {
                self.ahead = Some(r);
                return None;
            }
        }
        let stream = self.stream.as_mut()?;
        for r in stream.by_ref() {
            match r {
                Ok(r) if r.offset < offset => continue,
                Ok(r) if r.offset == offset => return Some(r),
                Ok(r) => {
                    self.ahead = Some(r);
                    return None;
                }
                Err(_) => {
                    self.malformed += 1;
                    break;
                }
            }
        }
        self.stream = None;
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use bytes::BytesMut;
    use floe_storage::records::{BatchBuilder, RecordSpec};

    use super::*;

    fn rec(headers: &[(&str, &str)]) -> RecordSpec {
        let mut r = RecordSpec::new(None, Some(b"v".to_vec()), 5);
        r.headers = headers
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec())))
            .collect();
        r
    }

    fn log(batches: &[(i64, Vec<RecordSpec>, Compression)]) -> Bytes {
        let mut all = BytesMut::new();
        for (base, recs, codec) in batches {
            let mut b = BatchBuilder::new(*base, 1_000);
            for r in recs {
                b.push(r.clone());
            }
            all.extend_from_slice(&b.build(*codec).unwrap());
        }
        all.freeze()
    }

    #[test]
    fn delay_headers_give_due_times_and_malformed_ones_deliver_at_once() {
        let records = log(&[
            (
                0,
                vec![
                    rec(&[("floe-deliver-at", "5000")]),
                    rec(&[("floe-delay-ms", "250")]),
                    rec(&[("floe-deliver-at", "-1")]),
                    rec(&[("floe-delay-ms", "soon")]),
                    rec(&[]),
                    rec(&[("floe-delay-ms", "9"), ("floe-deliver-at", "7")]),
                ],
                Compression::None,
            ),
            (
                6,
                vec![rec(&[("floe-deliver-at", "99999999999999999999999")])],
                Compression::Lz4,
            ),
        ]);
        let batches = split_batches(&records);
        assert_eq!(batches.len(), 2);
        let mut a = Arrivals::new(&batches, None, DecodeLimits::DEFAULT);
        let got: Vec<Arrival> = (0..8).map(|o| a.classify(Offset(o))).collect();
        assert_eq!(
            got,
            vec![
                Arrival::DueAt(5_000),
                // The batch's timestamp 1000 + delta 5 + 250.
                Arrival::DueAt(1_255),
                Arrival::Deliver,
                Arrival::Deliver,
                Arrival::Deliver,
                Arrival::DueAt(7),
                Arrival::Deliver,
                // Past the batches: no record.
                Arrival::Deliver,
            ]
        );
        assert_eq!(a.malformed, 3);
    }

    #[test]
    fn a_filter_archives_what_it_refuses_in_compressed_batches_too() {
        let records = log(&[
            (
                10,
                vec![rec(&[("floe-tag", "A")]), rec(&[("floe-tag", "B")])],
                Compression::Gzip,
            ),
            (
                12,
                vec![
                    rec(&[("region", "eu"), ("floe-deliver-at", "42")]),
                    rec(&[]),
                ],
                Compression::Zstd,
            ),
        ]);
        let batches = split_batches(&records);
        let filter = Arc::new(RecordFilter::parse("A || region=eu").unwrap());
        let mut a = Arrivals::new(&batches, Some(filter), DecodeLimits::DEFAULT);
        // Starting inside the first batch.
        let got: Vec<Arrival> = (11..14).map(|o| a.classify(Offset(o))).collect();
        assert_eq!(
            got,
            vec![Arrival::Filtered, Arrival::DueAt(42), Arrival::Filtered]
        );
        let all = Arc::new(RecordFilter::parse("*").unwrap());
        let mut a = Arrivals::new(&batches, Some(all), DecodeLimits::DEFAULT);
        assert_eq!(a.classify(Offset(11)), Arrival::Deliver);
    }

    #[test]
    fn a_batch_without_delay_headers_is_not_decoded_without_a_filter() {
        assert!(mentions(b"xxfloe-delay-ms", DELAY_PREFIX));
        assert!(mentions(b"ffloe-de", DELAY_PREFIX));
        assert!(!mentions(b"floe-d", DELAY_PREFIX));
        assert!(!mentions(b"", DELAY_PREFIX));
        // Records that do not decode: without the prefix they are not even
        // looked at (nothing counted); with it they are, and counted.
        let mut records =
            log(&[(0, vec![rec(&[("floe-tag", "A")]); 2], Compression::None)]).to_vec();
        // The first record's length (zig-zag varint 63), past its bytes.
        records[61] = 0x7e;
        let records = Bytes::from(records);
        let batches = split_batches(&records);
        let mut a = Arrivals::new(&batches, None, DecodeLimits::DEFAULT);
        assert_eq!(a.classify(Offset(1)), Arrival::Deliver);
        assert_eq!(a.malformed, 0);
        let filter = Arc::new(RecordFilter::parse("A").unwrap());
        let mut a = Arrivals::new(&batches, Some(filter), DecodeLimits::DEFAULT);
        a.classify(Offset(1));
        assert_eq!(a.malformed, 1);
    }

    #[test]
    fn damaged_batches_deliver_their_records_and_never_panic() {
        let records = log(&[(0, vec![rec(&[("floe-tag", "A")]); 3], Compression::None)]);
        let filter = Arc::new(RecordFilter::parse("B").unwrap());
        for cut in 0..records.len() {
            let mut bytes = records.to_vec();
            // Damage one byte of the records section (past the header).
            if cut >= 61 {
                bytes[cut] ^= 0xff;
            }
            let bytes = Bytes::from(bytes);
            let batches = split_batches(&bytes);
            let mut a = Arrivals::new(&batches, Some(filter.clone()), DecodeLimits::DEFAULT);
            for o in 0..4 {
                let _ = a.classify(Offset(o));
            }
        }
        // A batch too big to decode within the limits: delivered, counted.
        let batches = split_batches(&records);
        let tight = DecodeLimits {
            max_bytes: 4,
            max_records: 1,
        };
        let mut a = Arrivals::new(&batches, Some(filter), tight);
        assert_eq!(a.classify(Offset(0)), Arrival::Deliver);
        assert_eq!(a.malformed, 1);
    }
}
