//! What the indexer has exported of a partition, and the rules that make
//! its exports exactly once.
//!
//! Per partition: the next offset to export, at most one *pending* file (an
//! intent recorded before the file is written) and the committed files. The
//! indexer begins a file (records its name and offset range), writes it under
//! that deterministic name, then commits it. A crash between the two leaves
//! the intent pending: the next indexer rewrites exactly that range under the
//! same name, so a row can never land in two files. A reset (backfill) bumps
//! the generation, which refuses every later step of the old one.

use serde::{Deserialize, Serialize};

use crate::error::MetaError;

/// One Parquet file of a partition's exports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportFile {
    /// The store endpoint that holds it.
    pub endpoint: String,
    /// Its object key (`exports/{topic}/dt=…/hr=…/{p}-{first}-{last}.parquet`).
    pub key: String,
    pub first_offset: i64,
    pub last_offset: i64,
    pub rows: u64,
    pub size: u64,
    pub min_timestamp: i64,
    pub max_timestamp: i64,
}

/// A partition's export progress.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExportState {
    pub generation: u64,
    /// The first offset not exported yet.
    pub next_offset: i64,
    pub pending: Option<ExportFile>,
    /// Committed files, in offset order.
    pub files: Vec<ExportFile>,
}

/// A partition's export progress as the indexer reads it: its state and
/// where its log is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionExports {
    pub partition: u32,
    pub generation: u64,
    /// The first offset not exported yet.
    pub next_offset: i64,
    pub pending: Option<ExportFile>,
    /// Committed files, in offset order.
    pub files: Vec<ExportFile>,
    pub log_start_offset: i64,
    pub high_watermark: i64,
}

/// A topic's export progress, partition by partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicExports {
    pub topic_id: crate::ids::TopicId,
    pub partitions: Vec<PartitionExports>,
}

fn conflict(msg: String) -> MetaError {
    MetaError::ExportConflict(msg)
}

impl ExportState {
    fn check_generation(&self, generation: u64) -> Result<(), MetaError> {
        if generation == self.generation {
            Ok(())
        } else {
            Err(conflict(format!(
                "export generation {generation} is not the current {}",
                self.generation
            )))
        }
    }

    /// Records the intent to write `file`. Offsets below `log_start` are gone
    /// from the log, so a file may start there instead of at `next_offset`.
    pub fn begin(
        &mut self,
        generation: u64,
        file: ExportFile,
        log_start: i64,
        high_watermark: i64,
    ) -> Result<(), MetaError> {
        self.check_generation(generation)?;
        if let Some(p) = &self.pending {
            if *p == file {
                return Ok(());
            }
            return Err(conflict(format!(
                "{} is pending; finish it before {}",
                p.key, file.key
            )));
        }
        if file.first_offset > file.last_offset || file.last_offset >= high_watermark {
            return Err(MetaError::InvalidRequest(format!(
                "export range {}..={} outside the committed log (end {high_watermark})",
                file.first_offset, file.last_offset
            )));
        }
        let earliest_allowed = self.next_offset;
        let latest_allowed = self.next_offset.max(log_start);
        if file.first_offset < earliest_allowed || file.first_offset > latest_allowed {
            return Err(conflict(format!(
                "export must start at {} (log start {log_start}), not {}",
                self.next_offset, file.first_offset
            )));
        }
        self.pending = Some(file);
        Ok(())
    }

    /// Commits the pending file: `file` has its name and offsets, and what
    /// the written object really holds (size, rows, timestamps), which a
    /// rewrite after a crash may tell better than the intent did. A retried
    /// commit of a committed file is accepted.
    pub fn commit(&mut self, generation: u64, file: ExportFile) -> Result<(), MetaError> {
        self.check_generation(generation)?;
        match self.pending.take() {
            Some(p)
                if p.key == file.key
                    && p.first_offset == file.first_offset
                    && p.last_offset == file.last_offset =>
            {
                self.next_offset = file.last_offset + 1;
                self.files.push(file);
                Ok(())
            }
            other => {
                self.pending = other;
                if self.files.iter().rev().any(|f| f.key == file.key) {
                    Ok(())
                } else {
                    Err(conflict(format!("{} is not the pending export", file.key)))
                }
            }
        }
    }

    /// Forgets committed files (their retention passed); their objects are
    /// deleted after this.
    pub fn forget(&mut self, generation: u64, keys: &[String]) -> Result<(), MetaError> {
        self.check_generation(generation)?;
        self.files.retain(|f| !keys.contains(&f.key));
        Ok(())
    }

    /// Where the committed files named `keys` are: adjacent, in this order,
    /// of generation `generation`. A compaction replaces such a run.
    pub fn run_of(
        &self,
        generation: u64,
        keys: &[String],
    ) -> Result<std::ops::Range<usize>, MetaError> {
        self.check_generation(generation)?;
        let first = keys
            .first()
            .ok_or_else(|| MetaError::InvalidRequest("a compaction names no file".into()))?;
        let start = self
            .files
            .iter()
            .position(|f| &f.key == first)
            .ok_or_else(|| conflict(format!("{first} is not a committed export file")))?;
        let end = start + keys.len();
        let same = self
            .files
            .get(start..end)
            .is_some_and(|run| run.iter().zip(keys).all(|(f, k)| &f.key == k));
        if !same {
            return Err(conflict(format!(
                "the {} files from {first} are not adjacent committed export files",
                keys.len()
            )));
        }
        Ok(start..end)
    }

    /// Checks that `file` can replace the run `run`: the same offsets and
    /// rows, a name of its own.
    pub fn check_replacement(
        &self,
        run: &std::ops::Range<usize>,
        file: &ExportFile,
    ) -> Result<(), MetaError> {
        let files = &self.files[run.clone()];
        let (Some(first), Some(last)) = (files.first(), files.last()) else {
            return Err(MetaError::InvalidRequest(
                "a compaction names no file".into(),
            ));
        };
        let rows: u64 = files.iter().map(|f| f.rows).sum();
        if file.first_offset != first.first_offset
            || file.last_offset != last.last_offset
            || file.rows != rows
        {
            return Err(MetaError::InvalidRequest(format!(
                "a compacted file must hold offsets {}..={} in {rows} rows, not {}..={} in {}",
                first.first_offset,
                last.last_offset,
                file.first_offset,
                file.last_offset,
                file.rows
            )));
        }
        if self.files.iter().any(|f| f.key == file.key) {
            return Err(MetaError::InvalidRequest(format!(
                "{} is already an export file",
                file.key
            )));
        }
        Ok(())
    }

    /// Puts `file` in place of the run `run` (a compaction).
    pub fn replace_run(&mut self, run: std::ops::Range<usize>, file: ExportFile) {
        self.files.splice(run, [file]);
    }

    /// Starts over at `generation` (a backfill).
    pub fn reset(&mut self, generation: u64) {
        *self = ExportState {
            generation,
            ..ExportState::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(first: i64, last: i64) -> ExportFile {
        ExportFile {
            endpoint: "local".into(),
            key: format!("exports/t/0-{first}-{last}.parquet"),
            first_offset: first,
            last_offset: last,
            rows: (last - first + 1) as u64,
            size: 100,
            min_timestamp: 0,
            max_timestamp: 0,
        }
    }

    #[test]
    fn begin_commit_and_redo_after_a_crash() {
        let mut s = ExportState::default();
        s.begin(0, file(0, 9), 0, 100).unwrap();
        // The same intent again (a restarted indexer) is fine; another is not.
        s.begin(0, file(0, 9), 0, 100).unwrap();
        assert!(s.begin(0, file(0, 5), 0, 100).is_err());
        assert!(s.commit(0, file(0, 5)).is_err());
        let mut written = file(0, 9);
        written.size = 4321;
        s.commit(0, written.clone()).unwrap();
        s.commit(0, written).unwrap(); // retried
        assert_eq!(s.files[0].size, 4321, "the written size is kept");
        assert_eq!(s.next_offset, 10);
        assert_eq!(s.files.len(), 1);
        assert!(s.pending.is_none());
    }

    #[test]
    fn no_overlap_no_gap_no_beyond_the_log() {
        let mut s = ExportState::default();
        s.begin(0, file(0, 9), 0, 100).unwrap();
        s.commit(0, file(0, 9)).unwrap();
        assert!(s.begin(0, file(5, 20), 0, 100).is_err(), "overlap");
        assert!(s.begin(0, file(11, 20), 0, 100).is_err(), "gap");
        assert!(s.begin(0, file(10, 100), 0, 100).is_err(), "beyond the end");
        // Retention moved the log start past the next offset: start there.
        s.begin(0, file(50, 60), 50, 100).unwrap();
        assert!(s.pending.is_some());
    }

    #[test]
    fn a_reset_fences_the_old_generation() {
        let mut s = ExportState::default();
        s.begin(0, file(0, 9), 0, 100).unwrap();
        s.reset(1);
        assert!(s.commit(0, file(0, 9)).is_err());
        assert!(s.begin(0, file(0, 9), 0, 100).is_err());
        s.begin(1, file(0, 9), 0, 100).unwrap();
        s.commit(1, file(0, 9)).unwrap();
        s.forget(1, &[file(0, 9).key]).unwrap();
        assert!(s.files.is_empty());
        assert_eq!(s.next_offset, 10);
    }
}
