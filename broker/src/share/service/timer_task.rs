//! The object-store side of a share-partition's timer index
//! ([`crate::share::timers`]): one task per share-partition at a time,
//! started after a fetch that left it work, that looks once for buckets an
//! owner that died left behind, deletes emptied buckets, reads the chunks
//! the index asks for, and writes seals (merging small buckets in). The
//! share-partition's lock is never held across a read or write.

use floe_storage::PartitionKey;
use floe_storage::timers::{CHUNK, chunk_range, decode_chunk, encode, object_size};

use super::{Held, ShareService, lock, now_ms};
use crate::share::durable::ShareStore;
use crate::share::partition::SealPlan;
use crate::share::timers::{MergeSource, TimerEntry, TimerRef, TimerStore, TimerStoreError};

/// The pause after a failed store operation before the next task.
const RETRY_MS: u64 = 1_000;

/// What a timer task was claimed for: the share-partition held at
/// `epoch`, as loaded once (not one loaded again at the same epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerClaim {
    epoch: u64,
    incarnation: u64,
}

/// Why a step stopped.
enum Stop {
    /// The share-partition is no longer the one the task was claimed for.
    Gone,
    /// The store failed (tried again after [`RETRY_MS`]).
    Store(&'static str, TimerStoreError),
}

impl ShareService {
    /// Claims the share-partition's timer work when it has some and no task
    /// does it: the caller then runs [`ShareService::run_timers`] with the
    /// claim returned.
    pub fn claim_timer_work(&self, group_id: &str, key: &PartitionKey) -> Option<TimerClaim> {
        let now = now_ms();
        let mut partitions = lock(&self.partitions);
        let held = partitions.get_mut(&(group_id.to_owned(), *key))?;
        let w = &held.timers;
        if w.running || now < w.retry_at_ms {
            return None;
        }
        let wanted = !w.swept
            || !w.deletable.is_empty()
            || held.sp.timers().wants_load()
            || held.sp.seal_wanted(now);
        if !wanted {
            return None;
        }
        held.timers.running = true;
        Some(TimerClaim {
            epoch: held.epoch,
            incarnation: held.timers.incarnation,
        })
    }

    /// Does the share-partition's timer work until none is left, or the
    /// share-partition is no longer the one `claim` names, or the store fails
    /// (then the next task waits a second).
    pub async fn run_timers(
        &self,
        store: &dyn ShareStore,
        group_id: &str,
        key: &PartitionKey,
        claim: TimerClaim,
    ) {
        let result = self.timer_steps(store, group_id, key, claim).await;
        let id = (group_id.to_owned(), *key);
        let mut partitions = lock(&self.partitions);
        let Some(held) = partitions
            .get_mut(&id)
            .filter(|h| h.epoch == claim.epoch && h.timers.incarnation == claim.incarnation)
        else {
            return;
        };
        held.timers.running = false;
        if let Err(Stop::Store(op, e)) = result {
            crate::metrics::share_timer_error(op);
            tracing::warn!(group = group_id, partition = %key, op, error = %e,
                "share timer bucket operation failed; tried again in a second");
            held.timers.retry_at_ms = now_ms().saturating_add(RETRY_MS);
        }
    }

    /// Deletes every timer bucket of the share-partition (its state was
    /// deleted or started afresh), as far as the store lets it now; what
    /// is left is swept by the next load of the share-partition.
    pub(super) async fn drop_timers(
        &self,
        store: &dyn ShareStore,
        group_id: &str,
        key: &PartitionKey,
    ) {
        let listed = match store.list_timers(group_id, key).await {
            Ok(l) => l,
            Err(e) => {
                crate::metrics::share_timer_error("list");
                tracing::warn!(group = group_id, partition = %key, error = %e,
                    "the timer buckets of a share-partition reset were not listed");
                return;
            }
        };
        for object in listed {
            delete_bucket(store, group_id, key, &object, "of a share-partition reset").await;
        }
    }

    /// Runs `f` on the share-partition if it is still the one `claim` names.
    fn with_held<T>(
        &self,
        group_id: &str,
        key: &PartitionKey,
        claim: TimerClaim,
        f: impl FnOnce(&mut Held) -> T,
    ) -> Result<T, Stop> {
        let mut partitions = lock(&self.partitions);
        match partitions.get_mut(&(group_id.to_owned(), *key)) {
            Some(held)
                if held.epoch == claim.epoch && held.timers.incarnation == claim.incarnation =>
            {
                Ok(f(held))
            }
            _ => Err(Stop::Gone),
        }
    }

    async fn timer_steps(
        &self,
        store: &dyn ShareStore,
        group_id: &str,
        key: &PartitionKey,
        claim: TimerClaim,
    ) -> Result<(), Stop> {
        if !self.with_held(group_id, key, claim, |h| h.timers.swept)? {
            self.sweep(store, group_id, key, claim).await?;
        }
        loop {
            let now = now_ms();
            let (deletable, loads, plan) = self.with_held(group_id, key, claim, |h| {
                (
                    std::mem::take(&mut h.timers.deletable),
                    h.sp.timers().loads(),
                    h.sp.plan_seal(now),
                )
            })?;
            if deletable.is_empty() && loads.is_empty() && plan.is_none() {
                return Ok(());
            }
            // One not deleted is left for the sweep of the next owner.
            for object in deletable {
                delete_bucket(store, group_id, key, &object, "emptied").await;
            }
            for load in loads {
                let object = load.object.clone();
                let Some((first, range)) = chunk_range(load.count, load.index) else {
                    continue;
                };
                let read = store.read_timers(group_id, key, &object, range).await;
                let read = read.and_then(|bytes| {
                    decode_chunk(&bytes).map_err(|e| TimerStoreError::Lost(e.to_string()))
                });
                match read {
                    Ok(entries) => {
                        let fits = self.with_held(group_id, key, claim, |h| {
                            h.sp.timers().chunk_loaded(&object, first, entries)
                        })?;
                        if !fits {
                            self.lose(
                                group_id,
                                key,
                                claim,
                                &object,
                                "a chunk that does not fit its place",
                            )?;
                        }
                    }
                    Err(TimerStoreError::Lost(why)) => {
                        self.lose(group_id, key, claim, &object, &why)?;
                    }
                    Err(e) => {
                        self.with_held(group_id, key, claim, |h| {
                            h.sp.timers().load_failed(&object)
                        })?;
                        return Err(Stop::Store("read", e));
                    }
                }
            }
            if let Some(plan) = plan {
                self.seal(store, group_id, key, claim, plan).await?;
            }
        }
    }

    /// A bucket gone or damaged for good: its pending records are dropped
    /// from the index, said loudly and counted.
    fn lose(
        &self,
        group_id: &str,
        key: &PartitionKey,
        claim: TimerClaim,
        object: &TimerRef,
        why: &str,
    ) -> Result<(), Stop> {
        let lost = self.with_held(group_id, key, claim, |h| h.sp.timers().lose(object))?;
        crate::metrics::share_timers("lost", u64::from(lost));
        tracing::error!(group = group_id, partition = %key, token = %object.token, lost, why,
            "a share timer bucket is unreadable: its delayed records will not be delivered to this group");
        Ok(())
    }

    /// Deletes the buckets stored for the share-partition that its state
    /// does not list (written by an owner that died before it wrote its
    /// state, or emptied and never deleted), once per load.
    async fn sweep(
        &self,
        store: &dyn ShareStore,
        group_id: &str,
        key: &PartitionKey,
        claim: TimerClaim,
    ) -> Result<(), Stop> {
        let listed = store
            .list_timers(group_id, key)
            .await
            .map_err(|e| Stop::Store("list", e))?;
        let orphans: Vec<TimerRef> = self.with_held(group_id, key, claim, |h| {
            listed
                .into_iter()
                .filter(|r| {
                    !h.sp.timers().refers_to(&r.token)
                        && !h.timers.deletable.iter().any(|d| d.token == r.token)
                })
                .collect()
        })?;
        for object in orphans {
            store
                .delete_timers(group_id, key, &object)
                .await
                .map_err(|e| Stop::Store("delete", e))?;
            crate::metrics::share_timer_buckets("deleted", 1);
        }
        self.with_held(group_id, key, claim, |h| h.timers.swept = true)
    }

    /// Writes the plan's records (and the pending ones of the buckets it
    /// merges) as one new bucket; once stored, they leave the parked list.
    async fn seal(
        &self,
        store: &dyn ShareStore,
        group_id: &str,
        key: &PartitionKey,
        claim: TimerClaim,
        plan: SealPlan,
    ) -> Result<(), Stop> {
        let abandon =
            |this: &Self| this.with_held(group_id, key, claim, |h| h.sp.seal_abandoned(&plan));
        let mut entries = plan.entries.clone();
        for source in &plan.merge {
            match read_pending(store, group_id, key, source).await {
                Ok(pending) => entries.extend(pending),
                Err(TimerStoreError::Lost(why)) => {
                    abandon(self)?;
                    return self.lose(group_id, key, claim, &source.object, &why);
                }
                Err(e) => {
                    abandon(self)?;
                    return Err(Stop::Store("read", e));
                }
            }
        }
        entries.sort_unstable();
        entries.dedup();
        let count = entries.len() as u32;
        let bytes = match encode(&entries) {
            Ok(b) => b,
            Err(e) => {
                abandon(self)?;
                tracing::error!(group = group_id, partition = %key, error = %e, "a timer bucket was not encoded");
                return Ok(());
            }
        };
        let object = match store.put_timers(group_id, key, bytes).await {
            Ok(o) => o,
            Err(e) => {
                abandon(self)?;
                return Err(Stop::Store("put", e));
            }
        };
        let first: Vec<TimerEntry> = entries.iter().take(CHUNK as usize).copied().collect();
        let kept = self
            .with_held(group_id, key, claim, |h| {
                h.sp.sealed(&plan, object.clone(), count, first)
            })
            .unwrap_or(false);
        if kept {
            crate::metrics::share_timers("sealed", plan.entries.len() as u64);
            crate::metrics::share_timer_buckets("written", 1);
            crate::metrics::share_timer_buckets("merged", plan.merge.len() as u64);
            // The state without the records written out (and listing the
            // bucket) is written now, not with the next acknowledgement:
            // that keeps it small, and lets the merged buckets go.
            return match self.persist(store, group_id, key).await {
                Ok(()) => Ok(()),
                // Forgotten: loaded again from what was written.
                Err(_) => Err(Stop::Gone),
            };
        }
        // A record of the plan changed meanwhile, or the share-partition
        // moved: the bucket is not used.
        if let Err(e) = store.delete_timers(group_id, key, &object).await {
            tracing::warn!(group = group_id, partition = %key, error = %e,
                "an unused share timer bucket was not deleted");
        }
        self.with_held(group_id, key, claim, |_| ())
    }
}

/// Deletes a bucket nothing needs any more, counting it; a failure is
/// counted and logged (`which` says which bucket), not returned: the
/// bucket is left for a later sweep.
async fn delete_bucket(
    store: &dyn TimerStore,
    group_id: &str,
    key: &PartitionKey,
    object: &TimerRef,
    which: &str,
) {
    match store.delete_timers(group_id, key, object).await {
        Ok(()) => crate::metrics::share_timer_buckets("deleted", 1),
        Err(e) => {
            crate::metrics::share_timer_error("delete");
            tracing::warn!(group = group_id, partition = %key, error = %e, which,
                "a share timer bucket was not deleted");
        }
    }
}

/// The pending entries (`next..count`) of a bucket to merge, in one read.
async fn read_pending(
    store: &dyn TimerStore,
    group_id: &str,
    key: &PartitionKey,
    source: &MergeSource,
) -> Result<Vec<TimerEntry>, TimerStoreError> {
    let lost = |why: String| TimerStoreError::Lost(why);
    let Some((mut index, from)) = chunk_range(source.count, source.next) else {
        return Ok(Vec::new());
    };
    let bytes = store
        .read_timers(
            group_id,
            key,
            &source.object,
            from.start..object_size(source.count),
        )
        .await?;
    let mut out = Vec::with_capacity((source.count - source.next) as usize);
    while let Some((first, range)) = chunk_range(source.count, index) {
        let at = (range.start - from.start) as usize..(range.end - from.start) as usize;
        let piece = bytes
            .get(at)
            .ok_or_else(|| lost("shorter than its count".into()))?;
        let chunk = decode_chunk(piece).map_err(|e| lost(e.to_string()))?;
        let len = chunk.len() as u32;
        out.extend(
            chunk
                .into_iter()
                .skip(source.next.saturating_sub(first) as usize),
        );
        index = first + len;
    }
    Ok(out)
}
