//! One row per key (`table.mode=upsert`): a record replaces the row of
//! the same key (in the same Kafka partition) before it, and a tombstone
//! (a null value) removes it, as log compaction keeps a compacted topic.
//!
//! The data files stay the export's files, every record in them; what a
//! reader does not see is said by Iceberg v2 **position delete** files
//! (`file_path`, `pos`), which pyiceberg, DuckDB, Spark and Trino all
//! apply. A commit
//!
//! 1. knows, per key, where its live row is (a [`KeyMap`] of the current
//!    snapshot, kept in memory; after a restart, or when it belongs to
//!    another snapshot, rebuilt by reading the `key` and `value` columns of
//!    the table's data files);
//! 2. reads the `key` and `value` columns of the files it adds, in offset
//!    order, and writes the rows they supersede (and the tombstones
//!    themselves) to a new position delete file per partition of the
//!    table, at the snapshot's sequence number, so that it applies to the
//!    rows added in the same snapshot too;
//! 3. when the table's files changed below it (a compaction, retention, a
//!    backfill), its mode changed, or it lists [`MAX_DELETE_MANIFESTS`]
//!    delete manifests, writes the whole set of deletes again in place of
//!    the old ones (from every data file, or from the old delete files).
//!
//! Records without a key are rows of their own, never replaced.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{Array, BinaryArray, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, ManifestContentType,
    ManifestFile, ManifestWriterBuilder, PrimitiveLiteral, Struct, TableMetadata,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, PARQUET_FIELD_ID_META_KEY, ProjectionMask};

use super::commit::{iceberg_err, parse_manifest};
use crate::columns::{COL_KEY, COL_VALUE, FIXED_FIELD_IDS};
use crate::error::{IndexerError, Result};
use crate::exporter::Indexer;

/// Iceberg's reserved field id of a position delete's `file_path`.
pub const FILE_PATH_ID: i32 = 2_147_483_546;
/// Iceberg's reserved field id of a position delete's `pos`.
pub const POS_ID: i32 = 2_147_483_545;
/// The snapshot summary's key of the table's mode (`upsert`; absent: every
/// record is a row).
pub const MODE: &str = "floe.table-mode";
/// Delete manifests a snapshot lists before a commit writes its deletes
/// again as one set.
pub const MAX_DELETE_MANIFESTS: usize = 16;

/// A data file of the table, as a delete names it and is filed with.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FileRef {
    pub uri: Arc<str>,
    pub spec_id: i32,
    pub partition: Struct,
}

/// A key of one Kafka partition.
type RowKey = (i32, Bytes);
/// A row: its data file and position there.
pub type Position = (Arc<FileRef>, u64);
/// A row of a position delete file.
type PathPos = (Arc<str>, u64);

/// A row of a data file as upserts see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub key: Option<Bytes>,
    /// The value is null: the key is deleted.
    pub tombstone: bool,
}

/// Where each key's live row is, in the table as of `snapshot`.
#[derive(Debug, Default)]
pub struct KeyMap {
    pub snapshot: Option<i64>,
    live: HashMap<RowKey, Position>,
}

impl KeyMap {
    /// Keys with a live row.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Takes `rows` of `file` (in Kafka partition `partition`), in order:
    /// each keyed row becomes its key's live row, the one before it
    /// superseded; a tombstone removes the key and is superseded itself.
    /// What is superseded goes to `deleted`, when given.
    pub fn apply(
        &mut self,
        file: &Arc<FileRef>,
        partition: i32,
        rows: &[Row],
        mut deleted: Option<&mut Vec<Position>>,
    ) {
        for (pos, row) in rows.iter().enumerate() {
            let Some(key) = &row.key else { continue };
            let here = (file.clone(), pos as u64);
            let before = if row.tombstone {
                self.live.remove(&(partition, key.clone()))
            } else {
                self.live.insert((partition, key.clone()), here.clone())
            };
            if let Some(d) = deleted.as_deref_mut() {
                d.extend(before);
                if row.tombstone {
                    d.push(here);
                }
            }
        }
    }
}

/// What a snapshot's deletes are, for its summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteStats {
    pub added_files: u64,
    pub added_positions: u64,
    /// The old delete files were dropped (the set written again).
    pub rewritten: bool,
}

/// The order in which a table's data files are replayed: Kafka partition,
/// then first offset (from the bounds every entry carries).
pub fn replay_order(df: &DataFile) -> Option<(i32, i64)> {
    let [p_id, o_id, ..] = FIXED_FIELD_IDS;
    let p = match df.lower_bounds().get(&p_id)?.literal() {
        PrimitiveLiteral::Int(p) => *p,
        _ => return None,
    };
    let o = match df.lower_bounds().get(&o_id)?.literal() {
        PrimitiveLiteral::Long(o) => *o,
        _ => return None,
    };
    Some((p, o))
}

/// A data file of spec `spec_id` to replay: where, in which order, rows.
type Entry = (Arc<FileRef>, (i32, i64), u64);

fn entry(spec_id: i32, df: &DataFile) -> Result<Entry> {
    let order = replay_order(df).ok_or_else(|| {
        IndexerError::corrupt(format!(
            "data file {} has no partition and offset bounds",
            df.file_path()
        ))
    })?;
    let file = Arc::new(FileRef {
        uri: df.file_path().into(),
        spec_id,
        partition: df.partition().clone(),
    });
    Ok((file, order, df.record_count()))
}

/// Runs a reader of a stored Parquet file, which may be damaged: the
/// parquet/arrow reader panics on some malformed pages (fuzzing found
/// such), and that is an error about the file.
fn guarded<T>(what: &str, read: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|_| {
        Err(IndexerError::corrupt(format!(
            "{what}: not a readable Parquet file (its reader gave up)"
        )))
    })
}

/// A reader of `bytes` whose footer says it holds `rows` rows (what its
/// manifest entry says), or an error: a footer claiming more is not read.
fn reader_of(
    bytes: Bytes,
    what: &str,
    rows: u64,
) -> Result<ParquetRecordBatchReaderBuilder<Bytes>> {
    let b = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| IndexerError::corrupt(format!("{what}: {e}")))?;
    let claimed = b.metadata().file_metadata().num_rows();
    if u64::try_from(claimed).ok() != Some(rows) {
        return Err(IndexerError::corrupt(format!(
            "{what} holds {claimed} rows, its manifest entry says {rows}"
        )));
    }
    Ok(b)
}

/// The rows of a data file's `key` and `value` columns (`rows` of them).
pub fn rows_of_parquet(bytes: Bytes, what: &str, rows: u64) -> Result<Vec<Row>> {
    guarded(what, || read_rows(bytes, what, rows))
}

fn read_rows(bytes: Bytes, what: &str, count: u64) -> Result<Vec<Row>> {
    let bad = |e: &dyn std::fmt::Display| IndexerError::corrupt(format!("{what}: {e}"));
    let b = reader_of(bytes, what, count)?;
    let mask = ProjectionMask::columns(b.parquet_schema(), [COL_KEY, COL_VALUE]);
    let mut rows = Vec::new();
    for batch in b.with_projection(mask).build().map_err(|e| bad(&e))? {
        let batch = batch.map_err(|e| bad(&e))?;
        let col = |name: &str| -> Result<&BinaryArray> {
            batch
                .column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<BinaryArray>())
                .ok_or_else(|| bad(&format!("no binary {name} column")))
        };
        let (keys, values) = (col(COL_KEY)?, col(COL_VALUE)?);
        rows.extend((0..batch.num_rows()).map(|i| {
            Row {
                key: keys
                    .is_valid(i)
                    .then(|| Bytes::copy_from_slice(keys.value(i))),
                tombstone: values.is_null(i),
            }
        }));
    }
    Ok(rows)
}

/// The (`file_path`, `pos`) rows of a position delete file (`rows` of
/// them).
pub fn positions_of_parquet(bytes: Bytes, what: &str, rows: u64) -> Result<Vec<(String, u64)>> {
    guarded(what, || read_positions(bytes, what, rows))
}

fn read_positions(bytes: Bytes, what: &str, rows: u64) -> Result<Vec<(String, u64)>> {
    let bad = |e: &dyn std::fmt::Display| IndexerError::corrupt(format!("{what}: {e}"));
    let b = reader_of(bytes, what, rows)?;
    let mut out = Vec::new();
    for batch in b.build().map_err(|e| bad(&e))? {
        let batch = batch.map_err(|e| bad(&e))?;
        let paths = batch
            .column_by_name("file_path")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| bad(&"no file_path column"))?;
        let pos = batch
            .column_by_name("pos")
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .ok_or_else(|| bad(&"no pos column"))?;
        for i in 0..batch.num_rows() {
            let p = u64::try_from(pos.value(i)).map_err(|_| bad(&"a negative pos"))?;
            out.push((paths.value(i).to_string(), p));
        }
    }
    Ok(out)
}

/// A position delete file of `rows` (sorted by path, then position, as
/// the spec asks).
pub fn position_delete_parquet(rows: &[(&str, u64)]) -> Result<Vec<u8>> {
    let with_id = |f: Field, id: i32| {
        f.with_metadata(HashMap::from([(
            PARQUET_FIELD_ID_META_KEY.to_string(),
            id.to_string(),
        )]))
    };
    let schema = Arc::new(Schema::new(vec![
        with_id(Field::new("file_path", DataType::Utf8, false), FILE_PATH_ID),
        with_id(Field::new("pos", DataType::Int64, false), POS_ID),
    ]));
    let paths = StringArray::from_iter_values(rows.iter().map(|(p, _)| *p));
    let pos = Int64Array::from_iter_values(rows.iter().map(|(_, n)| *n as i64));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(paths), Arc::new(pos)])
        .map_err(|e| IndexerError::corrupt(format!("a position delete batch: {e}")))?;
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .build();
    let mut w = ArrowWriter::try_new(Vec::new(), schema, Some(props))
        .map_err(|e| IndexerError::corrupt(format!("a position delete file: {e}")))?;
    w.write(&batch)
        .and_then(|()| w.into_inner())
        .map_err(|e| IndexerError::corrupt(format!("a position delete file: {e}")))
}

/// What a commit of an upsert table (or one that was) needs.
pub(crate) struct UpsertCommit<'a> {
    pub topic: &'a str,
    pub staged: &'a TableMetadata,
    /// The table is in upsert mode now.
    pub upsert: bool,
    /// Write the whole set of deletes again (the files changed below the
    /// table, or its mode did).
    pub rewrite: bool,
    /// The snapshot's manifests so far: the data manifests (the new ones
    /// last) and the previous snapshot's delete manifests.
    pub manifests: Vec<ManifestFile>,
    /// The data files this snapshot adds (in `manifests` too), each with
    /// its partition spec.
    pub added: Vec<(i32, DataFile)>,
    pub id: i64,
    pub seq: i64,
    pub io: &'a FileIO,
    /// The table's location.
    pub location: &'a str,
    pub nonce: &'a str,
}

/// Its outcome: the snapshot's manifests, what its deletes are, and the
/// key map of the new snapshot (to keep once it is the table's).
pub(crate) struct UpsertDone {
    pub manifests: Vec<ManifestFile>,
    pub stats: DeleteStats,
    pub keys: Option<KeyMap>,
}

impl Indexer {
    /// The rows of the data file at `uri`.
    async fn data_rows(&self, uri: &str, rows: u64) -> Result<Vec<Row>> {
        rows_of_parquet(self.read_uri(uri).await?, uri, rows)
    }

    /// The live entries of the data manifests among `manifests`, each with
    /// its partition spec, in replay order.
    async fn live_data_files(&self, manifests: &[ManifestFile]) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        for m in manifests
            .iter()
            .filter(|m| m.content == ManifestContentType::Data)
        {
            let manifest = parse_manifest(&self.read_uri(&m.manifest_path).await?)?;
            for e in manifest.entries().iter().filter(|e| e.is_alive()) {
                out.push(entry(m.partition_spec_id, e.data_file())?);
            }
        }
        out.sort_by_key(|(f, order, _)| (*order, f.uri.clone()));
        Ok(out)
    }

    /// Replays `files` (in order) onto `keys`, noting what they supersede
    /// when `deleted` is given.
    async fn replay(
        &self,
        keys: &mut KeyMap,
        files: &[Entry],
        mut deleted: Option<&mut Vec<Position>>,
    ) -> Result<()> {
        for (file, (partition, _), count) in files {
            let rows = self.data_rows(&file.uri, *count).await?;
            if rows.len() as u64 != *count {
                return Err(IndexerError::corrupt(format!(
                    "data file {} has {} rows, its manifest entry says {count}",
                    file.uri,
                    rows.len()
                )));
            }
            keys.apply(file, *partition, &rows, deleted.as_deref_mut());
        }
        Ok(())
    }

    /// The deletes of a commit of an upsert table (see the module's doc),
    /// or, for a table that left upsert mode, the snapshot without its
    /// delete manifests.
    pub(crate) async fn upsert_deletes(&self, mut c: UpsertCommit<'_>) -> Result<UpsertDone> {
        let (deletes, mut manifests): (Vec<ManifestFile>, Vec<ManifestFile>) =
            std::mem::take(&mut c.manifests)
                .into_iter()
                .partition(|m| m.content == ManifestContentType::Deletes);
        if !c.upsert {
            return Ok(UpsertDone {
                manifests,
                stats: DeleteStats {
                    rewritten: true,
                    ..DeleteStats::default()
                },
                keys: None,
            });
        }
        let previous = c.staged.current_snapshot().map(|s| s.snapshot_id());
        // The map of the previous snapshot, unless the deletes are written
        // again from nothing.
        let mut keys = self
            .take_key_map(c.topic)
            .filter(|k| k.snapshot.is_some() && k.snapshot == previous && !c.rewrite)
            .unwrap_or_default();
        let mut new = c
            .added
            .iter()
            .map(|(spec_id, df)| entry(*spec_id, df))
            .collect::<Result<Vec<_>>>()?;
        new.sort_by_key(|(f, order, _)| (*order, f.uri.clone()));
        let mut deleted: Vec<Position> = Vec::new();
        let consolidate = !c.rewrite && deletes.len() >= MAX_DELETE_MANIFESTS;
        let rewrite = c.rewrite || consolidate;
        if c.rewrite {
            // Every data file of the new snapshot, from nothing.
            let all = self.live_data_files(&manifests).await?;
            self.replay(&mut keys, &all, Some(&mut deleted)).await?;
        } else {
            if keys.snapshot.is_none() {
                // After a restart: where the keys are, from the old files.
                let added: HashSet<&str> = new.iter().map(|(f, _, _)| &*f.uri).collect();
                let mut old = self.live_data_files(&manifests).await?;
                old.retain(|(f, _, _)| !added.contains(&*f.uri));
                self.replay(&mut keys, &old, None).await?;
            }
            self.replay(&mut keys, &new, Some(&mut deleted)).await?;
            if consolidate {
                // The old deletes and the new ones, as one set.
                for m in &deletes {
                    let manifest = parse_manifest(&self.read_uri(&m.manifest_path).await?)?;
                    for e in manifest.entries().iter().filter(|e| e.is_alive()) {
                        let df = e.data_file();
                        let rows = positions_of_parquet(
                            self.read_uri(df.file_path()).await?,
                            df.file_path(),
                            df.record_count(),
                        )?;
                        for (path, pos) in rows {
                            let file = Arc::new(FileRef {
                                uri: path.into(),
                                spec_id: m.partition_spec_id,
                                partition: df.partition().clone(),
                            });
                            deleted.push((file, pos));
                        }
                    }
                }
            }
        }
        if !rewrite {
            manifests.extend(deletes);
        }
        let stats = self
            .write_deletes(&c, &mut manifests, deleted, rewrite)
            .await?;
        keys.snapshot = Some(c.id);
        Ok(UpsertDone {
            manifests,
            stats,
            keys: Some(keys),
        })
    }

    /// Writes `deleted` as position delete files (one per partition of the
    /// table) and their manifests (one per spec), added to `manifests`.
    async fn write_deletes(
        &self,
        c: &UpsertCommit<'_>,
        manifests: &mut Vec<ManifestFile>,
        deleted: Vec<Position>,
        rewritten: bool,
    ) -> Result<DeleteStats> {
        let mut stats = DeleteStats {
            rewritten,
            ..DeleteStats::default()
        };
        // Per spec, per partition value: the rows, sorted and distinct.
        let mut groups: BTreeMap<i32, Vec<(Struct, Vec<PathPos>)>> = BTreeMap::new();
        for (file, pos) in deleted {
            let by_spec = groups.entry(file.spec_id).or_default();
            match by_spec.iter_mut().find(|(p, _)| *p == file.partition) {
                Some((_, rows)) => rows.push((file.uri.clone(), pos)),
                None => by_spec.push((file.partition.clone(), vec![(file.uri.clone(), pos)])),
            }
        }
        for (n, (spec_id, parts)) in groups.into_iter().enumerate() {
            let spec = c
                .staged
                .partition_spec_by_id(spec_id)
                .ok_or_else(|| IndexerError::corrupt(format!("no partition spec {spec_id}")))?
                .as_ref()
                .clone();
            let manifest_uri = format!("{}/metadata/{}-d{n}.avro", c.location, c.nonce);
            let out =
                c.io.new_output(&manifest_uri)
                    .map_err(iceberg_err("a delete manifest"))?;
            let mut w = ManifestWriterBuilder::new(
                out,
                Some(c.id),
                c.staged.current_schema().clone(),
                spec,
            )
            .build_v2_deletes();
            for (k, (partition, mut rows)) in parts.into_iter().enumerate() {
                rows.sort();
                rows.dedup();
                let refs: Vec<(&str, u64)> = rows.iter().map(|(p, n)| (&**p, *n)).collect();
                let bytes = position_delete_parquet(&refs)?;
                let uri = format!("{}/deletes/{}-{n}-{k}.parquet", c.location, c.nonce);
                let size = bytes.len() as u64;
                self.write_uri(&uri, bytes.into()).await?;
                let (first, last) = (refs[0].0, refs[refs.len() - 1].0);
                let df = DataFileBuilder::default()
                    .content(DataContentType::PositionDeletes)
                    .file_path(uri)
                    .file_format(DataFileFormat::Parquet)
                    .partition(partition)
                    .partition_spec_id(spec_id)
                    .record_count(rows.len() as u64)
                    .file_size_in_bytes(size)
                    .lower_bounds(HashMap::from([(FILE_PATH_ID, Datum::string(first))]))
                    .upper_bounds(HashMap::from([(FILE_PATH_ID, Datum::string(last))]))
                    .build()
                    .map_err(|e| IndexerError::corrupt(format!("a delete file entry: {e}")))?;
                w.add_file(df, c.seq)
                    .map_err(iceberg_err("a delete manifest entry"))?;
                stats.added_files += 1;
                stats.added_positions += rows.len() as u64;
            }
            manifests.push(self.store_manifest(c.io, &manifest_uri, w).await?);
        }
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str) -> Arc<FileRef> {
        Arc::new(FileRef {
            uri: name.into(),
            spec_id: 0,
            partition: Struct::empty(),
        })
    }

    fn row(key: Option<&str>, tombstone: bool) -> Row {
        Row {
            key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            tombstone,
        }
    }

    fn names(d: &[Position]) -> Vec<(String, u64)> {
        let mut v: Vec<_> = d.iter().map(|(f, p)| (f.uri.to_string(), *p)).collect();
        v.sort();
        v
    }

    #[test]
    fn a_later_row_supersedes_its_key_and_a_tombstone_removes_it_and_itself() {
        let (a, b) = (file("a"), file("b"));
        let mut keys = KeyMap::default();
        let mut d = Vec::new();
        keys.apply(
            &a,
            0,
            &[
                row(Some("x"), false),
                row(Some("y"), false),
                row(Some("x"), false),
                row(None, false),
            ],
            Some(&mut d),
        );
        assert_eq!(names(&d), vec![("a".into(), 0)], "x's first row is gone");
        assert_eq!(keys.len(), 2);
        d.clear();
        // Partition 1 has keys of its own; a tombstone of y in partition 0.
        keys.apply(
            &b,
            1,
            &[row(Some("y"), false), row(None, true)],
            Some(&mut d),
        );
        assert!(d.is_empty(), "another partition's y supersedes nothing");
        keys.apply(&b, 0, &[row(Some("y"), true)], Some(&mut d));
        assert_eq!(
            names(&d),
            vec![("a".into(), 1), ("b".into(), 0)],
            "y's row and the tombstone itself"
        );
        assert_eq!(keys.len(), 2, "x in 0 and y in 1");
        // A key deleted twice: the second tombstone supersedes only itself.
        d.clear();
        keys.apply(&b, 0, &[row(Some("y"), true)], Some(&mut d));
        assert_eq!(names(&d), vec![("b".into(), 0)]);
        // Replaying without noting deletes moves the keys all the same.
        let mut quiet = KeyMap::default();
        quiet.apply(&a, 0, &[row(Some("x"), false)], None);
        assert_eq!(quiet.len(), 1);
    }

    #[test]
    fn position_delete_files_round_trip_with_the_reserved_field_ids() {
        let bytes =
            position_delete_parquet(&[("s3://b/a.parquet", 3), ("s3://b/b.parquet", 0)]).unwrap();
        let rows = positions_of_parquet(Bytes::from(bytes.clone()), "d", 2).unwrap();
        let wrong = positions_of_parquet(Bytes::from(bytes.clone()), "d", 3).unwrap_err();
        assert!(wrong.message.contains("holds 2 rows"), "{}", wrong.message);
        assert_eq!(
            rows,
            vec![
                ("s3://b/a.parquet".to_string(), 3),
                ("s3://b/b.parquet".to_string(), 0)
            ]
        );
        let meta = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(bytes)).unwrap();
        let ids: Vec<_> = meta
            .schema()
            .fields()
            .iter()
            .map(|f| f.metadata().get(PARQUET_FIELD_ID_META_KEY).cloned())
            .collect();
        assert_eq!(
            ids,
            vec![Some(FILE_PATH_ID.to_string()), Some(POS_ID.to_string())]
        );
        assert_eq!(
            rows_of_parquet(Bytes::from_static(b"not parquet"), "x", 0)
                .unwrap_err()
                .kind,
            crate::error::ErrorKind::Corrupt
        );
    }
}
