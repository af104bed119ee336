//! The indexer against a real metadata node (HTTP on 127.0.0.1), a broker
//! writing the log, and a local object store: exports hold every committed
//! record exactly once (also after a crash between begin and commit, and
//! after a backfill), retention deletes old files, and lookups agree with a
//! scan of the log.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{Array, BinaryArray, Float64Array, Int32Array, Int64Array};
use bytes::Bytes;
use floe_broker::{Acks, Broker};
use floe_indexer::lookup::Query;
use floe_indexer::settings::file_key;
use floe_indexer::{Indexer, IndexerConfig, query};
use floe_metadata::ErrorKind as MetaKind;
use floe_metadata::api::MetaApi;
use floe_storage::batch::Compression;
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_storage::{EndpointId, ObjectKey, PartitionKey, StorePool, TopicId};
use floe_testkit::{Cluster, wait_owned};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

struct Env {
    cluster: Cluster,
    meta: Arc<dyn MetaApi>,
    pool: Arc<StorePool>,
    broker: Broker,
}

impl Env {
    async fn new() -> Env {
        let cluster = Cluster::start().await;
        let pool = cluster.pool().await;
        let broker = cluster.broker_on(pool.clone(), |_| {}).await;
        Env {
            meta: cluster.meta.clone(),
            cluster,
            pool,
            broker,
        }
    }

    /// Creates the topic and waits until the broker owns every partition.
    async fn topic(&self, name: &str, partitions: u32, configs: &[(&str, &str)]) -> TopicId {
        let t = self.cluster.create_topic(name, partitions, configs).await;
        for p in 0..partitions {
            wait_owned(&self.broker, PartitionKey::new(t, p)).await;
        }
        t
    }

    fn indexer(&self) -> Indexer {
        Indexer::new(
            self.meta.clone(),
            self.pool.clone(),
            IndexerConfig {
                poll: Duration::from_millis(50),
                ..IndexerConfig::default()
            },
        )
        .unwrap()
    }

    /// Produces `n` records with keys `k{i % 7}` and JSON values (every
    /// fifth one is not JSON), in batches of 10 over every codec.
    async fn produce(&self, t: TopicId, partition: u32, first: usize, n: usize, ts: i64) -> f64 {
        let key = PartitionKey::new(t, partition);
        let codecs = [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ];
        let mut sum = 0.0;
        for (b, start) in (first..first + n).step_by(10).enumerate() {
            let mut builder = BatchBuilder::new(0, ts);
            for i in start..(start + 10).min(first + n) {
                let value = if i % 5 == 4 {
                    format!("not json {i}")
                } else {
                    sum += i as f64 * 0.5;
                    format!("{{\"id\": {i}, \"amount\": {}}}", i as f64 * 0.5)
                };
                builder.push(RecordSpec::new(
                    Some(format!("k{}", i % 7).into_bytes()),
                    Some(value.into_bytes()),
                    (i - start) as i64,
                ));
            }
            let batch = builder.build(codecs[b % codecs.len()]).unwrap();
            self.broker.produce(&key, &batch, Acks::All).await.unwrap();
        }
        sum
    }

    /// Runs export rounds until every partition is exported up to its end.
    async fn export_all(&self, ix: &Indexer, topic: &str) -> floe_metadata::export::TopicExports {
        let started = Instant::now();
        loop {
            ix.run_once().await.unwrap();
            let s = self.meta.export_state(topic).await.unwrap();
            if s.partitions
                .iter()
                .all(|p| p.next_offset >= p.high_watermark && p.pending.is_none())
            {
                return s;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "exports never caught up: {s:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every row of the committed files: (partition, offset) and the amount column's sum.
    async fn rows(&self, s: &floe_metadata::export::TopicExports) -> (Vec<(i32, i64)>, f64, usize) {
        let mut rows = Vec::new();
        let mut sum = 0.0;
        let mut nulls = 0;
        for p in &s.partitions {
            for f in &p.files {
                let obj = self
                    .pool
                    .head(&EndpointId::new(&f.endpoint), &ObjectKey::new(&f.key))
                    .await
                    .unwrap();
                let bytes = self.pool.get(&obj).await.unwrap();
                let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
                    .unwrap()
                    .build()
                    .unwrap();
                for batch in reader {
                    let batch = batch.unwrap();
                    let part = batch
                        .column_by_name("partition")
                        .unwrap()
                        .as_any()
                        .downcast_ref::<Int32Array>()
                        .unwrap();
                    let off = batch
                        .column_by_name("offset")
                        .unwrap()
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .unwrap();
                    for i in 0..batch.num_rows() {
                        rows.push((part.value(i), off.value(i)));
                    }
                    if let Some(amount) = batch.column_by_name("amount") {
                        let amount = amount.as_any().downcast_ref::<Float64Array>().unwrap();
                        nulls += amount.null_count();
                        sum += amount.iter().flatten().sum::<f64>();
                    }
                }
                assert_eq!(
                    f.rows as usize,
                    rows.iter()
                        .filter(|r| r.0 == p.partition as i32
                            && r.1 >= f.first_offset
                            && r.1 <= f.last_offset)
                        .count()
                );
            }
        }
        (rows, sum, nulls)
    }

    async fn shutdown(mut self) {
        self.broker.shutdown().await;
        if let Some(n) = self.cluster.meta_node.take() {
            n.shutdown().await;
        }
    }
}

const INDEX: &str = r#"[{"name":"amount","path":"$.amount","type":"float64"}]"#;

/// Now, so that files land in this hour's folder.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_is_exported_once_also_after_a_crash_between_begin_and_commit() {
    let env = Env::new().await;
    let t = env
        .topic(
            "orders",
            2,
            &[
                ("export.enabled", "true"),
                ("export.roll.ms", "100"),
                ("export.row.group.rows", "16"),
                ("export.index", INDEX),
            ],
        )
        .await;
    let ts = now_ms();
    let mut sum = env.produce(t, 0, 0, 100, ts).await;
    sum += env.produce(t, 1, 0, 40, ts).await;
    // Compaction turns the WAL ranges of partition 0 into a segment: the
    // indexer reads both kinds.
    env.broker.compact_now().await.unwrap();
    sum += env.produce(t, 0, 100, 50, ts).await;

    // An indexer died after beginning a file of 0..=24 and writing half of it.
    let state = env.meta.export_state("orders").await.unwrap();
    let key = file_key("orders", 0, 0, 24, ts);
    let pending = floe_metadata::export::ExportFile {
        endpoint: "local".into(),
        key: key.clone(),
        first_offset: 0,
        last_offset: 24,
        rows: 25,
        size: 0,
        min_timestamp: ts,
        max_timestamp: ts,
    };
    let p0 = PartitionKey::new(state.topic_id, 0);
    env.meta.export_begin(p0, 0, &pending).await.unwrap();
    env.pool
        .put_at(
            &EndpointId::new("local"),
            ObjectKey::new(&key),
            Bytes::from_static(b"PAR1 half a file").into(),
        )
        .await
        .unwrap();

    let ix = env.indexer();
    let s = env.export_all(&ix, "orders").await;
    let first = &s.partitions[0].files[0];
    assert_eq!(
        (first.key.as_str(), first.first_offset, first.last_offset),
        (key.as_str(), 0, 24)
    );
    let (rows, got_sum, nulls) = env.rows(&s).await;
    let unique: BTreeSet<_> = rows.iter().copied().collect();
    assert_eq!(rows.len(), unique.len(), "a row exported twice");
    let expected: BTreeSet<(i32, i64)> = (0..150)
        .map(|o| (0, o))
        .chain((0..40).map(|o| (1, o)))
        .collect();
    assert_eq!(unique, expected);
    assert!((got_sum - sum).abs() < 1e-6, "{got_sum} != {sum}");
    assert_eq!(
        nulls,
        150 / 5 + 40 / 5,
        "values that are not JSON give NULL"
    );
    // Names follow the layout; nothing but the committed files is there.
    let listed = env
        .pool
        .list(&EndpointId::new("local"), "exports/orders/")
        .await
        .unwrap();
    let names: BTreeSet<String> = listed.iter().map(|o| o.key.to_string()).collect();
    let committed: BTreeSet<String> = s
        .partitions
        .iter()
        .flat_map(|p| p.files.iter().map(|f| f.key.clone()))
        .collect();
    assert_eq!(names, committed);
    // A late commit of the finished intent is harmless; a stale begin is refused.
    env.meta.export_commit(p0, 0, &pending).await.unwrap();
    let err = env.meta.export_begin(p0, 0, &pending).await.unwrap_err();
    assert_eq!(err.kind(), MetaKind::ExportConflict);

    // Lookups agree with the log.
    let q = Query {
        key: Some(Bytes::from_static(b"k3")),
        from_ms: None,
        to_ms: None,
        limit: 1000,
    };
    let a = query::run(&ix, "orders", &q).await.unwrap();
    let found: BTreeSet<(u32, i64)> = a.records.iter().map(|r| (r.partition, r.offset)).collect();
    let want: BTreeSet<(u32, i64)> = (0..150)
        .filter(|i| i % 7 == 3)
        .map(|o| (0, o))
        .chain((0..40).filter(|i| i % 7 == 3).map(|o| (1, o)))
        .collect();
    assert_eq!(found, want);
    assert!(a.stats.files_read > 0);
    // Every row group holds k0..k6; a key in their range but absent from all
    // of them is ruled out by the bloom filters without reading data.
    let absent = Query {
        key: Some(Bytes::from_static(b"k35")),
        ..q
    };
    let a = query::run(&ix, "orders", &absent).await.unwrap();
    assert!(a.records.is_empty());
    assert_eq!(a.stats.row_groups_read, 0, "{:?}", a.stats);
    assert_eq!(a.stats.files_read, 0, "{:?}", a.stats);
    assert_eq!(a.stats.files_opened, a.stats.files, "{:?}", a.stats);
    assert!(a.stats.row_groups_pruned_by_bloom > 0, "{:?}", a.stats);
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_rebuilds_the_files_and_fences_the_old_generation() {
    let env = Env::new().await;
    let t = env
        .topic(
            "events",
            1,
            &[("export.enabled", "true"), ("export.roll.ms", "100")],
        )
        .await;
    env.produce(t, 0, 0, 60, now_ms()).await;
    let ix = env.indexer();
    let before = env.export_all(&ix, "events").await;
    env.produce(t, 0, 60, 30, now_ms()).await;

    let generation = ix.backfill("events").await.unwrap();
    assert_eq!(generation, 1);
    let p0 = PartitionKey::new(before.topic_id, 0);
    let old_file = before.partitions[0].files[0].clone();
    let err = env.meta.export_commit(p0, 0, &old_file).await.unwrap_err();
    assert_eq!(
        err.kind(),
        MetaKind::ExportConflict,
        "the old generation is fenced"
    );
    let after = env.export_all(&ix, "events").await;
    // One more round sweeps files of the old generation.
    ix.run_once().await.unwrap();
    let (rows, _, _) = env.rows(&after).await;
    let unique: BTreeSet<_> = rows.iter().copied().collect();
    assert_eq!(rows.len(), 90);
    assert_eq!(unique, (0..90).map(|o| (0, o)).collect());
    let listed: BTreeSet<String> = env
        .pool
        .list(&EndpointId::new("local"), "exports/events/")
        .await
        .unwrap()
        .iter()
        .map(|o| o.key.to_string())
        .collect();
    let committed: BTreeSet<String> = after.partitions[0]
        .files
        .iter()
        .map(|f| f.key.clone())
        .collect();
    assert_eq!(listed, committed, "files of the old generation are gone");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_old_exports_and_lookups_read_the_log_not_exported_yet() {
    let env = Env::new().await;
    let old = env
        .topic(
            "old",
            1,
            &[
                ("export.enabled", "true"),
                ("export.roll.ms", "100"),
                ("export.retention.ms", "60000"),
            ],
        )
        .await;
    // Records from an hour ago and from now: the old file goes, the new stays.
    env.produce(old, 0, 0, 20, now_ms() - 3_600_000).await;
    let ix = env.indexer();
    env.export_all(&ix, "old").await;
    env.produce(old, 0, 20, 20, now_ms()).await;
    env.export_all(&ix, "old").await;
    ix.run_once().await.unwrap();
    let s2 = env.meta.export_state("old").await.unwrap();
    assert_eq!(s2.partitions[0].files.len(), 1, "{s2:?}");
    assert_eq!(s2.partitions[0].files[0].first_offset, 20);
    let listed = env
        .pool
        .list(&EndpointId::new("local"), "exports/old/")
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);

    // A topic whose data waits for its roll interval: lookups read the log.
    let slow = env
        .topic(
            "slow",
            2,
            &[("export.enabled", "true"), ("export.roll.ms", "3600000")],
        )
        .await;
    let ts = now_ms();
    env.produce(slow, 1, 0, 30, ts).await;
    ix.run_once().await.unwrap();
    let q = Query {
        key: Some(Bytes::from_static(b"k2")),
        from_ms: Some(ts),
        to_ms: Some(ts + 5),
        limit: 2,
    };
    let a = query::run(&ix, "slow", &q).await.unwrap();
    assert_eq!(a.stats.files, 0);
    assert_eq!(a.stats.log_records_scanned, 30);
    let got: Vec<i64> = a.records.iter().map(|r| r.offset).collect();
    // k2 is at offsets 2, 9, 16, 23 with timestamps ts+2, ts+9, ts+6, ts+3: in
    // [ts, ts+5) are 2 and 23, ordered by timestamp.
    assert_eq!(got, vec![2, 23]);
    let err = query::run(&ix, "nope", &q).await.unwrap_err();
    assert_eq!(err.kind, floe_indexer::ErrorKind::UnknownTopic);
    env.shutdown().await;
}

/// A zstd batch that inflates past the decoding bound (a few KiB on the
/// wire), between ordinary records: the exporter passes over it (logged and
/// counted), exports every other record, and moves on; lookups still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exporter_passes_over_a_decompression_bomb_and_exports_the_rest() {
    let env = Env::new().await;
    let t = env
        .topic(
            "bombed",
            1,
            &[("export.enabled", "true"), ("export.roll.ms", "100")],
        )
        .await;
    let ts = now_ms();
    env.produce(t, 0, 0, 10, ts).await;
    let zeros = vec![0u8; floe_storage::records::DEFAULT_MAX_DECOMPRESSED + 1];
    let mut bomb = BatchBuilder::new(0, ts);
    bomb.push(RecordSpec::new(None, Some(zeros), 0));
    let bomb = bomb.build(Compression::Zstd).unwrap();
    env.broker
        .produce(&PartitionKey::new(t, 0), &bomb, Acks::All)
        .await
        .unwrap();
    env.produce(t, 0, 10, 10, ts).await;
    let ix = env.indexer();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let s = env.export_all(&ix, "bombed").await;
    assert_eq!(s.partitions[0].high_watermark, 21);
    let (rows, _, _) = env.rows(&s).await;
    let offsets: Vec<i64> = rows.iter().map(|r| r.1).collect();
    let want: Vec<i64> = (0..10).chain(11..21).collect();
    assert_eq!(offsets, want, "every record but the bomb's, once");
    let q = Query {
        key: None,
        from_ms: None,
        to_ms: None,
        limit: 100,
    };
    let found = query::run(&ix, "bombed", &q).await.unwrap();
    assert_eq!(found.records.len(), 20);
    env.shutdown().await;
}

/// The manifests and data files a table's snapshot lists, read back with
/// iceberg's own readers: (manifest count, live data-file paths, records).
/// The object of the local store at `uri` (a table's URIs are under
/// `…/store/`).
async fn read_store(env: &Env, uri: String) -> Bytes {
    let key = uri.split_once("/store/").unwrap().1;
    let obj = env
        .pool
        .head(&EndpointId::new("local"), &ObjectKey::new(key))
        .await
        .unwrap();
    env.pool.get(&obj).await.unwrap()
}

async fn table_contents(
    env: &Env,
    ix: &Indexer,
    topic: &str,
    snapshot: Option<i64>,
) -> (usize, Vec<String>, u64) {
    let state = env.meta.table_state(topic).await.unwrap();
    let m = ix
        .table_metadata(state.state.metadata_location.as_deref().unwrap())
        .await
        .unwrap();
    let snap = match snapshot {
        Some(id) => m.snapshot_by_id(id).unwrap().clone(),
        None => m.current_snapshot().unwrap().clone(),
    };
    let read = |uri: &str| read_store(env, uri.to_string());
    let list = floe_indexer::table::commit::parse_manifest_list(
        &read(snap.manifest_list()).await,
        m.format_version(),
    )
    .unwrap();
    let (mut files, mut records) = (Vec::new(), 0);
    for mf in &list {
        let manifest = iceberg::spec::Manifest::parse_avro(&read(&mf.manifest_path).await).unwrap();
        for e in manifest.entries().iter().filter(|e| e.is_alive()) {
            files.push(e.data_file().file_path().to_string());
            records += e.data_file().record_count();
        }
    }
    (list.len(), files, records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_of_many_commits_merges_its_manifests_and_the_sweep_keeps_what_snapshots_name() {
    let env = Env::new().await;
    let t = env
        .topic(
            "t",
            1,
            &[
                ("table.format", "iceberg"),
                ("export.roll.ms", "100"),
                ("export.index", INDEX),
            ],
        )
        .await;
    let ix = env.indexer();
    let (mut produced, mut snapshots) = (0usize, Vec::new());
    for round in 0..20 {
        env.produce(t, 0, produced, 10, now_ms()).await;
        produced += 10;
        env.export_all(&ix, "t").await;
        // The round that exported also committed; one more commits what a
        // later file of the same round left.
        ix.run_once().await.unwrap();
        let state = env.meta.table_state("t").await.unwrap();
        let m = ix
            .table_metadata(state.state.metadata_location.as_deref().unwrap())
            .await
            .unwrap();
        let snap = m.current_snapshot().unwrap();
        snapshots.push((snap.snapshot_id(), round));
    }
    let (manifests, files, records) = table_contents(&env, &ix, "t", None).await;
    assert!(
        manifests < floe_indexer::table::commit::MAX_MANIFESTS,
        "{manifests} manifests after 20 commits"
    );
    assert_eq!(records as usize, produced, "every record once");
    let unique: BTreeSet<&String> = files.iter().collect();
    assert_eq!(unique.len(), files.len(), "no data file twice");
    // Every metadata object nothing names is swept; every snapshot still reads.
    ix.sweep_table("t", Duration::ZERO).await.unwrap();
    for (id, round) in snapshots {
        let (_, _, records) = table_contents(&env, &ix, "t", Some(id)).await;
        assert_eq!(
            records as usize,
            (round + 1) * 10,
            "snapshot of round {round}"
        );
    }
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_indexers_committing_at_once_never_add_a_file_twice() {
    let env = Env::new().await;
    let t = env
        .topic(
            "race",
            2,
            &[("table.format", "iceberg"), ("export.roll.ms", "100")],
        )
        .await;
    let (a, b) = (env.indexer(), env.indexer());
    for round in 0..5 {
        for p in 0..2 {
            env.produce(t, p, round * 10, 10, now_ms()).await;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        let (ra, rb) = tokio::join!(a.run_once(), b.run_once());
        // A loser of the race learns it next round; neither fails for good.
        let _ = (ra, rb);
    }
    env.export_all(&a, "race").await;
    a.run_once().await.unwrap();
    b.run_once().await.unwrap();
    let (_, files, records) = table_contents(&env, &a, "race", None).await;
    assert_eq!(records, 100);
    let unique: BTreeSet<&String> = files.iter().collect();
    assert_eq!(unique.len(), files.len(), "no data file twice");
    env.shutdown().await;
}

/// Whether the store holds the object a data file URI names.
async fn exists(env: &Env, uri: &str) -> bool {
    let key = uri.split_once("/store/").unwrap().1.to_string();
    env.pool
        .head(&EndpointId::new("local"), &ObjectKey::new(&key))
        .await
        .is_ok()
}

/// The operation of the table's current snapshot.
async fn operation(env: &Env, ix: &Indexer, topic: &str) -> iceberg::spec::Operation {
    let state = env.meta.table_state(topic).await.unwrap();
    let m = ix
        .table_metadata(state.state.metadata_location.as_deref().unwrap())
        .await
        .unwrap();
    m.current_snapshot().unwrap().summary().operation.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_replaces_small_files_and_expiry_deletes_only_what_no_snapshot_names() {
    let env = Env::new().await;
    let t = env
        .topic(
            "c",
            2,
            &[
                ("table.format", "iceberg"),
                ("export.roll.ms", "100"),
                ("export.index", INDEX),
            ],
        )
        .await;
    let ix = env.indexer();
    let mut sum = 0.0;
    for round in 0..6 {
        for p in 0..2 {
            sum += env.produce(t, p, round * 10, 10, now_ms()).await;
        }
        env.export_all(&ix, "c").await;
        ix.run_once().await.unwrap();
    }
    let before_state = env.meta.table_state("c").await.unwrap();
    let before = ix
        .table_metadata(before_state.state.metadata_location.as_deref().unwrap())
        .await
        .unwrap()
        .current_snapshot_id()
        .unwrap();
    let (_, small, records) = table_contents(&env, &ix, "c", None).await;
    assert_eq!(records, 120);
    assert!(small.len() >= 12, "{} files", small.len());

    let done = ix.compact_now("c").await.unwrap();
    assert!(done.written >= 2 && done.replaced >= 12, "{done:?}");
    let (_, files, records) = table_contents(&env, &ix, "c", None).await;
    assert_eq!(records, 120, "the same rows");
    // One file per partition and hour (a run that crossed an hour has two).
    assert!(files.len() <= 4, "{files:?}");
    assert_eq!(
        operation(&env, &ix, "c").await,
        iceberg::spec::Operation::Replace
    );
    // The exports name the compacted files, and hold every row once.
    let exports = env.meta.export_state("c").await.unwrap();
    let (rows, amount, _) = env.rows(&exports).await;
    let distinct: BTreeSet<(i32, i64)> = rows.iter().copied().collect();
    assert_eq!((rows.len(), distinct.len()), (120, 120));
    assert!((amount - sum).abs() < 1e-6, "{amount} != {sum}");
    let exported: BTreeSet<String> = exports
        .partitions
        .iter()
        .flat_map(|p| p.files.iter().map(|f| f.key.clone()))
        .collect();
    let in_table: BTreeSet<String> = files
        .iter()
        .map(|u| u.split_once("/store/").unwrap().1.to_string())
        .collect();
    assert_eq!(exported, in_table, "the table names the exports' files");

    // Time travel still reads the small files: the sweep keeps what a
    // snapshot names, however young or old.
    let (expired, deleted) = ix
        .expire_now("c", Some(Duration::from_secs(3600)))
        .await
        .unwrap();
    assert_eq!((expired, deleted), (0, 0));
    let (_, old_files, old_records) = table_contents(&env, &ix, "c", Some(before)).await;
    assert_eq!(old_records, 120);
    for f in &old_files {
        assert!(
            exists(&env, f).await,
            "{f} is gone while a snapshot names it"
        );
    }

    // New records append after the compaction.
    for p in 0..2 {
        env.produce(t, p, 60, 10, now_ms()).await;
    }
    env.export_all(&ix, "c").await;
    ix.run_once().await.unwrap();
    let (_, _, records) = table_contents(&env, &ix, "c", None).await;
    assert_eq!(records, 140);

    // Expiring every older snapshot deletes exactly the files only they named.
    let (expired, deleted) = ix.expire_now("c", Some(Duration::ZERO)).await.unwrap();
    assert!(expired >= 7, "{expired} snapshots expired");
    assert!(deleted >= 12, "{deleted} files deleted");
    let state = env.meta.table_state("c").await.unwrap();
    let m = ix
        .table_metadata(state.state.metadata_location.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(m.snapshots().count(), 1);
    let (_, files, records) = table_contents(&env, &ix, "c", None).await;
    assert_eq!(records, 140);
    let listed: BTreeSet<String> = env
        .pool
        .list(&EndpointId::new("local"), "exports/c/")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key.as_str().to_string())
        .collect();
    let named: BTreeSet<String> = files
        .iter()
        .map(|u| u.split_once("/store/").unwrap().1.to_string())
        .collect();
    assert_eq!(
        listed, named,
        "the store holds what the table names, no more"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_past_the_export_retention_leave_the_table_by_a_delete_snapshot() {
    let env = Env::new().await;
    let t = env
        .topic(
            "r",
            1,
            &[("table.format", "iceberg"), ("export.roll.ms", "100")],
        )
        .await;
    let ix = env.indexer();
    let day = 24 * 3_600_000;
    // Two days old, then now: in two files (another hour).
    env.produce(t, 0, 0, 10, now_ms() - 2 * day).await;
    env.produce(t, 0, 10, 10, now_ms()).await;
    env.export_all(&ix, "r").await;
    ix.run_once().await.unwrap();
    let (_, files, records) = table_contents(&env, &ix, "r", None).await;
    assert_eq!((files.len(), records), (2, 20));
    env.meta
        .alter_topic_config(
            "r",
            [("export.retention.ms".to_string(), day.to_string())],
            vec![],
        )
        .await
        .unwrap();
    ix.run_once().await.unwrap();
    let (_, now, records) = table_contents(&env, &ix, "r", None).await;
    assert_eq!((now.len(), records), (1, 10), "the old file left the table");
    assert_eq!(
        operation(&env, &ix, "r").await,
        iceberg::spec::Operation::Delete
    );
    let old: Vec<&String> = files.iter().filter(|f| !now.contains(f)).collect();
    assert_eq!(old.len(), 1);
    assert!(exists(&env, old[0]).await, "kept while a snapshot names it");
    let (expired, deleted) = ix.expire_now("r", Some(Duration::ZERO)).await.unwrap();
    assert_eq!((expired, deleted), (1, 1));
    assert!(
        !exists(&env, old[0]).await,
        "deleted with the last snapshot naming it"
    );
    env.shutdown().await;
}

/// The row of table `t` in the SQL catalog file `db` (catalog `floe`).
fn catalog_row(db: &std::path::Path, t: &str) -> Option<String> {
    let c = rusqlite::Connection::open(db).unwrap();
    c.query_row(
        "SELECT metadata_location FROM iceberg_tables \
         WHERE catalog_name = 'floe' AND table_namespace = 'floe' AND table_name = ?1",
        [t],
        |r| r.get(0),
    )
    .ok()
}

fn set_catalog_row(db: &std::path::Path, t: &str, location: &str) {
    let c = rusqlite::Connection::open(db).unwrap();
    c.execute(
        "UPDATE iceberg_tables SET metadata_location = ?2 WHERE table_name = ?1",
        [t, location],
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_sql_catalog_row_moves_only_from_a_metadata_file_of_floes() {
    let env = Env::new().await;
    let t = env
        .topic(
            "pub",
            1,
            &[("table.format", "iceberg"), ("export.roll.ms", "100")],
        )
        .await;
    let db = env.cluster.dir().join("catalog.db");
    let ix = Indexer::new(
        env.meta.clone(),
        env.pool.clone(),
        IndexerConfig {
            poll: Duration::from_millis(50),
            table_catalog: Some(format!("sqlite:{}", db.display())),
            ..IndexerConfig::default()
        },
    )
    .unwrap();
    let current = || async {
        env.meta
            .table_state("pub")
            .await
            .unwrap()
            .state
            .metadata_location
            .unwrap()
    };
    let mut n = 0;
    let mut commit = || {
        n += 10;
        let ix = ix.clone();
        let env = &env;
        async move {
            env.produce(t, 0, n - 10, 10, now_ms()).await;
            env.export_all(&ix, "pub").await;
            ix.run_once().await.unwrap();
        }
    };
    commit().await;
    let first = current().await;
    assert_eq!(catalog_row(&db, "pub").as_deref(), Some(first.as_str()));
    commit().await;
    let second = current().await;
    assert_ne!(first, second);
    assert_eq!(catalog_row(&db, "pub").as_deref(), Some(second.as_str()));

    // Put back on an earlier version (in the metadata log): moved forward.
    set_catalog_row(&db, "pub", &first);
    commit().await;
    let third = current().await;
    assert_eq!(catalog_row(&db, "pub").as_deref(), Some(third.as_str()));

    // Someone else's commit to the table, under its location, of the same
    // table uuid: left alone, however often the table commits.
    let theirs = third.replace(".metadata.json", "-theirs.metadata.json");
    std::fs::copy(
        third.strip_prefix("file://").unwrap(),
        theirs.strip_prefix("file://").unwrap(),
    )
    .unwrap();
    set_catalog_row(&db, "pub", &theirs);
    commit().await;
    commit().await;
    assert_eq!(catalog_row(&db, "pub").as_deref(), Some(theirs.as_str()));
    // And elsewhere: left alone too (looked at again on the next commit).
    set_catalog_row(
        &db,
        "pub",
        "s3://elsewhere/t/metadata/00001-x.metadata.json",
    );
    commit().await;
    assert_eq!(
        catalog_row(&db, "pub").as_deref(),
        Some("s3://elsewhere/t/metadata/00001-x.metadata.json")
    );

    // A file of Floe's table location that is gone (a table of the same
    // name that was deleted): moved.
    let gone = first.replace(".metadata.json", "-gone.metadata.json");
    set_catalog_row(&db, "pub", &gone);
    commit().await;
    let now = current().await;
    assert_eq!(catalog_row(&db, "pub").as_deref(), Some(now.as_str()));
}

/// What a reader of the table's current snapshot sees: per (partition,
/// key) the values of its rows (data files less their position deletes),
/// and how many delete manifests the snapshot lists.
async fn visible_rows(
    env: &Env,
    ix: &Indexer,
    topic: &str,
) -> (BTreeMap<(i32, Vec<u8>), Vec<Vec<u8>>>, usize) {
    use iceberg::spec::ManifestContentType;
    let state = env.meta.table_state(topic).await.unwrap();
    let m = ix
        .table_metadata(state.state.metadata_location.as_deref().unwrap())
        .await
        .unwrap();
    let snap = m.current_snapshot().unwrap().clone();
    let read = |uri: String| read_store(env, uri);
    let list = floe_indexer::table::commit::parse_manifest_list(
        &read(snap.manifest_list().to_string()).await,
        m.format_version(),
    )
    .unwrap();
    let (mut data, mut deleted) = (Vec::new(), BTreeSet::new());
    let mut delete_manifests = 0;
    for mf in &list {
        let manifest =
            iceberg::spec::Manifest::parse_avro(&read(mf.manifest_path.clone()).await).unwrap();
        let live = manifest.entries().iter().filter(|e| e.is_alive());
        if mf.content == ManifestContentType::Deletes {
            delete_manifests += 1;
            for e in live {
                let bytes = read(e.data_file().file_path().to_string()).await;
                let rows = e.data_file().record_count();
                for (path, pos) in
                    floe_indexer::table::upsert::positions_of_parquet(bytes, "d", rows).unwrap()
                {
                    deleted.insert((path, pos));
                }
            }
        } else {
            data.extend(live.map(|e| e.data_file().file_path().to_string()));
        }
    }
    let mut rows: BTreeMap<(i32, Vec<u8>), Vec<Vec<u8>>> = BTreeMap::new();
    for uri in data {
        let reader = ParquetRecordBatchReaderBuilder::try_new(read(uri.clone()).await)
            .unwrap()
            .build()
            .unwrap();
        let mut pos = 0u64;
        for batch in reader {
            let batch = batch.unwrap();
            let col = |n: &str| batch.column_by_name(n).unwrap().clone();
            let (part, key, value) = (col("partition"), col("key"), col("value"));
            let part = part.as_any().downcast_ref::<Int32Array>().unwrap();
            let key = key.as_any().downcast_ref::<BinaryArray>().unwrap();
            let value = value.as_any().downcast_ref::<BinaryArray>().unwrap();
            for i in 0..batch.num_rows() {
                if !deleted.contains(&(uri.clone(), pos)) {
                    assert!(value.is_valid(i), "a tombstone is never a row");
                    rows.entry((part.value(i), key.value(i).to_vec()))
                        .or_default()
                        .push(value.value(i).to_vec());
                }
                pos += 1;
            }
        }
    }
    (rows, delete_manifests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upsert_table_keeps_the_latest_row_per_key_across_commits_a_restart_and_a_compaction() {
    use floe_indexer::table::upsert::MAX_DELETE_MANIFESTS;
    let env = Env::new().await;
    let t = env
        .topic(
            "u",
            2,
            &[
                ("table.format", "iceberg"),
                ("table.mode", "upsert"),
                ("export.roll.ms", "100"),
            ],
        )
        .await;
    // What a compacted topic keeps: the last value per key, none after a
    // tombstone.
    let mut latest: BTreeMap<(i32, Vec<u8>), Vec<u8>> = BTreeMap::new();
    let mut n = 0usize;
    let mut round = |env_latest: &mut BTreeMap<(i32, Vec<u8>), Vec<u8>>| {
        let mut batches = Vec::new();
        for p in 0..2u32 {
            let mut builder = BatchBuilder::new(0, now_ms());
            for i in 0..10 {
                n += 1;
                let key = format!("k{}", (n * 7 + i) % 13).into_bytes();
                let value = (!n.is_multiple_of(9)).then(|| format!("v{n}").into_bytes());
                match &value {
                    Some(v) => env_latest.insert((p as i32, key.clone()), v.clone()),
                    None => env_latest.remove(&(p as i32, key.clone())),
                };
                builder.push(RecordSpec::new(Some(key), value, i as i64));
            }
            batches.push((p, builder.build(Compression::Zstd).unwrap()));
        }
        batches
    };
    let expect = |latest: &BTreeMap<(i32, Vec<u8>), Vec<u8>>| {
        latest
            .iter()
            .map(|(k, v)| (k.clone(), vec![v.clone()]))
            .collect::<BTreeMap<_, _>>()
    };
    let ix = env.indexer();
    let mut most_delete_manifests = 0;
    for _ in 0..(MAX_DELETE_MANIFESTS + 4) {
        for (p, batch) in round(&mut latest) {
            env.broker
                .produce(&PartitionKey::new(t, p), &batch, Acks::All)
                .await
                .unwrap();
        }
        env.export_all(&ix, "u").await;
        ix.run_once().await.unwrap();
        let (rows, deletes) = visible_rows(&env, &ix, "u").await;
        assert_eq!(rows, expect(&latest), "one row per key, the latest");
        most_delete_manifests = most_delete_manifests.max(deletes);
    }
    assert!(
        most_delete_manifests <= MAX_DELETE_MANIFESTS,
        "the deletes were written again as one set: {most_delete_manifests} manifests"
    );

    // A new indexer knows no key: it finds them in the table's files.
    let ix = env.indexer();
    for (p, batch) in round(&mut latest) {
        env.broker
            .produce(&PartitionKey::new(t, p), &batch, Acks::All)
            .await
            .unwrap();
    }
    env.export_all(&ix, "u").await;
    ix.run_once().await.unwrap();
    assert_eq!(visible_rows(&env, &ix, "u").await.0, expect(&latest));

    // A compaction moves the rows to other files: the deletes follow.
    let done = ix.compact_now("u").await.unwrap();
    assert!(done.replaced >= 2, "{done:?}");
    let (rows, deletes) = visible_rows(&env, &ix, "u").await;
    assert_eq!(rows, expect(&latest), "the same rows after the compaction");
    assert!(deletes <= 2, "one set of deletes per spec: {deletes}");

    // A delete file no snapshot names (a commit killed after writing it) is
    // swept; those the snapshots name stay.
    let orphan = "tables/u/deletes/orphan.parquet";
    env.pool
        .put_at(
            &EndpointId::new("local"),
            ObjectKey::new(orphan),
            Bytes::from_static(b"PAR1").into(),
        )
        .await
        .unwrap();
    ix.sweep_table("u", Duration::ZERO).await.unwrap();
    let gone = env
        .pool
        .head(&EndpointId::new("local"), &ObjectKey::new(orphan))
        .await
        .is_err();
    assert!(gone, "the orphan delete file is swept");
    assert_eq!(visible_rows(&env, &ix, "u").await.0, expect(&latest));
    env.shutdown().await;
}
