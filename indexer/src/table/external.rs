//! Publishing every table to an external SQL catalog as well
//! (`--table-catalog`, [`SqlCatalog`]), so that engines which attach that
//! catalog see Floe's tables in it.
//!
//! The table's pointer in the Raft state stays what a commit moves (the
//! compare-and-set that makes a commit exactly once); after it, the
//! catalog's row is moved to the same metadata file with a compare-and-set
//! of its own (`UPDATE … WHERE metadata_location = <what it was>`). A crash
//! between the two leaves the row one commit behind, on a metadata file
//! that is whole, until the next round moves it. A row is only moved from
//! a metadata file of Floe's: one the table's metadata log names (an
//! earlier version), or one of an earlier table of the same name under
//! the table's location (a deleted and created again topic). A row someone
//! else committed to is left alone and counted as an error (looked at
//! again when the table commits, or after a minute), and the row of a
//! topic that is no longer a table is deleted, if it is still Floe's.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use crate::error::{ErrorKind, IndexerError, Result};
use crate::exporter::Indexer;
use crate::table::catalog::NAMESPACE;
use crate::table::sql_catalog::SqlCatalog;

/// How long a table whose row names someone else's commit is left before
/// its row is looked at again (sooner when the table commits again).
const CONFLICT_RECHECK: std::time::Duration = std::time::Duration::from_secs(60);

/// What the indexer last did with each table's current metadata location:
/// it is in the catalog (`None`), or it was refused there at that instant
/// (a conflict). A commit forgets the table's entry; until then, an idle
/// round asks neither the Raft state nor the catalog anything.
#[derive(Default)]
pub(crate) struct Published(Mutex<HashMap<String, Option<Instant>>>);

impl Published {
    /// Whether the table's current location needs no look at the catalog
    /// now.
    fn settled(&self, topic: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(topic)
            .is_some_and(|refused| refused.is_none_or(|at| at.elapsed() < CONFLICT_RECHECK))
    }

    fn set(&self, topic: &str, refused: bool) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(topic.to_string(), refused.then(Instant::now));
    }

    /// The table's pointer moved (or the table went): the next round
    /// looks at the catalog again.
    pub(crate) fn forget(&self, topic: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(topic);
    }
}

impl Indexer {
    /// Moves `topic`'s row in the external catalog (if one is set) to the
    /// table's current metadata file. Returns whether it moved.
    pub(crate) async fn publish_table(&self, topic: &str) -> Result<bool> {
        let Some(cat) = self.external_catalog() else {
            return Ok(false);
        };
        if self.published().settled(topic) {
            return Ok(false);
        }
        let table = self.meta().table_state(topic).await?;
        let Some(ours) = table.state.metadata_location else {
            return Ok(false);
        };
        let theirs = cat.location(topic).await?;
        let moved = match theirs.as_deref() {
            Some(t) if t == ours => false,
            Some(t) => {
                if !self.is_floes_earlier(topic, &ours, t).await? {
                    self.published().set(topic, true);
                    return Err(IndexerError::new(
                        ErrorKind::Conflict,
                        format!(
                            "the SQL catalog's table {NAMESPACE}.{topic} points at {t}, which is not \
                             a metadata file Floe wrote for it (someone else committed to it): Floe \
                             leaves it alone; drop the table from that catalog for Floe to register it again"
                        ),
                    ));
                }
                self.swap_or_conflict(cat, topic, Some(t), &ours).await?
            }
            None => self.swap_or_conflict(cat, topic, None, &ours).await?,
        };
        if moved {
            crate::metrics::catalog_published();
            tracing::info!(topic, metadata = %ours, "table published to the SQL catalog");
        }
        self.published().set(topic, false);
        Ok(moved)
    }

    async fn swap_or_conflict(
        &self,
        cat: &SqlCatalog,
        topic: &str,
        expected: Option<&str>,
        new: &str,
    ) -> Result<bool> {
        if cat.swap(topic, expected, new).await? {
            return Ok(true);
        }
        // Someone moved the row meanwhile: the next round looks again.
        Err(IndexerError::new(
            ErrorKind::Unavailable,
            format!(
                "the SQL catalog's table {NAMESPACE}.{topic} changed while Floe moved it; retrying next round"
            ),
        ))
    }

    /// Whether `theirs` is a metadata file Floe wrote for the table named
    /// `topic` before `ours`: in its metadata log, or under the table's
    /// location and of another table (gone, or another table uuid: the
    /// topic was deleted and created again).
    async fn is_floes_earlier(&self, topic: &str, ours: &str, theirs: &str) -> Result<bool> {
        let m = self.table_metadata(ours).await?;
        if m.metadata_log().iter().any(|l| l.metadata_file == theirs) {
            return Ok(true);
        }
        let prefix = self.table_prefix_uri(topic)?;
        if !theirs.starts_with(&prefix) {
            return Ok(false);
        }
        let key = self.key_of(theirs)?;
        match self.pool().head(self.endpoint(), &key).await {
            Err(e) if e.kind() == floe_storage::ErrorKind::NotFound => Ok(true),
            Err(e) => Err(e.into()),
            Ok(_) => {
                let old = self.table_metadata(theirs).await?;
                Ok(old.uuid() != m.uuid())
            }
        }
    }

    /// Deletes the external catalog's rows of tables that are no longer
    /// tables (`tables` are those that are), when they still name a
    /// metadata file under Floe's location for them. Returns how many.
    pub(crate) async fn unpublish_gone(&self, tables: &HashSet<String>) -> Result<usize> {
        let Some(cat) = self.external_catalog() else {
            return Ok(0);
        };
        let mut removed = 0;
        for (name, location) in cat.tables().await? {
            if tables.contains(&name) || !location.starts_with(&self.table_prefix_uri(&name)?) {
                continue;
            }
            if cat.remove(&name, &location).await? {
                tracing::info!(table = %name, "table dropped from the SQL catalog: its topic is no longer a table");
                removed += 1;
            }
            self.published().forget(&name);
        }
        Ok(removed)
    }
}
