use super::*;

fn seg(first: i64, last: i64, bytes: u64, ts: i64) -> SegmentSpan {
    SegmentSpan {
        first_offset: first,
        last_offset: last,
        bytes,
        max_timestamp: ts,
    }
}

/// Contiguous segments of `sizes` bytes, ten offsets and 100 ms each.
fn run(sizes: &[u64]) -> Vec<SegmentSpan> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &b)| seg(i as i64 * 10, i as i64 * 10 + 9, b, 1_000 + i as i64 * 100))
        .collect()
}

const KB: u64 = 1024;
const MB: u64 = 1024 * 1024;
const GB: u64 = 1024 * MB;
const WEEK: i64 = 7 * 24 * 3600 * 1000;

#[test]
fn tiers_grow_by_one_per_factor_of_the_fanout_above_the_base() {
    assert_eq!(tier(0, 8), 0);
    assert_eq!(tier(MB - 1, 8), 0);
    assert_eq!(tier(MB, 8), 1);
    assert_eq!(tier(8 * MB - 1, 8), 1);
    assert_eq!(tier(8 * MB, 8), 2);
    assert_eq!(tier(GB, 8), 4);
    assert_eq!(tier(u64::MAX, 8), 15);
    // A fanout below 2 is taken as 2.
    assert_eq!(tier(4 * MB, 1), 3);
}

#[test]
fn fewer_than_fanout_segments_of_a_tier_stay_apart() {
    assert_eq!(plan_merge(&run(&[30 * KB; 7]), 8, GB, WEEK), None);
    assert_eq!(plan_merge(&run(&[30 * KB; 8]), 8, GB, WEEK), Some(1..8));
    // More than fanout: the whole run, within the byte cap, but for the
    // log's first segment (whose oldest record the index does not know).
    assert_eq!(plan_merge(&run(&[30 * KB; 20]), 8, GB, WEEK), Some(1..20));
    // Merging is off below a fanout of 2.
    assert_eq!(plan_merge(&run(&[30 * KB; 20]), 1, GB, WEEK), None);
}

#[test]
fn the_first_run_of_one_tier_is_merged_older_bigger_tiers_are_left() {
    // Two tier-1 segments, then eight tier-0 ones.
    let mut sizes = vec![2 * MB, 3 * MB];
    sizes.extend([10 * KB; 8]);
    assert_eq!(plan_merge(&run(&sizes), 8, GB, WEEK), Some(2..10));
    // A tier-1 segment between two runs of four tier-0 ones: no run of 8.
    let mut sizes = vec![10 * KB; 4];
    sizes.push(2 * MB);
    sizes.extend([10 * KB; 4]);
    assert_eq!(plan_merge(&run(&sizes), 8, GB, WEEK), None);
}

#[test]
fn a_merge_stays_within_segment_bytes_and_segment_ms() {
    // Eight segments of 300 MiB (tier 3 at fanout 8): at most three fit in 1 GiB.
    assert_eq!(plan_merge(&run(&[300 * MB; 8]), 8, GB, WEEK), Some(1..4));
    // Segments 100 ms apart with segment.ms of 250 ms: two at most (their
    // records span from the newest of the segment before).
    assert_eq!(plan_merge(&run(&[10 * KB; 8]), 8, GB, 250), Some(1..3));
    // Nothing fits two: no merge.
    assert_eq!(plan_merge(&run(&[600 * MB; 8]), 8, GB, WEEK), None);
    assert_eq!(plan_merge(&run(&[10 * KB; 8]), 8, GB, 50), None);
}

#[test]
fn a_gap_in_offsets_splits_a_run() {
    let mut segs = run(&[10 * KB; 8]);
    for s in &mut segs[4..] {
        s.first_offset += 1000;
        s.last_offset += 1000;
    }
    assert_eq!(plan_merge(&segs, 8, GB, WEEK), None);
    assert_eq!(plan_merge(&segs, 4, GB, WEEK), Some(1..4));
}

/// Segments of one tier-0 size made and merged as the maintenance loop
/// would, for a long time: the count stays under fanout per tier, and
/// every offset stays covered once.
#[test]
fn a_long_steady_trickle_keeps_a_bounded_number_of_segments() {
    let fanout = 8;
    let mut segs: Vec<SegmentSpan> = Vec::new();
    let mut most = 0;
    for i in 0..20_000i64 {
        // One compaction: 30 KiB, ten offsets, five minutes of records.
        segs.push(seg(i * 10, i * 10 + 9, 30 * KB, i * 300_000));
        while let Some(r) = plan_merge(&segs, fanout, GB, WEEK) {
            let merged = seg(
                segs[r.start].first_offset,
                segs[r.end - 1].last_offset,
                segs[r.clone()].iter().map(|s| s.bytes).sum(),
                segs[r.end - 1].max_timestamp,
            );
            segs.splice(r, [merged]);
        }
        most = most.max(segs.len());
    }
    // 20,000 compactions (69 days) of 30 KiB, 586 MiB: a few tiers of at
    // most fanout - 1 segments, and the segments a week long each (which
    // segment.ms keeps apart, as retention would delete them).
    let weeks = 20_000 * 300_000 / WEEK as usize;
    assert!(
        most <= 4 * (fanout - 1) + weeks + 1,
        "{most} segments at once"
    );
    for w in segs.windows(2) {
        assert_eq!(w[0].last_offset + 1, w[1].first_offset);
        assert!(w[1].max_timestamp - w[0].max_timestamp <= WEEK);
    }
    assert_eq!(segs[0], seg(0, 9, 30 * KB, 0), "the first segment as made");
    assert_eq!(segs.last().map(|s| s.last_offset), Some(199_999));
    assert!(segs.iter().all(|s| s.bytes <= GB));
}
