//! One commit of a topic's Iceberg table: the export files committed since
//! the table's current snapshot become a new snapshot.
//!
//! The table itself says what it holds: each snapshot's summary carries,
//! per partition, the first offset it does not cover (`floe.offsets`) and
//! the export generation its files belong to. A commit
//!
//! 1. reads the table's pointer from the Raft state and its current
//!    metadata file from the store;
//! 2. takes the committed export files at or past those offsets;
//! 3. writes a manifest listing them, a manifest list (the previous
//!    snapshot's manifests and the new one) and a new metadata file, each
//!    under a new name;
//! 4. moves the pointer from the metadata file it read to the new one,
//!    a compare-and-set in the Raft state.
//!
//! A crash before step 4 leaves files no snapshot refers to, and the next
//! commit starts again from the same snapshot: the same export files, no
//! row twice and none missing. After step 4 the new snapshot's offsets say
//! where the next commit starts. Two committers cannot both win step 4.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use floe_metadata::export::{ExportFile, TopicExports};
use floe_metadata::export_def::IndexDefinition;
use floe_storage::{EndpointId, ObjectKey};
use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, FormatVersion, Literal,
    MAIN_BRANCH, Manifest, ManifestContentType, ManifestFile, ManifestList, ManifestListWriter,
    ManifestWriter, ManifestWriterBuilder, Operation, Snapshot, SortOrder, Struct, Summary,
    TableMetadata, TableMetadataBuilder, Transform, UnboundPartitionSpec,
};

use super::schema::{name_mapping, table_schema};
use super::upsert;
use crate::columns::FIXED_FIELD_IDS;
use crate::error::{IndexerError, Result};
use crate::exporter::Indexer;
use crate::settings::{ExportSettings, TimeBucket};

/// The partition spec of a table partitioned by `bucket` (of the
/// `timestamp` column), or the unpartitioned one.
pub fn partition_spec(bucket: Option<TimeBucket>) -> Result<UnboundPartitionSpec> {
    let [_, _, t_id, ..] = FIXED_FIELD_IDS;
    let b = UnboundPartitionSpec::builder();
    let b = match bucket {
        None => b,
        Some(TimeBucket::Day) => b
            .add_partition_field(t_id, "timestamp_day", Transform::Day)
            .map_err(iceberg_err("a partition spec"))?,
        Some(TimeBucket::Hour) => b
            .add_partition_field(t_id, "timestamp_hour", Transform::Hour)
            .map_err(iceberg_err("a partition spec"))?,
    };
    Ok(b.build())
}

/// The partition of a file whose records' times are `min..=max` under
/// `bucket`: its value, or `None` when the file spans two (a file exported
/// before the topic was a table, or before its partitioning changed),
/// which then goes to the unpartitioned spec.
pub fn partition_of(bucket: TimeBucket, min: i64, max: i64) -> Option<Struct> {
    let (lo, hi) = (bucket.of(min), bucket.of(max));
    if lo != hi {
        return None;
    }
    let v = i32::try_from(lo).ok()?;
    let literal = match bucket {
        TimeBucket::Day => Literal::date(v),
        TimeBucket::Hour => Literal::int(v),
    };
    Some(Struct::from_iter([Some(literal)]))
}

/// The snapshot summary's key for the offsets a snapshot covers: a JSON
/// object of partition → first offset not in the table.
pub const OFFSETS: &str = "floe.offsets";
/// The snapshot summary's key for the export generation of its files.
pub const GENERATION: &str = "floe.export-generation";
/// Snapshots a table keeps: older ones are dropped from its metadata as
/// new ones come (an append-only table's current snapshot still holds
/// every file).
pub const MAX_SNAPSHOTS: usize = 500;
/// Manifests a snapshot lists before a commit merges them (per partition
/// spec) into one.
pub const MAX_MANIFESTS: usize = 16;
/// The table property that names the topic.
pub const TOPIC_PROPERTY: &str = "floe.topic";
/// Iceberg's table property of the name mapping.
const NAME_MAPPING: &str = "schema.name-mapping.default";

/// Whether the table `m` already has this schema, partitioning and name
/// mapping (a commit would change nothing of its shape).
fn same_shape(
    m: &TableMetadata,
    schema: &iceberg::spec::Schema,
    spec: &UnboundPartitionSpec,
    mapping: &str,
) -> bool {
    let fields = |f: &iceberg::spec::PartitionField| (f.source_id, f.transform, f.name.clone());
    let spec_fields: Vec<_> = spec
        .fields()
        .iter()
        .map(|f| (f.source_id, f.transform, f.name.clone()))
        .collect();
    m.current_schema().as_struct() == schema.as_struct()
        && m.default_partition_spec()
            .fields()
            .iter()
            .map(fields)
            .collect::<Vec<_>>()
            == spec_fields
        && m.properties().get(NAME_MAPPING).map(String::as_str) == Some(mapping)
}

/// Where a commit stands, for the crash tests (`FLOE_TABLE_PAUSE_AT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The manifest of the new files is written.
    Manifest,
    /// The manifest list is written.
    ManifestList,
    /// The new metadata file is written.
    Metadata,
    /// The pointer moved: the snapshot is the table's.
    Pointer,
    /// A compacted file is written, not yet in the exports.
    Compacted,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Manifest => "manifest",
            Phase::ManifestList => "manifest-list",
            Phase::Metadata => "metadata",
            Phase::Pointer => "pointer",
            Phase::Compacted => "compacted",
        }
    }
}

/// Test hook: with `FLOE_TABLE_PAUSE_AT=<phase>` a commit logs that it
/// reached the phase and waits there for good, so that a test can
/// `kill -9` the process at exactly that point of a commit.
pub(crate) async fn reached(phase: Phase) {
    if std::env::var("FLOE_TABLE_PAUSE_AT").is_ok_and(|v| v == phase.name()) {
        tracing::warn!(
            phase = phase.name(),
            "table commit paused (FLOE_TABLE_PAUSE_AT)"
        );
        std::future::pending::<()>().await;
    }
}

/// What a commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub snapshot_id: Option<i64>,
    /// Data files added.
    pub files: usize,
    pub records: u64,
    /// Data files removed from the current snapshot.
    pub removed: usize,
    /// Snapshots expired.
    pub expired: usize,
    /// A snapshot that made the table's files the exports' again (after a
    /// compaction or retention), rather than one that appended.
    pub reconciled: bool,
    pub metadata_location: String,
}

/// What a snapshot removes from the table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Removed {
    files: u64,
    records: u64,
    bytes: u64,
}

/// What kind of snapshot a commit makes.
struct Change<'a> {
    /// A backfill: the new generation's files replace all.
    overwrite: bool,
    /// The exports changed below what the table covers.
    reconcile: bool,
    /// The table's mode (`table.mode`) changed.
    remode: bool,
    /// The table is in upsert mode.
    upsert: bool,
    removed: &'a Removed,
    /// The position deletes it writes.
    deletes: &'a upsert::DeleteStats,
}

/// The snapshots of `m` to expire at `now_ms`: those older than `max_age`
/// and, with `adding` a snapshot, the oldest beyond [`MAX_SNAPSHOTS`] -
/// never the current one.
pub fn expired_snapshots(
    m: &TableMetadata,
    now_ms: i64,
    max_age: std::time::Duration,
    adding: bool,
) -> Vec<i64> {
    let current = m.current_snapshot_id();
    let horizon = now_ms.saturating_sub(i64::try_from(max_age.as_millis()).unwrap_or(i64::MAX));
    let mut old: Vec<(i64, i64)> = m
        .snapshots()
        .filter(|s| Some(s.snapshot_id()) != current)
        .map(|s| (s.timestamp_ms(), s.snapshot_id()))
        .collect();
    old.sort();
    let total = m.snapshots().count() + usize::from(adding);
    let excess = total.saturating_sub(MAX_SNAPSHOTS);
    old.iter()
        .enumerate()
        .filter(|(i, (ts, _))| *i < excess || *ts < horizon)
        .map(|(_, (_, id))| *id)
        .collect()
}

pub(crate) fn iceberg_err(what: &str) -> impl Fn(iceberg::Error) -> IndexerError + '_ {
    move |e| IndexerError::corrupt(format!("{what}: {e}"))
}

/// What a snapshot's summary says it covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Covered {
    pub generation: Option<u64>,
    /// Partition → first offset not in the table.
    pub offsets: BTreeMap<u32, i64>,
}

impl Covered {
    pub fn of(snapshot: Option<&Snapshot>) -> Result<Covered> {
        let Some(s) = snapshot else {
            return Ok(Covered::default());
        };
        let props = &s.summary().additional_properties;
        let offsets = match props.get(OFFSETS) {
            Some(v) => serde_json::from_str::<BTreeMap<u32, i64>>(v).map_err(|e| {
                IndexerError::corrupt(format!("snapshot {}: {OFFSETS}: {e}", s.snapshot_id()))
            })?,
            None => BTreeMap::new(),
        };
        let generation = props.get(GENERATION).and_then(|g| g.parse().ok());
        Ok(Covered {
            generation,
            offsets,
        })
    }
}

/// A data manifest of snapshot `id` written in memory at `uri`.
fn manifest_writer(
    io: &FileIO,
    uri: &str,
    id: i64,
    schema: iceberg::spec::SchemaRef,
    spec: iceberg::spec::PartitionSpec,
) -> Result<ManifestWriter> {
    let out = io.new_output(uri).map_err(iceberg_err("a manifest"))?;
    Ok(ManifestWriterBuilder::new(out, Some(id), schema, spec).build_v2_data())
}

/// A table's metadata file (what a store holds: it may be damaged).
pub fn parse_metadata(bytes: &[u8], location: &str) -> Result<TableMetadata> {
    serde_json::from_slice(bytes)
        .map_err(|e| IndexerError::corrupt(format!("table metadata {location}: {e}")))
}

/// Runs an Avro decoder of stored bytes, whose reader (apache-avro)
/// panics on some malformed headers (fuzzing found one): the panic is an
/// error about the file, not the end of the export loop.
fn avro_decode<T>(what: &str, decode: impl FnOnce() -> iceberg::Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode)) {
        Ok(r) => r.map_err(iceberg_err(what)),
        Err(_) => Err(IndexerError::corrupt(format!(
            "{what}: not a readable Avro file (its reader gave up)"
        ))),
    }
}

/// The manifests a manifest list names.
pub fn parse_manifest_list(bytes: &[u8], version: FormatVersion) -> Result<Vec<ManifestFile>> {
    let list = avro_decode("a manifest list", || {
        ManifestList::parse_with_version(bytes, version)
    })?;
    Ok(list.consume_entries().into_iter().collect())
}

/// A manifest's entries (as stored: it may be damaged).
pub fn parse_manifest(bytes: &[u8]) -> Result<Manifest> {
    avro_decode("a manifest", || Manifest::parse_avro(bytes))
}

/// The export files a new snapshot adds: per partition, those at or past
/// the offset the table covers. Fails when a file straddles it (the table
/// and the exports disagree).
pub fn files_to_add<'a>(
    exports: &'a TopicExports,
    covered: &Covered,
) -> Result<Vec<(u32, &'a ExportFile)>> {
    let mut out = Vec::new();
    for p in &exports.partitions {
        let from = covered.offsets.get(&p.partition).copied().unwrap_or(0);
        for f in &p.files {
            if f.first_offset >= from {
                out.push((p.partition, f));
            } else if f.last_offset >= from {
                return Err(IndexerError::corrupt(format!(
                    "partition {}: export file {} ({}..={}) straddles offset {from}, where the \
                     table's snapshot ends",
                    p.partition, f.key, f.first_offset, f.last_offset
                )));
            }
        }
    }
    Ok(out)
}

/// The offsets covered once `added` joins `covered` (a partition with no
/// file keeps its offset).
pub fn covered_after(covered: &Covered, added: &[(u32, &ExportFile)]) -> BTreeMap<u32, i64> {
    let mut next = covered.offsets.clone();
    for (p, f) in added {
        let e = next.entry(*p).or_insert(0);
        *e = (*e).max(f.last_offset + 1);
    }
    next
}

impl Indexer {
    /// The URI of an object of the export endpoint.
    fn uri_of(&self, endpoint: &str, key: &str) -> Result<String> {
        self.pool()
            .uri(&EndpointId::new(endpoint), &ObjectKey::new(key))
            .ok_or_else(|| {
                IndexerError::invalid(format!(
                    "store endpoint {endpoint} has no URI that readers could open"
                ))
            })
    }

    /// The URI under which `topic`'s table files are (with a trailing slash).
    pub(crate) fn table_prefix_uri(&self, topic: &str) -> Result<String> {
        self.uri_of(self.endpoint().as_str(), &format!("tables/{topic}/"))
    }

    /// The key under the export endpoint of one of its URIs.
    pub(crate) fn key_of(&self, uri: &str) -> Result<ObjectKey> {
        let base = self.uri_of(self.endpoint().as_str(), "")?;
        uri.strip_prefix(&base).map(ObjectKey::new).ok_or_else(|| {
            IndexerError::corrupt(format!("{uri} is not under the export endpoint ({base})"))
        })
    }

    pub(crate) async fn read_uri(&self, uri: &str) -> Result<bytes::Bytes> {
        let key = self.key_of(uri)?;
        let obj = self.pool().head(self.endpoint(), &key).await?;
        Ok(self.pool().get(&obj).await?)
    }

    pub(crate) async fn write_uri(&self, uri: &str, bytes: bytes::Bytes) -> Result<()> {
        let key = self.key_of(uri)?;
        self.pool()
            .put_at(self.endpoint(), key, bytes.into())
            .await?;
        Ok(())
    }

    /// A table's metadata, read from the file the pointer names. A
    /// metadata file never changes once written, so the last one read of
    /// each location is kept: an idle round reads nothing from the store.
    pub async fn table_metadata(&self, location: &str) -> Result<Arc<TableMetadata>> {
        if let Some(m) = self.cached_metadata(location) {
            return Ok(m);
        }
        let bytes = self.read_uri(location).await?;
        let m = Arc::new(parse_metadata(&bytes, location)?);
        self.cache_metadata(location, m.clone());
        Ok(m)
    }

    /// Commits the topic's exports to its table: first, when the exports
    /// changed below what the table covers (a compaction, files past
    /// `export.retention.ms`), a `replace` or `delete` snapshot that makes
    /// the table's files the exports' again; then the files committed past
    /// what it covers as an `append` snapshot (an `overwrite` after a
    /// backfill). Snapshots older than `table.snapshot.max.age.ms` are
    /// expired on the way. `None` when there was nothing to do.
    pub async fn commit_table(
        &self,
        topic: &str,
        settings: &ExportSettings,
    ) -> Result<Option<Committed>> {
        let first = self.commit_table_once(topic, settings).await?;
        match &first {
            Some(c) if c.reconciled => {
                let then = self.commit_table_once(topic, settings).await?;
                Ok(then.or(first))
            }
            _ => Ok(first),
        }
    }

    async fn commit_table_once(
        &self,
        topic: &str,
        settings: &ExportSettings,
    ) -> Result<Option<Committed>> {
        let (def, bucket) = (&settings.definition, settings.bucket);
        let meta = self.meta();
        let table = meta.table_state(topic).await?;
        let exports = meta.export_state(topic).await?;
        let ids = self.table_field_ids(topic, table.topic_id, def).await?;
        let schema = table_schema(def, &ids)?;
        let current = match &table.state.metadata_location {
            Some(loc) => Some(self.table_metadata(loc).await?),
            None => None,
        };
        let current = current.as_deref();
        let generation = exports
            .partitions
            .iter()
            .map(|p| p.generation)
            .max()
            .unwrap_or(0);
        let current_snapshot = current.and_then(|m| m.current_snapshot()).map(|s| &**s);
        let mut covered = Covered::of(current_snapshot)?;
        // A backfill started the exports over: the new generation's files
        // replace the table's.
        let overwrite = covered.generation.is_some_and(|g| g != generation);
        if overwrite {
            covered = Covered::default();
        }
        // What the table holds against what the exports hold below the
        // offsets it covers: they differ after a compaction or retention.
        let (have, removed, below) = match (overwrite, current, current_snapshot) {
            (false, Some(m), Some(s)) => {
                let have = self
                    .snapshot_files(s.manifest_list(), m.format_version())
                    .await?;
                let mut below: Vec<(u32, &ExportFile)> = Vec::new();
                let mut want: HashSet<String> = HashSet::new();
                for p in &exports.partitions {
                    let to = covered.offsets.get(&p.partition).copied().unwrap_or(0);
                    for f in p.files.iter().filter(|f| f.rows > 0 && f.last_offset < to) {
                        let uri = self.uri_of(&f.endpoint, &f.key)?;
                        if !have.contains(&uri) {
                            below.push((p.partition, f));
                        }
                        want.insert(uri);
                    }
                }
                let removed: HashSet<String> = have
                    .iter()
                    .filter(|u| !want.contains(*u))
                    .cloned()
                    .collect();
                (Some(have), removed, below)
            }
            _ => (None, HashSet::new(), Vec::new()),
        };
        let reconcile = !removed.is_empty() || !below.is_empty();
        // A table in upsert mode, or one that was: its deletes follow.
        let was_upsert = current_snapshot.is_some_and(|s| {
            s.summary()
                .additional_properties
                .get(upsert::MODE)
                .map(String::as_str)
                == Some("upsert")
        });
        let remode = current_snapshot.is_some() && was_upsert != settings.upsert;
        let added = if reconcile {
            below
        } else {
            files_to_add(&exports, &covered)?
        };
        // Whether this commit makes a snapshot; snapshots past their age
        // (the current one stays), or beyond the most a table keeps.
        let now_ms = chrono::Utc::now().timestamp_millis();
        let adding = !added.is_empty() || overwrite || reconcile || remode;
        let expired = current.map_or_else(Vec::new, |m| {
            expired_snapshots(m, now_ms, settings.snapshot_max_age, adding)
        });
        let spec = partition_spec(bucket)?;
        let mapping = name_mapping(&schema);
        // An idle round (no file, same columns and partitioning) stops here,
        // before any metadata is staged.
        if !adding
            && expired.is_empty()
            && current.is_some_and(|m| same_shape(m, &schema, &spec, &mapping))
        {
            return Ok(None);
        }

        let location = self.uri_of(self.endpoint().as_str(), &format!("tables/{topic}"))?;
        let properties = HashMap::from([
            (TOPIC_PROPERTY.to_string(), topic.to_string()),
            (NAME_MAPPING.to_string(), mapping),
        ]);
        // The schema (and name mapping) of this commit.
        let builder = match current {
            Some(m) => m
                .clone()
                .into_builder(table.state.metadata_location.clone()),
            None => TableMetadataBuilder::new(
                table_schema(&IndexDefinition::default(), &[])?,
                UnboundPartitionSpec::builder().build(),
                SortOrder::unsorted_order(),
                location.clone(),
                FormatVersion::V2,
                HashMap::new(),
            )
            .map_err(iceberg_err("a new table"))?,
        };
        let staged = builder
            .add_current_schema(schema)
            .and_then(|b| b.add_default_partition_spec(spec))
            .and_then(|b| b.set_properties(properties))
            .and_then(|b| b.build())
            .map_err(iceberg_err("the table's schema"))?
            .metadata;
        let changed = current.is_none_or(|m| {
            m.current_schema_id() != staged.current_schema_id()
                || m.default_partition_spec_id() != staged.default_partition_spec_id()
                || m.properties() != staged.properties()
        });
        if !adding && !changed && expired.is_empty() {
            return Ok(None);
        }

        let records: u64 = added.iter().map(|(_, f)| f.rows).sum();
        let kept: Vec<&(u32, &ExportFile)> = added.iter().filter(|(_, f)| f.rows > 0).collect();
        let mut snapshot_id = None;
        let mut files_now: Option<(String, HashSet<String>)> = None;
        let mut removed_count = 0u64;
        let mut keys = None;
        let new = if !adding {
            // The schema, or the snapshots kept, changed: no new snapshot.
            staged
                .into_builder(None)
                .remove_snapshots(&expired)
                .build()
                .map_err(iceberg_err("the table's snapshots"))?
                .metadata
        } else {
            let id = self.new_snapshot_id(&staged);
            snapshot_id = Some(id);
            let seq = staged.next_sequence_number();
            let parent = staged.current_snapshot().map(|s| s.snapshot_id());
            let schema = staged.current_schema().clone();
            let io = FileIO::new_with_memory();
            let nonce = uuid::Uuid::new_v4().simple().to_string();

            let mut manifests: Vec<ManifestFile> = Vec::new();
            let mut gone = Removed::default();
            if !overwrite && let Some(prev) = staged.current_snapshot() {
                let bytes = self.read_uri(prev.manifest_list()).await?;
                let listed = parse_manifest_list(&bytes, staged.format_version())?;
                if removed.is_empty() {
                    manifests.extend(listed);
                } else {
                    let stem = format!("{location}/metadata/{nonce}");
                    for (n, m) in listed.into_iter().enumerate() {
                        manifests.push(
                            self.without_files(&staged, m, &removed, id, &io, &stem, n, &mut gone)
                                .await?,
                        );
                    }
                    removed_count = gone.files;
                }
            }
            // One manifest per partition spec: the default one, and the
            // unpartitioned one for files that span two partitions.
            let default_spec = staged.default_partition_spec().clone();
            let unpartitioned = staged
                .partition_specs_iter()
                .find(|s| s.fields().is_empty())
                .cloned()
                .ok_or_else(|| IndexerError::corrupt("the table has no unpartitioned spec"))?;
            let mut by_spec: BTreeMap<i32, Vec<DataFile>> = BTreeMap::new();
            let mut added_files: Vec<(i32, DataFile)> = Vec::new();
            for (p, f) in &kept {
                let part = match bucket {
                    Some(b) if !default_spec.fields().is_empty() => {
                        partition_of(b, f.min_timestamp, f.max_timestamp)
                    }
                    _ => None,
                };
                let (spec_id, value) = match part {
                    Some(v) => (default_spec.spec_id(), v),
                    None => (unpartitioned.spec_id(), Struct::empty()),
                };
                let df = self.data_file(*p, f, spec_id, value)?;
                if settings.upsert {
                    added_files.push((spec_id, df.clone()));
                }
                by_spec.entry(spec_id).or_default().push(df);
            }
            for (n, (spec_id, files)) in by_spec.into_iter().enumerate() {
                let spec = staged
                    .partition_spec_by_id(spec_id)
                    .ok_or_else(|| IndexerError::corrupt(format!("no partition spec {spec_id}")))?
                    .as_ref()
                    .clone();
                let manifest_uri = format!("{location}/metadata/{nonce}-m{n}.avro");
                let mut w = manifest_writer(&io, &manifest_uri, id, schema.clone(), spec)?;
                for df in files {
                    w.add_file(df, seq)
                        .map_err(iceberg_err("a manifest entry"))?;
                }
                let manifest = self.store_manifest(&io, &manifest_uri, w).await?;
                reached(Phase::Manifest).await;
                manifests.push(manifest);
            }
            // An upsert table's deletes of the rows that later ones (or
            // tombstones) supersede; a table that left upsert mode drops
            // its deletes.
            let mut deletes = upsert::DeleteStats::default();
            if settings.upsert || was_upsert {
                let done = self
                    .upsert_deletes(upsert::UpsertCommit {
                        topic,
                        staged: &staged,
                        upsert: settings.upsert,
                        rewrite: overwrite || reconcile || remode,
                        manifests,
                        added: added_files,
                        id,
                        seq,
                        io: &io,
                        location: &location,
                        nonce: &nonce,
                    })
                    .await?;
                manifests = done.manifests;
                deletes = done.stats;
                keys = done.keys;
            }
            // A snapshot that removes files keeps its manifests as they are,
            // so that they say what it removed; the next one merges.
            let manifests = if removed.is_empty() {
                self.merge_manifests(
                    &staged,
                    manifests,
                    id,
                    &io,
                    &format!("{location}/metadata/{nonce}"),
                )
                .await?
            } else {
                manifests
            };

            let list_uri = format!("{location}/metadata/snap-{id}-1-{nonce}.avro");
            let out = io
                .new_output(&list_uri)
                .map_err(iceberg_err("a manifest list"))?;
            let mut w = ManifestListWriter::v2(
                out.writer().await.map_err(iceberg_err("a manifest list"))?,
                id,
                parent,
                seq,
            );
            w.add_manifests(manifests.into_iter())
                .map_err(iceberg_err("a manifest list"))?;
            w.close().await.map_err(iceberg_err("a manifest list"))?;
            self.copy_out(&io, &list_uri).await?;
            reached(Phase::ManifestList).await;

            let mut now_files: HashSet<String> = if overwrite {
                HashSet::new()
            } else {
                have.as_deref().cloned().unwrap_or_default()
            };
            now_files.retain(|u| !removed.contains(u));
            for (_, f) in &kept {
                now_files.insert(self.uri_of(&f.endpoint, &f.key)?);
            }
            files_now = Some((list_uri.clone(), now_files));

            let summary = self.summary(
                staged.current_snapshot().map(|s| &**s),
                &covered,
                &added,
                generation,
                Change {
                    overwrite,
                    reconcile,
                    remode,
                    upsert: settings.upsert,
                    removed: &gone,
                    deletes: &deletes,
                },
            )?;
            let snapshot = Snapshot::builder()
                .with_snapshot_id(id)
                .with_parent_snapshot_id(parent)
                .with_sequence_number(seq)
                .with_timestamp_ms(now_ms.max(staged.last_updated_ms() + 1))
                .with_manifest_list(list_uri)
                .with_summary(summary)
                .with_schema_id(staged.current_schema_id())
                .build();
            // Snapshots before a backfill name files of the old generation,
            // which its files may overwrite: they are all dropped.
            let drop: Vec<i64> = if overwrite {
                staged.snapshots().map(|s| s.snapshot_id()).collect()
            } else {
                expired.clone()
            };
            staged
                .into_builder(None)
                .set_branch_snapshot(snapshot, MAIN_BRANCH)
                .map(|b| b.remove_snapshots(&drop))
                .and_then(|b| b.build())
                .map_err(iceberg_err("the new snapshot"))?
                .metadata
        };

        let version = table.state.version + 1;
        let metadata_uri = format!(
            "{location}/metadata/{version:05}-{}.metadata.json",
            uuid::Uuid::new_v4()
        );
        let json = serde_json::to_vec(&new)
            .map_err(|e| IndexerError::corrupt(format!("table metadata as JSON: {e}")))?;
        self.write_uri(&metadata_uri, json.into()).await?;
        reached(Phase::Metadata).await;
        meta.table_commit(
            topic,
            table.state.metadata_location.as_deref(),
            &metadata_uri,
        )
        .await?;
        self.published().forget(topic);
        if let Some(keys) = keys {
            self.put_key_map(topic, keys);
        }
        if let Some((list, files)) = files_now {
            self.cache_snapshot_files(&list, Arc::new(files));
        }
        crate::metrics::table_commit(kept.len() as u64, records);
        crate::metrics::table_removed(removed_count, expired.len() as u64);
        tracing::info!(
            topic,
            snapshot = ?snapshot_id,
            files = kept.len(),
            records,
            removed = removed_count,
            expired = expired.len(),
            metadata = %metadata_uri,
            "table committed"
        );
        reached(Phase::Pointer).await;
        Ok(Some(Committed {
            snapshot_id,
            files: kept.len(),
            records,
            removed: removed_count as usize,
            expired: expired.len(),
            reconciled: reconcile,
            metadata_location: metadata_uri,
        }))
    }

    /// The data files (URIs) of the snapshot whose manifest list is
    /// `list`: read once (a snapshot never changes), then remembered.
    pub(crate) async fn snapshot_files(
        &self,
        list: &str,
        version: FormatVersion,
    ) -> Result<Arc<HashSet<String>>> {
        if let Some(files) = self.cached_snapshot_files(list) {
            return Ok(files);
        }
        let mut files = HashSet::new();
        let bytes = self.read_uri(list).await?;
        for m in parse_manifest_list(&bytes, version)? {
            if m.content != ManifestContentType::Data {
                continue;
            }
            let manifest = parse_manifest(&self.read_uri(&m.manifest_path).await?)?;
            for e in manifest.entries().iter().filter(|e| e.is_alive()) {
                files.insert(e.data_file().file_path().to_string());
            }
        }
        let files = Arc::new(files);
        self.cache_snapshot_files(list, files.clone());
        Ok(files)
    }

    /// `m` for a snapshot that removes the files `removed`: as it is when
    /// it names none of them, else written again (as manifest `n` of the
    /// snapshot `id`) with those files' entries `DELETED` and the others
    /// `EXISTING`. What it removed is added to `gone`.
    #[allow(clippy::too_many_arguments)]
    async fn without_files(
        &self,
        staged: &TableMetadata,
        m: ManifestFile,
        removed: &HashSet<String>,
        id: i64,
        io: &FileIO,
        stem: &str,
        n: usize,
        gone: &mut Removed,
    ) -> Result<ManifestFile> {
        let manifest = parse_manifest(&self.read_uri(&m.manifest_path).await?)?;
        let alive: Vec<_> = manifest.entries().iter().filter(|e| e.is_alive()).collect();
        if !alive
            .iter()
            .any(|e| removed.contains(e.data_file().file_path()))
        {
            return Ok(m);
        }
        let spec = staged
            .partition_spec_by_id(m.partition_spec_id)
            .ok_or_else(|| {
                IndexerError::corrupt(format!("no partition spec {}", m.partition_spec_id))
            })?
            .as_ref()
            .clone();
        let uri = format!("{stem}-r{n}.avro");
        let mut w = manifest_writer(io, &uri, id, staged.current_schema().clone(), spec)?;
        for e in alive {
            let seq = e.sequence_number().unwrap_or(m.sequence_number);
            let file_seq = e.file_sequence_number.or(Some(m.sequence_number));
            let df = e.data_file().clone();
            if removed.contains(df.file_path()) {
                gone.files += 1;
                gone.records += df.record_count();
                gone.bytes += df.file_size_in_bytes();
                w.add_delete_file(df, seq, file_seq)
                    .map_err(iceberg_err("a removed manifest entry"))?;
            } else {
                w.add_existing_file(
                    df,
                    e.snapshot_id().unwrap_or(m.added_snapshot_id),
                    seq,
                    file_seq,
                )
                .map_err(iceberg_err("a kept manifest entry"))?;
            }
        }
        self.store_manifest(io, &uri, w).await
    }

    /// The manifests a new snapshot lists: as they are while fewer than
    /// [`MAX_MANIFESTS`], else those of each partition spec merged into one
    /// (their entries kept as `EXISTING`, with the snapshot ids and
    /// sequence numbers they were added with), so that a table of many
    /// commits still has few manifests to read.
    async fn merge_manifests(
        &self,
        staged: &TableMetadata,
        manifests: Vec<ManifestFile>,
        id: i64,
        io: &FileIO,
        stem: &str,
    ) -> Result<Vec<ManifestFile>> {
        // Delete manifests stay as they are (an upsert table writes its
        // deletes again as one set before they grow many: `upsert`).
        let (data, deletes): (Vec<ManifestFile>, Vec<ManifestFile>) = manifests
            .into_iter()
            .partition(|m| m.content == ManifestContentType::Data);
        if data.len() < MAX_MANIFESTS {
            return Ok(data.into_iter().chain(deletes).collect());
        }
        let mut by_spec: BTreeMap<i32, Vec<ManifestFile>> = BTreeMap::new();
        for m in data {
            by_spec.entry(m.partition_spec_id).or_default().push(m);
        }
        let schema = staged.current_schema().clone();
        let mut out = deletes;
        for (spec_id, group) in by_spec {
            if group.len() == 1 {
                out.extend(group);
                continue;
            }
            let spec = staged
                .partition_spec_by_id(spec_id)
                .ok_or_else(|| IndexerError::corrupt(format!("no partition spec {spec_id}")))?
                .as_ref()
                .clone();
            let uri = format!("{stem}-merged-{spec_id}.avro");
            let mut w = manifest_writer(io, &uri, id, schema.clone(), spec)?;
            for m in &group {
                let bytes = self.read_uri(&m.manifest_path).await?;
                let manifest = parse_manifest(&bytes)?;
                for e in manifest.entries().iter().filter(|e| e.is_alive()) {
                    let seq = e.sequence_number().unwrap_or(m.sequence_number);
                    w.add_existing_file(
                        e.data_file().clone(),
                        e.snapshot_id().unwrap_or(m.added_snapshot_id),
                        seq,
                        e.file_sequence_number.or(Some(m.sequence_number)),
                    )
                    .map_err(iceberg_err("a merged manifest entry"))?;
                }
            }
            out.push(self.store_manifest(io, &uri, w).await?);
        }
        Ok(out)
    }

    /// Puts what `io` (in memory) holds at `uri` in the store, under the
    /// same URI.
    async fn copy_out(&self, io: &FileIO, uri: &str) -> Result<()> {
        let bytes = io
            .new_input(uri)
            .map_err(iceberg_err("a table file"))?
            .read()
            .await
            .map_err(iceberg_err("a table file"))?;
        self.write_uri(uri, bytes).await
    }

    /// Finishes a manifest written in memory and puts it in the store.
    pub(crate) async fn store_manifest(
        &self,
        io: &FileIO,
        uri: &str,
        w: ManifestWriter,
    ) -> Result<ManifestFile> {
        let manifest = w
            .write_manifest_file()
            .await
            .map_err(iceberg_err("a manifest"))?;
        self.copy_out(io, uri).await?;
        Ok(manifest)
    }

    /// A snapshot id not in use (positive, random).
    fn new_snapshot_id(&self, m: &TableMetadata) -> i64 {
        loop {
            let (hi, lo) = uuid::Uuid::new_v4().as_u64_pair();
            let id = ((hi ^ lo) >> 1) as i64;
            if id > 0 && m.snapshot_by_id(id).is_none() {
                return id;
            }
        }
    }

    /// The manifest entry of one export file: its URI, size and rows, and
    /// bounds of partition, offset and timestamp (what readers prune by).
    fn data_file(
        &self,
        partition: u32,
        f: &ExportFile,
        spec_id: i32,
        value: Struct,
    ) -> Result<DataFile> {
        let [p_id, o_id, t_id, ..] = FIXED_FIELD_IDS;
        let p = i32::try_from(partition)
            .map_err(|_| IndexerError::invalid(format!("partition {partition}")))?;
        let micros = |ms: i64| ms.saturating_mul(1000);
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path(self.uri_of(&f.endpoint, &f.key)?)
            .file_format(DataFileFormat::Parquet)
            .partition(value)
            .partition_spec_id(spec_id)
            .record_count(f.rows)
            .file_size_in_bytes(f.size)
            .value_counts(HashMap::from([
                (p_id, f.rows),
                (o_id, f.rows),
                (t_id, f.rows),
            ]))
            .null_value_counts(HashMap::from([(p_id, 0), (o_id, 0), (t_id, 0)]))
            .lower_bounds(HashMap::from([
                (p_id, Datum::int(p)),
                (o_id, Datum::long(f.first_offset)),
                (t_id, Datum::timestamptz_micros(micros(f.min_timestamp))),
            ]))
            .upper_bounds(HashMap::from([
                (p_id, Datum::int(p)),
                (o_id, Datum::long(f.last_offset)),
                (t_id, Datum::timestamptz_micros(micros(f.max_timestamp))),
            ]))
            .build()
            .map_err(|e| IndexerError::corrupt(format!("a data file entry: {e}")))
    }

    /// The new snapshot's summary: Iceberg's counts, and what it covers.
    fn summary(
        &self,
        parent: Option<&Snapshot>,
        covered: &Covered,
        added: &[(u32, &ExportFile)],
        generation: u64,
        change: Change<'_>,
    ) -> Result<Summary> {
        let total = |key: &str| -> u64 {
            if change.overwrite {
                return 0;
            }
            parent
                .and_then(|s| s.summary().additional_properties.get(key))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let kept = added.iter().filter(|(_, f)| f.rows > 0);
        let files = kept.clone().count() as u64;
        let records: u64 = kept.clone().map(|(_, f)| f.rows).sum();
        let size: u64 = kept.map(|(_, f)| f.size).sum();
        let gone = change.removed;
        let offsets = serde_json::to_string(&covered_after(covered, added))
            .map_err(|e| IndexerError::corrupt(format!("{OFFSETS}: {e}")))?;
        let after = |key: &str, plus: u64, minus: u64| {
            (total(key) + plus).saturating_sub(minus).to_string()
        };
        let d = change.deletes;
        // Deletes written again replace the old ones.
        let deletes_total = |key: &str, plus: u64| {
            if d.rewritten {
                plus.to_string()
            } else {
                (total(key) + plus).to_string()
            }
        };
        let mut props = HashMap::from([
            ("added-data-files".to_string(), files.to_string()),
            ("added-records".to_string(), records.to_string()),
            ("added-files-size".to_string(), size.to_string()),
            (
                "total-data-files".to_string(),
                after("total-data-files", files, gone.files),
            ),
            (
                "total-records".to_string(),
                after("total-records", records, gone.records),
            ),
            (
                "total-files-size".to_string(),
                after("total-files-size", size, gone.bytes),
            ),
            (
                "total-delete-files".to_string(),
                deletes_total("total-delete-files", d.added_files),
            ),
            (
                "total-position-deletes".to_string(),
                deletes_total("total-position-deletes", d.added_positions),
            ),
            ("total-equality-deletes".to_string(), "0".to_string()),
            (OFFSETS.to_string(), offsets),
            (GENERATION.to_string(), generation.to_string()),
        ]);
        if d.added_files > 0 {
            props.insert("added-delete-files".into(), d.added_files.to_string());
            props.insert(
                "added-position-deletes".into(),
                d.added_positions.to_string(),
            );
        }
        if change.upsert {
            props.insert(upsert::MODE.into(), "upsert".into());
        }
        if gone.files > 0 {
            props.insert("deleted-data-files".into(), gone.files.to_string());
            props.insert("deleted-records".into(), gone.records.to_string());
            props.insert("removed-files-size".into(), gone.bytes.to_string());
        }
        if change.overwrite
            && let Some(p) = parent
        {
            let before = |k: &str| {
                p.summary()
                    .additional_properties
                    .get(k)
                    .cloned()
                    .unwrap_or_else(|| "0".into())
            };
            props.insert("deleted-data-files".into(), before("total-data-files"));
            props.insert("deleted-records".into(), before("total-records"));
        }
        let operation = if change.overwrite || change.remode {
            Operation::Overwrite
        } else if !change.reconcile && d.added_positions > 0 {
            // Rows added, and rows they supersede deleted.
            Operation::Overwrite
        } else if !change.reconcile {
            Operation::Append
        } else if files == 0 {
            Operation::Delete
        } else if gone.records == records {
            // A compaction: the same rows in other files.
            Operation::Replace
        } else {
            Operation::Overwrite
        };
        Ok(Summary {
            operation,
            additional_properties: props,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use floe_metadata::export::PartitionExports;
    use floe_metadata::ids::TopicId;

    fn file(first: i64, last: i64, rows: u64) -> ExportFile {
        ExportFile {
            endpoint: "default".into(),
            key: format!("exports/t/0-{first}-{last}.parquet"),
            first_offset: first,
            last_offset: last,
            rows,
            size: 100,
            min_timestamp: 0,
            max_timestamp: 0,
        }
    }

    fn exports(parts: Vec<Vec<ExportFile>>) -> TopicExports {
        TopicExports {
            topic_id: TopicId(uuid::Uuid::nil()),
            partitions: parts
                .into_iter()
                .enumerate()
                .map(|(i, files)| PartitionExports {
                    partition: i as u32,
                    generation: 1,
                    next_offset: files.last().map_or(0, |f| f.last_offset + 1),
                    pending: None,
                    files,
                    log_start_offset: 0,
                    high_watermark: 100,
                })
                .collect(),
        }
    }

    #[test]
    fn a_file_in_one_time_bucket_has_its_partition_and_one_across_two_none() {
        let hour = 3_600_000;
        let day = 24 * hour;
        assert_eq!(
            partition_of(TimeBucket::Hour, 5 * hour + 1, 6 * hour - 1),
            Some(Struct::from_iter([Some(Literal::int(5))]))
        );
        assert_eq!(partition_of(TimeBucket::Hour, 5 * hour, 6 * hour), None);
        assert_eq!(
            partition_of(TimeBucket::Day, 3 * day, 3 * day + 23 * hour),
            Some(Struct::from_iter([Some(Literal::date(3))]))
        );
        assert_eq!(
            partition_of(TimeBucket::Day, -1, -1),
            Some(Struct::from_iter([Some(Literal::date(-1))])),
            "before 1970: the day before"
        );
        assert!(partition_spec(None).unwrap().fields().is_empty());
        let by_day = partition_spec(Some(TimeBucket::Day)).unwrap();
        assert_eq!(by_day.fields()[0].source_id, FIXED_FIELD_IDS[2]);
        assert_eq!(by_day.fields()[0].transform, Transform::Day);
    }

    #[test]
    fn a_commit_takes_the_files_past_what_the_table_covers() {
        let e = exports(vec![
            vec![file(0, 9, 10), file(10, 19, 0), file(20, 29, 10)],
            vec![file(0, 4, 5)],
        ]);
        let covered = Covered {
            generation: Some(1),
            offsets: BTreeMap::from([(0, 10)]),
        };
        let added = files_to_add(&e, &covered).unwrap();
        let firsts: Vec<(u32, i64)> = added.iter().map(|(p, f)| (*p, f.first_offset)).collect();
        assert_eq!(firsts, vec![(0, 10), (0, 20), (1, 0)]);
        assert_eq!(
            covered_after(&covered, &added),
            BTreeMap::from([(0, 30), (1, 5)])
        );
        // Everything covered: nothing to add, the offsets stay.
        let all = Covered {
            generation: Some(1),
            offsets: BTreeMap::from([(0, 30), (1, 5)]),
        };
        assert!(files_to_add(&e, &all).unwrap().is_empty());
        // A file across the table's end means the two disagree.
        let odd = Covered {
            generation: Some(1),
            offsets: BTreeMap::from([(0, 5)]),
        };
        assert_eq!(files_to_add(&e, &odd).unwrap_err().kind, ErrorKind::Corrupt);
    }
}
