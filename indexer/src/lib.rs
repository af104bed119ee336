//! floe-indexer: committed topic data becomes Parquet files in the object
//! store, exactly once, and those files (plus the log not exported yet)
//! answer lookups by key and time.
//!
//! - [`exporter`]: the export loop (begin, write, commit per file), retention
//!   and the sweep of files nothing refers to; backfill.
//! - [`log_reader`]: committed records straight from the object store.
//! - [`columns`]: the Arrow schema of an export file and the writer that turns
//!   records into Parquet, with typed columns extracted from JSON values by
//!   the topic's index definition.
//! - [`lookup`]: searches one Parquet file by key and time range, pruning with
//!   row-group statistics, the page index and bloom filters.
//! - [`query`]: a lookup over a topic's files and its log not exported yet.
//! - [`service`]: the HTTP API.
//! - [`settings`]: a topic's `export.*` configs and file names.
//! - [`table`]: topics as Iceberg tables, committed exactly once and served
//!   over Iceberg's REST catalog API.
//!
//! The design is described in `docs/indexer.md`.

pub mod columns;
pub mod error;
pub mod exporter;
pub mod log_reader;
pub mod lookup;
mod metrics;
pub mod query;
pub mod service;
pub mod settings;
pub mod table;

pub use error::{ErrorKind, IndexerError};
pub use exporter::{Indexer, IndexerConfig};
