//! Small-file compaction of a table topic: a partition's adjacent export
//! files of one hour become one file of up to `table.target.file.bytes`.
//!
//! A run of files is compacted only once the table holds all of them
//! (they lie below the offsets its snapshot covers), and, unless asked
//! for (`floe table compact`), once their hour has ended and the roll
//! interval passed, so that a file is not rewritten again and again while
//! its hour fills. Files never merge across an hour: the export's folders
//! (`dt=…/hr=…`) stay true, and a table partitioned by day or hour keeps
//! one partition per file.
//!
//! A compaction
//!
//! 1. records itself in the Raft state (the new file's name and offsets,
//!    the files it replaces), so that no sweep takes the new file for an
//!    orphan;
//! 2. reads the files' rows and writes them as one file (typed columns
//!    computed again with the topic's current `export.index`);
//! 3. swaps the files in the partition's exports in one Raft command.
//!
//! The table follows at its next commit: a `replace` snapshot names the
//! new file instead of the old ones (`commit`). The old files stay as
//! long as a kept snapshot names them (time travel), and the sweep deletes
//! them after the snapshots' expiry. A crash anywhere leaves either the old
//! files in the exports, or the new one: never both, never neither.

use floe_metadata::export::{ExportFile, TopicExports};
use floe_metadata::table::{Compaction, MAX_COMPACTED_FILES};
use floe_storage::records::Record;
use floe_storage::{EndpointId, ObjectKey};

use super::commit::Covered;
use crate::error::{IndexerError, Result};
use crate::exporter::Indexer;
use crate::log_reader::MAX_DECODED_BYTES;
use crate::lookup::{Found, Query, search_file};
use crate::settings::{ExportSettings, HOUR_MS, hour_of};

/// Adjacent export files of one partition to compact into one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub partition: u32,
    pub generation: u64,
    pub files: Vec<ExportFile>,
}

/// What a compaction pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Files written.
    pub written: usize,
    /// Files they replaced.
    pub replaced: usize,
}

/// The folder of an export file's key (`exports/{topic}/dt=…/hr=…`).
fn folder(key: &str) -> &str {
    key.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// The runs worth compacting: per partition, adjacent files in one folder,
/// all in the table (below what it covers), whose sizes add up to at most
/// `target` bytes, at least two of them and some rows. With `now_ms`, only
/// runs whose hour ended a `roll_ms` before it; without, every run (asked
/// for).
pub fn plan(
    exports: &TopicExports,
    covered: &Covered,
    target: u64,
    now_ms: Option<i64>,
    roll_ms: i64,
) -> Vec<Run> {
    let mut runs = Vec::new();
    if target == 0 {
        return runs;
    }
    for p in &exports.partitions {
        let limit = covered.offsets.get(&p.partition).copied().unwrap_or(0);
        let mut current: Vec<ExportFile> = Vec::new();
        let mut bytes = 0u64;
        let mut flush = |run: &mut Vec<ExportFile>| {
            let taken = std::mem::take(run);
            let hour = taken.iter().map(|f| hour_of(f.max_timestamp)).max();
            let closed = match (now_ms, hour) {
                (None, _) => true,
                (Some(now), Some(h)) => (h + 1).saturating_mul(HOUR_MS) + roll_ms <= now,
                (Some(_), None) => false,
            };
            if taken.len() >= 2 && taken.iter().any(|f| f.rows > 0) && closed {
                runs.push(Run {
                    partition: p.partition,
                    generation: p.generation,
                    files: taken,
                });
            }
        };
        for f in &p.files {
            if f.last_offset >= limit {
                break;
            }
            let fits = f.size < target;
            let joins = fits
                && current.last().is_some_and(|last| {
                    folder(&last.key) == folder(&f.key)
                        && bytes.saturating_add(f.size) <= target
                        && current.len() < MAX_COMPACTED_FILES
                });
            if !joins {
                flush(&mut current);
                bytes = 0;
            }
            if fits {
                bytes = bytes.saturating_add(f.size);
                current.push(f.clone());
            }
        }
        flush(&mut current);
    }
    runs
}

/// The name of the file that replaces `files` (adjacent, in one folder):
/// the export's own scheme over the offsets they cover.
pub fn compacted_key(partition: u32, files: &[ExportFile]) -> Option<String> {
    let (first, last) = (files.first()?, files.last()?);
    Some(format!(
        "{}/{partition}-{:020}-{:020}.parquet",
        folder(&first.key),
        first.first_offset,
        last.last_offset
    ))
}

impl Indexer {
    /// Compacts `topic`'s runs (see [`plan`]): its hours that ended, or
    /// with `all`, every run. Stops at the first failure.
    pub async fn compact_table(
        &self,
        topic: &str,
        settings: &ExportSettings,
        all: bool,
    ) -> Result<Compacted> {
        let mut done = Compacted::default();
        if !settings.table || settings.target_file_bytes == 0 {
            return Ok(done);
        }
        let table = self.meta().table_state(topic).await?;
        let Some(location) = &table.state.metadata_location else {
            return Ok(done);
        };
        let m = self.table_metadata(location).await?;
        let covered = Covered::of(m.current_snapshot().map(|s| &**s))?;
        let exports = self.meta().export_state(topic).await?;
        let now = (!all).then(|| chrono::Utc::now().timestamp_millis());
        let roll = i64::try_from(settings.roll.as_millis()).unwrap_or(i64::MAX);
        for run in plan(&exports, &covered, settings.target_file_bytes, now, roll) {
            let replaced = self
                .compact_run(topic, table.topic_id, run, settings)
                .await?;
            if replaced > 0 {
                done.written += 1;
                done.replaced += replaced;
            }
        }
        Ok(done)
    }

    /// Compacts one run; returns how many files it replaced (fewer than
    /// planned when their rows would not fit in memory at once, none when
    /// not even two do).
    async fn compact_run(
        &self,
        topic: &str,
        topic_id: floe_metadata::ids::TopicId,
        run: Run,
        settings: &ExportSettings,
    ) -> Result<usize> {
        // Read first: the run is cut where its rows stop fitting.
        let mut records: Vec<Record> = Vec::new();
        let mut decoded = 0u64;
        let mut files = Vec::new();
        for f in &run.files {
            let rows = self.read_export_file(f).await?;
            let bytes: u64 = rows.iter().map(record_bytes).sum();
            if !files.is_empty() && decoded.saturating_add(bytes) > MAX_DECODED_BYTES {
                break;
            }
            decoded = decoded.saturating_add(bytes);
            records.extend(rows);
            files.push(f.clone());
        }
        if files.len() < 2 {
            return Ok(0);
        }
        let Some(key) = compacted_key(run.partition, &files) else {
            return Ok(0);
        };
        let (first, last) = (&files[0], &files[files.len() - 1]);
        let mut file = ExportFile {
            endpoint: self.endpoint().as_str().to_string(),
            key,
            first_offset: first.first_offset,
            last_offset: last.last_offset,
            rows: files.iter().map(|f| f.rows).sum(),
            size: 0,
            min_timestamp: files.iter().map(|f| f.min_timestamp).min().unwrap_or(0),
            max_timestamp: files.iter().map(|f| f.max_timestamp).max().unwrap_or(0),
        };
        if records.len() as u64 != file.rows {
            return Err(IndexerError::corrupt(format!(
                "the files {}..{} hold {} rows, the exports say {}",
                first.key,
                last.key,
                records.len(),
                file.rows
            )));
        }
        let compaction = Compaction {
            partition: run.partition,
            generation: run.generation,
            file: file.clone(),
            replaced: files.iter().map(|f| f.key.clone()).collect(),
        };
        self.meta().table_compact_begin(topic, &compaction).await?;

        let def = settings.definition.clone();
        let ids = self.table_field_ids(topic, topic_id, &def).await?;
        let opts = settings.file;
        let partition = run.partition;
        let bytes = tokio::task::spawn_blocking(move || {
            crate::columns::rewrite_table_file(partition, &records, &def, &opts, &ids)
        })
        .await
        .map_err(|e| IndexerError::corrupt(format!("the Parquet writer stopped: {e}")))?
        .map_err(|e| IndexerError::corrupt(format!("cannot write Parquet: {e}")))?;
        file.size = bytes.len() as u64;
        self.pool()
            .put_at(
                &EndpointId::new(&file.endpoint),
                ObjectKey::new(&file.key),
                bytes.into(),
            )
            .await?;
        super::commit::reached(super::commit::Phase::Compacted).await;
        self.meta()
            .table_compact_commit(topic, run.partition, run.generation, &file)
            .await?;
        crate::metrics::table_compaction(files.len() as u64);
        tracing::info!(
            topic,
            partition = run.partition,
            files = files.len(),
            rows = file.rows,
            bytes = file.size,
            key = %file.key,
            "compacted table files"
        );
        Ok(files.len())
    }

    /// Every row of an export file, as the record it was.
    async fn read_export_file(&self, f: &ExportFile) -> Result<Vec<Record>> {
        let store = self.pool().store(&EndpointId::new(&f.endpoint))?;
        let all = Query {
            key: None,
            from_ms: None,
            to_ms: None,
            limit: usize::try_from(f.rows).unwrap_or(usize::MAX).max(1),
        };
        let (found, _) = search_file(
            store,
            object_store::path::Path::from(f.key.as_str()),
            f.size,
            &all,
            f.rows,
        )
        .await
        .map_err(|e| IndexerError::corrupt(format!("{}: {e}", f.key)))?;
        let mut records: Vec<Record> = found.into_iter().map(Found::into_record).collect();
        records.sort_by_key(|r| r.offset);
        if let Some(r) = records
            .iter()
            .find(|r| r.offset < f.first_offset || r.offset > f.last_offset)
        {
            return Err(IndexerError::corrupt(format!(
                "{} holds offset {}, outside its range {}..={}",
                f.key, r.offset, f.first_offset, f.last_offset
            )));
        }
        Ok(records)
    }
}

/// About the memory a decoded record takes.
fn record_bytes(r: &Record) -> u64 {
    let len = |b: &Option<bytes::Bytes>| b.as_ref().map_or(0, |b| b.len() as u64);
    64 + len(&r.key)
        + len(&r.value)
        + r.headers
            .iter()
            .map(|h| 16 + h.key.len() as u64 + len(&h.value))
            .sum::<u64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_metadata::export::PartitionExports;
    use floe_metadata::ids::TopicId;
    use std::collections::BTreeMap;

    const H: i64 = HOUR_MS;

    fn file(hour: i64, first: i64, last: i64, size: u64) -> ExportFile {
        ExportFile {
            endpoint: "default".into(),
            key: format!("exports/t/dt=x/hr={hour:02}/0-{first:020}-{last:020}.parquet"),
            first_offset: first,
            last_offset: last,
            rows: (last - first + 1) as u64,
            size,
            min_timestamp: hour * H,
            max_timestamp: hour * H + 10,
        }
    }

    fn exports(files: Vec<ExportFile>) -> TopicExports {
        TopicExports {
            topic_id: TopicId(uuid::Uuid::nil()),
            partitions: vec![PartitionExports {
                partition: 0,
                generation: 3,
                next_offset: files.last().map_or(0, |f| f.last_offset + 1),
                pending: None,
                files,
                log_start_offset: 0,
                high_watermark: 1000,
            }],
        }
    }

    fn covered(to: i64) -> Covered {
        Covered {
            generation: Some(3),
            offsets: BTreeMap::from([(0, to)]),
        }
    }

    fn firsts(runs: &[Run]) -> Vec<Vec<i64>> {
        runs.iter()
            .map(|r| r.files.iter().map(|f| f.first_offset).collect())
            .collect()
    }

    #[test]
    fn runs_stay_in_one_hour_under_the_target_and_inside_the_table() {
        let e = exports(vec![
            file(1, 0, 9, 10),
            file(1, 10, 19, 10),
            file(1, 20, 29, 10),
            file(2, 30, 39, 10),  // another hour
            file(2, 40, 49, 100), // as big as the target: never rewritten
            file(2, 50, 59, 10),
            file(2, 60, 69, 10),
            file(2, 70, 79, 10), // not in the table yet
        ]);
        let runs = plan(&e, &covered(70), 100, None, 0);
        assert_eq!(firsts(&runs), vec![vec![0, 10, 20], vec![50, 60]]);
        assert_eq!(runs[0].generation, 3);
        // The target bounds a run: 25 + 25 + 25 + 25 fits, the fifth starts another.
        let e = exports((0..6).map(|i| file(1, i * 10, i * 10 + 9, 25)).collect());
        let runs = plan(&e, &covered(60), 100, None, 0);
        assert_eq!(firsts(&runs), vec![vec![0, 10, 20, 30], vec![40, 50]]);
        // No target: no compaction.
        assert!(plan(&e, &covered(60), 0, None, 0).is_empty());
        // Nothing in the table yet: nothing to compact.
        assert!(plan(&e, &Covered::default(), 100, None, 0).is_empty());
    }

    #[test]
    fn an_hour_is_compacted_by_itself_once_it_ended_and_the_roll_passed() {
        let e = exports(vec![
            file(1, 0, 9, 10),
            file(1, 10, 19, 10),
            file(2, 20, 29, 10),
            file(2, 30, 39, 10),
        ]);
        let roll = 30_000;
        let runs = plan(&e, &covered(40), 100, Some(2 * H + roll), roll);
        assert_eq!(firsts(&runs), vec![vec![0, 10]], "hour 2 is still open");
        assert!(plan(&e, &covered(40), 100, Some(2 * H + roll - 1), roll).is_empty());
        // Asked for: the open hour too.
        assert_eq!(plan(&e, &covered(40), 100, None, roll).len(), 2);
    }

    #[test]
    fn a_compacted_file_is_named_by_the_offsets_it_covers() {
        let files = vec![file(4, 100, 109, 1), file(4, 110, 119, 1)];
        assert_eq!(
            compacted_key(0, &files).unwrap(),
            format!("exports/t/dt=x/hr=04/0-{:020}-{:020}.parquet", 100, 119)
        );
        assert_eq!(compacted_key(0, &[]), None);
    }
}
