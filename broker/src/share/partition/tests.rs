//! Every transition of the share-partition state machine.

use floe_types::Offset;

use super::*;

fn a() -> MemberId {
    MemberId::new("member-a")
}

fn b() -> MemberId {
    MemberId::new("member-b")
}

fn config() -> ShareConfig {
    ShareConfig {
        lock_duration_ms: 1_000,
        delivery_count_limit: 3,
        max_record_locks: 10,
        backoff: Backoff::default(),
        max_delayed: 4,
        dead_letter: false,
    }
}

fn range(first: i64, last: i64, delivery_count: u16) -> Acquired {
    Acquired {
        first: Offset(first),
        last: Offset(last),
        delivery_count,
    }
}

/// A share-partition starting at 0 whose records 0..n are acquired by `m`.
fn acquired(n: u32, m: &MemberId) -> SharePartition {
    let mut sp = SharePartition::new(config(), Offset(0));
    let got = sp.acquire(m, n, Offset(100), 0);
    assert_eq!(got, vec![range(0, i64::from(n) - 1, 1)]);
    sp
}

#[test]
fn acquire_takes_new_records_up_to_max_records_with_delivery_count_one() {
    let mut sp = SharePartition::new(config(), Offset(5));
    assert_eq!(sp.acquire(&a(), 3, Offset(100), 0), vec![range(5, 7, 1)]);
    assert_eq!(sp.start_offset(), Offset(5));
    assert_eq!(sp.end_offset(), Offset(8));
    assert_eq!(sp.in_flight(), 3);
    assert_eq!(
        sp.slot(6),
        Some(&Slot::Acquired {
            deliveries: 1,
            member: a(),
            until_ms: 1_000
        })
    );
}

#[test]
fn acquire_stops_at_the_high_watermark() {
    let mut sp = SharePartition::new(config(), Offset(0));
    assert_eq!(sp.acquire(&a(), 10, Offset(4), 0), vec![range(0, 3, 1)]);
    assert_eq!(sp.acquire(&a(), 10, Offset(4), 0), vec![]);
    assert_eq!(sp.acquire(&a(), 10, Offset(6), 0), vec![range(4, 5, 1)]);
}

#[test]
fn acquire_stops_at_the_record_lock_cap_and_resumes_when_the_window_moves() {
    let mut sp = SharePartition::new(config(), Offset(0));
    assert_eq!(sp.acquire(&a(), 100, Offset(100), 0), vec![range(0, 9, 1)]);
    assert_eq!(sp.in_flight(), 10);
    assert_eq!(sp.acquire(&b(), 100, Offset(100), 0), vec![]);
    // Accepting out of order does not move the start: still capped.
    sp.acknowledge(&a(), &AckBatch::all(5, 9, AckType::Accept), 0)
        .unwrap();
    assert_eq!(sp.start_offset(), Offset(0));
    assert_eq!(sp.acquire(&b(), 100, Offset(100), 0), vec![]);
    // The prefix is done: the window slides and frees room for as many.
    sp.acknowledge(&a(), &AckBatch::all(0, 4, AckType::Accept), 0)
        .unwrap();
    assert_eq!(sp.start_offset(), Offset(10));
    assert_eq!(sp.in_flight(), 0);
    assert_eq!(
        sp.acquire(&b(), 100, Offset(100), 0),
        vec![range(10, 19, 1)]
    );
}

#[test]
fn first_acquirable_is_the_oldest_due_redelivery_else_the_end() {
    let mut sp = acquired(4, &a());
    assert_eq!(sp.first_acquirable(0), Offset(4));
    sp.acknowledge(&a(), &AckBatch::all(2, 2, AckType::Release), 0)
        .unwrap();
    assert_eq!(sp.first_acquirable(0), Offset(2));
    // Redeliveries at or past the limit are left for a later read.
    assert_eq!(sp.acquire(&b(), 10, Offset(2), 0), vec![]);
    assert_eq!(sp.first_acquirable(5_000), Offset(0));
}

#[test]
fn two_members_never_acquire_the_same_record() {
    let mut sp = SharePartition::new(config(), Offset(0));
    assert_eq!(sp.acquire(&a(), 3, Offset(8), 0), vec![range(0, 2, 1)]);
    assert_eq!(sp.acquire(&b(), 3, Offset(8), 0), vec![range(3, 5, 1)]);
    assert_eq!(sp.acquire(&a(), 3, Offset(8), 0), vec![range(6, 7, 1)]);
    assert_eq!(sp.acquire(&b(), 3, Offset(8), 0), vec![]);
}

#[test]
fn accept_moves_the_start_over_the_acknowledged_prefix_only() {
    let mut sp = acquired(4, &a());
    sp.acknowledge(&a(), &AckBatch::all(1, 2, AckType::Accept), 10)
        .unwrap();
    assert_eq!(sp.start_offset(), Offset(0));
    assert_eq!(sp.slot(1), Some(&Slot::Acknowledged));
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Accept), 10)
        .unwrap();
    assert_eq!(sp.start_offset(), Offset(3));
    assert_eq!(sp.in_flight(), 1);
    // An accepted record is never acquired again, even long after; the
    // one left, whose lock expired, is.
    assert_eq!(
        sp.acquire(&b(), 10, Offset(4), 1_000_000),
        vec![range(3, 3, 2)]
    );
}

#[test]
fn release_makes_a_record_available_again_with_a_higher_delivery_count() {
    let mut sp = acquired(3, &a());
    sp.acknowledge(&a(), &AckBatch::all(1, 1, AckType::Release), 10)
        .unwrap();
    assert_eq!(
        sp.slot(1),
        Some(&Slot::Available {
            deliveries: 1,
            not_before_ms: 0
        })
    );
    // Redeliveries come first, then new records.
    assert_eq!(
        sp.acquire(&b(), 2, Offset(100), 20),
        vec![range(1, 1, 2), range(3, 3, 1)]
    );
}

#[test]
fn reject_archives_a_record_for_good() {
    let mut sp = acquired(2, &a());
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Reject), 10)
        .unwrap();
    assert_eq!(sp.start_offset(), Offset(1));
    assert_eq!(sp.acquire(&b(), 10, Offset(2), 5_000), vec![range(1, 1, 2)]);
}

#[test]
fn gap_archives_an_offset_without_a_record() {
    let mut sp = acquired(3, &a());
    sp.acknowledge(&a(), &AckBatch::all(1, 1, AckType::Gap), 10)
        .unwrap();
    assert_eq!(sp.slot(1), Some(&Slot::Archived));
}

#[test]
fn renew_extends_the_lock_and_keeps_the_delivery_count() {
    let mut sp = acquired(1, &a());
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Renew), 900)
        .unwrap();
    assert_eq!(
        sp.slot(0),
        Some(&Slot::Acquired {
            deliveries: 1,
            member: a(),
            until_ms: 1_900
        })
    );
    // Past the first lock, before the renewed one: still held.
    assert_eq!(sp.expire(1_500), 0);
    assert_eq!(sp.acquire(&b(), 10, Offset(1), 1_500), vec![]);
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Accept), 1_800)
        .unwrap();
    assert_eq!(sp.start_offset(), Offset(1));
}

#[test]
fn per_offset_types_apply_each_to_its_offset() {
    let mut sp = acquired(3, &a());
    let batch = AckBatch {
        first: Offset(0),
        last: Offset(2),
        types: vec![AckType::Accept, AckType::Release, AckType::Reject],
    };
    sp.acknowledge(&a(), &batch, 10).unwrap();
    assert_eq!(sp.start_offset(), Offset(1));
    assert!(matches!(sp.slot(1), Some(Slot::Available { .. })));
    assert_eq!(sp.slot(2), Some(&Slot::Archived));
}

#[test]
fn an_acknowledgement_of_another_members_record_refuses_the_whole_batch() {
    let mut sp = SharePartition::new(config(), Offset(0));
    sp.acquire(&a(), 2, Offset(100), 0);
    sp.acquire(&b(), 2, Offset(100), 0);
    let before = sp.snapshot();
    assert_eq!(
        sp.acknowledge(&a(), &AckBatch::all(0, 3, AckType::Accept), 10),
        Err(ShareError::InvalidRecordState { offset: Offset(2) })
    );
    assert_eq!(sp.snapshot(), before);
    assert!(matches!(sp.slot(0), Some(Slot::Acquired { .. })));
}

#[test]
fn acknowledging_twice_or_outside_the_window_is_refused() {
    let mut sp = acquired(2, &a());
    sp.acknowledge(&a(), &AckBatch::all(1, 1, AckType::Accept), 10)
        .unwrap();
    assert_eq!(
        sp.acknowledge(&a(), &AckBatch::all(1, 1, AckType::Accept), 10),
        Err(ShareError::InvalidRecordState { offset: Offset(1) })
    );
    // Beyond the end offset: never acquired.
    assert_eq!(
        sp.acknowledge(&a(), &AckBatch::all(0, 5, AckType::Accept), 10),
        Err(ShareError::InvalidRecordState { offset: Offset(5) })
    );
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Accept), 10)
        .unwrap();
    // Below the start offset: done already.
    assert_eq!(
        sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Accept), 10),
        Err(ShareError::InvalidRecordState { offset: Offset(0) })
    );
}

#[test]
fn malformed_batches_are_invalid_requests() {
    let mut sp = acquired(3, &a());
    assert!(matches!(
        sp.acknowledge(&a(), &AckBatch::all(2, 1, AckType::Accept), 10),
        Err(ShareError::InvalidRequest(_))
    ));
    let wrong_count = AckBatch {
        first: Offset(0),
        last: Offset(2),
        types: vec![AckType::Accept, AckType::Accept],
    };
    assert!(matches!(
        sp.acknowledge(&a(), &wrong_count, 10),
        Err(ShareError::InvalidRequest(_))
    ));
    let none = AckBatch {
        first: Offset(0),
        last: Offset(0),
        types: vec![],
    };
    assert!(matches!(
        sp.acknowledge(&a(), &none, 10),
        Err(ShareError::InvalidRequest(_))
    ));
    assert_eq!(AckType::from_code(5), None);
    for code in 0..=4 {
        assert_eq!(AckType::from_code(code).map(AckType::code), Some(code));
    }
}

#[test]
fn an_expired_lock_makes_the_record_available_with_its_count() {
    let mut sp = acquired(2, &a());
    assert_eq!(sp.next_deadline(0), Some(1_000));
    assert_eq!(sp.expire(999), 0);
    assert_eq!(sp.expire(1_000), 2);
    assert_eq!(
        sp.slot(0),
        // No backoff: available at once, whatever the clock (0).
        Some(&Slot::Available {
            deliveries: 1,
            not_before_ms: 0
        })
    );
    // The late member's acknowledgement is refused; another gets them.
    assert_eq!(
        sp.acknowledge(&a(), &AckBatch::all(0, 1, AckType::Accept), 1_001),
        Err(ShareError::InvalidRecordState { offset: Offset(0) })
    );
    assert_eq!(sp.acquire(&b(), 10, Offset(2), 1_001), vec![range(0, 1, 2)]);
}

#[test]
fn acquire_and_acknowledge_expire_locks_themselves() {
    let mut sp = acquired(1, &a());
    assert_eq!(
        sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Accept), 1_000),
        Err(ShareError::InvalidRecordState { offset: Offset(0) })
    );
    let mut sp = acquired(1, &a());
    assert_eq!(sp.acquire(&b(), 1, Offset(1), 1_000), vec![range(0, 0, 2)]);
}

#[test]
fn the_delivery_limit_archives_on_release_and_on_expiry() {
    // Limit 3: delivered 3 times, then archived.
    let mut sp = acquired(2, &a());
    sp.acknowledge(&a(), &AckBatch::all(0, 1, AckType::Release), 1)
        .unwrap();
    assert_eq!(sp.acquire(&a(), 10, Offset(2), 2), vec![range(0, 1, 2)]);
    sp.acknowledge(&a(), &AckBatch::all(0, 1, AckType::Release), 3)
        .unwrap();
    assert_eq!(sp.acquire(&a(), 10, Offset(2), 4), vec![range(0, 1, 3)]);
    // Third delivery: a release archives offset 0, an expiry offset 1.
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Release), 5)
        .unwrap();
    assert_eq!(sp.start_offset(), Offset(1));
    assert_eq!(sp.expire(10_000), 1);
    assert_eq!(sp.start_offset(), Offset(2));
    assert_eq!(sp.acquire(&b(), 10, Offset(2), 10_001), vec![]);
}

#[test]
fn a_leaving_member_releases_only_its_own_records() {
    let mut sp = SharePartition::new(config(), Offset(0));
    sp.acquire(&a(), 2, Offset(100), 0);
    sp.acquire(&b(), 2, Offset(100), 0);
    assert_eq!(sp.release_member(&a(), 50), 2);
    assert!(matches!(
        sp.slot(0),
        Some(Slot::Available { deliveries: 1, .. })
    ));
    assert!(matches!(sp.slot(2), Some(Slot::Acquired { member, .. }) if *member == b()));
    assert_eq!(sp.release_member(&a(), 50), 0);
}

#[test]
fn backoff_delays_a_redelivery_without_holding_up_the_records_behind() {
    let mut cfg = config();
    cfg.backoff = Backoff {
        base_ms: 100,
        max_ms: 150,
    };
    let mut sp = SharePartition::new(cfg, Offset(0));
    sp.acquire(&a(), 1, Offset(100), 0);
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Release), 10)
        .unwrap();
    assert_eq!(sp.next_deadline(10), Some(110));
    // Not due: the next record is acquired instead.
    assert_eq!(sp.acquire(&b(), 1, Offset(100), 50), vec![range(1, 1, 1)]);
    assert_eq!(sp.acquire(&b(), 1, Offset(100), 110), vec![range(0, 0, 2)]);
    // The second release waits twice as long, capped at the maximum.
    sp.acknowledge(&b(), &AckBatch::all(0, 0, AckType::Release), 200)
        .unwrap();
    assert_eq!(sp.next_deadline(200), Some(350));
    assert_eq!(Backoff::default().delay_ms(4), 0);
    assert_eq!(
        Backoff {
            base_ms: 10,
            max_ms: 1_000
        }
        .delay_ms(3),
        40
    );
}

#[test]
fn the_next_deadline_is_the_earliest_lock() {
    let mut sp = SharePartition::new(config(), Offset(0));
    assert_eq!(sp.next_deadline(0), None);
    sp.acquire(&a(), 1, Offset(100), 0);
    sp.acquire(&b(), 1, Offset(100), 500);
    assert_eq!(sp.next_deadline(500), Some(1_000));
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Accept), 600)
        .unwrap();
    assert_eq!(sp.next_deadline(600), Some(1_500));
}

#[test]
fn a_log_start_moving_past_the_window_drops_what_is_below_it() {
    let mut sp = acquired(4, &a());
    sp.advance_log_start(Offset(2));
    assert_eq!(sp.start_offset(), Offset(2));
    assert_eq!(sp.in_flight(), 2);
    sp.advance_log_start(Offset(50));
    assert_eq!(sp.start_offset(), Offset(50));
    assert_eq!(sp.in_flight(), 0);
    assert_eq!(sp.acquire(&a(), 1, Offset(100), 0), vec![range(50, 50, 1)]);
    // A start behind the share-partition's changes nothing.
    sp.advance_log_start(Offset(10));
    assert_eq!(sp.start_offset(), Offset(50));
}

#[test]
fn a_restored_snapshot_redelivers_acquired_records_and_never_accepted_ones() {
    let mut sp = acquired(5, &a());
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Accept), 10)
        .unwrap();
    sp.acknowledge(&a(), &AckBatch::all(2, 2, AckType::Accept), 10)
        .unwrap();
    sp.acknowledge(&a(), &AckBatch::all(3, 3, AckType::Release), 10)
        .unwrap();
    let snap = sp.snapshot();
    assert_eq!(snap.start, Offset(1));
    assert_eq!(
        snap.ranges,
        vec![
            SnapshotRange {
                first: Offset(1),
                last: Offset(1),
                state: DurableState::Available { not_before_ms: 0 },
                deliveries: 1,
            },
            SnapshotRange {
                first: Offset(2),
                last: Offset(2),
                state: DurableState::Acknowledged,
                deliveries: 0,
            },
            // Released without a backoff: available at once, like the
            // acquired record after it (restored as available).
            SnapshotRange {
                first: Offset(3),
                last: Offset(4),
                state: DurableState::Available { not_before_ms: 0 },
                deliveries: 1,
            },
        ]
    );
    // A new owner: the locks are gone, the counts and the accepts kept.
    let mut resumed = SharePartition::restore(config(), &snap).unwrap();
    assert_eq!(resumed.snapshot(), snap);
    assert_eq!(
        resumed.acquire(&b(), 10, Offset(6), 20),
        vec![range(1, 1, 2), range(3, 4, 2), range(5, 5, 1)]
    );
}

/// Found by the share checker under pauses of the metadata leader (seed
/// 1402843990, tests/histories/share-pause-1402843990.json.gz): a record
/// acquired for its last delivery is stored as available at the limit;
/// the next owner delivered it a fourth time instead of ending it.
#[test]
fn a_record_stored_available_at_the_limit_is_not_delivered_again_by_a_new_owner() {
    let snap = ShareSnapshot {
        start: Offset(0),
        ranges: vec![
            SnapshotRange {
                first: Offset(0),
                last: Offset(0),
                state: DurableState::Available { not_before_ms: 0 },
                deliveries: 3,
            },
            SnapshotRange {
                first: Offset(1),
                last: Offset(1),
                state: DurableState::Available { not_before_ms: 0 },
                deliveries: 2,
            },
        ],
        ..ShareSnapshot::default()
    };
    // Without a dead-letter topic: archived.
    let mut sp = SharePartition::restore(config(), &snap).unwrap();
    assert_eq!(sp.acquire(&b(), 10, Offset(2), 0), vec![range(1, 1, 3)]);
    assert_eq!(sp.slot(0), None, "archived: the start offset moved past it");
    assert_eq!(sp.start_offset(), Offset(1));
    // With one: waiting to be dead-lettered, never delivered.
    let dlq = ShareConfig {
        dead_letter: true,
        ..config()
    };
    let mut sp = SharePartition::restore(dlq, &snap).unwrap();
    assert_eq!(sp.acquire(&b(), 10, Offset(2), 0), vec![range(1, 1, 3)]);
    assert_eq!(sp.dead_letters_pending(), 1);
    assert_eq!(
        sp.next_dead_letter().map(|d| (d.offset, d.reason)),
        Some((Offset(0), DeadLetterReason::DeliveryLimit))
    );
}

#[test]
fn a_restored_snapshot_with_a_done_prefix_starts_after_it() {
    let snap = ShareSnapshot {
        start: Offset(7),
        ranges: vec![SnapshotRange {
            first: Offset(7),
            last: Offset(8),
            state: DurableState::Archived,
            deliveries: 0,
        }],
        ..ShareSnapshot::default()
    };
    let sp = SharePartition::restore(config(), &snap).unwrap();
    assert_eq!(sp.start_offset(), Offset(9));
    assert_eq!(sp.in_flight(), 0);
}

#[test]
fn a_corrupt_snapshot_is_refused() {
    let hole = ShareSnapshot {
        start: Offset(0),
        ranges: vec![SnapshotRange {
            first: Offset(1),
            last: Offset(1),
            state: DurableState::Acknowledged,
            deliveries: 0,
        }],
        ..ShareSnapshot::default()
    };
    assert!(matches!(
        SharePartition::restore(config(), &hole),
        Err(ShareError::CorruptSnapshot(_))
    ));
    let inverted = ShareSnapshot {
        start: Offset(0),
        ranges: vec![SnapshotRange {
            first: Offset(0),
            last: Offset(-5),
            state: DurableState::Acknowledged,
            deliveries: 0,
        }],
        ..ShareSnapshot::default()
    };
    assert!(SharePartition::restore(config(), &inverted).is_err());
    let huge = ShareSnapshot {
        start: Offset(0),
        ranges: vec![SnapshotRange {
            first: Offset(0),
            last: Offset(i64::MAX - 1),
            state: DurableState::Available { not_before_ms: 0 },
            deliveries: 1,
        }],
        ..ShareSnapshot::default()
    };
    assert!(SharePartition::restore(config(), &huge).is_err());
    let wide_parked = ShareSnapshot {
        start: Offset(0),
        ranges: vec![],
        parked: vec![SnapshotRange {
            first: Offset(i64::MIN),
            last: Offset(-1),
            state: DurableState::Available { not_before_ms: 0 },
            deliveries: 0,
        }],
        ..ShareSnapshot::default()
    };
    assert!(SharePartition::restore(config(), &wide_parked).is_err());
}

/// Acquires with `arrivals[offset]` for the offsets entering the window
/// (deliver beyond them).
fn acquire_classified(
    sp: &mut SharePartition,
    m: &MemberId,
    n: u32,
    limit: i64,
    now: u64,
    arrivals: &[(i64, Arrival)],
) -> Vec<Acquired> {
    sp.acquire_with(m, n, Offset(0), Offset(limit), now, &mut |o| {
        Some(
            arrivals
                .iter()
                .find(|(at, _)| *at == o.0)
                .map_or(Arrival::Deliver, |(_, a)| *a),
        )
    })
}

#[test]
fn filtered_records_are_archived_at_once_and_never_acquired() {
    let mut sp = SharePartition::new(config(), Offset(0));
    let arrivals = [
        (0, Arrival::Filtered),
        (1, Arrival::Filtered),
        (3, Arrival::Filtered),
    ];
    let got = acquire_classified(&mut sp, &a(), 10, 5, 0, &arrivals);
    assert_eq!(got, vec![range(2, 2, 1), range(4, 4, 1)]);
    // The start moved over the filtered prefix; 3 waits behind 2.
    assert_eq!(sp.start_offset(), Offset(2));
    assert_eq!(sp.slot(3), Some(&Slot::Archived));
    sp.acknowledge(&a(), &AckBatch::all(2, 2, AckType::Accept), 0)
        .unwrap();
    assert_eq!(sp.start_offset(), Offset(4));
    assert_eq!(sp.take_stats().filtered, 3);
    // A long run of filtered records does not fill the window.
    let many: Vec<(i64, Arrival)> = (5..100).map(|o| (o, Arrival::Filtered)).collect();
    sp.acknowledge(&a(), &AckBatch::all(4, 4, AckType::Accept), 0)
        .unwrap();
    let got = acquire_classified(&mut sp, &a(), 10, 102, 0, &many);
    assert_eq!(got, vec![range(100, 101, 1)]);
    assert_eq!(sp.start_offset(), Offset(100));
}

#[test]
fn a_delayed_record_is_parked_and_does_not_hold_up_the_records_behind() {
    let mut sp = SharePartition::new(config(), Offset(0));
    let arrivals = [(1, Arrival::DueAt(5_000)), (2, Arrival::DueAt(50))];
    // 2 is due already at 100: delivered at once.
    let got = acquire_classified(&mut sp, &a(), 10, 4, 100, &arrivals);
    assert_eq!(got, vec![range(0, 0, 1), range(2, 3, 1)]);
    assert_eq!(sp.parked(), 1);
    sp.acknowledge(&a(), &AckBatch::all(0, 3, AckType::Accept), 100)
        .unwrap_err();
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Accept), 100)
        .unwrap();
    sp.acknowledge(&a(), &AckBatch::all(2, 3, AckType::Accept), 100)
        .unwrap();
    // The start moved over the parked record.
    assert_eq!(sp.start_offset(), Offset(4));
    assert_eq!(sp.in_flight(), 0);
    // Not before its time, whoever asks; the deadline is its due time.
    assert_eq!(sp.first_acquirable(4_999), Offset(4));
    assert!(sp.acquire(&b(), 10, Offset(4), 4_999).is_empty());
    assert_eq!(sp.next_deadline(4_999), Some(5_000));
    // Due: the oldest acquirable offset, acquired with count 1, 7 ms late.
    assert_eq!(sp.first_acquirable(5_007), Offset(1));
    assert_eq!(sp.acquire(&b(), 10, Offset(4), 5_007), vec![range(1, 1, 1)]);
    let stats = sp.take_stats();
    assert_eq!((stats.delayed, stats.lateness_ms), (1, vec![7]));
    sp.acknowledge(&b(), &AckBatch::all(1, 1, AckType::Accept), 5_010)
        .unwrap();
    assert_eq!(sp.parked(), 0);
    // Never again.
    assert_eq!(sp.first_acquirable(9_000), Offset(4));
}

#[test]
fn a_parked_record_released_or_expired_comes_back_and_is_archived_at_the_limit() {
    let mut sp = SharePartition::new(config(), Offset(0));
    acquire_classified(&mut sp, &a(), 10, 2, 0, &[(0, Arrival::DueAt(10))]);
    sp.acknowledge(&a(), &AckBatch::all(1, 1, AckType::Accept), 0)
        .unwrap();
    assert_eq!(sp.start_offset(), Offset(2));
    assert_eq!(sp.acquire(&a(), 10, Offset(2), 10), vec![range(0, 0, 1)]);
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Release), 10)
        .unwrap();
    // Released: available again (no backoff), count kept.
    assert_eq!(sp.acquire(&b(), 10, Offset(2), 11), vec![range(0, 0, 2)]);
    // Its lock expires: as a release, the third delivery is the last.
    assert_eq!(sp.acquire(&a(), 10, Offset(2), 2_000), vec![range(0, 0, 3)]);
    assert_eq!(sp.expire(3_000), 1);
    assert_eq!(sp.parked(), 0);
    assert!(sp.acquire(&a(), 10, Offset(2), 3_000).is_empty());
}

#[test]
fn a_full_parked_list_keeps_delayed_records_in_the_window_holding_the_start() {
    let mut sp = SharePartition::new(config(), Offset(0));
    // Four fit in the parked list (max_delayed), the fifth waits in the window.
    let arrivals: Vec<(i64, Arrival)> = (0..5).map(|o| (o, Arrival::DueAt(1_000))).collect();
    let got = acquire_classified(&mut sp, &a(), 10, 7, 0, &arrivals);
    assert_eq!(got, vec![range(5, 6, 1)]);
    assert_eq!(sp.parked(), 4);
    assert_eq!(
        sp.slot(4),
        Some(&Slot::Available {
            deliveries: 0,
            not_before_ms: 1_000
        })
    );
    sp.acknowledge(&a(), &AckBatch::all(5, 6, AckType::Accept), 0)
        .unwrap();
    assert_eq!(sp.start_offset(), Offset(4));
    let stats = sp.take_stats();
    assert_eq!((stats.delayed, stats.delayed_in_window), (5, 1));
    // All five come due together, in offset order.
    assert_eq!(sp.acquire(&b(), 10, Offset(7), 1_000), vec![range(0, 4, 1)]);
}

#[test]
fn parked_records_survive_the_snapshot_with_their_due_times() {
    let mut sp = SharePartition::new(config(), Offset(0));
    let arrivals = [(1, Arrival::DueAt(9_000)), (3, Arrival::DueAt(7_000))];
    acquire_classified(&mut sp, &a(), 10, 5, 0, &arrivals);
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Accept), 0)
        .unwrap();
    // 2 and 4 are still acquired: the start stays at 2, 3 is parked inside
    // the window.
    let snap = sp.snapshot();
    assert_eq!(snap.start, Offset(2));
    assert_eq!(snap.parked.len(), 2);
    let mut back = SharePartition::restore(config(), &snap).unwrap();
    assert_eq!(back.parked(), 2);
    assert_eq!(back.snapshot(), snap);
    // Locks did not survive: 2 and 4 come back now, the parked ones only
    // when due.
    assert_eq!(
        back.acquire(&b(), 10, Offset(5), 100),
        vec![range(2, 2, 2), range(4, 4, 2)]
    );
    back.acknowledge(&b(), &AckBatch::all(2, 2, AckType::Accept), 100)
        .unwrap();
    back.acknowledge(&b(), &AckBatch::all(4, 4, AckType::Accept), 100)
        .unwrap();
    assert_eq!(back.start_offset(), Offset(5));
    assert!(back.acquire(&b(), 10, Offset(5), 6_999).is_empty());
    assert_eq!(
        back.acquire(&b(), 10, Offset(5), 7_000),
        vec![range(3, 3, 1)]
    );
    back.acknowledge(&b(), &AckBatch::all(3, 3, AckType::Accept), 7_000)
        .unwrap();
    assert_eq!(
        back.acquire(&b(), 10, Offset(5), 9_000),
        vec![range(1, 1, 1)]
    );
    // A parked record that is done, or past the end, is a corrupt snapshot.
    let mut bad = snap.clone();
    bad.parked[0].state = DurableState::Acknowledged;
    assert!(SharePartition::restore(config(), &bad).is_err());
    let mut bad = snap;
    bad.parked[1].last = Offset(5);
    assert!(SharePartition::restore(config(), &bad).is_err());
}

#[test]
fn the_log_start_moving_past_a_parked_record_drops_it() {
    let mut sp = SharePartition::new(config(), Offset(0));
    acquire_classified(&mut sp, &a(), 10, 3, 0, &[(0, Arrival::DueAt(1_000))]);
    sp.acknowledge(&a(), &AckBatch::all(1, 2, AckType::Accept), 0)
        .unwrap();
    assert_eq!((sp.start_offset(), sp.parked()), (Offset(3), 1));
    sp.advance_log_start(Offset(1));
    assert_eq!(sp.parked(), 0);
    assert!(sp.acquire(&a(), 10, Offset(3), 2_000).is_empty());
}

#[test]
fn no_verdict_stops_records_entering_and_a_huge_range_is_refused_quickly() {
    let mut sp = SharePartition::new(config(), Offset(0));
    let got = sp.acquire_with(&a(), 10, Offset(0), Offset(10), 0, &mut |o| {
        (o.0 < 2).then_some(Arrival::Deliver)
    });
    assert_eq!(got, vec![range(0, 1, 1)]);
    assert_eq!(sp.end_offset(), Offset(2));
    assert_eq!(
        sp.acknowledge(&a(), &AckBatch::all(0, i64::MAX - 1, AckType::Accept), 0),
        Err(ShareError::InvalidRecordState {
            offset: Offset(i64::MAX - 1)
        })
    );
    assert_eq!(
        sp.acknowledge(&a(), &AckBatch::all(-5, 1, AckType::Accept), 0),
        Err(ShareError::InvalidRecordState { offset: Offset(-5) })
    );
}

#[test]
fn nothing_below_where_the_log_was_read_is_acquired() {
    let mut sp = acquired(4, &a());
    sp.acknowledge(&a(), &AckBatch::all(1, 1, AckType::Release), 0)
        .unwrap();
    // The caller read from 2 (1 was released after it looked): 1 waits.
    let got = sp.acquire_with(&b(), 10, Offset(2), Offset(6), 0, &mut |_| {
        Some(Arrival::Deliver)
    });
    assert_eq!(got, vec![range(4, 5, 1)]);
    assert_eq!(sp.acquire(&b(), 10, Offset(6), 0), vec![range(1, 1, 2)]);
}

#[test]
fn an_expired_lock_backs_off_as_a_release_does() {
    let mut cfg = config();
    cfg.backoff = Backoff {
        base_ms: 100,
        max_ms: 1_000,
    };
    let mut sp = SharePartition::new(cfg, Offset(0));
    sp.acquire(&a(), 2, Offset(100), 0);
    // The locks run out at 1000: available from 1100, not before.
    assert_eq!(sp.expire(1_000), 2);
    assert_eq!(sp.next_deadline(1_000), Some(1_100));
    assert!(sp.acquire(&b(), 10, Offset(2), 1_099).is_empty());
    assert_eq!(sp.first_acquirable(1_099), Offset(2));
    assert_eq!(sp.acquire(&b(), 10, Offset(2), 1_100), vec![range(0, 1, 2)]);
}

fn with_dlq() -> ShareConfig {
    ShareConfig {
        dead_letter: true,
        ..config()
    }
}

fn dead_letter(offset: i64, deliveries: u16, reason: DeadLetterReason, seq: i32) -> DeadLetter {
    DeadLetter {
        offset: Offset(offset),
        deliveries,
        reason,
        producer_epoch: 0,
        sequence: seq,
    }
}

#[test]
fn a_reject_with_a_dead_letter_topic_waits_for_it_and_is_never_acquired_again() {
    let mut sp = SharePartition::new(with_dlq(), Offset(0));
    sp.acquire(&a(), 3, Offset(100), 0);
    sp.acknowledge(&a(), &AckBatch::all(1, 1, AckType::Reject), 10)
        .unwrap();
    assert_eq!(
        sp.slot(1),
        Some(&Slot::DeadLettering {
            deliveries: 1,
            reason: DeadLetterReason::Rejected
        })
    );
    assert_eq!(sp.dead_letters_pending(), 1);
    // Neither acquirable, nor acknowledgeable, nor expiring, nor done.
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Accept), 20)
        .unwrap();
    assert_eq!(sp.start_offset(), Offset(1));
    assert_eq!(
        sp.acknowledge(&a(), &AckBatch::all(1, 1, AckType::Accept), 20),
        Err(ShareError::InvalidRecordState { offset: Offset(1) })
    );
    sp.release_member(&a(), 30);
    assert_eq!(sp.acquire(&b(), 10, Offset(3), 40), vec![range(2, 2, 2)]);
    assert_eq!(sp.next_deadline(40), Some(1_040));
    // Appended under sequence 0: archived, the start moves over it.
    assert_eq!(
        sp.next_dead_letter(),
        Some(dead_letter(1, 1, DeadLetterReason::Rejected, 0))
    );
    assert!(!sp.dead_lettered(Offset(2)), "not the one under way");
    assert!(sp.dead_lettered(Offset(1)));
    assert_eq!(sp.slot(1), None);
    assert_eq!(sp.start_offset(), Offset(2));
    assert_eq!(sp.next_dead_letter(), None);
    assert_eq!(
        sp.dead_letter_progress(),
        DeadLetterProgress {
            producer_epoch: 0,
            next_sequence: 1,
            in_flight: None
        }
    );
}

#[test]
fn a_reject_without_a_dead_letter_topic_archives_at_once() {
    let mut sp = acquired(1, &a());
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Reject), 10)
        .unwrap();
    assert_eq!(sp.start_offset(), Offset(1));
    assert_eq!(sp.next_dead_letter(), None);
}

#[test]
fn releases_and_expiries_at_the_limit_wait_for_the_dead_letter_topic() {
    let mut sp = SharePartition::new(with_dlq(), Offset(0));
    // Limit 3: offset 0 released three times, offset 1 expired three times.
    for round in 0..3u64 {
        let now = round * 2_000;
        let got = sp.acquire(&a(), 2, Offset(2), now);
        assert_eq!(got, vec![range(0, 1, round as u16 + 1)]);
        sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Release), now + 1)
            .unwrap();
        assert_eq!(sp.expire(now + 1_000), 1);
    }
    assert_eq!(sp.dead_letters_pending(), 2);
    assert!(sp.acquire(&b(), 10, Offset(2), 10_000).is_empty());
    // Oldest first; the one under way is repeated until confirmed.
    let first = sp.next_dead_letter().unwrap();
    assert_eq!(first, dead_letter(0, 3, DeadLetterReason::DeliveryLimit, 0));
    assert_eq!(sp.next_dead_letter(), Some(first));
    assert!(sp.dead_lettered(Offset(0)));
    assert_eq!(
        sp.next_dead_letter(),
        Some(dead_letter(1, 3, DeadLetterReason::DeliveryLimit, 1))
    );
}

#[test]
fn the_append_under_way_survives_a_restore_with_its_sequence() {
    let mut sp = SharePartition::new(with_dlq(), Offset(0));
    sp.acquire(&a(), 3, Offset(100), 0);
    sp.acknowledge(&a(), &AckBatch::all(0, 2, AckType::Reject), 10)
        .unwrap();
    sp.next_dead_letter();
    assert!(sp.dead_lettered(Offset(0)));
    // Offset 1 is under way when the owner dies.
    assert_eq!(sp.next_dead_letter().map(|d| d.sequence), Some(1));
    let snap = sp.snapshot();
    assert_eq!(snap.dead_letter.in_flight, Some(Offset(1)));
    let mut resumed = SharePartition::restore(with_dlq(), &snap).unwrap();
    // The new owner repeats that append with the same sequence (the
    // dead-letter partition answers a duplicate), then goes on.
    assert_eq!(
        resumed.next_dead_letter(),
        Some(dead_letter(1, 1, DeadLetterReason::Rejected, 1))
    );
    assert!(resumed.dead_lettered(Offset(1)));
    assert_eq!(resumed.next_dead_letter().map(|d| d.sequence), Some(2));
}

#[test]
fn a_refused_producer_sequence_starts_a_new_epoch_at_sequence_zero() {
    let mut sp = SharePartition::new(with_dlq(), Offset(0));
    sp.acquire(&a(), 1, Offset(100), 0);
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Reject), 10)
        .unwrap();
    sp.next_dead_letter();
    sp.dead_letter_fenced();
    let again = sp.next_dead_letter().unwrap();
    assert_eq!(
        (again.offset, again.producer_epoch, again.sequence),
        (Offset(0), 1, 0)
    );
}

#[test]
fn removing_the_dead_letter_topic_archives_what_waited_for_it() {
    let mut sp = SharePartition::new(with_dlq(), Offset(0));
    sp.acquire(&a(), 2, Offset(100), 0);
    sp.acknowledge(&a(), &AckBatch::all(0, 1, AckType::Reject), 10)
        .unwrap();
    sp.next_dead_letter();
    assert!(
        sp.set_config(config()),
        "records archived: a state to write"
    );
    assert!(!sp.set_config(config()), "nothing left to archive");
    assert_eq!(sp.start_offset(), Offset(2));
    // The abandoned append's sequence is not reused under that epoch.
    assert_eq!(
        sp.dead_letter_progress(),
        DeadLetterProgress {
            producer_epoch: 1,
            next_sequence: 0,
            in_flight: None
        }
    );
}

#[test]
fn a_record_waiting_for_the_dead_letter_topic_gone_from_the_log_is_archived() {
    let mut sp = SharePartition::new(with_dlq(), Offset(0));
    sp.acquire(&a(), 3, Offset(100), 0);
    sp.acknowledge(&a(), &AckBatch::all(0, 1, AckType::Reject), 10)
        .unwrap();
    assert_eq!(sp.next_dead_letter().map(|d| d.offset), Some(Offset(0)));
    sp.dead_letter_lost(Offset(0));
    assert_eq!(sp.start_offset(), Offset(1));
    assert_eq!(sp.dead_letter_progress().producer_epoch, 1);
    // Retention past the next one drops it as well.
    assert_eq!(sp.next_dead_letter().map(|d| d.offset), Some(Offset(1)));
    sp.advance_log_start(Offset(2));
    assert_eq!(sp.next_dead_letter(), None);
    assert_eq!(sp.dead_letter_progress().producer_epoch, 2);
}

fn timer_ref(token: &str) -> TimerRef {
    TimerRef {
        endpoint: floe_storage::EndpointId::new("default"),
        token: std::sync::Arc::from(token),
        size: 0,
    }
}

#[test]
fn a_seal_takes_the_later_due_parked_records_out_and_they_come_back_when_due() {
    let mut sp = SharePartition::new(config(), Offset(0));
    // Five delayed records: four parked (due 4,000 down to 1,000), the
    // fifth waits in the window.
    let arrivals: Vec<(i64, Arrival)> = (0..5)
        .map(|o| (o, Arrival::DueAt(5_000 - 1_000 * o as u64)))
        .collect();
    acquire_classified(&mut sp, &a(), 10, 6, 0, &arrivals);
    assert_eq!((sp.parked(), sp.start_offset()), (4, Offset(4)));
    // Three of four not due: all but the soonest one (a quarter of 4) go.
    assert!(sp.seal_wanted(0));
    let plan = sp.plan_seal(0).unwrap();
    assert_eq!(
        plan.entries.iter().map(|e| e.offset).collect::<Vec<_>>(),
        vec![2, 1, 0]
    );
    assert!(plan.merge.is_empty());
    // One seal at a time.
    assert!(sp.plan_seal(0).is_none() && !sp.seal_wanted(0));
    let first = plan.entries.clone();
    assert!(sp.sealed(&plan, timer_ref("t1"), 3, first));
    // Out of the parked list; the record waiting in the window moved into
    // the room made, so the start moved past it.
    assert_eq!(sp.parked(), 2);
    assert_eq!(sp.start_offset(), Offset(5));
    let snap = sp.snapshot();
    assert_eq!(snap.timers.len(), 1);
    assert_eq!((snap.timers[0].count, snap.timers[0].next), (3, 0));
    // Due in order: 4 at 1,000 (parked), 3 at 2,000 (parked), then 2, 1, 0
    // from the bucket, none before its time.
    sp.acknowledge(&a(), &AckBatch::all(5, 5, AckType::Accept), 0)
        .unwrap();
    let take = |sp: &mut SharePartition, now| {
        let got = sp.acquire(&b(), 10, Offset(6), now);
        for r in &got {
            sp.acknowledge(
                &b(),
                &AckBatch::all(r.first.0, r.last.0, AckType::Accept),
                now,
            )
            .unwrap();
        }
        got
    };
    assert_eq!(take(&mut sp, 2_999), vec![range(3, 4, 1)]);
    assert_eq!(take(&mut sp, 3_000), vec![range(2, 2, 1)]);
    assert_eq!(sp.snapshot().timers[0].next, 1);
    assert!(take(&mut sp, 3_999).is_empty());
    assert_eq!(take(&mut sp, 5_000), vec![range(0, 1, 1)]);
    assert_eq!(sp.parked(), 0);
    // The emptied bucket is retired once.
    assert!(sp.snapshot().timers.is_empty());
    assert_eq!(sp.timers().take_retired(), vec![timer_ref("t1")]);
}

#[test]
fn a_seal_whose_record_changed_meanwhile_is_not_kept() {
    let mut sp = SharePartition::new(config(), Offset(0));
    let arrivals: Vec<(i64, Arrival)> = (0..4)
        .map(|o| (o, Arrival::DueAt(1_000 + o as u64)))
        .collect();
    acquire_classified(&mut sp, &a(), 10, 4, 0, &arrivals);
    let plan = sp.plan_seal(0).unwrap();
    // While the bucket was written, one of its records came due and was
    // delivered.
    assert_eq!(sp.acquire(&a(), 2, Offset(4), 1_001), vec![range(0, 1, 1)]);
    let first = plan.entries.clone();
    assert!(!sp.sealed(&plan, timer_ref("t1"), first.len() as u32, first));
    assert_eq!(sp.parked(), 4);
    assert!(sp.snapshot().timers.is_empty());
    // Another seal may start.
    assert!(!sp.timers().is_sealing());
}

#[test]
fn a_restored_share_partition_keeps_its_buckets_and_refuses_impossible_ones() {
    let bucket = |count, next| super::super::timers::BucketState {
        object: timer_ref("t"),
        count,
        next,
        next_due_ms: 7,
    };
    let snap = ShareSnapshot {
        start: Offset(3),
        timers: vec![bucket(10, 4)],
        ..ShareSnapshot::default()
    };
    let mut sp = SharePartition::restore(config(), &snap).unwrap();
    assert_eq!(sp.snapshot().timers, snap.timers);
    // Nothing loaded yet: the owner reads the chunk holding entry 4.
    let loads = sp.timers().loads();
    assert_eq!((loads[0].count, loads[0].index), (10, 4));
    assert_eq!(sp.next_deadline(0), Some(7));
    for bad in [
        bucket(10, 11),
        bucket(floe_storage::timers::MAX_ENTRIES + 1, 0),
    ] {
        let snap = ShareSnapshot {
            timers: vec![bad],
            ..ShareSnapshot::default()
        };
        assert!(SharePartition::restore(config(), &snap).is_err());
    }
}

/// Issue 41 (clock family): without a backoff a released record is
/// available again at once, whatever the wall clock did. Released while
/// the owner's wall clock ran ahead (a jump forward, corrected since), it
/// is now kept back until that clock's time comes round again (and is
/// written so: a new owner keeps it back too).
#[test]
fn a_record_released_while_the_wall_clock_ran_ahead_is_available_once_it_is_back() {
    let mut sp = SharePartition::new(config(), Offset(0));
    // True time 10 s; the owner's wall clock 60 s ahead.
    let ahead = 70_000;
    assert_eq!(sp.acquire(&a(), 1, Offset(1), ahead), vec![range(0, 0, 1)]);
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Release), ahead)
        .unwrap();
    // The clock is right again: 10.5 s.
    assert_eq!(sp.first_acquirable(10_500), Offset(0));
    assert_eq!(sp.acquire(&b(), 1, Offset(1), 10_500), vec![range(0, 0, 2)]);
}

#[test]
fn an_inspection_counts_each_record_once_by_its_state_and_delivery_count() {
    let mut cfg = config();
    cfg.backoff = Backoff {
        base_ms: 60_000,
        max_ms: 60_000,
    };
    let mut sp = SharePartition::new(cfg, Offset(0));
    // 0..=5 to a; 1 parked until minute 3; then: 0 accepted, 2 released
    // (backing off a minute), 3 rejected, 4 and 5 still locked by a, and
    // 6 acquired by b.
    let arrivals = [(1, Arrival::DueAt(3 * 60_000 + 5))];
    let got = acquire_classified(&mut sp, &a(), 5, 7, 100, &arrivals);
    assert_eq!(got, vec![range(0, 0, 1), range(2, 5, 1)]);
    sp.acknowledge(&a(), &AckBatch::all(0, 0, AckType::Accept), 100)
        .unwrap();
    sp.acknowledge(&a(), &AckBatch::all(2, 2, AckType::Release), 100)
        .unwrap();
    sp.acknowledge(&a(), &AckBatch::all(3, 3, AckType::Reject), 100)
        .unwrap();
    assert_eq!(sp.acquire(&b(), 1, Offset(7), 100), vec![range(6, 6, 1)]);

    let seen = sp.inspect(200, 2);
    assert_eq!((seen.start, seen.end), (2, 7));
    assert!(seen.in_memory);
    // The window holds 2..=6: 2 backing off, 3 archived, 4..=6 acquired.
    assert_eq!(
        (
            seen.available,
            seen.backing_off,
            seen.acquired,
            seen.archived
        ),
        (0, 1, 3, 1)
    );
    assert_eq!((seen.parked, seen.dead_lettering), (1, 0));
    // Not done: 2 (delivered once, released), 4, 5, 6, and parked 1 (never).
    assert_eq!(seen.deliveries, vec![(0, 1), (1, 4)]);
    // Due: 2 a minute after its release, 1 at minute 3.
    assert_eq!(seen.due, vec![(60_000, 1), (3 * 60_000, 1)]);
    // At most two acquired records listed, by offset, with their locks.
    assert_eq!(
        seen.acquired_records,
        vec![
            AcquiredRecord {
                offset: 4,
                member: "member-a".into(),
                deliveries: 1,
                lock_until_ms: 1_100,
            },
            AcquiredRecord {
                offset: 5,
                member: "member-a".into(),
                deliveries: 1,
                lock_until_ms: 1_100,
            },
        ]
    );
    // A look changes nothing.
    assert_eq!(sp.inspect(200, 2), seen);
}
