//! Fuzzes what a share-partition's owner reads that others wrote: the
//! headers of records entering a share group's window (`floe-tag` and
//! other headers against the group's filter, `floe-deliver-at`,
//! `floe-delay-ms`) in batches of any codec, a `floe.filter` text, a
//! stored share state (`decode_window`, then restored, its timer buckets
//! asked for chunks), and a timer bucket's bytes (whole, and one chunk
//! against a header's count). The first byte
//! picks the input. Nothing may panic; the batches are decoded under small
//! bounds, so a decompression bomb stays cheap.

#![no_main]

use std::sync::Arc;

use bytes::Bytes;
use floe_broker::share::arrival::{Arrivals, split_batches};
use floe_broker::share::durable::decode_window;
use floe_broker::share::{ShareConfig, SharePartition};
use floe_metadata::record_filter::RecordFilter;
use floe_storage::batch::BatchView;
use floe_storage::records::DecodeLimits;
use floe_storage::timers;
use floe_types::Offset;
use libfuzzer_sys::fuzz_target;

const LIMITS: DecodeLimits = DecodeLimits {
    max_bytes: 1 << 20,
    max_records: 1 << 12,
};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => {
            let filter = match which / 3 % 3 {
                0 => None,
                1 => RecordFilter::parse("A || B").ok(),
                _ => RecordFilter::parse("floe-tag=A || region=eu").ok(),
            };
            let records = Bytes::copy_from_slice(rest);
            let batches = split_batches(&records);
            let Some(first) = batches.first() else {
                return;
            };
            let Ok(view) = BatchView::parse(first, first.len()) else {
                return;
            };
            let mut arrivals = Arrivals::new(&batches, filter.map(Arc::new), LIMITS);
            let base = view.base_offset();
            for i in 0..4_096i64 {
                let _ = arrivals.classify(Offset(base.saturating_add(i)));
            }
        }
        1 => {
            if let Ok(text) = std::str::from_utf8(rest)
                && let Ok(f) = RecordFilter::parse(text)
            {
                // The canonical text parses back to the same filter.
                assert_eq!(RecordFilter::parse(&f.to_string()).ok(), Some(f));
            }
        }
        2 => {
            if let Ok(text) = std::str::from_utf8(rest)
                && let Ok(snapshot) = decode_window(i64::from(which), text)
                && let Ok(mut sp) = SharePartition::restore(ShareConfig::default(), &snapshot)
            {
                let _ = sp.snapshot();
                for load in sp.timers().loads() {
                    let _ = timers::chunk_range(load.count, load.index);
                }
            }
        }
        _ => {
            if let Ok(entries) = timers::decode(rest) {
                // What decodes encodes back to the same bytes.
                assert_eq!(timers::encode(&entries).ok().as_deref(), Some(rest));
            }
            if let Ok(count) = timers::decode_header(rest) {
                let index = u32::from(which) * 37;
                if let Some((_, range)) = timers::chunk_range(count, index) {
                    let start = usize::try_from(range.start).unwrap_or(usize::MAX);
                    let end = usize::try_from(range.end).unwrap_or(usize::MAX);
                    if let Some(chunk) = rest.get(start..end) {
                        let _ = timers::decode_chunk(chunk);
                    }
                }
            }
            let _ = timers::decode_chunk(rest);
        }
    }
});
