//! Fuzzes the segment `.index` and `.timeindex` parsers and their lookups.
//!
//! Input: a big-endian u64 log size, then the index bytes. Lookup targets are
//! the input read as big-endian i64s, plus edge values and entry keys ± 1.

#![no_main]

use bytes::Bytes;
use floe_storage::segment::{OFFSET_ENTRY_LEN, OffsetIndex, TIME_ENTRY_LEN, TimeIndex};
use libfuzzer_sys::fuzz_target;

/// Indexes up to this many entries get their lookups checked against a linear scan.
const CHECK_LINEAR_UP_TO: usize = 2048;

fn targets(data: &[u8]) -> Vec<i64> {
    let mut t: Vec<i64> = data
        .chunks_exact(8)
        .take(32)
        .map(|c| i64::from_be_bytes(c.try_into().unwrap_or_default()))
        .collect();
    t.extend([i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX]);
    t
}

fn fuzz_offset_index(index: Bytes, log_size: u64, data: &[u8]) {
    let Ok(idx) = OffsetIndex::parse(index) else {
        return;
    };
    let n = idx.len();
    assert_eq!(idx.is_empty(), n == 0);
    // parse refuses a base that a u32 delta could push past i64::MAX.
    assert!((0..=i64::MAX - u32::MAX as i64).contains(&idx.base_offset()));
    for i in [
        0,
        1,
        n / 2,
        n.saturating_sub(1),
        n,
        n + 1,
        usize::MAX / OFFSET_ENTRY_LEN,
        usize::MAX,
    ] {
        assert_eq!(idx.entry(i).is_some(), i < n);
    }
    let valid = idx.validate(log_size).is_ok();
    let mut ts = targets(data);
    for i in [0, 1, n / 2, n.saturating_sub(1)] {
        if let Some((off, _)) = idx.entry(i) {
            ts.extend([off.saturating_sub(1), off, off.saturating_add(1)]);
        }
    }
    for &t in &ts {
        let pos = idx.lookup(t);
        if valid {
            assert!(n == 0 || (pos as u64) < log_size.max(1));
            if n <= CHECK_LINEAR_UP_TO {
                let want = (0..n)
                    .filter_map(|i| idx.entry(i))
                    .take_while(|&(off, _)| off <= t)
                    .last()
                    .map_or(0, |(_, p)| p);
                assert_eq!(pos, want, "target {t}");
            }
        }
    }
}

fn fuzz_time_index(index: Bytes, log_size: u64, data: &[u8]) {
    let Ok(idx) = TimeIndex::parse(index) else {
        return;
    };
    let n = idx.len();
    assert_eq!(idx.is_empty(), n == 0);
    for i in [
        0,
        1,
        n / 2,
        n.saturating_sub(1),
        n,
        n + 1,
        usize::MAX / TIME_ENTRY_LEN,
        usize::MAX,
    ] {
        assert_eq!(idx.entry(i).is_some(), i < n);
    }
    let valid = idx.validate(log_size).is_ok();
    let mut ts = targets(data);
    for i in [0, 1, n / 2, n.saturating_sub(1)] {
        if let Some((t, _, _)) = idx.entry(i) {
            ts.extend([t.saturating_sub(1), t, t.saturating_add(1)]);
        }
    }
    for &t in &ts {
        let pos = idx.lookup(t);
        if valid && n <= CHECK_LINEAR_UP_TO {
            let want = (0..n)
                .filter_map(|i| idx.entry(i))
                .take_while(|&(ts, _, _)| ts < t)
                .last()
                .map_or(0, |(_, _, p)| p);
            assert_eq!(pos, want, "target {t}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<8>() else {
        return;
    };
    let log_size = u64::from_be_bytes(*head);
    let index = Bytes::copy_from_slice(rest);
    fuzz_offset_index(index.clone(), log_size, data);
    fuzz_time_index(index, log_size, data);
});
