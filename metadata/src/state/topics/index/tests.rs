//! The committed index's rules, through `ClusterState::apply`.

use crate::command::{Command, NewObject, ObjectSel, OwnershipChange, ProducerBatch, Response};
use crate::controller;
use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch, PartitionKey};
use crate::state::test_support::{obj, owned, pt, range, register, tid};

#[test]
fn commit_appends_to_the_index_and_moves_the_high_watermark() {
    let mut sm = owned();
    let r = sm.apply(Command::Commit {
        now_ms: 0,
        broker: BrokerId(1),
        object: obj(),
        ranges: vec![range(tid(1), 0, 1, 0, 9), range(tid(1), 1, 1, 0, 4)],
    });
    let Response::Committed {
        object: Some(id),
        high_watermarks,
    } = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(high_watermarks.len(), 2);
    assert_eq!(sm.state.topics.objects[&id].refs, 2);
    let p0 = &sm.state.topics.partitions[&PartitionKey {
        topic: tid(1),
        partition: 0,
    }];
    assert_eq!(p0.high_watermark, 10);
    assert_eq!(p0.index.len(), 1);
    // The next commit must start where the last ended.
    let e = sm.error(Command::Commit {
        now_ms: 0,
        broker: BrokerId(1),
        object: obj(),
        ranges: vec![range(tid(1), 0, 1, 0, 9)],
    });
    assert!(matches!(e, MetaError::OffsetMismatch { expected: 10, .. }));
    // A range ending at the largest offset would overflow the high watermark.
    sm.error(Command::Commit {
        now_ms: 0,
        broker: BrokerId(1),
        object: obj(),
        ranges: vec![range(tid(1), 0, 1, 10, i64::MAX)],
    });
    let mut again = range(tid(1), 0, 1, 10, 19);
    again.object = ObjectSel::Existing(id);
    sm.ok(Command::Commit {
        now_ms: 0,
        broker: BrokerId(1),
        object: None,
        ranges: vec![again],
    });
    assert_eq!(sm.state.topics.objects[&id].refs, 3);
}

#[test]
fn stale_epoch_fences_the_whole_commit() {
    let mut sm = owned();
    register(&mut sm, 2, 0);
    // Partition 1 moves to broker 2 (epoch 2); broker 1 still thinks it owns both.
    sm.ok(Command::Reassign {
        changes: vec![OwnershipChange {
            item: pt(tid(1), 1),
            owner: Some(BrokerId(2)),
        }],
    });
    let e = sm.error(Command::Commit {
        now_ms: 0,
        broker: BrokerId(1),
        object: obj(),
        ranges: vec![range(tid(1), 0, 1, 0, 9), range(tid(1), 1, 1, 0, 9)],
    });
    assert!(
        matches!(
            e,
            MetaError::StaleEpoch {
                current: Epoch(2),
                given: Epoch(1),
                ..
            }
        ),
        "{e}"
    );
    // Right epoch, wrong broker.
    let e = sm.error(Command::Commit {
        now_ms: 0,
        broker: BrokerId(1),
        object: obj(),
        ranges: vec![range(tid(1), 1, 2, 0, 9)],
    });
    assert!(matches!(e, MetaError::NotOwner { .. }));
    sm.ok(Command::Commit {
        now_ms: 0,
        broker: BrokerId(2),
        object: obj(),
        ranges: vec![range(tid(1), 1, 2, 0, 9)],
    });
}

#[test]
fn truncate_moves_the_log_start_forward_only_and_releases_objects() {
    let mut sm = owned();
    let p0 = PartitionKey {
        topic: tid(1),
        partition: 0,
    };
    for (first, last) in [(0, 9), (10, 19), (20, 29)] {
        sm.ok(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![range(tid(1), 0, 1, first, last)],
        });
    }
    assert_eq!(sm.state.topics.unreferenced_objects().len(), 0);
    let truncate = |o: i64, epoch: u64, broker: u32| Command::TruncateLog {
        broker: BrokerId(broker),
        partition: p0,
        epoch: Epoch(epoch),
        log_start_offset: o,
    };
    assert!(matches!(
        sm.error(truncate(15, 2, 1)),
        MetaError::StaleEpoch { .. }
    ));
    assert!(matches!(
        sm.error(truncate(15, 1, 2)),
        MetaError::NotOwner { .. }
    ));
    assert!(matches!(
        sm.error(truncate(31, 1, 1)),
        MetaError::InvalidRequest(_)
    ));
    assert_eq!(
        sm.apply(truncate(15, 1, 1)),
        Response::LogStart {
            log_start_offset: 15
        }
    );
    let ps = &sm.state.topics.partitions[&p0];
    assert_eq!(ps.log_start_offset, 15);
    assert_eq!(ps.index.first().map(|e| e.first_offset), Some(10));
    assert_eq!(
        sm.state.topics.unreferenced_objects().len(),
        1,
        "the first WAL object"
    );
    // Backwards is a no-op that reports the current start.
    assert_eq!(
        sm.apply(truncate(5, 1, 1)),
        Response::LogStart {
            log_start_offset: 15
        }
    );
}

#[test]
fn replace_ranges_swaps_exact_runs_for_a_segment() {
    let mut sm = owned();
    let p0 = PartitionKey {
        topic: tid(1),
        partition: 0,
    };
    for (first, last) in [(0, 9), (10, 19), (20, 29)] {
        sm.ok(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![range(tid(1), 0, 1, first, last)],
        });
    }
    let seg = NewObject {
        endpoint: "default".into(),
        key: "segments/x/0/00000000000000000000.t.log".into(),
        size: 30,
    };
    let replace = |first: i64, last: i64, epoch: u64| Command::ReplaceRanges {
        broker: BrokerId(1),
        partition: p0,
        epoch: Epoch(epoch),
        first_offset: first,
        last_offset: last,
        max_timestamp: 7,
        object: seg.clone(),
    };
    assert!(matches!(
        sm.error(replace(0, 19, 3)),
        MetaError::StaleEpoch { .. }
    ));
    assert!(matches!(
        sm.error(replace(1, 19, 1)),
        MetaError::InvalidRequest(_)
    ));
    assert!(matches!(
        sm.error(replace(0, 18, 1)),
        MetaError::InvalidRequest(_)
    ));
    sm.ok(replace(0, 19, 1));
    let ps = &sm.state.topics.partitions[&p0];
    assert_eq!(ps.index.len(), 2);
    assert_eq!((ps.index[0].first_offset, ps.index[0].last_offset), (0, 19));
    assert_eq!(ps.index[0].byte_len, 30);
    assert_eq!(ps.high_watermark, 30, "the committed end does not move");
    assert_eq!(
        sm.state.topics.unreferenced_objects().len(),
        2,
        "both WAL objects"
    );
}

#[test]
fn committed_producer_batches_are_remembered_five_per_producer() {
    let mut sm = owned();
    let p0 = PartitionKey {
        topic: tid(1),
        partition: 0,
    };
    for i in 0..7i64 {
        let mut r = range(tid(1), 0, 1, i * 10, i * 10 + 9);
        let epoch = if i < 6 { 0 } else { 1 };
        r.producers = vec![ProducerBatch {
            producer_id: 42,
            epoch,
            first_sequence: (i * 10) as i32,
            last_sequence: (i * 10 + 9) as i32,
            first_offset: i * 10,
            last_offset: i * 10 + 9,
        }];
        sm.ok(Command::Commit {
            now_ms: 0,
            broker: BrokerId(1),
            object: obj(),
            ranges: vec![r],
        });
        let st = &sm.state.topics.partitions[&p0].producers[&42];
        if i == 5 {
            assert_eq!(st.batches.len(), 5, "only the last five are kept");
            assert_eq!(st.batches[0].first_offset, 10);
        }
    }
    let st = &sm.state.topics.partitions[&p0].producers[&42];
    assert_eq!(
        (st.epoch, st.batches.len()),
        (1, 1),
        "a new epoch starts over"
    );
    // A refused commit records nothing.
    let mut stale = range(tid(1), 0, 0, 70, 79);
    stale.producers = vec![ProducerBatch {
        producer_id: 7,
        epoch: 0,
        first_sequence: 0,
        last_sequence: 9,
        first_offset: 70,
        last_offset: 79,
    }];
    sm.error(Command::Commit {
        now_ms: 0,
        broker: BrokerId(1),
        object: obj(),
        ranges: vec![stale],
    });
    assert!(!sm.state.topics.partitions[&p0].producers.contains_key(&7));
}

#[test]
fn idle_producers_expire_by_the_time_in_the_commands() {
    let mut sm = owned();
    let p0 = PartitionKey {
        topic: tid(1),
        partition: 0,
    };
    let batch = |pid: i64, first: i64| ProducerBatch {
        producer_id: pid,
        epoch: 0,
        first_sequence: first as i32,
        last_sequence: first as i32,
        first_offset: first,
        last_offset: first,
    };
    let mut r = range(tid(1), 0, 1, 0, 0);
    r.producers = vec![batch(7, 0)];
    sm.ok(Command::Commit {
        broker: BrokerId(1),
        object: obj(),
        ranges: vec![r],
        now_ms: 1_000,
    });
    let mut r = range(tid(1), 0, 1, 1, 1);
    r.producers = vec![batch(8, 1)];
    sm.ok(Command::Commit {
        broker: BrokerId(1),
        object: obj(),
        ranges: vec![r],
        now_ms: 5_000,
    });
    assert!(!sm.state.topics.producers_to_expire(5_000, 10_000));
    assert!(sm.state.topics.producers_to_expire(11_001, 10_000));
    assert_eq!(
        controller::expire_producers(&sm.state, 11_001, 10_000),
        Some(Command::ExpireProducers {
            now_ms: 11_001,
            expiration_ms: 10_000
        })
    );
    sm.ok(Command::ExpireProducers {
        now_ms: 11_001,
        expiration_ms: 10_000,
    });
    let left: Vec<i64> = sm.state.topics.partitions[&p0]
        .producers
        .keys()
        .copied()
        .collect();
    assert_eq!(left, vec![8], "producer 7 idle 10.001 s: gone; 8 stays");
    // A producer from an entry without a time starts its clock at the
    // first expiry pass instead of going at once.
    sm.state
        .topics
        .partitions
        .get_mut(&p0)
        .unwrap()
        .producers
        .get_mut(&8)
        .unwrap()
        .last_write_ms = 0;
    sm.ok(Command::ExpireProducers {
        now_ms: 100_000,
        expiration_ms: 10_000,
    });
    assert_eq!(
        sm.state.topics.partitions[&p0].producers[&8].last_write_ms,
        100_000
    );
}
