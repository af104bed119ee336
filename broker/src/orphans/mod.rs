//! The orphan scan: deleting the log objects of the store that the
//! metadata never learned of.
//!
//! The sweeper (`partitions::maintenance`) deletes objects the metadata
//! knows and no index entry references any more. An object the metadata
//! never knew is beyond it, and such objects arise:
//!
//! - a pool write hedged or retried as a new object (`floe_storage::pool`):
//!   the losing attempt's object is deleted by the pool, but one that lands
//!   after its last delete (a request a hung server completes minutes
//!   later) stays;
//! - a flush that wrote its WAL object and then failed to commit it (the
//!   metadata refused, or the broker crashed in between);
//! - a segment written by compaction or the log cleaner whose swap-in
//!   (`ReplaceRanges`) never happened because the broker crashed (a refused
//!   swap deletes its segment at once).
//!
//! **How they are found** ([`scan`]): every endpoint of the pool is listed
//! under the prefixes brokers write log objects to ([`LOG_PREFIXES`]:
//! `wal/` and `segments/`), a page at a time, and each page of keys is
//! asked of the metadata (`UnknownObjects`, answered linearizably from an
//! index of the object table by key): which of them does its object table
//! not hold, referenced or unreferenced? A segment's `.index` and
//! `.timeindex` are asked about as their `.log`, the object the metadata
//! knows a segment by. An unknown object is deleted only once it is older
//! than the safe age (`--orphan-scan-age-ms`, an hour), by the
//! last-modified time the listing gives. The share groups' timer buckets
//! (`share-timers/`) have their owner's own sweep, and the indexer's
//! exports (`exports/`) and Iceberg tables (`tables/`) are not known to the
//! object table and have the indexer's sweeps: none of them is listed.
//!
//! **Races**, and why each is safe:
//!
//! - A flush has written its object but not committed it yet: the object
//!   is young. The safe age is far longer than a write and a commit take
//!   (seconds), so it is known long before it is old enough.
//! - The listing comes first, the question after, and the question is
//!   linearizable: an object committed before it is asked about is known.
//! - A listing that lags shows an object already deleted (deleting it again
//!   finds nothing: fine) or misses a new one (the next scan sees it).
//! - The sweeper deletes an unreferenced object, then forgets it: between
//!   this scan's listing and its question it may be both gone and
//!   forgotten, so it looks unknown; its delete finds nothing, which is
//!   fine (deletes treat a missing object as done).
//! - The age comes from the store's clock (S3's `Last-Modified`, a file's
//!   mtime) and is compared with this process's: clocks an hour apart would
//!   be needed for a young object to look old.
//! - Several endpoints: each is listed on its own, and an object is known
//!   by endpoint and key. A pool whose endpoint ids are not the cluster's
//!   (`default` instead of `local`) would see every object as unknown, so
//!   a scan refuses to go on when the metadata holds objects on an
//!   endpoint the pool lacks ([`OrphanError::ForeignPool`]).
//!
//! One broker scans at a time (the `task` module): the one serving coordinator
//! shard 0. A scan that finds the shard gone stops before its next page of
//! deletes; two scans overlapping for a moment only delete the same
//! objects twice. `floe storage orphans` runs the same [`scan`] as a dry
//! run (deleting only with `--delete`).

mod scan;
pub(crate) mod task;

pub use scan::{
    DEFAULT_PAGE, LOG_PREFIXES, Orphan, OrphanError, ScanOptions, ScanReport, known_as, scan,
};
