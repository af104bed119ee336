//! Publishing every table to an external SQL catalog as well
//! (`--table-catalog sqlite:PATH`): the tables pyiceberg's `SqlCatalog`
//! and Iceberg's JDBC catalog keep (`iceberg_tables`, one row per table
//! with its metadata location, and `iceberg_namespace_properties`), so
//! that engines which attach that catalog see Floe's tables in it.
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
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{ErrorKind, IndexerError, Result};
use crate::exporter::Indexer;
use crate::table::catalog::NAMESPACE;

/// How long a statement waits for another process's lock on the database
/// (a reader's, or a second indexer's) before it fails.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// An external SQL catalog and the catalog name Floe's rows carry.
pub struct SqlCatalog {
    path: PathBuf,
    name: String,
    /// Opened on first use, and again after an error.
    conn: Arc<Mutex<Option<Connection>>>,
}

impl std::fmt::Debug for SqlCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlCatalog")
            .field("path", &self.path)
            .field("name", &self.name)
            .finish()
    }
}

fn sql_err(e: rusqlite::Error) -> IndexerError {
    IndexerError::new(ErrorKind::Unavailable, format!("SQL catalog: {e}"))
}

impl SqlCatalog {
    /// A catalog from its URI: `sqlite:PATH` (`sqlite:///abs/catalog.db`,
    /// `sqlite:/abs/catalog.db` or `sqlite:relative.db`), whose rows carry
    /// the catalog name `name`.
    pub fn parse(uri: &str, name: &str) -> Result<Self> {
        if name.is_empty() {
            return Err(IndexerError::invalid("the table catalog's name is empty"));
        }
        let path = match uri.split_once(':') {
            Some(("sqlite", rest)) => rest.strip_prefix("//").unwrap_or(rest),
            Some((scheme, _)) => {
                return Err(IndexerError::invalid(format!(
                    "table catalog {uri:?}: the {scheme:?} scheme is not supported; \
                     Floe publishes to SQLite catalogs (sqlite:PATH)"
                )));
            }
            None => {
                return Err(IndexerError::invalid(format!(
                    "table catalog {uri:?} is not a URI: expected sqlite:PATH"
                )));
            }
        };
        if path.is_empty() {
            return Err(IndexerError::invalid(format!(
                "table catalog {uri:?} names no file"
            )));
        }
        Ok(Self {
            path: PathBuf::from(path),
            name: name.to_string(),
            conn: Arc::new(Mutex::new(None)),
        })
    }

    /// Runs `f` on the connection (opened, and the catalog's tables
    /// created, when there is none), off the async threads. An error
    /// drops the connection: the next call opens another.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection, &str) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let (conn, path, name) = (self.conn.clone(), self.path.clone(), self.name.clone());
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            if guard.is_none() {
                *guard = Some(open(&path, &name).map_err(sql_err)?);
            }
            let Some(c) = guard.as_mut() else {
                return Err(IndexerError::new(
                    ErrorKind::Unavailable,
                    "SQL catalog: no connection",
                ));
            };
            let out = f(c, &name).map_err(sql_err);
            if out.is_err() {
                *guard = None;
            }
            out
        })
        .await
        .map_err(|e| IndexerError::new(ErrorKind::Unavailable, format!("SQL catalog task: {e}")))?
    }

    /// The metadata location of `table`'s row, if it has one.
    pub async fn location(&self, table: &str) -> Result<Option<String>> {
        let table = table.to_string();
        self.with(move |c, name| {
            c.query_row(
                "SELECT metadata_location FROM iceberg_tables \
                 WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3",
                params![name, NAMESPACE, table],
                |r| r.get::<_, Option<String>>(0),
            )
            .optional()
            .map(Option::flatten)
        })
        .await
    }

    /// Moves `table`'s row from `expected` (`None`: no row) to `new`;
    /// false when the row was not `expected` any more.
    pub async fn swap(&self, table: &str, expected: Option<&str>, new: &str) -> Result<bool> {
        let (table, expected, new) = (
            table.to_string(),
            expected.map(str::to_string),
            new.to_string(),
        );
        self.with(move |c, name| {
            let changed = match &expected {
                None => c.execute(
                    "INSERT OR IGNORE INTO iceberg_tables \
                     (catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location) \
                     VALUES (?1, ?2, ?3, ?4, NULL)",
                    params![name, NAMESPACE, table, new],
                )?,
                Some(old) => c.execute(
                    "UPDATE iceberg_tables SET metadata_location = ?4, previous_metadata_location = ?5 \
                     WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3 \
                     AND metadata_location = ?5",
                    params![name, NAMESPACE, table, new, old],
                )?,
            };
            Ok(changed == 1)
        })
        .await
    }

    /// Deletes `table`'s row if it still names `expected`.
    pub async fn remove(&self, table: &str, expected: &str) -> Result<bool> {
        let (table, expected) = (table.to_string(), expected.to_string());
        self.with(move |c, name| {
            let n = c.execute(
                "DELETE FROM iceberg_tables WHERE catalog_name = ?1 AND table_namespace = ?2 \
                 AND table_name = ?3 AND metadata_location = ?4",
                params![name, NAMESPACE, table, expected],
            )?;
            Ok(n == 1)
        })
        .await
    }

    /// Every row of Floe's namespace: table name and metadata location.
    pub async fn tables(&self) -> Result<Vec<(String, String)>> {
        self.with(|c, name| {
            let mut q = c.prepare(
                "SELECT table_name, metadata_location FROM iceberg_tables \
                 WHERE catalog_name = ?1 AND table_namespace = ?2 AND metadata_location IS NOT NULL",
            )?;
            let rows = q.query_map(params![name, NAMESPACE], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
        .await
    }
}

/// Opens the database and creates the catalog's tables (as pyiceberg and
/// the JDBC catalog define them) and Floe's namespace, where missing.
fn open(path: &std::path::Path, name: &str) -> rusqlite::Result<Connection> {
    let c = Connection::open(path)?;
    c.busy_timeout(BUSY_TIMEOUT)?;
    c.execute_batch(
        "CREATE TABLE IF NOT EXISTS iceberg_tables (
             catalog_name VARCHAR(255) NOT NULL,
             table_namespace VARCHAR(255) NOT NULL,
             table_name VARCHAR(255) NOT NULL,
             metadata_location VARCHAR(1000),
             previous_metadata_location VARCHAR(1000),
             PRIMARY KEY (catalog_name, table_namespace, table_name));
         CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
             catalog_name VARCHAR(255) NOT NULL,
             namespace VARCHAR(255) NOT NULL,
             property_key VARCHAR(255) NOT NULL,
             property_value VARCHAR(1000) NOT NULL,
             PRIMARY KEY (catalog_name, namespace, property_key));",
    )?;
    c.execute(
        "INSERT OR IGNORE INTO iceberg_namespace_properties \
         (catalog_name, namespace, property_key, property_value) VALUES (?1, ?2, 'exists', 'true')",
        params![name, NAMESPACE],
    )?;
    Ok(c)
}

/// How long a table whose row names someone else's commit is left before
/// its row is looked at again (sooner when the table commits again).
const CONFLICT_RECHECK: std::time::Duration = std::time::Duration::from_secs(60);

/// What the indexer last did with each table's metadata location: it is
/// in the catalog (`None`), or it was refused there at that instant (a
/// conflict). An idle round asks the catalog nothing.
#[derive(Default)]
pub(crate) struct Published(Mutex<HashMap<String, (String, Option<Instant>)>>);

impl Published {
    /// Whether `location` needs no look at the catalog now.
    fn settled(&self, topic: &str, location: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(topic)
            .is_some_and(|(l, refused)| {
                l == location && refused.is_none_or(|at| at.elapsed() < CONFLICT_RECHECK)
            })
    }

    fn set(&self, topic: &str, location: &str, refused: bool) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(
            topic.to_string(),
            (location.to_string(), refused.then(Instant::now)),
        );
    }

    fn forget(&self, topic: &str) {
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
        let table = self.meta().table_state(topic).await?;
        let Some(ours) = table.state.metadata_location else {
            return Ok(false);
        };
        if self.published().settled(topic, &ours) {
            return Ok(false);
        }
        let theirs = cat.location(topic).await?;
        let moved = match theirs.as_deref() {
            Some(t) if t == ours => false,
            Some(t) => {
                if !self.is_floes_earlier(topic, &ours, t).await? {
                    self.published().set(topic, &ours, true);
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
        self.published().set(topic, &ours, false);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catalog_uri_is_sqlite_with_a_path_anything_else_is_refused_clearly() {
        for (uri, path) in [
            ("sqlite:///tmp/c.db", "/tmp/c.db"),
            ("sqlite:/tmp/c.db", "/tmp/c.db"),
            ("sqlite:c.db", "c.db"),
        ] {
            let c = SqlCatalog::parse(uri, "floe").unwrap();
            assert_eq!(c.path, PathBuf::from(path), "{uri}");
        }
        for (uri, says) in [
            (
                "postgresql://h/db",
                "\"postgresql\" scheme is not supported",
            ),
            ("/tmp/c.db", "is not a URI"),
            ("sqlite:", "names no file"),
        ] {
            let e = SqlCatalog::parse(uri, "floe").unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidRequest);
            assert!(e.message.contains(says), "{uri}: {}", e.message);
        }
        assert!(SqlCatalog::parse("sqlite:c.db", "").is_err());
    }

    #[tokio::test]
    async fn a_row_moves_only_from_what_it_was_and_is_deleted_only_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        let cat = SqlCatalog::parse(&format!("sqlite:{}", path.display()), "floe").unwrap();
        assert_eq!(cat.location("t").await.unwrap(), None);
        assert!(cat.swap("t", None, "file:///m1").await.unwrap());
        // A second insert, or a move from a location it no longer has, is refused.
        assert!(!cat.swap("t", None, "file:///m9").await.unwrap());
        assert!(
            !cat.swap("t", Some("file:///m0"), "file:///m9")
                .await
                .unwrap()
        );
        assert!(
            cat.swap("t", Some("file:///m1"), "file:///m2")
                .await
                .unwrap()
        );
        assert_eq!(
            cat.location("t").await.unwrap().as_deref(),
            Some("file:///m2")
        );
        // Another catalog name in the same database is another catalog.
        let other = SqlCatalog::parse(&format!("sqlite:{}", path.display()), "spark").unwrap();
        assert_eq!(other.location("t").await.unwrap(), None);
        assert_eq!(
            cat.tables().await.unwrap(),
            vec![("t".to_string(), "file:///m2".to_string())]
        );
        // What another reader of the file sees: pyiceberg's columns.
        let c = Connection::open(&path).unwrap();
        let (loc, prev): (String, String) = c
            .query_row(
                "SELECT metadata_location, previous_metadata_location FROM iceberg_tables \
                 WHERE catalog_name = 'floe' AND table_namespace = 'floe' AND table_name = 't'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((loc.as_str(), prev.as_str()), ("file:///m2", "file:///m1"));
        let ns: String = c
            .query_row(
                "SELECT property_value FROM iceberg_namespace_properties \
                 WHERE catalog_name = 'floe' AND namespace = 'floe' AND property_key = 'exists'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(ns, "true");
        assert!(!cat.remove("t", "file:///m1").await.unwrap());
        assert!(cat.remove("t", "file:///m2").await.unwrap());
        assert_eq!(cat.location("t").await.unwrap(), None);
    }
}
