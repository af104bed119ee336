//! The broker's periodic orphan scan: every `--orphan-scan-interval-ms`,
//! the broker that serves coordinator shard 0 scans (in a cluster exactly
//! one broker serves it at a time; standalone, the one broker does).

use std::sync::Arc;
use std::time::Instant;

use crate::coordinator::ShardTable;
use crate::partitions::Partitions;

use super::{OrphanError, ScanOptions, ScanReport, scan};

/// The coordinator shard whose server runs the scan.
pub const SCAN_SHARD: u32 = 0;

/// Scans every `orphan_scan_interval` (the first after one interval) until
/// the broker stops; nothing when the interval is off.
pub(crate) async fn run(partitions: Partitions, shards: Arc<ShardTable>) {
    let Some(interval) = partitions.config().orphan_scan_interval else {
        return;
    };
    let p = partitions.clone();
    crate::coordinator::timers::every(partitions, interval, move || {
        let (p, shards) = (p.clone(), shards.clone());
        async move {
            scan_if_ours(&p, &shards).await;
        }
    })
    .await
}

/// One scan, if this broker serves [`SCAN_SHARD`] (`None` if not); it
/// stops once the shard is no longer this broker's at the same epoch, or
/// the broker stops. Counted in the metrics and logged.
pub(crate) async fn scan_if_ours(
    partitions: &Partitions,
    shards: &ShardTable,
) -> Option<Result<ScanReport, OrphanError>> {
    let fence = shards.serving_fence(SCAN_SHARD)?;
    let opts = ScanOptions::deleting(partitions.config().orphan_scan_age);
    let started = Instant::now();
    let result = scan(
        partitions.pool(),
        partitions.meta().as_ref(),
        &opts,
        |o| {
            if o.deleted {
                tracing::debug!(object = %o.object, age_s = o.age.as_secs(), "deleted an orphan object");
            }
        },
        || shards.holds(&fence) && !partitions.is_stopping(),
    )
    .await;
    match &result {
        Ok(r) => {
            crate::metrics::orphan_scan(r.stopped, r.unknown, r.deleted, r.deleted_bytes);
            tracing::info!(
                listed = r.listed,
                unknown = r.unknown,
                old_enough = r.old_enough,
                deleted = r.deleted,
                deleted_bytes = r.deleted_bytes,
                failed = r.delete_failures,
                stopped = r.stopped,
                took_ms = started.elapsed().as_millis() as u64,
                "orphan scan done"
            );
        }
        Err(e) => {
            crate::metrics::orphan_scan_failed();
            tracing::warn!(error = %e, retryable = e.is_retryable(), "orphan scan failed; the next one tries again");
        }
    }
    Some(result)
}
