//! What a Raft snapshot of a large cluster costs the state machine: the
//! copy of the applied state taken under its lock (applying waits for it),
//! and the encoding, which runs off the async runtime while commits go on.
//! Sizes: 10,000 and 100,000 partitions in topics of 1,000, each with
//! `ENTRIES` committed index entries (about what compaction keeps).
//!
//! The copy shares the state's persistent maps: about 0.3 µs at either
//! size (it copied everything before: 6 ms at 10,000, 74 to 81 ms at
//! 100,000). What it costs instead is paid by writes while the copy is
//! kept, each map node once: `apply` measures a commit to 1,000 partitions
//! alone and with a copy kept.
//!
//! `cargo bench -p floe-metadata --bench snapshot`

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use floe_metadata::command::{Command, CommitRange, NewObject, NodeKind, ObjectSel, Response};
use floe_metadata::controller;
use floe_metadata::ids::{BrokerId, Epoch, PartitionKey, Revision, TopicId};
use floe_metadata::raft::codec;
use floe_metadata::state::ClusterState;

/// Committed index entries per partition.
const ENTRIES: i64 = 24;

/// A cluster of `partitions` partitions (topics of 1,000) owned by broker
/// 1, each with [`ENTRIES`] committed ranges.
fn cluster(partitions: u32) -> ClusterState {
    let mut st = ClusterState::default();
    let mut rev = 0u64;
    let mut apply = |st: &mut ClusterState, c: Command| {
        rev += 1;
        st.apply(Revision(rev), &c)
    };
    apply(
        &mut st,
        Command::RegisterNode {
            id: BrokerId(1),
            kind: NodeKind::Broker,
            addr: "127.0.0.1:9001".into(),
            now_ms: 0,
            lease_ms: 1_000_000,
        },
    );
    let topics: Vec<TopicId> = (0..partitions.div_ceil(1000))
        .map(|i| {
            let id = TopicId(uuid::Uuid::from_u128(u128::from(i) + 1));
            apply(
                &mut st,
                Command::CreateTopic {
                    name: format!("topic-{i}"),
                    id,
                    partitions: 1000,
                    config: BTreeMap::new(),
                },
            );
            id
        })
        .collect();
    for c in controller::plan(&st, 0) {
        apply(&mut st, c);
    }
    for e in 0..ENTRIES {
        for t in &topics {
            apply(&mut st, commit(*t, e));
        }
    }
    st
}

/// Broker 1's commit of the `e`-th 10 records of each of `topic`'s 1,000
/// partitions, in one new object.
fn commit(topic: TopicId, e: i64) -> Command {
    let ranges = (0..1000)
        .map(|p| CommitRange {
            partition: PartitionKey {
                topic,
                partition: p,
            },
            epoch: Epoch(1),
            first_offset: e * 10,
            last_offset: e * 10 + 9,
            max_timestamp: 1_700_000_000_000 + e,
            object: ObjectSel::New,
            byte_start: u64::from(p) * 1000,
            byte_len: 1000,
            producers: vec![],
        })
        .collect();
    Command::Commit {
        broker: BrokerId(1),
        object: Some(NewObject {
            endpoint: "default".into(),
            key: format!("wal/{topic}-{e}.wal"),
            size: 1_000_000,
        }),
        ranges,
        now_ms: 0,
    }
}

fn snapshot(c: &mut Criterion) {
    let mut g = c.benchmark_group("snapshot");
    g.sample_size(10);
    for partitions in [10_000u32, 100_000] {
        let st = cluster(partitions);
        let bytes = codec::encode(&st).unwrap_or_default();
        eprintln!("{partitions} partitions: snapshot {} bytes", bytes.len());
        g.bench_with_input(BenchmarkId::new("copy", partitions), &st, |b, st| {
            b.iter(|| st.clone())
        });
        g.bench_with_input(BenchmarkId::new("encode", partitions), &st, |b, st| {
            b.iter(|| codec::encode(st))
        });
        g.bench_with_input(
            BenchmarkId::new("decode", partitions),
            &bytes,
            |b, bytes| b.iter(|| codec::decode::<ClusterState>(bytes)),
        );
    }
    g.finish();
}

/// What applying costs: a commit to all 1,000 partitions of one topic
/// (the topics in turn, each commit the next 10 records). `commit`: to a
/// state of its own. `commit_after_copy`: to a state of which a copy was
/// just taken and is kept (a snapshot's copy, being encoded), so that the
/// first write to a partition since the copy copies what the two share:
/// each iteration commits to a fresh copy of the cluster, which keeps its
/// size. Only the apply is timed.
fn apply(c: &mut Criterion) {
    let mut g = c.benchmark_group("apply");
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    for partitions in [10_000u32, 100_000] {
        let mut st = cluster(partitions);
        let topics: Vec<TopicId> = st.topics.by_name.values().map(|t| t.id).collect();
        let revision = Revision(st.revision.0 + 1);
        let mut i = 0usize;
        g.bench_function(BenchmarkId::new("commit_after_copy", partitions), |b| {
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let cmd = commit(topics[i % topics.len()], ENTRIES);
                    i += 1;
                    let mut applying = st.clone();
                    let started = Instant::now();
                    let resp = applying.apply(revision, &cmd);
                    took += started.elapsed();
                    assert!(matches!(resp, Response::Committed { .. }), "{resp:?}");
                }
                took
            })
        });
        let mut i = 0usize;
        g.bench_function(BenchmarkId::new("commit", partitions), |b| {
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                for _ in 0..iters {
                    let e = ENTRIES + (i / topics.len()) as i64;
                    let cmd = commit(topics[i % topics.len()], e);
                    i += 1;
                    let revision = Revision(st.revision.0 + 1);
                    let started = Instant::now();
                    let resp = st.apply(revision, &cmd);
                    took += started.elapsed();
                    assert!(matches!(resp, Response::Committed { .. }), "{resp:?}");
                }
                took
            })
        });
    }
    g.finish();
}

criterion_group!(benches, snapshot, apply);
criterion_main!(benches);
