//! A share-partition's timer index: delayed records past what its parked
//! list holds, in immutable *buckets* in the object store
//! (`floe_storage::timers` is their byte layout), each read back a chunk
//! at a time in due order. The share-partition keeps, per bucket, where
//! the object is, how many entries it holds, how many were taken back into
//! the parked list (`next`), and the due time of the next one; that much
//! is durable in its state in the metadata service, the entries are not.
//!
//! Pure and synchronous, like [`super::partition`]: the owner's timer task
//! (`super::service`) does the reads and writes this asks for, outside the
//! share-partition's lock, and reports back.
//!
//! - **Seal**: when the parked list holds many records not due yet, the
//!   later-due ones are written as a new bucket (sorted by due time, then
//!   offset) and, once it is stored, leave the parked list. Buckets of about
//!   one size are merged into the new one as it is written, four at a time
//!   (size-tiered, as an LSM tree does), so their number grows with the
//!   logarithm of the backlog and each entry is rewritten a few times.
//! - **Take**: a bucket's next entry, once due, moves back into the parked
//!   list (when it has room) and is delivered from there as any parked
//!   record. Each bucket is read in order, so `next` says exactly which of
//!   its entries are still pending.
//! - **Retire**: a bucket whose entries were all taken leaves the index;
//!   its object is deleted once a state without it is written.

use std::collections::VecDeque;
use std::sync::Arc;

use super::inspect::TimerBucketSummary;
use floe_storage::EndpointId;
pub use floe_storage::timers::TimerEntry;

/// Buckets of one size tier merged into a seal, once there are that many.
pub const MERGE_MOST: usize = 4;
/// The entries of the smallest size tier: a bucket of `n` pending entries
/// is in tier `log4(n / TIER_BASE)` (tier 0 below 4 of them).
const TIER_BASE: u64 = 1_024;
/// The most entries a bucket reaches by merging (4 MiB of entries): a merge
/// holds that many in memory while it writes.
pub const MERGED_MOST_ENTRIES: usize = 1 << 18;
/// Buckets a share-partition's state may list (a damaged state claiming
/// more is refused).
pub const MAX_BUCKETS: usize = 4_096;

/// Where a bucket is: the endpoint, the write token its key was built from
/// (the rest of the key follows from the group and partition), and its
/// size.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TimerRef {
    pub endpoint: EndpointId,
    pub token: Arc<str>,
    pub size: u64,
}

/// A bucket as the share-partition's durable state lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketState {
    pub object: TimerRef,
    /// Entries in the bucket.
    pub count: u32,
    /// Entries taken back into the parked list (the bucket's first ones).
    pub next: u32,
    /// The due time of entry `next`.
    pub next_due_ms: u64,
}

/// A read the index asks for: the chunk of `object` holding entry `index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkLoad {
    pub object: TimerRef,
    pub count: u32,
    pub index: u32,
}

/// A bucket to merge into a seal: its pending entries are `next..count`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeSource {
    pub object: TimerRef,
    pub count: u32,
    pub next: u32,
}

#[derive(Debug, Clone)]
struct Bucket {
    state: BucketState,
    /// Loaded entries from `state.next` on (empty: none loaded).
    head: VecDeque<TimerEntry>,
    loading: bool,
    /// Being merged into a seal: nothing is taken from it meanwhile.
    merging: bool,
}

impl Bucket {
    fn pending(&self) -> u32 {
        self.state.count - self.state.next
    }
}

/// The buckets of one share-partition.
#[derive(Debug, Clone, Default)]
pub struct TimerIndex {
    buckets: Vec<Bucket>,
    /// A seal is under way.
    sealing: bool,
    /// Buckets emptied and dropped from the index, not yet deleted.
    retired: Vec<TimerRef>,
}

impl TimerIndex {
    /// The index a durable state lists (nothing loaded yet).
    pub fn restore(states: &[BucketState]) -> Self {
        Self {
            buckets: states
                .iter()
                .filter(|s| s.next < s.count)
                .map(|s| Bucket {
                    state: s.clone(),
                    head: VecDeque::new(),
                    loading: false,
                    merging: false,
                })
                .collect(),
            sealing: false,
            retired: Vec::new(),
        }
    }

    /// The durable form.
    pub fn states(&self) -> Vec<BucketState> {
        self.buckets.iter().map(|b| b.state.clone()).collect()
    }

    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Entries not taken back yet, over all buckets.
    pub fn pending(&self) -> u64 {
        self.buckets.iter().map(|b| u64::from(b.pending())).sum()
    }

    /// Each bucket's next due time and entries left, by due time.
    pub fn summaries(&self) -> Vec<TimerBucketSummary> {
        let mut out: Vec<TimerBucketSummary> = self
            .buckets
            .iter()
            .filter(|b| b.pending() > 0)
            .map(|b| TimerBucketSummary {
                next_due_ms: b.state.next_due_ms,
                pending: u64::from(b.pending()),
            })
            .collect();
        out.sort_by_key(|b| b.next_due_ms);
        out
    }

    /// Entries held in memory (the loaded chunks).
    pub fn loaded(&self) -> usize {
        self.buckets.iter().map(|b| b.head.len()).sum()
    }

    /// When the next entry is due (of any bucket not being merged).
    pub fn next_due(&self) -> Option<u64> {
        self.buckets
            .iter()
            .filter(|b| !b.merging)
            .map(|b| b.state.next_due_ms)
            .min()
    }

    /// The earliest due entry at `now_ms` among loaded heads, taken out of
    /// its bucket; a bucket emptied by it is retired.
    pub fn pop_due(&mut self, now_ms: u64) -> Option<TimerEntry> {
        let (i, _) = self
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| !b.merging)
            .filter_map(|(i, b)| b.head.front().map(|e| (i, *e)))
            .filter(|(_, e)| e.due_ms <= now_ms)
            .min_by_key(|(_, e)| *e)?;
        let bucket = &mut self.buckets[i];
        let entry = bucket.head.pop_front()?;
        bucket.state.next += 1;
        if let Some(next) = bucket.head.front() {
            bucket.state.next_due_ms = next.due_ms;
        }
        if bucket.state.next >= bucket.state.count {
            let done = self.buckets.remove(i);
            self.retired.push(done.state.object);
        }
        Some(entry)
    }

    /// Whether a bucket waits for a chunk to be read ([`Self::loads`]).
    pub fn wants_load(&self) -> bool {
        self.buckets
            .iter()
            .any(|b| b.head.is_empty() && !b.loading && !b.merging && b.state.next < b.state.count)
    }

    /// Whether a seal is under way.
    pub fn is_sealing(&self) -> bool {
        self.sealing
    }

    /// The chunks to read: one per bucket with nothing loaded (and not
    /// being read or merged already).
    pub fn loads(&mut self) -> Vec<ChunkLoad> {
        let mut out = Vec::new();
        for b in &mut self.buckets {
            if b.head.is_empty() && !b.loading && !b.merging && b.state.next < b.state.count {
                b.loading = true;
                out.push(ChunkLoad {
                    object: b.state.object.clone(),
                    count: b.state.count,
                    index: b.state.next,
                });
            }
        }
        out
    }

    /// A chunk read: `entries` are the bucket's from index `first` on.
    /// Returns false if they do not fit what the bucket says (its count,
    /// or entries out of order with its next due time).
    pub fn chunk_loaded(
        &mut self,
        object: &TimerRef,
        first: u32,
        entries: Vec<TimerEntry>,
    ) -> bool {
        let Some(b) = self.buckets.iter_mut().find(|b| &b.state.object == object) else {
            return true;
        };
        b.loading = false;
        let next = b.state.next;
        let end = first.saturating_add(entries.len() as u32);
        if next < first || next >= end || end > b.state.count {
            return false;
        }
        b.head = entries.into_iter().skip((next - first) as usize).collect();
        if let Some(e) = b.head.front() {
            b.state.next_due_ms = e.due_ms;
        }
        true
    }

    /// A chunk could not be read now (tried again later).
    pub fn load_failed(&mut self, object: &TimerRef) {
        if let Some(b) = self.buckets.iter_mut().find(|b| &b.state.object == object) {
            b.loading = false;
        }
    }

    /// A bucket that is gone or unreadable for good: dropped, with its
    /// pending entries (the caller says so loudly). Returns how many.
    pub fn lose(&mut self, object: &TimerRef) -> u32 {
        match self.buckets.iter().position(|b| &b.state.object == object) {
            Some(i) => self.buckets.remove(i).pending(),
            None => 0,
        }
    }

    /// Whether a seal may start (none under way), marking one under way.
    pub fn begin_seal(&mut self) -> bool {
        !std::mem::replace(&mut self.sealing, true)
    }

    /// Buckets to merge into a seal of `adding` entries, marked as being
    /// merged: [`MERGE_MOST`] of the smallest size tier that has that many,
    /// as long as the merged bucket stays within [`MERGED_MOST_ENTRIES`].
    pub fn merge_sources(&mut self, adding: usize) -> Vec<MergeSource> {
        let tier = |pending: u32| {
            let mut t = 0u32;
            let mut n = u64::from(pending) / TIER_BASE;
            while n >= 4 {
                n /= 4;
                t += 1;
            }
            t
        };
        let mut tiers: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
        for (i, b) in self.buckets.iter().enumerate() {
            if !b.loading && !b.merging {
                tiers.entry(tier(b.pending())).or_default().push(i);
            }
        }
        let Some(mut chosen) = tiers.into_values().find(|v| v.len() >= MERGE_MOST) else {
            return Vec::new();
        };
        chosen.sort_by_key(|&i| self.buckets[i].pending());
        chosen.truncate(MERGE_MOST);
        let total: usize = adding
            + chosen
                .iter()
                .map(|&i| self.buckets[i].pending() as usize)
                .sum::<usize>();
        if total > MERGED_MOST_ENTRIES {
            return Vec::new();
        }
        chosen
            .into_iter()
            .map(|i| {
                let b = &mut self.buckets[i];
                b.merging = true;
                MergeSource {
                    object: b.state.object.clone(),
                    count: b.state.count,
                    next: b.state.next,
                }
            })
            .collect()
    }

    /// The seal is stored as `bucket` (sorted `entries`, of which the first
    /// chunk is kept loaded): the merged buckets leave the index (retired).
    pub fn sealed(
        &mut self,
        bucket: BucketState,
        first_chunk: Vec<TimerEntry>,
        merged: &[MergeSource],
    ) {
        self.sealing = false;
        for m in merged {
            if let Some(i) = self.buckets.iter().position(|b| b.state.object == m.object) {
                let b = self.buckets.remove(i);
                self.retired.push(b.state.object);
            }
        }
        if bucket.count > 0 {
            self.buckets.push(Bucket {
                state: bucket,
                head: first_chunk.into(),
                loading: false,
                merging: false,
            });
        }
    }

    /// The seal was not stored (or not kept): the buckets to merge are
    /// taken from again.
    pub fn seal_abandoned(&mut self, merged: &[MergeSource]) {
        self.sealing = false;
        for b in &mut self.buckets {
            if merged.iter().any(|m| m.object == b.state.object) {
                b.merging = false;
            }
        }
    }

    /// Buckets dropped since the last call, to delete once a state without
    /// them is written.
    pub fn take_retired(&mut self) -> Vec<TimerRef> {
        std::mem::take(&mut self.retired)
    }

    /// Whether `token` names a bucket listed or retired here (the sweep
    /// of objects nothing refers to keeps those).
    pub fn refers_to(&self, token: &str) -> bool {
        self.buckets.iter().any(|b| &*b.state.object.token == token)
            || self.retired.iter().any(|r| &*r.token == token)
    }
}

/// Why a timer store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimerStoreError {
    /// The bucket is gone or its bytes are damaged: reading again will not
    /// help.
    #[error("timer bucket lost: {0}")]
    Lost(String),
    /// The store failed now; it may work later.
    #[error("timer store: {0}")]
    Failed(String),
}

/// Where a share-partition's timer buckets are kept: the object store,
/// under a prefix of the partition and group (`share-timers/…`).
#[async_trait::async_trait]
pub trait TimerStore: Send + Sync {
    /// Writes a new bucket; returns where it landed.
    async fn put_timers(
        &self,
        group: &str,
        key: &floe_storage::PartitionKey,
        bytes: bytes::Bytes,
    ) -> Result<TimerRef, TimerStoreError>;
    /// Reads a byte range of a bucket.
    async fn read_timers(
        &self,
        group: &str,
        key: &floe_storage::PartitionKey,
        object: &TimerRef,
        range: std::ops::Range<u64>,
    ) -> Result<bytes::Bytes, TimerStoreError>;
    /// Deletes a bucket (one already gone is no error).
    async fn delete_timers(
        &self,
        group: &str,
        key: &floe_storage::PartitionKey,
        object: &TimerRef,
    ) -> Result<(), TimerStoreError>;
    /// Every bucket stored for the group on the partition.
    async fn list_timers(
        &self,
        group: &str,
        key: &floe_storage::PartitionKey,
    ) -> Result<Vec<TimerRef>, TimerStoreError>;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn obj(t: &str) -> TimerRef {
        TimerRef {
            endpoint: EndpointId::new("default"),
            token: Arc::from(t),
            size: 0,
        }
    }

    fn e(due_ms: u64, offset: i64) -> TimerEntry {
        TimerEntry { due_ms, offset }
    }

    fn bucket(t: &str, entries: &[TimerEntry]) -> (BucketState, Vec<TimerEntry>) {
        (
            BucketState {
                object: obj(t),
                count: entries.len() as u32,
                next: 0,
                next_due_ms: entries[0].due_ms,
            },
            entries.to_vec(),
        )
    }

    #[test]
    fn entries_come_out_when_due_in_due_order_across_buckets() {
        let mut ix = TimerIndex::default();
        assert!(ix.begin_seal());
        let (s, first) = bucket("a", &[e(10, 5), e(30, 1)]);
        ix.sealed(s, first, &[]);
        assert!(ix.begin_seal());
        let (s, first) = bucket("b", &[e(20, 9)]);
        ix.sealed(s, first, &[]);
        assert_eq!(ix.next_due(), Some(10));
        assert_eq!(ix.pop_due(5), None);
        assert_eq!(ix.pop_due(100), Some(e(10, 5)));
        assert_eq!(ix.pop_due(100), Some(e(20, 9)));
        // Bucket b is empty: retired once.
        assert_eq!(ix.take_retired(), vec![obj("b")]);
        assert_eq!(ix.states()[0].next, 1);
        assert_eq!(ix.states()[0].next_due_ms, 30);
        assert_eq!(ix.pop_due(100), Some(e(30, 1)));
        assert_eq!(ix.buckets(), 0);
        assert_eq!(ix.take_retired(), vec![obj("a")]);
    }

    #[test]
    fn a_restored_bucket_is_read_from_its_next_entry() {
        let state = BucketState {
            object: obj("a"),
            count: 300,
            next: 258,
            next_due_ms: 40,
        };
        let mut ix = TimerIndex::restore(std::slice::from_ref(&state));
        // Nothing loaded: nothing taken, though it is due.
        assert_eq!(ix.pop_due(100), None);
        assert_eq!(ix.next_due(), Some(40));
        let loads = ix.loads();
        assert_eq!(
            loads,
            vec![ChunkLoad {
                object: obj("a"),
                count: 300,
                index: 258
            }]
        );
        // Asked once while under way.
        assert!(ix.loads().is_empty());
        let chunk: Vec<_> = (256..300).map(|i| e(i as u64 - 218, i)).collect();
        assert!(ix.chunk_loaded(&obj("a"), 256, chunk));
        assert_eq!(ix.pop_due(100), Some(e(40, 258)));
        // A chunk that does not hold the next entry is refused.
        let mut other = TimerIndex::restore(&[state]);
        other.loads();
        assert!(!other.chunk_loaded(&obj("a"), 0, vec![e(1, 1)]));
    }

    #[test]
    fn small_buckets_are_merged_and_not_taken_from_meanwhile() {
        let mut ix = TimerIndex::default();
        for i in 0..8 {
            assert!(ix.begin_seal());
            let entries: Vec<_> = (0..=i)
                .map(|j| e(10 + j as u64, (i * 10 + j) as i64))
                .collect();
            let (s, first) = bucket(&format!("b{i}"), &entries);
            ix.sealed(s, first, &[]);
        }
        assert!(ix.begin_seal());
        assert!(!ix.begin_seal(), "one seal at a time");
        let merged = ix.merge_sources(100);
        assert_eq!(merged.len(), MERGE_MOST);
        // The smallest: one, two, three and four entries.
        let sizes: Vec<u32> = merged.iter().map(|m| m.count).collect();
        assert_eq!(sizes, vec![1, 2, 3, 4]);
        // Being merged: not taken from (b0 to b3 hold the earliest
        // entries, offsets 0 to 33); the others are.
        let popped = ix.pop_due(10).unwrap();
        assert_eq!(popped, e(10, 40));
        ix.seal_abandoned(&merged);
        assert_eq!(ix.pop_due(10), Some(e(10, 0)));
        // b0 emptied and retired: seven left, and one more makes eight.
        assert_eq!(ix.take_retired(), vec![obj("b0")]);
        assert!(ix.begin_seal());
        let (s, first) = bucket("c", &[e(50, 99)]);
        ix.sealed(s, first, &[]);
        assert!(ix.begin_seal());
        let merged = ix.merge_sources(0);
        assert_eq!(merged.len(), MERGE_MOST);
        let (s, first) = bucket("m", &[e(11, 11)]);
        ix.sealed(s, first, &merged);
        assert_eq!(ix.buckets(), 8 - MERGE_MOST + 1);
        // Merged buckets stay known until their deletion is due.
        assert!(ix.refers_to("m") && ix.refers_to("b1"));
        assert_eq!(ix.take_retired().len(), MERGE_MOST);
        assert!(!ix.refers_to("b1"));
        // A merge never grows a bucket past the most.
        let mut big = TimerIndex::default();
        for i in 0..8 {
            let state = BucketState {
                object: obj(&format!("big{i}")),
                count: MERGED_MOST_ENTRIES as u32,
                next: 0,
                next_due_ms: 1,
            };
            big.buckets.push(Bucket {
                state,
                head: VecDeque::new(),
                loading: false,
                merging: false,
            });
        }
        assert!(big.merge_sources(1).is_empty());
    }

    #[test]
    fn only_buckets_of_one_size_tier_are_merged() {
        let sized = |t: &str, count: u32| Bucket {
            state: BucketState {
                object: obj(t),
                count,
                next: 0,
                next_due_ms: 1,
            },
            head: VecDeque::new(),
            loading: false,
            merging: false,
        };
        let mut ix = TimerIndex::default();
        // Three small ones (tier 0) and one of 5,000 entries (tier 1).
        for (t, n) in [("a", 1_500), ("b", 1_500), ("c", 1_600), ("d", 5_000)] {
            ix.buckets.push(sized(t, n));
        }
        assert!(ix.merge_sources(1_500).is_empty());
        // A fourth small one: the four small ones merge, not the big one.
        ix.buckets.push(sized("e", 1_400));
        let merged: Vec<String> = ix
            .merge_sources(1_500)
            .iter()
            .map(|m| m.object.token.to_string())
            .collect();
        assert_eq!(merged, vec!["e", "a", "b", "c"]);
    }
}
