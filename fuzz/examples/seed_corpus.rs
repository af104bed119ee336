//! Writes the seed corpora of the fuzz targets into `corpus/<target>/`.
//!
//! Run from `fuzz`: `cargo run --example seed_corpus`. The output is
//! deterministic, so re-running it rewrites the same files.

use std::fs;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use floe_storage::batch::Compression;
use floe_storage::ids::{PartitionKey, TopicId};
use floe_storage::records::{BatchBuilder, RecordSpec};
use floe_storage::segment::SegmentBuilder;
use floe_storage::wal::WalBuilder;

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Largest seed file: the targets run with `-max_len=65536`.
const MAX_SEED: usize = 64 * 1024;

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

fn batch(base: i64, records: usize, ts: i64, codec: Compression) -> AnyResult<Bytes> {
    let mut b = BatchBuilder::new(base, ts);
    for i in 0..records {
        let mut r = RecordSpec::new(
            (i % 3 != 0).then(|| format!("key-{i}").into_bytes()),
            (i % 5 != 4).then(|| vec![b'a' + (i % 26) as u8; 8 + i % 40]),
            (i as i64) * 3,
        );
        if i % 4 == 1 {
            r.headers = vec![
                (b"trace".to_vec(), Some(format!("t{i}").into_bytes())),
                (b"empty".to_vec(), None),
            ];
        }
        b.push(r);
    }
    Ok(b.build(codec)?)
}

fn topic(n: u8) -> TopicId {
    TopicId::from_bytes([n; 16])
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> AnyResult<()> {
    if bytes.len() > MAX_SEED {
        return Err(format!("seed {name} is {} bytes, over {MAX_SEED}", bytes.len()).into());
    }
    fs::write(dir.join(name), bytes)?;
    println!("{}/{name}: {} bytes", dir.display(), bytes.len());
    Ok(())
}

fn dir(root: &Path, target: &str) -> AnyResult<PathBuf> {
    let d = root.join(target);
    fs::create_dir_all(&d)?;
    Ok(d)
}

fn batch_view(root: &Path) -> AnyResult<()> {
    let d = dir(root, "batch_view")?;
    for codec in CODECS {
        let name = format!("{codec:?}").to_lowercase();
        write(&d, &name, &batch(100, 12, 1_700_000_000_000, codec)?)?;
    }
    write(&d, "one_record", &batch(0, 1, 0, Compression::None)?)?;
    let empty = BatchBuilder::new(5, 0).build(Compression::None)?;
    write(&d, "no_records", &empty)?;
    let txn = {
        let mut b = BatchBuilder::new(7, 42).producer(1234, 3, 17, true);
        b.push(RecordSpec::new(None, Some(b"commit".to_vec()), 0));
        b.build(Compression::None)?
    };
    write(&d, "transactional", &txn)?;
    // Several batches back to back, as in a .log object or a WAL range.
    let mut log = Vec::new();
    for (i, codec) in CODECS.into_iter().enumerate() {
        log.extend_from_slice(&batch(i as i64 * 10, 4, 1_000 + i as i64, codec)?);
    }
    write(&d, "concatenated", &log)?;
    // Codec byte + compressed data, for the target's direct decompress call.
    let plain = b"floe floe floe floe floe floe floe floe".repeat(20);
    for codec in CODECS.into_iter().skip(1) {
        let mut raw = vec![codec.id()];
        raw.extend(floe_storage::records::compress(codec, &plain)?);
        write(
            &d,
            &format!("raw_{}", format!("{codec:?}").to_lowercase()),
            &raw,
        )?;
    }
    Ok(())
}

fn wal_footer(root: &Path) -> AnyResult<()> {
    let d = dir(root, "wal_footer")?;
    let layouts: [(&str, &[(u8, u32, usize)]); 3] = [
        ("one_partition", &[(1, 0, 1)]),
        ("three_partitions", &[(1, 0, 2), (1, 7, 1), (2, 3, 3)]),
        (
            "many_partitions",
            &[
                (1, 0, 1),
                (1, 1, 1),
                (1, 2, 1),
                (2, 0, 1),
                (3, 0, 1),
                (3, 9, 1),
                (4, 5, 1),
                (9, 1, 1),
            ],
        ),
    ];
    for (name, parts) in layouts {
        let mut w = WalBuilder::new();
        for &(t, p, batches) in parts {
            let key = PartitionKey::new(topic(t), p);
            for b in 0..batches {
                w.append(key, batch(b as i64 * 10, 3, 5_000, Compression::None)?)?;
            }
        }
        let obj = w.finish();
        let bytes: Vec<u8> = obj.chunks.iter().flat_map(|c| c.iter().copied()).collect();
        write(&d, name, &bytes)?;
        // The footer and trailer alone (the data section cut off).
        let tail = obj.chunks.last().map(|c| c.to_vec()).unwrap_or_default();
        write(&d, &format!("{name}_tail"), &tail)?;
    }
    Ok(())
}

fn segment_index(root: &Path) -> AnyResult<()> {
    let d = dir(root, "segment_index")?;
    for (name, batches, interval) in [("small", 8usize, 1u64), ("medium", 120, 300)] {
        let mut b = SegmentBuilder::new(interval);
        let mut off = 1_000i64;
        for i in 0..batches {
            let n = 1 + i % 3;
            // Timestamps dip now and then so the time index skips entries.
            let ts = 10_000 + off * 10 - if i % 5 == 2 { 300 } else { 0 };
            b.append(batch(off, n, ts, Compression::None)?)?;
            off += n as i64;
        }
        let seg = b.finish()?;
        for (kind, index) in [("index", &seg.index), ("timeindex", &seg.timeindex)] {
            let mut input = seg.log_size.to_be_bytes().to_vec();
            input.extend_from_slice(index);
            write(&d, &format!("{name}_{kind}"), &input)?;
        }
    }
    Ok(())
}

fn main() -> AnyResult<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    batch_view(&root)?;
    wal_footer(&root)?;
    segment_index(&root)?;
    Ok(())
}
