//! A topic's Iceberg table as the Raft state keeps it: the pointer to the
//! table's current metadata file, and the field ids of the typed columns.
//!
//! The indexer writes the table's data, manifests and metadata files to the
//! store; what makes one of them *the* table is this pointer, moved by a
//! compare-and-set ([`TableState::commit`]), so two indexers (or one that
//! restarted mid-commit) can never both commit on the same version.
//!
//! Field ids are Iceberg's names for columns: a reader matches a data
//! file's columns to the table's by id, not by name. The fixed columns
//! (partition, offset, timestamp, key, value, headers and the headers'
//! element, key and value) take ids 1 to [`FIXED_FIELDS`]; each typed column
//! of `export.index` takes the next free id the first time its name and
//! type are seen ([`TableState::ensure_columns`]), and keeps it. A name
//! seen again with another type is a new column (a new id): Iceberg's way
//! to drop a column and add another of the same name.
//!
//! A compaction of a partition's small export files into one (see
//! `floe_indexer::table::compact`) is recorded here before its file is
//! written ([`Compaction`], one at a time per table), so that a sweep never
//! takes the new file for an orphan, then swaps the files in the
//! partition's exports in one step (`TopicsState::table_compact_commit`).

use serde::{Deserialize, Serialize};

use crate::error::MetaError;

/// Ids 1..=FIXED_FIELDS are the fixed columns'.
pub const FIXED_FIELDS: i32 = 9;

/// Most typed columns a table remembers (the index allows 64 at a time).
pub const MAX_COLUMNS: usize = 4096;

/// A typed column the table has given an id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableColumn {
    pub name: String,
    /// The index type (`string`, `int64`, `float64`, `bool`, `timestamp`).
    pub kind: String,
    pub id: i32,
}

/// A compaction in flight: `file` is being written with the rows of the
/// partition's export files `replaced` (adjacent, in offset order), and
/// will take their place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compaction {
    pub partition: u32,
    /// The export generation of the files.
    pub generation: u64,
    pub file: crate::export::ExportFile,
    /// The keys of the files it replaces.
    pub replaced: Vec<String>,
}

/// Most files one compaction replaces.
pub const MAX_COMPACTED_FILES: usize = 10_000;

/// A topic's table as the API reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableView {
    pub topic_id: crate::ids::TopicId,
    pub state: TableState,
}

/// A topic's table.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TableState {
    /// The current metadata file (a URI), `None` before the first commit.
    pub metadata_location: Option<String>,
    /// Commits so far (the metadata file's version).
    pub version: u64,
    /// Every typed column given an id, in the order they were.
    pub columns: Vec<TableColumn>,
    /// The compaction in flight, if any.
    pub compacting: Option<Compaction>,
}

impl TableState {
    /// The ids of `columns` (name, type), giving the next free id to each
    /// pair not seen before. Names compare case-insensitively, as the index
    /// definition's do.
    pub fn ensure_columns(&mut self, columns: &[(String, String)]) -> Result<Vec<i32>, MetaError> {
        let mut ids = Vec::with_capacity(columns.len());
        for (name, kind) in columns {
            let known = self
                .columns
                .iter()
                .rev()
                .find(|c| c.name.eq_ignore_ascii_case(name) && c.kind == *kind);
            let id = match known {
                Some(c) => c.id,
                None => {
                    if self.columns.len() >= MAX_COLUMNS {
                        return Err(MetaError::InvalidRequest(format!(
                            "the table has had {MAX_COLUMNS} columns; no more can be added"
                        )));
                    }
                    let id = self.last_column_id() + 1;
                    self.columns.push(TableColumn {
                        name: name.clone(),
                        kind: kind.clone(),
                        id,
                    });
                    id
                }
            };
            ids.push(id);
        }
        Ok(ids)
    }

    /// The highest field id given so far.
    pub fn last_column_id(&self) -> i32 {
        self.columns
            .iter()
            .map(|c| c.id)
            .max()
            .unwrap_or(FIXED_FIELDS)
    }

    /// Moves the pointer from `expected` to `location`: refused (a
    /// conflict) when the current pointer is not `expected`. Committing the
    /// pointer it already holds again is accepted (a retried commit).
    pub fn commit(&mut self, expected: Option<&str>, location: String) -> Result<u64, MetaError> {
        if self.metadata_location.as_deref() == Some(location.as_str()) {
            return Ok(self.version);
        }
        if self.metadata_location.as_deref() != expected {
            return Err(MetaError::ExportConflict(format!(
                "the table is at {}, not {}",
                self.metadata_location.as_deref().unwrap_or("no metadata"),
                expected.unwrap_or("no metadata")
            )));
        }
        self.metadata_location = Some(location);
        self.version += 1;
        Ok(self.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn a_column_keeps_its_id_and_a_new_type_is_a_new_column() {
        let mut t = TableState::default();
        let ids = t
            .ensure_columns(&cols(&[("amount", "float64"), ("customer", "string")]))
            .unwrap();
        assert_eq!(ids, vec![FIXED_FIELDS + 1, FIXED_FIELDS + 2]);
        // Again, in another order and case: the same ids, nothing added.
        let again = t
            .ensure_columns(&cols(&[("CUSTOMER", "string"), ("amount", "float64")]))
            .unwrap();
        assert_eq!(again, vec![FIXED_FIELDS + 2, FIXED_FIELDS + 1]);
        assert_eq!(t.columns.len(), 2);
        // The same name with another type: a new id.
        let changed = t.ensure_columns(&cols(&[("amount", "string")])).unwrap();
        assert_eq!(changed, vec![FIXED_FIELDS + 3]);
        // And back: the first id again (its files still hold that column).
        assert_eq!(
            t.ensure_columns(&cols(&[("amount", "float64")])).unwrap(),
            vec![FIXED_FIELDS + 1]
        );
        assert_eq!(t.last_column_id(), FIXED_FIELDS + 3);
    }

    #[test]
    fn the_pointer_moves_only_from_where_it_is() {
        let mut t = TableState::default();
        assert!(t.commit(Some("m1"), "m2".into()).is_err());
        assert_eq!(t.commit(None, "m1".into()).unwrap(), 1);
        assert!(
            t.commit(None, "m1b".into()).is_err(),
            "a second first commit loses"
        );
        assert_eq!(t.commit(None, "m1".into()).unwrap(), 1, "a retry is fine");
        assert_eq!(t.commit(Some("m1"), "m2".into()).unwrap(), 2);
        assert!(
            t.commit(Some("m1"), "m3".into()).is_err(),
            "a stale base loses"
        );
        assert_eq!(t.metadata_location.as_deref(), Some("m2"));
    }
}
