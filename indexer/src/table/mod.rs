//! Topics as Iceberg v2 tables (`table.format=iceberg`).
//!
//! The export's Parquet files (with Iceberg field ids) are the table's data
//! files; [`commit`] adds those committed since the table's current
//! snapshot as a new snapshot, exactly once, with the table's pointer in
//! the Raft state; [`catalog`] serves the tables over Iceberg's REST
//! catalog API; [`schema`] maps a topic's columns to an Iceberg schema;
//! [`compact`] rewrites a partition's small files of an hour into one;
//! [`external`] publishes each table to an external SQL catalog
//! ([`sql_catalog`]: SQLite or PostgreSQL, over TLS as [`pg_tls`] sets
//! it up) as well; [`upsert`] keeps one row per key by position deletes;
//! `sweep` deletes the table's metadata objects nothing refers to, and the
//! data files no kept snapshot names.
//! The design is described in `docs/tables.md`.

pub mod catalog;
pub mod commit;
pub mod compact;
pub mod external;
pub mod pg_tls;
pub mod schema;
pub mod sql_catalog;
mod sweep;
pub mod upsert;

pub use commit::{Committed, Covered};
