//! Fuzzes the decoding of stored batches as the indexer and the broker's
//! timestamp lookups do it: the batches of a log range back to back
//! (`BatchIter`), each one's records streamed (`RecordStream`) within small
//! bounds, and what is decoded written to a Parquet file
//! (`floe_indexer::columns::write_file`), as an export does. Nothing may
//! panic; no batch may yield more records or decompressed bytes than the
//! bounds (so a decompression bomb costs at most the bounds); a batch over
//! them is refused with `OverBounds`.

#![no_main]

use bytes::Bytes;
use floe_indexer::columns::{FileOptions, write_file};
use floe_metadata::export_def::IndexDefinition;
use floe_storage::batch::BatchIter;
use floe_storage::records::{DecodeLimits, RecordStream};
use libfuzzer_sys::fuzz_target;

const LIMITS: DecodeLimits = DecodeLimits {
    max_bytes: 256 * 1024,
    max_records: 4096,
};

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    let mut kept = Vec::new();
    for item in BatchIter::new(&bytes, usize::MAX).take(64) {
        let Ok((at, view)) = item else { break };
        let batch = bytes.slice(at..at + view.size());
        let Ok(stream) = RecordStream::new(&batch, LIMITS) else {
            continue;
        };
        assert!(stream.claimed() <= LIMITS.max_records);
        let mut n = 0usize;
        let mut stream = stream;
        while let Some(r) = stream.next() {
            match r {
                Ok(r) => {
                    n += 1;
                    assert!(n <= LIMITS.max_records);
                    if kept.len() < 1000 {
                        kept.push(r);
                    }
                }
                Err(_) => break,
            }
            assert!(stream.decoded_bytes() <= LIMITS.max_bytes);
        }
    }
    let def = IndexDefinition::parse(r#"[{"name":"n","path":"$.n","type":"int64"}]"#)
        .expect("a valid definition");
    let _ = write_file(0, &kept, &def, &FileOptions::default());
});
