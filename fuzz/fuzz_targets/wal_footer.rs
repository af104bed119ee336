//! Fuzzes the WAL footer and trailer parsers: arbitrary bytes as the whole
//! object, and as the tail of a larger object.

#![no_main]

use floe_storage::wal::{ENTRY_LEN, TRAILER_LEN, WalFooter, WalTrailer};
use libfuzzer_sys::fuzz_target;

fn check_footer(footer: &WalFooter, tail_len: usize, object_size: u64) {
    let footer_len = (footer.entries.len() * ENTRY_LEN) as u64;
    assert!(footer_len + TRAILER_LEN as u64 <= tail_len as u64);
    let data_end = object_size - footer_len - TRAILER_LEN as u64;
    for (i, e) in footer.entries.iter().enumerate() {
        let range = e.byte_range();
        assert!(range.start <= range.end && range.end <= data_end);
        assert!(e.first_offset <= e.last_offset);
        if i > 0 {
            assert!(footer.entries[i - 1].partition < e.partition);
        }
        assert_eq!(footer.entry(&e.partition), Some(e));
    }
}

fuzz_target!(|data: &[u8]| {
    let size = data.len() as u64;

    if let Ok(footer) = WalFooter::parse(data, size) {
        check_footer(&footer, data.len(), size);
    }

    if let Some(tail) = data.len().checked_sub(TRAILER_LEN).map(|at| &data[at..]) {
        if let Ok(t) = WalTrailer::parse(tail, size) {
            assert_eq!(t.footer_len as u64, t.entry_count as u64 * ENTRY_LEN as u64);
            assert!(t.tail_len() <= size);
        }
        for object_size in [0, TRAILER_LEN as u64 - 1, u64::MAX] {
            let _ = WalTrailer::parse(tail, object_size);
        }
    }

    // The input as the last bytes of a larger object.
    for extra in [1u64, 4096, u32::MAX as u64, u64::MAX - size] {
        let object_size = size.saturating_add(extra);
        if let Ok(footer) = WalFooter::parse(data, object_size) {
            check_footer(&footer, data.len(), object_size);
        }
    }
    // And with a size smaller than the data: always an error.
    if size > 0 {
        assert!(WalFooter::parse(data, size - 1).is_err());
    }
});
