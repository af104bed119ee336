//! Fuzzes the record-batch view, the batch iterator and record decoding
//! (including decompression) on arbitrary bytes. Nothing may panic, and no
//! input may make the decoder allocate more than its bounds allow.

#![no_main]

use bytes::Bytes;
use floe_storage::batch::{BatchIter, BatchView, Compression, HEADER_LEN, LOG_OVERHEAD};
use floe_storage::records::{self, Record};
use libfuzzer_sys::fuzz_target;

/// Largest batch the target accepts (inputs are capped at 64 KiB anyway).
const MAX_BATCH: usize = 1 << 20;
/// Bound on decompressed records: small, so a decompression bomb stays cheap.
const MAX_DECOMPRESSED: usize = 1 << 20;

/// Calls every getter and checks the invariants `parse` promises.
fn touch(v: &BatchView<'_>, limit: usize) {
    let size = v.size();
    assert!(size >= HEADER_LEN && size <= limit);
    assert_eq!(v.bytes().len(), size);
    assert_eq!(v.batch_length() as i64 + LOG_OVERHEAD as i64, size as i64);
    assert_eq!(v.magic(), 2);
    assert!(v.last_offset_delta() >= 0);
    assert!(v.record_count() >= 0);
    assert!(v.last_offset() >= v.base_offset());
    assert!(v.next_offset() >= v.last_offset());
    assert_eq!(v.records_bytes().len(), size - HEADER_LEN);
    let codec = v.compression();
    assert_eq!(Compression::from_id(codec.id()), Ok(codec));
    let _ = (
        v.partition_leader_epoch(),
        v.crc(),
        v.attributes(),
        v.timestamp_type(),
        v.is_transactional(),
        v.is_control(),
        v.has_delete_horizon(),
        v.first_timestamp(),
        v.max_timestamp(),
        v.producer_id(),
        v.producer_epoch(),
        v.base_sequence(),
    );
    let crc_ok = v.verify_crc().is_ok();
    assert_eq!(crc_ok, v.crc() == v.compute_crc());
}

fn check_records(batch: &Bytes, recs: &[Record], view: &BatchView<'_>) {
    assert_eq!(recs.len(), view.record_count() as usize);
    let limit = if view.compression() == Compression::None {
        batch.len()
    } else {
        MAX_DECOMPRESSED
    };
    for r in recs {
        let len = |b: &Option<Bytes>| b.as_ref().map_or(0, Bytes::len);
        assert!(len(&r.key) + len(&r.value) <= limit);
        for h in &r.headers {
            assert!(h.key.len() + len(&h.value) <= limit);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = BatchView::peek_size(data);

    if let Ok(view) = BatchView::parse(data, MAX_BATCH) {
        touch(&view, MAX_BATCH.min(data.len()));
        assert_eq!(view.bytes(), &data[..view.size()]);
        // A tighter limit than the batch's size must refuse it.
        assert!(BatchView::parse(data, view.size() - 1).is_err());

        let owned = Bytes::copy_from_slice(view.bytes());
        if let Ok(recs) = records::decode_records(&owned, MAX_DECOMPRESSED) {
            check_records(&owned, &recs, &view);
        }
    }

    let mut iter = BatchIter::new(data, MAX_BATCH);
    let mut end = 0usize;
    for item in iter.by_ref() {
        match item {
            Ok((at, view)) => {
                assert_eq!(at, end);
                touch(&view, MAX_BATCH);
                end = at + view.size();
                assert!(end <= data.len());
            }
            Err(_) => break,
        }
    }
    assert_eq!(iter.position(), end);
    assert!(iter.next().is_none());

    // decode_records over the whole input (it parses with no size limit).
    let whole = Bytes::copy_from_slice(data);
    if let Ok(recs) = records::decode_records(&whole, MAX_DECOMPRESSED)
        && let Ok(view) = BatchView::parse(&whole, usize::MAX)
    {
        check_records(&whole, &recs, &view);
    }

    // The decompressors on their own: first byte picks the codec.
    if let Some((&id, rest)) = data.split_first()
        && let Ok(codec) = Compression::from_id(id % 5)
        && let Ok(out) = records::decompress(codec, rest, MAX_DECOMPRESSED)
    {
        assert!(out.len() <= MAX_DECOMPRESSED);
    }
});
