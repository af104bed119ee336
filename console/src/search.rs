//! The seam between the console and the indexer: a lookup by key and
//! time, and a backfill of a topic's export (in a process that runs one,
//! or through the cluster's indexer). The console knows the lookup
//! only by this small trait, so that it does not depend on the indexer
//! and its Parquet stack; `floe` implements it over
//! `floe_indexer::query::run` where the process has an indexer.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

/// What to look for: records of a topic whose key equals `key`, with a
/// timestamp in `[from_ms, to_ms)`, at most `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchQuery {
    pub key: Option<Bytes>,
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
    pub limit: usize,
}

/// One record found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    pub partition: u32,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// The records found, ordered by (timestamp, partition, offset), and what
/// the lookup did (the indexer's statistics, shown as they are).
#[derive(Debug, Clone, Default)]
pub struct SearchAnswer {
    pub hits: Vec<SearchHit>,
    pub stats: serde_json::Value,
}

/// Why a lookup failed, as the console answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchErrorKind {
    /// No such topic.
    NotFound,
    /// A parameter the lookup refuses.
    Invalid,
    /// The store or the metadata service did not answer; retrying may help.
    Unavailable,
}

/// A failed lookup: its kind and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchError {
    pub kind: SearchErrorKind,
    pub message: String,
}

/// A lookup under way.
pub type SearchFuture<'a> =
    Pin<Box<dyn Future<Output = Result<SearchAnswer, SearchError>> + Send + 'a>>;

/// A backfill asked: the topic's new export generation.
pub type BackfillFuture<'a> = Pin<Box<dyn Future<Output = Result<u64, SearchError>> + Send + 'a>>;

/// A table asked: the Iceberg catalog's answer for the topic's table (its
/// `metadata-location` and `metadata`), `None` when the topic is not a table
/// or has no metadata file yet.
pub type TableFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<serde_json::Value>, SearchError>> + Send + 'a>>;

/// The indexer as the console reaches it. The caller has checked that the
/// principal may read the topic.
pub trait Search: Send + Sync {
    /// The topic's Iceberg table (`table.format=iceberg`) as its catalog
    /// serves it.
    fn table<'a>(&'a self, topic: &'a str) -> TableFuture<'a>;

    /// Looks records of a topic up by key and time.
    fn search<'a>(&'a self, topic: &'a str, query: &'a SearchQuery) -> SearchFuture<'a>;

    /// Rebuilds the topic's Parquet export from its log (a new
    /// generation; the old one's files go once the new one caught up).
    fn backfill<'a>(&'a self, topic: &'a str) -> BackfillFuture<'a>;
}
