//! `floe storage …`: check a store end to end, inspect what is in it, and
//! find the objects the metadata never knew (orphans).

#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::{Args, Subcommand};
use floe_storage::batch::{BatchIter, Compression};
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_storage::segment::{OffsetIndex, SegmentBuilder, SegmentReader, TimeIndex, write_segment};
use floe_storage::wal::{WalBuilder, WalFooter, WalReader};
use floe_storage::{EndpointId, ObjectKey, Offset, PartitionKey, StorePool, TopicId};

#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Store endpoint URL (file://DIR, s3://BUCKET/PREFIX?endpoint=…, memory://),
    /// or id=URL, repeated for a pool of several endpoints.
    #[arg(
        long = "store",
        env = "FLOE_STORE",
        value_delimiter = ',',
        default_value = "file://./floe-data/store"
    )]
    stores: Vec<String>,
    #[command(flatten)]
    tuning: crate::roles::StoreTuning,
    #[command(flatten)]
    io: crate::roles::StoreIo,
}

impl StoreArgs {
    async fn open(&self) -> anyhow::Result<StorePool> {
        crate::roles::open_store(&self.stores, &self.tuning, self.io.direct_io).await
    }
}

#[derive(Debug, Subcommand)]
pub enum StorageCommand {
    /// Write a WAL object and a segment, read them back, verify, and clean up.
    Check {
        #[command(flatten)]
        store: StoreArgs,
        /// Partitions in the test WAL object.
        #[arg(long, default_value_t = 8)]
        partitions: u32,
        /// Records per partition.
        #[arg(long, default_value_t = 1000)]
        records: u32,
    },
    /// Print what an object holds: a WAL footer, a segment index, or a log's batches.
    Inspect {
        #[command(flatten)]
        store: StoreArgs,
        /// Endpoint id of the object (`default` for a single store).
        #[arg(long, default_value = "default")]
        endpoint: String,
        /// The object's key.
        key: String,
    },
    /// List the objects under wal/ and segments/ that the metadata does not
    /// know (orphans: late hedged writes, flushes never committed, segments
    /// a crash kept from being swapped in), with their size and age; with
    /// --delete, delete those older than --safe-age-ms. The brokers' orphan
    /// scan does the same every --orphan-scan-interval-ms. The store must be
    /// given with the cluster's endpoint ids (id=URL), as the brokers have it.
    Orphans {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        cluster: crate::meta_cmd::ClusterArgs,
        /// Only unknown objects at least this old (by the store's
        /// last-modified time) are deleted with --delete.
        #[arg(long, env = "FLOE_ORPHAN_SCAN_AGE_MS", default_value_t = 3_600_000)]
        safe_age_ms: u64,
        /// Delete the unknown objects older than --safe-age-ms (without it:
        /// a dry run that deletes nothing).
        #[arg(long)]
        delete: bool,
    },
}

pub async fn run(cmd: StorageCommand) -> anyhow::Result<()> {
    match cmd {
        StorageCommand::Check {
            store,
            partitions,
            records,
        } => check(&store.open().await?, partitions, records).await,
        StorageCommand::Inspect {
            store,
            endpoint,
            key,
        } => inspect(&store.open().await?, &endpoint, &key).await,
        StorageCommand::Orphans {
            store,
            cluster,
            safe_age_ms,
            delete,
        } => {
            let opts = floe_broker::orphans::ScanOptions {
                safe_age: Duration::from_millis(safe_age_ms),
                delete,
                page: floe_broker::orphans::DEFAULT_PAGE,
            };
            orphans(&store.open().await?, &cluster.client()?, &opts).await
        }
    }
}

/// A duration as an operator reads it: `42s`, `17m03s`, `5h12m`, `3d04h`.
fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m{:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h{:02}m", s / 3_600, s % 3_600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3_600),
    }
}

async fn orphans(
    pool: &StorePool,
    meta: &floe_metadata::api::client::MetaClient,
    opts: &floe_broker::orphans::ScanOptions,
) -> anyhow::Result<()> {
    use floe_broker::orphans::{LOG_PREFIXES, scan};
    let meta: &dyn floe_metadata::api::MetaApi = meta;
    let report = scan(
        pool,
        meta,
        opts,
        |o| {
            let fate = match (o.old_enough, o.deleted) {
                (false, _) => "younger than the safe age: kept",
                (true, true) => "older than the safe age: deleted",
                (true, false) if opts.delete => {
                    "older than the safe age: NOT deleted (see the log)"
                }
                (true, false) => "older than the safe age: would be deleted with --delete",
            };
            println!(
                "{}:{}  {} bytes  age {}  {fate}",
                o.object.endpoint,
                o.object.key,
                o.object.size,
                age(o.age)
            );
        },
        || true,
    )
    .await
    .context("orphan scan")?;
    println!(
        "listed {} objects under {}; {} unknown to the metadata ({} bytes), {} older than the safe age ({})",
        report.listed,
        LOG_PREFIXES.join(", "),
        report.unknown,
        report.unknown_bytes,
        report.old_enough,
        age(opts.safe_age)
    );
    if opts.delete {
        println!(
            "deleted {} objects ({} bytes)",
            report.deleted, report.deleted_bytes
        );
        if report.delete_failures > 0 {
            bail!("{} deletes failed", report.delete_failures);
        }
    } else {
        println!("dry run: nothing deleted (--delete deletes those older than the safe age)");
    }
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

async fn check(pool: &StorePool, partitions: u32, records: u32) -> anyhow::Result<()> {
    if partitions == 0 || records == 0 {
        bail!("--partitions and --records must be at least 1");
    }
    let topic = TopicId::random();
    let mut wal = WalBuilder::new();
    let mut seg = SegmentBuilder::new(floe_storage::segment::DEFAULT_INDEX_INTERVAL_BYTES);
    let mut expected = Vec::new();
    let now_ms = 1_700_000_000_000i64;
    for p in 0..partitions {
        let mut base = 0i64;
        let mut all = Vec::new();
        while base < records as i64 {
            let n = (records as i64 - base).min(100);
            let mut b = BatchBuilder::new(base, now_ms + base);
            for i in 0..n {
                b.push(RecordSpec::new(
                    Some(format!("key-{}", base + i).into_bytes()),
                    Some(format!("value {} of partition {p}", base + i).into_bytes()),
                    i,
                ));
            }
            let batch = b.build(Compression::Lz4)?;
            wal.append(PartitionKey::new(topic, p), batch.clone())?;
            if p == 0 {
                seg.append(batch.clone())?;
            }
            all.extend_from_slice(&batch);
            base += n;
        }
        expected.push(Bytes::from(all));
    }
    let wal = wal.finish();
    let t = Instant::now();
    let obj = pool
        .put_new(
            |tok| ObjectKey::new(format!("check/{topic}/{tok}.wal")),
            wal.payload(),
        )
        .await
        .context("writing the WAL object")?;
    println!("wrote WAL object {obj} in {}", ms(t.elapsed()));
    let t = Instant::now();
    let reader = WalReader::new(pool);
    let footer = reader
        .footer(&obj)
        .await
        .context("reading the WAL footer")?;
    for (p, want) in expected.iter().enumerate() {
        let key = PartitionKey::new(topic, p as u32);
        let entry = footer
            .entry(&key)
            .with_context(|| format!("partition {p} missing from the footer"))?;
        let got = reader.read_entry(&obj, entry).await?;
        if got != want {
            bail!("partition {p} read back different bytes");
        }
    }
    println!(
        "read back {} partitions byte-identical in {}",
        footer.entries.len(),
        ms(t.elapsed())
    );
    let t = Instant::now();
    let meta = write_segment(pool, &format!("check/{topic}/segments/0"), seg.finish()?)
        .await
        .context("writing the segment")?;
    println!("wrote segment {} in {}", meta.log, ms(t.elapsed()));
    let segs = SegmentReader::new(pool, 16 << 20);
    let target = Offset(records as i64 / 2);
    let read = segs
        .read(&meta, target, 1)
        .await?
        .context("offset not found in segment")?;
    if read.first_offset > target || read.next_offset <= target {
        bail!(
            "segment read for {target} returned {}..{}",
            read.first_offset,
            read.next_offset
        );
    }
    let by_time = segs.offset_for_timestamp(&meta, now_ms + target.0).await?;
    if by_time != Some(target) {
        bail!("timestamp lookup returned {by_time:?}, expected {target}");
    }
    println!("segment lookups by offset and timestamp agree ({target})");
    for o in [obj, meta.log, meta.index, meta.timeindex] {
        pool.delete(&o).await?;
    }
    println!("storage check passed");
    Ok(())
}

async fn inspect(pool: &StorePool, endpoint: &str, key: &str) -> anyhow::Result<()> {
    let obj = pool
        .head(&EndpointId::new(endpoint), &ObjectKey::new(key))
        .await?;
    let bytes = pool.get(&obj).await?;
    println!("{obj}");
    if key.ends_with(".index") {
        let idx = OffsetIndex::parse(bytes)?;
        println!(
            "offset index, base {}, {} entries",
            idx.base_offset(),
            idx.len()
        );
        for i in 0..idx.len() {
            if let Some((off, pos)) = idx.entry(i) {
                println!("  offset {off} at byte {pos}");
            }
        }
    } else if key.ends_with(".timeindex") {
        let idx = TimeIndex::parse(bytes)?;
        println!("time index, {} entries", idx.len());
        for i in 0..idx.len() {
            if let Some((ts, off, pos)) = idx.entry(i) {
                println!("  before byte {pos} (offset {off}) max timestamp {ts}");
            }
        }
    } else if bytes.ends_with(floe_storage::wal::WAL_MAGIC) {
        let footer = WalFooter::parse(&bytes, obj.size)?;
        println!("WAL object, {} partitions", footer.entries.len());
        for e in &footer.entries {
            println!(
                "  {} offsets {}..={} bytes {}..{} batches {} max timestamp {}",
                e.partition,
                e.first_offset,
                e.last_offset,
                e.data_offset,
                e.data_offset + e.data_len,
                e.batch_count,
                e.max_timestamp
            );
        }
    } else {
        for item in BatchIter::new(&bytes, usize::MAX) {
            let (pos, b) = item?;
            println!(
                "  batch at byte {pos}: offsets {}..={} records {} {:?} max timestamp {} crc {}",
                b.base_offset(),
                b.last_offset(),
                b.record_count(),
                b.compression(),
                b.max_timestamp(),
                if b.verify_crc().is_ok() { "ok" } else { "BAD" }
            );
        }
    }
    Ok(())
}
