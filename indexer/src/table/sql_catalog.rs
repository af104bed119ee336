//! A SQL catalog's tables, as pyiceberg's `SqlCatalog` and Iceberg's
//! `JdbcCatalog` keep them: `iceberg_tables` (one row per table: catalog
//! name, namespace, table name, metadata location, previous metadata
//! location) and `iceberg_namespace_properties`, in SQLite (compiled in)
//! or PostgreSQL. Created where missing; Floe's rows are in the namespace
//! [`NAMESPACE`], under one catalog name.
//!
//! What [`super::external`] needs of it: a row's location, moving a row by
//! a compare-and-set, deleting it as it is, and the rows of the namespace.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{ErrorKind, IndexerError, Result};
use crate::table::catalog::NAMESPACE;
use crate::table::pg_tls;

/// How long a SQLite statement waits for another process's lock on the
/// database (a reader's, or a second indexer's) before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long connecting to PostgreSQL may take, unless the URI says.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The catalog's tables, as pyiceberg and the JDBC catalog define them
/// (the JDBC catalog's later `iceberg_type` column is optional there).
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS iceberg_tables (
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
        PRIMARY KEY (catalog_name, namespace, property_key));";

/// The statements, with the placeholders of each database.
struct Statements {
    namespace: &'static str,
    location: &'static str,
    insert: &'static str,
    update: &'static str,
    delete: &'static str,
    list: &'static str,
}

/// Written with PostgreSQL's `$n` placeholders; SQLite's are `?n`
/// ([`for_sqlite`]: in SQLite `$n` is a name, numbered by where it first
/// appears).
const SQL: Statements = Statements {
    namespace: "INSERT INTO iceberg_namespace_properties \
        (catalog_name, namespace, property_key, property_value) VALUES ($1, $2, 'exists', 'true') \
        ON CONFLICT DO NOTHING",
    location: "SELECT metadata_location FROM iceberg_tables \
        WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3",
    insert: "INSERT INTO iceberg_tables \
        (catalog_name, table_namespace, table_name, metadata_location, previous_metadata_location) \
        VALUES ($1, $2, $3, $4, NULL) ON CONFLICT DO NOTHING",
    update: "UPDATE iceberg_tables SET metadata_location = $4, previous_metadata_location = $5 \
        WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3 \
        AND metadata_location = $5",
    delete: "DELETE FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2 \
        AND table_name = $3 AND metadata_location = $4",
    list: "SELECT table_name, metadata_location FROM iceberg_tables \
        WHERE catalog_name = $1 AND table_namespace = $2 AND metadata_location IS NOT NULL",
};

/// An external SQL catalog and the catalog name Floe's rows carry.
pub struct SqlCatalog {
    backend: Backend,
    name: String,
}

enum Backend {
    /// Opened on first use, and again after an error.
    Sqlite {
        path: PathBuf,
        conn: Arc<Mutex<Option<Connection>>>,
    },
    /// Connected on first use, and again after an error.
    Postgres {
        config: Box<tokio_postgres::Config>,
        /// TLS, as the URI's `sslmode` asks (`super::pg_tls`).
        tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
        mode: pg_tls::Mode,
        client: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
    },
}

impl std::fmt::Debug for SqlCatalog {
    /// No password: PostgreSQL's host, port, user and database.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("SqlCatalog");
        match &self.backend {
            Backend::Sqlite { path, .. } => d.field("sqlite", path),
            Backend::Postgres { config, mode, .. } => d
                .field("hosts", &config.get_hosts())
                .field("ports", &config.get_ports())
                .field("user", &config.get_user())
                .field("dbname", &config.get_dbname())
                .field("sslmode", mode),
        };
        d.field("name", &self.name).finish()
    }
}

fn unavailable(e: impl std::fmt::Display) -> IndexerError {
    IndexerError::new(ErrorKind::Unavailable, format!("SQL catalog: {e}"))
}

impl SqlCatalog {
    /// A catalog from its URI, whose rows carry the catalog name `name`:
    /// `sqlite:PATH` (`sqlite:///abs/catalog.db`, `sqlite:/abs/catalog.db`
    /// or `sqlite:relative.db`), or `postgresql://user:password@host:port/db`
    /// (libpq's URI; a Unix socket's folder as `host=/run/postgresql` in
    /// its query), with libpq's `sslmode` (`disable`, `prefer`, `require`,
    /// `verify-ca`, `verify-full`) and `sslrootcert` ([`pg_tls`]).
    pub fn parse(uri: &str, name: &str) -> Result<Self> {
        if name.is_empty() {
            return Err(IndexerError::invalid("the table catalog's name is empty"));
        }
        let backend = match uri.split_once(':') {
            Some(("sqlite", rest)) => {
                let path = rest.strip_prefix("//").unwrap_or(rest);
                if path.is_empty() {
                    return Err(IndexerError::invalid(format!(
                        "table catalog {uri:?} names no file"
                    )));
                }
                Backend::Sqlite {
                    path: PathBuf::from(path),
                    conn: Arc::new(Mutex::new(None)),
                }
            }
            Some(("postgresql" | "postgres", _)) => {
                // The error may quote the URI: it is not repeated here,
                // since it may hold a password.
                let (plain, wanted) = pg_tls::split(uri)?;
                let mut config: tokio_postgres::Config = plain.parse().map_err(|e| {
                    IndexerError::invalid(format!("table catalog: not a PostgreSQL URI: {e}"))
                })?;
                let tls = match wanted.connector()? {
                    Some((mode, connector)) => {
                        config.ssl_mode(mode);
                        Some(connector)
                    }
                    None => {
                        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
                        None
                    }
                };
                if config.get_dbname().is_none() {
                    return Err(IndexerError::invalid(
                        "table catalog: the PostgreSQL URI names no database",
                    ));
                }
                if config.get_connect_timeout().is_none() {
                    config.connect_timeout(CONNECT_TIMEOUT);
                }
                config.application_name("floe-indexer");
                Backend::Postgres {
                    config: Box::new(config),
                    tls,
                    mode: wanted.mode,
                    client: tokio::sync::Mutex::new(None),
                }
            }
            Some((scheme, _)) => {
                return Err(IndexerError::invalid(format!(
                    "table catalog: the {scheme:?} scheme is not supported; Floe publishes \
                     to SQLite (sqlite:PATH) and PostgreSQL (postgresql://…) catalogs"
                )));
            }
            None => {
                return Err(IndexerError::invalid(
                    "table catalog: not a URI; expected sqlite:PATH or postgresql://…",
                ));
            }
        };
        Ok(Self {
            backend,
            name: name.to_string(),
        })
    }

    /// The metadata location of `table`'s row, if it has one.
    pub async fn location(&self, table: &str) -> Result<Option<String>> {
        let args = [self.name.clone(), NAMESPACE.to_string(), table.to_string()];
        match &self.backend {
            Backend::Sqlite { .. } => {
                self.sqlite(move |c| {
                    c.query_row(
                        &for_sqlite(SQL.location),
                        params![args[0], args[1], args[2]],
                        |r| r.get::<_, Option<String>>(0),
                    )
                    .optional()
                    .map(Option::flatten)
                })
                .await
            }
            Backend::Postgres { .. } => {
                let rows = self
                    .postgres(SQL.location, &[&args[0], &args[1], &args[2]], Query::Rows)
                    .await?
                    .rows();
                match rows.first() {
                    None => Ok(None),
                    Some(r) => r.try_get(0).map_err(unavailable),
                }
            }
        }
    }

    /// Moves `table`'s row from `expected` (`None`: no row) to `new`;
    /// false when the row was not `expected` any more.
    pub async fn swap(&self, table: &str, expected: Option<&str>, new: &str) -> Result<bool> {
        let (name, table, new) = (self.name.clone(), table.to_string(), new.to_string());
        let ns = NAMESPACE.to_string();
        let changed = match (&self.backend, expected) {
            (Backend::Sqlite { .. }, None) => {
                self.sqlite(move |c| {
                    c.execute(&for_sqlite(SQL.insert), params![name, ns, table, new])
                })
                .await? as u64
            }
            (Backend::Sqlite { .. }, Some(old)) => {
                let old = old.to_string();
                self.sqlite(move |c| {
                    c.execute(&for_sqlite(SQL.update), params![name, ns, table, new, old])
                })
                .await? as u64
            }
            (Backend::Postgres { .. }, None) => self
                .postgres(SQL.insert, &[&name, &ns, &table, &new], Query::Count)
                .await?
                .count(),
            (Backend::Postgres { .. }, Some(old)) => self
                .postgres(SQL.update, &[&name, &ns, &table, &new, &old], Query::Count)
                .await?
                .count(),
        };
        Ok(changed == 1)
    }

    /// Deletes `table`'s row if it still names `expected`.
    pub async fn remove(&self, table: &str, expected: &str) -> Result<bool> {
        let args = [
            self.name.clone(),
            NAMESPACE.to_string(),
            table.to_string(),
            expected.to_string(),
        ];
        let n = match &self.backend {
            Backend::Sqlite { .. } => {
                self.sqlite(move |c| {
                    c.execute(
                        &for_sqlite(SQL.delete),
                        params![args[0], args[1], args[2], args[3]],
                    )
                })
                .await? as u64
            }
            Backend::Postgres { .. } => self
                .postgres(
                    SQL.delete,
                    &[&args[0], &args[1], &args[2], &args[3]],
                    Query::Count,
                )
                .await?
                .count(),
        };
        Ok(n == 1)
    }

    /// Every row of Floe's namespace: table name and metadata location.
    pub async fn tables(&self) -> Result<Vec<(String, String)>> {
        let args = [self.name.clone(), NAMESPACE.to_string()];
        match &self.backend {
            Backend::Sqlite { .. } => {
                self.sqlite(move |c| {
                    let mut q = c.prepare(&for_sqlite(SQL.list))?;
                    let rows =
                        q.query_map(params![args[0], args[1]], |r| Ok((r.get(0)?, r.get(1)?)))?;
                    rows.collect()
                })
                .await
            }
            Backend::Postgres { .. } => self
                .postgres(SQL.list, &[&args[0], &args[1]], Query::Rows)
                .await?
                .rows()
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<std::result::Result<_, tokio_postgres::Error>>()
                .map_err(unavailable),
        }
    }

    /// Runs `f` on the SQLite connection (opened, and the catalog's tables
    /// created, when there is none), off the async threads. An error
    /// drops the connection: the next call opens another.
    async fn sqlite<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let Backend::Sqlite { path, conn } = &self.backend else {
            return Err(unavailable("not a SQLite catalog"));
        };
        let (conn, path, name) = (conn.clone(), path.clone(), self.name.clone());
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            let c = match guard.as_mut() {
                Some(c) => c,
                None => guard.insert(open_sqlite(&path, &name).map_err(unavailable)?),
            };
            let out = f(c).map_err(unavailable);
            if out.is_err() {
                *guard = None;
            }
            out
        })
        .await
        .map_err(unavailable)?
    }

    /// Runs one statement on PostgreSQL (connected, and the catalog's
    /// tables created, when there is no connection). An error drops the
    /// connection: the next call connects again.
    async fn postgres(
        &self,
        statement: &str,
        args: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        want: Query,
    ) -> Result<Answer> {
        let Backend::Postgres {
            config,
            tls,
            client,
            ..
        } = &self.backend
        else {
            return Err(unavailable("not a PostgreSQL catalog"));
        };
        let mut guard = client.lock().await;
        if guard.as_ref().is_none_or(|c| c.is_closed()) {
            *guard = Some(connect_postgres(config, tls.as_ref(), &self.name).await?);
        }
        let Some(c) = guard.as_ref() else {
            return Err(unavailable("no connection"));
        };
        let out = match want {
            Query::Rows => c.query(statement, args).await.map(Answer::Rows),
            Query::Count => c.execute(statement, args).await.map(Answer::Count),
        };
        if out.is_err() {
            *guard = None;
        }
        out.map_err(unavailable)
    }
}

enum Query {
    Rows,
    Count,
}

enum Answer {
    Rows(Vec<tokio_postgres::Row>),
    Count(u64),
}

impl Answer {
    fn rows(self) -> Vec<tokio_postgres::Row> {
        match self {
            Answer::Rows(r) => r,
            Answer::Count(_) => Vec::new(),
        }
    }

    fn count(self) -> u64 {
        match self {
            Answer::Count(n) => n,
            Answer::Rows(r) => r.len() as u64,
        }
    }
}

/// `statement` with SQLite's numbered placeholders.
fn for_sqlite(statement: &str) -> String {
    statement.replace('$', "?")
}

/// Opens the SQLite database and creates the catalog's tables and Floe's
/// namespace, where missing.
fn open_sqlite(path: &std::path::Path, name: &str) -> rusqlite::Result<Connection> {
    let c = Connection::open(path)?;
    c.busy_timeout(BUSY_TIMEOUT)?;
    c.execute_batch(SCHEMA)?;
    c.execute(&for_sqlite(SQL.namespace), params![name, NAMESPACE])?;
    Ok(c)
}

/// Connects to PostgreSQL (its connection driven by a task of its own) and
/// creates the catalog's tables and Floe's namespace, where missing.
async fn connect_postgres(
    config: &tokio_postgres::Config,
    tls: Option<&tokio_postgres_rustls::MakeRustlsConnect>,
    name: &str,
) -> Result<tokio_postgres::Client> {
    let ended = |e: tokio_postgres::Error| {
        tracing::debug!(error = %e, "SQL catalog connection ended");
    };
    let client = match tls {
        Some(tls) => {
            let (client, connection) = config.connect(tls.clone()).await.map_err(unavailable)?;
            tokio::spawn(async move { connection.await.map_err(ended) });
            client
        }
        None => {
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(unavailable)?;
            tokio::spawn(async move { connection.await.map_err(ended) });
            client
        }
    };
    client.batch_execute(SCHEMA).await.map_err(unavailable)?;
    client
        .execute(SQL.namespace, &[&name, &NAMESPACE])
        .await
        .map_err(unavailable)?;
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catalog_uri_is_sqlite_or_postgresql_anything_else_is_refused_clearly() {
        for (uri, path) in [
            ("sqlite:///tmp/c.db", "/tmp/c.db"),
            ("sqlite:/tmp/c.db", "/tmp/c.db"),
            ("sqlite:c.db", "c.db"),
        ] {
            match SqlCatalog::parse(uri, "floe").unwrap().backend {
                Backend::Sqlite { path: p, .. } => assert_eq!(p, PathBuf::from(path), "{uri}"),
                Backend::Postgres { .. } => panic!("{uri} is SQLite"),
            }
        }
        let pg =
            SqlCatalog::parse("postgresql://floe:secret@db.example:6432/lake", "floe").unwrap();
        let shown = format!("{pg:?}");
        assert!(shown.contains("db.example") && shown.contains("6432") && shown.contains("lake"));
        assert!(!shown.contains("secret"), "{shown}");
        match pg.backend {
            Backend::Postgres { config, .. } => {
                assert_eq!(config.get_connect_timeout(), Some(&CONNECT_TIMEOUT));
            }
            Backend::Sqlite { .. } => panic!("PostgreSQL"),
        }
        assert!(SqlCatalog::parse("postgresql:///lake?host=/run/postgresql", "floe").is_ok());
        for (uri, says) in [
            ("mysql://h/db", "\"mysql\" scheme is not supported"),
            ("/tmp/c.db", "not a URI"),
            ("sqlite:", "names no file"),
            ("postgresql://u@h/db?sslmode=allow", "not one of"),
            (
                "postgresql://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent.pem",
                "cannot read /nonexistent.pem",
            ),
            ("postgresql://u@h", "names no database"),
            ("postgresql://u@h/db?nonsense=1", "not a PostgreSQL URI"),
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

    #[tokio::test]
    async fn an_unreachable_postgresql_is_unavailable_not_a_hang() {
        // A port nothing listens on: refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cat =
            SqlCatalog::parse(&format!("postgresql://floe@127.0.0.1:{port}/lake"), "floe").unwrap();
        let e = cat.location("t").await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{}", e.message);
    }
}
