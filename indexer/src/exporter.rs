//! The export loop: every poll, each topic with `export.enabled` has its
//! committed data written to Parquet files, exactly once.
//!
//! Per partition a file goes through three steps: *begin* (the metadata
//! records its name and offset range as pending), *write* (the object under
//! that deterministic name), *commit* (the metadata moves the partition's
//! exported offset past it). A pending file found at start is rewritten with
//! exactly its range, so a crash anywhere leaves no row twice and none out.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floe_metadata::api::MetaApi;
use floe_metadata::export::{ExportFile, PartitionExports};
use floe_metadata::ids::{PartitionKey, TopicId};
use floe_storage::records::Record;
use floe_storage::{EndpointId, ObjectKey, ObjectRef, StorePool};
use futures::StreamExt;

use crate::columns;
use crate::error::{ErrorKind, IndexerError, Result};
use crate::log_reader::LogReader;
use crate::settings::{ExportSettings, file_key, hour_of, topic_prefix};

/// Table metadata files the indexer keeps parsed (a table's current one is
/// what a round reads; older ones go when the cache is full).
const METADATA_CACHE: usize = 256;

/// The catalog name of Floe's rows in an external SQL catalog, by default.
pub const DEFAULT_CATALOG_NAME: &str = "floe";

/// How the indexer runs.
#[derive(Debug, Clone)]
pub struct IndexerConfig {
    /// How often topics are looked at.
    pub poll: Duration,
    /// The store endpoint exports go to (default: the pool's first).
    pub endpoint: Option<EndpointId>,
    /// How often files nothing refers to are deleted (per topic).
    pub sweep_every: Duration,
    /// Most log bytes a query reads that are not exported yet, per partition.
    pub max_query_log_bytes: u64,
    /// How old a table's metadata object nothing refers to must be before
    /// the sweep deletes it (see `table::sweep`).
    pub table_orphan_grace: Duration,
    /// An external SQL catalog every table is published to as well
    /// (`sqlite:PATH`; see `table::external`).
    pub table_catalog: Option<String>,
    /// The catalog name of Floe's rows in that catalog.
    pub table_catalog_name: String,
}

impl Default for IndexerConfig {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(1),
            endpoint: None,
            sweep_every: Duration::from_secs(60),
            max_query_log_bytes: 64 * 1024 * 1024,
            table_orphan_grace: Duration::from_secs(600),
            table_catalog: None,
            table_catalog_name: DEFAULT_CATALOG_NAME.to_string(),
        }
    }
}

/// The indexer role. Cheap to clone.
#[derive(Clone)]
pub struct Indexer {
    inner: Arc<Inner>,
}

struct Inner {
    meta: Arc<dyn MetaApi>,
    pool: Arc<StorePool>,
    reader: LogReader,
    endpoint: EndpointId,
    cfg: IndexerConfig,
    /// Since when a partition has had data not exported yet.
    waiting: Mutex<HashMap<(String, u32), Instant>>,
    /// Backfills: export without waiting up to these offsets.
    due: Mutex<HashMap<(String, u32), i64>>,
    /// When each topic's exports were last swept (absent: sweep now).
    swept: Mutex<HashMap<String, Instant>>,
    /// When each table's hours that ended were last looked at for a
    /// compaction (as often as the sweep: it is never urgent).
    compacted: Mutex<HashMap<String, Instant>>,
    /// One round at a time (the loop, and tests calling `run_once`).
    round: tokio::sync::Mutex<()>,
    /// The Iceberg field ids of a table's typed columns, per topic id and
    /// index definition (asked of the Raft state once each).
    field_ids: Mutex<HashMap<(TopicId, String), Vec<i32>>>,
    /// The manifests each manifest list names, by the list's URI (a list
    /// never changes once written), for the tables' sweep.
    manifest_lists: Mutex<HashMap<String, Vec<String>>>,
    /// The last table metadata file read, by its URI (it never changes),
    /// at most [`METADATA_CACHE`] of them.
    table_metadata: Mutex<HashMap<String, Arc<iceberg::spec::TableMetadata>>>,
    /// The live data files each manifest names, by the manifest's URI (a
    /// manifest never changes), for the export sweep of a table.
    manifest_files: Mutex<HashMap<String, Arc<Vec<String>>>>,
    /// The data files of a table's snapshot, by its manifest list's URI
    /// (it never changes), at most [`METADATA_CACHE`] of them.
    snapshot_files: Mutex<HashMap<String, Arc<HashSet<String>>>>,
    /// Per upsert table, where each key's live row is (`table::upsert`).
    key_maps: Mutex<HashMap<String, crate::table::upsert::KeyMap>>,
    /// The ACLs the query API checks bearer-token callers against, and
    /// when they were read.
    acls: tokio::sync::Mutex<Option<(Instant, Arc<floe_metadata::acl::AclIndex>)>>,
    /// The external SQL catalog tables are published to, if any.
    external: Option<crate::table::sql_catalog::SqlCatalog>,
    /// What was last published there, per table.
    published: crate::table::external::Published,
    /// When the external catalog was last cleared of tables that are gone,
    /// and the tables there were in the round before.
    unpublished: Mutex<(Option<Instant>, HashSet<String>)>,
}

/// How long the query API uses ACLs it read before reading them again.
pub const ACL_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(2);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn pref(topic_id: TopicId, partition: u32) -> PartitionKey {
    PartitionKey::new(topic_id, partition)
}

/// A file about to be written.
struct Planned {
    file: ExportFile,
    bytes: Vec<u8>,
}

impl Indexer {
    pub fn new(meta: Arc<dyn MetaApi>, pool: Arc<StorePool>, cfg: IndexerConfig) -> Result<Self> {
        let endpoint = match &cfg.endpoint {
            Some(e) => {
                pool.store(e)?;
                e.clone()
            }
            None => pool
                .endpoint_ids()
                .next()
                .cloned()
                .ok_or_else(|| IndexerError::invalid("the store pool has no endpoint"))?,
        };
        let external = match &cfg.table_catalog {
            Some(uri) => Some(crate::table::sql_catalog::SqlCatalog::parse(
                uri,
                &cfg.table_catalog_name,
            )?),
            None => None,
        };
        crate::metrics::register();
        Ok(Self {
            inner: Arc::new(Inner {
                reader: LogReader::new(meta.clone(), pool.clone()),
                meta,
                pool,
                endpoint,
                cfg,
                waiting: Mutex::new(HashMap::new()),
                due: Mutex::new(HashMap::new()),
                swept: Mutex::new(HashMap::new()),
                compacted: Mutex::new(HashMap::new()),
                round: tokio::sync::Mutex::new(()),
                field_ids: Mutex::new(HashMap::new()),
                manifest_lists: Mutex::new(HashMap::new()),
                table_metadata: Mutex::new(HashMap::new()),
                snapshot_files: Mutex::new(HashMap::new()),
                key_maps: Mutex::new(HashMap::new()),
                manifest_files: Mutex::new(HashMap::new()),
                acls: tokio::sync::Mutex::new(None),
                external,
                published: Default::default(),
                unpublished: Mutex::new((None, HashSet::new())),
            }),
        })
    }

    pub fn meta(&self) -> &Arc<dyn MetaApi> {
        &self.inner.meta
    }

    /// The cluster's ACLs, read again when older than [`ACL_MAX_AGE`].
    pub async fn acls(&self) -> Result<Arc<floe_metadata::acl::AclIndex>> {
        let mut cached = self.inner.acls.lock().await;
        if let Some((at, ix)) = cached.as_ref()
            && at.elapsed() < ACL_MAX_AGE
        {
            return Ok(ix.clone());
        }
        let view = self
            .inner
            .meta
            .watch(floe_metadata::ids::Revision(0), std::time::Duration::ZERO)
            .await?;
        let ix = Arc::new(floe_metadata::acl::AclIndex::new(
            &view.acls.unwrap_or_default(),
        ));
        *cached = Some((Instant::now(), ix.clone()));
        Ok(ix)
    }

    pub fn pool(&self) -> &Arc<StorePool> {
        &self.inner.pool
    }

    /// The external SQL catalog tables are published to, if one is set.
    pub(crate) fn external_catalog(&self) -> Option<&crate::table::sql_catalog::SqlCatalog> {
        self.inner.external.as_ref()
    }

    pub(crate) fn published(&self) -> &crate::table::external::Published {
        &self.inner.published
    }

    /// The manifests the manifest list at `uri` names, read once.
    pub(crate) async fn manifests_of(
        &self,
        uri: &str,
        version: iceberg::spec::FormatVersion,
    ) -> Result<Vec<String>> {
        if let Some(m) = lock(&self.inner.manifest_lists).get(uri) {
            return Ok(m.clone());
        }
        let bytes = self.read_uri(uri).await?;
        let paths: Vec<String> = crate::table::commit::parse_manifest_list(&bytes, version)?
            .into_iter()
            .map(|f| f.manifest_path)
            .collect();
        lock(&self.inner.manifest_lists).insert(uri.to_string(), paths.clone());
        Ok(paths)
    }

    pub(crate) fn cached_metadata(
        &self,
        location: &str,
    ) -> Option<Arc<iceberg::spec::TableMetadata>> {
        lock(&self.inner.table_metadata).get(location).cloned()
    }

    pub(crate) fn cache_metadata(&self, location: &str, m: Arc<iceberg::spec::TableMetadata>) {
        let mut cache = lock(&self.inner.table_metadata);
        if cache.len() >= METADATA_CACHE {
            cache.clear();
        }
        cache.insert(location.to_string(), m);
    }

    pub(crate) fn cached_snapshot_files(&self, list: &str) -> Option<Arc<HashSet<String>>> {
        lock(&self.inner.snapshot_files).get(list).cloned()
    }

    pub(crate) fn cache_snapshot_files(&self, list: &str, files: Arc<HashSet<String>>) {
        let mut cache = lock(&self.inner.snapshot_files);
        if cache.len() >= METADATA_CACHE {
            cache.clear();
        }
        cache.insert(list.to_string(), files);
    }

    /// Takes `topic`'s key map out (a commit puts the new one back once the
    /// table's pointer moved: a failed commit leaves none, rebuilt next).
    pub(crate) fn take_key_map(&self, topic: &str) -> Option<crate::table::upsert::KeyMap> {
        lock(&self.inner.key_maps).remove(topic)
    }

    pub(crate) fn put_key_map(&self, topic: &str, keys: crate::table::upsert::KeyMap) {
        lock(&self.inner.key_maps).insert(topic.to_string(), keys);
    }

    /// The live data files (URIs) of the manifest at `uri`, read once.
    pub(crate) async fn manifest_files(&self, uri: &str) -> Result<Arc<Vec<String>>> {
        if let Some(f) = lock(&self.inner.manifest_files).get(uri) {
            return Ok(f.clone());
        }
        let manifest = crate::table::commit::parse_manifest(&self.read_uri(uri).await?)?;
        let files: Arc<Vec<String>> = Arc::new(
            manifest
                .entries()
                .iter()
                .filter(|e| e.is_alive())
                .map(|e| e.data_file().file_path().to_string())
                .collect(),
        );
        lock(&self.inner.manifest_files).insert(uri.to_string(), files.clone());
        Ok(files)
    }

    /// Forgets the manifests under `prefix` (one table's) not in `keep`
    /// (those of expired snapshots).
    pub(crate) fn forget_manifest_files(&self, prefix: &str, keep: &HashSet<String>) {
        lock(&self.inner.manifest_files)
            .retain(|uri, _| !uri.starts_with(prefix) || keep.contains(uri));
    }

    /// Forgets the manifest lists not in `keep` (dropped snapshots').
    /// (Under `prefix`: one table's.)
    pub(crate) fn forget_manifest_lists(&self, prefix: &str, keep: &HashSet<String>) {
        lock(&self.inner.manifest_lists)
            .retain(|uri, _| !uri.starts_with(prefix) || keep.contains(uri));
    }

    /// The store endpoint exports (and tables) are written to.
    pub fn endpoint(&self) -> &EndpointId {
        &self.inner.endpoint
    }

    /// The Iceberg field ids of `def`'s typed columns in `topic`'s table
    /// (`floe_metadata::table`): new (name, type) pairs get new ids.
    pub async fn table_field_ids(
        &self,
        topic: &str,
        topic_id: TopicId,
        def: &floe_metadata::export_def::IndexDefinition,
    ) -> Result<Vec<i32>> {
        let pairs: Vec<(String, String)> = def
            .columns
            .iter()
            .map(|c| (c.name.clone(), c.kind.name().to_string()))
            .collect();
        let cache_key = (topic_id, format!("{pairs:?}"));
        if let Some(ids) = lock(&self.inner.field_ids).get(&cache_key) {
            return Ok(ids.clone());
        }
        let ids = self.inner.meta.table_columns(topic, &pairs).await?;
        if ids.len() != pairs.len() {
            return Err(IndexerError::corrupt(format!(
                "the metadata gave {} field ids for {} columns",
                ids.len(),
                pairs.len()
            )));
        }
        lock(&self.inner.field_ids).insert(cache_key, ids.clone());
        Ok(ids)
    }

    pub fn reader(&self) -> &LogReader {
        &self.inner.reader
    }

    pub fn config(&self) -> &IndexerConfig {
        &self.inner.cfg
    }

    /// Runs the export loop until the task is dropped.
    pub fn start(&self) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                // Failures are counted and logged where they happen.
                if let Err(e) = me.run_once().await {
                    tracing::debug!(error = %e, "export round failed");
                }
                tokio::time::sleep(me.inner.cfg.poll).await;
            }
        })
    }

    /// One round over every topic with exports enabled.
    pub async fn run_once(&self) -> Result<()> {
        let _round = self.inner.round.lock().await;
        let topics = match self.inner.meta.list_topics().await {
            Ok(t) => t,
            Err(e) => {
                crate::metrics::error();
                tracing::warn!(error = %e, "cannot list topics; retrying next round");
                return Err(e.into());
            }
        };
        let mut first_err = None;
        let mut tables: HashSet<String> = HashSet::new();
        let mut upserts: HashSet<&str> = HashSet::new();
        for t in &topics {
            let settings = ExportSettings::from_topic(t);
            if settings.enabled && settings.table {
                tables.insert(t.name.clone());
            }
            if settings.table && settings.upsert {
                upserts.insert(&t.name);
            }
            if !settings.enabled {
                continue;
            }
            let exported = self.export_topic(&t.name, &settings).await;
            // A table takes what is exported, even when a partition failed;
            // then its hours that ended are compacted, and the table
            // follows.
            let committed = if settings.table {
                self.maintain_table(&t.name, &settings).await
            } else {
                Ok(())
            };
            match exported.and(committed) {
                Ok(()) => {}
                // A backfill reset the topic: the next round starts over.
                Err(e) if e.kind == ErrorKind::Conflict => {}
                Err(e) => {
                    crate::metrics::error();
                    tracing::warn!(topic = %t.name, error = %e, "export failed; retrying next round");
                    first_err.get_or_insert(e);
                }
            }
        }
        // The key maps of tables that are gone, or no longer upsert tables.
        lock(&self.inner.key_maps).retain(|topic, _| upserts.contains(topic.as_str()));
        self.unpublish_gone_now_and_then(tables).await;
        first_err.map_or(Ok(()), Err)
    }

    /// The external catalog's rows of tables that are gone are dropped in
    /// the round a table goes, and once a sweep period (for those gone
    /// while no indexer ran); a failure is counted, and retried then.
    async fn unpublish_gone_now_and_then(&self, tables: HashSet<String>) {
        if self.external_catalog().is_none() {
            return;
        }
        let due = {
            let mut last = lock(&self.inner.unpublished);
            let (at, before) = &mut *last;
            let went = before.iter().any(|t| !tables.contains(t));
            let due = went || at.is_none_or(|t| t.elapsed() >= self.inner.cfg.sweep_every);
            if due {
                *at = Some(Instant::now());
            }
            due
        };
        if due && let Err(e) = self.unpublish_gone(&tables).await {
            crate::metrics::catalog_error(e.kind);
            tracing::warn!(error = %e, "cannot drop gone tables from the SQL catalog; retrying later");
        }
        lock(&self.inner.unpublished).1 = tables;
    }

    /// A table's round: commit what was exported, compact the hours that
    /// ended, and commit the compaction.
    async fn maintain_table(&self, topic: &str, settings: &ExportSettings) -> Result<()> {
        self.commit_table(topic, settings).await?;
        let due = lock(&self.inner.compacted)
            .get(topic)
            .is_none_or(|t| t.elapsed() >= self.inner.cfg.sweep_every);
        if due {
            let compacted = self.compact_table(topic, settings, false).await?;
            lock(&self.inner.compacted).insert(topic.to_string(), Instant::now());
            if compacted.written > 0 {
                self.commit_table(topic, settings).await?;
            }
        }
        self.publish_or_warn(topic).await;
        Ok(())
    }

    /// Publishes `topic`'s table to the external catalog, if one is set;
    /// a failure is counted and logged, and the next round tries again
    /// (the table itself is committed: readers of Floe's catalog see it).
    pub(crate) async fn publish_or_warn(&self, topic: &str) {
        if let Err(e) = self.publish_table(topic).await {
            crate::metrics::catalog_error(e.kind);
            tracing::warn!(topic, error = %e, "cannot publish the table to the SQL catalog");
        }
    }

    /// The export settings of `topic` (an unknown topic is an error).
    async fn settings_of(&self, topic: &str) -> Result<ExportSettings> {
        let topics = self.inner.meta.list_topics().await?;
        let t = topics.iter().find(|t| t.name == topic).ok_or_else(|| {
            IndexerError::new(ErrorKind::UnknownTopic, format!("unknown topic {topic:?}"))
        })?;
        Ok(ExportSettings::from_topic(t))
    }

    /// `floe table compact`: compacts every run of the table's small files
    /// now, the open hour's too, and commits the result.
    pub async fn compact_now(&self, topic: &str) -> Result<crate::table::compact::Compacted> {
        let _round = self.inner.round.lock().await;
        let settings = self.settings_of(topic).await?;
        if !settings.table {
            return Err(IndexerError::invalid(format!(
                "topic {topic:?} is not an Iceberg table (table.format=iceberg)"
            )));
        }
        if settings.target_file_bytes == 0 {
            return Err(IndexerError::invalid(format!(
                "topic {topic:?} has table.target.file.bytes=0: no compaction"
            )));
        }
        self.commit_table(topic, &settings).await?;
        let done = self.compact_table(topic, &settings, true).await?;
        if done.written > 0 {
            self.commit_table(topic, &settings).await?;
        }
        self.publish_or_warn(topic).await;
        Ok(done)
    }

    /// `floe table expire`: expires the table's snapshots older than
    /// `older_than` (default: its `table.snapshot.max.age.ms`) now, and
    /// deletes the files no kept snapshot names any more. Returns the
    /// snapshots expired and the files deleted.
    pub async fn expire_now(
        &self,
        topic: &str,
        older_than: Option<Duration>,
    ) -> Result<(usize, usize)> {
        let _round = self.inner.round.lock().await;
        let mut settings = self.settings_of(topic).await?;
        if !settings.table {
            return Err(IndexerError::invalid(format!(
                "topic {topic:?} is not an Iceberg table (table.format=iceberg)"
            )));
        }
        if let Some(age) = older_than {
            settings.snapshot_max_age = age;
        }
        let expired = self
            .commit_table(topic, &settings)
            .await?
            .map_or(0, |c| c.expired);
        self.publish_or_warn(topic).await;
        let deleted = self.sweep(topic, true).await?;
        lock(&self.inner.swept).insert(topic.to_string(), Instant::now());
        Ok((expired, deleted))
    }

    /// Starts a topic's exports over from the log; returns the new generation.
    /// Old files are deleted by the next round's sweep, and everything up to
    /// the current log end is exported without waiting for the roll interval.
    pub async fn backfill(&self, topic: &str) -> Result<u64> {
        let generation = self.inner.meta.export_reset(topic).await?;
        let state = self.inner.meta.export_state(topic).await?;
        {
            let mut due = lock(&self.inner.due);
            for p in &state.partitions {
                due.insert((topic.to_string(), p.partition), p.high_watermark);
            }
        }
        lock(&self.inner.swept).remove(topic);
        tracing::info!(topic, generation, "backfill requested");
        Ok(generation)
    }

    async fn export_topic(&self, topic: &str, settings: &ExportSettings) -> Result<()> {
        let state = self.inner.meta.export_state(topic).await?;
        let topic_id = state.topic_id;
        let results: Vec<Result<()>> = futures::stream::iter(state.partitions.iter().cloned())
            .map(|p| async move { self.export_partition(topic, topic_id, p, settings).await })
            .buffer_unordered(2)
            .collect()
            .await;
        let mut first_err = results.into_iter().find_map(|r| r.err());
        if let Some(retention) = settings.retention
            && let Err(e) = self
                .apply_retention(topic, topic_id, retention, settings.table)
                .await
        {
            first_err.get_or_insert(e);
        }
        let sweep_due = lock(&self.inner.swept)
            .get(topic)
            .is_none_or(|t| t.elapsed() >= self.inner.cfg.sweep_every);
        if sweep_due && first_err.is_none() {
            self.sweep(topic, settings.table).await?;
            if settings.table {
                self.sweep_table(topic, self.inner.cfg.table_orphan_grace)
                    .await?;
            }
            lock(&self.inner.swept).insert(topic.to_string(), Instant::now());
        }
        first_err.map_or(Ok(()), Err)
    }

    async fn export_partition(
        &self,
        topic: &str,
        topic_id: TopicId,
        p: PartitionExports,
        settings: &ExportSettings,
    ) -> Result<()> {
        let key = (topic.to_string(), p.partition);
        let mut next = p.next_offset;
        if let Some(pending) = &p.pending {
            self.redo(topic, topic_id, &p, pending, settings).await?;
            next = pending.last_offset + 1;
        }
        loop {
            let start = next.max(p.log_start_offset);
            let hw = p.high_watermark;
            if start >= hw {
                lock(&self.inner.waiting).remove(&key);
                return Ok(());
            }
            let since = *lock(&self.inner.waiting)
                .entry(key.clone())
                .or_insert_with(Instant::now);
            let backfill = lock(&self.inner.due).get(&key).copied();
            let mut due = since.elapsed() >= settings.roll || backfill.is_some_and(|t| start < t);
            if !due {
                let bytes = self
                    .inner
                    .reader
                    .bytes_after(topic_id, p.partition, start)
                    .await?;
                due = bytes >= settings.file_bytes;
            }
            if !due {
                return Ok(());
            }
            let read = self
                .inner
                .reader
                .read(
                    topic_id,
                    p.partition,
                    start,
                    hw,
                    settings.file_bytes,
                    crate::log_reader::MAX_DECODED_BYTES,
                )
                .await?;
            crate::metrics::log_read(read.bytes);
            if read.next_offset <= start && read.last_stable <= start {
                // A transaction open at `start`: nothing is stable to export
                // yet; its data waits for its marker (the LSO moving on).
                return Ok(());
            }
            let (records, last) = cut_at_hour(read.records, read.next_offset - 1, settings.bucket);
            if last < start {
                return Err(IndexerError::corrupt(format!(
                    "{topic}/{}: no batch readable at offset {start}",
                    p.partition
                )));
            }
            let planned = self
                .plan(
                    topic,
                    topic_id,
                    p.partition,
                    (start, last),
                    records,
                    settings,
                )
                .await?;
            self.write(topic_id, p.partition, p.generation, planned, true)
                .await?;
            next = last + 1;
            if backfill.is_some_and(|t| next >= t) {
                lock(&self.inner.due).remove(&key);
            }
        }
    }

    /// Rewrites a pending file: the same offset range under the same name.
    async fn redo(
        &self,
        topic: &str,
        topic_id: TopicId,
        p: &PartitionExports,
        pending: &ExportFile,
        settings: &ExportSettings,
    ) -> Result<()> {
        tracing::info!(topic, partition = p.partition, key = %pending.key, "finishing a pending export");
        let read = self
            .inner
            .reader
            .read(
                topic_id,
                p.partition,
                pending.first_offset,
                pending.last_offset + 1,
                u64::MAX,
                // Exactly the range recorded, which a first read bounded.
                u64::MAX,
            )
            .await?;
        let mut planned = self
            .plan(
                topic,
                topic_id,
                p.partition,
                (pending.first_offset, pending.last_offset),
                read.records,
                settings,
            )
            .await?;
        // The name is the one recorded, whatever the records say now.
        planned.file = ExportFile {
            endpoint: pending.endpoint.clone(),
            key: pending.key.clone(),
            size: planned.bytes.len() as u64,
            ..planned.file
        };
        self.write(topic_id, p.partition, p.generation, planned, false)
            .await
    }

    /// Encodes the records of `first..=last` (off the async threads).
    async fn plan(
        &self,
        topic: &str,
        topic_id: TopicId,
        partition: u32,
        (first, last): (i64, i64),
        records: Vec<Record>,
        settings: &ExportSettings,
    ) -> Result<Planned> {
        let first_ts = records.first().map_or(0, |r| r.timestamp);
        let min_ts = records.iter().map(|r| r.timestamp).min().unwrap_or(0);
        let max_ts = records.iter().map(|r| r.timestamp).max().unwrap_or(0);
        let rows = records.len() as u64;
        let def = settings.definition.clone();
        let opts = settings.file;
        // A table's files carry Iceberg field ids.
        let ids = if settings.table {
            Some(self.table_field_ids(topic, topic_id, &def).await?)
        } else {
            None
        };
        let bytes = tokio::task::spawn_blocking(move || match ids {
            Some(ids) => columns::write_table_file(partition, &records, &def, &opts, &ids),
            None => columns::write_file(partition, &records, &def, &opts),
        })
        .await
        .map_err(|e| IndexerError::corrupt(format!("the Parquet writer stopped: {e}")))?
        .map_err(|e| IndexerError::corrupt(format!("cannot write Parquet: {e}")))?;
        Ok(Planned {
            file: ExportFile {
                endpoint: self.inner.endpoint.as_str().to_string(),
                key: file_key(topic, partition, first, last, first_ts),
                first_offset: first,
                last_offset: last,
                rows,
                size: bytes.len() as u64,
                min_timestamp: min_ts,
                max_timestamp: max_ts,
            },
            bytes,
        })
    }

    /// Begin (unless redoing), write, commit.
    async fn write(
        &self,
        topic_id: TopicId,
        partition: u32,
        generation: u64,
        planned: Planned,
        begin: bool,
    ) -> Result<()> {
        let meta = &self.inner.meta;
        if begin {
            meta.export_begin(pref(topic_id, partition), generation, &planned.file)
                .await?;
        }
        let size = planned.bytes.len() as u64;
        self.inner
            .pool
            .put_at(
                &EndpointId::new(&planned.file.endpoint),
                ObjectKey::new(&planned.file.key),
                planned.bytes.into(),
            )
            .await?;
        let rows = planned.file.rows;
        meta.export_commit(pref(topic_id, partition), generation, &planned.file)
            .await?;
        crate::metrics::file_written(rows, size);
        tracing::debug!(partition, rows, "exported a file");
        Ok(())
    }

    /// Forgets, then deletes, files whose newest record is older than
    /// `retention`. A table's files are only forgotten: its next commit
    /// removes them from the table, and the sweep deletes them once no
    /// kept snapshot names them.
    async fn apply_retention(
        &self,
        topic: &str,
        topic_id: TopicId,
        retention: Duration,
        table: bool,
    ) -> Result<()> {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let horizon = now_ms.saturating_sub(retention.as_millis().min(i64::MAX as u128) as i64);
        let state = self.inner.meta.export_state(topic).await?;
        for p in &state.partitions {
            let old: Vec<&ExportFile> = p
                .files
                .iter()
                .filter(|f| f.max_timestamp < horizon)
                .collect();
            if old.is_empty() {
                continue;
            }
            let keys = old.iter().map(|f| f.key.clone()).collect();
            self.inner
                .meta
                .export_forget(pref(topic_id, p.partition), p.generation, keys)
                .await?;
            if table {
                continue;
            }
            for f in old {
                self.delete(&f.endpoint, &f.key).await?;
            }
        }
        Ok(())
    }

    /// Deletes the topic's export objects that no partition refers to: those
    /// of an earlier generation (a backfill), of a deleted topic of the same
    /// name, or whose retention passed while a delete failed; and the staging
    /// files of writes a crash cut short. A table's files stay while a kept
    /// snapshot names them, and a compaction's file while it is in flight.
    async fn sweep(&self, topic: &str, table: bool) -> Result<usize> {
        let state = self.inner.meta.export_state(topic).await?;
        let mut referenced: HashSet<&str> = state
            .partitions
            .iter()
            .flat_map(|p| p.files.iter().chain(p.pending.iter()))
            .map(|f| f.key.as_str())
            .collect();
        let compacting = if table {
            self.inner.meta.table_state(topic).await?.state.compacting
        } else {
            None
        };
        if let Some(c) = &compacting {
            referenced.insert(c.file.key.as_str());
        }
        let prefix = topic_prefix(topic);
        // Staging files of writes a crash cut short (local folders only); no
        // write of this topic is in flight while it sweeps.
        let partial = self
            .inner
            .pool
            .remove_partial_writes(&self.inner.endpoint, &prefix, Duration::ZERO)
            .await?;
        if partial > 0 {
            tracing::info!(
                topic,
                files = partial,
                "removed export files a crash left half written"
            );
        }
        let listed = self.inner.pool.list(&self.inner.endpoint, &prefix).await?;
        let unreferenced: Vec<_> = listed
            .into_iter()
            .filter(|o| !referenced.contains(o.key.as_str()))
            .collect();
        // The snapshots' files are read only when there is something to delete.
        let in_table = if table && !unreferenced.is_empty() {
            self.table_data_files(topic).await?
        } else {
            HashSet::new()
        };
        let mut deleted = 0;
        for o in unreferenced {
            let uri = self.inner.pool.uri(&o.endpoint, &o.key);
            if uri.is_some_and(|u| in_table.contains(&u)) {
                continue;
            }
            tracing::info!(key = %o.key, "deleting an export file nothing refers to");
            self.delete(o.endpoint.as_str(), o.key.as_str()).await?;
            deleted += 1;
        }
        Ok(deleted)
    }

    async fn delete(&self, endpoint: &str, key: &str) -> Result<()> {
        self.inner
            .pool
            .delete(&ObjectRef {
                endpoint: EndpointId::new(endpoint),
                key: ObjectKey::new(key),
                size: 0,
            })
            .await?;
        crate::metrics::file_deleted();
        Ok(())
    }
}

/// Keeps the records up to the first one of a later hour than the first
/// record's, or (a table partitioned by time) of another bucket, earlier
/// or later; returns them with the last offset the file covers.
fn cut_at_hour(
    mut records: Vec<Record>,
    read_last: i64,
    bucket: Option<crate::settings::TimeBucket>,
) -> (Vec<Record>, i64) {
    let Some(first) = records.first() else {
        return (records, read_last);
    };
    let hour = hour_of(first.timestamp);
    let first_bucket = bucket.map(|b| b.of(first.timestamp));
    match records.iter().position(|r| {
        hour_of(r.timestamp) > hour || bucket.map(|b| b.of(r.timestamp)) != first_bucket
    }) {
        Some(cut) => {
            let last = records[cut].offset - 1;
            records.truncate(cut);
            (records, last)
        }
        None => (records, read_last),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::HOUR_MS;

    fn rec(offset: i64, ts: i64) -> Record {
        Record {
            offset,
            timestamp: ts,
            key: None,
            value: None,
            headers: vec![],
        }
    }

    #[test]
    fn files_stop_before_a_later_hour() {
        let h = 10 * HOUR_MS;
        let (kept, last) = cut_at_hour(
            vec![
                rec(5, h + 10),
                rec(6, h - 3),
                rec(7, h + HOUR_MS),
                rec(8, h),
            ],
            8,
            None,
        );
        assert_eq!(
            kept.len(),
            2,
            "a late record stays, the next hour starts a file"
        );
        assert_eq!(last, 6);
        let (kept, last) = cut_at_hour(vec![rec(5, h), rec(6, h + 1)], 9, None);
        assert_eq!((kept.len(), last), (2, 9), "trailing control batches count");
        let (kept, last) = cut_at_hour(vec![], 4, None);
        assert_eq!((kept.len(), last), (0, 4));
        // A table by hour: a late record of an earlier hour starts a file too.
        let (kept, last) = cut_at_hour(
            vec![rec(5, h + 10), rec(6, h - 3), rec(7, h + 20)],
            7,
            Some(crate::settings::TimeBucket::Hour),
        );
        assert_eq!((kept.len(), last), (1, 5));
        // By day: hours of the same day stay together, a later hour still cuts.
        let day = 24 * HOUR_MS;
        let (kept, last) = cut_at_hour(
            vec![
                rec(5, day + 2 * HOUR_MS),
                rec(6, day + HOUR_MS),
                rec(7, day - 1),
            ],
            7,
            Some(crate::settings::TimeBucket::Day),
        );
        assert_eq!((kept.len(), last), (2, 6));
    }
}
