//! Fuzzes the decoding of a delayed topic's held records
//! (`floe_storage::delayed`): the input as one delayed record's value
//! (`decode_value`), and as batches back to back, each read as a delayed
//! batch (`read_delayed`) within small bounds, as the broker's scheduler
//! reads its log. Nothing may panic; a value decoded is encoded back to the
//! same bytes; no batch yields more records than the bounds.

#![no_main]

use bytes::Bytes;
use floe_storage::batch::BatchIter;
use floe_storage::delayed::{decode_value, encode_value, read_delayed};
use floe_storage::records::DecodeLimits;
use libfuzzer_sys::fuzz_target;

const LIMITS: DecodeLimits = DecodeLimits {
    max_bytes: 256 * 1024,
    max_records: 4096,
};

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(r) = decode_value(bytes.clone()) {
        assert_eq!(encode_value(&r), bytes, "a value reads back to its bytes");
    }
    for item in BatchIter::new(&bytes, usize::MAX).take(64) {
        let Ok((at, view)) = item else { break };
        let batch = bytes.slice(at..at + view.size());
        if let Ok(Some(records)) = read_delayed(&batch, LIMITS) {
            assert!(records.len() <= LIMITS.max_records);
        }
    }
});
