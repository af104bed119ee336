//! floe-storage: Floe's log on object storage.
//!
//! Everything that touches bytes at rest lives here and depends on nothing
//! else of Floe's:
//!
//! - [`pool`]: a pool of object-store endpoints (`file://`, `s3://`,
//!   `memory://`, `hdfs://` behind a feature) where a failed or slow write
//!   goes to a new object at once, on another endpoint when there is one.
//! - [`batch`]: a zero-copy view of a Kafka RecordBatch v2 header, and
//!   [`records`] to decode (and, for tests and tools, build) the records in it;
//!   [`recompress`] rewrites produced batches into a topic's `compression.type`.
//! - [`wal`]: one object holding batches of many partitions, with a footer
//!   index, readable by byte range.
//! - [`segment`]: per-partition `.log`, `.index` and `.timeindex` objects and
//!   the readers that binary-search them.
//! - [`cache`]: a bounded block cache for object reads.
//! - [`committed`]: a partition's whole batches read back from a byte range
//!   of a WAL object or segment (what the broker and the indexer both read).
//! - [`control`]: transaction markers (COMMIT/ABORT control batches).
//! - [`crc`]: CRC-32C of concatenated byte strings from their own CRCs.
//! - [`clean`]: log compaction's key map and batch rewriting.
//! - [`timers`]: a share-partition's timer bucket (delayed records' due
//!   times, in due order), written once and read back by chunk.
//!
//! The byte layouts are specified in `docs/storage.md`.

pub mod backend;
pub mod batch;
pub mod cache;
pub mod clean;
pub mod committed;
pub mod control;
pub mod crc;
pub mod delayed;
pub mod error;
pub mod fault;
pub mod ids;
pub mod latency;
pub mod local;
pub mod pool;
pub mod recompress;
pub mod records;
pub mod segment;
pub mod timers;
pub mod wal;

mod bytes_ext;

pub use cache::{BlockCache, CachedReader};
pub use error::{ErrorKind, StorageError};
pub use ids::{EndpointId, ObjectKey, ObjectRef, Offset, PartitionKey, TopicId};
pub use latency::DeadlinePolicy;
pub use pool::{
    EndpointStats, ListPages, ListedObject, PoolOptions, RangeRead, StoreKind, StorePool,
    WriteToken,
};
