//! One orphan scan over a pool (see the module above for why it is safe).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use floe_metadata::api::MetaApi;
use floe_metadata::error::MetaError;
use floe_storage::{ListedObject, ObjectRef, StorageError, StorePool};
use futures::StreamExt;

/// The prefixes brokers write log objects under: WAL objects
/// (`wal/{broker}/…`, the flusher) and segments (`segments/{topic}/…`,
/// compaction and the log cleaner).
pub const LOG_PREFIXES: [&str; 2] = ["wal/", "segments/"];

/// Listed objects per question to the metadata.
pub const DEFAULT_PAGE: usize = 1_000;

/// What a scan does.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// An unknown object younger than this is left alone.
    pub safe_age: Duration,
    /// Whether unknown objects older than `safe_age` are deleted (false:
    /// a dry run that only reports them).
    pub delete: bool,
    /// Listed objects per question to the metadata (at most the route's
    /// limit, 10,000).
    pub page: usize,
}

impl ScanOptions {
    /// A scan that deletes what is older than `safe_age`.
    pub fn deleting(safe_age: Duration) -> Self {
        Self {
            safe_age,
            delete: true,
            page: DEFAULT_PAGE,
        }
    }
}

/// An object of the store the metadata does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    pub object: ObjectRef,
    /// Since it was last written, by the store's clock.
    pub age: Duration,
    /// Older than the safe age: deleted by a scan that deletes.
    pub old_enough: bool,
    /// This scan deleted it (or found it already gone).
    pub deleted: bool,
}

/// What one scan found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// Objects listed under the log prefixes, on every endpoint.
    pub listed: u64,
    /// Of them, unknown to the metadata (young or old).
    pub unknown: u64,
    pub unknown_bytes: u64,
    /// Of those, older than the safe age.
    pub old_enough: u64,
    pub deleted: u64,
    pub deleted_bytes: u64,
    /// Deletes that failed (tried again by the next scan).
    pub delete_failures: u64,
    /// The scan stopped early because it was told to (`go_on` said no).
    pub stopped: bool,
}

/// Why a scan could not finish.
#[derive(Debug, thiserror::Error)]
pub enum OrphanError {
    #[error("listing the store failed: {0}")]
    Store(#[from] StorageError),
    #[error("asking the metadata which objects it knows failed: {0}")]
    Metadata(#[from] MetaError),
    /// The metadata holds objects on endpoints this pool does not have: the
    /// pool's endpoint ids are not the cluster's, and every object would
    /// look unknown. Nothing was deleted.
    #[error(
        "the metadata knows objects on endpoint(s) {missing:?} that this store pool lacks \
         (its endpoints are {pool:?}): give the cluster's endpoint ids (id=URL); nothing was deleted"
    )]
    ForeignPool {
        missing: Vec<String>,
        pool: Vec<String>,
    },
    /// The store holds log objects and the metadata knows none at all: a
    /// metadata cluster other than the store's (every object would look
    /// unknown). Nothing was deleted.
    #[error(
        "the store holds log objects but the metadata knows none at all: is this the store's \
         metadata cluster? nothing was deleted"
    )]
    NothingKnown,
}

impl OrphanError {
    /// Whether the next scan may do better (the store or the metadata was
    /// unavailable); a foreign pool is a configuration error.
    pub fn is_retryable(&self) -> bool {
        match self {
            OrphanError::Store(e) => e.is_retryable(),
            OrphanError::Metadata(e) => e.kind().is_retryable(),
            OrphanError::ForeignPool { .. } | OrphanError::NothingKnown => false,
        }
    }
}

/// The object the metadata knows `listed` by: a segment's `.index` and
/// `.timeindex` by their `.log`, anything else by itself.
pub fn known_as(listed: &ObjectRef) -> ObjectRef {
    match floe_storage::segment::log_key_of_sibling(&listed.key) {
        Some(key) => ObjectRef {
            endpoint: listed.endpoint.clone(),
            key,
            size: 0,
        },
        None => listed.clone(),
    }
}

/// Lists every endpoint of `pool` under [`LOG_PREFIXES`], asks the
/// metadata which listed objects it does not know, a page at a time, and
/// (with `opts.delete`) deletes those older than `opts.safe_age`.
/// `on_orphan` sees every unknown object, once its fate is settled.
/// `go_on` is asked before each page is asked about: once it says no,
/// the scan stops (the report says so).
pub async fn scan(
    pool: &StorePool,
    meta: &dyn MetaApi,
    opts: &ScanOptions,
    mut on_orphan: impl FnMut(&Orphan),
    go_on: impl Fn() -> bool,
) -> Result<ScanReport, OrphanError> {
    let endpoints: Vec<_> = pool.endpoint_ids().cloned().collect();
    let mut report = ScanReport::default();
    let mut pool_checked = false;
    for endpoint in &endpoints {
        for prefix in LOG_PREFIXES {
            let mut pages = pool.list_pages(endpoint, prefix, opts.page.max(1))?;
            while let Some(page) = pages.next().await {
                let page = page?;
                if !go_on() {
                    report.stopped = true;
                    return Ok(report);
                }
                report.listed += page.len() as u64;
                let asked: Vec<ObjectRef> = page.iter().map(|o| known_as(&o.object)).collect();
                let answer = meta.unknown_objects(&asked).await?;
                if !pool_checked {
                    check_pool(pool, answer.endpoints.keys())?;
                    if !page.is_empty() && answer.endpoints.values().sum::<u64>() == 0 {
                        return Err(OrphanError::NothingKnown);
                    }
                    pool_checked = true;
                }
                // The ages count from after the answer (see the races above).
                let now = SystemTime::now();
                for i in answer.unknown {
                    let Some(listed) = page.get(i) else { continue };
                    let orphan = settle(pool, opts, listed, now, &mut report).await;
                    on_orphan(&orphan);
                }
            }
        }
    }
    Ok(report)
}

/// Refuses a pool that lacks an endpoint the metadata holds objects on.
fn check_pool<'a>(
    pool: &StorePool,
    known: impl Iterator<Item = &'a String>,
) -> Result<(), OrphanError> {
    let ids: BTreeSet<&str> = pool.endpoint_ids().map(|e| e.as_str()).collect();
    let missing: Vec<String> = known
        .filter(|e| !ids.contains(e.as_str()))
        .cloned()
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(OrphanError::ForeignPool {
        missing,
        pool: ids.into_iter().map(str::to_string).collect(),
    })
}

/// Deletes an unknown object if the scan deletes and it is old enough.
async fn settle(
    pool: &StorePool,
    opts: &ScanOptions,
    listed: &ListedObject,
    now: SystemTime,
    report: &mut ScanReport,
) -> Orphan {
    let age = listed.age(now);
    let old_enough = age >= opts.safe_age;
    let size = listed.object.size;
    report.unknown += 1;
    report.unknown_bytes += size;
    let mut deleted = false;
    if old_enough {
        report.old_enough += 1;
        if opts.delete {
            // A missing object counts as deleted (the sweeper may have
            // deleted it since it was listed).
            match pool.delete(&listed.object).await {
                Ok(()) => {
                    deleted = true;
                    report.deleted += 1;
                    report.deleted_bytes += size;
                }
                Err(e) => {
                    report.delete_failures += 1;
                    tracing::warn!(object = %listed.object, error = %e, "cannot delete an orphan object; the next scan tries again");
                }
            }
        }
    }
    Orphan {
        object: listed.object.clone(),
        age,
        old_enough,
        deleted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_storage::{EndpointId, ObjectKey};

    fn obj(key: &str) -> ObjectRef {
        ObjectRef {
            endpoint: EndpointId::new("local"),
            key: ObjectKey::new(key),
            size: 10,
        }
    }

    #[test]
    fn a_segments_index_objects_are_known_as_its_log() {
        let log = obj("segments/t/0/00000000000000000000.abc.log");
        for sibling in crate::partitions::Partitions::segment_siblings(&log) {
            let known = known_as(&ObjectRef { size: 7, ..sibling });
            assert_eq!(
                (known.endpoint, known.key),
                (log.endpoint.clone(), log.key.clone())
            );
        }
        assert_eq!(known_as(&log), log);
        let wal = obj("wal/1/abc.wal");
        assert_eq!(known_as(&wal), wal);
    }
}
