//! What a Raft snapshot of a large cluster costs the state machine: the
//! copy of the applied state taken under its lock (applying waits for it),
//! and the encoding, which runs off the async runtime while commits go on.
//! Sizes: 10,000 and 100,000 partitions in topics of 1,000, each with
//! `ENTRIES` committed index entries (about what compaction keeps).
//!
//! `cargo bench -p floe-metadata --bench snapshot`

use std::collections::BTreeMap;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use floe_metadata::command::{Command, CommitRange, NewObject, NodeKind, ObjectSel};
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
            let ranges = (0..1000)
                .map(|p| CommitRange {
                    partition: PartitionKey {
                        topic: *t,
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
            apply(
                &mut st,
                Command::Commit {
                    broker: BrokerId(1),
                    object: Some(NewObject {
                        endpoint: "default".into(),
                        key: format!("wal/{t}-{e}.wal"),
                        size: 1_000_000,
                    }),
                    ranges,
                    now_ms: 0,
                },
            );
        }
    }
    st
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

criterion_group!(benches, snapshot);
criterion_main!(benches);
