//! Creating and deleting topics and their partitions, through
//! `ClusterState::apply`, and what a partition counts as stored.

use std::collections::BTreeMap;

use crate::command::{Command, CommitRange, NewObject, ProducerBatch, Response};
use crate::controller;
use crate::error::MetaError;
use crate::ids::{BrokerId, Epoch, ObjectId, PartitionKey};
use crate::raft::codec;
use crate::state::test_support::{Sm, count, obj, owned, range, register, tid, topic};
use crate::state::{ClusterState, IndexEntry, PartitionState};

#[test]
fn topics_are_created_validated_and_deleted() {
    let mut sm = Sm::new();
    topic(&mut sm, "orders", tid(1), 3);
    assert_eq!(sm.state.topics.partitions.len(), 3);
    assert!(matches!(
        sm.error(Command::CreateTopic {
            name: "orders".into(),
            id: tid(2),
            partitions: 1,
            config: BTreeMap::new()
        }),
        MetaError::TopicExists(_)
    ));
    for bad in ["", ".", "..", "a b", "x/y", &"n".repeat(250)] {
        sm.error(Command::CreateTopic {
            name: bad.into(),
            id: tid(3),
            partitions: 1,
            config: BTreeMap::new(),
        });
    }
    sm.error(Command::CreateTopic {
        name: "zero".into(),
        id: tid(3),
        partitions: 0,
        config: BTreeMap::new(),
    });
    let bad_config = [("retention.ms".to_string(), "x".to_string())].into();
    assert!(matches!(
        sm.error(Command::CreateTopic {
            name: "cfg".into(),
            id: tid(3),
            partitions: 1,
            config: bad_config
        }),
        MetaError::InvalidConfig(_)
    ));
    sm.ok(Command::CreatePartitions {
        name: "orders".into(),
        total: 5,
    });
    sm.error(Command::CreatePartitions {
        name: "orders".into(),
        total: 4,
    });
    assert_eq!(sm.state.topics.partitions.len(), 5);
    sm.ok(Command::DeleteTopic {
        name: "orders".into(),
    });
    assert!(sm.state.topics.partitions.is_empty());
    assert!(matches!(
        sm.error(Command::DeleteTopic {
            name: "orders".into()
        }),
        MetaError::UnknownTopic(_)
    ));
    // Re-created under the same name, it is a new topic id.
    topic(&mut sm, "orders", tid(9), 1);
    assert_eq!(sm.state.topics.by_name["orders"].id, tid(9));
}

/// A new topic's partitions are owned by the command that creates them
/// (no wait for the controller's next round), spread by load; without
/// a live broker they wait for the controller.
#[test]
fn a_new_topic_is_owned_from_the_command_that_creates_it() {
    let mut sm = Sm::new();
    topic(&mut sm, "early", tid(1), 2);
    assert!(
        sm.state
            .topics
            .partitions
            .values()
            .all(|p| p.ownership.owner.is_none())
    );
    register(&mut sm, 1, 0);
    register(&mut sm, 2, 0);
    for c in controller::plan(&sm.state, 0) {
        sm.ok(c);
    }
    let (c1, c2) = (count(&sm, 1), count(&sm, 2));
    topic(&mut sm, "orders", tid(2), 6);
    let orders: Vec<_> = sm
        .state
        .topics
        .partitions
        .iter()
        .filter(|(k, _)| k.topic == tid(2))
        .map(|(_, p)| p.ownership)
        .collect();
    assert_eq!(orders.len(), 6);
    assert!(
        orders
            .iter()
            .all(|o| o.owner.is_some() && o.epoch == Epoch(1) && o.handover.is_none()),
        "{orders:?}"
    );
    assert_eq!(count(&sm, 1) + count(&sm, 2), c1 + c2 + 6);
    assert!(count(&sm, 1).abs_diff(count(&sm, 2)) <= 1, "spread by load");
    // New partitions of an existing topic too.
    sm.ok(Command::CreatePartitions {
        name: "orders".into(),
        total: 8,
    });
    assert!(
        sm.state
            .topics
            .partitions
            .iter()
            .filter(|(k, _)| k.topic == tid(2))
            .all(|(_, p)| p.ownership.owner.is_some())
    );
    assert!(count(&sm, 1).abs_diff(count(&sm, 2)) <= 1);
    // Nothing left for the controller to place.
    assert!(controller::decide(&sm.state, 0).direct.is_empty());
}

#[test]
fn deleting_a_topic_releases_its_objects() {
    let mut sm = owned();
    let Response::Committed {
        object: Some(id), ..
    } = sm.apply(Command::Commit {
        now_ms: 0,
        broker: BrokerId(1),
        object: obj(),
        ranges: vec![range(tid(1), 0, 1, 0, 9)],
    })
    else {
        panic!()
    };
    assert!(sm.state.topics.unreferenced_objects().is_empty());
    sm.ok(Command::DeleteTopic { name: "t".into() });
    assert_eq!(sm.state.topics.unreferenced_objects().len(), 1);
    sm.ok(Command::ForgetObjects { ids: vec![id] });
    assert!(sm.state.topics.objects.is_empty());
}

fn entry(first: i64, last: i64, len: u64) -> IndexEntry {
    IndexEntry {
        first_offset: first,
        last_offset: last,
        max_timestamp: 0,
        object: ObjectId(1),
        byte_start: 0,
        byte_len: len,
    }
}

#[test]
fn stored_bytes_count_the_ranges_from_the_log_start_on() {
    let mut p = PartitionState {
        index: vec![entry(0, 9, 100), entry(10, 19, 200), entry(20, 29, 400)],
        ..PartitionState::default()
    };
    assert_eq!(p.stored_bytes(), 700);
    // A range the log start falls inside counts whole; one before it, not.
    p.log_start_offset = 15;
    assert_eq!(p.stored_bytes(), 600);
    p.log_start_offset = 30;
    assert_eq!(p.stored_bytes(), 0);
}

/// A copy of the state, what a snapshot is written from, keeps what it
/// copied while the state goes on changing: the persistent maps (topics,
/// partitions, objects and the objects' keys) share their nodes with the
/// copy, and a write copies the nodes it changes, never changes them.
#[test]
fn a_copy_keeps_its_contents_while_the_state_changes() {
    let mut sm = Sm::new();
    register(&mut sm, 1, 0);
    // Enough partitions for maps of several levels.
    topic(&mut sm, "a", tid(1), 100);
    topic(&mut sm, "b", tid(2), 40);
    for c in controller::plan(&sm.state, 0) {
        sm.ok(c);
    }
    let commit = |t, partitions: u32, first, key: &str, ts| Command::Commit {
        now_ms: ts,
        broker: BrokerId(1),
        object: Some(NewObject {
            endpoint: "default".into(),
            key: key.into(),
            size: 100,
        }),
        ranges: (0..partitions)
            .map(|p| CommitRange {
                producers: vec![ProducerBatch {
                    producer_id: 7,
                    epoch: 0,
                    first_sequence: 0,
                    last_sequence: 9,
                    first_offset: first,
                    last_offset: first + 9,
                }],
                ..range(t, p, 1, first, first + 9)
            })
            .collect(),
    };
    sm.ok(commit(tid(1), 100, 0, "wal/1.wal", 1));
    sm.ok(commit(tid(2), 40, 0, "wal/2.wal", 1));

    let copy = sm.state.clone();
    // The same state rebuilt from its encoding: maps of its own.
    let rebuilt: ClusterState = codec::decode(&codec::encode(&sm.state).unwrap()).unwrap();
    assert_eq!(copy, rebuilt);

    // Every table changes: index entries, high watermarks and producers,
    // new and forgotten objects, a deleted and a created topic, and every
    // partition's owner (the broker's death).
    sm.ok(commit(tid(1), 100, 10, "wal/3.wal", 2));
    sm.ok(Command::TruncateLog {
        broker: BrokerId(1),
        partition: PartitionKey {
            topic: tid(1),
            partition: 5,
        },
        epoch: Epoch(1),
        log_start_offset: 10,
    });
    sm.ok(Command::DeleteTopic { name: "b".into() });
    let unreferenced: Vec<ObjectId> = sm
        .state
        .topics
        .unreferenced_objects()
        .iter()
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(unreferenced.len(), 1, "wal/2.wal");
    sm.ok(Command::ForgetObjects { ids: unreferenced });
    topic(&mut sm, "c", tid(3), 3);
    sm.ok(Command::ExpireProducers {
        now_ms: 10_000_000,
        expiration_ms: 1,
    });
    sm.ok(Command::ExpireLeases { now_ms: 1_000_000 });
    assert!(
        sm.state
            .topics
            .partitions
            .values()
            .all(|p| p.ownership.owner.is_none() && p.producers.is_empty())
    );
    assert_ne!(sm.state.topics, copy.topics);

    assert_eq!(copy, rebuilt);
    assert_eq!(
        codec::encode(&copy).unwrap(),
        codec::encode(&rebuilt).unwrap()
    );
    assert!(copy.topics.knows_object("default", "wal/2.wal"));
    assert!(!sm.state.topics.knows_object("default", "wal/2.wal"));
    assert!(!copy.topics.knows_object("default", "wal/3.wal"));
    assert!(copy.topics.by_name.contains_key("b") && !copy.topics.by_name.contains_key("c"));
    for p in copy.topics.partitions.values() {
        assert_eq!(p.index.len(), 1);
        assert_eq!(p.ownership.owner, Some(BrokerId(1)));
        assert!(p.producers.contains_key(&7));
    }
}

fn export_file(first: i64, last: i64) -> crate::export::ExportFile {
    crate::export::ExportFile {
        endpoint: "default".into(),
        key: format!("exports/t/0-{first}-{last}.parquet"),
        first_offset: first,
        last_offset: last,
        rows: (last - first + 1) as u64,
        size: 10,
        min_timestamp: 1,
        max_timestamp: 2,
    }
}

#[test]
fn a_table_compaction_swaps_adjacent_export_files_only_as_recorded() {
    let mut sm = owned();
    sm.ok(Command::Commit {
        now_ms: 1,
        broker: BrokerId(1),
        object: obj(),
        ranges: vec![range(tid(1), 0, 1, 0, 29)],
    });
    let p = PartitionKey::new(tid(1), 0);
    for (first, last) in [(0, 9), (10, 19), (20, 29)] {
        for c in [
            Command::ExportBegin {
                partition: p,
                generation: 0,
                file: export_file(first, last),
            },
            Command::ExportCommit {
                partition: p,
                generation: 0,
                file: export_file(first, last),
            },
        ] {
            sm.ok(c);
        }
    }
    let keys = |files: &[(i64, i64)]| -> Vec<String> {
        files.iter().map(|(a, b)| export_file(*a, *b).key).collect()
    };
    let mut merged = export_file(0, 19);
    merged.key = "exports/t/0-0-19.c.parquet".into();
    let compaction =
        |replaced: Vec<String>, file: crate::export::ExportFile| Command::TableCompactBegin {
            topic: "t".into(),
            compaction: crate::table::Compaction {
                partition: 0,
                generation: 0,
                file,
                replaced,
            },
        };
    // Not adjacent, one file, wrong rows, a name in use: refused.
    sm.error(compaction(keys(&[(0, 9), (20, 29)]), merged.clone()));
    sm.error(compaction(keys(&[(0, 9)]), export_file(0, 9)));
    let mut short = merged.clone();
    short.rows -= 1;
    sm.error(compaction(keys(&[(0, 9), (10, 19)]), short));
    let mut taken = merged.clone();
    taken.key = export_file(20, 29).key;
    sm.error(compaction(keys(&[(0, 9), (10, 19)]), taken));
    // A commit with no compaction recorded is refused.
    sm.error(Command::TableCompactCommit {
        topic: "t".into(),
        partition: 0,
        generation: 0,
        file: merged.clone(),
    });

    sm.ok(compaction(keys(&[(0, 9), (10, 19)]), merged.clone()));
    let table = &sm.state.topics.tables[&tid(1)];
    assert_eq!(
        table.compacting.as_ref().map(|c| c.file.key.as_str()),
        Some(merged.key.as_str())
    );
    let mut written = merged.clone();
    written.size = 99; // as written
    let commit = Command::TableCompactCommit {
        topic: "t".into(),
        partition: 0,
        generation: 0,
        file: written.clone(),
    };
    sm.ok(commit.clone());
    let export = &sm.state.topics.partitions[&p].export;
    let now: Vec<(&str, u64)> = export
        .files
        .iter()
        .map(|f| (f.key.as_str(), f.size))
        .collect();
    assert_eq!(
        now,
        vec![
            (merged.key.as_str(), 99),
            (export_file(20, 29).key.as_str(), 10)
        ]
    );
    assert_eq!(export.next_offset, 30, "the export goes on where it was");
    assert!(sm.state.topics.tables[&tid(1)].compacting.is_none());
    // Retried: accepted, nothing changes.
    sm.ok(commit);
    assert_eq!(sm.state.topics.partitions[&p].export.files.len(), 2);

    // A backfill drops a compaction in flight; its commit is then refused.
    let mut again = export_file(0, 29);
    again.key = "exports/t/0-0-29.c.parquet".into();
    sm.ok(compaction(
        vec![merged.key.clone(), export_file(20, 29).key],
        again.clone(),
    ));
    sm.ok(Command::ExportReset { topic: "t".into() });
    assert!(sm.state.topics.tables[&tid(1)].compacting.is_none());
    sm.error(Command::TableCompactCommit {
        topic: "t".into(),
        partition: 0,
        generation: 0,
        file: again,
    });
}
